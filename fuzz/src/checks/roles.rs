//! The log-reading roles (`Sink`, `Notifier`) driven through arbitrary inputs by a tiny world that keeps their
//! driver contracts (each output answered at most once, log entries in order) but answers everything else as
//! an adversarial store and network would: progress that claims any position, records with any content and
//! revision, replays that cover only part of what was asked (or entries outside it), refused and failed
//! writes, lost compare-and-sets, endpoints that answer anything, membership of any bucket with revisions that
//! repeat, time that jumps, a leave at any moment.
//!
//! Input format (every byte string is valid): one byte choosing the role, then one operation per byte with its
//! arguments after it. Checked: no panic, `check_invariants` after every step (also while, at the end, every
//! output is answered well and time runs on), no empty transaction, every `webhook-id` in jaque's form.

use super::bytes::Bytes;
use super::fence::{MEMBERS, OBJECTS};
use jaque_core::notifier::{self, Claim, DeliveryRecord, Endpoint, Notifier, NotifierConfig, SendResult, Stored};
use jaque_core::sink::{self, Sink, SinkConfig};
use jaque_core::{
    Bucket, EpochRecord, Event, EventBody, LogEntry, LogReader, MemberChange, MemberId, MemberObservation, MemberRef,
    ObjectDef, ObjectId, Probe, State, Time,
};
use jaque_core::{IoError, Life, LifeOutput};
use std::collections::VecDeque;
use std::time::Duration;

const MAX_OPS: usize = 2048;
const TTL: Duration = Duration::from_secs(3);
const STATES: [State; 5] = [State::Pending, State::Ok, State::Warning, State::Critical, State::Unknown];

fn member(i: usize, incarnation: u64) -> MemberRef {
    MemberRef { id: MemberId::new(MEMBERS[i % MEMBERS.len()]).unwrap(), incarnation }
}

fn object(i: usize) -> ObjectId {
    ObjectId::new(OBJECTS[i % OBJECTS.len()]).unwrap()
}

/// The node under test, behind one face.
enum Node {
    Sink(Box<Sink>),
    Notifier(Box<Notifier>),
}

/// An output waiting for its answer.
enum Pending {
    Progress {
        token: u64,
        objects: Vec<ObjectId>,
    },
    Replay {
        token: u64,
        from: u64,
        to: u64,
    },
    Write {
        batch: u64,
    },
    Starts {
        endpoints: Vec<notifier::EndpointId>,
        propose: u64,
    },
    /// A resume's question (`ReadProgress`) or, `recheck`, a lane's (`Recheck`).
    Records {
        token: u64,
        objects: Vec<ObjectId>,
        recheck: bool,
    },
    Cas {
        op: u64,
    },
    Send {
        op: u64,
    },
    Heartbeat,
    Snapshot {
        covering: u64,
    },
}

struct World {
    node: Node,
    now: Time,
    log: Vec<LogEntry>,
    delivered: usize,
    rev: u64,
    pending: VecDeque<Pending>,
    endpoints: Vec<notifier::EndpointId>,
}

impl World {
    fn bucket(&self) -> Bucket {
        match self.node {
            Node::Sink(_) => Bucket::Sink,
            Node::Notifier(_) => Bucket::Notifier,
        }
    }

    fn handle_sink(&mut self, input: sink::Input) {
        let Node::Sink(s) = &mut self.node else { return };
        s.handle(self.now, input);
        self.after();
    }

    fn handle_notifier(&mut self, input: notifier::Input) {
        let Node::Notifier(n) = &mut self.node else { return };
        n.handle(self.now, input);
        self.after();
    }

    fn member(&mut self, obs: MemberObservation) {
        match &self.node {
            Node::Sink(_) => self.handle_sink(sink::Input::Life(Life::Member(obs))),
            Node::Notifier(_) => self.handle_notifier(notifier::Input::Life(Life::Member(obs))),
        }
    }

    fn log_entry(&mut self, seq: u64, entry: LogEntry) {
        match &self.node {
            Node::Sink(_) => self.handle_sink(sink::Input::Life(Life::Log { seq, entry })),
            Node::Notifier(_) => self.handle_notifier(notifier::Input::Life(Life::Log { seq, entry })),
        }
    }

    fn timeout(&mut self) {
        match &mut self.node {
            Node::Sink(s) => s.handle_timeout(self.now),
            Node::Notifier(n) => n.handle_timeout(self.now),
        }
        self.after();
    }

