"""Expected values for the /v1/responses, /v1/messages and Ollama conversions,
produced by running SGLang 0.5.23's own Python code.

Developer machine only; CI never runs Python. Writes:

* crates/count/src/testdata/chat_api_expected.json: for each case and each
  (supports_inline_system, template content format) setting, the arguments
  SGLang passes to `apply_chat_template` (messages, tools, template kwargs) or
  the fact that it refuses the request. No tokenizer is involved.
* tests/data/chat_api_counts.json: prompt lengths (`len(input_ids)`) for the
  same APIs on the tokenizer fixtures in ../shared/tokenizers. On the gpt-oss
  fixture `/v1/responses` takes SGLang's harmony path (`use_harmony`), run
  exactly as ../encoder/testdata/gen_harmony.py runs it (imported from there:
  its serving at the "default" setting, its o200k vocabulary rebuilt from the
  fixture via TIKTOKEN_ENCODINGS_BASE, its conversation date 2025-01-15).

How: the sglang 0.5.23 wheel is unpacked (`pip download sglang==0.5.23
--no-deps && unzip`) and put on sys.path as $SGLANG_SRC; GPU-only imports
(torch, triton, ...) are stubbed. The handlers are SGLang's classes
(`OpenAIServingChat`, `OpenAIServingResponses`, `AnthropicServing`) built
without their constructors, with the attributes a default server sets (no
--chat-template, --tool-call-parser, --reasoning-parser, text-only model).
Requests go through SGLang's own validation models and methods:
`ResponsesRequest` + `create_responses`, `AnthropicMessagesRequest` +
`_convert_to_chat_completion_request` + `_validate_request` +
`_convert_to_internal_request`, `OllamaChatRequest` + `apply_chat_template`.
`_render_and_encode_chat_template` is wrapped to record its arguments.
Tokenizers load as SGLang loads them under transformers 5.19 (the same
replica the chat goldens were checked with; it reproduces all 540 of them).
strftime_now is pinned to 2025-01-15 12:00:00, as in the goldens.

Requires Python 3.11 with: pydantic==2.14.4 transformers==5.19.0
tokenizers==0.23.2 jinja2==3.1.6 orjson==3.13.0 msgspec==0.23.0
fastapi==0.165.0 jsonschema==4.26.0 openai==2.8.0 openai-harmony==0.0.4
numpy pillow psutil pybase64 pyzmq requests aiohttp partial-json-parser.

    SGLANG_SRC=/tmp/sgl3 python crates/count/src/testdata/gen_chat_api.py
"""
import asyncio
import copy
import json
import logging
import os
import sys
import warnings
from collections import OrderedDict
from types import SimpleNamespace as NS

logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))

sys.path.insert(0, HERE)
from sglang_env import FIXED_NOW, get_tokenizer, template_of  # noqa: E402,F401

# gpt-oss /v1/responses: SGLang's harmony path as gen_harmony.py sets it up. Imported
# before the patches below (it sets TIKTOKEN_ENCODINGS_BASE and pins harmony's date
# on import; the get_serving/get_model patches below then apply to every handler).
sys.path.insert(0, os.path.join(HERE, "..", "encoder", "testdata"))
import gen_harmony  # noqa: E402

import sglang.srt.entrypoints.anthropic.serving as an  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as sc  # noqa: E402
import sglang.srt.entrypoints.openai.serving_responses as sr  # noqa: E402
from sglang.srt.entrypoints.anthropic.protocol import AnthropicMessagesRequest  # noqa: E402
from sglang.srt.entrypoints.ollama.protocol import OllamaChatRequest  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ResponsesRequest  # noqa: E402
from sglang.srt.parser.jinja_template_utils import detect_jinja_template_content_format  # noqa: E402
from sglang.srt.parser.template_detection import detect_inline_system_support  # noqa: E402


class _Bag(NS):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None


