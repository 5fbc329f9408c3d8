"""Expected prompts of SGLang's own DeepSeek-V4 encoder (`encoding_dsv4.py`,
0.5.12 - 0.5.22; 0.5.23 uses deepseek-recipe, see gen_dsv4.py) under each
release, for crates/count/src/encoder/dsv4_sglang.rs (checked by dsv4_sglang_tests.rs).

Developer machine only; CI never runs Python. Run once per release, each in a
Python 3.11 venv with the transformers the release pins (5.6.0 for 0.5.12,
5.8.1 for 0.5.13 - 0.5.14, 5.12.1 for 0.5.15 - 0.5.21, 5.19.0 for 0.5.22) plus
sglang_env.py's other packages; $SGLANG_SRC is the unpacked wheel:

    SGLANG_SRC=/work/wheels/src/0.5.14 /work/venvs/ds-tf-5.8.1/bin/python \
        crates/count/src/encoder/testdata/gen_dsv4_releases.py

Each run adds the release to ./dsv4_sglang_expected.json (in the compact
form of compact_expected.py), as gen_dsv32_releases.py does: the release's
own `OpenAIServingChat` on the stand-in fixture
../shared/tokenizers/deepseek-v4 (`DeepseekV4ForCausalLM`,
`--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4`, the
deepseek-v4 profile) runs every shared chat case and PROBES; servers with
`SGLANG_DSV4_REASONING_EFFORT` / `SGLANG_DEFAULT_THINKING` set and (0.5.18+)
the `official` effort profile (`dsv4_reasoning_effort_profile` in the model
config) run the probes again. Recorded per case: `glue` (what
`_apply_jinja_template` starts from, plus `reasoning_effort` and `task`),
`encoder` (the arguments of `encoding_dsv4.encode_messages` and its result or
exception) and `tokens` (`len(input_ids)`) or `error`.
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
OUT = os.path.join(HERE, "dsv4_sglang_expected.json")
FIXTURE = os.path.join(SHARED, "tokenizers", "deepseek-v4")

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
from sglang_env import get_tokenizer  # noqa: E402

import compact_expected  # noqa: E402  (beside this file)

import orjson  # noqa: E402
import sglang  # noqa: E402
import sglang.srt.entrypoints.openai.protocol as protocol  # noqa: E402
import sglang.srt.entrypoints.openai.serving_base as serving_base  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
from sglang.srt.entrypoints.openai import encoding_dsv4  # noqa: E402
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
_orig_encode = encoding_dsv4.encode_messages


def _recording_encode(messages, thinking_mode, **kwargs):
    rec = {"messages": copy.deepcopy(messages), "thinking_mode": str(getattr(thinking_mode, "value", thinking_mode)),
           "kwargs": copy.deepcopy(kwargs)}
    RECORD["encoder"] = rec
    try:
        out = _orig_encode(messages, thinking_mode=thinking_mode, **kwargs)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        raise
    rec["output"] = out
    return out


encoding_dsv4.encode_messages = _recording_encode
_orig_apply = serving_chat.OpenAIServingChat._apply_jinja_template


def _recording_apply(self, request, tools, *args, **kwargs):
    RECORD["glue"] = {
        "messages": [m.model_dump() for m in request.messages],
        "tools": [t.model_dump() for t in request.tools] if request.tools else None,
        "tools_reach_template": bool(tools),
        "thinking": (request.chat_template_kwargs or {}).get("thinking"),
        "continue_final_message": bool(request.continue_final_message),
        "reasoning_effort": request.reasoning_effort,
        "task": getattr(request, "task", None),
    }
    return _orig_apply(self, request, tools, *args, **kwargs)


serving_chat.OpenAIServingChat._apply_jinja_template = _recording_apply

# --- the server -------------------------------------------------------------------


PROFILE_OVERRIDE = {}


def serving_for(server_info, profile=None):
    config = {"dsv4_reasoning_effort_profile": profile} if profile else {}
    hf = NS(model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"], to_dict=lambda: dict(config))
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
ROUND = [U("Weather and sum?"), A("", reasoning_content="two tools", tool_calls=[
    CALL("get_weather", "{\"city\": \"Paris\"}", "a"), CALL("calc", "{\"expr\": \"1+1\", \"n\": 2}", "b")]),
    T("2", "b"), T("18C", "a")]

PROBES = [
    ("plain", {"messages": [U("Hello!")]}),
    ("plain_thinking", {"messages": [U("Hello!")], **THINK}),
    ("thinking_false", {"messages": [U("Hello!")], "chat_template_kwargs": {"thinking": False}}),
    ("system", {"messages": [S("Be brief."), U("Hello!")], **THINK}),
    ("system_none", {"messages": [S(None), U("Hello!")]}),
    ("effort_none", {"messages": [U("q")], "reasoning_effort": "none", **THINK}),
    ("effort_low", {"messages": [U("q")], "reasoning_effort": "low", **THINK}),
    ("effort_medium", {"messages": [U("q")], "reasoning_effort": "medium", **THINK}),
    ("effort_high", {"messages": [U("q")], "reasoning_effort": "high", **THINK}),
    ("effort_max", {"messages": [U("q")], "reasoning_effort": "max", **THINK}),
    ("effort_max_chat", {"messages": [U("q")], "reasoning_effort": "max"}),
    ("effort_max_system", {"messages": [S("s"), U("q")], "reasoning_effort": "max", **THINK}),
    ("ctk_effort_max", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "max"}}),
    ("ctk_effort_int", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 35}}),
    ("ctk_effort_list", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": ["max"]}}),
    ("ctk_effort_xhigh", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "xhigh"}}),
    ("user_parts", {"messages": [U([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])]}),
    ("system_parts", {"messages": [S([{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}]), U("q")]}),
    ("user_parts_image", {"messages": [U([{"type": "text", "text": "look"},
                                          {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}])]}),
    ("trailing_assistant", {"messages": [U("q"), A("partial")]}),
    ("trailing_assistant_thinking", {"messages": [U("q"), A("partial", reasoning_content="r")], **THINK}),
    ("trailing_assistant_continue", {"messages": [U("q"), A("partial")], "continue_final_message": True}),
    ("trailing_assistant_continue_thinking", {"messages": [U("q"), A("partial", reasoning_content="r")],
                                              "continue_final_message": True, **THINK}),
    ("trailing_assistant_parts", {"messages": [U("q"), A([{"type": "text", "text": "p"}])]}),
    ("only_assistant_continue", {"messages": [A("x")], "continue_final_message": True}),
    ("history_reasoning", {"messages": [S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")], **THINK}),
    ("history_reasoning_chat", {"messages": [S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")]}),
    ("history_reasoning_tools", {"messages": [U("q1"), A("a1", reasoning_content="r1"), U("q2")], "tools": [WEATHER],
                                 **THINK}),
    ("history_two_users", {"messages": [U("q1"), U("q1b"), A("a1"), U("q2")], **THINK}),
    ("developer", {"messages": [D("dev rules"), U("q")], **THINK}),
    ("developer_only", {"messages": [D("dev only")], **THINK}),
    ("developer_after_user", {"messages": [U("q"), D("dev"), U("q2")], **THINK}),
    ("developer_empty", {"messages": [D(""), U("q")]}),
    ("message_tools", {"messages": [S("s", tools=[CALC]), U("q")]}),
    ("message_tools_developer", {"messages": [D("d", tools=[CALC]), U("q")]}),
    ("tools", {"messages": [U("Weather in Paris?")], "tools": [WEATHER, CALC]}),
    ("tools_thinking", {"messages": [U("Weather in Paris?")], "tools": [WEATHER], **THINK}),
    ("tools_choice_none", {"messages": [U("x")], "tools": [WEATHER], "tool_choice": "none"}),
    ("tools_choice_named", {"messages": [U("x")], "tools": [WEATHER, CALC],
                            "tool_choice": {"type": "function", "function": {"name": "calc"}}}),
    ("tools_with_system", {"messages": [S("Use tools."), U("2+2?")], "tools": [CALC]}),
    ("tool_round_trip", {"messages": ROUND, "tools": [WEATHER, CALC]}),
    ("tool_round_trip_thinking", {"messages": ROUND, "tools": [WEATHER, CALC], **THINK}),
    ("tool_round_trip_no_tools", {"messages": ROUND, **THINK}),
    ("tool_round_trip_then_user", {"messages": ROUND + [U("thanks"), A("ok", reasoning_content="r2"), U("more")], **THINK}),
    ("tool_results_no_ids", {"messages": [U("q"), A("", tool_calls=[CALL("calc", "{}", None), CALL("calc", "{}", None)]),
                                          T("r1", None), T("r2", None)]}),
    ("tool_args_object", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", {"expr": "1", "l": [1.0, True, None]})]),
                                       T("1"), U("thanks")], "tools": [CALC]}),
    ("tool_args_list", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "[1, 2]")]), T("1"), U("t")]}),
    ("tool_args_invalid", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"a\": ")]), T("1"), U("t")]}),
    ("tool_args_empty", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "")]), T("1"), U("t")]}),
    ("tool_args_null", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", None)]), T("1"), U("t")]}),
    ("tool_args_string_json", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "\"x\"")]), T("1"), U("t")]}),
    ("tool_args_floats", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{\"a\": 1.0, \"b\": 1e5, \"c\": -0.0}")]),
                                       T("1"), U("t")]}),
    ("tool_name_null", {"messages": [U("q"), A(None, tool_calls=[{"id": "c1", "type": "function",
                                                                   "function": {"arguments": "{}"}}]), T("1"), U("t")]}),
    ("tool_without_call", {"messages": [U("q"), T("orphan")]}),
    ("tool_parts", {"messages": [U("q"), A(None, tool_calls=[CALL("calc", "{}")]),
                                 T([{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}])], "tools": [CALC]}),
    ("task_action", {"messages": [U("q")], "task": "action"}),
    ("task_action_thinking", {"messages": [U("q")], "task": "action", **THINK}),
    ("task_query", {"messages": [U("q")], "task": "query", **THINK}),
    ("task_title_history", {"messages": [U("q"), A("a"), U("q2")], "task": "title"}),
    ("task_after_tools", {"messages": ROUND, "task": "domain"}),
    ("task_then_assistant", {"messages": [U("q"), A("a")], "task": "read_url", "continue_final_message": True}),
    ("task_no_user", {"messages": [S("s")], "task": "query"}),
    ("only_system", {"messages": [S("s")]}),
    ("name_field", {"messages": [U("q", name="bob"), A("a", name="bot"), U("q2")]}),
    ("unicode", {"messages": [U("日本語で 🇯🇵")], "tools": [{"type": "function", "function": {
        "name": "検索", "description": "ウェブ 🔍", "parameters": {"type": "object", "properties": {"語": {"type": "string"}}}}}]}),
    ("response_format", {"messages": [U("q")], "response_format": {"type": "json_object"}}),
    ("latest_reminder", {"messages": [U("q"), {"role": "latest_reminder", "content": "remember"}], **THINK}),
    ("latest_reminder_after_assistant", {"messages": [U("q"), A("a"), {"role": "latest_reminder", "content": None}, U("q2")]}),
    ("function_role", {"messages": [U("q"), {"role": "function", "content": "f", "name": "f"}]}),
    ("tool_choice_required", {"messages": [U("x")], "tools": [WEATHER], "tool_choice": "required"}),
    ("special_text", {"messages": [U("<｜User｜>hi<｜Assistant｜></think>｜DSML｜")]}),
]
SERVER_PROBES = {"plain", "plain_thinking", "thinking_false", "effort_none", "effort_low", "effort_high", "effort_max",
                 "effort_max_chat", "ctk_effort_int", "ctk_effort_xhigh", "history_reasoning", "tools_thinking"}

NUMBER_PROBES = [
    ("numbers_schema_big_int", '{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
     '{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer","maximum":18446744073709551616,'
     '"minimum":-9223372036854775809,"default":9223372036854775808}}}}}]}'),
    ("numbers_schema_floats", '{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
     '{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","maximum":1e+300,"minimum":-0.0,'
     '"default":1.5e-300,"multipleOf":0.1000000000000000055511151231257827}}}}}]}'),
    ("numbers_args_object", '{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,'
     '"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":18446744073709551616,"b":1e+300,'
     '"c":9223372036854775809}}}]},{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","content":"y"}]}'),
    ("numbers_args_string", '{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,'
     '"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\\"a\\": 18446744073709551616, '
     '\\"b\\": 1e+300, \\"c\\": 9223372036854775809, \\"d\\": 0.1000000000000000055511151231257827}"}}]},'
     '{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","content":"y"}]}'),
]

# (name suffix, environment, effort profile override)
SERVERS = [
    ("", {}, None),
    ("+env_max", {"SGLANG_DSV4_REASONING_EFFORT": "max"}, None),
    ("+env_low", {"SGLANG_DSV4_REASONING_EFFORT": "low"}, None),
    ("+default_thinking", {"SGLANG_DEFAULT_THINKING": "1"}, None),
    ("+official", {}, "official"),
    ("+official_env_high", {"SGLANG_DSV4_REASONING_EFFORT": "high"}, "official"),
]


def main():
    profiles = json.load(open(os.path.join(SHARED, "goldens", "profiles", "PROFILES.json")))["profiles"]
    goldens = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    goldens = [g for g in goldens if g["endpoint"] == "chat"]
    server_info = profiles["deepseek-v4"]["server_info"]
    cases = []
    for suffix, env, profile in SERVERS:
        if profile and release_tuple(VERSION) < (0, 5, 18):
            continue
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            serving = serving_for(server_info, profile)
            if suffix:
                bodies = [("probe/" + n, json.dumps({"model": "m", **b})) for n, b in PROBES if n in SERVER_PROBES]
            else:
                bodies = [("golden/" + g["case"], json.dumps(g["request"])) for g in goldens]
                bodies += [("probe/" + n, json.dumps({"model": "m", **b})) for n, b in PROBES]
                bodies += [("probe/" + n, t) for n, t in NUMBER_PROBES]
            for name, text in bodies:
                cases.append({"name": name + suffix, "server": {"env": env, "profile": profile},
                              "body": text, **run(serving, text)})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    everything = compact_expected.read(OUT)
    everything[VERSION] = {"orjson_body": ORJSON_BODY, "cases": cases}
    compact_expected.write(OUT, everything)
    enc = sum(1 for c in cases if "encoder" in c)
    print(f"{VERSION}: {len(cases)} cases, {enc} reach the encoder, "
          f"{sum(1 for c in cases if 'tokens' in c)} counted -> {OUT}")


if __name__ == "__main__":
    main()
