//! The worker: takes check work from the `-queue`, runs the probe with its timeout, returns the result.
//! Probes: `http` (GET, 2xx/3xx ok unless one status is expected), `tcp` (connect), `exec` (a plugin from
//! `-plugin-dir`, Nagios exit codes, killed at its timeout; `plugins` says what a plugin gets). A timeout is
//! critical. A check's output passes through the probe's `scrub`: no credential of its url is ever in it.

mod plugins;

pub use plugins::check_dir;

use crate::metrics::{self, Exposition};
use crate::nats::subjects::{WORKER_GROUP, WORK_SUBJECT};
use crate::nats::NatsLink;
use futures_util::future::Either;
use futures_util::StreamExt;
use jaque_core::backlog::Backlog;
use jaque_core::time::millis;
use jaque_core::wire::{self, Batch};
use jaque_core::{CheckResult, CheckWork, Lateness, Probe, SensitiveUrl, State, Time, LATENESS_BOUNDS_MS};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use socket2::{Domain, Protocol, Socket, Type};
use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

/// Checks this worker ran, by resulting state (`State as usize`).
static WORKER_CHECKS: [AtomicU64; 5] =
    [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Bytes of plugin output past `plugins::OUTPUT_MAX`, read and dropped.
static PLUGIN_OUTPUT_DISCARDED: AtomicU64 = AtomicU64::new(0);
/// Check work a worker took and dropped unstarted: the engine had stopped waiting for its result.
static WORKER_CHECKS_EXPIRED: AtomicU64 = AtomicU64::new(0);
/// Check work a worker took and has not started yet: every slot was busy.
static WORKER_CHECKS_WAITING: AtomicU64 = AtomicU64::new(0);
/// How long the checks a worker started waited for a slot, from when it took them.
static WORKER_CHECK_WAIT: Mutex<Lateness> =
    Mutex::new(Lateness { buckets: [0; LATENESS_BOUNDS_MS.len() + 1], count: 0, sum_ms: 0, max_ms: 0 });

/// The worker's part of `/metrics`.
pub fn expose(out: &mut Exposition) {
    out.header("jaque_worker_checks_total", "counter", "Checks this worker ran, by resulting state.");
    for (i, state) in ["pending", "ok", "warning", "critical", "unknown"].iter().enumerate().skip(1) {
        out.sample("jaque_worker_checks_total", &[("state", state)], WORKER_CHECKS[i].load(Ordering::Relaxed));
    }
    out.one(
        "jaque_worker_checks_waiting",
        "gauge",
        "Checks this worker took and has not started: every one of its -worker-concurrency slots is busy.",
        WORKER_CHECKS_WAITING.load(Ordering::Relaxed),
    );
    let wait = WORKER_CHECK_WAIT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    out.histogram_ms(
        "jaque_worker_check_wait_seconds",
        "How long the checks this worker started waited for a free slot, from when it took them: the part of \
         a check's delay the engine's start lateness does not see.",
        &LATENESS_BOUNDS_MS,
        &wait.buckets,
        wait.sum_ms,
    );
    out.one(
        "jaque_worker_checks_expired_total",
        "counter",
        "Checks this worker took but did not start: older than their timeout plus the engine's 2 s grace, \
         the engine had stopped waiting for their result (more work than the worker runs, for that long).",
        WORKER_CHECKS_EXPIRED.load(Ordering::Relaxed),
    );
    out.one(
        "jaque_worker_plugin_output_discarded_bytes_total",
        "counter",
        "Bytes of exec plugin output past the 64 KiB a worker reads, discarded.",
        PLUGIN_OUTPUT_DISCARDED.load(Ordering::Relaxed),
    );
}

#[derive(Clone)]
pub struct Prober {
    http: reqwest::Client,
    plugin_dir: Option<PathBuf>,
}

impl Prober {
    pub fn new(plugin_dir: Option<PathBuf>) -> Result<Prober, String> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("jaque/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the http probe client: {e}"))?;
        Ok(Prober { http, plugin_dir })
    }

    /// Starts `work`. A tcp probe to an IP and port connects a non-blocking socket and looks once whether it
    /// is done (`start_connect`): when it is, as a connect to a port on this host always is, the result is
    /// here at once, with no task, timer or wake-up spent on it. Anything else is left to await.
    pub fn start(&self, work: CheckWork) -> Started<impl Future<Output = CheckResult> + Send + 'static> {
        let connecting = match &work.probe {
            Probe::Tcp { addr } => addr.parse::<SocketAddr>().ok().map(|to| (addr, start_connect(to))),
            _ => None,
        };
        match connecting {
            Some((addr, Connecting::Done(r))) => {
                let outcome = tcp_outcome(addr, r);
                Started::Done(finish(work, outcome))
            }
            Some((addr, Connecting::Pending(socket))) => {
                let addr = addr.clone();
                Started::Running(Either::Left(async move {
                    let outcome = within(&work, async { tcp_outcome(&addr, finish_connect(socket).await) }).await;
                    finish(work, outcome)
                }))
            }
            None => {
                let prober = self.clone();
                Started::Running(Either::Right(async move { prober.run(work).await }))
            }
        }
    }

    /// Runs `work` with its timeout.
    async fn run(&self, work: CheckWork) -> CheckResult {
        let outcome = within(&work, self.probe(&work.probe, work.timeout())).await;
        finish(work, outcome)
    }

    async fn probe(&self, probe: &Probe, timeout: Duration) -> (State, String) {
        match probe {
            // Boxed, as the exec probe is: a task running a tcp probe does not carry the space of the others.
            Probe::Http { url, expect_status } => Box::pin(self.http(url, *expect_status, timeout)).await,
            Probe::Tcp { addr } => tcp_outcome(addr, connect(addr).await),
            Probe::Exec { plugin, args } => Box::pin(self.exec(plugin, args)).await,
        }
    }

    /// The one place the url's credentials are used. The client's errors carry the url: left out, and the url
    /// named redacted.
    async fn http(&self, url: &SensitiveUrl, expect_status: Option<u16>, timeout: Duration) -> (State, String) {
        match self.http.get(url.expose()).timeout(timeout).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (State::from_http_status(status, expect_status), format!("HTTP {status}"))
            }
            Err(e) => (State::Critical, format!("GET {url}: {}", chain(&e.without_url()))),
        }
    }

    async fn exec(&self, plugin: &str, args: &[String]) -> (State, String) {
        let Some(dir) = &self.plugin_dir else {
            return (State::Unknown, "exec probes need -plugin-dir on the worker".into());
        };
        // The core only lets plain file names through (no `/`, no leading dot), so this stays inside `dir`.
        let path = dir.join(plugin);
        if !path.is_file() {
            return (State::Unknown, format!("plugin {plugin:?} is not in {}", dir.display()));
        }
        if let Err(e) = plugins::check_file(&path) {
            return (State::Unknown, e);
        }
        let child = tokio::process::Command::new(&path)
            .args(args)
            // Nothing of the worker's environment (its tokens, passwords) but what `plugins::env` names.
            .env_clear()
            .envs(plugins::env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group, so the timeout kills whatever the plugin started too.
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return (State::Unknown, format!("running {}: {e}", path.display())),
        };
        let _group = child.id().map(KillGroup);
        let Some(stdout) = child.stdout.take() else {
            return (State::Unknown, format!("running {}: no stdout", path.display()));
        };
        let read = plugins::read_capped(stdout, plugins::OUTPUT_MAX).await;
        let status = child.wait().await;
        match (read, status) {
            (Ok((kept, discarded)), Ok(status)) => {
                if discarded > 0 {
                    PLUGIN_OUTPUT_DISCARDED.fetch_add(discarded, Ordering::Relaxed);
                }
                let state = status.code().map_or(State::Unknown, State::from_nagios_exit);
                let text = String::from_utf8_lossy(&kept);
                let mut first = text.lines().next().unwrap_or_default().to_string();
                if discarded > 0 && !text.contains('\n') {
                    // The first line itself was cut: say so where the log's 1 KiB of output still shows it.
                    let mut cut = first.len().min(900);
                    while !first.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    first.truncate(cut);
                    first.push_str(&format!(
                        " [output cut: {discarded} bytes past the first {} KiB discarded]",
                        plugins::OUTPUT_MAX / 1024
                    ));
                }
                (state, first)
            }
            (Err(e), _) | (_, Err(e)) => (State::Unknown, format!("waiting for {}: {e}", path.display())),
        }
    }
}

