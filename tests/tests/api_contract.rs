//! The API against its OpenAPI document (`GET /api/openapi.json`), fuzzed by schemathesis on live processes:
//! no 5xx, and every answer's status, content type, headers and body as documented; every input the document
//! calls invalid refused with a 4xx; an object deleted is gone; with `-read-token` and `-write-token`, a write
//! without the token refused. Each run is bounded (`MAX_EXAMPLES` per operation) and seeded (`JAQUE_SCHEMATHESIS_SEED` to vary).
//!
//! `GET /api/stream` is left out (`--exclude-operation-id eventStream`): it answers a stream that never ends by
//! design, which schemathesis would wait on until its request timeout and report; the unit tests of
//! `shell/src/ui/openapi.rs` check its status and content type against the document, and `tests/status_page.rs`
//! what it carries.
//!
//! `positive_data_acceptance` (everything the document allows is accepted) is off for the operations whose
//! inputs JSON Schema cannot pin down, so the document is looser than the server there, never stricter: a put
//! (a timeout at most the interval, which duration strings parse; a label key's prefix of at most 253
//! characters), the list (a cursor is any non-empty string to the document, but only one this server made is taken),
//! the list and the summary (a label selector is any string of at most 4096 to the document, but only one that
//! parses is taken), history (RFC 3339 timestamps); and the notification policy's writes but its deletes of windows
//! and silences: what they name must exist (a route's receivers), or must not be named (a receiver a route
//! names), a receiver's url must hold no credentials, a silence must end after it starts, a window's time zone
//! must be in the database (a list the document does not carry).

use jaque_tests::loopback_probes::{LoopbackProbes, HTTP_TARGET, TCP_TARGET};
use jaque_tests::{schemathesis_bin, Jaque};
use std::net::SocketAddr;
use std::process::Command;

const MAX_EXAMPLES: &str = "25";

const CONFIG: &str = r#"
[[operations]]
include-operation-id-regex = "^(putObject|listObjects|summary|putReceiver|deleteReceiver|putRoutes|putWindow|postSilence|putSilence)$"
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
        .args(["--exclude-operation-id", "eventStream"])
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

/// Every object the fuzzing defined has its probe on loopback: the proxy held. Read with `auth` headers.
fn every_probe_on_loopback(j: &Jaque, auth: &[(&str, &str)]) {
    let list = j.request("GET", "/api/objects?limit=10000", auth, None).json();
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
    every_probe_on_loopback(&j, &[]);
}

#[test]
fn schemathesis_finds_nothing_with_a_read_and_a_write_token() {
    // The write token grants reads too: every operation is answered, and the document lists both schemes.
    let (j, front) = one_process("jaque-token", "engine,worker,ui", &["-read-token", "r3ad", "-write-token", "s3cret"]);
    schemathesis(front.addr, false, &["--header", "Authorization: Bearer s3cret"]);
    assert_eq!(j.get("/api/objects").status, 401, "reads need a token");
    every_probe_on_loopback(&j, &[("authorization", "Bearer r3ad")]);
}

#[test]
fn schemathesis_finds_nothing_on_a_ui_that_cannot_take_writes() {
    // No engine and no NATS coordination: reads of an empty log, and every write the page's 503, so the check
    // that no answer is a 5xx is off here; one not in the document still fails `status_code_conformance`.
    let j = Jaque::start("ui", &["-target", "ui"]);
    j.wait_ready();
    schemathesis(j.addr, true, &[]);
}

/// The `Link` of a page: the path of the next one.
fn next_page(r: &jaque_tests::Response) -> Option<String> {
    let link = r.header("link")?;
    Some(link.strip_prefix('<')?.split_once(">; rel=\"next\"")?.0.to_string())
}

fn ids(r: &jaque_tests::Response) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().expect("a page is an array").iter().map(|o| o["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn paging_through_the_links_sees_every_object_once_while_objects_come_and_go() {
    let j = Jaque::start("jaque", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let target = jaque_tests::Target::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // dropped: refuses
    let define = |id: &str, addr: &str| {
        let def = serde_json::json!({"probe": {"type": "tcp", "addr": addr}, "interval": "1h"});
        assert_eq!(j.put(&format!("/api/objects/{id}"), &def).status, 200);
    };
    for i in 0..10 {
        define(&format!("up-{i:02}"), &target.addr.to_string());
        define(&format!("down-{i:02}"), &closed.to_string());
    }
    // A new object is checked at once.
    jaque_tests::poll("every object checked", || {
        let s = j.get("/api/summary").json();
        (s["states"]["ok"] == 10 && s["states"]["critical"] == 10).then_some(())
    });

    // By id, three a page; after the second page its last object is deleted (the cursor points at it), one is
    // added before the cursor (not seen: the walk is past it) and one after it (seen).
    let mut seen = Vec::new();
    let mut next = Some("/api/objects?limit=3".to_string());
    let mut pages = 0;
    let mut deleted = String::new();
    while let Some(path) = next {
        let r = j.get(&path);
        let page = ids(&r);
        assert!(page.len() <= 3);
        seen.extend(page.iter().cloned());
        next = next_page(&r);
        pages += 1;
        if pages == 2 {
            let cursor = page.last().unwrap();
            assert_eq!(j.request("DELETE", &format!("/api/objects/{cursor}"), &[], None).status, 200);
            deleted = cursor.clone();
            define("a-before", &target.addr.to_string());
            define("zz-after", &target.addr.to_string());
        }
    }
    let mut want: Vec<String> = (0..10).flat_map(|i| [format!("down-{i:02}"), format!("up-{i:02}")]).collect();
    want.sort();
    want.push("zz-after".into());
    assert_eq!(seen, want, "each object once, in id order, the one added behind the cursor not seen");

    // Problems first: only the critical ones, the longest critical first, in pages of four.
    let mut problems = Vec::new();
    let mut next = Some("/api/objects?limit=4&state=critical,unknown,warning&sort=severity".to_string());
    while let Some(path) = next {
        let r = j.get(&path);
        let page: Vec<serde_json::Value> = r.json().as_array().unwrap().clone();
        problems.extend(page);
        next = next_page(&r);
    }
    let since: Vec<u64> = problems.iter().map(|o| o["state_since_ms"].as_u64().unwrap()).collect();
    assert!(problems.iter().all(|o| o["state"] == "critical"), "{problems:?}");
    assert!(since.windows(2).all(|w| w[0] <= w[1]), "the longest in its state first: {since:?}");
    let down: std::collections::BTreeSet<&str> = problems.iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(down.len(), problems.len(), "each once");
    let want: std::collections::BTreeSet<String> =
        (0..10).map(|i| format!("down-{i:02}")).filter(|id| *id != deleted).collect();
    assert_eq!(down, want.iter().map(String::as_str).collect());

    // A search, any case; and what a bad parameter says.
    assert_eq!(ids(&j.get("/api/objects?q=UP-0")), (0..10).map(|i| format!("up-{i:02}")).collect::<Vec<_>>());
    let r = j.get("/api/objects?limit=10001");
    assert_eq!(r.status, 400);
    assert!(r.json()["reason"].as_str().unwrap().contains("from 1 to 10000"), "{}", r.text());
}
