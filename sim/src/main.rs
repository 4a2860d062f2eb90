//! `jaque-sim`: run seeds of the deterministic simulator. See sim/README.md.

use jaque_sim::run::Report;
use jaque_sim::{run_seed, Category, Params};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const EXIT_SAFETY: u8 = 1;
const EXIT_LIVENESS: u8 = 2;
const EXIT_PANIC: u8 = 3;
const EXIT_NONDETERMINISTIC: u8 = 4;
const EXIT_USAGE: u8 = 64;

const USAGE: &str = "\
usage: jaque-sim [--seed N] [--seeds K] [--check-determinism] [--keep-going] [--verbose] [--trace LINES] [--jobs N]
       jaque-sim --bench [--seed N] [--bench-seconds S]

  --seed N             run seed N (with --seeds: the first of K consecutive seeds)
  --seeds K            run K seeds: N, N+1, ... (a random base is drawn and printed without --seed)
  --check-determinism  run every seed twice and compare trace hashes
  --keep-going         with --seeds: report every failing seed instead of stopping at the first
  --verbose            print every seed's banner and result
  --trace LINES        trace lines printed on failure (default 60)
  --jobs N             run seeds on N threads (output stays in seed order; default 1)
  --bench              benchmark: 5 engines, 1000 objects, all faults; then swarm seeds per minute

exit codes: 0 every invariant held; 1 safety violation; 2 liveness failure; 3 panic;
            4 nondeterminism (--check-determinism); 64 usage error";

struct Args {
    seed: Option<u64>,
    seeds: Option<u64>,
    determinism: bool,
    keep_going: bool,
    verbose: bool,
    trace: usize,
    bench: bool,
    bench_seconds: u64,
    jobs: u64,
    /// Hidden: one line per seed with its outcome, trace hash, simulated time and statistics (deterministic
    /// fields only), to compare two builds seed by seed (a refactor must not move any of them).
    print_hash: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seed: None,
        seeds: None,
        determinism: false,
        keep_going: false,
        verbose: false,
        trace: 60,
        bench: false,
        bench_seconds: 20,
        jobs: 1,
        print_hash: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} needs a number"))?;
            v.parse::<u64>().map_err(|_| format!("{name} needs a non-negative integer, got {v:?}"))
        };
        match arg.as_str() {
            "--seed" => a.seed = Some(num("--seed")?),
            "--seeds" => a.seeds = Some(num("--seeds")?),
            "--trace" => a.trace = num("--trace")? as usize,
            "--bench-seconds" => a.bench_seconds = num("--bench-seconds")?,
            "--jobs" | "-j" => a.jobs = num("--jobs")?,
            "--check-determinism" => a.determinism = true,
            "--keep-going" => a.keep_going = true,
            "--verbose" | "-v" => a.verbose = true,
            "--bench" => a.bench = true,
            "--print-hash" => a.print_hash = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.seeds == Some(0) {
        return Err("--seeds needs at least 1".into());
    }
    if a.seed.is_none() && a.seeds.is_none() && !a.bench {
        return Err("give --seed N, --seeds K or --bench".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("jaque-sim: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if e.is_empty() { 0 } else { EXIT_USAGE });
        }
    };
    if args.bench {
        return bench(&args);
    }
    let (base, count) = match (args.seed, args.seeds) {
        (Some(s), None) => (s, 1),
        (Some(s), Some(k)) => (s, k),
        (None, Some(k)) => {
            let s = random_base();
            println!("base seed {s} (random; replay this sweep with --seeds {k} --seed {s})");
            (s, k)
        }
        (None, None) => unreachable!("checked in parse"),
    };
    sweep(&args, base, count)
}

fn random_base() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64 ^ (std::process::id() as u64) << 32) % 1_000_000_000_000
}

