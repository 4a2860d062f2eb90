//! The sink role against real processes: every accepted event of the log in the store exactly once (SQLite in
//! one process; PostgreSQL behind two sinks on nats-server, with a sink killed mid-stream and the database
//! restarted), rows the database refuses counted while the sink goes on, the history API, and TLS to
//! PostgreSQL. The store is read back here with a client of the test's own, and the log from JetStream, folded
//! by `jaque_core::LogReader`: independent of the sink.

use jaque_tests::checker::{object_body, read_log, CountingTarget, Flapper};
use jaque_tests::pki::Pki;
use jaque_tests::sink_store::{expected_from, read_store, store_matches};
use jaque_tests::{jaque_refuses, poll, Jaque, Nats, Postgres};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The PostgreSQL tests run one at a time, so the machine's two cores are not shared by several clusters.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn put_objects(ui: &Jaque, target: &CountingTarget, n: usize) -> Vec<String> {
    let objects: Vec<String> = (0..n).map(|i| format!("obj-{i}")).collect();
    for o in &objects {
        let body = object_body(&target.url(), o);
        poll(&format!("{o} created"), || (ui.put(&format!("/api/objects/{o}"), &body).status == 200).then_some(()));
    }
    objects
}

fn metric(j: &Jaque, name: &str) -> f64 {
    j.metric(name).unwrap_or_else(|| panic!("{} has no {name}", j.proc.name))
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("sink.db").display())
}

#[test]
fn one_process_with_sqlite_stores_every_event_once_and_objects_at_their_last_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(&dir);
    let args = ["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store];
    let j = Jaque::start("jaque", &args);
    j.wait_ready();
    assert_eq!(metric(&j, "jaque_membership_live_members{bucket=\"sink/membership/\"}"), 1.0);
    let sinks = &j.get("/api/cluster").json()["buckets"][1];
    assert_eq!(sinks["bucket"], "sink/membership/");
    assert_eq!(sinks["live_members"].as_array().map(Vec::len), Some(1), "{sinks}");

    let target = Arc::new(CountingTarget::start());
    let objects = put_objects(&j, &target, 8);
    let mut flapper = Flapper::start(target.clone(), Duration::from_millis(400));
    poll("transitions written by the sink", || (metric(&j, "jaque_sink_events_written_total") > 60.0).then_some(()));
    flapper.stop();

    // Quiet: the target answers 200, so after one more check each object makes no more events.
    let (position, stored) = poll("the store to hold every event of the log, and the log to be quiet", || {
        let before = j.get("/api/cluster").json()["log_position"].as_u64()?;
        let stored = read_store(&store).ok()?;
        let after = j.get("/api/cluster").json()["log_position"].as_u64()?;
        let list = j.get("/api/objects").json();
        let all_ok = list.as_array()?.iter().all(|o| o["state"] == "ok");
        (before == after && all_ok && stored.events.keys().next_back() == Some(&before)).then_some((before, stored))
    });
    // One engine: one epoch record, at position 1, and every other position an accepted event.
    assert_eq!(metric(&j, "jaque_engine_epoch"), 1.0);
    assert_eq!(metric(&j, "jaque_engine_stale_epoch_total"), 0.0);
    let seqs: Vec<u64> = stored.events.keys().copied().collect();
    assert_eq!(seqs, (2..=position).collect::<Vec<_>>(), "every event once, none missing");
    let transitions = stored.events.values().filter(|r| r.kind == "transition").count();
    assert_eq!(transitions as f64, metric(&j, "jaque_engine_transitions_written_total"));
    assert_eq!(metric(&j, "jaque_sink_lag_events"), 0.0);
    assert_eq!(metric(&j, "jaque_sink_objects_owned"), objects.len() as f64);

    // Per object, the transitions chain (each from where the last one went) and the object row is the log's.
    let list = j.get("/api/objects").json();
    for o in list.as_array().unwrap() {
        let id = o["id"].as_str().unwrap();
        let mut state = "pending".to_string();
        let mut last = 0;
        for (seq, r) in stored.events.iter().filter(|(_, r)| r.object == id) {
            last = *seq;
            if r.kind == "transition" {
                assert_eq!(r.from_state.as_deref(), Some(state.as_str()), "{id} at {seq}");
                state = r.to_state.clone().unwrap();
            }
        }
        assert_eq!(state, o["state"].as_str().unwrap(), "{id}");
        let (row_state, row_last, deleted) = stored.objects[id].clone();
        assert_eq!(row_state.as_deref(), o["state"].as_str(), "{id}");
        assert_eq!(row_last, last, "{id}: the object row is at its last event");
        assert!(!deleted);
    }
}

