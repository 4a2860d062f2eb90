//! The PostgreSQL harness the sink's tests stand on, exercised for real: rows written with psql survive a fast
//! restart and a SIGKILL (crash recovery), the URL's password is checked, TLS verifies against the test's CA,
//! and a hostssl-only server refuses a plain connection.

use jaque_tests::pki::Pki;
use jaque_tests::postgres::{psql_at, Postgres};
use std::time::Instant;

fn ssl_of_this_connection() -> &'static str {
    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
}

#[test]
fn a_row_survives_a_fast_restart_on_the_same_port() {
    let started = Instant::now();
    let mut pg = Postgres::start();
    eprintln!("a fresh server (initdb, start, database) in {:?}", started.elapsed());
    assert_ne!(pg.port(), 5432, "never the default port");
    let pid = pg.pid().expect("running");
    // As root the server must not be root (postgres refuses to be), but the harness's own user.
    let uid = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = uid.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().nth(1).unwrap().to_string();
    assert_ne!(uid, "0", "the postmaster runs unprivileged");

    pg.psql("CREATE TABLE events (seq bigint PRIMARY KEY, body text NOT NULL)");
    pg.psql("INSERT INTO events VALUES (1, 'up'), (2, 'down')");
    assert_eq!(pg.psql("SELECT seq, body FROM events ORDER BY seq"), "1|up\n2|down");

    let url = pg.url();
    pg.restart();
    assert_ne!(pg.pid(), Some(pid), "a new postmaster");
    assert_eq!(pg.url(), url, "the same address and password");
    assert_eq!(pg.psql("SELECT seq, body FROM events ORDER BY seq"), "1|up\n2|down");

    pg.stop();
    let refused = psql_at(&url, "SELECT 1").expect_err("a stopped server takes no connections");
    assert!(refused.contains("refused"), "{refused}");
    pg.start_again();
    assert_eq!(pg.psql("SELECT count(*) FROM events"), "2");
}

#[test]
fn a_killed_server_recovers_its_committed_rows_when_started_again() {
    let mut pg = Postgres::start();
    pg.psql("CREATE TABLE events (seq bigint PRIMARY KEY)");
    pg.psql("INSERT INTO events SELECT generate_series(1, 1000)");
    pg.kill();
    let refused = psql_at(&pg.url(), "SELECT 1").expect_err("a killed server takes no connections");
    assert!(refused.contains("refused"), "{refused}");

    pg.start_again();
    assert!(pg.log().contains("automatic recovery in progress"), "it was a crash, not a shutdown:\n{}", pg.log());
    assert_eq!(pg.psql("SELECT count(*), max(seq) FROM events"), "1000|1000");
    // And it is a working server again: it takes writes.
    pg.psql("INSERT INTO events VALUES (1001)");
    assert_eq!(pg.psql("SELECT count(*) FROM events"), "1001");
}

#[test]
fn a_wrong_password_in_the_url_is_refused() {
    let pg = Postgres::start();
    let wrong = pg.url().replace(pg.password(), "not-the-password");
    let refused = psql_at(&wrong, "SELECT 1").expect_err("a wrong password is refused");
    assert!(refused.contains("password authentication failed for user \"jaque\""), "{refused}");
    let without = pg.url().replace(&format!(":{}@", pg.password()), "@");
    let refused = psql_at(&without, "SELECT 1").expect_err("no password is refused");
    assert!(refused.contains("password"), "{refused}");
    assert_eq!(pg.psql("SELECT current_user"), "jaque");
}

/// A CA, and a server certificate and key for 127.0.0.1 (the URL's host, checked by verify-full).
fn server_certificate() -> (Pki, String, String) {
    let pki = Pki::new("jaque test CA");
    let (cert, key) = pki.issue("postgres", "127.0.0.1");
    let (cert, key) = (std::fs::read_to_string(cert).unwrap(), std::fs::read_to_string(key).unwrap());
    (pki, cert, key)
}

#[test]
fn verify_full_with_the_ca_connects_over_tls_and_another_ca_is_refused() {
    let (pki, cert, key) = server_certificate();
    let pg = Postgres::start_tls(&cert, &key);
    let ca = pki.path("ca.pem");
    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), ca.display());
    assert_eq!(psql_at(&verified, ssl_of_this_connection()).unwrap(), "t");

    let other = Pki::new("another CA");
    let wrong_ca = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), other.path("ca.pem").display());
    let refused = psql_at(&wrong_ca, "SELECT 1").expect_err("a certificate from another CA is refused");
    assert!(refused.contains("certificate verify failed"), "{refused}");

    // This server still takes plain connections (pg_hba `host`): the hostssl-only test below is not vacuous.
    let plain = format!("{}?sslmode=disable", pg.url());
    assert_eq!(psql_at(&plain, ssl_of_this_connection()).unwrap(), "f");
}

#[test]
fn a_hostssl_only_server_refuses_a_plain_connection() {
    let (pki, cert, key) = server_certificate();
    let mut pg = Postgres::start_tls_only(&cert, &key);
    let plain = format!("{}?sslmode=disable", pg.url());
    let refused = psql_at(&plain, "SELECT 1").expect_err("a plain connection is refused");
    assert!(refused.contains("no pg_hba.conf entry") && refused.contains("no encryption"), "{refused}");

    let verified = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), pki.path("ca.pem").display());
    assert_eq!(psql_at(&verified, ssl_of_this_connection()).unwrap(), "t");
    // TLS and pg_hba stay as they were across a restart.
    pg.restart();
    assert_eq!(psql_at(&verified, ssl_of_this_connection()).unwrap(), "t");
    assert!(psql_at(&plain, "SELECT 1").is_err(), "still refused after a restart");
}
