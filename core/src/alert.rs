//! Alert semantics: soft and hard states, retries, recovery thresholds and flapping (cluster format 3).
//!
//! An object's `state` in the log is its **hard** state: what notifies, counts in history and uptime, and what a
//! `transition` event changes. A check result that differs from it does not change it at once: it starts a
//! **soft** state ("critical 1/3"), logged as a `soft` event, and the object is checked again every
//! `retry_interval`. Only `max_attempts` problem results in a row make a problem hard (a `transition`), and
//! only `recovery_attempts` ok results in a row end a hard problem. A result that agrees with the hard state
//! again ends the soft state without a transition (a `soft` event naming the hard state, attempt 0). A change
//! from one problem to another while the hard state is a problem is hard at once (as in Icinga 2 and Nagios), and
//! so is a new object's first result, whatever it is: there is no earlier state to keep from a blip, and whoever
//! adds a check wants to see at once whether it works (Icinga 2 and Nagios start a new object as ok, so one that
//! is down goes through its soft attempts first; jaque shows it down at once).
//!
//! The attempt count is the log's: every soft attempt is an event, so an engine that takes an object over goes
//! on from the attempt its previous owner reached. The engine writes one result event of an object at a time
//! (a result that arrives while the last one is on its way is not logged), and the fold applies a result event
//! only where it follows from the state before it (`fold`): an event written from a state the log has left
//! (a write presumed lost that landed late, a partitioned writer the fence let through) changes nothing.
//!
//! **Flapping** is Icinga 2's rule over the log's changes: the share of the last `FLAP_RESULTS` intervals in
//! which the raw state (the latest result's, soft or hard) changed, weighted from 0.8 for the oldest to 1.2
//! for the newest, starts flapping at `FLAP_HIGH_PCT` % and ends it below `FLAP_LOW_PCT` %. The owner decides
//! from the log's state and says so in the event (`flapping` on a result event, or a `flapping` event of its
//! own when no result changes anything), and the fold applies it only where the rule holds at that position.
//! While an object flaps the notifier sends its flapping start and end, not its transitions.
//!
//! Before the cluster's active format is 3 every change is hard at once and nothing flaps, exactly as builds
//! before it behave (`Rules::of`).

use crate::model::{EventBody, ObjectDef, State};
use crate::time::{millis, Time};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Problem results in a row that make a problem hard, unless the definition says: Icinga 2's
/// `max_check_attempts` and Gatus' `failure-threshold` default to 3.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Ok results in a row that end a hard problem, unless the definition says: 1, as Icinga 2 and Nagios (a
/// recovery is good news, and delaying it delays the resolve; flapping detection covers a target that comes
/// and goes). Gatus' `success-threshold` is 2, for teams who want it.
pub const DEFAULT_RECOVERY_ATTEMPTS: u32 = 1;
/// The highest `max_attempts` and `recovery_attempts` a definition may ask for.
pub const MAX_ATTEMPTS: u32 = 100;
/// How many intervals the flapping share is taken over (Icinga 2 and Nagios: the last 20 or 21 results).
pub const FLAP_RESULTS: u64 = 20;
/// Flapping starts at this weighted share of state changes, in percent (Icinga 2's `flapping_threshold_high`).
pub const FLAP_HIGH_PCT: u32 = 30;
/// Flapping ends below this share, in percent (Icinga 2's `flapping_threshold_low`).
pub const FLAP_LOW_PCT: u32 = 25;
/// The most change times an object keeps for the share: more than `FLAP_RESULTS` because retries come faster
/// than the interval.
pub const CHANGES_KEPT: usize = 64;

/// The rules one object's results are judged by, from its definition and the cluster's active format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub max_attempts: u32,
    pub recovery_attempts: u32,
    pub retry_interval: Duration,
    pub flapping: bool,
    pub interval: Duration,
}

impl Rules {
    /// The rules in force for `def` under the active cluster format `active`: the definition's, with the
    /// defaults where it says nothing; before format 3, every change hard at once and no flapping.
    pub fn of(def: &ObjectDef, active: u32) -> Rules {
        let interval = def.interval();
        if active < 3 {
            return Rules {
                max_attempts: 1,
                recovery_attempts: 1,
                retry_interval: interval,
                flapping: false,
                interval,
            };
        }
        Rules {
            max_attempts: def.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            recovery_attempts: def.recovery_attempts.unwrap_or(DEFAULT_RECOVERY_ATTEMPTS),
            retry_interval: def.retry_interval(),
            flapping: def.flapping.unwrap_or(true),
            interval,
        }
    }

