//! NATS mode: a real nats-server, three engine processes, a worker and a ui, all separate processes.
//! A ui sends writes through ingress (the default) or, with `-ui-writes owner`, straight to their owner;
//! commands on ingress go to whichever engine claims them and are forwarded once to the owner.

use jaque_core::{wire, Command, CommandId, CommandKind, ObjectId, Outcome};
use jaque_tests::{poll, Jaque, Nats, Target};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// An engine that also serves the ui API, so a write can be sent to one engine directly.
fn engine(nats: &Nats, id: &str) -> Jaque {
    Jaque::start(
        id,
        &["-target", "engine,ui", "-queue", &nats.url, "-coordination", &nats.url, "-id", id, "-heartbeat-ttl", "3s"],
    )
}

fn engine_bucket(ui: &Jaque) -> Value {
    ui.get("/api/cluster").json()["buckets"][0].clone()
}

fn ids(members: &Value) -> BTreeSet<String> {
    members.as_array().into_iter().flatten().filter_map(|m| m["id"].as_str().map(String::from)).collect()
}

fn forwarded_sent(engines: &[Jaque]) -> f64 {
    engines.iter().map(|e| e.metric("jaque_engine_commands_forwarded_total{outcome=\"sent\"}").unwrap_or(0.0)).sum()
}

#[test]
fn three_engines_share_objects_forward_writes_and_check() {
    let nats = Nats::start();
    let mut ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url, "-ui-writes", "owner"]);
    ui.wait_ready();

    // No engine yet: the ui knows no owner, and on ingress nobody claims the write.
    let r = ui.put("/api/objects/early", &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}}));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["outcome"], "unavailable");
    assert!(r.header("retry-after").is_some());
    assert_eq!(ui.metric("jaque_ui_writes_total{via=\"ingress\"}"), Some(1.0));

    let mut engines: Vec<Jaque> = ["e1", "e2", "e3"].iter().map(|id| engine(&nats, id)).collect();
    let mut worker = Jaque::start("worker", &["-target", "worker", "-queue", &nats.url]);
    for e in &engines {
        e.wait_ready();
    }
    worker.wait_ready();
    let all: BTreeSet<String> = ["e1", "e2", "e3"].map(String::from).into();
    poll("an epoch with all three engines", || (ids(&engine_bucket(&ui)["epoch_members"]) == all).then_some(()));
    for e in &engines {
        poll("every engine in the epoch", || {
            (e.metric("jaque_engine_epoch") == engine_bucket(&ui)["epoch"].as_f64()).then_some(())
        });
    }

    // Writes through the ui go straight to the owner the ui's log view names: none is forwarded.
    let mut target = Target::start();
    let mut objects = Vec::new();
    for i in 0..30 {
        let id = format!("obj-{i}");
        let r = ui.put(
            &format!("/api/objects/{id}"),
            &json!({"probe": {"type": "http", "url": target.url()}, "interval": "1s", "timeout": "500ms"}),
        );
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.json()["outcome"], "applied");
        objects.push(id);
    }
    assert_eq!(ui.metric("jaque_ui_writes_total{via=\"owner\"}"), Some(30.0));
    assert_eq!(forwarded_sent(&engines), 0.0, "a write sent to its owner needs no forward");

    // A ui with the default -ui-writes submits every write through ingress, as the page says, owner known or not.
    let ui2 = Jaque::start("ui2", &["-target", "ui", "-coordination", &nats.url]);
    ui2.wait_ready();
    poll("ui2 reads the objects", || (ui2.get("/api/objects").json().as_array()?.len() == 30).then_some(()));
    for o in &objects[..6] {
        let r = ui2.request("POST", &format!("/api/objects/{o}/actions/check"), &[], None);
        assert_eq!(r.status, 200, "{o}: {}", r.text());
    }
    assert_eq!(ui2.metric("jaque_ui_writes_total{via=\"ingress\"}"), Some(6.0));
    assert_eq!(ui2.metric("jaque_ui_writes_total{via=\"owner\"}"), Some(0.0));
    drop(ui2);

    // Commands on jaque.work.cmd.ingress, until one has provably been forwarded: the claiming engine (any of
    // the queue group) was not the owner, forwarded once, and the owner applied it.
    let url = nats.url.clone();
    let ingress_writes = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let client = async_nats::connect(&url).await.unwrap();
        let mut n = 0;
        while n < 60 && (n < 5 || forwarded_sent(&engines) < 1.0) {
            let cmd = Command {
                id: CommandId::new(format!("ingress-{n}")).unwrap(),
                object: ObjectId::new(format!("obj-{}", n % 30)).unwrap(),
                kind: CommandKind::Ack,
                hop: 0,
            };
            let msg = client.request("jaque.work.cmd.ingress", wire::encode(&cmd).into()).await.unwrap();
            assert!(matches!(wire::decode_outcome(&msg.payload), Ok(Outcome::Applied { .. })), "{msg:?}");
            n += 1;
        }
        n
    });
    assert!(
        forwarded_sent(&engines) >= 1.0,
        "no command was forwarded in {ingress_writes} on ingress over three engines"
    );
    assert_eq!(engines.iter().map(|e| e.metric("jaque_engine_not_owned_total").unwrap_or(-1.0)).sum::<f64>(), 0.0);

    // Every object is owned by exactly one engine, in the ui's view and in the engines' own.
    let n = objects.len() as f64;
    poll("every object owned once", || {
        let b = engine_bucket(&ui);
        let per_owner: f64 = b["objects_per_owner"].as_object()?.values().filter_map(Value::as_f64).sum();
        let owned: f64 = engines.iter().filter_map(|e| e.metric("jaque_engine_objects_owned")).sum();
        (b["objects"].as_f64() == Some(n) && b["objects_unowned"] == 0 && per_owner == n && owned == n).then_some(())
    });
    let list = ui.get("/api/objects").json();
    for o in list.as_array().unwrap() {
        assert!(all.contains(o["owner"].as_str().unwrap_or_default()), "{o}");
    }

    // A retried write with an Idempotency-Key is applied once, whichever engine claims each try.
    let key = [("Idempotency-Key", "pause-obj-0")];
    let tries: Vec<Value> = (0..5)
        .map(|_| {
            let r = ui.request("POST", "/api/objects/obj-0/actions/pause", &key, None);
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()
        })
        .collect();
    assert!(tries.iter().all(|t| *t == tries[0]), "every retry reports the one application: {tries:?}");
    let r = ui.request("POST", "/api/objects/obj-0/actions/resume", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());

    // A write sent to e1 directly for an object e2 owns is forwarded by e1 and applied by e2.
    let list = ui.get("/api/objects").json();
    let theirs = list.as_array().unwrap().iter().find(|o| o["owner"] == "e2").expect("e2 owns some object");
    let id = theirs["id"].as_str().unwrap();
    let sent_before = engines[0].metric("jaque_engine_commands_forwarded_total{outcome=\"sent\"}").unwrap();
    let r = engines[0].request("POST", &format!("/api/objects/{id}/actions/check"), &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["owner"], "e2");
    let sent_after = engines[0].metric("jaque_engine_commands_forwarded_total{outcome=\"sent\"}").unwrap();
    assert_eq!(sent_after, sent_before + 1.0);

    // The checks run on the worker: ok, then critical once the server is gone.
    poll("every object ok", || {
        let list = ui.get("/api/objects").json();
        list.as_array()?.iter().all(|o| o["state"] == "ok").then_some(())
    });
    target.stop();
    poll("every object critical", || {
        let list = ui.get("/api/objects").json();
        list.as_array()?.iter().all(|o| o["state"] == "critical").then_some(())
    });

    // The compare-and-set on the log let exactly one proposal win per epoch, though all three proposed.
    let epoch = engine_bucket(&ui)["epoch"].as_f64().unwrap();
    let won: f64 = engines.iter().filter_map(|e| e.metric("jaque_engine_epochs_won_total")).sum();
    assert_eq!(won, epoch, "one winning proposal per epoch");

    // SIGTERM: e3 deletes its key on the way out and the others take its objects over.
    let mut e3 = engines.pop().unwrap();
    e3.proc.signal("TERM");
    assert!(e3.proc.wait_exit().success());
    let two: BTreeSet<String> = ["e1", "e2"].map(String::from).into();
    poll("the epoch without e3", || (ids(&engine_bucket(&ui)["epoch_members"]) == two).then_some(()));
    poll("e3's objects moved to e1 and e2", || {
        let owned: f64 = engines.iter().filter_map(|e| e.metric("jaque_engine_objects_owned")).sum();
        (owned == n).then_some(())
    });

    // The worker and the ui stop cleanly too.
    for p in [&mut worker.proc, &mut ui.proc] {
        p.signal("TERM");
        assert!(p.wait_exit().success(), "{} exits cleanly on SIGTERM", p.name);
    }
}

