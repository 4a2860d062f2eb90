//! Snapshots and compaction, driven through the fault-free world (tests/common): who writes them and when, an
//! engine started from one, and an engine that finds a hole in the log (purged events) and jumps to one.

mod common;
use common::*;
use jaque_core::*;
use std::time::Duration;

fn every(n: u64) -> fn(&mut EngineConfig) {
    match n {
        5 => |c| {
            c.snapshots.every = 5;
            c.snapshots.retention = Duration::ZERO;
        },
        _ => |c| c.snapshots.every = 1_000_000,
    }
}

fn put(w: &mut World, at: &str, id: &str, object: &str) -> Outcome {
    let r = w.submit(at, cmd(id, object, CommandKind::Put { def: def(3600) }));
    w.outcome(r).clone()
}

/// One engine, "a", with `config`, that put objects `obj-0..n` (command ids `c0..`).
fn one_engine_with(config: fn(&mut EngineConfig), n: usize) -> World {
    let mut w = World::new();
    w.config = Some(config);
    w.add_engine("a", 1);
    for i in 0..n {
        put(&mut w, "a", &format!("c{i}"), &format!("obj-{i}"));
    }
    w
}

#[test]
fn exactly_one_engine_writes_snapshots_every_n_entries() {
    let mut w = World::new();
    w.config = Some(every(5));
    for id in ["a", "b", "c"] {
        w.add_engine(id, 1);
    }
    w.advance(Duration::from_millis(10));
    for i in 0..40 {
        put(&mut w, "a", &format!("c{i}"), &format!("obj-{i}"));
    }
    w.advance(Duration::from_millis(10));
    let writers: Vec<&str> =
        w.engines.iter().filter(|(_, e)| e.counters.snapshots_written > 0).map(|(id, _)| id.as_str()).collect();
    assert_eq!(writers.len(), 1, "one snapshot writer, got {writers:?}");
    let written = w.engines[writers[0]].counters.snapshots_written;
    let log_len = w.log.len() as u64;
    assert!(written >= log_len / 5 - 2, "{written} snapshots for {log_len} entries, one per 5 expected");
    // Each is the state of the log at its position: the oracle's, read that far.
    for (position, snapshot) in &w.snapshots {
        let mut r = LogReader::new();
        for (i, e) in w.log.iter().take(*position as usize).enumerate() {
            r.read(i as u64 + 1, e);
        }
        assert_eq!(&r.snapshot(), snapshot, "the snapshot at {position} is not the log's state there");
    }
}

#[test]
fn no_snapshot_is_written_before_the_count_or_the_interval() {
    let mut w = one_engine_with(every(1_000_000), 20);
    w.advance(Duration::from_secs(60));
    assert!(w.snapshots.is_empty(), "a snapshot before 5 minutes or 1,000,000 entries");
    // The interval (5 minutes by default) passes with the log moved: one snapshot.
    w.advance(Duration::from_secs(300));
    assert_eq!(w.snapshots.len(), 1);
    // And with the log still: none more.
    w.advance(Duration::from_secs(900));
    assert_eq!(w.snapshots.len(), 1, "a snapshot of a log that did not move");
}

#[test]
fn an_engine_started_from_a_snapshot_holds_what_an_engine_from_the_first_position_holds() {
    let mut w = one_engine_with(every(5), 23);
    assert!(!w.snapshots.is_empty());
    w.add_engine_from_snapshot("b", 1);
    w.advance(Duration::from_millis(10));
    let oracle = w.oracle();
    assert!(w.engines["b"].reader() == &oracle, "the engine from a snapshot differs from the whole log's reader");
    assert!(w.engines["a"].reader() == &oracle);
    // A command applied before the snapshot is answered from it, not applied twice.
    let again = put(&mut w, "b", "c3", "obj-3");
    assert!(matches!(again, Outcome::Applied { .. }), "{again:?}");
    assert_eq!(w.engines.values().map(|e| e.counters.commands_applied).sum::<u64>(), 23);
}

