//! The engine: owns objects under the epoch in force, applies and forwards commands, schedules checks and
//! folds their results, proposes epochs when the live set changes.
//!
//! Driving it (the order matters only as written here):
//! 1. `handle(now, input)` for each input, `handle_timeout(now)` when the deadline from `poll_timeout` passes;
//! 2. after either, drain `poll_output()` until `None`, carrying out each output;
//! 3. re-arm the single timer from `poll_timeout()`.
//!
//! Contracts with the driver: `Start` comes first and once (a later one, or one after `Leave`, is ignored);
//! every `Forward` output gets exactly one `ForwardResult`; every `ProposeEpoch` at
//! most one `ProposeResult` (a lost one is retried after `propose_timeout`); every `PutHeartbeat` one
//! `HeartbeatWritten`, in order; log entries arrive in log order, each once (repeats are skipped); `CaughtUp`
//! is sent once the log backlog and the membership snapshot that existed at start have been delivered. After
//! `Leave`, the driver exits once `is_done()`: what was in flight is answered (verdicts within `reply_timeout`,
//! forwards within `forward_timeout`), or `leave_timeout` passed.
//!
//! Ingress: the driver is a member of the ingress queue group while `takes_ingress(now)` holds after a step
//! (ready, not leaving, and its own key surely alive: a heartbeat acknowledged within the last ttl), and hands
//! a submission that asked for a claim in as `Claim`. Each `Claim` gets `Declined` (the submitter sends it
//! again, another engine takes it) or is taken like a `Command`, with `Claimed` before its `Reply` unless the
//! reply is immediate. So a member that was paused or cut off past its ttl claims nothing until its key is
//! back, whatever reached it meanwhile.

use crate::alert;
use crate::compact::{SnapshotConfig, Snapshotter};
use crate::deadlines::Deadlines;
use crate::follow::{Follower, Life, LifeOutput};
use crate::forward::{route, Route};
use crate::hrw;
use crate::io::IoError;
use crate::log::{Effect, LogReader, Read, ReaderSnapshot, Verdict};
use crate::membership::Membership;
use crate::model::{
    Bucket, Command, CommandId, CommandKind, EpochRecord, Event, EventBody, LogEntry, MemberRef, ObjectId, Outcome,
    Probe, State,
};
use crate::schedule;
use crate::time::Time;
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// How long past its timeout an engine waits for a dispatched check's result by default (`check_grace`) before it
/// counts the check as lost and frees the object for its next slot. A worker drops work older than its timeout
/// plus this, unstarted: its result could no longer be used.
pub const CHECK_GRACE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub me: MemberRef,
    /// `-heartbeat-ttl`.
    pub ttl: Duration,
    /// Off with `-coordination memory`: there is only one engine, nothing to forward to.
    pub forwarding: bool,
    /// How long a command may wait for the verdict on its event before the submitter is told `unavailable`.
    pub reply_timeout: Duration,
    /// How late the store reports an expired key, at most (docs/design.md §5: up to ~1.5 s under load).
    pub expiry_lag: Duration,
    /// How long past its timeout a dispatched check may stay unanswered before it counts as lost.
    pub check_grace: Duration,
    /// How long to wait for the result of an epoch proposal before proposing again.
    pub propose_timeout: Duration,
    /// `-idempotency-window`: written into the epoch records this engine proposes (see `log`).
    pub idempotency_window: Duration,
    /// `-snapshot-every`, `-snapshot-interval`, `-log-retention` (see `compact`).
    pub snapshots: SnapshotConfig,
    /// `-check-linger`, `-check-batch`: how checks due are gathered into one dispatch (see [`CheckBatching`]).
    pub check_batching: CheckBatching,
    /// `-hold-format`: the highest cluster format this engine raises the cluster's active one to (its own by
    /// default). Held at the older release's format, a cluster keeps writing only what that release reads, so a
    /// rollback to it stays possible (`docs/upgrading.md`).
    pub hold_format: u32,
}

/// How an engine gathers the checks due into dispatches, so that one wake-up of the engine and of a worker
/// carries many checks instead of one each (a wake-up costs as much as several tcp checks). A check due waits
/// for others only while the batch it gathers is worth it: when at least a quarter of `batch` checks fall due
/// within `linger` of it, until the `batch`-th is due or it has waited `linger`, whichever comes first; when
/// fewer (`n`), only `linger` x (n / (batch / 4))², a small part of it; then every check due by then leaves
/// together. So no check starts more than `linger` late on the engine's account; at high rates a dispatch leaves
/// as soon as it is full, and at low rates, where a batch would gather a few checks and save a few wake-ups, a
/// check barely waits (with `-check-linger 50ms` and `-check-batch 128`: at 100 checks a second 1 ms, not 50; from
/// about 640 a second on, as before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckBatching {
    /// The longest a check due waits for others; zero dispatches each check at its own time.
    pub linger: Duration,
    /// How many checks due make a dispatch leave before the linger (at least 1).
    pub batch: usize,
}

impl CheckBatching {
    /// What the core does unless told otherwise: every check at its own time.
    pub const NONE: CheckBatching = CheckBatching { linger: Duration::ZERO, batch: 1 };
    /// What the `jaque` binary ships with (`-check-linger 50ms`, `-check-batch 128`).
    pub const SHIPPED: CheckBatching = CheckBatching { linger: Duration::from_millis(50), batch: 128 };

    /// When the checks due at `due` (ascending times) should be dispatched: when the `batch`-th of them is due or
    /// the first has waited `linger`, if at least a quarter batch falls due within the linger; else after
    /// `linger` x (n / quarter)² for the `n` that do.
    pub fn dispatch_at(&self, mut due: impl Iterator<Item = Time>) -> Option<Time> {
        let first = due.next()?;
        if self.linger.is_zero() || self.batch <= 1 {
            return Some(first);
        }
        let latest = first + self.linger;
        let quarter = (self.batch / 4).max(1);
        let mut n = 1;
        for t in due.take_while(|t| *t <= latest) {
            n += 1;
            if n == self.batch {
                return Some(t);
            }
        }
        if n >= quarter {
            return Some(latest);
        }
        let wait = crate::time::millis(self.linger) * (n * n) as u64 / (quarter * quarter) as u64;
        Some(first + Duration::from_millis(wait))
    }
}

impl EngineConfig {
    pub fn new(me: MemberRef, ttl: Duration) -> EngineConfig {
        EngineConfig {
            me,
            ttl,
            forwarding: true,
            reply_timeout: Duration::from_secs(5),
            expiry_lag: Duration::from_millis(1500),
            check_grace: CHECK_GRACE,
            propose_timeout: Duration::from_secs(2),
            idempotency_window: Duration::from_secs(24 * 3600),
            snapshots: SnapshotConfig::default(),
            check_batching: CheckBatching::NONE,
            hold_format: crate::format::CLUSTER_FORMAT,
        }
    }

    /// ttl + ttl/3 + expiry lag: how long an owner may have been dead before its objects moved.
    pub fn takeover_window(&self) -> Duration {
        self.ttl + self.ttl / 3 + self.expiry_lag
    }

