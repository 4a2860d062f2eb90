//! Engine behaviour, driven through a fault-free world (tests/common): commands, forwarding, idempotency,
//! checks, failover, clean leave and the fence against a paused engine.

mod common;
use common::*;
use jaque_core::Life;
use jaque_core::*;
use std::time::Duration;

fn applied(o: &Outcome) -> (String, u64, u64) {
    match o {
        Outcome::Applied { owner, epoch, seq, .. } => (owner.to_string(), *epoch, *seq),
        other => panic!("expected applied, got {other:?}"),
    }
}

fn three() -> World {
    let mut w = World::new();
    for id in ["a", "b", "c"] {
        w.add_engine(id, 1);
    }
    w.advance(Duration::from_millis(10));
    w
}

/// The first object names (of the form obj-N) that `owner` owns under the world's current epoch.
fn objects_owned_by(w: &World, owner: &str, n: usize) -> Vec<String> {
    let r = w.oracle();
    let own = r.fence().current_ownership().unwrap();
    (0..10_000)
        .map(|i| format!("obj-{i}"))
        .filter(|o| own.owner(&oid(o)).unwrap().id.as_str() == owner)
        .take(n)
        .collect()
}

#[test]
fn a_single_engine_forms_epoch_one_and_applies_a_put() {
    let mut w = World::new();
    w.add_engine("a", 1);
    assert_eq!(w.engines["a"].epoch(), 1);
    let r = w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    let (owner, epoch, _) = applied(w.outcome(r));
    assert_eq!((owner.as_str(), epoch), ("a", 1));
    assert!(w.engines["a"].owns(&oid("web")));
}

#[test]
fn a_new_object_is_checked_at_once_and_a_transition_is_written_only_on_change() {
    let mut w = World::new();
    w.add_engine("a", 1);
    w.truth.insert("web".into(), State::Critical);
    w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(10) }));
    w.advance(Duration::ZERO);
    assert_eq!(w.dispatched.len(), 1, "first check right away");
    assert_eq!(w.oracle().object(&oid("web")).unwrap().state, State::Critical);
    // Three more checks with the same result: no new transitions.
    w.advance(Duration::from_secs(31));
    assert_eq!(w.dispatched.len(), 4);
    let transitions = |w: &World| {
        w.log.iter().filter(|e| matches!(e, LogEntry::Event(Event { body: EventBody::Transition { .. }, .. }))).count()
    };
    assert_eq!(transitions(&w), 1);
    w.truth.insert("web".into(), State::Ok);
    w.advance(Duration::from_secs(10));
    assert_eq!(transitions(&w), 2);
    assert_eq!(w.oracle().object(&oid("web")).unwrap().state, State::Ok);
}

#[test]
fn checks_follow_the_slot_grid_of_the_put() {
    let mut w = World::new();
    w.add_engine("a", 1);
    let t0 = w.now;
    w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(10) }));
    w.advance(Duration::from_secs(35));
    let times: Vec<u64> = w.dispatched.iter().map(|(_, _, t)| t.0 - t0.0).collect();
    assert_eq!(times, vec![0, 10_000, 20_000, 30_000]);
}

#[test]
fn a_command_at_a_non_owner_is_forwarded_once_and_applied_by_the_owner() {
    let mut w = three();
    let obj = objects_owned_by(&w, "b", 1).remove(0);
    w.submit("b", cmd("p", &obj, CommandKind::Put { def: def(30) }));
    let r = w.submit("a", cmd("c1", &obj, CommandKind::Pause));
    let (owner, _, _) = applied(w.outcome(r));
    assert_eq!(owner, "b");
    assert_eq!(w.engines["a"].counters.forwarded_sent, 1);
    assert_eq!(w.max_hop_seen, 1);
    assert!(w.oracle().object(&oid(&obj)).unwrap().paused);
}

