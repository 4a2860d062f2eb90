//! One engine driven through arbitrary, contract-respecting inputs by a tiny world: a log the driver appends
//! to (the engine's own appends and proposals when they land, and foreign epoch records and events), the
//! membership store's observations, commands from callers, forward and check results, time and a leave.
//!
//! Input format (every byte string is valid): one byte of configuration, then one operation per byte with its
//! arguments after it. The world keeps the engine's contracts (docs/design.md and `engine.rs`): each `Forward` gets
//! exactly one result, each `ProposeEpoch` at most one, `Start` comes first and `CaughtUp` at most once, log
//! entries arrive in log order (re-deliveries of read positions allowed), a proposal wins only if the log's last
//! epoch record is still the one it names. `JAQUE_FUZZ_TRACE=1` prints every input and output.
//!
//! Checked after every step: no panic; `check_invariants`; the engine's reader holds the same state as a
//! plain `LogReader` fed the same entries; appends carry the epoch in force and the engine as writer;
//! proposals name the next epoch, the engine's live set and the position of the record in force; forwards
//! carry hop 1 and go to the owner, never for a hop-1 command; an `applied` reply is what the log says the
//! command's first accepted event did; every output message decodes to itself after encoding; a submission that
//! asked for a claim is declined exactly when the engine would refuse it then (not ready, leaving, or no
//! heartbeat acknowledged within the ttl), else claimed at most once and before its reply (or answered at once).
//! Heartbeat puts are answered at once, ok or failed as the input says. At the end, with every forward
//! answered, every append landed, the whole log delivered and time run past the reply deadline: every command got
//! exactly one reply, or exactly one decline and nothing else.

use super::bytes::Bytes;
use super::fence::{COMMANDS, MEMBERS, OBJECTS};
use jaque_core::wire;
use jaque_core::{
    Bucket, CheckResult, CheckWork, Command, CommandId, CommandKind, Engine, EngineConfig, EpochRecord, Event,
    EventBody, ForwardId, Input, LogEntry, LogReader, MemberChange, MemberId, MemberObservation, MemberRef,
    MembershipOutput, ObjectDef, ObjectId, Outcome, Output, Probe, ReplyTo, State, Time,
};
use jaque_core::{IoError, Life, LifeOutput};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const MAX_OPS: usize = 1024;
const STATES: [State; 5] = [State::Pending, State::Ok, State::Warning, State::Critical, State::Unknown];

fn member(i: usize, incarnation: u64) -> MemberRef {
    MemberRef { id: MemberId::new(MEMBERS[i % MEMBERS.len()]).unwrap(), incarnation }
}

fn def(i: usize) -> ObjectDef {
    match i % 4 {
        0 => ObjectDef {
            probe: Probe::Tcp { addr: "db:5432".into() },
            interval_ms: 1000,
            timeout_ms: 500,
            ..ObjectDef::UNSET
        },
        1 => ObjectDef {
            probe: Probe::Http { url: "http://127.0.0.1/".into(), expect_status: None },
            interval_ms: 10_000,
            timeout_ms: 2000,
            ..ObjectDef::UNSET
        },
        2 => ObjectDef {
            probe: Probe::Exec { plugin: "check_x".into(), args: vec![] },
            interval_ms: 250,
            timeout_ms: 250,
            ..ObjectDef::UNSET
        },
        // Invalid: the engine rejects it.
        _ => ObjectDef { probe: Probe::Tcp { addr: "nope".into() }, interval_ms: 0, timeout_ms: 0, ..ObjectDef::UNSET },
    }
}

struct World {
    /// `JAQUE_FUZZ_TRACE=1` prints every input and output to stderr, to read a failing input.
    trace: bool,
    engine: Engine,
    me: MemberRef,
    now: Time,
    log: Vec<(u64, LogEntry)>,
    /// Index into `log` of the next entry to deliver.
    delivered: usize,
    /// Log position of the last epoch record (the compare-and-set condition of a proposal).
    last_epoch_seq: Option<u64>,
    last_epoch: u64,
    plain: LogReader,
    member_rev: u64,
    appends: Vec<Event>,
    proposals: Vec<(EpochRecord, Option<u64>)>,
    forwards: Vec<(ForwardId, Command)>,
    checks: Vec<CheckWork>,
    next_reply: u64,
    /// Replies per caller.
    replies: BTreeMap<u64, Vec<Outcome>>,
    /// Callers that were claimed, and declined.
    claimed: BTreeSet<u64>,
    declined: BTreeSet<u64>,
    /// Heartbeat puts are answered as failed while this is set.
    heartbeats_fail: bool,
    /// Positions of snapshots written and not yet answered.
    snapshots: Vec<u64>,
    purged_below: u64,
}

