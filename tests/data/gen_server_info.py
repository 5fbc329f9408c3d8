"""Writes tests/data/server_info_defaults.json: what `GET /server_info` of an
SGLang 0.5.23 prefill worker started with only `--model-path /models/model`
answers, built by SGLang's own code (`ServerArgs(...).resolved_dict()`, the
flat dict `build_server_info` publishes), plus the scheduler fields a running
server adds. Tests set a profile's fields on it (as the profile goldens in
../shared/goldens/profiles were made) and hand it to the guard.

Developer machine only; CI never runs Python.

    SGLANG_SRC=/path/to/unpacked/sglang-0.5.23 python tests/data/gen_server_info.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "count", "testdata"))
import sglang_env  # noqa: E402,F401  (stubs the GPU imports)

from sglang.srt.server_args import ServerArgs  # noqa: E402

MODEL = "/models/model"
info = ServerArgs(model_path=MODEL).resolved_dict()
# Resolved at launch (serving_hook.py): the tokenizer and served name
# default to the model path.
info["tokenizer_path"] = info["tokenizer_path"] or MODEL
info["served_model_name"] = info["served_model_name"] or MODEL
# What `build_server_info` and the /server_info handler add.
info.update({
    "status": "ready",
    "max_total_num_tokens": 681280,
    "max_req_input_len": 681274,
    "version": "0.5.23",
    "frontend": "python",
    "internal_states": [{"max_req_input_len": 681274}],
})
info = {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
with open(os.path.join(HERE, "server_info_defaults.json"), "w") as f:
    json.dump(info, f, indent=1, sort_keys=True, default=str)
    f.write("\n")
print(len(info), "keys")
