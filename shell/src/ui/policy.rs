//! The notification policy over the API (`jaque_core::policy`, docs/design.md §9): `GET /api/policy` and
//! `GET /api/silences` render it from the log reader; the writes (receivers, routes and windows under
//! `/api/policy`, silences at `/api/silences`) turn a body in the API's words (durations like `"2h"`, times
//! RFC 3339) into one `Change` on the policy's key, written as any write is (`api::submit`: token, route,
//! `Idempotency-Key`, ingress and claims, the outcome as the status). The API shows what it takes: a GET's
//! receiver, route or window is a body a PUT takes back.

use super::api::{self, Ask, Refused};
use super::views::{self, Lookup, Rendered, UiRequest};
use super::Api;
use crate::clock::now;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use jaque_core::labels::Selector;
use jaque_core::policy::{
    Change, ChangeError, Day, Escalation, Name, Policy, Receiver, ReceiverKind, Route, Schedule, SecretRef, Silence,
    Window,
};
use jaque_core::time::{millis, rfc3339_millis};
use jaque_core::{CommandId, CommandKind, LogReader, ObjectId, Outcome, Time};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Which part of the policy a read renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `GET /api/policy`: everything, at the reader's log position.
    Whole,
    /// `GET /api/silences`.
    Silences,
}

/// `GET /api/policy`: the policy in force at `log_position`.
#[derive(Serialize)]
struct PolicyJson<'a> {
    log_position: u64,
    receivers: Vec<&'a Receiver>,
    routes: Vec<RouteJson<'a>>,
    silences: Vec<SilenceJson<'a>>,
    windows: Vec<WindowJson<'a>>,
}

/// `GET /api/silences`.
#[derive(Serialize)]
struct SilencesJson<'a> {
    log_position: u64,
    silences: Vec<SilenceJson<'a>>,
}

/// A silence as the API shows it: its times in RFC 3339, and whether it holds at the log's time.
#[derive(Serialize)]
struct SilenceJson<'a> {
    name: &'a Name,
    selector: &'a Selector,
    starts_at: String,
    ends_at: String,
    author: &'a str,
    comment: &'a str,
    active: bool,
}

#[derive(Serialize)]
struct RouteJson<'a> {
    selector: &'a Selector,
    receivers: &'a [Name],
    #[serde(rename = "continue")]
    continue_: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_interval: Option<String>,
    escalations: Vec<EscalationJson<'a>>,
}

#[derive(Serialize)]
struct EscalationJson<'a> {
    after: String,
    receivers: &'a [Name],
}

#[derive(Serialize)]
struct WindowJson<'a> {
    name: &'a Name,
    selector: &'a Selector,
    schedule: ScheduleJson<'a>,
    comment: &'a str,
}

#[derive(Serialize)]
struct ScheduleJson<'a> {
    days: &'a [Day],
    start: &'a str,
    duration: String,
    time_zone: &'a str,
}

