//! The notification policy through the HTTP API (`GET /api/policy`, receivers, routes, windows, silences), on real
//! processes: what is written reads back in the API's own words; a write the policy's rules refuse is a 400 with the
//! reason and writes nothing to the log (its position, `/api/summary`'s `log_position`, does not move); a retried
//! `Idempotency-Key` is applied once; a cluster held at format 3 refuses policy writes; and on NATS a ui without an
//! engine writes through ingress, the write reaching the policy key's owner from the other engine.

use jaque_tests::{poll, Jaque, Nats, Response};
use serde_json::{json, Value};

fn one_process(name: &str, extra: &[&str]) -> Jaque {
    let mut args = vec!["-target", "engine,worker,ui", "-queue", "memory"];
    args.extend_from_slice(extra);
    let j = Jaque::start(name, &args);
    j.wait_ready();
    j
}

fn send(j: &Jaque, method: &str, path: &str, body: &Value) -> Response {
    j.request(method, path, &[], Some(body.to_string().as_bytes()))
}

fn send_with_key(j: &Jaque, method: &str, path: &str, key: &str, body: &Value) -> Response {
    j.request(method, path, &[("idempotency-key", key)], Some(body.to_string().as_bytes()))
}

fn delete(j: &Jaque, path: &str) -> Response {
    j.request("DELETE", path, &[], None)
}

fn applied(r: &Response) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["outcome"], "applied", "{v}");
    v
}

/// The log's position as the ui reads it.
fn position(j: &Jaque) -> u64 {
    j.get("/api/summary").json()["log_position"].as_u64().expect("a log position")
}

/// Asserts `r` is a 400 whose reason contains `want`, and that the log did not move from `before`.
fn refused(j: &Jaque, r: Response, want: &str, before: u64) {
    assert_eq!(r.status, 400, "{}", r.text());
    let reason = r.json()["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains(want), "reason {reason:?} does not say {want:?}");
    assert_eq!(position(j), before, "a refused write wrote nothing ({want})");
}

fn silence<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["silences"]
        .as_array()
        .expect("silences")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no silence {name} in {list}"))
}

#[test]
fn receivers_routes_silences_and_windows_are_written_and_read_back_in_the_apis_words() {
    let j = one_process("jaque", &[]);
    let hook = json!({"kind": "webhook", "url": "https://hooks.example.com/db", "secret": {"env": "DB_HOOK_SECRET"}});
    applied(&send(&j, "PUT", "/api/policy/receivers/db-team", &hook));
    let boss =
        json!({"kind": "webhook", "url": "https://hooks.example.com/boss", "secret": {"file": "/etc/jaque/boss"}});
    applied(&send(&j, "PUT", "/api/policy/receivers/boss", &boss));
    let routes = json!([
        {"selector": "team=db", "receivers": ["db-team"], "continue": true, "repeat_interval": "1h",
         "escalations": [{"after": "10m", "receivers": ["boss"]}, {"after": "1h 30m", "receivers": ["boss"]}]},
        {"selector": "", "receivers": ["boss"]},
    ]);
    applied(&send(&j, "PUT", "/api/policy/routes", &routes));
    let window = json!({"selector": "env=prod", "comment": "patches",
        "schedule": {"days": ["tue", "thu"], "start": "02:00", "duration": "2h", "time_zone": "Europe/Berlin"}});
    applied(&send(&j, "PUT", "/api/policy/windows/patch-tuesday", &window));

    // A silence posted without a name is given one; it holds now.
    let posted = applied(&send(
        &j,
        "POST",
        "/api/silences",
        &json!({"selector": "team=db", "duration": "2h", "author": "ana", "comment": "major upgrade"}),
    ));
    let name = posted["name"].as_str().expect("the silence's name").to_string();
    assert!(name.starts_with("silence-"), "{name}");
    let listed = j.get("/api/silences").json();
    let s = silence(&listed, &name);
    assert_eq!(
        (&s["selector"], &s["author"], &s["comment"], &s["active"]),
        (&json!("team=db"), &json!("ana"), &json!("major upgrade"), &json!(true))
    );
    // One with its own name and times, in the past: listed, not active.
    applied(&send(
        &j,
        "POST",
        "/api/silences",
        &json!({"name": "last-year", "selector": "env=dev", "starts_at": "2025-01-01T00:00:00Z",
            "ends_at": "2025-01-01T02:00:00.5Z", "author": "bo"}),
    ));

    let policy = j.get("/api/policy").json();
    assert_eq!(policy["log_position"].as_u64(), Some(position(&j)));
    assert_eq!(
        policy["receivers"],
        json!([
            {"name": "boss", "kind": "webhook", "url": "https://hooks.example.com/boss", "secret": {"file": "/etc/jaque/boss"}},
            {"name": "db-team", "kind": "webhook", "url": "https://hooks.example.com/db", "secret": {"env": "DB_HOOK_SECRET"}},
        ])
    );
    assert_eq!(
        policy["routes"],
        json!([
            {"selector": "team=db", "receivers": ["db-team"], "continue": true, "repeat_interval": "1h",
             "escalations": [{"after": "10m", "receivers": ["boss"]}, {"after": "1h 30m", "receivers": ["boss"]}]},
            {"selector": "", "receivers": ["boss"], "continue": false, "escalations": []},
        ]),
        "the routes in order, durations as they were written"
    );
    assert_eq!(
        policy["windows"],
        json!([{"name": "patch-tuesday", "selector": "env=prod", "comment": "patches",
            "schedule": {"days": ["tue", "thu"], "start": "02:00", "duration": "2h", "time_zone": "Europe/Berlin"}}])
    );
    let old = silence(&policy, "last-year");
    assert_eq!(
        (&old["starts_at"], &old["ends_at"], &old["active"]),
        (&json!("2025-01-01T00:00:00.000Z"), &json!("2025-01-01T02:00:00.500Z"), &json!(false))
    );
    assert_eq!(silence(&policy, &name)["active"], true);
    // What a GET shows goes back as a PUT's body: the same routes again are applied.
    applied(&send(&j, "PUT", "/api/policy/routes", &policy["routes"]));

    // Expiring the silence ends it: still listed, not active.
    applied(&delete(&j, &format!("/api/silences/{name}")));
    let listed = j.get("/api/silences").json();
    assert_eq!(silence(&listed, &name)["active"], false, "{listed}");
    assert_eq!(delete(&j, "/api/silences/never-was").status, 404);
    assert_eq!(delete(&j, "/api/policy/windows/never-was").status, 404);
    assert_eq!(delete(&j, "/api/policy/receivers/never-was").status, 404);

    // Deleting what nothing names works; the window goes.
    applied(&delete(&j, "/api/policy/windows/patch-tuesday"));
    assert_eq!(j.get("/api/policy").json()["windows"], json!([]));
}