    fn deadline(&self) -> Option<Time> {
        match &self.node {
            Node::Sink(s) => s.poll_timeout().map(|(t, _)| t),
            Node::Notifier(n) => n.poll_timeout().map(|(t, _)| t),
        }
    }

    /// Collects outputs and checks the node's own invariants.
    fn after(&mut self) {
        match &mut self.node {
            Node::Sink(s) => {
                if let Err(e) = s.check_invariants() {
                    panic!("sink invariant: {e}");
                }
                while let Some(o) = s.poll_output() {
                    self.pending.push_back(match o {
                        sink::Output::Life(LifeOutput::Membership(_)) => continue,
                        sink::Output::QueryProgress { token, objects } => Pending::Progress { token, objects },
                        sink::Output::Replay { token, from, to } => Pending::Replay { token, from, to },
                        sink::Output::Write(b) => {
                            assert!(b.rows() > 0, "an empty transaction");
                            Pending::Write { batch: b.id }
                        }
                        sink::Output::Life(LifeOutput::NeedSnapshot { covering }) => Pending::Snapshot { covering },
                    });
                }
            }
            Node::Notifier(n) => {
                if let Err(e) = n.check_invariants() {
                    panic!("notifier invariant: {e}");
                }
                while let Some(o) = n.poll_output() {
                    self.pending.push_back(match o {
                        notifier::Output::Life(LifeOutput::Membership(
                            jaque_core::MembershipOutput::PutHeartbeat { .. },
                        )) => Pending::Heartbeat,
                        notifier::Output::Life(LifeOutput::Membership(_)) => continue,
                        notifier::Output::ReadStarts { endpoints, propose } => Pending::Starts { endpoints, propose },
                        notifier::Output::ReadProgress { token, objects } => {
                            Pending::Records { token, objects, recheck: false }
                        }
                        notifier::Output::Recheck { token, object } => {
                            Pending::Records { token, objects: vec![object], recheck: true }
                        }
                        notifier::Output::Replay { token, from, to } => Pending::Replay { token, from, to },
                        notifier::Output::WriteProgress { op, .. } => Pending::Cas { op },
                        notifier::Output::Send(d) => {
                            assert!(d.webhook_id.starts_with("jaque-"), "{}", d.webhook_id);
                            Pending::Send { op: d.op }
                        }
                        notifier::Output::Life(LifeOutput::NeedSnapshot { covering }) => Pending::Snapshot { covering },
                    });
                }
            }
        }
    }

