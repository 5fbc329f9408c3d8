"""The leak without a long prompt: a prefill without a grammar backend.

SGLang's prefill scheduler, launched with `--grammar-backend none` (or
`--skip-tokenizer-init`), aborts every request that carries a grammar with
`set_finish_with_abort`: the prompt becomes the one-token stub and stays in
the PD handoff, exactly as an over-long prompt does (shared/docs/
pd-abort-paths.md, row G1). A decode worker that has a backend builds the
full request, reserves pages for the whole prompt and generates over stale
KV. No length is involved: a short chat asking for `response_format:
{"type": "json_object"}` is enough.

Here the pair runs `pd-sim --prefill-grammar-backend none` (decode keeps
xgrammar; each reports its `grammar_backend` in /server_info), behind the
real router. Without the guard the constrained requests come back with other
tenants' secrets. With the guard, told both workers (`--prefill-url`,
`--decode-url`), they are refused with `pd_grammar_backend_differs` before a
byte reaches the router, and requests without a grammar are served as usual.
"""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from conftest import LIMIT, MODEL
from workload import ATTACKER, LEGIT_TENANTS, ROUTES, Req, Tally, make_request, run_all

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
CODE = "pd_grammar_backend_differs"
# Constrained requests are this many words of filler: a few hundred tokens,
# far under the prefill limit, so only the grammar can make prefill stub them;
# long enough that the pages decode reserves reach well past the system
# prompt of the chat requests before them, into their secrets.
FILLER_WORDS = 150
TOOLS = [{
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
}]


@pytest.fixture(scope="module")
def grammar_pair(stacks):
    """A vulnerable pair whose prefill has no grammar backend, behind the real router."""
    sim = stacks.sim("vulnerable", prefill_grammar_backend="none")
    router = stacks.router(sim)
    return sim, router


@pytest.fixture(scope="module")
def grammar_guard(stacks, grammar_pair):
    """The guard in front of that router, comparing the prefill and the decode worker."""
    sim, router = grammar_pair
    return stacks.guard(router.url, sim.prefill, decode=sim.decode)


def filler(rng: random.Random) -> str:
    words = ["weather", "sunny", "cloudy", "rain", "wind", "forecast", "north", "south"]
    return "Answer in JSON. " + " ".join(rng.choice(words) for _ in range(FILLER_WORDS))


def constrained(rng: random.Random, kind: str, stream: bool) -> Req:
    """Tenant B's request carrying a grammar, without a secret of its own."""
    text = filler(rng)
    if kind == "chat json_object":
        body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 512,
                "temperature": 0, "stream": stream, "response_format": {"type": "json_object"}}
        route = CHAT
    elif kind == "chat tool_choice required":
        body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 512,
                "temperature": 0, "stream": stream, "tools": TOOLS, "tool_choice": "required"}
        route = CHAT
    elif kind == "generate regex":
        body = {"text": text, "stream": stream,
                "sampling_params": {"max_new_tokens": 512, "temperature": 0, "regex": "[a-z ]+"}}
        route = GENERATE
    elif kind == "completions regex":
        body = {"model": MODEL, "prompt": text, "max_tokens": 512, "temperature": 0, "stream": stream,
                "regex": "[a-z ]+"}
        route = COMPLETIONS
    else:
        raise ValueError(kind)
    return Req(ATTACKER, route, stream, body, None)


KINDS = ("chat json_object", "generate regex", "completions regex", "chat tool_choice required")


def prelude(seed: int, rounds: int = 2) -> list[Req]:
    """Per round, kind and streaming mode: three requests from legitimate
    tenants (every route), then B's constrained request. Sent one at a time,
    so B's decode takes the pages the last of them just freed."""
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        for kind in KINDS:
            for stream in (False, True):
                out += [make_request(rng, LEGIT_TENANTS[i], ROUTES[i], stream, MODEL, LIMIT) for i in range(3)]
                out.append(constrained(rng, kind, stream))
    return out


def kind_of(req: Req) -> str:
    body = req.body
    if req.route == GENERATE:
        return "generate regex"
    if req.route == COMPLETIONS:
        return "completions regex"
    return "chat tool_choice required" if "tools" in body else "chat json_object"


def sequential(base: str, reqs: list[Req]):
    out = []
    for req in reqs:
        out += asyncio.run(run_all(base, [req], 1))
    return out