    /// How long a driver waits for the owner's answer to a forward: the owner answers every command within
    /// `reply_timeout`, so a forward unanswered for longer lost its owner (dead or paused mid-request).
    pub fn forward_timeout(&self) -> Duration {
        self.reply_timeout + Duration::from_secs(1)
    }

    /// How long a leaving engine waits for what it has in flight before it is done anyway: everything is
    /// answered sooner (a verdict or `unavailable` within `reply_timeout`, a forward within `forward_timeout`)
    /// by a driver that keeps its contract; this bounds the leave of one that does not.
    pub fn leave_timeout(&self) -> Duration {
        self.forward_timeout() + Duration::from_secs(1)
    }

    /// How long a caller (the ui) waits for a write's outcome: longer than a forward, so the engine's own
    /// `unavailable` for a lost forward reaches the caller before the caller gives up.
    pub fn write_timeout(&self) -> Duration {
        self.forward_timeout() + Duration::from_secs(1)
    }
}

/// A driver's handle for a caller waiting on a command (an HTTP request, a NATS reply subject).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReplyTo(pub u64);

/// Names one `Forward` so its result finds the waiting caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForwardId(pub u64);

/// Check work for a worker.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckWork {
    pub check_id: u64,
    pub object: ObjectId,
    pub probe: Probe,
    pub timeout_ms: u64,
}

impl CheckWork {
    /// How long a worker lets the check run (at least 1 ms), and from which its backlog counts how long the
    /// work is worth starting (`backlog::Backlog::useful_for`).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

/// A worker's answer to one `CheckWork`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckResult {
    pub check_id: u64,
    pub object: ObjectId,
    pub state: State,
    #[serde(default)]
    pub output: String,
}

impl CheckResult {
    /// How much of a check's output a transition keeps (bytes, cut on a character boundary).
    pub const OUTPUT_KEPT: usize = 1024;

    /// This result with no more output than a transition keeps: what a worker sends, so that a message of
    /// results stays small whatever the probes printed.
    pub fn with_output_kept(mut self) -> CheckResult {
        self.output = truncate(self.output, Self::OUTPUT_KEPT);
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The inputs every member that follows the log takes (`Life::Leave`: delete the key, stop scheduling,
    /// answer what is in flight).
    Life(Life),
    /// The compare-and-set append of the proposal for `epoch` won (`won`) or lost to another proposal.
    ProposeResult {
        epoch: u64,
        won: bool,
    },
    /// An `Append` failed; it may still land (a timed-out publish), so this is not a verdict.
    AppendFailed {
        event: Event,
        error: IoError,
    },
    /// A command from a local caller, the ingress queue group (hop 0) or a forward (hop 1).
    Command {
        reply: ReplyTo,
        cmd: Command,
    },
    /// A submission (hop 0) whose submitter asked for a claim: `Declined` at once when this engine cannot take
    /// writes now, else taken as a `Command` with `Claimed` first.
    Claim {
        reply: ReplyTo,
        cmd: Command,
    },
    ForwardResult {
        id: ForwardId,
        result: Result<Outcome, IoError>,
    },
    CheckResult(CheckResult),
    /// The store's answer to `WriteSnapshot` for the snapshot at `position`.
    SnapshotWritten {
        position: u64,
        result: Result<(), IoError>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// What every member that follows the log asks of its driver (heartbeats, a snapshot past a hole).
    Life(LifeOutput),
    /// Append `record` only if the log's last epoch record is still the one at `after_seq` (compare-and-set).
    ProposeEpoch {
        record: EpochRecord,
        after_seq: Option<u64>,
    },
    /// Append an event to the log. Its verdict comes back when the log delivers it.
    Append(Event),
    /// Request/reply to `jaque.cmd.<to.id>` with the command (hop 1).
    Forward {
        id: ForwardId,
        to: MemberRef,
        cmd: Command,
    },
    Reply {
        to: ReplyTo,
        outcome: Outcome,
    },
    /// This engine took the `Claim` of `to`: its `Reply` follows.
    Claimed {
        to: ReplyTo,
    },
    /// This engine does not take the `Claim` of `to` (the one answer it gets): the submitter sends it again.
    Declined {
        to: ReplyTo,
        reason: &'static str,
    },
    Dispatch(CheckWork),
    /// Store this snapshot (taken at its `position`); answer with `SnapshotWritten`.
    WriteSnapshot(Box<ReaderSnapshot>),
    /// Remove the log's events below position `below` (a snapshot past them is durable).
    Purge {
        below: u64,
    },
}

/// Which sub-machine set the deadline `poll_timeout` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    Heartbeat,
    CheckDue,
    CheckLost,
    ReplyDeadline,
    ProposeRetry,
    Snapshot,
    /// A leaving engine's bound on what it still has in flight.
    LeaveDeadline,
    /// A silence or maintenance window starts or ends: held problems may be released.
    PolicyChange,
}

/// Engine counters (the page's metrics and the ones an operator needs next to them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Held problems sent once nothing held them (`EventBody::Released`).
    pub releases_written: u64,
    pub forwarded_sent: u64,
    pub forwarded_error: u64,
    pub not_owned: u64,
    pub commands_applied: u64,
    pub commands_duplicate: u64,
    pub commands_rejected: u64,
    pub commands_unavailable: u64,
    pub commands_rerouted: u64,
    /// Submissions that asked for a claim: taken, and declined (this engine could not take writes then).
    pub commands_claimed: u64,
    pub commands_declined: u64,
    pub epochs_proposed: u64,
    pub epochs_won: u64,
    pub checks_dispatched: u64,
    pub checks_lost: u64,
    /// Slots passed over because the object's previous check was still running: past saturation checks
    /// are skipped and counted here, never queued.
    pub checks_skipped_busy: u64,
    /// How late each dispatched check left against the slot it was scheduled for.
    pub check_start_lateness: Lateness,
    pub check_results_dropped: u64,
    /// Hard transitions appended (`crate::alert`).
    pub transitions_written: u64,
    /// Soft states and flapping starts and ends appended.
    pub soft_written: u64,
    /// Results not logged because the object's previous result event was still on its way to the log.
    pub results_held: u64,
    pub appends_failed: u64,
    pub snapshots_written: u64,
    pub snapshots_failed: u64,
    pub purges: u64,
    pub restores: u64,
    /// Holes found in the log (purged events this engine had not read): each asks for a snapshot.
    pub log_gaps: u64,
}

/// A histogram of how late checks are dispatched against their slot (`now - slot` when `run_due` fires), in
/// milliseconds: the shell exposes it as `jaque_engine_check_start_lateness_seconds`. Fixed buckets, so it
/// costs a few counters whatever the load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Checks whose lateness was at most `LATENESS_BOUNDS_MS[i]` and more than the bound before it; the last
    /// counts those later than every bound.
    pub buckets: [u64; LATENESS_BOUNDS_MS.len() + 1],
    pub count: u64,
    pub sum_ms: u64,
    /// The largest lateness seen, in milliseconds (0 before any).
    pub max_ms: u64,
}

/// Upper bounds of `Lateness`'s buckets, milliseconds: fine below the 100 ms a healthy engine should keep to,
/// coarse up to the intervals where a late check overlaps its next slot.
pub const LATENESS_BOUNDS_MS: [u64; 14] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000];