    /// Results in a row on `result`'s side needed to make it the hard state over `hard`.
    pub fn needed(&self, hard: State, result: State) -> u32 {
        if hard == State::Pending {
            // A new object's first result is its state at once: there is no earlier state to keep from a blip,
            // and whoever adds a check wants to see at once whether it works.
            return 1;
        }
        match (hard.is_problem(), result.is_problem()) {
            // A hard problem changing kind: hard at once.
            (true, true) => 1,
            (false, false) => 1,
            (true, false) => self.recovery_attempts.max(1),
            (false, true) => self.max_attempts.max(1),
        }
    }
}

/// A soft state: the latest results differ from the hard state and have not made it hard yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftState {
    /// The latest result's state.
    pub state: State,
    /// How many results in a row on this side, this one included.
    pub attempt: u32,
    /// How many it takes to become hard.
    pub of: u32,
    /// The time of the last attempt (its event's), from which the next retry is due.
    pub at: Time,
    /// The log position of the last attempt.
    pub seq: u64,
    pub output: String,
}

/// What the fold keeps of an object for these rules besides its hard state (`ObjectView::alert`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft: Option<SoftState>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flapping: bool,
    /// When the raw state changed within the flapping window, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Time>,
    /// The problem episode the object is in: the log position of the hard transition that opened it (from no
    /// problem to a problem), kept through changes of problem (critical to warning) until the hard recovery
    /// (cluster format 4: kept once every reader keeps it; a problem open when the cluster moved to 4 has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<u64>,
    /// Who the episode's problems reached so far, as their transitions said (`policy::Notify`; nobody when each
    /// was suppressed): who its recovery is sent to (cluster format 4, as `episode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<crate::policy::Notify>,
}

/// An object's state as the rules see it.
#[derive(Clone, Copy, Debug)]
pub struct Now<'a> {
    pub hard: State,
    pub soft: Option<&'a SoftState>,
    pub flapping: bool,
    pub changes: &'a [Time],
}

impl Now<'_> {
    /// The latest result's state, soft or hard.
    pub fn raw(&self) -> State {
        self.soft.map_or(self.hard, |s| s.state)
    }

    /// The attempt `result` would be at: one past the soft state's when it is on the same side of the hard
    /// state, else 1.
    pub fn attempt_of(&self, result: State) -> u32 {
        match self.soft {
            Some(s) if s.state.is_problem() == result.is_problem() => s.attempt.saturating_add(1),
            _ => 1,
        }
    }
}

/// The weighted share, in percent, of the flapping window before `at` in which the raw state changed: each
/// change weighs from 0.8 (oldest) to 1.2 (newest), and a full share is one change per interval.
pub fn flap_share(changes: &[Time], at: Time, interval: Duration) -> u32 {
    let window = millis(interval).max(1) * FLAP_RESULTS;
    let weighed: u64 = changes
        .iter()
        .filter(|t| **t <= at && at.0 - t.0 < window)
        .map(|t| 800 + 400 * (window - (at.0 - t.0)) / window)
        .sum();
    // Per mille per change, over FLAP_RESULTS changes, to percent.
    (weighed / (FLAP_RESULTS * 10)) as u32
}

/// Whether the flapping rule lets `flapping` become `on` at `at`, given the change times then.
pub fn flap_allows(rules: &Rules, flapping: bool, on: bool, changes: &[Time], at: Time) -> bool {
    if on == flapping {
        return false;
    }
    let share = flap_share(changes, at, rules.interval);
    if on {
        rules.flapping && share >= FLAP_HIGH_PCT
    } else {
        !rules.flapping || share < FLAP_LOW_PCT
    }
}

/// The change times with `at` added when the raw state changes from `before` to `after`, and those that
/// fell out of the window dropped.
pub fn changes_after(changes: &[Time], before: State, after: State, at: Time, interval: Duration) -> Vec<Time> {
    let window = millis(interval).max(1) * FLAP_RESULTS;
    let mut out: Vec<Time> = changes.iter().copied().filter(|t| at.0.saturating_sub(t.0) < window).collect();
    if before != after && before != State::Pending {
        out.push(at);
    }
    if out.len() > CHANGES_KEPT {
        out.drain(..out.len() - CHANGES_KEPT);
    }
    out
}

