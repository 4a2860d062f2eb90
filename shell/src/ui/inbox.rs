//! Several answers to one request: a write a ui submits through ingress hears a claim (or a decline) and then
//! the outcome, from each attempt it sends, on reply subjects of its own (`<inbox>.<write>.<attempt>`). All of
//! them arrive on one subscription of the process's, which hands each to the write that waits for it, as the
//! NATS client's own request/reply does for single answers.

use async_nats::{Client, Message};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

type Routes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<(u32, Message)>>>>;

pub struct Inbox {
    prefix: String,
    routes: Routes,
    next: AtomicU64,
}

/// The answers to one write, until it is dropped (answers that come later are dropped with it).
pub struct Listener {
    id: u64,
    prefix: String,
    routes: Routes,
    rx: mpsc::UnboundedReceiver<(u32, Message)>,
}

impl Inbox {
    /// Subscribes to the process's inbox (the client subscribes again by itself after a reconnect).
    pub async fn open(client: &Client) -> Result<Inbox, String> {
        let prefix = client.new_inbox();
        let mut sub =
            client.subscribe(format!("{prefix}.>")).await.map_err(|e| format!("subscribing to {prefix}.>: {e}"))?;
        let routes: Routes = Arc::default();
        let to = routes.clone();
        let skip = prefix.len() + 1;
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let Some((id, attempt)) = msg.subject.get(skip..).and_then(parse_token) else {
                    crate::metrics::wire_error("answer on an unknown reply subject");
                    continue;
                };
                let route = to.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
                // None: the write has ended; an answer of an attempt it no longer waits for.
                if let Some(tx) = route {
                    let _ = tx.send((attempt, msg));
                }
            }
        });
        Ok(Inbox { prefix, routes, next: AtomicU64::new(0) })
    }

    pub fn listen(&self) -> Listener {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        Listener { id, prefix: self.prefix.clone(), routes: self.routes.clone(), rx }
    }
}

/// `<write>.<attempt>`.
fn parse_token(rest: &str) -> Option<(u64, u32)> {
    let (id, attempt) = rest.split_once('.')?;
    Some((id.parse().ok()?, attempt.parse().ok()?))
}

impl Listener {
    /// Where the answers to attempt `attempt` go.
    pub fn reply_subject(&self, attempt: u32) -> String {
        format!("{}.{}.{attempt}", self.prefix, self.id)
    }

    /// The next answer, with the attempt it answers.
    pub async fn recv(&mut self) -> Option<(u32, Message)> {
        self.rx.recv().await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_subject_names_the_write_and_the_attempt() {
        assert_eq!(parse_token("17.3"), Some((17, 3)));
        for bad in ["17", "x.3", "17.x", "17.3.1", ""] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }
}
