"""Expected outputs of SGLang 0.5.23's DeepSeek-V3.2 chat encoder
(`sglang/srt/entrypoints/openai/encoding_dsv32.py`), for the Rust port in
crates/count/src/encoder/dsv32.rs (checked by dsv32_tests.rs).

Developer machine only; CI never runs Python. Writes
crates/count/src/encoder/testdata/dsv32_expected.json: a list of cases, each with
the `messages` passed to `encoding_dsv32.encode_messages`, any other keyword
arguments (`kwargs`: context, drop_thinking, add_default_bos_token), and for
each thinking mode (`chat`, `thinking`, passed as SGLang's own
`ThinkingMode` enum members, as serving_chat.py passes them) either
`{"output": prompt}` or `{"error": exception type name, "message": str(e)}`.

Two kinds of cases:
* raw message lists, to reach every branch of the encoder (including the
  shapes that make Python raise);
* `served/...` cases: an OpenAI request body validated by SGLang's
  `ChatCompletionRequest` and prepared exactly as the
  `elif self.chat_encoding_spec is not None:` branch of
  `OpenAIServingChat._apply_jinja_template` prepares it (model_dump,
  `normalize_assistant_tool_call_arguments`, None content -> "", list content
  flattened, `_handle_last_assistant_message`, the empty system message,
  request tools on messages[0]); the stored `messages` are what reaches
  `encode_messages`.

The output is deterministic (no clocks, no randomness, fixed order).

Run (Python 3.11 with the packages listed in crates/count/src/testdata/sglang_env.py;
$SGLANG_SRC is the unpacked sglang 0.5.23 wheel):

    SGLANG_SRC=/work/ref/sg /work/ref/venv/bin/python crates/count/src/encoder/testdata/gen_dsv32.py
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "testdata"))
import sglang_env  # noqa: E402,F401

import sglang.srt.entrypoints.openai.serving_chat as sc  # noqa: E402
from sglang.srt.entrypoints.openai import encoding_dsv32 as enc  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, Tool  # noqa: E402
from sglang.srt.parser.jinja_template_utils import process_content_for_template_format  # noqa: E402

OUT = os.path.join(HERE, "dsv32_expected.json")
MODES = {"chat": sc.ThinkingMode.CHAT, "thinking": sc.ThinkingMode.THINKING}

CASES = []
NAMES = set()


def case(name, messages, **kwargs):
    assert name not in NAMES, name
    NAMES.add(name)
    CASES.append({"name": name, "messages": messages, "kwargs": kwargs})


# --- building blocks -----------------------------------------------------------

def S(content="", **kw):
    return {"role": "system", "content": content, **kw}


def U(content, **kw):
    return {"role": "user", "content": content, **kw}


def D(content, **kw):
    return {"role": "developer", "content": content, **kw}


def A(content="", **kw):
    return {"role": "assistant", "content": content, **kw}


def T(content, **kw):
    return {"role": "tool", "content": content, **kw}


def call(name, arguments, id=None):
    """An OpenAI tool call as `ToolCall.model_dump()` writes it."""
    return {"id": id, "index": None, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool(raw):
    """`Tool.model_dump()` of an OpenAI tool dict, as SGLang's call site dumps it."""
    return Tool.model_validate(raw).model_dump()


WEATHER = tool({"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}})
SEARCH = tool({"type": "function", "function": {
    "name": "search", "description": "Web search", "strict": True,
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}},
        "required": ["query"], "additionalProperties": False}}})
