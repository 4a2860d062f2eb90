//! The nouns of the product page: members, buckets, objects, checks, commands, outcomes, and the entries of
//! the shared log (epoch records and events). Everything here is plain data; the machines live elsewhere.

use crate::labels::Labels;
use crate::secret::{self, SensitiveUrl, REDACTED};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why an identifier was refused. The message says what is allowed, so a user can fix the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error("{what} is {len} bytes long; at most {max} are allowed")]
    TooLong { what: &'static str, len: usize, max: usize },
    #[error("{what} contains {found:?}; allowed are letters, digits and {allowed}")]
    BadChar { what: &'static str, found: char, allowed: &'static str },
}

fn check_id(what: &'static str, s: &str, max: usize, extra: &'static str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty { what });
    }
    if s.len() > max {
        return Err(IdError::TooLong { what, len: s.len(), max });
    }
    if let Some(found) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || extra.contains(*c))) {
        return Err(IdError::BadChar { what, found, allowed: extra });
    }
    Ok(())
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:literal, $extra:literal) => {
        $(#[$doc])*
        ///
        /// Its bytes are one shared allocation: a clone (the reader's map, an engine's schedule, a lane's key) is a
        /// reference count, not a copy. On the wire it is a plain string.
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            pub const MAX_LEN: usize = $max;
            pub const ALLOWED: &'static str = $extra;

            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check_id($what, &s, $max, $extra)?;
                Ok($name(s.into()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// `new` from a borrowed string: one allocation, for the id's bytes.
        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                check_id($what, s, $max, $extra)?;
                Ok($name(s.into()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                $name::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.as_ref().to_owned()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<$name, E> {
                        $name::from_log(s).map_err(E::custom)
                    }
                }
                deserializer.deserialize_string(Visitor)
            }
        }
    };
}

string_id!(
    /// A member's id within its bucket. It is a NATS subject token (`jaque.cmd.<engine-id>`), so no dots,
    /// wildcards or spaces.
    MemberId, "member id", 64, "_-"
);
string_id!(
    /// An object's id as users write it in `/api/objects/{id}`.
    ObjectId, "object id", 200, "._:@-"
);

impl ObjectId {
    /// The key the notification policy's events are written on (`crate::policy`): not a valid object id (no
    /// `/` is), so no object shares it, yet fenced, owned and forwarded as an object's key is.
    pub const POLICY: &'static str = "jaque/policy";

    /// The policy's key (`POLICY`).
    pub fn policy() -> ObjectId {
        ObjectId(Arc::from(ObjectId::POLICY))
    }

    pub fn is_policy(&self) -> bool {
        &*self.0 == ObjectId::POLICY
    }

    /// An id as the log, a command or a store holds it: an object's id, or the policy's key. What users write
    /// is read with `new` or `parse`, which refuse the policy's key.
    pub fn from_log(s: &str) -> Result<ObjectId, IdError> {
        if s == ObjectId::POLICY {
            return Ok(ObjectId::policy());
        }
        s.parse()
    }
}

impl MemberId {
    fn from_log(s: &str) -> Result<MemberId, IdError> {
        s.parse()
    }
}

impl CommandId {
    fn from_log(s: &str) -> Result<CommandId, IdError> {
        s.parse()
    }
}
string_id!(
    /// A command's id: the ui's `Idempotency-Key`, or one it makes. The owner applies an id at most once.
    CommandId, "command id", 128, "._:@-"
);

/// A membership bucket: each role that scales on its own has one. The names are the page's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    Engine,
    Sink,
    Notifier,
}

impl Bucket {
    pub const ALL: [Bucket; 3] = [Bucket::Engine, Bucket::Sink, Bucket::Notifier];

