//! jaque-core: the coordination logic of jaque as pure, deterministic state machines.
//!
//! No async, no I/O, no clock reads, no global randomness: time comes in as a [`Time`] value with every
//! input, decisions come out as values. The simulator (`jaque-sim`) and the production binary (`jaque`) drive
//! the very same machines.
//!
//! - [`membership`]: heartbeat membership per bucket (`membership/`, `sink/membership/`, `notifier/membership/`).
//! - [`hrw`]: rendezvous-hash ownership with a stable, documented hash.
//! - [`log`]: the fence (verdicts in log order) and the fold (object state, applied command ids).
//! - [`forward`]: the one-hop routing rule.
//! - [`schedule`]: the check schedule as a function of the log.
//! - [`engine`]: the engine node that ties them together, driven as `handle` / `poll_output` / `poll_timeout`.
//! - [`backlog`]: what a worker whose check slots are all busy starts next, and what it drops unstarted.
//! - [`ui`]: where a ui write goes, and `IngressWrite`: a write sent again until one engine claims it.
//! - [`secret`]: what is a secret and how reads show it (`***`).
//! - [`wire`]: encoding and decoding of every message the shell sends and receives.

pub mod backlog;
pub mod backoff;
pub mod compact;
pub mod deadlines;
pub mod engine;
pub mod follow;
pub mod forward;
pub mod hrw;
pub mod log;
pub mod membership;
pub mod model;
pub mod notifier;
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
pub use log::{Effect, Fence, LogReader, Read, ReaderSnapshot, StaleReason, Verdict};
pub use membership::{LiveSet, MemberChange, MemberObservation, Membership, MembershipOutput};
pub use model::*;
pub use secret::SensitiveUrl;
pub use time::Time;
