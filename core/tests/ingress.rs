//! Ingress claims, driven through the fault-free world (tests/common): an engine claims a submission that asks
//! for it only while it can take writes (ready, not leaving, its own key surely alive), so a member that was
//! paused or cut off past its ttl declines what reached it meanwhile and the ui sends it again elsewhere.

mod common;
use common::*;
use jaque_core::Life;
use jaque_core::*;
use std::time::Duration;

fn three() -> World {
    let mut w = World::new();
    for id in ["a", "b", "c"] {
        w.add_engine(id, 1);
    }
    w.advance(Duration::from_millis(10));
    w
}

#[test]
fn a_ready_engine_claims_first_then_answers_the_outcome() {
    let mut w = three();
    let r = w.submit_claim("a", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    assert_eq!(w.claimed, [r], "claimed before the outcome");
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
    assert!(w.declined.is_empty());
    assert_eq!(w.engines["a"].counters.commands_claimed, 1);
}

#[test]
fn an_outcome_known_at_once_goes_without_a_claim() {
    let mut w = three();
    let first = w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    assert!(matches!(w.outcome(first), Outcome::Applied { .. }));
    // The same id again: answered from the log at once, so no claim message precedes it.
    let again = w.submit_claim("b", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    assert_eq!(w.outcome(again), w.outcome(first));
    assert!(w.claimed.is_empty(), "{:?}", w.claimed);
}

#[test]
fn an_engine_not_ready_or_leaving_declines() {
    let mut w = World::new();
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(w.now, Input::Life(Life::Start));
    e.handle(w.now, Input::Claim { reply: ReplyTo(7), cmd: cmd("c1", "web", CommandKind::Ack) });
    let out: Vec<Output> = std::iter::from_fn(|| e.poll_output()).collect();
    assert!(out.contains(&Output::Declined { to: ReplyTo(7), reason: "the engine is reading the log" }), "{out:?}");
    w.add_engine("b", 1);
    w.engines.get_mut("b").unwrap().handle(w.now, Input::Life(Life::Leave));
    w.run();
    let r = w.submit_claim("b", cmd("c2", "web", CommandKind::Ack));
    assert_eq!(w.declined.get(&r), Some(&"the engine is leaving"));
    assert!(!w.replies.contains_key(&r), "a decline is the one answer");
}

#[test]
fn an_engine_whose_heartbeats_go_unacknowledged_for_its_ttl_declines_until_one_is_acknowledged() {
    let mut w = three();
    assert!(w.engines["a"].takes_ingress(w.now));
    w.heartbeats_fail = true;
    // Two refreshes fail; the key written before them is still alive for the others until the ttl passes.
    w.advance(TTL * 2 / 3 + Duration::from_millis(100));
    assert!(w.engines["a"].takes_ingress(w.now), "within the ttl of the last acknowledged heartbeat");
    w.advance(TTL / 3);
    assert!(!w.engines["a"].takes_ingress(w.now), "a ttl past the last acknowledged heartbeat");
    let r = w.submit_claim("a", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    let reason = w.declined[&r];
    assert!(reason.contains("out of touch"), "{reason}");
    w.heartbeats_fail = false;
    // The next refresh is acknowledged: the engine takes writes again.
    w.advance(TTL / 3);
    assert!(w.engines["a"].takes_ingress(w.now));
    let r = w.submit_claim("a", cmd("c2", "web", CommandKind::Put { def: def(30) }));
    assert!(w.claimed.contains(&r) && w.replies.contains_key(&r));
}

#[test]
fn a_paused_engine_declines_what_reached_it_while_paused() {
    let mut w = three();
    w.paused.push("c".into());
    w.advance(TTL + Duration::from_secs(3));
    // The others moved on without it; what the queue group handed it meanwhile is in its buffers.
    assert!(!w.oracle().fence().current().unwrap().members.iter().any(|m| m.id.as_str() == "c"));
    w.paused.clear();
    // The first thing it handles as it resumes, before any timer: a submission that asked for a claim.
    let r = w.submit_claim("c", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    let reason = w.declined.get(&r).copied().unwrap_or("claimed");
    assert!(reason.contains("out of touch"), "{reason}");
    // Its heartbeat goes out at its timer and is acknowledged: it takes writes again, under the new epoch.
    w.advance(Duration::from_millis(1));
    assert!(w.engines["c"].takes_ingress(w.now));
}
