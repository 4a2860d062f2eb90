//! jaque-bench: the numbers operators ask for, each beside the floor it is built on, measured in one run on
//! this machine against real processes and a real nats-server (scripts/bench.sh adds the core and simulator
//! figures and prints one table). Benchmarks, not tests: nothing here fails on a timing.
//!
//! P1 ui write -> applied latency beside raw NATS request/reply + JetStream publish;
//! P2 writes per second through ingress with three engines beside raw pipelined NATS requests;
//! P3 failover after kill -9 and after SIGTERM, as a multiple of the ttl;
//! P8 engine resident memory with 100k objects; `p8m`: an engine, a ui, a sink and a notifier at 1,000,000;
//! P9 checks one engine and one worker sustain (tcp probes, 1k/10k/30k objects every second, both queues),
//! their CPU per check and how late they leave their slots, beside a bare loop's connects;
//! P10 a transition storm (50,000 objects whose target dies at once) until a ui shows it all, beside a bare
//! client's appends of as many events;
//! `cluster`: P1 and P3 again on a 3-node NATS cluster with `-log-replicas 3`, and writes applied again after
//! the loss of the node leading the log.
//! P12 notification latency (a transition appended -> the webhook receiver) beside a log delivery plus one
//! bare HTTP POST, and the deliveries per second one notifier sustains to one endpoint.
//! P11 events per second a sink writes into PostgreSQL during a storm of 10,000 transitions, beside batched
//! multi-row inserts of the same rows by a bare client, and the sink's lag (p99) meanwhile.
//! P13 `-data-dir` write -> applied latency of one process (its event fsync'd before the answer), beside a bare
//! fsync'd append of the same bytes to a file on the same disk.
//! P14 a new engine's time to ready with 1,000 objects behind a history of 1,000,000 events, beside the same
//! with 1,000 (start time independent of history: snapshots).
//! P15 the log stream's size and every process's resident memory over a run of 1,000,000 transitions.
//! P18 alert noise: notifications per 1,000 checks of healthy targets failing 1 % of probes, default rules beside
//! every change hard at once.
//! P19 `jaque apply -f` of 10,000 objects from nothing, and again with 100 changed, beside bare PUTs (and the list
//! every apply reads) in the same run.
//! P16 pages of `GET /api/objects` (problems first, one state, a search) and `GET /api/summary` at 100,000
//! objects, beside `/healthz` of the same process.

use futures_util::StreamExt;
use jaque_core::role::{After, Owned};
use jaque_core::sink::{event_row, EventRow};
use jaque_core::State;
use jaque_core::{
    wire, Command, CommandId, CommandKind, EpochRecord, Event, EventBody, LogEntry, MemberId, MemberRef, ObjectDef,
    ObjectId, Outcome, Probe, Time,
};
use jaque_tests::checker::{object_body, CountingTarget};
use jaque_tests::nats_cluster::NatsCluster;
use jaque_tests::webhook::{sign, Receiver};
use jaque_tests::{http, poll, Jaque, Nats, Postgres};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TTL_SECS: u64 = 3;

fn pct(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Raw NATS floors on `url`, sequential: request/reply round trips, JetStream publish acks, and a publish
/// until an ordered push consumer of the stream delivers it (what an engine's read-back of its own event needs).
fn floors(url: &str, n: usize, replicas: usize) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>) {
    rt().block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        echo_responder(&client, "bench.echo").await;
        let mut rr = Vec::with_capacity(n);
        for _ in 0..n {
            let s = Instant::now();
            client.request("bench.echo", "x".into()).await.unwrap();
            rr.push(s.elapsed());
        }
        let js = async_nats::jetstream::new(client.clone());
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH".into(),
            subjects: vec!["bench.js".into()],
            storage: async_nats::jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .unwrap();
        let mut pubs = Vec::with_capacity(n);
        let payload = bytes_of(200);
        for _ in 0..n {
            let s = Instant::now();
            js.publish("bench.js", payload.clone().into()).await.unwrap().await.unwrap();
            pubs.push(s.elapsed());
        }
        let mut follow = follow_new(&js, &client, "BENCH").await;
        let mut readback = Vec::with_capacity(n);
        for _ in 0..n {
            let s = Instant::now();
            let _ack = js.publish("bench.js", payload.clone().into()).await.unwrap();
            follow.next().await.unwrap().unwrap();
            readback.push(s.elapsed());
        }
        (rr, pubs, readback)
    })
}

/// An ordered push consumer of what is published to `stream` from now on.
async fn follow_new(
    js: &async_nats::jetstream::Context,
    client: &async_nats::Client,
    stream: &str,
) -> async_nats::jetstream::consumer::push::Ordered {
    js.get_stream(stream)
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .unwrap()
        .messages()
        .await
        .unwrap()
}

/// Answers every request on `subject` with its own payload, as fast as a responder can.
async fn echo_responder(client: &async_nats::Client, subject: &'static str) {
    let mut sub = client.subscribe(subject).await.unwrap();
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if let Some(r) = m.reply {
                let _ = responder.publish(r, m.payload).await;
            }
        }
    });
    client.flush().await.unwrap();
}

fn bytes_of(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}

/// Where the processes of a run connect: `url` as jaque's flags take it (one server, or a cluster's list),
/// `raw` one server for the benchmark's own client, and flags every engine gets (`-log-replicas 3`).
struct Servers {
    url: String,
    raw: String,
    engine_flags: Vec<&'static str>,
    /// Replicas of the floor's stream: those of jaque's log.
    replicas: usize,
}

impl Servers {
    fn one(nats: &Nats) -> Servers {
        Servers { url: nats.url.clone(), raw: nats.url.clone(), engine_flags: Vec::new(), replicas: 1 }
    }
}

fn engine(s: &Servers, id: &str) -> Jaque {
    engine_as(s, id, "engine")
}

/// An engine process with `-target <target>` (e.g. `engine,ui` to serve the API too).
fn engine_as(s: &Servers, id: &str, target: &str) -> Jaque {
    let ttl = format!("{TTL_SECS}s");
    let mut args =
        vec!["-target", target, "-queue", &s.url, "-coordination", &s.url, "-id", id, "-heartbeat-ttl", &ttl];
    args.extend_from_slice(&s.engine_flags);
    Jaque::start(id, &args)
}

/// A write through the ui. The object is checked once when it is defined and then hourly, so the checks of
/// earlier writes do not load the cluster while later ones are timed.
fn put(ui: &Jaque, object: &str, key: &str, target: &str) -> u16 {
    let body = quiet_body(target, object).to_string();
    http(ui.addr, "PUT", &format!("/api/objects/{object}"), &[("Idempotency-Key", key)], Some(body.as_bytes())).status
}

fn quiet_body(target: &str, object: &str) -> serde_json::Value {
    let mut body = object_body(target, object);
    body["interval"] = "1h".into();
    body
}

/// A put command for a new object, as the ui submits it (hop 0).
fn put_command(id: String, object: String, target: &str) -> Command {
    let def = ObjectDef {
        probe: Probe::Http { url: format!("{target}/{object}").into(), expect_status: None },
        interval_ms: 3_600_000,
        timeout_ms: 800,
        ..ObjectDef::UNSET
    };
    Command {
        id: CommandId::new(id).unwrap(),
        object: ObjectId::new(object).unwrap(),
        kind: CommandKind::Put { def },
        hop: 0,
    }
}

fn owned_by(ui: &Jaque, id: &str) -> Vec<String> {
    let list = ui.get("/api/objects").json();
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["owner"] == id)
        .filter_map(|o| o["id"].as_str().map(String::from))
        .collect()
}

