//! The API against its OpenAPI document (`GET /api/openapi.json`), fuzzed by schemathesis on live processes:
//! no 5xx, and every answer's status, content type, headers and body as documented; every input the document
//! calls invalid refused with a 4xx; an object deleted is gone; with `-write-token`, a write without the token
//! refused. Each run is bounded (`MAX_EXAMPLES` per operation) and seeded (`JAQUE_SCHEMATHESIS_SEED` to vary).
//!
//! `positive_data_acceptance` (everything the document allows is accepted) is off for three operations whose
//! inputs JSON Schema cannot pin down, so the document is looser than the server there, never stricter: a put
//! (a timeout at most the interval, which duration strings parse), the list (a cursor is any string to the
//! document, but only one this server made is taken), history (RFC 3339 timestamps).

use jaque_tests::loopback_probes::{LoopbackProbes, HTTP_TARGET, TCP_TARGET};
use jaque_tests::{schemathesis_bin, Jaque};
use std::net::SocketAddr;
use std::process::Command;

const MAX_EXAMPLES: &str = "25";

const CONFIG: &str = r#"
[[operations]]
include-operation-id-regex = "^(putObject|listObjects)$"
checks.positive_data_acceptance.enabled = false

# History outlives its object (the store keeps a deleted object's events), so after a delete it is still 200.
[[operations]]
include-operation-id = "objectHistory"
checks.positive_data_acceptance.enabled = false
checks.use_after_free.enabled = false
"#;

/// Runs schemathesis against the document `base` serves with `extra` arguments: every check, but those
/// `CONFIG` turns off and, when `server_errors_expected`, the one that fails any 5xx. Fails the test with its
/// report when it finds anything.
fn schemathesis(base: SocketAddr, server_errors_expected: bool, extra: &[&str]) {
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("schemathesis.toml");
    // Checks are chosen in the file only: a `--checks` on the command line would override it per operation.
    let checks = if server_errors_expected { "[checks]\nnot_a_server_error.enabled = false\n" } else { "" };
    std::fs::write(&config, format!("{checks}{CONFIG}")).unwrap();
    let seed = std::env::var("JAQUE_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into());
    let out = Command::new(schemathesis_bin())
        .current_dir(work.path())
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("http://{base}/api/openapi.json"), "--no-color"])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", &seed, "--generation-database", "none"])
        .args(["--request-timeout", "20"])
        .args(extra)
        .output()
        .expect("schemathesis runs");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "schemathesis found problems (seed {seed}):\n{report}");
    eprintln!("{report}");
}

/// A whole product in one process behind the proxy that points every probe at loopback (and, should one get
/// past it, an HTTP proxy on the discard port for the worker's own client).
fn one_process(name: &str, targets: &str, extra: &[&str]) -> (Jaque, LoopbackProbes) {
    let mut args = vec!["-target", targets, "-queue", "memory"];
    args.extend_from_slice(extra);
    let proxy = "http://127.0.0.1:9";
    let j = Jaque::start_env(name, &args, &[("HTTP_PROXY", proxy), ("HTTPS_PROXY", proxy), ("ALL_PROXY", proxy)]);
    j.wait_ready();
    let front = LoopbackProbes::start(j.addr);
    (j, front)
}

/// Every object the fuzzing defined has its probe on loopback: the proxy held.
fn every_probe_on_loopback(j: &Jaque) {
    let list = j.get("/api/objects?limit=10000").json();
    for o in list.as_array().expect("a list") {
        let probe = &o["definition"]["probe"];
        let target = probe["url"].as_str().or(probe["addr"].as_str());
        assert!(
            target.is_none() || target == Some(HTTP_TARGET) || target == Some(TCP_TARGET),
            "a probe off loopback: {probe}"
        );
    }
}

#[test]
fn schemathesis_finds_nothing_on_the_whole_product_with_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let (j, front) = one_process("jaque", "engine,worker,ui,sink", &["-sink-store", &store]);
    schemathesis(front.addr, false, &[]);
    every_probe_on_loopback(&j);
}

#[test]
fn schemathesis_finds_nothing_with_a_write_token() {
    let (j, front) = one_process("jaque-token", "engine,worker,ui", &["-write-token", "s3cret"]);
    schemathesis(front.addr, false, &["--header", "Authorization: Bearer s3cret"]);
    every_probe_on_loopback(&j);
}

#[test]
fn schemathesis_finds_nothing_on_a_ui_that_cannot_take_writes() {
    // No engine and no NATS coordination: reads of an empty log, and every write the page's 503, so the check
    // that no answer is a 5xx is off here; one not in the document still fails `status_code_conformance`.
    let j = Jaque::start("ui", &["-target", "ui"]);
    j.wait_ready();
    schemathesis(j.addr, true, &[]);
}
