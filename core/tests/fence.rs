//! The fence, decided in log order: readers agree whatever chunks the log arrives in; a writer that kept its
//! object is never discarded; a writer that lost it is always discarded.

use jaque_core::hrw::Ownership;
use jaque_core::*;
use proptest::prelude::*;

const POOL: [&str; 5] = ["a", "b", "c", "d", "e"];

fn m(i: usize, inc: u64) -> MemberRef {
    MemberRef { id: MemberId::new(POOL[i]).unwrap(), incarnation: inc }
}

#[derive(Clone, Debug)]
enum Op {
    /// A new epoch record with the members whose bits are set (incarnation 1 or 2 by another bit).
    Epoch { mask: u8, incs: u8, window: Option<u8> },
    /// An event by writer (pool index, incarnation) under `epoch_back` epochs before the one in force (or one
    /// ahead when `ahead`).
    /// At log time `at` (writers' clocks disagree: it may go back), with command id `c<cmd>` (ids repeat, as
    /// retries do, so the idempotency window is exercised).
    Event { object: u8, writer: usize, inc: u64, epoch_back: u8, ahead: bool, at: u8, cmd: u8 },
    /// A malformed or out-of-sequence epoch record.
    BadEpoch { skip: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (1u8..32, any::<u8>(), prop::option::of(0u8..40)).prop_map(|(mask, incs, window)| Op::Epoch {
            mask,
            incs,
            window
        }),
        6 => (0u8..20, 0usize..5, 1u64..3, 0u8..4, prop::bool::weighted(0.05), any::<u8>(), 0u8..30).prop_map(
            |(object, writer, inc, epoch_back, ahead, at, cmd)| Op::Event {
                object,
                writer,
                inc,
                epoch_back,
                ahead,
                at,
                cmd
            }
        ),
        1 => (0u8..3).prop_map(|skip| Op::BadEpoch { skip }),
    ]
}

/// Builds the log from ops: epochs numbered as a real writer would (in sequence), events naming epochs.
fn build(ops: &[Op]) -> Vec<LogEntry> {
    let mut epoch = 0u64;
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Epoch { mask, incs, window } => {
                epoch += 1;
                let members =
                    (0..5).filter(|i| mask & (1 << i) != 0).map(|i| m(i, 1 + u64::from(incs >> i & 1))).collect();
                out.push(LogEntry::Epoch(EpochRecord {
                    epoch,
                    members,
                    members_rev: epoch,
                    idempotency_window_ms: window.map(u64::from),
                    format: 1,
                }));
            }
            Op::BadEpoch { skip } => {
                // Either a repeat of an old epoch or a jump ahead: never installed.
                let e = if *skip == 0 { epoch } else { epoch + 1 + u64::from(*skip) };
                out.push(LogEntry::Epoch(EpochRecord {
                    epoch: e,
                    members: vec![m(0, 1)],
                    members_rev: 0,
                    idempotency_window_ms: None,
                    format: 1,
                }));
            }
            Op::Event { object, writer, inc, epoch_back, ahead, at, cmd } => {
                let e = if *ahead { epoch + 1 } else { epoch.saturating_sub(u64::from(*epoch_back)) };
                out.push(LogEntry::Event(Event {
                    object: ObjectId::new(format!("o{object}")).unwrap(),
                    epoch: e,
                    writer: m(*writer, *inc),
                    // A clock that moves on, with a jitter that sometimes takes it back.
                    at: Time((out.len() as u64 * 4).saturating_sub(u64::from(*at % 32))),
                    command_id: Some(CommandId::new(format!("c{cmd}")).unwrap()),
                    body: match object % 4 {
                        0 => EventBody::Put {
                            def: ObjectDef {
                                probe: Probe::Tcp { addr: "h:1".into() },
                                interval_ms: 1000,
                                timeout_ms: 100,
                                ..ObjectDef::UNSET
                            },
                        },
                        1 => EventBody::transition(State::Pending, State::Critical, String::new()),
                        2 => EventBody::Pause,
                        _ => EventBody::Delete,
                    },
                }));
            }
        }
    }
    out
}

/// The rule, by brute force from the records alone.
fn expected_accept(records: &[EpochRecord], ev: &Event) -> bool {
    let in_force = records.len() as u64;
    if ev.epoch == 0 || ev.epoch > in_force {
        return false;
    }
    (ev.epoch..=in_force).all(|e| {
        let own = Ownership::new(&records[(e - 1) as usize].members);
        own.owner(&ev.object) == Some(&ev.writer)
    })
}

fn summary(r: &LogReader) -> String {
    format!("{:?} {:?} {:?} {:?}", r.epoch(), r.objects(), r.counters, r.position())
}

