"""Expected prompt ids for the DeepSeek-V4 / V4.1 encoder (../dsv4.rs), produced by
running SGLang 0.5.23's own chat handler with the deepseek-recipe 0.2.0 wheel.

Developer machine only; CI never runs Python. Writes ./dsv4_expected.json: for
each case, what SGLang's `DeepSeekRecipeChatEncodingAdapter.encode_messages`
received (the wire dump `request.model_dump(exclude_unset=True, by_alias=True,
mode="json")`, the `tools` dicts, the thinking decision, `request.reasoning_effort`,
the server's effort defaults) and what it returned (the prompt ids) or raised.

How: `OpenAIServingChat` is built with its own constructor on the stand-in
fixture ../shared/tokenizers/deepseek-v4 (`config.json` DeepseekV4ForCausalLM),
with `--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4` (dsv4) or
`deepseekv41` / `deepseek-v41` (dsv41), the `SGLANG_DSV4(1)_REASONING_EFFORT`
environment and `--default-chat-template-kwargs` of the case. Each request
goes through `ChatCompletionRequest` validation, `_validate_request` and
`_convert_to_internal_request`; the adapter's `encode_messages` is wrapped to
record its inputs and result. Requests refused before the adapter are left
out (the guard's request validation owns them). The shared goldens
(../shared/goldens/profiles/deepseek-v4.jsonl) are recomputed the same way and
compared; the count is printed.

    SGLANG_SRC=/work/ref/sg /work/ref/venv/bin/python crates/count/src/encoder/testdata/gen_dsv4.py
"""
import copy
import json
import os
import sys
from types import SimpleNamespace as NS

import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
FIXTURE = os.path.join(SHARED, "tokenizers", "deepseek-v4")

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
import sglang_env  # noqa: E402,F401

import sglang.srt.entrypoints.openai.serving_base as sb  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as sc  # noqa: E402
import sglang.srt.entrypoints.openai.serving_deepseek_recipe as sdr  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402


class _Bag(NS):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None


SERVING = _Bag(default_chat_template_kwargs=None, trust_request_chat_template=False,
               allow_auto_truncate=False, incremental_streaming_output=False)
MODEL = _Bag(context_length=None, revision=None)
for _m in (sc, sb, sdr):
    if hasattr(_m, "get_serving"):
        _m.get_serving = lambda: SERVING
    if hasattr(_m, "get_model"):
        _m.get_model = lambda: MODEL

# The grammar side of tool_choice required / named walks xgrammar's structural
# tag, which the shim stubs with MagicMock (an endless tree); it never touches
# the prompt.
sc.strip_structural_tag_excludes = lambda *a, **k: None

TOKENIZER = sglang_env.get_tokenizer(FIXTURE)
ENV_VARS = {"dsv4": "SGLANG_DSV4_REASONING_EFFORT", "dsv41": "SGLANG_DSV41_REASONING_EFFORT"}
PARSERS = {"dsv4": ("deepseekv4", "deepseek-v4"), "dsv41": ("deepseekv41", "deepseek-v41")}

RECORD = []
_orig_encode = sdr.DeepSeekRecipeChatEncodingAdapter.encode_messages


def _recording_encode(self, *, messages, request, tools, thinking, image_data):
    rec = {
        "wire": request.model_dump(exclude_unset=True, by_alias=True, mode="json"),
        "tools": copy.deepcopy(tools),
        "thinking": thinking,
        "reasoning_effort": request.reasoning_effort,
    }
    RECORD.append(rec)
    try:
        ids = _orig_encode(self, messages=messages, request=request, tools=tools,
                           thinking=thinking, image_data=image_data)
    except Exception as e:  # what SGLang turns into an error answer
        rec["error"] = f"{type(e).__name__}: {e}"
        raise
    rec["ids"] = list(ids)
    rec["images"] = len(image_data)
    return ids


sdr.DeepSeekRecipeChatEncodingAdapter.encode_messages = _recording_encode
_SERVINGS = {}


