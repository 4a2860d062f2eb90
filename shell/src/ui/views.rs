//! What the ui asks of the loop that holds the log (an engine's, or a ui's own reader) and the JSON it gets
//! back. Rendering reads a `LogReader` and the live sets; it decides nothing. The loop renders one page of
//! objects at a time, so a large installation never holds it for the whole list.

use crate::follow::Buckets;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jaque_core::alert::{Rules, SoftState};
use jaque_core::labels::{Labels, Selector};
use jaque_core::log::ObjectView;
use jaque_core::{Bucket, Command, LiveSet, LogReader, MemberId, ObjectId, Outcome, Probe, State};
use serde::Serialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, BinaryHeap};
use std::ops::Bound;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A request from the HTTP side to the loop that holds the log.
pub enum UiRequest {
    /// Submit a command to the local engine; the outcome comes back when the engine replies.
    Write {
        cmd: Command,
        reply: oneshot::Sender<Outcome>,
    },
    /// A read of objects (one, a page, the counts), rendered to JSON where the log is.
    Objects {
        lookup: Lookup,
        reply: oneshot::Sender<Rendered>,
    },
    Cluster {
        reply: oneshot::Sender<Value>,
    },
    /// The loop's part of `/metrics`.
    Metrics {
        reply: oneshot::Sender<String>,
    },
    /// Ready (caught up, and for an engine: an epoch in force), with a reason when not.
    Health {
        reply: oneshot::Sender<(bool, String)>,
    },
}

/// The HTTP side's way to the loop that holds the log.
#[derive(Clone)]
pub struct Backend(pub mpsc::Sender<UiRequest>);

impl Backend {
    /// Asks the loop something; `None` once it is gone.
    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> UiRequest) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.0.send(make(tx)).await.ok()?;
        rx.await.ok()
    }
}

/// A duration as the API shows it (`"1h"`, `"30s"`), which the API's bodies take back (`api::duration`).
pub(super) fn duration(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// An object as the API shows it, serialized straight from the reader's view: no intermediate JSON tree, so
/// listing 100k objects holds the loop for a fraction of the time.
#[derive(Serialize)]
struct ObjectJson<'a> {
    id: &'a ObjectId,
    definition: DefinitionJson<'a>,
    /// The hard state (`jaque_core::alert`): what notifies and what `state=` and the counts go by.
    state: State,
    /// When it entered that state (`since_ms` below): what "for how long" is counted from.
    state_since_ms: u64,
    paused: bool,
    acknowledged: bool,
    owner: Option<&'a str>,
    epoch: u64,
    last_transition: Option<TransitionJson<'a>>,
    last_seq: u64,
    /// The latest results differ from the hard state and have not made it hard yet; `null` when they agree.
    soft: Option<SoftJson<'a>>,
    /// Flapping: its transitions are not notified, its flapping start and end are.
    flapping: bool,
    /// The log position of the hard transition that opened the problem it is in (cluster format 4), if any.
    episode: Option<u64>,
    /// Its parents in a hard problem: while there is one, its problems are not notified ("parent down").
    parents_down: Vec<&'a ObjectId>,
    /// What holds its problems back from being notified at the log's time, if anything (`policy::held`): a parent
    /// down, a silence or an open maintenance window, and by what.
    held: Option<jaque_core::policy::Suppression>,
}

/// The definition as it is in force: the alerting fields are the effective ones (`alert::Rules::of` under the
/// cluster's active format), the defaults where the put named none, and before format 3 what every build before
/// it does (1 attempt, retries at the interval, no flapping detection).
#[derive(Serialize)]
struct DefinitionJson<'a> {
    /// Its secrets as `***` (`jaque_core::secret`): a read never shows a credential.
    probe: Cow<'a, Probe>,
    interval: String,
    timeout: String,
    /// `{}` when it has none.
    labels: &'a Labels,
    max_attempts: u32,
    retry_interval: String,
    recovery_attempts: u32,
    flapping: bool,
    /// `[]` when it has none.
    parents: &'a [ObjectId],
}

#[derive(Serialize)]
struct SoftJson<'a> {
    /// The latest result's state.
    state: State,
    /// Results in a row on its side, the latest included, of the `of` it takes to become hard.
    attempt: u32,
    of: u32,
    /// When the latest attempt was logged: the next retry is due `retry_interval` after it.
    at_ms: u64,
    output: &'a str,
}

