//! `/v1/responses` → the `ChatCompletionRequest` SGLang 0.5.23 builds from it,
//! for models that do not use harmony (`serving_responses.py`):
//!
//! 1. `ResponsesRequest` validation and its `mode="before"` validators
//!    (`normalize_reasoning_to_thinking`, `normalize_responses_input`);
//! 2. `create_responses`' request checks (`tool_choice` against `tools`);
//! 3. `_construct_input_messages`: `instructions` as a leading system message,
//!    `_normalize_response_message_for_chat` per input item,
//!    `_merge_consecutive_assistant_messages`, and the system coalescing that
//!    runs when the template cannot render a system message mid-conversation;
//! 4. `_make_request`: `_response_tools_to_chat_tools`, the chat `tool_choice`,
//!    `reasoning.effort` and `chat_template_kwargs`.
//!
//! The result then takes the chat path without `_validate_request` and without
//! `_convert_to_internal_request` (see [`Options`]).
//!
//! Refused, because the prompt SGLang builds is not in the body:
//! `previous_response_id` (history stored on the server), tools other than
//! `function` and `custom` (built-in tools such as web search, MCP or the code
//! interpreter run inside SGLang and their output joins the prompt), and
//! reasoning items that only carry `encrypted_content` (SGLang inflates a
//! zlib blob into reasoning text).

use serde_json::{json, Map, Value};

use super::preprocess::{Converted, Options, EFFORT_TIERS};
use super::py;
use super::{invalid, invalid_param, CountError};

/// `RESPONSE_TOOL_TYPES`.
pub(super) const TOOL_TYPES: [&str; 13] = [
    "function",
    "web_search",
    "web_search_preview",
    "code_interpreter",
    "file_search",
    "image_generation",
    "computer_use_preview",
    "local_shell",
    "shell",
    "mcp",
    "custom",
    "namespace",
    "tool_search",
];
/// `responses_adapters.DEVELOPER_BLOCK_LABEL`.
const DEVELOPER_LABEL: &str = "Developer instructions:";
/// `responses_adapters._REASONING_STATE_PREFIX`.
pub(super) const REASONING_STATE_PREFIX: &str = "sglang-reasoning-v1.";

/// A validated `ResponseTool` (only what reaches the prompt).
struct ResponseTool<'a> {
    kind: &'a str,
    name: Option<&'a str>,
    description: Option<&'a str>,
    parameters: Option<&'a Value>,
    strict: bool,
    format: Option<&'a Map<String, Value>>,
}

/// Converts a `/v1/responses` body. `inline_system` is SGLang's
/// `supports_inline_system` for the model's template.
pub fn convert(body: &Value, inline_system: bool) -> Result<Converted, CountError> {
    let top = body
        .as_object()
        .ok_or_else(|| invalid("Input should be a valid dictionary"))?;

    // Server-side state first: the clearest reason to give.
    if top
        .get("previous_response_id")
        .is_some_and(|v| !v.is_null())
    {
        return Err(CountError::Unsupported(
            "previous_response_id is refused: SGLang would prepend conversation history stored \
             on the server, whose length the guard cannot see"
                .into(),
        ));
    }

    let request = responses_request(top)?;
    let effective = create_responses(&request)?;
    make_request(request, &effective, inline_system)
}

/// A validated `ResponsesRequest` (the prompt-shaping fields).
struct ResponsesRequest<'a> {
    input: Input<'a>,
    instructions: Option<&'a str>,
    model: String,
    /// `reasoning.effort`.
    effort: Option<Value>,
    chat_template_kwargs: Option<Value>,
    tools: Vec<ResponseTool<'a>>,
    tool_choice: Value,
}

