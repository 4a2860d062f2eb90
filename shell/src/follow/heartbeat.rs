//! A member's key writer: the heartbeat puts and the delete the core's membership asks for, written one at a
//! time and in order (any bucket: each `MembershipOutput` names its own), and the leave's flush.

use crate::coord::Coordination;
use jaque_core::membership::MembershipOutput;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

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

/// Writes heartbeats and deletes one at a time, in order, so a late put never resurrects a deleted key, and
/// tells `on_put` whether each put reached the store, in the order they were queued: the core's
/// `Life::HeartbeatWritten`, which its lease runs from.
pub fn spawn_heartbeat_writer(coord: Coordination, on_put: impl Fn(bool) + Send + 'static) -> HeartbeatWriter {
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
