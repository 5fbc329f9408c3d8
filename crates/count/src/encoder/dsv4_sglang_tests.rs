//! Every case `testdata/gen_dsv4_releases.py` ran through a release's own
//! chat handler (0.5.12 - 0.5.22): the encoder file alone on the arguments
//! the release passed, the glue and encoder from the release's
//! `model_dump()`s, and the prompt length from the fixture tokenizer.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::*;
use crate::encoder::compact_expected::{self, recorded, Output};

const EXPECTED: &str = include_str!("testdata/dsv4_sglang_expected.json");

/// Python produces a prompt (or refuses otherwise), the guard refuses on
/// purpose (`Unmodelled`): a number beyond the 64-bit integers in a body a
/// release before 0.5.18 reads with Python's `json`; and before 0.5.14 an
/// arguments string holding one, which `json.loads` keeps exact.
fn refused_on_purpose(serving: Dsv4Serving, name: &str) -> bool {
    let json_body = serving < Dsv4Serving::V0518;
    match name {
        "probe/numbers_schema_big_int"
        | "probe/numbers_args_object"
        | "probe/numbers_schema_floats" => json_body,
        "probe/numbers_args_string" => serving < Dsv4Serving::V0514,
        _ => false,
    }
}

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

/// `tokenizer.encode(text)` (the stand-in adds BOS), then the prefix's ids
/// without their added BOS.
fn count(tokenizer: &Tokenizer, prompt: &Dsv4Prompt) -> usize {
    let ids = |text: &str| tokenizer.encode_fast(text, false).expect("encodes").len();
    let mut n = 1 + ids(&prompt.text);
    if let Some(prefix) = prompt.assistant_prefix.as_deref().filter(|p| !p.is_empty()) {
        n += ids(prefix);
    }
    n
}

fn profile_of(case: &Value) -> EffortProfile {
    match case["server"]["profile"].as_str() {
        Some("official") => EffortProfile::Official,
        _ => EffortProfile::Preview,
    }
}

/// The tail of a long text (where prompts differ, mostly).
fn short(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let start = chars.len().saturating_sub(300);
    chars[start..].iter().collect()
}

/// The same exception type (messages of AssertionError and set reprs are
/// Python's own).
fn same_error(e: &Dsv32Error, want: &str) -> bool {
    e.0 == want
        || want.starts_with(&format!("{}: ", e.kind()))
        || (e.kind() == "JSONDecodeError" && want.starts_with("ValueError"))
}