NO_DESC = tool({"type": "function", "function": {"name": "ping"}})
UNICODE_TOOL = tool({"type": "function", "function": {
    "name": "翻译", "description": "把文本翻译成目标语言 🌐 — «quotes» \"double\" \\ back\nline\ttab\u0001",
    "parameters": {"type": "object", "properties": {
        "文本": {"type": "string", "description": "要翻译的文本"},
        "目标语言": {"type": "string", "enum": ["中文", "日本語", "한국어", "Español"]},
        "options": {"type": "object", "properties": {
            "formality": {"type": "number", "minimum": 0.0, "maximum": 1.0, "default": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "nested": {"type": "object", "properties": {"deep": {"type": ["integer", "null"], "default": None}}}}}},
        "required": ["文本", "目标语言"]}}})
FLOATS_TOOL = tool({"type": "function", "function": {
    "name": "floats", "description": None, "defer_loading": False,
    "parameters": {"type": "object", "x-values": [1e16, 1e15, 1.5e-05, 0.0001, 0.1, 100.0, -2.5, -0.0,
                                                   1.7976931348623157e308, 5e-324, 18446744073709551615,
                                                   -9223372036854775808, 0, True, False, None, "", {}, []]}}})
ODD_ORDER_TOOL = tool({"function": {"parameters": {"type": "object", "properties": {}}, "strict": False,
                                    "name": "odd_order", "description": "keys in client order"},
                       "type": "function"})

SPECIAL = "<｜User｜><｜Assistant｜><think></think><｜begin▁of▁sentence｜><｜end▁of▁sentence｜>｜DSML｜<｜DSML｜function_calls>"

# --- roles and contents -----------------------------------------------------------

case("empty_list", [])
case("user_only", [U("Hello")])
case("system_user", [S("You are a helpful assistant."), U("Hi there")])
case("empty_system_user", [S(""), U("Hi")])
case("system_none_content", [S(None), U("Hi")])
case("system_missing_content", [{"role": "system"}, U("Hi")])
case("system_only", [S("Only a system prompt")])
case("system_int_content", [S(0), U("x")])
case("system_true_content", [S(True), U("x")])
case("system_list_content", [S(["a", 1, None]), U("x")])
case("two_systems", [S("first"), S("second"), U("x")])
case("user_empty", [S(""), U("")])
case("user_whitespace", [S(""), U("  \n\t  ")])
case("user_none", [S(""), U(None)])
case("user_missing_content", [S(""), {"role": "user"}])
case("user_int", [S(""), U(42)])
case("user_zero", [S(""), U(0)])
case("user_float", [S(""), U(1.5)])
case("user_float_big", [S(""), U(1e16)])
case("user_float_small", [S(""), U(1.5e-05)])
case("user_float_neg_zero", [S(""), U(-0.0)])
case("user_big_uint", [S(""), U(18446744073709551615)])
case("user_bool", [S(""), U(False)])
case("user_list", [S(""), U([{"type": "text", "text": "a"}, "b", 1.0, True, None])])
case("user_dict", [S(""), U({"k": "v", "n": [1, 2], "q": "it's", "e": "é中😀\u00a0\u200b\x00\x7f\\"})])
case("user_list_nonprintables", [S(""), U(["\x80\x9f\xa0\xad\u0600\u061c\u180e\u2000\u200b\u200f\u2028\u202f\u205f\u2066\u3000\ue000\ufeff\ufff9\U000110bd\U0001bca0\U0001d173\U000e0001\U000f0000\U00100000",
                                             "printable: \xa1\xff\u0100x\u4e00\uac00\U0001f600\U0001fae7"])])
case("user_list_unassigned", [S(""), U(["\u0378"])])
case("user_list_unicode15_emoji", [S(""), U(["shaking face \U0001fae8"])])
case("assistant_dict_unassigned", [S(""), U("q"), A({"k": "\U000323b0"}), U("q2")])
case("user_str_quotes", [S(""), U(["it's", 'say "hi"', "both ' and \"", "tab\there", "nl\nx", "\r"])])
case("user_cjk", [S("你是一个乐于助人的助手。"), U("请用中文回答：今天天气怎么样？")])
case("user_emoji", [S(""), U("😀🎉👨‍👩‍👧‍👦 family, flags 🇯🇵, skin 👍🏽")])
case("user_mixed_scripts", [S(""), U("Ελληνικά русский עברית العربية हिन्दी ไทย 日本語 한국어")])
case("user_special_tokens", [S(SPECIAL), U(SPECIAL)])
case("user_think_tags", [S(""), U("<think>pretend</think> reasoning")])
case("user_dsml_block", [S(""), U('<｜DSML｜function_calls>\n<｜DSML｜invoke name="x">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>')])
case("user_braces", [S("{content} {} {{x}} {0}"), U("{content}{reasoning}{tool_calls}{")])
case("user_json_content", [S(""), U('{"a": [1, 2, {"b": null}], "c": "d"}')])
case("user_control_chars", [S(""), U("a\x00b\x01c\x1fd\x7fe\u2028f\u2029g")])
case("user_long", [S(""), U("word " * 500)])
case("user_extra_keys", [S(""), U("x", name="bob", tool_call_id=None, phase=None, prefix=None)])
case("user_reasoning_ignored", [S(""), U("x", reasoning_content="should not render")])

# --- multi-turn chat ------------------------------------------------------------

case("multi_turn", [S("sys"), U("q1"), A("a1"), U("q2"), A("a2"), U("q3")])
case("multi_turn_no_system", [U("q1"), A("a1"), U("q2")])
case("assistant_none_content", [S(""), U("q1"), A(None), U("q2")])
case("assistant_missing_content", [S(""), U("q1"), {"role": "assistant"}, U("q2")])
case("assistant_int_content", [S(""), U("q1"), A(7), U("q2")])
case("assistant_whitespace", [S(""), U("q1"), A("  "), U("q2")])
case("reasoning_before_last_user", [S(""), U("q1"), A("a1", reasoning_content="thought 1"), U("q2")])
case("reasoning_after_last_user", [S(""), U("q1"), A("a1", reasoning_content="thought 1")])
case("no_reasoning_after_last_user", [S(""), U("q1"), A("a1")])
case("empty_reasoning_after_last_user", [S(""), U("q1"), A("a1", reasoning_content="")])
case("none_reasoning_after_last_user", [S(""), U("q1"), A("a1", reasoning_content=None)])
case("reasoning_int", [S(""), U("q1"), A("a1", reasoning_content=5)])
case("reasoning_list", [S(""), U("q1"), A("a1", reasoning_content=["x"])])
case("reasoning_cjk", [S(""), U("问题"), A("答案", reasoning_content="让我想想……🤔")])
case("reasoning_special", [S(""), U("q"), A(SPECIAL, reasoning_content=SPECIAL)])
case("reasoning_both_sides", [S(""), U("q1"), A("a1", reasoning_content="old"), U("q2"),
                              A("a2", reasoning_content="new")])
case("reasoning_whitespace", [S(""), U("q"), A("\n\na\n", reasoning_content="\n  \n")])
case("assistant_first", [A("I start", reasoning_content="r")])
case("assistant_first_no_reasoning", [A("I start")])
case("assistant_after_system_only", [S("s"), A("a", reasoning_content="r")])
case("two_assistants_after_user", [S(""), U("q"), A("a", reasoning_content="r1"), A("b", reasoning_content="r2")])
case("assistant_reasoning_key_order", [S(""), U("q1"),
                                       {"reasoning_content": "r", "role": "assistant", "content": "c", "x": 1},
                                       U("q2")])

# --- developer ------------------------------------------------------------------

case("developer_only", [D("dev instructions")])
case("developer_after_system", [S("s"), D("be terse")])
case("developer_with_tools", [S(""), D("use tools", tools=[WEATHER, SEARCH])])
case("developer_with_response_format", [S(""), D("json please", response_format={"type": "json_object"})])
case("developer_tools_and_format", [D("both", tools=[NO_DESC], response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})])
case("developer_empty", [S(""), D("")])
case("developer_none", [S(""), D(None, name=None)])
case("developer_missing_content", [{"role": "developer", "x": "é"}])
case("developer_int", [S(""), D(3)])
case("developer_dict_content", [S(""), D({"a": 1})])
case("developer_before_user", [S(""), D("d"), U("u")])
case("developer_then_assistant", [S(""), D("d"), A("a", reasoning_content="r")])
case("developer_then_user_then_developer", [S(""), D("d1"), U("u"), A("a"), D("d2")])
case("developer_empty_repr_unassigned", [S(""), D("", x="\u0378 \U0001fae8 \U000e0000 \U0010ffff \U000323b0")])
case("developer_empty_repr", [S(""), D("", name="n'q", phase="é中😀\u00a0\u200b\x00\\\"", tool_calls=None, extra=[1.5, -0.0, 1e20, True, None, {}])])

