"""Writes auto_classes.rs: the tokenizer class each transformers version's
`AutoTokenizer.from_pretrained` picks for a model directory, by config.json's
`model_type` and tokenizer_config.json's `tokenizer_class`.

Developer machine only. Run with any Python 3; it runs one interpreter per
transformers version ($VENVS/tf-<version>/bin/python, default /work/venvs):

    python3 crates/count/src/tokenizer/gen_auto_classes.py

Nothing is re-derived from transformers' source: for every model type the
version knows (its TOKENIZER_MAPPING_NAMES keys and its
MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS), an unknown one, and no
config.json at all, and for every declared class the guard models, it calls
the real `AutoTokenizer.from_pretrained` on a directory holding only
`{"model_type": ...}` and that `tokenizer_class`, with `from_pretrained` of
every tokenizer class replaced by a stub that reports the class it was called
on. Both `use_fast=True` (every SGLang release) and `use_fast=False`
(SGLang 0.5.11+ retries with it) are recorded.

The 4.x versions and 5.0.0rc0 are only checked: there the declared class
always wins (the script fails if not), so no table is written for them.
A model type whose minimal config.json transformers cannot load is listed
as unverified (a real checkpoint's full config might resolve differently);
the guard refuses it for that version.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VENVS = os.environ.get("VENVS", "/work/venvs")
OUT = os.path.join(HERE, "auto_classes.rs")
# Raw results per version, reused by later runs (delete to re-probe).
CACHE = os.environ.get("AUTO_CLASSES_CACHE", "/tmp/auto-classes-cache")

CHECKED = ["4.51.0", "4.51.1", "4.52.3", "4.53.0", "4.53.2", "4.54.0", "4.54.1", "4.55.2", "4.56.1",
           "4.57.0", "4.57.1", "5.0.0rc0"]
TABLED = ["5.3.0", "5.6.0", "5.8.1", "5.12.1", "5.19.0"]

# Declared names, grouped by the class the guard models them as; every name
# of a group must resolve alike (checked).
DECLARED = {
    "PreTrainedTokenizerFast": ["PreTrainedTokenizerFast", "TokenizersBackend"],
    "PreTrainedTokenizer": ["PreTrainedTokenizer"],
    "LlamaTokenizer": ["LlamaTokenizer", "LlamaTokenizerFast"],
    "CodeLlamaTokenizer": ["CodeLlamaTokenizer", "CodeLlamaTokenizerFast"],
    "GemmaTokenizer": ["GemmaTokenizer", "GemmaTokenizerFast"],
    "Qwen2Tokenizer": ["Qwen2Tokenizer", "Qwen2TokenizerFast"],
}


def probe(out_path):
    """Runs inside one venv."""
    import importlib
    import logging
    import warnings
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import transformers
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto import tokenization_auto as ta
    import transformers.tokenization_utils_base as tub

    class Found(BaseException):  # not an Exception: transformers' own `except Exception` must not catch it
        pass

    def stub(cls, *a, **k):
        raise Found(cls.__name__)

    tub.PreTrainedTokenizerBase.from_pretrained = classmethod(stub)
    for mod, name in [("transformers.tokenization_mistral_common", "MistralCommonBackend"),
                      ("transformers.tokenization_mistral_common", "MistralCommonTokenizer")]:
        try:
            setattr(getattr(importlib.import_module(mod), name), "from_pretrained", classmethod(stub))
        except Exception:
            pass

    names = dict(ta.TOKENIZER_MAPPING_NAMES)
    incorrect = set(getattr(ta, "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS", set()))
    types = sorted(set(names) | incorrect)
    base = tempfile.mkdtemp()
    tj = os.path.join(base, "tokenizer.json")
    json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
               "pre_tokenizer": None, "post_processor": None, "decoder": None,
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                         "ignore_merges": False, "vocab": {"a": 0}, "merges": []}}, open(tj, "w"))

    def directory(model_type, declared):
        d = tempfile.mkdtemp(dir=base)
        os.symlink(tj, os.path.join(d, "tokenizer.json"))
        json.dump({} if declared is None else {"tokenizer_class": declared},
                  open(os.path.join(d, "tokenizer_config.json"), "w"))
        if model_type is not None:
            json.dump({"model_type": model_type}, open(os.path.join(d, "config.json"), "w"))
        return d

    def resolve(d, use_fast):
        try:
            AutoTokenizer.from_pretrained(d, use_fast=use_fast, clean_up_tokenization_spaces=False,
                                          trust_remote_code=False)
            return "?no call"
        except Found as e:
            return str(e)
        except Exception as e:  # transformers refuses: the server would not start
            return "!" + type(e).__name__

    out = {"version": transformers.__version__, "unverified": [], "rows": {}}
    for mt in types + ["zzz_unknown_model_type", None]:
        if mt is not None and mt != "zzz_unknown_model_type":
            try:
                AutoConfig.from_pretrained(directory(mt, None))
            except Exception:
                out["unverified"].append(mt)
        row = {}
        for group, declared_names in DECLARED.items():
            for declared in declared_names:
                d = directory(mt, declared)
                r = [resolve(d, True), resolve(d, False)]
                if group not in row:
                    row[group] = r
                elif r != row[group]:
                    row[declared] = r  # recorded apart; the generator fails on it
        out["rows"]["" if mt is None else mt] = row
    json.dump(out, open(out_path, "w"))


def fast(name):
    """4.x returns the Fast class of the declared one."""
    return name if name.endswith("Fast") else name + "Fast"


def main():
    results = {}
    for v in CHECKED + TABLED:
        py = os.path.join(VENVS, f"tf-{v}", "bin", "python")
        out = os.path.join(CACHE, f"{v}.json")
        if not os.path.exists(out):
            os.makedirs(CACHE, exist_ok=True)
            subprocess.run([py, os.path.abspath(__file__), "--probe", out + ".tmp"], check=True)
            os.rename(out + ".tmp", out)
        results[v] = json.load(open(out))
        if results[v]["version"] != v:
            sys.exit(f"tf-{v} runs transformers {results[v]['version']}")
        print(v, len(results[v]["rows"]), "model types", file=sys.stderr)

    group_of = {name: g for g, names in DECLARED.items() for name in names}
    for v in CHECKED:
        for mt, row in results[v]["rows"].items():
            for key, r in row.items():
                group = group_of[key]
                if group == "PreTrainedTokenizer":
                    continue
                if key == "TokenizersBackend" and v.startswith("4."):
                    if not r[0].startswith("!"):
                        sys.exit(f"{v}: TokenizersBackend loads ({r})")
                    continue  # no such class before transformers 5: the load fails (refused)
                # Releases on these versions never pass use_fast=False.
                if v.startswith("4."):
                    want = fast(group) if group != "PreTrainedTokenizerFast" else group
                else:
                    want = group if group != "PreTrainedTokenizerFast" else "TokenizersBackend"
                if mt in results[v]["unverified"]:
                    continue
                if r[0] != want:
                    sys.exit(f"{v} {mt!r}: {key} resolves to {r}, not the declared class")

    groups = list(DECLARED)
    lines = [
        "//! Generated by gen_auto_classes.py; do not edit.",
        "//!",
        "//! Per transformers 5 version: the model types (config.json `model_type`;",
        "//! `\"\"`: no config.json) for which `AutoTokenizer.from_pretrained` does not",
        "//! load the declared `tokenizer_class`. Per declared class group, in",
        f"//! [`GROUPS`] order: `\"\"` (the declared class), the class loaded, or",
        "//! `use_fast=True|use_fast=False` where those differ; a `!` is the",
        "//! exception the load fails with. Model types absent from a table load the",
        "//! declared class. `UNVERIFIED_*`: model types whose minimal config.json",
        "//! transformers could not load (a real one might resolve differently).",
        "",
        "/// The declared class groups (a class and its `Fast` alias resolve alike).",
        "pub(super) const GROUPS: [&str; %d] = [%s];" % (len(groups), ", ".join(json.dumps(g) for g in groups)),
        "",
        "pub(super) type Table = &'static [(&'static str, [&'static str; %d])];" % len(groups),
        "",
    ]
    for v in TABLED:
        ident = "V" + v.replace(".", "_")
        rows = []
        for mt, row in sorted(results[v]["rows"].items()):
            cells, odd = [], False
            for group in groups:
                if group not in row or any(k not in DECLARED for k in row):
                    sys.exit(f"{v} {mt}: a class resolves unlike its group ({sorted(row)})")
                r = row[group]
                want = "TokenizersBackend" if group in ("PreTrainedTokenizerFast", "PreTrainedTokenizer") else group
                if r == [want, want]:
                    cells.append('""')
                else:
                    odd = True
                    cells.append(json.dumps(r[0] if r[0] == r[1] else f"{r[0]}|{r[1]}"))
            if odd:
                rows.append(f"    ({json.dumps(mt)}, [{', '.join(cells)}]),")
        lines.append(f"/// transformers {v}.")
        lines.append("#[rustfmt::skip]")
        lines.append(f"pub(super) const {ident}: Table = &[")
        lines.extend(rows)
        lines.append("];")
        unv = ", ".join(json.dumps(m) for m in sorted(results[v]["unverified"]))
        lines.append("#[rustfmt::skip]")
        lines.append(f"pub(super) const UNVERIFIED_{ident}: &[&str] = &[{unv}];")
        lines.append("")
    with open(OUT, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        probe(sys.argv[2])
    else:
        main()
