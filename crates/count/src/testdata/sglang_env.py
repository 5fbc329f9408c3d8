"""SGLang 0.5.23's Python code, importable without a GPU stack.

Developer machine only (CI never runs Python): the generators of expected
values (`crates/count/src/testdata/gen_*.py`, `crates/count/src/encoder/testdata/gen_*.py`)
import this first. It stubs the GPU-side imports (torch, triton, ...), puts the
unpacked wheel ($SGLANG_SRC, `pip download --no-deps sglang==0.5.23 && unzip`)
on sys.path, pins `strftime_now` to 2025-01-15 12:00:00 as the goldens do, and
loads tokenizers as SGLang loads them under transformers 5.19
(`get_tokenizer`, the replica that reproduces every golden in ../shared).

Requires Python 3.11 with: pydantic==2.14.4 transformers==5.19.0
tokenizers==0.23.2 jinja2==3.1.6 orjson==3.13.0 msgspec==0.23.0
fastapi==0.165.0 jsonschema==4.26.0 openai==2.8.0 openai-harmony==0.0.4
deepseek-recipe==0.2.0 numpy pillow psutil pybase64 pyzmq requests aiohttp
partial-json-parser.
"""
import datetime as _dt
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import types
import warnings
from unittest.mock import MagicMock

logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")

# --- stubs for the GPU-side imports --------------------------------------------
STUB = ("torchvision", "torchaudio", "torch", "torch_npu", "triton", "IPython", "xgrammar", "sglang.kernels",
        "sglang.srt.configs", "sglang.srt.distributed", "sglang.srt.layers",
        "sglang.srt.managers.schedule_batch", "sglang.srt.model_executor",
        "sglang.srt.hardware_backend", "sglang.srt.utils.hf_transformers",
        "sglang.srt.utils.hf_transformers_utils")


class Mod(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        m = MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, m)
        return m


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if any(fullname == p or fullname.startswith(p + ".") for p in STUB):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = Mod(spec.name)
        m.__path__ = []
        m.__version__ = "2.9.0"
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Finder())
sys.path.insert(0, os.environ.get("SGLANG_SRC", "/tmp/sgl3"))
sys.modules["sglang.srt.utils.hf_transformers_patches"] = Mod("sglang.srt.utils.hf_transformers_patches")
sys.modules["transformers.activations"] = Mod("transformers.activations")
import msgspec  # noqa: E402

_RealDecoder = msgspec.msgpack.Decoder


class _LenientDecoder:
    def __init__(self, *a, **k):
        try:
            self._d = _RealDecoder(*a, **k)
        except TypeError:
            self._d = None


msgspec.msgpack.Decoder = _LenientDecoder
from pydantic import BaseModel as _BM, ConfigDict as _CD  # noqa: E402


class _StructuralTag(_BM):
    model_config = _CD(extra="allow")


_xg = Mod("xgrammar")
_xg.__path__ = []
_xg.StructuralTag = _StructuralTag
sys.modules["xgrammar"] = _xg

# --- strftime_now pinned -------------------------------------------------------
from transformers.utils import chat_template_utils as ctu  # noqa: E402

FIXED_NOW = _dt.datetime(2025, 1, 15, 12, 0, 0)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime
ctu._compile_jinja_template.cache_clear()

def get_tokenizer(d):
    """SGLang's tokenizer loading under transformers 5.19 (see module docstring)."""
    import transformers
    from tokenizers import Tokenizer as RawTokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    kw = dict(trust_remote_code=False, tokenizer_revision=None, clean_up_tokenization_spaces=False, use_fast=True)
    tok = AutoTokenizer.from_pretrained(d, **kw)
    if type(tok).__name__ == "TokenizersBackend":
        kw2 = {**kw, "use_fast": False}
        tok = AutoTokenizer.from_pretrained(d, **kw2)
        if type(tok).__name__ == "TokenizersBackend":
            cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
            cn = cfg.get("tokenizer_class")
            if cn and cn not in ("PreTrainedTokenizer", "PreTrainedTokenizerBase"):
                cls = getattr(transformers, cn, None)
                if cls is not None:
                    tok = cls.from_pretrained(d, **kw2)
    backend = tok._tokenizer
    p = os.path.join(d, "tokenizer.json")
    if os.path.exists(p):
        raw = RawTokenizer.from_file(p)
        rp = type(raw.pre_tokenizer).__name__ if raw.pre_tokenizer else None
        lp = type(backend.pre_tokenizer).__name__ if backend.pre_tokenizer else None
        if rp and lp and rp != lp:
            backend.pre_tokenizer = raw.pre_tokenizer
            backend.decoder = raw.decoder
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    if cfg.get("tokenizer_class", "") in {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                          "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast",
                                          "CohereTokenizerFast"}:
        changed = False
        for attr in ("add_bos_token", "add_eos_token"):
            v = cfg.get(attr)
            if v is None:
                v = {"add_bos_token": True, "add_eos_token": False}[attr]
            if attr == "add_eos_token" and isinstance(tok, PreTrainedTokenizerFast):
                v = False
            if getattr(tok, attr, None) != v:
                setattr(tok, "_" + attr, v)
                changed = True
        if changed and hasattr(tok, "update_post_processor"):
            tok.update_post_processor()
    return tok


def template_of(d):
    """The checkpoint's chat template as transformers reads it (`chat_template.jinja`
    first, then `tokenizer_config.json`; the first of a named list), or None."""
    p = os.path.join(d, "chat_template.jinja")
    if os.path.exists(p):
        return open(p).read()
    t = json.load(open(os.path.join(d, "tokenizer_config.json"))).get("chat_template")
    if isinstance(t, list):
        t = t[0]["template"]
    return t
