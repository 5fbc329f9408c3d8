"""Expected values for crates/count/src/encoder/glm53.rs (SGLang 0.5.23's GLM-5.3 and
GLM-5.3-Flash Python chat templates), produced by running SGLang's own code.

Developer machine only; CI never runs Python. Run from the crate root:

    SGLANG_SRC=/path/to/unpacked/sglang-0.5.23-wheel \
        python crates/count/src/encoder/testdata/gen_glm53.py

(here: SGLANG_SRC=/work/ref/sg /work/ref/venv/bin/python ...)

(Python 3.11 and the packages listed in crates/count/src/testdata/sglang_env.py.)
Writes crates/count/src/encoder/testdata/glm53_expected.json. Its render cases are
`{"name", "variant", "messages", "tools", "add_generation_prompt", "kwargs",
"expect"}`, both variants for every input, where `expect` is one of

* `{"segments": [...]}`: `render_chat_segments` returned these strings;
  SGLang encodes them with `encode_prompt_segments`;
* `{"text": "..."}`: `render_chat_segments` returned None and the installed
  `tokenizer.apply_chat_template(..., tokenize=False)` rendered this with the
  Python template; SGLang encodes it with `parallel_prompt_encode`;
* `{"jinja": true}`: that call went to the original Jinja implementation
  (`chat_template`, `continue_final_message`, `return_assistant_tokens_mask`);
* `{"error": {"type", "message"}}`: the request fails with that exception;
* `{"refuse": true, "python": ...}`: Python's result is recorded, but the Rust
  port refuses the input on purpose (see glm53.rs: batched conversations,
  `repr()` of code points unassigned in Unicode 14.0).

Inputs are what `OpenAIServingChat._render_and_encode_chat_template` receives
(messages after SGLang's preprocessing, `tool.model_dump()` tools, template
kwargs). Each is run through SGLang's real `_render_and_encode_chat_template`
on a real `OpenAIServingChat` whose `TemplateManager` loaded the Python
template (`--chat-template glm-5.3` / `glm-5.3-flash`), wrapped in the retry
that `_apply_jinja_template` applies around it (copied below: it is inline code
there). `encode_prompt_segments` / `parallel_prompt_encode` and the Jinja
implementation are replaced by recorders; no tokenizer is involved.

Render cases: `pipeline/...` are what SGLang's whole chat path
(`ChatCompletionRequest.model_validate`, `_validate_request`,
`_convert_to_internal_request`, with the glm-5.3 profile's server settings)
passes to `_render_and_encode_chat_template` for the requests in PIPELINE; the
others are hand-written inputs (CASES) and 150 seeded random ones (`fuzz/...`),
fed to `_render_and_encode_chat_template` directly.

Golden cross-check: every chat case of
$PREFILL_GUARD_SHARED/goldens/profiles/glm-5.3.jsonl (default ../shared next to
the crate) also goes through that whole path, and its rendered prompt is
compared with `rendered_sha256_sglang` (the count is printed). Nothing from
../shared is written into the repo: with GLM53_GOLDEN_OUT=/some/file.json the
golden cases (same format) are written there instead, for a local run of the
Rust check outside CI.

Resolve cases (`"resolve"`): synthetic checkpoint templates and architecture
lists through `resolve_python_chat_template`, `may_replace_jinja_template` and
`template_detection.is_glm53_template`.

The file is `{"render": [...], "resolve": [...]}`. Deterministic: the same
SGLang gives the same file.
"""
import copy
import hashlib
import json
import os
import sys
from types import SimpleNamespace as NS

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))

sys.path.insert(0, os.path.join(CRATE, "src", "count", "testdata"))
import sglang_env  # noqa: E402

# The template manager imports the tokenizer manager for a type hint only.
sys.modules.setdefault(
    "sglang.srt.managers.tokenizer_manager",
    sglang_env.Mod("sglang.srt.managers.tokenizer_manager"),
)
import sglang.srt.entrypoints.openai.serving_chat as sc  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402
from sglang.srt.parser.template_manager import TemplateManager  # noqa: E402


class _Bag(NS):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None


SERVING = _Bag(default_chat_template_kwargs=None, trust_request_chat_template=False,
               allow_auto_truncate=False, enable_response_store=False, hf_chat_template_name=None)
sc.get_serving = lambda: SERVING
if hasattr(sc, "get_model"):
    sc.get_model = lambda: _Bag(context_length=None, revision=None)

# Walks the tool-call grammar, which the xgrammar stub makes a MagicMock that
# never ends; the grammar does not reach the prompt.
sc.strip_structural_tag_excludes = lambda *a, **k: None

JINJA = "\x00jinja\x00"
REC = []


def _jinja_apply_chat_template(conversation, **kwargs):
    """The tokenizer's original (Jinja) apply_chat_template: recorded, not run."""
    REC.append(("jinja",))
    return JINJA


sc.encode_prompt_segments = lambda tok, segments, kw=None: (REC.append(("segments", list(segments))), [])[1]
sc.parallel_prompt_encode = lambda tok, text, kw=None: (REC.append(("text", text)), [])[1]

_orig_render = sc.OpenAIServingChat._render_and_encode_chat_template


def _recording_render(self, messages, **kw):
    REC.append(("args", copy.deepcopy(messages), copy.deepcopy(kw)))
    return _orig_render(self, messages, **kw)


sc.OpenAIServingChat._render_and_encode_chat_template = _recording_render


