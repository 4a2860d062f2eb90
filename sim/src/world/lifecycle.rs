//! The one life every member process goes through, whatever its role, and the contract a role fulfils so the
//! world can drive it: [`Machine`] (what the simulator needs of a core state machine) and [`Role`] (what a role
//! adds around it: where its processes live, its random streams, its config, its checks around a step, and
//! what it does with its outputs).
//!
//! The life, as the shell lives it: **start** a new incarnation (from the latest snapshot if there is one, handed
//! in before `Start`), **boot** (the watcher's snapshot, the log's backlog, `CaughtUp`), **step** (an input or
//! its timer, then every output carried out and the timer re-armed), **follow** the log and the membership
//! watcher (each delivery after its own lag, sometimes twice, in order, catching up after a cut), **pause** and
//! **resume** (nothing handled meanwhile: what reaches it waits in its buffers, then the timers that expired),
//! **crash** (state lost), and a clean **leave** that ends in an **exit** once the role says it may. The
//! faults that hold a process are `faults.rs`'s; the heal of one process is here.
//!
//! A new role is a `Process<R>` slot per member, an `impl Machine` for its core type and an `impl Role` for its
//! state: its outputs are the only code of its own the world needs.

use super::process::{Process, Who};
use super::{Ev, Phase, Sim, TICK};
use jaque_core::role::LogRole;
use jaque_core::{Life, LogReader, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::fmt::Debug;
use std::time::Duration;

/// What the simulator needs of a core state machine (`Engine`, `Sink`, `Notifier`): sans-IO, time as a value.
pub(super) trait Machine {
    type Input;
    type Output;
    type Timer: Debug;
    fn handle(&mut self, now: Time, input: Self::Input);
    fn handle_timeout(&mut self, now: Time);
    fn poll_output(&mut self) -> Option<Self::Output>;
    fn poll_timeout(&self) -> Option<(Time, Self::Timer)>;
    /// The role's input for an input of the life (core's `Life`, which every role's input carries).
    fn life(input: Life) -> Self::Input;
    /// Its log reader.
    fn reader(&self) -> &LogReader;
    /// The log-reading role underneath (sinks and notifiers), whose resumes say which objects lost history.
    fn log_role(&self) -> Option<&LogRole> {
        None
    }
    /// One trace line's worth of an input, of an output.
    fn brief_input(input: &Self::Input) -> String;
    fn brief_output(output: &Self::Output) -> String;
}

/// `impl Machine` for a core type: the three cores have the same sans-IO shape and take the inputs of the life
/// as `Input::Life`, so the adapter is written once. `$reader` and `$log_role` say where the core keeps its reader and its log-reading role; the trace lines
/// are the invoking module's `brief_input` and `brief_output`.
macro_rules! machine {
    ($core:ty, $input:ty, $output:ty, $timer:ty, reader: |$c:ident| $reader:expr, log_role: |$l:ident| $log_role:expr) => {
        impl $crate::world::lifecycle::Machine for $core {
            type Input = $input;
            type Output = $output;
            type Timer = $timer;

            fn handle(&mut self, now: jaque_core::Time, input: $input) {
                <$core>::handle(self, now, input)
            }

            fn handle_timeout(&mut self, now: jaque_core::Time) {
                <$core>::handle_timeout(self, now)
            }

            fn poll_output(&mut self) -> Option<$output> {
                <$core>::poll_output(self)
            }

            fn poll_timeout(&self) -> Option<(jaque_core::Time, $timer)> {
                <$core>::poll_timeout(self)
            }

            fn life(input: jaque_core::Life) -> $input {
                <$input>::Life(input)
            }

            fn reader(&self) -> &jaque_core::LogReader {
                let $c = self;
                $reader
            }

            fn log_role(&self) -> Option<&jaque_core::role::LogRole> {
                let $l = self;
                $log_role
            }

            fn brief_input(i: &$input) -> String {
                brief_input(i)
            }

            fn brief_output(o: &$output) -> String {
                brief_output(o)
            }
        }
    };
}
pub(super) use machine;

/// The core input of role `R`.
pub(super) type In<R> = <<R as Role>::Core as Machine>::Input;

/// Something done to a process that its role counts or notes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Act {
    Crash,
    Pause,
    Leave,
    CutStore,
    CutPeer,
    HeartbeatLoss,
    Clog,
}

