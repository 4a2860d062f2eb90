//! The simulated world the shell sees, driving unchanged `jaque-core` engines: the membership KV (per-key TTL,
//! expiry reported late as a delete, every change at the next revision), the log (one total order,
//! compare-and-set epoch appends, unconditional event appends that may fail or land late), request/reply
//! (no responders, timeouts), the ingress queue group, check workers, and faults (crash, pause, partitions,
//! heartbeat loss, clogging, clean leave).
//!
//! Everything happens through one event queue ordered by (time, sequence). Randomness comes from sub-seeds:
//! the network, the faults, the workload, the simulated truth and each node draw from their own streams.
//! Invariants are checked as the run goes: the log ones by the [`Oracle`], the engines' own after every step,
//! agreement after every log delivery, one hop at every forward, accounting at every reply.

use crate::oracle::{member_hash, view_hash, Oracle};
use crate::params::{mix, stream, FaultKind, Params, Stream};
use jaque_core::ui::{submit_to, Submit};
use jaque_core::{
    hrw, CheckResult, Command, CommandId, CommandKind, Engine, EngineConfig, ForwardId, Input, LogEntry, MemberChange,
    MemberId, MemberObservation, MemberRef, MembershipOutput, ObjectDef, ObjectId, Outcome, Output, Probe, ReplyTo,
    State, Time,
};
use jaque_core::{Bucket, EpochRecord, Event};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// The category of a failure; each has its own exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Safety,
    Liveness,
    Panic,
}

/// A broken invariant: which, what exactly, and when.
#[derive(Clone, Debug)]
pub struct Violation {
    pub category: Category,
    pub invariant: String,
    pub message: String,
    pub at: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Faults on, workload on.
    Safety,
    /// Healed at `healed`: no new faults, no new commands; convergence is demanded.
    Liveness,
    Done,
}

/// One engine slot: a member id whose process may run, crash, pause, leave and come back.
pub struct Node {
    pub id: MemberId,
    /// The incarnation of the running process (or of the last one).
    pub inc: u64,
    pub engine: Option<Engine>,
    paused_until: Option<Time>,
    booted: bool,
    log_cursor: u64,
    log_sched: Time,
    member_cursor: u64,
    member_sched: Time,
    armed: Option<Time>,
    /// Command ids this incarnation received with hop 0 (the only ones it may forward).
    hop0: BTreeSet<CommandId>,
    last_epoch: u64,
    rng: ChaCha8Rng,
    hb_loss: u32,
    clog: u32,
    store_out_cut: u32,
    store_in_cut: u32,
    leave_started: Option<Time>,
    /// Scenarios: the log consumer of this node is held (a slow reader); released with a catch-up.
    log_held: bool,
    /// What reached this process while it was paused, in arrival order: handled when it resumes.
    held: Vec<Ev>,
    /// This host's clock minus the simulation's, in milliseconds.
    clock: i64,
    /// Scenarios: appends held in the client (a publish stuck on its way), landed when released.
    appends_held: Option<Vec<Event>>,
}

impl Node {
    pub fn is_running(&self) -> bool {
        self.engine.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused_until.is_some()
    }

    /// Running, booted and not leaving: a member that should be in the epoch record.
    pub fn is_serving(&self) -> bool {
        self.booted && self.engine.as_ref().is_some_and(|e| !e.is_leaving())
    }

    pub fn member(&self) -> MemberRef {
        MemberRef { id: self.id.clone(), incarnation: self.inc }
    }
}

#[derive(Clone, Debug)]
enum Waiter {
    Client(usize),
    Forward(usize),
}

#[derive(Clone, Debug)]
struct PendingReply {
    node: usize,
    inc: u64,
    waiter: Waiter,
    at: Time,
    cmd_id: CommandId,
}

#[derive(Clone, Debug)]
struct Fwd {
    origin: usize,
    inc: u64,
    id: ForwardId,
    done: bool,
}

/// How a client submitted a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A ui write on `jaque.work.cmd.ingress`: the queue group picks one engine.
    Ingress,
    /// A caller in the process of engine `n`.
    Engine(usize),
    /// A `-target ui` write: straight to the owner its (possibly one epoch old) view of the log names, as
    /// `jaque_core::ui::submit_to` says; through ingress when it names none or that engine has no responder.
    Ui,
}

/// A command a client submitted, and the one outcome it was told.
#[derive(Clone, Debug)]
pub struct Submission {
    pub cmd: Command,
    pub via: Via,
    pub at: Time,
    pub outcome: Option<Outcome>,
    /// Which engine took it (ingress pick or the local engine).
    pub engine: Option<usize>,
}

#[derive(Clone, Debug)]
struct KeyState {
    inc: u64,
    gen: u64,
    live: bool,
    last_rev: u64,
}

#[derive(Clone, Copy, Debug)]
enum Undo {
    StoreIn(usize),
    StoreOut(usize),
    Pair(usize, usize),
    HeartbeatLoss(usize),
    Clog(usize),
}

#[derive(Clone, Debug)]
enum Ev {
    Timer {
        node: usize,
        inc: u64,
        deadline: Time,
    },
    Boot {
        node: usize,
        inc: u64,
    },
    LogDeliver {
        node: usize,
        inc: u64,
        upto: u64,
    },
    MemberDeliver {
        node: usize,
        inc: u64,
        upto: u64,
    },
    HeartbeatLand {
        member: MemberRef,
        ttl_ms: u64,
    },
    HeartbeatDelete {
        member: MemberRef,
    },
    Expire {
        id: MemberId,
        gen: u64,
    },
    AppendLand {
        event: Event,
    },
    ProposeLand {
        node: usize,
        inc: u64,
        record: EpochRecord,
        after_seq: Option<u64>,
    },
    ProposeAnswer {
        node: usize,
        inc: u64,
        epoch: u64,
        won: bool,
    },
    AppendFailed {
        node: usize,
        inc: u64,
        event: Event,
    },
    CommandArrive {
        node: usize,
        inc: u64,
        reply: u64,
        waiter: Waiter,
        cmd: Command,
    },
    ForwardAnswer {
        fwd: usize,
        result: Result<Outcome, String>,
    },
    ForwardTimeout {
        fwd: usize,
    },
    CheckDone {
        node: usize,
        inc: u64,
        result: CheckResult,
    },
    ClientAnswer {
        sub: usize,
        outcome: Outcome,
    },
    ClientTimeout {
        sub: usize,
    },
    Submit,
    Retry {
        sub: usize,
    },
    FaultTick,
    FaultEnd {
        gen: u64,
        undo: Undo,
    },
    ClogStart {
        gen: u64,
        node: usize,
    },
    Resume {
        node: usize,
        inc: u64,
    },
    /// `healing`: issued by the heal; other restarts scheduled by faults are dropped once healed.
    Restart {
        node: usize,
        healing: bool,
    },
    ExitIfIdle {
        node: usize,
        inc: u64,
    },
    Heal,
    LivenessCheck,
}

impl Ev {
    /// The engine incarnation an event is for, if any: it waits while that engine is paused.
    fn target(&self) -> Option<(usize, u64)> {
        match self {
            Ev::Timer { node, inc, .. }
            | Ev::Boot { node, inc }
            | Ev::LogDeliver { node, inc, .. }
            | Ev::MemberDeliver { node, inc, .. }
            | Ev::ProposeAnswer { node, inc, .. }
            | Ev::AppendFailed { node, inc, .. }
            | Ev::CommandArrive { node, inc, .. }
            | Ev::CheckDone { node, inc, .. } => Some((*node, *inc)),
            _ => None,
        }
    }

    fn code(&self) -> u64 {
        match self {
            Ev::Timer { .. } => 1,
            Ev::Boot { .. } => 2,
            Ev::LogDeliver { .. } => 3,
            Ev::MemberDeliver { .. } => 4,
            Ev::HeartbeatLand { .. } => 5,
            Ev::HeartbeatDelete { .. } => 6,
            Ev::Expire { .. } => 7,
            Ev::AppendLand { .. } => 8,
            Ev::ProposeLand { .. } => 9,
            Ev::ProposeAnswer { .. } => 10,
            Ev::AppendFailed { .. } => 11,
            Ev::CommandArrive { .. } => 12,
            Ev::ForwardAnswer { .. } => 13,
            Ev::ForwardTimeout { .. } => 14,
            Ev::CheckDone { .. } => 15,
            Ev::ClientAnswer { .. } => 16,
            Ev::ClientTimeout { .. } => 17,
            Ev::Submit => 18,
            Ev::Retry { .. } => 19,
            Ev::FaultTick => 20,
            Ev::FaultEnd { .. } => 21,
            Ev::Resume { .. } => 22,
            Ev::Restart { .. } => 23,
            Ev::ExitIfIdle { .. } => 24,
            Ev::Heal => 25,
            Ev::LivenessCheck => 26,
            Ev::ClogStart { .. } => 27,
        }
    }
}

/// Statistics of a run, for reports and the benchmark.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub events: u64,
    pub engine_steps: u64,
    pub log_entries: u64,
    pub epochs: u64,
    pub stale: u64,
    pub commands: u64,
    pub applied: u64,
    pub not_owned: u64,
    pub unavailable: u64,
    pub faults: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub leaves: u64,
    pub forwards: u64,
    pub checks: u64,
    /// From the heal to the (last) convergence of the liveness phase, and the budget it had.
    pub converged_after_ms: u64,
    pub converge_budget_ms: u64,
    /// The largest share of its check budget an object's first check after convergence used.
    pub check_budget_used_pct: u64,
}

