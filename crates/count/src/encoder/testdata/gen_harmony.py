"""Expected values for the gpt-oss `/v1/responses` encoder (../harmony.rs),
produced by running SGLang 0.5.23's own harmony path.

Developer machine only; CI never runs Python. Writes harmony_expected.json
beside this file: per case the request body, the serving setting it runs
under and what SGLang does with it: `len(input_ids)` plus an FNV-1a hash of
the ids (so the Rust test proves equal ids, not just an equal count), or the
error SGLang answers with, or that the guard must refuse it.

How: as ../../testdata/gen_chat_api.py does, SGLang's `OpenAIServingResponses`
is built without its constructor, here with `use_harmony=True` (what
`hf_config.model_type == "gpt_oss"` sets); each body goes through
`ResponsesRequest.model_validate` and `create_responses`, and the
`GenerateReqInput(input_ids=...)` it builds is captured. Rendering is
`openai_harmony` 0.0.4 (the version SGLang 0.5.23 pins), whose vocabulary
`o200k_base.tiktoken` is rebuilt here from the fixture's tokenizer.json into
a temporary directory (TIKTOKEN_ENCODINGS_BASE): harmony checks that file's
SHA-256 against OpenAI's published hash before using it, so a run that
succeeds has also proved the fixture's vocabulary is o200k_base, byte for
byte. No network. The conversation date (`datetime.datetime.now()` in
`harmony_utils.get_system_message`) is pinned to 2025-01-15, or to a case's
"date".

    SGLANG_SRC=/work/ref/sg python crates/count/src/encoder/testdata/gen_harmony.py

Requires what ../../testdata/sglang_env.py lists (openai-harmony==0.0.4).
"""
import asyncio
import base64
import contextlib
import copy
import datetime as _dt
import hashlib
import json
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
FIXTURE = os.path.join(SHARED, "tokenizers", "gpt-oss")
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
import sglang_env  # noqa: E402,F401  (stubs, sys.path, pinned strftime_now)
from sglang_env import get_tokenizer  # noqa: E402


def _byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def write_vocab(tokenizer_json, directory):
    """o200k_base.tiktoken from a byte-level BPE tokenizer.json (rank = id)."""
    bd = _byte_decoder()
    vocab = json.load(open(tokenizer_json))["model"]["vocab"]
    items = sorted(vocab.items(), key=lambda kv: kv[1])
    data = b"".join(base64.b64encode(bytes(bd[ch] for ch in tok)) + b" " + str(rank).encode() + b"\n"
                    for tok, rank in items)
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256, "the fixture's vocabulary is not o200k_base"
    with open(os.path.join(directory, "o200k_base.tiktoken"), "wb") as f:
        f.write(data)


_VOCAB_DIR = tempfile.TemporaryDirectory()
write_vocab(os.path.join(FIXTURE, "tokenizer.json"), _VOCAB_DIR.name)
os.environ["TIKTOKEN_ENCODINGS_BASE"] = _VOCAB_DIR.name

import sglang.srt.entrypoints.harmony_utils as hu  # noqa: E402
import sglang.srt.entrypoints.openai.serving_responses as sr  # noqa: E402
from openai_harmony import ToolNamespaceConfig  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ResponsesRequest  # noqa: E402
from sglang.srt.entrypoints.openai.tool_server import ToolServer  # noqa: E402

DATE = [_dt.datetime(2025, 1, 15, 12, 0, 0)]


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return DATE[0]


hu.datetime = types.SimpleNamespace(datetime=_FixedDatetime)


class _Bag(types.SimpleNamespace):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None


SERVING = _Bag(enable_response_store=False)
MODEL = _Bag(context_length=None, revision=None)
for _name in ("get_serving", "get_model"):
    if hasattr(sr, _name):
        setattr(sr, _name, (lambda: SERVING) if _name == "get_serving" else (lambda: MODEL))


class FakeToolServer(ToolServer):
    """A tool server with the given built-ins, describing them as DemoToolServer does."""

    def __init__(self, tools):
        self.tools = set(tools)

    def has_tool(self, name):
        return name in self.tools

    def get_tool_description(self, name):
        if name not in self.tools:
            return None
        return ToolNamespaceConfig.browser() if name == "browser" else ToolNamespaceConfig.python()

    @contextlib.asynccontextmanager
    async def get_tool_session(self, name):
        yield object()


# Serving settings (what HarmonySettings models): response store, PD mode, tool server.
SETTINGS = {
    "default": dict(store=False, pd=False, tool_server=None),
    "store": dict(store=True, pd=False, tool_server=None),
    "tools": dict(store=False, pd=False, tool_server=("browser", "python")),
    "tools_pd": dict(store=False, pd=True, tool_server=("browser", "python")),
    "tools_none": dict(store=False, pd=False, tool_server=()),
}


