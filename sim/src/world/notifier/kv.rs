//! The notifiers' records in the membership KV, and their requests to it: the start records
//! (`notifier/start/<endpoint>`, created if absent), the progress records (`notifier/progress/<endpoint>/<object>`,
//! written by compare-and-set at a revision), and the reads of both and of the log. The keys live in the
//! simulated store (`store.rs`), so they take revisions from its one sequence, as the core's design assumes.
//!
//! A request is lost if its notifier's writes are cut (its client times out); otherwise it lands after a hop and
//! is answered if the answer gets back before the client's timeout, else the timeout answers. A request that
//! timed out may still land, but for progress writes while `NotifyParams::ambiguous_writes` is off.

use super::{NEv, NotifierRole};
use crate::world::{Ev, Sim};
use jaque_core::notifier::{DeliveryRecord, EndpointId, Input, Stored};
use jaque_core::{IoError, ObjectId, Time};
use std::time::Duration;

/// A store request of a notifier.
#[derive(Clone, Debug)]
pub(in crate::world) enum StoreOp {
    Starts {
        endpoints: Vec<EndpointId>,
        propose: u64,
    },
    /// A resume's question (`ReadProgress`) or, `recheck`, a lane's (`Recheck`): read alike, answered as asked.
    Progress {
        token: u64,
        objects: Vec<ObjectId>,
        recheck: bool,
    },
    Replay {
        token: u64,
        from: u64,
        to: u64,
    },
    Write {
        op: u64,
        object: ObjectId,
        endpoint: EndpointId,
        record: DeliveryRecord,
        expect: Option<u64>,
    },
}

impl StoreOp {
    /// The answer when the request timed out.
    pub(in crate::world) fn failed(&self) -> Input {
        let e = IoError::Timeout;
        match self {
            StoreOp::Starts { .. } => Input::Starts { result: Err(e) },
            StoreOp::Progress { token, recheck, .. } => records(*token, *recheck, Err(e)),
            StoreOp::Replay { token, .. } => Input::Replayed { token: *token, result: Err(e) },
            StoreOp::Write { op, .. } => Input::Written { op: *op, result: Err(e) },
        }
    }
}

/// The answer to a read of records: `Rechecked` for a lane's recheck, `Progress` for a resume's question.
fn records(token: u64, recheck: bool, result: Result<Vec<(ObjectId, EndpointId, Stored)>, IoError>) -> Input {
    if recheck {
        Input::Rechecked { token, result }
    } else {
        Input::Progress { token, result }
    }
}

pub(in crate::world) const PROGRESS: &str = "notifier/progress/";

pub(in crate::world) fn progress_key(ep: EndpointId, object: &ObjectId) -> String {
    format!("{PROGRESS}{ep}/{object}")
}

pub(in crate::world) fn start_key(ep: EndpointId) -> String {
    format!("notifier/start/{ep}")
}

/// The endpoint and object of a progress key.
pub(in crate::world) fn parse_progress_key(key: &str) -> Option<(EndpointId, ObjectId)> {
    let (ep, object) = key.strip_prefix(PROGRESS)?.split_once('/')?;
    Some((EndpointId(u64::from_str_radix(ep, 16).ok()?), ObjectId::new(object).ok()?))
}

pub(in crate::world) fn decode(value: &str) -> DeliveryRecord {
    serde_json::from_str(value).expect("the simulator writes records that decode")
}

