//! The alerting fields, labels and label selectors through the HTTP API of a real process
//! (`-target engine,worker,ui -queue memory`): a put with labels and alerting rules reads back with the rules in
//! force (and the defaults when it names none), on every read and on the event stream; bad labels, counts and
//! selectors are 400s that say what is wrong; `selector=` filters the object list (with `state=`, `q=` and
//! through the `Link` cursors) and the counts; and a tcp target that refuses is soft `critical 1/3`, then
//! `2/3` a retry interval later, then hard critical, as the event stream shows it.

use jaque_tests::{poll, Jaque, Response, Target, DEADLINE};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn single() -> Jaque {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    j
}

/// An address that refuses connections: a check of it is critical.
fn closed_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

fn put(j: &Jaque, id: &str, body: &Value) -> Response {
    j.put(&format!("/api/objects/{id}"), body)
}

fn put_ok(j: &Jaque, id: &str, body: &Value) {
    let r = put(j, id, body);
    assert_eq!(r.status, 200, "{id}: {}", r.text());
}

fn object(j: &Jaque, id: &str) -> Value {
    let r = j.get(&format!("/api/objects/{id}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The reason of a 400.
fn refused(r: &Response) -> String {
    assert_eq!(r.status, 400, "{}", r.text());
    r.json()["reason"].as_str().expect("a reason").to_string()
}

/// `/api/objects` with `query`, every page through the `Link`s, as ids.
fn ids(j: &Jaque, query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = Some(format!("/api/objects?{query}"));
    while let Some(path) = next {
        let r = j.get(&path);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        out.extend(r.json().as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap().to_string()));
        next = r
            .header("link")
            .and_then(|l| l.strip_prefix('<'))
            .and_then(|l| l.split_once(">; rel=\"next\""))
            .map(|(p, _)| p.to_string());
        assert!(out.len() < 1000, "the links go round");
    }
    out
}

/// `GET /api/stream` of `j`, read event by event.
struct Stream(BufReader<TcpStream>);

impl Stream {
    fn open(j: &Jaque) -> Stream {
        let mut s = TcpStream::connect(j.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        write!(s, "GET /api/stream HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n", j.addr).unwrap();
        let mut stream = Stream(BufReader::new(s));
        let (event, _) = stream.next("the stream's hello").expect("the stream says hello");
        assert_eq!(event, "hello");
        stream
    }

    /// The next event (name, data), waiting at most `DEADLINE`; `None` when the stream ends.
    fn next(&mut self, what: &str) -> Option<(String, String)> {
        let start = Instant::now();
        let (mut event, mut data) = (String::new(), String::new());
        let mut line = String::new();
        loop {
            assert!(start.elapsed() < DEADLINE, "gave up waiting for {what} after {DEADLINE:?}");
            line.clear();
            match self.0.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => panic!("reading the stream: {e}"),
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if let Some(v) = l.strip_prefix("event: ") {
                event = v.to_string();
            } else if let Some(v) = l.strip_prefix("data: ") {
                data = v.to_string();
            } else if l.is_empty() && !event.is_empty() {
                return Some((std::mem::take(&mut event), std::mem::take(&mut data)));
            }
        }
    }

    /// The object of the next `change` event on `id` (`null` once deleted).
    fn change_of(&mut self, id: &str, what: &str) -> Value {
        loop {
            let (event, data) = self.next(what).unwrap_or_else(|| panic!("the stream ended before {what}"));
            if event == "change" {
                let c: Value = serde_json::from_str(&data).unwrap();
                if c["id"] == id {
                    return c["object"].clone();
                }
            }
        }
    }
}

#[test]
fn a_put_with_labels_and_alerting_rules_reads_back_with_the_rules_in_force() {
    let j = single();
    let format = jaque_core::format::CLUSTER_FORMAT;
    assert_eq!(j.get("/api/cluster").json()["cluster_format"]["active"], format, "one process of this build");
    let mut stream = Stream::open(&j);
    let tcp = json!({"type": "tcp", "addr": "127.0.0.1:9"});
    put_ok(
        &j,
        "db",
        &json!({"probe": tcp, "interval": "1m", "timeout": "2s", "labels": {"env": "prod", "example.com/team": "db"},
            "max_attempts": 5, "retry_interval": "10s", "recovery_attempts": 2, "flapping": false}),
    );
    let want = json!({
        "probe": tcp, "interval": "1m", "timeout": "2s", "labels": {"env": "prod", "example.com/team": "db"},
        "max_attempts": 5, "retry_interval": "10s", "recovery_attempts": 2, "flapping": false, "parents": []
    });
    let o = object(&j, "db");
    assert_eq!(o["definition"], want);
    assert_eq!((&o["state"], &o["flapping"]), (&json!("pending"), &json!(false)));
    assert!(o.get("soft").is_some(), "soft is always there, null when the results agree: {o}");
    // Every read shows the same: the list, and the stream's change.
    let listed = j.get("/api/objects?q=db").json();
    assert_eq!(listed[0]["definition"], want);
    assert_eq!(stream.change_of("db", "the put on the stream")["definition"], want);

    // Named nothing: the defaults, the labels empty.
    put_ok(&j, "web", &json!({"probe": tcp, "interval": "1m", "timeout": "2s"}));
    let d = object(&j, "web")["definition"].clone();
    assert_eq!(
        d,
        json!({"probe": tcp, "interval": "1m", "timeout": "2s", "labels": {}, "max_attempts": 3,
            "retry_interval": "12s", "recovery_attempts": 1, "flapping": true, "parents": []}),
        "a fifth of the interval between retries"
    );
    // A put again without the fields goes back to the defaults.
    put_ok(&j, "db", &json!({"probe": tcp, "interval": "1m", "timeout": "2s"}));
    assert_eq!(object(&j, "db")["definition"], d);
}

#[test]
fn bad_labels_counts_and_selectors_are_400s_that_say_what_is_wrong() {
    let j = single();
    let tcp = json!({"type": "tcp", "addr": "127.0.0.1:9"});
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "labels": {"Bad Key": "x"}})));
    assert!(reason.contains("labels: label key \"Bad Key\"") && reason.contains("' '"), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "labels": {"env": "prod/eu"}})));
    assert!(reason.contains("labels: label \"env\" value \"prod/eu\""), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "max_attempts": 0})));
    assert!(reason.contains("max_attempts: must be a whole number from 1 to 100, got 0"), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "recovery_attempts": 1000})));
    assert!(reason.contains("recovery_attempts"), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "flapping": "yes"})));
    assert!(reason.contains("flapping: invalid type"), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "interval": "10s", "retry_interval": "1m"})));
    assert!(reason.contains("retry_interval: must be at least the timeout"), "{reason}");
    let reason = refused(&put(&j, "a", &json!({"probe": tcp, "retry_interval": "now"})));
    assert!(reason.contains("retry_interval: \"now\" is not a duration"), "{reason}");
    assert_eq!(j.get("/api/objects/a").status, 404, "nothing was written");

    for path in ["/api/objects", "/api/summary"] {
        let reason = refused(&j.get(&format!("{path}?selector=env%3Dprod,team%3E1")));
        assert!(reason.contains("selector \"env=prod,team>1\"") && reason.contains("\">\" at position 13"), "{reason}");
        let reason = refused(&j.get(&format!("{path}?selector=env%20in%20()")));
        assert!(reason.contains("the list at position 7 is empty"), "{reason}");
        let reason = refused(&j.get(&format!("{path}?selector=Bad%20Key")));
        assert!(reason.contains("expected"), "{reason}");
        let reason = refused(&j.get(&format!("{path}?selector=a&selector=b")));
        assert!(reason.contains("given twice"), "{reason}");
    }
}

