//! Resync instead of exit (issue 11, point 6): nats-server killed (SIGKILL: no goodbye to any client, every
//! ephemeral consumer gone) for longer than the ordered consumers' idle heartbeat (async-nats: 5 s) and than the
//! members' ttl, then started again on the same port and store. Every jaque process — two engines, a worker, a
//! ui, a sink and a notifier — keeps running with the same PID; the readers answer `/healthz` 503 "resyncing: …"
//! while the server is away and 200 once their followers are made again; every object has an owner again, and a
//! write made afterwards is applied, stored by the sink and delivered by the notifier.

use jaque_tests::webhook::Receiver;
use jaque_tests::{poll, Jaque, Nats, Target};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long the server stays down: past the ordered consumers' 5 s idle heartbeat and the 3 s ttl, so the
/// consumers are surely gone and every member key expires while nobody watches.
const AWAY: Duration = Duration::from_secs(10);
const OBJECTS: [&str; 6] = ["o1", "o2", "o3", "o4", "o5", "o6"];

fn body(target: &Target) -> Value {
    json!({"probe": {"type": "http", "url": target.url()}, "interval": "1s", "timeout": "800ms"})
}

/// Puts an object through the ui, retrying what is not applied yet (503 while no engine takes ingress).
fn put(ui: &Jaque, id: &str, target: &Target) {
    let key = format!("put-{id}");
    let b = body(target).to_string();
    poll(&format!("{id} applied through the ui"), || {
        let r = ui.request("PUT", &format!("/api/objects/{id}"), &[("Idempotency-Key", &key)], Some(b.as_bytes()));
        (r.status == 200).then_some(())
    });
}

/// Object id -> (owner, state), as the ui reads the log.
fn objects(ui: &Jaque) -> BTreeMap<String, (String, String)> {
    let list = ui.get("/api/objects").json();
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let owner = o["owner"].as_str()?.to_string();
            Some((o["id"].as_str()?.to_string(), (owner, o["state"].as_str()?.to_string())))
        })
        .collect()
}

/// Waits until every one of `ids` is ok and owned by one of the engines, as the ui reads the log.
fn wait_owned_and_ok(ui: &Jaque, ids: &[&str], what: &str) {
    poll(what, || {
        let all = objects(ui);
        ids.iter()
            .all(|id| {
                all.get(*id).is_some_and(|(owner, state)| ["e1", "e2"].contains(&owner.as_str()) && state == "ok")
            })
            .then_some(())
    });
}

fn live(ui: &Jaque, bucket: &str) -> BTreeSet<String> {
    let cluster = ui.get("/api/cluster").json();
    let b = cluster["buckets"].as_array().into_iter().flatten().find(|b| b["bucket"] == bucket).cloned();
    b.map(|b| {
        b["live_members"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(String::from)).collect()
    })
    .unwrap_or_default()
}

/// The seqs of the object's events the sink has stored, read through the ui's history API.
fn stored(ui: &Jaque, id: &str) -> Vec<u64> {
    let page = ui.get(&format!("/api/objects/{id}/history?limit=1000")).json();
    page["events"].as_array().into_iter().flatten().filter_map(|e| e["seq"].as_u64()).collect()
}

fn delivered(rx: &Receiver, id: &str) -> Vec<u64> {
    rx.deliveries("/hook").iter().filter(|d| d.body["object"] == id).filter_map(|d| d.body["seq"].as_u64()).collect()
}

