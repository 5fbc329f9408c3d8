"""Expected prompts of the DeepSeek-V3.2 encoder under each SGLang release
that has one (0.5.6 on), for crates/count/src/encoder/dsv32_serving.rs and the
versions of dsv32.rs (checked by dsv32_serving_tests.rs).

Developer machine only; CI never runs Python. Run once per release, each in a
Python 3.11 venv with the transformers that release pins (4.57.1 for 0.5.6 -
0.5.9, 5.3.0 for 0.5.10, 5.6.0 for 0.5.11 - 0.5.12, 5.8.1 for 0.5.13 - 0.5.14,
5.12.1 for 0.5.15 - 0.5.21, 5.19.0 after) plus sglang_env.py's other packages;
$SGLANG_SRC is the unpacked wheel:

    SGLANG_SRC=/work/wheels/src/0.5.9 /work/venvs/ds-tf-4.57.1/bin/python \
        crates/count/src/encoder/testdata/gen_dsv32_releases.py

Each run adds the release to ./dsv32_releases_expected.json:

    {version: {"cases": [{"name", "profile", "body", "glue": {...}, "encoder":
     {...}, "tokens"}]}}

written in the compact form of compact_expected.py (golden bodies by
reference, prompts over 4 KiB by hash, repeated values once in a table),
which compact_expected.rs reads back for the tests.

How: the release's own `OpenAIServingChat`, built on the stand-in fixture
../shared/tokenizers/deepseek-v3.2 with a `DeepseekV32ForCausalLM` config, runs
`ChatCompletionRequest` validation, `_validate_request` and
`_convert_to_internal_request` on every shared chat case (both deepseek-v3.2
profiles: `--tool-call-parser deepseekv32 --reasoning-parser deepseek-v3`, and
no flags) and on PROBES, requests that reach each glue step and each diff hunk
of the encoder. A body goes in as JSON text read as that release's HTTP server
reads it (Python's `json` up to 0.5.17, orjson from 0.5.18). Recorded:
* `glue`: what `_apply_jinja_template` starts from: the messages' and tools'
  `model_dump()`s, `tools_reach_template` (its `tools` argument is non-empty),
  the `thinking` kwarg, `continue_final_message`;
* `encoder`: the arguments `encode_messages` got (messages, thinking mode, keyword
  arguments) and what it returned or raised;
* `tokens`: `len(input_ids)`, or `error` where the release refused the request
  (at validation, in the glue or in the encoder).
"""
import copy
import glob
import json
import os
import sys
from types import SimpleNamespace as NS
from unittest.mock import MagicMock

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT = os.path.join(HERE, "dsv32_releases_expected.json")
FIXTURE = os.path.join(SHARED, "tokenizers", "deepseek-v3.2")

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
from sglang_env import get_tokenizer  # noqa: E402

import compact_expected  # noqa: E402  (beside this file)

import orjson  # noqa: E402
import sglang  # noqa: E402
import sglang.srt.entrypoints.openai.protocol as protocol  # noqa: E402
import sglang.srt.entrypoints.openai.serving_base as serving_base  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
from sglang.srt.entrypoints.openai import encoding_dsv32  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402

try:
    from sglang.version import __version__ as VERSION
except ImportError:
    VERSION = sglang.__version__


def release_tuple(version):
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


ORJSON_BODY = release_tuple(VERSION) >= (0, 5, 18)


class _Defaults(NS):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None


SERVING = _Defaults(default_chat_template_kwargs=None, trust_request_chat_template=False,
                    allow_auto_truncate=False, incremental_streaming_output=False)
MODEL = _Defaults(context_length=None, revision=None)
for module in (serving_chat, serving_base):
    if hasattr(module, "get_serving"):
        module.get_serving = lambda: SERVING
    if hasattr(module, "get_model"):
        module.get_model = lambda: MODEL
# With a tool-call parser and tools, the release builds its grammar after the
# prompt; the stubbed xgrammar's structural tag (a MagicMock, or sglang_env's
# stand-in model that json.dumps cannot write) then raises. A real server has
# xgrammar, and the prompt is what is recorded: "{}" for the stub's objects only.
if hasattr(protocol, "convert_json_schema_to_str"):
    _cjs = protocol.convert_json_schema_to_str

    def _convert_json_schema_to_str(schema):
        if isinstance(schema, MagicMock):
            return "{}"
        try:
            return _cjs(schema)
        except TypeError as e:
            if "SerializationIterator" in str(e):
                return "{}"
            raise

    protocol.convert_json_schema_to_str = _convert_json_schema_to_str
