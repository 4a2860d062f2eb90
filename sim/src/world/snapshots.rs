//! Snapshots and compaction (issue 11), carried out for the core as the shell does (`shell/src/follow/snapshots.rs`,
//! the `WriteSnapshot`, `Purge` and `NeedSnapshot` arms of its role loops), and the checker of invariant 11.
//!
//! **The store** keeps snapshots by position, the newest two (`SNAPSHOTS_KEPT` in `shell/src/coord`), so a
//! late write of an older one never hides a newer one. An engine's `WriteSnapshot` reaches it after the
//! network and the store's own time and is answered with `SnapshotWritten`; in the safety phase a write may be
//! refused, stored with its answer lost, or stored after its client gave up (an object store put on NATS is
//! no more certain than a publish). A `Purge` removes the log's events below its position from what processes
//! read (`log.rs`); the oracle and the checkers keep the whole log.
//!
//! **Readers** start from the latest snapshot: an engine with `Engine::with_reader`, a sink or notifier with
//! `Restore` before `Start`, each following the log from the position after it (a process cut from the store
//! starts from the log's first position, as the shell does when the load fails, and meets the hole there). A
//! reader that meets a hole asks with `NeedSnapshot`; one load at a time, the latest snapshot is read after a
//! delay and handed in as `Restore` — through `wire::encode_snapshot` and `decode_snapshot`, so its bytes are
//! exercised — if it reaches the hole; if the reader jumped, its log is delivered again from the position after
//! the snapshot (the shell's refollow). A snapshot short of the hole is not handed in: the core asks again at
//! its next heartbeat.
//!
//! **Lost history**: after every step of a sink or notifier, the objects its resumes found with purged history
//! (`LogRole::history_lost`) are recorded with their ranges; invariants 9 and 10 let an accepted event be
//! missing only when it was purged and such a range of its object holds it.
//!
//! Readers started from snapshots are checked against invariant 11 by `checks/snapshots.rs`. Engines that jumped
//! are held to invariants 1–8 as any engine (agreement is checked at the position they jumped to).

use super::lifecycle::{by_role, LifeEv, Machine, Role};
use super::process::Process;
use super::process::Who;
use super::{Category, Ev, Phase, Sim};
use crate::params::{stream, Stream};
use jaque_core::format;
use jaque_core::log::{LogReader, ReaderSnapshot};
use jaque_core::Life;
use jaque_core::{wire, IoError, ObjectId, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// How many snapshots the store keeps (the shell's `SNAPSHOTS_KEPT`).
const KEPT: usize = 2;

/// The snapshot store's and the readers' events.
#[derive(Clone, Debug)]
pub(super) enum SnapEv {
    /// Engine `node`'s write reaches the store: stored unless refused; answered if its client still waits
    /// (`answer_by`), else its timeout answers.
    Land {
        node: usize,
        inc: u64,
        snapshot: Box<ReaderSnapshot>,
        refused: bool,
        answer_by: Option<Time>,
    },
    /// The store's answer to the write of the snapshot at `position`.
    Written {
        node: usize,
        inc: u64,
        position: u64,
        result: Result<(), IoError>,
    },
    Purge {
        below: u64,
    },
    /// A reader's load of the latest snapshot reaches the store.
    Read {
        who: Who,
        inc: u64,
        covering: u64,
        answer_by: Time,
    },
    /// Its answer (`None`: nothing stored, or the load failed).
    Loaded {
        who: Who,
        inc: u64,
        covering: u64,
        snapshot: Option<Box<ReaderSnapshot>>,
    },
}

impl SnapEv {
    /// The process incarnation an answer is for: it waits while that process is paused.
    pub fn held_for(&self) -> Option<(Who, u64)> {
        match self {
            SnapEv::Written { node, inc, .. } => Some((Who::Engine(*node), *inc)),
            SnapEv::Loaded { who, inc, .. } => Some((*who, *inc)),
            _ => None,
        }
    }

    pub fn code(&self) -> u64 {
        match self {
            SnapEv::Land { .. } => 1,
            SnapEv::Written { .. } => 2,
            SnapEv::Purge { .. } => 3,
            SnapEv::Read { .. } => 4,
            SnapEv::Loaded { .. } => 5,
        }
    }
}

/// What snapshots and compaction did in a run, for reports.
#[derive(Clone, Debug, Default)]
pub struct SnapStats {
    /// `WriteSnapshot` outputs; writes stored (late ones too); refused; stored with their answer lost; stored
    /// after their client gave up.
    pub writes: u64,
    pub stored: u64,
    pub refused: u64,
    pub answers_lost: u64,
    pub late: u64,
    /// Purges that reached the store, and the highest point purged below.
    pub purges: u64,
    pub purged_below: u64,
    /// Processes started from a snapshot; loads after `NeedSnapshot`; those that made a reader jump.
    pub starts: u64,
    pub loads: u64,
    pub jumps: u64,
    /// Objects the sinks and the notifiers said lost history (each time a resume says so).
    pub lost_sink: u64,
    pub lost_notifier: u64,
    /// Readers invariant 11 started from a snapshot: all, those that read to the log's end, those that stopped
    /// at a hole.
    pub checks: u64,
    pub checks_to_end: u64,
    pub checks_at_hole: u64,
}

pub(super) struct Snaps {
    /// The store: snapshots by position, the newest `KEPT`.
    pub stored: BTreeMap<u64, ReaderSnapshot>,
    /// The store's faults and latencies.
    rng: ChaCha8Rng,
    /// Per object, the ranges `(stored, last]` a sink (a notifier) said its purged events were lost from.
    sink_lost: BTreeMap<ObjectId, Vec<(u64, u64)>>,
    notifier_lost: BTreeMap<ObjectId, Vec<(u64, u64)>>,
    pub stats: SnapStats,
}

impl Snaps {
    pub fn new(seed: u64) -> Snaps {
        Snaps {
            stored: BTreeMap::new(),
            rng: stream(seed, Stream::Snapshots, 0),
            sink_lost: BTreeMap::new(),
            notifier_lost: BTreeMap::new(),
            stats: SnapStats::default(),
        }
    }
}

/// Which role's lost history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostBy {
    Sink,
    Notifier,
}

