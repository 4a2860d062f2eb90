//! The workload and the world's clients: the object pool, the commands of the safety phase (first a put of
//! every object, then a random mix) and how each is submitted (at an engine's local caller, through ingress,
//! or as a `-target ui` sends it), retries with the same command id, and the one outcome each client is told.
//! Also the check workers: a dispatched check answers after a latency up to its timeout with the simulated
//! truth of its object (piecewise constant), or is lost.

use super::net::Waiter;
use super::{exp, ms, Ev, Phase, Sim};
use crate::params::{draw_def, first_defs, mix, stream, Params, Stream};
use jaque_core::policy::{self, Change, Name};
use jaque_core::{
    hrw, CheckResult, CheckWork, Command, CommandId, CommandKind, Input, ObjectDef, ObjectId, Outcome, State, Time,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

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
    /// When the client learnt it.
    pub done_at: Option<Time>,
    /// Which engine took it (ingress pick or the local engine).
    pub engine: Option<usize>,
}

pub(super) struct Workload {
    pub rng: ChaCha8Rng,
    /// The ui's own choices (direct or ingress, a stale view).
    pub ui: ChaCha8Rng,
    /// Which policy change a policy command is (`Params::policy_changes`).
    policy: ChaCha8Rng,
    /// The object pool: `o<i>` and the definition its first put carries.
    pub objects: Vec<(ObjectId, ObjectDef)>,
    /// How many objects have had their first put.
    bootstrapped: usize,
    next_cmd: u64,
    truth_seed: u64,
    pub truth_override: BTreeMap<ObjectId, State>,
    /// Scenarios: pause engine `n` for `ms` right after it dispatches a check of this object.
    pause_on_dispatch: Option<(usize, ObjectId, u64)>,
}

impl Workload {
    pub fn new(params: &Params) -> Workload {
        let seed = params.seed;
        let (rng, defs) = first_defs(params);
        let objects = defs
            .into_iter()
            .enumerate()
            .map(|(i, def)| (ObjectId::new(format!("o{i}")).expect("valid object id"), def))
            .collect();
        Workload {
            rng,
            ui: stream(seed, Stream::Ui, 0),
            policy: stream(seed, Stream::Policy, 0),
            objects,
            bootstrapped: 0,
            next_cmd: 0,
            truth_seed: mix(seed ^ 0x0074_7275_7468),
            truth_override: BTreeMap::new(),
            pause_on_dispatch: None,
        }
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
}

impl Sim {
    fn pick_via(&mut self) -> Via {
        if self.work.rng.random_bool(self.params.ingress_share) {
            if self.work.ui.random_bool(self.params.ui_direct_share) {
                Via::Ui
            } else {
                Via::Ingress
            }
        } else {
            Via::Engine(self.work.rng.random_range(0..self.nodes.len()))
        }
    }

    pub(super) fn workload_tick(&mut self) {
        if self.phase != Phase::Safety || self.work.objects.is_empty() {
            return;
        }
        // First every object is put once, quickly; then a random mix.
        let (cmd, next) = if self.work.bootstrapped < self.work.objects.len() {
            let i = self.work.bootstrapped;
            self.work.bootstrapped += 1;
            let kind = CommandKind::Put { def: self.work.objects[i].1.clone() };
            (self.work.command(i, kind), 5)
        } else {
            let w = &mut self.work;
            let i = w.rng.random_range(0..w.objects.len());
            let kind = match w.rng.random_range(0..100) {
                0..=19 => {
                    let mut def = draw_def(&mut w.rng, &self.params, i);
                    if w.rng.random_bool(0.05) {
                        def.interval_ms = 0; // rejected
                    }
                    CommandKind::Put { def }
                }
                20..=24 => CommandKind::Delete,
                25..=39 => CommandKind::Pause,
                40..=59 => CommandKind::Resume,
                60..=84 => CommandKind::CheckNow,
                // Mixed versions: some acknowledgements withdrawn instead (a command of format 2), by a hash of
                // the command's number, not a draw: the workload's stream stays as it was.
                _ if self.params.versions.is_mixed()
                    && mix(self.stats.commands ^ 0x756e_6163_6b00) % 1000
                        < u64::from(self.params.versions.unack_permille) =>
                {
                    CommandKind::Unack
                }
                _ => CommandKind::Ack,
            };
            let next = exp(&mut w.rng, self.params.command_every_ms);
            // Some commands change the policy instead, by a hash of the command's number: the draws above
            // happen alike, so the workload's stream stays as it was.
            let share = (self.params.policy_changes * 1000.0) as u64;
            if mix(self.stats.commands ^ 0x706f_6c69_6379) % 1000 < share {
                self.stats.policy.submitted += 1;
                let change = draw_policy_change(&mut w.policy, self.now);
                w.next_cmd += 1;
                let id = CommandId::new(format!("c{}", w.next_cmd)).expect("valid command id");
                let kind = CommandKind::Policy { change: Box::new(change) };
                (Command { id, object: ObjectId::policy(), kind, hop: 0 }, next)
            } else {
                (w.command(i, kind), next)
            }
        };
        let via = self.pick_via();
        if self.params.double_submit > 0.0 && self.work.rng.random_bool(self.params.double_submit) {
            // The same command id twice at once by two paths (a client retrying while the first is in flight).
            let again = self.pick_via();
            self.submit(cmd.clone(), again);
        }
        self.submit(cmd, via);
        self.after(next, Ev::Submit);
    }

