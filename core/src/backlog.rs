//! A worker's backlog: check work taken from the queue and not started yet, because every one of the worker's
//! check slots is busy. The decision of what to start next, and what is no longer worth starting, is here, so
//! the simulator drives the same policy as the `jaque` binary.
//!
//! - Work taken longer ago than its timeout plus [`CHECK_GRACE`] is dropped unstarted and counted: its engine
//!   has stopped waiting for the result (it counts the check as lost), so running it would only take a slot
//!   from work whose result is still awaited.
//! - The rest is started in a random order, preferring work taken less than `CHECK_GRACE` ago: a check that
//!   runs to its timeout is back in time only if it starts within the grace. A fixed order fails under an
//!   overload: oldest first runs only checks whose results come too late once the backlog is longer than the
//!   grace (no outage is recorded at all), and newest first keeps picking the objects whose slots fall in
//!   step with the worker's free slots, leaving the others unchecked for as long as the overload lasts.
//! - Expired work no pick meets is swept out as the backlog doubles, so what waits stays within about twice
//!   the work of the last timeout plus grace.
//!
//! Time comes in as values and the random choice as a function the driver passes (`below(n)`, uniform in
//! `0..n`): a seeded generator in the simulator, the operating system's seed in the binary.

use crate::engine::CHECK_GRACE;
use crate::time::Time;
use std::time::Duration;

/// How many times a pick taken more than `CHECK_GRACE` ago is put back for another before it is started anyway.
pub const PICKS: usize = 4;

/// Below this many waiting, no sweep: a message of work is never swept right as it arrives.
const SWEEP_FLOOR: usize = 32;

/// Work taken and not started yet, each piece with when it was taken and until when it is worth starting.
#[derive(Clone, Debug)]
pub struct Backlog<T> {
    waiting: Vec<Waiting<T>>,
    /// How many were waiting after the last sweep of the expired ones: the next comes at twice as many.
    swept: usize,
    /// Dropped unstarted since `take_expired` was last called.
    expired: u64,
}

#[derive(Clone, Debug)]
struct Waiting<T> {
    taken: Time,
    /// Its engine waits for the result until the check's timeout plus the grace have passed since it sent it.
    until: Time,
    item: T,
}

impl<T> Default for Backlog<T> {
    fn default() -> Self {
        Backlog { waiting: Vec::new(), swept: 0, expired: 0 }
    }
}

impl<T> Backlog<T> {
    /// How long after it was taken a check with `timeout` is still worth starting.
    pub fn useful_for(timeout: Duration) -> Duration {
        timeout + CHECK_GRACE
    }

    /// Takes one piece of work at `now`, a check with `timeout`. Sweeps the expired ones when the backlog has
    /// doubled since the last sweep, or since it was last that small.
    pub fn take(&mut self, now: Time, timeout: Duration, item: T) {
        self.waiting.push(Waiting { taken: now, until: now + Self::useful_for(timeout), item });
        if self.waiting.len() > 2 * self.swept.max(SWEEP_FLOOR) {
            let before = self.waiting.len();
            self.waiting.retain(|w| now < w.until);
            self.expired += (before - self.waiting.len()) as u64;
            self.swept = self.waiting.len();
        }
    }

    /// Work still worth starting at `now`, picked at random (`below(n)` uniform in `0..n`), with how long it
    /// waited since it was taken; the expired ones met on the way are dropped and counted. A pick taken more
    /// than `CHECK_GRACE` ago is put back for another up to `PICKS` times.
    pub fn next(&mut self, now: Time, mut below: impl FnMut(usize) -> usize) -> Option<(T, Duration)> {
        let next = self.pick(now, &mut below);
        // Sweeps come at twice what waits after this, so a backlog drained after a burst is swept as soon as it
        // doubles again, not only once it is twice the burst.
        self.swept = self.swept.min(self.waiting.len());
        next
    }

    fn pick(&mut self, now: Time, below: &mut impl FnMut(usize) -> usize) -> Option<(T, Duration)> {
        let mut picks = 0;
        while !self.waiting.is_empty() {
            let i = below(self.waiting.len()).min(self.waiting.len() - 1);
            let w = &self.waiting[i];
            if now >= w.until {
                self.waiting.swap_remove(i);
                self.expired += 1;
                continue;
            }
            picks += 1;
            let waited = now.saturating_since(w.taken);
            if waited < CHECK_GRACE || picks >= PICKS {
                return Some((self.waiting.swap_remove(i).item, waited));
            }
        }
        None
    }