#[test]
fn a_nats_server_away_past_the_consumers_heartbeat_is_survived_by_every_process_without_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let mut nats = Nats::start();
    let url = nats.url.clone();
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    let target = Target::start();

    let ttl = ["-heartbeat-ttl", "3s"];
    let engine = |id: &str| {
        Jaque::start(id, &[&["-target", "engine", "-queue", &url, "-coordination", &url, "-id", id][..], &ttl].concat())
    };
    let mut procs: Vec<Jaque> = vec![
        engine("e1"),
        engine("e2"),
        Jaque::start("worker", &["-target", "worker", "-queue", &url]),
        Jaque::start("ui", &[&["-target", "ui", "-coordination", &url, "-sink-store", &store][..], &ttl].concat()),
        Jaque::start(
            "sink",
            &[&["-target", "sink", "-coordination", &url, "-sink-store", &store, "-id", "s1"][..], &ttl].concat(),
        ),
        Jaque::start(
            "notifier",
            &[&["-target", "notifier", "-coordination", &url, "-notify-webhook", &hook, "-id", "n1"][..], &ttl]
                .concat(),
        ),
    ];
    for j in &procs {
        j.wait_ready();
    }
    let pids: Vec<u32> = procs.iter().map(|j| j.proc.pid()).collect();
    let readers = ["e1", "e2", "ui", "sink", "notifier"];
    let ui = &procs[3];

    poll("both engines in the epoch", || (live(ui, "membership/").len() == 2).then_some(()));
    for id in OBJECTS {
        put(ui, id, &target);
    }
    wait_owned_and_ok(ui, &OBJECTS, "every object owned and checked ok");
    for id in OBJECTS {
        poll(&format!("{id}'s events stored by the sink"), || (!stored(ui, id).is_empty()).then_some(()));
        poll(&format!("{id}'s transition delivered"), || (!delivered(&rx, id).is_empty()).then_some(()));
    }

    // Away: SIGKILL, so no client is told; the store on disk is kept for the start again.
    let stopped = Instant::now();
    nats.stop("KILL");
    let mut answered_503: BTreeMap<&str, String> = BTreeMap::new();
    poll("every reader answering 503 resyncing while the server is away", || {
        for j in procs.iter().filter(|j| readers.contains(&j.proc.name.as_str())) {
            let r = j.get("/healthz");
            let text = r.text();
            // Both the log follower and the membership watch are gone with the server.
            if r.status == 503
                && text.contains("resyncing: the log follower is being re-established from position")
                && text.contains("the membership watch is being re-established with a fresh snapshot")
            {
                answered_503.entry(readers.iter().find(|n| **n == j.proc.name).unwrap()).or_insert(text);
            }
        }
        (answered_503.len() == readers.len()).then_some(())
    });
    // The rest of the outage is the fault itself (its length is what this test is about), not a wait for an
    // event.
    std::thread::sleep(AWAY.saturating_sub(stopped.elapsed()));
    for j in procs.iter_mut() {
        assert!(j.proc.is_running(), "{} is still running while the server is away", j.proc.name);
    }
    nats.start_again();

    for j in &procs {
        j.wait_ready();
    }
    for (j, pid) in procs.iter_mut().zip(&pids) {
        assert!(j.proc.is_running(), "{} exited", j.proc.name);
        assert_eq!(j.proc.pid(), *pid, "{} is the same process", j.proc.name);
    }
    let ui = &procs[3];
    for name in readers {
        let j = procs.iter().find(|j| j.proc.name == name).unwrap();
        assert!(j.metric("jaque_follow_lost_total{follower=\"log\"}") >= Some(1.0), "{name} made its follower again");
        assert!(
            j.metric("jaque_follow_lost_total{follower=\"membership\"}") >= Some(1.0),
            "{name} made its watch again"
        );
    }
    // Every key expired while the server was away; every member is back, and so is every object's owner.
    poll("every member back in its bucket", || {
        (live(ui, "membership/") == BTreeSet::from(["e1".into(), "e2".into()])
            && live(ui, "sink/membership/") == BTreeSet::from(["s1".into()])
            && live(ui, "notifier/membership/") == BTreeSet::from(["n1".into()]))
        .then_some(())
    });
    poll("an epoch of both engines, every object owned", || {
        let cluster = ui.get("/api/cluster").json();
        let engines = &cluster["buckets"][0];
        let members: BTreeSet<&str> =
            engines["epoch_members"].as_array()?.iter().filter_map(|m| m["id"].as_str()).collect();
        (members == BTreeSet::from(["e1", "e2"]) && engines["objects_unowned"] == 0).then_some(())
    });
    wait_owned_and_ok(ui, &OBJECTS, "every object owned again");

    // A write after the outage: applied, stored, notified.
    put(ui, "after", &target);
    wait_owned_and_ok(ui, &["after"], "the new object owned and checked ok");
    let seq = ui.get("/api/objects/after").json()["last_transition"]["seq"].as_u64();
    let seq = seq.expect("the new object's transition has a log position");
    poll("the new object's transition stored by the sink", || stored(ui, "after").contains(&seq).then_some(()));
    poll("the new object's transition delivered", || delivered(&rx, "after").contains(&seq).then_some(()));
    for (j, pid) in procs.iter_mut().zip(&pids) {
        assert!(j.proc.is_running() && j.proc.pid() == *pid, "{} still the same running process", j.proc.name);
    }
}
