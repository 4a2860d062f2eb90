//! What a store tells the roles that follow it: the membership watch's events, the log follower's, and how a
//! member key reads (the page's key names, a key's change as the core's observation).

use crate::metrics;
use jaque_core::wire;
use jaque_core::{Bucket, LogEntry, MemberChange, MemberId, MemberObservation};
use tokio::sync::mpsc;

/// The receiving end of a log follower, bounded: a NATS consumer is not polled while the role is behind (the
/// server's flow control holds the rest), and an in-process follower reads the log itself, so a role that is
/// behind leaves its backlog in the log, not in its memory.
pub type Events<T> = mpsc::Receiver<T>;

/// What a membership watcher reports. A watch that is lost is made again (NATS), so the sequence is: a
/// snapshot, changes, and after a `Lost` (perhaps several, while the store is away) a fresh snapshot again.
#[derive(Debug)]
pub enum MemberEvent {
    /// The last change of every member key in the store when the watch was made (a put, or a delete or expiry
    /// marker while it lives), in revision order, and `upto`, the store's revision just before it was read:
    /// every later change has a higher one (`LiveSet::resync`).
    Snapshot { observed: Vec<MemberObservation>, upto: u64 },
    /// A change after the snapshot, in revision order.
    Observed(MemberObservation),
    /// The watch was lost, or could not be made again yet (`error`); a fresh snapshot follows once it is.
    Lost { error: String },
}

/// What a log follower reports: every entry in log order, and the end of the backlog present when its
/// consumer was made. A follower that is lost is made again from the position after the last one it
/// delivered (NATS), so after a `Lost` (perhaps several) the entries go on and `CaughtUp` comes again.
#[derive(Clone, Debug)]
pub enum LogEvent {
    Entry {
        seq: u64,
        entry: LogEntry,
    },
    /// The entry at `seq` does not decode (counted and logged): readers pass over it.
    Unreadable {
        seq: u64,
    },
    /// The entry at `seq` says it needs a cluster format this build does not speak (`wire::WireError::TooNew`).
    TooNew {
        seq: u64,
        needs: u32,
    },
    CaughtUp,
    /// The follower was lost, or could not be made again yet (`error`); it follows again from `from`.
    Lost {
        from: u64,
        error: String,
    },
}

/// A log entry as an in-process store holds it: decoded, or why not (`None`: its bytes do not decode;
/// `Some(needs)`: they say they need cluster format `needs`, newer than this build's).
pub type Held = Result<LogEntry, Option<u32>>;

/// The follower's event for a held entry.
pub fn held_event(seq: u64, held: &Held) -> LogEvent {
    match held {
        Ok(entry) => LogEvent::Entry { seq, entry: entry.clone() },
        Err(None) => LogEvent::Unreadable { seq },
        Err(Some(needs)) => LogEvent::TooNew { seq, needs: *needs },
    }
}

/// The page's key name: `membership/<id>`, `sink/membership/<id>`, `notifier/membership/<id>`.
pub fn key(bucket: Bucket, id: &MemberId) -> String {
    format!("{}{}", bucket.prefix(), id)
}

/// A key's change as an observation, or `None` for a key that is not a member key (counted).
pub(crate) fn observe(rev: u64, key: &str, up: Option<&[u8]>) -> Option<MemberObservation> {
    let Some((bucket, id)) = Bucket::split_key(key) else {
        metrics::wire_error("membership key");
        return None;
    };
    let (change, format) = match up {
        Some(bytes) => match wire::decode_heartbeat(id, bytes) {
            Ok((m, format)) => (MemberChange::Up(m), format),
            Err(e) => {
                tracing::warn!(key, error = %e, "skipping a malformed heartbeat");
                metrics::wire_error("heartbeat");
                return None;
            }
        },
        None => match MemberId::new(id) {
            Ok(id) => (MemberChange::Down(id), jaque_core::format::OLDEST_CLUSTER_FORMAT),
            Err(_) => {
                metrics::wire_error("membership key");
                return None;
            }
        },
    };
    Some(MemberObservation { bucket, rev, change, format })
}
