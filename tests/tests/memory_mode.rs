//! One process, `-target engine,worker,ui -queue memory`: the whole product with no server at all.

use jaque_tests::{poll, Jaque, Target};
use serde_json::{json, Value};

fn single() -> Jaque {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    j
}

fn state_of(j: &Jaque, id: &str) -> Value {
    let r = j.get(&format!("/api/objects/{id}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn wait_state(j: &Jaque, id: &str, want: &str) -> Value {
    poll(&format!("{id} to be {want}"), || Some(state_of(j, id)).filter(|o| o["state"] == want))
}

#[test]
fn an_http_check_turns_ok_and_critical_when_its_server_stops() {
    let j = single();
    let mut target = Target::start();
    let r = j.put(
        "/api/objects/web",
        &json!({"probe": {"type": "http", "url": target.url()}, "interval": "1s", "timeout": "500ms"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let applied = r.json();
    assert_eq!(applied["outcome"], "applied");
    assert!(applied["command_id"].is_string() && applied["owner"].is_string() && applied["epoch"].as_u64() >= Some(1));

    let o = wait_state(&j, "web", "ok");
    assert_eq!(o["owner"], applied["owner"]);
    assert_eq!(o["definition"]["interval"], "1s");
    assert_eq!(o["last_transition"]["to"], "ok");
    target.stop();
    let o = wait_state(&j, "web", "critical");
    assert_eq!(o["last_transition"]["from"], "ok");
}

#[test]
fn tcp_and_exec_probes_report_nagios_states() {
    let plugins = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = plugins.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&p).status().unwrap();
    };
    write("warn", "echo \"WARNING - $1\"; exit 1");
    write("slow", "sleep 30");
    let dir = plugins.path().to_str().unwrap();
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory", "-plugin-dir", dir]);
    j.wait_ready();
    let target = Target::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: refuses

    let defs = [
        ("tcp-up", json!({"type": "tcp", "addr": target.addr.to_string()}), "ok"),
        ("tcp-down", json!({"type": "tcp", "addr": closed.to_string()}), "critical"),
        ("exec-warn", json!({"type": "exec", "plugin": "warn", "args": ["disk 91%"]}), "warning"),
        ("exec-slow", json!({"type": "exec", "plugin": "slow"}), "critical"),
        ("exec-missing", json!({"type": "exec", "plugin": "nope"}), "unknown"),
        ("http-expect-204", json!({"type": "http", "url": target.url(), "expect_status": 204}), "critical"),
        ("http-expect-200", json!({"type": "http", "url": target.url(), "expect_status": 200}), "ok"),
    ];
    for (id, probe, _) in &defs {
        let r = j.put(&format!("/api/objects/{id}"), &json!({"probe": probe, "interval": "1s", "timeout": "300ms"}));
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
    for (id, _, want) in &defs {
        wait_state(&j, id, want);
    }
    assert_eq!(state_of(&j, "exec-warn")["last_transition"]["output"], "WARNING - disk 91%");
    let slow = state_of(&j, "exec-slow")["last_transition"]["output"].as_str().unwrap().to_string();
    assert!(slow.contains("timed out"), "{slow}");
}

#[test]
fn writes_answer_with_their_outcome_and_bad_input_with_400() {
    let j = single();
    let def = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1m", "timeout": "1s"});

    // 400: a body, id or duration that cannot be right.
    for (path, body) in [
        ("/api/objects/a", "{".to_string()),
        ("/api/objects/a", json!({"probe": {"type": "smtp"}}).to_string()),
        ("/api/objects/a", json!({"probe": {"type": "tcp", "addr": "x"}}).to_string()),
        ("/api/objects/a", json!({"probe": {"type": "tcp", "addr": "h:1"}, "interval": "often"}).to_string()),
        ("/api/objects/a%20b", def.to_string()),
    ] {
        let r = j.request("PUT", path, &[], Some(body.as_bytes()));
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        assert!(r.json()["reason"].is_string());
    }
    let r = j.request("POST", "/api/objects/a/actions/dance", &[], None);
    assert_eq!(r.status, 400, "{}", r.text());

    // 404: an action on nothing.
    let r = j.request("POST", "/api/objects/ghost/actions/pause", &[], None);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(j.get("/api/objects/ghost").status, 404);

    // Idempotency-Key: applied once however often it is retried.
    let key = [("Idempotency-Key", "put-db-1")];
    let first = j.request("PUT", "/api/objects/db", &key, Some(def.to_string().as_bytes()));
    assert_eq!(first.status, 200, "{}", first.text());
    let applied = j.metric("jaque_engine_commands_applied_total");
    let again = j.request("PUT", "/api/objects/db", &key, Some(def.to_string().as_bytes()));
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(first.json(), again.json(), "a retry reports the first application");
    assert_eq!(j.metric("jaque_engine_commands_applied_total"), applied, "a retry applies nothing");
    assert_eq!(j.metric("jaque_engine_commands_duplicate_total"), Some(1.0), "the retry is known as one");

    for action in ["pause", "resume", "check", "ack"] {
        let r = j.request("POST", &format!("/api/objects/db/actions/{action}"), &[], None);
        assert_eq!(r.status, 200, "{action}: {}", r.text());
        assert_eq!(r.json()["outcome"], "applied");
    }
    let r = j.request("POST", "/api/objects/db/actions/pause", &[], None);
    assert_eq!(r.status, 200);
    assert_eq!(state_of(&j, "db")["paused"], true);

    let list = j.get("/api/objects").json();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let cluster = j.get("/api/cluster").json();
    let engines = &cluster["buckets"][0];
    assert_eq!(engines["bucket"], "membership/");
    assert_eq!(engines["live_members"].as_array().map(Vec::len), Some(1));
    assert_eq!(engines["objects"], 1);

    let r = j.request("DELETE", "/api/objects/db", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(j.get("/api/objects/db").status, 404);
}

#[test]
fn a_write_token_guards_writes_but_not_reads() {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory", "-write-token", "s3cret"]);
    j.wait_ready();
    let body = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}}).to_string();
    let r = j.request("PUT", "/api/objects/a", &[], Some(body.as_bytes()));
    assert_eq!(r.status, 401, "{}", r.text());
    let r = j.request("PUT", "/api/objects/a", &[("Authorization", "Bearer nope")], Some(body.as_bytes()));
    assert_eq!(r.status, 401);
    let r = j.request("PUT", "/api/objects/a", &[("Authorization", "Bearer s3cret")], Some(body.as_bytes()));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(j.get("/api/objects/a").status, 200);
}

#[test]
fn a_ui_without_engine_or_nats_coordination_answers_every_write_with_503() {
    let j = Jaque::start("ui", &["-target", "ui"]);
    j.wait_ready();
    let body = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}}).to_string();
    for (method, path, body) in [
        ("PUT", "/api/objects/a", Some(body.as_bytes())),
        ("PUT", "/api/objects/a", Some(&b"not json"[..])),
        ("DELETE", "/api/objects/a", None),
        ("POST", "/api/objects/a/actions/check", None),
    ] {
        let r = j.request(method, path, &[], body);
        assert_eq!(r.status, 503, "{method} {path}: {}", r.text());
        assert_eq!(r.json()["outcome"], "unavailable");
        assert!(r.header("retry-after").is_some(), "503 carries Retry-After");
    }
    assert_eq!(j.get("/api/objects").json(), json!([]));
}

