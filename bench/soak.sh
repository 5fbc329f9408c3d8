#!/usr/bin/env bash
# Soak run (issue 17 item 6): builds the release guard and the soak harness
# (bench/harness/src/bin/soak.rs; nothing else builds it),
# then runs the soak against the binary: 30 minutes of mixed legitimate,
# over-limit, malformed and slow traffic from 64 clients, the upstream
# injecting faults. Prints RSS and descriptors over time and the answers by
# status; exits non-zero on a leak, a double forward, an unanswered
# legitimate request or unbounded growth. Not part of CI.
#
# Usage: bench/soak.sh [--seconds N] [--clients N] [--rate R] [--limit N] [--seed S]
#                      [--mix KIND=PARTS,...] [--sample-secs N]
#        bench/soak.sh --seconds 120 --sabotage-limit 1000000   # self-test: must fail
#        bench/soak.sh --help                                   # every option
# Exit status: 0 passed, 1 a check failed, 2 the run could not be set up.
# SOAK_SECONDS sets the duration too (default 1800).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

echo "soak: building the guard and the soak harness (release)" >&2
cargo build --release --bin prefill-guard -p prefill-guard-bench --bin soak >&2
target="${CARGO_TARGET_DIR:-$repo/target}"
exec "$target/release/soak" --guard "$target/release/prefill-guard" "$@"