/// The event, if any, that a check result `result` at `now` makes the owner write, under format 3 rules.
/// `None`: the result changes nothing the log keeps.
pub fn decide(now: Now<'_>, rules: &Rules, result: State, at: Time, output: String) -> Option<EventBody> {
    let body = if result == now.hard {
        // Back to the hard state: the soft state is over.
        now.soft.map(|_| EventBody::Soft { state: result, attempt: 0, of: 0, output: output.clone(), flapping: None })
    } else {
        let attempt = now.attempt_of(result);
        let of = rules.needed(now.hard, result);
        Some(if attempt >= of {
            EventBody::Transition {
                from: now.hard,
                to: result,
                output: output.clone(),
                attempt,
                flapping: None,
                flaps: false,
                notify: None,
            }
        } else {
            EventBody::Soft { state: result, attempt, of, output: output.clone(), flapping: None }
        })
    };
    // A result that changes nothing (the hard state, no soft state) cannot start flapping, as the share only grows
    // at a change: the common case, on every check of a steady object, decided without counting.
    if body.is_none() && !now.flapping {
        return None;
    }
    let changes = changes_after(now.changes, now.raw(), result, at, rules.interval);
    let flap = [true, false].into_iter().find(|on| flap_allows(rules, now.flapping, *on, &changes, at));
    match (body, flap) {
        (None, None) => None,
        (None, Some(on)) => Some(EventBody::Flapping { on }),
        (Some(mut body), flap) => {
            match &mut body {
                EventBody::Soft { flapping, .. } => *flapping = flap,
                EventBody::Transition { flapping, flaps, .. } => {
                    *flapping = flap;
                    *flaps = flap.unwrap_or(now.flapping);
                }
                _ => {}
            }
            Some(body)
        }
    }
}

