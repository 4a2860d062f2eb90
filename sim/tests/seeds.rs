//! Swarm seeds that once failed, pinned: each must now pass every invariant. The comment says what broke.

use jaque_sim::{run_seed, Params};

fn assert_seed_passes(seed: u64) {
    let report = run_seed(Params::draw(seed), 200);
    if let Err(v) = &report.result {
        panic!(
            "seed {seed}: {:?} violation of {}: {}\n{}\nreplay: jaque-sim --seed {seed}",
            v.category,
            v.invariant,
            v.message,
            report.trace.join("\n")
        );
    }
}

/// A fenced command with two waiting callers (a forward that timed out and came again) was rerouted and
/// applied once per caller; the second `apply` replaced the first caller, who was never answered (core).
#[test]
fn seed_2209_rerouted_command_answers_every_caller() {
    assert_seed_passes(2209);
}

/// The same bug, in seeds that still reach it in the current world model (rechecked against the unfixed core:
/// each of these fails there with "never answered").
#[test]
fn more_seeds_where_a_rerouted_command_answers_every_caller() {
    for seed in [255, 381, 387, 667, 1640] {
        assert_seed_passes(seed);
    }
}