impl Sim {
    // ---- public API of scenarios and tests ----

    pub fn snap_stats(&self) -> &SnapStats {
        &self.snaps.stats
    }

    /// The positions of the snapshots in the store.
    pub fn stored_snapshots(&self) -> Vec<u64> {
        self.snaps.stored.keys().copied().collect()
    }

    /// Events below this position are purged from what processes read.
    pub fn purged_below(&self) -> u64 {
        self.log.purged_below()
    }

    /// Whether the entry at `seq` is an event purged from what processes read.
    pub fn is_purged(&self, seq: u64) -> bool {
        self.log.purged(seq)
    }

    /// The ranges `(stored, last]` of `object` who purged events a sink (or a notifier) said it lost.
    pub fn lost_history(&self, by: LostBy, object: &ObjectId) -> &[(u64, u64)] {
        let lost = match by {
            LostBy::Sink => &self.snaps.sink_lost,
            LostBy::Notifier => &self.snaps.notifier_lost,
        };
        lost.get(object).map_or(&[], |v| v.as_slice())
    }

    /// Whether the accepted event at `seq` of `object` may be missing from what `by` made of the log: it was
    /// purged, and a range its role said lost holds it.
    pub fn lost_to_purge(&self, by: LostBy, seq: u64, object: &ObjectId) -> bool {
        self.log.purged(seq) && self.lost_history(by, object).iter().any(|(stored, last)| *stored < seq && seq <= *last)
    }

    /// Scenarios: purges the log's events below `below` at once, as a purge landing now would.
    pub fn purge_now(&mut self, below: u64) {
        self.purge_land(below);
    }

    // ---- the engines' writes and purges ----

    /// Store-side latency of one request, and one hop to or from a process (clogged: held for seconds).
    fn store_ms(&mut self) -> u64 {
        self.snaps.rng.random_range(1..=self.params.snapshots.store_ms_max.max(1))
    }

    fn hop_ms(&mut self, who: Who) -> u64 {
        let clogged = by_role!(who, |R, slot| R::slots(self)[slot].clog > 0);
        let mut d = 1 + self.snaps.rng.random_range(0..=self.params.net_delay_max_ms);
        if clogged {
            d += self.snaps.rng.random_range(500..=3_000);
        }
        d
    }

