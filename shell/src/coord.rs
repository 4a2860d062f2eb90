//! The `-coordination` store: membership keys with a per-key TTL and a watch, and the log (epoch records and
//! events in one ordered stream, epoch records appended by compare-and-set). Two implementations with the same
//! semantics — an in-process one for `-coordination memory` and JetStream for `nats://` — so the engine and the
//! ui run the same code path over either.

use crate::metrics;
use crate::nats::{self, NatsLink};
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, message::PublishMessage, stream};
use futures_util::StreamExt;
use jaque_core::wire::{self, Heartbeat};
use jaque_core::{Bucket, EpochRecord, Event, LogEntry, MemberChange, MemberId, MemberObservation, MemberRef};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

/// What a membership watcher reports: every change in revision order, and once, the end of the snapshot of
/// keys that existed when the watch began.
#[derive(Debug)]
pub enum MemberEvent {
    Observed(MemberObservation),
    SnapshotDone,
}

/// What a log follower reports: every entry in log order, and once, the end of the backlog present at start.
#[derive(Debug)]
pub enum LogEvent {
    Entry { seq: u64, entry: LogEntry },
    CaughtUp,
}

#[derive(Clone)]
pub enum Coordination {
    Memory(Arc<MemStore>),
    Nats(Box<NatsCoord>),
}

impl Coordination {
    pub fn memory() -> Coordination {
        Coordination::Memory(MemStore::start())
    }

    pub fn is_nats(&self) -> bool {
        matches!(self, Coordination::Nats(_))
    }

    pub async fn put_heartbeat(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) -> Result<(), String> {
        match self {
            Coordination::Memory(m) => {
                m.put(bucket, member, ttl);
                Ok(())
            }
            Coordination::Nats(n) => n.put_heartbeat(bucket, member, ttl).await,
        }
    }

    /// Deletes this member's key, only while it is this incarnation's: a late delete of an earlier incarnation
    /// never takes the key of the process that replaced it (a compare-and-set on the key's revision).
    pub async fn delete_heartbeat(&self, bucket: Bucket, member: &MemberRef) -> Result<(), String> {
        let k = key(bucket, &member.id);
        let ours = |value: &[u8]| {
            wire::decode_heartbeat(member.id.as_str(), value).is_ok_and(|m| m.incarnation == member.incarnation)
        };
        match self {
            Coordination::Memory(m) => {
                m.delete_if(&k, ours);
                Ok(())
            }
            Coordination::Nats(n) => match n.kv.entry(k.as_str()).await.map_err(|e| e.to_string())? {
                Some(e) if e.operation == jetstream::kv::Operation::Put && ours(&e.value) => {
                    n.kv.delete_expect_revision(k.as_str(), Some(e.revision)).await.map_err(|e| e.to_string())
                }
                _ => Ok(()),
            },
        }
    }

    pub async fn watch_members(&self) -> Result<UnboundedReceiver<MemberEvent>, String> {
        match self {
            Coordination::Memory(m) => Ok(m.watch_members()),
            Coordination::Nats(n) => n.watch_members().await,
        }
    }

    pub async fn follow_log(&self) -> Result<UnboundedReceiver<LogEvent>, String> {
        match self {
            Coordination::Memory(m) => Ok(m.follow_log()),
            Coordination::Nats(n) => n.follow_log().await,
        }
    }

    /// The log's entries at positions `from..=to` that exist, and the last position the read covered (a
    /// notifier or sink reading a range again after gaining objects).
    pub async fn replay(&self, from: u64, to: u64) -> Result<(u64, Vec<(u64, LogEntry)>), String> {
        match self {
            Coordination::Memory(m) => Ok(m.replay(from, to)),
            Coordination::Nats(n) => n.replay(from, to).await,
        }
    }

