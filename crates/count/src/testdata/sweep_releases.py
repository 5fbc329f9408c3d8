"""Run gen_releases.py for a list of SGLang releases, each in the venv of its pins.

Developer machine only; CI never runs Python.

    python3 crates/count/src/testdata/sweep_releases.py 0.5.13 0.5.14 ...
    python3 crates/count/src/testdata/sweep_releases.py --from 0.4.8 --to 0.5.22

For each release V (one at a time; the machine is small):
* its wheel's METADATA (in $WHEELS_DIR/whl, default /work/wheels/whl) gives
  the pinned transformers T, tokenizers and openai versions;
* the interpreter is $VENVS/tf-T/bin/python (default /work/venvs), a Python
  3.11 venv holding transformers==T (see release_env.py for what else);
  the sweep refuses to run V if that venv's transformers or (where V pins it)
  tokenizers differs from V's pin;
* if the venv's openai differs from V's `openai==` pin, $VENVS/openai-<pin>
  (`pip install --no-deps --target`) is put in front through $OPENAI_OVERLAY;
* SGLANG_SRC is $WHEELS_DIR/src/V (the unpacked wheel);
* the log goes to $REFDATA_OUT/logs/V.log, the result to $REFDATA_OUT/V.json.
"""
import glob
import os
import re
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
WHEELS = os.environ.get("WHEELS_DIR", "/work/wheels")
VENVS = os.environ.get("VENVS", "/work/venvs")
OUT = os.environ.get("REFDATA_OUT", "/work/refdata")


def versions():
    return [v.strip() for v in open(os.path.join(WHEELS, "versions.txt")) if v.strip()]


def key(v):
    base, _, post = v.partition(".post")
    return tuple(int(x) for x in base.split(".")) + (int(post or 0),)


def pins(v):
    whl = sorted(glob.glob(os.path.join(WHEELS, "whl", f"sglang-{v}-*.whl")))[0]
    with zipfile.ZipFile(whl) as z:
        meta = z.read(f"sglang-{v}.dist-info/METADATA").decode()
    out = {}
    for name in ("transformers", "tokenizers", "openai"):
        m = re.search(rf"^Requires-Dist: {name}==([^;\s]+)", meta, re.M)
        if m:
            out[name] = m.group(1)
    return out


def installed(venv, dist):
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() or None


def run(v):
    p = pins(v)
    venv = os.path.join(VENVS, f"tf-{p['transformers']}")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        return f"{v}: no venv {venv}"
    for dist in ("transformers", "tokenizers"):
        if dist in p and installed(venv, dist) != p[dist]:
            return f"{v}: {venv} has {dist} {installed(venv, dist)}, {v} pins {p[dist]}"
    env = dict(os.environ, SGLANG_SRC=os.path.join(WHEELS, "src", v), REFDATA_OUT=OUT)
    env.pop("OPENAI_OVERLAY", None)
    if "openai" in p and installed(venv, "openai") != p["openai"]:
        overlay = os.path.join(VENVS, f"openai-{p['openai']}")
        if not os.path.isdir(overlay):
            return f"{v}: pins openai {p['openai']}, no overlay {overlay}"
        env["OPENAI_OVERLAY"] = overlay
    os.makedirs(os.path.join(OUT, "logs"), exist_ok=True)
    with open(os.path.join(OUT, "logs", f"{v}.log"), "w") as log:
        r = subprocess.run([os.path.join(venv, "bin", "python"), os.path.join(HERE, "gen_releases.py")],
                           env=env, stdout=log, stderr=subprocess.STDOUT)
    return f"{v}: exit {r.returncode} ({venv}{', openai ' + p['openai'] if 'OPENAI_OVERLAY' in env else ''})"


def main():
    args = sys.argv[1:]
    if args[:1] == ["--from"]:
        lo, hi = key(args[1]), key(args[3]) if len(args) > 3 else (99,)
        todo = [v for v in versions() if lo <= key(v) <= hi]
    else:
        todo = args
    for v in todo:
        print(run(v), flush=True)


if __name__ == "__main__":
    main()
