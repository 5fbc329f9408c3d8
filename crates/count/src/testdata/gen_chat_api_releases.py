"""/v1/responses, /v1/messages and Ollama /api/chat as one SGLang release builds
them, from that release's own handler code.

Developer machine only; CI never runs Python. The per-release counterpart of
gen_chat_api.py (0.5.23 only): for one release V it runs the gen_chat_api.py
corpus through V's own `OpenAIServingResponses`, `AnthropicServing` and
`OllamaServing` and writes /work/refdata/chat_api/<V>.json ($CHAT_API_OUT).

    SGLANG_SRC=/work/wheels/src/<V> /work/venvs/tf-<T>/bin/python \\
        crates/count/src/testdata/gen_chat_api_releases.py
    python3 crates/count/src/testdata/gen_chat_api_releases.py --sweep 0.5.19 0.5.20 ...
    python3 crates/count/src/testdata/gen_chat_api_releases.py --sweep --from 0.5.1 --to 0.5.23

`--sweep` runs each release in the venv of its pins, exactly as
sweep_releases.py chooses them (its `pins`/`installed` are reused; openai
overlay through $OPENAI_OVERLAY), one at a time; logs in
/work/refdata/chat_api/logs/<V>.log.

The corpus is read from the committed 0.5.23 outputs, so that it is the same
by construction: the cases and their (supports_inline_system, content format)
settings from chat_api_expected.json, the fixture requests from
tests/data/chat_api_counts.json, and the gpt-oss harmony cases (with their
serving setting and date) from ../encoder/testdata/harmony_expected.json.

How (nothing of SGLang is reimplemented): release_env.py makes V importable
without a GPU; gen_releases.py's helpers build V's server pieces without their
GPU-side constructors (ServerArgs with V's defaults, a TokenizerManager, V's
config accessors); then V's own constructors build `TemplateManager`
(`initialize_templates`), `OpenAIServingChat`, `OpenAIServingResponses`
(`enable_prompt_tokens_details=True`, as V's http_server builds it),
`AnthropicServing(chat)` and `OllamaServing(tokenizer_manager)`. A request
runs as V's route runs it:

* responses: `ResponsesRequest.model_validate` -> `create_responses(req,
  None)`; the `GenerateReqInput(...)` it builds is captured (so nothing is
  generated) and its `input_ids` counted. On gpt-oss (`model_type ==
  "gpt_oss"`) this is V's harmony path.
* anthropic (0.5.9+): `AnthropicMessagesRequest.model_validate` ->
  `_convert_to_chat_completion_request` -> chat `_validate_request` ->
  `_convert_to_internal_request` (the steps of V's `handle_messages` /
  `_handle_non_streaming`, which are the same in every release that has the
  route), then V's TokenizerManager tokenization of the adapted request.
* ollama /api/chat (0.5.7+) and /api/generate: `OllamaChatRequest` /
  `OllamaGenerateRequest` -> `handle_chat` / `handle_generate`; the
  `GenerateReqInput` built is captured, then V's
  `normalize_batch_and_arguments` + `_tokenize_one_request` (or V's batch
  path, as gen_releases.tokenize chooses) run on it, as `generate_request`
  would before the scheduler. Note: 0.5.7-0.5.22 call `apply_chat_template
  (tokenize=True)` without `return_dict=False`; under transformers 5 that is
  a BatchEncoding, and what V then does with it is what is recorded.

What is recorded per case is what the tokenizer's `apply_chat_template` was
called with (the last call of the request; every release calls it with
`conversation, tools=..., tokenize=..., add_generation_prompt=..., [return_dict],
**template kwargs`): `{"messages", "tools", "extra"}` where `extra` is the
template kwargs (everything but tokenize/add_generation_prompt/return_dict/
tools), the format of gen_chat_api.py's `_render_and_encode_chat_template`
record; `"call"` is added when add_generation_prompt is not True or
continue_final_message is passed. A request that reaches the engine without a
successful `apply_chat_template` (0.5.1-0.5.13's `_make_request` falls back to
encoding "role: content" lines when the chat path raises) records
`{"fallback_prompt": text}` instead. Refusals: `"sglang_refuses"` +
`sglang_error` as gen_chat_api.py words them. `guard_` cases keep
`"guard_refuses"` and add what V did with them (`"sglang"`).

Conversion cases (no tokenizer involved, as in gen_chat_api.py): V's stack
on a template-less tokenizer (the qwen2.5 fixture with chat_template None;
model_type "qwen3", architectures ["X"], model path "m", as gen_chat_api's
Env) whose `apply_chat_template` only records and answers "" / [] (and
raises transformers' "Cannot apply chat template to an empty conversation."
on an empty one); per setting, the template manager's content format and
V's inline-system reading are set: `supports_inline_system` of the chat and
responses handlers (0.5.22+) before `AnthropicServing` is built, and
`AnthropicServing._merge_inline_system` (0.5.15+; 0.5.15-0.5.21 compute it
in its constructor from the template). Releases before 0.5.15 have neither
and ignore the setting.

Fixture counts: per fixture with a tokenizer.json and a chat template, V's
own `get_tokenizer`, V's template detection (content format, inline-system
support where V has it) and V's stack with the HEADER.json stand-in
architecture; gpt-oss /v1/responses is V's harmony path with its
`o200k_base.tiktoken` rebuilt from the fixture (gen_harmony.py's
`write_vocab`, taken from that file without importing it) and the date
pinned to 2025-01-15 (or the harmony case's date).

Harmony cases (V has serving_responses with use_harmony, 0.5.1+): every
case of harmony_expected.json in its serving setting, recorded as
`{"tokens", "ids_fnv"}` or the error, as gen_harmony.py records them.
Settings map onto V: "store" = --enable-response-store (0.5.20+; before,
responses are always stored and the setting is the default), "tools*" = a
tool server (V's `ToolServer` subclass answering browser/python as
gen_harmony.py's FakeToolServer), "tools_pd" = disaggregation_mode prefill.

`previous_response_id`: besides the guard_ case (no stored response: what V
answers), a stored-history probe runs per release: a first request is run to
completion with a stub engine (`generate_request` yields one output "ok"),
then a second request names its id; recorded: whether V stored it by
default, and the prompt the second request builds.

Probes (`PROBES`): cases beyond the 0.5.23 corpus, for shapes the older
handlers treat differently; run like the corpus (conversion in the four
settings, counts on every fixture) and recorded apart under "probes".

Output: {"version", "libraries", "harness", "routes": {api: bool},
"conversion": [gen_chat_api entries], "counts": {"fixtures": {fx:
{"supports_inline_system", "content_format", "counts"}}, "details": {fx:
{"setup", "details": {request: refusal | fallback prompt | input_ids type |
sha of the recorded arguments}}}}, "probes": {"cases", "conversion",
"counts"}, "harmony": {"setups", "cases": [...]}, "store_probe": {...},
"ollama_tf5_probe": {...}, "check": {...}} (check: the comparison with the
committed 0.5.23 values, made when V is 0.5.23; the run prints it).
$CHAT_API_ONLY=conversion,counts,probes,harmony,store,ollama runs parts only
(written to <V>.partial.json).

Comparison with 0.5.19 and with the guard's own counts: summarize_chat_api.py.
"""
import ast
import asyncio
import copy
import hashlib
import inspect
import json
import os
import sys
import tempfile
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT_DIR = os.environ.get("CHAT_API_OUT", "/work/refdata/chat_api")
HARMONY_DIR = os.path.join(HERE, "..", "encoder", "testdata")
EXPECTED_CONVERSION = os.path.join(HERE, "chat_api_expected.json")
EXPECTED_COUNTS = os.path.join(CRATE, "tests", "data", "chat_api_counts.json")
EXPECTED_HARMONY = os.path.join(HARMONY_DIR, "harmony_expected.json")


