#!/usr/bin/env bash
# The peers table (issue 37): jaque beside the tools an operator would pick instead, the same work run by both on
# this machine in one run: Icinga 2 (exec checks, a two-node HA zone's failover) and blackbox_exporter scraped by
# Prometheus (tcp and http probes), with a bare posix_spawn loop as the floor of an exec check. Installs what is
# missing from Debian's packages (icinga2, monitoring-plugins, prometheus, prometheus-blackbox-exporter; as root,
# their services kept from starting) and nats-server, builds, then runs tests/src/bin/jaque-peers.rs, which writes
# every peer's configuration under a temp dir and runs it in the foreground with its own state.
# Prints the versions and one markdown table (V1-V4) to stdout; progress to stderr.
# Usage: scripts/bench.sh peers > peers.md     (about 40 minutes; needs nothing running: it starts and ends its
# own processes, and the machine's load weighs on every figure, so run it on a quiet machine)
set -euo pipefail
cd "$(dirname "$0")/.."

plugins=/usr/lib/nagios/plugins
need=()
command -v icinga2 >/dev/null || need+=(icinga2)
for p in check_tcp check_dummy check_http; do
  [ -x "$plugins/$p" ] || { need+=(monitoring-plugins); break; }
done
command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-blackbox-exporter >/dev/null || need+=(prometheus-blackbox-exporter)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench-peers: ${need[*]} missing: run as root (it installs them with apt-get) or install them" >&2
    exit 1
  fi
  # The packages' services must not start: they would check, scrape and listen on their default ports all through
  # the run. A policy-rc.d that refuses every start, for the install only, unless the machine has one already.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
for name in icinga2 prometheus prometheus-blac; do
  if pgrep -x "$name" >/dev/null; then
    echo "bench-peers: a $name process is running already (a service?); its CPU and ports weigh on the run" >&2
  fi
done

scripts/install-nats.sh >&2
export JAQUE_NATS_SERVER="$PWD/.tools/bin/nats-server"
cargo build --release -p jaque -p jaque-tests --bin jaque --bin jaque-peers >&2
"${CARGO_TARGET_DIR:-target}/release/jaque-peers"