    /// Engine `n`'s `WriteSnapshot`.
    pub(super) fn write_snapshot(&mut self, n: usize, snapshot: Box<ReaderSnapshot>) {
        self.snaps.stats.writes += 1;
        let (inc, position) = (self.nodes[n].inc, snapshot.position);
        let timeout = self.params.append_timeout_ms;
        let by = self.now + Duration::from_millis(timeout);
        let timed_out = |inc| Ev::Snap(SnapEv::Written { node: n, inc, position, result: Err(IoError::Timeout) });
        if !self.nodes[n].can_send() {
            self.after(timeout, timed_out(inc));
            return;
        }
        let k = &self.params.snapshots;
        let (fail, lost, late) = (k.write_fail, k.write_fail + k.answer_loss, k.write_fail + k.answer_loss + k.late);
        let roll: f64 = if self.phase == Phase::Safety { self.snaps.rng.random() } else { 1.0 };
        let there = self.hop_ms(Who::Engine(n)) + self.store_ms();
        let land = |refused, answer_by| Ev::Snap(SnapEv::Land { node: n, inc, snapshot, refused, answer_by });
        if roll < fail {
            self.after(there, land(true, Some(by)));
        } else if roll < lost {
            self.snaps.stats.answers_lost += 1;
            self.after(there, land(false, None));
            self.after(timeout, timed_out(inc));
        } else if roll < late {
            self.snaps.stats.late += 1;
            let at = timeout + self.snaps.rng.random_range(1..=2_000);
            self.after(at, land(false, None));
            self.after(timeout, timed_out(inc));
        } else {
            self.after(there, land(false, Some(by)));
        }
    }

    fn snapshot_land(&mut self, n: usize, inc: u64, snapshot: Box<ReaderSnapshot>, refused: bool, by: Option<Time>) {
        let position = snapshot.position;
        self.h(0x5_0a00 ^ position << 8 ^ u64::from(refused));
        self.tr(|| {
            format!(
                "snapshot store: e{}'s snapshot at {position}: {}",
                n + 1,
                ["stored", "refused"][usize::from(refused)]
            )
        });
        let result = if refused {
            self.snaps.stats.refused += 1;
            Err(IoError::refused("the snapshot store refused the write"))
        } else {
            self.snaps.stats.stored += 1;
            self.sample_stored(&snapshot, &format!("the snapshot e{} stored at {position}", n + 1));
            self.snaps.stored.insert(position, *snapshot);
            while self.snaps.stored.len() > KEPT {
                self.snaps.stored.pop_first();
            }
            Ok(())
        };
        let Some(by) = by else { return };
        if !self.alive(n, inc) {
            return;
        }
        let back = self.now + Duration::from_millis(self.hop_ms(Who::Engine(n)));
        let (at, result) =
            if self.nodes[n].can_recv() && back <= by { (back, result) } else { (by, Err(IoError::Timeout)) };
        self.push(at, Ev::Snap(SnapEv::Written { node: n, inc, position, result }));
    }

    /// Engine `n`'s `Purge`: lost with its connection when the engine cannot reach the store (the next purge
    /// covers its range too, as the shell's log line says).
    pub(super) fn send_purge(&mut self, n: usize, below: u64) {
        if self.nodes[n].can_send() {
            let d = self.hop_ms(Who::Engine(n)) + self.store_ms();
            self.after(d, Ev::Snap(SnapEv::Purge { below }));
        }
    }

    fn purge_land(&mut self, below: u64) {
        self.snaps.stats.purges += 1;
        self.log.purge(below);
        self.snaps.stats.purged_below = self.log.purged_below();
        self.h(0x5_0b00 ^ below << 8);
        self.tr(|| format!("log: events below {below} purged"));
    }

    // ---- readers: starting from a snapshot, holes, restores ----

    /// The snapshot's reader, through the wire's bytes (encoded and decoded as the shell stores and loads it);
    /// `None` (and a violation) if they do not decode. That they hold what went in is the checker's to see.
    pub(in crate::world) fn through_wire(&mut self, snapshot: &ReaderSnapshot, what: &str) -> Option<LogReader> {
        let bytes = wire::encode_snapshot(snapshot);
        match wire::decode_snapshot(&bytes) {
            Ok(reader) => Some(reader),
            Err(e) => {
                self.fail(Category::Safety, "11 snapshots", format!("{what} does not decode: {e}"));
                None
            }
        }
    }

    /// The reader a process starting now begins with: the latest stored snapshot, if it can reach the store.
    pub(super) fn start_reader(&mut self, who: Who) -> Option<LogReader> {
        let reaches = by_role!(who, |R, slot| R::slots(self)[slot].can_send() && R::slots(self)[slot].can_recv());
        let latest = self.snaps.stored.values().next_back().filter(|_| reaches)?.clone();
        // A build of an older format starts without a snapshot of a version it does not read (as the shell's
        // does: it logs it and reads the log from its start, where a hole stops it).
        let speaks = by_role!(who, |R, slot| R::slots(self)[slot].speaks);
        if latest.version > format::snapshot_version(speaks) {
            self.tr(|| format!("{who} cannot read the snapshot at {} (version {})", latest.position, latest.version));
            return None;
        }
        self.snaps.stats.starts += 1;
        self.tr(|| format!("{who} starts from the snapshot at {}", latest.position));
        self.through_wire(&latest, &format!("the snapshot {who} starts from")).map(|r| r.speaking(speaks))
    }