impl Lateness {
    pub fn record(&mut self, late: Duration) {
        let ms = crate::time::millis(late);
        let i = LATENESS_BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(LATENESS_BOUNDS_MS.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.max_ms = self.max_ms.max(ms);
    }
}

/// A command waiting for the verdict on its event.
#[derive(Clone, Debug)]
struct Awaiting {
    waiters: Vec<(ReplyTo, Command)>,
    deadline: Time,
}

/// An object this engine owns under the epoch in force: its next slot, and what its checks have going, kept
/// apart only while something is (most objects, most of the time, have nothing: an engine holds every object it
/// owns, so this entry is kept small).
#[derive(Clone, Debug)]
struct OwnedObject {
    next: Option<Time>,
    busy: Option<Box<Busy>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Busy {
    inflight: Option<u64>,
    /// A result event this engine appended and has not read back yet: the time after which it is presumed lost.
    /// One at a time: a result that arrives meanwhile is not logged (`EngineCounters::results_held`), so each
    /// result event is decided from the log's state, as the fold judges it (`alert::follows`).
    written: Option<Time>,
    /// The next due time was set by a check-now, not by the slot grid.
    requested: bool,
    /// A check-now arrived while a check was in flight: check again when it returns.
    rerun: bool,
}

impl Busy {
    const IDLE: Busy = Busy { inflight: None, written: None, requested: false, rerun: false };
}

impl OwnedObject {
    fn new(next: Option<Time>) -> OwnedObject {
        OwnedObject { next, busy: None }
    }

    fn busy(&self) -> &Busy {
        self.busy.as_deref().unwrap_or(&Busy::IDLE)
    }

    /// Changes what its checks have going: held apart while it is anything but idle.
    fn update<R>(&mut self, f: impl FnOnce(&mut Busy) -> R) -> R {
        let mut b = *self.busy();
        let r = f(&mut b);
        match &mut self.busy {
            _ if b == Busy::IDLE => self.busy = None,
            Some(held) => **held = b,
            None => self.busy = Some(Box::new(b)),
        }
        r
    }
}

pub struct Engine {
    cfg: EngineConfig,
    /// Membership of the engine bucket and the log: the lifecycle every log-reading role shares.
    follow: Follower,
    outputs: VecDeque<Output>,

    waiting: BTreeMap<CommandId, Awaiting>,
    reply_deadlines: Deadlines<CommandId>,
    forwards: BTreeMap<ForwardId, ReplyTo>,
    next_forward: u64,

    owned: BTreeMap<ObjectId, OwnedObject>,
    due: Deadlines<ObjectId>,
    checks: BTreeMap<u64, (ObjectId, Time)>,
    check_deadlines: Deadlines<u64>,
    next_check: u64,

    proposing: Option<(u64, Time)>,
    snapshots: Snapshotter,
    /// Leaving: when it is done even with something still in flight (`EngineConfig::leave_timeout`); taken
    /// off when it passes.
    leave_deadline: Option<Time>,
    /// Held problems this engine wrote a release of that has not come back from the log yet (`maybe_release`),
    /// with who the release goes to: a recovery decided meanwhile goes there too.
    releasing: BTreeMap<ObjectId, crate::policy::Notify>,
    /// When a silence or maintenance window next starts or ends (`Policy::next_change`): the held problems of
    /// the objects it owns are looked at again then.
    policy_timer: Option<Time>,
    pub counters: EngineCounters,
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        Engine::with_reader(cfg, LogReader::new())
    }

    /// An engine whose reader starts from a snapshot (`LogReader::from_snapshot`): the driver follows the log
    /// from the position after `reader.position()`.
    pub fn with_reader(cfg: EngineConfig, reader: LogReader) -> Engine {
        let snapshots = Snapshotter::new(cfg.snapshots.clone(), reader.position());
        let follow = Follower::with_reader(Bucket::Engine, cfg.me.clone(), cfg.ttl, reader);
        Engine {
            snapshots,
            cfg,
            follow,
            outputs: VecDeque::new(),
            waiting: BTreeMap::new(),
            reply_deadlines: Deadlines::new(),
            forwards: BTreeMap::new(),
            next_forward: 0,
            owned: BTreeMap::new(),
            due: Deadlines::new(),
            checks: BTreeMap::new(),
            check_deadlines: Deadlines::new(),
            next_check: 0,
            proposing: None,
            leave_deadline: None,
            releasing: BTreeMap::new(),
            policy_timer: None,
            counters: EngineCounters::default(),
        }
    }

    // ---- getters ----

    pub fn me(&self) -> &MemberRef {
        &self.cfg.me
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn reader(&self) -> &LogReader {
        self.follow.reader()
    }

    pub fn membership(&self) -> &Membership {
        self.follow.membership()
    }

    pub fn epoch(&self) -> u64 {
        self.follow.reader().epoch()
    }

    /// Ready to take commands: caught up with the log and an epoch record is in force.
    pub fn is_ready(&self) -> bool {
        self.follow.is_caught_up() && self.follow.reader().epoch() > 0 && self.follow.hole().is_none()
    }

    /// The position a snapshot has to reach for this engine to read past a hole in the log, if it waits for
    /// one.
    pub fn needs_snapshot(&self) -> Option<u64> {
        self.follow.hole()
    }

    pub fn is_leaving(&self) -> bool {
        self.follow.is_leaving()
    }

    /// Objects owned under the epoch in force.
    pub fn owned_count(&self) -> usize {
        self.owned.len()
    }

    pub fn owns(&self, object: &ObjectId) -> bool {
        self.owned.contains_key(object)
    }

    pub fn owned_objects(&self) -> impl Iterator<Item = &ObjectId> {
        self.owned.keys()
    }

    /// Why this engine would decline a claim at `now`, or `None` when it takes writes: it is ready (caught up,
    /// an epoch in force, no hole), not leaving, and its own key is surely alive (a heartbeat the store
    /// acknowledged was sent within the last ttl). The last one is what a pause, a cut or a store that stopped
    /// answering takes away: past its ttl the others count this engine dead and may have moved its objects, so
    /// what it would claim it could only forward by a view of the cluster that is out of date.
    pub fn claim_refusal(&self, now: Time) -> Option<&'static str> {
        if self.follow.is_leaving() {
            Some("the engine is leaving")
        } else if !self.follow.is_caught_up() {
            Some("the engine is reading the log")
        } else if self.follow.hole().is_some() {
            Some("the engine waits for a snapshot past a hole in the log")
        } else if self.follow.reader().epoch() == 0 {
            Some("no epoch yet")
        } else if !self.follow.lease().holds(now) {
            Some("the engine is out of touch: no heartbeat of its own acknowledged within its ttl")
        } else {
            None
        }
    }

    /// Whether the driver should be a member of the ingress queue group at `now` (see the module doc).
    pub fn takes_ingress(&self, now: Time) -> bool {
        self.claim_refusal(now).is_none()
    }

    /// Nothing in flight that a caller waits for.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.forwards.is_empty()
    }

    /// A leaving engine has answered what it had in flight, or its leave deadline passed: the driver exits.
    pub fn is_done(&self) -> bool {
        self.follow.is_leaving() && (self.is_idle() || self.leave_deadline.is_none())
    }

