//! Hand-written sink cases (issue 9, point 5): one per fault kind. Each builds a quiet cluster of engines and
//! sinks over the simulated SQL store, does one thing to it, asserts invariant 10 (every accepted event in the
//! store exactly once, no fenced one, each object's row at its last event, skipped rows exactly the counted
//! ones) and something specific to the fault; every swarm invariant is checked on the way.

use jaque_core::{LogEntry, MemberId, MemberRef, ObjectId, State};
use jaque_sim::oracle::hrw_owner;
use jaque_sim::scenario::Scenario;
use jaque_sim::world::{Peer, Who};
use jaque_sim::{Params, SinkParams};

const S1: usize = 0;
const S2: usize = 1;

/// `engines` engines with `objects` objects, then `sinks` sinks started and caught up with the log.
fn world(seed: u64, engines: usize, sinks: usize, objects: usize, tune: impl FnOnce(&mut SinkParams)) -> Scenario {
    world_of(seed, engines, sinks, sinks, objects, tune)
}

/// Like `world`, with `slots` sink slots of which the first `sinks` are started.
fn world_of(
    seed: u64,
    engines: usize,
    slots: usize,
    sinks: usize,
    objects: usize,
    tune: impl FnOnce(&mut SinkParams),
) -> Scenario {
    let mut p = Params { objects, sinks: slots, ..Params::scripted(seed, engines) };
    tune(&mut p.sink);
    let mut s = Scenario::with(p, engines);
    for k in 0..sinks {
        s.sim.start(Who::Sink(k));
    }
    settle(&mut s);
    s
}

/// Runs until the store holds every accepted event of the log (invariant 10), at most a minute.
fn settle(s: &mut Scenario) {
    let mut last = String::new();
    let ok = s.sim.run_until_cond(60_000, |sim| match sim.check_sink_store() {
        Ok(()) => true,
        Err(e) => {
            last = e;
            false
        }
    });
    s.check(ok, &format!("the store never held every accepted event: {last}"));
}

/// Every object's simulated truth moves to a new state (one not its last), so at its next check each owner
/// writes a transition.
fn churn(s: &mut Scenario, round: usize) {
    let states = [State::Critical, State::Ok, State::Warning, State::Unknown];
    for id in s.sim.object_ids() {
        let now = s.sim.oracle.reader.object(&id).map(|v| v.state);
        let next = (0..4).map(|i| states[(round + i) % 4]).find(|st| Some(*st) != now).unwrap();
        s.sim.set_truth(&id, next);
    }
}

/// Transitions of the churn land: every object is checked within its 2 s interval.
const CHURN_MS: u64 = 4_000;

/// Objects HRW gives sink `k` when sinks `of` are the bucket's members.
fn owned_by_sink(s: &Scenario, k: usize, of: &[usize]) -> Vec<ObjectId> {
    let member = |i: usize| MemberRef {
        id: MemberId::new(format!("s{}", i + 1)).unwrap(),
        incarnation: s.sim.sink_procs()[i].inc,
    };
    let members: Vec<MemberRef> = of.iter().map(|&i| member(i)).collect();
    let me = member(k);
    s.sim.object_ids().into_iter().filter(|o| hrw_owner(&members, o.as_str()) == Some(&me)).collect()
}

fn stored(s: &Scenario, o: &ObjectId) -> usize {
    s.sim.sql().events().iter().filter(|r| &r.object == o).count()
}

fn accepted_of(s: &Scenario, o: &ObjectId) -> usize {
    s.sim
        .log()
        .iter()
        .enumerate()
        .filter(|(i, e)| matches!(e, LogEntry::Event(ev) if &ev.object == o) && s.sim.oracle.is_accepted(*i as u64 + 1))
        .count()
}

/// A sink crashes with a transaction out; its objects continue on the other sink from what the store says,
/// with nothing skipped, and a commit that lands after the crash duplicates nothing.
#[test]
fn a_sink_crashed_mid_batch_its_objects_continue_on_another_sink_with_nothing_skipped() {
    let mut s = world(31, 2, 2, 30, |k| {
        k.max_batch = 4;
        k.commit_ms_max = 300;
    });
    let ttl = s.sim.params.ttl_ms;
    let theirs = owned_by_sink(&s, S1, &[S1, S2]);
    assert!(!theirs.is_empty());
    churn(&mut s, 0);
    s.run_until(10_000, "s1 has a transaction out", |sim| sim.sink_writes_out(S1) > 0);
    s.sim.crash(Who::Sink(S1));
    // Its key expires; s2 gains s1's objects and resumes them from the store.
    s.run_until(3 * ttl, "s2 owns every object", |sim| sim.sink(S2).unwrap().role().owned_count() == 30);
    churn(&mut s, 1);
    s.run_for(CHURN_MS);
    settle(&mut s);
    let (events, objects) = s.sim.sink_skipped();
    assert!(events.is_empty() && objects.is_empty(), "nothing skipped: {events:?} {objects:?}");
    assert!(s.sim.sink(S2).unwrap().role().counters.resumes_done >= 2, "s2 resumed the objects it gained");
    for o in &theirs {
        assert_eq!(stored(&s, o), accepted_of(&s, o), "{o}: every accepted event stored once");
    }
    s.assert_ok();
}

