//! The checker of invariant 12 (write liveness: while an engine is live and caught up, every write through
//! ingress gets a definite outcome within the bound, whatever a paused, partitioned or crashed member of the
//! queue group does; `sim/README.md`, "Invariants and where they are checked").
//!
//! Every write through ingress ends within the bound of its timeouts (claim window + the answer timeout); a
//! write that ends with no engine having claimed it had no engine that stayed *fit* (running, answering, not
//! leaving, taking claims, in the group) from its first attempt to its end. After every engine step and every
//! change of its links, whether it is fit is noted. (That every claim and decline is for a caller that asked for
//! one and waits, a claim at most once, a decline its one answer, is invariant 4's accounting, checked where the
//! engine answers: `ingress.rs`.)

use crate::world::{Category, Sim};
use jaque_core::ui::IngressWrite;
use jaque_core::{CommandId, MemberId, Outcome};

impl Sim {
    /// Whether engine `n` would claim every attempt handed to it now, promptly: running, answering, not leaving,
    /// taking claims and in the group. Kept as the time since when it has been so (`None`: it is not).
    pub(in crate::world) fn note_fitness(&mut self, n: usize) {
        let now = self.now;
        let local = self.nodes[n].local(now);
        let node = &self.nodes[n];
        let fit = node.dark_since.is_none()
            && node.clog == 0
            && node.role.as_ref().is_some_and(|r| r.in_group && r.engine.takes_ingress(local));
        if let Some(role) = self.nodes[n].role.as_mut() {
            role.fit_since = if fit { role.fit_since.or(Some(now)) } else { None };
        }
    }

    /// Invariant 12 as write `sub` (of command `cmd`) ends with `outcome`: within its bound, and unclaimed only if
    /// no engine stayed fit throughout. False on a violation.
    pub(in crate::world) fn check_write_liveness(
        &mut self,
        sub: usize,
        w: &IngressWrite,
        cmd: &CommandId,
        outcome: &Outcome,
    ) -> bool {
        let at = self.subs[sub].at;
        let took = self.now.saturating_since(at);
        let bound = w.timeouts().bound();
        if took > bound {
            let msg = format!("write {} ({}) took {took:?}, over its bound of {bound:?}", sub, cmd);
            self.fail(Category::Liveness, "12 write liveness", msg);
            return false;
        }
        if w.claimed_by().is_none() && self.params.ingress.claim_timeout_ms > 0 && !w.answered() {
            self.ingress.stats.unclaimed += 1;
            // Nobody claimed it: no engine may have stayed fit from its first attempt to now.
            let fit: Vec<MemberId> = self
                .nodes
                .iter()
                .filter(|n| n.role.as_ref().and_then(|r| r.fit_since).is_some_and(|t| t < at))
                .map(|n| n.id.clone())
                .collect();
            if !fit.is_empty() {
                let msg = format!(
                    "write {} ({}) ended unclaimed after {} attempts ({outcome:?}) while {fit:?} took claims throughout",
                    sub,
                    cmd,
                    w.attempts()
                );
                self.fail(Category::Liveness, "12 write liveness", msg);
                return false;
            }
        }
        true
    }
}
