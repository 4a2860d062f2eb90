//! The invariants the world checks of the engines as the run goes — 2 agreement after every log entry a
//! reader reads, 3 one hop at every command's arrival and every forward, 4 accounting at every reply — and at
//! its end: 7 failover (convergence within its budget after the heal, then every object checked by its owner
//! within its own), and 4 again (every caller of a running engine answered). The log's own invariants are
//! the oracle's; an engine's own self-check and its epoch running backwards are caught in its step.

use crate::oracle::{hrw_owner, view_hash};
use crate::world::net::PendingReply;
use crate::world::workload::object_index;
use crate::world::{ms, Category, Ev, Node, Phase, Sim, TICK};
use jaque_core::{Command, Event, LogEntry, LogReader, MemberRef, ObjectId, Outcome, Time};
use std::collections::BTreeMap;
use std::time::Duration;

/// (slot, incarnation, time) of an engine's last dispatch or check result of an object.
type Seen = Option<(usize, u64, Time)>;

pub(in crate::world) struct Checks {
    /// Per object number (`o<i>`): the last dispatch and the last result delivered.
    dispatched: Vec<Seen>,
    checked: Vec<Seen>,
    /// The first check result per object and engine incarnation since the liveness phase converged.
    checked_since: BTreeMap<(ObjectId, usize, u64), Time>,
    /// When an accepted command event last changed each object (its check budget starts no earlier).
    touched: BTreeMap<ObjectId, Time>,
    touched_since_end: bool,
    pub healed: Option<Time>,
    converged: Option<Time>,
    converged_epoch: u64,
    /// Added to the ownership budget when an engine was leaving at the heal: its drain.
    pub drain_allowance_ms: u64,
    /// When the liveness phase ends: the last object's check deadline.
    end: Option<Time>,
    /// The engines' end-of-run checks passed; the notifiers may still be delivering.
    engines_done: bool,
    agreement_checks: u64,
}

impl Checks {
    pub fn new(objects: usize) -> Checks {
        Checks {
            dispatched: vec![None; objects],
            checked: vec![None; objects],
            checked_since: BTreeMap::new(),
            touched: BTreeMap::new(),
            touched_since_end: false,
            healed: None,
            converged: None,
            converged_epoch: 0,
            drain_allowance_ms: 0,
            end: None,
            engines_done: false,
            agreement_checks: 0,
        }
    }

    /// An accepted command event changed `object` at `now`.
    pub fn touched(&mut self, object: ObjectId, now: Time) {
        self.touched.insert(object, now);
        self.touched_since_end = true;
    }

    pub fn dispatched(&mut self, object: &ObjectId, n: usize, inc: u64, now: Time) {
        if let Some(d) = object_index(object).and_then(|i| self.dispatched.get_mut(i)) {
            *d = Some((n, inc, now));
        }
    }

    /// A check result of `object` reached engine `n` (incarnation `inc`) at `now`.
    pub fn check_result(&mut self, object: &ObjectId, n: usize, inc: u64, now: Time) {
        if let Some(c) = object_index(object).and_then(|i| self.checked.get_mut(i)) {
            *c = Some((n, inc, now));
        }
        if self.converged.is_some() {
            self.checked_since.entry((object.clone(), n, inc)).or_insert(now);
        }
    }
}

impl Sim {
    /// When the object's last check result reached its engine, and which engine (slot, incarnation).
    pub fn last_checked(&self, id: &ObjectId) -> Option<(usize, u64, Time)> {
        self.checks.checked.get(object_index(id)?).copied().flatten()
    }

    pub fn last_dispatched(&self, id: &ObjectId) -> Option<(usize, u64, Time)> {
        self.checks.dispatched.get(object_index(id)?).copied().flatten()
    }

    /// Invariant 2: a reader that has read up to `seq` holds what the oracle held there.
    pub(in crate::world) fn check_agreement(&mut self, n: usize, seq: u64) {
        if self.violation.is_some() {
            return;
        }
        let Some(engine) = self.nodes[n].engine() else { return };
        let r = engine.reader();
        if let Some(why) = self.differs_from_oracle(r, seq) {
            self.fail(Category::Safety, "2 agreement", format!("e{} at log {seq} {why}", n + 1));
            return;
        }
        self.checks.agreement_checks += 1;
        // Sampled: the whole object map, when this reader is at the end of the log.
        if self.checks.agreement_checks.is_multiple_of(512)
            && seq == self.oracle.position()
            && r.objects() != self.oracle.reader.objects()
        {
            self.fail(Category::Safety, "2 agreement", format!("e{} at log {seq}: object states differ", n + 1));
        }
    }

