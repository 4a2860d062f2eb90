//! Secrets stay secret (issue 15): a probe url's userinfo is kept as given where the probe needs it (the log,
//! the check work) and shown as `***` everywhere else: the definition a read renders, the sink's `definition`
//! column, a refusal's message, a check's output written to the log.

mod common;

use common::*;
use jaque_core::sink::definition_json;
use jaque_core::*;
use std::time::Duration;

const URL: &str = "http://user:s3cr3t-pass@127.0.0.1:9/status";
const SECRET: &str = "s3cr3t-pass";

fn http_def(url: &str) -> ObjectDef {
    ObjectDef {
        probe: Probe::Http { url: url.into(), expect_status: None },
        interval_ms: 10_000,
        timeout_ms: 1000,
        ..ObjectDef::UNSET
    }
}

#[test]
fn the_log_and_the_check_keep_the_url_every_read_shows_stars() {
    let mut w = World::new();
    w.add_engine("a", 1);
    w.truth.insert("web".into(), State::Critical);
    // What an HTTP client's error looks like: the url, credentials and all, and the password alone.
    w.outputs.insert("web".into(), format!("error sending request for url ({URL}): refused; {SECRET}"));
    let r = w.submit("a", cmd("c1", "web", CommandKind::Put { def: http_def(URL) }));
    assert!(matches!(w.outcome(r), Outcome::Applied { .. }), "{:?}", w.outcome(r));
    w.advance(Duration::ZERO);

    let (_, work, _) = &w.dispatched[0];
    let Probe::Http { url, .. } = &work.probe else { panic!("{:?}", work.probe) };
    assert_eq!(url.expose(), URL, "the worker gets the credentials");
    assert!(!format!("{work:?}").contains(SECRET), "Debug shows it redacted: {work:?}");

    let mut put_kept = false;
    for entry in &w.log {
        let LogEntry::Event(e) = entry else { continue };
        match &e.body {
            EventBody::Put { def } => {
                put_kept = serde_json::to_string(def).unwrap().contains(SECRET);
                let stored = definition_json(def);
                assert!(!stored.contains(SECRET) && stored.contains("http://***@127.0.0.1:9/status"), "{stored}");
            }
            EventBody::Transition { output, .. } => {
                assert!(!output.contains(SECRET), "the log's output is scrubbed: {output}");
                assert!(output.contains("http://***@127.0.0.1:9/status"), "{output}");
            }
            _ => {}
        }
    }
    assert!(put_kept, "the log keeps the definition as given");
    let view = w.oracle().object(&oid("web")).unwrap().clone();
    let shown = serde_json::to_string(&view.def.redacted()).unwrap();
    assert!(!shown.contains(SECRET) && shown.contains("***"), "{shown}");
    assert_eq!(
        view.def.redacted().into_owned().probe,
        Probe::Http { url: "http://***@127.0.0.1:9/status".into(), expect_status: None }
    );
}

#[test]
fn a_refused_definition_never_quotes_the_credentials() {
    for bad in [
        "ftp://user:s3cr3t-pass@h/",
        "http://user:s3cr3t-pass@h/ space",
        "http://user:s3cr3t-pass@h/\ttab",
        &format!("http://user:s3cr3t-pass@h/{}", "x".repeat(2048)),
    ] {
        let e = http_def(bad).validate().unwrap_err().to_string();
        assert!(!e.contains(SECRET) && e.contains("***"), "{e}");
    }
}

#[test]
fn stars_where_credentials_go_are_refused_so_a_read_put_back_does_not_lose_them() {
    let e = http_def("http://***@h/").validate().unwrap_err().to_string();
    assert!(e.contains("give the real ones"), "{e}");
    http_def("http://u:***@h/").validate().expect("a password of stars is a password");
    http_def(URL).validate().unwrap();
}

#[test]
fn a_command_that_does_not_parse_is_refused_without_quoting_a_url() {
    let bytes = format!(
        r#"{{"id":"c","object":"x","kind":"put","def":{{"probe":{{"type":"http","url":"{URL}","expect_status":"{URL}"}},"interval_ms":1000,"timeout_ms":10}}}}"#
    );
    let e = wire::decode_command(bytes.as_bytes()).unwrap_err();
    let Outcome::Rejected { reason } = wire::rejection(&e) else { panic!() };
    // serde quotes the value it could not take: the url, redacted.
    assert!(!reason.contains(SECRET) && reason.contains("http://***@127.0.0.1:9/status"), "{reason}");
}

#[test]
fn outputs_lose_urls_userinfo_whatever_the_probe() {
    let tcp = Probe::Tcp { addr: "h:1".into() };
    assert_eq!(tcp.scrub("checked https://admin:hunter22@db/ ok"), "checked https://***@db/ ok");
    let exec = Probe::Exec { plugin: "p".into(), args: vec![] };
    assert_eq!(exec.scrub("OK - fine"), "OK - fine");
}