def make_chat(template_name):
    """An OpenAIServingChat as `--chat-template <name> --reasoning-parser glm45
    --tool-call-parser glm47` builds it, on a GLM-5.3 architecture."""
    fixture = os.path.join(SHARED, "tokenizers", "glm-4.5", "chat_template.jinja")
    # Only the Jinja recorder below sees it; any text does.
    jinja_source = open(fixture).read() if os.path.exists(fixture) else "{{ messages }}"
    tok = NS(chat_template=jinja_source,
             special_tokens_map={"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
             encode=lambda s, **k: [], decode=lambda ids, **k: "", bos_token_id=None,
             apply_chat_template=_jinja_apply_chat_template)
    arch = "GlmMoeDsaForCausalLM" if template_name == "glm-5.3" else "Glm5NextForConditionalGeneration"
    cfg = {"tool_call_parser": "glm47", "reasoning_parser": "glm45"}
    tm = NS(tokenizer=tok, processor=None, served_model_name="m",
            model_config=NS(hf_config=NS(model_type="glm_moe_dsa", architectures=[arch]),
                            is_multimodal=False, context_len=1 << 22,
                            get_default_sampling_params=lambda: {}),
            server_args=None, model_path="m", num_reserved_tokens=0,
            config_value=lambda k: cfg.get(k), lora_registry=None)
    tmpl = TemplateManager()
    tmpl.load_chat_template(tm, template_name, "m")
    assert tmpl.python_chat_template.name == template_name
    return sc.OpenAIServingChat(tm, tmpl)


CHATS = {name: make_chat(name) for name in ("glm-5.3", "glm-5.3-flash")}


def _outcome():
    for r in REC:
        if r[0] == "jinja":
            return {"jinja": True}
    for r in reversed(REC):
        if r[0] == "segments":
            return {"segments": r[1]}
        if r[0] == "text":
            return {"text": r[1]}
    raise AssertionError("nothing rendered")


def run(variant, messages, tools, add_generation_prompt, kwargs):
    """`_apply_jinja_template`'s two attempts around `_render_and_encode_chat_template`."""
    chat = CHATS[variant]
    REC.clear()
    messages = copy.deepcopy(messages)
    tools = copy.deepcopy(tools)
    kwargs = copy.deepcopy(kwargs)
    call = dict(template_kwargs=kwargs, encode_kwargs={}, use_cache=False,
                add_generation_prompt=add_generation_prompt)
    try:
        try:
            chat._render_and_encode_chat_template(messages, tools=tools, **call)
        except Exception:
            # Verbatim from _apply_jinja_template.
            tools = (
                [t["function"] if "function" in t else t for t in tools]
                if tools
                else None
            )
            REC.clear()
            try:
                chat._render_and_encode_chat_template(messages, tools=tools, **call)
            except sc._CHAT_TEMPLATE_CLIENT_ERRORS as template_error:
                raise ValueError(str(template_error)) from template_error
    except Exception as e:
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    return _outcome()


# --- the golden cross-check --------------------------------------------------------

def golden_cases():
    path = os.path.join(SHARED, "goldens", "profiles", "glm-5.3.jsonl")
    if not os.path.exists(path):
        print("no goldens at", path, "- cross-check skipped", file=sys.stderr)
        return [], 0, 0
    gold = [json.loads(line) for line in open(path)]
    chat = CHATS["glm-5.3"]
    cases, hashes, matched = [], 0, 0
    for g in gold:
        body = json.load(open(os.path.join(SHARED, "goldens", "cases", g["case"] + ".json")))["request"]
        REC.clear()
        try:
            req = ChatCompletionRequest.model_validate(copy.deepcopy(body))
            if not chat._validate_request(req):
                chat._convert_to_internal_request(req, None)
        except Exception as e:
            print("golden case", g["case"], "raised", type(e).__name__, e, file=sys.stderr)
        args = [r for r in REC if r[0] == "args"]
        want = g.get("rendered_sha256_sglang")
        if want is None:
            continue
        hashes += 1
        out = _outcome()
        text = "".join(out["segments"]) if "segments" in out else out.get("text", "")
        if hashlib.sha256(text.encode()).hexdigest() == want:
            matched += 1
        else:
            print("golden mismatch:", g["case"], file=sys.stderr)
        messages, kw = args[0][1], args[0][2]
        cases.append((f"golden/{g['case']}", messages, kw["tools"], kw["add_generation_prompt"],
                      kw["template_kwargs"]))
    return cases, hashes, matched


# Requests run through SGLang's whole chat path, as the goldens are: what it
# passes to `_render_and_encode_chat_template` becomes a `pipeline/...` case.
_FN = {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
_LAZY = {"name": "lazy", "description": "Deferred", "parameters": {"type": "object"}}
PIPELINE = [
    ("tool_reference", {"messages": [
        {"role": "user", "content": "Find a tool"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "tool_search", "arguments": "{\"q\": \"lazy\"}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": [{"type": "tool_reference", "name": "lazy"}]}],
        "tools": [{"type": "function", "function": _FN},
                  {"type": "function", "function": _LAZY, "defer_loading": True},
                  {"type": "function", "function": {**_LAZY, "name": "lazy2", "strict": True}}]}),
    ("tool_results_out_of_order", {"messages": [
        {"role": "user", "content": "Two cities"},
        {"role": "assistant", "content": "", "reasoning_content": "need both", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"n\": 1.0}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "7C"}, {"type": "text", "text": "fog"}]},
        {"role": "tool", "tool_call_id": "a", "content": "18C"},
        {"role": "user", "content": "Thanks"}], "tools": [{"type": "function", "function": _FN}]}),
    ("thinking_parts_and_names", {"messages": [
        {"role": "system", "content": "S", "name": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "Q"}], "name": "u"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "dropped"}, {"type": "text", "text": "A"}],
         "reasoning_content": "kept"},
        {"role": "developer", "content": "dev"},
        {"role": "system", "content": [{"type": "text", "text": "mid"}]},
        {"role": "user", "content": "Q2"}]}),
    ("reasoning_effort_low", {"reasoning_effort": "low", "messages": [{"role": "user", "content": "Hi"}]}),
    ("reasoning_effort_float", {"reasoning_effort": 0.5, "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_effort_and_clear", {"chat_template_kwargs": {"reasoning_effort": "high", "clear_thinking": True},
                                 "messages": [{"role": "user", "content": "Q"},
                                              {"role": "assistant", "content": "A", "reasoning_content": "R"},
                                              {"role": "user", "content": "Q2"}]}),
    ("kwargs_padding", {"chat_template_kwargs": {"padding": True, "reasoning_effort": "low"},
                        "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_continue_final", {"chat_template_kwargs": {"continue_final_message": True},
                               "messages": [{"role": "user", "content": "Hi"}]}),
    ("continue_final_message", {"continue_final_message": True, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, "}]}),
    ("trailing_assistant", {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Partial"}]}),
    ("trailing_assistant_parts", {"messages": [{"role": "user", "content": "Hi"},
                                               {"role": "assistant", "content": [{"type": "text", "text": "P"}]}]}),
    ("tool_choice_named", {"tool_choice": {"type": "function", "function": {"name": "lazy"}},
                           "messages": [{"role": "user", "content": "Go"}],
                           "tools": [{"type": "function", "function": _FN}, {"type": "function", "function": _LAZY}]}),
    ("tool_choice_none", {"tool_choice": "none", "messages": [{"role": "user", "content": "Go"}],
                          "tools": [{"type": "function", "function": _FN}]}),
    ("tool_call_null_name_args", {"messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]},
        {"role": "user", "content": "again"}]}),
    ("kwargs_tokenize", {"chat_template_kwargs": {"tokenize": True},
                         "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_messages", {"chat_template_kwargs": {"messages": []},
                         "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_conversation", {"chat_template_kwargs": {"conversation": []},
                             "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_documents", {"chat_template_kwargs": {"documents": [{"title": "t", "text": "x"}]},
                          "messages": [{"role": "user", "content": "Hi"}]}),
    ("kwargs_effort_overrides", {"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"},
                                 "messages": [{"role": "user", "content": "Hi"}]}),
    ("tool_no_id", {"messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "r"}]}),
]


def pipeline_cases():
    chat = CHATS["glm-5.3"]
    cases = []
    for name, body in PIPELINE:
        body = {"model": "m", **body}
        REC.clear()
        try:
            req = ChatCompletionRequest.model_validate(copy.deepcopy(body))
            err = chat._validate_request(req)
            if not err:
                chat._convert_to_internal_request(req, None)
        except Exception as e:
            # Past the render (sampling params on the stubs) or the render's own error.
            error = f"{type(e).__name__}: {e}"
        else:
            error = None
        args = [r for r in REC if r[0] == "args"]
        if not args:
            print("pipeline case", name, "did not render:", error, file=sys.stderr)
            continue
        messages, kw = args[0][1], args[0][2]
        cases.append((f"pipeline/{name}", messages, kw["tools"], kw["add_generation_prompt"],
                      kw["template_kwargs"]))
    return cases


# --- the corpus -----------------------------------------------------------------------

def U(content):
    return {"role": "user", "content": content}


def S(content):
    return {"role": "system", "content": content}


def A(content="", **extra):
    return {"role": "assistant", "content": content, **extra}


def T(content, tool_call_id=None, **extra):
    m = {"role": "tool", "content": content, **extra}
    if tool_call_id is not None:
        m["tool_call_id"] = tool_call_id
    return m


def TC(id_, name, args):
    return {"id": id_, "index": None, "type": "function", "function": {"name": name, "arguments": args}}


def TOOL(name, description="", parameters=None, **extra):
    fn = {"name": name, "description": description}
    if parameters is not None:
        fn["parameters"] = parameters
    fn.update(extra)
    return {"type": "function", "function": fn, "defer_loading": None}


def txt(*texts):
    return [{"type": "text", "text": t} for t in texts]


WEATHER = TOOL("get_weather", "Get the current weather for a city.", {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"]})
SEARCH = TOOL("search", "Sûche \"quoted\" <tags>\n\ttab \\ back", {
    "type": "object",
    "properties": {"q": {"type": "string"},
                   "filters": {"type": "object", "properties": {
                       "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                       "range": {"type": "object", "properties": {"from": {"type": "number", "minimum": -1.5e-7},
                                                                  "to": {"type": "integer", "maximum": 9007199254740993}}},
                       "nullable": {"type": ["string", "null"], "default": None},
                       "flag": {"type": "boolean", "default": True}}}},
    "required": ["q"], "additionalProperties": False})
NOPARAMS = {"type": "function", "function": {"name": "ping"}, "defer_loading": None}
DEFERRED = TOOL("lazy", "Loaded on demand", {"type": "object"}, defer_loading=True)
STRICT = TOOL("strict_fn", "Strict", {"type": "object", "properties": {}}, strict=True)
UNICODE_TOOL = TOOL("翻译", "把文本翻译成目标语言 😀 — «ok»", {
    "type": "object", "properties": {"文本": {"type": "string", "description": "要翻译的文本\u2028"}}})

HIST = [U("What's the weather in Paris?"),
        A("", tool_calls=[TC("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})]),
        T('{"temperature": 18, "condition": "cloudy"}', "call_1")]

ARGS_ZOO = {"s": "plain", "quote": 'say "hi"\n\tnow \\ <tag>', "empty": "", "uni": "é中😀",
            "int": 1, "neg": -42, "big": 9007199254740993, "float": 1.5, "whole": 1.0, "tiny": 1e-7,
            "huge": 1e20, "negzero": -0.0, "t": True, "f": False, "null": None,
            "list": [1, "a", None, [True, {"k": "é"}]], "dict": {"nested": {"deep": ["x", 2.25]}},
            "emptyd": {}, "emptyl": []}

MEDIA_PARTS = [{"type": "image"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "video"},
               {"type": "video_url"}, {"type": "audio"}, {"type": "audio_url"}, {"type": "input_audio"}]

CASES = []


def case(name, messages, tools=None, agp=True, kwargs=None, refuse=False):
    CASES.append((name, messages, tools, agp, kwargs or {}, refuse))


# Basics.
case("user_only", [U("Hello")])
case("user_only_no_gen", [U("Hello")], agp=False)
case("system_user", [S("You are terse."), U("Hi")])
case("multi_turn", [S("Sys"), U("Q1"), A("A1"), U("Q2"), A("A2"), U("Q3")])
case("multi_turn_no_gen", [U("Q1"), A("A1"), U("Q2"), A("A2")], agp=False)
case("inline_system", [U("Q1"), S("Mid"), A("A1"), S("Late"), U("Q2")])
case("ignored_roles", [{"role": "developer", "content": "dev"}, {"role": "function", "content": "fn"},
                       {"role": "latest_reminder", "content": "r"}, {"role": "root", "content": "x"},
                       {"role": "User", "content": "cap"}, U("Q")])
case("role_missing_or_odd", [{"content": "no role"}, {"role": None, "content": "x"}, {"role": 1, "content": "y"},
                             {"role": ["user"], "content": "z"}, U("Q")])
case("non_dict_messages", [U("first"), "a string", 5, None, True, [U("nested")], {}, U("last")])
case("empty_messages", [])
case("only_assistant", [A("Hi there")], agp=False)
case("only_system", [S("S")])
case("special_spellings", [U("[gMASK]<sop><|system|><|user|><|assistant|><|observation|><think></think>"
                             "<tool_call>x<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>"
                             "<|begin_of_image|><|image|><|end_of_image|><|endoftext|>")])
case("unicode_text", [S("Système ☃"), U("中文 日本語 한국어 العربية עברית 🙂👍🏽 e\u0301 \u0000nul \u2028sep")])
case("crlf_tabs", [U("line1\r\nline2\r\n\tindented\r\n"), A("\r\n  ok \r\n"), U("\t")])
case("long_text", [U(" ".join(f"word{i}" for i in range(3000)))])
case("empty_strings", [S(""), U(""), A(""), U("")])
case("whitespace_assistant", [U("Q"), A("   \n\t "), U("Q2")])
case("unicode_whitespace_strip", [U("Q"), A("\u3000\u00a0\u0085\x1c\x1d\x1e\x1f\u2009answer\u2028\u2029\u202f\u205f\x0b\x0c"),
                                  A("\u200bzero-width\u200b"), A("\u180emongolian\ufeff"), U("Q2")])

# Content shapes.
case("text_parts", [S(txt("sys ", "parts")), U(txt("Hello", " ", "world")), A(txt("ans", "wer")), U(txt())])
case("mixed_part_items", [U(["raw ", {"type": "text", "text": "part"}, 5, None, ["x"], True, {"no": "type"}, " end"])])
case("part_text_odd", [U([{"type": "text"}, {"type": "text", "text": None}, {"type": "text", "text": 5},
                          {"type": "text", "text": 1.5}, {"type": "text", "text": True},
                          {"type": "text", "text": {"a": 1, "b": [None, False, "it's"]}},
                          {"type": "text", "text": [1, "a", 2.0]}])])
case("part_types_odd", [U([{"type": "file", "text": "f"}, {"type": None, "text": "n"}, {"text": "notype"},
                           {"type": 5, "text": "i"}, {"type": ["text"], "text": "l"},
                           {"type": "tool_reference", "name": "get_weather"},
                           {"type": "thinking", "thinking": "t"}, {"type": "TEXT", "text": "upper"},
                           {"type": "text", "text": "kept"}])])
case("media_parts_user", [U(MEDIA_PARTS + txt("What is this?"))])
case("media_parts_everywhere", [S(MEDIA_PARTS[:2]), U(MEDIA_PARTS[2:4]), A(MEDIA_PARTS[4:]), U("Q"),
                                A("", tool_calls=[TC("c1", "f", {})]), T(MEDIA_PARTS, "c1")])
case("content_scalars", [U(None), U(5), U(0), U(1.0), U(-2.5e-8), U(True), U(False), U(123456789012345678)])
case("content_missing", [{"role": "user"}, {"role": "system"}, {"role": "assistant"}, {"role": "user"}])
case("content_dict", [U({}), U({"a": "b"}), S({"k": [1, 2.5, None, True, {"n": {}}]})])
case("content_dict_quotes", [U({"q1": "it's", "q2": 'say "x"', "q3": "both ' and \"", "q4": "\\ \n\r\t\x01\x7f"})])
case("content_dict_floats", [U({"f": [1e16, 1e15, 1.5e-5, 0.0001, -0.0, 123.456, 1e-7, 2.0**70]})])
case("content_dict_nonascii", [U({"k": "é"})])
case("content_list_nonascii_repr", [U([{"type": "text", "text": ["中"]}])])
# repr() escapes what str.isprintable() rejects, by CPython's Unicode tables.
case("content_dict_unprintable", [U({"k": "\x85\xa0\xad\u200b\u2028\u3000\ue000\ufeff\U000e0001\U0010fffd 中é😀",
                                     "é'": ["\t\x7f\x1c", 'q"\'']})])
# Unassigned in Unicode 14.0: Python 3.11 escapes it, 3.12 and 3.13 (Unicode
# 15.0, 15.1) print it, so the port refuses it (py::Repr::Strict).
case("content_dict_unassigned_14", [U({"k": "\U0001fae8"})], refuse=True)
case("content_list_unassigned_14", [U([{"type": "text", "text": ["\u0378"]}])], refuse=True)

# Reasoning in history.
case("reasoning_field", [U("2+2?"), A("4", reasoning_content="Adding."), U("3+3?")])
case("reasoning_field_last", [U("2+2?"), A("4", reasoning_content="Adding.")], agp=False)
case("reasoning_in_content", [U("Q"), A("<think>hidden</think>shown"), U("Q2")])
case("reasoning_in_content_prefix", [U("Q"), A("pre <think>r</think>  after  ")])
case("reasoning_no_open_tag", [U("Q"), A("just r</think>ans")])
case("reasoning_multi_close", [U("Q"), A("a</think>b</think>c")])
case("reasoning_multi_open", [U("Q"), A("<think>x<think>y</think>z")])
case("reasoning_empty_field", [U("Q"), A("ans", reasoning_content="")])
case("reasoning_field_none", [U("Q"), A("<think>from content</think>ans", reasoning_content=None)])
case("reasoning_field_nonstr", [U("Q"), A("ans", reasoning_content=5), A("<think>c</think>d", reasoning_content=["x"])])
case("reasoning_field_wins", [U("Q"), A("<think>content</think>ans", reasoning_content="field")])
case("reasoning_parts", [U("Q"), A(txt("<think>pa", "rt</think>answer")), U("Q2")])
case("reasoning_after_last_user", [U("Q1"), A("a1", reasoning_content="r1"), U("Q2"), A("a2", reasoning_content="r2"),
                                   A("a3", reasoning_content="r3")], agp=False)
for v in [True, False, 1, 0, "yes", "", None, [], [0], {}, 0.0]:
    case(f"clear_thinking_{json.dumps(v)}",
         [U("Q1"), A("a1", reasoning_content="r1"), A("<think>r1b</think>a1b"), U("Q2"),
          A("a2", reasoning_content="r2")], kwargs={"clear_thinking": v})
case("reasoning_content_kwarg", [U("Q"), A("a"), A("b", reasoning_content="own"), U("Q2"), A("c")],
     kwargs={"reasoning_content": "K"})
case("reasoning_content_kwarg_empty", [U("Q"), A("a")], kwargs={"reasoning_content": ""})
case("reasoning_content_kwarg_none", [U("Q"), A("a")], kwargs={"reasoning_content": None})
case("reasoning_content_kwarg_int", [U("Q"), A("a")], kwargs={"reasoning_content": 5})
case("reasoning_content_kwarg_dict", [U("Q"), A("a")], kwargs={"reasoning_content": {"x": 1}})
case("reasoning_content_kwarg_cleared", [U("Q"), A("a"), U("Q2")],
     kwargs={"reasoning_content": None, "clear_thinking": True})
case("reasoning_content_kwarg_no_assistant", [U("Q")], kwargs={"reasoning_content": 5})

# Template kwargs the template reads, and some it does not.
for v in ["low", "high", "medium", "max", "none", "minimal", "LOW", "High", " low", None, 0.5, 0, True, ["low"], {"low": 1}]:
    case(f"reasoning_effort_{json.dumps(v)}", [U("Hi")], kwargs={"reasoning_effort": v})
case("kwargs_ignored", [U("Hi")], kwargs={"enable_thinking": False, "thinking": True, "eos_token": "X",
                                         "bos_token": None, "date_string": "x", "a-b": 1, "": 2})
case("kwargs_all", [U("Q"), A("a", reasoning_content="r"), U("Q2")],
     kwargs={"reasoning_effort": "high", "clear_thinking": True, "enable_thinking": True})

# Arguments of apply_chat_template as template kwargs: render_chat_segments
# declines, and apply_chat_template decides.
for key, value in [("chat_template", "{{ 'x' }}"), ("chat_template", None), ("chat_template", ""),
                   ("chat_template", 0), ("chat_template", False),
                   ("continue_final_message", True), ("continue_final_message", False),
                   ("continue_final_message", 1), ("continue_final_message", ""), ("continue_final_message", None),
                   ("continue_final_message", [0]),
                   ("return_assistant_tokens_mask", True), ("return_assistant_tokens_mask", 0),
                   ("return_assistant_tokens_mask", "x"),
                   ("tokenize", True), ("tokenize", False), ("return_dict", True), ("add_generation_prompt", False),
                   ("tools", None), ("conversation", []),
                   ("padding", True), ("truncation", True), ("max_length", 5), ("return_tensors", "pt"),
                   ("tokenizer_kwargs", {"x": 1}), ("kwargs", 1), ("self", 2),
                   ("documents", None), ("documents", []), ("documents", [{"title": "t", "text": "x"}]),
                   ("documents", [{}, {"a": 1}]), ("documents", {}), ("documents", ""),
                   ("documents", [1]), ("documents", [{"t": 1}, "x"]), ("documents", "ab"),
                   ("documents", {"a": 1}), ("documents", 5), ("documents", 1.5), ("documents", True)]:
    case(f"param_{key}_{json.dumps(value)}", [U("Hi"), A("a", reasoning_content="r")],
         kwargs={key: value, "reasoning_effort": "low"})
case("param_messages", [U("Hi")], kwargs={"messages": []})
case("param_messages_via_apply", [U("Hi")], kwargs={"messages": [], "padding": False})
case("param_messages_jinja", [U("Hi")], kwargs={"messages": [], "chat_template": "x"})
case("param_order_tokenize_tools", [U("Hi")], kwargs={"tokenize": 1, "tools": 1})
case("param_order_tools_tokenize", [U("Hi")], kwargs={"tools": 1, "tokenize": 1})
case("param_order_conversation_first", [U("Hi")], kwargs={"conversation": 1, "return_dict": 1})
case("param_order_conversation_only", [U("Hi")], kwargs={"conversation": 1, "chat_template": "x"})
case("param_order_dup_before_jinja", [U("Hi")], kwargs={"chat_template": "x", "add_generation_prompt": 1})
case("param_docs_then_messages", [U("Hi")], kwargs={"documents": [{"a": 1}], "messages": 1})
case("param_bad_docs_then_messages", [U("Hi")], kwargs={"documents": [1], "messages": 1})
case("param_empty_conversation_first", [], tools=["bad"], kwargs={"documents": 5})
case("param_tools_before_docs", [U("Hi")], tools=["bad"], kwargs={"documents": 5})
case("param_docs_with_tools", [U("Hi")], tools=[WEATHER], kwargs={"documents": [{"title": "d"}]})

# Tools in the system block.
case("tool_simple", [U("Weather?")], tools=[WEATHER])
case("tool_two", [S("Use tools."), U("Go")], tools=[WEATHER, SEARCH])
case("tool_no_params", [U("Ping")], tools=[NOPARAMS])
case("tool_unicode", [U("翻译")], tools=[UNICODE_TOOL])
case("tool_defer_strict", [U("Go")], tools=[WEATHER, DEFERRED, STRICT])
case("tool_defer_values", [U("Go")], tools=[TOOL(f"d{i}", "x", defer_loading=v) for i, v in
                                            enumerate([None, False, True, 0, 1, "", "yes", [], [0]])])
case("tool_empty_list", [U("Go")], tools=[])
case("tool_flat", [U("Go")], tools=[{"type": "function", "name": "flat", "parameters": {"type": "object"}}])
case("tool_raw_keys", [U("Go")], tools=[{"type": "function", "function": {"name": "k", 'we"ird\\key': 1,
                                                                          "ünï": "ç", "strict": False,
                                                                          "defer_loading": None}}])
case("tool_values_escapes", [U("Go")], tools=[TOOL("esc", "nul\x00 bell\x07 del\x7f \u2028 \ud7ff end")])
case("tool_function_empty", [U("Go")], tools=[{"type": "function", "function": {}}])
case("tool_function_nested", [U("Go")], tools=[{"function": {"function": {"name": "inner"}, "name": "outer"}}])
case("tool_function_none", [U("Go")], tools=[{"type": "function", "function": None}])
case("tool_function_str", [U("Go")], tools=[{"type": "function", "function": "f"}])
case("tool_function_list", [U("Go")], tools=[{"function": [1]}])
case("tool_not_dict_str", [U("Go")], tools=["x"])
case("tool_not_dict_function_str", [U("Go")], tools=["function"])
case("tool_not_dict_list", [U("Go")], tools=[["function"]])
case("tool_not_dict_list2", [U("Go")], tools=[[1]])
case("tool_not_dict_int", [U("Go")], tools=[5])
case("tool_not_dict_none", [U("Go")], tools=[None])
case("tool_not_dict_bool", [U("Go")], tools=[WEATHER, True])
case("tool_params_numbers", [U("Go")], tools=[TOOL("n", "d", {"a": [0, -1, 2.5, 1e300, 5e-324, 1e16, 12345678901234567,
                                                               -9223372036854775808, 18446744073709551615]})])

# Assistant tool calls.
case("tool_call_dict_args", HIST + [U("And London?")], tools=[WEATHER])
case("tool_call_args_zoo", [U("Go"), A("Calling.", tool_calls=[TC("c1", "zoo", ARGS_ZOO)]), U("ok")])
case("tool_call_empty_args", [U("Go"), A("", tool_calls=[TC("c1", "noargs", {})])], agp=False)
case("tool_call_multiple", [U("Go"), A("  Two calls.  ", reasoning_content="plan",
                                       tool_calls=[TC("c1", "a", {"x": 1}), TC("c2", "b", {"y": "z"})])], agp=False)
case("tool_call_raw_key", [U("Go"), A("", tool_calls=[TC("c1", "k", {"we\"ird <k>": "v\n", "": 0})])])
case("tool_call_string_args", [U("Go"), A("", tool_calls=[TC("c1", "f", '{"a": 1}')])])
case("tool_call_list_args", [U("Go"), A("", tool_calls=[TC("c1", "f", [1])])])
case("tool_call_int_args", [U("Go"), A("", tool_calls=[TC("c1", "f", 5)])])
case("tool_call_null_args", [U("Go"), A("", tool_calls=[TC("c1", "f", None)])])
case("tool_call_missing_args", [U("Go"), A("", tool_calls=[{"id": "c1", "function": {"name": "f"}}])])
case("tool_call_flat", [U("Go"), A("", tool_calls=[{"name": "flat", "arguments": {"a": "b"}}])])
case("tool_call_function_empty", [U("Go"), A("", tool_calls=[{"function": {}, "name": "outer", "arguments": {"o": 1}}])])
case("tool_call_function_none", [U("Go"), A("", tool_calls=[{"function": None, "name": "outer", "arguments": {}}])])
case("tool_call_function_str", [U("Go"), A("", tool_calls=[{"function": "s", "name": "outer", "arguments": {}}])])
case("tool_call_name_none", [U("Go"), A("", tool_calls=[TC("c1", None, {"a": 1})])])
case("tool_call_name_int", [U("Go"), A("", tool_calls=[TC("c1", 5, {"a": 1})])])
case("tool_call_name_float", [U("Go"), A("", tool_calls=[TC("c1", 2.5, {"a": 1})])])
case("tool_call_name_list", [U("Go"), A("", tool_calls=[TC("c1", ["n"], {"a": 1})])])
case("tool_call_name_dict", [U("Go"), A("", tool_calls=[TC("c1", {"n": True}, {"a": 1})])])
case("tool_call_name_bool", [U("Go"), A("", tool_calls=[TC("c1", False, {"a": 1})])])
case("tool_call_name_missing", [U("Go"), A("", tool_calls=[{"id": "c1", "function": {"arguments": {"a": 1}}}])])
case("tool_call_name_missing_args_bad", [U("Go"), A("", tool_calls=[{"id": "c1", "function": {"arguments": "x"}}])])
case("tool_call_name_unicode", [U("Go"), A("", tool_calls=[TC("c1", "翻译", {"文本": "你好"})])])
case("tool_calls_empty", [U("Go"), A("answer", tool_calls=[]), U("Q")])
case("tool_calls_none", [U("Go"), A("answer", tool_calls=None), U("Q")])
case("tool_calls_str", [U("Go"), A("answer", tool_calls="ab")])
case("tool_calls_int", [U("Go"), A("answer", tool_calls=5)])
case("tool_calls_float", [U("Go"), A("answer", tool_calls=0.5)])
case("tool_calls_bool", [U("Go"), A("answer", tool_calls=True)])
case("tool_calls_dict", [U("Go"), A("answer", tool_calls={"k": 1})])
case("tool_calls_elem_odd", [U("Go"), A("answer", tool_calls=[None])])
case("tool_calls_elem_int", [U("Go"), A("answer", tool_calls=[3])])

# Tool results.
case("tool_result_single", HIST, tools=[WEATHER])
case("tool_result_single_no_gen", HIST, tools=[WEATHER], agp=False)
case("tool_results_reordered", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {}), TC("c", "h", {})]),
                                T("rb", "b"), T("rc", "c"), T("ra", "a"), U("next")])
case("tool_results_partial", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]), T("rb", "b")])
case("tool_results_unknown_id", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                                 T("rb", "b"), T("rx", "x")])
case("tool_results_dup_result_id", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                                    T("rb", "b"), T("rb2", "b"), T("ra", "a")])
case("tool_results_dup_call_id", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("a", "g", {})]),
                                  T("r2", "a")])
