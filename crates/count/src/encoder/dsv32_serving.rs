//! How each SGLang release hands a chat request to `encoding_dsv32`: the
//! glue in `serving_chat.py` (`OpenAIServingChat._apply_jinja_template`, the
//! `use_dpsk_v32_encoding` branch up to 0.5.11, the `chat_encoding_spec`
//! branch from 0.5.12), release by release from 0.5.6, the first that ships
//! and calls the encoder. [`encode`] runs the release's glue and its
//! `encode_messages` ([`super::dsv32::Dsv32Version`]).
//!
//! Which releases pick the encoder (the caller's business, see
//! [`Dsv32Serving::selected`]):
//! * 0.5.6 - 0.5.11 (`_use_dpsk_v32_encoding`): the first architecture
//!   contains `DeepseekV3` (so `DeepseekV32ForCausalLM` too) and the tokenizer
//!   has no chat template; `--tool-call-parser` plays no part;
//! * 0.5.12 - 0.5.15 (`_resolve_chat_encoding_spec`), 0.5.16 and later
//!   (`chat_encoding.resolve_chat_encoding_spec`): `--tool-call-parser
//!   deepseekv32` first (a chat template notwithstanding), then the same
//!   architecture rule (after the DeepSeek-V4 ones).
//!
//! What changes between releases (each checked against the release's own
//! Python by `testdata/gen_dsv32_releases.py`):
//!
//! | releases | glue |
//! |---|---|
//! | 0.5.6.x | raw `model_dump()`s (content `None` and lists as they are), a first system message `"You are a helpful Assistant."`, `drop_thinking=False`, a trailing assistant message stays one |
//! | 0.5.7 | an empty first system message, `drop_thinking` left at `True` |
//! | 0.5.8 | `_handle_last_assistant_message`: a trailing assistant text is re-sent as a user message, or cut off as the `continue_final_message` prefix |
//! | 0.5.9 - 0.5.11 | `None` content is `""`, list content is its text parts joined by `" "` |
//! | 0.5.12 | `thinking` defaults to `SGLANG_DEFAULT_THINKING` |
//! | 0.5.13 | `thinking_mode` is the `ThinkingMode` enum (error text only) |
//! | 0.5.14 - 0.5.17 | assistant tool-call argument strings parsed first (`orjson`, strict: not JSON or not an object is a `ValueError`) |
//! | 0.5.18 - 0.5.21 | the body is read by `orjson` (`ORJSONRequest`), not `json` |
//! | 0.5.22 and later | request tools reach the encoder only when they reach the template (not under `tool_choice: "none"`) |
//!
//! Every release up to 0.5.21 gives the encoder every request tool whenever
//! the request has tools, whatever `tool_choice` says.
//!
//! Numbers: up to 0.5.17 SGLang reads the body with Python's `json`, which
//! keeps an integer beyond 64 bits exact (and `json.dumps` prints it so); the
//! guard's parsed body holds such a literal as a float, which cannot be told
//! from a float literal. Before 0.5.18 a float beyond the 64-bit integers in
//! a message or tool is therefore refused ([`Dsv32Error`] of kind
//! `Unmodelled`). From 0.5.18 orjson reads it as the same float.

use serde_json::{Map, Value};

use super::dsv32::{self, Dsv32Error, Dsv32Version, Flavor, ThinkingMode};
use crate::py;

/// A release's glue around `encode_messages`, one value per distinct glue
/// (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dsv32Serving {
    /// 0.5.6 - 0.5.6.post2.
    V0506,
    /// 0.5.7.
    V0507,
    /// 0.5.8 - 0.5.8.post1.
    V0508,
    /// 0.5.9 - 0.5.11.
    V0509,
    /// 0.5.12 - 0.5.12.post1.
    V0512,
    /// 0.5.13 - 0.5.13.post1.
    V0513,
    /// 0.5.14 - 0.5.17.
    V0514,
    /// 0.5.18 - 0.5.21.
    V0518,
    /// 0.5.22 and later (0.5.23, the reference, included).
    V0522,
}