/// A check started by `Prober::start`: its result already, or what is left of it to await.
pub enum Started<F> {
    Done(CheckResult),
    Running(F),
}

/// The probe's outcome made a result: output scrubbed with the probe's secrets (before the cut, which could
/// leave half of one), no more of it than a transition keeps, counted by state.
fn finish(work: CheckWork, (state, output): (State, String)) -> CheckResult {
    let output = match work.probe.scrub(&output) {
        Cow::Borrowed(_) => output,
        Cow::Owned(scrubbed) => scrubbed,
    };
    WORKER_CHECKS[state as usize].fetch_add(1, Ordering::Relaxed);
    CheckResult { check_id: work.check_id, object: work.object, state, output }.with_output_kept()
}

/// A probe's outcome within the work's timeout; past it, critical.
async fn within(work: &CheckWork, probe: impl Future<Output = (State, String)>) -> (State, String) {
    let timeout = work.timeout();
    match tokio::time::timeout(timeout, probe).await {
        Ok(outcome) => outcome,
        Err(_) => (State::Critical, format!("check timed out after {}", humantime::format_duration(timeout))),
    }
}

fn tcp_outcome(addr: &str, connected: io::Result<()>) -> (State, String) {
    match connected {
        Ok(()) => (State::Ok, format!("connected to {addr}")),
        Err(e) => (State::Critical, format!("connect {addr}: {e}")),
    }
}

