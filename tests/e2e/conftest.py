"""Fixtures for the end-to-end tests.

The stack, all on 127.0.0.1 with free ports, every process started here and
stopped here (SIGTERM, then SIGKILL after a grace period, by pid):

    client -> prefill-guard serve -> sglang-router (PD mode) -> prefill-guard pd-sim
                                                                 (prefill + decode)

`pd-sim` is the repo's simulated SGLang PD pair (src/sim); the router is the
real `sglang-router` from PyPI, pinned in scripts/python/requirements-test.txt.
Run through scripts/e2e.sh, which makes the venv and builds the binary.

Environment:
  PREFILL_GUARD_BIN     the prefill-guard binary (default target/debug/prefill-guard,
                        built with cargo when missing)
  PREFILL_GUARD_SHARED  the shared reference data (default ../shared beside the repo)
  CI                    when set, missing reference data fails instead of skipping
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "qwen2.5"
# The simulated prefill pool's max_req_input_len. Small, so over-limit prompts
# are cheap to build and to count, and the dangerous window (>= LIMIT, below the
# context length) is wide.
LIMIT = 2048
# A debug build loads a real tokenizer slowly, and the machine is shared.
STARTUP_SECS = 180.0

# Counts the tests report; printed at the end of the run (pytest_terminal_summary),
# so the CI log shows what was measured.
SUMMARY: dict[str, dict[str, object]] = {}


# --------------------------------------------------------------------------
# Locations


def shared_dir() -> Path:
    env = os.environ.get("PREFILL_GUARD_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def _require(path: Path, what: str) -> Path:
    if path.exists():
        return path
    message = f"{what} not found: {path} (set PREFILL_GUARD_SHARED to the shared reference data)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    directory = shared_dir() / "tokenizers" / MODEL
    _require(directory / "tokenizer.json", "tokenizer")
    return directory


@pytest.fixture(scope="session")
def guard_bin() -> Path:
    env = os.environ.get("PREFILL_GUARD_BIN")
    if env:
        path = Path(env)
        if not path.is_file():
            pytest.fail(f"PREFILL_GUARD_BIN={env} is not a file", pytrace=False)
        return path
    path = REPO / "target" / "debug" / "prefill-guard"
    if not path.is_file():
        print(f"building {path}", file=sys.stderr)
        subprocess.run(
            ["cargo", "build", "--locked", "--bin", "prefill-guard"], cwd=REPO, check=True
        )
    return path


def router_argv() -> list[str]:
    """The router's launcher from the venv that runs pytest."""
    script = Path(sys.executable).parent / "sglang-router"
    if script.is_file():
        return [str(script), "launch"]
    return [sys.executable, "-m", "sglang_router.launch_router"]


def free_port() -> int:
    """A port the kernel just handed out. The router cannot bind port 0 and
    report it, so it gets one of these; the window for a collision is small."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# Processes


class Proc:
    """A child process whose output goes to a log file, line by line. Lines are
    offered to `watch` (if given) as they arrive."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, watch=None):
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w", encoding="utf-8", errors="replace")
        self._watch = watch
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            # Its own process group: a Ctrl-C of pytest does not reach it first,
            # and stop() below decides how it ends.
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        RUNNING.append(self)

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._log.write(line)
            self._log.flush()
            if self._watch is not None:
                self._watch(line)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._reader.join(5)
        self._log.close()
        if self in RUNNING:
            RUNNING.remove(self)

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


RUNNING: list[Proc] = []


@atexit.register
def _stop_leftovers() -> None:
    # If pytest exits without running fixture teardown (an internal error,
    # os._exit aside), the children are still ours to end.
    for proc in list(RUNNING):
        proc.stop(grace=2.0)


def wait_until(what: str, proc: Proc, check, timeout: float = STARTUP_SECS):
    """Polls `check()` until it returns a truthy value; fails early if `proc` died."""
    deadline = time.monotonic() + timeout
    last_error: object = None
    while time.monotonic() < deadline:
        if not proc.alive():
            pytest.fail(
                f"{proc.name} exited ({proc.popen.returncode}) before {what}:\n{proc.tail()}",
                pytrace=False,
            )
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError, ValueError) as e:
            last_error = e
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what} (last error: {last_error}):\n{proc.tail()}", pytrace=False)


# --------------------------------------------------------------------------
# The three components


@dataclass
class Sim:
    prefill: str
    decode: str
    bootstrap_port: int
    mode: str
    proc: Proc


@dataclass
class Router:
    url: str
    proc: Proc