case("tool_results_missing_id", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                                 T("rb", "b"), T("r?")])
case("tool_results_call_without_id", [U("Go"), A("", tool_calls=[TC(None, "f", {}), TC("b", "g", {})]),
                                      T("rb", "b")])
case("tool_results_id_key", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                             T("rb", id="b"), T("ra", "", id="a")])
case("tool_results_call_id_key", [U("Go"), A("", tool_calls=[{"tool_call_id": "b", "id": "a", "function": {"name": "f", "arguments": {}}},
                                                              {"id": "a2", "function": {"name": "g", "arguments": {}}}]),
                                  T("ra2", "a2"), T("rb", "b")])
case("tool_results_numeric_ids", [U("Go"), A("", tool_calls=[TC(2, "f", {}), TC("1", "g", {})]),
                                  T("r1", 1), T("r2", "2")])
case("tool_results_odd_ids", [U("Go"), A("", tool_calls=[TC(True, "f", {}), TC([1], "g", {}), TC({"k": "v"}, "h", {}),
                                                          TC(1.5, "i", {})]),
                              T("rd", {"k": "v"}), T("rf", 1.5), T("rl", [1]), T("rt", True)])
case("tool_results_falsy_ids", [U("Go"), A("", tool_calls=[TC(0, "f", {}), TC("b", "g", {})]), T("r", 0), T("rb", "b")])
case("tool_results_two_blocks", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                                 T("rb", "b"), T("ra", "a"), U("more"),
                                 A("", tool_calls=[TC("c", "h", {}), TC("d", "i", {})]), T("rd", "d"), T("rc", "c")])
