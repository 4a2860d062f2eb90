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
    let hooks = [rx.url("/ok"), rx.url("/gone"), rx.url("/moved")];
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
