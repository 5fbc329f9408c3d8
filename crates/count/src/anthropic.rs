//! `/v1/messages` (Anthropic) → the `ChatCompletionRequest` SGLang 0.5.23
//! builds from it (`anthropic/serving.py::_convert_to_chat_completion_request`
//! after `anthropic/protocol.py::AnthropicMessagesRequest` validation), which
//! then takes the chat path with `_validate_request` and
//! `_convert_to_internal_request` like `/v1/chat/completions`.
//!
//! Modelled for SGLang's defaults (no `--reasoning-parser`): `thinking`
//! other than `disabled` is refused by SGLang itself, so it is refused here.
//! Assistant `thinking` history is dropped by SGLang without a reasoning parser
//! but re-wrapped into the prompt with one, a server flag the guard cannot see,
//! so non-empty thinking history is refused. Images are refused as media, and a
//! `tool_use` with an empty `id` (SGLang substitutes a random one) is refused.

use serde_json::{json, Map, Value};

use super::preprocess::{Converted, Options};
use super::py;
use super::{invalid, invalid_param, CountError};

fn unmeasurable(message: impl Into<String>) -> CountError {
    CountError::Unsupported(message.into())
}

/// A validated content block (`AnthropicContentBlock`), as far as the
/// conversion reads it.
#[derive(Debug)]
enum Block<'a> {
    Text(&'a str),
    /// An image whose source yields an `image_url` part (always refused).
    Image,
    /// An image block the conversion drops (no usable source).
    EmptyImage,
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Option<&'a Map<String, Value>>,
    },
    ToolResult {
        tool_use_id: Option<&'a str>,
        id: Option<&'a str>,
        content: ToolResultContent<'a>,
    },
    ToolReference {
        name: Option<&'a str>,
        tool_name: Option<&'a str>,
    },
    SearchResult {
        source: Option<&'a Value>,
        title: Option<&'a str>,
        content: Option<&'a Vec<Value>>,
    },
    Thinking(&'a str),
    RedactedThinking,
}

#[derive(Debug)]
enum ToolResultContent<'a> {
    None,
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

fn opt_str<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    loc: &str,
) -> Result<Option<&'a str>, CountError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!(
            "{loc}.{key}: Input should be a valid string"
        ))),
    }
}

fn req_str<'a>(o: &'a Map<String, Value>, key: &str, loc: &str) -> Result<&'a str, CountError> {
    match o.get(key) {
        Some(Value::String(s)) => Ok(s),
        None => Err(invalid(format!("{loc}.{key}: Field required"))),
        Some(_) => Err(invalid(format!(
            "{loc}.{key}: Input should be a valid string"
        ))),
    }
}