SERVING = _Bag(default_chat_template_kwargs=None, trust_request_chat_template=False,
               allow_auto_truncate=False, enable_response_store=False, hf_chat_template_name=None)
MODEL = _Bag(context_length=None, revision=None)
for _m in (sc, sr, an):
    if hasattr(_m, "get_serving"):
        _m.get_serving = lambda: SERVING
    if hasattr(_m, "get_model"):
        _m.get_model = lambda: MODEL

RECORD = []
_orig_render = sc.OpenAIServingChat._render_and_encode_chat_template


def _recording_render(self, messages, *, tools, template_kwargs, encode_kwargs, use_cache,
                      add_generation_prompt=True):
    RECORD.append({"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools),
                   "extra": copy.deepcopy(template_kwargs)})
    if getattr(self.tokenizer_manager.tokenizer, "fake", False):
        if not messages:
            # What transformers' apply_chat_template raises first, before rendering.
            raise ValueError("Cannot apply chat template to an empty conversation.")
        return [], None
    return _orig_render(self, messages, tools=tools, template_kwargs=template_kwargs,
                        encode_kwargs=encode_kwargs, use_cache=use_cache,
                        add_generation_prompt=add_generation_prompt)


sc.OpenAIServingChat._render_and_encode_chat_template = _recording_render


def _serving(cls, tm, tmpl, inline):
    s = object.__new__(cls)
    s.tokenizer_manager, s.template_manager = tm, tmpl
    s.allowed_custom_labels = None
    s.tool_call_parser = None
    s.reasoning_parser = None
    s.default_chat_template_kwargs = {}
    s._reasoning_detector = None
    s.default_sampling_params = {}
    s.is_gpt_oss = tm.model_config.hf_config.model_type == "gpt_oss"
    s.is_gemma4 = s.is_minimax_m3 = False
    s.chat_encoding_spec = None
    s.supports_inline_system = inline
    s._encoding_adapter = None
    s._response_parser = None
    try:
        s._tokenizer_auto_adds_specials = len(tm.tokenizer.encode("")) > 0
    except Exception:
        s._tokenizer_auto_adds_specials = True
    s._prompt_text_round_trip_is_lossy = False
    s._template_reads_reasoning_content = False
    s._chat_template_cache = OrderedDict()
    return s


