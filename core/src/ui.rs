//! Where a ui write goes, and how its outcome reads over HTTP. Pure decisions, so the simulator and the tests
//! exercise the same rules the shell serves.

use crate::hrw::Ownership;
use crate::model::{MemberId, MemberRef, ObjectId, Outcome};
use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRoute {
    /// An engine runs in this process: hand the command to it (it forwards if it does not own the object).
    LocalEngine,
    /// No engine here but NATS coordination: a hop-0 request to the owner the ui's log view names
    /// (`jaque.cmd.<owner>`), or on `jaque.work.cmd.ingress` (engines' queue group) when it names none or the
    /// owner has no responder. Either way an engine that does not own the object forwards it once.
    Ingress,
    /// No engine here and no coordination: the page says 503.
    Reject,
}

pub fn write_route(local_engine: bool, nats_coordination: bool) -> WriteRoute {
    if local_engine {
        WriteRoute::LocalEngine
    } else if nats_coordination {
        WriteRoute::Ingress
    } else {
        WriteRoute::Reject
    }
}

/// Where a ui without an engine sends a write first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submit {
    /// Straight to the owner its copy of the log names: a hop-0 request on `jaque.cmd.<owner>`. A view that is
    /// behind is harmless, since an engine that does not own the object forwards it once. If the owner has no
    /// responder (it died and the epoch has not moved yet), the write goes through ingress instead.
    Owner(MemberRef),
    /// Through `jaque.work.cmd.ingress`: the ui has no view yet (reading the log, no epoch in force).
    Ingress,
}

/// The first hop of a write from a ui whose log view has `ownership` in force (`None` before it caught up).
pub fn submit_to(ownership: Option<&Ownership>, object: &ObjectId) -> Submit {
    match ownership.and_then(|o| o.owner(object)) {
        Some(owner) => Submit::Owner(owner.clone()),
        None => Submit::Ingress,
    }
}

/// How a ui waits for the engines to take a write it submits over NATS (`IngressWrite`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmitTimeouts {
    /// `-claim-timeout`: how long one attempt may go without an engine's claim (or its decline, or the outcome)
    /// before the write is sent again. Zero turns claims off: one request, and its outcome or nothing.
    pub claim: Duration,
    /// How long after the first attempt a write that no engine claimed may still be sent again.
    pub claiming: Duration,
    /// How long after a claim the ui waits for the outcome: the claiming engine answers within its reply
    /// timeout, or a forward's.
    pub answer: Duration,
}

impl SubmitTimeouts {
    /// What `-claim-timeout 200ms` gives: claims in 200 ms, re-submitted for up to 7 s, the outcome 7 s after a
    /// claim (the engine's reply timeout of 5 s, 1 s for a forward, 1 s to spare).
    pub const SHIPPED: SubmitTimeouts = SubmitTimeouts {
        claim: Duration::from_millis(200),
        claiming: Duration::from_secs(7),
        answer: Duration::from_secs(7),
    };

    /// The longest a write can take from its first attempt to its outcome.
    pub fn bound(&self) -> Duration {
        if self.claim.is_zero() {
            self.answer
        } else {
            self.claiming + self.answer
        }
    }
}

/// What the driver hears back about one attempt of a write (its reply subject names the attempt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Engine `by` took the attempt: its outcome follows.
    Claimed { attempt: u32, by: MemberId },
    /// Engine `by` cannot take writes now.
    Declined { attempt: u32, by: MemberId, reason: String },
    /// The outcome (an engine that predates claims sends it alone: it counts as the claim too).
    Answered { attempt: u32, outcome: Outcome },
    /// NATS says nobody listens on the subject the attempt went to.
    NoResponders { attempt: u32 },
    /// The attempt could not be sent (the connection is down, the server refused it).
    Failed { attempt: u32, reason: String },
}

/// What the driver does next for a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Send the command (with `"claim": true` unless claims are off) as attempt `attempt`, on a reply subject of
    /// its own: the first to the owner when `to_owner` said so, every other through ingress.
    Send { attempt: u32 },
    /// The write's one outcome.
    Done(Outcome),
}

