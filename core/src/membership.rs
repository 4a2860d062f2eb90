//! Heartbeat membership for one bucket (`membership/`, `sink/membership/`, `notifier/membership/`).
//!
//! A member refreshes its key every ttl/3; the store drops the key one ttl after the last refresh and every
//! watcher sees that as a delete. A member is live while its key is. The store's revisions order every put
//! and delete, so two observers that reached the same revision hold the same live set.

use crate::model::{Bucket, MemberId, MemberRef};
use crate::time::Time;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// A change to a bucket's keys, as a store watcher reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObservation {
    pub bucket: Bucket,
    /// The store's revision of this change; strictly increasing per bucket.
    pub rev: u64,
    pub change: MemberChange,
    /// The cluster format the member's value announces (`crate::format`); 1 for a `Down`, and for a value of a
    /// build before v0.1.0.
    pub format: u32,
}

impl MemberObservation {
    /// An observation of a member of format 1 (what every member spoke before v0.1.0).
    pub fn new(bucket: Bucket, rev: u64, change: MemberChange) -> MemberObservation {
        MemberObservation { bucket, rev, change, format: crate::format::OLDEST_CLUSTER_FORMAT }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// The key was written (a join or a refresh) by this member.
    Up(MemberRef),
    /// The key is gone: deleted on a clean leave, or expired.
    Down(MemberId),
}

impl MemberChange {
    /// The member whose key changed.
    pub fn id(&self) -> &MemberId {
        match self {
            MemberChange::Up(m) => &m.id,
            MemberChange::Down(id) => id,
        }
    }
}

/// What a view must observe to catch up with a fresh snapshot of its bucket (`LiveSet::resync`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resync {
    /// In revision order, each above the view's revision: feed them to the view (and to the member's
    /// `Membership`) as if the watch had reported them.
    pub observations: Vec<MemberObservation>,
    /// Members that should go down but for which no revision was left (the store lost keys without writing
    /// markers, say an operator purged the bucket). They stay live in the view: a caller logs them.
    pub unplaced: Vec<MemberId>,
}

/// What a bucket's observers agree on: the live members as of a store revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveSet {
    /// Each live member's incarnation and the cluster format it speaks.
    live: BTreeMap<MemberId, (u64, u32)>,
    rev: u64,
    /// Observations that arrived out of order or twice (revision not above the last one).
    pub ignored_total: u64,
}

impl LiveSet {
    /// Applies one observation. Returns whether the live set changed (a refresh of a live key does not).
    pub fn observe(&mut self, obs: &MemberObservation) -> bool {
        if obs.rev <= self.rev {
            self.ignored_total += 1;
            return false;
        }
        self.rev = obs.rev;
        match &obs.change {
            MemberChange::Up(m) => {
                self.live.insert(m.id.clone(), (m.incarnation, obs.format)).map(|(inc, _)| inc) != Some(m.incarnation)
            }
            MemberChange::Down(id) => self.live.remove(id).is_some(),
        }
    }

    /// Each live member's id with the cluster format it speaks, sorted by id.
    pub fn formats(&self) -> impl Iterator<Item = (&MemberId, u32)> {
        self.live.iter().map(|(id, (_, f))| (id, *f))
    }

    /// The lowest cluster format a live member speaks (`None`: nobody is live).
    pub fn lowest_format(&self) -> Option<u32> {
        self.live.values().map(|(_, f)| *f).min()
    }

