//! Writes through ingress while a member of the queue group hangs (issue 31): the server keeps handing the hung
//! engine its share until it drops the connection, so the ui sends an attempt no engine claimed again.

use jaque_core::{CommandKind, Outcome};
use jaque_sim::scenario::Scenario;
use jaque_sim::{IngressParams, Params, Via};
use std::time::Duration;

const E3: usize = 2;

/// Three engines; e3 stops (SIGSTOP) and the server, with its default ping settings, keeps it in the queue group
/// for minutes. Once e1 and e2 have agreed an epoch without it, 100 writes go through ingress. Returns each
/// write's outcome and how long it took, and how many attempts reached the hung engine.
fn writes_while_one_engine_hangs(claim_timeout_ms: u64) -> (Vec<(Option<Outcome>, Duration)>, u64, Duration) {
    let ingress = IngressParams { claim_timeout_ms, server_drop_ms: 600_000 };
    let mut s = Scenario::with(Params { objects: 30, ingress, ..Params::scripted(31, 3) }, 3);
    let ttl = s.sim.params.ttl_ms;
    s.pause(E3, 600_000);
    s.run_until(3 * ttl, "an epoch without e3", |sim| {
        sim.oracle.reader.fence().current().is_some_and(|r| r.members.iter().all(|m| m.id.as_str() != "e3"))
    });
    s.run_for(1_000);
    let bound = s.sim.ingress_bound();
    let ids = s.sim.object_ids();
    let mut done = Vec::new();
    for i in 0..100 {
        let sub = s.submit(Via::Ingress, &ids[i % ids.len()], CommandKind::CheckNow);
        s.run_until(bound.as_millis() as u64 + 1_000, "the write's outcome", |sim| sim.subs[sub].outcome.is_some());
        let w = &s.sim.subs[sub];
        done.push((w.outcome.clone(), w.done_at.expect("an outcome").saturating_since(w.at)));
    }
    (done, s.sim.ingress_stats().to_dark_members, bound)
}

fn p99(done: &[(Option<Outcome>, Duration)]) -> Duration {
    let mut took: Vec<Duration> = done.iter().map(|(_, d)| *d).collect();
    took.sort();
    took[(took.len() - 1) * 99 / 100]
}

#[test]
fn every_write_through_ingress_is_applied_within_the_bound_while_a_member_hangs() {
    let (done, to_hung, bound) = writes_while_one_engine_hangs(200);
    assert!(to_hung > 10, "the hung engine was handed its share: {to_hung} attempts");
    for (outcome, took) in &done {
        assert!(matches!(outcome, Some(Outcome::Applied { .. })), "{outcome:?}");
        assert!(*took <= bound, "{took:?} over the bound {bound:?}");
    }
    eprintln!("100 writes with one engine of three hung: p99 {:?} (bound {bound:?})", p99(&done));
}

/// The same without claims (`-claim-timeout 0ms`, one request a write as before): the hung engine swallows
/// its share, and each of those writes waits the whole answer timeout for nothing.
#[test]
fn without_claims_the_hung_member_swallows_its_share_of_writes() {
    let (done, to_hung, bound) = writes_while_one_engine_hangs(0);
    let lost = done.iter().filter(|(o, _)| !matches!(o, Some(Outcome::Applied { .. }))).count() as u64;
    assert_eq!(lost, to_hung, "every write handed to the hung engine, and only those, went unanswered");
    assert!(lost > 10, "{lost} of 100");
    assert!(done.iter().any(|(_, took)| *took >= bound), "those waited the whole timeout");
}
