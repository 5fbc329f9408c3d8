//! SGLang 0.5.23's GLM-5.3 and GLM-5.3-Flash Python chat templates
//! (`sglang/srt/parser/glm53_chat_template.py`), with the part of
//! `python_chat_template.py` that picks them (`resolve_python_chat_template`,
//! `may_replace_jinja_template`, `template_detection.is_glm53_template`) and
//! decides whether a chat request renders through them
//! (`render_chat_segments`, the installed `apply_chat_template`), and the
//! retry `serving_chat._apply_jinja_template` wraps around
//! `_render_and_encode_chat_template`. Byte for byte: every output string,
//! segment boundary and exception message is checked against SGLang's own
//! code (`testdata/gen_glm53.py`). The entry point is [`render_segments`].
//!
//! Python values are JSON values here; Jinja's `Undefined` (the Python
//! code's `_UNDEFINED`) is `None` in an `Option<&Value>`. Where the Python
//! raises, the port returns [`Glm53Error::Raised`] with the exception SGLang
//! ends with (under CPython 3.11, as the goldens were made: see
//! `duplicate_keyword`); where it would render something the port does not
//! reproduce (a `repr()` holding a code point unassigned in Unicode 14.0,
//! which the Pythons SGLang runs on print differently, a batched
//! conversation, a `tool_reference` name compared with an int beyond 2**53),
//! it returns [`Glm53Error::Unmodelled`], never a different string.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::py;

/// Which of the two templates (`PYTHON_CHAT_TEMPLATES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `GLM53` (`render_glm53_segments`, text-only).
    Glm53,
    /// `GLM53_FLASH` (`render_glm53_flash_segments`, multimodal).
    Glm53Flash,
}

impl Variant {
    /// `get_python_chat_template(name)`: the `--chat-template` name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "glm-5.3" => Some(Variant::Glm53),
            "glm-5.3-flash" => Some(Variant::Glm53Flash),
            _ => None,
        }
    }

    /// `PythonChatTemplate.name`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Glm53 => "glm-5.3",
            Variant::Glm53Flash => "glm-5.3-flash",
        }
    }

    /// The qualified name Python's duplicate-keyword `TypeError` names.
    fn function(self) -> &'static str {
        match self {
            Variant::Glm53 => "sglang.srt.parser.glm53_chat_template.render_glm53_segments",
            Variant::Glm53Flash => {
                "sglang.srt.parser.glm53_chat_template.render_glm53_flash_segments"
            }
        }
    }
}

// `_GLM53_FEATURES`: what `TemplateManager._use_python_template_features`
// takes from the template instead of detecting it in a Jinja source.
/// `content_format`: message content reaches the template as OpenAI parts.
pub const CONTENT_FORMAT: &str = "openai";
/// `reasoning_config=ReasoningToggleConfig(special_case="always")`: always on.
pub const FORCE_REASONING: bool = true;
/// `may_reorder_tool_results`: `_canonicalize_tool_message_order` runs.
pub const MAY_REORDER_TOOL_RESULTS: bool = true;
/// `supports_inline_system`: mid-conversation system messages stay inline.
pub const SUPPORTS_INLINE_SYSTEM: bool = true;
/// `reasoning_parser`, what `--reasoning-parser auto` resolves to.
pub const REASONING_PARSER: &str = "glm45";
/// `tool_call_parser`, what `--tool-call-parser auto` resolves to.
pub const TOOL_CALL_PARSER: &str = "glm47";

/// Why a prompt cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Glm53Error {
    /// SGLang raises `exception` (its Python type name) with
    /// `str(e) == message`. `ValueError` is answered 400 with `message`,
    /// anything else 500 with `Internal server error: {message}`
    /// (`OpenAIServingBase.handle_request`).
    Raised {
        exception: &'static str,
        message: String,
    },
    /// SGLang would render this input, but the port does not reproduce it:
    /// refuse the request.
    Unmodelled(String),
}

impl std::fmt::Display for Glm53Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Glm53Error::Raised { exception, message } => write!(f, "{exception}: {message}"),
            Glm53Error::Unmodelled(why) => write!(f, "not modelled: {why}"),
        }
    }
}

impl std::error::Error for Glm53Error {}

type R<T> = Result<T, Glm53Error>;

fn raise<T>(exception: &'static str, message: impl Into<String>) -> R<T> {
    Err(Glm53Error::Raised {
        exception,
        message: message.into(),
    })
}

/// What `_render_and_encode_chat_template` does with the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// `render_chat_segments` returned these strings; SGLang encodes them with
    /// `encode_prompt_segments`, a drop-in for encoding their concatenation.
    Segments(Vec<String>),
    /// `render_chat_segments` declined (a template kwarg names a parameter of
    /// `apply_chat_template`) and the installed `apply_chat_template`
    /// rendered this text with the Python template; SGLang encodes it with
    /// `parallel_prompt_encode`, a drop-in for `tokenizer.encode(text)`.
    Text(String),
    /// The installed `apply_chat_template` handed the call to the tokenizer's
    /// Jinja implementation (`chat_template` not None, or a truthy
    /// `continue_final_message` / `return_assistant_tokens_mask` kwarg): the
    /// prompt is `tokenizer.chat_template` (or the `chat_template` kwarg)
    /// rendered by transformers with the same arguments.
    Jinja,
}

