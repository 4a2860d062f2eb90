//! The sinks' SQL store (PostgreSQL or SQLite as the shell's statements leave them), and the sinks' requests to it.
//!
//! Tables: `events` (primary key `seq`; an insert that finds its `seq` there does nothing — `ON CONFLICT DO
//! NOTHING`), `objects` (one row per object, upserted only over a row with a lower or equal `last_seq`) and
//! `sink_progress` (one row per sink). A transaction (`Batch`) is atomic: refused as a whole or applied as a
//! whole. A progress query answers each object's highest `seq` in `events`.
//!
//! Faults: the database down for a while (every request answered `Unavailable`), a lost commit answer
//! (committed, answered `Unavailable`), slow commits (past the client's statement timeout some land after the
//! client gave up), a sink cut from it (its requests time out), and data it refuses (`Refused`): a row whose
//! output or definition carries `MARKER`, and, for some log positions, the degraded row the sink offers next
//! (text emptied), which the sink must then skip and count.
//!
//! Every commit that lands is checked against invariant 10 by `checks/sink_store.rs`.

use super::{SinkEv, SinkRole};
use crate::params::{mix, MARKER};
use crate::world::process::Peer;
use crate::world::{Ev, Phase, Sim};
use jaque_core::sink::{self, Batch, EventRow, ObjectRow};
use jaque_core::IoError;
use jaque_core::{hrw, MemberId, ObjectId};
use rand::Rng;
use std::collections::BTreeMap;

/// A request a sink sent: a transaction or a progress query.
#[derive(Clone, Debug)]
pub(in crate::world) enum Req {
    Write(Batch),
    Query { token: u64, objects: Vec<ObjectId> },
}

/// The database's answer to a request.
#[derive(Clone, Debug)]
pub(in crate::world) enum Answer {
    Written(Result<(), IoError>),
    Progress(Result<Vec<(ObjectId, u64)>, IoError>),
}

impl Answer {
    /// The sink's input for this answer to request `req`.
    pub fn input(self, req: &Req) -> sink::Input {
        match (self, req) {
            (Answer::Written(result), Req::Write(b)) => sink::Input::Written { batch: b.id, result },
            (Answer::Progress(result), Req::Query { token, .. }) => sink::Input::Progress { token: *token, result },
            (a, r) => unreachable!("answer {a:?} to request {r:?}"),
        }
    }

    fn failed(req: &Req, e: IoError) -> Answer {
        match req {
            Req::Write(_) => Answer::Written(Err(e)),
            Req::Query { .. } => Answer::Progress(Err(e)),
        }
    }
}

#[derive(Clone, Debug)]
pub(in crate::world) struct Pending {
    pub s: usize,
    pub inc: u64,
    pub req: Req,
    /// It reached the database (or never will), and the sink has had its one answer.
    pub landed: bool,
    pub answered: bool,
    /// A transaction's promise: the objects its progress position covers (`checks/sink_progress.rs`).
    pub promise: Option<Vec<ObjectId>>,
}

#[derive(Clone, Debug, Default)]
pub struct SqlCounters {
    pub transactions: u64,
    /// Event rows ignored because their `seq` was there already.
    pub conflicts: u64,
    pub refused: u64,
    pub lost_answers: u64,
    /// Requests that found the database down.
    pub down: u64,
    /// Commits that landed after their client had given up.
    pub late: u64,
}

pub struct Sql {
    /// Table `events` in insertion order, and per `seq` how many rows hold it (the primary key keeps it at one).
    events: Vec<EventRow>,
    copies: BTreeMap<u64, u32>,
    /// `SELECT max(seq) FROM events GROUP BY object`.
    last_by_object: BTreeMap<ObjectId, u64>,
    pub objects: BTreeMap<ObjectId, ObjectRow>,
    pub progress: BTreeMap<MemberId, u64>,
    pub down: bool,
    /// Scenarios: the next this many commits lose their answer.
    pub lose_answers: u32,
    seed: u64,
    refuse_degraded: f64,
    pub counters: SqlCounters,
}