/// A sink process on NATS with a PostgreSQL store.
fn sink(nats: &Nats, store: &str, id: &str) -> Jaque {
    Jaque::start(
        id,
        &["-target", "sink", "-coordination", &nats.url, "-sink-store", store, "-id", id, "-heartbeat-ttl", "2s"],
    )
}

fn owned(sinks: &[&Jaque]) -> f64 {
    sinks.iter().map(|s| s.metric("jaque_sink_objects_owned").unwrap_or(0.0)).sum()
}

#[test]
fn two_sinks_on_postgres_store_every_accepted_event_once_through_a_kill_and_a_database_restart() {
    let _one = one_at_a_time();
    let nats = Nats::start();
    let mut pg = Postgres::start();
    let store = pg.url();
    let engines: Vec<Jaque> = ["e1", "e2", "e3"]
        .iter()
        .map(|id| {
            let args = ["-target", "engine,ui", "-queue", &nats.url, "-coordination", &nats.url, "-id", id];
            Jaque::start(id, &[&args[..], &["-heartbeat-ttl", "3s"]].concat())
        })
        .collect();
    let worker = Jaque::start("worker", &["-target", "worker", "-queue", &nats.url]);
    let mut s1 = sink(&nats, &store, "s1");
    let s2 = sink(&nats, &store, "s2");
    for j in engines.iter().chain([&worker, &s1, &s2]) {
        j.wait_ready();
    }
    let ui = &engines[0];
    poll("an epoch with three engines", || (metric(ui, "jaque_engine_epoch") >= 1.0).then_some(()));
    poll("both sinks live", || {
        (metric(ui, "jaque_membership_live_members{bucket=\"sink/membership/\"}") == 2.0).then_some(())
    });
    let live = ui.get("/api/cluster").json()["buckets"][1]["live_members"].clone();
    let ids: Vec<&str> = live.as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["s1", "s2"], "/api/cluster lists the live sinks");

    let target = Arc::new(CountingTarget::start());
    let objects = put_objects(ui, &target, 24);
    let n = objects.len() as f64;
    let mut flapper = Flapper::start(target.clone(), Duration::from_millis(350));
    poll("both sinks own objects and write", || {
        let both = [&s1, &s2].iter().all(|s| metric(s, "jaque_sink_events_written_total") > 20.0);
        (both && owned(&[&s1, &s2]) == n).then_some(())
    });

    // kill -9 one sink mid-stream: the other takes its objects once its key expires, and resumes them from
    // what the store holds.
    s1.proc.signal("KILL");
    s1.proc.wait_exit();
    poll("s2 owns every object", || (metric(&s2, "jaque_sink_objects_owned") == n).then_some(()));
    let written = metric(&s2, "jaque_sink_events_written_total");
    poll("s2 writes on", || (metric(&s2, "jaque_sink_events_written_total") > written + 20.0).then_some(()));
    let mut s1 = sink(&nats, &store, "s1");
    s1.wait_ready();
    poll("the objects shared again", || {
        (metric(&s1, "jaque_sink_objects_owned") > 0.0 && owned(&[&s1, &s2]) == n).then_some(())
    });

    // PostgreSQL restarts under both: they retry, say why they are not ready meanwhile, and go on.
    pg.stop();
    poll("a sink to say the store is away", || {
        let h = s2.get("/healthz");
        (h.status == 503 && h.json()["status"].as_str()?.starts_with("sink: store unavailable")).then_some(())
    });
    poll("the lag to grow while the store is away", || (metric(&s2, "jaque_sink_lag_events") > 0.0).then_some(()));
    pg.start_again();
    let rows = read_store(&store).unwrap().events.len();
    for s in [&s1, &s2] {
        s.wait_ready();
    }
    poll("rows written after the restart", || (read_store(&store).ok()?.events.len() > rows + 20).then_some(()));
    assert!(metric(&s2, "jaque_sink_store_errors_total") >= 1.0);

    // A clean leave: s1 deletes its key and writes what it holds; s2 takes its objects at once (no ttl wait).
    s1.proc.signal("TERM");
    assert!(s1.proc.wait_exit().success(), "s1 exits cleanly on SIGTERM");
    assert!(s1.proc.output.text().contains("leaving the sink bucket"));
    poll("s2 owns every object after s1 left", || (metric(&s2, "jaque_sink_objects_owned") == n).then_some(()));
    let written = metric(&s2, "jaque_sink_events_written_total");
    poll("s2 writes on alone", || (metric(&s2, "jaque_sink_events_written_total") > written + 20.0).then_some(()));
    flapper.stop();

    // Quiet: the store holds exactly the accepted events of the log, read from JetStream by the test.
    let last = poll("the store to hold every accepted event of the log", || {
        let log = read_log(&nats.url);
        let want = expected_from(&log);
        let stored = read_store(&store).ok()?;
        (metric(&s2, "jaque_sink_lag_events") == 0.0 && store_matches(&stored, &want).is_ok()).then_some((want, stored))
    });
    let (want, stored) = last;
    eprintln!(
        "sink test: {} accepted events in the store once each ({} fenced, not stored)",
        want.events.len(),
        want.stale
    );
    assert!(want.events.len() > 100, "transitions flowed: {} events", want.events.len());
    assert_eq!(stored.events.len(), want.events.len(), "none twice, none missing");
    for s in [&s1, &s2] {
        assert!(!s.proc.output.text().contains(pg.password()), "{} logged the password", s.proc.name);
    }
    let progress = pg.psql("SELECT sink FROM sink_progress ORDER BY sink");
    assert_eq!(progress, "s1\ns2");
    drop(worker);
}

