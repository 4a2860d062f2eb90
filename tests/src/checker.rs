//! What the fault tests assert at the end of every run, whatever the fault was: writes flowed through the ui
//! the whole time, and
//! - every write got an outcome (an HTTP answer: applied, not found, not owned, unavailable — never silence);
//! - no command id was applied twice (read from the log itself);
//! - no write acknowledged as applied is missing from the log's accepted events;
//! - every accepted event's writer owned its object under the epoch in force where it stands;
//! - every ui and engine, once quiet, reports the same log position and the same state for every object, and
//!   that state is the log's.
//!
//! The log is read straight from JetStream and folded by `jaque_core::LogReader`, an independent reader.

use crate::{http, poll, Jaque};
use jaque_core::log::{Effect, Read};
use jaque_core::{CommandId, LogEntry, LogReader, ObjectId, Outcome, State};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One write through the ui and how it ended.
#[derive(Clone, Debug)]
pub struct WriteRecord {
    pub key: String,
    pub object: String,
    pub op: &'static str,
    /// The HTTP status of the last attempt (0: no answer at all).
    pub status: u16,
    pub outcome: Value,
    pub attempts: u32,
}

/// Writes through a ui in a loop until stopped: puts, then check / pause / resume / ack, over a set of
/// objects, each with its own `Idempotency-Key`; a 503 is retried with the same key a few times (a retry must
/// never apply twice).
pub struct Writer {
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<WriteRecord>>>,
    thread: Option<thread::JoinHandle<()>>,
}

pub fn object_body(target: &str, object: &str) -> Value {
    json!({"probe": {"type": "http", "url": format!("{target}/{object}")}, "interval": "1s", "timeout": "800ms"})
}

/// `object_body` with the fields of `extra` (a JSON object) added or replaced.
pub fn object_body_with(target: &str, object: &str, extra: &Value) -> Value {
    let mut body = object_body(target, object);
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    body
}

impl Writer {
    pub fn start(ui: SocketAddr, name: &str, objects: Vec<String>, target: String) -> Writer {
        Writer::start_with(ui, name, objects, target, json!({}))
    }

    /// `start`, its puts with the fields of `extra` too (`object_body_with`).
    pub fn start_with(ui: SocketAddr, name: &str, objects: Vec<String>, target: String, extra: Value) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let records: Arc<Mutex<Vec<WriteRecord>>> = Arc::default();
        let (s, r, name) = (stop.clone(), records.clone(), name.to_string());
        let thread = thread::spawn(move || {
            let mut i = 0usize;
            while !s.load(Ordering::SeqCst) {
                let object = objects[i % objects.len()].clone();
                let (op, method, path, body) = match (i / objects.len()) % 5 {
                    0 => (
                        "put",
                        "PUT",
                        format!("/api/objects/{object}"),
                        Some(object_body_with(&target, &object, &extra)),
                    ),
                    1 => ("check", "POST", format!("/api/objects/{object}/actions/check"), None),
                    2 => ("pause", "POST", format!("/api/objects/{object}/actions/pause"), None),
                    3 => ("resume", "POST", format!("/api/objects/{object}/actions/resume"), None),
                    _ => ("ack", "POST", format!("/api/objects/{object}/actions/ack"), None),
                };
                let key = format!("{name}-{i}");
                let body = body.map(|b| b.to_string().into_bytes());
                let mut rec =
                    WriteRecord { key: key.clone(), object, op, status: 0, outcome: Value::Null, attempts: 0 };
                for _ in 0..4 {
                    rec.attempts += 1;
                    let resp = http(ui, method, &path, &[("Idempotency-Key", &key)], body.as_deref());
                    rec.status = resp.status;
                    rec.outcome = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
                    if resp.status != 503 {
                        break;
                    }
                    // A load generator's back-off before retrying the same key, not a synchronization.
                    thread::sleep(Duration::from_millis(200));
                }
                r.lock().unwrap().push(rec);
                i += 1;
            }
        });
        Writer { stop, records, thread: Some(thread) }
    }

    /// Writes finished so far.
    pub fn count(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    /// Writes applied so far.
    pub fn applied(&self) -> usize {
        self.records.lock().unwrap().iter().filter(|r| r.status == 200).count()
    }

    /// Stops writing and returns every write's record.
    pub fn finish(mut self) -> Vec<WriteRecord> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("writer thread");
        }
        std::mem::take(&mut *self.records.lock().unwrap())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Every entry of the log stream, in order, with its stream sequence.
