//! The ui's live feed, `GET /api/stream` (Server-Sent Events): what the loop holding the log (an engine's, or
//! a ui's reader) sees as it reads, for the status page to apply without asking again. The loop renders each
//! change once into a `Frame` and puts it on a bounded broadcast channel; every connected stream reads from it.
//! A stream that falls behind by more than the channel holds is told to `reload` (and counted) instead of being
//! buffered for. Nothing is rendered while no stream is connected.
//!
//! Events (each `data` one JSON object):
//! - `hello`: sent first on every (re)connection; the page then (re)loads what it shows, so nothing between its
//!   last load and the subscription is missed.
//! - `change` (`id:` its log position): an accepted event on an object: `{"seq", "id", "object", "was"}`, the
//!   object as `GET /api/objects/{id}` shows it after the event (`null` once deleted) and its state, marks and
//!   labels before it (`null` for a new object), so counts can be moved without recounting, also counts of the
//!   objects a label selector picks.
//! - `stale`: an event the fence discarded: `{"seq", "object", "epoch", "writer", "stale_events"}` (`object`
//!   `jaque/policy` for a policy change).
//! - `policy` (`id:` its log position): a change of the notification policy took effect: `{"seq"}`; the page
//!   loads `GET /api/policy` again.
//! - `epoch`: a new epoch in force: `{"seq", "epoch", "members"}` (owners may have moved).
//! - `members`: a bucket's live members changed: `{"bucket", "live_members"}`.
//! - `reload`: the stream missed events (it lagged) or the reader jumped (caught up, a snapshot): `{"reason"}`.

use super::views;
use crate::follow::Buckets;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use jaque_core::{Bucket, LogEntry, LogReader, MemberRef, ObjectId};
use serde_json::json;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Frames the channel holds for the slowest stream; past that, that stream gets `reload`. A change is well
/// under 1 KiB, so this bounds the feed's memory at about 1 MiB however slow a client is.
const CAPACITY: usize = 1024;

/// A keep-alive comment this often, so proxies and the browser see a live connection when nothing changes.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One rendered event.
#[derive(Debug)]
pub struct Frame {
    pub event: &'static str,
    /// The log position, for `change` (the SSE `id:` field).
    pub id: Option<u64>,
    pub data: String,
}

/// The feed shared by the loop (which sends) and the HTTP side (which subscribes), and its metrics.
pub struct Changes {
    tx: broadcast::Sender<Arc<Frame>>,
    /// The process is stopping: every stream ends, so the HTTP server's graceful shutdown is not held open.
    shutdown: watch::Receiver<bool>,
    connected: AtomicU64,
    lagged: AtomicU64,
}

impl Changes {
    pub fn new(shutdown: watch::Receiver<bool>) -> Arc<Changes> {
        let (tx, _) = broadcast::channel(CAPACITY);
        Arc::new(Changes { tx, shutdown, connected: AtomicU64::new(0), lagged: AtomicU64::new(0) })
    }

    fn watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    fn send(&self, event: &'static str, id: Option<u64>, data: String) {
        // An error only means nobody is connected any more.
        let _ = self.tx.send(Arc::new(Frame { event, id, data }));
    }

    /// The stream's part of `/metrics`.
    pub fn expose(&self, m: &mut crate::metrics::Exposition) {
        m.one(
            "jaque_ui_streams",
            "gauge",
            "Connected event streams (GET /api/stream).",
            self.connected.load(Ordering::Relaxed),
        );
        m.one(
            "jaque_ui_stream_lagged_total",
            "counter",
            "Times an event stream fell behind the log and was told to reload.",
            self.lagged.load(Ordering::Relaxed),
        );
    }

