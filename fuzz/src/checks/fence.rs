//! The fence: arbitrary epoch records and events, read by two `LogReader`s.
//!
//! Input format (every byte string is valid): the first byte says how much of the input, taken from its end,
//! drives the delivery schedule; the rest is a stream of log entries. Members, objects and command ids come
//! from small pools, so owners, duplicates and re-used command ids are common; most epoch records carry the
//! next epoch and most events name a recent epoch and, often, its owner, so both verdicts are frequent.
//!
//! Positions the input skips stand for entries that do not decode: both readers pass over them
//! (`LogReader::skip`), as the shell does with a malformed entry, so positions never skip for a reader.
//!
//! Reader `a` reads the log one entry at a time. Reader `b` reads the same log in chunks of varying size and,
//! after a chunk, may have already-read positions delivered again (a consumer that restarted from an older
//! sequence); at every chunk boundary it also restarts from a snapshot of itself, carried as bytes, so every
//! check below holds for readers started from snapshots at arbitrary positions (invariant 11). Checked:
//! - every verdict of `a` is the rule's: accepted iff the writer (id and incarnation) owned the object under
//!   every epoch record from its epoch to the one in force, computed here from the records with the
//!   published HRW formula and with `hrw::Ownership`;
//! - an entry delivered past a hole (positions missing before it) is not read: `Read::Gap`, reader unchanged;
//! - `b` gives every position the same verdict and effect as `a`, skips every re-delivery as a duplicate, and
//!   at every chunk boundary holds the same state as `a` at that position (objects, fence, epoch position,
//!   applied command ids, counters but for duplicate positions);
//! - a command id is applied at most once; later events with it report the first outcome;
//! - every entry survives the wire (`decode_log_entry(encode(x)) == x`; unsorted records are refused), and so
//!   does every snapshot (`decode_snapshot(encode_snapshot(r.snapshot())) == r`);
//! - nothing panics.

use super::bytes::Bytes;
use jaque_core::hrw::{self, Ownership};
use jaque_core::log::{EpochRejection, ReaderCounters};
use jaque_core::wire;
use jaque_core::{
    CommandId, Effect, EpochRecord, Event, EventBody, LogEntry, LogReader, MemberId, MemberRef, ObjectDef, ObjectId,
    Outcome, Probe, Read, StaleReason, State, Time, Verdict,
};
use std::collections::BTreeMap;

pub const MEMBERS: [&str; 5] = ["e1", "e2", "e3", "e4", "e5"];
pub const OBJECTS: [&str; 8] = ["web", "db", "cache", "api", "dns", "mail", "obj-1", "obj-2"];
pub const COMMANDS: [&str; 6] = ["c1", "c2", "c3", "c4", "c5", "c6"];
const OUTPUTS: [&str; 3] = ["", "HTTP 200", "timeout after 5s"];
const STATES: [State; 5] = [State::Pending, State::Ok, State::Warning, State::Critical, State::Unknown];
const MAX_ENTRIES: usize = 512;

fn member(i: usize, incarnation: u64) -> MemberRef {
    MemberRef { id: MemberId::new(MEMBERS[i % MEMBERS.len()]).unwrap(), incarnation }
}

fn def(i: usize) -> ObjectDef {
    let probe = match i % 3 {
        0 => Probe::Http { url: "http://127.0.0.1:8080/".into(), expect_status: None },
        1 => Probe::Tcp { addr: "db:5432".into() },
        _ => Probe::Exec { plugin: "check_disk".into(), args: vec!["-w".into(), "80".into()] },
    };
    ObjectDef { probe, interval_ms: 1000 * (1 + i as u64), timeout_ms: 500, ..ObjectDef::UNSET }
}

/// The owner by the documented formula: highest `score(key(member), key(object))`, the greater id on a tie.
pub fn spec_owner<'m>(members: &'m [MemberRef], object: &str) -> Option<&'m MemberRef> {
    let ok = hrw::key(object);
    members.iter().max_by(|x, y| {
        let sx = hrw::score(hrw::key(x.id.as_str()), ok);
        let sy = hrw::score(hrw::key(y.id.as_str()), ok);
        sx.cmp(&sy).then_with(|| x.id.as_str().as_bytes().cmp(y.id.as_str().as_bytes()))
    })
}

fn well_formed(members: &[MemberRef]) -> bool {
    members.windows(2).all(|w| w[0].id < w[1].id)
}

