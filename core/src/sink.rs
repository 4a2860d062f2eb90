//! The sink: every accepted event of the log into a store (SQLite, PostgreSQL), exactly once.
//!
//! Exactly once rests on three things. Rows are keyed by their log position, and the store ignores a row
//! whose position it already has, so two sinks that both believe they own an object during a membership
//! change, or a retried transaction whose commit was in fact done, cannot make a duplicate. A sink writes its
//! rows, the objects' current rows and its progress in one transaction per batch, one transaction at a time,
//! in log order, so per object the store always holds a prefix of that object's accepted events. And a sink
//! that gains an object resumes it from what the store itself says it holds for it (`role::LogRole`), so
//! nothing its previous owner had not stored is skipped. Fenced events never become rows: the sink reads the
//! log through the same `LogReader` as the engines.
//!
//! The store being away does not grow memory: past `max_pending` rows the sink drops what it holds and later
//! resumes its objects from the store, reading the log again (the log is the buffer). A row the store refuses
//! (bad data, not a lost connection) is narrowed down one row per transaction, written once more degraded
//! (text fields emptied), and skipped and counted if even that is refused: never a crash, never a stalled sink.
//!
//! Driving it: `handle(now, input)` or `handle_timeout(now)`, then drain `poll_output()`, then re-arm the timer
//! from `poll_timeout()`. Every `Write` gets exactly one `Written`; every `QueryProgress` one `Progress`; every
//! `Replay` one `Replayed`. A leaving sink may exit once `is_done()`.

use crate::backoff::Backoff;
use crate::follow::{Life, LifeOutput};
use crate::hrw;
use crate::io::IoError;
use crate::log::ObjectView;
use crate::model::{Bucket, CommandId, EventBody, LogEntry, MemberId, MemberRef, ObjectDef, ObjectId, Probe, State};
use crate::role::{After, LogRole, Owned, RoleConfig, RoleOutput, RoleTimer, Work};
use crate::time::Time;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct SinkConfig {
    pub role: RoleConfig,
    /// Rows (events and objects) per transaction, at most.
    pub max_batch: usize,
    /// Rows held while the store is slow or away; past this they are dropped and read again later.
    pub max_pending: usize,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How long a leaving sink keeps writing what it holds before it exits anyway (its objects' new owners
    /// resume them from the store).
    pub leave_timeout: Duration,
    /// Longest `output` stored, in bytes.
    pub max_output: usize,
}

impl SinkConfig {
    pub fn new(me: MemberRef, ttl: Duration) -> SinkConfig {
        SinkConfig {
            role: RoleConfig::new(Bucket::Sink, me, ttl),
            max_batch: 1000,
            max_pending: 20_000,
            retry_base: Duration::from_millis(100),
            retry_max: Duration::from_secs(10),
            leave_timeout: Duration::from_secs(5),
            max_output: 4096,
        }
    }
}

/// One row of table `events`: an accepted event at log position `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    pub seq: u64,
    pub object: ObjectId,
    pub epoch: u64,
    pub writer: MemberId,
    pub writer_incarnation: u64,
    /// The writer's clock when it wrote the event.
    pub at: Time,
    /// `put`, `delete`, `pause`, `resume`, `check_requested`, `ack`, `unack`, `transition`, `soft`,
    /// `flapping_start` or `flapping_end`.
    pub kind: &'static str,
    /// A transition's hard state before it; `None` otherwise (a `soft` too: see `AlertColumns`).
    pub from_state: Option<State>,
    /// A transition's hard state after it, a `soft`'s result state.
    pub to_state: Option<State>,
    pub output: Option<String>,
    pub command_id: Option<CommandId>,
    /// A put's definition, as JSON.
    pub definition: Option<String>,
    /// The columns a check result fills (schema version 2); none for other kinds.
    pub alert: AlertColumns,
}

