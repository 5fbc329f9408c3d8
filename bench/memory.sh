#!/usr/bin/env bash
# The guard's memory per loaded model and for ten models in one guard
# (bench/memory.py): builds the release guard and the bench stub, then runs it.
# Needs the tokenizer fixtures in ../shared (or PREFILL_GUARD_SHARED).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
shared="${PREFILL_GUARD_SHARED:-$repo/../shared}"
cargo build --release --bin prefill-guard >&2
cargo build --release -p prefill-guard-bench --bin bench_stub >&2
exec python3 bench/memory.py --guard target/release/prefill-guard --stub target/release/bench_stub --shared "$shared" "$@"