#[test]
fn a_forwarded_command_at_a_non_owner_is_not_owned_and_never_forwarded_again() {
    let mut w = three();
    let obj = objects_owned_by(&w, "b", 1).remove(0);
    let mut c = cmd("c1", &obj, CommandKind::Delete);
    c.hop = 1;
    let forwards_before = w.forwarded.len();
    let r = w.submit("a", c);
    assert_eq!(w.outcome(r), &Outcome::NotOwned);
    assert_eq!(w.engines["a"].counters.not_owned, 1);
    assert_eq!(w.forwarded.len(), forwards_before, "no second hop");
}

#[test]
fn a_forward_to_an_unreachable_owner_is_an_error_and_unavailable() {
    let mut w = three();
    let obj = objects_owned_by(&w, "c", 1).remove(0);
    w.paused.push("c".into());
    let r = w.submit("a", cmd("c1", &obj, CommandKind::CheckNow));
    assert!(matches!(w.outcome(r), Outcome::Unavailable { .. }));
    assert_eq!(w.engines["a"].counters.forwarded_error, 1);
}

#[test]
fn a_command_id_is_applied_at_most_once_even_after_the_owner_changes() {
    let mut w = three();
    let obj = objects_owned_by(&w, "b", 1).remove(0);
    let r1 = w.submit("a", cmd("put-1", &obj, CommandKind::Put { def: def(30) }));
    let first = applied(w.outcome(r1));
    // The same id again, at another engine: answered from the log, not applied again.
    let r2 = w.submit("c", cmd("put-1", &obj, CommandKind::Put { def: def(60) }));
    assert_eq!(applied(w.outcome(r2)), first);
    // The owner leaves; the retry reaches the new owner, which rebuilt the applied ids from the log.
    w.engines.get_mut("b").unwrap().handle(w.now, Input::Life(Life::Leave));
    w.run();
    w.remove_engine("b");
    w.advance(Duration::from_millis(10));
    let new_owner = w.owner_of(&obj).unwrap();
    assert_ne!(new_owner, "b");
    let r3 = w.submit(&new_owner, cmd("put-1", &obj, CommandKind::Put { def: def(60) }));
    assert_eq!(applied(w.outcome(r3)), first);
    let puts = w
        .log
        .iter()
        .filter(|e| matches!(e, LogEntry::Event(ev) if ev.command_id.as_ref().is_some_and(|c| c.as_str() == "put-1")))
        .count();
    assert_eq!(puts, 1, "one event for the id");
    assert_eq!(w.oracle().object(&oid(&obj)).unwrap().def.interval_ms, 30_000, "the retry did not re-apply");
}

#[test]
fn a_command_on_a_missing_object_is_not_found_and_may_be_retried_once_it_exists() {
    let mut w = World::new();
    w.add_engine("a", 1);
    let r = w.submit("a", cmd("p1", "web", CommandKind::Pause));
    assert!(matches!(w.outcome(r), Outcome::NotFound { .. }));
    w.submit("a", cmd("put", "web", CommandKind::Put { def: def(30) }));
    let r = w.submit("a", cmd("p1", "web", CommandKind::Pause));
    applied(w.outcome(r));
}

#[test]
fn an_invalid_definition_is_rejected_without_touching_the_log() {
    let mut w = World::new();
    w.add_engine("a", 1);
    let len = w.log.len();
    let mut d = def(30);
    d.interval_ms = 0;
    let r = w.submit("a", cmd("c", "web", CommandKind::Put { def: d }));
    assert!(matches!(w.outcome(r), Outcome::Rejected { .. }));
    assert_eq!(w.log.len(), len);
}

#[test]
fn an_engine_that_has_not_caught_up_answers_unavailable() {
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), Input::Command { reply: ReplyTo(7), cmd: cmd("c", "web", CommandKind::Delete) });
    let replies: Vec<Output> =
        std::iter::from_fn(|| e.poll_output()).filter(|o| matches!(o, Output::Reply { .. })).collect();
    assert!(matches!(&replies[..], [Output::Reply { to: ReplyTo(7), outcome: Outcome::Unavailable { .. } }]));
}