impl World {
    fn handle(&mut self, input: Input) {
        if self.trace {
            eprintln!("{} <- {input:?}", self.now);
        }
        self.engine.handle(self.now, input);
        self.after();
    }

    fn after(&mut self) {
        let mut puts = 0;
        while let Some(out) = self.engine.poll_output() {
            if self.trace {
                eprintln!("{} -> {out:?}", self.now);
            }
            wire_round_trip(&out);
            match out {
                Output::Life(LifeOutput::Membership(m)) => {
                    puts += usize::from(matches!(m, MembershipOutput::PutHeartbeat { .. }))
                }
                Output::Claimed { to } => {
                    assert!(!self.replies.contains_key(&to.0), "a claim after the reply");
                    assert!(!self.declined.contains(&to.0), "a claim of a declined caller");
                    assert!(self.claimed.insert(to.0), "claimed twice");
                }
                Output::Declined { to, .. } => {
                    assert!(!self.replies.contains_key(&to.0) && !self.claimed.contains(&to.0), "declined late");
                    assert!(self.declined.insert(to.0), "declined twice");
                }
                Output::ProposeEpoch { record, after_seq } => {
                    assert_eq!(record.epoch, self.engine.epoch() + 1, "proposal for a non-next epoch");
                    assert_eq!(after_seq, self.engine.reader().epoch_seq(), "proposal's compare-and-set position");
                    assert_eq!(record.members, self.engine.membership().view().members(), "proposal's members");
                    assert!(record.members.windows(2).all(|w| w[0].id < w[1].id));
                    self.proposals.push((record, after_seq));
                }
                Output::Append(event) => {
                    assert_eq!(event.writer, self.me, "an append by someone else");
                    assert_eq!(event.epoch, self.engine.epoch(), "an append under another epoch than in force");
                    self.appends.push(event);
                }
                Output::Forward { id, to, cmd } => {
                    assert_eq!(cmd.hop, 1, "a forward with hop {}", cmd.hop);
                    assert_ne!(to, self.me, "a forward to itself");
                    assert_eq!(Some(&to), self.engine.reader().owner(&cmd.object), "a forward to a non-owner");
                    self.forwards.push((id, cmd));
                }
                Output::Reply { to, outcome } => {
                    if let Outcome::Applied { command_id, .. } = &outcome {
                        assert_eq!(
                            self.plain.applied(command_id),
                            Some(&outcome),
                            "applied reply the log does not support"
                        );
                    }
                    self.replies.entry(to.0).or_default().push(outcome);
                }
                Output::Dispatch(work) => self.checks.push(work),
                Output::WriteSnapshot(snapshot) => {
                    assert_eq!(snapshot.position, self.engine.reader().position(), "a snapshot of another position");
                    let restored = LogReader::from_snapshot(*snapshot).expect("a written snapshot restores");
                    assert!(&restored == self.engine.reader(), "a snapshot that is not the engine's reader");
                    self.snapshots.push(restored.position());
                }
                Output::Purge { below } => {
                    assert!(below <= self.engine.reader().position() + 1, "a purge past what was read");
                    assert!(below > self.purged_below, "a purge that removes nothing new");
                    self.purged_below = below;
                }
                Output::Life(LifeOutput::NeedSnapshot { covering }) => {
                    panic!("a snapshot asked for at {covering} in a log without holes")
                }
            }
        }
        if let Err(e) = self.engine.check_invariants() {
            panic!("engine invariant: {e}");
        }
        for _ in 0..puts {
            let ok = !self.heartbeats_fail;
            self.handle(Input::Life(Life::HeartbeatWritten { ok }));
        }
    }

    fn append(&mut self, entry: LogEntry) {
        let seq = self.log.last().map_or(1, |(s, _)| s + 1);
        if let LogEntry::Epoch(r) = &entry {
            if r.epoch == self.last_epoch + 1 && r.members.windows(2).all(|w| w[0].id < w[1].id) {
                self.last_epoch = r.epoch;
                self.last_epoch_seq = Some(seq);
            }
        }
        self.log.push((seq, entry));
    }

