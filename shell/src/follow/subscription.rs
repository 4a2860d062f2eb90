//! The membership watch and the log follower of a role merged into one stream of events for the role's loop
//! (`Subscription`), and the live sets of every bucket (`Buckets`). A role's loop only says what each event means
//! to it.

use crate::coord::{Coordination, Events, LogEvent, MemberEvent};
use crate::metrics::Exposition;
use jaque_core::{Bucket, LiveSet, LogEntry, MemberObservation};
use std::collections::{BTreeMap, VecDeque};
use tokio::sync::mpsc::UnboundedReceiver;

/// What the store tells a role that follows the log, in the order it should act on it.
#[derive(Debug)]
pub enum Followed {
    /// A member key changed (any bucket); already folded into `Subscription::buckets`.
    Member(MemberObservation),
    /// The next log entry, in log order.
    Log { seq: u64, entry: LogEntry },
    /// The entry at this position does not decode: the role's reader passes over it.
    Unreadable { seq: u64 },
    /// The entry at this position needs a cluster format this build does not speak.
    TooNew { seq: u64, needs: u32 },
    /// Once: the membership snapshot and the log backlog that existed at start have both been delivered.
    CaughtUp,
}

/// Each is an input of a member's life, the same for every role.
impl From<Followed> for jaque_core::Life {
    fn from(f: Followed) -> jaque_core::Life {
        use jaque_core::Life;
        match f {
            Followed::Member(obs) => Life::Member(obs),
            Followed::Log { seq, entry } => Life::Log { seq, entry },
            Followed::Unreadable { seq } => Life::LogUnreadable { seq },
            Followed::TooNew { seq, needs } => Life::LogTooNew { seq, needs },
            Followed::CaughtUp => Life::CaughtUp,
        }
    }
}

/// The membership watch and the log follower of one role, as one cancel-safe stream. Either may be lost and
/// made again underneath (the store restarted, the connection dropped): the log goes on from where it was, the
/// watch starts over with a fresh snapshot, and `resyncing` says so until each has caught up again.
pub struct Subscription {
    members: UnboundedReceiver<MemberEvent>,
    log: Events<LogEvent>,
    buckets: Buckets,
    /// A snapshot's changes not yet handed to the role, in revision order.
    queued: VecDeque<MemberObservation>,
    snapshot_done: bool,
    log_caught_up: bool,
    caught_up: bool,
    /// Why the watch is being made again, until its fresh snapshot is in.
    watch_lost: Option<String>,
    /// From where, and why, the log follower is being made again, until it has delivered its backlog.
    log_lost: Option<(u64, String)>,
}

impl Subscription {
    /// Starts watching membership and following the log from position `from` (1, or the position after the
    /// snapshot the role's reader started from).
    pub async fn start(coord: &Coordination, from: u64) -> Result<Subscription, String> {
        Ok(Subscription::over(coord.watch_members().await?, coord.follow_log(from).await?))
    }

    fn over(members: UnboundedReceiver<MemberEvent>, log: Events<LogEvent>) -> Subscription {
        Subscription {
            members,
            log,
            buckets: Buckets::default(),
            queued: VecDeque::new(),
            snapshot_done: false,
            log_caught_up: false,
            caught_up: false,
            watch_lost: None,
            log_lost: None,
        }
    }

    /// The next event; `None` only once both the watch and the follower are gone, which a lost consumer is not
    /// (it is made again). Cancel-safe, so it can be a `select!` branch: nothing is lost when another branch
    /// wins.
    pub async fn next(&mut self) -> Option<Followed> {
        loop {
            if let Some(obs) = self.queued.pop_front() {
                self.buckets.observe(&obs);
                return Some(Followed::Member(obs));
            }
            if !self.caught_up && self.snapshot_done && self.log_caught_up {
                self.caught_up = true;
                return Some(Followed::CaughtUp);
            }
            tokio::select! {
                Some(ev) = self.members.recv() => match ev {
                    MemberEvent::Snapshot { observed, upto } => {
                        self.queued = self.buckets.resync(&observed, upto);
                        self.snapshot_done = true;
                        if self.watch_lost.take().is_some() {
                            tracing::info!(changes = self.queued.len(), "membership watch made again from a fresh snapshot");
                        }
                    }
                    MemberEvent::Observed(obs) => {
                        self.buckets.observe(&obs);
                        return Some(Followed::Member(obs));
                    }
                    MemberEvent::Lost { error } => self.watch_lost = Some(error),
                },
                Some(ev) = self.log.recv() => match ev {
                    LogEvent::Entry { seq, entry } => return Some(Followed::Log { seq, entry }),
                    LogEvent::Unreadable { seq } => return Some(Followed::Unreadable { seq }),
                    LogEvent::TooNew { seq, needs } => return Some(Followed::TooNew { seq, needs }),
                    LogEvent::CaughtUp => {
                        self.log_caught_up = true;
                        if let Some((from, _)) = self.log_lost.take() {
                            tracing::info!(from, "log follower made again and caught up");
                        }
                    }
                    LogEvent::Lost { from, error } => self.log_lost = Some((from, error)),
                },
                else => return None,
            }
        }
    }