/// The log the input describes: positions strictly increasing.
pub struct Scenario {
    pub log: Vec<(u64, LogEntry)>,
    /// Reader b's schedule: (chunk length, how many already-read entries are delivered again after it).
    pub schedule: Vec<(usize, usize)>,
}

pub fn scenario(data: &[u8]) -> Scenario {
    let mut b = Bytes::new(data);
    let share = usize::from(b.u8());
    let mut sched = b.split_tail(b.len() * share / 512);

    // The epochs the generator believes installed, to aim events at real epochs and owners.
    let mut records: Vec<EpochRecord> = Vec::new();
    let mut log = Vec::new();
    let mut seq = b.below(3) as u64;
    while !b.is_empty() && log.len() < MAX_ENTRIES {
        let op = b.u8();
        let entry = if op & 3 == 0 {
            let mask = b.u8();
            let mut members: Vec<MemberRef> =
                (0..MEMBERS.len()).filter(|i| mask & (1 << i) != 0).map(|i| member(i, 1 + b.below(3) as u64)).collect();
            let flags = b.u8();
            let epoch = match flags % 16 {
                0 => u64::from(b.u8()),
                1 => records.len() as u64,
                _ => records.len() as u64 + 1,
            };
            match (flags >> 4) % 8 {
                0 => members.reverse(),
                1 => {
                    if let Some(m) = members.first().cloned() {
                        members.push(m);
                    }
                }
                _ => {}
            }
            // The format from the revision's byte: the inputs kept as regressions read as they did.
            let members_rev = u64::from(b.u8());
            let format = 1 + (members_rev % 3) as u32;
            let record = EpochRecord { epoch, members, members_rev, idempotency_window_ms: None, format };
            if record.epoch == records.len() as u64 + 1 && well_formed(&record.members) {
                records.push(record.clone());
            }
            LogEntry::Epoch(record)
        } else {
            let object = ObjectId::new(OBJECTS[b.below(OBJECTS.len())]).unwrap();
            let in_force = records.len() as u64;
            let e = b.u8();
            let epoch = match e % 8 {
                0 => u64::from(b.u8()),
                1 => in_force + 1,
                2 | 3 => in_force.saturating_sub(1 + u64::from(e >> 6)),
                _ => in_force,
            };
            let w = b.u8();
            let owner = records
                .get((epoch as usize).wrapping_sub(1))
                .and_then(|r| spec_owner(&r.members, object.as_str()))
                .filter(|_| w & 3 != 0);
            let writer = match owner {
                Some(o) => o.clone(),
                None => member(usize::from(w >> 2), 1 + b.below(3) as u64),
            };
            let flapping = [None, Some(true), Some(false)][b.below(3)];
            let body = match b.below(11) {
                0 => EventBody::Put { def: def(b.below(4)) },
                1 => EventBody::Delete,
                2 => EventBody::Pause,
                3 => EventBody::Resume,
                4 => EventBody::CheckRequested,
                5 => EventBody::Ack,
                // The alert events (cluster format 3): attempts near the ones the rules take.
                6 => EventBody::Soft {
                    state: STATES[b.below(STATES.len())],
                    attempt: b.below(4) as u32,
                    of: b.below(4) as u32,
                    output: OUTPUTS[b.below(OUTPUTS.len())].into(),
                    flapping,
                },
                7 => EventBody::Flapping { on: b.below(2) == 0 },
                8 => EventBody::Transition {
                    from: STATES[b.below(STATES.len())],
                    to: STATES[b.below(STATES.len())],
                    output: OUTPUTS[b.below(OUTPUTS.len())].into(),
                    attempt: b.below(4) as u32,
                    flapping,
                    flaps: flapping == Some(true),
                    notify: None,
                },
                _ => EventBody::transition(
                    STATES[b.below(STATES.len())],
                    STATES[b.below(STATES.len())],
                    OUTPUTS[b.below(OUTPUTS.len())],
                ),
            };
            let c = b.u8();
            let command_id =
                (c & 3 != 0).then(|| CommandId::new(COMMANDS[usize::from(c >> 2) % COMMANDS.len()]).unwrap());
            let at = Time(u64::from(b.u16()) * 100);
            LogEntry::Event(Event { object, epoch, writer, at, command_id, body })
        };
        log.push((seq, entry));
        seq += 1 + if op & 0x80 != 0 { u64::from(b.u8() % 8) } else { 0 };
    }

    let mut schedule = Vec::new();
    let mut read = 0;
    while read < log.len() {
        let chunk = (1 + sched.below(16)).min(log.len() - read);
        read += chunk;
        let r = sched.u8();
        let again = if r & 3 == 0 { 1 + usize::from(r >> 2) % read } else { 0 };
        schedule.push((chunk, again));
    }
    Scenario { log, schedule }
}