impl<'a> SoftJson<'a> {
    fn of(s: &'a SoftState) -> SoftJson<'a> {
        SoftJson { state: s.state, attempt: s.attempt, of: s.of, at_ms: s.at.as_millis(), output: &s.output }
    }
}

#[derive(Serialize)]
struct TransitionJson<'a> {
    from: State,
    to: State,
    at_ms: u64,
    epoch: u64,
    writer: &'a MemberId,
    output: &'a str,
    seq: u64,
}

fn object<'a>(reader: &'a LogReader, id: &'a ObjectId, view: &'a ObjectView) -> ObjectJson<'a> {
    let rules = Rules::of(&view.def, reader.fence().active_format());
    let parents_down: Vec<&ObjectId> = reader.parents_down(view).collect();
    ObjectJson {
        id,
        definition: DefinitionJson {
            probe: view.def.probe.redacted(),
            interval: duration(view.def.interval_ms),
            timeout: duration(view.def.timeout_ms),
            labels: &view.def.labels,
            max_attempts: rules.max_attempts,
            retry_interval: humantime::format_duration(rules.retry_interval).to_string(),
            recovery_attempts: rules.recovery_attempts,
            flapping: rules.flapping,
            parents: &view.def.parents,
        },
        state: view.state,
        state_since_ms: since_ms(view),
        paused: view.paused,
        acknowledged: view.acked,
        owner: reader.owner(id).map(|o| o.id.as_str()),
        epoch: reader.epoch(),
        last_transition: view.last_transition.as_ref().map(|t| TransitionJson {
            from: t.from,
            to: t.to,
            at_ms: t.at.as_millis(),
            epoch: t.epoch,
            writer: &t.writer,
            output: &t.output,
            seq: t.seq,
        }),
        last_seq: view.last_seq,
        soft: view.soft().map(SoftJson::of),
        flapping: view.flapping(),
        episode: view.episode(),
        held: jaque_core::policy::held(
            reader.policy(),
            &view.def.labels,
            reader.log_time(),
            parents_down.iter().map(|p| p.to_string()).collect(),
        ),
        parents_down,
    }
}

/// An object's state and marks before a change (`GET /api/stream`'s `was`): enough for a page to move its
/// counts from one state to another without asking for them again; with its labels, so a page that counts only
/// the objects a label selector picks knows whether this one counted (a put may change them).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Was {
    pub state: State,
    pub acknowledged: bool,
    pub paused: bool,
    /// Nothing to copy for an object without labels, the most common case.
    pub labels: Labels,
}

impl Was {
    pub fn of(v: &ObjectView) -> Was {
        Was { state: v.state, acknowledged: v.acked, paused: v.paused, labels: v.def.labels.clone() }
    }
}

/// The `data` of a `change` event: the object after the event at `seq` (as `GET /api/objects/{id}` shows it;
/// `null` once deleted) and what it was before.
pub fn change(reader: &LogReader, seq: u64, id: &ObjectId, was: Option<Was>) -> String {
    #[derive(Serialize)]
    struct Change<'a> {
        seq: u64,
        id: &'a ObjectId,
        object: Option<ObjectJson<'a>>,
        was: Option<Was>,
    }
    let object = reader.object(id).map(|v| object(reader, id, v));
    // These types always serialize (see `objects`).
    serde_json::to_string(&Change { seq, id, object, was }).unwrap_or_default()
}

/// A read of objects.
pub enum Lookup {
    /// `GET /api/objects/{id}`: `body` is `None` for an absent id.
    One(ObjectId),
    /// `GET /api/objects`: one page, and where the next one starts.
    Page(PageQuery),
    /// `GET /api/summary`: counts per state, of the objects the selector picks (`None`: all of them).
    Summary(Option<Selector>),
    /// `GET /api/policy`, `GET /api/silences`: the notification policy, not an object's but read where they are.
    Policy(super::policy::Part),
}

/// What the loop hands back: the JSON, and for a page that is not the last, the cursor of the next one.
pub struct Rendered {
    pub body: Option<Vec<u8>>,
    pub next: Option<Cursor>,
}

