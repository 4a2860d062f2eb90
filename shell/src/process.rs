//! What every process answers over HTTP, whatever its roles: `/metrics` (the part of each loop in it, then what
//! the process counts itself) and `/healthz` (ready when every loop in it is), and the router that puts the
//! ui's API (`ui::api`) beside them with `-target ui`.

use crate::follow::RoleHandle;
use crate::metrics::{self, Exposition};
use crate::ui::{Api, Backend, Changes, UiRequest, Writes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, MethodRouter};
use axum::{Json, Router};
use serde_json::json;
use std::sync::Arc;

/// The parts of this process `/metrics` and `/healthz` ask.
pub struct Parts {
    /// The loop holding the log (an engine's or the ui's reader), if this process has one.
    pub backend: Option<Backend>,
    /// Roles with loops of their own (the sink, the notifier): their health and metrics join this process's.
    pub roles: Vec<RoleHandle>,
    pub worker: bool,
    /// Where the writes this process submits over NATS went, when it would submit them so (no engine in it,
    /// NATS coordination).
    pub writes: Option<Arc<Writes>>,
    /// The ui's event streams, with `-target ui`.
    pub changes: Option<Arc<Changes>>,
}

/// The process's routes and, with `-target ui`, the API's.
pub fn router(parts: Arc<Parts>, ui: Option<Arc<Api>>) -> Router {
    let own = routes().into_iter().fold(Router::new(), |r, (path, methods)| r.route(path, methods)).with_state(parts);
    match ui {
        Some(api) => own.merge(crate::ui::api::router(api)),
        None => own,
    }
}

/// The routes every process has, as a list so the OpenAPI document can be checked against them.
pub(crate) fn routes() -> Vec<(&'static str, MethodRouter<Arc<Parts>>)> {
    vec![("/metrics", get(metrics_text)), ("/healthz", get(healthz))]
}

async fn ask<T>(s: &Parts, make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> UiRequest) -> Option<T> {
    s.backend.as_ref()?.ask(make).await
}

async fn metrics_text(State(s): State<Arc<Parts>>) -> Response {
    let mut text = ask(&s, |reply| UiRequest::Metrics { reply }).await.unwrap_or_default();
    let mut process = Exposition::default();
    if let Some(writes) = &s.writes {
        writes.expose(&mut process);
    }
    if let Some(changes) = &s.changes {
        changes.expose(&mut process);
    }
    for role in &s.roles {
        text.push_str(&role.metrics().await);
    }
    process_metrics(&mut process, s.worker);
    text.push_str(&process.0);
    ([("content-type", "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// The process-wide part of `/metrics`: what every process counts, whatever its roles, and the worker's.
fn process_metrics(out: &mut Exposition, worker: bool) {
    metrics::expose_wire_errors(out);
    crate::follow::snapshots::expose(out);
    crate::coord::expose_followers(out);
    out.header(
        "jaque_http_unauthorized_total",
        "counter",
        "HTTP requests refused with 401 for a wrong or missing token (-read-token, -write-token, -metrics-token).",
    );
    out.sample("jaque_http_unauthorized_total", &[], crate::http::guard::unauthorized_total());
    out.header(
        "jaque_http_connections_refused_total",
        "counter",
        "HTTP connections closed before a request: a TLS handshake that failed or took too long.",
    );
    out.sample("jaque_http_connections_refused_total", &[], crate::http::serve::refused_total());
    if worker {
        crate::worker::expose(out);
    }
}

/// Ready when every part of the process is: the loop holding the log (engine or ui), and each role with a loop
/// of its own (a sink, a notifier). Not ready: 503 with the reasons, a role's prefixed by its name.
async fn healthz(State(s): State<Arc<Parts>>) -> Response {
    let mut parts: Vec<(bool, String)> = Vec::new();
    if s.backend.is_some() {
        parts.push(ask(&s, |reply| UiRequest::Health { reply }).await.unwrap_or((false, "stopping".into())));
    }
    for role in &s.roles {
        let (ready, status) = role.health().await;
        parts.push((ready, format!("{}: {status}", role.name)));
    }
    let waiting: Vec<&str> = parts.iter().filter(|(ready, _)| !ready).map(|(_, st)| st.as_str()).collect();
    if waiting.is_empty() {
        let status = match parts.as_slice() {
            [(_, only)] if s.roles.is_empty() => only.clone(),
            _ => "ready".to_string(),
        };
        return Json(json!({ "status": status })).into_response();
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": waiting.join("; ") }))).into_response()
}
