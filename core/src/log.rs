//! Reading the shared log: the fence and the fold.
//!
//! Epoch records and events share one totally ordered log, so at every position every reader knows the same
//! epoch in force. The fence gives each event a verdict there: an event `(object, epoch e, writer w)` at a
//! position where epoch `E` is in force is accepted iff `w` (id *and* incarnation) owned the object under
//! every epoch record `e..=E`. A writer that lost the object at any point since it wrote is fenced; a writer
//! that kept it throughout is never discarded because some other member joined or left.
//!
//! The fold turns accepted events into object state and remembers which command ids were applied, so any later
//! owner can answer a retried command without applying it twice. Engines, the ui and a replay all run this
//! same reader, so they reach the same verdicts and the same state (invariant 2).
//!
//! **The idempotency window, in log terms.** The log has its own clock: the largest `at` of the accepted events
//! read so far (it never goes back, whatever a writer's clock does). A command id is remembered from the event
//! that applied it until the log clock has moved more than the window past that event's log time; the window is
//! the one in the epoch record in force. Both come from the log alone, so every reader forgets the same id at the
//! same position, and a retry within the window is answered with its first outcome by any of them. Older ids are
//! forgotten, which keeps the record bounded by the commands of one window.

use crate::alert::{self, AlertState, SoftState};
use crate::format;
use crate::hrw::{self, Ownership};
use crate::model::{
    CommandId, EpochRecord, Event, EventBody, LogEntry, MemberId, MemberRef, ObjectDef, ObjectId, Outcome, State,
};
use crate::policy::Policy;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why an event was discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StaleReason {
    /// No epoch record precedes it, or it names epoch 0.
    NoEpoch,
    /// It names an epoch newer than the one in force where it stands: its writer made it up.
    FutureEpoch { event_epoch: u64, in_force: u64 },
    /// Its writer did not own the object under epoch `epoch` (someone else did, or nobody).
    NotOwner { epoch: u64, owner: Option<MemberRef> },
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StaleReason::NoEpoch => f.write_str("no epoch record in force"),
            StaleReason::FutureEpoch { event_epoch, in_force } => {
                write!(f, "event epoch {event_epoch} is ahead of the epoch in force {in_force}")
            }
            StaleReason::NotOwner { epoch, owner: Some(o) } => write!(f, "owned by {o} under epoch {epoch}"),
            StaleReason::NotOwner { epoch, owner: None } => write!(f, "no owner under epoch {epoch}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Stale(StaleReason),
}

impl Verdict {
    pub fn is_accepted(&self) -> bool {
        matches!(self, Verdict::Accepted)
    }
}

/// Why an epoch record in the log was not installed. Compare-and-set appends make these impossible from
/// jaque itself; they are counted so a foreign or corrupt writer is visible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochRejection {
    /// Not exactly one above the epoch in force.
    OutOfSequence { got: u64, in_force: u64 },
    /// Members unsorted or with a repeated id.
    BadMembers,
}

/// The epoch records seen so far, each with its member list prepared for HRW.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    /// `records[i]` is epoch `i + 1`.
    records: Vec<(EpochRecord, Ownership)>,
    /// The active cluster format: the highest any record so far named (1 before any names one).
    active_format: u32,
}

/// Where each epoch record stands in the log, so an event read again later (a replay) gets the verdict it had
/// where it stands: the epoch in force at position `p` is the number of records before `p`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochPositions(Vec<u64>);

impl EpochPositions {
    /// The epoch in force at log position `seq` (records at positions below it).
    pub fn in_force_at(&self, seq: u64) -> u64 {
        self.0.partition_point(|p| *p < seq) as u64
    }

    fn push(&mut self, seq: u64) {
        self.0.push(seq);
    }
}

impl Fence {
    /// The epoch in force: 0 before the first record.
    pub fn epoch(&self) -> u64 {
        self.records.len() as u64
    }

    pub fn current(&self) -> Option<&EpochRecord> {
        self.records.last().map(|(r, _)| r)
    }

    pub fn current_ownership(&self) -> Option<&Ownership> {
        self.records.last().map(|(_, o)| o)
    }

    pub fn record(&self, epoch: u64) -> Option<&EpochRecord> {
        self.index(epoch).map(|i| &self.records[i].0)
    }

    pub fn ownership(&self, epoch: u64) -> Option<&Ownership> {
        self.index(epoch).map(|i| &self.records[i].1)
    }

    /// The cluster's active format under the epoch in force (`crate::format`): 1 before the first record.
    pub fn active_format(&self) -> u32 {
        self.active_format.max(format::OLDEST_CLUSTER_FORMAT)
    }

    fn index(&self, epoch: u64) -> Option<usize> {
        let i = usize::try_from(epoch.checked_sub(1)?).ok()?;
        (i < self.records.len()).then_some(i)
    }

    /// Installs the next epoch record, or says why not.
    pub fn install(&mut self, record: &EpochRecord) -> Result<(), EpochRejection> {
        if record.epoch != self.epoch() + 1 {
            return Err(EpochRejection::OutOfSequence { got: record.epoch, in_force: self.epoch() });
        }
        if !record.members.windows(2).all(|w| w[0].id < w[1].id) {
            return Err(EpochRejection::BadMembers);
        }
        let ownership = Ownership::new(&record.members);
        // The active format never goes down: a record from a build that does not name one (or an older one that
        // was paused while the others moved on) leaves it where it was.
        self.active_format = self.active_format().max(record.format);
        self.records.push((record.clone(), ownership));
        Ok(())
    }

    /// The verdict on an event standing at the current position (after every record installed so far).
    pub fn verdict(&self, event: &Event) -> Verdict {
        self.verdict_for_key(hrw::key(event.object.as_str()), event.epoch, &event.writer)
    }

