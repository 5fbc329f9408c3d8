"""Generates random_expected.json: seeded random conversations (hostile
whitespace, Unicode, tool calls with odd arguments, kwargs of odd types)
rendered with every fixture template by transformers' own Jinja2
environment (reference.py); the expected output is stored as its SHA-256.

    python gen_random.py /path/to/shared/tokenizers > random_expected.json
"""
import hashlib
import json
import os
import random
import sys

import reference
from gen_fixtures import TOOL, HOSTILE_TOOL, load_template, special_tokens

rng = random.Random(424242)

PIECES = [
    "hello", "world", "The", "quick", "brown", "fox", "\u4e2d\u6587", "\u0645\u0631\u062d\u0628\u0627",
    "\U0001F600", "caf\u00e9", "na\u00efve", "\u00df", "\u03a3\u03bf\u03c6\u03af\u03b1", "<|im_end|>",
    "<think>", "</think>", "[INST]", "{\"a\": 1}", "'quoted'", "\"dq\"", "back\\slash", "a/b",
    "1e-05", "3.0", "\u200b", "x" * 40,
]
SPACES = [" ", " ", " ", "\n", "\n\n", "\t", "\r\n", "\x1c", "\x1f", "\u00a0", "\u3000", "\u2028", "  ", "\x0b"]


def text(max_words=12):
    out = []
    if rng.random() < 0.3:
        out.append(rng.choice(SPACES))
    for _ in range(rng.randint(0, max_words)):
        out.append(rng.choice(PIECES))
        out.append(rng.choice(SPACES))
    if rng.random() < 0.5 and out:
        out.pop()
    return "".join(out)


def scalar():
    return rng.choice([
        rng.randint(-5, 5), 2 ** 64 - 1, -(2 ** 63), rng.random(), 1e-07, 1e16, 3.0, -0.0,
        True, False, None, text(3), "", [1, "a"], {"items": [1], "get": None},
    ])


def arguments():
    return {rng.choice(["city", "items", "keys", "values", "q", "n", "nested", "\u00e9"]): scalar()
            for _ in range(rng.randint(0, 4))}


def conversation():
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text()})
    turns = rng.randint(1, 4)
    call_id = 0
    for t in range(turns):
        msgs.append({"role": "user", "content": text()})
        if t == turns - 1:
            break
        if rng.random() < 0.35:
            call_id += 1
            cid = f"call{call_id:05d}"
            msgs.append({"role": "assistant", "content": rng.choice(["", text(4)]), "tool_calls": [
                {"id": cid, "type": "function", "index": None,
                 "function": {"name": "get_weather", "arguments": arguments()}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": text(5)})
            msgs.append({"role": "assistant", "content": text()})
        else:
            msgs.append({"role": "assistant", "content": text()})
    case = {"messages": msgs}
    r = rng.random()
    if r < 0.3:
        case["tools"] = [TOOL]
    elif r < 0.4:
        case["tools"] = [HOSTILE_TOOL, TOOL]
    if rng.random() < 0.4:
        case["extra"] = {rng.choice(["enable_thinking", "thinking"]): rng.choice([True, False, 0, 1, None, "no"])}
    return case


def main(root):
    convs = [conversation() for _ in range(30)]
    out = {"conversations": convs, "fixtures": {}}
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            specials = special_tokens(json.load(f))
        tpl = load_template(d)
        results = []
        for c in convs:
            kind, txt = reference.render(tpl, messages=c["messages"], tools=c.get("tools"),
                                         add_generation_prompt=True, special_tokens=specials,
                                         extra=c.get("extra"))
            results.append(hashlib.sha256(txt.encode("utf-8", "surrogatepass")).hexdigest()
                           if kind == "ok" else None)
        out["fixtures"][name] = results
    json.dump(out, sys.stdout, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