#[test]
fn selectors_filter_the_list_through_its_cursors_and_the_counts() {
    let j = single();
    let target = Target::start();
    let up = json!({"type": "tcp", "addr": target.addr.to_string()});
    let down = json!({"type": "tcp", "addr": closed_port()});
    // (id, labels, up): the down ones are hard critical on their first result.
    let objects = [
        ("web-1", json!({"env": "prod", "team": "web", "tier": "web"}), true),
        ("web-2", json!({"env": "prod", "team": "web", "tier": "web", "canary": ""}), false),
        ("api-1", json!({"env": "prod", "team": "api", "tier": "api"}), false),
        ("db-1", json!({"env": "prod", "team": "db", "tier": "db"}), true),
        ("db-2", json!({"env": "staging", "team": "db"}), false),
        ("batch", json!({"env": "staging"}), true),
        ("bare", json!({}), true),
    ];
    for (id, labels, is_up) in &objects {
        let probe = if *is_up { &up } else { &down };
        put_ok(
            &j,
            id,
            &json!({"probe": probe, "interval": "1h", "timeout": "2s", "labels": labels, "max_attempts": 1}),
        );
    }
    poll("every object checked", || {
        let s = j.get("/api/summary").json();
        (s["states"]["ok"] == 4 && s["states"]["critical"] == 3).then_some(())
    });

    let sel = |s: &str| s.bytes().map(|b| format!("%{b:02X}")).collect::<String>();
    let cases: [(&str, &[&str]); 7] = [
        ("env=prod", &["api-1", "db-1", "web-1", "web-2"]),
        ("team!=db", &["api-1", "bare", "batch", "web-1", "web-2"]),
        ("tier in (web,api)", &["api-1", "web-1", "web-2"]),
        ("!canary", &["api-1", "bare", "batch", "db-1", "db-2", "web-1"]),
        ("env=prod,team!=db,!canary", &["api-1", "web-1"]),
        ("env notin (prod), team", &["db-2"]),
        ("", &["api-1", "bare", "batch", "db-1", "db-2", "web-1", "web-2"]),
    ];
    for (selector, want) in cases {
        assert_eq!(ids(&j, &format!("selector={}", sel(selector))), want, "{selector:?}");
        // Page by page through the cursors, by id and problems first: the same objects.
        assert_eq!(ids(&j, &format!("limit=1&selector={}", sel(selector))), want, "{selector:?} a page at a time");
        let mut by_severity = ids(&j, &format!("limit=2&sort=severity&selector={}", sel(selector)));
        by_severity.sort();
        assert_eq!(by_severity, want, "{selector:?} problems first");
        // The counts of the same objects.
        let s = j.get(&format!("/api/summary?selector={}", sel(selector))).json();
        assert_eq!(s["objects"], want.len(), "{selector:?}: {s}");
    }
    // With the other filters.
    assert_eq!(ids(&j, &format!("state=critical&selector={}", sel("env=prod"))), ["api-1", "web-2"]);
    assert_eq!(ids(&j, &format!("q=web&state=ok&selector={}", sel("tier in (web,api)"))), ["web-1"]);
    let s = j.get(&format!("/api/summary?selector={}", sel("team in (db,web)"))).json();
    assert_eq!(s["states"], json!({"pending": 0, "ok": 2, "warning": 0, "critical": 2, "unknown": 0}), "{s}");
    // The next page's link carries the selector in its canonical text.
    let r = j.get(&format!("/api/objects?limit=1&selector={}", sel(" team != db ")));
    let link = r.header("link").expect("more than one");
    assert!(link.contains("selector=team%21%3Ddb&cursor="), "{link}");
}