/// Whether a result event (`Soft`, a format-3 `Transition`) follows from the state before it: the attempt it
/// names is the next one, and it is hard exactly when that reaches what the rules need. A `Soft` back to the
/// hard state needs a soft state to end.
pub fn follows(now: Now<'_>, rules: &Rules, body: &EventBody) -> bool {
    match body {
        EventBody::Soft { state, attempt: 0, .. } => *state == now.hard && now.soft.is_some(),
        EventBody::Soft { state, attempt, of, .. } => {
            *state != now.hard
                && *of == rules.needed(now.hard, *state)
                && *attempt == now.attempt_of(*state)
                && attempt < of
        }
        EventBody::Transition { to, attempt, flapping, flaps, .. } => {
            *to != now.hard
                && *attempt == now.attempt_of(*to)
                && *attempt >= rules.needed(now.hard, *to)
                && *flaps == flapping.unwrap_or(now.flapping)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(max: u32, rec: u32) -> Rules {
        Rules {
            max_attempts: max,
            recovery_attempts: rec,
            retry_interval: Duration::from_secs(1),
            flapping: true,
            interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_problem_is_soft_until_max_attempts_in_a_row() {
        let r = rules(3, 1);
        let none = Now { hard: State::Ok, soft: None, flapping: false, changes: &[] };
        let b = decide(none, &r, State::Critical, Time(1), "x".into()).unwrap();
        assert!(matches!(b, EventBody::Soft { state: State::Critical, attempt: 1, of: 3, .. }));
        let s1 = SoftState { state: State::Critical, attempt: 1, of: 3, at: Time(1), seq: 1, output: "x".into() };
        let one = Now { soft: Some(&s1), ..none };
        // A warning continues the row of problems.
        assert!(matches!(
            decide(one, &r, State::Warning, Time(2), "x".into()).unwrap(),
            EventBody::Soft { state: State::Warning, attempt: 2, of: 3, .. }
        ));
        let s2 = SoftState { attempt: 2, ..s1.clone() };
        let two = Now { soft: Some(&s2), ..none };
        assert!(matches!(
            decide(two, &r, State::Critical, Time(3), "x".into()).unwrap(),
            EventBody::Transition { from: State::Ok, to: State::Critical, attempt: 3, .. }
        ));
        // An ok result ends the soft state without a transition.
        assert!(matches!(
            decide(two, &r, State::Ok, Time(3), "x".into()).unwrap(),
            EventBody::Soft { state: State::Ok, attempt: 0, .. }
        ));
        assert_eq!(decide(none, &r, State::Ok, Time(3), "x".into()), None);
    }

    #[test]
    fn recovery_and_changes_of_kind() {
        let r = rules(3, 2);
        let hard = Now { hard: State::Critical, soft: None, flapping: false, changes: &[] };
        assert!(matches!(
            decide(hard, &r, State::Warning, Time(1), "x".into()).unwrap(),
            EventBody::Transition { to: State::Warning, attempt: 1, .. }
        ));
        assert!(matches!(
            decide(hard, &r, State::Ok, Time(1), "x".into()).unwrap(),
            EventBody::Soft { state: State::Ok, attempt: 1, of: 2, .. }
        ));
        let pending = Now { hard: State::Pending, ..hard };
        assert!(matches!(
            decide(pending, &r, State::Ok, Time(1), "x".into()).unwrap(),
            EventBody::Transition { from: State::Pending, to: State::Ok, attempt: 1, .. }
        ));
        assert!(matches!(
            decide(pending, &r, State::Critical, Time(1), "x".into()).unwrap(),
            EventBody::Transition { from: State::Pending, to: State::Critical, attempt: 1, .. }
        ));
    }

    #[test]
    fn before_format_three_every_change_is_hard_at_once() {
        let def = ObjectDef::tcp("h:1", 10_000, 1_000);
        let r = Rules::of(&def, 2);
        assert_eq!((r.max_attempts, r.recovery_attempts, r.flapping), (1, 1, false));
        let hard = Now { hard: State::Ok, soft: None, flapping: false, changes: &[] };
        assert!(matches!(
            decide(hard, &r, State::Critical, Time(1), "x".into()).unwrap(),
            EventBody::Transition { attempt: 1, .. }
        ));
        let r3 = Rules::of(&def, 3);
        assert_eq!((r3.max_attempts, r3.recovery_attempts, r3.flapping), (3, 1, true));
    }

    #[test]
    fn flapping_starts_at_thirty_percent_and_ends_below_twenty_five() {
        let iv = Duration::from_secs(10);
        // Six changes, the newest now: about 6 x ~1.1 / 20 = 33 %.
        let at = Time(200_000);
        let six: Vec<Time> = (0..6).map(|i| Time(at.0 - i * 10_000)).collect();
        assert!(flap_share(&six, at, iv) >= FLAP_HIGH_PCT);
        let five: Vec<Time> = six[..5].to_vec();
        assert!(flap_share(&five, at, iv) < FLAP_HIGH_PCT);
        // All out of the window: none.
        assert_eq!(flap_share(&six, Time(at.0 + 200_000), iv), 0);
        let r = rules(3, 1);
        assert!(flap_allows(&r, false, true, &six, at));
        assert!(!flap_allows(&r, true, false, &six, at));
        assert!(!flap_allows(&r, true, false, &six, Time(at.0 + 100_000)));
        assert!(flap_allows(&r, true, false, &six, Time(at.0 + 160_000)));
    }

    #[test]
    fn follows_accepts_the_next_attempt_only() {
        let r = rules(3, 1);
        let none = Now { hard: State::Ok, soft: None, flapping: false, changes: &[] };
        let soft = |attempt, of| EventBody::Soft {
            state: State::Critical,
            attempt,
            of,
            output: String::new(),
            flapping: None,
        };
        assert!(follows(none, &r, &soft(1, 3)));
        assert!(!follows(none, &r, &soft(2, 3)));
        assert!(!follows(none, &r, &soft(1, 2)));
        let hard = |attempt| EventBody::Transition {
            from: State::Ok,
            to: State::Critical,
            output: String::new(),
            attempt,
            flapping: None,
            flaps: false,
            notify: None,
        };
        assert!(!follows(none, &r, &hard(1)));
        let s2 = SoftState { state: State::Critical, attempt: 2, of: 3, at: Time(1), seq: 1, output: String::new() };
        let two = Now { soft: Some(&s2), ..none };
        assert!(follows(two, &r, &hard(3)));
        assert!(!follows(two, &r, &soft(2, 3)));
        assert!(follows(
            two,
            &r,
            &EventBody::Soft { state: State::Ok, attempt: 0, of: 0, output: String::new(), flapping: None }
        ));
    }
}
