#!/usr/bin/env bash
# Builds the static binary and a FROM scratch image with podman (no registry
# needed), runs it with the demo model baked in, checks it answers on the
# proxy and admin ports, and that it stops cleanly (exit 0) on SIGTERM within
# its shutdown grace. Without a usable podman it runs the same checks on the
# bare binary and says so.
# Usage: scripts/image-smoke.sh [--build-only]
#   --build-only  build the static binary and stop (scripts/test.sh builds it
#                 while the fuzz targets run)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$TARGET_DIR/image-smoke
GRACE=5
build_only=""
[ "${1:-}" != --build-only ] || build_only=1

# --- the static binary ---------------------------------------------------------
# musl when rustup has (or can fetch) the target and a musl C compiler is
# there (ring compiles C: Debian's musl-tools, installed here when root, as
# this runs before validate-deploy.sh installs its tools); else glibc with
# crt-static.
# LTO off: this is a smoke build, and it must stay a few minutes on 2 cores.
export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
musl_cc() {
  command -v musl-gcc >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends musl-tools >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends musl-tools >/dev/null; } || true
  fi
  command -v musl-gcc >/dev/null 2>&1
}
if { rustup target list --installed 2>/dev/null | grep -x x86_64-unknown-linux-musl >/dev/null \
     || rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1; } && musl_cc; then
  TARGET=x86_64-unknown-linux-musl
  cargo build --quiet --locked --release --target "$TARGET" --bin prefill-guard
else
  TARGET=x86_64-unknown-linux-gnu
  echo "image-smoke: no musl target; building a glibc binary with crt-static"
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --locked --release --target "$TARGET" --bin prefill-guard
fi
BIN=$TARGET_DIR/$TARGET/release/prefill-guard
[ -z "$build_only" ] || exit 0
rm -rf "$WORK/ctx" && mkdir -p "$WORK/ctx"
if ldd "$BIN" >/dev/null 2>&1 && ! ldd "$BIN" 2>&1 | grep 'statically linked' >/dev/null; then
  echo "image-smoke: $BIN is dynamically linked" >&2
  exit 1
fi
echo "image-smoke: static binary ($TARGET) $(du -h "$BIN" | cut -f1)"

cp "$BIN" "$WORK/ctx/prefill-guard"
"$BIN" demo-model "$WORK/ctx/demo-model" >/dev/null
cp deploy/container/Containerfile.scratch "$WORK/ctx/Containerfile"
# Nothing listens upstream: allowed requests get 502, over-long ones 400, both
# answered by the guard.
cat > "$WORK/ctx/prefill-guard.toml" <<TOML
listen = "0.0.0.0:8000"
admin_listen = "0.0.0.0:9000"
upstream = "http://127.0.0.1:9"
upstream_connect_timeout_ms = 500
log_format = "json"
shutdown_grace_secs = $GRACE
name = "demo"
tokenizer = "/models/demo"
max_req_input_len = 8
TOML

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PROXY=$(free_port)
ADMIN=$(free_port)

wait_http() {
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "image-smoke: $1 never answered" >&2
  return 1
}

checks() {
  wait_http "http://127.0.0.1:$ADMIN/healthz"
  wait_http "http://127.0.0.1:$ADMIN/readyz"
  # grep without -q reads to the end: under pipefail, one that stops at the
  # match can fail the pipeline (the writer's SIGPIPE).
  curl -fsS "http://127.0.0.1:$ADMIN/metrics" | grep '^prefill_guard_build_info{' >/dev/null
  local over code
  over='{"model":"demo","messages":[{"role":"user","content":"hello big world"}]}'
  code=$(curl -s -o "$WORK/over.json" -w '%{http_code}' "http://127.0.0.1:$PROXY/v1/chat/completions" \
    -H 'content-type: application/json' -d "$over")
  [ "$code" = 400 ] && grep -q context_length_exceeded "$WORK/over.json" \
    || { echo "image-smoke: over-long prompt got $code: $(cat "$WORK/over.json")" >&2; return 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PROXY/v1/chat/completions" \
    -H 'content-type: application/json' -d '{"model":"demo","messages":[{"role":"user","content":"hello world"}]}')
  [ "$code" = 502 ] || { echo "image-smoke: allowed prompt got $code, expected 502 (no upstream)" >&2; return 1; }
  curl -fsS "http://127.0.0.1:$ADMIN/metrics" | grep 'prefill_guard_rejections_total{.*reason="context_length_exceeded"} 1' >/dev/null
  echo "image-smoke: answers on proxy :$PROXY (400 over the limit, 502 without upstream) and admin :$ADMIN"
}

# --- podman ------------------------------------------------------------------
# This machine's hard RLIMIT_NOFILE (20000) is below podman's default (1048576),
# and runc refuses to raise it ("error setting rlimit type 7"): lower the
# default ulimits. runc rather than crun; cgroupfs since there is no systemd.
cat > "$WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF=$WORK/containers.conf

podman_ok() {
  command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && podman info >/dev/null 2>&1
}

if podman_ok; then
  IMAGE=localhost/prefill-guard:smoke
  NAME=prefill-guard-smoke-$$
  podman build --quiet -t "$IMAGE" "$WORK/ctx" >/dev/null
  trap 'podman rm -f "$NAME" >/dev/null 2>&1 || true' EXIT
  podman run -d --name "$NAME" --read-only --cap-drop ALL --security-opt no-new-privileges \
    -p "127.0.0.1:$PROXY:8000" -p "127.0.0.1:$ADMIN:9000" "$IMAGE" >/dev/null
  if ! checks; then podman logs "$NAME" >&2; exit 1; fi
  [ "$(podman inspect --format '{{.Config.User}}' "$NAME")" = "65532:65532" ]
  start=$(date +%s.%N)
  # podman stop sends the image's STOPSIGNAL (SIGTERM), SIGKILL after --time.
  podman stop --time $((GRACE * 3)) "$NAME" >/dev/null
  took=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
  exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
  # Read whole, then searched: `podman logs | grep -q` under pipefail fails
  # when grep stops reading at the match and podman gets SIGPIPE.
  logs=$(podman logs "$NAME" 2>&1)
  grep -q 'shutting down' <<<"$logs" || { echo "$logs" >&2; exit 1; }
  [ "$exit_code" = 0 ] || { echo "image-smoke: exit code $exit_code after SIGTERM" >&2; exit 1; }
  python3 -c "import sys; sys.exit(0 if $took <= $GRACE else 1)" \
    || { echo "image-smoke: stop took ${took}s, grace is ${GRACE}s" >&2; exit 1; }
  echo "image-smoke: podman image $IMAGE ran as 65532, stopped on SIGTERM with exit 0 in ${took}s (grace ${GRACE}s)"
else
  echo "image-smoke: podman cannot run containers here ($(podman info 2>&1 | tail -1)); checking the bare binary instead"
  sed -e "s#/models/demo#$WORK/ctx/demo-model#" -e "s#0.0.0.0:8000#127.0.0.1:$PROXY#" \
    -e "s#0.0.0.0:9000#127.0.0.1:$ADMIN#" "$WORK/ctx/prefill-guard.toml" > "$WORK/bare.toml"
  "$BIN" serve --config "$WORK/bare.toml" 2>"$WORK/bare.log" &
  PID=$!
  trap 'kill "$PID" 2>/dev/null || true' EXIT
  checks
  start=$(date +%s)
  kill -TERM "$PID"
  wait "$PID"
  echo "image-smoke: bare binary stopped on SIGTERM with exit 0 in $(( $(date +%s) - start ))s (grace ${GRACE}s)"
fi