    /// Delivers the next `n` log entries, then re-delivers the last `again` of the delivered ones.
    fn deliver(&mut self, n: usize, again: usize) {
        let until = self.delivered.saturating_add(n).min(self.log.len());
        while self.delivered < until {
            let (seq, entry) = self.log[self.delivered].clone();
            self.delivered += 1;
            self.plain.read(seq, &entry);
            self.handle(Input::Life(Life::Log { seq, entry }));
            self.same_reader();
        }
        let from = self.delivered - again.min(self.delivered);
        for i in from..self.delivered {
            let (seq, entry) = self.log[i].clone();
            self.handle(Input::Life(Life::Log { seq, entry }));
        }
        self.same_reader();
    }

    fn same_reader(&self) {
        let r = self.engine.reader();
        assert_eq!(r.position(), self.plain.position());
        assert_eq!(r.epoch(), self.plain.epoch());
        assert_eq!(r.epoch_seq(), self.plain.epoch_seq());
        assert_eq!(r.objects(), self.plain.objects());
        for c in COMMANDS {
            let c = CommandId::new(c).unwrap();
            assert_eq!(r.applied(&c), self.plain.applied(&c));
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now = Time(self.now.0 + ms);
        if self.engine.poll_timeout().is_some_and(|(t, _)| t <= self.now) {
            if self.trace {
                eprintln!("{} <- timeout {:?}", self.now, self.engine.poll_timeout());
            }
            self.engine.handle_timeout(self.now);
            self.after();
        }
    }

    fn command(&mut self, b: &mut Bytes) {
        let k = b.u8();
        let kind = match k % 8 {
            0 | 1 => CommandKind::Put { def: def(b.below(4)) },
            2 => CommandKind::Delete,
            3 => CommandKind::Pause,
            4 => CommandKind::Resume,
            5 => CommandKind::CheckNow,
            _ => CommandKind::Ack,
        };
        let id = CommandId::new(COMMANDS[b.below(COMMANDS.len())]).unwrap();
        let object = ObjectId::new(OBJECTS[b.below(OBJECTS.len())]).unwrap();
        let hop = u8::from(k & 0x80 != 0);
        let reply = ReplyTo(self.next_reply);
        self.next_reply += 1;
        let forwards = self.forwards.len();
        let cmd = Command { id, object, kind, hop };
        if hop == 0 && k & 0x40 != 0 {
            let refused = self.engine.claim_refusal(self.now).is_some();
            self.handle(Input::Claim { reply, cmd });
            assert_eq!(self.declined.contains(&reply.0), refused, "declined exactly when it would refuse");
            return;
        }
        self.handle(Input::Command { reply, cmd });
        if hop == 1 {
            assert_eq!(self.forwards.len(), forwards, "a hop-1 command was forwarded again");
        }
    }

    fn forward_result(&mut self, i: usize, how: u8) {
        if self.forwards.is_empty() {
            return;
        }
        let (id, cmd) = self.forwards.remove(i % self.forwards.len());
        let result = match how % 4 {
            0 => Err(IoError::unavailable("no responders")),
            1 => Ok(Outcome::NotOwned),
            2 => Ok(Outcome::NotFound { command_id: cmd.id }),
            _ => Ok(Outcome::Unavailable { reason: "owner is reading the log".into() }),
        };
        self.handle(Input::ForwardResult { id, result });
    }

    fn land_append(&mut self, i: usize) {
        if !self.appends.is_empty() {
            let e = self.appends.remove(i % self.appends.len());
            self.append(LogEntry::Event(e));
        }
    }
}

/// Every message the engine makes survives the wire: what the shell sends, the receiving side decodes.
fn wire_round_trip(out: &Output) {
    match out {
        Output::Life(LifeOutput::Membership(_)) | Output::Claimed { .. } => {}
        Output::Declined { reason, .. } => {
            let answer = wire::Answer::Declined { by: MemberId::new("e").unwrap(), reason: reason.to_string() };
            assert_eq!(wire::decode_answer(&wire::encode_answer(&answer)).expect("a decline decodes"), answer);
        }
        Output::ProposeEpoch { record, .. } => {
            let entry = LogEntry::Epoch(record.clone());
            assert_eq!(wire::decode_log_entry(&wire::encode(&entry)).expect("a proposal decodes"), entry);
        }
        Output::Append(event) => {
            let entry = LogEntry::Event(event.clone());
            assert_eq!(wire::decode_log_entry(&wire::encode(&entry)).expect("an append decodes"), entry);
        }
        Output::Forward { cmd, .. } => {
            assert_eq!(&wire::decode_command(&wire::encode(cmd)).expect("a forward decodes"), cmd);
        }
        Output::Reply { outcome, .. } => {
            assert_eq!(&wire::decode_outcome(&wire::encode(outcome)).expect("a reply decodes"), outcome);
        }
        Output::Dispatch(work) => {
            let sent = wire::decode_check_work(&wire::encode(&[work])).expect("check work decodes");
            assert_eq!(sent.into_vec(), std::slice::from_ref(work));
        }
        Output::WriteSnapshot(snapshot) => {
            let reader = wire::decode_snapshot(&wire::encode_snapshot(snapshot)).expect("a snapshot decodes");
            assert_eq!(&reader.snapshot(), &**snapshot, "a snapshot changed on the wire");
        }
        Output::Purge { .. } | Output::Life(LifeOutput::NeedSnapshot { .. }) => {}
    }
}

pub fn check(data: &[u8]) {
    let mut b = Bytes::new(data);
    let cfg_byte = b.u8();
    let me = member(0, 1 + u64::from(cfg_byte & 1));
    let mut cfg = EngineConfig::new(me.clone(), Duration::from_millis(3000));
    cfg.forwarding = cfg_byte & 2 == 0;
    // Snapshots every few entries, so their writes, answers and purges happen within a short input.
    cfg.snapshots.every = 1 + u64::from(cfg_byte >> 2 & 7);
    cfg.snapshots.retention = Duration::from_millis(u64::from(cfg_byte >> 5) * 20_000);
    let reply_timeout = cfg.reply_timeout;
    let mut w = World {
        trace: std::env::var_os("JAQUE_FUZZ_TRACE").is_some(),
        engine: Engine::new(cfg),
        me,
        now: Time(1_000_000),
        log: Vec::new(),
        delivered: 0,
        last_epoch_seq: None,
        last_epoch: 0,
        plain: LogReader::new(),
        member_rev: 0,
        appends: Vec::new(),
        proposals: Vec::new(),
        forwards: Vec::new(),
        checks: Vec::new(),
        next_reply: 0,
        replies: BTreeMap::new(),
        claimed: BTreeSet::new(),
        declined: BTreeSet::new(),
        heartbeats_fail: false,
        snapshots: Vec::new(),
        purged_below: 0,
    };
    // The driver's first input, as in the shell and the simulator.
    w.handle(Input::Life(Life::Start));
    let mut caught_up = false;

    let mut ops = 0;
    while !b.is_empty() && ops < MAX_OPS {
        ops += 1;
        match b.u8() % 16 {
            0 if !caught_up => {
                caught_up = true;
                w.handle(Input::Life(Life::CaughtUp));
            }
            0..=2 => {
                // A membership change in the engine bucket; revisions mostly grow.
                let c = b.u8();
                w.member_rev += u64::from(c & 0x40 == 0);
                let change = if c & 1 == 0 {
                    MemberChange::Up(member(usize::from(c >> 1) & 3, 1 + u64::from(c >> 3 & 1)))
                } else {
                    MemberChange::Down(member(usize::from(c >> 1) & 3, 1).id)
                };
                let obs = MemberObservation::new(Bucket::Engine, w.member_rev, change);
                w.handle(Input::Life(Life::Member(obs)));
            }
            3 => {
                // The log's compare-and-set decides a proposal.
                if !w.proposals.is_empty() {
                    let (record, after_seq) = w.proposals.remove(b.below(w.proposals.len()));
                    let c = b.u8();
                    let won = after_seq == w.last_epoch_seq && c & 1 == 0;
                    if won {
                        w.append(LogEntry::Epoch(record.clone()));
                    }
                    if c & 2 == 0 {
                        w.handle(Input::ProposeResult { epoch: record.epoch, won });
                    }
                }
            }
            4 => {
                // Another engine's proposal won.
                let mask = b.u8();
                let members =
                    (0..4).filter(|i| mask & (1 << i) != 0).map(|i| member(i, 1 + u64::from(mask >> 7))).collect();
                let record = EpochRecord {
                    epoch: w.last_epoch + 1,
                    members,
                    members_rev: w.member_rev,
                    idempotency_window_ms: None,
                    format: 1,
                };
                w.append(LogEntry::Epoch(record));
            }
            5 => {
                // Another engine's event: a command or a transition, under a recent epoch.
                let c = b.u8();
                let body = match c % 4 {
                    0 => EventBody::Put { def: def(usize::from(c >> 2)) },
                    1 => EventBody::Delete,
                    2 => EventBody::Pause,
                    _ => EventBody::transition(State::Pending, STATES[b.below(5)], String::new()),
                };
                let event = Event {
                    object: ObjectId::new(OBJECTS[b.below(OBJECTS.len())]).unwrap(),
                    epoch: w.last_epoch.saturating_sub(u64::from(c >> 6)),
                    writer: member(1 + b.below(3), 1),
                    // Writers' clocks disagree: mostly ours, sometimes far off either way.
                    at: match b.u8() {
                        0 => Time(0),
                        1 => Time(u64::MAX),
                        d if d & 0x80 != 0 => Time(w.now.0.saturating_sub(u64::from(d) * 1000)),
                        d => Time(w.now.0 + u64::from(d) * 1000),
                    },
                    command_id: (c & 0x20 != 0).then(|| CommandId::new(COMMANDS[b.below(COMMANDS.len())]).unwrap()),
                    body,
                };
                w.append(LogEntry::Event(event));
            }
            6 | 7 => w.command(&mut b),
            8 => {
                let (i, how) = (b.below(256), b.u8());
                w.forward_result(i, how);
            }
            9 => {
                let i = b.below(256);
                w.land_append(i);
            }
            10 => {
                // An append fails; it may still land later.
                if !w.appends.is_empty() {
                    let i = b.below(w.appends.len());
                    let event = if b.u8() & 1 == 0 { w.appends.remove(i) } else { w.appends[i].clone() };
                    w.handle(Input::AppendFailed { event, error: IoError::Timeout });
                }
            }
            11 => {
                // A worker answers a check (or sends a stale or made-up result).
                let c = b.u8();
                let (check_id, object) = if !w.checks.is_empty() && c & 1 == 0 {
                    let work = w.checks.remove(b.below(w.checks.len()));
                    (work.check_id, work.object)
                } else {
                    (u64::from(b.u8()), ObjectId::new(OBJECTS[b.below(OBJECTS.len())]).unwrap())
                };
                let result =
                    CheckResult { check_id, object, state: STATES[usize::from(c >> 1) % 5], output: "x".into() };
                w.handle(Input::CheckResult(result));
            }
            12 | 13 => {
                let (n, again) = (b.below(8), b.u8());
                w.deliver(n, if again & 3 == 0 { usize::from(again >> 2) % 4 } else { 0 });
            }
            14 => {
                let d = u64::from(b.u16());
                w.advance(d);
            }
            _ => {
                let c = b.u8();
                if c & 0x1f == 0 {
                    w.handle(Input::Life(Life::Leave));
                } else if c & 0x1f == 1 {
                    // The store stops (or starts again) acknowledging heartbeats.
                    w.heartbeats_fail = !w.heartbeats_fail;
                } else if !w.snapshots.is_empty() {
                    // The store answers a snapshot write (maybe one the engine no longer waits for).
                    let position = w.snapshots.remove(usize::from(c >> 5) % w.snapshots.len());
                    let result = if c & 1 == 0 { Ok(()) } else { Err(IoError::unavailable("store away")) };
                    w.handle(Input::SnapshotWritten { position, result });
                }
            }
        }
    }

    // Quiesce: answer every forward, land every append, deliver everything, let deadlines pass.
    for _ in 0..64 {
        while !w.forwards.is_empty() {
            w.forward_result(0, 0);
        }
        while !w.appends.is_empty() {
            w.land_append(0);
        }
        w.deliver(usize::MAX, 0);
        w.advance(reply_timeout.as_millis() as u64 + 1);
        if w.forwards.is_empty() && w.appends.is_empty() && w.delivered == w.log.len() {
            break;
        }
    }
    assert!(w.forwards.is_empty() && w.appends.is_empty(), "the engine keeps producing work");
    for r in 0..w.next_reply {
        let got = w.replies.get(&r).map_or(&[][..], |v| v.as_slice());
        let want = usize::from(!w.declined.contains(&r));
        assert_eq!(got.len(), want, "caller {r} got {} replies: {got:?}", got.len());
    }
    assert!(w.engine.is_idle(), "callers still waiting at the end");
}
