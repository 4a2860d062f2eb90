//! Hand-written cases (issue 3, point 6), each checking every swarm invariant on the way.

use jaque_core::{CommandKind, EventBody, LogEntry, MemberId, MemberRef, ObjectId, Outcome, State, Verdict};
use jaque_sim::scenario::Scenario;
use jaque_sim::world::Who;
use jaque_sim::{Params, PoolParams, Sim, Via};

const E1: usize = 0;
const E2: usize = 1;
const E3: usize = 2;
const E4: usize = 3;

/// An engine paused past its ttl writes a transition when it resumes: fenced, counted, every reader agrees.
#[test]
fn engine_paused_past_its_ttl_writes_a_transition_fenced() {
    let mut s = Scenario::cluster(11, 3, 3, 30);
    let ttl = s.sim.params.ttl_ms;
    let object = s.owned_by(E1).into_iter().next().expect("e1 owns something");
    let before = s.stale_total();
    // The truth changes; e1 dispatches the check that will see it, then stops for three ttls with the
    // result in its buffers.
    s.sim.set_truth(&object, State::Critical);
    s.sim.pause_at_next_dispatch(E1, &object, 3 * ttl);
    s.run_until(10_000, "e1 pauses", |sim| sim.nodes[E1].is_paused());
    // Meanwhile its key expires and the others take its objects over under a new epoch.
    s.run_until(3 * ttl, "an epoch without e1", |sim| {
        sim.oracle.reader.fence().current().is_some_and(|r| r.members.iter().all(|m| m.id.as_str() != "e1"))
    });
    assert_ne!(s.owner(&object), Some(E1));
    s.run_until(3 * ttl, "e1 resumes", |sim| !sim.nodes[E1].is_paused());
    s.run_for(2_000);
    // e1's transition, written under its old epoch, reached the log after the new one: discarded.
    let fenced = s.sim.log().iter().any(|e| {
        matches!(e, LogEntry::Event(ev) if ev.writer.id.as_str() == "e1" && ev.object == object
            && matches!(ev.body, EventBody::Transition { to: State::Critical, .. }))
    });
    s.check(fenced, "e1 wrote its transition");
    assert!(s.stale_total() > before, "the transition was fenced and counted");
    let e1_written = s.engine(E1).counters.transitions_written;
    assert!(e1_written >= 1);
    // The new owner writes the transition that counts; every reader agrees on all of it.
    s.run_until(4 * ttl, "the object turns critical", |sim| {
        sim.oracle.reader.object(&object).is_some_and(|v| v.state == State::Critical)
    });
    s.run_for(1_000);
    s.assert_readers_agree();
    for n in 0..3 {
        assert_eq!(
            s.engine(n).reader().counters.stale_epoch_total,
            s.stale_total(),
            "e{} counts the fenced event",
            n + 1
        );
    }
}

/// A fourth engine joins: only the objects that move to it move, and no event is discarded.
#[test]
fn a_fourth_engine_joins_only_objects_moving_to_it_move() {
    let mut s = Scenario::cluster(12, 4, 3, 60);
    let before: Vec<_> = s.sim.object_ids().into_iter().map(|id| (s.owner(&id), id)).collect();
    let (stale, epoch, joined_at) = (s.stale_total(), s.epoch(), s.sim.log().len());
    s.start(E4);
    s.run_until(10_000, "e4 is a member", |sim| {
        sim.oracle.reader.fence().current().is_some_and(|r| r.members.len() == 4)
    });
    assert_eq!(s.epoch(), epoch + 1, "one join, one epoch");
    s.run_for(5_000);
    let mut moved = 0;
    for (old, id) in &before {
        let new = s.owner(id);
        if new != *old {
            assert_eq!(new, Some(E4), "{id} moved from {old:?} to {new:?}, not to the new engine");
            moved += 1;
        }
        assert!(s.engine(new.unwrap()).owns(id));
    }
    assert!(moved > 0 && moved < before.len(), "some objects move to e4 ({moved} of {})", before.len());
    // The only events discarded are results of objects that moved, written by their old owner before it read the
    // record (a soft attempt or a transition on its way at the join).
    let moved_ids: Vec<&ObjectId> = before.iter().filter(|(old, id)| s.owner(id) != *old).map(|(_, id)| id).collect();
    for (i, entry) in s.sim.log().iter().enumerate().skip(joined_at) {
        if let LogEntry::Event(ev) = entry {
            let ok = s.sim.oracle.is_accepted(i as u64 + 1) || moved_ids.contains(&&ev.object) && ev.body.is_result();
            assert!(ok, "event at {} discarded: {ev:?}", i + 1);
        }
    }
    assert!(s.stale_total() - stale <= moved as u64, "at most one result on its way per moved object");
    s.assert_readers_agree();
}