    /// `GET /api/stream`: `hello`, then every frame as the loop sends it, keep-alive comments in between; ends
    /// when the process stops.
    pub fn subscribe(self: &Arc<Self>) -> Response {
        let rx = self.tx.subscribe();
        let guard = Connected::new(self.clone());
        let hello = stream::once(async { Ok::<_, Infallible>(Event::default().event("hello").data("{}")) });
        let frames = stream::unfold((rx, guard), |(mut rx, guard)| async move {
            let event = match rx.recv().await {
                Ok(f) => {
                    let e = Event::default().event(f.event).data(&f.data);
                    match f.id {
                        Some(id) => e.id(id.to_string()),
                        None => e,
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    guard.0.lagged.fetch_add(1, Ordering::Relaxed);
                    Event::default().event("reload").data(json!({ "reason": "lagged", "missed": missed }).to_string())
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((Ok::<_, Infallible>(event), (rx, guard)))
        });
        let mut shutdown = self.shutdown.clone();
        let stopping = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        let body = hello.chain(frames).take_until(stopping);
        let mut resp = Sse::new(body).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
        // Not to be buffered by a proxy (nginx honours this), nor cached.
        resp.headers_mut().insert("x-accel-buffering", "no".parse().expect("a header value"));
        resp.headers_mut().insert("cache-control", "no-cache".parse().expect("a header value"));
        resp
    }
}

/// Counts a connected stream while it lives.
struct Connected(Arc<Changes>);

impl Connected {
    fn new(c: Arc<Changes>) -> Connected {
        c.connected.fetch_add(1, Ordering::Relaxed);
        Connected(c)
    }
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The loop's side: what to compare after reading an entry, and the live members last announced.
pub struct Feed {
    changes: Arc<Changes>,
    members: BTreeMap<Bucket, Vec<MemberRef>>,
}

/// What an entry may change, taken before the reader reads it.
pub struct Before {
    /// An event's object, what it was, and the event's epoch and writer (named if the fence discards it).
    object: Option<(ObjectId, Option<views::Was>, u64, MemberRef)>,
    stale: u64,
    refused: u64,
    epoch: u64,
}

impl Feed {
    pub fn new(changes: Arc<Changes>) -> Feed {
        Feed { changes, members: BTreeMap::new() }
    }

    /// Called before `reader` reads `entry`; `None` (nothing to do after) when no stream is connected.
    pub fn before(&self, reader: &LogReader, entry: &LogEntry) -> Option<Before> {
        if !self.changes.watched() {
            return None;
        }
        let object = match entry {
            LogEntry::Event(e) => {
                Some((e.object.clone(), reader.object(&e.object).map(views::Was::of), e.epoch, e.writer.clone()))
            }
            LogEntry::Epoch(_) => None,
        };
        Some(Before {
            object,
            stale: reader.counters.stale_epoch_total,
            refused: reader.counters.policy_refused_total,
            epoch: reader.epoch(),
        })
    }

    /// Called after `reader` read the entry at `seq`: sends what it changed.
    pub fn after(&self, before: Option<Before>, seq: u64, reader: &LogReader) {
        let Some(before) = before else { return };
        if let Some((id, was, epoch, writer)) = before.object {
            if reader.counters.stale_epoch_total > before.stale {
                let data = json!({
                    "seq": seq,
                    "object": id,
                    "epoch": epoch,
                    "writer": writer,
                    "stale_events": reader.counters.stale_epoch_total,
                });
                self.changes.send("stale", None, data.to_string());
            } else if id.is_policy() {
                // The policy's key is no object: its accepted changes are `policy` events (a change the fold left
                // out, `policy_refused_total`, changed nothing).
                if reader.last_accepted_of(&id) == Some(seq) && reader.counters.policy_refused_total == before.refused {
                    self.changes.send("policy", Some(seq), json!({ "seq": seq }).to_string());
                }
            } else if reader.last_accepted_of(&id) == Some(seq) {
                self.changes.send("change", Some(seq), views::change(reader, seq, &id, was));
            }
        }
        if reader.epoch() != before.epoch {
            let members = reader.fence().current().map(|r| r.members.clone()).unwrap_or_default();
            let data = json!({ "seq": seq, "epoch": reader.epoch(), "members": members });
            self.changes.send("epoch", None, data.to_string());
        }
    }

    /// After a member observation in `bucket`: sends its live members when they changed (a heartbeat that
    /// refreshes a key changes nothing).
    pub fn members(&mut self, buckets: &Buckets, bucket: Bucket) {
        let live = buckets.0.get(&bucket).map(|l| l.members()).unwrap_or_default();
        if self.members.get(&bucket) == Some(&live) {
            return;
        }
        if self.changes.watched() {
            let data = json!({ "bucket": bucket.prefix(), "live_members": live });
            self.changes.send("members", None, data.to_string());
        }
        self.members.insert(bucket, live);
    }

    /// Whatever a page shows may be behind now (caught up with the log, jumped to a snapshot).
    pub fn reload(&self, reason: &str) {
        if self.changes.watched() {
            self.changes.send("reload", None, json!({ "reason": reason }).to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::{EpochRecord, Event, EventBody, MemberId, ObjectDef, Probe, State, Time};
    use serde_json::Value;

    fn member(id: &str) -> MemberRef {
        MemberRef { id: MemberId::new(id).unwrap(), incarnation: 1 }
    }

    fn receiver() -> jaque_core::policy::Change {
        let name = jaque_core::policy::Name::new("db-team").unwrap();
        let kind =
            jaque_core::policy::ReceiverKind::Webhook { url: "https://hooks.example.com/db".into(), secret: None };
        jaque_core::policy::Change::PutReceiver { receiver: jaque_core::policy::Receiver { name, kind } }
    }

    fn event(object: &str, writer: &str, epoch: u64, body: EventBody) -> LogEntry {
        LogEntry::Event(Event {
            object: ObjectId::from_log(object).unwrap(),
            epoch,
            writer: member(writer),
            at: Time(1_000),
            command_id: None,
            body,
        })
    }

    fn epoch(n: u64, members: &[&str]) -> LogEntry {
        LogEntry::Epoch(EpochRecord {
            epoch: n,
            members: members.iter().map(|m| member(m)).collect(),
            members_rev: n,
            idempotency_window_ms: None,
            format: 1,
        })
    }

    /// Reads `entries` from position 1 with a feed between, and returns the frames sent.
    fn frames(entries: &[LogEntry]) -> Vec<(String, Value)> {
        let (_stop, stopping) = watch::channel(false);
        let changes = Changes::new(stopping);
        let mut rx = changes.tx.subscribe();
        let feed = Feed::new(changes.clone());
        let mut reader = LogReader::new();
        for (i, entry) in entries.iter().enumerate() {
            let before = feed.before(&reader, entry);
            reader.read(i as u64 + 1, entry);
            feed.after(before, i as u64 + 1, &reader);
        }
        let mut out = Vec::new();
        while let Ok(f) = rx.try_recv() {
            out.push((f.event.to_string(), serde_json::from_str(&f.data).unwrap()));
        }
        out
    }

    #[test]
    fn each_accepted_event_sends_the_object_after_it_and_what_it_was_before() {
        let def = ObjectDef {
            probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
            interval_ms: 1000,
            timeout_ms: 100,
            ..ObjectDef::UNSET
        };
        let sent = frames(&[
            epoch(1, &["e1"]),
            event("web", "e1", 1, EventBody::Put { def }),
            event("web", "e1", 1, EventBody::transition(State::Pending, State::Critical, "down")),
            event("web", "e1", 1, EventBody::Ack),
            event("web", "e1", 1, EventBody::Delete),
        ]);
        let kinds: Vec<&str> = sent.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["epoch", "change", "change", "change", "change"]);
        assert_eq!(sent[0].1["epoch"], 1);
        let (put, critical, acked, deleted) = (&sent[1].1, &sent[2].1, &sent[3].1, &sent[4].1);
        assert_eq!(
            (put["seq"].as_u64(), put["was"].is_null(), &put["object"]["state"]),
            (Some(2), true, &json!("pending"))
        );
        assert_eq!(critical["was"], json!({"state": "pending", "acknowledged": false, "paused": false, "labels": {}}));
        assert_eq!(critical["object"]["last_transition"]["output"], "down");
        assert_eq!((&acked["object"]["acknowledged"], &acked["was"]["state"]), (&json!(true), &json!("critical")));
        assert_eq!((deleted["id"].as_str(), deleted["object"].is_null()), (Some("web"), true));
        assert_eq!(deleted["was"], json!({"state": "critical", "acknowledged": true, "paused": false, "labels": {}}));
    }

    #[test]
    fn an_event_the_fence_discards_is_sent_as_stale_and_changes_nothing() {
        let def = ObjectDef {
            probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
            interval_ms: 1000,
            timeout_ms: 100,
            ..ObjectDef::UNSET
        };
        // e2 is not a member of epoch 1: whatever it writes is stale.
        let sent = frames(&[epoch(1, &["e1"]), event("web", "e2", 1, EventBody::Put { def })]);
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[1].0, "stale");
        assert_eq!(sent[1].1["writer"]["id"], "e2");
        assert_eq!(sent[1].1["stale_events"], 1);
    }

    /// Every kind of event the stream sends carries a `data` the document's schema for that event (`x-events` of
    /// `GET /api/stream`) accepts: hello, changes of each kind (a put, a transition, an acknowledgement, a
    /// delete), a stale event, an epoch, a bucket's members, both reloads.
    #[test]
    fn every_event_the_stream_sends_is_what_the_document_says() {
        let def = ObjectDef {
            probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
            interval_ms: 1000,
            timeout_ms: 100,
            labels: jaque_core::labels::Labels::new([("env".to_string(), "prod".to_string())].into()).unwrap(),
            ..ObjectDef::UNSET
        };
        let mut sent = frames(&[
            epoch(1, &["e1"]),
            event("web", "e1", 1, EventBody::Put { def: def.clone() }),
            event("web", "e1", 1, EventBody::transition(State::Pending, State::Critical, "down")),
            event("web", "e1", 1, EventBody::Ack),
            event("web", "e2", 1, EventBody::Put { def }),
            event("web", "e1", 1, EventBody::Delete),
            event(ObjectId::POLICY, "e1", 1, EventBody::Policy { change: Box::new(receiver()) }),
            event(ObjectId::POLICY, "e2", 1, EventBody::Policy { change: Box::new(receiver()) }),
            epoch(2, &["e1", "e2"]),
        ]);
        let (_stop, stopping) = watch::channel(false);
        let changes = Changes::new(stopping);
        let mut rx = changes.tx.subscribe();
        let mut feed = Feed::new(changes.clone());
        let mut live = jaque_core::membership::LiveSet::default();
        let up = jaque_core::membership::MemberChange::Up(member("s1"));
        live.observe(&jaque_core::membership::MemberObservation::new(Bucket::Sink, 1, up));
        feed.members(&crate::follow::Buckets([(Bucket::Sink, live)].into()), Bucket::Sink);
        feed.reload("caught up with the log");
        while let Ok(f) = rx.try_recv() {
            sent.push((f.event.to_string(), serde_json::from_str(&f.data).unwrap()));
        }
        sent.push(("hello".into(), json!({})));
        sent.push(("reload".into(), json!({"reason": "lagged", "missed": 5})));
        let kinds: std::collections::BTreeSet<&str> = sent.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["change", "epoch", "hello", "members", "policy", "reload", "stale"].into());
        let doc = crate::ui::openapi::base();
        let events = &doc["paths"]["/api/stream"]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
            ["x-events"];
        for (kind, data) in &sent {
            let schema = &events[kind.as_str()];
            assert!(schema.is_object(), "the document names no schema for {kind}");
            let errs = crate::ui::openapi::tests::validate(doc, schema, data, kind);
            assert!(errs.is_empty(), "{kind} {data}: {errs:?}");
        }
        // And the schemas are not vacuous: a change without its object, or with a field too many, is refused.
        let change = sent.iter().find(|(k, _)| k == "change").unwrap().1.clone();
        let mut missing = change.clone();
        missing.as_object_mut().unwrap().remove("object");
        let mut extra = change;
        extra["surprise"] = json!(1);
        for bad in [missing, extra] {
            assert!(!crate::ui::openapi::tests::validate(doc, &events["change"], &bad, "change").is_empty(), "{bad}");
        }
    }

    #[test]
    fn nothing_is_rendered_while_no_stream_is_connected() {
        let (_stop, stopping) = watch::channel(false);
        let feed = Feed::new(Changes::new(stopping));
        assert!(feed.before(&LogReader::new(), &epoch(1, &["e1"])).is_none());
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_is_told_to_reload_and_ends_when_the_process_stops() {
        let (stop, stopping) = watch::channel(false);
        let changes = Changes::new(stopping);
        let resp = changes.subscribe();
        assert_eq!(changes.connected.load(Ordering::Relaxed), 1);
        for i in 0..CAPACITY + 5 {
            changes.send("change", Some(i as u64), "{}".into());
        }
        let mut body = resp.into_body().into_data_stream();
        let mut text = String::new();
        while !text.contains("event: reload") {
            text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
        }
        assert!(text.starts_with("event: hello\n"), "{text}");
        assert!(text.contains(r#"data: {"missed":5,"reason":"lagged"}"#), "{text}");
        assert_eq!(changes.lagged.load(Ordering::Relaxed), 1);
        stop.send(true).unwrap();
        while body.next().await.is_some() {}
        // The server drops a body that ended.
        drop(body);
        assert_eq!(changes.connected.load(Ordering::Relaxed), 0, "the stream ended and was counted out");
    }
}
