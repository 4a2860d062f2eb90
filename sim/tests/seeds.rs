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

/// The same bug, found by other seeds of the first sweep.
#[test]
fn seeds_1153_1504_1703_1818_rerouted_command_answers_every_caller() {
    for seed in [1153, 1504, 1703, 1818] {
        assert_seed_passes(seed);
    }
}
