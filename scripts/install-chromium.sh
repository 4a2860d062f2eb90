#!/usr/bin/env bash
# Makes headless Chromium and its WebDriver server available to the browser tests (tests/tests/status_page.rs,
# and jaque-bench's P17): Debian's packages `chromium` and `chromium-driver` when /usr/bin/chromium or
# /usr/bin/chromedriver is missing. Needs root for apt-get (CI runs as root); without root and without the
# packages it says what to install and fails. Idempotent; prints the versions and how long this took.
# Usage: scripts/install-chromium.sh
set -euo pipefail

start=$EPOCHREALTIME
# Seconds since $1 (an $EPOCHREALTIME), one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-chromium: /usr/bin/chromium or /usr/bin/chromedriver is missing; install them (Debian: apt-get install chromium chromium-driver) or run this as root" >&2
    exit 1
  fi
  echo "install-chromium: installing the Debian packages chromium chromium-driver"
  export DEBIAN_FRONTEND=noninteractive
  apt_start=$EPOCHREALTIME
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
  echo "install-chromium: apt-get took $(since "$apt_start") s"
  for f in /usr/bin/chromium /usr/bin/chromedriver; do
    if [ ! -x "$f" ]; then
      echo "install-chromium: the packages installed no $f" >&2
      exit 1
    fi
  done
fi

echo "install-chromium: $(/usr/bin/chromium --version 2>/dev/null | head -1); $(/usr/bin/chromedriver --version | head -1) ($(since "$start") s)"