/// The columns of an `events` row that say how a check result stands to the hard state (schema version 2), all
/// `None` for an event that is not a result. Each is what the event itself says, never what the sink knew of the
/// object when it read it: a row is the same whether the sink read it live or replayed it, so which sink wrote
/// it, and when, makes no difference to the store. (That is why a `soft` row has no `from_state`: the hard state
/// it departs from is the `to_state` of the object's last `transition` row before it, pending if none.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlertColumns {
    /// `Some(true)` for a `transition` (the hard state changed), `Some(false)` for a `soft`.
    pub hard: Option<bool>,
    /// A `soft`'s attempt (0: the results are back to the hard state, the soft state is over); the attempt that
    /// made a `transition` hard (`None` for one written before soft states, cluster formats 1 and 2).
    pub attempt: Option<u32>,
    /// A `soft`'s `of`: how many results in a row make its state hard (`None` with attempt 0).
    pub attempts_needed: Option<u32>,
    /// Flapping starts (`true`) or ends (`false`) with this event: a `flapping_start` or `flapping_end`, or a
    /// `transition` or `soft` that says so.
    pub flapping: Option<bool>,
}

impl AlertColumns {
    /// What `body` says of itself (see the type).
    pub fn of(body: &EventBody) -> AlertColumns {
        match body {
            EventBody::Transition { attempt, flapping, .. } => AlertColumns {
                hard: Some(true),
                attempt: (*attempt != 0).then_some(*attempt),
                attempts_needed: None,
                flapping: *flapping,
            },
            EventBody::Soft { attempt, of, flapping, .. } => AlertColumns {
                hard: Some(false),
                attempt: Some(*attempt),
                attempts_needed: (*attempt != 0).then_some(*of),
                flapping: *flapping,
            },
            EventBody::Flapping { on } => AlertColumns { flapping: Some(*on), ..AlertColumns::default() },
            EventBody::Put { .. }
            | EventBody::Delete
            | EventBody::Pause
            | EventBody::Resume
            | EventBody::CheckRequested
            | EventBody::Ack
            | EventBody::Unack
            | EventBody::Policy { .. }
            | EventBody::Released { .. } => AlertColumns::default(),
        }
    }
}

/// One row of table `objects`: an object as the log says it is after its event at `last_seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRow {
    pub object: ObjectId,
    /// `None` once deleted.
    pub state: Option<State>,
    pub definition: Option<String>,
    pub paused: bool,
    pub acknowledged: bool,
    pub deleted: bool,
    pub last_seq: u64,
    /// The definition's labels as a JSON object (`{}` with none; `None` once deleted). Schema version 2.
    pub labels: Option<String>,
    /// The soft state, while the latest results differ from the hard `state` and have not made it hard yet:
    /// the latest result's state, its attempt and how many it takes. Schema version 2.
    pub soft_state: Option<State>,
    pub soft_attempt: Option<u32>,
    pub soft_attempts_needed: Option<u32>,
    /// The object flaps (its transitions are not notified). Schema version 2.
    pub flapping: bool,
}

/// One transaction: insert the event rows (ignoring any whose `seq` is there already), upsert the object rows
/// (only over a row with a lower or equal `last_seq`), and set this sink's progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub id: u64,
    pub events: Vec<EventRow>,
    pub objects: Vec<ObjectRow>,
    pub progress: Progress,
}

impl Batch {
    pub fn rows(&self) -> usize {
        self.events.len() + self.objects.len()
    }
}