/// Which objects a page of `GET /api/objects` holds, in which order, and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageQuery {
    pub limit: usize,
    /// Empty: every state.
    pub states: StateSet,
    /// Part of the id, in lower case (ids match in any case); empty: every id.
    pub q: String,
    /// Only the objects whose labels it picks; `None`: every object. Parsed once per request.
    pub selector: Option<Selector>,
    pub sort: Sort,
    pub after: Option<Cursor>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// By id, as strings compare: the log's own order, read straight from where the cursor points.
    Id,
    /// Problems first (critical, unknown, warning, then pending, ok), within a state the longest in it first,
    /// then by id: what a status page shows at the top.
    Severity,
}

impl Sort {
    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Id => "id",
            Sort::Severity => "severity",
        }
    }
}

/// A set of states, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSet(u8);

pub const STATES: [State; 5] = [State::Pending, State::Ok, State::Warning, State::Critical, State::Unknown];

fn index(s: State) -> usize {
    STATES.iter().position(|x| *x == s).unwrap_or(0)
}

impl StateSet {
    fn bit(s: State) -> u8 {
        1 << index(s)
    }

    pub fn insert(&mut self, s: State) {
        self.0 |= StateSet::bit(s);
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// An empty set holds every state: no filter.
    fn admits(self, s: State) -> bool {
        self.0 == 0 || self.0 & StateSet::bit(s) != 0
    }

    /// The states in the set, in `STATES` order.
    pub fn iter(self) -> impl Iterator<Item = State> {
        STATES.into_iter().filter(move |s| self.0 & StateSet::bit(*s) != 0)
    }
}

/// Where a page ended: the key of its last object in the page's order. A key rather than an offset, so the next
/// page starts right after it however many objects were added or deleted meanwhile, even that one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cursor {
    Id(ObjectId),
    Severity { rank: u8, since_ms: u64, id: ObjectId },
}

impl Cursor {
    /// Opaque to clients (base64url of `id:<id>` or `severity:<rank>:<since>:<id>`), so its form may change.
    pub fn encode(&self) -> String {
        let plain = match self {
            Cursor::Id(id) => format!("id:{id}"),
            Cursor::Severity { rank, since_ms, id } => format!("severity:{rank}:{since_ms}:{id}"),
        };
        URL_SAFE_NO_PAD.encode(plain)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let plain = String::from_utf8(URL_SAFE_NO_PAD.decode(s).ok()?).ok()?;
        let (kind, rest) = plain.split_once(':')?;
        match kind {
            "id" => Some(Cursor::Id(ObjectId::new(rest).ok()?)),
            "severity" => {
                let mut parts = rest.splitn(3, ':');
                let rank = parts.next()?.parse().ok().filter(|r| usize::from(*r) < STATES.len())?;
                let since_ms = parts.next()?.parse().ok()?;
                let id = ObjectId::new(parts.next()?).ok()?;
                Some(Cursor::Severity { rank, since_ms, id })
            }
            _ => None,
        }
    }

    pub fn sort(&self) -> Sort {
        match self {
            Cursor::Id(_) => Sort::Id,
            Cursor::Severity { .. } => Sort::Severity,
        }
    }
}

/// Problems first, the worst first.
fn rank(s: State) -> u8 {
    match s {
        State::Critical => 0,
        State::Unknown => 1,
        State::Warning => 2,
        State::Pending => 3,
        State::Ok => 4,
    }
}

/// When the object entered its state: its last transition, or for one never checked, its definition.
fn since_ms(v: &ObjectView) -> u64 {
    v.last_transition.as_ref().map_or(v.anchor, |t| t.at).as_millis()
}

/// `needle` is lower case. Every id is looked at for a search, so most windows are ruled out on one byte.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = needle.split_first() else { return true };
    hay.len() >= needle.len()
        && (0..=hay.len() - needle.len()).any(|i| {
            hay[i].to_ascii_lowercase() == first
                && hay[i + 1..i + needle.len()].iter().zip(rest).all(|(h, n)| h.to_ascii_lowercase() == *n)
        })
}

/// Whether `selector` (if any) picks an object with `labels`.
fn picks(selector: &Option<Selector>, labels: &Labels) -> bool {
    selector.as_ref().is_none_or(|s| s.matches(labels))
}

impl PageQuery {
    fn admits(&self, id: &ObjectId, v: &ObjectView) -> bool {
        self.states.admits(v.state)
            && contains_ignore_case(id.as_str(), &self.q)
            && picks(&self.selector, &v.def.labels)
    }
}

