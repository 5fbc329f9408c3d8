//! Every configuration the repository ships, run as it is (only addresses
//! and the model directory replaced) in front of a mock SGLang whose limit
//! is the one its model really has, then judged by `audit --through`:
//! protected, or the example does not ship. A static limit SGLang could not
//! have is refused, never enforced.

use crate::common;
use crate::common::shared;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use common::sglang::{Answers, InfoMock};
use common::{spawn_binary, start_mock, Spawned};

/// Each shipped configuration.
const EXAMPLES: [&str; 3] = [
    "config/prefill-guard.toml",
    "deploy/envoy/prefill-guard.toml",
    "deploy/kubernetes/base/prefill-guard.toml",
];

/// The context length of each model an example names, from the model's
/// published `config.json` (`max_position_embeddings`, no RoPE scaling).
fn context_of(model: &str) -> usize {
    match model {
        "Qwen2.5-7B-Instruct" => 32_768,
        "GLM-4.6" => 202_752,
        other => panic!("an example serves {other}: add its context length here"),
    }
}

/// A prefill worker of `model` with SGLang's limit for a `pool`-token KV pool.
fn worker(model: &str, pool: usize) -> Answers {
    let context = context_of(model);
    let limit = (context - 1).min(pool - 1) - 5;
    Answers {
        server_info: json!({
            "model_path": format!("/models/{model}"), "served_model_name": model,
            "context_length": null, "disaggregation_mode": "prefill",
            "allow_auto_truncate": false, "speculative_algorithm": null,
            "max_total_num_tokens": pool, "max_req_input_len": limit, "version": "0.5.11",
        }),
        model_info: Some(
            json!({"model_path": format!("/models/{model}"), "disaggregation_mode": "prefill"}),
        ),
        models: Some(
            json!({"object": "list", "data": [{"id": model, "object": "model", "max_model_len": context}]}),
        ),
        legacy_only: false,
        fail_with: None,
        api_key: None,
    }
}

/// The example at `rel` (its text possibly edited by `edit`), with its
/// addresses on 127.0.0.1, its upstream the recording mock, its prefill
/// workers `worker`, and its model directory a tokenizer of `fixtures`
/// beside the model's `config.json`, as a checkpoint directory has.
fn localised(
    rel: &str,
    dir: &Path,
    upstream: &str,
    worker: &str,
    fixtures: &Path,
    edit: impl Fn(String) -> String,
) -> (PathBuf, String) {
    let text =
        edit(std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap());
    let mut doc: toml::Table = toml::from_str(&text).unwrap();
    for key in ["listen", "admin_listen", "grpc_listen", "authz_listen"] {
        if doc.contains_key(key) {
            doc.insert(key.into(), "127.0.0.1:0".into());
        }
    }
    doc.insert("upstream".into(), upstream.into());
    doc.insert("log_format".into(), "json".into());
    if doc.contains_key("prefill_urls") {
        doc.insert(
            "prefill_urls".into(),
            toml::Value::Array(vec![worker.into()]),
        );
        doc.insert("discovery_interval_ms".into(), 200.into());
    }
    // Decode workers are only compared with prefill's; none answers here
    // (what the guard then refuses is `tests/it/pd.rs`'s concern).
    if doc.contains_key("decode_urls") {
        doc.insert(
            "decode_urls".into(),
            toml::Value::Array(vec!["http://127.0.0.1:9".into()]),
        );
    }
    let model = match doc.get_mut("models") {
        Some(toml::Value::Array(models)) => {
            assert_eq!(models.len(), 1, "{rel}: one model per example");
            models[0].as_table_mut().unwrap()
        }
        _ => &mut doc,
    };
    let name = model["name"].as_str().unwrap().to_string();
    // A real checkpoint's tokenizer (Qwen2.5's, whatever the example names:
    // the limit, not the count, is under test) beside the model's context.
    let files = dir.join("model");
    std::fs::create_dir_all(&files).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixtures.join("qwen2.5").join(f), files.join(f)).unwrap();
    }
    std::fs::write(
        files.join("config.json"),
        json!({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "max_position_embeddings": context_of(&name)})
            .to_string(),
    )
    .unwrap();
    model.insert("tokenizer".into(), files.display().to_string().into());
    let path = dir.join("prefill-guard.toml");
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    (path, name)
}

struct Running {
    guard: Spawned,
    upstream: common::Mock,
    _worker: InfoMock,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start(
        rel: &str,
        pool: Option<usize>,
        fixtures: &Path,
        edit: impl Fn(String) -> String,
    ) -> (Self, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let upstream = start_mock().await;
        // The worker is started once the model is known.
        let probe = localised(
            rel,
            dir.path(),
            "http://127.0.0.1:1",
            "http://127.0.0.1:1",
            fixtures,
            &edit,
        )
        .1;
        let worker = InfoMock::start(worker(&probe, pool.unwrap_or(usize::MAX / 2))).await;
        let (config, name) = localised(
            rel,
            dir.path(),
            &format!("http://{}", upstream.addr),
            &worker.url(),
            fixtures,
            &edit,
        );
        let guard = spawn_binary(&config).await;
        let worker_url = worker.url();
        (
            Self {
                guard,
                upstream,
                _worker: worker,
                _dir: dir,
            },
            name,
            worker_url,
        )
    }