/// A sink paused past its ttl: the other sink takes its objects and writes their events while it is
/// stopped; when it resumes, what it writes of them again is ignored (no duplicate), and it owns its share
/// again.
#[test]
fn a_sink_paused_past_its_ttl_is_replaced_and_writes_no_duplicate_when_it_resumes() {
    let mut s = world(32, 2, 2, 30, |_| {});
    let ttl = s.sim.params.ttl_ms;
    s.sim.pause(Who::Sink(S1), 3 * ttl);
    s.run_until(3 * ttl, "s2 owns every object", |sim| sim.sink(S2).unwrap().role().owned_count() == 30);
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    assert!(s.sim.sink_procs()[S1].is_paused());
    assert_eq!(s.sim.check_sink_store(), Ok(()), "s2 stored everything while s1 was paused");
    s.run_until(3 * ttl, "s1 resumes", |sim| !sim.sink_procs()[S1].is_paused());
    churn(&mut s, 1);
    s.run_for(CHURN_MS);
    settle(&mut s);
    s.run_until(3 * ttl, "s1 owns its share again", |sim| {
        let (a, b) = (sim.sink(S1).unwrap().role().owned_count(), sim.sink(S2).unwrap().role().owned_count());
        a > 0 && a + b == 30
    });
    assert!(s.sim.sql().events().len() > 60);
    settle(&mut s);
}

/// A sink cut from its database: its transactions time out and are retried; its objects' events are missing
/// meanwhile, and all there, once, after the cut heals.
#[test]
fn a_sink_cut_from_its_database_retries_and_loses_nothing() {
    let mut s = world(33, 2, 2, 30, |_| {});
    s.sim.cut_peer(Who::Sink(S1), Peer::Database, None);
    churn(&mut s, 0);
    s.run_for(2 * CHURN_MS);
    let mine = owned_by_sink(&s, S1, &[S1, S2]);
    assert!(s.sim.check_sink_store().is_err(), "s1's objects' events wait while it is cut");
    let sink = s.sim.sink(S1).unwrap();
    assert!(sink.counters.store_errors > 0 && !sink.health().ready, "{:?}", sink.health());
    assert!(sink.lag() > 0);
    s.sim.heal_cuts(Who::Sink(S1));
    settle(&mut s);
    for o in &mine {
        assert_eq!(stored(&s, o), accepted_of(&s, o));
    }
    assert!(s.sim.sink(S1).unwrap().health().ready);
}

/// A sink cut from NATS (both ways) for longer than its ttl reads nothing and its key expires: the other
/// sink stores everything meanwhile; healed, it catches up without duplicates.
#[test]
fn a_sink_cut_from_nats_is_replaced_and_catches_up_after() {
    let mut s = world(34, 2, 2, 30, |_| {});
    let ttl = s.sim.params.ttl_ms;
    let position = s.sim.sink(S1).unwrap().role().reader().position();
    s.sim.cut_store(Who::Sink(S1), true, true, None);
    s.run_until(3 * ttl, "s2 owns every object", |sim| sim.sink(S2).unwrap().role().owned_count() == 30);
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    assert_eq!(s.sim.check_sink_store(), Ok(()), "s2 stored s1's objects too");
    assert_eq!(s.sim.sink(S1).unwrap().role().reader().position(), position, "s1 read nothing while cut");
    s.sim.heal_cuts(Who::Sink(S1));
    s.run_until(3 * ttl, "s1 is back in the bucket", |sim| sim.sink(S1).unwrap().role().owned_count() > 0);
    churn(&mut s, 1);
    s.run_for(CHURN_MS);
    settle(&mut s);
}

/// The database down for a while: nothing is written, the sinks say why they are not ready and their lag
/// grows; back, every event is written once.
#[test]
fn the_database_down_then_back_loses_nothing_and_doubles_nothing() {
    let mut s = world(35, 2, 2, 30, |_| {});
    let before = s.sim.sql().events().len();
    s.sim.set_sql_down(true);
    churn(&mut s, 0);
    s.run_for(2 * CHURN_MS);
    let landed = s.sim.log().len();
    assert_eq!(s.sim.sql().events().len(), before, "nothing written while the database is down");
    for k in [S1, S2] {
        let sink = s.sim.sink(k).unwrap();
        assert!(!sink.health().ready && sink.health().reason.contains("unavailable"), "{:?}", sink.health());
        assert!(sink.lag() > 0);
    }
    assert!(s.sim.sql().counters.down > 0);
    s.sim.set_sql_down(false);
    settle(&mut s);
    assert!(s.sim.check_sink_store_upto(landed as u64).is_ok());
    assert!(s.sim.sql().events().len() > before + 20, "the churn's transitions are in");
    for k in [S1, S2] {
        assert!(s.sim.sink(k).unwrap().health().ready);
    }
}

