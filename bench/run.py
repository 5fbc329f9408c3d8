"""Side-by-side benchmark of prefill-guard (issue 6, item 5). Run it through
bench/run.sh, which installs wrk and the venv and builds the release binaries.

One run starts, all on loopback:
  direct  client -> stub (bench/harness/src/bin/bench_stub.rs, a fast SGLang look-alike)
  envoy   client -> Envoy (plain pass-through, bench/envoy.yaml) -> stub
  nginx   client -> nginx (plain pass-through, bench/nginx.conf) -> stub
  guard   client -> prefill-guard serve -> stub
  guard-hop  the same, on a path it forwards uninspected (`--allow-route`): the
          hop alone, without reading or counting the body (not a default target)
  router  client -> sglang-router (real, pass-through, round_robin) -> stub
  naive   client -> bench/naive_guard.py (FastAPI + transformers) -> stub
and drives each with wrk over chat bodies of about 1k, 32k and 600k tokens
and an over-limit body of about 1M tokens, then:
  - the agent workload: a ~450k-token conversation resent with one more
    turn, cold and warm, to a guard with its count cache and one without,
    beside one single-threaded encode of its text (`--workloads agent`),
  - the guard's decision on the 600k and 1M prompts against one
    single-threaded `tokenizers` encode of the same text (bench/harness/src/bin/bench_encode.rs),
  - a flood: 64 connections sending 4 MiB bodies to the guard, with its peak
    RSS, /healthz answers during the flood and the 503s it shed.
It prints Markdown to stdout and keeps everything (logs, JSON) in --out.

Measures, per target and workload: throughput (req/s, closed loop), latency
p50/p99 and what it adds over `direct` at a moderate load, CPU time per request of
the hop's own processes (utime+stime from /proc/<pid>/stat, over the run,
divided by completed requests) and their peak RSS (VmHWM, reset before each
run through /proc/<pid>/clear_refs).

Latency at moderate load (1k, 32k) comes from one interleaved run per workload
(bench/harness/src/bin/bench_paced.rs): a fixed-rate open-loop stream dealt round-robin to
direct, envoy, nginx, guard and router, so that a stall of this shared VM falls on all
of them alike and "added" compares the same moments. The naive guard is left
out of it: at that rate it would be saturated and take the CPU from the others.

Environment: BENCH_SECONDS (per closed-loop run, default 10), BENCH_ROUNDS (closed-loop
runs per target and workload, the targets in turn within a round, default 1; the tables
show each target's median round and the targets' ratios are the median of the rounds'
ratios), BENCH_PACED_SECONDS
(the interleaved run, default 30), BENCH_PACED_RATE_1K / BENCH_PACED_RATE_32K
(requests per second per target, default 200 / 25), BENCH_LONG_REQUESTS
(600k and 1M: requests one after another, default 8), BENCH_FLOOD_SECONDS (default 15), BENCH_CONN
(1k throughput connections, default 32), BENCH_FLOOD_CLIENTS (default 64),
BENCH_FLOOD_RSS_BOUND_MIB (the stated bound, default 1024), BENCH_GUARD_ARGS (extra
flags for `prefill-guard serve`, e.g. --exact-counting true), PREFILL_GUARD_SHARED (the shared/
directory, default ../shared).
"""

from __future__ import annotations

import argparse
import atexit
import http.client as httpclient
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 681_280
# The chat route every target is driven on, and the path `guard-hop`
# forwards uninspected instead.
CHAT_PATH = "/v1/chat/completions"
HOP_PATH = "/hop"
MODEL = "qwen2.5"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# Seconds from starting the targets to the first measurement: see main().
STARTUP_SETTLE_S = 10

# ---------------------------------------------------------------------------
# Prompt text


COMMON = """the of and to in is that for it as was with be by on not he this are or
his from at which but have an they you were her she there one all we their been has
when who will more no if out so said what up its about into than them can only other
new some could time these two may then do first any my now such like our over man me
even most made after also did many before must through back years where much your way
well down should because each just those people how too little state good very make
world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came
right used take three states himself few house use during without again place around
however home small found thought went say part once general high upon school every
don't does got united left number course war until always away something fact though
water less public put think almost hand enough far took head yet government system
better set told nothing night end why called didn't eyes find going look asked later
knew point next program city business give group toward young days let room president
side social present given several order national possible rather second face per among
form important often things looking early white case become large big need four within
felt children along saw best church ever least power development light thing family
interest want members mind country area others done turned although open god service
certain kind problem began different door thus help means sense whole matter perhaps
itself york times human law line above name example action company hands local show
whether five history gave today either act feet across taken past quite anything seen
having death week experience body word half really field am car words already themselves
information tell together college shall money period held keep sure probably free
seems political real behind cannot miss question air office making brought whose
special heard major problems ago became federal moment study available known result
street economic boy position reason change south board individual job areas society
west close turn love community true court force full seem""".split()

SYLLABLES = [
    "ka", "lo", "ven", "tri", "sum", "ber", "qua", "zo", "mel", "dor", "fin", "gal",
    "rex", "ith", "pra", "sto", "nel", "vu", "cha", "wen", "ox", "ly", "tion", "ment",
]
PUNCT = [".", ".", ".", ",", ",", ";", ":", "?", "!", " —", "…"]
UNICODE = ["café", "naïve", "résumé", "Zürich", "São", "Łódź", "façade", "“quoted”", "€42", "½"]


def english_ish(rng: random.Random, n_chars: int) -> str:
    """Varied English-like prose: common words, invented words, numbers,
    capitals, punctuation, some non-ASCII, paragraphs. Deterministic per seed."""
    out: list[str] = []
    size = 0
    sentence_start = True
    while size < n_chars:
        r = rng.random()
        if r < 0.86:
            w = rng.choice(COMMON)
        elif r < 0.95:
            w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        elif r < 0.97:
            w = str(rng.randint(0, 99999))
        else:
            w = rng.choice(UNICODE)
        if sentence_start:
            w = w[:1].upper() + w[1:]
            sentence_start = False
        if rng.random() < 0.12:
            w += rng.choice(PUNCT)
            sentence_start = w.endswith((".", "?", "!"))
        if rng.random() < 0.01:
            w += "\n\n"
            sentence_start = True
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


def chat_body(text: str) -> bytes:
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": text},
        ],
        "max_tokens": 16,
    }
    return json.dumps(body, ensure_ascii=False).encode()


@dataclass
class Workload:
    name: str
    tokens: int  # target content tokens (0: size by bytes instead)
    seed: int
    bytes_: int = 0
    over_limit: bool = False
    # (phase, connections) of the closed-loop or serial runs, per target
    phases: list = field(default_factory=list)
    long: bool = False
    # requests/s per target of the interleaved moderate-load run (0: none)
    paced_rate: float = 0.0


