//! jaque on a 3-node nats-server cluster with `-log-replicas 3`: three engines on two of the nodes, a worker
//! and two ui processes, writes flowing through both uis the whole time, and one fault per test — kill -9 of the
//! node leading the log stream (restarted later), kill -9 of the node no engine is connected to, SIGSTOP of a
//! node past the heartbeat ttl (its engine moves to another node meanwhile) then SIGCONT. At the end the checker
//! of `jaque_tests::checker` (every write got an outcome; none applied twice; none acknowledged and lost; every reader agrees), and no jaque process exited.

use jaque_tests::checker::{check_run, object_body, CountingTarget, Writer};
use jaque_tests::nats_cluster::NatsCluster;
use jaque_tests::{http, poll, Jaque};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Instant;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const OBJECTS: usize = 18;
const LOG: &str = "JAQUE_LOG";
/// The node no engine is connected to (the worker and the second ui are).
const SPARE: usize = 2;

struct Setup {
    nats: NatsCluster,
    /// id -> (process, node index it was started against).
    engines: BTreeMap<&'static str, (Jaque, usize)>,
    worker: Jaque,
    uis: Vec<Jaque>,
    target: CountingTarget,
    objects: Vec<String>,
}

impl Setup {
    fn start(ttl: &str) -> Setup {
        let nats = NatsCluster::start(3);
        let mut engines = BTreeMap::new();
        for (id, node) in [("e1", 0), ("e2", 1), ("e3", 0)] {
            let url = nats.url(node).to_string();
            let args = [
                "-target",
                "engine,ui",
                "-queue",
                &url,
                "-coordination",
                &url,
                "-log-replicas",
                "3",
                "-id",
                id,
                "-heartbeat-ttl",
                ttl,
            ];
            engines.insert(id, (Jaque::start(id, &args), node));
        }
        let spare = nats.url(SPARE).to_string();
        let worker = Jaque::start("worker", &["-target", "worker", "-queue", &spare]);
        // The first ui knows two servers (a comma-separated list: it picks one), the second only the spare node.
        // Neither is on e2's node, which one test stops: the checker reads every ui, and a ui whose node is
        // stopped would see nothing until its pings time out.
        let two = format!("{},{}", nats.url(0), nats.url(SPARE));
        let uis = vec![
            Jaque::start("ui1", &["-target", "ui", "-coordination", &two, "-heartbeat-ttl", ttl]),
            Jaque::start("ui2", &["-target", "ui", "-coordination", &spare, "-heartbeat-ttl", ttl]),
        ];
        for j in engines.values().map(|(j, _)| j).chain([&worker]).chain(&uis) {
            j.wait_ready();
        }
        assert_eq!(nats.stream_replicas(LOG), 3, "-log-replicas 3 made the log stream");
        assert_eq!(nats.stream_replicas("KV_jaque_membership"), 3, "and the membership bucket");
        let target = CountingTarget::start();
        let mut s = Setup { nats, engines, worker, uis, target, objects: Vec::new() };
        s.wait_epoch(&["e1", "e2", "e3"]);
        s.objects = (0..OBJECTS).map(|i| format!("obj-{i}")).collect();
        for o in &s.objects {
            let body = object_body(&s.target.url(), o).to_string();
            let key = format!("setup-{o}");
            poll(&format!("{o} created"), || {
                let path = format!("/api/objects/{o}");
                let r = http(s.uis[0].addr, "PUT", &path, &[("Idempotency-Key", &key)], Some(body.as_bytes()));
                (r.status == 200).then_some(())
            });
        }
        poll("every object ok", || {
            let list = s.uis[0].get("/api/objects").json();
            let all = list.as_array()?;
            (all.len() == OBJECTS && all.iter().all(|o| o["state"] == "ok")).then_some(())
        });
        s
    }

    fn epoch_members(&self) -> BTreeSet<String> {
        self.uis[0].epoch_members()
    }

    fn wait_epoch(&self, ids: &[&str]) {
        self.uis[0].wait_epoch(ids);
    }

