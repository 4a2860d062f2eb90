//! Issue 15, points 1, 2 and 5: the HTTP API exposed with care. HTTPS with a certificate made at test time
//! (plain HTTP refused on that port; a certificate that does not load refused before start, exit 2); the read,
//! write and metrics tokens, from files, each 401 with `WWW-Authenticate: Bearer` and counted; and what an
//! attacker sends — heads and bodies past the limits, slow heads, 10,000 idle connections, ids with malformed
//! UTF-8 and percent-encoded `..` — while the process goes on serving everyone else with clear 4xx refusals.

use jaque_tests::pki::Pki;
use jaque_tests::{http, jaque_refuses_config, poll, Jaque, Response};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A client that trusts only the test's CA.
fn https_client(ca: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder().use_rustls_tls().tls_built_in_root_certs(false).add_root_certificate(ca).build().unwrap()
}

#[test]
fn https_is_served_with_the_given_certificate_and_plain_http_is_refused_on_that_port() {
    let pki = Pki::new("jaque test CA");
    let (cert, key) = pki.issue("ui", "127.0.0.1");
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let j =
        Jaque::start("tls", &["-target", "engine,worker,ui", "-queue", "memory", "-tls-cert", cert, "-tls-key", key]);
    let base = format!("https://{}", j.addr);
    let client = https_client(&pki.path("ca.pem"));
    let rt = rt();
    let get = |path: &str| {
        rt.block_on(async {
            let r = client.get(format!("{base}{path}")).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    poll("the ui to answer 200 over HTTPS", || (get("/healthz").0 == 200).then_some(()));
    let put = rt.block_on(async {
        let body = serde_json::json!({ "probe": { "type": "tcp", "addr": "127.0.0.1:9" }, "interval": "1m" });
        client
            .put(format!("{base}/api/objects/over-tls"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(put, 200, "a write over HTTPS");
    let (status, list) = get("/api/objects");
    assert_eq!(status, 200);
    assert!(list.contains("over-tls"), "{list}");

    // Plain HTTP on the TLS port gets no HTTP answer: the handshake fails and the connection is closed.
    let plain = http(j.addr, "GET", "/healthz", &[], None);
    assert_ne!(plain.status, 200, "plain HTTP must not be served on a TLS port: {plain:?}");
    assert!(!plain.body.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&plain.body));
    // A client that does not trust the certificate does not get through either.
    let untrusting = reqwest::Client::builder().use_rustls_tls().build().unwrap();
    assert!(rt.block_on(untrusting.get(format!("{base}/healthz")).send()).is_err());
    let (_, metrics) = get("/metrics");
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("jaque_http_connections_refused_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("jaque_http_connections_refused_total");
    assert!(refused >= 2, "the plain and the untrusting connection are counted: {refused}");
}

#[test]
fn a_certificate_that_does_not_load_is_refused_before_start() {
    let pki = Pki::new("jaque test CA");
    let (cert, key) = pki.issue("ui", "127.0.0.1");
    let (_, other_key) = pki.issue("other", "127.0.0.1");
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let base = ["-target", "engine,worker,ui", "-queue", "memory"];
    let cases: [(Vec<String>, &str); 5] = [
        (vec!["-tls-cert".into(), s(&garbage), "-tls-key".into(), s(&key)], "-tls-cert"),
        (vec!["-tls-cert".into(), s(&cert), "-tls-key".into(), s(&garbage)], "-tls-key"),
        (vec!["-tls-cert".into(), s(&cert), "-tls-key".into(), s(&other_key)], "does the key belong"),
        (vec!["-tls-cert".into(), s(&pki.path("missing.pem")), "-tls-key".into(), s(&key)], "missing.pem"),
        (vec!["-tls-cert".into(), s(&cert)], "-tls-cert and -tls-key go together"),
    ];
    for (flags, says) in cases {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(flags.iter().map(String::as_str));
        let out = jaque_refuses_config(&args);
        assert!(out.contains(says), "{flags:?} should say {says:?}: {out}");
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn read_write_and_metrics_tokens_from_files_guard_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (read, write, metrics) = ("r-4f1c9", "w-8a2e7", "m-3b6d0");
    let (rf, wf, mf) =
        (file("read", &format!("{read}\n")), file("write", &format!("{write}\n")), file("metrics", metrics));
    let j = Jaque::start(
        "tokens",
        &[
            "-target",
            "engine,worker,ui",
            "-queue",
            "memory",
            "-read-token-file",
            &rf,
            "-write-token-file",
            &wf,
            "-metrics-token-file",
            &mf,
        ],
    );
    let req = |method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>| -> Response {
        let auth = token.map(bearer);
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        j.request(method, path, &headers, body)
    };
    poll("ready, asked with the metrics token", || {
        (req("GET", "/healthz", Some(metrics), None).status == 200).then_some(())
    });
    let mut refused = 0;
    let mut expect_401 = |r: Response, what: &str| {
        assert_eq!(r.status, 401, "{what}: {}", r.text());
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{what}");
        refused += 1;
    };
    // /healthz and /metrics: the metrics token only.
    for path in ["/healthz", "/metrics"] {
        expect_401(req("GET", path, None, None), path);
        expect_401(req("GET", path, Some(read), None), path);
    }
    // Reads: the read or the write token; nothing else, not a prefix, not another scheme.
    for path in ["/api/objects", "/api/summary", "/api/cluster", "/api/objects/none", "/api/openapi.json"] {
        expect_401(req("GET", path, None, None), path);
        expect_401(req("GET", path, Some(metrics), None), path);
        expect_401(req("GET", path, Some(&read[..4]), None), path);
        let basic = j.request("GET", path, &[("Authorization", &format!("Basic {read}"))], None);
        expect_401(basic, path);
        assert_ne!(req("GET", path, Some(read), None).status, 401, "{path} with the read token");
        assert_ne!(req("GET", path, Some(write), None).status, 401, "{path} with the write token");
    }
    // The status page's own files hold no data and are open: the page asks for the token and sends it with its
    // reads (tests/tests/status_page.rs).
    for path in ["/", "/assets/page.js", "/assets/page.css"] {
        assert_eq!(req("GET", path, None, None).status, 200, "{path}");
    }
    // Writes: the write token only.
    let body = serde_json::json!({ "probe": { "type": "tcp", "addr": "127.0.0.1:9" }, "interval": "1m" }).to_string();
    expect_401(req("PUT", "/api/objects/guarded", Some(read), Some(body.as_bytes())), "a write with the read token");
    expect_401(req("PUT", "/api/objects/guarded", None, Some(body.as_bytes())), "a write without a token");
    assert_eq!(req("PUT", "/api/objects/guarded", Some(write), Some(body.as_bytes())).status, 200);
    let counted = req("GET", "/metrics", Some(metrics), None).text();
    let counted: u64 = counted
        .lines()
        .find_map(|l| l.strip_prefix("jaque_http_unauthorized_total "))
        .and_then(|v| v.parse().ok())
        .expect("jaque_http_unauthorized_total");
    assert_eq!(counted, refused, "every 401 is counted");
    // The tokens came from files: none is on the command line for `ps` to show.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", j.proc.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    for t in [read, write, metrics] {
        assert!(!cmdline.contains(t), "{t} in {cmdline}");
    }
    // A token given twice, or an empty file, is refused before start.
    let out = jaque_refuses_config(&["-target", "ui", "-write-token", "x", "-write-token-file", &wf]);
    assert!(out.contains("give one of them"), "{out}");
    let empty = file("empty", "\n");
    let out = jaque_refuses_config(&["-target", "ui", "-read-token-file", &empty]);
    assert!(out.contains("one line of printable characters"), "{out}");
}

/// Sends `head` (no body) on a fresh connection and reads what comes back until the server closes.
fn raw(addr: std::net::SocketAddr, head: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let _ = s.write_all(head);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(text: &str) -> u16 {
    text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
}

#[test]
fn what_an_attacker_sends_is_refused_clearly_and_everyone_else_is_still_served() {
    let j = Jaque::start("abuse", &["-target", "engine,worker,ui", "-queue", "memory", "-write-token", "t0k"]);
    j.wait_ready();
    let addr = j.addr;
    let served = || assert_eq!(j.get("/api/summary").status, 200, "another client is served");

    // Heads past the limits: too many header fields, one enormous field.
    let mut many = String::from("GET /api/objects HTTP/1.1\r\nHost: x\r\n");
    for i in 0..200 {
        many.push_str(&format!("X-Filler-{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    let answer = raw(addr, many.as_bytes());
    assert_eq!(status_of(&answer), 431, "{answer}");
    let huge = format!("GET /api/objects HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(1 << 20));
    let answer = raw(addr, huge.as_bytes());
    assert_eq!(status_of(&answer), 431, "{}", &answer[..answer.len().min(200)]);
    served();

    // A body past the limit (2 MiB), with the right token: 413 in JSON.
    let big = vec![b' '; 3 << 20];
    let r = j.request("PUT", "/api/objects/big", &[("Authorization", "Bearer t0k")], Some(&big));
    assert_eq!(r.status, 413, "{}", r.text());
    served();

    // Ids that are not ids: malformed UTF-8, percent-encoded `..` and slashes. A clear 400 each.
    for path in ["/api/objects/%FF%FE", "/api/objects/..%2F..%2Fetc%2Fpasswd", "/api/objects/%2e%2e%2f%2e%2e"] {
        let r = j.get(path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.json().get("reason").is_some(), "{path}: {}", r.text());
        let r = j.request("DELETE", path, &[("Authorization", "Bearer t0k")], None);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
    }
    // Through a traversal-looking path nothing but the API answers: no file is ever served.
    let r = j.get("/api/objects/..%2F..%2F..%2Fproc%2Fself%2Fenviron/history");
    assert!((400..500).contains(&r.status), "{}", r.text());
    assert!(!r.text().contains("PATH="), "{}", r.text());

    // Slow heads (slowloris): connections that send part of a head and never finish it are closed by the
    // server, while others are served meanwhile.
    let slow: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /api/objects HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    served();
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut out = Vec::new();
        let read = s.read_to_end(&mut out);
        assert!(read.is_ok(), "the server closes a head that never ends (not the client's timeout): {read:?}");
    }
    served();

    // 10,000 connections opened at once and left idle: others are still served, and the process's memory
    // stays bounded (an idle connection costs a few KiB; the bound on connections bounds the total).
    let before = rss_kib(j.proc.pid());
    let idle: Vec<TcpStream> = (0..10_000).map(|_| TcpStream::connect(addr).unwrap()).collect();
    served();
    let r = j.request(
        "PUT",
        "/api/objects/during-flood",
        &[("Authorization", "Bearer t0k")],
        Some(
            serde_json::json!({ "probe": { "type": "tcp", "addr": "127.0.0.1:9" }, "interval": "1m" })
                .to_string()
                .as_bytes(),
        ),
    );
    assert_eq!(r.status, 200, "a write during the flood: {}", r.text());
    let during = rss_kib(j.proc.pid());
    eprintln!("resident memory: {before} KiB before 10,000 idle connections, {during} KiB with them");
    assert!(during < before + 256 * 1024, "memory with 10,000 idle connections: {before} -> {during} KiB");
    drop(idle);
    served();
    assert!(j.get("/metrics").text().contains("jaque_http_unauthorized_total"));
}
