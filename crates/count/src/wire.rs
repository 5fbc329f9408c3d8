//! The validated chat request as SGLang hands it to DeepSeek's recipe:
//! `request.model_dump(exclude_unset=True, by_alias=True, mode="json")`
//! (`serving_deepseek_recipe.py`), for the fields the adapter reads.
//!
//! `exclude_unset` keeps exactly the fields the client sent (and the ones a
//! validator assigned), in each model's field order, with pydantic's
//! coercions applied: roles lowercased, lax booleans and integers, unknown
//! keys dropped, `input_audio` turned into an `audio_url` part, a missing
//! `tool_choice` filled in. The body has already passed
//! [`super::preprocess::prepare_with`], so its shapes are valid; what does
//! not look valid here is refused rather than guessed.
//!
//! `testdata/gen_dsv4.py` records SGLang's own dump next to each request, and
//! `encoder/dsv4_tests.rs` checks this one against it.

use serde_json::{Map, Value};

use super::{invalid, py, CountError};

/// `ChatCompletionMessageGenericParam`'s fields, in order. `tools` is left
/// out: recipe does not read a message's tools.
const GENERIC_FIELDS: [&str; 8] = [
    "role",
    "content",
    "tool_call_id",
    "name",
    "phase",
    "reasoning_content",
    "tool_calls",
    "prefix",
];

/// The wire request: `messages`, `response_format`, `tool_choice`,
/// `continue_final_message` and `task`, each where the dump has it.
pub fn dump(body: &Value) -> Result<Value, CountError> {
    let o = body
        .as_object()
        .ok_or_else(|| invalid("the request is not a JSON object"))?;
    let mut out = Map::new();
    let messages = match o.get("messages") {
        Some(Value::Array(ms)) => ms.iter().map(message).collect::<Result<Vec<_>, _>>()?,
        _ => return Err(invalid("messages: Input should be a valid list")),
    };
    out.insert("messages".into(), Value::Array(messages));
    if let Some(rf) = o.get("response_format") {
        out.insert("response_format".into(), response_format(rf)?);
    }
    out.insert("tool_choice".into(), tool_choice(o)?);
    if let Some(v) = o.get("continue_final_message") {
        out.insert(
            "continue_final_message".into(),
            lax_bool(v, "continue_final_message")?,
        );
    }
    if let Some(v) = o.get("task") {
        out.insert("task".into(), v.clone());
    }
    Ok(Value::Object(out))
}

fn lax_bool(v: &Value, what: &str) -> Result<Value, CountError> {
    match v {
        Value::Null => Ok(Value::Null),
        v => py::lax_bool(v)
            .map(Value::Bool)
            .ok_or_else(|| invalid(format!("{what}: Input should be a valid boolean"))),
    }
}

fn lax_int(v: &Value, what: &str) -> Result<Value, CountError> {
    match v {
        Value::Null => Ok(Value::Null),
        v => py::lax_int(v)
            .and_then(|n| i64::try_from(n).ok())
            .map(Value::from)
            .ok_or_else(|| invalid(format!("{what}: Input should be a valid integer"))),
    }
}

/// The set fields of `o` among `fields`, in that order.
fn pick(o: &Map<String, Value>, fields: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    for f in fields {
        if let Some(v) = o.get(*f) {
            out.insert((*f).to_string(), v.clone());
        }
    }
    out
}

