//! The HTTP listener on `-listen`: plain HTTP, or HTTPS with rustls (`-tls-cert`, `-tls-key`). What an
//! exposed server needs against abuse is set here and in `layers`: at most `MAX_CONNECTIONS` open connections
//! (the rest wait in the kernel's backlog), a request's head read within `HEAD_TIMEOUT` (a slowloris client,
//! or an idle keep-alive connection, is closed), a TLS handshake within `HANDSHAKE_TIMEOUT`, every request
//! answered within `REQUEST_TIMEOUT` (408) and at most `MAX_IN_FLIGHT` handled at once. On the signal the
//! listener closes and each connection ends after the request it is serving.

use axum::http::StatusCode;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// Open connections at most; fewer when the process may open fewer files (`RLIMIT_NOFILE`, less 256 for the
/// rest of the process). An idle connection costs a few KiB, so the bound is on memory too.
pub const MAX_CONNECTIONS: usize = 16_384;
pub const MAX_IN_FLIGHT: usize = 512;
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may go on serving after the signal.
const DRAIN: Duration = Duration::from_secs(5);

static REFUSED: AtomicU64 = AtomicU64::new(0);

pub fn refused_total() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Loads `-tls-cert` (PEM, the chain, leaf first) and `-tls-key` (PEM: PKCS#8, PKCS#1 or SEC1): an error
/// that says which file and why, before anything starts.
pub fn load_tls(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let read = |p: &Path, what: &str| std::fs::read(p).map_err(|e| format!("{what} {}: {e}", p.display()));
    let cert_pem = read(cert, "-tls-cert")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("-tls-cert {}: not a PEM certificate chain: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("-tls-cert {}: no certificate in it (PEM \"BEGIN CERTIFICATE\")", cert.display()));
    }
    let key_pem = read(key, "-tls-key")?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("-tls-key {}: no PEM private key in it: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| format!("-tls-cert and -tls-key: {e} (does the key belong to the certificate?)"))?;
    Ok(Arc::new(config))
}

fn max_connections() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given and reads nothing else.
    let files = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    MAX_CONNECTIONS.min(files.saturating_sub(256)).max(16)
}

/// The limits every request passes through, as tower/axum layers: a request timeout answered 408 and a
/// bound on the requests handled at once (the others wait, within their timeout).
pub fn layers(app: Router) -> Router {
    app.layer(tower::limit::GlobalConcurrencyLimitLayer::new(MAX_IN_FLIGHT))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, REQUEST_TIMEOUT))
}

/// Serves `app` on `listener` until `shutdown` turns true.
pub async fn run(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let tls = tls.map(TlsAcceptor::from);
    let permits = Arc::new(Semaphore::new(max_connections()));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.map_err(|e| e.to_string())?,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, say: wait a moment rather than spin.
                tracing::warn!(error = %e, "accepting an HTTP connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (tls, app, shutdown) = (tls.clone(), app.clone(), shutdown.clone());
        connections.spawn(async move {
            let _permit = permit;
            match tls {
                None => connection(tcp, app, shutdown).await,
                Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => connection(stream, app, shutdown).await,
                    Ok(Err(e)) => {
                        REFUSED.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, "TLS handshake failed");
                    }
                    Err(_) => {
                        REFUSED.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("TLS handshake took too long");
                    }
                },
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, async { while connections.join_next().await.is_some() {} }).await;
    Ok(())
}

async fn connection<I>(io: I, app: Router, mut shutdown: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT);
    let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(conn);
    // The select only says which came first: the guard `wait_for` yields must not live across the await.
    let signalled = tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "HTTP connection");
            }
            false
        }
        _ = shutdown.wait_for(|s| *s) => true,
    };
    if signalled {
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    }
}
