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
# A seed that differs is explained from the two builds' whole traces: `cargo run --release -p jaque-sim --example
# trace -- SEED` in each, diffed.
# WITHOUT_NOTIFIERS=1 compares only the seeds the new binary runs without notifiers (for a change that moves
# the worlds with notifiers only, such as the one that added them); WITHOUT_SNAPSHOTS=1 likewise the seeds it
# runs with snapshots off.
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
fi
old=$1 new=$2 count=${3:-400} first=${4:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for side in old new; do
  bin=${!side}
  # A failing seed is reported too (its outcome is on its line); --trace 1 keeps the failure's replay short.
  "$bin" --seeds "$count" --seed "$first" --keep-going --print-hash --trace 1 --jobs "${JOBS:-1}" >"$tmp/$side.all" || true
  grep '^hash ' "$tmp/$side.all" >"$tmp/$side" || true
  if [ "$(wc -l <"$tmp/$side")" -ne "$count" ]; then
    echo "$bin printed $(wc -l <"$tmp/$side") of $count seed lines: does it have --print-hash?" >&2
    exit 2
  fi
  "$bin" --bench --seed 1 --bench-seconds 0 | grep -o 'trace [0-9a-f]*' >"$tmp/$side.bench"
done
if [ -n "${WITHOUT_NOTIFIERS:-}" ]; then
  # A seed with notifiers prints a second line, "  notify seed=N ...": leave those seeds out on both sides.
  { grep -o '^  notify seed=[0-9]*' "$tmp/new.all" || true; } | sed 's/^  notify //' | sed 's/$/ /' >"$tmp/skip"
  for side in old new; do grep -v -F -f "$tmp/skip" "$tmp/$side" >"$tmp/$side.kept" || true; mv "$tmp/$side.kept" "$tmp/$side"; done
  echo "comparing the $(wc -l <"$tmp/new") of $count seeds without notifiers"
fi
if [ -n "${WITHOUT_SNAPSHOTS:-}" ]; then
  # A seed with snapshots on prints a line "  snap seed=N ...": leave those seeds out on both sides.
  { grep -o '^  snap seed=[0-9]*' "$tmp/new.all" || true; } | sed 's/^  snap //' | sed 's/$/ /' >"$tmp/skip"
  for side in old new; do grep -v -F -f "$tmp/skip" "$tmp/$side" >"$tmp/$side.kept" || true; mv "$tmp/$side.kept" "$tmp/$side"; done
  echo "comparing the $(wc -l <"$tmp/new") of $count seeds without snapshots"
fi
if ! diff "$tmp/old" "$tmp/new" >"$tmp/diff"; then
  echo "DIFFERENT: $(grep -c '^<' "$tmp/diff") of $count seeds differ; the first:"
  head -4 "$tmp/diff"
  exit 1
fi
if [ -n "${WITHOUT_SNAPSHOTS:-}" ]; then
  # The benchmark world runs the shipped snapshot settings: it is no world without snapshots.
  echo "same: the $(wc -l <"$tmp/new") seeds without snapshots of $first..$((first + count - 1)) (the benchmark world not compared)"
  exit 0
fi
if ! diff -q "$tmp/old.bench" "$tmp/new.bench" >/dev/null; then
  echo "DIFFERENT: the benchmark world: $(cat "$tmp/old.bench") then $(cat "$tmp/new.bench")"
  exit 1
fi
echo "same: seeds $first..$((first + count - 1)) ($(grep -vc 'outcome="ok"' "$tmp/old" || true) not ok) and the benchmark world ($(cat "$tmp/old.bench"))"
