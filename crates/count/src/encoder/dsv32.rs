//! DeepSeek-V3.2's chat encoder, as SGLang runs it:
//! `sglang/srt/entrypoints/openai/encoding_dsv32.py`, ported function by
//! function (each Rust function names the Python one it mirrors). The file
//! first ships in 0.5.6 and changes at 0.5.7, 0.5.14 and 0.5.20; each
//! version that encodes differently is a [`Dsv32Version`] (0.5.20 only
//! reformats a line). Which releases call it, with what, is
//! `dsv32_serving.rs`.
//!
//! Only the encoding half is ported (`encode_messages` and everything it
//! calls). The completion parser (`parse_message_from_completion_text`,
//! `parse_tool_calls`, `_read_until_stop`, `decode_dsml_to_arguments`,
//! `tool_calls_to_openai_format`) never runs on a prompt.
//!
//! Messages are the dicts SGLang passes (`serving_chat.py`, the
//! `elif self.chat_encoding_spec is not None:` branch of
//! `_apply_jinja_template`). That branch prepares them first, and the caller
//! must do the same before [`encode_messages`]: `msg.model_dump()` of each
//! request message, assistant `tool_calls[*].function.arguments` strings
//! parsed to dicts (`normalize_assistant_tool_call_arguments`, strict),
//! `None` content set to `""`, list content flattened to its text parts
//! joined by `" "` (`process_content_for_template_format`), a final
//! assistant message turned into a user message (or cut off as the
//! `continue_final_message` prefix), `{"role": "system", "content": ""}`
//! inserted first unless the first message is a system message, and the
//! request's tools (`tool.model_dump()`) set as `messages[0]["tools"]`.
//!
//! Where Python would raise, these functions return `Err` with
//! `"{ExceptionType}: {message}"` (Python's message; serde_json's wording
//! for a `JSONDecodeError`). Where Python would produce a prompt from an
//! input this port cannot read as Python does, they return an `Err` of kind
//! `Unmodelled` instead of a different prompt: tool call arguments strings
//! serde_json reads differently from `json.loads` ([`json_loads`]), and
//! `str()` of a list or dict holding a code point unassigned in Python 3.11's
//! Unicode 14.0 (`str_of`). Neither reaches `encode_messages` from SGLang's
//! chat endpoint, which passes string contents and dict arguments.
//!
//! `render_message` rescans the message list on every call in Python
//! (quadratic in the number of messages); here the two scans run once per
//! list (`Scans`), with the same results.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::py::{self, Dumps, Repr};

/// `TOOLS_SYSTEM_TEMPLATE`.
pub const TOOLS_SYSTEM_TEMPLATE: &str = r#"## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml_token}function_calls>" block like the following as part of your reply to the user:
<{dsml_token}function_calls>
<{dsml_token}invoke name="$FUNCTION_NAME">
<{dsml_token}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml_token}parameter>
...
</{dsml_token}invoke>
<{dsml_token}invoke name="$FUNCTION_NAME2">
...
</{dsml_token}invoke>
</{dsml_token}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{dsml_token}function_calls>
...
</{dsml_token}function_calls>
<function_results>
...
</function_results>
{thinking_start_token}...thinking about results{thinking_end_token}
Here are the functions available in JSONSchema format:
<functions>
{tool_schemas}
</functions>
"#;

/// `bos_token`.
pub const BOS_TOKEN: &str = "<｜begin▁of▁sentence｜>";
/// `eos_token`.
pub const EOS_TOKEN: &str = "<｜end▁of▁sentence｜>";
/// `thinking_start_token`.
pub const THINKING_START_TOKEN: &str = "<think>";
/// `thinking_end_token`.
pub const THINKING_END_TOKEN: &str = "</think>";
/// `dsml_token`.
pub const DSML_TOKEN: &str = "｜DSML｜";
/// `system_msg_template`.
const SYSTEM_MSG_TEMPLATE: &str = "{content}";
/// `user_msg_template`.
const USER_MSG_TEMPLATE: &str = "<｜User｜>{content}<｜Assistant｜>";
/// `assistant_msg_template`.
const ASSISTANT_MSG_TEMPLATE: &str = "{reasoning}{content}{tool_calls}<｜end▁of▁sentence｜>";
/// `thinking_template`.
const THINKING_TEMPLATE: &str = "{reasoning_content}";
/// `response_format_template`.
const RESPONSE_FORMAT_TEMPLATE: &str =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}";
/// `tool_call_template`.
const TOOL_CALL_TEMPLATE: &str =
    "<{dsml_token}invoke name=\"{name}\">\n{arguments}\n</{dsml_token}invoke>";
