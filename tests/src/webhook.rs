//! A webhook receiver for the notifier's tests: an HTTP server on a free 127.0.0.1 port that verifies the
//! Standard Webhooks signature of every request (an invalid or missing one is recorded, answered 400, and
//! fails the test at the next look at the deliveries), records every delivery it accepts (id, timestamp, body,
//! when), and can be told, per path, to answer 500, 429 with `Retry-After`, 410 or a redirect for a while, or
//! to hold requests unanswered (recorded as received) so a test knows sends are in flight at a fault.
//! Every path is an endpoint of its own: `url("/a")` and `url("/b")` are two webhooks on one server.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How a path answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// 200, and the delivery is recorded.
    Ok,
    /// This status (500, 503, …), nothing recorded.
    Status(u16),
    /// 429 with `Retry-After: <secs>`.
    TooMany { retry_after_secs: u64 },
    /// 410 Gone.
    Gone,
    /// 302 to `/followed`, which records any request it gets (a sender must not follow).
    Redirect,
    /// Record the delivery as received, and answer 200 only once the path's mode changes: the sender's
    /// request stays in flight meanwhile.
    Hold,
}

/// A delivery the receiver accepted (answered 2xx).
#[derive(Clone, Debug)]
pub struct Delivery {
    pub path: String,
    pub id: String,
    pub timestamp: u64,
    pub raw: String,
    pub body: serde_json::Value,
    pub at: Instant,
    /// Whether it carried a `webhook-signature` (every one is verified when the receiver has a key).
    pub signed: bool,
}

/// Any request, with what it was answered.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub path: String,
    pub id: String,
    pub status: u16,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    modes: BTreeMap<String, Mode>,
    deliveries: Vec<Delivery>,
    attempts: Vec<Attempt>,
    invalid: Vec<String>,
    followed: u64,
    /// Requests held unanswered right now, per path.
    held: BTreeMap<String, usize>,
    /// Requests ever held, per path.
    held_total: BTreeMap<String, usize>,
}