proptest! {
    /// Invariant 11 for one reader: started from a snapshot taken at any position (and carried as bytes), it
    /// gives every later entry the same verdict and effect, and ends in the same state, as one that read from
    /// the first position.
    #[test]
    fn a_reader_from_a_snapshot_is_the_reader_from_the_start(
        ops in proptest::collection::vec(op(), 1..120),
        cut in any::<prop::sample::Index>(),
    ) {
        let log = build(&ops);
        let k = cut.index(log.len() + 1);
        let mut full = LogReader::new();
        let verdicts: Vec<Read> = log.iter().enumerate().map(|(i, e)| full.read(i as u64 + 1, e)).collect();
        let mut head = LogReader::new();
        for (i, e) in log.iter().enumerate().take(k) {
            head.read(i as u64 + 1, e);
        }
        let bytes = wire::encode_snapshot(&head.snapshot());
        let mut tail = wire::decode_snapshot(&bytes).expect("a snapshot decodes");
        prop_assert!(tail == head);
        for (i, e) in log.iter().enumerate().skip(k) {
            prop_assert_eq!(&tail.read(i as u64 + 1, e), &verdicts[i], "position {}", i + 1);
        }
        // Positions at or below the snapshot's are repeats to it, as to the reader that took it.
        if k > 0 {
            prop_assert_eq!(tail.read(k as u64, &log[k - 1]), Read::Duplicate);
            full.read(k as u64, &log[k - 1]);
        }
        prop_assert!(tail == full, "{} vs {}", summary(&tail), summary(&full));
    }

    #[test]
    fn readers_agree_whatever_the_chunking(ops in proptest::collection::vec(op(), 1..120), cuts in proptest::collection::vec(1usize..9, 1..40), dup in any::<prop::sample::Index>()) {
        let log = build(&ops);
        let mut one = LogReader::new();
        let v1: Vec<Read> = log.iter().enumerate().map(|(i, e)| one.read(i as u64 + 1, e)).collect();

        // Another reader: the same log in chunks, with some positions delivered again after a reconnect.
        let mut two = LogReader::new();
        let mut v2 = Vec::new();
        let mut i = 0;
        let mut c = 0;
        while i < log.len() {
            let n = cuts[c % cuts.len()];
            c += 1;
            let end = (i + n).min(log.len());
            for (j, e) in log.iter().enumerate().take(end).skip(i) {
                v2.push(two.read(j as u64 + 1, e));
            }
            // Re-deliver from an earlier point: every repeat is skipped as a duplicate.
            let back = dup.index(end.max(1)).min(end);
            for (j, e) in log.iter().enumerate().take(end).skip(back) {
                prop_assert_eq!(two.read(j as u64 + 1, e), Read::Duplicate);
            }
            i = end;
        }
        prop_assert_eq!(&v1, &v2);
        let mut a = summary(&one);
        let mut b = summary(&two);
        // Only the duplicate counter may differ.
        a = a.replace(&format!("duplicate_positions_total: {}", one.counters.duplicate_positions_total), "");
        b = b.replace(&format!("duplicate_positions_total: {}", two.counters.duplicate_positions_total), "");
        prop_assert_eq!(a, b);
    }

    #[test]
    fn the_verdict_is_exactly_the_fence_rule(ops in proptest::collection::vec(op(), 1..150)) {
        let log = build(&ops);
        let mut r = LogReader::new();
        let mut records: Vec<EpochRecord> = Vec::new();
        let mut stale = 0;
        for (i, e) in log.iter().enumerate() {
            let read = r.read(i as u64 + 1, e);
            match (e, read) {
                (LogEntry::Epoch(rec), Read::EpochInstalled) => records.push(rec.clone()),
                (LogEntry::Epoch(_), Read::EpochRejected(_)) => {}
                (LogEntry::Event(ev), Read::Event { verdict, .. }) => {
                    let want = expected_accept(&records, ev);
                    prop_assert_eq!(verdict.is_accepted(), want, "event {:?} under {:?}", ev, records.last());
                    if !want { stale += 1; }
                }
                (e, read) => prop_assert!(false, "unexpected {:?} for {:?}", read, e),
            }
        }
        prop_assert_eq!(r.counters.stale_epoch_total, stale);
    }

    /// A writer that keeps its object through other members' joins and leaves is never fenced.
    #[test]
    fn a_kept_owner_is_never_fenced(changes in proptest::collection::vec(1u8..32, 1..8), object in 0u32..1000) {
        let obj = ObjectId::new(format!("obj-{object}")).unwrap();
        let mut r = LogReader::new();
        let first = EpochRecord { epoch: 1, members: (0..5).map(|i| m(i, 1)).collect(), members_rev: 1, idempotency_window_ms: None, format: 1 };
        let writer = Ownership::new(&first.members).owner(&obj).unwrap().clone();
        let wi = POOL.iter().position(|p| *p == writer.id.as_str()).unwrap();
        r.read(1, &LogEntry::Epoch(first));
        let mut seq = 1;
        for (epoch, mask) in (2..).zip(changes) {
            // Always keep the writer; others come and go. The writer had the highest score among all five, so
            // it has it among any subset that includes it.
            let members: Vec<MemberRef> = (0..5).filter(|i| *i == wi || mask & (1 << i) != 0).map(|i| m(i, 1)).collect();
            let owner = Ownership::new(&members).owner(&obj).cloned();
            prop_assert_eq!(owner.as_ref(), Some(&writer));
            seq += 1;
            r.read(seq, &LogEntry::Epoch(EpochRecord { epoch, members, members_rev: seq, idempotency_window_ms: None, format: 1 }));
            seq += 1;
            // Written under the first epoch, read after every change since: still the writer's.
            let ev = Event { object: obj.clone(), epoch: 1, writer: writer.clone(), at: Time(0), command_id: None, body: EventBody::Ack };
            let read = r.read(seq, &LogEntry::Event(ev));
            prop_assert!(matches!(read, Read::Event { verdict: Verdict::Accepted, .. }), "{:?}", read);
        }
    }

    /// A writer that lost its object, even if it got it back since, is always fenced.
    #[test]
    fn a_lost_owner_is_always_fenced(object in 0u32..1000, regain in any::<bool>()) {
        let obj = ObjectId::new(format!("obj-{object}")).unwrap();
        let all: Vec<MemberRef> = (0..5).map(|i| m(i, 1)).collect();
        let writer = Ownership::new(&all).owner(&obj).unwrap().clone();
        let without: Vec<MemberRef> = all.iter().filter(|x| **x != writer).cloned().collect();
        let mut r = LogReader::new();
        r.read(1, &LogEntry::Epoch(EpochRecord { epoch: 1, members: all.clone(), members_rev: 1, idempotency_window_ms: None, format: 1 }));
        r.read(2, &LogEntry::Epoch(EpochRecord { epoch: 2, members: without, members_rev: 2, idempotency_window_ms: None, format: 1 }));
        let mut seq = 2;
        if regain {
            seq += 1;
            r.read(seq, &LogEntry::Epoch(EpochRecord { epoch: 3, members: all, members_rev: 3, idempotency_window_ms: None, format: 1 }));
        }
        let ev = Event { object: obj, epoch: 1, writer, at: Time(0), command_id: None, body: EventBody::Ack };
        let read = r.read(seq + 1, &LogEntry::Event(ev));
        prop_assert!(matches!(read, Read::Event { verdict: Verdict::Stale(StaleReason::NotOwner { epoch: 2, .. }), .. }), "{:?}", read);
        prop_assert_eq!(r.counters.stale_epoch_total, 1);
    }
}

