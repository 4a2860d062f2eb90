//! The log: one total order of epoch records and events. `ProposeEpoch` is a compare-and-set append (it wins
//! only if the last epoch record is at `after_seq`) whose answer may be lost; `Append` is unconditional and
//! may end in `AppendFailed` after the append timeout although it landed (a lost ack), or land after it (a
//! late publish); with the store unreachable it always fails. Every entry is read by the oracle the moment it
//! lands, then reaches every booted reader in order, each after its own lag, sometimes twice.
//!
//! A purge (`Output::Purge`) removes the events below a position from what processes read — live delivery
//! skips them as a JetStream consumer does, replays do not return them — while the simulator keeps the whole
//! log for the oracle and the checkers. Epoch records are never purged.

use super::{Category, Ev, Phase, Sim};
use jaque_core::{Bucket, EpochRecord, Event, Input, IoError, LogEntry};
use rand::Rng;
use std::collections::BTreeMap;

pub(super) struct Log {
    entries: Vec<LogEntry>,
    /// The position of the last epoch record, which a proposal's `after_seq` must name to win.
    last_epoch_seq: Option<u64>,
    /// Scenarios: appends held in an engine's client (a publish stuck on its way), landed when released.
    held: BTreeMap<usize, Vec<Event>>,
    /// Events below this position are purged (1: none is).
    purged_below: u64,
}

impl Log {
    pub fn new() -> Log {
        Log { entries: Vec::new(), last_epoch_seq: None, held: BTreeMap::new(), purged_below: 1 }
    }

    /// Whether processes can still read the entry at `seq` (not a purged event).
    pub fn present(&self, seq: u64) -> bool {
        seq >= self.purged_below || matches!(self.entry(seq), LogEntry::Epoch(_))
    }

    /// Whether the entry at `seq` is an event that was purged.
    pub fn purged(&self, seq: u64) -> bool {
        !self.present(seq)
    }

    /// Events below this position are purged.
    pub fn purged_below(&self) -> u64 {
        self.purged_below
    }

    /// Purges the events below `below` (a purge below an earlier one removes nothing more).
    pub fn purge(&mut self, below: u64) {
        self.purged_below = self.purged_below.max(below.min(self.len() + 1));
    }

    /// The entries processes can read at positions `from..=to`.
    pub fn read_range(&self, from: u64, to: u64) -> Vec<(u64, LogEntry)> {
        (from.max(1)..=to.min(self.len())).filter(|s| self.present(*s)).map(|s| (s, self.entry(s).clone())).collect()
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    /// The last position (0: empty).
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The entry at position `seq` (from 1).
    pub fn entry(&self, seq: u64) -> &LogEntry {
        &self.entries[(seq - 1) as usize]
    }
}

impl Sim {
    pub(super) fn append(&mut self, entry: LogEntry) {
        let seq = self.log.len() + 1;
        self.h(seq);
        if self.trace.is_some() {
            let line = format!("log {seq}: {}", brief_entry(&entry));
            self.tr(|| line);
        }
        let store = &self.store;
        if let Err(v) = self.oracle.read(seq, &entry, |rev| store.live_hash(Bucket::Engine, rev)) {
            self.fail(Category::Safety, v.invariant, v.message);
            return;
        }
        self.stats.log_entries += 1;
        match &entry {
            LogEntry::Epoch(_) => {
                self.stats.epochs += 1;
                self.log.last_epoch_seq = Some(seq);
                let format = self.oracle.active_format();
                if format > self.stats.versions.format {
                    self.stats.versions.format = format;
                    self.stats.versions.raised_at_ms = self.now.0;
                }
            }
            LogEntry::Event(ev) => {
                if ev.command_id.is_some() && self.oracle.reader.object(&ev.object).is_some_and(|v| v.last_seq == seq) {
                    self.checks.touched(ev.object.clone(), self.now);
                }
                self.fault_between_attempts(seq, ev);
            }
        }
        self.log.entries.push(entry);
        self.landed(seq);
    }

