//! The worker: takes check work from the `-queue` (the engine's channel in this process, or the NATS queue
//! group), starts each check when one of its `-worker-concurrency` slots is free (`probe` runs it), and
//! returns the results to the engine that sent the work. Work waiting for a slot waits in the core's
//! `backlog::Backlog`, on a monotonic clock of its own.

mod metrics;
mod plugins;
mod probe;

pub use metrics::expose;
pub use plugins::check_dir;
pub use probe::Prober;

use crate::metrics::wire_error;
use crate::nats::subjects::{WORKER_GROUP, WORK_SUBJECT};
use crate::nats::NatsLink;
use futures_util::StreamExt;
use jaque_core::backlog::Backlog;
use jaque_core::time::millis;
use jaque_core::wire::{self, OneOrMany};
use jaque_core::{CheckResult, CheckWork, Time};
use metrics::{WORKER_CHECKS_EXPIRED, WORKER_CHECKS_WAITING, WORKER_CHECK_WAIT};
use probe::Started;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

/// Serves in-process work (`-queue memory`): each piece with the channel its results go back on.
pub async fn serve_memory(prober: Prober, rx: mpsc::UnboundedReceiver<MemWork>, concurrency: usize) {
    // Ends when the engine of this process is gone (its sender dropped), after the work taken.
    run_taken(prober, rx, concurrency).await;
}

/// Serves work from the `-queue` NATS server as a member of the workers' queue group.
/// On shutdown it leaves the queue group, runs what it had already taken (but what has expired in its
/// backlog), and returns once those are done.
pub async fn serve_nats(
    prober: Prober,
    link: NatsLink,
    concurrency: usize,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut sub = link
        .client
        .queue_subscribe(WORK_SUBJECT, WORKER_GROUP.into())
        .await
        .map_err(|e| format!("subscribing to {WORK_SUBJECT} on {}: {e}", link.url))?;
    let (results, ready) = mpsc::unbounded_channel();
    let answers = tokio::spawn(send_results(link.client.clone(), ready));
    // Messages are taken off the subscription by a task of their own, so work is taken (and its age counted)
    // as it arrives, also while every check slot is busy.
    let (taken_tx, taken) = mpsc::unbounded_channel();
    let intake = tokio::spawn(async move {
        let mut leaving = false;
        loop {
            let msg = tokio::select! {
                m = sub.next() => m,
                _ = shutdown.changed(), if !leaving => {
                    leaving = true;
                    // Messages already delivered still come out of the stream, then it ends.
                    let _ = sub.unsubscribe().await;
                    continue;
                }
            };
            let Some(msg) = msg else { break };
            let work = match wire::decode_check_work(&msg.payload) {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "skipping malformed check work");
                    wire_error("check work");
                    continue;
                }
            };
            let Some(reply) = msg.reply else {
                wire_error("check work without reply subject");
                continue;
            };
            let one = matches!(work, OneOrMany::One(_));
            let answer = ToEngine { results: results.clone(), reply, one };
            if taken_tx.send(Taken { work, answer }).is_err() {
                break;
            }
        }
    });
    run_taken(prober, taken, concurrency).await;
    let _ = intake.await;
    let _ = answers.await;
    // The connection writes results as they come; one flush at the end makes sure the last ones are out
    // before the process exits (a flush per result cost a write and a wake-up each at thousands a second).
    let _ = link.client.flush().await;
    Ok(())
}

/// Work taken from the queue: one check or several, and where their results go.
pub struct Taken<A> {
    pub work: OneOrMany<CheckWork>,
    pub answer: A,
}

/// Work handed over in memory (`-queue memory`), its results back on the channel it names.
pub type MemWork = Taken<mpsc::UnboundedSender<CheckResult>>;

/// Where a check's result goes.
trait Answer: Clone + Send + 'static {
    fn answer(&self, result: CheckResult);
}

impl Answer for mpsc::UnboundedSender<CheckResult> {
    fn answer(&self, result: CheckResult) {
        // Fails only once the engine of this process is gone.
        let _ = self.send(result);
    }
}

/// To the engine that sent the work over NATS, through `send_results`.
#[derive(Clone)]
struct ToEngine {
    results: mpsc::UnboundedSender<ToSend>,
    reply: async_nats::Subject,
    /// The work came alone, not in an array (an engine from before batching): so goes its result.
    one: bool,
}

