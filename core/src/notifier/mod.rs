//! The notifier: every accepted transition to every configured webhook endpoint, at least once; a repeat only
//! for a send that was in flight when its notifier crashed, paused past its ttl or was cut off, at most one per
//! such send, and every delivery of one transition to one endpoint with the same `webhook-id`.
//!
//! **Where progress lives.** Per object and endpoint, one record in the coordination store (a KV key on NATS):
//! `{done, claim}` — every transition of the object at or below `done` is handled for that endpoint (delivered,
//! or given up on), and `claim` names the member sending the next one. A notifier writes the claim by
//! compare-and-set **before** it sends, and `done` (clearing the claim) by compare-and-set after the endpoint
//! answered 2xx. So a delivery costs one HTTP request and two small compare-and-set writes; the claim is on the
//! path of the notification, the `done` write is not.
//!
//! **Why that keeps the promise.** The compare-and-set makes the claim exclusive: of two notifiers that both
//! believe they own an object during a membership change, at most one wins the record and sends; the other
//! re-reads it. A notifier that gains an object reads its records: a claim by a member that is still live in its
//! view is that member's send in flight, so it waits for it to be finished or released (a notifier that loses an
//! object finishes the send in flight and releases what it was retrying); a claim by a member that is gone is a
//! send in flight at a fault, so it is sent again. "Gone" is decided without clocks: the records live in the same
//! KV bucket as the membership keys, so they share one revision sequence, and a member is gone once this
//! notifier's view has moved past the claim's revision without it — the one permitted repeat, with the same `webhook-id`
//! (`jaque-<seq>-<endpoint>`, the same for every notifier). A claim write that got no answer may still land (a
//! store behind a slow link applies it late, after a read that did not see it): the claimer settles it with a
//! write of its own that expects the same revision, the claim again or, once the object has moved, the record
//! unclaimed, since at most one of two such writes lands; a claim nobody knows of would hold the object's new owner
//! up for as long as the claimer lives. A notifier claims only while its own membership key
//! is surely alive (a lease: two thirds of the ttl after a heartbeat the store acknowledged), so after a pause past
//! its ttl it starts nothing new until its key is back. Fenced events are never notified: the notifier reads the log
//! through the same `LogReader` as the engines, and acts on accepted transitions only. A transition from before
//! an endpoint first had a notifier is not sent: the first notifier to start records where the log stood (per
//! endpoint, create-if-absent), and every notifier begins there.
//!
//! Per object and endpoint, transitions go out in log order, one at a time; objects go out side by side (at most
//! `concurrency` sends per endpoint); each endpoint has its own lanes, so a slow or failing one never delays the
//! others. Only 2xx is success; 410 disables the endpoint in this process; every other answer, a connect error or
//! a timeout is retried with exponential backoff and jitter, honouring `Retry-After`, until `give_up` after the
//! first attempt, when it is counted failed and the notifier moves on.
//!
//! Driving it: `handle(now, input)` or `handle_timeout(now)`, then drain `poll_output()`, then re-arm the timer from
//! `poll_timeout()`. Every `WriteProgress` gets one `Written`, every `Send` one `Sent`, every `ReadProgress` one
//! `Progress`, every `Recheck` one `Rechecked`, `ReadStarts` one `Starts`, `Replay` one `Replayed`; every
//! `PutHeartbeat` one `HeartbeatWritten`, in order. A leaving notifier may exit once `is_done()`.

mod lanes;

use crate::backoff::Backoff;
use crate::follow::{Life, LifeOutput};
use crate::hrw;
use crate::io::IoError;
use crate::log::LogReader;
use crate::membership::LiveSet;
use crate::model::{Bucket, EventBody, LogEntry, MemberId, MemberRef, ObjectId, State};
use crate::role::{After, LogRole, Owned, RoleConfig, RoleOutput, RoleTimer, Work};
use crate::time::{rfc3339_millis, Time};
use lanes::{Lane, LaneKey, LaneState, Lanes, Transition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

/// An endpoint's identity: XXH3-64 of its URL, so every notifier configured with the same URL names it alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EndpointId(pub u64);

impl EndpointId {
    pub fn of(url: &str) -> EndpointId {
        EndpointId(hrw::key(url))
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub id: EndpointId,
    pub url: String,
}

impl Endpoint {
    pub fn new(url: impl Into<String>) -> Endpoint {
        let url = url.into();
        Endpoint { id: EndpointId::of(&url), url }
    }
}

/// The progress record of one object at one endpoint, as it is stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// Every transition at or below this log position is handled for this endpoint.
    pub done: u64,
    /// The member sending the next one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub seq: u64,
    pub by: MemberRef,
}

/// A record as read, with the store's revision (the compare-and-set precondition of the next write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub record: DeliveryRecord,
    pub rev: u64,
}

#[derive(Clone, Debug)]
pub struct NotifierConfig {
    pub role: RoleConfig,
    pub endpoints: Vec<Endpoint>,
    /// Sends in flight per endpoint, at most.
    pub concurrency: usize,
    /// `-notify-give-up`: how long after its first attempt a delivery is retried.
    pub give_up: Duration,
    /// Retries of a delivery: `retry_base` doubling to `retry_max`, with jitter.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Retries of a failed progress read or write.
    pub store_retry_base: Duration,
    pub store_retry_max: Duration,
    /// How often a record claimed by another live member is read again.
    pub claim_recheck: Duration,
    /// Transitions queued over every lane; past this they are dropped and read from the log again later.
    pub max_pending: usize,
    pub leave_timeout: Duration,
}

impl NotifierConfig {
    pub fn new(me: MemberRef, ttl: Duration, endpoints: Vec<Endpoint>) -> NotifierConfig {
        NotifierConfig {
            role: RoleConfig::new(Bucket::Notifier, me, ttl),
            endpoints,
            concurrency: 16,
            give_up: Duration::from_secs(24 * 3600),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            store_retry_base: Duration::from_millis(200),
            store_retry_max: Duration::from_secs(10),
            claim_recheck: Duration::from_secs(1),
            max_pending: 20_000,
            leave_timeout: Duration::from_secs(10),
        }
    }
}

