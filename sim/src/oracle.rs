//! The oracle: an independent reader of the whole log, fed every entry the moment it lands. It holds the
//! invariants that are about the log itself (`docs/design.md` §4: 1 single writer, 5 epochs, 6 stable ownership,
//! 8 no false fencing, and "no command applied twice" from 4) and remembers, for every position, a summary
//! that any engine's reader at that position must match (invariant 2).

use crate::alerts::AlertCheck;
use jaque_core::hrw;
use jaque_core::log::ObjectView;
use jaque_core::log::{Effect, LogReader, Read, StaleReason, Verdict};
use jaque_core::policy::{Notify, Policy};
use jaque_core::{CommandId, EpochRecord, EventBody, LogEntry, MemberRef, ObjectId, Outcome};
use std::collections::BTreeMap;

/// What every reader must hold after reading up to one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub stale_total: u64,
    pub epoch: u64,
    pub objects: usize,
    /// The view of the object the entry at this position is about (0 for epoch records or a deleted object).
    pub view: u64,
    /// The notification policy after this position (`policy_hash`).
    pub policy: u64,
}

/// A hash of a policy's canonical JSON: what every reader must hold at a position (invariant 15).
pub fn policy_hash(p: &Policy) -> u64 {
    hrw::key(&serde_json::to_string(p).expect("a policy serializes"))
}

/// A broken invariant found in the log.
#[derive(Clone, Debug)]
pub struct LogViolation {
    pub invariant: &'static str,
    pub message: String,
}

#[derive(Default)]
pub struct Oracle {
    pub reader: LogReader,
    summaries: Vec<Summary>,
    applied: BTreeMap<CommandId, u64>,
    /// Stale events by reason kind, for reports.
    pub stale_not_owner: u64,
    /// Per position: an event the fence accepted (the sinks' store is checked against it, invariant 10).
    accepted: Vec<bool>,
    /// Invariant 14, the alert rules.
    pub alerts: AlertCheck,
    /// Invariant 15's pairing, restated here: per object in a problem episode (cluster format 4), who its problem
    /// transitions said they went to, together. Its recovery must go to all of them.
    episode_sent: BTreeMap<ObjectId, Notify>,
    /// Recoveries held to it, and held problems released, for reports.
    pub resolves_checked: u64,
    pub releases: u64,
}

fn v(invariant: &'static str, message: String) -> Result<(), LogViolation> {
    Err(LogViolation { invariant, message })
}

/// HRW owner computed here from the published definition, not through `hrw::Ownership`.
pub fn hrw_owner<'a>(members: &'a [MemberRef], object: &str) -> Option<&'a MemberRef> {
    let ok = hrw::key(object);
    members.iter().max_by(|a, b| {
        let sa = hrw::score(hrw::key(a.id.as_str()), ok);
        let sb = hrw::score(hrw::key(b.id.as_str()), ok);
        sa.cmp(&sb).then_with(|| a.id.as_str().as_bytes().cmp(b.id.as_str().as_bytes()))
    })
}

/// A cheap fingerprint of an object view (readers must agree on it field by field).
pub fn view_hash(view: &ObjectView) -> u64 {
    use crate::params::mix;
    let mut h = mix(view.key);
    for x in [
        view.state as u64,
        view.paused as u64,
        view.acked as u64,
        view.anchor.0,
        view.check_requested.map_or(u64::MAX, |t| t.0),
        view.last_seq,
        view.last_transition.as_ref().map_or(0, |t| t.seq),
        view.def.interval_ms,
        view.def.timeout_ms,
        // The labels (`jaque_core::labels`), as their canonical JSON.
        hrw::key(&serde_json::to_string(&view.def.labels).expect("labels serialize")),
        // The alert state (`jaque_core::alert`): soft state and attempt, flapping, the changes it counts.
        view.soft().map_or(0, |s| 1 + s.state as u64 * 1000 + u64::from(s.attempt)),
        view.flapping() as u64,
        view.changes().len() as u64,
        view.changes().last().map_or(0, |t| t.0),
        // The problem episode and the parents (cluster format 4).
        view.episode().unwrap_or(0),
        view.def.parents.iter().fold(0, |h, p| mix(h ^ hrw::key(p.as_str()))),
    ] {
        h = mix(h ^ x);
    }
    h
}

impl Oracle {
    pub fn new() -> Oracle {
        Oracle::default()
    }

    pub fn position(&self) -> u64 {
        self.reader.position()
    }

    /// The cluster's active format as of the last record read.
    pub fn active_format(&self) -> u32 {
        self.reader.fence().active_format()
    }

    /// Whether the entry at `seq` is an event the fence accepted (its verdict, checked against the definition).
    pub fn is_accepted(&self, seq: u64) -> bool {
        seq.checked_sub(1).and_then(|i| self.accepted.get(usize::try_from(i).ok()?)).copied().unwrap_or(false)
    }

    /// The summary every reader must hold after reading position `seq`.
    pub fn summary(&self, seq: u64) -> Option<&Summary> {
        self.summaries.get(usize::try_from(seq.checked_sub(1)?).ok()?)
    }