fn parse_block<'a>(v: &'a Value, loc: &str) -> Result<Block<'a>, CountError> {
    let o = v
        .as_object()
        .ok_or_else(|| invalid(format!("{loc}: Input should be a valid dictionary")))?;
    let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match kind {
        "text" => Block::Text(req_str(o, "text", loc)?),
        "image" => match o.get("source") {
            None | Some(Value::Null) => Block::EmptyImage,
            Some(Value::String(s)) if s.is_empty() => Block::EmptyImage,
            // A string source is truthy but not a dict: no part.
            Some(Value::String(_)) => Block::EmptyImage,
            Some(Value::Object(src)) => {
                if image_part_from_source(src) {
                    Block::Image
                } else {
                    Block::EmptyImage
                }
            }
            Some(_) => {
                return Err(invalid(format!(
                    "{loc}.source: Input should be a valid dictionary or string"
                )))
            }
        },
        "tool_use" => Block::ToolUse {
            id: req_str(o, "id", loc)?,
            name: req_str(o, "name", loc)?,
            input: match o.get("input") {
                None => None,
                Some(Value::Object(m)) => Some(m),
                Some(_) => {
                    return Err(invalid(format!(
                        "{loc}.input: Input should be a valid dictionary"
                    )))
                }
            },
        },
        "tool_result" => Block::ToolResult {
            tool_use_id: opt_str(o, "tool_use_id", loc)?,
            id: opt_str(o, "id", loc)?,
            content: match o.get("content") {
                None | Some(Value::Null) => ToolResultContent::None,
                Some(Value::String(s)) => ToolResultContent::Text(s),
                Some(Value::Array(items)) => ToolResultContent::Blocks(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, b)| parse_block(b, &format!("{loc}.content.{i}")))
                        .collect::<Result<_, _>>()?,
                ),
                Some(_) => {
                    return Err(invalid(format!(
                        "{loc}.content: Input should be a valid string or list"
                    )))
                }
            },
        },
        "tool_reference" => {
            opt_str(o, "id", loc)?;
            Block::ToolReference {
                name: opt_str(o, "name", loc)?,
                tool_name: opt_str(o, "tool_name", loc)?,
            }
        }
        "search_result" => Block::SearchResult {
            source: match o.get("source") {
                None | Some(Value::Null) => None,
                Some(v @ (Value::String(_) | Value::Object(_))) => Some(v),
                Some(_) => {
                    return Err(invalid(format!(
                        "{loc}.source: Input should be a valid string or dictionary"
                    )))
                }
            },
            title: opt_str(o, "title", loc)?,
            content: match o.get("content") {
                None | Some(Value::Null) => None,
                Some(Value::Array(items)) if items.iter().all(Value::is_object) => Some(items),
                Some(_) => {
                    return Err(invalid(format!(
                        "{loc}.content: Input should be a valid list of dictionaries"
                    )))
                }
            },
        },
        "thinking" => {
            opt_str(o, "signature", loc)?;
            Block::Thinking(req_str(o, "thinking", loc)?)
        }
        "redacted_thinking" => {
            opt_str(o, "data", loc)?;
            Block::RedactedThinking
        }
        other => {
            return Err(invalid(format!(
            "{loc}: Input tag '{other}' found using 'type' does not match any of the expected tags"
        )))
        }
    })
}

/// `_convert_anthropic_image_source_to_openai_part` returns a part.
fn image_part_from_source(src: &Map<String, Value>) -> bool {
    let truthy = |k: &str| src.get(k).is_some_and(py::truthy);
    if src.get("type").and_then(Value::as_str) == Some("base64") {
        // `data = source.get("data", "")`; no data, no part.
        return truthy("data");
    }
    truthy("url")
}

enum Content<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

fn parse_content<'a>(v: Option<&'a Value>, loc: &str) -> Result<Content<'a>, CountError> {
    match v {
        Some(Value::String(s)) => Ok(Content::Text(s)),
        Some(Value::Array(items)) => Ok(Content::Blocks(
            items
                .iter()
                .enumerate()
                .map(|(i, b)| parse_block(b, &format!("{loc}.{i}")))
                .collect::<Result<_, _>>()?,
        )),
        None => Err(invalid(format!("{loc}: Field required"))),
        Some(_) => Err(invalid(format!(
            "{loc}: Input should be a valid string or a list of content blocks"
        ))),
    }
}

struct Message<'a> {
    role: &'a str,
    content: Content<'a>,
}

/// A custom tool (`AnthropicCustomTool`); server tools are `None`.
struct CustomTool<'a> {
    name: &'a str,
    description: Option<&'a str>,
    input_schema: Map<String, Value>,
    strict: bool,
    defer_loading: Option<bool>,
}