fn message(m: &Value) -> Result<Value, CountError> {
    let o = m
        .as_object()
        .ok_or_else(|| invalid("messages: Input should be a valid dictionary"))?;
    let role = match o.get("role") {
        Some(Value::String(r)) => r,
        _ => return Err(invalid("messages.role: Input should be a valid string")),
    };
    // `ChatCompletionMessageUserParam` takes exactly "user"; the generic
    // param lowercases the others (`_normalize_role`).
    let fields: &[&str] = if role == "user" {
        &["role", "content"]
    } else {
        &GENERIC_FIELDS
    };
    let mut out = pick(o, fields);
    out.insert("role".into(), Value::String(role.to_lowercase()));
    if let Some(Value::Array(parts)) = o.get("content") {
        let parts = parts.iter().map(part).collect::<Result<Vec<_>, _>>()?;
        out.insert("content".into(), Value::Array(parts));
    }
    if let Some(Value::Array(calls)) = o.get("tool_calls") {
        let calls = calls.iter().map(tool_call).collect::<Result<Vec<_>, _>>()?;
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(v) = o.get("prefix") {
        out.insert("prefix".into(), lax_bool(v, "prefix")?);
    }
    Ok(Value::Object(out))
}

fn part(p: &Value) -> Result<Value, CountError> {
    let o = p
        .as_object()
        .ok_or_else(|| invalid("content: Input should be a valid dictionary"))?;
    let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
    Ok(Value::Object(match kind {
        "text" => pick(o, &["type", "text"]),
        "thinking" | "reasoning" => pick(o, &["type", "thinking", "text"]),
        "tool_reference" => pick(o, &["type", "name"]),
        "image_url" => {
            let mut out = pick(o, &["type", "image_url", "modalities"]);
            let url = match o.get("image_url") {
                Some(Value::Object(u)) => u,
                _ => return Err(invalid("image_url: Input should be a valid dictionary")),
            };
            let mut u = pick(
                url,
                &[
                    "url",
                    "detail",
                    "max_dynamic_patch",
                    "min_dynamic_patch",
                    "max_long_side_pixel",
                    "content_hash",
                ],
            );
            if u.get("detail").and_then(Value::as_str) == Some("default") {
                u.insert("detail".into(), Value::String("auto".into()));
            }
            for k in [
                "max_dynamic_patch",
                "min_dynamic_patch",
                "max_long_side_pixel",
            ] {
                if let Some(v) = u.get(k) {
                    let n = lax_int(v, k)?;
                    u.insert(k.into(), n);
                }
            }
            out.insert("image_url".into(), Value::Object(u));
            out
        }
        "input_audio" => {
            // `_to_audio_url_part` builds a new part: every field is set.
            let audio = o.get("input_audio").and_then(Value::as_object);
            let (data, mime) = match audio.map(|a| (a.get("data"), a.get("format"))) {
                Some((Some(Value::String(d)), Some(Value::String(f)))) => (
                    d,
                    match f.as_str() {
                        "wav" => "audio/wav",
                        "mp3" => "audio/mpeg",
                        _ => {
                            return Err(invalid(
                                "input_audio.format: Input should be 'wav' or 'mp3'",
                            ))
                        }
                    },
                ),
                _ => return Err(invalid("input_audio: Field required")),
            };
            let mut url = Map::new();
            url.insert(
                "url".into(),
                Value::String(format!("data:{mime};base64,{data}")),
            );
            let mut out = Map::new();
            out.insert("type".into(), Value::String("audio_url".into()));
            out.insert("audio_url".into(), Value::Object(url));
            out
        }
        // Parts recipe does not take (video, audio by URL): SGLang's request
        // fails in recipe whatever their fields hold.
        _ => pick(o, &["type", "video_url", "audio_url"]),
    }))
}

fn tool_call(c: &Value) -> Result<Value, CountError> {
    let o = c
        .as_object()
        .ok_or_else(|| invalid("tool_calls: Input should be a valid dictionary"))?;
    let mut out = pick(o, &["id", "index", "type", "function"]);
    if let Some(v) = o.get("index") {
        out.insert("index".into(), lax_int(v, "tool_calls.index")?);
    }
    if let Some(Value::Object(f)) = o.get("function") {
        out.insert(
            "function".into(),
            Value::Object(pick(f, &["name", "arguments"])),
        );
    }
    Ok(Value::Object(out))
}

/// `ResponseFormat` (`type`, `json_schema`); a structural-tag format, which
/// recipe refuses, as given.
fn response_format(rf: &Value) -> Result<Value, CountError> {
    let Some(o) = rf.as_object() else {
        return Ok(rf.clone());
    };
    if !matches!(
        o.get("type").and_then(Value::as_str),
        Some("text" | "json_object" | "json_schema")
    ) {
        return Ok(rf.clone());
    }
    let mut out = pick(o, &["type", "json_schema"]);
    let json_schema = o.get("json_schema").filter(|j| py::truthy(j));
    if let (Some("json_schema"), None) = (o.get("type").and_then(Value::as_str), json_schema) {
        // `set_json_schema`: a top-level `schema` becomes the `json_schema`.
        if let Some(schema) = o.get("schema").filter(|s| py::truthy(s)) {
            let mut schema = schema.as_object().cloned().ok_or_else(|| {
                invalid("response_format.schema: Input should be a valid dictionary")
            })?;
            let name = schema
                .get("title")
                .cloned()
                .unwrap_or_else(|| Value::String("Schema".into()));
            let mut strict = Value::Null;
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                if let Some(item) = props.shift_remove("strict") {
                    strict =
                        Value::Bool(match &item {
                            Value::Object(i) => i.get("default").is_some_and(py::truthy),
                            v if !py::truthy(v) => false,
                            _ => return Err(CountError::Unsupported(
                                "response_format.schema.properties.strict that is not an object"
                                    .into(),
                            )),
                        });
                }
            }
            let mut js = Map::new();
            js.insert("name".into(), name);
            js.insert("schema".into(), Value::Object(schema));
            js.insert("strict".into(), strict);
            out.insert("json_schema".into(), Value::Object(js));
        }
        return Ok(Value::Object(out));
    }
    if let Some(Value::Object(js)) = o.get("json_schema") {
        out.insert(
            "json_schema".into(),
            Value::Object(pick(js, &["name", "description", "schema", "strict"])),
        );
    }
    Ok(Value::Object(out))
}

/// `set_tool_choice_default`, then `ToolChoice`'s dump for a named choice.
fn tool_choice(o: &Map<String, Value>) -> Result<Value, CountError> {
    match o.get("tool_choice") {
        None | Some(Value::Null) => {
            let tools = o.get("tools").is_some_and(|t| !t.is_null());
            // `_has_message_level_tools`: a root, system or developer
            // message with truthy `tools`.
            let message_tools = o
                .get("messages")
                .and_then(Value::as_array)
                .is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m.get("role").and_then(Value::as_str).is_some_and(|r| {
                            matches!(r.to_lowercase().as_str(), "root" | "system" | "developer")
                        }) && m.get("tools").is_some_and(py::truthy)
                    })
                });
            Ok(Value::String(
                if tools || message_tools {
                    "auto"
                } else {
                    "none"
                }
                .into(),
            ))
        }
        Some(Value::Object(c)) => {
            let mut out = pick(c, &["function", "type"]);
            if let Some(Value::Object(f)) = c.get("function") {
                out.insert("function".into(), Value::Object(pick(f, &["name"])));
            }
            Ok(Value::Object(out))
        }
        Some(other) => Ok(other.clone()),
    }
}