#[test]
fn a_clean_leave_hands_objects_over_without_waiting_for_the_ttl() {
    let mut w = three();
    let objs = objects_owned_by(&w, "c", 5);
    for (i, o) in objs.iter().enumerate() {
        w.submit("a", cmd(&format!("p{i}"), o, CommandKind::Put { def: def(30) }));
    }
    let epoch = w.engines["a"].epoch();
    w.engines.get_mut("c").unwrap().handle(w.now, Input::Life(Life::Leave));
    w.run();
    // No time passed: the delete reached the others, who bumped the epoch and took the objects.
    assert_eq!(w.engines["a"].epoch(), epoch + 1);
    for o in &objs {
        let owner = w.owner_of(o).unwrap();
        assert_ne!(owner, "c");
        assert!(w.engines[&owner].owns(&oid(o)));
    }
    assert!(!w.engines["c"].owned_objects().any(|_| true));
}

#[test]
fn a_join_moves_only_objects_to_the_newcomer() {
    let mut w = three();
    for i in 0..60 {
        w.submit("a", cmd(&format!("p{i}"), &format!("obj-{i}"), CommandKind::Put { def: def(30) }));
    }
    let before: Vec<Option<String>> = (0..60).map(|i| w.owner_of(&format!("obj-{i}"))).collect();
    let stale_before = w.oracle().counters.stale_epoch_total;
    w.add_engine("d", 1);
    w.advance(Duration::from_millis(10));
    let mut moved = 0;
    for (i, b) in before.iter().enumerate() {
        let after = w.owner_of(&format!("obj-{i}"));
        if after != *b {
            assert_eq!(after.as_deref(), Some("d"), "objects move only to the newcomer");
            moved += 1;
        }
    }
    assert!(moved > 0, "the newcomer took a share");
    assert_eq!(w.oracle().counters.stale_epoch_total, stale_before, "no event discarded by a join");
}

#[test]
fn an_engine_paused_past_its_ttl_is_fenced_then_gets_its_share_back() {
    let mut w = three();
    let objs = objects_owned_by(&w, "c", 3);
    for (i, o) in objs.iter().enumerate() {
        w.submit("a", cmd(&format!("p{i}"), o, CommandKind::Put { def: def(5) }));
    }
    let epoch = w.engines["a"].epoch();
    w.paused.push("c".into());
    w.advance(TTL + Duration::from_secs(1));
    assert_eq!(w.engines["a"].epoch(), epoch + 1, "c's key expired, the others bumped the epoch");
    for o in &objs {
        assert_ne!(w.owner_of(o).as_deref(), Some("c"));
    }
    // While paused, the truth changed. c wakes up with its checks overdue and runs them before it has read
    // the new epoch record: its transition goes into the log under its old epoch.
    w.truth.insert(objs[0].clone(), State::Critical);
    w.paused.clear();
    let c = w.engines.get_mut("c").unwrap();
    c.handle_timeout(w.now);
    assert!(c.owns(&oid(&objs[0])), "c has not read the new epoch yet");
    w.run();
    assert!(w
        .log
        .iter()
        .any(|e| matches!(e, LogEntry::Event(ev) if ev.writer.id.as_str() == "c" && ev.epoch == epoch)));
    let oracle = w.oracle();
    let late = w.log.iter().filter(|e| matches!(e, LogEntry::Event(ev) if ev.writer.id.as_str() == "c" && ev.epoch == epoch && matches!(ev.body, EventBody::Transition { .. }))).count();
    assert!(late >= 1);
    assert_eq!(oracle.counters.stale_epoch_total, late as u64, "every late transition was fenced");
    assert_ne!(oracle.object(&oid(&objs[0])).unwrap().state, State::Critical, "no contradicting transition");
    for id in ["a", "b", "c"] {
        assert_eq!(w.engines[id].reader().counters.stale_epoch_total, late as u64, "{id} agrees");
    }
    // c rejoined (its own key expired while it was alive): its share returns.
    w.advance(Duration::from_millis(10));
    assert_eq!(w.engines["a"].epoch(), epoch + 2);
    for o in &objs {
        assert_eq!(w.owner_of(o).as_deref(), Some("c"));
        assert!(w.engines["c"].owns(&oid(o)));
    }
}

