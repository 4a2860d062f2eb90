//! The checks the fuzz targets run. They live in `checks/` and depend on nothing but `jaque-core` and `std`,
//! so `core/tests/fuzz_regressions.rs` includes the very same files and replays `fuzz/regressions/` from a
//! plain `cargo test`.

pub mod checks;
