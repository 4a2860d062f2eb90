//! The notification policy in the files `jaque apply -f` and `jaque diff -f` read (issue 36, on issue 35's policy):
//! top-level `receivers`, `routes`, `windows` and `silences` beside `objects`, each item in the words of its API
//! write (the body of `PUT /api/policy/receivers/{name}`, one of `PUT /api/policy/routes`' list, …).
//!
//! ```yaml
//! receivers:
//!   git.oncall: {kind: webhook, url: "https://hooks.example.com/jaque", secret: {env: ONCALL_SECRET}}
//! routes:                          # the whole ordered list: the cluster's is replaced by it
//!   - {selector: team=db, receivers: [git.oncall], repeat_interval: 4h}
//! windows:
//!   git.tuesday: {selector: env=staging, schedule: {days: [tue], start: "02:00", duration: 2h, time_zone: Europe/Berlin}}
//! silences:
//!   git.migration: {selector: team=db, starts_at: "2026-02-01T22:00:00Z", duration: 4h, author: ana}
//! ```
//!
//! **Read and checked as the server checks them**, each error at its file, line and column: field names from the
//! API's own document (`ui::openapi`), every value into core's policy types (names, selectors, durations, time
//! zones, a silence's span), and once the cluster's policy is read the policy after the apply as a whole (a route
//! naming a receiver neither the files nor the cluster have). A silence in a file has fixed times (`ends_at`, or
//! `starts_at` with `duration`): a duration from now would start again at each apply.
//!
//! **Only differences are written**, compared in core's types with `GET /api/policy` (so `60m` and `1h`, or two
//! spellings of one selector, are the same): receivers, windows and silences by name, routes as the whole list,
//! and only when some file defines `routes` (no file: the cluster's routes are left alone). A silence without
//! `starts_at` is the same whatever its start (the time of the apply that made it); one that ended and the cluster
//! no longer lists is not written again.
//!
//! **Whose items a prune takes.** Policy items carry no labels, so an item's source is in its name: the part before
//! its first `.` (`git.oncall` is source `git`'s). With `--prune`, a receiver, window or silence whose name says
//! this source and that no file lists is deleted (a silence expired, if it has not ended); a name without a dot
//! belongs to no source and is never pruned, and a file of one source may not define a name that says another
//! (an error at its place), so no two sources, nor a person, can prune each other's items. The name is what the
//! API shows, so the rule is visible without a second record that could drift from the policy.

use super::apply::{hash_of, idempotency_key};
use super::files::{pos, FileError, Pos, Reader};
use jaque_core::labels::Selector;
use jaque_core::policy::{
    Day, Escalation, Name, Policy, PolicyError, Receiver, ReceiverKind, Route, Schedule, ScheduleError, Silence, Window,
};
use jaque_core::time::millis;
use jaque_core::Time;
use marked_yaml::types::Node;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Write;

/// The policy's top-level keys, each with the API's schema of one of its items.
pub const PARTS: [(&str, &str); 4] =
    [("receivers", "ReceiverBody"), ("routes", "Route"), ("windows", "WindowBody"), ("silences", "SilencePut")];

/// A receiver, window or silence as the files define it.
#[derive(Debug)]
pub struct Item<T> {
    pub name: Name,
    /// The body of its write, in the API's words.
    pub body: Value,
    pub parsed: T,
    pub at: Pos,
}

/// The routes as the files define them: the body of `PUT /api/policy/routes`, and where each route is.
#[derive(Debug)]
pub struct FileRoutes {
    body: Value,
    parsed: Vec<Route>,
    at: Vec<Pos>,
}

/// A silence from a file; `starts_given`: whether it names its start (else any start is the same).
#[derive(Debug)]
pub struct FileSilence {
    silence: Silence,
    starts_given: bool,
}

/// The policy the files define.
#[derive(Debug, Default)]
pub struct Desired {
    pub receivers: Vec<Item<Receiver>>,
    pub routes: Option<FileRoutes>,
    pub windows: Vec<Item<Window>>,
    pub silences: Vec<Item<FileSilence>>,
}

impl Desired {
    pub fn is_empty(&self) -> bool {
        self.receivers.is_empty() && self.routes.is_none() && self.windows.is_empty() && self.silences.is_empty()
    }

    fn names(&self) -> impl Iterator<Item = (&'static str, &Name, &Pos)> {
        let r = self.receivers.iter().map(|i| ("receiver", &i.name, &i.at));
        let w = self.windows.iter().map(|i| ("window", &i.name, &i.at));
        r.chain(w).chain(self.silences.iter().map(|i| ("silence", &i.name, &i.at)))
    }
}