/// Row of table `sink_progress`: every event this sink was to write at or below `position` is in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub sink: MemberId,
    pub position: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The inputs every member that follows the log takes (`Life::Leave`: write what is pending, within
    /// `SinkConfig::leave_timeout`, then `is_done()`).
    Life(Life),
    /// The answer to `QueryProgress`: each asked object's last stored position (absent: none).
    Progress { token: u64, result: Result<Vec<(ObjectId, u64)>, IoError> },
    /// The answer to `Replay`: the last position the read covered and the entries it found.
    Replayed { token: u64, result: Result<(u64, Vec<(u64, LogEntry)>), IoError> },
    /// The answer to `Write`.
    Written { batch: u64, result: Result<(), IoError> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// What every member that follows the log asks of its driver (heartbeats, a snapshot past a hole).
    Life(LifeOutput),
    QueryProgress {
        token: u64,
        objects: Vec<ObjectId>,
    },
    Replay {
        token: u64,
        from: u64,
        to: u64,
    },
    Write(Batch),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    Heartbeat,
    ResumeRetry,
    WriteRetry,
    LeaveDeadline,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SinkCounters {
    /// Event rows in committed transactions (a row the store already had counts too: it is in the store).
    pub events_written: u64,
    pub batches_written: u64,
    /// Failed transactions and progress queries.
    pub store_errors: u64,
    /// Rows written with their text fields emptied after the store refused them as they were.
    pub rows_degraded: u64,
    /// Rows the store refused even degraded: not in the store.
    pub rows_skipped: u64,
    /// Times the sink dropped what it held and resumed from the store.
    pub overflows: u64,
}

/// Kept here too for callers that named it by the sink: it is every log-reading role's (`role::Health`).
pub use crate::role::Health;

/// What is held to write. A resume's end holds an item for every object it took on (a sink taking over a
/// million objects holds a million), so that one is small: the object and its last position, its row made from
/// the reader's view as its transaction is built. The rows are boxed to keep every item that small (32 bytes:
/// an object's row inline made each one 72, so a million of them 72 MB before the queue's spare room).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Event {
        row: Box<EventRow>,
        object: Option<Box<ObjectRow>>,
        degraded: bool,
    },
    Object {
        row: Box<ObjectRow>,
        degraded: bool,
    },
    /// The row of an object at the end of a resume, not made yet (see `Sink::resumed_row`).
    Resumed {
        object: ObjectId,
        last: u64,
    },
}

impl Item {
    fn rows(&self) -> usize {
        match self {
            Item::Event { object: Some(_), .. } => 2,
            _ => 1,
        }
    }

    fn event_seq(&self) -> Option<u64> {
        match self {
            Item::Event { row, .. } => Some(row.seq),
            Item::Object { .. } | Item::Resumed { .. } => None,
        }
    }

    fn degraded(&self) -> bool {
        match self {
            Item::Event { degraded, .. } | Item::Object { degraded, .. } => *degraded,
            Item::Resumed { .. } => false,
        }
    }

    /// The same row with its text fields emptied: what a store that refuses the data is offered next.
    fn degrade(self) -> Item {
        match self {
            // Its object's row is left whole: if that was what the store refused, it is tried alone next.
            Item::Event { mut row, object, .. } => {
                row.output = row.output.map(|_| String::new());
                row.definition = None;
                Item::Event { row, object, degraded: true }
            }
            // Labels stay: they are validated keys and values (`crate::labels`), never text a store refuses.
            Item::Object { mut row, .. } => {
                row.definition = None;
                Item::Object { row, degraded: true }
            }
            // Made into an object's row before it is ever written.
            Item::Resumed { .. } => self,
        }
    }
}

// A resume's end holds an item per object: keep them small (see `Item`).
const _: () = assert!(std::mem::size_of::<Item>() <= 32);

pub struct Sink {
    cfg: SinkConfig,
    role: LogRole,
    pending: VecDeque<Item>,
    /// Event items in `pending`: what the bound is on. Object rows of a finished resume are not counted: they
    /// are bounded by the objects, and no replay could bring them back.
    pending_events: usize,
    /// The transaction out, with the items it was built from.
    inflight: Option<(Batch, Vec<Item>)>,
    /// A refused batch is being narrowed down: this many items go one per transaction.
    isolate: usize,
    retry_at: Option<Time>,
    backoff: Backoff,
    /// The last error the store gave, until a transaction or a query succeeds.
    last_error: Option<IoError>,
    written_position: u64,
    next_batch: u64,
    started: bool,
    leave_deadline: Option<Time>,
    timed_out: bool,
    outputs: VecDeque<Output>,
    pub counters: SinkCounters,
}

