//! Helpers for integration tests against real processes.
