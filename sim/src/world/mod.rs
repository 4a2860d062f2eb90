//! The simulated world the shell sees, driving unchanged `jaque-core` engines, sinks and notifiers. This module
//! owns the [`Sim`]: the event queue ordered by (time, sequence), the step loop that routes each event to the
//! concern it is about, the trace and its hash, and the public API of scenarios and tests. Each concern has its
//! own file:
//!
//! - [`process`]: one member process whatever its role ([`Process`]), and the name of one ([`Who`]):
//!   incarnation, running/paused/leaving, buffered inputs, its timer, its readers' cursors, its clock, the
//!   faults that hold it.
//! - [`lifecycle`]: the one life every process lives (start, boot, step, follow the log and the watcher, pause,
//!   resume, crash, leave, exit, heal), over the contract each role fulfils (`Machine` for its core, `Role` for
//!   the rest).
//! - [`engine`], [`sink`], [`notifier`]: the three roles, each what only it does (its config, its checks around
//!   a step, what it does with its outputs), with what only it talks to: `sink/sql.rs`, the sinks' SQL store;
//!   `notifier/kv.rs`, the notifiers' records in the membership KV and their requests to it;
//!   `notifier/endpoint.rs`, the webhook endpoints the notifiers send to.
//! - [`faults`]: one fault vocabulary for every process, the fault ticks (crash, pause, partitions from the store
//!   and from peers, heartbeat loss, clogging, clean leave), swizzle, what undoes each fault, and the heal.
//! - [`store`]: the membership KV, every bucket in one revision sequence, per-key TTL, late expiry, watchers.
//! - [`log`]: the log (one total order, compare-and-set epoch appends, event appends that fail or land late)
//!   and its delivery to readers.
//! - [`net`]: request/reply (no responders, timeouts), forwards, links between engines.
//! - [`ingress`]: the ui's writes through ingress (core's `IngressWrite`: claims, attempts sent again), the
//!   queue group as the NATS server keeps it (a member that stopped answering is dropped late).
//! - [`workload`]: clients, commands and their one outcome, check workers and the simulated truth.
//! - [`workers`]: check workers of limited capacity, each with the core's backlog (when `Params::workers`).
//! - [`snapshots`]: the snapshot store, the engines' snapshot writes and purges, every reader's start from a
//!   snapshot and jump past a hole, the objects whose history was lost.
//! - [`checks`]: the checkers, one module per invariant family: the engines' (agreement, one hop, accounting
//!   as the run goes; convergence, failover, every caller answered at its end), the notifications' (9), the
//!   sink store's (10), the snapshots' (11) and the writes through ingress (12); the log's own are the
//!   [`Oracle`]'s.
//!
//! Randomness comes from sub-seeds: the network, the faults, the workload, the ui, the simulated truth and
//! each process draw from their own streams.

mod checks;
mod engine;
mod faults;
mod ingress;
mod lifecycle;
mod log;
mod net;
mod notifier;
mod process;
mod sink;
mod snapshots;
mod store;
mod workers;
mod workload;

pub use checks::AcceptedTransition;
pub use engine::{EngineRole, Node};
pub use notifier::endpoint::{Mode as EndpointMode, Reception};
pub use notifier::{At as NotifyAt, NotifierRole, NotifierSlot, NotifyStats, Then as NotifyThen};
pub use process::{Peer, Process, Who};
pub use sink::sql::{Sql, SqlCounters};
pub use sink::{SinkProc, SinkRole, SinkStats, SinkWorldCounters};
pub use snapshots::{LostBy, SnapStats};

pub use ingress::IngressStats;
pub use workers::PoolStats;
pub use workload::{Submission, Via};

use crate::oracle::Oracle;
use crate::params::{mix, Params};
use checks::engines::Checks;
use checks::notifications::Notifications;
use checks::sink_progress::SinkProgress;
use checks::sink_store::SinkStore;
use checks::snapshots::SnapshotChecks;
use checks::takeover::Takeovers;
use faults::{Fault, Faults, Undo};
use ingress::{Ingress, WriteEv};
use jaque_core::{
    Bucket, CheckResult, Command, Engine, EngineConfig, EpochRecord, Event, IoError, LogEntry, MemberId, MemberRef,
    ObjectDef, ObjectId, Outcome, State, Time,
};
use lifecycle::LifeEv;
use log::Log;
use net::{Net, Waiter};
use notifier::{NEv, Notify};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sink::{SinkEv, Sinks};
use snapshots::{SnapEv, Snaps};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use store::Store;
use workers::{Pool, WorkerEv};
use workload::Workload;

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
    /// Healed: no new faults, no new commands; convergence is demanded.
    Liveness,
    Done,
}

