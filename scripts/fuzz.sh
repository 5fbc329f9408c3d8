#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/, side by side (one per core), each for
# a bounded time, and fails if any input makes one crash or panic.
#
# Usage: scripts/fuzz.sh [--seconds N] [--sanitizer address|none] [--build-only] [TARGET...]
#   --seconds N    per target (default 60, what CI runs; FUZZ_SECONDS too)
#   --build-only   build the targets and stop (scripts/test.sh builds them
#                  while the cargo tests run)
#   --sanitizer    address (default) or none (faster, catches panics only)
#   TARGET         framing path json extract template (default: all)
#
# Each run starts from fuzz/seeds/<target>, fuzz/regressions/<target> and
# what earlier runs on this machine found (fuzz/corpus/<target>, not kept in
# git). A crash leaves its input in fuzz/artifacts/<target>/: fix the bug,
# then copy the input into fuzz/regressions/<target>/, where
# crates/inspect/tests/inspect/fuzz_regressions.rs replays it in every `cargo test`.
#
# Needs the nightly toolchain (rustup) and cargo-fuzz, which it installs
# (pinned) if missing. The extract and template targets read the fixtures
# in ../shared (PREFILL_GUARD_SHARED).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

seconds="${FUZZ_SECONDS:-60}"
sanitizer=address
build_only=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#--seconds=}"; shift ;;
    --sanitizer) sanitizer="$2"; shift 2 ;;
    --sanitizer=*) sanitizer="${1#--sanitizer=}"; shift ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 64 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(framing path json extract template)

export PREFILL_GUARD_SHARED="${PREFILL_GUARD_SHARED:-$(cd .. && pwd)/shared}"
if [ ! -d "$PREFILL_GUARD_SHARED/tokenizers" ]; then
  echo "fuzz: no fixtures at $PREFILL_GUARD_SHARED/tokenizers (set PREFILL_GUARD_SHARED)" >&2
  exit 1
fi

# cargo-fuzz builds with flags only nightly accepts.
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: the nightly toolchain is missing (rustup toolchain list); cargo-fuzz needs it" >&2
  exit 1
fi
# Pinned: the version these targets and this script were written against.
cargo_fuzz_version=0.13.2
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$cargo_fuzz_version" ]; then
  echo "fuzz: installing cargo-fuzz $cargo_fuzz_version" >&2
  cargo install cargo-fuzz --locked --version "$cargo_fuzz_version" >&2
fi

echo "fuzz: building ${targets[*]} (sanitizer $sanitizer)" >&2
# Debug assertions on: an overflow or a failed debug_assert is a finding too.
flags=(--sanitizer "$sanitizer" --debug-assertions)
cargo +nightly fuzz build "${flags[@]}" >&2
[ -z "$build_only" ] || exit 0

# One libFuzzer process uses one core: the targets run side by side, as many
# at once as there are cores (FUZZ_JOBS), each still for its full time on a
# core of its own.
jobs="${FUZZ_JOBS:-$(nproc)}"

run_target() {
  local target="$1"
  local corpus="fuzz/corpus/$target"
  mkdir -p "$corpus" "fuzz/artifacts/$target" fuzz/logs
  local dirs=("$corpus" "fuzz/seeds/$target")
  [ -d "fuzz/regressions/$target" ] && dirs+=("fuzz/regressions/$target")
  local log="fuzz/logs/$target.log"
  echo "fuzz: $target for ${seconds}s" >&2
  # -timeout: one input taking 10 s is a hang, reported like a crash.
  # LeakSanitizer is off: fixtures loaded once live for the whole run.
  local status=ok
  ASAN_OPTIONS=detect_leaks=0 cargo +nightly fuzz run "${flags[@]}" "$target" "${dirs[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 || status=FAILED
  echo "$status" >"fuzz/logs/$target.status"
}

pids=()
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run_target "$target" &
  pids+=("$!")
done
wait "${pids[@]}" || true

summary=()
failed=()
for target in "${targets[@]}"; do
  corpus="fuzz/corpus/$target"
  log="fuzz/logs/$target.log"
  status="$(cat "fuzz/logs/$target.status" 2>/dev/null || echo FAILED)"
  if [ "$status" != ok ]; then
    failed+=("$target")
    grep -E "panicked|ERROR|SUMMARY|Test unit written|artifact" "$log" | head -20 >&2 || true
  fi
  execs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)"
  summary+=("$(printf '%-10s %-7s %8ss %12s execs %7s inputs in corpus' \
    "$target" "$status" "$seconds" "${execs:-?}" "$(find "$corpus" -type f | wc -l)")")
done

printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed: the input is in fuzz/artifacts/<target>/ (logs: fuzz/logs/<target>.log)." >&2
  echo "fuzz: once fixed, copy it into fuzz/regressions/<target>/ so crates/inspect/tests/inspect/fuzz_regressions.rs replays it." >&2
  exit 1
fi