/// `tool_calls_template`.
const TOOL_CALLS_TEMPLATE: &str =
    "<{dsml_token}function_calls>\n{tool_calls}\n</{dsml_token}function_calls>";
/// `tool_output_template`.
const TOOL_OUTPUT_TEMPLATE: &str = "\n<result>{content}</result>";
/// `p_dsml_template` (local to `encode_arguments_to_dsml`).
const P_DSML_TEMPLATE: &str =
    "<{dsml_token}parameter name=\"{key}\" string=\"{is_str}\">{value}</{dsml_token}parameter>";

/// The `encoding_dsv32.py` a release ships, where versions encode or fail
/// differently (md5 of the file: 0.5.6 `ddf8936d`, 0.5.7 `c595792a`, 0.5.14
/// `4abf60bf`, 0.5.20 `3b513153`, the last a reformatted line of 0.5.14's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dsv32Version {
    /// 0.5.6 - 0.5.6.post2: `assert` where later files raise
    /// `DS32EncodingError`, on the same conditions (an `AssertionError`, with
    /// the assert's message; none for the index check); arguments are
    /// `json.loads(tool_call["arguments"])` as in 0.5.7.
    V0506,
    /// 0.5.7 - 0.5.13: `encode_arguments_to_dsml` calls
    /// `json.loads(tool_call["arguments"])` whatever the arguments are (a
    /// dict raises `TypeError`) and `.items()` on the result (a list raises
    /// `AttributeError`).
    V0507,
    /// 0.5.14 and later (0.5.23 included): a string is `json.loads`-ed, a
    /// dict taken as it is, anything else is a `ValueError`.
    V0514,
}

impl Dsv32Version {
    /// The version `major.minor.patch` ships, or `None` before 0.5.6 (no
    /// such file).
    pub fn of_release(version: (u32, u32, u32)) -> Option<Dsv32Version> {
        match version {
            v if v < (0, 5, 6) => None,
            v if v < (0, 5, 7) => Some(Dsv32Version::V0506),
            v if v < (0, 5, 14) => Some(Dsv32Version::V0507),
            _ => Some(Dsv32Version::V0514),
        }
    }
}

/// How a call site calls `encode_messages`: the file's version, and whether
/// it passes `thinking_mode` as SGLang's `ThinkingMode` enum (0.5.13 and
/// later) or as the plain string `"chat"` / `"thinking"` (0.5.6 - 0.5.12).
/// Both change only error messages (`f"{thinking_mode}"`), never a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    pub version: Dsv32Version,
    pub mode_is_enum: bool,
}

impl Flavor {
    /// SGLang 0.5.14 and later.
    pub const CURRENT: Flavor = Flavor {
        version: Dsv32Version::V0514,
        mode_is_enum: true,
    };

    /// `f"{thinking_mode}"`.
    fn mode_text(self, mode: ThinkingMode) -> String {
        match (self.mode_is_enum, mode) {
            (true, m) => m.to_string(),
            (false, ThinkingMode::Chat) => "chat".into(),
            (false, ThinkingMode::Thinking) => "thinking".into(),
        }
    }

    /// `raise DS32EncodingError(message)`, or in 0.5.6 the failing
    /// `assert condition, message`.
    fn fail(self, message: impl fmt::Display) -> Dsv32Error {
        match self.version {
            Dsv32Version::V0506 => error("AssertionError", message),
            Dsv32Version::V0507 | Dsv32Version::V0514 => encoding_error(message),
        }
    }
}

/// SGLang's `ThinkingMode(str, Enum)` (`serving_chat.py`), the value the
/// call site passes as `thinking_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingMode {
    /// `ThinkingMode.CHAT == "chat"`.
    Chat,
    /// `ThinkingMode.THINKING == "thinking"`.
    Thinking,
}

impl fmt::Display for ThinkingMode {
    /// `f"{thinking_mode}"` of the enum member under Python 3.11, which is
    /// how it appears in SGLang's error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThinkingMode::Chat => "ThinkingMode.CHAT",
            ThinkingMode::Thinking => "ThinkingMode.THINKING",
        })
    }
}

/// What Python raises: `"{type(e).__name__}: {e}"` (e.g.
/// `"DS32EncodingError: No tool calls but found tool output"`,
/// `"KeyError: 'function'"`), or `"Unmodelled: ..."` where Python would
/// produce a prompt this port refuses to guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsv32Error(pub String);

impl Dsv32Error {
    /// The Python exception type name (or `Unmodelled`).
    pub fn kind(&self) -> &str {
        self.0.split_once(": ").map_or(self.0.as_str(), |(k, _)| k)
    }
}

impl fmt::Display for Dsv32Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Dsv32Error {}

