#!/usr/bin/env bash
# The project's test command: formatting, lints, and every test, including
# the golden counts against ../shared. CI runs exactly this (.ci/run).
#
# Usage: scripts/test.sh           everything (fuzzing, e2e, deploy checks too)
#        scripts/test.sh --quick   fmt, the layout check, clippy, the unit tests
#                                  and the golden counts (goldens, profiles,
#                                  every release, properties and fuzz inputs
#                                  of the inspection crate): the loop while
#                                  changing code
set -euo pipefail
cd "$(dirname "$0")/.."

quick=""
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

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

[ -n "$quick" ] || ./scripts/install-test-deps.sh

# A clean clone builds once: incremental caches would only double the disk
# the test binaries take (CI has room for one copy, not two).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

cargo fmt --all -- --check
# The layout promise of the README: no import cycle between modules at any
# depth, in either crate. (Function length and the other code rules are
# clippy's, in Cargo.toml's [workspace.lints].)
python3 scripts/import-cycles.py
# The whole workspace, the bench harness included (checked, never built here).
cargo clippy --workspace --all-targets --locked -- -D warnings

if [ -n "$quick" ]; then
  cargo test --locked --lib
  # The goldens and every release, counted as the guard receives requests
  # (inspection's test binary), and the profiles through the real binary.
  cargo test --locked -p prefill-guard-inspect --test inspect
  cargo test --locked --test it -- profiles::
  exit 0
fi

# The guard, its counting core and its inspection crate (the workspace's
# default members): unit tests, the one integration-test binary of each
# crate, benches as tests.
# Built once, then run by scripts/run-tests.py: the binaries side by side
# (cargo would run them one after another), each as cargo runs it.
mkdir -p target
cargo test --all-targets --locked --no-run --message-format=json-render-diagnostics >target/test-binaries.json
# Meanwhile the fuzz targets (a build of their own: release, AddressSanitizer)
# compile at the lowest CPU priority, on what the tests leave idle.
nice -n 19 ./scripts/fuzz.sh --build-only >target/fuzz-build.log 2>&1 &
fuzz_build=$!
background=("$fuzz_build")
# Under `set -e` a failing command in the trap would become the exit status.
stop_background() {
  local pid
  for pid in "${background[@]}"; do
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  if [ -n "$fixtures_missing" ]; then echo "$fixtures_missing" >&2; fi
  return 0
}
trap stop_background EXIT
python3 scripts/run-tests.py <target/test-binaries.json
df -h . | sed 's/^/disk: /' >&2
if ! wait "$fuzz_build"; then
  cat target/fuzz-build.log >&2
  echo "test: building the fuzz targets failed" >&2
  exit 1
fi
# The container smoke test's static release binary (validate-deploy) builds
# at the lowest priority meanwhile: five fuzz targets on two cores leave one
# idle for the last round, and the end-to-end run waits on sockets.
nice -n 19 ./scripts/image-smoke.sh --build-only >target/image-build.log 2>&1 &
image_build=$!
background+=("$image_build")
# Every fuzz target for 60 s (nightly + cargo-fuzz); a crash or panic fails.
./scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-60}"
# The end-to-end run takes the binary the integration tests ran against: a
# plain `cargo build` would compile the dependency tree again without the
# test-only features (tokio's test-util), minutes for the same program.
PREFILL_GUARD_BIN="$PWD/target/debug/prefill-guard" ./scripts/e2e.sh
if ! wait "$image_build"; then
  cat target/image-build.log >&2
  echo "test: building the static binary for the container smoke test failed" >&2
  exit 1
fi
./scripts/validate-deploy.sh
