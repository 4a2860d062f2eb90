//! A member that follows the log: the lifecycle every log-reading role shares (engine, sink, notifier). It is
//! a member of its own bucket (heartbeat every ttl/3, a clean leave deletes the key) and folds the log with the
//! same `LogReader` as every other reader, so its verdicts are the engines'. It starts once, is caught up once
//! the log backlog and the membership snapshot present at start have been delivered, and stays left after
//! leaving. The roles put their own decisions on top.

use crate::log::{LogReader, Read};
use crate::membership::{Lease, LiveSet, MemberObservation, Membership, MembershipOutput};
use crate::model::{Bucket, LogEntry, MemberRef};
use crate::time::Time;
use std::collections::BTreeMap;
use std::time::Duration;

/// The log as one reader follows it: its `LogReader`, and the hole it waits to jump past when the log has
/// purged events it had not read. Every reader keeps one (the ui's reader on its own, members in `Follower`).
#[derive(Clone, Debug, Default)]
pub struct Tail {
    reader: LogReader,
    hole: Option<u64>,
    /// The highest position handed in, read or not (past a hole, entries are handed in and not read).
    reached: u64,
}

impl Tail {
    pub fn new(reader: LogReader) -> Tail {
        Tail { reader, hole: None, reached: 0 }
    }

    pub fn reader(&self) -> &LogReader {
        &self.reader
    }

    /// Reads the entry at log position `seq`. An entry past a hole is not read: the reader waits for a
    /// snapshot that reaches past the hole (`hole`, `restore`).
    pub fn read(&mut self, seq: u64, entry: &LogEntry) -> Read {
        let read = self.reader.read(seq, entry);
        self.note(seq, &read);
        read
    }

    /// Passes over the entry at `seq`, which could not be decoded (`LogReader::skip`).
    pub fn skip(&mut self, seq: u64) -> Read {
        let read = self.reader.skip(seq);
        self.note(seq, &read);
        read
    }

    /// Reads the entry at `seq`, which did not decode and says it needs cluster format `needs`
    /// (`LogReader::read_too_new`).
    pub fn read_too_new(&mut self, seq: u64, needs: u32) -> Read {
        let read = self.reader.read_too_new(seq, needs);
        self.note(seq, &read);
        read
    }

    /// Why this reader stopped for good, if it did (`LogReader::blocked_reason`).
    pub fn blocked_reason(&self) -> Option<String> {
        self.reader.blocked_reason()
    }

    /// How far the log is known to reach: the highest position handed in, read or not (waiting at a hole, the
    /// reader's own position is behind where the log stands).
    pub fn reached(&self) -> u64 {
        self.reached.max(self.reader.position())
    }

    fn note(&mut self, seq: u64, read: &Read) {
        self.reached = self.reached.max(seq);
        if let Read::Gap { got, .. } = read {
            self.hole.get_or_insert(got - 1);
        }
    }

    /// The position a snapshot has to reach for this reader to read past a hole in the log, while it waits
    /// for one.
    pub fn hole(&self) -> Option<u64> {
        self.hole
    }

    /// Takes a reader restored from a snapshot, if it is ahead of this one; returns whether it did. The hole is
    /// left behind once the snapshot reaches past it; the driver then follows the log from after its position.
    pub fn restore(&mut self, reader: LogReader) -> bool {
        if reader.position() <= self.reader.position() {
            return false;
        }
        self.reader = reader;
        if self.hole.is_some_and(|h| self.reader.position() >= h) {
            self.hole = None;
        }
        true
    }
}

/// The inputs of a member's life, the same for every role that follows the log (engine, sink, notifier): each
/// role's input enum carries them as `Input::Life`, so a driver hands them in one way whatever the role
/// (`docs/adding-a-role.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Life {
    /// Begin: join the bucket. Once: a restart is a new machine with a new incarnation, and a left one stays
    /// left.
    Start,
    /// The log backlog and the membership snapshot present at start have been delivered.
    CaughtUp,
    /// A membership observation (any bucket; only the member's own counts).
    Member(MemberObservation),
    Log {
        seq: u64,
        entry: LogEntry,
    },
    /// The entry at this log position could not be decoded: passed over by every reader alike.
    LogUnreadable {
        seq: u64,
    },
    /// The entry at this log position did not decode and says it needs cluster format `needs`, newer than this
    /// build's (`wire::WireError::TooNew`): passed over where the cluster had not allowed that format, this
    /// reader's stop where it had (`LogReader::read_too_new`).
    LogTooNew {
        seq: u64,
        needs: u32,
    },
    /// A reader restored from a stored snapshot (the one a process starts from, or the latest, loaded after
    /// `NeedSnapshot`): taken if it is ahead of this member's; the driver then follows the log from the
    /// position after it.
    Restore(Box<LogReader>),
    /// The oldest `PutHeartbeat` not answered yet reached the store (`ok`) or failed: the driver answers every
    /// put once, in order. The member's lease (`Follower::lease`) rests on these.
    HeartbeatWritten {
        ok: bool,
    },
    /// Leave the bucket cleanly (SIGTERM): the role finishes or gives back what it must, deletes its key and
    /// then says `is_done()`; the driver exits on that alone.
    Leave,
}

