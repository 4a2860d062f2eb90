//! The NATS subjects and queue groups jaque talks on (the JetStream bucket and stream names are the store's,
//! in `coord/`). The names are a public contract: `docs/wire.md` documents them for clients.

use jaque_core::{MemberId, MemberRef};

/// The subject all engines join as one queue group for commands with no known owner (a ui's writes, clients).
pub const INGRESS_SUBJECT: &str = "jaque.work.cmd.ingress";
pub const INGRESS_GROUP: &str = "jaque-engines";

/// The subject an engine takes commands on: forwards, and writes sent straight to it as the owner.
pub fn cmd_subject(id: &MemberId) -> String {
    format!("jaque.cmd.{id}")
}

/// Subject engines publish check work on (on the `-queue` server); workers take it as one queue group.
pub const WORK_SUBJECT: &str = "jaque.work.check";
pub const WORKER_GROUP: &str = "jaque-workers";

/// Where the workers send the results of one engine incarnation's check work.
pub fn results_subject(me: &MemberRef) -> String {
    format!("jaque.work.result.{}.{}", me.id, me.incarnation)
}
