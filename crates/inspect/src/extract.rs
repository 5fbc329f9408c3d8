//! Per-route extraction: a parsed body → the units SGLang turns into
//! sequences. Each rule mirrors the pydantic model SGLang 0.5.23 validates the
//! body with (`openai/protocol.py`, `managers/io_struct.py`); where the guard
//! cannot be sure how SGLang reads a field, it refuses.

use std::sync::Arc;

use serde_json::Value;

use super::Route;
use crate::Refusal;
use prefill_guard_count::{ollama, py, ChatApi, MediaItems, Piece, Unit};

/// A request reduced to what counting needs.
#[derive(Debug, Clone)]
pub struct PromptRequest {
    pub route: Route,
    /// The `model` field, when it is a string.
    pub model: Option<String>,
    /// One unit per sequence SGLang would build; a batch has several.
    pub units: Vec<Unit>,
    /// Whether the prompt field was a list of prompts (even of one): the
    /// `count` command then answers with one count per element.
    pub batch: bool,
    /// What it asks of the server beyond its prompt (`policy::pd` decides).
    pub features: crate::features::Features,
}

pub fn extract(route: Route, body: Arc<Value>) -> Result<PromptRequest, Refusal> {
    let obj = body
        .as_object()
        .ok_or_else(|| invalid("the request body must be a JSON object", None))?;
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("`model` must be a string", Some("model"))),
    };
    // Chat, completions, /generate and the others all accept these: a session
    // prepends server-side history (`session/session_controller.py`) the guard
    // cannot see, so the body's length is not the prompt's.
    for field in ["session_params", "session_id"] {
        if obj.get(field).is_some_and(|v| !v.is_null()) {
            return Err(Refusal::Unmeasurable(format!(
                "`{field}` is refused: a session prepends server-side history the guard cannot see"
            )));
        }
    }
    let units = match route {
        Route::ChatCompletions => vec![Unit::Chat(body.clone())],
        Route::Completions => completions_units(obj.get("prompt"))?,
        Route::Generate => generate_units(obj, true)?,
        Route::Classify | Route::Encode => generate_units(obj, false)?,
        Route::Embeddings | Route::ClassifyV1 => openai_input_units(route, obj.get("input"))?,
        Route::Rerank => rerank_units(obj)?,
        Route::Score => score_units(obj)?,
        Route::VertexGenerate => vertex_units(obj)?,
        // `/invocations` is SGLang's chat handler under SageMaker's path.
        Route::Invocations => vec![Unit::Chat(body.clone())],
        Route::Responses => vec![Unit::ChatApi(ChatApi::Responses, body.clone())],
        Route::Messages => vec![Unit::ChatApi(ChatApi::Anthropic, body.clone())],
        Route::OllamaChat => vec![Unit::ChatApi(ChatApi::Ollama, body.clone())],
        Route::OllamaGenerate => ollama::generate_units(obj)?,
    };
    let batch = is_batch(route, obj, &units);
    Ok(PromptRequest {
        route,
        model,
        units,
        batch,
        features: crate::features::features(obj),
    })
}

/// A request is a batch when its prompt field is a list of prompts, even a
/// list of one; rerank, score and vertex always answer per item.
fn is_batch(route: Route, obj: &serde_json::Map<String, Value>, units: &[Unit]) -> bool {
    let field = match route {
        Route::ChatCompletions
        | Route::Invocations
        | Route::Responses
        | Route::Messages
        | Route::OllamaChat
        | Route::OllamaGenerate => return false,
        Route::Rerank | Route::Score | Route::VertexGenerate => return true,
        Route::Completions => obj.get("prompt"),
        Route::Embeddings | Route::ClassifyV1 => obj.get("input"),
        Route::Generate | Route::Classify | Route::Encode => ["text", "input_ids", "input_embeds"]
            .iter()
            .find_map(|k| obj.get(*k).filter(|v| !v.is_null())),
    };
    let Some(Value::Array(items)) = field else {
        return false;
    };
    if items.iter().all(Value::is_string) {
        return true;
    }
    let first = items.first();
    match units.first() {
        // 3-D embeddings are a batch of 2-D sequences.
        Some(Unit::Embeds(_)) => first
            .and_then(Value::as_array)
            .and_then(|r| r.first())
            .is_some_and(Value::is_array),
        _ => first.is_some_and(Value::is_array),
    }
}

fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Refusal {
    Refusal::InvalidRequest {
        message: message.into(),
        param,
    }
}

/// `CompletionRequest.prompt: Union[List[int], List[List[int]], str, List[str]]`,
/// then `_validate_request`'s "Prompt cannot be empty".
fn completions_units(prompt: Option<&Value>) -> Result<Vec<Unit>, Refusal> {
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
fn text_or_ids_batch(items: &[Value], param: &'static str) -> Result<Vec<Unit>, Refusal> {
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

/// What pydantic's lax `int` accepts in a token list: integers, whole floats,
/// booleans and integer strings (`["1", 2.0, true]` is three tokens). A
/// token list's count is its length, so reading an element differently from
/// SGLang cannot change the count; anything else is refused.
fn is_token_id(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        Value::Bool(_) => true,
        Value::String(s) => {
            let t = s.trim();
            let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        }
        _ => false,
    }
}

/// `input_ids` (`List[int] | List[List[int]]`, lax): one sequence or a batch of rows.
fn ids_batch(v: &Value, param: &'static str) -> Result<Vec<Unit>, Refusal> {
    let bad = || {
        invalid(
            format!("`{param}` must be a non-empty list of token ids or of id lists"),
            Some(param),
        )
    };
    let items = v.as_array().filter(|i| !i.is_empty()).ok_or_else(bad)?;
    if items.iter().all(is_token_id) {
        return Ok(vec![Unit::Ids(items.len())]);
    }
    items
        .iter()
        .map(|row| match row.as_array() {
            Some(ids) if !ids.is_empty() && ids.iter().all(is_token_id) => Ok(Unit::Ids(ids.len())),
            _ => Err(bad()),
        })
        .collect()
}

/// `/generate` (`GenerateReqInput`), and `/encode`, `/classify`
/// (`EmbeddingReqInput`, no `input_embeds`, but cross-encoder `[a, b]` pairs):
/// exactly one of `text`, `input_ids`, `input_embeds`; inputs whose length is
/// not in the body are refused.
fn generate_units(
    obj: &serde_json::Map<String, Value>,
    generation: bool,
) -> Result<Vec<Unit>, Refusal> {
    if obj.get("session_params").is_some_and(|v| !v.is_null()) {
        return Err(Refusal::Unmeasurable(
            "`session_params` is refused: a session prepends server-side history the guard cannot see".into(),
        ));
    }
    // Media items go with every unit: the counter charges each the model's
    // configured bound, or refuses the field when the model has none. Every
    // item of the request is charged to every unit (an upper bound for batches).
    let field = |k: &str| obj.get(k).filter(|v| !v.is_null()).map(media_item_count);
    let media = MediaItems {
        image: field("image_data"),
        video: field("video_data"),
        audio: field("audio_data"),
    };
    let units = text_units(obj, generation)?;
    Ok(if media.is_empty() {
        units
    } else {
        units
            .into_iter()
            .map(|u| Unit::Media(Box::new(u), media))
            .collect()
    })
}

/// Items in an `image_data` / `video_data` / `audio_data` value: a list (of a
/// batch, nested) counts its non-null elements; anything else is one item.
fn media_item_count(v: &Value) -> usize {
    match v {
        Value::Null => 0,
        Value::Array(items) => items.iter().map(media_item_count).sum(),
        _ => 1,
    }
}

/// The text, ids or embeddings of a `/generate`-style body.
fn text_units(
    obj: &serde_json::Map<String, Value>,
    generation: bool,
) -> Result<Vec<Unit>, Refusal> {
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
            Value::Array(items)
                if !generation && !items.is_empty() && items.iter().all(is_text_pair) =>
            {
                Ok(items.iter().filter_map(text_pair).collect())
            }
            _ => Err(invalid(
                "`text` must be a string or a non-empty list of strings",
                Some("text"),
            )),
        },
        ["input_ids"] => ids_batch(&obj["input_ids"], "input_ids"),
        ["input_embeds"] if generation => embeds_units(&obj["input_embeds"]),
        ["input_embeds"] => Err(invalid(
            "`input_embeds` is not accepted on this route",
            Some("input_embeds"),
        )),
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
fn embeds_units(v: &Value) -> Result<Vec<Unit>, Refusal> {
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

/// `[query, document]`: a cross-encoder pair of `EmbeddingReqInput.text`.
fn is_text_pair(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|p| p.len() == 2 && p.iter().all(Value::is_string))
}

fn text_pair(v: &Value) -> Option<Unit> {
    match v.as_array()?.as_slice() {
        [Value::String(a), Value::String(b)] => Some(Unit::Pair(a.clone(), b.clone())),
        _ => None,
    }
}

/// `EmbeddingRequest.input` / `ClassifyRequest.input`, with
/// `_validate_request`'s emptiness rules (`serving_embedding.py`,
/// `serving_classify.py`). The multimodal form of embeddings is rendered
/// through the chat template with images, so it is refused.
fn openai_input_units(route: Route, input: Option<&Value>) -> Result<Vec<Unit>, Refusal> {
    let p = Some("input");
    let blank = |s: &str| s.trim().is_empty();
    match input {
        None | Some(Value::Null) => Err(invalid("`input` is required", p)),
        Some(Value::String(s)) if blank(s) => Err(invalid("Input cannot be empty or whitespace only", p)),
        Some(Value::String(s)) => Ok(vec![Unit::Text(s.clone())]),
        Some(Value::Array(items)) if items.is_empty() => Err(invalid("Input cannot be empty", p)),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            if let Some(i) = items.iter().position(|v| v.as_str().is_some_and(blank)) {
                return Err(invalid(format!("Input at index {i} cannot be empty or whitespace only"), p));
            }
            Ok(items.iter().filter_map(|v| v.as_str().map(|s| Unit::Text(s.to_owned()))).collect())
        }
        Some(Value::Array(items)) if items.iter().all(is_token_id) => Ok(vec![Unit::Ids(items.len())]),
        Some(Value::Array(items)) if route == Route::Embeddings && items.iter().all(Value::is_array) => {
            text_or_ids_batch(items, "input")
        }
        Some(Value::Array(items)) if route == Route::Embeddings && items.iter().any(Value::is_object) => {
            Err(Refusal::Unmeasurable(
                "multimodal embedding inputs are refused: they are rendered with images whose token \
                 length the guard cannot see"
                    .into(),
            ))
        }
        Some(_) => Err(invalid("`input` must be a string, a list of strings or token ids", p)),
    }
}

