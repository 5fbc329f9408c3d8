"""Chat prompt lengths under older SGLang releases, from their own Python code.

Developer machine only; CI never runs Python. For one release (before 0.5.23)
at a time, runs chat cases through that release's `ChatCompletionRequest`
validation, `OpenAIServingChat._validate_request` and
`_convert_to_internal_request`, and records `len(input_ids)`, or `null` when
the release refuses the request, in tests/data/sglang_versions_counts.json
under the release's version:

    {version: {"fixtures": {fixture: {case: tokens|null}},
               "profiles": {profile: {case: tokens|null} | "not servable"}}}

* "fixtures": every chat case of ../shared/goldens/cases on every tokenizer
  fixture, on a default server (no --chat-template, parsers or template
  kwargs; the fixture's stand-in architecture from goldens/HEADER.json).
* "profiles": the same cases under each server configuration of
  ../shared/goldens/profiles/PROFILES.json, set up as its README says: the
  fixture with the profile's `config_json` as the model config, and the
  profile's `server_info` fields set (`tool_call_parser` and
  `reasoning_parser` answered by `config_value`, `default_chat_template_kwargs`
  on the server namespace). Two profiles are not run: `glm-5.3` is skipped
  (its Python template does not exist before 0.5.23, so the release refuses
  `--chat-template glm-5.3` at start-up), and `deepseek-v4` is recorded as
  "not servable" (the guard refuses DeepSeek-V4 before 0.5.23:
  `server_config_unmodelled`, `version`).

`tests/versions.rs` counts the same cases with the server's version set to
that release (`--sglang-version V`; for the profiles, `version` in the
/server_info answer).

Why: the goldens pin 0.5.23, while the builds the guard protects are 0.5.19
and older; the releases differ in how request tools reach the template
(`Function.strict: bool = False` until 0.5.22) and, until 0.5.21, which tools
reach the DeepSeek encoders under `tool_choice: "none"`.

One step of the request path is patched, not the prompt: with a tool-call
parser and a named `tool_choice` (`chat_sgl_tool_choice_named` on the
DeepSeek profiles) the release builds its sampling parameters after the
prompt, and `convert_json_schema_to_str` then gets the structural tag of the
stubbed xgrammar (a MagicMock) and raises `issubclass() arg 1 must be a
class` -- in every release, 0.5.23 included; a real server has xgrammar and
counts the prompt. `convert_json_schema_to_str` returns "{}" for that stub
only (every other argument goes to SGLang's function), and
`strip_structural_tag_excludes` (0.5.21+, which edits that grammar in place)
is a no-op, so the prompt length is recorded. (Checked: `serving_for` run
on 0.5.23 with this patch reproduces all 270 profile goldens other than
glm-5.3's, `chat_sgl_tool_choice_named` included.)

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
from unittest.mock import MagicMock

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))
OUT = os.path.join(CRATE, "tests", "data", "sglang_versions_counts.json")

sys.path.insert(0, HERE)
from sglang_env import get_tokenizer, template_of  # noqa: E402

import sglang  # noqa: E402
import sglang.srt.entrypoints.openai.protocol as protocol  # noqa: E402
import sglang.srt.entrypoints.openai.serving_base as serving_base  # noqa: E402
import sglang.srt.entrypoints.openai.serving_chat as serving_chat  # noqa: E402
import sglang.srt.parser.jinja_template_utils as jtu  # noqa: E402
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest  # noqa: E402
from sglang.srt.parser.template_detection import detect_reasoning_pattern  # noqa: E402

try:
    from sglang.version import __version__ as VERSION
except ImportError:
    VERSION = sglang.__version__

# Profiles not run through the release (see the module docstring).
SKIPPED_PROFILES = {"glm-5.3"}
NOT_SERVABLE = "not servable"
NOT_SERVABLE_PROFILES = {"deepseek-v4"}


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

# The stubbed xgrammar's structural tag, met after the prompt is built (module docstring).
_convert_json_schema_to_str = protocol.convert_json_schema_to_str
protocol.convert_json_schema_to_str = (
    lambda schema: "{}" if isinstance(schema, MagicMock) else _convert_json_schema_to_str(schema))
if hasattr(serving_chat, "strip_structural_tag_excludes"):
    serving_chat.strip_structural_tag_excludes = lambda *args, **kwargs: None

HEADER = json.load(open(os.path.join(SHARED, "goldens", "HEADER.json")))["sglang"]["tokenizers"]


def serving_for(fixture, config_json, server_info):
    """`OpenAIServingChat` of a server started on `fixture` whose model config is
    `config_json` (architectures, model_type), with `server_info`'s flags set."""
    d = os.path.join(SHARED, "tokenizers", fixture)
    tokenizer = get_tokenizer(d)
    hf = NS(model_type=config_json["model_type"], architectures=config_json["architectures"], to_dict=dict)
    template_kwargs = server_info.get("default_chat_template_kwargs")
    SERVING.default_chat_template_kwargs = template_kwargs
    server_args = _Defaults(default_chat_template_kwargs=template_kwargs, context_length=None,
                            allow_auto_truncate=False, revision=None, enable_cache_report=False)
    flags = {k: server_info.get(k) for k in ("tool_call_parser", "reasoning_parser")}
    manager = NS(tokenizer=tokenizer, processor=None, served_model_name="m",
                 model_config=NS(hf_config=hf, is_multimodal=False, context_len=1 << 22,
                                 get_default_sampling_params=dict),
                 server_args=server_args, model_path=d, num_reserved_tokens=0,
                 config_value=flags.get, lora_registry=None)
    template = template_of(d)
    tokenizer.chat_template = template
    if template is None:  # the DeepSeek stand-ins: an encoder, no template
        force_reasoning, reasoning_config, content_format, reorders = False, None, "string", False
    else:
        force_reasoning, reasoning_config = detect_reasoning_pattern(template)
        content_format = jtu.detect_jinja_template_content_format(template)
        reorders = getattr(jtu, "jinja_template_may_reorder_tool_results", lambda t: False)(template)
    templates = NS(chat_template_name=None, jinja_template_content_format=content_format,
                   reasoning_config=reasoning_config, force_reasoning=force_reasoning,
                   python_chat_template=None, jinja_template_may_reorder_tool_results=reorders)
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