    /// The verdict with the object's key already hashed.
    #[inline]
    pub fn verdict_for_key(&self, object_key: u64, epoch: u64, writer: &MemberRef) -> Verdict {
        self.verdict_in_force(object_key, epoch, writer, self.epoch())
    }

    /// The verdict on an event standing where epoch `in_force` (at most the current one) was in force: the same
    /// rule, over the records `epoch..=in_force` only. A replay of an old position gets the verdict every reader
    /// gave it there.
    #[inline]
    pub fn verdict_in_force(&self, object_key: u64, epoch: u64, writer: &MemberRef, in_force: u64) -> Verdict {
        let in_force = in_force.min(self.epoch());
        if epoch == 0 || in_force == 0 {
            return Verdict::Stale(StaleReason::NoEpoch);
        }
        if epoch > in_force {
            return Verdict::Stale(StaleReason::FutureEpoch { event_epoch: epoch, in_force });
        }
        // Newest first: a writer that lost the object usually lost it in the latest change.
        let from = (epoch - 1) as usize;
        for (i, (_, own)) in self.records[from..in_force as usize].iter().enumerate().rev() {
            let owner = own.owner_of_key(object_key);
            if owner != Some(writer) {
                return Verdict::Stale(StaleReason::NotOwner { epoch: epoch + i as u64, owner: owner.cloned() });
            }
        }
        Verdict::Accepted
    }
}

/// The last state change of an object, as the ui shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionInfo {
    pub seq: u64,
    pub from: State,
    pub to: State,
    pub at: Time,
    pub epoch: u64,
    pub writer: MemberId,
    pub output: String,
}

/// An object as the log says it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectView {
    pub def: ObjectDef,
    /// HRW key of the object id, hashed once (not stored in a snapshot: it is the id's).
    #[serde(skip)]
    pub key: u64,
    pub state: State,
    pub paused: bool,
    /// A problem state someone acknowledged; cleared by the next transition.
    pub acked: bool,
    /// The check schedule's anchor: the time of the put that last (re)defined the object.
    pub anchor: Time,
    /// The time of the last accepted check-now request, if any.
    pub check_requested: Option<Time>,
    /// Boxed: a reader holds a view of every object, and an object that never changed state (pending, or read
    /// from a log that has only its put) needs no room for one.
    pub last_transition: Option<Box<TransitionInfo>>,
    /// Log position of the last accepted event on this object.
    pub last_seq: u64,
    /// Its soft state, flapping and recent changes (`crate::alert`), apart while it has any: most objects, most of
    /// the time, have none, and a reader holds a view of every object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<Box<AlertState>>,
}

impl ObjectView {
    /// The problem episode it is in (`AlertState::episode`): the log position of the transition that opened it.
    pub fn episode(&self) -> Option<u64> {
        self.alert.as_ref()?.episode
    }

    /// The latest results differ from the hard `state` and have not made it hard yet.
    pub fn soft(&self) -> Option<&SoftState> {
        self.alert.as_ref()?.soft.as_ref()
    }

    /// The object flaps: its transitions are not notified, its flapping start and end are.
    pub fn flapping(&self) -> bool {
        self.alert.as_ref().is_some_and(|a| a.flapping)
    }

    /// When its raw state changed within the flapping window (`alert::flap_share`), oldest first.
    pub fn changes(&self) -> &[Time] {
        self.alert.as_ref().map_or(&[], |a| &a.changes)
    }

    /// The object's state for the alert rules (`crate::alert`).
    pub fn alert_now(&self) -> alert::Now<'_> {
        alert::Now { hard: self.state, soft: self.soft(), flapping: self.flapping(), changes: self.changes() }
    }

    /// Changes its alert state, kept apart only while it is anything but empty.
    fn update_alert(&mut self, f: impl FnOnce(&mut AlertState)) {
        let mut a = self.alert.take().unwrap_or_default();
        f(&mut a);
        if *a != AlertState::default() {
            self.alert = Some(a);
        }
    }

    /// The rules its results are judged by under the active cluster format `active`.
    pub fn rules(&self, active: u32) -> alert::Rules {
        alert::Rules::of(&self.def, active)
    }
}

/// What reading one log entry did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// A position at or below one already read: delivered twice, skipped.
    Duplicate,
    /// The entry stands past a hole: positions `expected..got` are gone (purged below a snapshot). It was not
    /// read and the reader is unchanged; folding on would give verdicts and state no other reader has, so the
    /// reader has to jump to a snapshot at or past `got - 1` and follow on from there.
    Gap {
        expected: u64,
        got: u64,
    },
    /// The entry at this position could not be decoded (`LogReader::skip`): passed over, no effect.
    Unreadable,
    /// The entry needs a cluster format this reader does not speak (`crate::format`): folding on would give this
    /// reader a state no other reader has. The reader stops here for good (`blocked`); a
    /// build that speaks the format reads on.
    TooNew {
        needs: u32,
    },
    EpochInstalled,
    EpochRejected(EpochRejection),
    Event {
        verdict: Verdict,
        effect: Effect,
    },
}

/// What an event did to the objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Stale: no effect at all.
    None,
    /// A command event folded; `outcome` is what its submitter is told (applied, or not found).
    Command(Outcome),
    /// A command event whose id was applied before: no effect, the first outcome stands.
    DuplicateCommand(Outcome),
    /// A state transition took effect.
    Transitioned,
    /// A command-shaped event without a command id took effect; nobody waits for it.
    Folded,
    /// An accepted event with nothing to act on (a transition on a deleted object, or to the current state).
    Ignored,
}

