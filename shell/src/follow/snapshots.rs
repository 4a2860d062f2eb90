//! Snapshots in the shell: every role that reads the log starts from the latest stored snapshot and follows the
//! log from the position after it; a reader that meets a hole in the log (events purged below a snapshot) loads
//! the latest one again and jumps to it. The engine that the core names writes them, encoded off the loop, and
//! purges what the core allows. What is due, who writes and what may go are the core's (`jaque_core::compact`).

use crate::coord::{Coordination, SnapshotBytes};
use crate::metrics::Exposition;
use jaque_core::log::{LogReader, ReaderSnapshot};
use jaque_core::{wire, IoError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

static WRITTEN: AtomicU64 = AtomicU64::new(0);
static WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);
static LAST_POSITION: AtomicU64 = AtomicU64::new(0);
static LAST_BYTES: AtomicU64 = AtomicU64::new(0);
static LOADED: AtomicU64 = AtomicU64::new(0);
static LOAD_FAILURES: AtomicU64 = AtomicU64::new(0);
static PURGES: AtomicU64 = AtomicU64::new(0);
static PURGED_BELOW: AtomicU64 = AtomicU64::new(0);

/// The latest stored snapshot as a reader, if there is one that decodes. A snapshot that cannot be read is
/// logged and counted, and the caller starts from the log's first position instead (where a purged log shows
/// a hole, which asks again).
pub async fn latest_reader(coord: &Coordination) -> Option<LogReader> {
    latest(coord).await.ok().flatten()
}

/// The latest stored snapshot: a reader, none that decodes, or (`Err`) the position of one of a version newer
/// than this build reads and the cluster format it needs (no later snapshot of this cluster will be older).
async fn latest(coord: &Coordination) -> Result<Option<LogReader>, (u64, u32)> {
    let started = Instant::now();
    let (position, mut bytes) = match coord.latest_snapshot().await {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        Err(e) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "reading the latest snapshot; following the log from its start");
            return Ok(None);
        }
    };
    // Decoded as the bytes come from the store: they are never held whole.
    let decoded = tokio::task::spawn_blocking(move || {
        let reader = wire::read_snapshot(&mut bytes);
        (reader, bytes.received)
    })
    .await;
    let (decoded, len) = match decoded {
        Ok((r, len)) => (Ok(r), len),
        Err(e) => (Err(e), 0),
    };
    match decoded {
        Ok(Ok(reader)) if reader.position() == position => {
            LOADED.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                position,
                bytes = len,
                objects = reader.objects().len(),
                took_ms = started.elapsed().as_millis() as u64,
                "starting from a snapshot"
            );
            Ok(Some(reader))
        }
        Ok(Ok(reader)) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, inside = reader.position(), "a snapshot stored under another position; skipped");
            Ok(None)
        }
        Ok(Err(e @ wire::WireError::SnapshotTooNew { version })) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, error = %e, "a snapshot this build cannot read (docs/upgrading.md)");
            Err((position, jaque_core::format::snapshot_needs(version)))
        }
        Ok(Err(e)) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            crate::metrics::wire_error("snapshot");
            tracing::warn!(position, error = %e, "a snapshot that does not decode; skipped");
            Ok(None)
        }
        Err(e) => {
            LOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, error = %e, "decoding a snapshot");
            Ok(None)
        }
    }
}