    pub(super) fn send_proposal(&mut self, n: usize, record: EpochRecord, after_seq: Option<u64>) {
        if self.nodes[n].can_send() {
            let d = self.delay(n);
            let inc = self.nodes[n].inc;
            self.after(d, Ev::ProposeLand { node: n, inc, record, after_seq });
        }
    }

    /// The compare-and-set: the record is appended only if no epoch record landed since `after_seq`.
    pub(super) fn propose_land(&mut self, n: usize, inc: u64, record: EpochRecord, after_seq: Option<u64>) {
        let won = self.log.last_epoch_seq == after_seq;
        self.tr(|| format!("store: proposal of epoch {} from e{} after {after_seq:?}: won={won}", record.epoch, n + 1));
        let epoch = record.epoch;
        if won {
            self.append(LogEntry::Epoch(record));
        }
        let lost = self.chance(self.params.propose_answer_loss);
        if !lost && self.nodes[n].can_recv() {
            let d = self.delay(n);
            self.after(d, Ev::ProposeAnswer { node: n, inc, epoch, won });
        }
    }

    pub(super) fn send_append(&mut self, n: usize, event: Event) {
        if let Some(held) = self.log.held.get_mut(&n) {
            held.push(event);
            return;
        }
        let inc = self.nodes[n].inc;
        let timeout = self.params.append_timeout_ms;
        if !self.nodes[n].can_send() {
            self.after(timeout, Ev::AppendFailed { node: n, inc, event });
            return;
        }
        let d = self.delay(n);
        let roll: f64 = if self.phase == Phase::Safety { self.net.rng.random() } else { 1.0 };
        if roll < self.params.append_ack_loss {
            self.after(d, Ev::AppendLand { event: event.clone() });
            self.after(timeout, Ev::AppendFailed { node: n, inc, event });
        } else if roll < self.params.append_ack_loss + self.params.append_late {
            let late = timeout + self.net.rng.random_range(0..=2_000);
            self.after(late, Ev::AppendLand { event: event.clone() });
            self.after(timeout, Ev::AppendFailed { node: n, inc, event });
        } else {
            self.after(d, Ev::AppendLand { event });
        }
    }

    pub(super) fn append_failed(&mut self, n: usize, inc: u64, event: Event) {
        if self.alive(n, inc) {
            self.step(n, Some(Input::AppendFailed { event, error: IoError::Timeout }));
        }
    }

    /// Scenarios: hold node `n`'s appends on their way to the log (they land, in order, when released).
    pub fn hold_appends(&mut self, n: usize, held: bool) {
        if held {
            self.log.held.entry(n).or_default();
        } else {
            for event in self.log.held.remove(&n).unwrap_or_default() {
                self.after(1, Ev::AppendLand { event });
            }
        }
    }

    /// Scenarios: an entry written to the log by someone other than an engine (a forged or corrupt writer).
    pub fn inject(&mut self, entry: LogEntry) {
        self.append(entry);
    }
}

pub(super) fn brief_event(ev: &Event) -> String {
    let body = match &ev.body {
        jaque_core::EventBody::Transition { from, to, .. } => format!("transition {from:?}->{to:?}"),
        jaque_core::EventBody::Put { .. } => "put".into(),
        other => format!("{other:?}"),
    };
    let cmd = ev.command_id.as_ref().map(|c| format!(" cmd {c}")).unwrap_or_default();
    format!("{} {body} by {} epoch {}{cmd}", ev.object, ev.writer, ev.epoch)
}

pub(super) fn brief_entry(e: &LogEntry) -> String {
    match e {
        LogEntry::Epoch(r) => {
            let m: Vec<String> = r.members.iter().map(|m| m.to_string()).collect();
            format!("epoch {} [{}] rev {}", r.epoch, m.join(","), r.members_rev)
        }
        LogEntry::Event(ev) => brief_event(ev),
    }
}