#[test]
fn a_refused_tcp_target_is_soft_critical_for_its_attempts_then_hard() {
    let j = single();
    let mut stream = Stream::open(&j);
    let mut target = Target::start();
    let def = json!({"probe": {"type": "tcp", "addr": target.addr.to_string()}, "interval": "5s", "timeout": "200ms",
        "max_attempts": 3, "retry_interval": "300ms", "labels": {"env": "prod"}});
    put_ok(&j, "db", &def);
    let put = stream.change_of("db", "the put");
    assert_eq!((&put["state"], &put["soft"]), (&json!("pending"), &Value::Null));
    // A new object's first result is its state at once.
    let first = stream.change_of("db", "the first result");
    assert_eq!((&first["state"], &first["soft"]), (&json!("ok"), &Value::Null), "{first}");

    // The target goes away: each change of the object, as the stream carries them in log order, until it is hard.
    target.stop();
    let r = j.request("POST", "/api/objects/db/actions/check", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut seen: Vec<Value> = Vec::new();
    while seen.last().is_none_or(|o| o["state"] != "critical") {
        let o = stream.change_of("db", "the results after the target stopped");
        // The check request is a change too; only results are kept here.
        if o["soft"] != Value::Null || o["state"] != "ok" {
            seen.push(o);
        }
        assert!(seen.len() <= 3, "more changes than attempts: {seen:?}");
    }
    let states: Vec<(&Value, &Value, &Value)> =
        seen.iter().map(|o| (&o["state"], &o["soft"]["state"], &o["soft"]["attempt"])).collect();
    let (ok, critical, null) = (json!("ok"), json!("critical"), Value::Null);
    assert_eq!(
        states,
        [(&ok, &critical, &json!(1)), (&ok, &critical, &json!(2)), (&critical, &null, &null)],
        "soft 1/3, soft 2/3, then hard: {seen:?}"
    );
    assert_eq!(seen[0]["soft"]["of"], 3);
    assert!(seen[0]["soft"]["output"].as_str().unwrap().contains("refused"), "{}", seen[0]);
    let gap = seen[1]["soft"]["at_ms"].as_u64().unwrap() - seen[0]["soft"]["at_ms"].as_u64().unwrap();
    assert!((300..5_000).contains(&gap), "retried after the retry interval, not the interval: {gap} ms");
    let hard = &seen[2];
    assert_eq!((&hard["last_transition"]["from"], &hard["last_transition"]["to"]), (&ok, &critical), "{hard}");
    // A read and the counts say the same.
    let o = object(&j, "db");
    assert_eq!((&o["state"], &o["soft"]), (&critical, &null), "{o}");
    let s = j.get("/api/summary?selector=env%3Dprod").json();
    assert_eq!(s["states"]["critical"], 1, "{s}");
}
