//! Hand-written cases for the notifiers (issue 10, point 4), one per fault kind, each checking invariant 9
//! (and every other invariant of the swarm) on the way: a quiet cluster of two engines, notifiers `n1`..,
//! simulated endpoints `hook1`.., and transitions made by changing the simulated truth of objects.

use jaque_core::{ObjectId, State};
use jaque_sim::oracle::hrw_owner;
use jaque_sim::scenario::Scenario;
use jaque_sim::world::{EndpointMode, NotifyAt, NotifyThen, Reception, Who};
use jaque_sim::{NotifyParams, Params};
use std::collections::BTreeMap;

const N1: usize = 0;
const N2: usize = 1;
const HOOK1: usize = 0;
const HOOK2: usize = 1;

/// Two engines, `objects` objects (each checked once, their first transitions in the log), and `notifiers`
/// notifier slots (none started) sending to `endpoints` healthy endpoints.
fn world(
    seed: u64,
    notifiers: usize,
    endpoints: usize,
    objects: usize,
    tune: impl FnOnce(&mut NotifyParams),
) -> Scenario {
    let mut p = Params { objects, ..Params::scripted(seed, 2) };
    p.notify = NotifyParams::scripted(notifiers, endpoints);
    tune(&mut p.notify);
    let mut s = Scenario::with(p, 2);
    // Every object starts Ok (the simulated truth draws some otherwise), so each flip below is a transition.
    let ids = s.sim.object_ids();
    flip(&mut s, &ids, State::Ok);
    s
}

fn ttl(s: &Scenario) -> u64 {
    s.sim.params.ttl_ms
}

/// Starts notifier `k` and waits until it is ready (caught up, its start records read).
fn start(s: &mut Scenario, k: usize) {
    s.sim.start(Who::Notifier(k));
    s.run_until(5_000, "the notifier is ready", |sim| sim.notifier(k).is_some_and(|n| n.health().ready));
}

/// Makes a transition of each object (its checks see `to` from now on) and runs until they are in the log.
fn flip(s: &mut Scenario, ids: &[ObjectId], to: State) {
    for id in ids {
        s.sim.set_truth(id, to);
    }
    s.run_until(10_000, "the transitions land", |sim| {
        ids.iter().all(|id| sim.oracle.reader.object(id).is_some_and(|v| v.state == to))
    });
}

/// Runs until every accepted transition in the log after the start is delivered to every endpoint that never
/// answered 410, every running notifier is idle (nothing queued, nothing in flight), and invariant 9 holds
/// over everything received.
fn settle(s: &mut Scenario, max_ms: u64) {
    settle_with(s, max_ms, true)
}

/// `settle`; with `idle` false, a notifier may still hold work (see the pinned bug after a 410).
fn settle_with(s: &mut Scenario, max_ms: u64, idle: bool) {
    let idle = |sim: &jaque_sim::Sim| {
        !idle
            || (0..sim.params.notify.notifiers)
                .all(|k| sim.notifier(k).is_none_or(|n| n.lag() == 0 && sim.sends_in_flight(k) == 0))
    };
    let ok =
        s.sim.run_until_cond(max_ms, |sim| idle(sim) && sim.check_notifications(Some(sim.log().len() as u64)).is_ok());
    let lags: Vec<_> = (0..s.sim.params.notify.notifiers)
        .filter_map(|k| s.sim.notifier(k).map(|n| (k, n.lag(), s.sim.sends_in_flight(k))))
        .collect();
    let why = s.sim.check_notifications(Some(s.sim.log().len() as u64)).err().unwrap_or_default();
    let why = format!("{why} (notifier, lag, sends in flight): {lags:?}");
    s.check(ok, &format!("not settled within {max_ms}ms: {why}"));
}

/// The objects notifier `k` owns.
fn owned_by(s: &Scenario, k: usize) -> Vec<ObjectId> {
    let n = s.sim.notifier(k).expect("running");
    s.sim.object_ids().into_iter().filter(|id| n.role().owns(id)).collect()
}

/// The 2xx receptions of endpoint `ep`, by seq.
fn deliveries(s: &Scenario, ep: usize) -> BTreeMap<u64, Vec<&Reception>> {
    let mut by: BTreeMap<u64, Vec<&Reception>> = BTreeMap::new();
    for r in s.sim.receptions(ep).iter().filter(|r| r.delivered()) {
        by.entry(r.seq).or_default().push(r);
    }
    by
}