/// How an endpoint answered a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendResult {
    /// 2xx.
    Delivered,
    /// 410 Gone: the endpoint asks not to be sent anything more.
    Gone,
    /// Anything else (3xx, 4xx, 5xx, 429, a connect error, a timeout): retry, not before `after` if it said so.
    Retry { after: Option<Duration>, reason: String },
}

/// One POST: the shell adds `webhook-timestamp` and `webhook-signature`, the rest is here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub op: u64,
    pub endpoint: EndpointId,
    pub url: String,
    /// `webhook-id`: the same for every attempt and every notifier.
    pub webhook_id: String,
    /// The JSON body (the same for every attempt of this notifier).
    pub body: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub object: ObjectId,
    pub seq: u64,
}

/// The JSON body of a notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    #[serde(rename = "type")]
    pub kind: String,
    pub object: ObjectId,
    pub from: State,
    pub to: State,
    pub output: String,
    /// When the transition's writer wrote it (RFC 3339, UTC).
    pub at: String,
    pub seq: u64,
    pub epoch: u64,
    pub writer: MemberId,
    /// Whether the object is acknowledged in the log as this notifier read it when it built the notification.
    pub acknowledged: bool,
}

/// What a notification of an accepted event says (`kind`, from, to, output), if it is one: a hard transition,
/// unless the object flaps; a flapping start or end (with the transition it came with, or else the object's hard
/// state as this notifier's reader has it). A soft state never notifies. Decided from the event alone, so every
/// notifier decides the same for it, whether it reads the event live or again in a replay.
fn notified(owned: &Owned, reader: &LogReader) -> Option<(&'static str, State, State, String)> {
    let hard = || reader.object(&owned.event.object).map_or(State::Pending, |v| v.state);
    let flap_kind = |on: bool| if on { "flapping_start" } else { "flapping_end" };
    match &owned.event.body {
        // Not to this notifier's endpoints where its writer decided so (`policy::decide`: a silence, a window, a
        // parent down, or routes that end before the implicit route), the flapping start or end it says included.
        EventBody::Transition { notify: Some(n), .. } if !n.implicit => None,
        EventBody::Transition { from, to, output, flapping: Some(on), .. } => {
            Some((flap_kind(*on), *from, *to, output.clone()))
        }
        // While an object flaps its transitions are not sent.
        EventBody::Transition { flaps: true, .. } => None,
        EventBody::Transition { from, to, output, .. } => Some(("transition", *from, *to, output.clone())),
        EventBody::Soft { flapping: Some(on), output, .. } => Some((flap_kind(*on), hard(), hard(), output.clone())),
        EventBody::Flapping { on } => Some((flap_kind(*on), hard(), hard(), String::new())),
        // A problem held back when it started, sent now that nothing holds it (`from` and `to`: its state).
        EventBody::Released { state, notify, .. } if notify.implicit => {
            Some(("released", *state, *state, String::new()))
        }
        _ => None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The inputs every member that follows the log takes (`Life::Leave`: finish or give back every claim,
    /// within `NotifierConfig::leave_timeout`, then delete the key and `is_done()`).
    Life(Life),
    /// The answer to `ReadStarts`: where each endpoint's notifications begin.
    Starts {
        result: Result<Vec<(EndpointId, u64)>, IoError>,
    },
    /// The answer to `ReadProgress` (a resume's question): the records that exist (a missing one: none yet).
    Progress {
        token: u64,
        result: Result<Vec<(ObjectId, EndpointId, Stored)>, IoError>,
    },
    /// The answer to `Recheck` (a lane's question): the object's records that exist, read as `ReadProgress` reads.
    Rechecked {
        token: u64,
        result: Result<Vec<(ObjectId, EndpointId, Stored)>, IoError>,
    },
    Replayed {
        token: u64,
        result: Result<(u64, Vec<(u64, LogEntry)>), IoError>,
    },
    /// The answer to `WriteProgress`: `Some(rev)` written, `None` the record was not at the expected revision.
    Written {
        op: u64,
        result: Result<Option<u64>, IoError>,
    },
    Sent {
        op: u64,
        result: SendResult,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// What every member that follows the log asks of its driver (heartbeats, a snapshot past a hole).
    Life(LifeOutput),
    /// For each endpoint: create its start record at `propose` if it has none; answer what it holds.
    ReadStarts {
        endpoints: Vec<EndpointId>,
        propose: u64,
    },
    /// Read the records of these objects at every endpoint: what a resume needs to know of the objects it gains.
    ReadProgress {
        token: u64,
        objects: Vec<ObjectId>,
    },
    /// Read the object's records at every endpoint again: a lane waits on another member's claim, or could not
    /// read its record.
    Recheck {
        token: u64,
        object: ObjectId,
    },
    Replay {
        token: u64,
        from: u64,
        to: u64,
    },
    /// Write the record only if it is at revision `expect` (`None`: only if there is none).
    WriteProgress {
        op: u64,
        object: ObjectId,
        endpoint: EndpointId,
        record: DeliveryRecord,
        expect: Option<u64>,
    },
    Send(Delivery),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    Heartbeat,
    ResumeRetry,
    /// A delivery's backoff, a claim recheck, a progress write retry.
    Lane,
    StartsRetry,
    LeaveDeadline,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotifierCounters {
    /// `jaque_notifier_deliveries_total{outcome}`.
    pub delivered: u64,
    pub retry: u64,
    pub failed: u64,
    pub disabled: u64,
    /// Claims that found the record changed (another notifier wrote it).
    pub claims_lost: u64,
    pub store_errors: u64,
    pub overflows: u64,
    /// Sends of a transition some member had claimed and is gone: the permitted repeats.
    pub resent_after_fault: u64,
    /// Transitions read live that their writer sent to none of this notifier's endpoints
    /// (`jaque_notifier_not_sent_total{reason}`), by why: `silenced`, `maintenance_window`, `parent_down`, or
    /// `routes` (the policy's routes took it and did not go on to the implicit route).
    pub not_sent: BTreeMap<String, u64>,
}

/// What an outstanding operation is for.
#[derive(Clone, Debug)]
enum Op {
    Write(LaneKey),
    Send(LaneKey),
}

pub struct Notifier {
    cfg: NotifierConfig,
    role: LogRole,
    /// The lanes that say something: a lane not held is, for an object this member owns, one that nothing is known
    /// of but its endpoint's start (`Lane::fresh`), which a resume's progress query reads like one just gained.
    /// Every object and endpoint with no record and no transition since the start has none: a notifier pays
    /// per object only for what it has delivered or has to.
    lanes: Lanes,
    disabled: Vec<bool>,
    /// Lanes per endpoint that are claiming or sending (the concurrency bound).
    sending: Vec<usize>,
    /// Per endpoint, the lanes with a transition to claim: an endpoint at its bound is not walked.
    ready: Vec<VecDeque<LaneKey>>,
    ops: BTreeMap<u64, Op>,
    next_op: u64,
    /// Rechecks of lanes, by token (from `RECHECK` on, so no driver ever sees one token for two questions).
    rechecks: BTreeMap<u64, ObjectId>,
    next_recheck: u64,
    /// The role's progress queries out, with the objects they ask for.
    role_queries: BTreeMap<u64, Vec<ObjectId>>,
    starts: Option<Vec<u64>>,
    starts_asked: bool,
    /// Asked to leave; the key is deleted once every claim is finished.
    draining: bool,
    starts_retry: Option<Time>,
    store_backoff: Backoff,
    /// Claims are started only while the member's key is surely alive.
    started: bool,
    leave_deadline: Option<Time>,
    timed_out: bool,
    outputs: VecDeque<Output>,
    pub counters: NotifierCounters,
}

const RECHECK: u64 = 1 << 62;

/// Who asked for records read (`handle_records`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Resume,
    Recheck,
}

impl Notifier {
    pub fn new(mut cfg: NotifierConfig) -> Notifier {
        // A resume reads on while the queue is below half of `max_pending`, a read bringing up to
        // `replay_chunk` transitions per endpoint, and hands over up to `max_held` per endpoint at its end: a
        // bound below that overflows in the step a read lands, and the resume that follows reads the same again,
        // forever. Raised to what a resume can bring.
        cfg.max_pending = cfg.max_pending.max(Notifier::resume_room(&cfg));
        let n = cfg.endpoints.len();
        let salt = hrw::key(cfg.role.me.id.as_str()) ^ cfg.role.me.incarnation.rotate_left(29);
        // Two thirds of the ttl: a margin for the store's expiry running early against this process's clock.
        cfg.role.lease_span = cfg.role.ttl * 2 / 3;
        Notifier {
            role: LogRole::new(cfg.role.clone()),
            store_backoff: Backoff::new(cfg.store_retry_base, cfg.store_retry_max, salt),
            cfg,
            lanes: Lanes::default(),
            disabled: vec![false; n],
            sending: vec![0; n],
            ready: vec![VecDeque::new(); n],
            ops: BTreeMap::new(),
            next_op: 0,
            rechecks: BTreeMap::new(),
            next_recheck: RECHECK,
            role_queries: BTreeMap::new(),
            starts: None,
            starts_asked: false,
            draining: false,
            starts_retry: None,
            started: false,
            leave_deadline: None,
            timed_out: false,
            outputs: VecDeque::new(),
            counters: NotifierCounters::default(),
        }
    }

    // ---- getters ----

    /// The fewest transitions a notifier must be able to queue for a resume to finish (see `new`).
    pub fn resume_room(cfg: &NotifierConfig) -> usize {
        let endpoints = cfg.endpoints.len().max(1);
        let chunk = usize::try_from(cfg.role.replay_chunk).unwrap_or(usize::MAX);
        chunk
            .saturating_mul(2)
            .saturating_add(cfg.role.max_held)
            .saturating_mul(endpoints)
            .saturating_add(cfg.concurrency.saturating_mul(endpoints))
    }

    pub fn me(&self) -> &MemberRef {
        self.role.me()
    }

    pub fn role(&self) -> &LogRole {
        &self.role
    }

    pub fn config(&self) -> &NotifierConfig {
        &self.cfg
    }

    /// Whether endpoint `i` answered 410 and is no longer sent to.
    pub fn is_disabled(&self, i: usize) -> bool {
        self.disabled.get(i).copied().unwrap_or(false)
    }

    /// Log positions read whose transitions are not yet handled at every endpoint (0: caught up).
    pub fn lag(&self) -> u64 {
        let lanes = self.lanes.values().filter_map(|l| {
            let inflight = match &l.state {
                LaneState::Claiming { t, .. } | LaneState::Sending { t, .. } | LaneState::Backoff { t, .. } => {
                    Some(t.seq)
                }
                _ => None,
            };
            inflight.or_else(|| l.queue().front().map(|t| t.seq))
        });
        let resume = self.role.is_resuming().then(|| self.role.replaying_from().unwrap_or(1));
        match lanes.chain(resume).min() {
            Some(seq) => self.role.reader().position().saturating_sub(seq.saturating_sub(1)),
            None => 0,
        }
    }

    pub fn health(&self) -> crate::role::Health {
        let (ready, reason) = if !self.started {
            (false, "starting".to_string())
        } else if self.leaving() {
            (false, "leaving".to_string())
        } else if let Some(covering) = self.role.needs_snapshot() {
            (false, crate::compact::hole_reason(covering))
        } else if !self.role.is_caught_up() {
            (false, "reading the log".to_string())
        } else if self.starts.is_none() {
            (false, "reading where notifications begin".to_string())
        } else if self.disabled.iter().all(|d| *d) && !self.disabled.is_empty() {
            (false, "every endpoint answered 410 Gone".to_string())
        } else {
            (true, "ready".to_string())
        };
        crate::role::Health { ready, reason }
    }

    /// A leaving notifier has finished or released every claim (or its deadline passed) and deleted its key: it
    /// may exit.
    pub fn is_done(&self) -> bool {
        self.role.is_leaving() && (self.timed_out || self.drained())
    }

    /// Leaving: asked to (finishing its claims), or its key already deleted.
    pub fn is_leaving(&self) -> bool {
        self.leaving()
    }

    fn leaving(&self) -> bool {
        self.draining || self.role.is_leaving()
    }

    fn drained(&self) -> bool {
        !self.lanes.values().any(|l| l.busy()) && !self.ops.values().any(|o| matches!(o, Op::Write(_) | Op::Send(_)))
    }

    /// Self-checks the simulator and the tests run after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.lanes.check_count()?;
        for (i, n) in self.sending.iter().enumerate() {
            let actual = self
                .lanes
                .iter()
                .filter(|((e, _), l)| {
                    *e == i && matches!(l.state, LaneState::Claiming { .. } | LaneState::Sending { .. })
                })
                .count();
            if actual != *n {
                return Err(format!("endpoint {i}: {actual} lanes claiming or sending, counted {n}"));
            }
        }
        let ready: BTreeSet<&LaneKey> = self.ready.iter().flatten().collect();
        for (key, lane) in self.lanes.iter() {
            // Idle with work, on an object of ours, is waiting for its endpoint's turn: nothing else starts it.
            let idle_with_work = lane.state == LaneState::Idle && !lane.queue().is_empty();
            if idle_with_work && !self.disabled[key.0] && self.role.owns(&key.1) && !ready.contains(key) {
                return Err(format!("{}: idle with {} queued and not ready to claim", key.1, lane.queue().len()));
            }
            if lane.is_fresh(self.start(key.0)) {
                return Err(format!("{}: a lane that says nothing more than one not held is held", key.1));
            }
            if let Some(d) = lane.deadline() {
                if !self.lanes.deadlines.contains(d, key) {
                    return Err(format!("{}: lane deadline {d} not armed", key.1));
                }
            }
            // Per lane, one transition at a time and in log order.
            let inflight = match &lane.state {
                LaneState::Claiming { t, .. } | LaneState::Sending { t, .. } | LaneState::Backoff { t, .. } => {
                    Some(t.seq)
                }
                _ => None,
            };
            let mut prev = inflight.unwrap_or(0).max(lane.done);
            for t in lane.queue() {
                if t.seq <= prev {
                    return Err(format!("{}: queued {} after {}", key.1, t.seq, prev));
                }
                prev = t.seq;
            }
            if prev > lane.handed {
                return Err(format!("{}: queued up to {prev}, handed {}", key.1, lane.handed));
            }
        }
        for (op, what) in &self.ops {
            let (Op::Write(key) | Op::Send(key)) = what;
            let ok = self.lanes.get(key).is_some_and(|l| match (&l.state, what) {
                (LaneState::Claiming { op: o, .. }, Op::Write(_))
                | (LaneState::Recording { op: o, .. }, Op::Write(_))
                | (LaneState::Sending { op: o, .. }, Op::Send(_)) => o == op,
                _ => false,
            });
            if !ok {
                return Err(format!("operation {op} ({what:?}) has no lane waiting for it"));
            }
        }
        Ok(())
    }

    // ---- inputs ----

    pub fn handle(&mut self, now: Time, input: Input) {
        match input {
            Input::Life(life) => self.handle_life(now, life),
            Input::Starts { result } => match result {
                Ok(v) => {
                    let by: BTreeMap<EndpointId, u64> = v.into_iter().collect();
                    let starts: Vec<u64> =
                        self.cfg.endpoints.iter().map(|e| by.get(&e.id).copied().unwrap_or(0)).collect();
                    // Transitions met before the starts were known: none at or below an endpoint's start goes out.
                    self.lanes.update_all(
                        |(i, _), lane| {
                            lane.done = lane.done.max(starts[*i]);
                            lane.handed = lane.handed.max(lane.done);
                        },
                        |(i, _), lane| {
                            lane.settle();
                            !lane.is_fresh(starts[*i])
                        },
                    );
                    self.starts = Some(starts);
                    self.store_backoff.reset();
                }
                Err(_) => {
                    self.counters.store_errors += 1;
                    self.starts_asked = false;
                    self.starts_retry = Some(now + self.store_backoff.next_delay());
                }
            },
            Input::Progress { token, result } => self.handle_records(now, Asked::Resume, token, result),
            Input::Rechecked { token, result } => self.handle_records(now, Asked::Recheck, token, result),
            Input::Replayed { token, result } => self.role.handle_replayed(now, token, result),
            Input::Written { op, result } => self.handle_written(now, op, result),
            Input::Sent { op, result } => self.handle_sent(now, op, result),
        }
        self.step(now);
    }

    fn handle_life(&mut self, now: Time, life: Life) {
        match life {
            Life::Start => {
                self.started = true;
                self.role.handle_start(now);
            }
            Life::Member(obs) => {
                self.role.handle_member(now, &obs);
                self.ownership_changed(now);
            }
            Life::Restore(reader) => {
                // The hole's transitions were never queued; what is queued is read again after the jump, so
                // every owned object is resumed from its records (a running resume too: what it read is dropped).
                if reader.position() > self.role.reader().position() {
                    self.drop_queued();
                    self.role.handle_restore(*reader);
                    self.role.resume_all_owned();
                }
            }
            Life::Leave => {
                if !self.draining && !self.role.is_leaving() {
                    // Finish what is claimed before the key goes: the objects stay ours (nobody takes them over
                    // and repeats a send of ours) until every claim is recorded or given back.
                    self.draining = true;
                    self.leave_deadline = Some(now + self.cfg.leave_timeout);
                    self.release_backoffs();
                }
            }
            life => {
                self.role.handle_life(now, life);
                // An entry this build cannot read: its objects go to notifiers that read on.
                if self.role.blocked_reason().is_some() {
                    self.handle_life(now, Life::Leave);
                }
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Time) {
        self.role.handle_timeout(now);
        if self.starts_retry.is_some_and(|t| t <= now) {
            self.starts_retry = None;
        }
        if self.leave_deadline.is_some_and(|t| t <= now) {
            self.leave_deadline = None;
            self.timed_out = true;
        }
        while let Some((t, key)) = self.lanes.deadlines.pop_due(now) {
            self.lane_due(now, key, t);
        }
        self.step(now);
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
        [
            role,
            self.lanes.deadlines.first().map(|t| (t, Timer::Lane)),
            self.starts_retry.map(|t| (t, Timer::StartsRetry)),
            self.leave_deadline.map(|t| (t, Timer::LeaveDeadline)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ---- the role's work and outputs ----

    fn step(&mut self, now: Time) {
        if self.draining && !self.role.is_leaving() && (self.timed_out || self.drained()) {
            self.role.handle_leave();
            self.ownership_changed(now);
        }
        loop {
            while let Some(work) = self.role.take_work() {
                self.take(work);
            }
            if self.lanes.queued() > self.cfg.max_pending {
                self.overflow();
            }
            if self.starts.is_some() {
                self.role.drive(self.lanes.queued() < self.cfg.max_pending / 2);
            }
            while let Some(out) = self.role.poll_output() {
                match out {
                    RoleOutput::Life(life) => self.outputs.push_back(Output::Life(life)),
                    RoleOutput::QueryProgress { token, objects } => {
                        // The lanes of these objects that are not held are read when the answer comes.
                        self.role_queries.insert(token, objects.clone());
                        self.outputs.push_back(Output::ReadProgress { token, objects });
                    }
                    RoleOutput::Replay { token, from, to } => {
                        self.outputs.push_back(Output::Replay { token, from, to })
                    }
                }
            }
            if self.role.has_work() {
                continue;
            }
            break;
        }
        if self.role.is_caught_up() && self.starts.is_none() && !self.starts_asked && self.starts_retry.is_none() {
            self.starts_asked = true;
            let endpoints = self.cfg.endpoints.iter().map(|e| e.id).collect();
            // Where the log stands as handed in, not where the reader stands: one waiting at a hole is behind it.
            self.outputs.push_back(Output::ReadStarts { endpoints, propose: self.role.reached() });
        }
        self.pump(now);
    }

    fn take(&mut self, work: Work) {
        let Work::Event(owned) = work else { return };
        let said = match &owned.event.body {
            EventBody::Transition { notify: Some(n), .. } | EventBody::Released { notify: n, .. } => Some(n),
            _ => None,
        };
        if let (Some(n), After::Live(_)) = (said, &owned.after) {
            if !n.implicit {
                let reason = n.suppressed.as_ref().map_or("routes", |s| s.reason.as_str());
                *self.counters.not_sent.entry(reason.to_string()).or_default() += 1;
            }
        }
        let Some((kind, from, to, output)) = notified(&owned, self.role.reader()) else { return };
        let t = Transition {
            kind,
            seq: owned.seq,
            object: owned.event.object.clone(),
            from,
            to,
            output,
            at: owned.event.at,
            epoch: owned.event.epoch,
            writer: owned.event.writer.id.clone(),
        };
        for i in 0..self.cfg.endpoints.len() {
            if self.disabled[i] {
                self.counters.disabled += 1;
                continue;
            }
            let key = (i, t.object.clone());
            let start = self.start(i);
            let (done, handed) = self.lanes.get(&key).map_or((start, start), |l| (l.done, l.handed));
            if t.seq <= handed || t.seq <= done {
                continue;
            }
            // An object met live with no lane (created after we gained the rest, or nothing known of it): its
            // record, if one exists, is found by the compare-and-set of the first claim, which expects none.
            if self.lanes.push_back(&key, start, t.clone()) {
                self.ready[key.0].push_back(key);
            }
        }
    }

    /// Too much queued: drop every queued transition (not those in flight) and resume every owned object from
    /// the records, reading the log again.
    fn overflow(&mut self) {
        self.counters.overflows += 1;
        self.drop_queued();
        self.role.resume_all_owned();
    }

    /// Drops every queued transition; each lane is read again from what it handed out (the resume that
    /// follows brings them back from the log).
    fn drop_queued(&mut self) {
        // A lane at rest goes altogether: its record is read again with the rest (a lane not held reads as one
        // to be read), and a notifier with many objects does not grow to mark each of them.
        self.lanes.clear_queues(|_, lane| {
            if lane.at_rest() {
                return false;
            }
            lane.handed = lane.state.in_flight().map_or(lane.done, |t| t.seq);
            if matches!(lane.state, LaneState::Idle) {
                lane.state = LaneState::Unread;
            }
            true
        });
        self.ready.iter_mut().for_each(VecDeque::clear);
    }

    // ---- progress records ----

    /// Records read for a resume's question or a lane's recheck: the two ask alike and differ in what an answer
    /// does (a resume's creates the lanes it reads and tells the role each object's least `done`; a recheck's only
    /// applies to the lanes reading with it).
    fn handle_records(
        &mut self,
        now: Time,
        asked: Asked,
        token: u64,
        result: Result<Vec<(ObjectId, EndpointId, Stored)>, IoError>,
    ) {
        let recheck = asked == Asked::Recheck;
        let asked =
            if recheck { self.rechecks.remove(&token).map(|id| vec![id]) } else { self.role_queries.remove(&token) };
        let Some(asked) = asked else { return };
        let records = match result {
            Ok(r) => r,
            Err(e) => {
                self.counters.store_errors += 1;
                if recheck {
                    let delay = self.store_backoff.next_delay();
                    for id in asked {
                        for i in 0..self.cfg.endpoints.len() {
                            self.wait((i, id.clone()), now + delay, Some(token));
                        }
                    }
                } else {
                    self.role.handle_progress(now, token, Err(e));
                }
                return;
            }
        };
        self.store_backoff.reset();
        let index: BTreeMap<EndpointId, usize> =
            self.cfg.endpoints.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
        let by_key: BTreeMap<LaneKey, Stored> =
            records.into_iter().filter_map(|(id, ep, s)| index.get(&ep).map(|i| ((*i, id), s))).collect();
        let starts = self.starts.clone().unwrap_or_default();
        let view = self.role.membership().view().clone();
        let me = self.me().clone();
        // Each asked object's least `done` over its endpoints, in the order asked (a resume asks for every object
        // it takes on: a list, not a map, is what a million of them should cost).
        let mut least: Vec<(ObjectId, u64)> = Vec::new();
        for id in asked {
            let owned = self.role.owns(&id);
            for i in 0..self.cfg.endpoints.len() {
                let key = (i, id.clone());
                let stored = by_key.get(&key);
                let not_ours = !owned || self.leaving();
                if !recheck && owned {
                    self.lanes.insert_if_absent(key.clone(), Lane::unread(starts.get(i).copied().unwrap_or(0)));
                }
                let Some(lane) = self.lanes.get_mut(&key) else { continue };
                let applies = match &lane.state {
                    LaneState::Unread => !recheck,
                    LaneState::Reading { token: t } => *t == token,
                    _ => false,
                };
                // A claim write that got no answer expected the record at `lane.rev`. Found there still, the write
                // has not landed but may yet (a store behind a slow link applies it late): only a write of ours that
                // expects the same revision settles it, as at most one of the two can land.
                let pending = applies && lane.unsure && stored.map(|s| s.rev) == lane.rev;
                if applies && lane.unsure && not_ours {
                    // Kept only to settle a claim write that got no answer: give the claim back if it landed, and
                    // if it may still land, write the record unclaimed where it expects it first.
                    lane.unsure = pending;
                    lane.state = LaneState::Idle;
                    let ours = stored.and_then(|s| s.record.claim.as_ref()).is_some_and(|c| c.by == me);
                    if let Some(s) = stored {
                        lane.done = lane.done.max(s.record.done);
                        lane.rev = Some(s.rev);
                    }
                    if ours || pending {
                        self.release(key, None);
                    } else {
                        self.drop_lane(&key);
                    }
                    continue;
                }
                if applies && recheck && !owned {
                    // A record read again for a lane of an object this notifier has lost since: the new owner's now.
                    // Kept, the lane would be found later, on gaining the object again, idle with work no one starts.
                    self.drop_lane(&key);
                    continue;
                }
                if applies {
                    lane.done = lane.done.max(starts.get(i).copied().unwrap_or(0));
                    // Still pending, the next claim here (which expects the same revision) settles it.
                    lane.unsure = pending;
                    let mut claimed_by_live = false;
                    if let Some(s) = stored {
                        lane.done = lane.done.max(s.record.done);
                        lane.rev = Some(s.rev);
                        if let Some(c) = &s.record.claim {
                            if c.seq > lane.done {
                                // The record may hold this notifier's own claim (a write that got no answer but
                                // landed): it stays to give back if the lane goes before claiming again.
                                lane.unsure = pending || c.by == me;
                                let gone = claim_is_gone(c, s.rev, &me, &view);
                                claimed_by_live = !gone;
                                lane.resend = gone;
                            }
                        }
                    }
                    lane.handed = lane.handed.max(lane.done);
                    self.lanes.drop_done(&key);
                    if claimed_by_live {
                        self.wait(key.clone(), now + self.cfg.claim_recheck, None);
                    } else {
                        let lane = self.lanes.get_mut(&key).expect("read just now");
                        lane.state = LaneState::Idle;
                        if !lane.queue().is_empty() {
                            self.ready[key.0].push_back(key.clone());
                        }
                    }
                }
                let Some(done) = self.lanes.get(&key).map(|l| l.done) else { continue };
                self.tidy(&key);
                match least.last_mut() {
                    Some((last, d)) if *last == id => *d = (*d).min(done),
                    _ => least.push((id.clone(), done)),
                }
            }
        }
        if !recheck {
            self.role.handle_progress(now, token, Ok(least));
        }
    }

    /// Where endpoint `i`'s notifications begin (0 until the starts are known): what a lane not held says.
    fn start(&self, i: usize) -> u64 {
        self.starts.as_ref().and_then(|s| s.get(i).copied()).unwrap_or(0)
    }

    /// A lane back at rest lets go of its work part, and goes altogether if it says nothing a lane not held does
    /// not.
    fn tidy(&mut self, key: &LaneKey) {
        let start = self.start(key.0);
        let fresh = self.lanes.get_mut(key).is_some_and(|lane| {
            lane.settle();
            lane.is_fresh(start)
        });
        if fresh {
            self.lanes.remove(key);
        }
    }

    /// Read the lane's record again at `until`.
    fn wait(&mut self, key: LaneKey, until: Time, only_if_reading: Option<u64>) {
        let Some(lane) = self.lanes.get(&key) else { return };
        if let Some(tok) = only_if_reading {
            if lane.state != (LaneState::Reading { token: tok }) {
                return;
            }
        }
        self.lanes.set_state(&key, LaneState::Waiting { until });
    }

    fn lane_due(&mut self, now: Time, key: LaneKey, at: Time) {
        let Some(lane) = self.lanes.get_mut(&key) else { return };
        if lane.deadline() != Some(at) {
            return;
        }
        match std::mem::replace(&mut lane.state, LaneState::Idle) {
            LaneState::Waiting { .. } => {
                let token = self.next_recheck;
                self.next_recheck += 1;
                lane.state = LaneState::Reading { token };
                self.rechecks.insert(token, key.1.clone());
                self.outputs.push_back(Output::Recheck { token, object: key.1.clone() });
                // Every endpoint's lane of this object reads with this token only if it was waiting too; the others
                // keep their state (the answer only applies to lanes reading with it).
            }
            LaneState::Backoff { t, body, first, attempt, .. } => {
                if !self.role.owns(&key.1) || self.disabled[key.0] {
                    self.release(key, None);
                    return;
                }
                self.send(now, key, t, body, first, attempt + 1);
            }
            LaneState::Recording { op, record, .. } => {
                lane.state = LaneState::Recording { op, record: record.clone(), retry_at: None };
                let expect = lane.rev;
                self.outputs.push_back(Output::WriteProgress {
                    op,
                    object: key.1.clone(),
                    endpoint: self.cfg.endpoints[key.0].id,
                    record,
                    expect,
                });
            }
            other => lane.state = other,
        }
    }

    // ---- delivering ----

    /// Starts claims on ready lanes while each endpoint has room.
    fn pump(&mut self, now: Time) {
        let may_claim =
            self.starts.is_some() && self.role.is_caught_up() && !self.leaving() && self.role.lease_holds(now);
        if !may_claim {
            return;
        }
        // Each endpoint claims while it is below its bound; the lanes left wait in its queue, not walked again
        // until one of its sends ends (an answer costs no more with many objects waiting).
        for i in 0..self.ready.len() {
            if self.disabled[i] {
                self.ready[i].clear();
                continue;
            }
            while self.sending[i] < self.cfg.concurrency {
                let Some(key) = self.ready[i].pop_front() else { break };
                let Some(lane) = self.lanes.get(&key) else { continue };
                if lane.state != LaneState::Idle || lane.queue().is_empty() || !self.role.owns(&key.1) {
                    continue;
                }
                self.claim(key);
            }
        }
    }

    fn claim(&mut self, key: LaneKey) {
        let me = self.me().clone();
        let op = self.op(Op::Write(key.clone()));
        let t = self.lanes.pop_front(&key).expect("a ready lane has a transition");
        let lane = self.lanes.get_mut(&key).expect("a ready lane exists");
        let record = DeliveryRecord { done: lane.done, claim: Some(Claim { seq: t.seq, by: me }) };
        let expect = lane.rev;
        lane.state = LaneState::Claiming { op, t };
        self.sending[key.0] += 1;
        self.outputs.push_back(Output::WriteProgress {
            op,
            object: key.1.clone(),
            endpoint: self.cfg.endpoints[key.0].id,
            record,
            expect,
        });
    }

    fn op(&mut self, op: Op) -> u64 {
        let n = self.next_op;
        self.next_op += 1;
        self.ops.insert(n, op);
        n
    }

    fn body(&self, t: &Transition) -> String {
        let acknowledged = self.role.reader().object(&t.object).is_some_and(|v| v.acked);
        let n = Notification {
            kind: t.kind.into(),
            object: t.object.clone(),
            from: t.from,
            to: t.to,
            output: t.output.clone(),
            at: rfc3339_millis(t.at),
            seq: t.seq,
            epoch: t.epoch,
            writer: t.writer.clone(),
            acknowledged,
        };
        serde_json::to_string(&n).expect("a notification always serializes")
    }

    fn send(&mut self, now: Time, key: LaneKey, t: Transition, body: String, first: Time, attempt: u32) {
        let op = self.op(Op::Send(key.clone()));
        let ep = &self.cfg.endpoints[key.0];
        let delivery = Delivery {
            op,
            endpoint: ep.id,
            url: ep.url.clone(),
            webhook_id: format!("jaque-{}-{}", t.seq, ep.id),
            body: body.clone(),
            attempt,
            object: key.1.clone(),
            seq: t.seq,
        };
        let lane = self.lanes.get_mut(&key).expect("the lane sending exists");
        if lane.resend && attempt == 1 {
            lane.resend = false;
            self.counters.resent_after_fault += 1;
        }
        lane.state = LaneState::Sending { op, t, body, first, attempt };
        if attempt > 1 {
            self.sending[key.0] += 1;
        }
        let _ = now;
        self.outputs.push_back(Output::Send(delivery));
    }

    fn handle_written(&mut self, now: Time, op: u64, result: Result<Option<u64>, IoError>) {
        let Some(Op::Write(key)) = self.ops.remove(&op) else { return };
        self.written(now, op, key.clone(), result);
        self.tidy(&key);
    }

    fn written(&mut self, now: Time, op: u64, key: LaneKey, result: Result<Option<u64>, IoError>) {
        let leaving = self.leaving();
        let Some(lane) = self.lanes.get_mut(&key) else { return };
        match std::mem::replace(&mut lane.state, LaneState::Idle) {
            LaneState::Claiming { op: o, t } if o == op => {
                self.sending[key.0] -= 1;
                match result {
                    Ok(Some(rev)) => {
                        lane.rev = Some(rev);
                        lane.store_attempts = 0;
                        lane.unsure = false;
                        if !self.role.owns(&key.1) || leaving || self.disabled[key.0] {
                            // Lost it while claiming: give the claim back unsent.
                            self.lanes.push_front(&key, t);
                            self.release(key, None);
                            return;
                        }
                        self.sending[key.0] += 1;
                        let body = self.body(&t);
                        self.send(now, key, t, body, now, 1);
                    }
                    Ok(None) => {
                        self.lanes.push_front(&key, t);
                        self.lost_write(now, key);
                    }
                    Err(_) => {
                        self.counters.store_errors += 1;
                        // It may have landed: what the record says is learnt by reading it (the wait ends in one).
                        lane.unsure = true;
                        let delay = self.store_backoff.delay(lane.store_attempts);
                        lane.store_attempts += 1;
                        self.lanes.push_front(&key, t);
                        self.wait(key, now + delay, None);
                    }
                }
            }
            LaneState::Recording { op: o, record, .. } if o == op => match result {
                Ok(Some(rev)) => {
                    lane.rev = Some(rev);
                    // Past the revision any claim write of ours that got no answer expected: it cannot land now.
                    lane.unsure = false;
                    lane.done = lane.done.max(record.done);
                    lane.handed = lane.handed.max(lane.done);
                    lane.store_attempts = 0;
                    self.lanes.drop_done(&key);
                    let keep = self.role.owns(&key.1) && !leaving;
                    if !keep {
                        self.drop_lane(&key);
                    } else if self.lanes.get(&key).is_some_and(|l| !l.queue().is_empty()) {
                        self.ready[key.0].push_back(key);
                    }
                }
                // Someone else wrote the record: they took the object over while we were presumed gone.
                Ok(None) => self.lost_write(now, key),
                Err(_) => {
                    self.counters.store_errors += 1;
                    let at = now + self.store_backoff.delay(lane.store_attempts);
                    lane.store_attempts += 1;
                    self.ops.insert(op, Op::Write(key.clone()));
                    self.lanes.set_state(&key, LaneState::Recording { op, record, retry_at: Some(at) });
                }
            },
            other => lane.state = other,
        }
    }

    /// A compare-and-set of ours found the record moved on: read it and go on from what it says (what the lane
    /// holds stays queued) if the object is still ours, or if a claim write of ours that got no answer may be what
    /// moved it (to give that claim back); else the lane is the new owner's business.
    fn lost_write(&mut self, now: Time, key: LaneKey) {
        self.counters.claims_lost += 1;
        let unsure = self.lanes.get(&key).is_some_and(|l| l.unsure);
        if unsure || (self.role.owns(&key.1) && !self.leaving()) {
            self.wait(key, now, None);
        } else {
            self.drop_lane(&key);
        }
    }

    fn handle_sent(&mut self, now: Time, op: u64, result: SendResult) {
        let Some(Op::Send(key)) = self.ops.remove(&op) else { return };
        let Some(lane) = self.lanes.get_mut(&key) else { return };
        let LaneState::Sending { op: o, t, body, first, attempt } = std::mem::replace(&mut lane.state, LaneState::Idle)
        else {
            return;
        };
        debug_assert_eq!(o, op);
        self.sending[key.0] -= 1;
        match result {
            SendResult::Delivered => {
                self.counters.delivered += 1;
                self.record(key, t.seq);
            }
            SendResult::Gone => {
                self.counters.disabled += 1;
                // The endpoint is gone for this process: the transition is not sent (counted above), only the
                // claim given back.
                self.disable(key.0);
                self.release(key, None);
            }
            SendResult::Retry { after, .. } => {
                if now.saturating_since(first) >= self.cfg.give_up {
                    self.counters.failed += 1;
                    self.record(key, t.seq);
                    return;
                }
                self.counters.retry += 1;
                if !self.role.owns(&key.1) || self.leaving() {
                    // Not ours any more: give the claim back for the new owner to retry.
                    self.lanes.push_front(&key, t);
                    self.release(key, None);
                    return;
                }
                let salt = hrw::key(key.1.as_str()) ^ t.seq ^ self.me().incarnation;
                let backoff = Backoff::new(self.cfg.retry_base, self.cfg.retry_max, salt).delay(attempt - 1);
                let wait = after.map_or(backoff, |a| backoff.max(a.min(self.cfg.retry_max)));
                let at = now + wait;
                self.lanes.set_state(&key, LaneState::Backoff { t, body, at, first, attempt });
            }
        }
    }

    /// Write `done = seq`, clearing the claim.
    fn record(&mut self, key: LaneKey, seq: u64) {
        let op = self.op(Op::Write(key.clone()));
        let Some(lane) = self.lanes.get_mut(&key) else { return };
        let record = DeliveryRecord { done: lane.done.max(seq), claim: None };
        lane.state = LaneState::Recording { op, record: record.clone(), retry_at: None };
        let expect = lane.rev;
        self.outputs.push_back(Output::WriteProgress {
            op,
            object: key.1.clone(),
            endpoint: self.cfg.endpoints[key.0].id,
            record,
            expect,
        });
    }

    /// Give the claim back (`done` unchanged), so the object's owner can go on.
    fn release(&mut self, key: LaneKey, _why: Option<&str>) {
        let done = self.lanes.get(&key).map_or(0, |l| l.done);
        self.record(key, done);
    }

    fn drop_lane(&mut self, key: &LaneKey) {
        self.lanes.remove(key);
    }

    fn disable(&mut self, i: usize) {
        if self.disabled[i] {
            return;
        }
        self.disabled[i] = true;
        let keys: Vec<LaneKey> = self.lanes.keys().filter(|(e, _)| *e == i).cloned().collect();
        for key in keys {
            self.counters.disabled += self.lanes.clear_queue(&key) as u64;
            self.tidy(&key);
        }
    }

    /// Leaving: deliveries waiting to be retried are given back at once (their claims released), so the
    /// objects' next owner retries them.
    fn release_backoffs(&mut self) {
        let keys: Vec<LaneKey> = self
            .lanes
            .iter()
            .filter(|(_, l)| matches!(l.state, LaneState::Backoff { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.requeue_backoff(&key);
            self.release(key, None);
        }
    }

    /// A lane waiting to send again stops: its transition goes back to the head of its queue.
    fn requeue_backoff(&mut self, key: &LaneKey) {
        let Some(LaneState::Backoff { t, .. }) = self.lanes.set_state(key, LaneState::Idle) else {
            unreachable!("a lane backing off")
        };
        self.lanes.push_front(key, t);
    }

    /// After a membership change (or a leave): lanes of objects no longer owned are dropped, and claims held
    /// on them given back once what is in flight is finished.
    fn ownership_changed(&mut self, now: Time) {
        let lost: Vec<LaneKey> = self.lanes.keys().filter(|(_, id)| !self.role.owns(id)).cloned().collect();
        for key in lost {
            let lane = self.lanes.get_mut(&key).expect("listed");
            match &lane.state {
                // A claim write that got no answer may have landed: read the record (at once) to give it back.
                LaneState::Unread | LaneState::Idle | LaneState::Waiting { .. } if lane.unsure => {
                    self.wait(key, now, None);
                }
                LaneState::Reading { .. } if lane.unsure => {}
                LaneState::Unread | LaneState::Idle | LaneState::Waiting { .. } | LaneState::Reading { .. } => {
                    self.drop_lane(&key);
                }
                LaneState::Backoff { .. } => {
                    self.requeue_backoff(&key);
                    self.release(key, None);
                }
                // Claiming, sending, recording: finished (or given back) when their answer comes.
                _ => {}
            }
        }
    }
}

/// Whether the member that wrote `claim` (at store revision `rev`) is surely gone, so its send was in flight at
/// a fault and may be repeated. Membership keys and progress records share one revision sequence (one KV bucket),
/// so a view that has seen a membership change after `rev` and does not hold the claimer knows its key went away
/// after it claimed: it crashed, left, or paused past its ttl. A view not past `rev` yet may simply not have seen
/// the claimer join: wait for it (every member's refresh moves the view on within a third of the ttl).
fn claim_is_gone(claim: &Claim, rev: u64, me: &MemberRef, view: &LiveSet) -> bool {
    if claim.by == *me {
        return true;
    }
    let live = view.incarnation(&claim.by.id) == Some(claim.by.incarnation);
    !live && view.rev() > rev
}
