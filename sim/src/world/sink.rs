//! Sink processes (`s1`..`s4`, issue 9): unchanged `jaque_core::sink::Sink`s driven as the shell drives them.
//! Each is a `Process` like an engine — started as a new incarnation, booted (the watcher's snapshot, the log's
//! backlog, `CaughtUp`), stepped (an input or its timer, then every output carried out and the timer re-armed,
//! and `check_invariants()` after every step), crashed, paused, leaving (it exits once `is_done()`), cut from
//! NATS (its log follower, its watcher, its heartbeats and its replay reads) and from its SQL store. Outputs go
//! where the shell sends them: heartbeats to the membership KV (`sink/membership/`), replay reads to the log,
//! transactions and progress queries to the SQL store (`sql.rs`).
//!
//! The fault tick picks its process among engines and sinks alike and hands a sink's fault here: a crash,
//! pause, leave, heartbeat loss or clog as for an engine; a store partition cuts it from NATS; an "engine
//! partition" (a process cut from its peer) cuts a sink from its database; isolate-one cuts both. The database
//! itself goes down now and then on its own schedule. Everything here draws from the sinks' own streams.

use super::process::Process;
use super::snapshots::{LostBy, Whose};
use super::sql::{Answer, Pending, Req, Sql};
use super::{exp, log::brief_entry, Category, Ev, Phase, Sim};
use crate::params::{mix, stream, FaultKind, Params, Stream};
use jaque_core::sink::{Batch, Input, Output, Sink, SinkConfig, StoreError};
use jaque_core::{hrw, LogEntry, MemberId, MemberRef, MembershipOutput, ObjectId, State, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// What the simulator keeps for one running sink incarnation.
pub struct SinkRole {
    sink: Sink,
    /// Each `Write` out, by batch id (what the shell knows it sent): a counted skip is the row of the refused
    /// one-row transaction it answers.
    writes: BTreeMap<u64, Batch>,
}

pub type SinkProc = Process<SinkRole>;

impl Process<SinkRole> {
    /// The running incarnation's sink.
    pub fn sink(&self) -> Option<&Sink> {
        self.role.as_ref().map(|r| &r.sink)
    }
}

/// What ends one fault of a sink.
#[derive(Clone, Copy, Debug)]
pub(super) enum SinkUndo {
    StoreIn(usize),
    StoreOut(usize),
    Sql(usize),
    HeartbeatLoss(usize),
    Clog(usize),
}

/// Everything that happens to a sink or to the SQL store, in the world's one event queue.
#[derive(Clone, Debug)]
pub(super) enum SinkEv {
    Timer {
        s: usize,
        inc: u64,
        deadline: Time,
    },
    Boot {
        s: usize,
        inc: u64,
    },
    LogDeliver {
        s: usize,
        inc: u64,
        upto: u64,
    },
    MemberDeliver {
        s: usize,
        inc: u64,
        upto: u64,
    },
    Replayed {
        s: usize,
        inc: u64,
        token: u64,
        result: Result<(u64, Vec<(u64, LogEntry)>), String>,
    },
    SqlLand {
        req: u64,
    },
    SqlAnswer {
        s: usize,
        inc: u64,
        req: u64,
        answer: Answer,
    },
    SqlTimeout {
        s: usize,
        inc: u64,
        req: u64,
    },
    Restart {
        s: usize,
        healing: bool,
    },
    Resume {
        s: usize,
        inc: u64,
    },
    FaultEnd {
        gen: u64,
        undo: SinkUndo,
    },
    /// The database goes down for a while (safety phase), and comes back (`Up` of the same generation).
    DownTick,
    Up {
        gen: u64,
    },
}

impl SinkEv {
    /// The sink incarnation an event is for: it waits while that process is paused.
    fn target(&self) -> Option<(usize, u64)> {
        match self {
            SinkEv::Timer { s, inc, .. }
            | SinkEv::Boot { s, inc }
            | SinkEv::LogDeliver { s, inc, .. }
            | SinkEv::MemberDeliver { s, inc, .. }
            | SinkEv::Replayed { s, inc, .. }
            | SinkEv::SqlAnswer { s, inc, .. }
            | SinkEv::SqlTimeout { s, inc, .. } => Some((*s, *inc)),
            _ => None,
        }
    }

    /// The trace hash's code of the event (within the sinks' range).
    pub fn code(&self) -> u64 {
        match self {
            SinkEv::Timer { .. } => 1,
            SinkEv::Boot { .. } => 2,
            SinkEv::LogDeliver { .. } => 3,
            SinkEv::MemberDeliver { .. } => 4,
            SinkEv::Replayed { .. } => 5,
            SinkEv::SqlLand { .. } => 6,
            SinkEv::SqlAnswer { .. } => 7,
            SinkEv::SqlTimeout { .. } => 8,
            SinkEv::Restart { .. } => 9,
            SinkEv::Resume { .. } => 10,
            SinkEv::FaultEnd { .. } => 11,
            SinkEv::DownTick => 12,
            SinkEv::Up { .. } => 13,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SinkWorldCounters {
    pub steps: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub leaves: u64,
    pub faults: u64,
    /// Rows the sinks counted as skipped (each counted skip, so a row skipped twice counts twice).
    pub skips: u64,
    pub downs: u64,
    /// From the heal until the store held every accepted event (the liveness phase's end waits for it).
    pub settled_after_ms: u64,
}

/// What a run's sinks did, for reports.
#[derive(Clone, Debug, Default)]
pub struct SinkStats {
    pub steps: u64,
    pub transactions: u64,
    pub conflicts: u64,
    pub refused: u64,
    pub lost_answers: u64,
    pub late: u64,
    pub downs: u64,
    pub settled_after_ms: u64,
    /// Rows written degraded, as the running incarnations count them.
    pub degraded: u64,
    pub skips: u64,
    /// Skipped event rows the store would have taken degraded: skipped because their objects row was refused.
    pub collateral_skips: u64,
}

pub(super) struct Sinks {
    pub procs: Vec<SinkProc>,
    /// Per sink: cuts from the SQL store (faults may overlap).
    pub sql_cut: Vec<u32>,
    /// Scenarios: the sink's membership watcher is held (it sees no change), released with a catch-up.
    watch_held: Vec<bool>,
    pub rng: ChaCha8Rng,
    pub sql: Sql,
    pub reqs: BTreeMap<u64, Pending>,
    pub next_req: u64,
    down_gen: u64,
    pub counters: SinkWorldCounters,
}

impl Sinks {
    pub fn new(params: &Params) -> Sinks {
        let seed = params.seed;
        let procs: Vec<SinkProc> = (0..params.sinks)
            .map(|i| {
                let clock = match params.clock_skew_max_ms as i64 {
                    0 => 0,
                    m => stream(seed, Stream::SinkClock, i as u64).random_range(-m..=m),
                };
                let id = MemberId::new(format!("s{}", i + 1)).expect("valid member id");
                Process::new(id, stream(seed, Stream::Sink, i as u64), clock)
            })
            .collect();
        let n = procs.len();
        Sinks {
            procs,
            sql_cut: vec![0; n],
            watch_held: vec![false; n],
            rng: stream(seed, Stream::Sql, 0),
            sql: Sql::new(seed, params.sink.refuse_degraded),
            reqs: BTreeMap::new(),
            next_req: 0,
            down_gen: 0,
            counters: SinkWorldCounters::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }
}

/// The config every simulated sink runs with: core's defaults, the seed's ttl and batch sizes.
pub(in crate::world) fn config(params: &Params, me: MemberRef) -> SinkConfig {
    let mut cfg = SinkConfig::new(me, Duration::from_millis(params.ttl_ms));
    let k = &params.sink;
    cfg.max_batch = k.max_batch;
    cfg.max_pending = k.max_pending;
    cfg.max_output = k.max_output;
    cfg.role.replay_chunk = k.replay_chunk;
    cfg.role.max_held = k.max_held;
    cfg
}

impl Sim {
    // ---- the public API of scenarios and tests ----

    pub fn sink_procs(&self) -> &[SinkProc] {
        &self.sinks.procs
    }

    /// The running incarnation of sink `s` (slot `s` is member `s<s+1>`).
    pub fn sink(&self, s: usize) -> Option<&Sink> {
        self.sinks.procs[s].sink()
    }

    pub fn sql(&self) -> &Sql {
        &self.sinks.sql
    }

    pub fn sink_counters(&self) -> &SinkWorldCounters {
        &self.sinks.counters
    }

    pub fn sink_stats(&self) -> SinkStats {
        let (k, q) = (&self.sinks.counters, &self.sinks.sql.counters);
        let collateral = self.collateral_skips();
        SinkStats {
            steps: k.steps,
            transactions: q.transactions,
            conflicts: q.conflicts,
            refused: q.refused,
            lost_answers: q.lost_answers,
            late: q.late,
            downs: k.downs,
            settled_after_ms: k.settled_after_ms,
            degraded: self.sinks.procs.iter().filter_map(|p| p.sink()).map(|s| s.counters.rows_degraded).sum(),
            skips: k.skips,
            collateral_skips: collateral,
        }
    }

    /// Transactions sink `s` has out (sent, not answered).
    pub fn sink_writes_out(&self, s: usize) -> usize {
        self.sinks.procs[s].role.as_ref().map_or(0, |r| r.writes.len())
    }

    /// The database down (every request answered `Unavailable`) or back.
    pub fn set_sql_down(&mut self, down: bool) {
        self.tr(|| format!("sql: {}", if down { "down" } else { "up" }));
        self.sinks.sql.down = down;
    }

    /// The next `n` commits are done but answered `Unavailable` (their answer is lost).
    pub fn lose_commit_answers(&mut self, n: u32) {
        self.sinks.sql.lose_answers = n;
    }

    /// Starts (or restarts) sink `s` as a new incarnation, from the latest snapshot if there is one (handed in
    /// before `Start`, as the shell does): it follows the log from the position after it.
    pub fn start_sink(&mut self, s: usize) {
        self.sinks.procs[s].begin(self.now);
        let cfg = config(&self.params, self.sinks.procs[s].member());
        self.sinks.procs[s].run(SinkRole { sink: Sink::new(cfg), writes: BTreeMap::new() });
        let inc = self.sinks.procs[s].inc;
        self.tr(|| format!("s{} starts as incarnation {inc}", s + 1));
        if let Some(reader) = self.start_reader(Whose::Sink(s)) {
            self.sinks.procs[s].log.cursor = reader.position();
            self.sink_step(s, Some(Input::Restore(Box::new(reader))));
        }
        self.sink_step(s, Some(Input::Start));
        let d = self.sinks.procs[s].rng.random_range(0..=self.params.boot_delay_max_ms);
        self.after(d, Ev::Sink(SinkEv::Boot { s, inc }));
    }

    /// The sink dies: state lost, its key stays until the ttl, a commit it sent may still land.
    pub fn crash_sink(&mut self, s: usize) {
        if self.sinks.procs[s].is_running() {
            self.sinks.counters.crashes += 1;
            self.tr(|| format!("s{} crashes", s + 1));
            self.sinks.procs[s].end();
        }
    }

    /// A clean leave: the sink deletes its key, writes what it holds (or gives up at its deadline) and exits.
    pub fn leave_sink(&mut self, s: usize) {
        let p = &self.sinks.procs[s];
        if !p.is_running() || p.is_leaving() || p.is_paused() {
            return;
        }
        self.sinks.counters.leaves += 1;
        self.sinks.procs[s].leave_started = Some(self.now);
        self.tr(|| format!("s{} leaves", s + 1));
        self.sink_step(s, Some(Input::Leave));
    }

    pub fn pause_sink(&mut self, s: usize, ms: u64) {
        if !self.sinks.procs[s].is_running() || self.sinks.procs[s].is_paused() {
            return;
        }
        self.sinks.counters.pauses += 1;
        let until = self.now + Duration::from_millis(ms);
        self.sinks.procs[s].paused_until = Some(until);
        self.tr(|| format!("s{} pauses until {until}", s + 1));
        let inc = self.sinks.procs[s].inc;
        self.push(until, Ev::Sink(SinkEv::Resume { s, inc }));
    }

    /// Cuts sink `s` from NATS inbound (it reads nothing: log, watcher, replay answers) and/or outbound (its
    /// heartbeats and replay reads vanish), for `ms` or until healed.
    pub fn cut_sink_nats(&mut self, s: usize, inbound: bool, outbound: bool, ms: Option<u64>) {
        let gen = self.faults.gen;
        if inbound {
            self.sinks.procs[s].store_in_cut += 1;
            if let Some(ms) = ms {
                self.after(ms, Ev::Sink(SinkEv::FaultEnd { gen, undo: SinkUndo::StoreIn(s) }));
            }
        }
        if outbound {
            self.sinks.procs[s].store_out_cut += 1;
            if let Some(ms) = ms {
                self.after(ms, Ev::Sink(SinkEv::FaultEnd { gen, undo: SinkUndo::StoreOut(s) }));
            }
        }
        self.tr(|| format!("s{} cut from NATS (in={inbound} out={outbound}) for {ms:?}ms", s + 1));
    }

    /// Cuts sink `s` from its SQL store (its requests time out, answers on their way are lost).
    pub fn cut_sink_sql(&mut self, s: usize, ms: Option<u64>) {
        self.sinks.sql_cut[s] += 1;
        if let Some(ms) = ms {
            let gen = self.faults.gen;
            self.after(ms, Ev::Sink(SinkEv::FaultEnd { gen, undo: SinkUndo::Sql(s) }));
        }
        self.tr(|| format!("s{} cut from the SQL store for {ms:?}ms", s + 1));
    }

    /// Every cut of sink `s` heals.
    pub fn heal_sink(&mut self, s: usize) {
        self.sinks.sql_cut[s] = 0;
        self.sinks.procs[s].store_out_cut = 0;
        if self.sinks.procs[s].store_in_cut > 0 {
            self.sinks.procs[s].store_in_cut = 0;
            self.sink_catch_up(s);
        }
    }

    /// Scenarios: hold sink `s`'s membership watcher (it sees no change, so it keeps its view of who owns
    /// what), or release it.
    pub fn hold_sink_watch(&mut self, s: usize, held: bool) {
        self.sinks.watch_held[s] = held;
        if !held {
            self.sink_catch_up(s);
        }
    }

    // ---- hooks of the world ----

    /// A paused sink handles nothing: what reaches it waits in its buffers (timers are re-armed on resume).
    /// Returns the event if it is to be dispatched now.
    pub(super) fn sink_hold(&mut self, ev: Ev) -> Option<Ev> {
        let Ev::Sink(e) = &ev else { return Some(ev) };
        let Some((s, inc)) = e.target() else { return Some(ev) };
        let p = &mut self.sinks.procs[s];
        if p.is_current(inc) && p.is_paused() {
            if !matches!(e, SinkEv::Timer { .. }) {
                p.hold(ev);
            }
            return None;
        }
        Some(ev)
    }

    pub(super) fn sink_event(&mut self, e: SinkEv) {
        match e {
            SinkEv::Timer { s, inc, deadline } => {
                if self.sinks.procs[s].is_current(inc) && self.sinks.procs[s].armed == Some(deadline) {
                    self.sinks.procs[s].armed = None;
                    self.sink_step(s, None);
                }
            }
            SinkEv::Boot { s, inc } => {
                if self.sinks.procs[s].is_current(inc) {
                    self.sink_boot(s);
                }
            }
            SinkEv::LogDeliver { s, inc, upto } => {
                let p = &self.sinks.procs[s];
                if p.is_current(inc) && p.booted && p.can_recv() && !p.log_held {
                    self.sink_deliver_log(s, upto);
                }
            }
            SinkEv::MemberDeliver { s, inc, upto } => {
                let p = &self.sinks.procs[s];
                if p.is_current(inc) && p.booted && p.can_recv() && !self.sinks.watch_held[s] {
                    self.sink_deliver_members(s, upto);
                }
            }
            SinkEv::Replayed { s, inc, token, result } => {
                if self.sinks.procs[s].is_current(inc) {
                    self.sink_step(s, Some(Input::Replayed { token, result }));
                }
            }
            SinkEv::SqlLand { req } => self.sql_land(req),
            SinkEv::SqlAnswer { s, inc, req, answer } => self.sql_answer(req, s, inc, Some(answer)),
            SinkEv::SqlTimeout { s, inc, req } => self.sql_answer(req, s, inc, None),
            SinkEv::Restart { s, healing } => {
                if self.phase != Phase::Safety && !healing {
                    // The heal decided who comes back.
                } else if !self.sinks.procs[s].is_running() {
                    self.start_sink(s);
                } else if self.sinks.procs[s].is_leaving() {
                    self.after(1_000, Ev::Sink(SinkEv::Restart { s, healing }));
                }
            }
            SinkEv::Resume { s, inc } => {
                if self.sinks.procs[s].is_current(inc) && self.sinks.procs[s].pause_over(self.now) {
                    self.sink_resume(s);
                }
            }
            SinkEv::FaultEnd { gen, undo } => {
                if gen == self.faults.gen {
                    self.sink_undo(undo);
                }
            }
            SinkEv::DownTick => self.sql_down_tick(),
            SinkEv::Up { gen } => {
                if gen == self.sinks.down_gen {
                    self.set_sql_down(false);
                }
            }
        }
    }

    /// A swarm run's sinks start at random moments in the first 2 s; the database's outages are scheduled.
    pub(super) fn start_sinks(&mut self) {
        for s in 0..self.sinks.len() {
            let at = self.sinks.procs[s].rng.random_range(0..=2_000);
            self.push(Time(at), Ev::Sink(SinkEv::Restart { s, healing: false }));
        }
        if self.sinks.len() > 0 && self.params.sink.down_every_ms > 0 {
            let at = exp(&mut self.sinks.rng, self.params.sink.down_every_ms) + 2_000;
            self.push(Time(at), Ev::Sink(SinkEv::DownTick));
        }
    }

    /// Entry `seq` landed in the log: every following sink reads it after its own lag.
    pub(super) fn sinks_log_landed(&mut self, seq: u64) {
        if self.sinks.len() == 0 {
            return;
        }
        self.note_storable(seq);
        for s in 0..self.sinks.len() {
            if self.sinks.procs[s].follows() {
                let lag = self.sinks.procs[s].rng.random_range(0..=self.params.log_lag_max_ms) + self.sink_delay(s);
                let at = self.sinks.procs[s].log.schedule(self.now + Duration::from_millis(lag));
                let inc = self.sinks.procs[s].inc;
                self.push(at, Ev::Sink(SinkEv::LogDeliver { s, inc, upto: seq }));
            }
        }
    }

    /// Revision `rev` of the membership KV is on its way to every following sink's watcher.
    pub(super) fn sinks_member_changed(&mut self, rev: u64) {
        for s in 0..self.sinks.len() {
            if self.sinks.procs[s].follows() {
                let lag = self.sinks.procs[s].rng.random_range(0..=self.params.watch_lag_max_ms) + self.sink_delay(s);
                let at = self.sinks.procs[s].members.schedule(self.now + Duration::from_millis(lag));
                let inc = self.sinks.procs[s].inc;
                self.push(at, Ev::Sink(SinkEv::MemberDeliver { s, inc, upto: rev }));
            }
        }
    }

    /// The fault tick picked sink `s` for a fault of `kind` lasting `d`.
    pub(super) fn sink_fault(&mut self, kind: FaultKind, s: usize, d: u64) {
        self.sinks.counters.faults += 1;
        let gen = self.faults.gen;
        match kind {
            FaultKind::Crash => {
                self.crash_sink(s);
                if self.faults.rng.random_bool(0.7) {
                    self.after(d, Ev::Sink(SinkEv::Restart { s, healing: false }));
                }
            }
            FaultKind::Pause => {
                let (min, max) = (self.params.fault_min_ms, self.params.pause_max_ms);
                let ms = self.faults.rng.random_range(min..=max.max(min));
                self.pause_sink(s, ms);
            }
            FaultKind::StorePartition => self.cut_sink_nats(s, true, true, Some(d)),
            FaultKind::StoreOneWay => {
                let inbound = self.faults.rng.random_bool(0.5);
                self.cut_sink_nats(s, inbound, !inbound, Some(d));
            }
            // A sink's peer is its database.
            FaultKind::EnginePartition => self.cut_sink_sql(s, Some(d)),
            FaultKind::IsolateOne => {
                self.cut_sink_nats(s, true, true, Some(d));
                self.cut_sink_sql(s, Some(d));
            }
            FaultKind::HeartbeatLoss => {
                self.sinks.procs[s].hb_loss += 1;
                self.tr(|| format!("s{} loses heartbeats for {d}ms", s + 1));
                self.after(d, Ev::Sink(SinkEv::FaultEnd { gen, undo: SinkUndo::HeartbeatLoss(s) }));
            }
            FaultKind::Clog => {
                self.sinks.procs[s].clog += 1;
                self.tr(|| format!("s{} clogged for {d}ms", s + 1));
                self.after(d, Ev::Sink(SinkEv::FaultEnd { gen, undo: SinkUndo::Clog(s) }));
            }
            FaultKind::Leave => {
                self.leave_sink(s);
                if self.faults.rng.random_bool(0.7) {
                    self.after(d, Ev::Sink(SinkEv::Restart { s, healing: false }));
                }
            }
        }
    }

    /// The heal, for the sinks: every cut heals, the database is up, paused sinks resume, some dead ones come
    /// back (at least one runs).
    pub(super) fn heal_sinks(&mut self) {
        if self.sinks.len() == 0 {
            return;
        }
        self.sinks.down_gen += 1;
        self.set_sql_down(false);
        if self.sinks.procs.iter().any(|p| p.is_leaving()) {
            let leave_timeout = config(&self.params, self.sinks.procs[0].member()).leave_timeout;
            self.note_sink_leaving_at_heal(leave_timeout.as_millis() as u64);
        }
        for s in 0..self.sinks.len() {
            self.sinks.procs[s].hb_loss = 0;
            self.sinks.procs[s].clog = 0;
            self.heal_sink(s);
            if self.sinks.procs[s].is_paused() {
                self.sink_resume(s);
            }
        }
        let mut up = self.sinks.procs.iter().filter(|p| p.is_running() && !p.is_leaving()).count();
        for s in 0..self.sinks.len() {
            if !self.sinks.procs[s].is_running() && (up == 0 || self.sinks.rng.random_bool(self.params.restart_at_heal))
            {
                self.start_sink(s);
                up += 1;
            }
        }
        if up == 0 {
            self.after(1_000, Ev::Sink(SinkEv::Restart { s: 0, healing: true }));
        }
    }

    /// A check's output as a worker reports it: with sinks, a short text (sometimes with what the database
    /// refuses); without, empty as before.
    pub(super) fn check_output(&self, check_id: u64, object: &ObjectId, state: State) -> String {
        if self.sinks.len() == 0 {
            return String::new();
        }
        let k = mix(self.params.seed ^ mix(check_id ^ hrw::key(object.as_str()).rotate_left(7)));
        let marked = self.params.sink.refuse > 0.0 && (k % 1000) < (self.params.sink.refuse * 1000.0) as u64;
        // A worker's output may echo the probe's credential (an HTTP client's error names the url it failed on).
        let echo = super::workload::object_index(object)
            .filter(|i| crate::params::secret_def(*i))
            .map(|_| crate::params::SECRET);
        format!(
            "{}{} check {check_id}{}",
            if marked { crate::params::MARKER } else { "" },
            state.as_str(),
            echo.map(|s| format!(" as u:{s}")).unwrap_or_default()
        )
    }

    // ---- the sink's life ----

    /// One message's latency to or from sink `s` (clogged: held for a while).
    pub(super) fn sink_delay(&mut self, s: usize) -> u64 {
        let mut d = 1 + self.sinks.rng.random_range(0..=self.params.net_delay_max_ms);
        if self.sinks.procs[s].clog > 0 {
            d += self.sinks.rng.random_range(500..=3_000);
        }
        d
    }

    fn sink_chance(&mut self, p: f64) -> bool {
        self.phase == Phase::Safety && p > 0.0 && self.sinks.rng.random_bool(p)
    }

    fn sink_undo(&mut self, undo: SinkUndo) {
        match undo {
            SinkUndo::StoreIn(s) => {
                let p = &mut self.sinks.procs[s];
                p.store_in_cut = p.store_in_cut.saturating_sub(1);
                if p.store_in_cut == 0 {
                    self.sink_catch_up(s);
                }
            }
            SinkUndo::StoreOut(s) => {
                let p = &mut self.sinks.procs[s];
                p.store_out_cut = p.store_out_cut.saturating_sub(1);
            }
            SinkUndo::Sql(s) => self.sinks.sql_cut[s] = self.sinks.sql_cut[s].saturating_sub(1),
            SinkUndo::HeartbeatLoss(s) => {
                let p = &mut self.sinks.procs[s];
                p.hb_loss = p.hb_loss.saturating_sub(1);
            }
            SinkUndo::Clog(s) => {
                let p = &mut self.sinks.procs[s];
                p.clog = p.clog.saturating_sub(1);
            }
        }
        self.tr(|| format!("fault over: {undo:?}"));
    }

    fn sql_down_tick(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let next = exp(&mut self.sinks.rng, self.params.sink.down_every_ms);
        self.after(next, Ev::Sink(SinkEv::DownTick));
        let p = &self.params;
        let d = self.sinks.rng.random_range(p.fault_min_ms..=p.fault_max_ms.max(p.fault_min_ms));
        self.sinks.counters.downs += 1;
        self.sinks.down_gen += 1;
        self.set_sql_down(true);
        let gen = self.sinks.down_gen;
        self.after(d, Ev::Sink(SinkEv::Up { gen }));
    }

    fn sink_resume(&mut self, s: usize) {
        let held = self.sinks.procs[s].resume();
        self.tr(|| format!("s{} resumes", s + 1));
        for ev in held {
            self.push(self.now, ev);
        }
        if let Some(t) = self.sinks.procs[s].armed {
            let inc = self.sinks.procs[s].inc;
            let at = self.sinks.procs[s].global(t);
            self.push(at, Ev::Sink(SinkEv::Timer { s, inc, deadline: t }));
        }
    }

    /// Reading resumes after a cut: the watcher and the log follower catch up.
    fn sink_catch_up(&mut self, s: usize) {
        if !self.sinks.procs[s].follows() {
            return;
        }
        let d = self.sink_delay(s);
        let at = self.sinks.procs[s].log.schedule(self.now + Duration::from_millis(d));
        self.sinks.procs[s].members.schedule(at);
        let inc = self.sinks.procs[s].inc;
        let (log, rev) = (self.log.len(), self.store.rev());
        self.push(at, Ev::Sink(SinkEv::MemberDeliver { s, inc, upto: rev }));
        self.push(at, Ev::Sink(SinkEv::LogDeliver { s, inc, upto: log }));
    }

    fn sink_boot(&mut self, s: usize) {
        if !self.sinks.procs[s].can_recv() {
            let inc = self.sinks.procs[s].inc;
            self.after(500, Ev::Sink(SinkEv::Boot { s, inc }));
            return;
        }
        for obs in self.store.snapshot() {
            self.sink_step(s, Some(Input::Member(obs)));
        }
        self.sinks.procs[s].members.cursor = self.store.rev();
        let end = self.log.len();
        self.sinks.procs[s].booted = true;
        self.sink_deliver_log(s, end);
        if self.violation.is_some() || !self.sinks.procs[s].is_running() {
            return;
        }
        self.tr(|| format!("s{} caught up at log {end}", s + 1));
        self.sink_step(s, Some(Input::CaughtUp));
    }

    /// Sink `s`'s log follower hands it every entry up to `upto` it has not read, passing over purged ones
    /// (sometimes the last twice).
    fn sink_deliver_log(&mut self, s: usize, upto: u64) {
        let upto = upto.min(self.log.len());
        while self.sinks.procs[s].log.cursor < upto && self.violation.is_none() && self.sinks.procs[s].is_running() {
            let seq = self.sinks.procs[s].log.cursor + 1;
            self.sinks.procs[s].log.cursor = seq;
            if !self.log.present(seq) {
                continue;
            }
            let entry = self.log.entry(seq).clone();
            self.sink_step(s, Some(Input::Log { seq, entry }));
        }
        let cur = self.sinks.procs[s].log.cursor;
        if cur > 0
            && self.sinks.procs[s].is_running()
            && self.sink_chance(self.params.duplicate)
            && self.log.present(cur)
        {
            let entry = self.log.entry(cur).clone();
            self.sink_step(s, Some(Input::Log { seq: cur, entry }));
        }
    }

    fn sink_deliver_members(&mut self, s: usize, upto: u64) {
        let upto = upto.min(self.store.rev());
        while self.sinks.procs[s].members.cursor < upto && self.violation.is_none() && self.sinks.procs[s].is_running()
        {
            let rev = self.sinks.procs[s].members.cursor + 1;
            self.sinks.procs[s].members.cursor = rev;
            // A revision of a notifier's progress record is no member change: the watch does not see it.
            if let Some(obs) = self.store.observation(rev) {
                self.sink_step(s, Some(Input::Member(obs)));
            }
        }
        let cur = self.sinks.procs[s].members.cursor;
        if cur > 0 && self.sinks.procs[s].is_running() && self.sink_chance(self.params.duplicate) {
            if let Some(obs) = self.store.observation(cur) {
                self.sink_step(s, Some(Input::Member(obs)));
            }
        }
    }

    /// One step of sink `s`: an input (or its timer), its self-check, the rows it counted as skipped
    /// attributed, every output carried out, the timer re-armed; a leaving sink that is done exits.
    pub(super) fn sink_step(&mut self, s: usize, input: Option<Input>) {
        if self.violation.is_some() {
            return;
        }
        let now = self.sinks.procs[s].local(self.now);
        self.sinks.counters.steps += 1;
        if self.trace.is_some() {
            let line = match &input {
                Some(i) => format!("s{} <- {}", s + 1, brief_input(i)),
                None => match self.sinks.procs[s].sink().and_then(|k| k.poll_timeout()) {
                    Some((_, timer)) => format!("s{} <- timer {timer:?}", s + 1),
                    None => format!("s{} <- timer", s + 1),
                },
            };
            self.tr(|| line);
        }
        let role = self.sinks.procs[s].role.as_mut().expect("step of a running sink");
        let refused = match &input {
            Some(Input::Written { batch, result }) => {
                let sent = role.writes.remove(batch);
                if matches!(result, Err(StoreError::Refused(_))) {
                    sent
                } else {
                    None
                }
            }
            _ => None,
        };
        let skipped_before = role.sink.counters.rows_skipped;
        let lost_before = role.sink.role().counters.objects_lost_history;
        match input {
            Some(i) => role.sink.handle(now, i),
            None => role.sink.handle_timeout(now),
        }
        let outputs: Vec<Output> = std::iter::from_fn(|| role.sink.poll_output()).collect();
        let checked = role.sink.check_invariants();
        let skipped = role.sink.counters.rows_skipped - skipped_before;
        let done = role.sink.is_done();
        if let Err(e) = checked {
            return self.fail(Category::Safety, "sink self-check", format!("s{}: {e}", s + 1));
        }
        let lost = role.sink.role().counters.objects_lost_history - lost_before;
        if lost > 0 {
            let named: Vec<_> = role.sink.role().history_lost().iter().cloned().collect();
            self.note_lost_history(LostBy::Sink, Whose::Sink(s), lost, named.iter());
        }
        if !self.note_skips(s, refused, skipped) {
            return;
        }
        self.h(0x5100_0000 ^ s as u64 ^ (outputs.len() as u64) << 8);
        for out in outputs {
            self.sink_carry_out(s, out);
        }
        self.sink_rearm(s);
        if done && self.sinks.procs[s].is_running() {
            self.tr(|| format!("s{} exits after leaving", s + 1));
            self.sinks.procs[s].end();
        }
    }

    fn sink_rearm(&mut self, s: usize) {
        let p = &mut self.sinks.procs[s];
        let Some(sink) = p.sink() else { return };
        let t = sink.poll_timeout().map(|(t, _)| t);
        if t != p.armed {
            p.armed = t;
            if let Some(t) = t {
                let inc = p.inc;
                let at = p.global(t);
                self.push(at, Ev::Sink(SinkEv::Timer { s, inc, deadline: t }));
            }
        }
    }

    fn sink_carry_out(&mut self, s: usize, out: Output) {
        if self.trace.is_some() {
            let line = format!("s{} -> {}", s + 1, brief_output(&out));
            self.tr(|| line);
        }
        match out {
            Output::NeedSnapshot { covering } => self.need_snapshot(Whose::Sink(s), covering),
            Output::Membership(MembershipOutput::PutHeartbeat { bucket, member, ttl }) => {
                let p = &self.sinks.procs[s];
                let (hb_loss, can_send) = (p.hb_loss > 0, p.can_send());
                let lost = hb_loss && self.sinks.rng.random_bool(self.params.heartbeat_loss);
                if can_send && !lost {
                    let d = self.sink_delay(s);
                    let ttl_ms = ttl.as_millis() as u64;
                    self.after(d, Ev::HeartbeatLand { bucket, member, ttl_ms });
                }
            }
            Output::Membership(MembershipOutput::DeleteHeartbeat { bucket, member }) => {
                if self.sinks.procs[s].can_send() {
                    let d = self.sink_delay(s);
                    self.after(d, Ev::HeartbeatDelete { bucket, member });
                }
            }
            Output::QueryProgress { token, objects } => self.sql_request(s, Req::Query { token, objects }),
            Output::Replay { token, from, to } => self.sink_replay(s, token, from, to),
            Output::Write(batch) => {
                if let Some(role) = self.sinks.procs[s].role.as_mut() {
                    role.writes.insert(batch.id, batch.clone());
                }
                self.sql_request(s, Req::Write(batch));
            }
        }
    }

    /// A replay read of the log (a JetStream fetch of `from..=to`): all of it, or in the safety phase now
    /// and then only its first entries; a sink cut from NATS gets a timeout.
    fn sink_replay(&mut self, s: usize, token: u64, from: u64, to: u64) {
        let inc = self.sinks.procs[s].inc;
        let p = &self.sinks.procs[s];
        if !p.can_send() || !p.can_recv() {
            let result = Err("timeout".to_string());
            self.after(self.params.forward_timeout_ms, Ev::Sink(SinkEv::Replayed { s, inc, token, result }));
            return;
        }
        let end = to.min(self.log.len());
        let upto = if end > from && self.sink_chance(0.2) { self.sinks.rng.random_range(from..end) } else { end };
        let entries = self.log.read_range(from, upto);
        let d = self.sink_delay(s) + self.sink_delay(s);
        self.after(d, Ev::Sink(SinkEv::Replayed { s, inc, token, result: Ok((upto, entries)) }));
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Log { seq, entry } => format!("log {seq} {}", brief_entry(entry)),
        Input::Member(o) => format!("member rev {} {:?} {:?}", o.rev, o.bucket, o.change),
        Input::Progress { token, result } => match result {
            Ok(v) => format!("progress {token}: {} objects stored", v.len()),
            Err(e) => format!("progress {token}: {e}"),
        },
        Input::Replayed { token, result } => match result {
            Ok((upto, v)) => format!("replayed {token}: {} entries up to {upto}", v.len()),
            Err(e) => format!("replayed {token}: {e}"),
        },
        Input::Written { batch, result } => format!("written {batch}: {result:?}"),
        Input::Restore(r) => format!("restore: the snapshot at {}", r.position()),
        other => format!("{other:?}"),
    }
}

fn brief_output(o: &Output) -> String {
    match o {
        Output::Write(b) => {
            let seqs: Vec<u64> = b.events.iter().map(|r| r.seq).collect();
            format!("write batch {} events {seqs:?} objects {} progress {}", b.id, b.objects.len(), b.progress.position)
        }
        Output::QueryProgress { token, objects } => format!("query progress {token} of {} objects", objects.len()),
        other => format!("{other:?}"),
    }
}
