//! Exec plugins (issue 15, point 4) against the shipped binary: a plugin sees none of the worker's environment
//! but the few variables the README names (not its tokens, not its NATS password), a plugin that writes hundreds
//! of megabytes costs the worker 64 KiB of them, a plugin file others could change is not run, and a
//! `-plugin-dir` others could change is refused before anything starts.

use jaque_tests::{jaque_refuses_config, poll, Jaque};
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// What the worker holds that no plugin may see.
const SECRETS: [(&str, &str); 5] = [
    ("JAQUE_WRITE_TOKEN", "write-token-7f3a9c"),
    ("JAQUE_NATS_USER", "nats-user-5b2e71"),
    ("JAQUE_NATS_PASSWORD", "nats-password-c81d04"),
    ("JAQUE_NATS_TOKEN", "nats-token-e93b56"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-2a6f18"),
];

/// 256 MiB, in one line.
const FLOOD_BYTES: u64 = 256 * 1024 * 1024;

fn plugin(dir: &Path, name: &str, script: &str, mode: u32) {
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The most memory the process has held at once (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
    kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

#[test]
fn a_plugin_gets_a_minimal_environment_and_a_bounded_read_of_its_output() {
    let plugins = tempfile::tempdir().unwrap();
    let dir = plugins.path();
    plugin(dir, "env", "#!/bin/sh\necho \"ENV $(env | sort | tr '\\n' ' ')\"\n", 0o755);
    plugin(dir, "flood", &format!("#!/bin/sh\nhead -c {FLOOD_BYTES} /dev/zero | tr '\\0' x\n"), 0o755);
    plugin(dir, "loose", "#!/bin/sh\necho OK\n", 0o757);
    let mut env: Vec<(&str, &str)> = SECRETS.to_vec();
    env.push(("LANG", "C.UTF-8"));
    let args = ["-target", "engine,worker,ui", "-queue", "memory", "-plugin-dir", dir.to_str().unwrap()];
    let j = Jaque::start_env("worker", &args, &env);
    j.wait_ready();
    let token = format!("Bearer {}", SECRETS[0].1);
    for name in ["env", "flood", "loose"] {
        let body = json!({"probe": {"type": "exec", "plugin": name}, "interval": "1h", "timeout": "60s"});
        let r = j.request(
            "PUT",
            &format!("/api/objects/{name}"),
            &[("Authorization", &token)],
            Some(body.to_string().as_bytes()),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let checked = |name: &str| -> Option<Value> {
        let o = j.get(&format!("/api/objects/{name}")).json();
        (o["state"] != "pending").then_some(o)
    };

    let env = poll("the env plugin checked", || checked("env"));
    assert_eq!(env["state"], "ok", "{env}");
    let output = env["last_transition"]["output"].as_str().unwrap();
    assert!(output.starts_with("ENV ") && output.contains("PATH=") && output.contains("LANG=C.UTF-8"), "{output}");
    for (name, value) in SECRETS {
        assert!(!output.contains(name) && !output.contains(value), "the plugin saw {name}: {output}");
    }
    assert!(!output.contains("JAQUE_"), "{output}");

    let flood = poll("the flood plugin checked", || checked("flood"));
    assert_eq!(flood["state"], "ok", "{flood}");
    let output = flood["last_transition"]["output"].as_str().unwrap();
    let discarded = FLOOD_BYTES - 64 * 1024;
    assert!(output.starts_with("xxxx"), "{output}");
    assert!(output.ends_with(&format!("[output cut: {discarded} bytes past the first 64 KiB discarded]")), "{output}");
    assert_eq!(j.metric("jaque_worker_plugin_output_discarded_bytes_total"), Some(discarded as f64));
    let peak = peak_rss(j.proc.pid());
    assert!(peak < FLOOD_BYTES / 2, "the worker held {peak} bytes at its peak while a plugin wrote {FLOOD_BYTES}");

    let loose = poll("the loose plugin looked at", || checked("loose"));
    assert_eq!(loose["state"], "unknown", "{loose}");
    let output = loose["last_transition"]["output"].as_str().unwrap();
    assert!(output.contains("can be written by anyone") && output.contains("not run"), "{output}");
}

#[test]
fn a_plugin_dir_others_could_change_is_refused_before_start() {
    let plugins = tempfile::tempdir().unwrap();
    let dir = plugins.path();
    let path = dir.to_str().unwrap();
    let args = ["-target", "engine,worker", "-queue", "memory", "-plugin-dir", path];
    for (mode, who) in [(0o777, "anyone"), (0o1777, "anyone"), (0o775, "its group")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = jaque_refuses_config(&args);
        assert!(out.contains(&format!("-plugin-dir: {path} can be written by {who}")), "{out}");
        assert!(out.contains(&format!("chmod 755 {path}")), "the fix is named: {out}");
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Owned by another user: only root can make that here.
    if std::fs::metadata(dir).unwrap().uid() == 0 {
        std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
        let out = jaque_refuses_config(&args);
        assert!(out.contains("is owned by uid 65534, neither root nor this worker's user"), "{out}");
        assert!(out.contains(&format!("chown root: {path}")), "{out}");
    }
}
