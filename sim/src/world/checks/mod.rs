//! The checkers of the world, one module per invariant family (`sim/README.md`, "Invariants and where they are
//! checked"); the log's own invariants (1, 5, 6, 8) are the [`Oracle`](crate::oracle::Oracle)'s.
//!
//! - [`engines`]: 2 agreement, 3 one hop, 4 accounting as the run goes; 7 failover and 4 again at its end.
//! - [`notifications`]: 9, over what the notifiers sent and the endpoints received.
//! - [`sink_store`]: 10, over what the sinks' SQL store holds at every commit and at the end.
//! - [`sink_progress`]: 10's progress rows: at every commit, what a sink's progress position promises is in
//!   the store.
//! - [`takeover`]: 7's takeovers: after an engine takes an object over, its possibly-missed slot is dispatched
//!   within the spread core promises, never one interval later.
//! - [`snapshots`]: 11, over readers started from stored snapshots and from processes' readers.
//! - [`write_liveness`]: 12, over every write through ingress as it ends.
//! - [`policy`]: 15, every reader's notification policy against the oracle's at every policy change.
//! - [`worker_backlog`]: a worker's backlog never starts work past its timeout and grace (it drops it), and
//!   accounts for every piece it took.

pub(super) mod engines;
pub(super) mod notifications;
pub(super) mod policy;
pub(super) mod sink_progress;
pub(super) mod sink_store;
pub(super) mod snapshots;
pub(super) mod takeover;
pub(super) mod worker_backlog;
pub(super) mod write_liveness;

pub use notifications::AcceptedTransition;
