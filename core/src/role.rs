//! The machinery both roles that act on the log share (sink, notifier): a member of its own bucket that follows
//! the log, owns objects by HRW over its bucket's live members (its own view: these buckets have no epoch
//! records, and none is needed, because what they write is idempotent per log position), and hands the role
//! every **accepted** event of the objects it owns, in log order per object.
//!
//! Gaining an object (at start, on a membership change, or after the role dropped work it could not hold) is a
//! **resume**: the role's store is asked what it has for each gained object (its last log position), the log
//! is read again from the oldest such position up to where this member stood when it gained them, and the
//! events past the store's position come out, judged where they stand (`LogReader::verdict_at`), so nothing
//! the previous owner had not stored is skipped. Events of a resuming object that arrive meanwhile are held and
//! come out after the replay, so per object the role always sees positions in order. Held events are bounded:
//! past `max_held`, they are dropped and the resume's end moves up to the current position (the replay then
//! reads them again), so memory stays bounded however long the store is away. The log is the buffer.
//!
//! Driving it: `handle_*` for each input, then `drive(now, room)` (whether the role can take more work now),
//! then drain `take_work()` and `poll_output()`, and re-arm the timer from `poll_timeout()`.

use crate::backoff::Backoff;
use crate::follow::{Follower, Life, LifeOutput};
use crate::hrw::{self, Ownership};
use crate::io::IoError;
use crate::log::{LogReader, ObjectView, Read};
use crate::membership::{MemberObservation, Membership};
use crate::model::{Bucket, Event, LogEntry, MemberRef, ObjectId};
use crate::time::Time;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Whether a process in a role that follows the log may serve (`/healthz`), and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub ready: bool,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct RoleConfig {
    pub bucket: Bucket,
    pub me: MemberRef,
    /// `-heartbeat-ttl`.
    pub ttl: Duration,
    /// How long after a heartbeat the store acknowledged the member's key is surely alive (`Follower::lease`):
    /// the ttl unless the role needs a margin.
    pub lease_span: Duration,
    /// Log entries read per replay request.
    pub replay_chunk: u64,
    /// Events of resuming objects held while their replay runs; past this they are read again instead.
    pub max_held: usize,
    /// Retries of a progress query or a replay read: the first after `retry_base`, doubling to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// The cluster format the member's reader speaks: this build's (the simulator runs older builds' members).
    pub speaks: u32,
}

impl RoleConfig {
    pub fn new(bucket: Bucket, me: MemberRef, ttl: Duration) -> RoleConfig {
        RoleConfig {
            bucket,
            me,
            ttl,
            lease_span: ttl,
            replay_chunk: 1000,
            max_held: 10_000,
            retry_base: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            speaks: crate::format::CLUSTER_FORMAT,
        }
    }
}

/// What the role asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoleOutput {
    Life(LifeOutput),
    /// Ask the role's store, for each object, the last log position it holds for it (0: nothing). Answer with
    /// `handle_progress`.
    QueryProgress {
        token: u64,
        objects: Vec<ObjectId>,
    },
    /// Read the log's entries at positions `from..=to` again and hand them back with `handle_replayed` (all of
    /// them, or the first ones with `upto` saying how far it got).
    Replay {
        token: u64,
        from: u64,
        to: u64,
    },
}

/// An accepted event of an object this member owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    pub seq: u64,
    pub event: Event,
    pub after: After,
}

/// What is known of the object right after the event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum After {
    /// Read live: the object as the log says it is right after this event (`None`: deleted), shared with the
    /// reader (a reference count, not a copy of the view).
    Live(Option<Arc<ObjectView>>),
    /// Read again by a replay: the object's state there is not at hand.
    Replayed,
}

