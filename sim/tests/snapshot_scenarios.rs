//! Hand-written cases for snapshots and compaction (issue 11, points 1–3 and 7), each checking every swarm
//! invariant on the way (11 included: readers from snapshots agree with the oracle): quiet clusters whose
//! engines write a snapshot every few entries, with purges that keep nothing behind a snapshot unless a case
//! says otherwise, and one reader at a time made to lag, crash or replay across a purge.

use jaque_core::{Command, CommandId, CommandKind, LogEntry, ObjectId, Outcome, State};
use jaque_sim::scenario::Scenario;
use jaque_sim::world::{LostBy, Who};
use jaque_sim::{NotifyParams, Params, SinkParams, SnapshotParams, Via};

const E1: usize = 0;
const E2: usize = 1;
const S1: usize = 0;
const N1: usize = 0;
const HOOK1: usize = 0;

/// A snapshot every five entries; a purge keeps only what a snapshot has not passed.
fn compacting() -> SnapshotParams {
    SnapshotParams::every(5, 0)
}

/// Two engines and `objects` objects, with `snapshots`; `tune` adjusts the rest before the cluster forms.
fn cluster(seed: u64, objects: usize, snapshots: SnapshotParams, tune: impl FnOnce(&mut Params)) -> Scenario {
    let mut p = Params { objects, snapshots, ..Params::scripted(seed, 2) };
    tune(&mut p);
    Scenario::with(p, 2)
}

/// Puts `object` again (an applied command, one log entry) through engine `n`; returns the outcome.
fn put(s: &mut Scenario, n: usize, object: &ObjectId) -> Outcome {
    let i: usize = object.as_str()[1..].parse().expect("objects are o<i>");
    let def = s.sim.object_def(i);
    let sub = s.submit(Via::Engine(n), object, CommandKind::Put { def });
    s.run_until(10_000, "the put is answered", |sim| sim.subs[sub].outcome.is_some());
    s.outcome(sub).cloned().expect("answered")
}

/// Puts each object in `objects` once through engine `n`, each applied.
fn put_all(s: &mut Scenario, n: usize, objects: &[ObjectId]) {
    for o in objects {
        let outcome = put(s, n, o);
        assert!(matches!(outcome, Outcome::Applied { .. }), "put of {o}: {outcome:?}");
    }
}

/// Every object's simulated truth moves to a state it is not in, so each owner writes a transition at its next
/// check.
fn churn(s: &mut Scenario, round: usize) {
    let states = [State::Critical, State::Ok, State::Warning, State::Unknown];
    for id in s.sim.object_ids() {
        let now = s.sim.oracle.reader.object(&id).map(|v| v.state);
        let next = (0..4).map(|i| states[(round + i) % 4]).find(|st| Some(*st) != now).unwrap();
        s.sim.set_truth(&id, next);
    }
}

/// The churn's transitions land: every object is checked within its 2 s interval.
const CHURN_MS: u64 = 4_000;

/// Accepted events of the log, by position.
fn accepted(s: &Scenario) -> Vec<(u64, ObjectId)> {
    (1..=s.sim.log().len() as u64)
        .filter(|seq| s.sim.oracle.is_accepted(*seq))
        .map(|seq| match &s.sim.log()[seq as usize - 1] {
            LogEntry::Event(e) => (seq, e.object.clone()),
            LogEntry::Epoch(_) => unreachable!("epoch records are no accepted events"),
        })
        .collect()
}

/// Runs until the sinks' store holds every accepted event but those purged and said lost (invariant 10).
fn settle_sinks(s: &mut Scenario) {
    let mut why = String::new();
    let ok = s.sim.run_until_cond(60_000, |sim| sim.check_sink_store().map_err(|e| why = e).is_ok());
    s.check(ok, &format!("the store never held every accepted event: {why}"));
}

