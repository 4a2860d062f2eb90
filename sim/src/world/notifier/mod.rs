//! Notifier processes (`n1`..`n4`), driven as the shell would drive `jaque_core::notifier::Notifier`.
//!
//! **The process.** Each slot is a [`Process`] that lives the life every process lives (`lifecycle.rs`): start
//! (a new incarnation), boot (the watcher's snapshot, the log's backlog, `CaughtUp`), crash (state lost), pause
//! (nothing handled; on resume the buffered answers first, then the expired timers), a clean leave (exits once
//! `is_done()`), store partitions both ways or one way, heartbeat loss, clogging, and a cut from its peers, the
//! endpoints (`faults.rs`; the notifiers' fault tick has its own stream and parameters). Every output gets its
//! one answer: a `PutHeartbeat` a `HeartbeatWritten` (handed in order: `ok` once the key landed and the ack came
//! back within the store timeout), a store request (`ReadStarts` create-if-absent, `ReadProgress`,
//! `WriteProgress` compare-and-set, `Replay` of the log: `kv.rs`) its answer or a timeout, a `Send` the
//! endpoint's answer, a refused connection or a timeout (`endpoint.rs`). `check_invariants()` runs after every
//! step. A leaving notifier exits once its key's delete landed (or the shell's flush bound passed); a crashed
//! one's heartbeat still on its way is lost once its slot restarted.
//!
//! What the notifiers send and the endpoints receive is checked against invariant 9 by
//! `checks/notifications.rs`, which this driver tells of every send, answer and give-up.

pub(in crate::world) mod endpoint;
pub(in crate::world) mod kv;

use crate::params::{stream, Params, Stream};
use crate::world::lifecycle::{machine, Act, Exit, LifeEv, Role};
use crate::world::log::brief_entry;
use crate::world::process::{Peer, Process, Who};
use crate::world::snapshots::lost_so_far;
use crate::world::{exp, Category, Ev, Sim};
use endpoint::{Request, SimEndpoint};
use jaque_core::notifier::{Endpoint, EndpointId, Input, Notifier, NotifierConfig, Output, SendResult, Timer};
use jaque_core::{Bucket, LogReader, MemberId, MemberRef, MembershipOutput, Time};
use jaque_core::{Life, LifeOutput};
use kv::StoreOp;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the notifiers did in a run, for reports.
#[derive(Clone, Debug, Default)]
pub struct NotifyStats {
    pub notifiers: u64,
    pub steps: u64,
    pub sends: u64,
    /// Requests that reached an endpoint, and the 2xx among them.
    pub received: u64,
    pub delivered: u64,
    /// Deliveries of a transition to an endpoint beyond its first.
    pub repeats: u64,
    /// Deliveries whose send was in flight at a fault (each permits one repeat).
    pub faulty_sends: u64,
    pub faults: u64,
    /// At each notifier fault: its sends in flight, and its claims in the store.
    pub inflight_at_faults: u64,
    pub claims_at_faults: u64,
    /// Claims that stood in the store while their member's key was gone.
    pub orphaned_claims: u64,
    pub give_ups: u64,
    /// 410s that disabled an endpoint in a notifier incarnation.
    pub disabled: u64,
    pub progress_writes: u64,
    /// Deliveries invariant 9 required at the end (transition × endpoint).
    pub required: u64,
    /// From the engines' end of the liveness phase to the last required delivery, and the budget it had.
    pub drain_ms: u64,
    pub drain_budget_ms: u64,
}

/// Scenarios: when a hook set with [`Sim::notify_at_next`] fires: right after the notifier's next send (its
/// request is on the wire), or its next claim (the compare-and-set write is on its way to the store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Send,
    Claim,
}

/// Scenarios: what happens to the notifier then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    Crash,
    Pause(u64),
    /// Cut from the store both ways for this long.
    CutStore(u64),
    /// Cut from the endpoints for this long (the answer of that send is lost).
    CutEndpoints(u64),
    Leave,
    /// That request lands (the endpoint takes the send, the store applies the claim) but its answer is lost:
    /// the notifier's client times out.
    LoseAnswer,
}

/// What the simulator keeps for one running notifier incarnation.
pub struct NotifierRole {
    n: Notifier,
    /// Its sends as the checker of invariant 9 knows them.
    pub(in crate::world) sends: Sends,
    /// Its key's delete went out at this time (a leave), and whether it landed: the shell exits after its
    /// leave only once the delete reached the store, or after `LEAVE_FLUSH_MS`.
    deleting: Option<Time>,
    deleted: bool,
}

