//! `/metrics` passes `promtool check metrics` (Prometheus' own linter for the text exposition format: names,
//! units, HELP and TYPE lines, histogram and counter conventions) for a process with every role, once with the
//! in-process store and once on NATS, after each role has done some work so that every family has samples.
//!
//! Needs promtool (`scripts/install-promtool.sh`; scripts/test.sh runs it): `JAQUE_PROMTOOL`, else
//! `.tools/bin/promtool`; without it the test fails saying so.

use jaque_tests::{poll, Jaque, Nats};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("JAQUE_PROMTOOL") {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let bin = workspace.join(".tools/bin/promtool");
    assert!(
        bin.exists(),
        "promtool not found: set JAQUE_PROMTOOL or run scripts/install-promtool.sh (scripts/test.sh does)"
    );
    bin
}

/// What `promtool check metrics` says about `text`: Ok, or its complaints.
fn lint(text: &str) -> Result<(), String> {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(said)
    }
}

/// Every role in one process: an object checked (critical: nothing listens), its transitions stored by the sink
/// and tried by the notifier at an endpoint that refuses; then `/metrics` linted.
fn every_role_lints(name: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let hook = format!("http://{closed}/hook");
    let mut args = vec!["-target", "engine,worker,ui,sink,notifier", "-sink-store", &store, "-notify-webhook", &hook];
    args.extend_from_slice(extra);
    let j = Jaque::start(name, &args);
    j.wait_ready();
    let def = serde_json::json!({"probe": {"type": "tcp", "addr": closed.to_string()}, "interval": "1s"});
    assert_eq!(j.put("/api/objects/a", &def).status, 200);
    let metric = |m: &str| j.metric(m).unwrap_or(0.0);
    poll("a checked, stored and its delivery tried", || {
        let checked = metric("jaque_worker_checks_total{state=\"critical\"}") >= 1.0;
        let stored = metric("jaque_sink_events_written_total") >= 2.0;
        let tried = metric("jaque_notifier_deliveries_total{outcome=\"retry\"}") >= 1.0;
        (checked && stored && tried).then_some(())
    });
    let text = j.get("/metrics").text();
    assert!(text.contains("# TYPE jaque_"), "{text}");
    if let Err(said) = lint(&text) {
        panic!("promtool check metrics ({name}):\n{said}\n--- /metrics ---\n{text}");
    }
}

#[test]
fn metrics_of_every_role_in_memory_pass_promtool() {
    every_role_lints("jaque-memory", &["-queue", "memory"]);
}

#[test]
fn metrics_of_every_role_on_nats_pass_promtool() {
    let nats = Nats::start();
    every_role_lints("jaque-nats", &["-queue", &nats.url, "-coordination", &nats.url]);
}

#[test]
fn promtool_refuses_what_breaks_the_format() {
    // The check above would pass vacuously if promtool accepted anything.
    assert!(lint("# HELP jaque_x_total X.\n# TYPE jaque_x_total counter\njaque_x_total 1\n").is_ok());
    let said = lint("# HELP jaque_x X.\n# TYPE jaque_x counter\njaque_x 1\n").unwrap_err();
    assert!(said.contains("_total"), "{said}");
    let said = lint("# TYPE jaque_x_total counter\njaque_x_total 1\n").unwrap_err();
    assert!(said.contains("no help text"), "{said}");
}
