//! The check schedule as a pure function of the log. An object's checks fall on the slots of its [`Grid`],
//! `anchor + offset + k * interval` (k >= 0), where the anchor is the time of the put that (re)defined it and
//! the offset is its HRW key (a stable hash of its id, `crate::hrw::key`) modulo the interval, so objects
//! defined together (thirty PUT by one script within 50 ms against one small web server) are not probed in the
//! same instant. A new object is not made to wait for the grid's first slot (an hour away, for an hourly
//! check): its first check is at `anchor + key % min(interval, FIRST_SPREAD)`, within ten seconds and spread
//! as well, and its schedule continues at the grid's next slot after that. Every owner computes the same
//! slots, so a new owner continues the old owner's schedule instead of checking everything at once.
//!
//! Spreading is on only once every engine of the cluster computes it (the active cluster format is at least
//! [`SPREAD_FORMAT`]); off, the offset is 0 and the first check is at the anchor: the schedule of the builds
//! before it, slots `anchor + k * interval`.

use crate::log::ObjectView;
use crate::time::{millis, Time};
use std::time::Duration;

/// How far after its put a new object's first check may fall when spreading is on: it is checked within this
/// (or within its interval, if shorter), at a point its key picks, instead of at once (every object a script
/// put at once would be probed in the same instant) or at its grid's first slot (up to an interval away).
pub const FIRST_SPREAD: Duration = Duration::from_secs(10);

/// The active cluster format (`crate::format`) from which engines spread schedules: every member of such a
/// cluster computes the same slots. Below it, `spread` is false.
pub const SPREAD_FORMAT: u32 = 3;

/// One object's check schedule: the first check, then the slots of its grid after it. A value computed from
/// the object's anchor, interval and key, so every engine that reads the same put computes the same one.
///
/// What holds (the tests check it): the offset lies in `[0, interval)`; the first check lies in
/// `[anchor, anchor + min(interval, FIRST_SPREAD))`, and is the grid's first slot when the interval is at
/// most `FIRST_SPREAD`; the slot after the first check is on the grid, at most one interval later (it may be
/// less: a longer interval's grid slots before the first check are not run); with `spread` false the first
/// check is the anchor and the grid `anchor + k * interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    anchor: Time,
    offset_ms: u64,
    first: Time,
    /// In milliseconds, at least 1.
    interval_ms: u64,
}

impl Grid {
    /// The schedule of an object put at `anchor` with `interval` and HRW key `key`; `spread`: whether the
    /// cluster spreads schedules (its active format is at least [`SPREAD_FORMAT`]).
    pub fn new(anchor: Time, interval: Duration, key: u64, spread: bool) -> Grid {
        let interval_ms = millis(interval).max(1);
        let (offset_ms, first_ms) =
            if spread { (key % interval_ms, key % interval_ms.min(millis(FIRST_SPREAD))) } else { (0, 0) };
        Grid { anchor, offset_ms, first: Time(anchor.0.saturating_add(first_ms)), interval_ms }
    }

    /// The schedule of an object as the log says it is.
    pub fn of(view: &ObjectView, spread: bool) -> Grid {
        Grid::new(view.anchor, view.def.interval(), view.key, spread)
    }

    /// The time of the put the schedule starts from.
    pub fn anchor(&self) -> Time {
        self.anchor
    }

