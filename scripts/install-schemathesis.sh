#!/usr/bin/env bash
# Installs schemathesis (PyPI, pinned) into .tools/schemathesis unless that version is there already, and links
# its command as .tools/bin/st. The API contract test (tests/tests/api_contract.rs) runs it against a live jaque.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.32.5
dir=.tools/schemathesis
if [ -x .tools/bin/st ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
rm -rf "$dir"
python3 -m pip install --quiet --disable-pip-version-check --target "$dir" "schemathesis==$version"
echo "$version" >"$dir/.version"
mkdir -p .tools/bin
# pip --target writes the entry point but not the search path: the wrapper gives it.
cat >.tools/bin/st <<WRAP
#!/usr/bin/env bash
PYTHONPATH="$PWD/$dir\${PYTHONPATH:+:\$PYTHONPATH}" exec "$PWD/$dir/bin/st" "\$@"
WRAP
chmod +x .tools/bin/st
.tools/bin/st --version