/// When a leaving process exits: polled every `TICK` until the role says it may, or at the end of the step
/// that leaves its core done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Exit {
    Polled,
    AfterStep,
}

/// What the world needs of a role to drive its processes through one life. Each role's streams are its own, so
/// a role's draws never move another's; the hashes and codes are those the roles had before they shared a life.
pub(super) trait Role: Sized {
    /// The core state machine a process of the role runs.
    type Core: Machine;
    /// What the role keeps from before its core handles an input to after (counters to compare, the request an
    /// answer is for).
    type Step;
    /// When a leaving process of the role exits.
    const EXIT: Exit;

    fn who(slot: usize) -> Who;
    fn slots(sim: &Sim) -> &[Process<Self>];
    fn slots_mut(sim: &mut Sim) -> &mut [Process<Self>];
    fn core(&self) -> &Self::Core;
    fn core_mut(&mut self) -> &mut Self::Core;

    /// The stream one hop's latency of its processes draws from (and a clogged one's hold).
    fn net(sim: &mut Sim) -> &mut ChaCha8Rng;
    /// The stream a duplicate delivery to process `slot` draws from.
    fn duplicates(sim: &mut Sim, _slot: usize) -> &mut ChaCha8Rng {
        Self::net(sim)
    }
    /// Whether process `slot` comes back at the heal (`up`: how many already run): one that is down does if
    /// none runs, or else by a draw from the role's stream.
    fn back_at_heal(sim: &mut Sim, slot: usize, up: usize) -> bool;

    /// A new incarnation's state in slot `slot`, from the reader it starts with (`None`: from the log's first
    /// position); returns the reader still to hand in as `Restore` before `Start`.
    fn make(sim: &mut Sim, slot: usize, reader: Option<LogReader>) -> (Self, Option<LogReader>);
    /// After a start, before `Start` is handed in.
    fn started(_sim: &mut Sim, _slot: usize) {}
    /// Counts or notes an act done to process `slot`.
    fn note(_sim: &mut Sim, _slot: usize, _act: Act) {}
    /// Process `slot` was paused, resumed, cut or healed: whether it answers NATS changed.
    fn links_changed(_sim: &mut Sim, _slot: usize) {}
    /// Process `slot` was clogged or unclogged.
    fn clog_changed(_sim: &mut Sim, _slot: usize) {}
    /// Process `slot` is about to end (crash or exit): its role state is still there.
    fn ending(_sim: &mut Sim, _slot: usize) {}
    /// Whether leaving process `slot` may exit now.
    fn may_exit(sim: &Sim, slot: usize) -> bool;

    /// Before process `slot`'s core handles `input` (`None`: its timer): the step is counted.
    fn before_step(sim: &mut Sim, slot: usize, input: &Option<In<Self>>) -> Self::Step;
    /// After its core handled it and its outputs were drained: the role's checks (false: a violation).
    fn after_step(sim: &mut Sim, slot: usize, step: Self::Step) -> bool;
    /// What the trace hash records of a step.
    fn step_hash(slot: usize, outputs: usize) -> u64;
    fn carry_out(sim: &mut Sim, slot: usize, output: <Self::Core as Machine>::Output);
    /// After the outputs were carried out and the timer re-armed.
    fn stepped(_sim: &mut Sim, _slot: usize) {}
    /// Process `slot` was handed the log entry at `seq`.
    fn read(_sim: &mut Sim, _slot: usize, _seq: u64) {}
}