pub fn read_log(nats_url: &str) -> Vec<(u64, LogEntry)> {
    read_log_raw(nats_url)
        .into_iter()
        .map(|(seq, payload)| {
            let entry = jaque_core::wire::decode_log_entry(&payload)
                .unwrap_or_else(|e| panic!("log entry {seq} does not decode: {e}"));
            (seq, entry)
        })
        .collect()
}

/// Every epoch record of the log as it was written (with any field this build's `EpochRecord` does not
/// know, such as a newer build's `format`), with its stream sequence.
pub fn epoch_records_raw(nats_url: &str) -> Vec<(u64, Value)> {
    read_log_raw(nats_url)
        .into_iter()
        .filter_map(|(seq, payload)| {
            let v: Value =
                serde_json::from_slice(&payload).unwrap_or_else(|e| panic!("log entry {seq} is not JSON: {e}"));
            (v["entry"] == "epoch").then_some((seq, v))
        })
        .collect()
}

/// Every entry of the log stream, in order, with its stream sequence, as the bytes stored.
pub fn read_log_raw(nats_url: &str) -> Vec<(u64, bytes::Bytes)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(nats_url).await.expect("checker connects to nats");
        let js = async_nats::jetstream::new(client);
        let mut stream = js.get_stream("JAQUE_LOG").await.expect("the log stream exists");
        let last = stream.info().await.expect("log stream info").state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            // A position with no message was purged; any other error (a cluster that just had a node back
            // answers "JetStream system temporarily unavailable" for a moment) is asked again, not taken for a
            // hole.
            let started = std::time::Instant::now();
            let msg = loop {
                match stream.get_raw_message(seq).await {
                    Ok(m) => break Some(m),
                    Err(e) if e.kind() == async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound => {
                        break None
                    }
                    Err(e) => {
                        assert!(started.elapsed() < crate::DEADLINE, "reading log entry {seq}: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            let Some(msg) = msg else { continue };
            out.push((seq, msg.payload));
        }
        out
    })
}

/// The checker's own reading of the log.
pub struct LogCheck {
    pub reader: LogReader,
    /// Command id -> how many accepted events applied it.
    pub applied: BTreeMap<String, u32>,
    /// Stale events by writer id.
    pub stale_by_writer: BTreeMap<String, u64>,
    pub entries: Vec<(u64, LogEntry)>,
}

/// Folds the log and checks single writer and no double application on the way.
pub fn check_log(nats_url: &str) -> LogCheck {
    let entries = read_log(nats_url);
    let mut reader = LogReader::new();
    let mut applied: BTreeMap<String, u32> = BTreeMap::new();
    let mut stale_by_writer: BTreeMap<String, u64> = BTreeMap::new();
    for (seq, entry) in &entries {
        // Single writer: an accepted event's writer is the owner under the epoch in force at its position.
        let owner_before = match entry {
            LogEntry::Event(ev) => reader.owner(&ev.object).cloned(),
            LogEntry::Epoch(_) => None,
        };
        match (entry, reader.read(*seq, entry)) {
            (LogEntry::Event(ev), Read::Event { verdict, effect }) => {
                if verdict.is_accepted() {
                    assert_eq!(
                        owner_before.as_ref(),
                        Some(&ev.writer),
                        "accepted event at {seq} by a non-owner: {ev:?}"
                    );
                } else {
                    *stale_by_writer.entry(ev.writer.id.to_string()).or_default() += 1;
                }
                if let (Some(id), Effect::Command(Outcome::Applied { .. })) = (&ev.command_id, effect) {
                    let n = applied.entry(id.to_string()).or_default();
                    *n += 1;
                    assert_eq!(*n, 1, "command {id} applied twice (again at {seq})");
                }
            }
            (LogEntry::Epoch(r), read) => {
                assert_eq!(read, Read::EpochInstalled, "epoch record {} at {seq} not installed", r.epoch)
            }
            (e, read) => panic!("unexpected read {read:?} of {e:?}"),
        }
    }
    LogCheck { reader, applied, stale_by_writer, entries }
}

