//! The in-process store of `-coordination memory`. With `-data-dir` its log, snapshots and progress records
//! are also on disk (`disk`): an entry is delivered to followers, and an append, proposal or record write
//! answered, only once it is fsync'd; membership keys stay in memory (a restart is a new incarnation anyway).
//! Without it everything is in memory, bounded by the same snapshots and compaction: a purge removes the
//! events from the map (and drops them), so the log holds what the retention keeps plus the epoch records.

use super::disk::{DataDir, DiskLog, Durable, Freed};
use super::events::{held_event, key, observe, Held, LogEvent, MemberEvent};
use super::snapshot::{SnapshotBytes, SNAPSHOTS_KEPT};
use jaque_core::wire::{self, Heartbeat};
use jaque_core::{Bucket, EpochRecord, LogEntry, MemberRef};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{self, unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;
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
    /// The log by position (from 1); purged events leave holes, as in the stream. `None`: an entry read from
    /// the data directory whose bytes do not decode (followers are told, and pass over it).
    log: BTreeMap<u64, Held>,
    /// With a data directory: entries given a position but not fsync'd yet, delivered once they are.
    unsynced: VecDeque<(u64, LogEntry)>,
    /// The position the next entry gets.
    next_seq: u64,
    last_epoch_seq: Option<u64>,
    /// Snapshots by position (the newest few), when there is no data directory.
    snapshots: BTreeMap<u64, Vec<u8>>,
    /// Woken at every entry a follower may read (`follow_log`).
    appended: Arc<Notify>,
    disk: Option<DiskLog>,
}

/// Log entries a follower holds for its role before it waits, and how many it reads from the log at a time.
const LOG_FOLLOWER_BUFFER: usize = 1024;
const FOLLOW_BATCH: usize = 256;

impl MemInner {
    /// Appends an entry at the next position: handed to every follower at once, or with a data directory once
    /// the writer has fsync'd it (the returned wait).
    fn push(&mut self, entry: LogEntry) -> (u64, Option<Durable>) {
        self.next_seq = self.next_seq.max(1);
        let seq = self.next_seq;
        self.next_seq += 1;
        match &self.disk {
            Some(disk) => {
                let durable = disk.entry(seq, &entry);
                self.unsynced.push_back((seq, entry));
                (seq, Some(durable))
            }
            None => {
                self.deliver(seq, Ok(entry));
                (seq, None)
            }
        }
    }

    fn deliver(&mut self, seq: u64, entry: Held) {
        self.log.insert(seq, entry);
        self.appended.notify_waiters();
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
        MemStore::spawn_sweep(Arc::new(MemStore { inner: Mutex::new(MemInner::default()) }))
    }

    /// Starts the store on a data directory: with what it holds, and its writer.
    pub fn start_on(data: DataDir) -> Arc<MemStore> {
        let store = Arc::new_cyclic(|me: &std::sync::Weak<MemStore>| {
            let me = me.clone();
            let (loaded, disk) = data.start(move |upto| {
                if let Some(store) = me.upgrade() {
                    store.synced(upto);
                }
            });
            MemStore {
                inner: Mutex::new(MemInner {
                    rev: loaded.rev,
                    records: loaded.records,
                    log: loaded.log,
                    next_seq: loaded.next_seq,
                    last_epoch_seq: loaded.last_epoch_seq,
                    disk: Some(disk),
                    ..MemInner::default()
                }),
            }
        });
        MemStore::spawn_sweep(store)
    }

