"""Chat `input_ids` on SGLang before 0.5.13, through the real router.

Before 0.5.13 the chat request has no `input_ids` field: pydantic drops it
and the messages are rendered. A chat whose messages are over the prefill
limit and whose `input_ids` are a few tokens is therefore an over-limit
prompt on such a server, and a guard that counted `len(input_ids)` would
forward it. Here the pair announces 0.5.11 (`pd-sim --sglang-version
0.5.11`) and builds prompts as 0.5.11 does; the guard reads the version from
the prefill worker. Without the guard those chats read other tenants' KV
pages; with it they are refused before a byte reaches the workers.

The router itself (sglang-router 0.3.2) drops a chat's `input_ids` when it
re-serialises the request, so behind it even a 0.5.13+ worker renders the
messages. A guard that counted the ids for such a worker would forward the
chat, and it would leak: the guard counts the larger of the ids and the
messages, and the last test shows none leaks in front of 0.5.19 either.
"""

from __future__ import annotations

import asyncio
import os
import random

import httpx
import pytest

from conftest import LIMIT, MODEL
from workload import ATTACKER, LEGIT_TENANTS, ROUTES, Req, Tally, attack_prompt, body_for, make_request, run_all

VERSION = "0.5.11"
GUARDED_REQUESTS = int(os.environ.get("PREFILL_GUARD_E2E_IDS_REQUESTS", "600"))
CONCURRENCY = int(os.environ.get("PREFILL_GUARD_E2E_CONCURRENCY", "64"))
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def pre_0_5_13(stacks):
    """A vulnerable PD pair announcing SGLang 0.5.11 behind the real router,
    and the guard in front of that router (discovery from the prefill worker)."""
    sim = stacks.sim("vulnerable", extra=["--sglang-version", VERSION])
    router = stacks.router(sim)
    guard = stacks.guard(router.url, sim.prefill)
    return sim, router, guard


def ids_bypass(rng: random.Random, stream: bool) -> Req:
    """Tenant B's chat: messages at or over the limit, `input_ids` of 1-8 tokens."""
    body = body_for(CHAT, MODEL, attack_prompt(rng, LIMIT), stream, 256)
    body["input_ids"] = [rng.randrange(100, 5000) for _ in range(rng.randint(1, 8))]
    return Req(ATTACKER, CHAT, stream, body, None)


def prelude(seed: int, rounds: int = 3) -> list[Req]:
    """Per streaming mode and round: three chats from A, then B's bypass. Sent
    one at a time, so B's decode takes the pages A's requests just freed."""
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        for stream in (False, True):
            out += [make_request(rng, "A", CHAT, stream, MODEL, LIMIT) for _ in range(3)]
            out.append(ids_bypass(rng, stream))
    return out


