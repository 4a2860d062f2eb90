//! jaque-bench: the numbers operators ask for, each beside the floor it is built on, measured in one run on
//! this machine against real processes and a real nats-server (scripts/bench.sh adds the core and simulator
//! figures and prints one table). Benchmarks, not tests: nothing here fails on a timing.
//!
//! P1 ui write -> applied latency beside raw NATS request/reply + JetStream publish;
//! P2 writes per second through ingress with three engines beside raw pipelined NATS requests;
//! P3 failover after kill -9 and after SIGTERM, as a multiple of the ttl;
//! P8 engine resident memory with 100k objects.

use futures_util::StreamExt;
use jaque_core::{
    wire, EpochRecord, Event, EventBody, LogEntry, MemberId, MemberRef, ObjectDef, ObjectId, Probe, Time,
};
use jaque_tests::checker::{object_body, CountingTarget};
use jaque_tests::{http, poll, Jaque, Nats};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
fn floors(url: &str, n: usize) -> (Vec<Duration>, Vec<Duration>, Vec<Duration>) {
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
        let stream = js.get_stream("BENCH").await.unwrap();
        let mut follow = stream
            .create_consumer(async_nats::jetstream::consumer::push::OrderedConfig {
                deliver_subject: client.new_inbox(),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .unwrap()
            .messages()
            .await
            .unwrap();
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

/// Raw pipelined NATS requests per second: `conc` request loops for `secs`.
fn raw_request_rate(url: &str, conc: usize, secs: u64) -> f64 {
    rt().block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        echo_responder(&client, "bench.rate").await;
        let done = Arc::new(AtomicU64::new(0));
        let until = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for _ in 0..conc {
            let (c, d) = (client.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    if c.request("bench.rate", "x".into()).await.is_ok() {
                        d.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        done.load(Ordering::Relaxed) as f64 / secs as f64
    })
}

fn engine(nats: &Nats, id: &str) -> Jaque {
    let ttl = format!("{TTL_SECS}s");
    Jaque::start(
        id,
        &["-target", "engine", "-queue", &nats.url, "-coordination", &nats.url, "-id", id, "-heartbeat-ttl", &ttl],
    )
}

fn epoch_members(ui: &Jaque) -> BTreeSet<String> {
    let v = ui.get("/api/cluster").json();
    v["buckets"][0]["epoch_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(String::from))
        .collect()
}

fn put(ui: &Jaque, object: &str, key: &str, target: &str) -> u16 {
    let body = object_body(target, object).to_string();
    http(ui.addr, "PUT", &format!("/api/objects/{object}"), &[("Idempotency-Key", key)], Some(body.as_bytes())).status
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
            if !epoch_members(ui).contains(gone) {
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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Loads `n` objects straight into the log (as written by a departed engine), then starts an engine that
/// takes them all over; its resident memory before any object and with all of them.
fn engine_memory(n: usize) -> (u64, u64) {
    let nats = Nats::start();
    // The first engine creates the log stream and the membership bucket, then leaves.
    let mut warmup = engine(&nats, "warmup");
    warmup.wait_ready();
    let idle_rss = rss_kib(warmup.proc.pid());
    warmup.proc.signal("TERM");
    warmup.proc.wait_exit();
    rt().block_on(async {
        let client = async_nats::connect(&nats.url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let loader = MemberRef { id: MemberId::new("loader").unwrap(), incarnation: 1 };
        let record = EpochRecord { epoch: 2, members: vec![loader.clone()], members_rev: 0 };
        js.publish("jaque.log.epoch", wire::encode(&LogEntry::Epoch(record)).into()).await.unwrap().await.unwrap();
        // Defined an hour ago on a daily interval: nothing is due when the new engine takes over.
        let at = Time(unix_ms() - 3_600_000);
        let def =
            ObjectDef { probe: Probe::Tcp { addr: "127.0.0.1:9".into() }, interval_ms: 86_400_000, timeout_ms: 1000 };
        let mut acks = Vec::new();
        for i in 0..n {
            let ev = Event {
                object: ObjectId::new(format!("object-{i:06}")).unwrap(),
                epoch: 2,
                writer: loader.clone(),
                at,
                command_id: None,
                body: EventBody::Put { def: def.clone() },
            };
            acks.push(js.publish("jaque.log.event", wire::encode(&LogEntry::Event(ev)).into()).await.unwrap());
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
    let e = engine(&nats, "rss");
    poll("the engine owns every loaded object", || {
        (e.metric("jaque_engine_objects_owned") == Some(n as f64)).then_some(())
    });
    (idle_rss, rss_kib(e.proc.pid()))
}

fn main() {
    let nats = Nats::start();
    eprintln!("jaque-bench: raw NATS floors...");
    let (mut rr, mut js, mut rb) = floors(&nats.url, 2000);
    let (rr50, rr99, js50, js99) = (pct(&mut rr, 0.5), pct(&mut rr, 0.99), pct(&mut js, 0.5), pct(&mut js, 0.99));
    let (rb50, rb99) = (pct(&mut rb, 0.5), pct(&mut rb, 0.99));

    eprintln!("jaque-bench: three engines, a worker and a ui...");
    let target = CountingTarget::start();
    let mut engines: Vec<Jaque> = ["e1", "e2", "e3"].iter().map(|id| engine(&nats, id)).collect();
    let worker = Jaque::start("worker", &["-target", "worker", "-queue", &nats.url]);
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
    for j in engines.iter().chain([&worker, &ui]) {
        j.wait_ready();
    }
    let all: BTreeSet<String> = ["e1", "e2", "e3"].map(String::from).into();
    poll("an epoch of three engines", || (epoch_members(&ui) == all).then_some(()));

    // The HTTP part of a write: a request to the ui that does nothing (the client opens a connection each time).
    let mut hz: Vec<Duration> = (0..600)
        .map(|_| {
            let s = Instant::now();
            ui.get("/healthz");
            s.elapsed()
        })
        .collect();
    let (http50, http99) = (pct(&mut hz, 0.5), pct(&mut hz, 0.99));

    // P1: sequential writes through the ui, each a new object.
    eprintln!("jaque-bench: P1 write latency...");
    let mut lat = Vec::new();
    for i in 0..600 {
        let s = Instant::now();
        let status = put(&ui, &format!("p1-{i}"), &format!("p1-{i}"), &target.url());
        if i >= 100 && status == 200 {
            lat.push(s.elapsed());
        }
    }
    let (w50, w99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));

    // P2: concurrent writers through the ui's ingress.
    eprintln!("jaque-bench: P2 write throughput...");
    const CONC: usize = 16;
    const SECS: u64 = 5;
    let applied = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..CONC)
        .map(|t| {
            let (applied, stop, addr, url) = (applied.clone(), stop.clone(), ui.addr, target.url());
            thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let object = format!("p2-{t}-{}", i % 50);
                    let body = object_body(&url, &object).to_string();
                    let key = format!("p2-{t}-{i}");
                    let r = http(
                        addr,
                        "PUT",
                        &format!("/api/objects/{object}"),
                        &[("Idempotency-Key", &key)],
                        Some(body.as_bytes()),
                    );
                    if r.status == 200 {
                        applied.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(SECS));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let writes_per_s = applied.load(Ordering::Relaxed) as f64 / SECS as f64;
    let raw_per_s = raw_request_rate(&nats.url, CONC, SECS);

    // P3: failover.
    eprintln!("jaque-bench: P3 failover after kill -9 and SIGTERM...");
    let e3 = engines.pop().unwrap();
    let (kill_epoch, kill_write) = failover(&ui, "e3", &target.url(), || e3.proc.signal("KILL"));
    drop(e3);
    let e4 = engine(&nats, "e4");
    e4.wait_ready();
    let three: BTreeSet<String> = ["e1", "e2", "e4"].map(String::from).into();
    poll("e4 in the epoch", || (epoch_members(&ui) == three).then_some(()));
    poll("e4 owns its share", || (!owned_by(&ui, "e4").is_empty()).then_some(()));
    let (term_epoch, term_write) = failover(&ui, "e4", &target.url(), || e4.proc.signal("TERM"));
    drop((engines, worker, ui));

    eprintln!("jaque-bench: P8 engine memory with 100k objects...");
    let (idle_kib, loaded_kib) = engine_memory(100_000);

    let ttl = TTL_SECS as f64;
    println!("| P | measure | jaque | floor (same run) | ratio | target |");
    println!("|---|---|---|---|---|---|");
    let floor50 = rr50 + js50;
    let floor99 = rr99 + js99;
    println!(
        "| P1 | ui write -> applied, p50 | {:.2} ms | {:.2} ms (request/reply {:.2} + JetStream publish {:.2}) | {:.2}x | <= 1.2x |",
        ms(w50), ms(floor50), ms(rr50), ms(js50), ms(w50) / ms(floor50)
    );
    println!(
        "| P1 | ui write -> applied, p99 | {:.2} ms | {:.2} ms (request/reply {:.2} + JetStream publish {:.2}) | {:.2}x | |",
        ms(w99), ms(floor99), ms(rr99), ms(js99), ms(w99) / ms(floor99)
    );
    println!(
        "| P1 | same, less the HTTP request itself (GET /healthz on the ui: p50 {:.2} ms) | {:.2} ms | {:.2} ms | {:.2}x | |",
        ms(http50), ms(w50.saturating_sub(http50)), ms(floor50), ms(w50.saturating_sub(http50)) / ms(floor50)
    );
    println!(
        "| P1 | floor of what a write does: ingress request/reply + publish until an ordered consumer delivers it (the engine's read-back) | {:.2} ms | p99 {:.2} ms | | |",
        ms(rr50 + rb50), ms(rr99 + rb99)
    );
    let _ = http99;
    println!(
        "| P2 | writes/s through ingress, 3 engines, {CONC} concurrent | {writes_per_s:.0}/s | {raw_per_s:.0}/s raw pipelined requests ({CONC} in flight) | {:.2}x | >= 0.5x |",
        writes_per_s / raw_per_s
    );
    println!(
        "| P3 | failover after kill -9 (ttl {TTL_SECS}s): new epoch / write applied again | {:.2} s / {:.2} s | ttl {ttl:.0} s | {:.2}x / {:.2}x ttl | <= 1.33x ttl + expiry lag |",
        kill_epoch.as_secs_f64(), kill_write.as_secs_f64(), kill_epoch.as_secs_f64() / ttl, kill_write.as_secs_f64() / ttl
    );
    println!(
        "| P3 | failover after SIGTERM: new epoch / write applied again | {:.3} s / {:.3} s | ttl {ttl:.0} s | {:.3}x / {:.3}x ttl | <= 0.2 s |",
        term_epoch.as_secs_f64(), term_write.as_secs_f64(), term_epoch.as_secs_f64() / ttl, term_write.as_secs_f64() / ttl
    );
    println!(
        "| P8 | engine resident memory, 100k objects | {:.1} MiB | {:.1} MiB with no object | {:.0} bytes/object | |",
        loaded_kib as f64 / 1024.0,
        idle_kib as f64 / 1024.0,
        (loaded_kib.saturating_sub(idle_kib) * 1024) as f64 / 100_000.0
    );
}
