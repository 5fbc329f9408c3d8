"""Expected ids of every tokenizer fixture as each transformers generation loads it.

Developer machine only; CI never runs Python. The guard counts for SGLang
0.4.5 → 0.5.23, whose releases run six different ways of loading a
tokenizer (`count::tokenizer::Transformers`). For every release named in
RUNS below (one or two per transformers version any release pins), this
loads every variant directory below with that release's OWN `get_tokenizer`
(release_env.py: the unpacked wheel on sys.path, GPU imports stubbed), under
the transformers version the release pins, and records for a corpus of probe
texts the ids of `tok(text)` (default special tokens) and of
`tok.encode(text, add_special_tokens=False)`, plus `tok.bos_token_id`, the
class transformers resolved, and the special-token variables
`apply_chat_template` spreads into a template (read back by rendering one).

    python3 crates/count/src/testdata/gen_tokenizer_generations.py

* $VENVS (default /work/venvs): `tf-<transformers>/bin/python` per pin
  (see release_env.py for what else they hold);
* $WHEELS_DIR (default /work/wheels): `src/<release>/` unpacked wheels;
* $PREFILL_GUARD_SHARED (default ../shared next to the crate): the fixtures;
* $TOKGEN_CACHE (default /tmp/tokgen-cache): each release's raw results
  per variant, reused while the variant and the probes are unchanged
  (delete it after changing what the worker records).

Every release of one generation must give the same result for every variant
(that is the claim the Rust enum rests on); the script fails naming the
first disagreement. It writes tokenizer_generations_expected.json beside
itself: the probes, the variants (how the test rebuilds each directory), the
releases run per generation, and per variant its distinct outcomes and which
generation has which. crates/count/tests/count/tokenizer_generations.rs loads every variant with
`TextTokenizer::load_as` for every generation and compares.

Variants: every fixture with a tokenizer.json as shipped; the same with a
config.json naming the real checkpoint's model_type (transformers 5 picks
the tokenizer class by it; a real checkpoint always has one); and a few
edits of tokenizer_config.json / config.json that exercise a rule the
generations differ on (add_eos_token, add_bos_token null, a declared class
that the model type overrides, split_special_tokens, add_prefix_space,
legacy).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
VENVS = os.environ.get("VENVS", "/work/venvs")
WHEELS = os.environ.get("WHEELS_DIR", "/work/wheels")
OUT = os.path.join(HERE, "tokenizer_generations_expected.json")

# generation (the Rust enum's name) -> [(SGLang release, transformers it pins)].
# Every transformers version any release pins appears; where a version is
# pinned by releases whose get_tokenizer differs, two of them.
RUNS = {
    "V4": [("0.4.5", "4.51.0"), ("0.4.6", "4.51.1"), ("0.4.7", "4.52.3"), ("0.4.9", "4.53.0"),
           ("0.4.9.post3", "4.53.2"), ("0.4.9.post5", "4.54.0"), ("0.4.10", "4.54.1"), ("0.5.1", "4.55.2"),
           ("0.5.2", "4.56.1"), ("0.5.3", "4.57.0"), ("0.5.6", "4.57.1"), ("0.5.9", "4.57.1")],
    "V5Rc0": [("0.5.6.post1", "5.0.0rc0")],
    "V5_3": [("0.5.10", "5.3.0"), ("0.5.10.post1", "5.3.0")],
    "V5_6": [("0.5.11", "5.6.0"), ("0.5.12.post1", "5.6.0")],
    "V5_8": [("0.5.13", "5.8.1"), ("0.5.15", "5.12.1"), ("0.5.21", "5.12.1")],
    "V5_19": [("0.5.22", "5.19.0"), ("0.5.23", "5.19.0")],
}

# config.json of the checkpoint each fixture comes from (model_type and
# architectures only: what transformers' AutoConfig needs to pick a class).
STANDIN = {
    "deepseek-v3": ("deepseek_v3", "DeepseekV3ForCausalLM"),
    "gemma-3": ("gemma3_text", "Gemma3ForCausalLM"),
    "gpt-oss": ("gpt_oss", "GptOssForCausalLM"),
    "llama-3.2": ("llama", "LlamaForCausalLM"),
    "mistral-nemo": ("mistral", "MistralForCausalLM"),
    "phi-3-mini": ("phi3", "Phi3ForCausalLM"),
    "qwen2.5": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
}


def cfg(fixture):
    mt, arch = STANDIN[fixture]
    return {"architectures": [arch], "model_type": mt}


def variants(fixtures):
    """name, fixture, tokenizer_config edits ({"set": {...}, "delete": [...]}),
    config_json (an object written as config.json, or None: as shipped), and
    where present tokenizer_json: top-level keys of tokenizer.json replaced."""
    out = []
    for fx in fixtures:
        out.append({"name": fx, "fixture": fx, "tokenizer_config": None, "config_json": None})
        if fx in STANDIN:
            out.append({"name": fx + "+config", "fixture": fx, "tokenizer_config": None, "config_json": cfg(fx)})

    def edit(name, fx, set_=None, delete=None, config=True, tokenizer_json=None):
        v = {"name": name, "fixture": fx,
             "tokenizer_config": {"set": set_ or {}, "delete": delete or []},
             "config_json": cfg(fx) if config else None}
        if tokenizer_json is not None:
            v["tokenizer_json"] = tokenizer_json
        out.append(v)

    # A Llama-class EOS flag: v4 appends EOS, SGLang's v5 fix forces it off.
    edit("phi-3-mini+add_eos", "phi-3-mini", {"add_eos_token": True})
    # Llama's legacy flag picks v5's Metaspace prepend scheme.
    edit("phi-3-mini+legacy", "phi-3-mini", {"legacy": True})
    # add_prefix_space set on a Llama class: v4 converts from the slow
    # tokenizer (no tokenizer.model here), v5 picks the "never" scheme.
    edit("phi-3-mini+no_prefix_space", "phi-3-mini", {"add_prefix_space": False})
    # A ByteLevel tokenizer.json declared as Llama, add_bos_token null: v4
    # reads null as no BOS, SGLang's v5 fix as the v4 default (BOS).
    edit("llama-3.2+as_llama+bos_null", "llama-3.2", {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": None})
    # Backend with add_prefix_space: only some generations apply it.
    edit("llama-3.2+prefix_space", "llama-3.2", {"add_prefix_space": True})
    # A Qwen2 vocabulary declared as Llama on a qwen2 model type (as
    # DeepSeek-R1-Distill-Qwen ships): transformers >= 5.8 forces Qwen2Tokenizer.
    edit("qwen2.5+as_llama", "qwen2.5",
         {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "bos_token": "<|endoftext|>"})
    # Qwen2's add_prefix_space: v5 rebuilds the ByteLevel step with it.
    edit("qwen3+prefix_space", "qwen3", {"add_prefix_space": True})
    # split_special_tokens: special-token spellings are plain text.
    edit("gpt-oss+split_special", "gpt-oss", {"split_special_tokens": True})
    # BOS switched off on a BOS-adding class.
    edit("gemma-3+no_bos", "gemma-3", {"add_bos_token": False})
    edit("deepseek-v3+no_bos", "deepseek-v3", {"add_bos_token": False})
    # A GPT-2-style top-level ByteLevel pre-tokenizer that adds a prefix
    # space: v4 and 5.0.0rc0 set it to the config's add_prefix_space
    # (default false), v5 keeps it (backend) or SGLang restores it (Qwen2).
    gpt2_pre = {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                  "use_regex": True}}
    edit("qwen2.5+byte_level", "qwen2.5", tokenizer_json=gpt2_pre)
    edit("qwen2.5+byte_level+backend", "qwen2.5", {"tokenizer_class": "PreTrainedTokenizerFast"},
         tokenizer_json=gpt2_pre)
    return out


def build_dir(root, v):
    """The variant's directory: the fixture's files linked, edited JSON written."""
    src = os.path.join(SHARED, "tokenizers", v["fixture"])
    d = os.path.join(root, v["name"])
    os.makedirs(d)
    for f in sorted(os.listdir(src)):
        if os.path.isfile(os.path.join(src, f)):
            os.symlink(os.path.join(src, f), os.path.join(d, f))
    if v["tokenizer_config"] is not None:
        p = os.path.join(d, "tokenizer_config.json")
        tc = json.load(open(p))
        for k in v["tokenizer_config"]["delete"]:
            tc.pop(k, None)
        tc.update(v["tokenizer_config"]["set"])
        os.unlink(p)
        json.dump(tc, open(p, "w"), ensure_ascii=False, indent=1)
    if v.get("tokenizer_json") is not None:
        p = os.path.join(d, "tokenizer.json")
        tj = json.load(open(p))
        tj.update(v["tokenizer_json"])
        os.unlink(p)
        json.dump(tj, open(p, "w"), ensure_ascii=False)
    if v["config_json"] is not None:
        p = os.path.join(d, "config.json")
        if os.path.lexists(p):
            os.unlink(p)
        json.dump(v["config_json"], open(p, "w"))
    return d


LONG = (
    "The quick brown fox jumps over the lazy dog.  Then,\n\tit   ran 3.14159 km in 12:34 — "
    "naïve café résumé Ångström; 你好，世界！日本語のテキストとカタカナ、한국어 문장도 있습니다. "
    "Emoji 👋🌍👨‍👩‍👧‍👦🇯🇵 and math ∑∫√∞≠≤ ≥. Code: `def f(x):\n    return x ** 2  # square`\n\n"
    "URLs https://example.com/a?b=c&d=e, e-mail a.b@c.de, numbers 1234567890 1,000,000 0x1F.\n"
    "<|im_start|>user\nNested <s> and </s> and <|endoftext|> spellings<|im_end|>\n"
    "Trailing spaces   \n   leading spaces and ▁ metaspace ▁▁ chars.   "
)

PROBES = [
    "",
    " ",
    "   ",
    "\n",
    "Hello world",
    " Hello world",
    "Hello world ",
    "  two  spaces   three   ",
    "line1\nline2\n\nline4\n",
    "\n\nstarts with newlines",
    "tabs\tand\r\ncrlf\r\n",
    "<|user|>\nHi",
    "<|end|>c <|end|> c<|end|>\n",
    "<s>[INST] hi [/INST] ok</s>",
    " <s> x </s> ",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\nhmm\n</think>\n\nok<｜end▁of▁sentence｜>",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<|start|>user<|message|>Hi<|end|><|start|>assistant",
    "<bos><eos><pad><unk><mask><|endoftext|><|startoftext|>",
    "<think>\nreason\n</think>\n\nanswer",
    "你好，世界！这是一个测试。",
    "こんにちは、世界。カタカナ ひらがな",
    "안녕하세요 세계",
    "👋🌍 family: 👨‍👩‍👧‍👦 flags 🇯🇵🇫🇷",
    "café naïve e\u0301 A\u030a \u212b ＡＢＣ１２３",
    "1234567890 3.14159 1,000,000",
    "def f(x):\n    return x**2  # comment\n\tpass\n",
    "▁ already metaspace ▁▁x",
    "rare 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 \u0001\u007f \ue000 \ufffd",
    LONG,
]


# ------------------------------------------------------------------ worker ---

def worker(dirs_json, out_path):
    sys.path.insert(0, HERE)
    import release_env as R  # noqa: E402 (the release's get_tokenizer, GPU stubs)

    dirs = json.load(open(dirs_json))
    results = {"release": R.VERSION, "libraries": R.libraries(), "variants": {}}
    for name, d in dirs.items():
        try:
            tok = R.get_tokenizer(d)
        except BaseException as e:  # noqa: BLE001 - a refusal is a result
            results["variants"][name] = {"error": type(e).__name__}
            continue
        try:
            results["variants"][name] = describe(tok)
        except BaseException as e:  # noqa: BLE001
            results["variants"][name] = {"error": "after load: " + type(e).__name__ + ": " + str(e)[:200]}
    json.dump(results, open(out_path, "w"), ensure_ascii=False)


def template_vars(tok):
    """The special-token variables a chat template sees: rendered back."""
    names = set(tok.SPECIAL_TOKENS_ATTRIBUTES) | {"additional_special_tokens", "extra_special_tokens"}
    names |= set(tok.special_tokens_map)
    init = getattr(tok, "init_kwargs", {}) or {}
    names |= {k for k in init if k.endswith("_token") or k.endswith("_tokens")}
    est = init.get("extra_special_tokens")
    if isinstance(est, dict):
        names |= set(est)
    names = sorted(n for n in names if n.isidentifier())
    body = "".join(
        "{%% if %s is defined %%}{{ %r }}={{ %s | tojson }}\n{%% endif %%}" % (n, n, n) for n in names)
    text = tok.apply_chat_template([{"role": "user", "content": "x"}], chat_template=body, tokenize=False)
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition("=")
        out[k] = json.loads(v)
    return out


def describe(tok):
    ids = []
    for text in PROBES:
        with_ = tok(text)["input_ids"]
        without = tok.encode(text, add_special_tokens=False)
        ids.append([list(with_), list(without)])
    return {
        "class": type(tok).__name__,
        "bos_token_id": tok.bos_token_id,
        "template_vars": template_vars(tok),
        "ids": ids,
    }


# ------------------------------------------------------------------ driver ---

def main():
    fixtures = sorted(f for f in os.listdir(os.path.join(SHARED, "tokenizers"))
                      if os.path.isfile(os.path.join(SHARED, "tokenizers", f, "tokenizer.json")))
    vs = variants(fixtures)
    root = tempfile.mkdtemp(prefix="tokgen-")
    dirs = {v["name"]: build_dir(root, v) for v in vs}

    cache = os.environ.get("TOKGEN_CACHE", "/tmp/tokgen-cache")
    os.makedirs(cache, exist_ok=True)
    probes_key = json.dumps(PROBES, ensure_ascii=False)
    vkey = {v["name"]: hashlib.sha256((json.dumps(v, ensure_ascii=False, sort_keys=True) + probes_key)
                                      .encode()).hexdigest()[:16] for v in vs}
    per_gen = {}  # gen -> {variant: outcome}
    ran = {}
    for gen, runs in RUNS.items():
        first = None
        for release, tf in runs:
            res = run_release(release, tf, vs, dirs, vkey, cache, root)
            ran.setdefault(gen, []).append({"release": release, "transformers": tf,
                                            "tokenizers": res["libraries"].get("tokenizers")})
            print(f"{gen} {release} transformers {tf} tokenizers {res['libraries'].get('tokenizers')}", flush=True)
            if first is None:
                first = (release, res["variants"])
                continue
            for name, outcome in res["variants"].items():
                a, b = first[1][name], outcome
                if strip_class(a) != strip_class(b):
                    sys.exit(f"{gen} is not one generation: {name} differs between {first[0]} and {release}")
        per_gen[gen] = first[1]

    results = {}
    differ = {}
    for v in vs:
        outcomes, by_gen = [], {}
        for gen in RUNS:
            o = per_gen[gen][v["name"]]
            for i, seen in enumerate(outcomes):
                if strip_class(seen) == strip_class(o):
                    by_gen[gen] = i
                    break
            else:
                by_gen[gen] = len(outcomes)
                outcomes.append(o)
        results[v["name"]] = {"outcomes": outcomes, "by_generation": by_gen}
        if len(outcomes) > 1:
            differ[v["name"]] = summarize(outcomes, by_gen)
    doc = {
        "about": "generated by gen_tokenizer_generations.py; do not edit",
        "generations": ran,
        "probes": PROBES,
        "variants": vs,
        "differences": differ,
        "results": results,
    }
    with open(OUT, "w") as f:
        f.write(dump(doc))
    print(json.dumps(differ, indent=1, ensure_ascii=False))


def run_release(release, tf, vs, dirs, vkey, cache, root):
    """One release's outcome for every variant; runs the worker (in the
    release's venv) on the variants its cache lacks."""
    path = os.path.join(cache, f"{release}.json")
    cached = json.load(open(path)) if os.path.exists(path) else {"libraries": None, "variants": {}}
    todo = {v["name"]: dirs[v["name"]] for v in vs if vkey[v["name"]] not in cached["variants"]}
    if todo:
        py = os.path.join(VENVS, f"tf-{tf}", "bin", "python")
        dirs_json = os.path.join(root, f"{release}-dirs.json")
        out = os.path.join(root, f"{release}-out.json")
        json.dump(todo, open(dirs_json, "w"))
        env = dict(os.environ, SGLANG_SRC=os.path.join(WHEELS, "src", release))
        r = subprocess.run([py, os.path.abspath(__file__), "--worker", dirs_json, out], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{release} ({tf}) failed:\n{r.stderr[-3000:]}")
        res = json.load(open(out))
        cached["libraries"] = res["libraries"]
        for name, outcome in res["variants"].items():
            cached["variants"][vkey[name]] = outcome
        json.dump(cached, open(path + ".tmp", "w"), ensure_ascii=False)
        os.rename(path + ".tmp", path)
    if cached["libraries"].get("transformers") != tf:
        sys.exit(f"{release}: ran transformers {cached['libraries'].get('transformers')}, pins {tf}")
    return {"libraries": cached["libraries"],
            "variants": {v["name"]: cached["variants"][vkey[v["name"]]] for v in vs}}


def dump(doc):
    """JSON with one line per variant, outcome and probe list, for reviewable diffs."""
    c = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    out = ["{"]
    keys = list(doc)
    for i, k in enumerate(keys):
        end = "," if i + 1 < len(keys) else ""
        v = doc[k]
        if k in ("variants", "probes"):
            out.append(f" {c(k)}: [")
            out.extend(f"  {c(x)}{',' if j + 1 < len(v) else ''}" for j, x in enumerate(v))
            out.append(f" ]{end}")
        elif k == "results":
            out.append(f" {c(k)}: {{")
            names = list(v)
            for j, name in enumerate(names):
                r = v[name]
                out.append(f"  {c(name)}: {{\"by_generation\": {c(r['by_generation'])}, \"outcomes\": [")
                out.extend(f"   {c(o)}{',' if m + 1 < len(r['outcomes']) else ''}"
                           for m, o in enumerate(r["outcomes"]))
                out.append(f"  ]}}{',' if j + 1 < len(names) else ''}")
            out.append(f" }}{end}")
        else:
            out.append(f" {c(k)}: {c(v)}{end}")
    out.append("}")
    return "\n".join(out) + "\n"


def strip_class(o):
    """Outcomes compare without the class name (v4 spells it ...Fast)."""
    return {k: v for k, v in o.items() if k != "class"}


def summarize(outcomes, by_gen):
    """Which generations share an outcome, and on how many probes they differ
    from the first outcome (and in which field)."""
    groups = []
    for i, o in enumerate(outcomes):
        gens = [g for g, j in by_gen.items() if j == i]
        if "error" in o:
            groups.append({"generations": gens, "error": o["error"]})
            continue
        base = next((x for x in outcomes if "error" not in x), o)
        probes = [k for k, (a, b) in enumerate(zip(o["ids"], base["ids"])) if a != b]
        d = {"generations": gens, "probes_differing_from_first": probes}
        if o["template_vars"] != base["template_vars"]:
            d["template_vars_differ"] = sorted(set(o["template_vars"]) ^ set(base["template_vars"])) or "values"
        if o["bos_token_id"] != base["bos_token_id"]:
            d["bos_token_id"] = o["bos_token_id"]
        groups.append(d)
    return groups


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
