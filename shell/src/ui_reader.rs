//! The ui's loop in a process without an engine: follows the log and membership (the `Follower`), folds the
//! log with a `LogReader`, answers reads, and publishes the ownership in force so writes can go straight to
//! their owner. Its metrics are beside it.

use crate::coord::Coordination;
use crate::follow::{Followed, Follower};
use crate::metrics::Exposition;
use crate::views::{self, UiRequest};
use jaque_core::hrw::Ownership;
use jaque_core::log::Read;
use jaque_core::{LogReader, Outcome};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// The ownership in force as a ui's log view has it, for sending writes straight to their owner.
pub type Owners = watch::Receiver<Option<Arc<Ownership>>>;

/// Runs until the HTTP side is gone. Once caught up, publishes the ownership of each epoch it reads to
/// `owners`.
pub async fn run_reader(
    coord: Coordination,
    mut ui: mpsc::Receiver<UiRequest>,
    owners: watch::Sender<Option<Arc<Ownership>>>,
) -> Result<(), String> {
    let mut follow = Follower::start(&coord, 1).await?;
    let mut reader = LogReader::new();
    let publish = |reader: &LogReader| {
        owners.send_replace(reader.fence().current_ownership().cloned().map(Arc::new));
    };
    loop {
        tokio::select! {
            Some(f) = follow.next() => match f {
                Followed::Member(_) => {}
                Followed::Log { seq, entry } => {
                    if matches!(reader.read(seq, &entry), Read::EpochInstalled) && follow.is_caught_up() {
                        publish(&reader);
                    }
                }
                Followed::CaughtUp => publish(&reader),
            },
            req = ui.recv() => match req {
                None => return Ok(()),
                Some(UiRequest::Objects { id, reply }) => { let _ = reply.send(views::objects(&reader, id.as_ref())); }
                Some(UiRequest::Cluster { reply }) => { let _ = reply.send(views::cluster(&reader, follow.buckets())); }
                Some(UiRequest::Metrics { reply }) => { let _ = reply.send(metrics(&reader, &follow)); }
                Some(UiRequest::Health { reply }) => {
                    let status =
                        if follow.is_caught_up() { (true, "ready".into()) } else { (false, "reading the log".into()) };
                    let _ = reply.send(status);
                }
                Some(UiRequest::Write { reply, .. }) => {
                    // Writes of an engine-less ui go through ingress in the HTTP layer; this is a wiring bug.
                    let _ = reply.send(Outcome::Unavailable { reason: "no engine in this process".into() });
                }
            },
        }
    }
}

fn metrics(reader: &LogReader, follow: &Follower) -> String {
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
