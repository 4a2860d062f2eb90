//! The notifier role's loop, shaped like the engine's: one task waits on whichever comes first — a membership
//! change or a log entry (the `Follower`), the answer of a store read or write, of a webhook send or of a
//! heartbeat put (all through one channel), a request from the HTTP side, or the core's timer — feeds it to
//! `jaque_core::notifier::Notifier`, then carries out every output as a task of its own, so sends run side by
//! side (the core bounds them per endpoint). Every decision is the core's; its metrics are beside it.

use crate::clock::{far_future, instant_at, now};
use crate::coord::Coordination;
use crate::follow::{spawn_heartbeat_writer_acked, Buckets, Followed, Follower, HeartbeatWriter};
use crate::metrics::Exposition;
use crate::progress::Progress;
use crate::reading::RoleQuery;
use crate::snapshots::{self, Restores};
use crate::webhook::{self, Secret};
use jaque_core::notifier::{Endpoint, EndpointId, Input, Notifier, NotifierConfig, Output, SendResult};
use jaque_core::secret::redact_url;
use jaque_core::{LogReader, MemberRef};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long past the core's own leave deadline the process waits for the last answers before it goes anyway.
const LEAVE_GRACE: Duration = Duration::from_secs(5);

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
    coord: Coordination,
    progress: Progress,
    sender: webhook::Sender,
    endpoints: Vec<EndpointId>,
    done_tx: mpsc::UnboundedSender<Input>,
    done_rx: Option<mpsc::UnboundedReceiver<Input>>,
    heartbeats: HeartbeatWriter,
    expose_members: bool,
    restores: Restores,
    restored_tx: mpsc::UnboundedSender<Option<LogReader>>,
    restored_rx: Option<mpsc::UnboundedReceiver<Option<LogReader>>>,
}

impl NotifierLoop {
    pub fn new(cfg: NotifierConfigShell, coord: Coordination) -> Result<NotifierLoop, String> {
        let endpoints: Vec<Endpoint> = cfg.urls.iter().map(Endpoint::new).collect();
        let mut core = NotifierConfig::new(cfg.me, cfg.ttl, endpoints.clone());
        core.give_up = cfg.give_up;
        if cfg.secret.is_none() {
            tracing::warn!("no -notify-secret: webhook deliveries are sent unsigned (no webhook-signature header)");
        }
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (restored_tx, restored_rx) = mpsc::unbounded_channel();
        let acks = done_tx.clone();
        Ok(NotifierLoop {
            n: Notifier::new(core),
            progress: Progress::of(&coord),
            heartbeats: spawn_heartbeat_writer_acked(coord.clone(), move |ok| {
                let _ = acks.send(Input::HeartbeatWritten { ok });
            }),
            coord,
            sender: webhook::Sender::new(cfg.secret, webhook::REQUEST_TIMEOUT)?,
            endpoints: endpoints.iter().map(|e| e.id).collect(),
            done_tx,
            done_rx: Some(done_rx),
            expose_members: cfg.expose_members,
            restores: Restores::default(),
            restored_tx,
            restored_rx: Some(restored_rx),
        })
    }