case("tool_results_after_text_assistant", [U("Go"), A("no calls"), T("r1", "a"), T("r2", "b")])
case("tool_results_first", [T("r0", "a"), T("r1", "b"), U("Go")])
case("tool_results_after_user", [U("Go"), T("r", "a")])
case("tool_results_after_system", [U("Go"), A("", tool_calls=[TC("a", "f", {})]), S("interjection"), T("r", "a")])
case("tool_results_assistant_calls_str", [U("Go"), {"role": "assistant", "content": "x", "tool_calls": []},
                                          T("r", "a")])
case("tool_content_shapes", [U("Go"), A("", tool_calls=[TC("a", "f", {})]),
                             T(None, "a"), T("", "a"), T([], "a"), T({}, "a"), T(0, "a"), T(False, "a"),
                             T(txt("p1", "p2"), "a"), T(["s1", {"type": "text", "text": "s2"}], "a"),
                             {"role": "tool"}])
case("tool_content_dict", [U("Go"), T({"a": 1}, "a")])
case("tool_content_int", [U("Go"), T(5, "a")])
case("tool_content_float", [U("Go"), T(1.5, "a")])
case("tool_content_true", [U("Go"), T(True, "a")])
case("tool_content_dict_sorted", [U("Go"), A("", tool_calls=[TC("a", "f", {})]), T({"x": 1}, "a")])
case("tool_outputs", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                      T([{"output": "rb", "tool_call_id": "b"}, {"output": "ra", "tool_call_id": "a"}])])
case("tool_outputs_unsorted", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                               T([{"output": "rb", "tool_call_id": "b"}, {"output": "r?"}])])
case("tool_outputs_shapes", [U("Go"), T([{"output": txt("t1", "t2")}, {"output": None}, {"nooutput": 1},
                                         {"output": {"k": 1}}, {"output": 5}, {"output": ""}, "str", 7,
                                         {"output": MEDIA_PARTS[:1]}])])