    /// Whether reader `r`, having read up to `seq`, holds what the oracle held there: its position, stale count
    /// (so every verdict), epoch, object count, the view of the object the entry at `seq` is about, and the
    /// applied record of that entry's command id. `None` when it does.
    pub(in crate::world) fn differs_from_oracle(&self, r: &LogReader, seq: u64) -> Option<String> {
        let s = self.oracle.summary(seq)?;
        let entry = self.log.entry(seq);
        let view = match entry {
            LogEntry::Event(ev) if s.view != 0 => r.object(&ev.object).map_or(0, view_hash),
            _ => 0,
        };
        // The applied-command record (at most once across owners rests on it): a command id the oracle saw
        // applied at or before this position is applied here with the same outcome, a later one not yet.
        let applied = match entry {
            LogEntry::Event(Event { command_id: Some(id), .. }) => {
                let want = self
                    .oracle
                    .reader
                    .applied(id)
                    .filter(|o| matches!(o, Outcome::Applied { seq: at, .. } if *at <= seq));
                r.applied(id) == want
            }
            _ => true,
        };
        if self.is_policy_entry(seq) {
            if let Some(why) = self.policy_differs(r, seq) {
                return Some(why);
            }
        }
        let mine = (r.position(), r.counters.stale_epoch_total, r.epoch(), r.objects().len(), view, applied);
        let want = (seq, s.stale_total, s.epoch, s.objects, s.view, true);
        (mine != want)
            .then(|| format!("holds (position, stale, epoch, objects, view, applied ok)={mine:?}, the oracle {want:?}"))
    }

    /// Invariant 3 as a command reaches engine `n`: never with hop > 1; one with hop 0 is one it may forward.
    pub(in crate::world) fn one_hop_in(&mut self, n: usize, cmd: &Command) -> bool {
        if cmd.hop > 1 {
            self.fail(Category::Safety, "3 one hop", format!("command {} arrived with hop {}", cmd.id, cmd.hop));
            return false;
        }
        if cmd.hop == 0 {
            if let Some(role) = self.nodes[n].role.as_mut() {
                role.hop0.insert(cmd.id.clone());
            }
        }
        true
    }

    /// Invariant 3 at a `Forward` of engine `n`: hop 1, of a command that reached it with hop 0.
    pub(in crate::world) fn one_hop_out(&mut self, n: usize, cmd: &Command) -> bool {
        if cmd.hop != 1 {
            self.fail(Category::Safety, "3 one hop", format!("e{} forwards {} with hop {}", n + 1, cmd.id, cmd.hop));
            return false;
        }
        if !self.nodes[n].role.as_ref().is_some_and(|r| r.hop0.contains(&cmd.id)) {
            let msg = format!("e{} forwards {} which reached it only as a forward (a second hop)", n + 1, cmd.id);
            self.fail(Category::Safety, "3 one hop", msg);
            return false;
        }
        true
    }

    /// Invariant 4 at engine `n`'s reply to caller `to`: a caller it was handed and has not answered, and an
    /// `Applied` outcome exactly what the log says. Returns the caller, taken off the waiting list.
    pub(in crate::world) fn answered(&mut self, n: usize, to: u64, outcome: &Outcome) -> Option<PendingReply> {
        let Some(p) = self.net.replies.remove(&to) else {
            let msg =
                format!("e{} answered caller {to} which it was not asked by or answered before: {outcome:?}", n + 1);
            self.fail(Category::Safety, "4 accounting", msg);
            return None;
        };
        if p.node != n || p.inc != self.nodes[n].inc {
            self.fail(Category::Safety, "4 accounting", format!("e{} answered a caller of e{}", n + 1, p.node + 1));
            return None;
        }
        if let Outcome::Applied { command_id, .. } = outcome {
            if *command_id != p.cmd_id || self.oracle.reader.applied(command_id) != Some(outcome) {
                let msg = format!(
                    "e{} reports {outcome:?} for {} but the log says {:?}",
                    n + 1,
                    p.cmd_id,
                    self.oracle.reader.applied(command_id)
                );
                self.fail(Category::Safety, "4 applied means accepted", msg);
                return None;
            }
        }
        Some(p)
    }

