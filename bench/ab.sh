#!/usr/bin/env bash
# Two guard binaries side by side, alternating, on one workload: the CPU each
# spends per request (utime+stime from /proc over the run / requests) and its
# throughput, the guard alone in front of bench_stub. For a change's effect
# on the guard's own cost, where bench/run.sh's tables (two decimals of a
# millisecond, every target) are too coarse; alternating spreads a shared
# machine's drift over both binaries.
#
# Usage: bench/ab.sh BEFORE AFTER [BODY] [ROUNDS]
#   BEFORE, AFTER  prefill-guard binaries (bench/run.sh --rev C builds C's in
#                  target/bench/target/release/; the tree's is target/release/)
#   BODY           a chat body (default target/bench/bodies/32k.json, which
#                  bench/run.sh writes)
#   ROUNDS         default 3
# Environment: AB_PATH (request path, default /v1/chat/completions),
# AB_GUARD_ARGS (extra `serve` flags, e.g. `--allow-route /raw` with
# AB_PATH=/raw for the hop without inspection), AB_SECONDS (default 8),
# AB_MODEL (a fixture under ../shared/tokenizers, default qwen2.5; the
# body's `model` must name it).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
before="$1" after="$2"
body="${3:-$repo/target/bench/bodies/32k.json}"
rounds="${4:-3}"
seconds="${AB_SECONDS:-8}"
path="${AB_PATH:-/v1/chat/completions}"
shared="${PREFILL_GUARD_SHARED:-$repo/../shared}"
stub="${CARGO_TARGET_DIR:-$repo/target}/release/bench_stub"
[ -x "$stub" ] || cargo build --release -p prefill-guard-bench --bin bench_stub >&2

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

one() { # binary → "req/s cpu-µs/req"
  local bin="$1" sp gp ap stub_pid guard_pid
  sp="$(port)" gp="$(port)" ap="$(port)"
  "$stub" "127.0.0.1:$sp" 2 >/dev/null 2>&1 &
  stub_pid=$!
  # shellcheck disable=SC2086
  "$bin" serve --listen "127.0.0.1:$gp" --admin-listen "127.0.0.1:$ap" \
    --upstream "http://127.0.0.1:$sp" --tokenizer "$shared/tokenizers/${AB_MODEL:-qwen2.5}" \
    --max-req-input-len 681280 ${AB_GUARD_ARGS:-} >/dev/null 2>&1 &
  guard_pid=$!
  for _ in $(seq 150); do curl -sf -o /dev/null "127.0.0.1:$ap/readyz" && break; sleep 0.2; done
  local url="http://127.0.0.1:$gp$path"
  BENCH_PATH="$path" BENCH_BODY="$body" wrk -t2 -c8 -d3s -s "$repo/bench/wrk.lua" "$url" >/dev/null # warm-up
  local c0 c1 line
  c0="$(cpu_ticks "$guard_pid")"
  line="$(BENCH_PATH="$path" BENCH_BODY="$body" wrk -t2 -c8 "-d${seconds}s" -s "$repo/bench/wrk.lua" "$url" | grep '^BENCHJSON ')"
  c1="$(cpu_ticks "$guard_pid")"
  kill "$guard_pid" "$stub_pid"
  wait "$guard_pid" "$stub_pid" 2>/dev/null || true
  python3 - "$line" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.loads(sys.argv[1][len("BENCHJSON "):])
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
n, s = r["requests"], r["duration_us"] / 1e6
print(f"{n / s:.0f} {cpu / n * 1e6:.1f}")
PY
}

echo "| round | before req/s | before CPU µs/req | after req/s | after CPU µs/req |"
echo "|---:|---:|---:|---:|---:|"
for r in $(seq "$rounds"); do
  read -r b_rps b_cpu < <(one "$before")
  read -r a_rps a_cpu < <(one "$after")
  echo "| $r | $b_rps | $b_cpu | $a_rps | $a_cpu |"
done
