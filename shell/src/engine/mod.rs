//! The engine role's loop, in the manner of quinn's driver, on the `follow::Reading` the sink and the notifier
//! run on: one task waits on whichever comes first — a membership change, a log entry, a heartbeat's answer
//! (the member's life, `Wake::Life`), a NATS command, check results, a ui request or another I/O answer (the
//! engine's own, `Wake::Done`), a snapshot loaded after a hole, the core's single timer, or the signal to
//! leave — feeds it to the core, then carries out every output the core has, until the core `is_done()`. Every
//! decision is the core's. Its metrics are beside it.

mod commands;

use crate::clock::now;
use crate::coord::{AppendAck, Coordination};
use crate::follow::{snapshots, Buckets, Reading, RoleHandle, Wake};
use crate::metrics::{self, Exposition};
use crate::nats::subjects::{cmd_subject, results_subject, INGRESS_GROUP, INGRESS_SUBJECT, WORK_SUBJECT};
use crate::nats::NatsLink;
use crate::ui::views::{self, UiRequest};
use crate::ui::Feed;
use crate::worker::MemWork;
use commands::Received;
use futures_util::StreamExt;
use jaque_core::wire::{self, Answer, OneOrMany};
use jaque_core::{
    CheckResult, CheckWork, Command, Engine, EngineConfig, Event, ForwardId, Input, IoError, LogReader, MemberRef,
    Outcome, Output, ReplyTo, Time,
};
use jaque_core::{Life, LifeOutput};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot, watch};

/// Where check work goes.
pub enum WorkQueue {
    Memory(mpsc::UnboundedSender<MemWork>),
    Nats(NatsLink),
}

/// What the engine's own I/O tasks hand back to the loop (`Wake::Done`).
enum Done {
    /// Anything that goes to the core as it is.
    Core(Input),
    /// A command from NATS: the loop turns its reply subject into a `ReplyTo` first.
    Command(Received),
    CheckResult(CheckResult),
    Ui(UiRequest),
}

impl From<Received> for Done {
    fn from(r: Received) -> Done {
        Done::Command(r)
    }
}

/// Where a `Reply` output goes.
enum Waiter {
    Http(oneshot::Sender<Outcome>),
    Nats(async_nats::Subject),
}

pub struct EngineLoop {
    engine: Engine,
    coord: Coordination,
    nats: Option<NatsLink>,
    queue: WorkQueue,
    /// The member's life (membership, the log, heartbeats, snapshots after a hole, the signal to leave), the
    /// core's timer, and every answer of the engine's own I/O, as one `next()`.
    reading: Reading<Done>,
    done_tx: mpsc::UnboundedSender<Done>,
    /// Check results of the in-process queue (`-queue memory`), handed on as `Done::CheckResult`.
    results_tx: mpsc::UnboundedSender<CheckResult>,
    results_rx: Option<mpsc::UnboundedReceiver<CheckResult>>,
    /// The check work of one drain, sent together (`dispatch`).
    dispatches: Vec<CheckWork>,
    appends: mpsc::UnboundedSender<Event>,
    waiters: HashMap<u64, Waiter>,
    next_reply: u64,
    results_subject: String,
    /// Set while this engine is a member of the ingress queue group: sending on it leaves the group.
    ingress: Option<oneshot::Sender<()>>,
    /// What the log changes, for the ui's event streams.
    feed: Option<Feed>,
}

impl EngineLoop {
    /// The loop of an engine that leaves its bucket when `shutdown` flips.
    pub fn new(
        cfg: EngineConfig,
        coord: Coordination,
        nats: Option<NatsLink>,
        queue: WorkQueue,
        shutdown: watch::Receiver<bool>,
    ) -> EngineLoop {
        // The engine answers health and metrics through the ui's requests: no one asks it as a `RoleHandle`.
        let (_, queries) = RoleHandle::new("engine");
        // Every heartbeat put is answered to the core (`Life::HeartbeatWritten`): its lease (whether it may
        // claim ingress writes) runs from the acknowledged ones.
        let reading = Reading::new(coord.clone(), queries, shutdown);
        let done_tx = reading.done();
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let results_subject = results_subject(&cfg.me);
        EngineLoop {
            engine: Engine::new(cfg),
            appends: spawn_appender(coord.clone(), done_tx.clone()),
            reading,
            coord,
            nats,
            queue,
            done_tx,
            results_tx,
            results_rx: Some(results_rx),
            dispatches: Vec::new(),
            waiters: HashMap::new(),
            next_reply: 0,
            results_subject,
            ingress: None,
            feed: None,
        }
    }

