//! Golden fixtures (issue 33): what each release wrote, read by this build. `tests/compat/<version>/` holds what
//! that release wrote — a log, a snapshot of it, KV values, messages, a `-data-dir` with its SQLite sink store,
//! and a dump of a PostgreSQL sink store (`tests/compat/README.md` says which file is what) — and every test
//! here reads every such directory, so a change that stops this build reading what a release wrote fails the
//! suite. What each directory's build made of its own bytes is in the directory too (`*-expected.json`); this
//! build must make at least that of them: every field the release gave, with the same value (a field it adds
//! is not a difference). `write_fixtures` (ignored; `scripts/write-compat-fixtures.sh VERSION`) writes this
//! build's directory.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jaque_core::notifier::{Claim, DeliveryRecord, EndpointId};
use jaque_core::policy;
use jaque_core::wire::{self, Answer, Heartbeat, OneOrMany};
use jaque_core::{
    Bucket, CheckResult, CheckWork, Command, CommandId, CommandKind, Effect, EpochRecord, Event, EventBody, LogEntry,
    LogReader, MemberId, MemberRef, ObjectDef, ObjectId, Outcome, Probe, Read, State, Time,
};
use jaque_tests::postgres::{bin_dir, psql_file};
use jaque_tests::{jaque_bin, poll, Jaque, Postgres, Target};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};

/// The files of a fixture directory.
const LOG: &str = "log.jsonl";
const LOG_EXPECTED: &str = "log-expected.json";
const SNAPSHOT: &str = "snapshot.json";
const KV: &str = "kv.jsonl";
const MESSAGES: &str = "messages.jsonl";
const DATA_DIR: &str = "data-dir";
const DATA_DIR_EXPECTED: &str = "data-dir-expected.json";
const POSTGRES: &str = "postgres.sql";
const WRITTEN_BY: &str = "jaque-version.txt";

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("compat")
}

/// Every release's fixture directory, oldest name first (a directory whose name begins with `.` is one being
/// written).
fn fixtures() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(compat_dir())
        .expect("tests/compat/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_dir() && !p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')))
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no fixture directory in {}", compat_dir().display());
    dirs
}

fn name(dir: &Path) -> String {
    dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string()
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_lines(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), i + 1)))
        .collect()
}

/// Whether `actual` holds everything `expected` does: every field of an object, recursively (`actual` may have
/// more: what a later build adds), arrays element by element, everything else equal. A field `expected` has as
/// null may be absent. The error names where they differ.
fn contains(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                match a.get(k) {
                    Some(av) => contains(v, av, &format!("{at}.{k}"))?,
                    None if v.is_null() => {}
                    None => return Err(format!("{at}.{k} is missing (expected {v})")),
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            e.iter().zip(a).enumerate().try_for_each(|(i, (ev, av))| contains(ev, av, &format!("{at}[{i}]")))
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{at}: expected {expected}, got {actual}")),
    }
}

fn assert_contains(expected: &Value, actual: &Value, what: &str) {
    if let Err(e) = contains(expected, actual, "") {
        panic!("{what}: {e}\n--- expected (at least) ---\n{expected:#}\n--- got ---\n{actual:#}");
    }
}