    /// The bucket's name as the page writes it: `membership/`, `sink/membership/`, `notifier/membership/`.
    pub fn prefix(self) -> &'static str {
        match self {
            Bucket::Engine => "membership/",
            Bucket::Sink => "sink/membership/",
            Bucket::Notifier => "notifier/membership/",
        }
    }

    /// The bucket whose prefix starts `key`, and the member id after it.
    pub fn split_key(key: &str) -> Option<(Bucket, &str)> {
        // Longest prefixes first: `membership/` is a suffix of the other two, never a prefix, but be explicit.
        Bucket::ALL.iter().find_map(|b| key.strip_prefix(b.prefix()).map(|rest| (*b, rest)))
    }
}

/// One process's membership in one bucket. A restarted process comes back with a new incarnation and so is
/// a new member, even under the same id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MemberRef {
    pub id: MemberId,
    pub incarnation: u64,
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.id, self.incarnation)
    }
}

/// How a check looks at an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Probe {
    /// GET `url`; 2xx and 3xx are ok unless `expect_status` names the one status that is. The url's userinfo
    /// is a secret (`crate::secret`): reads show it as `***`.
    Http {
        url: SensitiveUrl,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect_status: Option<u16>,
    },
    /// Connect to `addr` (`host:port`).
    Tcp { addr: String },
    /// Run `plugin` from the plugin directory with `args`; Nagios exit codes.
    Exec {
        plugin: String,
        #[serde(default)]
        args: Vec<String>,
    },
}

impl Probe {
    /// The probe as every read shows it: its secrets as `***` (borrowed when it has none).
    pub fn redacted(&self) -> Cow<'_, Probe> {
        match self {
            Probe::Http { url, expect_status } if url.has_userinfo() => Cow::Owned(Probe::Http {
                url: SensitiveUrl::new(url.redacted().into_owned()),
                expect_status: *expect_status,
            }),
            _ => Cow::Borrowed(self),
        }
    }

    /// `text` (a check's output, an error) without this probe's secrets, and without the userinfo of any URL in
    /// it: what may be written to the log and shown.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = secret::redact_urls_in(text);
        if let Probe::Http { url, .. } = self {
            for s in url.secrets() {
                if out.contains(s.as_ref()) {
                    out = Cow::Owned(out.replace(s.as_ref(), REDACTED));
                }
            }
        }
        out
    }
}

/// What an object is and how often to look at it, and how its results become alerts (`crate::alert`).
///
/// The alerting fields (cluster format 3) are left out when they are not given, so a definition without them
/// is the bytes a build before them wrote; the defaults they stand for are `crate::alert`'s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectDef {
    pub probe: Probe,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    /// Key-value labels in Kubernetes' syntax (`crate::labels`), to select, group and route objects by
    /// (cluster format 3).
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// Problem results in a row that make a problem hard (`alert::DEFAULT_MAX_ATTEMPTS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// How often a soft state is checked again (default: a fifth of the interval, at least the timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_interval_ms: Option<u64>,
    /// Ok results in a row that end a hard problem (`alert::DEFAULT_RECOVERY_ATTEMPTS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_attempts: Option<u32>,
    /// Flapping detection (on unless `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flapping: Option<bool>,
    /// The objects this one depends on (cluster format 4): while one of them is in a hard problem, this object's
    /// problems are checked and recorded but not notified ("parent down"). Only direct parents count, so a
    /// cycle is harmless. At most `MAX_PARENTS`, each once, never the object itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ObjectId>,
}

/// The most parents a definition names.
pub const MAX_PARENTS: usize = 16;

/// Bounds that keep a definition sane: a zero interval would make the owner spin.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest default retry interval (`ObjectDef::retry_interval`).
pub const DEFAULT_RETRY_CAP: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefError {
    #[error("interval must be between {min:?} and {max:?}, got {got:?}")]
    Interval { got: Duration, min: Duration, max: Duration },
    #[error("timeout must be more than zero and at most the interval ({interval:?}), got {got:?}")]
    Timeout { got: Duration, interval: Duration },
    #[error("{0}")]
    Probe(String),
    #[error("{0}")]
    Alerting(String),
    #[error("parents: {0}")]
    Parents(String),
}