/// `_tool_discriminator` and the tool models: a custom tool, or `None` for an
/// Anthropic server tool (skipped by the conversion).
fn parse_tool<'a>(v: &'a Value, loc: &str) -> Result<Option<CustomTool<'a>>, CountError> {
    let o = v
        .as_object()
        .ok_or_else(|| invalid(format!("{loc}: Input should be a valid dictionary")))?;
    let kind = match o.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(invalid(format!(
                "{loc}.type: Input should be a valid string"
            )))
        }
    };
    let dated = |prefix: &str, t: &str| {
        t.strip_prefix(prefix)
            .is_some_and(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_digit()))
    };
    match kind {
        None | Some("") | Some("custom") => {}
        Some(t) => {
            let family = ["web_search_", "computer_", "bash_", "text_editor_"]
                .into_iter()
                .find(|p| t.starts_with(p));
            return match family {
                Some(p) if dated(p, t) => {
                    let names: &[&str] = match p {
                        "web_search_" => &["web_search"],
                        "computer_" => &["computer"],
                        "bash_" => &["bash"],
                        _ => &["str_replace_editor", "str_replace_based_edit_tool"],
                    };
                    let name_ok = match o.get("name") {
                        None if p != "text_editor_" => true,
                        Some(Value::String(n)) => names.contains(&n.as_str()),
                        _ => false,
                    };
                    if name_ok {
                        Ok(None)
                    } else {
                        Err(invalid(format!(
                            "{loc}.name: Input should be {}",
                            names.join(" or ")
                        )))
                    }
                }
                Some(_) => Err(invalid(format!(
                    "{loc}.type: String should match the server tool pattern"
                ))),
                None => Err(invalid(format!("{loc}.type: Input should be 'custom'"))),
            };
        }
    }
    if kind == Some("") {
        return Err(invalid(format!("{loc}.type: Input should be 'custom'")));
    }
    let name = req_str(o, "name", loc)?;
    let description = opt_str(o, "description", loc)?;
    let mut input_schema = match o.get("input_schema") {
        Some(Value::Object(m)) => m.clone(),
        None => return Err(invalid(format!("{loc}.input_schema: Field required"))),
        Some(_) => {
            return Err(invalid(format!(
                "{loc}.input_schema: Input should be a valid dictionary"
            )))
        }
    };
    // `_ensure_object_schema`.
    if !input_schema.contains_key("type") {
        input_schema.insert("type".into(), Value::String("object".into()));
    }
    let strict = match o.get("strict") {
        None => false,
        Some(v) => py::lax_bool(v)
            .ok_or_else(|| invalid(format!("{loc}.strict: Input should be a valid boolean")))?,
    };
    let defer_loading = match o.get("defer_loading") {
        None | Some(Value::Null) => None,
        Some(v) => Some(py::lax_bool(v).ok_or_else(|| {
            invalid(format!(
                "{loc}.defer_loading: Input should be a valid boolean"
            ))
        })?),
    };
    Ok(Some(CustomTool {
        name,
        description,
        input_schema,
        strict,
        defer_loading,
    }))
}

/// Converts an Anthropic Messages body. `inline_system` is SGLang's
/// `supports_inline_system`; without it, `role: "system"` messages are merged
/// into the leading system message.
pub fn convert(body: &Value, inline_system: bool) -> Result<Converted, CountError> {
    let request = anthropic_messages_request(body)?;
    convert_to_chat_completion_request(&request, !inline_system)
}

/// An `AnthropicMessagesRequest`, as far as the conversion reads it.
struct Request<'a> {
    model: Option<&'a Value>,
    messages: Vec<Message<'a>>,
    system: Option<Content<'a>>,
    /// `thinking.type`.
    thinking: Option<&'a str>,
    /// `tool_choice.type` and `tool_choice.name`.
    tool_choice: Option<(&'a str, Option<&'a str>)>,
    /// The custom tools; server tools are dropped here.
    tools: Vec<CustomTool<'a>>,
    /// `output_config.effort`.
    effort: Option<&'a str>,
}

