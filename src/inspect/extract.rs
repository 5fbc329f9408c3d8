//! Per-route extraction: a parsed body → the units SGLang turns into
//! sequences. Each rule mirrors the pydantic model SGLang 0.5.23 validates the
//! body with (`openai/protocol.py`, `managers/io_struct.py`); where the guard
//! cannot be sure how SGLang reads a field, it refuses.

use std::sync::Arc;

use serde_json::Value;

use super::Route;
use crate::count::Unit;
use crate::errors::Reason;

/// A request reduced to what counting needs.
#[derive(Debug, Clone)]
pub struct PromptRequest {
    pub route: Route,
    /// The `model` field, when it is a string.
    pub model: Option<String>,
    /// One unit per sequence SGLang would build; a batch has several.
    pub units: Vec<Unit>,
}

pub fn extract(route: Route, body: Arc<Value>) -> Result<PromptRequest, Reason> {
    let obj = body
        .as_object()
        .ok_or_else(|| invalid("the request body must be a JSON object", None))?;
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("`model` must be a string", Some("model"))),
    };
    let units = match route {
        Route::ChatCompletions => vec![Unit::Chat(body.clone())],
        Route::Completions => completions_units(obj.get("prompt"))?,
        Route::Generate => generate_units(obj)?,
    };
    Ok(PromptRequest {
        route,
        model,
        units,
    })
}

fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Reason {
    Reason::InvalidRequest {
        message: message.into(),
        param,
    }
}

