//! Invariant 15, the notification policy: every reader (engines, sinks, notifiers, and readers started from
//! snapshots) holds, after each policy change it reads, the policy the oracle held there; and the oracle's own
//! policy keeps every rule whatever got into the log (`Oracle::read`).

use super::super::lifecycle::{Machine, Role};
use super::super::Sim;
use crate::oracle::policy_hash;
use crate::world::Category;
use jaque_core::{LogEntry, LogReader};

impl Sim {
    /// Whether the entry at `seq` is a policy change (an event on the policy's key).
    pub(in crate::world) fn is_policy_entry(&self, seq: u64) -> bool {
        matches!(self.log.entry(seq), LogEntry::Event(e) if e.object.is_policy())
    }

    /// Why reader `r`, having read up to `seq`, holds another policy than the oracle held there; `None` when it
    /// holds the same.
    pub(in crate::world) fn policy_differs(&self, r: &LogReader, seq: u64) -> Option<String> {
        let want = self.oracle.summary(seq)?.policy;
        (policy_hash(r.policy()) != want).then(|| {
            format!("holds the policy {:?}, and the oracle another at {seq}", serde_json::to_string(&**r.policy()))
        })
    }

    /// Invariant 15 as process `slot` of a role has read the entry at `seq`: if it was a policy change, the
    /// process's reader holds the oracle's policy.
    pub(in crate::world) fn check_policy<R: Role>(&mut self, slot: usize, seq: u64) {
        if self.violation.is_some() || !self.is_policy_entry(seq) {
            return;
        }
        let Some(role) = R::slots(self)[slot].role.as_ref() else { return };
        let r = role.core().reader();
        // A reader that stopped short (an older build blocked before this entry) read nothing here.
        if r.position() != seq {
            return;
        }
        let why = self.policy_differs(r, seq);
        self.stats.policy.checked += 1;
        if let Some(why) = why {
            self.fail(Category::Safety, "15 policy", format!("{} {why}", R::who(slot)));
        }
    }
}