case("tool_outputs_mixed_block", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {}), TC("c", "h", {})]),
                                  T("rc", "c"), T([{"output": "rb", "id": "b"}, {"output": "ra", "tool_call_id": "a"}])])
case("tool_outputs_first_not_output", [U("Go"), T([{"type": "text", "text": "t"}, {"output": "o"}])])
case("tool_outputs_refs", [U("Go"), A("", tool_calls=[TC("a", "f", {}), TC("b", "g", {})]),
                           T([{"output": [{"type": "tool_reference", "name": "lazy"}], "tool_call_id": "b"},
                              {"output": "plain", "tool_call_id": "a"}])], tools=[WEATHER, DEFERRED])
case("tool_outputs_refs_unsorted", [U("Go"),
                                    T([{"output": [{"type": "tool_reference", "name": "lazy"}]},
                                       {"output": [{"type": "tool_reference", "name": "get_weather"}, "x"]}])],
                                    tools=[WEATHER, DEFERRED])
case("tool_outputs_and_refs_first", [U("Go"), A("", tool_calls=[TC("a", "f", {})]),
                                     T([{"type": "tool_reference", "name": "lazy", "output": "o", "tool_call_id": "a"}])],
     tools=[DEFERRED])
case("tool_outputs_and_refs_first_unsorted", [U("Go"),
                                              T([{"type": "tool_reference", "name": "lazy", "output": "o"}])],
     tools=[DEFERRED])