def build_bodies(out: Path, tokenizer_json: Path, workloads: list[Workload], flood_bytes: int) -> dict:
    """Writes each workload's body (and the content text, for the encode floor)
    once; a stamp keeps them across runs."""
    from tokenizers import Tokenizer  # the venv has it (transformers' dependency)

    bodies = out / "bodies"
    bodies.mkdir(parents=True, exist_ok=True)
    meta_path = bodies / "meta.json"
    key = {"v": 3, "w": [(w.name, w.tokens, w.seed) for w in workloads], "flood": flood_bytes}
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key and all((bodies / f"{w.name}.json").exists() for w in workloads):
            return meta
    tok = Tokenizer.from_file(str(tokenizer_json))
    sample = english_ish(random.Random(7), 200_000)
    chars_per_token = len(sample) / len(tok.encode(sample, add_special_tokens=False).ids)
    meta = {"key": key, "chars_per_token": round(chars_per_token, 3), "bodies": {}}
    for w in workloads:
        rng = random.Random(w.seed)
        text = english_ish(rng, int(w.tokens * chars_per_token))
        n = len(tok.encode(text, add_special_tokens=False).ids)
        # One correction pass brings the count close to the target.
        text = english_ish(random.Random(w.seed), int(len(text) * w.tokens / n))
        n = len(tok.encode(text, add_special_tokens=False).ids)
        (bodies / f"{w.name}.txt").write_text(text)
        body = chat_body(text)
        (bodies / f"{w.name}.json").write_bytes(body)
        meta["bodies"][w.name] = {"content_tokens": n, "body_bytes": len(body)}
    # The flood body: 4 MiB of JSON, over the limit.
    overhead = len(chat_body(""))
    text = english_ish(random.Random(99), flood_bytes - overhead)
    # Non-ASCII characters take more than one byte: trim to the byte budget.
    text = text.encode()[: flood_bytes - overhead].decode(errors="ignore")
    body = chat_body(text)
    (bodies / "flood.json").write_bytes(body)
    meta["bodies"]["flood"] = {
        "content_tokens": len(tok.encode(text, add_special_tokens=False).ids),
        "body_bytes": len(body),
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------------------
# Processes

STARTED: list[subprocess.Popen] = []


def nginx_version() -> str:
    """`nginx -v` says `nginx version: nginx/1.22.1` on stderr."""
    try:
        r = subprocess.run([shutil.which("nginx") or "/usr/sbin/nginx", "-v"], capture_output=True, text=True)
    except OSError:
        return "?"
    m = re.search(r"nginx/(\S+)", r.stderr)
    return m.group(1) if m else "?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str, argv: list[str], logs: Path, env: dict | None = None) -> subprocess.Popen:
    log = open(logs / f"{name}.log", "wb")
    p = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})}, start_new_session=True,
    )
    STARTED.append(p)
    return p


def stop_all() -> None:
    # Only what this script started, by pid (and each one's own process group,
    # which start_new_session made for it alone).
    for p in STARTED:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 10
    for p in STARTED:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def status_kib(pids: list[int], key: str) -> int:
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def reset_peak(pids: list[int]) -> bool:
    ok = True
    for p in pids:
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def http(method: str, url: str, body: bytes | None = None, timeout: float = 600) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_ready(name: str, proc: subprocess.Popen, url: str, body: bytes, logs: Path, patience: float = 180) -> None:
    deadline = time.time() + patience
    last = ""
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{name} exited ({proc.returncode}); see {logs / (name + '.log')}")
        try:
            status, _ = http("POST", url, body, timeout=10)
            if status == 200:
                return
            last = f"status {status}"
        except (OSError, urllib.error.URLError) as e:
            last = str(e)
        time.sleep(0.3)
    sys.exit(f"{name} not ready after {patience}s ({last}); see {logs / (name + '.log')}")


@dataclass
class Target:
    name: str
    label: str
    port: int
    proc: subprocess.Popen
    admin: int | None = None
    # The path every request of this target goes to: the chat route, but for
    # `guard-hop`, which forwards its own allowlisted path uninspected.
    path: str = CHAT_PATH

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        return tree(self.proc.pid)


# ---------------------------------------------------------------------------
# Load

def wrk(url: str, body: Path, conns: int, seconds: float, statuses: bool = False,
        path: str = CHAT_PATH) -> dict:
    env = {**os.environ, "BENCH_BODY": str(body), "BENCH_PATH": path}
    if statuses:
        env["BENCH_STATUSES"] = "1"
    argv = [
        "wrk", f"-t{min(conns, 2)}", f"-c{conns}", f"-d{max(1, round(seconds))}s",
        "--timeout", "300s", "-s", str(REPO / "bench" / "wrk.lua"), url,
    ]
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            out = json.loads(line[len("BENCHJSON "):])
            merged: dict[str, int] = {}
            for code, n in out.pop("statuses"):
                merged[str(code)] = merged.get(str(code), 0) + n
            out["statuses"] = merged
            return out
    raise RuntimeError(f"wrk printed no result: {r.stdout}\n{r.stderr}")


def measure(t: Target, body: Path, conns: int, seconds: float) -> dict:
    pids = t.pids()
    peak_reset = reset_peak(pids)
    cpu0 = cpu_seconds(pids)
    res = wrk(t.url(), body, conns, seconds, path=t.path)
    cpu1 = cpu_seconds(pids)
    res["cpu_s"] = cpu1 - cpu0
    res["peak_rss_kib"] = status_kib(pids, "VmHWM")
    res["peak_reset"] = peak_reset
    res["conns"] = conns
    res["rps"] = res["requests"] / (res["duration_us"] / 1e6) if res["duration_us"] else 0.0
    return res