impl Sink {
    pub fn new(mut cfg: SinkConfig) -> Sink {
        // A resume reads on while fewer than `max_batch` rows are held, each read bringing up to `replay_chunk`
        // events, and hands over up to `max_held` at its end: a bound below that would drop a resume's work
        // every time it finishes, again and again. Raised to what a resume can hold, with room for live events.
        cfg.max_pending = cfg.max_pending.max(Sink::resume_room(&cfg));
        let salt = hrw::key(cfg.role.me.id.as_str()) ^ cfg.role.me.incarnation.rotate_left(17);
        Sink {
            role: LogRole::new(cfg.role.clone()),
            backoff: Backoff::new(cfg.retry_base, cfg.retry_max, salt),
            cfg,
            pending: VecDeque::new(),
            pending_events: 0,
            inflight: None,
            isolate: 0,
            retry_at: None,
            last_error: None,
            written_position: 0,
            next_batch: 0,
            started: false,
            leave_deadline: None,
            timed_out: false,
            outputs: VecDeque::new(),
            counters: SinkCounters::default(),
        }
    }

    /// The fewest rows a sink must be able to hold for a resume to finish (see `new`).
    pub fn resume_room(cfg: &SinkConfig) -> usize {
        let chunk = usize::try_from(cfg.role.replay_chunk).unwrap_or(usize::MAX);
        cfg.max_batch.saturating_add(chunk).saturating_add(cfg.role.max_held).saturating_add(cfg.max_batch.max(50))
    }

    // ---- getters ----

    pub fn me(&self) -> &MemberRef {
        self.role.me()
    }

    pub fn role(&self) -> &LogRole {
        &self.role
    }

    pub fn config(&self) -> &SinkConfig {
        &self.cfg
    }

    /// Log positions read but not yet in the store (0 when everything this sink owns is written).
    pub fn lag(&self) -> u64 {
        let oldest = [
            self.inflight.as_ref().and_then(|(b, _)| b.events.iter().map(|r| r.seq).min()),
            self.oldest_pending(),
            self.resume_from(),
        ]
        .into_iter()
        .flatten()
        .min();
        match oldest {
            Some(seq) => self.role.reader().position().saturating_sub(seq.saturating_sub(1)),
            None => 0,
        }
    }

    /// The oldest position a resume may still have to write: where its replay stands, or, before the store
    /// said where to begin, the first position this sink has not confirmed written.
    fn resume_from(&self) -> Option<u64> {
        if !self.role.is_resuming() {
            return None;
        }
        Some(self.role.replaying_from().unwrap_or(self.written_position + 1))
    }

    /// The position up to which the last committed transaction said everything was written.
    pub fn written_position(&self) -> u64 {
        self.written_position
    }

    pub fn health(&self) -> Health {
        let (ready, reason) = if !self.started {
            (false, "starting".to_string())
        } else if self.role.is_leaving() {
            (false, "leaving".to_string())
        } else if let Some(covering) = self.role.needs_snapshot() {
            (false, crate::compact::hole_reason(covering))
        } else if !self.role.is_caught_up() {
            (false, "reading the log".to_string())
        } else if let Some(e) = &self.last_error {
            (false, format!("{}; retrying", store_failure(e)))
        } else {
            (true, "ready".to_string())
        };
        Health { ready, reason }
    }

    /// A leaving sink has written what it held (or given up at its deadline): it may exit.
    pub fn is_done(&self) -> bool {
        self.role.is_leaving() && (self.timed_out || self.inflight.is_none() && self.pending.is_empty())
    }