/// Time from `act` until the ui's epoch no longer lists `gone`, and until a write to one of its objects is
/// applied again. The two are watched by separate threads, so a slow write does not delay the epoch reading.
fn failover(ui: &Jaque, gone: &str, target: &str, act: impl FnOnce()) -> (Duration, Duration) {
    let victim = owned_by(ui, gone).into_iter().next().expect("the engine owns something");
    let first_ok = Mutex::new(None::<Duration>);
    let attempts = AtomicU64::new(0);
    let (victim, first_ok, attempts) = (&victim, &first_ok, &attempts);
    let start = Instant::now();
    act();
    thread::scope(|s| {
        let epoch = s.spawn(|| loop {
            if !ui.epoch_members().contains(gone) {
                return start.elapsed();
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no new epoch within a minute");
            thread::sleep(Duration::from_millis(2));
        });
        // Writers to the departed engine's object, a new attempt every 20 ms from one of 8 threads: the first
        // write applied is when the object is writable again, whatever happened to attempts caught mid-way.
        let write = s.spawn(move || {
            thread::scope(|w| {
                for t in 0..8u64 {
                    w.spawn(move || {
                        thread::sleep(Duration::from_millis(20 * t));
                        while first_ok.lock().unwrap().is_none() {
                            assert!(start.elapsed() < Duration::from_secs(60), "no write applied within a minute");
                            let i = attempts.fetch_add(1, Ordering::SeqCst);
                            if put(ui, victim, &format!("failover-{gone}-{i}"), target) == 200 {
                                let mut f = first_ok.lock().unwrap();
                                let at = start.elapsed();
                                *f = Some(f.map_or(at, |x| x.min(at)));
                            }
                            thread::sleep(Duration::from_millis(160));
                        }
                    });
                }
            });
            first_ok.lock().unwrap().expect("a write was applied")
        });
        (epoch.join().unwrap(), write.join().unwrap())
    })
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Writes `n` objects straight into a fresh log (as a departed engine would have), object `i` then moved to
/// `state(i)` by a transition when that is not pending; returns the resident memory of the engine that made
/// the log, before it left. The objects are tcp checks of a closed port, daily, defined an hour ago: nothing
/// is due when a new engine takes over.
fn load_log(servers: &Servers, n: usize, state: impl Fn(usize) -> jaque_core::State) -> u64 {
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: 86_400_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    };
    let at = unix_ms() - 3_600_000;
    load_objects(servers, n, |_| def.clone(), |_| at, state)
}

/// `load_log` with object `i` defined by `def(i)` at `defined(i)` (the anchor of its check slots).
fn load_objects(
    servers: &Servers,
    n: usize,
    def: impl Fn(usize) -> ObjectDef,
    defined: impl Fn(usize) -> u64,
    state: impl Fn(usize) -> jaque_core::State,
) -> u64 {
    // The first engine creates the log stream and the membership bucket, then leaves.
    let mut warmup = engine(servers, "warmup");
    warmup.wait_ready();
    let idle_rss = rss_kib(warmup.proc.pid());
    warmup.proc.signal("TERM");
    warmup.proc.wait_exit();
    rt().block_on(async {
        let client = async_nats::connect(&servers.url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let loader = MemberRef { id: MemberId::new("loader").unwrap(), incarnation: 1 };
        let record = EpochRecord {
            epoch: 2,
            members: vec![loader.clone()],
            members_rev: 0,
            idempotency_window_ms: None,
            format: 1,
        };
        js.publish("jaque.log.epoch", wire::encode(&LogEntry::Epoch(record)).into()).await.unwrap().await.unwrap();
        let mut acks = Vec::new();
        for i in 0..n {
            let at = defined(i);
            let object = ObjectId::new(format!("object-{i:06}")).unwrap();
            let mut bodies = vec![(at, EventBody::Put { def: def(i) })];
            let to = state(i);
            if to != jaque_core::State::Pending {
                // In that state for a time that differs per object, so "the longest first" has work to do.
                let since = at + 1 + (i as u64 * 7919) % 3_000_000;
                bodies.push((since, EventBody::transition(jaque_core::State::Pending, to, "bench")));
            }
            for (at, body) in bodies {
                let ev = Event {
                    object: object.clone(),
                    epoch: 2,
                    writer: loader.clone(),
                    at: Time(at),
                    command_id: None,
                    body,
                };
                acks.push(js.publish("jaque.log.event", wire::encode(&LogEntry::Event(ev)).into()).await.unwrap());
            }
            if acks.len() >= 1000 {
                for a in acks.drain(..) {
                    a.await.unwrap();
                }
            }
        }
        for a in acks {
            a.await.unwrap();
        }
    });
    idle_rss
}

/// Loads `n` objects straight into the log (as written by a departed engine), then starts an engine that
/// takes them all over; its resident memory before any object and with all of them, and how long it takes to
/// list them all (`GET /api/objects` page by page at the largest page, p50 of 5).
fn engine_memory(n: usize) -> (u64, u64, Duration) {
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    let idle_rss = load_log(&servers, n, |_| jaque_core::State::Pending);
    // An engine that also serves the API (its ui reads the engine's own log view: no second copy).
    let e = engine_as(&servers, "rss", "engine,ui");
    poll("the engine owns every loaded object", || {
        (e.metric("jaque_engine_objects_owned") == Some(n as f64)).then_some(())
    });
    let rss = rss_kib(e.proc.pid());
    // How long the engine takes to list them all (the loop renders each page, and does nothing else meanwhile).
    let mut lists: Vec<Duration> = (0..5)
        .map(|_| {
            let (pages, took) = all_pages(&e, "/api/objects?limit=10000");
            assert_eq!(pages.iter().sum::<usize>(), n);
            took
        })
        .collect();
    (idle_rss, rss, pct(&mut lists, 0.5))
}

/// The `Link: <...>; rel="next"` of an object page.
fn next_page(r: &jaque_tests::Response) -> Option<String> {
    let link = r.header("link")?;
    Some(link.strip_prefix('<')?.split_once(">; rel=\"next\"")?.0.to_string())
}

/// Follows the pages of a list from `first`: the objects on each, and the time the requests took (the bodies
/// are parsed after each is timed).
fn all_pages(j: &Jaque, first: &str) -> (Vec<usize>, Duration) {
    let mut pages = Vec::new();
    let mut took = Duration::ZERO;
    let mut at = Some(first.to_string());
    while let Some(path) = at {
        let s = Instant::now();
        let r = j.get(&path);
        took += s.elapsed();
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        pages.push(r.json().as_array().map_or(0, Vec::len));
        at = next_page(&r);
    }
    (pages, took)
}

/// The state mix of P16's and P17's 100k objects: 4% problems (2% critical, 1% warning, 1% unknown).
fn problems_mix(i: usize) -> jaque_core::State {
    match i % 100 {
        0 | 1 => jaque_core::State::Critical,
        2 => jaque_core::State::Warning,
        3 => jaque_core::State::Unknown,
        _ => jaque_core::State::Ok,
    }
}

/// P16: what a status page asks of a process holding 100,000 objects (4% of them problems): the first page
/// problems first, a page of one state, a search, the counts, beside the same process's `/healthz` (an HTTP
/// exchange and a trip through the same loop, with no work), alternating so load hits both alike. On the
/// engine (`engine,ui`) and on a separate `-target ui` following the same log.
fn p16() {
    const N: usize = 100_000;
    eprintln!("jaque-bench: P16 object pages at {N} objects...");
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    load_log(&servers, N, problems_mix);
    let e = engine_as(&servers, "p16", "engine,ui");
    let ui = Jaque::start("p16-ui", &["-target", "ui", "-coordination", &servers.url, "-id", "p16-ui"]);
    for j in [&e, &ui] {
        poll("every loaded object in the list's counts", || {
            let s = j.get("/api/summary");
            (s.status == 200 && s.json()["objects"] == N as u64 && j.get("/healthz").status == 200).then_some(())
        });
    }
    let critical = (0..N).filter(|i| problems_mix(*i) == jaque_core::State::Critical).count();
    let requests = [
        ("first page, problems first (limit=100&sort=severity)", "/api/objects?limit=100&sort=severity", 100),
        ("a page of one state (limit=100&state=critical)", "/api/objects?limit=100&state=critical", 100),
        ("search by id (limit=100&q=99999: one match)", "/api/objects?limit=100&q=99999", 1),
        ("counts per state (GET /api/summary)", "/api/summary", 0),
        ("first page by id (limit=100)", "/api/objects?limit=100", 100),
    ];
    const ROUNDS: usize = 40;
    for (who, j) in [("engine,ui", &e), ("-target ui", &ui)] {
        let mut floor = Vec::with_capacity(ROUNDS * requests.len());
        let mut took: Vec<Vec<Duration>> = vec![Vec::with_capacity(ROUNDS); requests.len()];
        for round in 0..=ROUNDS {
            for (k, (_, path, want)) in requests.iter().enumerate() {
                let s = Instant::now();
                let h = j.get("/healthz");
                let f = s.elapsed();
                let s = Instant::now();
                let r = j.get(path);
                let t = s.elapsed();
                assert_eq!((h.status, r.status), (200, 200), "{path}: {}", r.text());
                if *want > 0 {
                    assert_eq!(r.json().as_array().map(Vec::len), Some(*want), "{path}");
                } else {
                    assert_eq!(r.json()["states"]["critical"], critical as u64);
                }
                // The first round warms up.
                if round > 0 {
                    floor.push(f);
                    took[k].push(t);
                }
            }
        }
        let f50 = ms(pct(&mut floor, 0.5));
        for (k, (what, _, _)) in requests.iter().enumerate() {
            let t50 = ms(pct(&mut took[k], 0.5));
            println!(
                "| P16 | {who}, 100k objects (4% problems): {what}, p50 | {t50:.2} ms | {f50:.2} ms (GET /healthz, same process) | {:.1}x | |",
                t50 / f50
            );
        }
    }
}

/// P17: the status page at 100,000 objects (P16's log: 4% problems) in headless Chromium, on a `-target ui`
/// following the log: the time from navigation start until the first load is drawn (the problems and the rest, a
/// page of 100 each by `sort=severity`, and the counts), until a state filter (`critical`) is drawn, and until a
/// search by id is drawn (the load only: the page waits 250 ms after typing before it asks). The floor, in
/// alternating rounds: the same page on a process with no object. Times are the page's own
/// `performance.now()` stamps (`window.jaqueStats`), so WebDriver's round trips are not in them.
fn p17() {
    const N: usize = 100_000;
    const ROUNDS: usize = 10;
    eprintln!("jaque-bench: P17 the status page at {N} objects in headless Chromium...");
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    load_log(&servers, N, problems_mix);
    let e = engine_as(&servers, "p17", "engine");
    let ui = Jaque::start("p17-ui", &["-target", "ui", "-coordination", &servers.url, "-id", "p17-ui"]);
    let empty = Jaque::start("p17-empty", &["-target", "engine,worker,ui", "-queue", "memory", "-id", "p17-empty"]);
    empty.wait_ready();
    poll("every loaded object in the ui's counts", || {
        let s = ui.get("/api/summary");
        (s.status == 200 && s.json()["objects"] == N as u64 && ui.get("/healthz").status == 200).then_some(())
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (full, floor) = rt.block_on(async {
        let b = jaque_tests::browser::Browser::start().await;
        let (mut full, mut floor) = (PageTimes::default(), PageTimes::default());
        // The first round warms up (Chromium's caches, the processes' first pages).
        for round in 0..=ROUNDS {
            let f = page_times(&b, &ui, "99999").await;
            let z = page_times(&b, &empty, "99999").await;
            if round > 0 {
                full.push(f);
                floor.push(z);
            }
        }
        b.close().await;
        (full, floor)
    });
    drop(e);
    for (what, mut j, mut z) in [
        ("first render (navigation start to the problems, the rest and the counts drawn)", full.first, floor.first),
        ("state filter (critical) drawn after the click", full.filter, floor.filter),
        ("search by id (q=99999) drawn, from its request", full.search, floor.search),
    ] {
        let (j50, z50) = (ms(pct(&mut j, 0.5)), ms(pct(&mut z, 0.5)));
        println!(
            "| P17 | status page on a -target ui, 100k objects (4% problems), headless Chromium: {what}, p50 | {j50:.1} ms | {z50:.1} ms (the same page, no object) | {:.1}x | |",
            j50 / z50
        );
    }
}

#[derive(Default)]
struct PageTimes {
    first: Vec<Duration>,
    filter: Vec<Duration>,
    search: Vec<Duration>,
}

impl PageTimes {
    fn push(&mut self, (first, filter, search): (Duration, Duration, Duration)) {
        self.first.push(first);
        self.filter.push(filter);
        self.search.push(search);
    }
}

/// One round on `j`'s page: a fresh navigation, then the filter, then the search; each as the page timed it.
async fn page_times(b: &jaque_tests::browser::Browser, j: &Jaque, q: &str) -> (Duration, Duration, Duration) {
    let settled = "return jaqueStats.renders > 0 && jaqueStats.connected && jaqueStats.loading === 0 ? jaqueStats.renders : null;";
    let secs = |v: serde_json::Value| Duration::from_secs_f64(v.as_f64().expect("a time") / 1000.0);
    b.client.goto("about:blank").await.unwrap();
    b.client.goto(&format!("http://{}/", j.addr)).await.unwrap();
    let renders = b.until("the page drawn and live", settled).await;
    let first = secs(b.js("return jaqueStats.firstRendered;", vec![]).await);
    let drawn_after = |n: serde_json::Value| {
        format!(
            "return jaqueStats.loading === 0 && jaqueStats.renders > {n} ? jaqueStats.loadRendered - jaqueStats.loadStarted : null;"
        )
    };
    b.click("#filters input[value=critical]").await;
    let filter = secs(b.until("the filter drawn", &drawn_after(renders)).await);
    // Undone, and drawn, before the search.
    let renders = b.js("return jaqueStats.renders;", vec![]).await;
    b.click("#filters input[value=critical]").await;
    b.until("the filter undone", &drawn_after(renders)).await;
    let renders = b.js("return jaqueStats.renders;", vec![]).await;
    b.type_into("#q", q).await;
    let search = secs(b.until("the search drawn", &drawn_after(renders)).await);
    (first, filter, search)
}

const P12_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The member that "wrote" the transitions P12 appends: the only member of epoch 1, so it owns every object.
fn loader() -> MemberRef {
    MemberRef { id: MemberId::new("loader").unwrap(), incarnation: 1 }
}

fn transition(object: &str, to: jaque_core::State) -> LogEntry {
    let from = if to == jaque_core::State::Ok { jaque_core::State::Critical } else { jaque_core::State::Ok };
    LogEntry::Event(Event {
        object: ObjectId::new(object).unwrap(),
        epoch: 1,
        writer: loader(),
        at: Time(unix_ms()),
        command_id: None,
        body: EventBody::transition(from, to, format!("now {}", to.as_str())),
    })
}

/// P12: one notifier on its own nats-server, one endpoint (the tests' verifying receiver). Transitions are
/// appended to the log straight, as by an engine (the loader owns every object), so the latency is the
/// notifier's alone: from the append to the receiver taking the POST. The floor, in alternating rounds on the
/// same server and receiver: the same append until an ordered consumer delivers it, then one signed POST from
/// a bare keep-alive client.
fn p12() {
    const ROUNDS: usize = 9;
    const PER_ROUND: usize = 60;
    const OBJECTS: usize = 50;
    eprintln!("jaque-bench: P12 notification latency and throughput...");
    let nats = Nats::start();
    let rx = Receiver::start(Some(P12_SECRET));
    let hook = rx.url("/hook");
    let floor_hook = rx.url("/floor");
    let n = Jaque::start(
        "notifier",
        &[
            "-target",
            "notifier",
            "-coordination",
            &nats.url,
            "-id",
            "n1",
            "-notify-webhook",
            &hook,
            "-notify-secret",
            P12_SECRET,
        ],
    );
    n.wait_ready();
    let key = base64_key(P12_SECRET);
    let (lat, floor, floor_claim, rate, raw_rate, m, (records, gets, scan)) = rt().block_on(async {
        let client = async_nats::connect(&nats.url).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        let record =
            EpochRecord { epoch: 1, members: vec![loader()], members_rev: 0, idempotency_window_ms: None, format: 1 };
        js.publish("jaque.log.epoch", wire::encode(&LogEntry::Epoch(record)).into()).await.unwrap().await.unwrap();
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH_NOTIFY".into(),
            subjects: vec!["bench.notify".into()],
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
        let mut follow = follow_new(&js, &client, "BENCH_NOTIFY").await;
        // A bucket like the membership one, for the floor that includes the claim's compare-and-set.
        let claims = js
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: "bench_claims".into(),
                history: 1,
                limit_markers: Some(Duration::from_secs(60)),
                storage: async_nats::jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .unwrap();
        let bare = reqwest::Client::new();
        let (mut lat, mut floor, mut floor_claim) = (Vec::new(), Vec::new(), Vec::new());
        let mut k = 0usize;
        for round in 0..ROUNDS {
            let keep = round > 0;
            for _ in 0..PER_ROUND {
                k += 1;
                let to =
                    if (k / OBJECTS).is_multiple_of(2) { jaque_core::State::Critical } else { jaque_core::State::Ok };
                let entry = transition(&format!("p12-{}", k % OBJECTS), to);
                let s = Instant::now();
                let ack = js.publish("jaque.log.event", wire::encode(&entry).into()).await.unwrap().await.unwrap();
                let seq = ack.sequence;
                let mut at = None;
                assert!(
                    rx.wait_until(Duration::from_secs(30), |d| {
                        at = d
                            .iter()
                            .rev()
                            .find(|d| d.path == "/hook" && d.body["seq"].as_u64() == Some(seq))
                            .map(|d| d.at);
                        at.is_some()
                    }),
                    "the notification of {seq} arrived"
                );
                if keep {
                    lat.push(at.unwrap() - s);
                }
            }
            for i in 0..2 * PER_ROUND {
                let entry = transition(&format!("p12-floor-{i}"), jaque_core::State::Critical);
                let s = Instant::now();
                js.publish("bench.notify", wire::encode(&entry).into()).await.unwrap().await.unwrap();
                let msg = follow.next().await.unwrap().unwrap();
                // Every other one also makes the claim the notifier makes before it sends: one compare-and-set.
                let with_claim = i % 2 == 1;
                if with_claim {
                    claims.create(format!("claim.{round}.{i}"), "{}".into()).await.unwrap();
                }
                let body = String::from_utf8_lossy(&msg.payload).into_owned();
                let id = format!("floor-{round}-{i}");
                let ts = unix_ms() / 1000;
                let r = bare
                    .post(&floor_hook)
                    .header("content-type", "application/json")
                    .header("webhook-id", &id)
                    .header("webhook-timestamp", ts.to_string())
                    .header("webhook-signature", sign(&key, &id, ts, &body))
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                let _ = r.bytes().await;
                let mut at = None;
                rx.wait_until(Duration::from_secs(5), |d| {
                    at = d.iter().rev().find(|d| d.id == id).map(|d| d.at);
                    at.is_some()
                });
                if keep {
                    (if with_claim { &mut floor_claim } else { &mut floor }).push(at.unwrap() - s);
                }
            }
        }
        // Throughput: many transitions over many objects appended at once; time until all have arrived.
        const M: usize = 4000;
        let before = rx.delivery_count("/hook");
        let s = Instant::now();
        let mut acks = Vec::new();
        for i in 0..M {
            let to = if (i / 400).is_multiple_of(2) { jaque_core::State::Ok } else { jaque_core::State::Critical };
            let entry = transition(&format!("p12-rate-{}", i % 400), to);
            acks.push(js.publish("jaque.log.event", wire::encode(&entry).into()).await.unwrap());
        }
        for a in acks {
            a.await.unwrap();
        }
        assert!(
            rx.wait_until(Duration::from_secs(300), |d| d.iter().filter(|d| d.path == "/hook").count() >= before + M),
            "every notification arrived"
        );
        let rate = M as f64 / s.elapsed().as_secs_f64();
        // The endpoint's own capacity with the notifier's shape (16 POSTs in flight, keep-alive).
        let s = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..16 {
            let (bare, url, key) = (bare.clone(), floor_hook.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..M / 16 {
                    let id = format!("rate-{t}-{i}");
                    let ts = unix_ms() / 1000;
                    let body = r#"{"type":"transition"}"#;
                    let r = bare
                        .post(&url)
                        .header("webhook-id", &id)
                        .header("webhook-timestamp", ts.to_string())
                        .header("webhook-signature", sign(&key, &id, ts, body))
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    let _ = r.bytes().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let raw_rate = M as f64 / s.elapsed().as_secs_f64();
        // How a notifier that gains objects reads their records: one KV get per record, 64 at once (what
        // shell/src/notifier/progress.rs does), beside one ordered consumer over the endpoint's records (last per key).
        let kv = js.get_key_value("jaque_membership").await.unwrap();
        let ep = jaque_core::notifier::EndpointId::of(&hook);
        let keys: Vec<String> = (0..400)
            .map(|i| format!("p12-rate-{i}"))
            .chain((0..OBJECTS).map(|i| format!("p12-{i}")))
            .map(|o| {
                use base64::Engine as _;
                format!("notify.{ep}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(o))
            })
            .collect();
        let s = Instant::now();
        let found = futures_util::stream::iter(keys.iter().cloned())
            .map(|k| {
                let kv = kv.clone();
                async move { kv.entry(k).await.unwrap().is_some() }
            })
            .buffer_unordered(64)
            .filter(|f| std::future::ready(*f))
            .count()
            .await;
        let gets = s.elapsed();
        assert_eq!(found, keys.len(), "every object has its record");
        let s = Instant::now();
        let stream = js.get_stream("KV_jaque_membership").await.unwrap();
        let mut scan = stream
            .create_consumer(async_nats::jetstream::consumer::push::OrderedConfig {
                deliver_subject: client.new_inbox(),
                filter_subject: format!("$KV.jaque_membership.notify.{ep}.>"),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .unwrap()
            .messages()
            .await
            .unwrap();
        let mut scanned = 0;
        while let Some(m) = scan.next().await {
            scanned += 1;
            if m.unwrap().info().unwrap().pending == 0 {
                break;
            }
        }
        let scan_time = s.elapsed();
        assert_eq!(scanned, keys.len());
        (lat, floor, floor_claim, rate, raw_rate, M, (keys.len(), gets, scan_time))
    });
    let (mut lat, mut floor, mut floor_claim) = (lat, floor, floor_claim);
    let (l50, l99, f50, f99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99), pct(&mut floor, 0.5), pct(&mut floor, 0.99));
    println!(
        "| P12 | notification latency: transition appended -> webhook received, p50 | {:.2} ms | {:.2} ms (log delivery + one bare signed POST) | {:.2}x | <= 1.5x |",
        ms(l50), ms(f50), ms(l50) / ms(f50)
    );
    println!(
        "| P12 | notification latency, p99 | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(l99),
        ms(f99),
        ms(l99) / ms(f99)
    );
    let (c50, c99) = (pct(&mut floor_claim, 0.5), pct(&mut floor_claim, 0.99));
    println!(
        "| P12 | floor with the claim the design puts on the path: log delivery + one KV compare-and-set + one bare POST, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x / {:.2}x | |",
        ms(c50), ms(c99), ms(f50), ms(f99), ms(c50) / ms(f50), ms(c99) / ms(f99)
    );
    println!(
        "| P12 | notification latency against that floor, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x / {:.2}x | |",
        ms(l50), ms(l99), ms(c50), ms(c99), ms(l50) / ms(c50), ms(l99) / ms(c99)
    );
    println!(
        "| P12 | deliveries/s one notifier sustains to one endpoint ({m} transitions over 400 objects) | {rate:.0}/s | {raw_rate:.0}/s bare POSTs, 16 in flight | {:.2}x | |",
        rate / raw_rate
    );
    println!(
        "| P12 | reading the records of {records} gained objects: one KV get each, 64 at once (what a notifier does) | {:.1} ms ({:.0} µs/record) | {:.1} ms: one ordered consumer over the endpoint's records | {:.2}x | |",
        ms(gets), gets.as_secs_f64() * 1e6 / records as f64, ms(scan), ms(gets) / ms(scan)
    );
    let _ = n;
}

fn base64_key(secret: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap()
}

const STORM: usize = 10_000;
const STORM_OBJECTS: usize = 100;
const ROUNDS: usize = 3;
/// Rows per transaction of the floor: the sink's own batch size. Rows per statement: the sink's (1000, its
/// whole batch) and half that; the faster is the floor.
const FLOOR_BATCH: usize = 1000;
const FLOOR_STATEMENTS: [usize; 2] = [1000, 500];

/// The storm: `STORM` transitions over `STORM_OBJECTS` objects, as written by one engine (`loader`) that owns
/// them all, so every one is accepted and becomes a row.
fn storm_events(loader: &MemberRef) -> Vec<Event> {
    let at = unix_ms();
    (0..STORM)
        .map(|i| {
            let up = (i / STORM_OBJECTS).is_multiple_of(2);
            let (from, to) = if up { (State::Ok, State::Critical) } else { (State::Critical, State::Ok) };
            Event {
                object: ObjectId::new(format!("storm-{:03}", i % STORM_OBJECTS)).unwrap(),
                epoch: 1,
                writer: loader.clone(),
                at: Time(at + i as u64),
                command_id: None,
                body: EventBody::transition(from, to, format!("HTTP {} after {i} checks", if up { 500 } else { 200 })),
            }
        })
        .collect()
}

/// Publishes entries to the log stream pipelined (acks awaited in windows of 1000); the last one's sequence.
async fn publish_log(js: &async_nats::jetstream::Context, entries: impl IntoIterator<Item = LogEntry>) -> u64 {
    let mut acks = Vec::new();
    let mut last = 0;
    for e in entries {
        let subject = if matches!(e, LogEntry::Epoch(_)) { "jaque.log.epoch" } else { "jaque.log.event" };
        acks.push(js.publish(subject, wire::encode(&e).into()).await.unwrap());
        if acks.len() >= 1000 {
            for a in acks.drain(..) {
                last = a.await.unwrap().sequence;
            }
        }
    }
    for a in acks {
        last = a.await.unwrap().sequence;
    }
    last
}

/// The floor: the same rows inserted by a bare sqlx client into a table of the same shape, in transactions of
/// `FLOOR_BATCH` rows of multi-row INSERTs of `per_statement` rows each, into a fresh table. Rows per second.
fn floor_inserts(url: &str, rows: &[EventRow], per_statement: usize) -> f64 {
    rt().block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::query("DROP TABLE IF EXISTS floor_events").execute(&pool).await.unwrap();
        sqlx::query(
            "CREATE TABLE floor_events (seq BIGINT PRIMARY KEY, object TEXT NOT NULL, epoch BIGINT NOT NULL, \
             writer TEXT NOT NULL, writer_incarnation BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL, type TEXT NOT NULL, \
             from_state TEXT, to_state TEXT, output TEXT, command_id TEXT, definition TEXT)",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("CREATE INDEX ON floor_events (object, seq)").execute(&pool).await.unwrap();
        let start = Instant::now();
        for batch in rows.chunks(FLOOR_BATCH) {
            let mut tx = pool.begin().await.unwrap();
            for chunk in batch.chunks(per_statement) {
                let mut qb = sqlx::QueryBuilder::<sqlx::Postgres>::new(
                    "INSERT INTO floor_events (seq, object, epoch, writer, writer_incarnation, at, type, from_state, \
                     to_state, output, command_id, definition) ",
                );
                qb.push_values(chunk, |mut b, r| {
                    b.push_bind(r.seq as i64)
                        .push_bind(r.object.to_string())
                        .push_bind(r.epoch as i64)
                        .push_bind(r.writer.to_string())
                        .push_bind(r.writer_incarnation as i64)
                        .push("to_timestamp(")
                        .push_bind_unseparated(r.at.as_millis() as i64)
                        .push_unseparated("::float8 / 1000)")
                        .push_bind(r.kind)
                        .push_bind(r.from_state.map(|s| s.as_str()))
                        .push_bind(r.to_state.map(|s| s.as_str()))
                        .push_bind(r.output.clone())
                        .push_bind(r.command_id.as_ref().map(|c| c.to_string()))
                        .push_bind(r.definition.clone());
                });
                qb.push(" ON CONFLICT (seq) DO NOTHING");
                qb.build().execute(&mut *tx).await.unwrap();
            }
            tx.commit().await.unwrap();
        }
        rows.len() as f64 / start.elapsed().as_secs_f64()
    })
}

/// P11: a sink on PostgreSQL, caught up, then a storm of `STORM` transitions published to the log as fast as one
/// client can: events per second from the storm's first publish until the sink has written its last event, the
/// sink's lag sampled meanwhile, and the floor of the same rows by a bare client.
fn p11() {
    eprintln!("jaque-bench: P11 sink into PostgreSQL during a storm of {STORM} transitions...");
    let nats = Nats::start();
    let pg = Postgres::start();
    let store = pg.url();
    let ttl = format!("{TTL_SECS}s");
    let sink = Jaque::start(
        "sink",
        &["-target", "sink", "-coordination", &nats.url, "-sink-store", &store, "-heartbeat-ttl", &ttl],
    );
    sink.wait_ready();
    let loader = MemberRef { id: MemberId::new("loader").unwrap(), incarnation: 1 };
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: 86_400_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    };
    let setup: Vec<LogEntry> = std::iter::once(LogEntry::Epoch(EpochRecord {
        epoch: 1,
        members: vec![loader.clone()],
        members_rev: 0,
        idempotency_window_ms: None,
        format: 1,
    }))
    .chain((0..STORM_OBJECTS).map(|i| {
        LogEntry::Event(Event {
            object: ObjectId::new(format!("storm-{i:03}")).unwrap(),
            epoch: 1,
            writer: loader.clone(),
            at: Time(unix_ms()),
            command_id: None,
            body: EventBody::Put { def: def.clone() },
        })
    }))
    .collect();
    let url = nats.url.clone();
    let setup_last = rt().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
        publish_log(&js, setup).await
    });
    let written = |s: &Jaque| s.metric("jaque_sink_events_written_total").unwrap_or(0.0) as usize;
    poll("the sink to write the objects", || (written(&sink) >= STORM_OBJECTS).then_some(()));

    // Three storms one after the other; the median rate (the machine may be shared), every lag sample.
    let mut rates = Vec::new();
    let mut lags = Vec::new();
    let mut rows: Vec<EventRow> = Vec::new();
    let mut next_seq = setup_last + 1;
    for round in 0..ROUNDS {
        let events = storm_events(&loader);
        rows = events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let owned = Owned { seq: next_seq + i as u64, event: e.clone(), after: After::Replayed };
                event_row(&owned, 4096)
            })
            .collect();
        let want_written = STORM_OBJECTS + (round + 1) * STORM;
        let url = url.clone();
        let start = Instant::now();
        let mut publisher = Some(thread::spawn(move || {
            rt().block_on(async {
                let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
                publish_log(&js, events.into_iter().map(LogEntry::Event)).await
            })
        }));
        let mut last = None;
        loop {
            if publisher.as_ref().is_some_and(|p| p.is_finished()) {
                last = publisher.take().map(|p| p.join().unwrap());
            }
            let m = sink.get("/metrics").text();
            let value = |name: &str| {
                m.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0)
            };
            lags.push(value("jaque_sink_lag_events ") as u64);
            if last.is_some() && value("jaque_sink_events_written_total ") as usize >= want_written {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(300), "the sink did not finish the storm in 5 minutes");
            thread::sleep(Duration::from_millis(20));
        }
        rates.push(STORM as f64 / start.elapsed().as_secs_f64());
        let published = last.unwrap();
        assert_eq!(published, next_seq + STORM as u64 - 1, "the storm landed whole");
        next_seq = published + 1;
    }
    let rows_stored = pg.psql("SELECT count(*) FROM events");
    assert_eq!(rows_stored, (ROUNDS * STORM + STORM_OBJECTS).to_string(), "every event stored once");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let sink_rate = median(rates.clone());
    lags.sort();
    let p99 = lags[((lags.len() - 1) as f64 * 0.99).round() as usize];
    let max = *lags.last().unwrap();
    let floors: Vec<(f64, usize)> = FLOOR_STATEMENTS
        .iter()
        .map(|&n| (median((0..ROUNDS).map(|_| floor_inserts(&store, &rows, n)).collect()), n))
        .collect();
    let (floor, per_statement) = floors.iter().copied().fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
    let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "| P11 | events/s a sink writes into PostgreSQL during a storm of {STORM} transitions (published at once; median of {ROUNDS}: {}) | {sink_rate:.0}/s | {floor:.0}/s batched inserts of the same rows by a bare sqlx client ({FLOOR_BATCH} a transaction, {per_statement} a statement; median of {ROUNDS}) | {:.2}x | >= 0.5x |",
        each.join(", "),
        sink_rate / floor
    );
    println!(
        "| P11 | the sink's lag during those storms, p99 / max ({} samples every 20 ms) | {p99} / {max} events | {STORM} events published each | | |",
        lags.len()
    );
}

/// P13: sequential writes through the ui of one `-target engine,worker,ui -queue memory -data-dir` process, beside
/// a loop that appends a record of the same size as a put's event to a file in the same directory and fsyncs it
/// (what the data directory's writer does for one write, with nothing else around it).
fn p13() {
    // The first round is warm-up and not kept.
    const ROUNDS: usize = 9;
    const PER_ROUND: usize = 80;
    eprintln!("jaque-bench: P13 -data-dir write latency beside a bare fsync'd append, {ROUNDS} rounds...");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let target = CountingTarget::start();
    let args = ["-target", "engine,worker,ui", "-queue", "memory", "-id", "p13", "-data-dir", data.to_str().unwrap()];
    let j = Jaque::start("p13", &args);
    // The same process without -data-dir: what the data directory adds to a write.
    let mem = Jaque::start("p13-memory", &args[..6]);
    j.wait_ready();
    mem.wait_ready();
    assert_eq!(put(&j, "p13-ack", "p13-ack", &target.url()), 200);
    assert_eq!(put(&mem, "p13-ack", "p13-ack", &target.url()), 200);
    // A put's event as the engine writes it (same ids, same definition, numbers of the same width), framed as in
    // a segment: length and checksum (8 bytes), position (8 bytes), the wire bytes.
    let object = |n: usize| format!("p13-{n:06}");
    let Command { kind: CommandKind::Put { def }, .. } = put_command(object(0), object(0), &target.url()) else {
        unreachable!("a put")
    };
    let event = Event {
        object: ObjectId::new(object(0)).unwrap(),
        epoch: 1,
        writer: MemberRef { id: MemberId::new("p13").unwrap(), incarnation: unix_ms() },
        at: Time(unix_ms()),
        command_id: Some(CommandId::new(object(0)).unwrap()),
        body: EventBody::Put { def },
    };
    let record = bytes_of(16 + wire::encode(&LogEntry::Event(event)).len());
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("floor")).unwrap();
    let (mut floor, mut hz, mut puts, mut acks, mut mem_acks) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut n = 0;
    let mut append = || {
        use std::io::Write;
        let s = Instant::now();
        file.write_all(&record).unwrap();
        file.sync_data().unwrap();
        s.elapsed()
    };
    // A floor append before each of jaque's writes: the disk is shared with whatever else runs on the machine (an
    // fsync waits for the journal commit of everyone's changes), so bursts from elsewhere weigh on both alike.
    // Puts and acks apart, as in P1: a put's check appends a transition (one more fsync) while the next write runs.
    for round in 0..ROUNDS {
        let keep = round > 0;
        for _ in 0..PER_ROUND {
            let f = append();
            n += 1;
            let s = Instant::now();
            let ok = put(&j, &object(n), &object(n), &target.url()) == 200;
            if keep && ok {
                puts.push(s.elapsed());
            }
            if keep {
                floor.push(f);
            }
        }
        for _ in 0..PER_ROUND {
            let f = append();
            let s = Instant::now();
            j.get("/healthz");
            let h = s.elapsed();
            let s = Instant::now();
            let ack_ok = j.request("POST", "/api/objects/p13-ack/actions/ack", &[], None).status == 200;
            let a = s.elapsed();
            let s = Instant::now();
            let mem_ok = mem.request("POST", "/api/objects/p13-ack/actions/ack", &[], None).status == 200;
            let m = s.elapsed();
            if keep {
                floor.push(f);
                hz.push(h);
                if ack_ok {
                    acks.push(a);
                }
                if mem_ok {
                    mem_acks.push(m);
                }
            }
        }
    }
    let (f50, f99) = (pct(&mut floor, 0.5), pct(&mut floor, 0.99));
    let (w50, w99) = (pct(&mut puts, 0.5), pct(&mut puts, 0.99));
    let (a50, a99) = (pct(&mut acks, 0.5), pct(&mut acks, 0.99));
    let http50 = pct(&mut hz, 0.5);
    let m50 = pct(&mut mem_acks, 0.5);
    let size = record.len();
    println!(
        "| P13 | -data-dir write (put of a new object) -> applied, p50 | {:.2} ms | {:.2} ms (bare fsync'd append of the same {size} bytes) | {:.2}x | |",
        ms(w50), ms(f50), ms(w50) / ms(f50)
    );
    println!(
        "| P13 | -data-dir write (put of a new object) -> applied, p99 | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(w99),
        ms(f99),
        ms(w99) / ms(f99)
    );
    println!(
        "| P13 | -data-dir write (ack: nothing but the write) -> applied, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x / {:.2}x | |",
        ms(a50), ms(a99), ms(f50), ms(f99), ms(a50) / ms(f50), ms(a99) / ms(f99)
    );
    println!(
        "| P13 | ack, less the HTTP request itself (GET /healthz: p50 {:.2} ms) | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(http50),
        ms(a50.saturating_sub(http50)),
        ms(f50),
        ms(a50.saturating_sub(http50)) / ms(f50)
    );
    println!(
        "| P13 | what -data-dir adds to an ack: p50 with it less p50 of the same process in memory ({:.2} ms) | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(m50), ms(a50.saturating_sub(m50)), ms(f50), ms(a50.saturating_sub(m50)) / ms(f50)
    );
}