/// The role's work, in order.
// Most work is events: boxing them would cost an allocation each to shrink the rare `Resumed`.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    Event(Owned),
    /// A resume's replay is done: every event of these objects up to `at` has come out. Each object with its
    /// last accepted position; none has an accepted event after `at`, so the reader's view of it (`LogReader::
    /// object`, `None`: deleted) is the one at `at` until the next log entry is read: take this work before that
    /// (it is not copied here, a million views for a resume of a million objects). Objects with held events
    /// after `at` are not listed: their held events follow, each with its own view.
    Resumed {
        at: u64,
        objects: Vec<(ObjectId, u64)>,
        /// Objects the store was behind on whose events may have been purged from the log before this member
        /// could hand them out (it, or the object's previous owner, lagged past `-log-retention`): `(object,
        /// stored, last)`, some events after `stored` up to `last` are gone. Their current state is still in
        /// `objects`.
        lost: Vec<(ObjectId, u64, u64)>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RoleTimer {
    Heartbeat,
    ResumeRetry,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleCounters {
    pub resumes_started: u64,
    pub resumes_done: u64,
    pub progress_queries: u64,
    pub replay_reads: u64,
    pub replayed_events: u64,
    /// Store or log failures of a resume, retried after a backoff.
    pub resume_retries: u64,
    /// Times held events were dropped to be read again (the store was away for long).
    pub held_dropped: u64,
    /// Holes found in the log while following it live (each asks for a snapshot).
    pub log_gaps: u64,
    /// Jumps to a snapshot past a hole.
    pub restores: u64,
    /// Objects a resume found with accepted events already purged from the log (see `Work::Resumed::lost`),
    /// counted as each is found, and again if its range grows while the resume runs (`history_lost`).
    pub objects_lost_history: u64,
}

/// How many of the latest objects with lost history a member keeps at hand (`LogRole::history_lost`).
pub const HISTORY_LOST_KEPT: usize = 256;

#[derive(Clone, Debug)]
enum Stage {
    /// Waiting for its turn or for a retry: the progress query goes out when it is first in line.
    Waiting,
    Querying,
    /// Reading the log again from `next`; `need` is each object's position in the store (events past it come
    /// out), `asked` whether a read is out.
    Replaying {
        /// Sorted by object (see `Resume::objects`).
        need: Vec<(ObjectId, u64)>,
        next: u64,
        asked: bool,
        /// The highest position the replay found missing from the log (0: none). Positions never skip in a
        /// log nobody purged, so an object the store is behind on whose range reaches past a missing position
        /// may have lost events to a purge.
        missing_upto: u64,
        /// The objects said to have lost history so far (`object, stored, last`), each as soon as the hole
        /// was found: before any event past it is handed out, so a member that stops before the resume ends
        /// has said it already (the next resume starts after what the store holds, past the hole).
        lost: Vec<(ObjectId, u64, u64)>,
    },
}

#[derive(Clone, Debug)]
struct Resume {
    token: u64,
    /// Each gained object with its last accepted position at or below `at`, sorted by object: a sorted list
    /// rather than a map, since a resume may take on every object (a million at start) and is only walked in
    /// order or searched; one allocation, given back whole when the resume ends.
    objects: Vec<(ObjectId, u64)>,
    /// The position this member had read when it gained them: the replay's end.
    at: u64,
    held: Vec<Owned>,
    stage: Stage,
}

pub struct LogRole {
    cfg: RoleConfig,
    follow: Follower,
    /// HRW over this member's view of its bucket.
    owners: Ownership,
    resumes: VecDeque<Resume>,
    next_token: u64,
    work: VecDeque<Work>,
    outputs: VecDeque<RoleOutput>,
    retry_at: Option<Time>,
    backoff: Backoff,
    /// The latest `Work::Resumed::lost` entries, oldest first (see `history_lost`).
    history_lost: VecDeque<(ObjectId, u64, u64)>,
    pub counters: RoleCounters,
}

/// The position of `id` in a list sorted by object (`Resume::objects`, `Stage::Replaying::need`).
fn lookup(list: &[(ObjectId, u64)], id: &ObjectId) -> Option<u64> {
    list.binary_search_by(|(o, _)| o.cmp(id)).ok().map(|i| list[i].1)
}

/// A resume now ends at `position`: its held events are dropped (its replay reads them again), and an object
/// the store already had complete has to be read again past its old end too.
fn extend_resume(r: &mut Resume, position: u64, reader: &LogReader) {
    r.held.clear();
    r.at = position;
    if let Stage::Replaying { need, .. } = &mut r.stage {
        // Every object not needed yet is needed from its old end: both lists are sorted, so merge them.
        let mut have = std::mem::take(need).into_iter().peekable();
        for (id, last) in &r.objects {
            while let Some(other) = have.next_if(|(o, _)| o < id) {
                need.push(other);
            }
            need.push(have.next_if(|(o, _)| o == id).unwrap_or_else(|| (id.clone(), *last)));
        }
        need.extend(have);
    }
    for (id, last) in r.objects.iter_mut() {
        *last = reader.last_accepted_of(id).unwrap_or(*last);
    }
}

impl LogRole {
    pub fn new(cfg: RoleConfig) -> LogRole {
        LogRole::with_reader(cfg, LogReader::new())
    }

    /// A member whose reader starts from a snapshot: the driver follows the log from after its position. The
    /// objects it knows are every object with an accepted event before it, deleted ones too
    /// (`LogReader::last_accepted`), so it resumes whatever the store may lack of them.
    pub fn with_reader(cfg: RoleConfig, reader: LogReader) -> LogRole {
        let salt = hrw::key(cfg.me.id.as_str()) ^ cfg.me.incarnation;
        LogRole {
            follow: Follower::with_reader(cfg.bucket, cfg.me.clone(), cfg.ttl, reader.speaking(cfg.speaks))
                .with_lease_span(cfg.lease_span),
            backoff: Backoff::new(cfg.retry_base, cfg.retry_max, salt),
            cfg,
            owners: Ownership::default(),
            resumes: VecDeque::new(),
            next_token: 0,
            work: VecDeque::new(),
            outputs: VecDeque::new(),
            retry_at: None,
            history_lost: VecDeque::new(),
            counters: RoleCounters::default(),
        }
    }

    // ---- getters ----

    /// Every object id with an accepted event, deleted ones too (within the reader's tombstone horizon): a
    /// gained object whose delete its previous owner never stored must still be resumed.
    fn known(&self) -> impl Iterator<Item = &ObjectId> {
        self.follow.reader().last_accepted().map(|(id, _)| id)
    }

    pub fn me(&self) -> &MemberRef {
        &self.cfg.me
    }

    pub fn config(&self) -> &RoleConfig {
        &self.cfg
    }

    pub fn reader(&self) -> &LogReader {
        self.follow.reader()
    }

    pub fn membership(&self) -> &Membership {
        self.follow.membership()
    }

    pub fn is_caught_up(&self) -> bool {
        self.follow.is_caught_up()
    }

    pub fn is_leaving(&self) -> bool {
        self.follow.is_leaving()
    }

    /// Whether this member's own key is surely alive at `now` (a heartbeat the store acknowledged went out
    /// within `RoleConfig::lease_span`).
    pub fn lease_holds(&self, now: Time) -> bool {
        self.follow.lease().holds(now)
    }

    /// Whether this member owns `object` under its view of its bucket (and is not leaving).
    pub fn owns(&self, object: &ObjectId) -> bool {
        !self.follow.is_leaving() && self.owners.is_owner(hrw::key(object.as_str()), &self.cfg.me)
    }

    /// The owner of `object` under this member's view of its bucket.
    pub fn owner(&self, object: &ObjectId) -> Option<&MemberRef> {
        self.owners.owner(object)
    }

    /// Objects in the log that this member owns.
    pub fn owned_count(&self) -> usize {
        if self.follow.is_leaving() {
            return 0;
        }
        self.reader().objects().values().filter(|v| self.owners.is_owner(v.key, &self.cfg.me)).count()
    }

    /// A resume is running or waiting: some gained objects are not caught up in the store yet.
    pub fn is_resuming(&self) -> bool {
        !self.resumes.is_empty()
    }

    /// Where the running resume's replay stands (the next position it reads), once it knows from the store
    /// where to begin.
    pub fn replaying_from(&self) -> Option<u64> {
        self.resumes.front().and_then(|r| match &r.stage {
            Stage::Replaying { next, .. } => Some(*next),
            _ => None,
        })
    }

    // ---- inputs ----

    /// An input of the member's life, as a role that embeds a `LogRole` takes it where it does nothing more (the
    /// sink and the notifier match the inputs they add to first: the start they note, the leave they bound, the
    /// notifier's restore and membership change).
    pub fn handle_life(&mut self, now: Time, life: Life) {
        match life {
            Life::Start => self.handle_start(now),
            Life::CaughtUp => self.handle_caught_up(),
            Life::Member(obs) => self.handle_member(now, &obs),
            Life::Log { seq, entry } => {
                self.handle_log(seq, &entry);
            }
            Life::LogUnreadable { seq } => self.handle_unreadable(seq),
            Life::LogTooNew { seq, needs } => {
                let had_hole = self.follow.hole().is_some();
                self.follow.read_too_new(seq, needs);
                self.note_hole(had_hole);
            }
            Life::Restore(reader) => {
                self.handle_restore(*reader);
            }
            Life::HeartbeatWritten { ok } => self.handle_heartbeat_written(ok),
            Life::Leave => self.handle_leave(),
        }
    }

    pub fn handle_start(&mut self, now: Time) {
        self.follow.start(now);
        self.drain_membership();
    }

    /// The backlog and the membership snapshot are in: every owned object is resumed from the store.
    pub fn handle_caught_up(&mut self) {
        if !self.follow.catch_up() {
            return;
        }
        self.owners = Ownership::new(&self.follow.membership().view().members());
        if self.follow.is_leaving() {
            return;
        }
        let gained: Vec<ObjectId> = self.known().filter(|id| self.owns(id)).cloned().collect();
        self.push_resume(gained);
    }

    pub fn handle_member(&mut self, now: Time, obs: &MemberObservation) {
        if self.follow.observe(now, obs) {
            self.view_changed();
        }
        self.drain_membership();
    }

    /// The latest objects a resume found with accepted events purged before this member could hand them out
    /// (`Work::Resumed::lost`: object, stored, last), oldest first: the last `HISTORY_LOST_KEPT` of the
    /// `counters.objects_lost_history` counted, so a log line can name them and a checker can hold every
    /// missing event against them.
    pub fn history_lost(&self) -> &VecDeque<(ObjectId, u64, u64)> {
        &self.history_lost
    }

    /// Why this member's reader stopped for good (an entry of a cluster format this build does not speak, in
    /// a cluster that allowed it): the role leaves, and its driver says this.
    pub fn blocked_reason(&self) -> Option<String> {
        self.follow.blocked_reason()
    }

    /// The position a snapshot has to reach for this member to read past a hole in the log, while it waits
    /// for one (it hands out nothing meanwhile).
    pub fn needs_snapshot(&self) -> Option<u64> {
        self.follow.hole()
    }

    /// How far the log is known to reach: the highest position handed in, read or not (`Tail::reached`).
    pub fn reached(&self) -> u64 {
        self.follow.reached()
    }

    /// A live log entry. Returns what reading it did (roles count stale events from it).
    pub fn handle_log(&mut self, seq: u64, entry: &LogEntry) -> Read {
        let had_hole = self.follow.hole().is_some();
        let read = self.follow.read(seq, entry);
        self.note_hole(had_hole);
        if let (Read::Event { verdict, .. }, LogEntry::Event(event)) = (&read, entry) {
            if verdict.is_accepted() && self.follow.is_caught_up() && self.owns(&event.object) {
                let after = After::Live(self.reader().objects().get(&event.object).cloned());
                self.hand_out(Owned { seq, event: event.clone(), after });
            }
        }
        read
    }

    /// The entry at `seq` could not be decoded: passed over, as every reader does.
    pub fn handle_unreadable(&mut self, seq: u64) {
        let had_hole = self.follow.hole().is_some();
        self.follow.skip(seq);
        self.note_hole(had_hole);
    }

    /// A reader restored from the latest snapshot, after `NeedSnapshot`: taken if it is ahead of this one.
    /// What the hole held is in its state but was never handed out, so every owned object is resumed from the
    /// store up to the snapshot: objects whose unstored events were purged come out in `Work::Resumed::lost`.
    /// A running resume keeps what its replay has read and now ends at the snapshot's position (its held events
    /// are read again, as when it drops them); the other owned objects get a resume of their own. Starting
    /// resumes over instead, a member jumping again before a long replay ends would never end one. Returns
    /// whether the reader was taken (the driver then follows the log from after its position).
    pub fn handle_restore(&mut self, reader: LogReader) -> bool {
        if !self.follow.restore(reader) {
            return false;
        }
        self.counters.restores += 1;
        if !self.follow.is_caught_up() || self.follow.is_leaving() {
            return true;
        }
        let position = self.follow.reader().position();
        let mut resuming = BTreeSet::new();
        for r in &mut self.resumes {
            extend_resume(r, position, self.follow.reader());
            resuming.extend(r.objects.iter().map(|(id, _)| id.clone()));
        }
        let rest: Vec<ObjectId> = self.known().filter(|id| self.owns(id) && !resuming.contains(*id)).cloned().collect();
        self.push_resume(rest);
        true
    }

    fn note_hole(&mut self, had_hole: bool) {
        if let (false, Some(covering)) = (had_hole, self.follow.hole()) {
            self.counters.log_gaps += 1;
            self.outputs.push_back(RoleOutput::Life(LifeOutput::NeedSnapshot { covering }));
        }
    }

    /// The store's answer to `QueryProgress`: each object's last stored position (absent: 0), or why not.
    pub fn handle_progress(&mut self, now: Time, token: u64, result: Result<Vec<(ObjectId, u64)>, IoError>) {
        let Some(r) = self.resumes.front_mut().filter(|r| r.token == token && matches!(r.stage, Stage::Querying))
        else {
            return;
        };
        // Sorted and searched rather than made a map: a resume may ask for a million objects.
        let stored = match result {
            Ok(mut s) => {
                s.sort_by(|a, b| a.0.cmp(&b.0));
                // As a map would: of one object given twice, the later position.
                s.dedup_by(|later, kept| {
                    let same = later.0 == kept.0;
                    if same {
                        kept.1 = later.1;
                    }
                    same
                });
                s
            }
            Err(_) => {
                r.stage = Stage::Waiting;
                self.schedule_retry(now);
                return;
            }
        };
        let need: Vec<(ObjectId, u64)> = r
            .objects
            .iter()
            .filter_map(|(id, last)| {
                let s = stored.binary_search_by(|(o, _)| o.cmp(id)).map_or(0, |i| stored[i].1);
                (s < *last).then(|| (id.clone(), s))
            })
            .collect();
        match need.iter().map(|(_, s)| *s).min() {
            None => self.finish_resume(),
            Some(from) => {
                r.stage = Stage::Replaying { next: from + 1, need, asked: false, missing_upto: 0, lost: Vec::new() };
                self.backoff.reset();
            }
        }
    }

    /// Entries of a `Replay` read, with `upto` the last position the read covered (positions with nothing to
    /// decode are simply absent), or why the read failed.
    pub fn handle_replayed(&mut self, now: Time, token: u64, result: Result<(u64, Vec<(u64, LogEntry)>), IoError>) {
        let reader_position = self.reader().position();
        let Some(r) = self.resumes.front_mut().filter(|r| r.token == token) else { return };
        let at = r.at;
        let Stage::Replaying { need, next, asked, missing_upto, lost } = &mut r.stage else { return };
        *asked = false;
        let (upto, entries) = match result {
            Ok(v) => v,
            Err(_) => {
                self.schedule_retry(now);
                return;
            }
        };
        let mut out = Vec::new();
        // Every position of `next..=upto` should be there; the ones that are not were purged (or could not be
        // decoded, which is counted the same: a false alarm only on a log already damaged).
        let mut expect = *next;
        for (seq, entry) in entries {
            if seq < *next || seq > at {
                continue;
            }
            if seq > expect {
                *missing_upto = (*missing_upto).max(seq - 1);
            }
            expect = expect.max(seq + 1);
            let LogEntry::Event(event) = entry else { continue };
            let Some(stored) = lookup(need, &event.object) else { continue };
            if seq <= stored {
                continue;
            }
            debug_assert!(seq <= reader_position);
            if self.follow.reader().verdict_at(seq, &event).is_some_and(|v| v.is_accepted()) {
                out.push(Owned { seq, event, after: After::Replayed });
            }
        }
        if upto.min(at) >= expect {
            *missing_upto = (*missing_upto).max(upto.min(at));
        }
        // An object the store is behind on, with a position missing from the log after what the store has:
        // events of it may be gone, purged before this member could hand them out. Said again for the part of
        // its range not said yet when the range grows (the resume took on more when its held events were
        // dropped).
        let mut found = Vec::new();
        // Nothing missing yet (the common case): nothing to look for in every object needed, chunk after chunk.
        if *missing_upto > 0 {
            for (id, stored) in need.iter() {
                let Some(last) = lookup(&r.objects, id) else { continue };
                let said = lost.iter().position(|(o, _, _)| o == id);
                let from = said.map_or(*stored, |i| lost[i].2);
                if last > from && *missing_upto > from {
                    found.push((id.clone(), from, last));
                    match said {
                        Some(i) => lost[i].2 = last,
                        None => lost.push((id.clone(), *stored, last)),
                    }
                }
            }
        }
        *next = (*next).max(upto.saturating_add(1));
        let done = *next > at;
        self.note_lost(found);
        self.counters.replayed_events += out.len() as u64;
        self.work.extend(out.into_iter().map(Work::Event));
        self.backoff.reset();
        if done {
            self.finish_resume();
        }
    }

    /// Drop everything owned that the role has not stored, and resume every owned object from the store: the
    /// role could not hold its work (the store was away too long). Running resumes are folded into this one.
    pub fn resume_all_owned(&mut self) {
        self.resumes.clear();
        self.work.clear();
        self.retry_at = None;
        if !self.follow.is_caught_up() || self.follow.is_leaving() {
            return;
        }
        let owned: Vec<ObjectId> = self.known().filter(|id| self.owns(id)).cloned().collect();
        self.push_resume(owned);
    }

    /// The oldest heartbeat put not answered yet was written (`ok`) or failed.
    pub fn handle_heartbeat_written(&mut self, ok: bool) {
        self.follow.heartbeat_written(ok);
    }

    /// Leave the bucket: the key is deleted, resumes stop, nothing new comes out.
    pub fn handle_leave(&mut self) {
        self.follow.leave();
        self.resumes.clear();
        self.retry_at = None;
        self.drain_membership();
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.follow.handle_timeout(now) {
            if let Some(covering) = self.follow.hole() {
                self.outputs.push_back(RoleOutput::Life(LifeOutput::NeedSnapshot { covering }));
            }
        }
        if self.retry_at.is_some_and(|t| t <= now) {
            self.retry_at = None;
        }
        self.drain_membership();
    }

    /// Sends what the running resume needs next: its progress query, or its next replay read when the role has
    /// `room` for the events it may bring.
    pub fn drive(&mut self, room: bool) {
        if self.retry_at.is_some() {
            return;
        }
        let chunk = self.cfg.replay_chunk.max(1);
        let Some(r) = self.resumes.front_mut() else { return };
        match &mut r.stage {
            // Every object it was replaying for moved to another member meanwhile.
            Stage::Replaying { need, asked: false, .. } if need.is_empty() => {
                self.finish_resume();
                self.drive(room);
            }
            Stage::Waiting => {
                r.stage = Stage::Querying;
                self.counters.progress_queries += 1;
                let objects = r.objects.iter().map(|(id, _)| id.clone()).collect();
                self.outputs.push_back(RoleOutput::QueryProgress { token: r.token, objects });
            }
            Stage::Replaying { next, asked, .. } if !*asked && room => {
                *asked = true;
                self.counters.replay_reads += 1;
                let to = r.at.min(next.saturating_add(chunk - 1));
                self.outputs.push_back(RoleOutput::Replay { token: r.token, from: *next, to });
            }
            _ => {}
        }
    }

    // ---- outputs ----

    /// Whether `take_work` has something.
    pub fn has_work(&self) -> bool {
        !self.work.is_empty()
    }

    #[must_use]
    pub fn take_work(&mut self) -> Option<Work> {
        self.work.pop_front()
    }

    #[must_use]
    pub fn poll_output(&mut self) -> Option<RoleOutput> {
        self.outputs.pop_front()
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Time, RoleTimer)> {
        [(self.follow.poll_timeout(), RoleTimer::Heartbeat), (self.retry_at, RoleTimer::ResumeRetry)]
            .into_iter()
            .filter_map(|(t, timer)| t.map(|t| (t, timer)))
            .min()
    }

    // ---- internals ----

    fn drain_membership(&mut self) {
        while let Some(m) = self.follow.poll_membership() {
            self.outputs.push_back(RoleOutput::Life(LifeOutput::Membership(m)));
        }
    }

    fn schedule_retry(&mut self, now: Time) {
        self.counters.resume_retries += 1;
        self.retry_at = Some(now + self.backoff.next_delay());
    }

    /// An owned event: held if its object is resuming, handed out otherwise.
    fn hand_out(&mut self, owned: Owned) {
        let max_held = self.cfg.max_held;
        let position = self.follow.reader().position();
        let Some(r) = self.resumes.iter_mut().find(|r| lookup(&r.objects, &owned.event.object).is_some()) else {
            self.work.push_back(Work::Event(owned));
            return;
        };
        r.held.push(owned);
        if r.held.len() > max_held {
            // Read them again instead of holding them: the resume now ends here.
            self.counters.held_dropped += 1;
            extend_resume(r, position, self.follow.reader());
        }
    }

    fn push_resume(&mut self, gained: Vec<ObjectId>) {
        if gained.is_empty() {
            return;
        }
        let mut objects: Vec<(ObjectId, u64)> = gained
            .into_iter()
            .map(|id| {
                let last = self.follow.reader().last_accepted_of(&id).unwrap_or(0);
                (id, last)
            })
            .collect();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        objects.dedup_by(|a, b| a.0 == b.0);
        let token = self.next_token;
        self.next_token += 1;
        self.counters.resumes_started += 1;
        let at = self.follow.reader().position();
        self.resumes.push_back(Resume { token, objects, at, held: Vec::new(), stage: Stage::Waiting });
    }

    fn finish_resume(&mut self) {
        let Some(r) = self.resumes.pop_front() else { return };
        self.counters.resumes_done += 1;
        self.backoff.reset();
        let held: BTreeSet<&ObjectId> = r.held.iter().map(|h| &h.event.object).collect();
        let objects =
            r.objects.iter().filter(|(id, _)| !held.contains(id)).map(|(id, last)| (id.clone(), *last)).collect();
        // Said and counted as each hole was found (`handle_replayed`).
        let lost = match r.stage {
            Stage::Replaying { lost, .. } => lost,
            _ => Vec::new(),
        };
        self.work.push_back(Work::Resumed { at: r.at, objects, lost });
        self.work.extend(r.held.into_iter().map(Work::Event));
    }

    /// Counts objects found with lost history and keeps them at hand (`history_lost`).
    fn note_lost(&mut self, found: Vec<(ObjectId, u64, u64)>) {
        self.counters.objects_lost_history += found.len() as u64;
        for l in found {
            if self.history_lost.len() == HISTORY_LOST_KEPT {
                self.history_lost.pop_front();
            }
            self.history_lost.push_back(l);
        }
    }

    /// Our bucket's live set changed: ownership follows HRW over the new view. Gained objects are resumed;
    /// lost ones leave every resume (their new owner resumes them from the store).
    fn view_changed(&mut self) {
        let before = std::mem::replace(&mut self.owners, Ownership::new(&self.follow.membership().view().members()));
        if !self.follow.is_caught_up() || self.follow.is_leaving() {
            return;
        }
        let me = &self.cfg.me;
        let (mut gained, mut lost) = (Vec::new(), Vec::new());
        for (id, _) in self.follow.reader().last_accepted() {
            let key = hrw::key(id.as_str());
            let (was, is) = (before.is_owner(key, me), self.owners.is_owner(key, me));
            if is && !was {
                gained.push(id.clone());
            } else if was && !is {
                lost.push(id.clone());
            }
        }
        if !lost.is_empty() {
            lost.sort();
            let kept = |id: &ObjectId| lost.binary_search(id).is_err();
            for r in &mut self.resumes {
                r.objects.retain(|(id, _)| kept(id));
                if let Stage::Replaying { need, .. } = &mut r.stage {
                    need.retain(|(id, _)| kept(id));
                }
                r.held.retain(|h| lookup(&r.objects, &h.event.object).is_some());
            }
        }
        self.push_resume(gained);
    }
}