static NULL: Value = Value::Null;

const TOOLS_PREFIX: &str = "\n# Tools\n\n\
You may call one or more functions to assist with the user query.\n\n\
You are provided with function signatures within <tools></tools> XML tags:\n\
<tools>\n";
const TOOLS_SUFFIX: &str = "</tools>\n\n\
For each function call, output the function name and arguments within the following XML format:\n\
<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>\
<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

const IMAGE_PART_TYPES: [&str; 2] = ["image", "image_url"];
const VIDEO_PART_TYPES: [&str; 2] = ["video", "video_url"];
const AUDIO_PART_TYPES: [&str; 3] = ["audio", "audio_url", "input_audio"];

const IMAGE_TOKENS: &str = "<|begin_of_image|><|image|><|end_of_image|>";
const VIDEO_TOKENS: &str = "<|begin_of_video|><|video|><|end_of_video|>";
const AUDIO_TOKENS: &str = "<|begin_of_audio|><|end_of_audio|>";

/// `inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters`
/// under transformers 5.19 (`_APPLY_CHAT_TEMPLATE_PARAMETERS`).
const APPLY_CHAT_TEMPLATE_PARAMETERS: [&str; 16] = [
    "self",
    "conversation",
    "tools",
    "documents",
    "chat_template",
    "add_generation_prompt",
    "continue_final_message",
    "tokenize",
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "return_dict",
    "return_assistant_tokens_mask",
    "tokenizer_kwargs",
    "kwargs",
];

const APPLY_CHAT_TEMPLATE: &str =
    "sglang.srt.parser.python_chat_template.install_python_chat_template.<locals>.apply_chat_template";

// --- Python semantics over JSON values -------------------------------------

/// `iter(v)`: a list's items, a str's characters, a dict's keys.
fn py_iter(v: &Value) -> R<Vec<Cow<'_, Value>>> {
    match v {
        Value::Array(items) => Ok(items.iter().map(Cow::Borrowed).collect()),
        Value::String(s) => Ok(s
            .chars()
            .map(|c| Cow::Owned(Value::String(c.to_string())))
            .collect()),
        Value::Object(map) => Ok(map
            .keys()
            .map(|k| Cow::Owned(Value::String(k.clone())))
            .collect()),
        _ => raise(
            "TypeError",
            format!("'{}' object is not iterable", py::type_name(v)),
        ),
    }
}

/// `str(v)`: `py::str` in Strict mode, refusing a `repr()` whose output
/// depends on the Python version.
fn py_str(v: &Value) -> R<Cow<'_, str>> {
    py::str(v, py::Repr::Strict)
        .map_err(|e| Glm53Error::Unmodelled(format!("the template would print the {e}")))
}

/// Whether every number in `v` is exact as an `f64` (`py::eq` compares
/// numbers as `f64`, which Python does not do for ints beyond 2**53).
fn numbers_exact_in_f64(v: &Value) -> bool {
    const EXACT: u64 = 1 << 53;
    match v {
        Value::Number(n) => {
            n.is_f64()
                || n.as_i64().is_some_and(|i| i.unsigned_abs() <= EXACT)
                || n.as_u64().is_some_and(|u| u <= EXACT)
        }
        Value::Array(items) => items.iter().all(numbers_exact_in_f64),
        Value::Object(map) => map.values().all(numbers_exact_in_f64),
        _ => true,
    }
}

/// `a == b` where either side may be Jinja's `Undefined` (equal to itself only).
fn eq_undefined(a: Option<&Value>, b: Option<&Value>) -> R<bool> {
    match (a, b) {
        (None, None) => Ok(true),
        (Some(a), Some(b)) => {
            if !numbers_exact_in_f64(a) || !numbers_exact_in_f64(b) {
                return Err(Glm53Error::Unmodelled(
                    "a tool_reference name compared with integers beyond 2**53".into(),
                ));
            }
            Ok(py::eq(a, b))
        }
        _ => Ok(false),
    }
}

/// `_get(obj, key) == s` for a str `s`.
fn get_is(obj: &Value, key: &str, s: &str) -> bool {
    matches!(get(obj, key), Some(Value::String(v)) if v == s)
}

/// A call-site `f(k=..., **kwargs)` with `k` in `kwargs` too. CPython 3.11
/// raises `TypeError`, but while an exception is being handled (SGLang's
/// retry runs in an `except` block) the `KeyError` it raises internally
/// escapes unconverted. (3.10 does the same; 3.12 and later raise the
/// `TypeError` there too, which SGLang turns into a `ValueError`: a 400
/// instead of a 500, a failed request either way.)
fn duplicate_keyword(function: &str, key: &str, handling: bool) -> Glm53Error {
    if handling {
        // str(KeyError(key)) is repr(key).
        Glm53Error::Raised {
            exception: "KeyError",
            message: py::repr(&Value::String(key.to_string())),
        }
    } else {
        Glm53Error::Raised {
            exception: "TypeError",
            message: format!("{function}() got multiple values for keyword argument '{key}'"),
        }
    }
}

// --- glm53_chat_template.py ---------------------------------------------------

/// `_get(obj, key)`: `obj.key` in Jinja, `None` for `Undefined` (no JSON
/// type but a dict has an attribute of these names). Callers wanting
/// `_get(obj, key, None)` use `.unwrap_or(&NULL)`.
fn get<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    match obj {
        Value::Object(map) => map.get(key),
        _ => None,
    }
}