    /// Appends `record` only if the log's last epoch record is still at `after_seq`. `Ok(false)`: another
    /// proposal won. `Err`: the outcome is unknown (it may still land).
    pub async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
        match self {
            Coordination::Memory(m) => Ok(m.propose(record, after_seq)),
            Coordination::Nats(n) => n.propose(record, after_seq).await,
        }
    }

    /// Sends an event to the log. The returned ack resolves when the store has it; appends sent one after the
    /// other land in that order.
    pub async fn append(&self, event: Event) -> Result<AppendAck, String> {
        match self {
            Coordination::Memory(m) => {
                m.append(LogEntry::Event(event));
                Ok(AppendAck::Done)
            }
            Coordination::Nats(n) => {
                let payload = wire::encode(&LogEntry::Event(event));
                let ack =
                    n.js.send_publish(EVENT_SUBJECT, PublishMessage::build().payload(payload.into()))
                        .await
                        .map_err(|e| e.to_string())?;
                Ok(AppendAck::Nats(ack))
            }
        }
    }
}

pub enum AppendAck {
    Done,
    Nats(jetstream::context::PublishAckFuture),
}

impl AppendAck {
    pub async fn wait(self) -> Result<(), String> {
        match self {
            AppendAck::Done => Ok(()),
            AppendAck::Nats(f) => f.await.map(|_| ()).map_err(|e| e.to_string()),
        }
    }
}

/// The page's key name: `membership/<id>`, `sink/membership/<id>`, `notifier/membership/<id>`.
pub fn key(bucket: Bucket, id: &MemberId) -> String {
    format!("{}{}", bucket.prefix(), id)
}

/// A key's change as an observation, or `None` for a key that is not a member key (counted).
fn observe(rev: u64, key: &str, up: Option<&[u8]>) -> Option<MemberObservation> {
    let Some((bucket, id)) = Bucket::split_key(key) else {
        metrics::wire_error("membership key");
        return None;
    };
    let change = match up {
        Some(bytes) => match wire::decode_heartbeat(id, bytes) {
            Ok(m) => MemberChange::Up(m),
            Err(e) => {
                tracing::warn!(key, error = %e, "skipping a malformed heartbeat");
                metrics::wire_error("heartbeat");
                return None;
            }
        },
        None => match MemberId::new(id) {
            Ok(id) => MemberChange::Down(id),
            Err(_) => {
                metrics::wire_error("membership key");
                return None;
            }
        },
    };
    Some(MemberObservation { bucket, rev, change })
}

// ---- memory ----

/// The in-process store: the same semantics as the JetStream one (revisions, TTL expiry seen by watchers as a
/// delete, compare-and-set on the last epoch record), for a single process.
pub struct MemStore {
    inner: Mutex<MemInner>,
}

#[derive(Default)]
struct MemInner {
    rev: u64,
    keys: BTreeMap<String, (Vec<u8>, Instant, u64)>,
    /// The bucket's other keys (a notifier's progress records): no TTL, not member keys, never watched, but
    /// written at the revisions of the same sequence as the member keys, as in the NATS KV bucket.
    records: BTreeMap<String, (Vec<u8>, u64)>,
    member_watchers: Vec<UnboundedSender<MemberEvent>>,
    log: Vec<LogEntry>,
    last_epoch_seq: Option<u64>,
    log_followers: Vec<UnboundedSender<LogEvent>>,
}

impl MemInner {
    fn change(&mut self, key: &str, up: Option<&[u8]>) {
        self.rev += 1;
        if let Some(obs) = observe(self.rev, key, up) {
            self.member_watchers.retain(|w| w.send(MemberEvent::Observed(obs.clone())).is_ok());
        }
    }
}