/// `AnthropicMessagesRequest` validation (`anthropic/protocol.py`), field by
/// field in the order the errors are reported.
fn anthropic_messages_request(body: &Value) -> Result<Request<'_>, CountError> {
    let top = body
        .as_object()
        .ok_or_else(|| invalid("Input should be a valid dictionary"))?;
    match top.get("model") {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(Value::String(_)) => {
            return Err(invalid_param(
                "model: Value error, Model is required",
                "model",
            ))
        }
        _ => {
            return Err(invalid_param(
                "model: Input should be a valid string",
                "model",
            ))
        }
    }
    let raw_messages = match top.get("messages") {
        Some(Value::Array(m)) => m,
        None => return Err(invalid_param("messages: Field required", "messages")),
        Some(_) => {
            return Err(invalid_param(
                "messages: Input should be a valid list",
                "messages",
            ))
        }
    };
    let messages = raw_messages
        .iter()
        .enumerate()
        .map(|(i, m)| anthropic_message(m, &format!("messages.{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let system = match top.get("system") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_content(Some(v), "system")?),
    };
    let thinking = match top.get("thinking") {
        None | Some(Value::Null) => None,
        Some(Value::Object(t)) => Some(parse_thinking(t)?),
        Some(_) => {
            return Err(invalid_param(
                "thinking: Input should be a valid dictionary",
                "thinking",
            ))
        }
    };
    let tool_choice = match top.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_tool_choice(v)?),
    };
    let tools: Vec<CustomTool<'_>> = match top.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, t) in items.iter().enumerate() {
                if let Some(t) = parse_tool(t, &format!("tools.{i}"))? {
                    out.push(t);
                }
            }
            out
        }
        Some(_) => {
            return Err(invalid_param(
                "tools: Input should be a valid list",
                "tools",
            ))
        }
    };
    let effort = match top.get("output_config") {
        None | Some(Value::Null) => None,
        Some(v) => parse_output_config(v)?,
    };
    Ok(Request {
        model: top.get("model"),
        messages,
        system,
        thinking,
        tool_choice,
        tools,
        effort,
    })
}

/// `AnthropicMessage`: the role and the content.
fn anthropic_message<'a>(m: &'a Value, loc: &str) -> Result<Message<'a>, CountError> {
    let o = m.as_object().ok_or_else(|| {
        invalid_param(
            format!("{loc}: Input should be a valid dictionary"),
            "messages",
        )
    })?;
    let role = match o.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant" | "system")) => r,
        _ => {
            return Err(invalid_param(
                format!("{loc}.role: Input should be 'user', 'assistant' or 'system'"),
                "messages",
            ))
        }
    };
    let content = parse_content(o.get("content"), &format!("{loc}.content"))?;
    Ok(Message { role, content })
}

/// `AnthropicToolChoice`: the type and the name.
fn parse_tool_choice(v: &Value) -> Result<(&str, Option<&str>), CountError> {
    let Value::Object(tc) = v else {
        return Err(invalid_param(
            "tool_choice: Input should be a valid dictionary",
            "tool_choice",
        ));
    };
    let kind = match tc.get("type").and_then(Value::as_str) {
        Some(k @ ("auto" | "any" | "tool" | "none")) => k,
        _ => {
            return Err(invalid_param(
                "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'",
                "tool_choice",
            ))
        }
    };
    Ok((kind, opt_str(tc, "name", "tool_choice")?))
}

/// `AnthropicOutputConfig`: the effort.
fn parse_output_config(v: &Value) -> Result<Option<&str>, CountError> {
    let Value::Object(oc) = v else {
        return Err(invalid_param(
            "output_config: Input should be a valid dictionary",
            "output_config",
        ));
    };
    match oc.get("effort") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(e))
            if ["minimal", "low", "medium", "high", "xhigh", "max"].contains(&e.as_str()) =>
        {
            Ok(Some(e.as_str()))
        }
        Some(_) => Err(invalid_param(
            "output_config.effort: Input should be 'minimal', 'low', 'medium', 'high', 'xhigh' or 'max'",
            "output_config",
        )),
    }
}