pub fn check(data: &[u8]) {
    let Scenario { log, schedule } = scenario(data);
    for (_, entry) in &log {
        // What a writer appends, every reader decodes (records with unsorted members are refused instead).
        match wire::decode_log_entry(&wire::encode(entry)) {
            Ok(decoded) => assert_eq!(&decoded, entry, "a log entry changed on the wire"),
            Err(e) => assert!(
                matches!(entry, LogEntry::Epoch(r) if !well_formed(&r.members)),
                "a log entry does not decode: {e}: {entry:?}"
            ),
        }
    }
    let mut a = LogReader::new();
    let mut b = LogReader::new();
    let mut model = Model::default();
    let mut a_reads: Vec<Read> = Vec::with_capacity(log.len());
    let mut redelivered = 0u64;
    let mut next = 0;
    for (chunk, again) in schedule {
        for (seq, entry) in &log[next..next + chunk] {
            model.pass_over(&mut a, *seq);
            let read = a.read(*seq, entry);
            model.expect(*seq, entry, &read, &a);
            a_reads.push(read);
        }
        // An entry two positions ahead is a hole to reader b: not read, nothing changes.
        if let Some((seq, entry)) = log.get(next) {
            let before = b.snapshot();
            let ahead = b.position().max(*seq) + 2;
            let read = b.read(ahead, entry);
            assert!(matches!(read, Read::Gap { got, .. } if got == ahead), "an entry past a hole read as {read:?}");
            assert!(b.snapshot() == before, "a reader changed by an entry past a hole");
        }
        for (i, (seq, entry)) in log[next..next + chunk].iter().enumerate() {
            while b.position() + 1 < *seq {
                assert_eq!(b.skip(b.position() + 1), Read::Unreadable);
            }
            let read = b.read(*seq, entry);
            assert_eq!(read, a_reads[next + i], "reader b disagrees at position {seq} on {entry:?}");
        }
        next += chunk;
        for (seq, entry) in &log[next - again..next] {
            let read = b.read(*seq, entry);
            assert_eq!(read, Read::Duplicate, "re-delivery of position {seq} was read again: {entry:?}");
            redelivered += 1;
        }
        same_state(&a, &b);
        assert_eq!(b.counters.duplicate_positions_total, redelivered);
        // Reader b restarts from its own snapshot here (carried as bytes): it must go on as if it had not.
        let bytes = wire::encode_snapshot(&b.snapshot());
        let restarted = wire::decode_snapshot(&bytes).unwrap_or_else(|e| panic!("a snapshot does not decode: {e}"));
        assert!(restarted == b, "the reader from the snapshot is not the reader that took it");
        b = restarted;
    }
    assert_eq!(next, log.len());
    assert_eq!(a.counters.duplicate_positions_total, 0);
    model.final_check(&a);
}

fn without_duplicates(c: &ReaderCounters) -> ReaderCounters {
    ReaderCounters { duplicate_positions_total: 0, ..c.clone() }
}

fn same_state(a: &LogReader, b: &LogReader) {
    assert_eq!(a.position(), b.position());
    assert_eq!(a.epoch(), b.epoch());
    assert_eq!(a.epoch_seq(), b.epoch_seq());
    for e in 0..=a.epoch() + 1 {
        assert_eq!(a.fence().record(e), b.fence().record(e), "epoch record {e}");
    }
    assert_eq!(a.objects(), b.objects());
    for c in COMMANDS {
        let c = CommandId::new(c).unwrap();
        assert_eq!(a.applied(&c), b.applied(&c), "applied {c}");
    }
    assert_eq!(without_duplicates(&a.counters), without_duplicates(&b.counters));
}