#[test]
fn rows_the_database_refuses_are_degraded_or_skipped_and_counted_and_the_sink_goes_on() {
    let _one = one_at_a_time();
    let pg = Postgres::start();
    let plugins = tempfile::tempdir().unwrap();
    let plugin = plugins.path().join("refuse");
    std::fs::write(&plugin, "#!/bin/sh\necho \"REFUSE me\"; exit 2\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&plugin).status().unwrap();
    let dir = plugins.path().to_str().unwrap();
    let store = pg.url();
    let args = ["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store, "-plugin-dir", dir];
    let mut j = Jaque::start("jaque", &args);
    j.wait_ready();
    // The sink made the schema; now the database refuses some rows, as a stricter column would.
    pg.psql("ALTER TABLE events ADD CONSTRAINT no_refuse CHECK (output NOT LIKE '%REFUSE%')");
    pg.psql("ALTER TABLE events ADD CONSTRAINT no_doomed CHECK (object <> 'doomed')");

    let tcp = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"});
    let exec = json!({"probe": {"type": "exec", "plugin": "refuse"}, "interval": "1h"});
    for (id, body) in [("bad", &exec), ("doomed", &tcp), ("good", &tcp)] {
        let r = j.put(&format!("/api/objects/{id}"), body);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
    poll("every object checked, and its events through the sink", || {
        let list = j.get("/api/objects").json();
        let checked = list.as_array()?.iter().all(|o| o["state"] == "critical");
        let rows = pg.psql("SELECT count(*) FROM events WHERE object IN ('bad', 'good')");
        let doomed = pg.psql("SELECT state FROM objects WHERE object = 'doomed'");
        (checked && rows == "4" && doomed == "critical" && metric(&j, "jaque_sink_lag_events") == 0.0).then_some(())
    });
    // The refused transition went in with its output emptied; doomed's rows not at all, but its object row did.
    assert_eq!(pg.psql("SELECT type, output FROM events WHERE object = 'bad' ORDER BY seq"), "put|\ntransition|");
    assert_eq!(pg.psql("SELECT count(*) FROM events WHERE object = 'doomed'"), "0");
    assert_eq!(pg.psql("SELECT state FROM objects WHERE object = 'doomed'"), "critical");
    assert_eq!(pg.psql("SELECT type FROM events WHERE object = 'good' ORDER BY seq"), "put\ntransition");
    assert!(metric(&j, "jaque_sink_rows_degraded_total") >= 1.0);
    assert_eq!(metric(&j, "jaque_sink_rows_skipped_total"), 2.0, "doomed's put and transition");
    assert!(metric(&j, "jaque_sink_store_errors_total") >= 3.0);
    // Not stalled: later events are written as they come.
    let r = j.request("POST", "/api/objects/good/actions/pause", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    poll("the pause in the store", || {
        (pg.psql("SELECT count(*) FROM events WHERE object = 'good' AND type = 'pause'") == "1").then_some(())
    });
    assert_eq!(j.get("/healthz").status, 200);

    // A store written by a newer jaque is refused with a clear error, not written over.
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());
    pg.psql("UPDATE jaque_schema SET version = 99");
    let out = jaque_refuses(&[&args[..], &["-listen", "127.0.0.1:0"]].concat());
    assert!(out.contains("schema version 99, newer than this build"), "{out}");
    assert!(!out.contains(pg.password()), "{out}");
}

#[test]
fn the_history_api_pages_newest_first_and_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(&dir);
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store]);
    j.wait_ready();
    let r = j.put("/api/objects/h", &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}));
    assert_eq!(r.status, 200, "{}", r.text());
    // Its first check, before any pause could hold it back.
    poll("h checked", || (j.get("/api/objects/h").json()["state"] == "critical").then_some(()));
    for i in 0..6 {
        let action = if i % 2 == 0 { "pause" } else { "resume" };
        let r = j.request("POST", &format!("/api/objects/h/actions/{action}"), &[], None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // put, the first check's transition, three pauses, three resumes.
    let all = poll("every event of h in the history", || {
        let page = j.get("/api/objects/h/history?limit=1000").json();
        let events = page["events"].as_array()?.clone();
        (events.len() == 8).then_some(events)
    });
    let seqs: Vec<u64> = all.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "newest first: {seqs:?}");
    assert_eq!(all.last().unwrap()["type"], "put");
    assert_eq!(all.last().unwrap()["definition"]["probe"]["type"], "tcp");
    assert_eq!(all[0]["type"], "resume");

    // Pages of three, following `next`, give the same events in the same order.
    let mut paged: Vec<Value> = Vec::new();
    let mut path = "/api/objects/h/history?limit=3".to_string();
    loop {
        let r = j.get(&path);
        assert_eq!(r.status, 200, "{}", r.text());
        let page = r.json();
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 3);
        paged.extend(events.iter().cloned());
        match page["next"].as_u64() {
            Some(next) => path = format!("/api/objects/h/history?limit=3&before={next}"),
            None => break,
        }
    }
    assert_eq!(paged, all);

    // since (inclusive) and until (exclusive) on the events' timestamps.
    let at = |i: usize| all[i]["at"].as_str().unwrap().to_string();
    let since = j.get(&format!("/api/objects/h/history?since={}", at(2))).json();
    assert!(since["events"].as_array().unwrap().iter().all(|e| e["at"].as_str().unwrap() >= at(2).as_str()));
    assert!(since["events"].as_array().unwrap().len() >= 3);
    let until = j.get(&format!("/api/objects/h/history?until={}", at(7))).json();
    assert_eq!(until["events"], json!([]), "nothing before the first event");
    let none = j.get("/api/objects/nobody/history").json();
    assert_eq!(none["events"], json!([]));

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "before=0",
        "before=-3",
        "since=yesterday",
        "until=2025-13-01T00:00:00Z",
        "since=2025-02-01T00:00:00Z&until=2025-01-01T00:00:00Z",
        "colour=blue",
    ] {
        let r = j.get(&format!("/api/objects/h/history?{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["reason"].as_str().is_some_and(|s| !s.is_empty()), "{bad}: {}", r.text());
    }
    assert_eq!(j.get("/api/objects/a%20b/history").status, 400);

    // A ui with no store answers 404 and says what to configure.
    let plain = Jaque::start("no store", &["-target", "engine,worker,ui", "-queue", "memory"]);
    plain.wait_ready();
    let r = plain.get("/api/objects/h/history");
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("-sink-store"), "{}", r.text());
}

