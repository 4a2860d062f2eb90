//! The sink role's loop: every accepted event of the log into the `-sink-store`, exactly once. The plumbing
//! (membership, log, heartbeats, replays, snapshot loads, timer, leave) is `follow::Reading`; every decision
//! is the core's `jaque_core::sink::Sink`; the statements are `store`'s. This module only carries the core's
//! outputs to the store and the answers back. Its metrics are beside it.

pub mod store;

use crate::clock::now;
use crate::coord::Coordination;
use crate::follow::{snapshots, Reading, RoleQuery, Wake};
use crate::metrics::Exposition;
use jaque_core::sink::{Input, Output, Sink, SinkConfig};
use jaque_core::IoError;
use jaque_core::{Life, LifeOutput};
use jaque_core::{LogReader, ObjectId, Time};
use std::sync::Arc;
use std::time::Duration;
use store::{SchemaError, Store};
use tokio::sync::{mpsc, watch};

/// The store's answers, back to the loop.
enum Done {
    Schema(Result<(), SchemaError>),
    Written { batch: u64, result: Result<(), IoError> },
    Progress { token: u64, result: Result<Vec<(ObjectId, u64)>, IoError> },
}

/// Schema attempts while the store is away at start: the first after this, doubling to `SCHEMA_RETRY_MAX`.
const SCHEMA_RETRY: Duration = Duration::from_millis(200);
const SCHEMA_RETRY_MAX: Duration = Duration::from_secs(10);
/// How long one store operation may take before it counts as failed (`IoError::Timeout`; the core retries it,
/// which is safe even if it did land: rows are keyed by seq). A bound on a connection hung without an answer.
const STORE_TIMEOUT: Duration = Duration::from_secs(60);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = Result<T, IoError>>) -> Result<T, IoError> {
    match tokio::time::timeout(STORE_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!("{what}: no answer from the store in {STORE_TIMEOUT:?}");
            Err(IoError::Timeout)
        }
    }
}

pub struct SinkLoop {
    sink: Sink,
    store: Arc<Store>,
    reading: Reading<Done>,
    /// Whether this loop's metrics carry `jaque_membership_live_members` (no engine or ui loop in the process
    /// does).
    expose_buckets: bool,
    /// Before the schema is ready: why not, and when to try again.
    schema_error: Option<String>,
    schema_retry_at: Option<Time>,
    schema_delay: Duration,
    schema_errors: u64,
    last_health: bool,
}

impl SinkLoop {
    pub fn new(
        cfg: SinkConfig,
        store: Arc<Store>,
        coord: Coordination,
        queries: mpsc::Receiver<RoleQuery>,
        shutdown: watch::Receiver<bool>,
        expose_buckets: bool,
    ) -> SinkLoop {
        SinkLoop {
            sink: Sink::new(cfg),
            store,
            reading: Reading::new(coord, queries, shutdown),
            expose_buckets,
            schema_error: None,
            schema_retry_at: None,
            schema_delay: SCHEMA_RETRY,
            schema_errors: 0,
            last_health: false,
        }
    }

