//! `jaque apply -f` and `jaque diff -f` (issue 36): bring the cluster's objects to what the files say, writing only
//! the differences.
//!
//! **What was applied is on the object, as labels** (no new field, so no cluster format change): `jaque/source`
//! names the source (`--source`, default `default`) and `jaque/applied` is a hash of the definition the files
//! gave it (the `PUT` body with its source label, keys sorted). An object whose `jaque/applied` is the hash of
//! what the files say now is unchanged and not written, whatever the server shows of it (defaults filled in,
//! secrets as `***`). So is one the server shows exactly as the files define it, its source label included and
//! its `jaque/applied` aside (a file `jaque get -o yaml` wrote, applied back). Any other is written; with
//! `--prune`, an object of this source that the files no longer list is deleted, and nothing of another source or
//! made by hand ever is.
//!
//! Each write carries an `Idempotency-Key` made of the source, the id, the hash and the state the write was planned
//! against (the object's last log position, or for a new object the cluster's position when the plan was made):
//! an apply run again before a write it sent has landed plans the same write against the same state and sends the
//! same key, so the write applies once; a later write of the same content (a change reverted, an object deleted
//! and created again) is planned against another state and is not mistaken for a repeat. Writes go `CONCURRENCY`
//! at a time.

use super::files::{Desired, FIELDS};
use super::policy::{self, PolicyPlan};
use super::{id_path, reason, Api, Failure};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Write;

pub const SOURCE_LABEL: &str = "jaque/source";
pub const APPLIED_LABEL: &str = "jaque/applied";
const CONCURRENCY: usize = 16;

/// What an apply does.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub create: Vec<(String, Value)>,
    pub update: Vec<(String, Value)>,
    pub unchanged: usize,
    /// Ids, with the `jaque/applied` they had.
    pub prune: Vec<(String, String)>,
    /// The `Idempotency-Key` of each write, by id.
    pub keys: BTreeMap<String, String>,
    /// The notification policy's writes (`policy`), which go first, one at a time, in their order.
    pub policy: PolicyPlan,
}

impl Plan {
    pub fn changes(&self) -> usize {
        self.create.len() + self.update.len() + self.prune.len() + self.policy.writes.len()
    }
}

/// An object as `plan` reads it from `GET /api/objects`: only what it needs, its definition kept as the text the
/// server sent (read into a tree only for an object whose `jaque/applied` is not the files', to compare).
#[derive(Deserialize, Debug)]
pub struct Listed {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    last_seq: Option<u64>,
    definition: Option<Box<RawValue>>,
}

/// The two labels `plan` reads from a definition; its other fields and labels are skipped unread.
#[derive(Deserialize, Default)]
struct Marks {
    #[serde(default)]
    labels: MarkLabels,
}

#[derive(Deserialize, Default)]
struct MarkLabels {
    #[serde(rename = "jaque/source")]
    source: Option<String>,
    #[serde(rename = "jaque/applied")]
    applied: Option<String>,
}

impl Listed {
    fn marks(&self) -> MarkLabels {
        self.definition.as_ref().and_then(|d| serde_json::from_str::<Marks>(d.get()).ok()).unwrap_or_default().labels
    }

    /// The definition as the server shows it, `Null` if it sent none.
    fn definition(&self) -> Value {
        self.definition.as_ref().and_then(|d| serde_json::from_str(d.get()).ok()).unwrap_or(Value::Null)
    }
}

/// Appends `v` as JSON with every object's keys sorted, whatever order the map kept them in (what the hash of
/// `stamped` is of: written into one buffer, where a string per node cost a seventh of a re-apply).
fn canonical(v: &Value, out: &mut Vec<u8>) {
    // Writing JSON into a Vec cannot fail: serde_json fails only when its writer does.
    fn scalar(out: &mut Vec<u8>, v: &(impl serde::Serialize + ?Sized)) {
        serde_json::to_writer(out, v).expect("writing JSON into a Vec");
    }
    match v {
        Value::Object(m) => {
            let mut sorted: Vec<(&String, &Value)> = m.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                scalar(out, k);
                out.push(b':');
                canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(v, out);
            }
            out.push(b']');
        }
        other => scalar(out, other),
    }
}