    /// How long after the heal every object must have a live owner (invariant 7): ttl + ttl/3 + the
    /// expiry lag, plus what it takes to notice and agree: a boot, a proposal whose answer was lost before the
    /// heal retried after core's propose timeout, three trips through the store (the change reaching a
    /// watcher, the proposal, the record reaching every reader), twice the clock skew, and the drain of an
    /// engine that was leaving at the heal.
    pub fn ownership_budget_ms(&self) -> u64 {
        let p = &self.params;
        p.takeover_window_ms()
            + p.boot_delay_max_ms
            + ms(self.core.propose_timeout)
            + 3 * p.max_hop_ms()
            + 2 * p.clock_skew_max_ms
            + self.checks.drain_allowance_ms
    }

    fn converged(&self) -> Result<(), String> {
        let serving: Vec<MemberRef> = self.nodes.iter().filter(|n| n.is_serving()).map(|n| n.member()).collect();
        if self.nodes.iter().any(|n| n.is_running() && !n.booted) {
            return Err("an engine is still booting".into());
        }
        if self.nodes.iter().any(|n| n.is_leaving()) {
            return Err("an engine is still leaving".into());
        }
        let Some(rec) = self.oracle.reader.fence().current() else { return Err("no epoch record".into()) };
        if rec.members != serving {
            return Err(format!("epoch {} lists {:?}, the running engines are {serving:?}", rec.epoch, rec.members));
        }
        for n in self.nodes.iter().filter(|n| n.is_serving()) {
            let e = n.engine().expect("serving engine");
            if (e.epoch() != rec.epoch || !e.is_ready()) && !self.jumping(n) {
                let hole = e.needs_snapshot().map(|h| format!(", at a hole up to {h}")).unwrap_or_default();
                return Err(format!("{} is at epoch {} of {}{hole}", n.id, e.epoch(), rec.epoch));
            }
        }
        for id in self.oracle.reader.objects().keys() {
            let owner = hrw_owner(&rec.members, id.as_str());
            let Some(owner) = owner else { return Err(format!("{id} has no owner")) };
            let slot = self.slot_of[&owner.id];
            let e = self.nodes[slot].engine().expect("members are serving");
            if !e.owns(id) && !self.jumping(&self.nodes[slot]) {
                return Err(format!("{id}: its owner {owner} does not hold it"));
            }
        }
        Ok(())
    }

    /// How long an engine may wait at a hole in the log (purged events it had not read) for a snapshot past it:
    /// a load out before the heal timing out, the next heartbeat's ask, two loads (two hops and the store's
    /// time each) and the clock skew.
    pub fn jump_budget_ms(&self) -> u64 {
        let p = &self.params;
        p.append_timeout_ms
            + p.ttl_ms / 3
            + 2 * (2 * p.max_hop_ms() + p.snapshots.store_ms_max)
            + 2 * p.clock_skew_max_ms
    }

    /// Whether engine process `n` waits at a hole for less than the jump budget: not ready, and not late.
    fn jumping(&self, n: &Node) -> bool {
        let since = n.role.as_ref().and_then(|r| r.hole_since);
        since.is_some_and(|t| self.now.saturating_since(t).as_millis() as u64 <= self.jump_budget_ms())
    }