/// `_first(value)`: `value.0` in Jinja, `None` for `Undefined`.
fn first(value: &Value) -> Option<Cow<'_, Value>> {
    match value {
        Value::Array(items) => items.first().map(Cow::Borrowed),
        Value::String(s) => s
            .chars()
            .next()
            .map(|c| Cow::Owned(Value::String(c.to_string()))),
        _ => None,
    }
}

/// `_string(value)`: `{{ value }}` in Jinja.
fn string(value: Option<&Value>) -> R<Cow<'_, str>> {
    match value {
        None => Ok(Cow::Borrowed("")),
        Some(v) => py_str(v),
    }
}

/// `_is_iterable(value)`.
fn is_iterable(value: &Value) -> bool {
    matches!(value, Value::Array(_) | Value::String(_) | Value::Object(_))
}

/// `_render_media(part_type, multimodal)`.
fn render_media(part_type: &str, multimodal: bool) -> String {
    if !multimodal {
        let media_type = part_type.replace("_url", "").replace("input_", "");
        return format!(
            "<reminder>You are unable to process this {media_type} because you don't have \
             multi-modal input ability. Try different methods.</reminder>"
        );
    }
    if IMAGE_PART_TYPES.contains(&part_type) {
        IMAGE_TOKENS.to_string()
    } else if VIDEO_PART_TYPES.contains(&part_type) {
        VIDEO_TOKENS.to_string()
    } else {
        AUDIO_TOKENS.to_string()
    }
}

/// `_visible_text(content, multimodal)`.
fn visible_text(content: Option<&Value>, multimodal: bool) -> R<String> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(items)) => {
            let mut parts = String::new();
            for item in items {
                match item {
                    Value::Object(_) => match get(item, "type") {
                        Some(Value::String(t)) if t == "text" => {
                            parts.push_str(&string(get(item, "text"))?);
                        }
                        Some(Value::String(t))
                            if IMAGE_PART_TYPES
                                .iter()
                                .chain(&VIDEO_PART_TYPES)
                                .chain(&AUDIO_PART_TYPES)
                                .any(|m| m == t) =>
                        {
                            parts.push_str(&render_media(t, multimodal));
                        }
                        _ => {}
                    },
                    Value::String(s) => parts.push_str(s),
                    _ => {}
                }
            }
            Ok(parts)
        }
        // The template guards this branch with `content is not none`.
        Some(Value::Null) => Ok(String::new()),
        other => Ok(string(other)?.into_owned()),
    }
}

/// `_unwrap_tool(tool)`.
fn unwrap_tool(tool: &Value) -> &Value {
    match tool {
        Value::Object(map) => map.get("function").unwrap_or(tool),
        _ => tool,
    }
}

/// `_tool_to_json(tool)`: keys raw, values `json.dumps(v, ensure_ascii=False)`.
fn tool_to_json(tool: &Value) -> R<String> {
    let Value::Object(map) = tool else {
        return raise(
            "ValueError",
            format!(
                "Each tool must be a JSON object, got {}.",
                py::type_name(tool)
            ),
        );
    };
    let mut out = String::from("{");
    let mut sep = "";
    for (key, value) in map {
        if key == "defer_loading" || key == "strict" {
            continue;
        }
        out.push_str(sep);
        sep = ", ";
        out.push('"');
        out.push_str(key);
        out.push_str("\": ");
        out.push_str(&py::json_dumps(value, &py::Dumps::UNICODE));
    }
    out.push('}');
    Ok(out)
}

/// `_tool_references_to_response(refs, tools)`.
fn tool_references_to_response(refs: &Value, tools: Option<&[Value]>) -> R<String> {
    let tools = match tools {
        Some(t) if !t.is_empty() => t,
        _ => {
            return raise(
                "ValueError",
                "Rendering a tool_reference requires `tools`; the GLM-5.3 chat \
                 template only defines its tool macros when tools are given.",
            )
        }
    };
    let mut parts = String::from("<tool_response><tools>\n");
    for reference in py_iter(refs)? {
        let ref_name = get(&reference, "name");
        for tool in tools {
            let tool = unwrap_tool(tool);
            if eq_undefined(get(tool, "name"), ref_name)? {
                parts.push_str(&tool_to_json(tool)?);
                parts.push('\n');
            }
        }
    }
    parts.push_str("</tools></tool_response>");
    Ok(parts)
}

/// `_tool_response(text)`.
fn tool_response(text: &str) -> String {
    format!("<tool_response>{text}</tool_response>")
}

/// `_id_of(obj)`.
fn id_of(obj: &Value) -> R<String> {
    let tool_call_id = get(obj, "tool_call_id").unwrap_or(&NULL);
    if py::truthy(tool_call_id) {
        return Ok(py_str(tool_call_id)?.into_owned());
    }
    let obj_id = get(obj, "id").unwrap_or(&NULL);
    if py::truthy(obj_id) {
        return Ok(py_str(obj_id)?.into_owned());
    }
    Ok(String::new())
}

