//! The ui's HTTP API (with `-target ui`): the JSON API (the notification policy's part in `policy`), its event
//! stream (`stream`), the OpenAPI document (`openapi`) and the status page (`page/`, embedded in the binary). Reads are
//! asked of the loop that holds the log (`views::Backend`); history is read from the sinks' store.
//! A write becomes a command and goes where `jaque_core::ui::write_route` says: the local engine, NATS (the
//! owner the ui's log view names, else the ingress queue group), or nowhere (503). Its HTTP status is
//! `jaque_core::ui::http_status` of the outcome.

use super::inbox::Inbox;
use super::policy;
use super::reader::Owners;
use super::stream::Changes;
use super::views::{self, Backend, Cursor, Lookup, PageQuery, Rendered, Sort, StateSet, UiRequest};
use crate::clock::{instant_at, now};
use crate::http::guard::{self, Tokens};
use crate::metrics::{self, Exposition};
use crate::nats::subjects::{cmd_subject, INGRESS_SUBJECT};
use crate::nats::{self, NatsLink};
use crate::sink::store::{parse_rfc3339_ms, HistoryQuery, Store};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put, MethodRouter};
use axum::{Json, Router};
use jaque_core::labels::{Labels, Selector};
use jaque_core::ui::{
    http_status, submit_to, Act, Heard, IngressWrite, Submit, SubmitTimeouts, WriteRoute, RETRY_AFTER_SECS,
};
use jaque_core::wire;
use jaque_core::{Command, CommandId, CommandKind, EngineConfig, ObjectDef, ObjectId, Outcome, Probe};
use serde::{Deserialize, Deserializer};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// What the ui's API works with.
pub struct Api {
    /// The loop holding the log (an engine's or the ui's reader).
    pub backend: Option<Backend>,
    pub route: WriteRoute,
    /// The coordination NATS connection, for writes of a ui without an engine.
    pub ingress: Option<NatsLink>,
    /// That ui's view of what is in force (from its log reader): the active cluster format, to refuse a write the
    /// cluster may not have yet, and who owns what, to send writes straight to their owner when `to_owner`.
    pub owners: Option<Owners>,
    /// `-ui-writes owner` (false: every write goes through ingress, the page's path).
    pub to_owner: bool,
    /// Where the writes submitted over NATS went.
    pub writes: Arc<Writes>,
    /// `-claim-timeout` and the waits around it (`jaque_core::ui::IngressWrite`).
    pub submit: SubmitTimeouts,
    /// Where the answers to those writes arrive (claims, declines, outcomes), with a ui that submits over NATS.
    pub inbox: Option<Inbox>,
    /// The tokens (the guard checks reads; writes are checked in `write`; the OpenAPI document says which).
    pub tokens: Tokens,
    /// Prefix of command ids this process makes (member id and incarnation: unique across restarts).
    pub id_prefix: String,
    pub next_id: AtomicU64,
    pub engine_cfg: EngineConfig,
    /// The store a ui reads history from (`-sink-store`).
    pub history: Option<Arc<Store>>,
    /// What the loop holding the log sends to event streams (`GET /api/stream`).
    pub changes: Option<Arc<Changes>>,
}

/// Where the writes a process submits over NATS went, and how often they were sent again.
#[derive(Default)]
pub struct Writes {
    to_owner: AtomicU64,
    to_ingress: AtomicU64,
    /// Attempts sent again: no engine claimed the one before in time, or one declined it.
    resent_unclaimed: AtomicU64,
    resent_declined: AtomicU64,
}

impl Writes {
    /// `jaque_ui_writes_total{via}` and `jaque_ui_write_resubmits_total{reason}`.
    pub fn expose(&self, m: &mut Exposition) {
        m.header(
            "jaque_ui_writes_total",
            "counter",
            "Writes this ui submitted, by where they went: straight to the owner, or through ingress.",
        );
        m.sample("jaque_ui_writes_total", &[("via", "owner")], self.to_owner.load(Ordering::Relaxed));
        m.sample("jaque_ui_writes_total", &[("via", "ingress")], self.to_ingress.load(Ordering::Relaxed));
        m.header(
            "jaque_ui_write_resubmits_total",
            "counter",
            "Write attempts this ui sent again through ingress: no engine claimed the one before within -claim-timeout, or an engine declined it.",
        );
        let resent = [("no_claim", &self.resent_unclaimed), ("declined", &self.resent_declined)];
        for (reason, n) in resent {
            m.sample("jaque_ui_write_resubmits_total", &[("reason", reason)], n.load(Ordering::Relaxed));
        }
    }
}

