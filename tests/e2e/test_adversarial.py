"""Over-limit prompts in disguise, through the guard and the real router.

Each variant carries an over-limit prompt spelled so that some parser might
read it differently: duplicate keys, escapes, batches, content parts, token
ids, framing, encodings, paths. Right before each one, tenant A's secrets are
put into the freshly freed KV pages, so any variant that reaches the
vulnerable workers as an over-limit prompt reads them back. The same variant
sent straight to the router shows which disguises would leak; through the
guard none may.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import socket
import zlib
from dataclasses import dataclass

import pytest

from conftest import LIMIT, MODEL, SUMMARY
from workload import SECRET, attack_prompt, make_request, run_all

BIG = attack_prompt(random.Random(21), LIMIT)
HALF = " ".join(BIG.split()[: len(BIG.split()) // 2 + 50])
JSON = {"content-type": "application/json"}


def dumps(v) -> bytes:
    return json.dumps(v).encode()


def escaped(s: str) -> str:
    """`s` as a JSON string literal with every letter o written as \\u006f."""
    return json.dumps(s).replace("o", "\\u006f")


def chat(messages, **extra) -> bytes:
    return dumps({"model": MODEL, "messages": messages, "max_tokens": 256, **extra})


def completion(prompt, **extra) -> bytes:
    return dumps({"model": MODEL, "prompt": prompt, "max_tokens": 256, **extra})


class Chunked(bytes):
    """A body sent without Content-Length (Transfer-Encoding: chunked)."""

    def parts(self):
        for i in range(0, len(self), 4096):
            yield bytes(self[i : i + 4096])


# (name, path, headers, body)
VARIANTS = [
    ("plain completion", "/v1/completions", JSON, completion(BIG)),
    ("plain completion, stream", "/v1/completions", JSON, completion(BIG, stream=True)),
    ("duplicate prompt, big last", "/v1/completions", JSON,
     b'{"model":"%s","max_tokens":256,"prompt":"hi","prompt":%s}' % (MODEL.encode(), dumps(BIG))),
    ("duplicate prompt, big first", "/v1/completions", JSON,
     b'{"model":"%s","max_tokens":256,"prompt":%s,"prompt":"hi"}' % (MODEL.encode(), dumps(BIG))),
    ("duplicate messages", "/v1/chat/completions", JSON,
     b'{"model":"%s","max_tokens":256,"messages":[{"role":"user","content":"hi"}],"messages":%s}'
     % (MODEL.encode(), dumps([{"role": "user", "content": BIG}]))),
    ("unicode escapes", "/v1/completions", JSON,
     b'{"model":"%s","max_tokens":256,"prompt":%s}' % (MODEL.encode(), escaped(BIG).encode())),
    ("completion batch", "/v1/completions", JSON, completion(["hi", BIG])),
    ("chat content parts", "/v1/chat/completions", JSON,
     chat([{"role": "user", "content": [{"type": "text", "text": BIG}]}])),
    ("chat system message", "/v1/chat/completions", JSON,
     chat([{"role": "system", "content": BIG}, {"role": "user", "content": "hi"}])),
    ("chat halves in two turns", "/v1/chat/completions", JSON,
     chat([{"role": "user", "content": HALF}, {"role": "assistant", "content": "ok"},
           {"role": "user", "content": HALF}])),
    ("chat assistant prefill", "/v1/chat/completions", JSON,
     chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": BIG}],
          continue_final_message=True, add_generation_prompt=False)),
    ("chat tools", "/v1/chat/completions", JSON,
     chat([{"role": "user", "content": "hi"}],
          tools=[{"type": "function", "function": {"name": "f", "description": BIG,
                                                   "parameters": {"type": "object", "properties": {}}}}])),
    ("chat, stream", "/v1/chat/completions", JSON, chat([{"role": "user", "content": BIG}], stream=True)),
    ("chat top-level input_ids", "/v1/chat/completions", JSON,
     chat([{"role": "user", "content": "hi"}], input_ids=list(range(100, 100 + LIMIT + 100)))),
    ("generate input_ids", "/generate", JSON,
     dumps({"input_ids": list(range(100, 100 + LIMIT + 100)), "sampling_params": {"max_new_tokens": 256}})),
    ("generate text and input_ids", "/generate", JSON,
     dumps({"text": "hi", "input_ids": list(range(100, 100 + LIMIT + 100)),
            "sampling_params": {"max_new_tokens": 256}})),
    ("generate batch input_ids", "/generate", JSON,
     dumps({"input_ids": [[100, 101], list(range(100, 100 + LIMIT + 100))],
            "sampling_params": {"max_new_tokens": 256}})),
    ("generate, stream", "/generate", JSON,
     dumps({"text": BIG, "sampling_params": {"max_new_tokens": 256}, "stream": True})),
    ("chunked body", "/v1/completions", JSON, Chunked(completion(BIG))),
    ("text/plain content type", "/v1/completions", {"content-type": "text/plain"}, completion(BIG)),
    ("charset parameter", "/v1/completions", {"content-type": "application/json; charset=utf-8"}, completion(BIG)),
    ("gzip content encoding", "/v1/completions", {**JSON, "content-encoding": "gzip"}, gzip.compress(completion(BIG))),
    ("byte order mark", "/v1/completions", JSON, b"\xef\xbb\xbf" + completion(BIG)),
    ("trailing garbage", "/v1/completions", JSON, completion(BIG) + b" x"),
    ("trailing slash", "/v1/completions/", JSON, completion(BIG)),
    ("double slash", "//v1/completions", JSON, completion(BIG)),
    ("dot segment", "/v1/./completions", JSON, completion(BIG)),
    ("percent-encoded path", "/v1/%63ompletions", JSON, completion(BIG)),
    ("query string", "/v1/completions?stream=false", JSON, completion(BIG)),
    ("upper-case path", "/V1/completions", JSON, completion(BIG)),
    ("fragment", "/v1/completions#x", JSON, completion(BIG)),
    ("absolute-form target", "http://127.0.0.1/v1/completions", JSON, completion(BIG)),
    ("unknown model name", "/v1/completions", JSON,
     dumps({"model": "someone-else", "prompt": BIG, "max_tokens": 256})),
]

# Not over the limit for SGLang: its CompletionRequest has no `input_ids` field
# (pydantic ignores unknown keys), so the prompt is "hi". The router keeps the
# key (serde flatten); the answer must be the short prompt's.
SHORT_FOR_SGLANG = [
    ("completion top-level input_ids", "/v1/completions", JSON,
     completion("hi", input_ids=list(range(100, 100 + LIMIT + 100)))),
]


def _prime(base: str, seed: int) -> None:
    """Tenant A's secrets into the pages the next request will be given."""
    rng = random.Random(seed)
    asyncio.run(run_all(base, [make_request(rng, "A", "/v1/completions", False, MODEL, LIMIT) for _ in range(3)], 1))