/// The hash of a definition, as the `jaque/applied` label says it.
pub(super) fn hash_of(body: &Value, buf: &mut Vec<u8>) -> String {
    buf.clear();
    canonical(body, buf);
    let text = std::str::from_utf8(buf).expect("serde_json writes UTF-8");
    format!("{:016x}", jaque_core::hrw::key(text))
}

/// The body to write: the files' with the source label, and the hash of that as the applied label.
#[cfg(test)]
pub fn stamped(body: &Value, source: &str) -> (Value, String) {
    stamp(body.clone(), source, &mut Vec::new())
}

/// `stamped`, in place, with a buffer to write the canonical text into.
fn stamp(mut body: Value, source: &str, buf: &mut Vec<u8>) -> (Value, String) {
    let obj = body.as_object_mut().expect("a definition is an object");
    let labels = obj.entry("labels").or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels.as_object_mut().expect("an object");
    labels.insert(SOURCE_LABEL.into(), Value::String(source.into()));
    labels.remove(APPLIED_LABEL);
    let hash = hash_of(&body, buf);
    body["labels"][APPLIED_LABEL] = Value::String(hash.clone());
    (body, hash)
}

/// Whether the server shows the definition `body` (stamped) gives: the same fields, labels and values, the
/// `jaque/applied` label aside (what a file `get -o yaml` wrote says, applied back). Only the fields a file may
/// have count: one a newer server shows and this build cannot write is not a difference it could undo.
fn shown_as(body: &Value, shown: &Value) -> bool {
    let comparable = |v: &Value| -> Map<String, Value> {
        let mut fields: Map<String, Value> = v
            .as_object()
            .map(|m| {
                m.iter().filter(|(k, _)| FIELDS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
            })
            .unwrap_or_default();
        if let Some(labels) = fields.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove(APPLIED_LABEL);
        }
        fields
    };
    comparable(body) == comparable(shown)
}

/// A write's `Idempotency-Key`: of the source, the object, what is written and the state it was planned against.
pub(super) fn idempotency_key(source: &str, id: &str, what: &str, hash: &str, against: &str) -> String {
    format!("apply-{:016x}", jaque_core::hrw::key(&[source, id, what, hash, against].join("\u{0}")))
}

/// The plan from what the files say and the objects the server has (as `GET /api/objects` lists them) when the
/// cluster's log was at `position`.
pub fn plan(desired: Vec<Desired>, current: &[Listed], source: &str, prune: bool, position: u64) -> Plan {
    let last_seq = |o: &Listed| o.last_seq.unwrap_or(0).to_string();
    let have: BTreeMap<&str, (&Listed, MarkLabels)> =
        current.iter().filter_map(|o| Some((o.id.as_deref()?, (o, o.marks())))).collect();
    let listed: std::collections::BTreeSet<String> =
        if prune { desired.iter().map(|d| d.id.clone()).collect() } else { Default::default() };
    let mut p = Plan::default();
    let mut buf = Vec::new();
    for d in desired {
        let (body, hash) = stamp(d.body, source, &mut buf);
        let (against, list) = match have.get(d.id.as_str()) {
            None => (format!("new at {position}"), &mut p.create),
            Some((_, marks)) if marks.applied.as_deref() == Some(&hash) => {
                p.unchanged += 1;
                continue;
            }
            Some((o, _)) if shown_as(&body, &o.definition()) => {
                p.unchanged += 1;
                continue;
            }
            Some((o, _)) => (last_seq(o), &mut p.update),
        };
        p.keys.insert(d.id.clone(), idempotency_key(source, &d.id, "put", &hash, &against));
        list.push((d.id, body));
    }
    if prune {
        for (id, (o, marks)) in &have {
            if marks.source.as_deref() == Some(source) && !listed.contains(*id) {
                let hash = marks.applied.clone().unwrap_or_default();
                p.keys.insert(id.to_string(), idempotency_key(source, id, "delete", &hash, &last_seq(o)));
                p.prune.push((id.to_string(), hash));
            }
        }
    }
    p
}

