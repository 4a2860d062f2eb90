//! Notification policy (issue 35), as data: receivers, routes, silences and maintenance windows, and what they decide
//! for one object at one time. Sans-IO like the rest of core: the time is a value passed in, time zones come from
//! the database embedded in this build (`window`), and a receiver's secret is a reference the notifier resolves on
//! its own host, never the secret itself, so no read of the policy (the API, the log, the sink) can show one.
//!
//! **Routing.** Routes are tried in order; a route whose selector matches the object's labels sends to its
//! receivers and ends the walk, unless it says `continue`. The notifier's `-notify-webhook` endpoints are the
//! implicit last route, reached when no route matched or every one that matched said `continue` (so a cluster
//! without a policy sends everything there, as before policies).
//!
//! **Suppression.** A silence (a selector, a start, an end) or an open maintenance window (a selector and a
//! recurring schedule) suppresses an object's problems, reminders and escalations while it holds, never the
//! resolve of a problem that was sent (the notifier pairs them; this module only says what holds when).
//!
//! **In the log.** The policy changes by `Change`s, each a command on the reserved key `ObjectId::POLICY` (cluster
//! format 4, `FORMAT`), owned, forwarded and fenced as an object's; every reader folds them
//! (`LogReader::policy`), taking a change only if the policy after it keeps every rule (`Policy::changed`), so
//! every member holds the same policy at the same log position. Not yet: the notifier's episodes, reminders and
//! escalations, dependencies, the page.

pub mod window;

use crate::labels::{Labels, Selector};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
pub use window::{Day, Recurrence, Schedule, ScheduleError};

/// The cluster format whose log holds the policy: its commands are refused, and its events are not written,
/// before the cluster's active format is this.
pub const FORMAT: u32 = 4;

/// The most of each a policy holds: room for large teams, bounded for a log entry and every notifier's memory.
pub const MAX_RECEIVERS: usize = 256;
pub const MAX_ROUTES: usize = 256;
pub const MAX_SILENCES: usize = 10_000;
pub const MAX_WINDOWS: usize = 1_000;
/// Receivers per route (and per escalation step) and escalation steps per route.
pub const MAX_TARGETS: usize = 16;
/// The shortest `repeat_interval` and escalation delay: a minute (a reminder storm is worse than none).
pub const MIN_REPEAT: Duration = Duration::from_secs(60);
/// An author's or comment's length at most.
pub const MAX_TEXT: usize = 1024;

/// The name of a receiver, a silence or a window: 1 to 63 of `a-z 0-9 - _ .`, starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

