//! Sink processes (`s1`..`s4`, issue 9): unchanged `jaque_core::sink::Sink`s driven as the shell drives them,
//! through the life every process lives (`lifecycle.rs`): started, booted, stepped (with `check_invariants()`
//! after every step), crashed, paused, leaving (it exits at the end of the step that leaves it done), cut from
//! NATS (its log follower, its watcher, its heartbeats and its replay reads) and from its peer, the SQL store.
//! Outputs go where the shell sends them: heartbeats to the membership KV (`sink/membership/`), replay reads to
//! the log, transactions and progress queries to the SQL store (`sql.rs`).
//!
//! The engines' fault tick picks its process among engines and sinks alike (`faults.rs`); the database itself
//! goes down now and then on its own schedule, here. Everything here draws from the sinks' own streams.

pub(in crate::world) mod sql;

use crate::params::{mix, stream, Params, Stream};
use crate::world::lifecycle::{machine, Act, Exit, Role};
use crate::world::log::brief_entry;
use crate::world::process::{Process, Who};
use crate::world::snapshots::lost_so_far;
use crate::world::{exp, Category, Ev, Phase, Sim};
use jaque_core::sink::{Batch, Input, Output, Sink, SinkConfig, Timer};
use jaque_core::IoError;
use jaque_core::{hrw, LogEntry, LogReader, MemberId, MemberRef, MembershipOutput, ObjectId, State, Time};
use jaque_core::{Life, LifeOutput};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sql::{Answer, Pending, Req, Sql};
use std::collections::BTreeMap;
use std::time::Duration;

/// What the simulator keeps for one running sink incarnation.
pub struct SinkRole {
    sink: Sink,
    /// Each `Write` out, by batch id (what the shell knows it sent): a counted skip is the row of the refused
    /// one-row transaction it answers.
    writes: BTreeMap<u64, Batch>,
    /// What each batch promised when it was first sent (a retry sends the same batch, whose position was set
    /// then): the objects its progress position covers (`checks/sink_progress.rs`).
    promises: BTreeMap<u64, Option<Vec<ObjectId>>>,
}

pub type SinkProc = Process<SinkRole>;

impl Process<SinkRole> {
    /// The running incarnation's sink.
    pub fn sink(&self) -> Option<&Sink> {
        self.role.as_ref().map(|r| &r.sink)
    }
}

/// What happens to a sink besides its life, or to the SQL store, in the world's one event queue.
#[derive(Clone, Debug)]
pub(in crate::world) enum SinkEv {
    Replayed {
        s: usize,
        inc: u64,
        token: u64,
        result: Result<(u64, Vec<(u64, LogEntry)>), IoError>,
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
    /// The database goes down for a while (safety phase), and comes back (`Up` of the same generation).
    DownTick,
    Up {
        gen: u64,
    },
}

impl SinkEv {
    /// The sink incarnation an event is for: it waits while that process is paused.
    pub fn held_for(&self) -> Option<(Who, u64)> {
        match self {
            SinkEv::Replayed { s, inc, .. } | SinkEv::SqlAnswer { s, inc, .. } | SinkEv::SqlTimeout { s, inc, .. } => {
                Some((Who::Sink(*s), *inc))
            }
            _ => None,
        }
    }