/// What a sweep has seen so far.
struct Tally {
    start: Instant,
    first_failure: Option<u8>,
    failed: Vec<u64>,
    sim_total: Duration,
    events: u64,
    ran: u64,
    /// Faults between attempts: (seeds with them on, faults done, counts that went on at another owner in those
    /// seeds, and in the others).
    between: (u64, u64, u64, u64),
    /// Policy changes: (seeds with them on, submitted, applied, refused, readers held to the oracle's policy,
    /// recoveries held to their episodes).
    policy: (u64, u64, u64, u64, u64, u64, u64),
}

enum Next {
    Go,
    Stop,
    Exit(u8),
}

fn sweep(args: &Args, base: u64, count: u64) -> ExitCode {
    let single = count == 1;
    let mut t = Tally {
        start: Instant::now(),
        first_failure: None,
        failed: Vec::new(),
        sim_total: Duration::ZERO,
        events: 0,
        ran: 0,
        between: (0, 0, 0, 0),
        policy: (0, 0, 0, 0, 0, 0, 0),
    };
    let progress_every = (count / 20).max(1);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(u64, Report, Option<Report>)>();
    let mut exit = None;
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.clamp(1, 64) {
            let (tx, next, stop) = (tx.clone(), &next, &stop);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= count || stop.load(Ordering::SeqCst) {
                    break;
                }
                let params = Params::draw(base.wrapping_add(i));
                let report = run_seed(params.clone(), 0);
                let again = args.determinism.then(|| run_seed(params, 0));
                if tx.send((i, report, again)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Results are taken in seed order, so the output reads as a sequential sweep's would.
        let mut pending = BTreeMap::new();
        let mut expect = 0;
        'results: for (i, report, again) in rx {
            pending.insert(i, (report, again));
            while let Some((report, again)) = pending.remove(&expect) {
                match one_seed(args, single, &mut t, report, again) {
                    Next::Go => {}
                    Next::Stop => {
                        stop.store(true, Ordering::SeqCst);
                        break 'results;
                    }
                    Next::Exit(code) => {
                        stop.store(true, Ordering::SeqCst);
                        exit = Some(code);
                        break 'results;
                    }
                }
                expect += 1;
                if !single && expect % progress_every == 0 {
                    println!(
                        "{expect}/{count} seeds, {} failed, {:.0}s simulated in {:.1}s",
                        t.failed.len(),
                        t.sim_total.as_secs_f64(),
                        t.start.elapsed().as_secs_f64()
                    );
                }
            }
        }
    });
    if let Some(code) = exit {
        return ExitCode::from(code);
    }
    if !single {
        let real = t.start.elapsed().as_secs_f64();
        println!(
            "seeds {base}..{}{}: {} failed {:?}; {:.0}s simulated, {} events in {real:.1}s ({:.0}x real time)",
            base.wrapping_add(t.ran.max(1) - 1),
            if t.ran < count { " (stopped at the first failure; --keep-going runs on)" } else { "" },
            t.failed.len(),
            t.failed,
            t.sim_total.as_secs_f64(),
            t.events,
            t.sim_total.as_secs_f64() / real.max(1e-9)
        );
        let (on, faults, continued, elsewhere) = t.between;
        println!(
            "faults between attempts: on in {on} of {} seeds, {faults} done; attempts that went on at another owner: {continued} in those seeds, {elsewhere} in the others",
            t.ran
        );
        let (on, submitted, applied, refused, checked, resolves, releases) = t.policy;
        println!(
            "policy changes: on in {on} of {} seeds, {submitted} submitted, {applied} applied, {refused} refused; readers held to the oracle's policy {checked} times; {resolves} recoveries held to their episodes; {releases} held problems released",
            t.ran
        );
    }
    ExitCode::from(t.first_failure.unwrap_or(0))
}