/// A tcp connect begun: done (connected or failed), or still in progress on this socket.
enum Connecting {
    Done(io::Result<()>),
    Pending(Socket),
}

/// A tcp probe's connect to an IP and port, connected at once as a port on this host is, costs the socket's own
/// system calls and nothing more: a non-blocking connect, then one look (`poll` with no wait) at whether it is
/// done, where the runtime's connect registers the socket with its epoll and removes it again (two more
/// calls), asks for the socket's error (one more) and wakes the task. A connect still in progress after that
/// look is left to the runtime (`finish_connect`).
fn start_connect(to: SocketAddr) -> Connecting {
    let socket = match Socket::new(Domain::for_address(to), Type::STREAM.nonblocking().cloexec(), Some(Protocol::TCP)) {
        Ok(s) => s,
        Err(e) => return Connecting::Done(Err(e)),
    };
    match socket.connect(&to.into()) {
        Ok(()) => return Connecting::Done(Ok(())),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINPROGRESS | libc::EINTR)) => {}
        Err(e) => return Connecting::Done(Err(e)),
    }
    let mut look = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd that lives through the call; a zero timeout returns at once.
    if unsafe { libc::poll(&mut look, 1, 0) } == 1 {
        if look.revents & (libc::POLLERR | libc::POLLHUP) == 0 && look.revents & libc::POLLOUT != 0 {
            return Connecting::Done(Ok(()));
        }
        match socket.take_error() {
            Ok(Some(e)) | Err(e) => return Connecting::Done(Err(e)),
            Ok(None) => {}
        }
    }
    Connecting::Pending(socket)
}

/// Waits for a connect still in progress on the runtime.
async fn finish_connect(socket: Socket) -> io::Result<()> {
    let stream = tokio::net::TcpStream::from_std(std::net::TcpStream::from(socket))?;
    stream.writable().await?;
    stream.take_error()?.map_or(Ok(()), Err)
}

