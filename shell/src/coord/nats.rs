//! The JetStream store of `-coordination nats://`: the membership KV bucket, the log stream and the snapshots'
//! object store.

use super::events::{key, observe, Events, LogEvent, MemberEvent};
use super::snapshot::{SnapshotBytes, SNAPSHOTS_KEPT};
use crate::metrics::{self, Exposition};
use crate::nats::{self, NatsLink};
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, message::PublishMessage, object_store, stream};
use futures_util::StreamExt;
use jaque_core::backoff::Backoff;
use jaque_core::wire::{self, Heartbeat};
use jaque_core::{Bucket, EpochRecord, LogEntry, MemberObservation, MemberRef};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{self, unbounded_channel, UnboundedReceiver, UnboundedSender};
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

    pub(super) async fn save_snapshot(&self, position: u64, mut bytes: SnapshotBytes) -> Result<(), String> {
        let store = self.snapshot_store().await?.ok_or("the snapshot store does not exist")?;
        let name = snapshot_name(position);
        // Read as the encoder makes them: an object store takes the bytes in chunks of its own.
        store.put(name.as_str(), &mut bytes).await.map_err(|e| format!("writing snapshot {name}: {e}"))?;
        for (_, old) in self.snapshot_names(store).await?.into_iter().skip(SNAPSHOTS_KEPT) {
            if let Err(e) = store.delete(old.as_str()).await {
                tracing::debug!(snapshot = old, error = %e, "deleting an old snapshot");
            }
        }
        Ok(())
    }

    /// The newest snapshot that can be read whole (an older one when the newest was deleted meanwhile).
    /// The newest snapshot that opens, its bytes read as they are decoded (never held whole: a snapshot of a
    /// million objects is ~240 MB). An error reading it (the object store checks its digest at the end) fails
    /// the decoding, and the reader asks again.
    pub(super) async fn latest_snapshot(&self) -> Result<Option<(u64, SnapshotBytes)>, String> {
        let Some(store) = self.snapshot_store().await? else { return Ok(None) };
        for (position, name) in self.snapshot_names(store).await? {
            let object = match store.get(name.as_str()).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(snapshot = name, error = %e, "reading a snapshot");
                    continue;
                }
            };
            let (bytes, writer) = SnapshotBytes::channel();
            tokio::spawn(async move {
                if let Err(e) = writer.feed(object).await {
                    tracing::warn!(snapshot = name, error = %e, "reading a snapshot");
                }
            });
            return Ok(Some((position, bytes)));
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
        let payload =
            wire::encode(&Heartbeat { incarnation: member.incarnation, format: jaque_core::format::CLUSTER_FORMAT });
        let ack = self
            .js
            .send_publish(subject, PublishMessage::build().payload(payload.into()).ttl(ttl))
            .await
            .map_err(|e| e.to_string())?;
        ack.await.map(|_| ()).map_err(|e| e.to_string())
    }

    pub(super) async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
        let payload = wire::encode_log_entry(&LogEntry::Epoch(record.clone()));
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

    /// An ordered push consumer over a stream: the number of messages pending at its creation, the stream's last
    /// sequence just before it was made, and its messages.
    async fn ordered(
        &self,
        stream: &str,
        filter: &str,
        deliver_policy: consumer::DeliverPolicy,
    ) -> Result<(u64, u64, consumer::push::Ordered), String> {
        let s = self.js.get_stream(stream).await.map_err(|e| format!("opening stream {stream}: {e}"))?;
        let last = s.cached_info().state.last_sequence;
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
        Ok((pending, last, messages))
    }

    pub(super) async fn watch_members(&self) -> Result<UnboundedReceiver<MemberEvent>, String> {
        let (tx, rx) = unbounded_channel();
        let watch = Watch { tx, prefix: format!("$KV.{KV_BUCKET}."), snapshot: None, upto: 0 };
        self.keep_following(watch, true).await?;
        Ok(rx)
    }

    pub(super) async fn follow_log(&self, from: u64) -> Result<Events<LogEvent>, String> {
        let (tx, rx) = mpsc::channel(LOG_FOLLOWER_BUFFER);
        self.keep_following(Tail { tx, next: from.max(1) }, true).await?;
        Ok(rx)
    }

    pub(super) async fn refollow_log(&self, from: u64) -> Events<LogEvent> {
        let (tx, rx) = mpsc::channel(LOG_FOLLOWER_BUFFER);
        // Not strict: a first consumer that cannot be made is reported lost and made again, never an error.
        let _ = self.keep_following(Tail { tx, next: from.max(1) }, false).await;
        rx
    }

    /// Makes a first consumer for `f` (an error when `strict` and it cannot be made), then follows in a task
    /// for as long as `f`'s receiver is there: a consumer that is lost — the connection dropped, the server
    /// restarted and forgot it, its heartbeats stopped (a stopped server), the stream ended — is reported to `f`
    /// and made again once the connection is up, retried with a bounded backoff while the server cannot make
    /// it. The process and its membership carry on meanwhile.
    async fn keep_following<F: Follow>(&self, mut f: F, strict: bool) -> Result<(), String> {
        let (stream, filter) = f.subjects();
        let disconnects = self.link.state.borrow().disconnects;
        let first = match self.ordered(&stream, &filter, f.policy()).await {
            Ok(made) => Some((made, disconnects)),
            Err(e) if strict => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "{}: cannot be made yet; retrying", F::WHAT);
                if !f.lost(&e).await {
                    return Ok(());
                }
                None
            }
        };
        let coord = self.clone();
        tokio::spawn(async move { coord.follow(f, first, stream, filter).await });
        Ok(())
    }

    async fn follow<F: Follow>(
        self,
        mut f: F,
        mut made: Option<((u64, u64, consumer::push::Ordered), u64)>,
        stream: String,
        filter: String,
    ) {
        let mut state = self.link.state.clone();
        let mut gone = f.gone();
        // Jitter from the process: many processes that lost one server do not all come back in step.
        let salt = u64::from(std::process::id());
        let mut retry = Backoff::new(FOLLOW_RETRY, FOLLOW_RETRY_MAX, salt);
        loop {
            let ((pending, upto, mut messages), disconnects) = match made.take() {
                Some(m) => m,
                None => {
                    // While the connection is down a request would only wait in the client's queue.
                    tokio::select! {
                        r = state.wait_for(|s| s.connected) => if r.is_err() { return },
                        _ = &mut gone => return,
                    }
                    let disconnects = state.borrow().disconnects;
                    let attempt = tokio::select! {
                        r = self.ordered(&stream, &filter, f.policy()) => r,
                        _ = &mut gone => return,
                    };
                    match attempt {
                        Ok(m) => (m, disconnects),
                        Err(e) => {
                            tracing::warn!(error = %e, "{}: cannot be made again yet; retrying", F::WHAT);
                            if !f.lost(&e).await {
                                return;
                            }
                            tokio::select! {
                                _ = tokio::time::sleep(retry.next_delay()) => continue,
                                _ = &mut gone => return,
                            }
                        }
                    }
                }
            };
            f.made(upto);
            let mut backlog = pending > 0;
            if !backlog {
                retry.reset();
                if !f.backlog_done().await {
                    return;
                }
            }
            let error = loop {
                // The select only picks what happened: the watch guard `wait_for` yields must not live across
                // the awaits below (a full receiver makes `message` wait).
                let next = tokio::select! {
                    m = messages.next() => m,
                    r = state.wait_for(|s| s.disconnects != disconnects) => {
                        if r.is_err() {
                            return;
                        }
                        break "the NATS connection was lost".to_string();
                    }
                    _ = &mut gone => return,
                };
                match next {
                    Some(Ok(msg)) => {
                        let Ok(info) = msg.info() else { continue };
                        let (seq, left) = (info.stream_sequence, info.pending);
                        if !f.message(&msg, seq).await {
                            return;
                        }
                        if backlog && left == 0 {
                            backlog = false;
                            retry.reset();
                            if !f.backlog_done().await {
                                return;
                            }
                        }
                    }
                    Some(Err(e)) => break format!("{e}"),
                    None => break "the consumer ended".to_string(),
                }
            };
            F::LOST.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error, "{} lost; making it again", F::WHAT);
            if !f.lost(&error).await {
                return;
            }
        }
    }
}