/// Counters a reader keeps; every reader of the same log counts the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderCounters {
    /// Events discarded by the fence (`jaque_engine_stale_epoch_total`).
    pub stale_epoch_total: u64,
    pub epochs_rejected_total: u64,
    pub duplicate_positions_total: u64,
    pub duplicate_commands_total: u64,
    /// Command ids forgotten as the log clock moved past their idempotency window.
    #[serde(default)]
    pub commands_forgotten_total: u64,
    /// Entries that could not be decoded, passed over (`LogReader::skip`).
    #[serde(default)]
    pub unreadable_total: u64,
    /// Accepted policy changes the fold did not take: the policy after them would break a rule, or they name
    /// what does not exist (an engine refuses those before it writes them; these came from a partitioned or
    /// older writer's view of the policy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub policy_refused_total: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where the log clock crossed into a new step of `STEP`: `(p, t)` says every entry below position `p` has a
/// log time of at most `t`, so compaction can keep entries by age without reading them again. Bounded: past
/// `MAX` marks, every second mark of the older half is dropped, so recent marks stay a second apart (a short
/// `-log-retention` is cut finely) while older ones thin out geometrically (a week-long one is cut within a
/// small fraction of its length); years of log keep a few kilobytes. Every reader keeps the same marks: they
/// are a function of the log alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TimeMarks(VecDeque<(u64, Time)>);

impl TimeMarks {
    const STEP: u64 = 1_000;
    const MAX: usize = 4096;

    fn advance(&mut self, seq: u64, before: Time, after: Time) {
        // Below the first accepted event there are only epoch records: nothing to keep or purge by age.
        if before == Time(0) || after.as_millis() / Self::STEP == before.as_millis() / Self::STEP && !self.0.is_empty()
        {
            return;
        }
        self.0.push_back((seq, before));
        if self.0.len() > Self::MAX {
            let half = self.0.len() / 2;
            let mut kept: VecDeque<(u64, Time)> = self.0.iter().take(half).skip(1).step_by(2).copied().collect();
            kept.extend(self.0.iter().skip(half).copied());
            self.0 = kept;
        }
    }

    /// The highest mark position whose entries below are all at or before `cut` (1: none is).
    fn keep_from(&self, cut: Time) -> u64 {
        let i = self.0.partition_point(|(_, t)| *t <= cut);
        if i == 0 {
            1
        } else {
            self.0[i - 1].0
        }
    }
}

/// How long, in log time, a reader remembers an object id that has no view (deleted, or named by a command
/// before it existed): longer than any sensible `-log-retention`, since past the retention the events it stands
/// for are purged anyway. A sink or notifier whose store is further behind than this on a deleted object does not
/// learn of the delete.
pub const TOMBSTONE_HORIZON: Duration = Duration::from_secs(30 * 24 * 3600);

/// Follows the log: fence, fold, and the record of applied command ids.
#[derive(Clone, Debug, Default)]
pub struct LogReader {
    fence: Fence,
    position: u64,
    /// Whether any position was read yet: a log numbered from 0 has a real position 0 that can be re-delivered.
    started: bool,
    /// Each view behind a pointer: a B-tree node holds eleven entries but is, filled in log order, little more
    /// than half full, so inline views would leave nearly half of a node's room for them empty; behind a
    /// pointer, the room a node leaves empty is a pointer's. Shared (`Arc`, copied on write) so that a snapshot
    /// holds the views without copying them while it is encoded off the loop.
    objects: BTreeMap<ObjectId, Arc<ObjectView>>,
    /// Object ids with accepted events that have no view — deleted ones, and ones a command named that never
    /// existed — with the position and log time of their last one: with the views' `last_seq`, what a sink or
    /// notifier starting from a snapshot needs to know which objects its store may be behind on. Forgotten
    /// `TOMBSTONE_HORIZON` of log time after that event, so they stay bounded however many objects come and go.
    tombstones: BTreeMap<ObjectId, (u64, Time)>,
    /// The tombstones by log time (non-decreasing; an entry whose tombstone was replaced is skipped): what to
    /// forget first.
    tombstone_order: VecDeque<(Time, ObjectId)>,
    applied: BTreeMap<CommandId, Outcome>,
    /// The applied command ids by the log time they were applied at (non-decreasing): what to forget first.
    applied_order: VecDeque<(Time, CommandId)>,
    /// The log clock: the largest `at` of the accepted events read.
    log_time: Time,
    /// Where the log clock crossed into a new step (see `TimeMarks`): what compaction keeps by time.
    marks: TimeMarks,
    /// Log position of the epoch record in force (the compare-and-set precondition for the next proposal).
    epoch_seq: Option<u64>,
    epoch_positions: EpochPositions,
    pub counters: ReaderCounters,
    /// The cluster format this reader speaks (this build's, unless a simulated older build).
    speaks: Speaks,
    /// The position and format of the entry this reader stopped at (`Read::TooNew`).
    blocked: Option<(u64, u32)>,
    /// The notification policy as of `position` (`crate::policy`), shared with whoever holds it (a notifier
    /// deciding a send, a snapshot being encoded): each change makes a new one.
    policy: Arc<Policy>,
    /// Each object some definition names as a parent, with the objects that name it (`ObjectDef::parents`): who to
    /// look at when it recovers. Made from the views (a snapshot does not hold it).
    children: BTreeMap<ObjectId, std::collections::BTreeSet<ObjectId>>,
}

/// The cluster format a reader speaks: this build's by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Speaks(u32);

impl Default for Speaks {
    fn default() -> Speaks {
        Speaks(format::CLUSTER_FORMAT)
    }
}

