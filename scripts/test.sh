#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test, including
# the golden counts against ../shared. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# The golden and template tests read the fixtures in ../shared (override with
# PREFILL_GUARD_SHARED). Under CI they are required: a missing path fails.
export PREFILL_GUARD_SHARED="${PREFILL_GUARD_SHARED:-$(cd .. && pwd)/shared}"
# Off CI those tests skip without the fixtures, and cargo hides their skip
# notices: say it here, before and after, so a green run is not mistaken
# for one that checked the goldens.
fixtures_missing=""
if [ ! -d "$PREFILL_GUARD_SHARED/goldens" ] || [ ! -d "$PREFILL_GUARD_SHARED/tokenizers" ]; then
  if [ -n "${CI:-}" ]; then
    echo "test: the shared fixtures are required under CI: $PREFILL_GUARD_SHARED has no goldens/ and tokenizers/" >&2
    exit 1
  fi
  fixtures_missing="test: SKIPPED the golden, profile and fixture tests: no goldens/ and tokenizers/ in $PREFILL_GUARD_SHARED (set PREFILL_GUARD_SHARED)"
  echo "$fixtures_missing" >&2
  trap 'echo "$fixtures_missing" >&2' EXIT
fi

./scripts/install-test-deps.sh

# A clean clone builds once: incremental caches would only double the disk
# the test binaries take (CI has room for one copy, not two).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

cargo fmt --all -- --check
# The layout promises of the README: no import cycle between top-level
# modules, and no function too long to read beside the code it mirrors.
python3 scripts/import-cycles.py
python3 scripts/long-functions.py
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
df -h . | sed 's/^/disk: /' >&2
# Every fuzz target for 60 s (nightly + cargo-fuzz); a crash or panic fails.
./scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-60}"
./scripts/e2e.sh
./scripts/validate-deploy.sh