case("tool_refs", [U("Find a tool"), A("", tool_calls=[TC("a", "tool_search", {"q": "lazy"})]),
                   T([{"type": "tool_reference", "name": "lazy"}, {"type": "tool_reference", "name": "get_weather"},
                      {"type": "tool_reference", "name": "missing"}], "a")], tools=[WEATHER, DEFERRED, STRICT])
case("tool_refs_no_tools", [U("Go"), T([{"type": "tool_reference", "name": "lazy"}], "a")])
case("tool_refs_empty_tools", [U("Go"), T([{"type": "tool_reference", "name": "lazy"}], "a")], tools=[])
case("tool_refs_flat_tools", [U("Go"), T([{"type": "tool_reference", "name": "flat"}], "a")],
     tools=[{"type": "function", "name": "flat"}, {"name": "flat", "x": 1}])
case("tool_refs_no_name", [U("Go"), T([{"type": "tool_reference"}, {"type": "tool_reference", "name": None}])],
     tools=[{"type": "function", "function": {"description": "nameless"}}, {"type": "function", "function": {"name": None}}])
case("tool_refs_numeric_names", [U("Go"), T([{"type": "tool_reference", "name": 1}, {"type": "tool_reference", "name": True}])],
     tools=[{"function": {"name": 1.0}}, {"function": {"name": "1"}}, {"function": {"name": {"a": 1}}}])
