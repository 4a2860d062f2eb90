//! Check workers of limited capacity (`Params::workers`): a queue group of workers, each with so many check
//! slots and a `jaque_core::backlog::Backlog` of the work it took while every slot was busy, driven as the
//! `jaque` binary drives it. A dispatched check goes to one worker of the group, waits in its backlog, is
//! started when a slot frees (or dropped unstarted once its engine has stopped waiting for it), runs, and its
//! result goes back to the engine that sent it. Without `workers` (the default, and every seed from before
//! this model) a check is answered after a latency up to its timeout, as if workers had no limit.

use super::{Ev, Sim};
use crate::params::{stream, PoolParams, Stream};
use jaque_core::backlog::Backlog;
use jaque_core::{CheckResult, CheckWork, State, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// A check on its way through a worker: which engine incarnation sent it, and the work.
#[derive(Clone, Debug)]
pub(super) struct Job {
    node: usize,
    inc: u64,
    pub(super) work: CheckWork,
    /// When its worker took it (set as it reaches the worker): the backlog's promise is measured from here.
    pub(super) taken: Time,
}

#[derive(Clone, Debug)]
pub(super) enum WorkerEv {
    /// The work reaches worker `w`.
    Take { w: usize, job: Job },
    /// Worker `w` finished a check: its slot is free, the result goes back.
    Finish { w: usize, node: usize, inc: u64, result: CheckResult },
}

impl WorkerEv {
    pub fn code(&self) -> u64 {
        match self {
            WorkerEv::Take { .. } => 1,
            WorkerEv::Finish { .. } => 2,
        }
    }
}

pub(super) struct Worker {
    running: usize,
    backlog: Backlog<Job>,
    /// Work this worker took, started, and counted expired: every piece taken is one of started, expired or
    /// waiting (`checks/worker_backlog.rs`).
    pub(super) taken: u64,
    pub(super) started: u64,
    pub(super) expired: u64,
}

/// What the pool did, for reports and scenarios.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub started: u64,
    /// Dropped unstarted from a backlog (`jaque_worker_checks_expired_total`).
    pub expired: u64,
    /// Taken while every slot of the worker was busy.
    pub waited: u64,
    /// The longest backlog of any worker.
    pub max_waiting: usize,
    /// The longest a check started waited in a backlog.
    pub max_wait_ms: u64,
}

pub(super) struct Pool {
    params: Option<PoolParams>,
    pub(super) workers: Vec<Worker>,
    rng: ChaCha8Rng,
    /// Since the heal the workers have no limit: a check the pool drops is a fault of the safety phase, like a
    /// lost result, and the liveness phase demands every object checked within a budget that has no room for it.
    healed: bool,
    pub stats: PoolStats,
}

impl Worker {
    pub(super) fn backlog_len(&self) -> usize {
        self.backlog.len()
    }
}

impl Pool {
    pub fn new(seed: u64, params: Option<PoolParams>) -> Pool {
        let n = params.map_or(0, |p| p.workers.max(1));
        let workers = (0..n)
            .map(|_| Worker { running: 0, backlog: Backlog::default(), taken: 0, started: 0, expired: 0 })
            .collect();
        Pool { params, workers, rng: stream(seed, Stream::Workers, 0), healed: false, stats: PoolStats::default() }
    }

    pub fn is_on(&self) -> bool {
        self.params.is_some()
    }
}

impl Sim {
    /// Engine `n` (incarnation `inc`) sent `work` to the queue group: one worker takes it.
    pub(super) fn pool_dispatch(&mut self, n: usize, inc: u64, work: CheckWork) {
        let w = self.pool.rng.random_range(0..self.pool.workers.len());
        let d = self.delay(n);
        self.after(d, Ev::Worker(WorkerEv::Take { w, job: Job { node: n, inc, work, taken: Time::ZERO } }));
    }

    pub(super) fn worker_event(&mut self, e: WorkerEv) {
        match e {
            WorkerEv::Take { w, mut job } => {
                let now = self.now;
                job.taken = now;
                let slots = self.pool.params.map_or(1, |p| p.slots.max(1));
                let worker = &mut self.pool.workers[w];
                if worker.running >= slots && !self.pool.healed {
                    self.pool.stats.waited += 1;
                }
                worker.backlog.take(now, job.work.timeout(), job);
                worker.taken += 1;
                self.pool.stats.max_waiting = self.pool.stats.max_waiting.max(worker.backlog.len());
                self.start_ready(w);
            }
            WorkerEv::Finish { w, node, inc, result } => {
                self.pool.workers[w].running -= 1;
                let d = self.delay(node);
                self.after(d, Ev::CheckDone { node, inc, result });
                self.start_ready(w);
            }
        }
    }

    /// The heal: from now on the workers have no limit, and start whatever waits.
    pub(super) fn heal_pool(&mut self) {
        self.pool.healed = true;
        for w in 0..self.pool.workers.len() {
            self.start_ready(w);
        }
    }

    /// Starts what worker `w`'s free slots can take from its backlog.
    fn start_ready(&mut self, w: usize) {
        let Some(p) = self.pool.params else { return };
        let slots = if self.pool.healed { usize::MAX } else { p.slots.max(1) };
        loop {
            let now = self.now;
            let (worker, rng) = (&mut self.pool.workers[w], &mut self.pool.rng);
            if worker.running >= slots {
                break;
            }
            let next = worker.backlog.next(now, |k| rng.random_range(0..k));
            let expired = worker.backlog.take_expired();
            worker.expired += expired;
            worker.started += u64::from(next.is_some());
            self.pool.stats.expired += expired;
            if !self.check_backlog(w, next.as_ref().map(|(job, _)| job)) {
                return;
            }
            let Some((job, waited)) = next else { break };
            let worker = &mut self.pool.workers[w];
            self.pool.stats.max_wait_ms = self.pool.stats.max_wait_ms.max(waited.as_millis() as u64);
            worker.running += 1;
            self.pool.stats.started += 1;
            let (latency, result) = self.run_check(&job, p, now);
            self.after(latency, Ev::Worker(WorkerEv::Finish { w, node: job.node, inc: job.inc, result }));
        }
    }

    /// How long the check of `job` started at `now` runs, and its result.
    fn run_check(&mut self, job: &Job, p: PoolParams, now: Time) -> (u64, CheckResult) {
        let work = &job.work;
        let timeout = work.timeout_ms.max(1);
        let mut latency = self.pool.rng.random_range(1..=timeout);
        let mut state = self.truth(&work.object, now + Duration::from_millis(latency / 2));
        if p.critical_times_out && self.truth(&work.object, now) == State::Critical {
            (latency, state) = (timeout, State::Critical);
        }
        (latency, self.result_of(work, state))
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats
    }
}
