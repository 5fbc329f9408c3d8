//! Differential tests against transformers' Jinja2 environment. Expected
//! outputs were produced by `testdata/reference.py` (transformers 5.19.0,
//! Jinja2 3.1.6, CPython 3.11.7, strftime pinned to 2025-01-15 12:00:00) and
//! are recorded in `snippet_cases.rs` and `testdata/fixtures_expected.json`.

use super::snippet_cases::{BASE_CONTEXT, SNIPPETS, SPECIAL};
use super::*;

fn fixed_now() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("valid date")
}

fn render_with(
    src: &str,
    messages: &Value,
    tools: Option<&Value>,
    documents: Option<&Value>,
    add_generation_prompt: bool,
    special_tokens: &[(String, String)],
    extra: &Map<String, Value>,
) -> Result<String, TemplateError> {
    let tmpl = ChatTemplate::new(src)?;
    tmpl.render(&RenderContext {
        messages,
        tools,
        documents,
        add_generation_prompt,
        special_tokens,
        extra,
        now: fixed_now(),
    })
}

fn check(
    failures: &mut Vec<String>,
    src: &str,
    got: Result<String, TemplateError>,
    want: Option<&str>,
) {
    match (got, want) {
        (Ok(g), Some(w)) if g == w => {}
        (Err(_), None) => {}
        (got, want) => failures.push(format!(
            "template: {src:?}\n   want: {want:?}\n    got: {got:?}"
        )),
    }
}

#[test]
fn snippets_match_jinja2() {
    let base: Map<String, Value> = serde_json::from_str(BASE_CONTEXT).expect("base context");
    let mut failures = Vec::new();
    for (src, want) in SNIPPETS {
        let got = render_with(src, &Value::Array(vec![]), None, None, false, &[], &base);
        check(&mut failures, src, got, *want);
    }
    for (src, ctx, want) in SPECIAL {
        let ctx: Value = serde_json::from_str(ctx).expect("special context");
        let special: Vec<(String, String)> = ctx
            .get("special_tokens")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let extra = ctx
            .get("extra")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let agp = ctx
            .get("add_generation_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let got = render_with(
            src,
            &Value::Array(vec![]),
            ctx.get("tools"),
            ctx.get("documents"),
            agp,
            &special,
            &extra,
        );
        check(&mut failures, src, got, *want);
    }
    assert!(
        failures.is_empty(),
        "{} of {} snippets differ from Jinja2:\n{}",
        failures.len(),
        SNIPPETS.len() + SPECIAL.len(),
        failures.join("\n")
    );
}

/// The shared reference data (`/work/shared`), or `None` with the reason to skip.
fn shared_dir() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("PREFILL_GUARD_SHARED") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    if dir.join("tokenizers").is_dir() {
        return Some(dir);
    }
    let msg = format!(
        "shared reference data not found at {} (set PREFILL_GUARD_SHARED)",
        dir.join("tokenizers").display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipping: {msg}");
    None
}

fn load_fixture_template(dir: &std::path::Path) -> String {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja).expect("read chat_template.jinja");
    }
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("tokenizer_config.json")).expect("read tokenizer_config.json"),
    )
    .expect("parse tokenizer_config.json");
    config["chat_template"]
        .as_str()
        .expect("chat_template is a string")
        .to_string()
}