    /// The trace hash's code of the event (within the sinks' range; the lifecycle's are `LifeEv::code`'s).
    pub fn code(&self) -> u64 {
        match self {
            SinkEv::Replayed { .. } => 5,
            SinkEv::SqlLand { .. } => 6,
            SinkEv::SqlAnswer { .. } => 7,
            SinkEv::SqlTimeout { .. } => 8,
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

pub(in crate::world) struct Sinks {
    pub procs: Vec<SinkProc>,
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
        Sinks {
            procs,
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

machine!(Sink, Input, Output, Timer, reader: |k| k.role().reader(), log_role: |k| Some(k.role()));

/// What a sink's step keeps from before its core handles an input to after.
pub(in crate::world) struct SinkStep {
    /// The refused transaction the input answers, if it does.
    refused: Option<Batch>,
    skipped: u64,
    lost: u64,
}

impl Role for SinkRole {
    type Core = Sink;
    type Step = SinkStep;
    /// A leaving sink writes what it holds (or gives up at its deadline) and exits once `is_done()`.
    const EXIT: Exit = Exit::AfterStep;

    fn who(s: usize) -> Who {
        Who::Sink(s)
    }

    fn slots(sim: &Sim) -> &[SinkProc] {
        &sim.sinks.procs
    }

    fn slots_mut(sim: &mut Sim) -> &mut [SinkProc] {
        &mut sim.sinks.procs
    }

    fn core(&self) -> &Sink {
        &self.sink
    }

    fn core_mut(&mut self) -> &mut Sink {
        &mut self.sink
    }

    /// The sinks' stream (with their SQL store's).
    fn net(sim: &mut Sim) -> &mut ChaCha8Rng {
        &mut sim.sinks.rng
    }

    fn back_at_heal(sim: &mut Sim, s: usize, up: usize) -> bool {
        !sim.sinks.procs[s].is_running() && (up == 0 || sim.sinks.rng.random_bool(sim.params.restart_at_heal))
    }

    /// A new sink; the snapshot's reader, if it starts from one, is handed in as `Restore` (as the shell does).
    fn make(sim: &mut Sim, s: usize, reader: Option<LogReader>) -> (SinkRole, Option<LogReader>) {
        let mut cfg = config(&sim.params, sim.sinks.procs[s].member());
        cfg.role.speaks = sim.sinks.procs[s].speaks;
        (SinkRole { sink: Sink::new(cfg), writes: BTreeMap::new(), promises: BTreeMap::new() }, reader)
    }

    fn note(sim: &mut Sim, _s: usize, act: Act) {
        let k = &mut sim.sinks.counters;
        match act {
            Act::Crash => k.crashes += 1,
            Act::Pause => k.pauses += 1,
            Act::Leave => k.leaves += 1,
            _ => {}
        }
    }

    fn may_exit(sim: &Sim, s: usize) -> bool {
        sim.sinks.procs[s].sink().is_some_and(|k| k.is_done())
    }

    fn before_step(sim: &mut Sim, s: usize, input: &Option<Input>) -> SinkStep {
        sim.sinks.counters.steps += 1;
        let p = &mut sim.sinks.procs[s];
        let lost = lost_so_far(p);
        let role = p.role.as_mut().expect("step of a running sink");
        let refused = match input {
            Some(Input::Written { batch, result }) => {
                let sent = role.writes.remove(batch);
                if matches!(result, Err(IoError::Refused(_))) {
                    sent
                } else {
                    None
                }
            }
            _ => None,
        };
        SinkStep { refused, skipped: role.sink.counters.rows_skipped, lost }
    }

    /// Its self-check, the objects it said lost history, and the rows it counted as skipped (invariant 10).
    fn after_step(sim: &mut Sim, s: usize, step: SinkStep) -> bool {
        let sink = sim.sinks.procs[s].sink().expect("a running sink");
        let skipped = sink.counters.rows_skipped - step.skipped;
        if let Err(e) = sink.check_invariants() {
            sim.fail(Category::Safety, "sink self-check", format!("s{}: {e}", s + 1));
            return false;
        }
        sim.note_step_lost::<SinkRole>(s, step.lost);
        sim.note_skips(s, step.refused, skipped)
    }

    fn step_hash(s: usize, outputs: usize) -> u64 {
        0x5100_0000 ^ s as u64 ^ (outputs as u64) << 8
    }

    fn carry_out(sim: &mut Sim, s: usize, out: Output) {
        match out {
            Output::Life(LifeOutput::NeedSnapshot { covering }) => sim.need_snapshot(Who::Sink(s), covering),
            Output::Life(LifeOutput::Membership(MembershipOutput::PutHeartbeat { bucket, member, ttl })) => {
                let p = &sim.sinks.procs[s];
                let (hb_loss, can_send) = (p.hb_loss > 0, p.can_send());
                let lost = hb_loss && sim.sinks.rng.random_bool(sim.params.heartbeat_loss);
                // Answered `ok` once the ack is back within the publish timeout, else failed at the timeout, in
                // the order of the puts, as the engines' are. The way back takes as long as the way there: no
                // draw of its own, so the sinks' random streams, and what they do, are as before the answers.
                let mut answer = (sim.params.append_timeout_ms, false);
                if can_send && !lost {
                    let d = sim.hop::<SinkRole>(s);
                    let ttl_ms = ttl.as_millis() as u64;
                    let format = sim.sinks.procs[s].speaks;
                    sim.after(d, Ev::HeartbeatLand { bucket, member, ttl_ms, format });
                    if sim.sinks.procs[s].can_recv() && 2 * d <= answer.0 {
                        answer = (2 * d, true);
                    }
                }
                let (after, ok) = answer;
                sim.answer_heartbeat::<SinkRole>(s, after, ok);
            }
            Output::Life(LifeOutput::Membership(MembershipOutput::DeleteHeartbeat { bucket, member })) => {
                if sim.sinks.procs[s].can_send() {
                    let d = sim.hop::<SinkRole>(s);
                    sim.after(d, Ev::HeartbeatDelete { bucket, member });
                }
            }
            Output::QueryProgress { token, objects } => sim.sql_request(s, Req::Query { token, objects }, None),
            Output::Replay { token, from, to } => sim.sink_replay(s, token, from, to),
            Output::Write(batch) => {
                let promise = match sim.sinks.procs[s].role.as_ref() {
                    Some(role) => match role.promises.get(&batch.id) {
                        Some(p) => p.clone(),
                        None => sim.progress_promise(&role.sink, &batch),
                    },
                    None => None,
                };
                if let Some(role) = sim.sinks.procs[s].role.as_mut() {
                    role.writes.insert(batch.id, batch.clone());
                    // One transaction out at a time: the ones before this batch are done.
                    role.promises.retain(|id, _| *id >= batch.id);
                    role.promises.entry(batch.id).or_insert_with(|| promise.clone());
                }
                sim.sql_request(s, Req::Write(batch), promise);
            }
        }
    }
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

    pub(in crate::world) fn sink_event(&mut self, e: SinkEv) {
        match e {
            SinkEv::Replayed { s, inc, token, result } => {
                if self.sinks.procs[s].is_current(inc) {
                    self.step_as::<SinkRole>(s, Some(Input::Replayed { token, result }));
                }
            }
            SinkEv::SqlLand { req } => self.sql_land(req),
            SinkEv::SqlAnswer { s, inc, req, answer } => self.sql_answer(req, s, inc, Some(answer)),
            SinkEv::SqlTimeout { s, inc, req } => self.sql_answer(req, s, inc, None),
            SinkEv::DownTick => self.sql_down_tick(),
            SinkEv::Up { gen } => {
                if gen == self.sinks.down_gen {
                    self.set_sql_down(false);
                }
            }
        }
    }

    /// A swarm run's sinks start at random moments in the first 2 s; the database's outages are scheduled.
    pub(in crate::world) fn start_sinks(&mut self) {
        for s in 0..self.sinks.len() {
            let at = self.sinks.procs[s].rng.random_range(0..=2_000);
            self.push(Time(at), Ev::Life(Who::Sink(s), super::lifecycle::LifeEv::Restart { healing: false }));
        }
        if self.sinks.len() > 0 && self.params.sink.down_every_ms > 0 {
            let at = exp(&mut self.sinks.rng, self.params.sink.down_every_ms) + 2_000;
            self.push(Time(at), Ev::Sink(SinkEv::DownTick));
        }
    }

    /// Entry `seq` landed in the log: the checker of invariant 10 learns it, every following sink reads it after
    /// its own lag.
    pub(in crate::world) fn sinks_log_landed(&mut self, seq: u64) {
        if self.sinks.len() == 0 {
            return;
        }
        self.note_storable(seq);
        self.follow_log::<SinkRole>(seq);
    }

    /// The heal, for the sinks: the database is up, and every sink heals as every process does.
    pub(in crate::world) fn heal_sinks(&mut self) {
        if self.sinks.len() == 0 {
            return;
        }
        self.sinks.down_gen += 1;
        self.set_sql_down(false);
        if self.sinks.procs.iter().any(|p| p.is_leaving()) {
            let leave_timeout = config(&self.params, self.sinks.procs[0].member()).leave_timeout;
            self.note_sink_leaving_at_heal(leave_timeout.as_millis() as u64);
        }
        self.heal_role::<SinkRole>();
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

    /// A check's output as a worker reports it: with sinks, a short text (sometimes with what the database
    /// refuses); without, empty as before.
    pub(in crate::world) fn check_output(&self, check_id: u64, object: &ObjectId, state: State) -> String {
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

    fn sink_chance(&mut self, p: f64) -> bool {
        self.phase == Phase::Safety && p > 0.0 && self.sinks.rng.random_bool(p)
    }

    /// A replay read of the log (a JetStream fetch of `from..=to`): all of it, or in the safety phase now
    /// and then only its first entries; a sink cut from NATS gets a timeout.
    fn sink_replay(&mut self, s: usize, token: u64, from: u64, to: u64) {
        let inc = self.sinks.procs[s].inc;
        let p = &self.sinks.procs[s];
        if !p.can_send() || !p.can_recv() {
            let result = Err(IoError::Timeout);
            self.after(self.params.forward_timeout_ms, Ev::Sink(SinkEv::Replayed { s, inc, token, result }));
            return;
        }
        let end = to.min(self.log.len());
        let upto = if end > from && self.sink_chance(0.2) { self.sinks.rng.random_range(from..end) } else { end };
        let entries = self.log.read_range(from, upto);
        let d = self.hop::<SinkRole>(s) + self.hop::<SinkRole>(s);
        self.after(d, Ev::Sink(SinkEv::Replayed { s, inc, token, result: Ok((upto, entries)) }));
    }
}

fn brief_input(i: &Input) -> String {
    match i {
        Input::Life(Life::Log { seq, entry }) => format!("log {seq} {}", brief_entry(entry)),
        Input::Life(Life::Member(o)) => format!("member rev {} {:?} {:?}", o.rev, o.bucket, o.change),
        Input::Progress { token, result } => match result {
            Ok(v) => format!("progress {token}: {} objects stored", v.len()),
            Err(e) => format!("progress {token}: {e}"),
        },
        Input::Replayed { token, result } => match result {
            Ok((upto, v)) => format!("replayed {token}: {} entries up to {upto}", v.len()),
            Err(e) => format!("replayed {token}: {e}"),
        },
        Input::Written { batch, result } => format!("written {batch}: {result:?}"),
        Input::Life(Life::Restore(r)) => format!("restore: the snapshot at {}", r.position()),
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
