"""Expected prompts of SGLang's own DeepSeek-V4.1 encoder (`encoding_dsv41.py`,
0.5.21 - 0.5.22; 0.5.23 uses deepseek-recipe) under each release, for
crates/count/src/encoder/dsv41_sglang.rs (checked by dsv41_sglang_tests.rs).

Developer machine only; CI never runs Python. As gen_dsv4_releases.py (whose
probes it reuses), with `--tool-call-parser deepseekv41 --reasoning-parser
deepseek-v41`, model type `deepseek_v41`, and servers with
`SGLANG_DSV41_REASONING_EFFORT` set (a value SGLang refuses at boot is
recorded as `load_error`). Run with 0.5.21 (transformers 5.12.1) and 0.5.22
(5.19.0):

    SGLANG_SRC=/work/wheels/src/0.5.21 /work/venvs/tf-5.12.1/bin/python \
        crates/count/src/encoder/testdata/gen_dsv41_releases.py

Each run adds the release to ./dsv41_sglang_expected.json (in the compact
form of compact_expected.py); besides what
gen_dsv4_releases.py records, `glue.tools_wire` holds each request tool as
`model_dump(exclude_unset=True)` gives it (what the guard's request dump
holds), from which the release builds `dsv41_tool_payload`s.
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
OUT = os.path.join(HERE, "dsv41_sglang_expected.json")
FIXTURE = os.path.join(SHARED, "tokenizers", "deepseek-v4")

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
from sglang_env import get_tokenizer  # noqa: E402

import compact_expected  # noqa: E402  (beside this file)

import orjson  # noqa: E402
import sglang  # noqa: E402
import sglang.srt.entrypoints.openai.protocol as protocol  # noqa: E402
import sglang.srt.entrypoints.openai.serving_base as serving_base  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
from sglang.srt.entrypoints.openai import encoding_dsv41  # noqa: E402
import gen_dsv4_releases as v4  # noqa: E402
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
_orig_encode = encoding_dsv41.encode_messages


def _recording_encode(messages, thinking_mode, **kwargs):
    rec = {"messages": copy.deepcopy(messages), "thinking_mode": str(getattr(thinking_mode, "value", thinking_mode)),
           "kwargs": copy.deepcopy(kwargs)}
    RECORD["encoder"] = rec
    try:
        out = _orig_encode(messages, thinking_mode=thinking_mode, **kwargs)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}"
        raise
    rec["output"], rec["images"] = out[0], len(out[1]["images"])
    return out


encoding_dsv41.encode_messages = _recording_encode
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
        "tools_wire": [t.model_dump(exclude_unset=True) for t in request.tools] if request.tools else None,
    }
    return _orig_apply(self, request, tools, *args, **kwargs)


serving_chat.OpenAIServingChat._apply_jinja_template = _recording_apply

# --- the server -------------------------------------------------------------------


PROFILE_OVERRIDE = {}


def serving_for(server_info, profile=None):
    config = {"dsv4_reasoning_effort_profile": profile} if profile else {}
    hf = NS(model_type="deepseek_v41", architectures=["DeepseekV4ForCausalLM"], to_dict=lambda: dict(config))
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


PROBES = v4.PROBES + [
    ("image_part", {"messages": [U([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}])]}),
    ("system_mid", {"messages": [S("s"), U("q"), A("a"), S("new rules")], **v4.THINK}),
    ("system_mid_chat", {"messages": [U("q"), A("a"), S("new rules")]}),
    ("system_last_task", {"messages": [U("q"), S("s2")], "task": "query"}),
    ("placeholder_text", {"messages": [U("a <｜deepseek_image｜> b")]}),
    ("placeholder_part", {"messages": [U([{"type": "text", "text": "<｜deepseek_image｜>"}])]}),
    ("assistant_parts_history", {"messages": [U("q"), A([{"type": "text", "text": "a1"}, {"type": "text", "text": "a2"}]), U("q2")]}),
    ("tool_parts_mixed", {"messages": [U("q"), A(None, tool_calls=[v4.CALL("calc", "{}")]),
                                       T([{"type": "text", "text": "p1"}, {"type": "text", "text": "p2"}])]}),
    ("user_parts_then_tool", {"messages": [U("q"), A(None, tool_calls=[v4.CALL("calc", "{}")]), T("r"),
                                           U([{"type": "text", "text": "u1"}, {"type": "text", "text": "u2"}])], **v4.THINK}),
    ("ctk_effort_float", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 0.295}}),
    ("ctk_effort_float_one", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 1.0}}),
    ("ctk_effort_zero", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 0}}),
    ("ctk_effort_100", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": 100}}),
    ("ctk_effort_bool", {"messages": [U("q")], "chat_template_kwargs": {"thinking": True, "reasoning_effort": True}}),
    ("tools_unset_fields", {"messages": [U("q")], "tools": [{"type": "function", "function": {
        "parameters": {"type": "object", "properties": {"a": {"type": "string", "default": None}}}, "description": None,
        "name": "f", "strict": False}}]}),
]
SERVER_PROBES = v4.SERVER_PROBES | {"ctk_effort_float", "ctk_effort_100"}
NUMBER_PROBES = v4.NUMBER_PROBES
SERVERS = [
    ("", {}, None),
    ("+env_max", {"SGLANG_DSV41_REASONING_EFFORT": "max"}, None),
    ("+env_35", {"SGLANG_DSV41_REASONING_EFFORT": " 35 "}, None),
    ("+env_low", {"SGLANG_DSV41_REASONING_EFFORT": " low"}, None),
    ("+env_bogus", {"SGLANG_DSV41_REASONING_EFFORT": "bogus"}, None),
    ("+env_101", {"SGLANG_DSV41_REASONING_EFFORT": "101"}, None),
    ("+default_thinking", {"SGLANG_DEFAULT_THINKING": "1"}, None),
]


def main():
    profiles = json.load(open(os.path.join(SHARED, "goldens", "profiles", "PROFILES.json")))["profiles"]
    goldens = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    goldens = [g for g in goldens if g["endpoint"] == "chat"]
    server_info = {"tool_call_parser": "deepseekv41", "reasoning_parser": "deepseek-v41"}
    cases = []
    for suffix, env, profile in SERVERS:
        if profile and release_tuple(VERSION) < (0, 5, 18):
            continue
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            try:
                serving = serving_for(server_info, profile)
            except Exception as e:  # the server does not start
                cases.append({"name": "server" + suffix, "server": {"env": env, "profile": profile},
                              "load_error": f"{type(e).__name__}: {e}"})
                continue
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