class Env:
    """One model (a tokenizer, or none) with SGLang's serving objects."""

    def __init__(self, tokenizer, template, inline, content_format, model_type="qwen3"):
        if tokenizer is None:
            tokenizer = NS(chat_template=template, encode=lambda s, **k: [], bos_token_id=None, fake=True)
        else:
            tokenizer.chat_template = template
        self.tokenizer = tokenizer
        tm = NS(tokenizer=tokenizer, processor=None, served_model_name="m",
                model_config=NS(hf_config=NS(model_type=model_type, architectures=["X"]),
                                is_multimodal=False, context_len=1 << 22),
                server_args=None, model_path="m", num_reserved_tokens=0,
                config_value=lambda k: None, lora_registry=None)
        tmpl = NS(chat_template_name=None, jinja_template_content_format=content_format,
                  reasoning_config=None, python_chat_template=None,
                  jinja_template_may_reorder_tool_results=False)
        self.chat = _serving(sc.OpenAIServingChat, tm, tmpl, inline)
        r = self.resp = _serving(sr.OpenAIServingResponses, tm, tmpl, inline)
        r.enable_prompt_tokens_details = False
        r.supports_browsing = r.supports_code_interpreter = False
        r.tool_server = None
        r._translates_tools = False
        r.use_harmony = model_type == "gpt_oss"
        r.response_store, r.msg_store, r.background_tasks = {}, {}, {}
        r.enable_response_store = False
        r.is_disaggregated = True
        r.response_store_lock = asyncio.Lock()
        self.anth = an.AnthropicServing(self.chat)

    def _done(self, ids):
        out = {"tokens": None if getattr(self.tokenizer, "fake", False) else len(ids)}
        if RECORD:
            out["inputs"] = RECORD[-1]
        return out

    def anthropic(self, body):
        RECORD.clear()
        try:
            req = AnthropicMessagesRequest.model_validate(copy.deepcopy(body))
            chat_request = self.anth._convert_to_chat_completion_request(req)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        err = self.chat._validate_request(chat_request)
        if err:
            return {"error": err}
        try:
            adapted, _ = self.chat._convert_to_internal_request(chat_request, None)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        return self._done(adapted.input_ids)

    def responses(self, body):
        RECORD.clear()
        try:
            req = ResponsesRequest.model_validate(copy.deepcopy(body))
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        captured = {}

        class Captured(Exception):
            pass

        def capture(**kw):
            captured.update(kw)
            raise Captured()

        orig = sr.GenerateReqInput
        sr.GenerateReqInput = capture
        try:
            res = asyncio.run(self.resp.create_responses(req, None))
        except Captured:
            res = None
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        finally:
            sr.GenerateReqInput = orig
        if "input_ids" in captured:
            return self._done(captured["input_ids"])
        body = getattr(res, "body", None)
        return {"error": body.decode() if body else repr(res)}

    def ollama_chat(self, body):
        try:
            req = OllamaChatRequest.model_validate(copy.deepcopy(body))
            messages = [{"role": m.role, "content": m.content} for m in req.messages]
            ids = self.tokenizer.apply_chat_template(messages, tokenize=True,
                                                     add_generation_prompt=True, return_dict=False)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        return {"tokens": len(ids)}

    def ollama_generate(self, body):
        prompt = body["prompt"]
        if body.get("system"):
            prompt = f"{body['system']}\n\n{prompt}"
        if not prompt.strip():
            return {"tokens": 0}
        return {"tokens": len(self.tokenizer(prompt)["input_ids"])}


# --- the cases -------------------------------------------------------------------
# `guard` marks requests the guard refuses although SGLang serves them (the
# prompt depends on something outside the body): the test then expects a refusal.

FN_TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}