impl Answer for ToEngine {
    fn answer(&self, result: CheckResult) {
        let _ = self.results.send(ToSend { reply: self.reply.clone(), one: self.one, result });
    }
}

/// Runs the work taken, at most `concurrency` checks at once, until `taken` ends and every check taken is
/// done. Work waits in a `Backlog` while every slot is busy, is started in a random order from there, and work
/// older than its timeout plus the engine's grace is dropped there, unstarted and counted
/// (`jaque_worker_checks_expired_total`). So a worker sent more than it can run (say a mass of checks that each
/// run to their timeout) keeps no more than the work of the last timeout plus grace, and what it starts still
/// comes back while its engine waits: run in order, each check would start later than the last until every
/// result came too late and no transition was recorded at all.
async fn run_taken<A: Answer>(prober: Prober, mut taken: mpsc::UnboundedReceiver<Taken<A>>, concurrency: usize) {
    let limit = Arc::new(Semaphore::new(concurrency));
    let mut backlog = Waiting::default();
    let mut open = true;
    // A slot the loop waited for, used by the next turn's first start.
    let mut freed: Option<OwnedSemaphorePermit> = None;
    loop {
        // Whatever can start now, up to a message's worth before new work is taken again. A start done at once
        // (a connect on this host) never waits, so each spends from the task's budget: with `-queue memory` the
        // engine runs on this thread too, and gets its turn every so many of them.
        for _ in 0..wire::CHECKS_PER_MESSAGE {
            if backlog.is_empty() {
                break;
            }
            let Some(permit) = freed.take().or_else(|| limit.clone().try_acquire_owned().ok()) else { break };
            // Nothing worth starting (what waited has expired): the slot goes back.
            let Some((work, answer)) = backlog.next() else { break };
            start(&prober, work, answer, permit);
            tokio::task::consume_budget().await;
        }
        tokio::select! {
            biased;
            t = taken.recv(), if open => match t {
                Some(t) => backlog.take(t),
                None => open = false,
            },
            // A slot freed: the next turn starts from the backlog with it.
            permit = limit.clone().acquire_owned(), if !backlog.is_empty() => match permit {
                Ok(p) => freed = Some(p),
                Err(_) => break,
            },
            else => break,
        }
    }
    drop(freed);
    drain(&limit, concurrency).await;
}

/// Starts `work`: a result there at once goes back now, anything else on a task that holds the slot.
fn start<A: Answer>(prober: &Prober, work: CheckWork, answer: A, permit: OwnedSemaphorePermit) {
    match prober.start(work) {
        Started::Done(result) => answer.answer(result),
        Started::Running(check) => {
            tokio::spawn(async move {
                let result = check.await;
                answer.answer(result);
                drop(permit);
            });
        }
    }
}

/// The core's `Backlog` on this worker's clock (milliseconds since the worker started: a wall clock set back
/// or forward does not expire work), random source and metrics.
struct Waiting<A> {
    backlog: Backlog<(CheckWork, A)>,
    origin: Instant,
    rng: SmallRng,
}

impl<A> Waiting<A> {
    fn with_rng(rng: SmallRng) -> Waiting<A> {
        Waiting { backlog: Backlog::default(), origin: Instant::now(), rng }
    }

    fn now(&self) -> Time {
        Time(millis(self.origin.elapsed()))
    }

    /// `jaque_worker_checks_expired_total` and `jaque_worker_checks_waiting`, as the backlog is now.
    fn show(&mut self) {
        WORKER_CHECKS_EXPIRED.fetch_add(self.backlog.take_expired(), Ordering::Relaxed);
        WORKER_CHECKS_WAITING.store(self.backlog.len() as u64, Ordering::Relaxed);
    }

    fn is_empty(&self) -> bool {
        self.backlog.is_empty()
    }

    /// The work to start next (`Backlog::next`); how long it waited goes to `jaque_worker_check_wait_seconds`.
    fn next(&mut self) -> Option<(CheckWork, A)> {
        let (now, rng) = (self.now(), &mut self.rng);
        let next = self.backlog.next(now, |n| rng.random_range(0..n));
        self.show();
        let (work, waited) = next?;
        WORKER_CHECK_WAIT.lock().unwrap_or_else(|e| e.into_inner()).record(waited);
        Some(work)
    }
}