/// The lifecycle events of one process (inside `Ev::Life`, with whose they are). Those for an incarnation that
/// is gone are dropped; those for a paused one wait in its buffers, but its timer, which is re-armed on resume.
#[derive(Clone, Debug)]
pub(super) enum LifeEv {
    /// A (re)start. `healing`: issued by the heal; other restarts, scheduled by faults, are dropped once healed.
    Restart { healing: bool },
    /// The watcher's snapshot and the log's backlog are due.
    Boot { inc: u64 },
    /// Its one timer, armed at `deadline` on its own clock.
    Timer { inc: u64, deadline: Time },
    /// Its log follower has entries up to `upto` for it.
    LogDeliver { inc: u64, upto: u64 },
    /// Its membership watcher has revisions up to `upto` for it.
    MemberDeliver { inc: u64, upto: u64 },
    /// Its pause is over.
    Resume { inc: u64 },
    /// A leaving process's exit is due (a role whose exit is polled).
    Exit { inc: u64 },
    /// The store's answer to one of its heartbeat puts (answers reach it in the order of the puts).
    HeartbeatAck { inc: u64, ok: bool },
    /// The operator replaces the process by this build (mixed versions): a clean leave, then a start of the
    /// new build.
    Upgrade,
}

impl LifeEv {
    /// The incarnation the event is for, if it waits while that process is paused.
    pub fn held_for(&self) -> Option<u64> {
        match self {
            LifeEv::Boot { inc }
            | LifeEv::Timer { inc, .. }
            | LifeEv::LogDeliver { inc, .. }
            | LifeEv::MemberDeliver { inc, .. }
            | LifeEv::HeartbeatAck { inc, .. } => Some(*inc),
            LifeEv::Restart { .. } | LifeEv::Resume { .. } | LifeEv::Exit { .. } | LifeEv::Upgrade => None,
        }
    }

    /// What the trace hash records of the event: the code each role's own event had before the roles shared
    /// one life (a notifier's hashes its family's code, 28, then its own), so the hash has not moved.
    pub fn code(&self, who: Who) -> (u64, Option<u64>) {
        let (engine, sink, notifier) = match self {
            LifeEv::Timer { .. } => (1, 101, 103),
            LifeEv::Boot { .. } => (2, 102, 102),
            LifeEv::LogDeliver { .. } => (3, 103, 104),
            LifeEv::MemberDeliver { .. } => (4, 104, 105),
            LifeEv::Resume { .. } => (22, 110, 110),
            LifeEv::Restart { .. } => (23, 109, 101),
            // A sink exits at the end of the step that leaves it done: it never has this event.
            LifeEv::Exit { .. } => (24, 114, 111),
            // Each role's answer had an event of its own (the notifier's was its generic answer, 106).
            LifeEv::HeartbeatAck { .. } => (29, 114, 106),
            LifeEv::Upgrade => (30, 115, 116),
        };
        match who {
            Who::Engine(_) => (engine, None),
            Who::Sink(_) => (sink, None),
            Who::Notifier(_) => (28, Some(notifier)),
        }
    }
}

/// Runs `$body` with `$R` the role of process `$who` and `$slot` its slot: one generic call for a process of any
/// role.
macro_rules! by_role {
    ($who:expr, |$R:ident, $slot:ident| $body:expr) => {
        match $who {
            $crate::world::process::Who::Engine($slot) => {
                type $R = $crate::world::engine::EngineRole;
                $body
            }
            $crate::world::process::Who::Sink($slot) => {
                type $R = $crate::world::sink::SinkRole;
                $body
            }
            $crate::world::process::Who::Notifier($slot) => {
                type $R = $crate::world::notifier::NotifierRole;
                $body
            }
        }
    };
}
pub(super) use by_role;

impl Sim {
    // ---- the public API of scenarios and tests: one name for one act, whatever the role ----

    /// Starts (or restarts) the process `who` as a new incarnation, from the latest snapshot if there is one: it
    /// follows the log from the position after it.
    pub fn start(&mut self, who: Who) {
        by_role!(who, |R, slot| self.start_as::<R>(slot))
    }

    /// The process dies: state lost, its key stays until the ttl (a request it sent may still land).
    pub fn crash(&mut self, who: Who) {
        by_role!(who, |R, slot| self.crash_as::<R>(slot))
    }

    /// Mixed versions: the operator replaces the process by this build (a clean leave, then a start).
    pub fn upgrade(&mut self, who: Who) {
        by_role!(who, |R, slot| self.upgrade_as::<R>(slot))
    }

