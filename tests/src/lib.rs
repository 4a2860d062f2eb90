//! Helpers for integration tests against real processes: a nats-server on a free loopback port with
//! JetStream in a temp dir, a PostgreSQL server likewise (`postgres`), `jaque` processes, a tiny HTTP client,
//! an HTTP target to check, and polling with a bounded deadline. Every process is started here, killed by its
//! own PID on drop, and nothing else.

pub mod browser;
pub mod checker;
pub mod loopback_probes;
pub mod nats_cluster;
pub mod pki;
pub mod postgres;
pub mod proxy;
pub mod sink_store;
pub mod webhook;

pub use postgres::Postgres;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long any one condition may take to become true before the test fails. Generous: a bound on a hang,
/// not a performance claim.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The workspace's target directory for the profile the tests were built with, from the test executable's
/// path (`target/<profile>/deps/<test>-<hash>`).
/// A binary of this crate (the benchmark) lives in `target/<profile>` itself.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let dir = exe.parent().expect("the executable is in a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>/deps").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The `jaque` binary of the same profile as the tests.
pub fn jaque_bin() -> PathBuf {
    let dir = profile_dir();
    let bin = dir.join("jaque");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build --profile {} -p jaque` (scripts/test.sh does)",
        bin.display(),
        dir.file_name().and_then(|s| s.to_str()).unwrap_or("<profile>")
    );
    bin
}

/// `JAQUE_NATS_SERVER`, else the one `scripts/install-nats.sh` puts in `.tools/bin`.
pub fn nats_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("JAQUE_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace");
    let bin = workspace.join(".tools/bin/nats-server");
    assert!(
        bin.is_file(),
        "nats-server not found: set JAQUE_NATS_SERVER or run scripts/install-nats.sh (scripts/test.sh does)"
    );
    bin
}

/// `JAQUE_SCHEMATHESIS`, else the `st` that `scripts/install-schemathesis.sh` puts in `.tools/bin`.
pub fn schemathesis_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("JAQUE_SCHEMATHESIS") {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is inside the workspace");
    let bin = workspace.join(".tools/bin/st");
    assert!(
        bin.is_file(),
        "schemathesis not found: set JAQUE_SCHEMATHESIS or run scripts/install-schemathesis.sh (scripts/test.sh does)"
    );
    bin
}

/// Polls `f` until it returns `Some`, at most `DEADLINE`; fails the test naming `what` otherwise.
pub fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "gave up waiting for {what} after {DEADLINE:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// `poll` for conditions that are awaited (a browser's page): `f` until it returns `Some`, at most `DEADLINE`.
pub async fn poll_async<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "gave up waiting for {what} after {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Output of a child process, collected by a thread, readable while it runs.
#[derive(Clone, Default)]
pub struct Output(Arc<Mutex<String>>);

impl Output {
    fn collect(&self, stream: impl Read + Send + 'static) -> thread::JoinHandle<()> {
        let out = self.clone();
        thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                let mut s = out.0.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        })
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A child process that is killed (by its PID) when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
    pub output: Output,
    readers: Vec<thread::JoinHandle<()>>,
    exited: Option<ExitStatus>,
}

impl Proc {
    fn spawn(name: &str, cmd: Command) -> Proc {
        Proc::spawn_into(name, cmd, Output::default())
    }

    /// Like `spawn`, appending to `output`: one server's runs, before and after a restart, in one text.
    fn spawn_into(name: &str, mut cmd: Command, output: Output) -> Proc {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let readers = vec![
            output.collect(child.stdout.take().expect("piped")),
            output.collect(child.stderr.take().expect("piped")),
        ];
        Proc { name: name.to_string(), child, output, readers, exited: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by PID (`TERM`, `KILL`, `STOP`, `CONT`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig} {} ({})", self.pid(), self.name);
    }

    /// Whether the process is still running (it has not exited, by itself or by a signal).
    pub fn is_running(&mut self) -> bool {
        self.exited.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to exit, at most `DEADLINE`.
    pub fn wait_exit(&mut self) -> ExitStatus {
        if let Some(s) = self.exited {
            return s;
        }
        let name = self.name.clone();
        let s = poll(&format!("{name} to exit"), || self.child.try_wait().ok().flatten());
        self.exited = Some(s);
        // Its pipes are closed now: let the readers take in the last lines.
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        s
    }

    /// Like `wait_for_line`, but `None` when the process exits first (the caller reads `output` to see why).
    pub fn wait_for_line_or_exit(&mut self, needle: &str) -> Option<String> {
        let name = self.name.clone();
        let output = self.output.clone();
        poll(&format!("{name} to print {needle:?}"), || {
            let found = output.text().lines().find_map(|l| l.split_once(needle).map(|(_, rest)| rest.to_string()));
            match found {
                Some(rest) => Some(Some(rest)),
                None if matches!(self.child.try_wait(), Ok(Some(_))) => {
                    // Exited: let the readers take in its last lines before the caller reads them.
                    self.wait_exit();
                    Some(None)
                }
                None => None,
            }
        })
    }

    /// Waits for a line of output containing `needle` and returns the rest of that line after it.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        let name = self.name.clone();
        let output = self.output.clone();
        poll(&format!("{name} to print {needle:?}"), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{name} exited ({status}) before printing {needle:?}; its output:\n{}", output.text());
            }
            let text = output.text();
            text.lines().find_map(|l| l.split_once(needle).map(|(_, rest)| rest.to_string()))
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if thread::panicking() {
            eprintln!("---- output of {} ----\n{}", self.name, self.output.text());
        }
    }
}

/// A nats-server with JetStream on a free 127.0.0.1 port, its store in a temp dir.
pub struct Nats {
    pub proc: Proc,
    pub url: String,
    dir: tempfile::TempDir,
}

impl Nats {
    pub fn start() -> Nats {
        let dir = tempfile::tempdir().expect("temp dir");
        let (proc, url) = Nats::spawn(dir.path(), "-1", &[]);
        Nats { proc, url, dir }
    }

    /// A server that also takes `extra` flags (authentication, say). It is not restartable.
    pub fn start_with(extra: &[&str]) -> Nats {
        let dir = tempfile::tempdir().expect("temp dir");
        let (proc, url) = Nats::spawn(dir.path(), "-1", extra);
        Nats { proc, url, dir }
    }

    fn spawn(dir: &Path, port: &str, extra: &[&str]) -> (Proc, String) {
        let mut cmd = Command::new(nats_server_bin());
        cmd.args(["-a", "127.0.0.1", "-p", port, "-js", "-sd"]).arg(dir).args(extra);
        let mut proc = Proc::spawn("nats-server", cmd);
        let addr = proc.wait_for_line("Listening for client connections on ");
        proc.wait_for_line("Server is ready");
        (proc, format!("nats://{}", addr.trim()))
    }

    /// The port the server listens on.
    pub fn port(&self) -> &str {
        self.url.rsplit(':').next().unwrap_or_default()
    }

    /// Stops the server (SIGTERM, waits for it) and starts it again on the same port with the same store:
    /// every client must reconnect by itself.
    pub fn restart(&mut self) {
        self.stop("TERM");
        self.start_again();
    }

    /// Stops the server with `sig` (`TERM`: a clean shutdown; `KILL`: no goodbye to anyone) and waits until it
    /// has exited. `start_again` brings it back.
    pub fn stop(&mut self, sig: &str) {
        self.proc.signal(sig);
        self.proc.wait_exit();
    }

    /// Starts the stopped server again on the same port with the same store.
    pub fn start_again(&mut self) {
        let port = self.port().to_string();
        let (proc, url) = Nats::spawn(self.dir.path(), &port, &[]);
        assert_eq!(url, self.url, "restarted on the same address");
        self.proc = proc;
    }
}

/// A `jaque` process listening on a free 127.0.0.1 port.
pub struct Jaque {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Jaque {
    /// Starts `jaque` with `args` plus `-listen 127.0.0.1:0`, and waits until it listens.
    pub fn start(name: &str, args: &[&str]) -> Jaque {
        Jaque::start_env(name, args, &[])
    }

    pub fn start_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Jaque {
        Jaque::start_bin(name, &jaque_bin(), args, env)
    }

    /// Like `start_env`, with another `jaque` binary (a previous release's, for the upgrade test).
    pub fn start_bin(name: &str, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Jaque {
        Jaque::try_start_bin(name, bin, args, env)
            .unwrap_or_else(|p| panic!("{name} exited before it listened; its output:\n{}", p.output.text()))
    }

    /// Like `start_bin`, but the process (exited) when it exits before it listens, so a test can read why.
    pub fn try_start_bin(name: &str, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Jaque, Proc> {
        let mut cmd = Command::new(bin);
        cmd.args(args).args(["-listen", "127.0.0.1:0"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut proc = Proc::spawn(name, cmd);
        let Some(line) = proc.wait_for_line_or_exit("listening addr=") else { return Err(proc) };
        let addr = line.split_whitespace().next().unwrap_or_default().parse().expect("listening addr= is an address");
        Ok(Jaque { proc, addr })
    }

    pub fn get(&self, path: &str) -> Response {
        http(self.addr, "GET", path, &[], None)
    }

    pub fn put(&self, path: &str, body: &serde_json::Value) -> Response {
        http(self.addr, "PUT", path, &[], Some(body.to_string().as_bytes()))
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Response {
        http(self.addr, method, path, headers, body)
    }

    /// Waits until `/healthz` answers 200.
    pub fn wait_ready(&self) {
        poll(&format!("{} to be ready", self.proc.name), || (self.get("/healthz").status == 200).then_some(()));
    }

    /// The engines in the epoch in force, as this process (a ui, or an engine serving the API) reads the log.
    pub fn epoch_members(&self) -> std::collections::BTreeSet<String> {
        self.get("/api/cluster").json()["buckets"][0]["epoch_members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(String::from))
            .collect()
    }

    /// Waits until the epoch in force lists exactly the engines `ids`.
    pub fn wait_epoch(&self, ids: &[&str]) {
        let want: std::collections::BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
        poll(&format!("an epoch of exactly {want:?}"), || (self.epoch_members() == want).then_some(()));
    }

    /// A sample's value from `/metrics`, e.g. `metric("jaque_engine_commands_forwarded_total{outcome=\"sent\"}")`.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        let text = self.get("/metrics").text();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.rsplit_once(' ').filter(|(name, _)| *name == sample).and_then(|(_, v)| v.parse().ok()))
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; the response is read to the end. A connection error is
/// status 0, so a poll can wait through a process that is not up yet.
pub fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Response {
    let fail = |_| Response { status: 0, headers: vec![], body: vec![] };
    let mut stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let body = body.unwrap_or_default();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if let Err(e) = stream.write_all(req.as_bytes()).and_then(|_| stream.write_all(body)) {
        return fail(e);
    }
    let mut raw = Vec::new();
    if let Err(e) = stream.read_to_end(&mut raw) {
        return fail(e);
    }
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Response { status: 0, headers: vec![], body: raw };
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers =
        lines.filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))).collect();
    Response { status, headers, body: raw[split + 4..].to_vec() }
}

/// An HTTP server to point http checks at: answers 200 to everything until stopped; then the port refuses.
pub struct Target {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Target {
    pub fn start() -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a target port");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
            // Dropping the listener closes the port: checks now get "connection refused".
        });
        Target { addr, stop, thread: Some(thread) }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `jaque` with `args` expecting a refusal: it must exit non-zero by itself. Returns its stderr+stdout.
pub fn jaque_refuses(args: &[&str]) -> String {
    let (status, text) = run_to_exit(args);
    assert!(!status.success(), "jaque {args:?} should have been refused, exited {status}; output:\n{text}");
    text
}

/// Runs `jaque` with `args` expecting a configuration refusal: exit code 2, before anything starts.
pub fn jaque_refuses_config(args: &[&str]) -> String {
    let (status, text) = run_to_exit(args);
    assert_eq!(
        status.code(),
        Some(2),
        "jaque {args:?} should have been refused with exit 2, exited {status}; output:\n{text}"
    );
    assert!(!text.contains("listening"), "nothing may start: {text}");
    text
}

fn run_to_exit(args: &[&str]) -> (ExitStatus, String) {
    let mut cmd = Command::new(jaque_bin());
    cmd.args(args);
    let mut proc = Proc::spawn("jaque (refused)", cmd);
    let status = proc.wait_exit();
    (status, proc.output.text())
}
