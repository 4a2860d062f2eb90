//! `-data-dir DIR`: one process, `-target engine,worker,ui -queue memory`, whose log, snapshots and progress
//! records survive a SIGTERM, a kill -9 under load and a torn tail; a second process on the same directory is
//! refused; compaction deletes the log's old segment files.

use jaque_tests::{jaque_refuses_config, poll, Jaque, Target};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

fn one(name: &str, dir: &Path, extra: &[&str]) -> Jaque {
    let dir = dir.to_str().unwrap();
    let args = [&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", dir][..], extra].concat();
    Jaque::start(name, &args)
}

fn ready(name: &str, dir: &Path, extra: &[&str]) -> Jaque {
    let j = one(name, dir, extra);
    j.wait_ready();
    j
}

fn objects(j: &Jaque) -> BTreeMap<String, Value> {
    let list = j.get("/api/objects");
    assert_eq!(list.status, 200, "{}", list.text());
    list.json().as_array().unwrap().iter().map(|o| (o["id"].as_str().unwrap().to_string(), o.clone())).collect()
}

fn epoch(j: &Jaque) -> u64 {
    j.metric("jaque_engine_epoch").unwrap_or(0.0) as u64
}

fn put(j: &Jaque, id: &str, body: &Value) {
    let r = j.put(&format!("/api/objects/{id}"), body);
    assert_eq!(r.status, 200, "{id}: {}", r.text());
}

/// What an object is, less who owns it and under which epoch (a restart is a new owner and epoch).
fn kept(o: &Value) -> Value {
    json!([o["definition"], o["state"], o["paused"], o["acknowledged"], o["last_transition"], o["last_seq"]])
}

/// The segment files of the log, by first position.
fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let first = path.file_name()?.to_str()?.strip_suffix(".seg")?.parse().ok()?;
            Some((first, path))
        })
        .collect();
    out.sort();
    out
}

fn log_bytes(dir: &Path) -> u64 {
    // A segment compaction deletes between the listing and its size counts nothing.
    segments(dir).iter().map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len())).sum()
}

