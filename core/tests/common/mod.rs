//! A tiny, fault-free world for driving engines in tests: a membership store with revisions and TTLs, one
//! ordered log with the compare-and-set rule, instant request/reply between engines and an instant worker.
//! The simulator (`jaque-sim`) is the faulty, seeded version of this; here every delivery is immediate and in
//! a fixed order, so tests read like scripts.
#![allow(dead_code)]

use jaque_core::*;
use jaque_core::{Life, LifeOutput};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub fn member(id: &str, inc: u64) -> MemberRef {
    MemberRef { id: MemberId::new(id).unwrap(), incarnation: inc }
}

/// An object's id, or the policy's key (`ObjectId::POLICY`).
pub fn oid(s: &str) -> ObjectId {
    ObjectId::from_log(s).unwrap()
}

pub fn def(interval_s: u64) -> ObjectDef {
    ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: interval_s * 1000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    }
}

pub fn cmd(id: &str, object: &str, kind: CommandKind) -> Command {
    Command { id: CommandId::new(id).unwrap(), object: oid(object), kind, hop: 0 }
}

pub const TTL: Duration = Duration::from_secs(9);

#[derive(Default)]
pub struct World {
    pub now: Time,
    pub engines: BTreeMap<String, Engine>,
    /// Engines that are "paused": they receive nothing and their timers do not fire.
    pub paused: Vec<String>,
    pub log: Vec<LogEntry>,
    /// Next log position each engine reads (index into `log`).
    cursor: BTreeMap<String, usize>,
    kv_rev: u64,
    /// id -> (incarnation, expires at)
    kv: BTreeMap<String, (u64, Time)>,
    /// Membership changes not yet delivered: (rev, change) per engine.
    watch: BTreeMap<String, VecDeque<MemberObservation>>,
    pub replies: BTreeMap<u64, Vec<Outcome>>,
    /// Claims taken (`Claimed`) and declined (`Declined`, with the reason), by reply id.
    pub claimed: Vec<u64>,
    pub declined: BTreeMap<u64, &'static str>,
    /// The store answers heartbeat puts with a failure (the put does not land either).
    pub heartbeats_fail: bool,
    next_reply: u64,
    /// Forwards in flight: (from engine, forward id) by the ReplyTo used at the target.
    forwards: BTreeMap<(String, u64), (String, ForwardId)>,
    pub dispatched: Vec<(String, CheckWork, Time)>,
    /// Check results to return: object -> state.
    pub truth: BTreeMap<String, State>,
    /// Check outputs to return: object -> output (empty when absent).
    pub outputs: BTreeMap<String, String>,
    /// Workers that never answer: dispatched checks get no result.
    pub hold_results: bool,
    pub max_hop_seen: u8,
    /// Appends to lose silently (neither landing nor failing), as a broken store would.
    pub lose_appends: usize,
    pub forwarded: Vec<(String, String)>,
    /// Snapshots stored, by position (the store's answer to `WriteSnapshot` is always a success).
    pub snapshots: BTreeMap<u64, ReaderSnapshot>,
    /// Events below this position are purged: a reader below it jumps over them (sees a hole).
    pub purged_below: u64,
    /// Every purge asked for, in order.
    pub purges: Vec<u64>,
    /// Engine config used by `add_engine` (snapshot settings, say).
    pub config: Option<fn(&mut EngineConfig)>,
    /// The cluster format every member announces (`None`: none, as builds before v0.1.0: format 1).
    pub announce: Option<u32>,
}

impl World {
    pub fn new() -> World {
        World { now: Time(1_000_000), ..World::default() }
    }

    /// What the membership store tells of a change, with the format members announce.
    fn observation(&self, change: MemberChange) -> MemberObservation {
        let mut o = MemberObservation::new(Bucket::Engine, self.kv_rev, change);
        o.format = self.announce.unwrap_or(o.format);
        o
    }

    pub fn add_engine(&mut self, id: &str, inc: u64) {
        self.add_engine_from(id, inc, LogReader::new());
    }

    /// Adds an engine whose reader starts from the newest stored snapshot, as the shell starts one.
    pub fn add_engine_from_snapshot(&mut self, id: &str, inc: u64) {
        let reader = self
            .snapshots
            .values()
            .next_back()
            .map(|s| LogReader::from_snapshot(s.clone()).expect("a stored snapshot restores"))
            .unwrap_or_default();
        self.add_engine_from(id, inc, reader);
    }