#[test]
fn a_restarted_engine_reads_the_log_back_and_owns_its_objects_again() {
    let nats = Nats::start();
    let args = [
        "-target",
        "engine,worker,ui",
        "-queue",
        &nats.url,
        "-coordination",
        &nats.url,
        "-id",
        "solo",
        "-heartbeat-ttl",
        "2s",
    ];
    let mut first = Jaque::start("solo", &args);
    first.wait_ready();
    for id in ["a", "b", "c"] {
        let r = first.put(
            &format!("/api/objects/{id}"),
            &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let before = first.get("/api/cluster").json()["buckets"][0].clone();
    first.proc.signal("TERM");
    assert!(first.proc.wait_exit().success());

    let second = Jaque::start("solo again", &args);
    second.wait_ready();
    let after = poll("a new epoch with the new incarnation", || {
        let b = second.get("/api/cluster").json()["buckets"][0].clone();
        (b["epoch"].as_u64() > before["epoch"].as_u64() && b["epoch_members"] != before["epoch_members"]).then_some(b)
    });
    assert_eq!(ids(&after["epoch_members"]), ["solo".to_string()].into());
    assert_eq!(after["objects"], 3);
    assert_eq!(after["objects_per_owner"]["solo"], 3);
    poll("all three owned again", || (second.metric("jaque_engine_objects_owned") == Some(3.0)).then_some(()));
}
