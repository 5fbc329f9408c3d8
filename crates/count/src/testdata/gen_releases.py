"""Reference prompt lengths of one SGLang release, from that release's own Python code.

Developer machine only; CI never runs Python. For one release V at a time,
runs every request case of ../shared/goldens/cases through V's own request
handling and records the prompt length V computes, in /work/refdata/<V>.json
(directory: $REFDATA_OUT). Nothing of SGLang is reimplemented here: the
harness builds V's objects (tokenizer, TemplateManager, OpenAIServingChat,
OpenAIServingCompletion, TokenizerManager) without their GPU-side
constructors and calls V's methods as V's HTTP server does.

    SGLANG_SRC=/work/wheels/src/<V> /work/venvs/tf-<T>/bin/python \\
        crates/count/src/testdata/gen_releases.py

* SGLANG_SRC: V's wheel unpacked (`pip download --no-deps sglang==V && unzip`).
* The interpreter: a Python 3.11 venv with the transformers version V pins
  (and V's tokenizers pin where it has one); see release_env.py. Other
  libraries (pydantic, jinja2 3.1.6, fastapi, ...) are recorded in the output.
  $OPENAI_OVERLAY can put V's pinned openai in front of the venv's.
* $PREFILL_GUARD_SHARED: the shared data (default ../shared next to the crate).

What runs, per endpoint (a default server unless a profile says otherwise:
no --chat-template, no parsers, no template kwargs; text-only model):

* tokenizer: V's `get_tokenizer(<fixture dir>)` (release_env.get_tokenizer),
  loaded once per fixture per run. glm-4.5 has no tokenizer.json: a
  vocabulary-less stand-in carrying its template and special tokens renders
  it (counts null, the rendered prompt's sha256 recorded).
* template: V's TemplateManager.initialize_templates(tokenizer_manager,
  model path, --chat-template) as V's engine calls it (0.4.8+), or V's
  load_chat_template_for_openai_api when --chat-template is set (0.4.5-0.4.7,
  where the default server otherwise uses the HF template). The model path
  is the fixture's stand-in Hugging Face id (HEADER.json model_standin),
  which V's conversation-template matchers see as the server would.
* chat: ChatCompletionRequest validation -> OpenAIServingChat._validate_request
  -> _convert_to_internal_request (0.4.8+); 0.4.5-0.4.7:
  ChatCompletionRequest(**body) -> adapter.v1_chat_generate_request.
* completions: CompletionRequest validation -> OpenAIServingCompletion
  ._validate_request -> _convert_to_internal_request (0.4.8+);
  0.4.5-0.4.7: CompletionRequest(**body) -> adapter.v1_generate_request.
* generate: pydantic validation of the body into GenerateReqInput (as
  FastAPI does), the /generate contract check where V has one
  (entrypoints/api_contract.py, 0.5.22+).
* then for all three: GenerateReqInput.normalize_batch_and_arguments and, per
  element of a batch (obj[i]), TokenizerManager._tokenize_one_request on a
  TokenizerManager built without its constructor (attributes of a default
  text-only server; context length 2**22 so no length check fires). The count
  is len(input_ids) of the tokenized request.

Recorded:

    {"version", "libraries", "setup": {fixture|profile: what V resolved},
     "fixtures": {fixture: {case: n | [n, ...] | null}},
     "fixtures_model_path": {fixture@/models/<name>: {chat case: n | null}},
     "rendered": {fixture|"profile:"+name: {case: [chars, sha256]}},
     "profiles": {profile: {case: n|null} | "flag absent: ..." | "not startable: ..."},
     "errors": {"fixtures"|"profiles": {name: {case: "<stage>: <Type>: <message>"}}}}

`fixtures_model_path`: only where V picked a conversation template from the
stand-in model id (e.g. 0.4.8-0.4.10's "gemma-it" for google/gemma-3-1b-it,
"mistral" for mistralai/Mistral-Nemo-Instruct-2407): the chat cases again
with the model at a local path no matcher recognizes (/models/<fixture>), so
the HF template is used, as on a server started from a local directory.

`rendered` is the text the chat template produced (tokenizer.apply_chat_template,
the Python template, or the conversation template's prompt), without the
continue_final_message prefix. Profiles: ../shared/goldens/profiles/PROFILES.json,
the fixture with the profile's config_json architecture and its server_info
flags set on V's ServerArgs; a flag V's ServerArgs lacks gives "flag absent",
a parser or template name V would refuse at start-up gives "not startable".

One step is patched, not the prompt: xgrammar is
stubbed, so `convert_json_schema_to_str` of its structural tag (reached after
the prompt is built, with a parser and a named tool_choice) returns "{}"
(also when that tag's dump holds an iterator json cannot serialize, 0.5.12)
and `strip_structural_tag_excludes` is a no-op.
"""
import asyncio
import copy
import dataclasses
import glob
import hashlib
import inspect
import json
import os
import sys
import traceback
from types import SimpleNamespace as NS
from unittest.mock import MagicMock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import release_env as E  # noqa: E402  (must come before sglang)

CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT_DIR = os.environ.get("REFDATA_OUT", "/work/refdata")
CONTEXT_LEN = 1 << 22

import sglang.srt.managers.io_struct as io_struct  # noqa: E402
import sglang.srt.managers.tokenizer_manager as tm_mod  # noqa: E402
import sglang.srt.server_args as server_args_mod  # noqa: E402

OLD_ADAPTER = not os.path.exists(os.path.join(E.SGLANG_SRC, "sglang", "srt", "entrypoints",
                                              "openai", "serving_chat.py"))
if OLD_ADAPTER:
    import sglang.srt.openai_api.adapter as adapter  # noqa: E402
    import sglang.srt.openai_api.protocol as protocol  # noqa: E402
else:
    import sglang.srt.entrypoints.openai.protocol as protocol  # noqa: E402
    import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
    import sglang.srt.entrypoints.openai.serving_completions as serving_completions  # noqa: E402
    template_manager_mod = E.release_module("sglang.srt.parser.template_manager",
                                            "sglang.srt.managers.template_manager")
try:
    api_contract = E.release_module("sglang.srt.entrypoints.api_contract")
except ImportError:
    api_contract = None

GenerateReqInput = io_struct.GenerateReqInput
ServerArgs = server_args_mod.ServerArgs
TokenizerManager = tm_mod.TokenizerManager


# --- server configuration ------------------------------------------------------
def server_args_defaults():
    """{field: default} of V's ServerArgs (its dataclass defaults, no __post_init__)."""
    out = {}
    if dataclasses.is_dataclass(ServerArgs):
        for f in dataclasses.fields(ServerArgs):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = None
    else:  # 0.5.23: a msgspec Struct
        import msgspec
        for f in msgspec.structs.fields(ServerArgs):
            if f.default is not msgspec.NODEFAULT:
                out[f.name] = f.default
            elif f.default_factory is not msgspec.NODEFAULT:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = None
    return out


SERVER_ARGS_FIELDS = set(server_args_defaults())


class _Null:
    """What an attribute of the default server that V's ServerArgs does not name
    reads as: falsy, None-equal, and chainable (`get_exec().features.x`)."""

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return self

    def __bool__(self):
        return False

    def __eq__(self, other):
        return other is None or isinstance(other, _Null)

    def __hash__(self):
        return 0

    def __call__(self, *a, **k):
        return self

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return "NULL"


NULL = _Null()


def make_server_args(overrides, hf_config=None):
    """A ServerArgs of V with its dataclass defaults and `overrides`, built without
    __post_init__ (which probes GPUs). Attributes it lacks read as NULL;
    get_hf_config() (0.5.6-0.5.6.post2 call it) answers the model's config
    (the stand-in architecture) instead of reading the model path."""

    class _SA(ServerArgs):
        def __getattr__(self, k):
            if k.startswith("__"):
                raise AttributeError(k)
            return NULL

        def get_hf_config(self, *a, **k):
            return hf_config

    values = dict(server_args_defaults(), **overrides)
    if dataclasses.is_dataclass(ServerArgs):
        sa = object.__new__(_SA)
        for k, v in values.items():
            object.__setattr__(sa, k, v)
    else:  # msgspec Struct: construction does not resolve (its __post_init__ is empty)
        sa = _SA(**values)
    return sa