    /// The cluster format the build of process `who` speaks.
    pub fn speaks(&self, who: Who) -> u32 {
        by_role!(who, |R, slot| R::slots(self)[slot].speaks)
    }

    /// A clean leave (SIGTERM): the process deletes its key, finishes what its role finishes, and exits.
    pub fn leave(&mut self, who: Who) {
        by_role!(who, |R, slot| self.leave_as::<R>(slot))
    }

    /// The process handles nothing for `ms`; what reaches it meanwhile waits in its buffers.
    pub fn pause(&mut self, who: Who, ms: u64) {
        by_role!(who, |R, slot| self.pause_as::<R>(slot, ms))
    }

    /// Scenarios: hold the process's log follower (it reads nothing new, a slow reader), or release it.
    pub fn hold_log(&mut self, who: Who, held: bool) {
        by_role!(who, |R, slot| {
            R::slots_mut(self)[slot].log_held = held;
            if !held {
                self.catch_up::<R>(slot);
            }
        })
    }

    /// Scenarios: hold the process's membership watcher (it sees no change, so it keeps its view of who owns
    /// what), or release it.
    pub fn hold_watch(&mut self, who: Who, held: bool) {
        by_role!(who, |R, slot| {
            R::slots_mut(self)[slot].watch_held = held;
            if !held {
                self.catch_up::<R>(slot);
            }
        })
    }

    // ---- routing ----

    /// A lifecycle event of process `who`.
    pub(super) fn life_event(&mut self, who: Who, ev: LifeEv) {
        by_role!(who, |R, slot| self.life_event_as::<R>(slot, ev))
    }

    /// A paused process handles nothing: an event for it waits in its buffers (its timer is re-armed on
    /// resume). Returns the event if it is to be dispatched now.
    pub(super) fn hold_if_paused(&mut self, ev: Ev) -> Option<Ev> {
        let Some((who, inc)) = ev.held_for() else { return Some(ev) };
        by_role!(who, |R, slot| {
            let p = &mut R::slots_mut(self)[slot];
            if !(p.is_current(inc) && p.is_paused()) {
                return Some(ev);
            }
            if !matches!(ev, Ev::Life(_, LifeEv::Timer { .. })) {
                p.hold(ev);
            }
            None
        })
    }

    /// Whether process `who` runs.
    pub(super) fn is_running(&self, who: Who) -> bool {
        by_role!(who, |R, slot| R::slots(self)[slot].is_running())
    }

    /// Whether process `who`'s incarnation `inc` is the one running.
    pub(super) fn is_current(&self, who: Who, inc: u64) -> bool {
        by_role!(who, |R, slot| R::slots(self)[slot].is_current(inc))
    }

    fn life_event_as<R: Role>(&mut self, slot: usize, ev: LifeEv) {
        let p = &R::slots(self)[slot];
        match ev {
            LifeEv::Restart { healing } => {
                if self.phase != Phase::Safety && !healing {
                    // The heal decided who comes back.
                } else if !p.is_running() {
                    self.start_as::<R>(slot);
                } else if p.is_leaving() {
                    // Still draining after a leave: come back once it has exited.
                    self.after(1_000, Ev::Life(R::who(slot), LifeEv::Restart { healing }));
                }
            }
            LifeEv::Boot { inc } => {
                if p.is_current(inc) {
                    self.boot::<R>(slot);
                }
            }
            LifeEv::Timer { inc, deadline } => {
                if p.is_current(inc) && p.armed == Some(deadline) {
                    R::slots_mut(self)[slot].armed = None;
                    self.step_as::<R>(slot, None);
                }
            }
            LifeEv::LogDeliver { inc, upto } => {
                if p.is_current(inc) && p.booted && p.can_recv() && !p.log_held {
                    self.deliver_log::<R>(slot, upto);
                }
            }
            LifeEv::MemberDeliver { inc, upto } => {
                if p.is_current(inc) && p.booted && p.can_recv() && !p.watch_held {
                    self.deliver_members::<R>(slot, upto);
                }
            }
            LifeEv::Resume { inc } => {
                if p.is_current(inc) && p.pause_over(self.now) {
                    self.resume::<R>(slot);
                }
            }
            LifeEv::Exit { inc } => self.exit_if_done::<R>(slot, inc),
            LifeEv::Upgrade => self.upgrade_as::<R>(slot),
            LifeEv::HeartbeatAck { inc, ok } => {
                if p.is_current(inc) {
                    self.step_life::<R>(slot, Life::HeartbeatWritten { ok });
                }
            }
        }
    }