def defs_from(path, names, namespace=None):
    """The top-level definitions `names` of a Python file, executed on their own
    (the file itself is not imported: its imports set up 0.5.23 only)."""
    ns = namespace if namespace is not None else {}
    tree = ast.parse(open(path).read())
    nodes = [n for n in tree.body
             if (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names)
             or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in n.targets))]
    exec(compile(ast.Module(nodes, []), path, "exec"), ns)
    return ns


# --- sweep mode (any python3; runs each release in its own venv) -----------------
def sweep(args):
    import subprocess
    sys.path.insert(0, HERE)
    import sweep_releases as S
    if args[:1] == ["--from"]:
        lo, hi = S.key(args[1]), S.key(args[3]) if len(args) > 3 else (99,)
        todo = [v for v in S.versions() if lo <= S.key(v) <= hi]
    else:
        todo = args
    os.makedirs(os.path.join(OUT_DIR, "logs"), exist_ok=True)
    for v in todo:
        p = S.pins(v)
        venv = os.path.join(S.VENVS, f"tf-{p['transformers']}")
        env = dict(os.environ, SGLANG_SRC=os.path.join(S.WHEELS, "src", v), CHAT_API_OUT=OUT_DIR)
        env.pop("OPENAI_OVERLAY", None)
        bad = [d for d in ("transformers", "tokenizers") if d in p and S.installed(venv, d) != p[d]]
        if bad or not os.path.exists(os.path.join(venv, "bin", "python")):
            print(f"{v}: no matching venv {venv} ({bad})", flush=True)
            continue
        if "openai" in p and S.installed(venv, "openai") != p["openai"]:
            env["OPENAI_OVERLAY"] = os.path.join(S.VENVS, f"openai-{p['openai']}")
        with open(os.path.join(OUT_DIR, "logs", f"{v}.log"), "w") as log:
            r = subprocess.run([os.path.join(venv, "bin", "python"), os.path.abspath(__file__)],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"{v}: exit {r.returncode} ({venv}"
              f"{', openai ' + p['openai'] if 'OPENAI_OVERLAY' in env else ''})", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--sweep"]:
    sweep(sys.argv[2:])
    sys.exit(0)

# --- the release -------------------------------------------------------------------
sys.path.insert(0, HERE)
import release_env as E  # noqa: E402  (must come before sglang)

# gpt-oss: harmony's vocabulary rebuilt from the fixture, before any harmony import.
_H = defs_from(os.path.join(HARMONY_DIR, "gen_harmony.py"), {"O200K_SHA256", "_byte_decoder", "write_vocab"},
               {"base64": __import__("base64"), "hashlib": hashlib, "json": json, "os": os})
_VOCAB_DIR = tempfile.TemporaryDirectory()
_H["write_vocab"](os.path.join(SHARED, "tokenizers", "gpt-oss", "tokenizer.json"), _VOCAB_DIR.name)
os.environ["TIKTOKEN_ENCODINGS_BASE"] = _VOCAB_DIR.name

import gen_releases as G  # noqa: E402  (V's server pieces; imports V's protocol and chat)


def _has(rel):
    return os.path.exists(os.path.join(E.SGLANG_SRC, "sglang", *rel.split("/")))


ROUTES = {
    "responses": _has("srt/entrypoints/openai/serving_responses.py"),
    "anthropic": _has("srt/entrypoints/anthropic/serving.py"),
    "ollama": _has("srt/entrypoints/ollama/serving.py"),
}
if G.OLD_ADAPTER or not ROUTES["responses"]:
    sys.exit(f"{E.VERSION}: no /v1/responses (nor the later routes); nothing to run")

import sglang.srt.entrypoints.openai.serving_responses as sr  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as sc  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ResponsesRequest  # noqa: E402

if ROUTES["anthropic"]:
    import sglang.srt.entrypoints.anthropic.serving as an  # noqa: E402
    from sglang.srt.entrypoints.anthropic.protocol import AnthropicMessagesRequest  # noqa: E402
if ROUTES["ollama"]:
    import sglang.srt.entrypoints.ollama.serving as ol  # noqa: E402
    from sglang.srt.entrypoints.ollama.protocol import OllamaChatRequest, OllamaGenerateRequest  # noqa: E402
try:
    hu = E.release_module("sglang.srt.entrypoints.harmony_utils")
except ImportError:
    hu = None
try:
    tool_server_mod = E.release_module("sglang.srt.entrypoints.openai.tool_server")
except ImportError:
    tool_server_mod = None

# The harmony conversation date (local `datetime.datetime.now()` in harmony_utils).
import datetime as _dt  # noqa: E402

DATE = [_dt.datetime(2025, 1, 15, 12, 0, 0)]


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return DATE[0]


if hu is not None and isinstance(getattr(hu, "datetime", None), types.ModuleType):
    hu.datetime = types.SimpleNamespace(datetime=_FixedDatetime)

GenerateReqInput = G.GenerateReqInput


# --- recording apply_chat_template -----------------------------------------------
CALLS = []   # per request: {"messages","tools","extra",["call"],"ok"}
ENCODES = []  # per request: texts passed to tokenizer.encode
STANDARD = ("tokenize", "add_generation_prompt", "return_dict", "tools")


def jsonable(x):
    """The recorded arguments as JSON (pydantic models dumped, the rest repr'd)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if hasattr(x, "model_dump"):
        return {"__pydantic__": type(x).__name__, **jsonable(x.model_dump())}
    return {"__repr__": repr(x)}


def _record(conversation, kw):
    entry = {"messages": jsonable(copy.deepcopy(conversation)), "tools": jsonable(copy.deepcopy(kw.get("tools"))),
             "extra": jsonable({k: copy.deepcopy(v) for k, v in kw.items() if k not in STANDARD})}
    call = {}
    if kw.get("add_generation_prompt", False) is not True:
        call["add_generation_prompt"] = kw.get("add_generation_prompt", "<unset>")
    if "continue_final_message" in entry["extra"]:
        call["continue_final_message"] = entry["extra"].pop("continue_final_message")
    if call:
        entry["call"] = call
    entry["ok"] = False
    CALLS.append(entry)
    return entry


def hook_tokenizer(tok, fake):
    """Record each apply_chat_template call (and encode texts). fake: answer ""/[]
    without rendering (gen_chat_api's template-less tokenizer)."""
    _SAVED[id(tok)] = {k: tok.__dict__[k] for k in ("apply_chat_template", "encode") if k in tok.__dict__}
    real_apply = tok.apply_chat_template
    real_encode = tok.encode

    def apply_chat_template(conversation, *a, **kw):
        entry = _record(conversation, kw)
        if fake:
            if not conversation:
                raise ValueError("Cannot apply chat template to an empty conversation.")
            out = [] if kw.get("tokenize", True) else ""
        else:
            out = real_apply(conversation, *a, **kw)
        entry["ok"] = True
        return out

    def encode(text, *a, **kw):
        ENCODES.append(text)
        return real_encode(text, *a, **kw)

    tok.apply_chat_template = apply_chat_template
    tok.encode = encode


def unhook_tokenizer(tok):
    for k in ("apply_chat_template", "encode"):
        tok.__dict__.pop(k, None)
    tok.__dict__.update(_SAVED.pop(id(tok), {}))


_SAVED = {}


# --- V's serving stack ---------------------------------------------------------------
class Stack:
    """V's chat/responses/anthropic/ollama handlers on one tokenizer."""

    def __init__(self, tokenizer, config_json, model_path, inline=None, content_format=None, flags=None,
                 tool_server=None, counted=True):
        self.tokenizer, self.counted = tokenizer, counted
        flags = dict(flags or {})
        self.server_args = G.make_server_args(dict(flags, model_path=model_path, tokenizer_path=model_path),
                                              G.make_model_config(config_json).hf_config)
        G.BAG.server_args = self.server_args
        G.patch_accessors()
        self.tm = G.make_tokenizer_manager(tokenizer, model_path, config_json, self.server_args)
        # --served-model-name m: the corpus' requests name model "m" (V checks it from 0.5.2x)
        self.tm.served_model_name = "m"
        self.server_args.served_model_name = "m"
        self.templates = G.template_manager_mod.TemplateManager()
        self.templates.initialize_templates(tokenizer_manager=self.tm, model_path=model_path,
                                            chat_template=None, completion_template=None)
        if content_format is not None:
            self.templates._jinja_template_content_format = content_format
        self.chat = sc.OpenAIServingChat(self.tm, self.templates)
        if inline is not None and hasattr(self.chat, "supports_inline_system"):
            self.chat.supports_inline_system = inline
        params = inspect.signature(sr.OpenAIServingResponses.__init__).parameters
        kw = {"enable_prompt_tokens_details": True}
        if "tool_server" in params:
            kw["tool_server"] = tool_server
        self.resp = sr.OpenAIServingResponses(self.tm, self.templates, **kw)
        if inline is not None and hasattr(self.resp, "supports_inline_system"):
            self.resp.supports_inline_system = inline
        self.anth = an.AnthropicServing(self.chat) if ROUTES["anthropic"] else None
        if inline is not None and self.anth is not None and hasattr(self.anth, "_merge_inline_system"):
            # 0.5.15-0.5.21 probe the template themselves in AnthropicServing.__init__
            # (detect_inline_system_support(tokenizer.chat_template)); 0.5.22+ read
            # the chat handler's supports_inline_system (set above): same attribute.
            self.anth._merge_inline_system = not inline
        self.ollama = ol.OllamaServing(self.tm) if ROUTES["ollama"] else None
        self.setup = {"content_format": self.templates.jinja_template_content_format,
                      "supports_inline_system": getattr(self.chat, "supports_inline_system", None),
                      "use_harmony": getattr(self.resp, "use_harmony", None),
                      "enable_response_store": getattr(self.resp, "enable_response_store", None),
                      "is_disaggregated": getattr(self.resp, "is_disaggregated", None)}

    # each returns {"tokens": n|None, "inputs": record} | {"tokens", "fallback_prompt"} |
    # {"tokens", "ids_fnv"} (harmony) | {"error"}
    def _done(self, n):
        """The count and what reached the engine: the last successful
        apply_chat_template call, else the text V encoded itself (0.5.1-0.5.13's
        `_make_request` fallback)."""
        out = {"tokens": n if self.counted else None}
        ok = [c for c in CALLS if c["ok"]]
        if ok:
            out["inputs"] = {k: v for k, v in ok[-1].items() if k != "ok"}
        else:
            out["fallback_prompt"] = ENCODES[-1] if ENCODES else None
        return out

    def responses(self, body, harmony=False):
        """harmony: V renders with openai-harmony (gpt-oss), no template call."""
        CALLS.clear()
        ENCODES.clear()
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
            ids = captured["input_ids"]
            return {"tokens": len(ids), "ids_fnv": fnv(ids)} if harmony else self._done(len(ids))
        if captured:
            return {"error": f"GenerateReqInput without input_ids: {sorted(captured)}"}
        body = getattr(res, "body", None)
        return {"error": body.decode() if body else repr(res)}

    def anthropic(self, body):
        CALLS.clear()
        ENCODES.clear()
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
        if not self.counted:
            return self._done(None)
        try:
            n = G.tokenize(self.tm, adapted)
        except Exception as e:
            return {"error": f"tokenizer manager: {type(e).__name__}: {e}"}
        return self._done(n)

    def _ollama(self, handler, request_cls, body):
        CALLS.clear()
        ENCODES.clear()
        try:
            req = request_cls.model_validate(copy.deepcopy(body))
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        captured = {}

        class Captured(Exception):
            pass

        def capture(**kw):
            captured.update(kw)
            raise Captured()

        orig = ol.GenerateReqInput
        ol.GenerateReqInput = capture
        try:
            res = asyncio.run(getattr(self.ollama, handler)(req, None))
        except Captured:
            res = None
        except Exception as e:
            return {"error": f"{handler}: {type(e).__name__}: {e}"}
        finally:
            ol.GenerateReqInput = orig
        if not captured:
            # answered without generating (a blank /api/generate prompt)
            return {"tokens": 0, "answered_without_generating": type(res).__name__}
        out = {}
        ids = captured.get("input_ids")
        if ids is not None:
            out["input_ids_type"] = type(ids).__name__
            if not isinstance(ids, list):
                out["input_ids_repr"] = repr(ids)[:300]
        try:
            obj = GenerateReqInput(**captured)
            n = G.tokenize(self.tm, obj)
        except Exception as e:
            out["error"] = f"tokenizer manager: {type(e).__name__}: {e}"[:400]
            return out
        out["tokens"] = n
        return out

    def ollama_chat(self, body):
        return self._ollama("handle_chat", OllamaChatRequest, body)

    def ollama_generate(self, body):
        return self._ollama("handle_generate", OllamaGenerateRequest, body)


def fnv(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


# --- the corpus (the committed 0.5.23 outputs) ------------------------------------
def conversion_corpus():
    return [(e["name"], e["api"], e["body"], [(s["inline_system"], s["format"]) for s in e["settings"]])
            for e in json.load(open(EXPECTED_CONVERSION))]


def count_corpus():
    return json.load(open(EXPECTED_COUNTS))["requests"]


CONVERSION_CONFIG = {"model_type": "qwen3", "architectures": ["X"]}
_TEMPLATELESS = {}


def templateless_tokenizer():
    """gen_chat_api's conversion tokenizer: no template (qwen2.5's vocabulary,
    loaded by V's get_tokenizer; only the recorder renders)."""
    if "tok" not in _TEMPLATELESS:
        _TEMPLATELESS["tok"] = E.get_tokenizer(os.path.join(SHARED, "tokenizers", "qwen2.5"))
    tok = _TEMPLATELESS["tok"]
    tok.chat_template = None
    return tok


def run_conversion(cases=None):
    out = []
    tok = templateless_tokenizer()
    stacks = {}
    for name, api, body, settings in (cases if cases is not None else conversion_corpus()):
        entry = {"name": name, "api": api, "body": body, "settings": []}
        for inline, fmt in settings:
            setting = {"inline_system": inline, "format": fmt}
            if not ROUTES[api]:
                setting["expect"] = "no_route"
                entry["settings"].append(setting)
                continue
            if (inline, fmt) not in stacks:
                unhook_tokenizer(tok)
                stacks[(inline, fmt)] = Stack(tok, CONVERSION_CONFIG, "m", inline=inline, content_format=fmt,
                                              counted=False)
            st = stacks[(inline, fmt)]
            G.BAG.server_args = st.server_args
            hook_tokenizer(tok, fake=True)
            try:
                res = st.responses(body) if api == "responses" else st.anthropic(body)
            except Exception as e:  # a harness failure, not V's answer
                res = {"error": f"HARNESS {type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
            finally:
                unhook_tokenizer(tok)
            if name.startswith("guard_"):
                setting["expect"] = "guard_refuses"
                setting["sglang"] = {k: v for k, v in res.items() if k != "tokens"}
            elif "error" in res:
                setting["expect"] = "sglang_refuses"
                setting["sglang_error"] = str(res["error"])[:300]
                if "trace" in res:
                    setting["trace"] = res["trace"]
            elif "inputs" in res:
                setting["expect"] = res["inputs"]
            else:
                setting["expect"] = {"fallback_prompt": res.get("fallback_prompt")}
            entry["settings"].append(setting)
        out.append(entry)
        print(f"{E.VERSION} conversion {api}/{name}: "
              f"{[s['expect'] if isinstance(s['expect'], str) else 'args' for s in entry['settings']]}", flush=True)
    return out


def fixture_stack(fixture, flags=None):
    d = os.path.join(SHARED, "tokenizers", fixture)
    if not os.path.exists(os.path.join(d, "tokenizer.json")):
        return None, "no tokenizer.json"
    standin = json.load(open(os.path.join(SHARED, "goldens", "HEADER.json")))["sglang"]["tokenizers"][fixture][
        "model_standin"]
    tok, counted = G.load_tokenizer(fixture)
    if not tok.chat_template:
        return None, "no chat template (SGLang encodes it with its own encoder)"
    return Stack(tok, standin, standin["model_path"], flags=flags), None


def run_counts(requests=None):
    requests = requests if requests is not None else count_corpus()
    expected_fixtures = sorted(json.load(open(EXPECTED_COUNTS))["fixtures"])
    fixtures, skipped, details = {}, {}, {}
    for fx in sorted(os.listdir(os.path.join(SHARED, "tokenizers"))):
        if not os.path.isdir(os.path.join(SHARED, "tokenizers", fx)):
            continue
        try:
            st, why = fixture_stack(fx)
        except Exception as e:
            skipped[fx] = f"stack: {type(e).__name__}: {e}"[:300]
            continue
        if st is None:
            skipped[fx] = why
            continue
        counts, det = {}, {}
        hook_tokenizer(st.tokenizer, fake=False)
        try:
            for key, body in requests.items():
                api = key.split("/")[0]
                if not ROUTES["ollama" if api.startswith("ollama") else api]:
                    counts[key] = "no_route"
                    continue
                G.BAG.server_args = st.server_args
                if api == "responses":
                    res = st.responses(body, harmony=bool(st.setup["use_harmony"]))
                else:
                    res = getattr(st, api)(body)
                if "error" in res:
                    counts[key] = "sglang_refuses"
                    det[key] = {k: v for k, v in res.items() if k != "tokens"}
                else:
                    counts[key] = res["tokens"]
                    extra = {k: v for k, v in res.items() if k in ("fallback_prompt", "input_ids_type",
                                                                    "input_ids_repr", "ids_fnv")}
                    if "inputs" in res:
                        extra["inputs_sha256"] = hashlib.sha256(
                            json.dumps(res["inputs"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
                    if extra:
                        det[key] = extra
        finally:
            unhook_tokenizer(st.tokenizer)
        fixtures[fx] = {"supports_inline_system": st.setup["supports_inline_system"],
                        "content_format": st.setup["content_format"], "counts": counts}
        details[fx] = {"setup": st.setup, "details": det}
        print(f"{E.VERSION} counts {fx}: {sum(isinstance(v, int) for v in counts.values())} counted, "
              f"{sum(v == 'sglang_refuses' for v in counts.values())} refused", flush=True)
    return {"fixtures": fixtures, "skipped": skipped, "details": details,
            "missing_vs_0523": sorted(set(expected_fixtures) - set(fixtures))}



# --- probes: cases beyond the 0.5.23 corpus ---------------------------------------
# Shapes the older handlers treat differently (found by reading them; see
# /work/refdata/chat_api/SUMMARY.md): well-formed items as the older openai types
# require them, list content (0.5.1-0.5.13 `_make_request` falls back to
# "role: content" lines when the chat request does not validate), and the
# Anthropic block orders and blank texts the older conversions treat otherwise.
# Run like the corpus (conversion over the four settings, counts on every fixture)
# and recorded under "probes".
PROBE_SETTINGS = [(True, "string"), (False, "string"), (True, "openai"), (False, "openai")]
_FN = {"type": "function", "name": "get_weather", "description": "Weather for a city",
       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
_CALL = [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
          "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
         {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp\": 21}"}]
PROBES = [
    ("parts_user_only", "responses", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "there"}]}]}),
    ("parts_many", "responses", {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": f"w{i}"} for i in range(200)]}]}),
    ("parts_then_string_turns", "responses", {"model": "m", "instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]}),
    ("message_type_string", "responses", {"model": "m", "input": [{"type": "message", "role": "user", "content": "Hi"}]}),
    ("string_multi_turn", "responses", {"model": "m", "input": [
        {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]}),
    ("assistant_output_full", "responses", {"model": "m", "input": [
        {"role": "user", "content": "Q"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "A1", "annotations": []}]},
        {"role": "user", "content": "Q2"}]}),
    ("function_call_full", "responses", {"model": "m", "input": [
        {"role": "user", "content": "Weather?"}, *_CALL, {"role": "user", "content": "Thanks"}]}),
    ("function_call_full_tools", "responses", {"model": "m", "tools": [_FN], "input": [
        {"role": "user", "content": "Weather?"}, *_CALL, {"role": "user", "content": "Thanks"}]}),
    ("reasoning_full", "responses", {"model": "m", "input": [
        {"role": "user", "content": "Q"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking hard"}]},
        {"role": "assistant", "content": "A"}, {"role": "user", "content": "Q2"}]}),
    ("tool_only_fn", "responses", {"model": "m", "tools": [_FN], "input": "Hi"}),
    ("effort_low", "responses", {"model": "m", "reasoning": {"effort": "low"}, "input": "Hi"}),
    ("system_blocks_blank", "anthropic", {"model": "m", "max_tokens": 16, "system": [{"type": "text", "text": "  "}],
                                          "messages": [{"role": "user", "content": "Hello"}]}),
    ("user_text_blocks", "anthropic", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
    ("user_blank_text_block", "anthropic", {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
        {"type": "text", "text": " "}, {"type": "text", "text": "b"}]}]}),
    ("assistant_texts_and_tool_use", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}),
    ("assistant_empty_text", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": "Q2"}]}),
    ("text_then_tool_result", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "before"},
                                     {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}),
    ("tool_result_then_text", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                     {"type": "text", "text": "after"}]}]}),
    ("tool_result_text_list", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": f"line {i}"} for i in range(20)]}]}]}),
    ("tool_result_is_error_text", "anthropic", {"model": "m", "max_tokens": 16, "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": "boom"}]}]}),
    ("tools_default_choice", "anthropic", {"model": "m", "max_tokens": 16,
                                           "tools": [{"name": "a", "description": "A tool",
                                                      "input_schema": {"type": "object", "properties": {}}}],
                                           "messages": [{"role": "user", "content": "Go"}]}),
]