/// Something that happens at one instant. Events for a process carry its slot and incarnation: one for an
/// incarnation that is gone is dropped, one for a paused process waits in its buffers.
#[derive(Clone, Debug)]
enum Ev {
    /// The life of process `Who` (`lifecycle.rs`): its (re)start, boot, timer, deliveries, resume and exit.
    Life(Who, LifeEv),
    HeartbeatLand {
        bucket: Bucket,
        member: MemberRef,
        ttl_ms: u64,
        /// The cluster format its value announces (the build of the process that put it).
        format: u32,
    },
    HeartbeatDelete {
        bucket: Bucket,
        member: MemberRef,
    },
    Expire {
        bucket: Bucket,
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
        result: Result<Outcome, IoError>,
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
    /// The engines' and sinks' fault tick (`faults.rs`).
    FaultTick,
    /// A fault of process `who` is over (unless the heal came first: another generation).
    FaultEnd {
        gen: u64,
        who: Who,
        undo: Undo,
    },
    /// Swizzle: engine `node`'s turn to be clogged.
    ClogStart {
        gen: u64,
        node: usize,
    },
    /// A fault between attempts (`faults.rs`): `fault` to incarnation `inc` of engine `node`.
    AttemptFault {
        gen: u64,
        node: usize,
        inc: u64,
        fault: Fault,
    },
    Heal,
    LivenessCheck,
    /// Sinks and their SQL store besides their life (`sink/`).
    Sink(SinkEv),
    /// The notifiers' events besides their life (their answers, store traffic, HTTP, fault tick): `notifier/`.
    Notify(NEv),
    /// The snapshot store's and the readers' snapshot events: `snapshots.rs`.
    Snap(SnapEv),
    /// The check workers of a pool of limited capacity: `workers.rs`.
    Worker(WorkerEv),
    /// The ui's writes through ingress: `ingress.rs`.
    Write(WriteEv),
}

impl Ev {
    /// The process incarnation an event is for, if any: it waits while that process is paused.
    fn held_for(&self) -> Option<(Who, u64)> {
        match self {
            Ev::Life(who, life) => life.held_for().map(|inc| (*who, inc)),
            Ev::ProposeAnswer { node, inc, .. }
            | Ev::AppendFailed { node, inc, .. }
            | Ev::CommandArrive { node, inc, .. }
            | Ev::CheckDone { node, inc, .. } => Some((Who::Engine(*node), *inc)),
            Ev::Sink(e) => e.held_for(),
            Ev::Notify(e) => e.held_for(),
            Ev::Snap(e) => e.held_for(),
            _ => None,
        }
    }