    /// How far into each interval the grid's slots fall.
    pub fn offset(&self) -> Duration {
        Duration::from_millis(self.offset_ms)
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// The first check of the object: its due time when it is new (or newly redefined).
    pub fn first(&self) -> Time {
        self.first
    }

    /// The grid's first slot, `anchor + offset` (not run when it falls before the first check).
    fn start(&self) -> Time {
        Time(self.anchor.0.saturating_add(self.offset_ms))
    }

    /// The first slot strictly after `t` (the first check when `t` is before it).
    pub fn slot_after(&self, t: Time) -> Time {
        let start = self.start();
        if t < self.first {
            return self.first;
        }
        if t < start {
            return start;
        }
        let k = (t.0 - start.0) / self.interval_ms + 1;
        Time(start.0.saturating_add(k.saturating_mul(self.interval_ms)))
    }

    /// The last slot at or before `t`, if the schedule has started by then (the first check, until the grid's
    /// next slot after it).
    pub fn slot_at_or_before(&self, t: Time) -> Option<Time> {
        let start = self.start();
        if t < self.first {
            return None;
        }
        if t < start {
            return Some(self.first);
        }
        let grid = Time(start.0 + (t.0 - start.0) / self.interval_ms * self.interval_ms);
        Some(grid.max(self.first))
    }

    /// When a new owner that gained the object at `now` checks it first.
    ///
    /// The previous owner may have died up to `window` (ttl + ttl/3 + the store's expiry lag) before the
    /// handover, so the last slot, if it fell inside that window, may have been missed: it is run soon, spread
    /// over the next `min(window, interval / 2)` in the order the slots fell (the one missed longest first), so
    /// a takeover of many objects does not fire all at once, and never later than the next slot. (With an
    /// interval of at least twice the window this is `window` after the slot.) The new owner cannot tell
    /// whether that slot was run before the death (the log holds transitions, not runs), so at most one check
    /// per object is run twice. Older slots were the previous owner's to run; the schedule simply continues at
    /// the next slot. The first check is a slot like the others: gained before it, the object is checked then;
    /// gained within the window after it, it may be checked again soon.
    pub fn takeover_due(&self, now: Time, window: Duration) -> Time {
        let next = self.slot_after(now);
        match self.slot_at_or_before(now) {
            Some(prev) if now.saturating_since(prev) < window => {
                let spread = millis(window.min(self.interval() / 2));
                let into = millis(window) - millis(now.saturating_since(prev));
                (now + Duration::from_millis(into * spread / millis(window).max(1))).min(next)
            }
            // Never checked yet: its first check.
            None => self.first,
            Some(_) => next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Duration = Duration::from_secs(1);

    // The schedule without spreading (before cluster format 3): slots `anchor + k * interval`, the first at the
    // anchor.
    fn slot_after(anchor: Time, interval: Duration, t: Time) -> Time {
        Grid::new(anchor, interval, 0, false).slot_after(t)
    }

    fn slot_at_or_before(anchor: Time, interval: Duration, t: Time) -> Option<Time> {
        Grid::new(anchor, interval, 0, false).slot_at_or_before(t)
    }

    fn takeover_due(anchor: Time, interval: Duration, now: Time, window: Duration) -> Time {
        Grid::new(anchor, interval, 0, false).takeover_due(now, window)
    }

    #[test]
    fn slots_fall_on_the_anchor_grid() {
        assert_eq!(slot_after(Time(1000), 10 * S, Time(0)), Time(1000));
        assert_eq!(slot_after(Time(1000), 10 * S, Time(1000)), Time(11_000));
        assert_eq!(slot_after(Time(1000), 10 * S, Time(10_999)), Time(11_000));
        assert_eq!(slot_at_or_before(Time(1000), 10 * S, Time(999)), None);
        assert_eq!(slot_at_or_before(Time(1000), 10 * S, Time(21_000)), Some(Time(21_000)));
    }

    #[test]
    fn takeover_runs_a_possibly_missed_slot_soon_and_otherwise_continues() {
        let window = 14 * S;
        // Slot at 100s, taken over at 105s: inside the window, run 14 s after it (the interval is over twice
        // the window), before the next slot at 150s.
        assert_eq!(takeover_due(Time(0), 50 * S, Time(105_000), window), Time(114_000));
        // Slot at 60s, taken over at 90s: outside the window, continue at the next slot, 120s.
        assert_eq!(takeover_due(Time(0), 60 * S, Time(90_000), window), Time(120_000));
        // An interval under the window: the possibly-missed slot is not swallowed by the next one. Slot at 10s,
        // taken over at 12s (2 s into the window of 14): run at 12s + 12/14 of 5 s (half the interval).
        assert_eq!(takeover_due(Time(0), 10 * S, Time(12_000), window), Time(16_285));
        // The same slot taken over 5 s after it: missed longer, run sooner after the takeover (3.2 s, not 4.3).
        assert_eq!(takeover_due(Time(0), 10 * S, Time(15_000), window), Time(18_214));
        // Taken over 9 s after it, with the next slot 1 s away: the next slot.
        assert_eq!(takeover_due(Time(0), 10 * S, Time(19_000), window), Time(20_000));
        // Very short intervals: the next slot comes first.
        assert_eq!(takeover_due(Time(0), S, Time(12_500), window), Time(12_982).min(Time(13_000)));
        // Not started yet.
        assert_eq!(takeover_due(Time(50_000), 5 * S, Time(12_000), window), Time(50_000));
    }

    #[test]
    fn without_spreading_the_grid_is_the_anchor_schedule_whatever_the_key() {
        let g = Grid::new(Time(1000), 10 * S, 123_456_789, false);
        assert_eq!((g.first(), g.offset()), (Time(1000), Duration::ZERO));
        for t in [0, 999, 1000, 1001, 10_999, 11_000, 21_000, 1_000_000] {
            let t = Time(t);
            assert_eq!(g.slot_after(t), slot_after(Time(1000), 10 * S, t));
            assert_eq!(g.slot_at_or_before(t), slot_at_or_before(Time(1000), 10 * S, t));
            assert_eq!(g.takeover_due(t, 14 * S), takeover_due(Time(1000), 10 * S, t, 14 * S));
        }
    }

    #[test]
    fn a_spread_grid_is_offset_by_the_key_and_its_first_check_is_its_first_slot_when_the_interval_is_short() {
        // 123_456_789 % 10_000 = 6789: the grid is 7.789s + k * 10s, and the first check (10 s is not over
        // FIRST_SPREAD) is its first slot.
        let g = Grid::new(Time(1000), 10 * S, 123_456_789, true);
        assert_eq!((g.offset(), g.first()), (Duration::from_millis(6789), Time(7789)));
        assert_eq!(g.slot_after(Time(0)), Time(7789));
        assert_eq!(g.slot_after(Time(7788)), Time(7789));
        assert_eq!(g.slot_after(Time(7789)), Time(17_789));
        assert_eq!(g.slot_at_or_before(Time(7788)), None);
        assert_eq!(g.slot_at_or_before(Time(20_000)), Some(Time(17_789)));
    }

    #[test]
    fn a_long_interval_checks_a_new_object_within_the_first_spread_then_continues_on_its_grid() {
        // Hourly: 123_456_789 % 3_600_000 = 1_056_789 (the grid at 1057.789s + k * 1h), but the first check is
        // 6.789 s after the put (123_456_789 % 10_000), not 17 minutes.
        let g = Grid::new(Time(1000), 3600 * S, 123_456_789, true);
        assert_eq!((g.offset(), g.first()), (Duration::from_millis(1_056_789), Time(7789)));
        assert_eq!(g.slot_after(Time(1000)), Time(7789));
        assert_eq!(g.slot_after(Time(7789)), Time(1_057_789));
        assert_eq!(g.slot_after(Time(1_057_789)), Time(4_657_789));
        assert_eq!(g.slot_at_or_before(Time(100_000)), Some(Time(7789)));
        assert_eq!(g.slot_at_or_before(Time(1_057_789)), Some(Time(1_057_789)));
        // The grid's first slot may fall before the first check (15 s, key 15_000: the grid at 0 + k * 15s,
        // the first check at 5 s): it is not run, the schedule goes on at 15 s.
        let g = Grid::new(Time(0), 15 * S, 15_000, true);
        assert_eq!((g.offset(), g.first()), (Duration::ZERO, Time(5000)));
        assert_eq!(g.slot_after(Time(0)), Time(5000));
        assert_eq!(g.slot_after(Time(5000)), Time(15_000));
        assert_eq!(g.slot_at_or_before(Time(4999)), None);
        assert_eq!(g.slot_at_or_before(Time(14_999)), Some(Time(5000)));
    }

    #[test]
    fn a_takeover_of_a_spread_grid_treats_the_first_check_as_a_slot() {
        let window = 14 * S;
        let g = Grid::new(Time(1000), 3600 * S, 123_456_789, true);
        // Gained before the first check (7.789s): it runs then.
        assert_eq!(g.takeover_due(Time(5000), window), Time(7789));
        // Gained 2 s after it: it may have been missed, so it runs again within the window (12/14 of 14 s),
        // not at the grid's first slot 17 minutes later.
        assert_eq!(g.takeover_due(Time(9789), window), Time(21_789));
        // Gained long after it: the grid's next slot.
        assert_eq!(g.takeover_due(Time(100_000), window), Time(1_057_789));
        // Gained 3 s after a grid slot: that slot again, 11 s later.
        assert_eq!(g.takeover_due(Time(1_060_789), window), Time(1_071_789));
        // A short interval: never after the next slot (7.789s + 10s).
        let g = Grid::new(Time(1000), 10 * S, 123_456_789, true);
        assert_eq!(g.takeover_due(Time(16_789), window), Time(17_789));
        assert_eq!(g.takeover_due(Time(0), window), Time(7789));
    }

    #[test]
    fn thirty_objects_put_at_once_with_a_one_second_interval_are_not_checked_in_the_same_instant() {
        // The motivating case: a script PUTs web-0..web-29 within 50 ms, each checked every second against
        // one small web server.
        let offsets: Vec<u64> = (0..30)
            .map(|i| millis(Grid::new(Time(0), S, crate::hrw::key(&format!("web-{i}")), true).offset()))
            .collect();
        let mut buckets = [0u32; 100];
        for &o in &offsets {
            assert!(o < 1000);
            buckets[(o / 10) as usize] += 1;
        }
        let crowded = buckets.iter().max().copied().unwrap_or(0);
        assert!(crowded <= 3, "{crowded} of 30 offsets in one 10 ms bucket: {offsets:?}");
        // And they cover the second, not one corner of it.
        let (lo, hi) = (offsets.iter().min().unwrap(), offsets.iter().max().unwrap());
        assert!(hi - lo >= 500, "offsets span only {lo}..{hi} ms: {offsets:?}");
        // Their first checks are their first slots (1 s is under FIRST_SPREAD): spread the same way.
        for i in 0..30 {
            let g = Grid::new(Time(0), S, crate::hrw::key(&format!("web-{i}")), true);
            assert_eq!(g.first(), Time(0) + g.offset());
        }
    }

    /// A slot of the schedule: the first check or a grid slot after it.
    fn is_slot(g: &Grid, s: Time) -> bool {
        let start = g.anchor.0 + g.offset_ms;
        s == g.first() || s > g.first() && s.0 >= start && (s.0 - start).is_multiple_of(g.interval_ms)
    }

    proptest! {
        #[test]
        fn slots_hold_their_rules_for_any_key_interval_and_time(
            key in any::<u64>(),
            interval_ms in prop_oneof![1u64..2_000, 2_000u64..20_000, 20_000u64..7_200_000],
            anchor in 0u64..1_000_000_000_000,
            back in 0u64..20_000,
            ahead in 0u64..100_000_000,
            window_ms in 1u64..100_000,
            spread in any::<bool>(),
        ) {
            let interval = Duration::from_millis(interval_ms);
            let g = Grid::new(Time(anchor), interval, key, spread);
            let first_spread = interval_ms.min(millis(FIRST_SPREAD));
            prop_assert!(g.offset_ms < interval_ms);
            prop_assert!(g.first() >= Time(anchor) && g.first().0 - anchor < first_spread);
            if spread {
                prop_assert_eq!(g.offset_ms, key % interval_ms);
                prop_assert_eq!(g.first(), Time(anchor + key % first_spread));
            } else {
                prop_assert_eq!((g.offset_ms, g.first()), (0, Time(anchor)));
            }
            // The slot after the first check is on the grid, at most an interval later.
            let second = g.slot_after(g.first());
            prop_assert!(second > g.first() && second.0 - g.first().0 <= interval_ms && is_slot(&g, second));
            let t = Time((anchor + ahead).saturating_sub(back));
            let next = g.slot_after(t);
            prop_assert!(next > t && is_slot(&g, next));
            prop_assert!(t < g.first() || next.0 - t.0 <= interval_ms);
            match g.slot_at_or_before(t) {
                None => prop_assert!(t < g.first() && next == g.first()),
                // The last slot: nothing between it and the next.
                Some(prev) => prop_assert!(prev <= t && is_slot(&g, prev) && g.slot_after(prev) == next),
            }
            let due = g.takeover_due(t, Duration::from_millis(window_ms));
            prop_assert!(due >= t && due <= next, "takeover at {} due {} after the next slot {}", t, due, next);
            if !spread {
                // Today's schedule, spelled out.
                let old = if t.0 < anchor { anchor } else { anchor + ((t.0 - anchor) / interval_ms + 1) * interval_ms };
                prop_assert_eq!(next, Time(old));
            }
        }
    }
}