if hasattr(serving_chat, "strip_structural_tag_excludes"):
    serving_chat.strip_structural_tag_excludes = lambda *a, **k: None

TOKENIZER = get_tokenizer(FIXTURE)
TOKENIZER.chat_template = None

# --- recording -------------------------------------------------------------------

RECORD = {}
_orig_encode = encoding_dsv32.encode_messages


def _recording_encode(messages, *args, **kwargs):
    mode = kwargs.pop("thinking_mode", None) if "thinking_mode" in kwargs else args[0]
    args = args[1:] if "thinking_mode" not in kwargs and args else args
    rec = {"messages": copy.deepcopy(messages), "thinking_mode": str(getattr(mode, "value", mode)),
           "mode_is_enum": not type(mode) is str, "kwargs": copy.deepcopy(kwargs)}
    RECORD["encoder"] = rec
    try:
        out = _orig_encode(messages, mode, *args, **kwargs)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        raise
    rec["output"] = out
    return out


encoding_dsv32.encode_messages = _recording_encode
if hasattr(serving_chat, "encode_messages"):
    serving_chat.encode_messages = _recording_encode
_orig_apply = serving_chat.OpenAIServingChat._apply_jinja_template


def _recording_apply(self, request, tools, *args, **kwargs):
    RECORD["glue"] = {
        "messages": [m.model_dump() for m in request.messages],
        "tools": [t.model_dump() for t in request.tools] if request.tools else None,
        "tools_reach_template": bool(tools),
        "thinking": (request.chat_template_kwargs or {}).get("thinking"),
        "continue_final_message": bool(request.continue_final_message),
    }
    return _orig_apply(self, request, tools, *args, **kwargs)


serving_chat.OpenAIServingChat._apply_jinja_template = _recording_apply

# --- the server -------------------------------------------------------------------


def serving_for(server_info):
    hf = NS(model_type="deepseek_v32", architectures=["DeepseekV32ForCausalLM"], to_dict=dict)
    flags = {k: server_info.get(k) for k in ("tool_call_parser", "reasoning_parser")}
    server_args = _Defaults(context_length=None, allow_auto_truncate=False, revision=None,
                            enable_cache_report=False, **flags)
    server_args.get_hf_config = lambda: hf
    manager = NS(tokenizer=TOKENIZER, processor=None, served_model_name="m",
                 model_config=NS(hf_config=hf, is_multimodal=False, context_len=1 << 22,
                                 get_default_sampling_params=dict),
                 server_args=server_args, model_path=FIXTURE, num_reserved_tokens=0,
                 config_value=flags.get, lora_registry=None)
    templates = NS(chat_template_name=None, jinja_template_content_format="string",
                   reasoning_config=None, force_reasoning=False, python_chat_template=None,
                   jinja_template_may_reorder_tool_results=False)
    return serving_chat.OpenAIServingChat(manager, templates)


def read_body(text):
    """The body as the release's HTTP server reads it."""
    return orjson.loads(text) if ORJSON_BODY else json.loads(text)


def run(serving, text):
    RECORD.clear()
    out = {}
    try:
        request = ChatCompletionRequest.model_validate(read_body(text))
        err = serving._validate_request(request)
        if err:
            out["error"] = f"validation: {err}"
        else:
            adapted, _ = serving._convert_to_internal_request(request, None)
            out["tokens"] = len(adapted.input_ids)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    for key in ("glue", "encoder"):
        if key in RECORD:
            out[key] = RECORD[key]
    return out


# --- the cases ----------------------------------------------------------------------

def U(c, **kw):
    return {"role": "user", "content": c, **kw}


def S(c, **kw):
    return {"role": "system", "content": c, **kw}


def D(c, **kw):
    return {"role": "developer", "content": c, **kw}