impl Dsv32Serving {
    /// The glue of release `major.minor.patch` (post releases share their
    /// release's), or `None` before 0.5.6, which has no DeepSeek-V3.2 encoder
    /// (a model without a chat template then has no chat at all).
    pub fn of_release(version: (u32, u32, u32)) -> Option<Dsv32Serving> {
        use Dsv32Serving::*;
        Some(match version {
            v if v < (0, 5, 6) => return None,
            v if v < (0, 5, 7) => V0506,
            v if v < (0, 5, 8) => V0507,
            v if v < (0, 5, 9) => V0508,
            v if v < (0, 5, 12) => V0509,
            v if v < (0, 5, 13) => V0512,
            v if v < (0, 5, 14) => V0513,
            v if v < (0, 5, 18) => V0514,
            v if v < (0, 5, 22) => V0518,
            _ => V0522,
        })
    }

    /// The encoder file of the release, and how its `encode_messages` is called.
    pub fn flavor(self) -> Flavor {
        use Dsv32Serving::*;
        let version = match self {
            V0506 => Dsv32Version::V0506,
            V0507 | V0508 | V0509 | V0512 | V0513 => Dsv32Version::V0507,
            V0514 | V0518 | V0522 => Dsv32Version::V0514,
        };
        Flavor {
            version,
            mode_is_enum: self >= V0513,
        }
    }

    /// Whether the release encodes this model's chat with `encoding_dsv32`:
    /// `tool_call_parser` as set, the first architecture, whether the
    /// tokenizer has a chat template. (`None` for the rules of 0.5.12 and
    /// later, which [`super::encoding_spec`] states: the caller asks that.)
    pub fn selected(
        self,
        tool_call_parser: Option<&str>,
        first_architecture: &str,
        has_chat_template: bool,
    ) -> Option<bool> {
        match self {
            Dsv32Serving::V0506
            | Dsv32Serving::V0507
            | Dsv32Serving::V0508
            | Dsv32Serving::V0509 => {
                let _ = tool_call_parser;
                Some(first_architecture.contains("DeepseekV3") && !has_chat_template)
            }
            Dsv32Serving::V0512
            | Dsv32Serving::V0513
            | Dsv32Serving::V0514
            | Dsv32Serving::V0518
            | Dsv32Serving::V0522 => None,
        }
    }

    /// Whether SGLang read the body with Python's `json` (exact big
    /// integers), not orjson.
    fn reads_body_with_json(self) -> bool {
        self < Dsv32Serving::V0518
    }
}

/// What the release's glue starts from.
#[derive(Debug, Clone, Copy)]
pub struct Dsv32Request<'a> {
    /// `[msg.model_dump() for msg in request.messages]` as the release's
    /// models dump them: every field of the message's model, `None` as null;
    /// list content as its parts' dumps; tool-call `arguments` as the client
    /// sent them (a string or an object).
    pub messages: &'a [Value],
    /// `[tool.model_dump() for tool in request.tools]` as the release dumps
    /// them, or `None` when the request has no tools (or an empty list).
    pub tools: Option<&'a [Value]>,
    /// Whether the request's tools reach the template (`tools` of
    /// `_process_messages` is non-empty: tools set, `tool_choice` not
    /// `"none"`, a named choice matching one). Read from 0.5.22 on.
    pub tools_reach_template: bool,
    /// `request.chat_template_kwargs.get("thinking")` as the release sees it
    /// (server defaults merged in where it merges them); `None` when absent.
    pub thinking: Option<&'a Value>,
    /// `SGLANG_DEFAULT_THINKING`, the default of `thinking` from 0.5.12.
    pub default_thinking: bool,
    /// `request.continue_final_message`.
    pub continue_final_message: bool,
}

/// What the release tokenizes: `tokenizer.encode(text)` (special tokens
/// added as the tokenizer adds them), then, when set, the prefix's own ids
/// without a leading BOS (`_append_assistant_prefix_to_prompt_ids`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsv32Prompt {
    pub text: String,
    pub assistant_prefix: Option<String>,
    /// The thinking mode the encoder ran in.
    pub thinking: ThinkingMode,
}

fn error(kind: &str, message: impl std::fmt::Display) -> Dsv32Error {
    Dsv32Error(format!("{kind}: {message}"))
}

