//! What the ui asks of the loop that holds the log (an engine's, or a ui's own reader) and the JSON it gets
//! back. Rendering reads a `LogReader` and the live sets; it decides nothing.

use crate::follow::Buckets;
use jaque_core::log::ObjectView;
use jaque_core::{Bucket, Command, LiveSet, LogReader, MemberId, ObjectId, Outcome, Probe, State};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::oneshot;

/// A request from the HTTP side to the loop that holds the log.
pub enum UiRequest {
    /// Submit a command to the local engine; the outcome comes back when the engine replies.
    Write {
        cmd: Command,
        reply: oneshot::Sender<Outcome>,
    },
    /// `GET /api/objects` (`None`) or `GET /api/objects/{id}` (`Some`), rendered to JSON where the log is;
    /// `None` back for an absent id.
    Objects {
        id: Option<ObjectId>,
        reply: oneshot::Sender<Option<Vec<u8>>>,
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

fn duration(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// An object as the API shows it, serialized straight from the reader's view: no intermediate JSON tree, so
/// listing 100k objects holds the loop for a fraction of the time.
#[derive(Serialize)]
struct ObjectJson<'a> {
    id: &'a ObjectId,
    definition: DefinitionJson<'a>,
    state: State,
    paused: bool,
    acknowledged: bool,
    owner: Option<&'a str>,
    epoch: u64,
    last_transition: Option<TransitionJson<'a>>,
    last_seq: u64,
}

#[derive(Serialize)]
struct DefinitionJson<'a> {
    probe: &'a Probe,
    interval: String,
    timeout: String,
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
    ObjectJson {
        id,
        definition: DefinitionJson {
            probe: &view.def.probe,
            interval: duration(view.def.interval_ms),
            timeout: duration(view.def.timeout_ms),
        },
        state: view.state,
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
    }
}

/// `GET /api/objects` (`id` `None`: every object) or `GET /api/objects/{id}` as JSON; `None` for an absent id.
pub fn objects(reader: &LogReader, id: Option<&ObjectId>) -> Option<Vec<u8>> {
    let json = match id {
        Some(id) => serde_json::to_vec(&object(reader, id, reader.object(id)?)),
        None => {
            let all: Vec<ObjectJson> = reader.objects().iter().map(|(id, v)| object(reader, id, v)).collect();
            serde_json::to_vec(&all)
        }
    };
    // These types always serialize (no maps with non-string keys); were it ever to fail, the list answers 500
    // and a single object reads as absent.
    json.ok()
}

/// Per bucket: its live members; for the engine bucket also the epoch in force, its members, and how many
/// objects each owns.
pub fn cluster(reader: &LogReader, buckets: &Buckets) -> Value {
    let empty = LiveSet::default();
    let out: Vec<Value> = Bucket::ALL
        .iter()
        .map(|b| {
            let live = buckets.0.get(b).unwrap_or(&empty);
            let mut v = json!({
                "bucket": b.prefix(),
                "live_members": live.members(),
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
    json!({ "log_position": reader.position(), "buckets": out })
}
