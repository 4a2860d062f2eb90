#!/usr/bin/env bash
# Whether two builds of jaque-sim run the same worlds — what a pure refactor of the simulator must keep: for
# seeds FIRST..FIRST+COUNT-1 every seed's outcome, trace hash, simulated time and statistics, and the
# benchmark world's trace hash, must be equal. Both binaries need --print-hash (commit "a hidden
# --print-hash" on). JOBS=N runs each sweep on N threads.
#
# Usage: sim/scripts/same-seeds.sh OLD_BINARY NEW_BINARY [COUNT (400)] [FIRST (1)]
#   e.g. git stash; cargo build --release -p jaque-sim; cp target/release/jaque-sim /tmp/jaque-sim.old
#        git stash pop; cargo build --release -p jaque-sim
#        sim/scripts/same-seeds.sh /tmp/jaque-sim.old target/release/jaque-sim 4000
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
fi
old=$1 new=$2 count=${3:-400} first=${4:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for side in old new; do
  bin=${!side}
  # A failing seed is reported too (its outcome is on its line); --trace 1 keeps the failure's replay short.
  "$bin" --seeds "$count" --seed "$first" --keep-going --print-hash --trace 1 --jobs "${JOBS:-1}" \
    | grep '^hash ' >"$tmp/$side" || true
  if [ "$(wc -l <"$tmp/$side")" -ne "$count" ]; then
    echo "$bin printed $(wc -l <"$tmp/$side") of $count seed lines: does it have --print-hash?" >&2
    exit 2
  fi
  "$bin" --bench --seed 1 --bench-seconds 0 | grep -o 'trace [0-9a-f]*' >"$tmp/$side.bench"
done
if ! diff "$tmp/old" "$tmp/new" >"$tmp/diff"; then
  echo "DIFFERENT: $(grep -c '^<' "$tmp/diff") of $count seeds differ; the first:"
  head -4 "$tmp/diff"
  exit 1
fi
if ! diff -q "$tmp/old.bench" "$tmp/new.bench" >/dev/null; then
  echo "DIFFERENT: the benchmark world: $(cat "$tmp/old.bench") then $(cat "$tmp/new.bench")"
  exit 1
fi
echo "same: seeds $first..$((first + count - 1)) ($(grep -vc 'outcome="ok"' "$tmp/old" || true) not ok) and the benchmark world ($(cat "$tmp/old.bench"))"