    fn url(&self) -> String {
        format!("http://{}", self.guard.serving["listen"].as_str().unwrap())
    }

    async fn readyz(&self) -> (u16, String) {
        let url = format!(
            "http://{}/readyz",
            self.guard.serving["admin_listen"].as_str().unwrap()
        );
        let r = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(url)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// `/readyz` once it settles (discovery's first round, the upstream's
    /// `/v1/models`), within a few seconds.
    async fn settled(&self, want: u16) -> (u16, String) {
        let mut last = self.readyz().await;
        for _ in 0..50 {
            if last.0 == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            last = self.readyz().await;
        }
        last
    }
}

/// Prompts that reached the upstream (the guard's own `GET /v1/models`
/// aside).
fn forwarded(upstream: &common::Mock) -> usize {
    let seen = upstream.state.requests.lock().unwrap();
    seen.iter().filter(|r| r.method == "POST").count()
}

async fn audit_through(guard: &str, worker: &str) -> (i32, Value) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "audit",
            "--through",
            guard,
            "--prefill-url",
            worker,
            "--json",
        ])
        .output()
        .await
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "audit printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), report)
}

/// Each example protects a prefill worker whose pool holds the model's whole
/// context (SGLang's largest limit, `context - 6`); an example that reads
/// its workers also protects one with a smaller pool.
#[tokio::test]
async fn every_shipped_example_is_protected() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let fixtures = shared.join("tokenizers");
    for rel in EXAMPLES {
        let mut pools = vec![None];
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap();
        let discovers = toml::from_str::<toml::Table>(&text)
            .unwrap()
            .contains_key("prefill_urls");
        if discovers {
            pools.push(Some(20_000));
        }
        for pool in pools {
            let (running, name, worker) = Running::start(rel, pool, &fixtures, |t| t).await;
            let (status, detail) = running.settled(200).await;
            assert_eq!(status, 200, "{rel} (pool {pool:?}): not ready: {detail}");
            let (code, report) = audit_through(&running.url(), &worker).await;
            assert_eq!(
                (code, report["verdict"].as_str()),
                (0, Some("not_exposed")),
                "{rel} ({name}, pool {pool:?}) is not protected: {report:#}"
            );
            assert!(
                forwarded(&running.upstream) <= 1,
                "only the M - 1 canary is forwarded"
            );
        }
    }
}

/// The values the examples shipped with before: the Envoy example's
/// context length given as the limit (32768 for a 32768-token model), and
/// GLM-4.6's KV pool given for a 202752-token model. The guard refuses to
/// enforce them: not ready, naming the largest value SGLang could have.
#[tokio::test]
async fn a_static_limit_sglang_cannot_have_is_not_enforced() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let fixtures = shared.join("tokenizers");
    for (rel, old, largest) in [
        ("deploy/envoy/prefill-guard.toml", "32768", "32762"),
        ("config/prefill-guard.toml", "681274", "202746"),
    ] {
        let current = if rel.contains("envoy") {
            "32762"
        } else {
            "202746"
        };
        let edit = |t: String| {
            t.replace(
                &format!("max_req_input_len = {current}"),
                &format!("max_req_input_len = {old}"),
            )
        };
        let (running, name, _worker) = Running::start(rel, None, &fixtures, edit).await;
        let (status, detail) = running.settled(503).await;
        assert_eq!(status, 503, "{rel} with {old}: {detail}");
        assert!(
            detail.contains(&format!("at most {largest}")),
            "{rel}: {detail}"
        );
        let answer = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{}/v1/completions", running.url()))
            .header("content-type", "application/json")
            .body(json!({"model": name, "prompt": "hi"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 503);
        let body: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "static_limit_impossible", "{body}");
        assert_eq!(forwarded(&running.upstream), 0);
    }
}

/// Without a `config.json`, the context is the one the upstream's
/// `/v1/models` lists: a static limit above it is refused once it answers.
#[tokio::test]
async fn the_upstreams_context_refuses_an_impossible_static_limit() {
    let mut answers = common::sglang::prefill_worker(94);
    answers.models = Some(common::sglang::models_listing(100));
    let upstream = InfoMock::start(answers).await;
    let dir = tempfile::tempdir().unwrap();
    let addr = upstream.url().trim_start_matches("http://").to_string();
    let config = common::binary_config(dir.path(), &addr, "max_req_input_len = 1000\n");
    let guard = spawn_binary(&config).await;
    let url = format!(
        "http://{}/readyz",
        guard.serving["admin_listen"].as_str().unwrap()
    );
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut last = (0, String::new());
    for _ in 0..50 {
        let r = client.get(&url).send().await.unwrap();
        last = (r.status().as_u16(), r.text().await.unwrap());
        if last.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last.0, 503, "{}", last.1);
    assert!(last.1.contains("at most 94"), "{}", last.1);
    assert!(last.1.contains("/v1/models"), "{}", last.1);
}