/// What the log must have done, computed from the rule rather than from the reader.
#[derive(Default)]
struct Model {
    records: Vec<EpochRecord>,
    epoch_seq: Option<u64>,
    /// Which objects exist, paused or not.
    objects: BTreeMap<ObjectId, bool>,
    applied: BTreeMap<CommandId, Outcome>,
    stale: u64,
    rejected: u64,
    duplicate_commands: u64,
    unreadable: u64,
}

impl Model {
    fn verdict(&self, event: &Event) -> Verdict {
        let in_force = self.records.len() as u64;
        if event.epoch == 0 || in_force == 0 {
            return Verdict::Stale(StaleReason::NoEpoch);
        }
        if event.epoch > in_force {
            return Verdict::Stale(StaleReason::FutureEpoch { event_epoch: event.epoch, in_force });
        }
        for e in event.epoch..=in_force {
            let owner = spec_owner(&self.records[e as usize - 1].members, event.object.as_str());
            if owner != Some(&event.writer) {
                return Verdict::Stale(StaleReason::NotOwner { epoch: e, owner: owner.cloned() });
            }
        }
        Verdict::Accepted
    }

    /// Passes `reader` over the positions before `seq` that the input skipped (entries that do not decode).
    fn pass_over(&mut self, reader: &mut LogReader, seq: u64) {
        let mut p = reader.position() + 1;
        while p < seq {
            assert_eq!(reader.skip(p), Read::Unreadable, "an undecodable entry at {p}");
            self.unreadable += 1;
            p += 1;
        }
    }

    fn expect(&mut self, seq: u64, entry: &LogEntry, read: &Read, reader: &LogReader) {
        match entry {
            LogEntry::Epoch(r) => {
                let want = if r.epoch != self.records.len() as u64 + 1 {
                    Read::EpochRejected(EpochRejection::OutOfSequence {
                        got: r.epoch,
                        in_force: self.records.len() as u64,
                    })
                } else if !well_formed(&r.members) {
                    Read::EpochRejected(EpochRejection::BadMembers)
                } else {
                    Read::EpochInstalled
                };
                assert_eq!(*read, want, "epoch record at {seq}: {r:?}");
                if want == Read::EpochInstalled {
                    self.records.push(r.clone());
                    self.epoch_seq = Some(seq);
                } else {
                    self.rejected += 1;
                }
            }
            LogEntry::Event(event) => {
                let Read::Event { verdict, effect } = read else { panic!("event at {seq} read as {read:?}") };
                self.check_verdict(seq, event, verdict, reader);
                if verdict.is_accepted() {
                    self.fold(seq, event, effect);
                } else {
                    assert_eq!(*effect, Effect::None, "a stale event had an effect");
                    self.stale += 1;
                }
            }
        }
        assert_eq!(reader.epoch(), self.records.len() as u64);
        assert_eq!(reader.epoch_seq(), self.epoch_seq);
        assert_eq!(reader.position(), seq);
    }

    fn check_verdict(&self, seq: u64, event: &Event, verdict: &Verdict, reader: &LogReader) {
        let want = self.verdict(event);
        let key = hrw::key(event.object.as_str());
        match (verdict, &want) {
            (Verdict::Accepted, Verdict::Accepted) => {
                // The rule, through hrw::Ownership: the writer owned the object under every record since.
                for e in event.epoch..=reader.epoch() {
                    let record = reader.fence().record(e).expect("records up to the one in force");
                    assert_eq!(record, &self.records[e as usize - 1]);
                    let own = Ownership::new(&record.members);
                    assert!(own.is_owner(key, &event.writer), "accepted at {seq} but not owner under epoch {e}");
                }
            }
            (Verdict::Stale(StaleReason::NotOwner { epoch, owner }), Verdict::Stale(StaleReason::NotOwner { .. })) => {
                // The reader may name any epoch of the range where the writer was not the owner.
                assert!((event.epoch..=reader.epoch()).contains(epoch), "stale at {seq}: epoch {epoch} out of range");
                let members = &self.records[*epoch as usize - 1].members;
                assert_eq!(owner.as_ref(), spec_owner(members, event.object.as_str()), "stale at {seq}: owner");
                assert_eq!(Ownership::new(members).owner_of_key(key), owner.as_ref());
                assert_ne!(owner.as_ref(), Some(&event.writer), "stale at {seq} though the writer owned it");
            }
            _ => assert_eq!(verdict, &want, "verdict at {seq} on {event:?}"),
        }
    }