    fn add_engine_from(&mut self, id: &str, inc: u64, reader: LogReader) {
        let mut cfg = EngineConfig::new(member(id, inc), TTL);
        if let Some(f) = self.config {
            f(&mut cfg);
        }
        let start = reader.position() as usize;
        let mut e = Engine::with_reader(cfg, reader);
        e.handle(self.now, Input::Life(Life::Start));
        self.engines.insert(id.to_string(), e);
        self.cursor.insert(id.to_string(), start);
        // A new watcher gets a snapshot of the live keys.
        let snapshot: VecDeque<MemberObservation> =
            self.kv.iter().map(|(k, (inc, _))| self.observation(MemberChange::Up(member(k, *inc)))).collect();
        // Snapshot entries share a revision; give each a distinct one below the current (like a KV's history).
        let n = snapshot.len() as u64;
        let snapshot = snapshot.into_iter().enumerate().map(|(i, mut o)| {
            o.rev = self.kv_rev.saturating_sub(n - 1 - i as u64);
            o
        });
        self.watch.insert(id.to_string(), snapshot.collect());
        self.run();
        let e = self.engines.get_mut(id).unwrap();
        e.handle(self.now, Input::Life(Life::CaughtUp));
        self.run();
    }

    pub fn remove_engine(&mut self, id: &str) -> Engine {
        self.cursor.remove(id);
        self.watch.remove(id);
        self.engines.remove(id).unwrap()
    }

    fn kv_change(&mut self, change: MemberChange) {
        self.kv_rev += 1;
        let observation = self.observation(change);
        for q in self.watch.values_mut() {
            q.push_back(observation.clone());
        }
    }

    pub fn submit(&mut self, at: &str, c: Command) -> u64 {
        let r = self.next_reply;
        self.next_reply += 1;
        self.engines.get_mut(at).unwrap().handle(self.now, Input::Command { reply: ReplyTo(r), cmd: c });
        self.run();
        r
    }

    /// A submission through ingress that asks for a claim, at engine `at`.
    pub fn submit_claim(&mut self, at: &str, c: Command) -> u64 {
        let r = self.next_reply;
        self.next_reply += 1;
        self.engines.get_mut(at).unwrap().handle(self.now, Input::Claim { reply: ReplyTo(r), cmd: c });
        self.run();
        r
    }

    /// Hands a command to an engine without running the world: it travels with whatever happens next.
    pub fn submit_nowait(&mut self, at: &str, c: Command) -> u64 {
        let r = self.next_reply;
        self.next_reply += 1;
        self.engines.get_mut(at).unwrap().handle(self.now, Input::Command { reply: ReplyTo(r), cmd: c });
        r
    }

    pub fn outcome(&self, r: u64) -> &Outcome {
        let v = &self.replies[&r];
        assert_eq!(v.len(), 1, "exactly one outcome per command, got {v:?}");
        &v[0]
    }

    /// Delivers everything deliverable until quiet (without advancing time).
    pub fn run(&mut self) {
        for _ in 0..10_000 {
            if !self.step() {
                return;
            }
        }
        panic!("world did not become quiet");
    }

    fn step(&mut self) -> bool {
        let ids: Vec<String> = self.engines.keys().cloned().collect();
        let mut progress = false;
        for id in ids {
            if self.paused.contains(&id) {
                continue;
            }
            // Outputs first.
            while let Some(out) = self.engines.get_mut(&id).unwrap().poll_output() {
                progress = true;
                self.carry_out(&id, out);
            }
            // Then membership observations.
            if let Some(obs) = self.watch.get_mut(&id).and_then(|q| q.pop_front()) {
                progress = true;
                self.engines.get_mut(&id).unwrap().handle(self.now, Input::Life(Life::Member(obs)));
            }
            // Then the log; purged events are not there (epoch records always are).
            let mut c = self.cursor[&id];
            while c < self.log.len() && (c as u64 + 1) < self.purged_below && matches!(self.log[c], LogEntry::Event(_))
            {
                c += 1;
            }
            if c < self.log.len() {
                progress = true;
                let entry = self.log[c].clone();
                self.cursor.insert(id.clone(), c + 1);
                self.engines
                    .get_mut(&id)
                    .unwrap()
                    .handle(self.now, Input::Life(Life::Log { seq: c as u64 + 1, entry }));
            }
        }
        progress
    }

    fn last_epoch_seq(&self) -> Option<u64> {
        self.log.iter().rposition(|e| matches!(e, LogEntry::Epoch(_))).map(|i| i as u64 + 1)
    }

