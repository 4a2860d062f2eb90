//! jaque-peers: jaque beside the tools an operator would pick instead, the same work run by both on this machine
//! in one run (issue 37; `scripts/bench.sh peers` installs the peers from Debian's packages and runs this):
//!
//! V1 the same exec plugin (`check_tcp` to a local listener, `check_dummy`) on 1,000 and 5,000 objects every 10 s
//!    and every 1 s, by one Icinga 2 (checker and api features, no database) and by one jaque process
//!    (`-target engine,worker,ui -queue memory`): checks completed per second, CPU seconds per 1,000 checks (every
//!    process of each, plugins included), memory, and how late checks start against their slot;
//! V2 the same CPU beside a bare `posix_spawn` loop of the same plugin (the floor of an exec check);
//! V3 tcp and http probes by jaque's own probes beside blackbox_exporter scraped by Prometheus at the same rate
//!    over the same targets: probes per second and CPU seconds per 1,000 probes of each side;
//! V4 failover: Icinga 2's two-node HA zone with an endpoint killed beside two jaque engines (each with a
//!    worker) on a nats-server with one killed: time until every object is checked again, checks run twice and
//!    slots missed.
//!
//! CPU is read from `/proc/<pid>/stat` over each tool's whole process tree (utime + stime of every live process,
//! plus cutime + cstime: what its reaped children, the plugins, used). Memory is the proportional set size
//! (`Pss` of `/proc/<pid>/smaps_rollup`, shared pages split between the processes sharing them) summed over the
//! tool's long-lived processes. This binary makes itself a child subreaper, so processes orphaned by a kill come
//! back to it and are reaped here. Every process it starts it ends by its own PID.
//!
//! `JAQUE_PEERS_PARTS=v1,v3,v4` runs only those parts; `JAQUE_PEERS_V1_STEPS=check_tcp:1000:10,...`
//! (plugin:objects:interval in seconds) only those steps of V1 (V2 comes with them), and
//! `JAQUE_PEERS_V3_STEPS=tcp:1000:10,http:1000:1` likewise for V3. Experiments: `JAQUE_PEERS_JAQUE_ONLY=1` runs V1's
//! steps with jaque and the floor alone (`JAQUE_PEERS_JAQUE_WINDOW_SECS` sets its window; `JAQUE_CHECK_LINGER`
//! and the other `JAQUE_*` variables reach the jaque process), `JAQUE_PEERS_PACE=K:MS` paces the floor's loop. Benchmarks, not tests:
//! nothing here fails on a timing.

use jaque_tests::{http, poll, Jaque, Nats};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

const PLUGINS: &str = "/usr/lib/nagios/plugins";
/// Listening ports of each target: 127.0.0.1 to one port from one address takes an ephemeral port per connect
/// that stays in TIME_WAIT for a minute (~28,000 of them), which would cap a single port at a few hundred
/// connects a second: the rig's limit, not a tool's.
const PORTS: usize = 16;
/// V1's window: Icinga 2 counts its checks per minute (`active_service_checks_1min` of `/v1/status/CIB`).
const V1_WINDOW: Duration = Duration::from_secs(60);
/// V3's window (probes are counted at the targets).
const V3_WINDOW: Duration = Duration::from_secs(30);
/// Objects are defined (jaque) at an even pace over this long, so their slots spread evenly over any interval
/// that divides it, as Icinga 2 and Prometheus spread theirs.
const DEFINE_OVER: Duration = Duration::from_secs(10);

// ---- clocks, processes ----

fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Seconds since this program started (the common clock of the targets' request logs and the kills).
fn now_s() -> f64 {
    epoch().elapsed().as_secs_f64()
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

struct Stat {
    ppid: u32,
    /// utime + stime, in clock ticks.
    own: u64,
    /// cutime + cstime: its reaped children's.
    children: u64,
    comm: String,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (s.find('(')?, s.rfind(')')?);
    let comm = s[open + 1..close].to_string();
    let f: Vec<&str> = s.get(close + 2..)?.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
    Some(Stat { ppid: n(1) as u32, own: n(11) + n(12), children: n(13) + n(14), comm })
}

fn all_stats() -> BTreeMap<u32, Stat> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
            if let Some(st) = read_stat(pid) {
                out.insert(pid, st);
            }
        }
    }
    out
}

/// The live processes under `roots` (the roots included).
fn tree_of(roots: &[u32], stats: &BTreeMap<u32, Stat>) -> Vec<u32> {
    let mut out: Vec<u32> = roots.iter().copied().filter(|p| stats.contains_key(p)).collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(stats.iter().filter(|(_, s)| s.ppid == parent).map(|(p, _)| *p));
        i += 1;
    }
    out
}

/// CPU seconds of every process under `roots` and of their reaped children.
fn tree_cpu(roots: &[u32]) -> f64 {
    let (tool, plugins) = tree_cpu_split(roots);
    tool + plugins
}

/// `tree_cpu` in two: the tool's own processes, and the plugins (running ones, and the reaped children of
/// the tool's processes, which are plugins: none of these tools starts anything else while checking).
fn tree_cpu_split(roots: &[u32]) -> (f64, f64) {
    let stats = all_stats();
    let (mut tool, mut plugins) = (0, 0);
    for p in tree_of(roots, &stats) {
        let s = &stats[&p];
        if s.comm.starts_with("check_") {
            plugins += s.own + s.children;
        } else {
            tool += s.own;
            plugins += s.children;
        }
    }
    (tool as f64 / clk_tck(), plugins as f64 / clk_tck())
}

