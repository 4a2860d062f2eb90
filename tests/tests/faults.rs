//! Fault tests against the shipped binary: three engine processes, a worker and a ui on a real nats-server,
//! writes flowing through the ui the whole time, and the checker of `jaque_tests::checker` at the end of each
//! (every write got an outcome; none applied twice; none acknowledged and lost; every reader agrees).
//!
//! The faults: kill -9 an engine; SIGSTOP one past its ttl and SIGCONT it; restart nats-server; cut and heal a
//! loopback proxy between one engine and NATS; SIGTERM an engine. They run one at a time (a lock), so the
//! machine's two cores are not shared by five clusters at once.

use jaque_core::LogEntry;
use jaque_tests::checker::{check_log, check_run, object_body, CountingTarget, Writer};
use jaque_tests::proxy::Proxy;
use jaque_tests::{http, poll, Jaque, Nats};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const ENGINES: [&str; 3] = ["e1", "e2", "e3"];
const OBJECTS: usize = 24;

struct Cluster {
    nats: Nats,
    engines: BTreeMap<&'static str, Jaque>,
    _worker: Jaque,
    ui: Jaque,
    target: CountingTarget,
    objects: Vec<String>,
    proxy: Option<Proxy>,
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

impl Cluster {
    /// Three engines (the last one behind a proxy when `proxied`), a worker, a ui, and `OBJECTS` http-checked
    /// objects, all owned and ok.
    fn start(ttl: &str, proxied: bool) -> Cluster {
        let nats = Nats::start();
        let proxy = proxied.then(|| Proxy::start(nats.url.trim_start_matches("nats://").parse().unwrap()));
        let mut engines = BTreeMap::new();
        for id in ENGINES {
            let url = match &proxy {
                Some(p) if id == "e3" => p.url(),
                _ => nats.url.clone(),
            };
            // Each engine process also serves the read API, so the checker can ask it what it holds.
            let args =
                ["-target", "engine,ui", "-queue", &url, "-coordination", &url, "-id", id, "-heartbeat-ttl", ttl];
            engines.insert(id, Jaque::start(id, &args));
        }
        let worker = Jaque::start("worker", &["-target", "worker", "-queue", &nats.url]);
        let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &nats.url]);
        for j in engines.values().chain([&worker, &ui]) {
            j.wait_ready();
        }
        let target = CountingTarget::start();
        let c = Cluster { nats, engines, _worker: worker, ui, target, objects: Vec::new(), proxy };
        c.wait_members(&ENGINES);
        let objects: Vec<String> = (0..OBJECTS).map(|i| format!("obj-{i}")).collect();
        for o in &objects {
            let body = object_body(&c.target.url(), o).to_string();
            let key = format!("setup-{o}");
            poll(&format!("{o} created"), || {
                let r = http(
                    c.ui.addr,
                    "PUT",
                    &format!("/api/objects/{o}"),
                    &[("Idempotency-Key", &key)],
                    Some(body.as_bytes()),
                );
                (r.status == 200).then_some(())
            });
        }
        let c = Cluster { objects, ..c };
        c.wait_states("ok");
        c
    }

    fn cluster_view(&self) -> Value {
        self.ui.get("/api/cluster").json()["buckets"][0].clone()
    }

    fn epoch(&self) -> u64 {
        self.cluster_view()["epoch"].as_u64().unwrap_or(0)
    }

    fn epoch_members(&self) -> BTreeSet<String> {
        self.cluster_view()["epoch_members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(String::from))
            .collect()
    }

    fn wait_members(&self, ids: &[&str]) {
        let want = set(ids);
        poll(&format!("an epoch of exactly {want:?}"), || (self.epoch_members() == want).then_some(()));
    }

    /// Object -> owner, as the ui reads the log.
    fn owners(&self) -> BTreeMap<String, String> {
        let list = self.ui.get("/api/objects").json();
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| Some((o["id"].as_str()?.to_string(), o["owner"].as_str()?.to_string())))
            .collect()
    }

    /// Waits until every object in `objects` has an owner for which `ok` holds, as the ui reads the log.
    fn wait_owners(&self, what: &str, objects: &[String], ok: impl Fn(&str) -> bool) {
        poll(what, || {
            let owners = self.owners();
            objects.iter().all(|o| owners.get(o).is_some_and(|x| ok(x))).then_some(())
        });
    }

    fn owned_by(&self, id: &str) -> Vec<String> {
        self.owners().into_iter().filter(|(_, o)| o == id).map(|(k, _)| k).collect()
    }

    fn wait_states(&self, state: &str) {
        poll(&format!("every object {state}"), || {
            let list = self.ui.get("/api/objects").json();
            let all = list.as_array()?;
            (all.len() == self.objects.len() && all.iter().all(|o| o["state"] == state)).then_some(())
        });
    }

    /// Waits until every object in `objects` has been checked (a request reached the target) after now.
    fn wait_checked_again(&self, what: &str, objects: &[String]) {
        let before = self.target.all_hits();
        poll(what, || objects.iter().all(|o| self.target.hits(o) > before.get(o).copied().unwrap_or(0)).then_some(()));
    }

    fn writer(&self, name: &str) -> Writer {
        let w = Writer::start(self.ui.addr, name, self.objects.clone(), self.target.url());
        poll("writes applied through the ui", || (w.applied() >= 10).then_some(()));
        w
    }

    fn readers(&self) -> Vec<&Jaque> {
        std::iter::once(&self.ui).chain(self.engines.values()).collect()
    }

    fn metric_sum(&self, sample: &str) -> f64 {
        self.engines.values().filter_map(|e| e.metric(sample)).sum()
    }
}

