//! Spread schedules (issue 34, point 8), tried as a new user would: 30 objects put by a script at once, each an
//! http probe of one small web server (Python's `http.server`, whose listen backlog is 5) every second. With
//! every object checked in the same instant each second, the connections past the backlog waited for a SYN
//! retry and timed out, and most objects sat in a problem state against a healthy server; with each object's
//! slots offset by a hash of its id, none fails.

use jaque_tests::{poll, Jaque};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `python3 -m http.server` on a free loopback port, counting the requests it answered (from its log).
struct PythonServer {
    child: Child,
    port: u16,
    served: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl PythonServer {
    fn start() -> PythonServer {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port = line.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|p| p.parse().ok());
        let port = port.unwrap_or_else(|| panic!("no port in {line:?}"));
        let served = Arc::new(AtomicU64::new(0));
        let (s, err) = (served.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if l.contains("\"GET / ") {
                    s.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        PythonServer { child, port, served, _dir: dir }
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn thirty_objects_put_at_once_against_a_small_server_are_not_probed_in_the_same_instant() {
    const OBJECTS: usize = 30;
    let server = PythonServer::start();
    let j = Jaque::start("spread", &["-target", "engine,worker,ui", "-queue", "memory"]);
    j.wait_ready();
    let body = json!({
        "probe": {"type": "http", "url": format!("http://127.0.0.1:{}/", server.port)},
        "interval": "1s",
        "timeout": "500ms",
    });
    for i in 0..OBJECTS {
        let r = j.put(&format!("/api/objects/web-{i}"), &body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Ten rounds of checks.
    poll("ten checks of every object answered", || {
        (server.served.load(Ordering::SeqCst) >= 10 * OBJECTS as u64).then_some(())
    });
    let summary = j.get("/api/summary").json();
    assert_eq!(summary["states"]["ok"], OBJECTS as u64, "{summary}");
    // Not one failed probe: no soft state either (a failure would be one, and its end another).
    assert_eq!(j.metric("jaque_engine_soft_written_total"), Some(0.0));
    assert_eq!(j.metric("jaque_engine_transitions_written_total"), Some(OBJECTS as f64), "each its first result");
}