impl ObjectDef {
    /// The definition as every read shows it (the API, the sink's store): its probe's secrets as `***`.
    pub fn redacted(&self) -> Cow<'_, ObjectDef> {
        match self.probe.redacted() {
            Cow::Borrowed(_) => Cow::Borrowed(self),
            Cow::Owned(probe) => Cow::Owned(ObjectDef { probe, ..self.clone() }),
        }
    }

    /// Every optional field unset: a base to write a definition from with `..ObjectDef::UNSET`. Its probe,
    /// interval and timeout are placeholders that never validate.
    pub const UNSET: ObjectDef = ObjectDef {
        probe: Probe::Tcp { addr: String::new() },
        interval_ms: 0,
        timeout_ms: 0,
        labels: Labels::EMPTY,
        max_attempts: None,
        retry_interval_ms: None,
        recovery_attempts: None,
        flapping: None,
        parents: Vec::new(),
    };

    /// A definition with the given probe, interval and timeout and every alerting field left to its default.
    pub fn new(probe: Probe, interval_ms: u64, timeout_ms: u64) -> ObjectDef {
        ObjectDef { probe, interval_ms, timeout_ms, ..ObjectDef::UNSET }
    }

    /// A tcp probe of `addr`: the shortest way to write one in a test.
    pub fn tcp(addr: &str, interval_ms: u64, timeout_ms: u64) -> ObjectDef {
        ObjectDef::new(Probe::Tcp { addr: addr.into() }, interval_ms, timeout_ms)
    }

    /// How often a soft state is checked again: the definition's `retry_interval_ms`, else a fifth of the
    /// interval and at most a minute (Icinga 2's defaults are a 1 minute retry against a 5 minute interval), but
    /// at least the timeout and `MIN_INTERVAL`, and at most the interval.
    pub fn retry_interval(&self) -> Duration {
        match self.retry_interval_ms {
            Some(ms) => Duration::from_millis(ms),
            None => {
                (self.interval() / 5).min(DEFAULT_RETRY_CAP).max(self.timeout()).max(MIN_INTERVAL).min(self.interval())
            }
        }
    }

    /// The cluster format a put of this definition needs: 4 when it names parents, 3 when it has labels or
    /// names any alerting field.
    pub fn needs(&self) -> u32 {
        let alerting = !self.labels.is_empty()
            || self.max_attempts.is_some()
            || self.retry_interval_ms.is_some()
            || self.recovery_attempts.is_some()
            || self.flapping.is_some();
        if !self.parents.is_empty() {
            crate::policy::FORMAT
        } else if alerting {
            3
        } else {
            crate::format::OLDEST_CLUSTER_FORMAT
        }
    }

    /// Checks the parents a definition of object `id` names (`validate` checks the rest, which does not depend
    /// on the id).
    pub fn validate_parents(&self, id: &ObjectId) -> Result<(), DefError> {
        let fail = |m: String| Err(DefError::Parents(m));
        if self.parents.len() > MAX_PARENTS {
            return fail(format!("at most {MAX_PARENTS} parents, got {}", self.parents.len()));
        }
        if self.parents.contains(id) {
            return fail(format!("{id} cannot be its own parent"));
        }
        let mut seen = std::collections::BTreeSet::new();
        match self.parents.iter().find(|p| !seen.insert(*p)) {
            Some(p) => fail(format!("parent {p} is named twice")),
            None => Ok(()),
        }
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Checks a definition the way the owner will rely on it.
    pub fn validate(&self) -> Result<(), DefError> {
        let interval = self.interval();
        if interval < MIN_INTERVAL || interval > MAX_INTERVAL {
            return Err(DefError::Interval { got: interval, min: MIN_INTERVAL, max: MAX_INTERVAL });
        }
        if self.timeout_ms == 0 || self.timeout_ms > self.interval_ms {
            return Err(DefError::Timeout { got: self.timeout(), interval });
        }
        for (name, n) in [("max_attempts", self.max_attempts), ("recovery_attempts", self.recovery_attempts)] {
            if n.is_some_and(|n| n == 0 || n > crate::alert::MAX_ATTEMPTS) {
                return Err(DefError::Alerting(format!(
                    "{name} must be between 1 and {}, got {}",
                    crate::alert::MAX_ATTEMPTS,
                    n.unwrap_or_default()
                )));
            }
        }
        if let Some(ms) = self.retry_interval_ms {
            let least = self.timeout_ms.max(crate::time::millis(MIN_INTERVAL));
            if ms < least || ms > self.interval_ms {
                return Err(DefError::Alerting(format!(
                    "retry_interval_ms must be at least the timeout and {MIN_INTERVAL:?} ({least}) and at most the \
                     interval ({}), got {ms}",
                    self.interval_ms
                )));
            }
        }
        match &self.probe {
            Probe::Http { url, expect_status } => {
                let raw = url.expose();
                // The error shows the url redacted: a refusal is a read too.
                if !(raw.starts_with("http://") || raw.starts_with("https://")) || raw.len() > 2048 {
                    return Err(DefError::Probe(format!(
                        "http probe url must start with http:// or https:// (at most 2048 bytes), got {:?}",
                        url.redacted()
                    )));
                }
                // Clients drop or encode these; refused, so the url jaque shows is the one the probe uses and
                // its userinfo is found where the probe's client finds it.
                if let Some(c) = raw.chars().find(|c| c.is_whitespace() || c.is_control() || "\"<>`\\".contains(*c)) {
                    return Err(DefError::Probe(format!(
                        "http probe url must not contain {c:?} (percent-encode it), got {:?}",
                        url.redacted()
                    )));
                }
                if secret::userinfo(raw).is_some_and(|r| &raw[r] == REDACTED) {
                    return Err(DefError::Probe(format!(
                        "http probe url has {REDACTED} as its user and password, which is how jaque shows the \
                         credentials it holds: give the real ones (a read never shows them), got {:?}",
                        url.redacted()
                    )));
                }
                if let Some(s) = expect_status {
                    if !(100..=599).contains(s) {
                        return Err(DefError::Probe(format!("expect_status must be 100..=599, got {s}")));
                    }
                }
            }
            Probe::Tcp { addr } => {
                let ok = addr
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0));
                if !ok || addr.len() > 512 {
                    return Err(DefError::Probe(format!("tcp probe addr must be host:port, got {addr:?}")));
                }
            }
            Probe::Exec { plugin, args } => {
                let ok = !plugin.is_empty()
                    && plugin.len() <= 128
                    && plugin.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                    && !plugin.starts_with('.');
                if !ok {
                    return Err(DefError::Probe(format!(
                        "exec plugin must be a file name in the plugin directory (letters, digits, ._-), got {plugin:?}"
                    )));
                }
                if args.len() > 64 || args.iter().any(|a| a.len() > 4096) {
                    return Err(DefError::Probe("exec args: at most 64, each at most 4096 bytes".into()));
                }
            }
        }
        Ok(())
    }
}