@dataclass
class Guard:
    url: str
    admin: str
    upstream: str
    proc: Proc

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a Prometheus counter over the series matching `labels`."""
        text = httpx.get(f"{self.admin}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            series, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total


@dataclass
class Stacks:
    """Starts components on demand; stops everything it started, last first."""

    guard_bin: Path
    tokenizer: Path
    log_dir: Path
    started: list[Proc] = field(default_factory=list)

    def sim(self, mode: str, kv_pages: int = 16384, tokenizer: Path | None = None,
            model: str = MODEL, extra: list[str] | None = None,
            prefill_grammar_backend: str | None = None) -> Sim:
        """`prefill_grammar_backend`: the prefill worker's --grammar-backend
        (`none` or `xgrammar`; the simulator's default, xgrammar, when None)."""
        announced: dict = {}

        def watch(line: str) -> None:
            line = line.strip()
            if not announced and line.startswith("{"):
                try:
                    announced.update(json.loads(line))
                except ValueError:
                    pass

        proc = self._start(
            f"pd-sim-{mode}",
            [
                str(self.guard_bin),
                "pd-sim",
                "--prefill-listen", "127.0.0.1:0",
                "--decode-listen", "127.0.0.1:0",
                "--tokenizer", str(tokenizer or self.tokenizer),
                "--served-model-name", model,
                "--max-req-input-len", str(LIMIT),
                "--mode", mode,
                "--kv-pages", str(kv_pages),
            ]
            + (["--prefill-grammar-backend", prefill_grammar_backend] if prefill_grammar_backend else [])
            + (extra or []),
            watch,
        )
        wait_until("the simulator's address line", proc, lambda: "decode" in announced)
        sim = Sim(
            prefill=announced["prefill"],
            decode=announced["decode"],
            bootstrap_port=int(announced["bootstrap_port"]),
            mode=announced.get("mode", mode),
            proc=proc,
        )
        for url in (sim.prefill, sim.decode):
            wait_until(f"{url}/health", proc, lambda: httpx.get(f"{url}/health", timeout=5).status_code == 200)
        return sim

    def router(self, sim: Sim) -> Router:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = self._start(
            f"router-{sim.mode}",
            router_argv()
            + [
                "--pd-disaggregation",
                "--prefill", sim.prefill, str(sim.bootstrap_port),
                "--decode", sim.decode,
                "--host", "127.0.0.1",
                "--port", str(port),
                # Its metrics listener defaults to 0.0.0.0:29000; two routers would collide.
                "--prometheus-host", "127.0.0.1",
                "--prometheus-port", str(free_port()),
                "--policy", "round_robin",
                # One attempt per request: a retry would pick a new bootstrap room and
                # hide what the first attempt did.
                "--disable-retries",
                "--disable-circuit-breaker",
                "--shutdown-grace-period-secs", "1",
                "--log-level", "warn",
            ],
        )

        # "Router ready" is logged before the workers register (a background job);
        # /readiness counts healthy workers.
        def ready() -> bool:
            r = httpx.get(f"{url}/readiness", timeout=5)
            return r.status_code == 200 and r.json().get("healthy_workers") == 2

        wait_until("the router's two workers", proc, ready)
        return Router(url=url, proc=proc)

    def guard(self, upstream: str, prefill: str, tokenizer: Path | None = None,
              model: str = MODEL, decode: str | None = None) -> Guard:
        """`decode`: a decode worker's base URL (`--decode-url`), whose settings
        the guard compares with the prefill worker's; none when None."""
        serving: dict = {}

        def watch(line: str) -> None:
            try:
                v = json.loads(line)
            except ValueError:
                return
            if v.get("message") == "prefill-guard serving" or v.get("fields", {}).get("message") == "prefill-guard serving":
                serving.update(v.get("fields", v))

        proc = self._start(
            f"guard-{upstream.rsplit(':', 1)[-1]}",
            [
                str(self.guard_bin),
                "serve",
                "--listen", "127.0.0.1:0",
                "--admin-listen", "127.0.0.1:0",
                "--upstream", upstream,
                "--tokenizer", str(tokenizer or self.tokenizer),
                "--served-model-name", model,
                # The limit is read from the prefill worker itself: through the router,
                # /get_server_info is the router's own summary.
                "--prefill-url", prefill,
                "--log-format", "json",
            ]
            + (["--decode-url", decode] if decode else []),
            watch,
        )
        wait_until("the guard's serving line", proc, lambda: "listen" in serving and "admin_listen" in serving)
        guard = Guard(
            url=f"http://{serving['listen']}",
            admin=f"http://{serving['admin_listen']}",
            upstream=upstream,
            proc=proc,
        )
        wait_until(
            "the guard's /readyz (limit discovered)",
            proc,
            lambda: httpx.get(f"{guard.admin}/readyz", timeout=5).status_code == 200,
        )
        return guard

    def _start(self, name: str, argv: list[str], watch=None) -> Proc:
        # Unique log names: one session may start several of a kind.
        name = f"{len(self.started) + 1:02d}-{name}"
        proc = Proc(name, argv, self.log_dir, watch)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()
        self.started.clear()


@pytest.fixture(scope="session")
def stacks(guard_bin: Path, tokenizer_dir: Path, tmp_path_factory) -> Stacks:
    log_dir = Path(os.environ.get("PREFILL_GUARD_E2E_LOGS") or tmp_path_factory.mktemp("e2e-logs"))
    log_dir.mkdir(parents=True, exist_ok=True)
    s = Stacks(guard_bin=guard_bin, tokenizer=tokenizer_dir, log_dir=log_dir)
    yield s
    s.stop_all()


@pytest.fixture(scope="session")
def vulnerable(stacks: Stacks):
    """A vulnerable (SGLang <= 0.5.19) PD pair behind the real router, and the
    guard in front of that router."""
    sim = stacks.sim("vulnerable")
    router = stacks.router(sim)
    guard = stacks.guard(router.url, sim.prefill)
    return sim, router, guard


@pytest.fixture(scope="session")
def fixed(stacks: Stacks):
    """A fixed (SGLang >= 0.5.21) PD pair behind the real router, and the guard
    in front of that router."""
    sim = stacks.sim("fixed")
    router = stacks.router(sim)
    guard = stacks.guard(router.url, sim.prefill)
    return sim, router, guard


@pytest.fixture(scope="session")
def summary() -> dict[str, dict[str, object]]:
    return SUMMARY


# --------------------------------------------------------------------------
# Reporting


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and RUNNING:
        for proc in list(RUNNING):
            report.sections.append((f"log tail: {proc.name} ({proc.log_path})", proc.tail(40)))


def pytest_terminal_summary(terminalreporter):
    if not SUMMARY:
        return
    terminalreporter.section("prefill-guard end to end")
    for name, counts in SUMMARY.items():
        fields = ", ".join(f"{k}={v}" for k, v in counts.items())
        terminalreporter.write_line(f"{name}: {fields}")