    /// Answers the oldest pending output: `how` picks a good answer (0) or a bad one.
    fn answer(&mut self, b: &mut Bytes, good: bool) {
        let Some(p) = self.pending.pop_front() else { return };
        let how = if good { 0 } else { b.u8() };
        let log_len = self.log.len() as u64;
        match p {
            Pending::Progress { token, objects } => {
                let result = match how % 3 {
                    1 => Err(IoError::unavailable("down")),
                    2 => Ok(objects.iter().map(|o| (o.clone(), u64::from(b.u8()))).collect()),
                    _ => Ok(Vec::new()),
                };
                self.handle_sink(sink::Input::Progress { token, result });
            }
            Pending::Replay { token, from, to } => {
                let range = |from: u64, to: u64, log: &[LogEntry]| -> Vec<(u64, LogEntry)> {
                    (from..=to.min(log.len() as u64))
                        .filter_map(|s| log.get(s as usize - 1).map(|e| (s, e.clone())))
                        .collect()
                };
                let result = match how % 4 {
                    1 => Err(IoError::unavailable("read failed")),
                    // Only the first part, as a read that stopped early.
                    2 => {
                        let upto = from + (to - from) / 2;
                        Ok((upto, range(from.max(1), upto, &self.log)))
                    }
                    // Entries outside what was asked, too.
                    3 => Ok((to, range(1, log_len, &self.log))),
                    _ => Ok((to, range(from.max(1), to, &self.log))),
                };
                match &self.node {
                    Node::Sink(_) => self.handle_sink(sink::Input::Replayed { token, result }),
                    Node::Notifier(_) => self.handle_notifier(notifier::Input::Replayed { token, result }),
                }
            }
            Pending::Write { batch } => {
                let result = match how % 3 {
                    1 => Err(IoError::unavailable("reset")),
                    2 => Err(IoError::refused("bad bytes")),
                    _ => Ok(()),
                };
                self.handle_sink(sink::Input::Written { batch, result });
            }
            Pending::Starts { endpoints, propose } => {
                let result = match how % 3 {
                    1 => Err(IoError::unavailable("down")),
                    2 => Ok(endpoints.iter().map(|e| (*e, u64::from(b.u8()))).collect()),
                    _ => Ok(endpoints.iter().map(|e| (*e, propose)).collect()),
                };
                self.handle_notifier(notifier::Input::Starts { result });
            }
            Pending::Records { token, objects, recheck } => {
                let result = match how % 3 {
                    1 => Err(IoError::unavailable("down")),
                    2 => {
                        let mut v = Vec::new();
                        for o in &objects {
                            for e in &self.endpoints {
                                if b.below(2) == 0 {
                                    continue;
                                }
                                let claim = (b.below(2) == 0).then(|| Claim {
                                    seq: u64::from(b.u8()),
                                    by: member(b.below(5), u64::from(b.u8() % 3)),
                                });
                                let record = DeliveryRecord { done: u64::from(b.u8()), claim };
                                v.push((o.clone(), *e, Stored { record, rev: u64::from(b.u8()) }));
                            }
                        }
                        Ok(v)
                    }
                    _ => Ok(Vec::new()),
                };
                self.handle_notifier(if recheck {
                    notifier::Input::Rechecked { token, result }
                } else {
                    notifier::Input::Progress { token, result }
                });
            }
            Pending::Cas { op } => {
                let result = match how % 3 {
                    1 => Err(IoError::unavailable("down")),
                    2 => Ok(None),
                    _ => {
                        self.rev += 1;
                        Ok(Some(self.rev))
                    }
                };
                self.handle_notifier(notifier::Input::Written { op, result });
            }
            Pending::Send { op } => {
                let result = match how % 4 {
                    1 => SendResult::Gone,
                    2 => {
                        SendResult::Retry { after: Some(Duration::from_secs(u64::from(b.u8()))), reason: "429".into() }
                    }
                    3 => SendResult::Retry { after: None, reason: "503".into() },
                    _ => SendResult::Delivered,
                };
                self.handle_notifier(notifier::Input::Sent { op, result });
            }
            Pending::Heartbeat => {
                self.handle_notifier(notifier::Input::Life(Life::HeartbeatWritten { ok: how & 1 == 0 }))
            }
            Pending::Snapshot { covering } => {
                // The log's state up to the hole or past it (good), or one that does not reach it (bad).
                let upto = if how % 2 == 0 { self.delivered.max(covering as usize) } else { covering as usize / 2 };
                let mut reader = LogReader::new();
                for (i, e) in self.log.iter().take(upto).enumerate() {
                    reader.read(i as u64 + 1, e);
                }
                let restored = reader.position() as usize;
                match &self.node {
                    Node::Sink(_) => self.handle_sink(sink::Input::Life(Life::Restore(Box::new(reader)))),
                    Node::Notifier(_) => self.handle_notifier(notifier::Input::Life(Life::Restore(Box::new(reader)))),
                }
                // The driver follows the log from after where the node now stands.
                let position = match &self.node {
                    Node::Sink(s) => s.role().reader().position(),
                    Node::Notifier(n) => n.role().reader().position(),
                };
                if position as usize == restored {
                    self.delivered = self.delivered.max(restored);
                }
            }
        }
    }
}

