//! The `-coordination` store: membership keys with a per-key TTL and a watch, and the log (epoch records and
//! events in one ordered stream, epoch records appended by compare-and-set). Two implementations with the same
//! semantics — an in-process one for `-coordination memory` and JetStream for `nats://` — so every role runs
//! the same code over either.

mod disk;
mod events;
mod memory;
mod nats;
mod snapshot;

pub use disk::DataDir;
pub use events::{key, Events, LogEvent, MemberEvent};
pub use memory::MemStore;
pub use nats::{expose_followers, NatsCoord, EVENT_SUBJECT};
pub use snapshot::SnapshotBytes;

use async_nats::jetstream::{self, message::PublishMessage};
use jaque_core::wire;
use jaque_core::{Bucket, EpochRecord, Event, LogEntry, MemberRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Clone)]
pub enum Coordination {
    Memory(Arc<MemStore>),
    Nats(Box<NatsCoord>),
}

impl Coordination {
    pub fn memory() -> Coordination {
        Coordination::Memory(MemStore::start())
    }

    /// `-coordination memory` with `-data-dir`: the log, snapshots and progress records on disk too.
    pub fn memory_on(data: DataDir) -> Coordination {
        Coordination::Memory(MemStore::start_on(data))
    }

    /// Writes what is still queued for a data directory (at exit).
    pub async fn close(&self) {
        if let Coordination::Memory(m) = self {
            m.close().await;
        }
    }

    pub fn is_nats(&self) -> bool {
        matches!(self, Coordination::Nats(_))
    }

    pub async fn put_heartbeat(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) -> Result<(), String> {
        match self {
            Coordination::Memory(m) => {
                m.put(bucket, member, ttl);
                Ok(())
            }
            Coordination::Nats(n) => n.put_heartbeat(bucket, member, ttl).await,
        }
    }

    /// Deletes this member's key, only while it is this incarnation's: a late delete of an earlier incarnation
    /// never takes the key of the process that replaced it (a compare-and-set on the key's revision).
    pub async fn delete_heartbeat(&self, bucket: Bucket, member: &MemberRef) -> Result<(), String> {
        let k = key(bucket, &member.id);
        let ours = |value: &[u8]| {
            wire::decode_heartbeat(member.id.as_str(), value).is_ok_and(|(m, _)| m.incarnation == member.incarnation)
        };
        match self {
            Coordination::Memory(m) => {
                m.delete_if(&k, ours);
                Ok(())
            }
            Coordination::Nats(n) => match n.kv().entry(k.as_str()).await.map_err(|e| e.to_string())? {
                Some(e) if e.operation == jetstream::kv::Operation::Put && ours(&e.value) => {
                    n.kv().delete_expect_revision(k.as_str(), Some(e.revision)).await.map_err(|e| e.to_string())
                }
                _ => Ok(()),
            },
        }
    }

    pub async fn watch_members(&self) -> Result<UnboundedReceiver<MemberEvent>, String> {
        match self {
            Coordination::Memory(m) => Ok(m.watch_members()),
            Coordination::Nats(n) => n.watch_members().await,
        }
    }

    /// Follows the log from position `from` (1: the whole log that is left): every entry at or after it in
    /// order, `CaughtUp` once the entries present at the call have been delivered, then new ones as they land.
    /// Positions are the log's own: a jump between two delivered positions is a purged range. An error: the
    /// follower could not be made (at start, a refused subscription, say); once made, a lost one is made again.
    pub async fn follow_log(&self, from: u64) -> Result<Events<LogEvent>, String> {
        match self {
            Coordination::Memory(m) => Ok(m.follow_log(from)),
            Coordination::Nats(n) => n.follow_log(from).await,
        }
    }

    /// Like `follow_log`, but a follower that cannot be made now is reported `Lost` and made as soon as it
    /// can be (a reader jumping to a snapshot while the store is away keeps running).
    pub async fn refollow_log(&self, from: u64) -> Events<LogEvent> {
        match self {
            Coordination::Memory(m) => m.follow_log(from),
            Coordination::Nats(n) => n.refollow_log(from).await,
        }
    }

    /// Stores an encoded reader snapshot taken at log position `position`. Snapshots are kept by position:
    /// a late write of an older one never hides a newer one.
    pub async fn save_snapshot(&self, position: u64, bytes: SnapshotBytes) -> Result<(), String> {
        match self {
            Coordination::Memory(m) => m.save_snapshot(position, bytes).await,
            Coordination::Nats(n) => n.save_snapshot(position, bytes).await,
        }
    }

    /// The newest stored snapshot, with its position; its bytes come as they are read from the store.
    pub async fn latest_snapshot(&self) -> Result<Option<(u64, SnapshotBytes)>, String> {
        match self {
            Coordination::Memory(m) => m.latest_snapshot().await,
            Coordination::Nats(n) => n.latest_snapshot().await,
        }
    }

    /// Removes the events at log positions below `below`. Epoch records stay: they are few, and the
    /// compare-and-set of the next proposal is made against the last one.
    pub async fn purge_events_below(&self, below: u64) -> Result<(), String> {
        match self {
            Coordination::Memory(m) => m.purge_events_below(below).await,
            Coordination::Nats(n) => n.purge_events_below(below).await,
        }
    }

    /// The log's entries at positions `from..=to` that exist, and the last position the read covered (a
    /// notifier or sink reading a range again after gaining objects).
    pub async fn replay(&self, from: u64, to: u64) -> Result<(u64, Vec<(u64, LogEntry)>), String> {
        match self {
            Coordination::Memory(m) => Ok(m.replay(from, to)),
            Coordination::Nats(n) => n.replay(from, to).await,
        }
    }

    /// Appends `record` only if the log's last epoch record is still at `after_seq`. `Ok(false)`: another
    /// proposal won. `Err`: the outcome is unknown (it may still land).
    pub async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
        match self {
            Coordination::Memory(m) => m.propose(record, after_seq).await,
            Coordination::Nats(n) => n.propose(record, after_seq).await,
        }
    }

    /// Sends an event to the log. The returned ack resolves when the store has it; appends sent one after the
    /// other land in that order.
    pub async fn append(&self, event: Event) -> Result<AppendAck, String> {
        match self {
            Coordination::Memory(m) => Ok(match m.append(LogEntry::Event(event)) {
                Some(durable) => AppendAck::Disk(durable),
                None => AppendAck::Done,
            }),
            Coordination::Nats(n) => {
                let payload = wire::encode_log_entry(&LogEntry::Event(event));
                let ack = n
                    .js()
                    .send_publish(EVENT_SUBJECT, PublishMessage::build().payload(payload.into()))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(AppendAck::Nats(ack))
            }
        }
    }
}

pub enum AppendAck {
    Done,
    /// Resolves once the data directory's writer has fsync'd the event.
    Disk(disk::Durable),
    Nats(jetstream::context::PublishAckFuture),
}

impl AppendAck {
    pub async fn wait(self) -> Result<(), String> {
        match self {
            AppendAck::Done => Ok(()),
            AppendAck::Disk(d) => d.wait().await,
            AppendAck::Nats(f) => f.await.map(|_| ()).map_err(|e| e.to_string()),
        }
    }
}