impl Sql {
    pub fn new(seed: u64, refuse_degraded: f64) -> Sql {
        Sql {
            events: Vec::new(),
            copies: BTreeMap::new(),
            last_by_object: BTreeMap::new(),
            objects: BTreeMap::new(),
            progress: BTreeMap::new(),
            down: false,
            lose_answers: 0,
            seed,
            refuse_degraded,
            counters: SqlCounters::default(),
        }
    }

    pub fn events(&self) -> &[EventRow] {
        &self.events
    }

    /// Rows of table `events` at `seq`.
    pub fn copies(&self, seq: u64) -> u32 {
        self.copies.get(&seq).copied().unwrap_or(0)
    }

    /// The positions table `events` holds, in order.
    pub fn stored_positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.copies.keys().copied()
    }

    /// `SELECT max(seq) FROM events WHERE object = $1`.
    pub fn last_stored(&self, object: &ObjectId) -> Option<u64> {
        self.last_by_object.get(object).copied()
    }

    /// Some positions' rows are refused even degraded (another column the database cannot take).
    fn poisoned(&self, key: u64) -> bool {
        self.refuse_degraded > 0.0 && (mix(self.seed ^ mix(key)) % 1000) < (self.refuse_degraded * 1000.0) as u64
    }

    pub fn refuses_event(&self, r: &EventRow) -> bool {
        let marked = |t: &Option<String>| t.as_deref().is_some_and(|t| t.contains(MARKER));
        let degraded =
            (r.kind == "transition" && r.output.as_deref() == Some("")) || (r.kind == "put" && r.definition.is_none());
        marked(&r.output) || marked(&r.definition) || (degraded && self.poisoned(r.seq))
    }

    pub fn refuses_object(&self, r: &ObjectRow) -> bool {
        let degraded = !r.deleted && r.definition.is_none();
        r.definition.as_deref().is_some_and(|d| d.contains(MARKER))
            || (degraded && self.poisoned(hrw::key(r.object.as_str()) ^ r.last_seq))
    }

    /// One transaction, atomic.
    pub fn commit(&mut self, b: &Batch) -> Result<(), IoError> {
        if self.down {
            self.counters.down += 1;
            return Err(IoError::Unavailable("connection refused".into()));
        }
        if b.events.iter().any(|r| self.refuses_event(r)) || b.objects.iter().any(|r| self.refuses_object(r)) {
            self.counters.refused += 1;
            return Err(IoError::Refused("invalid byte sequence for encoding \"UTF8\"".into()));
        }
        self.counters.transactions += 1;
        for r in &b.events {
            if self.copies.contains_key(&r.seq) {
                self.counters.conflicts += 1;
                continue;
            }
            self.copies.insert(r.seq, 1);
            let last = self.last_by_object.entry(r.object.clone()).or_insert(0);
            *last = (*last).max(r.seq);
            self.events.push(r.clone());
        }
        for o in &b.objects {
            match self.objects.get(&o.object) {
                Some(have) if have.last_seq > o.last_seq => {}
                _ => {
                    self.objects.insert(o.object.clone(), o.clone());
                }
            }
        }
        self.progress.insert(b.progress.sink.clone(), b.progress.position);
        Ok(())
    }

    pub fn last_seqs(&mut self, objects: &[ObjectId]) -> Result<Vec<(ObjectId, u64)>, IoError> {
        if self.down {
            self.counters.down += 1;
            return Err(IoError::Unavailable("connection refused".into()));
        }
        Ok(objects.iter().filter_map(|o| self.last_by_object.get(o).map(|s| (o.clone(), *s))).collect())
    }
}

/// A row as the sink offers it once the store refused it whole: text emptied (`Item::degrade` in core).
pub(in crate::world) fn degraded_event(mut r: EventRow) -> EventRow {
    r.output = r.output.map(|_| String::new());
    r.definition = None;
    r
}

