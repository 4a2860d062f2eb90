//! Notification policy (issue 35): maintenance windows' schedules hold to their own rules at any time, in time
//! zones with summer time, half-hour offsets and half-hour summer-time shifts.

use jaque_core::policy::{Day, Schedule};
use jaque_core::time::Time;
use proptest::prelude::*;

const ZONES: [&str; 6] =
    ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Santiago"];
const DAYS: [Day; 7] = [Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri, Day::Sat, Day::Sun];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Between `t` and the next change `next_change(t)` names, the window stays as it is at `t`; an occurrence
    /// that holds `t` started at or before it, ends after it and lasts the schedule's duration.
    #[test]
    fn a_window_changes_only_where_next_change_says(
        days in proptest::collection::btree_set(0..7usize, 0..=7),
        hour in 0..24u32,
        minute in 0..60u32,
        duration_min in 1..=(7 * 24 * 60u64),
        zone in 0..ZONES.len(),
        t in 1_577_836_800_000u64..2_082_758_400_000,
        probes in proptest::collection::vec(0.0..1.0f64, 1..8),
    ) {
        let schedule = Schedule {
            days: days.iter().map(|d| DAYS[*d]).collect(),
            start: format!("{hour:02}:{minute:02}"),
            duration_ms: duration_min * 60_000,
            time_zone: ZONES[zone].to_string(),
        };
        let w = schedule.recurrence().unwrap();
        let t = Time(t);
        let open = w.open_at(t);
        if let Some((s, e)) = open {
            prop_assert!(s <= t && t < e, "{w}: {t} in [{s}, {e})");
            prop_assert_eq!(e.0 - s.0, duration_min * 60_000);
        }
        let next = w.next_change(t).expect("a schedule with a day in every week changes within 8 days");
        prop_assert!(next > t);
        if let Some((_, e)) = open {
            prop_assert!(next <= e, "{w}: open until {e}, next change at {next}");
        }
        for p in probes {
            let u = Time(t.0 + ((next.0 - t.0) as f64 * p) as u64);
            prop_assert_eq!(w.open_at(u).is_some(), open.is_some(), "{} at {} (from {}, next change {})", w, u, t, next);
        }
    }
}