impl Name {
    pub fn new(s: impl Into<String>) -> Result<Name, PolicyError> {
        let s = s.into();
        let ok = (1..=63).contains(&s.len())
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
        if ok {
            Ok(Name(s))
        } else {
            Err(PolicyError::Name(s))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Name {
    type Error = PolicyError;
    fn try_from(s: String) -> Result<Name, PolicyError> {
        Name::new(s)
    }
}

impl From<Name> for String {
    fn from(n: Name) -> String {
        n.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("name {0:?} must be 1 to 63 of a-z, 0-9, '-', '_', '.', starting with a letter or digit")]
    Name(String),
    #[error("receiver {receiver}: {problem}")]
    Receiver { receiver: Name, problem: String },
    #[error("route {index}: {problem}")]
    Route { index: usize, problem: String },
    #[error("silence {silence}: {problem}")]
    Silence { silence: Name, problem: String },
    #[error("window {window}: {problem}")]
    Window { window: Name, problem: String },
    #[error("too many {what}: at most {max}, got {got}")]
    TooMany { what: &'static str, max: usize, got: usize },
}

/// Where the notifier finds a receiver's secret on its own host: a file's contents or an environment variable.
/// Only the reference is in the policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretRef {
    File(String),
    Env(String),
}

/// What a receiver is: a kind with its settings. Today's only kind is the signed webhook; the kind is a field
/// so more (Slack, PagerDuty, email) come without a change of shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReceiverKind {
    /// A Standard Webhooks endpoint, signed with the secret (`whsec_…`) the reference names, if any.
    Webhook {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<SecretRef>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receiver {
    pub name: Name,
    #[serde(flatten)]
    pub kind: ReceiverKind,
}

/// After `after_ms` of a problem nobody acknowledged, also notify `receivers` (once per episode).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escalation {
    pub after_ms: u64,
    pub receivers: Vec<Name>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The objects it takes (Kubernetes selector syntax over their labels; empty: every object).
    #[serde(default)]
    pub selector: Selector,
    pub receivers: Vec<Name>,
    /// Go on to the next routes after this one matched.
    #[serde(default, rename = "continue", skip_serializing_if = "std::ops::Not::not")]
    pub continue_: bool,
    /// Remind these receivers of an unacknowledged problem this often (none: no reminders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<Escalation>,
}

/// A silence: the objects its selector takes are not notified of problems from `starts_at` until `ends_at`; it
/// expires on its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Silence {
    pub name: Name,
    pub selector: Selector,
    pub starts_at: Time,
    pub ends_at: Time,
    pub author: String,
    #[serde(default)]
    pub comment: String,
}

impl Silence {
    pub fn holds_at(&self, t: Time) -> bool {
        self.starts_at <= t && t < self.ends_at
    }
}

/// A maintenance window: the objects its selector takes are not notified of problems while its schedule is open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WindowWire", into = "WindowWire")]
pub struct Window {
    pub name: Name,
    pub selector: Selector,
    pub schedule: Schedule,
    pub comment: String,
    recurrence: Recurrence,
}

#[derive(Serialize, Deserialize)]
struct WindowWire {
    name: Name,
    selector: Selector,
    schedule: Schedule,
    #[serde(default)]
    comment: String,
}

impl TryFrom<WindowWire> for Window {
    type Error = PolicyError;
    fn try_from(w: WindowWire) -> Result<Window, PolicyError> {
        Window::new(w.name, w.selector, w.schedule, w.comment)
    }
}

impl From<Window> for WindowWire {
    fn from(w: Window) -> WindowWire {
        WindowWire { name: w.name, selector: w.selector, schedule: w.schedule, comment: w.comment }
    }
}

impl Window {
    pub fn new(name: Name, selector: Selector, schedule: Schedule, comment: String) -> Result<Window, PolicyError> {
        let recurrence =
            schedule.recurrence().map_err(|e| PolicyError::Window { window: name.clone(), problem: e.to_string() })?;
        Ok(Window { name, selector, schedule, comment, recurrence })
    }

    /// The occurrence open at `t`, if any (its start and end).
    pub fn open_at(&self, t: Time) -> Option<(Time, Time)> {
        self.recurrence.open_at(t)
    }

    pub fn recurrence(&self) -> &Recurrence {
        &self.recurrence
    }
}

/// Why an object's problem is not notified now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suppressed {
    Silenced(Name),
    InWindow(Name),
}

impl Suppressed {
    /// The reason as metrics and the page name it.
    pub fn reason(&self) -> &'static str {
        match self {
            Suppressed::Silenced(_) => "silenced",
            Suppressed::InWindow(_) => "maintenance_window",
        }
    }
}

/// Where an object's notifications go: each receiver once, with the route that first named it (its reminders and
/// escalations), and whether the implicit route (`-notify-webhook`) takes it too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed<'a> {
    pub receivers: Vec<(&'a Name, &'a Route)>,
    pub implicit: bool,
}

/// The whole policy in force at one log position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default)]
    pub receivers: BTreeMap<Name, Receiver>,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub silences: BTreeMap<Name, Silence>,
    #[serde(default)]
    pub windows: BTreeMap<Name, Window>,
}

fn text_ok(s: &str) -> bool {
    s.len() <= MAX_TEXT
}