    /// What the trace hash records of an event (with its time), and for some a second code: a new kind gets
    /// the next free code. The codes are those of when each role had its own event type (the engines' 1–29,
    /// the sinks' 100 + theirs, the notifiers' 28 and then theirs), so the hash has not moved.
    fn code(&self) -> (u64, Option<u64>) {
        let code = match self {
            Ev::Life(who, life) => return life.code(*who),
            Ev::FaultEnd { who: Who::Engine(_), .. } => 21,
            Ev::FaultEnd { who: Who::Sink(_), .. } => 111,
            Ev::FaultEnd { who: Who::Notifier(_), .. } => return (28, Some(113)),
            Ev::Notify(e) => return (28, Some(e.code())),
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
            Ev::Heal => 25,
            Ev::LivenessCheck => 26,
            Ev::ClogStart { .. } => 27,
            Ev::AttemptFault { .. } => 800,
            Ev::Sink(e) => 100 + e.code(),
            Ev::Snap(e) => 500 + e.code(),
            Ev::Worker(e) => 600 + e.code(),
            Ev::Write(e) => 700 + e.code(),
        };
        (code, None)
    }
}

/// Statistics of a run, for reports and the benchmark.
/// What mixed versions did in a run.
#[derive(Clone, Debug, Default)]
pub struct VersionStats {
    /// Processes replaced by this build.
    pub upgrades: u64,
    /// Processes that stopped at an entry (or a snapshot) their build could not read, and left.
    pub blocked: u64,
    /// `unack` commands applied, and refused because the cluster was not at format 2 yet (or an older engine
    /// did not know the command).
    pub unack_applied: u64,
    pub unack_refused: u64,
    /// The highest active format the log reached, and when.
    pub format: u32,
    pub raised_at_ms: u64,
}

/// What the workload's policy changes did in a run (`Params::policy_changes`, invariant 15).
#[derive(Clone, Debug, Default)]
pub struct PolicyStats {
    pub submitted: u64,
    pub applied: u64,
    /// Refused with a reason: what they named did not exist, the policy after them would break a rule, or the
    /// cluster was not at format 4 yet.
    pub rejected: u64,
    /// Readers (engines, sinks, notifiers) held to the oracle's policy at a policy change they read.
    pub checked: u64,
    /// Recoveries (cluster format 4) held to go to everyone their episode's problems went to (filled in at the
    /// end of a run).
    pub resolves: u64,
    /// Held problems released (a silence, a window or a parent down ended while they were open).
    pub releases: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub events: u64,
    /// Policy changes (`PolicyStats`).
    pub policy: PolicyStats,
    /// Mixed versions (`VersionStats`).
    pub versions: VersionStats,
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
    /// The sinks and their store (filled in at the end of a run).
    pub sink: sink::SinkStats,
    pub notify: NotifyStats,
    pub snap: SnapStats,
    /// The check workers of a pool of limited capacity (`Params::workers`).
    pub pool: PoolStats,
    /// The ui's writes through ingress (filled in at the end of a run).
    pub ingress: IngressStats,
    /// The alert rules as the oracle saw them (invariant 14; filled in at the end of a run).
    pub alerts: crate::alerts::AlertStats,
}

pub struct Sim {
    pub params: Params,
    /// What every simulated engine's config holds but its member: core's timeouts, which the simulator's
    /// own waits and budgets are built on.
    core: EngineConfig,
    now: Time,
    seq: u64,
    queue: BTreeMap<(Time, u64), Ev>,
    /// The engine slots `e1`..: slot `n` is member `e<n+1>`.
    pub nodes: Vec<Node>,
    slot_of: BTreeMap<MemberId, usize>,
    store: Store,
    log: Log,
    pub oracle: Oracle,
    net: Net,
    /// Every command a client submitted, in order, with the outcome it was told.
    pub subs: Vec<Submission>,
    work: Workload,
    pool: Pool,
    ingress: Ingress,
    faults: Faults,
    checks: Checks,
    /// The checker of invariant 9 (`checks/notifications.rs`).
    notifications: Notifications,
    /// The checker of invariant 10 (`checks/sink_store.rs`).
    sink_store: SinkStore,
    /// The checker of the sinks' progress rows (`checks/sink_progress.rs`).
    sink_progress: SinkProgress,
    /// The checker of takeovers' possibly-missed slots (`checks/takeover.rs`).
    takeovers: Takeovers,
    /// The checker of invariant 11 (`checks/snapshots.rs`).
    snapshot_checks: SnapshotChecks,
    sinks: Sinks,
    notify: Notify,
    snaps: Snaps,
    pub phase: Phase,
    pub violation: Option<Violation>,
    pub stats: Stats,
    hash: u64,
    same_time: (Time, u64),
    trace: Option<(usize, VecDeque<String>)>,
}

/// The simulator's polling period (a leaving engine's exit, the liveness checks).
const TICK: u64 = 100;

/// Milliseconds of one of core's durations.
fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// An exponentially distributed wait with mean `mean` (capped at 20 means), at least 1 ms.
fn exp(r: &mut ChaCha8Rng, mean: u64) -> u64 {
    let u: f64 = r.random_range(1e-9..1.0);
    ((-u.ln()) * mean as f64).min(mean as f64 * 20.0) as u64 + 1
}

impl Sim {
    pub fn new(params: Params) -> Sim {
        let seed = params.seed;
        let nodes: Vec<Node> = (0..params.engines).map(|i| engine::slot(&params, i)).collect();
        let slot_of = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
        let anyone = MemberRef { id: MemberId::new("e1").expect("valid member id"), incarnation: 0 };
        let mut sim = Sim {
            core: engine::config(&params, anyone),
            now: Time::ZERO,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            slot_of,
            store: Store::new(),
            log: Log::new(),
            oracle: Oracle::new(),
            net: Net::new(seed),
            subs: Vec::new(),
            work: Workload::new(&params),
            pool: Pool::new(seed, params.workers),
            ingress: Ingress::new(seed),
            faults: Faults::new(seed),
            checks: Checks::new(params.objects),
            notifications: Notifications::default(),
            sink_store: SinkStore::default(),
            sink_progress: SinkProgress::default(),
            takeovers: Takeovers::default(),
            snapshot_checks: SnapshotChecks::new(seed),
            sinks: Sinks::new(&params),
            notify: Notify::new(&params),
            snaps: Snaps::new(seed),
            phase: Phase::Safety,
            violation: None,
            stats: Stats::default(),
            hash: mix(seed),
            same_time: (Time::ZERO, 0),
            trace: None,
            params,
        };
        for (who, _) in sim.older_members() {
            lifecycle::by_role!(who, |R, slot| {
                <R as lifecycle::Role>::slots_mut(&mut sim)[slot].speaks = jaque_core::format::OLDEST_CLUSTER_FORMAT
            });
        }
        sim
    }

