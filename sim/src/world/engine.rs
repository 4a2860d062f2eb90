//! Engine processes: the slots `e1`..`e7`, the config they run with, and the engine's part of the life every
//! process lives (`lifecycle.rs`): its checks around a step (its own self-check, sampled beyond 200 objects;
//! epochs only grow), its ingress membership after a step, and its exit after a leave once idle (or after the
//! drain limit). Outputs go to the concern they are for: heartbeats to the store, proposals and appends to the
//! log, forwards and replies to the network, checks to the workers, snapshots to the snapshot store.

use super::checks::takeover::TakeoverStep;
use super::lifecycle::{machine, Act, Exit, Role};
use super::log::brief_entry;
use super::process::{Process, Who};
use super::{ms, Category, Sim};
use crate::params::{stream, Params, Stream};
use jaque_core::{Life, LifeOutput};

use jaque_core::{
    CommandId, Engine, EngineConfig, Input, LogReader, MemberId, MemberRef, MembershipOutput, Output, ReplyTo, Time,
    Timer,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::time::Duration;

/// What the simulator keeps for one running engine incarnation: the engine, and what the checks need to know
/// about that incarnation.
pub struct EngineRole {
    pub(super) engine: Engine,
    /// Command ids this incarnation received with hop 0 (the only ones it may forward).
    pub(super) hop0: BTreeSet<CommandId>,
    /// The highest epoch it was at after a step (epochs only grow).
    last_epoch: u64,
    /// Since when it waits at a hole in the log for a snapshot past it (it is not ready meanwhile).
    pub(super) hole_since: Option<Time>,
    /// Its shell is in the ingress queue group (as the server sees it, but for a drop: `ingress.rs`).
    pub(super) in_group: bool,
    /// Since when it has taken every claim promptly (invariant 12), if it does.
    pub(super) fit_since: Option<Time>,
}

/// One engine slot: a member id whose process may run, crash, pause, leave and come back.
pub type Node = Process<EngineRole>;

impl Process<EngineRole> {
    /// The running incarnation's engine.
    pub fn engine(&self) -> Option<&Engine> {
        self.role.as_ref().map(|r| &r.engine)
    }

    /// Running, booted and not leaving: a member that should be in the epoch record.
    pub fn is_serving(&self) -> bool {
        self.booted && self.engine().is_some_and(|e| !e.is_leaving())
    }
}

/// Engine slot `i` (member `e<i+1>`), not started, on its own clock and random stream.
pub(super) fn slot(params: &Params, i: usize) -> Node {
    let seed = params.seed;
    let clock = match params.clock_skew_max_ms as i64 {
        0 => 0,
        m => stream(seed, Stream::Clock, i as u64).random_range(-m..=m),
    };
    let id = MemberId::new(format!("e{}", i + 1)).expect("valid member id");
    Process::new(id, stream(seed, Stream::Node, i as u64), clock)
}

/// The config every simulated engine runs with: core's defaults, the seed's ttl, expiry lag, snapshots and
/// check batching.
pub(super) fn config(params: &Params, me: MemberRef) -> EngineConfig {
    let mut cfg = EngineConfig::new(me, Duration::from_millis(params.ttl_ms));
    cfg.expiry_lag = Duration::from_millis(params.expiry_lag_max_ms);
    cfg.snapshots = params.snapshots.config();
    cfg.check_batching = params.check_batching;
    cfg
}

machine!(Engine, Input, Output, Timer, reader: |e| Engine::reader(e), log_role: |_e| None);

impl Role for EngineRole {
    type Core = Engine;
    type Step = TakeoverStep;
    /// A leaving engine exits once idle, or after the drain limit.
    const EXIT: Exit = Exit::Polled;

    fn who(n: usize) -> Who {
        Who::Engine(n)
    }

    fn slots(sim: &Sim) -> &[Node] {
        &sim.nodes
    }

    fn slots_mut(sim: &mut Sim) -> &mut [Node] {
        &mut sim.nodes
    }

    fn core(&self) -> &Engine {
        &self.engine
    }

    fn core_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The world's network stream (the engines had the network to themselves).
    fn net(sim: &mut Sim) -> &mut ChaCha8Rng {
        &mut sim.net.rng
    }

    /// Drawn from the fault stream.
    fn back_at_heal(sim: &mut Sim, n: usize, up: usize) -> bool {
        !sim.nodes[n].is_running() && (up == 0 || sim.faults.rng.random_bool(sim.params.restart_at_heal))
    }

    /// From the snapshot's reader if it starts from one (`Engine::with_reader`).
    fn make(sim: &mut Sim, n: usize, reader: Option<LogReader>) -> (EngineRole, Option<LogReader>) {
        let cfg = config(&sim.params, sim.nodes[n].member());
        let engine = Engine::with_reader(cfg, reader.unwrap_or_default().speaking(sim.nodes[n].speaks));
        let role = EngineRole {
            engine,
            hop0: BTreeSet::new(),
            last_epoch: 0,
            hole_since: None,
            in_group: false,
            fit_since: None,
        };
        (role, None)
    }

    /// Started from a snapshot: it agrees with the oracle at the snapshot's position. A new incarnation still
    /// cut from NATS (its slot's cuts outlive a restart) does not answer the server from its start.
    fn started(sim: &mut Sim, n: usize) {
        let start = sim.nodes[n].engine().map_or(0, |e| e.reader().position());
        if start > 0 {
            sim.check_agreement(n, start);
        }
        sim.note_dark(n);
    }

    fn note(sim: &mut Sim, n: usize, act: Act) {
        if matches!(act, Act::Crash | Act::Pause | Act::Leave) {
            sim.takeover_forget(n);
        }
        match act {
            Act::Crash => sim.stats.crashes += 1,
            Act::Pause => sim.stats.pauses += 1,
            Act::Leave => sim.stats.leaves += 1,
            _ => {}
        }
    }

    /// Whether it answers NATS decides whether the server keeps it in the ingress queue group.
    fn links_changed(sim: &mut Sim, n: usize) {
        sim.note_dark(n);
    }

    fn clog_changed(sim: &mut Sim, n: usize) {
        sim.note_fitness(n);
    }

    /// Whoever waited on it learns by timeout: nothing will answer.
    fn ending(sim: &mut Sim, n: usize) {
        let inc = sim.nodes[n].inc;
        sim.net.forget(n, inc);
    }

    /// When the core says so: once idle, or at its leave deadline (`EngineConfig::leave_timeout`).
    fn may_exit(sim: &Sim, n: usize) -> bool {
        sim.nodes[n].engine().is_some_and(|e| e.is_done())
    }

    fn before_step(sim: &mut Sim, n: usize, input: &Option<Input>) -> TakeoverStep {
        sim.stats.engine_steps += 1;
        sim.takeover_before(n, input)
    }

    /// Its self-check (it costs O(objects): with many objects it is sampled, as VOPR checks the expensive ones
    /// on a sample of ticks), epochs only growing, and whether it waits at a hole.
    fn after_step(sim: &mut Sim, n: usize, takeover: TakeoverStep) -> bool {
        let role = sim.nodes[n].role.as_mut().expect("a running engine");
        let engine = &role.engine;
        let objects = engine.reader().objects().len() as u64;
        let sample = if objects <= 200 { 1 } else { objects };
        let check = sim.stats.engine_steps.is_multiple_of(sample);
        if let Err(e) = if check { engine.check_invariants() } else { Ok(()) } {
            let msg = format!("e{}: {e}", n + 1);
            sim.fail(Category::Safety, "engine self-check", msg);
            return false;
        }
        let epoch = engine.epoch();
        if epoch < role.last_epoch {
            let msg = format!("e{} went from epoch {} back to {epoch}", n + 1, role.last_epoch);
            sim.fail(Category::Safety, "5 epochs only grow", msg);
            return false;
        }
        role.last_epoch = epoch;
        role.hole_since = engine.needs_snapshot().and(role.hole_since.or(Some(sim.now)));
        sim.takeover_after(n, takeover)
    }

    fn step_hash(n: usize, outputs: usize) -> u64 {
        n as u64 ^ (outputs as u64) << 8
    }

    fn carry_out(sim: &mut Sim, n: usize, out: Output) {
        match out {
            Output::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { bucket, member, ttl })) => {
                sim.send_heartbeat(n, bucket, member, ttl)
            }
            Output::Life(LifeOutput::Membership(MembershipOutput::DeleteHeartbeat { bucket, member })) => {
                sim.send_delete(n, bucket, member)
            }
            Output::ProposeEpoch { record, after_seq } => sim.send_proposal(n, record, after_seq),
            Output::Append(event) => sim.send_append(n, event),
            Output::Forward { id, to, cmd } => sim.forward(n, id, to, cmd),
            Output::Reply { to: ReplyTo(to), outcome } => sim.reply(n, to, outcome),
            Output::Claimed { to: ReplyTo(to) } => sim.claim_answer(n, to, None),
            Output::Declined { to: ReplyTo(to), reason } => sim.claim_answer(n, to, Some(reason)),
            Output::Dispatch(work) => {
                sim.takeover_dispatched(n, &work.object);
                sim.dispatch_check(n, work)
            }
            Output::WriteSnapshot(snapshot) => sim.write_snapshot(n, snapshot),
            Output::Purge { below } => sim.send_purge(n, below),
            Output::Life(LifeOutput::NeedSnapshot { covering }) => sim.need_snapshot(Who::Engine(n), covering),
        }
    }

    /// Its shell joins or leaves the ingress queue group as its core says.
    fn stepped(sim: &mut Sim, n: usize) {
        sim.ingress_after_step(n);
    }

    /// Agreement, if it read the entry (one past a hole it does not read: it waits for a snapshot).
    fn read(sim: &mut Sim, n: usize, seq: u64) {
        if sim.nodes[n].engine().is_some_and(|e| e.reader().position() == seq) {
            sim.check_agreement(n, seq);
        }
    }
}

