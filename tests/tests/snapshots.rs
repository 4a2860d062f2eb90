//! Snapshots and compaction against the shipped binary on a real nats-server: readers that start from a snapshot
//! hold what readers of the whole log hold, and a retried write is still answered from the snapshot's record of
//! applied ids; a reader that falls behind a purge (cut off from NATS, or stopped in the middle of reading the
//! backlog) jumps to the latest snapshot instead of folding a log with a hole in it; a sink that lagged past the
//! retention says so (metric and log) and stores everything after the snapshot.
//!
//! Every process here stays the same process: a jump is not a restart.

use jaque_core::{Event, EventBody, LogEntry, MemberId, MemberRef, ObjectId, State, Time};
use jaque_tests::proxy::Proxy;
use jaque_tests::{poll, Jaque, Nats};
use serde_json::{json, Value};
use std::sync::Mutex;

/// One cluster at a time: the machine has two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn put_body(i: usize) -> Value {
    json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": format!("{}s", 3600 + i)})
}

/// A PUT with an idempotency key, answered 200.
fn put(ui: &Jaque, object: &str, key: &str, i: usize) -> Value {
    let body = put_body(i).to_string();
    let r = ui.request("PUT", &format!("/api/objects/{object}"), &[("Idempotency-Key", key)], Some(body.as_bytes()));
    assert_eq!(r.status, 200, "PUT {object}: {}", r.text());
    r.json()
}

fn action(ui: &Jaque, object: &str, what: &str) {
    let r = ui.request("POST", &format!("/api/objects/{object}/actions/{what}"), &[], None);
    assert_eq!(r.status, 200, "{what} {object}: {}", r.text());
}

fn objects(j: &Jaque) -> Value {
    j.get("/api/objects").json()
}

fn metric(j: &Jaque, name: &str) -> f64 {
    j.metric(name).unwrap_or(0.0)
}

fn engine_args<'a>(url: &'a str, id: &'a str, every: &'a str, retention: &'a str) -> Vec<&'a str> {
    vec![
        "-target",
        "engine,worker",
        "-queue",
        url,
        "-coordination",
        url,
        "-id",
        id,
        "-heartbeat-ttl",
        "3s",
        "-snapshot-every",
        every,
        "-log-retention",
        retention,
    ]
}

#[test]
fn readers_from_a_snapshot_hold_what_readers_of_the_whole_log_hold() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = Nats::start();
    let url = nats.url.as_str();
    // Snapshots every 25 entries; nothing is purged (the default retention is 7 days).
    let e1 = Jaque::start("e1", &engine_args(url, "e1", "25", "7d"));
    let ui1 = Jaque::start("ui1", &["-target", "ui", "-coordination", url]);
    e1.wait_ready();
    ui1.wait_ready();
    let mut first = Vec::new();
    for i in 0..40 {
        first.push(put(&ui1, &format!("o{i}"), &format!("put-o{i}"), i));
    }
    for i in 0..10 {
        action(&ui1, &format!("o{i}"), "pause");
    }
    poll("a snapshot written", || (metric(&e1, "jaque_snapshots_written_total") >= 1.0).then_some(()));
    assert_eq!(metric(&e1, "jaque_log_purges_total"), 0.0, "nothing is older than the retention");
    assert_eq!(metric(&ui1, "jaque_snapshot_loads_total"), 0.0, "ui1 read the log from its first position");

    // A ui started now begins at the latest snapshot and reads only the tail: the same objects, field by field.
    let ui2 = Jaque::start("ui2", &["-target", "ui", "-coordination", url]);
    ui2.wait_ready();
    assert_eq!(metric(&ui2, "jaque_snapshot_loads_total"), 1.0, "ui2 started from a snapshot");
    poll("ui2 to hold what ui1 holds", || (objects(&ui2) == objects(&ui1)).then_some(()));
    assert_eq!(objects(&ui1).as_array().map(Vec::len), Some(40));

    // The engine restarts (a clean leave, then a new incarnation): from the snapshot too.
    let mut e1 = e1;
    e1.proc.signal("TERM");
    e1.proc.wait_exit();
    let e1 = Jaque::start("e1-again", &engine_args(url, "e1", "25", "7d"));
    e1.wait_ready();
    assert_eq!(metric(&e1, "jaque_snapshot_loads_total"), 1.0, "the restarted engine started from a snapshot");
    // A write retried with a key applied before the snapshot is answered with its first outcome, not applied again.
    for i in [0, 17, 39] {
        let again = put(&ui1, &format!("o{i}"), &format!("put-o{i}"), i);
        assert_eq!(again, first[i], "a retried write answered from the restarted engine's snapshot");
    }
    assert_eq!(metric(&e1, "jaque_engine_commands_applied_total"), 0.0, "nothing applied twice");
    // And new writes go on, seen alike by both readers.
    put(&ui1, "o40", "put-o40", 40);
    poll("both uis to agree after the restart", || {
        let (a, b) = (objects(&ui1), objects(&ui2));
        (a == b && a.as_array().map(Vec::len) == Some(41)).then_some(())
    });
}