/// What is wrong with an item: the field it is about (a path like `schedule.time_zone`; empty: the item) and why.
#[derive(Debug)]
pub struct Bad {
    field: String,
    message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> Bad {
    Bad { field: field.into(), message: message.into() }
}

fn path(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// An optional string field.
fn text<'v>(v: &'v Value, prefix: &str, key: &str) -> Result<Option<&'v str>, Bad> {
    match v.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(path(prefix, key), format!("{} is a string", path(prefix, key)))),
    }
}

fn required<'v>(v: &'v Value, prefix: &str, key: &str) -> Result<&'v str, Bad> {
    text(v, prefix, key)?.ok_or_else(|| bad(prefix, format!("{} is required", path(prefix, key))))
}

fn selector(v: &Value, key: &str) -> Result<Selector, Bad> {
    Selector::parse(text(v, "", key)?.unwrap_or("")).map_err(|e| bad(key, format!("{key}: {e}")))
}

fn duration_ms(field: &str, s: &str) -> Result<u64, Bad> {
    humantime::parse_duration(s)
        .map(millis)
        .map_err(|e| bad(field, format!("{field}: {s:?} is not a duration ({e}); write e.g. 30s")))
}

fn instant(field: &str, s: &str) -> Result<Time, Bad> {
    crate::sink::store::parse_rfc3339_ms(s).map(Time).map_err(|e| bad(field, format!("{field}: {e}")))
}

/// A list of receiver names.
fn names(v: &Value, prefix: &str, key: &str) -> Result<Vec<Name>, Bad> {
    let field = path(prefix, key);
    let list =
        v.get(key).and_then(Value::as_array).ok_or_else(|| bad(&field, format!("{field} is a list of names")))?;
    list.iter()
        .map(|n| n.as_str().ok_or(()).and_then(|s| Name::new(s).map_err(|_| ())))
        .collect::<Result<_, _>>()
        .map_err(|()| bad(&field, format!("{field}: each is a name (1 to 63 of a-z 0-9 - _ .)")))
}

/// The rules an item keeps whatever else the policy holds, checked as core checks them: a policy of the item
/// alone (with a stand-in for each receiver a route names). `field` says which field an error is about.
fn alone(fill: impl FnOnce(&mut Policy), field: impl Fn(&str) -> &'static str) -> Result<(), Bad> {
    let mut p = Policy::default();
    fill(&mut p);
    p.validate().map_err(|e| {
        let message = e.to_string();
        bad(field(&message), message)
    })
}

/// A receiver from its API body (a file's, or `GET /api/policy`'s, which names it too).
pub fn receiver(name: &Name, v: &Value) -> Result<Receiver, Bad> {
    let mut m: Map<String, Value> =
        v.as_object().cloned().ok_or_else(|| bad("", "a receiver is a mapping of kind, url and secret"))?;
    m.insert("name".into(), Value::String(name.to_string()));
    let r: Receiver = serde_json::from_value(Value::Object(m)).map_err(|e| {
        let field = if e.to_string().contains("variant") { "kind" } else { "" };
        bad(field, format!("receiver {name}: {e}"))
    })?;
    r.validate().map_err(|e| {
        let message = e.to_string();
        bad(if message.contains(": secret") { "secret" } else { "url" }, message)
    })?;
    Ok(r)
}

/// One route from its API form (a file's, or `GET /api/policy`'s).
pub fn route(v: &Value) -> Result<Route, Bad> {
    if !v.is_object() {
        return Err(bad("", "a route is a mapping of selector, receivers, continue, repeat_interval, escalations"));
    }
    let continue_ = match v.get("continue") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("continue", "continue is true or false")),
    };
    let repeat_interval_ms = text(v, "", "repeat_interval")?.map(|s| duration_ms("repeat_interval", s)).transpose()?;
    let mut escalations = Vec::new();
    match v.get("escalations") {
        None => {}
        Some(Value::Array(steps)) => {
            for (j, step) in steps.iter().enumerate() {
                let at = format!("escalations[{j}]");
                let after_ms = duration_ms(&path(&at, "after"), required(step, &at, "after")?)?;
                escalations.push(Escalation { after_ms, receivers: names(step, &at, "receivers")? });
            }
        }
        Some(_) => return Err(bad("escalations", "escalations is a list of {after, receivers}")),
    }
    let r = Route {
        selector: selector(v, "selector")?,
        receivers: names(v, "", "receivers")?,
        continue_,
        repeat_interval_ms,
        escalations,
    };
    alone(
        |p| {
            let named = r.receivers.iter().chain(r.escalations.iter().flat_map(|e| &e.receivers));
            for n in named {
                let kind = ReceiverKind::Webhook { url: "https://stand-in.invalid/".into(), secret: None };
                p.receivers.insert(n.clone(), Receiver { name: n.clone(), kind });
            }
            p.routes.push(r.clone());
        },
        |m| match m {
            _ if m.contains("repeat_interval") => "repeat_interval",
            _ if m.contains("escalation") => "escalations",
            _ => "receivers",
        },
    )?;
    Ok(r)
}

