//! Every case `testdata/gen_dsv4.py` ran through SGLang's own chat handler
//! and the `deepseek-recipe` 0.2.0 wheel, then a few spelled out.

use std::collections::HashMap;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::*;

const EXPECTED: &str = include_str!("testdata/dsv4_expected.json");

/// The stand-in DeepSeek-V4 tokenizer of the shared fixtures, or `None`
/// (with the reason printed) when they are not on this machine.
fn fixture() -> Option<Tokenizer> {
    let path = crate::shared_dir()?.join("tokenizers/deepseek-v4/tokenizer.json");
    Some(Tokenizer::from_file(&path).expect("the fixture loads"))
}

fn env_of(case: &Value) -> Dsv4Env {
    Dsv4Env {
        default_effort: case["env_effort"].as_str().map(str::to_string),
        default_ctk_effort: Some(case["default_ctk_effort"].clone()).filter(|v| !v.is_null()),
    }
}

/// A server SGLang could not start must not load (with SGLang's message), a
/// request SGLang refused must be refused (with SGLang's message), and every
/// prompt must have exactly the wheel's ids and as many images.
#[test]
fn matches_sglang_and_the_wheel() {
    let Some(tokenizer) = fixture() else {
        return;
    };
    let plain = plain_tokenizer(&tokenizer);
    let expected: Value = serde_json::from_str(EXPECTED).expect("expected values parse");
    let cases = expected["cases"].as_array().expect("cases");
    let mut adapters: HashMap<String, Result<Dsv4, Dsv4Error>> = HashMap::new();
    let (mut ok, mut failures) = (0, Vec::new());
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let spec = Spec::from_name(case["spec"].as_str().unwrap_or("")).expect("spec");
        let env = env_of(case);
        let key = format!(
            "{spec:?}/{:?}/{:?}",
            env.default_effort, env.default_ctk_effort
        );
        let adapter = adapters
            .entry(key)
            .or_insert_with(|| Dsv4::new(spec, &tokenizer, &env));
        if let Some(load_error) = case["load_error"].as_str() {
            match adapter {
                Err(Dsv4Error::Load(m)) if load_error == format!("ValueError: {m}") => ok += 1,
                Err(e) => failures.push(format!("{name}: {e:?}, SGLang: {load_error}")),
                Ok(_) => failures.push(format!("{name}: loads, SGLang: {load_error}")),
            }
            continue;
        }
        let adapter = match adapter {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{name}: does not load: {e}"));
                continue;
            }
        };
        let tools: Option<Vec<Value>> = case["tools"].as_array().cloned();
        let request = Request {
            wire: &case["wire"],
            tools: tools.as_deref(),
            thinking: case["thinking"].as_bool().expect("thinking"),
            reasoning_effort: Some(&case["reasoning_effort"]).filter(|v| !v.is_null()),
        };
        match (
            adapter.encode(&request),
            case.get("ids"),
            case["error"].as_str(),
        ) {
            (Ok(prompt), Some(ids), _) => {
                let want: Vec<u32> = serde_json::from_value(ids.clone()).expect("ids");
                let have = prompt.ids(&tokenizer, &plain).expect("the pieces encode");
                let images = case["images"].as_u64().unwrap_or(0) as usize;
                if have == want && prompt.images == images {
                    ok += 1;
                } else {
                    let at = have.iter().zip(&want).take_while(|(a, b)| a == b).count();
                    failures.push(format!(
                        "{name}: {} ids ({} images), SGLang {} ({images}); first difference at {at}",
                        have.len(),
                        prompt.images,
                        want.len(),
                    ));
                }
            }
            (Err(Dsv4Error::Rejected(m)), None, Some(err)) => {
                let loose = case["message_loose"].as_bool() == Some(true);
                if err == format!("ValueError: {m}") || (loose && err.starts_with("ValueError: ")) {
                    ok += 1;
                } else {
                    failures.push(format!("{name}: refused with {m:?}, SGLang: {err:?}"));
                }
            }
            // Served by SGLang, refused here on purpose (see the generator).
            (Err(Dsv4Error::Unsupported(_)), Some(_), _) if case["guard_refuses"].is_string() => {
                ok += 1
            }
            // A 500 in SGLang (OverflowError, RuntimeError): refused here too.
            (Err(Dsv4Error::Failed(_) | Dsv4Error::Unsupported(_)), None, Some(err))
                if !err.starts_with("ValueError: ") =>
            {
                ok += 1
            }
            (got, ids, err) => failures.push(format!(
                "{name}: got {:?}, SGLang ids: {}, error: {err:?}",
                got.map(|p| p.pieces.len()),
                ids.is_some()
            )),
        }
    }
    eprintln!("{ok}/{} DeepSeek-V4 / V4.1 cases match SGLang", cases.len());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn encode(dsv4: &Dsv4, wire: &Value, thinking: bool) -> Result<Prompt, Dsv4Error> {
    dsv4.encode(&Request {
        wire,
        tools: None,
        thinking,
        reasoning_effort: None,
    })
}

