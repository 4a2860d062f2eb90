//! Prometheus text exposition. The page's names are a contract: `jaque_engine_stale_epoch_total`,
//! `jaque_engine_commands_forwarded_total{outcome}`, `jaque_engine_not_owned_total`. Process-wide counters
//! (wire errors, worker checks) live here as atomics; the engine's come from its own counters.

use jaque_core::{Lateness, LATENESS_BOUNDS_MS};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static WIRE_ERRORS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
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

/// Counts a message that could not be decoded and was skipped.
pub fn wire_error(what: &'static str) {
    *WIRE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).entry(what).or_default() += 1;
}

/// A text exposition being written.
#[derive(Default)]
pub struct Exposition(pub String);

impl Exposition {
    pub fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            let _ = writeln!(self.0, "{name}{{{}}} {value}", l.join(","));
        }
    }

    /// A histogram in seconds from counts per bucket in milliseconds (`counts[i]` at most `bounds_ms[i]`, the
    /// last one past every bound), cumulated as Prometheus wants them.
    pub fn histogram_ms(&mut self, name: &str, help: &str, bounds_ms: &[u64], counts: &[u64], sum_ms: u64) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (bound, n) in bounds_ms.iter().zip(counts) {
            cumulative += n;
            let le = format!("{}", *bound as f64 / 1000.0);
            self.sample(&bucket, &[("le", &le)], cumulative);
        }
        let count: u64 = counts.iter().sum();
        self.sample(&bucket, &[("le", "+Inf")], count);
        let _ = writeln!(self.0, "{name}_sum {}", sum_ms as f64 / 1000.0);
        self.sample(&format!("{name}_count"), &[], count);
    }

    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.header(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The process-wide part of /metrics.
pub fn process(out: &mut Exposition, worker: bool) {
    out.header("jaque_wire_decode_errors_total", "counter", "Messages that could not be decoded and were skipped.");
    let errors = WIRE_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if errors.is_empty() {
        out.sample("jaque_wire_decode_errors_total", &[("what", "any")], 0);
    }
    for (what, n) in errors {
        out.sample("jaque_wire_decode_errors_total", &[("what", what)], n);
    }
    crate::snapshots::expose(out);
    crate::coord::expose_followers(out);
    out.header(
        "jaque_http_unauthorized_total",
        "counter",
        "HTTP requests refused with 401 for a wrong or missing token (-read-token, -write-token, -metrics-token).",
    );
    out.sample("jaque_http_unauthorized_total", &[], crate::guard::unauthorized_total());
    out.header(
        "jaque_http_connections_refused_total",
        "counter",
        "HTTP connections closed before a request: a TLS handshake that failed or took too long.",
    );
    out.sample("jaque_http_connections_refused_total", &[], crate::serve::refused_total());
    if worker {
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
}