impl LogReader {
    pub fn new() -> LogReader {
        LogReader::default()
    }

    /// The same reader, speaking cluster format `speaks` (at most this build's): how the simulator runs an
    /// older build's reader.
    pub fn speaking(mut self, speaks: u32) -> LogReader {
        self.speaks = Speaks(speaks.clamp(format::OLDEST_CLUSTER_FORMAT, format::CLUSTER_FORMAT));
        self
    }

    /// The cluster format this reader speaks.
    pub fn speaks(&self) -> u32 {
        self.speaks.0
    }

    /// The position and format of the entry this reader stopped at because it does not speak the format the
    /// cluster had allowed there (`Read::TooNew`).
    pub fn blocked(&self) -> Option<(u64, u32)> {
        self.blocked
    }

    /// Why a blocked reader stopped, for a person: what to do about it.
    pub fn blocked_reason(&self) -> Option<String> {
        let (seq, needs) = self.blocked?;
        Some(format!(
            "the log at position {seq} needs cluster format {needs}, and this build speaks {speaks}: run a newer jaque \
             (docs/upgrading.md)",
            speaks = self.speaks.0
        ))
    }

    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The last log position read.
    pub fn position(&self) -> u64 {
        self.position
    }

    pub fn epoch(&self) -> u64 {
        self.fence.epoch()
    }

    pub fn epoch_seq(&self) -> Option<u64> {
        self.epoch_seq
    }

    pub fn objects(&self) -> &BTreeMap<ObjectId, Arc<ObjectView>> {
        &self.objects
    }

    pub fn object(&self, id: &ObjectId) -> Option<&ObjectView> {
        self.objects.get(id).map(|v| &**v)
    }

