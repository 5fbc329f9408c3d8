//! Golden test: every count must equal what SGLang 0.5.23 computes
//! (`shared/goldens/<fixture>.jsonl` → `tokens_sglang`), every refusal must be a
//! refusal, and every rendered chat prompt must hash to `rendered_sha256_sglang`.
//!
//! Fixtures run in parallel threads (each tokenizer is loaded once); the test
//! prints a per-fixture score table and fails listing every mismatch.

use crate::shared;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prefill_guard_count::{Clock, CountError, ModelCounter, Unit};
use prefill_guard_inspect::{self as inspect, json, Route};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The tests here each use every core; run them one at a time so the timing
/// check measures the counter, not contention.
static SERIAL: Mutex<()> = Mutex::new(());

struct FixtureResult {
    name: String,
    matched: usize,
    total: usize,
    skipped: usize,
    mismatches: Vec<String>,
}

/// The goldens pin `strftime_now()` to 2025-01-15 12:00:00.
fn clock() -> Clock {
    let t = chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("valid date");
    Clock::Fixed(t)
}

/// The units the guard's own request path makes of a body: the strict JSON
/// reader and the route extraction the proxy uses, so a golden match is a
/// match of what the proxy would count.
fn text_units(endpoint: &str, req: &Value) -> Result<Vec<Unit>, String> {
    let route = match endpoint {
        "chat" => Route::ChatCompletions,
        "completions" => Route::Completions,
        "generate" => Route::Generate,
        other => return Err(format!("unknown endpoint {other}")),
    };
    let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let value = json::parse_strict(&body).map_err(|r| r.to_string())?;
    inspect::extract(route, Arc::new(value))
        .map(|p| p.units)
        .map_err(|r| r.to_string())
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn describe(e: &CountError) -> String {
    let s = e.to_string();
    let mut short: String = s.chars().take(160).collect();
    if short.len() < s.len() {
        short.push('…');
    }
    short
}

fn run_fixture(shared: &Path, name: &str) -> FixtureResult {
    let mut res = FixtureResult {
        name: name.to_owned(),
        matched: 0,
        total: 0,
        skipped: 0,
        mismatches: Vec::new(),
    };
    let counter = match ModelCounter::load(&shared.join("tokenizers").join(name)) {
        Ok(c) => c,
        Err(e) => {
            res.mismatches.push(format!("{name}: load failed: {e}"));
            return res;
        }
    };
    let lines_path = shared.join("goldens").join(format!("{name}.jsonl"));
    let text = match std::fs::read_to_string(&lines_path) {
        Ok(t) => t,
        Err(e) => {
            res.mismatches
                .push(format!("{name}: cannot read {}: {e}", lines_path.display()));
            return res;
        }
    };
    let clock = clock();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let golden: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                res.mismatches.push(format!("{name}: bad golden line: {e}"));
                continue;
            }
        };
        let case = golden["case"].as_str().unwrap_or("?").to_owned();
        let endpoint = golden["endpoint"].as_str().unwrap_or("?");
        let case_path = shared
            .join("goldens")
            .join("cases")
            .join(format!("{case}.json"));
        let request = match std::fs::read_to_string(&case_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        {
            Some(c) => c["request"].clone(),
            None => {
                res.mismatches.push(format!(
                    "{name}/{case}: cannot read {}",
                    case_path.display()
                ));
                continue;
            }
        };
        let expected = &golden["tokens_sglang"];
        let refused = expected.is_null();
        let mut problems: Vec<String> = Vec::new();
        let mut checked = false;

        if endpoint == "chat" {
            if let Some(want) = golden.get("rendered_sha256_sglang").and_then(Value::as_str) {
                checked = true;
                match counter.render_chat(&request, clock) {
                    Ok(text) if sha256_hex(&text) == want => {}
                    Ok(text) => problems.push(format!(
                        "[render] sha256 differs (chars {} vs golden {})",
                        text.chars().count(),
                        golden["rendered_chars_sglang"]
                    )),
                    Err(e) => problems.push(format!("[render] refused: {}", describe(&e))),
                }
            }
            if counter.can_count() {
                checked = true;
                let count = |request: &Value| match text_units("chat", request) {
                    Ok(units) => counter.count(&units[0], clock),
                    Err(e) => Err(CountError::invalid(e)),
                };
                let got = count(&request);
                // A chat carrying `input_ids` is SGLang's `len(input_ids)` on
                // a worker that gets them, but sglang-router drops the field
                // and the worker then renders the messages: the guard counts
                // the larger of the two (`ChatInputs::given_ids`).
                let expected = &match (expected.as_u64(), request.get("input_ids")) {
                    (Some(ids), Some(_)) => {
                        let mut messages_only = request.clone();
                        messages_only.as_object_mut().unwrap().remove("input_ids");
                        match count(&messages_only) {
                            Ok(rendered) => Value::from(ids.max(rendered as u64)),
                            Err(_) => expected.clone(),
                        }
                    }
                    _ => expected.clone(),
                };
                match (got, expected.as_u64()) {
                    (Ok(n), Some(want)) if n as u64 == want => {}
                    (Ok(n), Some(want)) => {
                        problems.push(format!("[count] {n} tokens, SGLang {want}"))
                    }
                    (Ok(n), None) => problems.push(format!(
                        "[refusal] counted {n}, SGLang refuses: {}",
                        golden["error_sglang"].as_str().unwrap_or("?")
                    )),
                    (Err(_), None) => {}
                    (Err(e), Some(want)) => {
                        problems.push(format!("[count] refused ({}), SGLang {want}", describe(&e)))
                    }
                }
            } else if refused && golden.get("error_sglang").is_some() {
                // Template-only fixture: SGLang's refusal must show in rendering.
                checked = true;
                if let Ok(text) = counter.render_chat(&request, clock) {
                    problems.push(format!(
                        "[refusal] rendered {} chars, SGLang refuses: {}",
                        text.chars().count(),
                        golden["error_sglang"].as_str().unwrap_or("?")
                    ));
                }
            }
        } else if counter.can_count() {
            checked = true;
            let got: Result<Vec<usize>, String> =
                text_units(endpoint, &request).and_then(|units| {
                    units
                        .iter()
                        .map(|u| counter.count(u, clock).map_err(|e| describe(&e)))
                        .collect()
                });
            let want: Option<Vec<u64>> = match expected {
                Value::Number(n) => n.as_u64().map(|n| vec![n]),
                Value::Array(items) => items.iter().map(Value::as_u64).collect(),
                _ => None,
            };
            match (got, want) {
                (Ok(g), Some(w))
                    if g.len() == w.len() && g.iter().zip(&w).all(|(a, b)| *a as u64 == *b) => {}
                (Ok(g), Some(w)) => problems.push(format!("[count] {g:?} tokens, SGLang {w:?}")),
                (Ok(g), None) => problems.push(format!("[refusal] counted {g:?}, SGLang refuses")),
                (Err(_), None) => {}
                (Err(e), Some(w)) => problems.push(format!("[count] refused ({e}), SGLang {w:?}")),
            }
        }

        if !checked {
            res.skipped += 1;
            continue;
        }
        res.total += 1;
        if problems.is_empty() {
            res.matched += 1;
        } else {
            res.mismatches.push(format!(
                "{name}/{case} ({endpoint}): {}",
                problems.join("; ")
            ));
        }
    }
    res
}

