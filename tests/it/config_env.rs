//! Settings as operators spell them in the environment: booleans as `1`/`0`
//! or `true`/`false`, comma-separated lists with spaces after the commas,
//! byte sizes with units. The real binary, configured by variables alone.

use crate::common;

use common::sglang::{prefill_worker, InfoMock};
use common::{binary_config, sample, scrape, spawn_binary_with_env, start_mock, words, MODEL};
use serde_json::json;

#[tokio::test]
async fn variables_take_the_usual_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let mock = start_mock().await;
    let (wide, narrow) = (
        InfoMock::start(prefill_worker(100)).await,
        InfoMock::start(prefill_worker(50)).await,
    );
    let config = binary_config(dir.path(), mock.addr, "");
    let urls = format!(" {} , {}", wide.url(), narrow.url());
    let guard = spawn_binary_with_env(
        &config,
        &[],
        &[
            ("PREFILL_GUARD_EXACT_COUNTING", "1"),
            ("PREFILL_GUARD_REWRITE_MODELS_MAX_LEN", "off"),
            ("PREFILL_GUARD_MAX_BODY_BYTES", "1KiB"),
            ("PREFILL_GUARD_PREFILL_URLS", &urls),
        ],
    )
    .await;
    let listen = guard.serving["listen"].as_str().unwrap().to_string();
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    assert_eq!(guard.serving["prefill_urls"], 2, "{}", guard.serving);
    let http = reqwest::Client::new();

    // Both workers were read: the narrower limit is enforced.
    common::sglang::eventually("the discovered limit", || async {
        sample(
            &scrape(&http, &admin).await,
            &format!("prefill_guard_limit_tokens{{model=\"{MODEL}\"}}"),
        ) == 50.0
    })
    .await;

    // exact_counting=1: a short prompt the bound would accept is tokenized.
    let post = |body: serde_json::Value| {
        http.post(format!("http://{listen}/generate"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    assert_eq!(
        post(json!({"text": "hello world"})).await.unwrap().status(),
        200
    );
    let m = scrape(&http, &admin).await;
    let exact = format!(
        "prefill_guard_count_method_total{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\",method=\"exact\"}}"
    );
    assert_eq!(sample(&m, &exact), 1.0);

    // max_body_bytes=1KiB: 1,024 bytes pass, more is 413.
    let body = |len: usize| {
        let mut text = words(400);
        let overhead = json!({"text": ""}).to_string().len();
        text.truncate(len - overhead);
        json!({"text": text.trim_end()})
    };
    let fits = body(1000);
    assert!(fits.to_string().len() <= 1024);
    let status = post(fits).await.unwrap().status();
    assert_ne!(status, 413, "a body under 1KiB");
    let over = body(1100);
    assert!(over.to_string().len() > 1024);
    assert_eq!(post(over).await.unwrap().status(), 413);
}

#[tokio::test]
async fn a_misspelt_variable_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = binary_config(dir.path(), "127.0.0.1:9", "max_req_input_len = 10\n");
    for (name, value, says) in [
        (
            "PREFILL_GUARD_EXACT_COUNTING",
            "maybe",
            "PREFILL_GUARD_EXACT_COUNTING",
        ),
        ("PREFILL_GUARD_MAX_BODY_BYTES", "32 parsecs", "byte unit"),
        (
            "PREFILL_GUARD_PREFILL_URLS",
            "http://127.0.0.1:9,,",
            "empty item",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
            .args(["serve", "--config"])
            .arg(&config)
            .env(name, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{name}={value}: a bad variable is an invalid configuration (README: 64): {stderr}"
        );
        assert!(stderr.contains(says), "{name}={value}: {stderr}");
    }
}

/// A variable `serve` does not read is refused with the nearest one it
/// does, not ignored: `PREFILL_GUARD_SAFETY_MARGIN_TOKEN=5` would otherwise
/// start with a margin of 0.
#[tokio::test]
async fn an_unknown_variable_is_refused_with_the_nearest_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = binary_config(dir.path(), "127.0.0.1:9", "max_req_input_len = 10\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("PREFILL_GUARD_SAFETY_MARGIN_TOKEN", "5")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("PREFILL_GUARD_SAFETY_MARGIN_TOKEN is not a prefill-guard variable")
            && stderr.contains("did you mean PREFILL_GUARD_SAFETY_MARGIN_TOKENS?"),
        "{stderr}"
    );
}

/// `count` with a flag value it cannot use is a usage error: exit 2.
#[test]
fn a_count_usage_error_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(dir.path()).unwrap();
    let body = dir.path().join("b.json");
    std::fs::write(&body, "{}").unwrap();
    for bad in [["--route", "/not-a-route"], ["--date", "yesterday"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
            .args(["count", "--tokenizer"])
            .arg(dir.path())
            .args(bad)
            .arg(&body)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A model configured by its directory alone is named after the directory,
/// never the path: metric labels, log lines and client errors carry no
/// filesystem path.
#[tokio::test]
async fn a_model_without_a_name_goes_by_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mock = start_mock().await;
    let model = dir.path().join("models").join("qwen-demo");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let config = dir.path().join("prefill-guard.toml");
    // A worker that never answers: the limit stays unknown, so clients get
    // the 503 whose message names the model.
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\ntokenizer = {:?}\nprefill_urls = [\"http://127.0.0.1:9\"]\n",
            mock.addr,
            model.display().to_string()
        ),
    )
    .unwrap();
    let guard = spawn_binary_with_env(&config, &[], &[]).await;
    let listen = guard.serving["listen"].as_str().unwrap().to_string();
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let answer = http
        .post(format!("http://{listen}/generate"))
        .header("content-type", "application/json")
        .body(json!({"text": "hello"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    let text = answer.text().await.unwrap();
    let path = dir.path().display().to_string();
    assert!(text.contains("`qwen-demo`"), "{text}");
    assert!(!text.contains(&path), "a path reached the client: {text}");
    let metrics = scrape(&http, &admin).await;
    assert!(metrics.contains("model=\"qwen-demo\""), "{metrics}");
    assert!(!metrics.contains(&path), "a path in a metric label");
}
