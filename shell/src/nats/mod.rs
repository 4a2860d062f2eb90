//! Connecting to NATS (credentials, TLS) and the small facts about its messages the shell needs; the subjects
//! jaque talks on (`subjects`).

pub mod subjects;

use async_nats::{Client, ConnectOptions, Event, HeaderMap, ServerAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// NATS connection options shared by the queue and coordination clients.
#[derive(Clone, Debug, Default)]
pub struct NatsAuth {
    pub creds: Option<PathBuf>,
    pub user: Option<(String, String)>,
    pub token: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

/// A connected client and the URL it was made for (for messages an operator reads).
#[derive(Clone)]
pub struct NatsLink {
    pub url: String,
    pub client: Client,
    /// Whether the connection is up, as the client reports it (it reconnects by itself).
    pub state: watch::Receiver<LinkState>,
}

/// What a follower needs to know of its connection: a consumer made before a disconnect may be gone on the
/// server (ephemeral consumers do not survive a restart), and the client would make it again by itself from
/// where it stood, which for a membership watch misses the keys that expired meanwhile. So a follower makes
/// its own again, once the connection is back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkState {
    pub connected: bool,
    /// Times the connection was lost since the start.
    pub disconnects: u64,
}

/// How often the client pings its server: a quarter of `-heartbeat-ttl` (within 1 s and the client's default
/// of 60 s). The client gives a connection up when two pings are unanswered, so a server that is stopped
/// (SIGSTOP, a frozen VM: the TCP connection stays open) is noticed within three quarters of the ttl, before
/// this process's own key expires: it reconnects to another server of the cluster and keeps its membership.
/// With the default 60 s it would hold on to the frozen server for minutes, seeing nothing.
pub fn ping_interval(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

const TLS_HINT: &str = "check -nats-tls-ca, -nats-tls-cert and -nats-tls-key";

/// The last publish or subscribe the server refused for want of permission, as it said it. A refused publish is
/// not an error at the call (NATS reports it asynchronously, and the request just goes unanswered), so errors
/// that may come from one carry it, through `explain`.
static REFUSED: Mutex<Option<String>> = Mutex::new(None);

/// `msg`, with the server's last permissions violation when there was one: what an operator needs to fix it.
pub fn explain(msg: &str) -> String {
    match REFUSED.lock().unwrap_or_else(|e| e.into_inner()).as_deref() {
        Some(v) => {
            format!("{msg} (the NATS server refused: {v}; check this user's permissions, docs/nats-permissions.md)")
        }
        None => msg.to_string(),
    }
}

pub async fn connect(url: &str, auth: &NatsAuth, name: &str, ping_interval: Duration) -> Result<NatsLink, String> {
    let (state_tx, state) = watch::channel(LinkState { connected: true, disconnects: 0 });
    let state_tx = Arc::new(state_tx);
    let server = url.to_string();
    let mut opts = ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(5))
        .ping_interval(ping_interval)
        .event_callback(move |event| {
            let (state_tx, server) = (state_tx.clone(), server.clone());
            async move {
                match &event {
                    Event::ServerError(e) => {
                        let text = e.to_string();
                        if text.contains("Permissions Violation") {
                            tracing::error!(error = %text, "the NATS server refused a publish or subscribe: check this user's permissions");
                            let text = text.trim_start_matches("nats: ").to_string();
                            *REFUSED.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
                        }
                    }
                    Event::Disconnected => {
                        tracing::warn!(server, "lost the NATS connection; reconnecting");
                        state_tx.send_modify(|s| {
                            s.connected = false;
                            s.disconnects += 1;
                        });
                    }
                    // Also sent for the first connection, when the state already says so.
                    Event::Connected => {
                        state_tx.send_if_modified(|s| {
                            if s.connected {
                                return false;
                            }
                            tracing::info!(server, "reconnected to NATS");
                            s.connected = true;
                            true
                        });
                    }
                    _ => {}
                }
            }
        });
    if let Some(path) = &auth.creds {
        opts = opts.credentials_file(path).await.map_err(|e| format!("-nats-creds {}: {e}", path.display()))?;
    }
    if let Some((user, password)) = &auth.user {
        opts = opts.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &auth.token {
        opts = opts.token(token.clone());
    }
    if let Some(ca) = &auth.tls_ca {
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &auth.tls_client {
        opts = opts.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
    }
    // `-coordination`/`-queue` may list several servers of one cluster (checked by the cli).
    let servers = url
        .split(',')
        .map(|u| u.trim().parse::<ServerAddr>().map_err(|e| format!("NATS server {u:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let client = opts.connect(servers).await.map_err(|e| {
        let text = e.to_string();
        // A failed TLS handshake (a certificate the CA did not sign, a client certificate the server refuses)
        // comes back as an I/O error carrying the TLS alert: it is still a TLS question.
        let lower = text.to_ascii_lowercase();
        let tls_failed = ["certificate", "tls", "handshake", "alert"].iter().any(|w| lower.contains(w));
        let hint = match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation | async_nats::ConnectErrorKind::Authentication => {
                "check -nats-token, -nats-user/-nats-password or -nats-creds"
            }
            async_nats::ConnectErrorKind::Tls => TLS_HINT,
            async_nats::ConnectErrorKind::Io if tls_failed => TLS_HINT,
            _ => "is nats-server running there?",
        };
        format!("cannot connect to NATS at {url}: {text} ({hint})")
    })?;
    Ok(NatsLink { url: url.to_string(), client, state })
}

/// Whether a KV stream message is a put (not a delete, purge or an expiry marker).
pub fn kv_is_put(headers: Option<&HeaderMap>) -> bool {
    let Some(h) = headers else { return true };
    h.get("KV-Operation").is_none() && h.get("Nats-Marker-Reason").is_none()
}
