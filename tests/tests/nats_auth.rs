//! NATS authentication flags against a real nats-server that demands them: with the right token, user and
//! password, or TLS certificates an engine joins and takes writes; without, jaque refuses to start and says
//! which flags to check.

use jaque_tests::pki::Pki;
use jaque_tests::{jaque_refuses, Jaque, Nats};
use serde_json::json;
use std::path::Path;

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

/// jaque refuses to start (on a free port, so it cannot be the port); its output.
fn refusal(nats: &Nats, auth: &[&str]) -> String {
    let mut args = engine_args(&nats.url, auth);
    args.extend_from_slice(&["-listen", "127.0.0.1:0"]);
    jaque_refuses(&args)
}

/// jaque refuses to start, and its message is about NATS authorization.
fn refused(nats: &Nats, auth: &[&str]) -> String {
    let text = refusal(nats, auth);
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

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_mutual_tls_server_takes_jaque_with_its_certificates_and_refuses_it_without() {
    let pki = Pki::new("jaque test CA");
    let (server_cert, server_key) = pki.issue("server", "127.0.0.1");
    let (client_cert, client_key) = pki.issue("client", "jaque-engine");
    let ca = pki.path("ca.pem");
    let nats = Nats::start_with(&[
        "--tls",
        "--tlscert",
        s(&server_cert),
        "--tlskey",
        s(&server_key),
        "--tlscacert",
        s(&ca),
        "--tlsverify",
    ]);
    let tls = ["-nats-tls-ca", s(&ca), "-nats-tls-cert", s(&client_cert), "-nats-tls-key", s(&client_key)];
    works(&nats, &tls);

    // The server's certificate is not from the CA jaque is given: refused, naming the TLS flags.
    let other = Pki::new("another CA");
    let text = refusal(
        &nats,
        &["-nats-tls-ca", s(&other.path("ca.pem")), "-nats-tls-cert", s(&client_cert), "-nats-tls-key", s(&client_key)],
    );
    assert!(text.contains("-nats-tls-ca"), "says which flags to check: {text}");
    // No client certificate for a server that verifies clients: refused, naming the TLS flags.
    let text = refusal(&nats, &["-nats-tls-ca", s(&ca)]);
    assert!(text.contains("-nats-tls-cert"), "says which flags to check: {text}");
}