/// `AnthropicServing._convert_to_chat_completion_request`: system, messages,
/// thinking, tools and tool choice, in its order.
fn convert_to_chat_completion_request(
    request: &Request<'_>,
    merge_inline_system: bool,
) -> Result<Converted, CountError> {
    let mut out: Vec<Value> = Vec::new();
    convert_system(request, merge_inline_system, &mut out);

    // `# Convert messages`
    for m in &request.messages {
        if m.role == "system" && merge_inline_system {
            continue;
        }
        convert_message(m, &mut out)?;
    }

    apply_reasoning_enabled(request.thinking)?;
    let chat_tools = convert_tools(&request.tools);
    let chat_tool_choice = convert_tool_choice(request.tool_choice, &request.tools, &chat_tools)?;

    let mut chat = Map::new();
    chat.insert("messages".into(), Value::Array(out));
    chat.insert(
        "model".into(),
        request.model.cloned().unwrap_or(Value::Null),
    );
    if !chat_tools.is_empty() {
        chat.insert("tools".into(), Value::Array(chat_tools));
    }
    chat.insert("tool_choice".into(), chat_tool_choice);
    Ok(Converted {
        body: Value::Object(chat),
        options: Options {
            // `output_config.effort`, assigned after construction (`xhigh` → `max`).
            assigned_reasoning_effort: request
                .effort
                .map(|e| Value::String(if e == "xhigh" { "max" } else { e }.into())),
            ..Options::default()
        },
    })
}

/// The `system_parts` block of `_convert_to_chat_completion_request`: the
/// top-level system, then (when merging) the `role: "system"` messages.
fn convert_system(request: &Request<'_>, merge_inline_system: bool, out: &mut Vec<Value>) {
    let mut system_parts: Vec<String> = Vec::new();
    match &request.system {
        Some(Content::Text(s)) if !py::strip(s).is_empty() => {
            system_parts.push((*s).to_owned());
        }
        Some(Content::Blocks(blocks)) => {
            for b in blocks {
                if let Block::Text(t) = b {
                    if !t.is_empty() {
                        system_parts.push((*t).to_owned());
                    }
                }
            }
        }
        Some(Content::Text(_)) | None => {}
    }
    if merge_inline_system {
        for m in request.messages.iter().filter(|m| m.role == "system") {
            if let Some(text) = extract_system_text(&m.content) {
                system_parts.push(text);
            }
        }
    }
    if !system_parts.is_empty() {
        out.push(json!({"role": "system", "content": system_parts.join("\n")}));
    }
}