/// Retries of a consumer that cannot be made: from this, doubling (with jitter) up to `FOLLOW_RETRY_MAX`, so a
/// server that is back is found within seconds and one that is not is not hammered.
const FOLLOW_RETRY: Duration = Duration::from_millis(200);
const FOLLOW_RETRY_MAX: Duration = Duration::from_secs(5);

/// Log entries a follower holds for its role before the consumer waits (a role's loop takes them in batches;
/// a role that is behind leaves the rest on the server, not in its memory).
const LOG_FOLLOWER_BUFFER: usize = 1024;

static LOG_FOLLOWERS_LOST: AtomicU64 = AtomicU64::new(0);
static WATCHES_LOST: AtomicU64 = AtomicU64::new(0);

/// `jaque_follow_lost_total{follower}`, process-wide.
pub fn expose_followers(m: &mut Exposition) {
    m.header(
        "jaque_follow_lost_total",
        "counter",
        "Log followers and membership watches lost (connection lost, server restarted, heartbeats missed) and made \
         again: the log from the position after the last one read, the watch with a fresh snapshot.",
    );
    m.sample("jaque_follow_lost_total", &[("follower", "log")], LOG_FOLLOWERS_LOST.load(Ordering::Relaxed));
    m.sample("jaque_follow_lost_total", &[("follower", "membership")], WATCHES_LOST.load(Ordering::Relaxed));
}

