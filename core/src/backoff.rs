//! Retry delays: exponential backoff with jitter, for anything a role retries against a store or an endpoint.
//! The jitter is drawn from a hash of a per-process salt and the attempt number, not from a random generator:
//! the core has no global randomness, and two processes with different salts still spread their retries.

use crate::hrw::mix64;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    salt: u64,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration, salt: u64) -> Backoff {
        Backoff { base, max: max.max(base), salt, attempt: 0 }
    }

    /// Failures since the last success.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The delay before the next attempt, and counts one more failure: `base * 2^attempts`, at most `max`, with
    /// jitter between half of it and all of it ("equal jitter": never zero, so a failing store is not hammered).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.delay(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        d
    }

    /// The delay before retry number `attempt + 1` (0: the first retry), without counting it.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX));
        let ceiling = exp.min(self.max);
        let r = mix64(self.salt ^ (u64::from(attempt) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(if span == 0 { 0 } else { r % (span + 1) })
    }

    /// Like `next_delay`, but never shorter than what the other side asked for (an HTTP `Retry-After`), capped at
    /// `max` all the same.
    pub fn next_delay_at_least(&mut self, asked: Duration) -> Duration {
        self.next_delay().max(asked.min(self.max))
    }

    /// A success: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_and_stops_at_the_cap() {
        let (base, max) = (Duration::from_millis(100), Duration::from_secs(10));
        let mut b = Backoff::new(base, max, 42);
        for attempt in 0..20u32 {
            let ceiling = (base * 2u32.pow(attempt.min(16))).min(max);
            let d = b.next_delay();
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "attempt {attempt}: {d:?} outside [{:?}, {ceiling:?}]",
                ceiling / 2
            );
        }
        b.reset();
        assert!(b.next_delay() <= base);
    }

    #[test]
    fn different_salts_spread_their_retries() {
        let delays = |salt| {
            let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(60), salt);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_ne!(delays(1), delays(2));
        assert_eq!(delays(1), delays(1), "deterministic for one salt");
    }

    #[test]
    fn a_retry_after_is_honoured_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30), 7);
        assert!(b.next_delay_at_least(Duration::from_secs(5)) >= Duration::from_secs(5));
        assert!(b.next_delay_at_least(Duration::from_secs(3600)) <= Duration::from_secs(30));
    }
}
