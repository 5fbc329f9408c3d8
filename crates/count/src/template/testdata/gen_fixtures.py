"""Generates fixtures_expected.json: every real chat template in
/work/shared/tokenizers/*/ rendered by transformers' own Jinja2 environment
(reference.py) on a set of conversations. Run on a developer machine:

    python gen_fixtures.py /path/to/shared/tokenizers > fixtures_expected.json
"""
import json
import os
import sys

import reference

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city, in <units> & stuff",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "default": 1, "minimum": 0.5},
            },
            "required": ["city"],
        },
    },
    "defer_loading": None,
}

HOSTILE_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": None,
        "parameters": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "string"}},
                "keys": {"type": "boolean"},
                "values": {"type": "number", "default": 1e-05},
                "get": {"type": "null"},
            },
        },
    },
    "defer_loading": None,
}

CASES = [
    ("two_messages", {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
    }),
    ("two_messages_tool", {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris?"},
        ],
        "tools": [TOOL],
    }),
    ("multiturn", {
        "messages": [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke.\n\nA short one."},
        ],
    }),
    ("tool_roundtrip", {
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "index": None,
                 "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
                {"id": "call_2", "type": "function", "index": None,
                 "function": {"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "18 degrees"},
        ],
        "tools": [TOOL],
    }),
    ("single_tool_call", {
        "messages": [
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a1b2C3d4E", "type": "function", "index": None,
                 "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}},
            ]},
            {"role": "tool", "tool_call_id": "a1b2C3d4E", "name": "get_weather", "content": "-3 and snowing"},
        ],
        "tools": [TOOL],
    }),
    ("hostile", {
        "messages": [
            {"role": "system", "content": "\x1c\x1dSystem with separators\x1e\x1f"},
            {"role": "user", "content": "\u3000 caf\u00e9 \u200b\U0001F600 \"quotes\" 'single' <tag> & \\ back\u00a0\n"},
            {"role": "assistant", "content": "\x1c ok \x1f", "tool_calls": [
                {"id": "c", "type": "function", "index": 0,
                 "function": {"name": "lookup", "arguments": {"items": ["a", "b"], "keys": True, "values": 2.5e-08, "get": None, "big": 18446744073709551615, "f": 1.0, "e": 1e16}}},
            ]},
            {"role": "tool", "content": "done"},
            {"role": "user", "content": "  trailing spaces and tabs\t\t"},
        ],
        "tools": [HOSTILE_TOOL, TOOL],
    }),
    ("reasoning_kwargs", {
        "messages": [
            {"role": "user", "content": "Think about 2+2."},
            {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4", "reasoning_content": "simple"},
            {"role": "user", "content": "And 3+3?"},
        ],
        "extra": {"reasoning_effort": "high", "enable_thinking": False, "thinking": False},
    }),
    ("content_parts", {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
        ],
    }),
    ("kwargs_types", {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "q"},
        ],
        "tools": [TOOL],
        "extra": {"enable_thinking": 0, "thinking": "yes", "reasoning_effort": "low",
                  "tools_in_user_message": False, "date_string": "26 Jul 2024",
                  "builtin_tools": ["code_interpreter", "browser"], "model_identity": "You are X.",
                  "custom_instructions": None},
    }),
    ("string_arguments", {
        "messages": [
            {"role": "user", "content": "call it"},
            {"role": "assistant", "content": "sure", "tool_calls": [
                {"id": "abcdefghi", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Lima\", \"days\": 3}"}},
            ]},
            {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [TOOL],
    }),
    ("bos_override", {
        "messages": [{"role": "user", "content": "x"}],
        "extra": {"bos_token": "", "custom_flag": 0},
    }),
]


def special_tokens(config):
    out = []
    for k, v in config.items():
        if not k.endswith("_token"):
            continue
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out.append([k, v])
    return out


def load_template(d):
    p = os.path.join(d, "chat_template.jinja")
    if os.path.exists(p):
        with open(p, encoding="utf-8", newline="") as f:
            return f.read()
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def main(root):
    out = {"cases": [{"name": n, **c} for n, c in CASES], "fixtures": {}}
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        tpl = load_template(d)
        specials = special_tokens(config)
        results = {}
        for case_name, case in CASES:
            kind, text = reference.render(
                tpl,
                messages=case["messages"],
                tools=case.get("tools"),
                add_generation_prompt=True,
                special_tokens=specials,
                extra=case.get("extra"),
            )
            results[case_name] = {"ok": text} if kind == "ok" else {"error": text}
        out["fixtures"][name] = {"special_tokens": specials, "results": results}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