#[test]
fn after_sigterm_a_restart_has_every_object_and_its_state_and_the_epoch_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = ready("jaque", dir.path(), &[]);
    let target = Target::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: refuses
    put(&j, "web", &json!({"probe": {"type": "http", "url": target.url()}, "interval": "1s", "timeout": "500ms"}));
    put(&j, "db", &json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1s", "timeout": "500ms"}));
    put(&j, "quiet", &json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1h"}));
    poll("web ok and db critical", || {
        let o = objects(&j);
        (o["web"]["state"] == "ok" && o["db"]["state"] == "critical" && o["quiet"]["state"] == "critical").then_some(())
    });
    for (id, action) in [("db", "ack"), ("quiet", "pause")] {
        let r = j.request("POST", &format!("/api/objects/{id}/actions/{action}"), &[], None);
        assert_eq!(r.status, 200, "{id} {action}: {}", r.text());
    }
    let before = objects(&j);
    assert_eq!((before["db"]["acknowledged"].clone(), before["quiet"]["paused"].clone()), (json!(true), json!(true)));
    let epoch_before = epoch(&j);
    assert!(epoch_before >= 1);
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());

    let j = ready("jaque (restarted)", dir.path(), &[]);
    let after = objects(&j);
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (id, o) in &before {
        assert_eq!(kept(&after[id]), kept(o), "{id} after the restart");
    }
    // The new incarnation is a new member: one new epoch after the last one stored, and it owns everything.
    poll("the epoch after the stored one", || (epoch(&j) == epoch_before + 1).then_some(()));
    let r = j.put("/api/objects/new", &json!({"probe": {"type": "tcp", "addr": closed.to_string()}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["epoch"], epoch_before + 1);
}

/// A client that PUTs one object after another, each write with its own Idempotency-Key and a definition that
/// names its number, as fast as the answers come; an unanswered write is sent again with the same key until
/// it is answered. It records the last acknowledged number per object.
struct Load {
    addr: Arc<Mutex<SocketAddr>>,
    acked: Arc<Mutex<BTreeMap<String, u64>>>,
    count: Arc<AtomicU64>,
    /// The write being sent, not acknowledged yet.
    in_flight: Arc<AtomicU64>,
    pause: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

const LOAD_OBJECTS: u64 = 40;

fn load_object(n: u64) -> String {
    format!("o{}", n % LOAD_OBJECTS)
}

/// The write number a definition names.
fn load_number(o: &Value) -> u64 {
    let url = o["definition"]["probe"]["url"].as_str().unwrap();
    url.rsplit("/w").next().unwrap().parse().unwrap()
}

impl Load {
    fn start(addr: SocketAddr) -> Load {
        let mut load = Load {
            addr: Arc::new(Mutex::new(addr)),
            acked: Arc::default(),
            count: Arc::default(),
            in_flight: Arc::default(),
            pause: Arc::default(),
            idle: Arc::default(),
            stop: Arc::default(),
            thread: None,
        };
        let (addr, acked, count, in_flight) =
            (load.addr.clone(), load.acked.clone(), load.count.clone(), load.in_flight.clone());
        let (pause, idle, stop) = (load.pause.clone(), load.idle.clone(), load.stop.clone());
        let thread = thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if pause.load(Ordering::SeqCst) {
                    idle.store(true, Ordering::SeqCst);
                    thread::yield_now();
                    continue;
                }
                idle.store(false, Ordering::SeqCst);
                in_flight.store(n, Ordering::SeqCst);
                // Port 9 refuses: each put's first check is one quick transition, and then hourly.
                let body =
                    json!({"probe": {"type": "http", "url": format!("http://127.0.0.1:9/w{n}")}, "interval": "1h"});
                let to = *addr.lock().unwrap();
                let key = format!("load-{n}");
                let r = jaque_tests::http(
                    to,
                    "PUT",
                    &format!("/api/objects/{}", load_object(n)),
                    &[("Idempotency-Key", &key)],
                    Some(body.to_string().as_bytes()),
                );
                if r.status == 200 {
                    acked.lock().unwrap().insert(load_object(n), n);
                    count.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                }
            }
        });
        load.thread = Some(thread);
        load
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Lets the write in flight end (answered or not) and holds the next one.
    fn hold(&self) {
        self.pause.store(true, Ordering::SeqCst);
        poll("the load to hold", || self.idle.load(Ordering::SeqCst).then_some(()));
    }

    fn resume(&self, addr: SocketAddr) {
        *self.addr.lock().unwrap() = addr;
        self.pause.store(false, Ordering::SeqCst);
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn kill_9_under_a_write_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = ready("jaque", dir.path(), &[]);
    let load = Load::start(j.addr);
    for round in 0..8 {
        // Killed in the middle of the load: after some more writes were acknowledged, with the next in flight.
        let from = load.count();
        poll("more writes acknowledged", || (load.count() >= from + 100).then_some(()));
        j.proc.signal("KILL");
        j.proc.wait_exit();
        load.hold();
        let acked = load.acked.lock().unwrap().clone();
        let unanswered = load.in_flight.load(Ordering::SeqCst);

        j = ready(&format!("jaque (restart {round})"), dir.path(), &[]);
        let present = objects(&j);
        for (object, n) in &acked {
            let o = present.get(object).unwrap_or_else(|| panic!("round {round}: {object} (write {n}) is gone"));
            let found = load_number(o);
            // The write that was in flight at the kill may have landed without its answer; nothing else differs.
            let landed = load_object(unanswered) == *object && found == unanswered;
            assert!(found == *n || landed, "round {round}: {object} holds write {found}, acknowledged {n}");
        }
        assert_eq!(acked.len() as u64, LOAD_OBJECTS.min(load.count()));
        load.resume(j.addr);
    }
    let from = load.count();
    poll("writes to go on after the last restart", || (load.count() > from).then_some(()));
}

#[test]
fn a_torn_tail_is_cut_at_start_and_everything_before_it_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut j = ready("jaque", dir.path(), &[]);
    let ids: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
    for id in &ids {
        put(&j, id, &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}));
    }
    // Every first check is in the log too, so the last entry is one of those transitions.
    poll("every object checked", || objects(&j).values().all(|o| o["state"] == "critical").then_some(()));
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());

    let (_, newest) = segments(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&newest).unwrap().set_len(len - 3).unwrap();

    let mut j = one("jaque (restarted)", dir.path(), &[]);
    let line = j.proc.wait_for_line("torn tail");
    assert!(line.contains("cut off"), "{line}");
    j.wait_ready();
    let present = objects(&j);
    for id in &ids {
        assert_eq!(present[id]["definition"]["probe"]["addr"], "127.0.0.1:9", "{id}");
    }
    let r = j.put("/api/objects/after", &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}}));
    assert_eq!(r.status, 200, "{}", r.text());
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());

    // Damage before good entries is not a torn tail: refused, naming the file and the byte.
    let (_, oldest) = segments(dir.path()).remove(0);
    let mut bytes = std::fs::read(&oldest).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&oldest, &bytes).unwrap();
    let d = dir.path().to_str().unwrap();
    let out = jaque_refuses_config(&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", d]);
    assert!(out.contains(&format!("{} is damaged at byte", oldest.display())), "{out}");
}

