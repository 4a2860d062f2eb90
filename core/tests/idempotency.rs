//! The idempotency window in log terms: a retried command id is answered with its first outcome for the window
//! after its first application (measured on the log's clock), then forgotten, the same way by every reader.

use jaque_core::*;
use proptest::prelude::*;

fn me() -> MemberRef {
    MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 }
}

fn record(epoch: u64, window_ms: Option<u64>) -> LogEntry {
    LogEntry::Epoch(EpochRecord {
        epoch,
        members: vec![me()],
        members_rev: epoch,
        idempotency_window_ms: window_ms,
        format: 1,
    })
}

fn event(object: &str, at: u64, cmd: Option<&str>, body: EventBody) -> LogEntry {
    LogEntry::Event(Event {
        object: ObjectId::new(object).unwrap(),
        epoch: 1,
        writer: me(),
        at: Time(at),
        command_id: cmd.map(|c| CommandId::new(c).unwrap()),
        body,
    })
}

fn put(object: &str, at: u64, cmd: &str) -> LogEntry {
    event(
        object,
        at,
        Some(cmd),
        EventBody::Put {
            def: ObjectDef {
                probe: Probe::Tcp { addr: "h:1".into() },
                interval_ms: 1000,
                timeout_ms: 100,
                ..ObjectDef::UNSET
            },
        },
    )
}

fn effect(read: Read) -> Effect {
    match read {
        Read::Event { effect, .. } => effect,
        other => panic!("not an event: {other:?}"),
    }
}

fn cmd(id: &str) -> CommandId {
    CommandId::new(id).unwrap()
}

#[test]
fn a_retry_within_the_window_gets_the_first_outcome_and_one_after_it_is_applied_again() {
    let mut r = LogReader::new();
    r.read(1, &record(1, Some(1_000)));
    assert!(matches!(effect(r.read(2, &put("o", 10_000, "c1"))), Effect::Command(Outcome::Applied { seq: 2, .. })));
    // A retry exactly at the window's end: still the first outcome.
    let first = r.applied(&cmd("c1")).cloned().expect("remembered");
    assert_eq!(effect(r.read(3, &put("o", 11_000, "c1"))), Effect::DuplicateCommand(first));
    // Another event moves the log clock past the window: forgotten, by position, not by anyone's clock.
    r.read(4, &event("o", 11_001, None, EventBody::Pause));
    assert_eq!(r.applied(&cmd("c1")), None);
    assert_eq!(r.counters.commands_forgotten_total, 1);
    assert!(matches!(effect(r.read(5, &put("o", 11_002, "c1"))), Effect::Command(Outcome::Applied { seq: 5, .. })));
}

#[test]
fn the_log_clock_never_goes_back_and_a_record_without_a_window_forgets_nothing() {
    let mut r = LogReader::new();
    r.read(1, &record(1, Some(1_000)));
    r.read(2, &put("o", 50_000, "c1"));
    // A writer whose clock is behind does not take the log's clock back, nor extend anything.
    r.read(3, &put("p", 1_000, "c2"));
    assert_eq!(r.log_time(), Time(50_000));
    r.read(4, &event("o", 51_001, None, EventBody::Pause));
    assert_eq!((r.applied(&cmd("c1")), r.applied(&cmd("c2"))), (None, None), "both applied at log time 50,000");

    let mut r = LogReader::new();
    r.read(1, &record(1, None));
    r.read(2, &put("o", 0, "c1"));
    r.read(3, &event("o", u64::MAX / 2, None, EventBody::Pause));
    assert!(r.applied(&cmd("c1")).is_some(), "records written before the window existed keep every id");
}

#[test]
fn the_window_in_force_is_the_latest_epoch_records() {
    let mut r = LogReader::new();
    r.read(1, &record(1, Some(100_000)));
    r.read(2, &put("o", 0, "c1"));
    r.read(3, &event("o", 5_000, None, EventBody::Pause));
    assert!(r.applied(&cmd("c1")).is_some());
    // A later record with a shorter window: the next accepted event applies it.
    let two = LogEntry::Epoch(EpochRecord {
        epoch: 2,
        members: vec![me()],
        members_rev: 2,
        idempotency_window_ms: Some(1_000),
        format: 1,
    });
    r.read(4, &two);
    assert_eq!(r.idempotency_window(), Some(std::time::Duration::from_secs(1)));
    let mut ev = event("o", 5_001, None, EventBody::Resume);
    if let LogEntry::Event(e) = &mut ev {
        e.epoch = 2;
    }
    r.read(5, &ev);
    assert_eq!(r.applied(&cmd("c1")), None);
}

proptest! {
    /// Bounded: with one new command per tick, the record never holds more than one window's worth of ids, and
    /// every id within the window is still answered.
    #[test]
    fn the_record_holds_one_window_of_ids(window in 1u64..50, n in 1usize..300) {
        let mut r = LogReader::new();
        r.read(1, &record(1, Some(window)));
        for i in 0..n {
            let at = i as u64;
            r.read(i as u64 + 2, &put("o", at, &format!("c{i}")));
            prop_assert!(r.applied_len() as u64 <= window + 1);
            for back in 0..=window.min(at) {
                let id = format!("c{}", at - back);
                prop_assert!(r.applied(&cmd(&id)).is_some(), "{id} within the window at {at}");
            }
        }
    }
}
