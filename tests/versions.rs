//! Counts under older SGLang releases. The goldens pin 0.5.23; the builds
//! the guard protects are 0.5.19 and older, and they render request tools
//! differently. `tests/data/sglang_versions_counts.json` holds, per release,
//! the prompt length that release's own request code computes for every chat
//! case of `shared/goldens/cases` on every fixture
//! (`src/count/testdata/gen_versions.py`); `prefill-guard count
//! --sglang-version V` must reproduce each one.

#[path = "common/shared.rs"]
mod shared;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn expected() -> serde_json::Map<String, Value> {
    let text = include_str!("data/sglang_versions_counts.json");
    match serde_json::from_str(text).expect("sglang_versions_counts.json is JSON") {
        Value::Object(m) => m,
        _ => panic!("sglang_versions_counts.json is an object of releases"),
    }
}

/// `count` over every chat case on `fixture` under `version`: case → tokens (None: refused).
fn count_all(
    shared: &std::path::Path,
    fixture: &str,
    version: &str,
    cases: &[(String, PathBuf)],
) -> Vec<(String, Option<u64>)> {
    let out = Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "count",
            "--date",
            "2025-01-15",
            "--route",
            "/v1/chat/completions",
        ])
        .arg("--tokenizer")
        .arg(shared.join("tokenizers").join(fixture))
        .args(["--sglang-version", version])
        .args(cases.iter().map(|(_, p)| p))
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        cases.len(),
        "one line per case: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cases
        .iter()
        .zip(lines)
        .map(|((name, _), line)| (name.clone(), line["tokens"].as_u64()))
        .collect()
}

#[test]
fn counts_equal_each_older_release_on_every_chat_case() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // The request bodies of the chat cases, one file each.
    let mut cases = Vec::new();
    let mut dir: Vec<_> = std::fs::read_dir(shared.join("goldens/cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dir.sort();
    for path in dir {
        let case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        if case["endpoint"] != "chat" {
            continue;
        }
        let name = case["case"].as_str().unwrap().to_string();
        let body = tmp.path().join(format!("{name}.json"));
        std::fs::write(&body, case["request"].to_string()).unwrap();
        cases.push((name, body));
    }
    assert!(cases.len() >= 40, "chat cases found: {}", cases.len());

    let mut checked = 0;
    let mut differs_from_reference = 0;
    for (version, fixtures) in expected() {
        for (fixture, want) in fixtures.as_object().unwrap() {
            let got = count_all(&shared, fixture, &version, &cases);
            let reference = count_all(&shared, fixture, "0.5.23", &cases);
            for ((case, n), (_, n23)) in got.iter().zip(&reference) {
                let Some(want) = want.get(case) else {
                    panic!("{version} {fixture}: no expected count for {case}")
                };
                // A release that refuses a case makes forwarding it harmless (the
                // server refuses); only counting too little could matter.
                if let Some(w) = want.as_u64() {
                    assert_eq!(*n, Some(w), "{fixture} {case}: SGLang {version} counts {w}");
                    checked += 1;
                    if *n23 != Some(w) {
                        differs_from_reference += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "{checked} counts equal their release's; {differs_from_reference} of them differ from 0.5.23's"
    );
    assert!(checked >= 300, "only {checked} counts checked");
    assert!(
        differs_from_reference > 0,
        "the older releases' tool prompts were not exercised"
    );
}
