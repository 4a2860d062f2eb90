#!/usr/bin/env bash
# The benchmark table: every figure beside the floor it is built on, measured side by side in the same run on
# this machine. Prints one markdown table (P1-P19) to stdout; progress and process logs go to stderr.
# Usage: scripts/bench.sh > table.md     (takes a few minutes a part, P8 at 1M objects and P9's 30k step a minute
# or two each; needs nothing running)
set -euo pipefail
cd "$(dirname "$0")/.."
# `scripts/bench.sh peers`: jaque beside Icinga 2 and blackbox_exporter + Prometheus on this machine instead
# (scripts/bench-peers.sh; about 40 minutes).
if [ "${1:-}" = peers ]; then
  exec scripts/bench-peers.sh
fi
scripts/install-nats.sh >&2
export JAQUE_NATS_SERVER="$PWD/.tools/bin/nats-server"
# PostgreSQL for P11 (the sink's store); each run starts its own server on a free port.
scripts/install-postgres.sh >&2
# Headless Chromium and chromedriver for P17 (the status page).
scripts/install-chromium.sh >&2
cargo build --release --workspace --bins >&2

rows() { grep -E '^\| P[0-9]' || true; }
core=$(cargo bench -p jaque-core --bench core_bench 2>/dev/null | rows)
sim=$(target/release/jaque-sim --bench --seed 1 2>/dev/null)
procs=$(target/release/jaque-bench 2>/dev/null | rows)

speed=$(sed -n 's/^simulated\/real time: \([0-9.]*\)x (\(.*\))$/\1|\2/p' <<<"$sim")
seeds=$(sed -n 's/^swarm seeds: \(.*\) = \([0-9.]*\) seeds per minute$/\2|\1/p' <<<"$sim")

echo "| P | measure | jaque | floor (same run) | ratio | target |"
echo "|---|---|---|---|---|---|"
echo "$procs" | grep -E '^\| P[123] '
echo "$core" | grep -E '^\| P[45] '
echo "| P6 | simulator speed, 5 engines, 1000 objects, every fault kind | ${speed%%|*}x real time | ${speed#*|} | | >= 1000x |"
echo "| P6 | simulator swarm seeds per minute | ${seeds%%|*} | ${seeds#*|} | | |"
echo "$core" | grep -E '^\| P7 '
echo "$procs" | grep -E '^\| P8 '
echo "$procs" | grep -E '^\| P9 '
echo "$procs" | grep -E '^\| P10 '
echo "$procs" | grep -E '^\| P11 '
echo "$procs" | grep -E '^\| P12 '
echo "$procs" | grep -E '^\| P1[3456789] '