/// One turn of `_convert_to_chat_completion_request`'s `# Convert messages`
/// loop.
fn convert_message(m: &Message<'_>, out: &mut Vec<Value>) -> Result<(), CountError> {
    let blocks = match &m.content {
        Content::Text(s) => {
            out.push(json!({"role": m.role, "content": s}));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let mut msg = Map::new();
    msg.insert("role".into(), Value::String(m.role.into()));
    let mut parts: Vec<Value> = Vec::new();
    let mut tool_calls: Vec<Value> = Vec::new();
    if m.role == "assistant" {
        convert_assistant_thinking_blocks(blocks)?;
    }
    for b in blocks {
        match b {
            Block::Thinking(_) | Block::RedactedThinking | Block::EmptyImage => {}
            Block::Text(t) => parts.push(json!({"type": "text", "text": t})),
            Block::Image => return Err(image_refusal()),
            Block::SearchResult { .. } => {
                let text = search_result_text(b)?;
                if !text.is_empty() {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            Block::ToolUse { id, name, input } => {
                if m.role == "system" {
                    return Err(unmeasurable(
                        "tool_use blocks in a system message are refused: SGLang renders their \
                         arguments as a Python json.dumps string the guard does not reproduce",
                    ));
                }
                if id.is_empty() {
                    return Err(unmeasurable(
                        "a tool_use block with an empty id is refused: SGLang replaces it with a \
                         random id",
                    ));
                }
                // `json.dumps(block.input or {})`, which the chat path parses back.
                let arguments = Value::Object(input.cloned().unwrap_or_default());
                tool_calls.push(json!({
                    "id": id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }));
            }
            Block::ToolReference { .. } => {}
            Block::ToolResult {
                tool_use_id,
                id,
                content,
            } => {
                let (contents, text) = tool_result_content(content)?;
                let call_id = [*tool_use_id, *id]
                    .into_iter()
                    .flatten()
                    .find(|s| !s.is_empty())
                    .unwrap_or("");
                if m.role == "user" {
                    emit_user_message(out, &mut parts);
                    for c in contents {
                        out.push(json!({"role": "tool", "tool_call_id": call_id, "content": c}));
                    }
                } else {
                    parts.push(json!({"type": "text", "text": format!("Tool result: {text}")}));
                }
            }
        }
    }
    if !tool_calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(tool_calls.clone()));
    }
    if !parts.is_empty() {
        let content = match parts.as_slice() {
            [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
                only.get("text").cloned().unwrap_or(Value::Null)
            }
            _ => Value::Array(parts),
        };
        msg.insert("content".into(), content);
        out.push(Value::Object(msg));
    } else if !tool_calls.is_empty() {
        out.push(Value::Object(msg));
    } else if m.role == "user" {
        // Entirely tool results: the tool messages are already out.
    } else {
        msg.insert("content".into(), Value::String(String::new()));
        out.push(Value::Object(msg));
    }
    Ok(())
}

/// `_convert_assistant_thinking_blocks`, as far as the guard can follow it:
/// redacted thinking is SGLang's own error, and non-empty thinking is refused
/// (its fate depends on the server's reasoning parser).
fn convert_assistant_thinking_blocks(blocks: &[Block<'_>]) -> Result<(), CountError> {
    if blocks.iter().any(|b| matches!(b, Block::RedactedThinking)) {
        return Err(invalid_param(
            "Anthropic redacted_thinking history is not supported",
            "messages",
        ));
    }
    if blocks
        .iter()
        .any(|b| matches!(b, Block::Thinking(t) if !t.is_empty()))
    {
        return Err(unmeasurable(
            "assistant thinking blocks are refused: SGLang drops them or wraps them into the \
             prompt depending on its --reasoning-parser, which the guard cannot see",
        ));
    }
    Ok(())
}

/// `apply_reasoning_enabled` without a reasoning parser.
fn apply_reasoning_enabled(thinking: Option<&str>) -> Result<(), CountError> {
    if let Some(t) = thinking {
        if t != "disabled" {
            return Err(invalid_param(
                "Anthropic thinking is not supported for models without a reasoning parser",
                "thinking",
            ));
        }
    }
    Ok(())
}

/// The `# Convert tools` block of `_convert_to_chat_completion_request`:
/// server tools were skipped; each custom tool becomes `Tool(type="function",
/// defer_loading=..., function={name, description or "", parameters, strict})`.
fn convert_tools(tools: &[CustomTool<'_>]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description.unwrap_or(""),
                    "parameters": Value::Object(t.input_schema.clone()),
                    "strict": t.strict,
                },
                "defer_loading": t.defer_loading,
            })
        })
        .collect()
}