/// `ResponsesRequest` validation, after its `normalize_reasoning_to_thinking`
/// validator, field by field in the order the errors are reported.
fn responses_request(top: &Map<String, Value>) -> Result<ResponsesRequest<'_>, CountError> {
    let ctk = normalize_reasoning_to_thinking(top);
    let input = match top.get("input") {
        None => return Err(invalid_param("input: Field required", "input")),
        Some(Value::String(s)) => Input::Text(s),
        Some(Value::Array(items)) => Input::Items(
            items
                .iter()
                .enumerate()
                .map(|(i, it)| {
                    it.as_object().ok_or_else(|| {
                        invalid_param(
                            format!("input.{i}: Input should be a valid dictionary"),
                            "input",
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid_param(
                "input: Input should be a valid string or a list of input items",
                "input",
            ))
        }
    };
    let instructions = match top.get("instructions") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(invalid_param(
                "instructions: Input should be a valid string",
                "instructions",
            ))
        }
    };
    // `ChatCompletionRequest(model=request.model)`: `model` is a required string there.
    let model = match top.get("model") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(invalid_param(
                "model: Input should be a valid string",
                "model",
            ))
        }
    };
    let effort = match top.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(v) => reasoning_effort(v)?,
    };
    match &ctk {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) => {
            return Err(invalid_param(
                "chat_template_kwargs: Input should be a valid dictionary",
                "chat_template_kwargs",
            ))
        }
    }
    let tools = parse_tools(top.get("tools"))?;
    let tool_choice = match top.get("tool_choice") {
        None => Value::String("auto".into()),
        Some(Value::String(s)) if ["auto", "required", "none"].contains(&s.as_str()) => {
            Value::String(s.clone())
        }
        Some(Value::Object(o)) => Value::Object(o.clone()),
        Some(_) => {
            return Err(invalid_param(
                "tool_choice: Input should be 'auto', 'required', 'none' or an object",
                "tool_choice",
            ))
        }
    };
    Ok(ResponsesRequest {
        input,
        instructions,
        model,
        effort,
        chat_template_kwargs: ctk,
        tools,
        tool_choice,
    })
}

/// `ResponsesRequest.normalize_reasoning_to_thinking`: effort "none" turns
/// thinking off, explicit kwargs winning. Returns the `chat_template_kwargs`.
fn normalize_reasoning_to_thinking(top: &Map<String, Value>) -> Option<Value> {
    let mut ctk: Option<Value> = top.get("chat_template_kwargs").cloned();
    if let Some(Value::Object(r)) = top.get("reasoning") {
        let effort = match r.get("effort") {
            Some(v) if py::truthy(v) => Some(v),
            _ => r.get("reasoning_effort"),
        };
        if effort.and_then(Value::as_str) == Some("none") {
            let mut m = Map::new();
            m.insert("thinking".into(), Value::Bool(false));
            m.insert("enable_thinking".into(), Value::Bool(false));
            if let Some(Value::Object(existing)) = &ctk {
                for (k, v) in existing {
                    m.insert(k.clone(), v.clone());
                }
            }
            ctk = Some(Value::Object(m));
        }
    }
    ctk
}

/// `ResponseReasoningParam` (a non-null `reasoning`): its `effort`.
fn reasoning_effort(reasoning: &Value) -> Result<Option<Value>, CountError> {
    match reasoning {
        Value::Object(r) => match r.get("effort") {
            // `ResponseReasoningParam.effort` defaults to "medium".
            None => Ok(Some(json!("medium"))),
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if EFFORT_TIERS.contains(&s.as_str()) => {
                Ok(Some(Value::String(s.clone())))
            }
            Some(_) => Err(invalid_param(
                "reasoning.effort: Input should be one of the effort tiers",
                "reasoning",
            )),
        },
        _ => Err(invalid_param(
            "reasoning: Input should be a valid dictionary",
            "reasoning",
        )),
    }
}

/// `OpenAIServingResponses.create_responses`' request checks (`tool_choice`
/// against `tools`); returns the effective tool choice.
fn create_responses(request: &ResponsesRequest<'_>) -> Result<EffectiveChoice, CountError> {
    let tools = &request.tools;
    let callable = |t: &ResponseTool<'_>| t.kind == "function" || t.kind == "custom";
    if request.tool_choice.as_str() == Some("required") && !tools.iter().any(callable) {
        return Err(invalid_param(
            "tool_choice=\"required\" requires at least one tool with type=\"function\" or \
             type=\"custom\"; other built-in tool types cannot be forced.",
            "tool_choice",
        ));
    }
    let effective = effective_tool_choice(&request.tool_choice)?;
    if let Some(name) = &effective.named {
        if !tools
            .iter()
            .any(|t| callable(t) && t.name.is_some_and(|n| Value::String(n.into()) == *name))
        {
            return Err(invalid_param(
                format!("Tool {} is not declared in tools", py::repr(name)),
                "tool_choice",
            ));
        }
    }
    Ok(effective)
}