pub fn router(api: Arc<Api>) -> Router {
    routes().into_iter().fold(Router::new(), |r, (path, methods)| r.route(path, methods)).with_state(api)
}

/// Every route of the API, as a list so the OpenAPI document can be checked against it (`openapi`).
pub(crate) fn routes() -> Vec<(&'static str, MethodRouter<Arc<Api>>)> {
    vec![
        ("/", get(page_html)),
        ("/assets/page.js", get(page_js)),
        ("/assets/page.css", get(page_css)),
        ("/api/stream", get(event_stream)),
        ("/api/openapi.json", get(openapi)),
        ("/api/objects", get(list_objects)),
        ("/api/objects/{id}", put(put_object).delete(delete_object).get(get_object)),
        ("/api/objects/{id}/actions/{action}", post(action)),
        ("/api/objects/{id}/history", get(history)),
        ("/api/summary", get(summary)),
        ("/api/cluster", get(cluster)),
        ("/api/policy", get(policy::get_policy)),
        ("/api/policy/receivers/{name}", put(policy::put_receiver).delete(policy::delete_receiver)),
        ("/api/policy/routes", put(policy::put_routes)),
        ("/api/policy/windows/{name}", put(policy::put_window).delete(policy::delete_window)),
        ("/api/silences", get(policy::list_silences).post(policy::post_silence)),
        ("/api/silences/{name}", put(policy::put_silence).delete(policy::expire_silence)),
    ]
}

pub(super) fn error(status: StatusCode, outcome: &str, reason: impl Into<String>) -> Response {
    let mut resp = (status, Json(json!({ "outcome": outcome, "reason": reason.into() }))).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert("retry-after", HeaderValue::from(RETRY_AFTER_SECS));
    }
    resp
}

pub(super) fn bad_request(reason: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "rejected", reason)
}

pub(super) fn outcome_response(outcome: &Outcome) -> Response {
    let (status, retry_after) = http_status(outcome);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(outcome)).into_response();
    if retry_after {
        resp.headers_mut().insert("retry-after", HeaderValue::from(RETRY_AFTER_SECS));
    }
    resp
}

/// Asks the backend loop something; `None` when there is none or it is gone.
pub(super) async fn ask<T>(s: &Api, make: impl FnOnce(oneshot::Sender<T>) -> UiRequest) -> Option<T> {
    s.backend.as_ref()?.ask(make).await
}

/// Most events one history page holds, and how many when `limit` is not given.
const HISTORY_MAX: usize = 1000;
const HISTORY_DEFAULT: usize = 100;

/// `GET /api/objects/{id}/history?since=&until=&limit=&before=`: the object's events from the store, newest
/// first; `next` is the `before` of the following page (null on the last one).
async fn history(
    State(s): State<Arc<Api>>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<BTreeMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some(store) = &s.history else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({
                "error": "no history here: this ui has no store; run it with -sink-store URL (the store its sinks write)"
            })),
        )
            .into_response();
    };
    let object = match path_id(id) {
        Ok(o) => o,
        Err(e) => return bad_request(e),
    };
    let Ok(Query(params)) = params else { return bad_request("the query string does not decode") };
    let query = match history_query(object, &params) {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    match store.history(&query).await {
        Ok((events, more)) => {
            let next = if more { events.last().map(|e| e.seq) } else { None };
            Json(json!({ "object": query.object, "events": events, "next": next })).into_response()
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", jaque_core::sink::store_failure(&e)),
    }
}

fn history_query(object: ObjectId, params: &BTreeMap<String, String>) -> Result<HistoryQuery, String> {
    let mut q = HistoryQuery { object, since_ms: None, until_ms: None, before: None, limit: HISTORY_DEFAULT };
    for (k, v) in params {
        match k.as_str() {
            "since" => q.since_ms = Some(rfc3339("since", v)?),
            "until" => q.until_ms = Some(rfc3339("until", v)?),
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=HISTORY_MAX).contains(n))
                    .ok_or_else(|| format!("limit: {v:?} is not a number from 1 to {HISTORY_MAX}"))?
            }
            "before" => {
                q.before = Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| format!("before: {v:?} is not a log position (the `next` of a page)"))?,
                )
            }
            other => return Err(format!("unknown parameter {other:?}; history takes since, until, limit, before")),
        }
    }
    if let (Some(since), Some(until)) = (q.since_ms, q.until_ms) {
        if since > until {
            return Err("since is after until".into());
        }
    }
    Ok(q)
}