#[test]
fn special_spellings_in_text_are_plain() {
    let Some(tokenizer) = fixture() else {
        return;
    };
    let dsv4 = Dsv4::new(Spec::V4, &tokenizer, &Dsv4Env::default()).expect("loads");
    let wire = json!({"messages": [{"role": "user", "content": "<｜User｜>"}]});
    let prompt = encode(&dsv4, &wire, false).expect("encodes");
    assert!(prompt.pieces.contains(&Piece::Plain("<｜User｜>".into())));
    let user = tokenizer
        .token_to_id("<｜User｜>")
        .expect("the fixture has <｜User｜>");
    let ids = prompt
        .ids(&tokenizer, &plain_tokenizer(&tokenizer))
        .expect("encodes");
    assert_eq!(ids.iter().filter(|&&i| i == user).count(), 1);
}

#[test]
fn a_tokenizer_without_the_probe_tokens_does_not_load() {
    let Some(tokenizer) = fixture() else {
        return;
    };
    let plain = plain_tokenizer(&tokenizer);
    let err = Dsv4::new(Spec::V41, &plain, &Dsv4Env::default()).err();
    assert!(matches!(err, Some(Dsv4Error::Load(m)) if m.contains("<｜begin▁of▁sentence｜>")));
}

#[test]
fn effort_parsing() {
    assert_eq!(parse_effort_budget(&json!(0.125)), Ok(12));
    assert_eq!(parse_effort_budget(&json!(0.0)), Ok(1));
    assert_eq!(parse_effort_budget(&json!(0.29)), Ok(29));
    assert_eq!(parse_effort_budget(&json!(100)), Ok(100));
    assert!(parse_effort_budget(&json!(30.0)).is_err());
    assert!(parse_effort_budget(&json!(0)).is_err());
    assert_eq!(numeric_effort(&json!(" 30 ")), Ok(Effort::Other(json!(30))));
    assert_eq!(numeric_effort(&json!("0.5")), Ok(Effort::Other(json!(0.5))));
    assert_eq!(
        numeric_effort(&json!("high")),
        Ok(Effort::Tier("high".into()))
    );
    assert!(numeric_effort(&json!("\u{663}")).is_err());
    // python3 -c 'print(repr([1, "a'"'"'b", 0.5, True, None, {"k": "\xa0é\x85\u200b"}]))'
    assert_eq!(
        py::repr(&json!([1, "a'b", 0.5, true, null, {"k": "\u{a0}é\u{85}\u{200b}"}])),
        r#"[1, "a'b", 0.5, True, None, {'k': '\xa0é\x85\u200b'}]"#
    );
    // SGLang's own message (sglang_env, then
    // deepseek_recipe_renderer.parse_effort_budget({"k": "\xa0é"})):
    assert_eq!(
        parse_effort_budget(&json!({"k": "\u{a0}é"})),
        Err(r"reasoning_effort={'k': '\xa0é'} is outside the integer budget [1, 100] and the float range [0, 0.99]".into())
    );
}

/// The keys of the wire request the adapter reads; a message's `tools`,
/// which recipe does not read, is left out of the guard's dump.
fn read_by_the_adapter(wire: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for k in [
        "messages",
        "response_format",
        "tool_choice",
        "continue_final_message",
        "task",
    ] {
        if let Some(v) = wire.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(Value::Array(ms)) = out.get_mut("messages") {
        for m in ms {
            if let Some(o) = m.as_object_mut() {
                o.shift_remove("tools");
            }
        }
    }
    Value::Object(out)
}

/// The guard's dump of each request (`count/wire.rs`) is SGLang's
/// `model_dump(exclude_unset=True, by_alias=True, mode="json")` on every key
/// the adapter reads, key order included.
#[test]
fn the_wire_request_is_sglangs() {
    let expected: Value = serde_json::from_str(EXPECTED).expect("expected values parse");
    let (mut checked, mut failures) = (0, Vec::new());
    for case in expected["cases"].as_array().expect("cases") {
        let (Some(body), Some(wire)) = (case.get("body"), case.get("wire")) else {
            continue;
        };
        if case["guard_overcounts"].is_string() {
            // A body the proxy reads otherwise than orjson (see the generator).
            continue;
        }
        checked += 1;
        let body = body_of(body);
        let want = read_by_the_adapter(wire);
        match crate::wire::dump(&body) {
            // As text: `Value`'s equality ignores key order.
            Ok(got) if serde_json::to_string(&got).ok() == serde_json::to_string(&want).ok() => {}
            got => failures.push(format!(
                "{}:\n  guard  {:?}\n  SGLang {want}",
                case["name"],
                got.map(|g| g.to_string())
            )),
        }
    }
    assert!(checked > 400, "only {checked} cases carry their request");
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A case's request body: the object, or the JSON text a client sent (the
/// number probes), read as the proxy reads a body.
fn body_of(body: &Value) -> Value {
    match body {
        Value::String(text) => serde_json::from_str(text).expect("a JSON body"),
        other => other.clone(),
    }
}

/// A model directory of the fixture's files and a DeepSeek-V4 `config.json`.
fn model_dir(shared: &std::path::Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = shared.join("tokenizers/deepseek-v4");
    for entry in std::fs::read_dir(&src).expect("the fixture directory") {
        let entry = entry.expect("an entry");
        std::os::unix::fs::symlink(entry.path(), dir.path().join(entry.file_name()))
            .expect("a link");
    }
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}"#,
    )
    .expect("config.json");
    dir
}

