//! Heartbeat membership for one bucket (`membership/`, `sink/membership/`, `notifier/membership/`).
//!
//! A member refreshes its key every ttl/3; the store drops the key one ttl after the last refresh and every
//! watcher sees that as a delete. A member is live while its key is. The store's revisions order every put
//! and delete, so two observers that reached the same revision hold the same live set.

use crate::model::{Bucket, MemberId, MemberRef};
use crate::time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// A change to a bucket's keys, as a store watcher reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObservation {
    pub bucket: Bucket,
    /// The store's revision of this change; strictly increasing per bucket.
    pub rev: u64,
    pub change: MemberChange,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// The key was written (a join or a refresh) by this member.
    Up(MemberRef),
    /// The key is gone: deleted on a clean leave, or expired.
    Down(MemberId),
}

/// What a bucket's observers agree on: the live members as of a store revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveSet {
    live: BTreeMap<MemberId, u64>,
    rev: u64,
    /// Observations that arrived out of order or twice (revision not above the last one).
    pub ignored_total: u64,
}

impl LiveSet {
    /// Applies one observation. Returns whether the live set changed (a refresh of a live key does not).
    pub fn observe(&mut self, rev: u64, change: &MemberChange) -> bool {
        if rev <= self.rev {
            self.ignored_total += 1;
            return false;
        }
        self.rev = rev;
        match change {
            MemberChange::Up(m) => self.live.insert(m.id.clone(), m.incarnation) != Some(m.incarnation),
            MemberChange::Down(id) => self.live.remove(id).is_some(),
        }
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
        self.live.get(id).copied()
    }

    /// Live members sorted by id (the epoch record's order).
    pub fn members(&self) -> Vec<MemberRef> {
        self.live.iter().map(|(id, inc)| MemberRef { id: id.clone(), incarnation: *inc }).collect()
    }

    /// Whether the live set is exactly `members` (sorted by id).
    pub fn equals(&self, members: &[MemberRef]) -> bool {
        self.live.len() == members.len()
            && self.live.iter().zip(members).all(|((id, inc), m)| *id == m.id && *inc == m.incarnation)
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
        let changed = self.view.observe(obs.rev, &obs.change);
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
        MemberObservation { bucket: Bucket::Engine, rev, change }
    }

    fn drain(ms: &mut Membership) -> Vec<MembershipOutput> {
        std::iter::from_fn(|| ms.poll_output()).collect()
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
        assert!(view.observe(1, &MemberChange::Up(m("b", 1))));
        assert!(view.observe(2, &MemberChange::Up(m("b", 2))));
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
        view.observe(5, &MemberChange::Up(m("b", 1)));
        assert!(!view.observe(5, &MemberChange::Down(m("b", 1).id)));
        assert!(!view.observe(4, &MemberChange::Down(m("b", 1).id)));
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

    #[test]
    fn other_buckets_are_not_ours() {
        let mut ms = Membership::new(Bucket::Notifier, m("a", 1), Duration::from_secs(9));
        let o = MemberObservation { bucket: Bucket::Engine, rev: 1, change: MemberChange::Up(m("b", 1)) };
        assert!(!ms.handle_observation(Time(0), &o));
        assert!(ms.view().is_empty());
    }
}