/// A tcp probe's connect: an IP and port as `start_connect` does it, a host name through the runtime's
/// resolver.
async fn connect(addr: &str) -> io::Result<()> {
    let Ok(to) = addr.parse::<SocketAddr>() else {
        return tokio::net::TcpStream::connect(addr).await.map(drop);
    };
    match start_connect(to) {
        Connecting::Done(r) => r,
        Connecting::Pending(socket) => finish_connect(socket).await,
    }
}

/// Kills a plugin's process group when its check ends: on time it is gone already, at the timeout (the
/// future dropped) it and its children are killed.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.0) {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// An error with its causes, `a: b: c`, so the check output says why (refused, timed out, …).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Serves in-process work (`-queue memory`): each piece with the channel its results go back on.
pub async fn serve_memory(prober: Prober, rx: mpsc::UnboundedReceiver<MemWork>, concurrency: usize) {
    // Ends when the engine of this process is gone (its sender dropped), after the work taken.
    run_taken(prober, rx, concurrency).await;
}

/// Serves work from the `-queue` NATS server as a member of the workers' queue group.
/// On shutdown it leaves the queue group, runs what it had already taken (but what has expired in its
/// backlog), and returns once those are done.
pub async fn serve_nats(
    prober: Prober,
    link: NatsLink,
    concurrency: usize,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut sub = link
        .client
        .queue_subscribe(WORK_SUBJECT, WORKER_GROUP.into())
        .await
        .map_err(|e| format!("subscribing to {WORK_SUBJECT} on {}: {e}", link.url))?;
    let (results, ready) = mpsc::unbounded_channel();
    let answers = tokio::spawn(send_results(link.client.clone(), ready));
    // Messages are taken off the subscription by a task of their own, so work is taken (and its age counted)
    // as it arrives, also while every check slot is busy.
    let (taken_tx, taken) = mpsc::unbounded_channel();
    let intake = tokio::spawn(async move {
        let mut leaving = false;
        loop {
            let msg = tokio::select! {
                m = sub.next() => m,
                _ = shutdown.changed(), if !leaving => {
                    leaving = true;
                    // Messages already delivered still come out of the stream, then it ends.
                    let _ = sub.unsubscribe().await;
                    continue;
                }
            };
            let Some(msg) = msg else { break };
            let work = match wire::decode_check_work(&msg.payload) {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "skipping malformed check work");
                    metrics::wire_error("check work");
                    continue;
                }
            };
            let Some(reply) = msg.reply else {
                metrics::wire_error("check work without reply subject");
                continue;
            };
            let one = matches!(work, Batch::One(_));
            let answer = ToEngine { results: results.clone(), reply, one };
            if taken_tx.send(Taken { work, answer }).is_err() {
                break;
            }
        }
    });
    run_taken(prober, taken, concurrency).await;
    let _ = intake.await;
    let _ = answers.await;
    // The connection writes results as they come; one flush at the end makes sure the last ones are out
    // before the process exits (a flush per result cost a write and a wake-up each at thousands a second).
    let _ = link.client.flush().await;
    Ok(())
}

/// Work taken from the queue: one check or several, and where their results go.
pub struct Taken<A> {
    pub work: Batch<CheckWork>,
    pub answer: A,
}

/// Work handed over in memory (`-queue memory`), its results back on the channel it names.
pub type MemWork = Taken<mpsc::UnboundedSender<CheckResult>>;

/// Where a check's result goes.
trait Answer: Clone + Send + 'static {
    fn answer(&self, result: CheckResult);
}

impl Answer for mpsc::UnboundedSender<CheckResult> {
    fn answer(&self, result: CheckResult) {
        // Fails only once the engine of this process is gone.
        let _ = self.send(result);
    }
}

