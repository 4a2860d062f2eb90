//! Writes through ingress, as a `-target ui` makes them and as the NATS server delivers them.
//!
//! **The ui.** Each write (`Via::Ingress`, `Via::Ui`) is driven by core's `IngressWrite`, as the shell drives it:
//! attempts go out with a claim asked (unless the seed turns claims off), the first straight to the owner the
//! ui's (possibly stale) view names for `Via::Ui`, every other through ingress; what comes back on an attempt's
//! reply subject (a claim, a decline, the outcome, "no responders") is handed in; its one outcome is the client's.
//!
//! **The queue group.** The server hands each attempt to one member of `jaque-engines`, at random. A member is an
//! engine process whose shell has joined (after each step it is in the group exactly while its core
//! `takes_ingress`; a leaving engine in some seeds stays until it exits) and that the server has not dropped: a
//! member that stopped answering (paused, or cut off from NATS either way) is dropped `server_drop_ms` after it
//! went quiet, as a server drops a client whose pings go unanswered, and is back once it answers again (the
//! client reconnects and subscribes again). Until then it is handed its share and holds it (a paused process) or
//! loses it (a cut one). A crashed process is out at once (its connection closed).
//!
//! **Invariant 12** is checked of every write as it ends by `checks/write_liveness.rs`; that every claim and decline
//! is for a caller that asked for one and is waiting, a claim at most once and before the outcome, a decline as
//! its one answer, is invariant 4's accounting with claims, checked here as an engine answers.