    /// The parents of `view` in a hard problem at this reader's position ("parent down": its problems are not
    /// notified meanwhile). A parent that does not exist is not down.
    pub fn parents_down<'a>(&'a self, view: &'a ObjectView) -> impl Iterator<Item = &'a ObjectId> + 'a {
        view.def.parents.iter().filter(|p| self.object(p).is_some_and(|v| v.state.is_problem()))
    }

    /// The objects whose definitions name `parent` as a parent.
    pub fn children<'a>(&'a self, parent: &ObjectId) -> impl Iterator<Item = &'a ObjectId> + 'a {
        self.children.get(parent).into_iter().flatten()
    }

    /// `children` after `id`'s parents changed from `before` to `after`.
    fn reparent(&mut self, id: &ObjectId, before: &[ObjectId], after: &[ObjectId]) {
        for p in before.iter().filter(|p| !after.contains(p)) {
            if let Some(c) = self.children.get_mut(p) {
                c.remove(id);
                if c.is_empty() {
                    self.children.remove(p);
                }
            }
        }
        for p in after {
            self.children.entry(p.clone()).or_default().insert(id.clone());
        }
    }

    /// The notification policy in force at this reader's position.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Every object id with an accepted event, deleted ones too (within `TOMBSTONE_HORIZON`), and the position
    /// of its last one.
    pub fn last_accepted(&self) -> impl Iterator<Item = (&ObjectId, u64)> {
        self.objects.iter().map(|(id, v)| (id, v.last_seq)).chain(self.tombstones.iter().map(|(id, (s, _))| (id, *s)))
    }

    /// The position of the last accepted event of `id`, deleted ones too (within `TOMBSTONE_HORIZON`).
    pub fn last_accepted_of(&self, id: &ObjectId) -> Option<u64> {
        self.objects.get(id).map(|v| v.last_seq).or_else(|| self.tombstones.get(id).map(|(s, _)| *s))
    }

    /// The outcome a command id got when it was applied, if it was and is still within the window.
    pub fn applied(&self, id: &CommandId) -> Option<&Outcome> {
        self.applied.get(id)
    }

    /// How many applied command ids are remembered.
    pub fn applied_len(&self) -> usize {
        self.applied.len()
    }

    /// The log clock: the largest `at` of the accepted events read so far.
    pub fn log_time(&self) -> Time {
        self.log_time
    }

    /// The lowest position to keep so that every event within `retention` of the log clock stays, and at least
    /// the entry at this reader's position (only it when `retention` is zero): a reader behind the purge then
    /// always meets an entry past the hole and jumps to a snapshot, however long the log stays quiet after it.
    /// Everything below it is older than `log_time() - retention` by the log's own clock, so every reader
    /// computes the same point.
    pub fn keep_from(&self, retention: Duration) -> u64 {
        let last = self.position.max(1);
        if retention.is_zero() {
            return last;
        }
        self.marks.keep_from(self.log_time - retention).min(last)
    }

    /// The idempotency window of the epoch record in force (`None`: unbounded).
    pub fn idempotency_window(&self) -> Option<Duration> {
        self.fence.current()?.idempotency_window_ms.map(Duration::from_millis)
    }

    /// The owner of an object under the epoch in force.
    pub fn owner(&self, object: &ObjectId) -> Option<&MemberRef> {
        self.fence.current_ownership()?.owner(object)
    }

    /// The verdict this reader gave (or would have given) the event at position `seq`, which it has read
    /// (`seq <= position()`): for replays of positions already passed. `None` for a position not read yet.
    pub fn verdict_at(&self, seq: u64, event: &Event) -> Option<Verdict> {
        if !self.started || seq > self.position {
            return None;
        }
        let in_force = self.epoch_positions.in_force_at(seq);
        Some(self.fence.verdict_in_force(hrw::key(event.object.as_str()), event.epoch, &event.writer, in_force))
    }

    /// The reader's whole state, to start another reader from (`from_snapshot`).
    pub fn snapshot(&self) -> ReaderSnapshot {
        ReaderSnapshot {
            // The newest version every member can read: the cluster's active format says which.
            version: format::snapshot_version(self.fence.active_format()),
            position: self.position,
            started: self.started,
            epochs: self
                .epoch_positions
                .0
                .iter()
                .copied()
                .zip(self.fence.records.iter().map(|(r, _)| r.clone()))
                .collect(),
            // The views are shared, not copied: the reader copies one only if it changes it while the snapshot
            // is still held (being encoded), so a snapshot of a million objects costs a list of pointers.
            objects: self.objects.iter().map(|(id, v)| (id.clone(), Arc::clone(v))).collect(),
            tombstones: {
                let mut t: Vec<_> = self.tombstones.iter().map(|(id, (seq, at))| (id.clone(), *seq, *at)).collect();
                t.sort_by_key(|(_, seq, at)| (*at, *seq));
                t
            },
            applied: self.applied_order.iter().map(|(at, id)| (id.clone(), self.applied[id].clone(), *at)).collect(),
            log_time: self.log_time,
            marks: self.marks.0.iter().copied().collect(),
            counters: self.counters.clone(),
            policy: Arc::clone(&self.policy),
        }
    }

    /// A reader in exactly the state of the one that took `snapshot`, or why the snapshot cannot be one.
    pub fn from_snapshot(s: ReaderSnapshot) -> Result<LogReader, SnapshotError> {
        LogReader::from_snapshot_speaking(s, format::CLUSTER_FORMAT)
    }

    /// `from_snapshot` for a reader speaking cluster format `speaks` (see `speaking`): it reads the snapshot
    /// versions that format's builds read.
    pub fn from_snapshot_speaking(s: ReaderSnapshot, speaks: u32) -> Result<LogReader, SnapshotError> {
        if !(format::OLDEST_SNAPSHOT_VERSION..=format::snapshot_version(speaks)).contains(&s.version) {
            return Err(SnapshotError::Version(s.version));
        }
        let mut reader =
            LogReader { position: s.position, started: s.started, ..LogReader::default() }.speaking(speaks);
        let mut last = 0;
        for (seq, record) in &s.epochs {
            if *seq <= last && reader.epoch_seq.is_some() || *seq > s.position {
                return Err(SnapshotError::Invalid(format!("epoch record at position {seq} out of order")));
            }
            reader
                .fence
                .install(record)
                .map_err(|e| SnapshotError::Invalid(format!("epoch record {}: {e:?}", record.epoch)))?;
            reader.epoch_positions.push(*seq);
            reader.epoch_seq = Some(*seq);
            last = *seq;
        }
        if !s.started && (s.position != 0 || !s.epochs.is_empty() || !s.objects.is_empty()) {
            return Err(SnapshotError::Invalid("a reader that read nothing holds state".into()));
        }
        for (id, mut view) in s.objects {
            reader.reparent(&id, &[], &view.def.parents);
            if view.last_seq > s.position || id.is_policy() {
                return Err(SnapshotError::Invalid(format!("{id} was last changed past the snapshot's position")));
            }
            Arc::make_mut(&mut view).key = hrw::key(id.as_str());
            if reader.objects.insert(id.clone(), view).is_some() {
                return Err(SnapshotError::Invalid(format!("{id} appears twice")));
            }
        }
        for (id, seq, at) in s.tombstones {
            if seq > s.position
                || at > s.log_time
                || reader.objects.contains_key(&id)
                || reader.tombstone_order.back().is_some_and(|(last, _)| *last > at)
                || reader.tombstones.insert(id.clone(), (seq, at)).is_some()
            {
                return Err(SnapshotError::Invalid(format!("{id}'s last accepted event out of place")));
            }
            reader.tombstone_order.push_back((at, id));
        }
        for (id, outcome, at) in s.applied {
            if !matches!(outcome, Outcome::Applied { .. }) || reader.applied.insert(id.clone(), outcome).is_some() {
                return Err(SnapshotError::Invalid(format!("command {id}: not one applied outcome")));
            }
            if at > s.log_time || reader.applied_order.back().is_some_and(|(last, _)| *last > at) {
                return Err(SnapshotError::Invalid(format!("command {id}: applied out of log-time order")));
            }
            reader.applied_order.push_back((at, id));
        }
        reader.log_time = s.log_time;
        for (seq, before) in s.marks {
            if seq > s.position
                || before > s.log_time
                || reader.marks.0.back().is_some_and(|(p, t)| *p >= seq || *t > before)
            {
                return Err(SnapshotError::Invalid(format!("time mark at position {seq} out of order")));
            }
            reader.marks.0.push_back((seq, before));
        }
        if reader.marks.0.len() > TimeMarks::MAX {
            return Err(SnapshotError::Invalid("more time marks than a reader keeps".into()));
        }
        reader.counters = s.counters;
        s.policy.validate().map_err(|e| SnapshotError::Invalid(format!("policy: {e}")))?;
        reader.policy = s.policy;
        Ok(reader)
    }

    /// Reads the entry at log position `seq`. Positions must grow; a repeated or older one is skipped.
    pub fn read(&mut self, seq: u64, entry: &LogEntry) -> Read {
        if let Some(not_next) = self.not_next(seq) {
            return not_next;
        }
        if let Some(gated) = self.gate(seq, entry.needs()) {
            return gated;
        }
        self.started = true;
        self.position = seq;
        match entry {
            LogEntry::Epoch(record) => match self.fence.install(record) {
                Ok(()) => {
                    self.epoch_seq = Some(seq);
                    self.epoch_positions.push(seq);
                    Read::EpochInstalled
                }
                Err(e) => {
                    self.counters.epochs_rejected_total += 1;
                    Read::EpochRejected(e)
                }
            },
            LogEntry::Event(event) => {
                let key = hrw::key(event.object.as_str());
                let verdict = self.fence.verdict_for_key(key, event.epoch, &event.writer);
                let effect = if verdict.is_accepted() {
                    let effect = self.fold(seq, key, event);
                    self.note_accepted(seq, &event.object);
                    effect
                } else {
                    self.counters.stale_epoch_total += 1;
                    Effect::None
                };
                Read::Event { verdict, effect }
            }
        }
    }

    /// Passes over the entry at `seq`, which could not be decoded (a foreign writer, a newer version's entry):
    /// every reader gets the same bytes and passes over it alike. Without this, the next position read would
    /// look like a hole.
    pub fn skip(&mut self, seq: u64) -> Read {
        if let Some(not_next) = self.not_next(seq) {
            return not_next;
        }
        self.started = true;
        self.position = seq;
        self.counters.unreadable_total += 1;
        Read::Unreadable
    }

    /// Reads the entry at `seq`, which did not decode but says it needs cluster format `needs`
    /// (`wire::WireError::TooNew`): the reader's stop.
    ///
    /// Past a hole (`seq` beyond the next position) it is what a snapshot at `seq` that this reader cannot
    /// restore says (a snapshot version of a format it does not speak): the reader cannot get past the hole, and
    /// stops there for good.
    pub fn read_too_new(&mut self, seq: u64, needs: u32) -> Read {
        let next = if self.started { self.position + 1 } else { 1 };
        if seq > next && needs > self.speaks.0 && self.blocked.is_none() {
            self.blocked = Some((seq, needs));
            return Read::TooNew { needs };
        }
        if let Some(not_next) = self.not_next(seq) {
            return not_next;
        }
        match self.gate(seq, needs) {
            Some(read) => read,
            // A format this build speaks and still could not decode: garbage that claims a format.
            None => self.skip(seq),
        }
    }

    /// The entry at `seq` (the next position) needs cluster format `needs`: this reader's stop if it does not
    /// speak it. Whatever the record in force says: a reader that speaks the format folds the entry wherever it
    /// stands, so no two readers that read on disagree about it, even one whose records lost their format (a
    /// snapshot written by a build before v0.1.0 keeps records without it). Writers keep to the active format
    /// (`Fence::active_format`), and the simulator checks they do (invariant 13).
    fn gate(&mut self, seq: u64, needs: u32) -> Option<Read> {
        if needs > self.speaks.0 {
            self.blocked = Some((seq, needs));
            return Some(Read::TooNew { needs });
        }
        None
    }

    /// `Duplicate` or `Gap` when `seq` is not the next position to read; `TooNew` for every position once the
    /// reader has stopped at one it cannot read.
    fn not_next(&mut self, seq: u64) -> Option<Read> {
        if let Some((_, needs)) = self.blocked {
            return Some(Read::TooNew { needs });
        }
        if self.started && seq <= self.position {
            self.counters.duplicate_positions_total += 1;
            return Some(Read::Duplicate);
        }
        // Positions start at 0 or 1 and never skip: a jump is a purged range.
        let expected = if self.started { self.position + 1 } else { 1 };
        (seq > expected).then_some(Read::Gap { expected, got: seq })
    }

    /// Moves the log clock to an accepted event's time and forgets the command ids that fell out of the window.
    fn advance_log_time(&mut self, seq: u64, at: Time) {
        if at > self.log_time {
            self.marks.advance(seq, self.log_time, at);
        }
        self.log_time = self.log_time.max(at);
        while let Some((t, id)) = self.tombstone_order.front() {
            if self.log_time.saturating_since(*t) <= TOMBSTONE_HORIZON {
                break;
            }
            if self.tombstones.get(id).is_some_and(|(_, at)| at == t) {
                self.tombstones.remove(id);
            }
            self.tombstone_order.pop_front();
        }
        let Some(window) = self.idempotency_window() else { return };
        while let Some((applied_at, _)) = self.applied_order.front() {
            if self.log_time.saturating_since(*applied_at) <= window {
                break;
            }
            let (_, id) = self.applied_order.pop_front().expect("front exists");
            self.applied.remove(&id);
            self.counters.commands_forgotten_total += 1;
        }
    }

    /// Records `seq` as the last accepted event of `object`, whatever it did: on its view, or as a tombstone.
    fn note_accepted(&mut self, seq: u64, object: &ObjectId) {
        match self.objects.get_mut(object).map(Arc::make_mut) {
            Some(view) => {
                view.last_seq = seq;
                self.tombstones.remove(object);
            }
            None => {
                self.tombstones.insert(object.clone(), (seq, self.log_time));
                self.tombstone_order.push_back((self.log_time, object.clone()));
            }
        }
    }

    fn fold(&mut self, seq: u64, key: u64, event: &Event) -> Effect {
        self.advance_log_time(seq, event.at);
        if let Some(id) = &event.command_id {
            if let Some(first) = self.applied.get(id) {
                self.counters.duplicate_commands_total += 1;
                return Effect::DuplicateCommand(first.clone());
            }
        }
        let applied = |event: &Event| Outcome::Applied {
            command_id: event.command_id.clone().expect("command events carry an id"),
            owner: event.writer.id.clone(),
            epoch: event.epoch,
            seq,
        };
        // The policy's key holds policy changes and nothing else; no object holds them.
        if event.object.is_policy() || matches!(event.body, EventBody::Policy { .. }) {
            let effect = self.fold_policy(event, applied);
            self.remember(event, &effect);
            return effect;
        }
        let effect = match &event.body {
            EventBody::Policy { .. } => unreachable!("folded above"),
            // A held problem sent: who it reached joins the episode's, so its recovery reaches them too. Only for
            // the episode still open (a release that lost a race with the recovery changes nothing).
            EventBody::Released { episode, notify, .. } => match self.objects.get_mut(&event.object) {
                Some(view) if view.episode() == Some(*episode) => {
                    let view = Arc::make_mut(view);
                    view.update_alert(|a| {
                        let reached = crate::policy::Notify { suppressed: None, ..(**notify).clone() };
                        a.sent = Some(a.sent.clone().unwrap_or_default().union(&reached));
                    });
                    view.last_seq = seq;
                    Effect::Folded
                }
                _ => Effect::Ignored,
            },
            EventBody::Put { def } => {
                let before = self.objects.get(&event.object).map(|v| v.def.parents.clone()).unwrap_or_default();
                if before != def.parents {
                    self.reparent(&event.object, &before, &def.parents);
                }
                let view = self.objects.entry(event.object.clone()).or_insert_with(|| {
                    Arc::new(ObjectView {
                        def: def.clone(),
                        key,
                        state: State::Pending,
                        paused: false,
                        acked: false,
                        anchor: event.at,
                        check_requested: None,
                        last_transition: None,
                        last_seq: seq,
                        alert: None,
                    })
                });
                let view = Arc::make_mut(view);
                view.def = def.clone();
                view.anchor = event.at;
                view.last_seq = seq;
                command_effect(event, applied)
            }
            EventBody::Soft { .. } | EventBody::Flapping { .. } => {
                let active = self.fence.active_format();
                match self.objects.get_mut(&event.object) {
                    Some(view) if applies(view, active, event) => {
                        let view = Arc::make_mut(view);
                        apply_result(view, active, seq, event);
                        view.last_seq = seq;
                        Effect::Folded
                    }
                    _ => Effect::Ignored,
                }
            }
            EventBody::Transition { to, from, output, .. } => match self.objects.get_mut(&event.object) {
                Some(view) if view.state != *to && applies(view, self.fence.active_format(), event) => {
                    let active = self.fence.active_format();
                    let view = Arc::make_mut(view);
                    apply_result(view, active, seq, event);
                    // The writer's id from the epoch record in force (an accepted event's writer is one of its
                    // members): one allocation shared by every object it wrote, not one per event decoded.
                    let writer = self
                        .fence
                        .current()
                        .and_then(|r| {
                            r.members.binary_search_by(|m| m.id.cmp(&event.writer.id)).ok().map(|i| &r.members[i])
                        })
                        .map_or_else(|| event.writer.id.clone(), |m| m.id.clone());
                    view.last_transition = Some(Box::new(TransitionInfo {
                        seq,
                        from: *from,
                        to: *to,
                        at: event.at,
                        epoch: event.epoch,
                        writer,
                        output: output.clone(),
                    }));
                    view.state = *to;
                    view.acked = false;
                    view.last_seq = seq;
                    Effect::Transitioned
                }
                _ => Effect::Ignored,
            },
            EventBody::Unack => match self.objects.get_mut(&event.object).map(Arc::make_mut) {
                Some(view) => {
                    view.acked = false;
                    view.last_seq = seq;
                    command_effect(event, applied)
                }
                None => not_found(event),
            },
            EventBody::Delete => {
                if let Some(view) = self.objects.remove(&event.object) {
                    self.reparent(&event.object, &view.def.parents, &[]);
                    command_effect(event, applied)
                } else {
                    not_found(event)
                }
            }
            body @ (EventBody::Pause | EventBody::Resume | EventBody::Ack | EventBody::CheckRequested) => {
                match self.objects.get_mut(&event.object).map(Arc::make_mut) {
                    Some(view) => {
                        match body {
                            EventBody::Pause => view.paused = true,
                            EventBody::Resume => view.paused = false,
                            EventBody::Ack => view.acked = view.state.is_problem(),
                            _ => view.check_requested = Some(event.at),
                        }
                        view.last_seq = seq;
                        command_effect(event, applied)
                    }
                    None => not_found(event),
                }
            }
        };
        self.remember(event, &effect);
        effect
    }

    /// Only applied commands are remembered: a command that found no object may be retried once it exists.
    fn remember(&mut self, event: &Event, effect: &Effect) {
        if let (Some(id), Effect::Command(outcome @ Outcome::Applied { .. })) = (&event.command_id, effect) {
            self.applied.insert(id.clone(), outcome.clone());
            self.applied_order.push_back((self.log_time, id.clone()));
        }
    }

    /// A policy change on the policy's key: taken if the policy after it keeps every rule (`Policy::changed`),
    /// else counted and left out, alike at every reader. Anything else on that key, or a policy change on an
    /// object's key, is ignored.
    fn fold_policy(&mut self, event: &Event, applied: impl Fn(&Event) -> Outcome) -> Effect {
        let EventBody::Policy { change } = &event.body else { return Effect::Ignored };
        if !event.object.is_policy() {
            return Effect::Ignored;
        }
        match self.policy.changed(change, event.at) {
            Ok(policy) => {
                self.policy = Arc::new(policy);
                command_effect(event, applied)
            }
            Err(e) => {
                self.counters.policy_refused_total += 1;
                match &event.command_id {
                    Some(_) => Effect::Command(Outcome::Rejected { reason: e.to_string() }),
                    None => Effect::Ignored,
                }
            }
        }
    }
}