/// A window from its API body (a file's, or `GET /api/policy`'s).
pub fn window(name: &Name, v: &Value) -> Result<Window, Bad> {
    let s = v.get("schedule").filter(|s| s.is_object()).ok_or_else(|| {
        bad("schedule", "schedule is a mapping of days, start, duration and time_zone (it is required)")
    })?;
    let days: Vec<Day> = match s.get("days") {
        None => Vec::new(),
        Some(d) => serde_json::from_value(d.clone())
            .map_err(|_| bad("schedule.days", "schedule.days is a list of mon, tue, wed, thu, fri, sat, sun"))?,
    };
    let schedule = Schedule {
        days,
        start: required(s, "schedule", "start")?.to_string(),
        duration_ms: duration_ms("schedule.duration", required(s, "schedule", "duration")?)?,
        time_zone: required(s, "schedule", "time_zone")?.to_string(),
    };
    if let Err(e) = schedule.recurrence() {
        let field = match e {
            ScheduleError::Start(_) => "schedule.start",
            ScheduleError::Duration(_) => "schedule.duration",
            ScheduleError::TimeZone(_) => "schedule.time_zone",
            ScheduleError::Days(_) => "schedule.days",
        };
        return Err(bad(field, format!("window {name}: {e}")));
    }
    let comment = text(v, "", "comment")?.unwrap_or_default().to_string();
    let w =
        Window::new(name.clone(), selector(v, "selector")?, schedule, comment).map_err(|e| bad("", e.to_string()))?;
    alone(
        |p| {
            p.windows.insert(name.clone(), w.clone());
        },
        |_| "comment",
    )?;
    Ok(w)
}

/// A silence from its API form: a file's (fixed times: `ends_at`, or `starts_at` with `duration`; no start is
/// `now`, and said by the flag) or `GET /api/policy`'s (both times).
pub fn silence(name: &Name, v: &Value, now: Time) -> Result<(Silence, bool), Bad> {
    let starts = text(v, "", "starts_at")?.map(|s| instant("starts_at", s)).transpose()?;
    let ends_at =
        match (text(v, "", "ends_at")?, text(v, "", "duration")?, starts) {
            (Some(e), None, _) => instant("ends_at", e)?,
            (None, Some(d), Some(s)) => s + std::time::Duration::from_millis(duration_ms("duration", d)?),
            (None, Some(_), None) => {
                return Err(bad(
                    "duration",
                    "duration: a silence in a file has fixed times: give starts_at with the duration, or ends_at \
                 (a duration from now would start again at each apply)",
                ))
            }
            _ => return Err(bad(
                "",
                "a silence ends at ends_at (RFC 3339, e.g. 2026-01-31T18:00:00Z) or lasts duration from starts_at: \
                 give one of them",
            )),
        };
    let selector =
        Selector::parse(required(v, "", "selector")?).map_err(|e| bad("selector", format!("selector: {e}")))?;
    let s = Silence {
        name: name.clone(),
        selector,
        starts_at: starts.unwrap_or(now.min(ends_at)),
        ends_at,
        author: required(v, "", "author")?.to_string(),
        comment: text(v, "", "comment")?.unwrap_or_default().to_string(),
    };
    alone(
        |p| {
            p.silences.insert(name.clone(), s.clone());
        },
        |m| if m.contains("author") { "author" } else { "ends_at" },
    )?;
    Ok((s, starts.is_some()))
}

/// Where each field of a node is, by its path (`schedule.time_zone`, `escalations[0].after`).
fn places(file: &str, node: &Node, prefix: &str, out: &mut BTreeMap<String, Pos>) {
    match node {
        Node::Mapping(m) => {
            for (k, v) in m.iter() {
                let p = path(prefix, k.as_str());
                out.insert(p.clone(), pos(file, k.span()));
                places(file, v, &p, out);
            }
        }
        Node::Sequence(s) => {
            for (i, v) in s.iter().enumerate() {
                let p = format!("{prefix}[{i}]");
                out.insert(p.clone(), pos(file, v.span()));
                places(file, v, &p, out);
            }
        }
        Node::Scalar(_) => {}
    }
}