    pub fn is_caught_up(&self) -> bool {
        self.caught_up
    }

    /// While the watch or the log follower is being made again: why (every role's `/healthz` says it). The
    /// process stays a member meanwhile; its view of the store is only as old as the loss.
    pub fn resyncing(&self) -> Option<String> {
        resync_reason(self.log_lost.as_ref().map(|(from, e)| (*from, e.as_str())), self.watch_lost.as_deref())
    }

    pub fn is_resyncing(&self) -> bool {
        self.log_lost.is_some() || self.watch_lost.is_some()
    }

    /// Follows the log again from position `from` (after the role's reader jumped to a snapshot): the entries
    /// the old follower still had queued are dropped, the new one delivers from `from` on (once it can be made,
    /// when the store is away now).
    pub async fn refollow_log(&mut self, coord: &Coordination, from: u64) {
        self.log = coord.refollow_log(from).await;
        // What the old follower had lost is the new one's to report.
        self.log_lost = None;
    }

    /// The live members of every bucket, as the watch reported them so far.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }
}

/// `resyncing: …` for a log follower being made again from position `from` and a watch being made again.
fn resync_reason(log: Option<(u64, &str)>, watch: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some((from, error)) = log {
        parts.push(format!("the log follower is being re-established from position {from} ({error})"));
    }
    if let Some(error) = watch {
        parts.push(format!("the membership watch is being re-established with a fresh snapshot ({error})"));
    }
    (!parts.is_empty()).then(|| format!("resyncing: {}", parts.join("; ")))
}

/// Live sets of every bucket, as the membership watch reports them.
#[derive(Default)]
pub struct Buckets(pub BTreeMap<Bucket, LiveSet>);

impl Buckets {
    pub fn observe(&mut self, obs: &MemberObservation) {
        self.0.entry(obs.bucket).or_default().observe(obs);
    }

    /// What every bucket's view must observe to catch up with a membership snapshot (`LiveSet::resync`), in
    /// revision order. Not yet applied: each is, as it is handed to the role, so the role's own view of its
    /// bucket stays in step with these.
    fn resync(&self, snapshot: &[MemberObservation], upto: u64) -> VecDeque<MemberObservation> {
        let empty = LiveSet::default();
        let mut all = Vec::new();
        for b in Bucket::ALL {
            let r = self.0.get(&b).unwrap_or(&empty).resync(b, snapshot, upto);
            if !r.unplaced.is_empty() {
                tracing::warn!(
                    bucket = b.prefix(),
                    members = ?r.unplaced,
                    "members gone from the store without a trace the watch could place (was the bucket purged by \
                     hand?): they stay live in this process's view until it starts again"
                );
            }
            all.extend(r.observations);
        }
        all.sort_by_key(|o| o.rev);
        all.into()
    }

    pub fn live(&self, bucket: Bucket) -> usize {
        self.0.get(&bucket).map_or(0, LiveSet::len)
    }