#[test]
fn a_data_dir_in_use_or_unusable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let j = ready("jaque", dir.path(), &[]);
    let out = jaque_refuses_config(&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", d]);
    assert!(out.contains("is in use by another jaque process") && out.contains(&j.proc.pid().to_string()), "{out}");
    assert_eq!(j.get("/healthz").status, 200, "the first process goes on");

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let f = file.to_str().unwrap();
    let out = jaque_refuses_config(&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", f]);
    assert!(out.contains("is not a directory"), "{out}");
    let under = format!("{f}/data");
    let out = jaque_refuses_config(&["-target", "engine,worker,ui", "-queue", "memory", "-data-dir", &under]);
    assert!(out.contains("cannot be made"), "{out}");
    let nats = ["-queue", "nats://127.0.0.1:4222", "-coordination", "nats://127.0.0.1:4222"];
    let out = jaque_refuses_config(&[&["-target", "engine,worker", "-data-dir", d][..], &nats].concat());
    assert!(out.contains("is for -coordination memory"), "{out}");
}

#[test]
fn compaction_deletes_old_segment_files_while_writes_go_on_and_a_restart_has_every_object() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-snapshot-every", "5", "-log-retention", "0s"];
    let mut j = ready("jaque", dir.path(), &flags);
    let mut sizes = Vec::new();
    for batch in 0..3 {
        for i in 0..100 {
            put(
                &j,
                &format!("o{batch}-{i}"),
                &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}),
            );
        }
        // Every object of the batch checked once (its first check comes within 10 s, spread by its id).
        poll("the batch checked", || (j.get("/api/summary").json()["states"]["pending"] == 0).then_some(()));
        // Each batch is ~200 entries (a put and its first check's transition) in ~40 segments; what stays is the
        // newest few. Transitions that come in a burst while a snapshot is being written share one segment
        // until the next snapshot: the files are small again once it is stored.
        let (kept, bytes) = poll("old segments deleted and the log's files under 20,000 bytes", || {
            let segs = segments(dir.path());
            let bytes = log_bytes(dir.path());
            (segs.len() <= 3 && segs[0].0 > 1 && bytes < 20_000).then_some((segs, bytes))
        });
        sizes.push(bytes);
        assert!(kept[0].0 > 150 * batch, "batch {batch}: segments from {} on", kept[0].0);
    }
    // The newest two (a third exists for a moment, between a new one's rename and the oldest's removal).
    poll("two snapshots", || {
        let names = std::fs::read_dir(dir.path().join("snapshots")).unwrap();
        (names.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "snap")).count() == 2)
            .then_some(())
    });
    eprintln!("log bytes after each batch: {sizes:?}");
    // Every first check in too, so nothing changes between this reading and the stop.
    let before = poll("every object checked", || {
        let o = objects(&j);
        o.values().all(|o| o["state"] == "critical").then_some(o)
    });
    assert_eq!(before.len(), 300);
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success());

    let j = ready("jaque (restarted)", dir.path(), &flags);
    assert!(j.proc.output.text().contains("starting from a snapshot"));
    let after = objects(&j);
    assert_eq!(after.len(), 300);
    for (id, o) in &before {
        assert_eq!(kept(&after[id]), kept(o), "{id} after the restart");
    }
}