# --- harmony ------------------------------------------------------------------------
def make_tool_server(tools):
    """gen_harmony.py's FakeToolServer on V's ToolServer (None without one)."""
    if tool_server_mod is None or not hasattr(tool_server_mod, "ToolServer"):
        return None
    import contextlib
    from openai_harmony import ToolNamespaceConfig
    ns = defs_from(os.path.join(HARMONY_DIR, "gen_harmony.py"), {"FakeToolServer"},
                   {"ToolServer": tool_server_mod.ToolServer, "ToolNamespaceConfig": ToolNamespaceConfig,
                    "contextlib": contextlib})
    return ns["FakeToolServer"](tools)


def harmony_stack(setting, settings, extra_flags=None):
    s = settings[setting]
    d = "gpt-oss"
    standin = json.load(open(os.path.join(SHARED, "goldens", "HEADER.json")))["sglang"]["tokenizers"][d][
        "model_standin"]
    tok, _ = G.load_tokenizer(d)
    flags = {}
    note = []
    if s["store"]:
        if "enable_response_store" in G.SERVER_ARGS_FIELDS:
            flags["enable_response_store"] = True
        else:
            note.append("no --enable-response-store: responses always stored")
    if s["pd"]:
        flags["disaggregation_mode"] = "prefill"
    ts = None
    if s["tool_server"] is not None:
        ts = make_tool_server(tuple(s["tool_server"]))
        if ts is None:
            note.append("no ToolServer class")
    flags.update(extra_flags or {})
    st = Stack(tok, standin, standin["model_path"], flags=flags, tool_server=ts)
    st.setup["note"] = note
    return st


