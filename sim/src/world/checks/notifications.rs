//! The checker of invariant 9 (notifications; `sim/README.md`, "Invariants and where they are checked"), over
//! what the notifiers sent and the simulated endpoints received.
//!
//! Every request reaching an endpoint carries `webhook-id` `jaque-<seq>-<endpoint>` and a body that matches the
//! log, is for a transition the oracle accepted (never a fenced event) and after the fleet's start record for
//! that endpoint; per object and endpoint, first deliveries (2xx) arrive in log order and leave no gap. At the
//! end of the liveness phase every accepted transition after the start, up to where the log stood when the
//! engines were done, is delivered to every endpoint that never answered 410, unless given up (none may be when
//! `give_up` is a day). Repeats: a transition may reach an endpoint again only once per earlier send that was in
//! flight at a fault — a send whose claim stood in the store while its notifier's key was gone (a crash, a pause
//! past the ttl, a cut, lost heartbeats, clogging, a leave that timed out: the member that claimed it is then
//! gone for the others, who send it again), or a send whose 2xx never reached its notifier (the notifier crashed
//! or was cut from the endpoints first, or the endpoint answered after the send timeout). A notifier claims only
//! while its key is live in the store (the lease); no start record lies below where the log stood when the first
//! notifier started; a notifier that got a 410 from an endpoint never sends to it again; none retries a delivery
//! before the `Retry-After` its last answer gave.