/// Whether a result event takes effect on `view`: a transition written before soft states (attempt 0) on any
/// change of the hard state, as ever; the others only where they follow from the state before them
/// (`alert::follows`), and their flapping only where the rule holds (`alert::flap_allows`).
fn applies(view: &ObjectView, active: u32, event: &Event) -> bool {
    let rules = view.rules(active);
    let now = view.alert_now();
    let flap = match &event.body {
        EventBody::Transition { attempt: 0, flapping: None, .. } => return true,
        EventBody::Flapping { on } => {
            return alert::flap_allows(&rules, view.flapping(), *on, view.changes(), event.at)
        }
        EventBody::Transition { flapping, to: state, .. } | EventBody::Soft { flapping, state, .. } => {
            if !alert::follows(now, &rules, &event.body) {
                return false;
            }
            flapping.map(|on| (on, *state))
        }
        _ => return false,
    };
    flap.is_none_or(|(on, state)| {
        let changes = alert::changes_after(view.changes(), now.raw(), state, event.at, rules.interval);
        alert::flap_allows(&rules, view.flapping(), on, &changes, event.at)
    })
}

/// Folds a result event that `applies`: the soft state, the change times and flapping (the transition's own
/// fields are the caller's).
fn apply_result(view: &mut ObjectView, active: u32, seq: u64, event: &Event) {
    let rules = view.rules(active);
    let before = view.alert_now().raw();
    let hard_before = view.state;
    view.update_alert(|a| {
        let (raw, flapping) = match &event.body {
            EventBody::Transition { to, flapping, notify, .. } => {
                a.soft = None;
                // Episodes are kept once every reader keeps them (format 4), so readers started from a snapshot
                // of a cluster at 3 agree with those that read from the start.
                if active >= crate::policy::FORMAT {
                    // A transition that says nobody where it goes goes to every notifier endpoint, as before.
                    let reached = || {
                        let n = notify.as_deref().cloned().unwrap_or_else(crate::policy::Notify::implicit_only);
                        crate::policy::Notify { suppressed: None, ..n }
                    };
                    (a.episode, a.sent) = match (hard_before.is_problem(), to.is_problem()) {
                        (false, true) => (Some(seq), Some(reached())),
                        // A problem opened before format 4 went to every endpoint, as its recovery will.
                        (true, true) => {
                            let before = a.sent.clone().unwrap_or_else(crate::policy::Notify::implicit_only);
                            (a.episode, Some(before.union(&reached())))
                        }
                        (_, false) => (None, None),
                    };
                }
                (*to, *flapping)
            }
            EventBody::Soft { state, attempt: 0, flapping, .. } => {
                a.soft = None;
                (*state, *flapping)
            }
            EventBody::Soft { state, attempt, of, output, flapping } => {
                a.soft = Some(SoftState {
                    state: *state,
                    attempt: *attempt,
                    of: *of,
                    at: event.at,
                    seq,
                    output: output.clone(),
                });
                (*state, *flapping)
            }
            EventBody::Flapping { on } => (before, Some(*on)),
            _ => return,
        };
        // Change times are kept once soft states are (format 3): before, nothing flaps.
        if active >= 3 {
            a.changes = alert::changes_after(&a.changes, before, raw, event.at, rules.interval);
        }
        if let Some(on) = flapping {
            a.flapping = on;
        }
    });
}