    /// Object -> owner, as the first ui reads the log.
    fn owners(&self) -> BTreeMap<String, String> {
        let list = self.uis[0].get("/api/objects").json();
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| Some((o["id"].as_str()?.to_string(), o["owner"].as_str()?.to_string())))
            .collect()
    }

    fn writers(&self) -> Vec<Writer> {
        let ws: Vec<Writer> = self
            .uis
            .iter()
            .enumerate()
            .map(|(i, ui)| Writer::start(ui.addr, &format!("w{i}"), self.objects.clone(), self.target.url()))
            .collect();
        poll("writes applied through both uis", || ws.iter().all(|w| w.applied() >= 5).then_some(()));
        ws
    }

    /// Waits until both writers have had `n` more writes applied than now; returns how long that took.
    fn wait_applied_more(&self, ws: &[Writer], n: usize, what: &str) -> std::time::Duration {
        let start = Instant::now();
        let before: Vec<usize> = ws.iter().map(Writer::applied).collect();
        poll(what, || ws.iter().zip(&before).all(|(w, b)| w.applied() >= b + n).then_some(()));
        start.elapsed()
    }

    /// Ends the writes, waits until every object is owned by a live engine, checks the run and that no jaque
    /// process exited.
    fn finish(mut self, ws: Vec<Writer>) {
        let writes: Vec<_> = ws.into_iter().flat_map(Writer::finish).collect();
        self.wait_epoch(&["e1", "e2", "e3"]);
        let readers: Vec<&Jaque> = self.uis.iter().chain(self.engines.values().map(|(j, _)| j)).collect();
        check_run(self.nats.live_url(), &writes, &readers);
        let owners = self.owners();
        assert_eq!(owners.len(), OBJECTS, "every object owned");
        for (id, (j, _)) in self.engines.iter_mut() {
            assert!(j.proc.is_running(), "{id} is still running");
        }
        for j in self.uis.iter_mut().chain([&mut self.worker]) {
            assert!(j.proc.is_running(), "{} is still running", j.proc.name);
        }
    }
}

#[test]
fn losing_the_log_streams_leader_is_survived_and_writes_resume() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Setup::start("10s");
    let ws = s.writers();
    let leader = s.nats.stream_leader(LOG);
    let i = s.nats.index_of(&leader);
    s.nats.kill(i);
    let took = s.wait_applied_more(&ws, 5, "writes applied again after the log leader's loss");
    let new_leader = s.nats.stream_leader(LOG);
    assert_ne!(new_leader, leader, "another node leads the log");
    eprintln!(
        "nats_cluster: log leader {leader} killed; writes applied again after {:.1} s (new leader {new_leader})",
        took.as_secs_f64()
    );
    s.nats.restart(i);
    s.wait_applied_more(&ws, 5, "writes applied after the old leader is back");
    s.finish(ws);
}

#[test]
fn losing_the_node_no_engine_is_on_is_survived() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = Setup::start("10s");
    let ws = s.writers();
    let owners = s.owners();
    let epoch_before = s.epoch_members();
    s.nats.kill(SPARE);
    // The worker and the second ui reconnect to the other nodes by themselves (the servers they learnt of).
    s.wait_applied_more(&ws, 5, "writes applied through both uis after the spare node's loss");
    if s.epoch_members() == epoch_before {
        assert_eq!(s.owners(), owners, "no heartbeat lapsed, so every object kept its owner");
    }
    s.nats.restart(SPARE);
    s.finish(ws);
}

#[test]
fn a_node_stopped_past_the_ttl_and_continued_is_survived() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let s = Setup::start("3s");
    let ws = s.writers();
    // The node e2 is connected to. The TCP connection to a stopped server stays open, so e2 learns of it only
    // from its pings, sent every quarter of the ttl: it gives the node up within three quarters of the ttl and
    // reconnects to one of the others it learnt of, where it is a member again (if its key lapsed at all)
    // and follows the log again, while the node is still stopped.
    let node = s.engines["e2"].1;
    let e2 = &s.engines["e2"].0;
    s.nats.signal(node, "STOP");
    poll("e2 reconnected to another node", || e2.proc.output.text().contains("reconnected to NATS").then_some(()));
    e2.wait_ready();
    s.wait_epoch(&["e1", "e2", "e3"]);
    s.wait_applied_more(&ws, 5, "writes applied while the node is stopped");
    s.nats.signal(node, "CONT");
    // The node catches up with the streams it holds a replica of before the checker reads the log.
    s.nats.wait_stream_current(LOG);
    s.nats.wait_stream_current("KV_jaque_membership");
    s.wait_epoch(&["e1", "e2", "e3"]);
    s.wait_applied_more(&ws, 5, "writes applied after the node continued");
    s.finish(ws);
}
