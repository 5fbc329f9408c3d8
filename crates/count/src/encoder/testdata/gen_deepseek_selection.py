"""Which chat encoding spec each SGLang release resolves, for
crates/count/src/encoder/deepseek_releases.rs (`resolve_spec`, checked by its tests).

Developer machine only; CI never runs Python. For one release at a time
(venv and $SGLANG_SRC as in gen_dsv32_releases.py), builds the release's own
`OpenAIServingChat` for each combination of `--tool-call-parser`, first
architecture, model type and whether the tokenizer has a chat template, and
records what it chose: `chat_encoding_spec` (0.5.12+) or
`use_dpsk_v32_encoding` (0.5.6 - 0.5.11, as "dsv32" or null), in
./deepseek_selection_expected.json under the release's version.
"""
import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_dsv32_releases as g  # noqa: E402  (the harness: stubs, server construction)

OUT = os.path.join(HERE, "deepseek_selection_expected.json")
PARSERS = [None, "deepseekv32", "deepseekv4", "deepseekv41", "kimi_k3", "qwen25"]
ARCHS = ["DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "DeepseekV41ForCausalLM",
         "KimiK3ForCausalLM", "InklingForConditionalGeneration", "LlamaForCausalLM", ""]
MODEL_TYPES = ["deepseek_v4", "deepseek_v41"]


def spec_of(parser, arch, model_type, template):
    hf = g.NS(model_type=model_type, architectures=[arch] if arch else [], to_dict=dict)
    flags = {"tool_call_parser": parser}
    server_args = g._Defaults(context_length=None, allow_auto_truncate=False, revision=None,
                              enable_cache_report=False, **flags)
    server_args.get_hf_config = lambda: hf
    g.TOKENIZER.chat_template = "{{ messages }}" if template else None
    manager = g.NS(tokenizer=g.TOKENIZER, processor=None, served_model_name="m",
                   model_config=g.NS(hf_config=hf, is_multimodal=False, context_len=1 << 22,
                                     get_default_sampling_params=dict),
                   server_args=server_args, model_path=g.FIXTURE, num_reserved_tokens=0,
                   config_value=flags.get, lora_registry=None)
    templates = g.NS(chat_template_name=None, jinja_template_content_format="string",
                     reasoning_config=None, force_reasoning=False, python_chat_template=None,
                     jinja_template_may_reorder_tool_results=False)
    try:
        s = g.serving_chat.OpenAIServingChat(manager, templates)
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}"
    finally:
        g.TOKENIZER.chat_template = None
    if hasattr(s, "chat_encoding_spec"):
        return s.chat_encoding_spec
    return "dsv32" if s.use_dpsk_v32_encoding else None


def main():
    rows = [[p, a, m, t, spec_of(p, a, m, t)]
            for p, a, m, t in itertools.product(PARSERS, ARCHS, MODEL_TYPES, [False, True])]
    everything = json.load(open(OUT)) if os.path.exists(OUT) else {}
    everything[g.VERSION] = rows
    with open(OUT, "w") as f:
        json.dump(dict(sorted(everything.items(), key=lambda kv: g.release_tuple(kv[0]))), f, indent=0)
        f.write("\n")
    print(g.VERSION, len(rows), "combinations", sorted({str(r[4]) for r in rows}))


if __name__ == "__main__":
    main()