/// One write of a ui without an engine, from its first attempt to its one outcome: a sans-IO machine (the time
/// comes in with every call) that the shell and the simulator drive alike.
///
/// Why: the engines take ingress writes as one NATS queue group, and the server keeps handing a share of them
/// to a member that has stopped (a paused process, a stalled host, a cut link) until it drops the member's
/// connection. So an engine that takes an attempt says so at once (`Claimed`), and an attempt that no engine
/// claims within `claim` is sent again through ingress, where the queue group picks again; an engine that cannot
/// take writes declines at once and the write goes again at once (after three declines in a row, at the claim
/// pace). The command id makes every attempt one command: an engine that wakes up and takes an abandoned attempt
/// applies nothing twice. Once one engine claimed the write, its outcome is the write's, and no attempt is sent
/// again (exactly one claim is honoured): other engines' answers are ignored.
///
/// Driving it: after `new`, `handle` and `handle_timeout`, drain `poll_act` until `None`; call
/// `handle_timeout` at `poll_timeout`. Every `Send` is an attempt the driver sends and listens to.
#[derive(Clone, Debug)]
pub struct IngressWrite {
    t: SubmitTimeouts,
    started: Time,
    attempts: u32,
    /// The first attempt goes straight to the owner (`-ui-writes owner`); no responder there moves on at once.
    to_owner: bool,
    claimed: Option<(u32, MemberId)>,
    declines: u32,
    /// The latest attempt was declined (the next one is sent again for that reason).
    declined: bool,
    last_decline: Option<String>,
    deadline: Time,
    acts: VecDeque<Act>,
    done: bool,
    /// It ended with an engine's outcome (not the ui giving up).
    answered: bool,
    /// Attempts sent again, by why: no claim in time, a decline.
    pub resent_unclaimed: u32,
    pub resent_declined: u32,
}

impl IngressWrite {
    pub fn new(now: Time, t: SubmitTimeouts, to_owner: bool) -> IngressWrite {
        let wait = if t.claim.is_zero() { t.answer } else { t.claim };
        IngressWrite {
            t,
            started: now,
            attempts: 1,
            to_owner,
            claimed: None,
            declines: 0,
            declined: false,
            last_decline: None,
            deadline: now + wait,
            acts: VecDeque::from([Act::Send { attempt: 1 }]),
            done: false,
            answered: false,
            resent_unclaimed: 0,
            resent_declined: 0,
        }
    }