/// An engine paused while the others write, snapshot and purge finds a hole where its next entries were,
/// loads the latest snapshot, jumps to it, follows on and serves commands again, agreeing with every reader.
#[test]
fn an_engine_paused_past_a_purge_jumps_to_a_snapshot_and_serves_again() {
    let mut s = cluster(61, 20, compacting(), |_| {});
    // The other engine writes the snapshots and purges.
    let writer = writer(&s);
    let lagging = 1 - writer;
    let at_pause = s.engine(lagging).reader().position();
    // Shorter than the ttl: it stays a member, it only stops reading.
    s.pause(lagging, 2_000);
    let theirs = s.owned_by(writer);
    put_all(&mut s, writer, &theirs[..12.min(theirs.len())]);
    assert!(s.sim.purged_below() > at_pause + 1, "the log was purged past it (below {})", s.sim.purged_below());
    s.run_until(5_000, "it jumps past the hole and is ready", |sim| {
        let e = sim.engine(lagging);
        e.counters.restores >= 1 && e.is_ready()
    });
    assert_eq!(s.engine(lagging).counters.log_gaps, 1, "one hole, met once");
    let mine = s.owned_by(lagging);
    let outcome = put(&mut s, lagging, &mine[0]);
    let me = format!("e{}", lagging + 1);
    assert!(matches!(&outcome, Outcome::Applied { owner, .. } if owner.as_str() == me), "{outcome:?}");
    s.run_for(500);
    s.assert_readers_agree();
    assert!(s.engine(lagging).reader() == &s.sim.oracle.reader, "it holds what the whole log says");
}

/// The engine that writes the snapshots (the HRW owner of their key): the one that has written some.
fn writer(s: &Scenario) -> usize {
    (0..2).find(|n| s.engine(*n).counters.snapshots_written > 0).expect("a snapshot written as the cluster formed")
}

/// A crashed engine restarts from the latest snapshot: it reads only the log after it, needs no jump, holds
/// what the whole log says, and answers a retried command from the snapshot's record of applied ids.
#[test]
fn a_crashed_engine_restarts_from_a_snapshot_and_agrees_with_the_oracle() {
    let mut s = cluster(62, 20, compacting(), |_| {});
    let ids = s.sim.object_ids();
    // Every target steady, so the log grows by the test's writes only: soft attempts of targets that come and go
    // would bring a snapshot and a purge while e2 catches up, and a jump this test is not about.
    for id in &ids {
        s.sim.set_truth(id, jaque_core::State::Ok);
    }
    s.run_until(30_000, "every object ok", |sim| {
        ids.iter().all(|id| {
            sim.oracle.reader.object(id).is_some_and(|v| v.state == jaque_core::State::Ok && v.soft().is_none())
        })
    });
    // A command on an object e2 owns (and will own again: HRW goes by member id), applied before the crash.
    let object = s.owned_by(E2)[0].clone();
    let i: usize = object.as_str()[1..].parse().unwrap();
    let first = Command { id: CommandId::new("kept").unwrap(), object, kind: put_kind(&s, i), hop: 0 };
    let sub = s.sim.submit(first.clone(), Via::Engine(E2));
    s.run_until(10_000, "the first put is applied", |sim| sim.subs[sub].outcome.is_some());
    let applied = s.outcome(sub).cloned().expect("answered");
    assert!(matches!(applied, Outcome::Applied { .. }), "{applied:?}");
    s.crash(E2);
    // e1 takes every object once e2's key expires, and writes on.
    s.run_until(10_000, "e1 owns everything", |sim| ids.iter().all(|o| sim.engine(E1).owns(o)));
    put_all(&mut s, E1, &ids[..10]);
    // The snapshot of the last writes stored (one every 5 entries), before e2 starts: else it could be stored, and
    // the log purged below it, while e2 reads from the one before, and e2 would rightly jump.
    s.run_until(10_000, "a snapshot within 5 entries of the log's end", |sim| {
        sim.stored_snapshots().last().is_some_and(|p| p + 5 > sim.log().len() as u64)
    });
    let latest = *s.sim.stored_snapshots().last().expect("snapshots stored");
    assert!(latest > 10 && s.sim.purged_below() > 1, "snapshots written and the log compacted");
    s.start(E2);
    assert_eq!(s.engine(E2).reader().position(), latest, "e2 starts from the latest snapshot");
    s.run_until(10_000, "e2 is ready and owns its objects again", |sim| {
        sim.engine(E2).is_ready() && sim.engine(E2).owns(&first.object)
    });
    assert_eq!(s.engine(E2).counters.restores, 0, "no hole to jump: it started past every purge");
    s.run_for(1_000);
    assert!(s.engine(E2).reader() == &s.sim.oracle.reader, "e2 holds what the whole log says");
    s.assert_readers_agree();
    // The command, retried at e2, is answered with its first outcome from the record the snapshot carried.
    let again = s.sim.submit(first, Via::Engine(E2));
    s.run_until(10_000, "the retry is answered", |sim| sim.subs[again].outcome.is_some());
    assert_eq!(s.outcome(again), Some(&applied), "answered with the first outcome, not applied again");
}

fn put_kind(s: &Scenario, i: usize) -> CommandKind {
    CommandKind::Put { def: s.sim.object_def(i) }
}

