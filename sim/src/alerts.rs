//! Invariant 14, the alert rules (`jaque_core::alert`, `docs/design.md`), held by the oracle over every result
//! event the fence accepts, in its own arithmetic: a hard problem only after `max_attempts` problem results in a
//! row of the definition in force, counted in the log across ownership changes (each soft attempt is an event, so
//! whoever owns the object next goes on from it); a hard recovery only after `recovery_attempts` ok results in a
//! row; a soft attempt only as the next of its row; flapping starting only at Icinga's 30 % weighted share of
//! changes over the last 20 intervals and ending only below 25 %. The reader must take exactly the result events
//! these rules allow and pass over the others (a write from a state the log had left: a result written before an
//! earlier one landed, a write presumed lost that landed late), and leave the object as the rules say.
//!
//! Soft states never notify (invariant 9's checker knows which events are notifications).

use jaque_core::log::ObjectView;
use jaque_core::{Effect, Event, EventBody, MemberRef, ObjectId, State};
use std::collections::BTreeMap;

/// What the alert rules saw over a run (reports, and scenarios that want them exercised).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlertStats {
    pub soft: u64,
    pub hard_after_attempts: u64,
    pub back: u64,
    pub flap_starts: u64,
    pub flap_ends: u64,
    /// Result events the reader passed over as the rules say.
    pub passed_over: u64,
    /// Faults done between two attempts to the engine that wrote the first (`Params::attempt_faults`).
    pub attempt_faults: u64,
    /// Attempts (soft, or the hard transition) at 2 or more whose attempt before was written by another engine
    /// or incarnation: counts that went on across a change of owner.
    pub continued: u64,
}

/// The oracle's own record of each object's raw state changes (their times), for the flapping share.
#[derive(Default)]
pub struct AlertCheck {
    changes: BTreeMap<ObjectId, Vec<u64>>,
    /// The writer of each object's last result event taken.
    writers: BTreeMap<ObjectId, MemberRef>,
    pub stats: AlertStats,
}

const DEFAULT_MAX_ATTEMPTS: u32 = 3;
const DEFAULT_RECOVERY_ATTEMPTS: u32 = 1;
const FLAP_RESULTS: u64 = 20;
const FLAP_HIGH_PCT: u64 = 30;
const FLAP_LOW_PCT: u64 = 25;

fn problem(s: State) -> bool {
    matches!(s, State::Warning | State::Critical | State::Unknown)
}

/// The weighted share, in percent, from the change times before `at`.
fn share(changes: &[u64], at: u64, interval_ms: u64) -> u64 {
    let window = interval_ms.max(1) * FLAP_RESULTS;
    let sum: u64 = changes
        .iter()
        .filter(|t| **t <= at && at - **t < window)
        .map(|t| 800 + 400 * (window - (at - t)) / window)
        .sum();
    sum / (FLAP_RESULTS * 10)
}

