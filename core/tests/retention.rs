//! What compaction may remove: `LogReader::keep_from(retention)` never lets an event within the retention of the
//! log's clock go, cuts a short retention finely and a long one coarsely, and its bookkeeping stays small however
//! long the log runs; a reader from a snapshot computes the same cut as one that read the whole log.

use jaque_core::*;
use proptest::prelude::*;
use std::time::Duration;

fn owner() -> MemberRef {
    MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 }
}

fn epoch() -> LogEntry {
    LogEntry::Epoch(EpochRecord {
        epoch: 1,
        members: vec![owner()],
        members_rev: 1,
        idempotency_window_ms: None,
        format: 1,
    })
}

fn put(i: u64, at: u64) -> LogEntry {
    LogEntry::Event(Event {
        object: ObjectId::new(format!("o{}", i % 50)).unwrap(),
        epoch: 1,
        writer: owner(),
        at: Time(at),
        command_id: None,
        body: EventBody::Put {
            def: ObjectDef {
                probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
                interval_ms: 60_000,
                timeout_ms: 1000,
                ..ObjectDef::UNSET
            },
        },
    })
}

/// Reads an epoch record, then one event per gap (ms after the previous one), from a clock of `start`. Returns
/// the reader and each event's position with the log clock after it.
fn read(start: u64, gaps: &[u64]) -> (LogReader, Vec<(u64, Time)>) {
    let mut r = LogReader::new();
    r.read(1, &epoch());
    let mut at = start;
    let mut clock = Vec::new();
    for (i, gap) in gaps.iter().enumerate() {
        at += gap;
        let seq = i as u64 + 2;
        r.read(seq, &put(i as u64, at));
        clock.push((seq, r.log_time()));
    }
    (r, clock)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn nothing_within_the_retention_is_ever_cut(
        gaps in prop::collection::vec(prop_oneof![0u64..50, 0u64..5_000, 0u64..600_000], 1..3000),
        retention_ms in prop_oneof![0u64..10_000, 0u64..3_600_000, 0u64..1_000_000_000],
    ) {
        let (r, clock) = read(1_700_000_000_000, &gaps);
        let retention = Duration::from_millis(retention_ms);
        let keep = r.keep_from(retention);
        let cut = r.log_time() - retention;
        for (seq, t) in &clock {
            if *seq < keep {
                prop_assert!(*t <= cut, "position {seq} at log time {t} cut, though newer than {cut}");
            }
        }
        prop_assert!(keep <= r.position() + 1);
        // A reader started from a snapshot at the end cuts at the same position.
        let restored = LogReader::from_snapshot(r.snapshot()).unwrap();
        prop_assert_eq!(restored.keep_from(retention), keep);
    }
}

#[test]
fn a_short_retention_is_cut_within_seconds_of_it() {
    // 5,000 events a second for ten minutes: a 5 s retention keeps about 5 s of the log, not a minute of it.
    let gaps: Vec<u64> = (0..3_000_000u64).map(|i| u64::from(i % 5 == 0)).collect();
    let (r, clock) = read(1_700_000_000_000, &gaps);
    let keep = r.keep_from(Duration::from_secs(5));
    let kept = clock.iter().filter(|(seq, _)| *seq >= keep).count();
    assert!(kept >= 25_000, "{kept} events kept: less than the retention");
    assert!(kept <= 25_000 + 5_000, "{kept} events kept for a 5 s retention at 5,000 a second");
}

#[test]
fn a_week_long_retention_after_months_is_cut_within_a_fraction_of_it() {
    // One event a minute for 200 days: a 7-day retention keeps at least 7 days and not much more.
    let gaps: Vec<u64> = vec![60_000; 200 * 24 * 60];
    let (r, clock) = read(1_700_000_000_000, &gaps);
    let keep = r.keep_from(Duration::from_secs(7 * 86_400));
    let kept = clock.iter().filter(|(seq, _)| *seq >= keep).count() as f64;
    let week = (7 * 24 * 60) as f64;
    assert!(kept >= week, "{kept} events kept: less than a week of them");
    assert!(kept <= week * 1.25, "{kept} events kept for a week of {week}");
    // The bookkeeping stays small: a snapshot of this reader is a few kilobytes beyond its 50 objects.
    let bytes = wire::encode_snapshot(&r.snapshot()).len();
    assert!(bytes < 200_000, "snapshot of {bytes} bytes");
}

fn delete(i: u64, at: u64) -> LogEntry {
    LogEntry::Event(Event {
        object: ObjectId::new(format!("gone-{i}")).unwrap(),
        epoch: 1,
        writer: owner(),
        at: Time(at),
        command_id: None,
        body: EventBody::Delete,
    })
}

#[test]
fn deleted_objects_are_remembered_for_the_tombstone_horizon_then_forgotten() {
    // 10,000 objects created and deleted on day 0, then one event a day for 40 days.
    let mut r = LogReader::new();
    r.read(1, &epoch());
    let day = 86_400_000u64;
    let t0 = 1_700_000_000_000u64;
    let mut seq = 1;
    for i in 0..10_000 {
        seq += 1;
        let mut e = put(0, t0);
        if let LogEntry::Event(ev) = &mut e {
            ev.object = ObjectId::new(format!("gone-{i}")).unwrap();
        }
        r.read(seq, &e);
        seq += 1;
        r.read(seq, &delete(i, t0));
    }
    let gone = ObjectId::new("gone-17").unwrap();
    // gone-17 was put at position 2 + 2 * 17 and deleted right after.
    assert_eq!(r.last_accepted_of(&gone), Some(2 + 2 * 17 + 1), "a deleted object is known");
    let big = wire::encode_snapshot(&r.snapshot()).len();
    let mut day_10 = None;
    for d in 1..=40 {
        seq += 1;
        r.read(seq, &put(d, t0 + d * day));
        if d == 10 {
            day_10 = Some(LogReader::from_snapshot(r.snapshot()).unwrap());
        }
        if d == 29 {
            assert!(r.last_accepted_of(&gone).is_some(), "remembered within the horizon");
        }
    }
    assert_eq!(r.last_accepted_of(&gone), None, "forgotten past the horizon");
    assert!(r.last_accepted().all(|(id, _)| !id.as_str().starts_with("gone-")));
    let small = wire::encode_snapshot(&r.snapshot()).len();
    assert!(small * 20 < big, "the snapshot shrank back: {big} bytes with the tombstones, {small} after");
    // A reader from a snapshot taken on day 10 forgets them at the same position.
    let mut restored = day_10.unwrap();
    let mut at = restored.position();
    for d in 11..=40 {
        at += 1;
        restored.read(at, &put(d, t0 + d * day));
    }
    assert!(restored == r, "the reader from the day-10 snapshot differs");
}