/// The API's schemas (`components.schemas` of its document), which name the fields an item may have.
pub struct Schemas(&'static Value);

impl Schemas {
    pub fn new() -> Schemas {
        Schemas(&crate::ui::openapi::base()["components"]["schemas"])
    }

    fn resolve<'a>(&'a self, s: &'a Value) -> &'a Value {
        match s.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/")) {
            Some(name) => self.resolve(&self.0[name]),
            None => s,
        }
    }

    /// The properties a schema names (those of every `oneOf` branch too) and whether it names them all.
    fn properties<'a>(&'a self, s: &'a Value) -> (BTreeMap<&'a str, &'a Value>, bool) {
        let s = self.resolve(s);
        let mut out: BTreeMap<&str, &Value> = BTreeMap::new();
        let mut closed = s.get("additionalProperties") == Some(&Value::Bool(false));
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            out.extend(p.iter().map(|(k, v)| (k.as_str(), v)));
        }
        for branch in s.get("oneOf").and_then(Value::as_array).into_iter().flatten() {
            let (more, c) = self.properties(branch);
            if !more.is_empty() {
                closed |= c;
                out.extend(more);
            }
        }
        (out, closed)
    }
}

impl Reader<'_> {
    /// Every field of `node` its schema does not name, said at its place with what is allowed there.
    fn unknown_fields(&mut self, schemas: &Schemas, node: &Node, schema: &Value) {
        let schema = schemas.resolve(schema);
        match node {
            Node::Mapping(m) => {
                let (props, closed) = schemas.properties(schema);
                for (k, v) in m.iter() {
                    match props.get(k.as_str()) {
                        Some(s) => self.unknown_fields(schemas, v, s),
                        None if closed && !props.is_empty() => {
                            let allowed: Vec<&str> = props.keys().copied().collect();
                            let what = format!("unknown field {:?}; allowed here: {}", k.as_str(), allowed.join(", "));
                            self.fail(Some(pos(&self.file, k.span())), what);
                        }
                        None => {}
                    }
                }
            }
            Node::Sequence(s) => {
                if let Some(items) = schema.get("items") {
                    s.iter().for_each(|n| self.unknown_fields(schemas, n, items));
                }
            }
            Node::Scalar(_) => {}
        }
    }

    /// An item's body as JSON (`${VAR}` substituted) and where its fields are; `None` when a field is unknown or a
    /// value cannot be read (said).
    fn item(&mut self, schemas: &Schemas, node: &Node, schema: &str) -> Option<(Value, BTreeMap<String, Pos>)> {
        let before = self.errors.len();
        self.unknown_fields(schemas, node, &schemas.0[schema]);
        let value = self.value(node)?;
        let mut at = BTreeMap::new();
        places(&self.file, node, "", &mut at);
        (self.errors.len() == before).then_some((value, at))
    }

    /// One file's `receivers`, `routes`, `windows` or `silences` (`part`), into `into`; `seen` holds where each
    /// name was first defined, so one defined in two places is said.
    pub fn policy_part(
        &mut self,
        schemas: &Schemas,
        part: &str,
        node: &Node,
        into: &mut Desired,
        seen: &mut BTreeMap<(String, String), Pos>,
        now: Time,
    ) {
        let key_at = pos(&self.file, node.span());
        let schema = PARTS.iter().find(|(p, _)| *p == part).map_or("", |(_, s)| s);
        let place = |at: &BTreeMap<String, Pos>, b: &Bad, item: &Pos| {
            let mut field = b.field.as_str();
            // The deepest place the files have on the field's path (`schedule` for a missing `schedule.start`).
            loop {
                if let Some(p) = at.get(field) {
                    return p.clone();
                }
                match field.rfind(['.', '[']) {
                    Some(i) => field = &field[..i],
                    None => return item.clone(),
                }
            }
        };
        if part == "routes" {
            let Some(list) = node.as_sequence() else {
                return self.fail(Some(key_at), "routes is a list of routes, tried in order".into());
            };
            if let Some(first) = seen.get(&("routes".into(), String::new())) {
                let what = format!("routes are defined again (first at {first}): they are one list, in one file");
                return self.fail(Some(key_at), what);
            }
            seen.insert(("routes".into(), String::new()), key_at);
            let mut routes = FileRoutes { body: Value::Array(Vec::new()), parsed: Vec::new(), at: Vec::new() };
            let mut ok = true;
            for (i, r) in list.iter().enumerate() {
                let item_at = pos(&self.file, r.span());
                let Some((body, at)) = self.item(schemas, r, schema) else {
                    ok = false;
                    continue;
                };
                match route(&body) {
                    Ok(parsed) => {
                        routes.parsed.push(parsed);
                        routes.at.push(at.get("receivers").cloned().unwrap_or(item_at));
                        if let Value::Array(a) = &mut routes.body {
                            a.push(body);
                        }
                    }
                    Err(b) => {
                        ok = false;
                        let p = place(&at, &b, &item_at);
                        let message = b.message.strip_prefix(&format!("route {i}: ")).unwrap_or(&b.message);
                        self.fail(Some(p), format!("routes[{i}]: {message}"));
                    }
                }
            }
            if ok {
                into.routes = Some(routes);
            }
            return;
        }
        let Some(map) = node.as_mapping() else {
            return self.fail(Some(key_at), format!("{part} is a mapping of names to {part}"));
        };
        let what = part.trim_end_matches('s');
        for (key, def) in map.iter() {
            let item_at = pos(&self.file, key.span());
            let name = match Name::new(key.as_str()) {
                Ok(n) => n,
                Err(e) => {
                    self.fail(Some(item_at), format!("{what} {e}"));
                    continue;
                }
            };
            if let Some(first) = seen.get(&(part.to_string(), name.to_string())) {
                self.fail(Some(item_at), format!("{what} {name} is defined again (first at {first})"));
                continue;
            }
            seen.insert((part.to_string(), name.to_string()), item_at.clone());
            let Some((body, at)) = self.item(schemas, def, schema) else { continue };
            let fail = |r: &mut Self, b: Bad| {
                let p = place(&at, &b, &item_at);
                let message =
                    if b.message.starts_with(what) { b.message } else { format!("{what} {name}: {}", b.message) };
                r.fail(Some(p), message);
            };
            match part {
                "receivers" => match receiver(&name, &body) {
                    Ok(parsed) => into.receivers.push(Item { name: name.clone(), body, parsed, at: item_at }),
                    Err(b) => fail(self, b),
                },
                "windows" => match window(&name, &body) {
                    Ok(parsed) => into.windows.push(Item { name: name.clone(), body, parsed, at: item_at }),
                    Err(b) => fail(self, b),
                },
                _ => match silence(&name, &body, now) {
                    Ok((silence, starts_given)) => {
                        let parsed = FileSilence { silence, starts_given };
                        into.silences.push(Item { name: name.clone(), body, parsed, at: item_at })
                    }
                    Err(b) => fail(self, b),
                },
            }
        }
    }
}