/// The writer keeps pausing and resuming objects; a paused object is not checked. Resumes every object so a
/// "checked again" wait is about ownership only.
fn resume_all(c: &Cluster) {
    for o in &c.objects {
        poll(&format!("{o} resumed"), || {
            let r = http(c.ui.addr, "POST", &format!("/api/objects/{o}/actions/resume"), &[], None);
            (r.status == 200).then_some(())
        });
    }
}

#[test]
fn kill_9_of_one_engine_moves_its_objects_and_they_are_checked_again() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::start("3s", false);
    let w = c.writer("k9");
    let victims = c.owned_by("e3");
    assert!(!victims.is_empty(), "e3 owns a share");

    let mut e3 = c.engines.remove("e3").unwrap();
    e3.proc.signal("KILL");
    e3.proc.wait_exit();
    // Until the epoch moves, the ui's view names e3 as the owner; e3 has no responder, so the ui submits
    // through ingress instead (where the claiming engine's forward to e3 fails: 503, retry).
    let via_ingress = || c.ui.metric("jaque_ui_writes_total{via=\"ingress\"}").unwrap_or(0.0);
    let before = via_ingress();
    let r = c.ui.request("POST", &format!("/api/objects/{}/actions/ack", victims[0]), &[], None);
    if c.epoch_members().contains("e3") {
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(via_ingress() > before, "the write went through ingress");
    }
    c.wait_members(&["e1", "e2"]);
    c.wait_owners("e3's objects owned by e1 and e2", &victims, |x| x == "e1" || x == "e2");
    let applied = w.applied();
    poll("writes applied after the kill", || (w.applied() > applied + 10).then_some(()));
    let writes = w.finish();
    resume_all(&c);
    c.wait_checked_again("e3's objects checked again by their new owners", &victims);
    check_run(&c.nats.url, &writes, &c.readers());
}