case("tool_refs_dict_names", [U("Go"), T([{"type": "tool_reference", "name": {"b": [1, 2], "a": 1}}])],
     tools=[{"function": {"name": {"a": 1.0, "b": [True, 2]}}}])
# py::eq compares numbers as f64: ints beyond 2**53 are refused, not compared.
case("tool_refs_bigint_names", [U("Go"), T([{"type": "tool_reference", "name": 9007199254740993}])],
     tools=[{"function": {"name": 9007199254740992}}, {"function": {"name": 9007199254740993}}], refuse=True)
case("tool_refs_float_names", [U("Go"), T([{"type": "tool_reference", "name": 0.1}, {"type": "tool_reference", "name": 2}])],
     tools=[{"function": {"name": 0.1}}, {"function": {"name": 1}}, {"function": {"name": 2.0}}, {"function": {"name": 9007199254740992}}])
case("tool_refs_second_not_ref", [U("Go"), T([{"type": "tool_reference", "name": "lazy"}, {"type": "text", "text": "t"}])],
     tools=[DEFERRED])
case("tool_refs_first_not_ref", [U("Go"), T([{"type": "text", "text": "t"}, {"type": "tool_reference", "name": "lazy"}])],
     tools=[DEFERRED])
case("tool_refs_in_user", [U([{"type": "tool_reference", "name": "lazy"}, {"type": "text", "text": "u"}])], tools=[DEFERRED])

# Media through the whole flow (the integrator refuses media before calling).
case("media_tool_result", [U("Go"), A("", tool_calls=[TC("a", "f", {})]),
                           T([{"output": MEDIA_PARTS}], "a")])

# Batched conversations: SGLang would tokenize a list of prompts; the port refuses.
case("batched", [[U("a")], [U("b")]], refuse=True)
case("batched_bad_tools", [[U("a")]], tools=[5])
case("batched_empty", [[]], refuse=True)


# Random inputs: every key the template reads, with every JSON type in it.
def fuzz_cases(count, seed=53):
    import random
    rnd = random.Random(seed)
    keys = ["role", "content", "type", "text", "name", "tool_call_id", "id", "output", "function",
            "arguments", "reasoning_content", "tool_calls", "defer_loading", "strict", "x"]
    strs = ["user", "assistant", "tool", "system", "text", "image", "image_url", "input_audio", "video_url",
            "tool_reference", "a", "", "<think>r</think>c", "x</think>", "function", "  pad  ", "it's", 'q"',
            "\n", "call_1", "call_2"]

    def val(d):
        k = rnd.randrange(9 if d < 3 else 5)
        if k == 0:
            return None
        if k == 1:
            return rnd.random() < 0.5
        if k == 2:
            return rnd.choice([0, 1, 2, -3, 10**15])
        if k == 3:
            return rnd.choice([0.5, 1.0, 1e20, -0.0, 1e-7])
        if k == 4:
            return rnd.choice(strs)
        if k in (5, 6, 7):
            return {rnd.choice(keys): val(d + 1) for _ in range(rnd.randrange(5))}
        return [val(d + 1) for _ in range(rnd.randrange(4))]

    def msg(first):
        role = rnd.choice(["user", "assistant", "tool", "system", "user", "assistant", "tool"])
        m = {"role": role}
        if rnd.random() < 0.9:
            m["content"] = rnd.choice([
                val(1), rnd.choice(strs), [{"type": "text", "text": rnd.choice(strs)}],
                [{"output": val(2), "tool_call_id": rnd.choice(["call_1", "call_2", ""])}],
                [{"type": "tool_reference", "name": rnd.choice(["f", "g", None])}]])
        if role == "assistant" and rnd.random() < 0.5:
            m["tool_calls"] = rnd.choice([val(1), [
                {"id": rnd.choice(["call_1", "call_2", None]),
                 "function": {"name": rnd.choice(["f", "g", None, 5]),
                              "arguments": rnd.choice([val(1), {"a": val(2)}])}}
                for _ in range(rnd.randrange(3))]])
        if role == "assistant" and rnd.random() < 0.4:
            m["reasoning_content"] = rnd.choice([val(1), "r", ""])
        if role == "tool" and rnd.random() < 0.7:
            m["tool_call_id"] = rnd.choice(["call_1", "call_2", "", None, val(1)])
        for _ in range(rnd.randrange(2)):
            m[rnd.choice(keys)] = val(1)
        # Not a list first: that would be a batch, which the port refuses.
        return m if first or rnd.random() < 0.95 else val(1)

    def tool():
        return rnd.choice([
            val(1),
            {"type": "function", "function": {"name": rnd.choice(["f", "g", None]), "description": "d",
                                              "parameters": val(2), "defer_loading": val(3)}},
            {"type": "function", "function": val(1)}])

    out = []
    for i in range(count):
        messages = [msg(j == 0) for j in range(rnd.randrange(7))]
        tools = None if rnd.random() < 0.4 else [tool() for _ in range(rnd.randrange(3))]
        kwargs = {}
        for _ in range(rnd.randrange(3)):
            key = rnd.choice(["reasoning_effort", "clear_thinking", "reasoning_content", "padding", "documents",
                              "chat_template", "messages", "tokenize", "x", "continue_final_message"])
            kwargs[key] = rnd.choice([val(2), "low", "high", True, None])
        out.append((f"fuzz/{i:03}", messages, tools, rnd.random() < 0.5, kwargs, False))
    return out