    /// Self-checks the simulator and the tests run after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let events = self.pending.iter().filter(|i| i.event_seq().is_some()).count();
        if events != self.pending_events {
            return Err(format!("{} event items pending, counted {}", events, self.pending_events));
        }
        if self.retry_at.is_some() && self.inflight.is_none() {
            return Err("a write retry is armed with no transaction out".into());
        }
        // Rows may repeat (a resume may read again what is out, and the store ignores a row it has); the order
        // that matters, the store's prefix per object, is checked by whoever sees the store.
        Ok(())
    }

    // ---- inputs ----

    pub fn handle(&mut self, now: Time, input: Input) {
        match input {
            Input::Life(life) => self.handle_life(now, life),
            Input::Progress { token, result } => {
                if let Err(e) = &result {
                    self.store_failed(e.clone());
                }
                if result.is_ok() && self.inflight.is_none() {
                    self.last_error = None;
                }
                self.role.handle_progress(now, token, result);
            }
            Input::Replayed { token, result } => self.role.handle_replayed(now, token, result),
            Input::Written { batch, result } => self.handle_written(now, batch, result),
        }
        self.step();
    }

    fn handle_life(&mut self, now: Time, life: Life) {
        match life {
            Life::Start => {
                self.started = true;
                self.role.handle_start(now);
            }
            Life::Leave => {
                if !self.role.is_leaving() {
                    self.role.handle_leave();
                    self.leave_deadline = Some(now + self.cfg.leave_timeout);
                }
            }
            life => {
                self.role.handle_life(now, life);
                // An entry this build cannot read: its objects go to sinks that read on.
                if self.role.blocked_reason().is_some() {
                    self.handle_life(now, Life::Leave);
                }
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Time) {
        self.role.handle_timeout(now);
        if self.retry_at.is_some_and(|t| t <= now) {
            self.retry_at = None;
            if let Some((batch, _)) = &self.inflight {
                self.outputs.push_back(Output::Write(batch.clone()));
            }
        }
        if self.leave_deadline.is_some_and(|t| t <= now) {
            self.leave_deadline = None;
            self.timed_out = true;
        }
        self.step();
    }

    // ---- outputs ----

    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Time, Timer)> {
        let role = self.role.poll_timeout().map(|(t, r)| {
            (
                t,
                match r {
                    RoleTimer::Heartbeat => Timer::Heartbeat,
                    RoleTimer::ResumeRetry => Timer::ResumeRetry,
                },
            )
        });
        [role, self.retry_at.map(|t| (t, Timer::WriteRetry)), self.leave_deadline.map(|t| (t, Timer::LeaveDeadline))]
            .into_iter()
            .flatten()
            .min()
    }

    // ---- internals ----

    /// After every input: take the role's work, bound what is held, send the next transaction, let a resume
    /// read on while there is room, carry the role's outputs out.
    fn step(&mut self) {
        loop {
            while let Some(work) = self.role.take_work() {
                self.take(work);
            }
            if self.pending_events > self.cfg.max_pending {
                self.counters.overflows += 1;
                self.pending.clear();
                self.pending_events = 0;
                self.isolate = 0;
                self.role.resume_all_owned();
            }
            self.role.drive(self.pending.len() < self.cfg.max_batch);
            while let Some(out) = self.role.poll_output() {
                self.outputs.push_back(match out {
                    RoleOutput::Life(life) => Output::Life(life),
                    RoleOutput::QueryProgress { token, objects } => Output::QueryProgress { token, objects },
                    RoleOutput::Replay { token, from, to } => Output::Replay { token, from, to },
                });
            }
            // Driving a resume may finish one at once (nothing to replay), which brings more work.
            if self.role.has_work() {
                continue;
            }
            break;
        }
        self.send_next();
    }

    fn take(&mut self, work: Work) {
        let max = self.cfg.max_output;
        match work {
            Work::Event(owned) => {
                let object = match &owned.after {
                    After::Live(view) => Some(Box::new(object_row(&owned.event.object, view.as_deref(), owned.seq))),
                    After::Replayed => None,
                };
                self.pending_events += 1;
                self.pending.push_back(Item::Event { row: Box::new(event_row(&owned, max)), object, degraded: false });
            }
            Work::Resumed { objects, .. } => {
                self.pending.extend(objects.into_iter().map(|(object, last)| Item::Resumed { object, last }));
            }
        }
    }

    /// The oldest event still pending. Not the first: pending is in the order events were handed out, which is
    /// log order per object only (a resume's replayed events come after newer events of other objects), so the
    /// first may be newer than one behind it (the simulator's invariant 10 found a progress row claiming events
    /// still pending that way).
    fn oldest_pending(&self) -> Option<u64> {
        self.pending.iter().filter_map(Item::event_seq).min()
    }

    fn send_next(&mut self) {
        if self.inflight.is_some() || self.pending.is_empty() {
            return;
        }
        let limit = if self.isolate > 0 { 1 } else { self.cfg.max_batch.max(1) };
        let mut items = Vec::new();
        let mut rows = 0;
        while let Some(item) = self.pending.front() {
            if !items.is_empty() && rows + item.rows() > limit {
                break;
            }
            let item = match self.pending.pop_front().expect("front exists") {
                Item::Resumed { object, last } => match self.resumed_row(&object, last) {
                    Some(row) => Item::Object { row: Box::new(row), degraded: false },
                    None => continue,
                },
                item => item,
            };
            rows += item.rows();
            self.pending_events -= usize::from(item.event_seq().is_some());
            items.push(item);
            if self.isolate > 0 {
                break;
            }
        }
        // A resume's end may have held a row for every object: give the room back as it drains.
        let room = self.pending.len().max(self.cfg.max_batch) * 2;
        if self.pending.capacity() > 2 * room {
            self.pending.shrink_to(room);
        }
        // What was left was only a resume's objects with no row to make here (an accepted event since brings each
        // one's row): no transaction for nothing.
        if items.is_empty() {
            return;
        }
        let mut events = Vec::new();
        let mut objects: BTreeMap<ObjectId, ObjectRow> = BTreeMap::new();
        let mut keep = |row: &ObjectRow| match objects.get(&row.object) {
            Some(have) if have.last_seq > row.last_seq => {}
            _ => {
                objects.insert(row.object.clone(), row.clone());
            }
        };
        for item in &items {
            match item {
                Item::Event { row, object, .. } => {
                    events.push(EventRow::clone(row));
                    if let Some(o) = object {
                        keep(o);
                    }
                }
                Item::Object { row, .. } => keep(row),
                Item::Resumed { .. } => unreachable!("made into an object's row as it was taken"),
            }
        }
        // Everything owned at or below this position is in this transaction or an earlier one, once it commits.
        let oldest_left = [self.oldest_pending(), self.resume_from()].into_iter().flatten().min();
        let position = match oldest_left {
            Some(seq) => seq.saturating_sub(1),
            None => self.role.reader().position(),
        }
        .max(self.written_position);
        let batch = Batch {
            id: self.next_batch,
            events,
            objects: objects.into_values().collect(),
            progress: Progress { sink: self.me().id.clone(), position },
        };
        self.next_batch += 1;
        self.outputs.push_back(Output::Write(batch.clone()));
        self.inflight = Some((batch, items));
    }

    /// The row of an object at the end of a resume that took it on, at its last position there: the reader's
    /// view, if the object has had no accepted event since (so the view is the one at the resume's end). If it
    /// has, that event was handed out after the resume's end and brings the object's row with it (a newer one),
    /// so none is made here.
    fn resumed_row(&self, object: &ObjectId, last: u64) -> Option<ObjectRow> {
        let reader = self.role.reader();
        (reader.last_accepted_of(object) == Some(last)).then(|| object_row(object, reader.object(object), last))
    }

    fn handle_written(&mut self, now: Time, id: u64, result: Result<(), IoError>) {
        let Some((batch, items)) = self.inflight.take_if(|(b, _)| b.id == id) else { return };
        match result {
            Ok(()) => {
                self.counters.batches_written += 1;
                self.counters.events_written += batch.events.len() as u64;
                self.counters.rows_degraded += items.iter().filter(|i| i.degraded()).count() as u64;
                self.written_position = self.written_position.max(batch.progress.position);
                self.isolate = self.isolate.saturating_sub(items.len());
                self.backoff.reset();
                self.last_error = None;
            }
            Err(e @ (IoError::Unavailable(_) | IoError::Timeout)) => {
                self.store_failed(e);
                self.retry_at = Some(now + self.backoff.next_delay());
                self.inflight = Some((batch, items));
            }
            Err(e @ IoError::Refused(_)) => {
                self.store_failed(e);
                if items.len() > 1 {
                    // Narrow it down: the same items again, one per transaction.
                    self.isolate = self.isolate.max(items.len());
                    for item in items.into_iter().rev() {
                        self.pending_events += usize::from(item.event_seq().is_some());
                        self.pending.push_front(item);
                    }
                } else if let Some(item) = items.into_iter().next() {
                    if let Item::Event { row, object: Some(object), degraded: false } = item {
                        // An event row and its object's row: which one was refused? Each alone, whole, next.
                        self.pending_events += 1;
                        self.pending.push_front(Item::Object { row: object, degraded: false });
                        self.pending.push_front(Item::Event { row, object: None, degraded: false });
                        self.isolate = self.isolate.max(2);
                    } else if item.degraded() {
                        self.counters.rows_skipped += 1;
                        match item {
                            // The event row goes; its object's row still says where the object is now.
                            Item::Event { object: Some(row), .. } => {
                                self.pending.push_front(Item::Object { row, degraded: false });
                                self.isolate = self.isolate.max(1);
                            }
                            _ => self.isolate = self.isolate.saturating_sub(1),
                        }
                    } else {
                        self.pending_events += usize::from(item.event_seq().is_some());
                        self.pending.push_front(item.degrade());
                        self.isolate = self.isolate.max(1);
                    }
                }
                // Refused data is not a store that is away: go on at once.
                self.last_error = None;
            }
        }
    }

    fn store_failed(&mut self, e: IoError) {
        self.counters.store_errors += 1;
        self.last_error = Some(e);
    }
}