/// Renders a read. These types always serialize (no maps with non-string keys); were it ever to fail, a page
/// or the counts answer 500 and a single object reads as absent.
pub fn objects(reader: &LogReader, lookup: Lookup) -> Rendered {
    match lookup {
        Lookup::One(id) => {
            let body = reader.object(&id).and_then(|v| serde_json::to_vec(&object(reader, &id, v)).ok());
            Rendered { body, next: None }
        }
        Lookup::Page(q) => page(reader, &q),
        Lookup::Summary(selector) => {
            Rendered { body: serde_json::to_vec(&summary(reader, &selector)).ok(), next: None }
        }
        Lookup::Policy(part) => Rendered { body: super::policy::render(reader, part), next: None },
    }
}

fn page(reader: &LogReader, q: &PageQuery) -> Rendered {
    let (ids, more): (Vec<&ObjectId>, bool) = match q.sort {
        Sort::Id => {
            let start = match &q.after {
                Some(Cursor::Id(id)) => Bound::Excluded(id),
                _ => Bound::Unbounded,
            };
            let mut matching =
                reader.objects().range((start, Bound::Unbounded)).filter(|(id, v)| q.admits(id, v)).map(|(id, _)| id);
            let ids: Vec<&ObjectId> = matching.by_ref().take(q.limit).collect();
            let more = ids.len() == q.limit && matching.next().is_some();
            (ids, more)
        }
        Sort::Severity => {
            // Every object has to be looked at (the order is not the map's), but only `limit + 1` keys are kept:
            // one pass, no sort of the whole set, nothing serialized but the page.
            let after = match &q.after {
                Some(Cursor::Severity { rank, since_ms, id }) => Some((*rank, *since_ms, id)),
                _ => None,
            };
            let mut best: BinaryHeap<(u8, u64, &ObjectId)> = BinaryHeap::with_capacity(q.limit + 1);
            for (id, v) in reader.objects() {
                if !q.admits(id, v) {
                    continue;
                }
                let key = (rank(v.state), since_ms(v), id);
                if after.is_some_and(|a| key <= a) {
                    continue;
                }
                if best.len() <= q.limit {
                    best.push(key);
                } else if best.peek().is_some_and(|worst| key < *worst) {
                    best.pop();
                    best.push(key);
                }
            }
            let mut keys = best.into_sorted_vec();
            let more = keys.len() > q.limit;
            keys.truncate(q.limit);
            (keys.into_iter().map(|(_, _, id)| id).collect(), more)
        }
    };
    let items: Vec<ObjectJson> = ids.iter().filter_map(|id| reader.object(id).map(|v| object(reader, id, v))).collect();
    let next = match (more, ids.last()) {
        (true, Some(last)) => Some(match q.sort {
            Sort::Id => Cursor::Id((*last).clone()),
            Sort::Severity => {
                let v = reader.object(last).expect("a key of the page is in the map");
                Cursor::Severity { rank: rank(v.state), since_ms: since_ms(v), id: (*last).clone() }
            }
        }),
        _ => None,
    };
    Rendered { body: serde_json::to_vec(&items).ok(), next }
}

#[derive(Serialize, Default)]
struct SummaryJson {
    objects: u64,
    states: BTreeMap<&'static str, u64>,
    /// Problems someone acknowledged (the mark goes with the next transition).
    acknowledged: u64,
    paused: u64,
    epoch: u64,
    log_position: u64,
}

/// One pass over the objects (those `selector` picks), counting; nothing else is rendered.
fn summary(reader: &LogReader, selector: &Option<Selector>) -> SummaryJson {
    let mut counts = [0u64; STATES.len()];
    let mut s = SummaryJson { epoch: reader.epoch(), log_position: reader.position(), ..Default::default() };
    for v in reader.objects().values().filter(|v| picks(selector, &v.def.labels)) {
        counts[index(v.state)] += 1;
        s.acknowledged += u64::from(v.acked);
        s.paused += u64::from(v.paused);
    }
    s.objects = counts.iter().sum();
    s.states = STATES.iter().zip(counts).map(|(st, n)| (st.as_str(), n)).collect();
    s
}

