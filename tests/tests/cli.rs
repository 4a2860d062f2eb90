//! The command-line client (issue 36): `jaque get|history|delete|ack|pause|resume|check|cluster|completion`
//! against a real ui: what it reads is what the API says, what it writes reaches the log (counted through the
//! API, not from the client's output), and each kind of failure has its exit code (0 done, 1 the server refused
//! something, 2 the command line is wrong, 3 the server could not be talked to).

use jaque_tests::pki::Pki;
use jaque_tests::{jaque_bin, poll, Jaque};
use serde_json::{json, Value};
use std::process::Command;

/// `jaque ARGS`: (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    cli_env(args, &[])
}

fn cli_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(jaque_bin());
    cmd.args(args).env_remove("JAQUE_SERVER").env_remove("JAQUE_TOKEN").env_remove("JAQUE_TOKEN_FILE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("jaque runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn define(j: &Jaque, id: &str, env: &str) {
    let def = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h", "labels": {"env": env}});
    let r = j.put(&format!("/api/objects/{id}"), &def);
    assert_eq!(r.status, 200, "{}", r.text());
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array().expect("an array").iter().map(|o| o["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn reads_and_actions_by_id_and_selector_reach_the_log_with_their_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let j = Jaque::start("ui", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store]);
    j.wait_ready();
    let server = format!("http://{}", j.addr);
    let s = ["--server", server.as_str()];
    for (id, env) in
        [("api-1", "prod"), ("api-2", "prod"), ("db-1", "prod"), ("web-1", "staging"), ("web-2", "staging")]
    {
        define(&j, id, env);
    }

    // Reads: as the API says, JSON as it answered, a table with a header.
    let (code, out, err) = cli(&[&s[..], &["get", "objects", "-o", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids(&serde_json::from_str(&out).unwrap()), ["api-1", "api-2", "db-1", "web-1", "web-2"]);
    let (code, out, _) = cli(&[&s[..], &["get", "objects", "-l", "env=prod,!team", "-o", "json"]].concat());
    assert_eq!(
        (code, ids(&serde_json::from_str(&out).unwrap())),
        (0, vec!["api-1".into(), "api-2".into(), "db-1".into()])
    );
    let (code, out, _) = cli(&[&s[..], &["get", "objects", "-o", "wide"]].concat());
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("LABELS"), "{out}");
    assert!(lines.len() == 6 && lines[4].starts_with("web-1") && lines[4].contains("env=staging"), "{out}");
    let (code, out, _) = cli(&[&s[..], &["get", "object", "db-1", "-o", "json"]].concat());
    assert_eq!((code, serde_json::from_str::<Value>(&out).unwrap()["id"].clone()), (0, json!("db-1")));

    // Actions by selector: exactly the objects it picks, as the API then shows them.
    let (code, out, err) = cli(&[&s[..], &["pause", "-l", "env=prod"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let paused = |j: &Jaque| -> Vec<String> {
        let all = j.get("/api/objects").json();
        all.as_array()
            .unwrap()
            .iter()
            .filter(|o| o["paused"] == true)
            .map(|o| o["id"].as_str().unwrap().into())
            .collect()
    };
    assert_eq!(paused(&j), ["api-1", "api-2", "db-1"]);
    assert_eq!(cli(&[&s[..], &["resume", "api-1"]].concat()).0, 0);
    assert_eq!(paused(&j), ["api-2", "db-1"]);
    assert_eq!(cli(&[&s[..], &["check", "web-1", "web-2"]].concat()).0, 0);
    let (code, out, _) = cli(&[&s[..], &["pause", "-l", "env=nowhere"]].concat());
    assert_eq!((code, out.trim()), (0, "no object matches \"env=nowhere\""));

    // A delete of one that exists and one that does not: the first is done, the second said, exit 1.
    let (code, out, err) = cli(&[&s[..], &["delete", "web-2", "missing"]].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("web-2: delete: done") && err.contains("missing: delete: 404"), "{out}{err}");
    assert_eq!(ids(&j.get("/api/objects").json()), ["api-1", "api-2", "db-1", "web-1"]);
    let (code, _, err) = cli(&[&s[..], &["get", "object", "missing"]].concat());
    assert_eq!(code, 1);
    assert!(err.contains("no object missing"), "{err}");

    // History, from the sink's store once the check of web-1 made a transition.
    poll("web-1's history", || {
        let (code, out, _) = cli(&[&s[..], &["history", "web-1", "-o", "json"]].concat());
        let history = serde_json::from_str::<Value>(&out).ok()?;
        (code == 0 && history["events"].as_array()?.iter().any(|e| e["type"] == "transition")).then_some(())
    });
    let (code, out, _) = cli(&[&s[..], &["history", "web-1"]].concat());
    assert!(code == 0 && out.starts_with("SEQ") && out.contains("pending -> critical"), "{out}");
    let (code, out, _) = cli(&[&s[..], &["cluster"]].concat());
    assert!(code == 0 && out.contains("ROLE") && out.contains("engine"), "{out}");

    // The command line wrong: 2, nothing sent; the server unreachable: 3.
    let (code, _, err) = cli(&[&s[..], &["get", "objects", "-l", "env in ("]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("position 8"), "{err}");
    assert_eq!(cli(&[&s[..], &["pause"]].concat()).0, 2);
    assert_eq!(cli(&[&s[..], &["pause", "a", "-l", "env=prod"]].concat()).0, 2);
    assert_eq!(cli(&["get", "objects", "--server", "ftp://x"]).0, 2);
    assert_eq!(cli(&["get", "objects", "--server", "http://127.0.0.1:1"]).0, 3);
    // JAQUE_SERVER names the server too.
    assert_eq!(cli_env(&["get", "objects"], &[("JAQUE_SERVER", &server)]).0, 0);
    let (code, out, _) = cli(&["completion", "bash"]);
    assert!(code == 0 && out.contains("_jaque"), "{out}");
}

#[test]
fn over_https_with_a_token_and_the_authority_named_by_ca() {
    let pki = Pki::new("jaque cli CA");
    let (cert, key) = pki.issue("ui", "127.0.0.1");
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let args = ["-target", "engine,worker,ui", "-queue", "memory", "-tls-cert", cert, "-tls-key", key];
    let j = Jaque::start("tls", &[&args[..], &["-read-token", "r3ad", "-write-token", "wr1te"]].concat());
    let server = format!("https://{}", j.addr);
    let ca = pki.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let token_file = pki.path("token");
    std::fs::write(&token_file, "wr1te\n").unwrap();
    let with = |extra: &[&str]| cli(&[&["--server", server.as_str(), "--ca", ca], extra].concat());
    poll("the ui over HTTPS", || (with(&["--token", "r3ad", "get", "objects"]).0 == 0).then_some(()));

    // No token, or a read token for a write: refused, 3.
    let (code, _, err) = with(&["get", "objects"]);
    assert_eq!(code, 3);
    assert!(err.contains("refused the token"), "{err}");
    // An object to act on, put over HTTPS with the write token.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
        let client = reqwest::Client::builder().add_root_certificate(ca).build().unwrap();
        let def = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"});
        let put = client.put(format!("{server}/api/objects/x")).bearer_auth("wr1te");
        let r = put.header("content-type", "application/json").body(def.to_string()).send().await.unwrap();
        r.status().as_u16()
    });
    assert_eq!(status, 200);
    let paused = || {
        let (code, out, err) =
            with(&["--token-file", token_file.to_str().unwrap(), "get", "object", "x", "-o", "json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["paused"] == true
    };
    assert!(!paused());
    // A read token for a write: refused, 3, nothing done; the write token from the environment: done.
    assert_eq!(with(&["--token", "r3ad", "pause", "x"]).0, 3);
    assert!(!paused());
    let (code, _, err) = cli_env(&["--server", server.as_str(), "--ca", ca, "pause", "x"], &[("JAQUE_TOKEN", "wr1te")]);
    assert_eq!(code, 0, "{err}");
    assert!(paused());
    // Without the authority the server's certificate is not trusted: 3, saying why.
    let (code, _, err) = cli(&["--server", server.as_str(), "--token", "r3ad", "get", "objects"]);
    assert_eq!(code, 3);
    assert!(err.to_lowercase().contains("certificate"), "{err}");
}