/// Accepted transitions after endpoint `ep`'s start record.
fn required(s: &Scenario, ep: usize) -> Vec<u64> {
    let start = s.sim.start_record(ep).expect("a start record");
    s.sim.accepted_transitions().range(start + 1..).map(|(seq, _)| *seq).collect()
}

/// Every delivery of one transition carries its one webhook-id.
fn assert_same_ids(s: &Scenario, ep: usize) {
    for (seq, rs) in deliveries(s, ep) {
        assert!(rs.iter().all(|r| r.webhook_id == rs[0].webhook_id), "seq {seq}: {rs:?}");
        assert_eq!(rs[0].webhook_id, format!("jaque-{seq}-{}", s.sim.endpoint(ep).id));
    }
}

fn repeats(s: &Scenario, ep: usize) -> usize {
    deliveries(s, ep).values().map(|rs| rs.len() - 1).sum()
}

#[test]
fn a_transition_from_before_the_fleet_started_is_not_sent() {
    let mut s = world(21, 1, 2, 10, |_| {});
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..5], State::Critical);
    s.run_for(4_000);
    let before: Vec<u64> = s.sim.accepted_transitions().keys().copied().collect();
    assert!(before.len() >= 15, "every object's first check and five turning critical: {before:?}");
    start(&mut s, N1);
    let start = s.sim.start_record(HOOK1).expect("n1 recorded where notifications begin");
    assert_eq!(s.sim.start_record(HOOK2), Some(start), "one start for the fleet, per endpoint");
    assert!(before.iter().all(|seq| *seq <= start), "start {start} is past every earlier transition");
    flip(&mut s, &ids[5..], State::Warning);
    settle(&mut s, 20_000);
    for ep in [HOOK1, HOOK2] {
        let got: Vec<u64> = deliveries(&s, ep).keys().copied().collect();
        assert_eq!(got, required(&s, ep), "exactly the transitions after the start");
        assert_eq!(got.len(), 5);
        assert!(s.sim.receptions(ep).iter().all(|r| r.seq > start), "nothing from before the start reached it");
        assert_eq!(repeats(&s, ep), 0);
    }
}

/// n1 crashes with a send in flight (the endpoint takes it, the answer never reaches n1): n2 sends it again
/// once its key is gone, with the same webhook-id; nothing else is repeated.
#[test]
fn a_notifier_crash_with_a_send_in_flight_repeats_that_send_once_with_its_webhook_id() {
    let mut s = world(22, 2, 1, 20, |_| {});
    start(&mut s, N1);
    start(&mut s, N2);
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(1_000));
    let mine = owned_by(&s, N1);
    assert!(mine.len() >= 3, "n1 owns {mine:?}");
    s.sim.notify_at_next(N1, NotifyAt::Send, NotifyThen::Crash);
    flip(&mut s, &mine[..3], State::Critical);
    s.run_until(5_000, "n1 crashes", |sim| !sim.notifier_slot(N1).is_running());
    let in_flight = s.sim.notify_stats().inflight_at_faults;
    assert_eq!(in_flight, 1, "the crash came right after n1's first send");
    let t = ttl(&s);
    settle(&mut s, 6 * t);
    assert_eq!(repeats(&s, HOOK1), 1, "the send in flight at the crash, and only it, came twice");
    let twice: Vec<_> = deliveries(&s, HOOK1).into_iter().filter(|(_, rs)| rs.len() > 1).collect();
    let rs = &twice[0].1;
    assert_eq!((rs[0].by.id.as_str(), rs[1].by.id.as_str()), ("n1", "n2"), "{rs:?}");
    assert_same_ids(&s, HOOK1);
    assert!(s.sim.notifier(N2).expect("running").counters.resent_after_fault >= 1);
}