pub(super) fn error(kind: &str, message: impl fmt::Display) -> Dsv32Error {
    Dsv32Error(format!("{kind}: {message}"))
}

/// `raise DS32EncodingError(message)`.
fn encoding_error(message: impl fmt::Display) -> Dsv32Error {
    error("DS32EncodingError", message)
}

// ---------------------------------------------------------------------------
// The Python operations the encoder applies to message values.
// ---------------------------------------------------------------------------

static NONE: Value = Value::Null;

/// `v.get(key)` (missing keys read as `None`).
fn get<'a>(v: &'a Value, key: &str) -> Result<&'a Value, Dsv32Error> {
    match v {
        Value::Object(map) => Ok(map.get(key).unwrap_or(&NONE)),
        _ => Err(error(
            "AttributeError",
            format!("'{}' object has no attribute 'get'", py::type_name(v)),
        )),
    }
}

/// `v[key]` for a `str` key.
fn getitem<'a>(v: &'a Value, key: &str) -> Result<&'a Value, Dsv32Error> {
    match v {
        Value::Object(map) => map
            .get(key)
            .ok_or_else(|| error("KeyError", py::repr(&key.into()))),
        Value::Array(_) => Err(error(
            "TypeError",
            "list indices must be integers or slices, not str",
        )),
        Value::String(_) => Err(error(
            "TypeError",
            "string indices must be integers, not 'str'",
        )),
        _ => Err(error(
            "TypeError",
            format!("'{}' object is not subscriptable", py::type_name(v)),
        )),
    }
}

/// `item[key]` for an item of [`iterate`]: only a list yields values that
/// can be subscripted by a string; dict keys and characters are `str`.
fn getitem_of<'a>(item: &Cow<'a, Value>, key: &str) -> Result<&'a Value, Dsv32Error> {
    match item {
        Cow::Borrowed(v) => getitem(v, key),
        Cow::Owned(v) => Err(getitem(v, key)
            .err()
            .unwrap_or_else(|| error("TypeError", "string indices must be integers, not 'str'"))),
    }
}

/// `for item in v`: a list's items, a dict's keys, a string's characters.
fn iterate(v: &Value) -> Result<Vec<Cow<'_, Value>>, Dsv32Error> {
    match v {
        Value::Array(items) => Ok(items.iter().map(Cow::Borrowed).collect()),
        Value::Object(map) => Ok(map.keys().map(|k| Cow::Owned(k.as_str().into())).collect()),
        Value::String(s) => Ok(s
            .chars()
            .map(|c| Cow::Owned(c.to_string().into()))
            .collect()),
        _ => Err(error(
            "TypeError",
            format!("'{}' object is not iterable", py::type_name(v)),
        )),
    }
}

/// `len(v)`.
fn len(v: &Value) -> Result<usize, Dsv32Error> {
    match v {
        Value::String(s) => Ok(s.chars().count()),
        Value::Array(items) => Ok(items.len()),
        Value::Object(map) => Ok(map.len()),
        _ => Err(error(
            "TypeError",
            format!("object of type '{}' has no len()", py::type_name(v)),
        )),
    }
}

/// `v == s` for a `str` literal `s`.
fn is_str(v: &Value, s: &str) -> bool {
    v.as_str() == Some(s)
}

/// `str(v)`: what `str.format` inserts for `{v}` in the prompt. A string is
/// itself; anything else is its `repr`, which is refused (`Unmodelled`) if
/// it holds a code point unassigned in Unicode 14.0, whose printability
/// (and so whether `repr` escapes it) depends on the Python version
/// (`py::Repr::Strict`).
pub(super) fn str_of(v: &Value) -> Result<Cow<'_, str>, Dsv32Error> {
    py::str(v, Repr::Strict).map_err(|e| error("Unmodelled", e.to_string()))
}

/// `str(v or "")`, as in `content or ""`.
pub(super) fn str_or_empty(v: &Value) -> Result<Cow<'_, str>, Dsv32Error> {
    if py::truthy(v) {
        str_of(v)
    } else {
        Ok(Cow::Borrowed(""))
    }
}

