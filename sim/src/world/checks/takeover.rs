//! The checker of a takeover's possibly-missed slot (`sim/README.md`, "Invariants and where they are checked";
//! `jaque_core::schedule::Grid::takeover_due`). An engine that takes an object over (at its catch-up, at an
//! epoch record that moves the object to it, or re-taking every object after a jump to a snapshot) cannot tell
//! whether the previous owner ran the object's last slot: if that slot fell within the takeover window (ttl +
//! ttl/3 + expiry lag) before the takeover, the new owner runs it soon, spread over `min(window, interval /
//! 2)` after the takeover, and never after the next slot; an older slot was the previous owner's, and the
//! schedule continues at the next slot (a schedule not started yet, at its first check).
//!
//! The slots, restated here rather than asked of core: without spreading, the anchor and every interval after
//! it; with it (the cluster format the engine's reader is under at the takeover is 3 or more), the first check
//! at `anchor + key % min(interval, 10 s)` and then the grid `anchor + key % interval + k * interval` after it,
//! the key being the object's HRW key. The first check counts as a slot.
//!
//! So after every takeover the object's next dispatch by that engine incarnation must leave by that deadline
//! plus the check linger (`CheckBatching`: a due check waits at most that long for others), all on the engine's
//! own clock (its takeover, its dispatch and the object's anchor are what it computes with, so its skew does
//! not enter). Invariant 7's budget, `max(window, interval)` after convergence, also takes a takeover that
//! waits for the next slot; this does not.
//!
//! Exclusions, each because the engine may then rightly dispatch later or never: the object is paused (no
//! schedule); the engine reads a put, delete, pause or resume of it (the schedule moves to the new definition's
//! anchor, stops, or restarts at the next slot); a check-now of it read since makes it due at that moment
//! (core's `set_next(now)`, even over an earlier due, and the linger starts again: seeds 1077, 1493, 1000540
//! and 1001735 showed it, up to 45 ms past the takeover's due), so the deadline is at least then; it loses the object again (a later epoch), or re-takes it
//! at a jump (a new deadline from then); the engine is paused (its timers fire late, on resuming), crashes
//! (a new incarnation) or leaves. A cut from the store or NATS, clogging and lag delay messages, not timers, and
//! a dispatch is seen as the engine's output, whatever then happens to it, so they need no exclusion.

use crate::world::{ms, Category, Sim};
use jaque_core::EventBody;
use jaque_core::{Engine, Input, Life, LogEntry, ObjectId, Time};
use std::collections::{BTreeMap, BTreeSet};

/// Per engine slot, its incarnation and the objects it took over and has not dispatched since.
#[derive(Default)]
pub(in crate::world) struct Takeovers {
    engines: BTreeMap<usize, (u64, BTreeMap<ObjectId, Due>)>,
}

#[derive(Clone, Copy, Debug)]
struct Due {
    /// The engine's clock when it took the object over, and by when it must dispatch its check.
    gained: Time,
    deadline: Time,
}

/// What an engine step keeps from before its input to after.
pub(in crate::world) struct TakeoverStep {
    /// The objects it owned before an input that may move ownership (`None`: any other input).
    before: Option<BTreeSet<ObjectId>>,
    restores: u64,
    /// An object whose schedule the input's event moves.
    rescheduled: Option<ObjectId>,
    /// An object the input's event asks to check now: its check is due at once (`set_next(now)`), which may
    /// be a little later than its takeover's due, and waits the linger again.
    check_now: Option<ObjectId>,
}

/// How far after its put a new object's first check may fall, when schedules are spread (core's
/// `schedule::FIRST_SPREAD`, restated).
const FIRST_SPREAD_MS: u64 = 10_000;

/// The active cluster format from which engines spread schedules (core's `schedule::SPREAD_FORMAT`, restated).
const SPREAD_FORMAT: u32 = 3;

/// An object's schedule for the oracle: when its first check falls, and where its grid starts.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    anchor: Time,
    interval_ms: u64,
    key: u64,
    spread: bool,
}

/// When an engine that took an object over at `gained` (its clock) must dispatch it: the possibly-missed
/// slot (the first check counts as one) within `min(window, interval / 2)`, never after the next slot; else
/// the next slot (the first check, if the schedule has not started).
fn deadline(s: Schedule, gained: Time, window_ms: u64) -> Time {
    let iv = i128::from(s.interval_ms.max(1));
    let (first, origin) = if s.spread {
        let a = i128::from(s.anchor.0);
        let k = i128::from(s.key);
        (a + k % iv.min(i128::from(FIRST_SPREAD_MS)), a + k % iv)
    } else {
        (i128::from(s.anchor.0), i128::from(s.anchor.0))
    };
    let g = i128::from(gained.0);
    let as_time = |t: i128| Time(u64::try_from(t).expect("a slot after the anchor"));
    if g < first {
        return as_time(first);
    }
    // The grid's last point at or before `gained` (extended back before its origin), and the one after it: the
    // next slot, as it is after `gained`, so after the first check. The last slot is that point, or the first
    // check if the point falls before it (the grid's points before the first check are not run).
    let point = origin + (g - origin).div_euclid(iv) * iv;
    let next = point + iv;
    let prev = point.max(first);
    if g - prev < i128::from(window_ms) {
        as_time(next.min(g + i128::from(window_ms).min(iv / 2)))
    } else {
        as_time(next)
    }
}