RESPONSES = [
    ("text_input", {"model": "m", "input": "What is 2+2?"}),
    ("instructions", {"model": "m", "instructions": "Be brief.", "input": "Hi"}),
    ("empty_instructions", {"model": "m", "instructions": "", "input": "Hi"}),
    ("message_items", {"model": "m", "input": [
        {"type": "message", "role": "user", "id": "msg_1", "status": "completed",
         "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "there"}]},
        {"type": "message", "role": "assistant", "id": "msg_2",
         "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]},
        {"role": "user", "content": "Next"}]}),
    ("developer_text", {"model": "m", "instructions": "Sys.", "input": [
        {"role": "developer", "content": "Dev rules."}, {"role": "user", "content": "Q"}]}),
    ("developer_parts", {"model": "m", "input": [
        {"role": "user", "content": "Q1"},
        {"role": "developer", "content": [{"type": "input_text", "text": "A"}, {"type": "input_text", "text": "B"}]},
        {"role": "user", "content": "Q2"}]}),
    ("systems_midway", {"model": "m", "instructions": "I.", "input": [
        {"role": "user", "content": "Q1"}, {"role": "system", "content": "S2"},
        {"role": "system", "content": [{"type": "input_text", "text": "S3"}]},
        {"role": "user", "content": "Q2"}]}),
    ("function_call_round", {"model": "m", "tools": [FN_TOOL], "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp\": 21}"},
        {"role": "user", "content": "And London?"}]}),
    ("function_call_args", {"model": "m", "input": [
        {"role": "user", "content": "Go"},
        {"type": "function_call", "id": "fc_1", "name": "a", "arguments": "{not json"},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": {"x": [1, 2.5, "é"]}},
        {"type": "function_call", "call_id": "c3", "name": "c", "arguments": ""},
        {"type": "function_call", "call_id": "c4", "name": "d", "arguments": "[1]"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "part1"}, {"type": "input_text", "text": "part2"}]},
        {"role": "user", "content": "Done?"}]}),
    ("custom_tool", {"model": "m",
                     "tools": [{"type": "custom", "name": "run_sql", "description": "Runs SQL",
                                "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"x\""}},
                               {"type": "custom", "name": "free"}],
                     "input": [
                         {"role": "user", "content": "Query"},
                         {"type": "custom_tool_call", "call_id": "ct1", "name": "run_sql", "input": "SELECT 1"},
                         {"type": "custom_tool_call_output", "call_id": "ct1", "output": "1"},
                         {"role": "user", "content": "ok"}]}),
    ("reasoning_items", {"model": "m", "input": [
        {"role": "user", "content": "Think"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "step one"},
                                                        {"type": "summary_text", "text": "step two"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Answer"}]},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "from content"}]},
        {"type": "reasoning", "summary": []},
        {"role": "user", "content": "More"}]}),
    ("assistant_phases", {"model": "m", "input": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "a1", "phase": "commentary"},
        {"role": "assistant", "content": "a2", "phase": "commentary"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a3"}], "phase": "final_answer"},
        {"role": "assistant", "content": "a4", "phase": "final_answer"},
        {"role": "user", "content": "Q2"}]}),
    ("trailing_assistant", {"model": "m", "input": [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": "partial"}]}),
    ("tools_auto", {"model": "m", "tools": [FN_TOOL, {"type": "function", "name": "noop", "strict": True}],
                    "input": "Weather?"}),
    ("tools_named", {"model": "m", "tools": [FN_TOOL, {"type": "function", "name": "noop"}],
                     "tool_choice": {"type": "function", "name": "noop"}, "input": "Go"}),
    ("tools_none", {"model": "m", "tools": [FN_TOOL], "tool_choice": "none", "input": "Go"}),
    ("tools_required", {"model": "m", "tools": [FN_TOOL], "tool_choice": "required", "input": "Go"}),
    ("tool_choice_other_type", {"model": "m", "tools": [FN_TOOL], "tool_choice": {"type": "file_search"},
                                "input": "Go"}),
    ("tool_schema_not_normalized", {"model": "m", "input": "Go", "tools": [
        {"type": "function", "name": "q", "parameters": {"type": "object", "properties": {"a": {"type": "varchar(10)"}}}}]}),
    ("reasoning_none", {"model": "m", "reasoning": {"effort": "none"}, "input": "Hi"}),
    ("reasoning_default_medium", {"model": "m", "reasoning": {}, "input": "Hi"}),
    ("reasoning_high_kwargs", {"model": "m", "reasoning": {"effort": "high"},
                               "chat_template_kwargs": {"enable_thinking": False, "x": 1}, "input": "Hi"}),
    ("kwargs_reasoning_effort_kept", {"model": "m", "reasoning": {"effort": "low"},
                                      "chat_template_kwargs": {"reasoning_effort": None, "y": 2}, "input": "Hi"}),
    ("reasoning_none_overridden", {"model": "m", "reasoning": {"effort": "none"},
                                   "chat_template_kwargs": {"thinking": True}, "input": "Hi"}),
    ("error_required_without_function", {"model": "m", "tool_choice": "required", "input": "Go"}),
    ("error_named_undeclared", {"model": "m", "tools": [FN_TOOL],
                                "tool_choice": {"type": "function", "name": "nope"}, "input": "Go"}),
    ("error_item_reference", {"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
    ("error_no_model", {"input": "Hi"}),
    ("error_empty_input", {"model": "m", "input": []}),
    ("error_only_empty_reasoning", {"model": "m", "input": [{"type": "reasoning", "summary": []}]}),
    ("error_image", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/x.png"}]}]}),
    ("error_unknown_part", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "f"}]}]}),
    ("guard_previous_response_id", {"model": "m", "previous_response_id": "resp_123", "input": "Hi"}),
    ("guard_builtin_tool", {"model": "m", "tools": [{"type": "web_search"}], "input": "Search"}),
    ("guard_mcp_tool", {"model": "m", "tools": [FN_TOOL, {"type": "mcp", "server_label": "x"}], "input": "Go"}),
    ("guard_encrypted_reasoning", {"model": "m", "input": [
        {"role": "user", "content": "Q"},
        {"type": "reasoning", "summary": [],
         "encrypted_content": "sglang-reasoning-v1.eJzLSM3JyVcozy_KSQEAGgQEXQ=="},
        {"role": "user", "content": "Q2"}]}),
    ("guard_client_template", {"model": "m", "chat_template_kwargs": {"chat_template": "{{ 'x' }}"},
                               "input": "Hi"}),
]

