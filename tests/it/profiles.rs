//! The profile goldens (`shared/goldens/profiles`): SGLang 0.5.23's own
//! counts under server configurations and model-specific encoders. For every
//! profile, `prefill-guard count --tokenizer DIR --server-info FILE` must
//! reproduce `tokens_sglang` on every case, refuse where SGLang refuses, and
//! on a template-only fixture render what SGLang renders (`--print-rendered`).
//!
//! DIR is the fixture with the profile's `config.json`; FILE is an SGLang
//! 0.5.23 `/server_info` answer with SGLang's defaults
//! (`tests/data/server_info_defaults.json`, made by SGLang's own code) and
//! the profile's fields set, as the README there describes. The real binary
//! is run, so the strict JSON reader and the route extraction of the proxy
//! are on the path.

use crate::common::profile_model;
use crate::common::shared;

use std::path::{Path, PathBuf};
use std::process::Command;

use profile_model::{model_dir, server_info_defaults};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Profiles whose encoder this build does not have yet: every case must be
/// refused as `server_config_unmodelled` (never counted the Jinja way).
const PENDING_ENCODERS: &[&str] = &[];

struct Case {
    name: String,
    golden: Value,
    body: PathBuf,
}

fn run(args: &[&std::ffi::OsStr]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args(args)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !stdout.is_empty(),
        "count printed nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn check_profile(shared: &Path, name: &str, profile: &Value) -> (usize, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = profile["fixture"].as_str().unwrap();
    let dir = model_dir(shared, fixture, &profile["config_json"], tmp.path());
    let mut info = server_info_defaults();
    for (k, v) in profile["server_info"].as_object().unwrap() {
        info[k] = v.clone();
    }
    let info_path = tmp.path().join("server_info.json");
    std::fs::write(&info_path, info.to_string()).unwrap();

    let goldens = std::fs::read_to_string(shared.join(format!("goldens/profiles/{name}.jsonl")))
        .unwrap_or_else(|e| panic!("goldens/profiles/{name}.jsonl: {e}"));
    let mut cases = Vec::new();
    for line in goldens.lines().filter(|l| !l.trim().is_empty()) {
        let golden: Value = serde_json::from_str(line).unwrap();
        let case = golden["case"].as_str().unwrap().to_string();
        assert_eq!(
            golden["endpoint"], "chat",
            "{name}/{case}: only chat cases are profiled"
        );
        let request = std::fs::read_to_string(shared.join(format!("goldens/cases/{case}.json")))
            .unwrap_or_else(|e| panic!("goldens/cases/{case}.json: {e}"));
        let request: Value = serde_json::from_str(&request).unwrap();
        let body = tmp.path().join(format!("{case}.json"));
        std::fs::write(&body, request["request"].to_string()).unwrap();
        cases.push(Case {
            name: case,
            golden,
            body,
        });
    }
    let template_only = !dir.join("tokenizer.json").exists();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "count".as_ref(),
        "--tokenizer".as_ref(),
        dir.as_os_str(),
        "--server-info".as_ref(),
        info_path.as_os_str(),
        "--date".as_ref(),
        "2025-01-15T12:00:00".as_ref(),
    ];
    if template_only {
        args.push("--print-rendered".as_ref());
    }
    args.extend(cases.iter().map(|c| c.body.as_os_str()));
    let lines = run(&args);
    assert_eq!(lines.len(), cases.len(), "{name}: one line per case");

    let pending = PENDING_ENCODERS.contains(&name);
    let mut problems = Vec::new();
    for (case, line) in cases.iter().zip(&lines) {
        let label = format!("{name}/{}", case.name);
        let want = &case.golden["tokens_sglang"];
        if pending {
            if line["error"]["code"] != "server_config_unmodelled" {
                problems.push(format!(
                    "{label}: expected a server_config_unmodelled refusal, got {line}"
                ));
            }
            continue;
        }
        if template_only {
            match (
                case.golden["rendered_sha256_sglang"].as_str(),
                line["rendered"].as_str(),
            ) {
                (Some(sha), Some(text)) if hex::encode(Sha256::digest(text.as_bytes())) == sha => {}
                (Some(_), Some(text)) => problems.push(format!(
                    "{label}: rendered {} chars, SGLang {} (hash differs)",
                    text.chars().count(),
                    case.golden["rendered_chars_sglang"]
                )),
                (None, Some(_)) => problems.push(format!(
                    "{label}: rendered, SGLang refuses: {}",
                    case.golden["error_sglang"]
                )),
                (None, None) => {}
                (Some(_), None) => {
                    problems.push(format!("{label}: refused ({line}), SGLang renders"))
                }
            }
            continue;
        }
        match (want.as_u64(), line["tokens"].as_u64()) {
            (Some(w), Some(g)) if w == g => {}
            (Some(w), Some(g)) => problems.push(format!("{label}: {g} tokens, SGLang {w}")),
            (None, Some(g)) => problems.push(format!(
                "{label}: counted {g}, SGLang refuses: {}",
                case.golden["error_sglang"]
            )),
            (Some(w), None) => problems.push(format!("{label}: refused ({line}), SGLang {w}")),
            (None, None) => {}
        }
    }
    (cases.len(), problems)
}

#[test]
fn counts_match_sglang_under_each_server_profile() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let index = profile_model::profiles_index(&shared);
    let profiles = index["profiles"].as_object().expect("profiles");
    assert!(!profiles.is_empty());
    let mut all = Vec::new();
    println!("\n{:<28} {:>6} {:>9}", "profile", "cases", "problems");
    for (name, profile) in profiles {
        let (n, problems) = check_profile(&shared, name, profile);
        let note = if PENDING_ENCODERS.contains(&name.as_str()) {
            " (encoder pending: refused)"
        } else {
            ""
        };
        println!("{name:<28} {n:>6} {:>9}{note}", problems.len());
        all.extend(problems);
    }
    for p in &all {
        println!("MISMATCH {p}");
    }
    assert!(
        all.is_empty(),
        "{} profile mismatches (listed above)",
        all.len()
    );
}
