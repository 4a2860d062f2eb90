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

/// Puts and deletes of `id` in the log, as the sink stored them.
fn writes_of(j: &Jaque, id: &str) -> (usize, usize) {
    let h = j.get(&format!("/api/objects/{id}/history?limit=1000")).json();
    let events = h["events"].as_array().cloned().unwrap_or_default();
    let count = |t: &str| events.iter().filter(|e| e["type"] == t).count();
    (count("put"), count("delete"))
}

fn objects_yaml(range: std::ops::Range<usize>, changed: &[usize]) -> String {
    let mut s =
        String::from("defaults:\n  - interval: 1h\n  - selector: tier=web\n    labels: {team: web}\nobjects:\n");
    for i in range {
        let tier = if i % 2 == 0 { "web" } else { "db" };
        let extra = if changed.contains(&i) { ", rev: \"2\"" } else { "" };
        s.push_str(&format!(
            "  obj-{i:04}:\n    probe: {{type: tcp, addr: \"${{TARGET}}\"}}\n    labels: {{tier: {tier}{extra}}}\n"
        ));
    }
    s
}

#[test]
fn apply_writes_only_the_differences_and_a_prune_removes_only_what_its_source_no_longer_lists() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("sink.db").display());
    let j = Jaque::start("ui", &["-target", "engine,worker,ui,sink", "-queue", "memory", "-sink-store", &store]);
    j.wait_ready();
    let server = format!("http://{}", j.addr);
    let files = dir.path().join("monitoring");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("a.yaml"), objects_yaml(0..500, &[])).unwrap();
    std::fs::write(files.join("b.yaml"), objects_yaml(500..1000, &[])).unwrap();
    let f = files.to_str().unwrap();
    let env = [("TARGET", "127.0.0.1:9")];
    let run = |args: &[&str]| cli_env(&[&["--server", server.as_str()], args].concat(), &env);

    // Another source's object and one made by hand, which no prune of "git" may touch.
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "objects:\n  theirs:\n    probe: {type: tcp, addr: \"127.0.0.1:9\"}\n    interval: 1h\n")
        .unwrap();
    assert_eq!(run(&["apply", "-f", other.to_str().unwrap(), "--source", "other"]).0, 0);
    define(&j, "by-hand", "prod");

    let (code, out, err) = run(&["diff", "-f", f, "--source", "git"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.ends_with("1000 to create, 0 to change, 0 to prune, 0 unchanged\n"), "{out}");
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("0 unchanged, 0 failed\n"), "{out}");
    let def = j.get("/api/objects/obj-0002").json()["definition"].clone();
    assert_eq!(def["interval"], "1h");
    assert_eq!(def["labels"]["team"], "web", "a defaults block picked it by its label");
    assert_eq!(def["labels"]["jaque/source"], "git");
    poll("every put stored", || (0..1000).all(|i| writes_of(&j, &format!("obj-{i:04}")).0 == 1).then_some(()));
    // Every first check done: from here the log moves only by what the client writes.
    poll("every object checked", || (j.get("/api/summary").json()["states"]["pending"] == 0).then_some(()));
    let position = || j.get("/api/summary").json()["log_position"].as_u64().unwrap();

    // Unchanged files: nothing written.
    let before = position();
    let (code, out, _) = run(&["apply", "-f", f, "--source", "git"]);
    assert!(code == 0 && out.ends_with("1000 unchanged, 0 failed\n"), "{out}");
    assert_eq!(run(&["diff", "-f", f, "--source", "git"]).0, 0);
    assert_eq!(position(), before, "an apply of unchanged files writes nothing");

    // 10 changed, 5 removed, with --prune: exactly those writes.
    let changed: Vec<usize> = (0..10).map(|k| k * 37).collect();
    std::fs::write(files.join("a.yaml"), objects_yaml(0..500, &changed)).unwrap();
    std::fs::write(files.join("b.yaml"), objects_yaml(500..995, &[])).unwrap();
    let (code, out, err) = run(&["diff", "-f", f, "--source", "git", "--prune"]);
    assert!(code == 1 && out.ends_with("0 to create, 10 to change, 5 to prune, 985 unchanged\n"), "{code} {out}{err}");
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git", "--prune"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("985 unchanged, 0 failed\n"), "{out}");
    assert_eq!(position(), before + 15, "10 puts and 5 deletes reached the log, nothing else");
    poll("the changes stored", || {
        let puts = |i: usize| writes_of(&j, &format!("obj-{i:04}"));
        (changed.iter().all(|i| puts(*i) == (2, 0)) && (995..1000).all(|i| puts(i) == (1, 1))).then_some(())
    });
    // The change reverted: the same content as the first apply wrote, written again (a new write, not taken
    // for a repeat of the first one).
    std::fs::write(files.join("a.yaml"), objects_yaml(0..500, &[])).unwrap();
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git", "--prune"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("985 unchanged, 0 failed\n"), "{out}");
    assert_eq!(position(), before + 25, "the 10 reverted");
    assert!(j.get("/api/objects/obj-0037").json()["definition"]["labels"].get("rev").is_none());
    let ids: Vec<String> =
        serde_json::from_str::<Value>(&run(&["get", "objects", "-o", "json"]).1).map(|v| ids(&v)).unwrap();
    assert_eq!(ids.len(), 997, "995 of git, theirs and by-hand");
    assert!(ids.contains(&"theirs".to_string()) && ids.contains(&"by-hand".to_string()));

    // Bad files: each its file:line, a non-zero exit, nothing sent.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let cases = [
        ("syntax.yaml", "objects: [\n", "syntax.yaml:2:1"),
        (
            "unknown.yaml",
            "objects:\n  x:\n    probe: {type: tcp, addr: \"h:1\"}\n    color: red\n",
            "unknown.yaml:4:5: unknown field",
        ),
        (
            "duration.yaml",
            "objects:\n  x:\n    probe: {type: tcp, addr: \"h:1\"}\n    interval: later\n",
            "duration.yaml:4:5: object x: interval",
        ),
        (
            "unset.yaml",
            "objects:\n  x:\n    probe: {type: tcp, addr: \"${NOPE}\"}\n",
            "unset.yaml:3:30: ${NOPE} is not set",
        ),
        (
            "dup.yaml",
            "objects:\n  obj-0001:\n    probe: {type: tcp, addr: \"h:1\"}\n",
            "dup.yaml:2:3: object obj-0001 is defined again",
        ),
    ];
    for (name, text, says) in cases {
        let p = bad.join(name);
        std::fs::write(&p, text).unwrap();
        let paths = [f, p.to_str().unwrap()];
        let (code, _, err) = run(&["apply", "-f", paths[0], "-f", paths[1], "--source", "git"]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        std::fs::remove_file(&p).unwrap();
    }
    assert_eq!(position(), before + 25, "nothing sent for a bad file");
    let (code, _, err) = run(&["apply", "-f", f, "--source", "not a label value"]);
    assert!(code == 2 && err.contains("--source"), "{err}");
}