/// A time the API takes (a parameter, a field of a body): RFC 3339 in UTC, as Unix milliseconds; the error names
/// `what`.
pub(super) fn rfc3339(what: &str, v: &str) -> Result<u64, String> {
    parse_rfc3339_ms(v).map_err(|e| format!("{what}: {e}"))
}

/// A duration the API takes (`"30s"`, `"1h 30m"`); the error names `what`.
pub(super) fn duration(what: &str, s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{what}: {s:?} is not a duration ({e}); write e.g. 30s"))
}

fn parse_id(id: &str) -> Result<ObjectId, String> {
    ObjectId::new(id).map_err(|e| format!("object id: {e}"))
}

/// The `{id}` of a path; a path that does not decode (bad percent-encoding, not UTF-8) is a 400 like a bad id.
fn path_id(id: Result<Path<String>, PathRejection>) -> Result<ObjectId, String> {
    id.map_err(|e| e.body_text()).and_then(|Path(id)| parse_id(&id))
}

pub(super) fn json_bytes(body: Vec<u8>) -> Response {
    ([("content-type", "application/json")], body).into_response()
}

/// Objects one page holds when `limit` is not given, and at most. A page is rendered in the loop that holds the
/// log, so the maximum bounds how long one request holds it (10,000 objects: about 10 ms).
pub const PAGE_DEFAULT: usize = 1000;
pub const PAGE_MAX: usize = 10_000;
/// Longest `q`: an object id is at most 200 bytes, so a longer part of one matches nothing.
const Q_MAX: usize = ObjectId::MAX_LEN;

/// `GET /api/objects?limit=&state=&q=&selector=&sort=&cursor=`: one page as a JSON array; when more follow, a
/// `Link: <...>; rel="next"` header with the same parameters and the next cursor.
async fn list_objects(State(s): State<Arc<Api>>, RawQuery(raw): RawQuery) -> Response {
    let query = match page_query(raw.as_deref().unwrap_or_default()) {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    let link = |next: &Cursor| next_link(&query, next);
    match ask(&s, |reply| UiRequest::Objects { lookup: Lookup::Page(query.clone()), reply }).await {
        Some(Rendered { body: Some(body), next }) => {
            let mut resp = json_bytes(body);
            if let Some(v) = next.as_ref().and_then(|n| HeaderValue::from_str(&link(n)).ok()) {
                resp.headers_mut().insert("link", v);
            }
            resp
        }
        Some(Rendered { body: None, .. }) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, "unavailable", "rendering the object list failed")
        }
        None => no_reader(),
    }
}

fn page_query(raw: &str) -> Result<PageQuery, String> {
    let mut q = PageQuery {
        limit: PAGE_DEFAULT,
        states: StateSet::default(),
        q: String::new(),
        selector: None,
        sort: Sort::Id,
        after: None,
    };
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = None;
    for (k, v) in url::form_urlencoded::parse(raw.as_bytes()) {
        if k != "state" {
            if seen.iter().any(|s| *s == k) {
                return Err(format!("{k} is given twice"));
            }
            seen.push(k.to_string());
        }
        match k.as_ref() {
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=PAGE_MAX).contains(n))
                    .ok_or_else(|| format!("limit: {v:?} is not a number from 1 to {PAGE_MAX}"))?
            }
            "state" => {
                // `state=critical,warning` and `state=critical&state=warning` alike.
                for name in v.split(',') {
                    let state = views::STATES.into_iter().find(|s| s.as_str() == name).ok_or_else(|| {
                        format!("state: {name:?} is not a state; states are pending, ok, warning, critical, unknown")
                    })?;
                    q.states.insert(state);
                }
            }
            "q" => {
                if v.chars().count() > Q_MAX {
                    return Err(format!("q: at most {Q_MAX} characters (an object id is no longer)"));
                }
                q.q = v.to_ascii_lowercase();
            }
            "selector" => q.selector = selector(&v)?,
            "sort" => {
                q.sort = match v.as_ref() {
                    "id" => Sort::Id,
                    "severity" => Sort::Severity,
                    other => return Err(format!("sort: {other:?} is not an order; sort by id or severity")),
                }
            }
            "cursor" => {
                cursor = Some(Cursor::decode(&v).ok_or_else(|| {
                    format!("cursor: {v:?} is not a cursor; pass the one in the previous page's Link rel=\"next\"")
                })?)
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?}; the object list takes limit, state, q, selector, sort, cursor"
                ))
            }
        }
    }
    if let Some(c) = &cursor {
        if c.sort() != q.sort {
            return Err(format!(
                "cursor: it continues a list sorted by {}, this one is sorted by {}",
                c.sort().as_str(),
                q.sort.as_str()
            ));
        }
    }
    q.after = cursor;
    Ok(q)
}