/// n1 pauses past its ttl with a send in flight: n2 takes its objects over and sends it again; n1, resuming,
/// finds its record taken and starts nothing new before its key is back (the lease, checked at every claim).
#[test]
fn a_notifier_paused_past_its_ttl_repeats_at_most_its_sends_in_flight() {
    let mut s = world(23, 2, 1, 20, |_| {});
    start(&mut s, N1);
    start(&mut s, N2);
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(500));
    let mine = owned_by(&s, N1);
    s.sim.notify_at_next(N1, NotifyAt::Send, NotifyThen::Pause(3 * ttl(&s)));
    flip(&mut s, &mine[..4], State::Critical);
    s.run_until(5_000, "n1 pauses", |sim| sim.notifier_slot(N1).is_paused());
    let st = s.sim.notify_stats();
    s.run_until(4 * ttl(&s), "n2 takes n1's objects over", |sim| {
        sim.notifier(N2).is_some_and(|n| mine.iter().all(|id| n.role().owns(id)))
    });
    // Transitions of n1's objects while it is paused: n2 sends them.
    flip(&mut s, &mine[..4], State::Ok);
    s.run_until(4 * ttl(&s), "n1 resumes", |sim| !sim.notifier_slot(N1).is_paused());
    let t = ttl(&s);
    settle(&mut s, 6 * t);
    assert!(repeats(&s, HOOK1) as u64 <= st.inflight_at_faults + st.claims_at_faults, "{:?}", s.sim.notify_stats());
    assert!(deliveries(&s, HOOK1).values().all(|rs| rs.len() <= 2), "at most one repeat per send");
    assert_same_ids(&s, HOOK1);
    assert!(s.sim.notifier(N1).is_some(), "n1 runs on");
}

/// n1 is cut from the store with a send in flight: the endpoint takes it, n1 cannot record it, its key
/// expires and n2 sends it again; once healed, n1 finds the record moved on.
#[test]
fn a_notifier_cut_from_the_store_repeats_at_most_its_sends_in_flight() {
    let mut s = world(24, 2, 1, 20, |_| {});
    start(&mut s, N1);
    start(&mut s, N2);
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(300));
    let mine = owned_by(&s, N1);
    s.sim.notify_at_next(N1, NotifyAt::Send, NotifyThen::CutStore(3 * ttl(&s)));
    flip(&mut s, &mine[..4], State::Critical);
    s.run_until(3 * ttl(&s), "n2 takes n1's objects over", |sim| {
        sim.notifier(N2).is_some_and(|n| mine.iter().all(|id| n.role().owns(id)))
    });
    let st = s.sim.notify_stats();
    assert_eq!(st.faults, 1);
    let t = ttl(&s);
    settle(&mut s, 8 * t);
    let r = repeats(&s, HOOK1) as u64;
    assert!(r >= 1, "the send n1 could not record was sent again");
    assert!(r <= st.inflight_at_faults + st.claims_at_faults, "{r} repeats; at the cut: {st:?}");
    assert!(deliveries(&s, HOOK1).values().all(|rs| rs.len() <= 2), "at most one repeat per send");
    assert_same_ids(&s, HOOK1);
}

/// A send whose answer is lost (the endpoint took it; the notifier's client times out, as when it is cut from
/// the endpoint or the endpoint answers too late) is retried: one repeat, with the same webhook-id.
#[test]
fn a_send_whose_answer_was_lost_is_repeated_once_with_its_webhook_id() {
    let mut s = world(25, 1, 1, 5, |_| {});
    start(&mut s, N1);
    s.sim.notify_at_next(N1, NotifyAt::Send, NotifyThen::LoseAnswer);
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..3], State::Critical);
    settle(&mut s, 20_000);
    assert_eq!(repeats(&s, HOOK1), 1);
    assert_same_ids(&s, HOOK1);
    assert!(s.sim.notifier(N1).expect("running").counters.retry >= 1, "the timeout was retried");
}

