//! Replays the committed fuzz inputs (`fuzz/regressions/<target>/`) through the very checks the cargo-fuzz
//! targets run, so a plain `cargo test` keeps every bug the fuzzers found fixed. The checks are included
//! from `fuzz/src/checks/` (they depend on nothing but jaque-core, serde and std); see `fuzz/README.md`.

#[allow(dead_code)]
#[path = "../../fuzz/src/checks/mod.rs"]
mod checks;

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let mut failed = Vec::new();
    for path in inputs(target) {
        let data = std::fs::read(&path).expect("readable input");
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} input(s) fail; reproduce one with `cargo fuzz run --sanitizer none {target} <file>` in fuzz/:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn engine_inputs_replay() {
    replay("engine", checks::engine::check);
}

#[test]
fn fence_inputs_replay() {
    replay("fence", checks::fence::check);
}

#[test]
fn wire_inputs_replay() {
    replay("wire", checks::wire::check);
}

#[test]
fn membership_inputs_replay() {
    replay("membership", checks::membership::check);
}

#[test]
fn roles_inputs_replay() {
    replay("roles", checks::roles::check);
}

#[test]
fn selector_inputs_replay() {
    replay("selector", checks::selector::check);
}
