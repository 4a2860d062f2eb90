//! NATS authentication flags against a real nats-server that demands them: with the right token or user and
//! password an engine joins and takes writes; without, jaque refuses to start and says which flags to check.

use jaque_tests::{jaque_refuses, Jaque, Nats};
use serde_json::json;

fn engine_args<'a>(url: &'a str, auth: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["-target", "engine,worker,ui", "-queue", url, "-coordination", url, "-heartbeat-ttl", "3s"];
    args.extend_from_slice(auth);
    args
}

fn works(nats: &Nats, auth: &[&str]) {
    let j = Jaque::start("engine", &engine_args(&nats.url, auth));
    j.wait_ready();
    let r = j.put("/api/objects/web", &json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"}));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// jaque refuses to start, and its message is about NATS authorization (a free port, so it cannot be the port).
fn refused(nats: &Nats, auth: &[&str]) -> String {
    let mut args = engine_args(&nats.url, auth);
    args.extend_from_slice(&["-listen", "127.0.0.1:0"]);
    let text = jaque_refuses(&args);
    assert!(text.contains("authorization violation"), "says authorization failed: {text}");
    text
}

#[test]
fn a_token_server_takes_jaque_with_the_token_and_refuses_it_without() {
    let nats = Nats::start_with(&["--auth", "s3cret-token"]);
    works(&nats, &["-nats-token", "s3cret-token"]);
    let text = refused(&nats, &[]);
    assert!(text.contains("-nats-token"), "says which flags to check: {text}");
    refused(&nats, &["-nats-token", "wrong"]);
}

#[test]
fn a_user_and_password_server_takes_jaque_with_them() {
    let nats = Nats::start_with(&["--user", "jaque", "--pass", "pa55word"]);
    works(&nats, &["-nats-user", "jaque", "-nats-password", "pa55word"]);
    refused(&nats, &["-nats-user", "jaque", "-nats-password", "nope"]);
}
