//! The shell's clock: wall-clock Unix milliseconds as the core's `Time`, and the core's deadlines as Tokio
//! instants. Nothing else in the shell reads the time for the core.

use jaque_core::Time;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock Unix milliseconds: the shell's `Time`.
pub fn now() -> Time {
    Time(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64))
}

/// The Tokio instant of a core deadline.
pub fn instant_at(t: Time) -> tokio::time::Instant {
    tokio::time::Instant::now() + t.saturating_since(now())
}

/// An instant for a `select!` branch that is disabled anyway (its `if` is false) but needs a value.
pub fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400)
}