/// Encodes and stores a snapshot off the loop; `done` gets the store's answer. The bytes go to the store as
/// they are made, a chunk at a time, and are never held whole (a snapshot of a million objects is ~240 MB).
pub fn spawn_write(
    coord: Coordination,
    snapshot: Box<ReaderSnapshot>,
    done: impl FnOnce(u64, Result<(), IoError>) + Send + 'static,
) {
    tokio::spawn(async move {
        let position = snapshot.position;
        let started = Instant::now();
        let (bytes, mut writer) = SnapshotBytes::channel();
        let encoder = tokio::task::spawn_blocking(move || {
            wire::write_snapshot(&snapshot, &mut writer)?;
            writer.finish()
        });
        let stored = coord.save_snapshot(position, bytes).await;
        // The encoder ends by itself once the store stops reading.
        let encoded = match encoder.await {
            Ok(Ok(len)) => Ok(len),
            Ok(Err(e)) => Err(format!("encoding the snapshot: {e}")),
            Err(e) => Err(format!("encoding the snapshot: {e}")),
        };
        let result = match (stored, encoded) {
            (Ok(()), Ok(len)) => {
                WRITTEN.fetch_add(1, Ordering::Relaxed);
                LAST_POSITION.fetch_max(position, Ordering::Relaxed);
                LAST_BYTES.store(len, Ordering::Relaxed);
                tracing::info!(
                    position,
                    bytes = len,
                    took_ms = started.elapsed().as_millis() as u64,
                    "snapshot written"
                );
                Ok(())
            }
            (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        };
        if let Err(e) = &result {
            WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(position, error = %e, "writing a snapshot; the next one is tried when due");
        }
        done(position, result.map_err(IoError::Unavailable));
    });
}

/// Purges the log's events below `below` (a snapshot past them is durable).
pub fn spawn_purge(coord: Coordination, below: u64) {
    tokio::spawn(async move {
        match coord.purge_events_below(below).await {
            Ok(()) => {
                PURGES.fetch_add(1, Ordering::Relaxed);
                PURGED_BELOW.fetch_max(below, Ordering::Relaxed);
                tracing::info!(below, "log compacted: events below this position purged");
            }
            // The next snapshot's purge covers this one's range too.
            Err(e) => tracing::warn!(below, error = %e, "purging the log"),
        }
    });
}

/// A role's loads of the latest snapshot after its core met a hole in the log: one at a time (the core asks
/// again at every heartbeat while the hole is there).
#[derive(Default)]
pub struct Restores {
    loading: bool,
}

impl Restores {
    /// Starts loading the latest snapshot for a hole ending at `covering`, unless a load is running; `done` gets
    /// it when it reaches that far, `None` otherwise, and `Err((position, needs))` for a snapshot at `position` of
    /// a version newer than this build reads (the reader cannot get past the hole: `Life::LogTooNew`). Call
    /// `answered` when the answer is in.
    pub fn ask(&mut self, coord: &Coordination, covering: u64, done: impl FnOnce(Restored) + Send + 'static) {
        if !std::mem::replace(&mut self.loading, true) {
            spawn_restore(coord.clone(), covering, done);
        }
    }

    pub fn answered(&mut self) {
        self.loading = false;
    }
}

/// Tells loudly that a sink or notifier found accepted events gone from the log before it handled them: it
/// lagged past `-log-retention` (or events were purged by hand). `before` and `after` are the core's count.
pub fn warn_history_lost(role: &str, before: u64, after: u64) {
    if after > before {
        tracing::error!(
            role,
            objects = after - before,
            "accepted events of these objects were purged from the log before this {role} handled them (it lagged \
             behind by more than -log-retention): they are missing from what it wrote; their current state is not"
        );
    }
}

/// What a load for a hole found (`Restores::ask`): `Err((position, needs))` for a snapshot this build cannot
/// read, where the reader stops (its `read_too_new`, a role's `Life::LogTooNew`).
pub type Restored = Result<Option<LogReader>, (u64, u32)>;

fn spawn_restore(coord: Coordination, covering: u64, done: impl FnOnce(Restored) + Send + 'static) {
    tokio::spawn(async move {
        let reader = match latest(&coord).await {
            Ok(reader) => reader,
            Err(too_new) => return done(Err(too_new)),
        };
        match &reader {
            Some(r) if r.position() >= covering => {
                tracing::info!(position = r.position(), covering, "jumping past a hole in the log to a snapshot");
            }
            Some(r) => tracing::warn!(
                position = r.position(),
                covering,
                "the log has a hole below position {covering} and the latest snapshot does not reach it; waiting \
                 for a newer snapshot"
            ),
            None => tracing::warn!(
                covering,
                "the log has a hole below position {covering} and there is no snapshot to jump to; waiting for one"
            ),
        }
        done(Ok(reader.filter(|r| r.position() >= covering)));
    });
}

/// The snapshot metrics of this process.
pub fn expose(m: &mut Exposition) {
    let rows: [(&str, &str, &str, &AtomicU64); 8] = [
        ("jaque_snapshots_written_total", "counter", "Snapshots this process wrote.", &WRITTEN),
        ("jaque_snapshot_write_failures_total", "counter", "Snapshot writes that failed.", &WRITE_FAILURES),
        ("jaque_snapshot_position", "gauge", "Log position of the last snapshot this process wrote.", &LAST_POSITION),
        ("jaque_snapshot_bytes", "gauge", "Size of the last snapshot this process wrote.", &LAST_BYTES),
        ("jaque_snapshot_loads_total", "counter", "Snapshots this process started from or jumped to.", &LOADED),
        ("jaque_snapshot_load_failures_total", "counter", "Snapshots that could not be read.", &LOAD_FAILURES),
        ("jaque_log_purges_total", "counter", "Purges of the log this process made.", &PURGES),
        ("jaque_log_purged_below", "gauge", "Events below this position were purged by this process.", &PURGED_BELOW),
    ];
    for (name, kind, help, v) in rows {
        m.one(name, kind, help, v.load(Ordering::Relaxed));
    }
}
