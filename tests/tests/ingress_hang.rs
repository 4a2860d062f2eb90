//! Writes through ingress while an engine hangs (issue 31), against the shipped binary: three engines with
//! `-heartbeat-ttl 2s`, a worker and a ui that writes through `jaque.work.cmd.ingress` (the page's path). One
//! engine is stopped with SIGSTOP (a hung process, a stalled VM); once the other two have agreed an epoch
//! without it, 100 writes go through the ui: every one is applied, within the ui's bound, and the p99 is
//! printed. The NATS servers keep their default ping settings, under which a stopped client stays connected for
//! minutes: the hung engine stays in the `jaque-engines` queue group and is handed its share of the writes the
//! whole time, so what keeps the writes flowing is the ui sending an attempt no engine claimed again. Then the
//! engine is continued: it rejoins, and the checker finds every write applied once and every reader agreeing.
//!
//! Three variants: a random engine hangs; the engine that owns most objects hangs; and on a 3-node NATS
//! cluster, the ui's server is another node than the hung engine's (its server has no engine of its own, so
//! every write crosses a route, and the route to the hung engine's node hands it to the hung engine).

use jaque_core::ui::SubmitTimeouts;
use jaque_tests::checker::{check_run, object_body, CountingTarget, WriteRecord};
use jaque_tests::nats_cluster::NatsCluster;
use jaque_tests::{http, poll, Jaque, Nats};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const OBJECTS: usize = 30;
const WRITES: usize = 100;

/// Where each process connects: one server for all, or a node of a cluster per process.
struct Servers {
    engines: [String; 3],
    worker: String,
    ui: String,
    /// Where the checker reads the log.
    log: String,
    extra: Vec<&'static str>,
}

struct Cluster {
    engines: BTreeMap<&'static str, Jaque>,
    _worker: Jaque,
    ui: Jaque,
    _target: CountingTarget,
    objects: Vec<String>,
    log_url: String,
}

const IDS: [&str; 3] = ["e1", "e2", "e3"];