struct Shared {
    key: Option<Vec<u8>>,
    inner: Mutex<Inner>,
    changed: Condvar,
    /// Bumped on every mode change: held requests wait on it.
    modes: tokio::sync::watch::Sender<u64>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// The signature a Standard Webhooks sender puts on `id.timestamp.body` with `key`.
pub fn sign(key: &[u8], id: &str, timestamp: u64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

impl Receiver {
    /// A receiver that demands a valid signature by `secret` (`whsec_<base64>`) on every request, or, with
    /// `None`, expects unsigned ones.
    pub fn start(secret: Option<&str>) -> Receiver {
        let key = secret.map(|s| STANDARD.decode(s.strip_prefix("whsec_").expect("a whsec_ secret")).unwrap());
        let shared = Arc::new(Shared {
            key,
            inner: Mutex::default(),
            changed: Condvar::new(),
            modes: tokio::sync::watch::Sender::new(0),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let thread = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Receiver { addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn set_mode(&self, path: &str, mode: Mode) {
        self.lock().modes.insert(path.to_string(), mode);
        self.shared.modes.send_modify(|v| *v += 1);
    }

    /// Requests to `path` held unanswered right now (`Mode::Hold`; one whose sender died is no longer held).
    pub fn held(&self, path: &str) -> usize {
        self.lock().held.get(path).copied().unwrap_or(0)
    }

    /// Requests to `path` ever held: across one spell of `Mode::Hold`, every send that was in flight then.
    pub fn held_total(&self, path: &str) -> usize {
        self.lock().held_total.get(path).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails the test if any request came with a missing or invalid signature.
    pub fn assert_signatures_valid(&self) {
        let inner = self.lock();
        assert!(inner.invalid.is_empty(), "requests with an invalid signature: {:?}", inner.invalid);
    }

    /// Every delivery accepted at `path`, in arrival order (and every signature valid so far).
    pub fn deliveries(&self, path: &str) -> Vec<Delivery> {
        self.assert_signatures_valid();
        self.lock().deliveries.iter().filter(|d| d.path == path).cloned().collect()
    }

    pub fn delivery_count(&self, path: &str) -> usize {
        self.assert_signatures_valid();
        self.lock().deliveries.iter().filter(|d| d.path == path).count()
    }

    /// Every request to `path`, whatever it was answered.
    pub fn attempts(&self, path: &str) -> Vec<Attempt> {
        self.lock().attempts.iter().filter(|a| a.path == path).cloned().collect()
    }

    /// Requests that followed a redirect to `/followed`.
    pub fn followed(&self) -> u64 {
        self.lock().followed
    }

    /// Waits (at most `timeout`) until `f` holds over the deliveries so far; whether it did. Woken by every
    /// request, so a benchmark measures arrivals, not a polling interval.
    pub fn wait_until(&self, timeout: Duration, mut f: impl FnMut(&[Delivery]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            if f(&inner.deliveries) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            inner = self.shared.changed.wait_timeout(inner, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checks the Standard Webhooks headers: an id, a timestamp within five minutes, and (with a key) one `v1`
/// signature in the list that matches, compared in constant time.
fn verify(key: Option<&[u8]>, headers: &axum::http::HeaderMap, body: &str) -> Result<(String, u64, bool), String> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let id = get("webhook-id").ok_or("no webhook-id")?;
    let ts: u64 = get("webhook-timestamp").and_then(|t| t.parse().ok()).ok_or("no webhook-timestamp")?;
    if ts.abs_diff(unix_now()) > 300 {
        return Err(format!("webhook-timestamp {ts} is more than 5 minutes from now"));
    }
    let sig = get("webhook-signature");
    let Some(key) = key else {
        return match sig {
            None => Ok((id, ts, false)),
            Some(s) => Err(format!("signed ({s}) though the sender has no secret")),
        };
    };
    let sig = sig.ok_or("no webhook-signature")?;
    let ok = sig.split(' ').filter_map(|s| s.strip_prefix("v1,")).any(|b64| {
        let Ok(given) = STANDARD.decode(b64) else { return false };
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        mac.update(format!("{id}.{ts}.{body}").as_bytes());
        mac.verify_slice(&given).is_ok()
    });
    if ok {
        Ok((id, ts, true))
    } else {
        Err(format!("signature {sig} does not match {id}.{ts}.<body>"))
    }
}

async fn handle(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path().to_string();
    let mode = match record(&shared, &path, &headers, &body) {
        Ok(mode) => mode,
        Err(answer) => return answer.into_response(),
    };
    let code = |s: u16| axum::http::StatusCode::from_u16(s).unwrap();
    match mode {
        Mode::Ok => (code(200), "").into_response(),
        Mode::Status(s) => (code(s), "").into_response(),
        Mode::Gone => (code(410), "gone").into_response(),
        Mode::TooMany { retry_after_secs } => {
            (code(429), [("retry-after", retry_after_secs.to_string())], "slow down").into_response()
        }
        Mode::Redirect => (code(302), [("location", "/followed".to_string())], "moved").into_response(),
        Mode::Hold => {
            // Counted down however the request ends: answered, or dropped with its connection.
            struct Unhold(Arc<Shared>, String);
            impl Drop for Unhold {
                fn drop(&mut self) {
                    let mut inner = self.0.inner.lock().unwrap_or_else(|e| e.into_inner());
                    *inner.held.entry(self.1.clone()).or_default() -= 1;
                    self.0.changed.notify_all();
                }
            }
            let _unhold = Unhold(shared.clone(), path.clone());
            let mut modes = shared.modes.subscribe();
            loop {
                let still =
                    shared.inner.lock().unwrap_or_else(|e| e.into_inner()).modes.get(&path) == Some(&Mode::Hold);
                if !still || modes.changed().await.is_err() {
                    break;
                }
            }
            (code(200), "").into_response()
        }
    }
}

/// Verifies and records one request; the mode it is to be answered by, or the answer to an invalid one.
fn record(
    shared: &Shared,
    path: &str,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<Mode, (axum::http::StatusCode, String)> {
    let at = Instant::now();
    let raw = String::from_utf8_lossy(body).into_owned();
    let mut inner = shared.inner.lock().unwrap_or_else(|e| e.into_inner());
    shared.changed.notify_all();
    if path == "/followed" {
        inner.followed += 1;
        return Err((axum::http::StatusCode::OK, "followed".into()));
    }
    let (id, timestamp, signed) = match verify(shared.key.as_deref(), headers, &raw) {
        Ok(v) => v,
        Err(why) => {
            inner.invalid.push(format!("{path}: {why}"));
            return Err((axum::http::StatusCode::BAD_REQUEST, why));
        }
    };
    let mode = inner.modes.get(path).copied().unwrap_or(Mode::Ok);
    let status = match mode {
        Mode::Ok | Mode::Hold => 200,
        Mode::Status(s) => s,
        Mode::TooMany { .. } => 429,
        Mode::Gone => 410,
        Mode::Redirect => 302,
    };
    inner.attempts.push(Attempt { path: path.to_string(), id: id.clone(), status, at });
    if matches!(mode, Mode::Ok | Mode::Hold) {
        let body = serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null);
        inner.deliveries.push(Delivery { path: path.to_string(), id, timestamp, raw, body, at, signed });
    }
    if mode == Mode::Hold {
        *inner.held.entry(path.to_string()).or_default() += 1;
        *inner.held_total.entry(path.to_string()).or_default() += 1;
    }
    Ok(mode)
}