pub struct Sim {
    pub params: Params,
    now: Time,
    seq: u64,
    queue: BTreeMap<(Time, u64), Ev>,
    pub nodes: Vec<Node>,
    slot_of: BTreeMap<MemberId, usize>,

    // The membership KV (one bucket: engines).
    revs: Vec<(MemberId, MemberChange)>,
    keys: BTreeMap<MemberId, KeyState>,
    /// `live_hash[rev]`: the live set's hash after revision `rev` (index 0: empty).
    live_hash: Vec<u64>,

    // The log.
    log: Vec<LogEntry>,
    last_epoch_seq: Option<u64>,
    pub oracle: Oracle,

    // Request/reply and clients.
    next_reply: u64,
    replies: BTreeMap<u64, PendingReply>,
    forwards: Vec<Fwd>,
    pub subs: Vec<Submission>,
    next_cmd: u64,

    // Checks: the last dispatch and the last result delivered, per object.
    /// Indexed by object number (`o<i>`).
    dispatched: Vec<Option<(usize, u64, Time)>>,
    checked: Vec<Option<(usize, u64, Time)>>,
    /// The first check result per object since the liveness phase converged.
    checked_since: BTreeMap<(ObjectId, usize, u64), Time>,
    /// When an accepted command event last changed each object (its check budget starts no earlier).
    touched: BTreeMap<ObjectId, Time>,
    touched_since_end: bool,
    truth_override: BTreeMap<ObjectId, State>,
    truth_seed: u64,
    pause_on_dispatch: Option<(usize, ObjectId, u64)>,

    pair_cut: BTreeMap<(usize, usize), u32>,
    net: ChaCha8Rng,
    faults: ChaCha8Rng,
    work: ChaCha8Rng,
    ui: ChaCha8Rng,
    fault_gen: u64,
    objects: Vec<(ObjectId, ObjectDef)>,
    bootstrapped: usize,

    pub phase: Phase,
    healed: Option<Time>,
    converged: Option<Time>,
    converged_epoch: u64,
    drain_allowance_ms: u64,
    end: Option<Time>,
    pub violation: Option<Violation>,
    pub stats: Stats,
    hash: u64,
    same_time: (Time, u64),
    trace: Option<(usize, VecDeque<String>)>,
    agreement_checks: u64,
}

const TICK: u64 = 100;

impl Sim {
    pub fn new(params: Params) -> Sim {
        let seed = params.seed;
        let nodes: Vec<Node> = (0..params.engines)
            .map(|i| Node {
                id: MemberId::new(format!("e{}", i + 1)).expect("valid member id"),
                inc: 0,
                engine: None,
                paused_until: None,
                booted: false,
                log_cursor: 0,
                log_sched: Time::ZERO,
                member_cursor: 0,
                member_sched: Time::ZERO,
                armed: None,
                hop0: BTreeSet::new(),
                last_epoch: 0,
                rng: stream(seed, Stream::Node, i as u64),
                hb_loss: 0,
                clog: 0,
                store_out_cut: 0,
                store_in_cut: 0,
                leave_started: None,
                log_held: false,
                held: Vec::new(),
                appends_held: None,
                clock: match params.clock_skew_max_ms as i64 {
                    0 => 0,
                    m => stream(seed, Stream::Clock, i as u64).random_range(-m..=m),
                },
            })
            .collect();
        let slot_of = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
        let mut work = stream(seed, Stream::Workload, 0);
        let objects = (0..params.objects)
            .map(|i| {
                let id = ObjectId::new(format!("o{i}")).expect("valid object id");
                (id, draw_def(&mut work, &params, i))
            })
            .collect();
        let truth_seed = mix(seed ^ 0x0074_7275_7468);
        Sim {
            now: Time::ZERO,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            slot_of,
            revs: Vec::new(),
            keys: BTreeMap::new(),
            live_hash: vec![0],
            log: Vec::new(),
            last_epoch_seq: None,
            oracle: Oracle::new(),
            next_reply: 1,
            replies: BTreeMap::new(),
            forwards: Vec::new(),
            subs: Vec::new(),
            next_cmd: 0,
            dispatched: vec![None; params.objects],
            checked: vec![None; params.objects],
            checked_since: BTreeMap::new(),
            touched: BTreeMap::new(),
            touched_since_end: false,
            truth_override: BTreeMap::new(),
            truth_seed,
            pause_on_dispatch: None,
            pair_cut: BTreeMap::new(),
            net: stream(seed, Stream::Network, 0),
            ui: stream(seed, Stream::Ui, 0),
            faults: stream(seed, Stream::Faults, 0),
            work,
            fault_gen: 0,
            objects,
            bootstrapped: 0,
            phase: Phase::Safety,
            healed: None,
            converged: None,
            converged_epoch: 0,
            drain_allowance_ms: 0,
            end: None,
            violation: None,
            stats: Stats::default(),
            hash: mix(seed),
            same_time: (Time::ZERO, 0),
            trace: None,
            agreement_checks: 0,
            params,
        }
    }

    /// Keep the last `lines` trace lines (costly: only for replays of failures and for scenarios).
    pub fn with_trace(mut self, lines: usize) -> Sim {
        self.trace = Some((lines, VecDeque::new()));
        self
    }

    pub fn trace_lines(&self) -> Vec<String> {
        self.trace.as_ref().map(|(_, t)| t.iter().cloned().collect()).unwrap_or_default()
    }

    /// A hash of everything that happened: two runs of one seed must agree on it.
    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    pub fn now(&self) -> Time {
        self.now
    }

    pub fn log(&self) -> &[LogEntry] {
        &self.log
    }

    pub fn engine(&self, n: usize) -> &Engine {
        self.nodes[n].engine.as_ref().expect("engine is running")
    }

    pub fn object_ids(&self) -> Vec<ObjectId> {
        self.objects.iter().map(|(id, _)| id.clone()).collect()
    }

    pub fn object_def(&self, i: usize) -> ObjectDef {
        self.objects[i].1.clone()
    }

    /// When the object's last check result reached its engine, and which engine (slot, incarnation).
    pub fn last_checked(&self, id: &ObjectId) -> Option<(usize, u64, Time)> {
        self.checked.get(object_index(id)?).copied().flatten()
    }

    pub fn last_dispatched(&self, id: &ObjectId) -> Option<(usize, u64, Time)> {
        self.dispatched.get(object_index(id)?).copied().flatten()
    }

    /// Forces the simulated truth of an object (what every check of it returns from now on).
    pub fn set_truth(&mut self, id: &ObjectId, state: State) {
        self.truth_override.insert(id.clone(), state);
    }

    // ---- the swarm ----

    /// Schedules a whole swarm run: engines start, the workload and faults run for the safety phase, then
    /// everything heals for the liveness phase.
    pub fn start_swarm(&mut self) {
        for n in 0..self.nodes.len() {
            let at = self.nodes[n].rng.random_range(0..=2_000);
            self.push(Time(at), Ev::Restart { node: n, healing: false });
        }
        if !self.objects.is_empty() || self.params.command_every_ms > 0 {
            self.push(Time(500), Ev::Submit);
        }
        if !self.params.faults.is_empty() {
            let at = self.exp(self.params.fault_every_ms, Rng3::Faults) + 2_000;
            self.push(Time(at), Ev::FaultTick);
        }
        self.push(Time(self.params.safety_ms.max(1)), Ev::Heal);
    }

    /// Runs until the run ends or an invariant breaks.
    pub fn run(&mut self) -> Result<(), Violation> {
        while self.violation.is_none() && self.phase != Phase::Done {
            if !self.step_event() {
                break;
            }
        }
        match self.violation.clone() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }

    /// Runs scheduled events up to time `t` (scenarios).
    pub fn run_until(&mut self, t: Time) {
        while self.violation.is_none() {
            match self.queue.first_key_value() {
                Some((&(at, _), _)) if at <= t => {
                    self.step_event();
                }
                _ => break,
            }
        }
        if self.violation.is_none() {
            self.now = self.now.max(t);
        }
    }

    pub fn run_for(&mut self, ms: u64) {
        self.run_until(self.now + Duration::from_millis(ms));
    }

    /// Runs in steps of 10 ms until `done` holds or `max_ms` pass; returns whether it held.
    pub fn run_until_cond(&mut self, max_ms: u64, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + Duration::from_millis(max_ms);
        while self.now < end && self.violation.is_none() {
            if done(self) {
                return true;
            }
            self.run_for(10);
        }
        done(self)
    }

