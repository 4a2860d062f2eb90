//! The ui's loop in a process without an engine: follows the log and membership (the `Subscription`), folds the
//! log with a `LogReader`, answers reads, and publishes the ownership in force so writes can go straight to
//! their owner. Its metrics are beside it.

use super::stream::Feed;
use super::views::{self, UiRequest};
use crate::coord::Coordination;
use crate::follow::snapshots::{self, Restores};
use crate::follow::{Followed, Subscription};
use crate::metrics::Exposition;
use jaque_core::follow::Tail;
use jaque_core::hrw::Ownership;
use jaque_core::log::Read;
use jaque_core::{LogReader, Outcome};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// What is in force as a ui's log view has it: the ownership, for sending writes straight to their owner, and the
/// cluster's active format, for refusing a write the cluster may not have yet (`jaque_core::format::refusal`).
#[derive(Clone, Debug, Default)]
pub struct InForce {
    pub ownership: Option<Arc<Ownership>>,
    pub active_format: u32,
}

pub type Owners = watch::Receiver<InForce>;

/// Runs until the HTTP side is gone. Once caught up, publishes the ownership of each epoch it reads to
/// `owners`.
pub async fn run_reader(
    coord: Coordination,
    mut ui: mpsc::Receiver<UiRequest>,
    owners: watch::Sender<InForce>,
    mut feed: Feed,
) -> Result<(), String> {
    // Start from the latest snapshot, and read only the log after it.
    let mut tail = Tail::new(snapshots::latest_reader(&coord).await.unwrap_or_default());
    let mut follow = Subscription::start(&coord, tail.reader().position() + 1).await?;
    let publish = |reader: &LogReader| {
        owners.send_replace(InForce {
            ownership: reader.fence().current_ownership().cloned().map(Arc::new),
            active_format: reader.fence().active_format(),
        });
    };
    let mut restores = Restores::default();
    let (restored_tx, mut restored) = mpsc::unbounded_channel::<snapshots::Restored>();
    let mut ask_again = tokio::time::interval(std::time::Duration::from_secs(2));
    loop {
        let read = tokio::select! {
            Some(f) = follow.next() => match f {
                Followed::Member(obs) => {
                    feed.members(follow.buckets(), obs.bucket);
                    None
                }
                Followed::Log { seq, entry } => {
                    let before = feed.before(tail.reader(), &entry);
                    let read = tail.read(seq, &entry);
                    feed.after(before, seq, tail.reader());
                    Some(read)
                }
                Followed::Unreadable { seq } => Some(tail.skip(seq)),
                Followed::TooNew { seq, needs } => {
                    let read = tail.read_too_new(seq, needs);
                    if let Some(reason) = tail.blocked_reason() {
                        tracing::error!(seq, needs, "ui: {reason}");
                    }
                    Some(read)
                }
                Followed::CaughtUp => {
                    publish(tail.reader());
                    feed.reload("caught up with the log");
                    None
                }
            },
            Some(r) = restored.recv() => {
                restores.answered();
                let before = tail.reader().position();
                let r = match r {
                    Ok(r) => r,
                    // A snapshot of a newer build past the hole: this ui cannot get past it (not ready, saying so).
                    Err((seq, needs)) => {
                        tail.read_too_new(seq, needs);
                        None
                    }
                };
                if r.is_some_and(|r| tail.restore(r)) {
                    let position = tail.reader().position();
                    tracing::info!(from = before, to = position, "ui: jumped past a hole in the log to a snapshot");
                    follow.refollow_log(&coord, position + 1).await;
                    publish(tail.reader());
                    feed.reload("jumped to a snapshot");
                }
                None
            }
            _ = ask_again.tick(), if tail.hole().is_some() => {
                let tx = restored_tx.clone();
                restores.ask(&coord, tail.hole().unwrap_or_default(), move |r| { let _ = tx.send(r); });
                None
            }
            req = ui.recv() => match (req, tail.reader()) {
                (None, _) => return Ok(()),
                (Some(UiRequest::Objects { lookup, reply }), reader) => { let _ = reply.send(views::objects(reader, lookup)); None }
                (Some(UiRequest::Cluster { reply }), reader) => { let _ = reply.send(views::cluster(reader, follow.buckets())); None }
                (Some(UiRequest::Metrics { reply }), reader) => { let _ = reply.send(metrics(reader, &follow)); None }
                (Some(UiRequest::Health { reply }), _) => {
                    let status = match (follow.resyncing(), tail.hole()) {
                        _ if tail.blocked_reason().is_some() => (false, tail.blocked_reason().unwrap_or_default()),
                        (Some(reason), _) => (false, reason),
                        (None, Some(covering)) => (false, jaque_core::compact::hole_reason(covering)),
                        (None, None) if follow.is_caught_up() => (true, "ready".into()),
                        (None, None) => (false, "reading the log".into()),
                    };
                    let _ = reply.send(status);
                    None
                }
                (Some(UiRequest::Write { reply, .. }), _) => {
                    // Writes of an engine-less ui go through ingress in the HTTP layer; this is a wiring bug.
                    let _ = reply.send(Outcome::Unavailable { reason: "no engine in this process".into() });
                    None
                }
            },
        };
        match read {
            Some(Read::EpochInstalled) if follow.is_caught_up() => publish(tail.reader()),
            Some(Read::Gap { got, .. }) => {
                let tx = restored_tx.clone();
                restores.ask(&coord, got - 1, move |r| {
                    let _ = tx.send(r);
                });
            }
            _ => {}
        }
    }
}

fn metrics(reader: &LogReader, follow: &Subscription) -> String {
    let mut m = Exposition::default();
    m.one("jaque_ui_epoch", "gauge", "The epoch in force in the log this ui follows.", reader.epoch());
    m.one("jaque_ui_log_position", "gauge", "The last log position read.", reader.position());
    m.one(
        "jaque_ui_stale_events_total",
        "counter",
        "Events in the log discarded by the fence.",
        reader.counters.stale_epoch_total,
    );
    follow.buckets().expose(&mut m);
    m.0
}
