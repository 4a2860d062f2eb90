//! Gives the binary the git commit it is built from, for `jaque --version`: `JAQUE_COMMIT` is the short hash,
//! or `unknown` where the source is not a git checkout (a tarball, a vendored crate) or git is not installed.
//! The build script runs again when HEAD moves (a commit, a checkout), and only then.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let commit = git(&dir, &["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        // HEAD itself (a checkout of another branch or commit) and the branch it names (a commit on it); in a
        // worktree both live outside the source tree, which is why git is asked where they are.
        let mut watched = vec![git(&dir, &["rev-parse", "--git-path", "HEAD"])];
        if let Some(branch) = git(&dir, &["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|b| b != "HEAD") {
            watched.push(git(&dir, &["rev-parse", "--git-path", &branch]));
            watched.push(git(&dir, &["rev-parse", "--git-path", "packed-refs"]));
        }
        for path in watched.into_iter().flatten().map(|p| dir.join(p)) {
            // A path that does not exist would make cargo run this script on every build.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rustc-env=JAQUE_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
