//! jaque-core: the coordination logic of jaque as pure, deterministic state machines.
//!
//! No async, no I/O, no clock reads, no global randomness: time comes in as a [`Time`] value with every
//! input, decisions come out as values. The simulator (`jaque-sim`) and the production binary (`jaque`) drive
//! the very same machines.
//!
//! The nouns:
//! - [`model`]: members, buckets, objects, checks, commands, outcomes, and the log's entries (plain data).
//! - [`time`]: time as a value (milliseconds), and the RFC 3339 text every process writes.
//! - [`secret`]: what is a secret and how reads show it (`***`).
//! - [`wire`]: encoding and decoding of every message the shell sends and receives.
//! - [`format`]: the versions of what jaque writes and reads, and the cluster's active format.
//! - [`io`]: why a request the core asked its driver for failed (`IoError`), for every role alike.
//!
//! The pieces every role is built from:
//! - [`membership`]: heartbeat membership per bucket (`membership/`, `sink/membership/`, `notifier/membership/`),
//!   and the lease a member holds while its own key is surely alive.
//! - [`hrw`]: rendezvous-hash ownership with a stable, documented hash.
//! - [`log`]: the fence (verdicts in log order) and the fold (object state, applied command ids).
//! - [`alert`]: soft and hard states, retries, recovery thresholds and flapping: how results become alerts.
//! - [`follow`]: a member that follows the log (membership, the reader, the hole it may wait at).
//! - [`deadlines`]: deadlines of one kind, soonest first: one named timer of a role's table.
//! - [`backoff`]: retry delays with jitter from a hash, not a random generator.
//! - [`compact`]: when the log gets a snapshot, who writes it, and what compaction may then remove.
//!
//! The roles (each driven as `handle` / `poll_output` / `poll_timeout`):
//! - [`engine`]: owns objects under the epoch in force, applies and forwards commands (one hop: [`forward`]),
//!   schedules checks ([`schedule`]) and folds their results, proposes epochs, claims ingress writes.
//! - [`role`]: what the sink and the notifier share: a member of its own bucket handed the accepted events of
//!   the objects it owns by HRW over that bucket, in log order per object.
//! - [`sink`]: every accepted event into a store, exactly once.
//! - [`notifier`]: every accepted transition to every webhook endpoint, at least once.
//! - [`backlog`]: what a worker whose check slots are all busy starts next, and what it drops unstarted.
//! - [`ui`]: where a ui write goes, and `IngressWrite`: a write sent again until one engine claims it.
//!
//! `docs/design.md` is the design these implement, with the invariants the simulator checks of them.

pub mod alert;
pub mod backlog;
pub mod backoff;
pub mod compact;
pub mod deadlines;
pub mod engine;
pub mod follow;
pub mod format;
pub mod forward;
pub mod hrw;
pub mod io;
pub mod labels;
pub mod log;
pub mod membership;
pub mod model;
pub mod notifier;
pub mod policy;
pub mod role;
pub mod schedule;
pub mod secret;
pub mod sink;
pub mod time;
pub mod ui;
pub mod wire;

pub use compact::SnapshotConfig;
pub use engine::{
    CheckBatching, CheckResult, CheckWork, Engine, EngineConfig, EngineCounters, ForwardId, Input, Lateness, Output,
    ReplyTo, Timer, CHECK_GRACE, LATENESS_BOUNDS_MS,
};
pub use follow::{Life, LifeOutput};
pub use io::IoError;
pub use log::{Effect, Fence, LogReader, Read, ReaderSnapshot, StaleReason, Verdict};
pub use membership::{LiveSet, MemberChange, MemberObservation, Membership, MembershipOutput};
pub use model::*;
pub use secret::SensitiveUrl;
pub use time::Time;
