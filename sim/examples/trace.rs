//! Prints the whole trace of one swarm seed, every line (the swarm prints only a failure's last lines):
//! what `sim/scripts/same-seeds.sh` needs to explain a trace hash that moved. Two builds' traces of one seed,
//! diffed, show the first step where their worlds part.
//!
//! Usage: cargo run --release -p jaque-sim --example trace -- SEED > seed.trace

fn main() {
    let Some(seed) = std::env::args().nth(1).and_then(|s| s.parse::<u64>().ok()) else {
        eprintln!("usage: trace SEED");
        std::process::exit(64);
    };
    let report = jaque_sim::run_seed(jaque_sim::Params::draw(seed), usize::MAX);
    for line in report.trace {
        println!("{line}");
    }
}