/// A sink stopped while the engines write and purge meets a hole, jumps to a snapshot, counts and names the
/// objects whose unstored events were purged, and stores every event the log still holds.
#[test]
fn a_sink_that_lags_past_the_retention_counts_lost_history_and_stores_everything_after() {
    let mut s = cluster(63, 20, compacting(), |p| p.sinks = 1);
    s.sim.start(Who::Sink(S1));
    settle_sinks(&mut s);
    // Shorter than the ttl: s1 stays the owner of every object, it only stops reading.
    s.sim.pause(Who::Sink(S1), 2_500);
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    settle_sinks(&mut s);
    let role = s.sim.sink(S1).expect("running").role();
    assert!(role.counters.restores >= 2, "started from a snapshot, then jumped past the hole");
    assert!(role.counters.objects_lost_history > 0, "said so");
    let (mut stored, mut lost) = (0, 0);
    for (seq, object) in accepted(&s) {
        match s.sim.sql().copies(seq) {
            1 => stored += 1,
            0 => {
                assert!(s.sim.lost_to_purge(LostBy::Sink, seq, &object), "{seq} ({object}) missing, unsaid");
                lost += 1;
            }
            n => panic!("{seq} stored {n} times"),
        }
        if seq >= s.sim.purged_below() {
            assert_eq!(s.sim.sql().copies(seq), 1, "{seq} ({object}) is still in the log: stored");
        }
    }
    assert!(lost > 0 && stored > 0, "{lost} purged before s1 stored them, {stored} stored");
}

/// A notifier stopped past purges likewise: it jumps, names the objects whose transitions it never sent, and
/// sends every transition after the snapshot, each once.
#[test]
fn a_notifier_that_lags_past_the_retention_counts_lost_history_and_sends_everything_after() {
    let mut s = cluster(64, 20, compacting(), |p| p.notify = NotifyParams::scripted(1, 1));
    s.sim.start(Who::Notifier(N1));
    s.run_until(5_000, "n1 is ready", |sim| sim.notifier(N1).is_some_and(|n| n.health().ready));
    let start = s.sim.start_record(HOOK1).expect("a start record");
    churn(&mut s, 0);
    s.run_for(CHURN_MS);
    // Shorter than the ttl: n1 stays the owner of every object, it only stops reading.
    s.sim.pause(Who::Notifier(N1), 2_500);
    churn(&mut s, 1);
    s.run_for(CHURN_MS);
    let cutoff = s.sim.log().len() as u64;
    let ok = s.sim.run_until_cond(30_000, |sim| sim.check_notifications(Some(cutoff)).is_ok());
    let why = s.sim.check_notifications(Some(cutoff)).err().unwrap_or_default();
    s.check(ok, &format!("not every transition sent: {why}"));
    let n1 = s.sim.notifier(N1).expect("running");
    assert!(n1.role().counters.restores >= 2, "started from a snapshot, then jumped past the hole");
    assert!(n1.role().counters.objects_lost_history > 0, "said so");
    let sent: Vec<u64> = s.sim.receptions(HOOK1).iter().filter(|r| r.delivered()).map(|r| r.seq).collect();
    let mut lost = 0;
    for (seq, t) in s.sim.accepted_transitions().range(start + 1..=cutoff) {
        let n = sent.iter().filter(|s| **s == *seq).count();
        if n == 0 {
            assert!(s.sim.lost_to_purge(LostBy::Notifier, *seq, &t.object), "{seq} ({}) unsent, unsaid", t.object);
            lost += 1;
        } else {
            assert_eq!(n, 1, "{seq} sent once");
        }
        if *seq >= s.sim.purged_below() {
            assert_eq!(n, 1, "{seq} ({}) is still in the log: sent", t.object);
        }
    }
    assert!(lost > 0, "some transitions were purged before n1 read them");
}