#[test]
fn readers_cut_off_while_the_log_is_compacted_jump_to_the_latest_snapshot() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = Nats::start();
    let url = nats.url.as_str();
    let proxy = Proxy::start(url.trim_start_matches("nats://").parse().unwrap());
    let purl = proxy.url();
    // Snapshots every 20 entries, and every event below a stored snapshot purged at once.
    let e1 = Jaque::start("e1", &engine_args(url, "e1", "20", "0s"));
    let ui1 = Jaque::start("ui1", &["-target", "ui", "-coordination", url]);
    let ui2 = Jaque::start("ui2", &["-target", "ui", "-coordination", &purl]);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let sink = Jaque::start(
        "sink",
        &["-target", "sink", "-coordination", &purl, "-sink-store", &store, "-heartbeat-ttl", "3s"],
    );
    for j in [&e1, &ui1, &ui2, &sink] {
        j.wait_ready();
    }
    for i in 0..10 {
        put(&ui1, &format!("o{i}"), &format!("put-o{i}"), i);
    }
    poll("the sink stored every put", || (metric(&sink, "jaque_sink_events_written_total") >= 10.0).then_some(()));
    poll("ui2 holds every object", || (objects(&ui2).as_array()?.len() == 10).then_some(()));
    let (ui2_pid, sink_pid) = (ui2.proc.pid(), sink.proc.pid());

    // Cut off, ui2 and the sink read nothing while every object changes and the log is compacted past them.
    proxy.cut();
    let purged_before = metric(&e1, "jaque_log_purged_below");
    for round in 0..4 {
        for i in 0..10 {
            action(&ui1, &format!("o{i}"), if round % 2 == 0 { "pause" } else { "resume" });
        }
    }
    poll("the log compacted past what ui2 and the sink read", || {
        (metric(&e1, "jaque_log_purged_below") > purged_before + 30.0).then_some(())
    });
    proxy.heal();

    // Both find the hole, load the latest snapshot, jump to it and follow on: the same processes.
    poll("ui2 to jump to a snapshot", || (metric(&ui2, "jaque_snapshot_loads_total") >= 1.0).then_some(()));
    poll("ui2 to hold what ui1 holds", || (objects(&ui2) == objects(&ui1)).then_some(()));
    ui2.wait_ready();
    poll("the sink to say it lost history", || (metric(&sink, "jaque_sink_history_lost_total") >= 1.0).then_some(()));
    assert!(
        sink.proc.output.text().contains("were purged from the log before this sink handled them"),
        "the sink says so in its log:\n{}",
        sink.proc.output.text()
    );
    sink.wait_ready();
    assert_eq!((ui2.proc.pid(), sink.proc.pid()), (ui2_pid, sink_pid));
    // What comes after the snapshot is stored again.
    let written = metric(&sink, "jaque_sink_events_written_total");
    action(&ui1, "o3", "pause");
    poll("the sink stores a write after the jump", || {
        (metric(&sink, "jaque_sink_events_written_total") > written).then_some(())
    });
}

/// Appends `n` events straight to the log stream (no engine involved): decodable, but written by nobody who
/// owns anything, so every reader reads and discards them alike. A long history without a long test.
fn append_history(nats_url: &str, n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(nats_url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let writer = MemberRef { id: MemberId::new("history").unwrap(), incarnation: 1 };
        let mut acks = Vec::new();
        for i in 0..n {
            let event = Event {
                object: ObjectId::new(format!("h{}", i % 1000)).unwrap(),
                epoch: 1,
                writer: writer.clone(),
                at: Time(1),
                command_id: None,
                body: EventBody::transition(State::Ok, State::Critical, "x".repeat(200)),
            };
            let payload = jaque_core::wire::encode(&LogEntry::Event(event));
            acks.push(js.publish("jaque.log.event", payload.into()).await.expect("publish"));
            if acks.len() == 1000 {
                for a in acks.drain(..) {
                    a.await.expect("ack");
                }
            }
        }
        for a in acks {
            a.await.expect("ack");
        }
    });
}

#[test]
fn a_reader_stopped_in_the_middle_of_its_backlog_while_the_log_is_compacted_jumps_to_a_snapshot() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = Nats::start();
    let url = nats.url.as_str();
    // No snapshot until 40,000 entries; then everything below it is purged.
    let e1 = Jaque::start("e1", &engine_args(url, "e1", "40000", "0s"));
    let ui1 = Jaque::start("ui1", &["-target", "ui", "-coordination", url]);
    e1.wait_ready();
    ui1.wait_ready();
    for i in 0..5 {
        put(&ui1, &format!("o{i}"), &format!("put-o{i}"), i);
    }
    append_history(url, 30_000);
    poll("the engine read the history", || (metric(&e1, "jaque_engine_log_position") >= 30_000.0).then_some(()));

    // A new reader starts on the 30,000-entry backlog and is stopped part way through it. The ordered consumer
    // cannot tell the purge that follows: the stream positions it delivers jump.
    let ui2 = Jaque::start("ui2", &["-target", "ui", "-coordination", url]);
    // Asked without pause between requests: reading 30,000 entries takes a while, one request a millisecond.
    let started = std::time::Instant::now();
    let at = loop {
        match ui2.metric("jaque_ui_log_position") {
            Some(p) if p > 0.0 => break p,
            _ => assert!(started.elapsed() < jaque_tests::DEADLINE, "ui2 never started reading"),
        }
    };
    ui2.proc.signal("STOP");
    assert!(at < 30_000.0, "ui2 read its whole backlog before it was stopped (at {at}): no hole to find");
    append_history(url, 10_100);
    poll("a snapshot past 40,000 and the log purged below it", || {
        (metric(&e1, "jaque_log_purged_below") >= 40_000.0).then_some(())
    });
    ui2.proc.signal("CONT");
    poll("ui2 to jump to the snapshot", || (metric(&ui2, "jaque_snapshot_loads_total") >= 1.0).then_some(()));
    ui2.wait_ready();
    put(&ui1, "o5", "put-o5", 5);
    poll("ui2 to hold what ui1 holds", || {
        let (a, b) = (objects(&ui1), objects(&ui2));
        (a == b && a.as_array().map(Vec::len) == Some(6)).then_some(())
    });
    assert_eq!(
        metric(&ui2, "jaque_ui_stale_events_total"),
        metric(&ui1, "jaque_ui_stale_events_total"),
        "both readers discarded the same events"
    );
}
