#!/usr/bin/env bash
# Makes a PostgreSQL server available to the integration tests: the Debian package when no `initdb` is there
# yet (never a running cluster: the tests start their own servers on free ports), and, as root, the
# unprivileged user `jaque-pg` they run it as (initdb and postgres refuse to run as root). Idempotent; prints
# the server version and how long this took. Usage: scripts/install-postgres.sh
set -euo pipefail

user=jaque-pg
start=$EPOCHREALTIME
# Seconds since $1 (an $EPOCHREALTIME), one decimal.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# The newest Debian server, or one in PATH (a developer machine with PostgreSQL from elsewhere).
find_bin() {
  local d
  d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -1)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then
    echo "$d"
  elif command -v initdb >/dev/null; then
    dirname "$(command -v initdb)"
  fi
}

bin=$(find_bin)
if [ -z "$bin" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-postgres: no initdb found; install PostgreSQL (Debian: apt-get install postgresql) or run this as root" >&2
    exit 1
  fi
  # No default cluster: it would take port 5432 and, where services may start, run a server nobody asked for.
  # Only when nobody has configured cluster creation here before.
  if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
  fi
  echo "install-postgres: installing the Debian package postgresql"
  export DEBIAN_FRONTEND=noninteractive
  # ucf keeps the createcluster.conf above instead of asking whether to replace it.
  export UCF_FORCE_CONFFOLD=1
  apt_start=$EPOCHREALTIME
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  echo "install-postgres: apt-get took $(since "$apt_start") s"
  # Whatever cluster the package made anyway (an existing createcluster.conf that wants one), stop it.
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters -h | while read -r version name port status _; do
      if [ "$status" = online ]; then
        echo "install-postgres: stopping cluster $version/$name (port $port) that the package started"
        pg_ctlcluster "$version" "$name" stop
      fi
    done
  fi
  bin=$(find_bin)
  if [ -z "$bin" ]; then
    echo "install-postgres: the package postgresql installed no initdb under /usr/lib/postgresql/*/bin" >&2
    exit 1
  fi
fi

if [ "$(id -u)" -eq 0 ] && ! id -u "$user" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
  echo "install-postgres: created the system user $user"
fi

echo "install-postgres: $("$bin/postgres" --version) in $bin ($(since "$start") s)"