    /// How long a client waits for an outcome before it gives up (the ui's 503): the engine's reply timeout
    /// plus a forward's, and 2 s, so an engine's own answer comes first.
    pub(super) fn client_timeout_ms(&self) -> u64 {
        ms(self.core.reply_timeout) + self.params.forward_timeout_ms + 2_000
    }

    /// A client submits a command; it will learn exactly one outcome. Returns the submission's index.
    pub fn submit(&mut self, cmd: Command, via: Via) -> usize {
        self.stats.commands += 1;
        let sub = self.subs.len();
        self.subs.push(Submission { cmd: cmd.clone(), via, at: self.now, outcome: None, done_at: None, engine: None });
        match via {
            // The ui's writes: `ingress.rs`.
            Via::Ingress | Via::Ui => self.start_write(sub, cmd),
            Via::Engine(n) => {
                self.after(self.client_timeout_ms(), Ev::ClientTimeout { sub });
                if !self.nodes[n].is_running() {
                    let outcome = Outcome::Unavailable { reason: "connection refused".into() };
                    self.after(0, Ev::ClientAnswer { sub, outcome });
                    return sub;
                }
                self.subs[sub].engine = Some(n);
                let inc = self.nodes[n].inc;
                let reply = self.net.reply_id();
                let waiter = Waiter::Client { sub, attempt: 0, claim: false };
                self.after(0, Ev::CommandArrive { node: n, inc, reply, waiter, cmd });
            }
        }
        sub
    }

    /// A command that ended `unavailable` is submitted again, same id, by a path drawn anew.
    pub(super) fn retry(&mut self, sub: usize) {
        if self.phase == Phase::Safety {
            let cmd = self.subs[sub].cmd.clone();
            let via = self.pick_via();
            self.submit(cmd, via);
        }
    }

    pub(super) fn client_outcome(&mut self, sub: usize, outcome: Outcome) {
        if self.subs[sub].outcome.is_some() {
            // The client already gave up (a late answer after its timeout is dropped by the shell).
            return;
        }
        if self.trace.is_some() {
            let line = format!("client: {} -> {outcome:?}", self.subs[sub].cmd.id);
            self.tr(|| line);
        }
        if matches!(self.subs[sub].cmd.kind, CommandKind::Unack) {
            match &outcome {
                Outcome::Applied { .. } => self.stats.versions.unack_applied += 1,
                Outcome::Rejected { .. } => self.stats.versions.unack_refused += 1,
                _ => {}
            }
        }
        if matches!(self.subs[sub].cmd.kind, CommandKind::Policy { .. }) {
            match &outcome {
                Outcome::Applied { .. } => self.stats.policy.applied += 1,
                Outcome::Rejected { .. } => self.stats.policy.rejected += 1,
                _ => {}
            }
        }
        match &outcome {
            Outcome::Applied { .. } => self.stats.applied += 1,
            Outcome::NotOwned => self.stats.not_owned += 1,
            Outcome::Unavailable { .. } => {
                self.stats.unavailable += 1;
                let bootstrap = matches!(self.subs[sub].cmd.kind, CommandKind::Put { .. });
                let p = if bootstrap { self.params.retry.max(0.5) } else { self.params.retry };
                if self.phase == Phase::Safety && self.work.rng.random_bool(p) {
                    let d = self.work.rng.random_range(200..=3_000);
                    self.after(d, Ev::Retry { sub });
                }
            }
            _ => {}
        }
        self.subs[sub].outcome = Some(outcome);
        self.subs[sub].done_at = Some(self.now);
    }

    /// Engine `n` dispatched a check: a worker answers it after a latency up to its timeout, or is lost.
    pub(super) fn dispatch_check(&mut self, n: usize, work: CheckWork) {
        self.stats.checks += 1;
        let inc = self.nodes[n].inc;
        self.checks.dispatched(&work.object, n, inc, self.now);
        if self.work.pause_on_dispatch.as_ref().is_some_and(|(m, o, _)| *m == n && *o == work.object) {
            let (_, _, ms) = self.work.pause_on_dispatch.take().expect("checked");
            self.pause(super::Who::Engine(n), ms);
        }
        if !self.nodes[n].can_send() || self.chance(self.params.check_loss) {
            return;
        }
        if self.pool.is_on() {
            self.pool_dispatch(n, inc, work);
            return;
        }
        let latency = self.nodes[n].rng.random_range(1..=work.timeout_ms.max(1)) + self.delay(n);
        let at = self.now + Duration::from_millis(latency / 2);
        let state = self.truth(&work.object, at);
        let result = self.result_of(&work, state);
        self.after(latency, Ev::CheckDone { node: n, inc, result });
    }

