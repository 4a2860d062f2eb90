//! What every role that follows the log shares (the engine, the ui's reader, and next the sink and the
//! notifier): the membership watch and the log follower merged into one stream of events for the role's loop,
//! the live sets of every bucket, and, for a role that is a member of a bucket, the heartbeat writer and the
//! leave flush. A role's loop only says what each event means to it.

use crate::coord::{Coordination, LogEvent, MemberEvent};
use crate::metrics::Exposition;
use jaque_core::membership::MembershipOutput;
use jaque_core::{Bucket, LiveSet, LogEntry, MemberObservation};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::sync::oneshot;

/// What the store tells a role that follows the log, in the order it should act on it.
#[derive(Debug)]
pub enum Followed {
    /// A member key changed (any bucket); already folded into `Follower::buckets`.
    Member(MemberObservation),
    /// The next log entry, in log order.
    Log { seq: u64, entry: LogEntry },
    /// The entry at this position does not decode: the role's reader passes over it.
    Unreadable { seq: u64 },
    /// Once: the membership snapshot and the log backlog that existed at start have both been delivered.
    CaughtUp,
}

/// The membership watch and the log follower of one role, as one cancel-safe stream.
pub struct Follower {
    members: UnboundedReceiver<MemberEvent>,
    log: UnboundedReceiver<LogEvent>,
    buckets: Buckets,
    snapshot_done: bool,
    log_caught_up: bool,
    caught_up: bool,
}

impl Follower {
    /// Starts watching membership and following the log from position `from` (1, or the position after the
    /// snapshot the role's reader started from).
    pub async fn start(coord: &Coordination, from: u64) -> Result<Follower, String> {
        Ok(Follower {
            members: coord.watch_members().await?,
            log: coord.follow_log(from).await?,
            buckets: Buckets::default(),
            snapshot_done: false,
            log_caught_up: false,
            caught_up: false,
        })
    }

    /// The next event; `None` once both the watch and the follower are gone. Cancel-safe, so it can be a
    /// `select!` branch: nothing is lost when another branch wins.
    pub async fn next(&mut self) -> Option<Followed> {
        loop {
            if !self.caught_up && self.snapshot_done && self.log_caught_up {
                self.caught_up = true;
                return Some(Followed::CaughtUp);
            }
            tokio::select! {
                Some(ev) = self.members.recv() => match ev {
                    MemberEvent::Observed(obs) => {
                        self.buckets.observe(&obs);
                        return Some(Followed::Member(obs));
                    }
                    MemberEvent::SnapshotDone => self.snapshot_done = true,
                },
                Some(ev) = self.log.recv() => match ev {
                    LogEvent::Entry { seq, entry } => return Some(Followed::Log { seq, entry }),
                    LogEvent::Unreadable { seq } => return Some(Followed::Unreadable { seq }),
                    LogEvent::CaughtUp => self.log_caught_up = true,
                },
                else => return None,
            }
        }
    }

    pub fn is_caught_up(&self) -> bool {
        self.caught_up
    }

    /// Follows the log again from position `from` (after the role's reader jumped to a snapshot): the entries
    /// the old follower still had queued are dropped, the new one delivers from `from` on.
    pub async fn refollow_log(&mut self, coord: &Coordination, from: u64) -> Result<(), String> {
        self.log = coord.follow_log(from).await?;
        Ok(())
    }

    /// The live members of every bucket, as the watch reported them so far.
    pub fn buckets(&self) -> &Buckets {
        &self.buckets
    }
}

/// Live sets of every bucket, as the membership watch reports them.
#[derive(Default)]
pub struct Buckets(pub BTreeMap<Bucket, LiveSet>);

impl Buckets {
    pub fn observe(&mut self, obs: &MemberObservation) {
        self.0.entry(obs.bucket).or_default().observe(obs.rev, &obs.change);
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

/// Work for the membership key writer.
enum HeartbeatJob {
    Write(MembershipOutput),
    /// Answered once every job before it is done.
    Flush(oneshot::Sender<()>),
}

/// A member's key writer (any bucket: each `MembershipOutput` names its own).
pub struct HeartbeatWriter(mpsc::UnboundedSender<HeartbeatJob>);

/// How long a leaving member waits for its key's delete to reach the store.
const LEAVE_FLUSH: Duration = Duration::from_secs(2);

impl HeartbeatWriter {
    /// Queues a heartbeat put or the key's delete, as the core's membership asked.
    pub fn write(&self, m: MembershipOutput) {
        let _ = self.0.send(HeartbeatJob::Write(m));
    }

    /// Waits (a bounded time) until every write queued so far reached the store. After the core's `Leave` that
    /// is the key's delete: returning before it would drop the connection under it, and the others would wait
    /// for the ttl instead of moving this member's objects at once.
    pub async fn flush_leave(&self) {
        let (tx, rx) = oneshot::channel();
        let _ = self.0.send(HeartbeatJob::Flush(tx));
        let _ = tokio::time::timeout(LEAVE_FLUSH, rx).await;
    }
}

/// Writes heartbeats and deletes one at a time, in order, so a late put never resurrects a deleted key.
pub fn spawn_heartbeat_writer(coord: Coordination) -> HeartbeatWriter {
    spawn_heartbeat_writer_acked(coord, |_| {})
}

/// Like `spawn_heartbeat_writer`, and tells `on_put` whether each heartbeat put reached the store, in the
/// order they were queued (a notifier's lease runs from the store's acknowledgements).
pub fn spawn_heartbeat_writer_acked(coord: Coordination, on_put: impl Fn(bool) + Send + 'static) -> HeartbeatWriter {
    let (tx, mut rx) = mpsc::unbounded_channel::<HeartbeatJob>();
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            let r = match job {
                HeartbeatJob::Write(MembershipOutput::PutHeartbeat { bucket, member, ttl }) => {
                    let r = coord.put_heartbeat(bucket, &member, ttl).await;
                    on_put(r.is_ok());
                    r
                }
                HeartbeatJob::Write(MembershipOutput::DeleteHeartbeat { bucket, member }) => {
                    coord.delete_heartbeat(bucket, &member).await
                }
                HeartbeatJob::Flush(done) => {
                    let _ = done.send(());
                    Ok(())
                }
            };
            if let Err(e) = r {
                // A missed refresh is retried at the next one; two may be lost before the key expires.
                tracing::warn!(error = %e, "writing the membership key");
            }
        }
    });
    HeartbeatWriter(tx)
}