/// `_is_list_of_outputs(message)`.
fn is_list_of_outputs(message: &Value) -> R<bool> {
    let content = get(message, "content").unwrap_or(&NULL);
    if !py::truthy(content) {
        return Ok(false);
    }
    match first(content) {
        None => raise(
            "ValueError",
            format!(
                "A tool message `content` must be a string or a list, got {}.",
                py::type_name(content)
            ),
        ),
        Some(first) => Ok(get(&first, "output").is_some()),
    }
}

/// `_is_tool_reference_list(value)`.
fn is_tool_reference_list(value: Option<&Value>) -> R<bool> {
    let Some(value) = value else {
        return Ok(false);
    };
    if matches!(value, Value::String(_) | Value::Object(_))
        || !is_iterable(value)
        || !py::truthy(value)
    {
        return Ok(false);
    }
    match first(value) {
        None => raise(
            "ValueError",
            format!(
                "A tool_reference list must be a list, got {}.",
                py::type_name(value)
            ),
        ),
        Some(first) => Ok(get_is(&first, "type", "tool_reference")),
    }
}

/// `_render_output(entry, tools, multimodal)`.
fn render_output(entry: &Value, tools: Option<&[Value]>, multimodal: bool) -> R<String> {
    let output = get(entry, "output");
    if is_tool_reference_list(output)? {
        return tool_references_to_response(output.unwrap_or(&NULL), tools);
    }
    Ok(tool_response(&visible_text(output, multimodal)?))
}

/// `_render_tool_response(message, tools, multimodal)`.
fn render_tool_response(message: &Value, tools: Option<&[Value]>, multimodal: bool) -> R<String> {
    let content = get(message, "content").unwrap_or(&NULL);
    if let Value::String(s) = content {
        return Ok(tool_response(s));
    }
    if !content.is_object() && is_tool_reference_list(Some(content))? {
        return tool_references_to_response(content, tools);
    }
    if is_list_of_outputs(message)? {
        let mut out = String::new();
        for entry in py_iter(content)? {
            out.push_str(&render_output(&entry, tools, multimodal)?);
        }
        return Ok(out);
    }
    Ok(tool_response(&visible_text(Some(content), multimodal)?))
}

/// `_render_tool_block(messages, start, end, tools, multimodal)`: the tool
/// messages `messages[start..=end]`, reordered to follow the driving
/// assistant's `tool_calls` when every id is non-empty, unique and matched.
fn render_tool_block(
    messages: &[Value],
    start: usize,
    end: usize,
    tools: Option<&[Value]>,
    multimodal: bool,
) -> R<String> {
    // (message index, entry index or None, id) per tool result.
    let mut results: Vec<(usize, Option<usize>, String)> = Vec::new();
    for (index, message) in messages.iter().enumerate().take(end + 1).skip(start) {
        if is_list_of_outputs(message)? {
            let content = get(message, "content").unwrap_or(&NULL);
            for (entry_index, entry) in py_iter(content)?.iter().enumerate() {
                results.push((index, Some(entry_index), id_of(entry)?));
            }
        } else {
            results.push((index, None, id_of(message)?));
        }
    }

    let assistant = if start > 0 {
        Some(&messages[start - 1])
    } else {
        None
    };
    let tool_calls = match assistant {
        Some(a) if get_is(a, "role", "assistant") => get(a, "tool_calls").unwrap_or(&NULL),
        _ => &NULL,
    };

    let mut call_ids: Vec<String> = Vec::new();
    let mut can_sort = py::truthy(tool_calls);
    if can_sort {
        for tool_call in py_iter(tool_calls)? {
            call_ids.push(id_of(&tool_call)?);
        }
        let unique = |ids: &[&str]| {
            let mut seen = std::collections::HashSet::new();
            ids.iter().all(|id| seen.insert(*id))
        };
        let result_ids: Vec<&str> = results.iter().map(|r| r.2.as_str()).collect();
        let call_refs: Vec<&str> = call_ids.iter().map(String::as_str).collect();
        can_sort = !result_ids.contains(&"")
            && !call_refs.contains(&"")
            && unique(&result_ids)
            && unique(&call_refs)
            && result_ids.iter().all(|id| call_refs.contains(id));
    }

    let mut out = String::new();
    if !can_sort {
        for message in &messages[start..=end] {
            out.push_str(&render_tool_response(message, tools, multimodal)?);
        }
        return Ok(out);
    }

    let position = |id: &str| call_ids.iter().position(|c| c == id).unwrap_or(usize::MAX);
    // Stable, as Python's sorted().
    results.sort_by_key(|r| position(&r.2));
    for (index, entry_index, _) in &results {
        let message = &messages[*index];
        match entry_index {
            Some(entry_index) => {
                let content = get(message, "content").unwrap_or(&NULL);
                let entries = py_iter(content)?;
                out.push_str(&render_output(&entries[*entry_index], tools, multimodal)?);
            }
            None => out.push_str(&render_tool_response(message, tools, multimodal)?),
        }
    }
    Ok(out)
}