def describe(outcomes) -> str:
    return "\n".join(
        f"{kind_of(o.req)} stream={o.req.stream}: {o.status} {o.error or o.raw[:300]!r}" for o in outcomes
    )


def refused_for_grammar(o) -> bool:
    """The guard's refusal: 400; OpenAI's error with the code on /v1/*, SGLang's
    `{"error": {"message": ...}}` naming the grammar backend on /generate."""
    if o.status != 400:
        return False
    try:
        err = json.loads(o.raw).get("error") or {}
    except ValueError:
        return False
    if o.req.route == GENERATE:
        return "grammar backend" in str(err.get("message", "")).lower()
    return err.get("code") == CODE


def test_workers_report_their_grammar_backends(grammar_pair):
    sim, _router = grammar_pair
    for url, mode, backend in ((sim.prefill, "prefill", "none"), (sim.decode, "decode", "xgrammar")):
        for route in ("/server_info", "/get_server_info"):
            info = httpx.get(f"{url}{route}", timeout=10).json()
            assert info["disaggregation_mode"] == mode, (url, route)
            assert info["grammar_backend"] == backend, (url, route)
            assert info["skip_tokenizer_init"] is False, (url, route)


def test_without_the_guard_a_grammar_reads_another_tenant(grammar_pair, summary):
    _sim, router = grammar_pair
    outcomes = sequential(router.url, prelude(seed=21))
    grammars = [o for o in outcomes if o.req.tenant == ATTACKER]
    everything = Tally.of(outcomes)
    leaks = [o for o in grammars if o.leaked]
    summary["without guard: grammar on a prefill without a backend (client -> sglang-router -> pd-sim)"] = {
        "requests": everything.requests,
        "grammar_requests": len(grammars),
        "leaks": len(leaks),
        "leaked_kinds": len({(kind_of(o.req), o.req.stream) for o in leaks}),
    }
    print(f"\nwithout guard (grammar): {len(grammars)} constrained requests, {len(leaks)} leaks; "
          f"e.g. {everything.examples}")
    assert leaks, "no constrained request leaked: the harness proves nothing.\n" + describe(grammars)
    # Each kind and streaming mode, replayed one at a time, leaks, short as it is.
    not_leaked = [o for o in grammars if not o.leaked]
    assert not not_leaked, "constrained requests that did not leak:\n" + describe(not_leaked)
    assert all(o.status == 200 for o in grammars), describe(grammars)


def test_with_the_guard_grammars_are_refused(grammar_guard, summary):
    guard = grammar_guard
    refused_before = guard.metric("prefill_guard_rejections_total")
    outcomes = sequential(guard.url, prelude(seed=22))
    refused_by_guard = guard.metric("prefill_guard_rejections_total") - refused_before
    grammars = [o for o in outcomes if o.req.tenant == ATTACKER]
    legit = [o for o in outcomes if o.req.tenant != ATTACKER]
    t = Tally.of(outcomes)
    refused = [o for o in grammars if refused_for_grammar(o)]
    summary["with guard: grammar on a prefill without a backend (client -> prefill-guard -> sglang-router -> pd-sim)"] = {
        "requests": t.requests,
        "grammar_requests": len(grammars),
        "leaks": t.leaks,
        "refused": len(refused),
        "served": t.served,
        "guard_refusals_metric": int(refused_by_guard),
    }
    print(f"\nwith guard (grammar): {t.requests} requests, {t.leaks} leaks, {len(refused)} refused, {t.served} served")

    assert t.leaks == 0, f"{t.leaks} answers held another tenant's secret: {t.examples}"
    not_refused = [o for o in grammars if not refused_for_grammar(o)]
    assert not not_refused, f"constrained requests not refused with {CODE}:\n" + describe(not_refused)
    not_served = [o for o in legit if not o.served_own]
    assert not not_served, "requests without a grammar not served:\n" + describe(not_served)
    # The guard refused them itself: none reached the router or the workers.
    assert refused_by_guard == len(grammars)
    # A plain chat, no grammar, right after: served.
    plain = make_request(random.Random(23), "C", CHAT, False, MODEL, LIMIT)
    (o,) = asyncio.run(run_all(guard.url, [plain], 1))
    assert o.status == 200 and o.served_own, describe([o])
    log = guard.proc.log_path.read_text(encoding="utf-8", errors="replace")
    assert "SECRET-" not in log and "weather" not in log