class Bag:
    """V's resolved-config namespaces (get_serving(), get_model(), ... 0.5.14+),
    read from the server args of the server being simulated."""

    def __init__(self):
        self.server_args = None

    def __getattr__(self, k):
        if k.startswith("__") or k == "server_args":
            raise AttributeError(k)
        sa = self.__dict__.get("server_args")
        if sa is not None and k in SERVER_ARGS_FIELDS:
            return getattr(sa, k)
        return NULL


BAG = Bag()
ACCESSORS = ("get_parallel", "get_serving", "get_model", "get_memory", "get_disagg", "get_schedule", "get_exec",
             "get_spec", "get_lora", "get_mm", "get_device", "get_observability")


def patch_accessors():
    """Point every sglang module's config accessors at BAG (and the global server
    args at the simulated server's)."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sglang") or isinstance(mod, E.Mod) or mod is None:
            continue
        for acc in ACCESSORS:
            if callable(getattr(mod, acc, None)) and acc in vars(mod):
                setattr(mod, acc, lambda: BAG)
        for acc in ("get_global_server_args", "get_server_args"):
            if acc in vars(mod) and callable(vars(mod)[acc]):
                setattr(mod, acc, lambda: BAG.server_args)


# The stubbed xgrammar's structural tag (module docstring).
def _lenient_schema_to_str(real):
    """convert_json_schema_to_str, except for what the stubbed xgrammar built: a
    MagicMock, or (0.5.12) a dump of the stand-in StructuralTag holding an
    iterator, which json cannot serialize. Both come after the prompt is built."""
    def convert(schema):
        if isinstance(schema, MagicMock):
            return "{}"
        try:
            return real(schema)
        except TypeError as e:
            if "SerializationIterator" in str(e):
                return "{}"
            raise
    return convert


for _m in [protocol] + ([serving_chat] if not OLD_ADAPTER else [adapter]):
    if hasattr(_m, "convert_json_schema_to_str"):
        _m.convert_json_schema_to_str = _lenient_schema_to_str(_m.convert_json_schema_to_str)
    if hasattr(_m, "strip_structural_tag_excludes"):
        _m.strip_structural_tag_excludes = lambda *a, **k: None


# Python chat templates (0.5.23: glm-5.3) render segments without calling
# tokenizer.apply_chat_template; their joined text is the rendered prompt.
if not OLD_ADAPTER and hasattr(serving_chat, "render_chat_segments"):
    _rcs = serving_chat.render_chat_segments

    def _render_chat_segments(*a, **k):
        segments = _rcs(*a, **k)
        if segments is not None:
            RENDERS.append("".join(segments))
        return segments

    serving_chat.render_chat_segments = _render_chat_segments


# --- tokenizer manager ---------------------------------------------------------
# Functions the tokenizer manager imports from stubbed modules and compares in
# _validate_one_request: a request without return_hidden_states is at mode 0.
for _name in ("get_request_return_hidden_states_mode", "get_server_return_hidden_states_mode"):
    if isinstance(getattr(tm_mod, _name, None), MagicMock):
        setattr(tm_mod, _name, lambda *a, **k: 0)

class TM(TokenizerManager):
    """V's TokenizerManager without its constructor (no scheduler, no ZMQ):
    the attributes a default text-only server sets; others read as None."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return None

    def config_value(self, name):
        return getattr(self.server_args, name, None)


def make_model_config(config_json):
    hf = NS(model_type=config_json["model_type"], architectures=list(config_json["architectures"]),
            to_dict=lambda: dict(config_json))

    class _MC(NS):
        def __getattr__(self, k):
            if k.startswith("__"):
                raise AttributeError(k)
            return None

    return _MC(hf_config=hf, hf_text_config=hf, is_multimodal=False, is_generation=True,
               context_len=CONTEXT_LEN, get_default_sampling_params=lambda: {},
               is_multimodal_gen=False, is_image_gen=False, is_audio_model=False,
               model_path=None, is_embedding_gemma=False)