#[test]
fn get_as_yaml_is_a_file_apply_takes_back_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let j = Jaque::start("ui", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let server = format!("http://{}", j.addr);
    let run = |args: &[&str]| cli(&[&["--server", server.as_str()], args].concat());
    // Few fields given (the server shows the rest filled in), and values a YAML writer must quote to keep: a
    // number's text, a boolean's, an empty one, lines, `$` the files read as variables, a label key with `/`.
    let files = dir.path().join("objects.yaml");
    std::fs::write(
        &files,
        r#"objects:
  web-1:
    probe: {type: http, url: "http://127.0.0.1:9/health?a=b"}
    labels: {app.kubernetes.io/name: web, rev: "07", canary: "true", note: ""}
  plug-1:
    probe: {type: exec, plugin: check_nothing, args: ["--warn", "80", "true", "", "two\nlines", "$$HOME", "$${NOT_A_VAR}", "1e5", "a: b"]}
    interval: 1h
  db-1:
    probe: {type: tcp, addr: "127.0.0.1:9"}
    interval: 1h
    max_attempts: 5
"#,
    )
    .unwrap();
    let f = files.to_str().unwrap();
    let (code, _, err) = run(&["apply", "-f", f, "--source", "git"]);
    assert_eq!(code, 0, "{err}");
    poll("every object checked", || (j.get("/api/summary").json()["states"]["pending"] == 0).then_some(()));
    let position = || j.get("/api/summary").json()["log_position"].as_u64().unwrap();

    // One object: a file of it, which diff finds unchanged; edited, changed.
    let (code, one, err) = run(&["get", "object", "plug-1", "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(one.contains("objects:\n  plug-1:\n") && one.contains("\"two\\nlines\""), "{one}");
    assert!(one.contains("- $HOME\n") && one.contains("- \"$${NOT_A_VAR}\"\n"), "{one}");
    let one_file = dir.path().join("plug-1.yaml");
    std::fs::write(&one_file, &one).unwrap();
    let (code, out, err) = run(&["diff", "-f", one_file.to_str().unwrap(), "--source", "git"]);
    assert_eq!((code, out.as_str()), (0, "0 to create, 0 to change, 0 to prune, 1 unchanged\n"), "{err}");
    std::fs::write(&one_file, one.replace("interval: 1h", "interval: 2h")).unwrap();
    let (code, out, _) = run(&["diff", "-f", one_file.to_str().unwrap(), "--source", "git"]);
    assert_eq!((code, out.as_str()), (1, "~ plug-1\n0 to create, 1 to change, 0 to prune, 0 unchanged\n"));

    // Every object: applied back, nothing written; the listed definitions are those the file gave.
    let (code, all, err) = run(&["get", "objects", "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(all.contains("app.kubernetes.io/name: web\n") && all.contains("rev: \"07\"\n"), "{all}");
    assert!(all.contains("canary: \"true\"\n") && all.contains("note: \"\"\n"), "{all}");
    let all_file = dir.path().join("all.yaml");
    std::fs::write(&all_file, &all).unwrap();
    let before = position();
    let (code, out, err) = run(&["apply", "-f", all_file.to_str().unwrap(), "--source", "git"]);
    assert_eq!((code, out.as_str()), (0, "3 unchanged, 0 failed\n"), "{err}");
    assert_eq!(position(), before, "an apply of what get -o yaml wrote writes nothing");
    let args = j.get("/api/objects/plug-1").json()["definition"]["probe"]["args"].clone();
    assert_eq!(args, json!(["--warn", "80", "true", "", "two\nlines", "$HOME", "${NOT_A_VAR}", "1e5", "a: b"]));
    // The original files are still unchanged too: their label was not moved by the apply of the copy.
    assert_eq!(run(&["diff", "-f", f, "--source", "git"]).0, 0);
}