impl Receiver {
    pub fn validate(&self) -> Result<(), PolicyError> {
        let fail = |problem: &str| PolicyError::Receiver { receiver: self.name.clone(), problem: problem.into() };
        match &self.kind {
            ReceiverKind::Webhook { url, secret } => {
                let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
                if !scheme_ok || url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(fail("url must be an http:// or https:// URL without spaces, at most 2048 bytes"));
                }
                // The policy is in the log and shown by every read: a credential in it would be too.
                if crate::secret::userinfo(url).is_some() {
                    return Err(fail("url must not hold credentials (user:password@): name a secret file or env"));
                }
                match secret {
                    Some(SecretRef::File(p)) if p.is_empty() || !p.starts_with('/') => {
                        Err(fail("secret file must be an absolute path on the notifier's host"))
                    }
                    Some(SecretRef::Env(v))
                        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                    {
                        Err(fail("secret env must be an environment variable name (A-Z, a-z, 0-9, _)"))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

impl Policy {
    /// Every rule a policy must keep, each error naming what broke: names, counts, the receivers routes name,
    /// intervals, a silence's span.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let count = |what, max, got| if got > max { Err(PolicyError::TooMany { what, max, got }) } else { Ok(()) };
        count("receivers", MAX_RECEIVERS, self.receivers.len())?;
        count("routes", MAX_ROUTES, self.routes.len())?;
        count("silences", MAX_SILENCES, self.silences.len())?;
        count("windows", MAX_WINDOWS, self.windows.len())?;
        for (name, r) in &self.receivers {
            if *name != r.name {
                return Err(PolicyError::Receiver { receiver: r.name.clone(), problem: format!("filed as {name}") });
            }
            r.validate()?;
        }
        for (index, route) in self.routes.iter().enumerate() {
            let fail = |problem: String| PolicyError::Route { index, problem };
            let known = |names: &[Name]| -> Result<(), PolicyError> {
                if names.is_empty() || names.len() > MAX_TARGETS {
                    return Err(fail(format!("names 1 to {MAX_TARGETS} receivers, got {}", names.len())));
                }
                match names.iter().find(|n| !self.receivers.contains_key(*n)) {
                    Some(n) => Err(fail(format!("names receiver {n}, which does not exist"))),
                    None => Ok(()),
                }
            };
            known(&route.receivers)?;
            if route.repeat_interval_ms.is_some_and(|ms| Duration::from_millis(ms) < MIN_REPEAT) {
                return Err(fail(format!("repeat_interval must be at least {MIN_REPEAT:?}")));
            }
            if route.escalations.len() > MAX_TARGETS {
                return Err(fail(format!("at most {MAX_TARGETS} escalation steps")));
            }
            let mut last = 0;
            for step in &route.escalations {
                if Duration::from_millis(step.after_ms) < MIN_REPEAT || step.after_ms <= last {
                    return Err(fail(format!(
                        "escalation steps must come at least {MIN_REPEAT:?} after the problem, each later than the one before"
                    )));
                }
                last = step.after_ms;
                known(&step.receivers)?;
            }
        }
        for (name, s) in &self.silences {
            let fail = |problem: &str| PolicyError::Silence { silence: s.name.clone(), problem: problem.into() };
            if *name != s.name {
                return Err(fail("filed under another name"));
            }
            if s.ends_at <= s.starts_at {
                return Err(fail("ends_at must be after starts_at"));
            }
            if s.author.trim().is_empty() || !text_ok(&s.author) || !text_ok(&s.comment) {
                return Err(fail("author must be named (at most 1024 bytes, as the comment)"));
            }
        }
        for (name, w) in &self.windows {
            if *name != w.name || !text_ok(&w.comment) {
                return Err(PolicyError::Window {
                    window: w.name.clone(),
                    problem: format!("filed as {name}, or a comment over {MAX_TEXT} bytes"),
                });
            }
        }
        Ok(())
    }

    /// Where the notifications of an object with `labels` go (routing, in the module's doc).
    pub fn route(&self, labels: &Labels) -> Routed<'_> {
        let mut receivers: Vec<(&Name, &Route)> = Vec::new();
        for route in &self.routes {
            if !route.selector.matches(labels) {
                continue;
            }
            for name in &route.receivers {
                if !receivers.iter().any(|(n, _)| *n == name) {
                    receivers.push((name, route));
                }
            }
            if !route.continue_ {
                return Routed { receivers, implicit: false };
            }
        }
        Routed { receivers, implicit: true }
    }

    /// Whether a problem of an object with `labels` is suppressed at `t`, and by what: a silence before a window,
    /// each by name, so every notifier names the same one.
    pub fn suppressed(&self, labels: &Labels, t: Time) -> Option<Suppressed> {
        if let Some(s) = self.silences.values().find(|s| s.holds_at(t) && s.selector.matches(labels)) {
            return Some(Suppressed::Silenced(s.name.clone()));
        }
        self.windows
            .values()
            .find(|w| w.selector.matches(labels) && w.open_at(t).is_some())
            .map(|w| Suppressed::InWindow(w.name.clone()))
    }

    /// The next instant after `t` at which a silence or a window starts or ends: when what `suppressed` says may
    /// change (a notifier's timer).
    pub fn next_change(&self, t: Time) -> Option<Time> {
        let silences = self.silences.values().flat_map(|s| [s.starts_at, s.ends_at]).filter(|b| *b > t);
        let windows = self.windows.values().filter_map(|w| w.recurrence.next_change(t));
        silences.chain(windows).min()
    }
}

/// Where the notification of a hard transition goes, as its writer (the object's owner) decided it from the
/// policy, the object and the time it wrote the transition (cluster format 4). In the event, so every notifier,
/// live or replaying, sends the same thing, and the log says who was notified of what, or why nobody was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notify {
    /// The policy's receivers it goes to, by name, in the order the routes named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receivers: Vec<Name>,
    /// The notifiers' own endpoints (`-notify-webhook`) take it too: the implicit route.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit: bool,
    /// Why a problem goes to nobody: `silenced`, `maintenance_window` or `parent_down`, and by what (the silence's
    /// or window's name, the parents down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<Suppression>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suppression {
    pub reason: String,
    pub by: Vec<String>,
}

impl Notify {
    /// Everything to the notifiers' own endpoints, as before policies.
    pub fn implicit_only() -> Notify {
        Notify { implicit: true, ..Notify::default() }
    }

    /// Whether it goes to nobody.
    pub fn is_nobody(&self) -> bool {
        self.receivers.is_empty() && !self.implicit
    }

    /// `self` and the receivers (and the implicit route) of `other`: who an episode's problems reached.
    pub fn union(&self, other: &Notify) -> Notify {
        let mut receivers = self.receivers.clone();
        for r in &other.receivers {
            if !receivers.contains(r) {
                receivers.push(r.clone());
            }
        }
        Notify { receivers, implicit: self.implicit || other.implicit, suppressed: None }
    }
}

/// What holds an object's problems back at `at`, if anything: a parent down (`parents_down`, first), a silence
/// or an open maintenance window (`Policy::suppressed`).
pub fn held(policy: &Policy, labels: &Labels, at: Time, parents_down: Vec<String>) -> Option<Suppression> {
    if !parents_down.is_empty() {
        return Some(Suppression { reason: "parent_down".into(), by: parents_down });
    }
    policy.suppressed(labels, at).map(|s| {
        let by = match &s {
            Suppressed::Silenced(n) | Suppressed::InWindow(n) => n.to_string(),
        };
        Suppression { reason: s.reason().into(), by: vec![by] }
    })
}

/// What a hard transition of an object from `from` to `to`, written at `at`, notifies (`Notify`):
/// - a problem (to a warning, critical or unknown state): the receivers the routes name for its `labels`, unless
///   a parent is down (`parents_down`), a silence holds or a maintenance window is open at `at`: then nobody,
///   saying why;
/// - a recovery (from a problem to no problem): exactly who the episode's problems reached (`episode_sent`), so
///   every receiver that was sent a problem is sent its resolve, whatever the policy says now; a problem opened
///   before the cluster kept episodes (`None`) was sent as before policies, so its resolve is too;
/// - anything else (a first result that is ok): the receivers the routes name, never suppressed.
pub fn decide(
    policy: &Policy,
    labels: &Labels,
    at: Time,
    parents_down: Vec<String>,
    (from, to): (crate::model::State, crate::model::State),
    episode_sent: Option<&Notify>,
) -> Notify {
    let routed = || {
        let r = policy.route(labels);
        Notify {
            receivers: r.receivers.into_iter().map(|(n, _)| n.clone()).collect(),
            implicit: r.implicit,
            suppressed: None,
        }
    };
    if to.is_problem() {
        match held(policy, labels, at, parents_down) {
            Some(s) => Notify { suppressed: Some(s), ..Notify::default() },
            None => routed(),
        }
    } else if from.is_problem() {
        episode_sent.cloned().unwrap_or_else(Notify::implicit_only)
    } else {
        routed()
    }
}

/// How long a silence that ended is still kept (and listed) before a policy change drops it: long enough to see
/// what was silenced last week, bounded so `MAX_SILENCES` counts live ones.
pub const SILENCE_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// One change of the policy, as a command asks for it and the log records it (cluster format 4). Each names one
/// piece; routes are set as a whole list, since their order is their meaning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    PutReceiver {
        receiver: Receiver,
    },
    DeleteReceiver {
        name: Name,
    },
    SetRoutes {
        routes: Vec<Route>,
    },
    PutSilence {
        silence: Silence,
    },
    /// Ends a silence at the change's time (one that has not started yet is dropped).
    ExpireSilence {
        name: Name,
    },
    PutWindow {
        window: Window,
    },
    DeleteWindow {
        name: Name,
    },
}