    /// The store answers process `slot`'s heartbeat put `after_ms` from now (`ok`: the key landed and the
    /// answer came back in time), in the order of its puts, as the shell hands every put's answer in.
    pub(super) fn answer_heartbeat<R: Role>(&mut self, slot: usize, after_ms: u64, ok: bool) {
        let at = self.now + Duration::from_millis(after_ms);
        let p = &mut R::slots_mut(self)[slot];
        if p.is_running() {
            let (inc, at) = (p.inc, p.hb_answers.schedule(at));
            self.push(at, Ev::Life(R::who(slot), LifeEv::HeartbeatAck { inc, ok }));
        }
    }

    // ---- the life ----

    /// Mixed versions: the process is replaced by this build. Its next start is this build's; a running one
    /// leaves cleanly first (a paused one is replaced once it runs again), and comes back once it has exited.
    fn upgrade_as<R: Role>(&mut self, slot: usize) {
        let who = R::who(slot);
        let p = &mut R::slots_mut(self)[slot];
        p.upgrade = true;
        if p.is_paused() {
            self.after(1_000, Ev::Life(who, LifeEv::Upgrade));
            return;
        }
        self.stats.versions.upgrades += 1;
        self.tr(|| format!("{who} is replaced by this build"));
        self.leave_as::<R>(slot);
        self.after(TICK, Ev::Life(who, LifeEv::Restart { healing: true }));
    }

    /// A process whose reader stopped at an entry its build cannot read leaves on its own (its core said so):
    /// the world exits it once it is done, as the shell does.
    fn left_on_its_own<R: Role>(&mut self, slot: usize) {
        let p = &R::slots(self)[slot];
        let blocked = p.role.as_ref().is_some_and(|r| r.core().reader().blocked().is_some());
        if !blocked || p.leave_started.is_some() {
            return;
        }
        self.stats.versions.blocked += 1;
        R::note(self, slot, Act::Leave);
        R::slots_mut(self)[slot].leave_started = Some(self.now);
        let (who, inc) = (R::who(slot), R::slots(self)[slot].inc);
        self.tr(|| format!("{who} stops at an entry its build cannot read, and leaves"));
        if R::EXIT == Exit::Polled {
            self.after(TICK, Ev::Life(who, LifeEv::Exit { inc }));
        }
    }

    pub(super) fn start_as<R: Role>(&mut self, slot: usize) {
        let who = R::who(slot);
        let now = self.now;
        R::slots_mut(self)[slot].begin(now);
        let reader = self.start_reader(who);
        if let Some(r) = &reader {
            R::slots_mut(self)[slot].log.cursor = r.position();
        }
        let (role, restore) = R::make(self, slot, reader);
        R::slots_mut(self)[slot].run(role);
        let inc = R::slots(self)[slot].inc;
        self.tr(|| format!("{who} starts as incarnation {inc}"));
        R::started(self, slot);
        if let Some(reader) = restore {
            self.step_as::<R>(slot, Some(R::Core::life(Life::Restore(Box::new(reader)))));
        }
        self.step_as::<R>(slot, Some(R::Core::life(Life::Start)));
        let max = self.params.boot_delay_max_ms;
        let d = R::slots_mut(self)[slot].rng.random_range(0..=max);
        self.after(d, Ev::Life(who, LifeEv::Boot { inc }));
    }