    /// When the object's next check is due, if it is owned here and scheduled.
    pub fn next_check(&self, object: &ObjectId) -> Option<Time> {
        self.owned.get(object).and_then(|o| o.next)
    }

    // ---- inputs ----

    pub fn handle(&mut self, now: Time, input: Input) {
        match input {
            Input::Life(life) => self.handle_life(now, life),
            Input::ProposeResult { epoch, won } => {
                if self.proposing.is_some_and(|(e, _)| e == epoch) {
                    self.proposing = None;
                }
                if won {
                    self.counters.epochs_won += 1;
                }
                // A lost proposal waits for the winner to arrive through the log, which re-evaluates.
            }
            Input::AppendFailed { event, error } => self.handle_append_failed(event, error),
            Input::Command { reply, cmd } => self.submit(now, reply, cmd),
            Input::Claim { reply, cmd } => self.claim(now, reply, cmd),
            Input::ForwardResult { id, result } => {
                let Some(reply) = self.forwards.remove(&id) else { return };
                let outcome = match result {
                    Ok(outcome) => {
                        self.counters.forwarded_sent += 1;
                        outcome
                    }
                    Err(error) => {
                        self.counters.forwarded_error += 1;
                        Outcome::Unavailable { reason: format!("forward to the owner failed: {error}") }
                    }
                };
                self.reply(reply, outcome);
            }
            Input::CheckResult(result) => self.handle_check_result(now, result),
            Input::SnapshotWritten { position, result } => {
                if result.is_ok() {
                    self.counters.snapshots_written += 1;
                } else {
                    self.counters.snapshots_failed += 1;
                }
                if let Some(below) = self.snapshots.written(position, result.is_ok()) {
                    self.counters.purges += 1;
                    self.outputs.push_back(Output::Purge { below });
                }
            }
        }
        self.maybe_snapshot(now);
        self.drain_membership();
    }