use super::net::Waiter;
use super::{Category, Ev, Sim, Via};
use crate::params::{stream, Stream};
use jaque_core::ui::{submit_to, Act, Heard, IngressWrite, Submit, SubmitTimeouts};
use jaque_core::{Command, Outcome, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// An event of a write in flight.
#[derive(Clone, Debug)]
pub(super) enum WriteEv {
    /// The write's timer: its claim or answer deadline.
    Timer { sub: usize, deadline: Time },
    /// Something came back on the reply subject of one of its attempts.
    Heard { sub: usize, heard: Heard },
}

impl WriteEv {
    pub fn code(&self) -> u64 {
        match self {
            WriteEv::Timer { .. } => 1,
            WriteEv::Heard { .. } => 2,
        }
    }
}

/// One write of the ui, from its first attempt to its outcome.
struct Write {
    w: IngressWrite,
    cmd: Command,
    /// Attempt 1's target with `Via::Ui`: the owner the ui's view names.
    owner: Option<usize>,
    armed: Option<Time>,
}

pub(super) struct Ingress {
    /// The queue group's picks.
    rng: ChaCha8Rng,
    writes: BTreeMap<usize, Write>,
    pub stats: IngressStats,
}

#[derive(Clone, Debug, Default)]
pub struct IngressStats {
    pub writes: u64,
    pub attempts: u64,
    pub resent_unclaimed: u64,
    pub resent_declined: u64,
    /// Attempts the server handed to a member that had stopped answering.
    pub to_dark_members: u64,
    pub claims: u64,
    pub declines: u64,
    /// Writes that ended with no engine's claim (every attempt unclaimed or declined, or nobody listening).
    pub unclaimed: u64,
    /// The longest write, first attempt to outcome.
    pub longest_ms: u64,
}

impl Ingress {
    pub fn new(seed: u64) -> Ingress {
        Ingress { rng: stream(seed, Stream::Ingress, 0), writes: BTreeMap::new(), stats: IngressStats::default() }
    }
}

impl Sim {
    pub fn ingress_stats(&self) -> IngressStats {
        self.ingress.stats.clone()
    }

    /// The longest a write through ingress may take in this world, first attempt to outcome (invariant 12).
    pub fn ingress_bound(&self) -> Duration {
        self.submit_timeouts().bound()
    }

    /// The ui's timeouts in this world: the seed's claim timeout, re-submitted for up to 7 s, the outcome
    /// awaited as long as the engines may take (their reply timeout, a forward's, 2 s).
    pub(super) fn submit_timeouts(&self) -> SubmitTimeouts {
        SubmitTimeouts {
            claim: Duration::from_millis(self.params.ingress.claim_timeout_ms),
            claiming: SubmitTimeouts::SHIPPED.claiming,
            answer: Duration::from_millis(self.client_timeout_ms()),
        }
    }

    /// A write of the ui: `Via::Ingress`, or `Via::Ui` (first to the owner its view names, if it names one).
    pub(super) fn start_write(&mut self, sub: usize, cmd: Command) {
        let owner = match self.subs[sub].via {
            Via::Ui => {
                let epoch = self.oracle.reader.epoch();
                let stale = epoch > 1 && self.work.ui.random_bool(self.params.ui_view_stale);
                let view = self.oracle.reader.fence().ownership(if stale { epoch - 1 } else { epoch });
                match submit_to(view, &cmd.object) {
                    Submit::Owner(m) => self.slot_of.get(&m.id).copied(),
                    Submit::Ingress => None,
                }
            }
            _ => None,
        };
        self.ingress.stats.writes += 1;
        let w = IngressWrite::new(self.now, self.submit_timeouts(), owner.is_some());
        self.ingress.writes.insert(sub, Write { w, cmd, owner, armed: None });
        self.drive_write(sub);
    }

    pub(super) fn write_event(&mut self, ev: WriteEv) {
        let sub = match &ev {
            WriteEv::Timer { sub, .. } | WriteEv::Heard { sub, .. } => *sub,
        };
        match ev {
            WriteEv::Timer { sub, deadline } => {
                let Some(write) = self.ingress.writes.get_mut(&sub) else { return };
                if write.armed != Some(deadline) {
                    return;
                }
                write.armed = None;
                write.w.handle_timeout(self.now);
            }
            WriteEv::Heard { sub, heard } => {
                let Some(write) = self.ingress.writes.get_mut(&sub) else { return };
                write.w.handle(self.now, heard);
            }
        }
        self.drive_write(sub);
    }

    /// Carries out what the write asks for, and re-arms its timer.
    fn drive_write(&mut self, sub: usize) {
        while let Some(act) = self.ingress.writes.get_mut(&sub).and_then(|w| w.w.poll_act()) {
            match act {
                Act::Send { attempt } => self.send_attempt(sub, attempt),
                Act::Done(outcome) => {
                    let write = self.ingress.writes.remove(&sub).expect("a write in flight");
                    self.write_done(sub, &write, outcome);
                    return;
                }
            }
        }
        let Some(write) = self.ingress.writes.get_mut(&sub) else { return };
        let t = write.w.poll_timeout();
        if t != write.armed {
            write.armed = t;
            if let Some(deadline) = t {
                self.push(deadline, Ev::Write(WriteEv::Timer { sub, deadline }));
            }
        }
    }

    fn send_attempt(&mut self, sub: usize, attempt: u32) {
        self.ingress.stats.attempts += 1;
        let write = &self.ingress.writes[&sub];
        let claim = self.params.ingress.claim_timeout_ms > 0;
        let cmd = write.cmd.clone();
        let target = match write.owner {
            Some(t) if write.w.goes_to_owner(attempt) => self.nodes[t].is_running().then_some(t),
            _ => self.pick_member(),
        };
        let Some(t) = target else {
            self.after(1, Ev::Write(WriteEv::Heard { sub, heard: Heard::NoResponders { attempt } }));
            return;
        };
        if self.nodes[t].dark_since.is_some() {
            self.ingress.stats.to_dark_members += 1;
        }
        self.subs[sub].engine = Some(t);
        let reply = self.net.reply_id();
        self.request(t, reply, Waiter::Client { sub, attempt, claim }, cmd);
    }

    /// The member of the ingress queue group the server hands a request to, if there is one.
    fn pick_member(&mut self) -> Option<usize> {
        let members: Vec<usize> = (0..self.nodes.len()).filter(|&n| self.in_group(n)).collect();
        (!members.is_empty()).then(|| members[self.ingress.rng.random_range(0..members.len())])
    }

    /// Whether the server holds engine `n`'s ingress subscription now.
    pub(super) fn in_group(&self, n: usize) -> bool {
        let node = &self.nodes[n];
        let dropped = node
            .dark_since
            .is_some_and(|d| self.now.saturating_since(d) >= Duration::from_millis(self.params.ingress.server_drop_ms));
        node.role.as_ref().is_some_and(|r| r.in_group) && !dropped
    }

    /// After a step of engine `n`: its shell joins or leaves the queue group as its core says (a leave or join
    /// reaches the server only if the process can send), and whether it is fit is noted for invariant 12.
    pub(super) fn ingress_after_step(&mut self, n: usize) {
        let now = self.nodes[n].local(self.now);
        let can_send = self.nodes[n].can_send();
        let keep_while_leaving = self.params.ingress_while_leaving;
        let Some(role) = self.nodes[n].role.as_mut() else { return };
        let takes = role.engine.takes_ingress(now);
        let stays = keep_while_leaving && role.engine.is_leaving() && role.in_group;
        if takes != role.in_group && can_send && !stays {
            role.in_group = takes;
        }
        self.note_fitness(n);
    }

    /// Engine `n` stopped answering the server (paused, or cut off), or answers again: when it went quiet.
    pub(super) fn note_dark(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        let dark = node.is_running() && (node.is_paused() || !node.can_send() || !node.can_recv());
        node.dark_since = if dark { node.dark_since.or(Some(self.now)) } else { None };
        self.note_fitness(n);
    }

    /// Engine `n` took attempt `attempt` of write `sub` (`Claimed`) or declined it: the word travels back to
    /// the ui. Checks it was asked for and is in order.
    pub(super) fn claim_answer(&mut self, n: usize, reply: u64, declined: Option<&'static str>) {
        let by = self.nodes[n].id.clone();
        let Some(p) = self.net.replies.get_mut(&reply) else {
            let msg = format!("e{} claimed or declined caller {reply}, which waits for nothing from it", n + 1);
            return self.fail(Category::Safety, "4 accounting", msg);
        };
        let Waiter::Client { sub, attempt, claim: true } = p.waiter else {
            let msg = format!("e{} claimed or declined caller {reply}, which asked for no claim", n + 1);
            return self.fail(Category::Safety, "4 accounting", msg);
        };
        if p.claimed {
            let msg = format!("e{} claimed or declined caller {reply} after claiming it", n + 1);
            return self.fail(Category::Safety, "4 accounting", msg);
        }
        let heard = match declined {
            None => {
                p.claimed = true;
                self.ingress.stats.claims += 1;
                Heard::Claimed { attempt, by }
            }
            Some(reason) => {
                // The decline is its one answer.
                self.net.replies.remove(&reply);
                self.ingress.stats.declines += 1;
                Heard::Declined { attempt, by, reason: reason.into() }
            }
        };
        self.write_heard(n, sub, heard);
    }

    /// What engine `n` sends back on an attempt's reply subject reaches the ui after a hop.
    pub(super) fn write_heard(&mut self, n: usize, sub: usize, heard: Heard) {
        if self.nodes[n].can_send() {
            let d = self.delay(n);
            self.after(d, Ev::Write(WriteEv::Heard { sub, heard }));
        }
    }

    /// The write's one outcome goes to its client, once invariant 12 is checked of it.
    fn write_done(&mut self, sub: usize, write: &Write, outcome: Outcome) {
        let at = self.subs[sub].at;
        let took = self.now.saturating_since(at);
        let s = &mut self.ingress.stats;
        s.longest_ms = s.longest_ms.max(took.as_millis() as u64);
        s.resent_unclaimed += u64::from(write.w.resent_unclaimed);
        s.resent_declined += u64::from(write.w.resent_declined);
        if !self.check_write_liveness(sub, &write.w, &write.cmd.id, &outcome) {
            return;
        }
        self.client_outcome(sub, outcome);
    }
}
