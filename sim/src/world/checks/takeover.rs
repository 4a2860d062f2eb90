//! The checker of a takeover's possibly-missed slot (`sim/README.md`, "Invariants and where they are checked";
//! `jaque_core::schedule::takeover_due`). An engine that takes an object over (at its catch-up, at an epoch
//! record that moves the object to it, or re-taking every object after a jump to a snapshot) cannot tell
//! whether the previous owner ran the object's last slot: if that slot fell within the takeover window (ttl +
//! ttl/3 + expiry lag) before the takeover, the new owner runs it soon, spread over `min(window, interval /
//! 2)` after the takeover, and never after the next slot; an older slot was the previous owner's, and the
//! schedule continues at the next slot (a schedule not started yet, at its anchor).
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

/// When an engine that took an object over at `gained` (its clock) must dispatch it: the possibly-missed
/// slot within `min(window, interval / 2)`, never after the next slot; else the next slot (the anchor, if the
/// schedule has not started).
fn deadline(anchor: Time, interval_ms: u64, gained: Time, window_ms: u64) -> Time {
    let iv = interval_ms.max(1);
    if gained < anchor {
        return anchor;
    }
    let prev = anchor.0 + (gained.0 - anchor.0) / iv * iv;
    let next = prev + iv;
    if gained.0 - prev < window_ms {
        Time(next.min(gained.0 + window_ms.min(iv / 2)))
    } else {
        Time(next)
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
        let gained: Vec<(ObjectId, Due)> = engine
            .owned_objects()
            .filter(|o| jumped || !before.contains(*o))
            .filter_map(|o| {
                let v = engine.reader().object(o).filter(|v| !v.paused)?;
                let d = deadline(v.anchor, v.def.interval_ms, now, window);
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
    use super::deadline;
    use jaque_core::Time;

    #[test]
    fn the_possibly_missed_slot_is_due_within_the_spread_and_never_after_the_next_slot() {
        // Slot at 10 s, interval 10 s, window 14 s, taken over at 12 s: within min(14, 5) s, by 17 s.
        assert_eq!(deadline(Time(0), 10_000, Time(12_000), 14_000), Time(17_000));
        // Taken over at 19 s: the next slot, 20 s, comes first.
        assert_eq!(deadline(Time(0), 10_000, Time(19_000), 14_000), Time(20_000));
        // Interval 60 s, slot at 60 s, taken over at 90 s: outside the window, the next slot.
        assert_eq!(deadline(Time(0), 60_000, Time(90_000), 14_000), Time(120_000));
        // Interval 50 s, slot at 100 s, taken over at 105 s: within the window (14 s after it at most).
        assert_eq!(deadline(Time(0), 50_000, Time(105_000), 14_000), Time(119_000));
        // Not started: its anchor.
        assert_eq!(deadline(Time(50_000), 5_000, Time(12_000), 14_000), Time(50_000));
    }
}
