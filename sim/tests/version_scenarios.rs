//! Mixed versions (issue 33), by hand: members of an older build (cluster format 1) beside this one's, each
//! checking every swarm invariant on the way (invariant 13: no entry the active format does not allow; every
//! reader of either build agrees where it reads).

use jaque_core::format::{CLUSTER_FORMAT, OLDEST_CLUSTER_FORMAT};
use jaque_core::{CommandKind, ObjectId, Outcome, State};
use jaque_sim::scenario::Scenario;
use jaque_sim::world::Who;
use jaque_sim::{Params, Role, Sim, VersionParams, Via};

/// Engines `older` run the older build until the scenario replaces them.
fn params(seed: u64, engines: usize, older: &[usize]) -> Params {
    let old = older.iter().map(|n| (Role::Engine, *n, u64::MAX)).collect();
    Params { objects: 12, versions: VersionParams { old, unack_permille: 0 }, ..Params::scripted(seed, engines) }
}

fn format(sim: &Sim) -> u32 {
    sim.oracle.reader.fence().active_format()
}

/// Runs a command through ingress to its outcome.
fn run(s: &mut Scenario, object: &ObjectId, kind: CommandKind) -> Outcome {
    let sub = s.submit(Via::Ingress, object, kind);
    s.run_until(15_000, "the command's outcome", |sim| sim.subs[sub].outcome.is_some());
    s.outcome(sub).cloned().expect("an outcome")
}

/// An object in a problem state, acknowledged.
fn acknowledged_problem(s: &mut Scenario) -> ObjectId {
    let object = s.object(0);
    s.sim.set_truth(&object, State::Critical);
    s.run_until(30_000, "the object turns critical", |sim| {
        sim.oracle.reader.object(&object).is_some_and(|v| v.state == State::Critical)
    });
    assert!(matches!(run(s, &object, CommandKind::Ack), Outcome::Applied { .. }));
    assert!(s.sim.oracle.reader.object(&object).unwrap().acked);
    object
}

fn upgrade(s: &mut Scenario, n: usize) {
    s.sim.upgrade(Who::Engine(n));
    s.run_until(30_000, "the engine runs the new build, ready", |sim| {
        sim.speaks(Who::Engine(n)) == CLUSTER_FORMAT && sim.nodes[n].engine().is_some_and(|e| e.is_ready())
    });
}

#[test]
fn a_rolling_upgrade_moves_the_cluster_to_format_2_once_the_last_older_member_is_replaced() {
    let mut s = Scenario::with(params(41, 3, &[1, 2]), 3);
    assert_eq!(format(&s.sim), OLDEST_CLUSTER_FORMAT, "two engines of the older build are live");
    let object = acknowledged_problem(&mut s);
    // Withdrawing the acknowledgement is an event of format 2: refused, whichever engine owns the object (an
    // older one does not know the command, a new one knows the cluster is not at 2 yet).
    let refused = run(&mut s, &object, CommandKind::Unack);
    assert!(matches!(&refused, Outcome::Rejected { reason } if reason.contains("cluster format 2")), "{refused:?}");
    assert!(s.sim.oracle.reader.object(&object).unwrap().acked);
    upgrade(&mut s, 1);
    s.run_for(5_000);
    assert_eq!(format(&s.sim), OLDEST_CLUSTER_FORMAT, "e3 still runs the older build");
    upgrade(&mut s, 2);
    s.run_until(10_000, "the cluster moves to format 2", |sim| format(sim) == CLUSTER_FORMAT);
    assert!(matches!(run(&mut s, &object, CommandKind::Unack), Outcome::Applied { .. }));
    assert!(!s.sim.oracle.reader.object(&object).unwrap().acked, "every reader folds the unack");
    s.run_for(2_000);
    assert_eq!(s.sim.stats.versions.blocked, 0, "no member ever met an entry it could not read");
    s.assert_readers_agree();
    s.assert_ok();
}

#[test]
fn an_older_engine_started_in_a_cluster_at_format_2_stops_at_the_first_entry_it_cannot_read_and_leaves() {
    let mut s = Scenario::with(params(42, 3, &[2]), 2);
    s.run_until(10_000, "every live member speaks 2: the cluster is at 2", |sim| format(sim) == CLUSTER_FORMAT);
    let object = acknowledged_problem(&mut s);
    assert!(matches!(run(&mut s, &object, CommandKind::Unack), Outcome::Applied { .. }));
    // A rollback of one engine: the older build starts, reads the log, and meets the unack.
    s.start(2);
    s.run_until(30_000, "the older engine leaves and exits", |sim| {
        sim.stats.versions.blocked == 1 && sim.nodes[2].engine().is_none()
    });
    s.run_until(30_000, "an epoch without it", |sim| {
        sim.oracle.reader.fence().current().is_some_and(|r| r.members.iter().all(|m| m.id.as_str() != "e3"))
    });
    assert_eq!(format(&s.sim), CLUSTER_FORMAT, "the active format never goes down");
    // The cluster goes on: a write through ingress is applied by an engine that reads on.
    assert!(matches!(run(&mut s, &object, CommandKind::Ack), Outcome::Applied { .. }));
    s.run_for(2_000);
    s.assert_readers_agree();
    s.assert_ok();
}