#[test]
fn a_snapshot_allows_a_purge_only_past_the_retention() {
    let mut w = one_engine_with(
        |c| {
            c.snapshots.every = 5;
            c.snapshots.retention = Duration::from_secs(3600);
        },
        10,
    );
    assert!(!w.snapshots.is_empty());
    // (A purge below the first event removes nothing: only epoch records stand there.)
    let first_event = w.log.iter().position(|e| matches!(e, LogEntry::Event(_))).unwrap() as u64 + 1;
    assert!(w.purges.iter().all(|b| *b <= first_event), "events within the retention purged: {:?}", w.purges);
    // Two hours of log time later, the first ten events are past the retention.
    w.advance(Duration::from_secs(7200));
    for i in 10..20 {
        put(&mut w, "a", &format!("c{i}"), &format!("obj-{i}"));
    }
    let below = *w.purges.last().expect("a purge once events are older than the retention");
    let first_new = w.log.iter().position(|e| matches!(e, LogEntry::Event(ev) if ev.object.as_str() == "obj-10"));
    assert!(below as usize <= first_new.unwrap() + 1, "a purge of events within the retention");
    assert!(below > 2, "nothing older purged");
}

#[test]
fn an_engine_past_a_hole_in_the_log_jumps_to_a_snapshot_and_serves_again() {
    let mut w = World::new();
    w.config = Some(every(5));
    w.add_engine("a", 1);
    w.add_engine("b", 1);
    w.advance(Duration::from_millis(10));
    // b stops reading (a long pause); a goes on writing, snapshotting and purging.
    w.paused.push("b".into());
    let objects_of_a: Vec<String> = {
        let r = w.oracle();
        let own = r.fence().current_ownership().unwrap();
        (0..1000)
            .map(|i| format!("obj-{i}"))
            .filter(|o| own.owner(&oid(o)).unwrap().id.as_str() == "a")
            .take(30)
            .collect()
    };
    for (i, o) in objects_of_a.iter().enumerate() {
        put(&mut w, "a", &format!("c{i}"), o);
    }
    assert!(w.purged_below > 2, "the log was compacted (purged below {})", w.purged_below);
    // b reads on: its next position is gone; it asks for a snapshot, jumps to it, and reads the tail.
    w.paused.clear();
    w.run();
    let b = &w.engines["b"];
    assert_eq!(b.counters.log_gaps, 1, "the hole was seen once");
    assert_eq!(b.counters.restores, 1);
    assert!(b.needs_snapshot().is_none() && b.is_ready());
    assert_eq!(b.reader().objects(), w.oracle().objects(), "state after the jump differs from the whole log's");
    // Its answers come from the restored record: a command applied in the hole is not applied again.
    let again = put(&mut w, "b", "c7", &objects_of_a[7]);
    assert!(matches!(again, Outcome::Applied { .. }), "{again:?}");
    assert_eq!(w.engines.values().map(|e| e.counters.commands_applied).sum::<u64>(), 30);
}

#[test]
fn a_hole_with_no_snapshot_reaching_past_it_leaves_the_engine_unready_until_one_does() {
    let mut w = one_engine_with(every(1_000_000), 5);
    // Someone purged events without a snapshot (an operator, a foreign tool).
    w.purged_below = 4;
    w.add_engine("b", 1);
    let b = &w.engines["b"];
    assert_eq!(b.needs_snapshot(), Some(3), "waits for a snapshot covering the hole");
    assert!(!b.is_ready());
    // It asks again at every heartbeat, and jumps once a snapshot covers the hole.
    w.engines.get_mut("a").unwrap();
    let mut s = LogReader::new();
    for (i, e) in w.log.iter().enumerate() {
        s.read(i as u64 + 1, e);
    }
    w.snapshots.insert(s.position(), s.snapshot());
    w.advance(TTL);
    let b = &w.engines["b"];
    assert!(b.needs_snapshot().is_none() && b.is_ready());
    assert_eq!(b.reader().objects(), w.oracle().objects());
}