/// What the checker knows of one notifier incarnation's sends (it goes with the incarnation).
pub(in crate::world) struct Sends {
    /// Endpoints that answered this incarnation 410.
    pub(in crate::world) gone: Vec<bool>,
    /// Its sends whose answer it has not handled yet: the send (`Reception::attempt`) of each operation.
    pub(in crate::world) inflight: BTreeMap<u64, u64>,
    /// Per (endpoint, seq): the delivery's next attempt not before this time (the last answer's `Retry-After`,
    /// from when it was handled).
    pub(in crate::world) not_before: BTreeMap<(usize, u64), Time>,
}

impl Sends {
    pub fn new(endpoints: usize) -> Sends {
        Sends { gone: vec![false; endpoints], inflight: BTreeMap::new(), not_before: BTreeMap::new() }
    }

    /// Its sends whose answer it has not handled yet.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }
}

/// The shell's bound on waiting for a leaving member's delete (`flush_leave` in `shell/src/follow/heartbeat.rs`): a
/// delete still on its way when the process exits after it is lost with the connection.
const LEAVE_FLUSH_MS: u64 = 2_000;

pub type NotifierSlot = Process<NotifierRole>;

impl Process<NotifierRole> {
    pub fn notifier(&self) -> Option<&Notifier> {
        self.role.as_ref().map(|r| &r.n)
    }
}

/// The notifiers' events besides their life (inside `Ev::Notify`). An answer for an incarnation that is gone is
/// dropped; one for a paused one waits in its buffers.
#[derive(Clone, Debug)]
pub(in crate::world) enum NEv {
    /// An answer for the notifier (its store's, its HTTP client's).
    Answer {
        slot: usize,
        inc: u64,
        input: Box<Input>,
    },
    /// A store request lands; `answer_by` is when its client times out (`None`: it already did).
    StoreLand {
        slot: usize,
        inc: u64,
        op: Box<StoreOp>,
        answer_by: Option<Time>,
    },
    HttpArrive(Box<Request>),
    HttpAnswer {
        slot: usize,
        inc: u64,
        op: u64,
        result: SendResult,
        timeout_at: Time,
    },
    /// A heartbeat lands (dropped if a newer incarnation of the slot has started meanwhile).
    HeartbeatLand {
        slot: usize,
        inc: u64,
        member: MemberRef,
        ttl_ms: u64,
        format: u32,
    },
    /// A leaving notifier's delete of its key lands.
    DeleteLand {
        slot: usize,
        inc: u64,
        member: MemberRef,
        sent: Time,
    },
    /// The notifiers' fault tick (`faults.rs`).
    FaultTick,
}

impl NEv {
    /// The answer to the send of operation `op`.
    pub(in crate::world) fn sent(slot: usize, inc: u64, op: u64, result: SendResult) -> NEv {
        NEv::Answer { slot, inc, input: Box::new(Input::Sent { op, result }) }
    }

    /// The notifier incarnation an event is for, if it waits while that process is paused.
    pub fn held_for(&self) -> Option<(Who, u64)> {
        match self {
            NEv::Answer { slot, inc, .. } => Some((Who::Notifier(*slot), *inc)),
            _ => None,
        }
    }

    /// The trace hash's code of the event, after the notifiers' family code (the lifecycle's are
    /// `LifeEv::code`'s).
    pub fn code(&self) -> u64 {
        match self {
            NEv::Answer { .. } => 106,
            NEv::StoreLand { .. } => 107,
            NEv::HttpArrive(_) => 108,
            NEv::HttpAnswer { .. } => 109,
            NEv::FaultTick => 112,
            NEv::DeleteLand { .. } => 114,
            NEv::HeartbeatLand { .. } => 115,
        }
    }
}

/// The notifiers' part of the world: the slots and the endpoints.
pub(in crate::world) struct Notify {
    pub slots: Vec<NotifierSlot>,
    pub endpoints: Vec<SimEndpoint>,
    /// Faults and restarts.
    pub rng: ChaCha8Rng,
    /// Latencies of the notifiers' store traffic and of HTTP.
    pub net: ChaCha8Rng,
    hook: Option<(usize, At, Then)>,
    pending_hook: Option<(usize, Then)>,
}