impl Sim {
    /// Before engine `n` handles `input`: what it owns, if the input may move ownership.
    pub(in crate::world) fn takeover_before(&self, n: usize, input: &Option<Input>) -> TakeoverStep {
        let engine = self.nodes[n].engine().expect("step of a running engine");
        let moves = matches!(
            input,
            Some(Input::Life(Life::CaughtUp | Life::Restore(_) | Life::Log { entry: LogEntry::Epoch(_), .. }))
        );
        let rescheduled = match input {
            Some(Input::Life(Life::Log { entry: LogEntry::Event(e), .. })) => {
                matches!(e.body, EventBody::Put { .. } | EventBody::Delete | EventBody::Pause | EventBody::Resume)
                    .then(|| e.object.clone())
            }
            _ => None,
        };
        let check_now = match input {
            Some(Input::Life(Life::Log { entry: LogEntry::Event(e), .. })) => {
                matches!(e.body, EventBody::CheckRequested).then(|| e.object.clone())
            }
            _ => None,
        };
        TakeoverStep {
            before: moves.then(|| engine.owned_objects().cloned().collect()),
            restores: engine.counters.restores,
            rescheduled,
            check_now,
        }
    }

    /// After engine `n`'s step (before its outputs are carried out): a takeover's deadline passed without a
    /// dispatch is a violation; then the objects it took over in this step get theirs. False on a violation.
    pub(in crate::world) fn takeover_after(&mut self, n: usize, step: TakeoverStep) -> bool {
        let inc = self.nodes[n].inc;
        let now = self.nodes[n].local(self.now);
        let engine = self.nodes[n].engine().expect("a running engine");
        let cfg = engine.config();
        let slack = ms(cfg.check_batching.linger) + 1;
        let window = ms(cfg.takeover_window());
        let leaving = engine.is_leaving();
        let entry = self.takeovers.engines.entry(n).or_insert_with(|| (inc, BTreeMap::new()));
        if entry.0 != inc || leaving {
            *entry = (inc, BTreeMap::new());
        }
        if let Some(o) = &step.rescheduled {
            entry.1.remove(o);
        }
        if let Some(d) = step.check_now.as_ref().and_then(|o| entry.1.get_mut(o)) {
            d.deadline = d.deadline.max(now);
        }
        let late = entry.1.iter().find(|(_, d)| now.0 > d.deadline.0 + slack).map(|(o, d)| (o.clone(), *d));
        if let Some((o, d)) = late {
            let msg = format!(
                "e{} took {o} over at {} (its clock) and had not dispatched its check by {now}: its takeover's deadline was {} (+ {slack}ms linger)",
                n + 1,
                d.gained,
                d.deadline
            );
            self.fail(Category::Liveness, "7 takeover slot", msg);
            return false;
        }
        let Some(before) = step.before else { return true };
        if leaving {
            return true;
        }
        let jumped = engine.counters.restores != step.restores;
        // Whether the engine spreads schedules: the cluster format its reader is under where it takes over.
        let spread = engine.reader().fence().active_format() >= SPREAD_FORMAT;
        let gained: Vec<(ObjectId, Due)> = engine
            .owned_objects()
            .filter(|o| jumped || !before.contains(*o))
            .filter_map(|o| {
                let v = engine.reader().object(o).filter(|v| !v.paused)?;
                let schedule = Schedule { anchor: v.anchor, interval_ms: v.def.interval_ms, key: v.key, spread };
                let d = deadline(schedule, now, window);
                Some((o.clone(), Due { gained: now, deadline: d }))
            })
            .collect();
        let owned = |e: &Engine, o: &ObjectId| e.owns(o);
        let dues = &mut self.takeovers.engines.get_mut(&n).expect("entered above").1;
        // A jump re-takes every object from the snapshot's state (which may have paused or changed any): the
        // deadlines from before it no longer hold.
        dues.retain(|o, _| !jumped && owned(engine, o));
        dues.extend(gained);
        true
    }

    /// Engine `n` dispatched the check of `object`: a takeover's obligation is met.
    pub(in crate::world) fn takeover_dispatched(&mut self, n: usize, object: &ObjectId) {
        if let Some((_, dues)) = self.takeovers.engines.get_mut(&n) {
            dues.remove(object);
        }
    }

