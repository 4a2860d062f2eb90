//! When the log gets a snapshot, who writes it, and what compaction may then remove. Sans-IO like the rest:
//! the engine feeds it positions, the clock and the epoch in force, and carries out what it asks.
//!
//! **Who.** Exactly one engine writes snapshots: the owner, by HRW over the members of the epoch in force, of the
//! fixed key `SNAPSHOT_KEY`, the same rule that gives every object one owner. Every engine reads the same epoch
//! record at the same position, so they agree on who it is without a coordinator of their own. During a
//! membership change two engines may both believe it is theirs for a moment; that is harmless, because a snapshot
//! is a function of its position only (every reader holds the same state there) and the store keeps snapshots by
//! position, so a late write of an older one never hides a newer one.
//!
//! **When.** Every `every` entries or every `interval`, whichever comes first, and only when the log has moved
//! since the last one.
//!
//! **What may go.** Once a snapshot is durable, the events below it may be purged, except those within
//! `retention` of its log clock (the reader's `keep_from`), kept for readers that lag and for the sink.
//! Epoch records are never purged: the next proposal's compare-and-set is made against the last one, and they
//! are few.

use crate::hrw;
use crate::log::{LogReader, ReaderSnapshot};
use crate::model::MemberRef;
use crate::time::Time;
use std::time::Duration;

/// Why a reader is not ready while it waits to jump past a hole in the log (every role's `/healthz` says it
/// the same way).
pub fn hole_reason(covering: u64) -> String {
    format!(
        "resyncing: the log has a hole (purged events) up to position {covering}; waiting for a snapshot that \
         reaches it"
    )
}

/// The HRW key whose owner under the epoch in force writes the snapshots.
pub const SNAPSHOT_KEY: &str = "jaque/snapshot";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// `-snapshot-every`: entries between two snapshots at most.
    pub every: u64,
    /// `-snapshot-interval`: time between two snapshots at most (when the log moved).
    pub interval: Duration,
    /// `-log-retention`: how far behind a snapshot, by the log's clock, events are kept.
    pub retention: Duration,
}

impl Default for SnapshotConfig {
    fn default() -> SnapshotConfig {
        SnapshotConfig {
            every: 10_000,
            interval: Duration::from_secs(5 * 60),
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// The snapshot writer's state in one engine.
#[derive(Clone, Debug)]
pub struct Snapshotter {
    cfg: SnapshotConfig,
    /// Position and time of the last snapshot written or started from.
    last_position: u64,
    last_at: Option<Time>,
    /// The snapshot being written: its position and the purge point it allows once durable.
    in_flight: Option<(u64, u64)>,
    /// Events below this were purged (asked for) already.
    purged_below: u64,
}

impl Snapshotter {
    /// `start`: the position of the snapshot the engine's reader started from (0: none).
    pub fn new(cfg: SnapshotConfig, start: u64) -> Snapshotter {
        Snapshotter { cfg, last_position: start, last_at: None, in_flight: None, purged_below: 0 }
    }

    pub fn config(&self) -> &SnapshotConfig {
        &self.cfg
    }

    /// Whether `me` is the snapshot writer under the epoch in force of `reader`.
    pub fn is_writer(reader: &LogReader, me: &MemberRef) -> bool {
        reader.fence().current_ownership().is_some_and(|own| own.is_owner(hrw::key(SNAPSHOT_KEY), me))
    }

    /// When the interval runs out (for the engine's timer), if the log moved since the last snapshot.
    pub fn deadline(&self, reader: &LogReader) -> Option<Time> {
        if self.in_flight.is_some() || reader.position() <= self.last_position {
            return None;
        }
        self.last_at.map(|t| t + self.cfg.interval)
    }

    /// A snapshot of `reader` if one is due now (the caller checked it is the writer and ready).
    pub fn poll(&mut self, now: Time, reader: &LogReader) -> Option<ReaderSnapshot> {
        // The clock of the interval starts when the engine starts writing, not at an unknown earlier write.
        let last_at = *self.last_at.get_or_insert(now);
        if self.in_flight.is_some() || reader.position() <= self.last_position {
            return None;
        }
        let by_count = reader.position() - self.last_position >= self.cfg.every.max(1);
        let by_time = now.saturating_since(last_at) >= self.cfg.interval;
        if !by_count && !by_time {
            return None;
        }
        self.in_flight = Some((reader.position(), reader.keep_from(self.cfg.retention)));
        self.last_at = Some(now);
        Some(reader.snapshot())
    }

    /// The store's answer for the snapshot at `position`: the purge it allows, if any (events below it).
    pub fn written(&mut self, position: u64, ok: bool) -> Option<u64> {
        let (p, keep_from) = self.in_flight.filter(|(p, _)| *p == position)?;
        self.in_flight = None;
        if !ok {
            return None;
        }
        self.last_position = self.last_position.max(p);
        (keep_from > self.purged_below.max(1)).then(|| {
            self.purged_below = keep_from;
            keep_from
        })
    }

    /// The reader jumped to a snapshot at `position` (read from the store): no need to write one before it.
    pub fn restored(&mut self, position: u64) {
        self.last_position = self.last_position.max(position);
    }
}