/// A `selector=` parameter: `None` when it is empty (it picks every object). The error is `SelectorError`'s,
/// which begins with "selector" and says what is wrong where.
fn selector(text: &str) -> Result<Option<Selector>, String> {
    let selector = Selector::parse(text).map_err(|e| e.to_string())?;
    Ok((!selector.is_empty()).then_some(selector))
}

/// The next page: the same parameters, the next cursor. A reference relative to this server, as the request's.
fn next_link(q: &PageQuery, next: &Cursor) -> String {
    let mut params = url::form_urlencoded::Serializer::new(String::new());
    params.append_pair("limit", &q.limit.to_string());
    if !q.states.is_empty() {
        params.append_pair("state", &q.states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(","));
    }
    if !q.q.is_empty() {
        params.append_pair("q", &q.q);
    }
    if let Some(selector) = &q.selector {
        // Its canonical text: the same selector, parsed back.
        params.append_pair("selector", &selector.to_string());
    }
    if q.sort != Sort::Id {
        params.append_pair("sort", q.sort.as_str());
    }
    params.append_pair("cursor", &next.encode());
    format!("</api/objects?{}>; rel=\"next\"", params.finish())
}

pub(super) fn no_reader() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "no log reader in this process")
}

async fn get_object(State(s): State<Arc<Api>>, id: Result<Path<String>, PathRejection>) -> Response {
    let id = match path_id(id) {
        Ok(id) => id,
        Err(e) => return bad_request(e),
    };
    match ask(&s, |reply| UiRequest::Objects { lookup: Lookup::One(id.clone()), reply }).await {
        Some(Rendered { body: Some(body), .. }) => json_bytes(body),
        Some(Rendered { body: None, .. }) => {
            (StatusCode::NOT_FOUND, Json(json!({ "error": format!("no object {id}") }))).into_response()
        }
        None => no_reader(),
    }
}

/// `GET /api/summary?selector=`: how many objects (those the selector picks) are in each state (the header of a
/// status page), counted in one pass. Other parameters are passed over, as before there was one.
async fn summary(State(s): State<Arc<Api>>, RawQuery(raw): RawQuery) -> Response {
    let mut picked = None;
    for (k, v) in url::form_urlencoded::parse(raw.as_deref().unwrap_or_default().as_bytes()) {
        if k == "selector" {
            if picked.is_some() {
                return bad_request("selector is given twice");
            }
            picked = Some(match selector(&v) {
                Ok(s) => s,
                Err(e) => return bad_request(e),
            });
        }
    }
    match ask(&s, |reply| UiRequest::Objects { lookup: Lookup::Summary(picked.flatten()), reply }).await {
        Some(Rendered { body: Some(body), .. }) => json_bytes(body),
        Some(Rendered { body: None, .. }) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, "unavailable", "rendering the summary failed")
        }
        None => no_reader(),
    }
}

// The status page: hand-written HTML, CSS and JavaScript in `page/`, in the binary, nothing fetched from
// elsewhere. A build's assets never change while it runs, so the browser may keep them for a while.
const PAGE_HTML: &str = include_str!("page/index.html");
const PAGE_JS: &str = include_str!("page/page.js");
const PAGE_CSS: &str = include_str!("page/page.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([("content-type", content_type), ("cache-control", "no-cache")], body).into_response()
}

async fn page_html() -> Response {
    asset("text/html; charset=utf-8", PAGE_HTML)
}

async fn page_js() -> Response {
    asset("text/javascript; charset=utf-8", PAGE_JS)
}

async fn page_css() -> Response {
    asset("text/css; charset=utf-8", PAGE_CSS)
}