fn command_effect(event: &Event, applied: impl Fn(&Event) -> Outcome) -> Effect {
    match event.command_id {
        Some(_) => Effect::Command(applied(event)),
        // A command-shaped event without an id still takes effect; nobody waits for it.
        None => Effect::Folded,
    }
}

fn not_found(event: &Event) -> Effect {
    match &event.command_id {
        Some(id) => Effect::Command(Outcome::NotFound { command_id: id.clone() }),
        None => Effect::Ignored,
    }
}

/// A reader's state at a log position: what a reader needs to go on from the next position exactly as one that
/// read the whole log before it (the epoch records with their positions, every object's view, the applied
/// command ids, the counters). Its size grows with the objects and the membership changes, not with the events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderSnapshot {
    pub version: u32,
    /// The last position read.
    pub position: u64,
    pub started: bool,
    /// Each installed epoch record with its log position, in order.
    pub epochs: Vec<(u64, EpochRecord)>,
    /// Shared with the reader that took it (a snapshot is a list of pointers until it is encoded).
    pub objects: Vec<(ObjectId, Arc<ObjectView>)>,
    /// Object ids with accepted events and no view (deleted, or never created) with the position and log time
    /// of their last one, oldest first.
    #[serde(default)]
    pub tombstones: Vec<(ObjectId, u64, Time)>,
    /// The remembered command ids with their outcomes and the log time they were applied at, oldest first.
    pub applied: Vec<(CommandId, Outcome, Time)>,
    /// The log clock (see the module documentation).
    pub log_time: Time,
    /// Where the log clock crossed a step, oldest first (compaction by age).
    #[serde(default)]
    pub marks: Vec<(u64, Time)>,
    pub counters: ReaderCounters,
    /// The notification policy (version 4; empty, left out, before).
    #[serde(default, skip_serializing_if = "is_empty_policy")]
    pub policy: Arc<Policy>,
}

fn is_empty_policy(p: &Arc<Policy>) -> bool {
    p.is_empty()
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "snapshot version {0} is not one this build reads (it reads {oldest}..={newest})",
        oldest = format::OLDEST_SNAPSHOT_VERSION,
        newest = format::SNAPSHOT_VERSION
    )]
    Version(u32),
    #[error("invalid snapshot: {0}")]
    Invalid(String),
}

impl PartialEq for LogReader {
    /// Same position, epoch records (with positions), objects, applied command ids and counters.
    fn eq(&self, other: &LogReader) -> bool {
        self.snapshot() == other.snapshot()
    }
}

impl Eq for LogReader {}