def count_cases(serving, cases):
    return {c["case"]: prompt_length(serving, c["request"]) for c in cases}


def release_tuple(version):
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


def main():
    assert release_tuple(VERSION) < (0, 5, 23), f"{VERSION}: the goldens themselves pin 0.5.23"
    cases = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(SHARED, "goldens", "cases", "*.json")))]
    cases = [c for c in cases if c["endpoint"] == "chat"]

    fixtures = {}
    for fixture in sorted(HEADER):
        if os.path.exists(os.path.join(SHARED, "tokenizers", fixture, "tokenizer.json")):
            serving = serving_for(fixture, HEADER[fixture]["model_standin"], {})
            fixtures[fixture] = count_cases(serving, cases)

    index = json.load(open(os.path.join(SHARED, "goldens", "profiles", "PROFILES.json")))["profiles"]
    profiles = {}
    for name, profile in sorted(index.items()):
        if name in SKIPPED_PROFILES:
            continue
        if name in NOT_SERVABLE_PROFILES:
            profiles[name] = NOT_SERVABLE
            continue
        serving = serving_for(profile["fixture"], profile["config_json"], profile["server_info"])
        profiles[name] = count_cases(serving, cases)
    SERVING.default_chat_template_kwargs = None

    everything = json.load(open(OUT)) if os.path.exists(OUT) else {}
    everything[VERSION] = {"fixtures": fixtures, "profiles": profiles}
    with open(OUT, "w") as f:
        json.dump(everything, f, indent=1, sort_keys=True)
        f.write("\n")
    counted = sum(len(v) for v in fixtures.values())
    profiled = sum(len(v) for v in profiles.values() if isinstance(v, dict))
    print(f"{VERSION}: {counted} counts on {len(fixtures)} fixtures, {profiled} on "
          f"{len(profiles)} profiles ({', '.join(sorted(NOT_SERVABLE_PROFILES))} not servable) -> {OUT}")


if __name__ == "__main__":
    main()