    /// A reader's `NeedSnapshot`: the latest snapshot is loaded unless a load is out already.
    pub(super) fn need_snapshot(&mut self, who: Who, covering: u64) {
        let (inc, loading, reaches) = by_role!(who, |R, slot| {
            let p = &mut R::slots_mut(self)[slot];
            (p.inc, std::mem::replace(&mut p.loading, true), p.can_send() && p.can_recv())
        });
        if loading {
            return;
        }
        self.snaps.stats.loads += 1;
        let timeout = self.params.append_timeout_ms;
        let answer_by = self.now + Duration::from_millis(timeout);
        if reaches {
            let d = self.hop_ms(who) + self.store_ms();
            self.after(d, Ev::Snap(SnapEv::Read { who, inc, covering, answer_by }));
        } else {
            self.push(answer_by, Ev::Snap(SnapEv::Loaded { who, inc, covering, snapshot: None }));
        }
    }

    fn snapshot_read(&mut self, who: Who, inc: u64, covering: u64, answer_by: Time) {
        let (current, hears) = by_role!(who, |R, slot| {
            let p = &R::slots(self)[slot];
            (p.is_current(inc), p.can_recv())
        });
        if !current {
            return;
        }
        let snapshot = self.snaps.stored.values().next_back().cloned().map(Box::new);
        let back = self.now + Duration::from_millis(self.hop_ms(who));
        let (at, snapshot) = if hears && back <= answer_by { (back, snapshot) } else { (answer_by, None) };
        self.push(at, Ev::Snap(SnapEv::Loaded { who, inc, covering, snapshot }));
    }

    /// The load's answer (a paused process's waits in its buffers): handed in as `Restore` when it reaches the
    /// hole; a reader that jumped follows the log again from the position after the snapshot.
    fn snapshot_loaded(&mut self, who: Who, inc: u64, covering: u64, snapshot: Option<Box<ReaderSnapshot>>) {
        if !self.is_current(who, inc) {
            return;
        }
        by_role!(who, |R, slot| R::slots_mut(self)[slot].loading = false);
        let Some(snapshot) = snapshot.filter(|s| s.position >= covering) else {
            self.tr(|| format!("{who}: no snapshot reaches the hole up to {covering} yet"));
            return;
        };
        let speaks = by_role!(who, |R, slot| R::slots(self)[slot].speaks);
        if snapshot.version > format::snapshot_version(speaks) {
            // A build of an older format cannot restore it: it cannot get past the hole, and stops there.
            let (seq, needs) = (snapshot.position, format::snapshot_needs(snapshot.version));
            self.tr(|| format!("{who} cannot read the snapshot at {seq} (version {})", snapshot.version));
            by_role!(who, |R, slot| self.step_life::<R>(slot, Life::LogTooNew { seq, needs }));
            return;
        }
        let Some(reader) = self.through_wire(&snapshot, &format!("the snapshot {who} loaded")) else { return };
        let reader = reader.speaking(speaks);
        let before = self.reader_position(who);
        by_role!(who, |R, slot| self.step_life::<R>(slot, Life::Restore(Box::new(reader))));
        let Some(after) = self.reader_position(who).filter(|a| Some(*a) > before) else { return };
        self.snaps.stats.jumps += 1;
        self.tr(|| format!("{who} jumped to the snapshot at {after}; follows the log from {}", after + 1));
        if let Who::Engine(n) = who {
            self.check_agreement(n, after);
        }
        self.refollow(who, after);
    }

    /// Where the reader of `who`'s running process stands.
    pub(super) fn reader_position(&self, who: Who) -> Option<u64> {
        by_role!(who, |R, slot| R::slots(self)[slot].role.as_ref().map(|r| r.core().reader().position()))
    }

    /// A snapshot of the reader of `who`'s running process.
    pub(super) fn reader_snapshot(&self, who: Who) -> Option<ReaderSnapshot> {
        by_role!(who, |R, slot| R::slots(self)[slot].role.as_ref().map(|r| r.core().reader().snapshot()))
    }

    /// The shell follows the log again from after `position` (a new consumer): deliveries start there.
    fn refollow(&mut self, who: Who, position: u64) {
        let d = self.hop_ms(who);
        let end = self.log.len();
        let due = self.now + Duration::from_millis(d);
        let (inc, at) = by_role!(who, |R, slot| {
            let p = &mut R::slots_mut(self)[slot];
            p.log.cursor = position;
            (p.inc, p.log.schedule(due))
        });
        self.push(at, Ev::Life(who, LifeEv::LogDeliver { inc, upto: end }));
    }