/// `OpenAIServingResponses._make_request`: `_construct_input_messages`, then
/// the `ChatCompletionRequest` (`_response_tools_to_chat_tools`,
/// `_chat_tool_choice`, `reasoning.effort`, `chat_template_kwargs`).
fn make_request(
    request: ResponsesRequest<'_>,
    effective: &EffectiveChoice,
    inline_system: bool,
) -> Result<Converted, CountError> {
    let messages = construct_input_messages(request.instructions, &request.input, inline_system)?;
    if messages.is_empty() {
        // transformers' `apply_chat_template` raises before rendering.
        return Err(invalid_param(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            "input",
        ));
    }

    let chat_tools = (request.tools.iter())
        .filter_map(|t| chat_tool(t).transpose())
        .collect::<Result<Vec<Value>, CountError>>()?;
    let chat_tool_choice = if chat_tools.is_empty() {
        Value::String("none".into())
    } else {
        match &effective.named {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => effective.mode.clone(),
        }
    };
    let mut chat = Map::new();
    chat.insert("model".into(), Value::String(request.model));
    chat.insert("messages".into(), Value::Array(messages));
    if !chat_tools.is_empty() {
        chat.insert("tools".into(), Value::Array(chat_tools));
    }
    chat.insert("tool_choice".into(), chat_tool_choice);
    if let Some(e) = request.effort {
        chat.insert("reasoning_effort".into(), e);
    }
    if let Some(k) = request.chat_template_kwargs.filter(|k| !k.is_null()) {
        chat.insert("chat_template_kwargs".into(), k);
    }
    Ok(Converted {
        body: Value::Object(chat),
        options: Options {
            skip_validate_request: true,
            skip_convert_to_internal: true,
            // The rest (media, server defaults) the counter sets.
            ..Options::default()
        },
    })
}

enum Input<'a> {
    Text(&'a str),
    Items(Vec<&'a Map<String, Value>>),
}

fn parse_tools(v: Option<&Value>) -> Result<Vec<ResponseTool<'_>>, CountError> {
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(invalid_param(
                "tools: Input should be a valid list",
                "tools",
            ))
        }
    };
    let mut tools = Vec::with_capacity(items.len());
    for (i, t) in items.iter().enumerate() {
        let loc = format!("tools.{i}");
        let o = t.as_object().ok_or_else(|| {
            invalid_param(
                format!("{loc}: Input should be a valid dictionary"),
                "tools",
            )
        })?;
        let kind = match o.get("type") {
            Some(Value::String(s)) if TOOL_TYPES.contains(&s.as_str()) => s.as_str(),
            _ => {
                return Err(invalid_param(
                    format!("{loc}.type: Input should be one of the Responses tool types"),
                    "tools",
                ))
            }
        };
        if kind != "function" && kind != "custom" {
            return Err(CountError::Unsupported(format!(
                "{loc} has type `{kind}`: only `function` and `custom` tools are admitted. Built-in \
                 tools (web_search, code_interpreter, mcp, ...) run inside SGLang and their output is \
                 added to the prompt, which the guard cannot count"
            )));
        }
        let opt_str = |key: &str| match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(invalid_param(
                format!("{loc}.{key}: Input should be a valid string"),
                "tools",
            )),
        };
        let opt_obj = |key: &str| match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(invalid_param(
                format!("{loc}.{key}: Input should be a valid dictionary"),
                "tools",
            )),
        };
        let name = opt_str("name")?;
        let description = opt_str("description")?;
        let parameters = opt_obj("parameters")?.and(o.get("parameters"));
        let format = opt_obj("format")?;
        let strict = match o.get("strict") {
            None => false,
            Some(v) => py::lax_bool(v).ok_or_else(|| {
                invalid_param(
                    format!("{loc}.strict: Input should be a valid boolean"),
                    "tools",
                )
            })?,
        };
        if kind == "function" && name.is_none_or(str::is_empty) {
            return Err(invalid_param(
                format!("{loc}: Value error, Function tools must include a name."),
                "tools",
            ));
        }
        tools.push(ResponseTool {
            kind,
            name,
            description,
            parameters,
            strict,
            format,
        });
    }
    Ok(tools)
}