/// The policy the cluster has, as `GET /api/policy` shows it, in core's types (an item this build cannot read,
/// a newer server's, is `None`: never the same as a file's).
pub struct Current {
    position: u64,
    receivers: BTreeMap<Name, Option<Receiver>>,
    routes: Option<Vec<Route>>,
    windows: BTreeMap<Name, Option<Window>>,
    silences: BTreeMap<Name, Option<Silence>>,
}

impl Current {
    /// The cluster's policy from `GET /api/policy`'s body.
    pub fn read(body: &Value, now: Time) -> Current {
        fn named<T>(body: &Value, part: &str, read: impl Fn(&Name, &Value) -> Option<T>) -> BTreeMap<Name, Option<T>> {
            let items = body[part].as_array().into_iter().flatten();
            items
                .filter_map(|v| {
                    let name = Name::new(v["name"].as_str()?).ok()?;
                    let parsed = read(&name, v);
                    Some((name, parsed))
                })
                .collect()
        }
        let routes =
            body["routes"].as_array().map_or(Some(Vec::new()), |rs| rs.iter().map(|r| route(r).ok()).collect());
        Current {
            position: body["log_position"].as_u64().unwrap_or(0),
            receivers: named(body, "receivers", |n, v| receiver(n, v).ok()),
            routes,
            windows: named(body, "windows", |n, v| window(n, v).ok()),
            silences: named(body, "silences", |n, v| silence(n, v, now).ok().map(|(s, _)| s)),
        }
    }

    /// No policy: what a cluster without `GET /api/policy` (older than 0.3.0) has.
    pub fn none() -> Current {
        Current {
            position: 0,
            receivers: BTreeMap::new(),
            routes: Some(Vec::new()),
            windows: BTreeMap::new(),
            silences: BTreeMap::new(),
        }
    }
}

/// A policy write: `+` create, `~` change, `-` prune.
#[derive(Debug, PartialEq)]
pub struct PolicyWrite {
    pub sign: char,
    /// `receiver`, `routes`, `window`, `silence`.
    pub what: &'static str,
    pub name: String,
    pub method: reqwest::Method,
    pub path: String,
    pub body: Option<Value>,
    pub key: String,
}

impl PolicyWrite {
    /// What `diff` and `apply` call it: `receiver git.oncall`, `routes`.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            self.what.to_string()
        } else {
            format!("{} {}", self.what, self.name)
        }
    }
}