    pub(in crate::world) fn liveness_check(&mut self) {
        let healed = self.checks.healed.expect("liveness after heal");
        let budget = self.ownership_budget_ms();
        if self.checks.converged.is_some() && self.oracle.reader.epoch() != self.checks.converged_epoch {
            // A member joined or left after convergence (a restart scheduled before the heal): the
            // budgets start again from the new convergence.
            self.checks.converged = None;
            self.checks.end = None;
        }
        match (self.converged(), self.checks.converged) {
            (Ok(()), None) => {
                self.checks.converged = Some(self.now);
                self.checks.converged_epoch = self.oracle.reader.epoch();
                self.stats.converged_after_ms = self.now.0 - healed.0;
                self.stats.converge_budget_ms = budget;
                self.checks.checked_since.clear();
                self.tr(|| "converged: every object has a live owner".into());
            }
            (Ok(()), Some(_)) => {}
            (Err(why), _) => {
                self.checks.converged = None;
                self.checks.end = None;
                if self.now.saturating_since(healed).as_millis() as u64 > budget {
                    let msg = format!(
                        "{}ms after the heal (budget {budget}ms): {why}",
                        self.now.saturating_since(healed).as_millis()
                    );
                    self.fail(Category::Liveness, "7 failover", msg);
                    return;
                }
            }
        }
        if self.checks.converged.is_some() && (self.checks.end.is_none() || self.checks.touched_since_end) {
            // Every object must now be checked by its owner within its budget.
            let last = self.oracle.reader.objects().keys().filter_map(|id| self.check_deadline(id)).max();
            self.checks.end = Some(last.unwrap_or(self.now));
            self.checks.touched_since_end = false;
        }
        if self.checks.end.is_some_and(|e| self.now >= e) {
            // The sinks too must have stored every accepted event (invariant 10) before the run ends.
            if !self.sinks_settled() {
                self.after(TICK, Ev::LivenessCheck);
                return;
            }
            if !self.checks.engines_done {
                self.final_checks();
                self.checks.engines_done = true;
            }
            // Then invariant 9, once the notifiers have delivered what the log holds by now.
            if self.violation.is_some() || self.notifiers_done() {
                // Invariant 11 over the longest tail: the older stored snapshot read to the end of the log.
                self.final_snapshot_checks();
                self.phase = Phase::Done;
                return;
            }
        }
        // Converged: look again less often (a check costs O(objects)); losing it again is still seen.
        let tick = if self.checks.converged.is_some() { 10 * TICK } else { TICK };
        let tick = match self.checks.end {
            Some(e) if !self.checks.engines_done => tick.min(e.0.saturating_sub(self.now.0).max(1)),
            _ => tick,
        };
        self.after(tick, Ev::LivenessCheck);
    }

    /// An object's owner must have checked it again within max(takeover window, its interval) + twice its
    /// timeout + core's check grace + the check linger + two hops + 1 s after convergence: a check lost just
    /// before the heal keeps the object busy for its timeout + grace, the next slot follows within
    /// max(window, interval), leaves within the linger, and its result comes within the timeout.
    /// A command that changes the object after convergence (one still in flight at the heal) restarts its
    /// budget. Paused objects have none.
    fn check_deadline(&self, id: &ObjectId) -> Option<Time> {
        let view = self.oracle.reader.object(id).filter(|v| !v.paused)?;
        let p = &self.params;
        let budget = p.takeover_window_ms().max(view.def.interval_ms)
            + 2 * view.def.timeout_ms
            + ms(self.core.check_grace)
            + ms(p.check_batching.linger)
            + 2 * p.max_hop_ms()
            + 1_000
            + 2 * p.clock_skew_max_ms;
        let start = self.checks.converged?.max(self.checks.touched.get(id).copied().unwrap_or(Time::ZERO));
        Some(start + Duration::from_millis(budget))
    }

    fn final_checks(&mut self) {
        let Some(since) = self.checks.converged else { return };
        let rec = self.oracle.reader.fence().current().cloned().expect("converged means an epoch");
        let objects: Vec<ObjectId> = self.oracle.reader.objects().keys().cloned().collect();
        for id in objects {
            let Some(deadline) = self.check_deadline(&id) else { continue };
            let owner = hrw_owner(&rec.members, id.as_str()).cloned().expect("converged");
            let slot = self.slot_of[&owner.id];
            match self.checks.checked_since.get(&(id.clone(), slot, owner.incarnation)) {
                Some(&t) if t <= deadline => {
                    // How much of its budget the object's first check used, for reports.
                    let budget = deadline.0 - since.0;
                    let used = (t.0.saturating_sub(since.0) * 100).checked_div(budget).unwrap_or(0);
                    self.stats.check_budget_used_pct = self.stats.check_budget_used_pct.max(used);
                }
                other => {
                    let msg = format!(
                        "{id} not checked by its owner {owner} by {deadline} (converged at {since}): first result since {other:?}, last dispatch {:?}",
                        self.last_dispatched(&id)
                    );
                    self.fail(Category::Liveness, "7 failover", msg);
                    return;
                }
            }
        }
        // Every command handed to a running engine got its answer: within the engine's reply timeout, a
        // forward's, 2 s and two hops.
        let p = &self.params;
        let bound =
            Duration::from_millis(ms(self.core.reply_timeout) + p.forward_timeout_ms + 2_000 + 2 * p.max_hop_ms());
        let stuck =
            self.net.replies.values().find(|p| self.alive(p.node, p.inc) && self.now.saturating_since(p.at) > bound);
        if let Some(p) = stuck.cloned() {
            let msg = format!("e{} never answered command {} it got at {}", p.node + 1, p.cmd_id, p.at);
            self.fail(Category::Liveness, "4 accounting", msg);
        }
    }
}