def make_tokenizer_manager(tokenizer, model_path, config_json, server_args):
    mc = make_model_config(config_json)
    mc.model_path = model_path
    tm = TM(tokenizer=tokenizer, processor=None, mm_processor=None, model_config=mc,
            server_args=server_args, model_path=model_path, served_model_name=model_path,
            context_len=CONTEXT_LEN, max_req_input_len=CONTEXT_LEN - 6, num_reserved_tokens=0,
            reserve_input_token_num=0,
            is_generation=True, is_image_gen=False, validate_total_tokens=True,
            allow_auto_truncate=False, lora_registry=None, async_dynamic_batch_tokenizer=None,
            enable_tokenizer_batch_encode=False, rid_to_state={}, is_pause=False)
    src = inspect.getsource(tm_mod)
    if "self.mm_processor = get_dummy_processor()" in src:
        tm.mm_processor = tm_mod.get_dummy_processor()
    if hasattr(TokenizerManager, "_create_tokenized_object"):
        # the scheduler-bound object (sampling params etc.): only the ids matter
        tm._create_tokenized_object = lambda obj, input_text, input_ids, *a, **k: NS(input_ids=input_ids)
    return tm


async def _tokenize_one(tm, obj):
    """TokenizerManager._tokenize_one_request; returns input_ids."""
    return (await tm._tokenize_one_request(obj)).input_ids


def tokenize(tm, obj):
    """What TokenizerManager.generate_request does before the scheduler:
    normalize_batch_and_arguments, then _tokenize_one_request (single), or, for a
    batch, V's choice in _handle_batch_request: _batch_tokenize_and_process when
    V's _should_use_batch_tokenization says so (e.g. a batch of ids only), else
    _tokenize_one_request per element obj[i]. The length, or the lengths."""
    obj.normalize_batch_and_arguments()
    loop = asyncio.new_event_loop()
    try:
        if obj.is_single:
            return len(loop.run_until_complete(_tokenize_one(tm, obj)))
        n = obj.batch_size
        if getattr(obj, "parallel_sample_num", 1) == 1 and hasattr(TokenizerManager, "_should_use_batch_tokenization") \
                and tm._should_use_batch_tokenization(n, obj):
            return [len(t.input_ids) for t in loop.run_until_complete(tm._batch_tokenize_and_process(n, obj))]
        return [len(loop.run_until_complete(_tokenize_one(tm, obj[i]))) for i in range(n)]
    finally:
        loop.close()


# --- tokenizers ----------------------------------------------------------------
RENDERS = []
_TOKENIZERS = {}


def _hook_render(tok):
    """Record the text each chat-template render produces (RENDERS)."""
    real = tok.apply_chat_template
    if getattr(real, "_hooked", False):
        return

    def apply_chat_template(conversation, *a, **kw):
        out = real(conversation, *a, **kw)
        if isinstance(out, str):
            RENDERS.append(out)
        elif kw.get("tokenize", True):
            kw2 = dict(kw, tokenize=False)
            kw2.pop("return_dict", None)
            try:
                RENDERS.append(real(conversation, *a, **kw2))
            except Exception:
                pass
        return out

    apply_chat_template._hooked = True
    tok.apply_chat_template = apply_chat_template


