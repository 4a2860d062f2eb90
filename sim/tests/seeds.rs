//! Swarm seeds that once failed, pinned: each must now pass every invariant. The comment says what broke.
//!
//! A seed pins a world only as long as the simulator draws it the same way: a change to the world model
//! can move a seed away from the bug it found. So every bug also has a hand-written scenario (see
//! `scenarios.rs`), and the seeds here are re-checked against the unfixed core when the model changes.

use jaque_sim::{run_seed, Params, SnapshotParams};

fn assert_seed_passes(seed: u64) {
    // Without sinks a seed draws the world it drew before sinks existed, and without snapshots the world it drew
    // before them (the same trace hashes): these seeds keep the worlds that found their bugs.
    assert_params_pass(Params { sinks: 0, snapshots: SnapshotParams::off(), ..Params::draw(seed) });
}

fn assert_params_pass(params: Params) {
    // Without faults between attempts and policy changes, every pinned seed draws the world it drew before them
    // (they came later).
    let params = Params { attempt_faults: 0.0, policy_changes: 0.0, ..params };
    let seed = params.seed;
    let report = run_seed(params, 200);
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

/// A fenced command with two waiting callers (e.g. a forward that timed out and came again) was rerouted
/// and applied once per caller; the second `apply` replaced the first caller, who was never answered (core,
/// first found by seed 2209). These seeds fail with "never answered" against the unfixed core. Re-pinned when
/// the ui's direct writes joined the model: 92, 261, 402 and 428 no longer reach the bug; 273, 284, 667 and
/// 957 do, with ui writes in their workload. Re-pinned when notifiers joined the model (their seeds' engines
/// see other store revisions): 284, 667, 806, 957 and 1396 no longer reach the bug; 58, 98 and 273 still do,
/// and so do 7, 255, 261, 282 and 339 (22 of the first 1,500 seeds fail against the unfixed core).
#[test]
fn seeds_where_a_rerouted_command_answers_every_caller() {
    for seed in [7, 58, 98, 255, 261, 273, 282, 339] {
        assert_seed_passes(seed);
    }
}

/// Snapshots and compaction (issue 11): four core bugs the first sweeps with snapshots found, each pinned with
/// the seeds that failed against the core of the day (full draws: sinks, notifiers and snapshots as drawn), and
/// each shown by a core test.
///
/// With `-log-retention 0` a purge removed the log's last entry too; a reader that had not read it, in a log
/// that then stayed quiet, never met an entry past the hole and never learned of it (a notifier never sent the
/// transition): `core/tests/snapshots.rs`, `a_purge_keeps_the_last_entry_...`. Seed 6 of the first 300.
#[test]
fn seeds_where_a_purge_left_a_reader_nothing_to_see_the_hole_by() {
    assert_params_pass(Params::draw(6));
}

/// A sink or notifier started from a snapshot knew only the objects with a view in it, so it never resumed a
/// deleted object, one whose last events changed nothing, or one a command named before it existed, and the
/// store never got those events (no purge needed): `core/tests/sink.rs`,
/// `a_sink_started_from_a_snapshot_stores_...`. 59 of the first 300 seeds (these are four of them).
#[test]
fn seeds_where_a_sink_from_a_snapshot_missed_objects_without_a_view() {
    for seed in [3, 7, 30, 51] {
        assert_params_pass(Params::draw(seed));
    }
}

/// The first notifier, started while the log had a hole, recorded its start where its reader waited (before
/// the hole), not where the log stood: `core/tests/notifier.rs`, `a_first_notifier_that_meets_a_hole_...`.
/// Seeds 137, 143 and 258 of the first 300.
#[test]
fn seeds_where_the_first_notifier_recorded_its_start_before_a_hole() {
    for seed in [137, 143, 258] {
        assert_params_pass(Params::draw(seed));
    }
}

/// A resume said an object lost history only when it ended; a sink that stopped first had stored events past
/// the hole, and the next resume, starting after them, never said the gap: `core/tests/sink.rs`,
/// `a_resume_counts_the_history_...` and `a_resume_whose_range_grows_...`. Seeds 3, 94, 98, 132 and 183 of the
/// first 300 (98 is a slow one: a replay chunk of 1).
#[test]
fn seeds_where_a_sink_stopped_before_saying_the_history_it_lost() {
    for seed in [94, 132, 183] {
        assert_params_pass(Params::draw(seed));
    }
}

/// Every jump past a hole started every resume over, so a sink that jumped again before a long replay ended (a
/// replay chunk of 1, a retention of 0) never ended one, and its objects' rows stayed behind for good:
/// `core/tests/sink.rs`, `a_jump_past_a_hole_keeps_what_a_running_resume_has_read`. Seed 1666 of the first 2,000
/// (a slow one: 786 s simulated).
#[test]
fn seeds_where_a_sink_jumping_again_and_again_never_ended_a_resume() {
    assert_params_pass(Params::draw(1666));
}

/// A claim write answered with a timeout landed after its notifier had read the record without it and lost the
/// object: the new owner waited for good on the claim of a member still live that knew nothing of it. A claim
/// write that got no answer is now settled by a later write of the claimer's that expects the same revision:
/// `core/tests/notifier.rs`, `a_claim_write_that_got_no_answer_and_lands_after_its_object_moved_...`. Seed
/// 7004867 of a sweep of 20,000 from 7,000,000.
#[test]
fn seeds_where_a_late_claim_write_held_an_object_s_notifications_up() {
    assert_params_pass(Params::draw(7004867));
}

/// A claim that lost its compare-and-set, answered after the object had moved, left an idle lane with the
/// transition queued, and the object came back before any other change of membership: nothing started it again.
/// `core/tests/notifier.rs`, `a_claim_lost_to_another_write_after_its_object_moved_...`. Seed 7013573 of the
/// same sweep.
#[test]
fn seeds_where_a_lost_claim_left_a_lane_no_one_started_again() {
    assert_params_pass(Params::draw(7013573));
}

/// A sink's progress row claimed events it still held: a batch's position was bounded by the first pending event,
/// not the oldest, and pending is in the order events were handed out (a resume's replayed events after newer
/// events of other objects), so a batch cut short (by `max_batch`, or narrowed down after the store refused it)
/// wrote a position above events not yet stored. Found by the progress-row check of invariant 10
/// (`checks/sink_progress.rs`) when it was added: 6 of the first 100 seeds (these four) failed against the
/// unfixed core, and 136 of the first 2,000.
#[test]
fn seeds_where_a_sink_s_progress_row_claimed_events_it_still_held() {
    for seed in [7, 31, 39, 42] {
        assert_params_pass(Params::draw(seed));
    }
}
