//! Engine processes: the slots `e1`..`e7`, the config they run with, and what the simulator does for an
//! engine as its shell would: start a new incarnation, boot it (the watcher's snapshot, the log's backlog,
//! `CaughtUp`), step it (an input or its timer, then every output carried out and the timer re-armed), pause
//! and resume it, crash it, and let a leaving engine exit once idle. Outputs go to the concern they are for:
//! heartbeats to the store, proposals and appends to the log, forwards and replies to the network, checks to
//! the workers.

use super::log::brief_entry;
use super::process::Process;
use super::snapshots::Whose;
use super::{ms, Category, Ev, Phase, Sim, TICK};
use crate::params::{stream, Params, Stream};

use jaque_core::{
    CommandId, Engine, EngineConfig, Input, MemberId, MemberRef, MembershipOutput, Output, ReplyTo, Time,
};
use rand::Rng;
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
    /// The store's answers to its heartbeat puts come in the order of the puts.
    pub(super) hb_answers: super::process::Follow,
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

impl Sim {
    /// Starts (or restarts) the process in slot `n` as a new incarnation, from the latest snapshot if there is
    /// one: it follows the log from the position after it.
    pub fn restart(&mut self, n: usize) {
        self.nodes[n].begin(self.now);
        let cfg = config(&self.params, self.nodes[n].member());
        let engine = match self.start_reader(Whose::Engine(n)) {
            Some(reader) => {
                self.nodes[n].log.cursor = reader.position();
                Engine::with_reader(cfg, reader)
            }
            None => Engine::new(cfg),
        };
        let start = engine.reader().position();
        self.nodes[n].run(EngineRole {
            engine,
            hop0: BTreeSet::new(),
            last_epoch: 0,
            hole_since: None,
            in_group: false,
            fit_since: None,
            hb_answers: Default::default(),
        });
        let inc = self.nodes[n].inc;
        self.tr(|| format!("e{} starts as incarnation {inc}", n + 1));
        if start > 0 {
            self.check_agreement(n, start);
        }
        self.step(n, Some(Input::Start));
        let d = self.nodes[n].rng.random_range(0..=self.params.boot_delay_max_ms);
        self.after(d, Ev::Boot { node: n, inc });
    }

    /// The process dies: state lost, its key stays until the ttl.
    pub fn crash(&mut self, n: usize) {
        if self.nodes[n].is_running() {
            self.stats.crashes += 1;
            self.tr(|| format!("e{} crashes", n + 1));
            self.stop(n);
        }
    }

    fn stop(&mut self, n: usize) {
        let inc = self.nodes[n].inc;
        self.nodes[n].end();
        self.net.forget(n, inc);
    }