#[test]
fn every_release_matches_its_own_python() {
    let expected = compact_expected::load(EXPECTED, "dsv4_sglang_expected.json");
    let tokenizer = fixture();
    let mut failures = Vec::new();
    let mut per_release: BTreeMap<(u32, u32, u32), (usize, usize, usize)> = BTreeMap::new();
    for (v, run) in expected.as_object().expect("releases") {
        let serving = Dsv4Serving::of_release(version(v)).expect("a release with the encoder");
        let tally = per_release.entry(version(v)).or_default();
        for case in run["cases"].as_array().expect("cases") {
            let name = case["name"].as_str().unwrap_or("?");
            let base = name.split('+').next().unwrap_or(name);
            let label = format!("{v} {name}");
            let profile = profile_of(case);
            let on_purpose = refused_on_purpose(serving, base);
            if let Some(enc) = case.get("encoder").filter(|_| !on_purpose) {
                let thinking = enc["thinking_mode"] == "thinking";
                let effort = enc["kwargs"]["reasoning_effort"].as_str();
                let want_profile = enc["kwargs"]["reasoning_effort_profile"]
                    .as_str()
                    .unwrap_or("preview");
                if serving.has_profiles() && want_profile != profile.name() {
                    failures.push(format!(
                        "{label}: profile {want_profile}, modelled {profile:?}"
                    ));
                }
                let messages = enc["messages"].as_array().expect("messages");
                let got = encode_messages(serving.file(), messages, thinking, effort, profile);
                match (&got, Output::of(&enc["output"]), enc["error"].as_str()) {
                    (Ok(g), Some(w), _) if w.matches(g) => {}
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
            tally.0 += 1;
            let messages = glue["messages"].as_array().cloned().expect("messages");
            let tools = glue["tools"].as_array().cloned();
            let env = &case["server"]["env"];
            let request = Dsv4Request {
                messages: &messages,
                tools: tools.as_deref(),
                tools_reach_template: glue["tools_reach_template"].as_bool().expect("bool"),
                thinking: Some(&glue["thinking"]).filter(|v| !v.is_null()),
                default_thinking: env["SGLANG_DEFAULT_THINKING"] == "1",
                continue_final_message: glue["continue_final_message"].as_bool().expect("bool"),
                reasoning_effort: Some(&glue["reasoning_effort"]).filter(|v| !v.is_null()),
                env_effort: env["SGLANG_DSV4_REASONING_EFFORT"].as_str(),
                task: glue["task"].as_str(),
                profile,
            };
            let got = encode(serving, &request);
            // The same from the request body itself (`message_dumps`, `tool_dumps`).
            if !name.starts_with("probe/numbers") {
                let body: Value =
                    serde_json::from_str(case["body"].as_str().expect("a body")).expect("JSON");
                let body_messages = body["messages"].as_array().cloned().unwrap_or_default();
                match crate::encoder::dsv32_serving::message_dumps(version(v), &body_messages) {
                    Ok(dumped) => {
                        let body_tools = body["tools"]
                            .as_array()
                            .map(|t| crate::encoder::dsv32_serving::tool_dumps(version(v), t));
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
                    tally.1 += 1;
                    if let Some(t) = &tokenizer {
                        let n = count(t, p);
                        if n != tokens as usize {
                            failures.push(format!("{label}: {n} tokens, Python {tokens}"));
                        }
                    }
                }
                (Err(e), _, _) if e.kind() == "Unmodelled" && on_purpose => tally.2 += 1,
                (Err(e), None, _) => {
                    let want = case["encoder"]["error"]
                        .as_str()
                        .or(case["error"].as_str())
                        .unwrap_or("");
                    if same_error(e, want) {
                        tally.1 += 1;
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
    for (v, (glued, same, refused)) in &per_release {
        println!("{v:?}: {glued} requests through the glue, {same} as Python, {refused} refused on purpose");
    }
    assert!(
        per_release.len() >= 7,
        "only {} releases recorded",
        per_release.len()
    );
    assert!(
        failures.is_empty(),
        "{} differ from SGLang:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn releases_map_to_their_glue() {
    assert_eq!(Dsv4Serving::of_release((0, 5, 11)), None);
    assert_eq!(
        Dsv4Serving::of_release((0, 5, 12)),
        Some(Dsv4Serving::V0512)
    );
    assert_eq!(
        Dsv4Serving::of_release((0, 5, 19)),
        Some(Dsv4Serving::V0518)
    );
    assert_eq!(
        Dsv4Serving::of_release((0, 5, 22)),
        Some(Dsv4Serving::V0522)
    );
    assert_eq!(Dsv4Serving::of_release((0, 5, 23)), None);
    assert_eq!(Dsv4Serving::V0522.file(), Dsv4File::V0518);
}

#[test]
fn the_effort_profile_is_read_from_the_checkpoint_encoder() {
    let official = "DEFAULT_REASONING_EFFORT = \"low\"\nREASONING_EFFORT_PROMPTS = {\n    \"low\": \"\",\n    \"high\": \"h\",\n    \"max\": 'm',\n}\n";
    assert_eq!(
        EffortProfile::detect(official),
        Ok(Some(EffortProfile::Official))
    );
    // literal_eval fails on names: SGLang then skips the dict.
    let names = "DEFAULT_REASONING_EFFORT = \"low\"\nREASONING_EFFORT_PROMPTS = {\n    \"low\": \"\",\n    \"high\": HIGH,\n    \"max\": MAX,\n}\n";
    assert_eq!(EffortProfile::detect(names), Ok(None));
    let preview = "REASONING_EFFORT_MAX = (\n    \"a\"\n    \"b\"\n)\n";
    assert_eq!(
        EffortProfile::detect(preview),
        Ok(Some(EffortProfile::Preview))
    );
    assert_eq!(EffortProfile::detect("x = 1\n"), Ok(None));
    // A shape not read here is not guessed.
    assert!(EffortProfile::detect("REASONING_EFFORT_MAX = f\"{x}\"\n").is_err());
    assert_eq!(
        EffortProfile::resolve(Some(&json!("official")), None),
        Ok(EffortProfile::Official)
    );
    assert!(EffortProfile::resolve(Some(&json!("bogus")), None).is_err());
    assert_eq!(
        EffortProfile::resolve(None, None),
        Ok(EffortProfile::Preview)
    );
    assert_eq!(
        EffortProfile::resolve(None, Some(official)),
        Ok(EffortProfile::Official)
    );
}