/// `_render_tool_call(tool_call, multimodal)`.
fn render_tool_call(tool_call: &Value, multimodal: bool) -> R<String> {
    let function = get(tool_call, "function").unwrap_or(&NULL);
    let tool_call = if py::truthy(function) {
        function
    } else {
        tool_call
    };
    let name = get(tool_call, "name");
    let mut out = String::from("<tool_call>");
    if multimodal {
        // GLM-5.3-Flash: `'<tool_call>' ~ tc.name` stringifies the name.
        out.push_str(&string(name)?);
    } else {
        // GLM-5.3: `'<tool_call>' + tc.name` is Python's +.
        match name {
            None => {
                return raise(
                    "ValueError",
                    "Each tool_call needs a `name`; the GLM-5.3 chat template \
                     reads `tc.name` without a guard.",
                )
            }
            Some(Value::String(n)) => out.push_str(n),
            Some(other) => {
                return raise(
                    "TypeError",
                    format!(
                        "can only concatenate str (not \"{}\") to str",
                        py::type_name(other)
                    ),
                )
            }
        }
    }
    let arguments = get(tool_call, "arguments").unwrap_or(&NULL);
    let Value::Object(arguments) = arguments else {
        return raise(
            "ValueError",
            format!(
                "tool_call `arguments` must be a JSON object, got {}.",
                py::type_name(arguments)
            ),
        );
    };
    for (key, value) in arguments {
        let dumped;
        let value = match value {
            Value::String(s) => s.as_str(),
            other => {
                dumped = py::json_dumps(other, &py::Dumps::UNICODE);
                dumped.as_str()
            }
        };
        let _ = write!(
            out,
            "<arg_key>{key}</arg_key><arg_value>{value}</arg_value>"
        );
    }
    out.push_str("</tool_call>");
    Ok(out)
}

/// `_render(messages, tools, add_generation_prompt, reasoning_effort,
/// clear_thinking, reasoning_content, multimodal)`. `reasoning_content` is
/// `None` for `Undefined`.
fn render(
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    reasoning_effort: &Value,
    clear_thinking: &Value,
    reasoning_content: Option<&Value>,
    multimodal: bool,
) -> R<Vec<String>> {
    let effort = match reasoning_effort {
        Value::String(s) if s == "low" => "Low",
        Value::String(s) if s == "high" => "High",
        _ => "Max",
    };
    let mut parts: Vec<String> = vec![
        "[gMASK]".into(),
        "<sop>".into(),
        "<|system|>".into(),
        format!("Reasoning Effort: {effort}"),
    ];

    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        parts.push("<|system|>".into());
        parts.push(TOOLS_PREFIX.into());
        for tool in tools {
            let tool = unwrap_tool(tool);
            if !get(tool, "defer_loading").is_some_and(py::truthy) {
                let mut json = tool_to_json(tool)?;
                json.push('\n');
                parts.push(json);
            }
        }
        parts.push(TOOLS_SUFFIX.into());
    }

    let last_user_index = messages
        .iter()
        .rposition(|message| get_is(message, "role", "user"));
    let clear_thinking = py::truthy(clear_thinking);

    let mut index = 0;
    while index < messages.len() {
        let message = &messages[index];
        let role = get(message, "role").and_then(Value::as_str);
        match role {
            Some("user") => {
                parts.push("<|user|>".into());
                parts.push(visible_text(get(message, "content"), multimodal)?);
            }
            Some("assistant") => {
                parts.push("<|assistant|>".into());
                let mut content = visible_text(get(message, "content"), multimodal)?;
                let mut reasoning: Option<Cow<'_, Value>> = get(message, "reasoning_content")
                    .filter(|r| r.is_string())
                    .map(Cow::Borrowed);
                if reasoning.is_none() {
                    if content.contains("</think>") {
                        let before = content.split("</think>").next().unwrap_or_default();
                        let thought = before.split("<think>").last().unwrap_or_default();
                        reasoning = Some(Cow::Owned(Value::String(thought.to_string())));
                        content = content
                            .split("</think>")
                            .last()
                            .unwrap_or_default()
                            .to_string();
                    } else {
                        // The template variable of that name: Undefined unless
                        // the caller passed `reasoning_content` as a kwarg.
                        reasoning = reasoning_content.map(Cow::Borrowed);
                    }
                }
                let keep = !clear_thinking || last_user_index.is_none_or(|last| index > last);
                match reasoning.as_deref() {
                    Some(Value::String(r)) if keep => parts.push(format!("<think>{r}</think>")),
                    Some(other) if keep => {
                        return raise(
                            "TypeError",
                            format!(
                                "can only concatenate str (not \"{}\") to str",
                                py::type_name(other)
                            ),
                        )
                    }
                    _ => parts.push("<think></think>".into()),
                }
                let stripped = py::strip(&content);
                if !stripped.is_empty() {
                    parts.push(stripped.to_string());
                }
                let tool_calls = get(message, "tool_calls").unwrap_or(&NULL);
                if py::truthy(tool_calls) {
                    for tool_call in py_iter(tool_calls)? {
                        parts.push(render_tool_call(&tool_call, multimodal)?);
                    }
                }
            }
            // A tool message after another was rendered with the block.
            Some("tool") if index == 0 || !get_is(&messages[index - 1], "role", "tool") => {
                let mut end = index;
                while end + 1 < messages.len() && get_is(&messages[end + 1], "role", "tool") {
                    end += 1;
                }
                parts.push("<|observation|>".into());
                parts.push(render_tool_block(messages, index, end, tools, multimodal)?);
                index = end;
            }
            Some("system") => {
                parts.push("<|system|>".into());
                parts.push(visible_text(get(message, "content"), multimodal)?);
            }
            _ => {}
        }
        index += 1;
    }

    if add_generation_prompt {
        parts.push("<|assistant|>".into());
        parts.push("<think>".into());
    }
    Ok(parts)
}