#[test]
fn failover_continues_the_schedule_without_a_burst() {
    let mut w = three();
    // 300 objects on a 60 s grid, anchored at spread-out times.
    for i in 0..300 {
        w.submit("a", cmd(&format!("p{i}"), &format!("obj-{i}"), CommandKind::Put { def: def(60) }));
        w.advance(Duration::from_millis(200));
    }
    w.advance(Duration::from_secs(120));
    let c_objects: Vec<String> =
        (0..300).map(|i| format!("obj-{i}")).filter(|o| w.owner_of(o).as_deref() == Some("c")).collect();
    assert!(c_objects.len() > 50);
    // c dies (no clean leave).
    let died = w.now;
    w.remove_engine("c");
    w.advance(TTL + Duration::from_secs(1));
    let takeover = w.now;
    let checks_of_c = |w: &World, from: Time, to: Time| {
        w.dispatched
            .iter()
            .filter(|(_, work, t)| *t >= from && *t < to && c_objects.contains(&work.object.to_string()))
            .count()
    };
    // Everything c owned is checked again within one interval after the takeover...
    w.advance(Duration::from_secs(61));
    let all: std::collections::BTreeSet<String> =
        w.dispatched.iter().filter(|(_, _, t)| *t >= takeover).map(|(_, work, _)| work.object.to_string()).collect();
    for o in &c_objects {
        assert!(all.contains(o), "{o} checked again after failover");
    }
    // ...but not all at once: at the takeover instant only slots missed inside the window may run.
    let at_once = checks_of_c(&w, takeover, takeover + Duration::from_millis(1));
    assert!(at_once < c_objects.len() / 2, "{at_once} of {} checked at the takeover instant", c_objects.len());
    let _ = died;
}

#[test]
fn memory_mode_forwards_nothing() {
    let mut e = Engine::new(EngineConfig { forwarding: false, ..EngineConfig::new(member("a", 1), TTL) });
    e.handle(Time(0), Input::Life(Life::Start));
    // Another engine appears in an epoch record it reads (it cannot in memory mode, but the rule holds).
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    e.handle(
        Time(0),
        Input::Life(Life::Log {
            seq: 1,
            entry: LogEntry::Epoch(EpochRecord {
                epoch: 1,
                members: vec![member("a", 1), member("b", 1)],
                members_rev: 1,
                idempotency_window_ms: None,
                format: 1,
            }),
        }),
    );
    std::iter::from_fn(|| e.poll_output()).for_each(drop);
    let obj =
        (0..100).map(|i| format!("o{i}")).find(|o| e.reader().owner(&oid(o)).unwrap().id.as_str() == "b").unwrap();
    e.handle(Time(0), Input::Command { reply: ReplyTo(1), cmd: cmd("c", &obj, CommandKind::Delete) });
    let outs: Vec<Output> = std::iter::from_fn(|| e.poll_output()).collect();
    assert!(!outs.iter().any(|o| matches!(o, Output::Forward { .. })));
    assert!(matches!(&outs[..], [Output::Reply { outcome: Outcome::Unavailable { .. }, .. }]));
}

#[test]
fn a_repeated_command_id_on_another_object_changes_nothing() {
    // Found by the forwarding property: a delete reusing an applied id was a no-op in the log, but the owner
    // still dropped the object from its schedule.
    let mut w = World::new();
    w.add_engine("a", 1);
    w.submit("a", cmd("put-web", "web", CommandKind::Put { def: def(30) }));
    w.submit("a", cmd("reused", "db", CommandKind::Put { def: def(30) }));
    let log_len = w.log.len();
    // An event reusing the applied id "reused" for another object folds as a duplicate.
    w.engines.get_mut("a").unwrap().handle(
        w.now,
        Input::Life(Life::Log {
            seq: log_len as u64 + 1,
            entry: LogEntry::Event(Event {
                object: oid("web"),
                epoch: 1,
                writer: member("a", 1),
                at: w.now,
                command_id: Some(CommandId::new("reused").unwrap()),
                body: EventBody::Delete,
            }),
        }),
    );
    w.check();
    assert!(w.engines["a"].owns(&oid("web")), "the duplicate delete did not unschedule web");
}