pub fn check(data: &[u8]) {
    let mut b = Bytes::new(data);
    let is_sink = b.below(2) == 0;
    let me = member(0, 7);
    let node = if is_sink {
        let mut cfg = SinkConfig::new(me.clone(), TTL);
        cfg.max_batch = 4;
        cfg.max_pending = 12;
        cfg.role.replay_chunk = 3;
        cfg.role.max_held = 5;
        Node::Sink(Box::new(Sink::new(cfg)))
    } else {
        let endpoints = vec![Endpoint::new("http://127.0.0.1:1/a"), Endpoint::new("http://127.0.0.1:1/b")];
        let mut cfg = NotifierConfig::new(me.clone(), TTL, endpoints);
        cfg.concurrency = 2;
        cfg.max_pending = 12;
        cfg.give_up = Duration::from_secs(60);
        cfg.role.replay_chunk = 3;
        cfg.role.max_held = 5;
        Node::Notifier(Box::new(Notifier::new(cfg)))
    };
    let endpoints = match &node {
        Node::Notifier(n) => n.config().endpoints.iter().map(|e| e.id).collect(),
        Node::Sink(_) => Vec::new(),
    };
    let mut w = World {
        node,
        now: Time(1_000_000),
        log: Vec::new(),
        delivered: 0,
        rev: 0,
        pending: VecDeque::new(),
        endpoints,
    };
    match &w.node {
        Node::Sink(_) => w.handle_sink(sink::Input::Life(Life::Start)),
        Node::Notifier(_) => w.handle_notifier(notifier::Input::Life(Life::Start)),
    }
    let bucket = w.bucket();
    let mut member_rev = 0u64;
    let mut ops = 0;
    while !b.is_empty() && ops < MAX_OPS {
        ops += 1;
        match b.u8() % 12 {
            0 | 1 => {
                member_rev += u64::from(b.u8() % 3); // sometimes repeated
                let change = if b.below(3) == 0 {
                    MemberChange::Down(member(b.below(5), 0).id)
                } else {
                    let i = b.below(5);
                    MemberChange::Up(member(i, if i == 0 { 7 } else { u64::from(b.u8() % 3) }))
                };
                let bk = if b.below(5) == 0 { Bucket::Engine } else { bucket };
                w.member(MemberObservation::new(bk, member_rev, change));
            }
            2 => {
                let epoch = w.log.iter().filter(|e| matches!(e, LogEntry::Epoch(_))).count() as u64 + 1;
                let n = 1 + b.below(3);
                let mut members: Vec<MemberRef> = (0..n).map(|i| member(i + b.below(2), 1)).collect();
                members.sort();
                members.dedup_by(|a, b| a.id == b.id);
                let epoch = if b.below(8) == 0 { u64::from(b.u8()) } else { epoch };
                w.log.push(LogEntry::Epoch(EpochRecord {
                    epoch,
                    members,
                    members_rev: u64::from(b.u8()),
                    idempotency_window_ms: None,
                    format: 1,
                }));
            }
            3..=5 => {
                let body = match b.u8() % 6 {
                    0 => EventBody::Put {
                        def: ObjectDef {
                            probe: Probe::Tcp { addr: "h\0:1".into() },
                            interval_ms: 1000,
                            timeout_ms: 500,
                            ..ObjectDef::UNSET
                        },
                    },
                    1 => EventBody::Delete,
                    2 => EventBody::Ack,
                    _ => EventBody::transition(STATES[b.below(5)], STATES[b.below(5)], "x\0y".repeat(b.below(4))),
                };
                let epoch = u64::from(b.u8() % 5);
                let writer = member(b.below(5), 1);
                let at = Time(w.now.0.saturating_sub(u64::from(b.u16())));
                w.log.push(LogEntry::Event(Event {
                    object: object(b.below(8)),
                    epoch,
                    writer,
                    at,
                    command_id: None,
                    body,
                }));
            }
            6 => {
                let n = 1 + b.below(8);
                // Sometimes a purged range first: the next entries delivered stand past a hole.
                if b.below(16) == 0 {
                    w.delivered = (w.delivered + 1 + b.below(4)).min(w.log.len());
                }
                for _ in 0..n {
                    if w.delivered < w.log.len() {
                        w.delivered += 1;
                        let seq = w.delivered as u64;
                        let entry = w.log[w.delivered - 1].clone();
                        w.log_entry(seq, entry);
                    }
                }
            }
            7 => match &w.node {
                Node::Sink(_) => w.handle_sink(sink::Input::Life(Life::CaughtUp)),
                Node::Notifier(_) => w.handle_notifier(notifier::Input::Life(Life::CaughtUp)),
            },
            8 => {
                w.now = w.now + Duration::from_millis(u64::from(b.u16()));
                if w.deadline().is_some_and(|t| t <= w.now) {
                    w.timeout();
                }
            }
            9 | 10 => w.answer(&mut b, false),
            _ => {
                if b.below(4) == 0 {
                    match &w.node {
                        Node::Sink(_) => w.handle_sink(sink::Input::Life(Life::Leave)),
                        Node::Notifier(_) => w.handle_notifier(notifier::Input::Life(Life::Leave)),
                    }
                }
            }
        }
    }
    // Heal: answer everything well, run time far, deliver the rest of the log.
    let mut empty = Bytes::new(&[]);
    for _ in 0..2_000 {
        if w.pending.is_empty() {
            match w.deadline() {
                Some(t) if t <= w.now + Duration::from_secs(3600) => {
                    w.now = t.max(w.now);
                    w.timeout();
                }
                _ => break,
            }
        } else {
            w.answer(&mut empty, true);
        }
    }
}
