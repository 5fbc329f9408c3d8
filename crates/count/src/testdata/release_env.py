"""Any SGLang release's Python request code, importable without a GPU stack.

Developer machine only (CI never runs Python). The generalisation of
sglang_env.py (which is 0.5.23-only) to every release from 0.4.5 on, for
gen_releases.py. Importing this module:

* puts the unpacked wheel of one release ($SGLANG_SRC, the directory that
  holds `sglang/`; e.g. `pip download --no-deps sglang==0.5.11 && unzip`) at
  the front of sys.path;
* stubs the GPU-side imports (torch, triton, sgl_kernel, the model executor,
  layers, distributed, ...) with modules whose every attribute is a
  MagicMock, and xgrammar with a pydantic StructuralTag (the request
  protocol of recent releases subclasses it). The module paths stubbed are
  the union over releases (they move: `sglang.srt.hf_transformers_utils`,
  `sglang.srt.utils.hf_transformers_utils`,
  `sglang.srt.utils.hf_transformers.tokenizer`; these are NOT stubbed: each
  release loads tokenizers with its own `get_tokenizer`);
* pins transformers' `strftime_now` to 2025-01-15 12:00:00, as the goldens do
  (whichever transformers module compiles chat templates in the installed
  version).

It must run under the transformers (and tokenizers) version the release pins:
one venv per pin, /work/venvs/tf-<version> (see gen_releases.py).

Helpers exported: VERSION (the release), RELEASE (tuple), release_module()
(the first of several dotted names that imports), get_tokenizer (the
release's own), libraries() (versions of the libraries actually imported).
"""
import datetime as _dt
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import logging
import os
import re
import sys
import types
import warnings
from unittest.mock import MagicMock

logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SGLANG_SRC = os.environ.get("SGLANG_SRC")
if not SGLANG_SRC or not os.path.isdir(os.path.join(SGLANG_SRC, "sglang")):
    raise SystemExit("set SGLANG_SRC to the unpacked wheel (the directory holding sglang/)")

# openai as the release pins it: an overlay directory (`pip install --no-deps
# --target /work/venvs/openai-<v> openai==<v>`) goes in front of the venv's copy
# when the venv's version differs from the pin (set by gen_releases.py through
# $OPENAI_OVERLAY).
if os.environ.get("OPENAI_OVERLAY"):
    sys.path.insert(0, os.environ["OPENAI_OVERLAY"])
sys.path.insert(0, SGLANG_SRC)

# --- stubs for the GPU-side imports --------------------------------------------
STUB = (
    "torchvision", "torchaudio", "torch", "torch_npu", "triton", "IPython", "sgl_kernel", "xgrammar",
    "flashinfer", "vllm", "decord", "outlines", "outlines_core", "llguidance", "cuda",
    "nvidia", "deep_gemm", "torch_memory_saver", "sglang.kernels", "sglang.jit_kernel",
    "sglang.srt.configs", "sglang.srt.distributed", "sglang.srt.layers",
    "sglang.srt.managers.schedule_batch", "sglang.srt.model_executor", "sglang.srt.models",
    "sglang.srt.hardware_backend", "sglang.srt.mem_cache", "sglang.srt.lora",
    "sglang.srt.speculative", "sglang.srt.model_loader", "sglang.srt.custom_op",
    "sglang.srt._custom_ops", "sglang.srt.multimodal.evs",
)
# A stub in STUB can be lifted per run ($RELEASE_ENV_UNSTUB, comma separated).
_UNSTUB = set(filter(None, os.environ.get("RELEASE_ENV_UNSTUB", "").split(",")))
STUB = tuple(p for p in STUB if p not in _UNSTUB)
STUBBED = []


class _StubBase:
    """What a class deriving from a stubbed class derives from instead: accepts any
    constructor arguments; an instance called on one function returns it (so
    `@SomeTorchDecorator()` leaves the function as it is)."""

    def __init__(self, *a, **k):
        pass

    def __init_subclass__(cls, **k):
        pass

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return MagicMock()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return MagicMock()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class StubMock(MagicMock):
    """A MagicMock that can be a base class (PEP 560): `class X(torch.nn.Module)`
    derives X from _StubBase. (A plain MagicMock base makes X a MagicMock whose
    side effect is the tuple of bases, which breaks after the first call.)"""

    def __mro_entries__(self, bases):
        return (_StubBase,)


