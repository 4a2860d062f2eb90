//! Point 2 of the shell issue: a configuration that cannot work is refused with a clear error, a non-zero
//! exit, and nothing started.

use jaque_tests::{jaque_bin, jaque_refuses, jaque_refuses_config, Jaque};

#[test]
fn engine_or_worker_without_queue_is_refused() {
    for target in ["engine", "worker", "engine,ui"] {
        let out = jaque_refuses(&["-target", target]);
        assert!(out.contains("needs -queue"), "{out}");
        assert!(!out.contains("listening"), "nothing may start: {out}");
    }
}

#[test]
fn memory_queue_with_engine_and_worker_apart_is_refused() {
    let out = jaque_refuses(&["-target", "engine", "-queue", "memory"]);
    assert!(out.contains("-queue memory only works when engine and worker run in the same process"), "{out}");
    let out = jaque_refuses(&["-target", "worker,ui", "-queue", "memory"]);
    assert!(out.contains("same process"), "{out}");
}

#[test]
fn malformed_urls_and_durations_are_refused() {
    let out = jaque_refuses(&["-target", "engine,worker", "-queue", "nats:/127.0.0.1:4222"]);
    assert!(out.contains("-queue: expected memory or nats://host:port"), "{out}");
    let out = jaque_refuses(&["-target", "ui", "-coordination", "nats://127.0.0.1"]);
    assert!(out.contains("-coordination: expected memory or nats://host:port"), "{out}");
    let out = jaque_refuses(&["-target", "ui", "-heartbeat-ttl", "soon"]);
    assert!(out.contains("-heartbeat-ttl") && out.contains("not a duration"), "{out}");
}

#[test]
fn a_check_linger_off_the_millisecond_grid_or_out_of_range_or_an_empty_batch_is_refused_with_exit_2() {
    let engine = ["-target", "engine,worker", "-queue", "memory"];
    for (flag, value) in
        [("-check-linger", "250us"), ("-check-linger", "5s"), ("-check-linger", "often"), ("-check-batch", "0")]
    {
        let out = jaque_refuses_config(&[&engine[..], &[flag, value]].concat());
        assert!(out.contains(flag), "{flag} {value}: {out}");
    }
}

#[test]
fn a_ttl_nats_cannot_hold_is_refused() {
    for ttl in ["1500ms", "500ms", "0s"] {
        let out = jaque_refuses(&["-target", "ui", "-heartbeat-ttl", ttl]);
        assert!(out.contains("whole seconds"), "{ttl}: {out}");
    }
}

#[test]
fn unknown_roles_and_flags_are_refused() {
    let out = jaque_refuses(&["-target", "engine,dancer", "-queue", "memory"]);
    assert!(out.contains("unknown role \"dancer\""), "{out}");
    let out = jaque_refuses(&["-target", "ui", "-no-such-flag", "x"]);
    assert!(out.contains("no-such-flag"), "{out}");
}

#[test]
fn single_dash_double_dash_equals_and_env_spellings_all_start() {
    for args in [
        &["-target", "engine,worker,ui", "-queue", "memory"][..],
        &["--target", "engine,worker,ui", "--queue", "memory"],
        &["--target=engine,worker,ui", "-queue=memory"],
    ] {
        let j = Jaque::start("jaque", args);
        j.wait_ready();
    }
    let j = Jaque::start_env("jaque", &[], &[("JAQUE_TARGET", "engine,worker,ui"), ("JAQUE_QUEUE", "memory")]);
    j.wait_ready();
}

#[test]
fn notifier_misconfigurations_are_refused_with_exit_2() {
    let nats = ["-coordination", "nats://127.0.0.1:4222"];
    let notifier = |extra: &[&str]| {
        let mut args = vec!["-target", "notifier"];
        args.extend_from_slice(&nats);
        args.extend_from_slice(extra);
        jaque_refuses_config(&args)
    };
    let out = notifier(&[]);
    assert!(out.contains("-target notifier needs at least one -notify-webhook"), "{out}");
    let out = notifier(&["-notify-webhook", "127.0.0.1:9/hook"]);
    assert!(out.contains("-notify-webhook") && out.contains("is not"), "{out}");
    let out = notifier(&["-notify-webhook", "http://127.0.0.1:9/hook", "-notify-secret", "swordfish"]);
    assert!(out.contains("-notify-secret: expected whsec_"), "{out}");
    let out = notifier(&["-notify-webhook", "http://127.0.0.1:9/hook", "-notify-give-up", "a while"]);
    assert!(out.contains("-notify-give-up") && out.contains("not a duration"), "{out}");
    // Nothing to read: with -coordination memory the log is in an engine's process.
    let out = jaque_refuses_config(&["-target", "notifier", "-notify-webhook", "http://127.0.0.1:9/hook"]);
    assert!(out.contains("needs an engine in this same process"), "{out}");
    let out = jaque_refuses_config(&["-target", "engine,worker", "-queue", "memory", "-notify-webhook", "http://x/"]);
    assert!(out.contains("are for -target notifier"), "{out}");
}

#[test]
fn a_sink_with_no_log_to_read_or_a_malformed_store_is_refused_with_exit_2() {
    for (args, want) in [
        (&["-target", "sink"][..], "-target sink with -coordination memory has no log to read"),
        (&["-target", "ui,sink"], "no log to read"),
        (
            &["-target", "engine,worker,sink", "-queue", "memory", "-sink-store", "mysql://u:hunter2@h/db"],
            "-sink-store",
        ),
        (
            &["-target", "engine,worker,sink", "-queue", "memory", "-sink-store", "sqlite:///no/such/dir/s.db"],
            "does not exist",
        ),
        (
            &[
                "-target",
                "sink",
                "-coordination",
                "nats://127.0.0.1:4222",
                "-sink-store",
                "postgres://u:hunter2@127.0.0.1:5432/db?sslmode=maybe",
            ],
            "sslmode=maybe is not one of disable, allow, prefer, require, verify-ca, verify-full",
        ),
        (
            &[
                "-target",
                "ui",
                "-coordination",
                "nats://127.0.0.1:4222",
                "-sink-store",
                "postgres://u:hunter2@127.0.0.1:5432/db?sslrootcert=/no/ca.pem",
            ],
            "sslrootcert=/no/ca.pem: no such file",
        ),
    ] {
        let out = std::process::Command::new(jaque_bin()).args(args).output().expect("running jaque");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(want), "{args:?}: {text}");
        assert!(!text.contains("hunter2"), "the password is never shown: {text}");
        assert!(!text.contains("listening"), "nothing may start: {text}");
    }
}
