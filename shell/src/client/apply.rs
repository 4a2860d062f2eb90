//! `jaque apply -f` and `jaque diff -f` (issue 36): bring the cluster's objects to what the files say, writing only
//! the differences.
//!
//! **What was applied is on the object, as labels** (no new field, so no cluster format change): `jaque/source`
//! names the source (`--source`, default `default`) and `jaque/applied` is a hash of the definition the files
//! gave it (the `PUT` body with its source label, keys sorted). An object whose `jaque/applied` is the hash of
//! what the files say now is unchanged and not written, whatever the server shows of it (defaults filled in,
//! secrets as `***`); one without it, or with another, is written; with `--prune`, an object of this source that
//! the files no longer list is deleted, and nothing of another source or made by hand ever is.
//!
//! Each write carries an `Idempotency-Key` made of the source, the id, the hash and the state the write was planned
//! against (the object's last log position, or for a new object the cluster's position when the plan was made):
//! an apply run again before a write it sent has landed plans the same write against the same state and sends the
//! same key, so the write applies once; a later write of the same content (a change reverted, an object deleted
//! and created again) is planned against another state and is not mistaken for a repeat. Writes go `CONCURRENCY`
//! at a time.

use super::files::Desired;
use super::{id_path, reason, Api, Failure};
use futures_util::StreamExt;
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
}

impl Plan {
    pub fn changes(&self) -> usize {
        self.create.len() + self.update.len() + self.prune.len()
    }
}

/// JSON with every object's keys sorted, whatever order the map kept them in.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let parts: Vec<String> =
                sorted.iter().map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), canonical(v))).collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// The body to write: the files' with the source label, and the hash of that as the applied label.
pub fn stamped(body: &Value, source: &str) -> (Value, String) {
    let mut body = body.clone();
    let obj = body.as_object_mut().expect("a definition is an object");
    let labels = obj.entry("labels").or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels.as_object_mut().expect("an object");
    labels.insert(SOURCE_LABEL.into(), Value::String(source.into()));
    labels.remove(APPLIED_LABEL);
    let hash = format!("{:016x}", jaque_core::hrw::key(&canonical(&body)));
    body["labels"][APPLIED_LABEL] = Value::String(hash.clone());
    (body, hash)
}

/// A write's `Idempotency-Key`: of the source, the object, what is written and the state it was planned against.
fn idempotency_key(source: &str, id: &str, what: &str, hash: &str, against: &str) -> String {
    format!("apply-{:016x}", jaque_core::hrw::key(&[source, id, what, hash, against].join("\u{0}")))
}

/// The plan from what the files say and the objects the server has (as `GET /api/objects` shows them) when the
/// cluster's log was at `position`.
pub fn plan(desired: &[Desired], current: &[Value], source: &str, prune: bool, position: u64) -> Plan {
    let label = |o: &Value, k: &str| o["definition"]["labels"][k].as_str().map(str::to_string);
    let last_seq = |o: &Value| o["last_seq"].as_u64().unwrap_or(0).to_string();
    let have: BTreeMap<&str, &Value> = current.iter().filter_map(|o| Some((o["id"].as_str()?, o))).collect();
    let mut p = Plan::default();
    for d in desired {
        let (body, hash) = stamped(&d.body, source);
        let (against, list) = match have.get(d.id.as_str()) {
            None => (format!("new at {position}"), &mut p.create),
            Some(o) if label(o, APPLIED_LABEL).as_deref() == Some(&hash) => {
                p.unchanged += 1;
                continue;
            }
            Some(o) => (last_seq(o), &mut p.update),
        };
        p.keys.insert(d.id.clone(), idempotency_key(source, &d.id, "put", &hash, &against));
        list.push((d.id.clone(), body));
    }
    if prune {
        let listed: std::collections::BTreeSet<&str> = desired.iter().map(|d| d.id.as_str()).collect();
        for (id, o) in &have {
            if label(o, SOURCE_LABEL).as_deref() == Some(source) && !listed.contains(id) {
                let hash = label(o, APPLIED_LABEL).unwrap_or_default();
                p.keys.insert(id.to_string(), idempotency_key(source, id, "delete", &hash, &last_seq(o)));
                p.prune.push((id.to_string(), hash));
            }
        }
    }
    p
}

/// `diff`: one line per change (`+` create, `~` change, `-` prune); the number of changes.
pub fn print_diff(out: &mut impl Write, p: &Plan) {
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
        p.create.len(),
        p.update.len(),
        p.prune.len(),
        p.unchanged
    );
}

/// Carries the plan out; a line per write, a summary; `Ok(failed)`.
pub async fn execute(api: &Api, out: &mut impl Write, p: Plan) -> Result<usize, Failure> {
    enum Op {
        Put(String, Value, &'static str),
        Delete(String),
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
    let (mut done, mut failed) = (0, 0);
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
        let _ = writeln!(out, "{} written", done - failed);
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
