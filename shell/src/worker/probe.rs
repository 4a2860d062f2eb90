//! Running one check: the probe with its timeout (`http`: GET, 2xx/3xx ok unless one status is expected;
//! `tcp`: connect; `exec`: a plugin from `-plugin-dir`, Nagios exit codes, killed at its timeout, `plugins`
//! says what it gets). A timeout is critical. A check's output passes through the probe's `scrub`: no
//! credential of its url is ever in it.

use super::metrics::{PLUGIN_OUTPUT_DISCARDED, WORKER_CHECKS};
use super::plugins;
use futures_util::future::Either;
use jaque_core::{CheckResult, CheckWork, Probe, SensitiveUrl, State};
use socket2::{Domain, Protocol, Socket, Type};
use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

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