/// A command reaches a non-owner during a membership change: one hop, then `not_owned` for the submitter.
#[test]
fn a_command_forwarded_to_a_former_owner_ends_not_owned_after_one_hop() {
    let mut s = Scenario::cluster(13, 4, 3, 60);
    // An object e2 owns now and e4 will own once it joins.
    let ids = s.sim.object_ids();
    let four: Vec<jaque_core::MemberRef> = (1..=4)
        .map(|i| jaque_core::MemberRef { id: jaque_core::MemberId::new(format!("e{i}")).unwrap(), incarnation: 1 })
        .collect();
    let object = ids
        .into_iter()
        .find(|id| {
            s.owner(id) == Some(E2) && jaque_sim::oracle::hrw_owner(&four, id.as_str()).unwrap().id.as_str() == "e4"
        })
        .expect("an object moving from e2 to e4");
    // e1's log consumer lags: it will not see the new epoch.
    s.sim.hold_log(Who::Engine(E1), true);
    s.start(E4);
    s.run_until(10_000, "e2 reads the epoch with e4", |sim| {
        sim.engine(E2).epoch() == sim.oracle.reader.epoch()
            && sim.oracle.reader.fence().current().is_some_and(|r| r.members.len() == 4)
    });
    assert!(!s.engine(E2).owns(&object));
    assert!(s.engine(E1).reader().owner(&object).is_some_and(|o| o.id.as_str() == "e2"), "e1 still thinks e2 owns it");
    let (sent, not_owned, forwards) =
        (s.engine(E1).counters.forwarded_sent, s.engine(E2).counters.not_owned, s.sim.stats.forwards);
    let sub = s.submit(Via::Engine(E1), &object, CommandKind::CheckNow);
    s.run_until(5_000, "the submitter learns the outcome", |sim| sim.subs[sub].outcome.is_some());
    assert_eq!(s.outcome(sub), Some(&jaque_core::Outcome::NotOwned));
    assert_eq!(s.engine(E1).counters.forwarded_sent, sent + 1, "one hop");
    assert_eq!(s.engine(E2).counters.not_owned, not_owned + 1, "the former owner counts it");
    assert_eq!(s.sim.stats.forwards, forwards + 1, "never a second hop");
    s.sim.hold_log(Who::Engine(E1), false);
    s.run_for(2_000);
    s.assert_readers_agree();
}

/// A clean leave hands the objects over at once, without waiting for the ttl.
#[test]
fn a_clean_leave_hands_objects_over_without_waiting_for_the_ttl() {
    let params = Params { ttl_ms: 10_000, objects: 40, ..Params::scripted(14, 3) };
    let mut s = Scenario::with(params, 3);
    let e3 = 2;
    let moving = s.owned_by(e3);
    assert!(!moving.is_empty());
    let t0 = s.sim.now();
    let stale = s.stale_total();
    s.leave(e3);
    s.run_until(2_000, "every object of e3 has a new owner that holds it", |sim| {
        let Some(rec) = sim.oracle.reader.fence().current() else { return false };
        rec.members.len() == 2
            && moving.iter().all(|id| {
                let o = jaque_sim::oracle::hrw_owner(&rec.members, id.as_str()).unwrap();
                let n: usize = o.id.as_str()[1..].parse::<usize>().unwrap() - 1;
                sim.nodes[n].engine().is_some_and(|e| e.owns(id))
            })
    });
    let handover = s.sim.now().0 - t0.0;
    assert!(handover < 2_000, "handed over in {handover}ms, far below the 10s ttl");
    // And the new owners check them: the schedule continues on its grid.
    let interval = s.sim.params.interval_ms.1;
    let since = s.sim.now();
    s.run_until(interval + 3_000, "each moved object checked by its new owner", |sim| {
        moving.iter().all(|id| sim.last_checked(id).is_some_and(|(n, _, t)| n != e3 && t >= since))
    });
    assert!(s.sim.nodes[e3].engine().is_none(), "the leaving engine exited once idle");
    assert_eq!(s.stale_total(), stale, "no event discarded: the leaver stopped writing, the others kept theirs");
    s.assert_readers_agree();
}

/// The checkers are not vacuous: an event from a writer that claims a future epoch is flagged.
#[test]
fn a_forged_event_from_the_future_is_a_violation() {
    let mut s = Scenario::cluster(15, 2, 2, 5);
    let object = s.object(0);
    let forged = jaque_core::Event {
        object,
        epoch: s.epoch() + 5,
        writer: s.engine(E1).me().clone(),
        at: s.sim.now(),
        command_id: None,
        body: EventBody::transition(State::Ok, State::Critical, String::new()),
    };
    s.sim.inject(LogEntry::Event(forged));
    let v = s.sim.violation.clone().expect("a violation");
    assert!(v.invariant.starts_with('8'), "{v:?}");
}