    /// How many pieces of work were dropped unstarted since the last call.
    pub fn take_expired(&mut self) -> u64 {
        std::mem::take(&mut self.expired)
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded generator of `below(n)` for the tests (splitmix64).
    fn below(seed: u64) -> impl FnMut(usize) -> usize {
        let mut s = seed;
        move |n| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % n as u64) as usize
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn work_past_its_timeout_and_the_grace_is_never_started_and_fresher_work_is_started_first() {
        let t0 = Time(1_000);
        for seed in 0..64 {
            let mut b = Backlog::default();
            let mut r = below(seed);
            // Taken at t0 with a 100 ms timeout: worth starting until t0 + 100 ms + the grace.
            b.take(t0, ms(100), 1);
            b.take(t0, ms(100), 2);
            // Taken at t0 with a 5 s timeout: still worth it later, but no longer sure to be back in time.
            b.take(t0, ms(5_000), 3);
            let later = t0 + ms(100) + CHECK_GRACE;
            // Taken just now.
            b.take(later, ms(5_000), 4);
            let order: Vec<u64> = std::iter::from_fn(|| b.next(later, &mut r)).map(|(id, _)| id).collect();
            assert!(order == [4, 3] || order == [3, 4], "seed {seed}: {order:?}");
            assert!(b.is_empty());
            assert_eq!(b.take_expired(), 2, "seed {seed}");
            assert_eq!(b.take_expired(), 0, "counted once");
        }
        // Fresher first, mostly: the one taken more than the grace ago is put back for up to `PICKS` picks.
        let first_fresh = (0..64)
            .filter(|&seed| {
                let mut b = Backlog::default();
                b.take(t0, ms(5_000), 3);
                b.take(t0 + CHECK_GRACE, ms(5_000), 4);
                b.next(t0 + CHECK_GRACE, below(seed)) == Some((4, Duration::ZERO))
            })
            .count();
        assert!(first_fresh >= 56, "{first_fresh} of 64");
    }

    #[test]
    fn a_backlog_of_expired_work_is_swept_as_it_grows() {
        let mut b = Backlog::default();
        // One expiring batch of 8 after another, none picked: what waits stays bounded by the live ones.
        for i in 0..1_000u64 {
            let at = Time(i * 100);
            for k in 0..8 {
                b.take(at, ms(100), i * 8 + k);
            }
            // Live: taken within the last 2.1 s, 21 batches of 8.
            assert!(b.len() <= 2 * 22 * 8 + SWEEP_FLOOR, "{} waiting at batch {i}", b.len());
        }
        assert!(b.take_expired() >= 1_000 * 8 - (2 * 22 * 8 + SWEEP_FLOOR) as u64);
    }

    #[test]
    fn a_backlog_drained_after_a_burst_is_swept_as_it_doubles_again() {
        let mut b = Backlog::default();
        let mut r = below(3);
        // A burst of 10,000 live ones, swept at every doubling, then all but 10 started.
        for i in 0..10_000 {
            b.take(Time(0), ms(60_000), i);
        }
        while b.len() > 10 {
            b.next(Time(1), &mut r).unwrap();
        }
        // Then expiring work, never picked: it is swept at twice the 10 (or the floor), not at twice the burst.
        for i in 0..1_000u64 {
            b.take(Time(10_000 + i * 100), ms(100), i);
            assert!(b.len() <= 2 * 22 + 2 * SWEEP_FLOOR + 10, "{} waiting at {i}", b.len());
        }
    }

    #[test]
    fn every_piece_of_work_is_either_started_or_counted_expired() {
        for seed in 0..32 {
            let mut r = below(seed);
            let mut b = Backlog::default();
            let (mut started, mut n) = (0u64, 0u64);
            for step in 0..2_000u64 {
                let now = Time(step * 10);
                // Three taken every 10 ms, one started: a lasting overload.
                for _ in 0..3 {
                    b.take(now, ms(r(3_000) as u64 + 1), n);
                    n += 1;
                }
                if let Some((id, waited)) = b.next(now, &mut r) {
                    assert!(id < n);
                    assert!(waited < Backlog::<u64>::useful_for(ms(3_000)));
                    started += 1;
                }
            }
            let expired = b.take_expired();
            assert_eq!(started + expired + b.len() as u64, n, "seed {seed}");
            assert!(started == 2_000, "seed {seed}: a slot free every step always finds fresh work");
        }
    }
}
