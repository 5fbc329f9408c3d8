#!/usr/bin/env bash
# End to end through the real sglang-router (tests/e2e): the simulated SGLang
# PD pair (`prefill-guard pd-sim`) behind `sglang-router --pd-disaggregation`,
# first without prefill-guard (the cross-tenant leak must show), then with it
# (no leak over 2,000 concurrent mixed requests), plus the official openai SDK.
# Makes the pinned venv (scripts/pyenv.sh) and builds the binary if needed.
# Extra arguments go to pytest, e.g. scripts/e2e.sh -k sdk -s.
set -euo pipefail
cd "$(dirname "$0")/.."

export PREFILL_GUARD_SHARED="${PREFILL_GUARD_SHARED:-$(cd .. && pwd)/shared}"
venv="$(scripts/pyenv.sh)"
if [ -z "${PREFILL_GUARD_BIN:-}" ]; then
  cargo build --locked --bin prefill-guard
  export PREFILL_GUARD_BIN="$PWD/target/debug/prefill-guard"
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest tests/e2e -q -p no:cacheprovider "$@"