/// A fenced event is a verdict every reader reaches, never an invariant break: a non-owner's event is stale.
#[test]
fn an_event_from_a_non_owner_is_fenced_not_a_violation() {
    let mut s = Scenario::cluster(16, 2, 2, 10);
    let object = s.owned_by(E2).into_iter().next().unwrap();
    let ev = jaque_core::Event {
        object: object.clone(),
        epoch: s.epoch(),
        writer: s.engine(E1).me().clone(),
        at: s.sim.now(),
        command_id: None,
        body: EventBody::transition(State::Ok, State::Critical, String::new()),
    };
    let before = s.stale_total();
    s.sim.inject(LogEntry::Event(ev));
    s.run_for(1_000);
    assert_eq!(s.stale_total(), before + 1);
    let r = s.sim.oracle.reader.fence().verdict(&jaque_core::Event {
        object,
        epoch: s.epoch(),
        writer: s.engine(E1).me().clone(),
        at: s.sim.now(),
        command_id: None,
        body: EventBody::Ack,
    });
    assert!(matches!(r, Verdict::Stale(_)));
    s.assert_readers_agree();
}

/// A seed replays exactly: the same trace hash twice.
#[test]
fn a_seed_replays_exactly() {
    let run = |seed| {
        let mut sim = Sim::new(Params::draw(seed));
        sim.start_swarm();
        let r = sim.run();
        (sim.trace_hash(), sim.now(), r.is_ok())
    };
    for seed in [1, 2, 3] {
        assert_eq!(run(seed), run(seed));
    }
}

/// Regression (core, found by seed 2209 and others): an engine whose own command event is fenced reroutes
/// every caller waiting on it. When it owns the object again, the first caller's new append must not be
/// replaced by the second caller's: both callers hear the one outcome.
#[test]
fn a_fenced_command_with_two_callers_answers_both_after_reroute() {
    let mut s = Scenario::cluster(17, 2, 2, 20);
    let object = s.owned_by(E1).into_iter().next().expect("e1 owns something");
    // e1's publish gets stuck on its way to the log, with two callers waiting on the same command id.
    s.sim.hold_appends(E1, true);
    let id = jaque_core::CommandId::new("twice").unwrap();
    let cmd = jaque_core::Command { id, object: object.clone(), kind: CommandKind::CheckNow, hop: 0 };
    let first = s.sim.submit(cmd.clone(), Via::Engine(E1));
    let second = s.sim.submit(cmd, Via::Engine(E1));
    s.run_for(50);
    // e1 stops past its ttl: an epoch without it, then it rejoins and owns the object again.
    let ttl = s.sim.params.ttl_ms;
    s.pause(E1, ttl + 1_000);
    s.run_until(3 * ttl, "an epoch without e1, then one with it", |sim| {
        let fence = sim.oracle.reader.fence();
        let without = (1..=fence.epoch())
            .any(|e| fence.record(e).is_some_and(|r| r.members.iter().all(|m| m.id.as_str() != "e1")));
        without
            && fence.current().is_some_and(|r| r.members.iter().any(|m| m.id.as_str() == "e1"))
            && sim.engine(E1).epoch() == fence.epoch()
    });
    assert_eq!(s.owner(&object), Some(E1));
    // The stuck publish lands now, under e1's old epoch: fenced, and e1 reroutes both callers to itself.
    s.sim.hold_appends(E1, false);
    s.run_until(5_000, "both callers answered", |sim| {
        sim.subs[first].outcome.is_some() && sim.subs[second].outcome.is_some()
    });
    let (a, b) = (s.outcome(first).cloned().unwrap(), s.outcome(second).cloned().unwrap());
    assert!(matches!(a, jaque_core::Outcome::Applied { .. }), "{a:?}");
    assert_eq!(a, b, "one command, one outcome for both callers");
    assert!(s.engine(E1).counters.commands_rerouted >= 2, "both callers were rerouted");
}