/// Bytes as JSON (every message jaque writes is JSON text).
fn parse(what: &str, bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{what} is not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// Bytes a release wrote, decoded by this build and written again by it, lose nothing: every field they had is
/// in what this build writes of them, with the same value.
fn nothing_lost(what: &str, original: &[u8], written_again: &[u8]) {
    assert_contains(&parse(what, original), &parse(what, written_again), what);
}

// ---- (a) the log and (b) its snapshot ----

/// What reading one entry did, as the fixture records it.
fn describe_read(read: &Read) -> Value {
    match read {
        Read::Duplicate => json!("duplicate position"),
        Read::Gap { expected, got } => json!({"gap": [expected, got]}),
        Read::Unreadable => json!("unreadable"),
        Read::TooNew { needs } => json!({"too new": {"needs": needs}}),
        Read::EpochInstalled => json!("epoch installed"),
        Read::EpochRejected(e) => json!({"epoch rejected": format!("{e:?}")}),
        Read::Event { verdict, effect } => {
            let effect = match effect {
                Effect::None => json!("none"),
                Effect::Command(o) => json!({"command": o}),
                Effect::DuplicateCommand(o) => json!({"duplicate command": o}),
                Effect::Transitioned => json!("transitioned"),
                Effect::Folded => json!("folded"),
                Effect::Ignored => json!("ignored"),
            };
            json!({"accepted": verdict.is_accepted(), "effect": effect})
        }
    }
}

/// A reader's state as the fixture records it: where it is, the epoch in force, every object's view, the
/// deleted ones, the command ids it remembers and its counters.
fn reader_state(reader: &LogReader) -> Value {
    let snapshot = reader.snapshot();
    let objects: Map<String, Value> = reader
        .objects()
        .iter()
        .map(|(id, view)| (id.to_string(), serde_json::to_value(&**view).expect("a view serializes")))
        .collect();
    let mut state = json!({
        "position": reader.position(),
        "epoch": reader.epoch(),
        "epoch_seq": reader.epoch_seq(),
        "log_time": snapshot.log_time,
        "objects": objects,
        "tombstones": snapshot.tombstones,
        "applied": snapshot.applied,
        "counters": snapshot.counters,
    });
    // Releases before the policy (cluster format 4) have none, and their expectations no key for it.
    if !reader.policy().is_empty() {
        state["policy"] = serde_json::to_value(&**reader.policy()).expect("a policy serializes");
    }
    state
}

/// The fixture's log decoded by this build (each entry losing nothing) and folded: the reader, and what each
/// entry did.
fn fold(dir: &Path) -> (LogReader, Vec<Value>) {
    let mut reader = LogReader::new();
    let mut reads = Vec::new();
    for line in json_lines(&dir.join(LOG)) {
        let seq = line["seq"].as_u64().expect("seq");
        let bytes = line["entry"].as_str().expect("entry").as_bytes();
        let what = format!("{} {LOG} entry {seq}", name(dir));
        let entry = wire::decode_log_entry(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        nothing_lost(&what, bytes, &wire::encode_log_entry(&entry));
        let read = reader.read(seq, &entry);
        reads.push(json!({"seq": seq, "read": describe_read(&read)}));
    }
    (reader, reads)
}

#[test]
fn the_log_every_release_wrote_folds_to_the_state_and_verdicts_it_folded_to_then() {
    for dir in fixtures() {
        let expected = read_json(&dir.join(LOG_EXPECTED));
        let (reader, reads) = fold(&dir);
        assert_contains(&expected["reads"], &json!(reads), &format!("{}: what each entry did", name(&dir)));
        assert_contains(&expected["state"], &reader_state(&reader), &format!("{}: the folded state", name(&dir)));
    }
}

#[test]
fn the_snapshot_every_release_wrote_is_the_reader_its_log_folds_to() {
    for dir in fixtures() {
        let bytes = fs::read(dir.join(SNAPSHOT)).unwrap();
        let what = format!("{} {SNAPSHOT}", name(&dir));
        let decoded = wire::decode_snapshot(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        let streamed = wire::read_snapshot(&bytes[..]).unwrap_or_else(|e| panic!("{what}, streamed: {e}"));
        let (folded, _) = fold(&dir);
        if decoded != folded {
            panic!(
                "{what} is not the reader its log folds to\n--- snapshot ---\n{:#}\n--- log ---\n{:#}",
                reader_state(&decoded),
                reader_state(&folded)
            );
        }
        assert!(streamed == decoded, "{what}: read as it streams, it is another reader");
        let expected = read_json(&dir.join(LOG_EXPECTED));
        assert_contains(&expected["state"], &reader_state(&decoded), &what);
    }
}

// ---- (c) KV values and (d) messages ----

/// A notifier progress record's key: `notify.<endpoint, 16 hex digits>.<object id, unpadded base64url>`.
fn record_key(endpoint: EndpointId, object: &str) -> String {
    format!("notify.{endpoint}.{}", URL_SAFE_NO_PAD.encode(object))
}

#[test]
fn the_kv_values_every_release_wrote_decode_and_lose_nothing() {
    for dir in fixtures() {
        let mut kinds = BTreeSet::new();
        for line in json_lines(&dir.join(KV)) {
            let (kind, key, value) = (line["kind"].as_str().unwrap(), line["key"].as_str().unwrap(), &line["value"]);
            let value = value.as_str().unwrap().as_bytes();
            let what = format!("{} {KV} {kind} {key}", name(&dir));
            match kind {
                "heartbeat" => {
                    let (bucket, id) = Bucket::split_key(key).unwrap_or_else(|| panic!("{what}: not a member key"));
                    let (member, format) = wire::decode_heartbeat(id, value).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(member.id.as_str(), id, "{what}");
                    let hb: Heartbeat = serde_json::from_slice(value).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!((hb.incarnation, hb.format), (member.incarnation, format), "{what}");
                    nothing_lost(&what, value, &wire::encode(&hb));
                    kinds.insert(format!("heartbeat {}", bucket.prefix()));
                }
                "delivery_record" => {
                    let (endpoint, object) = key
                        .strip_prefix("notify.")
                        .and_then(|k| k.split_once('.'))
                        .unwrap_or_else(|| panic!("{what}: not a record key"));
                    let endpoint = u64::from_str_radix(endpoint, 16).map(EndpointId).expect("an endpoint id");
                    let object = URL_SAFE_NO_PAD.decode(object).expect("base64url");
                    let object = ObjectId::new(String::from_utf8(object).expect("UTF-8")).expect("an object id");
                    assert_eq!(record_key(endpoint, object.as_str()), key, "{what}");
                    let record: DeliveryRecord =
                        serde_json::from_slice(value).unwrap_or_else(|e| panic!("{what}: {e}"));
                    nothing_lost(&what, value, &serde_json::to_vec(&record).unwrap());
                    kinds.insert(format!("{kind} claimed={}", record.claim.is_some()));
                }
                "notifier_start" => {
                    let endpoint = key.strip_prefix("notify.start.").expect("a start key");
                    assert!(endpoint.len() == 16 && u64::from_str_radix(endpoint, 16).is_ok(), "{what}");
                    let text = std::str::from_utf8(value).expect("UTF-8");
                    text.trim().parse::<u64>().unwrap_or_else(|e| panic!("{what}: not a log position: {e}"));
                    kinds.insert(kind.to_string());
                }
                other => panic!("{what}: a kind of value this test does not know: {other}"),
            }
        }
        let want = [
            "delivery_record claimed=false",
            "delivery_record claimed=true",
            "heartbeat membership/",
            "heartbeat notifier/membership/",
            "heartbeat sink/membership/",
            "notifier_start",
        ];
        assert_eq!(kinds, want.iter().map(|s| s.to_string()).collect(), "{}: every kind of value", name(&dir));
    }
}

#[test]
fn the_messages_every_release_wrote_decode_and_lose_nothing() {
    for dir in fixtures() {
        let mut kinds = BTreeSet::new();
        for (i, line) in json_lines(&dir.join(MESSAGES)).into_iter().enumerate() {
            let kind = line["kind"].as_str().unwrap().to_string();
            let bytes = line["bytes"].as_str().unwrap().as_bytes();
            let what = format!("{} {MESSAGES} line {} ({kind})", name(&dir), i + 1);
            let fail = |e: wire::WireError| -> ! { panic!("{what}: {e}") };
            let again = match kind.as_str() {
                "command" => wire::encode(&wire::decode_command(bytes).unwrap_or_else(|e| fail(e))),
                "claim_request" => {
                    let request = wire::decode_request(bytes).unwrap_or_else(|e| fail(e));
                    assert!(request.claim, "{what}: a claim request asks for a claim");
                    wire::encode_claim_request(&request.cmd)
                }
                "answer" => wire::encode_answer(&wire::decode_answer(bytes).unwrap_or_else(|e| fail(e))),
                "outcome" => wire::encode(&wire::decode_outcome(bytes).unwrap_or_else(|e| fail(e))),
                "check_work" => wire::encode(&wire::decode_check_work(bytes).unwrap_or_else(|e| fail(e))),
                "check_result" => wire::encode(&wire::decode_check_result(bytes).unwrap_or_else(|e| fail(e))),
                other => panic!("{what}: a kind of message this test does not know: {other}"),
            };
            nothing_lost(&what, bytes, &again);
            kinds.insert(kind);
        }
        let want = ["answer", "check_result", "check_work", "claim_request", "command", "outcome"];
        assert_eq!(kinds, want.iter().map(|s| s.to_string()).collect(), "{}: every kind of message", name(&dir));
    }
}

// ---- (e) a -data-dir with its SQLite store, (f) a PostgreSQL store ----

/// Copies a directory tree (files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// The one-process install the data-dir fixture is: engine, worker, ui and sink, the log in `dir`, the sink's
/// store in `store` (None: `dir/jaque-sink.db`).
fn one_process(name: &str, dir: &Path, store: Option<&str>, extra: &[&str]) -> Jaque {
    let d = dir.to_str().unwrap();
    let mut args = vec!["-target", "engine,worker,ui,sink", "-queue", "memory", "-data-dir", d, "-id", "fixture"];
    if let Some(store) = store {
        args.extend(["-sink-store", store]);
    }
    args.extend(extra);
    let j = Jaque::start(name, &args);
    j.wait_ready();
    j
}

fn objects(j: &Jaque) -> Map<String, Value> {
    let r = j.get("/api/objects");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().as_array().unwrap().iter().map(|o| (o["id"].as_str().unwrap().to_string(), o.clone())).collect()
}

/// An object's whole history, oldest first.
fn history(j: &Jaque, id: &str) -> Vec<Value> {
    let r = j.get(&format!("/api/objects/{id}/history?limit=1000"));
    assert_eq!(r.status, 200, "{id}: {}", r.text());
    let mut events = r.json()["events"].as_array().unwrap().clone();
    events.reverse();
    events
}

fn metric(j: &Jaque, name: &str) -> u64 {
    j.metric(name).unwrap_or_else(|| panic!("{} has no {name}", j.proc.name)) as u64
}

/// The current build on a copy of a release's `-data-dir`, its sink on `store` (None: the directory's own
/// SQLite file): every object as the release left it, the epoch after the release's, every object's history as
/// the release's sink stored it, and a new write appended to the same store.
fn take_over(fixture: &Path, store: Option<&str>) {
    let expected = read_json(&fixture.join(DATA_DIR_EXPECTED));
    let what = |s: &str| format!("{} ({}): {s}", name(fixture), store.map_or("sqlite", |_| "postgres"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data-dir");
    copy_tree(&fixture.join(DATA_DIR), &dir);
    let mut j = one_process(&what("taking over"), &dir, store, &[]);

    let got = objects(&j);
    let want = expected["objects"].as_object().unwrap();
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{}", what("the objects"));
    for (id, o) in want {
        assert_contains(o, &got[id], &what(id));
    }
    let epoch = expected["epoch"].as_u64().unwrap();
    poll(&what("the epoch after the release's"), || (metric(&j, "jaque_engine_epoch") == epoch + 1).then_some(()));
    // Releases from 0.3.0 on (cluster format 4) hold a notification policy.
    if let Some(policy) = expected.get("policy") {
        assert_contains(policy, &j.get("/api/policy").json(), &what("the policy"));
    }

    // The release's rows, read through this build's history API; rows past them are this run's own.
    let position = expected["log_position"].as_u64().unwrap();
    for (id, events) in expected["history"].as_object().unwrap() {
        let stored: Vec<Value> =
            history(&j, id).into_iter().filter(|e| e["seq"].as_u64().is_some_and(|s| s <= position)).collect();
        assert_contains(events, &json!(stored), &what(&format!("{id}'s history")));
    }
    let body = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h"});
    let r = j.put("/api/objects/after-upgrade", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["epoch"], epoch + 1);
    let seq = r.json()["seq"].as_u64().unwrap();
    assert!(seq > position, "{}", what("the log goes on after the release's"));
    poll(&what("the new write in the release's store"), || {
        history(&j, "after-upgrade").iter().any(|e| e["seq"] == seq && e["type"] == "put").then_some(())
    });
    assert!(fs::read_to_string(dir.join("FORMAT")).unwrap().starts_with("jaque data-dir "), "{}", what("FORMAT"));
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success(), "{}", what("a clean exit"));
}

#[test]
fn the_data_dir_and_sqlite_store_every_release_wrote_are_taken_over_with_every_object_and_its_history() {
    for dir in fixtures() {
        take_over(&dir, None);
    }
}

#[test]
fn the_postgresql_store_every_release_wrote_is_taken_over_by_this_builds_sink() {
    for dir in fixtures() {
        let pg = Postgres::start();
        psql_file(&pg.url(), &dir.join(POSTGRES));
        let rows = pg.psql("SELECT count(*) FROM events");
        take_over(&dir, Some(&pg.url()));
        let position = read_json(&dir.join(DATA_DIR_EXPECTED))["log_position"].as_u64().unwrap();
        let kept = pg.psql(&format!("SELECT count(*) FROM events WHERE seq <= {position}"));
        assert_eq!(kept, rows, "{}: the release's rows are all still there", name(&dir));
        let schema = pg.psql("SELECT max(version) FROM jaque_schema");
        assert!(schema.parse::<u32>().is_ok_and(|v| v >= 1), "{schema}");
    }
}

// ---- Writing a release's fixtures ----

/// Each kind of event once, in the order the fixture's object `every-kind` goes through them. The match is
/// exhaustive on purpose: a new kind of event does not compile here until it has a place in the fixture.
fn every_event_kind() -> Vec<EventBody> {
    let mut all = Vec::new();
    let def = ObjectDef { max_attempts: Some(2), ..tcp("127.0.0.1:9", 60_000) };
    let mut next = Some(EventBody::Put { def });
    while let Some(body) = next {
        next = match &body {
            EventBody::Put { .. } => Some(EventBody::Soft {
                state: State::Critical,
                attempt: 1,
                of: 2,
                output: "refused".into(),
                flapping: None,
            }),
            EventBody::Soft { .. } => Some(EventBody::Transition {
                from: State::Pending,
                to: State::Critical,
                output: "refused".into(),
                attempt: 2,
                flapping: None,
                flaps: false,
                notify: None,
            }),
            EventBody::Transition { .. } => Some(EventBody::Flapping { on: false }),
            EventBody::Flapping { .. } => Some(EventBody::Ack),
            EventBody::Ack => Some(EventBody::Unack),
            EventBody::Unack => Some(EventBody::CheckRequested),
            EventBody::CheckRequested => Some(EventBody::Pause),
            EventBody::Pause => Some(EventBody::Resume),
            EventBody::Resume => Some(EventBody::Delete),
            EventBody::Delete => Some(EventBody::Policy { change: Box::new(put_receiver()) }),
            // Of no episode the object is in (it is deleted by now): read, and ignored.
            EventBody::Policy { .. } => Some(EventBody::Released {
                episode: 1,
                state: State::Critical,
                notify: Box::new(policy::Notify { receivers: vec![], implicit: true, suppressed: None }),
            }),
            EventBody::Released { .. } => None,
        };
        all.push(body);
    }
    all
}

/// The command that makes an event of this kind (a transition is a check's doing, no command's).
fn command_of(body: &EventBody) -> Option<CommandKind> {
    match body {
        EventBody::Put { def } => Some(CommandKind::Put { def: def.clone() }),
        EventBody::Delete => Some(CommandKind::Delete),
        EventBody::Pause => Some(CommandKind::Pause),
        EventBody::Resume => Some(CommandKind::Resume),
        EventBody::CheckRequested => Some(CommandKind::CheckNow),
        EventBody::Ack => Some(CommandKind::Ack),
        EventBody::Unack => Some(CommandKind::Unack),
        EventBody::Policy { change } => Some(CommandKind::Policy { change: change.clone() }),
        EventBody::Transition { .. }
        | EventBody::Soft { .. }
        | EventBody::Flapping { .. }
        | EventBody::Released { .. } => None,
    }
}

/// Each kind of outcome once; exhaustive like `every_event_kind`.
fn every_outcome() -> Vec<Outcome> {
    let mut all = Vec::new();
    let applied = Outcome::Applied { command_id: cid("c-1"), owner: mid("e1"), epoch: 2, seq: 17 };
    let mut next = Some(applied);
    while let Some(outcome) = next {
        next = match &outcome {
            Outcome::Applied { .. } => Some(Outcome::NotFound { command_id: cid("c-2") }),
            Outcome::NotFound { .. } => Some(Outcome::NotOwned),
            Outcome::NotOwned => Some(Outcome::Rejected { reason: "interval must be between 100ms and 7d".into() }),
            Outcome::Rejected { .. } => Some(Outcome::Unavailable { reason: "no epoch in force yet".into() }),
            Outcome::Unavailable { .. } => None,
        };
        all.push(outcome);
    }
    all
}

/// An object's id, or the policy's key.
fn oid(s: &str) -> ObjectId {
    ObjectId::from_log(s).unwrap()
}

/// The key an event of this kind is written on: the policy's for a policy change, else `object`.
fn key_of<'a>(body: &EventBody, object: &'a str) -> &'a str {
    if matches!(body, EventBody::Policy { .. }) {
        ObjectId::POLICY
    } else {
        object
    }
}

/// A policy change (cluster format 4): a receiver whose secret is a reference on the notifier's host.
fn put_receiver() -> policy::Change {
    policy::Change::PutReceiver {
        receiver: policy::Receiver {
            name: policy::Name::new("db-team").unwrap(),
            kind: policy::ReceiverKind::Webhook {
                url: "https://hooks.example.com/db".into(),
                secret: Some(policy::SecretRef::Env("DB_HOOK_SECRET".into())),
            },
        },
    }
}

fn mid(s: &str) -> MemberId {
    MemberId::new(s).unwrap()
}

fn cid(s: &str) -> CommandId {
    CommandId::new(s).unwrap()
}

fn member(id: &str, incarnation: u64) -> MemberRef {
    MemberRef { id: mid(id), incarnation }
}

fn transition(from: State, to: State, output: &str) -> EventBody {
    EventBody::transition(from, to, output)
}

fn tcp(addr: &str, interval_ms: u64) -> ObjectDef {
    ObjectDef::tcp(addr, interval_ms, 5_000)
}

/// The log's clock at the fixture's first entry (2025-01-01T00:00:00Z): every entry is a second after the last.
const T0: u64 = 1_735_689_600_000;

/// Writes a log entry by entry, reading each into a reader as it goes.
#[derive(Default)]
struct LogWriter {
    entries: Vec<(u64, LogEntry)>,
    reader: LogReader,
    reads: Vec<Value>,
}

impl LogWriter {
    fn push(&mut self, entry: LogEntry) {
        let seq = self.entries.len() as u64 + 1;
        let read = self.reader.read(seq, &entry);
        self.reads.push(json!({"seq": seq, "read": describe_read(&read)}));
        self.entries.push((seq, entry));
    }

    fn epoch(&mut self, epoch: u64, members: Vec<MemberRef>, members_rev: u64) {
        self.push(LogEntry::Epoch(EpochRecord {
            epoch,
            members,
            members_rev,
            idempotency_window_ms: Some(86_400_000),
            // The format a cluster of this build's members runs at: every kind of event it has may be written.
            format: jaque_core::format::CLUSTER_FORMAT,
        }));
    }

    /// An event on `object` by its owner under the epoch in force, or by `by`.
    fn event(&mut self, object: &str, body: EventBody, command: Option<&str>, by: Option<MemberRef>) {
        let object = oid(object);
        let writer = by.unwrap_or_else(|| self.reader.owner(&object).expect("an epoch in force").clone());
        let at = Time::from_millis(T0 + 1_000 * self.entries.len() as u64);
        let command_id = command.map(cid);
        self.push(LogEntry::Event(Event { object, epoch: self.reader.epoch(), writer, at, command_id, body }));
    }

    /// A command's event: its id named after the object and the kind.
    fn command(&mut self, object: &str, body: EventBody) {
        // The policy's key has a `/`, which no command id may: `jaque.policy-<n>` for it.
        let id = format!("{}-{}", object.replace('/', "."), self.entries.len() + 1);
        self.event(object, body, Some(&id), None);
    }
}

/// (a) and (b): a log with an epoch record, every kind of event, a second epoch, an event its fence discards, a
/// command applied twice and one on an object that does not exist; what reading it gives; its snapshot.
fn write_log(out: &Path) {
    let (e1, e2) = (member("e1", T0 - 60_000), member("e2", T0 - 30_000));
    let mut log = LogWriter::default();
    log.epoch(1, vec![e1.clone()], 1);
    let kinds = every_event_kind();
    for body in &kinds {
        let made = command_of(body);
        assert!(made.as_ref().is_none_or(|k| EventBody::from_command(k) == *body), "{body:?}");
        match made {
            Some(_) => log.command(key_of(body, "every-kind"), body.clone()),
            None => log.event("every-kind", body.clone(), None, None),
        }
    }
    let web = ObjectDef {
        probe: Probe::Http { url: "https://user:secret@example.com/health".into(), expect_status: Some(204) },
        interval_ms: 30_000,
        timeout_ms: 5_000,
        ..ObjectDef::UNSET
    };
    let job = ObjectDef {
        probe: Probe::Exec { plugin: "check_disk".into(), args: vec!["-w".into(), "80%".into()] },
        interval_ms: 300_000,
        timeout_ms: 60_000,
        ..ObjectDef::UNSET
    };
    log.command("web", EventBody::Put { def: web });
    log.event("web", transition(State::Pending, State::Ok, "HTTP 204"), None, None);
    log.command("db:5432@eu", EventBody::Put { def: tcp("db.example.com:5432", 10_000) });
    log.event("db:5432@eu", transition(State::Pending, State::Critical, "connection refused"), None, None);
    log.command("db:5432@eu", EventBody::Ack);
    log.command("job", EventBody::Put { def: job });
    log.event("job", EventBody::Pause, Some("pause-job"), None);

    log.epoch(2, vec![e1.clone(), e2.clone()], 9);
    log.command("web", EventBody::CheckRequested);
    log.event("web", transition(State::Ok, State::Warning, "slow"), None, None);
    // Written by the engine that does not own web under epoch 2: the fence discards it.
    let not_owner = if log.reader.owner(&oid("web")) == Some(&e1) { e2.clone() } else { e1.clone() };
    log.event("web", transition(State::Warning, State::Critical, "stale"), None, Some(not_owner));
    // A retried command: applied once.
    log.event("job", EventBody::Pause, Some("pause-job"), None);
    log.command("nobody", EventBody::Ack);

    let reader = &log.reader;
    let view = |id: &str| reader.object(&oid(id)).unwrap_or_else(|| panic!("{id}"));
    assert_eq!((view("web").state, view("web").paused), (State::Warning, false));
    assert_eq!((view("db:5432@eu").state, view("db:5432@eu").acked), (State::Critical, true));
    assert!(view("job").paused);
    assert!(reader.object(&oid("every-kind")).is_none(), "deleted");
    assert_eq!((reader.counters.stale_epoch_total, reader.counters.duplicate_commands_total), (1, 1));

    let mut lines = String::new();
    for (seq, entry) in &log.entries {
        let bytes = String::from_utf8(wire::encode_log_entry(entry)).unwrap();
        lines.push_str(&json!({"seq": seq, "entry": bytes}).to_string());
        lines.push('\n');
    }
    fs::write(out.join(LOG), lines).unwrap();
    let expected = json!({"state": reader_state(reader), "reads": log.reads});
    fs::write(out.join(LOG_EXPECTED), format!("{expected:#}\n")).unwrap();
    fs::write(out.join(SNAPSHOT), wire::encode_snapshot(&reader.snapshot())).unwrap();
}

fn json_line(kind: &str, field: &str, bytes: Vec<u8>, extra: &[(&str, &str)]) -> String {
    let mut line = Map::new();
    line.insert("kind".into(), json!(kind));
    for (k, v) in extra {
        line.insert(k.to_string(), json!(v));
    }
    line.insert(field.into(), json!(String::from_utf8(bytes).unwrap()));
    format!("{}\n", Value::Object(line))
}

/// (c): a member key's value in each bucket, notifier progress records with and without a claim, and an
/// endpoint's start record, as they stand in the membership bucket.
fn write_kv(out: &Path) {
    let mut lines = String::new();
    for (bucket, id, incarnation) in
        [(Bucket::Engine, "e1", T0), (Bucket::Sink, "s1", T0 + 1), (Bucket::Notifier, "n1", T0 + 2)]
    {
        let key = format!("{}{id}", bucket.prefix());
        let value = wire::encode(&Heartbeat { incarnation, format: jaque_core::format::CLUSTER_FORMAT });
        lines.push_str(&json_line("heartbeat", "value", value, &[("key", &key)]));
    }
    let endpoint = EndpointId::of("https://hooks.example.com/jaque");
    let claimed = DeliveryRecord { done: 12, claim: Some(Claim { seq: 15, by: member("n1", T0 + 2) }) };
    let done = DeliveryRecord { done: 20, claim: None };
    for (object, record) in [("web", claimed), ("db:5432@eu", done)] {
        let key = record_key(endpoint, object);
        let value = serde_json::to_vec(&record).unwrap();
        lines.push_str(&json_line("delivery_record", "value", value, &[("key", &key)]));
    }
    let key = format!("notify.start.{endpoint}");
    lines.push_str(&json_line("notifier_start", "value", b"7".to_vec(), &[("key", &key)]));
    fs::write(out.join(KV), lines).unwrap();
}

/// (d): a command of every kind (and a forward), a claim request, both answers before an outcome, every outcome,
/// check work and results both as arrays and alone.
fn write_messages(out: &Path) {
    let mut lines = String::new();
    let commands: Vec<Command> = every_event_kind()
        .iter()
        .filter_map(|body| Some((command_of(body)?, key_of(body, "web"))))
        .enumerate()
        .map(|(i, (kind, object))| Command { id: cid(&format!("cmd-{i}")), object: oid(object), kind, hop: 0 })
        .collect();
    for c in &commands {
        lines.push_str(&json_line("command", "bytes", wire::encode(c), &[]));
    }
    let forward = Command { hop: 1, ..commands[1].clone() };
    lines.push_str(&json_line("command", "bytes", wire::encode(&forward), &[]));
    lines.push_str(&json_line("claim_request", "bytes", wire::encode_claim_request(&commands[0]), &[]));
    for answer in [Answer::Claimed { by: mid("e1") }, Answer::Declined { by: mid("e2"), reason: "leaving".into() }] {
        lines.push_str(&json_line("answer", "bytes", wire::encode_answer(&answer), &[]));
    }
    for outcome in every_outcome() {
        lines.push_str(&json_line("outcome", "bytes", wire::encode(&outcome), &[]));
    }
    let work = |check_id: u64, probe: Probe| CheckWork { check_id, object: oid("web"), probe, timeout_ms: 5_000 };
    let probes = [
        Probe::Http { url: "http://127.0.0.1:8080/".into(), expect_status: None },
        Probe::Tcp { addr: "127.0.0.1:5432".into() },
        Probe::Exec { plugin: "check_load".into(), args: vec!["-c".into(), "4".into()] },
    ];
    let many: Vec<CheckWork> = probes.into_iter().enumerate().map(|(i, p)| work(i as u64 + 1, p)).collect();
    lines.push_str(&json_line("check_work", "bytes", wire::encode(&OneOrMany::Many(many)), &[]));
    let one = work(9, Probe::Tcp { addr: "db.example.com:5432".into() });
    lines.push_str(&json_line("check_work", "bytes", wire::encode(&OneOrMany::One(one)), &[]));
    let result = |check_id: u64, state: State, output: &str| CheckResult {
        check_id,
        object: oid("web"),
        state,
        output: output.into(),
    };
    let many = vec![result(1, State::Ok, "HTTP 200"), result(2, State::Critical, "connection refused")];
    lines.push_str(&json_line("check_result", "bytes", wire::encode(&OneOrMany::Many(many)), &[]));
    let one = result(9, State::Unknown, "plugin exited 3");
    lines.push_str(&json_line("check_result", "bytes", wire::encode(&OneOrMany::One(one)), &[]));
    fs::write(out.join(MESSAGES), lines).unwrap();
}

/// An object as a restart must keep it: less who owns it and under which epoch.
fn kept(o: &Value) -> Value {
    let fields = ["id", "definition", "state", "paused", "acknowledged", "last_transition", "last_seq"];
    Value::Object(fields.iter().filter_map(|f| Some((f.to_string(), o.get(*f)?.clone()))).collect())
}

/// Writes with an `Idempotency-Key`, so the command ids in the fixture are readable.
fn write(j: &Jaque, method: &str, path: &str, key: &str, body: Option<&Value>) {
    let body = body.map(|b| b.to_string());
    let r = j.request(method, path, &[("Idempotency-Key", key)], body.as_deref().map(str::as_bytes));
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
}

/// Waits until the sink has stored every event up to the log's position; that position.
fn sink_caught_up(j: &Jaque) -> u64 {
    poll("the sink to store the whole log", || {
        let position = j.get("/api/summary").json()["log_position"].as_u64()?;
        let written = metric(j, "jaque_sink_written_position");
        (written == position && metric(j, "jaque_sink_lag_events") == 0).then_some(position)
    })
}

/// Folds what SQLite keeps in its write-ahead log into the database file, so the fixture is one file.
fn checkpoint_sqlite(db: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(db);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&pool).await.unwrap();
        pool.close().await;
    });
    for leftover in ["jaque-sink.db-wal", "jaque-sink.db-shm"] {
        let path = db.with_file_name(leftover);
        if path.exists() {
            fs::remove_file(path).unwrap();
        }
    }
}