/// `ResponsesRequest.effective_tool_choice()`, split into the string mode and a
/// named tool (`{"type": "function"|"custom", "name": ...}`).
struct EffectiveChoice {
    mode: Value,
    named: Option<Value>,
}

fn effective_tool_choice(choice: &Value) -> Result<EffectiveChoice, CountError> {
    let Value::Object(o) = choice else {
        return Ok(EffectiveChoice {
            mode: choice.clone(),
            named: None,
        });
    };
    let name = match o.get("name") {
        Some(v) if py::truthy(v) => Some(v.clone()),
        _ => match o.get("function") {
            Some(f) if !py::truthy(f) => None,
            None => None,
            Some(Value::Object(f)) => f.get("name").cloned(),
            // `(tool_choice.get("function") or {}).get("name")` on a non-dict raises.
            Some(_) => {
                return Err(invalid_param(
                    "tool_choice.function: Input should be a valid dictionary",
                    "tool_choice",
                ))
            }
        },
    };
    let kind = o.get("type").and_then(Value::as_str);
    match (kind, name) {
        (Some("function" | "custom"), Some(name)) if py::truthy(&name) => Ok(EffectiveChoice {
            mode: Value::Null,
            named: Some(name),
        }),
        _ => Ok(EffectiveChoice {
            mode: Value::String("auto".into()),
            named: None,
        }),
    }
}

/// `_response_tools_to_chat_tools` for one tool (no `--tool-call-parser`):
/// `Tool(type="function", function=Function(name=..., description=...,
/// parameters=..., strict=..., defer_loading=None))`. The keys are in the
/// order of those keyword arguments, which is the order `Function` dumps.
fn chat_tool(t: &ResponseTool<'_>) -> Result<Option<Value>, CountError> {
    let (description, parameters) = match t.kind {
        "function" => (
            t.description.map(|d| Value::String(d.into())),
            t.parameters.cloned(),
        ),
        "custom" if t.name.is_some_and(|n| !n.is_empty()) => (
            custom_tool_description(t.description, t.format)?.map(Value::String),
            Some(custom_tool_parameters()),
        ),
        _ => return Ok(None),
    };
    let mut f = Map::new();
    f.insert("name".into(), json!(t.name));
    f.insert("description".into(), description.unwrap_or(Value::Null));
    f.insert("parameters".into(), parameters.unwrap_or(Value::Null));
    f.insert("strict".into(), Value::Bool(t.strict));
    f.insert("defer_loading".into(), Value::Null);
    Ok(Some(
        json!({"type": "function", "function": Value::Object(f)}),
    ))
}

/// `responses_adapters.custom_tool_parameters`.
fn custom_tool_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": "The freeform text payload for this tool.",
            }
        },
        "required": ["input"],
        "additionalProperties": false,
    })
}

/// `responses_adapters.custom_tool_description`. The format is the request's
/// dict, so `syntax` and `definition` may be any JSON value, which the
/// f-string prints by `str()`: exactly, or refused where that depends on the
/// Python version (`py::Repr::Strict`).
fn custom_tool_description(
    description: Option<&str>,
    format: Option<&Map<String, Value>>,
) -> Result<Option<String>, CountError> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(d) = description.filter(|d| !d.is_empty()) {
        parts.push(d.to_owned());
    }
    if let Some(f) = format.filter(|f| f.get("type").and_then(Value::as_str) == Some("grammar")) {
        let text = |key: &str, default: &'static str| match f.get(key) {
            Some(v) if py::truthy(v) => py::str(v, py::Repr::Strict).map_err(|e| {
                CountError::Unsupported(format!("a custom tool's grammar format {key}: {e}"))
            }),
            _ => Ok(std::borrow::Cow::Borrowed(default)),
        };
        let syntax = text("syntax", "lark")?;
        let definition = text("definition", "")?;
        parts.push(format!(
            "The payload must conform to this {syntax} grammar:\n{definition}"
        ));
    }
    let joined = parts.join("\n\n");
    Ok((!joined.is_empty()).then_some(joined))
}

