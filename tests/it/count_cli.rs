//! `prefill-guard count`: the offline counter operators use to check a body
//! and debug a template. One JSON line per file, in order; exit 1 if any file
//! is refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
}

fn write(dir: &Path, name: &str, body: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(body).unwrap()).unwrap();
    p
}

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn counts_each_file_in_order_with_batches_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    let st = bin().arg("demo-model").arg(&model).status().unwrap();
    assert!(st.success());

    // The demo tokenizer gives one token per word and per special token.
    let chat = write(
        tmp.path(),
        "chat.json",
        &json!({"model": "x", "messages": [{"role": "user", "content": "hello world"}]}),
    );
    let out = bin()
        .args(["count", "--tokenizer"])
        .arg(&model)
        .arg(&chat)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // <|im_start|> user hello world <|im_end|> <|im_start|> assistant: whitespace is not a token.
    assert_eq!(
        lines(&out),
        vec![json!({"file": chat.display().to_string(), "tokens": 7})]
    );

    let one = write(
        tmp.path(),
        "one.json",
        &json!({"prompt": "hello world hello"}),
    );
    let batch = write(
        tmp.path(),
        "batch.json",
        &json!({"prompt": ["hello", "hello world"]}),
    );
    let ids = write(tmp.path(), "ids.json", &json!({"prompt": [[1, 2, 3], [4]]}));
    let bad = write(tmp.path(), "bad.json", &json!({"prompt": ""}));
    let out = bin()
        .args(["count", "--route", "/v1/completions", "--tokenizer"])
        .arg(&model)
        .args([&one, &batch, &bad, &ids])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a refused file makes the exit status 1"
    );
    let got = lines(&out);
    let file = |p: &PathBuf| p.display().to_string();
    assert_eq!(got[0], json!({"file": file(&one), "tokens": 3}));
    assert_eq!(got[1], json!({"file": file(&batch), "tokens": [1, 2]}));
    assert_eq!(got[2]["file"], file(&bad));
    assert_eq!(got[2]["error"]["code"], "invalid_request");
    assert!(got[2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Prompt cannot be empty"));
    assert_eq!(got[3], json!({"file": file(&ids), "tokens": [3, 1]}));

    let dup = tmp.path().join("dup.json");
    std::fs::write(&dup, br#"{"text":"a","text":"b"}"#).unwrap();
    let out = bin()
        .args(["count", "--route", "/generate", "--tokenizer"])
        .arg(&model)
        .arg(&dup)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(lines(&out)[0]["error"]["code"], "duplicate_key");
}

#[test]
fn print_rendered_shows_the_prompt_after_preprocessing() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let chat = write(
        tmp.path(),
        "chat.json",
        &json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
    );
    let out = bin()
        .args(["count", "--print-rendered", "--tokenizer"])
        .arg(&model)
        .arg(&chat)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SGLang joins text parts with one space for string-format templates.
    assert_eq!(
        lines(&out),
        vec![json!({
            "file": chat.display().to_string(),
            "rendered": "<|im_start|>user\na b<|im_end|>\n<|im_start|>assistant\n"
        })]
    );
}

#[test]
fn bad_arguments_are_explained() {
    let out = bin()
        .args(["count", "--tokenizer", "/nonexistent-dir", "x.json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir"));
    let tmp = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(tmp.path()).unwrap();
    let out = bin()
        .args(["count", "--route", "/flush_cache", "--tokenizer"])
        .arg(tmp.path())
        .arg("x.json")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a route the guard counts"));
}

/// Without `--route`, each body is counted for the route its fields say
/// (`messages`: chat, `prompt`: completions, else `/generate`); `-` reads a
/// body from standard input; every line names its file.
#[test]
fn routes_come_from_the_bodies_and_dash_is_stdin() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let chat = write(
        tmp.path(),
        "chat.json",
        &json!({"messages": [{"role": "user", "content": "hello world"}]}),
    );
    let completion = write(
        tmp.path(),
        "completion.json",
        &json!({"prompt": "hello world"}),
    );
    let mut child = bin()
        .args(["count", "--tokenizer"])
        .arg(&model)
        .arg(&chat)
        .arg(&completion)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"text": "hello hello hello"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let got = lines(&out);
    // The chat template adds its specials; the completion and /generate
    // texts are their words.
    assert_eq!(
        got[0],
        json!({"file": chat.display().to_string(), "tokens": 7})
    );
    assert_eq!(
        got[1],
        json!({"file": completion.display().to_string(), "tokens": 2})
    );
    assert_eq!(got[2], json!({"file": "-", "tokens": 3}));
}