def make_serving(tokenizer, setting):
    s = SETTINGS[setting]
    tm = types.SimpleNamespace(
        tokenizer=tokenizer, processor=None, served_model_name="m",
        model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(model_type="gpt_oss", architectures=["GptOssForCausalLM"]),
                                           is_multimodal=False, context_len=1 << 22),
        server_args=None, model_path="m", num_reserved_tokens=0, config_value=lambda k: None, lora_registry=None)
    tmpl = types.SimpleNamespace(chat_template_name=None, jinja_template_content_format="string", reasoning_config=None,
                                 python_chat_template=None, jinja_template_may_reorder_tool_results=False,
                                 force_reasoning=False)
    r = object.__new__(sr.OpenAIServingResponses)
    r.tokenizer_manager, r.template_manager = tm, tmpl
    r.allowed_custom_labels = None
    r.tool_call_parser = None
    r.reasoning_parser = None
    r.default_chat_template_kwargs = {}
    r._reasoning_detector = None
    r.default_sampling_params = {"stop_token_ids": list(hu.get_stop_tokens_for_assistant_actions())}
    r.is_gpt_oss = True
    r.is_gemma4 = r.is_minimax_m3 = False
    r.chat_encoding_spec = None
    r.supports_inline_system = True
    r._encoding_adapter = None
    r._response_parser = None
    r.enable_prompt_tokens_details = False
    ts = None if s["tool_server"] is None else FakeToolServer(s["tool_server"])
    r.tool_server = ts
    r.supports_browsing = ts.has_tool("browser") if ts else False
    r.supports_code_interpreter = ts.has_tool("python") if ts else False
    r._translates_tools = False
    r.use_harmony = True
    r.response_store, r.msg_store, r.background_tasks = {}, {}, {}
    r.enable_response_store = s["store"]
    r.is_disaggregated = s["pd"]
    r.response_store_lock = asyncio.Lock()
    return r


def fnv(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def run(serving, body):
    try:
        req = ResponsesRequest.model_validate(copy.deepcopy(body))
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:400]}
    captured = {}

    class Captured(Exception):
        pass

    def capture(**kw):
        captured.update(kw)
        raise Captured()

    orig = sr.GenerateReqInput
    sr.GenerateReqInput = capture
    try:
        res = asyncio.run(serving.create_responses(req, None))
    except Captured:
        res = None
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:400]}
    finally:
        sr.GenerateReqInput = orig
    if "input_ids" in captured:
        ids = captured["input_ids"]
        return {"tokens": len(ids), "ids_fnv": fnv(ids)}
    body = getattr(res, "body", None)
    return {"error": (body.decode() if body else repr(res))[:400]}


# --- the cases -------------------------------------------------------------------
# Names starting with `guard_` are requests SGLang serves (or refuses) whose prompt
# the guard cannot see or does not model: the expected result is a refusal by the
# guard. `error_` cases must be refused by SGLang; all others must be served.

M = {"model": "m"}


def req(**kw):
    return {**M, **kw}


FN = {"type": "function", "name": "get_weather", "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
FN2 = {"type": "function", "name": "search_docs", "description": "Search the docs.\nReturns the top hits.",
       "parameters": {"type": "object", "properties": {
           "query": {"type": "string", "description": "What to look for"},
           "limit": {"type": "integer", "default": 5},
           "exact": {"type": "boolean"}},
           "required": ["query"]}}
COMPLEX_SCHEMA = {
    "type": "object",
    "description": "Top-level options",
    "properties": {
        "name": {"type": "string", "title": "Name", "description": "The name", "examples": ["alice", "bob", 3]},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        "level": {"type": "string", "enum": ["a", 1, None], "default": "a", "description": "level"},
        "count": {"type": "integer", "default": 3},
        "ratio": {"type": "number", "default": 0.5, "nullable": True},
        "flag": {"type": "boolean", "default": False},
        "tags": {"type": "array", "items": {"type": "string"}},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "anything": {"type": "array"},
        "id": {"type": ["number", "string", "integer"], "default": -1},
        "weird": {"type": ["null"]},
        "nested": {"type": "object", "description": "Nested thing", "properties": {
            "x": {"type": "number", "description": "x coord"},
            "y": {"type": "number", "nullable": True}}, "required": ["x"]},
        "choice": {"description": "Pick one", "oneOf": [
            {"type": "string", "description": "Pick one"},
            {"type": "integer", "description": "as int", "default": 2},
            {"type": "object", "properties": {"k": {"type": "string"}}, "nullable": True}], "default": "z"},
        "choice2": {"oneOf": [{"type": "string", "enum": ["p", "q"], "default": "p"},
                              {"type": "number", "nullable": True, "default": 1.5}]},
        "obj_default": {"type": "object", "default": {"a": [1, 2.5, "s\n\"q\"", None, True], "b": {}}},
        "arr_default": {"type": "array", "default": [1e16, 1.5e-7, 0.1, -0.25, 100.0]},
        "null_default": {"type": "string", "default": None},
        "enum_default": {"type": "string", "enum": ["u", "v"], "default": "v"},
        "untyped": {"description": "no type"},
        "unknown_type": {"type": "date"},
    },
    "required": ["name", "choice"],
}
SCHEMA_EDGES = {"type": "object", "required": ["a", 5, None], "description": 7, "properties": {
    "a": {"oneOf": {"type": "string"}, "default": "d", "description": "non-list oneOf"},
    "b": {"type": [], "default": [1, {"k": 0.25}]},
    "c": {"type": "array", "items": True},
    "d": {"type": "string", "enum": [], "default": "x"},
    "e": {"type": "string", "examples": [], "title": 5, "description": None, "nullable": "yes"},
    "f": {"oneOf": [{"type": "string", "enum": ["p"], "default": "p", "description": "same"},
                    {"type": "integer", "description": "same"}], "description": "same"},
    "g": {"oneOf": [], "description": "empty oneOf", "default": None},
    "h": {"type": "object"},
    "i": {"type": "object", "properties": {"deep": {"type": "object", "description": "deeper",
                                                    "properties": {"z": {"type": "string", "default": "zz"}}}}},
    "j": {"type": ["integer", 5, "boolean"], "nullable": True},
    "k": {"oneOf": [{"oneOf": [{"type": "string"}, {"type": "number"}]}, {"type": "boolean", "nullable": True}]},
    "l": {"type": "string", "enum": ["only"], "default": "only"},
    "m": {"anyOf": [{"type": "string"}], "allOf": [], "$ref": "#/x"},
}}
ONEOF_TOP = {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "description": "first", "default": "x"},
                       {"type": "string", "nullable": True}, {"type": "null", "nullable": True}]}