def A(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def T(c, i="c1"):
    return {"role": "tool", "content": c, "tool_call_id": i}


def CALL(name, args, i="c1"):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": args}}


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CALC = {"type": "function", "function": {"name": "calc", "strict": True, "parameters": {
    "type": "object", "properties": {"expr": {"type": "string"}, "n": {"type": "integer", "default": 5}}}}}
THINK = {"chat_template_kwargs": {"thinking": True}}

PROBES = [
    ("plain", {"messages": [U("Hello!")]}),
    ("plain_thinking", {"messages": [U("Hello!")], **THINK}),
    ("thinking_false", {"messages": [U("Hello!")], "chat_template_kwargs": {"thinking": False}}),
    ("thinking_str", {"messages": [U("Hello!")], "chat_template_kwargs": {"thinking": "no"}}),
    ("system", {"messages": [S("Be brief."), U("Hello!")]}),
    ("system_none", {"messages": [S(None), U("Hello!")]}),
    ("user_parts", {"messages": [U([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])]}),
    ("system_parts", {"messages": [S([{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}]), U("q")]}),
    ("user_parts_image", {"messages": [U([{"type": "text", "text": "look"},
                                          {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}])]}),
    ("assistant_parts", {"messages": [U("q"), A([{"type": "text", "text": "a1"}]), U("q2")]}),
    ("assistant_none_history", {"messages": [U("q"), A(None, reasoning_content="r"), U("q2")], **THINK}),
    ("trailing_assistant", {"messages": [U("q"), A("partial")]}),
    ("trailing_assistant_thinking", {"messages": [U("q"), A("partial")], **THINK}),
    ("trailing_assistant_reasoning", {"messages": [U("q"), A("partial", reasoning_content="r")], **THINK}),
    ("trailing_assistant_continue", {"messages": [U("q"), A("partial")], "continue_final_message": True}),
    ("trailing_assistant_continue_thinking", {"messages": [U("q"), A("partial", reasoning_content="r")],
                                              "continue_final_message": True, **THINK}),
    ("trailing_assistant_parts", {"messages": [U("q"), A([{"type": "text", "text": "p"}])]}),
    ("only_assistant_continue", {"messages": [A("x")], "continue_final_message": True}),
    ("history_reasoning", {"messages": [S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")], **THINK}),
    ("history_reasoning_chat", {"messages": [S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")]}),
    ("developer", {"messages": [D("dev rules"), U("q")]}),
    ("developer_last", {"messages": [S("s"), D("dev only")], **THINK}),
    ("message_tools", {"messages": [S("s", tools=[CALC]), U("q")]}),
    ("tools", {"messages": [U("Weather in Paris?")], "tools": [WEATHER, CALC]}),
    ("tools_choice_none", {"messages": [U("x")], "tools": [WEATHER], "tool_choice": "none"}),
    ("tools_choice_named", {"messages": [U("x")], "tools": [WEATHER, CALC],
                            "tool_choice": {"type": "function", "function": {"name": "calc"}}}),
    ("tools_with_system", {"messages": [S("Use tools."), U("2+2?")], "tools": [CALC]}),
    ("tool_round_trip", {"messages": [U("Weather?"), A(None, tool_calls=[CALL("get_weather", "{\"city\": \"Paris\"}")]),
                                      T("18C")], "tools": [WEATHER]}),
    ("tool_round_trip_thinking", {"messages": [U("Weather?"), A("", reasoning_content="need tool", tool_calls=[
        CALL("get_weather", "{\"city\": \"Paris\"}", "a"), CALL("calc", "{\"expr\": \"1+1\", \"n\": 2}", "b")]),
        T("18C", "a"), T("2", "b")], "tools": [WEATHER, CALC], **THINK}),
    ("tool_args_object", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", {"expr": "1", "l": [1.0, True, None]})]),
                                       T("1"), U("thanks")], "tools": [CALC]}),
    ("tool_args_list", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "[1, 2]")]), T("1"), U("t")]}),
    ("tool_args_invalid", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"a\": ")]), T("1"), U("t")]}),
    ("tool_args_empty", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "")]), T("1"), U("t")]}),
    ("tool_args_null", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", None)]), T("1"), U("t")]}),
    ("tool_args_floats", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"a\": 1.0, \"b\": 1e5, \"c\": -0.0, \"d\": 1E-7}")]),
                                       T("1"), U("t")]}),
    ("tool_args_dup_keys", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"a\": 1, \"b\": 2, \"a\": 3}")]), T("1"), U("t")]}),
    ("tool_args_unicode", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"s\": \"\\u6771\\u4eac \\ud83d\\ude00\"}")]),
                                        T("1"), U("t")]}),
    ("tool_without_call", {"messages": [U("q"), T("orphan")]}),
    ("tool_parts", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{}")]),
                                 T([{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}])], "tools": [CALC]}),
    ("thinking_tool_call_no_reasoning", {"messages": [U("q"), A("calling", tool_calls=[CALL("calc", "{}")]), T("r")], **THINK}),
    ("thinking_assistant_no_reasoning", {"messages": [U("q"), A("a"), U("q2"), A("b")], "continue_final_message": True,
                                         **THINK}),
    ("name_field", {"messages": [U("q", name="bob"), A("a", name="bot"), U("q2")]}),
    ("unicode", {"messages": [U("日本語で 🇯🇵")], "tools": [{"type": "function", "function": {
        "name": "検索", "description": "ウェブ 🔍", "parameters": {"type": "object", "properties": {"語": {"type": "string"}}}}}]}),
    ("response_format", {"messages": [U("q")], "response_format": {"type": "json_object"}}),
    ("latest_reminder", {"messages": [U("q"), {"role": "latest_reminder", "content": "remember"}]}),
    ("function_role", {"messages": [U("q"), {"role": "function", "content": "f", "name": "f"}]}),
    ("tool_choice_required", {"messages": [U("x")], "tools": [WEATHER], "tool_choice": "required"}),
    ("empty_messages", {"messages": []}),
]