impl Sim {
    /// Sink `s` sends a request to the database: it lands after the network and the commit's own time (slow
    /// ones in the safety phase), unless the sink is cut from it; the client gives up at its statement
    /// timeout, whatever happens to the request.
    pub(in crate::world) fn sql_request(&mut self, s: usize, req: Req, promise: Option<Vec<ObjectId>>) {
        let id = self.sinks.next_req;
        self.sinks.next_req += 1;
        let inc = self.sinks.procs[s].inc;
        let cut = !self.sinks.procs[s].reaches(Peer::Database);
        self.sinks.reqs.insert(id, Pending { s, inc, req, landed: cut, answered: false, promise });
        let (timeout, slow, commit_max) =
            (self.params.sink.timeout_ms, self.params.sink.slow_commit, self.params.sink.commit_ms_max);
        self.after(timeout, Ev::Sink(SinkEv::SqlTimeout { s, inc, req: id }));
        if cut {
            return;
        }
        let slow = self.phase == Phase::Safety && slow > 0.0 && self.sinks.rng.random_bool(slow);
        let work =
            if slow { self.sinks.rng.random_range(1_000..=8_000) } else { self.sinks.rng.random_range(0..=commit_max) };
        let d = self.hop::<SinkRole>(s) + work;
        self.after(d, Ev::Sink(SinkEv::SqlLand { req: id }));
    }

    /// Request `id` reaches the database: a transaction commits (or is refused, or finds it down), a query is
    /// answered; the answer travels back unless the sink is cut from it meanwhile (then its timeout answers).
    pub(in crate::world) fn sql_land(&mut self, id: u64) {
        let Some(p) = self.sinks.reqs.get_mut(&id) else { return };
        p.landed = true;
        let (s, inc, req, answered, promise) = (p.s, p.inc, p.req.clone(), p.answered, p.promise.take());
        if answered {
            self.sinks.sql.counters.late += 1;
        }
        let answer = match &req {
            Req::Write(b) => {
                let result = self.sinks.sql.commit(b);
                if result.is_ok() {
                    self.check_commit(b);
                    if let Some(objects) = promise {
                        self.check_progress(s, b, &objects);
                    }
                }
                let lose = result.is_ok()
                    && (self.sinks.sql.lose_answers > 0
                        || (self.phase == Phase::Safety
                            && self.params.sink.lost_answer > 0.0
                            && self.sinks.rng.random_bool(self.params.sink.lost_answer)));
                if lose {
                    self.sinks.sql.lose_answers = self.sinks.sql.lose_answers.saturating_sub(1);
                    self.sinks.sql.counters.lost_answers += 1;
                    Answer::Written(Err(IoError::Unavailable("connection reset by peer".into())))
                } else {
                    Answer::Written(result)
                }
            }
            Req::Query { objects, .. } => Answer::Progress(self.sinks.sql.last_seqs(objects)),
        };
        self.h(0x5a1_0000 ^ id);
        if self.trace.is_some() {
            let line = format!("sql: request #{id} of s{} lands: {}", s + 1, brief_answer(&req, &answer));
            self.tr(|| line);
        }
        self.forget_req(id);
        if answered || !self.sinks.procs[s].reaches(Peer::Database) {
            return;
        }
        let d = self.hop::<SinkRole>(s);
        self.after(d, Ev::Sink(SinkEv::SqlAnswer { s, inc, req: id, answer }));
    }

    /// The answer to request `id` (or its timeout) reaches its sink: the first of the two counts.
    pub(in crate::world) fn sql_answer(&mut self, id: u64, s: usize, inc: u64, answer: Option<Answer>) {
        let Some(p) = self.sinks.reqs.get_mut(&id).filter(|p| !p.answered) else { return };
        p.answered = true;
        let req = p.req.clone();
        self.forget_req(id);
        let answer = answer.unwrap_or_else(|| Answer::failed(&req, IoError::Timeout));
        if self.sinks.procs[s].is_current(inc) {
            self.step_as::<SinkRole>(s, Some(answer.input(&req)));
        }
    }