    /// What a worker answers for `work` when its probe saw `state`.
    pub(super) fn result_of(&self, work: &CheckWork, state: State) -> CheckResult {
        let output = self.check_output(work.check_id, &work.object, state);
        CheckResult { check_id: work.check_id, object: work.object.clone(), state, output }
    }

    pub(super) fn check_done(&mut self, n: usize, inc: u64, result: CheckResult) {
        if self.alive(n, inc) && self.nodes[n].can_recv() {
            self.checks.check_result(&result.object, n, inc, self.now);
            self.step(n, Some(Input::CheckResult(result)));
        }
    }

    /// Scenarios: pause node `n` for `ms` right after it next dispatches a check of `object`.
    pub fn pause_at_next_dispatch(&mut self, n: usize, object: &ObjectId, ms: u64) {
        self.work.pause_on_dispatch = Some((n, object.clone(), ms));
    }

    /// Every object's simulated truth stays what it is now (no new transitions once checks see it).
    pub(super) fn freeze_truth(&mut self) {
        for i in 0..self.work.objects.len() {
            let id = self.work.objects[i].0.clone();
            let state = self.truth(&id, self.now);
            self.work.truth_override.insert(id, state);
        }
    }

    /// The simulated truth of an object: piecewise constant, a new state every period or so.
    pub(super) fn truth(&self, id: &ObjectId, t: Time) -> State {
        if let Some(s) = self.work.truth_override.get(id) {
            return *s;
        }
        let k = mix(hrw::key(id.as_str()) ^ self.work.truth_seed);
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

/// The number of an object of the workload's pool (`o<i>`).
pub(super) fn object_index(id: &ObjectId) -> Option<usize> {
    id.as_str().strip_prefix('o')?.parse().ok()
}

/// A change of the notification policy, as an operator might make one at `now`: over a few receivers, routes,
/// silences and windows by name, so later changes replace, expire and delete earlier ones; some refused on
/// purpose (a route naming a receiver that is not there, a silence that ends before it starts, deleting what
/// a route still names).
fn draw_policy_change(r: &mut ChaCha8Rng, now: Time) -> Change {
    let name = |prefix: &str, r: &mut ChaCha8Rng, n: u32| {
        Name::new(format!("{prefix}{}", r.random_range(0..n))).expect("valid name")
    };
    let selector = |r: &mut ChaCha8Rng| {
        let text = ["", "env=prod", "tier in (web,db)", "!team"][r.random_range(0..4)];
        text.parse().expect("valid selector")
    };
    match r.random_range(0..100) {
        0..=19 => {
            let n = name("r", r, 4);
            let secret = r.random_bool(0.5).then(|| policy::SecretRef::Env("HOOK_SECRET".into()));
            let url = format!("https://{n}.example/hook");
            Change::PutReceiver {
                receiver: policy::Receiver { name: n, kind: policy::ReceiverKind::Webhook { url, secret } },
            }
        }
        20..=27 => Change::DeleteReceiver { name: name("r", r, 5) },
        28..=47 => {
            let routes = (0..r.random_range(0..3))
                .map(|_| policy::Route {
                    selector: selector(r),
                    receivers: (0..r.random_range(1..3)).map(|_| name("r", r, 5)).collect(),
                    continue_: r.random_bool(0.3),
                    repeat_interval_ms: r.random_bool(0.5).then(|| r.random_range(60_000..=3_600_000)),
                    escalations: Vec::new(),
                })
                .collect();
            Change::SetRoutes { routes }
        }
        48..=69 => {
            let starts_at = Time(now.0.saturating_sub(r.random_range(0..60_000)));
            // One in ten ends before it starts: refused.
            let ends_at = if r.random_bool(0.1) {
                starts_at
            } else {
                starts_at + Duration::from_millis(r.random_range(1_000..=600_000))
            };
            Change::PutSilence {
                silence: policy::Silence {
                    name: name("s", r, 6),
                    selector: selector(r),
                    starts_at,
                    ends_at,
                    author: "sim".into(),
                    comment: String::new(),
                },
            }
        }
        70..=79 => Change::ExpireSilence { name: name("s", r, 7) },
        80..=91 => {
            let zone = ["UTC", "Europe/Berlin", "Asia/Kathmandu", "Mars/Olympus"][r.random_range(0..4)];
            let schedule = policy::Schedule {
                days: if r.random_bool(0.5) { vec![policy::Day::Tue] } else { Vec::new() },
                start: format!("{:02}:{:02}", r.random_range(0..24), 15 * r.random_range(0..4)),
                duration_ms: r.random_range(60_000..=7_200_000),
                time_zone: zone.into(),
            };
            match policy::Window::new(name("w", r, 3), selector(r), schedule, String::new()) {
                Ok(window) => Change::PutWindow { window },
                // A time zone that does not exist cannot even be made into a window: a delete instead.
                Err(_) => Change::DeleteWindow { name: name("w", r, 3) },
            }
        }
        _ => Change::DeleteWindow { name: name("w", r, 4) },
    }
}
