//! The deployment files of `deploy/`, checked here without a cluster or a systemd host: the NATS configuration
//! with `nats-server -t`; the systemd units with `systemd-analyze verify` (where the machine has it) and for the
//! fields the README promises; the Kubernetes manifests parsed and checked for what a clean, failover-safe
//! deployment needs. Every `JAQUE_*` variable they set must be one the binary reads.

use jaque_tests::{jaque_bin, nats_server_bin};
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

const ROLES: [&str; 5] = ["engine", "worker", "ui", "sink", "notifier"];

/// The longest a role's clean leave takes after SIGTERM, in seconds: an engine's answers and a worker's checks
/// (bounded at 10 s), a sink's last writes (5 s), a notifier's claimed sends (10 s, and 5 s of grace).
fn leave_secs(role: &str) -> i64 {
    match role {
        "sink" => 5,
        "notifier" => 15,
        _ => 13,
    }
}

fn deploy(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(deploy(rel)).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

/// Every `JAQUE_*` name in `text` is an environment variable of one of jaque's flags.
fn assert_known_variables(what: &str, text: &str) {
    let help = Command::new(jaque_bin()).arg("--help").output().expect("jaque --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let mut seen = 0;
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("JAQUE_") {
            seen += 1;
            assert!(help.contains(&format!("[env: {word}")), "{what}: {word} is not a variable jaque reads");
        }
    }
    assert!(seen > 0, "{what} sets jaque's variables");
}

#[test]
fn the_nats_cluster_configuration_is_valid() {
    let out = Command::new(nats_server_bin())
        .args(["-t", "-c"])
        .arg(deploy("nats/cluster.conf"))
        .env("NATS_SERVER_NAME", "nats-1")
        .output()
        .expect("nats-server -t");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("is valid"), "{text}");
}

#[test]
fn the_systemd_units_stop_cleanly_restart_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    for role in ROLES {
        let unit = read(&format!("systemd/jaque-{role}.service"));
        for line in
            ["Type=simple", "KillSignal=SIGTERM", "Restart=on-failure", "TimeoutStopSec=30", "NoNewPrivileges=yes"]
        {
            assert!(unit.lines().any(|l| l == line), "jaque-{role}.service: {line}");
        }
        assert!(unit.contains(&format!("ExecStart=/usr/local/bin/jaque -target {role}\n")), "jaque-{role}.service");
        let stop: i64 = unit.lines().find_map(|l| l.strip_prefix("TimeoutStopSec=")).unwrap().parse().unwrap();
        assert!(stop > leave_secs(role), "jaque-{role}.service: TimeoutStopSec={stop} is below the leave time");
        if role == "sink" {
            // The default SQLite store is a relative path: the working directory must be writable.
            assert!(unit.contains("StateDirectory=jaque-sink\nWorkingDirectory=/var/lib/jaque-sink"), "{unit}");
        }
        // systemd checks the binary exists: point it at the one built here.
        let local = unit.replace("/usr/local/bin/jaque", &jaque_bin().display().to_string());
        let path = dir.path().join(format!("jaque-{role}.service"));
        std::fs::write(&path, local).unwrap();
        match Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&path).output() {
            Ok(out) => {
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                // Warnings (an unknown key, a bad value) do not fail verify: any output is a finding.
                let findings: Vec<&str> =
                    text.lines().filter(|l| l.contains(&format!("jaque-{role}.service"))).collect();
                assert!(
                    out.status.success() && findings.is_empty(),
                    "systemd-analyze verify jaque-{role}.service:\n{text}"
                );
            }
            Err(e) => eprintln!("deploy: systemd-analyze not run ({e}); the unit's fields were checked"),
        }
    }
    assert_known_variables("systemd/example.env", &read("systemd/example.env"));
}

fn docs(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

#[test]
fn the_kubernetes_manifests_have_what_a_safe_deployment_needs() {
    for role in ROLES {
        let rel = format!("kubernetes/{role}.yaml");
        let all = docs(&rel);
        let d = all.iter().find(|d| d["kind"].as_str() == Some("Deployment")).expect("a Deployment");
        assert_eq!(d["apiVersion"].as_str(), Some("apps/v1"), "{rel}");
        let spec = &d["spec"];
        let replicas = spec["replicas"].as_i64().expect("replicas");
        if role == "engine" {
            assert_eq!(replicas, 1, "{rel}: the page's default is one engine");
        }
        let labels = &spec["template"]["metadata"]["labels"];
        let selector = &spec["selector"]["matchLabels"];
        assert_eq!(selector["app.kubernetes.io/component"].as_str(), Some(role), "{rel}");
        assert_eq!(labels["app.kubernetes.io/component"], selector["app.kubernetes.io/component"], "{rel}");
        let pod = &spec["template"]["spec"];
        // Above the leave: an engine's (a few seconds) and a worker's finishing checks (bounded at 10 s).
        let grace = pod["terminationGracePeriodSeconds"].as_i64().expect("terminationGracePeriodSeconds");
        assert!(grace > leave_secs(role), "{rel}: terminationGracePeriodSeconds {grace} is below the leave time");
        let c = &pod["containers"][0];
        let args: Vec<&str> = c["args"].as_vec().expect("args").iter().filter_map(Yaml::as_str).collect();
        let at = args.iter().position(|a| *a == "-target").expect("-target");
        assert_eq!(args.get(at + 1), Some(&role), "{rel}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"), "{rel}");
        let env: Vec<&str> = c["env"].as_vec().expect("env").iter().filter_map(|e| e["name"].as_str()).collect();
        assert_known_variables(&rel, &env.join(" "));
        if role == "engine" {
            assert!(env.contains(&"JAQUE_LOG_REPLICAS"), "{rel}: engines create the log with replicas");
        }
        if role == "sink" {
            assert!(env.contains(&"JAQUE_SINK_STORE"), "{rel}: sinks write into a real store (PostgreSQL)");
        }
        if role == "notifier" {
            assert!(env.contains(&"JAQUE_NOTIFY_WEBHOOK"), "{rel}: a notifier needs an endpoint");
            assert!(env.contains(&"JAQUE_NOTIFY_SECRET"), "{rel}: and signs what it sends");
        }
        if role == "ui" {
            let svc = all.iter().find(|d| d["kind"].as_str() == Some("Service")).expect("the ui's Service");
            assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/component"].as_str(), Some("ui"));
            assert_eq!(svc["spec"]["ports"][0]["targetPort"].as_str(), Some("http"));
        }
    }
    let secret = docs("kubernetes/secret.example.yaml");
    for role in ROLES {
        assert!(secret[0]["stringData"][format!("{role}-password").as_str()].as_str().is_some(), "{role}'s password");
    }
}