    fn push(&mut self, at: Time, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn after(&mut self, ms: u64, ev: Ev) {
        self.push(self.now + Duration::from_millis(ms), ev);
    }

    fn h(&mut self, x: u64) {
        self.hash = mix(self.hash ^ x);
    }

    fn tr(&mut self, line: impl FnOnce() -> String) {
        if let Some((cap, t)) = &mut self.trace {
            if t.len() == *cap {
                t.pop_front();
            }
            let now = self.now;
            t.push_back(format!("{now} {}", line()));
        }
    }

    fn fail(&mut self, category: Category, invariant: &str, message: String) {
        if self.violation.is_none() {
            self.tr(|| format!("VIOLATION {invariant}: {message}"));
            self.violation = Some(Violation { category, invariant: invariant.into(), message, at: self.now });
        }
    }

    fn step_event(&mut self) -> bool {
        let Some(((at, _), ev)) = self.queue.pop_first() else { return false };
        self.now = at;
        if self.same_time.0 == at {
            self.same_time.1 += 1;
            if self.same_time.1 > 200_000 {
                self.fail(Category::Liveness, "livelock", "more than 200000 events at one instant".into());
                return false;
            }
        } else {
            self.same_time = (at, 0);
        }
        self.stats.events += 1;
        if self.stats.events > 100_000_000 {
            self.fail(Category::Liveness, "runaway", "more than 100 million events in one seed".into());
            return false;
        }
        self.h(at.0);
        self.h(ev.code());
        if let Some((n, inc)) = ev.target() {
            if self.nodes[n].inc == inc && self.nodes[n].engine.is_some() && self.nodes[n].is_paused() {
                // A paused process handles nothing; what reaches it waits in its buffers. Its timers are
                // re-armed when it resumes.
                if !matches!(ev, Ev::Timer { .. }) {
                    self.nodes[n].held.push(ev);
                }
                return true;
            }
        }
        self.dispatch(ev);
        true
    }

    /// Node `n`'s clock reading at simulation time `t`.
    fn local(&self, n: usize, t: Time) -> Time {
        Time((t.0 as i64).saturating_add(self.nodes[n].clock).max(0) as u64)
    }

    /// The simulation time at which node `n`'s clock reads `t`.
    fn global(&self, n: usize, t: Time) -> Time {
        Time((t.0 as i64).saturating_sub(self.nodes[n].clock).max(0) as u64)
    }

    fn alive(&self, n: usize, inc: u64) -> bool {
        self.nodes[n].inc == inc && self.nodes[n].engine.is_some()
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Timer { node, inc, deadline } => {
                if self.alive(node, inc) && self.nodes[node].armed == Some(deadline) {
                    self.nodes[node].armed = None;
                    self.step(node, None);
                }
            }
            Ev::Boot { node, inc } => {
                if self.alive(node, inc) {
                    self.boot(node);
                }
            }
            Ev::LogDeliver { node, inc, upto } => {
                if self.alive(node, inc) && self.nodes[node].booted && self.can_recv(node) && !self.nodes[node].log_held
                {
                    self.deliver_log(node, upto);
                }
            }
            Ev::MemberDeliver { node, inc, upto } => {
                if self.alive(node, inc) && self.nodes[node].booted && self.can_recv(node) {
                    self.deliver_members(node, upto);
                }
            }
            Ev::HeartbeatLand { member, ttl_ms } => self.kv_put(member, ttl_ms),
            Ev::HeartbeatDelete { member } => self.kv_delete(&member.id),
            Ev::Expire { id, gen } => {
                if self.keys.get(&id).is_some_and(|k| k.gen == gen && k.live) {
                    self.tr(|| format!("store: key {id} expired"));
                    self.kv_delete(&id);
                }
            }
            Ev::AppendLand { event } => self.append(LogEntry::Event(event)),
            Ev::ProposeLand { node, inc, record, after_seq } => {
                let won = self.last_epoch_seq == after_seq;
                self.tr(|| {
                    format!(
                        "store: proposal of epoch {} from e{} after {after_seq:?}: won={won}",
                        record.epoch,
                        node + 1
                    )
                });
                let epoch = record.epoch;
                if won {
                    self.append(LogEntry::Epoch(record));
                }
                let lost = self.chance(self.params.propose_answer_loss);
                if !lost && self.can_recv(node) {
                    let d = self.delay(node);
                    self.after(d, Ev::ProposeAnswer { node, inc, epoch, won });
                }
            }
            Ev::ProposeAnswer { node, inc, epoch, won } => {
                if self.alive(node, inc) {
                    self.step(node, Some(Input::ProposeResult { epoch, won }));
                }
            }
            Ev::AppendFailed { node, inc, event } => {
                if self.alive(node, inc) {
                    let reason = "publish timed out".to_string();
                    self.step(node, Some(Input::AppendFailed { event, reason }));
                }
            }
            Ev::CommandArrive { node, inc, reply, waiter, cmd } => {
                if !self.alive(node, inc) {
                    return;
                }
                if cmd.hop > 1 {
                    self.fail(
                        Category::Safety,
                        "3 one hop",
                        format!("command {} arrived with hop {}", cmd.id, cmd.hop),
                    );
                    return;
                }
                if cmd.hop == 0 {
                    self.nodes[node].hop0.insert(cmd.id.clone());
                }
                let cmd_id = cmd.id.clone();
                self.replies.insert(reply, PendingReply { node, inc, waiter, at: self.now, cmd_id });
                self.step(node, Some(Input::Command { reply: ReplyTo(reply), cmd }));
            }
            Ev::ForwardAnswer { fwd, result } => self.forward_result(fwd, result),
            Ev::ForwardTimeout { fwd } => self.forward_result(fwd, Err("timeout".into())),
            Ev::CheckDone { node, inc, result } => {
                if self.alive(node, inc) && self.can_recv(node) {
                    if let Some(c) = object_index(&result.object).and_then(|i| self.checked.get_mut(i)) {
                        *c = Some((node, inc, self.now));
                    }
                    if self.converged.is_some() {
                        self.checked_since.entry((result.object.clone(), node, inc)).or_insert(self.now);
                    }
                    self.step(node, Some(Input::CheckResult(result)));
                }
            }
            Ev::ClientAnswer { sub, outcome } => self.client_outcome(sub, outcome),
            Ev::ClientTimeout { sub } => {
                self.client_outcome(sub, Outcome::Unavailable { reason: "timeout".into() });
            }
            Ev::Submit => self.workload_tick(),
            Ev::Retry { sub } => {
                if self.phase == Phase::Safety {
                    let cmd = self.subs[sub].cmd.clone();
                    let via = self.pick_via();
                    self.submit(cmd, via);
                }
            }
            Ev::FaultTick => self.fault_tick(),
            Ev::ClogStart { gen, node } => {
                if gen == self.fault_gen {
                    self.nodes[node].clog += 1;
                }
            }
            Ev::FaultEnd { gen, undo } => {
                if gen == self.fault_gen {
                    self.undo(undo);
                }
            }
            Ev::Resume { node, inc } => {
                if self.alive(node, inc) && self.nodes[node].paused_until.is_some_and(|t| t <= self.now) {
                    self.resume(node);
                }
            }
            Ev::Restart { node, healing } => {
                if self.phase != Phase::Safety && !healing {
                    // The heal decided who comes back.
                } else if self.nodes[node].engine.is_none() {
                    self.restart(node);
                } else if self.nodes[node].leave_started.is_some() {
                    // Still draining after a leave: come back once it has exited.
                    self.after(1_000, Ev::Restart { node, healing });
                }
            }
            Ev::ExitIfIdle { node, inc } => {
                if !self.alive(node, inc) {
                    return;
                }
                let idle = self.nodes[node].engine.as_ref().is_some_and(|e| e.is_idle());
                let started = self.nodes[node].leave_started.unwrap_or(self.now);
                let limit = self.drain_limit_ms();
                if idle || self.now.saturating_since(started).as_millis() as u64 >= limit {
                    self.tr(|| format!("e{} exits after leaving (idle={idle})", node + 1));
                    self.stop(node);
                } else {
                    self.after(TICK, Ev::ExitIfIdle { node, inc });
                }
            }
            Ev::Heal => self.heal(),
            Ev::LivenessCheck => self.liveness_check(),
        }
    }

    // ---- engines ----

    fn config(&self, n: usize) -> EngineConfig {
        let mut cfg = EngineConfig::new(self.nodes[n].member(), Duration::from_millis(self.params.ttl_ms));
        cfg.expiry_lag = Duration::from_millis(self.params.expiry_lag_max_ms);
        cfg
    }

    /// Starts (or restarts) the process in slot `n` as a new incarnation.
    pub fn restart(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        assert!(node.engine.is_none(), "restart of a running engine");
        node.inc += 1;
        node.booted = false;
        node.log_cursor = 0;
        node.member_cursor = 0;
        node.log_sched = self.now;
        node.member_sched = self.now;
        node.armed = None;
        node.paused_until = None;
        node.hop0.clear();
        node.last_epoch = 0;
        node.leave_started = None;
        let cfg = self.config(n);
        self.nodes[n].engine = Some(Engine::new(cfg));
        let inc = self.nodes[n].inc;
        self.tr(|| format!("e{} starts as incarnation {inc}", n + 1));
        self.step(n, Some(Input::Start));
        let d = self.nodes[n].rng.random_range(0..=self.params.boot_delay_max_ms);
        self.after(d, Ev::Boot { node: n, inc });
    }

    /// The process dies: state lost, its key stays until the ttl.
    pub fn crash(&mut self, n: usize) {
        if self.nodes[n].engine.is_some() {
            self.stats.crashes += 1;
            self.tr(|| format!("e{} crashes", n + 1));
            self.stop(n);
        }
    }

