//! Tests of `glm53.rs`: every case SGLang's own code produced
//! (`testdata/gen_glm53.py`), plus a few by hand.

use serde_json::{json, Map, Value};

use super::*;

const EXPECTED: &str = include_str!("testdata/glm53_expected.json");

fn kwargs(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn outcome(r: &Result<Prompt, Glm53Error>) -> String {
    match r {
        Ok(Prompt::Segments(s)) => format!("segments {s:?}"),
        Ok(Prompt::Text(t)) => format!("text {t:?}"),
        Ok(Prompt::Jinja) => "jinja".into(),
        Err(e) => format!("error {e}"),
    }
}

/// Each render case: the outcome SGLang had (segments, text, Jinja, or its
/// exception type and message), or a refusal where the case says `refuse`.
fn check_render_cases(cases: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or_default();
        let variant =
            Variant::from_name(case["variant"].as_str().unwrap_or_default()).expect("variant");
        let messages = case["messages"].as_array().cloned().unwrap_or_default();
        let tools = case["tools"].as_array().cloned();
        let agp = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let kw = kwargs(case["kwargs"].clone());
        let got = render_segments(variant, &messages, tools.as_deref(), agp, &kw);
        let want = &case["expect"];
        let ok = if let Some(segments) = want.get("segments") {
            let segments: Vec<String> = serde_json::from_value(segments.clone()).expect("segments");
            got == Ok(Prompt::Segments(segments))
        } else if let Some(text) = want.get("text") {
            got == Ok(Prompt::Text(text.as_str().unwrap_or_default().to_string()))
        } else if want.get("jinja").is_some() {
            got == Ok(Prompt::Jinja)
        } else if let Some(error) = want.get("error") {
            matches!(&got, Err(Glm53Error::Raised { exception, message })
                if *exception == error["type"] && *message == error["message"])
        } else if want.get("refuse").is_some() {
            matches!(got, Err(Glm53Error::Unmodelled(_)))
        } else {
            false
        };
        if !ok {
            failures.push(format!("{name}\n  want {want}\n  got  {}", outcome(&got)));
        }
    }
    failures
}

