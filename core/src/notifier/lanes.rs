//! The notifier's delivery lanes: one per object and endpoint, with the transitions waiting there, its state in
//! the claim-send-record cycle, and where its record in the store stands. `Lanes` holds them with the count of
//! transitions queued over all of them and the table of their deadlines, and is the one place either changes:
//! every change of a lane's queue goes through it, so the count cannot drift.

use crate::deadlines::Deadlines;
use crate::model::{MemberId, ObjectId, State};
use crate::notifier::DeliveryRecord;
use crate::time::Time;
use std::collections::{BTreeMap, VecDeque};

/// A transition as a lane holds it: what a notification of it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Transition {
    /// `transition`, or `flapping_start` / `flapping_end` (`crate::alert`).
    pub kind: &'static str,
    pub seq: u64,
    pub object: ObjectId,
    pub from: State,
    pub to: State,
    pub output: String,
    pub at: Time,
    pub epoch: u64,
    pub writer: MemberId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LaneState {
    /// Its record has not been read since it was gained.
    Unread,
    Idle,
    /// Read the record again at `until` (another live member's claim; a lost compare-and-set; a store error).
    Waiting {
        until: Time,
    },
    Reading {
        token: u64,
    },
    Claiming {
        op: u64,
        t: Transition,
    },
    Sending {
        op: u64,
        t: Transition,
        body: String,
        first: Time,
        attempt: u32,
    },
    Backoff {
        t: Transition,
        body: String,
        at: Time,
        first: Time,
        attempt: u32,
    },
    /// Writing `done` (or a release of the claim when `done` does not move); `retry_at` after a failed write.
    Recording {
        op: u64,
        record: DeliveryRecord,
        retry_at: Option<Time>,
    },
}

impl LaneState {
    /// The transition in flight here (claimed, being sent, or waiting to be sent again).
    pub fn in_flight(&self) -> Option<&Transition> {
        match self {
            LaneState::Claiming { t, .. } | LaneState::Sending { t, .. } | LaneState::Backoff { t, .. } => Some(t),
            _ => None,
        }
    }
}

/// One object at one endpoint. Most lanes are at rest — idle, nothing queued, nothing to settle — and then hold
/// only where the object's record stands (`done`, `rev`, `handed`): the rest, `LaneWork`, is kept apart while there
/// is any and read through `Deref` (a lane at rest reads as `LaneWork::AT_REST`). A lane at rest with no record
/// that says nothing a lane just made would not (`is_fresh`) is not held at all: see `Notifier::lanes`.
#[derive(Clone, Debug)]
pub(super) struct Lane {
    pub done: u64,
    pub rev: Option<u64>,
    /// The newest position queued or in flight here: a replay never queues what is already here.
    pub handed: u64,
    work: Option<Box<LaneWork>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LaneWork {
    /// The transitions waiting here, in log order; changed only through `Lanes`, which counts them.
    queue: VecDeque<Transition>,
    pub state: LaneState,
    /// Sent again after a fault: counted once it is sent.
    pub resend: bool,
    pub store_attempts: u32,
    /// A claim write here got no answer (it may have landed, or land later): until the record is read at another
    /// revision than the write expected, or a write of ours that expected the same one is answered, this lane may
    /// hold a claim in the store, which must be given back before the lane can go.
    pub unsure: bool,
}

static AT_REST: LaneWork =
    LaneWork { queue: VecDeque::new(), state: LaneState::Idle, resend: false, store_attempts: 0, unsure: false };

impl std::ops::Deref for Lane {
    type Target = LaneWork;
    fn deref(&self) -> &LaneWork {
        self.work.as_deref().unwrap_or(&AT_REST)
    }
}

impl std::ops::DerefMut for Lane {
    fn deref_mut(&mut self) -> &mut LaneWork {
        self.work.get_or_insert_with(|| Box::new(AT_REST.clone()))
    }
}

impl LaneWork {
    /// The transitions waiting here, oldest first.
    pub fn queue(&self) -> &VecDeque<Transition> {
        &self.queue
    }
}

impl Lane {
    /// A lane nothing is known of yet but where its endpoint's notifications begin.
    pub fn fresh(start: u64) -> Lane {
        Lane { done: start, rev: None, handed: start, work: None }
    }

    /// A lane not held, as the answer to a resume's progress query finds it: to be read.
    pub fn unread(start: u64) -> Lane {
        let mut lane = Lane::fresh(start);
        lane.state = LaneState::Unread;
        lane
    }

    /// Whether it says nothing `fresh(start)` would not: no record read, nothing queued or going on.
    pub fn is_fresh(&self, start: u64) -> bool {
        self.work.is_none() && self.rev.is_none() && self.done == start && self.handed == start
    }

    /// Whether nothing but where its record stands is held (no queue, no state but idle).
    pub fn at_rest(&self) -> bool {
        self.work.is_none()
    }

    /// Lets go of the work part once it is back at rest.
    pub fn settle(&mut self) {
        if self.work.as_deref() == Some(&AT_REST) {
            self.work = None;
        }
    }

    /// Holding a claim or about to: it must be finished or released before the lane can go.
    pub fn busy(&self) -> bool {
        self.unsure
            || matches!(
                self.state,
                LaneState::Claiming { .. }
                    | LaneState::Sending { .. }
                    | LaneState::Backoff { .. }
                    | LaneState::Recording { .. }
            )
    }

