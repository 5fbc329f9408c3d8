//! Every case `testdata/gen_dsv32_releases.py` ran through a release's own
//! chat handler: the release's glue and encoder file reproduced from the
//! same `model_dump()`s, and its prompt length from the fixture tokenizer.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::*;
use crate::encoder::compact_expected::{self, recorded, Output};

const EXPECTED: &str = include_str!("testdata/dsv32_releases_expected.json");

/// Python produces a prompt, the guard refuses on purpose (`Unmodelled`):
/// a number beyond the 64-bit integers in a body that the release reads with
/// Python's `json` (before 0.5.18), which the guard's parsed body cannot tell
/// from a float; and arguments strings `json.loads` reads otherwise than
/// serde_json (see `dsv32::json_loads`).
fn refused_on_purpose(release: Dsv32Serving, name: &str) -> bool {
    let json_body = release < Dsv32Serving::V0518;
    match name {
        "probe/numbers_schema_big_int"
        | "probe/numbers_args_object"
        | "probe/numbers_schema_floats" => json_body,
        // 0.5.6 - 0.5.13 hand the string to json.loads, which keeps the integer exact.
        "probe/numbers_args_string" => release < Dsv32Serving::V0514,
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
    let path = crate::shared_dir()?.join("tokenizers/deepseek-v3.2/tokenizer.json");
    Some(Tokenizer::from_file(&path).expect("the fixture loads"))
}

/// `tokenizer.encode(text)` of the stand-in (a `LlamaTokenizerFast` that
/// adds BOS), then a prefix's `tokenizer.encode(prefix)` without its leading
/// (added) BOS.
fn count(tokenizer: &Tokenizer, prompt: &Dsv32Prompt) -> usize {
    let ids = |text: &str| tokenizer.encode_fast(text, false).expect("encodes").len();
    let mut n = 1 + ids(&prompt.text);
    if let Some(prefix) = prompt.assistant_prefix.as_deref().filter(|p| !p.is_empty()) {
        n += ids(prefix);
    }
    n
}

/// The tail of a long text (where prompts differ, mostly).
fn short(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let start = chars.len().saturating_sub(300);
    chars[start..].iter().collect()
}

fn request_of(glue: &Value) -> (Vec<Value>, Option<Vec<Value>>) {
    let messages = glue["messages"].as_array().cloned().expect("messages");
    let tools = glue["tools"].as_array().cloned();
    (messages, tools)
}

/// Per release: (requests through the glue, the same as Python, refused on
/// purpose).
type Tally = (usize, usize, usize);

#[test]
fn every_release_matches_its_own_python() {
    let expected = compact_expected::load(EXPECTED, "dsv32_releases_expected.json");
    let tokenizer = fixture();
    let mut failures = Vec::new();
    let mut per_release: BTreeMap<(u32, u32, u32), Tally> = BTreeMap::new();
    for (v, run) in expected.as_object().expect("releases") {
        // A post release shares its release's tally.
        let tally = per_release.entry(version(v)).or_default();
        tally_release(v, run, tokenizer.as_ref(), tally, &mut failures);
    }
    for (v, (glued, same, refused)) in &per_release {
        println!("{v:?}: {glued} requests through the glue, {same} as Python, {refused} refused on purpose");
    }
    assert!(
        per_release.len() >= 13,
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

/// Every case one release ran, counted into `tally`.
fn tally_release(
    v: &str,
    run: &Value,
    tokenizer: Option<&Tokenizer>,
    tally: &mut Tally,
    failures: &mut Vec<String>,
) {
    let release = Dsv32Serving::of_release(version(v)).expect("a release with the encoder");
    for case in run["cases"].as_array().expect("cases") {
        check_case(v, release, case, tokenizer, tally, failures);
    }
}

/// One case: the encoder file alone, then the glue and the encoder.
fn check_case(
    v: &str,
    release: Dsv32Serving,
    case: &Value,
    tokenizer: Option<&Tokenizer>,
    tally: &mut Tally,
    failures: &mut Vec<String>,
) {
    let name = case["name"].as_str().unwrap_or("?");
    let label = format!("{v} {} {name}", case["profile"].as_str().unwrap_or(""));
    // Skipped where the guard refuses on purpose: the recorded arguments
    // hold integers the expected-values file reads as floats.
    let on_purpose = refused_on_purpose(release, name);
    if let Some(enc) = case.get("encoder").filter(|_| !on_purpose) {
        check_encoder_alone(&label, release, enc, failures);
    }
    // The glue and the encoder, from the release's model_dump()s.
    let Some(glue) = case.get("glue") else {
        return;
    };
    tally.0 += 1;
    let (messages, tools) = request_of(glue);
    let request = Dsv32Request {
        messages: &messages,
        tools: tools.as_deref(),
        tools_reach_template: glue["tools_reach_template"].as_bool().expect("bool"),
        thinking: Some(&glue["thinking"]).filter(|v| !v.is_null()),
        default_thinking: false,
        continue_final_message: glue["continue_final_message"].as_bool().expect("bool"),
    };
    let got = encode(release, &request);
    if !name.starts_with("probe/numbers") {
        check_from_the_body(v, &label, release, case, request, &got, failures);
    }
    if let (Some(enc), Ok(p)) = (case.get("encoder"), &got) {
        let mode = if enc["thinking_mode"] == "thinking" {
            ThinkingMode::Thinking
        } else {
            ThinkingMode::Chat
        };
        if p.thinking != mode {
            failures.push(format!("{label}: mode {:?}, Python {mode:?}", p.thinking));
        }
    }
    check_outcome(&label, case, &got, on_purpose, tokenizer, tally, failures);
}

/// The encoder file alone, on the arguments the release passed.
fn check_encoder_alone(
    label: &str,
    release: Dsv32Serving,
    enc: &Value,
    failures: &mut Vec<String>,
) {
    let flavor = Flavor {
        version: release.flavor().version,
        mode_is_enum: enc["mode_is_enum"].as_bool().expect("mode_is_enum"),
    };
    if flavor != release.flavor() {
        failures.push(format!(
            "{label}: called as {flavor:?}, modelled {:?}",
            release.flavor()
        ));
    }
    let mode = match enc["thinking_mode"].as_str() {
        Some("thinking") => ThinkingMode::Thinking,
        _ => ThinkingMode::Chat,
    };
    let drop = enc["kwargs"]
        .get("drop_thinking")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let messages = enc["messages"].as_array().expect("messages");
    let got = dsv32::encode_messages_as(flavor, messages, mode, None, drop, true);
    match (&got, Output::of(&enc["output"]), enc["error"].as_str()) {
        (Ok(g), Some(w), _) if w.matches(g) => {}
        (Err(e), None, Some(w))
            if e.0 == w || (e.kind() == "JSONDecodeError" && w.starts_with("JSONDecodeError")) => {}
        _ => failures.push(format!(
            "{label}: encoder {}, Python {}",
            short(&format!("{got:?}")),
            short(&recorded(&enc["output"], &enc["error"]))
        )),
    }
}

/// The same request from the body itself (`message_dumps`, `tool_dumps`)
/// encodes as it does from the release's dumps.
fn check_from_the_body(
    v: &str,
    label: &str,
    release: Dsv32Serving,
    case: &Value,
    request: Dsv32Request<'_>,
    got: &Result<Dsv32Prompt, Dsv32Error>,
    failures: &mut Vec<String>,
) {
    let body: Value = serde_json::from_str(case["body"].as_str().expect("a body")).expect("JSON");
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
            let again = encode(release, &request);
            let same = match (got, &again) {
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

/// The glue's prompt against Python's, its length against the recorded
/// token count: counted as Python's, refused on purpose, or a failure.
fn check_outcome(
    label: &str,
    case: &Value,
    got: &Result<Dsv32Prompt, Dsv32Error>,
    on_purpose: bool,
    tokenizer: Option<&Tokenizer>,
    tally: &mut Tally,
    failures: &mut Vec<String>,
) {
    let python_text = Output::of(&case["encoder"]["output"]);
    match (got, case["tokens"].as_u64(), python_text) {
        (Ok(p), Some(tokens), Some(text)) if text.matches(&p.text) => {
            tally.1 += 1;
            if let Some(t) = tokenizer {
                let n = count(t, p);
                if n != tokens as usize {
                    failures.push(format!("{label}: {n} tokens, Python {tokens}"));
                }
            }
        }
        // Refused where Python counts, or refuses otherwise.
        (Err(e), _, _) if e.kind() == "Unmodelled" && on_purpose => tally.2 += 1,
        (Err(e), None, _) => {
            let want = case["encoder"]["error"]
                .as_str()
                .or(case["error"].as_str())
                .unwrap_or("");
            let same = e.0 == want
                || (e.kind() == "JSONDecodeError" && want.starts_with("JSONDecodeError"))
                || want.starts_with(&format!("{}: ", e.kind()));
            if same {
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

#[test]
fn releases_map_to_their_glue() {
    use Dsv32Serving::*;
    assert_eq!(Dsv32Serving::of_release((0, 5, 5)), None);
    assert_eq!(Dsv32Serving::of_release((0, 5, 6)), Some(V0506));
    assert_eq!(Dsv32Serving::of_release((0, 5, 11)), Some(V0509));
    assert_eq!(Dsv32Serving::of_release((0, 5, 19)), Some(V0518));
    assert_eq!(Dsv32Serving::of_release((0, 5, 23)), Some(V0522));
    assert_eq!(V0513.flavor().version, Dsv32Version::V0507);
    assert!(!V0512.flavor().mode_is_enum && V0513.flavor().mode_is_enum);
    assert_eq!(
        Dsv32Version::of_release((0, 5, 20)),
        Some(Dsv32Version::V0514)
    );
}

#[test]
fn a_trailing_assistant_turn_depends_on_the_release() {
    let messages = [
        json!({"role": "user", "content": "q"}),
        json!({"role": "assistant", "content": "partial"}),
    ];
    let request = Dsv32Request {
        messages: &messages,
        tools: None,
        tools_reach_template: false,
        thinking: None,
        default_thinking: false,
        continue_final_message: false,
    };
    // 0.5.6 - 0.5.7: an assistant turn, closed by EOS, no generation prompt.
    let p = encode(Dsv32Serving::V0507, &request).unwrap();
    assert!(
        p.text.ends_with("</think>partial<｜end▁of▁sentence｜>"),
        "{}",
        p.text
    );
    // 0.5.8 on: a user turn.
    let p = encode(Dsv32Serving::V0508, &request).unwrap();
    assert!(
        p.text.ends_with("<｜User｜>partial<｜Assistant｜></think>"),
        "{}",
        p.text
    );
    let p = encode(
        Dsv32Serving::V0508,
        &Dsv32Request {
            continue_final_message: true,
            ..request
        },
    )
    .unwrap();
    assert_eq!(p.assistant_prefix.as_deref(), Some("partial"));
}

/// Non-text parts reduced to their type, on both sides: their model dumps
/// (image detail defaults and the like) are not modelled, and only the type
/// (a placeholder, `[Unsupported ...]`) reaches a prompt from 0.5.9 on.
fn part_types(messages: Vec<Value>) -> Vec<Value> {
    messages
        .into_iter()
        .map(|mut m| {
            if let Some(Value::Array(parts)) = m.get_mut("content") {
                for p in parts.iter_mut() {
                    if p["type"] != "text" {
                        *p = json!({"type": p["type"].clone()});
                    }
                }
            }
            m
        })
        .collect()
}

/// `message_dumps` and `tool_dumps` from each recorded request body equal the
/// release's own `model_dump()`s (all three expected-value files; the number
/// probes aside, whose bodies the releases before 0.5.18 read with exact
/// integers).
#[test]
fn dumps_from_the_body_are_the_releases() {
    let files = [
        (EXPECTED, "dsv32_releases_expected.json"),
        (
            include_str!("testdata/dsv4_sglang_expected.json"),
            "dsv4_sglang_expected.json",
        ),
        (
            include_str!("testdata/dsv41_sglang_expected.json"),
            "dsv41_sglang_expected.json",
        ),
    ];
    let (mut checked, mut refused, mut failures) = (0, 0, Vec::new());
    for (text, file) in files {
        let expected = compact_expected::load(text, file);
        for (v, run) in expected.as_object().expect("releases") {
            for case in run["cases"].as_array().expect("cases") {
                let name = case["name"].as_str().unwrap_or("?");
                let Some(glue) = case.get("glue") else {
                    continue;
                };
                if name.starts_with("probe/numbers") {
                    continue;
                }
                let body: Value = serde_json::from_str(case["body"].as_str().expect("a body text"))
                    .expect("JSON");
                let messages = body["messages"].as_array().expect("messages");
                match message_dumps(version(v), messages) {
                    Ok(mut got) => {
                        if v == "0.5.6" {
                            // 0.5.6 has no message `tools` field (0.5.6.post1+ do):
                            // a null key, which no encoder tells from a missing one.
                            for m in &mut got {
                                m.as_object_mut().map(|m| m.shift_remove("tools"));
                            }
                        }
                        let got = serde_json::to_string(&part_types(got)).unwrap();
                        let want = serde_json::to_string(&part_types(
                            glue["messages"].as_array().cloned().unwrap(),
                        ))
                        .unwrap();
                        if got != want {
                            failures.push(format!(
                                "{v} {name}: messages\n  guard  {}\n  Python {}",
                                short(&got),
                                short(&want)
                            ));
                        }
                    }
                    Err(e) if e.kind() == "Unmodelled" => refused += 1,
                    Err(e) => failures.push(format!("{v} {name}: {e}")),
                }
                if let (Some(tools), false) = (body["tools"].as_array(), glue["tools"].is_null()) {
                    let got = serde_json::to_string(&tool_dumps(version(v), tools)).unwrap();
                    let want = serde_json::to_string(&glue["tools"]).unwrap();
                    if got != want {
                        failures.push(format!(
                            "{v} {name}: tools\n  guard  {}\n  Python {}",
                            short(&got),
                            short(&want)
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    println!("{checked} request bodies dumped as their release dumps them ({refused} refused on purpose)");
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
