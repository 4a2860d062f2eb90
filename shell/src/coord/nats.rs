//! The JetStream store of `-coordination nats://`: the membership KV bucket, the log stream and the snapshots'
//! object store.

use super::{key, observe, LogEvent, MemberEvent};
use crate::metrics;
use crate::nats::{self, NatsLink};
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, message::PublishMessage, object_store, stream};
use futures_util::StreamExt;
use jaque_core::wire::{self, Heartbeat};
use jaque_core::{Bucket, EpochRecord, LogEntry, MemberRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::OnceCell;

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
    /// The snapshot store, once it exists (an engine creates it; other roles open it when they first need it).
    snapshots: Arc<OnceCell<object_store::ObjectStore>>,
}

/// The object store bucket of reader snapshots: one object per snapshot, named by its position.
pub const SNAPSHOT_BUCKET: &str = "jaque_snapshots";
/// How many snapshots the bucket keeps: the newest, and the one before it for a reader still loading it.
const SNAPSHOTS_KEPT: usize = super::memory::SNAPSHOTS_KEPT;

fn snapshot_name(position: u64) -> String {
    format!("reader-{position:020}")
}

fn snapshot_position(name: &str) -> Option<u64> {
    name.strip_prefix("reader-")?.parse().ok()
}

impl NatsCoord {
    /// Opens the membership bucket and the log stream, creating them with `replicas` (`-log-replicas`) when
    /// they do not exist. Existing ones are used as they are: an operator may have set them up on purpose, and
    /// changing the replicas of a live stream is theirs to decide; a mismatch is logged. An engine (`engine`)
    /// also creates the snapshot store, which only engines write; other roles open it when they first read it.
    pub async fn open(link: NatsLink, replicas: usize, engine: bool) -> Result<NatsCoord, String> {
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
        let snapshots = Arc::new(OnceCell::new());
        if engine {
            let store = match js.get_object_store(SNAPSHOT_BUCKET).await {
                Ok(s) => s,
                Err(_) => {
                    js.create_object_store(object_store::Config {
                        bucket: SNAPSHOT_BUCKET.into(),
                        description: Some("jaque reader snapshots: the log's state at a position".into()),
                        storage: stream::StorageType::File,
                        num_replicas: replicas,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| format!("creating the snapshot store {SNAPSHOT_BUCKET} on {}: {e} {hint}", link.url))?
                }
            };
            let _ = snapshots.set(store);
        }
        Ok(NatsCoord { link, js, kv, snapshots })
    }

    pub(super) fn js(&self) -> &jetstream::Context {
        &self.js
    }

    /// The snapshot store, opened now if it was not yet; `None` while no engine has created it.
    async fn snapshot_store(&self) -> Result<Option<&object_store::ObjectStore>, String> {
        if let Some(s) = self.snapshots.get() {
            return Ok(Some(s));
        }
        if let Err(e) = self.js.get_stream(format!("OBJ_{SNAPSHOT_BUCKET}")).await {
            return match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(None)
                }
                _ => Err(format!("opening the snapshot store {SNAPSHOT_BUCKET}: {e}")),
            };
        }
        let store = self
            .js
            .get_object_store(SNAPSHOT_BUCKET)
            .await
            .map_err(|e| format!("opening the snapshot store {SNAPSHOT_BUCKET}: {e}"))?;
        Ok(Some(self.snapshots.get_or_init(|| async { store }).await))
    }

    /// Snapshot names present, newest first.
    async fn snapshot_names(&self, store: &object_store::ObjectStore) -> Result<Vec<(u64, String)>, String> {
        let mut list = store.list().await.map_err(|e| format!("listing snapshots: {e}"))?;
        let mut names = Vec::new();
        while let Some(info) = list.next().await {
            let info = info.map_err(|e| format!("listing snapshots: {e}"))?;
            if let Some(p) = snapshot_position(&info.name).filter(|_| !info.deleted) {
                names.push((p, info.name));
            }
        }
        names.sort_unstable_by(|a, b| b.cmp(a));
        Ok(names)
    }

    pub(super) async fn save_snapshot(&self, position: u64, bytes: Vec<u8>) -> Result<(), String> {
        let store = self.snapshot_store().await?.ok_or("the snapshot store does not exist")?;
        let name = snapshot_name(position);
        let mut reader = std::io::Cursor::new(bytes);
        store.put(name.as_str(), &mut reader).await.map_err(|e| format!("writing snapshot {name}: {e}"))?;
        for (_, old) in self.snapshot_names(store).await?.into_iter().skip(SNAPSHOTS_KEPT) {
            if let Err(e) = store.delete(old.as_str()).await {
                tracing::debug!(snapshot = old, error = %e, "deleting an old snapshot");
            }
        }
        Ok(())
    }

    /// The newest snapshot that can be read whole (an older one when the newest was deleted meanwhile).
    pub(super) async fn latest_snapshot(&self) -> Result<Option<(u64, Vec<u8>)>, String> {
        let Some(store) = self.snapshot_store().await? else { return Ok(None) };
        for (position, name) in self.snapshot_names(store).await? {
            let mut object = match store.get(name.as_str()).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(snapshot = name, error = %e, "reading a snapshot");
                    continue;
                }
            };
            let mut bytes = Vec::new();
            match object.read_to_end(&mut bytes).await {
                Ok(_) => return Ok(Some((position, bytes))),
                Err(e) => tracing::debug!(snapshot = name, error = %e, "reading a snapshot"),
            }
        }
        Ok(None)
    }

    pub(super) async fn purge_events_below(&self, below: u64) -> Result<(), String> {
        let stream = self.js.get_stream(LOG_STREAM).await.map_err(|e| format!("opening stream {LOG_STREAM}: {e}"))?;
        stream
            .purge()
            .filter(EVENT_SUBJECT)
            .sequence(below)
            .await
            .map(|_| ())
            .map_err(|e| format!("purging the log's events below {below}: {e}"))
    }

    /// The membership bucket, which also holds a notifier's progress records.
    pub fn kv(&self) -> &jetstream::kv::Store {
        &self.kv
    }

    pub(super) async fn put_heartbeat(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) -> Result<(), String> {
        let subject = format!("$KV.{KV_BUCKET}.{}", key(bucket, &member.id));
        let payload = wire::encode(&Heartbeat { incarnation: member.incarnation });
        let ack = self
            .js
            .send_publish(subject, PublishMessage::build().payload(payload.into()).ttl(ttl))
            .await
            .map_err(|e| e.to_string())?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }

    pub(super) async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
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

    pub(super) async fn watch_members(&self) -> Result<UnboundedReceiver<MemberEvent>, String> {
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

    pub(super) async fn follow_log(&self, from: u64) -> Result<UnboundedReceiver<LogEvent>, String> {
        let policy = consumer::DeliverPolicy::ByStartSequence { start_sequence: from.max(1) };
        let (pending, messages) = self.ordered(LOG_STREAM, "jaque.log.>", policy).await?;
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
                    tx.send(LogEvent::Unreadable { seq }).is_ok()
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
    pub(super) async fn replay(&self, from: u64, to: u64) -> Result<(u64, Vec<(u64, LogEntry)>), String> {
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