    // ---- getters ----

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Which engine's claim is honoured, if one claimed the write.
    pub fn claimed_by(&self) -> Option<&MemberId> {
        self.claimed.as_ref().map(|(_, by)| by)
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether it ended with an engine's outcome, rather than giving up (nobody claimed it in the window, its
    /// claimer fell silent, nobody listened, it could not be sent).
    pub fn answered(&self) -> bool {
        self.answered
    }

    pub fn timeouts(&self) -> SubmitTimeouts {
        self.t
    }

    /// Whether attempt `attempt` goes straight to the owner (else through ingress).
    pub fn goes_to_owner(&self, attempt: u32) -> bool {
        self.to_owner && attempt == 1
    }

    // ---- inputs ----

    pub fn handle(&mut self, now: Time, heard: Heard) {
        if self.done {
            return;
        }
        match heard {
            Heard::Answered { attempt, outcome } => {
                // Another attempt's engine, after one claim was honoured: not this write's outcome.
                if self.claimed.as_ref().is_none_or(|(a, _)| *a == attempt) {
                    self.answered = true;
                    self.finish(outcome);
                }
            }
            Heard::Claimed { attempt, by } => {
                if self.claimed.is_none() {
                    self.claimed = Some((attempt, by));
                    self.deadline = now + self.t.answer;
                }
            }
            Heard::Declined { attempt, by, reason } => {
                if self.claimed.is_some() || attempt != self.attempts {
                    return;
                }
                self.last_decline = Some(format!("{by} declined it: {reason}"));
                self.declines += 1;
                self.declined = true;
                if self.declines <= 3 {
                    self.resend(now);
                } else {
                    // Every engine it reaches declines: go on at the claim pace until the window closes.
                    self.deadline = now + self.t.claim;
                }
            }
            Heard::NoResponders { attempt } => {
                if self.claimed.is_some() || attempt != self.attempts {
                    return;
                }
                if self.goes_to_owner(attempt) {
                    // The owner the ui's view names is not running: through ingress at once.
                    self.send(now);
                } else {
                    self.finish(Outcome::Unavailable { reason: "no engine is running".into() });
                }
            }
            Heard::Failed { attempt, reason } => {
                if self.claimed.is_none() && attempt == self.attempts {
                    self.finish(Outcome::Unavailable { reason });
                }
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Time) {
        if self.done || now < self.deadline {
            return;
        }
        match &self.claimed {
            Some((_, by)) => {
                let reason = format!("engine {by} claimed the write and gave no outcome in time");
                self.finish(Outcome::Unavailable { reason });
            }
            None if self.t.claim.is_zero() => {
                self.finish(Outcome::Unavailable { reason: "no outcome from the engines in time".into() })
            }
            None => self.resend(now),
        }
    }

    // ---- outputs ----

    pub fn poll_act(&mut self) -> Option<Act> {
        self.acts.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Time> {
        (!self.done).then_some(self.deadline)
    }

    // ---- internals ----

    /// Sends the write again if the claiming window has room for one more claim timeout, else gives up.
    fn resend(&mut self, now: Time) {
        if now + self.t.claim > self.started + self.t.claiming {
            let reason = match &self.last_decline {
                Some(d) => format!("no engine took the write in {} attempts; the last {d}", self.attempts),
                None => format!("no engine claimed the write in {} attempts", self.attempts),
            };
            self.finish(Outcome::Unavailable { reason });
            return;
        }
        if self.declined {
            self.resent_declined += 1;
        } else {
            self.resent_unclaimed += 1;
        }
        self.send(now);
    }

    fn send(&mut self, now: Time) {
        self.declined = false;
        self.attempts += 1;
        self.deadline = now + self.t.claim;
        self.acts.push_back(Act::Send { attempt: self.attempts });
    }

    fn finish(&mut self, outcome: Outcome) {
        self.done = true;
        self.acts.push_back(Act::Done(outcome));
    }
}

/// Seconds a caller should wait before retrying a 503.
pub const RETRY_AFTER_SECS: u32 = 1;

/// The HTTP status of an outcome, and whether it carries `Retry-After`.
pub fn http_status(outcome: &Outcome) -> (u16, bool) {
    match outcome {
        Outcome::Applied { .. } => (200, false),
        Outcome::NotFound { .. } => (404, false),
        Outcome::Rejected { .. } => (400, false),
        Outcome::NotOwned | Outcome::Unavailable { .. } => (503, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ui_without_engine_or_coordination_rejects_writes() {
        assert_eq!(write_route(false, false), WriteRoute::Reject);
        assert_eq!(write_route(false, true), WriteRoute::Ingress);
        assert_eq!(write_route(true, false), WriteRoute::LocalEngine);
    }

    #[test]
    fn a_ui_writes_to_the_owner_it_knows_and_through_ingress_otherwise() {
        let m = |id: &str| MemberRef { id: crate::model::MemberId::new(id).unwrap(), incarnation: 1 };
        let object = ObjectId::new("web").unwrap();
        assert_eq!(submit_to(None, &object), Submit::Ingress);
        assert_eq!(submit_to(Some(&Ownership::new(&[])), &object), Submit::Ingress);
        let own = Ownership::new(&[m("a"), m("b"), m("c")]);
        assert_eq!(submit_to(Some(&own), &object), Submit::Owner(own.owner(&object).unwrap().clone()));
    }

    const T: SubmitTimeouts = SubmitTimeouts {
        claim: Duration::from_millis(200),
        claiming: Duration::from_secs(7),
        answer: Duration::from_secs(7),
    };

    fn e(id: &str) -> MemberId {
        MemberId::new(id).unwrap()
    }

    fn acts(w: &mut IngressWrite) -> Vec<Act> {
        std::iter::from_fn(|| w.poll_act()).collect()
    }

    fn applied() -> Outcome {
        Outcome::Applied { command_id: crate::model::CommandId::new("c").unwrap(), owner: e("e1"), epoch: 1, seq: 9 }
    }

    #[test]
    fn a_claimed_write_ends_with_the_claimers_outcome_and_is_sent_once() {
        let mut w = IngressWrite::new(Time(0), T, false);
        assert_eq!(acts(&mut w), [Act::Send { attempt: 1 }]);
        w.handle(Time(1), Heard::Claimed { attempt: 1, by: e("e1") });
        w.handle_timeout(Time(5_000));
        assert_eq!(acts(&mut w), [], "claimed: no attempt again while the outcome is on its way");
        w.handle(Time(5_001), Heard::Answered { attempt: 1, outcome: applied() });
        assert_eq!(acts(&mut w), [Act::Done(applied())]);
        assert!(w.is_done() && w.poll_timeout().is_none());
    }

    #[test]
    fn an_attempt_nobody_claims_in_time_is_sent_again_and_only_the_honoured_claim_answers() {
        let mut w = IngressWrite::new(Time(0), T, false);
        acts(&mut w);
        assert_eq!(w.poll_timeout(), Some(Time(200)));
        w.handle_timeout(Time(200));
        assert_eq!(acts(&mut w), [Act::Send { attempt: 2 }]);
        w.handle(Time(201), Heard::Claimed { attempt: 2, by: e("e2") });
        // The engine that held attempt 1 wakes up: its claim and its outcome are not this write's.
        w.handle(Time(900), Heard::Claimed { attempt: 1, by: e("e3") });
        w.handle(Time(901), Heard::Answered { attempt: 1, outcome: Outcome::NotOwned });
        assert_eq!(acts(&mut w), []);
        assert_eq!(w.claimed_by(), Some(&e("e2")));
        w.handle(Time(902), Heard::Answered { attempt: 2, outcome: applied() });
        assert_eq!(acts(&mut w), [Act::Done(applied())]);
        assert_eq!((w.attempts(), w.resent_unclaimed, w.resent_declined), (2, 1, 0));
    }

    #[test]
    fn an_outcome_without_a_claim_counts_as_both() {
        // An engine that predates claims answers the outcome alone.
        let mut w = IngressWrite::new(Time(0), T, false);
        acts(&mut w);
        w.handle(Time(3), Heard::Answered { attempt: 1, outcome: applied() });
        assert_eq!(acts(&mut w), [Act::Done(applied())]);
    }

    #[test]
    fn a_decline_is_sent_again_at_once_and_after_three_at_the_claim_pace() {
        let mut w = IngressWrite::new(Time(0), T, false);
        acts(&mut w);
        for attempt in 1..=3 {
            w.handle(Time(10), Heard::Declined { attempt, by: e("e1"), reason: "leaving".into() });
            assert_eq!(acts(&mut w), [Act::Send { attempt: attempt + 1 }]);
        }
        w.handle(Time(10), Heard::Declined { attempt: 4, by: e("e1"), reason: "leaving".into() });
        assert_eq!(acts(&mut w), []);
        assert_eq!(w.poll_timeout(), Some(Time(210)));
        // A decline of an attempt already sent again is stale.
        w.handle(Time(20), Heard::Declined { attempt: 2, by: e("e1"), reason: "leaving".into() });
        w.handle_timeout(Time(210));
        assert_eq!(acts(&mut w), [Act::Send { attempt: 5 }]);
        assert_eq!((w.resent_unclaimed, w.resent_declined), (0, 4));
    }

    #[test]
    fn a_write_no_engine_claims_gives_up_within_the_claiming_window_saying_why() {
        let mut w = IngressWrite::new(Time(0), T, false);
        let mut last = Time(0);
        while let Some(t) = w.poll_timeout() {
            last = t;
            w.handle_timeout(t);
            if w.attempts() == 10 {
                w.handle(t, Heard::Declined { attempt: 10, by: e("e3"), reason: "out of touch".into() });
            }
        }
        let done = acts(&mut w).pop();
        assert!(last <= Time(7_000), "gave up at {last}");
        match done {
            Some(Act::Done(Outcome::Unavailable { reason })) => {
                assert!(reason.contains("no engine took the write in 36 attempts"), "{reason}");
                assert!(reason.contains("e3 declined it: out of touch"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claimer_that_falls_silent_ends_the_write_unavailable_after_the_answer_timeout() {
        let mut w = IngressWrite::new(Time(0), T, false);
        acts(&mut w);
        w.handle(Time(5), Heard::Claimed { attempt: 1, by: e("e1") });
        assert_eq!(w.poll_timeout(), Some(Time(7_005)));
        w.handle_timeout(Time(7_005));
        match acts(&mut w).as_slice() {
            [Act::Done(Outcome::Unavailable { reason })] => assert!(reason.contains("e1 claimed"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_responder_at_the_owner_goes_through_ingress_and_none_on_ingress_ends_it() {
        let mut w = IngressWrite::new(Time(0), T, true);
        acts(&mut w);
        assert!(w.goes_to_owner(1));
        w.handle(Time(1), Heard::NoResponders { attempt: 1 });
        assert_eq!(acts(&mut w), [Act::Send { attempt: 2 }]);
        assert!(!w.goes_to_owner(2));
        w.handle(Time(2), Heard::NoResponders { attempt: 2 });
        assert_eq!(acts(&mut w), [Act::Done(Outcome::Unavailable { reason: "no engine is running".into() })]);
    }

    #[test]
    fn without_claims_a_write_is_one_request() {
        let t = SubmitTimeouts { claim: Duration::ZERO, ..T };
        let mut w = IngressWrite::new(Time(0), t, false);
        assert_eq!(acts(&mut w), [Act::Send { attempt: 1 }]);
        w.handle_timeout(Time(6_999));
        assert_eq!(acts(&mut w), []);
        w.handle_timeout(Time(7_000));
        assert_eq!(
            acts(&mut w),
            [Act::Done(Outcome::Unavailable { reason: "no outcome from the engines in time".into() })]
        );
        assert_eq!(t.bound(), Duration::from_secs(7));
    }

    proptest::proptest! {
        /// Whatever the engines answer and whenever: exactly one outcome, within the bound; no attempt after a
        /// claim; attempt numbers count up from 1.
        #[test]
        fn a_write_ends_once_within_its_bound(
            steps in proptest::collection::vec((0u64..400, 0u8..8, 0u32..6), 0..80),
        ) {
            let mut w = IngressWrite::new(Time(0), T, false);
            proptest::prop_assert_eq!(w.poll_act(), Some(Act::Send { attempt: 1 }));
            let (mut now, mut sent, mut done) = (Time(0), 1u32, Vec::new());
            let mut claimed = false;
            for (dt, what, back) in steps {
                now = now + Duration::from_millis(dt);
                if w.poll_timeout().is_some_and(|t| t <= now) {
                    w.handle_timeout(now);
                }
                let attempt = w.attempts().saturating_sub(back).max(1);
                let heard = match what {
                    0 => Some(Heard::Claimed { attempt, by: e("e1") }),
                    1 => Some(Heard::Declined { attempt, by: e("e2"), reason: "r".into() }),
                    2 => Some(Heard::Answered { attempt, outcome: applied() }),
                    3 => Some(Heard::NoResponders { attempt }),
                    _ => None,
                };
                if let Some(heard) = heard {
                    while let Some(a) = w.poll_act() {
                        match a {
                            Act::Send { attempt } => {
                                sent += 1;
                                proptest::prop_assert_eq!(attempt, sent);
                            }
                            Act::Done(o) => done.push((now, o)),
                        }
                    }
                    claimed |= matches!(heard, Heard::Claimed { .. }) && w.claimed_by().is_none() && !w.is_done();
                    w.handle(now, heard);
                }
                while let Some(a) = w.poll_act() {
                    match a {
                        Act::Send { attempt } => {
                            proptest::prop_assert!(!claimed, "an attempt after a claim");
                            sent += 1;
                            proptest::prop_assert_eq!(attempt, sent);
                        }
                        Act::Done(o) => done.push((now, o)),
                    }
                }
            }
            while let Some(t) = w.poll_timeout() {
                w.handle_timeout(t);
                now = t;
                while let Some(a) = w.poll_act() {
                    if let Act::Done(o) = a {
                        done.push((now, o));
                    }
                }
            }
            proptest::prop_assert_eq!(done.len(), 1, "one outcome: {:?}", done);
            proptest::prop_assert!(done[0].0 <= Time(0) + T.bound(), "ended at {}", done[0].0);
        }
    }

    #[test]
    fn not_owned_and_unavailable_are_503_with_retry_after() {
        assert_eq!(http_status(&Outcome::NotOwned), (503, true));
        assert_eq!(http_status(&Outcome::Unavailable { reason: "x".into() }), (503, true));
        assert_eq!(http_status(&Outcome::Rejected { reason: "x".into() }), (400, false));
    }
}
