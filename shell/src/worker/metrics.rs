//! The worker's counters (process-wide: one worker a process) and its part of `/metrics`.

use crate::metrics::Exposition;
use jaque_core::{Lateness, LATENESS_BOUNDS_MS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Checks this worker ran, by resulting state (`State as usize`).
pub static WORKER_CHECKS: [AtomicU64; 5] =
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Bytes of plugin output past `plugins::OUTPUT_MAX`, read and dropped.
pub static PLUGIN_OUTPUT_DISCARDED: AtomicU64 = AtomicU64::new(0);
/// Check work a worker took and dropped unstarted: the engine had stopped waiting for its result.
pub static WORKER_CHECKS_EXPIRED: AtomicU64 = AtomicU64::new(0);
/// Check work a worker took and has not started yet: every slot was busy.
pub static WORKER_CHECKS_WAITING: AtomicU64 = AtomicU64::new(0);
/// How long the checks a worker started waited for a slot, from when it took them.
pub static WORKER_CHECK_WAIT: Mutex<Lateness> =
    Mutex::new(Lateness { buckets: [0; LATENESS_BOUNDS_MS.len() + 1], count: 0, sum_ms: 0, max_ms: 0 });

/// The worker's part of `/metrics`.
pub fn expose(out: &mut Exposition) {
    out.header("jaque_worker_checks_total", "counter", "Checks this worker ran, by resulting state.");
    for (i, state) in ["pending", "ok", "warning", "critical", "unknown"].iter().enumerate().skip(1) {
        out.sample("jaque_worker_checks_total", &[("state", state)], WORKER_CHECKS[i].load(Ordering::Relaxed));
    }
    out.one(
        "jaque_worker_checks_waiting",
        "gauge",
        "Checks this worker took and has not started: every one of its -worker-concurrency slots is busy.",
        WORKER_CHECKS_WAITING.load(Ordering::Relaxed),
    );
    let wait = WORKER_CHECK_WAIT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    out.histogram_ms(
        "jaque_worker_check_wait_seconds",
        "How long the checks this worker started waited for a free slot, from when it took them: the part of \
         a check's delay the engine's start lateness does not see.",
        &LATENESS_BOUNDS_MS,
        &wait.buckets,
        wait.sum_ms,
    );
    out.one(
        "jaque_worker_checks_expired_total",
        "counter",
        "Checks this worker took but did not start: older than their timeout plus the engine's 2 s grace, \
         the engine had stopped waiting for their result (more work than the worker runs, for that long).",
        WORKER_CHECKS_EXPIRED.load(Ordering::Relaxed),
    );
    out.one(
        "jaque_worker_plugin_output_discarded_bytes_total",
        "counter",
        "Bytes of exec plugin output past the 64 KiB a worker reads, discarded.",
        PLUGIN_OUTPUT_DISCARDED.load(Ordering::Relaxed),
    );
}
