//! Hand-written cases in a small readable API, in the style of TigerBeetle's `replica_test`: build a quiet
//! cluster (no random faults, no random workload), do one thing to it, and assert what must follow. Every
//! invariant of the swarm is checked along the way too: `assert_ok` fails with the trace if one broke.
//!
//! ```no_run
//! use jaque_sim::scenario::Scenario;
//! let mut s = Scenario::cluster(1, 3, 3, 20);
//! let e3 = 2;
//! let moved = s.owned_by(e3);
//! s.leave(e3);
//! s.run_for(1_000);
//! assert!(moved.iter().all(|o| s.owner(o) != Some(e3)));
//! s.assert_ok();
//! ```

use crate::oracle::hrw_owner;
use crate::params::Params;
use crate::world::{Sim, Via, Who};
use jaque_core::{Command, CommandId, CommandKind, Engine, ObjectId, Outcome};

pub struct Scenario {
    pub sim: Sim,
    next_cmd: u64,
}

impl Scenario {
    /// `slots` engine slots of which the first `started` run; `objects` objects put through ingress, each
    /// checked once. Returns once the cluster is steady.
    pub fn cluster(seed: u64, slots: usize, started: usize, objects: usize) -> Scenario {
        Scenario::with(Params { objects, ..Params::scripted(seed, slots) }, started)
    }

    /// Like `cluster`, with hand-tuned parameters (`params.objects` objects are put).
    pub fn with(params: Params, started: usize) -> Scenario {
        let objects = params.objects;
        let mut s = Scenario { sim: Sim::new(params).with_trace(400), next_cmd: 0 };
        for n in 0..started {
            s.sim.start(Who::Engine(n));
        }
        let steady = s.sim.run_until_cond(30_000, |sim| {
            let members = sim.oracle.reader.fence().current().map_or(0, |r| r.members.len());
            members == started && (0..started).all(|n| sim.engine(n).is_ready())
        });
        s.check(steady, "the cluster did not form");
        for i in 0..objects {
            let def = s.sim.object_def(i);
            let id = s.object(i);
            let sub = s.submit(Via::Ingress, &id, CommandKind::Put { def });
            let applied = s.sim.run_until_cond(10_000, |sim| sim.subs[sub].outcome.is_some());
            let outcome = s.sim.subs[sub].outcome.clone();
            s.check(applied && matches!(outcome, Some(Outcome::Applied { .. })), &format!("put of {id}: {outcome:?}"));
        }
        let ids = s.sim.object_ids();
        let checked = s.sim.run_until_cond(30_000, |sim| ids.iter().all(|id| sim.last_checked(id).is_some()));
        s.check(checked, "not every object was checked");
        s.run_for(1_000);
        s
    }

    pub fn object(&self, i: usize) -> ObjectId {
        ObjectId::new(format!("o{i}")).expect("valid object id")
    }

    pub fn engine(&self, n: usize) -> &Engine {
        self.sim.engine(n)
    }

    pub fn epoch(&self) -> u64 {
        self.sim.oracle.reader.epoch()
    }

    /// Events discarded by the fence, as the oracle counts them.
    pub fn stale_total(&self) -> u64 {
        self.sim.oracle.reader.counters.stale_epoch_total
    }

    /// The slot of the object's owner under the epoch in force in the log.
    pub fn owner(&self, id: &ObjectId) -> Option<usize> {
        let rec = self.sim.oracle.reader.fence().current()?;
        let owner = hrw_owner(&rec.members, id.as_str())?;
        Some(owner.id.as_str()[1..].parse::<usize>().expect("member ids are e<n>") - 1)
    }

    /// The objects slot `n` owns under the epoch in force.
    pub fn owned_by(&self, n: usize) -> Vec<ObjectId> {
        self.sim.object_ids().into_iter().filter(|id| self.owner(id) == Some(n)).collect()
    }

    pub fn run_for(&mut self, ms: u64) {
        self.sim.run_for(ms);
        self.assert_ok();
    }

    /// Runs until `done` holds, at most `max_ms`; fails the test with the trace if it never does.
    pub fn run_until(&mut self, max_ms: u64, what: &str, done: impl FnMut(&Sim) -> bool) {
        let ok = self.sim.run_until_cond(max_ms, done);
        self.check(ok, &format!("not within {max_ms}ms: {what}"));
    }

    pub fn start(&mut self, n: usize) {
        self.sim.start(Who::Engine(n));
    }

    pub fn pause(&mut self, n: usize, ms: u64) {
        self.sim.pause(Who::Engine(n), ms);
    }

    pub fn leave(&mut self, n: usize) {
        self.sim.leave(Who::Engine(n));
    }

    pub fn crash(&mut self, n: usize) {
        self.sim.crash(Who::Engine(n));
    }

    /// A client submits a command; returns the submission to ask for its outcome.
    pub fn submit(&mut self, via: Via, object: &ObjectId, kind: CommandKind) -> usize {
        self.next_cmd += 1;
        let id = CommandId::new(format!("s{}", self.next_cmd)).expect("valid command id");
        self.sim.submit(Command { id, object: object.clone(), kind, hop: 0 }, via)
    }

    pub fn outcome(&self, sub: usize) -> Option<&Outcome> {
        self.sim.subs[sub].outcome.as_ref()
    }

    /// Every engine that has read as far as the oracle holds the same objects and the same stale count.
    pub fn assert_readers_agree(&self) {
        for (n, node) in self.sim.nodes.iter().enumerate() {
            let Some(e) = node.engine() else { continue };
            let r = e.reader();
            if r.position() == self.sim.oracle.position() {
                self.check(
                    r.objects() == self.sim.oracle.reader.objects(),
                    &format!("e{} object states differ", n + 1),
                );
                self.check(r.counters == self.sim.oracle.reader.counters, &format!("e{} counters differ", n + 1));
            }
        }
    }

    /// No invariant broke so far.
    pub fn assert_ok(&self) {
        if let Some(v) = &self.sim.violation {
            panic!(
                "{:?} violation of {}: {}\n{}",
                v.category,
                v.invariant,
                v.message,
                self.sim.trace_lines().join("\n")
            );
        }
    }

    pub fn check(&self, cond: bool, what: &str) {
        self.assert_ok();
        if !cond {
            panic!("{what}\nlast trace lines:\n{}", self.sim.trace_lines().join("\n"));
        }
    }
}