#[test]
fn an_endpoint_failing_then_recovering_gets_every_transition_once() {
    let mut s = world(26, 1, 2, 10, |_| {});
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::Fail5xx);
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..6], State::Critical);
    s.run_for(10_000);
    assert_eq!(deliveries(&s, HOOK2).len(), 6, "the healthy endpoint got everything meanwhile");
    assert_eq!(deliveries(&s, HOOK1).len(), 0);
    let failed = s.sim.receptions(HOOK1).len();
    assert!(failed >= 12, "each transition tried again and again: {failed} attempts");
    assert!(s.sim.notifier(N1).expect("running").lag() > 0);
    s.sim.set_endpoint(HOOK1, EndpointMode::Ok);
    settle(&mut s, 30_000);
    assert_eq!(deliveries(&s, HOOK1).len(), 6);
    assert_eq!(repeats(&s, HOOK1), 0, "5xx is not a delivery: nothing came twice");
    assert_eq!(s.sim.notifier(N1).expect("running").lag(), 0);
    // Backoff: the attempts of one transition spread out exponentially (the base doubles each time; with
    // jitter each wait is between half of it and all of it, so the fourth wait is more than twice the first).
    let seq = *deliveries(&s, HOOK1).keys().next().expect("delivered");
    let times: Vec<u64> = s.sim.receptions(HOOK1).iter().filter(|r| r.seq == seq).map(|r| r.at.0).collect();
    let gaps: Vec<u64> = times.windows(2).map(|t| t[1] - t[0]).collect();
    assert!(gaps.len() >= 4 && gaps[3] > 2 * gaps[0], "gaps grow: {gaps:?}");
}

/// hook1 answers every delivery after 2.5 s (below the send timeout) and the notifier sends one at a time per
/// endpoint: hook2 still gets each transition within far less than one of hook1's answers.
#[test]
fn a_slow_endpoint_does_not_hold_back_another() {
    let slow = 2_500;
    let mut s = world(27, 1, 2, 10, |n| n.concurrency = 1);
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(slow));
    let ids = s.sim.object_ids();
    flip(&mut s, &ids, State::Critical);
    settle(&mut s, 60_000);
    let landed = |seq: &u64| s.sim.accepted_transitions()[seq].at.0;
    let latency =
        |ep: usize| -> Vec<u64> { deliveries(&s, ep).iter().map(|(seq, rs)| rs[0].at.0 - landed(seq)).collect() };
    let (fast, slowest) = (latency(HOOK2), latency(HOOK1));
    assert_eq!(fast.len(), 10);
    assert!(fast.iter().all(|l| *l < slow), "hook2 was not held back by hook1: {fast:?}");
    assert!(slowest.iter().max().is_some_and(|l| *l >= 5 * slow), "hook1 took them one by one: {slowest:?}");
}

#[test]
fn retry_after_is_honoured() {
    let mut s = world(28, 1, 1, 5, |_| {});
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::TooMany(3));
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..2], State::Critical);
    s.run_for(12_000);
    s.sim.set_endpoint(HOOK1, EndpointMode::Ok);
    settle(&mut s, 20_000);
    for seq in required(&s, HOOK1) {
        let times: Vec<(u64, u16)> =
            s.sim.receptions(HOOK1).iter().filter(|r| r.seq == seq).map(|r| (r.at.0, r.status)).collect();
        assert!(times.iter().filter(|(_, st)| *st == 429).count() >= 2, "{times:?}");
        assert!(times.windows(2).all(|t| t[1].0 - t[0].0 >= 3_000), "no retry before Retry-After: {times:?}");
    }
}

#[test]
fn gone_disables_the_endpoint_and_the_others_go_on() {
    let mut s = world(29, 1, 2, 10, |_| {});
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::Gone);
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..6], State::Critical);
    settle_with(&mut s, 20_000, false);
    let n = s.sim.notifier(N1).expect("running");
    assert!(n.is_disabled(HOOK1) && !n.is_disabled(HOOK2));
    let concurrency = n.config().concurrency;
    let asked = s.sim.receptions(HOOK1).len();
    assert!(asked <= concurrency, "only the sends in flight when the 410 came: {asked}");
    flip(&mut s, &ids, State::Warning);
    settle_with(&mut s, 20_000, false);
    assert_eq!(s.sim.receptions(HOOK1).len(), asked, "nothing more is sent after a 410");
    assert_eq!(deliveries(&s, HOOK2).len(), 16);
    assert_eq!(deliveries(&s, HOOK1).len(), 0);
}