    fn stop(&mut self, n: usize) {
        let inc = self.nodes[n].inc;
        let node = &mut self.nodes[n];
        node.engine = None;
        node.booted = false;
        node.paused_until = None;
        node.armed = None;
        node.leave_started = None;
        node.hop0.clear();
        node.held.clear();
        // Whoever waited on this process learns by timeout; nothing will answer.
        self.replies.retain(|_, p| !(p.node == n && p.inc == inc));
        for f in &mut self.forwards {
            if f.origin == n && f.inc == inc {
                f.done = true;
            }
        }
    }

    /// A clean leave (SIGTERM): the engine deletes its key and exits once nothing is in flight.
    pub fn leave(&mut self, n: usize) {
        if self.nodes[n].engine.is_none() || self.nodes[n].leave_started.is_some() || self.nodes[n].is_paused() {
            return;
        }
        self.stats.leaves += 1;
        self.nodes[n].leave_started = Some(self.now);
        self.tr(|| format!("e{} leaves", n + 1));
        self.step(n, Some(Input::Leave));
        let inc = self.nodes[n].inc;
        self.after(TICK, Ev::ExitIfIdle { node: n, inc });
    }

    pub fn pause(&mut self, n: usize, ms: u64) {
        if self.nodes[n].engine.is_none() || self.nodes[n].is_paused() {
            return;
        }
        self.stats.pauses += 1;
        let until = self.now + Duration::from_millis(ms);
        self.nodes[n].paused_until = Some(until);
        self.tr(|| format!("e{} pauses until {until}", n + 1));
        let inc = self.nodes[n].inc;
        self.push(until, Ev::Resume { node: n, inc });
    }

    fn resume(&mut self, n: usize) {
        self.nodes[n].paused_until = None;
        self.tr(|| format!("e{} resumes", n + 1));
        // What waits in its buffers is handled first, then the timers that expired meanwhile.
        for ev in std::mem::take(&mut self.nodes[n].held) {
            self.push(self.now, ev);
        }
        if let Some(t) = self.nodes[n].armed {
            let inc = self.nodes[n].inc;
            let at = self.global(n, t);
            self.push(at, Ev::Timer { node: n, inc, deadline: t });
        }
    }

    fn boot(&mut self, n: usize) {
        if !self.can_recv(n) {
            let inc = self.nodes[n].inc;
            self.after(500, Ev::Boot { node: n, inc });
            return;
        }
        // The watcher's snapshot: the last entry of every key, in revision order.
        let mut snapshot: Vec<(u64, MemberId)> = self.keys.iter().map(|(id, k)| (k.last_rev, id.clone())).collect();
        snapshot.sort();
        for (rev, _) in snapshot {
            let change = self.revs[(rev - 1) as usize].1.clone();
            let obs = MemberObservation { bucket: Bucket::Engine, rev, change };
            self.step(n, Some(Input::Member(obs)));
        }
        self.nodes[n].member_cursor = self.revs.len() as u64;
        let end = self.log.len() as u64;
        self.nodes[n].booted = true;
        self.deliver_log(n, end);
        if self.violation.is_some() || self.nodes[n].engine.is_none() {
            return;
        }
        self.tr(|| format!("e{} caught up at log {end}", n + 1));
        self.step(n, Some(Input::CaughtUp));
    }

    /// One step of engine `n`: an input (or its timer), then every output carried out, invariants checked and
    /// the timer re-armed.
    fn step(&mut self, n: usize, input: Option<Input>) {
        if self.violation.is_some() {
            return;
        }
        let now = self.local(n, self.now);
        self.stats.engine_steps += 1;
        if self.trace.is_some() {
            let line = match &input {
                Some(i) => format!("e{} <- {}", n + 1, brief_input(i)),
                None => format!("e{} <- timeout", n + 1),
            };
            self.tr(|| line);
        }
        let engine = self.nodes[n].engine.as_mut().expect("step of a running engine");
        match input {
            Some(i) => engine.handle(now, i),
            None => engine.handle_timeout(now),
        }
        let outputs: Vec<Output> = std::iter::from_fn(|| engine.poll_output()).collect();
        // The engine's self-check costs O(objects): with many objects it is sampled (VOPR checks the
        // expensive ones on a sample of ticks too).
        let objects = engine.reader().objects().len() as u64;
        let sample = if objects <= 200 { 1 } else { objects };
        let check = self.stats.engine_steps.is_multiple_of(sample);
        if let Err(e) = if check { engine.check_invariants() } else { Ok(()) } {
            let msg = format!("e{}: {e}", n + 1);
            self.fail(Category::Safety, "engine self-check", msg);
            return;
        }
        let epoch = engine.epoch();
        if epoch < self.nodes[n].last_epoch {
            let msg = format!("e{} went from epoch {} back to {epoch}", n + 1, self.nodes[n].last_epoch);
            self.fail(Category::Safety, "5 epochs only grow", msg);
            return;
        }
        self.nodes[n].last_epoch = epoch;
        self.h(n as u64 ^ (outputs.len() as u64) << 8);
        for out in outputs {
            self.carry_out(n, out);
        }
        self.rearm(n);
    }

    fn rearm(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        let Some(engine) = &node.engine else { return };
        let t = engine.poll_timeout().map(|(t, _)| t);
        if t != node.armed {
            node.armed = t;
            if let Some(t) = t {
                let inc = node.inc;
                let at = self.global(n, t);
                self.push(at, Ev::Timer { node: n, inc, deadline: t });
            }
        }
    }

    fn carry_out(&mut self, n: usize, out: Output) {
        if self.trace.is_some() {
            let line = format!("e{} -> {}", n + 1, brief_output(&out));
            self.tr(|| line);
        }
        let inc = self.nodes[n].inc;
        match out {
            Output::Membership(MembershipOutput::PutHeartbeat { member, ttl, .. }) => {
                let lost = self.nodes[n].hb_loss > 0 && self.net.random_bool(self.params.heartbeat_loss);
                if self.can_send(n) && !lost {
                    let d = self.delay(n);
                    let ttl_ms = ttl.as_millis() as u64;
                    self.after(d, Ev::HeartbeatLand { member, ttl_ms });
                }
            }
            Output::Membership(MembershipOutput::DeleteHeartbeat { member, .. }) => {
                if self.can_send(n) {
                    let d = self.delay(n);
                    self.after(d, Ev::HeartbeatDelete { member });
                }
            }
            Output::ProposeEpoch { record, after_seq } => {
                if self.can_send(n) {
                    let d = self.delay(n);
                    self.after(d, Ev::ProposeLand { node: n, inc, record, after_seq });
                }
            }
            Output::Append(event) => {
                if let Some(held) = &mut self.nodes[n].appends_held {
                    held.push(event);
                    return;
                }
                let timeout = self.params.append_timeout_ms;
                if !self.can_send(n) {
                    self.after(timeout, Ev::AppendFailed { node: n, inc, event });
                    return;
                }
                let d = self.delay(n);
                let roll: f64 = if self.phase == Phase::Safety { self.net.random() } else { 1.0 };
                if roll < self.params.append_ack_loss {
                    self.after(d, Ev::AppendLand { event: event.clone() });
                    self.after(timeout, Ev::AppendFailed { node: n, inc, event });
                } else if roll < self.params.append_ack_loss + self.params.append_late {
                    let late = timeout + self.net.random_range(0..=2_000);
                    self.after(late, Ev::AppendLand { event: event.clone() });
                    self.after(timeout, Ev::AppendFailed { node: n, inc, event });
                } else {
                    self.after(d, Ev::AppendLand { event });
                }
            }
            Output::Forward { id, to, cmd } => self.forward(n, id, to, cmd),
            Output::Reply { to, outcome } => self.reply(n, to.0, outcome),
            Output::Dispatch(work) => {
                self.stats.checks += 1;
                if let Some(d) = object_index(&work.object).and_then(|i| self.dispatched.get_mut(i)) {
                    *d = Some((n, inc, self.now));
                }
                if self.pause_on_dispatch.as_ref().is_some_and(|(m, o, _)| *m == n && *o == work.object) {
                    let (_, _, ms) = self.pause_on_dispatch.take().expect("checked");
                    self.pause(n, ms);
                }
                if !self.can_send(n) || self.chance(self.params.check_loss) {
                    return;
                }
                let latency = self.nodes[n].rng.random_range(1..=work.timeout_ms.max(1)) + self.delay(n);
                let at = self.now + Duration::from_millis(latency / 2);
                let state = self.truth(&work.object, at);
                let result = CheckResult { check_id: work.check_id, object: work.object, state, output: String::new() };
                self.after(latency, Ev::CheckDone { node: n, inc, result });
            }
        }
    }

    fn forward(&mut self, n: usize, id: ForwardId, to: MemberRef, mut cmd: Command) {
        self.stats.forwards += 1;
        if cmd.hop != 1 {
            self.fail(Category::Safety, "3 one hop", format!("e{} forwards {} with hop {}", n + 1, cmd.id, cmd.hop));
            return;
        }
        if !self.nodes[n].hop0.contains(&cmd.id) {
            let msg = format!("e{} forwards {} which reached it only as a forward (a second hop)", n + 1, cmd.id);
            self.fail(Category::Safety, "3 one hop", msg);
            return;
        }
        let fwd = self.forwards.len();
        self.forwards.push(Fwd { origin: n, inc: self.nodes[n].inc, id, done: false });
        self.after(self.params.forward_timeout_ms, Ev::ForwardTimeout { fwd });
        if !self.can_send(n) {
            return;
        }
        let Some(&t) = self.slot_of.get(&to.id) else {
            self.after(1, Ev::ForwardAnswer { fwd, result: Err("no responders".into()) });
            return;
        };
        if self.nodes[t].engine.is_none() {
            let d = 1 + self.delay(n);
            self.after(d, Ev::ForwardAnswer { fwd, result: Err("no responders".into()) });
            return;
        }
        if self.link(n, t) {
            let reply = self.next_reply;
            self.next_reply += 1;
            let d = self.delay(n) + self.delay(t);
            let inc = self.nodes[t].inc;
            cmd.hop = 1;
            self.after(d, Ev::CommandArrive { node: t, inc, reply, waiter: Waiter::Forward(fwd), cmd });
        }
    }