/// What one kind of follower does with its consumer's messages (`NatsCoord::follow`).
trait Follow: Send + 'static {
    /// For logs and reasons: "log follower", "membership watch".
    const WHAT: &'static str;
    const LOST: &'static AtomicU64;
    /// The stream and the filter subject.
    fn subjects(&self) -> (String, String);
    /// Where a consumer made now begins.
    fn policy(&self) -> consumer::DeliverPolicy;
    /// A consumer was made; `upto` is the stream's last sequence just before.
    fn made(&mut self, upto: u64);
    /// A message at stream sequence `seq`. `false`: the receiver is gone, stop. Waits while the receiver is
    /// full: the consumer is not polled meanwhile.
    fn message(&mut self, msg: &jetstream::Message, seq: u64) -> impl Future<Output = bool> + Send;
    /// The messages pending when the consumer was made have been delivered.
    fn backlog_done(&mut self) -> impl Future<Output = bool> + Send;
    /// The consumer was lost, or could not be made (`error`).
    fn lost(&mut self, error: &str) -> impl Future<Output = bool> + Send;
    /// Resolves once the receiver is gone.
    fn gone(&self) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The log, from the position after the last one delivered.
struct Tail {
    tx: mpsc::Sender<LogEvent>,
    next: u64,
}

impl Follow for Tail {
    const WHAT: &'static str = "log follower";
    const LOST: &'static AtomicU64 = &LOG_FOLLOWERS_LOST;

    fn subjects(&self) -> (String, String) {
        (LOG_STREAM.into(), "jaque.log.>".into())
    }

    fn policy(&self) -> consumer::DeliverPolicy {
        consumer::DeliverPolicy::ByStartSequence { start_sequence: self.next }
    }

    fn made(&mut self, _upto: u64) {}