impl Notify {
    pub fn new(params: &Params) -> Notify {
        let seed = params.seed;
        let np = &params.notify;
        let slots = (0..np.notifiers)
            .map(|i| {
                // Ahead of the simulation's clock, never behind: a clock behind it would read 0 for a while at
                // the start (`Process::local` saturates), and a notifier's lease is a duration on its clock. Two
                // notifiers still differ by up to twice the seed's skew, as two engines may.
                let clock = match params.clock_skew_max_ms as i64 {
                    0 => 0,
                    m => stream(seed, Stream::Clock, 20 + i as u64).random_range(0..=2 * m),
                };
                let id = MemberId::new(format!("n{}", i + 1)).expect("valid member id");
                Process::new(id, stream(seed, Stream::NotifierNode, i as u64), clock)
            })
            .collect();
        let endpoints = np.endpoints.iter().enumerate().map(|(i, e)| SimEndpoint::new(seed, i, *e)).collect();
        Notify {
            slots,
            endpoints,
            rng: stream(seed, Stream::Notify, 0),
            net: stream(seed, Stream::Notify, 1),
            hook: None,
            pending_hook: None,
        }
    }

    pub(in crate::world) fn endpoint_index(&self, id: EndpointId) -> Option<usize> {
        self.endpoints.iter().position(|e| e.endpoint.id == id)
    }
}

/// The config every simulated notifier runs with: core's defaults, the seed's ttl and what it drew.
pub(in crate::world) fn config(p: &Params, me: MemberRef, endpoints: Vec<Endpoint>) -> NotifierConfig {
    let np = &p.notify;
    let d = Duration::from_millis;
    let mut cfg = NotifierConfig::new(me, d(p.ttl_ms), endpoints);
    cfg.concurrency = np.concurrency;
    cfg.give_up = d(np.give_up_ms);
    cfg.retry_base = d(np.retry_base_ms);
    cfg.retry_max = d(np.retry_max_ms);
    cfg.claim_recheck = d(np.claim_recheck_ms);
    cfg.max_pending = np.max_pending;
    cfg.leave_timeout = d(np.leave_timeout_ms);
    cfg.role.replay_chunk = np.replay_chunk;
    cfg.role.max_held = np.max_held;
    cfg
}

machine!(Notifier, Input, Output, Timer, reader: |n| n.role().reader(), log_role: |n| Some(n.role()));

/// What a notifier's step keeps from before its core handles an input to after.
pub(in crate::world) struct NotifierStep {
    /// The send the input answers, if it does.
    attempt: Option<u64>,
    failed: u64,
    lost: u64,
}

impl Role for NotifierRole {
    type Core = Notifier;
    type Step = NotifierStep;
    /// A leaving notifier exits once its key's delete landed (or the shell's flush bound passed) and it is done.
    const EXIT: Exit = Exit::Polled;

    fn who(k: usize) -> Who {
        Who::Notifier(k)
    }

    fn slots(sim: &Sim) -> &[NotifierSlot] {
        &sim.notify.slots
    }

    fn slots_mut(sim: &mut Sim) -> &mut [NotifierSlot] {
        &mut sim.notify.slots
    }

    fn core(&self) -> &Notifier {
        &self.n
    }

    fn core_mut(&mut self) -> &mut Notifier {
        &mut self.n
    }

    /// The notifiers' traffic stream (their store requests and HTTP).
    fn net(sim: &mut Sim) -> &mut ChaCha8Rng {
        &mut sim.notify.net
    }

    /// Each notifier's own stream.
    fn duplicates(sim: &mut Sim, k: usize) -> &mut ChaCha8Rng {
        &mut sim.notify.slots[k].rng
    }

    /// Drawn for every slot, down or not, from the notifiers' fault stream.
    fn back_at_heal(sim: &mut Sim, k: usize, up: usize) -> bool {
        let again = sim.notify.rng.random_bool(sim.params.restart_at_heal);
        !sim.notify.slots[k].is_running() && (up == 0 || again)
    }

    /// A new notifier; the snapshot's reader, if it starts from one, is handed in as `Restore` (as the shell does).
    fn make(sim: &mut Sim, k: usize, reader: Option<LogReader>) -> (NotifierRole, Option<LogReader>) {
        sim.note_notifier_start();
        let member = sim.notify.slots[k].member();
        let endpoints: Vec<Endpoint> = sim.notify.endpoints.iter().map(|e| e.endpoint.clone()).collect();
        let mut cfg = config(&sim.params, member, endpoints);
        cfg.role.speaks = sim.notify.slots[k].speaks;
        let role = NotifierRole {
            n: Notifier::new(cfg),
            sends: Sends::new(sim.notify.endpoints.len()),
            deleting: None,
            deleted: false,
        };
        (role, reader)
    }