def run_harmony():
    data = json.load(open(EXPECTED_HARMONY))
    settings = data["settings"]
    stacks, out = {}, []
    for case in data["cases"]:
        setting = case["setting"]
        if setting not in stacks:
            try:
                stacks[setting] = harmony_stack(setting, settings)
            except Exception as e:
                stacks[setting] = f"{type(e).__name__}: {e}"[:300]
        st = stacks[setting]
        if isinstance(st, str):
            out.append({"name": case["name"], "setting": setting, "sglang": {"error": "HARNESS " + st}})
            continue
        G.BAG.server_args = st.server_args
        DATE[0] = _dt.datetime.strptime(case["date"], "%Y-%m-%d").replace(hour=12)
        try:
            res = st.responses(case["body"], harmony=True)
        except Exception as e:
            res = {"error": f"HARNESS {type(e).__name__}: {e}"}
        out.append({"name": case["name"], "setting": setting, "sglang": {k: (v[:400] if isinstance(v, str) else v)
                                                                        for k, v in res.items()}})
    DATE[0] = _dt.datetime(2025, 1, 15, 12)
    setups = {k: (v.setup if not isinstance(v, str) else v) for k, v in stacks.items()}
    print(f"{E.VERSION} harmony: {sum('tokens' in c['sglang'] for c in out)} counted of {len(out)}", flush=True)
    return {"setups": setups, "cases": out}


