//! The real binary in front of a mock prefill worker whose `/server_info`
//! and `/model_info` describe DeepSeek-V3.2, DeepSeek-V4 and GLM-5.3: the
//! guard learns the encoder from the worker, and at the worker's limit `M` a
//! prompt of `M − 1` tokens is forwarded while one of `M` is refused, with
//! nothing forwarded. The lengths of the DeepSeek prompts are SGLang 0.5.23's
//! own (`shared/goldens/profiles`); GLM-5.3's fixture has no tokenizer, so
//! its length is the binary's own `count` under the same settings (the
//! rendered text itself is checked against SGLang in `tests/it/profiles.rs`).

use crate::common;
use crate::common::shared;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::sglang::{eventually, prefill_worker, Answers, InfoMock};
use common::{spawn_binary_with_args, MODEL};

/// A model directory: the fixture's files linked in, `config.json` written,
/// and `overrides` (file name → path) linked instead of the fixture's.
fn model_dir(
    into: &Path,
    fixture: &Path,
    config: &Value,
    overrides: &[(&str, PathBuf)],
) -> PathBuf {
    let dir = into.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    for (name, path) in overrides {
        let target = dir.join(name);
        let _ = std::fs::remove_file(&target);
        std::os::unix::fs::symlink(path, target).unwrap();
    }
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

/// A worker serving `MODEL` with these settings and architecture.
fn worker(limit: usize, settings: &Value, arch: &Value) -> Answers {
    let mut a = prefill_worker(limit);
    a.server_info["model_path"] = json!("/models/m");
    for (k, v) in settings.as_object().unwrap() {
        a.server_info[k] = v.clone();
    }
    let mut info = json!({"model_path": "/models/m", "disaggregation_mode": "prefill"});
    for (k, v) in arch.as_object().unwrap() {
        info[k] = v.clone();
    }
    a.model_info = Some(info);
    a
}

fn golden_request(shared: &Path, case: &str) -> Value {
    let text = std::fs::read_to_string(shared.join(format!("goldens/cases/{case}.json"))).unwrap();
    let mut request: Value = serde_json::from_str::<Value>(&text).unwrap()["request"].clone();
    request["model"] = json!(MODEL);
    request
}

fn golden_tokens(shared: &Path, profile: &str, case: &str) -> usize {
    let text =
        std::fs::read_to_string(shared.join(format!("goldens/profiles/{profile}.jsonl"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|g| g["case"] == case)
        .and_then(|g| g["tokens_sglang"].as_u64())
        .unwrap_or_else(|| panic!("{profile}/{case} has a count")) as usize
}

/// One guard in front of `w`; for each request of `tokens` tokens: with the
/// worker's limit at `tokens + 1` it is forwarded, at `tokens` it is refused
/// as too long and not forwarded.
async fn boundary(
    label: &str,
    route: &str,
    dir: &Path,
    model: &Path,
    settings: &Value,
    arch: &Value,
    requests: &[(Value, usize)],
) {
    let w = InfoMock::start(worker(1, settings, arch)).await;
    let mock = common::start_mock().await;
    let config = dir.join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\nname = \"{MODEL}\"\ntokenizer = {:?}\n\
             prefill_urls = [\"{}\"]\ndiscovery_interval_ms = 20\n",
            mock.addr,
            model.display().to_string(),
            w.url()
        ),
    )
    .unwrap();
    let guard = spawn_binary_with_args(&config, &[]).await;
    let listen = guard.serving["listen"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let post = |body: &Value| {
        let req = http
            .post(format!("http://{listen}{route}"))
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let r = req.send().await.expect("the guard answers");
            let status = r.status().as_u16();
            let bytes = r.bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            (status, body)
        }
    };
    for (body, tokens) in requests {
        let tokens = *tokens;
        w.set(|a| *a = worker(tokens + 1, settings, arch));
        eventually(
            &format!("{label}: {tokens} tokens fit a limit of {}", tokens + 1),
            || async { post(body).await.0 == 200 },
        )
        .await;
        w.set(|a| *a = worker(tokens, settings, arch));
        eventually(
            &format!("{label}: {tokens} tokens do not fit a limit of {tokens}"),
            || async { post(body).await.0 == 400 },
        )
        .await;
        let before = mock.state.count();
        let (status, answer) = post(body).await;
        assert_eq!(status, 400, "{label}: {answer}");
        assert_eq!(
            answer["error"]["code"], "context_length_exceeded",
            "{label}"
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        // Exact, or counting stopped at the limit (which is the length here).
        assert!(
            message.contains(&format!("resulted in {tokens} tokens"))
                || message.contains(&format!("resulted in at least {tokens} tokens")),
            "{label}: the guard counted otherwise: {message}"
        );
        assert_eq!(mock.state.count(), before, "{label}: nothing forwarded");
    }
    drop(guard);
}

#[tokio::test]
async fn deepseek_v3_2_by_parser_and_by_architecture() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let fixture = shared.join("tokenizers/deepseek-v3.2");
    let arch = json!({"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32"});
    for (profile, settings) in [
        (
            "deepseek-v3.2",
            json!({"tool_call_parser": "deepseekv32", "reasoning_parser": "deepseek-v3"}),
        ),
        ("deepseek-v3.2+arch-only", json!({})),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let model = model_dir(tmp.path(), &fixture, &arch, &[]);
        let requests: Vec<(Value, usize)> =
            ["chat_sgl_tool_args_string_multi", "chat_long_english_40k"]
                .iter()
                .map(|c| {
                    (
                        golden_request(&shared, c),
                        golden_tokens(&shared, profile, c),
                    )
                })
                .collect();
        boundary(
            profile,
            "/v1/chat/completions",
            tmp.path(),
            &model,
            &settings,
            &arch,
            &requests,
        )
        .await;
    }
}

#[tokio::test]
async fn deepseek_v4() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let fixture = shared.join("tokenizers/deepseek-v4");
    let arch = json!({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"});
    let settings = json!({"tool_call_parser": "deepseekv4", "reasoning_parser": "deepseek-v4"});
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir(tmp.path(), &fixture, &arch, &[]);
    let requests: Vec<(Value, usize)> =
        ["chat_sgl_tool_args_string_multi", "chat_long_english_40k"]
            .iter()
            .map(|c| {
                (
                    golden_request(&shared, c),
                    golden_tokens(&shared, "deepseek-v4", c),
                )
            })
            .collect();
    boundary(
        "deepseek-v4",
        "/v1/chat/completions",
        tmp.path(),
        &model,
        &settings,
        &arch,
        &requests,
    )
    .await;
}

/// `count` of the binary on `body`, under a `/server_info` of SGLang's
/// defaults with `settings` set.
fn binary_count(dir: &Path, model: &Path, settings: &Value, body: &Value) -> usize {
    let mut info: Value =
        serde_json::from_str(include_str!("../data/server_info_defaults.json")).unwrap();
    for (k, v) in settings.as_object().unwrap() {
        info[k] = v.clone();
    }
    let info_path = dir.join("server_info.json");
    std::fs::write(&info_path, info.to_string()).unwrap();
    let body_path = dir.join("body.json");
    std::fs::write(&body_path, body.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .arg("count")
        .arg("--tokenizer")
        .arg(model)
        .arg("--server-info")
        .arg(&info_path)
        .arg(&body_path)
        .output()
        .unwrap();
    let line: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("count: {}", String::from_utf8_lossy(&out.stderr)));
    line["tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("count gave no tokens: {line}")) as usize
}

#[tokio::test]
async fn glm_5_3_python_template() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    // GLM-5.3's template on a tokenizer the fixtures have (GLM's own is not
    // among them): the encoder is what is under test.
    let fixture = shared.join("tokenizers/qwen3");
    let arch = json!({"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"});
    let settings = json!({"chat_template": "glm-5.3", "reasoning_parser": "glm45", "tool_call_parser": "glm47"});
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir(
        tmp.path(),
        &fixture,
        &arch,
        &[(
            "chat_template.jinja",
            shared.join("tokenizers/glm-4.5/chat_template.jinja"),
        )],
    );
    let requests: Vec<(Value, usize)> = ["chat_sgl_tool_args_string_multi", "chat_multiturn_long"]
        .iter()
        .map(|c| {
            let body = golden_request(&shared, c);
            let n = binary_count(tmp.path(), &model, &settings, &body);
            (body, n)
        })
        .collect();
    // The Python template renders differently from the checkpoint's Jinja
    // (it is selected, not the file beside the tokenizer).
    let jinja = binary_count(tmp.path(), &model, &json!({}), &requests[0].0);
    assert_ne!(jinja, requests[0].1, "the GLM-5.3 template is in force");
    boundary(
        "glm-5.3",
        "/v1/chat/completions",
        tmp.path(),
        &model,
        &settings,
        &arch,
        &requests,
    )
    .await;
}

/// gpt-oss `/v1/responses`, rendered by openai-harmony in SGLang: the
/// lengths are SGLang's own (`crates/count/src/encoder/testdata/gen_harmony.py`
/// ran its harmony path on these bodies).
#[tokio::test]
async fn gpt_oss_responses_through_harmony() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let expected: Value = serde_json::from_str(include_str!(
        "../../crates/count/src/encoder/testdata/harmony_expected.json"
    ))
    .unwrap();
    let requests: Vec<(Value, usize)> = ["text_input", "fn_tool_complex", "multi_turn"]
        .iter()
        .map(|name| {
            let case = expected["cases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == *name && c["setting"] == "default")
                .unwrap_or_else(|| panic!("harmony case {name}"));
            let mut body = case["body"].clone();
            body["model"] = json!(MODEL);
            (body, case["expect"]["tokens"].as_u64().unwrap() as usize)
        })
        .collect();
    let arch = json!({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"});
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir(tmp.path(), &shared.join("tokenizers/gpt-oss"), &arch, &[]);
    boundary(
        "gpt-oss",
        "/v1/responses",
        tmp.path(),
        &model,
        &json!({}),
        &arch,
        &requests,
    )
    .await;
}
