//! Every case `testdata/gen_dsv41_releases.py` ran through 0.5.21's and
//! 0.5.22's own chat handlers: servers that do not start, the encoder alone
//! on the arguments the release passed, the glue and encoder from the
//! release's `model_dump()`s, and the prompt length from the fixture.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::*;
use crate::encoder::compact_expected::{self, recorded, Output};

const EXPECTED: &str = include_str!("testdata/dsv41_sglang_expected.json");

fn version(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

fn fixture() -> Option<Tokenizer> {
    let path = crate::shared_dir()?.join("tokenizers/deepseek-v4/tokenizer.json");
    Some(Tokenizer::from_file(&path).expect("the fixture loads"))
}

fn short(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let start = chars.len().saturating_sub(300);
    chars[start..].iter().collect()
}

fn same_error(e: &Dsv32Error, want: &str) -> bool {
    e.0 == want || want.starts_with(&format!("{}: ", e.kind()))
}

/// The encoder's `reasoning_effort` argument as recorded.
fn effort_arg(v: &Value) -> Effort {
    match v {
        Value::String(s) => parse_effort(&json!(s)).expect("a tier"),
        Value::Number(n) => Effort::Budget(n.as_u64().expect("a budget") as u32),
        other => panic!("effort {other}"),
    }
}

#[test]
fn both_releases_match_their_own_python() {
    let expected = compact_expected::load(EXPECTED, "dsv41_sglang_expected.json");
    let tokenizer = fixture();
    let mut failures = Vec::new();
    let mut tally: BTreeMap<(u32, u32, u32), (usize, usize)> = BTreeMap::new();
    for (v, run) in expected.as_object().expect("releases") {
        let serving = Dsv41Serving::of_release(version(v)).expect("a V4.1 release");
        let t = tally.entry(version(v)).or_default();
        for case in run["cases"].as_array().expect("cases") {
            let name = case["name"].as_str().unwrap_or("?");
            let label = format!("{v} {name}");
            let env = &case["server"]["env"];
            let default = default_effort_from_env(env["SGLANG_DSV41_REASONING_EFFORT"].as_str());
            if let Some(load) = case["load_error"].as_str() {
                match &default {
                    Err(m) if load == format!("ValueError: {m}") => {}
                    other => failures.push(format!("{label}: {other:?}, SGLang {load}")),
                }
                continue;
            }
            let Ok(default) = default else {
                failures.push(format!("{label}: the server does not start here"));
                continue;
            };
            if let Some(enc) = case.get("encoder") {
                let thinking = enc["thinking_mode"] == "thinking";
                let effort = effort_arg(&enc["kwargs"]["reasoning_effort"]);
                let messages = enc["messages"].as_array().expect("messages");
                let got = encode_messages(messages, thinking, &effort);
                match (&got, Output::of(&enc["output"]), enc["error"].as_str()) {
                    (Ok(g), Some(w), _)
                        if w.matches(&g.text)
                            && g.images as u64 == enc["images"].as_u64().unwrap_or(0) => {}
                    (Err(e), None, Some(w)) if same_error(e, w) => {}
                    _ => failures.push(format!(
                        "{label}: encoder {}\n    Python {}",
                        short(&format!("{got:?}")),
                        short(&recorded(&enc["output"], &enc["error"]))
                    )),
                }
            }
            let Some(glue) = case.get("glue") else {
                continue;
            };
            t.0 += 1;
            let messages = glue["messages"].as_array().cloned().expect("messages");
            let tools = glue["tools_wire"].as_array().cloned();
            let request = Dsv41Request {
                messages: &messages,
                tools: tools.as_deref(),
                tools_reach_template: glue["tools_reach_template"].as_bool().expect("bool"),
                thinking: Some(&glue["thinking"]).filter(|v| !v.is_null()),
                default_thinking: env["SGLANG_DEFAULT_THINKING"] == "1",
                continue_final_message: glue["continue_final_message"].as_bool().expect("bool"),
                reasoning_effort: Some(&glue["reasoning_effort"]).filter(|v| !v.is_null()),
                default_effort: &default,
                task: glue["task"].as_str(),
                multimodal: false,
            };
            let got = encode(serving, &request);
            // The same from the request body itself (`message_dumps`, `tool_dumps`).
            if !name.starts_with("probe/numbers") {
                let body: Value =
                    serde_json::from_str(case["body"].as_str().expect("a body")).expect("JSON");
                let body_messages = body["messages"].as_array().cloned().unwrap_or_default();
                match crate::encoder::dsv32_serving::message_dumps(version(v), &body_messages) {
                    Ok(dumped) => {
                        let body_tools = body["tools"].as_array().cloned();
                        let request = {
                            let mut r = request;
                            r.messages = &dumped;
                            r.tools = body_tools.as_deref().filter(|_| r.tools.is_some());
                            r
                        };
                        let again = encode(serving, &request);
                        let same = match (&got, &again) {
                            (Ok(a), Ok(b)) => a == b,
                            (Err(a), Err(b)) => a.kind() == b.kind(),
                            _ => false,
                        };
                        if !same {
                            failures.push(format!(
                                "{label}: from the body {}, from the dumps {}",
                                short(&format!("{again:?}")),
                                short(&format!("{got:?}"))
                            ));
                        }
                    }
                    Err(e) if e.kind() == "Unmodelled" => {}
                    Err(e) => failures.push(format!("{label}: dumps: {e}")),
                }
            }
            let python_text = Output::of(&case["encoder"]["output"]);
            match (&got, case["tokens"].as_u64(), python_text) {
                (Ok(p), Some(tokens), Some(text)) if text.matches(&p.text) => {
                    t.1 += 1;
                    if let Some(tk) = &tokenizer {
                        let ids = |s: &str| tk.encode_fast(s, false).expect("encodes").len();
                        let mut n = 1 + ids(&p.text);
                        if let Some(prefix) =
                            p.assistant_prefix.as_deref().filter(|p| !p.is_empty())
                        {
                            n += ids(prefix);
                        }
                        if n != tokens as usize {
                            failures.push(format!("{label}: {n} tokens, Python {tokens}"));
                        }
                    }
                }
                (Err(e), None, _) => {
                    let want = case["encoder"]["error"]
                        .as_str()
                        .or(case["error"].as_str())
                        .unwrap_or("");
                    if same_error(e, want) {
                        t.1 += 1;
                    } else {
                        failures.push(format!("{label}: {e}, Python {want}"));
                    }
                }
                _ => failures.push(format!(
                    "{label}: {}\n    Python {:?} {}",
                    short(&format!("{got:?}")),
                    case["tokens"],
                    short(&recorded(&case["encoder"]["output"], &case["error"]))
                )),
            }
        }
    }
    for (v, (glued, same)) in &tally {
        println!("{v:?}: {glued} requests through the glue, {same} as Python");
    }
    assert_eq!(tally.len(), 2);
    assert!(
        failures.is_empty(),
        "{} differ from SGLang:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn efforts_parse_as_sglang_parses_them() {
    assert_eq!(parse_effort(&json!(0.295)), Some(Effort::Budget(30)));
    assert_eq!(parse_effort(&json!(0.005)), Some(Effort::Budget(1)));
    assert_eq!(parse_effort(&json!(1.0)), None);
    assert_eq!(parse_effort(&json!(true)), None);
    assert_eq!(parse_effort(&json!("xhigh")), Some(Effort::Tier("xhigh")));
    assert_eq!(default_effort_from_env(None), Ok(Effort::Tier("high")));
    assert_eq!(
        default_effort_from_env(Some(" 35 ")),
        Ok(Effort::Budget(35))
    );
    assert!(default_effort_from_env(Some("0")).is_err());
}
