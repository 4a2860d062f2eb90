//! The notifier role's loop: the plumbing (membership, log, heartbeats and their acknowledgements, replays,
//! snapshot loads, timer, leave) is `follow::Reading`, as for the sink; every wake-up goes to
//! `jaque_core::notifier::Notifier`, then every output is carried out as a task of its own, so sends run side by
//! side (the core bounds them per endpoint), each answer coming back through `Reading::done`. Every decision
//! is the core's; its metrics are beside it.

mod progress;
mod webhook;

pub use webhook::Secret;

use crate::clock::now;
use crate::coord::Coordination;
use crate::follow::{snapshots, Buckets, Reading, RoleQuery, Wake};
use crate::metrics::Exposition;
use jaque_core::notifier::{Endpoint, EndpointId, Input, Notifier, NotifierConfig, Output, SendResult, Stored};
use jaque_core::secret::redact_url;
use jaque_core::{IoError, LogReader, MemberRef, ObjectId};
use jaque_core::{Life, LifeOutput};
use progress::Records;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

pub struct NotifierConfigShell {
    pub me: MemberRef,
    pub ttl: Duration,
    pub urls: Vec<String>,
    pub secret: Option<Secret>,
    pub give_up: Duration,
    /// Whether this loop exposes `jaque_membership_live_members` (not when an engine or ui in the same
    /// process already does).
    pub expose_members: bool,
}

pub struct NotifierLoop {
    n: Notifier,
    reading: Reading<Input>,
    progress: Records,
    sender: webhook::Sender,
    endpoints: Vec<EndpointId>,
    expose_members: bool,
}