#[test]
fn metrics_use_the_page_names_and_sigterm_exits_cleanly() {
    let mut j = single();
    for sample in [
        "jaque_engine_stale_epoch_total",
        "jaque_engine_commands_forwarded_total{outcome=\"sent\"}",
        "jaque_engine_commands_forwarded_total{outcome=\"error\"}",
        "jaque_engine_not_owned_total",
        "jaque_engine_objects_owned",
        "jaque_membership_live_members{bucket=\"membership/\"}",
    ] {
        assert!(j.metric(sample).is_some(), "missing {sample}");
    }
    assert_eq!(j.metric("jaque_engine_epoch"), Some(1.0));
    assert_eq!(j.metric("jaque_membership_live_members{bucket=\"membership/\"}"), Some(1.0));
    j.proc.signal("TERM");
    let status = j.proc.wait_exit();
    assert!(status.success(), "exit after SIGTERM: {status}");
    assert!(j.proc.output.text().contains("leaving the engine bucket"));
}

#[test]
fn sigint_leaves_the_membership_like_sigterm() {
    let mut j = single();
    j.proc.signal("INT");
    let status = j.proc.wait_exit();
    assert!(status.success(), "exit after SIGINT: {status}");
    assert!(j.proc.output.text().contains("leaving the engine bucket"));
}