def serving(spec, env_effort=None, dctk=None):
    key = (spec, env_effort, json.dumps(dctk, sort_keys=True))
    if key in _SERVINGS:
        return _SERVINGS[key]
    tool_parser, reasoning_parser = PARSERS[spec]
    cfg = {"tool_call_parser": tool_parser, "reasoning_parser": reasoning_parser}
    hf = NS(model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"])
    tm = NS(tokenizer=TOKENIZER, processor=None, served_model_name="m",
            model_config=NS(hf_config=hf, is_multimodal=False, context_len=1 << 22,
                            get_default_sampling_params=lambda: {}),
            server_args=None, model_path=FIXTURE, num_reserved_tokens=0,
            config_value=lambda k: cfg.get(k), lora_registry=None)
    tmpl = NS(chat_template_name=None, jinja_template_content_format="string", reasoning_config=None,
              python_chat_template=None, jinja_template_may_reorder_tool_results=False)
    var = ENV_VARS[spec]
    old = os.environ.pop(var, None)
    if env_effort is not None:
        os.environ[var] = env_effort
    SERVING.default_chat_template_kwargs = dctk
    try:
        s = sc.OpenAIServingChat(tm, tmpl)
    except Exception as e:
        s = f"{type(e).__name__}: {e}"
    finally:
        os.environ.pop(var, None)
        if old is not None:
            os.environ[var] = old
        SERVING.default_chat_template_kwargs = None
    _SERVINGS[key] = s
    return s


def http_body(body):
    """`body` as SGLang's `ORJSONRequest.json()` reads it: a JSON text (a dict is
    first written as a client would, `json.dumps`) parsed by orjson."""
    return orjson.loads(body if isinstance(body, str) else json.dumps(body))


def run(spec, body, env_effort=None, dctk=None):
    """SGLang's answer to `body`: {"load_error"} when the server does not start,
    {"pre_error"} when it refuses before the adapter, else the adapter record."""
    s = serving(spec, env_effort, dctk)
    if isinstance(s, str):
        return {"load_error": s}
    RECORD.clear()
    try:
        req = ChatCompletionRequest.model_validate(http_body(body))
    except Exception as e:
        return {"pre_error": f"{type(e).__name__}: {str(e)[:300]}"}
    err = s._validate_request(req)
    if err:
        return {"pre_error": err}
    try:
        adapted, _ = s._convert_to_internal_request(req, None)
    except Exception as e:
        if RECORD:
            return dict(RECORD[-1])
        return {"pre_error": f"{type(e).__name__}: {e}"}
    if not RECORD:  # input_ids: SGLang encodes nothing
        return {"pre_ids": list(adapted.input_ids)}
    rec = dict(RECORD[-1])
    assert list(adapted.input_ids) == rec["ids"], "the handler changed the adapter's ids"
    return rec


# --- the cases -------------------------------------------------------------------

def U(c):
    return {"role": "user", "content": c}


def S(c):
    return {"role": "system", "content": c}


def A(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def T(c, i):
    return {"role": "tool", "content": c, "tool_call_id": i}


def CALL(i, name, args, **kw):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": args}, **kw}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "k": {"type": "integer", "default": 5, "minimum": 1},
        "score": {"type": "number", "default": 0.5, "maximum": 1e-5}}}}}
NOPARAMS = {"type": "function", "function": {"name": "ping", "description": "Ping"}}
STRICT = {"type": "function", "function": {
    "name": "put", "strict": True, "description": "Store",
    "parameters": {"type": "object", "title": "dropped", "properties": {
        "key": {"type": "string", "description": "k", "minLength": 1},
        "n": {"type": ["integer", "null"]},
        "sub": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}}}}}}
UNICODE_TOOL = {"type": "function", "function": {
    "name": "traduire", "description": "Traduit «texte» — 翻译 ✓",
    "parameters": {"type": "object", "properties": {"texte": {"type": "string", "description": "é\u00e8 \"q\" \\ \n"}}}}}