    /// `jaque_membership_live_members{bucket}`, which every role that follows the log exposes.
    pub fn expose(&self, m: &mut Exposition) {
        m.header("jaque_membership_live_members", "gauge", "Live members per membership bucket.");
        for b in Bucket::ALL {
            m.sample("jaque_membership_live_members", &[("bucket", b.prefix())], self.live(b) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use jaque_core::{MemberChange, MemberId, MemberRef};
    use tokio::sync::mpsc::{self, unbounded_channel, UnboundedSender};

    fn up(rev: u64, id: &str) -> MemberObservation {
        let m = MemberRef { id: MemberId::new(id).unwrap(), incarnation: 1 };
        MemberObservation::new(Bucket::Engine, rev, MemberChange::Up(m))
    }

    fn down(rev: u64, id: &str) -> MemberObservation {
        MemberObservation::new(Bucket::Engine, rev, MemberChange::Down(MemberId::new(id).unwrap()))
    }

    fn pair() -> (UnboundedSender<MemberEvent>, mpsc::Sender<LogEvent>, Subscription) {
        let (members_tx, members) = unbounded_channel();
        let (log_tx, log) = mpsc::channel(16);
        (members_tx, log_tx, Subscription::over(members, log))
    }

    /// Every event the follower has ready now.
    fn ready(f: &mut Subscription) -> Vec<Followed> {
        let mut out = Vec::new();
        while let Some(Some(ev)) = f.next().now_or_never() {
            out.push(ev);
        }
        out
    }

    fn members(events: &[Followed]) -> Vec<MemberObservation> {
        events.iter().filter_map(|e| if let Followed::Member(o) = e { Some(o.clone()) } else { None }).collect()
    }

    #[test]
    fn a_lost_watch_resyncs_from_a_fresh_snapshot_and_members_missing_from_it_go_down() {
        let (members_tx, log_tx, mut f) = pair();
        members_tx.send(MemberEvent::Snapshot { observed: vec![up(1, "a"), up(2, "b")], upto: 2 }).unwrap();
        log_tx.try_send(LogEvent::CaughtUp).unwrap();
        let first = ready(&mut f);
        assert_eq!(members(&first), vec![up(1, "a"), up(2, "b")]);
        assert!(matches!(first.last(), Some(Followed::CaughtUp)));
        assert_eq!(f.buckets().live(Bucket::Engine), 2);

        members_tx.send(MemberEvent::Lost { error: "the NATS connection was lost".into() }).unwrap();
        assert!(ready(&mut f).is_empty(), "a loss is not an event for the role");
        let reason = f.resyncing().expect("resyncing");
        assert!(reason.starts_with("resyncing: the membership watch") && reason.contains("connection was lost"));

        // b's key expired while the watch was away, and its marker is gone too; c joined.
        members_tx.send(MemberEvent::Snapshot { observed: vec![up(1, "a"), up(9, "c")], upto: 12 }).unwrap();
        let after = ready(&mut f);
        assert_eq!(members(&after), vec![up(9, "c"), down(12, "b")], "no second CaughtUp: {after:?}");
        assert_eq!(f.buckets().0[&Bucket::Engine].members().len(), 2);
        assert!(f.resyncing().is_none());
        members_tx.send(MemberEvent::Observed(up(13, "b"))).unwrap();
        assert_eq!(members(&ready(&mut f)), vec![up(13, "b")]);
        assert_eq!(f.buckets().live(Bucket::Engine), 3, "the new watch's changes are taken");
    }

    #[test]
    fn a_lost_log_follower_is_resyncing_until_its_new_backlog_is_in() {
        let (members_tx, log_tx, mut f) = pair();
        members_tx.send(MemberEvent::Snapshot { observed: vec![], upto: 0 }).unwrap();
        log_tx.try_send(LogEvent::CaughtUp).unwrap();
        assert!(matches!(ready(&mut f)[..], [Followed::CaughtUp]));
        log_tx.try_send(LogEvent::Lost { from: 8, error: "missed idle heartbeat".into() }).unwrap();
        assert!(ready(&mut f).is_empty());
        assert_eq!(
            f.resyncing().as_deref(),
            Some("resyncing: the log follower is being re-established from position 8 (missed idle heartbeat)")
        );
        assert!(f.is_resyncing());
        let entry = jaque_core::LogEntry::Epoch(jaque_core::EpochRecord {
            epoch: 1,
            members: vec![],
            members_rev: 0,
            idempotency_window_ms: None,
            format: 1,
        });
        log_tx.try_send(LogEvent::Entry { seq: 8, entry }).unwrap();
        assert!(matches!(ready(&mut f)[..], [Followed::Log { seq: 8, .. }]));
        assert!(f.is_resyncing(), "until the backlog present at the new follower's creation is in");
        log_tx.try_send(LogEvent::CaughtUp).unwrap();
        assert!(ready(&mut f).is_empty(), "no second CaughtUp for the role");
        assert!(!f.is_resyncing());
    }
}