/// The `# Convert tool choice` block of `_convert_to_chat_completion_request`.
fn convert_tool_choice(
    tool_choice: Option<(&str, Option<&str>)>,
    tools: &[CustomTool<'_>],
    chat_tools: &[Value],
) -> Result<Value, CountError> {
    Ok(match tool_choice {
        Some(("none", _)) => json!("none"),
        Some((kind, name)) if !chat_tools.is_empty() => match kind {
            "auto" => json!("auto"),
            "any" => json!("required"),
            _ => {
                if !tools.iter().any(|t| Some(t.name) == name) {
                    return Err(invalid_param(
                        format!(
                            "tool_choice references tool {} but it is not in the forwarded tools list \
                             (server-side Anthropic tools cannot be selected)",
                            // `{tool_name!r}`
                            name.map_or("None".to_owned(), |n| py::repr(&Value::String(n.into())))
                        ),
                        "tool_choice",
                    ));
                }
                json!({"type": "function", "function": {"name": name}})
            }
        },
        Some((kind @ ("any" | "tool"), _)) => {
            return Err(invalid_param(
                format!(
                    "tool_choice='{kind}' requires at least one custom tool; all supplied tools were \
                     server-side Anthropic built-ins which the OpenAI-compatible backend cannot invoke"
                ),
                "tool_choice",
            ))
        }
        // `auto` with no tools keeps the default.
        Some(_) => json!("none"),
        None if !chat_tools.is_empty() => json!("auto"),
        None => json!("none"),
    })
}

/// `AnthropicThinkingParam` with its shape rules; returns the type.
fn parse_thinking(t: &Map<String, Value>) -> Result<&str, CountError> {
    let kind = match t.get("type").and_then(Value::as_str) {
        Some(k @ ("enabled" | "disabled" | "adaptive")) => k,
        _ => {
            return Err(invalid_param(
                "thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'",
                "thinking",
            ))
        }
    };
    let budget = match t.get("budget_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(py::lax_int(v).ok_or_else(|| {
            invalid_param(
                "thinking.budget_tokens: Input should be a valid integer",
                "thinking",
            )
        })?),
    };
    let display = match t.get("display") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if d == "summarized" || d == "omitted" => Some(d),
        Some(_) => {
            return Err(invalid_param(
                "thinking.display: Input should be 'summarized' or 'omitted'",
                "thinking",
            ))
        }
    };
    let bad = |m: &str| {
        Err(invalid_param(
            format!("thinking: Value error, {m}"),
            "thinking",
        ))
    };
    match (kind, budget, display) {
        ("enabled", None, _) => {
            bad("thinking.budget_tokens is required when thinking.type is 'enabled'")
        }
        ("enabled", Some(b), _) if b < 1024 => {
            bad(&format!("thinking.budget_tokens must be >= 1024 (got {b})"))
        }
        ("disabled", Some(_), _) => {
            bad("thinking.budget_tokens is not allowed when thinking.type is 'disabled'")
        }
        ("disabled", _, Some(_)) => {
            bad("thinking.display is not allowed when thinking.type is 'disabled'")
        }
        ("adaptive", Some(_), _) => {
            bad("thinking.budget_tokens is not allowed when thinking.type is 'adaptive'")
        }
        _ => Ok(kind),
    }
}

fn image_refusal() -> CountError {
    unmeasurable(
        "image blocks are refused: their token length is set by the model's processor, not by the body",
    )
}

/// `_emit_user_message`: pending parts become a user message before a tool result.
fn emit_user_message(out: &mut Vec<Value>, parts: &mut Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    let content = match parts.as_slice() {
        [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
            only.get("text").cloned().unwrap_or(Value::Null)
        }
        _ => Value::Array(std::mem::take(parts)),
    };
    parts.clear();
    out.push(json!({"role": "user", "content": content}));
}

/// `_extract_system_text`: stripped text blocks joined with newlines, or `None`.
fn extract_system_text(content: &Content<'_>) -> Option<String> {
    match content {
        Content::Text(s) => {
            let t = py::strip(s);
            (!t.is_empty()).then(|| t.to_owned())
        }
        Content::Blocks(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) => Some(py::strip(t)),
                    _ => None,
                })
                .filter(|t| !t.is_empty())
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
    }
}

