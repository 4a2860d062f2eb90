//! The NATS permissions of `deploy/nats/permissions.conf` (documented in docs/nats-permissions.md), one user per
//! role, on a real nats-server: with exactly them, two engines, a worker, a ui, a sink and a notifier work together
//! and the server
//! refuses nothing; a ui user that may not publish on ingress gets its writes answered 503 within the write
//! timeout, the server's refusal named in the reason; a ui user without the JetStream permissions is refused at
//! start with a message naming the refused subject and where the permissions are documented.

use jaque_tests::webhook::Receiver;
use jaque_tests::{jaque_refuses, poll, Jaque, Nats};
use serde_json::json;
use std::path::Path;

/// The shipped permissions with two extra users for the refusals: a ui without ingress and a ui without the
/// JetStream API.
fn server() -> (Nats, tempfile::TempDir) {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/nats/permissions.conf");
    let text = std::fs::read_to_string(&shipped).expect("deploy/nats/permissions.conf");
    let end = text.rfind("  ]\n}").expect("the users list ends the file");
    let extra = r#"    {
      user: ui-no-ingress, password: "x"
      permissions: {
        publish: {
          allow: [
            "$JS.API.INFO",
            "$JS.API.STREAM.INFO.JAQUE_LOG", "$JS.API.STREAM.INFO.KV_jaque_membership",
            "$JS.API.CONSUMER.CREATE.JAQUE_LOG", "$JS.API.CONSUMER.CREATE.JAQUE_LOG.>",
            "$JS.API.CONSUMER.CREATE.KV_jaque_membership", "$JS.API.CONSUMER.CREATE.KV_jaque_membership.>",
            "$JS.FC.>",
            "$JS.API.STREAM.INFO.OBJ_jaque_snapshots",
            "$JS.API.CONSUMER.CREATE.OBJ_jaque_snapshots", "$JS.API.CONSUMER.CREATE.OBJ_jaque_snapshots.>",
            "$JS.API.CONSUMER.DELETE.OBJ_jaque_snapshots.>",
            "$JS.API.DIRECT.GET.OBJ_jaque_snapshots.>", "$JS.API.STREAM.MSG.GET.OBJ_jaque_snapshots",
          ]
        }
        subscribe: { allow: ["_INBOX.>"] }
      }
    },
    {
      user: ui-no-jetstream, password: "x"
      permissions: { publish: { allow: ["jaque.work.cmd.ingress"] }, subscribe: { allow: ["_INBOX.>"] } }
    },
"#;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("server.conf");
    std::fs::write(&conf, format!("{}{extra}{}", &text[..end], &text[end..])).unwrap();
    (Nats::start_with(&["-c", conf.to_str().unwrap()]), dir)
}

fn user<'a>(args: &[&'a str], name: &'a str, password: &'a str) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend_from_slice(&["-nats-user", name, "-nats-password", password, "-heartbeat-ttl", "3s"]);
    v
}

#[test]
fn each_role_works_with_exactly_its_permissions_and_a_missing_one_is_named() {
    let (nats, _dir) = server();
    let url = nats.url.as_str();
    let engine = |id: &'static str| {
        // Snapshots every few entries, and the log compacted right below them: the engines' writes and purges
        // and the readers' loads of snapshots need their permissions too.
        let args = [
            "-target",
            "engine",
            "-queue",
            url,
            "-coordination",
            url,
            "-id",
            id,
            "-snapshot-every",
            "10",
            "-log-retention",
            "0s",
        ];
        Jaque::start(id, &user(&args, "jaque-engine", "change-me-engine"))
    };
    let (e1, e2) = (engine("e1"), engine("e2"));
    let worker =
        Jaque::start("worker", &user(&["-target", "worker", "-queue", url], "jaque-worker", "change-me-worker"));
    let ui = Jaque::start("ui", &user(&["-target", "ui", "-coordination", url], "jaque-ui", "change-me-ui"));
    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", store_dir.path().join("sink.db").display());
    let sink = Jaque::start(
        "sink",
        &user(&["-target", "sink", "-coordination", url, "-sink-store", &store], "jaque-sink", "change-me-sink"),
    );
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    let notifier = Jaque::start(
        "notifier",
        &user(
            &["-target", "notifier", "-coordination", url, "-notify-webhook", &hook],
            "jaque-notifier",
            "change-me-notifier",
        ),
    );
    for j in [&e1, &e2, &worker, &ui, &sink, &notifier] {
        j.wait_ready();
    }
    poll("an epoch of both engines", || {
        let members = ui.get("/api/cluster").json()["buckets"][0]["epoch_members"].as_array()?.len();
        (members == 2).then_some(())
    });
    // Writes through ingress, forwarded once between the engines, checked by the worker.
    for i in 0..8 {
        let r = ui.put(
            &format!("/api/objects/o{i}"),
            &json!({"probe": {"type": "tcp", "addr": url.trim_start_matches("nats://")}, "interval": "1s"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    poll("every object checked ok", || {
        let list = ui.get("/api/objects").json();
        let all = list.as_array()?;
        (all.len() == 8 && all.iter().all(|o| o["state"] == "ok")).then_some(())
    });
    // The sink stored the events, the notifier sent the transitions (pending -> ok, one per object).
    poll("the sink wrote every put and transition", || {
        (sink.metric("jaque_sink_events_written_total")? >= 16.0).then_some(())
    });
    poll("the notifier delivered every transition", || (rx.delivery_count("/hook") >= 8).then_some(()));
    // One engine wrote snapshots and compacted the log; a ui started now begins from the latest snapshot.
    poll("a snapshot written and the log compacted", || {
        let written = e1.metric("jaque_snapshots_written_total")? + e2.metric("jaque_snapshots_written_total")?;
        let purges = e1.metric("jaque_log_purges_total")? + e2.metric("jaque_log_purges_total")?;
        (written >= 1.0 && purges >= 1.0).then_some(())
    });
    let ui2 = Jaque::start("ui2", &user(&["-target", "ui", "-coordination", url], "jaque-ui", "change-me-ui"));
    ui2.wait_ready();
    assert_eq!(ui2.metric("jaque_snapshot_loads_total"), Some(1.0), "the new ui started from a snapshot");
    poll("the new ui lists every object", || (ui2.get("/api/objects").json().as_array()?.len() == 8).then_some(()));
    assert!(
        !nats.proc.output.text().contains("Violation"),
        "the server refused something:\n{}",
        nats.proc.output.text()
    );

    // A ui that may not publish on ingress: its write is answered, 503, naming what the server refused.
    let bad = Jaque::start("ui-no-ingress", &user(&["-target", "ui", "-coordination", url], "ui-no-ingress", "x"));
    bad.wait_ready();
    let r = bad.request("POST", "/api/objects/o1/actions/check", &[], None);
    assert_eq!(r.status, 503, "{}", r.text());
    let reason = r.json()["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains("Permissions Violation") && reason.contains("jaque.work.cmd.ingress"),
        "the 503 says what the server refused: {reason}"
    );
    assert!(reason.contains("docs/nats-permissions.md"), "and where to look: {reason}");

    // A ui without the JetStream API cannot follow the log: refused at start, saying why.
    let text = jaque_refuses(&user(
        &["-target", "ui", "-coordination", url, "-listen", "127.0.0.1:0"],
        "ui-no-jetstream",
        "x",
    ));
    assert!(text.contains("Permissions Violation") && text.contains("$JS.API"), "names the refused subject: {text}");
    assert!(text.contains("docs/nats-permissions.md"), "{text}");
}