/// `template.format(**fields)` for the module's templates, whose only
/// braces are `{name}` fields: one pass over the template, so a value
/// containing `{...}` is never substituted again.
pub(super) fn format(template: &str, fields: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + fields.iter().map(|f| f.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            rest = &rest[open..];
            break;
        };
        let name = &after[..close];
        match fields.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(value),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// `json.loads(s)` where serde_json reads what Python reads, else an `Err`.
/// Python's `json` parses a superset of JSON (`NaN`, `Infinity`, lone
/// surrogate escapes, numbers beyond the float range, nesting deeper than
/// serde_json's 128) and keeps integers exact where serde_json reads `-0`
/// and integers beyond 64 bits as floats, which `json.dumps` would print
/// differently. Those are refused (`Unmodelled`); other invalid documents
/// are `JSONDecodeError` (with serde_json's wording, not Python's).
pub fn json_loads(s: &str) -> Result<Value, Dsv32Error> {
    let value: Value = match crate::py::json_loads(s) {
        Ok(value) => value,
        Err(e) if python_may_read(s, &e) => {
            return Err(error(
                "Unmodelled",
                format!(
                "tool call arguments Python's json.loads may read and serde_json does not ({e})"
            ),
            ))
        }
        Err(e) => return Err(error("JSONDecodeError", e)),
    };
    if let Some(literal) = int_literal_read_as_float(s) {
        return Err(error(
            "Unmodelled",
            format!(
                "tool call arguments hold the integer `{literal}`, which Python keeps exact and serde_json reads as a float"
            ),
        ));
    }
    Ok(value)
}

/// Whether a document serde_json rejected may be one of the extensions
/// Python's `json.loads` accepts (then refusing it is not claiming Python
/// raises).
fn python_may_read(s: &str, e: &serde_json::Error) -> bool {
    let message = e.to_string();
    let surrogate_escape = s.as_bytes().windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    });
    message.contains("number out of range")
        || message.contains("recursion limit")
        || surrogate_escape
        || s.contains("NaN")
        || s.contains("Infinity")
}

/// The first integer literal (no `.`, `e`, `E`) outside strings of a valid
/// JSON text that serde_json parses to a float: `-0` or beyond i64/u64.
fn int_literal_read_as_float(json: &str) -> Option<&str> {
    let b = json.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
        } else if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                i += 1;
            }
            let literal = &json[start..i];
            let integer = !literal.contains(['.', 'e', 'E']);
            if integer
                && (literal == "-0"
                    || (literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err()))
            {
                return Some(literal);
            }
        } else {
            i += 1;
        }
    }
    None
}

// ---------------------------------------------------------------------------
// encoding_dsv32.py
// ---------------------------------------------------------------------------

/// `to_json(value)`: `json.dumps(value, ensure_ascii=False)` (the
/// `ensure_ascii=True` fallback only runs for values JSON cannot hold).
pub fn to_json(value: &Value) -> String {
    py::json_dumps(value, &Dumps::UNICODE)
}

/// `tools_from_openai_format(tools)`: `[tool["function"] for tool in tools]`.
fn tools_from_openai_format(tools: &Value) -> Result<Vec<&Value>, Dsv32Error> {
    iterate(tools)?
        .iter()
        .map(|tool| getitem_of(tool, "function"))
        .collect()
}

/// One dict of `tool_calls_from_openai_format`: `{"name": ..., "arguments": ...}`.
#[derive(Debug, Clone, Copy)]
struct ToolCall<'a> {
    name: &'a Value,
    arguments: &'a Value,
}

/// `tool_calls_from_openai_format(tool_calls)`.
fn tool_calls_from_openai_format(tool_calls: &Value) -> Result<Vec<ToolCall<'_>>, Dsv32Error> {
    iterate(tool_calls)?
        .iter()
        .map(|tool_call| {
            let name = getitem(getitem_of(tool_call, "function")?, "name")?;
            let arguments = getitem(getitem_of(tool_call, "function")?, "arguments")?;
            Ok(ToolCall { name, arguments })
        })
        .collect()
}

/// `encode_arguments_to_dsml(tool_call)`.
fn encode_arguments_to_dsml(
    version: Dsv32Version,
    tool_call: &ToolCall<'_>,
) -> Result<String, Dsv32Error> {
    let raw_arguments = tool_call.arguments;
    let parsed;
    let arguments = match (version, raw_arguments) {
        (_, Value::String(s)) => {
            parsed = json_loads(s)?;
            &parsed
        }
        // Before 0.5.14: `json.loads(tool_call["arguments"])` of a non-string.
        (Dsv32Version::V0506 | Dsv32Version::V0507, other) => {
            return Err(error(
                "TypeError",
                format!(
                    "the JSON object must be str, bytes or bytearray, not {}",
                    py::type_name(other)
                ),
            ))
        }
        (Dsv32Version::V0514, other) => other,
    };
    let Value::Object(arguments) = arguments else {
        return Err(match version {
            // `for k, v in arguments.items()`.
            Dsv32Version::V0506 | Dsv32Version::V0507 => error(
                "AttributeError",
                format!(
                    "'{}' object has no attribute 'items'",
                    py::type_name(arguments)
                ),
            ),
            Dsv32Version::V0514 => error(
                "ValueError",
                "Assistant tool call function.arguments must be a JSON object.",
            ),
        });
    };

    let p_dsml_strs: Vec<String> = arguments
        .iter()
        .map(|(k, v)| {
            let (is_str, value) = match v {
                Value::String(s) => ("true", Cow::Borrowed(s.as_str())),
                _ => ("false", Cow::Owned(to_json(v))),
            };
            format(
                P_DSML_TEMPLATE,
                &[
                    ("dsml_token", DSML_TOKEN),
                    ("key", k),
                    ("is_str", is_str),
                    ("value", &value),
                ],
            )
        })
        .collect();
    Ok(p_dsml_strs.join("\n"))
}