    fn forward_result(&mut self, fwd: usize, result: Result<Outcome, String>) {
        let f = self.forwards[fwd].clone();
        if f.done {
            return;
        }
        if !self.alive(f.origin, f.inc) {
            self.forwards[fwd].done = true;
            return;
        }
        if self.nodes[f.origin].is_paused() {
            let ev = match result {
                Err(r) if r == "timeout" => Ev::ForwardTimeout { fwd },
                result => Ev::ForwardAnswer { fwd, result },
            };
            self.nodes[f.origin].held.push(ev);
            return;
        }
        self.forwards[fwd].done = true;
        self.step(f.origin, Some(Input::ForwardResult { id: f.id, result }));
    }

    fn reply(&mut self, n: usize, to: u64, outcome: Outcome) {
        let Some(p) = self.replies.remove(&to) else {
            let msg =
                format!("e{} answered caller {to} which it was not asked by or answered before: {outcome:?}", n + 1);
            self.fail(Category::Safety, "4 accounting", msg);
            return;
        };
        if p.node != n || p.inc != self.nodes[n].inc {
            self.fail(Category::Safety, "4 accounting", format!("e{} answered a caller of e{}", n + 1, p.node + 1));
            return;
        }
        if let Outcome::Applied { command_id, .. } = &outcome {
            if *command_id != p.cmd_id || self.oracle.reader.applied(command_id) != Some(&outcome) {
                let msg = format!(
                    "e{} reports {outcome:?} for {} but the log says {:?}",
                    n + 1,
                    p.cmd_id,
                    self.oracle.reader.applied(command_id)
                );
                self.fail(Category::Safety, "4 applied means accepted", msg);
                return;
            }
        }
        match p.waiter {
            Waiter::Client(sub) => match self.subs[sub].via {
                Via::Engine(_) => self.client_outcome(sub, outcome),
                Via::Ingress | Via::Ui => {
                    if self.can_send(n) {
                        let d = self.delay(n);
                        self.after(d, Ev::ClientAnswer { sub, outcome });
                    }
                }
            },
            Waiter::Forward(fwd) => {
                let origin = self.forwards[fwd].origin;
                if self.link(n, origin) {
                    let d = self.delay(n) + self.delay(origin);
                    self.after(d, Ev::ForwardAnswer { fwd, result: Ok(outcome) });
                }
            }
        }
    }

    // ---- the log ----

    fn append(&mut self, entry: LogEntry) {
        let seq = self.log.len() as u64 + 1;
        self.h(seq);
        if self.trace.is_some() {
            let line = format!("log {seq}: {}", brief_entry(&entry));
            self.tr(|| line);
        }
        let live_hash = &self.live_hash;
        if let Err(v) = self.oracle.read(seq, &entry, |rev| live_hash.get(rev as usize).copied()) {
            self.fail(Category::Safety, v.invariant, v.message);
            return;
        }
        self.stats.log_entries += 1;
        match &entry {
            LogEntry::Epoch(_) => {
                self.stats.epochs += 1;
                self.last_epoch_seq = Some(seq);
            }
            LogEntry::Event(ev) => {
                if ev.command_id.is_some() && self.oracle.reader.object(&ev.object).is_some_and(|v| v.last_seq == seq) {
                    self.touched.insert(ev.object.clone(), self.now);
                    self.touched_since_end = true;
                }
            }
        }
        self.log.push(entry);
        for n in 0..self.nodes.len() {
            if self.nodes[n].booted && self.nodes[n].engine.is_some() {
                let lag = self.nodes[n].rng.random_range(0..=self.params.log_lag_max_ms) + self.delay(n);
                let at = (self.now + Duration::from_millis(lag)).max(self.nodes[n].log_sched);
                self.nodes[n].log_sched = at;
                let inc = self.nodes[n].inc;
                self.push(at, Ev::LogDeliver { node: n, inc, upto: seq });
            }
        }
    }

    fn deliver_log(&mut self, n: usize, upto: u64) {
        let upto = upto.min(self.log.len() as u64);
        while self.nodes[n].log_cursor < upto && self.violation.is_none() && self.nodes[n].engine.is_some() {
            let seq = self.nodes[n].log_cursor + 1;
            self.nodes[n].log_cursor = seq;
            let entry = self.log[(seq - 1) as usize].clone();
            self.step(n, Some(Input::Log { seq, entry }));
            self.check_agreement(n, seq);
        }
        let cur = self.nodes[n].log_cursor;
        if cur > 0 && self.nodes[n].engine.is_some() && self.chance(self.params.duplicate) {
            let entry = self.log[(cur - 1) as usize].clone();
            self.step(n, Some(Input::Log { seq: cur, entry }));
            self.check_agreement(n, cur);
        }
    }

    /// Invariant 2: a reader that has read up to `seq` holds what the oracle held there.
    fn check_agreement(&mut self, n: usize, seq: u64) {
        if self.violation.is_some() {
            return;
        }
        let Some(engine) = &self.nodes[n].engine else { return };
        let r = engine.reader();
        let Some(s) = self.oracle.summary(seq) else { return };
        let view = match &self.log[(seq - 1) as usize] {
            LogEntry::Event(ev) if s.view != 0 => r.object(&ev.object).map_or(0, view_hash),
            _ => 0,
        };
        // The applied-command record (at most once across owners rests on it): a command id the oracle saw
        // applied at or before this position is applied here with the same outcome, a later one not yet.
        let applied = match &self.log[(seq - 1) as usize] {
            LogEntry::Event(Event { command_id: Some(id), .. }) => {
                let want = self
                    .oracle
                    .reader
                    .applied(id)
                    .filter(|o| matches!(o, Outcome::Applied { seq: at, .. } if *at <= seq));
                r.applied(id) == want
            }
            _ => true,
        };
        let mine = (r.position(), r.counters.stale_epoch_total, r.epoch(), r.objects().len(), view, applied);
        let want = (seq, s.stale_total, s.epoch, s.objects, s.view, true);
        if mine != want {
            let msg = format!(
                "e{} at log {seq} holds (position, stale, epoch, objects, view, applied ok)={mine:?}, the oracle {want:?}",
                n + 1
            );
            self.fail(Category::Safety, "2 agreement", msg);
            return;
        }
        self.agreement_checks += 1;
        // Sampled: the whole object map, when this reader is at the end of the log.
        if self.agreement_checks.is_multiple_of(512)
            && seq == self.oracle.position()
            && r.objects() != self.oracle.reader.objects()
        {
            self.fail(Category::Safety, "2 agreement", format!("e{} at log {seq}: object states differ", n + 1));
        }
    }

    // ---- the membership store ----

    fn kv_put(&mut self, member: MemberRef, ttl_ms: u64) {
        let rev = self.revs.len() as u64 + 1;
        let id = member.id.clone();
        let mut hash = *self.live_hash.last().expect("live hash of revision 0");
        let key = self.keys.entry(id.clone()).or_insert(KeyState { inc: 0, gen: 0, live: false, last_rev: 0 });
        if key.live {
            hash = hash.wrapping_sub(member_hash(&MemberRef { id: id.clone(), incarnation: key.inc }));
        }
        hash = hash.wrapping_add(member_hash(&member));
        key.inc = member.incarnation;
        key.gen += 1;
        key.live = true;
        key.last_rev = rev;
        let gen = key.gen;
        self.live_hash.push(hash);
        self.revs.push((id.clone(), MemberChange::Up(member)));
        let lag = self.net.random_range(0..=self.params.expiry_lag_max_ms);
        self.after(ttl_ms + lag, Ev::Expire { id, gen });
        self.notify_watchers(rev);
    }

    fn kv_delete(&mut self, id: &MemberId) {
        let Some(key) = self.keys.get_mut(id) else { return };
        if !key.live {
            return;
        }
        let rev = self.revs.len() as u64 + 1;
        key.live = false;
        key.gen += 1;
        key.last_rev = rev;
        let gone = MemberRef { id: id.clone(), incarnation: key.inc };
        let hash = self.live_hash.last().expect("live hash").wrapping_sub(member_hash(&gone));
        self.live_hash.push(hash);
        self.revs.push((id.clone(), MemberChange::Down(id.clone())));
        self.tr(|| format!("store: rev {rev} deletes {id}"));
        self.notify_watchers(rev);
    }