/// `/v1/rerank` (`serving_rerank.py`): for a cross-encoder, one `[query,
/// document]` pair per document, each its own sequence. Content given as
/// parts may carry images and is refused. Models whose template is a Qwen3
/// reranker prompt are refused when counted (see `ModelCounter`).
fn rerank_units(obj: &serde_json::Map<String, Value>) -> Result<Vec<Unit>, Refusal> {
    let text = |v: Option<&Value>, field: &'static str| {
        match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(_)) => Err(Refusal::Unmeasurable(format!(
            "`{field}` given as content parts is refused: parts may carry images the guard cannot measure"
        ))),
        _ => Err(invalid(format!("`{field}` must be a string"), Some(field))),
    }
    };
    let query = text(obj.get("query"), "query")?;
    let docs = match obj.get("documents") {
        Some(Value::Array(d)) if !d.is_empty() => d,
        _ => {
            return Err(invalid(
                "`documents` must be a non-empty list",
                Some("documents"),
            ))
        }
    };
    docs.iter()
        .map(|d| Ok(Unit::Pair(query.clone(), text(Some(d), "documents")?)))
        .collect()
}

/// `/v1/score` (`tokenizer_manager_score_mixin.py`). Without multi-item
/// scoring each item is one sequence, `f"{query}{item}"` (or item first) for
/// text and `query + item` for ids. Multi-item scoring (a server flag the
/// guard cannot see) packs everything into one sequence,
/// `query <d> item1 <d> ... <d>`, so that sequence is counted too: the guard
/// errs toward the longer reading.
fn score_units(obj: &serde_json::Map<String, Value>) -> Result<Vec<Unit>, Refusal> {
    for field in [
        "image_data",
        "query_embed_overrides",
        "item_embed_overrides",
    ] {
        if obj.get(field).is_some_and(|v| !v.is_null()) {
            return Err(Refusal::Unmeasurable(format!(
                "`{field}` is refused on /v1/score"
            )));
        }
    }
    let item_first = lax_bool(obj.get("item_first"), "item_first")?;
    let items: Vec<&Value> = match obj.get("items") {
        Some(Value::String(_)) => vec![&obj["items"]],
        Some(Value::Array(items)) if !items.is_empty() => items.iter().collect(),
        _ => {
            return Err(invalid(
                "`items` must be a string or a non-empty list",
                Some("items"),
            ))
        }
    };
    match obj.get("query") {
        Some(Value::String(query)) => {
            let items: Vec<&str> = items
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| invalid("text `query` needs text `items`", Some("items")))
                })
                .collect::<Result<_, _>>()?;
            let mut units: Vec<Unit> = items
                .iter()
                .map(|item| {
                    Unit::Text(if item_first {
                        format!("{item}{query}")
                    } else {
                        format!("{query}{item}")
                    })
                })
                .collect();
            let mut packed = vec![Piece::Text {
                text: query.clone(),
                add_special_tokens: true,
            }];
            for item in &items {
                packed.push(Piece::Tokens(1));
                packed.push(Piece::Text {
                    text: (*item).to_owned(),
                    add_special_tokens: false,
                });
            }
            packed.push(Piece::Tokens(1));
            units.push(Unit::Joined(packed));
            Ok(units)
        }
        Some(Value::Array(query)) if query.iter().all(is_token_id) => {
            let lens: Vec<usize> = items
                .iter()
                .map(|v| match v.as_array() {
                    Some(ids) if ids.iter().all(is_token_id) => Ok(ids.len()),
                    _ => Err(invalid(
                        "token-id `query` needs token-id `items`",
                        Some("items"),
                    )),
                })
                .collect::<Result<_, _>>()?;
            let mut units: Vec<Unit> = lens.iter().map(|n| Unit::Ids(query.len() + n)).collect();
            units.push(Unit::Ids(
                query.len() + lens.iter().map(|n| n + 1).sum::<usize>() + 1,
            ));
            Ok(units)
        }
        _ => Err(invalid(
            "`query` must be a string or a list of token ids",
            Some("query"),
        )),
    }
}

