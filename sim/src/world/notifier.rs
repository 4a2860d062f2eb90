//! Notifier processes (`n1`..`n4`), driven as the shell would drive `jaque_core::notifier::Notifier`.
//!
//! **The process.** Each slot is a [`Process`] with the engines' life: start (a new incarnation), boot (the
//! watcher's snapshot, the log's backlog, `CaughtUp`), crash (state lost), pause (nothing handled; on resume the
//! buffered answers first, then the expired timers), a clean leave (exits once `is_done()`), store partitions
//! both ways or one way, heartbeat loss, clogging, and a cut from the endpoints. Every output gets its one
//! answer: a `PutHeartbeat` a `HeartbeatWritten` (handed in order: `ok` once the key landed and the ack came
//! back within the store timeout), a store request (`ReadStarts` create-if-absent, `ReadProgress`,
//! `WriteProgress` compare-and-set, `Replay` of the log: `kv.rs`) its answer or a timeout, a `Send` the
//! endpoint's answer, a refused connection or a timeout (`endpoint.rs`). `check_invariants()` runs after every
//! step. A leaving notifier exits once its key's delete landed (or the shell's flush bound passed); a crashed
//! one's heartbeat still on its way is lost once its slot restarted.
//!
//! What the notifiers send and the endpoints receive is checked against invariant 9 by
//! `checks/notifications.rs`, which this driver tells of every send, answer and give-up.

use super::checks::notifications::Sends;
use super::endpoint::{Request, SimEndpoint};
use super::kv::StoreOp;
use super::log::brief_entry;
use super::process::{Follow, Process};
use super::snapshots::{LostBy, Whose};
use super::{exp, Category, Ev, Phase, Sim, TICK};
use crate::params::{stream, NotifierFault, Params, Stream};
use jaque_core::notifier::{Endpoint, EndpointId, Input, Notifier, NotifierConfig, Output, SendResult};
use jaque_core::{Bucket, MemberId, MemberRef, MembershipOutput, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
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
    pub(super) sends: Sends,
    /// Heartbeat answers are handed in order, none before the previous one.
    hb: Follow,
    /// Its key's delete went out at this time (a leave), and whether it landed: the shell exits after its
    /// leave only once the delete reached the store, or after `LEAVE_FLUSH_MS`.
    deleting: Option<Time>,
    deleted: bool,
}

/// The shell's bound on waiting for a leaving member's delete (`flush_leave` in `shell/src/follow.rs`): a
/// delete still on its way when the process exits after it is lost with the connection.
const LEAVE_FLUSH_MS: u64 = 2_000;

pub type NotifierSlot = Process<NotifierRole>;

