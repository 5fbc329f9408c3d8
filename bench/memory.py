#!/usr/bin/env python3
"""What a loaded model costs in memory (issue 31): the guard's resident set
with each tokenizer fixture of ../shared loaded alone, and with all of them
(ten models) served by one guard.

For each configuration the guard starts in front of the bench stub, answers
a short chat (the model is loaded and has counted once), then one chat of
about 32k tokens that must be tokenized (the limit is set just above it, so
the byte bound cannot decide). Reported, in MiB from /proc of the guard's
process: RSS once it answers, RSS settled (15 s later: what loading freed has
been returned by then), RSS after the long chat and the peak (VmHWM) over
the whole run, which is what a container's memory limit must cover.

Usage: bench/memory.sh (builds the release binaries, then runs this), or
  bench/memory.py --guard BIN --stub BIN [--shared DIR] [--out DIR]
Prints a Markdown table; writes memory.json to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (the side-by-side benchmark's process helpers)

REPO = Path(__file__).resolve().parent.parent
# ~32k tokens on every fixture's tokenizer (about 4.3 bytes per token of
# this text); the limit is set above the count and below the byte length, so
# the guard must tokenize to decide.
LONG_TEXT_BYTES = 139_000
LIMIT = 60_000
# SGLang picks a conversation template by model path (`gemma-it` for a path
# naming gemma), which the guard refuses as unmodelled; memory does not
# depend on the path, so every model gets this neutral one.
MODEL_PATH = "/models/bench"
# Seconds between ready and the settled reading (the purge took about 10 s).
SETTLE_S = 15


def fixtures(shared: Path) -> list[str]:
    """Fixtures that count (a tokenizer.json; glm-4.5 is template-only)."""
    return sorted(d.name for d in (shared / "tokenizers").iterdir() if (d / "tokenizer.json").is_file())


def chat(model: str, text: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 1}).encode()


def long_text() -> str:
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches in a tent near the river ").split()
    out, n, i = [], 0, 0
    while n < LONG_TEXT_BYTES:
        w = words[i % len(words)] + ("." if i % 17 == 16 else "")
        out.append(w)
        n += len(w) + 1
        i += 1
    return " ".join(out)


def measure(name: str, guard: str, argv: list[str], models: list[str], logs: Path, long: str) -> dict:
    port, admin = run.free_port(), run.free_port()
    proc = run.start(name, [guard, "serve", "--listen", f"127.0.0.1:{port}",
                            "--admin-listen", f"127.0.0.1:{admin}", *argv], logs)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    started = time.perf_counter()
    for m in models:
        run.wait_ready(name, proc, url, chat(m, "hello"), logs)
    ready_s = time.perf_counter() - started
    pids = run.tree(proc.pid)
    loaded = run.status_kib(pids, "VmRSS")
    # What loading freed goes back to the system some seconds later (the
    # allocator's purge): the resident set a pod settles at is read after.
    time.sleep(SETTLE_S)
    settled = run.status_kib(pids, "VmRSS")
    for m in models:
        status, body = run.http("POST", url, chat(m, long))
        if status != 200:
            sys.exit(f"{name}: the long chat for {m} was answered {status}: {body[:200]!r}")
    after = run.status_kib(pids, "VmRSS")
    peak = run.status_kib(pids, "VmHWM")
    proc.terminate()
    proc.wait(timeout=30)
    return {"models": models, "ready_s": ready_s, "rss_loaded_kib": loaded, "rss_settled_kib": settled,
            "rss_after_long_kib": after, "peak_kib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--guard", default=str(REPO / "target" / "release" / "prefill-guard"))
    ap.add_argument("--stub", default=str(REPO / "target" / "release" / "bench_stub"))
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    ap.add_argument("--out", default=str(REPO / "target" / "bench"))
    args = ap.parse_args()
    shared = Path(args.shared).resolve()
    if not (shared / "tokenizers").is_dir():
        sys.exit(f"memory: no tokenizer fixtures at {shared / 'tokenizers'} (--shared)")
    out = Path(args.out)
    logs = out / "memory-logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        stub_port = run.free_port()
        run.start("stub", [args.stub, f"127.0.0.1:{stub_port}", "1"], logs)
        upstream = f"http://127.0.0.1:{stub_port}"
        long = long_text()
        rows = {}
        names = fixtures(shared)
        for f in names:
            rows[f] = measure(f, args.guard, [
                "--upstream", upstream, "--tokenizer", str(shared / "tokenizers" / f),
                "--served-model-name", f, "--model-path", MODEL_PATH,
                "--max-req-input-len", str(LIMIT)], [f], logs, long)
            print(f"# {f}: {rows[f]['rss_settled_kib'] / 1024:.0f} MiB settled", file=sys.stderr, flush=True)
        config = logs / "all-models.toml"
        config.write_text(f'upstream = "{upstream}"\n' + "".join(
            f'\n[[models]]\nname = "{f}"\ntokenizer = "{shared / "tokenizers" / f}"\n'
            f'model_path = "{MODEL_PATH}"\nmax_req_input_len = {LIMIT}\n'
            for f in names))
        rows["all"] = measure("all-models", args.guard, ["--config", str(config)], names, logs, long)
    finally:
        run.stop_all()
    (out / "memory.json").write_text(json.dumps(rows, indent=2))

    def mib(k: int) -> str:
        return f"{k / 1024:.0f}"

    print("| configuration | tokenizer.json MiB | ready s | RSS when ready MiB | RSS settled MiB | "
          "RSS after a 32k chat MiB | peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for f in names:
        r = rows[f]
        size = (shared / "tokenizers" / f / "tokenizer.json").stat().st_size / 2**20
        print(f"| {f} alone | {size:.1f} | {r['ready_s']:.1f} | {mib(r['rss_loaded_kib'])} | {mib(r['rss_settled_kib'])} | "
              f"{mib(r['rss_after_long_kib'])} | {mib(r['peak_kib'])} |")
    r = rows["all"]
    total = sum((shared / "tokenizers" / f / "tokenizer.json").stat().st_size for f in names) / 2**20
    print(f"| all {len(names)} in one guard | {total:.1f} | {r['ready_s']:.1f} | {mib(r['rss_loaded_kib'])} | "
          f"{mib(r['rss_settled_kib'])} | "
          f"{mib(r['rss_after_long_kib'])} | {mib(r['peak_kib'])} |")
    alone = sum(rows[f]["rss_settled_kib"] for f in names)
    print(f"\nSum of the {len(names)} guards alone, settled: {mib(alone)} MiB.")


if __name__ == "__main__":
    main()