/// The end-of-run checks over the writes, the log, and every process that reads the log.
pub fn check_run(nats_url: &str, writes: &[WriteRecord], readers: &[&Jaque]) -> LogCheck {
    assert!(!writes.is_empty(), "writes flowed during the run");
    let applied_writes = writes.iter().filter(|w| w.status == 200).count();
    assert!(applied_writes > 0, "some writes were applied");
    for w in writes {
        assert!(
            matches!(w.status, 200 | 404 | 503),
            "write {} ({} {}) got no proper outcome: status {} {}",
            w.key,
            w.op,
            w.object,
            w.status,
            w.outcome
        );
        let outcome = w.outcome["outcome"].as_str().unwrap_or_default();
        match w.status {
            200 => assert_eq!(outcome, "applied", "{w:?}"),
            503 => assert!(outcome == "not_owned" || outcome == "unavailable", "{w:?}"),
            _ => {}
        }
    }

    // Every reader at the log's end, with the same objects. Checks go on while this waits (an object whose
    // target came back writes its transition when its next check runs), so the log's end is read again each
    // time the readers agree, until they agree at it.
    let (views, log) = poll("every ui and engine at the log's end with the same objects", || {
        let views: Vec<(u64, Value)> = readers
            .iter()
            .map(|r| {
                let pos = r.get("/api/cluster").json()["log_position"].as_u64().unwrap_or(0);
                (pos, r.get("/api/objects").json())
            })
            .collect();
        let first = &views[0];
        if !views.iter().all(|v| v == first) {
            return None;
        }
        let log = check_log(nats_url);
        (views[0].0 == log.reader.position()).then_some((views, log))
    });

    // No acknowledged write lost: every 200 is an accepted application of its id.
    for w in writes.iter().filter(|w| w.status == 200) {
        let id = CommandId::new(w.key.as_str()).unwrap();
        assert!(
            matches!(log.reader.applied(&id), Some(Outcome::Applied { .. })),
            "write {} acknowledged as applied but not applied in the log",
            w.key
        );
        assert_eq!(log.applied.get(&w.key), Some(&1));
    }

    // The readers' state is the log's.
    for o in views[0].1.as_array().expect("object list") {
        let id = ObjectId::new(o["id"].as_str().unwrap()).unwrap();
        let view = log.reader.object(&id).unwrap_or_else(|| panic!("{id} shown but not in the log"));
        let state: State = serde_json::from_value(o["state"].clone()).unwrap();
        assert_eq!(state, view.state, "{id}");
        assert_eq!(o["paused"].as_bool(), Some(view.paused), "{id}");
    }
    assert_eq!(views[0].1.as_array().unwrap().len(), log.reader.objects().len());
    let count = |s: u16| writes.iter().filter(|w| w.status == s).count();
    eprintln!(
        "checker: {} writes ({} applied, {} not found, {} unavailable or not owned, {} retried); log of {} entries, \
         epoch {}, {} stale events {:?}; {} readers agree at position {}",
        writes.len(),
        count(200),
        count(404),
        count(503),
        writes.iter().filter(|w| w.attempts > 1).count(),
        log.entries.len(),
        log.reader.epoch(),
        log.reader.counters.stale_epoch_total,
        log.stale_by_writer,
        readers.len(),
        views[0].0
    );
    log
}