/// (e) and (f): a one-process install's `-data-dir` with its SQLite sink store, the objects and histories its
/// API shows, and a PostgreSQL store a sink filled from the same log, dumped.
fn write_data_dir(out: &Path) {
    let dir = out.join(DATA_DIR);
    let target = Target::start();
    let mut j = one_process("fixture", &dir, None, &["-snapshot-every", "8"]);
    let tcp = |interval: &str| json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": interval});
    let http = json!({"probe": {"type": "http", "url": target.url()}, "interval": "1s", "timeout": "500ms"});
    write(&j, "PUT", "/api/objects/web", "put-web", Some(&http));
    write(&j, "PUT", "/api/objects/db", "put-db", Some(&tcp("1s")));
    write(&j, "PUT", "/api/objects/quiet", "put-quiet", Some(&tcp("1h")));
    write(&j, "PUT", "/api/objects/gone", "put-gone", Some(&tcp("1h")));
    // Cluster format 4: an object with a parent, and the notification policy.
    let mut child = tcp("1h");
    child["parents"] = json!(["db"]);
    write(&j, "PUT", "/api/objects/child", "put-child", Some(&child));
    let receiver =
        json!({"kind": "webhook", "url": "https://hooks.example.com/db", "secret": {"env": "DB_HOOK_SECRET"}});
    write(&j, "PUT", "/api/policy/receivers/db-team", "policy-receiver", Some(&receiver));
    let routes = json!([{"selector": "team=db", "receivers": ["db-team"], "repeat_interval": "1h"}]);
    write(&j, "PUT", "/api/policy/routes", "policy-routes", Some(&routes));
    let window = json!({"selector": "env=prod", "schedule": {"days": ["tue"], "start": "02:00", "duration": "2h", "time_zone": "Europe/Berlin"}, "comment": "patch night"});
    write(&j, "PUT", "/api/policy/windows/tuesday", "policy-window", Some(&window));
    let silence = json!({"selector": "team=db", "starts_at": "2026-01-01T00:00:00Z", "ends_at": "2100-01-01T00:00:00Z", "author": "ana", "comment": "upgrade"});
    write(&j, "PUT", "/api/silences/db-upgrade", "policy-silence", Some(&silence));
    poll("web ok, the others critical", || {
        let o = objects(&j);
        let state = |id: &str| o.get(id).map(|o| o["state"].clone());
        let critical = ["db", "quiet", "gone", "child"].iter().all(|id| state(id) == Some(json!("critical")));
        (state("web") == Some(json!("ok")) && critical).then_some(())
    });
    // web paused while ok, so a later start does not check it against a target that is gone.
    for (id, action) in [("web", "pause"), ("db", "ack"), ("quiet", "check"), ("quiet", "pause"), ("quiet", "resume")] {
        write(&j, "POST", &format!("/api/objects/{id}/actions/{action}"), &format!("{action}-{id}"), None);
    }
    write(&j, "DELETE", "/api/objects/gone", "delete-gone", None);
    let position = sink_caught_up(&j);
    let listed = objects(&j);
    let mut history_of = Map::new();
    for id in ["web", "db", "quiet", "gone", "child"] {
        history_of.insert(id.to_string(), json!(history(&j, id)));
    }
    let mut policy = j.get("/api/policy").json();
    policy.as_object_mut().expect("the policy is an object").remove("log_position");
    let expected = json!({
        "epoch": metric(&j, "jaque_engine_epoch"),
        "log_position": position,
        "objects": listed.iter().map(|(id, o)| (id.clone(), kept(o))).collect::<Map<_, _>>(),
        "history": history_of,
        "policy": policy,
    });
    assert_eq!(listed.keys().collect::<Vec<_>>(), ["child", "db", "quiet", "web"]);
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success(), "a clean exit");
    drop(target);
    // Made again by the next start (it holds this run's pid).
    fs::remove_file(dir.join("lock")).unwrap();
    checkpoint_sqlite(&dir.join("jaque-sink.db"));
    assert!(dir.join("snapshots").read_dir().unwrap().next().is_some(), "a snapshot (-snapshot-every 8)");
    fs::write(out.join(DATA_DIR_EXPECTED), format!("{expected:#}\n")).unwrap();

    // The same log into PostgreSQL: a sink of this build on a copy of the directory, as the test will run.
    let pg = Postgres::start();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join(DATA_DIR);
    copy_tree(&dir, &copy);
    let mut j = one_process("fixture (postgres)", &copy, Some(&pg.url()), &[]);
    sink_caught_up(&j);
    let rows: usize = expected["history"].as_object().unwrap().values().map(|h| h.as_array().unwrap().len()).sum();
    // The objects' rows, and the policy's changes (on its key, no object's history).
    let objects = format!("SELECT count(*) FROM events WHERE seq <= {position} AND object <> 'jaque/policy'");
    assert_eq!(pg.psql(&objects), rows.to_string());
    j.proc.signal("TERM");
    assert!(j.proc.wait_exit().success(), "a clean exit");
    pg_dump(&pg.url(), &out.join(POSTGRES));
}

