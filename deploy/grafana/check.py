#!/usr/bin/env python3
"""Checks the dashboard: well-formed JSON, every panel query valid PromQL
(promtool check rules on the queries as recording rules, Grafana variables
substituted), and every metric it names exported by the guard (a live
/metrics scrape of the demo guard, started here on 127.0.0.1).
Usage: check.py --binary PATH/TO/prefill-guard"""
import json
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
binary = sys.argv[sys.argv.index("--binary") + 1]
dash = json.loads((HERE / "prefill-guard.json").read_text())

# Rows carry no queries; a collapsed row holds its panels in its own "panels".
panels = [q for p in dash["panels"] for q in [p] + p.get("panels", [])]
graphs = [p for p in panels if p["type"] != "row"]
assert all(p.get("targets") for p in graphs), "a panel without queries"
exprs = [t["expr"] for p in graphs for t in p["targets"]]
exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
assert len({p["id"] for p in panels}) == len(panels), "duplicate panel ids"
cells = {}
for p in panels:
    g = p["gridPos"]
    assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, f"panel {p['id']} is off the grid"
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap"
            cells[(x, y)] = p["id"]


def promql(e):
    e = e.replace("$__rate_interval", "5m")
    return re.sub(r"\$\w+", ".*", e)


queries = [promql(e) for e in exprs if not e.startswith("label_values(")]
with tempfile.TemporaryDirectory() as tmp:
    rules = pathlib.Path(tmp) / "dashboard.rules.yaml"
    body = "groups:\n  - name: dashboard\n    rules:\n"
    for i, q in enumerate(queries):
        body += f"      - record: dashboard:query_{i}\n        expr: {json.dumps(q)}\n"
    rules.write_text(body)
    subprocess.run(["promtool", "check", "rules", str(rules)], check=True, stdout=subprocess.DEVNULL)

# The alert rules must name exported metrics too.
rule_text = (HERE.parent / "prometheus" / "prefill-guard.rules.yaml").read_text()
used = set()
for e in exprs + [rule_text]:
    for name in re.findall(r"\bprefill_guard_[a-z_]+", e):
        used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name.endswith(("_bucket", "_sum", "_count")) and "total" not in name else name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([binary, "demo-model", f"{tmp}/demo"], check=True, stdout=subprocess.DEVNULL)
    admin = free_port()
    guard = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", f"127.0.0.1:{admin}",
                              "--upstream", "http://127.0.0.1:9", "--tokenizer", f"{tmp}/demo",
                              "--served-model-name", "demo", "--max-req-input-len", "8",
                              "--prefill-url", "http://127.0.0.1:9"], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit("the demo guard's /metrics never answered")
    finally:
        guard.terminate()
        guard.wait(timeout=30)

exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
missing = sorted(used - exported)
if missing:
    sys.exit(f"the dashboard names metrics the guard does not export: {missing}")
print(f"{len(graphs)} panels, {len(queries)} queries valid PromQL, {len(used)} metrics all exported: {sorted(used)}")