ANTHROPIC = [
    ("user_text", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}),
    ("system_string", {"model": "m", "max_tokens": 16, "system": "  Be brief.  ",
                       "messages": [{"role": "user", "content": "Hello"}]}),
    ("system_blank", {"model": "m", "max_tokens": 16, "system": " \n ",
                      "messages": [{"role": "user", "content": "Hello"}]}),
    ("system_blocks", {"model": "m", "max_tokens": 16,
                       "system": [{"type": "text", "text": "One."}, {"type": "text", "text": ""},
                                  {"type": "text", "text": "Two."}],
                       "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}),
    ("system_messages", {"model": "m", "max_tokens": 16, "system": "Top.", "messages": [
        {"role": "user", "content": "Q1"},
        {"role": "system", "content": "  Mid one. "},
        {"role": "system", "content": [{"type": "text", "text": " a "}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "Q2"}]}),
    ("tool_round", {"model": "m", "max_tokens": 16,
                    "tools": [{"name": "get_weather", "description": "Weather",
                               "input_schema": {"properties": {"city": {"type": "string"}}}}],
                    "messages": [
                        {"role": "user", "content": "Weather?"},
                        {"role": "assistant", "content": [
                            {"type": "text", "text": "Let me check."},
                            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                        {"role": "user", "content": [
                            {"type": "text", "text": "before"},
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21C"},
                            {"type": "text", "text": "after"}]}]}),
    ("tool_result_blocks", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "r1"},
            {"type": "tool_reference", "tool_name": "g"},
            {"type": "tool_reference", "name": "h"},
            {"type": "search_result", "title": "T", "source": "https://s", "content": [{"type": "text", "text": "c"}]},
            {"type": "text", "text": "r2"}]}]},
        {"role": "user", "content": [{"type": "tool_result", "id": "t9", "content": []}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t10"}]},
        {"role": "user", "content": "next"}]}),
    ("assistant_tool_result", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
        {"role": "user", "content": "Q2"}]}),
    ("search_result_block", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "search_result", "title": "Doc", "source": {"url": "https://d"},
         "content": [{"type": "text", "text": "alpha"}, {"type": "text", "text": "beta"}]},
        {"type": "text", "text": "Summarize."}]}]}),
    ("empty_turns", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": []},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "z", "content": "only"}]},
        {"role": "user", "content": "Q2"}]}),
    ("tools_and_choice", {"model": "m", "max_tokens": 16,
                          "tools": [{"type": "custom", "name": "a", "input_schema": {"type": "object"}, "strict": True},
                                    {"type": "web_search_20250305", "name": "web_search"},
                                    {"name": "b", "description": None, "defer_loading": True,
                                     "input_schema": {"type": "object", "properties": {"n": {"type": "int"}}}}],
                          "tool_choice": {"type": "tool", "name": "b"},
                          "messages": [{"role": "user", "content": "Go"}]}),
    ("tool_choice_any", {"model": "m", "max_tokens": 16,
                         "tools": [{"name": "a", "input_schema": {}}], "tool_choice": {"type": "any"},
                         "messages": [{"role": "user", "content": "Go"}]}),
    ("tool_choice_none", {"model": "m", "max_tokens": 16,
                          "tools": [{"name": "a", "input_schema": {}}], "tool_choice": {"type": "none"},
                          "messages": [{"role": "user", "content": "Go"}]}),
    ("tool_choice_auto_no_tools", {"model": "m", "max_tokens": 16, "tool_choice": {"type": "auto"},
                                   "tools": [{"type": "bash_20250124", "name": "bash"}],
                                   "messages": [{"role": "user", "content": "Go"}]}),
    ("thinking_disabled", {"model": "m", "max_tokens": 16, "thinking": {"type": "disabled"},
                           "messages": [{"role": "user", "content": "Hi"}]}),
    ("effort_xhigh", {"model": "m", "max_tokens": 16, "output_config": {"effort": "xhigh"},
                      "messages": [{"role": "user", "content": "Hi"}]}),
    ("effort_low", {"model": "m", "max_tokens": 16, "output_config": {"effort": "low"},
                    "messages": [{"role": "user", "content": "Hi"}]}),
    ("empty_thinking_history", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": "s"},
                                          {"type": "text", "text": "A"}]},
        {"role": "user", "content": "Q2"}]}),
    ("image_without_source", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
        {"type": "text", "text": "What?"}]}]}),
    ("user_tool_use_dropped", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "tool_use", "id": "u1", "name": "f", "input": {"a": 1}}]}]}),
    ("trailing_assistant", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": "Sure,"}]}),
    ("only_tool_result", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "x", "content": "r"}]}]}),
    ("error_thinking_enabled", {"model": "m", "max_tokens": 16, "thinking": {"type": "enabled", "budget_tokens": 2048},
                                "messages": [{"role": "user", "content": "Hi"}]}),
    ("error_thinking_adaptive", {"model": "m", "max_tokens": 16, "thinking": {"type": "adaptive"},
                                 "messages": [{"role": "user", "content": "Hi"}]}),
    ("error_redacted_thinking", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xx"}, {"type": "text", "text": "A"}]},
        {"role": "user", "content": "Q2"}]}),
    ("error_tool_choice_unknown", {"model": "m", "max_tokens": 16, "tools": [{"name": "a", "input_schema": {}}],
                                   "tool_choice": {"type": "tool", "name": "zzz"},
                                   "messages": [{"role": "user", "content": "Go"}]}),
    ("error_any_only_server_tools", {"model": "m", "max_tokens": 16,
                                     "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                                     "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "Go"}]}),
    ("error_no_messages", {"model": "m", "max_tokens": 16, "messages": []}),
    ("error_bad_role", {"model": "m", "max_tokens": 16, "messages": [{"role": "tool", "content": "x"}]}),
    ("error_image", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "text", "text": "What?"}]}]}),
    ("error_image_in_tool_result", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}]}),
    ("guard_thinking_history", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                          {"type": "text", "text": "A"}]},
        {"role": "user", "content": "Q2"}]}),
    ("guard_empty_tool_use_id", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "", "content": "r"}]}]}),
]