    fn notify_watchers(&mut self, rev: u64) {
        self.h(rev << 20);
        for n in 0..self.nodes.len() {
            if self.nodes[n].booted && self.nodes[n].engine.is_some() {
                let lag = self.nodes[n].rng.random_range(0..=self.params.watch_lag_max_ms) + self.delay(n);
                let at = (self.now + Duration::from_millis(lag)).max(self.nodes[n].member_sched);
                self.nodes[n].member_sched = at;
                let inc = self.nodes[n].inc;
                self.push(at, Ev::MemberDeliver { node: n, inc, upto: rev });
            }
        }
    }

    fn deliver_members(&mut self, n: usize, upto: u64) {
        let upto = upto.min(self.revs.len() as u64);
        while self.nodes[n].member_cursor < upto && self.violation.is_none() && self.nodes[n].engine.is_some() {
            let rev = self.nodes[n].member_cursor + 1;
            self.nodes[n].member_cursor = rev;
            let change = self.revs[(rev - 1) as usize].1.clone();
            self.step(n, Some(Input::Member(MemberObservation { bucket: Bucket::Engine, rev, change })));
        }
        let cur = self.nodes[n].member_cursor;
        if cur > 0 && self.nodes[n].engine.is_some() && self.chance(self.params.duplicate) {
            let change = self.revs[(cur - 1) as usize].1.clone();
            self.step(n, Some(Input::Member(MemberObservation { bucket: Bucket::Engine, rev: cur, change })));
        }
    }

    // ---- the network ----

    fn can_send(&self, n: usize) -> bool {
        self.nodes[n].store_out_cut == 0
    }

    fn can_recv(&self, n: usize) -> bool {
        self.nodes[n].store_in_cut == 0
    }

    /// Whether a request from `a` reaches `b` through NATS.
    fn link(&self, a: usize, b: usize) -> bool {
        self.can_send(a) && self.can_recv(b) && !self.pair_cut.contains_key(&(a, b))
    }

    /// A message-level fault with probability `p`; only in the safety phase.
    fn chance(&mut self, p: f64) -> bool {
        self.phase == Phase::Safety && p > 0.0 && self.net.random_bool(p)
    }

    /// One message's latency to or from node `n` (clogged nodes hold messages for a while).
    fn delay(&mut self, n: usize) -> u64 {
        let mut d = 1 + self.net.random_range(0..=self.params.net_delay_max_ms);
        if self.nodes[n].clog > 0 {
            d += self.net.random_range(500..=3_000);
        }
        d
    }

    /// Reading resumes after a cut: the watcher and the log consumer catch up.
    fn catch_up(&mut self, n: usize) {
        if !self.nodes[n].booted || self.nodes[n].engine.is_none() {
            return;
        }
        let d = self.delay(n);
        let at = (self.now + Duration::from_millis(d)).max(self.nodes[n].log_sched);
        self.nodes[n].log_sched = at;
        self.nodes[n].member_sched = self.nodes[n].member_sched.max(at);
        let inc = self.nodes[n].inc;
        let (log, rev) = (self.log.len() as u64, self.revs.len() as u64);
        self.push(at, Ev::MemberDeliver { node: n, inc, upto: rev });
        self.push(at, Ev::LogDeliver { node: n, inc, upto: log });
    }

    // ---- faults ----

    pub fn cut_store(&mut self, n: usize, inbound: bool, outbound: bool, ms: Option<u64>) {
        if inbound {
            self.nodes[n].store_in_cut += 1;
        }
        if outbound {
            self.nodes[n].store_out_cut += 1;
        }
        self.tr(|| format!("e{} cut from the store (in={inbound} out={outbound}) for {ms:?}ms", n + 1));
        if let Some(ms) = ms {
            let gen = self.fault_gen;
            if inbound {
                self.after(ms, Ev::FaultEnd { gen, undo: Undo::StoreIn(n) });
            }
            if outbound {
                self.after(ms, Ev::FaultEnd { gen, undo: Undo::StoreOut(n) });
            }
        }
    }

    /// Scenarios: hold node `n`'s log consumer (it reads nothing new), or release it.
    pub fn hold_log(&mut self, n: usize, held: bool) {
        self.nodes[n].log_held = held;
        if !held {
            self.catch_up(n);
        }
    }

    /// Scenarios: hold node `n`'s appends on their way to the log (they land, in order, when released).
    pub fn hold_appends(&mut self, n: usize, held: bool) {
        if held {
            self.nodes[n].appends_held.get_or_insert_with(Vec::new);
        } else {
            for event in self.nodes[n].appends_held.take().unwrap_or_default() {
                self.after(1, Ev::AppendLand { event });
            }
        }
    }

    /// Scenarios: pause node `n` for `ms` right after it next dispatches a check of `object`.
    pub fn pause_at_next_dispatch(&mut self, n: usize, object: &ObjectId, ms: u64) {
        self.pause_on_dispatch = Some((n, object.clone(), ms));
    }

    /// Scenarios: an entry written to the log by someone other than an engine (a forged or corrupt writer).
    pub fn inject(&mut self, entry: LogEntry) {
        self.append(entry);
    }

    pub fn heal_store(&mut self, n: usize) {
        self.nodes[n].store_out_cut = 0;
        if self.nodes[n].store_in_cut > 0 {
            self.nodes[n].store_in_cut = 0;
            self.catch_up(n);
        }
    }