    /// A fault begins: what it has in flight is counted (a leave is no fault).
    fn note(sim: &mut Sim, k: usize, act: Act) {
        let what = match act {
            Act::Crash => "crashes",
            Act::Pause => "pauses",
            Act::CutStore => "is cut from the store",
            Act::CutPeer => "is cut from the endpoints",
            Act::HeartbeatLoss => "loses heartbeats",
            Act::Clog => "is clogged",
            Act::Leave => return,
        };
        sim.nfault(k, what);
    }

    /// The deliveries it gave up count after it is gone.
    fn ending(sim: &mut Sim, k: usize) {
        if let Some(failed) = sim.notify.slots[k].role.as_ref().map(|r| r.n.counters.failed) {
            sim.note_retired(failed);
        }
    }

    fn may_exit(sim: &Sim, k: usize) -> bool {
        let p = &sim.notify.slots[k];
        let flushed = p.role.as_ref().is_some_and(|r| {
            r.deleted || r.deleting.is_some_and(|t| sim.now.saturating_since(t).as_millis() as u64 >= LEAVE_FLUSH_MS)
        });
        flushed && p.notifier().is_some_and(|n| n.is_done())
    }

    /// An answer to a send tells the checker of invariant 9 first.
    fn before_step(sim: &mut Sim, k: usize, input: &Option<Input>) -> NotifierStep {
        sim.stats.notify.steps += 1;
        let attempt = match input {
            Some(Input::Sent { op, result }) => sim.answer_seen(k, *op, result),
            _ => None,
        };
        let p = &sim.notify.slots[k];
        let failed = p.notifier().expect("a running notifier").counters.failed;
        NotifierStep { attempt, failed, lost: lost_so_far(p) }
    }

    /// Its self-check, the objects it said lost history, and a delivery it gave up answering a send.
    fn after_step(sim: &mut Sim, k: usize, step: NotifierStep) -> bool {
        let n = sim.notify.slots[k].notifier().expect("a running notifier");
        let gave_up = n.counters.failed > step.failed;
        if let Err(e) = n.check_invariants() {
            sim.fail(Category::Safety, "notifier self-check", format!("n{}: {e}", k + 1));
            return false;
        }
        sim.note_step_lost::<NotifierRole>(k, step.lost);
        if let Some(a) = step.attempt.filter(|_| gave_up) {
            sim.note_give_up(a);
        }
        true
    }

    fn step_hash(k: usize, outputs: usize) -> u64 {
        0x4e00 ^ (k as u64) << 4 ^ (outputs as u64) << 12
    }