/// Proportional set size of the long-lived processes under `roots` (plugins running at the moment left out), MiB.
fn tree_pss_mib(roots: &[u32]) -> f64 {
    let stats = all_stats();
    let kib: u64 = tree_of(roots, &stats)
        .iter()
        .filter(|p| !stats[p].comm.starts_with("check_"))
        .map(|p| {
            let t = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).unwrap_or_default();
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum();
    kib as f64 / 1024.0
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a PID this program started (or a descendant of one); no memory involved.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Reaps `pids` that are (or have become, as orphans) this process's children, waiting up to `wait` for each.
fn reap(pids: &[u32], wait: Duration) {
    let until = Instant::now() + wait;
    for &pid in pids {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on one PID with WNOHANG; status is a local.
            let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
            if r != 0 || Instant::now() > until {
                break; // reaped, not our child (-1), or gave up
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A peer's process (Icinga 2, Prometheus, blackbox_exporter), its output in a file; ended by its PID, with
/// everything under it, on `stop` or drop.
struct Ext {
    name: String,
    pid: u32,
    /// Kept for its handles; the process is reaped with `waitpid` in `reap`, with the rest of its tree.
    _child: std::process::Child,
    log: PathBuf,
    stopped: bool,
}

impl Ext {
    fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Ext {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e} (scripts/bench.sh peers installs it)"));
        Ext { name: name.into(), pid: child.id(), _child: child, log: log.into(), stopped: false }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM to the top process, up to 15 s for it to go, then SIGKILL to whatever of its tree is left.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let tree = tree_of(&[self.pid], &all_stats());
        signal(self.pid, libc::SIGTERM);
        reap(&[self.pid], Duration::from_secs(15));
        for &p in &tree {
            signal(p, libc::SIGKILL);
        }
        reap(&tree, Duration::from_secs(5));
    }

    /// SIGKILL to every process of its tree at once: a machine that dies.
    fn kill(&mut self) {
        self.stopped = true;
        let tree = tree_of(&[self.pid], &all_stats());
        for &p in &tree {
            signal(p, libc::SIGKILL);
        }
        reap(&tree, Duration::from_secs(5));
    }
}

impl Drop for Ext {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!("---- output of {} ----\n{}", self.name, self.output());
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn version_of(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let t = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
            t.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|e| format!("{cmd}: {e}"))
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

// ---- targets: what the checks and probes go to ----

/// TCP listeners that accept and close, counting the connections.
struct TcpTargets {
    addrs: Vec<SocketAddr>,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl TcpTargets {
    fn start() -> TcpTargets {
        let (accepted, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (mut addrs, mut threads) = (Vec::new(), Vec::new());
        for _ in 0..PORTS {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(l.local_addr().unwrap());
            let (accepted, stop) = (accepted.clone(), stop.clone());
            threads.push(thread::spawn(move || {
                for c in l.incoming() {
                    drop(c);
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        TcpTargets { addrs, accepted, stop, threads }
    }

    fn count(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for TcpTargets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (a, t) in self.addrs.iter().zip(self.threads.drain(..)) {
            let _ = std::net::TcpStream::connect(a);
            let _ = t.join();
        }
    }
}

/// Every request's path and time while a V4 side runs (`None`: not logging).
type RequestLog = Arc<Mutex<Option<Vec<(String, f64)>>>>;

/// HTTP servers (keep-alive, as any web server) answering 200 "ok" to every GET, counting requests and, when
/// asked, logging each request's path and time (V4 tells which object was checked when).
struct HttpTargets {
    addrs: Vec<SocketAddr>,
    requests: Arc<AtomicU64>,
    log: RequestLog,
    _runtime: thread::JoinHandle<()>,
}

impl HttpTargets {
    fn start() -> HttpTargets {
        let requests = Arc::new(AtomicU64::new(0));
        let log: RequestLog = Arc::new(Mutex::new(None));
        let listeners: Vec<TcpListener> = (0..PORTS).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let (r, lg) = (requests.clone(), log.clone());
        let runtime = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
                    let (r, lg) = (r.clone(), lg.clone());
                    async move {
                        r.fetch_add(1, Ordering::Relaxed);
                        if let Some(v) = lg.lock().unwrap().as_mut() {
                            v.push((uri.path().to_string(), now_s()));
                        }
                        "ok"
                    }
                });
                let mut tasks = Vec::new();
                for l in listeners {
                    l.set_nonblocking(true).unwrap();
                    let l = tokio::net::TcpListener::from_std(l).unwrap();
                    let app = app.clone();
                    tasks.push(tokio::spawn(async move { axum::serve(l, app).await }));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        HttpTargets { addrs, requests, log, _runtime: runtime }
    }

    fn count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Starts logging requests afresh.
    fn record(&self) {
        *self.log.lock().unwrap() = Some(Vec::new());
    }

    /// The logged requests, by path; logging stops.
    fn take_log(&self) -> BTreeMap<String, Vec<f64>> {
        let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (p, t) in self.log.lock().unwrap().take().unwrap_or_default() {
            out.entry(p).or_default().push(t);
        }
        out
    }
}

// ---- the floor: a bare posix_spawn loop ----

/// The variables jaque's worker passes a plugin (`plugins::env`): the floor's plugin gets the same.
fn plugin_env() -> Vec<String> {
    let mut env: Vec<String> = ["PATH", "HOME", "LANG", "LC_ALL", "TZ"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect();
    if !env.iter().any(|e| e.starts_with("PATH=")) {
        env.push("PATH=/usr/local/bin:/usr/bin:/bin".into());
    }
    env
}

fn rusage_secs(who: i32) -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `jaque-peers spawn-loop SECS PLUGIN ARGS...`: runs the plugin again and again for SECS, one at a time:
/// `posix_spawn` with its standard output on a pipe (read to the end, as both tools read it), standard input and
/// error on /dev/null, then `waitpid`. Prints `runs cpu_self cpu_children wall`. A process of its own, so its
/// children's CPU (`RUSAGE_CHILDREN`) is the plugins' alone.
fn spawn_loop(args: &[String]) {
    let secs: f64 = args[0].parse().expect("seconds");
    let path = CString::new(args[1].as_str()).unwrap();
    let argv_c: Vec<CString> = args[1..].iter().map(|a| CString::new(a.as_str()).unwrap()).collect();
    let env_c: Vec<CString> = plugin_env().into_iter().map(|e| CString::new(e).unwrap()).collect();
    let mut argv: Vec<*mut libc::c_char> = argv_c.iter().map(|a| a.as_ptr() as *mut _).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut libc::c_char> = env_c.iter().map(|a| a.as_ptr() as *mut _).collect();
    envp.push(std::ptr::null_mut());
    let devnull = CString::new("/dev/null").unwrap();
    // `JAQUE_PEERS_PACE=K:MS` (an experiment, not the table's floor): K plugins started together every MS
    // milliseconds, each read and waited for after all K are started, as a worker given a dispatch does.
    let pace: Option<(usize, u64)> = std::env::var("JAQUE_PEERS_PACE")
        .ok()
        .and_then(|p| p.split_once(':').and_then(|(k, ms)| Some((k.parse().ok()?, ms.parse().ok()?))));
    let (k, tick) = pace.map_or((1, None), |(k, ms)| (k.max(1), Some(Duration::from_millis(ms))));
    let (s0, c0, start) = (rusage_secs(libc::RUSAGE_SELF), rusage_secs(libc::RUSAGE_CHILDREN), Instant::now());
    let mut runs = 0u64;
    let mut buf = [0u8; 4096];
    let mut next = start;
    while start.elapsed().as_secs_f64() < secs {
        let mut started = Vec::with_capacity(k);
        for _ in 0..k {
            // SAFETY: plain POSIX calls on descriptors and structures owned here; argv and envp are
            // NULL-terminated arrays of C strings that outlive the call.
            unsafe {
                let mut fds = [0i32; 2];
                assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
                let mut fa: libc::posix_spawn_file_actions_t = std::mem::zeroed();
                libc::posix_spawn_file_actions_init(&mut fa);
                libc::posix_spawn_file_actions_addopen(&mut fa, 0, devnull.as_ptr(), libc::O_RDONLY, 0);
                libc::posix_spawn_file_actions_adddup2(&mut fa, fds[1], 1);
                libc::posix_spawn_file_actions_addopen(&mut fa, 2, devnull.as_ptr(), libc::O_WRONLY, 0);
                let mut pid: libc::pid_t = 0;
                let r = libc::posix_spawn(&mut pid, path.as_ptr(), &fa, std::ptr::null(), argv.as_ptr(), envp.as_ptr());
                assert_eq!(r, 0, "posix_spawn {}", args[1]);
                libc::posix_spawn_file_actions_destroy(&mut fa);
                libc::close(fds[1]);
                started.push((pid, fds[0]));
            }
        }
        for (pid, fd) in started {
            // SAFETY: as above, on the pipe and the child started just now.
            unsafe {
                while libc::read(fd, buf.as_mut_ptr() as *mut _, buf.len()) > 0 {}
                libc::close(fd);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
            runs += 1;
        }
        if let Some(tick) = tick {
            next += tick;
            thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!("{runs} {} {} {wall}", rusage_secs(libc::RUSAGE_SELF) - s0, rusage_secs(libc::RUSAGE_CHILDREN) - c0);
}

/// The floor of one exec check: runs per second, CPU seconds per 1,000 runs (the loop and the plugins), and the
/// plugins' part of it.
fn spawn_floor(argv: &[String], secs: f64) -> (f64, f64, f64) {
    spawn_floor_paced(argv, secs, None)
}

/// `spawn_floor` with `pace`: K runs started together every MS milliseconds.
fn spawn_floor_paced(argv: &[String], secs: f64, pace: Option<(usize, u64)>) -> (f64, f64, f64) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.env_remove("JAQUE_PEERS_PACE");
    if let Some((k, ms)) = pace {
        cmd.env("JAQUE_PEERS_PACE", format!("{k}:{ms}"));
    }
    let out = cmd.arg("spawn-loop").arg(secs.to_string()).args(argv).output().expect("spawn-loop");
    let t = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = t.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    assert_eq!(f.len(), 4, "spawn-loop printed {t:?}, {}", String::from_utf8_lossy(&out.stderr));
    (f[0] / f[3], (f[1] + f[2]) / f[0] * 1000.0, f[2] / f[0] * 1000.0)
}

// ---- jaque ----

fn metrics(j: &Jaque) -> BTreeMap<String, f64> {
    j.get("/metrics")
        .text()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect()
}

fn worker_checks(m: &BTreeMap<String, f64>) -> f64 {
    ["ok", "warning", "critical", "unknown"]
        .iter()
        .map(|s| m.get(&format!("jaque_worker_checks_total{{state=\"{s}\"}}")).copied().unwrap_or(0.0))
        .sum()
}

/// A histogram's cumulative buckets `(le, count)` from one reading, in order of `le`.
fn buckets(m: &BTreeMap<String, f64>, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut v: Vec<(f64, f64)> = m
        .iter()
        .filter_map(|(k, c)| {
            let le = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, *c))
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Quantile `q` (seconds) of what a histogram gained between two readings, interpolated within its bucket as
/// Prometheus' `histogram_quantile` does.
fn quantile(b0: &[(f64, f64)], b1: &[(f64, f64)], q: f64) -> f64 {
    let counts: Vec<(f64, f64)> = b1.iter().zip(b0).map(|(a, b)| (a.0, a.1 - b.1)).collect();
    let mut per = Vec::new();
    let mut prev = 0.0;
    for (le, c) in &counts {
        per.push((*le, c - prev));
        prev = *c;
    }
    let total = prev;
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let (mut seen, mut lo) = (0.0, 0.0);
    for (le, c) in per {
        if seen + c >= rank && c > 0.0 {
            return if le.is_finite() { lo + (le - lo) * (rank - seen) / c } else { lo };
        }
        seen += c;
        if le.is_finite() {
            lo = le;
        }
    }
    lo
}

/// Defines `n` objects through the ui, `body(i)` each, at an even pace over `DEFINE_OVER` from 8 threads: each
/// object's slots are anchored at its definition.
fn define(j: &Jaque, n: usize, body: impl Fn(usize) -> Value + Sync) {
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let addr = j.addr;
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                let at = start + DEFINE_OVER.mul_f64(i as f64 / n as f64);
                thread::sleep(at.saturating_duration_since(Instant::now()));
                let b = body(i).to_string();
                let path = format!("/api/objects/o-{i:05}");
                let ok = (0..5).any(|_| http(addr, "PUT", &path, &[], Some(b.as_bytes())).status == 200);
                assert!(ok, "defining {path} in jaque failed");
            });
        }
    });
}

fn jaque_one_process(name: &str) -> Jaque {
    let j =
        Jaque::start(name, &["-target", "engine,worker,ui", "-queue", "memory", "-plugin-dir", PLUGINS, "-id", name]);
    j.wait_ready();
    j
}

fn duration_arg(secs: u64) -> String {
    format!("{secs}s")
}

// ---- Icinga 2 ----

/// Certificates for the Icinga 2 nodes, made with `icinga2 pki` (a CA, then a key, a CSR and a signed
/// certificate per node).
struct Pki {
    dir: PathBuf,
}

/// The constants that keep an Icinga 2 command's paths (and its user) inside `dir`: nothing under /etc, /var
/// or /run is read or written, and it runs as this (root) user instead of dropping to `nagios`.
fn icinga_defines(dir: &Path) -> Vec<String> {
    let d = dir.display();
    let mut v = vec!["-DRunAsUser=root".to_string(), "-DRunAsGroup=root".to_string()];
    for (k, sub) in [
        ("DataDir", "data"),
        ("LogDir", "log"),
        ("CacheDir", "cache"),
        ("SpoolDir", "spool"),
        ("InitRunDir", "run"),
        ("PidPath", "run/icinga2.pid"),
        ("StatePath", "data/icinga2.state"),
        ("ObjectsPath", "cache/icinga2.debug"),
        ("VarsPath", "cache/icinga2.vars"),
    ] {
        v.push(format!("-D{k}={d}/{sub}"));
    }
    for sub in ["data/certs", "log", "cache", "spool", "run"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    v
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    fn make(dir: &Path, nodes: &[&str]) -> Pki {
        let ca = dir.join("ca-home");
        let defs = icinga_defines(&ca);
        run_ok(Command::new("icinga2").args(["pki", "new-ca"]).args(&defs));
        for n in nodes {
            let (key, csr, crt) =
                (dir.join(format!("{n}.key")), dir.join(format!("{n}.csr")), dir.join(format!("{n}.crt")));
            run_ok(
                Command::new("icinga2")
                    .args(["pki", "new-cert", "--cn", n])
                    .arg("--key")
                    .arg(&key)
                    .arg("--csr")
                    .arg(&csr)
                    .args(&defs),
            );
            run_ok(
                Command::new("icinga2")
                    .args(["pki", "sign-csr"])
                    .arg("--csr")
                    .arg(&csr)
                    .arg("--cert")
                    .arg(&crt)
                    .args(&defs),
            );
        }
        Pki { dir: dir.to_path_buf() }
    }

    /// Puts the CA's certificate and `node`'s key and certificate where Icinga 2 looks for them (DataDir/certs).
    fn install(&self, node: &str, home: &Path) {
        let certs = home.join("data/certs");
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::copy(self.dir.join("ca-home/data/ca/ca.crt"), certs.join("ca.crt")).unwrap();
        for ext in ["key", "crt"] {
            std::fs::copy(self.dir.join(format!("{node}.{ext}")), certs.join(format!("{node}.{ext}"))).unwrap();
        }
    }
}

/// An Icinga 2 node: its own configuration and state under `home`, its REST API on `port`.
struct Icinga {
    ext: Ext,
    port: u16,
}

/// The configuration of one node: the checker and api features (the api for reading its figures and, in V4,
/// for the HA zone), an API user, the zone's endpoints, two check commands and `objects`.
fn icinga_config(node: &str, port: u16, zone: &[(&str, u16)], objects: &str) -> String {
    let endpoints: String =
        zone.iter().map(|(n, p)| format!("object Endpoint \"{n}\" {{ host = \"127.0.0.1\"; port = {p} }}\n")).collect();
    let names: Vec<String> = zone.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    format!(
        r#"const PluginDir = "{PLUGINS}"
const NodeName = "{node}"
const ZoneName = "master"
object CheckerComponent "checker" {{ }}
object ApiListener "api" {{
  bind_host = "127.0.0.1"
  bind_port = {port}
  accept_config = false
  accept_commands = false
}}
object ApiUser "bench" {{ password = "bench"; permissions = [ "*" ] }}
{endpoints}object Zone "master" {{ endpoints = [ {} ] }}
object CheckCommand "bench_tcp" {{ command = [ PluginDir + "/check_tcp", "-H", "127.0.0.1", "-p", "$bench_port$" ] }}
object CheckCommand "bench_dummy" {{ command = [ PluginDir + "/check_dummy", "0", "bench" ] }}
object CheckCommand "bench_http" {{ command = [ PluginDir + "/check_http", "-H", "127.0.0.1", "-p", "$bench_port$", "-u", "$bench_uri$" ] }}
{objects}"#,
        names.join(", ")
    )
}

/// `n` services on n/10 hosts (ten each; host checks off, so the services' checks are all that runs), every
/// `interval` seconds, `command` with `vars(i)` (e.g. `vars.bench_port = 1234`).
fn icinga_objects(n: usize, interval: u64, command: &str, vars: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for h in 0..n.div_ceil(10) {
        s.push_str(&format!(
            "object Host \"h-{h:04}\" {{ check_command = \"bench_dummy\"; enable_active_checks = false }}\n"
        ));
    }
    for i in 0..n {
        s.push_str(&format!(
            "object Service \"s-{}\" {{ host_name = \"h-{:04}\"; check_command = \"{command}\"; check_interval = {interval}s; retry_interval = {interval}s; {} }}\n",
            i % 10,
            i / 10,
            vars(i)
        ));
    }
    s
}

impl Icinga {
    fn start(name: &str, home: &Path, config: &str, port: u16) -> Icinga {
        let defs = icinga_defines(home);
        let conf = home.join("icinga2.conf");
        std::fs::write(&conf, config).unwrap();
        let mut cmd = Command::new("icinga2");
        cmd.arg("daemon").arg("-c").arg(&conf).args(&defs);
        let ext = Ext::spawn(name, &mut cmd, &home.join("out.log"));
        let ic = Icinga { ext, port };
        poll(&format!("{name}'s API"), || ic.api("GET", "/v1/status/CIB", None).map(|_| ()));
        ic
    }

    /// A request to its REST API (curl: the API is HTTPS with the zone's own CA); `None` until it answers JSON.
    fn api(&self, method: &str, path: &str, body: Option<&Value>) -> Option<Value> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "--max-time", "60", "-u", "bench:bench", "-H", "Accept: application/json"]);
        match body {
            Some(b) => {
                cmd.args(["-X", "POST", "-H", &format!("X-HTTP-Method-Override: {method}"), "-d", &b.to_string()])
            }
            None => cmd.args(["-X", method]),
        };
        let out = cmd.arg(format!("https://127.0.0.1:{}{path}", self.port)).output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// `active_service_checks_1min` of its CIB status: the service checks it completed over the last minute.
    fn checks_last_minute(&self) -> f64 {
        let v = self.api("GET", "/v1/status/CIB", None).expect("CIB status");
        v["results"][0]["status"]["active_service_checks_1min"].as_f64().expect("active_service_checks_1min")
    }

    /// Every service's last check result: how late it started against its slot (`execution_start -
    /// schedule_start`: Icinga 2 sets `schedule_start` to the `next_check` the check was due at), seconds.
    fn start_lateness(&self) -> Vec<f64> {
        let v =
            self.api("GET", "/v1/objects/services", Some(&json!({"attrs": ["last_check_result"]}))).expect("services");
        v["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let cr = &r["attrs"]["last_check_result"];
                Some(cr["execution_start"].as_f64()? - cr["schedule_start"].as_f64()?)
            })
            .collect()
    }
}

// ---- V1, V2: exec checks ----

#[derive(Clone, Copy)]
enum Plugin {
    Tcp,
    Dummy,
}

impl Plugin {
    fn name(self) -> &'static str {
        match self {
            Plugin::Tcp => "check_tcp",
            Plugin::Dummy => "check_dummy",
        }
    }

    /// The plugin's arguments for object `i`: the same argv under every tool and in the floor.
    fn args(self, i: usize, t: &TcpTargets) -> Vec<String> {
        match self {
            Plugin::Tcp => vec!["-H".into(), "127.0.0.1".into(), "-p".into(), t.addrs[i % PORTS].port().to_string()],
            Plugin::Dummy => vec!["0".into(), "bench".into()],
        }
    }
}

/// One tool's figures over a window.
struct Side {
    rate: f64,
    cpu_per_k: f64,
    /// The part of `cpu_per_k` the plugins used.
    plugins_per_k: f64,
    pss_mib: f64,
    late_p50_ms: f64,
    late_p99_ms: f64,
    note: String,
}

fn jaque_exec(plugin: Plugin, n: usize, interval: u64, t: &TcpTargets) -> Side {
    let j = jaque_one_process("peers");
    let timeout = duration_arg(interval.min(5));
    define(&j, n, |i| {
        json!({"probe": {"type": "exec", "plugin": plugin.name(), "args": plugin.args(i, t)},
               "interval": duration_arg(interval), "timeout": timeout})
    });
    thread::sleep(Duration::from_secs(5));
    let pid = j.proc.pid();
    let (m0, c0, a0, t0) = (metrics(&j), tree_cpu_split(&[pid]), t.count(), Instant::now());
    // A shorter window for experiments with jaque alone (Icinga 2's count needs the minute).
    let window = std::env::var("JAQUE_PEERS_JAQUE_WINDOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(V1_WINDOW, Duration::from_secs);
    eprintln!("jaque-peers: jaque window ({window:?}), pid {pid}");
    thread::sleep(window);
    let (m1, c1, a1, t1) = (metrics(&j), tree_cpu_split(&[pid]), t.count(), Instant::now());
    let pss = tree_pss_mib(&[pid]);
    let wall = (t1 - t0).as_secs_f64();
    let done = worker_checks(&m1) - worker_checks(&m0);
    let late = "jaque_engine_check_start_lateness_seconds";
    let (l0, l1) = (buckets(&m0, late), buckets(&m1, late));
    let wait = "jaque_worker_check_wait_seconds";
    let (w0, w1) = (buckets(&m0, wait), buckets(&m1, wait));
    let d = |k: &str| m1.get(k).copied().unwrap_or(0.0) - m0.get(k).copied().unwrap_or(0.0);
    let mut note = format!(
        "{:.0} skipped busy, {:.0} lost; worker's wait for a slot p99 {:.1} ms",
        d("jaque_engine_checks_skipped_busy_total"),
        d("jaque_engine_checks_lost_total"),
        quantile(&w0, &w1, 0.99) * 1000.0
    );
    if matches!(plugin, Plugin::Tcp) {
        note.push_str(&format!("; listener saw {:.0}/s", (a1 - a0) as f64 / wall));
    }
    Side {
        rate: done / wall,
        cpu_per_k: (c1.0 + c1.1 - c0.0 - c0.1) / done.max(1.0) * 1000.0,
        plugins_per_k: (c1.1 - c0.1) / done.max(1.0) * 1000.0,
        pss_mib: pss,
        late_p50_ms: quantile(&l0, &l1, 0.5) * 1000.0,
        late_p99_ms: quantile(&l0, &l1, 0.99) * 1000.0,
        note,
    }
}

fn icinga_exec(plugin: Plugin, n: usize, interval: u64, t: &TcpTargets, pki: &Pki, work: &Path) -> Side {
    let home = work.join(format!("icinga-{}-{n}-{interval}", plugin.name()));
    pki.install("bench-a", &home);
    let port = free_port();
    let command = match plugin {
        Plugin::Tcp => "bench_tcp",
        Plugin::Dummy => "bench_dummy",
    };
    let objects = icinga_objects(n, interval, command, |i| match plugin {
        Plugin::Tcp => format!("vars.bench_port = {}", t.addrs[i % PORTS].port()),
        Plugin::Dummy => String::new(),
    });
    let ic = Icinga::start("icinga2", &home, &icinga_config("bench-a", port, &[("bench-a", port)], &objects), port);
    // Its first checks are spread at random over the first interval (at most a minute); then steady.
    thread::sleep(Duration::from_secs(interval + 5));
    let pid = ic.ext.pid;
    let (c0, a0, t0) = (tree_cpu_split(&[pid]), t.count(), Instant::now());
    eprintln!("jaque-peers: icinga2 window ({V1_WINDOW:?}), pid {pid}");
    thread::sleep(V1_WINDOW);
    let (c1, a1, t1) = (tree_cpu_split(&[pid]), t.count(), Instant::now());
    let done = ic.checks_last_minute();
    let pss = tree_pss_mib(&[pid]);
    let wall = (t1 - t0).as_secs_f64();
    let mut late = ic.start_lateness();
    let mut note = format!("{} last results read", late.len());
    if matches!(plugin, Plugin::Tcp) {
        note.push_str(&format!("; listener saw {:.0}/s", (a1 - a0) as f64 / wall));
    }
    let mut ic = ic;
    ic.ext.stop();
    Side {
        rate: done / 60.0,
        cpu_per_k: (c1.0 + c1.1 - c0.0 - c0.1) / done.max(1.0) * 1000.0,
        plugins_per_k: (c1.1 - c0.1) / done.max(1.0) * 1000.0,
        pss_mib: pss,
        late_p50_ms: pct(&mut late, 0.5) * 1000.0,
        late_p99_ms: pct(&mut late, 0.99) * 1000.0,
        note,
    }
}

fn v1(pki: &Pki, work: &Path, rows: &mut Vec<String>) {
    let t = TcpTargets::start();
    let steps = std::env::var("JAQUE_PEERS_V1_STEPS").ok();
    for plugin in [Plugin::Tcp, Plugin::Dummy] {
        for (n, interval) in [(1000usize, 10u64), (5000, 10), (1000, 1), (5000, 1)] {
            let key = format!("{}:{n}:{interval}", plugin.name());
            if steps.as_ref().is_some_and(|s| !s.split(',').any(|x| x == key)) {
                continue;
            }
            eprintln!("jaque-peers: V1 {key}...");
            let argv: Vec<String> =
                std::iter::once(format!("{PLUGINS}/{}", plugin.name())).chain(plugin.args(0, &t)).collect();
            let before = spawn_floor(&argv, 3.0);
            let jq = jaque_exec(plugin, n, interval, &t);
            if std::env::var_os("JAQUE_PEERS_JAQUE_ONLY").is_some() {
                // An experiment (a profile, a flag's effect through its JAQUE_* variable): jaque and the floor.
                let after = spawn_floor(&argv, 3.0);
                println!(
                    "{key}: jaque {:.0}/s, CPU s per 1,000 {:.3} (plugins {:.3}), start p50 / p99 {:.1} / {:.1} ms, {}; floor {:.3} (plugins {:.3})",
                    jq.rate,
                    jq.cpu_per_k,
                    jq.plugins_per_k,
                    jq.late_p50_ms,
                    jq.late_p99_ms,
                    jq.note,
                    (before.1 + after.1) / 2.0,
                    (before.2 + after.2) / 2.0
                );
                continue;
            }
            // The floor before, between and after the two tools (the machine's load drifts over a step's five
            // minutes): each tool against the two slices beside its own window.
            let between = spawn_floor(&argv, 3.0);
            // The same plugin paced as jaque's engine dispatches at this rate (a batch of checks every
            // -check-linger, 50 ms, or every -check-batch, 128, due, whichever comes first), started together:
            // sparse runs cost more than back-to-back ones (cold caches, a wake-up per batch).
            let rate = n as f64 / interval as f64;
            let tick_ms = (128.0 / rate * 1000.0).min(50.0).round().max(1.0) as u64;
            let per_tick = (rate * tick_ms as f64 / 1000.0).round().max(1.0) as usize;
            let paced = spawn_floor_paced(&argv, 5.0, Some((per_tick, tick_ms)));
            let ic = icinga_exec(plugin, n, interval, &t, pki, work);
            let after = spawn_floor(&argv, 3.0);
            let floor_rate = (before.0 + between.0 + after.0) / 3.0;
            let floor_plugins = (before.2 + between.2 + after.2) / 3.0;
            let (floor_jq, floor_ic) = ((before.1 + between.1) / 2.0, (between.1 + after.1) / 2.0);
            let due = n as f64 / interval as f64;
            let what = format!("{}, {n} objects every {interval} s (due {due:.0}/s)", plugin.name());
            rows.push(format!(
                "| V1 | {what}: checks completed/s | {:.0}/s ({:.2}x due; {}) | Icinga 2: {:.0}/s ({:.2}x due; {}) | {:.2}x | |",
                jq.rate,
                jq.rate / due,
                jq.note,
                ic.rate,
                ic.rate / due,
                ic.note,
                jq.rate / ic.rate
            ));
            rows.push(format!(
                "| V1 | {what}: CPU s per 1,000 checks, every process plugins included | {:.3} | Icinga 2: {:.3} | {:.2}x | <= 0.5x |",
                jq.cpu_per_k,
                ic.cpu_per_k,
                jq.cpu_per_k / ic.cpu_per_k
            ));
            rows.push(format!(
                "| V2 | {what}: CPU s per 1,000 checks beside a bare posix_spawn loop of the same plugin (of which the plugins) | {:.3} ({:.3}); Icinga 2: {:.3} ({:.3}), {:.2}x the loop beside it | loop before / between / after the tools: {:.3} / {:.3} / {:.3} (plugins {floor_plugins:.3}), {floor_rate:.0} runs/s; paced as dispatched ({per_tick} every {tick_ms} ms): {:.3} ({:.3}) | {:.2}x the loop beside it ({:.2}x the paced loop) | <= 1.2x |",
                jq.cpu_per_k,
                jq.plugins_per_k,
                ic.cpu_per_k,
                ic.plugins_per_k,
                ic.cpu_per_k / floor_ic,
                before.1,
                between.1,
                after.1,
                paced.1,
                paced.2,
                jq.cpu_per_k / floor_jq,
                jq.cpu_per_k / paced.1
            ));
            rows.push(format!(
                "| V1 | {what}: memory (PSS of its processes) | {:.1} MiB | Icinga 2: {:.1} MiB | {:.2}x | |",
                jq.pss_mib,
                ic.pss_mib,
                jq.pss_mib / ic.pss_mib
            ));
            rows.push(format!(
                "| V1 | {what}: check start against its slot, p50 / p99 | {:.1} / {:.1} ms | Icinga 2: {:.1} / {:.1} ms | {:.1}x / {:.1}x | p99 <= 10 ms below saturation |",
                jq.late_p50_ms,
                jq.late_p99_ms,
                ic.late_p50_ms,
                ic.late_p99_ms,
                jq.late_p50_ms / ic.late_p50_ms,
                jq.late_p99_ms / ic.late_p99_ms
            ));
            for r in &rows[rows.len() - 5..] {
                eprintln!("{r}");
            }
        }
    }
}

// ---- V3: jaque's probes and blackbox_exporter + Prometheus ----

#[derive(Clone, Copy)]
enum Probe {
    Tcp,
    Http,
}

impl Probe {
    fn name(self) -> &'static str {
        match self {
            Probe::Tcp => "tcp",
            Probe::Http => "http",
        }
    }

    /// Object `i`'s target, as jaque's probe takes it and as Prometheus passes it to blackbox_exporter.
    fn target(self, i: usize, tcp: &TcpTargets, web: &HttpTargets) -> String {
        match self {
            Probe::Tcp => tcp.addrs[i % PORTS].to_string(),
            Probe::Http => format!("http://{}/o-{i:05}", web.addrs[i % PORTS]),
        }
    }
}

/// Probes per second (counted at the targets) and CPU seconds per 1,000 probes of `pids`' trees over the window.
fn probe_window(pids: &[u32], count: impl Fn() -> u64) -> (f64, f64) {
    let (c0, a0, t0) = (tree_cpu(pids), count(), Instant::now());
    thread::sleep(V3_WINDOW);
    let (c1, a1, t1) = (tree_cpu(pids), count(), Instant::now());
    let done = (a1 - a0) as f64;
    (done / (t1 - t0).as_secs_f64(), (c1 - c0) / done.max(1.0) * 1000.0)
}

fn prometheus_config(interval: u64, bb_port: u16, module: &str, targets: &Path) -> String {
    format!(
        r#"global:
  scrape_interval: {interval}s
  scrape_timeout: {interval}s
scrape_configs:
  - job_name: blackbox
    metrics_path: /probe
    params:
      module: [{module}]
    file_sd_configs:
      - files: ["{}"]
    relabel_configs:
      - source_labels: [__address__]
        target_label: __param_target
      - source_labels: [__param_target]
        target_label: instance
      - target_label: __address__
        replacement: 127.0.0.1:{bb_port}
"#,
        targets.display()
    )
}

const BLACKBOX_CONFIG: &str = r#"modules:
  tcp_connect:
    prober: tcp
    timeout: 5s
  http_2xx:
    prober: http
    timeout: 5s
"#;

fn v3(work: &Path, rows: &mut Vec<String>) {
    let (tcp, web) = (TcpTargets::start(), HttpTargets::start());
    let steps = std::env::var("JAQUE_PEERS_V3_STEPS").ok();
    for probe in [Probe::Tcp, Probe::Http] {
        for (n, interval) in [(1000usize, 10u64), (1000, 1)] {
            let key = format!("{}:{n}:{interval}", probe.name());
            if steps.as_ref().is_some_and(|s| !s.split(',').any(|x| x == key)) {
                continue;
            }
            eprintln!("jaque-peers: V3 {} {n} every {interval} s...", probe.name());
            let count = || match probe {
                Probe::Tcp => tcp.count(),
                Probe::Http => web.count(),
            };
            // jaque: one process, its own probes.
            let j = jaque_one_process("peers");
            let timeout = duration_arg(interval.min(5));
            define(&j, n, |i| {
                let p = match probe {
                    Probe::Tcp => json!({"type": "tcp", "addr": probe.target(i, &tcp, &web)}),
                    Probe::Http => json!({"type": "http", "url": probe.target(i, &tcp, &web)}),
                };
                json!({"probe": p, "interval": duration_arg(interval), "timeout": timeout})
            });
            thread::sleep(Duration::from_secs(5));
            let (jrate, jcpu) = probe_window(&[j.proc.pid()], count);
            drop(j);
            // blackbox_exporter, scraped by Prometheus: one scrape of /probe per target per interval.
            let dir = work.join(format!("prom-{}-{interval}", probe.name()));
            std::fs::create_dir_all(&dir).unwrap();
            let (bb_port, prom_port) = (free_port(), free_port());
            std::fs::write(dir.join("blackbox.yml"), BLACKBOX_CONFIG).unwrap();
            let groups: Vec<Value> = (0..n)
                .map(|i| json!({"targets": [probe.target(i, &tcp, &web)], "labels": {"object": format!("o-{i:05}")}}))
                .collect();
            std::fs::write(dir.join("targets.json"), Value::Array(groups).to_string()).unwrap();
            let module = match probe {
                Probe::Tcp => "tcp_connect",
                Probe::Http => "http_2xx",
            };
            std::fs::write(
                dir.join("prometheus.yml"),
                prometheus_config(interval, bb_port, module, &dir.join("targets.json")),
            )
            .unwrap();
            let bb = Ext::spawn(
                "blackbox_exporter",
                Command::new("prometheus-blackbox-exporter")
                    .arg(format!("--config.file={}", dir.join("blackbox.yml").display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{bb_port}")),
                &dir.join("blackbox.log"),
            );
            let prom = Ext::spawn(
                "prometheus",
                Command::new("prometheus")
                    .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
                    .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{prom_port}")),
                &dir.join("prometheus.log"),
            );
            let started = count();
            poll("Prometheus to scrape", || (count() > started + n as u64).then_some(()));
            thread::sleep(Duration::from_secs(interval * 2 + 5));
            let (prate, pcpu) = probe_window(&[prom.pid, bb.pid], count);
            let pss = tree_pss_mib(&[prom.pid, bb.pid]);
            drop(prom);
            drop(bb);
            let due = n as f64 / interval as f64;
            let what = format!("{} probes, {n} targets every {interval} s (due {due:.0}/s)", probe.name());
            rows.push(format!(
                "| V3 | {what}: probes/s (counted at the targets) | {jrate:.0}/s | blackbox_exporter + Prometheus: {prate:.0}/s | {:.2}x | |",
                jrate / prate
            ));
            rows.push(format!(
                "| V3 | {what}: CPU s per 1,000 probes | {jcpu:.4} | blackbox_exporter + Prometheus: {pcpu:.4} (PSS {pss:.0} MiB) | {:.2}x | <= 1x |",
                jcpu / pcpu
            ));
            for r in &rows[rows.len() - 2..] {
                eprintln!("{r}");
            }
        }
    }
}

// ---- V4: failover ----

const V4_OBJECTS: usize = 1000;
const V4_INTERVAL: u64 = 10;

/// What the targets saw of one side's failover.
struct Failover {
    /// From the kill until every object had been checked again (the last object's first check after it).
    all_again: f64,
    /// Of the killed node's objects, the first checked again.
    first_again: f64,
    twice: usize,
    missed: usize,
    twice_before: usize,
    missed_before: usize,
}

/// Reads one side's request log: every object's checks from `from` on, the kill at `kill`. A gap of under half an
/// interval between two checks of one object is a check run twice; a gap of k intervals (rounded) is k - 1
/// slots missed. `before`: the same counts over the steady minute before `kill`, for comparison.
fn failover_of(log: &BTreeMap<String, Vec<f64>>, n: usize, kill: f64, killed: &dyn Fn(&str) -> bool) -> Failover {
    let i = V4_INTERVAL as f64;
    let mut f =
        Failover { all_again: 0.0, first_again: f64::INFINITY, twice: 0, missed: 0, twice_before: 0, missed_before: 0 };
    assert_eq!(log.len(), n, "every object was checked");
    for (path, times) in log {
        let mut ts = times.clone();
        ts.sort_by(|a, b| a.total_cmp(b));
        let again = ts.iter().find(|t| **t > kill).map_or(f64::INFINITY, |t| t - kill);
        f.all_again = f.all_again.max(again);
        if killed(path) {
            f.first_again = f.first_again.min(again);
        }
        for w in ts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let (twice, missed) = (usize::from(b - a < i / 2.0), ((b - a) / i).round().max(1.0) as usize - 1);
            if b > kill - 2.0 * i {
                f.twice += twice;
                f.missed += missed;
            } else if a > kill - 8.0 * i {
                f.twice_before += twice;
                f.missed_before += missed;
            }
        }
    }
    f
}

/// Waits until every object of `log` was checked after `kill`, then two intervals more.
fn settle_after(web: &HttpTargets, kill: f64) {
    let start = Instant::now();
    loop {
        thread::sleep(Duration::from_secs(1));
        let seen = {
            let g = web.log.lock().unwrap();
            let v = g.as_ref().unwrap();
            let mut after: std::collections::BTreeSet<&str> = Default::default();
            for (p, t) in v {
                if *t > kill {
                    after.insert(p);
                }
            }
            after.len()
        };
        if seen >= V4_OBJECTS || start.elapsed() > Duration::from_secs(180) {
            break;
        }
    }
    thread::sleep(Duration::from_secs(2 * V4_INTERVAL));
}

/// Two `-target engine,worker` processes on one nats-server, `-heartbeat-ttl` `ttl`, objects defined through a
/// `-target ui`; after the steady minutes, engine-b is killed.
fn jaque_failover(web: &HttpTargets, ttl: &str) -> Failover {
    let nats = Nats::start();
    let url = nats.url.clone();
    let engine = |id: &str| {
        let args = [
            "-target",
            "engine,worker",
            "-queue",
            &url,
            "-coordination",
            &url,
            "-plugin-dir",
            PLUGINS,
            "-id",
            id,
            "-heartbeat-ttl",
            ttl,
        ];
        Jaque::start(id, &args)
    };
    let (a, mut b) = (engine("engine-a"), engine("engine-b"));
    let ui = Jaque::start("ui", &["-target", "ui", "-coordination", &url, "-id", "ui"]);
    ui.wait_ready();
    poll("both engines in the epoch", || {
        let v = ui.get("/api/cluster").json();
        (v["buckets"][0]["epoch_members"].as_array().map_or(0, |m| m.len()) == 2).then_some(())
    });
    web.record();
    define(&ui, V4_OBJECTS, |i| {
        let port = web.addrs[i % PORTS].port().to_string();
        json!({"probe": {"type": "exec", "plugin": "check_http", "args": ["-H", "127.0.0.1", "-p", port, "-u", format!("/o-{i:05}")]},
               "interval": duration_arg(V4_INTERVAL)})
    });
    let owner: BTreeMap<String, String> = {
        let list = ui.get("/api/objects?limit=10000").json();
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| Some((format!("/{}", o["id"].as_str()?), o["owner"].as_str()?.to_string())))
            .collect()
    };
    thread::sleep(Duration::from_secs(8 * V4_INTERVAL));
    let plugins = tree_of(&[b.proc.pid()], &all_stats());
    let kill = now_s();
    b.proc.signal("KILL");
    b.proc.wait_exit();
    reap(&plugins, Duration::from_secs(2));
    eprintln!("jaque-peers: V4 jaque: engine-b killed");
    settle_after(web, kill);
    let log = web.take_log();
    drop((a, ui, nats));
    failover_of(&log, V4_OBJECTS, kill, &|p| owner.get(p).is_some_and(|o| o == "engine-b"))
}

fn icinga_failover(web: &HttpTargets, pki: &Pki, work: &Path) -> Failover {
    let (pa, pb) = (free_port(), free_port());
    let zone = [("bench-a", pa), ("bench-b", pb)];
    let objects = icinga_objects(V4_OBJECTS, V4_INTERVAL, "bench_http", |i| {
        format!("vars.bench_port = {}; vars.bench_uri = \"/o-{i:05}\"", web.addrs[i % PORTS].port())
    });
    web.record();
    let homes = [work.join("icinga-ha-a"), work.join("icinga-ha-b")];
    pki.install("bench-a", &homes[0]);
    pki.install("bench-b", &homes[1]);
    let a = Icinga::start("icinga2 bench-a", &homes[0], &icinga_config("bench-a", pa, &zone, &objects), pa);
    let mut b = Icinga::start("icinga2 bench-b", &homes[1], &icinga_config("bench-b", pb, &zone, &objects), pb);
    poll("the two endpoints connected", || {
        let v = a.api("GET", "/v1/status/ApiListener", None)?;
        (v["results"][0]["status"]["api"]["num_conn_endpoints"].as_f64()? >= 1.0).then_some(())
    });
    // 30 s of cold start (no authority split while the other endpoint may still connect), then the split runs
    // every 10 s; then the same steady minutes as jaque's.
    thread::sleep(Duration::from_secs(45 + 8 * V4_INTERVAL));
    let authority: BTreeMap<String, bool> = {
        let v = b
            .api("GET", "/v1/objects/services", Some(&json!({"attrs": ["paused", "vars"]})))
            .expect("bench-b's services");
        v["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let uri = r["attrs"]["vars"]["bench_uri"].as_str()?.to_string();
                Some((uri, !r["attrs"]["paused"].as_bool()?))
            })
            .collect()
    };
    let kill = now_s();
    b.ext.kill();
    eprintln!("jaque-peers: V4 icinga2: bench-b killed");
    settle_after(web, kill);
    let log = web.take_log();
    drop(a);
    failover_of(&log, V4_OBJECTS, kill, &|p| authority.get(p).copied().unwrap_or(false))
}

fn v4(pki: &Pki, work: &Path, rows: &mut Vec<String>) {
    let web = HttpTargets::start();
    eprintln!("jaque-peers: V4 jaque...");
    let j = jaque_failover(&web, "10s");
    eprintln!("jaque-peers: V4 jaque, -heartbeat-ttl 3s...");
    let j3 = jaque_failover(&web, "3s");
    eprintln!("jaque-peers: V4 icinga2...");
    let ic = icinga_failover(&web, pki, work);
    let what = format!("{V4_OBJECTS} objects every {V4_INTERVAL} s (check_http), one of two nodes killed (SIGKILL)");
    rows.push(format!(
        "| V4 | {what}: kill -> every object checked again / the killed node's first object checked again | {:.1} s / {:.1} s | Icinga 2 HA zone: {:.1} s / {:.1} s | {:.2}x | <= 1x |",
        j.all_again, j.first_again, ic.all_again, ic.first_again, j.all_again / ic.all_again
    ));
    rows.push(format!(
        "| V4 | {what}: checks run twice (a gap under half an interval) / slots missed or run over half an interval late (a gap over 1.5 intervals, counted in intervals), from 2 intervals before the kill until 2 after everything ran again | {} / {} | Icinga 2 HA zone: {} / {} | | |",
        j.twice, j.missed, ic.twice, ic.missed
    ));
    rows.push(format!(
        "| V4 | the same over the 6 steady intervals before (no fault) | {} / {} | Icinga 2 HA zone: {} / {} | | 0 / 0 |",
        j.twice_before, j.missed_before, ic.twice_before, ic.missed_before
    ));
    rows.push(format!(
        "| V4 | the same with jaque's -heartbeat-ttl 3s (default 10s): kill -> every object checked again / first again; run twice / missed | {:.1} s / {:.1} s; {} / {} | Icinga 2 HA zone (its 10 s authority timer has no setting): {:.1} s / {:.1} s; {} / {} | {:.2}x | <= 1x |",
        j3.all_again, j3.first_again, j3.twice, j3.missed, ic.all_again, ic.first_again, ic.twice, ic.missed,
        j3.all_again / ic.all_again
    ));
    for r in &rows[rows.len() - 4..] {
        eprintln!("{r}");
    }
}

/// The settings of every side, as this run uses them (printed above the table).
fn print_settings() {
    let ex = icinga_objects(10, 10, "bench_tcp", |_| "vars.bench_port = 40001".into());
    let ex: Vec<&str> = ex.lines().take(2).collect();
    println!("Settings (every figure below; nothing tuned beyond what is listed):\n");
    println!("- jaque, V1 and V3: one process, `jaque -target engine,worker,ui -queue memory -plugin-dir {PLUGINS}`, every other flag its default (`-check-linger 50ms`, `-check-batch 128`, `-worker-concurrency 64`); objects defined through its API at an even pace over {}s, e.g. `{}` (timeout 5s, or the interval when shorter); the ui serves nothing during the windows.", DEFINE_OVER.as_secs(), json!({"probe": {"type": "exec", "plugin": "check_tcp", "args": ["-H", "127.0.0.1", "-p", "40001"]}, "interval": "10s", "timeout": "5s"}));
    println!("- jaque, V4: a nats-server, two `jaque -target engine,worker -queue nats://… -coordination nats://… -plugin-dir {PLUGINS}` (defaults: `-heartbeat-ttl 10s`; a second run with `3s`) and a `-target ui` for the definitions; one engine killed with SIGKILL.");
    println!("- Icinga 2, V1: `icinga2 daemon -c icinga2.conf -DDataDir=… -DRunAsUser=root …` in the foreground (every path under a temp dir, as root instead of `nagios`); features: the checker and the api (needed to read its figures; idle during the windows), no database, no log file; defaults otherwise (`MaxConcurrentChecks` 512). Its configuration, the objects cut to two:\n");
    println!("```\n{}{}\n```\n", icinga_config("bench-a", 5665, &[("bench-a", 5665)], ""), ex.join("\n"));
    println!("- Icinga 2, V4: the same configuration on two nodes, `bench-a` and `bench-b`, both endpoints of zone `master` (certificates from `icinga2 pki new-ca`, `new-cert`, `sign-csr`), services `check_http -H 127.0.0.1 -p PORT -u /o-NNNNN`; the whole process tree of `bench-b` killed with SIGKILL.");
    println!("- blackbox_exporter + Prometheus, V3: `prometheus-blackbox-exporter --config.file=blackbox.yml`, `prometheus --config.file=prometheus.yml --storage.tsdb.path=…` (defaults otherwise), one target per object in a file_sd file, `{{\"targets\": [\"127.0.0.1:40001\"], \"labels\": {{\"object\": \"o-00001\"}}}}` (http: `http://127.0.0.1:40001/o-00001`), the usual relabelling to `/probe`:\n");
    println!(
        "```\n{BLACKBOX_CONFIG}```\n\n```\n{}```\n",
        prometheus_config(1, 9115, "tcp_connect", Path::new("targets.json"))
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "spawn-loop") {
        spawn_loop(&args[1..]);
        return;
    }
    epoch();
    // Orphans of a killed process tree (Icinga 2's main process when its umbrella goes, a killed jaque's
    // plugins) come back to this process, which reaps them.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let parts = std::env::var("JAQUE_PEERS_PARTS").unwrap_or_else(|_| "v1,v3,v4".into());
    let want = |p: &str| parts.split(',').any(|x| x == p);
    let work = tempfile::tempdir().expect("temp dir");
    let pki = Pki::make(work.path(), &["bench-a", "bench-b"]);

    println!(
        "Versions: jaque {}; {}; {}; {}; monitoring-plugins {}; nats-server {}.",
        env!("CARGO_PKG_VERSION"),
        version_of("icinga2", &["--version"])
            .replace("icinga2 - The Icinga 2 network monitoring daemon (version: ", "Icinga 2 ")
            .trim_end_matches(')'),
        version_of("prometheus", &["--version"]),
        version_of("prometheus-blackbox-exporter", &["--version"]),
        version_of("dpkg-query", &["-W", "-f", "${Version}", "monitoring-plugins-basic"]),
        version_of(&jaque_tests::nats_server_bin().to_string_lossy(), &["--version"])
    );
    println!();
    print_settings();
    let mut rows = Vec::new();
    if want("v1") {
        v1(&pki, work.path(), &mut rows);
    }
    if want("v3") {
        v3(work.path(), &mut rows);
    }
    if want("v4") {
        v4(&pki, work.path(), &mut rows);
    }
    println!("| P | measure | jaque | peer (same run) | ratio | target |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    let _ = std::io::stdout().flush();
}