/// To the engine that sent the work over NATS, through `send_results`.
#[derive(Clone)]
struct ToEngine {
    results: mpsc::UnboundedSender<ToSend>,
    reply: async_nats::Subject,
    /// The work came alone, not in an array (an engine from before batching): so goes its result.
    one: bool,
}

impl Answer for ToEngine {
    fn answer(&self, result: CheckResult) {
        let _ = self.results.send(ToSend { reply: self.reply.clone(), one: self.one, result });
    }
}

/// Runs the work taken, at most `concurrency` checks at once, until `taken` ends and every check taken is
/// done. Work waits in a `Backlog` while every slot is busy, is started in a random order from there, and work
/// older than its timeout plus the engine's grace is dropped there, unstarted and counted
/// (`jaque_worker_checks_expired_total`). So a worker sent more than it can run (say a mass of checks that each
/// run to their timeout) keeps no more than the work of the last timeout plus grace, and what it starts still
/// comes back while its engine waits: run in order, each check would start later than the last until every
/// result came too late and no transition was recorded at all.
async fn run_taken<A: Answer>(prober: Prober, mut taken: mpsc::UnboundedReceiver<Taken<A>>, concurrency: usize) {
    let limit = Arc::new(Semaphore::new(concurrency));
    let mut backlog = Waiting::default();
    let mut open = true;
    // A slot the loop waited for, used by the next turn's first start.
    let mut freed: Option<OwnedSemaphorePermit> = None;
    loop {
        // Whatever can start now, up to a message's worth before new work is taken again. A start done at once
        // (a connect on this host) never waits, so each spends from the task's budget: with `-queue memory` the
        // engine runs on this thread too, and gets its turn every so many of them.
        for _ in 0..wire::CHECKS_PER_MESSAGE {
            if backlog.is_empty() {
                break;
            }
            let Some(permit) = freed.take().or_else(|| limit.clone().try_acquire_owned().ok()) else { break };
            // Nothing worth starting (what waited has expired): the slot goes back.
            let Some((work, answer)) = backlog.next() else { break };
            start(&prober, work, answer, permit);
            tokio::task::consume_budget().await;
        }
        tokio::select! {
            biased;
            t = taken.recv(), if open => match t {
                Some(t) => backlog.take(t),
                None => open = false,
            },
            // A slot freed: the next turn starts from the backlog with it.
            permit = limit.clone().acquire_owned(), if !backlog.is_empty() => match permit {
                Ok(p) => freed = Some(p),
                Err(_) => break,
            },
            else => break,
        }
    }
    drop(freed);
    drain(&limit, concurrency).await;
}

/// Starts `work`: a result there at once goes back now, anything else on a task that holds the slot.
fn start<A: Answer>(prober: &Prober, work: CheckWork, answer: A, permit: OwnedSemaphorePermit) {
    match prober.start(work) {
        Started::Done(result) => answer.answer(result),
        Started::Running(check) => {
            tokio::spawn(async move {
                let result = check.await;
                answer.answer(result);
                drop(permit);
            });
        }
    }
}

/// The core's `Backlog` on this worker's clock (milliseconds since the worker started: a wall clock set back
/// or forward does not expire work), random source and metrics.
struct Waiting<A> {
    backlog: Backlog<(CheckWork, A)>,
    origin: Instant,
    rng: SmallRng,
}

impl<A> Waiting<A> {
    fn with_rng(rng: SmallRng) -> Waiting<A> {
        Waiting { backlog: Backlog::default(), origin: Instant::now(), rng }
    }

    fn now(&self) -> Time {
        Time(millis(self.origin.elapsed()))
    }

    /// `jaque_worker_checks_expired_total` and `jaque_worker_checks_waiting`, as the backlog is now.
    fn show(&mut self) {
        WORKER_CHECKS_EXPIRED.fetch_add(self.backlog.take_expired(), Ordering::Relaxed);
        WORKER_CHECKS_WAITING.store(self.backlog.len() as u64, Ordering::Relaxed);
    }