    fn forget_req(&mut self, id: u64) {
        if self.sinks.reqs.get(&id).is_some_and(|p| p.landed && p.answered) {
            self.sinks.reqs.remove(&id);
        }
    }
}

fn brief_answer(req: &Req, a: &Answer) -> String {
    let what = match req {
        Req::Write(b) => format!(
            "batch {} ({} events, {} objects, progress {})",
            b.id,
            b.events.len(),
            b.objects.len(),
            b.progress.position
        ),
        Req::Query { token, objects } => format!("progress query {token} ({} objects)", objects.len()),
    };
    let how = match a {
        Answer::Written(Ok(())) => "committed".to_string(),
        Answer::Written(Err(e)) => e.to_string(),
        Answer::Progress(Ok(v)) => format!("{} objects have rows", v.len()),
        Answer::Progress(Err(e)) => e.to_string(),
    };
    format!("{what}: {how}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::sink::Progress;
    use jaque_core::{MemberId, State, Time};

    fn event(seq: u64, object: &str, output: &str) -> EventRow {
        EventRow {
            seq,
            object: ObjectId::new(object).unwrap(),
            epoch: 1,
            writer: MemberId::new("e1").unwrap(),
            writer_incarnation: 1,
            at: Time(seq),
            kind: "transition",
            from_state: Some(State::Ok),
            to_state: Some(State::Critical),
            output: Some(output.into()),
            command_id: None,
            definition: None,
            alert: Default::default(),
        }
    }

    fn object(object: &str, last_seq: u64) -> ObjectRow {
        sink::object_row(&ObjectId::new(object).unwrap(), None, last_seq)
    }

    fn batch(id: u64, events: Vec<EventRow>, objects: Vec<ObjectRow>) -> Batch {
        Batch { id, events, objects, progress: Progress { sink: MemberId::new("s1").unwrap(), position: id } }
    }

    #[test]
    fn a_row_at_a_stored_position_is_ignored_and_an_objects_row_never_goes_back() {
        let mut sql = Sql::new(1, 0.0);
        sql.commit(&batch(1, vec![event(1, "a", "x"), event(2, "a", "y")], vec![object("a", 2)])).unwrap();
        sql.commit(&batch(2, vec![event(2, "a", "other"), event(3, "b", "z")], vec![object("a", 1)])).unwrap();
        assert_eq!(sql.events().len(), 3);
        assert_eq!((sql.copies(2), sql.counters.conflicts), (1, 1));
        assert_eq!(sql.events()[1].output.as_deref(), Some("y"), "the first row at a position stays");
        assert_eq!(sql.objects[&ObjectId::new("a").unwrap()].last_seq, 2, "no upsert over a newer row");
        let asked = [ObjectId::new("a").unwrap(), ObjectId::new("b").unwrap(), ObjectId::new("c").unwrap()];
        let last: Vec<u64> = sql.last_seqs(&asked).unwrap().into_iter().map(|(_, s)| s).collect();
        assert_eq!(last, [2, 3], "an object without rows is absent");
    }

    #[test]
    fn a_refused_or_down_transaction_changes_nothing() {
        let mut sql = Sql::new(1, 1.0);
        let bad = batch(1, vec![event(1, "a", "x"), event(2, "a", &format!("{MARKER} y"))], vec![object("a", 2)]);
        assert!(matches!(sql.commit(&bad), Err(IoError::Refused(_))));
        assert!(sql.events().is_empty() && sql.objects.is_empty() && sql.progress.is_empty());
        // Degraded (output emptied) at a position refused even so (all are, at refuse_degraded 1.0).
        assert!(sql.refuses_event(&degraded_event(event(2, "a", "y"))));
        sql.down = true;
        assert!(matches!(sql.commit(&batch(2, vec![event(1, "a", "x")], vec![])), Err(IoError::Unavailable(_))));
        assert!(sql.last_seqs(&[]).is_err());
        assert!(sql.events().is_empty());
    }
}