/// What a member's life asks of its driver, the same for every role: each role's output enum carries it as
/// `Output::Life`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LifeOutput {
    /// Put or delete the member's heartbeat key (answer each put with `Life::HeartbeatWritten`).
    Membership(MembershipOutput),
    /// The log has a hole this member cannot read past (purged events it had not read): load the latest
    /// snapshot (at `covering` or later) and hand it in as `Life::Restore`. Asked again at every heartbeat while
    /// the hole is there.
    NeedSnapshot { covering: u64 },
}

#[derive(Clone, Debug)]
pub struct Follower {
    membership: Membership,
    tail: Tail,
    started: bool,
    caught_up: bool,
    /// Held while a heartbeat the store acknowledged was sent within its span (the ttl unless the role says).
    lease: Lease,
    /// The time of the latest input that may have made a heartbeat put: when the put goes out.
    now: Time,
    /// Every bucket's live members with the cluster format each speaks (the cluster's active format is the
    /// lowest of them: `lowest_format`).
    buckets: BTreeMap<Bucket, LiveSet>,
}

impl Follower {
    pub fn new(bucket: Bucket, me: MemberRef, ttl: Duration) -> Follower {
        Follower::with_reader(bucket, me, ttl, LogReader::new())
    }

    /// A follower whose reader starts from a snapshot.
    pub fn with_reader(bucket: Bucket, me: MemberRef, ttl: Duration, reader: LogReader) -> Follower {
        Follower {
            membership: Membership::new(bucket, me, ttl),
            tail: Tail::new(reader),
            started: false,
            caught_up: false,
            lease: Lease::new(ttl),
            now: Time::ZERO,
            buckets: BTreeMap::new(),
        }
    }

    /// The same, with a lease of `span` instead of the ttl.
    pub fn with_lease_span(mut self, span: Duration) -> Follower {
        self.lease = Lease::new(span);
        self
    }

    // ---- getters ----