# --- system extras --------------------------------------------------------------

case("system_tools_one", [S("sys", tools=[WEATHER]), U("Weather in Paris?")])
case("system_tools_many", [S("", tools=[WEATHER, SEARCH, NO_DESC, ODD_ORDER_TOOL]), U("hi")])
case("system_tools_unicode", [S("系统", tools=[UNICODE_TOOL]), U("翻译这个")])
case("system_tools_floats", [S("", tools=[FLOATS_TOOL]), U("x")])
case("system_tools_empty_list", [S("s", tools=[]), U("x")])
case("system_tools_none", [S("s", tools=None), U("x")])
case("system_tools_raw_function_only", [S("", tools=[{"function": {"name": "f"}}]), U("x")])
case("system_tools_function_scalar", [S("", tools=[{"function": "just a string"}, {"function": 3}, {"function": None}]), U("x")])
case("system_response_format", [S("s", response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}), U("x")])
case("system_response_format_empty", [S("s", response_format={}), U("x")])
case("system_response_format_string", [S("s", response_format="json"), U("x")])
case("system_tools_and_response_format", [S("", tools=[SEARCH], response_format={"type": "json_object", "说明": "中文"}), U("x")])
case("system_empty_with_tools", [S("", tools=[WEATHER]), U("x")])
case("system_none_with_tools", [S(None, tools=[WEATHER]), U("x")])
case("system_tools_escapes", [S("", tools=[{"type": "function", "function": {
    "name": "esc", "description": "del\x7f ls\u2028 ps\u2029 bs\x08 ff\x0c us\x1f nul\x00 nbsp\u00a0 bom\ufeff",
    "parameters": {"k\n\"ey": "v\\al", "😀": "\U0001F600"}}}]), U("x")])