impl<'a> SilenceJson<'a> {
    fn of(s: &'a Silence, at: Time) -> SilenceJson<'a> {
        SilenceJson {
            name: &s.name,
            selector: &s.selector,
            starts_at: rfc3339_millis(s.starts_at),
            ends_at: rfc3339_millis(s.ends_at),
            author: &s.author,
            comment: &s.comment,
            active: s.holds_at(at),
        }
    }
}

impl<'a> RouteJson<'a> {
    fn of(r: &'a Route) -> RouteJson<'a> {
        let step = |e: &'a Escalation| EscalationJson { after: views::duration(e.after_ms), receivers: &e.receivers };
        RouteJson {
            selector: &r.selector,
            receivers: &r.receivers,
            continue_: r.continue_,
            repeat_interval: r.repeat_interval_ms.map(views::duration),
            escalations: r.escalations.iter().map(step).collect(),
        }
    }
}

impl<'a> WindowJson<'a> {
    fn of(w: &'a Window) -> WindowJson<'a> {
        let schedule = ScheduleJson {
            days: &w.schedule.days,
            start: &w.schedule.start,
            duration: views::duration(w.schedule.duration_ms),
            time_zone: &w.schedule.time_zone,
        };
        WindowJson { name: &w.name, selector: &w.selector, schedule, comment: &w.comment }
    }
}

/// Renders a read of the policy in force at `reader`'s position (`views::objects` asks it, in the loop that holds
/// the log). Its types always serialize.
pub fn render(reader: &LogReader, part: Part) -> Option<Vec<u8>> {
    let (policy, log_position) = (reader.policy(), reader.position());
    let silences = policy.silences.values().map(|s| SilenceJson::of(s, reader.log_time())).collect();
    if part == Part::Silences {
        return serde_json::to_vec(&SilencesJson { log_position, silences }).ok();
    }
    let routes = policy.routes.iter().map(RouteJson::of).collect();
    let windows = policy.windows.values().map(WindowJson::of).collect();
    // A receiver is shown as the log holds it: its secret is a reference (a file or a variable on the notifier's
    // host), never the secret, and a URL with credentials is refused before it gets there.
    let receivers: Vec<&Receiver> = policy.receivers.values().collect();
    serde_json::to_vec(&PolicyJson { log_position, receivers, routes, silences, windows }).ok()
}

async fn read(s: &Api, part: Part) -> Response {
    match api::ask(s, |reply| UiRequest::Objects { lookup: Lookup::Policy(part), reply }).await {
        Some(Rendered { body: Some(body), .. }) => api::json_bytes(body),
        Some(Rendered { body: None, .. }) => {
            api::error(StatusCode::INTERNAL_SERVER_ERROR, "unavailable", "rendering the policy failed")
        }
        None => api::no_reader(),
    }
}

/// `GET /api/policy`.
pub(super) async fn get_policy(State(s): State<Arc<Api>>) -> Response {
    read(&s, Part::Whole).await
}

/// `GET /api/silences`.
pub(super) async fn list_silences(State(s): State<Arc<Api>>) -> Response {
    read(&s, Part::Silences).await
}

// The bodies. Absent optional fields take their defaults; `null` is refused as any other wrong type (a GET
// leaves out what is unset, so what it shows goes back as it is).

/// `PUT /api/policy/receivers/{name}`: the receiver without its name. A struct rather than an enum tagged by
/// `kind` as core's, so an error names its field (serde buffers a tagged enum's fields and loses where).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiverBody {
    kind: ReceiverKindName,
    url: String,
    #[serde(default, deserialize_with = "present")]
    secret: Option<SecretBody>,
}

/// `{"file": "/abs/path"}` or `{"env": "NAME"}`: a map of one of them, said so when it is not.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretBody {
    #[serde(default, deserialize_with = "present")]
    file: Option<String>,
    #[serde(default, deserialize_with = "present")]
    env: Option<String>,
}

impl SecretBody {
    fn reference(self) -> Result<SecretRef, Refused> {
        match (self.file, self.env) {
            (Some(path), None) => Ok(SecretRef::File(path)),
            (None, Some(var)) => Ok(SecretRef::Env(var)),
            _ => Err((
                StatusCode::BAD_REQUEST,
                "invalid body: secret: name a file ({\"file\": \"/abs/path\"}) or an environment variable \
                 ({\"env\": \"NAME\"}) on the notifier's host, one of them"
                    .into(),
            )),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReceiverKindName {
    Webhook,
}

/// One of `PUT /api/policy/routes`' list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteBody {
    #[serde(default)]
    selector: Selector,
    receivers: Vec<Name>,
    #[serde(default, rename = "continue")]
    continue_: bool,
    #[serde(default, deserialize_with = "present")]
    repeat_interval: Option<String>,
    #[serde(default)]
    escalations: Vec<EscalationBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EscalationBody {
    after: String,
    receivers: Vec<Name>,
}

/// `POST /api/silences` (with an optional `name`) and `PUT /api/silences/{name}` (without).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SilenceBody {
    selector: Selector,
    #[serde(default, deserialize_with = "present")]
    starts_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    ends_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    duration: Option<String>,
    author: String,
    #[serde(default)]
    comment: String,
    #[serde(default, deserialize_with = "present")]
    name: Option<Name>,
}

/// `PUT /api/policy/windows/{name}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowBody {
    selector: Selector,
    schedule: ScheduleBody,
    #[serde(default)]
    comment: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleBody {
    #[serde(default)]
    days: Vec<Day>,
    start: String,
    duration: String,
    time_zone: String,
}

/// An optional field that, when given, is a value: `null` is refused, not taken as absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A body, or a 400 saying where it is wrong (`routes[2].escalations[0].after: ...`) and how. `what` names the
/// body when it is a list (its items' paths begin with `[i]`).
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>, what: &str) -> Result<T, Refused> {
    let body = api::body_bytes(body)?;
    let bad =
        |e: String| (StatusCode::BAD_REQUEST, format!("invalid body: {}", jaque_core::secret::redact_urls_in(&e)));
    let mut de = serde_json::Deserializer::from_slice(&body);
    let parsed: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        match at.as_str() {
            "." => bad(e.inner().to_string()),
            _ => bad(format!("{what}{at}: {}", e.inner())),
        }
    })?;
    de.end().map_err(|e| bad(e.to_string()))?;
    Ok(parsed)
}