    /// Makes the schema ready (retrying while the store is away), then joins `sink/membership/` and writes
    /// until the shutdown; then leaves the bucket, writes what it holds (bounded by the core's leave timeout)
    /// and returns. A store this build cannot use ends it with an error.
    pub async fn run(mut self) -> Result<(), String> {
        tracing::info!(member = %self.sink.me(), store = %self.store.what(), "sink: opening the store");
        self.try_schema();
        loop {
            let deadline = if self.reading.is_following() {
                self.sink.poll_timeout().map(|(t, _)| t)
            } else {
                self.schema_retry_at
            };
            let Some(wake) = self.reading.next(deadline).await else {
                return Err("the sink's log follower ended".into());
            };
            let lost = self.sink.role().counters.objects_lost_history;
            match wake {
                Wake::Life(life) => self.sink.handle(now(), Input::Life(life)),
                Wake::Replayed { token, result } => self.sink.handle(now(), Input::Replayed { token, result }),
                Wake::Restored(reader) => self.restored(reader).await?,
                Wake::Done(done) => {
                    for d in done {
                        self.done(d).await?;
                    }
                }
                Wake::Query(q) => self.answer(q),
                Wake::Timeout if self.reading.is_following() => {
                    if let Some((_, timer)) = self.sink.poll_timeout() {
                        tracing::debug!(?timer, "sink: timer due");
                    }
                    self.sink.handle_timeout(now());
                }
                Wake::Timeout => {
                    self.schema_retry_at = None;
                    self.try_schema();
                }
                Wake::Leave => {
                    if !self.reading.is_following() {
                        return Ok(());
                    }
                    tracing::info!(member = %self.sink.me(), "leaving the sink bucket");
                    self.sink.handle(now(), Input::Life(Life::Leave));
                }
            }
            snapshots::warn_history_lost("sink", lost, self.sink.role().counters.objects_lost_history);
            self.drain();
            self.log_health();
            let blocked = self.sink.role().reader().blocked().is_some();
            if (self.reading.has_left() || blocked) && self.sink.is_done() {
                break;
            }
        }
        // The key's delete was queued by the core's Leave.
        self.reading.flush_leave().await;
        if let Some(reason) = self.sink.role().blocked_reason() {
            return Err(format!("sink: {reason}"));
        }
        tracing::info!(written = self.sink.counters.events_written, "sink: left");
        Ok(())
    }