/// The fixtures that have goldens under SGLang's default server flags. The
/// others (the DeepSeek-V3.2/V4 stand-ins) are only ever served through
/// their model-specific encoders: `tests/it/profiles.rs` checks them, and
/// `every_fixture_has_goldens` that none is left out.
fn fixtures(shared: &Path) -> Vec<String> {
    let mut dirs: Vec<(u64, String)> = std::fs::read_dir(shared.join("tokenizers"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    shared
                        .join("goldens")
                        .join(format!("{name}.jsonl"))
                        .is_file()
                })
                .map(|e| {
                    let size = std::fs::metadata(e.path().join("tokenizer.json"))
                        .map(|m| m.len())
                        .unwrap_or(0);
                    (size, e.file_name().to_string_lossy().into_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    // Largest first, so the slowest loads start at once.
    dirs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    dirs.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn counts_match_sglang() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let names = fixtures(&shared);
    assert!(
        !names.is_empty(),
        "no fixtures under {}",
        shared.join("tokenizers").display()
    );
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4);
    let next = AtomicUsize::new(0);
    let shared_ref: &PathBuf = &shared;
    let mut results: Vec<FixtureResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(name) = names.get(i) else { break };
                        out.push(run_fixture(shared_ref, name));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("fixture worker panicked"))
            .collect()
    });
    results.sort_by(|a, b| a.name.cmp(&b.name));

    println!("\n{:<14} {:>9} {:>7}", "fixture", "matched", "n/a");
    let (mut matched, mut total) = (0, 0);
    for r in &results {
        println!(
            "{:<14} {:>4}/{:<4} {:>7}",
            r.name, r.matched, r.total, r.skipped
        );
        matched += r.matched;
        total += r.total;
    }
    println!("{:<14} {:>4}/{:<4}\n", "all", matched, total);
    let mismatches: Vec<&String> = results.iter().flat_map(|r| &r.mismatches).collect();
    for m in &mismatches {
        println!("MISMATCH {m}");
    }
    assert!(
        mismatches.is_empty(),
        "{} golden mismatches (listed above)",
        mismatches.len()
    );
}