    /// The objects a step of a log-reading role found with lost history (their counter went from `before`).
    pub(super) fn note_step_lost<R: Role>(&mut self, slot: usize, before: u64) {
        let Some(role) = R::slots(self)[slot].role.as_ref().and_then(|r| r.core().log_role()) else { return };
        let lost = role.counters.objects_lost_history - before;
        if lost > 0 {
            let named: Vec<_> = role.history_lost().iter().cloned().collect();
            let by = match R::who(slot) {
                Who::Sink(_) => LostBy::Sink,
                _ => LostBy::Notifier,
            };
            self.note_lost_history(by, R::who(slot), lost, named.iter());
        }
    }

    /// The objects a step of a sink or notifier found with lost history: the last `new` of `named`.
    pub(super) fn note_lost_history<'a>(
        &mut self,
        by: LostBy,
        who: Who,
        new: u64,
        named: impl DoubleEndedIterator<Item = &'a (ObjectId, u64, u64)> + ExactSizeIterator,
    ) {
        if new == 0 {
            return;
        }
        if new as usize > named.len() {
            let msg = format!("{who} counted {new} objects with lost history but names {}", named.len());
            return self.fail(Category::Safety, "11 snapshots", msg);
        }
        let found: Vec<(ObjectId, u64, u64)> = named.rev().take(new as usize).cloned().collect();
        let (lost, count) = match by {
            LostBy::Sink => (&mut self.snaps.sink_lost, &mut self.snaps.stats.lost_sink),
            LostBy::Notifier => (&mut self.snaps.notifier_lost, &mut self.snaps.stats.lost_notifier),
        };
        *count += new;
        let said: Vec<String> = found.iter().map(|(o, stored, last)| format!("{o} ({stored}, {last}]")).collect();
        for (object, stored, last) in found {
            lost.entry(object).or_default().push((stored, last));
        }
        self.tr(|| format!("{who} says these lost history to a purge: {}", said.join(", ")));
    }

    pub(super) fn snap_event(&mut self, e: SnapEv) {
        match e {
            SnapEv::Land { node, inc, snapshot, refused, answer_by } => {
                self.snapshot_land(node, inc, snapshot, refused, answer_by)
            }
            SnapEv::Written { node, inc, position, result } => {
                if self.alive(node, inc) {
                    self.step(node, Some(jaque_core::Input::SnapshotWritten { position, result }));
                }
            }
            SnapEv::Purge { below } => self.purge_land(below),
            SnapEv::Read { who, inc, covering, answer_by } => self.snapshot_read(who, inc, covering, answer_by),
            SnapEv::Loaded { who, inc, covering, snapshot } => self.snapshot_loaded(who, inc, covering, snapshot),
        }
    }
}

/// The lost-history counter of a log-reading role's process now (0 for other roles).
pub(super) fn lost_so_far<R: Role>(p: &Process<R>) -> u64 {
    p.role.as_ref().and_then(|r| r.core().log_role()).map_or(0, |r| r.counters.objects_lost_history)
}

#[cfg(test)]
mod tests {
    use crate::params::{Params, SnapshotParams};

    /// What `scripts/test.sh` sweeps (seeds 1..=200) draws of snapshots and compaction.
    #[test]
    fn the_ci_sweep_runs_snapshots_off_in_some_seeds_and_every_kind_of_compaction_in_the_others() {
        let drawn: Vec<SnapshotParams> = (1..=200).map(|seed| Params::draw(seed).snapshots).collect();
        let off = drawn.iter().filter(|k| !k.on).count();
        assert!((20..70).contains(&off), "{off} of 200 seeds without snapshots");
        let on: Vec<&SnapshotParams> = drawn.iter().filter(|k| k.on).collect();
        for every in [5, 20, 50, 200] {
            assert!(on.iter().any(|k| k.every == every), "every {every}");
        }
        // Purges that leave lagging readers nothing (0), ones that come only in long runs, and none at all.
        for retention in [0, 10_000, 30_000, 7 * 24 * 3_600_000] {
            assert!(on.iter().any(|k| k.retention_ms == retention), "retention {retention}ms");
        }
        assert!(on.iter().any(|k| k.interval_ms == 1_000) && on.iter().any(|k| k.interval_ms == 300_000));
        assert!(on.iter().any(|k| k.write_fail > 0.0 && k.answer_loss > 0.0 && k.late > 0.0), "every store fault");
        assert!(on.iter().any(|k| k.write_fail == 0.0 && k.answer_loss == 0.0 && k.late == 0.0), "a faultless store");
    }
}
