"""The off-by-one that matters: SGLang refuses at L >= max_req_input_len.

Prompts of exactly LIMIT - 1 and LIMIT tokens, measured by the router's own
tokenizer (sglang-router loads the model's tokenizer.json with the Rust
`tokenizers` crate and serves /v1/tokenize), not by the guard's counter: an
independent count of the same text.
"""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from conftest import LIMIT, MODEL
from workload import SECRET, make_request, run_all


def router_count(router_url: str, text: str) -> int:
    r = httpx.post(f"{router_url}/v1/tokenize", json={"model": MODEL, "prompt": text}, timeout=60)
    r.raise_for_status()
    return r.json()["count"]


def prompt_of(router_url: str, tokens: int) -> str:
    """"lorem" and then " ipsum" repeated: one token per " ipsum" in Qwen's
    vocabulary; checked with the router's count rather than assumed."""
    head = router_count(router_url, "lorem")
    text = "lorem" + " ipsum" * (tokens - head)
    assert router_count(router_url, text) == tokens
    return text


def body(route: str, text: str) -> dict:
    if route == "/generate":
        return {"text": text, "sampling_params": {"max_new_tokens": 256}}
    return {"model": MODEL, "prompt": text, "max_tokens": 256}


def prime(base: str) -> None:
    rng = random.Random(31)
    asyncio.run(run_all(base, [make_request(rng, "A", "/v1/completions", False, MODEL, LIMIT) for _ in range(3)], 1))


@pytest.mark.parametrize("route", ["/v1/completions", "/generate"])
def test_limit_minus_one_is_served_and_limit_is_refused(vulnerable, route):
    _sim, router, guard = vulnerable
    below, at = prompt_of(router.url, LIMIT - 1), prompt_of(router.url, LIMIT)

    # Without the guard: the largest safe prompt is answered from its own pages;
    # one token more and the answer comes from A's.
    prime(router.url)
    r = httpx.post(router.url + route, json=body(route, below), timeout=120)
    assert r.status_code == 200 and not SECRET.search(r.text), r.text[:300]
    prime(router.url)
    r = httpx.post(router.url + route, json=body(route, at), timeout=120)
    assert r.status_code == 200 and SECRET.search(r.text), f"L = LIMIT did not leak: {r.text[:300]}"

    # With the guard: the same two prompts.
    prime(guard.url)
    r = httpx.post(guard.url + route, json=body(route, below), timeout=120)
    assert r.status_code == 200 and not SECRET.search(r.text), r.text[:300]
    assert "ipsum ipsum" in r.text
    prime(guard.url)
    r = httpx.post(guard.url + route, json=body(route, at), timeout=120)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    if route == "/generate":
        assert err["message"].startswith(f"Input length ({LIMIT} tokens)"), err
    else:
        assert err["code"] == "context_length_exceeded", err
        assert str(LIMIT) in err["message"], err
    assert not SECRET.search(json.dumps(err))