/// A store failure as `/healthz` says it (`sink: store unavailable: …; retrying`), while the schema is made ready
/// as after.
pub fn store_failure(e: &IoError) -> String {
    match e {
        IoError::Timeout => "store unavailable: no answer in time".to_string(),
        IoError::Unavailable(m) => format!("store unavailable: {m}"),
        IoError::Refused(m) => format!("store refused the rows: {m}"),
    }
}

/// The sink's row for an event: text made storable (no NUL, which PostgreSQL text cannot hold; outputs cut at
/// `max_output` bytes on a character boundary).
pub fn event_row(owned: &Owned, max_output: usize) -> EventRow {
    let e = &owned.event;
    let (kind, from_state, to_state, output, definition) = match &e.body {
        EventBody::Put { def } => ("put", None, None, None, Some(definition_json(def))),
        EventBody::Delete => ("delete", None, None, None, None),
        EventBody::Pause => ("pause", None, None, None, None),
        EventBody::Resume => ("resume", None, None, None, None),
        EventBody::CheckRequested => ("check_requested", None, None, None, None),
        EventBody::Ack => ("ack", None, None, None, None),
        EventBody::Unack => ("unack", None, None, None, None),
        EventBody::Transition { from, to, output, .. } => {
            ("transition", Some(*from), Some(*to), Some(storable(output, max_output)), None)
        }
        EventBody::Soft { state, output, .. } => ("soft", None, Some(*state), Some(storable(output, max_output)), None),
        EventBody::Flapping { on: true } => ("flapping_start", None, None, None, None),
        EventBody::Flapping { on: false } => ("flapping_end", None, None, None, None),
        // The change as the log holds it (a receiver's secret is a reference, never the secret), in the
        // definition column: the store keeps who changed the policy when, and how.
        EventBody::Released { state, .. } => ("released", None, Some(*state), None, None),
        EventBody::Policy { change } => (
            "policy",
            None,
            None,
            None,
            Some(storable(&serde_json::to_string(change).expect("serializes"), usize::MAX)),
        ),
    };
    EventRow {
        seq: owned.seq,
        object: e.object.clone(),
        epoch: e.epoch,
        writer: e.writer.id.clone(),
        writer_incarnation: e.writer.incarnation,
        at: e.at,
        kind,
        from_state,
        to_state,
        output,
        command_id: e.command_id.clone(),
        definition,
        alert: AlertColumns::of(&e.body),
    }
}

