//! jaque-sim: a seeded, deterministic simulator that drives the unchanged `jaque-core` engines through a
//! simulated store, log and network with faults, and checks DESIGN.md §4's invariants as it goes.
//!
//! - [`params`]: what a seed draws (swarm testing), and the sub-seed streams.
//! - [`world`]: the simulated world: its event queue and step loop in `world/mod.rs`, one file per concern
//!   (process lifecycle, membership store, log, network, faults, workload, engines, checks, notifiers and
//!   their endpoints).
//! - [`oracle`]: the independent log reader that holds the log's invariants.
//! - [`run`]: one seed from start to verdict, with the replay line and trace on failure.
//! - [`scenario`]: a small API for hand-written cases.

pub mod oracle;
pub mod params;
pub mod run;
pub mod scenario;
pub mod world;

pub use params::{FaultKind, IngressParams, NotifyParams, Params, PoolParams, SinkParams, SnapshotParams};
pub use run::{run_seed, Report};
pub use world::{Category, IngressStats, NotifyStats, PoolStats, Sim, Via, Violation};
