//! The cluster format against real processes (docs/upgrading.md): a member of an older build in the membership
//! bucket holds the cluster at its format, so a command of the newer format is refused with the reason; once it
//! is gone the engines record the newer format and the command is applied; `-hold-format` holds the cluster
//! where it is; an entry of a format the cluster has not reached is passed over by every reader alike.

use jaque_core::format::{CLUSTER_FORMAT, OLDEST_CLUSTER_FORMAT};
use jaque_tests::{poll, Jaque, Nats};
use serde_json::{json, Value};

fn cluster_format(ui: &Jaque) -> Value {
    ui.get("/api/cluster").json()["cluster_format"].clone()
}

fn active(ui: &Jaque) -> u64 {
    cluster_format(ui)["active"].as_u64().expect("an active format")
}

/// An object whose tcp probe is refused (critical), acknowledged.
fn acknowledged_problem(ui: &Jaque, id: &str) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let def = json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1s", "timeout": "500ms"});
    assert_eq!(ui.put(&format!("/api/objects/{id}"), &def).status, 200);
    poll("the object turns critical", || {
        (ui.get(&format!("/api/objects/{id}")).json()["state"] == "critical").then_some(())
    });
    let r = ui.request("POST", &format!("/api/objects/{id}/actions/ack"), &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
}

fn unack(ui: &Jaque, id: &str) -> (u16, Value) {
    let r = ui.request("POST", &format!("/api/objects/{id}/actions/unack"), &[], None);
    (r.status, r.json())
}

fn acked(ui: &Jaque, id: &str) -> bool {
    ui.get(&format!("/api/objects/{id}")).json()["acknowledged"].as_bool().expect("acknowledged")
}

/// Writes a member key the way a build before v0.1.0 does (no `format` in its value), or deletes it.
fn older_member(nats: &Nats, key: &str, up: bool) {
    member_of_format(nats, key, up, None);
}

/// A member key as a build of cluster format `format` writes it (`None`: a build before v0.1.0, which names none).
fn member_of_format(nats: &Nats, key: &str, up: bool, format: Option<u32>) {
    let value = match format {
        Some(f) => format!(r#"{{"incarnation":1,"format":{f}}}"#),
        None => r#"{"incarnation":1}"#.to_string(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(&nats.url).await.expect("connects to nats");
        let kv = async_nats::jetstream::new(client).get_key_value("jaque_membership").await.expect("the bucket");
        if up {
            kv.put(key, value.into_bytes().into()).await.expect("the key is written");
        } else {
            kv.delete(key).await.expect("the key is deleted");
        }
    });
}

#[test]
fn a_member_of_an_older_build_holds_the_cluster_at_its_format_until_it_is_gone() {
    let nats = Nats::start();
    let (q, c) = (nats.url.clone(), nats.url.clone());
    let args = ["-target", "engine,worker,ui", "-queue", &q, "-coordination", &c, "-heartbeat-ttl", "3s"];
    let mut engine = Jaque::start("e1", &[&args[..], &["-id", "e1"]].concat());
    engine.wait_ready();
    poll("the cluster at this build's format", || (active(&engine) == u64::from(CLUSTER_FORMAT)).then_some(()));
    acknowledged_problem(&engine, "web");
    // A sink of an older build joins. It is live (its key is there): it would not read an unack, so none is
    // written from now on.
    older_member(&nats, "sink/membership/old", true);
    poll("the older sink counted", || (cluster_format(&engine)["lowest_live"] == 1).then_some(()));
    assert_eq!(engine.get("/api/cluster").json()["buckets"][1]["formats"]["old"], 1);
    // The cluster's active format never goes down (a member that joined late cannot be served a lower one):
    // the record stays at this build's format.
    assert_eq!(active(&engine), u64::from(CLUSTER_FORMAT));
    let (status, _) = unack(&engine, "web");
    assert_eq!(status, 200, "the cluster was at format 2 before the older sink came: it stays there");
    assert!(!acked(&engine, "web"));
    older_member(&nats, "sink/membership/old", false);
    engine.proc.signal("TERM");
    engine.proc.wait_exit();
}

