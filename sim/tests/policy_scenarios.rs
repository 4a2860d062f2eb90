//! The notification policy in the simulator (`Params::policy_changes`, invariant 15): on in about half the seeds,
//! where some of the workload's commands change the policy (receivers, routes, silences, windows, some refused on
//! purpose), under every fault the seed draws; every reader (engines, sinks, notifiers, readers started from
//! snapshots) holds the oracle's policy after each policy change it reads.

use jaque_sim::Params;

#[test]
fn policy_changes_run_in_half_the_seeds_and_every_reader_holds_the_same_policy() {
    let (mut on, mut applied, mut refused, mut checked) = (0, 0, 0, 0);
    let seeds = 1..=40u64;
    for seed in seeds.clone() {
        let report = jaque_sim::run_seed(Params::draw(seed), 0);
        assert!(report.result.is_ok(), "seed {seed}: {:?}; replay: jaque-sim --seed {seed}", report.result);
        let p = &report.stats.policy;
        if report.params.policy_changes > 0.0 {
            on += 1;
            applied += p.applied;
            refused += p.rejected;
            checked += p.checked;
        } else {
            assert_eq!((p.submitted, p.checked), (0, 0), "seed {seed}: no policy changes where they are off");
        }
    }
    let n = seeds.count() as u64;
    assert!((n / 4..=3 * n / 4).contains(&on), "on in {on} of {n} seeds");
    // Changes are applied and refused in those seeds, and readers of every role were held to the oracle's policy
    // many times per applied change (each change is read by every engine, sink and notifier).
    assert!(applied >= on && refused >= on, "{applied} applied, {refused} refused in {on} seeds");
    assert!(checked > 2 * applied, "{checked} checks of {applied} applied changes");
}

/// A release (a held problem sent once nothing holds it) raced the owner's next result: the recovery was decided
/// without the release (still on its way to the log, or written before it and landing after it), so it went to
/// nobody while the released problem had gone out (invariant 15's pairing). These seeds failed so against the
/// core before the fix (1871 the second way, the others the first); they are their worlds as drawn, policy
/// changes on, and must pass every invariant now.
#[test]
fn seeds_where_a_release_raced_a_recovery() {
    for seed in [1046, 1099, 1457, 1529, 1871, 2272] {
        let report = jaque_sim::run_seed(Params::draw(seed), 200);
        assert!(report.params.policy_changes > 0.0, "seed {seed} changes the policy");
        if let Err(v) = &report.result {
            panic!(
                "seed {seed}: {} {}\n{}\nreplay: jaque-sim --seed {seed}",
                v.invariant,
                v.message,
                report.trace.join("\n")
            );
        }
    }
}