/// Commits whose answer is lost: the sink retries a transaction that was in fact done, and the retry's rows
/// are ignored (the store holds each once).
#[test]
fn a_lost_commit_answer_makes_no_duplicate() {
    let mut s = world(36, 2, 1, 30, |k| k.max_batch = 5);
    let conflicts = s.sim.sql().counters.conflicts;
    s.sim.lose_commit_answers(3);
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    settle(&mut s);
    assert_eq!(s.sim.sql().counters.lost_answers, 3);
    assert!(s.sim.sql().counters.conflicts > conflicts, "the retried transactions found their rows there");
    let mut seqs: Vec<u64> = s.sim.sql().events().iter().map(|r| r.seq).collect();
    let n = seqs.len();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "no position twice in table events");
    assert_eq!(s.sim.sink(S1).unwrap().counters.store_errors, 3);
}

/// Rows the database refuses: written degraded (output emptied) and, where it refuses even that, skipped and
/// counted; the rest arrive and no sink stalls.
#[test]
fn refused_rows_are_written_degraded_or_skipped_and_counted() {
    let mut s = world(37, 2, 2, 40, |k| {
        k.refuse = 0.4;
        k.refuse_degraded = 0.5;
        k.max_batch = 8;
    });
    for round in 0..4 {
        churn(&mut s, round);
        s.run_for(CHURN_MS);
    }
    settle(&mut s);
    let (skipped, _) = s.sim.sink_skipped();
    assert!(!skipped.is_empty(), "some rows were refused even degraded");
    for seq in skipped {
        assert_eq!(s.sim.sql().copies(*seq), 0, "a skipped row is not in the store");
    }
    let degraded = s.sim.sql().events().iter().filter(|r| r.output.as_deref() == Some("")).count();
    assert!(degraded > 0, "some rows were written degraded");
    let counted: u64 = [S1, S2].iter().map(|&k| s.sim.sink(k).unwrap().counters.rows_skipped).sum();
    assert!(counted as usize >= skipped.len(), "every skipped row counted by a sink");
    for k in [S1, S2] {
        assert_eq!(s.sim.sink(k).unwrap().lag(), 0, "no sink stalls");
    }
}

/// Two sinks both own an object during a membership change (s1 has not seen s2 join): both write its events,
/// and the store holds each once.
#[test]
fn two_sinks_owning_one_object_during_a_membership_change_make_no_duplicate() {
    let mut s = world_of(38, 2, 2, 1, 40, |_| {});
    let conflicts = s.sim.sql().counters.conflicts;
    s.sim.hold_watch(Who::Sink(S1), true);
    s.sim.start(Who::Sink(S2));
    s.run_until(10_000, "s2 owns its objects", |sim| sim.sink(S2).is_some_and(|k| k.role().owned_count() > 0));
    let both = owned_by_sink(&s, S2, &[S1, S2]);
    assert!(both.iter().all(|o| s.sim.sink(S1).unwrap().role().owns(o)), "s1 still thinks it owns them");
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    assert!(s.sim.sql().counters.conflicts > conflicts, "both wrote the same rows");
    s.sim.hold_watch(Who::Sink(S1), false);
    s.run_until(5_000, "then s1 lets them go", |sim| both.iter().all(|o| !sim.sink(S1).unwrap().role().owns(o)));
    settle(&mut s);
    for o in &both {
        assert_eq!(stored(&s, o), accepted_of(&s, o));
    }
}

/// A sink leaves cleanly: its key goes at once, the other sink takes its objects well within the ttl, and it
/// exits.
#[test]
fn a_leaving_sink_hands_its_objects_over_at_once_and_exits() {
    let mut s = world(39, 2, 2, 30, |_| {});
    let ttl = s.sim.params.ttl_ms;
    let theirs = owned_by_sink(&s, S2, &[S1, S2]);
    assert!(!theirs.is_empty());
    s.sim.leave(Who::Sink(S2));
    // Well within the ttl: the delete reaches s1's watcher, not an expiry.
    s.run_until(ttl / 2, "s1 owns every object", |sim| sim.sink(S1).unwrap().role().owned_count() == 30);
    s.run_until(6_000, "s2 exits", |sim| !sim.sink_procs()[S2].is_running());
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    // The last events of the churn may have landed an instant ago: s1 stores them, once it has read them.
    settle(&mut s);
    assert_eq!(s.sim.check_sink_store(), Ok(()), "s2's objects' new events stored by s1");
    for o in &theirs {
        assert_eq!(stored(&s, o), accepted_of(&s, o));
    }
}