impl Sim {
    /// One step of engine `n`: an input, or its timer.
    pub(super) fn step(&mut self, n: usize, input: Option<Input>) {
        self.step_as::<EngineRole>(n, input)
    }

    /// A leaving engine has exited at the latest this long after its leave: its core's leave deadline
    /// (`EngineConfig::leave_timeout`, the reply timeout + 2 s) is never later, whatever the network's forward
    /// timeout. The faults and the workload budget wait this long.
    pub(super) fn drain_limit_ms(&self) -> u64 {
        ms(self.core.reply_timeout) + self.params.forward_timeout_ms + 1_000
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Life(Life::Log { seq, entry }) => format!("log {seq} {}", brief_entry(entry)),
        Input::Life(Life::Member(o)) => format!("member rev {} {:?}", o.rev, o.change),
        Input::Command { reply, cmd } => {
            format!("command {} {} on {} hop {} (caller {})", cmd.id, cmd.kind.name(), cmd.object, cmd.hop, reply.0)
        }
        Input::Life(Life::Restore(r)) => format!("restore: the snapshot at {}", r.position()),
        other => format!("{other:?}"),
    }
}

fn brief_output(o: &Output) -> String {
    match o {
        Output::Append(ev) => format!("append {}", super::log::brief_event(ev)),
        Output::Forward { id, to, cmd } => format!("forward #{} {} to {to}", id.0, cmd.id),
        Output::Dispatch(w) => format!("dispatch check {} of {}", w.check_id, w.object),
        Output::WriteSnapshot(s) => format!("write snapshot at {}", s.position),
        other => format!("{other:?}"),
    }
}