    fn fold(&mut self, seq: u64, event: &Event, effect: &Effect) {
        if let Some(id) = &event.command_id {
            if let Some(first) = self.applied.get(id) {
                assert_eq!(*effect, Effect::DuplicateCommand(first.clone()), "command {id} applied twice at {seq}");
                self.duplicate_commands += 1;
                return;
            }
        }
        let exists = self.objects.contains_key(&event.object);
        let took_effect = match &event.body {
            EventBody::Put { .. } => {
                let paused = self.objects.get(&event.object).copied().unwrap_or(false);
                self.objects.insert(event.object.clone(), paused);
                true
            }
            EventBody::Delete => self.objects.remove(&event.object).is_some(),
            EventBody::Pause | EventBody::Resume => {
                if let Some(p) = self.objects.get_mut(&event.object) {
                    *p = matches!(event.body, EventBody::Pause);
                }
                exists
            }
            EventBody::Ack | EventBody::Unack | EventBody::CheckRequested => exists,
            EventBody::Transition { .. } => {
                assert!(matches!(effect, Effect::Transitioned | Effect::Ignored), "transition at {seq}: {effect:?}");
                assert!(exists || *effect == Effect::Ignored, "transition on a missing object took effect at {seq}");
                return;
            }
            EventBody::Soft { .. } | EventBody::Flapping { .. } | EventBody::Released { .. } => {
                assert!(matches!(effect, Effect::Folded | Effect::Ignored), "result at {seq}: {effect:?}");
                assert!(exists || *effect == Effect::Ignored, "result on a missing object took effect at {seq}");
                return;
            }
            // The policy's own rules are `jaque_core::policy`'s tests'; here: only its key takes a change, and an
            // applied one is remembered as any command.
            EventBody::Policy { .. } => {
                match effect {
                    Effect::Command(o @ Outcome::Applied { command_id, .. }) => {
                        self.applied.insert(command_id.clone(), o.clone());
                    }
                    Effect::Command(Outcome::Rejected { .. }) | Effect::Folded => {}
                    Effect::Ignored => return,
                    _ => panic!("policy change at {seq}: {effect:?}"),
                }
                assert!(event.object.is_policy(), "a policy change on an object's key took effect at {seq}");
                return;
            }
        };
        let want = match (&event.command_id, took_effect) {
            (Some(id), true) => {
                let o = Outcome::Applied {
                    command_id: id.clone(),
                    owner: event.writer.id.clone(),
                    epoch: event.epoch,
                    seq,
                };
                self.applied.insert(id.clone(), o.clone());
                Effect::Command(o)
            }
            (Some(id), false) => Effect::Command(Outcome::NotFound { command_id: id.clone() }),
            (None, true) => Effect::Folded,
            (None, false) => Effect::Ignored,
        };
        assert_eq!(*effect, want, "effect at {seq} of {event:?}");
    }

    fn final_check(&self, reader: &LogReader) {
        let objects: Vec<_> = reader.objects().iter().map(|(id, v)| (id.clone(), v.paused)).collect();
        let model: Vec<_> = self.objects.iter().map(|(id, p)| (id.clone(), *p)).collect();
        assert_eq!(objects, model, "objects");
        for (id, view) in reader.objects() {
            assert_eq!(view.key, hrw::key(id.as_str()));
            if let Some(t) = &view.last_transition {
                assert_eq!(t.to, view.state);
            }
            // A soft state is on its way to a hard state it has not reached (`jaque_core::alert`).
            if let Some(soft) = view.soft() {
                assert!(soft.state != view.state && 0 < soft.attempt && soft.attempt < soft.of, "{id}: {soft:?}");
            }
            assert!(view.changes().len() <= jaque_core::alert::CHANGES_KEPT);
            if let Some(r) = self.records.last() {
                assert_eq!(reader.owner(id), spec_owner(&r.members, id.as_str()));
            }
        }
        for c in COMMANDS {
            let c = CommandId::new(c).unwrap();
            assert_eq!(reader.applied(&c), self.applied.get(&c), "applied {c}");
        }
        let c = &reader.counters;
        assert_eq!(c.stale_epoch_total, self.stale);
        assert_eq!(c.epochs_rejected_total, self.rejected);
        assert_eq!(c.duplicate_commands_total, self.duplicate_commands);
        assert_eq!(c.unreadable_total, self.unreadable);
    }
}