/// pydantic's lax `bool` (`"yes"`, `"on"`, `1`, ...), refusing anything
/// else; absent or `null` is the field's default, `false`.
fn lax_bool(v: Option<&Value>, field: &'static str) -> Result<bool, Refusal> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(v) => py::lax_bool(v)
            .ok_or_else(|| invalid(format!("`{field}` must be a boolean"), Some(field))),
    }
}

/// `/vertex_generate` (`http_server.py::vertex_generate`): the input key is
/// whichever of `text`, `input_ids`, `input_embeds` the FIRST instance has a
/// truthy value for, collected from every instance; `image_data` likewise;
/// then `parameters` is splatted into the same `GenerateReqInput`. So a
/// prompt can also arrive through `parameters`: the guard rebuilds the exact
/// object SGLang builds and counts that, refusing a key given twice.
fn vertex_units(obj: &serde_json::Map<String, Value>) -> Result<Vec<Unit>, Refusal> {
    let instances = match obj.get("instances") {
        Some(Value::Array(i)) => i,
        _ => return Err(invalid("`instances` must be a list", Some("instances"))),
    };
    if instances.is_empty() {
        // SGLang answers `[]` without generating anything.
        return Ok(Vec::new());
    }
    let as_obj = |v: &Value| {
        v.as_object()
            .cloned()
            .ok_or_else(|| invalid("each instance must be an object", Some("instances")))
    };
    let first = as_obj(&instances[0])?;
    let mut merged = serde_json::Map::new();
    if let Some(key) = ["text", "input_ids", "input_embeds"]
        .into_iter()
        .find(|k| first.get(*k).is_some_and(py::truthy))
    {
        let values = instances
            .iter()
            .map(|i| as_obj(i).map(|o| o.get(key).cloned().unwrap_or(Value::Null)))
            .collect::<Result<Vec<_>, _>>()?;
        merged.insert(key.to_owned(), Value::Array(values));
    }
    let images: Vec<Value> = instances
        .iter()
        .filter_map(|i| i.get("image_data").filter(|v| !v.is_null()).cloned())
        .collect();
    if !images.is_empty() {
        merged.insert("image_data".into(), Value::Array(images));
    }
    match obj.get("parameters") {
        None | Some(Value::Null) => {}
        Some(Value::Object(params)) => {
            for (k, v) in params {
                if merged.contains_key(k) {
                    return Err(invalid(
                        format!("`parameters.{k}` repeats an instance field"),
                        Some("parameters"),
                    ));
                }
                merged.insert(k.clone(), v.clone());
            }
        }
        Some(_) => {
            return Err(invalid(
                "`parameters` must be an object",
                Some("parameters"),
            ))
        }
    }
    generate_units(&merged, true)
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
                        Unit::Chat(_) | Unit::ChatApi(..) => "chat".into(),
                        Unit::Pair(a, b) => format!("pair:{}+{}", a.len(), b.len()),
                        Unit::Joined(pieces) => format!("joined:{}", pieces.len()),
                        Unit::Media(_, m) => format!("media:{m:?}"),
                    })
                    .collect()
            })
            .map_err(|r| r.label())
    }

    #[test]
    fn media_items_are_counted_per_kind_and_go_with_every_unit() {
        let body = json!({
            "text": ["a", "b"],
            "image_data": [["x", null, {"url": "u"}], "y", null],
            "video_data": [],
            "audio_data": "z",
        });
        let media = "media:MediaItems { image: Some(3), video: Some(0), audio: Some(1) }";
        assert_eq!(units(Route::Generate, body).unwrap(), [media, media]);
        // A null field is no field.
        assert_eq!(
            units(Route::Generate, json!({"text": "a", "image_data": null})).unwrap(),
            ["text:1"]
        );
        // Media on an invalid body: the body's own refusal.
        assert_eq!(
            units(Route::Generate, json!({"image_data": "x"})).unwrap_err(),
            "invalid_request"
        );
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
        // Media go with every unit; the counter charges or refuses them.
        assert_eq!(
            units(Route::Generate, json!({"text": "a", "image_data": "x"})).unwrap(),
            ["media:MediaItems { image: Some(1), video: None, audio: None }"]
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

    #[test]
    fn embeddings_and_classify_inputs() {
        assert_eq!(
            units(Route::Embeddings, json!({"input": "abc"})).unwrap(),
            ["text:3"]
        );
        assert_eq!(
            units(Route::Embeddings, json!({"input": ["a", "bc"]})).unwrap(),
            ["text:1", "text:2"]
        );
        assert_eq!(
            units(Route::Embeddings, json!({"input": [1, 2]})).unwrap(),
            ["ids:2"]
        );
        assert_eq!(
            units(Route::Embeddings, json!({"input": [[1], [2, 3]]})).unwrap(),
            ["ids:1", "ids:2"]
        );
        assert_eq!(
            units(Route::ClassifyV1, json!({"input": [5, 6, 7]})).unwrap(),
            ["ids:3"]
        );
        for bad in [
            json!(""),
            json!("  "),
            json!([]),
            json!(["a", " "]),
            json!([["a"]]),
        ] {
            assert_eq!(
                units(Route::ClassifyV1, json!({ "input": bad })).unwrap_err(),
                "invalid_request"
            );
        }
        assert_eq!(
            units(
                Route::Embeddings,
                json!({"input": [{"text": "a", "image": "http://x"}]})
            )
            .unwrap_err(),
            "unmeasurable_content"
        );
    }

    #[test]
    fn encode_takes_cross_encoder_pairs_but_generate_does_not() {
        let body = json!({"text": [["q", "doc one"], ["q", "d"]]});
        assert_eq!(
            units(Route::Encode, body.clone()).unwrap(),
            ["pair:1+7", "pair:1+1"]
        );
        assert_eq!(units(Route::Generate, body).unwrap_err(), "invalid_request");
        assert_eq!(
            units(Route::Classify, json!({"input_embeds": [[0.1]]})).unwrap_err(),
            "invalid_request"
        );
    }

    #[test]
    fn rerank_is_one_pair_per_document() {
        let body = json!({"query": "q", "documents": ["aa", "bbb"]});
        assert_eq!(
            units(Route::Rerank, body).unwrap(),
            ["pair:1+2", "pair:1+3"]
        );
        let parts = json!({"query": [{"type": "text", "text": "q"}], "documents": ["a"]});
        assert_eq!(
            units(Route::Rerank, parts).unwrap_err(),
            "unmeasurable_content"
        );
        assert_eq!(
            units(Route::Rerank, json!({"query": "q", "documents": []})).unwrap_err(),
            "invalid_request"
        );
    }

    #[test]
    fn score_counts_each_item_and_the_packed_sequence() {
        let text = json!({"query": "q", "items": ["a", "b", "c"]});
        assert_eq!(
            units(Route::Score, text).unwrap(),
            ["text:2", "text:2", "text:2", "joined:8"]
        );
        let ids = json!({"query": [1, 2], "items": [[3], [4, 5]], "item_first": "yes"});
        // query + item per item; packed: 2 + (1+1) + (1+2) + 1 = 8.
        assert_eq!(
            units(Route::Score, ids).unwrap(),
            ["ids:3", "ids:4", "ids:8"]
        );
        assert_eq!(
            units(Route::Score, json!({"query": "q", "items": [[1]]})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(
                Route::Score,
                json!({"query": "q", "items": "a", "item_first": "maybe"})
            )
            .unwrap_err(),
            "invalid_request"
        );
    }

    #[test]
    fn vertex_builds_the_object_sglang_builds() {
        let body = json!({"instances": [{"text": "ab"}, {"text": "c"}]});
        assert_eq!(
            units(Route::VertexGenerate, body).unwrap(),
            ["text:2", "text:1"]
        );
        // An empty first text makes SGLang take the prompt from `parameters`.
        let via_params =
            json!({"instances": [{"text": ""}], "parameters": {"input_ids": [1, 2, 3, 4]}});
        assert_eq!(units(Route::VertexGenerate, via_params).unwrap(), ["ids:4"]);
        let twice = json!({"instances": [{"text": "a"}], "parameters": {"text": "b"}});
        assert_eq!(
            units(Route::VertexGenerate, twice).unwrap_err(),
            "invalid_request"
        );
        let image = json!({"instances": [{"text": "a", "image_data": "x"}]});
        assert_eq!(
            units(Route::VertexGenerate, image).unwrap(),
            ["media:MediaItems { image: Some(1), video: None, audio: None }"]
        );
        let session =
            json!({"instances": [{"text": "a"}], "parameters": {"session_params": {"id": "s"}}});
        assert_eq!(
            units(Route::VertexGenerate, session).unwrap_err(),
            "unmeasurable_content"
        );
        assert!(units(Route::VertexGenerate, json!({"instances": []}))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn batch_flag_follows_the_prompt_field() {
        let batch = |route, body| extract(route, Arc::new(body)).unwrap().batch;
        assert!(!batch(Route::Completions, json!({"prompt": "a"})));
        assert!(!batch(Route::Completions, json!({"prompt": [1, 2]})));
        assert!(batch(Route::Completions, json!({"prompt": ["a"]})));
        assert!(batch(Route::Generate, json!({"input_ids": [[1]]})));
        assert!(!batch(
            Route::Generate,
            json!({"input_embeds": [[0.1], [0.2]]})
        ));
        assert!(batch(Route::Generate, json!({"input_embeds": [[[0.1]]]})));
        assert!(batch(
            Route::Rerank,
            json!({"query": "q", "documents": ["a"]})
        ));
    }

    #[test]
    fn lax_token_ids_as_pydantic_reads_them() {
        // pydantic's lax ints: three tokens.
        assert_eq!(
            units(Route::Generate, json!({"input_ids": ["1", 2.0, true]})).unwrap(),
            ["ids:3"]
        );
        assert_eq!(
            units(Route::Completions, json!({"prompt": ["1", 2.0, true]})).unwrap(),
            ["ids:3"]
        );
        // All strings is a text batch on completions (pydantic's exact match), never ids on /generate.
        assert_eq!(
            units(Route::Completions, json!({"prompt": ["1", "2"]})).unwrap(),
            ["text:1", "text:1"]
        );
        assert_eq!(
            units(Route::Generate, json!({"input_ids": ["a"]})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(Route::Generate, json!({"input_ids": [[1], []]})).unwrap_err(),
            "invalid_request"
        );
        assert_eq!(
            units(Route::Generate, json!({"input_ids": [1.5]})).unwrap_err(),
            "invalid_request"
        );
    }

    #[test]
    fn sessions_are_refused_on_every_route() {
        for route in [
            Route::ChatCompletions,
            Route::Completions,
            Route::Generate,
            Route::Embeddings,
        ] {
            for field in ["session_params", "session_id"] {
                let mut body = json!({"messages": [], "prompt": "a", "text": "a", "input": "a"});
                body[field] = json!({"id": "s"});
                assert_eq!(
                    units(route, body).unwrap_err(),
                    "unmeasurable_content",
                    "{route:?} {field}"
                );
            }
        }
    }
}