    fn is_empty(&self) -> bool {
        self.backlog.is_empty()
    }

    /// The work to start next (`Backlog::next`); how long it waited goes to `jaque_worker_check_wait_seconds`.
    fn next(&mut self) -> Option<(CheckWork, A)> {
        let (now, rng) = (self.now(), &mut self.rng);
        let next = self.backlog.next(now, |n| rng.random_range(0..n));
        self.show();
        let (work, waited) = next?;
        WORKER_CHECK_WAIT.lock().unwrap_or_else(|e| e.into_inner()).record(waited);
        Some(work)
    }
}

impl<A: Clone> Waiting<A> {
    fn take(&mut self, taken: Taken<A>) {
        let now = self.now();
        for work in taken.work.into_vec() {
            self.backlog.take(now, work.timeout(), (work, taken.answer.clone()));
        }
        self.show();
    }
}

impl<A> Default for Waiting<A> {
    fn default() -> Self {
        Waiting::with_rng(SmallRng::from_os_rng())
    }
}

/// A check's result on its way back to the engine that sent the work.
struct ToSend {
    reply: async_nats::Subject,
    one: bool,
    result: CheckResult,
}

/// Sends results back as they finish, all those finished at once to one engine in one message (up to
/// `CHECKS_PER_MESSAGE`): the checks of one message of work that finish together go back together.
async fn send_results(client: async_nats::Client, mut ready: mpsc::UnboundedReceiver<ToSend>) {
    let mut answers = Vec::new();
    while ready.recv_many(&mut answers, 1024).await > 0 {
        // Grouped by engine, in the order they finished within each.
        answers.sort_by(|a, b| a.reply.as_str().cmp(b.reply.as_str()).then(a.one.cmp(&b.one)));
        for group in answers.chunk_by(|a, b| a.reply == b.reply && a.one == b.one) {
            let size = if group[0].one { 1 } else { wire::CHECKS_PER_MESSAGE };
            for part in group.chunks(size) {
                let payload = match part {
                    [a] if a.one => wire::encode(&a.result),
                    _ => wire::encode(&part.iter().map(|a| &a.result).collect::<Vec<_>>()),
                };
                if let Err(e) = client.publish(part[0].reply.clone(), payload.into()).await {
                    tracing::warn!(error = %e, "returning check results");
                }
            }
        }
        answers.clear();
    }
}