impl MemStore {
    /// Starts the store and its expiry sweep (needs a Tokio runtime).
    pub fn start() -> Arc<MemStore> {
        let store = Arc::new(MemStore { inner: Mutex::new(MemInner::default()) });
        let weak = Arc::downgrade(&store);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                store.expire(Instant::now());
            }
        });
        store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) {
        let key = key(bucket, &member.id);
        let value = wire::encode(&Heartbeat { incarnation: member.incarnation });
        let mut inner = self.lock();
        inner.change(&key, Some(&value));
        let rev = inner.rev;
        inner.keys.insert(key, (value, Instant::now() + ttl, rev));
    }

    fn delete_if(&self, key: &str, ours: impl Fn(&[u8]) -> bool) {
        let mut inner = self.lock();
        if inner.keys.get(key).is_some_and(|(value, _, _)| ours(value)) {
            inner.keys.remove(key);
            inner.change(key, None);
        }
    }

    fn expire(&self, now: Instant) {
        let mut inner = self.lock();
        let expired: Vec<String> =
            inner.keys.iter().filter(|(_, (_, t, _))| *t <= now).map(|(k, _)| k.clone()).collect();
        for key in expired {
            inner.keys.remove(&key);
            inner.change(&key, None);
        }
    }

    fn watch_members(&self) -> UnboundedReceiver<MemberEvent> {
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        // The snapshot: each live key at the revision of its last write, in revision order.
        let mut snapshot: Vec<_> = inner.keys.iter().map(|(k, (v, _, rev))| (*rev, k, v)).collect();
        snapshot.sort();
        for (rev, key, value) in snapshot {
            if let Some(obs) = observe(rev, key, Some(value)) {
                let _ = tx.send(MemberEvent::Observed(obs));
            }
        }
        let _ = tx.send(MemberEvent::SnapshotDone);
        inner.member_watchers.push(tx);
        rx
    }

    fn follow_log(&self) -> UnboundedReceiver<LogEvent> {
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        for (i, entry) in inner.log.iter().enumerate() {
            let _ = tx.send(LogEvent::Entry { seq: i as u64 + 1, entry: entry.clone() });
        }
        let _ = tx.send(LogEvent::CaughtUp);
        inner.log_followers.push(tx);
        rx
    }

    fn append(&self, entry: LogEntry) -> u64 {
        let mut inner = self.lock();
        inner.log.push(entry.clone());
        let seq = inner.log.len() as u64;
        inner.log_followers.retain(|f| f.send(LogEvent::Entry { seq, entry: entry.clone() }).is_ok());
        seq
    }

    fn replay(&self, from: u64, to: u64) -> (u64, Vec<(u64, LogEntry)>) {
        let inner = self.lock();
        let end = to.min(inner.log.len() as u64);
        let entries = (from.max(1)..=end).map(|seq| (seq, inner.log[seq as usize - 1].clone())).collect();
        (to, entries)
    }

    /// A record and its revision, if there is one.
    pub fn record(&self, key: &str) -> Option<(Vec<u8>, u64)> {
        self.lock().records.get(key).cloned()
    }

    /// Writes a record only if it is at revision `expect` (`None`: only if there is none): its new revision,
    /// or `None` when it was not.
    pub fn write_record(&self, key: &str, value: Vec<u8>, expect: Option<u64>) -> Option<u64> {
        let mut inner = self.lock();
        if inner.records.get(key).map(|(_, rev)| *rev) != expect {
            return None;
        }
        inner.rev += 1;
        let rev = inner.rev;
        inner.records.insert(key.to_string(), (value, rev));
        Some(rev)
    }

    fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> bool {
        // Check and append under one lock: the compare-and-set.
        let mut inner = self.lock();
        if inner.last_epoch_seq != after_seq {
            return false;
        }
        let entry = LogEntry::Epoch(record.clone());
        inner.log.push(entry.clone());
        let seq = inner.log.len() as u64;
        inner.last_epoch_seq = Some(seq);
        inner.log_followers.retain(|f| f.send(LogEvent::Entry { seq, entry: entry.clone() }).is_ok());
        true
    }
}

// ---- NATS JetStream ----

pub const KV_BUCKET: &str = "jaque_membership";
pub const LOG_STREAM: &str = "JAQUE_LOG";
pub const EPOCH_SUBJECT: &str = "jaque.log.epoch";
pub const EVENT_SUBJECT: &str = "jaque.log.event";
/// How long an expiry or delete marker stays in the membership bucket. Watchers get markers as they are
/// written; the lifetime only has to outlast a watcher that is reconnecting.
const MARKER_TTL: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct NatsCoord {
    link: NatsLink,
    js: jetstream::Context,
    kv: jetstream::kv::Store,
}