/// `jaque-bench [p1 p2 p3 p8 p11 p12 p13 p14 p15 p16 p17 cluster]`: the parts to run (all by default), so one figure can be re-measured alone.
/// Each part prints its rows as soon as it has them.
fn main() {
    let parts: Vec<String> = std::env::args().skip(1).collect();
    let want = |p: &str| parts.is_empty() || parts.iter().any(|a| a == p);
    println!("| P | measure | jaque | floor (same run) | ratio | target |");
    println!("|---|---|---|---|---|---|");
    if want("p1") || want("p2") || want("p3") {
        // With the monitoring endpoint on a random port, to count the messages the server routes.
        let nats = Nats::start_with(&["-m", "-1"]);
        let servers = Servers::one(&nats);
        let cluster = Cluster::start(&servers);
        if want("p1") {
            p1(&servers, &cluster, "");
        }
        if want("p2") {
            p2(&nats, &cluster);
        }
        if want("p1") || want("p2") {
            writes_while_one_hangs(&cluster);
        }
        if want("p3") {
            p3(&servers, cluster, "");
        }
    }
    if want("cluster") {
        // The same P1 and P3 on a 3-node NATS cluster with the log replicated three times, and the time until
        // writes are applied again after the node leading the log is lost.
        let mut nc = NatsCluster::start(3);
        let servers = Servers {
            url: nc.urls(),
            raw: nc.url(0).to_string(),
            engine_flags: vec!["-log-replicas", "3"],
            replicas: 3,
        };
        let cluster = Cluster::start(&servers);
        const LABEL: &str = "3-node NATS cluster, -log-replicas 3: ";
        p1(&servers, &cluster, LABEL);
        let (leader, took) = leader_loss(&mut nc, &cluster);
        println!(
            "| P3 | {LABEL}write applied again after kill -9 of the node leading the log ({leader}) | {:.2} s | | | |",
            took.as_secs_f64()
        );
        let servers = Servers { raw: nc.live_url().to_string(), ..servers };
        p3(&servers, cluster, LABEL);
    }
    if want("p8") {
        eprintln!("jaque-bench: P8 engine memory with 100k objects...");
        let (idle_kib, loaded_kib, list) = engine_memory(100_000);
        println!(
            "| P8 | engine resident memory, 100k objects | {:.1} MiB | {:.1} MiB with no object | {:.0} bytes/object | |",
            loaded_kib as f64 / 1024.0,
            idle_kib as f64 / 1024.0,
            (loaded_kib.saturating_sub(idle_kib) * 1024) as f64 / 100_000.0
        );
        println!(
            "| P8 | GET /api/objects of those 100k objects, 10 pages of 10,000, p50 (the engine loop renders each) | {:.0} ms | | | |",
            ms(list)
        );
    }
    if want("p8m") {
        p8_million();
    }
    if want("p9") {
        p9();
    }
    if want("p10") {
        // Every change hard at once, as before soft states (comparable with earlier runs); then the default rules,
        // where each object's problem is hard at its third result in a row.
        p10(Some(1));
        p10(None);
    }
    if want("p18") {
        p18();
    }
    if want("p19") {
        p19();
    }
    if want("p12") {
        p12();
    }
    if want("p11") {
        p11();
    }
    if want("p13") {
        p13();
    }
    if want("p14") {
        p14();
    }
    if want("p15") {
        p15();
    }
    if want("p16") {
        p16();
    }
    if want("p17") {
        p17();
    }
}