    fn message(&mut self, msg: &jetstream::Message, seq: u64) -> impl Future<Output = bool> + Send {
        // The client remakes a consumer by itself after a reconnect, before this follower noticed: from the
        // start of the stream if it had delivered nothing yet. Each entry goes to the reader once.
        let event = (seq >= self.next).then(|| {
            self.next = seq + 1;
            match wire::decode_log_entry(&msg.payload) {
                Ok(entry) => LogEvent::Entry { seq, entry },
                Err(wire::WireError::TooNew { needs }) => {
                    tracing::warn!(seq, needs, "a log entry of a cluster format this build does not speak");
                    LogEvent::TooNew { seq, needs }
                }
                Err(e) => {
                    tracing::warn!(seq, error = %e, "skipping a malformed log entry");
                    metrics::wire_error("log entry");
                    LogEvent::Unreadable { seq }
                }
            }
        });
        let tx = &self.tx;
        async move {
            match event {
                Some(event) => tx.send(event).await.is_ok(),
                None => true,
            }
        }
    }

    fn backlog_done(&mut self) -> impl Future<Output = bool> + Send {
        let tx = &self.tx;
        async move { tx.send(LogEvent::CaughtUp).await.is_ok() }
    }

    fn lost(&mut self, error: &str) -> impl Future<Output = bool> + Send {
        let (tx, event) = (&self.tx, LogEvent::Lost { from: self.next, error: error.to_string() });
        async move { tx.send(event).await.is_ok() }
    }

    fn gone(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let tx = self.tx.clone();
        Box::pin(async move { tx.closed().await })
    }
}

/// The membership keys: each consumer begins with the last change of every key (a fresh snapshot, handed over
/// whole), then every change in revision order.
struct Watch {
    tx: UnboundedSender<MemberEvent>,
    /// `$KV.<bucket>.`: a key's subject without it is the key.
    prefix: String,
    /// While the snapshot is being read.
    snapshot: Option<Vec<MemberObservation>>,
    upto: u64,
}

impl Follow for Watch {
    const WHAT: &'static str = "membership watch";
    const LOST: &'static AtomicU64 = &WATCHES_LOST;

    fn subjects(&self) -> (String, String) {
        // Member keys are one subject token (`membership/<id>`: ids have no dots); the bucket's other keys (a
        // notifier's `notify.…` progress records) have several, so `*` leaves them out while the stream
        // sequence each member change comes with is still the bucket-wide revision the records are written at.
        (format!("KV_{KV_BUCKET}"), format!("{}*", self.prefix))
    }

    fn policy(&self) -> consumer::DeliverPolicy {
        consumer::DeliverPolicy::LastPerSubject
    }

    fn made(&mut self, upto: u64) {
        self.snapshot = Some(Vec::new());
        self.upto = upto;
    }

    // Membership changes are few (joins, leaves, expiries): the watch's channel is unbounded and never waits.
    fn message(&mut self, msg: &jetstream::Message, rev: u64) -> impl Future<Output = bool> + Send {
        let key = msg.subject.as_str().strip_prefix(self.prefix.as_str()).unwrap_or_default();
        let up = nats::kv_is_put(msg.headers.as_ref()).then_some(&msg.payload[..]);
        let sent = match (observe(rev, key, up), &mut self.snapshot) {
            (None, _) => true,
            (Some(obs), Some(s)) => {
                s.push(obs);
                true
            }
            (Some(obs), None) => self.tx.send(MemberEvent::Observed(obs)).is_ok(),
        };
        std::future::ready(sent)
    }

    fn backlog_done(&mut self) -> impl Future<Output = bool> + Send {
        let observed = self.snapshot.take().unwrap_or_default();
        std::future::ready(self.tx.send(MemberEvent::Snapshot { observed, upto: self.upto }).is_ok())
    }

    fn lost(&mut self, error: &str) -> impl Future<Output = bool> + Send {
        self.snapshot = None;
        std::future::ready(self.tx.send(MemberEvent::Lost { error: error.to_string() }).is_ok())
    }

    fn gone(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let tx = self.tx.clone();
        Box::pin(async move { tx.closed().await })
    }
}

impl NatsCoord {
    pub(super) async fn replay(&self, from: u64, to: u64) -> Result<(u64, Vec<(u64, LogEntry)>), String> {
        let from = from.max(1);
        let policy = consumer::DeliverPolicy::ByStartSequence { start_sequence: from };
        let (pending, _, mut messages) = self.ordered(LOG_STREAM, "jaque.log.>", policy).await?;
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