/// The sink's row for an object after its event at `last_seq` (`None`: deleted).
pub fn object_row(id: &ObjectId, view: Option<&ObjectView>, last_seq: u64) -> ObjectRow {
    match view {
        Some(v) => ObjectRow {
            object: id.clone(),
            state: Some(v.state),
            definition: Some(definition_json(&v.def)),
            paused: v.paused,
            acknowledged: v.acked,
            deleted: false,
            last_seq,
            labels: Some(serde_json::to_string(&v.def.labels).expect("labels always serialize")),
            soft_state: v.soft().map(|s| s.state),
            soft_attempt: v.soft().map(|s| s.attempt),
            soft_attempts_needed: v.soft().map(|s| s.of),
            flapping: v.flapping(),
        },
        None => ObjectRow {
            object: id.clone(),
            state: None,
            definition: None,
            paused: false,
            acknowledged: false,
            deleted: true,
            last_seq,
            labels: None,
            soft_state: None,
            soft_attempt: None,
            soft_attempts_needed: None,
            flapping: false,
        },
    }
}

/// A definition as the store keeps it: its JSON, its secrets as `***` (the store is read by the history API and
/// by anyone with a database client), every string made storable first.
pub fn definition_json(def: &ObjectDef) -> String {
    let clean = |s: &String| storable(s, usize::MAX);
    let probe = match &def.probe {
        Probe::Http { url, expect_status } => {
            Probe::Http { url: storable(&url.redacted(), usize::MAX).into(), expect_status: *expect_status }
        }
        Probe::Tcp { addr } => Probe::Tcp { addr: clean(addr) },
        Probe::Exec { plugin, args } => Probe::Exec { plugin: clean(plugin), args: args.iter().map(clean).collect() },
    };
    let def = ObjectDef { probe, ..def.clone() };
    serde_json::to_string(&def).expect("a definition always serializes")
}