fn construct_input_messages(
    instructions: Option<&str>,
    input: &Input<'_>,
    inline_system: bool,
) -> Result<Vec<Value>, CountError> {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(i) = instructions.filter(|i| !i.is_empty()) {
        messages.push(json!({"role": "system", "content": i}));
    }
    match input {
        Input::Text(s) => messages.push(json!({"role": "user", "content": s})),
        Input::Items(items) => {
            for item in items {
                if let Some(m) = normalize_item(&normalize_item_for_validation(item))? {
                    messages.push(m);
                }
            }
        }
    }
    let messages = merge_consecutive_assistant_messages(messages)?;
    if inline_system {
        return Ok(messages);
    }
    // Most templates expect one leading system message: coalesce.
    let mut chunks: Vec<String> = Vec::new();
    let mut others: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.get("role").and_then(Value::as_str) == Some("system") {
            match m.get("content") {
                Some(Value::String(s)) => chunks.push(s.clone()),
                Some(Value::Array(parts)) => chunks.extend(
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .map(str::to_owned),
                ),
                _ => {}
            }
        } else {
            others.push(m);
        }
    }
    if chunks.is_empty() {
        return Ok(others);
    }
    let mut out = Vec::with_capacity(others.len() + 1);
    out.push(json!({"role": "system", "content": chunks.join("\n\n")}));
    out.extend(others);
    Ok(out)
}

/// `ResponsesRequest._normalize_input_item_for_validation`: a replayed output
/// item's string `id` is dropped when it has content.
fn normalize_item_for_validation(item: &Map<String, Value>) -> Map<String, Value> {
    let mut item = item.clone();
    if item.get("id").is_some_and(Value::is_string)
        && item.get("content").is_some_and(|c| !c.is_null())
    {
        item.shift_remove("id");
    }
    item
}

/// `_normalize_response_message_for_chat` (no `--tool-call-parser`).
fn normalize_item(item: &Map<String, Value>) -> Result<Option<Value>, CountError> {
    let mut message = item.clone();
    if message.get("role").and_then(Value::as_str) == Some("developer") {
        message.insert("role".into(), Value::String("system".into()));
        let labelled = label_developer_content(message.get("content"));
        message.insert("content".into(), labelled);
    }
    let get = |k: &str| message.get(k).filter(|v| !v.is_null());
    match message.get("type") {
        Some(Value::String(t)) if t == "function_call" => {
            let arguments = match get("arguments") {
                Some(Value::String(raw)) => {
                    if !raw.is_empty() && parses_as_object(raw)? {
                        Value::String(raw.clone())
                    } else {
                        Value::String("{}".into())
                    }
                }
                // `orjson.dumps(raw)`, which the chat path parses back to this object.
                Some(Value::Object(o)) => Value::Object(o.clone()),
                _ => Value::String("{}".into()),
            };
            Ok(Some(tool_call_message(
                &message,
                get("name").cloned(),
                arguments,
            )))
        }
        Some(Value::String(t)) if t == "custom_tool_call" => {
            // `encode_custom_tool_input(input or "")`: a JSON string the chat path
            // parses back to `{"input": payload}`.
            let payload = get("input")
                .filter(|v| py::truthy(v))
                .cloned()
                .unwrap_or_else(|| Value::String(String::new()));
            Ok(Some(tool_call_message(
                &message,
                get("name").cloned(),
                json!({ "input": payload }),
            )))
        }
        Some(Value::String(t)) if t == "function_call_output" || t == "custom_tool_call_output" => {
            let content = match message.get("output") {
                None => Value::String(String::new()),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for p in parts.iter().filter_map(Value::as_object) {
                        match p.get("text") {
                            None => {}
                            Some(Value::String(s)) => text.push_str(s),
                            Some(_) => {
                                return Err(invalid_param(
                                    "tool output parts must carry string `text`",
                                    "input",
                                ))
                            }
                        }
                    }
                    Value::String(text)
                }
                Some(other) => other.clone(),
            };
            Ok(Some(json!({
                "role": "tool",
                "tool_call_id": get("call_id").cloned().unwrap_or(Value::Null),
                "content": content,
            })))
        }
        Some(Value::String(t)) if t == "reasoning" => reasoning_message(&message),
        None | Some(Value::Null) => Ok(Some(plain_message(message))),
        Some(Value::String(t)) if t == "message" => Ok(Some(plain_message(message))),
        Some(other) => Err(invalid_param(
            format!(
                "Unsupported Responses API input item type: {}",
                py::repr(other)
            ),
            "input",
        )),
    }
}

