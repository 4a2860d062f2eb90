//! The check schedule as a pure function of the log: an object's checks fall on slots
//! `anchor + k * interval`, where the anchor is the time of the put that defined it. Every owner computes the
//! same slots, so a new owner continues the old owner's schedule instead of checking everything at once.

use crate::time::{millis, Time};
use std::time::Duration;

/// The first slot strictly after `t` (the anchor itself when `t` is before it).
pub fn slot_after(anchor: Time, interval: Duration, t: Time) -> Time {
    let iv = millis(interval).max(1);
    if t < anchor {
        return anchor;
    }
    let k = (t.0 - anchor.0) / iv + 1;
    Time(anchor.0.saturating_add(k.saturating_mul(iv)))
}

/// The last slot at or before `t`, if the schedule has started by then.
pub fn slot_at_or_before(anchor: Time, interval: Duration, t: Time) -> Option<Time> {
    let iv = millis(interval).max(1);
    if t < anchor {
        return None;
    }
    Some(Time(anchor.0 + (t.0 - anchor.0) / iv * iv))
}

/// When a new owner that gained an object at `now` checks it first.
///
/// The previous owner may have died up to `window` (ttl + ttl/3 + the store's expiry lag) before the handover,
/// so the last slot, if it fell inside that window, may have been missed: it is run soon, spread over the next
/// `min(window, interval / 2)` in the order the slots fell (the one missed longest first), so a takeover of many
/// objects does not fire all at once, and never later than the next slot. (With an interval of at least twice
/// the window this is `window` after the slot.) The new owner cannot tell whether that slot was run before the
/// death (the log holds transitions, not runs), so at most one check per object is run twice. Older slots were
/// the previous owner's to run; the schedule simply continues at the next slot.
pub fn takeover_due(anchor: Time, interval: Duration, now: Time, window: Duration) -> Time {
    let next = slot_after(anchor, interval, now);
    match slot_at_or_before(anchor, interval, now) {
        Some(prev) if now.saturating_since(prev) < window => {
            let spread = millis(window.min(interval / 2));
            let into = millis(window) - millis(now.saturating_since(prev));
            (now + Duration::from_millis(into * spread / millis(window).max(1))).min(next)
        }
        // Never checked yet: a fresh object is checked at once.
        None => anchor,
        Some(_) => next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

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
}