use crate::world::notifier::endpoint::Reception;
use crate::world::notifier::kv::{decode, parse_progress_key, start_key, PROGRESS};
use crate::world::notifier::{config, NotifyStats};
use crate::world::snapshots::LostBy;
use crate::world::{ms, Category, Sim};
use jaque_core::notifier::{Delivery, DeliveryRecord, EndpointId, Notification, SendResult};
use jaque_core::{Bucket, EventBody, LogEntry, MemberId, MemberRef, ObjectId, State, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What the checker keeps: every send, the oracle's verdicts on what may be notified, the claims orphaned at
/// faults, what was given up and delivered, and the wait for the last deliveries at the end of the run.
#[derive(Default)]
pub(in crate::world) struct Notifications {
    /// Every send, numbered in order (`Reception::attempt`).
    attempts: Vec<Attempt>,
    transitions: BTreeMap<u64, AcceptedTransition>,
    /// Positions of events the fence discarded.
    fenced: BTreeSet<u64>,
    /// (claimer, endpoint, object, seq): a claim that stood in the store while its member's key was gone.
    orphaned: BTreeSet<(MemberRef, EndpointId, ObjectId, u64)>,
    /// (endpoint, seq) given up by some notifier.
    gave_up: BTreeSet<(usize, u64)>,
    /// 2xx receptions per (endpoint, seq).
    delivered: BTreeMap<(usize, u64), u32>,
    /// Per (endpoint, object): the last seq whose first delivery arrived.
    first: BTreeMap<(usize, ObjectId), u64>,
    /// `counters.failed` of incarnations that are gone.
    retired_failed: u64,
    /// Each notifier key that went away: the member, when, and how many claims of it stood in the store.
    key_losses: Vec<(MemberRef, Time, usize)>,
    /// Where the log stood when the first notifier started: no start record may be below it.
    first_start: Option<u64>,
    end: Option<Drain>,
}

/// One send, as the checker knows it.
struct Attempt {
    endpoint: usize,
    seq: u64,
    /// Its 2xx reached its notifier.
    answered: bool,
}

/// An accepted event a notifier must notify, as the oracle judged it: a hard transition of an object that does
/// not flap, or a flapping start or end (`jaque_core::alert`).
#[derive(Clone, Debug)]
pub struct AcceptedTransition {
    pub object: ObjectId,
    /// `transition`, `flapping_start` or `flapping_end`.
    pub kind: &'static str,
    /// `None` for a flapping start or end without a transition: its notification names the hard state the
    /// notifier's reader has when it builds it.
    pub from: Option<State>,
    pub to: Option<State>,
    /// When it landed in the log.
    pub at: Time,
}

/// The wait for the last required deliveries at the end of the liveness phase.
struct Drain {
    cutoff: u64,
    since: Time,
    deadline: Time,
    missing: usize,
}

impl Sim {
    /// A notifier starts: where the log stands when the first one does is the lowest a start record may be.
    pub(in crate::world) fn note_notifier_start(&mut self) {
        self.notifications.first_start.get_or_insert(self.log.len());
    }

    /// The entry at `seq` landed: the oracle's verdict of it, if it is an event (an accepted transition is to
    /// be notified, a fenced event never).
    pub(in crate::world) fn note_notifiable(&mut self, seq: u64) {
        let LogEntry::Event(ev) = self.log.entry(seq) else { return };
        let accepted = self.oracle.reader.verdict_at(seq, ev).is_some_and(|v| v.is_accepted());
        if !accepted {
            self.notifications.fenced.insert(seq);
            return;
        }
        // Soft states never notify; a flapping object's transitions do not; its flapping start and end do.
        let flap = |on: bool| if on { "flapping_start" } else { "flapping_end" };
        let (kind, from, to) = match &ev.body {
            // Its writer sent it to nobody of the notifiers' own endpoints (the notification policy).
            EventBody::Transition { notify: Some(n), .. } if !n.implicit => return,
            EventBody::Transition { flapping: Some(on), from, to, .. } => (flap(*on), Some(*from), Some(*to)),
            EventBody::Transition { flaps: false, from, to, .. } => ("transition", Some(*from), Some(*to)),
            EventBody::Soft { flapping: Some(on), .. } | EventBody::Flapping { on } => (flap(*on), None, None),
            EventBody::Released { state, notify, .. } if notify.implicit => ("released", Some(*state), Some(*state)),
            _ => return,
        };
        let t = AcceptedTransition { object: ev.object.clone(), kind, from, to, at: self.now };
        self.notifications.transitions.insert(seq, t);
    }

    /// A notifier incarnation ends: the deliveries it gave up are counted after it is gone.
    pub(in crate::world) fn note_retired(&mut self, failed: u64) {
        self.notifications.retired_failed += failed;
    }

    /// The answer to send `a` made its notifier give the delivery up.
    pub(in crate::world) fn note_give_up(&mut self, a: u64) {
        let at = &self.notifications.attempts[a as usize];
        self.notifications.gave_up.insert((at.endpoint, at.seq));
    }

    /// Notifier `s` sends `d`: to a configured endpoint that never answered this incarnation 410, not before the
    /// `Retry-After` its last answer gave. Recorded as a new send in flight: its endpoint and number, `None` on a
    /// violation.
    pub(in crate::world) fn check_send(&mut self, s: usize, d: &Delivery) -> Option<(usize, u64)> {
        let Some(ep) = self.notify.endpoint_index(d.endpoint) else {
            let msg = format!("n{} sends to an endpoint nobody configured: {}", s + 1, d.endpoint);
            self.fail(Category::Safety, "9 notifications", msg);
            return None;
        };
        let role = self.notify.slots[s].role.as_mut().expect("running");
        if role.sends.gone[ep] {
            let msg = format!("n{} sends seq {} to hook{} after hook{} answered it 410", s + 1, d.seq, ep + 1, ep + 1);
            self.fail(Category::Safety, "9 notifications", msg);
            return None;
        }
        if d.attempt == 1 {
            // A new claim of the transition: a delivery of its own (the core keeps a `Retry-After` with the
            // delivery it answered, not across a release and a new claim).
            role.sends.not_before.remove(&(ep, d.seq));
        }
        if let Some(t) = role.sends.not_before.get(&(ep, d.seq)).copied().filter(|t| self.now < *t) {
            let msg = format!(
                "n{} retries seq {} at hook{} at {}, before the Retry-After it was given (not before {t})",
                s + 1,
                d.seq,
                ep + 1,
                self.now
            );
            self.fail(Category::Safety, "9 notifications", msg);
            return None;
        }
        let a = self.notifications.attempts.len() as u64;
        role.sends.inflight.insert(d.op, a);
        self.notifications.attempts.push(Attempt { endpoint: ep, seq: d.seq, answered: false });
        Some((ep, a))
    }

    /// The lease: a notifier writes a claim only while its key is surely alive (so a claim that lands after its
    /// key went away was on its way at the fault). False on a violation.
    pub(in crate::world) fn check_lease(&mut self, object: &ObjectId, record: &DeliveryRecord) -> bool {
        let Some(c) = &record.claim else { return true };
        if self.store.live_incarnation(Bucket::Notifier, &c.by.id) != Some(c.by.incarnation) {
            let msg = format!("{} claims seq {} of {object} while its key is gone", c.by, c.seq);
            self.fail(Category::Safety, "9 notifications", msg);
            return false;
        }
        true
    }

    /// A start record proposed at `propose` for endpoints of which some have none: never below where the log
    /// stood when the first notifier started (older transitions would be sent).
    pub(in crate::world) fn check_start_proposal(&mut self, endpoints: &[EndpointId], propose: u64) {
        let first = self.notifications.first_start.unwrap_or(0);
        if propose < first && endpoints.iter().any(|ep| self.store.get(&start_key(*ep)).is_none()) {
            let msg = format!(
                "a start record at {propose}, below where the log stood when the first notifier started ({first}): older transitions would be sent"
            );
            self.fail(Category::Safety, "9 notifications", msg);
        }
    }

    /// A progress write landed: a claim by a member whose key is gone (a write that was on its way) will be
    /// sent again by the others.
    pub(in crate::world) fn note_progress_written(
        &mut self,
        endpoint: EndpointId,
        object: &ObjectId,
        record: &DeliveryRecord,
    ) {
        let Some(c) = &record.claim else { return };
        if self.store.live_incarnation(Bucket::Notifier, &c.by.id) != Some(c.by.incarnation) {
            self.notifications.orphaned.insert((c.by.clone(), endpoint, object.clone(), c.seq));
        }
    }

    /// What the answer to the send of operation `op` of notifier `s` tells the checker, before the notifier
    /// handles it: the send it answers.
    pub(in crate::world) fn answer_seen(&mut self, s: usize, op: u64, result: &SendResult) -> Option<u64> {
        let retry_max = self.params.notify.retry_max_ms;
        let now = self.now;
        let role = self.notify.slots[s].role.as_mut().expect("running");
        let a = role.sends.inflight.remove(&op)?;
        let at = &mut self.notifications.attempts[a as usize];
        let (ep, seq) = (at.endpoint, at.seq);
        match result {
            SendResult::Delivered => at.answered = true,
            SendResult::Gone => {
                if !role.sends.gone[ep] {
                    role.sends.gone[ep] = true;
                    self.stats.notify.disabled += 1;
                }
            }
            SendResult::Retry { after: Some(after), .. } => {
                let wait = (*after).min(Duration::from_millis(retry_max));
                role.sends.not_before.insert((ep, seq), now + wait);
                return Some(a);
            }
            SendResult::Retry { .. } => {}
        }
        // The next attempt follows this answer, which asked for no wait.
        role.sends.not_before.remove(&(ep, seq));
        Some(a)
    }

    /// Claims of `member` standing in the store.
    pub(in crate::world) fn claims_by(&self, member: &MemberRef) -> usize {
        self.store.scan(PROGRESS).filter(|(_, v, _)| decode(v).claim.is_some_and(|c| c.by == *member)).count()
    }

    /// A notifier's key went away: every claim of it standing in the store may be sent again by another.
    pub(in crate::world) fn notifier_key_gone(&mut self, member: &MemberRef) {
        let mut claims = Vec::new();
        for (key, v, _) in self.store.scan(PROGRESS) {
            if let Some(c) = decode(v).claim.filter(|c| c.by == *member) {
                let (ep, object) = parse_progress_key(key).expect("the simulator's own keys");
                claims.push((member.clone(), ep, object, c.seq));
            }
        }
        self.notifications.key_losses.push((member.clone(), self.now, claims.len()));
        self.notifications.orphaned.extend(claims);
    }

    /// Every request reaching an endpoint: its id, its body, an accepted transition after the start, and first
    /// deliveries in log order.
    pub(in crate::world) fn check_reception(&mut self, ep: usize, rec: &Reception, body: &str) {
        self.stats.notify.received += 1;
        let id = self.notify.endpoints[ep].endpoint.id;
        let what = format!("hook{} got seq {} ({}) from {}", ep + 1, rec.seq, rec.object, rec.by);
        let want = format!("jaque-{}-{id}", rec.seq);
        let err = if rec.webhook_id != want {
            Some(format!("{what} with webhook-id {}, not {want}", rec.webhook_id))
        } else if let Some(t) = self.notifications.transitions.get(&rec.seq) {
            let start = self.store.get(&start_key(id)).map(|(v, _)| v.parse::<u64>().expect("a position"));
            match serde_json::from_str::<Notification>(body) {
                _ if t.object != rec.object => Some(format!("{what}: the log has {} there", t.object)),
                _ if start.is_none() => Some(format!("{what} before any notifier recorded where notifications begin")),
                _ if start.is_some_and(|s| rec.seq <= s) => {
                    Some(format!("{what}: a transition from before the fleet started at {}", start.unwrap_or(0)))
                }
                // What a worker's output echoed of a probe's credential is scrubbed before the log (invariant
                // 10 holds the sink to it; this, the notifications).
                _ if body.contains(crate::params::SECRET) => {
                    Some(format!("{what} with a body that shows a credential: {body}"))
                }
                Err(e) => Some(format!("{what} with a body that is no notification ({e}): {body}")),
                Ok(n)
                    if (&n.object, n.seq, n.kind.as_str()) != (&t.object, rec.seq, t.kind)
                        || t.from.is_some_and(|f| f != n.from)
                        || t.to.is_some_and(|to| to != n.to) =>
                {
                    Some(format!("{what} with a body that does not match the log: {body}"))
                }
                Ok(_) => None,
            }
        } else if self.notifications.fenced.contains(&rec.seq) {
            Some(format!("{what}: a fenced event was notified"))
        } else {
            Some(format!("{what}: no accepted transition is at that position"))
        };
        if let Some(msg) = err {
            self.fail(Category::Safety, "9 notifications", msg);
            return;
        }
        if rec.delivered() {
            self.stats.notify.delivered += 1;
            let n = self.notifications.delivered.entry((ep, rec.seq)).or_default();
            *n += 1;
            if *n == 1 {
                // A transition said lost (purged) whose claim was orphaned at a fault may still come from the
                // notifier that held it, after the next owner, which could not send it, went on to later ones.
                let late = self.lost_to_purge(LostBy::Notifier, rec.seq, &rec.object)
                    && self.notifications.orphaned.contains(&(rec.by.clone(), id, rec.object.clone(), rec.seq));
                let last = self.notifications.first.entry((ep, rec.object.clone())).or_default();
                if rec.seq <= *last && !late {
                    let msg = format!("{what}: its first delivery came after that of seq {} of the same object", *last);
                    self.fail(Category::Safety, "9 notifications", msg);
                    return;
                }
                *last = (*last).max(rec.seq);
            }
        }
    }

    /// The start record of endpoint `i`: where its notifications begin.
    pub fn start_record(&self, i: usize) -> Option<u64> {
        let id = self.notify.endpoints[i].endpoint.id;
        self.store.get(&start_key(id)).map(|(v, _)| v.parse().expect("a position"))
    }

    /// The deliveries invariant 9 requires up to log position `cutoff` that have not arrived: how many, and
    /// the first few. A transition purged before it was delivered is not required if a notifier said its
    /// object lost history over it (issue 11).
    fn missing(&self, cutoff: u64) -> (usize, Vec<String>) {
        let mut n = 0;
        let mut first = Vec::new();
        for (i, e) in self.notify.endpoints.iter().enumerate() {
            if e.answered_gone {
                continue;
            }
            let Some(start) = self.start_record(i) else {
                n += 1;
                first.push(format!("hook{} has no start record", i + 1));
                continue;
            };
            for (seq, t) in self.notifications.transitions.range(start + 1..).take_while(|(seq, _)| **seq <= cutoff) {
                let key = (i, *seq);
                if !self.notifications.delivered.contains_key(&key)
                    && !self.notifications.gave_up.contains(&key)
                    && !self.lost_to_purge(LostBy::Notifier, *seq, &t.object)
                {
                    n += 1;
                    if first.len() < 5 {
                        first.push(format!("hook{} never got seq {seq} ({}, landed at {})", i + 1, t.object, t.at));
                    }
                }
            }
        }
        (n, first)
    }

    /// Invariant 9 over everything the endpoints received so far: repeats only as permitted by faults, no gap
    /// per object, nothing given up when nothing may be; with `upto`, every required delivery up to there.
    pub fn check_notifications(&self, upto: Option<u64>) -> Result<(), String> {
        if let Some(cutoff) = upto {
            let (n, first) = self.missing(cutoff);
            if n > 0 {
                return Err(format!("{n} deliveries missing: {}", first.join("; ")));
            }
        }
        for (i, e) in self.notify.endpoints.iter().enumerate() {
            let id = e.endpoint.id;
            // Per seq: deliveries, and those whose send was in flight at a fault (each permits one repeat).
            let mut by_seq: BTreeMap<u64, (u64, u64, Vec<String>)> = BTreeMap::new();
            for r in e.received.iter().filter(|r| r.delivered()) {
                let answered = self.notifications.attempts[r.attempt as usize].answered;
                let orphaned = self.notifications.orphaned.contains(&(r.by.clone(), id, r.object.clone(), r.seq));
                let v = by_seq.entry(r.seq).or_default();
                v.0 += 1;
                v.1 += u64::from(!answered || orphaned);
                v.2.push(format!("{} at {} (answered={answered} orphaned={orphaned})", r.by, r.at));
            }
            for (seq, (count, faulty, who)) in &by_seq {
                if *count > 1 + faulty {
                    return Err(format!(
                        "hook{} got seq {seq} {count} times, {faulty} of its sends in flight at a fault: {}",
                        i + 1,
                        who.join(", ")
                    ));
                }
            }
            // Per object, the deliveries are a prefix of its transitions after the start (give-ups skipped).
            let Some(start) = self.start_record(i) else { continue };
            let mut gap: BTreeMap<&ObjectId, u64> = BTreeMap::new();
            for (seq, t) in self.notifications.transitions.range(start + 1..) {
                let key = (i, *seq);
                if self.notifications.delivered.contains_key(&key) {
                    if let Some(g) = gap.get(&t.object) {
                        return Err(format!("hook{} got seq {seq} of {} but never seq {g} before it", i + 1, t.object));
                    }
                } else if !self.notifications.gave_up.contains(&key)
                    && !self.lost_to_purge(LostBy::Notifier, *seq, &t.object)
                {
                    gap.entry(&t.object).or_insert(*seq);
                }
            }
        }
        if self.params.notify.gives_up_never() {
            let running: u64 = self.notify.slots.iter().filter_map(|p| p.notifier()).map(|n| n.counters.failed).sum();
            let failed = running + self.notifications.retired_failed;
            if failed > 0 || !self.notifications.gave_up.is_empty() {
                return Err(format!(
                    "{failed} deliveries given up ({:?}) with give_up at a day",
                    self.notifications.gave_up.iter().take(5).collect::<Vec<_>>()
                ));
            }
        }
        Ok(())
    }

    /// How long the notifiers may go without a new required delivery at the end of the liveness phase: their
    /// takeover (twice: a notifier that comes back after the heal and one whose key must expire), a leave's
    /// drain, the longest backoffs of a delivery, of a store write and of a resume (core's config by name), a
    /// claim recheck, two send and store timeouts, a boot, four hops and the clock skew.
    pub(in crate::world) fn notify_budget_ms(&self) -> u64 {
        let p = &self.params;
        let np = &p.notify;
        let anyone = MemberRef { id: MemberId::new("n1").expect("valid member id"), incarnation: 0 };
        let cfg = config(p, anyone, Vec::new());
        2 * p.takeover_window_ms()
            + ms(cfg.leave_timeout)
            + ms(cfg.retry_max)
            + ms(cfg.store_retry_max).max(ms(cfg.role.retry_max))
            + ms(cfg.claim_recheck)
            + 2 * np.send_timeout_ms
            + 2 * np.store_timeout_ms
            + p.boot_delay_max_ms
            + 4 * p.max_hop_ms()
            + 2 * p.clock_skew_max_ms
            + 5_000
    }

    /// Called once the engines' liveness phase is done: whether the notifiers are done too. The simulated truth
    /// freezes; they must deliver every transition up to where the log stands now, making progress within
    /// their budget; then invariant 9 is checked over everything received.
    pub(in crate::world) fn notifiers_done(&mut self) -> bool {
        if self.notify.slots.is_empty() {
            return true;
        }
        let budget = Duration::from_millis(self.notify_budget_ms());
        let (now, cutoff) = (self.now, self.log.len());
        if self.notifications.end.is_none() {
            // No new transitions from here on: however far behind a slow endpoint left them, the notifiers
            // have a finite backlog to deliver.
            self.freeze_truth();
        }
        let d = self.notifications.end.get_or_insert(Drain {
            cutoff,
            since: now,
            deadline: now + budget,
            missing: usize::MAX,
        });
        let (cutoff, since) = (d.cutoff, d.since);
        let (missing, first) = self.missing(cutoff);
        if missing == 0 {
            self.stats.notify.drain_ms = now.0 - since.0;
            self.stats.notify.drain_budget_ms = ms(budget);
            self.stats.notify.required = self.required(cutoff);
            self.notify_stats_final();
            if let Err(e) = self.check_notifications(Some(cutoff)) {
                self.fail(Category::Safety, "9 notifications", e);
            }
            return true;
        }
        let d = self.notifications.end.as_mut().expect("set above");
        if missing < d.missing {
            d.missing = missing;
            d.deadline = d.deadline.max(now + budget);
        }
        if now > d.deadline {
            let msg = format!(
                "{missing} deliveries missing {}ms after the engines were done (no progress for {}ms): {}",
                now.0 - since.0,
                ms(budget),
                first.join("; ")
            );
            self.fail(Category::Liveness, "9 notifications", msg);
            return true;
        }
        false
    }

    fn required(&self, cutoff: u64) -> u64 {
        (0..self.notify.endpoints.len())
            .filter(|i| !self.notify.endpoints[*i].answered_gone)
            .filter_map(|i| self.start_record(i))
            .map(|start| {
                self.notifications.transitions.range(start + 1..).take_while(|(seq, _)| **seq <= cutoff).count() as u64
            })
            .sum()
    }

    fn notify_stats_final(&mut self) {
        let mut repeats = 0;
        let mut faulty = 0;
        for (i, e) in self.notify.endpoints.iter().enumerate() {
            let id = e.endpoint.id;
            let mut seen = BTreeSet::new();
            for r in e.received.iter().filter(|r| r.delivered()) {
                if !seen.insert(r.seq) {
                    repeats += 1;
                }
                let answered = self.notifications.attempts[r.attempt as usize].answered;
                if !answered || self.notifications.orphaned.contains(&(r.by.clone(), id, r.object.clone(), r.seq)) {
                    faulty += 1;
                }
            }
            let _ = i;
        }
        let st = &mut self.stats.notify;
        st.repeats = repeats;
        st.faulty_sends = faulty;
        st.orphaned_claims = self.notifications.orphaned.len() as u64;
        st.give_ups = self.notifications.gave_up.len() as u64;
    }

    /// Accepted transitions as the oracle judged them, by log position.
    pub fn accepted_transitions(&self) -> &BTreeMap<u64, AcceptedTransition> {
        &self.notifications.transitions
    }

    /// Claims of notifier slot `s`'s running incarnation standing in the store.
    pub fn claims_of(&self, s: usize) -> usize {
        self.claims_by(&self.notify.slots[s].member())
    }

    /// Each notifier key that went away: member, time, and its claims standing in the store then.
    pub fn notifier_key_losses(&self) -> &[(MemberRef, Time, usize)] {
        &self.notifications.key_losses
    }

    /// Scenarios, to show the checker is not vacuous: endpoint `i` receives its last delivery again, as from a
    /// send no fault touched.
    pub fn forge_repeat(&mut self, i: usize) {
        let e = &mut self.notify.endpoints[i];
        let mut r = e.received.iter().rev().find(|r| r.delivered()).cloned().expect("a delivery to repeat");
        r.attempt = self.notifications.attempts.len() as u64;
        self.notifications.attempts.push(Attempt { endpoint: i, seq: r.seq, answered: true });
        e.received.push(r);
    }

    /// The statistics of the notifiers so far (repeats and faulty sends are computed on the way).
    pub fn notify_stats(&mut self) -> NotifyStats {
        self.notify_stats_final();
        self.stats.notify.clone()
    }
}