/// Notifiers join and leave cleanly while transitions flow and sends are in flight: every transition once to
/// every endpoint, not one repeat (no fault, so none is permitted).
#[test]
fn two_notifiers_during_a_membership_change_repeat_nothing() {
    let mut s = world(30, 3, 2, 30, |_| {});
    start(&mut s, N1);
    // Slow answers: sends are in flight (their claims standing) when ownership moves.
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(400));
    s.sim.set_endpoint(HOOK2, EndpointMode::Slow(200));
    let ids = s.sim.object_ids();
    let states = [State::Critical, State::Ok, State::Warning];
    for round in 0..6 {
        for (i, id) in ids.iter().enumerate() {
            s.sim.set_truth(id, states[(i + round) % 3]);
        }
        match round {
            1 => s.sim.start(Who::Notifier(N2)),
            3 => s.sim.leave(Who::Notifier(N1)),
            4 => s.sim.start(Who::Notifier(2)),
            _ => {}
        }
        // The next checks (interval 2 s) land while the membership change is seen.
        s.run_for(2_500);
    }
    settle(&mut s, 30_000);
    let st = s.sim.notify_stats();
    assert_eq!(st.faults, 0);
    for ep in [HOOK1, HOOK2] {
        assert_eq!(repeats(&s, ep), 0, "no repeat without a fault");
        assert_eq!(deliveries(&s, ep).keys().copied().collect::<Vec<_>>(), required(&s, ep));
    }
    assert!(s.sim.notifier(N1).is_none(), "n1 exited after its leave");
    assert!(deliveries(&s, HOOK1).values().flatten().any(|r| r.by.id.as_str() == "n3"), "n3 took a share");
}

/// n1 leaves with sends in flight at a slow endpoint: it finishes them and records them before its key goes,
/// so n2 takes its objects over with nothing to repeat.
#[test]
fn a_leaving_notifier_drains_its_claims_before_its_key_goes() {
    let mut s = world(31, 2, 1, 20, |_| {});
    start(&mut s, N1);
    start(&mut s, N2);
    s.sim.set_endpoint(HOOK1, EndpointMode::Slow(1_500));
    let mine = owned_by(&s, N1);
    s.sim.notify_at_next(N1, NotifyAt::Send, NotifyThen::Leave);
    // Not `flip`, which waits for every transition: n1 leaves at its first send, while the others still come
    // (soft states make them hard one by one).
    for id in &mine[..4] {
        s.sim.set_truth(id, State::Critical);
    }
    s.run_until(20_000, "n1 leaves with a send in flight", |sim| sim.notifier(N1).is_some_and(|n| n.is_leaving()));
    assert!(s.sim.sends_in_flight(N1) >= 1);
    s.run_until(10_000, "n1 exits", |sim| sim.notifier(N1).is_none());
    let lost = s.sim.notifier_key_losses().iter().find(|(m, _, _)| m.id.as_str() == "n1").cloned();
    let (_, _, claims) = lost.expect("n1's key went away");
    assert_eq!(claims, 0, "n1's key went only after every claim of it was recorded or given back");
    settle(&mut s, 20_000);
    assert_eq!(repeats(&s, HOOK1), 0);
    assert_eq!(deliveries(&s, HOOK1).keys().copied().collect::<Vec<_>>(), required(&s, HOOK1));
}

/// The checker is not vacuous: a repeat that no fault permits is a violation of invariant 9.
#[test]
fn a_repeat_without_a_fault_is_a_violation() {
    let mut s = world(32, 1, 1, 5, |_| {});
    start(&mut s, N1);
    let ids = s.sim.object_ids();
    flip(&mut s, &ids[..2], State::Critical);
    settle(&mut s, 10_000);
    assert!(s.sim.check_notifications(None).is_ok());
    // What a second notifier sending the same transition with no fault would look like at the endpoint.
    s.sim.forge_repeat(HOOK1);
    let err = s.sim.check_notifications(None).expect_err("an unpermitted repeat");
    assert!(err.contains("2 times, 0 of its sends in flight at a fault"), "{err}");
}

// ---- core bugs the swarm found, fixed in core; their worlds kept ----

/// Found by the swarm (seeds 52, 266, 363, 423 with `max_pending` 40 and `replay_chunk` 1000), fixed in core: the
/// role asks for the next replay chunk while the queue is below half of `max_pending`, and one chunk can queue up
/// to `replay_chunk` × endpoints transitions; with more than half the queue in one chunk, the replay overflowed the
/// queue in the step it landed, the resume read the same entries again, and so on forever. `Notifier::new` now
/// raises `max_pending` to what a resume can bring (`Notifier::resume_room`): the same world does not overflow
/// and delivers everything.
#[test]
fn a_replay_larger_than_the_queue_does_not_overflow_forever() {
    overflowing_world(1_000, false);
}