    fn handle_life(&mut self, now: Time, life: Life) {
        match life {
            Life::Start => {
                // Once: a restart is a new Engine with a new incarnation, and a left engine stays left.
                self.follow.start(now);
            }
            Life::CaughtUp => {
                self.follow.catch_up();
                self.recompute_ownership(now);
                self.maybe_propose(now);
            }
            Life::Member(obs) => {
                self.follow.observe(now, &obs);
                self.maybe_propose(now);
            }
            Life::Log { seq, entry } => self.handle_log(now, seq, entry),
            Life::LogUnreadable { seq } => {
                let had_hole = self.follow.hole().is_some();
                self.follow.skip(seq);
                self.note_hole(had_hole);
            }
            Life::LogTooNew { seq, needs } => {
                let had_hole = self.follow.hole().is_some();
                let read = self.follow.read_too_new(seq, needs);
                self.note_hole(had_hole);
                if matches!(read, Read::TooNew { .. }) {
                    self.handle_life(now, Life::Leave);
                }
            }
            Life::HeartbeatWritten { ok } => self.follow.heartbeat_written(ok),
            Life::Restore(reader) => self.restore(now, *reader),
            Life::Leave => {
                if !self.follow.is_leaving() {
                    self.leave_deadline = Some(now + self.cfg.leave_timeout());
                }
                self.follow.leave();
                // Stop checking: our objects are about to move to the others, whose first checks would race ours.
                self.owned.clear();
                self.due.clear();
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.leave_deadline.is_some_and(|t| t <= now) {
            // Done, whatever is still in flight (`is_done`).
            self.leave_deadline = None;
        }
        let heartbeat_due = self.follow.handle_timeout(now);
        if heartbeat_due {
            // Also the periodic chance to retry a proposal whose trigger was missed.
            self.maybe_propose(now);
            if let Some(covering) = self.follow.hole() {
                self.outputs.push_back(Output::Life(LifeOutput::NeedSnapshot { covering }));
            }
        }
        if self.proposing.is_some_and(|(_, deadline)| deadline <= now) {
            self.proposing = None;
            self.maybe_propose(now);
        }
        while let Some((_, id)) = self.reply_deadlines.pop_due(now) {
            if let Some(w) = self.waiting.remove(&id) {
                for (reply, _) in w.waiters {
                    self.reply(reply, Outcome::Unavailable { reason: "no verdict on the command in time".into() });
                }
            }
        }
        while let Some((_, check_id)) = self.check_deadlines.pop_due(now) {
            if let Some((object, _)) = self.checks.remove(&check_id) {
                self.counters.checks_lost += 1;
                if let Some(o) = self.owned.get_mut(&object) {
                    if o.busy().inflight == Some(check_id) {
                        o.update(|b| b.inflight = None);
                    }
                }
            }
        }
        while let Some((t, object)) = self.due.pop_due(now) {
            self.run_due(now, t, object);
        }
        if self.policy_timer.is_some_and(|t| t <= now) {
            self.release_all(now);
        }
        self.maybe_snapshot(now);
        self.drain_membership();
    }

    // ---- outputs ----

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<(Time, Timer)> {
        let candidates = [
            (self.follow.poll_timeout(), Timer::Heartbeat),
            (self.cfg.check_batching.dispatch_at(self.due.times()), Timer::CheckDue),
            (self.check_deadlines.first(), Timer::CheckLost),
            (self.reply_deadlines.first(), Timer::ReplyDeadline),
            (self.proposing.map(|(_, t)| t), Timer::ProposeRetry),
            (self.snapshot_deadline(), Timer::Snapshot),
            (self.leave_deadline.filter(|_| !self.is_idle()), Timer::LeaveDeadline),
            (self.policy_timer, Timer::PolicyChange),
        ];
        candidates.into_iter().filter_map(|(t, timer)| t.map(|t| (t, timer))).min()
    }

    // ---- snapshots ----

    fn is_snapshot_writer(&self) -> bool {
        self.is_ready() && !self.follow.is_leaving() && Snapshotter::is_writer(self.follow.reader(), &self.cfg.me)
    }

    fn snapshot_deadline(&self) -> Option<Time> {
        self.is_snapshot_writer().then(|| self.snapshots.deadline(self.follow.reader())).flatten()
    }

    fn maybe_snapshot(&mut self, now: Time) {
        if !self.is_snapshot_writer() {
            return;
        }
        if let Some(snapshot) = self.snapshots.poll(now, self.follow.reader()) {
            self.outputs.push_back(Output::WriteSnapshot(Box::new(snapshot)));
        }
    }

    /// Jumps to a reader restored from a snapshot ahead of ours: what the hole held is in it. Every owned
    /// object is taken up again from the restored state (the hole may have paused, changed or deleted any), and
    /// a command waiting for a verdict that the hole held is answered from the restored record of applied ids.
    fn restore(&mut self, now: Time, reader: LogReader) {
        let position = reader.position();
        if !self.follow.restore(reader) {
            return;
        }
        self.counters.restores += 1;
        self.snapshots.restored(position);
        if self.proposing.is_some_and(|(e, _)| e <= self.follow.reader().epoch()) {
            self.proposing = None;
        }
        let answered: Vec<(CommandId, Outcome)> = self
            .waiting
            .keys()
            .filter_map(|id| self.follow.reader().applied(id).map(|o| (id.clone(), o.clone())))
            .collect();
        for (id, outcome) in answered {
            if let Some(w) = self.take_awaiting(&id) {
                for (reply, _) in w.waiters {
                    self.reply(reply, outcome.clone());
                }
            }
        }
        let held: Vec<ObjectId> = self.owned.keys().cloned().collect();
        for id in held {
            self.lose(id);
        }
        self.recompute_ownership(now);
        self.maybe_propose(now);
    }

    // ---- membership and epochs ----

    fn drain_membership(&mut self) {
        while let Some(o) = self.follow.poll_membership() {
            self.outputs.push_back(Output::Life(LifeOutput::Membership(o)));
        }
    }

    /// Proposes the next epoch when this engine's view of the live set is newer than the record in force and
    /// differs from it. Compare-and-set on the log makes exactly one proposal per epoch win.
    fn maybe_propose(&mut self, now: Time) {
        if !self.follow.is_caught_up() || self.follow.is_leaving() || self.proposing.is_some() {
            return;
        }
        let view = self.follow.membership().view();
        if view.is_empty() {
            return;
        }
        let reader = self.follow.reader();
        // The cluster's active format rises to the lowest any live member of any bucket speaks, as far as this
        // engine speaks and is let (`-hold-format`); it never goes down (the fence keeps the highest).
        let active = reader.fence().active_format();
        let speaks = reader.speaks().min(self.cfg.hold_format);
        let format = self.follow.lowest_format().unwrap_or(active).min(speaks).max(active);
        if let Some(rec) = reader.fence().current() {
            // A view older than the record's must not propose: it would only undo a change it has not seen.
            let same_members = view.rev() <= rec.members_rev || view.equals(&rec.members);
            if view.rev() < rec.members_rev || same_members && format == active {
                return;
            }
        }
        let record = EpochRecord {
            epoch: reader.epoch() + 1,
            members: view.members(),
            members_rev: view.rev(),
            idempotency_window_ms: Some(u64::try_from(self.cfg.idempotency_window.as_millis()).unwrap_or(u64::MAX)),
            // A build of format 1 names none (as builds before v0.1.0 wrote their records).
            format: if reader.speaks() > crate::format::OLDEST_CLUSTER_FORMAT {
                format
            } else {
                crate::format::OLDEST_CLUSTER_FORMAT
            },
        };
        self.proposing = Some((record.epoch, now + self.cfg.propose_timeout));
        self.counters.epochs_proposed += 1;
        self.outputs.push_back(Output::ProposeEpoch { record, after_seq: self.follow.reader().epoch_seq() });
    }

    /// Brings the set of owned objects in line with the epoch in force.
    fn recompute_ownership(&mut self, now: Time) {
        if !self.follow.is_caught_up() || self.follow.is_leaving() {
            return;
        }
        let Some(own) = self.follow.reader().fence().current_ownership() else { return };
        let me = &self.cfg.me;
        let (mut gained, mut lost) = (Vec::new(), Vec::new());
        // Both maps are sorted by id and `owned` should be a subset of the objects: walk them side by side
        // instead of looking every object up (this runs over every object on every epoch change).
        let mut held = self.owned.keys().peekable();
        for (id, view) in self.follow.reader().objects() {
            // Held ids that sort before this object are no longer in the log (deleted): they cannot be owned.
            while let Some(gone) = held.next_if(|h| *h < id) {
                lost.push(gone.clone());
            }
            let is_held = held.next_if(|h| *h == id).is_some();
            let mine = own.is_owner(view.key, me);
            if mine != is_held {
                if mine { &mut gained } else { &mut lost }.push(id.clone());
            }
        }
        lost.extend(held.cloned());
        for id in lost {
            self.lose(id);
        }
        let window = self.cfg.takeover_window();
        let (active, spread) = (self.follow.reader().fence().active_format(), self.spread());
        for id in gained {
            let view = &self.follow.reader().objects()[&id];
            let next = (!view.paused).then(|| {
                let due = schedule::Grid::of(view, spread).takeover_due(now, window);
                // A soft state goes on at its retry interval from its last attempt, whoever made it.
                match view.soft() {
                    Some(soft) => due.min((soft.at + view.rules(active).retry_interval).max(now)),
                    None => due,
                }
            });
            self.own(id, next);
        }
        // Held problems of what it owns now, and the timer at the next start or end of a silence or window: an
        // engine that started from a snapshot, or took objects over, has seen no policy change to set them.
        self.release_all(now);
    }

    fn own(&mut self, id: ObjectId, next: Option<Time>) {
        if let Some(t) = next {
            self.due.insert(t, id.clone());
        }
        self.owned.insert(id, OwnedObject::new(next));
    }

    fn lose(&mut self, id: ObjectId) {
        if let Some(o) = self.owned.remove(&id) {
            if let Some(t) = o.next {
                self.due.remove(t, &id);
            }
            // An in-flight check's result will find no owned object and be dropped.
        }
    }

    fn set_next(&mut self, id: &ObjectId, next: Option<Time>) {
        if let Some(o) = self.owned.get_mut(id) {
            if let Some(t) = o.next.take() {
                self.due.remove(t, id);
            }
            if let Some(t) = next {
                self.due.insert(t, id.clone());
            }
            o.next = next;
        }
    }

    // ---- the log ----

    /// A hole just found in the log: ask for a snapshot past it at once (and at every heartbeat after).
    fn note_hole(&mut self, had_hole: bool) {
        if let (false, Some(covering)) = (had_hole, self.follow.hole()) {
            self.counters.log_gaps += 1;
            self.outputs.push_back(Output::Life(LifeOutput::NeedSnapshot { covering }));
        }
    }

    fn handle_log(&mut self, now: Time, seq: u64, entry: LogEntry) {
        let had_hole = self.follow.hole().is_some();
        let read = self.follow.read(seq, &entry);
        self.note_hole(had_hole);
        match read {
            Read::Duplicate | Read::EpochRejected(_) | Read::Gap { .. } | Read::Unreadable => {}
            // An entry this build cannot read, in a cluster that allowed it: the objects this engine owns go to
            // engines that read on. It leaves (`is_done`), and its driver says why (`LogReader::blocked_reason`).
            Read::TooNew { .. } => self.handle_life(now, Life::Leave),
            Read::EpochInstalled => {
                if self.proposing.is_some_and(|(e, _)| e <= self.follow.reader().epoch()) {
                    self.proposing = None;
                }
                self.recompute_ownership(now);
                self.maybe_propose(now);
            }
            Read::Event { verdict, effect } => {
                let LogEntry::Event(event) = entry else { unreachable!("events read as events") };
                self.after_event(now, event, verdict, effect);
            }
        }
    }

    fn after_event(&mut self, now: Time, event: Event, verdict: Verdict, effect: Effect) {
        if matches!(event.body, EventBody::Released { .. }) && event.writer == self.cfg.me {
            self.releasing.remove(&event.object);
        }
        if let Some(id) = &event.command_id {
            match (&verdict, effect.clone()) {
                (Verdict::Accepted, Effect::Command(outcome) | Effect::DuplicateCommand(outcome)) => {
                    if let Some(w) = self.take_awaiting(id) {
                        if matches!(outcome, Outcome::Applied { .. }) {
                            self.counters.commands_applied += 1;
                        }
                        for (reply, _) in w.waiters {
                            self.reply(reply, outcome.clone());
                        }
                    }
                }
                // Our own event was fenced: the command was not applied. Route it again under the new epoch
                // (a hop-0 command may still be forwarded once; a hop-1 one ends as not owned).
                (Verdict::Stale(_), _) if event.writer == self.cfg.me => {
                    if let Some(w) = self.take_awaiting(id) {
                        for (reply, cmd) in w.waiters {
                            self.counters.commands_rerouted += 1;
                            self.route(now, reply, cmd);
                        }
                    }
                }
                _ => {}
            }
        }
        // Our own result event is back: from now on the log's state is the one to decide from.
        if event.body.is_result() && event.writer == self.cfg.me {
            if let Some(o) = self.owned.get_mut(&event.object) {
                o.update(|b| b.written = None);
            }
            // A release it held up (`maybe_release`) may go now.
            if verdict.is_accepted() && self.follow.is_caught_up() {
                self.maybe_release(now, &event.object);
            }
        }
        // Held problems that may go out now: the children of an object that recovered, every held problem after
        // a policy change (a silence expired, a window deleted).
        if verdict.is_accepted() && self.follow.is_caught_up() {
            match (&event.body, &effect) {
                (EventBody::Transition { to, .. }, Effect::Transitioned) if !to.is_problem() => {
                    let children: Vec<ObjectId> = self.follow.reader().children(&event.object).cloned().collect();
                    for child in children {
                        self.maybe_release(now, &child);
                    }
                }
                (EventBody::Policy { .. }, Effect::Command(Outcome::Applied { .. }) | Effect::Folded) => {
                    self.release_all(now)
                }
                _ => {}
            }
        }
        // Only an event that changed the object moves its schedule: a repeated command id, a command that found
        // no object and a fenced event changed nothing.
        let changed = matches!(effect, Effect::Command(Outcome::Applied { .. }) | Effect::Folded);
        if !verdict.is_accepted() || !changed || !self.owned.contains_key(&event.object) && !self.may_gain(&event) {
            return;
        }
        let spread = self.spread();
        match &event.body {
            EventBody::Put { .. } if !self.owned.contains_key(&event.object) => {
                // A new object: owned here if HRW says so.
                if let Some(view) = self.follow.reader().object(&event.object) {
                    let next = (!view.paused).then(|| schedule::Grid::of(view, spread).first());
                    self.own(event.object.clone(), next);
                }
            }
            EventBody::Put { .. } => {
                let next = self
                    .follow
                    .reader()
                    .object(&event.object)
                    .filter(|v| !v.paused)
                    .map(|v| schedule::Grid::of(v, spread).first());
                self.set_next(&event.object, next);
            }
            EventBody::Delete => self.lose(event.object.clone()),
            EventBody::Pause => self.set_next(&event.object, None),
            EventBody::Resume => {
                let next = self
                    .follow
                    .reader()
                    .object(&event.object)
                    .map(|v| schedule::Grid::of(v, spread).slot_after(now - Duration::from_millis(1)));
                self.set_next(&event.object, next);
            }
            EventBody::CheckRequested => {
                let paused = self.follow.reader().object(&event.object).is_none_or(|v| v.paused);
                if !paused {
                    self.set_next(&event.object, Some(now));
                    if let Some(o) = self.owned.get_mut(&event.object) {
                        o.update(|b| b.requested = true);
                    }
                }
            }
            EventBody::Transition { .. }
            | EventBody::Soft { .. }
            | EventBody::Flapping { .. }
            | EventBody::Ack
            | EventBody::Unack
            | EventBody::Released { .. } => {}
            EventBody::Policy { .. } => {}
        }
    }

    /// Whether check slots are spread over the interval by a hash of the object's id (`schedule::Grid`): once the
    /// cluster's active format has them, so every engine of a mixed cluster computes the same slots.
    fn spread(&self) -> bool {
        self.follow.reader().fence().active_format() >= schedule::SPREAD_FORMAT
    }

    /// Whether an accepted event creates an object this engine owns.
    fn may_gain(&self, event: &Event) -> bool {
        matches!(event.body, EventBody::Put { .. })
            && self.follow.is_caught_up()
            && !self.follow.is_leaving()
            && self
                .follow
                .reader()
                .fence()
                .current_ownership()
                .is_some_and(|own| own.is_owner(hrw::key(event.object.as_str()), &self.cfg.me))
    }

    fn handle_append_failed(&mut self, event: Event, _error: IoError) {
        self.counters.appends_failed += 1;
        match (&event.command_id, &event.body) {
            (Some(id), _) => {
                // The event may still land; the submitter learns `unavailable` and may retry with the same id.
                if let Some(w) = self.take_awaiting(id) {
                    for (reply, _) in w.waiters {
                        self.reply(reply, Outcome::Unavailable { reason: "appending to the log failed".into() });
                    }
                }
            }
            (None, body) if body.is_result() => {
                // Forget what we wrote: the next result is compared with what the log says.
                if let Some(o) = self.owned.get_mut(&event.object) {
                    o.update(|b| b.written = None);
                }
            }
            (None, EventBody::Released { .. }) => {
                self.releasing.remove(&event.object);
            }
            _ => {}
        }
    }

    // ---- held problems ----

    /// Looks at every held problem of the objects this engine owns (a policy change, or the timer at the next
    /// start or end of a silence or window), and sets that timer again.
    fn release_all(&mut self, now: Time) {
        let reader = self.follow.reader();
        if reader.fence().active_format() < crate::policy::FORMAT {
            self.policy_timer = None;
            return;
        }
        self.policy_timer = reader.policy().next_change(now);
        let held: Vec<ObjectId> = self
            .owned
            .keys()
            .filter(|id| reader.object(id).is_some_and(|v| v.state.is_problem() && v.episode().is_some()))
            .cloned()
            .collect();
        for id in held {
            self.maybe_release(now, &id);
        }
    }

    /// Writes the release of `id`'s held problem (`EventBody::Released`) if this engine owns it, it is in an open
    /// episode whose problems reached nobody so far, and nothing holds it now (`policy::decide`): the problem goes
    /// to whom the routes name, as its transition would have.
    fn maybe_release(&mut self, now: Time, id: &ObjectId) {
        // Not while a result of ours is on its way to the log: it was decided without this release, and could
        // land after it (a recovery to nobody). Looked at again when it is back.
        let Some(o) = self.owned.get(id) else { return };
        if o.busy().written.is_some() || self.releasing.contains_key(id) || self.follow.is_leaving() {
            return;
        }
        let reader = self.follow.reader();
        if reader.fence().active_format() < crate::policy::FORMAT {
            return;
        }
        let Some(view) = reader.object(id) else { return };
        let Some(episode) = view.episode() else { return };
        let held_so_far = view.alert.as_ref().and_then(|a| a.sent.as_ref()).is_some_and(|s| s.is_nobody());
        if !view.state.is_problem() || !held_so_far {
            return;
        }
        let down = reader.parents_down(view).map(ObjectId::to_string).collect();
        let notify = crate::policy::decide(reader.policy(), &view.def.labels, now, down, (State::Ok, view.state), None);
        if notify.suppressed.is_some() || notify.is_nobody() {
            return;
        }
        let event = Event {
            object: id.clone(),
            epoch: reader.epoch(),
            writer: self.cfg.me.clone(),
            at: now,
            command_id: None,
            body: EventBody::Released { episode, state: view.state, notify: Box::new(notify) },
        };
        self.counters.releases_written += 1;
        if let EventBody::Released { notify, .. } = &event.body {
            self.releasing.insert(id.clone(), (**notify).clone());
        }
        self.outputs.push_back(Output::Append(event));
    }

    // ---- commands ----

    /// A submission that asked for a claim: declined while this engine cannot take writes, else claimed and
    /// taken as any command. `Claimed` goes out only when the outcome does not go out with it.
    fn claim(&mut self, now: Time, reply: ReplyTo, cmd: Command) {
        if let Some(reason) = self.claim_refusal(now) {
            self.counters.commands_declined += 1;
            self.outputs.push_back(Output::Declined { to: reply, reason });
            return;
        }
        self.counters.commands_claimed += 1;
        let before = self.outputs.len();
        self.submit(now, reply, cmd);
        let answered = self.outputs.iter().skip(before).any(|o| matches!(o, Output::Reply { to, .. } if *to == reply));
        if !answered {
            self.outputs.insert(before, Output::Claimed { to: reply });
        }
    }

    fn submit(&mut self, now: Time, reply: ReplyTo, cmd: Command) {
        if let Some(outcome) = self.follow.reader().applied(&cmd.id) {
            self.counters.commands_duplicate += 1;
            let outcome = outcome.clone();
            self.reply(reply, outcome);
            return;
        }
        if let Some(w) = self.waiting.get_mut(&cmd.id) {
            w.waiters.push((reply, cmd));
            return;
        }
        if cmd.object.is_policy() != matches!(cmd.kind, CommandKind::Policy { .. }) {
            self.counters.commands_rejected += 1;
            let reason = format!(
                "{} is a policy change only on the policy's key {:?}, and the policy's key takes nothing else",
                cmd.kind.name(),
                ObjectId::POLICY
            );
            self.reply(reply, Outcome::Rejected { reason });
            return;
        }
        if let CommandKind::Put { def } = &cmd.kind {
            if let Err(e) = def.validate().and_then(|()| def.validate_parents(&cmd.object)) {
                self.counters.commands_rejected += 1;
                self.reply(reply, Outcome::Rejected { reason: e.to_string() });
                return;
            }
        }
        // Before routing: the owner may be of an older build that would apply what it can decode of the command.
        if let Some(reason) = self.is_ready().then(|| self.format_refusal(&cmd.kind)).flatten() {
            self.counters.commands_rejected += 1;
            self.reply(reply, Outcome::Rejected { reason });
            return;
        }
        self.route(now, reply, cmd);
    }

    fn route(&mut self, now: Time, reply: ReplyTo, mut cmd: Command) {
        if !self.is_ready() {
            let reason = if self.follow.is_caught_up() { "no epoch yet" } else { "engine is reading the log" };
            self.reply(reply, Outcome::Unavailable { reason: reason.into() });
            return;
        }
        let owner = self.follow.reader().owner(&cmd.object);
        match route(owner, &self.cfg.me, cmd.hop, self.cfg.forwarding, self.follow.is_leaving()) {
            Route::Apply => self.apply(now, reply, cmd),
            Route::Forward(to) => {
                let id = ForwardId(self.next_forward);
                self.next_forward += 1;
                cmd.hop = 1;
                self.forwards.insert(id, reply);
                self.outputs.push_back(Output::Forward { id, to, cmd });
            }
            Route::NotOwned => {
                self.counters.not_owned += 1;
                self.reply(reply, Outcome::NotOwned);
            }
            Route::Unavailable(reason) => self.reply(reply, Outcome::Unavailable { reason: reason.into() }),
        }
    }

    fn apply(&mut self, now: Time, reply: ReplyTo, cmd: Command) {
        // Several callers of one fenced command are rerouted one by one: the first appends again, the others
        // wait for that event's verdict instead of replacing its waiters (who would never be answered).
        if let Some(w) = self.waiting.get_mut(&cmd.id) {
            w.waiters.push((reply, cmd));
            return;
        }
        if let Some(reason) = self.format_refusal(&cmd.kind) {
            self.counters.commands_rejected += 1;
            self.reply(reply, Outcome::Rejected { reason });
            return;
        }
        // A policy change is checked against the policy it will follow: one that names nothing or breaks a rule
        // is refused here, not written (the fold would leave it out anyway).
        if let CommandKind::Policy { change } = &cmd.kind {
            let reader = self.follow.reader();
            let refused = reader.policy().changed(change, now).err().map(|e| e.to_string()).or_else(|| {
                let crate::policy::Change::DeleteReceiver { name } = &**change else { return None };
                open_episodes_sent_to(reader, name)
            });
            if let Some(reason) = refused {
                self.counters.commands_rejected += 1;
                self.reply(reply, Outcome::Rejected { reason });
                return;
            }
        }
        let event = Event {
            object: cmd.object.clone(),
            epoch: self.follow.reader().epoch(),
            writer: self.cfg.me.clone(),
            at: now,
            command_id: Some(cmd.id.clone()),
            body: EventBody::from_command(&cmd.kind),
        };
        let deadline = now + self.cfg.reply_timeout;
        self.reply_deadlines.insert(deadline, cmd.id.clone());
        self.waiting.insert(cmd.id.clone(), Awaiting { waiters: vec![(reply, cmd)], deadline });
        self.outputs.push_back(Output::Append(event));
    }

    /// Why a command whose event needs a newer cluster format than this engine speaks, or than the one active, is
    /// refused: a member that does not speak it could not read the event. Asked where a command comes in (before
    /// it is forwarded: an owner of an older build would apply what it can decode of it, a put without its new
    /// fields) and again where it is applied.
    fn format_refusal(&self, kind: &CommandKind) -> Option<String> {
        let (needs, reader) = (kind.needs(), self.follow.reader());
        if needs > reader.speaks() {
            return Some(format!("unknown command kind {:?} (it needs cluster format {needs})", kind.name()));
        }
        crate::format::refusal(kind, reader.fence().active_format())
    }

    fn take_awaiting(&mut self, id: &CommandId) -> Option<Awaiting> {
        let w = self.waiting.remove(id)?;
        self.reply_deadlines.remove(w.deadline, id);
        Some(w)
    }

    fn reply(&mut self, to: ReplyTo, outcome: Outcome) {
        if matches!(outcome, Outcome::Unavailable { .. }) {
            self.counters.commands_unavailable += 1;
        }
        self.outputs.push_back(Output::Reply { to, outcome });
    }

    // ---- checks ----

    /// Runs the check of `object` that was due at `slot` (a slot of its grid, or the time a check-now asked for).
    fn run_due(&mut self, now: Time, slot: Time, object: ObjectId) {
        let Some(view) = self.follow.reader().object(&object) else { return };
        let (def, grid, paused) = (&view.def, schedule::Grid::of(view, self.spread()), view.paused);
        let Some(o) = self.owned.get_mut(&object) else { return };
        o.next = None;
        let requested = o.update(|b| std::mem::take(&mut b.requested));
        if paused {
            return;
        }
        let next = Some(grid.slot_after(now));
        if o.busy().inflight.is_some() {
            self.counters.checks_skipped_busy += 1;
            o.update(|b| b.rerun |= requested);
            self.set_next(&object, next);
            return;
        }
        let check_id = self.next_check;
        self.next_check += 1;
        o.update(|b| b.inflight = Some(check_id));
        let deadline = now + def.timeout() + self.cfg.check_grace;
        let work = CheckWork { check_id, object: object.clone(), probe: def.probe.clone(), timeout_ms: def.timeout_ms };
        self.checks.insert(check_id, (object.clone(), deadline));
        self.check_deadlines.insert(deadline, check_id);
        self.counters.checks_dispatched += 1;
        self.counters.check_start_lateness.record(now.saturating_since(slot));
        self.outputs.push_back(Output::Dispatch(work));
        self.set_next(&object, next);
    }

    fn handle_check_result(&mut self, now: Time, result: CheckResult) {
        let Some((object, deadline)) = self.checks.remove(&result.check_id) else {
            self.counters.check_results_dropped += 1;
            return;
        };
        self.check_deadlines.remove(deadline, &result.check_id);
        let reader = self.follow.reader();
        let active = reader.fence().active_format();
        let Some(view) = reader.object(&object) else {
            self.counters.check_results_dropped += 1;
            return;
        };
        let Some(o) = self.owned.get_mut(&object) else {
            // Ownership moved while the check ran: the new owner checks it; this result is not ours to write.
            self.counters.check_results_dropped += 1;
            return;
        };
        if o.busy().inflight != Some(result.check_id) {
            self.counters.check_results_dropped += 1;
            return;
        }
        let (in_flight, rerun) = o.update(|b| {
            b.inflight = None;
            if b.written.is_some_and(|until| now >= until) {
                b.written = None;
            }
            (b.written.is_some(), std::mem::take(&mut b.rerun))
        });
        let rules = view.rules(active);
        let body = if in_flight {
            self.counters.results_held += 1;
            None
        } else {
            // The worker scrubs with the probe it ran; this holds for any worker, and for text that echoes a
            // URL with its userinfo (a plugin's output). Before the cut, which could leave half a secret.
            let output = match view.def.probe.scrub(&result.output) {
                Cow::Borrowed(_) => result.output,
                Cow::Owned(s) => s,
            };
            let output = truncate(output, CheckResult::OUTPUT_KEPT);
            if active >= 3 {
                alert::decide(view.alert_now(), &rules, result.state, now, output)
            } else {
                // Before soft states: every change is a transition at once, written as builds before them do.
                (result.state != view.state).then(|| EventBody::transition(view.state, result.state, output))
            }
        };
        // Checked again at the retry interval while a soft state is open: one this result starts or goes on
        // with, or one that may be (a held result that differs from the hard state). A hard transition is the
        // new state, checked at its slots: a retry after it would only check again what the log already says.
        let retry = match &body {
            Some(EventBody::Soft { attempt, .. }) => *attempt > 0,
            Some(EventBody::Transition { .. }) => false,
            _ => result.state != view.state,
        }
        .then(|| now + rules.retry_interval);
        if let Some(mut body) = body {
            match body {
                EventBody::Transition { .. } => self.counters.transitions_written += 1,
                _ => self.counters.soft_written += 1,
            }
            // Who is notified: decided here, once, from what this owner's reader holds, and written with the
            // transition, so every notifier sends the same (`policy::decide`).
            if let EventBody::Transition { from, to, notify, .. } = &mut body {
                if active >= crate::policy::FORMAT {
                    let reader = self.follow.reader();
                    let down = reader.parents_down(view).map(ObjectId::to_string).collect();
                    // Who the episode's problems reached, with a release of ours still on its way to the log.
                    let sent = view.alert.as_ref().and_then(|a| a.sent.as_ref());
                    let sent = match (sent, self.releasing.get(&object)) {
                        (Some(s), Some(r)) => Some(s.union(r)),
                        (s, _) => s.cloned(),
                    };
                    let decided = crate::policy::decide(
                        reader.policy(),
                        &view.def.labels,
                        now,
                        down,
                        (*from, *to),
                        sent.as_ref(),
                    );
                    *notify = Some(Box::new(decided));
                }
            }
            let reply_timeout = self.cfg.reply_timeout;
            if let Some(o) = self.owned.get_mut(&object) {
                o.update(|b| b.written = Some(now + reply_timeout));
            }
            self.outputs.push_back(Output::Append(Event {
                object: object.clone(),
                epoch: self.follow.reader().epoch(),
                writer: self.cfg.me.clone(),
                at: now,
                command_id: None,
                body,
            }));
        }
        if rerun {
            self.set_next(&object, Some(now));
        } else if let Some(at) = retry {
            let next = self.owned.get(&object).and_then(|o| o.next);
            if next.is_none_or(|n| at < n) {
                self.set_next(&object, Some(at));
            }
        }
    }

    /// Self-checks the simulator runs after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (t, id) in self.due.iter() {
            match self.owned.get(id) {
                Some(o) if o.next == Some(*t) => {}
                _ => return Err(format!("{id} is due at {t} but not scheduled as owned")),
            }
        }
        let scheduled = self.owned.values().filter(|o| o.next.is_some()).count();
        if scheduled != self.due.len() {
            return Err(format!("{scheduled} owned objects scheduled, {} due entries", self.due.len()));
        }
        if self.follow.is_caught_up() && !self.follow.is_leaving() {
            if let Some(own) = self.follow.reader().fence().current_ownership() {
                for (id, view) in self.follow.reader().objects() {
                    let mine = own.is_owner(view.key, &self.cfg.me);
                    if mine != self.owned.contains_key(id) {
                        return Err(format!("{id}: HRW says owned={mine}, engine holds owned={}", !mine));
                    }
                }
            }
        }
        if self.owned.keys().any(|id| self.follow.reader().object(id).is_none()) {
            return Err("an owned object is not in the log".into());
        }
        if self.waiting.len() != self.reply_deadlines.len() {
            return Err("awaiting commands and their deadlines disagree".into());
        }
        Ok(())
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Why receiver `name` may not be deleted now: problems were sent to it whose recoveries have not been (each
/// recovery goes to who its problem went to, by name), naming a few of them; `None` when there are none.
fn open_episodes_sent_to(reader: &LogReader, name: &crate::policy::Name) -> Option<String> {
    let open: Vec<&str> = reader
        .objects()
        .iter()
        .filter(|(_, v)| v.alert.as_ref().and_then(|a| a.sent.as_ref()).is_some_and(|s| s.receivers.contains(name)))
        .map(|(id, _)| id.as_str())
        .collect();
    (!open.is_empty()).then(|| {
        let shown: Vec<&str> = open.iter().take(5).copied().collect();
        format!(
            "receiver {name} was sent problems of {} objects that have not recovered yet ({}{}): their recoveries go to \
             it; change its url instead, or delete it once they recovered",
            open.len(),
            shown.join(", "),
            if open.len() > shown.len() { ", …" } else { "" }
        )
    })
}