/// The release's glue, then its `encode_messages`.
pub fn encode(
    serving: Dsv32Serving,
    request: &Dsv32Request<'_>,
) -> Result<Dsv32Prompt, Dsv32Error> {
    use Dsv32Serving::*;
    if serving.reads_body_with_json() {
        let tools = request.tools.unwrap_or_default();
        if request.messages.iter().chain(tools).any(has_big_float) {
            return Err(error(
                "Unmodelled",
                "a number beyond the 64-bit integers: this release reads the body with Python's json, which \
                 keeps an integer literal exact, and the guard cannot tell such a literal from a float",
            ));
        }
    }
    // `(request.chat_template_kwargs or {}).get("thinking"[, default])`.
    let thinking = match (request.thinking, serving >= V0512) {
        (Some(v), _) => py::truthy(v),
        (None, true) => request.default_thinking,
        (None, false) => false,
    };
    let mode = if thinking {
        ThinkingMode::Thinking
    } else {
        ThinkingMode::Chat
    };
    let mut messages: Vec<Value> = request.messages.to_vec();
    if serving >= V0514 {
        for message in &mut messages {
            normalize_assistant_tool_call_arguments(message)?;
        }
    }
    if serving >= V0512 {
        // dsv4/dsv32 are text-only: a parts list is flattened first
        // (`process_content_for_template_format(msg, "string", ...)`).
        for message in &mut messages {
            if matches!(message.get("content"), Some(Value::Array(_))) {
                *message = flatten_string_format(message);
            }
        }
    }
    if serving >= V0509 {
        for message in &mut messages {
            if let Value::Object(m) = message {
                if m.get("content").is_none_or(Value::is_null) {
                    m.insert("content".into(), Value::String(String::new()));
                }
            }
            // `process_content_for_template_format(..., use_dpsk_v32_encoding=True)`
            // then `msg.update(...)`: a list content becomes its text parts
            // joined (0.5.9 - 0.5.11; later ones were flattened above), the
            // other keys stay.
            if let Some(Value::Array(parts)) = message.get("content") {
                let joined = text_parts(parts).join(" ");
                message["content"] = Value::String(joined);
            }
        }
    }
    let assistant_prefix = match serving {
        V0506 | V0507 => None,
        _ => handle_last_assistant_message(&mut messages, request.continue_final_message),
    };
    // `if messages[0]["role"] != "system"`.
    let first = messages
        .first()
        .ok_or_else(|| error("IndexError", "list index out of range"))?;
    let first_role = match first {
        Value::Object(m) => m.get("role").ok_or_else(|| error("KeyError", "'role'"))?,
        other => {
            return Err(error(
                "TypeError",
                format!("'{}' object is not subscriptable", py::type_name(other)),
            ))
        }
    };
    if first_role.as_str() != Some("system") {
        let content = match serving {
            V0506 => "You are a helpful Assistant.",
            _ => "",
        };
        messages.insert(0, serde_json::json!({"role": "system", "content": content}));
    }
    let tools = request.tools.filter(|t| !t.is_empty());
    let tools = match serving {
        V0522 => tools.filter(|_| request.tools_reach_template),
        _ => tools,
    };
    if let Some(tools) = tools {
        messages[0]["tools"] = Value::Array(tools.to_vec());
    }
    let drop_thinking = serving != V0506;
    let text =
        dsv32::encode_messages_as(serving.flavor(), &messages, mode, None, drop_thinking, true)?;
    Ok(Dsv32Prompt {
        text,
        assistant_prefix,
        thinking: mode,
    })
}

