//! The checker of invariant 11 (snapshots: a reader started from any snapshot reaches the verdicts and state of
//! a reader started from the first position; `sim/README.md`, "Invariants and where they are checked").
//!
//! At sampled moments — a snapshot landing in the store, a log entry landing (then the reader of a random
//! running process is snapshotted: any position, lagging or at a hole), and the end of the run (the older stored
//! snapshot) — a reader is started from the snapshot through the wire and fed the log after it as processes now
//! read it. At its own position and at every position it reads it must hold what the oracle held there (as
//! invariant 2 asks of engines); it must report a hole exactly where purged positions are skipped; and if it
//! reads to the end of the log it must hold exactly the oracle's state (all of it: objects, epoch records,
//! applied command ids, log clock and its marks, counters but the duplicate deliveries it saw). The samples
//! draw from a stream of their own and never move the world.

use crate::params::{stream, Stream};
use crate::world::{Category, Sim, Who};
use jaque_core::log::{LogReader, Read, ReaderSnapshot};
use jaque_core::Time;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// How many readers the checker of invariant 11 starts from snapshots in a run, of each kind (stored ones as
/// they land, random processes' readers as entries land), spread over the safety phase: each costs the state
/// plus the tail, so a fixed number keeps a long run's checks from growing with the square of its log; and fewer
/// in a world of more than `SAMPLED_OBJECTS` objects, whose state costs more to copy and compare.
const SAMPLES: u64 = 8;
const SAMPLED_OBJECTS: u64 = 100;

/// A snapshot's state without what depends on how the log reached its reader (duplicate deliveries).
fn comparable(r: &LogReader) -> ReaderSnapshot {
    let mut s = r.snapshot();
    s.counters.duplicate_positions_total = 0;
    s
}

/// The first part in which two reader states differ.
fn first_difference(a: &ReaderSnapshot, b: &ReaderSnapshot) -> String {
    if a.position != b.position {
        return format!("position {} vs {}", a.position, b.position);
    }
    if a.epochs != b.epochs {
        return format!("epoch records ({} vs {})", a.epochs.len(), b.epochs.len());
    }
    if a.objects != b.objects {
        let differs = a.objects.iter().zip(&b.objects).find(|(x, y)| x != y).map(|(x, _)| x.0.to_string());
        return format!("objects ({} vs {}; first differing {differs:?})", a.objects.len(), b.objects.len());
    }
    if a.applied != b.applied {
        return format!("applied command ids ({} vs {})", a.applied.len(), b.applied.len());
    }
    if a.log_time != b.log_time || a.marks != b.marks {
        return format!("log clock {} vs {} ({} vs {} marks)", a.log_time, b.log_time, a.marks.len(), b.marks.len());
    }
    format!("counters {:?} vs {:?}", a.counters, b.counters)
}

/// What the checker keeps: its samples' stream, and when it takes the next sample of each kind.
pub(in crate::world) struct SnapshotChecks {
    sample: ChaCha8Rng,
    next_stored_check: Time,
    next_process_check: Time,
}

impl SnapshotChecks {
    pub fn new(seed: u64) -> SnapshotChecks {
        SnapshotChecks {
            sample: stream(seed, Stream::Snapshots, 1),
            next_stored_check: Time::ZERO,
            next_process_check: Time::ZERO,
        }
    }
}

impl Sim {
    /// A snapshot was stored: now and then it is checked.
    pub(in crate::world) fn sample_stored(&mut self, snapshot: &ReaderSnapshot, what: &str) {
        if self.now >= self.snapshot_checks.next_stored_check {
            self.snapshot_checks.next_stored_check = self.now + self.sample_period();
            self.check_snapshot(snapshot, what, true);
        }
    }

    /// The time to the checker's next sample of a kind: `SAMPLES` in a safety phase, give or take (fewer with
    /// many objects).
    fn sample_period(&mut self) -> Duration {
        let size = (self.params.objects as u64).div_ceil(SAMPLED_OBJECTS).max(1);
        let mean = (self.params.safety_ms / SAMPLES * size).max(1_000);
        Duration::from_millis(self.snapshot_checks.sample.random_range(mean / 2..=mean * 3 / 2))
    }