FLOAT_DEFAULTS = {"type": "object", "properties": {
    f"f{i}": {"type": "number", "default": v} for i, v in enumerate([
        0.1, 0.3, 1e16, 1e15, 123456789.125, 1.5e-7, 1e-5, 2.5e-5, 1e-6, 0.0001, 100.0, -2.5, 1e-300,
        1.2345678901234567e-300, 5e-324, 2.2250738585072014e-308, 4.35e-310, 0.000123, 3.141592653589793,
        2.718281828459045e-100, 1.23456789e-45, 1.8446744073709552e19 / 2, 123456789012345.67, -7.5e-9,
        1e17 / 3])}}
# Floats from 2**64 up: an integer literal parses to the same f64 here but stays an int in Python.
HUGE_DEFAULTS = {"type": "object", "properties": {
    f"h{i}": {"type": "number", "default": v} for i, v in enumerate([1e300, 9.999999999999999e22, 6.02214076e23])}}
FLOAT_MAX = {"type": "object", "properties": {"big": {"type": "number", "default": 1.7976931348623157e308}}}
LONG = " ".join(f"word{i}" for i in range(3000))
UNICODE = "Grüße, 世界! 😀👍🏽 مرحبا שלום नमस्ते e\u0301 \u200bzero\u00a0nbsp\u3000ideo \r\n\ttab ﬁ Ⅻ ½ 𝔸 \ufeffbom"
SPECIALS = "<|start|>assistant<|channel|>final<|message|>hi<|end|><|return|><|call|><|constrain|>json<|endoftext|><|startoftext|><|reserved_200014|><|endofprompt|><|untrusted|>"


def fcall(call_id, name="get_weather", arguments="{\"city\": \"Paris\"}", **kw):
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, **kw}


def fout(call_id, output="{\"temp\": 21}", **kw):
    return {"type": "function_call_output", "call_id": call_id, "output": output, **kw}


USER = {"role": "user", "content": "Q"}

