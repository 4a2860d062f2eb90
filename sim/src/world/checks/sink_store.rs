//! The checker of invariant 10 (sink: every accepted event in the store exactly once; `sim/README.md`,
//! "Invariants and where they are checked"), against the log read independently through the oracle's verdicts.
//!
//! At every commit: no fenced or altered row (each event row is exactly the row `sink::event_row` makes of an
//! accepted event, or that row degraded when the store refuses it whole; no row shows a probe's credential) and,
//! per object, a prefix of its accepted events (skipped rows and purged events aside). After every sink step:
//! a row the sink counted as skipped is the row of the refused one-row transaction it answered. At the end of
//! the liveness phase, within the sinks' budget: every accepted event exactly once, each object's row at its
//! last accepted event, except exactly the rows the sinks counted as skipped and the events purged before any
//! sink stored them whose loss a sink counted for their object (issue 11).

use crate::params::SECRET;
use crate::world::sink::config;
use crate::world::sink::sql::degraded_event;
use crate::world::snapshots::LostBy;
use crate::world::{ms, Category, Sim};
use jaque_core::role::{After, Owned};
use jaque_core::sink::{self, Batch};
use jaque_core::{LogEntry, ObjectId, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What the checker keeps: the rows the sinks counted as skipped, each object's accepted events and how many
/// of the first the store holds, and the wait for the sinks at the end of the run.
#[derive(Default)]
pub(in crate::world) struct SinkStore {
    /// Rows the sinks counted as skipped: event rows by position, objects rows by (object, last_seq).
    skipped_events: BTreeSet<u64>,
    skipped_objects: BTreeSet<(ObjectId, u64)>,
    /// Per object, its accepted events' positions, and how many of the first are stored or skipped.
    accepted: BTreeMap<ObjectId, Vec<u64>>,
    prefix: BTreeMap<ObjectId, usize>,
    /// Added to the settling budget when a sink was leaving at the heal.
    leave_allowance_ms: u64,
    /// The liveness phase's end waits for the sinks: the log position they must have stored, and by when.
    settle: Option<(u64, Time)>,
}

impl Sim {
    /// Entry `seq` landed: an accepted event is one the store must hold (per object, in order).
    pub(in crate::world) fn note_storable(&mut self, seq: u64) {
        if let LogEntry::Event(e) = self.log.entry(seq) {
            if self.oracle.is_accepted(seq) {
                self.sink_store.accepted.entry(e.object.clone()).or_default().push(seq);
            }
        }
    }

    /// The heal found a sink leaving: its leave's deadline is added to the settling budget.
    pub(in crate::world) fn note_sink_leaving_at_heal(&mut self, leave_timeout_ms: u64) {
        self.sink_store.leave_allowance_ms = leave_timeout_ms + 1_000;
    }

    /// Sink `s` counted `skipped` rows as skipped in a step that answered `refused` (the transaction the store
    /// refused, if the step's input was that answer): a sink skips a row only answering a refused transaction
    /// of that one row (and its object's), so the skip is that row's. False on a violation.
    pub(in crate::world) fn note_skips(&mut self, s: usize, refused: Option<Batch>, skipped: u64) -> bool {
        if skipped == 0 {
            return true;
        }
        match refused.filter(|b| skipped == 1 && b.events.len() <= 1 && b.rows() <= 2) {
            Some(b) => {
                if let Err(msg) = self.check_skip_degraded(s, &b) {
                    self.fail(Category::Safety, "10 sink (degraded)", msg);
                    return false;
                }
                if let Some(r) = b.events.first() {
                    self.sink_store.skipped_events.insert(r.seq);
                } else if let Some(o) = b.objects.first() {
                    self.sink_store.skipped_objects.insert((o.object.clone(), o.last_seq));
                }
                self.sinks.counters.skips += 1;
                true
            }
            None => {
                let msg = format!("s{} counted {skipped} skipped rows in a step that no refused row explains", s + 1);
                self.fail(Category::Safety, "10 sink", msg);
                false
            }
        }
    }

    /// A row a sink skipped (the one the refused transaction `b` answers) must be one the store refuses even
    /// degraded: core narrows a refused row down to one row per transaction, an event row apart from its
    /// object's row, and offers it once more degraded (text emptied) before it skips it. An event row's
    /// degraded form is made from the log's event (as `sink::event_row` makes it), an objects row's from the
    /// row refused; a skip of a row the store would have taken degraded is a row lost for nothing.
    fn check_skip_degraded(&self, s: usize, b: &Batch) -> Result<(), String> {
        let sql = &self.sinks.sql;
        if let Some(r) = b.events.first() {
            let degraded = match (r.seq >= 1 && r.seq <= self.log.len()).then(|| self.log.entry(r.seq)) {
                Some(LogEntry::Event(event)) => {
                    let owned = Owned { seq: r.seq, event: event.clone(), after: After::Replayed };
                    degraded_event(sink::event_row(&owned, self.params.sink.max_output))
                }
                _ => degraded_event(r.clone()),
            };
            if !sql.refuses_event(&degraded) {
                let with =
                    b.objects.first().map(|o| format!(" (tried with {}'s objects row at {})", o.object, o.last_seq));
                return Err(format!(
                    "s{} skipped the event row at {} ({}){}, which the store takes degraded: {degraded:?}",
                    s + 1,
                    r.seq,
                    r.object,
                    with.unwrap_or_default()
                ));
            }
        } else if let Some(o) = b.objects.first() {
            let mut degraded = o.clone();
            degraded.definition = None;
            if !sql.refuses_object(&degraded) {
                return Err(format!(
                    "s{} skipped {}'s objects row at {}, which the store takes degraded: {degraded:?}",
                    s + 1,
                    o.object,
                    o.last_seq
                ));
            }
        }
        Ok(())
    }

    /// Skipped event rows the store would have taken degraded: skipped because their objects row was refused.
    pub(in crate::world) fn collateral_skips(&self) -> u64 {
        let max_output = self.params.sink.max_output;
        self.sink_store
            .skipped_events
            .iter()
            .filter(|&&seq| match self.log.entry(seq) {
                LogEntry::Event(event) => {
                    let owned = Owned { seq, event: event.clone(), after: After::Replayed };
                    !self.sinks.sql.refuses_event(&degraded_event(sink::event_row(&owned, max_output)))
                }
                LogEntry::Epoch(_) => false,
            })
            .count() as u64
    }

    /// Invariant 10 at a commit: every event row is an accepted event of the log, as the sink makes its row
    /// (or that row degraded, if the store refuses it whole); every objects row names an accepted event of its
    /// object; per object, the store holds a prefix of its accepted events (counted skips aside).
    pub(in crate::world) fn check_commit(&mut self, b: &Batch) {
        let shown =
            b.events.iter().flat_map(|r| [&r.output, &r.definition]).chain(b.objects.iter().map(|r| &r.definition));
        if let Some(leak) = shown.flatten().find(|text| text.contains(SECRET)) {
            let msg = format!("{} stored a probe's credential: {leak}", b.progress.sink);
            return self.fail(Category::Safety, "10 sink", msg);
        }
        let max_output = self.params.sink.max_output;
        let mut touched = Vec::new();
        for r in &b.events {
            let event = match (r.seq >= 1 && r.seq <= self.log.len()).then(|| self.log.entry(r.seq)) {
                Some(LogEntry::Event(e)) => e.clone(),
                _ => {
                    let msg = format!("{} stored a row at {} which is no event of the log", b.progress.sink, r.seq);
                    return self.fail(Category::Safety, "10 sink", msg);
                }
            };
            if !self.oracle.is_accepted(r.seq) {
                let msg = format!("{} stored the fenced event at {} ({})", b.progress.sink, r.seq, event.object);
                return self.fail(Category::Safety, "10 sink", msg);
            }
            let want = sink::event_row(&Owned { seq: r.seq, event, after: After::Replayed }, max_output);
            let degraded = degraded_event(want.clone());
            if *r != want && !(*r == degraded && self.sinks.sql.refuses_event(&want)) {
                let msg =
                    format!("{} stored at {} the row {r:?}; the log's event makes {want:?}", b.progress.sink, r.seq);
                return self.fail(Category::Safety, "10 sink", msg);
            }
            touched.push(r.object.clone());
        }
        for o in &b.objects {
            let ok = self.oracle.is_accepted(o.last_seq)
                && matches!(self.log.entry(o.last_seq), LogEntry::Event(e) if e.object == o.object);
            if !ok {
                let msg = format!(
                    "{} wrote {}'s objects row at {}: no accepted event of it",
                    b.progress.sink, o.object, o.last_seq
                );
                return self.fail(Category::Safety, "10 sink", msg);
            }
        }
        touched.sort();
        touched.dedup();
        for o in touched {
            if let Err(msg) = self.check_prefix(&o) {
                return self.fail(Category::Safety, "10 sink (prefix)", msg);
            }
        }
    }

    /// Per object, the store holds its accepted events up to some position and none after a gap (a counted
    /// skip is no gap, nor is an event purged before any sink stored it: whether its loss was counted is
    /// checked at the end).
    fn check_prefix(&mut self, o: &ObjectId) -> Result<(), String> {
        let (ck, sql, log) = (&mut self.sink_store, &self.sinks.sql, &self.log);
        let Some(seqs) = ck.accepted.get(o) else { return Ok(()) };
        let ptr = ck.prefix.entry(o.clone()).or_insert(0);
        while *ptr < seqs.len() {
            let seq = seqs[*ptr];
            if sql.copies(seq) == 0 && !ck.skipped_events.contains(&seq) && !log.purged(seq) {
                break;
            }
            *ptr += 1;
        }
        let covered = if *ptr == 0 { 0 } else { seqs[*ptr - 1] };
        match sql.last_stored(o) {
            Some(max) if max > covered => {
                Err(format!("the store holds {o}'s event at {max} but not its accepted event at {}", seqs[*ptr]))
            }
            _ => Ok(()),
        }
    }

    /// Invariant 10 over the log up to `upto`: every accepted event there is in the store exactly once unless a
    /// sink counted it skipped or it was purged before any sink stored it and a sink said its object lost
    /// history over a range that holds it (`Sim::lost_to_purge`), no other row is, and each object's row is at least at its last accepted event
    /// up to `upto` (unless a row at least that new was counted skipped); a row at the object's very last event holds what
    /// the log says of the object.
    pub fn check_sink_store_upto(&self, upto: u64) -> Result<(), String> {
        let (ck, sql) = (&self.sink_store, &self.sinks.sql);
        let mut last: BTreeMap<&ObjectId, u64> = BTreeMap::new();
        let mut last_ever: BTreeMap<&ObjectId, u64> = BTreeMap::new();
        for (i, entry) in self.log.entries().iter().enumerate() {
            let seq = i as u64 + 1;
            let LogEntry::Event(e) = entry else { continue };
            if !self.oracle.is_accepted(seq) {
                continue;
            }
            last_ever.insert(&e.object, seq);
            if seq > upto {
                continue;
            }
            last.insert(&e.object, seq);
            match sql.copies(seq) {
                1 => {}
                0 if ck.skipped_events.contains(&seq) => {}
                0 if self.lost_to_purge(LostBy::Sink, seq, &e.object) => {}
                0 if self.log.purged(seq) => {
                    return Err(format!(
                        "the accepted event at {seq} ({}) was purged before any sink stored it, and no sink said {} lost history over it ({:?})",
                        e.object,
                        e.object,
                        self.lost_history(LostBy::Sink, &e.object)
                    ))
                }
                0 => return Err(format!("the accepted event at {seq} ({}) is not in the store", e.object)),
                n => return Err(format!("the accepted event at {seq} ({}) is in the store {n} times", e.object)),
            }
        }
        if let Some(seq) = sql.stored_positions().find(|seq| !self.oracle.is_accepted(*seq)) {
            return Err(format!("the store holds a row at {seq}, which is no accepted event"));
        }
        for (o, l) in last {
            // A counted skip of a row at least this new accounts for it (a resume writes its objects' rows at
            // the resume's end, so the row tried may be newer than `upto`).
            let skipped = ck.skipped_objects.range((o.clone(), l)..=(o.clone(), u64::MAX)).next().is_some();
            let row = match sql.objects.get(o) {
                Some(r) if r.last_seq >= l => r,
                _ if skipped => continue,
                Some(r) => {
                    return Err(format!("{o}'s objects row is at {}, its last accepted event at {l}", r.last_seq));
                }
                None => return Err(format!("{o} has accepted events up to {l} and no objects row")),
            };
            if Some(&row.last_seq) == last_ever.get(o) {
                let want = sink::object_row(o, self.oracle.reader.object(o), row.last_seq);
                let mut degraded = want.clone();
                degraded.definition = None;
                if *row != want && !(*row == degraded && sql.refuses_object(&want)) {
                    return Err(format!("{o}'s objects row is {row:?}; the log says {want:?}"));
                }
            }
        }
        Ok(())
    }

    /// Invariant 10 over the whole log (scenarios).
    pub fn check_sink_store(&self) -> Result<(), String> {
        self.check_sink_store_upto(self.log.len())
    }

    /// How long after the heal the store may take to hold every accepted event up to `upto`: a dead sink's key
    /// expiring, a boot, the longest retry backoffs (the role's 30 s, the sink's 10 s), a request out at the
    /// heal timing out, a leave's deadline, and one round trip per row and per replay read of every resume.
    pub(in crate::world) fn sink_budget_ms(&self, upto: u64) -> u64 {
        let p = &self.params;
        let k = &p.sink;
        let cfg = config(p, self.sinks.procs[0].member());
        let round = 2 * (p.net_delay_max_ms + 1) + k.commit_ms_max + 1;
        let resumes = 2 * self.sinks.len() as u64 + 4;
        let rounds = 2 * upto + 4 * p.objects as u64 + 20 + resumes * (upto / k.replay_chunk.max(1) + 2);
        p.takeover_window_ms()
            + p.boot_delay_max_ms
            + ms(cfg.role.retry_max)
            + ms(cfg.retry_max)
            + 2 * k.timeout_ms
            + self.sink_store.leave_allowance_ms
            + 4 * p.max_hop_ms()
            + 2 * p.clock_skew_max_ms
            + 2_000
            + rounds * round
    }

    /// The liveness phase ends only once the store holds every accepted event up to where the log stood when
    /// the engines were done (invariant 10); past the sinks' budget that is a liveness failure.
    pub(in crate::world) fn sinks_settled(&mut self) -> bool {
        if self.sinks.len() == 0 || self.violation.is_some() {
            return true;
        }
        let healed = self.checks.healed.expect("settling after the heal");
        let (upto, deadline) = match self.sink_store.settle {
            Some(s) => s,
            None => {
                let upto = self.log.len();
                let at = (healed + Duration::from_millis(self.sink_budget_ms(upto))).max(self.now);
                self.sink_store.settle = Some((upto, at));
                (upto, at)
            }
        };
        match self.check_sink_store_upto(upto) {
            Ok(()) => {
                self.sinks.counters.settled_after_ms = self.now.0 - healed.0;
                self.tr(|| format!("sinks settled: the store holds every accepted event up to {upto}"));
                true
            }
            Err(why) => {
                if self.now > deadline {
                    let msg = format!(
                        "{}ms after the heal (budget until {deadline}), up to log {upto}: {why}",
                        self.now.saturating_since(healed).as_millis()
                    );
                    self.fail(Category::Liveness, "10 sink", msg);
                }
                false
            }
        }
    }

    /// Objects with accepted events in the log.
    pub(in crate::world) fn sink_store_objects(&self) -> impl Iterator<Item = &ObjectId> {
        self.sink_store.accepted.keys()
    }

    /// An object's accepted events' positions, in log order.
    pub(in crate::world) fn sink_store_accepted(&self, o: &ObjectId) -> Option<&[u64]> {
        self.sink_store.accepted.get(o).map(|v| v.as_slice())
    }

    /// The rows the sinks counted as skipped: event rows by position, objects rows by (object, last_seq).
    pub fn sink_skipped(&self) -> (&BTreeSet<u64>, &BTreeSet<(ObjectId, u64)>) {
        (&self.sink_store.skipped_events, &self.sink_store.skipped_objects)
    }
}