#[test]
fn an_invalid_policy_write_is_a_400_with_the_reason_and_writes_nothing() {
    let j = one_process("jaque", &[]);
    let hook = json!({"kind": "webhook", "url": "https://hooks.example.com/db"});
    applied(&send(&j, "PUT", "/api/policy/receivers/db-team", &hook));
    applied(&send(&j, "PUT", "/api/policy/routes", &json!([{"selector": "team=db", "receivers": ["db-team"]}])));
    let before = position(&j);

    let r = send(&j, "PUT", "/api/policy/routes", &json!([{"selector": "team=db", "receivers": ["nobody"]}]));
    refused(&j, r, "route 0: names receiver nobody, which does not exist", before);
    let r = delete(&j, "/api/policy/receivers/db-team");
    refused(&j, r, "route 0: names receiver db-team, which does not exist", before);
    let atlantis =
        json!({"selector": "", "schedule": {"start": "02:00", "duration": "2h", "time_zone": "Europe/Atlantis"}});
    let r = send(&j, "PUT", "/api/policy/windows/nightly", &atlantis);
    refused(&j, r, "time_zone \"Europe/Atlantis\" is not a time zone of the IANA database", before);
    let r = send(&j, "PUT", "/api/policy/receivers/DB_Team", &hook);
    refused(&j, r, "name \"DB_Team\" must be 1 to 63 of a-z, 0-9", before);
    let r = send(&j, "PUT", "/api/policy/routes", &json!([{"receivers": ["db-team"], "repeat_interval": "10s"}]));
    refused(&j, r, "repeat_interval must be at least 60s", before);
    let r = send(
        &j,
        "PUT",
        "/api/policy/routes",
        &json!([{"receivers": ["db-team"], "escalations": [{"after": "soon", "receivers": ["db-team"]}]}]),
    );
    refused(&j, r, "routes[0].escalations[0].after: \"soon\" is not a duration", before);
    let r = send(&j, "PUT", "/api/policy/routes", &json!([{"receivers": ["db-team"], "selector": "team in ()"}]));
    refused(&j, r, "routes[0].selector: selector \"team in ()\"", before);
    let r = send(
        &j,
        "PUT",
        "/api/policy/receivers/x",
        &json!({"kind": "webhook", "url": "https://u:p@hooks.example.com/"}),
    );
    refused(&j, r, "url must not hold credentials", before);
    let r = send(
        &j,
        "PUT",
        "/api/policy/receivers/x",
        &json!({"kind": "webhook", "url": "https://x/", "secret": {"env": "A", "file": "/b"}}),
    );
    refused(&j, r, "secret: name a file", before);
    let r = send(&j, "PUT", "/api/policy/receivers/x", &json!({"kind": "email", "url": "https://x/"}));
    refused(&j, r, "kind: unknown variant `email`", before);
    let r = send(
        &j,
        "POST",
        "/api/silences",
        &json!({"selector": "", "author": "ana", "duration": "2h", "ends_at": "2030-01-01T00:00:00Z"}),
    );
    refused(&j, r, "give one of them", before);
    let r =
        send(&j, "POST", "/api/silences", &json!({"selector": "", "author": "ana", "ends_at": "2020-01-01T00:00:00Z"}));
    refused(&j, r, "ends_at must be after starts_at", before);
    let r = send(&j, "POST", "/api/silences", &json!({"selector": "", "author": "ana", "ends_at": "tomorrow"}));
    refused(&j, r, "ends_at: \"tomorrow\" is not an RFC 3339", before);
    let r = send(&j, "POST", "/api/silences", &json!({"selector": "", "author": "ana", "duration": "2h", "extra": 1}));
    refused(&j, r, "unknown field `extra`", before);
    let r =
        send(&j, "PUT", "/api/silences/s1", &json!({"selector": "", "author": "ana", "duration": "2h", "name": "s2"}));
    refused(&j, r, "name: the path names the silence", before);
    let r = j.request("PUT", "/api/policy/routes", &[], Some(b"[{"));
    refused(&j, r, "EOF while parsing", before);
}