    /// A clean leave (SIGTERM): the engine deletes its key and exits once nothing is in flight.
    pub fn leave(&mut self, n: usize) {
        if !self.nodes[n].is_running() || self.nodes[n].is_leaving() || self.nodes[n].is_paused() {
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
        if !self.nodes[n].is_running() || self.nodes[n].is_paused() {
            return;
        }
        self.stats.pauses += 1;
        let until = self.now + Duration::from_millis(ms);
        self.nodes[n].paused_until = Some(until);
        self.note_dark(n);
        self.tr(|| format!("e{} pauses until {until}", n + 1));
        let inc = self.nodes[n].inc;
        self.push(until, Ev::Resume { node: n, inc });
    }

    pub(super) fn resume(&mut self, n: usize) {
        let held = self.nodes[n].resume();
        self.note_dark(n);
        self.tr(|| format!("e{} resumes", n + 1));
        // What waits in its buffers is handled first, then the timers that expired meanwhile.
        for ev in held {
            self.push(self.now, ev);
        }
        if let Some(t) = self.nodes[n].armed {
            let inc = self.nodes[n].inc;
            let at = self.nodes[n].global(t);
            self.push(at, Ev::Timer { node: n, inc, deadline: t });
        }
    }

    /// A restart scheduled by a fault (dropped once healed unless the heal issued it), or by the heal.
    pub(super) fn restart_event(&mut self, n: usize, healing: bool) {
        if self.phase != Phase::Safety && !healing {
            // The heal decided who comes back.
        } else if !self.nodes[n].is_running() {
            self.restart(n);
        } else if self.nodes[n].is_leaving() {
            // Still draining after a leave: come back once it has exited.
            self.after(1_000, Ev::Restart { node: n, healing });
        }
    }

    /// A leaving engine exits once idle, or after this long (the engine's reply timeout, a forward's, 1 s).
    pub(super) fn drain_limit_ms(&self) -> u64 {
        ms(self.core.reply_timeout) + self.params.forward_timeout_ms + 1_000
    }

    pub(super) fn exit_if_idle(&mut self, n: usize, inc: u64) {
        if !self.alive(n, inc) {
            return;
        }
        let idle = self.nodes[n].engine().is_some_and(|e| e.is_idle());
        let started = self.nodes[n].leave_started.unwrap_or(self.now);
        let limit = self.drain_limit_ms();
        if idle || self.now.saturating_since(started).as_millis() as u64 >= limit {
            self.tr(|| format!("e{} exits after leaving (idle={idle})", n + 1));
            self.stop(n);
        } else {
            self.after(TICK, Ev::ExitIfIdle { node: n, inc });
        }
    }

    pub(super) fn boot(&mut self, n: usize) {
        if !self.nodes[n].can_recv() {
            let inc = self.nodes[n].inc;
            self.after(500, Ev::Boot { node: n, inc });
            return;
        }
        // The watcher's snapshot: the last entry of every key, in revision order.
        for obs in self.store.snapshot() {
            self.step(n, Some(Input::Member(obs)));
        }
        self.nodes[n].members.cursor = self.store.rev();
        let end = self.log.len();
        self.nodes[n].booted = true;
        self.deliver_log(n, end);
        if self.violation.is_some() || !self.nodes[n].is_running() {
            return;
        }
        self.tr(|| format!("e{} caught up at log {end}", n + 1));
        self.step(n, Some(Input::CaughtUp));
    }

    pub(super) fn timer(&mut self, n: usize, inc: u64, deadline: Time) {
        if self.alive(n, inc) && self.nodes[n].armed == Some(deadline) {
            self.nodes[n].armed = None;
            self.step(n, None);
        }
    }

    /// One step of engine `n`: an input (or its timer), then every output carried out, invariants checked and
    /// the timer re-armed.
    pub(super) fn step(&mut self, n: usize, input: Option<Input>) {
        if self.violation.is_some() {
            return;
        }
        let now = self.nodes[n].local(self.now);
        self.stats.engine_steps += 1;
        if self.trace.is_some() {
            let line = match &input {
                Some(i) => format!("e{} <- {}", n + 1, brief_input(i)),
                // The timer that fired: the soonest deadline, the one it was armed at (nothing ran since).
                None => match self.nodes[n].engine().and_then(|e| e.poll_timeout()) {
                    Some((_, timer)) => format!("e{} <- timer {timer:?}", n + 1),
                    None => format!("e{} <- timer", n + 1),
                },
            };
            self.tr(|| line);
        }
        let role = self.nodes[n].role.as_mut().expect("step of a running engine");
        let engine = &mut role.engine;
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
        if epoch < role.last_epoch {
            let msg = format!("e{} went from epoch {} back to {epoch}", n + 1, role.last_epoch);
            self.fail(Category::Safety, "5 epochs only grow", msg);
            return;
        }
        role.last_epoch = epoch;
        role.hole_since = engine.needs_snapshot().and(role.hole_since.or(Some(self.now)));
        self.h(n as u64 ^ (outputs.len() as u64) << 8);
        for out in outputs {
            self.carry_out(n, out);
        }
        self.ingress_after_step(n);
        self.rearm(n);
    }

    fn rearm(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        let Some(engine) = node.engine() else { return };
        let t = engine.poll_timeout().map(|(t, _)| t);
        if t != node.armed {
            node.armed = t;
            if let Some(t) = t {
                let inc = node.inc;
                let at = node.global(t);
                self.push(at, Ev::Timer { node: n, inc, deadline: t });
            }
        }
    }

    fn carry_out(&mut self, n: usize, out: Output) {
        if self.trace.is_some() {
            let line = format!("e{} -> {}", n + 1, brief_output(&out));
            self.tr(|| line);
        }
        match out {
            Output::Membership(MembershipOutput::PutHeartbeat { bucket, member, ttl }) => {
                self.send_heartbeat(n, bucket, member, ttl)
            }
            Output::Membership(MembershipOutput::DeleteHeartbeat { bucket, member }) => {
                self.send_delete(n, bucket, member)
            }
            Output::ProposeEpoch { record, after_seq } => self.send_proposal(n, record, after_seq),
            Output::Append(event) => self.send_append(n, event),
            Output::Forward { id, to, cmd } => self.forward(n, id, to, cmd),
            Output::Reply { to: ReplyTo(to), outcome } => self.reply(n, to, outcome),
            Output::Claimed { to: ReplyTo(to) } => self.claim_answer(n, to, None),
            Output::Declined { to: ReplyTo(to), reason } => self.claim_answer(n, to, Some(reason)),
            Output::Dispatch(work) => self.dispatch_check(n, work),
            Output::WriteSnapshot(snapshot) => self.write_snapshot(n, snapshot),
            Output::Purge { below } => self.send_purge(n, below),
            Output::NeedSnapshot { covering } => self.need_snapshot(Whose::Engine(n), covering),
        }
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Log { seq, entry } => format!("log {seq} {}", brief_entry(entry)),
        Input::Member(o) => format!("member rev {} {:?}", o.rev, o.change),
        Input::Command { reply, cmd } => {
            format!("command {} {} on {} hop {} (caller {})", cmd.id, cmd.kind.name(), cmd.object, cmd.hop, reply.0)
        }
        Input::Restore(r) => format!("restore: the snapshot at {}", r.position()),
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