    /// When its state asks for the lane to be taken up again.
    pub fn deadline(&self) -> Option<Time> {
        match &self.state {
            LaneState::Waiting { until } => Some(*until),
            LaneState::Backoff { at, .. } => Some(*at),
            LaneState::Recording { retry_at, .. } => *retry_at,
            _ => None,
        }
    }
}

/// An endpoint's index and an object.
pub(super) type LaneKey = (usize, ObjectId);

/// The lanes that say something, the count of the transitions queued over all of them, and their deadlines.
#[derive(Default)]
pub(super) struct Lanes {
    map: BTreeMap<LaneKey, Lane>,
    queued: usize,
    /// Lanes due again (a wait, a backoff, a retry of a record), by when.
    pub deadlines: Deadlines<LaneKey>,
}

impl Lanes {
    // ---- reading ----

    pub fn get(&self, key: &LaneKey) -> Option<&Lane> {
        self.map.get(key)
    }

    /// A lane to change; its queue is changed through `Lanes` only.
    pub fn get_mut(&mut self, key: &LaneKey) -> Option<&mut Lane> {
        self.map.get_mut(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&LaneKey, &Lane)> {
        self.map.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &LaneKey> {
        self.map.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &Lane> {
        self.map.values()
    }

    /// Transitions queued over every lane.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// The count kept against the queues themselves (the notifier's self-check).
    pub fn check_count(&self) -> Result<(), String> {
        let queued: usize = self.map.values().map(|l| l.queue.len()).sum();
        if queued != self.queued {
            return Err(format!("{queued} transitions queued, counted {}", self.queued));
        }
        Ok(())
    }

    // ---- lanes ----

    /// Holds `lane` at `key` unless one is held there already.
    pub fn insert_if_absent(&mut self, key: LaneKey, lane: Lane) {
        self.map.entry(key).or_insert(lane);
    }

    /// Lets the lane go: its queue and its deadline with it. Returns it.
    pub fn remove(&mut self, key: &LaneKey) -> Option<Lane> {
        let lane = self.map.remove(key)?;
        self.queued -= lane.queue.len();
        if let Some(d) = lane.deadline() {
            self.deadlines.remove(d, key);
        }
        Some(lane)
    }

    // ---- queues ----

    /// Queues `t` at the lane of `key` (made fresh at `start` if none is held), which has now handed out up to
    /// it. Returns whether the lane just became ready to claim (idle, this its only transition).
    pub fn push_back(&mut self, key: &LaneKey, start: u64, t: Transition) -> bool {
        let lane = self.map.entry(key.clone()).or_insert_with(|| Lane::fresh(start));
        lane.handed = t.seq;
        lane.queue.push_back(t);
        self.queued += 1;
        lane.state == LaneState::Idle && lane.queue.len() == 1
    }

    /// Puts a transition that was in flight back at the head of the lane's queue (if the lane is held).
    pub fn push_front(&mut self, key: &LaneKey, t: Transition) {
        if let Some(lane) = self.map.get_mut(key) {
            lane.queue.push_front(t);
            self.queued += 1;
        }
    }

    /// Takes the oldest transition of the lane's queue.
    pub fn pop_front(&mut self, key: &LaneKey) -> Option<Transition> {
        let t = self.map.get_mut(key)?.queue.pop_front()?;
        self.queued -= 1;
        Some(t)
    }

    /// Drops what the lane's queue holds at or below its `done`.
    pub fn drop_done(&mut self, key: &LaneKey) {
        if let Some(lane) = self.map.get_mut(key) {
            self.queued -= drop_done(lane);
        }
    }

    /// Changes every lane with `change`, drops what each queue then holds at or below the lane's `done`, and keeps
    /// the lanes `keep` says to (for the starts, which may move `done`).
    pub fn update_all(
        &mut self,
        mut change: impl FnMut(&LaneKey, &mut Lane),
        mut keep: impl FnMut(&LaneKey, &mut Lane) -> bool,
    ) {
        let queued = &mut self.queued;
        self.map.retain(|key, lane| {
            change(key, lane);
            *queued -= drop_done(lane);
            let kept = keep(key, lane);
            if !kept {
                *queued -= lane.queue.len();
            }
            kept
        });
    }

    /// Empties the lane's queue; returns how many it held.
    pub fn clear_queue(&mut self, key: &LaneKey) -> usize {
        let Some(lane) = self.map.get_mut(key) else { return 0 };
        let n = lane.queue.len();
        if n > 0 {
            lane.queue.clear();
            self.queued -= n;
        }
        n
    }

    /// Empties every queue; `f` then decides over each lane as `retain` does.
    pub fn clear_queues(&mut self, mut keep: impl FnMut(&LaneKey, &mut Lane) -> bool) {
        self.map.retain(|key, lane| {
            if !lane.queue.is_empty() {
                lane.queue.clear();
            }
            keep(key, lane)
        });
        self.queued = 0;
    }

    // ---- deadlines ----

    /// Moves the lane to `state`, its deadline armed as the new state says; returns the state it left.
    pub fn set_state(&mut self, key: &LaneKey, state: LaneState) -> Option<LaneState> {
        let lane = self.map.get_mut(key)?;
        if let Some(d) = lane.deadline() {
            self.deadlines.remove(d, key);
        }
        let old = std::mem::replace(&mut lane.state, state);
        if let Some(d) = lane.deadline() {
            self.deadlines.insert(d, key.clone());
        }
        Some(old)
    }
}

/// Drops what `lane`'s queue holds at or below its `done`; returns how many.
fn drop_done(lane: &mut Lane) -> usize {
    if lane.queue.is_empty() {
        return 0;
    }
    let (done, before) = (lane.done, lane.queue.len());
    lane.queue.retain(|t| t.seq > done);
    before - lane.queue.len()
}