/// A sink that starts late replays the history of its objects from the store; a purge lands in the middle of
/// that replay: the replay says the objects lost history where it finds positions gone, and stores all after.
#[test]
fn a_purge_during_a_sinks_replay_is_said_and_everything_after_it_is_stored() {
    // Snapshots kept, nothing purged by the engines: the purge comes by hand, in the middle of the replay.
    let slow = |k: &mut SinkParams| {
        k.replay_chunk = 3;
        k.commit_ms_max = 100;
    };
    let mut s = cluster(65, 20, SnapshotParams::every(5, 7 * 24 * 3_600_000), |p| {
        p.sinks = 1;
        slow(&mut p.sink);
    });
    for round in 0..3 {
        churn(&mut s, round);
        s.run_for(CHURN_MS);
    }
    assert!((1..=s.sim.log().len() as u64).all(|seq| !s.sim.is_purged(seq)), "nothing purged yet");
    s.sim.start(Who::Sink(S1));
    s.run_until(10_000, "s1 replays its objects' history", |sim| {
        sim.sink(S1).and_then(|k| k.role().replaying_from()).is_some_and(|next| next > 5)
    });
    let next = s.sim.sink(S1).and_then(|k| k.role().replaying_from()).expect("replaying");
    let latest = *s.sim.stored_snapshots().last().expect("snapshots stored");
    assert!(latest > next + 10, "the replay has far to go ({next} of {latest})");
    s.sim.purge_now(latest);
    settle_sinks(&mut s);
    let role = s.sim.sink(S1).expect("running").role();
    assert!(role.counters.objects_lost_history > 0, "the replay said what it found gone");
    for (seq, object) in accepted(&s) {
        if seq < next || seq >= latest {
            assert_eq!(s.sim.sql().copies(seq), 1, "{seq} ({object}) was read before the purge, or is after it");
        } else if s.sim.sql().copies(seq) == 0 {
            assert!(s.sim.lost_to_purge(LostBy::Sink, seq, &object), "{seq} ({object}) missing, unsaid");
        }
    }
}

/// Every snapshot write lands but its answer is lost: the snapshots are stored and processes start from them,
/// but the writer, never told they are durable, purges nothing; once answers come back, it purges.
#[test]
fn a_snapshot_write_whose_answer_is_lost_is_stored_but_purges_nothing() {
    let mut s = cluster(66, 20, SnapshotParams { answer_loss: 1.0, ..compacting() }, |_| {});
    let ids = s.sim.object_ids();
    let theirs = s.owned_by(E1);
    put_all(&mut s, E1, &theirs[..6]);
    s.run_for(3_000);
    let writer = (0..2).find(|n| s.engine(*n).counters.snapshots_failed > 0).expect("a writer told of failures");
    assert_eq!(s.engine(writer).counters.snapshots_written, 0, "no write was answered");
    assert!(!s.sim.stored_snapshots().is_empty(), "the writes landed all the same");
    assert_eq!(s.sim.purged_below(), 1, "nothing purged below a snapshot not known durable");
    // A restarted engine starts from what landed.
    let other = 1 - writer;
    s.crash(other);
    s.start(other);
    assert_eq!(Some(&s.engine(other).reader().position()), s.sim.stored_snapshots().last());
    s.run_until(10_000, "both serve under one epoch", |sim| {
        let members = sim.oracle.reader.fence().current().map_or(0, |r| r.members.len());
        members == 2 && (0..2).all(|n| sim.engine(n).is_ready() && sim.engine(n).epoch() == sim.oracle.reader.epoch())
    });
    s.run_for(1_000);
    // Answers come back: the next snapshot is known durable, and the log is compacted.
    s.sim.params.snapshots.answer_loss = 0.0;
    put_all(&mut s, E1, &ids[..6]);
    s.run_until(5_000, "a purge", |sim| sim.purged_below() > 1);
    assert!(s.engine(writer).counters.snapshots_written > 0);
    s.run_for(1_000);
    s.assert_readers_agree();
}

/// Snapshots off: nothing is written or purged, every process reads the log from its first position, and the
/// sink stores every accepted event.
#[test]
fn with_snapshots_off_nothing_is_written_or_purged_and_every_reader_starts_from_the_first_position() {
    let mut s = cluster(67, 20, SnapshotParams::off(), |p| p.sinks = 1);
    s.sim.start(Who::Sink(S1));
    for round in 0..2 {
        churn(&mut s, round);
        s.run_for(CHURN_MS);
    }
    s.crash(E2);
    s.start(E2);
    assert_eq!(s.engine(E2).reader().position(), 0, "from the first position");
    s.run_until(10_000, "e2 is ready", |sim| sim.engine(E2).is_ready());
    settle_sinks(&mut s);
    let k = s.sim.snap_stats();
    assert_eq!((k.writes, k.starts, k.loads), (0, 0, 0), "no snapshot written, started from or loaded");
    assert!(s.sim.stored_snapshots().is_empty() && s.sim.purged_below() == 1);
    let role = s.sim.sink(S1).expect("running").role();
    assert_eq!((role.counters.restores, role.counters.objects_lost_history), (0, 0));
    assert!(accepted(&s).iter().all(|(seq, _)| s.sim.sql().copies(*seq) == 1), "every accepted event stored");
    s.assert_readers_agree();
}