#[test]
fn an_engine_stopped_past_its_ttl_is_fenced_and_gets_its_share_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start("3s", false);
    let w = c.writer("stop");
    let share = c.owned_by("e3");
    assert!(!share.is_empty());
    let e3 = &c.engines["e3"];

    // Checks stay in flight for a while, so e3 is stopped with results on their way back to it; the service
    // fails meanwhile, so those results are transitions e3 will want to write.
    c.target.set_delay(400);
    let mut late_total = 0;
    for cycle in 0..5 {
        c.target.set_failing(cycle % 2 == 0);
        e3.proc.signal("STOP");
        c.wait_members(&["e1", "e2"]);
        let fenced_epoch = c.epoch();
        c.wait_owners("e3's objects taken over while it is stopped", &share, |x| x != "e3");
        e3.proc.signal("CONT");
        // It notices its key expired, joins again, and its share returns to it (HRW is a pure function).
        c.wait_members(&ENGINES);
        c.wait_owners("e3's share back with e3", &share, |x| x == "e3");
        // What e3 wrote after it was fenced out, under an epoch before the one that excluded it.
        let log = check_log(&c.nats.url);
        let record_seq = log
            .entries
            .iter()
            .find_map(|(seq, e)| matches!(e, LogEntry::Epoch(r) if r.epoch == fenced_epoch).then_some(*seq))
            .expect("the epoch that excluded e3 is in the log");
        let late: Vec<u64> = log
            .entries
            .iter()
            .filter(|(seq, e)| {
                *seq > record_seq
                    && matches!(e, LogEntry::Event(ev) if ev.writer.id.as_str() == "e3" && ev.epoch < fenced_epoch)
            })
            .map(|(seq, _)| *seq)
            .collect();
        // check_log asserted that every accepted event's writer owned its object: e3's late events were not
        // accepted, so each one is counted stale.
        assert!(log.stale_by_writer.get("e3").copied().unwrap_or(0) >= late.len() as u64);
        late_total += late.len();
        if late_total > 0 {
            break;
        }
    }
    assert!(late_total > 0, "in five stop/continue cycles e3 never wrote after being fenced out");
    c.target.set_delay(0);
    c.target.set_failing(false);
    let writes = w.finish();
    let log = check_run(&c.nats.url, &writes, &c.readers());
    // Every engine counted the same fenced events as the checker's own reading of the log.
    let stale = log.reader.counters.stale_epoch_total as f64;
    assert!(stale >= 1.0);
    for (id, e) in &c.engines {
        assert_eq!(e.metric("jaque_engine_stale_epoch_total"), Some(stale), "{id} counts every fenced event");
    }
}

#[test]
fn a_nats_server_restart_is_survived_by_every_process() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::start("3s", false);
    let w = c.writer("restart");
    c.nats.restart();
    let applied = w.applied();
    poll("writes applied again after the restart", || (w.applied() > applied + 10).then_some(()));
    let writes = w.finish();
    resume_all(&c);
    c.wait_checked_again("every object checked after the restart", &c.objects);
    c.wait_members(&ENGINES);
    check_run(&c.nats.url, &writes, &c.readers());
}

#[test]
fn a_cut_link_between_one_engine_and_nats_is_survived_and_healed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start("3s", true);
    let w = c.writer("cut");
    let share = c.owned_by("e3");
    let proxy = c.proxy.as_ref().unwrap();
    proxy.cut();
    c.wait_members(&["e1", "e2"]);
    c.wait_owners("e3's objects owned by e1 and e2 while it is cut off", &share, |x| x != "e3");
    let accepted = proxy.accepted();
    proxy.heal();
    poll("e3 reconnected through the proxy", || (proxy.accepted() > accepted).then_some(()));
    c.wait_members(&ENGINES);
    c.wait_owners("e3's share back with e3", &share, |x| x == "e3");
    let writes = w.finish();
    check_run(&c.nats.url, &writes, &c.readers());
}

#[test]
fn sigterm_hands_an_engines_objects_over_well_before_the_ttl() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A ttl of two minutes: a key refreshed every 40 s cannot expire sooner than 80 s after a SIGTERM. If the
    // objects move before that, they moved because the engine left, not because its key expired.
    let earliest_expiry = std::time::Duration::from_secs(80);
    let mut c = Cluster::start("120s", false);
    let w = c.writer("term");
    // Twice, so a race in the leave path has two chances to show.
    for (gone, stay) in [("e3", &["e1", "e2"][..]), ("e2", &["e1"][..])] {
        let share = c.owned_by(gone);
        let mut e = c.engines.remove(gone).unwrap();
        let signalled = std::time::Instant::now();
        e.proc.signal("TERM");
        assert!(e.proc.wait_exit().success(), "a clean exit on SIGTERM");
        c.wait_members(stay);
        c.wait_owners(&format!("{gone}'s objects moved to {stay:?}"), &share, |x| stay.contains(&x));
        assert!(
            signalled.elapsed() < earliest_expiry,
            "{gone}'s objects moved only after its key could have expired: the leave did not delete it"
        );
    }
    assert!(c.metric_sum("jaque_engine_objects_owned") >= OBJECTS as f64 - 0.5);
    let writes = w.finish();
    check_run(&c.nats.url, &writes, &c.readers());
}