fn epoch_records(w: &World) -> Vec<EpochRecord> {
    w.log
        .iter()
        .filter_map(|e| match e {
            LogEntry::Epoch(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn epochs_grow_by_one_and_only_on_a_membership_change() {
    let mut w = three();
    let records = epoch_records(&w);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.epoch, i as u64 + 1, "epochs are contiguous");
        if i > 0 {
            assert_ne!(r.members, records[i - 1].members, "each record is a membership change");
            assert!(r.members_rev > records[i - 1].members_rev);
        }
    }
    assert_eq!(records.last().unwrap().members.len(), 3);
    // Many heartbeat refreshes later: no new epoch.
    let n = records.len();
    w.advance(Duration::from_secs(120));
    assert_eq!(epoch_records(&w).len(), n, "refreshes are not membership changes");
    // Every engine proposed at most once per record it saw differ; lost proposals left no record.
    let proposed: u64 = w.engines.values().map(|e| e.counters.epochs_proposed).sum();
    let won: u64 = w.engines.values().map(|e| e.counters.epochs_won).sum();
    assert_eq!(won as usize, n, "exactly one proposal won per epoch");
    assert!(proposed >= won);
}

/// Engine a, started and caught up, having read epoch 1 of a and b (its record at membership revision `rev`).
fn engine_a_in_epoch_one_with_b(rev: u64) -> Engine {
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Start));
    e.handle(Time(0), Input::Life(Life::CaughtUp));
    let record = EpochRecord {
        epoch: 1,
        members: vec![member("a", 1), member("b", 1)],
        members_rev: rev,
        idempotency_window_ms: None,
        format: 1,
    };
    e.handle(Time(0), Input::Life(Life::Log { seq: 1, entry: LogEntry::Epoch(record) }));
    e
}

#[test]
fn an_engine_does_not_propose_from_a_view_older_than_the_record() {
    let mut e = engine_a_in_epoch_one_with_b(10);
    // Its watcher has only reached revision 5, where b had not joined yet.
    let up = |rev, id| {
        Input::Life(Life::Member(MemberObservation::new(Bucket::Engine, rev, MemberChange::Up(member(id, 1)))))
    };
    e.handle(Time(0), up(5, "a"));
    let proposals = |e: &mut Engine| {
        std::iter::from_fn(|| e.poll_output()).filter(|o| matches!(o, Output::ProposeEpoch { .. })).count()
    };
    assert_eq!(proposals(&mut e), 0, "a view older than the record must not undo it");
    e.handle(Time(0), up(10, "b"));
    assert_eq!(proposals(&mut e), 0, "the view now equals the record");
    e.handle(Time(0), up(11, "c"));
    assert_eq!(proposals(&mut e), 1, "a newer, different view proposes");
}

#[test]
fn a_transition_that_never_lands_is_written_again() {
    let mut w = World::new();
    w.add_engine("a", 1);
    w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(1) }));
    w.truth.insert("web".into(), State::Critical);
    w.lose_appends = 1;
    w.advance(Duration::ZERO);
    assert_eq!(w.oracle().object(&oid("web")).unwrap().state, State::Pending, "the transition was lost");
    // Same result again and again: once the lost write is presumed lost, it is written again.
    w.advance(Duration::from_secs(10));
    assert_eq!(w.oracle().object(&oid("web")).unwrap().state, State::Critical);
}

#[test]
fn a_left_engine_stays_left_even_if_started_again() {
    // Found by the engine fuzz target: a Start after Leave rejoined with nothing owned.
    let mut w = World::new();
    w.add_engine("a", 1);
    w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(30) }));
    let now = w.now;
    let e = w.engines.get_mut("a").unwrap();
    e.handle(now, Input::Life(Life::Leave));
    e.handle(now, Input::Life(Life::Start));
    assert!(e.is_leaving());
    w.run();
    w.check();
    assert!(w.oracle().fence().current().is_some_and(|r| r.members.is_empty() || r.epoch == 1));
}

