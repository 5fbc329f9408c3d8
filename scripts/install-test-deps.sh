#!/usr/bin/env bash
# Tools the tests use beyond cargo. Idempotent: installs only what is missing.
set -euo pipefail

# promtool validates the /metrics exposition (Debian's prometheus package).
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "install-test-deps: promtool missing and cannot apt-get install it; the exposition check will fail" >&2
  fi
fi