case("system_tools_in_middle", [S("a"), U("x"), S("later", tools=[NO_DESC]), U("y")])

# --- malformed tools --------------------------------------------------------------

case("tools_dict", [S("", tools={"type": "function"}), U("x")])
case("tools_string", [S("", tools="abc"), U("x")])
case("tools_int", [S("", tools=5), U("x")])
case("tools_true", [S("", tools=True), U("x")])
case("tools_float", [S("", tools=2.5), U("x")])
case("tools_list_of_str", [S("", tools=["get_weather"]), U("x")])
case("tools_missing_function", [S("", tools=[{"type": "function", "name": "f"}]), U("x")])
case("tools_list_of_list", [S("", tools=[["function"]]), U("x")])
case("tools_list_of_none", [S("", tools=[None]), U("x")])
case("tools_list_of_int", [S("", tools=[1]), U("x")])
case("tools_second_bad", [S("", tools=[WEATHER, {"nope": 1}]), U("x")])
case("tools_on_user_bad", [S(""), U("x", tools=[{"nope": 1}])])
case("tools_on_user_ok", [S(""), U("x", tools=[WEATHER])])
case("tools_on_assistant_bad", [S(""), U("x"), A("a", tools="zz")])
case("tools_on_tool_bad", [S(""), U("x"), A("", tool_calls=[call("f", {})]), T("r", tools=[3])])
case("tools_falsy_values", [S("", tools=0), U("x", tools=""), A("a", tools={}), U("y", tools=False)])

# --- tool calls and results ---------------------------------------------------------

case("tool_call_dict_args", [S("", tools=[WEATHER]), U("Weather in Paris?"),
                             A("", tool_calls=[call("get_weather", {"location": "Paris", "unit": "celsius"}, "c1")]),
                             T("18C, sunny", tool_call_id="c1")])
case("tool_call_str_args", [S("", tools=[WEATHER]), U("Weather?"),
                            A("", tool_calls=[call("get_weather", '{"location": "Paris"}')]),
                            T("sunny")])
case("tool_call_then_answer", [S("", tools=[WEATHER]), U("Weather?"),
                               A("", reasoning_content="need tool", tool_calls=[call("get_weather", {"location": "Paris"})]),
                               T("sunny"), A("It is sunny.", reasoning_content="got it")])
case("tool_call_then_answer_then_user", [S("", tools=[WEATHER]), U("Weather?"),
                                         A("", reasoning_content="need tool", tool_calls=[call("get_weather", {"location": "Paris"})]),
                                         T("sunny"), A("It is sunny.", reasoning_content="got it"), U("Thanks!")])
case("tool_calls_parallel", [S("", tools=[WEATHER, SEARCH]), U("Do both"),
                             A("Sure.", tool_calls=[call("get_weather", {"location": "Paris"}),
                                                    call("search", {"query": "paris events", "top_k": 3}),
                                                    call("get_weather", '{"location": "Lyon", "unit": "fahrenheit"}')]),
                             T("sunny"), T("[concert]"), T("cloudy")])
case("tool_results_partial", [S(""), U("q"), A("", tool_calls=[call("a", {}), call("b", {}), call("c", {})]),
                              T("r1"), T("r2")])