/// `render_tools(tools)`.
pub fn render_tools(tools: &[&Value]) -> String {
    let tools_json: Vec<String> = tools.iter().map(|t| to_json(t)).collect();
    format(
        TOOLS_SYSTEM_TEMPLATE,
        &[
            ("tool_schemas", &tools_json.join("\n")),
            ("dsml_token", DSML_TOKEN),
            ("thinking_start_token", THINKING_START_TOKEN),
            ("thinking_end_token", THINKING_END_TOKEN),
        ],
    )
}

/// `find_last_user_index(messages)`: the last `user` or `developer`
/// message, or -1.
fn find_last_user_index(messages: &[Cow<'_, Value>]) -> Result<isize, Dsv32Error> {
    for (idx, msg) in messages.iter().enumerate().rev() {
        let role = get(msg, "role")?;
        if is_str(role, "user") || is_str(role, "developer") {
            return Ok(idx as isize);
        }
    }
    Ok(-1)
}

/// The two scans `render_message` repeats on every call, done once per
/// message list: the list does not change between the calls, so each scan
/// has the same result every time (a raised error included). Python's
/// repetition is quadratic in the number of messages (20k messages: 40 s
/// here); this keeps the port linear with the same results.
struct Scans {
    /// `find_last_user_index(messages)`.
    last_user_idx: Result<isize, Dsv32Error>,
    /// Per index, where `render_message`'s `while ... == "tool"` walk back
    /// from it stops (`prev_assistant_idx`), or the `AttributeError` a
    /// non-dict message raises on the way.
    prev_assistant_idx: Vec<Result<isize, Dsv32Error>>,
}

impl Scans {
    fn new(messages: &[Cow<'_, Value>]) -> Self {
        let mut prev_assistant_idx: Vec<Result<isize, Dsv32Error>> =
            Vec::with_capacity(messages.len());
        for index in 0..messages.len() {
            // prev = index - 1; while prev >= 0 and messages[prev].get("role") == "tool": prev -= 1
            let prev = match index.checked_sub(1) {
                None => Ok(-1),
                Some(p) => match get(&messages[p], "role") {
                    Err(e) => Err(e),
                    Ok(role) if is_str(role, "tool") => prev_assistant_idx[p].clone(),
                    Ok(_) => Ok(p as isize),
                },
            };
            prev_assistant_idx.push(prev);
        }
        Scans {
            last_user_idx: find_last_user_index(messages),
            prev_assistant_idx,
        }
    }
}

/// `render_message(index, messages, thinking_mode)`, with `scans` holding
/// the two scans of `messages` it makes ([`Scans`]). The Python function is
/// itself ~135 lines; its `if role == ...` branches are the
/// `render_*_message` functions below.
fn render_message(
    flavor: Flavor,
    index: usize,
    messages: &[Cow<'_, Value>],
    scans: &Scans,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    if index >= messages.len() {
        return Err(match flavor.version {
            // `assert 0 <= index < len(messages)`: no message.
            Dsv32Version::V0506 => error("AssertionError", ""),
            Dsv32Version::V0507 | Dsv32Version::V0514 => encoding_error(format!(
                "Index {index} out of range for messages list of length {}",
                messages.len()
            )),
        });
    }
    // `thinking_mode not in ["chat", "thinking"]` cannot happen with the enum.
    let msg: &Value = &messages[index];
    let last_user_idx = scans.last_user_idx.clone()?;

    let role = get(msg, "role")?;
    let content = get(msg, "content")?;
    let tools = get(msg, "tools")?;
    let response_format = get(msg, "response_format")?;
    let tool_calls = get(msg, "tool_calls")?;

    // `if tools: tools = tools_from_openai_format(tools)`; the converted
    // list is as long as the (truthy) original, so `Some` means truthy.
    let tools = match py::truthy(tools) {
        true => Some(tools_from_openai_format(tools)?),
        false => None,
    };
    let tool_calls = match py::truthy(tool_calls) {
        true => Some(tool_calls_from_openai_format(tool_calls)?),
        false => None,
    };

    // `index == last_user_idx and thinking_mode == "thinking"`.
    let opens_thinking = index as isize == last_user_idx && thinking_mode == ThinkingMode::Thinking;
    if is_str(role, "system") {
        render_system_message(content, tools.as_deref(), response_format)
    } else if is_str(role, "developer") {
        render_developer_message(
            flavor,
            msg,
            content,
            tools.as_deref(),
            response_format,
            opens_thinking,
        )
    } else if is_str(role, "user") {
        render_user_message(content, opens_thinking)
    } else if is_str(role, "tool") {
        render_tool_message(
            flavor,
            index,
            messages,
            scans,
            content,
            last_user_idx,
            thinking_mode,
        )
    } else if is_str(role, "assistant") {
        render_assistant_message(
            flavor,
            index,
            msg,
            tool_calls.as_deref(),
            last_user_idx,
            thinking_mode,
        )
    } else {
        Err(error(
            "NotImplementedError",
            format!("Unknown role: {}", py::message_str(role)),
        ))
    }
}

/// `render_message`, its `role == "system"` branch.
fn render_system_message(
    content: &Value,
    tools: Option<&[&Value]>,
    response_format: &Value,
) -> Result<String, Dsv32Error> {
    let mut prompt = format(SYSTEM_MSG_TEMPLATE, &[("content", &str_or_empty(content)?)]);
    if let Some(tools) = tools {
        prompt += "\n\n";
        prompt += &render_tools(tools);
    }

    if py::truthy(response_format) {
        prompt += "\n\n";
        prompt += &format(
            RESPONSE_FORMAT_TEMPLATE,
            &[("schema", &to_json(response_format))],
        );
    }
    Ok(prompt)
}

/// `render_message`, its `role == "developer"` branch.
fn render_developer_message(
    flavor: Flavor,
    msg: &Value,
    content: &Value,
    tools: Option<&[&Value]>,
    response_format: &Value,
    opens_thinking: bool,
) -> Result<String, Dsv32Error> {
    if !py::truthy(content) {
        return Err(flavor.fail(format!(
            "Invalid message for role `developer`: {}",
            py::message_str(msg)
        )));
    }
    let mut content_developer = String::new();
    if let Some(tools) = tools {
        content_developer += "\n\n";
        content_developer += &render_tools(tools);
    }

    if py::truthy(response_format) {
        content_developer += "\n\n";
        content_developer += &format(
            RESPONSE_FORMAT_TEMPLATE,
            &[("schema", &to_json(response_format))],
        );
    }

    content_developer += "\n\n# The user's message is: ";
    content_developer += &str_of(content)?;

    let mut prompt = format(USER_MSG_TEMPLATE, &[("content", &content_developer)]);
    if opens_thinking {
        prompt += THINKING_START_TOKEN;
    } else {
        prompt += THINKING_END_TOKEN;
    }
    Ok(prompt)
}

/// `render_message`, its `role == "user"` branch.
fn render_user_message(content: &Value, opens_thinking: bool) -> Result<String, Dsv32Error> {
    let mut prompt = format(USER_MSG_TEMPLATE, &[("content", &str_of(content)?)]);

    if opens_thinking {
        prompt += THINKING_START_TOKEN;
    } else {
        prompt += THINKING_END_TOKEN;
    }
    Ok(prompt)
}

/// `render_message`, its `role == "tool"` branch.
fn render_tool_message(
    flavor: Flavor,
    index: usize,
    messages: &[Cow<'_, Value>],
    scans: &Scans,
    content: &Value,
    last_user_idx: isize,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    let idx = index as isize;
    // `messages[i]` with Python's negative indices (i >= -1 here).
    let at = |i: isize| -> Result<&Value, Dsv32Error> {
        let j = if i < 0 {
            i + messages.len() as isize
        } else {
            i
        };
        usize::try_from(j)
            .ok()
            .and_then(|j| messages.get(j))
            .map(|m| &**m)
            .ok_or_else(|| error("IndexError", "list index out of range"))
    };
    let mut prompt = String::new();

    // prev_assistant_idx = index - 1, then back over "tool" messages.
    let prev_assistant_idx = scans.prev_assistant_idx[index].clone()?;
    let assistant_msg = at(prev_assistant_idx)?;

    if !(index == 0
        || (prev_assistant_idx >= 0 && is_str(get(assistant_msg, "role")?, "assistant")))
    {
        return Err(flavor.fail(format!(
            "Invalid messages at {index}:\n{}",
            py::message_str(assistant_msg)
        )));
    }

    let tool_call_order = (idx - prev_assistant_idx) as usize;
    let assistant_tool_calls = get(assistant_msg, "tool_calls")?;
    if !(py::truthy(assistant_tool_calls) && len(assistant_tool_calls)? >= tool_call_order) {
        return Err(flavor.fail("No tool calls but found tool output"));
    }

    if tool_call_order == 1 {
        prompt += "\n\n<function_results>";
    }

    prompt += &format(TOOL_OUTPUT_TEMPLATE, &[("content", &str_of(content)?)]);

    if tool_call_order == len(assistant_tool_calls)? {
        prompt += "\n</function_results>";

        if idx >= last_user_idx && thinking_mode == ThinkingMode::Thinking {
            prompt += "\n\n";
            prompt += THINKING_START_TOKEN;
        } else {
            prompt += "\n\n";
            prompt += THINKING_END_TOKEN;
        }
    }
    Ok(prompt)
}

/// `render_message`, its `role == "assistant"` branch.
fn render_assistant_message(
    flavor: Flavor,
    index: usize,
    msg: &Value,
    tool_calls: Option<&[ToolCall<'_>]>,
    last_user_idx: isize,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    // `render_message` read these before its branches (a dict: no error here).
    let content = get(msg, "content")?;
    let reasoning_content = get(msg, "reasoning_content")?;
    let mut thinking_part = String::new();

    let mut tool_calls_content = String::new();
    if let Some(tool_calls) = tool_calls {
        let rendered = tool_calls
            .iter()
            .map(|tool_call| {
                let name = str_of(tool_call.name)?;
                let arguments = encode_arguments_to_dsml(flavor.version, tool_call)?;
                Ok(format(
                    TOOL_CALL_TEMPLATE,
                    &[
                        ("dsml_token", DSML_TOKEN),
                        ("name", &name),
                        ("arguments", &arguments),
                    ],
                ))
            })
            .collect::<Result<Vec<String>, Dsv32Error>>()?;
        tool_calls_content += "\n\n";
        tool_calls_content += &format(
            TOOL_CALLS_TEMPLATE,
            &[
                ("dsml_token", DSML_TOKEN),
                ("tool_calls", &rendered.join("\n")),
            ],
        );
    }

    let summary_content = str_or_empty(content)?;

    if thinking_mode == ThinkingMode::Thinking && index as isize > last_user_idx {
        if !(py::truthy(reasoning_content) || tool_calls.is_some()) {
            return Err(flavor.fail(format!(
                "ThinkingMode: {}, invalid message without reasoning_content/tool_calls `{}` after last user message",
                flavor.mode_text(thinking_mode),
                py::message_str(msg)
            )));
        }
        thinking_part = format(
            THINKING_TEMPLATE,
            &[("reasoning_content", &str_or_empty(reasoning_content)?)],
        ) + THINKING_END_TOKEN;
    }

    Ok(format(
        ASSISTANT_MSG_TEMPLATE,
        &[
            ("reasoning", &thinking_part),
            ("content", &summary_content),
            ("tool_calls", &tool_calls_content),
        ],
    ))
}

/// `drop_thinking_messages(messages, last_user_idx=None)`: assistant
/// messages before the last user turn lose `reasoning_content`; messages
/// before it whose role is not user/system/tool/assistant are dropped.
fn drop_thinking_messages<'a>(
    messages: &[Cow<'a, Value>],
    last_user_idx: Option<isize>,
) -> Result<Vec<Cow<'a, Value>>, Dsv32Error> {
    let mut messages_wo_thinking = Vec::with_capacity(messages.len());
    let last_user_idx = match last_user_idx {
        None => find_last_user_index(messages)?,
        Some(i) => i,
    };
    for (idx, msg) in messages.iter().enumerate() {
        let role = get(msg, "role")?;
        if is_str(role, "user")
            || is_str(role, "system")
            || is_str(role, "tool")
            || idx as isize >= last_user_idx
        {
            messages_wo_thinking.push(msg.clone());
            continue;
        } else if is_str(role, "assistant") {
            // `copy.copy(msg)` then `pop("reasoning_content", None)`,
            // keeping the other keys in order.
            let mut msg_wo_thinking = msg.clone().into_owned();
            if let Value::Object(map) = &mut msg_wo_thinking {
                map.shift_remove("reasoning_content");
            }
            messages_wo_thinking.push(Cow::Owned(msg_wo_thinking));
        }
    }
    Ok(messages_wo_thinking)
}

/// `encode_messages(messages, thinking_mode)` with the Python defaults
/// (`context=None, drop_thinking=True, add_default_bos_token=True`): the
/// call SGLang's chat endpoint makes.
pub fn encode_messages(
    messages: &[Value],
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    encode_messages_with(messages, thinking_mode, None, true, true)
}

/// `encode_messages(messages, thinking_mode, context, drop_thinking,
/// add_default_bos_token)` of 0.5.14 and later.
pub fn encode_messages_with(
    messages: &[Value],
    thinking_mode: ThinkingMode,
    context: Option<&[Value]>,
    drop_thinking: bool,
    add_default_bos_token: bool,
) -> Result<String, Dsv32Error> {
    encode_messages_as(
        Flavor::CURRENT,
        messages,
        thinking_mode,
        context,
        drop_thinking,
        add_default_bos_token,
    )
}

/// `encode_messages(messages, thinking_mode, context, drop_thinking,
/// add_default_bos_token)` of the file `flavor` names, called as it says.
pub fn encode_messages_as(
    flavor: Flavor,
    messages: &[Value],
    thinking_mode: ThinkingMode,
    context: Option<&[Value]>,
    drop_thinking: bool,
    add_default_bos_token: bool,
) -> Result<String, Dsv32Error> {
    let context = context.unwrap_or_default();
    let mut full_messages: Vec<Cow<'_, Value>> =
        context.iter().chain(messages).map(Cow::Borrowed).collect();

    let mut prompt = String::new();
    if add_default_bos_token && context.is_empty() {
        prompt += BOS_TOKEN;
    }

    if thinking_mode == ThinkingMode::Thinking && drop_thinking {
        full_messages = drop_thinking_messages(&full_messages, None)?;
    }

    let scans = Scans::new(&full_messages);
    for idx in 0..messages.len() {
        prompt += &render_message(
            flavor,
            idx + context.len(),
            &full_messages,
            &scans,
            thinking_mode,
        )?;
    }

    Ok(prompt)
}

/// The encoder: the dsv32 branch of `_apply_jinja_template`.
#[derive(Debug, Clone, Copy)]
pub struct Dsv32Encoder;

impl super::ChatEncoder for Dsv32Encoder {
    fn name(&self) -> &'static str {
        "dsv32"
    }
    fn jinja(&self) -> Option<&super::Jinja> {
        None
    }
    fn kwargs_reader(&self) -> Option<&str> {
        None
    }
    fn python_template(&self) -> Option<super::glm53::Variant> {
        None
    }
    fn inline_system(&self) -> Option<bool> {
        Some(false)
    }
    fn owns_reasoning_history(&self) -> bool {
        true
    }
    fn message_style(&self) -> crate::preprocess::MessageStyle {
        crate::preprocess::MessageStyle::Dsv32
    }
    fn reads_wire(&self) -> bool {
        false
    }
    fn reads_body(&self) -> bool {
        false
    }
    fn modelled_from(&self) -> Option<(crate::release::Release, &'static str)> {
        None
    }
    fn counts_converted_apis(&self) -> bool {
        true
    }
    fn same_as(&self, other: &super::Encoder) -> bool {
        matches!(other, super::Encoder::Dsv32(_))
    }

    /// An empty system message hosts the tools, the thinking mode comes from
    /// the request's `thinking` kwarg (else `SGLANG_DEFAULT_THINKING`), and
    /// the text is encoded with the default specials (its BOS text, then the
    /// post-processor's BOS).
    fn prompt(
        &self,
        host: &dyn super::Host,
        inputs: &crate::preprocess::ChatInputs,
        _clock: crate::Clock,
    ) -> Result<super::Prompt, crate::CountError> {
        use crate::CountError;
        let mut messages = inputs.messages.as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            // `messages[0]` raises IndexError in SGLang.
            return Err(CountError::Template(
                "IndexError: list index out of range".into(),
            ));
        }
        if messages[0].get("role").and_then(Value::as_str) != Some("system") {
            messages.insert(0, serde_json::json!({"role": "system", "content": ""}));
        }
        // `request.tools if tools else None`: every request tool, once any
        // reaches the template.
        let reaches = inputs.encoders_get_all_tools
            || inputs
                .tools
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|t| !t.is_empty());
        if let (true, Some(all)) = (reaches, &inputs.all_tools) {
            messages[0]["tools"] = all.clone();
        }
        let mode = if host.thinking_requested(inputs) {
            ThinkingMode::Thinking
        } else {
            ThinkingMode::Chat
        };
        let text = encode_messages(&messages, mode).map_err(|e| {
            if e.kind() == "Unmodelled" {
                CountError::Unsupported(e.to_string())
            } else {
                CountError::Template(e.to_string())
            }
        })?;
        Ok(super::Prompt::Text {
            text,
            add_special_tokens: true,
        })
    }
}

#[cfg(test)]
#[path = "dsv32_tests.rs"]
mod tests;