    /// Runs until `shutdown` flips, then leaves: the core finishes or gives back every claim, deletes the key,
    /// and says when it is done (bounded by its leave deadline, plus a grace here).
    pub async fn run(
        mut self,
        mut requests: mpsc::Receiver<RoleQuery>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), String> {
        let mut done = self.done_rx.take().ok_or("the notifier loop runs once")?;
        let mut restored = self.restored_rx.take().ok_or("the notifier loop runs once")?;
        // Start from the latest snapshot, and read only the log after it.
        if let Some(reader) = snapshots::latest_reader(&self.coord).await {
            self.n.handle(now(), Input::Restore(Box::new(reader)));
        }
        let mut follow = Follower::start(&self.coord, self.n.role().reader().position() + 1).await?;
        for (ep, url) in self.endpoints.iter().zip(self.n.config().endpoints.iter().map(|e| &e.url)) {
            tracing::info!(endpoint = %ep, url = %redact_url(url), "notifying");
        }
        let mut leave_by: Option<tokio::time::Instant> = None;
        self.n.handle(now(), Input::Start);
        self.drain();
        loop {
            let timer = self.n.poll_timeout().map(|(t, _)| instant_at(t));
            let failed = self.n.counters.failed;
            let lost = self.n.role().counters.objects_lost_history;
            tokio::select! {
                Some(f) = follow.next() => match f {
                    Followed::Member(obs) => self.n.handle(now(), Input::Member(obs)),
                    Followed::Log { seq, entry } => self.n.handle(now(), Input::Log { seq, entry }),
                    Followed::Unreadable { seq } => self.n.handle(now(), Input::LogUnreadable { seq }),
                    Followed::CaughtUp => {
                        tracing::info!(position = self.n.role().reader().position(), "notifier caught up");
                        self.n.handle(now(), Input::CaughtUp);
                    }
                },
                Some(input) = done.recv() => self.n.handle(now(), input),
                Some(reader) = restored.recv() => {
                    self.restores.answered();
                    if let Some(reader) = reader {
                        let before = self.n.role().reader().position();
                        self.n.handle(now(), Input::Restore(Box::new(reader)));
                        let position = self.n.role().reader().position();
                        if position > before {
                            tracing::info!(from = before, to = position, "jumped past a hole in the log to a snapshot");
                            follow.refollow_log(&self.coord, position + 1).await;
                        }
                    }
                }
                Some(req) = requests.recv() => self.answer(req, &follow),
                _ = tokio::time::sleep_until(timer.unwrap_or_else(far_future)), if timer.is_some() => {
                    self.n.handle_timeout(now());
                }
                _ = shutdown.changed(), if leave_by.is_none() => {
                    tracing::info!(member = %self.n.me(), "leaving the notifier bucket: finishing the sends in flight");
                    self.n.handle(now(), Input::Leave);
                    leave_by = Some(tokio::time::Instant::now() + self.n.config().leave_timeout + LEAVE_GRACE);
                }
                _ = tokio::time::sleep_until(leave_by.unwrap_or_else(far_future)), if leave_by.is_some() => {
                    tracing::warn!("the notifier's leave did not finish in time; exiting anyway");
                    break;
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
        self.heartbeats.flush_leave().await;
        Ok(())
    }

    fn answer(&self, req: RoleQuery, follow: &Follower) {
        match req {
            RoleQuery::Metrics(reply) => {
                let _ = reply.send(self.metrics(follow.buckets()));
            }
            RoleQuery::Health(reply) => {
                let h = self.n.health();
                let status = match follow.resyncing() {
                    Some(reason) if !self.n.role().is_leaving() => (false, reason),
                    _ => (h.ready, h.reason),
                };
                let _ = reply.send(status);
            }
        }
    }

    /// Carries out every output the core has, each as its own task; every answer comes back through `done`.
    fn drain(&mut self) {
        while let Some(out) = self.n.poll_output() {
            let tx = self.done_tx.clone();
            match out {
                Output::Membership(m) => self.heartbeats.write(m),
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
                    let (progress, endpoints) = (self.progress.clone(), self.endpoints.clone());
                    tokio::spawn(async move {
                        let result = progress.read(objects, endpoints).await;
                        if let Err(e) = &result {
                            tracing::warn!(error = %e, "reading delivery progress");
                        }
                        let _ = tx.send(Input::Progress { token, result });
                    });
                }
                Output::Replay { token, from, to } => {
                    let coord = self.coord.clone();
                    tokio::spawn(async move {
                        let result = coord.replay(from, to).await;
                        if let Err(e) = &result {
                            tracing::warn!(error = %e, "reading the log again");
                        }
                        let _ = tx.send(Input::Replayed { token, result });
                    });
                }
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
                Output::NeedSnapshot { covering } => {
                    let tx = self.restored_tx.clone();
                    self.restores.ask(&self.coord, covering, move |reader| {
                        let _ = tx.send(reader);
                    });
                }
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