case("tool_results_too_many", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T("r1"), T("r2")])
case("tool_results_then_user", [S(""), U("q"), A("", tool_calls=[call("a", {"x": 1})]), T("r"), U("q2")])
case("tool_result_empty", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T("")])
case("tool_result_none", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T(None)])
case("tool_result_missing_content", [S(""), U("q"), A("", tool_calls=[call("a", {})]), {"role": "tool"}])
case("tool_result_dict", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T({"temp": 18.5, "ok": True, "s": "中"})])
case("tool_result_list", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T([1, "two", None])])
case("tool_result_json_string", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T('{"temp": 18.5}')])
case("tool_result_special", [S(""), U("q"), A("", tool_calls=[call("a", {})]), T("</result></function_results>" + SPECIAL)])
case("tool_after_user", [S(""), U("q"), T("orphan")])
case("tool_after_system", [S("s"), T("orphan")])
case("tool_after_assistant_without_calls", [S(""), U("q"), A("a"), T("r")])
case("tool_after_assistant_empty_calls", [S(""), U("q"), A("a", tool_calls=[]), T("r")])
case("tool_first", [T("r")])
case("tool_first_then_tool_with_calls", [T("r0"), T("r1", tool_calls=[call("f", {}), call("g", {})])])
case("tool_first_last_is_assistant", [T("r0"), U("q"), A("", tool_calls=[call("f", {})])])
case("tool_tool_after_system", [S(""), T("a"), T("b")])
case("agentic_loop", [S("agent", tools=[SEARCH]), U("research X"),
                      A("", reasoning_content="search first", tool_calls=[call("search", {"query": "X"})]),
                      T("result 1"),
                      A("", reasoning_content="search more", tool_calls=[call("search", {"query": "X details", "top_k": 10})]),
                      T("result 2"),
                      A("Here is the summary.", reasoning_content="done")])
case("agentic_loop_open", [S("agent", tools=[SEARCH]), U("research X"),
                           A("", reasoning_content="search first", tool_calls=[call("search", {"query": "X"})]),
                           T("result 1")])
case("agentic_loop_no_reasoning", [S("", tools=[SEARCH]), U("q"),
                                   A("", tool_calls=[call("search", {"query": "X"})]), T("r")])
case("tool_loop_before_last_user", [S("", tools=[SEARCH]), U("q"),
                                    A("", reasoning_content="old thought", tool_calls=[call("search", {"query": "X"})]),
                                    T("r"), A("answer", reasoning_content="old"), U("q2"),
                                    A("", reasoning_content="new", tool_calls=[call("search", {"query": "Y"})]),
                                    T("r2")])

# --- tool call arguments ------------------------------------------------------------

case("args_types", [S(""), U("q"), A("", tool_calls=[call("f", {
    "s": "text", "i": 42, "neg": -7, "f": 3.14, "f_int": 2.0, "big": 1e16, "small": 1e-07, "t": True, "fl": False,
    "n": None, "l": [1, "a", None, [2]], "o": {"k": "v", "n": {"d": 1.5}}, "empty_s": "", "empty_l": [], "empty_o": {}})])])
case("args_unicode", [S(""), U("q"), A("", tool_calls=[call("翻译", {"文本": "你好，世界 🌍", "目标语言": "日本語",
                                                                   "list": ["é", "中", "😀"], "obj": {"键": "值"}})])])