def serial(t: Target, body: Path, n: int) -> dict:
    """n requests one after another on one keep-alive connection: for the
    huge prompts, where a handful of requests is the whole story and a
    duration-bound run could end before the slowest target answers once."""
    payload = body.read_bytes()
    pids = t.pids()
    peak_reset = reset_peak(pids)
    cpu0 = cpu_seconds(pids)
    conn = httpclient.HTTPConnection("127.0.0.1", t.port, timeout=600)
    lat: list[float] = []
    statuses: dict[str, int] = {}
    started = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("POST", t.path, body=payload, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        lat.append(time.perf_counter() - t0)
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        if r.getheader("connection", "").lower() == "close":
            conn.close()
            conn = httpclient.HTTPConnection("127.0.0.1", t.port, timeout=600)
    elapsed = time.perf_counter() - started
    conn.close()
    cpu1 = cpu_seconds(pids)
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6

    return {
        "requests": n, "duration_us": int(elapsed * 1e6), "rps": n / elapsed,
        "p50_us": pct(0.5), "p90_us": pct(0.9), "p99_us": pct(0.99), "max_us": lat[-1] * 1e6,
        "mean_us": sum(lat) / n * 1e6, "statuses": statuses,
        "err_status": sum(v for k, v in statuses.items() if not k.startswith("2")),
        "err_connect": 0, "err_read": 0, "err_write": 0, "err_timeout": 0,
        "cpu_s": cpu1 - cpu0, "peak_rss_kib": status_kib(pids, "VmHWM"), "peak_reset": peak_reset,
        "conns": 1,
    }


def paced(binary: Path, targets: list, body: Path, rate: float, seconds: float) -> dict:
    """One interleaved run (bench/harness/src/bin/bench_paced.rs): `rate` requests/s per
    target, dealt round-robin. Returns per-target latency stats in µs."""
    argv = [str(binary), "--body", str(body), "--rate", str(rate * len(targets)),
            "--seconds", str(seconds), *(f"{t.name}={t.url()}" for t in targets)]
    r = subprocess.run(argv, capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            return json.loads(line[len("BENCHJSON "):])
    raise RuntimeError(f"bench_paced printed no result: {r.stdout}\n{r.stderr}")


def guard_count_stats(admin: int) -> tuple[float, int]:
    """Sum and count of prefill_guard_count_duration_seconds over all series."""
    _, text = http("GET", f"http://127.0.0.1:{admin}/metrics", timeout=10)
    s = n = 0.0
    for line in text.decode().splitlines():
        m = re.match(r"prefill_guard_count_duration_seconds_(sum|count)(\{[^}]*\})? (\S+)", line)
        if m:
            if m.group(1) == "sum":
                s += float(m.group(3))
            else:
                n += float(m.group(3))
    return s, int(n)


def guard_rejections(admin: int) -> dict[str, float]:
    _, text = http("GET", f"http://127.0.0.1:{admin}/metrics", timeout=10)
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        m = re.match(r'prefill_guard_rejections_total\{.*reason="([^"]+)".*\} (\S+)', line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def encode_floor(binary: Path, tokenizer_json: Path, text: Path, repeats: int) -> dict:
    r = subprocess.run(
        [str(binary), str(tokenizer_json), str(text), str(repeats)],
        env={**os.environ, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True, text=True, check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


# Polls a URL every 0.1 s until stdin closes; prints "status,seconds" lines.
HEALTH_POLLER = """
import select, sys, time, urllib.request
url, out = sys.argv[1], []
while not select.select([sys.stdin], [], [], 0.1)[0]:
    t0 = time.perf_counter()
    try:
        status = urllib.request.urlopen(url, timeout=5).status
    except Exception:
        status = 0
    out.append(f"{status},{time.perf_counter() - t0:.6f}")
print(" ".join(out))
"""


def flood(t: Target, body: Path, seconds: float, conns: int = 64) -> dict:
    """conns clients at once, each sending the 4 MiB body, again and again
    until `seconds` have passed (each at least once), while /healthz on the
    admin port is polled and the guard's RSS sampled. A refusal may come
    before the body is read (a shed), so a send that fails is recorded as such."""
    payload = body.read_bytes()
    pids = t.pids()
    reset_peak(pids)
    rej0 = guard_rejections(t.admin)
    stop = threading.Event()
    lock = threading.Lock()
    health: list[tuple[int, float]] = []
    statuses: dict[str, int] = {}
    latencies: list[float] = []
    rss_max = [0]
    deadline = time.time() + seconds

    def client() -> None:
        conn = None
        while True:
            if conn is None:
                conn = httpclient.HTTPConnection("127.0.0.1", t.port, timeout=600)
            t0 = time.perf_counter()
            try:
                try:
                    conn.request("POST", CHAT_PATH, body=payload,
                                 headers={"Content-Type": "application/json"})
                except OSError:
                    # Answered (and closed) before the whole body was sent: a
                    # shed. The answer may still be readable.
                    pass
                r = conn.getresponse()
                r.read()
                key = str(r.status)
                if r.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, httpclient.HTTPException) as e:
                key = f"connection closed, no answer read ({type(e).__name__})"
                conn.close()
                conn = None
            with lock:
                statuses[key] = statuses.get(key, 0) + 1
                latencies.append(time.perf_counter() - t0)
            if time.time() >= deadline:
                break
        if conn is not None:
            conn.close()

    def poll_health() -> None:
        # In a process of its own: in this one, the 64 sending threads hold
        # the GIL for long enough to add hundreds of milliseconds to a probe
        # that the guard answered at once.
        poller = subprocess.Popen([sys.executable, "-c", HEALTH_POLLER, f"http://127.0.0.1:{t.admin}/healthz"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        stop.wait()
        out, _ = poller.communicate("")
        for line in out.split():
            status, secs = line.split(",")
            health.append((int(status), float(secs)))

    def sample_rss() -> None:
        while not stop.is_set():
            rss_max[0] = max(rss_max[0], status_kib(pids, "VmRSS"))
            stop.wait(0.05)

    watchers = [threading.Thread(target=poll_health), threading.Thread(target=sample_rss)]
    for th in watchers:
        th.start()
    cpu0 = cpu_seconds(pids)
    started = time.perf_counter()
    clients = [threading.Thread(target=client) for _ in range(conns)]
    for th in clients:
        th.start()
    for th in clients:
        th.join()
    elapsed = time.perf_counter() - started
    cpu1 = cpu_seconds(pids)
    stop.set()
    for th in watchers:
        th.join()
    rej1 = guard_rejections(t.admin)
    ok = sorted(lat for s, lat in health if s == 200)
    latencies.sort()
    return {
        "clients": conns,
        "elapsed_s": elapsed,
        "responses": sum(statuses.values()),
        "statuses": statuses,
        "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "latency_max_s": latencies[-1] if latencies else None,
        "cpu_s": cpu1 - cpu0,
        "peak_rss_kib": status_kib(pids, "VmHWM"),
        "sampled_rss_max_kib": rss_max[0],
        "healthz_total": len(health),
        "healthz_ok": len(ok),
        "healthz_max_ms": ok[-1] * 1e3 if ok else None,
        "healthz_p50_ms": ok[len(ok) // 2] * 1e3 if ok else None,
        "rejections": {k: rej1.get(k, 0) - rej0.get(k, 0) for k in rej1 if rej1.get(k, 0) != rej0.get(k, 0)},
    }


# ---------------------------------------------------------------------------
# Report

def ms(us: float | None) -> str:
    if us is None:
        return "n/a"
    v = us / 1e3
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def non_2xx(paced_stats: dict) -> int:
    """Answers of an interleaved run (bench_paced) whose status was not 2xx."""
    return sum(n for code, n in paced_stats["statuses"].items() if not str(code).startswith("2"))


def fmt_statuses(res: dict) -> str:
    if res["requests"] == 0:
        return "none completed"
    errs = [f"{k} {res[k]}" for k in ("err_connect", "err_read", "err_write", "err_timeout") if res.get(k)]
    s = "all 2xx" if not res["err_status"] else f"{res['err_status']} non-2xx"
    return ", ".join([s] + errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: seconds-long runs")
    ap.add_argument("--targets", default="direct,envoy,nginx,guard,guard-release,router,naive")
    ap.add_argument("--workloads", default="1k,32k,600k,1M,agent")
    ap.add_argument("--no-flood", action="store_true")
    ap.add_argument("--out", default=str(REPO / "target" / "bench"))
    ap.add_argument("--guard", default=str(REPO / "target" / "release" / "prefill-guard"))
    ap.add_argument("--stub", default=str(REPO / "target" / "release" / "examples" / "bench_stub"))
    ap.add_argument("--encode", default=str(REPO / "target" / "release" / "bench_encode"))
    ap.add_argument("--paced", default=str(REPO / "target" / "release" / "examples" / "bench_paced"))
    ap.add_argument("--python", default=sys.executable, help="the venv's python (router, naive guard)")
    ap.add_argument("--measured", default="", help="which guard build is measured (commit), for the report")
    args = ap.parse_args()

    quick = args.quick
    seconds = float(os.environ.get("BENCH_SECONDS", 2 if quick else 10))
    paced_seconds = float(os.environ.get("BENCH_PACED_SECONDS", 3 if quick else 30))
    long_requests = int(os.environ.get("BENCH_LONG_REQUESTS", 2 if quick else 8))
    flood_seconds = float(os.environ.get("BENCH_FLOOD_SECONDS", 3 if quick else 15))
    conn = int(os.environ.get("BENCH_CONN", 32))
    # Closed-loop runs per target and workload, interleaved (see the loop).
    rounds = max(1, int(os.environ.get("BENCH_ROUNDS", 1)))
    # The RSS bound BENCHMARKS.md states for the flood (see there for why).
    flood_bound = int(os.environ.get("BENCH_FLOOD_RSS_BOUND_MIB", 1024))
    shared = Path(os.environ.get("PREFILL_GUARD_SHARED", REPO.parent / "shared"))
    tokenizer_dir = shared / "tokenizers" / "qwen2.5"
    if not (tokenizer_dir / "tokenizer.json").exists():
        sys.exit(f"missing {tokenizer_dir}/tokenizer.json (set PREFILL_GUARD_SHARED)")
    # The guard gets the path relative to the repo, as tests and docs use it.
    tokenizer_arg = os.path.relpath(tokenizer_dir, REPO)

    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # `direct` is every other target's baseline: always measured.
    chosen = ["direct", *args.targets.split(",")]
    wanted = args.workloads.split(",")

    workloads = [
        Workload("1k", 1_000, 1, phases=[("throughput", conn)],
                 paced_rate=float(os.environ.get("BENCH_PACED_RATE_1K", 200))),
        Workload("32k", 32_000, 2, phases=[("throughput", 8)],
                 paced_rate=float(os.environ.get("BENCH_PACED_RATE_32K", 25))),
        Workload("600k", 600_000, 3, phases=[("serial", 1)], long=True),
        Workload("1M", 1_000_000, 4, over_limit=True, phases=[("serial", 1)], long=True),
    ]
    meta = build_bodies(out, tokenizer_dir / "tokenizer.json", workloads, 4 * 1024 * 1024)
    workloads = [w for w in workloads if w.name in wanted]
    bodies = out / "bodies"
    small = (bodies / "1k.json").read_bytes()

    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    stub_port = free_port()
    stub = start("stub", [args.stub, f"127.0.0.1:{stub_port}", "2"], logs)
    stub_url = f"http://127.0.0.1:{stub_port}"
    wait_ready("stub", stub, stub_url + CHAT_PATH, small, logs)
    targets = [Target("direct", "client → stub", stub_port, stub)]
    targets_started = time.time()

    if "envoy" in chosen:
        port = free_port()
        cfg = (REPO / "bench" / "envoy.yaml").read_text()
        cfg = cfg.replace("@LISTEN_PORT@", str(port)).replace("@UPSTREAM_PORT@", str(stub_port))
        (out / "envoy.yaml").write_text(cfg)
        envoy = str(Path(args.python).parent / "envoy")
        p = start("envoy", [envoy, "-c", str(out / "envoy.yaml"), "--concurrency", "2",
                            "--log-level", "error", "--disable-hot-restart"], logs)
        targets.append(Target("envoy", "Envoy 1.40 pass-through", port, p))
    if "nginx" in chosen:
        port = free_port()
        # nginx reads relative paths from its own prefix, not the working directory.
        nginx_dir = (out / "nginx").resolve()
        nginx_dir.mkdir(exist_ok=True)
        cfg = (REPO / "bench" / "nginx.conf").read_text()
        cfg = (cfg.replace("@LISTEN_PORT@", str(port)).replace("@UPSTREAM_PORT@", str(stub_port))
               .replace("@DIR@", str(nginx_dir)))
        (nginx_dir / "nginx.conf").write_text(cfg)
        p = start("nginx", [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(nginx_dir / "nginx.conf"),
                            "-e", "stderr"], logs)
        targets.append(Target("nginx", f"nginx {nginx_version()} pass-through", port, p))
    def guard(name: str, label: str, extra: list[str], path: str = CHAT_PATH) -> None:
        """One `prefill-guard serve` in front of the stub, with `extra` flags."""
        port, admin = free_port(), free_port()
        p = start(name, [
            args.guard, "serve", "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
            "--upstream", stub_url, "--tokenizer", tokenizer_arg, "--max-req-input-len", str(LIMIT),
            *extra, *os.environ.get("BENCH_GUARD_ARGS", "").split(),
        ], logs)
        targets.append(Target(name, label, port, p, admin=admin, path=path))

    if "guard" in chosen:
        guard("guard", "prefill-guard", [])
    if "guard-hop" in chosen:
        # The same guard on a path it forwards uninspected (`--allow-route`):
        # its hop alone (hyper on both sides, the kernel's copies, metrics and
        # the decision line), the floor under `guard`. The two side by side
        # split the guard's cost into the hop, which Envoy and nginx also pay,
        # and inspection, which they do not do.
        guard("guard-hop", "prefill-guard, uninspected path", ["--allow-route", HOP_PATH], path=HOP_PATH)
    if "guard-release" in chosen:
        # The same guard told the server's release: one family's count. The
        # plain `guard` states none, so it counts every family's prompt (the
        # largest wins); the two side by side give what that costs.
        guard("guard-release", "prefill-guard, release stated (0.5.23)", ["--sglang-version", "0.5.23"])
    if "router" in chosen:
        port = free_port()
        p = start("router", [
            args.python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", stub_url, "--policy", "round_robin",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--log-level", "warn",
        ], logs)
        targets.append(Target("router", "sglang-router 0.3.2", port, p))
    if "naive" in chosen:
        port = free_port()
        p = start("naive", [
            args.python, str(REPO / "bench" / "naive_guard.py"), "--tokenizer", tokenizer_arg,
            "--upstream", stub_url, "--limit", str(LIMIT), "--port", str(port),
        ], logs, env={"TOKENIZERS_PARALLELISM": "false"})
        targets.append(Target("naive", "naive Python guard", port, p))
    for t in targets[1:]:
        wait_ready(t.name, t.proc, t.url() + t.path, small, logs)
    # Loading a tokenizer peaks well above the resting RSS (the guard: ~146 MiB
    # for a second, then ~55 MiB once the allocator has returned the parse's
    # memory, some of it only when an idle thread exits). A peak reset taken
    # inside that window would report startup, not the run: let it pass.
    settle = STARTUP_SETTLE_S - (time.time() - targets_started)
    if settle > 0:
        time.sleep(settle)
    targets = [t for t in targets if t.name in chosen]

    load_start = os.getloadavg()
    started = time.time()
    results: dict = {"workloads": {}, "meta": meta}
    for w in workloads:
        body = bodies / f"{w.name}.json"
        results["workloads"][w.name] = {}
        payload = body.read_bytes()
        before = {}
        for t in targets:
            # Warm-up: connections, allocator, the tokenizer's caches.
            for _ in range(1 if w.long else 20):
                http("POST", t.url() + t.path, payload)
            before[t.name] = guard_count_stats(t.admin) if t.admin else None
            results["workloads"][w.name][t.name] = {}
        # Closed-loop phases run `rounds` times, the targets in turn within a
        # round, so that each round's ratios compare the same minutes of the
        # machine; the serial phases of the huge prompts run once.
        for phase, conns in w.phases:
            for r in range(1 if phase == "serial" else rounds):
                for t in targets:
                    runs = results["workloads"][w.name][t.name]
                    if phase == "serial":
                        res = serial(t, body, long_requests)
                    else:
                        res = measure(t, body, conns, seconds)
                    runs.setdefault(f"{phase}_rounds", []).append(res)
                    print(f"# {w.name:>5} {t.name:>6} {phase:>10}{f' {r + 1}/{rounds}' if rounds > 1 else ''}: "
                          f"{res['rps']:.1f} req/s, p50 {ms(res['p50_us'])} ms, p99 {ms(res['p99_us'])} ms, "
                          f"{fmt_statuses(res)}", file=sys.stderr, flush=True)
            for t in targets:
                runs = results["workloads"][w.name][t.name]
                # The tables show the round of median throughput.
                runs[phase] = sorted(runs[f"{phase}_rounds"], key=lambda x: x["rps"])[len(runs[f"{phase}_rounds"]) // 2]
        for t in targets:
            if before[t.name] is not None:
                after = guard_count_stats(t.admin)
                n = after[1] - before[t.name][1]
                results["workloads"][w.name][t.name]["guard_count_mean_s"] = (
                    (after[0] - before[t.name][0]) / n if n else None)
        if w.paced_rate:
            # bench_paced sends every target one path: the chat route.
            eligible = [t for t in targets if t.name != "naive" and t.path == CHAT_PATH]
            res = paced(Path(args.paced), eligible, body, w.paced_rate, paced_seconds)
            for t in eligible:
                stats = res["targets"][t.name]
                results["workloads"][w.name][t.name]["paced"] = stats
                print(f"# {w.name:>5} {t.name:>6}     paced: {w.paced_rate:g} req/s, p50 {ms(stats['p50_us'])} ms, "
                      f"p99 {ms(stats['p99_us'])} ms, {stats['requests']} answered, {stats['errors']} errors, "
                      f"{stats.get('reopened', 0)} connections closed by the target reopened",
                      file=sys.stderr, flush=True)
                for what, n in stats.get("failures", {}).items():
                    print(f"# {w.name:>5} {t.name:>6}     failed {n}x: {what}", file=sys.stderr, flush=True)

    extra: dict = {}
    reps = 1 if quick else 3
    guard_t = next((t for t in targets if t.name == "guard"), None)
    for name in ("600k", "1M"):
        if name in results["workloads"] and guard_t:
            floor = encode_floor(Path(args.encode), tokenizer_dir / "tokenizer.json", bodies / f"{name}.txt", reps)
            extra[name] = floor
    if guard_t and not args.no_flood:
        results["flood"] = flood(guard_t, bodies / "flood.json", flood_seconds,
                                 int(os.environ.get("BENCH_FLOOD_CLIENTS", 64)))
        results["flood_rss_bound_mib"] = flood_bound
    results["encode"] = extra
    if "agent" in wanted:
        results["agent"] = agent_run(args, tokenizer_arg, tokenizer_dir / "tokenizer.json", stub_url, out, logs,
                                     meta["chars_per_token"], quick)
    results["elapsed_s"] = time.time() - started
    results["measured"] = args.measured
    results["load_before"] = load_start
    results["load_after"] = os.getloadavg()
    (out / "results.json").write_text(json.dumps(results, indent=1))
    report = render(results, targets, workloads, meta, quick, seconds, long_requests, flood_seconds)
    (out / "results.md").write_text(report)
    print(report)


# ---------------------------------------------------------------------------
# Agent workload: a long conversation resent with one new turn

AGENT_TURNS = 64  # turns of the first request (~7k tokens each)
AGENT_RESENDS = 4  # warm resends, each with one more turn


def agent_conversation(chars_per_token: float, turns: int, tokens_per_turn: int) -> list[dict]:
    """System prompt, then user and assistant turns of prose and code-ish
    text, deterministic: turn k is the same in every resend."""
    msgs = [{"role": "system", "content": english_ish(random.Random(500), int(2_000 * chars_per_token))}]
    for k in range(turns):
        rng = random.Random(1000 + k)
        text = english_ish(rng, int(tokens_per_turn * chars_per_token))
        if k % 3 == 2:
            # A tool result: a file listing with code, as agents resend them.
            code = "\n".join(f"    let x{i} = compute(x{i - 1}, {i}); // step {i}" for i in range(1, 200))
            text = f"```rust\nfn main() {{\n{code}\n}}\n```\n{text}"
        msgs.append({"role": "user" if k % 2 == 0 else "assistant", "content": text})
    if msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "Go on."})
    return msgs


def agent_body(msgs: list[dict]) -> bytes:
    return json.dumps({"model": MODEL, "messages": msgs, "max_tokens": 16}, ensure_ascii=False).encode()


def guard_scrape(admin: int) -> dict[str, float]:
    _, text = http("GET", f"http://127.0.0.1:{admin}/metrics", timeout=10)
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        m = re.match(r"(prefill_guard_count_(?:duration_seconds_(?:sum|count)|cache_\w+))(\{[^}]*\})? (\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(3))
    return out


def agent_run(args, tokenizer_arg: str, tokenizer_json: Path, stub_url: str, out: Path, logs: Path,
              chars_per_token: float, quick: bool) -> dict:
    """Two guards side by side (count cache on, the default, and off), each
    sent the same sequence on one connection: a ~450k-token conversation
    (cold), AGENT_RESENDS resends with one more turn each (warm), then the
    last one under another tenant's credential (another partition). Beside
    them, one single-threaded `tokenizers` encode of the last conversation's
    text."""
    turns = 8 if quick else AGENT_TURNS
    per_turn = 7_000
    resends = 2 if quick else AGENT_RESENDS
    convs = [agent_conversation(chars_per_token, turns + i, per_turn) for i in range(resends + 1)]
    text_path = out / "bodies" / "agent.txt"
    text_path.write_text("\n".join(m["content"] for m in convs[-1]))
    plan = [("cold", "tenant-a", convs[0])]
    plan += [(f"warm {i}", "tenant-a", c) for i, c in enumerate(convs[1:], 1)]
    plan += [("other tenant", "tenant-b", convs[-1])]
    results: dict = {"plan": [p[0] for p in plan], "guards": {}}
    for name, extra in (("cache", []), ("no cache", ["--count-cache-bytes", "0"])):
        port, admin = free_port(), free_port()
        proc = start(f"agent-{name.replace(' ', '-')}", [
            args.guard, "serve", "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
            "--upstream", stub_url, "--tokenizer", tokenizer_arg, "--max-req-input-len", str(LIMIT), *extra,
        ], logs)
        wait_ready(name, proc, f"http://127.0.0.1:{port}{CHAT_PATH}", chat_body("hello"), logs)
        pids = tree(proc.pid)
        rows = []
        conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=600)
        for label, tenant, msgs in plan:
            body = agent_body(msgs)
            before, cpu0 = guard_scrape(admin), cpu_seconds(pids)
            t0 = time.perf_counter()
            conn.request("POST", CHAT_PATH, body=body, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {tenant}"})
            r = conn.getresponse()
            r.read()
            wall = time.perf_counter() - t0
            after, cpu1 = guard_scrape(admin), cpu_seconds(pids)
            d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            rows.append({
                "request": label, "status": r.status, "body_bytes": len(body), "wall_s": wall,
                "count_s": d.get("prefill_guard_count_duration_seconds_sum"),
                "cpu_s": cpu1 - cpu0,
                "hits": d.get("prefill_guard_count_cache_hits_total", 0),
                "misses": d.get("prefill_guard_count_cache_misses_total", 0),
            })
            print(f"# agent {name:>8} {label:>12}: {r.status}, count {rows[-1]['count_s']:.3f} s, "
                  f"CPU {rows[-1]['cpu_s']:.2f} s, hits {rows[-1]['hits']:.0f} misses {rows[-1]['misses']:.0f}",
                  file=sys.stderr, flush=True)
        conn.close()
        results["guards"][name] = rows
        results.setdefault("cache_bytes", guard_scrape(admin).get("prefill_guard_count_cache_bytes"))
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    results["encode"] = encode_floor(Path(args.encode), tokenizer_json, text_path, 1 if quick else 3)
    return results


def render_agent(a: dict) -> list[str]:
    enc = a["encode"]["median_s"]
    L = ["## Agent workload: a long conversation resent with one new turn\n",
         f"One connection per guard, requests one after another; the conversation grows by one turn per "
         f"resend. Encode: one single-threaded `tokenizers` encode of the last conversation's text "
         f"({a['encode']['tokens']:,} tokens): {enc:.3f} s. Count = the guard's own count time "
         f"(`prefill_guard_count_duration_seconds`, parsing included for bodies this large); CPU = the "
         f"guard process's CPU-seconds for the request.\n",
         "| request | body MB | cache: count s | ×encode | CPU s | pieces hit / counted | no cache: count s | ×encode | CPU s |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    on, off = a["guards"]["cache"], a["guards"]["no cache"]
    for x, y in zip(on, off):
        L.append(f"| {x['request']} | {x['body_bytes'] / 1e6:.2f} | {x['count_s']:.3f} | {x['count_s'] / enc:.3f} | "
                 f"{x['cpu_s']:.2f} | {x['hits']:.0f} / {x['misses']:.0f} | {y['count_s']:.3f} | "
                 f"{y['count_s'] / enc:.3f} | {y['cpu_s']:.2f} |")
    warm = [x for x in on if x["request"].startswith("warm")]
    if warm:
        worst = max(x["count_s"] for x in warm)
        cold, cold_off = on[0]["count_s"], off[0]["count_s"]
        other = on[-1]["count_s"]
        L.append("")
        L.append(f"- warm resend, worst of {len(warm)}: {worst / enc:.3f}× the encode (target ≤ 0.05×) "
                 f"{'✅' if worst <= 0.05 * enc else '❌'}")
        L.append(f"- cold, cache on vs off: {cold:.3f} s vs {cold_off:.3f} s ({cold / cold_off:.2f}×; target: no slower)")
        L.append(f"- another tenant's resend of the same conversation: {other:.3f} s, {other / cold:.2f}× the cold "
                 f"request (a miss: it learns nothing from the other tenant's entries)")
        if a.get("cache_bytes") is not None:
            L.append(f"- cache held {a['cache_bytes'] / 1024:.0f} KiB after the run")
    L.append("")
    return L


class Verdicts:
    """A targets table: each row what was measured and met / not met."""

    def __init__(self, title: str):
        self.lines = [f"## {title}\n", "| target | measured | |", "|---|---|---|"]

    def row(self, what: str, measured: str, ok: bool | None) -> None:
        verdict = "met" if ok else "not met" if ok is not None else "not measured"
        self.lines.append(f"| {what} | {measured} | {verdict} |")

    def done(self) -> list[str]:
        return self.lines + [""]


def added_p99(W: dict, workload: str, name: str) -> tuple[float, str, bool] | None:
    """`name`'s p99 over the stub's in the interleaved run of `workload`:
    milliseconds, what to print beside it, and whether every request was
    answered 2xx (a fast error is no latency)."""
    wl = W.get(workload, {})
    g, d, e = wl.get(name), wl.get("direct"), wl.get("envoy")
    if not (g and d and "paced" in g and "paced" in d):
        return None
    add = (g["paced"]["p99_us"] - d["paced"]["p99_us"]) / 1e3
    context = ""
    if e and "paced" in e and name != "envoy":
        context = f" (Envoy {(e['paced']['p99_us'] - d['paced']['p99_us']) / 1e3:.2f} ms in the same run)"
    failed = non_2xx(g["paced"]) + g["paced"]["errors"]
    if failed:
        context += f"; {failed} requests not answered 2xx"
    return add, context, not failed


def cpu_per_request(t: dict) -> float | None:
    """Seconds of CPU per request of a target's (median) closed-loop run."""
    return cpu_each(t["throughput"])


def ratio(a: dict, b: dict, of) -> tuple[float, str]:
    """`of(a) / of(b)` for two targets' closed-loop runs: with several rounds,
    the median of each round's ratio (the two ran minutes apart at most),
    and the rounds' ratios to print beside it."""
    ra = a.get("throughput_rounds") or [a["throughput"]]
    rb = b.get("throughput_rounds") or [b["throughput"]]
    each = sorted(of(x) / of(y) for x, y in zip(ra, rb) if of(x) and of(y))
    if not each:
        return float("nan"), ""
    mid = len(each) // 2
    median = each[mid] if len(each) % 2 else (each[mid - 1] + each[mid]) / 2
    return median, (f" (median of {len(each)} rounds: {', '.join(f'{x:.2f}' for x in each)})"
                    if len(each) > 1 else "")


def rps(run: dict) -> float:
    return run["rps"]


def cpu_each(run: dict) -> float | None:
    """Seconds of CPU per request of one closed-loop run (the hop's processes)."""
    return run["cpu_s"] / run["requests"] if run["requests"] else None


def agent_resend_row(v: Verdicts, results: dict) -> None:
    ag = results.get("agent")
    if ag:
        floor = ag["encode"]["median_s"]
        warm = max(x["count_s"] for x in ag["guards"]["cache"] if x["request"].startswith("warm"))
        v.row("agent: a warm resend decided in ≤ 0.05× one encode of its text",
              f"{warm:.3f} s vs {floor:.3f} s = {warm / floor:.3f}×", warm <= 0.05 * floor)


def targets_met(results: dict) -> list[str]:
    """Issue 6's targets, each with what was measured and met / not met."""
    W = results["workloads"]
    v = Verdicts("Issue 6 targets")
    row = v.row

    one = W.get("1k", {})
    g, e, n = one.get("guard"), one.get("envoy"), one.get("naive")
    if g and e:
        r, each = ratio(g, e, rps)
        row("1k chat: throughput ≥ 0.8× pass-through proxy", f"{r:.2f}× Envoy{each}", r >= 0.8)
    if g and n:
        r, each = ratio(g, n, rps)
        row("1k chat: throughput ≥ 10× Python guard", f"{r:.1f}× naive{each}", r >= 10)
    p99 = added_p99(W, "1k", "guard")
    if p99:
        add, context, all_2xx = p99
        row("1k chat: added p99 < 1 ms at moderate load", f"{add:.2f} ms{context}", add < 1 and all_2xx)
    for name in ("1k", "32k"):
        wl = W.get(name, {})
        g, one = wl.get("guard"), wl.get("guard-release")
        if g and one and g["throughput"]["requests"] and one["throughput"]["requests"]:
            cpu, cpu_one = cpu_per_request(g), cpu_per_request(one)
            r = cpu / cpu_one
            row(f"{name} chat, release not stated (every family counted): CPU/request ≤ 1.2× one release's",
                f"{cpu * 1e3:.3f} vs {cpu_one * 1e3:.3f} ms = {r:.2f}×", r <= 1.2)
    enc = results.get("encode", {})
    for name, label, factor in (("600k", "600k under the limit: decided in ≤ 0.6× one single-threaded encode", 0.6),
                                ("1M", "1M over the limit: refused faster than one full encode", 1.0)):
        gw, dw, floor = W.get(name, {}).get("guard"), W.get(name, {}).get("direct"), enc.get(name)
        if gw and dw and floor:
            if name == "1M":
                took = gw["serial"]["p50_us"] / 1e6  # nothing is forwarded: the whole answer is the decision
            else:
                took = (gw["serial"]["p50_us"] - dw["serial"]["p50_us"]) / 1e6
            r = took / floor["median_s"]
            row(label, f"{took:.3f} s vs {floor['median_s']:.3f} s = {r:.2f}×", r <= factor)
    agent_resend_row(v, results)
    ag = results.get("agent")
    if ag:
        on, off = ag["guards"]["cache"], ag["guards"]["no cache"]
        cold, cold_off = on[0]["count_s"], off[0]["count_s"]
        row("agent: cold no slower than without the cache",
            f"{cold:.3f} s vs {cold_off:.3f} s = {cold / cold_off:.2f}×", cold <= cold_off * 1.1)
        row("agent: another tenant's resend is a miss, as slow as a cold one",
            f"{on[-1]['hits']:.0f} hits, {on[-1]['count_s']:.3f} s vs cold {cold:.3f} s",
            on[-1]["hits"] == 0 and on[-1]["count_s"] >= 0.5 * cold)
    fl = results.get("flood")
    if fl:
        bound = results.get("flood_rss_bound_mib")
        peak = fl["peak_rss_kib"] / 1024
        row(f"flood: RSS under the stated bound ({bound} MiB)", f"{peak:.0f} MiB", peak < bound if bound else None)
        row("flood: /healthz keeps answering", f"{fl['healthz_ok']}/{fl['healthz_total']} answered 200",
            fl["healthz_total"] > 0 and fl["healthz_ok"] == fl["healthz_total"])
        shed = fl["rejections"].get("overloaded", 0)
        row("flood: excess shed (503), not queued",
            f"{shed:.0f} of {fl['responses']} shed (guard's count); the admitted waited up to "
            f"{fl['latency_max_s'] or 0:.0f} s", shed > 0)
    return v.done()


def issue31_targets(results: dict) -> list[str]:
    """Issue 31's targets: the guard against the proxies operators already
    run, in this run, on this machine."""
    W = results["workloads"]
    v = Verdicts("Issue 31 targets")
    big, small = W.get("32k", {}), W.get("1k", {})
    g, e = big.get("guard"), big.get("envoy")
    if g and e:
        r, each = ratio(g, e, rps)
        v.row("32k chat: throughput ≥ Envoy's", f"{r:.2f}× Envoy{each}", r >= 1.0)
        cg, ce = cpu_per_request(g), cpu_per_request(e)
        if cg and ce:
            r, each = ratio(g, e, cpu_each)
            v.row("32k chat: CPU/request ≤ Envoy's",
                  f"{r:.2f}×{each}; {cg * 1e6:.0f} vs {ce * 1e6:.0f} µs in the median round", r <= 1.0)
    g, n = small.get("guard"), small.get("nginx")
    if g and n:
        r, each = ratio(g, n, rps)
        v.row("1k chat: throughput ≥ 0.8× nginx's", f"{r:.2f}× nginx{each}", r >= 0.8)
    for name in ("1k", "32k"):
        p99 = added_p99(W, name, "guard")
        if p99:
            add, context, all_2xx = p99
            v.row(f"{name} chat: added p99 < 1 ms at the paced load", f"{add:.2f} ms{context}",
                  add < 1 and all_2xx)
    agent_resend_row(v, results)
    return v.done() + hop_split(W)


def hop_split(W: dict) -> list[str]:
    """What the guard spends beside the proxies it is held to, split into
    its hop (`guard-hop`, the same binary forwarding uninspected) and
    inspection (the rest): the hop is what Envoy and nginx also do."""
    lines = []
    for name, peer in (("32k", "envoy"), ("1k", "nginx")):
        wl = W.get(name, {})
        g, h, p = wl.get("guard"), wl.get("guard-hop"), wl.get(peer)
        if not (g and h and p):
            continue
        hop, _ = ratio(h, p, rps)
        whole, _ = ratio(g, p, rps)
        cg, ch, cp = cpu_per_request(g), cpu_per_request(h), cpu_per_request(p)
        cpu = (f"; CPU a request: {peer} {cp * 1e6:.0f} µs, the hop {ch * 1e6:.0f} µs, inspected "
               f"{cg * 1e6:.0f} µs (inspection {(cg - ch) * 1e6:.0f} µs)" if cg and ch and cp else "")
        lines.append(f"- {name} chat, the guard's hop alone (`guard-hop`): {hop:.2f}× {peer}'s throughput, "
                     f"inspected {whole:.2f}×{cpu}.")
    return lines + [""] if lines else []


def render(results, targets, workloads, meta, quick, seconds, long_requests, flood_seconds) -> str:
    L: list[str] = []
    names = {t.name: t.label for t in targets}
    L.append(f"## Side by side{' (--quick: smoke numbers only)' if quick else ''}\n")
    rounds = max((len(r.get("throughput_rounds", [])) for wl in results["workloads"].values()
                  for r in wl.values()), default=1)
    L.append(f"wrk closed-loop runs of {seconds:g} s (req/s, CPU, RSS)"
             + (f", {rounds} rounds with the targets in turn, each target's median round shown" if rounds > 1 else "")
             + f"; 600k and 1M: {long_requests} requests one "
             "after another on one connection. "
             "Latency columns come from the interleaved moderate-load run (below) where there is one, "
             "else from the serial run (600k, 1M) or, marked †, from the closed-loop run (a target left out of "
             "the interleaved run, with no added latency: under a closed loop each target's latency follows its "
             "own throughput). Added = target minus `direct` in the same kind of run. "
             "CPU and RSS are the hop's own processes.\n")
    L.append("| workload | target | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | CPU ms/req | peak RSS MiB | responses |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for w in workloads:
        res = results["workloads"][w.name]
        info = meta["bodies"][w.name]
        size = info["body_bytes"]
        size = f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
        wl = f"{w.name} ({info['content_tokens']:,} tok, {size})"
        base = res.get("direct")
        for t in targets:
            runs = res[t.name]
            tput = runs.get("throughput") or runs.get("serial")
            # The same kind of run on both sides of "added".
            if "paced" in runs and base and "paced" in base:
                lat, blat, mark = runs["paced"], base["paced"], ""
            else:
                phase = "throughput" if "throughput" in runs else "serial"
                lat, blat, mark = tput, base.get(phase) if base else None, "†" if w.paced_rate else ""
            add50 = add99 = None
            # A closed loop's latency follows the target's own throughput
            # (the stub alone queues 32 connections at 140k req/s): a
            # difference of two is no hop's added latency, so none is shown.
            if blat and not mark and t.name != "direct" and lat["requests"] and blat["requests"]:
                add50 = lat["p50_us"] - blat["p50_us"]
                add99 = lat["p99_us"] - blat["p99_us"]
            cpu = f"{tput['cpu_s'] / tput['requests'] * 1e3:.2f}" if tput["requests"] else "n/a"
            L.append(
                f"| {wl} | {names[t.name]} | {tput['rps']:.1f} | {ms(lat['p50_us'])}{mark} | {ms(lat['p99_us'])}{mark} | "
                f"{ms(add50) + mark if add50 is not None else '—'} | {ms(add99) + mark if add99 is not None else '—'} | "
                f"{cpu} | {mib(tput['peak_rss_kib'])} | {fmt_statuses(tput)} |"
            )
    L.append("")
    paced_wl = [w for w in workloads if w.paced_rate and "paced" in results["workloads"][w.name].get("direct", {})]
    if paced_wl:
        L.append("## Latency at moderate load, interleaved\n")
        L.append("One open-loop run per workload (`bench/harness/src/bin/bench_paced.rs`): requests leave at a fixed rate, "
                 "dealt round-robin to the targets, so every target sees the same moments of the machine. "
                 "Latency is from writing the request to the end of the response, on warm keep-alive "
                 "connections.\n")
        L.append("| workload | target | req/s per target | answered | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | "
                 "added p50 ms | added p99 ms |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for w in paced_wl:
            res = results["workloads"][w.name]
            base = res["direct"]["paced"]
            for t in targets:
                p = res[t.name].get("paced")
                if not p:
                    continue
                add = t.name != "direct"
                errors = "".join(f" ({n} {what})" for n, what in ((non_2xx(p), "non-2xx"), (p["errors"], "errors")) if n)
                L.append(
                    f"| {w.name} | {names[t.name]} | {w.paced_rate:g} | {p['requests']}{errors} | "
                    f"{ms(p['p50_us'])} | {ms(p['p90_us'])} | "
                    f"{ms(p['p99_us'])} | {ms(p['p999_us'])} | {ms(p['max_us'])} | "
                    f"{ms(p['p50_us'] - base['p50_us']) if add else '—'} | {ms(p['p99_us'] - base['p99_us']) if add else '—'} |"
                )
        failed = [(w.name, t.name, what, n) for w in paced_wl for t in targets
                  for what, n in results["workloads"][w.name][t.name].get("paced", {}).get("failures", {}).items()]
        if failed:
            L.append("\nWhat the failed requests were (a status with the start of its body, or the step at which "
                     "the connection failed):\n")
            L.extend(f"* {wl} {names[t]}: {n}x `{what}`" for wl, t, what, n in failed)
        L.append("")
    enc = results.get("encode", {})
    g = {w: results["workloads"][w].get("guard") for w in results["workloads"]}
    d = {w: results["workloads"][w].get("direct") for w in results["workloads"]}
    if enc:
        L.append("## The guard's decision vs one single-threaded `tokenizers` encode\n")
        L.append("| prompt | encode (tokens, median s) | guard count time (metric, mean s) | guard end-to-end p50 s | "
                 "added over direct p50 s | ratio count/encode | ratio added/encode |")
        L.append("|---|---|---:|---:|---:|---:|---:|")
        for name, floor in enc.items():
            gr = g.get(name)
            if not gr:
                continue
            serial = gr["serial"]
            cnt = gr.get("guard_count_mean_s")
            e2e = serial["p50_us"] / 1e6 if serial["requests"] else None
            added = (serial["p50_us"] - d[name]["serial"]["p50_us"]) / 1e6 if e2e and d.get(name) else None
            r1 = f"{cnt / floor['median_s']:.2f}" if cnt else "n/a"
            r2 = f"{added / floor['median_s']:.2f}" if added else "n/a"
            L.append(f"| {name} | {floor['tokens']:,} tok, {floor['median_s']:.3f} s | "
                     f"{cnt:.3f} | {e2e:.3f} | {added:.3f} | {r1} | {r2} |" if cnt and e2e and added is not None else
                     f"| {name} | {floor['tokens']:,} tok, {floor['median_s']:.3f} s | n/a | n/a | n/a | {r1} | {r2} |")
        L.append("")
    if results.get("agent"):
        L.extend(render_agent(results["agent"]))
    fl = results.get("flood")
    if fl:
        L.append(f"## Flood: {fl['clients']} clients at once sending 4 MiB over-limit bodies to the guard\n")
        L.append(f"- each client sends, waits for the answer and sends again for {flood_seconds:g} s (at least once): "
                 f"{fl['responses']} requests in {fl['elapsed_s']:.1f} s; answers: "
                 + ", ".join(f"{k}: {v}" for k, v in sorted(fl["statuses"].items()))
                 + f"; client-side latency p50 {fl['latency_p50_s'] or 0:.2f} s, max {fl['latency_max_s'] or 0:.2f} s")
        L.append(f"- 503 read by the clients: {fl['statuses'].get('503', 0)}; the guard's rejections by reason "
                 "(`overloaded` = shed with 503): "
                 + (", ".join(f"{k} {v:.0f}" for k, v in fl["rejections"].items()) or "none"))
        L.append(f"- guard peak RSS (VmHWM): {mib(fl['peak_rss_kib'])} MiB (max sampled VmRSS {mib(fl['sampled_rss_max_kib'])} MiB)")
        L.append(f"- /healthz on the admin port: {fl['healthz_ok']}/{fl['healthz_total']} answered 200, "
                 f"p50 {fl['healthz_p50_ms'] or 0:.1f} ms, max {fl['healthz_max_ms'] or 0:.1f} ms")
        L.append(f"- guard CPU: {fl['cpu_s']:.1f} s over the flood\n")
    L.extend(targets_met(results))
    L.extend(issue31_targets(results))
    if results.get("measured"):
        L.append(f"Guard measured: {results['measured']}.")
    L.append(f"Load average before/after: {' '.join(f'{x:.2f}' for x in results['load_before'])} / "
             f"{' '.join(f'{x:.2f}' for x in results['load_after'])}; run took {results['elapsed_s']:.0f} s.")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