impl<A: Clone> Waiting<A> {
    fn take(&mut self, taken: Taken<A>) {
        let now = self.now();
        for work in taken.work.into_vec() {
            self.backlog.take(now, work.timeout(), (work, taken.answer.clone()));
        }
        self.show();
    }
}

impl<A> Default for Waiting<A> {
    fn default() -> Self {
        Waiting::with_rng(SmallRng::from_os_rng())
    }
}

/// A check's result on its way back to the engine that sent the work.
struct ToSend {
    reply: async_nats::Subject,
    one: bool,
    result: CheckResult,
}

/// Sends results back as they finish, all those finished at once to one engine in one message (up to
/// `CHECKS_PER_MESSAGE`): the checks of one message of work that finish together go back together.
async fn send_results(client: async_nats::Client, mut ready: mpsc::UnboundedReceiver<ToSend>) {
    let mut answers = Vec::new();
    while ready.recv_many(&mut answers, 1024).await > 0 {
        // Grouped by engine, in the order they finished within each.
        answers.sort_by(|a, b| a.reply.as_str().cmp(b.reply.as_str()).then(a.one.cmp(&b.one)));
        for group in answers.chunk_by(|a, b| a.reply == b.reply && a.one == b.one) {
            let size = if group[0].one { 1 } else { wire::CHECKS_PER_MESSAGE };
            for part in group.chunks(size) {
                let payload = match part {
                    [a] if a.one => wire::encode(&a.result),
                    _ => wire::encode(&part.iter().map(|a| &a.result).collect::<Vec<_>>()),
                };
                if let Err(e) = client.publish(part[0].reply.clone(), payload.into()).await {
                    tracing::warn!(error = %e, "returning check results");
                }
            }
        }
        answers.clear();
    }
}

/// Waits until every check in flight has finished (all permits are back).
async fn drain(limit: &Semaphore, concurrency: usize) {
    let _ = limit.acquire_many(u32::try_from(concurrency).unwrap_or(u32::MAX)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use jaque_core::{Probe, State};
    use std::time::Duration;

    fn check(check_id: u64, timeout_ms: u64) -> CheckWork {
        let object = jaque_core::ObjectId::new(format!("o{check_id}")).unwrap();
        CheckWork { check_id, object, probe: Probe::Tcp { addr: "127.0.0.1:9".into() }, timeout_ms }
    }

    #[test]
    fn every_check_of_a_message_waits_with_the_message_s_answer_and_comes_out_once() {
        let mut w = Waiting::with_rng(SmallRng::seed_from_u64(7));
        w.take(Taken { work: OneOrMany::Many((1..=3).map(|i| check(i, 1_000)).collect()), answer: "e1" });
        w.take(Taken { work: OneOrMany::One(check(4, 1_000)), answer: "e2" });
        let mut out: Vec<(u64, &str)> = std::iter::from_fn(|| w.next()).map(|(c, a)| (c.check_id, a)).collect();
        out.sort();
        assert_eq!(out, [(1, "e1"), (2, "e1"), (3, "e1"), (4, "e2")]);
        assert!(w.is_empty());
    }

    fn tcp_work(addr: &str) -> CheckWork {
        let object = jaque_core::ObjectId::new("web").unwrap();
        CheckWork { check_id: 7, object, probe: Probe::Tcp { addr: addr.into() }, timeout_ms: 5_000 }
    }

    #[tokio::test]
    async fn with_one_slot_each_check_starts_on_the_slot_the_last_one_freed_and_the_loop_ends_after_the_last() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = open.local_addr().unwrap().port();
        // A host name: each check runs on a task that holds the one slot, so every start after the first waits
        // for a slot to free.
        let work = (1..=5).map(|check_id| CheckWork { check_id, ..tcp_work(&format!("localhost:{port}")) });
        let (tx, taken) = mpsc::unbounded_channel();
        let (answer, mut results) = mpsc::unbounded_channel();
        tx.send(Taken { work: OneOrMany::Many(work.collect()), answer }).unwrap();
        drop(tx);
        let run = run_taken(Prober::new(None).unwrap(), taken, 1);
        tokio::time::timeout(Duration::from_secs(60), run).await.expect("the loop ends once every check is done");
        let mut done: Vec<(u64, State)> =
            std::iter::from_fn(|| results.try_recv().ok()).map(|r| (r.check_id, r.state)).collect();
        done.sort();
        assert_eq!(done, (1..=5).map(|i| (i, State::Ok)).collect::<Vec<_>>());
    }
}