    /// Reads the entry at `seq` (the next position). `live_at(rev)` is the store's live set hash at a
    /// membership revision, to check that every epoch record describes a real state of the bucket.
    pub fn read(
        &mut self,
        seq: u64,
        entry: &LogEntry,
        live_at: impl Fn(u64) -> Option<u64>,
    ) -> Result<(), LogViolation> {
        if let LogEntry::Epoch(rec) = entry {
            self.check_epoch(rec, &live_at)?;
        }
        let (needs, active) = (entry.needs(), self.reader.fence().active_format());
        if needs > active {
            return v(
                "13 mixed versions",
                format!("entry at {seq} needs cluster format {needs}, and the record in force allows {active}"),
            );
        }
        let before = match entry {
            LogEntry::Event(ev) => self.reader.objects().get(&ev.object).cloned(),
            LogEntry::Epoch(_) => None,
        };
        let read = self.reader.read(seq, entry);
        let mut view = 0;
        let mut accepted = false;
        match (&read, entry) {
            (Read::Duplicate, _) => return v("log", format!("position {seq} read twice by the oracle")),
            (Read::Gap { expected, .. }, _) => {
                return v("log", format!("the oracle found a hole in the log: {expected} missing before {seq}"))
            }
            (Read::Unreadable, _) => unreachable!("the oracle reads entries, never skips one"),
            (Read::TooNew { needs }, _) => {
                unreachable!("the oracle speaks every format: format {needs} at {seq} is not one")
            }
            (Read::EpochRejected(e), _) => {
                return v("5 epochs only grow", format!("epoch record at {seq} rejected: {e:?}"));
            }
            (Read::EpochInstalled, _) => {}
            (Read::Event { verdict, effect }, LogEntry::Event(ev)) => {
                // The fence's definition, computed here: accepted iff the writer (id and incarnation) owned
                // the object under every epoch record from its own epoch to the one in force. An accepted
                // event's writer thus owns the object under the epoch in force (1); a discarded one lost it
                // somewhere since its epoch (8).
                let fence = self.reader.fence();
                let in_force = fence.epoch();
                let owner_under = |e: u64| {
                    let members = &fence.record(e).expect("installed epoch record").members;
                    hrw_owner(members, ev.object.as_str())
                };
                let defined = ev.epoch >= 1
                    && ev.epoch <= in_force
                    && (ev.epoch..=in_force).all(|e| owner_under(e) == Some(&ev.writer));
                if defined != verdict.is_accepted() {
                    let (inv, what) =
                        if defined { ("8 no false fencing", "discarded") } else { ("1 single writer", "accepted") };
                    return v(
                        inv,
                        format!(
                            "event at {seq} on {} by {} (epoch {}, {in_force} in force) {what} ({verdict:?}); the fence's definition says otherwise",
                            ev.object, ev.writer, ev.epoch
                        ),
                    );
                }
                match verdict {
                    Verdict::Accepted => {}
                    Verdict::Stale(StaleReason::NotOwner { .. }) => self.stale_not_owner += 1,
                    Verdict::Stale(reason) => {
                        return v(
                            "8 no false fencing",
                            format!(
                                "event at {seq} on {} by {} stale for a reason no engine may cause: {reason}",
                                ev.object, ev.writer
                            ),
                        );
                    }
                }
                if let (Some(id), Effect::Command(Outcome::Applied { .. })) = (&ev.command_id, effect) {
                    let n = self.applied.entry(id.clone()).or_default();
                    *n += 1;
                    if *n > 1 {
                        return v("4 accounting", format!("command {id} applied twice (again at {seq})"));
                    }
                }
                if verdict.is_accepted() {
                    let (after, active) = (self.reader.object(&ev.object), self.reader.fence().active_format());
                    if let Err(msg) = self.alerts.check(seq, ev, before.as_deref(), after, effect, active) {
                        return v("14 alert rules", msg);
                    }
                    if *effect == Effect::Transitioned || matches!(ev.body, EventBody::Released { .. }) {
                        if let Err(msg) = self.check_pairing(seq, ev, effect) {
                            return v("15 policy", msg);
                        }
                    }
                }
                view = self.reader.object(&ev.object).map_or(0, view_hash);
                accepted = verdict.is_accepted();
            }
            (Read::Event { .. }, LogEntry::Epoch(_)) => unreachable!("epoch records read as epochs"),
        }
        self.accepted.push(accepted);
        let policy = match entry {
            LogEntry::Event(ev) if ev.object.is_policy() => {
                // Whatever got in, the policy the fold holds keeps every rule (invariant 15).
                if let Err(e) = self.reader.policy().validate() {
                    return v("15 policy", format!("the policy after {seq} breaks a rule: {e}"));
                }
                policy_hash(self.reader.policy())
            }
            _ => self.summaries.last().map_or_else(|| policy_hash(&Policy::default()), |s| s.policy),
        };
        self.summaries.push(Summary {
            stale_total: self.reader.counters.stale_epoch_total,
            epoch: self.reader.epoch(),
            objects: self.reader.objects().len(),
            view,
            policy,
        });
        Ok(())
    }