/// The `{name}` of a path.
fn path_name(name: Result<Path<String>, PathRejection>) -> Result<Name, Refused> {
    let bad = |e: String| (StatusCode::BAD_REQUEST, e);
    let Path(name) = name.map_err(|e| bad(e.body_text()))?;
    Name::new(name).map_err(|e| bad(e.to_string()))
}

fn instant(what: &str, s: &str) -> Result<Time, Refused> {
    api::rfc3339(what, s).map(Time).map_err(|e| (StatusCode::BAD_REQUEST, e))
}

fn duration_ms(what: &str, s: &str) -> Result<u64, Refused> {
    api::duration(what, s).map(millis).map_err(|e| (StatusCode::BAD_REQUEST, e))
}

fn route(i: usize, r: RouteBody) -> Result<Route, Refused> {
    let repeat_interval_ms =
        r.repeat_interval.map(|d| duration_ms(&format!("routes[{i}].repeat_interval"), &d)).transpose()?;
    let escalations = r
        .escalations
        .into_iter()
        .enumerate()
        .map(|(j, e)| {
            let after_ms = duration_ms(&format!("routes[{i}].escalations[{j}].after"), &e.after)?;
            Ok(Escalation { after_ms, receivers: e.receivers })
        })
        .collect::<Result<_, Refused>>()?;
    Ok(Route { selector: r.selector, receivers: r.receivers, continue_: r.continue_, repeat_interval_ms, escalations })
}

/// A silence from its body: from `starts_at` (default `now`) until `ends_at`, or for `duration`.
fn silence(name: Name, b: SilenceBody, now: Time) -> Result<Silence, Refused> {
    let starts_at = b.starts_at.map(|t| instant("starts_at", &t)).transpose()?.unwrap_or(now);
    let ends_at = match (b.ends_at, b.duration) {
        (Some(t), None) => instant("ends_at", &t)?,
        (None, Some(d)) => starts_at + std::time::Duration::from_millis(duration_ms("duration", &d)?),
        _ => {
            let reason = "a silence ends at ends_at (RFC 3339, e.g. 2026-01-31T18:00:00Z) or lasts a duration (e.g. 2h): give one of them";
            return Err((StatusCode::BAD_REQUEST, reason.into()));
        }
    };
    Ok(Silence { name, selector: b.selector, starts_at, ends_at, author: b.author, comment: b.comment })
}

