//! The notifier (issue 10) against the shipped binary: every accepted transition to every `-notify-webhook`,
//! signed (Standard Webhooks), at least once, a repeat only from a notifier fault and always with its
//! original `webhook-id`, never for a fenced event. The receiver (`jaque_tests::webhook`) verifies every
//! signature and records every delivery; the log is read independently (`checker::check_log`).

use jaque_core::notifier::EndpointId;
use jaque_tests::webhook::{Delivery, Mode, Receiver};
use jaque_tests::{poll, Jaque, Target};
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One process with everything and a notifier, in memory.
fn memory_notifier(name: &str, hooks: &[String], secret: Option<&str>) -> Jaque {
    let mut args = vec!["-target", "engine,worker,ui,notifier", "-queue", "memory", "-id", name];
    for h in hooks {
        args.extend(["-notify-webhook", h.as_str()]);
    }
    if let Some(s) = secret {
        args.extend(["-notify-secret", s]);
    }
    Jaque::start(name, &args)
}

fn webhook_id(seq: u64, url: &str) -> String {
    format!("jaque-{seq}-{}", EndpointId::of(url))
}

fn put_http(j: &Jaque, id: &str, url: &str) {
    let r = j.put(
        &format!("/api/objects/{id}"),
        &json!({"probe": {"type": "http", "url": url}, "interval": "1s", "timeout": "500ms"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

fn wait_deliveries(rx: &Receiver, path: &str, n: usize) -> Vec<Delivery> {
    poll(&format!("{n} deliveries at {path}"), || {
        let d = rx.deliveries(path);
        (d.len() >= n).then_some(d)
    })
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn memory_mode_delivers_every_transition_signed_with_its_fields() {
    let rx = Receiver::start(Some(SECRET));
    let hook = rx.url("/hook");
    let j = memory_notifier("solo", std::slice::from_ref(&hook), Some(SECRET));
    j.wait_ready();
    assert!(!j.proc.output.text().contains("unsigned"), "a secret is set: no warning");
    let mut target = Target::start();
    put_http(&j, "web", &target.url());
    let first = wait_deliveries(&rx, "/hook", 1);
    target.stop();
    let all = wait_deliveries(&rx, "/hook", 2);
    assert_eq!(all[0].id, first[0].id);
    let object = j.get("/api/objects/web").json();
    let last = &object["last_transition"];
    for (d, (from, to)) in all.iter().zip([("pending", "ok"), ("ok", "critical")]) {
        assert!(d.signed, "signed: {d:?}");
        let b = &d.body;
        let seq = b["seq"].as_u64().unwrap();
        assert_eq!(d.id, webhook_id(seq, &hook), "{d:?}");
        assert!(d.timestamp.abs_diff(unix_now()) < 120, "webhook-timestamp is unix seconds: {}", d.timestamp);
        assert_eq!(b["type"], "transition");
        assert_eq!(b["object"], "web");
        assert_eq!((b["from"].as_str().unwrap(), b["to"].as_str().unwrap()), (from, to), "{b}");
        assert!(b["output"].is_string(), "{b}");
        assert!(b["at"].as_str().is_some_and(|a| a.ends_with('Z') && a.contains('T')), "RFC 3339: {b}");
        assert!(b["epoch"].as_u64() >= Some(1), "{b}");
        assert_eq!(b["writer"], "solo", "{b}");
        assert_eq!(b["acknowledged"], false, "{b}");
    }
    // The last one is the transition the API shows.
    assert_eq!(all[1].body["seq"], last["seq"]);
    assert_eq!(all[1].body["output"], last["output"]);
    assert!(all[0].body["seq"].as_u64() < all[1].body["seq"].as_u64(), "in log order");
    assert_eq!(j.metric("jaque_notifier_deliveries_total{outcome=\"delivered\"}"), Some(2.0));
    assert_eq!(j.metric("jaque_notifier_lag_events"), Some(0.0));
    assert_eq!(j.metric("jaque_notifier_objects_owned"), Some(1.0));
    // The ui lists the live notifier in its bucket.
    let cluster = j.get("/api/cluster").json();
    let notifiers = cluster["buckets"].as_array().unwrap().iter().find(|b| b["bucket"] == "notifier/membership/");
    assert_eq!(notifiers.unwrap()["live_members"][0]["id"], "solo", "{cluster}");
    // An ack is not a transition: nothing more is sent.
    let r = j.request("POST", "/api/objects/web/actions/ack", &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    let pos = j.get("/api/cluster").json()["log_position"].as_u64().unwrap();
    poll("the notifier read the ack", || (j.metric("jaque_notifier_log_position") >= Some(pos as f64)).then_some(()));
    assert_eq!(rx.deliveries("/hook").len(), 2, "exactly once each, nothing for the ack");
    assert!(rx.attempts("/hook").iter().all(|a| a.status == 200));
}

#[test]
fn a_410_disables_its_endpoint_a_redirect_is_not_followed_and_the_others_go_on() {
    let rx = Receiver::start(None);
    rx.set_mode("/gone", Mode::Gone);
    rx.set_mode("/moved", Mode::Redirect);
    rx.set_mode("/slow", Mode::Hold);
    let hooks = [rx.url("/ok"), rx.url("/gone"), rx.url("/moved"), rx.url("/slow")];
    let mut j = memory_notifier("three", &hooks, None);
    j.wait_ready();
    j.proc.wait_for_line("no -notify-secret: webhook deliveries are sent unsigned");
    let mut target = Target::start();
    put_http(&j, "web", &target.url());
    let d = wait_deliveries(&rx, "/ok", 1);
    assert!(!d[0].signed, "no secret: unsigned");
    poll("the 410 counted", || {
        (j.metric("jaque_notifier_deliveries_total{outcome=\"disabled\"}") >= Some(1.0)).then_some(())
    });
    assert_eq!(j.metric("jaque_notifier_endpoints_disabled"), Some(1.0));
    poll("a redirect answered and retried", || {
        (rx.attempts("/moved").len() >= 2
            && j.metric("jaque_notifier_deliveries_total{outcome=\"retry\"}") >= Some(2.0))
        .then_some(())
    });
    // The next transition still reaches /ok; /gone is not asked again.
    target.stop();
    wait_deliveries(&rx, "/ok", 2);
    poll("the second transition counted as disabled for /gone", || {
        (j.metric("jaque_notifier_deliveries_total{outcome=\"disabled\"}") >= Some(2.0)).then_some(())
    });
    assert_eq!(rx.attempts("/gone").len(), 1, "a disabled endpoint is sent nothing more");
    assert_eq!(rx.followed(), 0, "a 3xx is a failure, never followed");
    assert!(rx.deliveries("/moved").is_empty());
    assert_eq!(j.get("/healthz").status, 200, "one endpoint gone is not the notifier gone");
    // The slow endpoint still holds the first transition unanswered: it delayed nobody else, and its own next
    // transition waits for it (per object, in order).
    assert_eq!(rx.held("/slow"), 1);
    assert_eq!(rx.attempts("/slow").len(), 1);
    rx.set_mode("/slow", Mode::Ok);
    let slow = wait_deliveries(&rx, "/slow", 2);
    let ok = rx.deliveries("/ok");
    let seqs = |d: &[Delivery]| d.iter().map(|d| d.body["seq"].as_u64()).collect::<Vec<_>>();
    assert_eq!(seqs(&slow), seqs(&ok), "the slow endpoint gets the same transitions, in the same order");

    // With its only endpoint gone, the notifier is not ready.
    let solo = Receiver::start(None);
    solo.set_mode("/gone", Mode::Gone);
    let k = memory_notifier("lonely", &[solo.url("/gone")], None);
    k.wait_ready();
    put_http(&k, "web", &Target::start().url());
    let r = poll("/healthz 503 once every endpoint answered 410", || {
        let r = k.get("/healthz");
        (r.status == 503).then_some(r)
    });
    assert!(r.text().contains("410"), "{}", r.text());
}

#[test]
fn a_delivery_failing_past_give_up_is_counted_failed_and_the_next_one_goes() {
    let rx = Receiver::start(Some(SECRET));
    rx.set_mode("/hook", Mode::Status(503));
    let hook = rx.url("/hook");
    let j = Jaque::start(
        "giveup",
        &[
            "-target",
            "engine,worker,ui,notifier",
            "-queue",
            "memory",
            "-notify-webhook",
            &hook,
            "-notify-secret",
            SECRET,
            "-notify-give-up",
            "2s",
        ],
    );
    j.wait_ready();
    let mut target = Target::start();
    put_http(&j, "web", &target.url());
    poll("the delivery given up", || {
        (j.metric("jaque_notifier_deliveries_total{outcome=\"failed\"}") == Some(1.0)).then_some(())
    });
    let attempts = rx.attempts("/hook");
    assert!(attempts.len() >= 2 && attempts.iter().all(|a| a.status == 503 && a.id == attempts[0].id), "{attempts:?}");
    assert!(j.metric("jaque_notifier_deliveries_total{outcome=\"retry\"}") >= Some(1.0));
    // The endpoint recovers: the next transition goes, the given-up one never again.
    rx.set_mode("/hook", Mode::Ok);
    target.stop();
    let d = wait_deliveries(&rx, "/hook", 1);
    assert_eq!(d[0].body["to"], "critical", "{:?}", d[0].body);
    assert_ne!(d[0].id, attempts[0].id);
    assert_eq!(j.metric("jaque_notifier_deliveries_total{outcome=\"delivered\"}"), Some(1.0));
    assert_eq!(j.metric("jaque_notifier_lag_events"), Some(0.0));
}

mod storm {
    use super::*;
    use jaque_core::{wire, EventBody, LogEntry, MemberRef, Time};
    use jaque_tests::checker::{check_log, object_body, CountingTarget};
    use jaque_tests::{http, Nats};
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    /// The core's default sends in flight per endpoint per notifier: what one notifier fault may repeat.
    const CONCURRENCY: usize = 16;
    const OBJECTS: usize = 24;

    fn notifier(nats: &Nats, id: &str, hook: &str) -> Jaque {
        let args = [
            "-target",
            "notifier",
            "-coordination",
            &nats.url,
            "-id",
            id,
            "-heartbeat-ttl",
            "3s",
            "-notify-webhook",
            hook,
            "-notify-secret",
            SECRET,
        ];
        Jaque::start(id, &args)
    }

    fn live_notifiers(ui: &Jaque) -> BTreeSet<String> {
        let c = ui.get("/api/cluster").json();
        let b = c["buckets"].as_array().into_iter().flatten().find(|b| b["bucket"] == "notifier/membership/").cloned();
        b.map(|b| b["live_members"].clone())
            .and_then(|m| m.as_array().cloned())
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(String::from))
            .collect()
    }

    fn wait_notifiers(ui: &Jaque, ids: &[&str]) {
        let want: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
        poll(&format!("live notifiers {want:?}"), || (live_notifiers(ui) == want).then_some(()));
    }

    fn wait_more(rx: &Receiver, what: &str, more: usize) {
        let n = rx.delivery_count("/hook");
        poll(what, || (rx.delivery_count("/hook") >= n + more).then_some(()));
    }

    /// A transition by a member that owns nothing, straight into the log: the fence discards it.
    fn append_fenced(nats_url: &str, object: &str, epoch: u64) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let js = async_nats::jetstream::new(async_nats::connect(nats_url).await.unwrap());
            let ev = jaque_core::Event {
                object: jaque_core::ObjectId::new(object).unwrap(),
                epoch,
                writer: MemberRef { id: jaque_core::MemberId::new("ghost").unwrap(), incarnation: 1 },
                at: Time(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64),
                command_id: None,
                body: EventBody::transition(
                    jaque_core::State::Ok,
                    jaque_core::State::Unknown,
                    "written by a member that owns nothing",
                ),
            };
            js.publish("jaque.log.event", wire::encode(&LogEntry::Event(ev)).into()).await.unwrap().await.unwrap();
        });
    }

    #[test]
    fn a_storm_of_transitions_through_a_kill_a_pause_and_a_failing_endpoint_is_delivered_at_least_once() {
        let nats = Nats::start();
        let rx = Receiver::start(Some(SECRET));
        let hook = rx.url("/hook");
        let engines: Vec<Jaque> = ["e1", "e2", "e3"]
            .iter()
            .map(|id| {
                let args = [
                    "-target",
                    "engine,ui",
                    "-queue",
                    &nats.url,
                    "-coordination",
                    &nats.url,
                    "-id",
                    id,
                    "-heartbeat-ttl",
                    "3s",
                ];
                Jaque::start(id, &args)
            })
            .collect();
        let worker = Jaque::start("worker", &["-target", "worker", "-queue", &nats.url]);
        for j in engines.iter().chain([&worker]) {
            j.wait_ready();
        }
        // A transition before any notifier ran: never sent.
        let early_target = Target::start();
        let ui = &engines[0];
        poll("early created", || {
            (ui.put(
                "/api/objects/early",
                &json!({"probe": {"type": "http", "url": early_target.url()}, "interval": "1h"}),
            )
            .status
                == 200)
                .then_some(())
        });
        let early =
            poll("early's first transition", || ui.get("/api/objects/early").json()["last_transition"]["seq"].as_u64());
        let mut n1 = notifier(&nats, "n1", &hook);
        let n2 = notifier(&nats, "n2", &hook);
        for j in engines.iter().chain([&worker, &n1, &n2]) {
            j.wait_ready();
        }
        wait_notifiers(ui, &["n1", "n2"]);
        assert_eq!(n2.metric("jaque_membership_live_members{bucket=\"notifier/membership/\"}"), Some(2.0));
        let start = jaque_tests::checker::notify_start_record(&nats.url, &hook);
        assert!(start >= early, "the notifications begin after what was in the log when the first notifier started");

        // The storm: every object's service flips between ok and failing, so each check makes a transition: every
        // change hard at once, and no flapping detection (which would rightly hold a flipping object's
        // transitions back).
        let target = Arc::new(CountingTarget::start());
        for i in 0..OBJECTS {
            let o = format!("obj-{i}");
            let mut body = object_body(&target.url(), &o);
            body["max_attempts"] = json!(1);
            body["flapping"] = json!(false);
            let body = body.to_string();
            poll(&format!("{o} created"), || {
                let r = http(
                    ui.addr,
                    "PUT",
                    &format!("/api/objects/{o}"),
                    &[("Idempotency-Key", &o)],
                    Some(body.as_bytes()),
                );
                (r.status == 200).then_some(())
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flipper = {
            let (stop, target) = (stop.clone(), target.clone());
            thread::spawn(move || {
                let mut failing = false;
                while !stop.load(Ordering::SeqCst) {
                    failing = !failing;
                    target.set_failing(failing);
                    // The storm's rhythm (a load generator, not a synchronization).
                    thread::sleep(Duration::from_millis(1500));
                }
                target.set_failing(false);
            })
        };
        wait_more(&rx, "deliveries flowing", 30);

        // kill -9 one notifier mid-storm, with sends in flight: the receiver holds requests unanswered until
        // more are out than one notifier may have (so some are n1's), and counts them. The other takes n1's
        // objects once its key expires, and sends n1's claimed transitions again; n1 comes back.
        let before = rx.held_total("/hook");
        rx.set_mode("/hook", Mode::Hold);
        poll("sends of both notifiers in flight", || (rx.held("/hook") > CONCURRENCY).then_some(()));
        n1.proc.signal("KILL");
        n1.proc.wait_exit();
        rx.set_mode("/hook", Mode::Ok);
        // Every request held in this spell was unanswered at the kill.
        let in_flight_at_kill = rx.held_total("/hook") - before;
        wait_notifiers(ui, &["n2"]);
        wait_more(&rx, "deliveries by n2 alone", 20);
        n1 = notifier(&nats, "n1", &hook);
        n1.wait_ready();
        wait_notifiers(ui, &["n1", "n2"]);
        wait_more(&rx, "deliveries with n1 back", 20);

        // SIGSTOP the other past its ttl, with sends in flight: n1 takes everything over; n2 resumes and rejoins.
        let before = rx.held_total("/hook");
        rx.set_mode("/hook", Mode::Hold);
        poll("sends of both notifiers in flight", || (rx.held("/hook") > CONCURRENCY).then_some(()));
        n2.proc.signal("STOP");
        rx.set_mode("/hook", Mode::Ok);
        let in_flight_at_stop = rx.held_total("/hook") - before;
        wait_notifiers(ui, &["n1"]);
        wait_more(&rx, "deliveries by n1 alone", 20);
        n2.proc.signal("CONT");
        wait_notifiers(ui, &["n1", "n2"]);
        wait_more(&rx, "deliveries with n2 back", 20);

        // SIGTERM with sends in flight is no fault: n1 finishes them (answered once released), records them, and
        // only then deletes its key, so n2 takes its objects over without sending any of them again.
        let spell_start = rx.delivery_count("/hook");
        rx.set_mode("/hook", Mode::Hold);
        poll("sends of both notifiers in flight", || (rx.held("/hook") > CONCURRENCY).then_some(()));
        n1.proc.signal("TERM");
        let spell_end = rx.delivery_count("/hook");
        rx.set_mode("/hook", Mode::Ok);
        assert!(n1.proc.wait_exit().success(), "a notifier exits cleanly on SIGTERM");
        wait_notifiers(ui, &["n2"]);
        wait_more(&rx, "deliveries by n2 alone after the leave", 20);
        n1 = notifier(&nats, "n1", &hook);
        n1.wait_ready();
        wait_notifiers(ui, &["n1", "n2"]);

        // The endpoint fails for a while (500, then 429 with Retry-After), then recovers.
        rx.set_mode("/hook", Mode::Status(500));
        poll("attempts answered 500", || {
            (rx.attempts("/hook").iter().filter(|a| a.status == 500).count() >= 10).then_some(())
        });
        rx.set_mode("/hook", Mode::TooMany { retry_after_secs: 1 });
        poll("attempts answered 429", || {
            (rx.attempts("/hook").iter().filter(|a| a.status == 429).count() >= 5).then_some(())
        });
        rx.set_mode("/hook", Mode::Ok);
        wait_more(&rx, "deliveries after the endpoint recovered", 20);

        // A fenced transition in the log.
        let epoch = check_log(&nats.url).reader.epoch();
        append_fenced(&nats.url, "obj-0", epoch);

        // The storm ends; once every object is ok again, nothing more is written.
        stop.store(true, Ordering::SeqCst);
        flipper.join().unwrap();
        poll("every object ok", || {
            let list = ui.get("/api/objects").json();
            let all = list.as_array()?;
            (all.len() == OBJECTS + 1 && all.iter().all(|o| o["state"] == "ok")).then_some(())
        });

        // Every accepted transition after the start record, read from the log independently, delivered.
        let (log, transitions) = poll("every accepted transition delivered", || {
            let log = check_log(&nats.url);
            let mut reader = jaque_core::LogReader::new();
            let mut transitions = BTreeMap::new();
            for (seq, entry) in &log.entries {
                let read = reader.read(*seq, entry);
                if let (LogEntry::Event(ev), jaque_core::Read::Event { verdict, .. }) = (entry, read) {
                    if verdict.is_accepted() && matches!(ev.body, EventBody::Transition { .. }) {
                        transitions.insert(*seq, ev.object.to_string());
                    }
                }
            }
            let delivered: BTreeSet<u64> =
                rx.deliveries("/hook").iter().filter_map(|d| d.body["seq"].as_u64()).collect();
            transitions.range(start + 1..).all(|(s, _)| delivered.contains(s)).then_some((log, transitions))
        });
        let fenced: Vec<u64> = log
            .entries
            .iter()
            .filter(|(_, e)| matches!(e, LogEntry::Event(ev) if ev.writer.id.as_str() == "ghost"))
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(fenced.len(), 1);
        assert_eq!(log.stale_by_writer.get("ghost"), Some(&1), "the independent reader fences it");

        let deliveries = rx.deliveries("/hook");
        let mut per_seq: BTreeMap<u64, Vec<&Delivery>> = BTreeMap::new();
        for d in &deliveries {
            assert!(d.signed);
            let seq = d.body["seq"].as_u64().unwrap();
            assert!(!fenced.contains(&seq), "a fenced event was notified: {d:?}");
            let object = transitions.get(&seq).unwrap_or_else(|| panic!("seq {seq} is not an accepted transition"));
            assert!(seq > start && seq != early, "seq {seq} is from before the notifiers started ({start})");
            assert_eq!(d.body["object"], object.as_str());
            assert_eq!(d.id, webhook_id(seq, &hook), "every delivery of a transition carries its one webhook-id");
            per_seq.entry(seq).or_default().push(d);
        }
        // Repeats only from the two notifier faults, at most one per send in flight at each (the held requests
        // counted at each fault are all the sends in flight then, both notifiers' together). And there are
        // repeats: the killed and the paused notifier each had sends in flight, which the other sent again.
        let repeats: usize = per_seq.values().map(|v| v.len() - 1).sum();
        let permitted = in_flight_at_kill + in_flight_at_stop;
        assert!(repeats <= permitted, "{repeats} repeats; the kill and the pause permit at most {permitted}");
        assert!(repeats >= 2, "the sends in flight at the kill and at the pause were sent again: {repeats} repeats");
        for (seq, v) in &per_seq {
            assert!(v.len() <= 3, "seq {seq} delivered {} times: one, plus one per fault at most", v.len());
        }
        // What was in flight at the SIGTERM was delivered once.
        let before_spell: BTreeSet<u64> =
            deliveries[..spell_start].iter().filter_map(|d| d.body["seq"].as_u64()).collect();
        let in_spell: BTreeSet<u64> = deliveries[spell_start..spell_end]
            .iter()
            .filter_map(|d| d.body["seq"].as_u64())
            .filter(|s| !before_spell.contains(s))
            .collect();
        assert!(!in_spell.is_empty(), "sends were in flight at the SIGTERM");
        for seq in &in_spell {
            assert_eq!(per_seq[seq].len(), 1, "seq {seq}, in flight at a clean leave, was sent again");
        }
        // Per object, first deliveries in log order.
        let mut seen = BTreeSet::new();
        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        for d in &deliveries {
            let seq = d.body["seq"].as_u64().unwrap();
            if seen.insert(seq) {
                let object = d.body["object"].as_str().unwrap().to_string();
                let l = last.entry(object.clone()).or_default();
                assert!(seq > *l, "{object}: {seq} first delivered after {l}");
                *l = seq;
            }
        }
        let metric = |j: &Jaque, m: &str| j.metric(m).unwrap_or(0.0);
        let resent = metric(&n1, "jaque_notifier_resent_after_fault_total")
            + metric(&n2, "jaque_notifier_resent_after_fault_total");
        let retried = metric(&n1, "jaque_notifier_deliveries_total{outcome=\"retry\"}")
            + metric(&n2, "jaque_notifier_deliveries_total{outcome=\"retry\"}");
        assert!(retried >= 15.0, "the 500s and 429s were counted as retries: {retried}");
        eprintln!(
            "storm: {} accepted transitions after {start}, {} deliveries, {repeats} repeats ({permitted} permitted: \
             {in_flight_at_kill} in flight at the kill, {in_flight_at_stop} at the pause), {resent} resent after a fault, \
             {retried} retries counted, {} attempts",
            transitions.range(start + 1..).count(),
            deliveries.len(),
            rx.attempts("/hook").len()
        );

        // The progress records share the membership bucket, and no member's watch mistook one for a member key.
        for j in engines.iter().chain([&n1, &n2]) {
            assert_eq!(j.metric("jaque_wire_decode_errors_total{what=\"any\"}"), Some(0.0), "{}", j.proc.name);
        }

        // SIGTERM: a clean leave.
        let mut n1 = n1;
        n1.proc.signal("TERM");
        assert!(n1.proc.wait_exit().success(), "a notifier exits cleanly on SIGTERM");
        wait_notifiers(ui, &["n2"]);
        drop(worker);
    }
}

/// The fact the progress records rest on, on the real server: a watch of the membership bucket filtered to
/// one-token keys (member keys) does not see `notify.…` records, and the revisions it reports are the
/// bucket-wide ones the records are written at, so "the view moved past a claim's revision" means what the
/// core takes it to mean.
#[test]
fn a_member_key_watch_skips_progress_records_and_keeps_bucket_wide_revisions() {
    use async_nats::jetstream::{consumer, kv, stream};
    use futures_util::StreamExt;
    let nats = jaque_tests::Nats::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(&nats.url).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        let kv = js
            .create_key_value(kv::Config {
                bucket: "revs".into(),
                history: 1,
                limit_markers: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            })
            .await
            .unwrap();
        let a = kv.put("membership/a", "1".into()).await.unwrap();
        let record = kv.create("notify.0123456789abcdef.d2Vi", "{}".into()).await.unwrap();
        let b = kv.put("notifier/membership/b", "1".into()).await.unwrap();
        let record2 = kv.update("notify.0123456789abcdef.d2Vi", "{}".into(), record).await.unwrap();
        let c = kv.put("membership/a", "2".into()).await.unwrap();
        assert!(a < record && record < b && b < record2 && record2 < c, "{a} {record} {b} {record2} {c}");
        let s: stream::Stream = js.get_stream("KV_revs").await.unwrap();
        let mut watch = s
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: client.new_inbox(),
                filter_subject: "$KV.revs.*".into(),
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await
            .unwrap()
            .messages()
            .await
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..2 {
            let m = watch.next().await.unwrap().unwrap();
            seen.push((m.subject.to_string(), m.info().unwrap().stream_sequence));
        }
        assert_eq!(
            seen,
            vec![("$KV.revs.notifier/membership/b".to_string(), b), ("$KV.revs.membership/a".to_string(), c)]
        );
    });
}

/// The notification policy (cluster format 4) as the notifier's own endpoints meet it: the engine that writes a
/// transition decides who is told; a problem that a silence selects, one whose parent is down, and one the
/// policy's routes take without going on to the implicit route reach no `-notify-webhook`, and each is counted by
/// why; the others are delivered as before.
#[test]
fn silenced_parent_down_and_routed_problems_are_not_sent_to_the_webhook_and_are_counted_by_why() {
    let rx = Receiver::start(Some(SECRET));
    let hook = rx.url("/hook");
    let j = memory_notifier("solo", std::slice::from_ref(&hook), Some(SECRET));
    j.wait_ready();
    let write = |method: &str, path: &str, body: serde_json::Value| {
        let r = j.request(method, path, &[], Some(body.to_string().as_bytes()));
        assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    };
    write("PUT", "/api/policy/receivers/api-team", json!({"kind": "webhook", "url": "https://hooks.example.com/api"}));
    write("PUT", "/api/policy/routes", json!([{"selector": "team=api", "receivers": ["api-team"]}]));
    write("POST", "/api/silences", json!({"selector": "team=db", "duration": "1h", "author": "test"}));
    // Every object checks a closed port: its first result, critical, is a transition at once.
    let put = |id: &str, extra: serde_json::Value| {
        let mut body = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        write("PUT", &format!("/api/objects/{id}"), body);
    };
    let critical = |id: &str| {
        poll(&format!("{id} critical"), || {
            (j.get(&format!("/api/objects/{id}")).json()["state"] == "critical").then_some(())
        })
    };
    put("switch", json!({}));
    critical("switch");
    put("host", json!({"parents": ["switch"]}));
    put("db", json!({"labels": {"team": "db"}}));
    put("api", json!({"labels": {"team": "api"}}));
    put("web", json!({"labels": {"team": "web"}}));
    for id in ["host", "db", "api", "web"] {
        critical(id);
    }
    let host = j.get("/api/objects/host").json();
    assert_eq!(host["parents_down"], json!(["switch"]), "{host}");
    assert!(host["episode"].as_u64().is_some(), "a problem has its episode: {host}");
    let pos = j.get("/api/cluster").json()["log_position"].as_u64().unwrap();
    poll("the notifier read every transition", || {
        (j.metric("jaque_notifier_log_position") >= Some(pos as f64)).then_some(())
    });
    let delivered = wait_deliveries(&rx, "/hook", 2);
    let mut objects: Vec<&str> = delivered.iter().map(|d| d.body["object"].as_str().unwrap()).collect();
    objects.sort();
    assert_eq!(objects, ["switch", "web"], "only the problems nothing held back");
    for (reason, n) in [("silenced", 1.0), ("parent_down", 1.0), ("routes", 1.0), ("maintenance_window", 0.0)] {
        assert_eq!(j.metric(&format!("jaque_notifier_not_sent_total{{reason=\"{reason}\"}}")), Some(n), "{reason}");
    }
    assert_eq!(rx.deliveries("/hook").len(), 2, "nothing else arrived meanwhile");
}

/// Issue 35's switch in front of 50 hosts: the switch goes down first, then every host behind it. Only the
/// switch's problem is notified, not 51: each host's problem is written while its parent is down, so its writer
/// sends it to nobody (counted `parent_down`). When the switch recovers, the hosts still down are notified then
/// (`released`), once each.
#[test]
fn a_parent_down_with_50_children_is_one_notification_not_51_and_its_recovery_releases_them() {
    let rx = Receiver::start(Some(SECRET));
    let hook = rx.url("/hook");
    let j = memory_notifier("solo", std::slice::from_ref(&hook), Some(SECRET));
    j.wait_ready();
    let (mut switch, mut hosts) = (Target::start(), Target::start());
    let put = |id: &str, url: &str, parents: &[&str]| {
        let body = json!({"probe": {"type": "http", "url": url}, "interval": "1s", "timeout": "500ms",
            "max_attempts": 1, "flapping": false, "parents": parents});
        let r = j.put(&format!("/api/objects/{id}"), &body);
        assert_eq!(r.status, 200, "{}", r.text());
    };
    put("switch", &switch.url(), &[]);
    let children: Vec<String> = (0..50).map(|i| format!("host-{i:02}")).collect();
    for c in &children {
        put(c, &hosts.url(), &["switch"]);
    }
    poll("all 51 ok", || (j.get("/api/summary").json()["states"]["ok"] == 51).then_some(()));
    switch.stop();
    poll("the switch critical", || (j.get("/api/objects/switch").json()["state"] == "critical").then_some(()));
    hosts.stop();
    poll("every host critical", || (j.get("/api/summary").json()["states"]["critical"] == 51).then_some(()));
    let pos = j.get("/api/cluster").json()["log_position"].as_u64().unwrap();
    poll("the notifier read every transition", || {
        (j.metric("jaque_notifier_log_position") >= Some(pos as f64)).then_some(())
    });
    assert_eq!(j.metric("jaque_notifier_not_sent_total{reason=\"parent_down\"}"), Some(50.0));
    // 51 first results (ok) and the switch's problem.
    let delivered = wait_deliveries(&rx, "/hook", 52);
    let problems: Vec<&str> =
        delivered.iter().filter(|d| d.body["to"] == "critical").map(|d| d.body["object"].as_str().unwrap()).collect();
    assert_eq!(problems, ["switch"], "one notification, not 51");
    let host = j.get("/api/objects/host-07").json();
    assert_eq!(host["held"], json!({"reason": "parent_down", "by": ["switch"]}), "{host}");

    // The switch comes back (its probe pointed at a live target): each host still down is notified now, once,
    // as a released problem; then the switch's recovery.
    let back = Target::start();
    put("switch", &back.url(), &[]);
    let delivered = wait_deliveries(&rx, "/hook", 52 + 51);
    let released: std::collections::BTreeSet<&str> =
        delivered.iter().filter(|d| d.body["type"] == "released").map(|d| d.body["object"].as_str().unwrap()).collect();
    assert_eq!(released.len(), 50, "every host, once: {released:?}");
    assert!(released.iter().all(|h| h.starts_with("host-")));
    let recoveries: Vec<&str> = delivered
        .iter()
        .filter(|d| d.body["to"] == "ok" && d.body["from"] == "critical")
        .map(|d| d.body["object"].as_str().unwrap())
        .collect();
    assert_eq!(recoveries, ["switch"]);
    assert_eq!(j.get("/api/objects/host-07").json()["held"], serde_json::Value::Null);
}