    pub fn rev(&self) -> u64 {
        self.rev
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn incarnation(&self, id: &MemberId) -> Option<u64> {
        self.live.get(id).map(|(inc, _)| *inc)
    }

    /// Live members sorted by id (the epoch record's order).
    pub fn members(&self) -> Vec<MemberRef> {
        self.live.iter().map(|(id, (inc, _))| MemberRef { id: id.clone(), incarnation: *inc }).collect()
    }

    /// Catches the view up with a fresh snapshot of the store after the watch that fed it was lost: `snapshot`
    /// is the last change of every key still in the store (any bucket; a put, or a delete or expiry marker while
    /// the marker lives), each at its real revision, and `upto` a revision the store had reached before the
    /// snapshot was read, so every change a new watch reports after the snapshot is above it.
    ///
    /// Changes the view has already seen (not above its revision) are left out. A member the view holds live
    /// that the snapshot does not name lost its key while the watch was away, and the marker that said so is
    /// gone too (markers outlive a key by a bounded time): it goes down, at a revision of its own, the highest
    /// still free at or below `upto`, above the view's, and not used by a change of this bucket in the
    /// snapshot. There is one for each such member: the marker that removed its key had one in that range. So
    /// revisions only grow, a later change is never taken for an old one, and the view never claims to have
    /// seen the store past `upto`, where the snapshot shows it. (Observing the result in order makes the live
    /// set the snapshot's.)
    pub fn resync(&self, bucket: Bucket, snapshot: &[MemberObservation], upto: u64) -> Resync {
        let ours: Vec<&MemberObservation> = snapshot.iter().filter(|o| o.bucket == bucket).collect();
        let named: BTreeSet<&MemberId> = ours.iter().map(|o| o.change.id()).collect();
        let mut observations: Vec<MemberObservation> =
            ours.iter().filter(|o| o.rev > self.rev).map(|o| (*o).clone()).collect();
        let taken: BTreeSet<u64> = observations.iter().map(|o| o.rev).collect();
        let mut free = (self.rev + 1..=upto).rev().filter(|r| !taken.contains(r));
        let mut unplaced = Vec::new();
        for id in self.live.keys().filter(|id| !named.contains(id)) {
            match free.next() {
                Some(rev) => observations.push(MemberObservation::new(bucket, rev, MemberChange::Down(id.clone()))),
                None => unplaced.push(id.clone()),
            }
        }
        observations.sort_by_key(|o| o.rev);
        // A snapshot names each key once, so no two of its changes share a revision; kept strict regardless.
        observations.dedup_by_key(|o| o.rev);
        Resync { observations, unplaced }
    }

    /// Whether the live set is exactly `members` (sorted by id).
    pub fn equals(&self, members: &[MemberRef]) -> bool {
        self.live.len() == members.len()
            && self.live.iter().zip(members).all(|((id, (inc, _)), m)| *id == m.id && *inc == m.incarnation)
    }
}

/// What a member asks its driver to do with its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipOutput {
    /// Write the key with a time-to-live of `ttl` (`PUT <prefix><id>`, value: the incarnation).
    PutHeartbeat { bucket: Bucket, member: MemberRef, ttl: Duration },
    /// Delete the key at once: a clean leave, so the others need not wait for the ttl.
    DeleteHeartbeat { bucket: Bucket, member: MemberRef },
}

/// How long a member knows its own key is alive: a lease that runs `span` from the emission of each heartbeat
/// the store acknowledged (the key expires one ttl after the store took the put, which is after it was sent).
/// A member that acts only while it holds the lease acts only while the others count it live: after a pause,
/// a cut or a store that stopped answering, it holds none until a heartbeat written since is acknowledged.
/// The notifier claims deliveries on a lease of two thirds of the ttl; an engine claims ingress writes on one
/// of the whole ttl (a pause past it is one its key may not have survived).
///
/// The driver answers every `PutHeartbeat` once, in order (`written`); the role tells the lease of each put it
/// carries out (`sent`).
#[derive(Clone, Debug)]
pub struct Lease {
    span: Duration,
    /// Emission times of heartbeats the store has not answered yet, oldest first.
    unanswered: VecDeque<Time>,
    until: Option<Time>,
}

impl Lease {
    pub fn new(span: Duration) -> Lease {
        Lease { span, unanswered: VecDeque::new(), until: None }
    }

    /// A heartbeat put goes out at `now`.
    pub fn sent(&mut self, now: Time) {
        self.unanswered.push_back(now);
    }

    /// The oldest put not answered yet reached the store (`ok`) or failed.
    pub fn written(&mut self, ok: bool) {
        if let Some(t) = self.unanswered.pop_front() {
            if ok {
                let until = t + self.span;
                self.until = Some(self.until.map_or(until, |u| u.max(until)));
            }
        }
    }

    /// Whether the key is surely alive at `now`.
    pub fn holds(&self, now: Time) -> bool {
        self.until.is_some_and(|t| now < t)
    }

    /// When the lease runs out, if one was ever held.
    pub fn until(&self) -> Option<Time> {
        self.until
    }
}