def glm_standin(d):
    """GLM-4.5 has no tokenizer.json: a tokenizer with its template and special
    tokens but no vocabulary (renders with the installed transformers' own
    apply_chat_template; counts are not recorded)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    raw = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    kw = {k: cfg[k] for k in ("eos_token", "pad_token", "bos_token", "unk_token") if cfg.get(k)}
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, **kw)
    extra = cfg.get("additional_special_tokens") or []
    if extra:
        tok.add_special_tokens({"additional_special_tokens": extra})
    tok.chat_template = open(os.path.join(d, "chat_template.jinja")).read()
    return tok


def load_tokenizer(fixture):
    """(tokenizer, its original chat_template, counted?) for a fixture, loaded once."""
    if fixture not in _TOKENIZERS:
        d = os.path.join(SHARED, "tokenizers", fixture)
        if os.path.exists(os.path.join(d, "tokenizer.json")):
            tok, counted = E.get_tokenizer(d), True
        else:
            tok, counted = glm_standin(d), False
        _TOKENIZERS[fixture] = (tok, tok.chat_template, counted)
    tok, template, counted = _TOKENIZERS[fixture]
    tok.chat_template = template
    for attr in ("_sglang_python_chat_template", "python_chat_template"):
        if attr in tok.__dict__:
            del tok.__dict__[attr]
    if "apply_chat_template" in tok.__dict__:
        del tok.__dict__["apply_chat_template"]
    return tok, counted


# --- the simulated server --------------------------------------------------------
class NotStartable(Exception):
    pass


def parser_choices(flag):
    """The names V accepts for --tool-call-parser / --reasoning-parser, or None."""
    try:
        import argparse
        p = argparse.ArgumentParser()
        ServerArgs.add_cli_args(p)
        for a in p._actions:
            if flag in a.option_strings and a.choices:
                return list(a.choices)
    except Exception:
        pass
    return None


def registry_names(kind):
    mods = {"tool_call_parser": ("sglang.srt.function_call.function_call_parser",
                                 "sglang.srt.function_call_parser"),
            "reasoning_parser": ("sglang.srt.parser.reasoning_parser", "sglang.srt.reasoning_parser")}[kind]
    try:
        m = E.release_module(*mods)
    except ImportError:
        return None
    if kind == "tool_call_parser":
        enum = getattr(getattr(m, "FunctionCallParser", None), "ToolCallParserEnum", None)
    else:
        enum = getattr(getattr(m, "ReasoningParser", None), "DetectorMap", None)
    return list(enum) if isinstance(enum, dict) else None


class Server:
    """One simulated server of V: tokenizer, templates, chat/completion handlers."""

    def __init__(self, fixture, config_json, model_path, flags):
        self.fixture = fixture
        for k in flags:
            if k not in SERVER_ARGS_FIELDS:
                raise NotStartable(f"flag absent: --{k.replace('_', '-')}")
        for k in ("tool_call_parser", "reasoning_parser"):
            if flags.get(k):
                names = parser_choices("--" + k.replace("_", "-")) or registry_names(k)
                if names is not None and flags[k] not in names:
                    raise NotStartable(f"--{k.replace('_', '-')} {flags[k]}: not one of {sorted(names)}")
        self.tokenizer, self.counted = load_tokenizer(fixture)
        self.server_args = make_server_args(dict(flags, model_path=model_path, tokenizer_path=model_path),
                                            make_model_config(config_json).hf_config)
        BAG.server_args = self.server_args
        patch_accessors()
        self.tm = make_tokenizer_manager(self.tokenizer, model_path, config_json, self.server_args)
        self.setup = {}
        if OLD_ADAPTER:
            adapter.chat_template_name = None
            if flags.get("chat_template"):
                try:
                    adapter.load_chat_template_for_openai_api(self.tm, flags["chat_template"], model_path)
                except Exception as e:
                    raise NotStartable(f"--chat-template {flags['chat_template']}: {err(e)}")
            self.setup["chat_template_name"] = adapter.chat_template_name
        else:
            self.templates = template_manager_mod.TemplateManager()
            try:
                self.templates.initialize_templates(tokenizer_manager=self.tm, model_path=model_path,
                                                    chat_template=flags.get("chat_template"),
                                                    completion_template=None)
            except Exception as e:
                raise NotStartable(f"template: {err(e)}")
            for k in ("chat_template_name", "jinja_template_content_format", "force_reasoning",
                      "reasoning_config", "python_chat_template"):
                v = getattr(self.templates, k, None)
                self.setup[k] = v if v is None or isinstance(v, (str, bool, int)) else str(v)
            try:
                self.chat = serving_chat.OpenAIServingChat(self.tm, self.templates)
            except Exception as e:
                raise NotStartable(f"OpenAIServingChat: {err(e)}")
            self.completion = serving_completions.OpenAIServingCompletion(self.tm, self.templates)
            for k in ("chat_encoding_spec", "_tokenizer_auto_adds_specials", "supports_inline_system"):
                if hasattr(self.chat, k):
                    v = getattr(self.chat, k)
                    self.setup[k] = v if v is None or isinstance(v, (str, bool, int)) else str(v)
        _hook_render(self.tokenizer)
        self.setup["tokenizer_class"] = type(self.tokenizer).__name__

    # each returns (count, rendered or None); raises Refused
    def chat_count(self, body):
        RENDERS.clear()
        with stage("request validation"):
            request = protocol.ChatCompletionRequest.model_validate(copy.deepcopy(body)) \
                if not OLD_ADAPTER else protocol.ChatCompletionRequest(**copy.deepcopy(body))
        if OLD_ADAPTER:
            with stage("chat template"):
                # called as V's v1_chat_completions calls it (0.4.6.post5+ passes the rid)
                kw = {"request_ids": [request.rid]} if "request_ids=[all_requests[0].rid]" in \
                    inspect.getsource(adapter.v1_chat_completions) else {}
                adapted, _ = adapter.v1_chat_generate_request([request], self.tm, **kw)
        else:
            with stage("request check"):
                msg = self.chat._validate_request(request)
            if msg:
                raise Refused(f"request check: {str(msg)[:200]}")
            with stage("chat template"):
                params = inspect.signature(self.chat._convert_to_internal_request).parameters
                args = (request, None) if len(params) >= 2 else (request,)
                adapted, _ = self.chat._convert_to_internal_request(*args)
        rendered = RENDERS[-1] if RENDERS else None
        if rendered is None and isinstance(getattr(adapted, "text", None), str):
            rendered = adapted.text
        with stage("tokenizer manager"):
            n = tokenize(self.tm, adapted)
        return n, rendered

    def completion_count(self, body):
        with stage("request validation"):
            request = protocol.CompletionRequest.model_validate(copy.deepcopy(body)) \
                if not OLD_ADAPTER else protocol.CompletionRequest(**copy.deepcopy(body))
        if OLD_ADAPTER:
            with stage("convert"):
                kw = {"request_ids": [request.rid]} if "request_ids=[all_requests[0].rid]" in \
                    inspect.getsource(adapter.v1_completions) else {}
                adapted, _ = adapter.v1_generate_request([request], **kw)
        else:
            with stage("request check"):
                msg = self.completion._validate_request(request)
            if msg:
                raise Refused(f"request check: {str(msg)[:200]}")
            with stage("convert"):
                params = inspect.signature(self.completion._convert_to_internal_request).parameters
                args = (request, None) if len(params) >= 2 else (request,)
                adapted, _ = self.completion._convert_to_internal_request(*args)
        with stage("tokenizer manager"):
            return tokenize(self.tm, adapted), None

    def generate_count(self, body):
        import pydantic
        with stage("request validation"):
            obj = pydantic.TypeAdapter(GenerateReqInput).validate_python(copy.deepcopy(body))
        if api_contract is not None:
            with stage("request contract"):
                msg = api_contract.generate_contract_error(copy.deepcopy(body))
            if msg is not None:
                raise Refused(f"request contract: {str(msg)[:200]}")
        with stage("tokenizer manager"):
            return tokenize(self.tm, obj), None


class Refused(Exception):
    pass


def err(e):
    return f"{type(e).__name__}: {str(e)[:200]}"


class stage:
    """Turns an exception raised in a step into Refused("<step>: <Type>: <msg>")."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, t, e, tb):
        if e is None or isinstance(e, Refused):
            return False
        if os.environ.get("GEN_RELEASES_TRACE"):
            traceback.print_exception(t, e, tb)
        raise Refused(f"{self.name}: {err(e)}") from e


