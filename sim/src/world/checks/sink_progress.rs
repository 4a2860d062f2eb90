//! The checker of a sink's progress row (`sim/README.md`, "Invariants and where they are checked"): the
//! `sink_progress` row a sink commits promises that every event it was to write at or below its position is in
//! the store (`jaque_core::sink::Progress`). The `jaque_sink_written_position` metric and the sink's "caught
//! up" rest on it.
//!
//! What core promises, precisely (`Sink::send_next`, `role::LogRole`): a batch's position is one below the
//! oldest event the sink still holds or a running resume may still write, or where its reader stands when it
//! holds nothing, and never below the position its last committed batch carried. So when the batch is made
//! with no resume running or waiting and the sink not leaving, and its position is above what its last commit
//! carried (else it only repeats an older promise, made for the objects it owned then), then for every object
//! it owns at that moment (HRW over its view of its bucket: it gained each through a resume that ended, which
//! read the object's history from what the store held up to where it stood, and reads it live since) every
//! accepted event at or below the position is in the store once the batch commits, unless a sink counted that
//! row skipped (the store refused it even degraded) or it was purged and a sink said its object lost history
//! over a range that holds it (`LogRole::history_lost`). Checked at every commit of such a batch, whenever it
//! lands (a retry, a late commit, or one landing after its sink crashed), against the store and the whole log.

use crate::world::snapshots::LostBy;
use crate::world::{Category, Sim};
use jaque_core::sink::{Batch, Sink};
use jaque_core::ObjectId;
use std::collections::BTreeMap;

/// Per object, how many of its first accepted events are known to be in the store, skipped, or purged and
/// said lost (each only ever stays so, so the walk goes on from there).
#[derive(Default)]
pub(in crate::world) struct SinkProgress {
    covered: BTreeMap<ObjectId, usize>,
}

impl Sim {
    /// What the batch `b` sink `sink` is sending for the first time promises: the objects its position covers
    /// (`None`: no promise of its own to check, see the module's text).
    pub(in crate::world) fn progress_promise(&self, sink: &Sink, b: &Batch) -> Option<Vec<ObjectId>> {
        let role = sink.role();
        if role.is_resuming() || role.is_leaving() || b.progress.position <= sink.written_position() {
            return None;
        }
        Some(self.sink_store_objects().filter(|o| role.owns(o)).cloned().collect())
    }

    /// Batch `b` of sink `s` committed, with `objects` the objects it owned when it was made: each one's
    /// accepted events at or below the batch's position are in the store (skipped and purged-and-said-lost
    /// ones aside).
    pub(in crate::world) fn check_progress(&mut self, s: usize, b: &Batch, objects: &[ObjectId]) {
        let position = b.progress.position;
        for o in objects {
            let Some(seqs) = self.sink_store_accepted(o) else { continue };
            let mut at = self.sink_progress.covered.get(o).copied().unwrap_or(0);
            let (skipped, _) = self.sink_skipped();
            while at < seqs.len() {
                let seq = seqs[at];
                let covered = self.sinks.sql.copies(seq) > 0
                    || skipped.contains(&seq)
                    || self.lost_to_purge(LostBy::Sink, seq, o);
                if !covered {
                    break;
                }
                at += 1;
            }
            let missing = seqs.get(at).copied().filter(|&seq| seq <= position);
            self.sink_progress.covered.insert(o.clone(), at);
            if let Some(seq) = missing {
                let purged = if self.log.purged(seq) { ", purged and not said lost" } else { "" };
                let msg = format!(
                    "s{} committed progress {position} (batch {}), but {o}, which it owned when it made the batch, has its accepted event at {seq} missing from the store{purged}",
                    s + 1,
                    b.id
                );
                return self.fail(Category::Safety, "10 sink progress", msg);
            }
        }
    }
}
