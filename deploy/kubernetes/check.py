#!/usr/bin/env python3
"""Checks a rendered overlay for what makes the guard a guard: every
container locked down, probes on the admin port, a termination grace longer
than the guard's shutdown grace, and no way around the guard to SGLang.
Usage: check.py OVERLAY RENDERED.yaml"""
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
if {p["targetPort"] for p in svc["spec"]["ports"]} != {"proxy", "admin"}:
    fail("the Service must target the guard's ports only")

if overlay == "sidecar":
    router = next(c for c in pod["containers"] if c["name"] == "sglang-router")
    args = router["command"]
    if args[args.index("--host") + 1] != "127.0.0.1" or router.get("ports"):
        fail("the router must bind 127.0.0.1 and expose no port")
    if upstream != "http://127.0.0.1:30000":
        fail("the guard must forward to the router on 127.0.0.1")
elif overlay == "gateway":
    if upstream != "http://sglang-router:30000":
        fail("the guard must forward to the router's Service")
    if "HorizontalPodAutoscaler" not in by_kind:
        fail("no HorizontalPodAutoscaler")
    pols = {p["metadata"]["name"]: p["spec"] for p in by_kind["NetworkPolicy"]}
    router = pols["sglang-router-only-from-guard"]
    if router["ingress"] != [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prefill-guard"}}}],
                              "ports": [{"protocol": "TCP", "port": 30000}]}]:
        fail("the router must admit the guard alone")
print(f"{overlay}: {len(docs)} objects, guard locked down, shutdown grace {grace}s < termination grace {pod['terminationGracePeriodSeconds']}s")
