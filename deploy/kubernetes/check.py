#!/usr/bin/env python3
"""Checks a rendered overlay for what makes the guard a guard: every
container locked down, probes on the admin port, a termination grace longer
than the guard's shutdown grace, and no way around the guard to SGLang: the
router reachable only through the guard, the prefill and decode workers only
from the router, each other and the guard's discovery polls, and nothing of
the guard's pods open but its proxy port (and its admin port to
Prometheus).
Usage: check.py OVERLAY RENDERED.yaml
OVERLAY: sidecar, gateway (kubernetes/overlays), istio, gateway-api."""
import re
import sys

import yaml

overlay, path = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)


def fail(msg):
    sys.exit(f"{overlay}: {msg}")


cm = by_kind["ConfigMap"][0]
grace = int(re.search(r"^shutdown_grace_secs\s*=\s*(\d+)", cm["data"]["prefill-guard.toml"], re.M).group(1))
for kind in ("PodDisruptionBudget", "ServiceMonitor", "Service", "Deployment"):
    if kind not in by_kind:
        fail(f"no {kind}")
(deploy,) = by_kind["Deployment"]
pod = deploy["spec"]["template"]["spec"]
if pod["terminationGracePeriodSeconds"] <= grace + pod["containers"][0].get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0):
    fail("terminationGracePeriodSeconds must exceed shutdown_grace_secs plus the preStop pause")
if not pod["securityContext"].get("runAsNonRoot") or pod["securityContext"]["seccompProfile"]["type"] != "RuntimeDefault":
    fail("pod securityContext")