/// Three engines, a worker and a ui on one nats-server, and a target for their checks; and a second ui without
/// claims (`-claim-timeout 0ms`: one request a write, as before claims), to measure both in one run.
struct Cluster {
    target: CountingTarget,
    engines: Vec<Jaque>,
    worker: Jaque,
    ui: Jaque,
    ui_no_claims: Jaque,
}

impl Cluster {
    fn start(s: &Servers) -> Cluster {
        eprintln!("jaque-bench: three engines, a worker and a ui...");
        let target = CountingTarget::start();
        let engines: Vec<Jaque> = ["e1", "e2", "e3"].iter().map(|id| engine(s, id)).collect();
        let worker = Jaque::start("worker", &["-target", "worker", "-queue", &s.url]);
        let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &s.url]);
        let ui_no_claims =
            Jaque::start("ui-no-claims", &["-target", "ui", "-coordination", &s.url, "-claim-timeout", "0ms"]);
        for j in engines.iter().chain([&worker, &ui, &ui_no_claims]) {
            j.wait_ready();
        }
        let all: BTreeSet<String> = ["e1", "e2", "e3"].map(String::from).into();
        poll("an epoch of three engines", || (ui.epoch_members() == all).then_some(()));
        Cluster { target, engines, worker, ui, ui_no_claims }
    }
}

