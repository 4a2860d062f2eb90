#!/usr/bin/env bash
# The rolling-upgrade test (issue 33): builds the previous release's `jaque` from git and upgrades a running
# cluster of it to the current build one process at a time (tests/tests/upgrade.rs says what it starts, in
# what order it replaces them and what it checks; docs/upgrading.md, "The rolling-upgrade test", how long it takes).
#
# Usage: scripts/upgrade.sh [FROM_REF]
#   FROM_REF: the build to upgrade from (a tag, a branch, a commit). Default: the newest tag reachable from
#   HEAD^, or, where the clone has no tag (a CI clone may fetch none), 3911de7: the commit of v0.2.0. The test
#   takes each build's cluster format from the build itself (`jaque --version`) and needs FROM_REF to speak the
#   format just before this build's (the previous release): builds two formats apart may not share a cluster
#   (docs/upgrading.md), so an older FROM_REF (7954f1c, before v0.1.0: format 1) fails at once saying so.
#
# The previous build is made from `git archive` of FROM_REF in .tools/prev/<commit>/src (ignored by git; an
# archive, not a `git worktree`, so the repository's worktree list is left alone), with its own target
# directory .tools/prev/target, in the `ci` profile when FROM_REF has one, else `release`. The binary is kept
# as .tools/prev/<commit>/jaque: a second run with the same commit does not build it again.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$EPOCHREALTIME
# Seconds since $1 (an $EPOCHREALTIME), one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

from=${1:-}
if [ -z "$from" ]; then
  if ! from=$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null); then
    # No tag in this clone: v0.2.0's commit, the latest release (cluster format 3).
    from=3911de7
  fi
fi
commit=$(git rev-parse --verify --quiet "$from^{commit}") || {
  echo "upgrade: $from is not a commit of this repository" >&2
  exit 2
}
prev=.tools/prev/$commit
prev_bin=$root/$prev/jaque
echo "upgrade: from $from ($commit) to the working tree at $(git rev-parse --short HEAD)"

# The previous build, once per commit.
if [ -x "$prev_bin" ]; then
  echo "upgrade: previous build cached: $prev_bin"
else
  t=$EPOCHREALTIME
  rm -rf "$prev/src"
  mkdir -p "$prev/src"
  git archive --format=tar "$commit" | tar -x -C "$prev/src"
  if grep -q '^\[profile\.ci\]' "$prev/src/Cargo.toml"; then
    profile=ci
  else
    profile=release
  fi
  # The archive lies inside this checkout: GIT_CEILING_DIRECTORIES keeps a build script that asks git for the
  # commit (shell/build.rs, for `jaque --version`) from finding this checkout's HEAD instead ("unknown" it is).
  (cd "$prev/src" && GIT_CEILING_DIRECTORIES="$root/.tools/prev" CARGO_TARGET_DIR="$root/.tools/prev/target" \
    cargo build --locked --profile "$profile" --bin jaque)
  cp ".tools/prev/target/$profile/jaque" "$prev_bin.tmp"
  mv "$prev_bin.tmp" "$prev_bin"
  # The source is only needed to build; the binary is what the cache keeps.
  rm -rf "$prev/src"
  echo "upgrade: previous build ($profile profile) made in $(since "$t") s"
fi
"$prev_bin" --version | head -1 | sed 's/^/upgrade: previous: /'

# What the integration tests need, as scripts/test.sh installs it.
scripts/install-nats.sh
export JAQUE_NATS_SERVER="$root/.tools/bin/nats-server"
scripts/install-postgres.sh

# The current build, in the profile the tests use (they run target/ci/jaque as the new build).
t=$EPOCHREALTIME
cargo build --profile ci --bin jaque
echo "upgrade: current build in $(since "$t") s"
target/ci/jaque --version | head -1 | sed 's/^/upgrade: current: /'

export JAQUE_PREVIOUS_BIN=$prev_bin
t=$EPOCHREALTIME
status=0
cargo test --profile ci -p jaque-tests --test upgrade -- --nocapture || status=$?
echo "upgrade: tests in $(since "$t") s; whole run $(since "$start") s (exit $status)"
exit $status