    /// Sends what the log changes to the ui's event streams (`GET /api/stream`).
    pub fn with_feed(mut self, feed: Feed) -> EngineLoop {
        self.feed = Some(feed);
        self
    }

    /// Runs until the shutdown flips, then leaves the bucket (deletes its key), answers what is in flight
    /// (the core bounds it: `is_done()`) and returns.
    pub async fn run(mut self, mut ui: mpsc::Receiver<UiRequest>) -> Result<(), String> {
        let mut results = self.results_rx.take().ok_or("the engine loop runs once")?;
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            while let Some(r) = results.recv().await {
                if tx.send(Done::CheckResult(r)).is_err() {
                    return;
                }
            }
        });
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            while let Some(req) = ui.recv().await {
                if tx.send(Done::Ui(req)).is_err() {
                    return;
                }
            }
        });
        // Start from the latest snapshot, and read only the log after it.
        if let Some(reader) = snapshots::latest_reader(&self.coord).await {
            self.engine = Engine::with_reader(self.engine.config().clone(), reader);
        }
        self.reading.follow(self.engine.reader().position() + 1).await?;
        self.subscribe().await?;

        self.engine.handle(now(), Input::Life(Life::Start));
        self.drain();
        loop {
            let deadline = self.engine.poll_timeout().map(|(t, _)| t);
            let Some(wake) = self.reading.next(deadline).await else {
                return Err("the engine's log follower ended".into());
            };
            match wake {
                Wake::Life(life) => self.handle_life(life),
                // The engine reads no range of the log again, and is asked nothing as a `RoleHandle`.
                Wake::Replayed { .. } | Wake::Query(_) => {}
                Wake::Restored(reader) => self.restore(reader).await?,
                // Every answer that has arrived, at once: checks dispatched together come back together.
                Wake::Done(done) => {
                    let t = now();
                    for d in done {
                        self.handle_done(t, d);
                    }
                }
                Wake::Timeout => {
                    if let Some((_, timer)) = self.engine.poll_timeout() {
                        tracing::debug!(?timer, "engine: timer due");
                    }
                    self.engine.handle_timeout(now());
                }
                Wake::Leave => {
                    tracing::info!(member = %self.engine.me(), "leaving the engine bucket");
                    self.engine.handle(now(), Input::Life(Life::Leave));
                    if let Some(leave) = self.ingress.take() {
                        let _ = leave.send(());
                    }
                }
            }
            self.drain();
            self.ingress_membership(self.engine.is_leaving()).await?;
            // What was in flight is answered, or the core's leave deadline passed.
            if self.engine.is_done() {
                break;
            }
        }
        // The key's delete was queued by the core's Leave.
        self.reading.flush_leave().await;
        // An engine that met an entry it cannot read left its bucket so the others take its objects; the
        // process says why and ends in error, so a supervisor shows it (and restarts it, ideally as a newer build).
        match self.engine.reader().blocked_reason() {
            Some(reason) => Err(format!("engine: {reason}")),
            None => Ok(()),
        }
    }

    /// Hands a loaded snapshot to the core and, if the core jumped to it, follows the log from after it.
    async fn restore(&mut self, reader: Option<Box<LogReader>>) -> Result<(), String> {
        let Some(reader) = reader else { return Ok(()) };
        let before = self.engine.reader().position();
        self.engine.handle(now(), Input::Life(Life::Restore(reader)));
        let position = self.engine.reader().position();
        if position > before {
            tracing::info!(from = before, to = position, "jumped past a hole in the log to a snapshot");
            self.reading.refollow(position + 1).await?;
            if let Some(feed) = &self.feed {
                feed.reload("jumped to a snapshot");
            }
        }
        Ok(())
    }

    /// An input of the member's life, with what it changes told to the ui's event streams.
    fn handle_life(&mut self, life: Life) {
        match life {
            Life::Member(obs) => {
                if let Some(feed) = &mut self.feed {
                    feed.members(self.reading.buckets(), obs.bucket);
                }
                self.engine.handle(now(), Input::Life(Life::Member(obs)))
            }
            Life::Log { seq, entry } => {
                let epoch = self.engine.epoch();
                let before = self.feed.as_ref().and_then(|f| f.before(self.engine.reader(), &entry));
                self.engine.handle(now(), Input::Life(Life::Log { seq, entry }));
                if let Some(feed) = &self.feed {
                    feed.after(before, seq, self.engine.reader());
                }
                if self.engine.epoch() != epoch {
                    let members = self.engine.reader().fence().current().map_or(0, |r| r.members.len());
                    tracing::info!(
                        epoch = self.engine.epoch(),
                        seq,
                        members,
                        owned = self.engine.owned_count(),
                        "epoch in force"
                    );
                }
            }
            Life::CaughtUp => {
                tracing::info!(epoch = self.engine.epoch(), position = self.engine.reader().position(), "caught up");
                self.engine.handle(now(), Input::Life(Life::CaughtUp));
                if let Some(feed) = &self.feed {
                    feed.reload("caught up with the log");
                }
            }
            life => self.engine.handle(now(), Input::Life(life)),
        }
    }

    /// Joins `jaque.cmd.<id>` (forwards) and the check results subject. The ingress queue group is joined
    /// only once the engine is ready, so a starting engine never claims writes it can only refuse.
    async fn subscribe(&self) -> Result<(), String> {
        if let Some(link) = &self.nats {
            let forwards = link
                .client
                .subscribe(cmd_subject(&self.engine.me().id))
                .await
                .map_err(|e| format!("subscribing to forwards on {}: {e}", link.url))?;
            // Forwards are taken until the process ends: the core answers them even while leaving.
            drop(commands::spawn_reader(forwards, link.client.clone(), self.done_tx.clone()));
        }
        if let WorkQueue::Nats(link) = &self.queue {
            let mut results = link
                .client
                .subscribe(self.results_subject.clone())
                .await
                .map_err(|e| format!("subscribing to check results on {}: {e}", link.url))?;
            let tx = self.done_tx.clone();
            tokio::spawn(async move {
                while let Some(msg) = results.next().await {
                    if msg.status.is_some() {
                        // A status, not a result: the server says no worker took the work ("no responders").
                        // The core counts the check as lost at its deadline and runs the next one on time.
                        tracing::debug!(status = ?msg.status, "check work had no taker");
                        continue;
                    }
                    match wire::decode_check_result(&msg.payload) {
                        Ok(results) => {
                            for r in results.into_vec() {
                                if tx.send(Done::CheckResult(r)).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "skipping a malformed check result");
                            metrics::wire_error("check result");
                        }
                    }
                }
            });
        }
        Ok(())
    }

    /// In the ingress queue group exactly while the core takes claims (ready, not leaving, its key surely
    /// alive) and the log is followed: a member that cannot take writes would only swallow or decline its share
    /// of them. Out of it while resyncing too: its view of the log stops where the follower was lost, so it
    /// could learn no verdict in time, while an engine that follows the log can apply the write.
    async fn ingress_membership(&mut self, leaving: bool) -> Result<(), String> {
        let refusal = match self.reading.is_resyncing() {
            true => Some("resyncing: the log is followed again first"),
            false => self.engine.claim_refusal(now()),
        };
        match (refusal, self.ingress.is_some()) {
            (Some(why), true) => {
                tracing::info!(reason = why, "left the ingress queue group");
                if let Some(leave) = self.ingress.take() {
                    let _ = leave.send(());
                }
            }
            (None, false) if !leaving => self.join_ingress().await?,
            _ => {}
        }
        Ok(())
    }

    async fn join_ingress(&mut self) -> Result<(), String> {
        let Some(link) = &self.nats else { return Ok(()) };
        let sub = link
            .client
            .queue_subscribe(INGRESS_SUBJECT, INGRESS_GROUP.into())
            .await
            .map_err(|e| format!("joining {INGRESS_SUBJECT} on {}: {e}", link.url))?;
        tracing::info!(epoch = self.engine.epoch(), "ready: joined the ingress queue group");
        self.ingress = Some(commands::spawn_reader(sub, link.client.clone(), self.done_tx.clone()));
        Ok(())
    }

    fn handle_done(&mut self, now: Time, d: Done) {
        let input = match d {
            Done::Core(input) => input,
            Done::CheckResult(r) => Input::CheckResult(r),
            Done::Ui(req) => return self.handle_ui(now, req),
            Done::Command(Received { cmd, reply, claim }) => {
                let reply = self.waiter(Waiter::Nats(reply));
                match claim {
                    true => Input::Claim { reply, cmd },
                    false => Input::Command { reply, cmd },
                }
            }
        };
        self.engine.handle(now, input);
    }

    fn waiter(&mut self, w: Waiter) -> ReplyTo {
        let n = self.next_reply;
        self.next_reply += 1;
        self.waiters.insert(n, w);
        ReplyTo(n)
    }

    fn handle_ui(&mut self, now: Time, req: UiRequest) {
        if let UiRequest::Write { cmd, reply } = req {
            let to = self.waiter(Waiter::Http(reply));
            self.engine.handle(now, Input::Command { reply: to, cmd });
            return;
        }
        let buckets = self.reading.buckets();
        let reader = self.engine.reader();
        match req {
            UiRequest::Write { .. } => unreachable!("handled above"),
            UiRequest::Objects { lookup, reply } => {
                let _ = reply.send(views::objects(reader, lookup));
            }
            UiRequest::Cluster { reply } => {
                let _ = reply.send(views::cluster(reader, buckets));
            }
            UiRequest::Metrics { reply } => {
                let _ = reply.send(self.metrics(buckets));
            }
            UiRequest::Health { reply } => {
                let status = if self.engine.is_leaving() {
                    (false, "leaving".to_string())
                } else if let Some(reason) = self.reading.resyncing() {
                    (false, reason)
                } else if let Some(covering) = self.engine.needs_snapshot() {
                    (false, jaque_core::compact::hole_reason(covering))
                } else if self.engine.is_ready() {
                    (true, "ready".to_string())
                } else {
                    (false, "starting: reading the log and waiting for an epoch".to_string())
                };
                let _ = reply.send(status);
            }
        }
    }

    /// Carries out every output the core has.
    fn drain(&mut self) {
        while let Some(out) = self.engine.poll_output() {
            match out {
                Output::Life(LifeOutput::Membership(m)) => self.reading.heartbeat(m),
                Output::ProposeEpoch { record, after_seq } => {
                    let (coord, tx) = (self.coord.clone(), self.done_tx.clone());
                    tracing::info!(epoch = record.epoch, members = record.members.len(), "proposing an epoch");
                    tokio::spawn(async move {
                        match coord.propose(&record, after_seq).await {
                            Ok(won) => {
                                let _ = tx.send(Done::Core(Input::ProposeResult { epoch: record.epoch, won }));
                            }
                            // Unknown outcome: the core proposes again after its timeout.
                            Err(e) => tracing::warn!(epoch = record.epoch, error = %e, "epoch proposal"),
                        }
                    });
                }
                Output::Append(event) => {
                    let _ = self.appends.send(event);
                }
                Output::Forward { id, to, cmd } => self.forward(id, to, cmd),
                Output::Reply { to, outcome } => self.answer(to, true, Answer::Outcome(outcome)),
                Output::Claimed { to } => self.answer(to, false, Answer::Claimed { by: self.engine.me().id.clone() }),
                Output::Declined { to, reason } => {
                    let by = self.engine.me().id.clone();
                    self.answer(to, true, Answer::Declined { by, reason: reason.into() })
                }
                Output::Dispatch(work) => self.dispatches.push(work),
                Output::WriteSnapshot(snapshot) => {
                    let tx = self.done_tx.clone();
                    snapshots::spawn_write(self.coord.clone(), snapshot, move |position, result| {
                        let _ = tx.send(Done::Core(Input::SnapshotWritten { position, result }));
                    });
                }
                Output::Purge { below } => snapshots::spawn_purge(self.coord.clone(), below),
                Output::Life(LifeOutput::NeedSnapshot { covering }) => self.reading.restore(covering),
            }
        }
        if !self.dispatches.is_empty() {
            self.dispatch();
        }
    }

    /// Sends `answer` to the caller `to`; `last`: nothing follows it, so the caller is forgotten.
    fn answer(&mut self, to: ReplyTo, last: bool, answer: Answer) {
        let waiter = match (last, self.waiters.get(&to.0)) {
            (true, _) => self.waiters.remove(&to.0),
            (false, Some(Waiter::Nats(subject))) => Some(Waiter::Nats(subject.clone())),
            // A claim for a local caller: nothing to tell (it waits for the outcome alone).
            (false, Some(Waiter::Http(_))) => return,
            (false, None) => None,
        };
        match waiter {
            // A local caller never asks for a claim; a decline would still be its one answer.
            Some(Waiter::Http(tx)) => match answer {
                Answer::Outcome(outcome) => {
                    let _ = tx.send(outcome);
                }
                Answer::Declined { reason, .. } => {
                    let _ = tx.send(Outcome::Unavailable { reason });
                }
                Answer::Claimed { .. } => {}
            },
            Some(Waiter::Nats(subject)) => {
                if let Some(link) = &self.nats {
                    let client = link.client.clone();
                    tokio::spawn(async move {
                        if let Err(e) = client.publish(subject, wire::encode_answer(&answer).into()).await {
                            tracing::warn!(error = %e, "replying to a command");
                        }
                    });
                }
            }
            None => tracing::warn!(reply = to.0, "a reply for nobody"),
        }
    }

    fn forward(&self, id: ForwardId, to: MemberRef, cmd: Command) {
        let tx = self.done_tx.clone();
        let Some(link) = &self.nats else {
            let _ = tx.send(Done::Core(Input::ForwardResult {
                id,
                result: Err(IoError::unavailable("no NATS coordination to forward over")),
            }));
            return;
        };
        let client = link.client.clone();
        let deadline = self.engine.config().forward_timeout();
        tokio::spawn(async move {
            let request = client.request(cmd_subject(&to.id), wire::encode(&cmd).into());
            let result = match tokio::time::timeout(deadline, request).await {
                Ok(Ok(msg)) => wire::decode_outcome(&msg.payload)
                    .map_err(|e| IoError::unavailable(format!("an answer from {to} that does not decode: {e}"))),
                Ok(Err(e)) => Err(IoError::unavailable(format!("request to {to}: {e}"))),
                Err(_) => Err(IoError::Timeout),
            };
            let _ = tx.send(Done::Core(Input::ForwardResult { id, result }));
        });
    }

    /// Sends the check work of one drain (at a tick, every check due in it) to the workers together.
    fn dispatch(&mut self) {
        match &self.queue {
            WorkQueue::Memory(tx) => {
                // The checks of one drain together. A send fails only once the worker is gone: the core counts the
                // checks as lost at their deadline.
                let work = OneOrMany::Many(std::mem::take(&mut self.dispatches));
                let _ = tx.send(MemWork { work, answer: self.results_tx.clone() });
            }
            WorkQueue::Nats(link) => {
                let (client, reply) = (link.client.clone(), self.results_subject.clone());
                // The checks of one drain together, a message per `CHECKS_PER_MESSAGE`: a worker wakes once for
                // each message and answers its checks together. The list keeps its room for the next drain.
                let payloads: Vec<Vec<u8>> =
                    self.dispatches.chunks(wire::CHECKS_PER_MESSAGE).map(|w| wire::encode(&w)).collect();
                self.dispatches.clear();
                tokio::spawn(async move {
                    for payload in payloads {
                        if let Err(e) = client.publish_with_reply(WORK_SUBJECT, reply.clone(), payload.into()).await {
                            // The core counts the checks as lost at their deadline.
                            tracing::warn!(error = %e, "dispatching check work");
                        }
                    }
                });
            }
        }
    }

    fn metrics(&self, buckets: &Buckets) -> String {
        let e = &self.engine;
        let c = &e.counters;
        let mut m = Exposition::default();
        m.one(
            "jaque_engine_stale_epoch_total",
            "counter",
            "Events in the log discarded by the epoch fence (their writer had lost the object).",
            e.reader().counters.stale_epoch_total,
        );
        m.header(
            "jaque_engine_commands_forwarded_total",
            "counter",
            "Commands forwarded once to their owner over jaque.cmd.<engine-id>, by outcome of the attempt.",
        );
        m.sample("jaque_engine_commands_forwarded_total", &[("outcome", "sent")], c.forwarded_sent);
        m.sample("jaque_engine_commands_forwarded_total", &[("outcome", "error")], c.forwarded_error);
        m.one(
            "jaque_engine_not_owned_total",
            "counter",
            "Forwarded commands that reached an engine not owning their object: dropped, never a second hop.",
            c.not_owned,
        );
        m.one("jaque_engine_epoch", "gauge", "The epoch in force.", e.epoch());
        m.one(
            "jaque_engine_objects_owned",
            "gauge",
            "Objects this engine owns under the epoch in force.",
            e.owned_count() as u64,
        );
        m.one("jaque_engine_objects", "gauge", "Objects in the log.", e.reader().objects().len() as u64);
        m.one("jaque_engine_log_position", "gauge", "The last log position read.", e.reader().position());
        buckets.expose(&mut m);
        m.one(
            "jaque_membership_id_conflicts_total",
            "counter",
            "Times another live process wrote this engine's key: two processes share one -id.",
            e.membership().id_conflicts_total,
        );
        m.one(
            "jaque_log_gaps_total",
            "counter",
            "Log entries that stood past a hole (purged events) and made this reader jump to a snapshot.",
            c.log_gaps,
        );
        let late = &c.check_start_lateness;
        m.histogram_ms(
            "jaque_engine_check_start_lateness_seconds",
            "How late checks were dispatched against the slot they were scheduled for.",
            &jaque_core::LATENESS_BOUNDS_MS,
            &late.buckets,
            late.sum_ms,
        );
        m.one(
            "jaque_engine_ingress_member",
            "gauge",
            "1 while this engine is a member of the ingress queue group (ready, not leaving, its own key surely alive), else 0.",
            u64::from(self.ingress.is_some()),
        );
        let counters: [(&str, &str, u64); 17] = [
            ("jaque_engine_commands_applied_total", "Commands applied (their event accepted).", c.commands_applied),
            ("jaque_engine_commands_duplicate_total", "Retried commands answered from the log.", c.commands_duplicate),
            ("jaque_engine_commands_rejected_total", "Invalid commands refused.", c.commands_rejected),
            ("jaque_engine_commands_unavailable_total", "Commands answered unavailable.", c.commands_unavailable),
            (
                "jaque_engine_commands_claimed_total",
                "Submissions that asked for a claim and were taken by this engine.",
                c.commands_claimed,
            ),
            (
                "jaque_engine_commands_declined_total",
                "Submissions that asked for a claim and were declined: this engine could not take writes then (not ready, leaving, or out of touch).",
                c.commands_declined,
            ),
            ("jaque_engine_epochs_proposed_total", "Epoch proposals made.", c.epochs_proposed),
            ("jaque_engine_epochs_won_total", "Epoch proposals that won the compare-and-set.", c.epochs_won),
            ("jaque_engine_checks_dispatched_total", "Checks sent to workers.", c.checks_dispatched),
            ("jaque_engine_checks_lost_total", "Checks with no result by their deadline.", c.checks_lost),
            (
                "jaque_engine_checks_skipped_busy_total",
                "Check slots skipped because the object's previous check was still running.",
                c.checks_skipped_busy,
            ),
            ("jaque_engine_check_results_dropped_total", "Check results not used.", c.check_results_dropped),
            ("jaque_engine_transitions_written_total", "Hard state transitions appended.", c.transitions_written),
            (
                "jaque_engine_releases_written_total",
                "Held problems released: an open problem its transition sent to nobody (a silence, a maintenance \
                 window, a parent down) sent once nothing held it.",
                c.releases_written,
            ),
            (
                "jaque_engine_soft_written_total",
                "Soft states (an attempt, or back to the hard state) and flapping starts and ends appended.",
                c.soft_written,
            ),
            (
                "jaque_engine_results_held_total",
                "Check results not logged because the object's previous result event was still on its way.",
                c.results_held,
            ),
            ("jaque_engine_appends_failed_total", "Log appends that failed.", c.appends_failed),
        ];
        for (name, help, v) in counters {
            m.one(name, "counter", help, v);
        }
        m.0
    }
}

/// Sends appends in the order the core produced them and waits for their acks concurrently.
fn spawn_appender(coord: Coordination, done: mpsc::UnboundedSender<Done>) -> mpsc::UnboundedSender<Event> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            let failed = |reason: String| {
                Done::Core(Input::AppendFailed { event: event.clone(), error: IoError::Unavailable(reason) })
            };
            match coord.append(event.clone()).await {
                Ok(AppendAck::Done) => {}
                Ok(ack) => {
                    let done = done.clone();
                    let ev = event.clone();
                    tokio::spawn(async move {
                        if let Err(reason) = ack.wait().await {
                            tracing::warn!(error = %reason, object = %ev.object, "append");
                            let error = IoError::Unavailable(reason);
                            let _ = done.send(Done::Core(Input::AppendFailed { event: ev, error }));
                        }
                    });
                }
                Err(reason) => {
                    tracing::warn!(error = %reason, "append");
                    let _ = done.send(failed(reason));
                }
            }
        }
    });
    tx
}