    /// The watcher's snapshot (the last entry of every key, in revision order), the log's backlog, `CaughtUp`;
    /// a process that cannot hear the store tries again later.
    fn boot<R: Role>(&mut self, slot: usize) {
        let who = R::who(slot);
        if !R::slots(self)[slot].can_recv() {
            let inc = R::slots(self)[slot].inc;
            self.after(500, Ev::Life(who, LifeEv::Boot { inc }));
            return;
        }
        for obs in self.store.snapshot() {
            self.step_as::<R>(slot, Some(R::Core::life(Life::Member(obs))));
        }
        R::slots_mut(self)[slot].members.cursor = self.store.rev();
        let end = self.log.len();
        R::slots_mut(self)[slot].booted = true;
        self.deliver_log::<R>(slot, end);
        if self.violation.is_some() || !R::slots(self)[slot].is_running() {
            return;
        }
        self.tr(|| format!("{who} caught up at log {end}"));
        self.step_as::<R>(slot, Some(R::Core::life(Life::CaughtUp)));
    }

    /// One step of process `slot`: an input (or its timer), the role's checks, every output carried out, the
    /// timer re-armed.
    pub(super) fn step_as<R: Role>(&mut self, slot: usize, input: Option<In<R>>) {
        if self.violation.is_some() {
            return;
        }
        let who = R::who(slot);
        let now = R::slots(self)[slot].local(self.now);
        let before = R::before_step(self, slot, &input);
        if self.trace.is_some() {
            let line = match &input {
                Some(i) => format!("{who} <- {}", R::Core::brief_input(i)),
                // The timer that fired: the soonest deadline, the one it was armed at (nothing ran since).
                None => match R::slots(self)[slot].role.as_ref().and_then(|r| r.core().poll_timeout()) {
                    Some((_, timer)) => format!("{who} <- timer {timer:?}"),
                    None => format!("{who} <- timer"),
                },
            };
            self.tr(|| line);
        }
        let role = R::slots_mut(self)[slot].role.as_mut().expect("step of a running process");
        let core = role.core_mut();
        match input {
            Some(i) => core.handle(now, i),
            None => core.handle_timeout(now),
        }
        let outputs: Vec<_> = std::iter::from_fn(|| core.poll_output()).collect();
        if !R::after_step(self, slot, before) {
            return;
        }
        self.h(R::step_hash(slot, outputs.len()));
        for out in outputs {
            if self.trace.is_some() {
                let line = format!("{who} -> {}", R::Core::brief_output(&out));
                self.tr(|| line);
            }
            R::carry_out(self, slot, out);
        }
        self.rearm::<R>(slot);
        R::stepped(self, slot);
        self.left_on_its_own::<R>(slot);
        if R::EXIT == Exit::AfterStep && R::may_exit(self, slot) {
            self.exit::<R>(slot);
        }
    }

    /// The step of an input of the life.
    pub(super) fn step_life<R: Role>(&mut self, slot: usize, input: Life) {
        self.step_as::<R>(slot, Some(R::Core::life(input)));
    }

    /// Arms the process's one timer at its core's next deadline, if that moved.
    fn rearm<R: Role>(&mut self, slot: usize) {
        let p = &mut R::slots_mut(self)[slot];
        let Some(role) = p.role.as_ref() else { return };
        let t = role.core().poll_timeout().map(|(t, _)| t);
        if t != p.armed {
            p.armed = t;
            if let Some(t) = t {
                let inc = p.inc;
                let at = p.global(t);
                self.push(at, Ev::Life(R::who(slot), LifeEv::Timer { inc, deadline: t }));
            }
        }
    }

    /// Entry `seq` landed: every following process of the role reads it after its own lag.
    pub(super) fn follow_log<R: Role>(&mut self, seq: u64) {
        for slot in 0..R::slots(self).len() {
            if R::slots(self)[slot].follows() {
                let max = self.params.log_lag_max_ms;
                let lag = R::slots_mut(self)[slot].rng.random_range(0..=max) + self.hop::<R>(slot);
                let due = self.now + Duration::from_millis(lag);
                let at = R::slots_mut(self)[slot].log.schedule(due);
                let inc = R::slots(self)[slot].inc;
                self.push(at, Ev::Life(R::who(slot), LifeEv::LogDeliver { inc, upto: seq }));
            }
        }
    }