/// `diff`: one line per change (`+` create, `~` change, `-` prune), the policy's first (`~ routes`,
/// `+ receiver git.oncall`), then a line of counts, the policy's in them.
pub fn print_diff(out: &mut impl Write, p: &Plan) {
    policy::print_diff(out, &p.policy);
    let count = |sign: char| p.policy.writes.iter().filter(|w| w.sign == sign).count();
    for (id, _) in &p.create {
        let _ = writeln!(out, "+ {id}");
    }
    for (id, _) in &p.update {
        let _ = writeln!(out, "~ {id}");
    }
    for (id, _) in &p.prune {
        let _ = writeln!(out, "- {id}");
    }
    let _ = writeln!(
        out,
        "{} to create, {} to change, {} to prune, {} unchanged",
        p.create.len() + count('+'),
        p.update.len() + count('~'),
        p.prune.len() + count('-'),
        p.unchanged + p.policy.unchanged
    );
}

/// Carries the plan out; a line per write, a summary; `Ok(failed)`.
pub async fn execute(api: &Api, out: &mut impl Write, p: Plan) -> Result<usize, Failure> {
    enum Op {
        Put(String, Value, &'static str),
        Delete(String),
    }
    let mut failed = 0;
    // The policy first and in order: a route names receivers put before it, a receiver is deleted after the
    // routes stop naming it. Each said on a line of its own.
    for w in &p.policy.writes {
        let a = api.send_body(w.method.clone(), &w.path, w.body.as_ref(), &w.key).await?;
        let done = match w.sign {
            '+' => "created",
            '~' => "configured",
            _ if w.what == "silence" => "expired",
            _ => "pruned",
        };
        if a.status == 200 {
            let _ = writeln!(out, "{}: {done}", w.label());
        } else {
            failed += 1;
            eprintln!("jaque: {}: {}", w.label(), reason(a.status, &a.body));
        }
    }
    let keys = p.keys;
    let ops: Vec<Op> = p
        .create
        .into_iter()
        .map(|(id, b)| Op::Put(id, b, "created"))
        .chain(p.update.into_iter().map(|(id, b)| Op::Put(id, b, "configured")))
        .chain(p.prune.into_iter().map(|(id, _)| Op::Delete(id)))
        .collect();
    let total = ops.len();
    let key = |id: &str| keys.get(id).cloned().unwrap_or_default();
    let mut results = futures_util::stream::iter(ops)
        .map(|op| async move {
            match op {
                Op::Put(id, body, done) => {
                    let path = format!("/api/objects/{}", id_path(&id));
                    let r = api.send_body(reqwest::Method::PUT, &path, Some(&body), &key(&id)).await;
                    (id, done, r)
                }
                Op::Delete(id) => {
                    let path = format!("/api/objects/{}", id_path(&id));
                    let r = api.send_body(reqwest::Method::DELETE, &path, None, &key(&id)).await;
                    (id, "pruned", r)
                }
            }
        })
        .buffer_unordered(CONCURRENCY);
    // On a terminal a bar (failures printed above it); elsewhere (CI, a pipe) a line per write.
    let bar = std::io::IsTerminal::is_terminal(&std::io::stdout()).then(|| {
        let bar = indicatif::ProgressBar::new(total as u64);
        let style = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}");
        bar.set_style(style.unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
        bar
    });
    let (mut done, mut written) = (0, 0);
    while let Some((id, what, r)) = results.next().await {
        let a = match r {
            Ok(a) => a,
            Err(e) => {
                if let Some(b) = &bar {
                    b.abandon();
                }
                return Err(e);
            }
        };
        done += 1;
        if a.status == 200 {
            written += 1;
            match &bar {
                Some(b) => b.set_message(format!("{id}: {what}")),
                None => {
                    let _ = writeln!(out, "[{done}/{total}] {id}: {what}");
                }
            }
        } else {
            failed += 1;
            let line = format!("jaque: [{done}/{total}] {id}: {}", reason(a.status, &a.body));
            match &bar {
                Some(b) => b.suspend(|| eprintln!("{line}")),
                None => eprintln!("{line}"),
            }
        }
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
        let _ = writeln!(out, "{written} written");
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::super::files::Pos;
    use super::*;
    use serde_json::json;

    fn d(id: &str, body: Value) -> Desired {
        Desired { id: id.into(), body, at: Pos { file: "f".into(), line: 1, column: 1 } }
    }

    fn server(id: &str, labels: Value) -> Value {
        json!({"id": id, "definition": {"labels": labels}})
    }

    /// The objects as `plan` reads them from the server's answer.
    fn listed(objects: &[Value]) -> Vec<Listed> {
        serde_json::from_str(&Value::Array(objects.to_vec()).to_string()).unwrap()
    }

    #[test]
    fn only_differences_are_written_and_a_prune_touches_only_its_own_source() {
        let tcp = json!({"probe": {"type": "tcp", "addr": "h:1"}, "labels": {"env": "prod"}});
        let (_, same_hash) = stamped(&tcp, "git");
        // The hash does not depend on the order keys came in.
        let reordered = json!({"labels": {"env": "prod"}, "probe": {"addr": "h:1", "type": "tcp"}});
        assert_eq!(stamped(&reordered, "git").1, same_hash);
        assert_ne!(stamped(&tcp, "other").1, same_hash, "the source is part of what was applied");
        let desired = [d("same", tcp.clone()), d("changed", tcp.clone()), d("new", tcp)];
        let current = [
            server("same", json!({"env": "prod", "jaque/source": "git", "jaque/applied": same_hash})),
            server("changed", json!({"jaque/source": "git", "jaque/applied": "0000000000000000"})),
            server("gone", json!({"jaque/source": "git", "jaque/applied": "1111111111111111"})),
            server("theirs", json!({"jaque/source": "other"})),
            server("by-hand", json!({})),
        ];
        let plan = |desired: &[Desired], current: &[Value], source: &str, prune: bool, position: u64| {
            plan(desired.to_vec(), &listed(current), source, prune, position)
        };
        let p = plan(&desired, &current, "git", true, 100);
        let ids = |v: &[(String, Value)]| v.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>();
        assert_eq!((ids(&p.create), ids(&p.update), p.unchanged), (vec!["new".into()], vec!["changed".into()], 1));
        assert_eq!(p.prune, [("gone".to_string(), "1111111111111111".to_string())]);
        assert_eq!(p.create[0].1["labels"], json!({"env": "prod", "jaque/source": "git", "jaque/applied": same_hash}));
        assert!(plan(&desired, &current, "git", false, 100).prune.is_empty());
        // A key per write, the same for the same plan, another once the state it was planned against moved.
        assert_eq!(p.keys.len(), 3);
        assert_eq!(plan(&desired, &current, "git", true, 100).keys, p.keys);
        assert_ne!(plan(&desired, &current, "git", true, 101).keys["new"], p.keys["new"]);
        let mut moved = current.clone();
        moved[1]["last_seq"] = json!(7);
        assert_ne!(plan(&desired, &moved, "git", true, 100).keys["changed"], p.keys["changed"]);
    }
}

#[cfg(test)]
mod hashing {
    use super::*;
    use serde_json::json;

    /// The canonical text as the first builds made it (a string per node): every object applied then carries a
    /// hash of this text, so the buffer that replaced it must write the same bytes or every object would look
    /// changed to a re-apply.
    fn canonical_as_before(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, &Value> = m.iter().collect();
                let parts: Vec<String> = sorted
                    .iter()
                    .map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), canonical_as_before(v)))
                    .collect();
                format!("{{{}}}", parts.join(","))
            }
            Value::Array(a) => format!("[{}]", a.iter().map(canonical_as_before).collect::<Vec<_>>().join(",")),
            other => other.to_string(),
        }
    }

    #[test]
    fn the_canonical_text_and_so_every_applied_hash_is_what_it_was() {
        let values = [
            json!({"probe": {"type": "http", "url": "https://h/\"q\"?a=1&b=\u{e9}", "expect_status": 200},
                   "labels": {"z": "1", "a": "caf\u{e9}", "jaque/source": "git", "ctl": "\u{1}\t\n"},
                   "interval": "30s", "max_attempts": 3, "flapping": false, "ratio": 0.25, "neg": -4,
                   "list": [1, "two", null, {"b": [], "a": {}}], "": ""}),
            json!([]),
            json!("x"),
            json!(null),
        ];
        for v in values {
            let mut buf = Vec::new();
            canonical(&v, &mut buf);
            assert_eq!(String::from_utf8(buf).unwrap(), canonical_as_before(&v));
        }
        // Pinned: the label an object applied with this body carries since the first apply.
        let body = json!({"probe": {"type": "tcp", "addr": "127.0.0.1:9"}, "interval": "1h", "labels": {"rev": "1"}});
        let (stamped, hash) = stamped(&body, "bench");
        assert_eq!(
            hash,
            format!(
                "{:016x}",
                jaque_core::hrw::key(&canonical_as_before(&{
                    let mut b = stamped.clone();
                    b["labels"].as_object_mut().unwrap().remove(APPLIED_LABEL);
                    b
                }))
            )
        );
    }

    #[test]
    fn an_object_the_server_shows_as_the_files_define_it_is_unchanged_whatever_its_applied_label() {
        // As `get -o yaml` writes it: every field as the server shows it, the labels apply stamped.
        let shown = json!({"probe": {"type": "tcp", "addr": "h:1"}, "interval": "1h", "timeout": "5s",
            "labels": {"env": "prod", "jaque/source": "git", "jaque/applied": "00000000000000aa"},
            "max_attempts": 3, "retry_interval": "12m", "recovery_attempts": 1, "flapping": true});
        let server = [json!({"id": "x", "last_seq": 4, "definition": shown})];
        let server: Vec<Listed> = serde_json::from_str(&Value::Array(server.to_vec()).to_string()).unwrap();
        let desired = |body: Value| {
            vec![Desired {
                id: "x".into(),
                body,
                at: super::super::files::Pos { file: "f".into(), line: 1, column: 1 },
            }]
        };
        let p = plan(desired(shown.clone()), &server, "git", true, 9);
        assert_eq!((p.unchanged, p.changes()), (1, 0), "the file get -o yaml wrote, applied back");
        // Another source, or any field changed: written.
        assert_eq!(plan(desired(shown.clone()), &server, "other", false, 9).update.len(), 1);
        let mut edited = shown.clone();
        edited["interval"] = json!("2h");
        assert_eq!(plan(desired(edited), &server, "git", false, 9).update.len(), 1);
        let mut fewer = shown.clone();
        fewer.as_object_mut().unwrap().remove("timeout");
        assert_eq!(plan(desired(fewer), &server, "git", false, 9).update.len(), 1, "the same only if shown the same");
        // A field a newer server shows that no file can have is no difference.
        let mut newer = json!({"id": "x", "last_seq": 4, "definition": shown});
        newer["definition"]["dependencies"] = json!(["y"]);
        let newer: Vec<Listed> = serde_json::from_str(&json!([newer]).to_string()).unwrap();
        assert_eq!(plan(desired(shown.clone()), &newer, "git", false, 9).unchanged, 1);
    }
}