/// Per bucket: its live members; for the engine bucket also the epoch in force, its members, and how many
/// objects each owns.
pub fn cluster(reader: &LogReader, buckets: &Buckets) -> Value {
    let empty = LiveSet::default();
    let out: Vec<Value> = Bucket::ALL
        .iter()
        .map(|b| {
            let live = buckets.0.get(b).unwrap_or(&empty);
            let formats: BTreeMap<String, u32> = live.formats().map(|(id, f)| (id.to_string(), f)).collect();
            let mut v = json!({
                "bucket": b.prefix(),
                "live_members": live.members(),
                "formats": formats,
            });
            if *b == Bucket::Engine {
                let mut per_owner: BTreeMap<String, u64> = BTreeMap::new();
                let mut unowned = 0u64;
                if let Some(record) = reader.fence().current() {
                    for m in &record.members {
                        per_owner.insert(m.id.to_string(), 0);
                    }
                }
                for id in reader.objects().keys() {
                    match reader.owner(id) {
                        Some(o) => *per_owner.entry(o.id.to_string()).or_default() += 1,
                        None => unowned += 1,
                    }
                }
                v["epoch"] = json!(reader.epoch());
                v["epoch_members"] = json!(reader.fence().current().map(|r| r.members.clone()).unwrap_or_default());
                v["objects"] = json!(reader.objects().len());
                v["objects_per_owner"] = json!(per_owner);
                v["objects_unowned"] = json!(unowned);
            }
            v
        })
        .collect();
    let lowest = buckets.0.values().filter_map(LiveSet::lowest_format).min();
    json!({
        "log_position": reader.position(),
        "stale_events": reader.counters.stale_epoch_total,
        "cluster_format": {
            "active": reader.fence().active_format(),
            "lowest_live": lowest,
            "this_build": jaque_core::format::CLUSTER_FORMAT,
        },
        "buckets": out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::{EpochRecord, Event, EventBody, LogEntry, MemberRef, ObjectDef, Time};

    /// A reader holding `objects` (id, state, time of its transition), in that order in the log.
    fn reader(objects: &[(&str, State, u64)]) -> LogReader {
        let me = MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 };
        let mut r = LogReader::new();
        r.read(
            1,
            &LogEntry::Epoch(EpochRecord {
                epoch: 1,
                members: vec![me.clone()],
                members_rev: 1,
                idempotency_window_ms: None,
                format: 1,
            }),
        );
        let mut seq = 1;
        for (id, state, at) in objects {
            let mut append = |body: EventBody, at: u64| {
                seq += 1;
                let ev = Event {
                    object: ObjectId::new(*id).unwrap(),
                    epoch: 1,
                    writer: me.clone(),
                    at: Time(at),
                    command_id: None,
                    body,
                };
                r.read(seq, &LogEntry::Event(ev));
            };
            let def = ObjectDef {
                probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
                interval_ms: 60_000,
                timeout_ms: 1000,
                ..ObjectDef::UNSET
            };
            append(EventBody::Put { def }, 1);
            if *state != State::Pending {
                append(EventBody::transition(State::Pending, *state, String::new()), *at);
            }
        }
        r
    }

    fn query(limit: usize, sort: Sort) -> PageQuery {
        PageQuery { limit, states: StateSet::default(), q: String::new(), selector: None, sort, after: None }
    }

    fn ids(body: &[u8]) -> Vec<String> {
        let v: Vec<Value> = serde_json::from_slice(body).unwrap();
        v.iter().map(|o| o["id"].as_str().unwrap().to_string()).collect()
    }

    /// Every page of `q`, following the cursors, as ids per page.
    fn walk(r: &LogReader, mut q: PageQuery) -> Vec<Vec<String>> {
        let mut pages = Vec::new();
        loop {
            let page = objects(r, Lookup::Page(q.clone()));
            pages.push(ids(&page.body.unwrap()));
            match page.next {
                Some(next) => q.after = Some(next.clone()),
                None => return pages,
            }
            assert!(pages.len() < 100, "the cursors go round");
        }
    }

    #[test]
    fn pages_by_id_cover_every_object_once_and_the_last_has_no_next() {
        let r = reader(&[
            ("c", State::Ok, 5),
            ("a", State::Ok, 5),
            ("e", State::Critical, 5),
            ("b", State::Ok, 5),
            ("d", State::Ok, 5),
        ]);
        assert_eq!(walk(&r, query(2, Sort::Id)), [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
        assert_eq!(walk(&r, query(5, Sort::Id)), [vec!["a", "b", "c", "d", "e"]], "a full page with nothing after");
    }

    #[test]
    fn a_cursor_at_a_deleted_object_continues_after_where_it_was() {
        let r = reader(&[("a", State::Ok, 5), ("c", State::Ok, 5), ("d", State::Ok, 5)]);
        let mut q = query(10, Sort::Id);
        q.after = Some(Cursor::Id(ObjectId::new("b").unwrap()));
        assert_eq!(walk(&r, q), [vec!["c", "d"]]);
    }

    #[test]
    fn state_and_id_filters_combine() {
        let r = reader(&[
            ("web-1", State::Critical, 5),
            ("Web-2", State::Ok, 5),
            ("db-1", State::Critical, 5),
            ("web-3", State::Warning, 5),
            ("web-4", State::Pending, 0),
        ]);
        let mut q = query(1, Sort::Id);
        q.states.insert(State::Critical);
        q.states.insert(State::Warning);
        assert_eq!(walk(&r, q.clone()), [vec!["db-1"], vec!["web-1"], vec!["web-3"]]);
        q.q = "web".into();
        assert_eq!(walk(&r, q), [vec!["web-1"], vec!["web-3"]]);
        let mut q = query(10, Sort::Id);
        q.q = "eb-".into();
        assert_eq!(walk(&r, q), [vec!["Web-2", "web-1", "web-3", "web-4"]]);
    }

    #[test]
    fn severity_puts_problems_first_the_longest_first_and_pages_through_the_same_order() {
        let r = reader(&[
            ("ok-old", State::Ok, 10),
            ("crit-new", State::Critical, 90),
            ("warn", State::Warning, 50),
            ("crit-old", State::Critical, 20),
            ("unknown", State::Unknown, 70),
            ("crit-tie-b", State::Critical, 20),
            ("pending", State::Pending, 0),
        ]);
        let order = ["crit-old", "crit-tie-b", "crit-new", "unknown", "warn", "pending", "ok-old"];
        assert_eq!(walk(&r, query(100, Sort::Severity)), [order.to_vec()]);
        for limit in 1..order.len() {
            let pages = walk(&r, query(limit, Sort::Severity));
            assert!(pages.iter().all(|p| p.len() <= limit));
            assert_eq!(pages.concat(), order, "limit {limit}");
        }
        let mut problems = query(2, Sort::Severity);
        for s in [State::Critical, State::Unknown, State::Warning] {
            problems.states.insert(s);
        }
        assert_eq!(walk(&r, problems), [vec!["crit-old", "crit-tie-b"], vec!["crit-new", "unknown"], vec!["warn"]]);
    }

    #[test]
    fn cursors_survive_their_encoding_and_anything_else_is_refused() {
        for c in [
            Cursor::Id(ObjectId::new("a:b@c.d-e").unwrap()),
            Cursor::Severity { rank: 4, since_ms: u64::MAX, id: ObjectId::new("x:1").unwrap() },
        ] {
            assert_eq!(Cursor::decode(&c.encode()), Some(c));
        }
        for bad in ["", "!!", "aWQ6", "c2V2ZXJpdHk6OTox", "c2V2ZXJpdHk6MTp4Ong", "Zm9vOmJhcg"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_summary_counts_each_state_in_one_pass() {
        let r = reader(&[
            ("a", State::Critical, 5),
            ("b", State::Critical, 5),
            ("c", State::Ok, 5),
            ("d", State::Pending, 0),
        ]);
        let s: Value = serde_json::from_slice(&objects(&r, Lookup::Summary(None)).body.unwrap()).unwrap();
        assert_eq!(s["objects"], 4);
        assert_eq!(s["states"], json!({"pending": 1, "ok": 1, "warning": 0, "critical": 2, "unknown": 0}));
    }

    /// A reader at cluster format 3 holding `events` on objects, in that order in the log.
    fn reader_at_format_3(events: Vec<(&str, EventBody)>) -> LogReader {
        let me = MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 };
        let mut r = LogReader::new();
        let record =
            EpochRecord { epoch: 1, members: vec![me.clone()], members_rev: 1, idempotency_window_ms: None, format: 3 };
        r.read(1, &LogEntry::Epoch(record));
        for (i, (id, body)) in events.into_iter().enumerate() {
            let ev = Event {
                object: ObjectId::new(id).unwrap(),
                epoch: 1,
                writer: me.clone(),
                at: Time(1_000 + i as u64),
                command_id: None,
                body,
            };
            r.read(i as u64 + 2, &LogEntry::Event(ev));
        }
        r
    }

    fn labelled(labels: &[(&str, &str)]) -> ObjectDef {
        let map = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ObjectDef { labels: Labels::new(map).unwrap(), ..ObjectDef::tcp("127.0.0.1:9", 60_000, 1_000) }
    }

    #[test]
    fn an_object_shows_its_labels_its_rules_in_force_and_its_soft_state() {
        let def = ObjectDef { max_attempts: Some(4), retry_interval_ms: Some(2_000), ..labelled(&[("env", "prod")]) };
        // A new object's first result is hard at once; a problem after it is soft.
        let ok = EventBody::transition(State::Pending, State::Ok, "up");
        let soft =
            EventBody::Soft { state: State::Critical, attempt: 1, of: 4, output: "refused".into(), flapping: None };
        let r = reader_at_format_3(vec![("a", EventBody::Put { def: def.clone() }), ("a", ok), ("a", soft)]);
        let o: Value =
            serde_json::from_slice(&objects(&r, Lookup::One(ObjectId::new("a").unwrap())).body.unwrap()).unwrap();
        let d = &o["definition"];
        assert_eq!(d["labels"], json!({"env": "prod"}));
        assert_eq!(
            (&d["max_attempts"], &d["retry_interval"], &d["recovery_attempts"], &d["flapping"]),
            (&json!(4), &json!("2s"), &json!(1), &json!(true)),
            "what the put named, the defaults for the rest"
        );
        assert_eq!(o["state"], "ok", "the hard state");
        assert_eq!(o["soft"], json!({"state": "critical", "attempt": 1, "of": 4, "at_ms": 1_002, "output": "refused"}));
        assert_eq!(o["flapping"], false);

        // Before format 3 the rules in force are every build's before it, whatever the definition says.
        let old = reader(&[("b", State::Ok, 5)]);
        let o: Value =
            serde_json::from_slice(&objects(&old, Lookup::One(ObjectId::new("b").unwrap())).body.unwrap()).unwrap();
        let d = &o["definition"];
        assert_eq!(d["labels"], json!({}));
        assert_eq!(
            (&d["max_attempts"], &d["retry_interval"], &d["recovery_attempts"], &d["flapping"]),
            (&json!(1), &json!("1m"), &json!(1), &json!(false))
        );
        assert_eq!((&o["soft"], &o["flapping"]), (&Value::Null, &json!(false)));
    }

    #[test]
    fn a_selector_filters_pages_through_their_cursors_and_the_counts() {
        let r = reader_at_format_3(vec![
            ("a", EventBody::Put { def: labelled(&[("env", "prod"), ("team", "web")]) }),
            ("b", EventBody::Put { def: labelled(&[("env", "prod"), ("team", "db")]) }),
            ("c", EventBody::Put { def: labelled(&[("env", "dev")]) }),
            ("d", EventBody::Put { def: labelled(&[("env", "prod")]) }),
            ("e", EventBody::Put { def: labelled(&[]) }),
            ("f", EventBody::Put { def: labelled(&[("env", "prod"), ("canary", "")]) }),
        ]);
        let with = |text: &str, limit: usize| PageQuery {
            selector: Some(Selector::parse(text).unwrap()),
            ..query(limit, Sort::Id)
        };
        assert_eq!(walk(&r, with("env=prod", 2)), [vec!["a", "b"], vec!["d", "f"]]);
        assert_eq!(walk(&r, with("env=prod,team!=db,!canary", 1)), [vec!["a"], vec!["d"]]);
        assert_eq!(walk(&r, with("team in (web,db)", 10)), [vec!["a", "b"]]);
        assert_eq!(walk(&r, with("env notin (prod)", 10)), [vec!["c", "e"]], "notin: without the key too");
        let severity = PageQuery { sort: Sort::Severity, ..with("env=prod", 3) };
        assert_eq!(walk(&r, severity).concat(), ["a", "b", "d", "f"]);
        let counts = |text: &str| -> Value {
            let selector = Some(Selector::parse(text).unwrap());
            serde_json::from_slice(&objects(&r, Lookup::Summary(selector)).body.unwrap()).unwrap()
        };
        assert_eq!(counts("env=prod")["objects"], 4);
        assert_eq!(counts("env=prod")["states"]["pending"], 4);
        assert_eq!(counts("canary")["objects"], 1);
    }
}