/// An object's state. `Pending` until its first check result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Pending,
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Ok => "ok",
            State::Warning => "warning",
            State::Critical => "critical",
            State::Unknown => "unknown",
        }
    }

    /// A state someone may acknowledge.
    pub fn is_problem(self) -> bool {
        matches!(self, State::Warning | State::Critical | State::Unknown)
    }

    /// The Nagios plugin convention: 0 ok, 1 warning, 2 critical, anything else unknown.
    pub fn from_nagios_exit(code: i32) -> State {
        match code {
            0 => State::Ok,
            1 => State::Warning,
            2 => State::Critical,
            _ => State::Unknown,
        }
    }

    /// An HTTP status as a check verdict: 2xx/3xx ok, unless the definition expects one exact status.
    pub fn from_http_status(status: u16, expect: Option<u16>) -> State {
        match expect {
            Some(e) if status == e => State::Ok,
            Some(_) => State::Critical,
            None if (200..400).contains(&status) => State::Ok,
            None => State::Critical,
        }
    }
}

/// What a command asks the owner to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CommandKind {
    Put {
        def: ObjectDef,
    },
    Delete,
    Pause,
    Resume,
    CheckNow,
    Ack,
    /// Withdraws an acknowledgement. Cluster format 2: refused while the cluster's active format is 1.
    Unack,
    /// A change of the notification policy, on the policy's key (`ObjectId::policy`). Cluster format 4. Boxed:
    /// a window is large, and commands of every other kind are small.
    Policy {
        change: Box<crate::policy::Change>,
    },
}