/// P1: sequential writes through the ui, each a new object, beside the raw NATS operations they need.
fn p1(servers: &Servers, c: &Cluster, label: &str) {
    // Rounds that alternate the raw floors and jaque's figures, so whatever else the machine does meanwhile
    // weighs on both alike; percentiles are over all rounds. The first round is warm-up and not kept.
    const ROUNDS: usize = 9;
    const PER_ROUND: usize = 80;
    eprintln!("jaque-bench: P1 write latency and the raw NATS floors, {ROUNDS} alternating rounds...");
    // An object e1 owns, for the acks.
    let mine = (0..)
        .find_map(|i| {
            assert_eq!(put(&c.ui, &format!("p1-ack-{i}"), &format!("p1-ack-{i}"), &c.target.url()), 200);
            owned_by(&c.ui, "e1").into_iter().next()
        })
        .map(|id| ObjectId::new(id).unwrap())
        .unwrap();
    let (mut rr, mut js, mut rb) = (Vec::new(), Vec::new(), Vec::new());
    let (mut hz, mut lat, mut acks, mut direct) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut acks_before = Vec::new();
    let mut n = 0;
    for round in 0..ROUNDS {
        let keep = round > 0;
        let (r, j, b) = floors(&servers.raw, PER_ROUND, servers.replicas);
        // The HTTP part of a write: a request to the ui that does nothing (a new connection each time).
        let h: Vec<Duration> = (0..PER_ROUND)
            .map(|_| {
                let s = Instant::now();
                c.ui.get("/healthz");
                s.elapsed()
            })
            .collect();
        // Puts of new objects through the ui.
        let mut w = Vec::new();
        for _ in 0..PER_ROUND {
            n += 1;
            let s = Instant::now();
            if put(&c.ui, &format!("p1-{n}"), &format!("p1-{n}"), &c.target.url()) == 200 {
                w.push(s.elapsed());
            }
        }
        // A write that is only a write: an ack of an existing object (a new object is also checked at once,
        // and that check's work overlaps the next put). Each ack alternates with one through the ui without
        // claims (one request a write, as before claims), so both see the same background: the claim's cost.
        let (mut a, mut a0) = (Vec::new(), Vec::new());
        for i in 0..2 * PER_ROUND {
            let (ui, into) = if i % 2 == round % 2 { (&c.ui, &mut a) } else { (&c.ui_no_claims, &mut a0) };
            let s = Instant::now();
            if ui.request("POST", &format!("/api/objects/{mine}/actions/ack"), &[], None).status == 200 {
                into.push(s.elapsed());
            }
        }
        // The engine alone: acks of an object e1 owns, as NATS requests straight to e1 (no HTTP, no ui).
        let d = rt().block_on(async {
            let client = async_nats::connect(&servers.raw).await.unwrap();
            let mut lat = Vec::new();
            for i in 0..PER_ROUND {
                let id = CommandId::new(format!("p1d-{round}-{i}")).unwrap();
                let cmd = Command { id, object: mine.clone(), kind: CommandKind::Ack, hop: 0 };
                let s = Instant::now();
                let msg = client.request("jaque.cmd.e1", wire::encode(&cmd).into()).await.unwrap();
                let took = s.elapsed();
                let outcome = wire::decode_outcome(&msg.payload);
                assert!(
                    matches!(&outcome, Ok(Outcome::Applied { owner, .. }) if owner.as_str() == "e1"),
                    "{outcome:?}"
                );
                lat.push(took);
            }
            lat
        });
        if keep {
            rr.extend(r);
            js.extend(j);
            rb.extend(b);
            hz.extend(h);
            lat.extend(w);
            acks.extend(a);
            acks_before.extend(a0);
            direct.extend(d);
        }
    }
    let (rr50, rr99, js50, js99) = (pct(&mut rr, 0.5), pct(&mut rr, 0.99), pct(&mut js, 0.5), pct(&mut js, 0.99));
    let (rb50, rb99) = (pct(&mut rb, 0.5), pct(&mut rb, 0.99));
    let (http50, http99) = (pct(&mut hz, 0.5), pct(&mut hz, 0.99));
    let (w50, w99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    let (a50, a99) = (pct(&mut acks, 0.5), pct(&mut acks, 0.99));
    let d50 = pct(&mut direct, 0.5);
    let (b50, b99) = (pct(&mut acks_before, 0.5), pct(&mut acks_before, 0.99));
    let floor50 = rr50 + js50;
    let floor99 = rr99 + js99;
    println!(
        "| P1 | {label}ui write (put of a new object) -> applied, p50 | {:.2} ms | {:.2} ms (request/reply {:.2} + JetStream publish {:.2}) | {:.2}x | <= 1.2x |",
        ms(w50), ms(floor50), ms(rr50), ms(js50), ms(w50) / ms(floor50)
    );
    println!(
        "| P1 | {label}ui write (put of a new object) -> applied, p99 | {:.2} ms | {:.2} ms (request/reply {:.2} + JetStream publish {:.2}) | {:.2}x | |",
        ms(w99), ms(floor99), ms(rr99), ms(js99), ms(w99) / ms(floor99)
    );
    println!(
        "| P1 | {label}ui write (ack: nothing but the write) -> applied, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x / {:.2}x | |",
        ms(a50), ms(a99), ms(floor50), ms(floor99), ms(a50) / ms(floor50), ms(a99) / ms(floor99)
    );
    println!(
        "| P1 | {label}ack, less the HTTP request itself (GET /healthz on the ui: p50 {:.2} ms) | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(http50), ms(a50.saturating_sub(http50)), ms(floor50), ms(a50.saturating_sub(http50)) / ms(floor50)
    );
    // The honest floor of a write on the page's path: the HTTP exchange with the ui, one request/reply (the
    // ui to the engine that claims it from the ingress queue group) and a publish until an ordered consumer
    // delivers it (the engine reads its event back before it answers).
    let (honest50, honest99) = (http50 + rr50 + rb50, http99 + rr99 + rb99);
    println!(
        "| P1 | {label}ui write (ack) -> applied through jaque.work.cmd.ingress, against the honest floor (HTTP exchange {:.2} + request/reply {:.2} + publish until delivered {:.2}), p50 | {:.2} ms | {:.2} ms | {:.2}x | <= 1.2x |",
        ms(http50), ms(rr50), ms(rb50), ms(a50), ms(honest50), ms(a50) / ms(honest50)
    );
    println!(
        "| P1 | {label}the same, p99 | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(a99),
        ms(honest99),
        ms(a99) / ms(honest99)
    );
    println!(
        "| P1 | {label}ui write (ack) through ingress with claims (-claim-timeout 200ms) against the same without (0ms: one request, as before claims), same rounds, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.3}x / {:.2}x | <= 1.05x at p50 |",
        ms(a50), ms(a99), ms(b50), ms(b99), ms(a50) / ms(b50), ms(a99) / ms(b99)
    );
    println!(
        "| P1 | {label}ui write (put of a new object, checked at once) -> applied through ingress, against the honest floor, p50 / p99 | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2}x / {:.2}x | |",
        ms(w50), ms(w99), ms(honest50), ms(honest99), ms(w50) / ms(honest50), ms(w99) / ms(honest99)
    );
    println!(
        "| P1 | {label}the engine alone: an ack as a NATS request straight to the owner, p50 (no HTTP, no ui) | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(d50), ms(floor50), ms(d50) / ms(floor50)
    );
    println!(
        "| P1 | {label}floor of what a write does: request/reply + publish until an ordered consumer delivers it (the engine's read-back) | {:.2} ms | p99 {:.2} ms | | |",
        ms(rr50 + rb50), ms(rr99 + rb99)
    );
}

/// Requests on `subject` from one NATS client, `CONC` in flight for `P2_SECS`: how many per second got an
/// answer `ok` accepts, and how many did not. With `echo`, the same client first answers the subject itself
/// (the raw floor).
async fn request_rate(
    url: &str,
    subject: &'static str,
    echo: bool,
    make: impl Fn(usize, usize) -> bytes::Bytes + Send + Sync + 'static,
    ok: impl Fn(&async_nats::Message) -> bool + Send + Sync + 'static,
) -> (f64, u64) {
    let client = async_nats::connect(url).await.unwrap();
    if echo {
        echo_responder(&client, subject).await;
    }
    let (make, ok) = (Arc::new(make), Arc::new(ok));
    let good = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(P2_SECS);
    let mut tasks = Vec::new();
    for t in 0..CONC {
        let (c, g, b, make, ok) = (client.clone(), good.clone(), bad.clone(), make.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while Instant::now() < until {
                let r = c.request(subject, make(t, i)).await;
                i += 1;
                match r {
                    Ok(m) if ok(&m) => g.fetch_add(1, Ordering::Relaxed),
                    _ => b.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (good.load(Ordering::Relaxed) as f64 / P2_SECS as f64, bad.load(Ordering::Relaxed))
}

/// Commands submitted on `jaque.work.cmd.ingress`: applied per second, and how many were not applied.
fn ingress_rate(url: &str, make: impl Fn(usize, usize) -> Command + Send + Sync + 'static) -> (f64, u64) {
    let applied = |m: &async_nats::Message| matches!(wire::decode_outcome(&m.payload), Ok(Outcome::Applied { .. }));
    let encode = move |t, i| wire::encode(&make(t, i)).into();
    rt().block_on(request_rate(url, "jaque.work.cmd.ingress", false, encode, applied))
}

/// Commands submitted on `jaque.work.cmd.ingress` asking for a claim, as the ui sends them: `CONC` writers, each
/// listening on a reply subject of its own per write for the claim and then the outcome. Applied per second, and
/// how many were not applied.
fn claimed_ingress_rate(url: &str, make: impl Fn(usize, usize) -> Command + Send + Sync + 'static) -> (f64, u64) {
    rt().block_on(async move {
        let client = async_nats::connect(url).await.unwrap();
        let make = Arc::new(make);
        let (good, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let until = Instant::now() + Duration::from_secs(P2_SECS);
        let mut tasks = Vec::new();
        for t in 0..CONC {
            let (c, g, b, make) = (client.clone(), good.clone(), bad.clone(), make.clone());
            tasks.push(tokio::spawn(async move {
                let inbox = c.new_inbox();
                let mut answers = c.subscribe(format!("{inbox}.>")).await.unwrap();
                let mut i = 0;
                while Instant::now() < until {
                    let payload = wire::encode_claim_request(&make(t, i));
                    c.publish_with_reply("jaque.work.cmd.ingress", format!("{inbox}.{i}"), payload.into())
                        .await
                        .unwrap();
                    let applied = loop {
                        let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(10), answers.next()).await else {
                            break false;
                        };
                        match wire::decode_answer(&m.payload) {
                            Ok(wire::Answer::Claimed { .. }) => continue,
                            Ok(wire::Answer::Outcome(o)) => break matches!(o, Outcome::Applied { .. }),
                            _ => break false,
                        }
                    };
                    i += 1;
                    if applied {
                        g.fetch_add(1, Ordering::Relaxed)
                    } else {
                        b.fetch_add(1, Ordering::Relaxed)
                    };
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        (good.load(Ordering::Relaxed) as f64 / P2_SECS as f64, bad.load(Ordering::Relaxed))
    })
}

/// Raw pipelined NATS requests per second to an echo responder, with the same client shape.
fn raw_request_rate(url: &str) -> f64 {
    rt().block_on(request_rate(url, "bench.rate", true, |_, _| "x".into(), |_| true)).0
}

/// Messages the server has taken in and sent out so far (its `/varz`): what a NATS operation costs the server.
fn server_msgs(nats: &Nats) -> u64 {
    let log = nats.proc.output.text();
    let addr = log
        .lines()
        .find_map(|l| l.split_once("Starting http monitor on ").map(|(_, a)| a.trim().to_string()))
        .expect("nats-server runs with -m");
    // The monitor answers chunked: the JSON is between the first `{` and the last `}`.
    let body = http(addr.parse().unwrap(), "GET", "/varz", &[], None).text();
    let (from, to) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    let varz: serde_json::Value = serde_json::from_str(&body[from..=to]).unwrap();
    varz["in_msgs"].as_u64().unwrap() + varz["out_msgs"].as_u64().unwrap()
}

const CONC: usize = 16;
const P2_SECS: u64 = 5;

/// P2: writes submitted on `jaque.work.cmd.ingress` by one NATS client with 16 in flight, beside raw requests
/// to an echo responder with the same client shape. Two kinds of write: an ack of an existing object (a write
/// and nothing else), and a put of a new object, which also makes its first check at once (work dispatch, a
/// probe, the result, a transition appended).
fn p2(nats: &Nats, c: &Cluster) {
    eprintln!("jaque-bench: P2 write throughput...");
    let target = c.target.url();
    // The objects the acks go to: one per writer, put first.
    for t in 0..CONC {
        assert_eq!(put(&c.ui, &format!("p2-ack-{t}"), &format!("p2-ack-{t}"), &target), 200);
    }
    // Each rate with the server messages (in + out) it made per operation.
    let per_op = |m0: u64, rate: f64| (server_msgs(nats) - m0) as f64 / (rate * P2_SECS as f64);
    let m0 = server_msgs(nats);
    let ack = |id: String, t: usize| Command {
        id: CommandId::new(id).unwrap(),
        object: ObjectId::new(format!("p2-ack-{t}")).unwrap(),
        kind: CommandKind::Ack,
        hop: 0,
    };
    let (acks_per_s, acks_other) = ingress_rate(&nats.url, move |t, i| ack(format!("p2-ack-{t}-{i}"), t));
    let ack_msgs = per_op(m0, acks_per_s);
    let m0 = server_msgs(nats);
    let (puts_per_s, puts_other) =
        ingress_rate(&nats.url, move |t, i| put_command(format!("p2-{t}-{i}"), format!("p2-{t}-{i}"), &target));
    let put_msgs = per_op(m0, puts_per_s);
    // The acks again, asking for claims as the ui does (before: the rate above, one request and one answer).
    let m0 = server_msgs(nats);
    let (claimed_per_s, claimed_other) =
        claimed_ingress_rate(&nats.url, move |t, i| ack(format!("p2-claimed-{t}-{i}"), t));
    let claimed_msgs = per_op(m0, claimed_per_s);
    let m0 = server_msgs(nats);
    let raw_per_s = raw_request_rate(&nats.url);
    let raw_msgs = per_op(m0, raw_per_s);
    println!(
        "| P2 | writes/s through ingress (acks), 3 engines, {CONC} in flight ({acks_other} not applied) | {acks_per_s:.0}/s | {raw_per_s:.0}/s raw requests, {CONC} in flight | {:.2}x | >= 0.5x |",
        acks_per_s / raw_per_s
    );
    println!(
        "| P2 | same with puts of new objects, each also checked at once ({puts_other} not applied) | {puts_per_s:.0}/s | {raw_per_s:.0}/s | {:.2}x | |",
        puts_per_s / raw_per_s
    );
    println!(
        "| P2 | messages the server routes (in + out) per write: ack / put | {ack_msgs:.1} / {put_msgs:.1} | {raw_msgs:.1} per raw request | {:.2}x / {:.2}x | |",
        raw_msgs / ack_msgs, raw_msgs / put_msgs
    );
    println!(
        "| P2 | writes/s through ingress (acks) asking for claims as the ui does ({claimed_other} not applied; {claimed_msgs:.1} server messages a write) | {claimed_per_s:.0}/s | {acks_per_s:.0}/s the same without claims ({ack_msgs:.1} messages) | {:.2}x | >= 0.95x |",
        claimed_per_s / acks_per_s
    );
}

/// Write latency through ingress while one of the three engines is SIGSTOPped (a hung process): the server
/// keeps its default ping settings, so the hung engine stays in the queue group and is handed its share. Through
/// the ui (claims, `-claim-timeout 200ms`) and through the ui without claims, alternating; then the engine is
/// continued and rejoins.
fn writes_while_one_hangs(c: &Cluster) {
    const N: usize = 60;
    eprintln!("jaque-bench: writes while one engine of three is stopped...");
    let hung = &c.engines[2];
    // An object e1 owns: its acks are applied whoever claims them.
    let mine = (0..)
        .find_map(|i| {
            assert_eq!(put(&c.ui, &format!("hang-{i}"), &format!("hang-{i}"), &c.target.url()), 200);
            owned_by(&c.ui, "e1").into_iter().next()
        })
        .unwrap();
    hung.proc.signal("STOP");
    let two: BTreeSet<String> = ["e1", "e2"].map(String::from).into();
    poll("an epoch without e3", || (c.ui.epoch_members() == two).then_some(()));
    let path = format!("/api/objects/{mine}/actions/ack");
    let (mut with, mut without, mut unanswered) = (Vec::new(), Vec::new(), 0);
    for i in 0..N {
        let ui = if i % 2 == 0 { &c.ui } else { &c.ui_no_claims };
        let s = Instant::now();
        let status = ui.request("POST", &path, &[], None).status;
        let took = s.elapsed();
        match (i % 2 == 0, status) {
            (true, 200) => with.push(took),
            (true, other) => panic!("a write through the ui with claims answered {other} with e3 stopped"),
            (false, 200) => without.push(took),
            (false, _) => {
                unanswered += 1;
                without.push(took);
            }
        }
    }
    let resent = c.ui.metric("jaque_ui_write_resubmits_total{reason=\"no_claim\"}").unwrap_or(0.0);
    hung.proc.signal("CONT");
    let three: BTreeSet<String> = ["e1", "e2", "e3"].map(String::from).into();
    poll("e3 back in the epoch", || (c.ui.epoch_members() == three).then_some(()));
    poll("e3 back in the ingress queue group", || {
        (hung.metric("jaque_engine_ingress_member") == Some(1.0)).then_some(())
    });
    let (w50, w99) = (pct(&mut with, 0.5), pct(&mut with, 0.99));
    let (o50, o99) = (pct(&mut without, 0.5), pct(&mut without, 0.99));
    println!(
        "| P1 | ui write (ack) through ingress while one of three engines is SIGSTOPped (server's default pings: it stays in the queue group), p50 / p99, all {} applied ({resent:.0} attempts sent again) | {:.2} / {:.0} ms | {:.2} / {:.0} ms without claims ({unanswered} of {} answered 503 after 7 s) | {:.2}x / {:.2}x | |",
        N / 2, ms(w50), ms(w99), ms(o50), ms(o99), N / 2, ms(w50) / ms(o50), ms(w99) / ms(o99)
    );
}

/// P3: failover after kill -9 and after SIGTERM.
fn p3(servers: &Servers, c: Cluster, label: &str) {
    eprintln!("jaque-bench: P3 failover after kill -9 and SIGTERM...");
    let Cluster { target, mut engines, worker, ui, ui_no_claims: _ } = c;
    let e3 = engines.pop().unwrap();
    let (kill_epoch, kill_write) = failover(&ui, "e3", &target.url(), || e3.proc.signal("KILL"));
    drop(e3);
    let e4 = engine(servers, "e4");
    e4.wait_ready();
    let three: BTreeSet<String> = ["e1", "e2", "e4"].map(String::from).into();
    poll("e4 in the epoch", || (ui.epoch_members() == three).then_some(()));
    poll("e4 owns its share", || (!owned_by(&ui, "e4").is_empty()).then_some(()));
    let (term_epoch, term_write) = failover(&ui, "e4", &target.url(), || e4.proc.signal("TERM"));
    drop((engines, worker, ui));
    let ttl = TTL_SECS as f64;
    println!(
        "| P3 | {label}failover after kill -9 (ttl {TTL_SECS}s): new epoch / write applied again | {:.2} s / {:.2} s | ttl {ttl:.0} s | {:.2}x / {:.2}x ttl | <= 1.33x ttl + expiry lag |",
        kill_epoch.as_secs_f64(), kill_write.as_secs_f64(), kill_epoch.as_secs_f64() / ttl, kill_write.as_secs_f64() / ttl
    );
    println!(
        "| P3 | {label}failover after SIGTERM: new epoch / write applied again | {:.3} s / {:.3} s | ttl {ttl:.0} s | {:.3}x / {:.3}x ttl | <= 0.2 s |",
        term_epoch.as_secs_f64(), term_write.as_secs_f64(), term_epoch.as_secs_f64() / ttl, term_write.as_secs_f64() / ttl
    );
}

/// Kills the node leading the log stream and times until a write through the ui is applied again (8 writers,
/// each a new object, a new attempt every 20 ms between them). The node is started again before returning.
fn leader_loss(nc: &mut NatsCluster, c: &Cluster) -> (String, Duration) {
    eprintln!("jaque-bench: losing the log's leader...");
    let leader = nc.stream_leader("JAQUE_LOG");
    let i = nc.index_of(&leader);
    let first_ok = Mutex::new(None::<Duration>);
    let attempts = AtomicU64::new(0);
    let start = Instant::now();
    nc.kill(i);
    thread::scope(|w| {
        for t in 0..8u64 {
            let (first_ok, attempts, c) = (&first_ok, &attempts, c);
            w.spawn(move || {
                thread::sleep(Duration::from_millis(20 * t));
                while first_ok.lock().unwrap().is_none() {
                    assert!(start.elapsed() < Duration::from_secs(60), "no write applied within a minute");
                    let n = attempts.fetch_add(1, Ordering::SeqCst);
                    if put(&c.ui, &format!("leader-{n}"), &format!("leader-{n}"), &c.target.url()) == 200 {
                        let at = start.elapsed();
                        let mut f = first_ok.lock().unwrap();
                        *f = Some(f.map_or(at, |x| x.min(at)));
                    }
                    thread::sleep(Duration::from_millis(160));
                }
            });
        }
    });
    let took = first_ok.into_inner().unwrap().expect("a write was applied");
    nc.restart(i);
    (leader, took)
}

/// The engine `e0` of a P14/P15 run as the log names it (id and incarnation), read from the epoch in force.
fn member_of(j: &Jaque, id: &str) -> MemberRef {
    let v = j.get("/api/cluster").json();
    let m = v["buckets"][0]["epoch_members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} in the epoch in force: {v}"));
    MemberRef { id: MemberId::new(id).unwrap(), incarnation: m["incarnation"].as_u64().unwrap() }
}

/// `n` events written as by `writer`, which owns every object (the only engine of epoch `epoch`): the puts of
/// `objects` objects (daily checks, nothing due), then transitions over them, alternating ok and critical.
fn history(writer: &MemberRef, epoch: u64, objects: usize, n: usize, from: usize) -> impl Iterator<Item = LogEntry> {
    let writer = writer.clone();
    let def = ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: 86_400_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    };
    (from..from + n).map(move |i| {
        let object = ObjectId::new(format!("object-{:04}", i % objects)).unwrap();
        let body = if i < objects {
            EventBody::Put { def: def.clone() }
        } else {
            let up = (i / objects).is_multiple_of(2);
            let (from, to) = if up { (State::Ok, State::Critical) } else { (State::Critical, State::Ok) };
            EventBody::transition(from, to, format!("transition {i}"))
        };
        LogEntry::Event(Event { object, epoch, writer: writer.clone(), at: Time(unix_ms()), command_id: None, body })
    })
}

/// How long a new engine takes from its start to `/healthz` 200 (asked without pause), median of `runs`.
fn time_to_ready(servers: &Servers, runs: usize) -> Duration {
    let mut took: Vec<Duration> = (0..runs)
        .map(|r| {
            let started = Instant::now();
            let mut e = engine(servers, &format!("late{r}"));
            while e.get("/healthz").status != 200 {
                assert!(started.elapsed() < Duration::from_secs(600), "the new engine never became ready");
            }
            let t = started.elapsed();
            assert!(e.metric("jaque_engine_objects").unwrap_or(0.0) >= 1000.0, "ready with every object");
            e.proc.signal("TERM");
            e.proc.wait_exit();
            t
        })
        .collect();
    pct(&mut took, 0.5)
}

/// P14: an engine's time to ready with 1,000 objects and a history of `n` events behind them, while an engine
/// that ran through that history wrote snapshots as it went (the default -snapshot-every 10,000).
fn p14_ready(n: usize) -> (Duration, u64) {
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    let e0 = engine_as(&servers, "e0", "engine,ui");
    e0.wait_ready();
    let writer = member_of(&e0, "e0");
    let last = rt().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
        publish_log(&js, history(&writer, 1, 1000, n, 0)).await
    });
    poll("e0 to read the whole history", || (e0.metric("jaque_engine_log_position")? >= last as f64).then_some(()));
    // With a long history, the snapshot that a new engine starts from is within -snapshot-every of the end.
    if n > 10_000 {
        poll("a snapshot near the end of the history", || {
            (e0.metric("jaque_snapshot_position")? + 10_000.0 >= last as f64).then_some(())
        });
    }
    (time_to_ready(&servers, 3), last)
}

fn p14() {
    eprintln!("jaque-bench: P14 time to ready with a short and a long history...");
    let (short, short_len) = p14_ready(1_000);
    let (long, long_len) = p14_ready(1_000_000);
    println!(
        "| P14 | a new engine's time to ready, 1,000 objects, {long_len} log entries behind them (median of 3) | {:.0} ms | {:.0} ms with {short_len} entries | {:.2}x | <= 1.5x |",
        ms(long),
        ms(short),
        long.as_secs_f64() / short.as_secs_f64()
    );
}

/// The log stream's size: messages and bytes.
fn stream_size(rt: &tokio::runtime::Runtime, js: &async_nats::jetstream::Context) -> (u64, u64) {
    // On the runtime the client lives on: its connection is driven only while that one runs.
    let info = rt.block_on(async { js.get_stream("JAQUE_LOG").await.unwrap().info().await.unwrap().clone() });
    (info.state.messages, info.state.bytes)
}

/// P15: 1,000,000 transitions over 1,000 objects through an engine, a ui, a sink (SQLite) and a notifier (one
/// endpoint), at a steady `RATE` per second, with snapshots every 10,000 entries and -log-retention 5s (the
/// stream holds about 5 s of the log: 25,000 entries at this rate, reached well within the first 100,000): the
/// stream's size and every process's resident memory after each 100,000, once every process has caught up.
fn p15() {
    eprintln!("jaque-bench: P15 a run of 1,000,000 transitions...");
    const TOTAL: usize = 1_000_000;
    const STEP: usize = 100_000;
    const RATE: usize = 5_000;
    const CHUNK: usize = 500;
    let nats = Nats::start();
    let url = nats.url.clone();
    let lifecycle = ["-snapshot-every", "10000", "-log-retention", "5s"];
    let mut args = vec!["-target", "engine,worker", "-queue", &url, "-coordination", &url, "-id", "e0"];
    args.extend_from_slice(&lifecycle);
    let e0 = Jaque::start("e0", &args);
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &url]);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let sink = Jaque::start("sink", &["-target", "sink", "-coordination", &url, "-sink-store", &store]);
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    let notifier = Jaque::start("notifier", &["-target", "notifier", "-coordination", &url, "-notify-webhook", &hook]);
    let procs = [("engine", &e0), ("ui", &ui), ("sink", &sink), ("notifier", &notifier)];
    for (_, j) in procs {
        j.wait_ready();
    }
    let writer = member_of(&ui, "e0");
    let rt = rt();
    let js = rt.block_on(async { async_nats::jetstream::new(async_nats::connect(&url).await.unwrap()) });
    let mut samples: Vec<(usize, (u64, u64), Vec<u64>)> = Vec::new();
    let mut sent = 0;
    let started = Instant::now();
    let mut published = 0;
    while sent < TOTAL + 1000 {
        let n = if sent == 0 { STEP + 1000 } else { STEP };
        let mut last = 0;
        for from in (sent..sent + n).step_by(CHUNK) {
            let due = started + Duration::from_secs_f64(published as f64 / RATE as f64);
            thread::sleep(due.saturating_duration_since(Instant::now()));
            let k = CHUNK.min(sent + n - from);
            last = rt.block_on(publish_log(&js, history(&writer, 1, 1000, k, from)));
            published += k;
        }
        sent += n;
        poll("every process caught up", || {
            let caught = e0.metric("jaque_engine_log_position")? >= last as f64
                && ui.metric("jaque_ui_log_position")? >= last as f64
                && sink.metric("jaque_sink_written_position")? >= last as f64
                && notifier.metric("jaque_notifier_log_position")? >= last as f64
                && notifier.metric("jaque_notifier_lag_events")? == 0.0;
            caught.then_some(())
        });
        let rss: Vec<u64> = procs.iter().map(|(_, j)| rss_kib(j.proc.pid())).collect();
        let size = stream_size(&rt, &js);
        eprintln!("jaque-bench: P15 after {} transitions: stream {size:?}, rss KiB {rss:?}", sent - 1000);
        samples.push((sent - 1000, size, rss));
    }
    let (first, last) = (&samples[0], samples.last().unwrap());
    println!(
        "| P15 | log stream after {} transitions at {RATE}/s (snapshots every 10,000, -log-retention 5s): messages, MiB | {} msgs, {:.1} MiB | {} msgs, {:.1} MiB after {} | {:.2}x bytes | flat, <= 1.1x |",
        last.0,
        last.1 .0,
        last.1 .1 as f64 / 1048576.0,
        first.1 .0,
        first.1 .1 as f64 / 1048576.0,
        first.0,
        last.1 .1 as f64 / first.1 .1.max(1) as f64
    );
    // What the stream can hold: the retention's worth of entries behind the latest snapshot, the entries since
    // that snapshot (up to -snapshot-every), and the epoch records (never purged); where in that range a
    // sample falls depends on when the last snapshot was written.
    let (lo, hi) = (samples.iter().map(|s| s.1 .0).min().unwrap(), samples.iter().map(|s| s.1 .0).max().unwrap());
    let bound = RATE * 5 + 10_000;
    println!(
        "| P15 | log stream, every sample of the run: messages min-max | {lo}-{hi} msgs | {bound} = 5 s x {RATE}/s + 10,000 between snapshots (+ epoch records) | {:.2}x | <= 1x |",
        hi as f64 / bound as f64
    );
    let half = samples.len() / 2;
    for (i, (name, _)) in procs.iter().enumerate() {
        println!(
            "| P15 | {name} resident memory after {} transitions at {RATE}/s | {:.1} MiB | {:.1} MiB after {} | {:.2}x | flat, <= 1.1x |",
            last.0,
            last.2[i] as f64 / 1024.0,
            first.2[i] as f64 / 1024.0,
            first.0,
            last.2[i] as f64 / first.2[i].max(1) as f64
        );
        let later: Vec<u64> = samples[half..].iter().map(|s| s.2[i]).collect();
        let (lo, hi) = (*later.iter().min().unwrap(), *later.iter().max().unwrap());
        println!(
            "| P15 | {name} resident memory over the second half of the run ({}-{} transitions): max / min | {:.1} MiB | {:.1} MiB | {:.2}x | |",
            samples[half].0,
            last.0,
            hi as f64 / 1024.0,
            lo as f64 / 1024.0,
            hi as f64 / lo.max(1) as f64
        );
    }
}

// ---- P9, P10 and P8 at a million objects: what an operator compares tools by (issue 14) ----

/// TCP listeners on 127.0.0.1 that accept every connection and close it at once, until `stop`: from then on
/// their ports refuse (the target "dies"). Several ports, because every connect to one address and port from
/// 127.0.0.1 takes an ephemeral port that stays in TIME_WAIT for a minute: ~28,000 of them (the kernel's
/// range) would cap the connects to one port at a few hundred a second once they are used up, which is the
/// test rig's limit, not jaque's (real checks go to many addresses).
struct AcceptAndClose {
    addrs: Vec<std::net::SocketAddr>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

const TARGET_PORTS: usize = 16;

impl AcceptAndClose {
    fn start() -> AcceptAndClose {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (mut addrs, mut threads) = (Vec::new(), Vec::new());
        for _ in 0..TARGET_PORTS {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(listener.local_addr().unwrap());
            let stopped = stop.clone();
            threads.push(thread::spawn(move || {
                for conn in listener.incoming() {
                    drop(conn);
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                }
            }));
        }
        AcceptAndClose { addrs, stop, threads }
    }

    /// Closes the listening sockets: every connect after this returns is refused.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (addr, t) in self.addrs.iter().zip(self.threads.drain(..)) {
            // Wakes the accept loop, which sees the flag and drops its listener.
            let _ = std::net::TcpStream::connect(addr);
            t.join().unwrap();
        }
    }
}

impl Drop for AcceptAndClose {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU time (user + system) the calling thread has used, in seconds (nanosecond clock).
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU time (user + system) a process has used, from `/proc/<pid>/stat`, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces): utime is the 12th, stime the
    // 13th of those; clock ticks of 1/100 s (USER_HZ on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    f.get(11).zip(f.get(12)).map_or(0.0, |(u, s)| (u + s) as f64 / 100.0)
}

/// Every sample of a process's `/metrics`, by its name with labels.
fn metrics_of(j: &Jaque) -> std::collections::BTreeMap<String, f64> {
    j.get("/metrics")
        .text()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect()
}

/// The bare floor of a tcp check: one thread connecting to the target's ports in turn (and closing) in a loop
/// for `secs`, its own CPU time measured: connects per second and per CPU second.
fn bare_connects(target: &AcceptAndClose, secs: f64) -> (f64, f64) {
    let addrs = target.addrs.clone();
    thread::spawn(move || {
        let (cpu0, start) = (thread_cpu_secs(), Instant::now());
        let mut n = 0usize;
        while start.elapsed().as_secs_f64() < secs {
            drop(std::net::TcpStream::connect(addrs[n % addrs.len()]).unwrap());
            n += 1;
        }
        let (wall, cpu) = (start.elapsed().as_secs_f64(), thread_cpu_secs() - cpu0);
        (n as f64 / wall, n as f64 / cpu.max(1e-6))
    })
    .join()
    .unwrap()
}

/// Quantile `q` of a histogram given by per-bucket counts (`counts[i]` in (bounds[i-1], bounds[i]] ms, the last
/// past every bound), interpolated within the bucket as Prometheus' `histogram_quantile` does.
fn histogram_quantile(q: f64, bounds: &[u64], counts: &[f64]) -> f64 {
    let total: f64 = counts.iter().sum();
    if total == 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let mut seen = 0.0;
    for (i, c) in counts.iter().enumerate() {
        if seen + c >= rank && *c > 0.0 {
            let lo = if i == 0 { 0.0 } else { bounds[i - 1] as f64 };
            let Some(hi) = bounds.get(i) else { return lo };
            return lo + (*hi as f64 - lo) * (rank - seen) / c;
        }
        seen += c;
    }
    *bounds.last().unwrap() as f64
}

/// The engine's lateness histogram: per-bucket counts (not cumulated) from one `/metrics` reading.
fn lateness_buckets(m: &std::collections::BTreeMap<String, f64>) -> Vec<f64> {
    let bounds = jaque_core::LATENESS_BOUNDS_MS;
    let mut cumulative: Vec<f64> = bounds
        .iter()
        .map(|b| {
            let le = *b as f64 / 1000.0;
            m.get(&format!("jaque_engine_check_start_lateness_seconds_bucket{{le=\"{le}\"}}")).copied().unwrap_or(0.0)
        })
        .collect();
    cumulative.push(m.get("jaque_engine_check_start_lateness_seconds_bucket{le=\"+Inf\"}").copied().unwrap_or(0.0));
    let mut prev = 0.0;
    cumulative
        .into_iter()
        .map(|c| {
            let d = c - prev;
            prev = c;
            d
        })
        .collect()
}

/// Tcp checks of the target's ports (object `i` on port `i % TARGET_PORTS`) every `interval_ms`, their slots
/// spread evenly over the interval (anchors an hour ago plus `i * interval / n`), so `n` objects make
/// `n / interval` checks a second in an even stream.
fn spread_objects(servers: &Servers, n: usize, target: &AcceptAndClose, interval_ms: u64, max_attempts: Option<u32>) {
    let defs: Vec<ObjectDef> = target
        .addrs
        .iter()
        .map(|a| ObjectDef {
            probe: Probe::Tcp { addr: a.to_string() },
            interval_ms,
            timeout_ms: interval_ms.min(1000),
            max_attempts,
            ..ObjectDef::UNSET
        })
        .collect();
    let base = unix_ms() - 3_600_000;
    let defined = |i: usize| base + i as u64 * interval_ms / n as u64;
    load_objects(servers, n, |i| defs[i % defs.len()].clone(), defined, |_| State::Ok);
}

/// The engine and the worker of a P9/P10 run: one `-target engine,worker -queue memory` process, or an engine
/// and a worker process on `-queue nats://`; the list of (role, process) whose CPU is counted.
fn engine_and_worker(servers: &Servers, queue: &str, extra_target: &str) -> Vec<(&'static str, Jaque)> {
    let url = &servers.url;
    let ttl = format!("{TTL_SECS}s");
    if queue == "memory" {
        let target = format!("engine,worker{extra_target}");
        let args = ["-target", &target, "-queue", "memory", "-coordination", url, "-id", "e1", "-heartbeat-ttl", &ttl];
        vec![("engine+worker", Jaque::start("e1", &args))]
    } else {
        let target = format!("engine{extra_target}");
        let args = ["-target", &target, "-queue", url, "-coordination", url, "-id", "e1", "-heartbeat-ttl", &ttl];
        let e = Jaque::start("e1", &args);
        let w = Jaque::start("w1", &["-target", "worker", "-queue", url, "-id", "w1"]);
        vec![("engine", e), ("worker", w)]
    }
}

/// The same connects as `bare_connects`, paced the way an engine dispatches `rate` checks a second every
/// `tick` (`dispatch_every`): at each tick the ones due in it, one after the other, then sleep until the next;
/// for `secs`. CPU seconds of the thread per 1,000 connects: what the connects alone cost at that pace, with
/// nothing of jaque around them.
fn paced_connects(target: &AcceptAndClose, rate: usize, tick: Duration, secs: f64) -> f64 {
    let addrs = target.addrs.clone();
    thread::spawn(move || {
        let per_tick = (rate as f64 * tick.as_secs_f64()).round().max(1.0) as usize;
        let (cpu0, start) = (thread_cpu_secs(), Instant::now());
        let (mut n, mut next) = (0usize, start);
        while start.elapsed().as_secs_f64() < secs {
            for _ in 0..per_tick {
                drop(std::net::TcpStream::connect(addrs[n % addrs.len()]).unwrap());
                n += 1;
            }
            next += tick;
            thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        (thread_cpu_secs() - cpu0) / n.max(1) as f64 * 1000.0
    })
    .join()
    .unwrap()
}

/// How often an engine dispatches at `rate` checks due a second, with the `-check-linger` and `-check-batch`
/// the processes run with (`JAQUE_CHECK_LINGER` in whole milliseconds, e.g. `10ms`, and `JAQUE_CHECK_BATCH`
/// when the bench is run with them set: the processes inherit them; else the flags' defaults): a batch's worth
/// or the linger, whichever comes first.
fn dispatch_every(rate: usize) -> Duration {
    let linger = std::env::var("JAQUE_CHECK_LINGER").ok().and_then(|s| s.strip_suffix("ms")?.parse().ok());
    let batch = std::env::var("JAQUE_CHECK_BATCH").ok().and_then(|s| s.parse().ok());
    let linger = Duration::from_millis(linger.unwrap_or(50)).max(Duration::from_millis(1));
    linger.min(Duration::from_secs_f64(batch.unwrap_or(128) as f64 / rate as f64))
}

/// P9: one engine and one worker checking `n` objects every second (tcp connects to a listener that accepts
/// and closes), for 1k, 10k and 30k objects, on both queues: checks completed per second, CPU seconds per
/// 1,000 checks of each process, how late checks leave against their slot, and the slots skipped busy; beside a
/// bare loop's connects to the same listener, measured in the same step, and the same connects paced like the
/// engine's dispatches. `JAQUE_BENCH_P9_STEPS` (e.g. `memory:1000,nats:1000`) runs only those steps and
/// `JAQUE_BENCH_P9_WINDOW_SECS` changes the 10 s window; the window's start prints the processes' pids (for a
/// profiler).
fn p9() {
    const WARMUP: Duration = Duration::from_secs(4);
    let window = Duration::from_secs(
        std::env::var("JAQUE_BENCH_P9_WINDOW_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(10),
    );
    let steps = std::env::var("JAQUE_BENCH_P9_STEPS").ok();
    for queue in ["memory", "nats"] {
        for n in [1_000usize, 10_000, 30_000] {
            if let Some(steps) = &steps {
                if !steps.split(',').any(|s| s == format!("{queue}:{n}")) {
                    continue;
                }
            }
            eprintln!("jaque-bench: P9 {n} objects at 1 s, -queue {queue}...");
            let nats = Nats::start();
            let servers = Servers::one(&nats);
            let target = AcceptAndClose::start();
            spread_objects(&servers, n, &target, 1000, None);
            // The floor with nothing of jaque running, half before its processes start and half after they are
            // gone: load from elsewhere on this shared machine drifts over a step, and both halves see it.
            let tick = dispatch_every(n);
            let floor = |secs: f64| (bare_connects(&target, secs), paced_connects(&target, n, tick, secs));
            let before = floor(1.5);
            let procs = engine_and_worker(&servers, queue, "");
            let engine = &procs[0].1;
            poll("the engine owns every object", || {
                (engine.metric("jaque_engine_objects_owned") == Some(n as f64)).then_some(())
            });
            thread::sleep(WARMUP);
            let read = |procs: &[(&str, Jaque)]| {
                let m: Vec<_> = procs.iter().map(|(_, j)| metrics_of(j)).collect();
                let cpu: Vec<f64> = procs.iter().map(|(_, j)| cpu_secs(j.proc.pid())).collect();
                (Instant::now(), m, cpu)
            };
            let (t0, m0, c0) = read(&procs);
            eprintln!(
                "jaque-bench: P9 window starts ({window:?}), pids {:?}",
                procs.iter().map(|(_, j)| j.proc.pid()).collect::<Vec<_>>()
            );
            thread::sleep(window);
            eprintln!("jaque-bench: P9 window ends");
            let (t1, m1, c1) = read(&procs);
            let wall = (t1 - t0).as_secs_f64();
            let worker_m = |m: &[std::collections::BTreeMap<String, f64>]| {
                let w = m.last().unwrap();
                ["ok", "warning", "critical", "unknown"]
                    .iter()
                    .map(|s| w.get(&format!("jaque_worker_checks_total{{state=\"{s}\"}}")).copied().unwrap_or(0.0))
                    .sum::<f64>()
            };
            let done = worker_m(&m1) - worker_m(&m0);
            let critical = m1.last().unwrap()["jaque_worker_checks_total{state=\"critical\"}"]
                - m0.last().unwrap()["jaque_worker_checks_total{state=\"critical\"}"];
            let delta = |k: &str| m1[0].get(k).copied().unwrap_or(0.0) - m0[0].get(k).copied().unwrap_or(0.0);
            let skipped = delta("jaque_engine_checks_skipped_busy_total");
            let lost = delta("jaque_engine_checks_lost_total");
            let (b0, b1) = (lateness_buckets(&m0[0]), lateness_buckets(&m1[0]));
            let late: Vec<f64> = b1.iter().zip(&b0).map(|(a, b)| a - b).collect();
            let bounds = jaque_core::LATENESS_BOUNDS_MS;
            let (p50, p99) = (histogram_quantile(0.5, &bounds, &late), histogram_quantile(0.99, &bounds, &late));
            let max = late.iter().rposition(|c| *c > 0.0).map_or("0 ms".to_string(), |i| match bounds.get(i) {
                Some(b) => format!("<= {b} ms"),
                None => format!("> {} ms", bounds.last().unwrap()),
            });
            let rate = done / wall;
            let cpu: Vec<f64> = c1.iter().zip(&c0).map(|(a, b)| a - b).collect();
            let total_cpu: f64 = cpu.iter().sum();
            let per_k: Vec<String> =
                procs.iter().zip(&cpu).map(|((r, _), c)| format!("{r} {:.3}", c / done.max(1.0) * 1000.0)).collect();
            let per_cpu = done / total_cpu.max(0.01);
            drop(procs);
            let after = floor(1.5);
            // Rates and CPU per connect averaged over the two halves.
            let floor_rate = (before.0 .0 + after.0 .0) / 2.0;
            let floor_per_cpu = 2.0 / (1.0 / before.0 .1 + 1.0 / after.0 .1);
            let paced_per_k = (before.1 + after.1) / 2.0;
            println!(
                "| P9 | -queue {queue}, {n} objects every 1 s (due {n}/s): checks completed/s; CPU s per 1,000 checks | {rate:.0}/s ({:.2}x due; {critical:.0} critical, {lost:.0} lost); {} | bare loop (before and after): {floor_rate:.0} connects/s, {:.3} CPU s per 1,000 (paced as dispatched, {n}/s in {:.1} ms ticks: {paced_per_k:.3}) | {:.2}x connects per CPU s ({per_cpu:.0} vs {floor_per_cpu:.0}; {:.2}x the paced loop's) | >= 0.5x |",
                rate / n as f64,
                per_k.join(", "),
                1000.0 / floor_per_cpu,
                tick.as_secs_f64() * 1000.0,
                per_cpu / floor_per_cpu,
                per_cpu * paced_per_k / 1000.0,
            );
            println!(
                "| P9 | -queue {queue}, {n} objects every 1 s: check start lateness against the slot, p50 / p99 / max; slots skipped busy | {p50:.1} / {p99:.1} ms / {max}; {skipped:.0} skipped ({:.1}%) | | | p99 <= 100 ms below saturation |",
                100.0 * skipped / (skipped + late.iter().sum::<f64>()).max(1.0)
            );
            drop(target);
        }
    }
}

/// P10: `N` objects checked every `INTERVAL` whose target dies at once: the time from the death until every
/// transition is accepted in the log and visible in a `-target ui`, beside a bare client appending `N` events
/// of the same size to a stream on the same server in the same run.
fn p10(max_attempts: Option<u32>) {
    const N: usize = 50_000;
    const INTERVAL_MS: u64 = 10_000;
    let rules = match max_attempts {
        Some(n) => format!("max_attempts {n}"),
        None => format!("default rules: max_attempts {}", jaque_core::alert::DEFAULT_MAX_ATTEMPTS),
    };
    eprintln!("jaque-bench: P10 a storm of {N} transitions ({rules})...");
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    let mut target = AcceptAndClose::start();
    spread_objects(&servers, N, &target, INTERVAL_MS, max_attempts);
    let procs = engine_and_worker(&servers, "nats", "");
    let engine = &procs[0].1;
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &servers.url, "-id", "ui"]);
    poll("the engine owns every object", || {
        (engine.metric("jaque_engine_objects_owned") == Some(N as f64)).then_some(())
    });
    poll("the ui has every object", || (ui.get("/api/summary").json()["objects"] == N as u64).then_some(()));
    // One interval in steady state, so every object has been checked (ok) by this engine once.
    thread::sleep(Duration::from_millis(INTERVAL_MS));
    let critical = |j: &Jaque| j.get("/api/summary").json()["states"]["critical"].as_u64().unwrap_or(0);
    let written0 = engine.metric("jaque_engine_transitions_written_total").unwrap_or(0.0);
    let cpu0: Vec<f64> = procs.iter().map(|(_, j)| cpu_secs(j.proc.pid())).collect();
    let death = Instant::now();
    target.stop();
    let mut written_all = None;
    let mut seen: Vec<(f64, u64)> = Vec::new();
    loop {
        let c = critical(&ui);
        let t = death.elapsed();
        seen.push((t.as_secs_f64(), c));
        if written_all.is_none()
            && engine.metric("jaque_engine_transitions_written_total").unwrap_or(0.0) - written0 >= N as f64
        {
            written_all = Some(t);
        }
        if c >= N as u64 {
            break;
        }
        assert!(t < Duration::from_secs(600), "every transition visible within 10 minutes ({c} of {N})");
        thread::sleep(Duration::from_millis(20));
    }
    let visible = death.elapsed();
    let cpu: Vec<String> =
        procs.iter().zip(&cpu0).map(|((r, j), c0)| format!("{r} {:.1} s", cpu_secs(j.proc.pid()) - c0)).collect();
    let written_all = written_all.unwrap_or(visible);
    let skipped = engine.metric("jaque_engine_checks_skipped_busy_total").unwrap_or(0.0);
    // The busiest second as the ui saw it.
    let peak = seen
        .iter()
        .filter_map(|(t, c)| {
            let before = seen.iter().rev().find(|(u, _)| *u <= t - 1.0)?;
            Some(c - before.1)
        })
        .max()
        .unwrap_or(0);
    drop(procs);
    // The floor: the same number of events, each the size of one of the storm's transitions, appended by one
    // bare client (acks awaited in windows of 1000) to a stream on the same server.
    let (floor, size) = rt().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: "BENCH_STORM".into(),
            subjects: vec!["bench.storm".into()],
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
        let event = |i: usize| {
            wire::encode(&LogEntry::Event(Event {
                object: ObjectId::new(format!("object-{i:06}")).unwrap(),
                epoch: 3,
                writer: MemberRef { id: MemberId::new("e1").unwrap(), incarnation: unix_ms() },
                at: Time(unix_ms()),
                command_id: None,
                body: EventBody::transition(
                    State::Ok,
                    State::Critical,
                    format!("connect {}: Connection refused (os error 111)", target.addrs[i % TARGET_PORTS]),
                ),
            }))
        };
        let size = event(0).len();
        let s = Instant::now();
        let mut acks = Vec::new();
        for i in 0..N {
            acks.push(js.publish("bench.storm", event(i).into()).await.unwrap());
            if acks.len() >= 1000 {
                for a in acks.drain(..) {
                    a.await.unwrap();
                }
            }
        }
        for a in acks {
            a.await.unwrap();
        }
        (s.elapsed(), size)
    });
    // The last object's first slot after the death, and its retries until its problem is hard: each object's
    // retry interval is a fifth of the interval, at least the timeout (`ObjectDef::retry_interval`).
    let def =
        ObjectDef { interval_ms: INTERVAL_MS, timeout_ms: INTERVAL_MS.min(1000), max_attempts, ..ObjectDef::UNSET };
    let attempts = max_attempts.unwrap_or(jaque_core::alert::DEFAULT_MAX_ATTEMPTS);
    let iv = (INTERVAL_MS + u64::from(attempts - 1) * def.retry_interval().as_millis() as u64) as f64 / 1000.0;
    let schedule = if attempts > 1 {
        format!("{iv:.0} s (the last object's first slot after the death, and its {} retries)", attempts - 1)
    } else {
        format!("{iv:.0} s (the last object's first slot after the death)")
    };
    println!(
        "| P10 | {N} objects checked every {:.0} s ({rules}), their target dies: death -> every hard transition accepted and visible in a -target ui | {:.2} s (all written by the engine at {:.2} s; {skipped:.0} slots skipped busy; CPU {}) | {schedule} + {:.2} s (bare append of {N} events of {size} bytes) | {:.2}x | |",
        INTERVAL_MS as f64 / 1000.0,
        visible.as_secs_f64(),
        written_all.as_secs_f64(),
        cpu.join(", "),
        floor.as_secs_f64(),
        visible.as_secs_f64() / (iv + floor.as_secs_f64()),
    );
    println!(
        "| P10 | the storm's tail ({rules}): from the last object's last attempt due until every hard transition is visible | {:.2} s | {:.2} s bare append of {N} events | {:.2}x | <= 2x |",
        visible.as_secs_f64() - iv,
        floor.as_secs_f64(),
        (visible.as_secs_f64() - iv) / floor.as_secs_f64()
    );
    println!(
        "| P10 | hard transitions per second the ui saw in the storm's busiest second ({rules}) | {peak}/s | {:.0}/s bare appends; {:.0}/s checks due | {:.2}x | |",
        N as f64 / floor.as_secs_f64(),
        N as f64 / (INTERVAL_MS as f64 / 1000.0),
        peak as f64 / (N as f64 / floor.as_secs_f64())
    );
}