#[test]
fn a_purge_keeps_the_last_entry_a_snapshot_covers_so_a_reader_behind_it_meets_the_hole_in_a_quiet_log() {
    let mut w = World::new();
    w.config = Some(every(5));
    w.add_engine("a", 1);
    w.add_engine("b", 1);
    w.advance(Duration::from_millis(10));
    w.paused.push("b".into());
    let objects_of_a: Vec<String> = {
        let own = w.oracle().fence().current_ownership().unwrap().clone();
        (0..1000).map(|i| format!("obj-{i}")).filter(|o| own.owner(&oid(o)).unwrap().id.as_str() == "a").collect()
    };
    // Until a snapshot stands at the log's last entry (retention zero: the purge its write allows is the widest).
    for (i, o) in objects_of_a.iter().enumerate() {
        put(&mut w, "a", &format!("c{i}"), o);
        if i >= 10 && w.snapshots.keys().next_back() == Some(&(w.log.len() as u64)) {
            break;
        }
    }
    assert!(w.purged_below > 2, "the log was compacted (purged below {})", w.purged_below);
    assert!(w.purged_below <= w.log.len() as u64, "the log's last entry was purged (below {})", w.purged_below);
    // Nothing more is written: b, behind the purge, still meets an entry past the hole, and jumps.
    w.paused.clear();
    w.run();
    let b = &w.engines["b"];
    assert_eq!(b.counters.restores, 1, "b never learned of the hole");
    assert_eq!(b.reader(), &w.oracle());
}

#[test]
fn a_snapshot_shares_the_readers_views_and_keeps_its_own_state_when_the_reader_changes_one() {
    let mut w = one_engine_with(every(1_000_000), 10);
    let upto = w.log.len();
    let mut r = w.oracle();
    let held = r.snapshot();
    let encoded = wire::encode_snapshot(&held);
    // Taken, a snapshot points at the reader's views instead of copying them.
    for (id, view) in &held.objects {
        assert!(std::sync::Arc::ptr_eq(view, &r.objects()[id]), "{id}: the snapshot copied its view");
    }
    // The reader goes on while the snapshot is held (as while it is encoded off the loop): a view it changes is
    // copied first, the others stay shared, and the snapshot still is the log's state at its position.
    let r1 = w.submit("a", cmd("p", "obj-3", CommandKind::Pause));
    assert!(matches!(w.outcome(r1), Outcome::Applied { .. }));
    for (i, e) in w.log.iter().enumerate().skip(upto) {
        r.read(i as u64 + 1, e);
    }
    assert!(r.objects()[&oid("obj-3")].paused);
    for (id, view) in &held.objects {
        assert!(!view.paused, "{id}: the held snapshot saw a later change");
        assert_eq!(std::sync::Arc::ptr_eq(view, &r.objects()[id]), id.as_str() != "obj-3", "{id}");
    }
    assert_eq!(wire::encode_snapshot(&held), encoded, "the held snapshot changed");
}

#[test]
fn a_snapshot_read_as_it_comes_is_the_one_decoded_whole_and_a_cut_one_is_refused() {
    let w = one_engine_with(every(1_000_000), 50);
    let r = w.oracle();
    let bytes = wire::encode_snapshot(&r.snapshot());
    let mut streamed = Vec::new();
    wire::write_snapshot(&r.snapshot(), &mut streamed).unwrap();
    assert_eq!(streamed, bytes, "written as it is made, a snapshot is the bytes encoded whole");
    let read = wire::read_snapshot(&bytes[..]).expect("a snapshot read as it comes");
    assert_eq!(read.snapshot(), wire::decode_snapshot(&bytes).unwrap().snapshot());
    assert_eq!(read.objects(), r.objects());
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        assert!(wire::read_snapshot(&bytes[..cut]).is_err(), "a snapshot cut at {cut} of {} was read", bytes.len());
    }
}