/// `GET /api/stream`: the log's changes as Server-Sent Events (`stream`).
async fn event_stream(State(s): State<Arc<Api>>) -> Response {
    match &s.changes {
        Some(changes) => changes.subscribe(),
        None => no_reader(),
    }
}

async fn openapi(State(s): State<Arc<Api>>) -> Response {
    Json(super::openapi::document(&s.tokens)).into_response()
}

async fn cluster(State(s): State<Arc<Api>>) -> Response {
    match ask(&s, |reply| UiRequest::Cluster { reply }).await {
        Some(v) => Json(v).into_response(),
        None => no_reader(),
    }
}

/// The body of `PUT /api/objects/{id}`. The alerting fields and labels (cluster format 3) are left unset when
/// absent or null, so a put without them is the definition a build before them wrote.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody {
    probe: Probe,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default, deserialize_with = "labels_field")]
    labels: Option<Labels>,
    #[serde(default, deserialize_with = "max_attempts_field")]
    max_attempts: Option<u64>,
    #[serde(default, deserialize_with = "retry_interval_field")]
    retry_interval: Option<String>,
    #[serde(default, deserialize_with = "recovery_attempts_field")]
    recovery_attempts: Option<u64>,
    #[serde(default, deserialize_with = "flapping_field")]
    flapping: Option<bool>,
    #[serde(default, deserialize_with = "parents_field")]
    parents: Option<Vec<String>>,
}

/// A deserializer of one field of `PutBody` whose errors begin with the field's name: serde's own messages
/// ("invalid type: string, expected u64") do not say which field. The position serde_json appends stays at
/// the end (it reads it back from the message).
macro_rules! named_field {
    ($fn:ident, $name:literal, $ty:ty) => {
        fn $fn<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            <$ty>::deserialize(d).map_err(|e| serde::de::Error::custom(format_args!(concat!($name, ": {}"), e)))
        }
    };
}

named_field!(labels_field, "labels", Option<Labels>);
named_field!(max_attempts_field, "max_attempts", Option<u64>);
named_field!(retry_interval_field, "retry_interval", Option<String>);
named_field!(recovery_attempts_field, "recovery_attempts", Option<u64>);
named_field!(flapping_field, "flapping", Option<bool>);
named_field!(parents_field, "parents", Option<Vec<String>>);

const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
const MAX_ATTEMPTS: u32 = jaque_core::alert::MAX_ATTEMPTS;
const MIN_INTERVAL: Duration = jaque_core::model::MIN_INTERVAL;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn parse_def(body: &[u8]) -> Result<ObjectDef, String> {
    // A parse error may quote a value: a url's credentials must not come back in it.
    let b: PutBody = serde_json::from_slice(body)
        .map_err(|e| format!("invalid body: {}", jaque_core::secret::redact_urls_in(&e.to_string())))?;
    let dur = |what: &str, s: &Option<String>| s.as_deref().map(|s| duration(what, s)).transpose();
    let ms = |d: Duration| -> u64 { d.as_millis().try_into().unwrap_or(u64::MAX) };
    let interval = dur("interval", &b.interval)?.unwrap_or(DEFAULT_INTERVAL);
    let timeout = dur("timeout", &b.timeout)?.unwrap_or(DEFAULT_TIMEOUT.min(interval));
    let attempts = |what: &str, n: Option<u64>| -> Result<Option<u32>, String> {
        n.map(|n| {
            u32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_ATTEMPTS).contains(n))
                .ok_or_else(|| format!("{what}: must be a whole number from 1 to {MAX_ATTEMPTS}, got {n}"))
        })
        .transpose()
    };
    let retry_interval = dur("retry_interval", &b.retry_interval)?;
    if let Some(retry) = retry_interval {
        // The core's rule (`ObjectDef::validate`), said in the API's words: durations, not milliseconds.
        let least = timeout.max(MIN_INTERVAL);
        if retry < least || retry > interval {
            return Err(format!(
                "retry_interval: must be at least the timeout ({}) and {}, and at most the interval ({}), got {}",
                humantime::format_duration(timeout),
                humantime::format_duration(MIN_INTERVAL),
                humantime::format_duration(interval),
                humantime::format_duration(retry),
            ));
        }
    }
    let def = ObjectDef {
        probe: b.probe,
        interval_ms: ms(interval),
        timeout_ms: ms(timeout),
        labels: b.labels.unwrap_or_default(),
        max_attempts: attempts("max_attempts", b.max_attempts)?,
        retry_interval_ms: retry_interval.map(ms),
        recovery_attempts: attempts("recovery_attempts", b.recovery_attempts)?,
        flapping: b.flapping,
        parents: b
            .parents
            .unwrap_or_default()
            .into_iter()
            .map(|p| ObjectId::new(p).map_err(|e| format!("parents: {e}")))
            .collect::<Result<_, _>>()?,
    };
    def.validate().map_err(|e| e.to_string())?;
    Ok(def)
}

