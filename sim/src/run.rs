//! One seed from start to verdict. A panic anywhere (the core's or the simulator's) is caught and reported as
//! its own category; a failure is replayed with tracing on to print the last trace lines.

use crate::params::Params;
use crate::world::{Category, Sim, Stats, Violation};
use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;
use std::time::{Duration, Instant};

/// What one run ended with.
pub struct Report {
    pub params: Params,
    pub result: Result<(), Violation>,
    pub trace_hash: u64,
    pub sim_time: Duration,
    pub real_time: Duration,
    pub stats: Stats,
    /// The last trace lines (only when run with a trace).
    pub trace: Vec<String>,
}

thread_local! {
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Panics inside a run are recorded instead of printed; the report prints them.
fn install_hook() {
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let recorded = PANIC.with(|p| {
                let mut p = p.borrow_mut();
                if let Some(slot) = p.as_mut() {
                    let loc = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                    *slot = format!("{}{loc}", payload(info.payload()));
                    true
                } else {
                    false
                }
            });
            if !recorded {
                default(info);
            }
        }));
    });
}

fn payload(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

/// Runs one swarm seed with `params`; `trace` keeps that many last trace lines.
pub fn run_seed(params: Params, trace: usize) -> Report {
    install_hook();
    let start = Instant::now();
    PANIC.with(|p| *p.borrow_mut() = Some(String::new()));
    let mut sim = Sim::new(params.clone());
    if trace > 0 {
        sim = sim.with_trace(trace);
    }
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        sim.start_swarm();
        sim.run()
    }));
    sim.stats.stale = sim.oracle.reader.counters.stale_epoch_total;
    sim.stats.sink = sim.sink_stats();
    sim.stats.snap = sim.snap_stats().clone();
    sim.stats.pool = sim.pool_stats();
    sim.stats.ingress = sim.ingress_stats();
    sim.stats.alerts = sim.oracle.alerts.stats;
    sim.stats.policy.resolves = sim.oracle.resolves_checked;
    sim.stats.policy.releases = sim.oracle.releases;
    let msg = PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default();
    let result = match outcome {
        Ok(r) => r,
        Err(_) => Err(Violation { category: Category::Panic, invariant: "panic".into(), message: msg, at: sim.now() }),
    };
    Report {
        params,
        result,
        trace_hash: sim.trace_hash(),
        sim_time: Duration::from_millis(sim.now().0),
        real_time: start.elapsed(),
        stats: sim.stats.clone(),
        trace: sim.trace_lines(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_does_not_move_the_trace_hash() {
        // A failure is replayed with tracing on and must be the same run: the trace's text is not hashed.
        for seed in 1..=3 {
            let quiet = run_seed(Params::draw(seed), 0);
            let traced = run_seed(Params::draw(seed), 100_000);
            assert_eq!(quiet.trace_hash, traced.trace_hash, "seed {seed}");
            assert!(traced.trace.iter().any(|l| l.contains("<- timer Heartbeat")), "seed {seed}: timers named");
        }
    }

    #[test]
    fn a_panic_is_reported_as_its_own_category() {
        // No engine slot at all: the heal's restart of slot 0 indexes out of bounds.
        let report = run_seed(Params { engines: 0, ..Params::scripted(1, 0) }, 0);
        let v = report.result.expect_err("a panic");
        assert_eq!(v.category, Category::Panic);
        assert!(v.message.contains("index out of bounds"), "{}", v.message);
    }
}
