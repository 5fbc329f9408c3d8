"""The multi-tenant workload: who sends what, and how an answer is judged.

Legitimate tenants put a secret marker, unique per request, at the start of
their prompt and throughout it, so that any KV page their prompt fills holds
one. The attacker (tenant B) sends prompts at or over the prefill pool's limit
that carry no marker at all. The simulated model answers by reading its
context back, so an honest answer contains the caller's own marker, and an
answer built on stale pages contains somebody else's.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field

import httpx

SECRET = re.compile(r"SECRET-([A-Z])-([0-9a-f]{8})")
LEGIT_TENANTS = ("A", "C", "D")
ATTACKER = "B"
ROUTES = ("/v1/chat/completions", "/v1/completions", "/generate")


@dataclass(frozen=True)
class Req:
    tenant: str
    route: str
    stream: bool
    body: dict
    marker: str | None  # the secret this request carries (None for the attacker)

    @property
    def over_limit(self) -> bool:
        return self.tenant == ATTACKER


def legit_prompt(rng: random.Random, marker: str) -> str:
    # ~300-600 tokens; a marker every ~20 tokens, so every 16-slot KV page holds
    # at least part of one and a stale read of a few pages holds whole ones.
    words = ["account", "balance", "diagnosis", "password", "salary", "address", "contract"]
    parts = []
    for _ in range(rng.randint(20, 35)):
        parts.append(f"{marker} {' '.join(rng.choice(words) for _ in range(6))}.")
    return " ".join(parts)


def attack_prompt(rng: random.Random, limit: int) -> str:
    # "lorem" and friends are one token each with a leading space in Qwen's
    # vocabulary; 1.05-1.4x the limit in words is comfortably at or over it
    # without reaching the context length.
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"]
    n = rng.randint(int(limit * 1.05), int(limit * 1.4))
    return " ".join(rng.choice(words) for _ in range(n))


def body_for(route: str, model: str, prompt: str, stream: bool, max_tokens: int) -> dict:
    if route == "/v1/chat/completions":
        return {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": stream,
        }
    if route == "/v1/completions":
        return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    return {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
        "stream": stream,
    }


def make_request(rng: random.Random, tenant: str, route: str, stream: bool, model: str, limit: int) -> Req:
    if tenant == ATTACKER:
        return Req(tenant, route, stream, body_for(route, model, attack_prompt(rng, limit), stream, 256), None)
    marker = f"SECRET-{tenant}-{rng.getrandbits(32):08x}"
    return Req(tenant, route, stream, body_for(route, model, legit_prompt(rng, marker), stream, 1024), marker)


def mixed_workload(n: int, model: str, limit: int, seed: int, attacker_share: float = 0.25) -> list[Req]:
    """`n` requests: every route, streaming and not, for every tenant, shuffled."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tenant = ATTACKER if rng.random() < attacker_share else LEGIT_TENANTS[i % len(LEGIT_TENANTS)]
        out.append(make_request(rng, tenant, ROUTES[rng.randrange(3)], rng.random() < 0.5, model, limit))
    return out


# --------------------------------------------------------------------------
# Answers


def _texts(route: str, event: dict) -> list[str]:
    """The generated text an answer (or one stream event) carries."""
    out = []
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        msg = choice.get("message") or choice.get("delta") or {}
        for key in ("content", "reasoning_content"):
            if isinstance(msg.get(key), str):
                out.append(msg[key])
        if isinstance(choice.get("text"), str):
            out.append(choice["text"])
    if isinstance(event.get("text"), str):
        out.append(event["text"])
    return out


def answer_text(route: str, stream: bool, raw: bytes) -> str:
    """All text of an answer. Stream events are joined in order: deltas split a
    marker across events ("S" + "ECRET-A-..."), and for /generate's cumulative
    events the last one is whole anyway."""
    if not stream:
        try:
            return "".join(_texts(route, json.loads(raw)))
        except ValueError:
            return raw.decode("utf-8", "replace")
    pieces = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        try:
            pieces.extend(_texts(route, json.loads(data)))
        except ValueError:
            pieces.append(data)
    return "".join(pieces)


@dataclass
class Outcome:
    req: Req
    status: int
    raw: bytes
    text: str = ""
    error: str | None = None

    @property
    def leaked(self) -> set[str]:
        """Markers of other tenants in this answer (the whole body is searched)."""
        found = {m.group(0) for m in SECRET.finditer(self.text + self.raw.decode("utf-8", "replace"))}
        return {m for m in found if m != self.req.marker}

    @property
    def refused_for_length(self) -> bool:
        """The guard's refusal: 400 with OpenAI's code on /v1/*, SGLang's message on /generate."""
        if self.status != 400:
            return False
        try:
            err = json.loads(self.raw).get("error") or {}
        except ValueError:
            return False
        if self.req.route == "/generate":
            return str(err.get("message", "")).startswith("Input length (")
        return err.get("code") == "context_length_exceeded"

    @property
    def served_own(self) -> bool:
        return self.status == 200 and self.req.marker is not None and self.req.marker in self.text


async def send(client: httpx.AsyncClient, base: str, req: Req) -> Outcome:
    try:
        r = await client.post(base + req.route, json=req.body)
        raw = r.content
    except httpx.HTTPError as e:
        return Outcome(req, 0, b"", error=f"{type(e).__name__}: {e}")
    return Outcome(req, r.status_code, raw, answer_text(req.route, req.stream, raw) if r.status_code == 200 else "")


async def run_all(base: str, reqs: list[Req], concurrency: int) -> list[Outcome]:
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:

        async def one(req: Req) -> Outcome:
            async with sem:
                return await send(client, base, req)

        return await asyncio.gather(*(one(r) for r in reqs))


@dataclass
class Tally:
    requests: int = 0
    leaks: int = 0
    refused: int = 0
    served: int = 0
    other: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, outcomes: list[Outcome]) -> "Tally":
        t = cls(requests=len(outcomes))
        for o in outcomes:
            if o.leaked:
                t.leaks += 1
                if len(t.examples) < 3:
                    t.examples.append(
                        f"tenant {o.req.tenant} {o.req.route} stream={o.req.stream} got {sorted(o.leaked)[:3]}"
                    )
            if o.refused_for_length:
                t.refused += 1
            elif o.served_own:
                t.served += 1
            elif o.status != 200 or o.req.marker is not None:
                t.other[f"{o.req.tenant} {o.req.route} stream={o.req.stream} -> {o.status} {o.error or o.raw[:160]!r}"] += 1
        return t