@dataclass
class Answer:
    status_code: int
    text: str

    def json(self):
        return json.loads(self.text)


def _send(base: str, path: str, headers: dict, body) -> Answer:
    """POST with exactly these bytes on the wire: an HTTP client library would
    normalise the path (httpx folds `/./`) or the framing."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    head = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    if isinstance(body, Chunked):
        head.append("transfer-encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in body.parts()) + b"0\r\n\r\n"
    else:
        head.append(f"content-length: {len(body)}")
        payload = body
    with socket.create_connection((host, int(port)), timeout=120) as s:
        s.sendall("\r\n".join(head).encode() + b"\r\n\r\n" + payload)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    status_line, _, rest = raw.partition(b"\r\n")
    header_block, _, content = rest.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in header_block.lower():
        content = _dechunk(content)
    return Answer(int(status_line.split()[1]), content.decode("utf-8", "replace"))


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def _foreign(r: Answer) -> set[str]:
    return {m.group(0) for m in SECRET.finditer(r.text)}


@pytest.fixture(scope="module")
def report():
    rows: list[tuple[str, int, bool, int, bool]] = []
    yield rows
    if rows:
        SUMMARY["disguised prompts (each: straight to the router, then through the guard)"] = {
            "variants": len(rows),
            "leak_without_guard": sum(r[2] for r in rows),
            "leak_with_guard": sum(r[4] for r in rows),
            "refused_by_guard": sum(400 <= r[3] < 500 for r in rows),
        }


def _both_ways(vulnerable, report, name, path, headers, body) -> Answer:
    """The variant straight to the router, then through the guard, each right
    after priming; returns the guarded answer."""
    _sim, router, guard = vulnerable
    seed = zlib.crc32(name.encode())

    _prime(router.url, seed)
    direct = _send(router.url, path, headers, body)
    leaked_direct = bool(_foreign(direct))

    _prime(guard.url, seed)
    guarded = _send(guard.url, path, headers, body)
    leaked_guarded = _foreign(guarded)
    report.append((name, direct.status_code, leaked_direct, guarded.status_code, bool(leaked_guarded)))
    print(f"\n{name}: router {direct.status_code} leak={leaked_direct}; guard {guarded.status_code}")
    assert not leaked_guarded, f"{name}: {guarded.status_code} {guarded.text[:300]}"
    return guarded


@pytest.mark.parametrize("name,path,headers,body", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_disguised_over_limit_prompt_is_refused(vulnerable, report, name, path, headers, body):
    guarded = _both_ways(vulnerable, report, name, path, headers, body)
    # Everything here is over the limit however it is spelled: the guard refuses
    # it (4xx) rather than forwarding it for someone else to judge.
    assert 400 <= guarded.status_code < 500, f"{name}: {guarded.status_code} {guarded.text[:300]}"


@pytest.mark.parametrize("name,path,headers,body", SHORT_FOR_SGLANG, ids=[v[0] for v in SHORT_FOR_SGLANG])
def test_what_sglang_ignores_is_not_counted_and_not_used(vulnerable, report, name, path, headers, body):
    guarded = _both_ways(vulnerable, report, name, path, headers, body)
    assert guarded.status_code == 200, guarded.text[:300]
    assert guarded.json()["choices"][0]["text"] == "hi"