/// An HTTP server for http checks that counts requests per path and can be switched to failing (500).
pub struct CountingTarget {
    pub addr: SocketAddr,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    failing: Arc<AtomicBool>,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Per mille of requests answered 500 at random (a hash of the request's number), besides `failing`.
    fail_permille: Arc<std::sync::atomic::AtomicU64>,
    /// Requests answered 500 so far.
    failed: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl CountingTarget {
    pub fn start() -> CountingTarget {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let hits: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let failing = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let delay_ms: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let fail_permille: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let failed: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let (h, f, s, d) = (hits.clone(), failing.clone(), stop.clone(), delay_ms.clone());
        let (fp, fd) = (fail_permille.clone(), failed.clone());
        let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok((stream, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let (h, f, d, fp, fd) = (h.clone(), f.clone(), d.clone(), fp.clone(), fd.clone());
                let n = requests.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
                    // Read the headers to the blank line.
                    let mut l = String::new();
                    while reader.read_line(&mut l).is_ok_and(|n| n > 2) {
                        l.clear();
                    }
                    *h.lock().unwrap().entry(path).or_default() += 1;
                    // A slow service: the check stays in flight this long.
                    thread::sleep(Duration::from_millis(d.load(Ordering::SeqCst)));
                    // A blip: splitmix64 of the request's number, so a run fails the same requests each time.
                    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    let blip = (z ^ (z >> 31)) % 1000 < fp.load(Ordering::SeqCst);
                    let fail = f.load(Ordering::SeqCst) || blip;
                    if fail {
                        fd.fetch_add(1, Ordering::SeqCst);
                    }
                    let status = if fail { "500 Internal Server Error" } else { "200 OK" };
                    let mut s = stream;
                    let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                });
            }
        });
        CountingTarget { addr, hits, failing, delay_ms, fail_permille, failed, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self, object: &str) -> u64 {
        self.hits.lock().unwrap().get(object).copied().unwrap_or(0)
    }

    pub fn all_hits(&self) -> BTreeMap<String, u64> {
        self.hits.lock().unwrap().clone()
    }

    /// Answers every request only after `ms` milliseconds.
    pub fn set_delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Answers `permille` of the requests 500 at random (the rest as `set_failing` says).
    pub fn set_fail_permille(&self, permille: u64) {
        self.fail_permille.store(permille, Ordering::SeqCst);
    }

    /// The requests answered 500 so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
}

impl Drop for CountingTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Switches a counting target between 200 and 500 in a thread until stopped, so http checks flap and every
/// object keeps making transitions: a load generator's pace, not a synchronization. The period (twice
/// `every`) must not divide the checks' interval, or each object would see the same answer every time.
pub struct Flapper {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Flapper {
    pub fn start(target: Arc<CountingTarget>, every: Duration) -> Flapper {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            let mut failing = false;
            while !s.load(Ordering::SeqCst) {
                failing = !failing;
                target.set_failing(failing);
                thread::sleep(every);
            }
            target.set_failing(false);
        });
        Flapper { stop, thread: Some(thread) }
    }

    /// Stops flapping and leaves the target answering 200.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Flapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A notifier's start record for an endpoint (`notify.start.<endpoint>` in the membership bucket): the log
/// position its notifications begin after.
pub fn notify_start_record(nats_url: &str, hook: &str) -> u64 {
    let key = format!("notify.start.{}", jaque_core::notifier::EndpointId::of(hook));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(nats_url).await.unwrap());
        let kv = js.get_key_value("jaque_membership").await.unwrap();
        let v = kv.get(&key).await.unwrap().unwrap_or_else(|| panic!("no start record {key}"));
        String::from_utf8(v.to_vec()).unwrap().parse().unwrap()
    })
}