/// The name of a silence posted without one: made of the command's id, so a retry with the same
/// `Idempotency-Key` names the same silence (and is answered as the first), and two posts never share one.
fn silence_name(id: &CommandId) -> Name {
    let hash = Sha256::digest(id.as_str().as_bytes());
    let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    Name::new(format!("silence-{hex}")).expect("silence- and 16 hex digits is a name")
}

/// What core answers a change that names nothing with (`ChangeError::NotFound`, as `rejected`: a policy command
/// is applied or rejected), for the deletes, which the API answers 404 as it does a delete of an absent object.
fn not_found_reason(change: &Change) -> Option<String> {
    let name = match change {
        Change::DeleteReceiver { name } | Change::ExpireSilence { name } | Change::DeleteWindow { name } => name,
        _ => return None,
    };
    Some(ChangeError::NotFound { what: change.what(), name: name.clone() }.to_string())
}

/// The rules a change keeps whatever the policy in force, checked as core checks them: a policy of the change
/// alone, with a stand-in for each receiver it names. A body that breaks one is a 400 before anything goes out, as
/// a put's definition is, and so never answered as the repeat of an earlier write with its `Idempotency-Key`.
/// What depends on the policy in force (a receiver that exists, one no route names) is the engine's to say.
fn check_alone(change: &Change) -> Result<(), Refused> {
    let mut alone = Policy::default();
    match change {
        Change::PutReceiver { receiver } => {
            alone.receivers.insert(receiver.name.clone(), receiver.clone());
        }
        Change::SetRoutes { routes } => {
            let named =
                routes.iter().flat_map(|r| r.receivers.iter().chain(r.escalations.iter().flat_map(|e| &e.receivers)));
            for name in named {
                let kind = ReceiverKind::Webhook { url: "https://stand-in.invalid/".into(), secret: None };
                alone.receivers.insert(name.clone(), Receiver { name: name.clone(), kind });
            }
            alone.routes = routes.clone();
        }
        Change::PutSilence { silence } => {
            alone.silences.insert(silence.name.clone(), silence.clone());
        }
        Change::PutWindow { window } => {
            alone.windows.insert(window.name.clone(), window.clone());
        }
        Change::DeleteReceiver { .. } | Change::ExpireSilence { .. } | Change::DeleteWindow { .. } => {}
    }
    alone.validate().map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))
}

/// A policy write: `change` (given the command's id) on the policy's key, through `api::submit`.
async fn change(
    s: &Api,
    headers: &HeaderMap,
    change: impl FnOnce(&CommandId) -> Result<Change, Refused>,
) -> Result<(CommandId, Outcome), Response> {
    let mut missing = None;
    let command = |id: &CommandId| -> Ask {
        let change = change(id)?;
        check_alone(&change)?;
        missing = not_found_reason(&change);
        Ok((ObjectId::policy(), CommandKind::Policy { change: Box::new(change) }))
    };
    let (id, outcome) = api::submit(s, headers, command).await?;
    let outcome = match outcome {
        Outcome::Rejected { reason } if missing.as_ref() == Some(&reason) => {
            Outcome::NotFound { command_id: id.clone() }
        }
        other => other,
    };
    Ok((id, outcome))
}

fn answer(written: Result<(CommandId, Outcome), Response>) -> Response {
    match written {
        Ok((_, outcome)) => api::outcome_response(&outcome),
        Err(refused) => refused,
    }
}

type PathName = Result<Path<String>, PathRejection>;
type Body = Result<Bytes, BytesRejection>;

/// `PUT /api/policy/receivers/{name}`.
pub(super) async fn put_receiver(
    State(s): State<Arc<Api>>,
    name: PathName,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(
        change(&s, &headers, |_| {
            let name = path_name(name)?;
            let b: ReceiverBody = parse(body, "")?;
            let kind = match b.kind {
                ReceiverKindName::Webhook => {
                    ReceiverKind::Webhook { url: b.url, secret: b.secret.map(SecretBody::reference).transpose()? }
                }
            };
            Ok(Change::PutReceiver { receiver: Receiver { name, kind } })
        })
        .await,
    )
}