fn one_seed(args: &Args, single: bool, t: &mut Tally, report: Report, again: Option<Report>) -> Next {
    let seed = report.params.seed;
    if single || args.verbose {
        println!("{}", report.params);
    }
    t.sim_total += report.sim_time;
    t.events += report.stats.events;
    t.ran += 1;
    let a = &report.stats.alerts;
    if report.params.attempt_faults > 0.0 {
        t.between.0 += 1;
        t.between.1 += a.attempt_faults;
        t.between.2 += a.continued;
    } else {
        t.between.3 += a.continued;
    }
    let p = &report.stats.policy;
    if report.params.policy_changes > 0.0 {
        t.policy.0 += 1;
    }
    t.policy.1 += p.submitted;
    t.policy.2 += p.applied;
    t.policy.3 += p.rejected;
    t.policy.4 += p.checked;
    t.policy.5 += p.resolves;
    t.policy.6 += p.releases;
    if args.print_hash {
        let s = &report.stats;
        let outcome = match &report.result {
            Ok(()) => "ok".to_string(),
            Err(v) => format!("{:?} {} at {}", v.category, v.invariant, v.at),
        };
        // Only what a run determines: no real time.
        println!(
            "hash seed={seed} outcome={outcome:?} trace={:016x} sim_ms={} events={} steps={} log={} epochs={} stale={} commands={} applied={} not_owned={} unavailable={} checks={} forwards={} faults={} crashes={} pauses={} leaves={} converged_after_ms={} budget_ms={} check_pct={}",
            report.trace_hash,
            report.sim_time.as_millis(),
            s.events,
            s.engine_steps,
            s.log_entries,
            s.epochs,
            s.stale,
            s.commands,
            s.applied,
            s.not_owned,
            s.unavailable,
            s.checks,
            s.forwards,
            s.faults,
            s.crashes,
            s.pauses,
            s.leaves,
            s.converged_after_ms,
            s.converge_budget_ms,
            s.check_budget_used_pct
        );
        // Seeds without snapshots print exactly what they printed before snapshots joined the simulator.
        if report.params.snapshots.on {
            let k = &s.snap;
            println!(
                "  snap seed={seed} writes={} stored={} refused={} answers_lost={} late={} purges={} purged_below={} starts={} loads={} jumps={} lost_sink={} lost_notifier={} checks={} to_end={} at_hole={}",
                k.writes, k.stored, k.refused, k.answers_lost, k.late, k.purges, k.purged_below, k.starts, k.loads, k.jumps, k.lost_sink, k.lost_notifier, k.checks, k.checks_to_end, k.checks_at_hole
            );
        }
        let a = &s.alerts;
        println!(
            "  alerts seed={seed} soft={} hard_after_attempts={} back={} flap_starts={} flap_ends={} passed_over={} attempt_faults={} continued={}",
            a.soft, a.hard_after_attempts, a.back, a.flap_starts, a.flap_ends, a.passed_over, a.attempt_faults, a.continued
        );
        // Seeds without policy changes print exactly what they printed before the policy joined the simulator.
        if report.params.policy_changes > 0.0 {
            let p = &s.policy;
            println!(
                "  policy seed={seed} submitted={} applied={} refused={} checked={} resolves={} releases={}",
                p.submitted, p.applied, p.rejected, p.checked, p.resolves, p.releases
            );
        }
        if report.params.versions.is_mixed() {
            let v = &s.versions;
            println!(
                "  versions seed={seed} upgrades={} blocked={} unack_applied={} unack_refused={} format={} raised_at_ms={}",
                v.upgrades, v.blocked, v.unack_applied, v.unack_refused, v.format, v.raised_at_ms
            );
        }
        // Seeds without notifiers print exactly what they printed before notifiers joined the simulator.
        if s.notify.notifiers > 0 {
            let n = &s.notify;
            println!(
                "  notify seed={seed} steps={} sends={} received={} delivered={} repeats={} faulty={} faults={} give_ups={} writes={} drain_ms={}",
                n.steps, n.sends, n.received, n.delivered, n.repeats, n.faulty_sends, n.faults, n.give_ups, n.progress_writes, n.drain_ms
            );
        }
    }
    if let Some(again) = again {
        if again.trace_hash != report.trace_hash || again.sim_time != report.sim_time {
            println!("{}", report.params);
            println!(
                "NONDETERMINISTIC: seed {seed}: trace hash {:016x} then {:016x} (sim time {:?} then {:?})",
                report.trace_hash, again.trace_hash, report.sim_time, again.sim_time
            );
            println!("replay: jaque-sim --seed {seed} --check-determinism");
            return Next::Exit(EXIT_NONDETERMINISTIC);
        }
        if single || args.verbose {
            println!("deterministic: trace hash {:016x} twice", report.trace_hash);
        }
    }
    match &report.result {
        Ok(()) => {
            if single || args.verbose {
                println!("seed {seed} ok: {}{}", summary(&report), sink_summary(&report));
            }
            Next::Go
        }
        Err(v) => {
            let code = match v.category {
                Category::Safety => EXIT_SAFETY,
                Category::Liveness => EXIT_LIVENESS,
                Category::Panic => EXIT_PANIC,
            };
            report_failure(&report, args.trace);
            t.failed.push(seed);
            t.first_failure.get_or_insert(code);
            if args.keep_going {
                Next::Go
            } else {
                Next::Stop
            }
        }
    }
}