/// One process's membership in one bucket: its heartbeat timer and its view of the bucket.
#[derive(Clone, Debug)]
pub struct Membership {
    bucket: Bucket,
    me: MemberRef,
    ttl: Duration,
    view: LiveSet,
    next_heartbeat: Option<Time>,
    leaving: bool,
    pending: Vec<MembershipOutput>,
    /// Another process wrote our key with another incarnation: two processes share one `-id`.
    pub id_conflicts_total: u64,
}

impl Membership {
    pub fn new(bucket: Bucket, me: MemberRef, ttl: Duration) -> Membership {
        Membership {
            bucket,
            me,
            ttl,
            view: LiveSet::default(),
            next_heartbeat: None,
            leaving: false,
            pending: Vec::new(),
            id_conflicts_total: 0,
        }
    }

    pub fn bucket(&self) -> Bucket {
        self.bucket
    }

    pub fn me(&self) -> &MemberRef {
        &self.me
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The refresh period: a third of the ttl, so two refreshes may be lost before the key expires.
    pub fn refresh_every(&self) -> Duration {
        self.ttl / 3
    }

    pub fn view(&self) -> &LiveSet {
        &self.view
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving
    }

    /// Join: write the key now and every ttl/3 from now on.
    pub fn join(&mut self, now: Time) {
        self.leaving = false;
        self.heartbeat(now);
    }

    /// Leave cleanly: delete the key now and stop refreshing it.
    pub fn leave(&mut self) {
        if self.leaving {
            return;
        }
        self.leaving = true;
        self.next_heartbeat = None;
        self.pending.push(MembershipOutput::DeleteHeartbeat { bucket: self.bucket, member: self.me.clone() });
    }

    fn heartbeat(&mut self, now: Time) {
        self.pending.push(MembershipOutput::PutHeartbeat {
            bucket: self.bucket,
            member: self.me.clone(),
            ttl: self.ttl,
        });
        self.next_heartbeat = Some(now + self.refresh_every());
    }

    /// Feeds one watcher observation. Returns whether the live set changed.
    pub fn handle_observation(&mut self, now: Time, obs: &MemberObservation) -> bool {
        if obs.bucket != self.bucket {
            return false;
        }
        let changed = self.view.observe(obs);
        match &obs.change {
            // Our key expired while we were alive (a pause, a lost refresh): write it again at once.
            MemberChange::Down(id)
                if *id == self.me.id && changed && !self.leaving && self.next_heartbeat.is_some() =>
            {
                self.heartbeat(now)
            }
            // Only a *newer* incarnation is another live process: an older one is our own previous life (a
            // restart within the ttl), whose key our first heartbeat overwrites.
            MemberChange::Up(m) if m.id == self.me.id && m.incarnation > self.me.incarnation && changed => {
                self.id_conflicts_total += 1;
            }
            _ => {}
        }
        changed
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        self.next_heartbeat
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.next_heartbeat.is_some_and(|t| t <= now) {
            self.heartbeat(now);
        }
    }

    pub fn poll_output(&mut self) -> Option<MembershipOutput> {
        if self.pending.is_empty() {
            None
        } else {
            Some(self.pending.remove(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, inc: u64) -> MemberRef {
        MemberRef { id: MemberId::new(id).unwrap(), incarnation: inc }
    }

    fn obs(rev: u64, change: MemberChange) -> MemberObservation {
        MemberObservation::new(Bucket::Engine, rev, change)
    }

    fn drain(ms: &mut Membership) -> Vec<MembershipOutput> {
        std::iter::from_fn(|| ms.poll_output()).collect()
    }

    #[test]
    fn a_lease_runs_from_the_emission_of_each_acknowledged_heartbeat() {
        let mut l = Lease::new(Duration::from_secs(9));
        assert!(!l.holds(Time(0)), "no lease before a heartbeat is acknowledged");
        l.sent(Time(0));
        l.sent(Time(3000));
        assert!(!l.holds(Time(100)), "sent is not acknowledged");
        l.written(true);
        assert!(l.holds(Time(8999)) && !l.holds(Time(9000)), "nine seconds from the first put's emission");
        l.written(false);
        assert_eq!(l.until(), Some(Time(9000)), "a failed put extends nothing");
        l.sent(Time(6000));
        l.written(true);
        assert!(l.holds(Time(14_999)) && !l.holds(Time(15_000)));
        l.written(true);
        assert_eq!(l.until(), Some(Time(15_000)), "an answer with no put out changes nothing");
    }

    #[test]
    fn heartbeat_every_third_of_the_ttl() {
        let mut ms = Membership::new(Bucket::Engine, m("a", 1), Duration::from_secs(9));
        ms.join(Time(0));
        assert_eq!(drain(&mut ms).len(), 1);
        assert_eq!(ms.poll_timeout(), Some(Time(3000)));
        ms.handle_timeout(Time(2999));
        assert!(drain(&mut ms).is_empty());
        ms.handle_timeout(Time(3000));
        assert!(matches!(drain(&mut ms)[..], [MembershipOutput::PutHeartbeat { .. }]));
        assert_eq!(ms.poll_timeout(), Some(Time(6000)));
    }

    #[test]
    fn a_member_is_live_while_its_key_is() {
        let mut ms = Membership::new(Bucket::Engine, m("a", 1), Duration::from_secs(9));
        assert!(ms.handle_observation(Time(0), &obs(1, MemberChange::Up(m("b", 1)))));
        assert!(!ms.handle_observation(Time(0), &obs(2, MemberChange::Up(m("b", 1)))), "refresh is no change");
        assert_eq!(ms.view().members(), vec![m("b", 1)]);
        assert!(ms.handle_observation(Time(0), &obs(3, MemberChange::Down(m("b", 1).id))));
        assert!(ms.view().is_empty());
    }

    #[test]
    fn a_restarted_process_is_a_new_member() {
        let mut view = LiveSet::default();
        assert!(view.observe(&obs(1, MemberChange::Up(m("b", 1)))));
        assert!(view.observe(&obs(2, MemberChange::Up(m("b", 2)))));
        assert_eq!(view.members(), vec![m("b", 2)]);
    }

    #[test]
    fn clean_leave_deletes_the_key_and_stops_refreshing() {
        let mut ms = Membership::new(Bucket::Sink, m("a", 1), Duration::from_secs(9));
        ms.join(Time(0));
        drain(&mut ms);
        ms.leave();
        assert_eq!(drain(&mut ms), vec![MembershipOutput::DeleteHeartbeat { bucket: Bucket::Sink, member: m("a", 1) }]);
        assert_eq!(ms.poll_timeout(), None);
    }

    #[test]
    fn own_key_expiring_while_alive_rejoins_at_once() {
        let mut ms = Membership::new(Bucket::Engine, m("a", 1), Duration::from_secs(9));
        ms.join(Time(0));
        ms.handle_observation(Time(1), &obs(1, MemberChange::Up(m("a", 1))));
        drain(&mut ms);
        ms.handle_observation(Time(20_000), &obs(2, MemberChange::Down(m("a", 1).id)));
        assert!(matches!(drain(&mut ms)[..], [MembershipOutput::PutHeartbeat { .. }]));
    }

    #[test]
    fn old_or_repeated_revisions_are_ignored() {
        let mut view = LiveSet::default();
        view.observe(&obs(5, MemberChange::Up(m("b", 1))));
        assert!(!view.observe(&obs(5, MemberChange::Down(m("b", 1).id))));
        assert!(!view.observe(&obs(4, MemberChange::Down(m("b", 1).id))));
        assert_eq!(view.len(), 1);
        assert_eq!(view.ignored_total, 2);
    }

    #[test]
    fn our_own_older_incarnation_is_not_a_conflict_but_a_newer_one_is() {
        let mut ms = Membership::new(Bucket::Engine, m("a", 5), Duration::from_secs(9));
        ms.handle_observation(Time(0), &obs(1, MemberChange::Up(m("a", 4))));
        assert_eq!(ms.id_conflicts_total, 0, "a restart within the ttl sees its previous key");
        ms.handle_observation(Time(0), &obs(2, MemberChange::Up(m("a", 5))));
        ms.handle_observation(Time(0), &obs(3, MemberChange::Up(m("a", 6))));
        assert_eq!(ms.id_conflicts_total, 1, "a second process with our id");
    }

    fn apply(view: &mut LiveSet, observations: &[MemberObservation]) {
        for o in observations {
            view.observe(&obs(o.rev, o.change.clone()));
        }
    }

    #[test]
    fn members_missing_from_a_fresh_snapshot_go_down() {
        let mut view = LiveSet::default();
        for (rev, id) in [(3, "b"), (4, "c"), (5, "d")] {
            view.observe(&obs(rev, MemberChange::Up(m(id, 1))));
        }
        // While the watch was away: c's key expired (its marker is gone too), d refreshed, e joined; the store
        // was at revision 12 when the snapshot was read. b was not written since the view saw it.
        let snapshot = [
            obs(3, MemberChange::Up(m("b", 1))),
            obs(8, MemberChange::Up(m("d", 1))),
            obs(9, MemberChange::Up(m("e", 1))),
        ];
        let r = view.resync(Bucket::Engine, &snapshot, 12);
        assert!(r.unplaced.is_empty());
        assert_eq!(
            r.observations,
            vec![
                obs(8, MemberChange::Up(m("d", 1))),
                obs(9, MemberChange::Up(m("e", 1))),
                obs(12, MemberChange::Down(m("c", 1).id)),
            ],
            "what the view saw is not repeated; the missing member goes down at the highest free revision"
        );
        let ignored = view.ignored_total;
        apply(&mut view, &r.observations);
        assert_eq!(view.ignored_total, ignored, "no observation is taken for an old one");
        assert_eq!(view.members(), vec![m("b", 1), m("d", 1), m("e", 1)]);
        assert_eq!(view.rev(), 12);
        assert!(view.observe(&obs(13, MemberChange::Down(m("e", 1).id))), "the new watch's next change is taken");
    }

    #[test]
    fn a_missing_members_down_never_takes_the_revision_of_a_snapshot_change() {
        let mut view = LiveSet::default();
        view.observe(&obs(4, MemberChange::Up(m("b", 1))));
        view.observe(&obs(5, MemberChange::Up(m("c", 1))));
        let snapshot = [obs(7, MemberChange::Up(m("b", 1)))];
        let r = view.resync(Bucket::Engine, &snapshot, 7);
        assert_eq!(
            r.observations,
            vec![obs(6, MemberChange::Down(m("c", 1).id)), obs(7, MemberChange::Up(m("b", 1)))],
            "in revision order"
        );
        // No revision left above the view's: the store lost a key without a marker. Said, not invented.
        let r = view.resync(Bucket::Engine, &[obs(6, MemberChange::Up(m("x", 1))), snapshot[0].clone()], 7);
        assert_eq!(r.unplaced, vec![m("c", 1).id]);
        assert_eq!(r.observations.len(), 2);
    }

    #[test]
    fn a_marker_still_in_the_snapshot_is_the_members_down() {
        let mut view = LiveSet::default();
        view.observe(&obs(2, MemberChange::Up(m("b", 1))));
        let r = view.resync(Bucket::Engine, &[obs(6, MemberChange::Down(m("b", 1).id))], 9);
        assert_eq!(r.observations, vec![obs(6, MemberChange::Down(m("b", 1).id))], "at its own revision");
    }

    #[test]
    fn the_first_snapshot_is_the_snapshot_itself_and_other_buckets_are_left_out() {
        let sink = MemberObservation::new(Bucket::Sink, 2, MemberChange::Up(m("s", 1)));
        let snapshot = [obs(1, MemberChange::Up(m("a", 1))), sink, obs(3, MemberChange::Down(m("z", 1).id))];
        let r = LiveSet::default().resync(Bucket::Engine, &snapshot, 3);
        assert_eq!(r.observations, vec![snapshot[0].clone(), snapshot[2].clone()]);
    }

    #[test]
    fn a_member_whose_own_key_is_missing_from_the_snapshot_writes_it_again_at_once() {
        let mut ms = Membership::new(Bucket::Engine, m("a", 1), Duration::from_secs(9));
        ms.join(Time(0));
        ms.handle_observation(Time(1), &obs(1, MemberChange::Up(m("a", 1))));
        drain(&mut ms);
        // The watch was away longer than the ttl and the marker's life: the key expired unseen.
        let r = ms.view().resync(Bucket::Engine, &[], 40);
        for o in &r.observations {
            ms.handle_observation(Time(30_000), o);
        }
        assert!(matches!(drain(&mut ms)[..], [MembershipOutput::PutHeartbeat { .. }]));
    }

    #[test]
    fn other_buckets_are_not_ours() {
        let mut ms = Membership::new(Bucket::Notifier, m("a", 1), Duration::from_secs(9));
        let o = MemberObservation::new(Bucket::Engine, 1, MemberChange::Up(m("b", 1)));
        assert!(!ms.handle_observation(Time(0), &o));
        assert!(ms.view().is_empty());
    }
}