# --- stored history (previous_response_id) ------------------------------------------
STORE_VARIANTS = {"default": {}, "enable_response_store": {"enable_response_store": True},
                  "enable_response_store+pd": {"enable_response_store": True, "disaggregation_mode": "prefill"},
                  "pd": {"disaggregation_mode": "prefill"}}


def store_probes():
    out = {}
    for fx in ("qwen2.5", "gpt-oss"):
        for name, flags in STORE_VARIANTS.items():
            if any(k not in G.SERVER_ARGS_FIELDS for k in flags):
                out[f"{fx}/{name}"] = {"skipped": f"no --{'/'.join(flags)} in this release"}
                continue
            startable = startup_check(flags)
            if startable is not None:
                out[f"{fx}/{name}"] = {"not_startable": startable}
                continue
            try:
                out[f"{fx}/{name}"] = store_probe(fx, flags)
            except Exception as e:
                out[f"{fx}/{name}"] = {"error": f"HARNESS {type(e).__name__}: {e}"[:300]}
    return out


def startup_check(flags):
    """V's start-up validation of the response store (0.5.20+:
    arg_groups/validation_hook.validate_response_store), or None when it passes
    or V has none."""
    try:
        hook = E.release_module("sglang.srt.arg_groups.validation_hook")
    except ImportError:
        return None
    fn = getattr(hook, "validate_response_store", None)
    if fn is None:
        return None
    sa = G.make_server_args(dict(flags))
    try:
        fn(sa)
    except (ValueError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    except Exception as e:
        return f"HARNESS could not run validate_response_store: {type(e).__name__}: {e}"
    return None


def store_probe(fixture, flags):
    """Run a first response to completion with a stub engine; then a second request
    names it. What V stores by default and what the second prompt holds."""
    st, why = fixture_stack(fixture, flags) if fixture != "gpt-oss" else (harmony_stack("default", json.load(
        open(EXPECTED_HARMONY))["settings"], flags), None)
    if st is None:
        return {"skipped": why}
    harmony = bool(st.setup["use_harmony"])
    tok = st.tokenizer
    out_ids = tok.encode("ok", add_special_tokens=False)

    async def generate_request(obj, request=None):
        n = len(obj.input_ids) if getattr(obj, "input_ids", None) is not None else 0
        meta = {"id": "x", "prompt_tokens": n, "completion_tokens": len(out_ids), "cached_tokens": 0,
                "finish_reason": {"type": "stop", "matched": None}, "output_token_logprobs": [],
                "e2e_latency": 0.0}
        yield {"text": "ok", "output_ids": list(out_ids), "meta_info": meta, "index": 0}

    st.tm.generate_request = generate_request
    res = {"harmony": harmony, "setup": st.setup}
    hook_tokenizer(tok, fake=False)
    try:
        first = asyncio.run(st.resp.create_responses(ResponsesRequest.model_validate(
            {"model": "m", "input": "Remember the word banana.", "instructions": "Be brief."}), None))
        rid = getattr(first, "id", None)
        res["first"] = {"type": type(first).__name__, "id": rid,
                        "body": (getattr(first, "body", b"") or b"").decode()[:300] or None,
                        "stored": bool(rid and rid in st.resp.response_store),
                        "msg_store_keys": len(st.resp.msg_store)}
        if rid:
            second = st.responses({"model": "m", "previous_response_id": rid, "input": "Which word?"},
                                  harmony=harmony)
            alone = st.responses({"model": "m", "input": "Which word?"}, harmony=harmony)
            res["second"] = second
            res["second_alone"] = alone
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:400]
        res["trace"] = traceback.format_exc()[-1500:]
    finally:
        unhook_tokenizer(tok)
    return res