impl Process<NotifierRole> {
    pub fn notifier(&self) -> Option<&Notifier> {
        self.role.as_ref().map(|r| &r.n)
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum NUndo {
    StoreIn,
    StoreOut,
    HeartbeatLoss,
    Clog,
    EndpointCut,
}

/// The notifiers' events (inside `Ev::Notify`). Those for an incarnation that is gone are dropped; those for
/// a paused one wait in its buffers (timers are re-armed on resume).
#[derive(Clone, Debug)]
pub(super) enum NEv {
    Restart {
        slot: usize,
        healing: bool,
    },
    Boot {
        slot: usize,
        inc: u64,
    },
    Timer {
        slot: usize,
        inc: u64,
        deadline: Time,
    },
    LogDeliver {
        slot: usize,
        inc: u64,
        upto: u64,
    },
    MemberDeliver {
        slot: usize,
        inc: u64,
        upto: u64,
    },
    /// An answer for the notifier (its store's, its HTTP client's); `attempt` names the send it answers.
    Answer {
        slot: usize,
        inc: u64,
        input: Box<Input>,
        attempt: Option<u64>,
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
        attempt: u64,
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
    },
    /// A leaving notifier's delete of its key lands.
    DeleteLand {
        slot: usize,
        inc: u64,
        member: MemberRef,
        sent: Time,
    },
    Resume {
        slot: usize,
        inc: u64,
    },
    ExitIfDone {
        slot: usize,
        inc: u64,
    },
    FaultTick,
    FaultEnd {
        gen: u64,
        slot: usize,
        undo: NUndo,
    },
}

impl NEv {
    pub(super) fn sent(slot: usize, inc: u64, attempt: u64, op: u64, result: SendResult) -> NEv {
        NEv::Answer { slot, inc, input: Box::new(Input::Sent { op, result }), attempt: Some(attempt) }
    }

    fn target(&self) -> Option<(usize, u64)> {
        match self {
            NEv::Boot { slot, inc }
            | NEv::Timer { slot, inc, .. }
            | NEv::LogDeliver { slot, inc, .. }
            | NEv::MemberDeliver { slot, inc, .. }
            | NEv::Answer { slot, inc, .. } => Some((*slot, *inc)),
            _ => None,
        }
    }

    fn code(&self) -> u64 {
        match self {
            NEv::Restart { .. } => 101,
            NEv::Boot { .. } => 102,
            NEv::Timer { .. } => 103,
            NEv::LogDeliver { .. } => 104,
            NEv::MemberDeliver { .. } => 105,
            NEv::Answer { .. } => 106,
            NEv::StoreLand { .. } => 107,
            NEv::HttpArrive(_) => 108,
            NEv::HttpAnswer { .. } => 109,
            NEv::Resume { .. } => 110,
            NEv::ExitIfDone { .. } => 111,
            NEv::FaultTick => 112,
            NEv::FaultEnd { .. } => 113,
            NEv::DeleteLand { .. } => 114,
            NEv::HeartbeatLand { .. } => 115,
        }
    }
}

/// The notifiers' part of the world: the slots and the endpoints.
pub(super) struct Notify {
    pub slots: Vec<NotifierSlot>,
    pub endpoints: Vec<SimEndpoint>,
    /// Faults and restarts.
    rng: ChaCha8Rng,
    /// Latencies of the notifiers' store traffic and of HTTP.
    pub net: ChaCha8Rng,
    pub http_cut: Vec<u32>,
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
            http_cut: vec![0; np.notifiers],
            hook: None,
            pending_hook: None,
        }
    }

    pub(super) fn endpoint_index(&self, id: EndpointId) -> Option<usize> {
        self.endpoints.iter().position(|e| e.endpoint.id == id)
    }
}