    fn cut_pair(&mut self, a: usize, b: usize, ms: u64) {
        *self.pair_cut.entry((a, b)).or_default() += 1;
        let gen = self.fault_gen;
        self.after(ms, Ev::FaultEnd { gen, undo: Undo::Pair(a, b) });
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::StoreIn(n) => {
                self.nodes[n].store_in_cut = self.nodes[n].store_in_cut.saturating_sub(1);
                if self.nodes[n].store_in_cut == 0 {
                    self.catch_up(n);
                }
            }
            Undo::StoreOut(n) => self.nodes[n].store_out_cut = self.nodes[n].store_out_cut.saturating_sub(1),
            Undo::Pair(a, b) => {
                if let Some(c) = self.pair_cut.get_mut(&(a, b)) {
                    *c -= 1;
                    if *c == 0 {
                        self.pair_cut.remove(&(a, b));
                    }
                }
            }
            Undo::HeartbeatLoss(n) => self.nodes[n].hb_loss = self.nodes[n].hb_loss.saturating_sub(1),
            Undo::Clog(n) => self.nodes[n].clog = self.nodes[n].clog.saturating_sub(1),
        }
        self.tr(|| format!("fault over: {undo:?}"));
    }

    fn exp(&mut self, mean: u64, which: Rng3) -> u64 {
        let r = match which {
            Rng3::Faults => &mut self.faults,
            Rng3::Work => &mut self.work,
        };
        let u: f64 = r.random_range(1e-9..1.0);
        ((-u.ln()) * mean as f64).min(mean as f64 * 20.0) as u64 + 1
    }

    fn fault_tick(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let next = self.exp(self.params.fault_every_ms, Rng3::Faults);
        self.after(next, Ev::FaultTick);
        if self.params.swizzle && self.faults.random_bool(0.2) {
            self.swizzle();
            return;
        }
        let p = &self.params;
        let kind = p.faults[self.faults.random_range(0..p.faults.len())];
        let n = self.faults.random_range(0..self.nodes.len());
        let d = self.faults.random_range(p.fault_min_ms..=p.fault_max_ms.max(p.fault_min_ms));
        let gen = self.fault_gen;
        self.stats.faults += 1;
        self.h(kind as u64);
        match kind {
            FaultKind::Crash => {
                self.crash(n);
                if self.faults.random_bool(0.7) {
                    self.after(d, Ev::Restart { node: n, healing: false });
                }
            }
            FaultKind::Pause => {
                let ms = self
                    .faults
                    .random_range(self.params.fault_min_ms..=self.params.pause_max_ms.max(self.params.fault_min_ms));
                self.pause(n, ms);
            }
            FaultKind::StorePartition => self.cut_store(n, true, true, Some(d)),
            FaultKind::StoreOneWay => {
                let inbound = self.faults.random_bool(0.5);
                self.cut_store(n, inbound, !inbound, Some(d));
            }
            FaultKind::EnginePartition => {
                if self.nodes.len() > 1 {
                    let m = (n + self.faults.random_range(1..self.nodes.len())) % self.nodes.len();
                    self.tr(|| format!("e{} and e{} partitioned for {d}ms", n + 1, m + 1));
                    self.cut_pair(n, m, d);
                    if self.faults.random_bool(0.5) {
                        self.cut_pair(m, n, d);
                    }
                }
            }
            FaultKind::IsolateOne => {
                self.cut_store(n, true, true, Some(d));
                for m in 0..self.nodes.len() {
                    if m != n {
                        self.cut_pair(n, m, d);
                        self.cut_pair(m, n, d);
                    }
                }
            }
            FaultKind::HeartbeatLoss => {
                self.nodes[n].hb_loss += 1;
                self.tr(|| format!("e{} loses heartbeats for {d}ms", n + 1));
                self.after(d, Ev::FaultEnd { gen, undo: Undo::HeartbeatLoss(n) });
            }
            FaultKind::Clog => {
                self.nodes[n].clog += 1;
                self.tr(|| format!("e{} clogged for {d}ms", n + 1));
                self.after(d, Ev::FaultEnd { gen, undo: Undo::Clog(n) });
            }
            FaultKind::Leave => {
                self.leave(n);
                if self.faults.random_bool(0.7) {
                    self.after(d, Ev::Restart { node: n, healing: false });
                }
            }
        }
    }

    /// A leaving engine exits once idle, or after this long (the engine's reply timeout, a forward's, 1 s).
    fn drain_limit_ms(&self) -> u64 {
        5_000 + self.params.forward_timeout_ms + 1_000
    }

    /// FoundationDB's swizzle-clog: clog a random subset of engines one by one, then unclog them in another
    /// random order.
    fn swizzle(&mut self) {
        self.stats.faults += 1;
        let mut order: Vec<usize> = (0..self.nodes.len()).filter(|_| self.faults.random_bool(0.5)).collect();
        let gen = self.fault_gen;
        let mut t = 0;
        let mut starts = Vec::new();
        for &n in &order {
            t += self.faults.random_range(50..=500);
            starts.push((t, n));
        }
        // Unclog in a shuffled order, after the last one is clogged.
        for i in (1..order.len()).rev() {
            let j = self.faults.random_range(0..=i);
            order.swap(i, j);
        }
        for (at, n) in starts {
            self.after(at, Ev::ClogStart { gen, node: n });
        }
        for n in order {
            t += self.faults.random_range(200..=2_000);
            self.after(t, Ev::FaultEnd { gen, undo: Undo::Clog(n) });
        }
        self.tr(|| "swizzle-clog".into());
    }

    /// The end of the safety phase: every fault heals, the workload stops, some dead engines come back.
    fn heal(&mut self) {
        if self.nodes.iter().any(|n| n.leave_started.is_some()) {
            self.drain_allowance_ms = self.drain_limit_ms() + 1_000;
        }
        self.phase = Phase::Liveness;
        self.healed = Some(self.now);
        self.fault_gen += 1;
        self.pair_cut.clear();
        self.tr(|| "heal: faults off, workload off".into());
        for n in 0..self.nodes.len() {
            self.nodes[n].hb_loss = 0;
            self.nodes[n].clog = 0;
            self.heal_store(n);
            if self.nodes[n].is_paused() {
                self.resume(n);
            }
        }
        let mut up = self.nodes.iter().filter(|n| n.engine.is_some() && n.leave_started.is_none()).count();
        for n in 0..self.nodes.len() {
            if self.nodes[n].engine.is_none() && (up == 0 || self.faults.random_bool(self.params.restart_at_heal)) {
                self.restart(n);
                up += 1;
            }
        }
        if up == 0 {
            // Every engine is leaving: bring the first back once it has exited.
            self.after(1_000, Ev::Restart { node: 0, healing: true });
        }
        self.after(TICK, Ev::LivenessCheck);
    }

    /// How long after the heal every object must have a live owner (invariant 7): ttl + ttl/3 + the
    /// expiry lag, plus what it takes to notice and agree: a boot, a proposal whose answer was lost before the
    /// heal retried after the 2 s propose timeout, three trips through the store (the change reaching a
    /// watcher, the proposal, the record reaching every reader), twice the clock skew, and the drain of an
    /// engine that was leaving at the heal.
    pub fn ownership_budget_ms(&self) -> u64 {
        let p = &self.params;
        p.takeover_window_ms()
            + p.boot_delay_max_ms
            + 2_000
            + 3 * p.max_hop_ms()
            + 2 * p.clock_skew_max_ms
            + self.drain_allowance_ms
    }

    fn converged(&self) -> Result<(), String> {
        let serving: Vec<MemberRef> = self.nodes.iter().filter(|n| n.is_serving()).map(|n| n.member()).collect();
        if self.nodes.iter().any(|n| n.engine.is_some() && !n.booted) {
            return Err("an engine is still booting".into());
        }
        if self.nodes.iter().any(|n| n.leave_started.is_some()) {
            return Err("an engine is still leaving".into());
        }
        let Some(rec) = self.oracle.reader.fence().current() else { return Err("no epoch record".into()) };
        if rec.members != serving {
            return Err(format!("epoch {} lists {:?}, the running engines are {serving:?}", rec.epoch, rec.members));
        }
        for n in self.nodes.iter().filter(|n| n.is_serving()) {
            let e = n.engine.as_ref().expect("serving engine");
            if e.epoch() != rec.epoch || !e.is_ready() {
                return Err(format!("{} is at epoch {} of {}", n.id, e.epoch(), rec.epoch));
            }
        }
        for id in self.oracle.reader.objects().keys() {
            let owner = crate::oracle::hrw_owner(&rec.members, id.as_str());
            let Some(owner) = owner else { return Err(format!("{id} has no owner")) };
            let slot = self.slot_of[&owner.id];
            let e = self.nodes[slot].engine.as_ref().expect("members are serving");
            if !e.owns(id) {
                return Err(format!("{id}: its owner {owner} does not hold it"));
            }
        }
        Ok(())
    }

    fn liveness_check(&mut self) {
        let healed = self.healed.expect("liveness after heal");
        let budget = self.ownership_budget_ms();
        if self.converged.is_some() && self.oracle.reader.epoch() != self.converged_epoch {
            // A member joined or left after convergence (a restart scheduled before the heal): the
            // budgets start again from the new convergence.
            self.converged = None;
            self.end = None;
        }
        match (self.converged(), self.converged) {
            (Ok(()), None) => {
                self.converged = Some(self.now);
                self.converged_epoch = self.oracle.reader.epoch();
                self.stats.converged_after_ms = self.now.0 - healed.0;
                self.stats.converge_budget_ms = budget;
                self.checked_since.clear();
                self.tr(|| "converged: every object has a live owner".into());
            }
            (Ok(()), Some(_)) => {}
            (Err(why), _) => {
                self.converged = None;
                self.end = None;
                if self.now.saturating_since(healed).as_millis() as u64 > budget {
                    let msg = format!(
                        "{}ms after the heal (budget {budget}ms): {why}",
                        self.now.saturating_since(healed).as_millis()
                    );
                    self.fail(Category::Liveness, "7 failover", msg);
                    return;
                }
            }
        }
        if self.converged.is_some() && (self.end.is_none() || self.touched_since_end) {
            // Every object must now be checked by its owner within its budget.
            let last = self.oracle.reader.objects().keys().filter_map(|id| self.check_deadline(id)).max();
            self.end = Some(last.unwrap_or(self.now));
            self.touched_since_end = false;
        }
        if self.end.is_some_and(|e| self.now >= e) {
            self.final_checks();
            self.phase = Phase::Done;
            return;
        }
        // Converged: look again less often (a check costs O(objects)); losing it again is still seen.
        let tick = if self.converged.is_some() { 10 * TICK } else { TICK };
        let tick = self.end.map_or(tick, |e| tick.min(e.0.saturating_sub(self.now.0).max(1)));
        self.after(tick, Ev::LivenessCheck);
    }

    /// An object's owner must have checked it again within max(takeover window, its interval) + twice its
    /// timeout + the check grace (2 s) + two hops + 1 s after convergence: a check lost just before the heal
    /// keeps the object busy for its timeout + grace, the next slot follows within max(window, interval),
    /// and its result within the timeout.
    /// A command that changes the object after convergence (one still in flight at the heal) restarts its
    /// budget. Paused objects have none.
    fn check_deadline(&self, id: &ObjectId) -> Option<Time> {
        let view = self.oracle.reader.object(id).filter(|v| !v.paused)?;
        let p = &self.params;
        let budget = p.takeover_window_ms().max(view.def.interval_ms)
            + 2 * view.def.timeout_ms
            + 2_000
            + 2 * p.max_hop_ms()
            + 1_000
            + 2 * p.clock_skew_max_ms;
        let start = self.converged?.max(self.touched.get(id).copied().unwrap_or(Time::ZERO));
        Some(start + Duration::from_millis(budget))
    }

    fn final_checks(&mut self) {
        let Some(since) = self.converged else { return };
        let rec = self.oracle.reader.fence().current().cloned().expect("converged means an epoch");
        let objects: Vec<ObjectId> = self.oracle.reader.objects().keys().cloned().collect();
        for id in objects {
            let Some(deadline) = self.check_deadline(&id) else { continue };
            let owner = crate::oracle::hrw_owner(&rec.members, id.as_str()).cloned().expect("converged");
            let slot = self.slot_of[&owner.id];
            match self.checked_since.get(&(id.clone(), slot, owner.incarnation)) {
                Some(&t) if t <= deadline => {
                    // How much of its budget the object's first check used, for reports.
                    let budget = deadline.0 - since.0;
                    let used = (t.0.saturating_sub(since.0) * 100).checked_div(budget).unwrap_or(0);
                    self.stats.check_budget_used_pct = self.stats.check_budget_used_pct.max(used);
                }
                other => {
                    let msg = format!(
                        "{id} not checked by its owner {owner} by {deadline} (converged at {since}): first result since {other:?}, last dispatch {:?}",
                        self.last_dispatched(&id)
                    );
                    self.fail(Category::Liveness, "7 failover", msg);
                    return;
                }
            }
        }
        // Every command handed to a running engine got its answer.
        let bound =
            Duration::from_millis(5_000 + self.params.forward_timeout_ms + 2_000 + 2 * self.params.max_hop_ms());
        let stuck =
            self.replies.values().find(|p| self.alive(p.node, p.inc) && self.now.saturating_since(p.at) > bound);
        if let Some(p) = stuck.cloned() {
            let msg = format!("e{} never answered command {} it got at {}", p.node + 1, p.cmd_id, p.at);
            self.fail(Category::Liveness, "4 accounting", msg);
        }
    }

    // ---- workload ----

    fn pick_via(&mut self) -> Via {
        if self.work.random_bool(self.params.ingress_share) {
            if self.ui.random_bool(self.params.ui_direct_share) {
                Via::Ui
            } else {
                Via::Ingress
            }
        } else {
            Via::Engine(self.work.random_range(0..self.nodes.len()))
        }
    }

    fn workload_tick(&mut self) {
        if self.phase != Phase::Safety || self.objects.is_empty() {
            return;
        }
        // First every object is put once, quickly; then a random mix.
        let (cmd, next) = if self.bootstrapped < self.objects.len() {
            let i = self.bootstrapped;
            self.bootstrapped += 1;
            let kind = CommandKind::Put { def: self.objects[i].1.clone() };
            (self.command(i, kind), 5)
        } else {
            let i = self.work.random_range(0..self.objects.len());
            let kind = match self.work.random_range(0..100) {
                0..=19 => {
                    let mut def = draw_def(&mut self.work, &self.params, i);
                    if self.work.random_bool(0.05) {
                        def.interval_ms = 0; // rejected
                    }
                    CommandKind::Put { def }
                }
                20..=24 => CommandKind::Delete,
                25..=39 => CommandKind::Pause,
                40..=59 => CommandKind::Resume,
                60..=84 => CommandKind::CheckNow,
                _ => CommandKind::Ack,
            };
            (self.command(i, kind), self.exp(self.params.command_every_ms, Rng3::Work))
        };
        let via = self.pick_via();
        if self.params.double_submit > 0.0 && self.work.random_bool(self.params.double_submit) {
            // The same command id twice at once by two paths (a client retrying while the first is in flight).
            let again = self.pick_via();
            self.submit(cmd.clone(), again);
        }
        self.submit(cmd, via);
        self.after(next, Ev::Submit);
    }

    fn command(&mut self, object: usize, kind: CommandKind) -> Command {
        self.next_cmd += 1;
        Command {
            id: CommandId::new(format!("c{}", self.next_cmd)).expect("valid command id"),
            object: self.objects[object].0.clone(),
            kind,
            hop: 0,
        }
    }

    /// A client submits a command; it will learn exactly one outcome. Returns the submission's index.
    pub fn submit(&mut self, cmd: Command, via: Via) -> usize {
        self.stats.commands += 1;
        let sub = self.subs.len();
        self.subs.push(Submission { cmd: cmd.clone(), via, at: self.now, outcome: None, engine: None });
        let timeout = 5_000 + self.params.forward_timeout_ms + 2_000;
        self.after(timeout, Ev::ClientTimeout { sub });
        let reply = self.next_reply;
        self.next_reply += 1;
        match via {
            Via::Ingress => self.submit_ingress(sub, reply, cmd),
            Via::Ui => {
                let epoch = self.oracle.reader.epoch();
                let stale = epoch > 1 && self.ui.random_bool(self.params.ui_view_stale);
                let view = self.oracle.reader.fence().ownership(if stale { epoch - 1 } else { epoch });
                let owner = match submit_to(view, &cmd.object) {
                    Submit::Owner(m) => self.slot_of.get(&m.id).copied().filter(|&t| self.nodes[t].engine.is_some()),
                    Submit::Ingress => None,
                };
                match owner {
                    Some(t) => {
                        self.subs[sub].engine = Some(t);
                        if self.can_recv(t) {
                            let d = self.delay(t);
                            let inc = self.nodes[t].inc;
                            self.after(d, Ev::CommandArrive { node: t, inc, reply, waiter: Waiter::Client(sub), cmd });
                        }
                    }
                    // No view, or no responder at that owner (its process is down): ingress.
                    None => self.submit_ingress(sub, reply, cmd),
                }
            }
            Via::Engine(n) => {
                if self.nodes[n].engine.is_none() {
                    self.after(
                        0,
                        Ev::ClientAnswer { sub, outcome: Outcome::Unavailable { reason: "connection refused".into() } },
                    );
                    return sub;
                }
                self.subs[sub].engine = Some(n);
                let inc = self.nodes[n].inc;
                self.after(0, Ev::CommandArrive { node: n, inc, reply, waiter: Waiter::Client(sub), cmd });
            }
        }
        sub
    }

    /// A request on `jaque.work.cmd.ingress`: the queue group hands it to exactly one subscribed engine.
    fn submit_ingress(&mut self, sub: usize, reply: u64, cmd: Command) {
        let members: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| {
                // A leaving engine may still be subscribed until it exits, in some seeds.
                self.nodes[n].engine.as_ref().is_some_and(|e| !e.is_leaving() || self.params.ingress_while_leaving)
            })
            .collect();
        if members.is_empty() {
            self.after(1, Ev::ClientAnswer { sub, outcome: Outcome::Unavailable { reason: "no responders".into() } });
            return;
        }
        let n = members[self.work.random_range(0..members.len())];
        self.subs[sub].engine = Some(n);
        if self.can_recv(n) {
            let d = self.delay(n);
            let inc = self.nodes[n].inc;
            self.after(d, Ev::CommandArrive { node: n, inc, reply, waiter: Waiter::Client(sub), cmd });
        }
    }

    fn client_outcome(&mut self, sub: usize, outcome: Outcome) {
        if self.subs[sub].outcome.is_some() {
            // The client already gave up (a late answer after its timeout is dropped by the shell).
            return;
        }
        if self.trace.is_some() {
            let line = format!("client: {} -> {outcome:?}", self.subs[sub].cmd.id);
            self.tr(|| line);
        }
        match &outcome {
            Outcome::Applied { .. } => self.stats.applied += 1,
            Outcome::NotOwned => self.stats.not_owned += 1,
            Outcome::Unavailable { .. } => {
                self.stats.unavailable += 1;
                let bootstrap = matches!(self.subs[sub].cmd.kind, CommandKind::Put { .. });
                let p = if bootstrap { self.params.retry.max(0.5) } else { self.params.retry };
                if self.phase == Phase::Safety && self.work.random_bool(p) {
                    let d = self.work.random_range(200..=3_000);
                    self.after(d, Ev::Retry { sub });
                }
            }
            _ => {}
        }
        self.subs[sub].outcome = Some(outcome);
    }

    // ---- checks ----

    /// The simulated truth of an object: piecewise constant, a new state every period or so.
    fn truth(&self, id: &ObjectId, t: Time) -> State {
        if let Some(s) = self.truth_override.get(id) {
            return *s;
        }
        let k = mix(hrw::key(id.as_str()) ^ self.truth_seed);
        let period = self.params.truth_period_ms / 2 + k % self.params.truth_period_ms.max(1);
        let slot = t.0 / period.max(1);
        match mix(k ^ mix(slot)) % 100 {
            0..=69 => State::Ok,
            70..=79 => State::Warning,
            80..=94 => State::Critical,
            _ => State::Unknown,
        }
    }
}

