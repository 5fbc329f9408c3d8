#!/usr/bin/env bash
# Creates (once) the Python venv the end-to-end tests and benchmarks use and
# prints its path. Idempotent: reinstalls only when a requirements file changed.
# Usage: scripts/pyenv.sh [extra-requirements-file...]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PREFILL_GUARD_PYENV:-$repo/target/pyenv}"
reqs=("$repo/scripts/python/requirements-test.txt" "$@")
python="${PYTHON:-python3}"

# Several test binaries may ask at once: one installer at a time.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" >&2
fi
stamp="$venv/.installed"
want="$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)"
# A stamp lists every requirements digest installed so far, so asking for the
# base set after an extra one does not reinstall.
if ! grep -qx "$want" "$stamp" 2>/dev/null; then
  args=()
  for r in "${reqs[@]}"; do args+=(-r "$r"); done
  "$venv/bin/pip" install --disable-pip-version-check -q "${args[@]}" >&2
  echo "$want" >>"$stamp"
fi
echo "$venv"
