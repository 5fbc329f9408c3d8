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

fn check(failures: &mut Vec<String>, src: &str, got: Result<String, TemplateError>, want: Option<&str>) {
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
        let agp = ctx.get("add_generation_prompt").and_then(Value::as_bool).unwrap_or(false);
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