impl NatsCoord {
    /// Opens the membership bucket and the log stream, creating them with `replicas` (`-log-replicas`) when
    /// they do not exist. Existing ones are used as they are: an operator may have set them up on purpose, and
    /// changing the replicas of a live stream is theirs to decide; a mismatch is logged.
    pub async fn open(link: NatsLink, replicas: usize) -> Result<NatsCoord, String> {
        let js = jetstream::new(link.client.clone());
        let hint = "(jaque needs nats-server 2.11 or newer with JetStream on: nats-server -js; on a cluster, \
                    -log-replicas at most the number of JetStream nodes)";
        let kv_stream = format!("KV_{KV_BUCKET}");
        let kv = match existing_stream(&js, &kv_stream, replicas, &link).await? {
            Some(()) => js
                .get_key_value(KV_BUCKET)
                .await
                .map_err(|e| format!("opening the membership bucket {KV_BUCKET} on {}: {e}", link.url))?,
            None => js
                .create_key_value(jetstream::kv::Config {
                    bucket: KV_BUCKET.into(),
                    description: "jaque membership: one key per live member, refreshed every ttl/3".into(),
                    history: 1,
                    limit_markers: Some(MARKER_TTL),
                    storage: stream::StorageType::File,
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("creating the membership bucket {KV_BUCKET} on {}: {e} {hint}", link.url))?,
        };
        if existing_stream(&js, LOG_STREAM, replicas, &link).await?.is_none() {
            js.get_or_create_stream(stream::Config {
                name: LOG_STREAM.into(),
                description: Some("jaque log: epoch records and events, one total order".into()),
                subjects: vec!["jaque.log.>".into()],
                storage: stream::StorageType::File,
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("creating the log stream {LOG_STREAM} on {}: {e} {hint}", link.url))?;
        }
        Ok(NatsCoord { link, js, kv })
    }

    /// The membership bucket, which also holds a notifier's progress records.
    pub fn kv(&self) -> &jetstream::kv::Store {
        &self.kv
    }

    async fn put_heartbeat(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) -> Result<(), String> {
        let subject = format!("$KV.{KV_BUCKET}.{}", key(bucket, &member.id));
        let payload = wire::encode(&Heartbeat { incarnation: member.incarnation });
        let ack = self
            .js
            .send_publish(subject, PublishMessage::build().payload(payload.into()).ttl(ttl))
            .await
            .map_err(|e| e.to_string())?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }

    async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
        let payload = wire::encode(&LogEntry::Epoch(record.clone()));
        // The compare-and-set: epoch records are the only messages on their subject, so "the last message on
        // the epoch subject is at after_seq" is "the epoch record in force is still the one we read" (0: none).
        let publish =
            PublishMessage::build().payload(payload.into()).expected_last_subject_sequence(after_seq.unwrap_or(0));
        let ack = self.js.send_publish(EPOCH_SUBJECT, publish).await.map_err(|e| e.to_string())?;
        match ack.await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// An ordered push consumer over a stream, reporting the number of messages pending at its creation.
    async fn ordered(
        &self,
        stream: &str,
        filter: &str,
        deliver_policy: consumer::DeliverPolicy,
    ) -> Result<(u64, consumer::push::Ordered), String> {
        let s = self.js.get_stream(stream).await.map_err(|e| format!("opening stream {stream}: {e}"))?;
        let c = s
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: self.link.client.new_inbox(),
                filter_subject: filter.into(),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| format!("following stream {stream}: {e}"))?;
        let pending = c.cached_info().num_pending;
        let messages = c.messages().await.map_err(|e| format!("following stream {stream}: {e}"))?;
        Ok((pending, messages))
    }

    async fn watch_members(&self) -> Result<UnboundedReceiver<MemberEvent>, String> {
        let prefix = format!("$KV.{KV_BUCKET}.");
        // The last entry per key is the snapshot; every later change follows in revision order. Member keys are
        // one subject token (`membership/<id>`: ids have no dots); the bucket's other keys (a notifier's
        // `notify.…` progress records) have several, so `*` leaves them out while the stream sequence each
        // member change comes with is still the bucket-wide revision the records are written at.
        let (pending, messages) = self
            .ordered(&format!("KV_{KV_BUCKET}"), &format!("{prefix}*"), consumer::DeliverPolicy::LastPerSubject)
            .await?;
        let (tx, rx) = unbounded_channel();
        let done = tx.clone();
        spawn_follower(
            "membership watch",
            pending,
            messages,
            move |msg, rev| {
                let key = msg.subject.as_str().strip_prefix(prefix.as_str()).unwrap_or_default();
                let up = nats::kv_is_put(msg.headers.as_ref()).then_some(&msg.payload[..]);
                observe(rev, key, up).is_none_or(|obs| tx.send(MemberEvent::Observed(obs)).is_ok())
            },
            move || {
                let _ = done.send(MemberEvent::SnapshotDone);
            },
        );
        Ok(rx)
    }

    async fn follow_log(&self) -> Result<UnboundedReceiver<LogEvent>, String> {
        let (pending, messages) = self.ordered(LOG_STREAM, "jaque.log.>", consumer::DeliverPolicy::All).await?;
        let (tx, rx) = unbounded_channel();
        let done = tx.clone();
        spawn_follower(
            "log follower",
            pending,
            messages,
            move |msg, seq| match wire::decode_log_entry(&msg.payload) {
                Ok(entry) => tx.send(LogEvent::Entry { seq, entry }).is_ok(),
                Err(e) => {
                    tracing::warn!(seq, error = %e, "skipping a malformed log entry");
                    metrics::wire_error("log entry");
                    true
                }
            },
            move || {
                let _ = done.send(LogEvent::CaughtUp);
            },
        );
        Ok(rx)
    }
}

impl NatsCoord {
    async fn replay(&self, from: u64, to: u64) -> Result<(u64, Vec<(u64, LogEntry)>), String> {
        let from = from.max(1);
        let policy = consumer::DeliverPolicy::ByStartSequence { start_sequence: from };
        let (pending, mut messages) = self.ordered(LOG_STREAM, "jaque.log.>", policy).await?;
        let mut out = Vec::new();
        if pending == 0 || from > to {
            return Ok((to, out));
        }
        let read = async {
            while let Some(msg) = messages.next().await {
                let msg = msg.map_err(|e| format!("replaying the log: {e}"))?;
                let info = msg.info().map_err(|e| format!("replaying the log: {e}"))?;
                let (seq, left) = (info.stream_sequence, info.pending);
                if seq > to {
                    break;
                }
                match wire::decode_log_entry(&msg.payload) {
                    Ok(entry) => out.push((seq, entry)),
                    Err(e) => {
                        tracing::warn!(seq, error = %e, "skipping a malformed log entry");
                        metrics::wire_error("log entry");
                    }
                }
                if seq == to || left == 0 {
                    break;
                }
            }
            Ok::<(), String>(())
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .map_err(|_| format!("replaying the log from {from} to {to}: no answer in time"))??;
        Ok((to, out))
    }
}

/// Runs an ordered consumer in a task: every message goes to `on_message` with its stream sequence (a `false`
/// answer means the receiver is gone: stop), and `caught_up` is called once the backlog that was pending when the
/// consumer was made has been delivered. Errors (missed heartbeats, reconnects) are logged and the ordered
/// consumer carries on; if it ends, the process ends, since its view could no longer follow the stream.
fn spawn_follower(
    what: &'static str,
    pending: u64,
    mut messages: consumer::push::Ordered,
    mut on_message: impl FnMut(&jetstream::Message, u64) -> bool + Send + 'static,
    caught_up: impl FnOnce() + Send + 'static,
) {
    let mut caught_up = Some(caught_up);
    if pending == 0 {
        if let Some(f) = caught_up.take() {
            f();
        }
    }
    tokio::spawn(async move {
        while let Some(msg) = messages.next().await {
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "{what}");
                    continue;
                }
            };
            let Ok(info) = msg.info() else { continue };
            let (seq, left) = (info.stream_sequence, info.pending);
            if !on_message(&msg, seq) {
                return;
            }
            if left == 0 {
                if let Some(f) = caught_up.take() {
                    f();
                }
            }
        }
        crate::fatal(&format!("the {what} ended; restart to follow the stream again"));
    });
}

/// `Some` when the stream exists (a replicas mismatch with `-log-replicas` logged), `None` when it does not.
async fn existing_stream(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    link: &NatsLink,
) -> Result<Option<()>, String> {
    match js.get_stream(name).await {
        Ok(s) => {
            let have = s.cached_info().config.num_replicas;
            if have != replicas {
                tracing::warn!(
                    stream = name,
                    replicas = have,
                    log_replicas = replicas,
                    "the stream exists with other replicas than -log-replicas; using it as it is \
                     (change it with `nats stream edit` if that is what you want)"
                );
            }
            Ok(Some(()))
        }
        Err(e) => match e.kind() {
            jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(None)
            }
            _ => Err(format!("looking up the stream {name} on {}: {e}", link.url)),
        },
    }
}