    /// Keep the last `lines` trace lines (costly: only for replays of failures and for scenarios).
    pub fn with_trace(mut self, lines: usize) -> Sim {
        self.trace = Some((lines, VecDeque::new()));
        self
    }

    pub fn trace_lines(&self) -> Vec<String> {
        self.trace.as_ref().map(|(_, t)| t.iter().cloned().collect()).unwrap_or_default()
    }

    /// A hash of everything that happened (each event's time and kind, each engine step's output count, log
    /// positions, store revisions, fault kinds; not the trace's text): two runs of one seed must agree on it.
    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    pub fn now(&self) -> Time {
        self.now
    }

    pub fn log(&self) -> &[LogEntry] {
        self.log.entries()
    }

    pub fn engine(&self, n: usize) -> &Engine {
        self.nodes[n].engine().expect("engine is running")
    }

    pub fn object_ids(&self) -> Vec<ObjectId> {
        self.work.objects.iter().map(|(id, _)| id.clone()).collect()
    }

    pub fn object_def(&self, i: usize) -> ObjectDef {
        self.work.objects[i].1.clone()
    }

    /// Forces the simulated truth of an object (what every check of it returns from now on).
    pub fn set_truth(&mut self, id: &ObjectId, state: State) {
        self.work.truth_override.insert(id.clone(), state);
    }

    /// Schedules a whole swarm run: engines start, the workload and faults run for the safety phase, then
    /// everything heals for the liveness phase.
    pub fn start_swarm(&mut self) {
        for n in 0..self.nodes.len() {
            let at = self.nodes[n].rng.random_range(0..=2_000);
            self.push(Time(at), Ev::Life(Who::Engine(n), LifeEv::Restart { healing: false }));
        }
        if !self.work.objects.is_empty() || self.params.command_every_ms > 0 {
            self.push(Time(500), Ev::Submit);
        }
        if !self.params.faults.is_empty() {
            let at = exp(&mut self.faults.rng, self.params.fault_every_ms) + 2_000;
            self.push(Time(at), Ev::FaultTick);
        }
        self.start_notifiers();
        self.start_mixed_versions();
        self.push(Time(self.params.safety_ms.max(1)), Ev::Heal);
        self.start_sinks();
    }

    /// Mixed versions: the older members, each with the time it is replaced by this build.
    fn older_members(&self) -> Vec<(Who, u64)> {
        let who = |role, slot| match role {
            crate::params::Role::Engine => Who::Engine(slot),
            crate::params::Role::Sink => Who::Sink(slot),
            crate::params::Role::Notifier => Who::Notifier(slot),
        };
        self.params.versions.old.iter().map(|(role, slot, at)| (who(*role, *slot), *at)).collect()
    }

