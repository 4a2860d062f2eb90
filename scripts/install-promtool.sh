#!/usr/bin/env bash
# Makes `promtool` (Prometheus' linter for the text exposition format) available to tests/tests/metrics_lint.rs
# as .tools/bin/promtool: the one on PATH when there is one, else the binary taken out of Debian's `prometheus`
# package without installing the package (`apt-get download`, `dpkg-deb -x`, the one file kept), so no
# Prometheus service is set up or started. `apt-get update` first when the package lists do not know it (root).
# Idempotent; prints the version and how long this took. Usage: scripts/install-promtool.sh
set -euo pipefail
cd "$(dirname "$0")/.."

start=$EPOCHREALTIME
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
mkdir -p .tools/bin

if [ ! -x .tools/bin/promtool ]; then
  if found=$(command -v promtool); then
    ln -sf "$found" .tools/bin/promtool
  else
    if ! apt-cache show prometheus >/dev/null 2>&1; then
      if [ "$(id -u)" -ne 0 ]; then
        echo "install-promtool: no promtool and apt does not know the package prometheus; run this as root or install promtool" >&2
        exit 1
      fi
      apt-get update -qq
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # (as root apt warns that it downloads without its sandbox user; that is expected here)
    (cd "$work" && apt-get download -qq prometheus 2>&1 >/dev/null | grep -v 'unsandboxed as root' >&2 || true)
    dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
    cp "$work/x/usr/bin/promtool" .tools/bin/promtool.new
    mv .tools/bin/promtool.new .tools/bin/promtool
  fi
fi
echo "promtool: $(.tools/bin/promtool --version 2>&1 | head -1) ($(since "$start") s)"