    /// Engine `n` was paused, crashed or left: its takeovers' deadlines no longer hold.
    pub(in crate::world) fn takeover_forget(&mut self, n: usize) {
        self.takeovers.engines.remove(&n);
    }
}

#[cfg(test)]
mod tests {
    use super::{deadline, Schedule};
    use jaque_core::schedule::Grid;
    use jaque_core::Time;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::time::Duration;

    fn unspread(anchor: u64, interval_ms: u64) -> Schedule {
        Schedule { anchor: Time(anchor), interval_ms, key: 123_456_789, spread: false }
    }

    fn spread(anchor: u64, interval_ms: u64, key: u64) -> Schedule {
        Schedule { anchor: Time(anchor), interval_ms, key, spread: true }
    }

    #[test]
    fn the_possibly_missed_slot_is_due_within_the_spread_and_never_after_the_next_slot() {
        // Slot at 10 s, interval 10 s, window 14 s, taken over at 12 s: within min(14, 5) s, by 17 s.
        assert_eq!(deadline(unspread(0, 10_000), Time(12_000), 14_000), Time(17_000));
        // Taken over at 19 s: the next slot, 20 s, comes first.
        assert_eq!(deadline(unspread(0, 10_000), Time(19_000), 14_000), Time(20_000));
        // Interval 60 s, slot at 60 s, taken over at 90 s: outside the window, the next slot.
        assert_eq!(deadline(unspread(0, 60_000), Time(90_000), 14_000), Time(120_000));
        // Interval 50 s, slot at 100 s, taken over at 105 s: within the window (14 s after it at most).
        assert_eq!(deadline(unspread(0, 50_000), Time(105_000), 14_000), Time(119_000));
        // Not started: its anchor.
        assert_eq!(deadline(unspread(50_000, 5_000), Time(12_000), 14_000), Time(50_000));
    }

    #[test]
    fn a_spread_schedule_counts_its_first_check_as_a_slot_then_runs_on_its_offset_grid() {
        // Hourly, key 123_456_789, put at 1 s: first check at 1 + 6.789 s (key % 10 s), grid at 1 + 1056.789 s
        // (key % 1 h) + k * 1 h.
        let s = spread(1000, 3_600_000, 123_456_789);
        // Taken over before the first check: the first check.
        assert_eq!(deadline(s, Time(5000), 14_000), Time(7789));
        // 2 s after it: within the window, by 14 s later (the spread is the window, under half an hour).
        assert_eq!(deadline(s, Time(9789), 14_000), Time(23_789));
        // Long after it: the grid's first slot.
        assert_eq!(deadline(s, Time(100_000), 14_000), Time(1_057_789));
        // 3 s after a grid slot: within 14 s.
        assert_eq!(deadline(s, Time(1_060_789), 14_000), Time(1_074_789));
        // 15 s, key 15_000, put at 0: first check at 5 s, grid at 0 + k * 15 s (its point at 0 is not run).
        let s = spread(0, 15_000, 15_000);
        assert_eq!(deadline(s, Time(0), 14_000), Time(5000));
        // 1 s after the first check: within min(14, 7.5) s, by 13.5 s; the next slot is 15 s.
        assert_eq!(deadline(s, Time(6000), 14_000), Time(13_500));
        // 9 s after it: by the next slot, 15 s.
        assert_eq!(deadline(s, Time(14_000), 14_000), Time(15_000));
    }

    #[test]
    fn core_takes_over_by_the_deadline_spread_or_not() {
        // Core's schedule held to this restatement: the same next slot, and a takeover's due never after the
        // deadline. (The simulator's worlds spread schedules only once the cluster format is 3; this holds
        // spread ones to the oracle before then.)
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..100_000 {
            let anchor = rng.random_range(5_000..1_000_000_000u64);
            let interval_ms = match rng.random_range(0..3) {
                0 => rng.random_range(1..2_000),
                1 => rng.random_range(2_000..20_000),
                _ => rng.random_range(20_000..7_200_000),
            };
            let (key, spread) = (rng.random(), rng.random());
            let gained = Time(anchor - rng.random_range(0..5_000) + rng.random_range(0..3 * interval_ms + 20_000));
            let window_ms = rng.random_range(1..60_000);
            let grid = Grid::new(Time(anchor), Duration::from_millis(interval_ms), key, spread);
            let schedule = Schedule { anchor: Time(anchor), interval_ms, key, spread };
            // With no window, the deadline is the next slot.
            assert_eq!(grid.slot_after(gained), deadline(schedule, gained, 0), "{grid:?} at {gained}");
            let due = grid.takeover_due(gained, Duration::from_millis(window_ms));
            let oracle = deadline(schedule, gained, window_ms);
            assert!(due <= oracle, "{grid:?} taken over at {gained}: due {due}, the oracle's deadline {oracle}");
        }
    }
}