# --- resolve_python_chat_template / is_glm53_template -----------------------------

_MARKERS = ["[gMASK]<sop>", "{{- 'Reasoning Effort: ' ~ effort }}", "{{ '<tool_call>' + tc.name }}",
            "<arg_key>{{ k }}</arg_key>", "<arg_value>{{ v }}</arg_value>"]
_BASE = "\n".join(_MARKERS)
_IMAGE = "{%- if c.type == 'image' %}<|begin_of_image|><|image|><|end_of_image|>{% endif %}"
RESOLVE_TEMPLATES = [
    ("none", None), ("empty", ""), ("base", _BASE), ("base_image", _BASE + _IMAGE),
    ("image_first", _IMAGE + _BASE), ("image_only_begin", _BASE + "<|begin_of_image|>"),
    ("image_partial", _BASE + "<|begin_of_image"), ("image_other_tokens", _BASE + "<|image|><|end_of_image|>"),
    ("enable_thinking", _BASE + "{% if enable_thinking %}"), ("enable_thinking_image", _BASE + _IMAGE + "enable_thinking"),
    ("enable_thinking_substr", _BASE + "xenable_thinkingx"),
    ("glm45_like", "[gMASK]<sop>{% if enable_thinking is defined %}<tool_call><arg_key><arg_value>"),
    ("split_gmask", _BASE.replace("[gMASK]<sop>", "[gMASK] <sop>")),
    ("effort_lowercase", _BASE.replace("Reasoning Effort:", "Reasoning effort:")),
    ("effort_no_colon", _BASE.replace("Reasoning Effort:", "Reasoning Effort")),
    ("unicode", "é" + _BASE + "中"),
] + [(f"missing_{i}", "\n".join(m for j, m in enumerate(_MARKERS) if j != i)) for i in range(len(_MARKERS))]
RESOLVE_ARCHS = [[], ["GlmMoeDsaForCausalLM"], ["Glm5NextForConditionalGeneration"],
                 ["GlmMoeDsaForCausalLM", "Glm5NextForConditionalGeneration"],
                 ["Glm5NextForConditionalGeneration", "GlmMoeDsaForCausalLM"],
                 ["LlamaForCausalLM", "GlmMoeDsaForCausalLM"], ["glmmoedsaforcausallm"], [""],
                 ["Glm4MoeForCausalLM"]]


def resolve_cases():
    from sglang.srt.parser.python_chat_template import (
        may_replace_jinja_template,
        resolve_python_chat_template,
    )
    from sglang.srt.parser.template_detection import is_glm53_template

    out = []
    for name, template in RESOLVE_TEMPLATES:
        for archs in RESOLVE_ARCHS + [None]:
            resolved = resolve_python_chat_template(NS(architectures=archs), template)
            out.append({"name": name, "architectures": archs, "template": template,
                        "resolved": None if resolved is None else resolved.name,
                        "may_replace": may_replace_jinja_template(template),
                        "is_glm53": is_glm53_template(template)})
    # No `architectures` attribute at all: getattr(hf_config, "architectures", None).
    out.append({"name": "no_attribute", "architectures": None, "template": _BASE,
                "resolved": (lambda r: None if r is None else r.name)(resolve_python_chat_template(NS(), _BASE)),
                "may_replace": True, "is_glm53": True})
    return out


def render_record(name, messages, tools, agp, kwargs, refuse=False):
    out = []
    for variant in ("glm-5.3", "glm-5.3-flash"):
        expect = run(variant, messages, tools, agp, kwargs)
        if refuse:
            expect = {"refuse": True, "python": expect}
        out.append({"name": f"{variant}/{name}", "variant": variant, "messages": messages, "tools": tools,
                    "add_generation_prompt": agp, "kwargs": kwargs, "expect": expect})
    return out


def main():
    golden, hashes, matched = golden_cases()
    golden_out = os.environ.get("GLM53_GOLDEN_OUT")
    if golden_out:
        with open(golden_out, "w") as f:
            json.dump({"render": [r for c in golden for r in render_record(*c)], "resolve": []}, f,
                      ensure_ascii=False, separators=(",", ":"))
    all_cases = [(n, m, t, a, k, False) for n, m, t, a, k in pipeline_cases()] + CASES + fuzz_cases(150)
    out, names = [], set()
    for name, messages, tools, agp, kwargs, refuse in all_cases:
        assert name not in names, name
        names.add(name)
        out.extend(render_record(name, messages, tools, agp, kwargs, refuse))
    resolve = resolve_cases()
    with open(os.path.join(HERE, "glm53_expected.json"), "w") as f:
        json.dump({"render": out, "resolve": resolve}, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    kinds = {}
    for c in out:
        k = next(iter(c["expect"]))
        kinds[k] = kinds.get(k, 0) + 1
    print(f"{len(out)} render cases {kinds}; {len(resolve)} resolve cases "
          f"({sum(r['resolved'] is not None for r in resolve)} resolved); "
          f"golden hashes reproduced: {matched}/{hashes}")


if __name__ == "__main__":
    main()