/// `DELETE /api/policy/receivers/{name}`.
pub(super) async fn delete_receiver(State(s): State<Arc<Api>>, name: PathName, headers: HeaderMap) -> Response {
    answer(change(&s, &headers, |_| Ok(Change::DeleteReceiver { name: path_name(name)? })).await)
}

/// `PUT /api/policy/routes`: the whole ordered list.
pub(super) async fn put_routes(State(s): State<Arc<Api>>, headers: HeaderMap, body: Body) -> Response {
    answer(
        change(&s, &headers, |_| {
            let routes: Vec<RouteBody> = parse(body, "routes")?;
            let routes = routes.into_iter().enumerate().map(|(i, r)| route(i, r)).collect::<Result<_, _>>()?;
            Ok(Change::SetRoutes { routes })
        })
        .await,
    )
}

/// `POST /api/silences`: answered with the outcome and, when applied, the silence's name.
pub(super) async fn post_silence(State(s): State<Arc<Api>>, headers: HeaderMap, body: Body) -> Response {
    let mut named = None;
    let written = change(&s, &headers, |id| {
        let mut b: SilenceBody = parse(body, "")?;
        let name = b.name.take().unwrap_or_else(|| silence_name(id));
        named = Some(name.clone());
        Ok(Change::PutSilence { silence: silence(name, b, now())? })
    })
    .await;
    match (written, named) {
        (Ok((_, outcome @ Outcome::Applied { .. })), Some(name)) => {
            #[derive(Serialize)]
            struct Named<'a> {
                #[serde(flatten)]
                outcome: &'a Outcome,
                name: &'a Name,
            }
            Json(Named { outcome: &outcome, name: &name }).into_response()
        }
        (written, _) => answer(written),
    }
}

/// `PUT /api/silences/{name}`: adds or replaces it.
pub(super) async fn put_silence(State(s): State<Arc<Api>>, name: PathName, headers: HeaderMap, body: Body) -> Response {
    answer(
        change(&s, &headers, |_| {
            let name = path_name(name)?;
            let b: SilenceBody = parse(body, "")?;
            if b.name.is_some() {
                let reason = "invalid body: name: the path names the silence (PUT /api/silences/{name}); leave it out";
                return Err((StatusCode::BAD_REQUEST, reason.into()));
            }
            Ok(Change::PutSilence { silence: silence(name, b, now())? })
        })
        .await,
    )
}

/// `DELETE /api/silences/{name}`: expires it now (one not started yet is removed).
pub(super) async fn expire_silence(State(s): State<Arc<Api>>, name: PathName, headers: HeaderMap) -> Response {
    answer(change(&s, &headers, |_| Ok(Change::ExpireSilence { name: path_name(name)? })).await)
}

/// `PUT /api/policy/windows/{name}`. The schedule is checked here (its time zone, start and days), as the log's
/// readers check it.
pub(super) async fn put_window(State(s): State<Arc<Api>>, name: PathName, headers: HeaderMap, body: Body) -> Response {
    answer(
        change(&s, &headers, |_| {
            let name = path_name(name)?;
            let b: WindowBody = parse(body, "")?;
            let schedule = Schedule {
                days: b.schedule.days,
                start: b.schedule.start,
                duration_ms: duration_ms("schedule.duration", &b.schedule.duration)?,
                time_zone: b.schedule.time_zone,
            };
            let window = Window::new(name, b.selector, schedule, b.comment)
                .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
            Ok(Change::PutWindow { window })
        })
        .await,
    )
}

/// `DELETE /api/policy/windows/{name}`.
pub(super) async fn delete_window(State(s): State<Arc<Api>>, name: PathName, headers: HeaderMap) -> Response {
    answer(change(&s, &headers, |_| Ok(Change::DeleteWindow { name: path_name(name)? })).await)
}