/// The keyword arguments `render_glm53_segments` reads from the template
/// variables: `reasoning_effort=None`, `clear_thinking=False`,
/// `reasoning_content=_UNDEFINED`; every other one goes to `**_`.
fn template_vars(kwargs: &Map<String, Value>) -> (&Value, &Value, Option<&Value>) {
    static FALSE: Value = Value::Bool(false);
    (
        kwargs.get("reasoning_effort").unwrap_or(&NULL),
        kwargs.get("clear_thinking").unwrap_or(&FALSE),
        kwargs.get("reasoning_content"),
    )
}

/// `render_glm53_segments(messages, tools, add_generation_prompt, **kwargs)`:
/// a GLM-5.3 (text-only) prompt as the strings it concatenates.
pub fn render_glm53_segments(
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
) -> Result<Vec<String>, Glm53Error> {
    let (effort, clear, reasoning) = template_vars(kwargs);
    render(
        messages,
        tools,
        add_generation_prompt,
        effort,
        clear,
        reasoning,
        false,
    )
}

/// `render_glm53_flash_segments(messages, tools, add_generation_prompt,
/// **kwargs)`: the same for GLM-5.3-Flash (multimodal).
pub fn render_glm53_flash_segments(
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
) -> Result<Vec<String>, Glm53Error> {
    let (effort, clear, reasoning) = template_vars(kwargs);
    render(
        messages,
        tools,
        add_generation_prompt,
        effort,
        clear,
        reasoning,
        true,
    )
}

/// `render_glm53(...)`: the joined prompt.
pub fn render_glm53(
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
) -> Result<String, Glm53Error> {
    Ok(render_glm53_segments(messages, tools, add_generation_prompt, kwargs)?.concat())
}

/// `render_glm53_flash(...)`: the joined prompt.
pub fn render_glm53_flash(
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
) -> Result<String, Glm53Error> {
    Ok(render_glm53_flash_segments(messages, tools, add_generation_prompt, kwargs)?.concat())
}

// --- template_detection.py / template selection ---------------------------------

/// `template_detection.is_glm53_template(template)`: `_is_glm53` on the text
/// (substring tests only; an empty template is not one).
pub fn is_glm53_template(template: &str) -> bool {
    !template.is_empty()
        && template.contains("[gMASK]<sop>")
        && template.contains("Reasoning Effort:")
        && !template.contains("enable_thinking")
        && template.contains("<tool_call>")
        && template.contains("<arg_key>")
        && template.contains("<arg_value>")
}

/// `may_replace_jinja_template(hf_chat_template)`: a str that is a GLM-5.3
/// template (`None` is the checkpoint having no template).
pub fn may_replace_jinja_template(hf_chat_template: Option<&str>) -> bool {
    hf_chat_template.is_some_and(is_glm53_template)
}

/// `resolve_python_chat_template(hf_config, hf_chat_template)`: the template
/// `TemplateManager.load_chat_template` installs in place of the checkpoint's
/// Jinja one when `--chat-template` is not given. `architectures` is
/// `hf_config.architectures or []` (only the first is read);
/// `hf_chat_template` is the template `_resolve_hf_chat_template` settled
/// on. `--chat-template glm-5.3` / `glm-5.3-flash` selects a template
/// without this check ([`Variant::from_name`]).
pub fn resolve_python_chat_template(
    architectures: &[String],
    hf_chat_template: Option<&str>,
) -> Option<Variant> {
    let variant = match architectures.first().map(String::as_str) {
        Some("GlmMoeDsaForCausalLM") => Variant::Glm53,
        Some("Glm5NextForConditionalGeneration") => Variant::Glm53Flash,
        _ => return None,
    };
    let template = hf_chat_template.filter(|t| is_glm53_template(t))?;
    let multimodal = template.contains("<|begin_of_image|>");
    (multimodal == (variant == Variant::Glm53Flash)).then_some(variant)
}

// --- python_chat_template.py ----------------------------------------------------

/// `_tool_schemas(tools)`: transformers' conversion before rendering (a
/// JSON value is a schema only when it is a dict).
fn tool_schemas(tools: Option<&[Value]>) -> R<Option<&[Value]>> {
    if let Some(tools) = tools {
        if tools.iter().any(|t| !t.is_object()) {
            return raise(
                "ValueError",
                "Tools should either be a JSON schema, or a callable function with \
                 type hints and a docstring suitable for auto-conversion to a schema.",
            );
        }
    }
    Ok(tools)
}

