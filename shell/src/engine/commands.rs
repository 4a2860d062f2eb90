//! The engine's command subjects (`jaque.cmd.<id>`: forwards, and a ui's writes to the owner it knows; the
//! ingress queue group): every request on them is answered. Bytes that are not a command are answered here at
//! once with the core's `wire::rejection` and counted, and never reach the engine's loop; a message without a
//! reply subject is counted and dropped.

use crate::metrics;
use futures_util::StreamExt;
use jaque_core::wire;
use jaque_core::Command;
use tokio::sync::{mpsc, oneshot};

/// A command from NATS (ingress, hop 0, or a forward, hop 1) with the subject its answers go to. `claim`: its
/// submitter asked for a claim.
pub struct Received {
    pub cmd: Command,
    pub reply: async_nats::Subject,
    pub claim: bool,
}

/// Feeds commands from a subscription to the loop until told to leave; then unsubscribes and still hands
/// over what was already delivered, so no claimed command goes unanswered. Bytes that are not a command are
/// answered at once with the core's rejection (the engine never sees them).
pub fn spawn_reader<T: From<Received> + Send + 'static>(
    mut sub: async_nats::Subscriber,
    client: async_nats::Client,
    tx: mpsc::UnboundedSender<T>,
) -> oneshot::Sender<()> {
    let (leave_tx, mut leave) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut left = false;
        loop {
            let msg = tokio::select! {
                m = sub.next() => m,
                r = &mut leave, if !left => {
                    left = true;
                    // A dropped sender means "stay until the end".
                    if r.is_ok() {
                        let _ = sub.unsubscribe().await;
                    }
                    continue;
                }
            };
            let Some(msg) = msg else { return };
            let Some(reply) = msg.reply else {
                // Nobody to tell: counted, and dropped before it could have any effect.
                metrics::wire_error("command without reply subject");
                continue;
            };
            match wire::decode_request(&msg.payload) {
                Ok(wire::Request { cmd, claim }) => {
                    if tx.send(Received { cmd, reply, claim }.into()).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(subject = %msg.subject, error = %e, "rejecting a malformed command");
                    metrics::wire_error("command");
                    let answer = wire::encode(&wire::rejection(&e));
                    if let Err(e) = client.publish(reply, answer.into()).await {
                        tracing::warn!(error = %e, "replying to a command");
                    }
                }
            }
        }
    });
    leave_tx
}
