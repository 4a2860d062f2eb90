//! Secrets stay secret (issue 15, point 3), against real processes: an http probe whose url carries a password
//! really authenticates with it (a local server that demands it answers OK), the log keeps it as given, and no
//! surface anyone reads shows it: every API read, the event stream the status page follows, the 400 of a
//! refused write, the sink's SQLite file, the webhook bodies, `/metrics`, and everything each process wrote to
//! stdout and stderr at `-log-level trace`.

use base64::Engine as _;
use jaque_core::{EventBody, LogEntry, Probe};
use jaque_tests::checker::read_log;
use jaque_tests::webhook::Receiver;
use jaque_tests::{poll, Jaque, Nats, Response};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const PASSWORD: &str = "s3cr3t-pass";

/// An HTTP server that answers 200 only to `Authorization: Basic user:s3cr3t-pass`, 401 to anything else, and
/// counts the requests it let in. Stopped, its port refuses (so the probe's client fails with an error that
/// names the url).
struct BasicAuthTarget {
    addr: SocketAddr,
    authenticated: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl BasicAuthTarget {
    fn start() -> BasicAuthTarget {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (authenticated, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, flag) = (authenticated.clone(), stop.clone());
        let credentials = base64::engine::general_purpose::STANDARD.encode(format!("user:{PASSWORD}"));
        // The head is compared in lower case (header names are case-insensitive).
        let want = format!("basic {credentials}").to_ascii_lowercase();
        let thread = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let ok = head.lines().any(|l| l.strip_prefix("authorization:").is_some_and(|v| v.trim() == want));
                let answer: &[u8] = if ok {
                    count.fetch_add(1, Ordering::Relaxed);
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                } else {
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"t\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                };
                let _ = s.write_all(answer);
            }
        });
        BasicAuthTarget { addr, authenticated, stop, thread: Some(thread) }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BasicAuthTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

fn state(ui: &Jaque, id: &str) -> Value {
    ui.get(&format!("/api/objects/{id}")).json()["state"].clone()
}

#[test]
fn a_probe_password_authenticates_and_no_surface_shows_it() {
    let nats = Nats::start();
    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", store_dir.path().join("sink.db").display());
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    // A second endpoint whose url carries credentials too, on a port nobody listens on: its failed deliveries
    // are logged (with the url) and retried.
    let closed_hook = format!("http://hookuser:{PASSWORD}@127.0.0.1:9/hook");
    let nats_args = ["-coordination", nats.url.as_str(), "-log-level", "trace"];
    let engine = Jaque::start(
        "engine",
        &[&["-target", "engine,worker", "-queue", &nats.url, "-id", "e1"], &nats_args[..]].concat(),
    );
    let ui =
        Jaque::start("ui", &[&["-target", "ui,sink", "-sink-store", &store, "-id", "u1"], &nats_args[..]].concat());
    let notifier = Jaque::start(
        "notifier",
        &[
            &["-target", "notifier", "-id", "n1", "-notify-webhook", &hook, "-notify-webhook", &closed_hook],
            &nats_args[..],
        ]
        .concat(),
    );
    let mut procs = [engine, ui, notifier];
    for p in &procs {
        p.wait_ready();
    }
    let ui = &procs[1];
    // The status page's stream, followed from before the first write until the ui stops.
    let stream = follow_stream(ui.addr);

    let mut target = BasicAuthTarget::start();
    let url = format!("http://user:{PASSWORD}@{}/", target.addr);
    let shown = format!("http://***@{}/", target.addr);
    let mut answers: Vec<Response> = Vec::new();
    let put = |id: &str, probe: Value| {
        ui.request(
            "PUT",
            &format!("/api/objects/{id}"),
            &[("Idempotency-Key", &format!("put-{id}"))],
            Some(json!({"probe": probe, "interval": "1s", "timeout": "900ms"}).to_string().as_bytes()),
        )
    };
    let r = put("web", json!({"type": "http", "url": url}));
    assert_eq!(r.status, 200, "{}", r.text());
    answers.push(r);
    let r = put("wrong", json!({"type": "http", "url": format!("http://user:not-it@{}/", target.addr)}));
    assert_eq!(r.status, 200, "{}", r.text());
    answers.push(r);
    // Refusals that quote the url: a scheme the probe does not take, a value in the wrong field.
    for probe in [
        json!({"type": "http", "url": format!("ftp://user:{PASSWORD}@{}/", target.addr)}),
        json!({"type": "http", "url": "http://h/", "expect_status": url}),
    ] {
        let r = put("refused", probe);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("***@"), "the refusal names the url, redacted: {}", r.text());
        answers.push(r);
    }

