//! The plumbing every role that reads the log as a member of its own bucket shares (the engine, the sink, the
//! notifier): the `Subscription` (membership watch and log follower), the heartbeat writer, its answers and its
//! leave flush, replays of a range of the log (a resume reading again what an object's previous owner may not
//! have handled), each bounded in time, loads of the latest snapshot after a hole in the log, the role's own I/O
//! answers (every one that has arrived, at once), the core's single timer, the signal to leave, and the HTTP
//! side's questions (health, metrics) — all as one cancel-safe `next()` for the role's loop, which only says
//! what each wake-up means to its core. Everything of the life reaches the loop as one `Wake::Life(Life)`,
//! handed to the core as its role's `Input::Life`; the loop ends when the core's `is_done()` says so (each core
//! bounds its own leave).

use super::heartbeat::{spawn_heartbeat_writer, HeartbeatWriter};
use super::snapshots::{self, Restores};
use super::subscription::{Buckets, Subscription};
use crate::clock::{far_future, instant_at};
use crate::coord::Coordination;
use jaque_core::membership::MembershipOutput;
use jaque_core::{IoError, Life, LogEntry, LogReader, Time};
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Sleep;

/// A question from the HTTP side to a role's loop.
pub enum RoleQuery {
    /// Ready, or not with the reason.
    Health(oneshot::Sender<(bool, String)>),
    /// The role's part of `/metrics`.
    Metrics(oneshot::Sender<String>),
}

/// How the HTTP side reaches a role's loop: its name (for `/healthz` reasons) and its question channel.
#[derive(Clone)]
pub struct RoleHandle {
    pub name: &'static str,
    pub queries: mpsc::Sender<RoleQuery>,
}

impl RoleHandle {
    /// A handle and the receiving end the role's loop answers on.
    pub fn new(name: &'static str) -> (RoleHandle, mpsc::Receiver<RoleQuery>) {
        let (queries, rx) = mpsc::channel(64);
        (RoleHandle { name, queries }, rx)
    }

    pub async fn health(&self) -> (bool, String) {
        let (tx, rx) = oneshot::channel();
        if self.queries.send(RoleQuery::Health(tx)).await.is_err() {
            return (false, "stopped".into());
        }
        rx.await.unwrap_or((false, "stopped".into()))
    }

