"""Tables for /work/refdata/chat_api/SUMMARY.md from gen_chat_api_releases.py's
records, compared with 0.5.19 (the oldest release the guard models for these
APIs) and with what the guard itself counts.

Developer machine only; CI never runs Python.

    python3 crates/count/src/testdata/summarize_chat_api.py [--guard BIN] [--recount]

(--guard: the prefill-guard binary, default target/debug/prefill-guard; copy it
first when the crate is being rebuilt meanwhile. The probes' bodies come from
the records' "probes".)

Reads /work/refdata/chat_api/<V>.json ($CHAT_API_OUT) for every release that
has one. Writes, in the same directory:

* guard_counts.json: the guard's own count of every fixture request
  (tests/data/chat_api_counts.json "requests", plus the probes) on every
  fixture, and of every
  "default"-setting gpt-oss harmony case (../encoder/testdata/
  harmony_expected.json, with its date), from `prefill-guard count
  --tokenizer <fixture> --route <route> --sglang-version 0.5.19 --date <d>`
  (and every other release the guard models, 0.5.18-0.5.23): a number, or
  "refused: ..." / "unmeasurable: ..." (its error code); recomputed only when
  missing or with --recount. A release the guard models is compared with the
  guard's count for itself, an older one with the guard's 0.5.19 count. A
  blank /api/generate prompt crashes the count command (zero units); recorded
  as "guard crashed".
* TABLES.md: per API, the releases grouped into ranges whose records are
  identical (conversion arguments per case and setting, fixture counts,
  harmony ids), each range's differences from 0.5.19 (case by case), and
  every fixture count of a release that is larger than the guard's 0.5.19
  count of the same request (an undercount if the guard were extended to that
  release unchanged), or served where the guard counts nothing.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT = os.environ.get("CHAT_API_OUT", "/work/refdata/chat_api")
sys.path.insert(0, HERE)
from sweep_releases import key as version_key  # noqa: E402

ROUTE = {"responses": "/v1/responses", "anthropic": "/v1/messages", "ollama_chat": "/api/chat",
         "ollama_generate": "/api/generate"}
GUARD_VERSIONS = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
API_OF = {"responses": "responses", "anthropic": "anthropic", "ollama_chat": "ollama", "ollama_generate": "ollama"}


def load_records():
    recs = {}
    for p in glob.glob(os.path.join(OUT, "*.json")):
        name = os.path.basename(p)[:-5]
        if name[0].isdigit() and "partial" not in name:
            recs[name] = json.load(open(p))
    return dict(sorted(recs.items(), key=lambda kv: version_key(kv[0])))


# --- the guard's counts ------------------------------------------------------------
def guard_run(guard, fixture, route, version, bodies, date="2025-01-15"):
    """{name: count | "refused: ..." | "unmeasurable: ..."} for bodies {name: body}."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for i, (name, body) in enumerate(bodies.items()):
            p = os.path.join(d, f"{i}.json")
            json.dump(body, open(p, "w"))
            files[p] = name
        r = subprocess.run([guard, "count", "--tokenizer", os.path.join(SHARED, "tokenizers", fixture),
                            "--route", route, "--sglang-version", version, "--date", date, *files],
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            row = json.loads(line)
            name = files[row["file"]]
            if "tokens" in row:
                out[name] = row["tokens"]
            else:
                e = row["error"]
                kind = "unmeasurable" if e.get("code") == "unmeasurable_content" else "refused"
                out[name] = f"{kind}: {e.get('message', '')[:200]}"
        missing = set(bodies) - set(out)
        if missing and len(bodies) == 1:
            # the count command panics on a body with no units (a blank /api/generate prompt)
            line = next((x for x in r.stderr.splitlines() if "panicked" in x), r.stderr[:200])
            return {name: f"guard crashed: {line.strip()[:160]}" for name in bodies}
    for name in sorted(set(bodies) - set(out)):
        out.update(guard_run(guard, fixture, route, version, {name: bodies[name]}, date))
    return out


def guard_counts(guard, recount, probes):
    path = os.path.join(OUT, "guard_counts.json")
    if os.path.exists(path) and not recount:
        return json.load(open(path))
    data = json.load(open(os.path.join(CRATE, "tests", "data", "chat_api_counts.json")))
    requests, fixtures = dict(data["requests"]), sorted(data["fixtures"])
    requests.update({"probe:" + k: v for k, v in probes.items()})
    import hashlib
    sha = hashlib.sha256(open(guard, "rb").read()).hexdigest()
    head = subprocess.run(["git", "-C", CRATE, "describe", "--always", "--dirty"], capture_output=True,
                          text=True).stdout.strip()
    out = {"guard": guard, "guard_sha256": sha, "crate_at": head, "fixtures": {}, "harmony": {}}
    for gv in GUARD_VERSIONS:
        out["fixtures"][gv] = {}
        for fx in fixtures:
            counts = {}
            for api, route in ROUTE.items():
                bodies = {k: v for k, v in requests.items() if k.split(":")[-1].split("/")[0] == api}
                counts.update(guard_run(guard, fx, route, gv, bodies))
            out["fixtures"][gv][fx] = counts
        cases = json.load(open(os.path.join(HERE, "..", "encoder", "testdata", "harmony_expected.json")))["cases"]
        res = {}
        for date in sorted({c["date"] for c in cases if c["setting"] == "default"}):
            bodies = {c["name"]: c["body"] for c in cases if c["setting"] == "default" and c["date"] == date}
            res.update(guard_run(guard, "gpt-oss", "/v1/responses", gv, bodies, date))
        out["harmony"][gv] = res
        print(f"guard {gv}: counted", flush=True)
    json.dump(out, open(path, "w"), indent=1, ensure_ascii=False)
    return out


# --- signatures ----------------------------------------------------------------------
VOLATILE = "ValidatorIterator("


def volatile_text(text):
    """A fallback prompt holding the repr of pydantic-core's lazy validator: its
    text (addresses, schema dump) changes from run to run."""
    return isinstance(text, str) and VOLATILE in text


def conv_value(s):
    e = s["expect"]
    if isinstance(e, dict) and volatile_text(e.get("fallback_prompt")):
        return "fallback prompt holding a ValidatorIterator repr (varies run to run)"
    if e == "guard_refuses":
        sg = s.get("sglang") or {}
        return ("guard", "sglang refuses" if "error" in sg else "sglang serves")
    if e == "sglang_refuses":
        return ("sglang refuses",)
    return json.dumps(e, sort_keys=True, ensure_ascii=False)


def per_api(rec, api):
    """{case key: value} of one release for one API (None when V has no route)."""
    if not rec["routes"]["ollama" if api == "ollama" else api]:
        return None
    out = {}
    for e in rec.get("conversion", []):
        if e["api"] != api:
            continue
        for s in e["settings"]:
            out[f"conv {e['name']} [{'inline' if s['inline_system'] else 'no-inline'},{s['format']}]"] = conv_value(s)
    for fx, v in rec["counts"]["fixtures"].items():
        for r, n in v["counts"].items():
            if API_OF[r.split("/")[0]] == api:
                out[f"count {fx} {r}"] = n
    probes = rec.get("probes") or {}
    for e in probes.get("conversion", []):
        if e["api"] != api:
            continue
        for s in e["settings"]:
            out[f"conv probe:{e['name']} [{'inline' if s['inline_system'] else 'no-inline'},{s['format']}]"] = \
                conv_value(s)
    pdetails = (probes.get("counts") or {}).get("details", {})
    for fx, v in (probes.get("counts") or {}).get("fixtures", {}).items():
        for r, n in v["counts"].items():
            if API_OF[r.split("/")[0]] == api:
                if volatile_text(pdetails.get(fx, {}).get("details", {}).get(r, {}).get("fallback_prompt")):
                    n = "ValidatorIterator repr: thousands of tokens, varies run to run"
                out[f"count {fx} probe:{r}"] = n
    if api == "responses" and isinstance(rec.get("harmony"), dict) and "cases" in rec["harmony"]:
        for c in rec["harmony"]["cases"]:
            g = c["sglang"]
            out[f"harmony {c['setting']} {c['name']}"] = "sglang refuses" if "error" in g else \
                f"{g['tokens']} {g['ids_fnv']}"
    return out


def families(recs, api):
    fams = []
    for v, rec in recs.items():
        sig = per_api(rec, api)
        if sig is None:
            continue
        if fams and fams[-1]["sig"] == sig:
            fams[-1]["releases"].append(v)
        else:
            fams.append({"releases": [v], "sig": sig})
    return fams


def diff(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def grouped_diff(keys, sig, base):
    """The differing keys grouped by case: a conversion case once when all its
    settings differ the same way, counts per request over the fixtures."""
    conv, counts, harmony = {}, {}, []
    for k in keys:
        kind, rest = k.split(" ", 1)
        if kind == "conv":
            name, setting = rest.rsplit(" ", 1)
            conv.setdefault(name, []).append(setting)
        elif kind == "count":
            fx, req = rest.split(" ", 1)
            counts.setdefault(req, []).append(fx)
        else:
            harmony.append(rest)
    out = []
    for name, settings in conv.items():
        vals = {json.dumps([sig.get(f"conv {name} {s}"), base.get(f"conv {name} {s}")]) for s in settings}
        if len(vals) == 1:
            v, b = json.loads(vals.pop())
            out.append(f"* conv `{name}` {','.join(settings) if len(settings) < 4 else 'all settings'}: "
                       f"{short(v, 400)} (0.5.19: {short(b, 400)})")
        else:
            for s in settings:
                out.append(f"* conv `{name}` {s}: {short(sig.get(f'conv {name} {s}'), 400)} "
                           f"(0.5.19: {short(base.get(f'conv {name} {s}'), 400)})")
    for req, fxs in counts.items():
        out.append(f"* count `{req}`: " + ", ".join(
            f"{fx} {sig.get(f'count {fx} {req}')} ({base.get(f'count {fx} {req}')})" for fx in fxs))
    if harmony:
        out.append(f"* harmony, {len(harmony)} cases (release / 0.5.19): " + "; ".join(
            f"{h}: {sig.get('harmony ' + h)} / {base.get('harmony ' + h)}" for h in harmony))
    return out


def short(v, n=160):
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[:n] + "..."


# --- undercounts ------------------------------------------------------------------------
def undercounts(rec, guard, gv="0.5.19"):
    """Fixture requests V serves with more tokens than the guard counts at gv."""
    rows = []
    g = guard["fixtures"][gv]
    fixtures = {fx: dict(v["counts"]) for fx, v in rec["counts"]["fixtures"].items()}
    for fx, v in ((rec.get("probes") or {}).get("counts") or {}).get("fixtures", {}).items():
        fixtures.setdefault(fx, {}).update({"probe:" + r: n for r, n in v["counts"].items()})
    for fx, counts in fixtures.items():
        for r, n in counts.items():
            if not isinstance(n, int):
                continue
            want = g.get(fx, {}).get(r)
            if not isinstance(want, int) or n > want:
                rows.append((fx, r, n, want))
    if isinstance(rec.get("harmony"), dict):
        gh = guard["harmony"][gv]
        for c in rec["harmony"].get("cases", []):
            s = c["sglang"]
            if c["setting"] != "default" or "tokens" not in s or c["name"] not in gh:
                continue
            want = gh[c["name"]]
            if not isinstance(want, int) or s["tokens"] > want:
                rows.append(("gpt-oss", "harmony/" + c["name"], s["tokens"], want))
    return rows


def main():
    args = sys.argv[1:]
    guard_bin = args[args.index("--guard") + 1] if "--guard" in args else os.path.join(CRATE, "target", "debug",
                                                                                       "prefill-guard")
    recs = load_records()
    probes = next((r["probes"]["cases"] for r in recs.values() if r.get("probes")), {})
    guard = guard_counts(guard_bin, "--recount" in args, probes)
    lines = ["# /v1/responses, /v1/messages, /api/chat per release: generated tables",
             "", f"Generated by `crates/count/src/testdata/summarize_chat_api.py` from {len(recs)} records "
             f"({', '.join(recs)}); guard counts from `{guard['guard']} count --sglang-version V` "
             f"(binary sha256 {guard.get('guard_sha256', '?')[:16]}, crate {guard.get('crate_at', '?')}; "
             "guard_counts.json).", ""]
    base = recs.get("0.5.19")
    for api in ("responses", "anthropic", "ollama"):
        lines += [f"## {api}", ""]
        fams = families(recs, api)
        b = per_api(base, api) if base else None
        lines += ["| range | releases | keys differing from 0.5.19 |", "|---|---|---:|"]
        for f in fams:
            r = f["releases"]
            lines.append(f"| {r[0]}{' - ' + r[-1] if len(r) > 1 else ''} | {len(r)} | "
                         f"{len(diff(f['sig'], b)) if b else '?'} |")
        lines.append("")
        for i, f in enumerate(fams):
            r = f["releases"]
            if b is None or f["sig"] == b:
                continue
            d = diff(f["sig"], b)
            lines += [f"### {api} {r[0]}{' - ' + r[-1] if len(r) > 1 else ''}: {len(d)} differences from 0.5.19", ""]
            lines += grouped_diff(d, f["sig"], b)
            lines.append("")
    lines += ["## Counts above the guard's 0.5.19 count", "",
              "Per release: fixture requests the release serves with more tokens than `prefill-guard count "
              "--sglang-version 0.5.19` counts (an undercount if the guard's 0.5.19 model were applied to that "
              "release), and, separately, what it serves where the guard refuses (harmless).", ""]
    for v, rec in recs.items():
        rows = undercounts(rec, guard, v if v in GUARD_VERSIONS else "0.5.19")
        over = [x for x in rows if isinstance(x[3], int)]
        none = [x for x in rows if not isinstance(x[3], int)]
        lines.append(f"### {v}: {len(over)} longer than the guard's count "
                     f"(--sglang-version {v if v in GUARD_VERSIONS else '0.5.19'}), {len(none)} served where the "
                     f"guard refuses")
        lines.append("")
        for fx, r, n, want in over:
            lines.append(f"* {fx} `{r}`: {n} > guard {want}")
        by_reason = {}
        for fx, r, n, want in none:
            by_reason.setdefault(str(want)[:120], []).append(f"{fx} {r}")
        for reason, items in by_reason.items():
            lines.append(f"* guard `{reason}`: {len(items)} ({', '.join(items[:6])}{' ...' if len(items) > 6 else ''})")
        lines.append("")
    open(os.path.join(OUT, "TABLES.md"), "w").write("\n".join(lines) + "\n")
    print(f"-> {os.path.join(OUT, 'TABLES.md')}")


if __name__ == "__main__":
    main()