    fn carry_out(sim: &mut Sim, s: usize, out: Output) {
        match out {
            Output::Life(LifeOutput::NeedSnapshot { covering }) => sim.need_snapshot(Who::Notifier(s), covering),
            Output::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { member, ttl, .. })) => {
                sim.nheartbeat(s, member, ttl)
            }
            Output::Life(LifeOutput::Membership(MembershipOutput::DeleteHeartbeat { member, .. })) => {
                let now = sim.now;
                sim.notify.slots[s].role.as_mut().expect("running").deleting = Some(now);
                if sim.notify.slots[s].can_send() {
                    let d = sim.hop::<NotifierRole>(s);
                    let inc = sim.notify.slots[s].inc;
                    sim.after(d, Ev::Notify(NEv::DeleteLand { slot: s, inc, member, sent: now }));
                }
            }
            Output::ReadStarts { endpoints, propose } => sim.nstore(s, StoreOp::Starts { endpoints, propose }),
            Output::ReadProgress { token, objects } => {
                sim.nstore(s, StoreOp::Progress { token, objects, recheck: false })
            }
            Output::Recheck { token, object } => {
                sim.nstore(s, StoreOp::Progress { token, objects: vec![object], recheck: true })
            }
            Output::Replay { token, from, to } => sim.nstore(s, StoreOp::Replay { token, from, to }),
            Output::WriteProgress { op, object, endpoint, record, expect } => {
                if !sim.check_lease(&object, &record) {
                    return;
                }
                let claim = record.claim.is_some();
                let op = StoreOp::Write { op, object, endpoint, record, expect };
                if claim && sim.hook_fires(s, At::Claim) == Some(Then::LoseAnswer) {
                    // The write lands; its answer never comes.
                    let d = sim.hop::<NotifierRole>(s);
                    let (inc, timeout) = (sim.notify.slots[s].inc, sim.params.notify.store_timeout_ms);
                    let input = Box::new(op.failed());
                    sim.after(timeout, Ev::Notify(NEv::Answer { slot: s, inc, input }));
                    sim.after(d, Ev::Notify(NEv::StoreLand { slot: s, inc, op: Box::new(op), answer_by: None }));
                    return;
                }
                sim.nstore(s, op)
            }
            Output::Send(d) => sim.nsend(s, d),
        }
    }

    /// Scenarios: the hook set for its send or claim runs now.
    fn stepped(sim: &mut Sim, _k: usize) {
        if let Some((slot, hook)) = sim.notify.pending_hook.take() {
            sim.tr(|| format!("scenario: n{} after its send: {hook:?}", slot + 1));
            let who = Who::Notifier(slot);
            match hook {
                Then::Crash => sim.crash(who),
                Then::Pause(ms) => sim.pause(who, ms),
                Then::CutStore(ms) => sim.cut_store(who, true, true, Some(ms)),
                Then::CutEndpoints(ms) => sim.cut_peer(who, Peer::Endpoints, Some(ms)),
                Then::Leave => sim.leave(who),
                Then::LoseAnswer => {}
            }
        }
    }
}

impl Sim {
    /// Notifiers start at random times; their fault tick begins.
    pub(in crate::world) fn start_notifiers(&mut self) {
        let n = self.notify.slots.len();
        if n == 0 {
            return;
        }
        self.stats.notify.notifiers = n as u64;
        for slot in 0..n {
            let at = self.notify.rng.random_range(0..=self.params.notify.start_max_ms);
            self.push(Time(at), Ev::Life(Who::Notifier(slot), LifeEv::Restart { healing: false }));
        }
        if !self.params.notify.faults.is_empty() {
            let at = exp(&mut self.notify.rng, self.params.notify.fault_every_ms) + 2_000;
            self.push(Time(at), Ev::Notify(NEv::FaultTick));
        }
    }

    pub(in crate::world) fn notify_event(&mut self, e: NEv) {
        match e {
            NEv::Answer { slot, inc, input } => {
                if self.notify.slots[slot].is_current(inc) {
                    self.step_as::<NotifierRole>(slot, Some(*input));
                }
            }
            NEv::StoreLand { slot, inc, op, answer_by } => self.store_land(slot, inc, *op, answer_by),
            NEv::HttpArrive(req) => self.http_arrive(*req),
            NEv::HttpAnswer { slot, inc, op, result, timeout_at } => {
                self.http_answer(slot, inc, op, result, timeout_at)
            }
            NEv::HeartbeatLand { slot, inc, member, ttl_ms, format } => {
                if self.notify.slots[slot].inc > inc {
                    // The process that sent it crashed and a new one has started since: its connection is
                    // gone, and the new incarnation's key is not overwritten by its predecessor's (core's
                    // membership assumes so: "an older incarnation is our own previous life, whose key our
                    // first heartbeat overwrites").
                    self.tr(|| format!("store: n{}'s heartbeat of incarnation {inc} lost with its process", slot + 1));
                    return;
                }
                self.kv_put(Bucket::Notifier, member, ttl_ms, format);
            }
            NEv::DeleteLand { slot, inc, member, sent } => {
                let p = &mut self.notify.slots[slot];
                if p.is_current(inc) {
                    p.role.as_mut().expect("running").deleted = true;
                } else if self.now.saturating_since(sent).as_millis() as u64 > LEAVE_FLUSH_MS {
                    // The process exited before it reached the store: lost with its connection.
                    return;
                }
                self.kv_delete_own(Bucket::Notifier, &member);
            }
            NEv::FaultTick => self.notifier_fault_tick(),
        }
    }

    /// The entry at `seq` landed: the checker of invariant 9 learns the oracle's verdict, every notifier's
    /// follower gets it.
    pub(in crate::world) fn notify_appended(&mut self, seq: u64) {
        if self.notify.slots.is_empty() {
            return;
        }
        self.note_notifiable(seq);
        self.follow_log::<NotifierRole>(seq);
    }