    /// Revision `rev` of the membership KV is on its way to every following process's watcher of the role.
    pub(super) fn watch<R: Role>(&mut self, rev: u64) {
        for slot in 0..R::slots(self).len() {
            if R::slots(self)[slot].follows() {
                let max = self.params.watch_lag_max_ms;
                let lag = R::slots_mut(self)[slot].rng.random_range(0..=max) + self.hop::<R>(slot);
                let due = self.now + Duration::from_millis(lag);
                let at = R::slots_mut(self)[slot].members.schedule(due);
                let inc = R::slots(self)[slot].inc;
                self.push(at, Ev::Life(R::who(slot), LifeEv::MemberDeliver { inc, upto: rev }));
            }
        }
    }

    /// The log follower of process `slot` hands it every entry up to `upto` it has not read, passing over purged
    /// ones (sometimes the last twice).
    fn deliver_log<R: Role>(&mut self, slot: usize, upto: u64) {
        let upto = upto.min(self.log.len());
        while R::slots(self)[slot].log.cursor < upto && self.violation.is_none() && R::slots(self)[slot].is_running() {
            let seq = R::slots(self)[slot].log.cursor + 1;
            R::slots_mut(self)[slot].log.cursor = seq;
            if !self.log.present(seq) {
                continue;
            }
            let entry = self.log.entry(seq).clone();
            self.step_life::<R>(slot, Life::Log { seq, entry });
            R::read(self, slot, seq);
            self.check_policy::<R>(slot, seq);
        }
        let cur = R::slots(self)[slot].log.cursor;
        if cur > 0 && R::slots(self)[slot].is_running() && self.duplicate::<R>(slot) && self.log.present(cur) {
            let entry = self.log.entry(cur).clone();
            self.step_life::<R>(slot, Life::Log { seq: cur, entry });
            R::read(self, slot, cur);
        }
    }

    /// The watcher of process `slot` hands it every revision up to `upto` it has not seen (sometimes the last
    /// twice); a revision of another key than a member's (a notifier's record) is no member change.
    fn deliver_members<R: Role>(&mut self, slot: usize, upto: u64) {
        let upto = upto.min(self.store.rev());
        while R::slots(self)[slot].members.cursor < upto
            && self.violation.is_none()
            && R::slots(self)[slot].is_running()
        {
            let rev = R::slots(self)[slot].members.cursor + 1;
            R::slots_mut(self)[slot].members.cursor = rev;
            if let Some(obs) = self.store.observation(rev) {
                self.step_life::<R>(slot, Life::Member(obs));
            }
        }
        let cur = R::slots(self)[slot].members.cursor;
        if cur > 0 && R::slots(self)[slot].is_running() && self.duplicate::<R>(slot) {
            if let Some(obs) = self.store.observation(cur) {
                self.step_life::<R>(slot, Life::Member(obs));
            }
        }
    }

    /// Reading resumes after a cut (or a held follower is released): the watcher and the log follower catch up.
    pub(super) fn catch_up<R: Role>(&mut self, slot: usize) {
        if !R::slots(self)[slot].follows() {
            return;
        }
        let due = self.now + Duration::from_millis(self.hop::<R>(slot));
        let at = R::slots_mut(self)[slot].log.schedule(due);
        R::slots_mut(self)[slot].members.schedule(at);
        let inc = R::slots(self)[slot].inc;
        let (log, rev) = (self.log.len(), self.store.rev());
        self.push(at, Ev::Life(R::who(slot), LifeEv::MemberDeliver { inc, upto: rev }));
        self.push(at, Ev::Life(R::who(slot), LifeEv::LogDeliver { inc, upto: log }));
    }

    /// One message's latency through NATS to or from process `slot` (a clogged one holds messages for seconds).
    pub(super) fn hop<R: Role>(&mut self, slot: usize) -> u64 {
        let max = self.params.net_delay_max_ms;
        let clogged = R::slots(self)[slot].clog > 0;
        let mut d = 1 + R::net(self).random_range(0..=max);
        if clogged {
            d += R::net(self).random_range(500..=3_000);
        }
        d
    }