impl Sim {
    /// A store request: lost if the notifier's writes are cut (a timeout), else it lands after a hop and is
    /// answered if the answer makes it back before the timeout.
    pub(in crate::world) fn nstore(&mut self, s: usize, op: StoreOp) {
        let timeout = self.params.notify.store_timeout_ms;
        let inc = self.notify.slots[s].inc;
        if !self.notify.slots[s].can_send() {
            let input = Box::new(op.failed());
            self.after(timeout, Ev::Notify(NEv::Answer { slot: s, inc, input }));
            return;
        }
        let d = self.hop::<NotifierRole>(s);
        let by = self.now + Duration::from_millis(timeout);
        let answer_by = if d < timeout {
            Some(by)
        } else {
            let input = Box::new(op.failed());
            self.push(by, Ev::Notify(NEv::Answer { slot: s, inc, input }));
            if self.unambiguous(&op) {
                return;
            }
            None
        };
        self.after(d, Ev::Notify(NEv::StoreLand { slot: s, inc, op: Box::new(op), answer_by }));
    }

    /// Whether a progress write that will not be answered in time is lost rather than landing
    /// (`NotifyParams::ambiguous_writes` off).
    fn unambiguous(&self, op: &StoreOp) -> bool {
        matches!(op, StoreOp::Write { .. }) && !self.params.notify.ambiguous_writes
    }

    pub(in crate::world) fn store_land(&mut self, s: usize, inc: u64, op: StoreOp, answer_by: Option<Time>) {
        let failed = op.failed();
        let alive = self.notify.slots[s].is_current(inc);
        // When its answer gets back (`None`: it does not, in time).
        let back = match answer_by {
            Some(by) if alive && self.notify.slots[s].can_recv() => {
                Some(self.now + Duration::from_millis(self.hop::<NotifierRole>(s))).filter(|t| *t <= by)
            }
            _ => None,
        };
        // (A write whose client timed out before it could land never gets here in that mode: `nstore` drops it.
        // Without an answer due, this is a scenario's lost answer: it lands.)
        if alive && answer_by.is_some() && back.is_none() && self.unambiguous(&op) {
            if let Some(by) = answer_by {
                self.push(by, Ev::Notify(NEv::Answer { slot: s, inc, input: Box::new(failed) }));
            }
            return;
        }
        let input = self.apply_store(op);
        let Some(by) = answer_by else { return };
        if !alive {
            return;
        }
        let (answer, at) = match back {
            Some(t) => (input, t),
            None => (failed, by),
        };
        self.push(at, Ev::Notify(NEv::Answer { slot: s, inc, input: Box::new(answer) }));
    }

    /// What the store does with a request: reads, create-if-absent, compare-and-set, a log read.
    fn apply_store(&mut self, op: StoreOp) -> Input {
        match op {
            StoreOp::Starts { endpoints, propose } => {
                self.check_start_proposal(&endpoints, propose);
                let result = endpoints
                    .iter()
                    .map(|ep| {
                        let v = self.store.create(&start_key(*ep), propose.to_string());
                        (*ep, v.parse().expect("a start record is a position"))
                    })
                    .collect();
                Input::Starts { result: Ok(result) }
            }
            StoreOp::Progress { token, objects, recheck } => {
                let mut out = Vec::new();
                for id in &objects {
                    for e in &self.notify.endpoints {
                        if let Some((v, rev)) = self.store.get(&progress_key(e.endpoint.id, id)) {
                            out.push((id.clone(), e.endpoint.id, Stored { record: decode(v), rev }));
                        }
                    }
                }
                records(token, recheck, Ok(out))
            }
            StoreOp::Replay { token, from, to } => {
                let upto = to.min(self.log.len());
                Input::Replayed { token, result: Ok((upto, self.log.read_range(from, upto))) }
            }
            StoreOp::Write { op, object, endpoint, record, expect } => {
                let value = serde_json::to_string(&record).expect("a record serializes");
                let rev = self.store.update(&progress_key(endpoint, &object), value, expect);
                if let Some(rev) = rev {
                    self.h(rev << 20);
                    self.stats.notify.progress_writes += 1;
                    self.note_progress_written(endpoint, &object, &record);
                }
                self.tr(|| format!("store: {object} at {endpoint}: {record:?} expecting {expect:?}: {rev:?}"));
                Input::Written { op, result: Ok(rev) }
            }
        }
    }
}