async fn put_object(
    State(s): State<Arc<Api>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    let id = path_id(id);
    let kind = || {
        let def = parse_def(&body_bytes(body)?).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
        // Its parents as the engine checks them, here too: a bad body is a 400 before anything goes out, never
        // answered as the repeat of an earlier write with its Idempotency-Key.
        if let Ok(id) = &id {
            def.validate_parents(id).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        }
        Ok(CommandKind::Put { def })
    };
    write(&s, id.clone(), &headers, kind).await
}

/// A write's body, or why there is none: past axum's limit (2 MiB; a definition or a policy change is a few KiB,
/// the whole routes at most a few hundred), or a body that broke off.
pub(super) fn body_bytes(body: Result<axum::body::Bytes, BytesRejection>) -> Result<axum::body::Bytes, Refused> {
    body.map_err(|e| (e.status(), format!("the body: {}", e.body_text())))
}

async fn delete_object(
    State(s): State<Arc<Api>>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    write(&s, path_id(id), &headers, || Ok(CommandKind::Delete)).await
}

async fn action(
    State(s): State<Arc<Api>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let (id, action) = match path {
        Ok(Path((id, action))) => (parse_id(&id), action),
        Err(e) => (Err(e.body_text()), String::new()),
    };
    write(&s, id, &headers, || match action.as_str() {
        "pause" => Ok(CommandKind::Pause),
        "resume" => Ok(CommandKind::Resume),
        "check" => Ok(CommandKind::CheckNow),
        "ack" => Ok(CommandKind::Ack),
        "unack" => Ok(CommandKind::Unack),
        other => Err((
            StatusCode::BAD_REQUEST,
            format!("unknown action {other:?}; actions are pause, resume, check, ack, unack"),
        )),
    })
    .await
}

/// A write's failure before it goes out: the status and why.
pub(super) type Refused = (StatusCode, String);

/// What a write asks for once its token and route are checked: the command's target and kind, given the
/// command's id (a new silence is named after it).
pub(super) type Ask = Result<(ObjectId, CommandKind), Refused>;

/// One object write (`submit`), answered with its outcome.
async fn write(
    s: &Api,
    id: Result<ObjectId, String>,
    headers: &HeaderMap,
    kind: impl FnOnce() -> Result<CommandKind, Refused>,
) -> Response {
    let command = |_: &CommandId| Ok((id.map_err(|e| (StatusCode::BAD_REQUEST, e))?, kind()?));
    match submit(s, headers, command).await {
        Ok((_, outcome)) => outcome_response(&outcome),
        Err(refused) => refused,
    }
}

/// Every write, objects' and the policy's: token, then route (a process that cannot take writes answers 503
/// whatever the body), then the command's id (`Idempotency-Key`, else a new one), target and body, then the
/// command goes out and its outcome comes back (`Err`: the answer already, a refusal before anything went out).
pub(super) async fn submit(
    s: &Api,
    headers: &HeaderMap,
    command: impl FnOnce(&CommandId) -> Ask,
) -> Result<(CommandId, Outcome), Response> {
    if let Some(denied) = guard::write_denied(s.tokens.write.as_deref(), headers) {
        return Err(denied);
    }
    if s.route == WriteRoute::Reject {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "this ui has no engine and no NATS coordination to submit writes to; run it with -coordination nats://host:port",
        ));
    }
    let command_id = match headers.get("idempotency-key") {
        Some(v) => {
            match v.to_str().map_err(|e| e.to_string()).and_then(|v| CommandId::new(v).map_err(|e| e.to_string())) {
                Ok(id) => id,
                Err(e) => return Err(bad_request(format!("Idempotency-Key: {e}"))),
            }
        }
        None => {
            let n = s.next_id.fetch_add(1, Ordering::Relaxed);
            match CommandId::new(format!("{}-{n}", s.id_prefix)) {
                Ok(id) => id,
                Err(e) => return Err(error(StatusCode::INTERNAL_SERVER_ERROR, "unavailable", e.to_string())),
            }
        }
    };
    let (object, kind) = command(&command_id).map_err(|(status, reason)| error(status, "rejected", reason))?;
    let cmd = Command { id: command_id.clone(), object, kind, hop: 0 };
    let deadline = s.engine_cfg.write_timeout();
    let outcome = match s.route {
        WriteRoute::LocalEngine => {
            match tokio::time::timeout(deadline, ask(s, |reply| UiRequest::Write { cmd, reply })).await {
                Ok(Some(o)) => o,
                Ok(None) => Outcome::Unavailable { reason: "the engine is stopping".into() },
                Err(_) => Outcome::Unavailable { reason: "no outcome from the engine in time".into() },
            }
        }
        WriteRoute::Ingress => submit_nats(s, &cmd).await,
        WriteRoute::Reject => unreachable!("answered above"),
    };
    Ok((command_id, outcome))
}