/// `_render_segments(tokenizer, template, conversation, tools, documents,
/// add_generation_prompt, kwargs)`. `kwargs` may hold `apply_chat_template`'s
/// own named arguments too: the template reads none of them.
/// `{**tokenizer.special_tokens_map, **kwargs}` adds variables the template
/// ignores and that cannot collide with its parameters, so it is left out.
/// `handling`: Python is inside an `except` block (see [`duplicate_keyword`]).
fn render_segments_impl(
    variant: Variant,
    conversation: &[Value],
    tools: Option<&[Value]>,
    documents: Option<&Value>,
    add_generation_prompt: bool,
    kwargs: &Map<String, Value>,
    handling: bool,
) -> R<Vec<String>> {
    if conversation.is_empty() {
        return raise(
            "ValueError",
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
        );
    }
    // A dict has no attribute `messages`: only a list starts a batch.
    let is_batched = conversation[0].is_array();
    let tool_schemas = tool_schemas(tools)?;
    if let Some(documents) = documents.filter(|d| !d.is_null()) {
        for document in py_iter(documents)? {
            if !document.is_object() {
                return raise(
                    "TypeError",
                    "Documents should be a list of dicts with 'title' and 'text' keys!",
                );
            }
        }
    }
    // `template.render_segments(messages=..., tools=..., documents=...,
    // add_generation_prompt=..., **template_kwargs)`: only `messages` can
    // still collide (the others are parameters of apply_chat_template).
    if kwargs.contains_key("messages") {
        return Err(duplicate_keyword(variant.function(), "messages", handling));
    }
    if is_batched {
        return Err(Glm53Error::Unmodelled(
            "a batch of conversations (the first message is a list)".into(),
        ));
    }
    match variant {
        Variant::Glm53 => {
            render_glm53_segments(conversation, tool_schemas, add_generation_prompt, kwargs)
        }
        Variant::Glm53Flash => {
            render_glm53_flash_segments(conversation, tool_schemas, add_generation_prompt, kwargs)
        }
    }
}

/// `render_chat_segments(tokenizer, template, messages, tools=...,
/// add_generation_prompt=..., template_kwargs=...)`: the segments, or
/// `Ok(None)` when a template kwarg names a parameter of
/// `apply_chat_template` (SGLang then calls [`apply_chat_template`]).
/// `handling`: whether this is `_apply_jinja_template`'s retry.
pub fn render_chat_segments(
    variant: Variant,
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    template_kwargs: &Map<String, Value>,
    handling: bool,
) -> Result<Option<Vec<String>>, Glm53Error> {
    if template_kwargs
        .keys()
        .any(|k| APPLY_CHAT_TEMPLATE_PARAMETERS.contains(&k.as_str()))
    {
        return Ok(None);
    }
    render_segments_impl(
        variant,
        messages,
        tools,
        None,
        add_generation_prompt,
        template_kwargs,
        handling,
    )
    .map(Some)
}

/// What the installed `apply_chat_template` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Rendered by the Python template.
    Text(String),
    /// Handed to the tokenizer's Jinja `apply_chat_template`.
    Jinja,
}

/// `tokenizer.apply_chat_template(messages, tokenize=False,
/// add_generation_prompt=..., tools=tools, return_dict=False,
/// **template_kwargs)` as `_render_and_encode_chat_template` calls it, with
/// the `apply_chat_template` that `install_python_chat_template` installs.
pub fn apply_chat_template(
    variant: Variant,
    conversation: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    template_kwargs: &Map<String, Value>,
    handling: bool,
) -> Result<Applied, Glm53Error> {
    // The call site's own keywords.
    if let Some(key) = template_kwargs.keys().find(|k| {
        matches!(
            k.as_str(),
            "tokenize" | "add_generation_prompt" | "tools" | "return_dict"
        )
    }) {
        return Err(duplicate_keyword(APPLY_CHAT_TEMPLATE, key, handling));
    }
    // `conversation` is passed positionally.
    if template_kwargs.contains_key("conversation") {
        return raise(
            "TypeError",
            "install_python_chat_template.<locals>.apply_chat_template() got multiple \
             values for argument 'conversation'",
        );
    }
    let chat_template = template_kwargs.get("chat_template").unwrap_or(&NULL);
    let flag = |k: &str| template_kwargs.get(k).is_some_and(py::truthy);
    if !chat_template.is_null()
        || flag("continue_final_message")
        || flag("return_assistant_tokens_mask")
    {
        return Ok(Applied::Jinja);
    }
    let segments = render_segments_impl(
        variant,
        conversation,
        tools,
        template_kwargs.get("documents"),
        add_generation_prompt,
        template_kwargs,
        handling,
    )?;
    Ok(Applied::Text(segments.concat()))
}

/// `[t["function"] if "function" in t else t for t in tools] if tools else
/// None`: `_apply_jinja_template`'s second try with the tools unwrapped.
fn flatten_tools(tools: Option<&[Value]>) -> R<Option<Vec<Value>>> {
    let Some(tools) = tools.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let mut flat = Vec::with_capacity(tools.len());
    for tool in tools {
        let has_function = match tool {
            Value::Object(map) => map.contains_key("function"),
            Value::String(s) => s.contains("function"),
            Value::Array(items) => items.iter().any(|i| i.as_str() == Some("function")),
            other => {
                return raise(
                    "TypeError",
                    format!(
                        "argument of type '{}' is not iterable",
                        py::type_name(other)
                    ),
                )
            }
        };
        if !has_function {
            flat.push(tool.clone());
            continue;
        }
        match tool {
            Value::Object(map) => flat.push(map["function"].clone()),
            Value::String(_) => {
                return raise("TypeError", "string indices must be integers, not 'str'")
            }
            _ => {
                return raise(
                    "TypeError",
                    "list indices must be integers or slices, not str",
                )
            }
        }
    }
    Ok(Some(flat))
}