impl CommandKind {
    pub fn name(&self) -> &'static str {
        match self {
            CommandKind::Put { .. } => "put",
            CommandKind::Delete => "delete",
            CommandKind::Pause => "pause",
            CommandKind::Resume => "resume",
            CommandKind::CheckNow => "check",
            CommandKind::Ack => "ack",
            CommandKind::Unack => "unack",
            CommandKind::Policy { .. } => "policy",
        }
    }

    /// The cluster format its event needs (`format`): an engine applies it only once the active format allows.
    pub fn needs(&self) -> u32 {
        match self {
            CommandKind::Unack => 2,
            CommandKind::Policy { .. } => crate::policy::FORMAT,
            CommandKind::Put { def } => def.needs(),
            _ => crate::format::OLDEST_CLUSTER_FORMAT,
        }
    }
}

/// A command as it travels: from the ui or a local caller (hop 0), or forwarded once (hop 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub id: CommandId,
    pub object: ObjectId,
    #[serde(flatten)]
    pub kind: CommandKind,
    /// 0 when submitted, 1 after the one forward. Nothing ever carries 2.
    #[serde(default)]
    pub hop: u8,
}

/// How a command ended, as its submitter learns it. Every command ends in exactly one outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Its event is in the log and accepted (the fence let it through). `seq` is its log position.
    Applied { command_id: CommandId, owner: MemberId, epoch: u64, seq: u64 },
    /// The command needs an object that does not exist (pause, resume, check, ack, delete of nothing).
    NotFound { command_id: CommandId },
    /// A forwarded command reached an engine that does not own its object: dropped, never a second hop.
    NotOwned,
    /// The command itself is invalid (a bad definition); retrying it will not help (the ui answers 400).
    Rejected { reason: String },
    /// No owner could be reached or the cluster is not ready; retry later (the ui answers 503 Retry-After).
    Unavailable { reason: String },
}

/// The epoch record: who the engines are, as of one membership change. Ownership is a pure function of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u64,
    /// Sorted by id, unique ids.
    pub members: Vec<MemberRef>,
    /// The membership store's revision this member list was read at. A member whose own view is older than
    /// this must not propose: it would only undo a change it has not seen yet.
    pub members_rev: u64,
    /// How long, in log time, a command id is remembered after it was applied (`-idempotency-window` of the
    /// engine that proposed this record). Carried in the log so every reader forgets the same ids at the same
    /// position; `None` (records written before this field): never forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_window_ms: Option<u64>,
    /// The cluster format the proposer found active (`crate::format`): the lowest any live member of any bucket
    /// speaks. Left out when it is 1, as every build before v0.1.0 wrote records. The fence takes the highest
    /// of this and every record before it: the active format never goes down.
    #[serde(default = "crate::format::unnamed", skip_serializing_if = "crate::format::is_unnamed")]
    pub format: u32,
}