/// A write of a ui without an engine, driven by `jaque_core::ui::IngressWrite`: the first attempt where
/// `jaque_core::ui::submit_to` says (the owner its log view names with `-ui-writes owner`, else ingress), every
/// other through `jaque.work.cmd.ingress`; an attempt no engine claims within `-claim-timeout` is sent again.
async fn submit_nats(s: &Api, cmd: &Command) -> Outcome {
    let (Some(link), Some(inbox)) = (&s.ingress, &s.inbox) else {
        return Outcome::Unavailable { reason: "no NATS coordination".into() };
    };
    // The engine that claims the write may be of an older build, which would apply what it can decode of a
    // command of a newer format: refused here, as this build's engines refuse it.
    if let Some(reason) = s.owners.as_ref().and_then(|o| {
        let active = o.borrow().active_format;
        (active > 0).then(|| jaque_core::format::refusal(&cmd.kind, active)).flatten()
    }) {
        return Outcome::Rejected { reason };
    }
    let owner = match s.owners.as_ref().filter(|_| s.to_owner) {
        Some(o) => match submit_to(o.borrow().ownership.as_deref(), &cmd.object) {
            Submit::Owner(owner) => Some(owner),
            Submit::Ingress => None,
        },
        None => None,
    };
    let payload: bytes::Bytes =
        if s.submit.claim.is_zero() { wire::encode(cmd) } else { wire::encode_claim_request(cmd) }.into();
    let mut write = IngressWrite::new(now(), s.submit, owner.is_some());
    let mut answers = inbox.listen();
    loop {
        while let Some(act) = write.poll_act() {
            match act {
                Act::Send { attempt } => {
                    let subject = match &owner {
                        Some(o) if write.goes_to_owner(attempt) => cmd_subject(&o.id),
                        _ => INGRESS_SUBJECT.to_string(),
                    };
                    let sent =
                        link.client.publish_with_reply(subject, answers.reply_subject(attempt), payload.clone()).await;
                    if let Err(e) = sent {
                        let reason = nats::explain(&format!("sending the write: {e}"));
                        write.handle(now(), Heard::Failed { attempt, reason });
                    }
                }
                Act::Done(mut outcome) => {
                    // Given up without an engine's answer: the server may have refused the publish (permissions),
                    // which NATS reports only to the connection; say so.
                    if let (false, Outcome::Unavailable { reason }) = (write.answered(), &mut outcome) {
                        *reason = nats::explain(reason);
                    }
                    let direct = owner.is_some() && write.attempts() == 1;
                    let via = if direct { &s.writes.to_owner } else { &s.writes.to_ingress };
                    via.fetch_add(1, Ordering::Relaxed);
                    s.writes.resent_unclaimed.fetch_add(u64::from(write.resent_unclaimed), Ordering::Relaxed);
                    s.writes.resent_declined.fetch_add(u64::from(write.resent_declined), Ordering::Relaxed);
                    if write.attempts() > 1 {
                        tracing::debug!(attempts = write.attempts(), command = %cmd.id, "write sent again");
                    }
                    return outcome;
                }
            }
        }
        let Some(deadline) = write.poll_timeout() else {
            return Outcome::Unavailable { reason: "internal: a write ended without an outcome".into() };
        };
        tokio::select! {
            answer = answers.recv() => match answer {
                Some((attempt, msg)) => write.handle(now(), heard(attempt, &msg)),
                None => write.handle(now(), Heard::Failed { attempt: write.attempts(), reason: "the ui is stopping".into() }),
            },
            _ = tokio::time::sleep_until(instant_at(deadline)) => write.handle_timeout(now()),
        }
    }
}