/// One `_render_and_encode_chat_template` call (its branch for tokenizers
/// whose rendered text re-encodes faithfully, which GLM's do).
fn render_and_encode_chat_template(
    variant: Variant,
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    template_kwargs: &Map<String, Value>,
    handling: bool,
) -> R<Prompt> {
    if let Some(segments) = render_chat_segments(
        variant,
        messages,
        tools,
        add_generation_prompt,
        template_kwargs,
        handling,
    )? {
        return Ok(Prompt::Segments(segments));
    }
    Ok(
        match apply_chat_template(
            variant,
            messages,
            tools,
            add_generation_prompt,
            template_kwargs,
            handling,
        )? {
            Applied::Text(text) => Prompt::Text(text),
            Applied::Jinja => Prompt::Jinja,
        },
    )
}

/// The chat prompt SGLang renders with the Python template: the two
/// attempts `OpenAIServingChat._apply_jinja_template` makes of
/// `_render_and_encode_chat_template(messages, tools=tools,
/// template_kwargs=..., add_generation_prompt=...)`, the second with the
/// tools unwrapped after any exception, a `TypeError` of the second turned
/// into `ValueError`.
///
/// `messages`, `tools` and `template_kwargs` are exactly what SGLang passes
/// there (`openai_compatible_messages`, `[tool.model_dump() ...]` or `None`,
/// `extra_template_kwargs`); `add_generation_prompt` is
/// `request._format_add_generation_prompt is not False`. The route
/// ([`Prompt`]) depends on the kwargs only, so on [`Prompt::Jinja`] SGLang
/// renders as for a Jinja model, that retry included.
pub fn render_segments(
    variant: Variant,
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    template_kwargs: &Map<String, Value>,
) -> Result<Prompt, Glm53Error> {
    match render_and_encode_chat_template(
        variant,
        messages,
        tools,
        add_generation_prompt,
        template_kwargs,
        false,
    ) {
        Err(Glm53Error::Raised { .. }) => {}
        done => return done,
    }
    let flat = flatten_tools(tools)?;
    match render_and_encode_chat_template(
        variant,
        messages,
        flat.as_deref(),
        add_generation_prompt,
        template_kwargs,
        true,
    ) {
        Err(Glm53Error::Raised {
            exception: "TypeError",
            message,
        }) => raise("ValueError", message),
        done => done,
    }
}

/// The encoder: SGLang's GLM-5.3 Python template. `jinja` is
/// `tokenizer.chat_template`, which the installed `apply_chat_template`
/// still hands some calls to (a `chat_template` or `continue_final_message`
/// kwarg).
#[derive(Clone)]
pub struct Glm53Template {
    pub variant: Variant,
    pub jinja: super::Jinja,
}

impl super::ChatEncoder for Glm53Template {
    fn name(&self) -> &'static str {
        self.variant.name()
    }
    fn jinja(&self) -> Option<&super::Jinja> {
        Some(&self.jinja)
    }
    fn kwargs_reader(&self) -> Option<&str> {
        // Python code: any kwarg may be read.
        None
    }
    fn python_template(&self) -> Option<Variant> {
        Some(self.variant)
    }
    fn inline_system(&self) -> Option<bool> {
        Some(SUPPORTS_INLINE_SYSTEM)
    }
    fn owns_reasoning_history(&self) -> bool {
        false
    }
    fn message_style(&self) -> crate::preprocess::MessageStyle {
        crate::preprocess::MessageStyle::Template
    }
    fn reads_wire(&self) -> bool {
        false
    }
    fn reads_body(&self) -> bool {
        false
    }
    fn modelled_from(&self) -> Option<(crate::release::Release, &'static str)> {
        Some((
            crate::release::Release::V0523,
            "GLM-5.3's Python template is SGLang 0.5.23's",
        ))
    }
    fn counts_converted_apis(&self) -> bool {
        true
    }
    fn same_as(&self, other: &super::Encoder) -> bool {
        matches!(other, super::Encoder::Glm53(o)
            if self.variant == o.variant && self.jinja.same_as(&o.jinja))
    }

    /// `encode_prompt_segments` gives the ids of the joined text; some calls
    /// go to the Jinja template instead.
    fn prompt(
        &self,
        host: &dyn super::Host,
        inputs: &crate::preprocess::ChatInputs,
        clock: crate::Clock,
    ) -> Result<super::Prompt, crate::CountError> {
        let messages = inputs.messages.as_array().map_or(&[][..], Vec::as_slice);
        let tools = inputs.tools.as_ref().and_then(Value::as_array);
        let text = match render_segments(
            self.variant,
            messages,
            tools.map(Vec::as_slice),
            true,
            &inputs.template_kwargs(host.effort_variable()),
        )
        .map_err(glm53_error)?
        {
            Prompt::Segments(segments) => segments.concat(),
            Prompt::Text(text) => text,
            Prompt::Jinja => return host.jinja_prompt(inputs, clock),
        };
        Ok(host.template_text(text))
    }
}

/// The template's error as the counter reports it.
pub(crate) fn glm53_error(e: Glm53Error) -> crate::CountError {
    match e {
        Glm53Error::Raised { .. } => crate::CountError::Template(e.to_string()),
        Glm53Error::Unmodelled(why) => crate::CountError::Unsupported(format!(
            "the GLM-5.3 template would render this request in a way the guard does not reproduce: {why}"
        )),
    }
}

#[cfg(test)]
#[path = "glm53_tests.rs"]
mod tests;