fn summary(r: &Report) -> String {
    let s = &r.stats;
    format!(
        "{:.1}s simulated in {:.2}s ({:.0}x); converged {}ms after the heal (budget {}ms), checks used <={}% of their budget; {} events, {} log entries, {} epochs, {} commands ({} applied, {} not owned, {} unavailable), {} checks, {} forwards, {} faults ({} crashes, {} pauses, {} leaves), {} stale events; trace {:016x}",
        r.sim_time.as_secs_f64(),
        r.real_time.as_secs_f64(),
        r.sim_time.as_secs_f64() / r.real_time.as_secs_f64().max(1e-9),
        s.converged_after_ms,
        s.converge_budget_ms,
        s.check_budget_used_pct,
        s.events,
        s.log_entries,
        s.epochs,
        s.commands,
        s.applied,
        s.not_owned,
        s.unavailable,
        s.checks,
        s.forwards,
        s.faults,
        s.crashes,
        s.pauses,
        s.leaves,
        s.stale,
        r.trace_hash
    ) + &notify_summary(&s.notify)
        + &snap_summary(r)
        + &pool_summary(r)
        + &ingress_summary(r)
}

/// The ui's writes through ingress: attempts, claims, the ones sent again and why, invariant 12's.
fn ingress_summary(r: &Report) -> String {
    let k = &r.stats.ingress;
    if k.writes == 0 {
        return String::new();
    }
    format!(
        "; ingress: {} writes in {} attempts ({} to members that had stopped answering), {} claims, {} declines, sent again {} unclaimed / {} declined, {} ended unclaimed, longest {}ms",
        k.writes, k.attempts, k.to_dark_members, k.claims, k.declines, k.resent_unclaimed, k.resent_declined, k.unclaimed, k.longest_ms
    )
}

/// The check workers' part of a seed's summary, when they have a limit.
fn pool_summary(r: &Report) -> String {
    let k = &r.stats.pool;
    match r.params.workers {
        None => String::new(),
        Some(_) => format!(
            "; workers: {} checks started, {} taken while every slot was busy (started after up to {}ms), {} dropped unstarted, backlog up to {}",
            k.started, k.waited, k.max_wait_ms, k.expired, k.max_waiting
        ),
    }
}

/// The snapshots' part of a seed's summary (invariant 11's checks in every seed, the rest with snapshots on).
fn snap_summary(r: &Report) -> String {
    let k = &r.stats.snap;
    let checks = format!(
        "; invariant 11: {} readers from snapshots ({} read to the log's end, {} stopped at a hole)",
        k.checks, k.checks_to_end, k.checks_at_hole
    );
    if !r.params.snapshots.on {
        return checks;
    }
    format!(
        "; snapshots: {} written ({} stored, {} refused, {} answers lost, {} late), {} purges (below {}), {} starts from one, {} loads after a hole ({} jumps), objects with lost history: {} by sinks, {} by notifiers",
        k.writes, k.stored, k.refused, k.answers_lost, k.late, k.purges, k.purged_below, k.starts, k.loads, k.jumps, k.lost_sink, k.lost_notifier
    ) + &checks
}

