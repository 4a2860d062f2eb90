#!/usr/bin/env bash
# Writes tests/compat/VERSION/: what this build writes (a log and its snapshot, KV values, messages, a -data-dir
# with its SQLite sink store, a PostgreSQL sink store), which tests/tests/compat.rs reads with every build after
# it. VERSION is this build's own ("v" and the workspace version). A release's directory is never edited once
# the release is tagged; before that, --replace writes it again (after a format change). tests/compat/README.md
# says what each file is.
# Usage: scripts/write-compat-fixtures.sh VERSION [--replace]
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/write-compat-fixtures.sh VERSION [--replace]   (e.g. v0.1.0)"
version="${1:-}"
replace="${2:-}"
if [[ -z "$version" || ( -n "$replace" && "$replace" != --replace ) || $# -gt 2 ]]; then
  echo "$usage" >&2
  exit 2
fi
dir="tests/compat/$version"
if [[ -e "$dir" ]]; then
  if git rev-parse -q --verify "refs/tags/$version" >/dev/null; then
    echo "$dir is the fixtures of the released $version (tag $version): a release's fixtures are never edited" >&2
    exit 1
  fi
  if [[ "$replace" != --replace ]]; then
    echo "$dir exists; add --replace to write it again (only before $version is tagged)" >&2
    exit 1
  fi
  rm -rf -- "$dir"
fi

# PostgreSQL (the sink's store) from Debian when it is missing, as scripts/test.sh installs it.
scripts/install-postgres.sh
# The build scripts/test.sh makes (the whole workspace, so features are unified as there and nothing is built twice).
cargo build --profile ci --workspace --bins
JAQUE_WRITE_FIXTURES="$version" cargo test --profile ci --workspace --test compat -- \
  --ignored --exact write_fixtures --nocapture
# Read back at once by the tests every later build runs.
cargo test --profile ci --workspace --test compat
git status --short -- "$dir"