#[test]
fn a_sink_reaches_postgres_over_tls_with_verify_full_and_not_without_it() {
    let _one = one_at_a_time();
    let pki = Pki::new("jaque test CA");
    let (cert, key) = pki.issue("pg", "127.0.0.1");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    let pg = Postgres::start_tls_only(&read(&cert), &read(&key));
    let ca = pki.path("ca.pem");
    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), ca.display());
    let j = Jaque::start("tls", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &verified]);
    j.wait_ready();
    let r = j.put("/api/objects/t", &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}));
    assert_eq!(r.status, 200, "{}", r.text());
    poll("t's events in the store over TLS", || {
        (pg.psql("SELECT count(*) FROM events WHERE object = 't'") == "2").then_some(())
    });

    // Without TLS the server refuses; with a CA that did not sign its certificate, the sink refuses. Either way
    // the sink is not ready and says why, without the password.
    let other = Pki::new("another CA");
    for (url, what) in [
        (format!("{}?sslmode=disable", pg.url()), "no TLS"),
        (format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), other.path("ca.pem").display()), "wrong CA"),
    ] {
        let j = Jaque::start(what, &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &url]);
        let status = poll(&format!("{what}: the sink to say why it is not ready"), || {
            let h = j.get("/healthz");
            let status = h.json()["status"].as_str().unwrap_or_default().to_string();
            (h.status == 503 && status.starts_with("sink: store unavailable")).then_some(status)
        });
        assert!(!status.contains(pg.password()), "{status}");
        assert!(status.contains("jaque:***@"), "the store named with its password redacted: {status}");
    }
}