class Mod(types.ModuleType):
    """A module whose every public attribute is a StubMock."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        m = StubMock(name=f"{self.__name__}.{name}")
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
        STUBBED.append(spec.name)
        return m

    def exec_module(self, module):
        _real_type_aliases(module)


def _real_type_aliases(module):
    """A stubbed sglang module keeps its top-level typing aliases
    (`SamplingLogprobsMode = Literal["selected", "support"]`): request
    dataclasses validated by pydantic name them in annotations."""
    if not module.__name__.startswith("sglang."):
        return
    import ast
    base = os.path.join(SGLANG_SRC, *module.__name__.split("."))
    path = base + ".py" if os.path.exists(base + ".py") else os.path.join(base, "__init__.py")
    if not os.path.exists(path):
        return
    import enum
    import typing
    ns = {k: getattr(typing, k) for k in ("Literal", "Union", "Optional", "List", "Dict", "Tuple", "Any")}
    ns.update(Enum=enum.Enum, IntEnum=enum.IntEnum, auto=enum.auto, enum=enum)
    for node in ast.parse(open(path).read()).body:
        # names it re-exports from an sglang module that is not stubbed (enums such
        # as Modality live in sglang.srt.multimodal.modality)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sglang.") \
                and not any(node.module == p or node.module.startswith(p + ".") for p in STUB):
            try:
                src = importlib.import_module(node.module)
            except Exception:
                continue
            for a in node.names:
                if hasattr(src, a.name) and isinstance(getattr(src, a.name), type):
                    setattr(module, a.asname or a.name, getattr(src, a.name))
            continue
        if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id in ("Enum", "IntEnum", "str"))
                or (isinstance(b, ast.Attribute) and b.attr in ("Enum", "IntEnum")) for b in node.bases) \
                and any(isinstance(b, (ast.Name, ast.Attribute)) and getattr(b, "id", getattr(b, "attr", ""))
                        .endswith("Enum") for b in node.bases):
            try:
                exec(compile(ast.Module([node], []), path, "exec"), ns)
                setattr(module, node.name, ns[node.name])
            except Exception:
                pass
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Subscript) and isinstance(node.value.value, ast.Name) \
                and node.value.value.id in ("Literal", "Union", "Optional"):
            try:
                exec(compile(ast.Module([node], []), path, "exec"), ns)
                setattr(module, node.targets[0].id, ns[node.targets[0].id])
            except Exception:
                pass


# transformers decides once (cached, or a module constant in 4.x) whether torch is
# installed; it must decide "no" before the stubs exist, or it imports its
# torch-only modules (modeling_utils, activations) against them.
import transformers.utils.import_utils as _tf_iu  # noqa: E402

for _f in ("is_torch_available", "is_torchvision_available", "is_torchaudio_available",
           "is_triton_available", "is_flash_attn_2_available", "is_torch_cuda_available"):
    try:
        getattr(_tf_iu, _f, lambda: None)()
    except Exception:
        pass
TORCH_AVAILABLE_TO_TRANSFORMERS = bool(_tf_iu.is_torch_available())

sys.meta_path.insert(0, Finder())

# sglang/__init__ (0.5.11+) applies transformers compatibility patches at import
# (`hf_transformers_patches.apply_all`): rope/flash-attn/image-processor/modeling
# shims, none of them about tokenization. Some import modeling code that needs
# real torch. Each patch is run on its own; those that fail on the stubs are
# skipped and listed in PATCHES_SKIPPED.
PATCHES_SKIPPED = []


class _PatchesFinder(importlib.abc.MetaPathFinder):
    NAME = "sglang.srt.utils.hf_transformers_patches"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            if not hasattr(module, "apply_all"):
                return
            import inspect
            calls = re.findall(r"^\s+(_?[a-z_]+)\(\)\s*$", inspect.getsource(module.apply_all), re.M)

            def apply_all():
                if getattr(module, "_applied", False):
                    return
                module._applied = True
                for name in calls:
                    fn = getattr(module, name, None)
                    if fn is None:
                        continue
                    try:
                        fn()
                    except Exception as e:  # needs the real torch / modeling code
                        PATCHES_SKIPPED.append(f"{name}: {type(e).__name__}")

            module.apply_all = apply_all

        spec.loader = types.SimpleNamespace(create_module=spec.loader.create_module, exec_module=exec_module)
        return spec


sys.meta_path.insert(0, _PatchesFinder())

# transformers' activation functions build torch modules at import; config
# classes reach them through type validators. Model code only.
sys.modules["transformers.activations"] = Mod("transformers.activations")
STUBBED.append("transformers.activations")


def _skip_stubbed_registrations():
    """SGLang registers its own config/processor classes with transformers' Auto*
    classes at import; under the stubs those are MagicMocks, which transformers
    refuses. Registrations of a MagicMock are skipped (model config classes;
    none of the fixtures' tokenizers resolve through them)."""
    import transformers
    for auto in ("AutoConfig", "AutoTokenizer"):
        cls = getattr(transformers, auto, None)
        if cls is None or not hasattr(cls, "register"):
            continue
        real = cls.register

        def register(*args, _real=real, **kwargs):
            if any(isinstance(a, MagicMock) for a in list(args) + list(kwargs.values())):
                return None
            return _real(*args, **kwargs)

        cls.register = staticmethod(register)


_skip_stubbed_registrations()

# transformers must not believe the stubbed torch is real: it checks
# importlib.metadata for the distribution, which the stub does not have.
import msgspec  # noqa: E402

_RealDecoder = msgspec.msgpack.Decoder


class _LenientDecoder:
    """msgspec decoders of stubbed (MagicMock) types fail to build; they are never used."""

    def __init__(self, *a, **k):
        try:
            self._d = _RealDecoder(*a, **k)
        except TypeError:
            self._d = None

    def decode(self, *a, **k):
        return self._d.decode(*a, **k)


msgspec.msgpack.Decoder = _LenientDecoder
from pydantic import BaseModel as _BM, ConfigDict as _CD  # noqa: E402


class _StructuralTag(_BM):
    model_config = _CD(extra="allow")


_xg = Mod("xgrammar")
_xg.__path__ = []
_xg.__version__ = "0.0.0"
_xg.StructuralTag = _StructuralTag
sys.modules["xgrammar"] = _xg
STUBBED.append("xgrammar")

# --- strftime_now pinned -------------------------------------------------------
FIXED_NOW = _dt.datetime(2025, 1, 15, 12, 0, 0)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def _pin_strftime():
    """Pin `datetime.now()` in the transformers module that defines strftime_now."""
    pinned = []
    for name in ("transformers.utils.chat_template_utils", "transformers.tokenization_utils_base"):
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        if hasattr(mod, "datetime"):
            src = open(mod.__file__).read()
            if "strftime_now" in src:
                if isinstance(mod.datetime, type):  # `from datetime import datetime`
                    mod.datetime = _FixedDatetime
                else:  # `import datetime` -> datetime.datetime.now()
                    mod.datetime = types.SimpleNamespace(**{k: getattr(_dt, k) for k in dir(_dt)
                                                            if not k.startswith("__")})
                    mod.datetime.datetime = _FixedDatetime
                pinned.append(name)
        cc = getattr(mod, "_compile_jinja_template", None)
        if cc is not None and hasattr(cc, "cache_clear"):
            cc.cache_clear()
    if not pinned:
        raise RuntimeError("strftime_now not found in transformers")
    return pinned


PINNED_IN = _pin_strftime()


# --- the release ---------------------------------------------------------------
def _read_version():
    for rel in ("sglang/_version.py", "sglang/version.py"):
        p = os.path.join(SGLANG_SRC, rel)
        if os.path.exists(p):
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?[\"']([^\"']+)", open(p).read())
            if m:
                return m.group(1)
    raise RuntimeError("no version in sglang/_version.py or sglang/version.py")


VERSION = _read_version()
RELEASE = tuple(int(x) for x in re.findall(r"\d+", VERSION.split("post")[0])[:3])
POST = int(VERSION.split("post")[1]) if "post" in VERSION else 0


def release_module(*names):
    """The first of `names` that exists in this release, imported."""
    for n in names:
        path = os.path.join(SGLANG_SRC, *n.split(".")) 
        if os.path.exists(path + ".py") or os.path.isdir(path):
            return importlib.import_module(n)
    raise ImportError(f"none of {names} in {VERSION}")


def tokenizer_module():
    """The module holding this release's `get_tokenizer`."""
    return release_module("sglang.srt.utils.hf_transformers.tokenizer",
                          "sglang.srt.utils.hf_transformers_utils",
                          "sglang.srt.hf_transformers_utils")


def get_tokenizer(path, **kwargs):
    """The release's own get_tokenizer, called as the server calls it on a default
    server (tokenizer_mode auto, no trust_remote_code, no revision)."""
    mod = tokenizer_module()
    return mod.get_tokenizer(path, tokenizer_mode="auto", trust_remote_code=False,
                             tokenizer_revision=None, **kwargs)


def libraries():
    out = {"sglang": VERSION, "python": sys.version.split()[0]}
    for dist in ("transformers", "tokenizers", "jinja2", "pydantic", "pydantic_core", "openai",
                 "openai-harmony", "fastapi", "orjson", "msgspec", "huggingface_hub", "jsonschema",
                 "deepseek-recipe", "sentencepiece", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if "openai" in sys.modules:
        out["openai"] = getattr(sys.modules["openai"], "__version__", out.get("openai"))
    return out