/// `s` without NUL characters (each becomes U+FFFD), cut to at most `max` bytes on a character boundary.
pub fn storable(s: &str, max: usize) -> String {
    let mut out = if s.contains('\0') { s.replace('\0', "\u{fffd}") } else { s.to_string() };
    if out.len() > max {
        let mut cut = max;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::{AlertState, SoftState};
    use crate::labels::Labels;

    #[test]
    fn a_results_columns_are_what_its_event_says() {
        let soft =
            |attempt, of| EventBody::Soft { state: State::Critical, attempt, of, output: "x".into(), flapping: None };
        let transition = |attempt, flapping| EventBody::Transition {
            from: State::Ok,
            to: State::Critical,
            output: "x".into(),
            attempt,
            flapping,
            flaps: false,
            notify: None,
        };
        let none = AlertColumns::default();
        for (body, want) in [
            (
                soft(1, 3),
                AlertColumns { hard: Some(false), attempt: Some(1), attempts_needed: Some(3), flapping: None },
            ),
            (soft(0, 0), AlertColumns { hard: Some(false), attempt: Some(0), ..none }),
            (
                transition(3, Some(true)),
                AlertColumns { hard: Some(true), attempt: Some(3), flapping: Some(true), ..none },
            ),
            (transition(0, None), AlertColumns { hard: Some(true), ..none }),
            (EventBody::Flapping { on: false }, AlertColumns { flapping: Some(false), ..none }),
            (EventBody::Ack, none),
            (EventBody::Put { def: ObjectDef::tcp("127.0.0.1:9", 1000, 100) }, none),
        ] {
            assert_eq!(AlertColumns::of(&body), want, "{body:?}");
        }
    }

    #[test]
    fn an_objects_row_carries_its_labels_and_alert_state() {
        let labels = Labels::new([("team".to_string(), "db".to_string())].into()).unwrap();
        let def = ObjectDef { labels, ..ObjectDef::tcp("127.0.0.1:9", 1000, 100) };
        let soft = SoftState { state: State::Critical, attempt: 2, of: 3, at: Time(5), seq: 9, output: "x".into() };
        let mut view = ObjectView {
            def,
            key: 0,
            state: State::Ok,
            paused: false,
            acked: false,
            anchor: Time(1),
            check_requested: None,
            last_transition: None,
            last_seq: 9,
            alert: Some(Box::new(AlertState { soft: Some(soft), flapping: true, ..AlertState::default() })),
        };
        let id = ObjectId::new("db").unwrap();
        let row = object_row(&id, Some(&view), 9);
        assert_eq!(row.labels.as_deref(), Some(r#"{"team":"db"}"#));
        assert_eq!(
            (row.soft_state, row.soft_attempt, row.soft_attempts_needed),
            (Some(State::Critical), Some(2), Some(3))
        );
        assert!(row.flapping);
        view.alert = None;
        view.def.labels = Labels::EMPTY;
        let row = object_row(&id, Some(&view), 10);
        assert_eq!((row.labels.as_deref(), row.soft_state, row.flapping), (Some("{}"), None, false));
        let gone = object_row(&id, None, 11);
        assert_eq!((gone.labels, gone.soft_attempt, gone.flapping), (None, None, false));
    }
}