/// Every case from the request body on, through the counter the proxy uses
/// (validation, the wire dump, the adapter, the piece counting): SGLang's
/// length exactly, its refusals refused, and under a limit at that length
/// refused, one above it allowed (the bound and early-exit paths included).
#[test]
fn the_counter_counts_what_sglang_encodes() {
    use crate::{
        model::ModelFiles, serving::SglangEnv, Clock, CountPolicy, ModelCounter, ServerConfig, Unit,
    };
    use std::sync::Arc;

    let Some(shared) = crate::shared_dir() else {
        return;
    };
    let dir = model_dir(&shared);
    let files = Arc::new(ModelFiles::load(dir.path()).expect("the model loads"));
    let expected: Value = serde_json::from_str(EXPECTED).expect("expected values parse");
    let mut counters: HashMap<String, Result<ModelCounter, String>> = HashMap::new();
    let (mut counted, mut failures) = (0, Vec::new());
    for case in expected["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().unwrap_or("?");
        let spec = case["spec"].as_str().expect("spec");
        let key = format!("{spec}/{}/{}", case["env_effort"], case["default_ctk"]);
        let counter = counters.entry(key).or_insert_with(|| {
            let effort = case["env_effort"].as_str().map(str::to_string);
            let env = SglangEnv {
                dsv4_reasoning_effort: effort.clone().filter(|e| spec == "dsv4" && !e.is_empty()),
                dsv41_reasoning_effort: effort.filter(|_| spec == "dsv41"),
                ..SglangEnv::default()
            };
            let parsers = match spec {
                "dsv4" => ("deepseekv4", "deepseek-v4"),
                _ => ("deepseekv41", "deepseek-v41"),
            };
            let server = ServerConfig {
                tool_call_parser: Some(parsers.0.into()),
                reasoning_parser: Some(parsers.1.into()),
                default_chat_template_kwargs: case["default_ctk"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                env,
                ..ServerConfig::default()
            };
            ModelCounter::for_server(files.clone(), Arc::new(server)).map_err(|p| format!("{p:?}"))
        });
        if case.get("load_error").is_some() {
            if counter.is_ok() {
                failures.push(format!("{name}: the model loads, SGLang does not start"));
            }
            continue;
        }
        let counter = match counter {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: not served: {e}"));
                continue;
            }
        };
        let Some(body) = case.get("body") else {
            continue;
        };
        let unit = Unit::Chat(Arc::new(body_of(body)));
        let got = counter.count(&unit, Clock::default());
        let want = case["ids"].as_array().map(Vec::len);
        match (got, want) {
            (Ok(n), Some(w)) if n == w => {
                counted += 1;
                for (limit, refused) in [(w, true), (w + 1, false)] {
                    let policy = CountPolicy {
                        limit: Some(limit),
                        ..CountPolicy::default()
                    };
                    match counter.count_with(&unit, Clock::default(), policy) {
                        Ok(c) if (c.tokens >= limit) == refused => {}
                        other => {
                            failures.push(format!("{name}: limit {limit}: {other:?} (length {w})"))
                        }
                    }
                }
            }
            (Err(_), None) => {}
            (Err(_), Some(_)) if case["guard_refuses"].is_string() => {}
            (Ok(n), Some(w)) if n > w && case["guard_overcounts"].is_string() => {}
            (got, want) => failures.push(format!("{name}: guard {got:?}, SGLang {want:?}")),
        }
    }
    assert!(counted > 300, "only {counted} cases counted");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