#[test]
fn a_restarted_writer_is_not_its_old_incarnation() {
    let obj = ObjectId::new("web").unwrap();
    let mut r = LogReader::new();
    let record = |epoch, members| {
        LogEntry::Epoch(EpochRecord { epoch, members, members_rev: epoch, idempotency_window_ms: None, format: 1 })
    };
    r.read(1, &record(1, vec![m(0, 1)]));
    r.read(2, &record(2, vec![m(0, 2)]));
    let old =
        Event { object: obj.clone(), epoch: 1, writer: m(0, 1), at: Time(0), command_id: None, body: EventBody::Ack };
    assert!(matches!(r.read(3, &LogEntry::Event(old)), Read::Event { verdict: Verdict::Stale(_), .. }));
    let new = Event { object: obj, epoch: 2, writer: m(0, 2), at: Time(0), command_id: None, body: EventBody::Ack };
    assert!(matches!(r.read(4, &LogEntry::Event(new)), Read::Event { verdict: Verdict::Accepted, .. }));
}

#[test]
fn events_before_any_epoch_or_ahead_of_it_are_stale() {
    let obj = ObjectId::new("web").unwrap();
    let mut r = LogReader::new();
    let ev = |epoch| Event {
        object: obj.clone(),
        epoch,
        writer: m(0, 1),
        at: Time(0),
        command_id: None,
        body: EventBody::Ack,
    };
    assert!(matches!(
        r.read(1, &LogEntry::Event(ev(1))),
        Read::Event { verdict: Verdict::Stale(StaleReason::NoEpoch), .. }
    ));
    r.read(
        2,
        &LogEntry::Epoch(EpochRecord {
            epoch: 1,
            members: vec![m(0, 1)],
            members_rev: 1,
            idempotency_window_ms: None,
            format: 1,
        }),
    );
    assert!(matches!(
        r.read(3, &LogEntry::Event(ev(2))),
        Read::Event { verdict: Verdict::Stale(StaleReason::FutureEpoch { .. }), .. }
    ));
    assert!(matches!(r.read(4, &LogEntry::Event(ev(1))), Read::Event { verdict: Verdict::Accepted, .. }));
}