/// The config every simulated notifier runs with: core's defaults, the seed's ttl and what it drew.
pub(super) fn config(p: &Params, me: MemberRef, endpoints: Vec<Endpoint>) -> NotifierConfig {
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

impl Sim {
    // ---- the swarm's schedule ----

    /// Notifiers start at random times; their fault tick begins.
    pub(super) fn start_notifiers(&mut self) {
        let n = self.notify.slots.len();
        if n == 0 {
            return;
        }
        self.stats.notify.notifiers = n as u64;
        for slot in 0..n {
            let at = self.notify.rng.random_range(0..=self.params.notify.start_max_ms);
            self.push(Time(at), Ev::Notify(NEv::Restart { slot, healing: false }));
        }
        if !self.params.notify.faults.is_empty() {
            let at = exp(&mut self.notify.rng, self.params.notify.fault_every_ms) + 2_000;
            self.push(Time(at), Ev::Notify(NEv::FaultTick));
        }
    }

    pub(super) fn notify_event(&mut self, e: NEv) {
        self.h(e.code());
        if let Some((s, inc)) = e.target() {
            if !self.notify.slots[s].is_current(inc) {
                return;
            }
            if self.notify.slots[s].is_paused() {
                if !matches!(e, NEv::Timer { .. }) {
                    self.notify.slots[s].hold(Ev::Notify(e));
                }
                return;
            }
        }
        match e {
            NEv::Restart { slot, healing } => {
                if self.phase != Phase::Safety && !healing {
                    // The heal decided who comes back.
                } else if !self.notify.slots[slot].is_running() {
                    self.start_notifier(slot);
                } else if self.notify.slots[slot].is_leaving() {
                    self.after(1_000, Ev::Notify(NEv::Restart { slot, healing }));
                }
            }
            NEv::Boot { slot, .. } => self.nboot(slot),
            NEv::Timer { slot, deadline, .. } => {
                if self.notify.slots[slot].armed == Some(deadline) {
                    self.notify.slots[slot].armed = None;
                    self.nstep(slot, None, None);
                }
            }
            NEv::LogDeliver { slot, upto, .. } => {
                let p = &self.notify.slots[slot];
                if p.booted && p.can_recv() && !p.log_held {
                    self.ndeliver_log(slot, upto);
                }
            }
            NEv::MemberDeliver { slot, upto, .. } => {
                let p = &self.notify.slots[slot];
                if p.booted && p.can_recv() {
                    self.ndeliver_members(slot, upto);
                }
            }
            NEv::Answer { slot, input, attempt, .. } => self.nstep(slot, Some(*input), attempt),
            NEv::StoreLand { slot, inc, op, answer_by } => self.store_land(slot, inc, *op, answer_by),
            NEv::HttpArrive(req) => self.http_arrive(*req),
            NEv::HttpAnswer { slot, inc, attempt, op, result, timeout_at } => {
                self.http_answer(slot, inc, attempt, op, result, timeout_at)
            }
            NEv::Resume { slot, inc } => {
                let p = &self.notify.slots[slot];
                if p.is_current(inc) && p.pause_over(self.now) {
                    self.resume_notifier(slot);
                }
            }
            NEv::ExitIfDone { slot, inc } => self.exit_if_done(slot, inc),
            NEv::HeartbeatLand { slot, inc, member, ttl_ms } => {
                if self.notify.slots[slot].inc > inc {
                    // The process that sent it crashed and a new one has started since: its connection is
                    // gone, and the new incarnation's key is not overwritten by its predecessor's (core's
                    // membership assumes so: "an older incarnation is our own previous life, whose key our
                    // first heartbeat overwrites").
                    self.tr(|| format!("store: n{}'s heartbeat of incarnation {inc} lost with its process", slot + 1));
                    return;
                }
                self.kv_put(Bucket::Notifier, member, ttl_ms);
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
            NEv::FaultTick => self.nfault_tick(),
            NEv::FaultEnd { gen, slot, undo } => {
                if gen == self.faults.gen {
                    self.nundo(slot, undo);
                }
            }
        }
    }

    // ---- the process's life ----

    /// Starts (or restarts) notifier slot `s` as a new incarnation.
    pub fn start_notifier(&mut self, s: usize) {
        self.note_notifier_start();
        self.notify.slots[s].begin(self.now);
        let member = self.notify.slots[s].member();
        let endpoints: Vec<Endpoint> = self.notify.endpoints.iter().map(|e| e.endpoint.clone()).collect();
        let role = NotifierRole {
            n: Notifier::new(config(&self.params, member, endpoints)),
            sends: Sends::new(self.notify.endpoints.len()),
            hb: Follow { cursor: 0, sched: self.now },
            deleting: None,
            deleted: false,
        };
        self.notify.slots[s].run(role);
        let inc = self.notify.slots[s].inc;
        self.tr(|| format!("n{} starts as incarnation {inc}", s + 1));
        // From the latest snapshot, handed in before `Start` as the shell does: it follows the log after it.
        if let Some(reader) = self.start_reader(Whose::Notifier(s)) {
            self.notify.slots[s].log.cursor = reader.position();
            self.nstep(s, Some(Input::Restore(Box::new(reader))), None);
        }
        self.nstep(s, Some(Input::Start), None);
        let d = self.notify.slots[s].rng.random_range(0..=self.params.boot_delay_max_ms);
        self.after(d, Ev::Notify(NEv::Boot { slot: s, inc }));
    }

    /// The process dies: state lost, its key stays until the ttl.
    pub fn crash_notifier(&mut self, s: usize) {
        if self.notify.slots[s].is_running() {
            self.nfault(s, "crashes");
            self.nstop(s);
        }
    }

    fn nstop(&mut self, s: usize) {
        if let Some(failed) = self.notify.slots[s].role.as_ref().map(|r| r.n.counters.failed) {
            self.note_retired(failed);
        }
        self.notify.slots[s].end();
    }

    /// A clean leave: the notifier finishes its claims, deletes its key and exits once `is_done()`.
    pub fn leave_notifier(&mut self, s: usize) {
        let p = &self.notify.slots[s];
        if !p.is_running() || p.is_leaving() || p.is_paused() {
            return;
        }
        self.notify.slots[s].leave_started = Some(self.now);
        self.tr(|| format!("n{} leaves", s + 1));
        self.nstep(s, Some(Input::Leave), None);
        let inc = self.notify.slots[s].inc;
        self.after(TICK, Ev::Notify(NEv::ExitIfDone { slot: s, inc }));
    }

    fn exit_if_done(&mut self, s: usize, inc: u64) {
        let p = &self.notify.slots[s];
        if !p.is_current(inc) {
            return;
        }
        let flushed = p.role.as_ref().is_some_and(|r| {
            r.deleted || r.deleting.is_some_and(|t| self.now.saturating_since(t).as_millis() as u64 >= LEAVE_FLUSH_MS)
        });
        if flushed && p.notifier().is_some_and(|n| n.is_done()) {
            self.tr(|| format!("n{} exits after leaving", s + 1));
            self.nstop(s);
        } else {
            self.after(TICK, Ev::Notify(NEv::ExitIfDone { slot: s, inc }));
        }
    }

    pub fn pause_notifier(&mut self, s: usize, ms: u64) {
        let p = &self.notify.slots[s];
        if !p.is_running() || p.is_paused() {
            return;
        }
        self.nfault(s, "pauses");
        let until = self.now + Duration::from_millis(ms);
        self.notify.slots[s].paused_until = Some(until);
        self.tr(|| format!("n{} pauses until {until}", s + 1));
        let inc = self.notify.slots[s].inc;
        self.push(until, Ev::Notify(NEv::Resume { slot: s, inc }));
    }

    fn resume_notifier(&mut self, s: usize) {
        let held = self.notify.slots[s].resume();
        self.tr(|| format!("n{} resumes", s + 1));
        for ev in held {
            self.push(self.now, ev);
        }
        if let Some(t) = self.notify.slots[s].armed {
            let inc = self.notify.slots[s].inc;
            let at = self.notify.slots[s].global(t);
            self.push(at, Ev::Notify(NEv::Timer { slot: s, inc, deadline: t }));
        }
    }

    /// Cuts notifier `s` from the store inbound, outbound or both, for `ms` or until healed.
    pub fn cut_notifier(&mut self, s: usize, inbound: bool, outbound: bool, ms: Option<u64>) {
        self.nfault(s, "is cut from the store");
        let gen = self.faults.gen;
        if inbound {
            self.notify.slots[s].store_in_cut += 1;
            if let Some(ms) = ms {
                self.after(ms, Ev::Notify(NEv::FaultEnd { gen, slot: s, undo: NUndo::StoreIn }));
            }
        }
        if outbound {
            self.notify.slots[s].store_out_cut += 1;
            if let Some(ms) = ms {
                self.after(ms, Ev::Notify(NEv::FaultEnd { gen, slot: s, undo: NUndo::StoreOut }));
            }
        }
        self.tr(|| format!("n{} cut from the store (in={inbound} out={outbound}) for {ms:?}ms", s + 1));
    }

    /// Cuts notifier `s` from every endpoint for `ms` or until healed.
    pub fn cut_notifier_from_endpoints(&mut self, s: usize, ms: Option<u64>) {
        self.nfault(s, "is cut from the endpoints");
        self.notify.http_cut[s] += 1;
        if let Some(ms) = ms {
            let gen = self.faults.gen;
            self.after(ms, Ev::Notify(NEv::FaultEnd { gen, slot: s, undo: NUndo::EndpointCut }));
        }
    }

    fn nundo(&mut self, s: usize, undo: NUndo) {
        let p = &mut self.notify.slots[s];
        match undo {
            NUndo::StoreIn => {
                p.store_in_cut = p.store_in_cut.saturating_sub(1);
                if p.store_in_cut == 0 {
                    self.ncatch_up(s);
                }
            }
            NUndo::StoreOut => p.store_out_cut = p.store_out_cut.saturating_sub(1),
            NUndo::HeartbeatLoss => p.hb_loss = p.hb_loss.saturating_sub(1),
            NUndo::Clog => p.clog = p.clog.saturating_sub(1),
            NUndo::EndpointCut => self.notify.http_cut[s] = self.notify.http_cut[s].saturating_sub(1),
        }
        self.tr(|| format!("n{} fault over: {undo:?}", s + 1));
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

    fn nfault_tick(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let np = &self.params.notify;
        let (every, min, max, pause_max) = (np.fault_every_ms, np.fault_min_ms, np.fault_max_ms, np.pause_max_ms);
        let r = &mut self.notify.rng;
        let next = exp(r, every);
        let kind = np.faults[r.random_range(0..np.faults.len())];
        let s = r.random_range(0..self.notify.slots.len());
        let d = r.random_range(min..=max.max(min));
        let again = r.random_bool(0.7);
        let one_way_in = r.random_bool(0.5);
        let pause = r.random_range(min..=pause_max.max(min));
        self.after(next, Ev::Notify(NEv::FaultTick));
        self.h(200 + kind as u64);
        let gen = self.faults.gen;
        let end = |undo| Ev::Notify(NEv::FaultEnd { gen, slot: s, undo });
        match kind {
            NotifierFault::Crash => {
                self.crash_notifier(s);
                if again {
                    self.after(d, Ev::Notify(NEv::Restart { slot: s, healing: false }));
                }
            }
            NotifierFault::Pause => self.pause_notifier(s, pause),
            NotifierFault::StorePartition => self.cut_notifier(s, true, true, Some(d)),
            NotifierFault::StoreOneWay => self.cut_notifier(s, one_way_in, !one_way_in, Some(d)),
            NotifierFault::HeartbeatLoss => {
                self.nfault(s, "loses heartbeats");
                self.notify.slots[s].hb_loss += 1;
                self.after(d, end(NUndo::HeartbeatLoss));
            }
            NotifierFault::Clog => {
                self.nfault(s, "is clogged");
                self.notify.slots[s].clog += 1;
                self.after(d, end(NUndo::Clog));
            }
            NotifierFault::Leave => {
                self.leave_notifier(s);
                if again {
                    self.after(d, Ev::Notify(NEv::Restart { slot: s, healing: false }));
                }
            }
            NotifierFault::EndpointCut => self.cut_notifier_from_endpoints(s, Some(d)),
        }
    }

    /// The heal: every notifier fault ends, paused ones resume, some that are down come back (at least one runs).
    pub(super) fn heal_notifiers(&mut self) {
        let n = self.notify.slots.len();
        for s in 0..n {
            let p = &mut self.notify.slots[s];
            p.hb_loss = 0;
            p.clog = 0;
            p.store_out_cut = 0;
            self.notify.http_cut[s] = 0;
            if self.notify.slots[s].store_in_cut > 0 {
                self.notify.slots[s].store_in_cut = 0;
                self.ncatch_up(s);
            }
            if self.notify.slots[s].is_paused() {
                self.resume_notifier(s);
            }
        }
        let mut up = self.notify.slots.iter().filter(|p| p.is_running() && !p.is_leaving()).count();
        for s in 0..n {
            let restart = self.notify.rng.random_bool(self.params.restart_at_heal);
            if !self.notify.slots[s].is_running() && (up == 0 || restart) {
                self.start_notifier(s);
                up += 1;
            }
        }
        if n > 0 && up == 0 {
            // Every notifier is leaving: bring the first back once it has exited.
            self.after(1_000, Ev::Notify(NEv::Restart { slot: 0, healing: true }));
        }
    }

    // ---- reading: the watcher and the log follower ----

    fn nboot(&mut self, s: usize) {
        if !self.notify.slots[s].can_recv() {
            let inc = self.notify.slots[s].inc;
            self.after(500, Ev::Notify(NEv::Boot { slot: s, inc }));
            return;
        }
        for obs in self.store.snapshot() {
            self.nstep(s, Some(Input::Member(obs)), None);
        }
        self.notify.slots[s].members.cursor = self.store.rev();
        self.notify.slots[s].booted = true;
        let end = self.log.len();
        self.ndeliver_log(s, end);
        if self.violation.is_some() || !self.notify.slots[s].is_running() {
            return;
        }
        self.tr(|| format!("n{} caught up at log {end}", s + 1));
        self.nstep(s, Some(Input::CaughtUp), None);
    }

    /// One hop of a notifier's NATS traffic (a clogged one's is held for seconds).
    pub(super) fn ndelay(&mut self, s: usize) -> u64 {
        let mut d = 1 + self.notify.net.random_range(0..=self.params.net_delay_max_ms);
        if self.notify.slots[s].clog > 0 {
            d += self.notify.net.random_range(500..=3_000);
        }
        d
    }

    /// A duplicate delivery (log entry or membership change), in the safety phase.
    fn nduplicate(&mut self, s: usize) -> bool {
        let p = self.params.duplicate;
        self.phase == Phase::Safety && p > 0.0 && self.notify.slots[s].rng.random_bool(p)
    }

    /// Revision `rev` of the store is on its way to every notifier's watcher.
    pub(super) fn notifiers_watch(&mut self, rev: u64) {
        for s in 0..self.notify.slots.len() {
            if self.notify.slots[s].follows() {
                let lag = self.notify.slots[s].rng.random_range(0..=self.params.watch_lag_max_ms) + self.ndelay(s);
                let at = self.notify.slots[s].members.schedule(self.now + Duration::from_millis(lag));
                let inc = self.notify.slots[s].inc;
                self.push(at, Ev::Notify(NEv::MemberDeliver { slot: s, inc, upto: rev }));
            }
        }
    }

    fn ndeliver_members(&mut self, s: usize, upto: u64) {
        let upto = upto.min(self.store.rev());
        while self.notify.slots[s].members.cursor < upto
            && self.violation.is_none()
            && self.notify.slots[s].is_running()
        {
            let rev = self.notify.slots[s].members.cursor + 1;
            self.notify.slots[s].members.cursor = rev;
            if let Some(obs) = self.store.observation(rev) {
                self.nstep(s, Some(Input::Member(obs)), None);
            }
        }
        let cur = self.notify.slots[s].members.cursor;
        if cur > 0 && self.notify.slots[s].is_running() && self.nduplicate(s) {
            if let Some(obs) = self.store.observation(cur) {
                self.nstep(s, Some(Input::Member(obs)), None);
            }
        }
    }

    /// The entry at `seq` landed: the checker of invariant 9 learns the oracle's verdict, every notifier's
    /// follower gets it.
    pub(super) fn notify_appended(&mut self, seq: u64) {
        if self.notify.slots.is_empty() {
            return;
        }
        self.note_notifiable(seq);
        for s in 0..self.notify.slots.len() {
            if self.notify.slots[s].follows() {
                let lag = self.notify.slots[s].rng.random_range(0..=self.params.log_lag_max_ms) + self.ndelay(s);
                let at = self.notify.slots[s].log.schedule(self.now + Duration::from_millis(lag));
                let inc = self.notify.slots[s].inc;
                self.push(at, Ev::Notify(NEv::LogDeliver { slot: s, inc, upto: seq }));
            }
        }
    }

    /// Notifier `s`'s log follower hands it every entry up to `upto` it has not read, passing over purged ones.
    fn ndeliver_log(&mut self, s: usize, upto: u64) {
        let upto = upto.min(self.log.len());
        while self.notify.slots[s].log.cursor < upto && self.violation.is_none() && self.notify.slots[s].is_running() {
            let seq = self.notify.slots[s].log.cursor + 1;
            self.notify.slots[s].log.cursor = seq;
            if !self.log.present(seq) {
                continue;
            }
            let entry = self.log.entry(seq).clone();
            self.nstep(s, Some(Input::Log { seq, entry }), None);
        }
        let cur = self.notify.slots[s].log.cursor;
        if cur > 0 && self.notify.slots[s].is_running() && self.nduplicate(s) && self.log.present(cur) {
            let entry = self.log.entry(cur).clone();
            self.nstep(s, Some(Input::Log { seq: cur, entry }), None);
        }
    }

    /// Reading resumes after a cut: the watcher and the log follower catch up.
    fn ncatch_up(&mut self, s: usize) {
        if !self.notify.slots[s].follows() {
            return;
        }
        let d = self.ndelay(s);
        let at = self.notify.slots[s].log.schedule(self.now + Duration::from_millis(d));
        self.notify.slots[s].members.schedule(at);
        let inc = self.notify.slots[s].inc;
        let (log, rev) = (self.log.len(), self.store.rev());
        self.push(at, Ev::Notify(NEv::MemberDeliver { slot: s, inc, upto: rev }));
        self.push(at, Ev::Notify(NEv::LogDeliver { slot: s, inc, upto: log }));
    }

    // ---- stepping ----

    /// One step of notifier `s`: an input (or its timer), its self-check, every output carried out, the timer
    /// re-armed. `attempt` is the send a `Sent` answers.
    pub(super) fn nstep(&mut self, s: usize, input: Option<Input>, attempt: Option<u64>) {
        if self.violation.is_some() {
            return;
        }
        let now = self.notify.slots[s].local(self.now);
        self.stats.notify.steps += 1;
        if self.trace.is_some() {
            let line = match &input {
                Some(i) => format!("n{} <- {}", s + 1, brief_input(i)),
                None => match self.notify.slots[s].notifier().and_then(|n| n.poll_timeout()) {
                    Some((_, timer)) => format!("n{} <- timer {timer:?}", s + 1),
                    None => format!("n{} <- timer", s + 1),
                },
            };
            self.tr(|| line);
        }
        if let (Some(Input::Sent { result, .. }), Some(a)) = (&input, attempt) {
            self.answer_seen(s, a, result);
        }
        let role = self.notify.slots[s].role.as_mut().expect("step of a running notifier");
        let failed = role.n.counters.failed;
        let lost_before = role.n.role().counters.objects_lost_history;
        match input {
            Some(i) => role.n.handle(now, i),
            None => role.n.handle_timeout(now),
        }
        let outputs: Vec<Output> = std::iter::from_fn(|| role.n.poll_output()).collect();
        let gave_up = role.n.counters.failed > failed;
        if let Err(e) = role.n.check_invariants() {
            self.fail(Category::Safety, "notifier self-check", format!("n{}: {e}", s + 1));
            return;
        }
        let lost = role.n.role().counters.objects_lost_history - lost_before;
        if lost > 0 {
            let named: Vec<_> = role.n.role().history_lost().iter().cloned().collect();
            self.note_lost_history(LostBy::Notifier, Whose::Notifier(s), lost, named.iter());
        }
        if let Some(a) = attempt.filter(|_| gave_up) {
            self.note_give_up(a);
        }
        self.h(0x4e00 ^ (s as u64) << 4 ^ (outputs.len() as u64) << 12);
        for out in outputs {
            self.ncarry_out(s, out);
        }
        self.nrearm(s);
        if let Some((slot, hook)) = self.notify.pending_hook.take() {
            self.tr(|| format!("scenario: n{} after its send: {hook:?}", slot + 1));
            match hook {
                Then::Crash => self.crash_notifier(slot),
                Then::Pause(ms) => self.pause_notifier(slot, ms),
                Then::CutStore(ms) => self.cut_notifier(slot, true, true, Some(ms)),
                Then::CutEndpoints(ms) => self.cut_notifier_from_endpoints(slot, Some(ms)),
                Then::Leave => self.leave_notifier(slot),
                Then::LoseAnswer => {}
            }
        }
    }

    fn nrearm(&mut self, s: usize) {
        let p = &mut self.notify.slots[s];
        let Some(n) = p.notifier() else { return };
        let t = n.poll_timeout().map(|(t, _)| t);
        if t != p.armed {
            p.armed = t;
            if let Some(t) = t {
                let inc = p.inc;
                let at = p.global(t);
                self.push(at, Ev::Notify(NEv::Timer { slot: s, inc, deadline: t }));
            }
        }
    }

    fn ncarry_out(&mut self, s: usize, out: Output) {
        if self.trace.is_some() {
            let line = format!("n{} -> {}", s + 1, brief_output(&out));
            self.tr(|| line);
        }
        match out {
            Output::NeedSnapshot { covering } => self.need_snapshot(Whose::Notifier(s), covering),
            Output::Membership(MembershipOutput::PutHeartbeat { member, ttl, .. }) => self.nheartbeat(s, member, ttl),
            Output::Membership(MembershipOutput::DeleteHeartbeat { member, .. }) => {
                let now = self.now;
                self.notify.slots[s].role.as_mut().expect("running").deleting = Some(now);
                if self.notify.slots[s].can_send() {
                    let d = self.ndelay(s);
                    let inc = self.notify.slots[s].inc;
                    self.after(d, Ev::Notify(NEv::DeleteLand { slot: s, inc, member, sent: now }));
                }
            }
            Output::ReadStarts { endpoints, propose } => self.nstore(s, StoreOp::Starts { endpoints, propose }),
            Output::ReadProgress { token, objects } => self.nstore(s, StoreOp::Progress { token, objects }),
            Output::Replay { token, from, to } => self.nstore(s, StoreOp::Replay { token, from, to }),
            Output::WriteProgress { op, object, endpoint, record, expect } => {
                if !self.check_lease(&object, &record) {
                    return;
                }
                let claim = record.claim.is_some();
                let op = StoreOp::Write { op, object, endpoint, record, expect };
                if claim && self.hook_fires(s, At::Claim) == Some(Then::LoseAnswer) {
                    // The write lands; its answer never comes.
                    let d = self.ndelay(s);
                    let (inc, timeout) = (self.notify.slots[s].inc, self.params.notify.store_timeout_ms);
                    let input = Box::new(op.failed());
                    self.after(timeout, Ev::Notify(NEv::Answer { slot: s, inc, input, attempt: None }));
                    self.after(d, Ev::Notify(NEv::StoreLand { slot: s, inc, op: Box::new(op), answer_by: None }));
                    return;
                }
                self.nstore(s, op)
            }
            Output::Send(d) => self.nsend(s, d),
        }
    }

    /// A heartbeat: the key lands unless the notifier's writes are cut or the heartbeat is lost; its answer
    /// (`ok` once the ack is back within the store timeout) is handed after the ones before it.
    fn nheartbeat(&mut self, s: usize, member: MemberRef, ttl: Duration) {
        let timeout = self.params.notify.store_timeout_ms;
        let p = &self.notify.slots[s];
        let lost = !p.can_send() || (p.hb_loss > 0 && self.notify.net.random_bool(self.params.heartbeat_loss));
        let mut answer = (timeout, false);
        if !lost {
            let d = self.ndelay(s);
            let (inc, ttl_ms) = (self.notify.slots[s].inc, ttl.as_millis() as u64);
            self.after(d, Ev::Notify(NEv::HeartbeatLand { slot: s, inc, member, ttl_ms }));
            if self.notify.slots[s].can_recv() {
                let back = d + self.ndelay(s);
                if back <= timeout {
                    answer = (back, true);
                }
            }
        }
        let (after, ok) = answer;
        let p = &mut self.notify.slots[s];
        let at = p.role.as_mut().expect("running").hb.schedule(self.now + Duration::from_millis(after));
        let inc = p.inc;
        let input = Box::new(Input::HeartbeatWritten { ok });
        self.push(at, Ev::Notify(NEv::Answer { slot: s, inc, input, attempt: None }));
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

    // ---- the checker ----

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
        Input::Log { seq, entry } => format!("log {seq} {}", brief_entry(entry)),
        Input::Member(o) => format!("member rev {} {:?}", o.rev, o.change),
        Input::Replayed { token, result: Ok((upto, entries)) } => {
            format!("replayed #{token} up to {upto}: {} entries", entries.len())
        }
        Input::Restore(r) => format!("restore: the snapshot at {}", r.position()),
        other => format!("{other:?}"),
    }
}

fn brief_output(o: &Output) -> String {
    match o {
        Output::Send(d) => format!("send {} attempt {} ({})", d.webhook_id, d.attempt, d.object),
        other => format!("{other:?}"),
    }
}