SETTINGS = [(True, "string"), (False, "string"), (True, "openai"), (False, "openai")]


def conversion_cases():
    out = []
    for api, cases in (("responses", RESPONSES), ("anthropic", ANTHROPIC)):
        for name, body in cases:
            entry = {"name": name, "api": api, "body": body, "settings": []}
            for inline, fmt in SETTINGS:
                env = Env(None, None, inline, fmt)
                res = env.responses(body) if api == "responses" else env.anthropic(body)
                setting = {"inline_system": inline, "format": fmt}
                if name.startswith("guard_"):
                    setting["expect"] = "guard_refuses"
                elif "error" in res:
                    setting["expect"] = "sglang_refuses"
                    setting["sglang_error"] = res["error"][:300]
                else:
                    setting["expect"] = res["inputs"]
                entry["settings"].append(setting)
            out.append(entry)
    return out


# --- counts on the tokenizer fixtures -------------------------------------------

LONG = " ".join(f"word{i}" for i in range(3000))
COUNT_REQUESTS = {
    "responses": [n for n, _ in RESPONSES if not n.startswith(("guard_", "error_"))]
    + ["long"],
    "anthropic": [n for n, _ in ANTHROPIC if not n.startswith(("guard_", "error_"))]
    + ["long"],
    "ollama_chat": ["simple", "system_first", "odd_roles", "long"],
    "ollama_generate": ["plain", "with_system", "blank"],
}
EXTRA = {
    ("responses", "long"): {"model": "m", "instructions": "Summarize.", "input": LONG},
    ("anthropic", "long"): {"model": "m", "max_tokens": 8, "system": "Summarize.",
                            "messages": [{"role": "user", "content": LONG}]},
    ("ollama_chat", "simple"): {"model": "m", "messages": [{"role": "user", "content": "Why is the sky blue?"}]},
    ("ollama_chat", "system_first"): {"model": "m", "stream": False, "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]},
    ("ollama_chat", "odd_roles"): {"model": "m", "messages": [
        {"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}]},
    ("ollama_chat", "long"): {"model": "m", "messages": [{"role": "user", "content": LONG}]},
    ("ollama_generate", "plain"): {"model": "m", "prompt": "Once upon a time"},
    ("ollama_generate", "with_system"): {"model": "m", "prompt": "Tell a joke", "system": "Be funny."},
    ("ollama_generate", "blank"): {"model": "m", "prompt": "  "},
}


def fixture_counts():
    base = os.path.join(SHARED, "tokenizers")
    by_name = {"responses": dict(RESPONSES), "anthropic": dict(ANTHROPIC)}
    requests = {}
    for api, names in COUNT_REQUESTS.items():
        for name in names:
            requests[f"{api}/{name}"] = EXTRA.get((api, name)) or by_name[api][name]
    fixtures = {}
    for fx in sorted(os.listdir(base)):
        d = os.path.join(base, fx)
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            continue
        template = template_of(d)
        if template is None:
            # The DeepSeek-V3.2/V4 stand-ins: SGLang encodes them with its own
            # encoders, not a template (crates/count/src/encoder/).
            continue
        tok = get_tokenizer(d)
        inline = detect_inline_system_support(template)
        fmt = detect_jinja_template_content_format(template)
        model_type = "gpt_oss" if fx == "gpt-oss" else "other"
        env = Env(tok, template, inline, fmt, model_type)
        # gpt-oss: /v1/responses is rendered by openai-harmony, not the template. No
        # request here is one the guard refuses on purpose (those are gen_harmony.py's
        # `guard_` cases): each is served with `len(input_ids)` or refused by SGLang.
        harmony = gen_harmony.make_serving(tok, "default") if model_type == "gpt_oss" else None
        counts = {}
        for key, body in requests.items():
            api = key.split("/")[0]
            if api == "responses" and harmony is not None:
                res = gen_harmony.run(harmony, body)
            else:
                res = getattr(env, api)(body)
            if "error" in res:
                counts[key] = "sglang_refuses"
            else:
                counts[key] = res["tokens"]
        fixtures[fx] = {"supports_inline_system": inline, "content_format": fmt, "counts": counts}
    return {"requests": requests, "fixtures": fixtures}


if __name__ == "__main__":
    conv = conversion_cases()
    with open(os.path.join(HERE, "chat_api_expected.json"), "w") as f:
        json.dump(conv, f, ensure_ascii=False, indent=1)
        f.write("\n")
    counts = fixture_counts()
    os.makedirs(os.path.join(CRATE, "tests", "data"), exist_ok=True)
    with open(os.path.join(CRATE, "tests", "data", "chat_api_counts.json"), "w") as f:
        json.dump(counts, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(conv)} conversion cases, {sum(len(v['counts']) for v in counts['fixtures'].values())} counts")