impl Cluster {
    fn start(s: &Servers) -> Cluster {
        let mut engines = BTreeMap::new();
        for (id, url) in IDS.iter().zip(&s.engines) {
            let mut args = vec!["-target", "engine", "-queue", url, "-coordination", url, "-id", id];
            args.extend(["-heartbeat-ttl", "2s"]);
            args.extend(&s.extra);
            engines.insert(*id, Jaque::start(id, &args));
        }
        let worker = Jaque::start("worker", &["-target", "worker", "-queue", &s.worker]);
        let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &s.ui, "-heartbeat-ttl", "2s"]);
        for j in engines.values().chain([&worker, &ui]) {
            j.wait_ready();
        }
        let target = CountingTarget::start();
        let c = Cluster { engines, _worker: worker, ui, _target: target, objects: Vec::new(), log_url: s.log.clone() };
        c.ui.wait_epoch(&IDS);
        let objects: Vec<String> = (0..OBJECTS).map(|i| format!("obj-{i}")).collect();
        for o in &objects {
            let body = object_body(&c._target.url(), o).to_string();
            let key = format!("setup-{o}");
            poll(&format!("{o} created"), || {
                let path = format!("/api/objects/{o}");
                let r = http(c.ui.addr, "PUT", &path, &[("Idempotency-Key", &key)], Some(body.as_bytes()));
                (r.status == 200).then_some(())
            });
        }
        let c = Cluster { objects, ..c };
        poll("every engine owns its objects", || {
            let owned: f64 = c.engines.values().filter_map(|e| e.metric("jaque_engine_objects_owned")).sum();
            (owned == OBJECTS as f64).then_some(())
        });
        c
    }

    /// The engine that owns most objects now.
    fn busiest(&self) -> &'static str {
        let owned = |id: &&'static str| self.engines[id].metric("jaque_engine_objects_owned").unwrap_or(0.0) as u64;
        IDS.iter().copied().max_by_key(owned).expect("three engines")
    }

    fn resubmits(&self) -> f64 {
        self.ui.metric("jaque_ui_write_resubmits_total{reason=\"no_claim\"}").unwrap_or(0.0)
    }

    /// Stops `hung` (SIGSTOP), waits for the epoch without it, makes `WRITES` writes through the ui (a check of
    /// an object, each with its own key) and returns them with how long each took; then continues the engine
    /// and runs the checker.
    fn writes_while_hung(self, hung: &'static str, label: &str) {
        self.engines[hung].proc.signal("STOP");
        let others: Vec<&str> = IDS.iter().copied().filter(|id| *id != hung).collect();
        self.ui.wait_epoch(&others);
        let resubmits_before = self.resubmits();
        let mut records = Vec::new();
        let mut took = Vec::new();
        for i in 0..WRITES {
            let object = self.objects[i % OBJECTS].clone();
            let key = format!("{label}-{i}");
            let path = format!("/api/objects/{object}/actions/check");
            let start = Instant::now();
            let r = http(self.ui.addr, "POST", &path, &[("Idempotency-Key", &key)], None);
            took.push(start.elapsed());
            let outcome: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            let rec = WriteRecord { key, object, op: "check", status: r.status, outcome, attempts: 1 };
            assert_eq!(rec.status, 200, "write {i} with {hung} hung: {rec:?}");
            records.push(rec);
        }
        let resent = self.resubmits() - resubmits_before;
        took.sort();
        let bound = SubmitTimeouts::SHIPPED.bound();
        eprintln!(
            "{label}: {WRITES} writes through ingress with {hung} stopped: all applied; p50 {:?}, p99 {:?}, max {:?} \
             (the ui's bound {bound:?}); {resent} attempts sent again for want of a claim",
            took[WRITES / 2],
            took[WRITES * 99 / 100],
            took[WRITES - 1],
        );
        // A 200 comes only before the ui's own deadline: this is the bound, not a timing claim.
        assert!(took[WRITES - 1] < bound + Duration::from_secs(2), "a write past the bound: {:?}", took[WRITES - 1]);
        // The hung engine stayed in the queue group and was handed attempts: the ui sent them again.
        assert!(resent >= 1.0, "no attempt reached the hung engine in {WRITES} writes");

        // Continued, it rejoins the queue group once a heartbeat of its own is acknowledged.
        self.engines[hung].proc.signal("CONT");
        self.ui.wait_epoch(&IDS);
        poll(&format!("{hung} back in the ingress queue group"), || {
            (self.engines[hung].metric("jaque_engine_ingress_member") == Some(1.0)).then_some(())
        });
        check_run(&self.log_url, &records, &[&self.ui]);
    }
}

fn one_server(nats: &Nats) -> Servers {
    let url = nats.url.clone();
    Servers {
        engines: [url.clone(), url.clone(), url.clone()],
        worker: url.clone(),
        ui: url.clone(),
        log: url,
        extra: Vec::new(),
    }
}

#[test]
fn every_write_through_ingress_is_applied_while_an_engine_hangs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = Nats::start();
    let c = Cluster::start(&one_server(&nats));
    c.writes_while_hung("e2", "random");
}

#[test]
fn every_write_through_ingress_is_applied_while_the_engine_owning_most_objects_hangs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = Nats::start();
    let c = Cluster::start(&one_server(&nats));
    let busiest = c.busiest();
    c.writes_while_hung(busiest, "busiest");
}

#[test]
fn every_write_is_applied_while_an_engine_on_another_node_than_the_uis_hangs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let nats = NatsCluster::start(3);
    // The ui and the worker on node 1, which has no engine; e1 alone on node 2; e2 and e3 on node 3.
    let s = Servers {
        engines: [nats.url(1).to_string(), nats.url(2).to_string(), nats.url(2).to_string()],
        worker: nats.url(0).to_string(),
        ui: nats.url(0).to_string(),
        log: nats.url(0).to_string(),
        extra: vec!["-log-replicas", "3"],
    };
    let c = Cluster::start(&s);
    c.writes_while_hung("e1", "cluster");
}