    /// Mixed versions: the older members run the older build until each is replaced by this one at its time.
    fn start_mixed_versions(&mut self) {
        for (who, at) in self.older_members() {
            self.push(Time(at), Ev::Life(who, LifeEv::Upgrade));
        }
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
        let (code, then) = ev.code();
        self.h(code);
        if let Some(code) = then {
            self.h(code);
        }
        // A paused process handles nothing; what reaches it waits in its buffers, but its timer, which is
        // re-armed when it resumes.
        if let Some(ev) = self.hold_if_paused(ev) {
            self.dispatch(ev);
        }
        true
    }

    /// Routes an event to the concern it is about.
    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Life(who, life) => self.life_event(who, life),
            Ev::HeartbeatLand { bucket, member, ttl_ms, format } => self.kv_put(bucket, member, ttl_ms, format),
            Ev::HeartbeatDelete { bucket, member } => self.kv_delete_own(bucket, &member),
            Ev::Expire { bucket, id, gen } => self.kv_expire(bucket, id, gen),
            Ev::AppendLand { event } => self.append(LogEntry::Event(event)),
            Ev::ProposeLand { node, inc, record, after_seq } => self.propose_land(node, inc, record, after_seq),
            Ev::ProposeAnswer { node, inc, epoch, won } => {
                if self.alive(node, inc) {
                    self.step(node, Some(jaque_core::Input::ProposeResult { epoch, won }));
                }
            }
            Ev::AppendFailed { node, inc, event } => self.append_failed(node, inc, event),
            Ev::CommandArrive { node, inc, reply, waiter, cmd } => self.command_arrive(node, inc, reply, waiter, cmd),
            Ev::ForwardAnswer { fwd, result } => self.forward_result(fwd, result),
            Ev::ForwardTimeout { fwd } => self.forward_result(fwd, Err(IoError::Timeout)),
            Ev::CheckDone { node, inc, result } => self.check_done(node, inc, result),
            Ev::ClientAnswer { sub, outcome } => self.client_outcome(sub, outcome),
            Ev::ClientTimeout { sub } => {
                self.client_outcome(sub, Outcome::Unavailable { reason: IoError::Timeout.to_string() });
            }
            Ev::Submit => self.workload_tick(),
            Ev::Retry { sub } => self.retry(sub),
            Ev::FaultTick => self.fault_tick(),
            Ev::ClogStart { gen, node } => self.clog_start(gen, node),
            Ev::AttemptFault { gen, node, inc, fault } => self.attempt_fault(gen, node, inc, fault),
            Ev::FaultEnd { gen, who, undo } => {
                if gen == self.faults.gen {
                    self.undo(who, undo);
                }
            }
            Ev::Heal => self.heal(),
            Ev::LivenessCheck => self.liveness_check(),
            Ev::Sink(e) => self.sink_event(e),
            Ev::Notify(e) => self.notify_event(e),
            Ev::Snap(e) => self.snap_event(e),
            Ev::Worker(e) => self.worker_event(e),
            Ev::Write(e) => self.write_event(e),
        }
    }

    /// Whether incarnation `inc` of engine slot `n` is the one running.
    fn alive(&self, n: usize, inc: u64) -> bool {
        self.nodes[n].is_current(inc)
    }

    /// Entry `seq` landed in the log: every role's followers read it after their own lags (the sinks' and the
    /// notifiers' checkers learn it first), and now and then a process's reader is checked (invariant 11).
    fn landed(&mut self, seq: u64) {
        self.follow_log::<EngineRole>(seq);
        self.sinks_log_landed(seq);
        self.notify_appended(seq);
        self.sample_reader();
    }

    /// Revision `rev` of the membership KV is on its way to every role's watchers.
    fn watched(&mut self, rev: u64) {
        self.watch::<EngineRole>(rev);
        self.watch::<SinkRole>(rev);
        self.watch::<NotifierRole>(rev);
    }

    /// Every process of the world: the engines, the sinks, the notifiers.
    fn processes(&self) -> impl Iterator<Item = Who> {
        let engines = (0..self.nodes.len()).map(Who::Engine);
        let sinks = (0..self.sinks.len()).map(Who::Sink);
        engines.chain(sinks).chain((0..self.notify.slots.len()).map(Who::Notifier))
    }
}
