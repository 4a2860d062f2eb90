//! jaque-sim: a seeded, deterministic simulator that drives the unchanged `jaque-core` engines, sinks and
//! notifiers through a simulated store, log, network and databases with faults, and checks the invariants of
//! `docs/design.md` (§4, §8) as it goes (`sim/README.md` lists each with where it is checked).
//!
//! - [`params`]: what a seed draws (swarm testing), and the sub-seed streams.
//! - [`world`]: the simulated world: its event queue and step loop in `world/mod.rs`, one file per concern
//!   (the process lifecycle, faults, membership store, log, network, workload, snapshots), the roles (engines,
//!   sinks and their database, notifiers and their endpoints) and the checkers, one per invariant family.
//! - [`oracle`]: the independent log reader that holds the log's invariants.
//! - [`alerts`]: the oracle's own account of the alert rules (soft and hard states, flapping), invariant 14.
//! - [`run`]: one seed from start to verdict, with the replay line and trace on failure.
//! - [`scenario`]: a small API for hand-written cases.

pub mod alerts;
pub mod oracle;
pub mod params;
pub mod run;
pub mod scenario;
pub mod world;

pub use params::{
    FaultKind, IngressParams, NotifyParams, Params, PoolParams, Role, SinkParams, SnapshotParams, VersionParams,
};
pub use run::{run_seed, Report};
pub use world::{Category, IngressStats, NotifyStats, PoolStats, Sim, Via, Violation};