    fn spawn_sweep(store: Arc<MemStore>) -> Arc<MemStore> {
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

    /// The writer made every position up to `upto` durable: deliver those entries.
    fn synced(&self, upto: u64) {
        let mut inner = self.lock();
        while inner.unsynced.front().is_some_and(|(seq, _)| *seq <= upto) {
            let (seq, entry) = inner.unsynced.pop_front().expect("checked");
            inner.deliver(seq, Ok(entry));
        }
    }

    /// Writes what is queued for the data directory and stops its writer (at exit). Entries appended later
    /// are never delivered: they are not durable.
    pub async fn close(&self) {
        if let Some(disk) = self.disk() {
            disk.close().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn put(&self, bucket: Bucket, member: &MemberRef, ttl: Duration) {
        let key = key(bucket, &member.id);
        let value =
            wire::encode(&Heartbeat { incarnation: member.incarnation, format: jaque_core::format::CLUSTER_FORMAT });
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

    /// A follower reads the log itself, a batch at a time, and holds at most `LOG_FOLLOWER_BUFFER` entries
    /// for its role (as a NATS follower does): a role that is behind leaves the rest in the log, not in a
    /// channel. Entries purged before it reads them are passed over, a jump in positions, as on NATS.
    pub(super) fn follow_log(self: &Arc<Self>, from: u64) -> mpsc::Receiver<LogEvent> {
        let (tx, rx) = mpsc::channel(LOG_FOLLOWER_BUFFER);
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut next = from;
            // Where the backlog present now ends: `CaughtUp` once it is delivered.
            let Some((mut backlog_end, appended)) = store.upgrade().map(|s| {
                let inner = s.lock();
                (Some(inner.log.keys().next_back().copied().unwrap_or(0)), inner.appended.clone())
            }) else {
                return;
            };
            loop {
                let Some(store) = store.upgrade() else { return };
                let woken = appended.notified();
                tokio::pin!(woken);
                // Registered before the log is read: an entry that lands after the read wakes it.
                woken.as_mut().enable();
                let batch: Vec<LogEvent> = store
                    .lock()
                    .log
                    .range(next..)
                    .take(FOLLOW_BATCH)
                    .map(|(seq, held)| held_event(*seq, held))
                    .collect();
                drop(store);
                // Fewer than a batch: the log was read to its end, and the follower waits for more.
                let at_end = batch.len() < FOLLOW_BATCH;
                for event in batch {
                    let (LogEvent::Entry { seq, .. } | LogEvent::Unreadable { seq } | LogEvent::TooNew { seq, .. }) =
                        &event
                    else {
                        continue;
                    };
                    next = seq + 1;
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
                // The backlog is delivered once the follower is past its end, or has read the log to its end
                // (the end itself may have been purged meanwhile).
                if backlog_end.is_some_and(|end| next > end || at_end) {
                    backlog_end = None;
                    if tx.send(LogEvent::CaughtUp).await.is_err() {
                        return;
                    }
                }
                if backlog_end.is_none() && at_end {
                    tokio::select! {
                        _ = &mut woken => {}
                        _ = tx.closed() => return,
                    }
                }
            }
        });
        rx
    }

    /// Appends an event; with a data directory, the wait until it is durable.
    pub(super) fn append(&self, entry: LogEntry) -> Option<Durable> {
        self.lock().push(entry).1
    }

    pub(super) fn replay(&self, from: u64, to: u64) -> (u64, Vec<(u64, LogEntry)>) {
        let from = from.max(1);
        if from > to {
            return (to, Vec::new());
        }
        let entries =
            self.lock().log.range(from..=to).filter_map(|(s, e)| e.as_ref().ok().map(|e| (*s, e.clone()))).collect();
        (to, entries)
    }

    /// The data directory's writer, if there is one (a clone of its handle, so no lock is held while waiting).
    fn disk(&self) -> Option<DiskLog> {
        self.lock().disk.clone()
    }

    pub(super) async fn save_snapshot(&self, position: u64, bytes: SnapshotBytes) -> Result<(), String> {
        if let Some(disk) = self.disk() {
            return disk.save_snapshot(position, bytes).await;
        }
        let bytes = bytes.collect().await?;
        let mut inner = self.lock();
        inner.snapshots.insert(position, bytes);
        while inner.snapshots.len() > SNAPSHOTS_KEPT {
            inner.snapshots.pop_first();
        }
        Ok(())
    }

    pub(super) async fn latest_snapshot(&self) -> Result<Option<(u64, SnapshotBytes)>, String> {
        if let Some(disk) = self.disk() {
            let latest = disk.latest_snapshot().await?;
            return Ok(latest.map(|(p, b)| (p, SnapshotBytes::from_vec(b))));
        }
        Ok(self.lock().snapshots.last_key_value().map(|(p, b)| (*p, SnapshotBytes::from_vec(b.clone()))))
    }

    /// Drops the events below `below` from memory (the entries that do not decode too); with a data directory
    /// also deletes the segment files that hold nothing else (their epoch records kept).
    pub(super) async fn purge_events_below(&self, below: u64) -> Result<(), String> {
        let disk = {
            let mut inner = self.lock();
            let purged: Vec<u64> = inner
                .log
                .range(..below)
                .filter(|(_, e)| !matches!(e, Ok(LogEntry::Epoch(_))))
                .map(|(s, _)| *s)
                .collect();
            for seq in purged {
                inner.log.remove(&seq);
            }
            inner.disk.clone()
        };
        if let Some(disk) = disk {
            let Freed { segments, bytes } = disk.purge(below).await?;
            if segments > 0 {
                tracing::info!(
                    below,
                    segments,
                    bytes,
                    "log segments below the purge point deleted from the data directory"
                );
            }
        }
        Ok(())
    }

    /// A record and its revision, if there is one.
    pub fn record(&self, key: &str) -> Option<(Vec<u8>, u64)> {
        self.lock().records.get(key).cloned()
    }

    /// Writes a record only if it is at revision `expect` (`None`: only if there is none): its new revision,
    /// or `None` when it was not. With a data directory it answers once the record is durable.
    pub async fn write_record(&self, key: &str, value: Vec<u8>, expect: Option<u64>) -> Result<Option<u64>, String> {
        let (rev, durable) = {
            let mut inner = self.lock();
            if inner.records.get(key).map(|(_, rev)| *rev) != expect {
                return Ok(None);
            }
            inner.rev += 1;
            let rev = inner.rev;
            let durable = inner.disk.as_ref().map(|d| d.record(rev, key, &value));
            inner.records.insert(key.to_string(), (value, rev));
            (rev, durable)
        };
        if let Some(d) = durable {
            d.wait().await?;
        }
        Ok(Some(rev))
    }

    /// Appends `record` if the last epoch record is at `after_seq`; with a data directory it answers once the
    /// record is durable.
    pub(super) async fn propose(&self, record: &EpochRecord, after_seq: Option<u64>) -> Result<bool, String> {
        let durable = {
            // Check and append under one lock: the compare-and-set.
            let mut inner = self.lock();
            if inner.last_epoch_seq != after_seq {
                return Ok(false);
            }
            let (seq, durable) = inner.push(LogEntry::Epoch(record.clone()));
            inner.last_epoch_seq = Some(seq);
            durable
        };
        if let Some(d) = durable {
            d.wait().await?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::{Event, EventBody, MemberId, ObjectId, Time};

    fn member() -> MemberRef {
        MemberRef { id: MemberId::new("e1").unwrap(), incarnation: 1 }
    }

    fn epoch(n: u64) -> EpochRecord {
        EpochRecord { epoch: n, members: vec![member()], members_rev: 10 * n, idempotency_window_ms: None, format: 1 }
    }

    fn event(i: u64) -> LogEntry {
        LogEntry::Event(Event {
            object: ObjectId::new(format!("o{i}")).unwrap(),
            epoch: 1,
            writer: member(),
            at: Time::from_millis(i),
            command_id: None,
            body: EventBody::Ack,
        })
    }

    #[tokio::test]
    async fn a_purge_drops_the_events_from_memory_and_keeps_the_epoch_records() {
        let store = MemStore::start();
        assert!(store.propose(&epoch(1), None).await.unwrap());
        for i in 0..1000 {
            assert!(store.append(event(i)).is_none(), "in memory: nothing to wait for");
        }
        store.purge_events_below(900).await.unwrap();
        let inner = store.lock();
        assert_eq!(inner.log.len(), 1 + 102, "the epoch record and the events at 900..=1001");
        assert!(matches!(inner.log.first_key_value(), Some((1, Ok(LogEntry::Epoch(_))))));
    }

    /// Every event a follower has ready now, without waiting for more.
    fn ready(f: &mut mpsc::Receiver<LogEvent>) -> Vec<LogEvent> {
        std::iter::from_fn(|| f.try_recv().ok()).collect()
    }

    /// Lets the follower's task run until it waits (the test runtime is current-thread).
    async fn settle() {
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_follower_that_is_behind_holds_a_bounded_buffer_and_gets_every_entry_in_order() {
        let store = MemStore::start();
        assert!(store.propose(&epoch(1), None).await.unwrap());
        for i in 0..3000 {
            store.append(event(i));
        }
        let mut follower = store.follow_log(1);
        settle().await;
        // Not read: the follower holds at most its buffer; the rest stays in the log.
        assert_eq!(follower.len(), LOG_FOLLOWER_BUFFER, "a role that is behind does not hold the backlog");
        let mut seqs = Vec::new();
        let mut caught_up_at = None;
        while seqs.len() < 3001 + 500 {
            if seqs.len() == 3001 && caught_up_at.is_none() {
                // Appends after the backlog come after `CaughtUp`, read as they land.
                for i in 3000..3500 {
                    store.append(event(i));
                }
            }
            // A guard against a follower that stops with entries left (it did, once): fail saying where.
            let got = tokio::time::timeout(Duration::from_secs(60), follower.recv()).await;
            let Ok(got) = got else { panic!("stuck after {} entries (caught up at {caught_up_at:?})", seqs.len()) };
            match got.expect("the follower lives") {
                LogEvent::Entry { seq, .. } => seqs.push(seq),
                LogEvent::CaughtUp => caught_up_at = Some(seqs.len()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seqs, (1..=3501).collect::<Vec<_>>());
        assert_eq!(caught_up_at, Some(3001), "CaughtUp right after the backlog present when it was made");
        settle().await;
        assert!(ready(&mut follower).is_empty());
    }

    #[tokio::test]
    async fn a_follower_passes_over_what_was_purged_before_it_read_it_as_a_jump() {
        let store = MemStore::start();
        assert!(store.propose(&epoch(1), None).await.unwrap());
        for i in 0..3000 {
            store.append(event(i));
        }
        let mut follower = store.follow_log(1);
        settle().await;
        store.purge_events_below(2500).await.unwrap();
        let mut seqs = Vec::new();
        loop {
            match follower.recv().await.expect("the follower lives") {
                LogEvent::Entry { seq, .. } => seqs.push(seq),
                LogEvent::CaughtUp => break,
                other => panic!("{other:?}"),
            }
        }
        // What it held already, then a jump to what the purge left.
        let held = seqs.iter().take_while(|s| **s < 2500).count();
        assert!((LOG_FOLLOWER_BUFFER..2500).contains(&held), "{held}");
        assert_eq!(seqs[..held], (1..=held as u64).collect::<Vec<_>>());
        assert_eq!(seqs[held..], (2500..=3001).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_follower_dropped_ends_its_task() {
        let store = MemStore::start();
        let appended = store.lock().appended.clone();
        let follower = store.follow_log(1);
        settle().await;
        assert_eq!(Arc::strong_count(&store), 1, "the task holds no strong reference to the store while it waits");
        assert_eq!(Arc::strong_count(&appended), 3, "the store's, this test's and the waiting task's");
        drop(follower);
        settle().await;
        assert_eq!(Arc::strong_count(&appended), 2, "the task is gone");
    }

    #[tokio::test]
    async fn with_a_data_dir_a_follower_gets_only_what_is_on_disk_and_a_restart_reads_it_back() {
        let tmp = tempfile::tempdir().unwrap();
        let store = MemStore::start_on(DataDir::open(tmp.path()).unwrap());
        let mut follower = store.follow_log(1);
        assert!(matches!(follower.recv().await, Some(LogEvent::CaughtUp)));
        assert!(store.propose(&epoch(1), None).await.unwrap());
        for i in 0..200 {
            let _ = store.append(event(i));
        }
        let on_disk = || {
            let dir = tmp.path().join("log");
            fs_bytes(&dir)
        };
        for _ in 0..201 {
            let Some(LogEvent::Entry { seq, entry }) = follower.recv().await else { panic!("an entry") };
            let bytes = wire::encode(&entry);
            let disk = on_disk();
            assert!(
                disk.windows(bytes.len() + 8).any(|w| w[..8] == seq.to_le_bytes() && w[8..] == bytes[..]),
                "entry {seq} was delivered before it was on disk"
            );
        }
        assert_eq!(store.write_record("notify.k", b"v".to_vec(), None).await.unwrap(), Some(1));
        store.close().await;
        drop(store);

        let store = MemStore::start_on(DataDir::open(tmp.path()).unwrap());
        assert_eq!(store.lock().log.len(), 201);
        assert_eq!(store.record("notify.k"), Some((b"v".to_vec(), 1)));
        store.put(Bucket::Engine, &member(), Duration::from_secs(10));
        assert!(
            store.lock().keys.values().all(|(_, _, rev)| *rev > 10),
            "membership revisions continue above the records' and the epoch records', so a new incarnation may \
             propose"
        );
        assert!(!store.propose(&epoch(2), None).await.unwrap(), "the compare-and-set is against the last record");
        assert!(store.propose(&epoch(2), Some(1)).await.unwrap());
        assert!(store.write_record("notify.k", b"w".to_vec(), Some(1)).await.unwrap().is_some());
        store.close().await;
    }

    fn fs_bytes(dir: &std::path::Path) -> Vec<u8> {
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files.iter().flat_map(|p| std::fs::read(p).unwrap()).collect()
    }
}