    /// A log entry landed: now and then a random running process's reader is snapshotted and checked.
    pub(in crate::world) fn sample_reader(&mut self) {
        if self.violation.is_some() || self.now < self.snapshot_checks.next_process_check {
            return;
        }
        self.snapshot_checks.next_process_check = self.now + self.sample_period();
        let readers: Vec<Who> = self.processes().filter(|who| self.is_running(*who)).collect();
        if readers.is_empty() {
            return;
        }
        let who = readers[self.snapshot_checks.sample.random_range(0..readers.len())];
        let snapshot = self.reader_snapshot(who).expect("a running process");
        let what = format!("a snapshot of {who}'s reader at {}", snapshot.position);
        self.check_snapshot(&snapshot, &what, false);
    }

    /// The end of the run: a reader from the older stored snapshot (the longer tail) reads the log after it.
    pub(in crate::world) fn final_snapshot_checks(&mut self) {
        if let Some(s) = self.snaps.stored.values().next().cloned() {
            self.check_snapshot(&s, &format!("the stored snapshot at {}", s.position), true);
        }
    }

    /// Invariant 11 for one snapshot (see the module documentation); `wire`: through its bytes, as stored
    /// snapshots are (a process's reader sampled in passing is restored directly: its bytes are those of any
    /// snapshot, and every start and jump exercises them).
    fn check_snapshot(&mut self, snapshot: &ReaderSnapshot, what: &str, wire: bool) {
        if self.violation.is_some() {
            return;
        }
        let restored = if wire {
            self.through_wire(snapshot, what)
        } else {
            LogReader::from_snapshot(snapshot.clone())
                .map_err(|e| self.fail(Category::Safety, "11 snapshots", format!("{what} does not restore: {e}")))
                .ok()
        };
        let Some(mut reader) = restored else { return };
        self.snaps.stats.checks += 1;
        let fail = |sim: &mut Sim, msg: String| sim.fail(Category::Safety, "11 snapshots", format!("{what}: {msg}"));
        let back = reader.snapshot();
        if back != *snapshot {
            return fail(self, format!("changed through the wire: {}", first_difference(&back, snapshot)));
        }
        let start = reader.position();
        if start > 0 {
            if let Some(why) = self.differs_from_oracle(&reader, start).or_else(|| self.policy_differs(&reader, start))
            {
                return fail(self, format!("at its own position: {why}"));
            }
        }
        let mut skipped = None;
        for seq in start + 1..=self.log.len() {
            if !self.log.present(seq) {
                skipped.get_or_insert(seq);
                continue;
            }
            let read = reader.read(seq, self.log.entry(seq));
            match (read, skipped) {
                (Read::Gap { expected, got }, Some(first)) if expected == first && got == seq => {
                    self.snaps.stats.checks_at_hole += 1;
                    return;
                }
                (Read::Gap { expected, got }, _) => {
                    return fail(
                        self,
                        format!("reports a hole {expected}..{got}; the purged positions start at {skipped:?}"),
                    );
                }
                (_, Some(first)) => {
                    return fail(
                        self,
                        format!("read {seq} past the purged position {first} as if nothing were missing"),
                    );
                }
                _ => {}
            }
            if let Some(why) = self.differs_from_oracle(&reader, seq) {
                return fail(self, format!("after reading {seq}: {why}"));
            }
        }
        if skipped.is_some() {
            // Purged positions at the very end: nothing after them to show the hole.
            self.snaps.stats.checks_at_hole += 1;
            return;
        }
        let (mine, want) = (comparable(&reader), comparable(&self.oracle.reader));
        if mine != want {
            return fail(
                self,
                format!("at the end of the log it differs from the oracle: {}", first_difference(&mine, &want)),
            );
        }
        self.snaps.stats.checks_to_end += 1;
    }
}
