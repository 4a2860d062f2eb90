//! What the scripted worlds of the log-reading roles (sink, notifier) share: one bucket's membership store with
//! revisions and TTLs, and a log built by hand with the fence's rules in view (events by an epoch's owner, and
//! fenced ones by a member that is not), read back by an independent reader.
#![allow(dead_code)]

use jaque_core::hrw::Ownership;
use jaque_core::log::Read;
use jaque_core::*;
use std::collections::BTreeMap;
use std::time::Duration;

pub fn member(id: &str, inc: u64) -> MemberRef {
    MemberRef { id: MemberId::new(id).unwrap(), incarnation: inc }
}

pub fn oid(i: usize) -> ObjectId {
    ObjectId::new(format!("obj-{i}")).unwrap()
}

pub fn def() -> ObjectDef {
    ObjectDef {
        probe: Probe::Tcp { addr: "127.0.0.1:9".into() },
        interval_ms: 1000,
        timeout_ms: 500,
        ..ObjectDef::UNSET
    }
}

pub fn transition(to: State) -> EventBody {
    EventBody::transition(State::Pending, to, format!("now {}", to.as_str()))
}

/// One membership bucket as NATS KV keeps it: revisions 1, 2, …, each a change every watcher sees in order.
#[derive(Default)]
pub struct Kv {
    pub rev: u64,
    /// id -> (incarnation, expires at)
    pub keys: BTreeMap<String, (u64, Time)>,
    /// Every membership change with its revision, in order. Revisions without a change here belong to the other
    /// keys of the same bucket (the notifier's progress records).
    pub changes: Vec<(u64, MemberChange)>,
}

impl Kv {
    fn change(&mut self, change: MemberChange) {
        self.rev += 1;
        self.changes.push((self.rev, change));
    }

    /// The next revision, for a write to another key of the bucket.
    pub fn next_rev(&mut self) -> u64 {
        self.rev += 1;
        self.rev
    }

    pub fn put(&mut self, member: MemberRef, ttl: Duration, now: Time) {
        self.keys.insert(member.id.to_string(), (member.incarnation, now + ttl));
        self.change(MemberChange::Up(member));
    }

    /// A clean leave deletes the key, if it is still this incarnation's.
    pub fn delete(&mut self, member: &MemberRef) {
        if self.keys.get(member.id.as_str()).is_some_and(|(i, _)| *i == member.incarnation) {
            self.keys.remove(member.id.as_str());
            self.change(MemberChange::Down(member.id.clone()));
        }
    }

    pub fn expire(&mut self, now: Time) {
        let expired: Vec<String> = self.keys.iter().filter(|(_, (_, t))| *t <= now).map(|(k, _)| k.clone()).collect();
        for k in expired {
            self.keys.remove(&k);
            self.change(MemberChange::Down(MemberId::new(k).unwrap()));
        }
    }

    pub fn next_expiry(&self) -> Option<Time> {
        self.keys.values().map(|(_, t)| *t).min()
    }

    /// The observations a watcher that has seen up to `rev` gets next.
    pub fn since(&self, rev: u64, bucket: Bucket) -> Vec<MemberObservation> {
        let from = self.changes.partition_point(|(r, _)| *r <= rev);
        self.changes[from..].iter().map(|(r, c)| MemberObservation::new(bucket, *r, c.clone())).collect()
    }
}

/// The log, built entry by entry.
#[derive(Default)]
pub struct TestLog {
    pub entries: Vec<LogEntry>,
    /// Events below this position are purged (epoch records stay), as a compaction leaves the log.
    pub purged_below: u64,
}

impl TestLog {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry at `seq`, unless it was purged.
    pub fn get(&self, seq: u64) -> Option<&LogEntry> {
        let e = self.entries.get(usize::try_from(seq).ok()?.checked_sub(1)?)?;
        (seq >= self.purged_below || matches!(e, LogEntry::Epoch(_))).then_some(e)
    }

    /// A snapshot of the whole log as it stands, as the snapshot writer would store one (read before any purge).
    pub fn snapshot(&self) -> LogReader {
        let mut reader = LogReader::new();
        for (i, e) in self.entries.iter().enumerate() {
            reader.read(i as u64 + 1, e);
        }
        reader
    }

    /// The entries at `from..=to` that exist, and how far that reached.
    pub fn range(&self, from: u64, to: u64) -> (u64, Vec<(u64, LogEntry)>) {
        let entries = (from..=to).filter_map(|s| self.get(s).map(|e| (s, e.clone()))).collect();
        (to.min(self.len() as u64), entries)
    }

    pub fn epoch_now(&self) -> u64 {
        self.entries.iter().filter(|e| matches!(e, LogEntry::Epoch(_))).count() as u64
    }

    /// Appends the next epoch record, engines named by id (incarnation 1), and returns its ownership.
    pub fn epoch(&mut self, engines: &[&str]) -> Ownership {
        let epoch = self.epoch_now() + 1;
        let members: Vec<MemberRef> = engines.iter().map(|e| member(e, 1)).collect();
        self.entries.push(LogEntry::Epoch(EpochRecord {
            epoch,
            members: members.clone(),
            members_rev: epoch,
            idempotency_window_ms: None,
            format: 1,
        }));
        Ownership::new(&members)
    }

    /// An event on object `i` by its owner under `own`, or by `writer` (a fenced write when it is not the owner).
    pub fn event(&mut self, own: &Ownership, i: usize, body: EventBody, writer: Option<&str>, at: Time) {
        let object = oid(i);
        let writer = match writer {
            Some(w) => member(w, 1),
            None => own.owner(&object).unwrap().clone(),
        };
        let epoch = self.epoch_now();
        self.entries.push(LogEntry::Event(Event { object, epoch, writer, at, command_id: None, body }));
    }

    /// The accepted events, as an independent reader judges them: position -> event.
    pub fn accepted(&self) -> BTreeMap<u64, Event> {
        let mut reader = LogReader::new();
        let mut out = BTreeMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            let seq = i as u64 + 1;
            if let Read::Event { verdict: Verdict::Accepted, .. } = reader.read(seq, e) {
                let LogEntry::Event(ev) = e else { unreachable!("events read as events") };
                out.insert(seq, ev.clone());
            }
        }
        out
    }

    /// The positions of fenced events.
    pub fn fenced(&self) -> Vec<u64> {
        let accepted = self.accepted();
        (1..=self.len() as u64)
            .filter(|s| matches!(self.get(*s), Some(LogEntry::Event(_))) && !accepted.contains_key(s))
            .collect()
    }
}
