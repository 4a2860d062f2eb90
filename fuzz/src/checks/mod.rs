//! Property checks over arbitrary bytes, one module per fuzz target. Each `check(data)` turns any byte string
//! into a scenario (never failing to parse) and panics only when jaque-core breaks a property.
//!
//! This directory is also compiled into `core/tests/fuzz_regressions.rs` by `#[path]`: keep it free of any
//! dependency but `jaque_core`, `serde` (a dependency of core) and `std`, and refer to siblings with `super::`.

pub mod bytes;
pub mod engine;
pub mod fence;
pub mod membership;
pub mod roles;
pub mod selector;
pub mod wire;
