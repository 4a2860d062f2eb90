//! A member that follows the log: the lifecycle every log-reading role shares (engine, sink, notifier). It is
//! a member of its own bucket (heartbeat every ttl/3, a clean leave deletes the key) and folds the log with the
//! same `LogReader` as every other reader, so its verdicts are the engines'. It starts once, is caught up once
//! the log backlog and the membership snapshot present at start have been delivered, and stays left after
//! leaving. The roles put their own decisions on top.

use crate::log::{LogReader, Read};
use crate::membership::{MemberObservation, Membership, MembershipOutput};
use crate::model::{Bucket, LogEntry, MemberRef};
use crate::time::Time;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Follower {
    membership: Membership,
    reader: LogReader,
    started: bool,
    caught_up: bool,
}

impl Follower {
    pub fn new(bucket: Bucket, me: MemberRef, ttl: Duration) -> Follower {
        Follower {
            membership: Membership::new(bucket, me, ttl),
            reader: LogReader::new(),
            started: false,
            caught_up: false,
        }
    }

    // ---- getters ----

    pub fn me(&self) -> &MemberRef {
        self.membership.me()
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn reader(&self) -> &LogReader {
        &self.reader
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

    // ---- inputs ----

    /// Joins the bucket, once: a restart is a new follower with a new incarnation, and a left one stays left.
    /// Returns whether this call joined.
    pub fn start(&mut self, now: Time) -> bool {
        if self.started || self.membership.is_leaving() {
            return false;
        }
        self.started = true;
        self.membership.join(now);
        true
    }

    /// The backlog and the membership snapshot are in. Returns whether this is the first time.
    pub fn catch_up(&mut self) -> bool {
        !std::mem::replace(&mut self.caught_up, true)
    }

    /// A membership observation (any bucket; only ours counts). Returns whether our bucket's live set changed.
    pub fn observe(&mut self, now: Time, obs: &MemberObservation) -> bool {
        self.membership.handle_observation(now, obs)
    }

    /// Reads the entry at log position `seq`.
    pub fn read(&mut self, seq: u64, entry: &LogEntry) -> Read {
        self.reader.read(seq, entry)
    }

    /// Leaves the bucket: the key is deleted at once and no longer refreshed.
    pub fn leave(&mut self) {
        self.membership.leave();
    }

    /// Returns whether a heartbeat was due (the periodic moment roles use to retry what they missed).
    pub fn handle_timeout(&mut self, now: Time) -> bool {
        let due = self.membership.poll_timeout().is_some_and(|t| t <= now);
        self.membership.handle_timeout(now);
        due
    }

    // ---- outputs ----

    #[must_use]
    pub fn poll_timeout(&self) -> Option<Time> {
        self.membership.poll_timeout()
    }

    #[must_use]
    pub fn poll_membership(&mut self) -> Option<MembershipOutput> {
        self.membership.poll_output()
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
    fn caught_up_once() {
        let mut f = Follower::new(Bucket::Notifier, me(), Duration::from_secs(9));
        assert!(!f.is_caught_up());
        assert!(f.catch_up());
        assert!(!f.catch_up());
        assert!(f.is_caught_up());
    }
}
