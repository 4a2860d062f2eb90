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

/// `t` (Unix milliseconds) as RFC 3339 in UTC with milliseconds, e.g. `2026-12-03T18:22:24.123Z`: the form
/// notifications and the sink's SQLite rows carry, computed here so every process writes the same bytes.
pub fn rfc3339_millis(t: Time) -> String {
    let ms = t.0;
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, ms % 1000)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (days are grouped in 400-year eras of
/// 146,097 days; within an era, years start on March 1 so the leap day is the era's last).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_millis(Time(0)), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) and 2026-12-03, checked with `date -u -d @...`.
        assert_eq!(rfc3339_millis(Time(951_782_400_000)), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_millis(Time(1_796_322_144_123)), "2026-12-03T18:22:24.123Z");
        assert_eq!(rfc3339_millis(Time(4_107_542_399_999)), "2100-02-28T23:59:59.999Z");
    }
}