    pub async fn metrics(&self) -> String {
        let (tx, rx) = oneshot::channel();
        if self.queries.send(RoleQuery::Metrics(tx)).await.is_err() {
            return String::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// The answer to a replay: the last position covered and the entries found, or why not.
pub type Replayed = Result<(u64, Vec<(u64, LogEntry)>), IoError>;

/// What woke the role's loop.
pub enum Wake<T> {
    /// An input of the member's life: a membership change, a log entry, caught up, a heartbeat put's answer
    /// (every put is answered, in order; `Life::HeartbeatWritten`).
    Life(Life),
    Replayed {
        token: u64,
        result: Replayed,
    },
    /// The latest snapshot, loaded after `restore` (`None`: none reaches the hole yet).
    Restored(Option<Box<LogReader>>),
    /// The role's own I/O answers (a store write, a webhook send, a check result), sent on `done()`: every one
    /// that has arrived, up to `DONE_PER_TURN`, in the order sent (checks dispatched together come back
    /// together, and the role carries out its outputs once for them).
    Done(Vec<T>),
    Query(RoleQuery),
    /// The core's timer is due.
    Timeout,
    /// The process is shutting down: the role leaves its bucket (once).
    Leave,
}

/// How long one replay read may take before the core is told it failed (and retries after its backoff).
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// At most this many of the role's own answers per wake-up, so a flood of them (check results) cannot hold back
/// the timer, the log or the questions for long.
const DONE_PER_TURN: usize = 1024;

pub struct Reading<T> {
    coord: Coordination,
    follow: Option<Subscription>,
    heartbeats: HeartbeatWriter,
    /// Whether each heartbeat put reached the store, in the order they were queued.
    acks: mpsc::UnboundedReceiver<bool>,
    replays_tx: mpsc::UnboundedSender<(u64, Replayed)>,
    replays: mpsc::UnboundedReceiver<(u64, Replayed)>,
    /// Loads of the latest snapshot, one at a time.
    restores: Restores,
    restored_tx: mpsc::UnboundedSender<snapshots::Restored>,
    restored: mpsc::UnboundedReceiver<snapshots::Restored>,
    done_tx: mpsc::UnboundedSender<T>,
    done: mpsc::UnboundedReceiver<T>,
    queries: mpsc::Receiver<RoleQuery>,
    shutdown: watch::Receiver<bool>,
    left: bool,
    empty: Buckets,
    /// The core's timer: one for the loop's life, moved only when the core's next deadline moves (most
    /// wake-ups, a result or a log entry, leave it where it is).
    timer: Pin<Box<Sleep>>,
    armed: Option<Time>,
}

impl<T: Send + 'static> Reading<T> {
    /// The plumbing, not yet following anything: a role that must first reach its own store answers health
    /// questions and the shutdown meanwhile, and calls `follow` when it is ready to read.
    pub fn new(coord: Coordination, queries: mpsc::Receiver<RoleQuery>, shutdown: watch::Receiver<bool>) -> Self {
        let (done_tx, done) = mpsc::unbounded_channel();
        let (acks_tx, acks) = mpsc::unbounded_channel();
        let heartbeats = spawn_heartbeat_writer(coord.clone(), move |ok| {
            let _ = acks_tx.send(ok);
        });
        let (replays_tx, replays) = mpsc::unbounded_channel();
        let (restored_tx, restored) = mpsc::unbounded_channel();
        Reading {
            coord,
            follow: None,
            heartbeats,
            acks,
            replays_tx,
            replays,
            restores: Restores::default(),
            restored_tx,
            restored,
            done_tx,
            done,
            queries,
            shutdown,
            left: false,
            empty: Buckets::default(),
            timer: Box::pin(tokio::time::sleep_until(far_future())),
            armed: None,
        }
    }

    /// Starts watching membership and following the log from position `from` (1, or the position after the
    /// snapshot the role's reader started from).
    pub async fn follow(&mut self, from: u64) -> Result<(), String> {
        self.follow = Some(Subscription::start(&self.coord, from).await?);
        Ok(())
    }

    /// Follows the log again from position `from`, after the role's reader jumped to a snapshot.
    pub async fn refollow(&mut self, from: u64) -> Result<(), String> {
        match self.follow.as_mut() {
            Some(f) => {
                f.refollow_log(&self.coord, from).await;
                Ok(())
            }
            None => self.follow(from).await,
        }
    }

    /// Why the follower is not following the store right now, while it is being made again.
    pub fn resyncing(&self) -> Option<String> {
        self.follow.as_ref().and_then(Subscription::resyncing)
    }

    /// Whether the follower is being made again (`resyncing` says why), without making the reason.
    pub fn is_resyncing(&self) -> bool {
        self.follow.as_ref().is_some_and(Subscription::is_resyncing)
    }

    pub fn coord(&self) -> &Coordination {
        &self.coord
    }

    pub fn is_following(&self) -> bool {
        self.follow.is_some()
    }

    /// Whether the shutdown signal has been seen (`Wake::Leave` was returned).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The live members of every bucket, as the watch reported them so far.
    pub fn buckets(&self) -> &Buckets {
        self.follow.as_ref().map_or(&self.empty, Subscription::buckets)
    }

    /// Where the role's own I/O tasks send their answers (`Wake::Done`).
    pub fn done(&self) -> mpsc::UnboundedSender<T> {
        self.done_tx.clone()
    }

    /// Queues a heartbeat put or the key's delete, as the core's membership asked.
    pub fn heartbeat(&self, m: MembershipOutput) {
        self.heartbeats.write(m);
    }

    /// Loads the latest snapshot for a hole in the log ending at `covering`, unless a load is running; the
    /// answer comes back as `Wake::Restored`.
    pub fn restore(&mut self, covering: u64) {
        let tx = self.restored_tx.clone();
        self.restores.ask(&self.coord, covering, move |reader| {
            let _ = tx.send(reader);
        });
    }

    /// A role's readiness as `/healthz` says it: what the role says of itself, unless the follower is being
    /// made again while the role is not leaving (a leaving role says so itself).
    pub fn health(&self, leaving: bool, (ready, reason): (bool, String)) -> (bool, String) {
        match self.resyncing() {
            Some(resyncing) if !leaving => (false, resyncing),
            _ => (ready, reason),
        }
    }

    /// Reads `from..=to` of the log again in a task; the answer comes back as `Wake::Replayed`.
    pub fn replay(&self, token: u64, from: u64, to: u64) {
        let (coord, tx) = (self.coord.clone(), self.replays_tx.clone());
        tokio::spawn(async move {
            let result = match tokio::time::timeout(REPLAY_TIMEOUT, coord.replay(from, to)).await {
                Ok(r) => r.map_err(IoError::Unavailable),
                Err(_) => Err(IoError::Timeout),
            };
            if let Err(e) = &result {
                tracing::warn!(from, to, error = %e, bound = ?REPLAY_TIMEOUT, "replaying the log");
            }
            let _ = tx.send((token, result));
        });
    }

    /// The next wake-up, with the core's timer at `deadline`. Cancel-safe. `None` once the follower is gone
    /// (the process ends).
    pub async fn next(&mut self, deadline: Option<Time>) -> Option<Wake<T>> {
        if deadline != self.armed {
            if let Some(t) = deadline {
                self.timer.as_mut().reset(instant_at(t));
            }
            self.armed = deadline;
        }
        let armed = self.armed.is_some();
        let following = self.follow.is_some();
        let mut batch = Vec::new();
        tokio::select! {
            f = async { self.follow.as_mut().expect("following").next().await }, if following => f.map(|f| Wake::Life(f.into())),
            Some(ok) = self.acks.recv() => Some(Wake::Life(Life::HeartbeatWritten { ok })),
            Some((token, result)) = self.replays.recv() => Some(Wake::Replayed { token, result }),
            Some(restored) = self.restored.recv() => {
                self.restores.answered();
                match restored {
                    Ok(reader) => Some(Wake::Restored(reader.map(Box::new))),
                    Err((seq, needs)) => Some(Wake::Life(Life::LogTooNew { seq, needs })),
                }
            }
            n = self.done.recv_many(&mut batch, DONE_PER_TURN) => match n {
                0 => None,
                _ => Some(Wake::Done(batch)),
            },
            Some(q) = self.queries.recv() => Some(Wake::Query(q)),
            _ = &mut self.timer, if armed => {
                self.armed = None;
                Some(Wake::Timeout)
            }
            _ = self.shutdown.wait_for(|s| *s), if !self.left => {
                self.left = true;
                Some(Wake::Leave)
            }
        }
    }

    /// Waits (a bounded time) until the key's delete queued by the core's leave reached the store.
    pub async fn flush_leave(&self) {
        self.heartbeats.flush_leave().await;
    }
}
