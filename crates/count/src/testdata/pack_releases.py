"""Packs the per-release reference counts into tests/data/sglang_releases.json.

Developer machine only; CI never runs Python. `gen_releases.py` writes one
record per SGLang release (`$REFDATA/<version>.json`, default
/work/refdata) from that release's own request code; this keeps what
`crates/inspect/tests/inspect/releases.rs` compares, and stores each distinct record once with the
releases that produced it:

    {"records": [{"releases": [versions...],
                  "fixtures": {fixture: {case: tokens | [tokens...] | null}},
                  "model_path_fixtures": {fixture: {"model_path": path, "counts": {case: ...}}},
                  "rendered": {fixture: {case: sha256}},   # template-only fixtures
                  "profiles": {profile: {case: tokens | null} | "flag absent: ..." |
                               "not startable: ..."}}],
     "model_paths": {fixture: the model path the fixtures were run under}}

* `fixtures`: every case on every fixture under a default server whose model
  path is the fixture's stand-in id (goldens/HEADER.json), as the release
  loads it; `null` where the release refuses the request.
* `model_path_fixtures`: for fixtures whose stand-in id makes a release pick
  a conversation template (0.4.8: gemma-3, Mistral-Nemo), the same cases with
  a neutral local model path (`/models/<name>`), so the checkpoint's own
  template is what is counted.
* `rendered`: the SHA-256 of each rendered chat prompt on fixtures without a
  tokenizer.json (glm-4.5), which is all that can be compared there.
* `profiles`: the cases under each server profile (goldens/profiles), or why
  the release does not run it (a flag it lacks, a parser or template it does
  not know).

    python3 crates/count/src/testdata/pack_releases.py [REFDATA]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
OUT = os.path.join(CRATE, "tests", "data", "sglang_releases.json")
TEMPLATE_ONLY = {"glm-4.5"}


def release_key(version):
    parts = version.split(".")
    post = 0
    if parts[-1].startswith("post"):
        post = int(parts.pop()[4:])
    return tuple(int(p) for p in parts) + (post,)


def packed(record):
    fixtures = {name: counts for name, counts in sorted(record["fixtures"].items())}
    model_path = {}
    for key, counts in sorted(record.get("fixtures_model_path", {}).items()):
        name, path = key.split("@", 1)
        model_path[name] = {"model_path": path, "counts": counts}
    rendered = {}
    for name in sorted(TEMPLATE_ONLY & set(record.get("rendered", {}))):
        rendered[name] = {case: r[1] for case, r in sorted(record["rendered"][name].items())}
    profiles = {name: p for name, p in sorted(record["profiles"].items())}
    return {"fixtures": fixtures, "model_path_fixtures": model_path, "rendered": rendered,
            "profiles": profiles}


def main():
    refdata = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REFDATA", "/work/refdata")
    versions = sorted((f[:-5] for f in os.listdir(refdata)
                       if f.endswith(".json") and f[0].isdigit()), key=release_key)
    records = []
    for version in versions:
        body = packed(json.load(open(os.path.join(refdata, version + ".json"))))
        for r in records:
            if r["body"] == body:
                r["releases"].append(version)
                break
        else:
            records.append({"releases": [version], "body": body})
    out = {"records": [{"releases": r["releases"], **r["body"]} for r in records]}
    with open(OUT, "w") as f:
        json.dump(out, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    print(f"{len(versions)} releases, {len(records)} distinct records -> {OUT} "
          f"({os.path.getsize(OUT) // 1024} KiB)")


if __name__ == "__main__":
    main()