#[test]
fn a_check_dispatched_after_its_slot_reports_how_late_it_left_and_a_busy_one_is_skipped_not_queued() {
    let mut w = World::new();
    w.add_engine("a", 1);
    w.submit("a", cmd("c1", "web", CommandKind::Put { def: def(10) }));
    w.advance(Duration::from_secs(25));
    // On time: the checks at 0 s, 10 s and 20 s left at their slots.
    let l = &w.engines["a"].counters.check_start_lateness;
    assert_eq!((l.count, l.buckets[0], l.max_ms), (3, 3, 0));
    // The engine's loop is held 350 ms past the 30 s slot (a pause shorter than the ttl): the check leaves
    // 350 ms late and lands in the (200, 500] ms bucket.
    w.paused.push("a".into());
    w.advance(Duration::from_millis(5_350));
    w.paused.clear();
    w.advance(Duration::ZERO);
    let l = w.engines["a"].counters.check_start_lateness.clone();
    let bucket = LATENESS_BOUNDS_MS.iter().position(|b| *b == 500).unwrap();
    assert_eq!((l.count, l.buckets[bucket], l.max_ms, l.sum_ms), (4, 1, 350, 350));
    // The next slot is on the grid again, not 350 ms after the late one.
    let before = w.dispatched.len();
    w.advance(Duration::from_millis(9_650));
    assert_eq!(w.dispatched.len(), before + 1);
    assert_eq!(w.engines["a"].counters.check_start_lateness.max_ms, 350);
    // Workers that never answer, on an object checked every second: its check stays in flight until its
    // deadline (timeout 1 s + grace 2 s), and the slots meanwhile are skipped and counted, never queued.
    w.hold_results = true;
    w.submit("a", cmd("c2", "fast", CommandKind::Put { def: def(1) }));
    let (skipped, dispatched) =
        (w.engines["a"].counters.checks_skipped_busy, w.engines["a"].counters.checks_dispatched);
    w.advance(Duration::from_millis(9_500));
    let c = &w.engines["a"].counters;
    // fast's checks at 0, 3, 6 and 9 s (each once the previous one's deadline passed); 1, 2, 4, 5, 7 and 8 s
    // skipped.
    assert_eq!((c.checks_dispatched - dispatched, c.checks_skipped_busy - skipped), (4, 6));
}

#[test]
fn batching_waits_for_a_full_batch_or_the_linger_once_a_quarter_batch_falls_due_in_it() {
    let b = CheckBatching { linger: Duration::from_millis(50), batch: 3 };
    let at = |due: &[u64]| b.dispatch_at(due.iter().map(|t| Time(*t)));
    assert_eq!(at(&[]), None);
    assert_eq!(at(&[100]), Some(Time(150)), "alone: after the linger (a batch of 3 has a quarter of 1)");
    assert_eq!(at(&[100, 120]), Some(Time(150)));
    assert_eq!(at(&[100, 120, 130, 140]), Some(Time(130)), "the third due fills the batch");
    assert_eq!(at(&[100, 120, 170]), Some(Time(150)), "never past the linger");
    assert_eq!(at(&[100, 100, 100]), Some(Time(100)), "a full batch due at once leaves at once");
    // The shipped setting (a quarter batch is 32): below 32 due within the linger, a check waits a small part of
    // it, (n / 32)² of 50 ms.
    let shipped = |step: u64| {
        let due: Vec<Time> = (0..200).map(|i| Time(1_000 + i * step)).collect();
        CheckBatching::SHIPPED.dispatch_at(due.into_iter()).unwrap().0 - 1_000
    };
    assert_eq!(shipped(10), 1, "100 checks a second: 6 due within 50 ms, wait 1 ms");
    assert_eq!(shipped(2), 33, "500 a second: 26 due, wait 33 ms");
    assert_eq!(shipped(1), 50, "1,000 a second: 51 due, the whole linger as before");
    assert_eq!(shipped(0), 0, "a burst fills the batch at once");
    for none in
        [CheckBatching::NONE, CheckBatching { linger: Duration::ZERO, batch: 128 }, CheckBatching { batch: 1, ..b }]
    {
        assert_eq!(none.dispatch_at([Time(100), Time(170)].into_iter()), Some(Time(100)), "{none:?}: no batching");
    }
}