/// What happened to an object. Commands' events carry the command id, so any later owner knows it was applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    Put {
        def: ObjectDef,
    },
    Delete,
    Pause,
    Resume,
    CheckRequested,
    Ack,
    /// An acknowledgement withdrawn (cluster format 2).
    Unack,
    /// The hard state changed after a check (`crate::alert`); written only on a change.
    Transition {
        from: State,
        to: State,
        output: String,
        /// The result in a row that made it hard (cluster format 3; 0, left out: written before soft states,
        /// every change hard at once).
        #[serde(default, skip_serializing_if = "is_zero")]
        attempt: u32,
        /// Flapping starts (`true`) or ends (`false`) with this result (cluster format 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flapping: Option<bool>,
        /// The object flaps after this result: the transition is not notified (cluster format 3).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        flaps: bool,
        /// Who is notified of it, as its writer decided (`crate::policy::decide`; cluster format 4). Left out:
        /// every notifier endpoint, as before policies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notify: Option<Box<crate::policy::Notify>>,
    },
    /// A result that differs from the hard state and has not made it hard yet: `state` at `attempt` of `of`
    /// (cluster format 3). With the hard state and attempt 0: the results are back to the hard state, the soft
    /// state is over.
    Soft {
        state: State,
        attempt: u32,
        of: u32,
        output: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flapping: Option<bool>,
    },
    /// Flapping starts (`on`) or ends, on a result that changed nothing else (cluster format 3).
    Flapping {
        on: bool,
    },
    /// A change of the notification policy, on the policy's key (cluster format 4).
    Policy {
        change: Box<crate::policy::Change>,
    },
    /// The problem of the open episode `episode` (in `state`), held back when it started (a silence, a window, a
    /// parent down: its transition went to nobody), sent now that nothing holds it: to `notify`, as its owner
    /// decided when the hold ended (cluster format 4).
    Released {
        episode: u64,
        state: State,
        notify: Box<crate::policy::Notify>,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl EventBody {
    pub fn from_command(kind: &CommandKind) -> EventBody {
        match kind {
            CommandKind::Put { def } => EventBody::Put { def: def.clone() },
            CommandKind::Delete => EventBody::Delete,
            CommandKind::Pause => EventBody::Pause,
            CommandKind::Resume => EventBody::Resume,
            CommandKind::CheckNow => EventBody::CheckRequested,
            CommandKind::Ack => EventBody::Ack,
            CommandKind::Unack => EventBody::Unack,
            CommandKind::Policy { change } => EventBody::Policy { change: change.clone() },
        }
    }

    /// A transition as written before soft states (every change hard at once; cluster format 1).
    pub fn transition(from: State, to: State, output: impl Into<String>) -> EventBody {
        EventBody::Transition {
            from,
            to,
            output: output.into(),
            attempt: 0,
            flapping: None,
            flaps: false,
            notify: None,
        }
    }

    /// A check's result, as the owner writes it (`crate::alert`): a transition, a soft state, flapping.
    pub fn is_result(&self) -> bool {
        matches!(self, EventBody::Transition { .. } | EventBody::Soft { .. } | EventBody::Flapping { .. })
    }

    /// The cluster format a reader needs to fold it.
    pub fn needs(&self) -> u32 {
        match self {
            EventBody::Unack => 2,
            EventBody::Transition { notify: Some(_), .. } | EventBody::Policy { .. } | EventBody::Released { .. } => {
                crate::policy::FORMAT
            }
            EventBody::Soft { .. } | EventBody::Flapping { .. } => 3,
            EventBody::Transition { attempt, flapping, flaps, .. } if *attempt != 0 || flapping.is_some() || *flaps => {
                3
            }
            EventBody::Put { def } => def.needs(),
            EventBody::Delete
            | EventBody::Pause
            | EventBody::Resume
            | EventBody::CheckRequested
            | EventBody::Ack
            | EventBody::Transition { .. } => crate::format::OLDEST_CLUSTER_FORMAT,
        }
    }
}

/// An event in the log: written by `writer` under `epoch`. The fence decides, in log order, whether it counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub object: ObjectId,
    pub epoch: u64,
    pub writer: MemberRef,
    /// The writer's clock when it wrote the event: anchors the check schedule, shown in the ui.
    pub at: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<CommandId>,
    #[serde(flatten)]
    pub body: EventBody,
}

/// One entry of the shared, totally ordered log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum LogEntry {
    Epoch(EpochRecord),
    Event(Event),
}

impl LogEntry {
    /// The cluster format a reader needs to fold this entry: its writer wrote it only where the record in force
    /// allowed that format, and says so in its bytes when it is more than 1 (`wire::encode_log_entry`).
    pub fn needs(&self) -> u32 {
        match self {
            LogEntry::Epoch(_) => crate::format::OLDEST_CLUSTER_FORMAT,
            LogEntry::Event(e) => e.body.needs(),
        }
    }
}