    /// Invariant 15's pairing, for a hard transition that took effect at `seq`: a problem that says it is
    /// suppressed goes to nobody; a recovery goes to every receiver (and the implicit route, if any) that a
    /// problem of its episode went to, whatever the policy says by then. Transitions that say nothing of where
    /// they go (before cluster format 4) are sent as before policies: to every endpoint.
    fn check_pairing(&mut self, seq: u64, ev: &jaque_core::Event, effect: &Effect) -> Result<(), String> {
        // A held problem released: only in an open episode whose problems reached nobody so far, never
        // suppressed itself; who it reaches joins the episode's.
        if let EventBody::Released { notify, .. } = &ev.body {
            if *effect != Effect::Folded {
                return Ok(());
            }
            let sent = self.episode_sent.entry(ev.object.clone()).or_insert_with(Notify::implicit_only);
            if notify.suppressed.is_some() || notify.is_nobody() {
                return Err(format!("the release at {seq} on {} goes to nobody: {notify:?}", ev.object));
            }
            *sent = sent.union(notify);
            self.releases += 1;
            return Ok(());
        }
        let EventBody::Transition { from, to, notify, .. } = &ev.body else { return Ok(()) };
        let said = notify.as_deref().cloned().unwrap_or_else(Notify::implicit_only);
        if said.suppressed.is_some() && !said.is_nobody() {
            return Err(format!("the problem at {seq} on {} is suppressed and still goes to {said:?}", ev.object));
        }
        match (from.is_problem(), to.is_problem()) {
            (false, true) => {
                self.episode_sent.insert(ev.object.clone(), said);
            }
            (true, true) => {
                let sent = self.episode_sent.entry(ev.object.clone()).or_insert_with(Notify::implicit_only);
                *sent = sent.union(&said);
            }
            (true, false) => {
                // An episode the oracle saw open before format 4 went everywhere, as its recovery must.
                let sent = self.episode_sent.remove(&ev.object).unwrap_or_else(Notify::implicit_only);
                self.resolves_checked += 1;
                let missing: Vec<_> = sent.receivers.iter().filter(|r| !said.receivers.contains(r)).collect();
                if !missing.is_empty() || sent.implicit && !said.implicit {
                    return Err(format!(
                        "the recovery at {seq} on {} goes to {said:?}, and its episode's problems went to {sent:?}: \
                         missing {missing:?}{}",
                        ev.object,
                        if sent.implicit && !said.implicit { " and the implicit route" } else { "" }
                    ));
                }
            }
            (false, false) => {}
        }
        Ok(())
    }

    fn check_epoch(&self, rec: &EpochRecord, live_at: &impl Fn(u64) -> Option<u64>) -> Result<(), LogViolation> {
        if rec.epoch != self.reader.epoch() + 1 {
            return v("5 epochs only grow", format!("epoch {} follows {}", rec.epoch, self.reader.epoch()));
        }
        if live_at(rec.members_rev) != Some(members_hash(&rec.members)) {
            return v(
                "5 epochs only grow",
                format!(
                    "epoch {} lists {:?}, which is not the bucket's live set at revision {}",
                    rec.epoch, rec.members, rec.members_rev
                ),
            );
        }
        let Some(prev) = self.reader.fence().current() else { return Ok(()) };
        // A record of the same members is one that raises the cluster's active format (13), and only that.
        let raises = rec.format > self.reader.fence().active_format();
        if prev.members == rec.members && !raises {
            return v(
                "5 epochs only grow",
                format!("epoch {} repeats the member list of epoch {}", rec.epoch, prev.epoch),
            );
        }
        if rec.members_rev < prev.members_rev || rec.members_rev == prev.members_rev && prev.members != rec.members {
            return v(
                "5 epochs only grow",
                format!(
                    "epoch {} is at revision {} not after epoch {}'s {}",
                    rec.epoch, rec.members_rev, prev.epoch, prev.members_rev
                ),
            );
        }
        // 6: an object moves only if its old owner left or its new owner joined.
        for id in self.reader.objects().keys() {
            let (a, b) = (hrw_owner(&prev.members, id.as_str()), hrw_owner(&rec.members, id.as_str()));
            if a != b {
                let left = a.is_none_or(|a| !rec.members.contains(a));
                let joined = b.is_none_or(|b| !prev.members.contains(b));
                if !left && !joined {
                    return v(
                        "6 stable ownership",
                        format!(
                            "{id} moves from {a:?} to {b:?} at epoch {} though both are members before and after",
                            rec.epoch
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// An order-independent hash of a member list (id and incarnation).
pub fn members_hash(members: &[MemberRef]) -> u64 {
    members.iter().fold(0u64, |h, m| h.wrapping_add(member_hash(m)))
}

pub fn member_hash(m: &MemberRef) -> u64 {
    crate::params::mix(hrw::key(m.id.as_str()) ^ crate::params::mix(m.incarnation))
}
