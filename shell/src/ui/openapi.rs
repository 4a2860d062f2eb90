//! The OpenAPI 3.1 document of the ui's API (`GET /api/openapi.json`), written by hand in `openapi.json` and
//! held to the code by the tests below: its paths and methods are exactly the router's, and every answer the
//! handlers give to a request of each kind (good, bad, absent, unauthorized, unavailable) has a documented
//! status, content type, headers and a body that validates against its schema. `tests/tests/api_contract.rs`
//! then fuzzes a live process against it with schemathesis.
//!
//! Why by hand: the handlers build their answers from the core's types and a few `json!` bodies; a generator
//! (utoipa) would bring a proc-macro stack and still describe only what its annotations say, so the check
//! against real answers is needed either way, and with it a plain document is the simpler thing to keep.

use crate::http::guard::{self, Tokens};
use serde_json::{json, Value};
use std::sync::OnceLock;

const DOCUMENT: &str = include_str!("openapi.json");

pub(crate) fn base() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    // The file is checked by the tests below, so it parses in any build that passed them.
    DOC.get_or_init(|| serde_json::from_str(DOCUMENT).expect("shell/src/ui/openapi.json is JSON"))
}

/// The document as this process serves it, with the tokens it was given (`http::guard` is what enforces them):
/// with `-write-token` every write (tagged `writes`) needs it; with `-read-token` every read of data needs it
/// or the write token (the status page's own files stay open); with `-metrics-token`, `/metrics` and
/// `/healthz` need it. Each guarded operation names its schemes and may answer 401.
pub fn document(tokens: &Tokens) -> Value {
    let mut doc = base().clone();
    let Some(paths) = doc["paths"].as_object_mut() else { return doc };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        // The operations (a path item's `parameters` is not one).
        for op in item.iter_mut().filter(|(k, _)| *k != "parameters").map(|(_, op)| op) {
            let is_write = op["tags"].as_array().is_some_and(|t| t.iter().any(|t| t == "writes"));
            let schemes: Vec<&str> = if is_write {
                [tokens.write.as_ref().map(|_| "writeToken")].into_iter().flatten().collect()
            } else if guard::metrics_path(path) {
                [tokens.metrics.as_ref().map(|_| "metricsToken")].into_iter().flatten().collect()
            } else if tokens.read.is_some() && !guard::page_file(path) {
                ["readToken"].into_iter().chain(tokens.write.as_ref().map(|_| "writeToken")).collect()
            } else {
                vec![]
            };
            if !schemes.is_empty() {
                // Any one of them will do: a list of alternatives, each a scheme of its own.
                op["security"] = schemes.iter().map(|s| json!({ *s: [] })).collect();
                op["responses"]["401"] = json!({ "$ref": "#/components/responses/Unauthorized" });
            }
        }
    }
    doc
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::process::{router, Parts};
    use crate::sink::store::{Store, StoreUrl};
    use crate::ui::views::{self, Backend, UiRequest};
    use crate::ui::{Api, Changes, Writes};
    use axum::body::Body;
    use axum::http::{Method, Request};
    use jaque_core::sink::{Batch, EventRow, Progress};
    use jaque_core::ui::WriteRoute;
    use jaque_core::{
        EngineConfig, EpochRecord, Event, EventBody, LogEntry, LogReader, MemberId, MemberRef, ObjectDef, ObjectId,
        Outcome, Probe, State, Time,
    };
    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tower::ServiceExt;

    const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "PATCH"];

    fn engine() -> MemberRef {
        MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 7 }
    }

    /// A log with an epoch (at cluster format 3), an object in each kind of state, a paused one, an
    /// acknowledged one, and one with labels and alerting rules in a soft state.
    fn reader() -> LogReader {
        let mut r = LogReader::new();
        let record =
            EpochRecord { epoch: 1, members: vec![engine()], members_rev: 1, idempotency_window_ms: None, format: 3 };
        r.read(1, &LogEntry::Epoch(record));
        let mut seq = 1;
        let mut event = |r: &mut LogReader, object: &str, body: EventBody| {
            seq += 1;
            let ev = Event {
                object: ObjectId::new(object).unwrap(),
                epoch: 1,
                writer: engine(),
                at: Time(1_000 + seq),
                command_id: None,
                body,
            };
            r.read(seq, &LogEntry::Event(ev));
        };
        let probes = [
            Probe::Http { url: "http://127.0.0.1:9/".into(), expect_status: Some(204) },
            Probe::Tcp { addr: "127.0.0.1:9".into() },
            Probe::Exec { plugin: "disk".into(), args: vec!["-w".into()] },
        ];
        for (i, (id, to)) in
            [("a", State::Critical), ("b", State::Ok), ("c", State::Pending), ("d", State::Warning)].iter().enumerate()
        {
            let def = ObjectDef {
                probe: probes[i % probes.len()].clone(),
                interval_ms: 30_000,
                timeout_ms: 5_000,
                ..ObjectDef::UNSET
            };
            event(&mut r, id, EventBody::Put { def });
            if *to != State::Pending {
                event(&mut r, id, EventBody::transition(State::Pending, *to, "out"));
            }
        }
        event(&mut r, "a", EventBody::Ack);
        event(&mut r, "b", EventBody::Pause);
        let labels = [("env", "prod"), ("example.com/team", "web")].map(|(k, v)| (k.to_string(), v.to_string()));
        let def = ObjectDef {
            labels: jaque_core::labels::Labels::new(labels.into_iter().collect()).unwrap(),
            max_attempts: Some(3),
            retry_interval_ms: Some(5_000),
            ..ObjectDef::tcp("127.0.0.1:9", 30_000, 5_000)
        };
        event(&mut r, "e", EventBody::Put { def });
        event(&mut r, "e", EventBody::transition(State::Pending, State::Ok, "up"));
        let soft =
            EventBody::Soft { state: State::Critical, attempt: 1, of: 3, output: "refused".into(), flapping: None };
        event(&mut r, "e", soft);
        assert!(r.object(&ObjectId::new("e").unwrap()).unwrap().soft().is_some(), "the soft state is folded");
        // A policy of each kind of thing (format 4, installed by a second epoch record).
        let record =
            EpochRecord { epoch: 2, members: vec![engine()], members_rev: 2, idempotency_window_ms: None, format: 4 };
        seq += 1;
        r.read(seq, &LogEntry::Epoch(record));
        let changes = [
            r#"{"op":"put_receiver","receiver":{"name":"db","kind":"webhook","url":"https://hooks.example.com/db","secret":{"env":"DB_HOOK"}}}"#,
            r#"{"op":"put_receiver","receiver":{"name":"spare","kind":"webhook","url":"http://127.0.0.1:9/"}}"#,
            r#"{"op":"set_routes","routes":[{"selector":"team=db","receivers":["db"],"repeat_interval_ms":3600000,"escalations":[{"after_ms":600000,"receivers":["db"]}]}]}"#,
            r#"{"op":"put_silence","silence":{"name":"upgrade","selector":"team=db","starts_at":1000,"ends_at":1796007200000,"author":"ana","comment":"major"}}"#,
            r#"{"op":"put_window","window":{"name":"tue","selector":"env=prod","schedule":{"days":["tue"],"start":"02:00","duration_ms":7200000,"time_zone":"Europe/Berlin"},"comment":""}}"#,
        ];
        for change in changes {
            let change: jaque_core::policy::Change = serde_json::from_str(change).unwrap();
            seq += 1;
            let ev = Event {
                object: ObjectId::policy(),
                epoch: 2,
                writer: engine(),
                at: Time(1_000 + seq),
                command_id: None,
                body: EventBody::Policy { change: Box::new(change) },
            };
            r.read(seq, &LogEntry::Event(ev));
        }
        assert_eq!(r.policy().windows.len(), 1, "the policy is folded");
        r
    }

    /// No token.
    fn open() -> Tokens {
        Tokens::default()
    }

    /// `-write-token s3cret`.
    fn write_only() -> Tokens {
        Tokens { write: Some("s3cret".into()), ..Tokens::default() }
    }

    /// Every token: `-read-token r`, `-write-token s3cret`, `-metrics-token m`.
    fn every() -> Tokens {
        Tokens { read: Some("r".into()), write: Some("s3cret".into()), metrics: Some("m".into()) }
    }

    /// A ui over `reader()` whose writes are answered as an engine would (applied, or not found), the store
    /// in `dir`, and `tokens`, guarded as a process is (`guard::guard` in front of the router).
    fn app(tokens: Tokens, route: WriteRoute, history: Option<Arc<Store>>) -> axum::Router {
        let (tx, mut rx) = mpsc::channel::<UiRequest>(16);
        let (stop, stopping) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            // The process "runs" while this task does: event streams stay open.
            let _stop = stop;
            let reader = reader();
            let buckets = crate::follow::Buckets::default();
            while let Some(req) = rx.recv().await {
                match req {
                    UiRequest::Objects { lookup, reply } => {
                        let _ = reply.send(views::objects(&reader, lookup));
                    }
                    UiRequest::Cluster { reply } => {
                        let _ = reply.send(views::cluster(&reader, &buckets));
                    }
                    UiRequest::Metrics { reply } => {
                        let _ = reply.send(String::new());
                    }
                    UiRequest::Health { reply } => {
                        let _ = reply.send((true, "ready".into()));
                    }
                    UiRequest::Write { cmd, reply } => {
                        let applied =
                            Outcome::Applied { command_id: cmd.id.clone(), owner: engine().id, epoch: 1, seq: 99 };
                        let outcome = match &cmd.kind {
                            // As the engine answers a policy change: applied, or rejected with the reason.
                            jaque_core::CommandKind::Policy { change } => {
                                match reader.policy().changed(change, Time(2_000)) {
                                    Ok(_) => applied,
                                    Err(e) => Outcome::Rejected { reason: e.to_string() },
                                }
                            }
                            jaque_core::CommandKind::Put { .. } => applied,
                            _ if reader.object(&cmd.object).is_some() => applied,
                            _ => Outcome::NotFound { command_id: cmd.id },
                        };
                        let _ = reply.send(outcome);
                    }
                }
            }
        });
        let mut cfg = EngineConfig::new(engine(), Duration::from_secs(10));
        cfg.reply_timeout = Duration::from_secs(1);
        let (backend, changes) = (Some(Backend(tx)), Some(Changes::new(stopping)));
        let api = Api {
            backend: backend.clone(),
            route,
            ingress: None,
            owners: None,
            to_owner: false,
            writes: Arc::new(Writes::default()),
            submit: jaque_core::ui::SubmitTimeouts::SHIPPED,
            inbox: None,
            tokens: tokens.clone(),
            id_prefix: "test".into(),
            next_id: AtomicU64::new(0),
            engine_cfg: cfg,
            history,
            changes: changes.clone(),
        };
        let writes = (route == WriteRoute::Ingress).then(|| api.writes.clone());
        let parts = Parts { backend, roles: vec![], worker: false, writes, changes };
        router(Arc::new(parts), Some(Arc::new(api)))
            .layer(axum::middleware::from_fn_with_state(Arc::new(tokens), guard::guard))
    }

    struct Answer {
        status: u16,
        headers: axum::http::HeaderMap,
        body: Vec<u8>,
    }

    async fn send(app: &axum::Router, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut req = Request::builder().method(Method::from_bytes(method.as_bytes()).unwrap()).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = app.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let is_stream = headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let body = if is_stream {
            // An event stream does not end: its first event is the answer's body here.
            use futures_util::StreamExt;
            resp.into_body().into_data_stream().next().await.map(|b| b.unwrap().to_vec()).unwrap_or_default()
        } else {
            axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec()
        };
        Answer { status, headers, body }
    }

    /// The router's paths and, for each, the methods it answers with anything but 405.
    async fn routed(app: &axum::Router) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        let own = crate::process::routes().into_iter().map(|(path, _)| path);
        for path in own.chain(crate::ui::api::routes().into_iter().map(|(path, _)| path)) {
            let concrete = path.replace("{id}", "x").replace("{action}", "pause").replace("{name}", "x");
            for m in METHODS {
                if send(app, m, &concrete, &[], "").await.status != 405 {
                    out.insert((path.to_string(), m.to_string()));
                }
            }
        }
        out
    }

    fn documented(doc: &Value) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for m in METHODS {
                if item.get(m.to_lowercase()).is_some() {
                    out.insert((path.clone(), m.to_string()));
                }
            }
        }
        out
    }

    #[tokio::test]
    async fn every_route_is_documented_and_every_documented_route_exists() {
        let app = app(open(), WriteRoute::LocalEngine, None);
        assert_eq!(routed(&app).await, documented(&document(&open())));
    }

    /// Follows a `$ref` within the document.
    fn resolve<'a>(doc: &'a Value, mut v: &'a Value) -> &'a Value {
        while let Some(r) = v.get("$ref").and_then(Value::as_str) {
            v = doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}"));
        }
        v
    }

    /// The parts of JSON Schema the document uses (`pattern` aside: no regex engine here; schemathesis checks
    /// those against the live process). Returns what does not match, with where.
    pub(crate) fn validate(doc: &Value, schema: &Value, v: &Value, at: &str) -> Vec<String> {
        let schema = resolve(doc, schema);
        let mut errs = Vec::new();
        if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
            let matching = options.iter().filter(|s| validate(doc, s, v, at).is_empty()).count();
            if matching != 1 {
                errs.push(format!("{at}: {v} matches {matching} of oneOf, not exactly one"));
            }
        }
        if let Some(t) = schema.get("type") {
            let types: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let ok = types.iter().any(|t| match *t {
                "object" => v.is_object(),
                "array" => v.is_array(),
                "string" => v.is_string(),
                "integer" => v.is_u64() || v.is_i64(),
                "number" => v.is_number(),
                "boolean" => v.is_boolean(),
                "null" => v.is_null(),
                _ => false,
            });
            if !ok {
                errs.push(format!("{at}: {v} is not of type {t}"));
                return errs;
            }
        }
        if let Some(c) = schema.get("const") {
            if c != v {
                errs.push(format!("{at}: {v} is not {c}"));
            }
        }
        if let Some(e) = schema.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                errs.push(format!("{at}: {v} is not one of {e:?}"));
            }
        }
        if let (Some(n), Some(min)) = (v.as_f64(), schema.get("minimum").and_then(Value::as_f64)) {
            if n < min {
                errs.push(format!("{at}: {n} < minimum {min}"));
            }
        }
        if let (Some(n), Some(max)) = (v.as_f64(), schema.get("maximum").and_then(Value::as_f64)) {
            if n > max {
                errs.push(format!("{at}: {n} > maximum {max}"));
            }
        }
        if let Some(s) = v.as_str() {
            let len = s.chars().count() as u64;
            if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| len < m)
                || schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| len > m)
            {
                errs.push(format!("{at}: {s:?} has a length out of bounds"));
            }
        }
        if let Some(o) = v.as_object() {
            let props = schema.get("properties").and_then(Value::as_object);
            for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap_or_default()) {
                    errs.push(format!("{at}: required {r} is missing"));
                }
            }
            for (k, val) in o {
                match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                    (Some(s), _) => errs.extend(validate(doc, s, val, &format!("{at}.{k}"))),
                    (None, Some(Value::Bool(false))) => errs.push(format!("{at}: {k} is not in the schema")),
                    (None, Some(s @ Value::Object(_))) => errs.extend(validate(doc, s, val, &format!("{at}.{k}"))),
                    (None, _) => {}
                }
            }
        }
        if let (Some(a), Some(items)) = (v.as_array(), schema.get("items")) {
            for (i, item) in a.iter().enumerate() {
                errs.extend(validate(doc, items, item, &format!("{at}[{i}]")));
            }
        }
        errs
    }

    /// Checks one answer against the operation `path`/`method` of `doc`; returns the documented status key.
    fn conforms(doc: &Value, path: &str, method: &str, a: &Answer) -> String {
        let op = &doc["paths"][path][method.to_lowercase()];
        let status = a.status.to_string();
        let resp = op["responses"].get(&status).map(|r| resolve(doc, r)).unwrap_or_else(|| {
            panic!("{method} {path} answered {status}, which is not documented: {}", String::from_utf8_lossy(&a.body))
        });
        for (name, h) in resp.get("headers").and_then(Value::as_object).into_iter().flatten() {
            let h = resolve(doc, h);
            if h["required"] == true {
                assert!(a.headers.contains_key(name.as_str()), "{method} {path} {status}: no {name} header");
            }
        }
        let (media, spec) = resp["content"].as_object().and_then(|c| c.iter().next()).expect("a documented body");
        let ct = a.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(ct.starts_with(media.as_str()), "{method} {path} {status}: content type {ct:?}, documented {media}");
        if media == "application/json" {
            let body: Value = serde_json::from_slice(&a.body).expect("a JSON body");
            let errs = validate(doc, &spec["schema"], &body, "body");
            assert!(errs.is_empty(), "{method} {path} {status}: {body}\n{}", errs.join("\n"));
        }
        status
    }

    #[tokio::test]
    async fn every_answer_of_every_operation_matches_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("none.db").display());
        let store = Arc::new(Store::open(&StoreUrl::parse(&url).unwrap()));
        store.ensure_schema().await.map_err(|_| "schema").unwrap();
        let row = |seq: u64, kind: &'static str, to: Option<State>, definition: Option<String>| EventRow {
            seq,
            object: ObjectId::new("a").unwrap(),
            epoch: 1,
            writer: engine().id,
            writer_incarnation: engine().incarnation,
            at: Time(1_700_000_000_000 + seq),
            kind,
            from_state: to.map(|_| State::Pending),
            to_state: to,
            output: to.map(|_| "out".to_string()),
            command_id: definition.as_ref().map(|_| jaque_core::CommandId::new("c-1").unwrap()),
            definition,
            alert: Default::default(),
        };
        let events = vec![
            row(
                2,
                "put",
                None,
                Some(r#"{"probe":{"type":"tcp","addr":"127.0.0.1:9"},"interval_ms":1000,"timeout_ms":100}"#.into()),
            ),
            row(3, "transition", Some(State::Critical), None),
        ];
        let progress = Progress { sink: MemberId::new("s1").unwrap(), position: 3 };
        store.write(&Batch { id: 1, events, objects: vec![], progress }).await.unwrap();
        let def = r#"{"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1m"}"#;
        let alerting = r#"{"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1m", "labels": {"env": "prod"},
            "max_attempts": 3, "retry_interval": "10s", "recovery_attempts": 2, "flapping": false}"#;
        let bad_label = r#"{"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "labels": {"-env": "prod"}}"#;
        let auth = [("authorization", "Bearer s3cret")];
        let big = format!(r#"{{"probe": {{"type": "exec", "plugin": "p", "args": ["{}"]}}}}"#, "x".repeat(3 << 20));
        let key = [("idempotency-key", "k-1")];
        let (receiver, window, silence) =
            ("/api/policy/receivers/{name}", "/api/policy/windows/{name}", "/api/silences/{name}");
        let hook =
            r#"{"kind": "webhook", "url": "https://hooks.example.com/ops", "secret": {"file": "/etc/jaque/ops"}}"#;
        let routes = r#"[{"selector": "team=db", "receivers": ["db"], "continue": true, "repeat_interval": "1h",
            "escalations": [{"after": "10m", "receivers": ["spare"]}]}, {"receivers": ["spare"]}]"#;
        let wed = r#"{"selector": "env=prod", "schedule": {"days": ["wed"], "start": "03:30", "duration": "1h",
            "time_zone": "Europe/Berlin"}, "comment": "patches"}"#;
        let atlantis = wed.replace("Europe/Berlin", "Europe/Atlantis");
        let hush = r#"{"selector": "team=db", "duration": "2h", "author": "ana", "comment": "upgrade"}"#;
        // (which app, method, request path, documented path, headers, body)
        type Case<'a> = (usize, &'a str, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: Vec<Case> = vec![
            (0, "GET", "/metrics", "/metrics", &[], ""),
            (0, "GET", "/healthz", "/healthz", &[], ""),
            (0, "GET", "/api/openapi.json", "/api/openapi.json", &[], ""),
            (0, "GET", "/api/objects", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?limit=1&state=critical,ok&sort=severity", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?q=A&state=ok&state=warning", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?limit=0", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?state=fine", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?cursor=nope", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?page=2", "/api/objects", &[], ""),
            (0, "GET", "/api/summary", "/api/summary", &[], ""),
            (0, "GET", "/api/summary?selector=env%3Dprod", "/api/summary", &[], ""),
            (0, "GET", "/api/summary?selector=env%3D%3D%3D", "/api/summary", &[], ""),
            (0, "GET", "/api/objects?selector=env%20in%20(prod)&sort=severity", "/api/objects", &[], ""),
            (0, "GET", "/api/objects?selector=env%3Dprod%3C", "/api/objects", &[], ""),
            (0, "GET", "/api/cluster", "/api/cluster", &[], ""),
            (0, "GET", "/api/stream", "/api/stream", &[], ""),
            (0, "GET", "/", "/", &[], ""),
            (0, "GET", "/assets/page.js", "/assets/page.js", &[], ""),
            (0, "GET", "/assets/page.css", "/assets/page.css", &[], ""),
            (0, "GET", "/api/objects/a", "/api/objects/{id}", &[], ""),
            (0, "GET", "/api/objects/zz", "/api/objects/{id}", &[], ""),
            (0, "GET", "/api/objects/a%20b", "/api/objects/{id}", &[], ""),
            (0, "GET", "/api/objects/%FF", "/api/objects/{id}", &[], ""),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &key, def),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &[], alerting),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &[], bad_label),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &[], "{"),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &[], &big),
            (0, "PUT", "/api/objects/n", "/api/objects/{id}", &[("idempotency-key", "a b")], def),
            (0, "DELETE", "/api/objects/a", "/api/objects/{id}", &[], ""),
            (0, "DELETE", "/api/objects/zz", "/api/objects/{id}", &[], ""),
            (0, "DELETE", "/api/objects/a%2Fb", "/api/objects/{id}", &[], ""),
            (0, "POST", "/api/objects/a/actions/ack", "/api/objects/{id}/actions/{action}", &[], ""),
            (0, "POST", "/api/objects/zz/actions/pause", "/api/objects/{id}/actions/{action}", &[], ""),
            (0, "POST", "/api/objects/a/actions/dance", "/api/objects/{id}/actions/{action}", &[], ""),
            (0, "GET", "/api/objects/a/history", "/api/objects/{id}/history", &[], ""),
            (1, "PUT", "/api/objects/n", "/api/objects/{id}", &[], def),
            (1, "PUT", "/api/objects/n", "/api/objects/{id}", &auth, def),
            (1, "DELETE", "/api/objects/n", "/api/objects/{id}", &[("authorization", "Bearer no")], ""),
            (1, "POST", "/api/objects/a/actions/ack", "/api/objects/{id}/actions/{action}", &[], ""),
            (2, "DELETE", "/api/objects/a", "/api/objects/{id}", &[], ""),
            (2, "PUT", "/api/objects/n", "/api/objects/{id}", &[], def),
            (2, "POST", "/api/objects/a/actions/check", "/api/objects/{id}/actions/{action}", &[], ""),
            (3, "GET", "/api/objects/a/history", "/api/objects/{id}/history", &[], ""),
            (3, "GET", "/api/objects/a/history?limit=5000", "/api/objects/{id}/history", &[], ""),
            // Every token set: reads of data, metrics and health answer 401 without theirs, the page's files do not.
            (4, "GET", "/metrics", "/metrics", &[], ""),
            (4, "GET", "/metrics", "/metrics", &[("authorization", "Bearer r")], ""),
            (4, "GET", "/metrics", "/metrics", &[("authorization", "Bearer m")], ""),
            (4, "GET", "/healthz", "/healthz", &[], ""),
            (4, "GET", "/api/openapi.json", "/api/openapi.json", &[], ""),
            (4, "GET", "/api/objects", "/api/objects", &[("authorization", "Bearer m")], ""),
            (4, "GET", "/api/objects", "/api/objects", &[("authorization", "Bearer r")], ""),
            (4, "GET", "/api/summary", "/api/summary", &[], ""),
            (4, "GET", "/api/summary", "/api/summary", &auth, ""),
            (4, "GET", "/api/cluster", "/api/cluster", &[("authorization", "bearer r")], ""),
            (4, "GET", "/api/stream", "/api/stream", &[], ""),
            (4, "GET", "/api/objects/a", "/api/objects/{id}", &[], ""),
            (4, "GET", "/api/objects/a/history", "/api/objects/{id}/history", &[], ""),
            (4, "GET", "/", "/", &[], ""),
            (4, "GET", "/assets/page.js", "/assets/page.js", &[], ""),
            (4, "GET", "/assets/page.css", "/assets/page.css", &[], ""),
            (4, "PUT", "/api/objects/n", "/api/objects/{id}", &[("authorization", "Bearer r")], def),
            // The notification policy.
            (0, "GET", "/api/policy", "/api/policy", &[], ""),
            (4, "GET", "/api/policy", "/api/policy", &[], ""),
            (0, "GET", "/api/silences", "/api/silences", &[], ""),
            (4, "GET", "/api/silences", "/api/silences", &[], ""),
            (0, "PUT", "/api/policy/receivers/ops", receiver, &key, hook),
            (
                0,
                "PUT",
                "/api/policy/receivers/ops",
                receiver,
                &[],
                r#"{"kind": "webhook", "url": "https://x", "secret": {}}"#,
            ),
            (0, "PUT", "/api/policy/receivers/Ops", receiver, &[], hook),
            (0, "PUT", "/api/policy/receivers/ops", receiver, &[], &big),
            (1, "PUT", "/api/policy/receivers/ops", receiver, &[], hook),
            (2, "PUT", "/api/policy/receivers/ops", receiver, &[], hook),
            (0, "DELETE", "/api/policy/receivers/spare", receiver, &[], ""),
            (0, "DELETE", "/api/policy/receivers/db", receiver, &[], ""),
            (0, "DELETE", "/api/policy/receivers/nope", receiver, &[], ""),
            (1, "DELETE", "/api/policy/receivers/spare", receiver, &[], ""),
            (2, "DELETE", "/api/policy/receivers/spare", receiver, &[], ""),
            (0, "PUT", "/api/policy/routes", "/api/policy/routes", &[], routes),
            (0, "PUT", "/api/policy/routes", "/api/policy/routes", &[], r#"[{"receivers": ["nobody"]}]"#),
            (0, "PUT", "/api/policy/routes", "/api/policy/routes", &[], &big),
            (1, "PUT", "/api/policy/routes", "/api/policy/routes", &[], routes),
            (2, "PUT", "/api/policy/routes", "/api/policy/routes", &[], routes),
            (0, "PUT", "/api/policy/windows/wed", window, &[], wed),
            (0, "PUT", "/api/policy/windows/wed", window, &[], &atlantis),
            (0, "PUT", "/api/policy/windows/wed", window, &[], &big),
            (1, "PUT", "/api/policy/windows/wed", window, &[], wed),
            (2, "PUT", "/api/policy/windows/wed", window, &[], wed),
            (0, "DELETE", "/api/policy/windows/tue", window, &[], ""),
            (0, "DELETE", "/api/policy/windows/nope", window, &[], ""),
            (0, "DELETE", "/api/policy/windows/-x", window, &[], ""),
            (1, "DELETE", "/api/policy/windows/tue", window, &[], ""),
            (2, "DELETE", "/api/policy/windows/tue", window, &[], ""),
            (0, "POST", "/api/silences", "/api/silences", &key, hush),
            (0, "POST", "/api/silences", "/api/silences", &[], r#"{"selector": "", "author": "ana"}"#),
            (0, "POST", "/api/silences", "/api/silences", &[], &big),
            (1, "POST", "/api/silences", "/api/silences", &[], hush),
            (2, "POST", "/api/silences", "/api/silences", &[], hush),
            (0, "PUT", "/api/silences/quiet", silence, &[], hush),
            (
                0,
                "PUT",
                "/api/silences/quiet",
                silence,
                &[],
                r#"{"selector": "", "author": "ana", "duration": "2h", "name": "x"}"#,
            ),
            (0, "PUT", "/api/silences/quiet", silence, &[], &big),
            (1, "PUT", "/api/silences/quiet", silence, &[], hush),
            (2, "PUT", "/api/silences/quiet", silence, &[], hush),
            (0, "DELETE", "/api/silences/upgrade", silence, &[], ""),
            (0, "DELETE", "/api/silences/nope", silence, &[], ""),
            (0, "DELETE", "/api/silences/a%20b", silence, &[], ""),
            (1, "DELETE", "/api/silences/upgrade", silence, &[], ""),
            (2, "DELETE", "/api/silences/upgrade", silence, &[], ""),
            (4, "POST", "/api/objects/a/actions/ack", "/api/objects/{id}/actions/{action}", &auth, ""),
        ];
        let tokens = [open(), write_only(), open(), open(), every()];
        let apps = [
            app(open(), WriteRoute::LocalEngine, None),
            app(write_only(), WriteRoute::LocalEngine, None),
            app(open(), WriteRoute::Reject, None),
            app(open(), WriteRoute::LocalEngine, Some(store)),
            app(every(), WriteRoute::LocalEngine, None),
        ];
        let mut seen = BTreeSet::new();
        for (i, method, uri, path, headers, body) in cases {
            let doc = document(&tokens[i]);
            let a = send(&apps[i], method, uri, headers, body).await;
            let status = conforms(&doc, path, method, &a);
            seen.insert((path.to_string(), method.to_lowercase(), status));
        }
        // Each documented answer was given at least once, but for those no single process can be made to give
        // here: a stopping process (no log reader), a store that is away, a forward that lost its owner.
        let doc = document(&every());
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap().iter().filter(|(k, _)| *k != "parameters") {
                for status in op["responses"].as_object().unwrap().keys() {
                    let key = (path.clone(), method.clone(), status.clone());
                    let unreachable_here = status == "503" && method == "get";
                    assert!(unreachable_here || seen.contains(&key), "no case gives {key:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_page_that_is_not_the_last_links_the_next_with_the_same_parameters() {
        let app = app(open(), WriteRoute::LocalEngine, None);
        let a = send(&app, "GET", "/api/objects?limit=2&state=critical,ok,pending&q=&sort=severity", &[], "").await;
        let ids: Vec<Value> =
            serde_json::from_slice::<Vec<Value>>(&a.body).unwrap().iter().map(|o| o["id"].clone()).collect();
        assert_eq!(ids, [json!("a"), json!("c")], "critical first, then pending; ok after");
        let link = a.headers.get("link").and_then(|v| v.to_str().ok()).expect("a Link header").to_string();
        let next = link.strip_prefix('<').and_then(|l| l.split_once(">; rel=\"next\"")).map(|(u, _)| u).unwrap();
        assert!(next.starts_with("/api/objects?limit=2&state=pending%2Cok%2Ccritical&sort=severity&cursor="), "{next}");
        let b = send(&app, "GET", next, &[], "").await;
        let ids: Vec<Value> =
            serde_json::from_slice::<Vec<Value>>(&b.body).unwrap().iter().map(|o| o["id"].clone()).collect();
        assert_eq!(ids, [json!("b"), json!("e")], "then ok, the longest in it first");
        assert!(b.headers.get("link").is_none(), "the last page has no next");
        let c = send(&app, "GET", &next.replace("sort=severity&", ""), &[], "").await;
        assert_eq!(c.status, 400, "a severity cursor does not continue an id list");

        // A selector goes on in the next page's link, in its canonical text, and the cursor continues it.
        let a = send(&app, "GET", "/api/objects?limit=1&selector=%21env%20,%20%21nope", &[], "").await;
        let link = a.headers.get("link").and_then(|v| v.to_str().ok()).expect("a Link header").to_string();
        let next = link.strip_prefix('<').and_then(|l| l.split_once(">; rel=\"next\"")).map(|(u, _)| u).unwrap();
        assert!(next.starts_with("/api/objects?limit=1&selector=%21env%2C%21nope&cursor="), "{next}");
        let mut seen = vec![];
        let mut next = Some(next.to_string());
        while let Some(path) = next {
            let page = send(&app, "GET", &path, &[], "").await;
            seen.extend(serde_json::from_slice::<Vec<Value>>(&page.body).unwrap().iter().map(|o| o["id"].clone()));
            next = page
                .headers
                .get("link")
                .and_then(|v| v.to_str().ok())
                .map(|l| l.strip_prefix('<').and_then(|l| l.split_once('>')).map(|(u, _)| u.to_string()).unwrap());
        }
        assert_eq!(seen, [json!("b"), json!("c"), json!("d")], "after a: every object without env but e");
    }

    /// The schemes that may authorize `method path` in `doc` (empty: open).
    fn schemes(doc: &Value, path: &str, method: &str) -> Vec<String> {
        let op = &doc["paths"][path][method.to_lowercase()];
        let alternatives = op.get("security").and_then(Value::as_array).cloned().unwrap_or_default();
        assert_eq!(op["responses"].get("401").is_some(), !alternatives.is_empty(), "{method} {path}");
        alternatives.iter().flat_map(|a| a.as_object().unwrap().keys().cloned()).collect()
    }

    #[test]
    fn each_token_puts_what_it_guards_behind_the_bearer_scheme_and_nothing_else() {
        let read_only = Tokens { read: Some("r".into()), ..Tokens::default() };
        let metrics_only = Tokens { metrics: Some("m".into()), ..Tokens::default() };
        for (path, method) in documented(&document(&open())) {
            let write = method != "GET";
            let scrape = path == "/metrics" || path == "/healthz";
            let page = path == "/" || path.starts_with("/assets/");
            assert!(schemes(&document(&open()), &path, &method).is_empty(), "{method} {path}");
            let w: &[&str] = if write { &["writeToken"] } else { &[] };
            assert_eq!(schemes(&document(&write_only()), &path, &method), w, "{method} {path}");
            let r: &[&str] = if write || scrape || page { &[] } else { &["readToken"] };
            assert_eq!(schemes(&document(&read_only), &path, &method), r, "{method} {path}");
            let m: &[&str] = if scrape { &["metricsToken"] } else { &[] };
            assert_eq!(schemes(&document(&metrics_only), &path, &method), m, "{method} {path}");
            // With every token a read of data takes either the read or the write token.
            let all: &[&str] = match (write, scrape, page) {
                (true, _, _) => &["writeToken"],
                (_, true, _) => &["metricsToken"],
                (_, _, true) => &[],
                _ => &["readToken", "writeToken"],
            };
            assert_eq!(schemes(&document(&every()), &path, &method), all, "{method} {path}");
        }
    }
}