/// Whether `orjson.loads(raw)` yields a dict. serde_json accepts and refuses
/// the same documents (strict RFC 8259, no NaN, big integers as floats), except
/// that it stops at 128 levels of nesting where orjson goes on: such a string
/// is refused rather than read as `"{}"`.
fn parses_as_object(raw: &str) -> Result<bool, CountError> {
    match py::json_loads(raw) {
        Ok(v) => Ok(v.is_object()),
        Err(e) if e.to_string().contains("recursion limit") => Err(CountError::Unsupported(
            "function_call arguments nested deeper than the guard reads".into(),
        )),
        Err(_) => Ok(false),
    }
}

/// `_chat_tool_call_message`.
fn tool_call_message(message: &Map<String, Value>, name: Option<Value>, arguments: Value) -> Value {
    let id = match message.get("call_id") {
        Some(v) if py::truthy(v) => v.clone(),
        _ => message.get("id").cloned().unwrap_or(Value::Null),
    };
    json!({
        "role": "assistant",
        "tool_calls": [{
            "id": id,
            "type": "function",
            "function": {"name": name.unwrap_or(Value::Null), "arguments": arguments},
        }],
    })
}

/// A reasoning item: `{role: assistant, reasoning_content}` from its summary,
/// else its content; empty ones are dropped.
fn reasoning_message(message: &Map<String, Value>) -> Result<Option<Value>, CountError> {
    let mut parts = collect_texts(message.get("summary"))?;
    if parts.is_empty() {
        parts = collect_texts(message.get("content"))?;
    }
    if parts.is_empty() {
        if let Some(Value::String(blob)) = message.get("encrypted_content") {
            if blob.starts_with(REASONING_STATE_PREFIX) {
                return Err(CountError::Unsupported(
                    "a reasoning item carrying only encrypted_content is refused: SGLang inflates \
                     the compressed blob into reasoning text whose length is not in the body"
                        .into(),
                ));
            }
        }
        return Ok(None);
    }
    Ok(Some(json!({
        "role": "assistant",
        "reasoning_content": parts.join("\n"),
    })))
}