impl NotifierLoop {
    pub fn new(
        cfg: NotifierConfigShell,
        coord: Coordination,
        queries: mpsc::Receiver<RoleQuery>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<NotifierLoop, String> {
        let endpoints: Vec<Endpoint> = cfg.urls.iter().map(Endpoint::new).collect();
        let mut core = NotifierConfig::new(cfg.me, cfg.ttl, endpoints.clone());
        core.give_up = cfg.give_up;
        if cfg.secret.is_none() {
            tracing::warn!("no -notify-secret: webhook deliveries are sent unsigned (no webhook-signature header)");
        }
        Ok(NotifierLoop {
            n: Notifier::new(core),
            progress: Records::of(&coord),
            reading: Reading::new(coord, queries, shutdown),
            sender: webhook::Sender::new(cfg.secret, webhook::REQUEST_TIMEOUT)?,
            endpoints: endpoints.iter().map(|e| e.id).collect(),
            expose_members: cfg.expose_members,
        })
    }

    /// Runs until the shutdown, then leaves: the core finishes or gives back every claim, deletes the key, and
    /// says when it is done (bounded by its leave deadline, plus a grace here).
    pub async fn run(mut self) -> Result<(), String> {
        // Start from the latest snapshot, and read only the log after it.
        if let Some(reader) = snapshots::latest_reader(self.reading.coord()).await {
            self.n.handle(now(), Input::Life(Life::Restore(Box::new(reader))));
        }
        self.reading.follow(self.n.role().reader().position() + 1).await?;
        for (ep, url) in self.endpoints.iter().zip(self.n.config().endpoints.iter().map(|e| &e.url)) {
            tracing::info!(endpoint = %ep, url = %redact_url(url), "notifying");
        }
        self.n.handle(now(), Input::Life(Life::Start));
        self.drain();
        loop {
            let failed = self.n.counters.failed;
            let lost = self.n.role().counters.objects_lost_history;
            let Some(wake) = self.reading.next(self.n.poll_timeout().map(|(t, _)| t)).await else {
                return Err("the notifier's log follower ended".into());
            };
            match wake {
                Wake::Life(life) => {
                    if life == Life::CaughtUp {
                        tracing::info!(position = self.n.role().reader().position(), "notifier caught up");
                    }
                    self.n.handle(now(), Input::Life(life));
                }
                Wake::Replayed { token, result } => self.n.handle(now(), Input::Replayed { token, result }),
                Wake::Restored(reader) => self.restored(reader).await?,
                Wake::Done(inputs) => {
                    let t = now();
                    for input in inputs {
                        self.n.handle(t, input);
                    }
                }
                Wake::Query(q) => self.answer(q),
                Wake::Timeout => {
                    if let Some((_, timer)) = self.n.poll_timeout() {
                        tracing::debug!(?timer, "notifier: timer due");
                    }
                    self.n.handle_timeout(now());
                }
                Wake::Leave => {
                    tracing::info!(member = %self.n.me(), "leaving the notifier bucket: finishing the sends in flight");
                    self.n.handle(now(), Input::Life(Life::Leave));
                }
            }
            if self.n.counters.failed > failed {
                tracing::warn!(
                    failed = self.n.counters.failed - failed,
                    give_up = ?self.n.config().give_up,
                    "gave up on deliveries still failing after -notify-give-up"
                );
            }
            snapshots::warn_history_lost("notifier", lost, self.n.role().counters.objects_lost_history);
            self.drain();
            if self.n.is_done() {
                break;
            }
        }
        // The key's delete was queued by the core once its claims were finished.
        self.reading.flush_leave().await;
        match self.n.role().blocked_reason() {
            Some(reason) => Err(format!("notifier: {reason}")),
            None => Ok(()),
        }
    }

    /// Hands a loaded snapshot to the core and, if it jumped to it, follows the log from after it.
    async fn restored(&mut self, reader: Option<Box<LogReader>>) -> Result<(), String> {
        let Some(reader) = reader else { return Ok(()) };
        let before = self.n.role().reader().position();
        self.n.handle(now(), Input::Life(Life::Restore(reader)));
        let position = self.n.role().reader().position();
        if position > before {
            tracing::info!(from = before, to = position, "jumped past a hole in the log to a snapshot");
            self.reading.refollow(position + 1).await?;
        }
        Ok(())
    }

    fn answer(&self, req: RoleQuery) {
        match req {
            RoleQuery::Metrics(reply) => {
                let _ = reply.send(self.metrics(self.reading.buckets()));
            }
            RoleQuery::Health(reply) => {
                let h = self.n.health();
                let _ = reply.send(self.reading.health(self.n.role().is_leaving(), (h.ready, h.reason)));
            }
        }
    }

    /// Carries out every output the core has, each as its own task; every answer comes back through `done`.
    fn drain(&mut self) {
        while let Some(out) = self.n.poll_output() {
            let tx = self.reading.done();
            match out {
                Output::Life(LifeOutput::Membership(m)) => self.reading.heartbeat(m),
                Output::ReadStarts { endpoints, propose } => {
                    let progress = self.progress.clone();
                    tokio::spawn(async move {
                        let result = progress.starts(&endpoints, propose).await;
                        if let Err(e) = &result {
                            tracing::warn!(error = %e, "reading where notifications begin");
                        }
                        let _ = tx.send(Input::Starts { result });
                    });
                }
                Output::ReadProgress { token, objects } => {
                    self.read_progress(objects, tx, move |result| Input::Progress { token, result })
                }
                Output::Recheck { token, object } => {
                    self.read_progress(vec![object], tx, move |result| Input::Rechecked { token, result })
                }
                Output::Replay { token, from, to } => self.reading.replay(token, from, to),
                Output::WriteProgress { op, object, endpoint, record, expect } => {
                    let progress = self.progress.clone();
                    tokio::spawn(async move {
                        let result = progress.write(&object, endpoint, &record, expect).await;
                        if let Err(e) = &result {
                            tracing::warn!(error = %e, %object, "writing delivery progress");
                        }
                        let _ = tx.send(Input::Written { op, result });
                    });
                }
                Output::Life(LifeOutput::NeedSnapshot { covering }) => self.reading.restore(covering),
                Output::Send(d) => {
                    let sender = self.sender.clone();
                    tokio::spawn(async move {
                        let result = sender.send(&d).await;
                        match &result {
                            SendResult::Delivered => {}
                            SendResult::Gone => tracing::warn!(
                                url = %redact_url(&d.url),
                                "the endpoint answered 410 Gone: this notifier sends it nothing more"
                            ),
                            SendResult::Retry { after, reason } => tracing::info!(
                                url = %redact_url(&d.url),
                                webhook_id = d.webhook_id,
                                attempt = d.attempt,
                                ?after,
                                reason,
                                "delivery failed; it will be retried"
                            ),
                        }
                        let _ = tx.send(Input::Sent { op: d.op, result });
                    });
                }
            }
        }
    }

    /// Reads the objects' records at every endpoint as its own task, answered as `answer` says (a resume's
    /// question and a lane's recheck read alike).
    fn read_progress(
        &self,
        objects: Vec<ObjectId>,
        tx: mpsc::UnboundedSender<Input>,
        answer: impl FnOnce(Result<Vec<(ObjectId, EndpointId, Stored)>, IoError>) -> Input + Send + 'static,
    ) {
        let (progress, endpoints) = (self.progress.clone(), self.endpoints.clone());
        tokio::spawn(async move {
            let result = progress.read(objects, endpoints).await;
            if let Err(e) = &result {
                tracing::warn!(error = %e, "reading delivery progress");
            }
            let _ = tx.send(answer(result));
        });
    }

    fn metrics(&self, buckets: &Buckets) -> String {
        let n = &self.n;
        let c = &n.counters;
        let mut m = Exposition::default();
        m.header(
            "jaque_notifier_deliveries_total",
            "counter",
            "Webhook deliveries by outcome: delivered (2xx), retry (an attempt that failed and is retried), failed \
             (given up after -notify-give-up), disabled (not sent: the endpoint answered 410 Gone).",
        );
        for (outcome, v) in
            [("delivered", c.delivered), ("retry", c.retry), ("failed", c.failed), ("disabled", c.disabled)]
        {
            m.sample("jaque_notifier_deliveries_total", &[("outcome", outcome)], v);
        }
        m.one(
            "jaque_notifier_objects_owned",
            "gauge",
            "Objects this notifier owns (HRW over the live notifiers).",
            n.role().owned_count() as u64,
        );
        m.one(
            "jaque_notifier_lag_events",
            "gauge",
            "Log positions read whose transitions are not yet handled at every endpoint.",
            n.lag(),
        );
        m.one("jaque_notifier_log_position", "gauge", "The last log position read.", n.role().reader().position());
        m.one(
            "jaque_notifier_history_lost_total",
            "counter",
            "Objects whose accepted transitions were purged from the log (-log-retention) before this notifier \
             handled them: never notified.",
            n.role().counters.objects_lost_history,
        );
        let disabled = (0..self.endpoints.len()).filter(|i| n.is_disabled(*i)).count() as u64;
        m.one("jaque_notifier_endpoints_disabled", "gauge", "Endpoints that answered 410 Gone.", disabled);
        m.header(
            "jaque_notifier_not_sent_total",
            "counter",
            "Transitions this notifier read that their writer sent to none of its -notify-webhook endpoints, by why: \
             silenced, maintenance_window, parent_down, or routes (the notification policy's routes took it and did \
             not go on to the implicit route).",
        );
        for reason in ["silenced", "maintenance_window", "parent_down", "routes"] {
            m.sample(
                "jaque_notifier_not_sent_total",
                &[("reason", reason)],
                c.not_sent.get(reason).copied().unwrap_or(0),
            );
        }
        m.one(
            "jaque_notifier_resent_after_fault_total",
            "counter",
            "Sends of a transition another notifier had claimed and is gone (the repeats a fault permits).",
            c.resent_after_fault,
        );
        m.one(
            "jaque_notifier_claims_lost_total",
            "counter",
            "Claims or records that another notifier wrote first (compare-and-set lost).",
            c.claims_lost,
        );
        m.one(
            "jaque_notifier_store_errors_total",
            "counter",
            "Progress reads and writes that failed and were retried.",
            c.store_errors,
        );
        m.one(
            "jaque_notifier_stale_events_total",
            "counter",
            "Events in the log discarded by the fence (never notified).",
            n.role().reader().counters.stale_epoch_total,
        );
        if self.expose_members {
            buckets.expose(&mut m);
        }
        m.0
    }
}