# --- running ---------------------------------------------------------------------
def run_cases(server, cases, counts, errors, rendered):
    for c in cases:
        fn = {"chat": server.chat_count, "completions": server.completion_count,
              "generate": server.generate_count}[c["endpoint"]]
        try:
            n, text = fn(c["request"])
        except Refused as r:
            counts[c["case"]] = None
            errors[c["case"]] = str(r)
            continue
        counts[c["case"]] = n if server.counted else None
        if text is not None:
            rendered[c["case"]] = [len(text), hashlib.sha256(text.encode("utf-8")).hexdigest()]


def main():
    only = set(filter(None, os.environ.get("GEN_RELEASES_ONLY", "").split(",")))
    cases = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    header = json.load(open(os.path.join(SHARED, "goldens", "HEADER.json")))["sglang"]["tokenizers"]
    index = json.load(open(os.path.join(SHARED, "goldens", "profiles", "PROFILES.json")))["profiles"]
    out = {"version": E.VERSION, "libraries": None, "harness": {
        "old_adapter": OLD_ADAPTER, "stubbed": None, "patches_skipped": None,
        "strftime_now_pinned_to": E.FIXED_NOW.isoformat(), "context_len": CONTEXT_LEN},
        "setup": {}, "fixtures": {}, "fixtures_model_path": {}, "rendered": {}, "profiles": {},
        "errors": {"fixtures": {}, "profiles": {}}}

    for fixture in sorted(header):
        if only and fixture not in only:
            continue
        standin = header[fixture]["model_standin"]
        try:
            server = Server(fixture, standin, standin["model_path"], {})
        except NotStartable as e:
            out["fixtures"][fixture] = f"not startable: {e}"
            continue
        out["setup"][fixture] = server.setup
        counts, errors, rendered = {}, {}, {}
        run_cases(server, cases, counts, errors, rendered)
        out["fixtures"][fixture] = counts
        out["errors"]["fixtures"][fixture] = errors
        out["rendered"][fixture] = rendered
        print(f"{E.VERSION} {fixture}: {sum(v is not None for v in counts.values())} counted, "
              f"{len(errors)} refused", flush=True)
        if server.setup.get("chat_template_name"):
            # V picked a conversation template from the Hugging Face model id; a
            # server started on a local directory whose name matches no matcher
            # renders the HF template instead: record that too.
            neutral = f"/models/{fixture.replace('-', '_')}"
            server = Server(fixture, standin, neutral, {})
            name = f"{fixture}@{neutral}"
            out["setup"][name] = server.setup
            counts, errors, rendered = {}, {}, {}
            run_cases(server, [c for c in cases if c["endpoint"] == "chat"], counts, errors, rendered)
            out["fixtures_model_path"][name] = counts
            out["errors"]["fixtures"][name] = errors
            out["rendered"][name] = rendered

    chat_cases = [c for c in cases if c["endpoint"] == "chat"]
    for name, profile in sorted(index.items()):
        if only and name not in only and "profiles" not in only:
            continue
        fixture = profile["fixture"]
        model_path = header.get(fixture, {}).get("model_standin", {}).get("model_path") \
            or PROFILE_MODEL_PATHS.get(fixture, fixture)
        try:
            server = Server(fixture, profile["config_json"], model_path, profile["server_info"])
        except NotStartable as e:
            msg = str(e)
            out["profiles"][name] = msg if msg.startswith("flag absent") else f"not startable: {msg}"
            continue
        out["setup"]["profile:" + name] = server.setup
        counts, errors, rendered = {}, {}, {}
        run_cases(server, chat_cases, counts, errors, rendered)
        out["profiles"][name] = counts
        out["errors"]["profiles"][name] = errors
        out["rendered"]["profile:" + name] = rendered
        print(f"{E.VERSION} profile {name}: {sum(v is not None for v in counts.values())} counted, "
              f"{len(errors)} refused", flush=True)

    out["libraries"] = E.libraries()
    out["harness"]["stubbed"] = sorted({m.split(".")[0] if not m.startswith("sglang") else m
                                        for m in E.STUBBED})
    out["harness"]["patches_skipped"] = E.PATCHES_SKIPPED
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, f"{E.VERSION}.json" if not only else f"{E.VERSION}.partial.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"-> {path}")


# Model paths for the profile fixtures without a HEADER stand-in.
PROFILE_MODEL_PATHS = {"deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2", "deepseek-v4": "deepseek-ai/DeepSeek-V4"}

if __name__ == "__main__":
    main()