impl AlertCheck {
    /// An accepted event at `seq` on an object whose view was `before` (`None`: no such object) and is `after`
    /// once read, with the reader's `effect`, under the active format `active`. `Err` names what broke.
    pub fn check(
        &mut self,
        seq: u64,
        ev: &Event,
        before: Option<&ObjectView>,
        after: Option<&ObjectView>,
        effect: &Effect,
        active: u32,
    ) -> Result<(), String> {
        if !ev.body.is_result() {
            if matches!(ev.body, EventBody::Delete) {
                self.changes.remove(&ev.object);
                self.writers.remove(&ev.object);
            }
            return Ok(());
        }
        let took = matches!(effect, Effect::Transitioned | Effect::Folded);
        let Some(b) = before else {
            return if took {
                Err(format!("result at {seq} on {}, which does not exist, taken", ev.object))
            } else {
                Ok(())
            };
        };
        let modern = active >= 3;
        let (max, rec) = if modern {
            (
                b.def.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
                b.def.recovery_attempts.unwrap_or(DEFAULT_RECOVERY_ATTEMPTS),
            )
        } else {
            (1, 1)
        };
        let flap_on = modern && b.def.flapping != Some(false);
        let needed = |to: State| match (problem(b.state), problem(to)) {
            // A new object's first result is hard at once.
            _ if b.state == State::Pending => 1,
            (false, true) => max,
            (true, false) => rec,
            _ => 1,
        };
        let raw = b.soft().map_or(b.state, |s| s.state);
        let row = |to: State| match b.soft() {
            Some(s) if problem(s.state) == problem(to) => s.attempt + 1,
            _ => 1,
        };
        let changes = self.changes.get(&ev.object).cloned().unwrap_or_default();
        let iv = b.def.interval_ms;
        let with = |to: State| {
            let mut c: Vec<u64> =
                changes.iter().copied().filter(|t| ev.at.0.saturating_sub(*t) < iv * FLAP_RESULTS).collect();
            if to != raw && raw != State::Pending {
                c.push(ev.at.0);
            }
            c
        };
        let flap_ok = |on: bool, c: &[u64]| {
            let s = share(c, ev.at.0, iv);
            on != b.flapping() && if on { flap_on && s >= FLAP_HIGH_PCT } else { !flap_on || s < FLAP_LOW_PCT }
        };
        let (allowed, raw_after) = match &ev.body {
            EventBody::Transition { to, attempt: 0, flapping: None, flaps: false, .. } => (*to != b.state, *to),
            EventBody::Transition { to, attempt, flapping, flaps, .. } => (
                *to != b.state
                    && *attempt == row(*to)
                    && *attempt >= needed(*to)
                    && *flaps == flapping.unwrap_or(b.flapping())
                    && flapping.is_none_or(|on| flap_ok(on, &with(*to))),
                *to,
            ),
            EventBody::Soft { state, attempt: 0, flapping, .. } => (
                *state == b.state && b.soft().is_some() && flapping.is_none_or(|on| flap_ok(on, &with(*state))),
                *state,
            ),
            EventBody::Soft { state, attempt, of, flapping, .. } => (
                *state != b.state
                    && *of == needed(*state)
                    && *attempt == row(*state)
                    && attempt < of
                    && flapping.is_none_or(|on| flap_ok(on, &with(*state))),
                *state,
            ),
            EventBody::Flapping { on } => (flap_ok(*on, &changes), raw),
            _ => unreachable!("results only"),
        };
        if allowed != took {
            return Err(format!(
                "result at {seq} on {} ({:?}) {} by the reader; the rules (hard {:?}, soft {:?}, flapping {}, \
                 max_attempts {max}, recovery_attempts {rec}) say it {}",
                ev.object,
                ev.body,
                if took { "taken" } else { "passed over" },
                b.state,
                b.soft().map(|s| (s.state, s.attempt, s.of)),
                b.flapping(),
                if allowed { "follows" } else { "does not follow" }
            ));
        }
        if !took {
            self.stats.passed_over += 1;
            return Ok(());
        }
        let a = after.ok_or_else(|| format!("result at {seq} taken and {} gone", ev.object))?;
        let attempt = match &ev.body {
            EventBody::Soft { attempt, .. } | EventBody::Transition { attempt, .. } => *attempt,
            _ => 0,
        };
        let before_writer = self.writers.insert(ev.object.clone(), ev.writer.clone());
        if attempt >= 2 && before_writer.as_ref() != Some(&ev.writer) {
            self.stats.continued += 1;
        }
        if modern && !matches!(ev.body, EventBody::Flapping { .. }) {
            self.changes.insert(ev.object.clone(), with(raw_after));
        }
        let flapping_after = match &ev.body {
            EventBody::Flapping { on }
            | EventBody::Transition { flapping: Some(on), .. }
            | EventBody::Soft { flapping: Some(on), .. } => {
                if *on {
                    self.stats.flap_starts += 1;
                } else {
                    self.stats.flap_ends += 1;
                }
                *on
            }
            _ => b.flapping(),
        };
        let soft_after = match &ev.body {
            EventBody::Soft { state, attempt, of, .. } if *attempt > 0 => {
                self.stats.soft += 1;
                Some((*state, *attempt, *of))
            }
            EventBody::Soft { .. } => {
                self.stats.back += 1;
                None
            }
            EventBody::Transition { attempt, .. } => {
                self.stats.hard_after_attempts += u64::from(*attempt > 1);
                None
            }
            _ => b.soft().map(|s| (s.state, s.attempt, s.of)),
        };
        let hard_after = match &ev.body {
            EventBody::Transition { to, .. } => *to,
            _ => b.state,
        };
        let got = (a.state, a.soft().map(|s| (s.state, s.attempt, s.of)), a.flapping());
        if got != (hard_after, soft_after, flapping_after) {
            return Err(format!(
                "result at {seq} on {} left it (hard, soft, flapping) {got:?}; the rules say {:?}",
                ev.object,
                (hard_after, soft_after, flapping_after)
            ));
        }
        Ok(())
    }
}