/// `CompletionRequest.prompt: Union[List[int], List[List[int]], str, List[str]]`,
/// then `_validate_request`'s "Prompt cannot be empty".
fn completions_units(prompt: Option<&Value>) -> Result<Vec<Unit>, Reason> {
    let empty = || invalid("Prompt cannot be empty", Some("prompt"));
    let units = match prompt {
        None | Some(Value::Null) => return Err(invalid("`prompt` is required", Some("prompt"))),
        Some(Value::String(s)) if s.is_empty() => return Err(empty()),
        Some(Value::String(s)) => vec![Unit::Text(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => return Err(empty()),
        Some(Value::Array(items)) => {
            let units = text_or_ids_batch(items, "prompt")?;
            if units
                .iter()
                .all(|u| matches!(u, Unit::Text(t) if t.is_empty()))
            {
                return Err(empty());
            }
            units
        }
        Some(_) => {
            return Err(invalid(
                "`prompt` must be a string, a list of strings or token ids",
                Some("prompt"),
            ))
        }
    };
    Ok(units)
}

/// A non-empty list that is all strings (a batch of texts), all integers (one
/// sequence of ids) or all integer lists (a batch of id sequences).
fn text_or_ids_batch(items: &[Value], param: &'static str) -> Result<Vec<Unit>, Reason> {
    if items.iter().all(Value::is_string) {
        return Ok(items
            .iter()
            .map(|v| Unit::Text(v.as_str().unwrap_or_default().to_owned()))
            .collect());
    }
    if items.iter().all(is_token_id) {
        return Ok(vec![Unit::Ids(items.len())]);
    }
    if items.iter().all(Value::is_array) {
        return items
            .iter()
            .map(|row| match row.as_array() {
                Some(ids) if !ids.is_empty() && ids.iter().all(is_token_id) => {
                    Ok(Unit::Ids(ids.len()))
                }
                _ => Err(invalid(
                    format!("`{param}` rows must be non-empty lists of token ids"),
                    Some(param),
                )),
            })
            .collect();
    }
    Err(invalid(
        format!("`{param}` mixes strings, token ids and lists"),
        Some(param),
    ))
}

/// What pydantic's lax `int` accepts in a token list: integers, whole floats
/// and booleans. Numeric strings are refused: the guard does not forward
/// anything whose reading depends on a coercion it would have to guess.
fn is_token_id(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        Value::Bool(_) => true,
        _ => false,
    }
}

/// `/generate` (`GenerateReqInput`): exactly one of `text`, `input_ids`,
/// `input_embeds`; inputs whose length is not in the body are refused.
fn generate_units(obj: &serde_json::Map<String, Value>) -> Result<Vec<Unit>, Reason> {
    for field in ["image_data", "video_data", "audio_data"] {
        if obj.get(field).is_some_and(|v| !v.is_null()) {
            return Err(Reason::Unmeasurable(format!(
                "`{field}` is refused: its token length is set by the multimodal processor, not the body"
            )));
        }
    }
    if obj.get("session_params").is_some_and(|v| !v.is_null()) {
        return Err(Reason::Unmeasurable(
            "`session_params` is refused: a session prepends server-side history the guard cannot see".into(),
        ));
    }
    let given: Vec<&str> = ["text", "input_ids", "input_embeds"]
        .into_iter()
        .filter(|k| obj.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    match given.as_slice() {
        ["text"] => match &obj["text"] {
            Value::String(s) => Ok(vec![Unit::Text(s.clone())]),
            Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {
                Ok(items
                    .iter()
                    .map(|v| Unit::Text(v.as_str().unwrap_or_default().to_owned()))
                    .collect())
            }
            _ => Err(invalid(
                "`text` must be a string or a non-empty list of strings",
                Some("text"),
            )),
        },
        ["input_ids"] => match &obj["input_ids"] {
            Value::Array(items) if !items.is_empty() && !items.iter().any(Value::is_string) => {
                text_or_ids_batch(items, "input_ids")
            }
            _ => Err(invalid(
                "`input_ids` must be a non-empty list of token ids or of id lists",
                Some("input_ids"),
            )),
        },
        ["input_embeds"] => embeds_units(&obj["input_embeds"]),
        [] => Err(invalid(
            "Either text, input_ids or input_embeds should be provided.",
            None,
        )),
        _ => Err(invalid(
            format!(
                "only one of text, input_ids and input_embeds may be given, got {}",
                given.join(", ")
            ),
            None,
        )),
    }
}

/// `input_embeds`: `[[f; d]; n]` is one sequence of n tokens; `[[[f; d]; n]; b]`
/// a batch of b sequences.
fn embeds_units(v: &Value) -> Result<Vec<Unit>, Reason> {
    let bad = || {
        invalid(
            "`input_embeds` must be a 2-D or 3-D list of numbers",
            Some("input_embeds"),
        )
    };
    let rows = v.as_array().filter(|r| !r.is_empty()).ok_or_else(bad)?;
    let is_vector = |x: &Value| {
        x.as_array()
            .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_number))
    };
    if rows.iter().all(is_vector) {
        return Ok(vec![Unit::Embeds(rows.len())]);
    }
    rows.iter()
        .map(|seq| match seq.as_array() {
            Some(vs) if !vs.is_empty() && vs.iter().all(is_vector) => Ok(Unit::Embeds(vs.len())),
            _ => Err(bad()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn units(route: Route, body: Value) -> Result<Vec<String>, &'static str> {
        extract(route, Arc::new(body))
            .map(|p| {
                p.units
                    .iter()
                    .map(|u| match u {
                        Unit::Text(t) => format!("text:{}", t.len()),
                        Unit::Ids(n) => format!("ids:{n}"),
                        Unit::Embeds(n) => format!("embeds:{n}"),
                        Unit::Chat(_) => "chat".into(),
                    })
                    .collect()
            })
            .map_err(|r| r.label())
    }

    #[test]
    fn completions_prompt_shapes() {
        assert_eq!(
            units(Route::Completions, json!({"prompt": "abc"})).unwrap(),
            ["text:3"]
        );
        assert_eq!(
            units(Route::Completions, json!({"prompt": ["a", ""]})).unwrap(),
            ["text:1", "text:0"]
        );
        assert_eq!(
            units(Route::Completions, json!({"prompt": [1, 2, 3]})).unwrap(),
            ["ids:3"]
        );
        assert_eq!(
            units(Route::Completions, json!({"prompt": [[1], [2, 3]]})).unwrap(),
            ["ids:1", "ids:2"]
        );
        for bad in [
            json!(""),
            json!([]),
            json!(["", ""]),
            json!([1, "a"]),
            json!(3),
            json!([[1], []]),
        ] {
            assert_eq!(
                units(Route::Completions, json!({ "prompt": bad })).unwrap_err(),
                "invalid_request"
            );
        }
    }

    #[test]
    fn generate_inputs() {
        assert_eq!(
            units(Route::Generate, json!({"text": ""})).unwrap(),
            ["text:0"]
        );
        assert_eq!(
            units(Route::Generate, json!({"text": ["ab", "c"]})).unwrap(),
            ["text:2", "text:1"]
        );
        assert_eq!(
            units(Route::Generate, json!({"input_ids": [[1, 2], [3]]})).unwrap(),
            ["ids:2", "ids:1"]
        );
        assert_eq!(
            units(
                Route::Generate,
                json!({"input_embeds": [[0.1, 0.2], [0.3, 0.4]]})
            )
            .unwrap(),
            ["embeds:2"]
        );
        assert_eq!(
            units(
                Route::Generate,
                json!({"input_embeds": [[[0.1]], [[0.1], [0.2], [0.3]]]})
            )
            .unwrap(),
            ["embeds:1", "embeds:3"]
        );
        assert_eq!(
            units(Route::Generate, json!({"input_ids": []})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(Route::Generate, json!({"text": "a", "input_ids": [1]})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(Route::Generate, json!({})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(Route::Generate, json!({"text": "a", "image_data": "x"})).unwrap_err(),
            "unmeasurable_content"
        );
        assert_eq!(
            units(
                Route::Generate,
                json!({"text": "a", "session_params": {"id": "s"}})
            )
            .unwrap_err(),
            "unmeasurable_content"
        );
    }

    #[test]
    fn model_must_be_a_string() {
        assert_eq!(
            units(Route::Completions, json!({"model": 3, "prompt": "a"})).unwrap_err(),
            "invalid_request"
        );
        let p = extract(
            Route::ChatCompletions,
            Arc::new(json!({"model": "m", "messages": []})),
        )
        .unwrap();
        assert_eq!(p.model.as_deref(), Some("m"));
    }
}