/// P18, alert noise: healthy http targets whose probes fail 1 % of the time at random, each checked every
/// second, in one process with a notifier: notifications per 1,000 checks under the default alert rules (soft
/// states, `max_attempts` 3, flapping detection), beside objects whose every change is hard at once
/// (`max_attempts: 1`, `flapping: false`: what every change did before soft states), side by side in the same run
/// against the same target. Retries count as checks.
fn p18() {
    const N: usize = 100;
    const WINDOW: Duration = Duration::from_secs(60);
    eprintln!("jaque-bench: P18 alert noise, {N} + {N} objects failing 1 % of probes for {WINDOW:?}...");
    let target = CountingTarget::start();
    target.set_fail_permille(10);
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    let j =
        Jaque::start("noise", &["-target", "engine,worker,ui,notifier", "-queue", "memory", "-notify-webhook", &hook]);
    j.wait_ready();
    let sets = [("hard", serde_json::json!({"max_attempts": 1, "flapping": false})), ("soft", serde_json::json!({}))];
    for i in 0..N {
        for (set, extra) in &sets {
            let mut body = serde_json::json!({
                "probe": {"type": "http", "url": format!("{}/{set}-{i}", target.url())},
                "interval": "1s",
                "timeout": "500ms",
            });
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let r = j.put(&format!("/api/objects/{set}-{i}"), &body);
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
    poll("every object checked", || {
        let s = j.get("/api/summary").json();
        (s["states"]["pending"].as_u64().unwrap_or(0) == 0 && s["objects"] == 2 * N as u64).then_some(())
    });
    let count = |set: &str| -> (u64, u64) {
        let hits: u64 =
            target.all_hits().iter().filter(|(p, _)| p.starts_with(&format!("{set}-"))).map(|(_, n)| n).sum();
        let sent = rx
            .deliveries("/hook")
            .iter()
            .filter(|d| d.body["object"].as_str().is_some_and(|o| o.starts_with(&format!("{set}-"))))
            .count();
        (hits, sent as u64)
    };
    // The window starts a few intervals later: a new object's first result is its state at once, so one whose
    // first probe failed is notified, and recovers, at its start; that is not the steady noise measured here.
    thread::sleep(Duration::from_secs(5));
    let before: Vec<(u64, u64)> = sets.iter().map(|(set, _)| count(set)).collect();
    let failed0 = target.failed();
    thread::sleep(WINDOW);
    let after: Vec<(u64, u64)> = sets.iter().map(|(set, _)| count(set)).collect();
    let per_k = |i: usize| {
        let (checks, sent) = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        (sent as f64 * 1000.0 / checks.max(1) as f64, checks, sent)
    };
    let (soft, soft_checks, soft_sent) = per_k(1);
    let (hard, hard_checks, hard_sent) = per_k(0);
    println!(
        "| P18 | alert noise: notifications per 1,000 checks of healthy http targets failing 1 % of probes at random ({N} objects each, 1 s, {} s; {} failed probes) | {soft:.1} with the default rules ({soft_sent} in {soft_checks} checks, retries included) | {hard:.1} with every change hard at once, as before soft states ({hard_sent} in {hard_checks} checks) | {:.2}x | 0 |",
        WINDOW.as_secs(),
        target.failed() - failed0,
        soft / hard.max(f64::MIN_POSITIVE),
    );
}

/// P19, configuration from files: `jaque apply -f` of 10,000 objects into an empty cluster, then again with 100
/// of them changed, beside the same number of bare PUTs sent by this process at the same concurrency (16) to the
/// same ui in the same run: what reading the files, planning against the cluster and the client cost on top of
/// the writes themselves.
fn p19() {
    const N: usize = 10_000;
    const CHANGED: usize = 100;
    const CONCURRENCY: usize = 16;
    eprintln!("jaque-bench: P19 apply of {N} objects from files...");
    let j = Jaque::start("apply", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let dir = tempfile::tempdir().unwrap();
    let yaml = |prefix: &str, changed: usize| {
        let mut s = String::from("defaults:\n  - interval: 1h\nobjects:\n");
        for i in 0..N {
            let rev = if i < changed { "2" } else { "1" };
            s.push_str(&format!(
                "  {prefix}-{i:05}:\n    probe: {{type: tcp, addr: \"127.0.0.1:9\"}}\n    labels: {{rev: \"{rev}\"}}\n"
            ));
        }
        s
    };
    let file = dir.path().join("objects.yaml");
    let apply = || {
        let s = Instant::now();
        let out = std::process::Command::new(jaque_tests::jaque_bin())
            .args(["apply", "-f", file.to_str().unwrap(), "--source", "bench", "--server"])
            .arg(format!("http://{}", j.addr))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        s.elapsed()
    };
    std::fs::write(&file, yaml("obj", 0)).unwrap();
    let first = apply();
    std::fs::write(&file, yaml("obj", CHANGED)).unwrap();
    let again = apply();
    // What any apply must read first: every object, as the API lists them (one page of 10,000).
    let s = Instant::now();
    let listed = j.get("/api/objects?limit=10000").json().as_array().map_or(0, Vec::len);
    let list = s.elapsed();
    assert_eq!(listed, N);
    // The floor: the same bodies, PUT one by one from 16 threads.
    let next = AtomicU64::new(0);
    let s = Instant::now();
    thread::scope(|scope| {
        for _ in 0..CONCURRENCY {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= N {
                    break;
                }
                let body = serde_json::json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h", "labels": {"rev": "1"}});
                assert_eq!(j.put(&format!("/api/objects/bare-{i:05}"), &body).status, 200);
            });
        }
    });
    let bare = s.elapsed();
    println!(
        "| P19 | jaque apply -f of {N} objects into an empty cluster (one YAML file, defaults, 16 writes at a time) | {:.2} s | {:.2} s: {N} bare PUTs, 16 at a time | {:.2}x | |",
        first.as_secs_f64(),
        bare.as_secs_f64(),
        first.as_secs_f64() / bare.as_secs_f64()
    );
    let floor = list.as_secs_f64() + bare.as_secs_f64() * CHANGED as f64 / N as f64;
    println!(
        "| P19 | the same apply again with {CHANGED} of them changed (reads the files and all {N} objects, writes {CHANGED}) | {:.2} s | {floor:.3} s: one GET of the {N} objects ({:.3} s) and {CHANGED} of those bare PUTs | {:.2}x | |",
        again.as_secs_f64(),
        list.as_secs_f64(),
        again.as_secs_f64() / floor
    );
}

/// P8 at a million objects: the resident memory of an engine (serving the API too), a `-target ui`, a sink
/// (SQLite) and a notifier, each with 1,000,000 objects, against each one's own before the objects; the first
/// page of `GET /api/objects` and a walk of every page of 10,000.
fn p8_million() {
    // A smaller count for a quick look while working on memory: `JAQUE_BENCH_P8M_OBJECTS=200000`.
    let n: usize = std::env::var("JAQUE_BENCH_P8M_OBJECTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let label = if n.is_multiple_of(1_000_000) { format!("{}M", n / 1_000_000) } else { n.to_string() };
    eprintln!("jaque-bench: P8 memory at {n} objects...");
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start(None);
    let hook = rx.url("/hook");
    let readers = |url: &str, db: &str| {
        let store = format!("sqlite://{}", dir.path().join(db).display());
        [
            Jaque::start("ui", &["-target", "ui", "-coordination", url, "-id", "ui"]),
            Jaque::start("sink", &["-target", "sink", "-coordination", url, "-sink-store", &store]),
            Jaque::start("notifier", &["-target", "notifier", "-coordination", url, "-notify-webhook", &hook]),
        ]
    };
    // Each reader's memory with no object: on a server of its own whose log an engine made and left.
    let idle: Vec<u64> = {
        let nats = Nats::start();
        let servers = Servers::one(&nats);
        let mut e = engine(&servers, "empty");
        e.wait_ready();
        e.proc.signal("TERM");
        e.proc.wait_exit();
        let r = readers(&servers.url, "empty.db");
        r.iter().for_each(Jaque::wait_ready);
        r.iter().map(|j| rss_kib(j.proc.pid())).collect()
    };
    let nats = Nats::start();
    let servers = Servers::one(&nats);
    let load = Instant::now();
    let engine_idle = load_log(&servers, n, |_| State::Pending);
    eprintln!("jaque-bench: P8 loaded {n} objects in {:.0} s", load.elapsed().as_secs_f64());
    let e = engine_as(&servers, "rss", "engine,ui");
    let [ui, sink, notifier] = readers(&servers.url, "sink.db");
    poll_long("the engine owns every loaded object", || {
        (e.metric("jaque_engine_objects_owned") == Some(n as f64)).then_some(())
    });
    let last = e.metric("jaque_engine_log_position").unwrap();
    poll_long("every reader read the whole log", || {
        let caught = ui.metric("jaque_ui_log_position")? >= last
            && sink.metric("jaque_sink_log_position")? >= last
            && sink.metric("jaque_sink_lag_events")? == 0.0
            && notifier.metric("jaque_notifier_log_position")? >= last;
        caught.then_some(())
    });
    // The sink's lag counts events; the objects' rows of its resume follow them: wait until it commits no more.
    let mut batches = (f64::NAN, 0);
    poll_long("the sink wrote every objects row", || {
        let now = sink.metric("jaque_sink_batches_written_total")?;
        batches = if now == batches.0 { (now, batches.1 + 1) } else { (now, 0) };
        (batches.1 >= 3).then_some(())
    });
    // The engine's peak is its snapshot's (the log's million entries make one due once it has read them).
    poll_long("the engine wrote a snapshot", || (e.metric("jaque_snapshots_written_total")? >= 1.0).then_some(()));
    eprintln!(
        "jaque-bench: P8 the engine wrote {} snapshot(s), the last of {:.1} MiB",
        e.metric("jaque_snapshots_written_total").unwrap_or(0.0),
        e.metric("jaque_snapshot_bytes").unwrap_or(0.0) / 1048576.0
    );
    for (who, j) in [("engine", &e), ("ui", &ui), ("sink", &sink), ("notifier", &notifier)] {
        eprintln!(
            "jaque-bench: P8 {who} peak resident memory (VmHWM) {:.1} MiB",
            status_kib(j.proc.pid(), "VmHWM:") as f64 / 1024.0
        );
    }
    let rows = [
        ("engine (engine,ui: its API reads the engine's own view)", rss_kib(e.proc.pid()), engine_idle),
        ("-target ui", rss_kib(ui.proc.pid()), idle[0]),
        ("sink (SQLite)", rss_kib(sink.proc.pid()), idle[1]),
        ("notifier", rss_kib(notifier.proc.pid()), idle[2]),
    ];
    for (who, kib, idle_kib) in rows {
        println!(
            "| P8 | {who} resident memory, {label} objects | {:.1} MiB | {:.1} MiB with no object | {:.0} bytes/object | |",
            kib as f64 / 1024.0,
            idle_kib as f64 / 1024.0,
            (kib.saturating_sub(idle_kib) * 1024) as f64 / n as f64
        );
    }
    let mut first: Vec<Duration> = (0..20)
        .map(|_| {
            let s = Instant::now();
            let r = e.get("/api/objects?limit=100");
            let t = s.elapsed();
            assert_eq!(r.status, 200);
            t
        })
        .collect();
    let mut severity: Vec<Duration> = (0..5)
        .map(|_| {
            let s = Instant::now();
            assert_eq!(e.get("/api/objects?limit=100&sort=severity").status, 200);
            s.elapsed()
        })
        .collect();
    let (pages, walk) = all_pages(&e, "/api/objects?limit=10000");
    assert_eq!(pages.iter().sum::<usize>(), n);
    println!(
        "| P8 | GET /api/objects at {label} objects: first page (limit=100) p50 / problems first (sort=severity) p50 / every page of 10,000 (100 pages) | {:.2} ms / {:.0} ms / {:.1} s | | | |",
        ms(pct(&mut first, 0.5)),
        ms(pct(&mut severity, 0.5)),
        walk.as_secs_f64()
    );
    // A reader that starts now starts from the engine's snapshot: its peak is the load's.
    let late = Jaque::start("late-ui", &["-target", "ui", "-coordination", &servers.url, "-id", "late-ui"]);
    let started = Instant::now();
    poll_long("a ui started from the snapshot read the whole log", || {
        (late.metric("jaque_snapshot_loads_total")? >= 1.0 && late.metric("jaque_ui_log_position")? >= last)
            .then_some(())
    });
    let (rss, hwm) = (rss_kib(late.proc.pid()), status_kib(late.proc.pid(), "VmHWM:"));
    println!(
        "| P8 | -target ui started from the engine's snapshot of {label} objects: ready in; resident memory; peak (VmHWM) | {:.1} s; {:.1} MiB; {:.1} MiB | | {:.0} / {:.0} bytes/object | |",
        started.elapsed().as_secs_f64(),
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        (rss.saturating_sub(idle[0]) * 1024) as f64 / n as f64,
        (hwm.saturating_sub(idle[0]) * 1024) as f64 / n as f64
    );
}

/// `poll` for what takes minutes at a million objects: asked every second, for up to ten minutes.
fn poll_long<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            eprintln!("jaque-bench: {what} after {:.0} s", start.elapsed().as_secs_f64());
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(600), "gave up waiting for {what} after 10 minutes");
        thread::sleep(Duration::from_secs(1));
    }
}