LONG = ("The quick brown fox jumps over the lazy dog. " * 400
        + "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 300)
SPECIALS = ("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>x</think>"
            "<｜end▁of▁sentence｜><｜System｜><｜latest_reminder｜>｜DSML｜<｜deepseek_image｜>"
            "<｜ref｜>a<｜/ref｜><｜box｜><｜/box｜><｜action｜><｜query｜><｜domain｜>")
GROUNDING = "See <｜ref｜>the cat<｜/ref｜><｜box｜>(1,2),(3,4)<｜/box｜> and <｜point｜>p<｜/point｜><｜polygon｜>q<｜/polygon｜> <｜User｜>"

ROUND = [U("Weather in Paris?"),
         A(None, tool_calls=[CALL("call_1", "get_weather", "{\"city\": \"Paris\"}")]),
         T("{\"temp\": 21}", "call_1"), U("And London?")]
ROUND_R = [U("Weather in Paris?"),
           A("", reasoning_content="I should call the tool.",
             tool_calls=[CALL("call_1", "get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}")]),
           T("21C", "call_1")]
MULTI_CALL = [U("Both cities"),
              A("Checking both.", reasoning_content="two calls",
                tool_calls=[CALL("b", "get_weather", {"city": "Rome", "n": [1, 2.5, None, True], "é": "ü"}),
                            CALL("a", "search", "not json"),
                            CALL("c", "search", "[1, 2]")]),
              T("r-a", "a"), T([{"type": "text", "text": "r-"}, {"type": "text", "text": "c"}], "c"),
              T("r-b", "b"), U("Thanks")]
HISTORY = [S("You are terse."), U("Q1"), A("A1", reasoning_content="R1"), U("Q2"),
           A("A2", reasoning_content="R2 with <｜ref｜>ground<｜/ref｜>"), U("Q3")]

BASE = [
    ("simple", {"messages": [U("Hello")]}),
    ("system_user", {"messages": [S("You are a helpful assistant."), U("Hi there")]}),
    ("developer", {"messages": [{"role": "developer", "content": "Dev rules."}, U("Q")]}),
    ("systems_midway", {"messages": [S("S1"), U("Q1"), A("A1"), S("S2"), S(""), U("Q2")]}),
    ("consecutive_users", {"messages": [U("a"), U(""), U("b"), U("c")]}),
    ("empty_user", {"messages": [U("")]}),
    ("empty_system", {"messages": [S(""), U("x")]}),
    ("multiturn", {"messages": HISTORY}),
    ("null_content_assistant", {"messages": [U("a"), {"role": "assistant", "content": None}, U("b")]}),
    ("assistant_last", {"messages": [U("Write a haiku."), A("Autumn moonlight—")]}),
    ("assistant_last_tool_calls", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")])]}),
    ("assistant_last_parts", {"messages": [U("x"), A([{"type": "text", "text": "part"}])]}),
    ("continue_final", {"messages": [U("Count to 5"), A("1, 2,")], "continue_final_message": True}),
    ("continue_final_reasoning", {"messages": [U("Count"), A("", reasoning_content="thinking so far")],
                                  "continue_final_message": True}),
    ("continue_final_reasoning_content", {"messages": [U("Count"), A("1,", reasoning_content="r")],
                                          "continue_final_message": True}),
    ("continue_final_empty", {"messages": [U("Count"), A("")], "continue_final_message": True}),
    ("continue_final_user_last", {"messages": [U("Count")], "continue_final_message": True}),
    ("continue_final_with_tools", {"messages": [U("Count"), A("1")], "continue_final_message": True,
                                   "tools": [WEATHER]}),
    ("prefix_field", {"messages": [U("Count"), A("1", prefix=True)]}),
    ("prefix_field_continue", {"messages": [U("Count"), A("1", prefix=True)], "continue_final_message": True}),
    ("prefix_not_last", {"messages": [U("a"), A("1", prefix=True), U("b")]}),
    ("reasoning_history", {"messages": [U("a"), A("b", reasoning_content="r"), U("c")]}),
    ("reasoning_history_tools", {"messages": [U("a"), A("b", reasoning_content="r"), U("c")], "tools": [WEATHER]}),
    ("reasoning_history_tool_none", {"messages": [U("a"), A("b", reasoning_content="r"), U("c")],
                                     "tools": [WEATHER], "tool_choice": "none"}),
    ("tools_auto", {"messages": [U("Weather?")], "tools": [WEATHER]}),
    ("tools_two", {"messages": [S("Sys"), U("Weather?")], "tools": [WEATHER, SEARCH]}),
    ("tools_required", {"messages": [U("Weather?")], "tools": [WEATHER], "tool_choice": "required"}),
    ("tools_none", {"messages": [U("Weather?")], "tools": [WEATHER], "tool_choice": "none"}),
    ("tools_named", {"messages": [U("Weather?")], "tools": [WEATHER, SEARCH],
                     "tool_choice": {"type": "function", "function": {"name": "search"}}}),
    ("tools_named_no_type", {"messages": [U("Weather?")], "tools": [WEATHER, SEARCH],
                             "tool_choice": {"function": {"name": "get_weather"}}}),
    ("tools_no_params", {"messages": [U("ping")], "tools": [NOPARAMS]}),
    ("tools_strict", {"messages": [U("store")], "tools": [STRICT]}),
    ("tools_unicode", {"messages": [U("traduis")], "tools": [UNICODE_TOOL]}),
    ("tools_null_description", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "description": None, "parameters": {"type": "object", "properties": {}}}}]}),
    ("tools_defer_loading", {"messages": [U("x")], "tools": [WEATHER, {**NOPARAMS, "defer_loading": True}]}),
    ("tools_floats", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": 1.0,
                                                                            "maximum": 1e20, "minimum": -0.0001,
                                                                            "multipleOf": 0.00001}}}}}]}),
    ("tools_floats_small", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "number", "default": 2.0,
                                                                            "maximum": 1e15, "minimum": -1.5e-7,
                                                                            "exclusiveMaximum": 123456789.125}}}}}]}),
    ("tools_bad_name", {"messages": [U("x")], "tools": [{"type": "function", "function": {"name": "a.b"}}]}),
    ("tools_dup_name", {"messages": [U("x")], "tools": [WEATHER, WEATHER]}),
    ("tools_params_not_object", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "string"}}}]}),
    ("tools_params_invalid_schema", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "varchar"}}}}}]}),
    ("tools_strict_bad", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "object"}}}}}]}),
    ("tools_strict_mixed_required", {"messages": [U("x")], "tools": [STRICT, WEATHER], "tool_choice": "required"}),
    ("tool_round", {"messages": ROUND, "tools": [WEATHER]}),
    ("tool_round_no_tools", {"messages": ROUND}),
    ("tool_round_reasoning", {"messages": ROUND_R, "tools": [WEATHER]}),
    ("tool_multi_call", {"messages": MULTI_CALL, "tools": [WEATHER, SEARCH]}),
    ("tool_multi_call_required", {"messages": MULTI_CALL, "tools": [WEATHER, SEARCH], "tool_choice": "required"}),
    ("tool_args_dict", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "get_weather", {"city": "Oslo", "days": 3, "x": 1.5e-7})]),
                                     T("ok", "c1"), U("y")], "tools": [WEATHER]}),
    ("tool_args_null", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "get_weather", None)]),
                                     T("ok", "c1")], "tools": [WEATHER]}),
    ("tool_args_empty", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "")]), T("ok", "c1")],
                         "tools": [NOPARAMS]}),
    ("tool_call_no_type", {"messages": [U("x"), A(None, tool_calls=[
        {"id": "c1", "function": {"name": "ping", "arguments": "{}"}}]), T("ok", "c1")], "tools": [NOPARAMS]}),
    ("tool_call_no_id", {"messages": [U("x"), A(None, tool_calls=[
        {"type": "function", "function": {"name": "ping", "arguments": "{}"}}]), T("ok", "c1")], "tools": [NOPARAMS]}),
    ("tool_result_missing", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]), U("y")],
                             "tools": [NOPARAMS]}),
    ("tool_result_orphan", {"messages": [U("x"), T("r", "zz")]}),
    ("tool_result_wrong_id", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]), T("r", "c2")]}),
    ("tool_content_null", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]),
                                        {"role": "tool", "content": None, "tool_call_id": "c1"}]}),
    ("tool_calls_empty_list", {"messages": [U("x"), A("a", tool_calls=[]), U("y")]}),
    ("latest_reminder", {"messages": [U("x"), {"role": "latest_reminder", "content": "Today is Monday."},
                                      {"role": "latest_reminder", "content": "second"}]}),
    ("latest_reminder_mid", {"messages": [S("s"), {"role": "latest_reminder", "content": "r"}, U("x")]}),
    ("json_object", {"messages": [U("Reply in JSON please")], "response_format": {"type": "json_object"}}),
    ("json_object_no_word", {"messages": [U("Reply please")], "response_format": {"type": "json_object"}}),
    ("json_object_system", {"messages": [S("Sys"), U("give JSON")], "response_format": {"type": "json_object"}}),
    ("json_schema", {"messages": [U("Name a city")], "response_format": {"type": "json_schema", "json_schema": {
        "name": "city", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "pop": {"type": "integer"}},
                                   "required": ["name"]}}}}),
    ("json_schema_strict", {"messages": [U("Name a city")], "response_format": {"type": "json_schema", "json_schema": {
        "name": "city", "strict": True, "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}}),
    ("json_schema_top_schema", {"messages": [U("Name a city")], "response_format": {"type": "json_schema", "schema": {
        "title": "City", "type": "object", "properties": {"name": {"type": "string"}}}}}),
    ("json_schema_no_schema", {"messages": [U("x")], "response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}),
    ("json_schema_invalid", {"messages": [U("x")], "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": 12}}}}),
    ("json_schema_with_tools", {"messages": [U("x")], "tools": [WEATHER], "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}}),
    ("response_text", {"messages": [U("x")], "response_format": {"type": "text"}}),
    ("json_object_prefix", {"messages": [U("json"), A("{")], "continue_final_message": True,
                            "response_format": {"type": "json_object"}}),
    ("effort_low", {"messages": [U("x")], "reasoning_effort": "low"}),
    ("effort_minimal", {"messages": [U("x")], "reasoning_effort": "minimal"}),
    ("effort_medium", {"messages": [U("x")], "reasoning_effort": "medium"}),
    ("effort_high", {"messages": [U("x")], "reasoning_effort": "high"}),
    ("effort_xhigh", {"messages": [U("x")], "reasoning_effort": "xhigh"}),
    ("effort_max", {"messages": [S("sys"), U("x")], "reasoning_effort": "max"}),
    ("effort_ultra", {"messages": [U("x")], "reasoning_effort": "ultra"}),
    ("effort_none", {"messages": [U("x")], "reasoning_effort": "none"}),
    ("effort_none_thinking", {"messages": [U("x")], "reasoning_effort": "none",
                              "chat_template_kwargs": {"thinking": True}}),
    ("effort_float", {"messages": [U("x")], "reasoning_effort": 0.3}),
    ("effort_float_zero", {"messages": [U("x")], "reasoning_effort": 0.0}),
    ("effort_float_half", {"messages": [U("x")], "reasoning_effort": 0.125}),
    ("effort_float_str", {"messages": [U("x")], "reasoning_effort": "0.55"}),
    ("ctk_effort_int", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 42}}),
    ("ctk_effort_int_str", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": " 7 "}}),
    ("ctk_effort_100", {"messages": [S("s"), U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 100}}),
    ("ctk_effort_101", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 101}}),
    ("ctk_effort_float_str", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "0.99"}}),
    ("ctk_effort_float_big", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 30.0}}),
    ("ctk_effort_bool", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": True}}),
    ("ctk_effort_bogus", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "extreme"}}),
    ("ctk_effort_list", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": [1]}}),
    ("ctk_effort_tier", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "max"}}),
    ("ctk_effort_int_nothink", {"messages": [U("x")], "chat_template_kwargs": {"reasoning_effort": 42}}),
    ("ctk_effort_int_prefix", {"messages": [U("x"), A("ab")], "continue_final_message": True,
                               "chat_template_kwargs": {"thinking": True, "reasoning_effort": 12}}),
    ("thinking_on", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_history", {"messages": HISTORY, "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_history_tools", {"messages": HISTORY, "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_tool_round", {"messages": ROUND_R, "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_tool_round_noreason", {"messages": ROUND, "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_multi_call", {"messages": MULTI_CALL, "tools": [WEATHER, SEARCH],
                                "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_required", {"messages": [U("x")], "tools": [WEATHER], "tool_choice": "required",
                              "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_named", {"messages": [U("x")], "tools": [WEATHER], "reasoning_effort": "high",
                           "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("thinking_on_continue", {"messages": [U("x"), A("partial")], "continue_final_message": True,
                              "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_continue_reasoning", {"messages": [U("x"), A("", reasoning_content="r so far")],
                                        "continue_final_message": True, "chat_template_kwargs": {"thinking": True}}),
    ("thinking_on_continue_empty", {"messages": [U("x"), A("")], "continue_final_message": True,
                                    "chat_template_kwargs": {"thinking": True}}),
    ("thinking_str", {"messages": [U("x")], "chat_template_kwargs": {"thinking": "yes"}}),
    ("thinking_enable_thinking_only", {"messages": [U("x")], "chat_template_kwargs": {"enable_thinking": True}}),
    ("thinking_field_ignored", {"messages": [U("x")], "thinking": {"type": "enabled"}}),
    ("task_action", {"messages": [U("Open the settings page")], "task": "action"}),
    ("task_query", {"messages": [U("best pizza in nyc")], "task": "query"}),
    ("task_authority", {"messages": [U("x")], "task": "authority"}),
    ("task_domain", {"messages": [S("s"), U("x")], "task": "domain"}),
    ("task_title", {"messages": [U("x")], "task": "title"}),
    ("task_read_url", {"messages": [U("x")], "task": "read_url"}),
    ("task_action_thinking", {"messages": [U("x")], "task": "action", "chat_template_kwargs": {"thinking": True}}),
    ("task_query_thinking", {"messages": [U("x")], "task": "query", "chat_template_kwargs": {"thinking": True}}),
    ("task_prefix", {"messages": [U("x"), A("pre <｜User｜> fix")], "task": "title", "continue_final_message": True}),
    ("task_prefix_action", {"messages": [U("x"), A("go")], "task": "action", "continue_final_message": True,
                            "chat_template_kwargs": {"thinking": True}}),
    ("task_prefix_empty", {"messages": [U("x"), A("")], "task": "query", "continue_final_message": True}),
    ("task_assistant_last", {"messages": [U("x"), A("y")], "task": "domain"}),
    ("task_tools", {"messages": [U("x")], "task": "query", "tools": [WEATHER], "tool_choice": "required"}),
    ("task_budget", {"messages": [U("x")], "task": "query", "chat_template_kwargs": {"thinking": True, "reasoning_effort": 20}}),
    ("task_bogus", {"messages": [U("x")], "task": "summarize"}),
    ("specials_user", {"messages": [U(SPECIALS)]}),
    ("specials_system", {"messages": [S(SPECIALS), U("x")]}),
    ("specials_tool_result", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]), T(SPECIALS, "c1")]}),
    ("grounding_assistant", {"messages": [U("x"), A(GROUNDING, reasoning_content=GROUNDING), U("y")],
                             "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}),
    ("grounding_assistant_nothink", {"messages": [U("x"), A(GROUNDING), U("y")]}),
    ("specials_assistant", {"messages": [U("x"), A(SPECIALS), U("y")]}),
    ("specials_tool_args", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", {"s": SPECIALS, "n": 1})]),
                                         T("r", "c1")], "tools": [NOPARAMS]}),
    ("unicode", {"messages": [U("こんにちは世界 🌍 Ünïcödé — مرحبا  \u200b\t\r\n end")]}),
    ("crlf_whitespace", {"messages": [S("  lead"), U("a\r\n\r\nb   \n\n\n"), A("  x  "), U("\n")]}),
    ("long", {"messages": [S("Summarise."), U(LONG)]}),
    ("long_tools", {"messages": [U(LONG[:5000])], "tools": [WEATHER, SEARCH, UNICODE_TOOL],
                    "chat_template_kwargs": {"thinking": True}}),
    ("content_parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Part one."},
                                                                 {"type": "text", "text": "Part two."}]}]}),
    ("content_parts_system", {"messages": [{"role": "system", "content": [{"type": "text", "text": "S1"},
                                                                          {"type": "text", "text": "S2"}]}, U("x")]}),
    ("content_parts_empty", {"messages": [{"role": "user", "content": []}]}),
    ("content_parts_assistant", {"messages": [U("x"), A([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]), U("y")]}),
    ("content_parts_thinking", {"messages": [U("x"), A([{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "b"}]), U("y")]}),
    ("name_fields", {"messages": [{"role": "user", "content": "x", "name": "bob"},
                                  {"role": "assistant", "content": "y", "name": "bot"}, U("z")]}),
    ("role_capitalised", {"messages": [{"role": "SYSTEM", "content": "s"}, {"role": "User", "content": "x"}]}),
    ("role_function", {"messages": [U("x"), {"role": "function", "content": "f", "name": "g"}]}),
    ("role_root", {"messages": [{"role": "root", "content": "r"}, U("x")]}),
    ("billing_header", {"messages": [S("x-anthropic-billing-header: abc\n  You are Claude."), U("x")]}),
    ("billing_header_only", {"messages": [S("x-anthropic-billing-header: abc"), U("x")]}),
    ("only_system", {"messages": [S("just system")]}),
    ("only_assistant", {"messages": [A("hello")]}),
    ("structural_tag", {"messages": [U("x")], "response_format": {
        "type": "structural_tag", "structures": [{"begin": "<a>", "schema": {"type": "object"}, "end": "</a>"}],
        "triggers": ["<a>"]}}),
    ("null_keys", {"messages": [{"role": "user", "content": "x", "name": None}], "tools": None,
                   "tool_choice": None, "response_format": None, "reasoning_effort": None, "task": None}),
    ("stop_and_sampling", {"messages": [U("x")], "stop": ["", "a"], "temperature": 5, "n": 2, "max_tokens": 1}),
    ("tool_result_parts_image", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]),
                                              T([{"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}], "c1")]}),
    ("tool_args_numbers", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "search", {
        "a": 1.0, "b": 1e20, "c": 12345678901234567890123, "d": -0.0, "e": 3, "f": 1e-7, "g": {"h": [0.1, "é\n"]}})]),
        T("ok", "c1"), U("y")], "tools": [SEARCH]}),
    ("tools_big_numbers", {"messages": [U("x")], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer", "maximum": 12345678901234567890123,
                                                                            "minimum": -9223372036854775809, "default": 1.0}}}}}]}),
    ("message_level_tools", {"messages": [{"role": "system", "content": "s", "tools": [NOPARAMS]}, U("x")]}),
    ("tool_message_name", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]),
                                        {"role": "tool", "content": "r", "tool_call_id": "c1", "name": "ping"}]}),
    ("assistant_reasoning_null", {"messages": [U("x"), A("y", reasoning_content=None), U("z")], "tools": [WEATHER],
                                  "chat_template_kwargs": {"thinking": True}}),
    ("assistant_last_reasoning", {"messages": [U("x"), A("y", reasoning_content="dropped")],
                                  "chat_template_kwargs": {"thinking": True}}),
    ("assistant_last_tool_calls_continue", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")])],
                                            "continue_final_message": True}),
    ("json_schema_described", {"messages": [U("x")], "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "description": "d", "strict": False, "schema": {"type": "object", "properties": {"a": {"type": "number", "default": 0.5}}}}}}),
    ("budget_tools_schema", {"messages": [S("Be exact."), U("x")], "tools": [WEATHER], "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
        "chat_template_kwargs": {"thinking": True, "reasoning_effort": 5}}),
    ("budget_float", {"messages": [U("x")], "reasoning_effort": 0.29}),
    ("budget_float_nothink", {"messages": [U("x")], "reasoning_effort": 0.29, "chat_template_kwargs": {"thinking": False}}),
    ("budget_history", {"messages": HISTORY, "chat_template_kwargs": {"thinking": True, "reasoning_effort": 1}}),
    ("ctk_effort_bigint", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 100000000000000000000}}),
    ("ctk_effort_none_str", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "none"}}),
    ("ctk_effort_null", {"messages": [U("x")], "reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": None}}),
    ("ctk_effort_dict", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": {"a": "b'c"}}}),
    ("reasoning_object", {"messages": [U("x")], "reasoning": {"effort": "max"}}),
    ("effort_case", {"messages": [U("x")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": "High"}}),
    ("specials_long_mix", {"messages": [S(SPECIALS * 3), U(LONG[:3000] + SPECIALS), A(SPECIALS, reasoning_content=SPECIALS),
                                        U(GROUNDING * 2)], "tools": [WEATHER], "chat_template_kwargs": {"thinking": True}}),
    ("image_part", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}]}]}),
    # What pydantic's dump changes on the way to the wire request.
    ("wire_roles_case", {"messages": [{"role": "SYSTEM", "content": "s"}, U("q"),
                                      {"role": "Assistant", "content": "a"}, U("r")]}),
    ("wire_extra_keys", {"messages": [{"role": "user", "content": "q", "name": "n", "weight": 1},
                                      {"role": "assistant", "content": "a", "extra": "x", "name": "bot"},
                                      {"role": "user", "content": [{"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}}]}]}),
    ("wire_explicit_nulls", {"messages": [U("q"), {"role": "assistant", "content": "a", "reasoning_content": None,
                                                   "tool_calls": None, "name": None, "prefix": None}, U("r")],
                             "response_format": None, "tool_choice": None}),
    ("wire_lax_prefix", {"messages": [U("Count"), A("1", prefix="true")]}),
    ("wire_lax_prefix_int", {"messages": [U("Count"), A("1", prefix=1)], "continue_final_message": 1}),
    ("wire_call_index", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}", index="0")]),
                                      T("pong", "c1"), U("y")], "tools": [NOPARAMS]}),
    ("wire_call_no_type", {"messages": [U("x"), A(None, tool_calls=[{"id": "c1", "function": {"name": "ping", "arguments": "{}"}}]),
                                        T("pong", "c1"), U("y")], "tools": [NOPARAMS]}),
    ("wire_image_detail_default", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://e.com/a.png", "detail": "default"}}, {"type": "text", "text": "x"}]}]}),
    ("wire_text_format", {"messages": [U("x")], "response_format": {"type": "text"}}),
    ("wire_json_object", {"messages": [U("x")], "response_format": {"type": "json_object", "extra": 1}}),
    ("wire_tool_message_parts", {"messages": [U("x"), A(None, tool_calls=[CALL("c1", "ping", "{}")]),
                                              T([{"type": "text", "text": "p"}, {"type": "text", "text": "ong"}], "c1")],
                                 "tools": [NOPARAMS], "tool_choice": "auto"}),
    ("wire_tool_type_only", {"messages": [U("x")], "tools": [WEATHER],
                             "tool_choice": {"type": "function", "function": {"name": "get_weather", "x": 1}}}),
]

# The numbers Python and orjson read or print in their own ways, in tool
# schemas (enum, default, minimum) and in tool-call arguments given as an object
# (`json.dumps`-ed by `pre_normalize`, then read by recipe) and as a string (read
# by recipe as it is). Each literal is written into the JSON text of the body.
NUMBER_LITERALS = [
    ("2p63", "9223372036854775808"), ("2p63_1", "9223372036854775809"), ("2p64_m1", "18446744073709551615"),
    ("2p64", "18446744073709551616"), ("m2p63_m1", "-9223372036854775809"), ("i30", "123456789012345678901234567890"),
    ("e300", "1e+300"), ("e308", "1e308"), ("neg_zero", "-0.0"), ("neg_zero_int", "-0"), ("small", "1.5e-300"),
    ("digits", "0.1000000000000000055511151231257827"), ("pi30", "3.141592653589793238462643383279"),
    ("max", "1.7976931348623157e308"), ("denormal", "5e-324"), ("min_normal", "2.2250738585072011e-308"),
    ("2p53_1", "9007199254740993"), ("e22", "1e22"), ("e21", "1e21"), ("e16", "1e16"),
    ("frac_exp", "123456789.123456789e-5"), ("neg_small", "-4.9e-324"), ("int_exp", "12E2"),
]


def number_bodies():
    for key, v in NUMBER_LITERALS:
        schema = ('{"type":"object","properties":{"a":{"type":"integer","enum":[%s,1],"default":%s,"minimum":%s}}}'
                  % (v, v, v))
        yield f"numbers/schema_{key}", (
            '{"model":"m","messages":[{"role":"user","content":"x"}],'
            '"tools":[{"type":"function","function":{"name":"f","parameters":%s}}]}' % schema)
        history = ('{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,'
                   '"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":%s}}]},'
                   '{"role":"tool","tool_call_id":"c","content":"r"},{"role":"user","content":"y"}]}')
        yield f"numbers/args_object_{key}", history % ('{"a":%s,"b":[%s,{"c":%s}]}' % (v, v, v))
        yield f"numbers/args_string_{key}", history % json.dumps('{"a": %s, "b": [%s, {"c": %s}]}' % (v, v, v))


NUMBERS = list(number_bodies())

# Refused with a message the guard cannot spell (none at present: the body's
# 100000000000000000000 is the float 1e20 to orjson as to serde_json, printed 1e+20).
LOOSE_MESSAGE = set()

# Served by SGLang, refused by the guard on purpose (none at present).
GUARD_REFUSES = {}

# Counted longer by the guard, knowingly: orjson reads the literal -0 as the
# integer 0 (printed "0"), serde_json as the float -0.0 (printed "-0.0"), and a
# parsed body cannot tell that -0.0 from the literal -0.0. Inside an arguments
# string recipe reads both sides alike.
GUARD_OVERCOUNTS = {
    "numbers/schema_neg_zero_int": "the body's -0 is the int 0 to orjson, the float -0.0 to serde_json",
    "numbers/args_object_neg_zero_int": "the body's -0 is the int 0 to orjson, the float -0.0 to serde_json",
}

SERVER = [
    # (name suffix, env effort, default chat template kwargs, spec filter)
    ("", None, None),
    ("+env_max", "max", None),
    ("+env_low", "low", None),
    ("+env_int", "35", None),
    ("+env_float", " 0.4 ", None),
    ("+env_bogus", "bogus", None),
    ("+dctk_effort_low", None, {"reasoning_effort": "low"}),
    ("+dctk_effort_int", None, {"reasoning_effort": 60, "thinking": True}),
    ("+dctk_thinking", None, {"thinking": True}),
    ("+dctk_bad_effort", None, {"reasoning_effort": "huge"}),
    ("+dctk_effort_and_env", "max", {"reasoning_effort": "low"}),
]
SERVER_CASES = ["simple", "system_user", "effort_high", "effort_none", "thinking_on", "thinking_on_history_tools",
                "ctk_effort_int", "task_query_thinking", "tools_required", "continue_final", "ctk_effort_none_str",
                "budget_float"]


def main():
    cases = []
    for spec in ("dsv4", "dsv41"):
        for suffix, env_effort, dctk in SERVER:
            for name, body in BASE + (NUMBERS if not suffix else []):
                if suffix and name not in SERVER_CASES:
                    continue
                full = body if isinstance(body, str) else {"model": "m", **body}
                out = run(spec, full, env_effort, dctk)
                case = {"name": f"{spec}/{name}{suffix}", "spec": spec, "env_effort": env_effort,
                        "default_ctk_effort": (dctk or {}).get("reasoning_effort"),
                        "default_ctk": dctk}
                if "load_error" in out:
                    case["load_error"] = out["load_error"]
                    cases.append(case)
                    break  # one record per server that does not start
                if "pre_error" in out or "pre_ids" in out:
                    print("not at the adapter:", case["name"], str(out.get("pre_error"))[:120])
                    continue
                case.update(out)
                case["body"] = full
                if name in GUARD_REFUSES:
                    case["guard_refuses"] = GUARD_REFUSES[name]
                if name in GUARD_OVERCOUNTS:
                    case["guard_overcounts"] = GUARD_OVERCOUNTS[name]
                if name in LOOSE_MESSAGE:
                    case["message_loose"] = True
                cases.append(case)
    n_ok = sum(1 for c in cases if "ids" in c)
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{len(cases)} cases: {n_ok} encoded, {n_err} refused by the adapter, "
          f"{sum(1 for c in cases if 'load_error' in c)} servers that do not start")
    with open(os.path.join(HERE, "dsv4_expected.json"), "w") as f:
        json.dump({"fixture": "deepseek-v4", "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    goldens()


def goldens():
    path = os.path.join(SHARED, "goldens", "profiles", "deepseek-v4.jsonl")
    if not os.path.exists(path):
        print("no shared goldens at", path)
        return
    ok = total = 0
    for line in open(path):
        g = json.loads(line)
        if g.get("endpoint") != "chat":
            continue
        total += 1
        body = json.load(open(os.path.join(SHARED, "goldens", "cases", g["case"] + ".json")))["request"]
        out = run("dsv4", body)
        ids = out.get("ids", out.get("pre_ids"))
        got = len(ids) if ids is not None else None
        if got == g.get("tokens_sglang"):
            ok += 1
        else:
            print("golden mismatch:", g["case"], g.get("tokens_sglang"), got, out.get("error") or out.get("pre_error"))
    print(f"shared goldens (deepseek-v4 profile, chat): {ok}/{total} tokens_sglang reproduced")


if __name__ == "__main__":
    main()