#[test]
fn silences_are_created_listed_and_expired_and_get_objects_as_json_is_always_a_list() {
    let j = Jaque::start("ui", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let server = format!("http://{}", j.addr);
    let run = |args: &[&str]| cli_env(&[&["--server", server.as_str()], args].concat(), &[("USER", "ana")]);

    // One object matches: still a list, as for any other count.
    define(&j, "solo", "solo");
    let (code, out, err) = run(&["get", "objects", "-l", "env=solo", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids(&serde_json::from_str(&out).unwrap()), ["solo"], "{out}");
    let (_, out, _) = run(&["get", "objects", "-l", "env=none", "-o", "json"]);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), json!([]));

    let create = ["silence", "create", "-l", "team=db", "--duration", "2h", "--comment", "upgrade", "--name", "db-up"];
    let (code, out, err) = run(&create);
    assert_eq!((code, out.as_str()), (0, "silence db-up: created\n"), "{err}");
    let (code, out, err) = run(&["silence", "create", "-l", "env=prod", "--duration", "30m", "--author", "bo"]);
    assert_eq!(code, 0, "{err}");
    let named = out.trim().strip_prefix("silence ").and_then(|s| s.strip_suffix(": created")).unwrap().to_string();
    assert!(named.starts_with("silence-"), "the cluster names one created without a name: {out}");
    let silences = j.get("/api/silences").json()["silences"].clone();
    let db = silences.as_array().unwrap().iter().find(|s| s["name"] == "db-up").unwrap().clone();
    assert_eq!(
        (db["author"].clone(), db["selector"].clone(), db["active"].clone()),
        (json!("ana"), json!("team=db"), json!(true))
    );
    let (code, out, _) = run(&["silence", "list"]);
    assert!(code == 0 && out.starts_with("NAME") && out.contains("db-up") && out.contains(&named), "{out}");
    let (code, out, _) = run(&["silence", "list", "-o", "json"]);
    assert_eq!((code, serde_json::from_str::<Value>(&out).unwrap()["silences"].as_array().unwrap().len()), (0, 2));

    // Expired: listed, not active; one that does not exist is said, 1; a wrong command line, 2.
    let (code, out, err) = run(&["silence", "expire", "db-up"]);
    assert_eq!((code, out.as_str()), (0, "silence db-up: expired\n"), "{err}");
    let (_, out, _) = run(&["silence", "list", "-o", "json"]);
    let listed: Value = serde_json::from_str(&out).unwrap();
    let db = listed["silences"].as_array().unwrap().iter().find(|s| s["name"] == "db-up").unwrap().clone();
    assert_eq!(db["active"], false);
    let (code, _, err) = run(&["silence", "expire", "nothing"]);
    assert!(code == 1 && err.contains("nothing: expire: 404"), "{err}");
    assert_eq!(run(&["silence", "create", "-l", "env in (", "--duration", "2h"]).0, 2);
    assert_eq!(run(&["silence", "create", "-l", "a=b", "--duration", "soon"]).0, 2);
    let no_user = cli(&["--server", server.as_str(), "silence", "create", "-l", "a=b", "--duration", "2h"]);
    assert_eq!(no_user.0, 2, "no --author and no $USER: {}", no_user.2);
    assert_eq!(cli(&["--server", "http://127.0.0.1:1", "silence", "list"]).0, 3);
    let (code, out, _) = cli(&["completion", "bash"]);
    assert!(code == 0 && out.contains("silence") && out.contains("--starts-at"), "completions include silence");
}