/// The policy part of a plan: its writes in the order they must go (receivers before the routes that name them,
/// routes before the receivers they stop naming are deleted).
#[derive(Debug, Default, PartialEq)]
pub struct PolicyPlan {
    pub writes: Vec<PolicyWrite>,
    pub unchanged: usize,
}

/// The source an item's name says: the part before its first `.`.
fn owner(name: &Name) -> Option<&str> {
    name.as_str().split_once('.').map(|(s, _)| s)
}

/// Items the files define under a name that says another source (`--source git` defining `ops.pager`).
pub fn foreign(d: &Desired, source: &str) -> Vec<FileError> {
    d.names()
        .filter_map(|(what, name, at)| {
            let other = owner(name).filter(|o| *o != source)?;
            Some(FileError {
                at: Some(at.clone()),
                message: format!(
                    "{what} {name}: a name's part before its first '.' is the source it belongs to ({other}), and \
                     this is source {source}: name it {source}.… or without a dot"
                ),
            })
        })
        .collect()
}

/// The policy's plan: what the files define against what the cluster has. `Err`: the policy after it would break
/// a rule (said at the file's place where there is one), nothing to send.
pub fn plan(
    d: &Desired,
    current: &Current,
    source: &str,
    prune: bool,
    now: Time,
) -> Result<PolicyPlan, Vec<FileError>> {
    let mut p = PolicyPlan::default();
    let mut buf = Vec::new();
    let against = current.position.to_string();
    let mut write = |sign: char, what: &'static str, name: &str, path: String, body: Option<&Value>| {
        let (method, verb) =
            if body.is_some() { (reqwest::Method::PUT, "put") } else { (reqwest::Method::DELETE, "delete") };
        let hash = body.map(|b| hash_of(b, &mut buf)).unwrap_or_default();
        let key = idempotency_key(source, &format!("{what}/{name}"), verb, &hash, &against);
        PolicyWrite { sign, what, name: name.to_string(), method, path, body: body.cloned(), key }
    };
    let segment = |n: &Name| n.as_str().to_string();
    let mut after = Policy {
        receivers: current.receivers.iter().filter_map(|(n, r)| Some((n.clone(), r.clone()?))).collect(),
        routes: current.routes.clone().unwrap_or_default(),
        silences: current.silences.iter().filter_map(|(n, s)| Some((n.clone(), s.clone()?))).collect(),
        windows: current.windows.iter().filter_map(|(n, w)| Some((n.clone(), w.clone()?))).collect(),
    };
    let sign = |have: bool| if have { '~' } else { '+' };
    let (mut puts, mut deletes) = (Vec::new(), Vec::new());
    for r in &d.receivers {
        let have = current.receivers.get(&r.name);
        after.receivers.insert(r.name.clone(), r.parsed.clone());
        if have.is_some_and(|h| h.as_ref() == Some(&r.parsed)) {
            p.unchanged += 1;
            continue;
        }
        let path = format!("/api/policy/receivers/{}", segment(&r.name));
        puts.push(write(sign(have.is_some()), "receiver", r.name.as_str(), path, Some(&r.body)));
    }
    if let Some(routes) = &d.routes {
        after.routes = routes.parsed.clone();
        if current.routes.as_ref() == Some(&routes.parsed) {
            p.unchanged += 1;
        } else {
            puts.push(write('~', "routes", "", "/api/policy/routes".into(), Some(&routes.body)));
        }
    }
    for w in &d.windows {
        let have = current.windows.get(&w.name);
        after.windows.insert(w.name.clone(), w.parsed.clone());
        if have.is_some_and(|h| h.as_ref() == Some(&w.parsed)) {
            p.unchanged += 1;
            continue;
        }
        let path = format!("/api/policy/windows/{}", segment(&w.name));
        puts.push(write(sign(have.is_some()), "window", w.name.as_str(), path, Some(&w.body)));
    }
    for s in &d.silences {
        let have = current.silences.get(&s.name);
        let want = &s.parsed.silence;
        let same = |h: &Silence| {
            let starts_at = if s.parsed.starts_given { want.starts_at } else { h.starts_at };
            *h == Silence { starts_at, ..want.clone() }
        };
        after.silences.insert(s.name.clone(), want.clone());
        let ended_and_gone = have.is_none() && want.ends_at <= now;
        if ended_and_gone || have.is_some_and(|h| h.as_ref().is_some_and(same)) {
            p.unchanged += 1;
            continue;
        }
        let path = format!("/api/silences/{}", segment(&s.name));
        puts.push(write(sign(have.is_some()), "silence", s.name.as_str(), path, Some(&s.body)));
    }
    if prune {
        let listed = |what: &str, n: &Name| d.names().any(|(w, name, _)| w == what && name == n);
        let ours = |what: &str, n: &Name| owner(n) == Some(source) && !listed(what, n);
        for n in current.windows.keys() {
            if ours("window", n) {
                after.windows.remove(n);
                deletes.push(write('-', "window", n.as_str(), format!("/api/policy/windows/{}", segment(n)), None));
            }
        }
        for (n, s) in &current.silences {
            // One that ended is kept listed for a while; expiring it again would write for nothing.
            let running = s.as_ref().is_none_or(|s| s.ends_at > now);
            if ours("silence", n) && running {
                after.silences.remove(n);
                deletes.push(write('-', "silence", n.as_str(), format!("/api/silences/{}", segment(n)), None));
            }
        }
        for n in current.receivers.keys() {
            if ours("receiver", n) {
                after.receivers.remove(n);
                let path = format!("/api/policy/receivers/{}", segment(n));
                deletes.push(write('-', "receiver", n.as_str(), path, None));
            }
        }
    }
    if let Err(e) = after.validate() {
        let at = match &e {
            PolicyError::Route { index, .. } => d.routes.as_ref().and_then(|r| r.at.get(*index).cloned()),
            PolicyError::Receiver { receiver: n, .. } => {
                d.receivers.iter().find(|i| i.name == *n).map(|i| i.at.clone())
            }
            PolicyError::Window { window: n, .. } => d.windows.iter().find(|i| i.name == *n).map(|i| i.at.clone()),
            PolicyError::Silence { silence: n, .. } => d.silences.iter().find(|i| i.name == *n).map(|i| i.at.clone()),
            _ => None,
        };
        let whose = if d.routes.is_none() && matches!(e, PolicyError::Route { .. }) {
            " (a route the cluster has: the files define no routes)"
        } else {
            ""
        };
        return Err(vec![FileError {
            at,
            message: format!("after this apply, the policy would break a rule: {e}{whose}"),
        }]);
    }
    p.writes = puts;
    p.writes.extend(deletes);
    Ok(p)
}