# Bodies written as JSON text, for the numbers each release reads its own way.
NUMBER_PROBES = [
    ("numbers_schema_big_int", '{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
     '{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer","maximum":18446744073709551616,'
     '"minimum":-9223372036854775809,"default":9223372036854775808}}}}}]}'),
    ("numbers_schema_floats", '{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
     '{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","maximum":1e+300,"minimum":-0.0,'
     '"default":1.5e-300,"multipleOf":0.1000000000000000055511151231257827}}}}}]}'),
    ("numbers_schema_neg_zero_int", '{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",'
     '"function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":-0}}}}}]}'),
    ("numbers_args_object", '{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,'
     '"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":18446744073709551616,"b":1e+300,'
     '"c":9223372036854775809}}}]},{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","content":"y"}]}'),
    ("numbers_args_string", '{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,'
     '"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\\"a\\": 18446744073709551616, '
     '\\"b\\": 1e+300, \\"c\\": 9223372036854775809, \\"d\\": 0.1000000000000000055511151231257827}"}}]},'
     '{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","content":"y"}]}'),
]


def main():
    profiles = json.load(open(os.path.join(SHARED, "goldens", "profiles", "PROFILES.json")))["profiles"]
    goldens = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    goldens = [g for g in goldens if g["endpoint"] == "chat"]
    cases = []
    for profile in ("deepseek-v3.2", "deepseek-v3.2+arch-only"):
        serving = serving_for(profiles[profile]["server_info"])
        bodies = [("golden/" + g["case"], json.dumps(g["request"])) for g in goldens]
        if profile == "deepseek-v3.2":
            bodies += [("probe/" + n, json.dumps({"model": "m", **b})) for n, b in PROBES]
            bodies += [("probe/" + n, t) for n, t in NUMBER_PROBES]
        for name, text in bodies:
            cases.append({"name": name, "profile": profile, "body": text, **run(serving, text)})
    everything = compact_expected.read(OUT)
    everything[VERSION] = {"orjson_body": ORJSON_BODY, "cases": cases}
    compact_expected.write(OUT, everything)
    enc = sum(1 for c in cases if "encoder" in c)
    print(f"{VERSION}: {len(cases)} cases, {enc} reach the encoder, "
          f"{sum(1 for c in cases if 'tokens' in c)} counted -> {OUT}")
    if VERSION == "0.5.23":
        check_goldens(cases)


def check_goldens(cases):
    ok = total = 0
    for profile in ("deepseek-v3.2", "deepseek-v3.2+arch-only"):
        want = {}
        for line in open(os.path.join(SHARED, "goldens", "profiles", profile + ".jsonl")):
            g = json.loads(line)
            want[g["case"]] = g.get("tokens_sglang")
        for c in cases:
            if c["profile"] == profile and c["name"].startswith("golden/"):
                total += 1
                ok += want.get(c["name"][7:]) == c.get("tokens")
    print(f"shared goldens (deepseek-v3.2 profiles): {ok}/{total} reproduced")


if __name__ == "__main__":
    main()