case("args_str_unicode", [S(""), U("q"), A("", tool_calls=[call("翻译", '{"文本": "\\u4f60\\u597d", "emoji": "\\ud83d\\ude00", "raw": "中"}')])])
case("args_str_escapes", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": "line\\nbreak", "b": "tab\\t", "q": "\\"quoted\\"", "bs": "\\\\", "l": ["x\\ny"]}')])])
case("args_special_values", [S(""), U("q"), A("", tool_calls=[call("f", {"v": SPECIAL, "w": ["</｜DSML｜parameter>"]})])])
case("args_control_chars", [S(""), U("q"), A("", tool_calls=[call("f", {"s": "raw\x7f\u2028\x08\x0c\x1f", "l": ["\x7f\u2028\x08\x0c\x1f\x00", "\"q\"\\"]})])])
case("args_empty_dict", [S(""), U("q"), A("", tool_calls=[call("f", {})])])
case("args_empty_json", [S(""), U("q"), A("", tool_calls=[call("f", "{}")])])
case("args_whitespace_json", [S(""), U("q"), A("", tool_calls=[call("f", ' \n\t{"a" : 1 } \r\n')])])
case("args_str_floats", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 1.0, "b": 1e5, "c": 0.1, "d": -0.0, "e": 1E-7, "g": 123456789.123, "h": 1.7976931348623157e308, "i": 5e-324, "j": 2.5e+20}')])])
case("args_str_ints", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 0, "b": -1, "c": 9223372036854775807, "d": -9223372036854775808, "e": 18446744073709551615}')])])
case("args_str_duplicate_keys", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 1, "b": 2, "a": 3}')])])
case("args_str_nested", [S(""), U("q"), A("", tool_calls=[call("f", '{"o": {"z": 1, "a": [true, false, null, {"x": "y"}]}}')])])
case("args_str_list", [S(""), U("q"), A("", tool_calls=[call("f", "[1, 2]")])])
case("args_str_number", [S(""), U("q"), A("", tool_calls=[call("f", "5")])])
case("args_str_string", [S(""), U("q"), A("", tool_calls=[call("f", '"x"')])])
case("args_str_null", [S(""), U("q"), A("", tool_calls=[call("f", "null")])])
case("args_str_invalid", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": ')])])
case("args_str_empty", [S(""), U("q"), A("", tool_calls=[call("f", "")])])
case("args_str_trailing_comma", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 1,}')])])
case("args_str_single_quotes", [S(""), U("q"), A("", tool_calls=[call("f", "{'a': 1}")])])
case("args_str_trailing_garbage", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 1} x')])])
case("args_none", [S(""), U("q"), A("", tool_calls=[call("f", None)])])
case("args_list", [S(""), U("q"), A("", tool_calls=[call("f", [1, 2])])])
case("args_int", [S(""), U("q"), A("", tool_calls=[call("f", 0)])])
case("args_bool", [S(""), U("q"), A("", tool_calls=[call("f", True)])])
case("args_second_call_bad", [S(""), U("q"), A("", tool_calls=[call("f", {"a": 1}), call("g", "[]")])])
# Python reads these and the port refuses them (see REFUSED in dsv32_tests.rs).
case("args_str_neg_zero_int", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": -0}')])])
case("args_str_huge_int", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 123456789012345678901234567890}')])])
case("args_str_nan", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": NaN}')])])
case("args_str_infinity", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": -Infinity}')])])
case("args_str_float_overflow", [S(""), U("q"), A("", tool_calls=[call("f", '{"a": 1e400}')])])

# --- tool call names and malformed tool_calls -------------------------------------------

case("call_name_none", [S(""), U("q"), A("", tool_calls=[call(None, {"a": 1})])])
case("call_name_int", [S(""), U("q"), A("", tool_calls=[call(12, {"a": 1})])])
case("call_name_unicode_quotes", [S(""), U("q"), A("", tool_calls=[call('名字 "quoted"', {"a": 1})])])
case("call_missing_name", [S(""), U("q"), A("", tool_calls=[{"type": "function", "function": {"arguments": "{}"}}])])
case("call_missing_arguments", [S(""), U("q"), A("", tool_calls=[{"type": "function", "function": {"name": "f"}}])])
case("call_missing_function", [S(""), U("q"), A("", tool_calls=[{"type": "function", "name": "f", "arguments": "{}"}])])
case("call_function_str", [S(""), U("q"), A("", tool_calls=[{"function": "f"}])])
case("call_function_list", [S(""), U("q"), A("", tool_calls=[{"function": ["f"]}])])
case("call_function_none", [S(""), U("q"), A("", tool_calls=[{"function": None}])])
case("call_minimal_shape", [S(""), U("q"), A("", tool_calls=[{"function": {"arguments": {"x": "y"}, "name": "f"}}])])
case("tool_calls_dict", [S(""), U("q"), A("", tool_calls={"function": {"name": "f", "arguments": {}}})])
case("tool_calls_str", [S(""), U("q"), A("", tool_calls="f")])
case("tool_calls_int", [S(""), U("q"), A("", tool_calls=1)])
case("tool_calls_list_of_str", [S(""), U("q"), A("", tool_calls=["f"])])
case("tool_calls_list_of_int", [S(""), U("q"), A("", tool_calls=[7])])
case("tool_calls_on_user", [S(""), U("q", tool_calls=[call("f", {"a": 1})])])
case("tool_calls_on_user_bad", [S(""), U("q", tool_calls=[{"x": 1}])])
case("tool_calls_falsy", [S(""), U("q"), A("a", tool_calls=None, reasoning_content="r"), U("q2"), A("b", tool_calls=[], reasoning_content="r")])
case("tool_calls_without_reasoning_after_user", [S(""), U("q"), A("calling", tool_calls=[call("f", {"a": 1})])])

# --- roles and non-dict messages ---------------------------------------------------

case("unknown_role_function", [S(""), U("q"), {"role": "function", "content": "x"}])
case("unknown_role_before_user", [S(""), {"role": "root", "content": "x"}, U("q")])
case("unknown_role_none", [S(""), {"role": None, "content": "x"}])
case("missing_role", [S(""), {"content": "x"}])
case("role_int", [S(""), {"role": 3, "content": "x"}])
case("role_list", [S(""), U("q"), {"role": ["user"], "content": "x"}])
case("role_uppercase", [S(""), {"role": "User", "content": "x"}])
case("message_str", [S(""), "hello"])
case("message_list_first", [["user", "hi"], U("q")])
case("message_none_last", [S(""), U("q"), None])
case("message_int_middle", [S(""), 5, U("q")])
case("message_bool_before_user", [S(""), True, U("q"), A("a", reasoning_content="r")])

# --- keyword arguments --------------------------------------------------------------

case("kw_no_bos", [S("s"), U("q")], add_default_bos_token=False)
case("kw_keep_thinking", [S(""), U("q1"), A("a1", reasoning_content="kept?"), U("q2")], drop_thinking=False)
case("kw_keep_thinking_developer", [S(""), D("d"), U("q")], drop_thinking=False)
case("kw_context", [A("a2", reasoning_content="r2")], context=[S("s"), U("q1"), A("a1", reasoning_content="r1"), U("q2")])
case("kw_context_empty", [S("s"), U("q")], context=[])
case("kw_context_tools", [T("r1"), T("r2")], context=[S(""), U("q"), A("", tool_calls=[call("f", {}), call("g", {})])])
case("kw_context_tool_calls_str", [T("r1"), T("r2")], context=[S(""), U("q"), A("", tool_calls="ab")])
case("kw_context_tool_calls_str_short", [T("r1"), T("r2")], context=[S(""), U("q"), A("", tool_calls="a")])
case("kw_context_tool_calls_dict", [T("r1")], context=[S(""), U("q"), A("", tool_calls={"k": 1})])
case("kw_context_tool_calls_int", [T("r1")], context=[S(""), U("q"), A("", tool_calls=5)])
case("kw_context_tool_calls_float", [T("r1")], context=[S(""), U("q"), A("", tool_calls=0.5)])
case("kw_context_bad_message", [U("q")], context=[S(""), "junk"])
case("kw_context_nondict_before_tool", [T("r"), U("q")], context=[5])
case("kw_context_tool_walk_to_nondict", [T("r2"), U("q")], context=[["x"], T("r1")])
case("kw_context_only_no_messages", [], context=[S("s"), U("q")])
case("kw_no_bos_keep_thinking_context", [U("q2")], context=[U("q1"), A("a", reasoning_content="r")],
     drop_thinking=False, add_default_bos_token=False)


# --- served: requests prepared by serving_chat.py's dsv32 branch --------------------------

def served_messages(body):
    """The `messages` serving_chat.py's dsv32 branch passes to encode_messages
    (lines following `elif self.chat_encoding_spec is not None:`)."""
    request = ChatCompletionRequest.model_validate({"model": "m", **body})
    messages = [msg.model_dump() for msg in request.messages]
    for message in messages:
        sc.normalize_assistant_tool_call_arguments(message, strict=True)
    messages = copy.deepcopy(messages)  # _encode_messages returns None for dsv32
    messages = copy.deepcopy(messages)
    for msg in messages:
        if msg.get("content") is None:
            msg["content"] = ""
    for i, msg in enumerate(messages):
        if isinstance(msg.get("content"), list):
            messages[i] = process_content_for_template_format(msg, "string", [], [], [], [])
    for msg in messages:
        processed_msg = process_content_for_template_format(
            msg, "string", [], [], [], [], use_dpsk_v32_encoding=True)
        msg.update(processed_msg)
    messages, _prefix = sc.OpenAIServingChat._handle_last_assistant_message(None, messages, request)
    # `tools` of _apply_jinja_template: the request tools unless tool_choice is "none".
    effective = list(request.tools or [])
    tools = [item.model_dump() for item in request.tools] if effective and request.tool_choice != "none" and request.tools else None
    request_tools = request.tools if tools else None
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": ""})
    if request_tools:
        messages[0]["tools"] = [t.model_dump() for t in request_tools]
    return messages


def served(name, **body):
    case("served/" + name, served_messages(body))


RAW_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
RAW_CALC = {"type": "function", "function": {"name": "calc", "strict": True,
                                             "parameters": {"type": "object", "properties": {"expr": {"type": "string"}, "precision": {"type": "integer"}}}}}

served("plain", messages=[{"role": "user", "content": "Hello!"}])
served("system", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}])
served("tools", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[RAW_WEATHER, RAW_CALC])
served("tools_with_system", messages=[{"role": "system", "content": "Use tools."}, {"role": "user", "content": "2+2?"}],
       tools=[RAW_CALC])
served("tools_choice_none", messages=[{"role": "user", "content": "x"}], tools=[RAW_WEATHER], tool_choice="none")
served("tools_choice_named", messages=[{"role": "user", "content": "x"}], tools=[RAW_WEATHER, RAW_CALC],
       tool_choice={"type": "function", "function": {"name": "calc"}})
served("tool_round_trip", messages=[
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C"}], tools=[RAW_WEATHER])
served("tool_round_trip_reasoning", messages=[
    {"role": "user", "content": "Weather in Paris and 2+2?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools.", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "b", "type": "function", "function": {"name": "calc", "arguments": "{\"expr\": \"2+2\", \"precision\": 0}"}}]},
    {"role": "tool", "tool_call_id": "a", "content": "18C"},
    {"role": "tool", "tool_call_id": "b", "content": "4"}], tools=[RAW_WEATHER, RAW_CALC])
served("list_content", messages=[{"role": "system", "content": [{"type": "text", "text": "sys a"}, {"type": "text", "text": "sys b"}]},
                                 {"role": "user", "content": [{"type": "text", "text": "look"},
                                                              {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                                                              {"type": "text", "text": "here"}]}])
served("list_content_no_text", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
served("last_assistant_to_user", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial"}])
served("continue_final_message", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial"}],
       continue_final_message=True)
served("developer", messages=[{"role": "developer", "content": "dev rules"}, {"role": "user", "content": "q"}])
served("developer_tools", messages=[{"role": "developer", "content": "dev", "tools": [RAW_CALC]}, {"role": "user", "content": "q"}])
served("system_tools_and_request_tools", messages=[{"role": "system", "content": "s", "tools": [RAW_CALC]},
                                                   {"role": "user", "content": "q"}], tools=[RAW_WEATHER])
served("system_message_tools_only", messages=[{"role": "system", "content": "s", "tools": [RAW_CALC]},
                                              {"role": "user", "content": "q"}])
served("multi_turn_reasoning", messages=[
    {"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
    {"role": "assistant", "content": "a1", "reasoning_content": "r1"}, {"role": "user", "content": "q2"}])
served("unicode", messages=[{"role": "user", "content": "日本語で答えて 🇯🇵"}],
       tools=[{"type": "function", "function": {"name": "検索", "description": "ウェブ検索 🔍",
                                                "parameters": {"type": "object", "properties": {"語": {"type": "string"}}}}}])
served("args_numbers", messages=[
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "type": "function", "function": {
        "name": "calc", "arguments": "{\"expr\": \"1/3\", \"precision\": 10, \"f\": 0.5, \"b\": true, \"n\": null, \"l\": [1.0, 2]}"}}]},
    {"role": "tool", "tool_call_id": "x", "content": "0.3333333333"},
    {"role": "user", "content": "thanks"}], tools=[RAW_CALC])
served("tool_message_list_content", messages=[
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "part1"}, {"type": "text", "text": "part2"}]}],
       tools=[RAW_CALC])


# --- run --------------------------------------------------------------------------

def run(messages, mode, kwargs):
    try:
        return {"output": enc.encode_messages(copy.deepcopy(messages), mode, **copy.deepcopy(kwargs))}
    except Exception as e:  # noqa: BLE001 - every exception is an expected value
        return {"error": type(e).__name__, "message": str(e)}


def main():
    out = []
    for c in CASES:
        entry = {"name": c["name"], "messages": c["messages"]}
        if c["kwargs"]:
            entry["kwargs"] = c["kwargs"]
        for key, mode in MODES.items():
            entry[key] = run(c["messages"], mode, c["kwargs"])
        out.append(entry)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(("error" in e["chat"]) + ("error" in e["thinking"]) for e in out)
    print(f"{len(out)} cases, {2 * len(out)} encodings ({n_err} raise) -> {OUT}")


if __name__ == "__main__":
    main()