#[test]
fn a_retried_idempotency_key_is_applied_once() {
    let j = one_process("jaque", &[]);
    let hook = json!({"kind": "webhook", "url": "https://hooks.example.com/db"});
    let before = position(&j);
    let first = applied(&send_with_key(&j, "PUT", "/api/policy/receivers/db-team", "put-db-team", &hook));
    let again = applied(&send_with_key(&j, "PUT", "/api/policy/receivers/db-team", "put-db-team", &hook));
    assert_eq!(first, again, "the retry is answered with the first application");
    assert_eq!(position(&j), before + 1);
    // A body that breaks a rule of its own is refused as such, whatever key it carries.
    let r = send_with_key(
        &j,
        "PUT",
        "/api/policy/routes",
        "put-db-team",
        &json!([{"receivers": ["db-team"], "repeat_interval": "1s"}]),
    );
    refused(&j, r, "repeat_interval must be at least 60s", before + 1);

    // A posted silence's name is made of the key: the retry names the same one, and it is written once.
    let body = json!({"selector": "team=db", "duration": "1h", "author": "ana"});
    let first = applied(&send_with_key(&j, "POST", "/api/silences", "hush-1", &body));
    let again = applied(&send_with_key(&j, "POST", "/api/silences", "hush-1", &body));
    assert_eq!(first, again);
    assert_eq!(position(&j), before + 2);
    assert_eq!(j.get("/api/silences").json()["silences"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_cluster_held_at_format_3_refuses_policy_writes_saying_it_needs_format_4() {
    let j = one_process("jaque", &["-hold-format", "3"]);
    let before = position(&j);
    let r = send(&j, "PUT", "/api/policy/receivers/db-team", &json!({"kind": "webhook", "url": "https://x/"}));
    refused(&j, r, "needs cluster format 4", before);
    let r = send(&j, "POST", "/api/silences", &json!({"selector": "", "duration": "1h", "author": "ana"}));
    refused(&j, r, "needs cluster format 4", before);
    assert_eq!(j.get("/api/policy").json()["receivers"], json!([]), "reads answer, empty");
}

#[test]
fn on_nats_a_ui_writes_the_policy_through_ingress_and_the_other_engine_forwards_to_the_owner() {
    let nats = Nats::start();
    let engine = |id: &str| {
        let args =
            ["-target", "engine", "-queue", &nats.url, "-coordination", &nats.url, "-id", id, "-heartbeat-ttl", "3s"];
        Jaque::start(id, &args)
    };
    let (e1, e2) = (engine("e1"), engine("e2"));
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
    for p in [&e1, &e2, &ui] {
        p.wait_ready();
    }
    ui.wait_epoch(&["e1", "e2"]);

    // The first write names the policy key's owner; then writes go on until one was claimed by the other engine
    // (the ingress queue group picks either) and forwarded: every one lands at the owner.
    let hook = |i: usize| json!({"kind": "webhook", "url": format!("https://hooks.example.com/{i}")});
    let first = applied(&send(&ui, "PUT", "/api/policy/receivers/r-0", &hook(0)));
    let owner = first["owner"].as_str().expect("an owner").to_string();
    let other = if owner == "e1" { &e2 } else { &e1 };
    let forwarded = || other.metric("jaque_engine_commands_forwarded_total{outcome=\"sent\"}").unwrap_or(0.0);
    let mut written = 1;
    poll("a policy write claimed by the engine that does not own the policy, forwarded to the owner", || {
        let r = applied(&send(&ui, "PUT", &format!("/api/policy/receivers/r-{written}"), &hook(written)));
        assert_eq!(r["owner"], owner.as_str(), "every policy write is applied by the key's owner");
        written += 1;
        (forwarded() > 0.0).then_some(())
    });
    assert_eq!(ui.metric("jaque_ui_writes_total{via=\"ingress\"}"), Some(written as f64), "each through ingress");

    // The ui reads them all back from the log it follows.
    poll("the ui's reader to hold every receiver", || {
        let policy = ui.get("/api/policy").json();
        (policy["receivers"].as_array().map(Vec::len) == Some(written)).then_some(())
    });
    // A refusal comes back through ingress too, and a route naming a receiver is taken.
    let r = send(&ui, "PUT", "/api/policy/routes", &json!([{"receivers": ["nobody"]}]));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["reason"].as_str().unwrap().contains("names receiver nobody"), "{}", r.text());
    applied(&send(&ui, "PUT", "/api/policy/routes", &json!([{"receivers": ["r-0"]}])));
}
