//! `prefill-guard verify`, the real binary, against a mock `/v1/tokenize`.
//! The mock counts like the demo model except on purpose: `zebra` is two
//! tokens there (one `[UNK]` for the guard, an undercount verify must catch)
//! and `good day` one (an overcount, reported but safe).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use common::sglang::{prefill_worker, InfoMock};
use common::MODEL;
use prefill_guard::demo::write_demo_model;

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        write_demo_model(&dir.path().join("model")).unwrap();
        Self { dir }
    }

    fn model(&self) -> String {
        self.dir.path().join("model").display().to_string()
    }

    fn write(&self, name: &str, body: &Value) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, body.to_string()).unwrap();
        path
    }
}

async fn verify(args: &[&str], files: &[&Path]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .arg("verify")
        .args(args)
        .args(files)
        .output()
        .await
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn matching_counts_pass() {
    let f = Files::new();
    let chat = f.write(
        "chat.json",
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hello world"}],
                "stream": true, "max_tokens": 5}),
    );
    let completion = f.write(
        "completion.json",
        &json!({"model": MODEL, "prompt": "hello hello"}),
    );
    let batch = f.write(
        "batch.json",
        &json!({"text": ["hello", "hello world hello"]}),
    );
    let ids = f.write("ids.json", &json!({"input_ids": [1, 2, 3]}));
    let up = InfoMock::start(prefill_worker(100)).await;
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model()],
        &[&chat, &completion, &batch, &ids],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("4 match, 0 over, 0 under, 1 as given, 0 errors"),
        "{t}"
    );
    assert!(
        t.contains("/v1/chat/completions  7      7       +0    match"),
        "{t}"
    );

    // What the oracle was asked: the chat fields as sent (no streaming), and
    // texts as `prompt` with special tokens, as `tokenizer(text)` counts them.
    let asked: Vec<Value> = up
        .requests()
        .into_iter()
        .filter(|(p, _)| p == "/v1/tokenize")
        .map(|(_, b)| b)
        .collect();
    assert_eq!(asked.len(), 4, "token ids are not sent");
    assert_eq!(
        asked[0],
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hello world"}], "max_tokens": 5})
    );
    assert_eq!(
        asked[1],
        json!({"prompt": "hello hello", "add_special_tokens": true, "model": MODEL})
    );
    assert_eq!(
        asked[2],
        json!({"prompt": "hello", "add_special_tokens": true})
    );
    assert_eq!(asked[3]["prompt"], "hello world hello");
}

#[tokio::test]
async fn an_undercount_is_caught() {
    let f = Files::new();
    let fine = f.write("fine.json", &json!({"prompt": "hello world"}));
    let zebra = f.write(
        "zebra.json",
        &json!({"messages": [{"role": "user", "content": "hello zebra"}]}),
    );
    let up = InfoMock::start(prefill_worker(100)).await;
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model()],
        &[&fine, &zebra],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("UNDER"), "{t}");
    assert!(
        t.contains("FAIL: the guard counted fewer tokens than SGLang (by up to 1)"),
        "{t}"
    );
    assert!(t.contains("safety_margin_tokens to at least 1"), "{t}");

    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model(), "--json"],
        &[&fine, &zebra],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let rows = lines(&out);
    assert_eq!(rows[0]["outcome"], "match");
    assert_eq!(
        (rows[1]["guard"].as_u64(), rows[1]["sglang"].as_u64()),
        (Some(7), Some(8))
    );
    assert_eq!(rows[1]["outcome"], "under");
}

#[tokio::test]
async fn an_undercount_inside_a_batch_is_caught() {
    let f = Files::new();
    let batch = f.write(
        "batch.json",
        &json!({"prompt": ["hello", "zebra", "hello"]}),
    );
    let up = InfoMock::start(prefill_worker(100)).await;
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model(), "--json"],
        &[&batch],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let rows = lines(&out);
    let outcomes: Vec<&str> = rows
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["match", "under", "match"]);
    assert_eq!(rows[1]["unit"], 1);
}

#[tokio::test]
async fn an_overcount_is_reported_but_safe() {
    let f = Files::new();
    let body = f.write("good_day.json", &json!({"prompt": "good day hello"}));
    let up = InfoMock::start(prefill_worker(100)).await;
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model()],
        &[&body],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("over (safe)"));
}

#[tokio::test]
async fn the_tokenizer_defaults_to_the_upstreams_own() {
    let f = Files::new();
    let body = f.write("c.json", &json!({"prompt": "hello world"}));
    let mut answers = prefill_worker(100);
    answers.model_info = Some(json!({"model_path": "/nowhere", "tokenizer_path": f.model()}));
    let up = InfoMock::start(answers).await;
    let out = verify(&["--upstream", &up.url(), "--json"], &[&body]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(lines(&out)[0]["guard"], 2);
    assert!(up.hits("/model_info") >= 1);
}

#[tokio::test]
async fn bodies_that_cannot_be_compared_exit_2() {
    let f = Files::new();
    let good = f.write("good.json", &json!({"prompt": "hello"}));
    let broken = f.dir.path().join("broken.json");
    std::fs::write(&broken, b"{\"prompt\": \"a\", \"prompt\": \"b\"}").unwrap();
    let up = InfoMock::start(prefill_worker(100)).await;
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model(), "--json"],
        &[&good, &broken],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let rows = lines(&out);
    assert_eq!(rows[1]["outcome"], "error");
    assert!(rows[1]["detail"]
        .as_str()
        .unwrap()
        .contains("duplicate_key"));

    // An upstream that does not answer cannot vouch for anything.
    up.set(|a| a.fail_with = Some(500));
    let out = verify(
        &["--upstream", &up.url(), "--tokenizer", &f.model()],
        &[&good],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("HTTP 500"));
}
