//! `jaque-sim`: run seeds of the deterministic simulator. See sim/README.md.

use jaque_sim::run::Report;
use jaque_sim::{run_seed, Category, Params};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const EXIT_SAFETY: u8 = 1;
const EXIT_LIVENESS: u8 = 2;
const EXIT_PANIC: u8 = 3;
const EXIT_NONDETERMINISTIC: u8 = 4;
const EXIT_USAGE: u8 = 64;

const USAGE: &str = "\
usage: jaque-sim [--seed N] [--seeds K] [--check-determinism] [--keep-going] [--verbose] [--trace LINES]
       jaque-sim --bench [--seed N] [--bench-seconds S]

  --seed N             run seed N (with --seeds: the first of K consecutive seeds)
  --seeds K            run K seeds: N, N+1, ... (a random base is drawn and printed without --seed)
  --check-determinism  run every seed twice and compare trace hashes
  --keep-going         with --seeds: report every failing seed instead of stopping at the first
  --verbose            print every seed's banner and result
  --trace LINES        trace lines printed on failure (default 60)
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
            "--check-determinism" => a.determinism = true,
            "--keep-going" => a.keep_going = true,
            "--verbose" | "-v" => a.verbose = true,
            "--bench" => a.bench = true,
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

fn sweep(args: &Args, base: u64, count: u64) -> ExitCode {
    let start = Instant::now();
    let single = count == 1;
    let mut first_failure: Option<u8> = None;
    let mut failed = Vec::new();
    let (mut sim_total, mut events) = (Duration::ZERO, 0u64);
    let progress_every = (count / 20).max(1);
    for i in 0..count {
        let seed = base.wrapping_add(i);
        let params = Params::draw(seed);
        if single || args.verbose {
            println!("{params}");
        }
        let report = run_seed(params.clone(), 0);
        sim_total += report.sim_time;
        events += report.stats.events;
        if args.determinism {
            let again = run_seed(params.clone(), 0);
            if again.trace_hash != report.trace_hash || again.sim_time != report.sim_time {
                println!("{params}");
                println!(
                    "NONDETERMINISTIC: seed {seed}: trace hash {:016x} then {:016x} (sim time {:?} then {:?})",
                    report.trace_hash, again.trace_hash, report.sim_time, again.sim_time
                );
                println!("replay: jaque-sim --seed {seed} --check-determinism");
                return ExitCode::from(EXIT_NONDETERMINISTIC);
            }
            if single || args.verbose {
                println!("deterministic: trace hash {:016x} twice", report.trace_hash);
            }
        }
        match &report.result {
            Ok(()) => {
                if single || args.verbose {
                    println!("seed {seed} ok: {}", summary(&report));
                }
            }
            Err(v) => {
                let code = match v.category {
                    Category::Safety => EXIT_SAFETY,
                    Category::Liveness => EXIT_LIVENESS,
                    Category::Panic => EXIT_PANIC,
                };
                report_failure(&report, args.trace);
                failed.push(seed);
                first_failure.get_or_insert(code);
                if !args.keep_going {
                    break;
                }
            }
        }
        if !single && (i + 1) % progress_every == 0 {
            println!(
                "{}/{count} seeds, {} failed, {:.0}s simulated in {:.1}s",
                i + 1,
                failed.len(),
                sim_total.as_secs_f64(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    if !single {
        let real = start.elapsed().as_secs_f64();
        println!(
            "seeds {base}..{}: {} failed {failed:?}; {:.0}s simulated, {events} events in {real:.1}s ({:.0}x real time)",
            base.wrapping_add(count - 1),
            failed.len(),
            sim_total.as_secs_f64(),
            sim_total.as_secs_f64() / real.max(1e-9)
        );
    }
    ExitCode::from(first_failure.unwrap_or(0))
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