    /// A duplicate delivery to process `slot`, in the safety phase.
    fn duplicate<R: Role>(&mut self, slot: usize) -> bool {
        let p = self.params.duplicate;
        self.phase == Phase::Safety && p > 0.0 && R::duplicates(self, slot).random_bool(p)
    }

    pub(super) fn pause_as<R: Role>(&mut self, slot: usize, ms: u64) {
        let p = &R::slots(self)[slot];
        if !p.is_running() || p.is_paused() {
            return;
        }
        R::note(self, slot, Act::Pause);
        let until = self.now + Duration::from_millis(ms);
        R::slots_mut(self)[slot].paused_until = Some(until);
        R::links_changed(self, slot);
        let who = R::who(slot);
        self.tr(|| format!("{who} pauses until {until}"));
        let inc = R::slots(self)[slot].inc;
        self.push(until, Ev::Life(who, LifeEv::Resume { inc }));
    }

    /// What waits in its buffers is handled first, then the timers that expired meanwhile.
    pub(super) fn resume<R: Role>(&mut self, slot: usize) {
        let held = R::slots_mut(self)[slot].resume();
        R::links_changed(self, slot);
        let who = R::who(slot);
        self.tr(|| format!("{who} resumes"));
        for ev in held {
            self.push(self.now, ev);
        }
        let p = &R::slots(self)[slot];
        if let Some(t) = p.armed {
            let (inc, at) = (p.inc, p.global(t));
            self.push(at, Ev::Life(who, LifeEv::Timer { inc, deadline: t }));
        }
    }

    pub(super) fn crash_as<R: Role>(&mut self, slot: usize) {
        if R::slots(self)[slot].is_running() {
            R::note(self, slot, Act::Crash);
            let who = R::who(slot);
            self.tr(|| format!("{who} crashes"));
            self.stop::<R>(slot);
        }
    }

    /// The process is gone (crash or exit): its role state and its buffers with it.
    fn stop<R: Role>(&mut self, slot: usize) {
        R::ending(self, slot);
        R::slots_mut(self)[slot].end();
    }

    pub(super) fn leave_as<R: Role>(&mut self, slot: usize) {
        let p = &R::slots(self)[slot];
        if !p.is_running() || p.is_leaving() || p.is_paused() {
            return;
        }
        R::note(self, slot, Act::Leave);
        R::slots_mut(self)[slot].leave_started = Some(self.now);
        let who = R::who(slot);
        self.tr(|| format!("{who} leaves"));
        self.step_life::<R>(slot, Life::Leave);
        if R::EXIT == Exit::Polled {
            let inc = R::slots(self)[slot].inc;
            self.after(TICK, Ev::Life(who, LifeEv::Exit { inc }));
        }
    }

    fn exit_if_done<R: Role>(&mut self, slot: usize, inc: u64) {
        if !R::slots(self)[slot].is_current(inc) {
            return;
        }
        if R::may_exit(self, slot) {
            self.exit::<R>(slot);
        } else {
            self.after(TICK, Ev::Life(R::who(slot), LifeEv::Exit { inc }));
        }
    }

    fn exit<R: Role>(&mut self, slot: usize) {
        let who = R::who(slot);
        self.tr(|| format!("{who} exits after leaving"));
        self.stop::<R>(slot);
    }

    /// The heal, for every process of a role: every fault that holds it ends, a paused one resumes, and those
    /// that are down come back as the role draws (if none runs, the first comes back once it has exited).
    pub(super) fn heal_role<R: Role>(&mut self) {
        for slot in 0..R::slots(self).len() {
            let p = &mut R::slots_mut(self)[slot];
            p.hb_loss = 0;
            p.clog = 0;
            self.heal_cuts(R::who(slot));
            if R::slots(self)[slot].is_paused() {
                self.resume::<R>(slot);
            }
        }
        let mut up = R::slots(self).iter().filter(|p| p.is_running() && !p.is_leaving()).count();
        for slot in 0..R::slots(self).len() {
            if R::back_at_heal(self, slot, up) {
                self.start_as::<R>(slot);
                up += 1;
            }
        }
        if up == 0 {
            self.after(1_000, Ev::Life(R::who(0), LifeEv::Restart { healing: true }));
        }
    }
}