#[test]
fn a_cluster_started_with_an_older_member_moves_to_the_new_format_only_once_it_is_gone() {
    let nats = Nats::start();
    // The older sink is there first: the cluster forms at its format.
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
    ui.wait_ready();
    older_member(&nats, "sink/membership/old", true);
    poll("the older sink seen", || (cluster_format(&ui)["lowest_live"] == 1).then_some(()));
    let (q, c) = (nats.url.clone(), nats.url.clone());
    let args = ["-target", "engine,worker", "-queue", &q, "-coordination", &c, "-heartbeat-ttl", "3s"];
    let mut engine = Jaque::start("e1", &[&args[..], &["-id", "e1"]].concat());
    engine.wait_ready();
    poll("an epoch", || (ui.get("/api/cluster").json()["buckets"][0]["epoch"].as_u64() >= Some(1)).then_some(()));
    assert_eq!(active(&ui), u64::from(OLDEST_CLUSTER_FORMAT), "an older member is live: the cluster stays at 1");
    acknowledged_problem(&ui, "db");
    let (status, body) = unack(&ui, "db");
    assert_eq!(status, 400, "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("needs cluster format 2") && reason.contains("docs/upgrading.md"), "{reason}");
    assert!(acked(&ui, "db"), "nothing was written");
    // The older sink is replaced (its key goes): the engine records format 2 with the same members.
    let epoch = ui.get("/api/cluster").json()["buckets"][0]["epoch"].as_u64().unwrap();
    older_member(&nats, "sink/membership/old", false);
    poll("the cluster moves to format 2", || (active(&ui) == u64::from(CLUSTER_FORMAT)).then_some(()));
    assert_eq!(ui.get("/api/cluster").json()["buckets"][0]["epoch"].as_u64(), Some(epoch + 1), "one new record");
    let (status, body) = unack(&ui, "db");
    assert_eq!(status, 200, "{body}");
    assert!(!acked(&ui, "db"));
    engine.proc.signal("TERM");
    engine.proc.wait_exit();
}

#[test]
fn an_engine_held_at_format_1_keeps_the_cluster_there() {
    let j = Jaque::start(
        "jaque",
        &["-target", "engine,worker,ui", "-queue", "memory", "-hold-format", "1", "-heartbeat-ttl", "3s"],
    );
    j.wait_ready();
    assert_eq!(cluster_format(&j), json!({"active": 1, "lowest_live": CLUSTER_FORMAT, "this_build": CLUSTER_FORMAT}));
    acknowledged_problem(&j, "web");
    let (status, body) = unack(&j, "web");
    assert_eq!(status, 400, "{body}");
    assert!(acked(&j, "web"));
}

/// Cluster format 3 (alert semantics): while a notifier of v0.1.0 (format 2) is live, a put naming the new
/// fields is refused, saying why, and every change is hard at once; once it is gone, the same put is applied
/// and a blip is a soft state.
#[test]
fn alerting_fields_wait_for_every_member_to_speak_format_3() {
    let nats = Nats::start();
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
    ui.wait_ready();
    member_of_format(&nats, "notifier/membership/old", true, Some(2));
    poll("the older notifier seen", || (cluster_format(&ui)["lowest_live"] == 2).then_some(()));
    let (q, c) = (nats.url.clone(), nats.url.clone());
    let args = ["-target", "engine,worker", "-queue", &q, "-coordination", &c, "-heartbeat-ttl", "3s"];
    let mut engine = Jaque::start("e1", &[&args[..], &["-id", "e1"]].concat());
    engine.wait_ready();
    poll("an epoch", || (ui.get("/api/cluster").json()["buckets"][0]["epoch"].as_u64() >= Some(1)).then_some(()));
    assert_eq!(active(&ui), 2, "a member of format 2 is live: the cluster stays at 2");
    let labelled = json!({
        "probe": {"type": "tcp", "addr": "127.0.0.1:9"},
        "interval": "1h",
        "labels": {"env": "prod"},
        "max_attempts": 2,
    });
    let r = ui.put("/api/objects/db", &labelled);
    assert_eq!(r.status, 400, "{}", r.text());
    let reason = r.json()["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("needs cluster format 3") && reason.contains("docs/upgrading.md"), "{reason}");
    member_of_format(&nats, "notifier/membership/old", false, Some(2));
    poll("the cluster moves to format 3", || (active(&ui) == u64::from(CLUSTER_FORMAT)).then_some(()));
    let r = ui.put("/api/objects/db", &labelled);
    assert_eq!(r.status, 200, "{}", r.text());
    let db = poll("db read with its labels", || {
        let o = ui.get("/api/objects/db").json();
        (o["definition"]["labels"]["env"] == "prod").then_some(o)
    });
    assert_eq!(db["definition"]["max_attempts"], 2, "{db}");
    engine.proc.signal("TERM");
    engine.proc.wait_exit();
}
