"""The `/get_server_info` settings of a default server on every SGLang
release, from each release's own `ServerArgs`, for tests/data/server_info_releases.json.

Developer machine only; CI never runs Python. `crates/inspect/tests/inspect/releases.rs` hands each
answer (with its `version`) to the guard's discovery reading, which must
serve the model as that release's family: a key a release does not have, or
its own default spelling of one, must read as SGLang's default.

Run without arguments it runs itself once per release (versions.txt), each in
the venv of the release's pins as `sweep_releases.py` picks it; with
SGLANG_SRC set it prints one release's answer. Only the keys the guard reads
from `/server_info` are kept (`KEYS`, the `Origin::ServerInfo` settings of
crates/count/src/serving.rs).

    python3 crates/count/src/testdata/gen_server_info_releases.py
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
OUT = os.path.join(CRATE, "tests", "data", "server_info_releases.json")
MODEL = "/models/model"
KEYS = [
    "default_chat_template_kwargs", "chat_template", "hf_chat_template_name", "tool_call_parser",
    "reasoning_parser", "completion_template", "trust_request_chat_template", "skip_tokenizer_init",
    "enable_mis", "tool_server", "disaggregation_mode", "enable_response_store", "model_path",
    "tokenizer_path", "revision", "tokenizer_mode", "tokenizer_backend", "trust_remote_code",
    "json_model_override_args", "frontend", "context_length", "allow_auto_truncate",
    "speculative_algorithm", "enable_tokenizer_batch_encode", "enable_dynamic_batch_tokenizer",
]


def one_release():
    """This interpreter's release (SGLANG_SRC): its ServerArgs defaults as a
    prefill worker started with only --model-path and --disaggregation-mode
    prefill publishes them (the tokenizer path defaults to the model path)."""
    sys.argv = [sys.argv[0]]
    sys.path.insert(0, HERE)
    import gen_releases as G  # noqa: E402  (imports the release)
    defaults = G.server_args_defaults()
    info = {k: defaults[k] for k in KEYS if k in defaults}
    info["model_path"] = MODEL
    if "tokenizer_path" in info:
        info["tokenizer_path"] = info["tokenizer_path"] or MODEL
    if "disaggregation_mode" in info:
        info["disaggregation_mode"] = "prefill"
    info = {k: v for k, v in info.items()
            if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
    info["version"] = G.E.VERSION
    info["max_req_input_len"] = 681274
    print("SERVER_INFO " + json.dumps(info, sort_keys=True))


def all_releases():
    import sweep_releases as S
    out = {}
    for v in S.versions():
        p = S.pins(v)
        venv = os.path.join(S.VENVS, f"tf-{p['transformers']}")
        env = dict(os.environ, SGLANG_SRC=os.path.join(S.WHEELS, "src", v))
        if "openai" in p and S.installed(venv, "openai") != p["openai"]:
            env["OPENAI_OVERLAY"] = os.path.join(S.VENVS, f"openai-{p['openai']}")
        r = subprocess.run([os.path.join(venv, "bin", "python"), __file__], env=env,
                           capture_output=True, text=True)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("SERVER_INFO ")), None)
        if line is None:
            print(f"{v}: failed\n{r.stderr[-2000:]}", file=sys.stderr)
            continue
        out[v] = json.loads(line[len("SERVER_INFO "):])
        print(f"{v}: {len(out[v])} keys", flush=True)
    with open(OUT, "w") as f:
        json.dump(out, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    print(f"{len(out)} releases -> {OUT}")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    if os.environ.get("SGLANG_SRC"):
        one_release()
    else:
        all_releases()
