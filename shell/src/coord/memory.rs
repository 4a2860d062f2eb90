//! The in-process store of `-coordination memory`.

use super::{key, observe, LogEvent, MemberEvent};
use jaque_core::wire::{self, Heartbeat};
use jaque_core::{Bucket, EpochRecord, LogEntry, MemberRef};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

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
    /// The log by position (from 1); purged events leave holes, as in the stream.
    log: BTreeMap<u64, LogEntry>,
    /// The position the next entry gets.
    next_seq: u64,
    last_epoch_seq: Option<u64>,
    /// Snapshots by position (the newest few).
    snapshots: BTreeMap<u64, Vec<u8>>,
    log_followers: Vec<UnboundedSender<LogEvent>>,
}

/// How many snapshots the store keeps: the newest, and one before it for a reader that is loading it.
pub(crate) const SNAPSHOTS_KEPT: usize = 2;

impl MemInner {
    /// Appends an entry at the next position and hands it to every follower.
    fn push(&mut self, entry: LogEntry) -> u64 {
        self.next_seq = self.next_seq.max(1);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.log.insert(seq, entry.clone());
        self.log_followers.retain(|f| f.send(LogEvent::Entry { seq, entry: entry.clone() }).is_ok());
        seq
    }

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

    pub(super) fn put(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) {
        let key = key(bucket, &member.id);
        let value = wire::encode(&Heartbeat { incarnation: member.incarnation });
        let mut inner = self.lock();
        inner.change(&key, Some(&value));
        let rev = inner.rev;
        inner.keys.insert(key, (value, Instant::now() + ttl, rev));
    }

    pub(super) fn delete_if(&self, key: &str, ours: impl Fn(&[u8]) -> bool) {
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

    pub(super) fn watch_members(&self) -> UnboundedReceiver<MemberEvent> {
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        // The snapshot: each live key at the revision of its last write, in revision order.
        let mut keys: Vec<_> = inner.keys.iter().map(|(k, (v, _, rev))| (*rev, k, v)).collect();
        keys.sort();
        let observed = keys.into_iter().filter_map(|(rev, key, value)| observe(rev, key, Some(value))).collect();
        let _ = tx.send(MemberEvent::Snapshot { observed, upto: inner.rev });
        inner.member_watchers.push(tx);
        rx
    }

    pub(super) fn follow_log(&self, from: u64) -> UnboundedReceiver<LogEvent> {
        let (tx, rx) = unbounded_channel();
        let mut inner = self.lock();
        for (seq, entry) in inner.log.range(from..) {
            let _ = tx.send(LogEvent::Entry { seq: *seq, entry: entry.clone() });
        }
        let _ = tx.send(LogEvent::CaughtUp);
        inner.log_followers.push(tx);
        rx
    }

    pub(super) fn append(&self, entry: LogEntry) -> u64 {
        self.lock().push(entry)
    }

    pub(super) fn replay(&self, from: u64, to: u64) -> (u64, Vec<(u64, LogEntry)>) {
        let from = from.max(1);
        if from > to {
            return (to, Vec::new());
        }
        let entries = self.lock().log.range(from..=to).map(|(s, e)| (*s, e.clone())).collect();
        (to, entries)
    }

    pub(super) fn save_snapshot(&self, position: u64, bytes: Vec<u8>) {
        let mut inner = self.lock();
        inner.snapshots.insert(position, bytes);
        while inner.snapshots.len() > SNAPSHOTS_KEPT {
            inner.snapshots.pop_first();
        }
    }

    pub(super) fn latest_snapshot(&self) -> Option<(u64, Vec<u8>)> {
        self.lock().snapshots.last_key_value().map(|(p, b)| (*p, b.clone()))
    }

    pub(super) fn purge_events_below(&self, below: u64) {
        let mut inner = self.lock();
        let purged: Vec<u64> =
            inner.log.range(..below).filter(|(_, e)| matches!(e, LogEntry::Event(_))).map(|(s, _)| *s).collect();
        for seq in purged {
            inner.log.remove(&seq);
        }
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

    pub(super) fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> bool {
        // Check and append under one lock: the compare-and-set.
        let mut inner = self.lock();
        if inner.last_epoch_seq != after_seq {
            return false;
        }
        let seq = inner.push(LogEntry::Epoch(record.clone()));
        inner.last_epoch_seq = Some(seq);
        true
    }
}