#[test]
fn matches_sglang() {
    let data: Value = serde_json::from_str(EXPECTED).expect("glm53_expected.json");
    let cases = data["render"].as_array().expect("render cases");
    let failures = check_render_cases(cases);
    println!(
        "glm53: {} of {} SGLang cases match",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(cases.len() >= 300, "the corpus shrank: {}", cases.len());
}

/// The same check on a file the generator writes outside the repo
/// (`GLM53_GOLDEN_OUT`: the golden requests as SGLang's chat path prepared
/// them). Skipped unless `GLM53_GOLDEN` names such a file.
#[test]
fn matches_sglang_goldens_when_given() {
    let Ok(path) = std::env::var("GLM53_GOLDEN") else {
        return;
    };
    let text = std::fs::read_to_string(&path).expect("GLM53_GOLDEN file");
    let data: Value = serde_json::from_str(&text).expect("golden JSON");
    let cases = data["render"].as_array().expect("render cases");
    let failures = check_render_cases(cases);
    println!(
        "glm53 goldens: {} of {} match",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn resolves_as_sglang() {
    let data: Value = serde_json::from_str(EXPECTED).expect("glm53_expected.json");
    let cases = data["resolve"].as_array().expect("resolve cases");
    let mut failures = Vec::new();
    for case in cases {
        let architectures: Vec<String> = case["architectures"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let template = case["template"].as_str();
        let resolved = resolve_python_chat_template(&architectures, template).map(Variant::name);
        let want = case["resolved"].as_str();
        let may_replace = may_replace_jinja_template(template);
        let is_glm53 = template.is_some_and(is_glm53_template);
        if resolved != want
            || Some(may_replace) != case["may_replace"].as_bool()
            || Some(is_glm53) != case["is_glm53"].as_bool()
        {
            failures.push(format!(
                "{} {:?}: got {resolved:?} {may_replace} {is_glm53}, want {case}",
                case["name"], architectures
            ));
        }
    }
    println!(
        "glm53 resolve: {} of {} SGLang cases match",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        cases.len() >= 100,
        "the resolve corpus shrank: {}",
        cases.len()
    );
}

#[test]
fn resolves_by_architecture_and_template() {
    let text = "[gMASK]<sop>Reasoning Effort: <tool_call><arg_key><arg_value>";
    let flash = format!("{text}<|begin_of_image|>");
    let arch = |a: &str| vec![a.to_string()];
    assert_eq!(
        resolve_python_chat_template(&arch("GlmMoeDsaForCausalLM"), Some(text)),
        Some(Variant::Glm53)
    );
    assert_eq!(
        resolve_python_chat_template(&arch("Glm5NextForConditionalGeneration"), Some(&flash)),
        Some(Variant::Glm53Flash)
    );
    // The multimodal block must match the architecture.
    assert_eq!(
        resolve_python_chat_template(&arch("GlmMoeDsaForCausalLM"), Some(&flash)),
        None
    );
    assert_eq!(
        resolve_python_chat_template(&arch("Glm5NextForConditionalGeneration"), Some(text)),
        None
    );
    // GLM-4.5-style templates keep the enable_thinking toggle.
    let glm45 = format!("{text}{{% if enable_thinking %}}");
    assert!(!is_glm53_template(&glm45));
    assert_eq!(
        resolve_python_chat_template(&arch("GlmMoeDsaForCausalLM"), Some(&glm45)),
        None
    );
    assert_eq!(resolve_python_chat_template(&[], Some(text)), None);
    assert!(!may_replace_jinja_template(None) && !may_replace_jinja_template(Some("")));
}

#[test]
fn renders_a_simple_chat() {
    let messages = [
        json!({"role": "system", "content": "S"}),
        json!({"role": "user", "content": [{"type": "text", "text": "Hi"}]}),
    ];
    let kw = kwargs(json!({"reasoning_effort": "high"}));
    let want: Vec<String> = [
        "[gMASK]",
        "<sop>",
        "<|system|>",
        "Reasoning Effort: High",
        "<|system|>",
        "S",
        "<|user|>",
        "Hi",
        "<|assistant|>",
        "<think>",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        render_segments(Variant::Glm53, &messages, None, true, &kw),
        Ok(Prompt::Segments(want.clone()))
    );
    assert_eq!(
        render_glm53(&messages, None, true, &kw).as_deref(),
        Ok(want.concat().as_str())
    );
    assert_eq!(
        Variant::from_name("glm-5.3-flash"),
        Some(Variant::Glm53Flash)
    );
    assert_eq!(
        Variant::from_name("glm-5.3").map(Variant::name),
        Some("glm-5.3")
    );
    assert_eq!(Variant::from_name("glm-5"), None);
}

#[test]
fn routes_by_template_kwargs() {
    let messages = [json!({"role": "user", "content": "Hi"})];
    let text = "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi";
    for (kw, want) in [
        (json!({"padding": true}), Ok(Prompt::Text(text.into()))),
        (
            json!({"chat_template": null}),
            Ok(Prompt::Text(text.into())),
        ),
        (json!({"chat_template": ""}), Ok(Prompt::Jinja)),
        (json!({"continue_final_message": 1}), Ok(Prompt::Jinja)),
        (
            json!({"return_assistant_tokens_mask": false}),
            Ok(Prompt::Text(text.into())),
        ),
        (
            json!({"documents": 5}),
            Err(Glm53Error::Raised {
                exception: "ValueError",
                message: "'int' object is not iterable".into(),
            }),
        ),
        (
            json!({"tokenize": true}),
            Err(Glm53Error::Raised {
                exception: "KeyError",
                message: "'tokenize'".into(),
            }),
        ),
    ] {
        assert_eq!(
            render_segments(Variant::Glm53, &messages, None, false, &kwargs(kw.clone())),
            want,
            "{kw}"
        );
    }
}

#[test]
fn python_str_of_structures() {
    let messages = [json!({"role": "user", "content": {"a": [1, 2.5, null, true, "it's", 1e16]}})];
    let got = render_glm53(&messages, None, false, &Map::new()).unwrap();
    assert!(
        got.ends_with("<|user|>{'a': [1, 2.5, None, True, \"it's\", 1e+16]}"),
        "{got}"
    );
    // python3 -c 'print(repr({"a": "é\xa0"}))' prints {'a': 'é\xa0'}
    let messages = [json!({"role": "user", "content": {"a": "é\u{a0}"}})];
    let got = render_glm53(&messages, None, false, &Map::new()).unwrap();
    assert!(got.ends_with(r"<|user|>{'a': 'é\xa0'}"), "{got}");
    // Unassigned in Unicode 14.0: escaped by Python 3.11, printed by 3.12.
    let messages = [json!({"role": "user", "content": {"a": "\u{1fae8}"}})];
    assert!(matches!(
        render_glm53(&messages, None, false, &Map::new()),
        Err(Glm53Error::Unmodelled(_))
    ));
}

/// Random JSON in every position: never a panic.
#[test]
fn never_panics() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    fn value(next: &mut dyn FnMut(u64) -> u64, depth: u32) -> Value {
        const KEYS: [&str; 14] = [
            "role",
            "content",
            "type",
            "text",
            "name",
            "tool_call_id",
            "id",
            "output",
            "function",
            "arguments",
            "reasoning_content",
            "tool_calls",
            "defer_loading",
            "x",
        ];
        const STRS: [&str; 12] = [
            "user",
            "assistant",
            "tool",
            "system",
            "text",
            "image",
            "tool_reference",
            "a",
            "",
            "<think>r</think>c",
            "function",
            "é",
        ];
        match if depth > 3 { next(5) } else { next(8) } {
            0 => Value::Null,
            1 => Value::Bool(next(2) == 0),
            2 => json!(next(3)),
            3 => json!(0.5),
            4 => Value::String(STRS[next(STRS.len() as u64) as usize].into()),
            5 | 6 => {
                let mut m = Map::new();
                for _ in 0..next(5) {
                    m.insert(
                        KEYS[next(KEYS.len() as u64) as usize].into(),
                        value(next, depth + 1),
                    );
                }
                Value::Object(m)
            }
            _ => Value::Array((0..next(4)).map(|_| value(next, depth + 1)).collect()),
        }
    }
    for _ in 0..3000 {
        let messages: Vec<Value> = (0..next(6)).map(|_| value(&mut next, 0)).collect();
        let tools: Option<Vec<Value>> =
            (next(2) == 0).then(|| (0..next(3)).map(|_| value(&mut next, 1)).collect());
        let kw = kwargs(value(&mut next, 2));
        for variant in [Variant::Glm53, Variant::Glm53Flash] {
            let _ = render_segments(variant, &messages, tools.as_deref(), next(2) == 0, &kw);
        }
    }
}