/// A queue that does overflow (live transitions past `max_pending` while the endpoint fails, with a replay that
/// fits): every transition is still delivered once the endpoint recovers, from the records and the log.
#[test]
fn a_replay_that_fits_the_queue_after_an_overflow_delivers_everything() {
    overflowing_world(5, true);
}

fn overflowing_world(replay_chunk: u64, overflows: bool) {
    let mut s = world(33, 1, 1, 25, |n| {
        n.max_pending = 40;
        n.replay_chunk = replay_chunk;
        n.max_held = 15;
    });
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::Fail5xx);
    let ids = s.sim.object_ids();
    // Every lane holds one transition in backoff and queues the rest: 25 × 2 > 41, the least the queue can be.
    for to in [State::Critical, State::Ok, State::Warning] {
        flip(&mut s, &ids, to);
    }
    s.run_for(2_000);
    let n = s.sim.notifier(N1).expect("running");
    assert_eq!(n.counters.overflows >= 1, overflows, "overflows: {:?} lag {}", n.counters, n.lag());
    s.sim.set_endpoint(HOOK1, EndpointMode::Ok);
    settle(&mut s, 60_000);
}

/// Found by the swarm, fixed in core (core/src/notifier.rs, `handle_written` (a claim answered `Err`) with `ownership_changed` and
/// `pump`): a claim whose compare-and-set write timed out but landed (NATS: "a timed-out put may still land")
/// stays in the store. Its notifier only requeues the transition; when the object then moves to another
/// notifier, the old one drops or idles its lane without giving the claim back, and the new owner sees a
/// claim by a member that is still live, so it waits for it (`claim_recheck`) forever: the transition is never
/// delivered. Found by swarm seed 203 of the first 600 (a clogged notifier whose claim landed after its store
/// timeout) while such writes could land in the swarm. The swarm keeps them from landing
/// (`NotifyParams::ambiguous_writes` off) until this passes.
#[test]
fn a_claim_whose_write_timed_out_but_landed_is_released_when_its_object_moves() {
    let mut s = world(34, 4, 1, 10, |_| {});
    start(&mut s, N1);
    let id = s.sim.object_ids()[0].clone();
    // The notifier that takes `id` from n1 when it joins (HRW over the two of them).
    let n1 = s.sim.notifier_slot(N1).member();
    let taker = (1..4)
        .find(|k| {
            let other = jaque_core::MemberRef { id: s.sim.notifier_slot(*k).id.clone(), incarnation: 1 };
            hrw_owner(&[n1.clone(), other.clone()], id.as_str()) == Some(&other)
        })
        .expect("one of n2..n4 wins the object over n1");
    s.sim.notify_at_next(N1, NotifyAt::Claim, NotifyThen::LoseAnswer);
    flip(&mut s, std::slice::from_ref(&id), State::Critical);
    s.run_until(5_000, "n1 claims", |sim| sim.claims_of(N1) == 1);
    // While n1 waits for the answer that never comes, the object moves.
    start(&mut s, taker);
    settle(&mut s, 30_000);
}

/// Found by the swarm, fixed in core (minor; core/src/notifier.rs, `handle_sent`, `SendResult::Gone`): the answer disables the endpoint
/// (`disable` clears its lanes' queues) and then puts the transition it answered back in its lane's queue
/// (`lane_requeue`), where it stays for good: `lag()` (`jaque_notifier_lag_events`) never returns to 0 after a
/// 410 and the queue's count keeps up to `concurrency` transitions that will never be sent.
#[test]
fn after_a_410_the_notifier_is_caught_up_again() {
    let mut s = world(35, 1, 2, 5, |_| {});
    start(&mut s, N1);
    s.sim.set_endpoint(HOOK1, EndpointMode::Gone);
    let ids = s.sim.object_ids();
    flip(&mut s, &ids, State::Critical);
    settle(&mut s, 20_000);
    assert!(s.sim.notifier(N1).expect("running").is_disabled(HOOK1));
}