fn policy_yaml(window_start: &str, with_team: bool) -> String {
    let team_receiver =
        if with_team { "  git.team: {kind: webhook, url: \"https://team.example/hook\"}\n" } else { "" };
    let team_route = if with_team {
        "  - {receivers: [git.team], escalations: [{after: 30m, receivers: [git.oncall]}]}\n"
    } else {
        ""
    };
    format!(
        "receivers:\n  git.oncall: {{kind: webhook, url: \"${{HOOK}}\", secret: {{env: ONCALL_SECRET}}}}\n{team_receiver}\
         routes:\n  - {{selector: team=db, receivers: [git.oncall], repeat_interval: 4h}}\n{team_route}\
         windows:\n  git.tuesday:\n    selector: env=staging\n    schedule: {{days: [tue], start: \"{window_start}\", duration: 2h, time_zone: Europe/Berlin}}\n\
         silences:\n  git.migration: {{selector: team=db, starts_at: \"2030-02-01T22:00:00Z\", duration: 4h, author: ana}}\n"
    )
}

#[test]
fn the_policy_in_files_is_applied_once_changed_by_its_differences_and_refused_at_its_place_when_bad() {
    let dir = tempfile::tempdir().unwrap();
    let j = Jaque::start("ui", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let server = format!("http://{}", j.addr);
    let env = [("HOOK", "https://oncall.example/hook")];
    let run = |args: &[&str]| cli_env(&[&["--server", server.as_str()], args].concat(), &env);
    let position = || j.get("/api/summary").json()["log_position"].as_u64().unwrap();
    // A receiver made by hand, which no prune of a source may touch.
    let r = j.put("/api/policy/receivers/by-hand", &json!({"kind": "webhook", "url": "https://hand.example/"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let file = dir.path().join("policy.yaml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, policy_yaml("02:00", true)).unwrap();

    let (code, out, err) = run(&["diff", "-f", f, "--source", "git"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        out,
        "+ receiver git.oncall\n+ receiver git.team\n~ routes\n+ window git.tuesday\n+ silence git.migration\n\
         0 to create, 0 to change, 0 to prune, 0 unchanged\n"
            .replace("0 to create, 0 to change", "4 to create, 1 to change")
    );
    let before = position();
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(position(), before + 5, "two receivers, the routes, a window, a silence: {out}");
    let policy = j.get("/api/policy").json();
    assert_eq!(policy["routes"][0]["receivers"], json!(["git.oncall"]));
    assert_eq!(policy["routes"][1]["escalations"][0]["after"], "30m");
    assert_eq!(policy["windows"][0]["schedule"]["time_zone"], "Europe/Berlin");
    let hook = policy["receivers"].as_array().unwrap().iter().find(|r| r["name"] == "git.oncall").unwrap().clone();
    assert_eq!(hook["url"], "https://oncall.example/hook", "${{HOOK}} from the environment");
    assert_eq!(policy["silences"][0]["ends_at"], "2030-02-02T02:00:00.000Z");

    // Applied again: nothing written, and diff says so.
    let before = position();
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git"]);
    assert_eq!((code, out.as_str()), (0, "5 unchanged, 0 failed\n"), "{err}");
    assert_eq!(position(), before, "a re-apply of an unchanged policy writes nothing");
    let (code, out, _) = run(&["diff", "-f", f, "--source", "git"]);
    assert_eq!((code, out.as_str()), (0, "0 to create, 0 to change, 0 to prune, 5 unchanged\n"));

    // The window moved: that one write.
    std::fs::write(&file, policy_yaml("03:00", true)).unwrap();
    let (code, out, _) = run(&["diff", "-f", f, "--source", "git"]);
    assert_eq!((code, out.as_str()), (1, "~ window git.tuesday\n0 to create, 1 to change, 0 to prune, 4 unchanged\n"));
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git"]);
    assert!(code == 0 && out.contains("window git.tuesday: configured"), "{out}{err}");
    assert_eq!(position(), before + 1, "only the window");
    assert_eq!(j.get("/api/policy").json()["windows"][0]["schedule"]["start"], "03:00");

    // The team receiver and its route dropped, with --prune: the routes, then the receiver; by-hand stays.
    std::fs::write(&file, policy_yaml("03:00", false)).unwrap();
    let (code, out, err) = run(&["apply", "-f", f, "--source", "git", "--prune"]);
    assert!(code == 0 && out.contains("routes: configured\nreceiver git.team: pruned\n"), "{out}{err}");
    assert_eq!(position(), before + 3);
    let names: Vec<String> = j.get("/api/policy").json()["receivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["by-hand", "git.oncall"]);

    // Bad policies: each at its file:line, exit 2, nothing sent.
    let bad = [
        (
            "route.yaml",
            "routes:\n  - selector: team=db\n    receivers: [git.oncall, nobody]\n",
            "route.yaml:3:5: after this apply, the policy would break a rule: route 0: names receiver nobody",
        ),
        (
            "zone.yaml",
            "windows:\n  git.w:\n    selector: env=x\n    schedule: {start: \"02:00\", duration: 2h, time_zone: Europe/Atlantis}\n",
            "zone.yaml:4:46: window git.w: time_zone \"Europe/Atlantis\" is not a time zone",
        ),
        (
            "theirs.yaml",
            "receivers:\n  ops.pager: {kind: webhook, url: \"https://x.example/\"}\n",
            "theirs.yaml:2:3: receiver ops.pager: a name's part before its first '.' is the source",
        ),
    ];
    let before = position();
    for (name, text, says) in bad {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let (code, _, err) = run(&["apply", "-f", p.to_str().unwrap(), "--source", "git"]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
    }
    assert_eq!(position(), before, "nothing sent for a bad policy");
}