for c in pod["containers"]:
    sc = c["securityContext"]
    ok = (sc.get("runAsNonRoot") and sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
          and sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault")
    if not ok:
        fail(f"container {c['name']}: securityContext not restrictive")
guard = next(c for c in pod["containers"] if c["name"] == "prefill-guard")
for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    if guard[probe]["httpGet"] != {"path": path_, "port": "admin"}:
        fail(f"{probe} must GET {path_} on the admin port")
upstream = next(e["value"] for e in guard["env"] if e["name"] == "PREFILL_GUARD_UPSTREAM")
(svc,) = by_kind["Service"]
# In Istio and behind Envoy Gateway the guard also answers checks.
checks = {"authz", "grpc"} if overlay in ("istio", "gateway-api") else set()
if {p["targetPort"] for p in svc["spec"]["ports"]} != {"proxy", "admin"} | checks:
    fail("the Service must target the guard's ports only")

NAME = "app.kubernetes.io/name"
HTTP_PORT = [{"protocol": "TCP", "port": 30000}]
pols = {p["metadata"]["name"]: p["spec"] for p in by_kind.get("NetworkPolicy", [])}


def policy(name, selects):
    if name not in pols:
        fail(f"no NetworkPolicy {name}: the {selects} pods would admit any pod")
    spec = pols[name]
    if spec["podSelector"] != {"matchLabels": {NAME: selects}} or "Ingress" not in spec.get("policyTypes", []):
        fail(f"NetworkPolicy {name} must select {NAME}: {selects} for Ingress")
    return spec.get("ingress", [])


def peer(p):
    """The pod name label of a same-namespace pod peer, else None."""
    if set(p) != {"podSelector"} or set(p["podSelector"]) != {"matchLabels"}:
        return None
    return p["podSelector"]["matchLabels"].get(NAME)


def workers_admit_only(router):
    """The prefill/decode workers admit each other and the router on any
    port, the guard on the HTTP port, nobody else."""
    for rule in policy("sglang-workers-own-paths", "sglang-worker"):
        if not rule.get("from"):
            fail("a workers' ingress rule without `from` admits every pod")
        for p in rule["from"]:
            name = peer(p)
            if name in ("sglang-worker", router):
                continue
            if name == "prefill-guard" and rule.get("ports") == HTTP_PORT:
                continue
            fail(f"the workers admit {p} on {rule.get('ports', 'every port')}")


PROMETHEUS = [{"namespaceSelector": {}, "podSelector": {"matchLabels": {NAME: "prometheus"}}}]
# Envoy Gateway's proxies of the Gateway `sglang` (deploy/gateway-api).
ENVOY = [{
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
    "podSelector": {"matchLabels": {
        NAME: "envoy", "app.kubernetes.io/component": "proxy",
        "gateway.envoyproxy.io/owning-gateway-name": "sglang",
        "gateway.envoyproxy.io/owning-gateway-namespace": "sglang",
    }},
}]
GUARD_PEER = {"podSelector": {"matchLabels": {NAME: "prefill-guard"}}}


def guard_pod_exposes_only(allowed):
    """The guard's pods admit exactly `allowed` rules (ports, from): in the
    sidecar no port of the router is open."""
    for rule in policy("prefill-guard", "prefill-guard"):
        if (rule.get("ports"), rule.get("from")) not in allowed:
            fail(f"the guard's pods admit {rule}")


if overlay in ("sidecar", "gateway"):
    # Clients on the proxy port, Prometheus on the admin port, nothing else.
    guard_pod_exposes_only([([{"protocol": "TCP", "port": 8000}], None), ([{"protocol": "TCP", "port": 9000}], PROMETHEUS)])
if overlay == "sidecar":
    router = next(c for c in pod["containers"] if c["name"] == "sglang-router")
    args = router["command"]
    if args[args.index("--host") + 1] != "127.0.0.1" or router.get("ports"):
        fail("the router must bind 127.0.0.1 and expose no port")
    if upstream != "http://127.0.0.1:30000":
        fail("the guard must forward to the router on 127.0.0.1")
    # The router runs in the guard's pods: the workers admit those pods on
    # the HTTP port (router and discovery), and each other.
    workers_admit_only(router=None)
elif overlay == "gateway":
    if upstream != "http://sglang-router:30000":
        fail("the guard must forward to the router's Service")
    if "HorizontalPodAutoscaler" not in by_kind:
        fail("no HorizontalPodAutoscaler")
    if policy("sglang-router-only-from-guard", "sglang-router") != [
        {"from": [{"podSelector": {"matchLabels": {NAME: "prefill-guard"}}}], "ports": HTTP_PORT}
    ]:
        fail("the router must admit the guard alone")
    workers_admit_only(router="sglang-router")
elif overlay == "gateway-api":
    # The router admits the Gateway's proxies (and the guard's /v1/models);
    # the guard's check ports the proxies alone; its proxy port nobody.
    if policy("sglang-router-only-from-gateway", "sglang-router") != [{"from": ENVOY + [GUARD_PEER], "ports": HTTP_PORT}]:
        fail("the router must admit the Gateway's proxies and the guard alone")
    guard_pod_exposes_only([
        ([{"protocol": "TCP", "port": 9001}, {"protocol": "TCP", "port": 9002}], ENVOY),
        ([{"protocol": "TCP", "port": 9000}], PROMETHEUS),
    ])
    workers_admit_only(router="sglang-router")
elif overlay == "istio":
    workers_admit_only(router="sglang-router")
    sa = "cluster.local/ns/sglang/sa/"
    aps = {p["metadata"]["name"]: p["spec"] for p in by_kind.get("AuthorizationPolicy", [])}
    custom = aps.get("prefill-guard", {})
    if custom.get("action") != "CUSTOM" or custom.get("rules") != [{}] \
            or custom.get("selector") != {"matchLabels": {NAME: "sglang-router"}}:
        fail("every request to the router must go to the guard (CUSTOM, rules: [{}])")
    if aps.get("sglang-router-http-only") != {
        "selector": {"matchLabels": {NAME: "sglang-router"}}, "action": "ALLOW",
        "rules": [{"to": [{"operation": {"ports": ["30000"], "paths": ["/*"]}}]}],
    }:
        fail("the router must take HTTP on its API port only")
    if aps.get("sglang-workers-own-callers") != {
        "selector": {"matchLabels": {NAME: "sglang-worker"}}, "action": "ALLOW",
        "rules": [
            {"from": [{"source": {"principals": [sa + "sglang-router", sa + "sglang-worker"]}}]},
            {"from": [{"source": {"principals": [sa + "prefill-guard"]}}], "to": [{"operation": {"ports": ["30000"]}}]},
        ],
    }:
        fail("the workers must accept the router's, the workers' and (on 30000) the guard's service accounts alone")
    strict = {p["spec"]["selector"]["matchLabels"][NAME] for p in by_kind.get("PeerAuthentication", [])
              if p["spec"].get("mtls") == {"mode": "STRICT"}}
    if not {"sglang-router", "sglang-worker"} <= strict:
        fail("mutual TLS must be STRICT for the router and the workers")
print(f"{overlay}: {len(docs)} objects, guard locked down, shutdown grace {grace}s < termination grace {pod['terminationGracePeriodSeconds']}s, "
      f"router and prefill/decode workers reachable only through the guard ({len(pols)} NetworkPolicies"
      f"{', %d AuthorizationPolicies' % len(by_kind['AuthorizationPolicy']) if 'AuthorizationPolicy' in by_kind else ''})")