#[derive(Clone, Copy)]
enum Rng3 {
    Faults,
    Work,
}

/// The number of an object of the workload's pool (`o<i>`).
fn object_index(id: &ObjectId) -> Option<usize> {
    id.as_str().strip_prefix('o')?.parse().ok()
}

fn draw_def(r: &mut ChaCha8Rng, p: &Params, i: usize) -> ObjectDef {
    let interval_ms = r.random_range(p.interval_ms.0..=p.interval_ms.1.max(p.interval_ms.0)) / 100 * 100;
    let interval_ms = interval_ms.max(100);
    ObjectDef {
        probe: Probe::Tcp { addr: format!("host{i}:80") },
        interval_ms,
        timeout_ms: r.random_range(1..=interval_ms.min(2_000)),
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Log { seq, entry } => format!("log {seq} {}", brief_entry(entry)),
        Input::Member(o) => format!("member rev {} {:?}", o.rev, o.change),
        Input::Command { reply, cmd } => {
            format!("command {} {} on {} hop {} (caller {})", cmd.id, cmd.kind.name(), cmd.object, cmd.hop, reply.0)
        }
        other => format!("{other:?}"),
    }
}

fn brief_output(o: &Output) -> String {
    match o {
        Output::Append(ev) => format!("append {}", brief_event(ev)),
        Output::Forward { id, to, cmd } => format!("forward #{} {} to {to}", id.0, cmd.id),
        Output::Dispatch(w) => format!("dispatch check {} of {}", w.check_id, w.object),
        other => format!("{other:?}"),
    }
}

fn brief_event(ev: &Event) -> String {
    let body = match &ev.body {
        jaque_core::EventBody::Transition { from, to, .. } => format!("transition {from:?}->{to:?}"),
        jaque_core::EventBody::Put { .. } => "put".into(),
        other => format!("{other:?}"),
    };
    let cmd = ev.command_id.as_ref().map(|c| format!(" cmd {c}")).unwrap_or_default();
    format!("{} {body} by {} epoch {}{cmd}", ev.object, ev.writer, ev.epoch)
}

fn brief_entry(e: &LogEntry) -> String {
    match e {
        LogEntry::Epoch(r) => {
            let m: Vec<String> = r.members.iter().map(|m| m.to_string()).collect();
            format!("epoch {} [{}] rev {}", r.epoch, m.join(","), r.members_rev)
        }
        LogEntry::Event(ev) => brief_event(ev),
    }
}