impl Change {
    /// What it changes, for messages and metrics: `receiver`, `routes`, `silence`, `window`.
    pub fn what(&self) -> &'static str {
        match self {
            Change::PutReceiver { .. } | Change::DeleteReceiver { .. } => "receiver",
            Change::SetRoutes { .. } => "routes",
            Change::PutSilence { .. } | Change::ExpireSilence { .. } => "silence",
            Change::PutWindow { .. } | Change::DeleteWindow { .. } => "window",
        }
    }
}

/// Why a change cannot be made: what it names does not exist, or the policy after it would break a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{what} {name} does not exist")]
    NotFound { what: &'static str, name: Name },
    #[error(transparent)]
    Invalid(#[from] PolicyError),
}

impl Policy {
    /// Whether it holds nothing (a cluster that never set a policy).
    pub fn is_empty(&self) -> bool {
        self == &Policy::default()
    }

    /// The policy after `change`, made at `at` (the log time of its event), or why it cannot be made; `self` is
    /// left as it was. Silences that ended `SILENCE_KEPT` before `at` are dropped on the way, so every reader
    /// drops them at the same position.
    pub fn changed(&self, change: &Change, at: Time) -> Result<Policy, ChangeError> {
        let mut p = self.clone();
        p.silences.retain(|_, s| at.saturating_since(s.ends_at) <= SILENCE_KEPT);
        let missing = |what, name: &Name| ChangeError::NotFound { what, name: name.clone() };
        match change {
            Change::PutReceiver { receiver } => {
                p.receivers.insert(receiver.name.clone(), receiver.clone());
            }
            Change::DeleteReceiver { name } => {
                p.receivers.remove(name).ok_or_else(|| missing("receiver", name))?;
            }
            Change::SetRoutes { routes } => p.routes = routes.clone(),
            Change::PutSilence { silence } => {
                p.silences.insert(silence.name.clone(), silence.clone());
            }
            Change::ExpireSilence { name } => {
                let s = p.silences.get_mut(name).ok_or_else(|| missing("silence", name))?;
                if s.starts_at >= at {
                    p.silences.remove(name);
                } else if s.ends_at > at {
                    s.ends_at = at;
                }
            }
            Change::PutWindow { window } => {
                p.windows.insert(window.name.clone(), window.clone());
            }
            Change::DeleteWindow { name } => {
                p.windows.remove(name).ok_or_else(|| missing("window", name))?;
            }
        }
        p.validate()?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap()
    }

    fn hook(n: &str) -> Receiver {
        Receiver {
            name: name(n),
            kind: ReceiverKind::Webhook { url: format!("https://{n}.example/hook"), secret: None },
        }
    }

    fn route(sel: &str, to: &[&str], cont: bool) -> Route {
        Route {
            selector: Selector::parse(sel).unwrap(),
            receivers: to.iter().map(|n| name(n)).collect(),
            continue_: cont,
            repeat_interval_ms: None,
            escalations: vec![],
        }
    }

    fn policy(routes: Vec<Route>) -> Policy {
        Policy {
            receivers: ["db", "web", "all", "boss"].iter().map(|n| (name(n), hook(n))).collect(),
            routes,
            ..Policy::default()
        }
    }

    #[test]
    fn the_first_matching_route_wins_unless_it_continues_and_the_implicit_route_takes_the_rest() {
        let p = policy(vec![
            route("team=db", &["db"], false),
            route("", &["all"], true),
            route("tier=web", &["web"], false),
        ]);
        p.validate().unwrap();
        let names = |r: Routed| (r.receivers.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>(), r.implicit);
        assert_eq!(names(p.route(&labels(&[("team", "db"), ("tier", "web")]))), (vec!["db".to_string()], false));
        assert_eq!(names(p.route(&labels(&[("tier", "web")]))), (vec!["all".to_string(), "web".to_string()], false));
        assert_eq!(names(p.route(&labels(&[("tier", "api")]))), (vec!["all".to_string()], true));
        assert_eq!(names(Policy::default().route(&labels(&[]))), (vec![], true), "no policy: everything as before");
    }

    #[test]
    fn a_receiver_named_twice_is_sent_once_under_the_first_route_that_named_it() {
        let mut first = route("", &["db", "web"], true);
        first.repeat_interval_ms = Some(3_600_000);
        let p = policy(vec![first, route("", &["web", "all"], false)]);
        let r = p.route(&labels(&[]));
        let got: Vec<(&str, Option<u64>)> =
            r.receivers.iter().map(|(n, route)| (n.as_str(), route.repeat_interval_ms)).collect();
        assert_eq!(got, [("db", Some(3_600_000)), ("web", Some(3_600_000)), ("all", None)]);
    }

    #[test]
    fn silences_and_windows_suppress_while_they_hold_and_say_when_that_changes() {
        let t0 = Time(1_800_000_000_000);
        let mut p = policy(vec![]);
        p.silences.insert(
            name("db-upgrade"),
            Silence {
                name: name("db-upgrade"),
                selector: Selector::parse("team=db").unwrap(),
                starts_at: t0,
                ends_at: Time(t0.0 + 3_600_000),
                author: "ops".into(),
                comment: "major upgrade".into(),
            },
        );
        let sched = Schedule { days: vec![], start: "00:00".into(), duration_ms: 60_000, time_zone: "UTC".into() };
        let w = Window::new(name("nightly"), Selector::parse("tier=batch").unwrap(), sched, String::new()).unwrap();
        p.windows.insert(name("nightly"), w);
        p.validate().unwrap();
        let db = labels(&[("team", "db")]);
        assert_eq!(p.suppressed(&db, Time(t0.0 - 1)), None);
        assert_eq!(p.suppressed(&db, t0), Some(Suppressed::Silenced(name("db-upgrade"))));
        assert_eq!(p.suppressed(&db, Time(t0.0 + 3_600_000)), None, "expired on its own");
        assert_eq!(p.suppressed(&labels(&[("team", "web")]), t0), None);
        // 1_800_000_000_000 ms is 2027-01-15T08:00:00Z: the nightly window opens at the next midnight UTC.
        let midnight = Time(1_800_000_000_000 + 16 * 3_600_000);
        let batch = labels(&[("tier", "batch")]);
        assert_eq!(p.suppressed(&batch, midnight), Some(Suppressed::InWindow(name("nightly"))));
        assert_eq!(p.suppressed(&batch, Time(midnight.0 + 60_000)), None);
        assert_eq!(p.next_change(Time(t0.0 - 1)), Some(t0));
        assert_eq!(p.next_change(t0), Some(Time(t0.0 + 3_600_000)));
        assert_eq!(p.next_change(Time(t0.0 + 3_600_000)), Some(midnight));
    }

    #[test]
    fn a_bad_policy_names_what_is_wrong() {
        let err = |p: Policy| p.validate().unwrap_err().to_string();
        assert_eq!(
            err(policy(vec![route("", &["nobody"], false)])),
            "route 0: names receiver nobody, which does not exist"
        );
        assert_eq!(err(policy(vec![route("", &[], false)])), "route 0: names 1 to 16 receivers, got 0");
        let mut r = route("", &["db"], false);
        r.repeat_interval_ms = Some(1_000);
        assert_eq!(err(policy(vec![r])), "route 0: repeat_interval must be at least 60s");
        let mut r = route("", &["db"], false);
        r.escalations = vec![
            Escalation { after_ms: 600_000, receivers: vec![name("boss")] },
            Escalation { after_ms: 300_000, receivers: vec![name("boss")] },
        ];
        assert!(err(policy(vec![r])).contains("each later than the one before"));
        let mut p = policy(vec![]);
        p.receivers.insert(
            name("bad"),
            Receiver {
                name: name("bad"),
                kind: ReceiverKind::Webhook { url: "ftp://x".into(), secret: Some(SecretRef::Env("A B".into())) },
            },
        );
        assert!(err(p).starts_with("receiver bad: url must be"));
        assert!(Name::new("Upper").is_err() && Name::new("").is_err() && Name::new("-x").is_err());
        assert!(Name::new("db-team.primary_1").is_ok());
    }

    #[test]
    fn the_policy_round_trips_through_json_and_a_window_is_checked_as_it_is_read() {
        let mut p = policy(vec![route("team in (db,web),!canary", &["db"], true)]);
        let sched = Schedule {
            days: vec![Day::Tue],
            start: "02:00".into(),
            duration_ms: 7_200_000,
            time_zone: "Europe/Berlin".into(),
        };
        p.windows
            .insert(name("tue"), Window::new(name("tue"), Selector::default(), sched, "db patching".into()).unwrap());
        let json = serde_json::to_string(&p).unwrap();
        let back: Policy = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
        assert!(json.contains(r#""kind":"webhook""#) && json.contains(r#""continue":true"#), "{json}");
        let bad = json.replace("Europe/Berlin", "Europe/Atlantis");
        let e = serde_json::from_str::<Policy>(&bad).unwrap_err().to_string();
        assert!(e.contains("window tue: time_zone \"Europe/Atlantis\""), "{e}");
    }
}