/// `[msg.model_dump() for msg in request.messages]` as release `version`
/// dumps them, from the messages of a request body the guard has validated:
/// the message model's fields in order (`None` as null; `phase` from 0.5.20,
/// `prefix` from 0.5.23), generic roles lowercased as its validator does,
/// unknown keys dropped, tool calls as `ToolCall.model_dump()`, text parts
/// as `{"type": "text", "text": ...}`. Other parts are kept as sent: only
/// their `type` (and an image's URL) reaches a prompt, except on 0.5.6 -
/// 0.5.8, whose encoder prints a list content's `repr` (refused there,
/// `Unmodelled`, unless every part is text). A message's own `tools` are
/// refused before 0.5.17, where the model validates them as flat
/// `FunctionTool`s (0.5.6 drops them) and the encoders then fail or differ.
pub fn message_dumps(
    version: (u32, u32, u32),
    messages: &[Value],
) -> Result<Vec<Value>, Dsv32Error> {
    const ROLES: [&str; 7] = [
        "system",
        "assistant",
        "tool",
        "function",
        "developer",
        "latest_reminder",
        "root",
    ];
    let mut fields = vec!["role", "content", "tool_call_id", "name"];
    if version >= (0, 5, 20) {
        fields.push("phase");
    }
    fields.extend(["reasoning_content", "tool_calls", "tools"]);
    if version >= (0, 5, 23) {
        fields.push("prefix");
    }
    let repr_lists = version < (0, 5, 9);
    messages
        .iter()
        .map(|m| {
            let Value::Object(m) = m else {
                return Err(error("Unmodelled", "a message that is not an object"));
            };
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            let lower = role.to_lowercase();
            let content = match m.get("content") {
                Some(Value::Array(parts)) => {
                    let all_text = parts.iter().all(|p| p.get("type").and_then(Value::as_str) == Some("text"));
                    if repr_lists && !all_text {
                        return Err(error(
                            "Unmodelled",
                            "a non-text content part before 0.5.9, whose DeepSeek-V3.2 encoder prints the parts' model dumps",
                        ));
                    }
                    Value::Array(parts.iter().map(part_dump).collect())
                }
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let mut out = Map::new();
            if role == "user" {
                out.insert("role".into(), Value::String("user".into()));
                out.insert("content".into(), content);
                return Ok(Value::Object(out));
            }
            if !ROLES.contains(&lower.as_str()) {
                return Err(error("Unmodelled", format!("role {role:?}")));
            }
            if version < (0, 5, 17) && m.get("tools").is_some_and(|t| !t.is_null()) {
                return Err(error(
                    "Unmodelled",
                    "a message's own tools before 0.5.17 (validated as flat function tools, or dropped on 0.5.6)",
                ));
            }
            for field in &fields {
                let v = match *field {
                    "role" => Value::String(lower.clone()),
                    "content" => content.clone(),
                    "tool_calls" => match m.get("tool_calls") {
                        Some(Value::Array(calls)) => Value::Array(calls.iter().map(tool_call_dump).collect()),
                        Some(v) => v.clone(),
                        None => Value::Null,
                    },
                    "tools" => match m.get("tools") {
                        Some(Value::Array(tools)) => Value::Array(tool_dumps(version, tools)),
                        Some(v) => v.clone(),
                        None => Value::Null,
                    },
                    f => m.get(f).cloned().unwrap_or(Value::Null),
                };
                out.insert((*field).into(), v);
            }
            Ok(Value::Object(out))
        })
        .collect()
}

/// A content part's dump: a text part's model fields; other parts as sent.
fn part_dump(part: &Value) -> Value {
    match part.get("type").and_then(Value::as_str) {
        Some("text") => {
            serde_json::json!({"type": "text", "text": part.get("text").cloned().unwrap_or(Value::Null)})
        }
        _ => part.clone(),
    }
}

/// `ToolCall.model_dump()`.
fn tool_call_dump(call: &Value) -> Value {
    let get = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let function = call.get("function").cloned().unwrap_or(Value::Null);
    serde_json::json!({
        "id": get(call, "id"),
        "index": get(call, "index"),
        "type": call.get("type").cloned().unwrap_or(Value::String("function".into())),
        "function": {"name": get(&function, "name"), "arguments": get(&function, "arguments")},
    })
}

/// `[tool.model_dump() for tool in request.tools]` as release `version` dumps
/// them: `Function` as `description, name, parameters, strict` (`strict`
/// false when unset) and `defer_loading` when set (0.5.11+, also taken from
/// the tool's own), the tool's `defer_loading` (0.5.11+); from 0.5.23 the
/// function keeps the client's keys, in its order.
pub fn tool_dumps(version: (u32, u32, u32), tools: &[Value]) -> Vec<Value> {
    let has_defer = version >= (0, 5, 11);
    tools
        .iter()
        .map(|tool| {
            let get = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
            let function = get(tool, "function");
            let tool_defer = get(tool, "defer_loading");
            let mut defer = get(&function, "defer_loading");
            if defer.is_null() {
                defer = tool_defer.clone();
            }
            let mut f = Map::new();
            f.insert("description".into(), get(&function, "description"));
            f.insert("name".into(), get(&function, "name"));
            f.insert("parameters".into(), get(&function, "parameters"));
            let strict = get(&function, "strict");
            if version >= (0, 5, 23) {
                if !strict.is_null() {
                    f.insert("strict".into(), strict);
                }
            } else {
                f.insert(
                    "strict".into(),
                    if strict.is_null() {
                        Value::Bool(false)
                    } else {
                        strict
                    },
                );
            }
            if has_defer && !defer.is_null() {
                f.insert("defer_loading".into(), defer);
            }
            if version >= (0, 5, 23) {
                // The client's order first, the rest after.
                let order: Vec<String> = function
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                let mut ordered = Map::new();
                for k in &order {
                    if let Some(v) = f.get(k) {
                        ordered.insert(k.clone(), v.clone());
                    }
                }
                for (k, v) in &f {
                    if !ordered.contains_key(k) {
                        ordered.insert(k.clone(), v.clone());
                    }
                }
                f = ordered;
            }
            let mut out = Map::new();
            out.insert(
                "type".into(),
                tool.get("type")
                    .cloned()
                    .unwrap_or(Value::String("function".into())),
            );
            out.insert("function".into(), Value::Object(f));
            if has_defer {
                out.insert("defer_loading".into(), tool_defer);
            }
            Value::Object(out)
        })
        .collect()
}

/// `_handle_last_assistant_message` (0.5.8+): a trailing assistant message
/// with string content is cut off and returned as the prefix under
/// `continue_final_message`, else replaced by a user message of that text.
pub(super) fn handle_last_assistant_message(
    messages: &mut Vec<Value>,
    continue_final_message: bool,
) -> Option<String> {
    let last = messages.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let text = last.get("content").and_then(Value::as_str)?.to_owned();
    if continue_final_message {
        messages.pop();
        return Some(text);
    }
    let mut user = Map::new();
    user.insert("role".into(), Value::String("user".into()));
    user.insert("content".into(), Value::String(text));
    *messages.last_mut().expect("a last message") = Value::Object(user);
    None
}

/// `normalize_assistant_tool_call_arguments(message, strict=True)` (0.5.14+):
/// an assistant message's string arguments parsed by orjson
/// (`parse_tool_call_arguments`).
pub(super) fn normalize_assistant_tool_call_arguments(
    message: &mut Value,
) -> Result<(), Dsv32Error> {
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return Ok(());
    }
    let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
        return Ok(());
    };
    for call in calls {
        let Some(Value::Object(function)) = call.get_mut("function") else {
            continue;
        };
        let Some(Value::String(arguments)) = function.get("arguments") else {
            continue;
        };
        let parsed = match py::json_loads(arguments) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Err(error(
                    "ValueError",
                    "Assistant tool call function.arguments must be a JSON object.",
                ))
            }
            Err(e) if e.to_string().contains("recursion limit") => {
                return Err(error(
                    "Unmodelled",
                    "tool call arguments nested deeper than the guard reads",
                ))
            }
            Err(_) => {
                return Err(error(
                    "ValueError",
                    "Assistant tool call function.arguments must be valid JSON.",
                ))
            }
        };
        function.insert("arguments".into(), parsed);
    }
    Ok(())
}

/// The text of a parts list's `{"type": "text"}` parts.
pub(super) fn text_parts(parts: &[Value]) -> Vec<&str> {
    parts
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}

/// `process_content_for_template_format(msg, "string", ...)` of a message
/// whose content is a list: the text parts joined by `" "`, `None` keys gone.
pub(super) fn flatten_string_format(message: &Value) -> Value {
    let Value::Object(m) = message else {
        return message.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        if k == "content" {
            let parts = v.as_array().map(Vec::as_slice).unwrap_or_default();
            out.insert(k.clone(), Value::String(text_parts(parts).join(" ")));
        } else if !v.is_null() {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// Whether `v` holds a float beyond the 64-bit integers (what serde_json
/// makes of an integer literal Python's `json` keeps exact).
pub(super) fn has_big_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            let ints = -9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0;
            n.is_f64() && n.as_f64().is_some_and(|f| !ints.contains(&f))
        }
        Value::Array(a) => a.iter().any(has_big_float),
        Value::Object(o) => o.values().any(has_big_float),
        Value::String(_) | Value::Bool(_) | Value::Null => false,
    }
}

#[cfg(test)]
#[path = "dsv32_serving_tests.rs"]
mod tests;