#[test]
fn fixture_templates_match_transformers() {
    let Some(shared) = shared_dir() else { return };
    let expected: Value =
        serde_json::from_str(include_str!("testdata/fixtures_expected.json")).expect("expectations");
    let cases = expected["cases"].as_array().expect("cases");
    let fixtures = expected["fixtures"].as_object().expect("fixtures");
    assert_eq!(fixtures.len(), 9, "one expectation set per fixture");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, fx) in fixtures {
        let dir = shared.join("tokenizers").join(name);
        let tmpl = ChatTemplate::new(&load_fixture_template(&dir))
            .unwrap_or_else(|e| panic!("{name}: template does not compile: {e}"));
        let special: Vec<(String, String)> = fx["special_tokens"]
            .as_array()
            .expect("special tokens")
            .iter()
            .map(|p| (p[0].as_str().unwrap_or_default().to_string(), p[1].as_str().unwrap_or_default().to_string()))
            .collect();
        for case in cases {
            let case_name = case["name"].as_str().expect("case name");
            let extra = case.get("extra").and_then(Value::as_object).cloned().unwrap_or_default();
            let got = tmpl.render(&RenderContext {
                messages: &case["messages"],
                tools: case.get("tools"),
                documents: None,
                add_generation_prompt: true,
                special_tokens: &special,
                extra: &extra,
                now: fixed_now(),
            });
            let want = &fx["results"][case_name];
            checked += 1;
            match (got, want.get("ok").and_then(Value::as_str)) {
                (Ok(g), Some(w)) if g == w => {}
                (Err(_), None) => {}
                (got, _) => failures.push(format!("{name}/{case_name}:\n   want: {want}\n    got: {got:?}")),
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} renders differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn content_format_matches_sglang() {
    let Some(shared) = shared_dir() else { return };
    // HEADER.json → sglang.tokenizers.<fixture>.jinja_template_content_format
    let header: Value = serde_json::from_str(
        &std::fs::read_to_string(shared.join("goldens/HEADER.json")).expect("read HEADER.json"),
    )
    .expect("parse HEADER.json");
    let per_fixture = header["sglang"]["tokenizers"].as_object().expect("sglang.tokenizers");
    assert!(!per_fixture.is_empty());
    for (name, info) in per_fixture {
        let want = match info["jinja_template_content_format"].as_str() {
            Some("openai") => ContentFormat::OpenAi,
            Some("string") => ContentFormat::String,
            other => panic!("{name}: unexpected format {other:?}"),
        };
        let src = load_fixture_template(&shared.join("tokenizers").join(name));
        assert_eq!(detect_content_format(&src), want, "{name}");
        assert_eq!(ChatTemplate::new(&src).expect("compiles").content_format(), want, "{name}");
    }
}

/// The named special tokens of `tokenizer_config.json` (string or AddedToken),
/// as `gen_fixtures.py` extracts them.
fn config_special_tokens(dir: &std::path::Path) -> Vec<(String, String)> {
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("tokenizer_config.json")).expect("read tokenizer_config.json"),
    )
    .expect("parse tokenizer_config.json");
    config
        .as_object()
        .expect("config object")
        .iter()
        .filter(|(k, _)| k.ends_with("_token"))
        .filter_map(|(k, v)| {
            let s = v.as_str().or_else(|| v.get("content").and_then(Value::as_str))?;
            Some((k.clone(), s.to_string()))
        })
        .collect()
}

/// Every chat case of the goldens rendered as the plain reference renders it
/// (`apply_chat_template(messages, tools=tools or None, add_generation_prompt=True)`),
/// compared by `rendered_sha256`; where that reference raised, this must raise.
#[test]
fn golden_plain_renders_match() {
    use sha2::Digest;
    let Some(shared) = shared_dir() else { return };
    let goldens = shared.join("goldens");
    let mut failures = Vec::new();
    let mut checked = 0;
    for fixture in [
        "deepseek-v3",
        "gemma-3",
        "glm-4.5",
        "gpt-oss",
        "llama-3.2",
        "mistral-nemo",
        "phi-3-mini",
        "qwen2.5",
        "qwen3",
    ] {
        let dir = shared.join("tokenizers").join(fixture);
        let tmpl = ChatTemplate::new(&load_fixture_template(&dir)).expect("template compiles");
        let special = config_special_tokens(&dir);
        let lines = std::fs::read_to_string(goldens.join(format!("{fixture}.jsonl"))).expect("read goldens");
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let g: Value = serde_json::from_str(line).expect("golden line");
            if g["endpoint"] != "chat" {
                continue;
            }
            let case = g["case"].as_str().expect("case");
            let body: Value = serde_json::from_str(
                &std::fs::read_to_string(goldens.join("cases").join(format!("{case}.json"))).expect("read case"),
            )
            .expect("parse case");
            let req = &body["request"];
            let tools = req.get("tools").filter(|t| t.as_array().is_some_and(|a| !a.is_empty()));
            let got = tmpl.render(&RenderContext {
                messages: &req["messages"],
                tools,
                documents: None,
                add_generation_prompt: true,
                special_tokens: &special,
                extra: &Map::new(),
                now: fixed_now(),
            });
            checked += 1;
            match (got, g.get("rendered_sha256").and_then(Value::as_str)) {
                (Ok(text), Some(want)) if hex::encode(sha2::Sha256::digest(text.as_bytes())) == want => {}
                (Err(_), None) => {}
                (got, want) => failures.push(format!(
                    "{fixture}/{case}: want sha {want:?} (error {:?}), got {:?}",
                    g.get("error"),
                    got.map(|t| t.chars().take(120).collect::<String>())
                )),
            }
        }
    }
    assert!(checked > 400, "only {checked} golden renders found");
    assert!(failures.is_empty(), "{} of {checked} differ:\n{}", failures.len(), failures.join("\n"));
}