    // The check used the credentials: the server let it in, and a wrong password is refused.
    poll("web ok, wrong critical", || (state(ui, "web") == "ok" && state(ui, "wrong") == "critical").then_some(()));
    assert!(target.authenticated.load(Ordering::Relaxed) >= 1);
    assert_eq!(ui.get("/api/objects/wrong").json()["last_transition"]["output"], "HTTP 401");
    // A transition whose output comes from the client's error, which names the url.
    target.stop();
    poll("web critical", || (state(ui, "web") == "critical").then_some(()));
    let web = ui.get("/api/objects/web").json();
    assert_eq!(web["definition"]["probe"]["url"], shown.as_str(), "{web}");
    let output = web["last_transition"]["output"].as_str().unwrap().to_string();
    assert!(output.contains(&shown), "the error names the url redacted: {output}");
    let r = ui.request("POST", "/api/objects/web/actions/ack", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    answers.push(r);

    // Everything downstream has it: two deliveries for web, the sink's rows.
    let deliveries = poll("web's two transitions delivered", || {
        let d = rx.deliveries("/hook");
        (d.iter().filter(|d| d.body["object"] == "web").count() >= 2).then_some(d)
    });
    assert!(deliveries.iter().any(|d| d.body["output"] == output.as_str()), "{deliveries:?}");
    let history = poll("web's history in the store", || {
        let h = ui.get("/api/objects/web/history?limit=1000");
        let events = h.json()["events"].as_array()?.clone();
        let critical = events.iter().any(|e| e["to_state"] == "critical");
        let acked = events.iter().any(|e| e["type"] == "ack");
        (critical && acked).then_some(h)
    });
    let put_event = history.json()["events"].as_array().unwrap().iter().find(|e| e["type"] == "put").cloned();
    assert_eq!(put_event.unwrap()["definition"]["probe"]["url"], shown.as_str());
    poll("the notifier tried the closed endpoint", || {
        procs[2].proc.output.text().contains("delivery failed; it will be retried").then_some(())
    });

    // The log keeps the url as given: the probe needs it.
    let log = read_log(&nats.url);
    let kept = log.iter().any(|(_, e)| match e {
        LogEntry::Event(ev) => match &ev.body {
            EventBody::Put { def } => matches!(&def.probe, Probe::Http { url: u, .. } if u.expose() == url),
            _ => false,
        },
        _ => false,
    });
    assert!(kept, "the log holds the definition as given");

    // Every surface, read now.
    let mut surfaces: Vec<(String, String)> = Vec::new();
    for path in [
        "/api/objects",
        "/api/objects?sort=severity&state=critical,unknown,warning,pending,ok",
        "/api/objects?q=web",
        "/api/objects/web",
        "/api/objects/wrong",
        "/api/objects/web/history?limit=1000",
        "/api/objects/wrong/history?limit=1000",
        "/api/summary",
        "/api/cluster",
        "/healthz",
    ] {
        surfaces.push((format!("GET {path}"), ui.get(path).text()));
    }
    for p in &procs {
        surfaces.push((format!("{} /metrics", p.proc.name), p.get("/metrics").text()));
    }
    for (i, a) in answers.iter().enumerate() {
        surfaces.push((format!("write answer {i}"), format!("{:?} {}", a.headers, a.text())));
    }
    for d in rx.deliveries("/hook") {
        surfaces.push((format!("webhook delivery {}", d.id), d.raw.clone()));
    }
    // Every process's output, to its last line.
    for p in procs.iter_mut() {
        p.proc.signal("TERM");
        p.proc.wait_exit();
        surfaces.push((format!("{} stdout+stderr", p.proc.name), p.proc.output.text()));
    }
    let stream = stream.join().unwrap();
    assert!(stream.contains("event: change") && stream.contains("\"id\":\"web\""), "{stream}");
    surfaces.push(("GET /api/stream".into(), stream));
    // The SQLite file byte for byte (the database, and its WAL if any is left), and its rows.
    let mut rows = 0;
    for f in std::fs::read_dir(store_dir.path()).unwrap() {
        let f = f.unwrap().path();
        surfaces.push((f.display().to_string(), String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned()));
    }
    for (def,) in sqlite_texts(&store, "SELECT definition FROM events WHERE definition IS NOT NULL UNION ALL SELECT definition FROM objects WHERE definition IS NOT NULL") {
        assert!(def.contains(&shown) || !def.contains("http"), "{def}");
        rows += 1;
        surfaces.push(("sqlite definition".into(), def));
    }
    assert!(rows >= 4, "definitions stored: {rows}");
    for (out,) in sqlite_texts(&store, "SELECT output FROM events WHERE output IS NOT NULL") {
        surfaces.push(("sqlite output".into(), out));
    }
    let notifier_log = &surfaces.iter().find(|(name, _)| name == "notifier stdout+stderr").unwrap().1;
    assert!(notifier_log.contains("http://***@127.0.0.1:9/hook"), "the webhook url is named, redacted");

    let leaks: Vec<&String> =
        surfaces.iter().filter(|(_, text)| text.contains(PASSWORD)).map(|(name, _)| name).collect();
    for (name, text) in &surfaces {
        if text.contains(PASSWORD) {
            let line = text.lines().find(|l| l.contains(PASSWORD)).unwrap_or_default();
            eprintln!("{name} shows the password: {line}");
        }
    }
    assert!(leaks.is_empty(), "the password is shown by {leaks:?}");
    assert!(surfaces.len() > 20);
}

/// Reads `GET /api/stream` from `ui` in a thread until the ui closes it; the thread answers what it read.
fn follow_stream(ui: SocketAddr) -> thread::JoinHandle<String> {
    let mut conn = std::net::TcpStream::connect(ui).unwrap();
    conn.write_all(b"GET /api/stream HTTP/1.1\r\nHost: ui\r\nAccept: text/event-stream\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "the stream is answered");
    thread::spawn(move || {
        let mut text = Vec::new();
        let _ = conn.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// One text column of every row `sql` selects from the SQLite store, read with a client of the test's own.
fn sqlite_texts(url: &str, sql: &str) -> Vec<(String,)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let opts = url.parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().read_only(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        let rows = sqlx::query_as(sql).fetch_all(&pool).await.unwrap();
        pool.close().await;
        rows
    })
}
