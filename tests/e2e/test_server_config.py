"""The server's own configuration decides the count, through the real router.

The vulnerable PD pair serves Qwen3 with `--default-chat-template-kwargs
'{"enable_thinking": false}'` (the usual way to serve it with thinking off):
its chat template then writes an empty think block, four tokens the default
reading of the template does not have. A prompt whose default count is just
under the limit therefore reaches or passes it on the server. Without the
guard such prompts are stubbed by the prefill scheduler and answered from
another tenant's KV pages; the guard, which reads the worker's
`/server_info` and counts with the same kwargs, refuses exactly those.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import LIMIT, _require, shared_dir
from workload import ATTACKER, Req, make_request, run_all

MODEL = "qwen3"
KWARGS = '{"enable_thinking": false}'


def count(guard_bin: Path, tokenizer: Path, bodies: list[dict], kwargs: str | None) -> list[int]:
    """The guard's own offline count of each chat body (`prefill-guard count`)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, body in enumerate(bodies):
            path = Path(tmp) / f"{i}.json"
            path.write_text(json.dumps(body))
            files.append(str(path))
        argv = [str(guard_bin), "count", "--tokenizer", str(tokenizer)]
        if kwargs:
            argv += ["--default-chat-template-kwargs", kwargs]
        out = subprocess.run(argv + files, capture_output=True, text=True, check=True).stdout
    return [json.loads(line)["tokens"] for line in out.splitlines()]


def chat(words: int, tail: str) -> dict:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": " ".join(["lorem"] * words) + tail}],
        "max_tokens": 256,
        "temperature": 0,
    }


@pytest.fixture(scope="module")
def qwen3() -> Path:
    directory = shared_dir() / "tokenizers" / MODEL
    _require(directory / "tokenizer.json", "tokenizer")
    return directory


@pytest.fixture(scope="module")
def window(guard_bin: Path, qwen3: Path) -> list[dict]:
    """Chats whose count under the default template is below the limit but
    whose count under the server's kwargs is at or over it."""
    tails = ["", " a", " a b", " a b c", " a b c d", " a b c d e"]
    base = LIMIT - 20
    candidates = [chat(base + extra, t) for extra in range(0, 20) for t in tails[:1]]
    candidates += [chat(LIMIT - 25 + extra, t) for extra in range(25) for t in tails[1:]]
    default = count(guard_bin, qwen3, candidates, None)
    served = count(guard_bin, qwen3, candidates, KWARGS)
    picked = [b for b, d, s in zip(candidates, default, served) if d < LIMIT <= s]
    assert all(s == d + 4 for d, s in zip(default, served)), "the kwargs add the empty think block"
    assert picked, "no prompt falls in the window"
    return picked


def test_the_window_leaks_without_the_guard_and_is_refused_with_it(stacks, guard_bin, qwen3, window, summary):
    sim = stacks.sim("vulnerable", tokenizer=qwen3, model=MODEL,
                     extra=["--default-chat-template-kwargs", KWARGS])
    router = stacks.router(sim)
    rng = random.Random(7)

    def attempt(base: str) -> list:
        outcomes = []
        for body in window:
            a = [make_request(rng, "A", "/v1/chat/completions", False, MODEL, LIMIT) for _ in range(3)]
            for req in a:
                outcomes += asyncio.run(run_all(base, [req], 1))
            b = Req(ATTACKER, "/v1/chat/completions", False, body, None)
            outcomes += asyncio.run(run_all(base, [b], 1))
        return [o for o in outcomes if o.req.tenant == ATTACKER]

    without = attempt(router.url)
    leaks = [o for o in without if o.leaked]
    # Each of these prompts is under the limit by the default count: a guard
    # that assumed SGLang's defaults would have let every one through.
    assert len(leaks) == len(window), [(o.status, o.raw[:200]) for o in without]

    guard = stacks.guard(router.url, sim.prefill, tokenizer=qwen3, model=MODEL)
    before = guard.metric("prefill_guard_rejections_total", reason="context_length_exceeded")
    with_guard = attempt(guard.url)
    assert all(o.refused_for_length for o in with_guard), [(o.status, o.raw[:200]) for o in with_guard]
    assert not any(o.leaked for o in with_guard)
    after = guard.metric("prefill_guard_rejections_total", reason="context_length_exceeded")
    assert after - before == len(window)
    summary["server configuration (qwen3, enable_thinking=false)"] = {
        "window_prompts": len(window),
        "leaks_without_guard": len(leaks),
        "refused_with_guard": sum(o.refused_for_length for o in with_guard),
        "leaks_with_guard": sum(bool(o.leaked) for o in with_guard),
    }