def workload(n: int, seed: int) -> list[Req]:
    """Legitimate tenants on every route, streaming and not; a quarter of the
    requests are B's bypass chats."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        stream = rng.random() < 0.5
        if rng.random() < 0.25:
            out.append(ids_bypass(rng, stream))
        else:
            tenant = LEGIT_TENANTS[i % len(LEGIT_TENANTS)]
            out.append(make_request(rng, tenant, ROUTES[rng.randrange(3)], stream, MODEL, LIMIT))
    return out


def sequential(base: str, reqs: list[Req]):
    out = []
    for req in reqs:
        out += asyncio.run(run_all(base, [req], 1))
    return out


def describe(outcomes) -> str:
    return "\n".join(f"{o.req.route} stream={o.req.stream}: {o.status} {o.error or o.raw[:300]!r}" for o in outcomes)


def test_pair_announces_the_release(pre_0_5_13):
    sim, _router, _guard = pre_0_5_13
    for url in (sim.prefill, sim.decode):
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        assert info["version"] == VERSION


def test_without_the_guard_tiny_input_ids_read_tenant_a(pre_0_5_13, summary):
    _sim, router, _guard = pre_0_5_13
    first = sequential(router.url, prelude(seed=11))
    mixed = asyncio.run(run_all(router.url, workload(200, seed=12), 16))
    bypasses = [o for o in first if o.req.tenant == ATTACKER]
    everything = Tally.of(first + mixed)
    summary[f"without guard: chat input_ids on SGLang {VERSION} (client -> sglang-router -> pd-sim)"] = {
        "requests": everything.requests,
        "bypass_chats": sum(o.req.tenant == ATTACKER for o in first + mixed),
        "leaks": everything.leaks,
        "refused": everything.refused,
        "served": everything.served,
    }
    print(f"\nwithout guard ({VERSION}): {everything.requests} requests, {everything.leaks} leaks; e.g. {everything.examples}")
    # Each bypass sent right after A's chats is answered from A's pages: the
    # messages were rendered (over the limit), not the few ids.
    not_leaked = [o for o in bypasses if not o.leaked]
    assert not not_leaked, "bypass chats that did not leak:\n" + describe(not_leaked)
    assert all(o.status == 200 for o in bypasses), describe(bypasses)


def test_with_the_guard_tiny_input_ids_are_refused(pre_0_5_13, summary):
    _sim, _router, guard = pre_0_5_13
    # Stale secrets in the pool first, so a bypass would have something to find.
    sequential(guard.url, [r for r in prelude(seed=13, rounds=1) if r.tenant != ATTACKER])
    refused_before = guard.metric("prefill_guard_rejections_total", reason="context_length_exceeded")

    reqs = workload(GUARDED_REQUESTS, seed=14)
    outcomes = asyncio.run(run_all(guard.url, reqs, CONCURRENCY))
    t = Tally.of(outcomes)
    bypasses = [o for o in outcomes if o.req.tenant == ATTACKER]
    legit = [o for o in outcomes if o.req.tenant != ATTACKER]
    refused_by_guard = guard.metric("prefill_guard_rejections_total", reason="context_length_exceeded") - refused_before
    summary[f"with guard: chat input_ids on SGLang {VERSION} (client -> prefill-guard -> sglang-router -> pd-sim)"] = {
        "requests": t.requests,
        "concurrency": CONCURRENCY,
        "bypass_chats": len(bypasses),
        "leaks": t.leaks,
        "refused": t.refused,
        "served": t.served,
        "guard_refusals_metric": int(refused_by_guard),
    }
    print(f"\nwith guard ({VERSION}): {t.requests} requests, {t.leaks} leaks, {t.refused} refused, {t.served} served")

    assert bypasses and legit
    assert t.leaks == 0, f"{t.leaks} answers held another tenant's secret: {t.examples}"
    not_refused = [o for o in bypasses if not o.refused_for_length]
    assert not not_refused, "bypass chats not refused for length:\n" + describe(not_refused[:5])
    not_served = [o for o in legit if not o.served_own]
    assert not not_served, f"{len(not_served)} legitimate requests not served:\n" + describe(not_served[:5])
    # The guard refused them itself: they never reached the router or the workers.
    assert refused_by_guard == len(bypasses)
    log = guard.proc.log_path.read_text(encoding="utf-8", errors="replace")
    assert "SECRET-" not in log and "lorem" not in log


def test_behind_the_router_a_0_5_19_worker_never_sees_the_ids(vulnerable, summary):
    """The same bypass chats through the guard, in front of the router and the
    default vulnerable pair (SGLang 0.5.19, which reads a chat's input_ids).
    What should hold: none leaks and every one is refused."""
    _sim, _router, guard = vulnerable
    outcomes = sequential(guard.url, prelude(seed=15, rounds=2))
    bypasses = [o for o in outcomes if o.req.tenant == ATTACKER]
    summary["with guard: chat input_ids on SGLang 0.5.19 behind sglang-router 0.3.2 (which drops them)"] = {
        "bypass_chats": len(bypasses),
        "leaks": sum(bool(o.leaked) for o in bypasses),
        "refused": sum(o.refused_for_length for o in bypasses),
    }
    assert not any(o.leaked for o in outcomes), describe([o for o in bypasses if o.leaked])
    assert all(o.refused_for_length for o in bypasses), describe(bypasses)