/// What one message on an attempt's reply subject says: a status from the server, or an engine's answer.
fn heard(attempt: u32, msg: &async_nats::Message) -> Heard {
    match msg.status {
        Some(async_nats::StatusCode::NO_RESPONDERS) => return Heard::NoResponders { attempt },
        Some(status) => {
            let reason = nats::explain(&format!("the NATS server answered the write with status {status}"));
            return Heard::Failed { attempt, reason };
        }
        None => {}
    }
    match wire::decode_answer(&msg.payload) {
        Ok(wire::Answer::Claimed { by }) => Heard::Claimed { attempt, by },
        Ok(wire::Answer::Declined { by, reason }) => Heard::Declined { attempt, by, reason },
        Ok(wire::Answer::Outcome(outcome)) => Heard::Answered { attempt, outcome },
        Err(e) => {
            metrics::wire_error("outcome");
            let outcome = Outcome::Unavailable { reason: format!("an engine answered garbage: {e}") };
            Heard::Answered { attempt, outcome }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: serde_json::Value) -> String {
        parse_def(body.to_string().as_bytes()).expect_err("refused")
    }

    #[test]
    fn a_put_takes_labels_and_the_alerting_fields_and_leaves_out_what_it_does_not_name() {
        let tcp = json!({"type": "tcp", "addr": "db:5432"});
        let def = parse_def(
            json!({"probe": tcp, "interval": "1m", "timeout": "2s", "labels": {"env": "prod", "example.com/team": ""},
                "max_attempts": 5, "retry_interval": "10s", "recovery_attempts": 2, "flapping": false})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(def.labels.iter().collect::<Vec<_>>(), [("env", "prod"), ("example.com/team", "")]);
        assert_eq!(
            (def.max_attempts, def.retry_interval_ms, def.recovery_attempts, def.flapping),
            (Some(5), Some(10_000), Some(2), Some(false))
        );
        let plain =
            parse_def(json!({"probe": tcp, "labels": null, "max_attempts": null}).to_string().as_bytes()).unwrap();
        assert_eq!(plain, ObjectDef::new(plain.probe.clone(), 30_000, 5_000), "nothing named: a format-1 definition");
        assert_eq!(plain.needs(), 1);
    }

    #[test]
    fn a_bad_alerting_field_or_label_is_refused_naming_it() {
        let tcp = json!({"type": "tcp", "addr": "db:5432"});
        let cases = [
            (json!({"probe": tcp, "labels": {"bad key": "x"}}), "labels: label key \"bad key\""),
            (json!({"probe": tcp, "labels": {"env": "-x"}}), "labels: label \"env\" value \"-x\""),
            (json!({"probe": tcp, "labels": ["env"]}), "labels: invalid type: sequence"),
            (json!({"probe": tcp, "max_attempts": 0}), "max_attempts: must be a whole number from 1 to 100, got 0"),
            (json!({"probe": tcp, "max_attempts": 101}), "max_attempts: must be a whole number from 1 to 100, got 101"),
            (json!({"probe": tcp, "max_attempts": "3"}), "max_attempts: invalid type: string"),
            (json!({"probe": tcp, "recovery_attempts": -1}), "recovery_attempts: invalid value: integer `-1`"),
            (json!({"probe": tcp, "flapping": "no"}), "flapping: invalid type: string"),
            (json!({"probe": tcp, "retry_interval": "soon"}), "retry_interval: \"soon\" is not a duration"),
            (
                json!({"probe": tcp, "interval": "1m", "timeout": "2s", "retry_interval": "2m"}),
                "retry_interval: must be at least the timeout (2s) and 100ms, and at most the interval (1m), got 2m",
            ),
            (json!({"probe": tcp, "timeout": "2s", "retry_interval": "1s"}), "retry_interval: must be at least"),
        ];
        for (body, want) in cases {
            let got = refused(body.clone());
            assert!(got.contains(want), "{body}: {got}");
        }
        // serde_json's position stays at the end, once.
        let got = refused(json!({"probe": tcp, "max_attempts": true}));
        assert_eq!(got.matches(" at line ").count(), 1, "{got}");
    }
}