/// `_collect(parts)`: the truthy `text` of each dict entry of `parts or []`.
fn collect_texts(parts: Option<&Value>) -> Result<Vec<String>, CountError> {
    let entries = match parts {
        Some(Value::Array(a)) => a,
        // Falsy values give `[]`; a string or dict iterates over str items.
        None | Some(Value::Null | Value::String(_) | Value::Object(_)) => return Ok(Vec::new()),
        Some(v) if !py::truthy(v) => return Ok(Vec::new()),
        Some(_) => {
            return Err(invalid_param(
                "reasoning summary/content must be a list",
                "input",
            ))
        }
    };
    let mut out = Vec::new();
    for entry in entries.iter().filter_map(Value::as_object) {
        match entry.get("text") {
            Some(Value::String(s)) if !s.is_empty() => out.push(s.clone()),
            Some(v) if py::truthy(v) => {
                return Err(invalid_param(
                    "reasoning text parts must be strings",
                    "input",
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A message item: content parts renamed to chat parts, then every `None`
/// value and the `id`, `status` and `type` keys dropped.
fn plain_message(mut message: Map<String, Value>) -> Value {
    if let Some(Value::Array(parts)) = message.get_mut("content") {
        for p in parts.iter_mut() {
            *p = normalize_part(p);
        }
    }
    message.retain(|k, v| !v.is_null() && !matches!(k.as_str(), "id" | "status" | "type"));
    Value::Object(message)
}

/// `_normalize_response_content_part_for_chat`.
fn normalize_part(part: &Value) -> Value {
    let Some(o) = part.as_object() else {
        return part.clone();
    };
    match o.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text") => json!({
            "type": "text",
            "text": o.get("text").cloned().unwrap_or_else(|| Value::String(String::new())),
        }),
        // Images become `image_url` parts, which the chat path refuses as media.
        Some("input_image") => json!({
            "type": "image_url",
            "image_url": {"url": o.get("image_url").cloned().unwrap_or(Value::Null)},
        }),
        _ => part.clone(),
    }
}

/// `label_developer_content`.
fn label_developer_content(content: Option<&Value>) -> Value {
    match content {
        Some(Value::String(s)) => Value::String(format!("{DEVELOPER_LABEL}\n{s}")),
        Some(Value::Array(parts)) => {
            let mut out = parts.clone();
            if let Some(i) = parts
                .iter()
                .position(|p| p.get("text").is_some_and(Value::is_string))
            {
                if let Some(Value::Object(o)) = out.get_mut(i) {
                    let text = o.get("text").and_then(Value::as_str).unwrap_or_default();
                    let labelled = format!("{DEVELOPER_LABEL}\n{text}");
                    o.insert("text".into(), Value::String(labelled));
                }
                return Value::Array(out);
            }
            out.insert(0, json!({"type": "input_text", "text": DEVELOPER_LABEL}));
            Value::Array(out)
        }
        Some(other) => other.clone(),
        None => Value::Null,
    }
}

/// Why SGLang 0.5.19-0.5.22 may build a longer prompt than 0.5.23 for this
/// request, or `None`. Found by running each release's own handler
/// (`gen_chat_api.py` against 0.5.19-0.5.23, plus probes): before 0.5.22 every
/// system and developer item is moved to the front and list parts are
/// joined with blank lines; before 0.5.23 a reasoning item stays a turn of its
/// own ahead of an assistant message with a `phase` (0.5.23 merges it in).
/// Items of those kinds are refused rather than guessed at.
pub fn built_differently_before_0523(body: &Value) -> Option<&'static str> {
    let items = body.get("input")?.as_array()?;
    for item in items {
        let role = item.get("role").and_then(Value::as_str);
        if matches!(role, Some("system" | "developer")) {
            return Some("system and developer input items are moved and joined");
        }
        if item.get("type").and_then(Value::as_str) == Some("reasoning") {
            return Some("reasoning items are not merged into the next assistant message");
        }
        if item.get("phase").is_some_and(|p| !p.is_null()) {
            return Some("assistant messages with a phase are merged differently");
        }
    }
    None
}

/// `_merge_consecutive_assistant_messages`.
fn merge_consecutive_assistant_messages(messages: Vec<Value>) -> Result<Vec<Value>, CountError> {
    let mut merged: Vec<Value> = Vec::with_capacity(messages.len());
    for msg in messages {
        let is_assistant = |m: &Value| m.get("role").and_then(Value::as_str) == Some("assistant");
        let phase = |m: &Value| m.get("phase").cloned().unwrap_or(Value::Null);
        let mergeable = is_assistant(&msg)
            && merged.last().is_some_and(|prev| {
                is_assistant(prev) && (phase(prev) == phase(&msg) || only_reasoning(prev))
            });
        if !mergeable {
            merged.push(msg);
            continue;
        }
        let Some(Value::Object(prev)) = merged.last_mut() else {
            unreachable!("mergeable implies an assistant object");
        };
        let new = msg.as_object().cloned().unwrap_or_default();
        if let Some(p) = new.get("phase").filter(|p| !p.is_null()) {
            prev.insert("phase".into(), p.clone());
        }
        match new.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(new_content) => {
                let merged_content = match prev.get("content") {
                    None | Some(Value::Null) => new_content.clone(),
                    Some(Value::String(p)) if p.is_empty() => new_content.clone(),
                    Some(Value::String(p)) if new_content.is_string() => {
                        Value::String(format!("{p}\n\n{}", new_content.as_str().unwrap_or("")))
                    }
                    Some(p) => {
                        let mut parts = as_parts(p);
                        parts.extend(as_parts(new_content));
                        Value::Array(parts)
                    }
                };
                prev.insert("content".into(), merged_content);
            }
        }
        if let Some(new_calls) = new.get("tool_calls").filter(|v| py::truthy(v)) {
            let Value::Array(new_calls) = new_calls else {
                return Err(invalid_param("tool_calls must be a list", "input"));
            };
            let mut calls = match prev.get("tool_calls") {
                Some(Value::Array(c)) => c.clone(),
                Some(v) if py::truthy(v) => {
                    return Err(invalid_param("tool_calls must be a list", "input"))
                }
                _ => Vec::new(),
            };
            calls.extend(new_calls.iter().cloned());
            prev.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(new_r) = new.get("reasoning_content").filter(|v| py::truthy(v)) {
            let Value::String(new_r) = new_r else {
                return Err(invalid_param("reasoning_content must be a string", "input"));
            };
            let joined = match prev.get("reasoning_content") {
                Some(Value::String(p)) if !p.is_empty() => format!("{p}\n{new_r}"),
                Some(v) if py::truthy(v) => {
                    return Err(invalid_param("reasoning_content must be a string", "input"))
                }
                _ => new_r.clone(),
            };
            prev.insert("reasoning_content".into(), Value::String(joined));
        }
    }
    Ok(merged)
}

/// `set(message) == {"role", "reasoning_content"}`.
fn only_reasoning(m: &Value) -> bool {
    m.as_object().is_some_and(|o| {
        o.len() == 2 && o.contains_key("role") && o.contains_key("reasoning_content")
    })
}

/// `_as_parts` in the merge: lists as they are, a non-empty string as one text part.
fn as_parts(c: &Value) -> Vec<Value> {
    match c {
        Value::Array(a) => a.clone(),
        Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod arguments_tests {
    use super::*;

    /// `str()` of odd grammar formats, as SGLang prints them (not as JSON).
    #[test]
    fn custom_tool_description_prints_python_str() {
        let describe = |d: Option<&str>, f: Value| {
            custom_tool_description(d, f.as_object()).map(Option::unwrap_or_default)
        };
        // Expected: SGLang's own custom_tool_description, run as
        //   import sglang_env  # crates/count/src/testdata, SGLANG_SRC=<unpacked 0.5.23 wheel>
        //   from sglang.srt.entrypoints.openai.responses_adapters import custom_tool_description
        //   print(json.dumps(custom_tool_description(d, json.loads(f))))
        // with the same d and f.
        let f = json!({"type": "grammar", "syntax": ["lark", "\u{e9}\u{a0}"],
            "definition": {"start": 1e20, "x": [1.5, null, true, "it's"]}});
        assert_eq!(
            describe(Some("d"), f).unwrap(),
            "d\n\nThe payload must conform to this ['lark', '\u{e9}\\xa0'] grammar:\n{'start': 1e+20, 'x': [1.5, None, True, \"it's\"]}"
        );
        let f = json!({"type": "grammar", "syntax": 2.0, "definition": true});
        assert_eq!(
            describe(None, f).unwrap(),
            "The payload must conform to this 2.0 grammar:\nTrue"
        );
        // Python 3.11 prints "['\\U0001fae8']" here, 3.12 the character itself.
        let f = json!({"type": "grammar", "syntax": 0, "definition": ["\u{1fae8}"]});
        assert!(matches!(describe(None, f), Err(CountError::Unsupported(_))));
    }

    /// orjson reads any JSON object as a dict, serde_json's special key
    /// included: the arguments are kept, never counted as `{}`.
    #[test]
    fn function_call_arguments_are_read_as_python_reads_them() {
        let long = "word ".repeat(1000);
        for key in ["k", "$serde_json::private::RawValue"] {
            let raw = serde_json::to_string(&serde_json::json!({ key: long })).unwrap();
            let item = serde_json::json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": raw});
            let message = normalize_item(item.as_object().unwrap()).unwrap().unwrap();
            assert_eq!(
                message["tool_calls"][0]["function"]["arguments"],
                Value::String(raw.clone()),
                "{key}"
            );
        }
    }
}