/// A ui write goes straight to the owner its view of the log names: no forward. With a view one epoch behind
/// (e4 has just joined), the former owner forwards it once and e4 applies it. With the owner crashed and the
/// epoch not yet moved, the ui finds no responder there and submits through ingress instead.
#[test]
fn a_ui_write_goes_to_its_owner_and_a_stale_view_costs_one_forward() {
    let mut s = Scenario::cluster(14, 4, 3, 60);
    let mine = s.owned_by(E2)[0].clone();
    let forwards = s.sim.stats.forwards;
    let sub = s.submit(Via::Ui, &mine, CommandKind::CheckNow);
    s.run_until(5_000, "the ui learns the outcome", |sim| sim.subs[sub].outcome.is_some());
    assert!(matches!(s.outcome(sub), Some(Outcome::Applied { owner, .. }) if owner.as_str() == "e2"));
    assert_eq!(s.sim.subs[sub].engine, Some(E2), "sent straight to the owner");
    assert_eq!(s.sim.stats.forwards, forwards, "no forward");

    // An object e2 owns now and e4 will own once it joins; the ui's view stays one epoch behind.
    let four: Vec<MemberRef> =
        (1..=4).map(|i| MemberRef { id: MemberId::new(format!("e{i}")).unwrap(), incarnation: 1 }).collect();
    let moving = s
        .sim
        .object_ids()
        .into_iter()
        .find(|id| {
            s.owner(id) == Some(E2) && jaque_sim::oracle::hrw_owner(&four, id.as_str()).unwrap().id.as_str() == "e4"
        })
        .expect("an object moving from e2 to e4");
    s.sim.params.ui_view_stale = 1.0;
    s.start(E4);
    s.run_until(10_000, "every engine reads the epoch with e4", |sim| {
        sim.oracle.reader.fence().current().is_some_and(|r| r.members.len() == 4)
            && (0..4).all(|n| sim.engine(n).epoch() == sim.oracle.reader.epoch())
    });
    let forwards = s.sim.stats.forwards;
    let sub = s.submit(Via::Ui, &moving, CommandKind::CheckNow);
    s.run_until(5_000, "the ui learns the outcome", |sim| sim.subs[sub].outcome.is_some());
    assert_eq!(s.sim.subs[sub].engine, Some(E2), "sent to the owner of the ui's older view");
    assert!(matches!(s.outcome(sub), Some(Outcome::Applied { owner, .. }) if owner.as_str() == "e4"));
    assert_eq!(s.sim.stats.forwards, forwards + 1, "one forward, from e2 to e4");

    // e3 crashes; until the epoch moves the ui's view names it, finds no responder, and uses ingress.
    s.sim.params.ui_view_stale = 0.0;
    let theirs = s.owned_by(E3)[0].clone();
    s.crash(E3);
    let sub = s.submit(Via::Ui, &theirs, CommandKind::CheckNow);
    s.run_until(10_000, "the ui learns the outcome", |sim| sim.subs[sub].outcome.is_some());
    let took = s.sim.subs[sub].engine.expect("an engine claimed it on ingress");
    assert_ne!(took, E3, "claimed through ingress by a live engine");
    // Whose forward to e3 found no responder either: the ui is told to retry.
    assert!(matches!(s.outcome(sub), Some(Outcome::Unavailable { .. })), "{:?}", s.outcome(sub));
    s.run_for(1_000);
    s.assert_readers_agree();
}

/// An overloaded worker pool still records every object's outage. One worker with 12 check slots and 40 objects
/// due every 2 s, with timeouts up to 2 s: about 10 slots are busy while they are healthy. Then every object
/// goes critical and each of its checks runs to its timeout, as connects to a firewall that drops packets do:
/// about 20 slots' worth. Work no slot takes in time waits in the core's backlog and expires there unstarted;
/// the checks started are picked at random among the fresh ones, so every object's critical result comes back
/// while its engine still waits, in turn. Run in order without expiry (the worker before the backlog), the
/// queue grows past the engine's wait and not every object is recorded critical within 180 s.
#[test]
fn an_overloaded_worker_pool_still_records_every_object_s_outage() {
    let params = Params {
        objects: 40,
        interval_ms: (2_000, 2_000),
        workers: Some(PoolParams { workers: 1, slots: 12, critical_times_out: true }),
        ..Params::scripted(21, 1)
    };
    let mut s = Scenario::with(params, 1);
    let ids = s.sim.object_ids();
    for id in &ids {
        s.sim.set_truth(id, State::Critical);
    }
    let before = s.sim.pool_stats();
    s.run_until(180_000, "every object recorded critical", |sim| {
        ids.iter().all(|id| sim.oracle.reader.object(id).is_some_and(|v| v.state == State::Critical))
    });
    let after = s.sim.pool_stats();
    assert!(after.expired > before.expired, "the worker was overloaded: {after:?}");
    // What waits stays within the work of about two timeouts plus grace (20 checks a second, 4 s each).
    assert!(after.max_waiting <= 200, "the backlog stayed bounded: {after:?}");
    assert!(s.engine(E1).counters.checks_lost > 0, "expired work is lost to its engine");
    s.assert_ok();
}