    pub fn me(&self) -> &MemberRef {
        self.membership.me()
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn reader(&self) -> &LogReader {
        self.tail.reader()
    }

    pub fn is_started(&self) -> bool {
        self.started
    }

    pub fn is_caught_up(&self) -> bool {
        self.caught_up
    }

    pub fn is_leaving(&self) -> bool {
        self.membership.is_leaving()
    }

    /// Whether this member's own key is surely alive (see `Lease`).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    // ---- inputs ----

    /// Joins the bucket, once: a restart is a new follower with a new incarnation, and a left one stays left.
    /// Returns whether this call joined.
    pub fn start(&mut self, now: Time) -> bool {
        if self.started || self.membership.is_leaving() {
            return false;
        }
        self.started = true;
        self.now = now;
        self.membership.join(now);
        true
    }

    /// The backlog and the membership snapshot are in. Returns whether this is the first time.
    pub fn catch_up(&mut self) -> bool {
        !std::mem::replace(&mut self.caught_up, true)
    }

    /// A membership observation (any bucket; only ours counts). Returns whether our bucket's live set changed.
    pub fn observe(&mut self, now: Time, obs: &MemberObservation) -> bool {
        self.now = now;
        self.buckets.entry(obs.bucket).or_default().observe(obs);
        self.membership.handle_observation(now, obs)
    }

    /// The lowest cluster format any live member of any bucket speaks, as the watch reported them (`None`:
    /// none is live).
    pub fn lowest_format(&self) -> Option<u32> {
        self.buckets.values().filter_map(LiveSet::lowest_format).min()
    }

    /// See `Tail::read_too_new`.
    pub fn read_too_new(&mut self, seq: u64, needs: u32) -> Read {
        self.tail.read_too_new(seq, needs)
    }

    /// See `Tail::blocked_reason`.
    pub fn blocked_reason(&self) -> Option<String> {
        self.tail.blocked_reason()
    }

    /// Reads the entry at log position `seq` (see `Tail::read`).
    pub fn read(&mut self, seq: u64, entry: &LogEntry) -> Read {
        self.tail.read(seq, entry)
    }

    /// Passes over the entry at `seq`, which could not be decoded.
    pub fn skip(&mut self, seq: u64) -> Read {
        self.tail.skip(seq)
    }

    /// See `Tail::hole`.
    pub fn hole(&self) -> Option<u64> {
        self.tail.hole()
    }

    /// See `Tail::reached`.
    pub fn reached(&self) -> u64 {
        self.tail.reached()
    }

    /// See `Tail::restore`.
    pub fn restore(&mut self, reader: LogReader) -> bool {
        self.tail.restore(reader)
    }

    /// Leaves the bucket: the key is deleted at once and no longer refreshed.
    pub fn leave(&mut self) {
        self.membership.leave();
    }

    /// Returns whether a heartbeat was due (the periodic moment roles use to retry what they missed).
    pub fn handle_timeout(&mut self, now: Time) -> bool {
        self.now = now;
        let due = self.membership.poll_timeout().is_some_and(|t| t <= now);
        self.membership.handle_timeout(now);
        due
    }

    /// The oldest heartbeat put not answered yet was written (`ok`) or failed.
    pub fn heartbeat_written(&mut self, ok: bool) {
        self.lease.written(ok);
    }

    // ---- outputs ----

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Time> {
        self.membership.poll_timeout()
    }

    #[must_use]
    pub fn poll_membership(&mut self) -> Option<MembershipOutput> {
        let out = self.membership.poll_output();
        if let Some(MembershipOutput::PutHeartbeat { .. }) = &out {
            self.lease.sent(self.now);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemberId;

    fn me() -> MemberRef {
        MemberRef { id: MemberId::new("s1").unwrap(), incarnation: 3 }
    }

    #[test]
    fn starts_once_and_stays_left() {
        let mut f = Follower::new(Bucket::Sink, me(), Duration::from_secs(9));
        assert!(f.start(Time(0)));
        assert!(matches!(f.poll_membership(), Some(MembershipOutput::PutHeartbeat { bucket: Bucket::Sink, .. })));
        assert!(!f.start(Time(1)), "a second start is ignored");
        f.leave();
        assert!(matches!(f.poll_membership(), Some(MembershipOutput::DeleteHeartbeat { .. })));
        let mut g = Follower::new(Bucket::Sink, me(), Duration::from_secs(9));
        g.leave();
        assert!(!g.start(Time(0)), "a follower that left before starting never joins");
    }

    #[test]
    fn its_lease_runs_from_the_emission_of_each_heartbeat_the_store_acknowledged() {
        let ttl = Duration::from_secs(9);
        let mut f = Follower::new(Bucket::Engine, me(), ttl).with_lease_span(Duration::from_secs(6));
        assert!(f.start(Time(1_000)));
        assert!(matches!(f.poll_membership(), Some(MembershipOutput::PutHeartbeat { .. })));
        assert!(!f.lease().holds(Time(1_000)), "nothing is acknowledged yet");
        f.heartbeat_written(true);
        assert!(f.lease().holds(Time(6_999)));
        assert!(!f.lease().holds(Time(7_000)), "the span runs from when the put went out, not from the answer");
        // The next heartbeat goes out when the timer says; it fails: the lease is not extended.
        let due = f.poll_timeout().expect("a heartbeat timer");
        assert!(f.handle_timeout(due));
        assert!(matches!(f.poll_membership(), Some(MembershipOutput::PutHeartbeat { .. })));
        f.heartbeat_written(false);
        assert_eq!(f.lease().until(), Some(Time(7_000)));
        // The one after it is written: held again from its emission.
        let next = f.poll_timeout().expect("a heartbeat timer");
        assert!(f.handle_timeout(next));
        assert!(matches!(f.poll_membership(), Some(MembershipOutput::PutHeartbeat { .. })));
        f.heartbeat_written(true);
        assert_eq!(f.lease().until(), Some(next + Duration::from_secs(6)));
    }

    #[test]
    fn caught_up_once() {
        let mut f = Follower::new(Bucket::Notifier, me(), Duration::from_secs(9));
        assert!(!f.is_caught_up());
        assert!(f.catch_up());
        assert!(!f.catch_up());
        assert!(f.is_caught_up());
    }
}
