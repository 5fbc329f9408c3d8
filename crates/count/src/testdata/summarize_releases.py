"""Group the per-release reference records of gen_releases.py into families.

Developer machine only; CI never runs Python.

    python3 crates/count/src/testdata/summarize_releases.py [REFDATA_DIR]   # default /work/refdata

Reads <dir>/<V>.json for every release of $WHEELS_DIR/versions.txt present,
and prints (Markdown, to stdout):
* per release: the libraries it ran with and how many counts / refusals;
* families: maximal runs of consecutive releases whose records are identical,
  comparing counts only (a refusal is `null` whatever its message; a profile
  that is "flag absent" or "not startable" compares by that status);
* per boundary between two families: every (fixture or profile, case) whose
  record changes, with both values and the token difference, and per
  fixture whether the rendered prompt (sha256) changed too.
"""
import json
import os
import sys
from collections import OrderedDict

WHEELS = os.environ.get("WHEELS_DIR", "/work/wheels")


def key(v):
    base, _, post = v.partition(".post")
    return tuple(int(x) for x in base.split(".")) + (int(post or 0),)


def status(v):
    if isinstance(v, str):
        return "flag absent" if v.startswith("flag absent") else "not startable"
    return v


def record(d):
    """The comparable part: {(group, name, case): value}."""
    out = OrderedDict()
    for fx, counts in sorted(d["fixtures"].items()):
        if not isinstance(counts, dict):
            out[("fixture", fx, "*")] = status(counts)
            continue
        for case, n in sorted(counts.items()):
            out[("fixture", fx, case)] = n
    for fx, counts in sorted(d.get("fixtures_model_path", {}).items()):
        for case, n in sorted(counts.items()):
            out[("fixture", fx, case)] = n
    for pf, counts in sorted(d["profiles"].items()):
        if not isinstance(counts, dict):
            out[("profile", pf, "*")] = status(counts)
            continue
        for case, n in sorted(counts.items()):
            out[("profile", pf, case)] = n
    return out


def renders(d):
    out = {}
    for name, cases in d.get("rendered", {}).items():
        for case, (chars, sha) in cases.items():
            out[(name, case)] = sha
    return out


def delta(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return f"{b - a:+d}"
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(isinstance(x, int) for x in a + b):
        return "[" + ", ".join(f"{y - x:+d}" for x, y in zip(a, b)) + "]"
    return ""


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/work/refdata"
    versions = [v.strip() for v in open(os.path.join(WHEELS, "versions.txt")) if v.strip()]
    data = OrderedDict()
    for v in sorted(versions, key=key):
        p = os.path.join(d, f"{v}.json")
        if os.path.exists(p):
            data[v] = json.load(open(p))
    print("## Releases\n")
    print("| release | transformers | tokenizers | pydantic | openai | jinja2 | counted | refused | profiles not run |")
    print("|---|---|---|---|---|---|---:|---:|---|")
    for v, r in data.items():
        lib = r["libraries"]
        rec = record(r)
        counted = sum(1 for x in rec.values() if isinstance(x, (int, list)))
        refused = sum(1 for x in rec.values() if x is None)
        notrun = ", ".join(f"{k}: {status(x)}" for k, x in r["profiles"].items() if isinstance(x, str))
        print(f"| {v} | {lib.get('transformers')} | {lib.get('tokenizers')} | {lib.get('pydantic')} | "
              f"{lib.get('openai')} | {lib.get('jinja2')} | {counted} | {refused} | {notrun} |")

    families = []
    for v, r in data.items():
        rec = record(r)
        if families and families[-1]["record"] == rec:
            families[-1]["releases"].append(v)
        else:
            families.append({"releases": [v], "record": rec, "renders": renders(r)})
    print("\n## Families (identical records, consecutive releases)\n")
    print("| family | releases | count |")
    print("|---|---|---:|")
    for i, f in enumerate(families):
        rs = f["releases"]
        span = rs[0] if len(rs) == 1 else f"{rs[0]} - {rs[-1]}"
        print(f"| F{i + 1} | {span} | {len(rs)} |")

    print("\n## Boundaries\n")
    for i in range(1, len(families)):
        a, b = families[i - 1], families[i]
        va, vb = a["releases"][-1], b["releases"][0]
        print(f"### F{i} -> F{i + 1}: {va} -> {vb}\n")
        keys = list(OrderedDict.fromkeys(list(a["record"]) + list(b["record"])))
        rows = []
        for k in keys:
            x, y = a["record"].get(k, "absent"), b["record"].get(k, "absent")
            if x != y:
                name = k[1] if k[0] == "fixture" else "profile:" + k[1]
                ra, rb = a["renders"].get((name, k[2])), b["renders"].get((name, k[2]))
                rchg = "" if ra is None or rb is None else ("render same" if ra == rb else "render changed")
                rows.append(f"| {k[0]} {k[1]} | {k[2]} | {json.dumps(x)} | {json.dumps(y)} | {delta(x, y)} | {rchg} |")
        print(f"{len(rows)} records differ.\n")
        print("| fixture/profile | case | " + va + " | " + vb + " | delta | rendered |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        print()


if __name__ == "__main__":
    main()