fn notify_summary(n: &jaque_sim::NotifyStats) -> String {
    if n.notifiers == 0 {
        return String::new();
    }
    format!(
        "; notifiers: {} sends, {} received by the endpoints ({} delivered: {} required, {} repeats, {} sends in flight at a fault), {} notifier faults ({} sends and {} claims in flight at them, {} claims orphaned), {} given up, {} disabled by 410, {} progress writes, drained {}ms after the engines (budget {}ms per step)",
        n.sends,
        n.received,
        n.delivered,
        n.required,
        n.repeats,
        n.faulty_sends,
        n.faults,
        n.inflight_at_faults,
        n.claims_at_faults,
        n.orphaned_claims,
        n.give_ups,
        n.disabled,
        n.progress_writes,
        n.drain_ms,
        n.drain_budget_ms
    )
}

/// The sinks' part of a seed's summary (empty without sinks).
fn sink_summary(r: &Report) -> String {
    let k = &r.stats.sink;
    if r.params.sinks == 0 {
        return String::new();
    }
    format!(
        "; sinks: {} steps, {} transactions ({} conflicts ignored, {} refused, {} answers lost, {} late), {} outages, settled {}ms after the heal, {} rows degraded, {} skipped ({} of them storable degraded)",
        k.steps,
        k.transactions,
        k.conflicts,
        k.refused,
        k.lost_answers,
        k.late,
        k.downs,
        k.settled_after_ms,
        k.degraded,
        k.skips,
        k.collateral_skips
    )
}

fn report_failure(report: &Report, lines: usize) {
    let Err(v) = &report.result else { return };
    let seed = report.params.seed;
    println!("{}", report.params);
    println!("FAILED seed {seed}: {:?} violation of invariant {} at {}", v.category, v.invariant, v.at);
    println!("  {}", v.message);
    // Replaying is deterministic: run again, this time keeping the last trace lines.
    let replay = run_seed(report.params.clone(), lines.max(1));
    if replay.trace_hash != report.trace_hash {
        println!("  (the replay diverged: trace hash {:016x} vs {:016x})", replay.trace_hash, report.trace_hash);
    }
    println!("last {} trace lines:", replay.trace.len());
    for l in &replay.trace {
        println!("  {l}");
    }
    println!("replay: jaque-sim --seed {seed}");
    println!("        (cargo run --release -p jaque-sim -- --seed {seed})");
}

fn bench(args: &Args) -> ExitCode {
    let seed = args.seed.unwrap_or(1);
    let params = Params::bench(seed);
    println!("benchmark world (seed {seed}):\n{params}");
    let report = run_seed(params, 0);
    println!("{}", summary(&report));
    println!(
        "simulated/real time: {:.0}x ({:.0}s simulated in {:.2}s)",
        report.sim_time.as_secs_f64() / report.real_time.as_secs_f64().max(1e-9),
        report.sim_time.as_secs_f64(),
        report.real_time.as_secs_f64()
    );
    let mut code = 0;
    if let Err(v) = &report.result {
        println!("benchmark seed failed: {} — {}", v.invariant, v.message);
        code = EXIT_SAFETY;
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs(args.bench_seconds) {
        let r = run_seed(Params::draw(seed.wrapping_add(n)), 0);
        if r.result.is_err() {
            code = code.max(1);
        }
        n += 1;
    }
    let per_min = n as f64 * 60.0 / start.elapsed().as_secs_f64();
    println!("swarm seeds: {n} in {:.1}s = {per_min:.0} seeds per minute", start.elapsed().as_secs_f64());
    ExitCode::from(code)
}
