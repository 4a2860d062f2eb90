//! Time as a value. The core never reads a clock: every input carries `now`, and every deadline the core
//! asks for comes back out of `poll_timeout`. Milliseconds are the unit everywhere (NATS TTLs are whole
//! seconds, check intervals are seconds, and the simulator steps in milliseconds).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in milliseconds since an epoch the driver chooses (Unix time in the shell, zero in the
/// simulator). Only differences and order matter to the core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub fn from_millis(ms: u64) -> Time {
        Time(ms)
    }

    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero when `earlier` is later (clocks of different processes may disagree).
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(millis(d)))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        Time(self.0.saturating_sub(millis(d)))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1000, self.0 % 1000)
    }
}

/// A duration in whole milliseconds, saturating (a duration longer than 584 million years is not a concern).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
