//! The checker of a worker's backlog (`sim/README.md`, "Invariants and where they are checked"): work a
//! worker's backlog holds past its timeout plus core's check grace is dropped unstarted, never started
//! (`jaque_core::backlog`: its engine stopped waiting for the result, so running it would only take a slot from
//! work whose result is still awaited), and every piece of work a worker took is accounted for exactly once:
//! started, dropped and counted expired, or still waiting.
//!
//! Measured on the simulator's own clock from when the work reached its worker, not from what the backlog
//! says it waited.

use crate::world::workers::Job;
use crate::world::{Category, Sim};
use jaque_core::backlog::Backlog;

impl Sim {
    /// Worker `w` picked `started` (if any) from its backlog at `now` and counted what it dropped as expired:
    /// the work started must still be worth starting, and taken = started + expired + waiting. False on a
    /// violation.
    pub(in crate::world) fn check_backlog(&mut self, w: usize, started: Option<&Job>) -> bool {
        let now = self.now;
        if let Some(job) = started {
            let until = job.taken + Backlog::<Job>::useful_for(job.work.timeout());
            if now >= until {
                let msg = format!(
                    "worker {} started check {} of {} at {now}, taken at {} with a timeout of {}ms: past {until}, when it should have been dropped as expired",
                    w + 1,
                    job.work.check_id,
                    job.work.object,
                    job.taken,
                    job.work.timeout_ms
                );
                self.fail(Category::Safety, "worker backlog", msg);
                return false;
            }
        }
        let worker = &self.pool.workers[w];
        let waiting = worker.backlog_len() as u64;
        if worker.taken != worker.started + worker.expired + waiting {
            let msg = format!(
                "worker {} took {} checks but started {}, counted {} expired and holds {waiting}",
                w + 1,
                worker.taken,
                worker.started,
                worker.expired
            );
            self.fail(Category::Safety, "worker backlog", msg);
            return false;
        }
        true
    }
}