    fn carry_out(&mut self, from: &str, out: Output) {
        let now = self.now;
        match out {
            Output::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { member, ttl, .. })) => {
                let ok = !self.heartbeats_fail;
                if ok {
                    self.kv.insert(member.id.to_string(), (member.incarnation, now + ttl));
                    self.kv_change(MemberChange::Up(member));
                }
                self.engines.get_mut(from).unwrap().handle(now, Input::Life(Life::HeartbeatWritten { ok }));
            }
            Output::Life(LifeOutput::Membership(MembershipOutput::DeleteHeartbeat { member, .. })) => {
                self.kv.remove(member.id.as_str());
                self.kv_change(MemberChange::Down(member.id));
            }
            Output::ProposeEpoch { record, after_seq } => {
                let won = self.last_epoch_seq() == after_seq;
                if won {
                    self.log.push(LogEntry::Epoch(record.clone()));
                }
                self.engines.get_mut(from).unwrap().handle(now, Input::ProposeResult { epoch: record.epoch, won });
            }
            Output::Append(_) if self.lose_appends > 0 => self.lose_appends -= 1,
            Output::Append(event) => self.log.push(LogEntry::Event(event)),
            Output::Forward { id, to, cmd } => {
                self.max_hop_seen = self.max_hop_seen.max(cmd.hop);
                self.forwarded.push((from.to_string(), to.id.to_string()));
                let target = to.id.to_string();
                if self.engines.contains_key(&target) && !self.paused.contains(&target) {
                    let r = self.next_reply;
                    self.next_reply += 1;
                    self.forwards.insert((target.clone(), r), (from.to_string(), id));
                    self.engines.get_mut(&target).unwrap().handle(now, Input::Command { reply: ReplyTo(r), cmd });
                } else {
                    self.engines.get_mut(from).unwrap().handle(
                        now,
                        Input::ForwardResult { id, result: Err(jaque_core::IoError::unavailable("no responders")) },
                    );
                }
            }
            Output::Reply { to, outcome } => {
                if let Some((origin, fid)) = self.forwards.remove(&(from.to_string(), to.0)) {
                    if let Some(e) = self.engines.get_mut(&origin) {
                        e.handle(now, Input::ForwardResult { id: fid, result: Ok(outcome) });
                    }
                } else {
                    self.replies.entry(to.0).or_default().push(outcome);
                }
            }
            Output::Claimed { to } => self.claimed.push(to.0),
            Output::Declined { to, reason } => {
                assert!(self.declined.insert(to.0, reason).is_none(), "one decline per claim");
            }
            Output::WriteSnapshot(snapshot) => {
                let position = snapshot.position;
                self.snapshots.insert(position, *snapshot);
                self.engines.get_mut(from).unwrap().handle(now, Input::SnapshotWritten { position, result: Ok(()) });
            }
            Output::Purge { below } => {
                self.purges.push(below);
                self.purged_below = self.purged_below.max(below);
            }
            Output::Life(LifeOutput::NeedSnapshot { covering }) => {
                if let Some(s) = self.snapshots.values().next_back().filter(|s| s.position >= covering) {
                    let reader = LogReader::from_snapshot(s.clone()).expect("a stored snapshot restores");
                    let position = reader.position() as usize;
                    let e = self.engines.get_mut(from).unwrap();
                    e.handle(now, Input::Life(Life::Restore(Box::new(reader))));
                    // The driver follows the log again from after the position the engine jumped to.
                    if e.reader().position() as usize == position {
                        self.cursor.insert(from.to_string(), position);
                    }
                }
            }
            Output::Dispatch(work) => {
                self.dispatched.push((from.to_string(), work.clone(), now));
                if self.hold_results {
                    return;
                }
                let state = self.truth.get(work.object.as_str()).copied().unwrap_or(State::Ok);
                let output = self.outputs.get(work.object.as_str()).cloned().unwrap_or_default();
                self.engines.get_mut(from).unwrap().handle(
                    now,
                    Input::CheckResult(CheckResult { check_id: work.check_id, object: work.object, state, output }),
                );
            }
        }
    }

    /// Advances time to `t`, firing timers and expiring keys in order.
    pub fn advance_to(&mut self, t: Time) {
        loop {
            let next_timer = self
                .engines
                .iter()
                .filter(|(id, _)| !self.paused.contains(id))
                .filter_map(|(_, e)| e.poll_timeout().map(|(t, _)| t))
                .min();
            let next_expiry = self.kv.values().map(|(_, exp)| *exp).min();
            let next = [next_timer, next_expiry].into_iter().flatten().min();
            match next {
                Some(n) if n <= t => {
                    self.now = self.now.max(n);
                    let expired: Vec<String> =
                        self.kv.iter().filter(|(_, (_, exp))| *exp <= self.now).map(|(k, _)| k.clone()).collect();
                    for k in expired {
                        self.kv.remove(&k);
                        self.kv_change(MemberChange::Down(MemberId::new(k).unwrap()));
                    }
                    let ids: Vec<String> = self.engines.keys().cloned().collect();
                    for id in ids {
                        if self.paused.contains(&id) {
                            continue;
                        }
                        let e = self.engines.get_mut(&id).unwrap();
                        if e.poll_timeout().is_some_and(|(d, _)| d <= self.now) {
                            e.handle_timeout(self.now);
                        }
                    }
                    self.run();
                }
                _ => break,
            }
        }
        self.now = t;
        self.run();
        self.check();
    }

    pub fn advance(&mut self, d: Duration) {
        self.advance_to(self.now + d);
    }

    pub fn check(&self) {
        for (id, e) in &self.engines {
            if let Err(err) = e.check_invariants() {
                panic!("engine {id}: {err}");
            }
        }
    }

    /// A reader of the whole log, as the ui or a replay would hold it.
    pub fn oracle(&self) -> LogReader {
        let mut r = LogReader::new();
        for (i, e) in self.log.iter().enumerate() {
            r.read(i as u64 + 1, e);
        }
        r
    }

    pub fn owner_of(&self, object: &str) -> Option<String> {
        self.oracle().owner(&oid(object)).map(|m| m.id.to_string())
    }
}
