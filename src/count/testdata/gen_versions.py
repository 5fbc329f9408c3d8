"""Chat prompt lengths under older SGLang releases, from their own Python code.

Developer machine only; CI never runs Python. For one release at a time,
runs every chat case of ../shared/goldens/cases on every tokenizer fixture
through that release's `ChatCompletionRequest` validation,
`OpenAIServingChat._validate_request` and `_convert_to_internal_request`
(a default server: no --chat-template, parsers or template kwargs; the
fixture's stand-in architecture), and records `len(input_ids)`, or `null`
when the release refuses the request, in tests/data/sglang_versions_counts.json
under the release's version. `tests/versions.rs` counts the same cases with
`sglang_version` set to that release.

Why: the goldens pin 0.5.23, while the builds the guard protects are 0.5.19
and older; the releases differ in how request tools reach the template
(`Function.strict: bool = False` until 0.5.22).

    pip download --no-deps sglang==0.5.19 && unzip -q sglang-0.5.19-*.whl -d /tmp/v19
    SGLANG_SRC=/tmp/v19 python src/count/testdata/gen_versions.py

The environment is sglang_env.py's (same pinned libraries and tokenizer loader).
"""
import copy
import glob
import json
import os
import sys
from types import SimpleNamespace as NS

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT = os.path.join(CRATE, "tests", "data", "sglang_versions_counts.json")

sys.path.insert(0, HERE)
from sglang_env import get_tokenizer, template_of  # noqa: E402

import sglang  # noqa: E402
import sglang.srt.entrypoints.openai.serving_base as serving_base  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
import sglang.srt.parser.jinja_template_utils as jtu  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402
from sglang.srt.parser.template_detection import detect_reasoning_pattern  # noqa: E402

try:
    from sglang.version import __version__ as VERSION
except ImportError:
    VERSION = sglang.__version__


class _Defaults(NS):
    """A server namespace whose unset attributes read as SGLang's defaults (None)."""

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

HEADER = json.load(open(os.path.join(SHARED, "goldens", "HEADER.json")))["sglang"]["tokenizers"]


def serving_for(fixture):
    d = os.path.join(SHARED, "tokenizers", fixture)
    tokenizer = get_tokenizer(d)
    standin = HEADER[fixture]["model_standin"]
    hf = NS(model_type=standin["model_type"], architectures=standin["architectures"], to_dict=dict)
    server_args = _Defaults(default_chat_template_kwargs=None, context_length=None,
                            allow_auto_truncate=False, revision=None, enable_cache_report=False)
    manager = NS(tokenizer=tokenizer, processor=None, served_model_name="m",
                 model_config=NS(hf_config=hf, is_multimodal=False, context_len=1 << 22,
                                 get_default_sampling_params=dict),
                 server_args=server_args, model_path=d, num_reserved_tokens=0,
                 config_value=lambda k: None, lora_registry=None)
    template = template_of(d)
    tokenizer.chat_template = template
    force_reasoning, reasoning_config = detect_reasoning_pattern(template)
    reorders = getattr(jtu, "jinja_template_may_reorder_tool_results", lambda t: False)
    templates = NS(chat_template_name=None,
                   jinja_template_content_format=jtu.detect_jinja_template_content_format(template),
                   reasoning_config=reasoning_config, force_reasoning=force_reasoning,
                   python_chat_template=None,
                   jinja_template_may_reorder_tool_results=reorders(template))
    return serving_chat.OpenAIServingChat(manager, templates)


def prompt_length(serving, body):
    """`len(input_ids)`, or None when the release refuses the request."""
    try:
        request = ChatCompletionRequest.model_validate(copy.deepcopy(body))
        if serving._validate_request(request):
            return None
        adapted, _ = serving._convert_to_internal_request(request, None)
    except Exception:  # a refusal, whichever way the release raises it
        return None
    return len(adapted.input_ids)


def main():
    cases = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    fixtures = sorted(f for f in HEADER if os.path.exists(os.path.join(SHARED, "tokenizers", f, "tokenizer.json")))
    counts = {}
    for fixture in fixtures:
        serving = serving_for(fixture)
        counts[fixture] = {c["case"]: prompt_length(serving, c["request"]) for c in cases if c["endpoint"] == "chat"}
    everything = json.load(open(OUT)) if os.path.exists(OUT) else {}
    everything[VERSION] = counts
    with open(OUT, "w") as f:
        json.dump(dict(sorted(everything.items())), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{VERSION}: {sum(len(v) for v in counts.values())} counts on {len(fixtures)} fixtures -> {OUT}")


if __name__ == "__main__":
    main()