# --- Ollama under transformers 5 ----------------------------------------------------
def ollama_probe():
    """What V's handle_chat hands the engine, and what the TokenizerManager makes of
    it, on qwen2.5 (the BatchEncoding question): see Stack._ollama."""
    if not ROUTES["ollama"]:
        return {"skipped": "no /api/chat"}
    st, _ = fixture_stack("qwen2.5")
    hook_tokenizer(st.tokenizer, fake=False)
    try:
        body = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "Why is the sky blue?"}]}
        res = st.ollama_chat(body)
        direct = st.tokenizer.apply_chat_template([{"role": "user", "content": "Why is the sky blue?"}],
                                                  tokenize=True, add_generation_prompt=True)
        res["apply_chat_template_returns"] = type(direct).__name__
        res["list_len"] = len(direct["input_ids"]) if not isinstance(direct, list) else len(direct)
    finally:
        unhook_tokenizer(st.tokenizer)
    return res


# --- the 0.5.23 check ---------------------------------------------------------------------
def check_0523(conversion, counts, harmony):
    exp_conv = json.load(open(EXPECTED_CONVERSION))
    exp_counts = json.load(open(EXPECTED_COUNTS))["fixtures"]
    exp_h = {c["name"]: c for c in json.load(open(EXPECTED_HARMONY))["cases"]}
    diffs, n = [], 0
    for got, exp in zip(conversion, exp_conv):
        assert got["name"] == exp["name"]
        for gs, es in zip(got["settings"], exp["settings"]):
            n += 1
            if gs["expect"] != es["expect"] or gs.get("sglang_error") != es.get("sglang_error"):
                diffs.append({"case": f"{got['api']}/{got['name']}", "setting": [es["inline_system"], es["format"]],
                              "got": gs.get("sglang_error", gs["expect"]), "expected": es.get("sglang_error",
                                                                                             es["expect"])})
    cdiffs, m = [], 0
    for fx, e in exp_counts.items():
        g = counts["fixtures"].get(fx)
        if g is None:
            cdiffs.append({"fixture": fx, "missing": True})
            continue
        for k in ("supports_inline_system", "content_format"):
            if g[k] != e[k]:
                cdiffs.append({"fixture": fx, k: [g[k], e[k]]})
        for key, v in e["counts"].items():
            m += 1
            if g["counts"].get(key) != v:
                cdiffs.append({"fixture": fx, "request": key, "got": g["counts"].get(key), "expected": v})
    hdiffs, h = [], 0
    for c in harmony["cases"]:
        e = exp_h[c["name"]]
        h += 1
        if e["expect"] == "guard_refuses":
            continue
        got = c["sglang"]
        if e["expect"] == "sglang_refuses":
            if "error" not in got:
                hdiffs.append({"case": c["name"], "got": got, "expected": "sglang_refuses"})
        elif got != e["expect"]:
            hdiffs.append({"case": c["name"], "got": got, "expected": e["expect"]})
    return {"conversion": {"compared": n, "differences": diffs},
            "counts": {"compared": m, "differences": cdiffs},
            "harmony": {"compared": h, "differences": hdiffs}}