/// Waits until every check in flight has finished (all permits are back).
async fn drain(limit: &Semaphore, concurrency: usize) {
    let _ = limit.acquire_many(u32::try_from(concurrency).unwrap_or(u32::MAX)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn check(check_id: u64, timeout_ms: u64) -> CheckWork {
        let object = jaque_core::ObjectId::new(format!("o{check_id}")).unwrap();
        CheckWork { check_id, object, probe: Probe::Tcp { addr: "127.0.0.1:9".into() }, timeout_ms }
    }

    #[test]
    fn every_check_of_a_message_waits_with_the_message_s_answer_and_comes_out_once() {
        let mut w = Waiting::with_rng(SmallRng::seed_from_u64(7));
        w.take(Taken { work: Batch::Many((1..=3).map(|i| check(i, 1_000)).collect()), answer: "e1" });
        w.take(Taken { work: Batch::One(check(4, 1_000)), answer: "e2" });
        let mut out: Vec<(u64, &str)> = std::iter::from_fn(|| w.next()).map(|(c, a)| (c.check_id, a)).collect();
        out.sort();
        assert_eq!(out, [(1, "e1"), (2, "e1"), (3, "e1"), (4, "e2")]);
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn a_tcp_connect_is_ok_to_a_listening_port_and_refused_at_a_closed_one() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = open.local_addr().unwrap().to_string();
        // A port on this host connects at once: the first poll has the answer.
        assert!(matches!(connect(&addr).now_or_never(), Some(Ok(()))), "{addr}");
        let port = open.local_addr().unwrap().port();
        assert!(connect(&format!("localhost:{port}")).await.is_ok(), "a host name goes the runtime's way");
        drop(open);
        let refused = connect(&addr).now_or_never().expect("refused at once");
        assert_eq!(refused.unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
        assert!(connect("127.0.0.1:notaport").await.is_err());
    }

    fn tcp_work(addr: &str) -> CheckWork {
        let object = jaque_core::ObjectId::new("web").unwrap();
        CheckWork { check_id: 7, object, probe: Probe::Tcp { addr: addr.into() }, timeout_ms: 5_000 }
    }

    #[tokio::test]
    async fn a_tcp_check_to_a_port_on_this_host_is_done_when_started_and_anything_else_is_left_to_await() {
        let prober = Prober::new(None).unwrap();
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        let Started::Done(ok) = prober.start(tcp_work(&format!("127.0.0.1:{port}"))) else {
            panic!("a local connect is done at once")
        };
        assert_eq!(
            (ok.check_id, ok.state, ok.output.as_str()),
            (7, State::Ok, &*format!("connected to 127.0.0.1:{port}"))
        );
        // A host name needs the resolver: left to await, with the same result.
        let Started::Running(check) = prober.start(tcp_work(&format!("localhost:{port}"))) else {
            panic!("a host name is resolved on the runtime")
        };
        assert_eq!(check.await.state, State::Ok);
        drop(open);
        let Started::Done(refused) = prober.start(tcp_work(&format!("127.0.0.1:{port}"))) else {
            panic!("a refused local connect is done at once")
        };
        assert_eq!(refused.state, State::Critical);
        assert!(refused.output.starts_with(&format!("connect 127.0.0.1:{port}: ")), "{}", refused.output);
        let http = CheckWork {
            probe: Probe::Http { url: SensitiveUrl::new(format!("http://127.0.0.1:{port}/")), expect_status: None },
            ..tcp_work("")
        };
        let Started::Running(check) = prober.start(http) else { panic!("an http probe is awaited") };
        assert_eq!(check.await.state, State::Critical, "nothing listens there any more");
    }

    #[tokio::test]
    async fn with_one_slot_each_check_starts_on_the_slot_the_last_one_freed_and_the_loop_ends_after_the_last() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        // A host name: each check runs on a task that holds the one slot, so every start after the first waits
        // for a slot to free.
        let work = (1..=5).map(|check_id| CheckWork { check_id, ..tcp_work(&format!("localhost:{port}")) });
        let (tx, taken) = mpsc::unbounded_channel();
        let (answer, mut results) = mpsc::unbounded_channel();
        tx.send(Taken { work: Batch::Many(work.collect()), answer }).unwrap();
        drop(tx);
        let run = run_taken(Prober::new(None).unwrap(), taken, 1);
        tokio::time::timeout(Duration::from_secs(60), run).await.expect("the loop ends once every check is done");
        let mut done: Vec<(u64, State)> =
            std::iter::from_fn(|| results.try_recv().ok()).map(|r| (r.check_id, r.state)).collect();
        done.sort();
        assert_eq!(done, (1..=5).map(|i| (i, State::Ok)).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_tcp_connect_still_in_progress_is_left_to_the_runtime_until_it_completes() {
        // A listener whose accept queue is full drops new SYNs: a connect to it stays in progress until the
        // queue has room and the SYN is sent again (after ~1 s).
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        listener.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
        listener.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap().to_string();
        let mut queued = 0;
        let pending = loop {
            let mut c = Box::pin(connect(&addr));
            match (&mut c).now_or_never() {
                Some(r) => r.expect("connects while the queue has room"),
                None => break c,
            }
            queued += 1;
            assert!(queued < 16, "the accept queue never filled");
        };
        let listener = std::net::TcpListener::from(listener);
        for _ in 0..queued {
            listener.accept().unwrap();
        }
        pending.await.expect("connects once the queue has room");
    }
}
