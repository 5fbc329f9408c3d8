"""The official openai SDK as the client: what an application built on it sees.

Deployments, each guard -> real sglang-router (PD) -> pd-sim:
  * vulnerable workers (SGLang <= 0.5.19): the guard is the only protection;
  * fixed workers (SGLang >= 0.5.21): the guard refuses first all the same.
The simulator's workers are a PD pair: every request needs the router's
bootstrap room, so there is no deployment with the guard straight in front of
them. Without the guard, the SDK hands tenant B tenant A's secret.
"""

from __future__ import annotations

import random

import openai
import pytest

from conftest import LIMIT, MODEL
from workload import attack_prompt, legit_prompt

MAX_TOKENS = 1024


@pytest.fixture(params=["vulnerable", "fixed"])
def guarded(request) -> str:
    """The guard's base URL in front of the router in front of `param` workers."""
    stack = request.getfixturevalue(request.param)
    return stack[-1].url


def client(base: str) -> openai.OpenAI:
    # No retries: a retried 400 would not be retried anyway, and a retried
    # 5xx would hide a failure this test must see.
    return openai.OpenAI(base_url=f"{base}/v1", api_key="sk-e2e", max_retries=0, timeout=60)


def secret(tenant: str = "A") -> tuple[str, str]:
    rng = random.Random()
    marker = f"SECRET-{tenant}-{rng.getrandbits(32):08x}"
    return marker, legit_prompt(rng, marker)


def test_models_list(guarded):
    models = {m.id: m for m in client(guarded).models.list()}
    assert MODEL in models
    # A client that budgets by max_model_len must not be told more than the
    # prefill pool takes (the workers report the context length, far above it).
    reported = (models[MODEL].model_extra or {}).get("max_model_len")
    assert reported is None or reported <= LIMIT


def test_chat(guarded):
    marker, prompt = secret()
    r = client(guarded).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, temperature=0
    )
    assert r.choices[0].message.content and marker in r.choices[0].message.content


def test_streaming_chat(guarded):
    marker, prompt = secret()
    stream = client(guarded).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert marker in text


def test_completions(guarded):
    marker, prompt = secret()
    r = client(guarded).completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
    assert marker in r.choices[0].text


def test_streaming_completions(guarded):
    marker, prompt = secret()
    stream = client(guarded).completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, stream=True)
    assert marker in "".join(c.choices[0].text for c in stream if c.choices)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_over_limit_chat_is_bad_request(guarded, stream):
    prompt = attack_prompt(random.Random(7), LIMIT)
    with pytest.raises(openai.BadRequestError) as e:
        r = client(guarded).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=16, stream=stream
        )
        # A stream that started would only fail while being read.
        list(r) if stream else None
    assert e.value.status_code == 400
    assert e.value.code == "context_length_exceeded"
    assert e.value.param == "messages"
    assert "maximum context length" in e.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_over_limit_completion_is_bad_request(guarded, stream):
    prompt = attack_prompt(random.Random(8), LIMIT)
    with pytest.raises(openai.BadRequestError) as e:
        r = client(guarded).completions.create(model=MODEL, prompt=prompt, max_tokens=16, stream=stream)
        list(r) if stream else None
    assert e.value.status_code == 400
    assert e.value.code == "context_length_exceeded"


def test_without_the_guard_the_sdk_hands_b_the_secret(vulnerable):
    """What the guard prevents, seen by the same SDK: tenant B's stream carries
    tenant A's secret (client -> router -> vulnerable workers)."""
    _sim, router, _guard = vulnerable
    c = client(router.url)
    marker, prompt = secret("A")
    for _ in range(3):
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=MAX_TOKENS)
    stream = c.completions.create(
        model=MODEL, prompt=attack_prompt(random.Random(9), LIMIT), max_tokens=256, stream=True
    )
    text = "".join(ch.choices[0].text for ch in stream if ch.choices)
    assert marker in text, f"B's answer did not hold A's marker {marker}: {text[:300]!r}"