    /// One of the sink's own I/O answers.
    async fn done(&mut self, d: Done) -> Result<(), String> {
        match d {
            Done::Schema(r) => self.schema_done(r).await?,
            Done::Written { batch, result } => {
                if let Err(e) = &result {
                    tracing::warn!(batch, error = %e, "sink: writing a batch");
                }
                self.sink.handle(now(), Input::Written { batch, result });
            }
            Done::Progress { token, result } => {
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "sink: asking the store where objects stand");
                }
                self.sink.handle(now(), Input::Progress { token, result });
            }
        }
        Ok(())
    }

    fn try_schema(&self) {
        let (store, tx) = (self.store.clone(), self.reading.done());
        tokio::spawn(async move {
            let r = match tokio::time::timeout(STORE_TIMEOUT, store.ensure_schema()).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!("{}: no answer to the schema check in {STORE_TIMEOUT:?}", store.what());
                    Err(SchemaError::Unavailable(IoError::Timeout))
                }
            };
            let _ = tx.send(Done::Schema(r));
        });
    }

    async fn schema_done(&mut self, r: Result<(), SchemaError>) -> Result<(), String> {
        match r {
            Ok(()) => {
                self.schema_error = None;
                tracing::info!(store = %self.store.what(), "sink: the store's schema is ready; following the log");
                // Start from the latest snapshot, and read only the log after it.
                if let Some(reader) = snapshots::latest_reader(self.reading.coord()).await {
                    self.sink.handle(now(), Input::Life(Life::Restore(Box::new(reader))));
                }
                self.reading.follow(self.sink.role().reader().position() + 1).await?;
                self.sink.handle(now(), Input::Life(Life::Start));
                Ok(())
            }
            Err(SchemaError::Fatal(msg)) => Err(msg),
            Err(SchemaError::Unavailable(e)) => {
                self.schema_errors += 1;
                tracing::warn!(error = %e, "sink: the store is unreachable; retrying");
                self.schema_error = Some(jaque_core::sink::store_failure(&e));
                self.schema_retry_at = Some(now() + self.schema_delay);
                self.schema_delay = (self.schema_delay * 2).min(SCHEMA_RETRY_MAX);
                Ok(())
            }
        }
    }

    /// Hands a loaded snapshot to the core and, if it jumped to it, follows the log from after it.
    async fn restored(&mut self, reader: Option<Box<LogReader>>) -> Result<(), String> {
        let Some(reader) = reader else { return Ok(()) };
        let before = self.sink.role().reader().position();
        self.sink.handle(now(), Input::Life(Life::Restore(reader)));
        let position = self.sink.role().reader().position();
        if position > before {
            tracing::info!(from = before, to = position, "sink: jumped past a hole in the log to a snapshot");
            self.reading.refollow(position + 1).await?;
        }
        Ok(())
    }

    /// Carries out every output the core has.
    fn drain(&mut self) {
        while let Some(out) = self.sink.poll_output() {
            match out {
                Output::Life(LifeOutput::Membership(m)) => self.reading.heartbeat(m),
                Output::QueryProgress { token, objects } => {
                    let (store, tx) = (self.store.clone(), self.reading.done());
                    tokio::spawn(async move {
                        let result = bounded("the progress query", store.last_seqs(&objects)).await;
                        let _ = tx.send(Done::Progress { token, result });
                    });
                }
                Output::Replay { token, from, to } => self.reading.replay(token, from, to),
                Output::Life(LifeOutput::NeedSnapshot { covering }) => self.reading.restore(covering),
                Output::Write(batch) => {
                    let (store, tx) = (self.store.clone(), self.reading.done());
                    tokio::spawn(async move {
                        let result = bounded("the transaction", store.write(&batch)).await;
                        let _ = tx.send(Done::Written { batch: batch.id, result });
                    });
                }
            }
        }
    }

    fn health(&self) -> (bool, String) {
        if !self.reading.is_following() {
            return match &self.schema_error {
                Some(e) => (false, format!("{e}; retrying")),
                None => (false, format!("opening the store {}", self.store.what())),
            };
        }
        let h = self.sink.health();
        self.reading.health(self.sink.role().is_leaving(), (h.ready, h.reason))
    }

    fn log_health(&mut self) {
        let (ready, reason) = self.health();
        if ready != self.last_health {
            self.last_health = ready;
            if ready {
                tracing::info!(position = self.sink.role().reader().position(), "sink: ready");
            } else {
                tracing::info!(reason, "sink: not ready");
            }
        }
    }

    fn answer(&self, q: RoleQuery) {
        match q {
            RoleQuery::Health(reply) => {
                let _ = reply.send(self.health());
            }
            RoleQuery::Metrics(reply) => {
                let _ = reply.send(self.metrics());
            }
        }
    }

    fn metrics(&self) -> String {
        let s = &self.sink;
        let c = &s.counters;
        let mut m = Exposition::default();
        m.one(
            "jaque_sink_events_written_total",
            "counter",
            "Event rows in transactions the store committed (a row it already had counts: it is in the store).",
            c.events_written,
        );
        m.one(
            "jaque_sink_objects_owned",
            "gauge",
            "Objects this sink owns by HRW over the live members of sink/membership/.",
            s.role().owned_count() as u64,
        );
        m.one(
            "jaque_sink_lag_events",
            "gauge",
            "Log positions this sink has read but not yet written to the store.",
            s.lag(),
        );
        m.one(
            "jaque_sink_store_errors_total",
            "counter",
            "Failed transactions, progress queries and schema attempts.",
            c.store_errors + self.schema_errors,
        );
        m.one("jaque_sink_batches_written_total", "counter", "Transactions the store committed.", c.batches_written);
        m.one(
            "jaque_sink_rows_degraded_total",
            "counter",
            "Rows the store refused and then took with their text fields emptied.",
            c.rows_degraded,
        );
        m.one(
            "jaque_sink_rows_skipped_total",
            "counter",
            "Rows the store refused even degraded: skipped, not in the store.",
            c.rows_skipped,
        );
        m.one(
            "jaque_sink_overflows_total",
            "counter",
            "Times the sink dropped what it held (the store was away long) and resumed from the store.",
            c.overflows,
        );
        m.one(
            "jaque_sink_resumes_total",
            "counter",
            "Gained objects resumed from what the store holds for them.",
            s.role().counters.resumes_done,
        );
        m.one("jaque_sink_log_position", "gauge", "The last log position read.", s.role().reader().position());
        m.one(
            "jaque_sink_history_lost_total",
            "counter",
            "Objects whose accepted events were purged from the log (-log-retention) before this sink wrote them.",
            s.role().counters.objects_lost_history,
        );
        m.one(
            "jaque_sink_written_position",
            "gauge",
            "Every event this sink was to write at or below this position is in the store.",
            s.written_position(),
        );
        if self.expose_buckets {
            self.reading.buckets().expose(&mut m);
        }
        m.0
    }
}