def main():
    out = {"version": E.VERSION, "routes": ROUTES, "harness": {}}
    only = set(filter(None, os.environ.get("CHAT_API_ONLY", "").split(",")))
    if not only or "conversion" in only:
        out["conversion"] = run_conversion()
    if not only or "counts" in only:
        out["counts"] = run_counts()
    if not only or "probes" in only:
        out["probes"] = {"cases": {f"{api}/{name}": body for name, api, body in PROBES},
                         "conversion": run_conversion([(n, a, b, PROBE_SETTINGS) for n, a, b in PROBES]),
                         "counts": run_counts({f"{a}/{n}": b for n, a, b in PROBES})}
    if not only or "harmony" in only:
        out["harmony"] = run_harmony() if hu is not None else {"skipped": "no harmony_utils"}
    if not only or "store" in only:
        out["store_probe"] = store_probes()
    if not only or "ollama" in only:
        out["ollama_tf5_probe"] = ollama_probe()
    if E.VERSION == "0.5.23" and not only:
        out["check"] = check_0523(out["conversion"], out["counts"], out["harmony"])
        c = out["check"]
        print("check: " + ", ".join(f"{k} {v['compared']} compared, {len(v['differences'])} differ"
                                   for k, v in c.items()), flush=True)
    out["libraries"] = E.libraries()
    out["harness"] = {"stubbed": sorted({m.split(".")[0] if not m.startswith("sglang") else m for m in E.STUBBED}),
                      "patches_skipped": E.PATCHES_SKIPPED, "openai_overlay": os.environ.get("OPENAI_OVERLAY"),
                      "strftime_now_pinned_to": E.FIXED_NOW.isoformat()}
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, f"{E.VERSION}.json" if not only else f"{E.VERSION}.partial.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