    /// The heal, for the notifiers: every notifier heals as every process does.
    pub(in crate::world) fn heal_notifiers(&mut self) {
        if !self.notify.slots.is_empty() {
            self.heal_role::<NotifierRole>();
        }
    }

    /// A fault of notifier `s` begins: what it has in flight is counted.
    fn nfault(&mut self, s: usize, what: &str) {
        let Some(r) = &self.notify.slots[s].role else { return };
        let member = self.notify.slots[s].member();
        let inflight = r.sends.in_flight() as u64;
        let claims = self.claims_by(&member) as u64;
        let st = &mut self.stats.notify;
        st.faults += 1;
        st.inflight_at_faults += inflight;
        st.claims_at_faults += claims;
        self.tr(|| format!("n{} {what} with {inflight} sends in flight, {claims} claims", s + 1));
    }

    /// A heartbeat: the key lands unless the notifier's writes are cut or the heartbeat is lost; its answer
    /// (`ok` once the ack is back within the store timeout) is handed after the ones before it.
    fn nheartbeat(&mut self, s: usize, member: MemberRef, ttl: Duration) {
        let timeout = self.params.notify.store_timeout_ms;
        let p = &self.notify.slots[s];
        let lost = !p.can_send() || (p.hb_loss > 0 && self.notify.net.random_bool(self.params.heartbeat_loss));
        let mut answer = (timeout, false);
        if !lost {
            let d = self.hop::<NotifierRole>(s);
            let (inc, ttl_ms, format) = (self.notify.slots[s].inc, ttl.as_millis() as u64, self.notify.slots[s].speaks);
            self.after(d, Ev::Notify(NEv::HeartbeatLand { slot: s, inc, member, ttl_ms, format }));
            if self.notify.slots[s].can_recv() {
                let back = d + self.hop::<NotifierRole>(s);
                if back <= timeout {
                    answer = (back, true);
                }
            }
        }
        let (after, ok) = answer;
        self.answer_heartbeat::<NotifierRole>(s, after, ok);
    }

    fn nsend(&mut self, s: usize, d: jaque_core::notifier::Delivery) {
        let Some((ep, a)) = self.check_send(s, &d) else { return };
        self.stats.notify.sends += 1;
        let lose = self.hook_fires(s, At::Send) == Some(Then::LoseAnswer);
        self.http_send(s, a, ep, d, lose);
    }

    /// Scenarios: whether the hook set for notifier `s` fires now; it runs at the end of the step, except
    /// `LoseAnswer`, which the caller applies to the request at hand.
    fn hook_fires(&mut self, s: usize, at: At) -> Option<Then> {
        let (slot, when, then) = self.notify.hook?;
        if slot != s || when != at {
            return None;
        }
        self.notify.hook = None;
        if then != Then::LoseAnswer {
            self.notify.pending_hook = Some((s, then));
        }
        Some(then)
    }

    // ---- scenarios ----

    /// The running notifier of slot `s`.
    pub fn notifier(&self, s: usize) -> Option<&Notifier> {
        self.notify.slots[s].notifier()
    }

    pub fn notifier_slot(&self, s: usize) -> &NotifierSlot {
        &self.notify.slots[s]
    }

    /// Do `then` to notifier `s` at its next send or claim.
    pub fn notify_at_next(&mut self, s: usize, at: At, then: Then) {
        self.notify.hook = Some((s, at, then));
    }

    /// Sends of notifier `s`'s running incarnation whose answer it has not handled.
    pub fn sends_in_flight(&self, s: usize) -> usize {
        self.notify.slots[s].role.as_ref().map_or(0, |r| r.sends.in_flight())
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Life(Life::Log { seq, entry }) => format!("log {seq} {}", brief_entry(entry)),
        Input::Life(Life::Member(o)) => format!("member rev {} {:?}", o.rev, o.change),
        Input::Replayed { token, result: Ok((upto, entries)) } => {
            format!("replayed #{token} up to {upto}: {} entries", entries.len())
        }
        Input::Life(Life::Restore(r)) => format!("restore: the snapshot at {}", r.position()),
        other => format!("{other:?}"),
    }
}

fn brief_output(o: &Output) -> String {
    match o {
        Output::Send(d) => format!("send {} attempt {} ({})", d.webhook_id, d.attempt, d.object),
        other => format!("{other:?}"),
    }
}
