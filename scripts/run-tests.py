#!/usr/bin/env python3
"""Runs the test binaries `cargo test --no-run --message-format=json` built,
side by side, as cargo would run each one: from its package's directory,
with the arguments given after `--`. Cargo runs them one after another;
here the two crates' integration binaries (one waits on sockets and timers,
the other counts) overlap, and the short ones fill in around them.

Each binary's output is printed whole when it ends, then a summary; the
exit status is 1 if any binary failed.

Usage: cargo test --all-targets --no-run --message-format=json | \\
           scripts/run-tests.py [--jobs N] [-- ARGS...]"""
import json
import os
import subprocess
import sys
import threading
import time


def binaries(stream):
    """(name, executable, package directory) of every test target built."""
    out = []
    for line in stream:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test") and "bench" not in msg["target"]["kind"]:
            continue
        package = os.path.dirname(msg["manifest_path"])
        kind = "/".join(msg["target"]["kind"])
        out.append((f"{os.path.basename(package)} {kind} {msg['target']['name']}", msg["executable"], package))
    return out


def main() -> int:
    args = sys.argv[1:]
    jobs = 2
    if args[:1] == ["--jobs"]:
        jobs, args = int(args[1]), args[2:]
    extra = args[1:] if args[:1] == ["--"] else args
    found = binaries(sys.stdin)
    if not found:
        print("run-tests: no test binary in cargo's output", file=sys.stderr)
        return 1
    # Largest first: the integration binaries are the long poles.
    found.sort(key=lambda b: -os.path.getsize(b[1]))
    lock = threading.Lock()
    results: list[tuple[str, int, float]] = []
    queue = list(found)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            started = time.monotonic()
            run = subprocess.run([exe, *extra], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            took = time.monotonic() - started
            with lock:
                sys.stdout.write(f"\n===== {name} ({exe}) exit {run.returncode} in {took:.0f} s\n")
                sys.stdout.write(run.stdout.decode(errors="replace"))
                sys.stdout.flush()
                results.append((name, run.returncode, took))

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("\nrun-tests: summary")
    for name, code, took in sorted(results):
        print(f"  {'ok    ' if code == 0 else 'FAILED'} {took:6.0f} s  {name}")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