/// `_text_from_search_result`.
fn search_result_text(b: &Block<'_>) -> Result<String, CountError> {
    let Block::SearchResult {
        source,
        title,
        content,
    } = b
    else {
        return Ok(String::new());
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(t) = title.filter(|t| !t.is_empty()) {
        parts.push(format!("Title: {t}"));
    }
    match source {
        Some(Value::Object(src)) => {
            let text = match src.get("url") {
                Some(v) if py::truthy(v) => Some(v),
                _ => src.get("text"),
            };
            match text {
                Some(Value::String(s)) if !s.is_empty() => parts.push(format!("Source: {s}")),
                Some(v) if py::truthy(v) => {
                    return Err(invalid_param(
                        "search_result source url/text must be a string",
                        "messages",
                    ))
                }
                _ => {}
            }
        }
        Some(Value::String(s)) if !s.is_empty() => parts.push(format!("Source: {s}")),
        _ => {}
    }
    let mut texts: Vec<&str> = Vec::new();
    for p in content.iter().flat_map(|c| c.iter()) {
        if p.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        match p.get("text") {
            Some(Value::String(s)) if !s.is_empty() => texts.push(s),
            Some(v) if py::truthy(v) => {
                return Err(invalid_param(
                    "search_result content text must be a string",
                    "messages",
                ))
            }
            _ => {}
        }
    }
    if !texts.is_empty() {
        parts.push(format!("Content: {}", texts.join("\n")));
    }
    Ok(parts.join("\n"))
}

/// `_convert_tool_result_content`: the tool messages' contents (runs of tool
/// references kept apart from other parts) and the joined text.
fn tool_result_content(
    content: &ToolResultContent<'_>,
) -> Result<(Vec<Value>, String), CountError> {
    let blocks = match content {
        ToolResultContent::Blocks(b) => b,
        ToolResultContent::Text(s) => return Ok((vec![json!(s)], (*s).to_owned())),
        ToolResultContent::None => return Ok((vec![json!("")], String::new())),
    };
    let mut parts: Vec<Value> = Vec::new();
    let mut texts: Vec<String> = Vec::new();
    for b in blocks {
        match b {
            Block::Text(t) if !t.is_empty() => {
                texts.push((*t).to_owned());
                parts.push(json!({"type": "text", "text": t}));
            }
            Block::Image => return Err(image_refusal()),
            Block::ToolReference { name, tool_name } => {
                if let Some(n) = [*tool_name, *name]
                    .into_iter()
                    .flatten()
                    .find(|n| !n.is_empty())
                {
                    parts.push(json!({"type": "tool_reference", "name": n}));
                }
            }
            Block::SearchResult { .. } => {
                let text = search_result_text(b)?;
                if !text.is_empty() {
                    texts.push(text.clone());
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            _ => {}
        }
    }
    let text = texts.join("\n");
    let mut groups: Vec<Vec<Value>> = Vec::new();
    for p in parts {
        let is_ref = p.get("type").and_then(Value::as_str) == Some("tool_reference");
        let new_group = groups.last().is_none_or(|g| {
            (g[0].get("type").and_then(Value::as_str) == Some("tool_reference")) != is_ref
        });
        if new_group {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(p);
        }
    }
    let mut contents: Vec<Value> = groups
        .into_iter()
        .map(|g| match g.as_slice() {
            [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
                only.get("text").cloned().unwrap_or(Value::Null)
            }
            _ => Value::Array(g),
        })
        .collect();
    if contents.is_empty() {
        contents.push(json!(""));
    }
    Ok((contents, text))
}

#[cfg(test)]
mod tool_choice_tests {
    use super::*;

    /// SGLang raises f"tool_choice references tool {tool_name!r} but ...";
    /// python3 -c 'print(repr("it\x27s"))' prints "it's".
    #[test]
    fn an_unknown_tool_choice_is_named_by_repr() {
        let chat_tools = [json!({})];
        match convert_tool_choice(Some(("tool", Some("it's"))), &[], &chat_tools) {
            Err(CountError::Invalid { message, .. }) => assert!(
                message.starts_with(r#"tool_choice references tool "it's" but it is not"#),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }
}