CASES = [
    # --- plain text and instructions
    ("text_input", req(input="What is 2+2?")),
    ("empty_text", req(input="")),
    ("instructions", req(instructions="Be brief.", input="Hi")),
    ("empty_instructions", req(instructions="", input="Hi")),
    ("instructions_multiline", req(instructions="Rule one.\n\nRule two.  \n- a\n- b\n", input="Hi")),
    ("null_instructions", req(instructions=None, input="Hi")),
    ("no_model", {"input": "Hi"}),
    ("input_empty_list", req(input=[])),
    ("instructions_empty_list", req(instructions="Only this.", input=[])),
    ("stream", req(input="Hi", stream=True)),
    ("store_false", req(input="Hi", store=False)),
    ("sampling_fields", req(input="Hi", temperature=0.2, top_p=0.9, max_output_tokens=100, metadata={"k": "v"},
                            user="u1", truncation="auto", parallel_tool_calls=False, stop=["x"], top_k=5)),
    ("chat_template_kwargs_ignored", req(input="Hi", chat_template_kwargs={"enable_thinking": False, "x": 1})),
    ("include_ok", req(input="Hi", include=["reasoning.encrypted_content", "file_search_call.results"])),
    ("text_empty", req(input="Hi", text={})),
    ("text_verbosity", req(input="Hi", text={"verbosity": "low"})),
    ("text_format_null", req(input="Hi", text={"format": None})),
    ("error_text_format_empty", req(input="Hi", text={"format": {}})),
    ("error_text_not_dict", req(input="Hi", text="plain")),
    ("include_null", req(input="Hi", include=None)),
    ("tools_empty", req(input="Hi", tools=[])),
    ("tool_choice_empty_dict", req(input="Hi", tool_choice={})),
    ("tool_choice_custom_undeclared_type", req(tools=[FN], tool_choice={"type": "allowed_tools", "name": "get_weather"}, input="x")),
    ("error_tool_choice_custom", req(tools=[{"type": "custom", "name": "raw"}], tool_choice={"type": "custom", "name": "raw"}, input="x")),
    ("error_tool_choice_required_custom", req(tools=[{"type": "custom", "name": "raw"}], tool_choice="required", input="x")),
    ("stream_null", req(input="Hi", stream=None, store=None)),
    ("error_store_null_background", req(input="Hi", background=True, store=None)),
    ("error_strict_null", req(tools=[{**FN, "strict": None}], input="x")),
    ("error_model_int", req(input="Hi", model=5)),
    ("previous_response_id_null", req(input="Hi", previous_response_id=None)),
    ("text_format_text", req(input="Hi", text={"format": {"type": "text"}})),
    # --- message items
    ("message_items", req(input=[
        {"type": "message", "role": "user", "id": "msg_1", "status": "completed",
         "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": " there"}]},
        {"type": "message", "role": "assistant", "id": "msg_2",
         "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]},
        {"role": "user", "content": "Next"}])),
    ("message_no_type", req(input=[{"role": "user", "content": "hi"}])),
    ("text_part_type", req(input=[{"role": "user", "content": [{"type": "text", "text": "plain text part"}]}])),
    ("adjacent_parts", req(input=[{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                               {"type": "input_text", "text": "b"},
                                                               {"type": "input_text", "text": "c d"}]}])),
    ("dropped_parts", req(input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"}, {"type": "input_text", "text": "What is this?"},
        {"type": "input_file", "file_id": "f1"}, {"type": "refusal", "refusal": "no"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, {"type": "input_text", "text": "!"}]}])),
    ("image_only", req(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}])),
    ("empty_content_list", req(input=[{"role": "user", "content": []}, {"role": "user", "content": "after"}])),
    ("empty_content_dict", req(input=[{"role": "user", "content": {}}, {"role": "user", "content": "after"}])),
    ("part_without_text", req(input=[{"role": "user", "content": [{"type": "input_text"}, {"type": "input_text", "text": "x"}]}])),
    ("part_without_type", req(input=[{"role": "user", "content": [{"text": "ignored"}, {"type": "input_text", "text": "kept"}]}])),
    ("developer_text", req(instructions="Sys.", input=[{"role": "developer", "content": "Dev rules."}, USER])),
    ("developer_parts", req(input=[USER, {"role": "developer", "content": [
        {"type": "input_text", "text": "A"}, {"type": "input_text", "text": "B"}]}, {"role": "user", "content": "Q2"}])),
    ("system_text", req(input=[{"role": "system", "content": "Be nice."}, USER])),
    ("system_parts", req(input=[{"role": "system", "content": [
        {"type": "input_image", "image_url": "https://x"}, {"type": "input_text", "text": "S1"},
        {"type": "input_text", "text": "S2"}]}, USER])),
    ("system_empty_list", req(input=[{"role": "system", "content": []}, USER])),
    ("system_and_instructions", req(instructions="I.", input=[
        USER, {"role": "system", "content": "S2"}, {"role": "user", "content": "Q2"}])),
    ("assistant_final", req(input=[USER, {"role": "assistant", "content": "Answer.", "phase": "final_answer"},
                                   {"role": "user", "content": "More?"}])),
    ("assistant_commentary", req(input=[USER, {"role": "assistant", "content": [
        {"type": "output_text", "text": "Let me think."}], "phase": "commentary"}, {"role": "user", "content": "Go on"}])),
    ("assistant_phase_null", req(input=[USER, {"role": "assistant", "content": "A.", "phase": None}, USER])),
    ("assistant_phase_other", req(input=[USER, {"role": "assistant", "content": "A.", "phase": "weird"}, USER])),
    ("user_phase_ignored", req(input=[{"role": "user", "content": "Q", "phase": "final_answer"}])),
    ("trailing_assistant", req(input=[USER, {"role": "assistant", "content": "Partial"}])),
    ("multi_turn", req(instructions="You are a tutor.", input=[
        x for i in range(8) for x in ({"role": "user", "content": f"Question {i}: why {i}?"},
                                      {"role": "assistant", "content": f"Because {i}.", "phase": "final_answer"})]
        + [{"role": "user", "content": "Last one."}])),
    ("multi_turn_no_phase", req(input=[
        x for i in range(5) for x in ({"role": "user", "content": f"U{i}"}, {"role": "assistant", "content": f"A{i}"})])),
    ("id_dropped", req(input=[{"role": "user", "id": "msg_9", "content": "with id"},
                              {"type": "message", "role": "assistant", "id": "x", "status": "completed",
                               "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}]}])),
    # --- errors in items (SGLang refuses)
    ("error_role_tool", req(input=[{"role": "tool", "content": "x"}])),
    ("error_role_unknown", req(input=[{"role": "critic", "content": "x"}])),
    ("error_role_missing", req(input=[{"content": "x"}])),
    ("error_role_int", req(input=[{"role": 1, "content": "x"}])),
    ("error_content_missing", req(input=[{"role": "user"}])),
    ("error_content_int", req(input=[{"role": "user", "content": 5}])),
    ("error_content_null", req(input=[{"role": "user", "content": None}])),
    ("error_content_dict", req(input=[{"role": "user", "content": {"type": "input_text", "text": "x"}}])),
    ("error_part_text_int", req(input=[{"role": "user", "content": [{"type": "input_text", "text": 5}]}])),
    ("error_part_text_null", req(input=[{"role": "user", "content": [{"type": "input_text", "text": None}]}])),
    ("error_part_not_dict", req(input=[{"role": "user", "content": ["hello"]}])),
    ("error_unknown_item", req(input=[USER, {"type": "item_reference", "id": "x"}])),
    ("error_type_null", req(input=[{"type": None, "role": "user", "content": "x"}])),
    ("error_item_not_dict", req(input=["hello"])),
    ("error_input_missing", req()),
    ("error_input_int", req(input=5)),
    ("error_instructions_int", req(instructions=5, input="Hi")),
    ("error_web_search_call_item", req(input=[USER, {"type": "web_search_call", "id": "ws", "status": "completed"}])),
    # --- function tools
    ("fn_tool", req(tools=[FN], input="Weather in Paris?")),
    ("fn_tool_instructions", req(instructions="Use tools.", tools=[FN, FN2], input="Find docs on X")),
    ("fn_tool_no_params", req(tools=[{"type": "function", "name": "ping", "description": "Ping."}], input="ping")),
    ("fn_tool_empty_params", req(tools=[{"type": "function", "name": "noop", "description": "", "parameters": {}}], input="x")),
    ("fn_tool_null_params", req(tools=[{"type": "function", "name": "noop", "description": "d", "parameters": None}], input="x")),
    ("fn_tool_desc_lines", req(tools=[{"type": "function", "name": "f", "description": "line1\r\nline2\n\nline4\n",
                                       "parameters": {"type": "object", "properties": {}}}], input="x")),
    ("fn_tool_complex", req(tools=[{"type": "function", "name": "configure", "description": "Configure.",
                                    "parameters": COMPLEX_SCHEMA, "strict": True}], input="Configure it")),
    ("fn_tool_schema_edges", req(tools=[{"type": "function", "name": "edges", "description": "E.", "parameters": SCHEMA_EDGES}], input="x")),
    ("fn_tool_params_not_object_type", req(tools=[{"type": "function", "name": "s", "description": "S.", "parameters": {"type": "string"}}], input="x")),
    ("fn_tool_oneof_top", req(tools=[{"type": "function", "name": "pick", "description": "Pick.", "parameters": ONEOF_TOP}], input="x")),
    ("fn_tool_float_defaults", req(tools=[{"type": "function", "name": "nums", "description": "N.", "parameters": FLOAT_DEFAULTS}], input="x")),
    ("guard_float_default_max", req(tools=[{"type": "function", "name": "f", "description": "d", "parameters": FLOAT_MAX}], input="x")),
    ("guard_float_default_huge", req(tools=[{"type": "function", "name": "h", "description": "H.", "parameters": HUGE_DEFAULTS}], input="x")),
    ("guard_negative_zero_default", req(tools=[{"type": "function", "name": "z", "description": "Z.",
                                                "parameters": {"type": "number", "oneOf": [{"default": -0.0}]}}], input="x")),
    ("fn_tool_unicode", req(tools=[{"type": "function", "name": "überprüfen", "description": "Prüft 世界 😀",
                                    "parameters": {"type": "object", "properties": {"名前": {"type": "string", "description": "名前 です"}}}}], input="x")),
    ("fn_tool_special_spellings", req(tools=[{"type": "function", "name": "f<|channel|>", "description": "<|end|> desc <|start|>",
                                              "parameters": {"type": "object", "properties": {"<|message|>": {"type": "string"}}}}],
                                      input="x")),
    ("fn_tool_extra_fields", req(tools=[{**FN, "strict": "true", "defer_loading": True, "x_extra": 1}], input="x")),
    ("other_tools_dropped", req(tools=[
        {"type": "file_search", "vector_store_ids": ["v"]}, {"type": "mcp", "server_label": "x"},
        {"type": "custom", "name": "raw", "description": "Raw input"}, {"type": "image_generation"},
        {"type": "computer_use_preview"}, {"type": "local_shell"}, {"type": "namespace", "name": "ns", "tools": [FN]},
        {"type": "tool_search"}, FN], input="x")),
    ("only_mcp_tool", req(tools=[{"type": "mcp", "server_label": "x"}], input="x")),
    ("code_interpreter_no_server", req(tools=[{"type": "code_interpreter", "container": {"type": "auto"}}, FN], input="Compute")),
    ("error_fn_tool_no_description", req(tools=[{"type": "function", "name": "f", "parameters": {}}], input="x")),
    ("error_fn_tool_no_name", req(tools=[{"type": "function", "description": "d"}], input="x")),
    ("error_fn_tool_empty_name", req(tools=[{"type": "function", "name": "", "description": "d"}], input="x")),
    ("error_tool_type", req(tools=[{"type": "foo"}], input="x")),
    ("error_tool_params_list", req(tools=[{"type": "function", "name": "f", "description": "d", "parameters": [1]}], input="x")),
    ("error_tools_not_list", req(tools={"type": "function"}, input="x")),
    ("error_tools_null", req(tools=None, input="x")),
    ("error_shell_tool", req(tools=[{"type": "shell"}], input="x")),
    ("error_web_search", req(tools=[{"type": "web_search"}], input="x")),
    ("error_web_search_preview", req(tools=[{"type": "web_search_preview"}, FN], input="x")),
    # --- function calls
    ("function_call_round", req(tools=[FN], input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        fcall("call_1"), fout("call_1"), {"role": "user", "content": "And Rome?"}])),
    ("function_call_last", req(tools=[FN], input=[{"role": "user", "content": "Weather?"}, fcall("c1"), fout("c1")])),
    ("function_call_empty_args", req(tools=[FN], input=[USER, fcall("c1", arguments=""), fout("c1")])),
    ("function_call_null_args", req(tools=[FN], input=[USER, fcall("c1", arguments=None), fout("c1")])),
    ("function_call_no_args", req(tools=[FN], input=[USER, {"type": "function_call", "call_id": "c1", "name": "get_weather"}])),
    ("function_call_dict_args", req(tools=[FN], input=[USER, fcall("c1", arguments={
        "city": "Zürich \"q\" \n\t\x01\x7f\u2028", "n": 3,
        "f": [0.1, 1e16, 1.5e-7, 2.5e-5, 1e-5, 1e-6, 100.0, -0.5, 1e-4, 1.8e19, 12345.678],
        "b": True, "z": None, "o": {"k": []}, "big": 18446744073709551615, "neg": -9223372036854775808}), fout("c1")])),
    ("function_call_output_parts", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=[
        {"type": "input_text", "text": "part1 "}, {"type": "output_text", "text": "part2"}, "junk", {"type": "input_image"},
        {"text": "part3"}])])),
    ("function_call_output_missing", req(tools=[FN], input=[USER, fcall("c1"), {"type": "function_call_output", "call_id": "c1"}])),
    ("function_call_output_empty", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output="")])),
    ("function_call_output_empty_list", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=[])])),
    ("parallel_calls", req(tools=[FN, FN2], input=[USER, fcall("a"), fcall("b", name="search_docs", arguments="{\"query\":\"x\"}"),
                                                   fout("b", output="hits"), fout("a", output="sunny")])),
    ("duplicate_call_ids", req(tools=[FN, FN2], input=[USER, fcall("a"), fcall("a", name="search_docs"), fout("a")])),
    ("null_call_ids", req(tools=[FN], input=[USER, fcall(None), fout(None)])),
    ("numeric_call_ids", req(tools=[FN], input=[USER, fcall(1), fout(1.0)])),
    ("call_without_tools", req(input=[USER, fcall("c1", name="unknown_fn"), fout("c1")])),
    ("custom_tool_call", req(input=[USER, {"type": "custom_tool_call", "call_id": "k1", "name": "raw",
                                           "input": "print(\"héllo\")\n<|end|>"},
                                    {"type": "custom_tool_call_output", "call_id": "k1", "output": "héllo"}])),
    ("custom_tool_call_no_input", req(input=[USER, {"type": "custom_tool_call", "call_id": "k1", "name": "raw"},
                                             {"type": "custom_tool_call_output", "call_id": "k1", "output": "ok"}])),
    ("custom_input_number", req(input=[USER, {"type": "custom_tool_call", "call_id": "k", "name": "raw", "input": {"a": [1.5, 2]}}])),
    ("custom_output_for_function_call", req(tools=[FN], input=[USER, fcall("c1"),
                                                               {"type": "custom_tool_call_output", "call_id": "c1", "output": "x"}])),
    ("function_call_special_name", req(input=[USER, fcall("c1", name="a<|call|>b", arguments="<|return|>"), fout("c1", output="<|start|>")])),
    ("error_output_unknown_call", req(tools=[FN], input=[USER, fout("nope")])),
    ("error_output_before_call", req(tools=[FN], input=[USER, fout("c1"), fcall("c1")])),
    ("error_output_null", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=None)])),
    ("error_output_int", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=5)])),
    ("error_output_dict", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output={"text": "x"})])),
    ("error_output_part_text_int", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=[{"text": 5}])])),
    ("error_call_no_name", req(input=[USER, {"type": "function_call", "call_id": "c1", "arguments": "{}"}])),
    ("error_output_no_call_id", req(tools=[FN], input=[USER, fcall("c1"), {"type": "function_call_output", "output": "x"}])),
    ("error_call_args_list", req(input=[USER, fcall("c1", arguments=[1])])),
    ("error_call_args_int", req(input=[USER, fcall("c1", arguments=7)])),
    ("guard_call_args_big_int", req(input=[USER, fcall("c1", arguments={"n": 18446744073709551616})])),
    ("guard_call_args_huge_float", req(input=[USER, fcall("c1", arguments={"x": 1e22})])),
    ("guard_call_args_negative_zero", req(input=[USER, fcall("c1", arguments={"x": -0.0})])),
    ("guard_custom_input_huge", req(input=[USER, {"type": "custom_tool_call", "call_id": "k", "name": "raw", "input": 1e30}])),
    ("guard_call_name_int", req(input=[USER, fcall("c1", name=7)])),
    # --- reasoning items
    ("reasoning_summary", req(input=[USER, {"type": "reasoning", "id": "rs_1", "summary": [
        {"type": "summary_text", "text": "Thought A."}, {"type": "summary_text", "text": "Thought B."}]}, fcall("c1"), fout("c1")])),
    ("reasoning_content", req(input=[USER, {"type": "reasoning", "summary": [], "content": [
        {"type": "reasoning_text", "text": "Deep thought."}]}, {"role": "user", "content": "Q2"}])),
    ("reasoning_both", req(input=[USER, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "S"}],
                                         "content": [{"type": "reasoning_text", "text": "C"}]}, USER])),
    ("reasoning_empty_summary_text", req(input=[USER, {"type": "reasoning", "summary": [{"type": "summary_text", "text": ""}],
                                                       "content": [{"type": "reasoning_text", "text": "C"}]}, USER])),
    ("reasoning_nothing", req(input=[USER, {"type": "reasoning", "summary": []}, USER])),
    ("reasoning_non_prefixed_encrypted", req(input=[USER, {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-opaque"}, USER])),
    ("reasoning_summary_string", req(input=[USER, {"type": "reasoning", "summary": "not a list", "content": [{"text": "C"}]}, USER])),
    ("reasoning_parts_mixed", req(input=[USER, {"type": "reasoning", "summary": ["x", {"type": "summary_text"}, {"text": "y"}]}, USER])),
    ("reasoning_then_final_dropped", req(input=[USER, {"type": "reasoning", "summary": [{"text": "hidden"}]},
                                                {"role": "assistant", "content": "Done.", "phase": "final_answer"}, {"role": "user", "content": "Thanks"}])),
    ("reasoning_around_finals", req(input=[USER, {"type": "reasoning", "summary": [{"text": "r1"}]},
                                           {"role": "assistant", "content": "F1", "phase": "final_answer"}, USER,
                                           {"type": "reasoning", "summary": [{"text": "r2"}]},
                                           {"role": "assistant", "content": "F2", "phase": "final_answer"}])),
    ("reasoning_last_not_final", req(input=[USER, {"type": "reasoning", "summary": [{"text": "r1"}]},
                                            {"role": "assistant", "content": "F1", "phase": "final_answer"}, USER,
                                            {"type": "reasoning", "summary": [{"text": "r2"}]}, fcall("c1"), fout("c1")])),
    ("reasoning_last_commentary", req(input=[USER, {"type": "reasoning", "summary": [{"text": "r1"}]},
                                             {"role": "assistant", "content": "C1", "phase": "commentary"}])),
    ("reasoning_final_no_phase_last", req(input=[USER, {"type": "reasoning", "summary": [{"text": "r1"}]},
                                                 {"role": "assistant", "content": "F", "phase": "final_answer"}, USER,
                                                 {"role": "assistant", "content": "no phase"}])),
    ("reasoning_multiline", req(input=[USER, {"type": "reasoning", "summary": [{"text": "a\nb"}, {"text": "c"}, {"text": ""}]}, USER])),
    ("guard_reasoning_encrypted", req(input=[USER, {"type": "reasoning", "summary": [],
                                                    "encrypted_content": "sglang-reasoning-v1.eJzLSM3JyVcozy_KSQEAGgQEXQ=="}, USER])),
    ("error_reasoning_summary_int", req(input=[USER, {"type": "reasoning", "summary": 5}, USER])),
    ("error_reasoning_text_int", req(input=[USER, {"type": "reasoning", "summary": [{"text": 5}]}, USER])),
    # --- reasoning effort
    *[(f"effort_{e}", req(reasoning={"effort": e}, input="Hi"))
      for e in ("none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max")],
    ("effort_default", req(reasoning={}, input="Hi")),
    ("effort_null", req(reasoning={"effort": None}, input="Hi")),
    ("reasoning_null", req(reasoning=None, input="Hi")),
    ("effort_with_summary", req(reasoning={"effort": "high", "summary": "auto"}, input="Hi")),
    ("effort_alias_key", req(reasoning={"reasoning_effort": "low"}, input="Hi")),
    ("effort_high_tools", req(reasoning={"effort": "high"}, instructions="I.", tools=[FN], input="Hi")),
    ("error_effort_bad", req(reasoning={"effort": "huge"}, input="Hi")),
    ("error_summary_bad", req(reasoning={"summary": "long"}, input="Hi")),
    ("error_reasoning_not_dict", req(reasoning="high", input="Hi")),
    # --- tool_choice
    ("tool_choice_auto", req(tools=[FN], tool_choice="auto", input="x")),
    ("tool_choice_builtin_dict", req(tools=[FN], tool_choice={"type": "web_search"}, input="x")),
    ("tool_choice_function_no_name", req(tools=[FN], tool_choice={"type": "function"}, input="x")),
    ("tool_choice_mcp", req(tools=[FN], tool_choice={"type": "mcp", "server_label": "x"}, input="x")),
    ("error_tool_choice_none", req(tools=[FN], tool_choice="none", input="x")),
    ("error_tool_choice_required", req(tools=[FN], tool_choice="required", input="x")),
    ("error_tool_choice_required_no_tools", req(tool_choice="required", input="x")),
    ("error_tool_choice_named", req(tools=[FN], tool_choice={"type": "function", "name": "get_weather"}, input="x")),
    ("error_tool_choice_nested_name", req(tools=[FN], tool_choice={"type": "function", "function": {"name": "get_weather"}}, input="x")),
    ("error_tool_choice_undeclared", req(tools=[FN], tool_choice={"type": "function", "name": "zzz"}, input="x")),
    ("error_tool_choice_bad", req(tools=[FN], tool_choice="any", input="x")),
    # --- other request checks
    ("error_previous_response_id", req(previous_response_id="resp_123", input="Hi")),
    ("error_background", req(background=True, input="Hi")),
    ("error_logprobs", req(include=["message.output_text.logprobs"], input="Hi")),
    ("error_include_bad", req(include=["nope"], input="Hi")),
    ("error_json_object", req(text={"format": {"type": "json_object"}}, input="Hi")),
    ("error_json_schema", req(text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}, input="Hi")),
    # --- special-token spellings, unicode, long prompts
    ("special_spellings_user", req(input=SPECIALS)),
    ("special_spellings_everywhere", req(instructions=SPECIALS, input=[
        {"role": "system", "content": SPECIALS}, {"role": "user", "content": [{"type": "input_text", "text": SPECIALS}]},
        {"type": "reasoning", "summary": [{"text": SPECIALS}]}, {"role": "assistant", "content": SPECIALS, "phase": "commentary"}])),
    ("partial_special_spellings", req(input="<|start <|end| |message|> <|constrain|x <||> <|>")),
    ("unicode", req(instructions=UNICODE, input=[{"role": "user", "content": UNICODE},
                                                 {"role": "assistant", "content": UNICODE, "phase": "final_answer"},
                                                 {"role": "user", "content": [{"type": "input_text", "text": UNICODE}]}])),
    ("whitespace_runs", req(input="  leading\n\n\n   middle \t\t trailing   \n", instructions="\n\n")),
    ("numbers", req(input="1234567890 3.14159 1,000,000 -42 0x1F 1e10 ٣٤٥ ⅷ")),
    ("long_input", req(instructions="Summarize.", input=LONG)),
    ("long_instructions", req(instructions=LONG, input="Go")),
    ("long_tool_output", req(tools=[FN], input=[USER, fcall("c1"), fout("c1", output=LONG)])),
    ("long_many_items", req(input=[{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "lorem ipsum " * 20}
                                   for i in range(60)])),
]


def random_cases(n, seed=20250115):
    """Random well-formed conversations built from the shapes above."""
    import random
    r = random.Random(seed)
    alphabet = [" ", "\n", "\n\n", "the", " quick", "Fox", "'s", "123", "4567", "中文", "😀", "é", "e\u0301",
                "<|start|>", "<|end|>", "<|message|>", "{", "}", "\"", ":", "\t", "  ", "ÄÖÜ", "—", "...", "\r\n"]

    def text():
        return "".join(r.choice(alphabet) for _ in range(r.randrange(0, 12)))

    def parts():
        kinds = ["input_text", "output_text", "text", "input_image"]
        return [{"type": r.choice(kinds), "text": text()} for _ in range(r.randrange(0, 4))]

    out = []
    for i in range(n):
        body = req()
        if r.random() < 0.5:
            body["instructions"] = text()
        tools = [t for t in (FN, FN2, {"type": "function", "name": "cfg", "description": text(),
                                       "parameters": COMPLEX_SCHEMA}, {"type": "mcp", "server_label": "s"})
                 if r.random() < 0.3]
        if tools:
            body["tools"] = tools
        if r.random() < 0.4:
            body["reasoning"] = {"effort": r.choice(EFFORTS)}
        if r.random() < 0.15:
            body["input"] = text()
            out.append((f"random_{i}", body))
            continue
        items, calls = [], []
        for _ in range(r.randrange(0, 9)):
            k = r.random()
            if k < 0.35:
                role = r.choice(["user", "user", "assistant", "system", "developer"])
                item = {"role": role, "content": text() if r.random() < 0.5 else parts()}
                if role == "assistant" and r.random() < 0.6:
                    item["phase"] = r.choice(["final_answer", "commentary"])
                if r.random() < 0.3:
                    item["type"] = "message"
                items.append(item)
            elif k < 0.5:
                field = r.choice(["summary", "content"])
                items.append({"type": "reasoning", field: [{"type": "summary_text", "text": text()}
                                                          for _ in range(r.randrange(0, 3))]})
            elif k < 0.75:
                cid = f"call_{len(calls)}"
                calls.append(cid)
                if r.random() < 0.2:
                    items.append({"type": "custom_tool_call", "call_id": cid, "name": "raw", "input": text()})
                else:
                    items.append(fcall(cid, name=r.choice(["get_weather", "search_docs", "x.y"]),
                                       arguments=r.choice([text(), {"q": text(), "n": r.randrange(100)}])))
            elif calls:
                items.append(fout(r.choice(calls), output=r.choice([text(), [{"type": "input_text", "text": text()}]])))
        body["input"] = items
        out.append((f"random_{i}", body))
    return out


EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"]
CASES += random_cases(80)

# Dates: the count must follow the date SGLang stamps (local `datetime.now()`).
DATED = [
    ("date_leap_day", "2024-02-29", req(input="Hi")),
    ("date_1999", "1999-12-31", req(input="Hi")),
    ("date_2100", "2100-12-31", req(instructions="x", tools=[FN], input="Hi")),
]

# Serving settings other than the default.
SET_CASES = [
    ("store", "guard_previous_response_id", req(previous_response_id="resp_123", input="Hi")),
    ("store", "error_previous_response_id_bad_prefix", req(previous_response_id="abc", input="Hi")),
    ("store", "background_with_store", req(background=True, input="Hi")),
    ("store", "error_background_without_store", req(background=True, store=False, input="Hi")),
    ("store", "text_input_store", req(input="Hi")),
    ("tools", "guard_tool_server_text", req(input="Hi")),
    ("tools", "guard_tool_server_code_interpreter", req(tools=[{"type": "code_interpreter"}], input="Compute")),
    ("tools", "guard_tool_server_web_search", req(tools=[{"type": "web_search"}], input="Search")),
    ("tools_pd", "tool_server_pd_text", req(input="Hi")),
    ("tools_pd", "tool_server_pd_fn", req(tools=[FN], instructions="I.", input="Hi")),
    ("tools_pd", "error_tool_server_pd_code_interpreter", req(tools=[{"type": "code_interpreter"}], input="Compute")),
    ("tools_pd", "error_tool_server_pd_web_search", req(tools=[{"type": "web_search_preview"}], input="Search")),
    ("tools_none", "tool_server_without_builtins_text", req(input="Hi")),
    ("tools_none", "tool_server_without_builtins_code_interpreter", req(tools=[{"type": "code_interpreter"}, FN], input="Compute")),
    ("tools_none", "error_tool_server_without_builtins_web_search", req(tools=[{"type": "web_search"}], input="Search")),
]


def main():
    tok = get_tokenizer(FIXTURE)
    servings = {name: make_serving(tok, name) for name in SETTINGS}
    rows = [(n, "default", None, b) for n, b in CASES]
    rows += [(n, "default", d, b) for n, d, b in DATED]
    rows += [(n, s, None, b) for s, n, b in SET_CASES]
    names = [r[0] for r in rows]
    assert len(names) == len(set(names)), "duplicate case names"
    out = []
    counts = {"tokens": 0, "error": 0, "guard": 0}
    for name, setting, date, body in rows:
        DATE[0] = _dt.datetime.strptime(date, "%Y-%m-%d").replace(hour=12) if date else _dt.datetime(2025, 1, 15, 12)
        res = run(servings[setting], body)
        entry = {"name": name, "setting": setting, "date": date or "2025-01-15", "body": body}
        if name.startswith("guard_"):
            entry["expect"] = "guard_refuses"
            entry["sglang"] = res
            counts["guard"] += 1
        elif "error" in res:
            assert name.startswith("error_"), f"{name}: SGLang refused: {res['error']}"
            entry["expect"] = "sglang_refuses"
            entry["sglang_error"] = res["error"]
            counts["error"] += 1
        else:
            assert not name.startswith("error_"), f"{name}: SGLang served it: {res}"
            entry["expect"] = {"tokens": res["tokens"], "ids_fnv": res["ids_fnv"]}
            counts["tokens"] += 1
        out.append(entry)
    with open(os.path.join(HERE, "harmony_expected.json"), "w") as f:
        json.dump({"settings": SETTINGS, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases: {counts}")


if __name__ == "__main__":
    main()