/// `diff`'s lines of the policy.
pub fn print_diff(out: &mut impl Write, p: &PolicyPlan) {
    for w in &p.writes {
        let _ = writeln!(out, "{} {}", w.sign, w.label());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(text: &str) -> Result<Desired, Vec<String>> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.yaml");
        std::fs::write(&p, text).unwrap();
        super::super::files::load(&[p], &|n| (n == "HOOK").then(|| "https://h.example/x".to_string()))
            .map(|l| l.policy)
            .map_err(|e| e.iter().map(|e| e.to_string().replace(&dir.path().display().to_string(), "")).collect())
    }

    const FILE: &str = "receivers:\n  git.oncall: {kind: webhook, url: \"${HOOK}\", secret: {env: S}}\n  git.team: {kind: webhook, url: \"https://t.example/\"}\nroutes:\n  - {selector: \"team=db\", receivers: [git.oncall], repeat_interval: 1h}\n  - {receivers: [git.team], escalations: [{after: 30m, receivers: [git.oncall]}]}\nwindows:\n  git.tue: {selector: env=staging, schedule: {days: [tue], start: \"02:00\", duration: 2h, time_zone: Europe/Berlin}}\nsilences:\n  git.db: {selector: team=db, starts_at: \"2030-01-01T00:00:00Z\", duration: 4h, author: ana}\n";

    /// The policy as `GET /api/policy` would show what `FILE` applied, in other spellings.
    fn shown() -> Value {
        json!({"log_position": 9,
            "receivers": [{"name": "git.oncall", "kind": "webhook", "url": "https://h.example/x", "secret": {"env": "S"}},
                          {"name": "git.team", "kind": "webhook", "url": "https://t.example/"}],
            "routes": [{"selector": "team = db", "receivers": ["git.oncall"], "continue": false, "repeat_interval": "60m", "escalations": []},
                       {"selector": "", "receivers": ["git.team"], "continue": false, "escalations": [{"after": "30m", "receivers": ["git.oncall"]}]}],
            "windows": [{"name": "git.tue", "selector": "env=staging", "schedule": {"days": ["tue"], "start": "02:00", "duration": "2h", "time_zone": "Europe/Berlin"}, "comment": ""}],
            "silences": [{"name": "git.db", "selector": "team=db", "starts_at": "2030-01-01T00:00:00.000Z", "ends_at": "2030-01-01T04:00:00.000Z", "author": "ana", "comment": "", "active": false}]})
    }

    #[test]
    fn what_the_cluster_shows_as_the_files_define_it_is_unchanged_and_a_prune_takes_only_its_source() {
        let d = load(FILE).unwrap();
        let now = Time(1_000);
        let empty = plan(&d, &Current::none(), "git", true, now).unwrap();
        let labels: Vec<String> = empty.writes.iter().map(|w| format!("{} {}", w.sign, w.label())).collect();
        assert_eq!(
            labels,
            ["+ receiver git.oncall", "+ receiver git.team", "~ routes", "+ window git.tue", "+ silence git.db"]
        );
        let same = plan(&d, &Current::read(&shown(), now), "git", true, now).unwrap();
        assert_eq!((same.writes.len(), same.unchanged), (0, 5), "{:?}", same.writes);
        // Changed, and another source's and a person's items beside this source's that the files dropped.
        let mut cluster = shown();
        cluster["windows"][0]["schedule"]["start"] = json!("03:00");
        cluster["routes"].as_array_mut().unwrap().pop();
        for (part, item) in [
            ("receivers", json!({"name": "git.old", "kind": "webhook", "url": "https://o.example/"})),
            ("receivers", json!({"name": "ops.pager", "kind": "webhook", "url": "https://o.example/"})),
            ("receivers", json!({"name": "by-hand", "kind": "webhook", "url": "https://o.example/"})),
            (
                "silences",
                json!({"name": "git.ended", "selector": "a=b", "starts_at": "1970-01-01T00:00:00Z", "ends_at": "1970-01-01T00:00:00.500Z", "author": "x", "comment": "", "active": false}),
            ),
        ] {
            cluster[part].as_array_mut().unwrap().push(item);
        }
        let p = plan(&d, &Current::read(&cluster, now), "git", true, now).unwrap();
        let labels: Vec<String> = p.writes.iter().map(|w| format!("{} {}", w.sign, w.label())).collect();
        assert_eq!(labels, ["~ routes", "~ window git.tue", "- receiver git.old"]);
        assert!(plan(&d, &Current::read(&cluster, now), "git", false, now).unwrap().writes.len() == 2);
        assert_eq!(p.writes[0].body.as_ref().unwrap()[0]["repeat_interval"], "1h", "the files' words are sent");
        // A key per write, another once the policy moved.
        let mut moved = cluster.clone();
        moved["log_position"] = json!(10);
        let q = plan(&d, &Current::read(&moved, now), "git", true, now).unwrap();
        assert_ne!(q.writes[0].key, p.writes[0].key);
        // A name of another source: refused before anything is sent.
        let e = foreign(&load("receivers:\n  ops.x: {kind: webhook, url: \"https://x.example/\"}\n").unwrap(), "git");
        assert!(e[0].to_string().contains("p.yaml:2:3: receiver ops.x: a name's part"), "{}", e[0]);
    }

    #[test]
    fn every_error_in_the_policy_is_said_at_its_place() {
        let text = "receivers:\n  a: {kind: webhook, url: \"ftp://x\"}\n  b: {kind: webhook, url: \"https://x.example/\", colour: red}\nroutes:\n  - {receivers: [a], repeat_interval: 10s}\nwindows:\n  w: {selector: env=x, schedule: {start: \"02:00\", duration: 2h, time_zone: Mars/Olympus}}\n  v: {selector: env=x, schedule: {start: \"25:00\", duration: 2h, time_zone: UTC}}\nsilences:\n  s: {selector: a=b, duration: 2h, author: me}\n  t: {selector: a=b, ends_at: \"2030-01-01T00:00:00Z\"}\n";
        let errors = load(text).unwrap_err();
        let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
        assert!(has("p.yaml:2:22: receiver a: url must be"), "{errors:#?}");
        assert!(has("p.yaml:3:49: unknown field \"colour\"; allowed here: kind, secret, url"), "{errors:#?}");
        assert!(has("p.yaml:5:22: routes[0]: repeat_interval must be at least"), "{errors:#?}");
        assert!(has("p.yaml:7:65: window w: time_zone \"Mars/Olympus\" is not a time zone"), "{errors:#?}");
        assert!(has("p.yaml:8:35: window v: start must be"), "{errors:#?}");
        assert!(has("p.yaml:10:22: silence s: duration: a silence in a file has fixed times"), "{errors:#?}");
        assert!(has("p.yaml:11:3: silence t: author is required"), "{errors:#?}");
        assert_eq!(errors.len(), 7, "{errors:#?}");
        // A route naming a receiver that neither the files nor the cluster have: said at the route's receivers.
        let d = load("routes:\n  - selector: team=db\n    receivers: [nobody]\n").unwrap();
        let e = plan(&d, &Current::none(), "git", false, Time(0)).unwrap_err();
        assert!(
            e[0].to_string().contains(
                "p.yaml:3:5: after this apply, the policy would break a rule: route 0: names receiver nobody"
            ),
            "{}",
            e[0]
        );
    }
}