/// The jaque tables as the sink made and filled them, as plain SQL (`pg_dump`, tables and rows, no owners or
/// grants). The lines of `\restrict` (pg_dump since 17.6, 16.10, 15.14, …) are left out: a psql older than the
/// dumping one would not know them, and they guard only against a dump made by someone else.
fn pg_dump(url: &str, file: &Path) {
    let mut cmd = Process::new(bin_dir().join("pg_dump"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.args(["--no-owner", "--no-privileges", "-d", url]);
    for table in ["jaque_schema", "events", "objects", "sink_progress"] {
        cmd.args(["-t", table]);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("running pg_dump");
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(file, kept).unwrap();
}

#[test]
#[ignore = "writes tests/compat/<version>/: scripts/write-compat-fixtures.sh VERSION"]
fn write_fixtures() {
    let version = std::env::var("JAQUE_WRITE_FIXTURES")
        .expect("JAQUE_WRITE_FIXTURES=<version>, e.g. v0.1.0 (scripts/write-compat-fixtures.sh sets it)");
    let this = concat!("v", env!("CARGO_PKG_VERSION"));
    assert_eq!(version, this, "this build is {this}: it writes the fixtures of its own version only");
    let target = compat_dir().join(&version);
    assert!(
        !target.exists(),
        "{} exists: a release's fixtures are never edited (tests/compat/README.md); before the release, \
         scripts/write-compat-fixtures.sh {version} --replace writes them again",
        target.display()
    );
    // Written aside and renamed into place whole: a failed run leaves nothing a test would read.
    let tmp = tempfile::Builder::new().prefix(".writing-").tempdir_in(compat_dir()).unwrap();
    let out = tmp.path();
    write_log(out);
    write_kv(out);
    write_messages(out);
    write_data_dir(out);
    let v = Process::new(jaque_bin()).arg("--version").output().expect("jaque --version");
    fs::write(out.join(WRITTEN_BY), v.stdout).unwrap();
    fs::rename(tmp.keep(), &target).unwrap();
    eprintln!("wrote {}", target.display());
}