/// Every fixture is checked somewhere: by the default goldens here, or by a
/// server profile (`goldens/profiles/PROFILES.json`, run by `tests/it/profiles.rs`).
#[test]
fn every_fixture_has_goldens() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let profiles: Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join("goldens/profiles/PROFILES.json"))
            .expect("goldens/profiles/PROFILES.json"),
    )
    .expect("PROFILES.json is JSON");
    let in_profiles: Vec<&str> = profiles["profiles"]
        .as_object()
        .expect("profiles")
        .values()
        .filter_map(|p| p["fixture"].as_str())
        .collect();
    let default = fixtures(&shared);
    for entry in std::fs::read_dir(shared.join("tokenizers")).expect("tokenizers/") {
        let entry = entry.expect("dir entry");
        if !entry.path().is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            default.contains(&name) || in_profiles.contains(&name.as_str()),
            "fixture {name} has neither goldens/{name}.jsonl nor a profile"
        );
    }
}

/// Loader facts the goldens rely on, checked directly so a regression names its cause.
#[test]
fn tokenizers_load_as_sglang_does() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let load = |name: &str| {
        ModelCounter::load(&shared.join("tokenizers").join(name)).expect("fixture loads")
    };
    let clock = clock();
    // DeepSeek-V3: the BOS comes from `add_bos_token` in tokenizer_config.json,
    // not from tokenizer.json (whose post-processor adds nothing).
    let ds = load("deepseek-v3");
    assert_eq!(ds.count(&Unit::Text(String::new()), clock).ok(), Some(1));
    // Phi-3 under transformers 5.19: Metaspace(prepend_scheme="first"), no
    // normalizer, so text after a special token gets no "▁" and a leading
    // space is not doubled.
    let phi = load("phi-3-mini");
    assert_eq!(
        phi.count(&Unit::Text("<|end|>c".into()), clock).ok(),
        Some(2)
    );
    assert_eq!(
        phi.count(&Unit::Text(" hello world".into()), clock).ok(),
        Some(2)
    );
    // Template-only directory: renders, but cannot count text.
    let glm = load("glm-4.5");
    assert!(!glm.can_count());
    assert!(matches!(
        glm.count(&Unit::Text("x".into()), clock),
        Err(CountError::NoTokenizer)
    ));
}

/// A 2.5 MB prompt is counted on the request path. Encoding is single-threaded
/// (about 0.9 s for 840k tokens on one core here); the bound leaves room for a
/// slower CI core without letting a quadratic regression through.
#[test]
fn large_prompt_counts_quickly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let counter =
        ModelCounter::load(&shared.join("tokenizers").join("qwen3")).expect("fixture loads");
    let unit = "Prefill guard counts tokens exactly, 12345 times; <|im_start|> 漢字 émoji 🚀.\n";
    let text = unit.repeat(2_500_000 / unit.len());
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}]});
    let started = std::time::Instant::now();
    let n = counter
        .count(&Unit::Chat(Arc::new(body)), clock())
        .expect("counts");
    let took = started.elapsed();
    println!("2.5 MB chat prompt: {n} tokens in {took:?}");
    assert!(n > 500_000);
    if !cfg!(debug_assertions) {
        assert!(
            took < std::time::Duration::from_secs(3),
            "2.5 MB prompt took {took:?}"
        );
    }
}