#[test]
fn checks_due_leave_together_once_a_batch_is_due_or_the_first_has_lingered() {
    let mut w = World::new();
    w.config = Some(|c| c.check_batching = CheckBatching { linger: Duration::from_millis(50), batch: 3 });
    w.add_engine("a", 1);
    let t0 = w.now;
    // Three objects put 10 ms apart, each checked at once: the third fills the batch, and all three leave
    // with it.
    for (i, id) in ["x", "y", "z"].into_iter().enumerate() {
        if i > 0 {
            w.advance(Duration::from_millis(10));
        }
        w.submit("a", cmd(&format!("c{i}"), id, CommandKind::Put { def: def(10) }));
    }
    w.advance(Duration::ZERO);
    let sent = |w: &World| -> Vec<(String, u64)> {
        w.dispatched.iter().map(|(_, work, t)| (work.object.to_string(), t.0 - t0.0)).collect()
    };
    assert_eq!(sent(&w), [("x".into(), 20), ("y".into(), 20), ("z".into(), 20)]);
    // One object alone waits out the linger.
    w.advance(Duration::from_millis(980));
    w.submit("a", cmd("c3", "w", CommandKind::Put { def: def(10) }));
    w.advance(Duration::from_millis(100));
    assert_eq!(sent(&w)[3..], [("w".into(), 1_050)]);
    // Their next slots (10 s after each put) leave the same way, and the lateness says how long each waited.
    w.advance(Duration::from_secs(10));
    assert_eq!(sent(&w)[4..], [("x".into(), 10_020), ("y".into(), 10_020), ("z".into(), 10_020), ("w".into(), 11_050)]);
    let l = &w.engines["a"].counters.check_start_lateness;
    assert_eq!((l.count, l.sum_ms, l.max_ms), (8, 20 + 10 + 50 + 20 + 10 + 50, 50));
}

#[test]
fn a_leaving_engine_is_done_once_what_it_had_in_flight_is_answered_or_at_its_leave_deadline() {
    // Two engines in the record; commands for b's objects are forwarded. Each case leaves with one forward out.
    let engine_with_a_forward_out = || {
        let mut e = engine_a_in_epoch_one_with_b(1);
        let obj =
            (0..100).map(|i| format!("o{i}")).find(|o| e.reader().owner(&oid(o)).unwrap().id.as_str() == "b").unwrap();
        e.handle(Time(0), Input::Command { reply: ReplyTo(1), cmd: cmd("c", &obj, CommandKind::Delete) });
        let id = std::iter::from_fn(|| e.poll_output())
            .find_map(|o| if let Output::Forward { id, .. } = o { Some(id) } else { None })
            .expect("forwarded to b");
        e.handle(Time(10), Input::Life(Life::Leave));
        assert!(e.is_leaving() && !e.is_done(), "a forward is out: the caller waits for it");
        (e, id)
    };
    let deadline = Time(10) + EngineConfig::new(member("a", 1), TTL).leave_timeout();

    // Answered: done at once, and no leave timer is left armed.
    let (mut e, id) = engine_with_a_forward_out();
    assert_eq!(e.poll_timeout(), Some((deadline, Timer::LeaveDeadline)));
    e.handle(Time(20), Input::ForwardResult { id, result: Ok(Outcome::NotOwned) });
    assert!(e.is_done());
    assert_eq!(e.poll_timeout(), None);

    // Never answered (a driver that broke its contract): done at the deadline, not before.
    let (mut e, _) = engine_with_a_forward_out();
    e.handle_timeout(deadline - Duration::from_millis(1));
    assert!(!e.is_done());
    e.handle_timeout(deadline);
    assert!(e.is_done());

    // An engine that never started and is told to leave is done at once.
    let mut e = Engine::new(EngineConfig::new(member("a", 1), TTL));
    e.handle(Time(0), Input::Life(Life::Leave));
    assert!(e.is_done());
}
