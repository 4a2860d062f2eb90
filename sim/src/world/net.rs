//! The network as NATS gives it to the shell: every message's latency (clogged processes hold messages for
//! seconds), message-level loss in the safety phase, the store's links to each process (cut in, out or both)
//! and the links between two processes (cut one way or both). On top of it, request/reply on
//! `jaque.cmd.<id>`: a `Forward` to an id with no running process gets `no responders` at once, an
//! unreachable or paused target `timeout` after the forward timeout, and every `Forward` gets exactly one
//! `ForwardResult`. The ingress queue group and the ui's writes are `ingress.rs`'s.

use super::engine::EngineRole;
use super::process::Peer;
use super::{Ev, Phase, Sim, Via};
use crate::params::{stream, Stream};
use jaque_core::ui::Heard;
use jaque_core::{Command, CommandId, ForwardId, Input, IoError, MemberRef, Outcome, ReplyTo, Time};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// The error of a request to a subject nobody is subscribed to (NATS says "no responders").
pub(super) fn no_responders() -> IoError {
    IoError::unavailable("no responders")
}

/// Who waits for the answer to a command handed to an engine.
#[derive(Clone, Debug)]
pub(super) enum Waiter {
    /// Attempt `attempt` of submission `sub` of a client (0: a caller in the engine's process), which asked for
    /// a claim or not.
    Client { sub: usize, attempt: u32, claim: bool },
    /// Forward `fwd` of another engine.
    Forward(usize),
}

/// A caller an engine was handed and has not answered yet.
#[derive(Clone, Debug)]
pub(super) struct PendingReply {
    pub node: usize,
    pub inc: u64,
    pub waiter: Waiter,
    pub at: Time,
    pub cmd_id: CommandId,
    /// The engine claimed it (a caller that asked for a claim).
    pub claimed: bool,
}

#[derive(Clone, Debug)]
struct Fwd {
    origin: usize,
    inc: u64,
    id: ForwardId,
    done: bool,
}

pub(super) struct Net {
    pub rng: ChaCha8Rng,
    next_reply: u64,
    /// Callers handed to engines and not answered yet, by reply id.
    pub replies: BTreeMap<u64, PendingReply>,
    forwards: Vec<Fwd>,
}

impl Net {
    pub fn new(seed: u64) -> Net {
        Net { rng: stream(seed, Stream::Network, 0), next_reply: 1, replies: BTreeMap::new(), forwards: Vec::new() }
    }

    /// A fresh reply subject.
    pub fn reply_id(&mut self) -> u64 {
        let reply = self.next_reply;
        self.next_reply += 1;
        reply
    }

    /// Incarnation `inc` of `n` is gone: whoever waited on it learns by timeout, nothing will answer.
    pub fn forget(&mut self, n: usize, inc: u64) {
        self.replies.retain(|_, p| !(p.node == n && p.inc == inc));
        for f in &mut self.forwards {
            if f.origin == n && f.inc == inc {
                f.done = true;
            }
        }
    }
}

impl Sim {
    /// Whether a request from `a` reaches `b` through NATS.
    pub(super) fn link(&self, a: usize, b: usize) -> bool {
        self.nodes[a].can_send() && self.nodes[b].can_recv() && self.nodes[a].reaches(Peer::Engine(b))
    }

    /// A message-level fault with probability `p`; only in the safety phase.
    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.phase == Phase::Safety && p > 0.0 && self.net.rng.random_bool(p)
    }

    /// One message's latency to or from engine `n` (a clogged one holds messages for a while).
    pub(super) fn delay(&mut self, n: usize) -> u64 {
        self.hop::<EngineRole>(n)
    }

    /// A command on its way to engine `t` from outside the engines (a client, the ui, ingress).
    pub(super) fn request(&mut self, t: usize, reply: u64, waiter: Waiter, cmd: Command) {
        if self.nodes[t].can_recv() {
            let d = self.delay(t);
            let inc = self.nodes[t].inc;
            self.after(d, Ev::CommandArrive { node: t, inc, reply, waiter, cmd });
        }
    }

    pub(super) fn command_arrive(&mut self, n: usize, inc: u64, reply: u64, waiter: Waiter, cmd: Command) {
        if !self.alive(n, inc) || !self.one_hop_in(n, &cmd) {
            return;
        }
        let cmd_id = cmd.id.clone();
        let claim = matches!(waiter, Waiter::Client { claim: true, .. });
        self.net.replies.insert(reply, PendingReply { node: n, inc, waiter, at: self.now, cmd_id, claimed: false });
        let reply = ReplyTo(reply);
        self.step(n, Some(if claim { Input::Claim { reply, cmd } } else { Input::Command { reply, cmd } }));
    }

    pub(super) fn forward(&mut self, n: usize, id: ForwardId, to: MemberRef, mut cmd: Command) {
        self.stats.forwards += 1;
        if !self.one_hop_out(n, &cmd) {
            return;
        }
        let fwd = self.net.forwards.len();
        self.net.forwards.push(Fwd { origin: n, inc: self.nodes[n].inc, id, done: false });
        self.after(self.params.forward_timeout_ms, Ev::ForwardTimeout { fwd });
        if !self.nodes[n].can_send() {
            return;
        }
        let Some(&t) = self.slot_of.get(&to.id) else {
            self.after(1, Ev::ForwardAnswer { fwd, result: Err(no_responders()) });
            return;
        };
        if !self.nodes[t].is_running() {
            let d = 1 + self.delay(n);
            self.after(d, Ev::ForwardAnswer { fwd, result: Err(no_responders()) });
            return;
        }
        if self.link(n, t) {
            let reply = self.net.reply_id();
            let d = self.delay(n) + self.delay(t);
            let inc = self.nodes[t].inc;
            cmd.hop = 1;
            self.after(d, Ev::CommandArrive { node: t, inc, reply, waiter: Waiter::Forward(fwd), cmd });
        }
    }

    /// The one result of forward `fwd` reaches its engine (it waits in its buffers while paused).
    pub(super) fn forward_result(&mut self, fwd: usize, result: Result<Outcome, IoError>) {
        let f = self.net.forwards[fwd].clone();
        if f.done {
            return;
        }
        if !self.alive(f.origin, f.inc) {
            self.net.forwards[fwd].done = true;
            return;
        }
        if self.nodes[f.origin].is_paused() {
            let ev = match result {
                Err(IoError::Timeout) => Ev::ForwardTimeout { fwd },
                result => Ev::ForwardAnswer { fwd, result },
            };
            self.nodes[f.origin].hold(ev);
            return;
        }
        self.net.forwards[fwd].done = true;
        self.step(f.origin, Some(Input::ForwardResult { id: f.id, result }));
    }

    /// Engine `n` answers caller `to`; the answer travels back to whoever waits.
    pub(super) fn reply(&mut self, n: usize, to: u64, outcome: Outcome) {
        let Some(p) = self.answered(n, to, &outcome) else { return };
        match p.waiter {
            Waiter::Client { sub, attempt, .. } => match self.subs[sub].via {
                Via::Engine(_) => self.client_outcome(sub, outcome),
                Via::Ingress | Via::Ui => self.write_heard(n, sub, Heard::Answered { attempt, outcome }),
            },
            Waiter::Forward(fwd) => {
                let origin = self.net.forwards[fwd].origin;
                if self.link(n, origin) {
                    let d = self.delay(n) + self.delay(origin);
                    self.after(d, Ev::ForwardAnswer { fwd, result: Ok(outcome) });
                }
            }
        }
    }
}
