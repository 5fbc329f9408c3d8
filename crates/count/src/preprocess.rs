//! SGLang 0.5.23's chat preprocessing (`serving_chat.py`), mirrored step by step.
//!
//! The path from a `/v1/chat/completions` body to the inputs of
//! `tokenizer.apply_chat_template`:
//!
//! 1. pydantic validation of `ChatCompletionRequest` (`entrypoints/openai/protocol.py`),
//!    including its `mode="before"` validators `set_tool_choice_default` and
//!    `normalize_reasoning_inputs`;
//! 2. `OpenAIServingChat._validate_request` (request checks, tool-schema type rewrite);
//! 3. `_convert_to_internal_request` (pops `reasoning_effort` out of `chat_template_kwargs`);
//! 4. `_process_messages` (which tools reach the template; `input_ids` short-circuit);
//! 5. `_apply_jinja_template` (message dumps, tool-call argument decoding, null-key
//!    dropping, content-format joining, tool-message joining, trailing assistant),
//!    and the keyword arguments of `apply_chat_template`.
//!
//! Only fields that change the prompt are validated in full; a request SGLang would
//! refuse for an unrelated field may be counted here, which can only over-admit a
//! request SGLang itself then refuses.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::lookup::Lookup;
use super::py::{self, lax_bool, lax_int};
use super::release::{
    Consulted, EffortVariable, EncoderTools, ListContent, MessageFields, ReasoningInputs,
    TemplateKwargs, ToolCallArguments, ToolDump, ToolRetry, TrailingAssistant,
};
use super::serving::ServerConfig;
use super::template::ContentFormat;
use super::unicode;
use super::{invalid, invalid_param, CountError, MediaBounds, MediaKind};

/// A request of another chat-shaped API (`/v1/messages`, `/v1/responses`)
/// converted to the `ChatCompletionRequest` SGLang builds from it: the body
/// pydantic validates, plus how it then travels the chat path. Here, where
/// the converters (`anthropic`, `responses`) and the chat path that counts
/// it (`chat_api`) all meet.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    pub body: Value,
    pub options: Options,
}

/// `ReasoningEffortTier` in protocol.py: the reasoning tiers the chat path,
/// `/v1/responses` and harmony accept.
pub(crate) const EFFORT_TIERS: [&str; 8] = [
    "none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max",
];
/// `_GENERIC_MESSAGE_ROLES`.
const GENERIC_ROLES: [&str; 7] = [
    "system",
    "assistant",
    "tool",
    "function",
    "developer",
    "latest_reminder",
    "root",
];

/// Which stages of SGLang's chat path a request goes through besides pydantic
/// validation and `_process_messages`. The default is `/v1/chat/completions`
/// (and `/invocations`, and Anthropic's `/v1/messages`, which call the same
/// handler methods); `/v1/responses` builds its `ChatCompletionRequest` and calls
/// `_process_messages` directly (`serving_responses.py::_make_request`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// Skip `_validate_request` (its request checks and the tool-schema type
    /// rewrite); `_validate_media_content` still runs.
    pub skip_validate_request: bool,
    /// Skip `_convert_to_internal_request`, whose pop of
    /// `chat_template_kwargs["reasoning_effort"]` then does not happen: the key
    /// stays a template kwarg and overrides `reasoning_effort`, even with `null`.
    pub skip_convert_to_internal: bool,
    /// A `reasoning_effort` assigned to the built request after validation
    /// (Anthropic's `output_config.effort`): no validator sees it, so it sets no
    /// `thinking` kwargs.
    pub assigned_reasoning_effort: Option<Value>,
    /// The model's multimodal opt-in: media parts of a kind with a bound are
    /// admitted and charged that bound each; the others are refused.
    pub media: MediaBounds,
    /// `--default-chat-template-kwargs`, merged in by `_process_messages`.
    pub default_kwargs: Arc<Map<String, Value>>,
    /// `--trust-request-chat-template`: `_validate_request` lets a request's
    /// own `chat_template` kwarg through (the guard then refuses to count it).
    pub trust_request_chat_template: bool,
    /// How messages are handed to the encoder: the Jinja path's processing,
    /// or the DeepSeek-V3.2 encoder's.
    pub style: MessageStyle,
    /// The template mentions `low_effort` and `truncate_history_thinking`
    /// (SGLang's Nemotron-3-Super reasoning rule; see [`ChatInputs::low_effort_unsure`]).
    pub low_effort_template: bool,
    /// The model's encoder rebuilds the messages from the body itself (the
    /// DeepSeek encoders before 0.5.23): the Jinja branch's tool-call
    /// argument decoding, and its failures, are not SGLang's there.
    pub body_encoder: bool,
    /// `--tool-call-parser deepseekv3` (see [`super::release::ChatRules::deepseek_v3_tool_prompt`]).
    pub deepseek_v3_parser: bool,
    /// Also dump the request as recipe receives it ([`ChatInputs::wire`]).
    /// recipe serializes tool-call arguments itself, so its adapter also
    /// leaves arguments that are not a JSON object as they are
    /// (`strict_tool_call_arguments = False`).
    pub wire: bool,
}

/// Which of `_apply_jinja_template`'s branches shapes the messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MessageStyle {
    /// `process_content_for_template_format` in the template's content
    /// format, `None`-valued keys dropped, `normalize_tool_content`.
    #[default]
    Template,
    /// The dsv32 branch: list content flattened to text (those messages lose
    /// their `None` keys), the other messages keep every dumped key.
    Dsv32,
}

impl Options {
    /// The options a server configured as `server` applies to every request.
    pub fn for_server(server: &ServerConfig) -> Self {
        Options {
            default_kwargs: Arc::new(server.default_chat_template_kwargs.clone()),
            trust_request_chat_template: server.trust_request_chat_template,
            deepseek_v3_parser: server.tool_call_parser.as_deref() == Some("deepseekv3"),
            ..Options::default()
        }
    }

    /// `self` with the route's own stages of `route` (how a converted
    /// request travels the chat path).
    pub fn with(self, route: &Options) -> Self {
        Options {
            skip_validate_request: route.skip_validate_request,
            skip_convert_to_internal: route.skip_convert_to_internal,
            assigned_reasoning_effort: route.assigned_reasoning_effort.clone(),
            ..self
        }
    }
}

/// What SGLang renders for a chat request (and the ids it may take instead).
pub type Prepared = Box<ChatInputs>;

/// The arguments SGLang passes to `apply_chat_template`.
#[derive(Debug, Default, Clone)]
pub struct ChatInputs {
    /// The processed messages (a JSON array), keys in `model_dump` order.
    pub messages: Value,
    /// The dumped tools, or `None` (no tools / `tool_choice: "none"` / no match).
    pub tools: Option<Value>,
    /// The tools of SGLang's second attempt, when the first render raised.
    pub retry_tools: Option<Value>,
    /// Every request tool, dumped (the dsv32 encoder renders them all when
    /// any reaches the template).
    pub all_tools: Option<Value>,
    /// The model-specific encoder renders every request tool even when none
    /// reaches the template (`tool_choice: "none"`; [`EncoderTools`]).
    pub encoders_get_all_tools: bool,
    /// `chat_template_kwargs` (server defaults merged in), as SGLang passes
    /// them on; `reasoning_effort` goes before them as the release passes it
    /// ([`ChatInputs::template_kwargs`]; [`ChatInputs::jinja_arguments`]
    /// applies `apply_chat_template`'s own rules to them).
    pub extra: Map<String, Value>,
    /// `low_effort` was set in `extra` by SGLang's reasoning rule, which
    /// applies only if no earlier rule matched the template: the prompt is
    /// counted with and without it, and the larger count wins.
    pub low_effort_unsure: bool,
    /// `input_ids` given on the chat route (0.5.13), media bounds added: the
    /// prompt when the worker gets them, the rendered messages when a router
    /// drops them; the larger of the two is the count.
    pub given_ids: Option<usize>,
    /// The request body, for the encoders that dump its messages themselves
    /// (the DeepSeek encoders of releases before 0.5.23; set by the counter).
    pub body: Option<Arc<Value>>,
    /// The final assistant text under `continue_final_message`.
    pub assistant_prefix: Option<String>,
    /// The configured upper bounds of the admitted media parts, summed: added
    /// to the text's count (the multimodal opt-in; 0 without media).
    pub media_tokens: usize,
    /// `request.reasoning_effort` once `_process_messages` has filled it
    /// (the model-specific encoders read it, not the template kwarg).
    pub reasoning_effort: Option<Value>,
    /// The request as `model_dump(exclude_unset=True)` gives it (`wire.rs`),
    /// when [`Options::wire`] asks for it.
    pub wire: Option<Value>,
}

/// The kwargs as transformers' `apply_chat_template` splits them.
#[derive(Debug, Default)]
pub struct JinjaArguments {
    /// The template variables.
    pub extra: Map<String, Value>,
    /// `documents=`.
    pub documents: Option<Value>,
    /// `chat_template=`: rendered instead of the model's template.
    pub template_override: Option<String>,
}

impl ChatInputs {
    /// The template kwargs as a release passes them: `reasoning_effort` as
    /// its [`EffortVariable`] rule says, then `chat_template_kwargs`. (Applied
    /// here rather than in the preprocessing, so that requests which differ
    /// only in it between releases are still prepared once.)
    pub fn template_kwargs(&self, effort: EffortVariable) -> Map<String, Value> {
        let mut out = Map::new();
        match effort {
            EffortVariable::NotAField => {}
            EffortVariable::AlwaysMediumByDefault => {
                let effort = self
                    .reasoning_effort
                    .clone()
                    .unwrap_or_else(|| Value::String("medium".into()));
                out.insert("reasoning_effort".into(), effort);
            }
            EffortVariable::WhenSet => {
                if let Some(re) = &self.reasoning_effort {
                    out.insert("reasoning_effort".into(), re.clone());
                }
            }
        }
        for (k, v) in &self.extra {
            out.insert(k.clone(), v.clone());
        }
        out
    }

    /// `apply_chat_template`'s treatment of the kwargs (see
    /// [`apply_chat_template_arguments`]), as 0.5.10 and later pass them.
    pub fn jinja_arguments(&self) -> Result<JinjaArguments, CountError> {
        self.jinja_arguments_as(EffortVariable::WhenSet)
    }

    /// [`ChatInputs::jinja_arguments`] as a release passes `reasoning_effort`.
    pub fn jinja_arguments_as(&self, effort: EffortVariable) -> Result<JinjaArguments, CountError> {
        let mut extra = self.template_kwargs(effort);
        let (documents, template_override) = apply_chat_template_arguments(&mut extra)?;
        Ok(JinjaArguments {
            extra,
            documents,
            template_override,
        })
    }
}

// ---------------------------------------------------------------------------
// pydantic lax-mode scalars
// ---------------------------------------------------------------------------

fn opt_bool(obj: &Map<String, Value>, key: &str, loc: &str) -> Result<Option<bool>, CountError> {
    match obj.field(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => lax_bool(v)
            .map(Some)
            .ok_or_else(|| invalid(format!("{loc}.{key}: Input should be a valid boolean"))),
    }
}

fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    loc: &str,
) -> Result<Option<&'a str>, CountError> {
    match obj.field(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!(
            "{loc}.{key}: Input should be a valid string"
        ))),
    }
}

// ---------------------------------------------------------------------------
// Validated request model (only what shapes the prompt)
// ---------------------------------------------------------------------------

/// protocol.py `Function` (with its `key_order` capture).
#[derive(Debug, Clone)]
struct FunctionDef {
    key_order: Vec<String>,
    description: Option<String>,
    name: String,
    parameters: Option<Value>,
    strict: Option<bool>,
    defer_loading: Option<bool>,
}

/// protocol.py `Tool`.
#[derive(Debug, Clone)]
struct ToolDef {
    kind: String,
    function: FunctionDef,
    defer_loading: Option<bool>,
}

impl ToolDef {
    fn parse(v: &Value, loc: &str) -> Result<Self, CountError> {
        let o = v
            .as_object()
            .ok_or_else(|| invalid(format!("{loc}: Input should be a valid dictionary")))?;
        let kind = match o.field("type") {
            None => "function".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(invalid(format!(
                    "{loc}.type: Input should be a valid string"
                )))
            }
        };
        let floc = format!("{loc}.function");
        let f = match o.field("function") {
            Some(Value::Object(f)) => f,
            Some(_) => {
                return Err(invalid(format!(
                    "{floc}: Input should be a valid dictionary"
                )))
            }
            None => return Err(invalid(format!("{floc}: Field required"))),
        };
        let name = match f.field("name") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(invalid(format!(
                    "{floc}.name: Input should be a valid string"
                )))
            }
            None => return Err(invalid(format!("{floc}.name: Field required"))),
        };
        let mut function = FunctionDef {
            key_order: f.keys().cloned().collect(),
            description: opt_str(f, "description", &floc)?.map(str::to_owned),
            name,
            parameters: match f.field("parameters") {
                None | Some(Value::Null) => None,
                Some(p) => Some(p.clone()),
            },
            strict: opt_bool(f, "strict", &floc)?,
            defer_loading: opt_bool(f, "defer_loading", &floc)?,
        };
        let defer_loading = opt_bool(o, "defer_loading", loc)?;
        // `Tool._propagate_defer_loading`.
        if defer_loading.is_some() && function.defer_loading.is_none() {
            function.defer_loading = defer_loading;
        }
        Ok(ToolDef {
            kind,
            function,
            defer_loading,
        })
    }

    /// The tool as the release passes it to the template.
    fn dump_as(&self, how: ToolDump) -> Value {
        let wrapped = |function: Value, defer_loading: Option<Value>| {
            let mut out = Map::new();
            out.insert("type".into(), Value::String(self.kind.clone()));
            out.insert("function".into(), function);
            if let Some(d) = defer_loading {
                out.insert("defer_loading".into(), d);
            }
            Value::Object(out)
        };
        match how {
            ToolDump::Function => self.function_model_dump(false),
            ToolDump::Wrapped => wrapped(self.function_model_dump(false), None),
            ToolDump::WrappedDeferLoading => wrapped(
                self.function_model_dump(true),
                Some(self.defer_loading.map(Value::Bool).unwrap_or(Value::Null)),
            ),
            ToolDump::ClientKeys => self.dump(),
        }
    }

    /// `Function.model_dump()` of a model with `strict: bool = False` and no
    /// serializer: its fields in declaration order, `"strict": false` where
    /// the client set none; from 0.5.11 `defer_loading` when set.
    fn function_model_dump(&self, with_defer_loading: bool) -> Value {
        let f = &self.function;
        let mut func = Map::new();
        let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        func.insert("description".into(), text(&f.description));
        func.insert("name".into(), Value::String(f.name.clone()));
        func.insert(
            "parameters".into(),
            f.parameters.clone().unwrap_or(Value::Null),
        );
        func.insert("strict".into(), Value::Bool(f.strict.unwrap_or(false)));
        if let (true, Some(d)) = (with_defer_loading, f.defer_loading) {
            func.insert("defer_loading".into(), Value::Bool(d));
        }
        Value::Object(func)
    }

    /// `Tool.model_dump()` with `Function._serialize`: the function keeps the
    /// client's key order, drops `strict`/`defer_loading` when null, and appends
    /// the fields the client left out (`description: null`, `parameters: null`).
    fn dump(&self) -> Value {
        let f = &self.function;
        let mut fields: Vec<(&str, Value)> = vec![
            (
                "description",
                f.description
                    .clone()
                    .map(Value::String)
                    .unwrap_or(Value::Null),
            ),
            ("name", Value::String(f.name.clone())),
            ("parameters", f.parameters.clone().unwrap_or(Value::Null)),
        ];
        if let Some(s) = f.strict {
            fields.push(("strict", Value::Bool(s)));
        }
        if let Some(d) = f.defer_loading {
            fields.push(("defer_loading", Value::Bool(d)));
        }
        let mut func = Map::new();
        for k in &f.key_order {
            if let Some(pos) = fields.iter().position(|(fk, _)| fk == k) {
                let (fk, v) = fields.remove(pos);
                func.insert(fk.to_owned(), v);
            }
        }
        for (fk, v) in fields {
            func.insert(fk.to_owned(), v);
        }
        let mut out = Map::new();
        out.insert("type".into(), Value::String(self.kind.clone()));
        out.insert("function".into(), Value::Object(func));
        out.insert(
            "defer_loading".into(),
            self.defer_loading.map(Value::Bool).unwrap_or(Value::Null),
        );
        Value::Object(out)
    }
}

/// A content part after validation; only what a template can see is kept.
#[derive(Debug)]
enum Part<'a> {
    Text(&'a str),
    Thinking,
    Media(&'static str),
    ToolReference(&'a str),
}

#[derive(Debug)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

/// protocol.py `ToolCall` (dumped as `{id, index, type, function: {name, arguments}}`).
#[derive(Debug)]
struct ToolCall<'a> {
    id: Option<&'a str>,
    index: Option<i128>,
    name: Option<&'a str>,
    arguments: Option<&'a Value>,
}

/// `ChatCompletionMessageGenericParam` or `ChatCompletionMessageUserParam`.
#[derive(Debug)]
struct Message<'a> {
    /// Lowercased for generic roles; exactly "user" for user messages.
    role: String,
    is_user: bool,
    content: Option<Content<'a>>,
    tool_call_id: Option<&'a str>,
    name: Option<&'a str>,
    phase: Option<&'a str>,
    reasoning_content: Option<&'a str>,
    tool_calls: Option<Vec<ToolCall<'a>>>,
    tools: Option<Vec<ToolDef>>,
    prefix: Option<bool>,
}

fn parse_parts<'a>(items: &'a [Value], loc: &str) -> Result<Vec<Part<'a>>, CountError> {
    let mut parts = Vec::with_capacity(items.len());
    for (i, p) in items.iter().enumerate() {
        let ploc = format!("{loc}.{i}");
        let o = p
            .as_object()
            .ok_or_else(|| invalid(format!("{ploc}: Input should be a valid dictionary")))?;
        let kind = o.field("type").and_then(Value::as_str).unwrap_or("");
        let part = match kind {
            "text" => match o.field("text") {
                Some(Value::String(s)) => Part::Text(s),
                _ => return Err(invalid(format!("{ploc}.text: Input should be a valid string"))),
            },
            "thinking" | "reasoning" => {
                let thinking = opt_str(o, "thinking", &ploc)?;
                let text = opt_str(o, "text", &ploc)?;
                if thinking.is_none() == text.is_none() {
                    return Err(invalid(format!(
                        "{ploc}: Value error, thinking parts require exactly one of 'thinking' or 'text'"
                    )));
                }
                Part::Thinking
            }
            "image_url" => Part::Media("image_url"),
            "video_url" => Part::Media("video_url"),
            // `input_audio` validates into an `audio_url` part (`_to_audio_url_part`).
            "audio_url" | "input_audio" => Part::Media("audio_url"),
            "tool_reference" => match o.field("name") {
                Some(Value::String(s)) => Part::ToolReference(s),
                _ => return Err(invalid(format!("{ploc}.name: Input should be a valid string"))),
            },
            _ => {
                return Err(invalid(format!(
                    "{ploc}: Input tag '{kind}' found using 'type' does not match any of the expected content part types"
                )))
            }
        };
        parts.push(part);
    }
    Ok(parts)
}

fn parse_content<'a>(v: Option<&'a Value>, loc: &str) -> Result<Option<Content<'a>>, CountError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(Content::Text(s))),
        Some(Value::Array(a)) => Ok(Some(Content::Parts(parse_parts(
            a,
            &format!("{loc}.content"),
        )?))),
        Some(_) => Err(invalid(format!(
            "{loc}.content: Input should be a valid string or a list of content parts"
        ))),
    }
}

/// The `messages` item: `ChatCompletionMessageUserParam` for role "user",
/// else `ChatCompletionMessageGenericParam` (protocol.py), both as pydantic
/// validates them.
fn parse_message(v: &Value, i: usize) -> Result<Message<'_>, CountError> {
    let loc = format!("messages.{i}");
    let o = v
        .as_object()
        .ok_or_else(|| invalid(format!("{loc}: Input should be a valid dictionary")))?;
    let role = match o.field("role") {
        Some(Value::String(r)) => r,
        Some(_) => {
            return Err(invalid(format!(
                "{loc}.role: Value error, 'role' must be a string"
            )))
        }
        None => return Err(invalid(format!("{loc}.role: Field required"))),
    };
    if role == "user" {
        return parse_user_message(o, &loc);
    }
    let lower = normalize_role(role, &loc)?;
    let content = parse_content(o.field("content"), &loc)?;
    if lower != "assistant" {
        if let Some(Content::Parts(parts)) = &content {
            reject_thinking_parts(parts, &loc)?;
        }
    }
    let phase = opt_str(o, "phase", &loc)?;
    if let Some(p) = phase {
        if p != "commentary" && p != "final_answer" {
            return Err(invalid(format!(
                "{loc}.phase: Input should be 'commentary' or 'final_answer'"
            )));
        }
    }
    let tool_calls = match o.field("tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(j, tc)| parse_tool_call(tc, &format!("{loc}.tool_calls.{j}")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid(format!(
                "{loc}.tool_calls: Input should be a valid list"
            )))
        }
    };
    let tools = match o.field("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(j, t)| ToolDef::parse(t, &format!("{loc}.tools.{j}")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid(format!(
                "{loc}.tools: Input should be a valid list"
            )))
        }
    };
    Ok(Message {
        role: lower,
        is_user: false,
        content,
        tool_call_id: opt_str(o, "tool_call_id", &loc)?,
        name: opt_str(o, "name", &loc)?,
        phase,
        reasoning_content: opt_str(o, "reasoning_content", &loc)?,
        tool_calls,
        tools,
        prefix: opt_bool(o, "prefix", &loc)?,
    })
}

/// protocol.py `ChatCompletionMessageUserParam`: only role and content
/// survive the dump.
fn parse_user_message<'a>(o: &'a Map<String, Value>, loc: &str) -> Result<Message<'a>, CountError> {
    let content = match parse_content(o.field("content"), loc)? {
        Some(c) => c,
        None => {
            return Err(invalid(format!(
                "{loc}.content: Input should be a valid string"
            )))
        }
    };
    if let Content::Parts(parts) = &content {
        reject_thinking_parts(parts, loc)?;
    }
    Ok(Message {
        role: "user".into(),
        is_user: true,
        content: Some(content),
        tool_call_id: None,
        name: None,
        phase: None,
        reasoning_content: None,
        tool_calls: None,
        tools: None,
        prefix: None,
    })
}

/// Thinking parts are only valid in assistant messages.
fn reject_thinking_parts(parts: &[Part<'_>], loc: &str) -> Result<(), CountError> {
    if parts.iter().any(|p| matches!(p, Part::Thinking)) {
        return Err(invalid(format!(
            "{loc}: Value error, thinking content parts are only valid in assistant messages"
        )));
    }
    Ok(())
}

/// protocol.py `ChatCompletionMessageGenericParam._normalize_role`:
/// case-insensitive, lowercased. (`str.lower()` is Unicode-aware; a non-ASCII
/// role cannot match the ASCII role names either way.)
fn normalize_role(role: &str, loc: &str) -> Result<String, CountError> {
    let lower = role.to_lowercase();
    if !GENERIC_ROLES.contains(&lower.as_str()) {
        let allowed = GENERIC_ROLES
            .iter()
            .map(|r| format!("'{r}'"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(invalid(format!(
            "{loc}.role: Value error, 'role' must be one of {allowed} (case-insensitive)."
        )));
    }
    Ok(lower)
}

/// protocol.py `ToolCall` (with its `FunctionResponse`).
fn parse_tool_call<'a>(tc: &'a Value, tloc: &str) -> Result<ToolCall<'a>, CountError> {
    let t = tc
        .as_object()
        .ok_or_else(|| invalid(format!("{tloc}: Input should be a valid dictionary")))?;
    let index = match t.field("index") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            lax_int(v)
                .ok_or_else(|| invalid(format!("{tloc}.index: Input should be a valid integer")))?,
        ),
    };
    match t.field("type") {
        None => {}
        Some(Value::String(s)) if s == "function" => {}
        Some(_) => return Err(invalid(format!("{tloc}.type: Input should be 'function'"))),
    }
    let f = match t.field("function") {
        Some(Value::Object(f)) => f,
        Some(_) => {
            return Err(invalid(format!(
                "{tloc}.function: Input should be a valid dictionary"
            )))
        }
        None => return Err(invalid(format!("{tloc}.function: Field required"))),
    };
    let arguments = match f.field("arguments") {
        None | Some(Value::Null) => None,
        Some(a @ (Value::String(_) | Value::Object(_))) => Some(a),
        Some(_) => {
            return Err(invalid(format!(
                "{tloc}.function.arguments: Input should be a valid string or dictionary"
            )))
        }
    };
    Ok(ToolCall {
        id: opt_str(t, "id", tloc)?,
        index,
        name: opt_str(f, "name", &format!("{tloc}.function"))?,
        arguments,
    })
}

#[derive(Debug)]
enum ToolChoice {
    Auto,
    Required,
    None,
    Named(Option<String>),
}

// ---------------------------------------------------------------------------
// The request path
// ---------------------------------------------------------------------------

/// Runs SGLang's chat preprocessing on a raw body as 0.5.23 does, for the
/// tests. `format` is the template's content format
/// (`detect_jinja_template_content_format`).
#[cfg(test)]
pub fn prepare(body: &Value, format: ContentFormat) -> Result<Prepared, CountError> {
    let rules = Consulted::new(super::Release::V0523.chat_rules());
    prepare_with(body, format, &Options::default(), &rules)
}

/// SGLang's chat preprocessing on a raw body, for a request that reaches
/// `_process_messages` the way [`Options`] says.
/// `rules` are the release family's; the ones consulted are recorded in it.
pub fn prepare_with(
    body: &Value,
    format: ContentFormat,
    opts: &Options,
    rules: &Consulted,
) -> Result<Prepared, CountError> {
    let top = body
        .as_object()
        .ok_or_else(|| invalid("Input should be a valid dictionary"))?;
    let mut request = ChatCompletionRequest::validate(top, rules)?;
    // Assigned after construction: no validator runs on it.
    if let Some(effort) = &opts.assigned_reasoning_effort {
        request.reasoning_effort = Some(effort.clone());
    }
    let media_tokens = if opts.skip_validate_request {
        validate_media_content(&request.messages, &opts.media)?
    } else {
        validate_request(&mut request, opts, rules)?
    };
    if !opts.skip_convert_to_internal {
        convert_to_internal_request(&mut request, rules);
    }
    let stage = Stage {
        body,
        format,
        opts,
        rules,
        media_tokens,
    };
    process_messages(request, &stage)
}

/// What the steps after validation share besides the request: the raw body
/// (for the wire dump), the template's content format, the route's options,
/// and the bounds of the admitted media parts.
struct Stage<'a> {
    body: &'a Value,
    format: ContentFormat,
    opts: &'a Options,
    rules: &'a Consulted,
    media_tokens: usize,
}

/// protocol.py `ChatCompletionRequest`: the fields that shape the prompt,
/// after pydantic validation (the `mode="before"` validators included).
struct ChatCompletionRequest<'a> {
    top: &'a Map<String, Value>,
    messages: Vec<Message<'a>>,
    tools: Option<Vec<ToolDef>>,
    tool_choice: ToolChoice,
    reasoning_effort: Option<Value>,
    chat_template_kwargs: Option<Map<String, Value>>,
    continue_final_message: bool,
    input_ids: Option<usize>,
}

impl<'a> ChatCompletionRequest<'a> {
    /// `ChatCompletionRequest.model_validate(body)`: the `mode="before"`
    /// validators, then the fields in declaration order.
    fn validate(top: &'a Map<String, Value>, rules: &Consulted) -> Result<Self, CountError> {
        let raw_tool_choice = set_tool_choice_default(top);
        let (raw_effort, raw_ctk) = normalize_reasoning_inputs(top, rules)?;

        // --- field validation ---------------------------------------------------------
        let messages = match top.field("messages") {
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(invalid_param(
                    "messages: Input should be a valid list",
                    "messages",
                ))
            }
            None => return Err(invalid_param("messages: Field required", "messages")),
        };
        let messages = messages
            .iter()
            .enumerate()
            .map(|(i, m)| parse_message(m, i))
            .collect::<Result<Vec<_>, _>>()?;
        let tools: Option<Vec<ToolDef>> = match top.field("tools") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| ToolDef::parse(t, &format!("tools.{i}")))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(_) => {
                return Err(invalid_param(
                    "tools: Input should be a valid list",
                    "tools",
                ))
            }
        };
        let tool_choice = ToolChoice::validate(&raw_tool_choice)?;
        // Fields a release does not declare are dropped by pydantic, unread.
        let reasoning_effort = match raw_effort {
            Some(_) if rules.effort_variable() == EffortVariable::NotAField => None,
            raw => validate_reasoning_effort(raw)?,
        };
        let chat_template_kwargs: Option<Map<String, Value>> = match raw_ctk {
            None => None,
            Some(_) if rules.template_kwargs() == TemplateKwargs::NotAField => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => {
                return Err(invalid_param(
                    "chat_template_kwargs: Input should be a valid dictionary",
                    "chat_template_kwargs",
                ))
            }
        };
        let continue_final_message = match top.field("continue_final_message") {
            Some(_) if rules.trailing_assistant() == TrailingAssistant::AlwaysContinued => false,
            _ => validate_continue_final_message(top)?,
        };
        let input_ids = match top.field("input_ids") {
            Some(v) if !v.is_null() && !rules.chat_input_ids() => None,
            _ => validate_input_ids(top)?,
        };
        for key in [
            "return_sampling_mask",
            "return_meta_info",
            "return_flat_raw_output_top_logprobs",
        ] {
            if let Some(v) = top.field(key) {
                if lax_bool(v).is_none() {
                    return Err(invalid(format!("{key}: Input should be a valid boolean")));
                }
            }
        }
        Ok(ChatCompletionRequest {
            top,
            messages,
            tools,
            tool_choice,
            reasoning_effort,
            chat_template_kwargs,
            continue_final_message,
            input_ids,
        })
    }

    /// A boolean field as its lax validation reads it, `False` when unset or
    /// not a boolean.
    fn flag(&self, key: &str) -> bool {
        self.top.field(key).and_then(lax_bool).unwrap_or(false)
    }
}

/// protocol.py `ChatCompletionRequest.set_tool_choice_default` (`mode="before"`):
/// the raw `tool_choice`, `"none"` or `"auto"` when unset or null.
fn set_tool_choice_default(top: &Map<String, Value>) -> Value {
    match top.field("tool_choice") {
        None | Some(Value::Null) => {
            let tools_none = matches!(top.field("tools"), None | Some(Value::Null));
            if tools_none && !has_message_level_tools(top.field("messages")) {
                Value::String("none".into())
            } else {
                Value::String("auto".into())
            }
        }
        Some(v) => v.clone(),
    }
}

/// protocol.py `ChatCompletionRequest.normalize_reasoning_inputs`
/// (`mode="before"`): the raw `reasoning_effort` and `chat_template_kwargs`
/// after `reasoning` is folded in and `thinking`/`enable_thinking` set.
fn normalize_reasoning_inputs(
    top: &Map<String, Value>,
    rules: &Consulted,
) -> Result<(Option<Value>, Option<Value>), CountError> {
    let mut raw_effort: Option<Value> = top
        .field("reasoning_effort")
        .filter(|v| !v.is_null())
        .cloned();
    let mut raw_ctk: Option<Value> = top
        .field("chat_template_kwargs")
        .filter(|v| !v.is_null())
        .cloned();
    if raw_effort.is_none() && top.field("reasoning").is_none_or(Value::is_null) {
        // Every release's validator leaves such a request as it is.
        return Ok((raw_effort, raw_ctk));
    }
    let level = rules.reasoning_inputs();
    match level {
        ReasoningInputs::Ignored => return Ok((raw_effort, raw_ctk)),
        ReasoningInputs::EffortSetsBoth => {}
        ReasoningInputs::EnabledSetsThinking
        | ReasoningInputs::NoneTurnsThinkingOff
        | ReasoningInputs::EnabledSetsBoth => {
            legacy_reasoning_inputs(top, level, &mut raw_effort, &mut raw_ctk);
            return Ok((raw_effort, raw_ctk));
        }
    }
    let mut thinking: Option<bool> = None;
    if let Some(Value::Object(r)) = top.field("reasoning") {
        let effort = r
            .field("effort")
            .filter(|v| !v.is_null())
            .or_else(|| r.field("reasoning_effort").filter(|v| !v.is_null()));
        match effort {
            None => {}
            Some(Value::String(s)) if EFFORT_TIERS.contains(&s.as_str()) => {
                raw_effort = Some(Value::String(s.clone()))
            }
            Some(Value::Number(n)) => raw_effort = n.as_f64().map(Value::from),
            // `float(effort)`
            Some(Value::String(s)) => match py::float_of_str(s) {
                Some(f) => raw_effort = Some(Value::from(f)),
                None => {
                    return Err(invalid(format!(
                        "Value error, invalid reasoning effort: {}",
                        py::repr(&Value::String(s.clone()))
                    )))
                }
            },
            Some(other) => {
                return Err(invalid(format!(
                    "Value error, invalid reasoning effort: {}",
                    py::repr(other)
                )))
            }
        }
        let enabled = match r.field("enabled") {
            Some(v) if !v.is_null() => v.clone(),
            _ => r.field("enable").cloned().unwrap_or(Value::Bool(false)),
        };
        let enabled = match &enabled {
            // `enabled.strip().lower()`: Python's whitespace, U+001C..U+001F included.
            Value::String(s) => matches!(
                unicode::lower(py::strip(s)).as_str(),
                "1" | "true" | "yes" | "y" | "on"
            ),
            v => py::truthy(v),
        };
        if enabled {
            thinking = Some(true);
        }
    }
    if let Some(e) = &raw_effort {
        thinking = Some(e.as_str() != Some("none"));
    }
    if let Some(t) = thinking {
        let mut ctk = match raw_ctk.take() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        ctk.entry("thinking").or_insert(Value::Bool(t));
        ctk.entry("enable_thinking").or_insert(Value::Bool(t));
        raw_ctk = Some(Value::Object(ctk));
    }
    Ok((raw_effort, raw_ctk))
}

/// `normalize_reasoning_inputs` of 0.5.2 to 0.5.15: only the three (then
/// four) plain effort names move from `reasoning` to `reasoning_effort`; a
/// truthy `reasoning.enabled` sets `thinking` (from 0.5.12 also
/// `enable_thinking`); from 0.5.10 an effort of `"none"` sets both false.
fn legacy_reasoning_inputs(
    top: &Map<String, Value>,
    level: ReasoningInputs,
    raw_effort: &mut Option<Value>,
    raw_ctk: &mut Option<Value>,
) {
    let mut set_default = |key: &str, value: bool| {
        let mut ctk = match raw_ctk.take() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        ctk.entry(key).or_insert(Value::Bool(value));
        *raw_ctk = Some(Value::Object(ctk));
    };
    if let Some(Value::Object(r)) = top.field("reasoning") {
        // `r.get("effort") or r.get("reasoning_effort")`
        let effort = match r.field("effort") {
            Some(e) if py::truthy(e) => Some(e),
            _ => r.field("reasoning_effort"),
        };
        let names: &[&str] = if level == ReasoningInputs::EnabledSetsThinking {
            &["low", "medium", "high"]
        } else {
            &["none", "low", "medium", "high"]
        };
        if let Some(Value::String(e)) = effort {
            if names.contains(&e.as_str()) {
                *raw_effort = Some(Value::String(e.clone()));
            }
        }
        let enabled = match r.field("enabled") {
            Some(v) if !v.is_null() => v.clone(),
            _ => r.field("enable").cloned().unwrap_or(Value::Bool(false)),
        };
        let enabled = match &enabled {
            Value::String(s) => matches!(
                unicode::lower(py::strip(s)).as_str(),
                "1" | "true" | "yes" | "y" | "on"
            ),
            v => py::truthy(v),
        };
        if enabled {
            set_default("thinking", true);
            if level >= ReasoningInputs::EnabledSetsBoth {
                set_default("enable_thinking", true);
            }
        }
    }
    if level >= ReasoningInputs::NoneTurnsThinkingOff
        && raw_effort.as_ref().and_then(Value::as_str) == Some("none")
    {
        set_default("thinking", false);
        set_default("enable_thinking", false);
    }
}

impl ToolChoice {
    /// The `tool_choice` field: `Union[ToolChoice, Literal["auto", "required", "none"]]`.
    fn validate(raw: &Value) -> Result<Self, CountError> {
        match raw {
            Value::String(s) if s == "auto" => Ok(ToolChoice::Auto),
            Value::String(s) if s == "required" => Ok(ToolChoice::Required),
            Value::String(s) if s == "none" => Ok(ToolChoice::None),
            Value::Object(o) => {
                match o.field("type") {
                    None => {}
                    Some(Value::String(s)) if s == "function" => {}
                    Some(_) => {
                        return Err(invalid_param(
                            "tool_choice.type: Input should be 'function'",
                            "tool_choice",
                        ))
                    }
                }
                match o.field("function") {
                    Some(Value::Object(f)) => Ok(ToolChoice::Named(
                        opt_str(f, "name", "tool_choice.function")?.map(str::to_owned),
                    )),
                    _ => Err(invalid_param(
                        "tool_choice.function: Field required",
                        "tool_choice",
                    )),
                }
            }
            _ => Err(invalid_param(
                "tool_choice: Input should be 'auto', 'required', 'none' or a named function",
                "tool_choice",
            )),
        }
    }
}

/// The `reasoning_effort` field with its `validate_reasoning_effort_type`
/// (`mode="before"`): an effort tier or a float in [0.0, 0.99], never a bool.
fn validate_reasoning_effort(raw: Option<Value>) -> Result<Option<Value>, CountError> {
    match raw {
        None => Ok(None),
        Some(Value::Bool(_)) => Err(invalid_param(
            "reasoning_effort: Value error, reasoning_effort must not be a boolean",
            "reasoning_effort",
        )),
        Some(Value::String(s)) if EFFORT_TIERS.contains(&s.as_str()) => Ok(Some(Value::String(s))),
        Some(v) => {
            // The float arm of the union (lax: numeric strings), range [0.0, 0.99].
            let f = match &v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => py::lax_float_of_str(s),
                _ => None,
            };
            match f {
                Some(f) if f.is_finite() && (0.0..=0.99).contains(&f) => Ok(Some(Value::from(f))),
                _ => Err(invalid_param(
                    "reasoning_effort: Input should be one of the effort tiers or a number in [0.0, 0.99]",
                    "reasoning_effort",
                )),
            }
        }
    }
}

/// The `continue_final_message: bool = False` field (lax; an explicit null is refused).
fn validate_continue_final_message(top: &Map<String, Value>) -> Result<bool, CountError> {
    match top.field("continue_final_message") {
        None | Some(Value::Null) => {
            if top.field("continue_final_message").is_some() {
                return Err(invalid_param(
                    "continue_final_message: Input should be a valid boolean",
                    "continue_final_message",
                ));
            }
            Ok(false)
        }
        Some(v) => lax_bool(v).ok_or_else(|| {
            invalid_param(
                "continue_final_message: Input should be a valid boolean",
                "continue_final_message",
            )
        }),
    }
}

/// The `input_ids: Optional[List[int]]` field: how many ids, when given.
fn validate_input_ids(top: &Map<String, Value>) -> Result<Option<usize>, CountError> {
    match top.field("input_ids") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(ids)) => {
            for (i, id) in ids.iter().enumerate() {
                if lax_int(id).is_none() {
                    return Err(invalid_param(
                        format!("input_ids.{i}: Input should be a valid integer"),
                        "input_ids",
                    ));
                }
            }
            Ok(Some(ids.len()))
        }
        Some(_) => Err(invalid_param(
            "input_ids: Input should be a valid list",
            "input_ids",
        )),
    }
}

/// serving_chat.py `OpenAIServingChat._validate_request` (the checks that can
/// refuse a request whose prompt the guard counts), with the tool-schema type
/// rewrite it makes in place. Returns what [`validate_media_content`] charges.
fn validate_request(
    request: &mut ChatCompletionRequest<'_>,
    opts: &Options,
    rules: &Consulted,
) -> Result<usize, CountError> {
    if request.messages.is_empty() {
        return Err(invalid("Messages cannot be empty."));
    }
    if !opts.trust_request_chat_template
        && request
            .chat_template_kwargs
            .as_ref()
            .is_some_and(|m| !m.is_empty() && m.contains_key("chat_template"))
    {
        return Err(invalid(
            "Request-supplied chat_template is not allowed. Start the server with --trust-request-chat-template to permit it.",
        ));
    }
    if request.flag("return_sampling_mask") && !request.flag("return_meta_info") {
        return Err(invalid(
            "return_sampling_mask requires return_meta_info=true.",
        ));
    }
    if request.flag("return_flat_raw_output_top_logprobs") && !request.flag("return_meta_info") {
        return Err(invalid(
            "return_flat_raw_output_top_logprobs requires return_meta_info=true.",
        ));
    }
    let media_tokens = validate_media_content(&request.messages, &opts.media)?;
    let effective_tools = effective_tools(request);
    let has_message_tools = message_level_tools(&request.messages).next().is_some();
    if matches!(request.tool_choice, ToolChoice::Required) && effective_tools.is_empty() {
        return Err(invalid(
            "Tools cannot be empty if tool choice is set to required.",
        ));
    }
    if let ToolChoice::Named(name) = &request.tool_choice {
        if effective_tools.is_empty() {
            return Err(invalid(
                "Tools cannot be empty if tool choice is set to a specific tool.",
            ));
        }
        if !effective_tools
            .iter()
            .any(|t| Some(&t.function.name) == name.as_ref())
        {
            let shown = name.as_deref().unwrap_or("None");
            return Err(invalid(format!("Tool '{shown}' not found in tools list.")));
        }
    }
    if has_message_tools {
        let mut seen = std::collections::HashSet::new();
        if !effective_tools
            .iter()
            .all(|t| seen.insert(t.function.name.as_str()))
        {
            return Err(invalid(
                "Tool names must be unique across request and message tools.",
            ));
        }
    }
    validate_tool_definitions(request, rules)?;
    Ok(media_tokens)
}

/// serving_chat.py `OpenAIServingChat._validate_media_content`: every fixture
/// is a text-only model. With the model's multimodal opt-in, a kind with a
/// bound is admitted and charged it; returns the bounds summed.
fn validate_media_content(
    messages: &[Message<'_>],
    media: &MediaBounds,
) -> Result<usize, CountError> {
    let mut media_tokens = 0usize;
    for m in messages {
        if let Some(Content::Parts(parts)) = &m.content {
            for p in parts {
                let Part::Media(t) = p else { continue };
                let kind = media_kind(t);
                let bound = media.bound(kind).ok_or_else(|| {
                    // SGLang's own words for a text-only model, then the guard's fix.
                    CountError::Unsupported(format!(
                        "Model only supports text input; received unsupported content type '{t}'. \
                         The guard admits media only when the model opts in: set {} to an upper \
                         bound of the tokens one item takes.",
                        kind.opt_in()
                    ))
                })?;
                media_tokens = media_tokens.saturating_add(bound);
            }
        }
    }
    Ok(media_tokens)
}

/// The tools of the root/system/developer messages, in message order (the
/// second half of `_effective_tools`).
fn message_level_tools<'m, 'a: 'm>(
    messages: &'m [Message<'a>],
) -> impl Iterator<Item = &'m ToolDef> + use<'m, 'a> {
    messages
        .iter()
        .filter(|m| matches!(m.role.as_str(), "root" | "system" | "developer"))
        .flat_map(|m| m.tools.iter().flatten())
}

/// serving_chat.py `OpenAIServingChat._effective_tools`: the request tools,
/// then the message tools of root/system/developer messages.
fn effective_tools<'r>(request: &'r ChatCompletionRequest<'_>) -> Vec<&'r ToolDef> {
    request
        .tools
        .iter()
        .flatten()
        .chain(message_level_tools(&request.messages))
        .collect()
}

/// The "Validate tool definitions" loop of `_validate_request`: the type
/// rewrite (`normalize_json_schema_types`) mutates the request's tools in
/// place, so the rewritten schema is what the template renders.
fn validate_tool_definitions(
    request: &mut ChatCompletionRequest<'_>,
    rules: &Consulted,
) -> Result<(), CountError> {
    let request_tools = request.tools.iter_mut().flatten();
    let message_tools = request
        .messages
        .iter_mut()
        .filter(|m| matches!(m.role.as_str(), "root" | "system" | "developer"))
        .flat_map(|m| m.tools.iter_mut().flatten());
    for (i, tool) in request_tools.chain(message_tools).enumerate() {
        if let Some(p) = tool.function.parameters.as_mut() {
            if rules.schema_types_rewritten() {
                normalize_json_schema_types(p);
            }
            if let Err(e) = check_schema(p, 0) {
                return Err(invalid(format!(
                    "Tool {i} function has invalid 'parameters' schema: {e}"
                )));
            }
        }
    }
    Ok(())
}

/// serving_chat.py `OpenAIServingChat._convert_to_internal_request`: pops
/// `chat_template_kwargs["reasoning_effort"]` into `reasoning_effort`.
fn convert_to_internal_request(request: &mut ChatCompletionRequest<'_>, rules: &Consulted) {
    if let Some(m) = request.chat_template_kwargs.as_mut() {
        // Before 0.5.1 no field takes it: it stays a template kwarg.
        if m.contains_key("reasoning_effort")
            && rules.effort_variable() != EffortVariable::NotAField
        {
            if let Some(v) = m.shift_remove("reasoning_effort") {
                if !v.is_null() {
                    request.reasoning_effort = Some(v);
                }
            }
        }
    }
}

/// serving_chat.py `OpenAIServingChat._process_messages`: the server's
/// default kwargs, the `input_ids` short-circuit, which tools reach the
/// template; then [`apply_jinja_template`].
fn process_messages(
    mut request: ChatCompletionRequest<'_>,
    stage: &Stage<'_>,
) -> Result<Prepared, CountError> {
    // The server's `--default-chat-template-kwargs`, under the request's own.
    let defaults = &stage.opts.default_kwargs;
    if !defaults.is_empty() {
        let merged = request.chat_template_kwargs.get_or_insert_with(Map::new);
        for (k, v) in defaults.iter() {
            if !merged.contains_key(k) {
                merged.insert(k.clone(), v.clone());
            }
        }
        if request.reasoning_effort.is_none() {
            if let Some(e) = merged.field("reasoning_effort").filter(|e| !e.is_null()) {
                request.reasoning_effort = Some(e.clone());
            }
        }
    }
    // `input_ids` (0.5.13) replace the template on a worker that gets them;
    // sglang-router drops the field when it forwards a chat in PD mode, and
    // the worker then renders the messages. The guard cannot see which: both
    // are counted, and the larger wins.
    let given_ids = match request.input_ids {
        Some(0) => return Err(invalid_param("input_ids cannot be empty.", "input_ids")),
        // Media parts still reach the processor: their bounds are charged too.
        Some(n) => Some(n.saturating_add(stage.media_tokens)),
        None => None,
    };
    let has_effective_tools = !effective_tools(&request).is_empty();
    let tools = &request.tools;
    let template_tools: Option<Value> =
        if has_effective_tools && !matches!(request.tool_choice, ToolChoice::None) {
            match &request.tool_choice {
                ToolChoice::Named(name) => {
                    let picked: Vec<Value> = tools
                        .iter()
                        .flatten()
                        .filter(|t| Some(&t.function.name) == name.as_ref())
                        .map(|t| t.dump_as(stage.rules.tool_dump()))
                        .collect();
                    (!picked.is_empty()).then_some(Value::Array(picked))
                }
                _ => match tools {
                    Some(ts) if !ts.is_empty() => {
                        let how = stage.rules.tool_dump();
                        Some(Value::Array(ts.iter().map(|t| t.dump_as(how)).collect()))
                    }
                    _ => None,
                },
            }
        } else {
            None
        };
    let mut inputs = apply_jinja_template(request, template_tools, stage)?;
    inputs.given_ids = given_ids;
    Ok(inputs)
}

/// serving_chat.py `OpenAIServingChat._apply_jinja_template`, up to the
/// `apply_chat_template` call: the processed messages, the assistant prefix,
/// and the template kwargs (`reasoning_effort`, then `chat_template_kwargs`).
fn apply_jinja_template(
    request: ChatCompletionRequest<'_>,
    tools: Option<Value>,
    stage: &Stage<'_>,
) -> Result<Prepared, CountError> {
    let opts = stage.opts;
    let rules = stage.rules;
    let mut processed: Vec<Value> = Vec::with_capacity(request.messages.len());
    if let Some(system) = deepseek_v3_tool_prompt(tools.as_ref(), stage) {
        processed.push(system);
    }
    for m in &request.messages {
        let split = matches!(m.content, Some(Content::Parts(_)))
            && rules.list_content() == ListContent::OneMessagePerTextPart;
        if split {
            processed.extend(one_message_per_text_part(m, rules)?);
        } else {
            let strict_arguments = !(opts.wire || opts.body_encoder);
            processed.push(process_message(
                m,
                stage.format,
                opts.style,
                strict_arguments,
                rules,
            )?);
        }
    }
    let assistant_prefix =
        handle_last_assistant_message(&mut processed, request.continue_final_message, rules)?;

    // Template kwargs: `chat_template_kwargs` (`reasoning_effort` goes
    // before them where the release passes it: `ChatInputs::template_kwargs`).
    let mut extra = Map::new();
    if let Some(m) = request.chat_template_kwargs {
        if !m.is_empty() && rules.template_kwargs() == TemplateKwargs::PassedToTokenizingCall {
            refuse_tokenizer_arguments(&m)?;
        }
        for (k, v) in m {
            extra.insert(k, v);
        }
    }
    // `rc.effort_kwarg`: `reasoning_effort == "low"` sets `low_effort` on a
    // template SGLang detects as Nemotron-3-Super's, when that detection
    // rule is the first to match (an earlier one may: both are counted).
    let mut low_effort_unsure = false;
    if opts.low_effort_template
        && request.reasoning_effort.as_ref().and_then(Value::as_str) == Some("low")
        && !extra.contains_key("low_effort")
        && rules.low_effort()
    {
        extra.insert("low_effort".into(), Value::Bool(true));
        low_effort_unsure = true;
    }
    let all_tools = request
        .tools
        .as_ref()
        .filter(|ts| !ts.is_empty())
        .map(|ts| {
            let how = rules.tool_dump();
            Value::Array(ts.iter().map(|t| t.dump_as(how)).collect())
        });
    // Only the DeepSeek-V3.2 branch reads `all_tools` (the others render `tools`).
    let encoders_get_all_tools = opts.style == MessageStyle::Dsv32
        && all_tools.is_some()
        && rules.encoder_tools() == EncoderTools::EveryRequestTool;
    let retry_tools = tools.as_ref().map(|t| retry_tools(t, rules.tool_retry()));

    Ok(Box::new(ChatInputs {
        messages: Value::Array(processed),
        tools,
        retry_tools,
        all_tools,
        encoders_get_all_tools,
        extra,
        low_effort_unsure,
        body: None,
        assistant_prefix,
        given_ids: None,
        media_tokens: stage.media_tokens,
        reasoning_effort: request.reasoning_effort,
        wire: if opts.wire {
            Some(super::wire::dump(stage.body)?)
        } else {
            None
        },
    }))
}

/// `adapter.py` (0.4.5.post3 to 0.4.6.post2) under `--tool-call-parser
/// deepseekv3`: a system message describing the template's tools, before
/// the conversation. The text is the f-string's, indentation included.
fn deepseek_v3_tool_prompt(tools: Option<&Value>, stage: &Stage<'_>) -> Option<Value> {
    let tools = tools?.as_array().filter(|t| !t.is_empty())?;
    if !stage.opts.deepseek_v3_parser || !stage.rules.deepseek_v3_tool_prompt() {
        return None;
    }
    let mut content = String::from(
        "You are a helpful Assistant.\n                    ## Tools\n                    ### Function\n                    \
         You have the following functions available:\n                    ",
    );
    for tool in tools {
        let name = match tool.field("name") {
            Some(Value::String(n)) => n.clone(),
            Some(v) => py::str(v, py::Repr::Py311)
                .map(|s| s.into_owned())
                .unwrap_or_default(),
            None => String::new(),
        };
        content.push_str("\n                        - `");
        content.push_str(&name);
        content.push_str("`:\n                        ```json\n                        ");
        content.push_str(&py::json_dumps(tool, &py::Dumps::default()));
        content.push_str("\n                        ```\n                        ");
    }
    let mut m = Map::new();
    m.insert("role".into(), Value::String("system".into()));
    m.insert("content".into(), Value::String(content));
    Some(Value::Object(m))
}

/// `adapter.py` (before 0.4.7): a message with list content becomes one
/// message per text part, each with the message's other keys (`None`s
/// dropped) and the part's text as content; other parts are dropped, and a
/// list without text parts leaves no message at all.
fn one_message_per_text_part(m: &Message<'_>, rules: &Consulted) -> Result<Vec<Value>, CountError> {
    let Some(Content::Parts(parts)) = &m.content else {
        unreachable!("called on list content only")
    };
    let fields = model_dump(m, true, rules, false)?;
    let mut out = Vec::new();
    for p in parts {
        let Part::Text(text) = p else { continue };
        let mut msg = Map::new();
        for (k, v) in &fields {
            if *k == "content" {
                msg.insert("content".into(), Value::String((*text).to_owned()));
            } else if let Some(v) = v {
                msg.insert((*k).to_owned(), v.clone());
            }
        }
        out.push(Value::Object(msg));
    }
    Ok(out)
}

/// Releases before 0.5.13 render with `apply_chat_template(tokenize=True,
/// **chat_template_kwargs)`: a tokenizer argument among the kwargs acts on
/// the ids (`padding` to `max_length`, `truncation`, ...), which the guard
/// does not reproduce.
fn refuse_tokenizer_arguments(kwargs: &Map<String, Value>) -> Result<(), CountError> {
    for key in [
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    ] {
        if kwargs
            .get(key)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
        {
            return Err(CountError::Unsupported(format!(
                "chat_template_kwargs.{key}: SGLang before 0.5.13 passes it to the tokenizer, where it \
                 changes the prompt ids; the guard does not count such prompts"
            )));
        }
    }
    Ok(())
}

/// The tools of SGLang's second render attempt.
fn retry_tools(tools: &Value, how: ToolRetry) -> Value {
    let Some(list) = tools.as_array() else {
        return tools.clone();
    };
    Value::Array(
        list.iter()
            .map(|t| match (how, t.field("function")) {
                (ToolRetry::FunctionOnly, Some(f)) if t.is_object() => f.clone(),
                (ToolRetry::FunctionOnly, _) => t.clone(),
                (ToolRetry::WrapInFunction, Some(_)) if t.is_object() => t.clone(),
                (ToolRetry::WrapInFunction, _) => {
                    let mut w = Map::new();
                    w.insert("function".into(), t.clone());
                    Value::Object(w)
                }
            })
            .collect(),
    )
}

/// A final assistant message with text content, as the release handles it:
/// the assistant prefix to continue, kept as a turn, or (from 0.5.8,
/// `_handle_last_assistant_message`) re-sent as a user message.
fn handle_last_assistant_message(
    processed: &mut Vec<Value>,
    continue_final_message: bool,
    rules: &Consulted,
) -> Result<Option<String>, CountError> {
    let last_is_assistant = processed
        .last()
        .is_some_and(|last| last.field("role").and_then(Value::as_str) == Some("assistant"));
    if !last_is_assistant {
        return Ok(None);
    }
    let continued = match rules.trailing_assistant() {
        TrailingAssistant::AlwaysContinued => true,
        TrailingAssistant::KeptAsAssistantTurn => continue_final_message,
        TrailingAssistant::BecomesUserTurn => {
            if !processed
                .last()
                .and_then(|m| m.field("content"))
                .is_some_and(Value::is_string)
            {
                return Ok(None);
            }
            continue_final_message
        }
    };
    if !continued {
        if rules.trailing_assistant() == TrailingAssistant::BecomesUserTurn {
            let Some(Value::Object(mut last)) = processed.pop() else {
                return Ok(None);
            };
            let text = last
                .remove("content")
                .unwrap_or(Value::String(String::new()));
            let mut user = Map::new();
            user.insert("role".into(), Value::String("user".into()));
            user.insert("content".into(), text);
            processed.push(Value::Object(user));
        }
        return Ok(None);
    }
    let Some(Value::Object(mut last)) = processed.pop() else {
        return Ok(None);
    };
    match last.remove("content") {
        Some(Value::String(s)) => Ok(Some(s)),
        // `tokenizer.encode(list)` raises: SGLang answers with an error.
        _ => Err(invalid(
            "continue_final_message: the final assistant message's content is not text",
        )),
    }
}

/// The kind of a validated media part (`image_url`, `video_url`, `audio_url`).
fn media_kind(part_type: &str) -> MediaKind {
    match part_type {
        "image_url" => MediaKind::Image,
        "video_url" => MediaKind::Video,
        _ => MediaKind::Audio,
    }
}

/// `apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
/// tools=tools, return_dict=False, **template_kwargs)` and the
/// `render(messages=..., tools=..., documents=..., add_generation_prompt=..., **kwargs)`
/// inside it: keys that collide with those keyword arguments raise `TypeError`
/// (both of SGLang's attempts fail, so the request is refused); keys that are
/// named parameters of `apply_chat_template` are consumed and never reach the
/// template. Returns `documents` and the `chat_template` that replaces the model's.
/// The only copy of these rules: the template engine renders every kwarg left
/// here as a variable.
/// `apply_chat_template`'s own parameters (and the names SGLang passes it):
/// as template kwargs they act on the call, whether or not the template
/// reads them ([`apply_chat_template_arguments`]).
pub const APPLY_CHAT_TEMPLATE_PARAMETERS: [&str; 16] = [
    "conversation",
    "conversations",
    "messages",
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
];

fn apply_chat_template_arguments(
    extra: &mut Map<String, Value>,
) -> Result<(Option<Value>, Option<String>), CountError> {
    for key in [
        "tokenize",
        "tools",
        "add_generation_prompt",
        "return_dict",
        "conversation",
        "conversations",
        "messages",
    ] {
        if extra.contains_key(key) {
            return Err(CountError::Template(format!(
                "apply_chat_template() got multiple values for keyword argument '{key}'"
            )));
        }
    }
    // `chat_template=` replaces the model's template: the server's default
    // kwargs may carry one (the counter has it compiled); one from the
    // request (`/v1/responses` skips `_validate_request`'s refusal, as does
    // `--trust-request-chat-template`) the counter refuses.
    let template_override = match extra.shift_remove("chat_template") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(CountError::Unsupported(
            "chat_template_kwargs.chat_template: SGLang would render a template supplied by the \
                 request; the guard does not count prompts with client templates"
                .into(),
        )),
    };
    // Consumed; with tokenize=False they have no effect.
    for key in [
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "tokenizer_kwargs",
    ] {
        extra.shift_remove(key);
    }
    if extra
        .shift_remove("continue_final_message")
        .is_some_and(|v| py::truthy(&v))
    {
        return Err(invalid(
            "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you \
             want the model to continue the final message, and add_generation_prompt when you want to add a header \
             that will prompt it to start a new assistant message instead.",
        ));
    }
    if extra
        .shift_remove("return_assistant_tokens_mask")
        .is_some_and(|v| py::truthy(&v))
    {
        return Err(invalid(
            "`return_assistant_tokens_mask=True` requires `return_dict=True` and `tokenize=True`",
        ));
    }
    // `render_jinja_template` iterates documents and requires each to be a dict.
    let documents = match extra.shift_remove("documents") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.iter().all(Value::is_object) => Some(Value::Array(a)),
        Some(Value::Object(o)) if o.is_empty() => Some(Value::Object(o)),
        Some(Value::String(s)) if s.is_empty() => Some(Value::String(s)),
        Some(_) => {
            return Err(CountError::Template(
                "Documents should be a list of dicts with 'title' and 'text' keys!".into(),
            ))
        }
    };
    Ok((documents, template_override))
}

/// One message through `_apply_jinja_template`: `msg.model_dump()` →
/// `normalize_assistant_tool_call_arguments` → `content=""` for None →
/// `process_content_for_template_format` → `normalize_tool_content`.
fn process_message(
    m: &Message<'_>,
    format: ContentFormat,
    style: MessageStyle,
    strict_arguments: bool,
    rules: &Consulted,
) -> Result<Value, CountError> {
    let fields = model_dump(m, strict_arguments, rules, style == MessageStyle::Dsv32)?;
    let list_content: Option<&[Part<'_>]> = match &m.content {
        Some(Content::Parts(p)) => Some(p.as_slice()),
        _ => None,
    };
    if style == MessageStyle::Dsv32 {
        return dsv32_message(fields, list_content);
    }
    let mut out = process_content_for_template_format(fields, list_content, format);
    if m.role == "tool"
        && out.field("content").is_some_and(Value::is_array)
        && rules.tool_content_joined()
    {
        normalize_tool_content(&mut out);
    }
    Ok(Value::Object(out))
}

/// A dumped message: its fields in `model_dump` order, `None` marking a null
/// value (dropped or kept depending on the branch).
type Dumped = Vec<(&'static str, Option<Value>)>;

/// `msg.model_dump()` with `normalize_assistant_tool_call_arguments` applied
/// and `content=""` for a `None` content; list content is left out (its
/// entry is `None`) for the caller to process.
/// `keeps_none`: the caller keeps `None`-valued keys (the DeepSeek-V3.2
/// branch), so which keys exist matters even when none is set.
fn model_dump(
    m: &Message<'_>,
    strict_arguments: bool,
    rules: &Consulted,
    keeps_none: bool,
) -> Result<Dumped, CountError> {
    let mut fields: Dumped = Vec::with_capacity(9);
    fields.push(("role", Some(Value::String(m.role.clone()))));
    let text_content = match &m.content {
        Some(Content::Text(s)) => Some((*s).to_owned()),
        // content None becomes "".
        None => Some(String::new()),
        Some(Content::Parts(_)) => None,
    };
    fields.push(("content", text_content.map(Value::String)));
    if m.is_user {
        return Ok(fields);
    }
    // Which keys the release's message model has; asked only of a message
    // that sets one of them (their `None`s are dropped on the template path).
    let sets_any = m.tool_call_id.is_some()
        || m.name.is_some()
        || m.phase.is_some()
        || m.reasoning_content.is_some()
        || m.tool_calls.is_some()
        || m.tools.is_some()
        || m.prefix.is_some();
    let keys = if sets_any || keeps_none {
        rules.message_fields()
    } else {
        MessageFields::Prefix
    };
    if keys == MessageFields::RoleAndContent {
        return Ok(fields);
    }
    let s = |v: Option<&str>| v.map(|s| Value::String(s.to_owned()));
    fields.push(("tool_call_id", s(m.tool_call_id)));
    fields.push(("name", s(m.name)));
    if keys >= MessageFields::Phase {
        fields.push(("phase", s(m.phase)));
    }
    fields.push(("reasoning_content", s(m.reasoning_content)));
    let tool_calls = match &m.tool_calls {
        None => None,
        Some(calls) => {
            let mut out = Vec::with_capacity(calls.len());
            for c in calls {
                out.push(dump_tool_call(c, &m.role, strict_arguments, rules)?);
            }
            Some(Value::Array(out))
        }
    };
    fields.push(("tool_calls", tool_calls));
    if keys >= MessageFields::Tools {
        // A `Tool` model's dump, whichever way the release passes request tools.
        let how = match m.tools.as_ref().map(|_| rules.tool_dump()) {
            None | Some(ToolDump::Function | ToolDump::Wrapped) => ToolDump::Wrapped,
            Some(other) => other,
        };
        fields.push((
            "tools",
            m.tools
                .as_ref()
                .map(|ts| Value::Array(ts.iter().map(|t| t.dump_as(how)).collect())),
        ));
    }
    if keys >= MessageFields::Prefix {
        fields.push(("prefix", m.prefix.map(Value::Bool)));
    }
    Ok(fields)
}

/// `ToolCall.model_dump()` with `normalize_assistant_tool_call_arguments`
/// (assistant messages only): string arguments decoded into an object.
fn dump_tool_call(
    c: &ToolCall<'_>,
    role: &str,
    strict_arguments: bool,
    rules: &Consulted,
) -> Result<Value, CountError> {
    let arguments = match c.arguments {
        Some(Value::String(a)) => match rules.tool_call_arguments() {
            ToolCallArguments::KeptAsText => Value::String(a.to_owned()),
            // `json.loads` on any message with tool calls; text that is not
            // JSON stays (the failure is only logged).
            ToolCallArguments::DecodedIfJson => {
                py::json_loads(a).unwrap_or_else(|_| Value::String(a.to_owned()))
            }
            ToolCallArguments::AssistantDecoded if role == "assistant" => match py::json_loads(a) {
                Ok(v) => v,
                Err(_) if strict_arguments => {
                    return Err(invalid(
                        "Assistant tool call function.arguments must be valid JSON.",
                    ))
                }
                Err(_) => Value::String(a.to_owned()),
            },
            // `normalize_assistant_tool_call_arguments`, assistant only.
            ToolCallArguments::AssistantObject if role == "assistant" => {
                match parse_tool_call_arguments(a) {
                    Ok(args) => Value::Object(args),
                    Err(e) if strict_arguments => return Err(e),
                    Err(_) => Value::String(a.to_owned()),
                }
            }
            ToolCallArguments::AssistantDecoded | ToolCallArguments::AssistantObject => {
                Value::String(a.to_owned())
            }
        },
        Some(v) => v.clone(),
        None => Value::Null,
    };
    let mut f = Map::new();
    f.insert(
        "name".into(),
        c.name
            .map(|s| Value::String(s.to_owned()))
            .unwrap_or(Value::Null),
    );
    f.insert("arguments".into(), arguments);
    let mut tc = Map::new();
    tc.insert(
        "id".into(),
        c.id.map(|s| Value::String(s.to_owned()))
            .unwrap_or(Value::Null),
    );
    tc.insert(
        "index".into(),
        c.index
            .map(|i| {
                serde_json::Number::from_i128(i)
                    .map(Value::Number)
                    .unwrap_or(Value::Null)
            })
            .unwrap_or(Value::Null),
    );
    tc.insert("type".into(), Value::String("function".into()));
    tc.insert("function".into(), Value::Object(f));
    Ok(Value::Object(tc))
}

/// The dsv32 branch of `_apply_jinja_template`: `model_dump()` keeps every
/// key, `None` as `None`; a list content is flattened by
/// `process_content_for_template_format(msg, "string")`, which also drops
/// that message's `None` keys.
fn dsv32_message(fields: Dumped, list_content: Option<&[Part<'_>]>) -> Result<Value, CountError> {
    let mut out = Map::new();
    for (k, v) in fields {
        match (k, v, list_content) {
            ("content", _, Some(parts)) => {
                if parts.iter().any(|p| matches!(p, Part::Media(_))) {
                    return Err(CountError::Unsupported(
                        "media parts on the DeepSeek-V3.2 encoder are not modelled by the guard"
                            .into(),
                    ));
                }
                out.insert(k.to_owned(), Value::String(join_text_parts(parts)));
            }
            (_, Some(v), _) => {
                out.insert(k.to_owned(), v);
            }
            (_, None, None) => {
                out.insert(k.to_owned(), Value::Null);
            }
            (_, None, Some(_)) => {}
        }
    }
    Ok(Value::Object(out))
}

/// The text parts of a list content joined with spaces (the `"string"`
/// content format).
fn join_text_parts(parts: &[Part<'_>]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(*t),
            _ => None,
        })
        .collect();
    texts.join(" ")
}

/// parser/jinja_template_utils.py `process_content_for_template_format` in
/// the template's content format, `None`-valued keys dropped.
fn process_content_for_template_format(
    fields: Dumped,
    list_content: Option<&[Part<'_>]>,
    format: ContentFormat,
) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(parts) = list_content else {
        for (k, v) in fields {
            if let Some(v) = v {
                out.insert(k.to_owned(), v);
            }
        }
        return out;
    };
    match format {
        ContentFormat::OpenAi => {
            // The other keys keep their order; `content` moves to the end.
            for (k, v) in fields {
                if k == "content" {
                    continue;
                }
                if let Some(v) = v {
                    out.insert(k.to_owned(), v);
                }
            }
            let items = parts.iter().filter_map(openai_part).collect();
            out.insert("content".into(), Value::Array(items));
        }
        ContentFormat::String => {
            let joined = join_text_parts(parts);
            for (k, v) in fields {
                if k == "content" {
                    out.insert(k.to_owned(), Value::String(joined.clone()));
                } else if let Some(v) = v {
                    out.insert(k.to_owned(), v);
                }
            }
        }
    }
    out
}

/// One content part as the `"openai"` content format keeps it.
fn openai_part(p: &Part<'_>) -> Option<Value> {
    let mut o = Map::new();
    match p {
        Part::Text(t) => {
            o.insert("type".into(), Value::String("text".into()));
            o.insert("text".into(), Value::String((*t).to_owned()));
        }
        Part::ToolReference(name) => {
            o.insert("type".into(), Value::String("tool_reference".into()));
            o.insert("name".into(), Value::String((*name).to_owned()));
        }
        // `process_content_for_template_format`: an admitted media
        // part becomes `{"type": "image"}` (video, audio) so the
        // template renders its placeholder.
        Part::Media(t) => {
            let kind = match media_kind(t) {
                MediaKind::Image => "image",
                MediaKind::Video => "video",
                MediaKind::Audio => "audio",
            };
            o.insert("type".into(), Value::String(kind.into()));
        }
        // Thinking parts are dropped.
        Part::Thinking => return None,
    }
    Some(Value::Object(o))
}

/// serving_chat.py `normalize_tool_content`: a tool message whose content is
/// a list of text parts gets them joined with spaces.
fn normalize_tool_content(out: &mut Map<String, Value>) {
    let Some(Value::Array(items)) = out.field("content") else {
        return;
    };
    let all_text = items
        .iter()
        .all(|p| p.is_string() || p.field("type").and_then(Value::as_str) == Some("text"));
    if all_text {
        let joined = items
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => match other.field("text") {
                    Some(Value::String(s)) => s.clone(),
                    _ => String::new(),
                },
            })
            .collect::<Vec<_>>()
            .join(" ");
        out.insert("content".into(), Value::String(joined));
    }
}

/// `parse_tool_call_arguments`: the string must be JSON and a JSON object.
fn parse_tool_call_arguments(arguments: &str) -> Result<Map<String, Value>, CountError> {
    match super::py::json_loads(arguments) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(invalid(
            "Assistant tool call function.arguments must be a JSON object.",
        )),
        Err(_) => Err(invalid(
            "Assistant tool call function.arguments must be valid JSON.",
        )),
    }
}

/// `_has_message_level_tools` (on the raw body, before validation).
fn has_message_level_tools(messages: Option<&Value>) -> bool {
    let Some(Value::Array(items)) = messages else {
        return false;
    };
    items.iter().any(|m| {
        let role = m
            .field("role")
            .and_then(Value::as_str)
            .map(str::to_lowercase);
        matches!(role.as_deref(), Some("root" | "system" | "developer"))
            && m.field("tools").is_some_and(py::truthy)
    })
}

// ---------------------------------------------------------------------------
// Tool schema type rewrite (`function_call/utils.py::normalize_json_schema_types`)
// ---------------------------------------------------------------------------

const STANDARD_TYPES: [&str; 7] = [
    "null", "boolean", "object", "array", "number", "string", "integer",
];

fn type_alias(base: &str) -> Option<&'static str> {
    Some(match base {
        "str" | "text" | "varchar" | "char" | "enum" | "uuid" | "date" | "datetime" | "time"
        | "timestamp" | "binary" | "blob" | "bytea" | "bytes" | "varbinary" => "string",
        "bool" => "boolean",
        "bigint" | "smallint" | "tinyint" => "integer",
        "double" | "decimal" | "real" | "numeric" => "number",
        "arr" | "tuple" | "set" => "array",
        "map" => "object",
        _ => return None,
    })
}

/// `_matches_type_prefix`: a prefix only counts when it is the whole token or is
/// followed by a digit, `[`, `<`, `(`, space or tab.
fn matches_type_prefix(base: &str, prefixes: &[&str]) -> bool {
    prefixes.iter().any(|p| {
        base == *p
            || (base.len() > p.len()
                && base.starts_with(p)
                && base[p.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit() || "[<( \t".contains(c)))
    })
}

/// `_normalize_single_type`.
fn normalize_single_type(raw: &str) -> Option<String> {
    if STANDARD_TYPES.contains(&raw) {
        return None;
    }
    // `raw.split("(", 1)[0].strip().lower()`
    let base = unicode::lower(py::strip(raw.split('(').next().unwrap_or("")));
    if STANDARD_TYPES.contains(&base.as_str()) {
        return Some(base);
    }
    if let Some(m) = type_alias(&base) {
        return Some(m.to_owned());
    }
    const RULES: [(&[&str], &str); 4] = [
        (&["int", "uint", "long", "short", "unsigned"], "integer"),
        (&["num", "float"], "number"),
        (&["list"], "array"),
        (&["dict"], "object"),
    ];
    for (prefixes, target) in RULES {
        if matches_type_prefix(&base, prefixes) {
            return Some(target.to_owned());
        }
    }
    None
}

/// Walks a JSON Schema in place and rewrites database-style `type` names.
pub(crate) fn normalize_json_schema_types(schema: &mut Value) {
    match schema {
        Value::Array(items) => {
            for item in items {
                normalize_json_schema_types(item);
            }
        }
        Value::Object(map) => {
            if let Some(t) = map.get_mut("type") {
                match t {
                    Value::String(s) => {
                        if let Some(n) = normalize_single_type(s) {
                            *s = n;
                        }
                    }
                    Value::Array(items) => {
                        let mut out: Vec<Value> = Vec::with_capacity(items.len());
                        for item in items.drain(..) {
                            let item = match &item {
                                Value::String(s) => {
                                    normalize_single_type(s).map(Value::String).unwrap_or(item)
                                }
                                _ => item,
                            };
                            if !out.iter().any(|o| py::eq(o, &item)) {
                                out.push(item);
                            }
                        }
                        *items = out;
                    }
                    _ => {}
                }
            }
            for key in [
                "properties",
                "patternProperties",
                "$defs",
                "definitions",
                "dependentSchemas",
            ] {
                if let Some(Value::Object(nested)) = map.get_mut(key) {
                    for v in nested.values_mut() {
                        normalize_json_schema_types(v);
                    }
                }
            }
            for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
                if let Some(Value::Array(nested)) = map.get_mut(key) {
                    for v in nested {
                        normalize_json_schema_types(v);
                    }
                }
            }
            for key in [
                "items",
                "additionalProperties",
                "not",
                "if",
                "then",
                "else",
                "contains",
                "propertyNames",
                "unevaluatedItems",
                "unevaluatedProperties",
            ] {
                if let Some(v) = map.get_mut(key) {
                    normalize_json_schema_types(v);
                }
            }
        }
        _ => {}
    }
}

/// A subset of `Draft202012Validator.check_schema`: only violations the 2020-12
/// meta-schema certainly rejects (a schema that is not an object or boolean, an
/// unknown `type`, malformed `required`/`enum`, non-schema subschemas). Anything
/// it misses is a request SGLang refuses and this guard forwards.
fn check_schema(schema: &Value, depth: usize) -> Result<(), String> {
    if depth > 200 {
        return Err("schema is too deeply nested".into());
    }
    let map = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(m) => m,
        other => return Err(format!("{other} is not of type 'object', 'boolean'")),
    };
    if let Some(t) = map.field("type") {
        let ok = |v: &Value| v.as_str().is_some_and(|s| STANDARD_TYPES.contains(&s));
        match t {
            Value::String(_) if ok(t) => {}
            Value::Array(items) if !items.is_empty() && items.iter().all(ok) => {
                if !all_unique(items) {
                    return Err(format!("{t} has non-unique elements"));
                }
            }
            _ => return Err(format!("{t} is not valid under any of the given schemas")),
        }
    }
    if let Some(r) = map.field("required") {
        match r {
            Value::Array(items) if items.iter().all(Value::is_string) => {
                if !all_unique(items) {
                    return Err(format!("{r} has non-unique elements"));
                }
            }
            _ => return Err(format!("{r} is not of type 'array' of strings")),
        }
    }
    if let Some(e) = map.field("enum") {
        if !e.is_array() {
            return Err(format!("{e} is not of type 'array'"));
        }
    }
    for key in [
        "properties",
        "patternProperties",
        "$defs",
        "definitions",
        "dependentSchemas",
    ] {
        if let Some(v) = map.field(key) {
            let o = v
                .as_object()
                .ok_or_else(|| format!("{v} is not of type 'object'"))?;
            for s in o.values() {
                check_schema(s, depth + 1)?;
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(v) = map.field(key) {
            match v {
                Value::Array(a) if !a.is_empty() => {
                    for s in a {
                        check_schema(s, depth + 1)?;
                    }
                }
                _ => return Err(format!("{v} is not a non-empty array")),
            }
        }
    }
    for key in [
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    ] {
        if let Some(v) = map.field(key) {
            check_schema(v, depth + 1)?;
        }
    }
    Ok(())
}

/// JSON Schema's `uniqueItems` for a list of strings.
fn all_unique(items: &[Value]) -> bool {
    let mut seen = std::collections::HashSet::new();
    items
        .iter()
        .all(|i| seen.insert(i.as_str().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    fn reference() -> crate::release::Consulted {
        crate::release::Consulted::new(crate::Release::V0523.chat_rules())
    }

    use super::*;
    use serde_json::json;

    fn template(body: Value, format: ContentFormat) -> ChatInputs {
        match prepare(&body, format) {
            Ok(t) => *t,
            other => panic!("expected template inputs, got {other:?}"),
        }
    }

    #[test]
    fn type_rewrite_matches_sglang() {
        let mut s = json!({"type": "object", "properties": {
            "a": {"type": "varchar(64)"}, "b": {"type": "int"}, "c": {"type": "list[str]"},
            "d": {"type": "internal"}, "e": {"type": ["int", "integer", "null"]}, "f": {"type": "Float64"}}});
        normalize_json_schema_types(&mut s);
        assert_eq!(
            s["properties"],
            json!({"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "array"},
                   "d": {"type": "internal"}, "e": {"type": ["integer", "null"]}, "f": {"type": "number"}})
        );
    }

    /// `str.strip()` takes U+001C..U+001F (and U+0085, U+00A0, U+3000), not
    /// U+200B. Expected values: SGLang 0.5.23's own code (sglang_env, then
    /// `ChatCompletionRequest.normalize_reasoning_inputs({"reasoning":
    /// {"enabled": e}})` and `function_call.utils._normalize_single_type(t)`).
    #[test]
    fn python_strip_in_reasoning_enabled_and_schema_types() {
        for (e, thinking) in [
            ("\u{1c}true\u{1f}", true),
            ("\u{1d}yes", true),
            ("on\u{1e}", true),
            (" TRUE ", true),
            ("\u{85}y\u{a0}", true),
            ("\u{200b}true", false),
            ("tRuE\u{3000}", true),
        ] {
            let top = json!({"reasoning": {"enabled": e}});
            let (_, ctk) =
                normalize_reasoning_inputs(top.as_object().unwrap(), &reference()).unwrap();
            let want = thinking.then(|| json!({"thinking": true, "enable_thinking": true}));
            assert_eq!(ctk, want, "{e:?}");
        }
        for (t, want) in [
            ("\u{1c}integer", Some("integer")),
            ("int\u{1f}", Some("integer")),
            ("\u{1d}VARCHAR(255)", Some("string")),
            (" Bool ", Some("boolean")),
            ("\u{85}list\u{a0}", Some("array")),
            ("\u{200b}int", None),
            ("\u{1e}\u{1f}", None),
            ("INTEGER\u{1c}(3)", Some("integer")),
        ] {
            assert_eq!(normalize_single_type(t).as_deref(), want, "{t:?}");
        }
    }

    /// `reasoning.effort` is read by Python's `float()`, the `reasoning_effort`
    /// field by pydantic's lax float. Expected: SGLang 0.5.23's
    /// `ChatCompletionRequest.normalize_reasoning_inputs({"reasoning":
    /// {"effort": e}})["reasoning_effort"]` (or its ValueError), and
    /// `ChatCompletionRequest.model_validate(...).reasoning_effort` of a chat
    /// with `"reasoning_effort": e`.
    #[test]
    fn reasoning_effort_strings_read_as_sglang_reads_them() {
        for (e, want) in [
            ("+-inf", None),
            ("\u{660}.\u{665}", Some(0.5)),
            ("1_0.5", Some(10.5)),
            ("\u{1c}0.5", None),
            ("\u{85}0.5", Some(0.5)),
            ("0_.5", None),
        ] {
            let top = json!({"reasoning": {"effort": e}});
            let got = normalize_reasoning_inputs(top.as_object().unwrap(), &reference())
                .ok()
                .map(|(effort, _)| effort.and_then(|v| v.as_f64()));
            assert_eq!(got, want.map(Some), "{e:?}");
        }
        for (e, want) in [
            (" 0.5 ", Some(0.5)),
            ("\u{1c}0.5", None),
            ("\u{a0}0.5", Some(0.5)),
            (" 0_0.5", None),
            ("0_.5", Some(0.5)),
            ("\u{660}.\u{665}", None),
        ] {
            let got = validate_reasoning_effort(Some(json!(e))).ok().flatten();
            assert_eq!(got.and_then(|v| v.as_f64()), want, "{e:?}");
        }
    }

    /// SGLang's messages (`ChatCompletionRequest.model_validate` of a chat
    /// with `{"reasoning": {"effort": e}}`, `e.errors()[0]["msg"]`).
    #[test]
    fn invalid_reasoning_effort_is_reported_by_repr() {
        for (e, want) in [
            (
                json!("it's"),
                r#"Value error, invalid reasoning effort: "it's""#,
            ),
            (
                json!(["\u{a0}"]),
                r"Value error, invalid reasoning effort: ['\xa0']",
            ),
            (
                json!({"a": null}),
                r"Value error, invalid reasoning effort: {'a': None}",
            ),
        ] {
            let top = json!({"reasoning": {"effort": e}});
            match normalize_reasoning_inputs(top.as_object().unwrap(), &reference()) {
                Err(CountError::Invalid { message, .. }) => assert_eq!(message, want),
                other => panic!("{e}: {other:?}"),
            }
        }
    }

    #[test]
    fn user_role_is_exact_and_other_roles_lowercase() {
        let body = json!({"messages": [{"role": "USER", "content": "x"}]});
        assert!(matches!(
            prepare(&body, ContentFormat::String),
            Err(CountError::Invalid { .. })
        ));
        let t = template(
            json!({"messages": [{"role": "System", "content": "s", "name": "n"}, {"role": "user", "name": "a", "content": "u"}]}),
            ContentFormat::String,
        );
        assert_eq!(
            t.messages,
            json!([{"role": "system", "content": "s", "name": "n"}, {"role": "user", "content": "u"}])
        );
    }

    #[test]
    fn trailing_assistant_becomes_user_or_prefix() {
        let msgs = json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": []}]);
        let t = template(json!({"messages": msgs}), ContentFormat::String);
        assert_eq!(t.messages[1], json!({"role": "user", "content": "a"}));
        let t = template(
            json!({"messages": msgs, "continue_final_message": "yes"}),
            ContentFormat::String,
        );
        assert_eq!(t.messages.as_array().map(Vec::len), Some(1));
        assert_eq!(t.assistant_prefix.as_deref(), Some("a"));
    }

    #[test]
    fn content_parts_by_format() {
        let body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}]},
                                       {"role": "tool", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}], "tool_call_id": "1"}]});
        let t = template(body.clone(), ContentFormat::String);
        assert_eq!(t.messages[0]["content"], json!("a  b"));
        let t = template(body, ContentFormat::OpenAi);
        assert_eq!(
            t.messages[0]["content"][1],
            json!({"type": "text", "text": ""})
        );
        // Tool message: content moved to the end, then joined.
        assert_eq!(
            t.messages[1],
            json!({"role": "tool", "tool_call_id": "1", "content": "x y"})
        );
        let keys: Vec<&String> = t.messages[1]
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["role", "tool_call_id", "content"]);
    }

    #[test]
    fn tool_dump_and_arguments() {
        let body = json!({"messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true]}"}}]},
            {"role": "user", "content": "q2"}],
            "tools": [{"type": "function", "function": {"parameters": {"type": "object"}, "name": "f"}}]});
        let t = template(body, ContentFormat::String);
        assert_eq!(
            t.tools,
            Some(
                json!([{"type": "function", "function": {"parameters": {"type": "object"}, "name": "f", "description": null}, "defer_loading": null}])
            )
        );
        assert_eq!(
            t.messages[1],
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "index": null, "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [true]}}}]})
        );
        let bad = json!({"messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}, {"role": "user", "content": "x"}]});
        assert!(matches!(
            prepare(&bad, ContentFormat::String),
            Err(CountError::Invalid { .. })
        ));
    }

    #[test]
    fn reasoning_effort_sets_thinking_and_pops_from_kwargs() {
        let t = template(
            json!({"messages": [{"role": "user", "content": "q"}], "reasoning_effort": "none"}),
            ContentFormat::String,
        );
        let kwargs = |t: &ChatInputs| Value::Object(t.template_kwargs(EffortVariable::WhenSet));
        assert_eq!(
            kwargs(&t),
            json!({"reasoning_effort": "none", "thinking": false, "enable_thinking": false})
        );
        let t = template(
            json!({"messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"reasoning_effort": "low", "x": 1}}),
            ContentFormat::String,
        );
        assert_eq!(kwargs(&t), json!({"reasoning_effort": "low", "x": 1}));
        // 0.5.1-0.5.9 always pass an effort, "medium" when none is set;
        // before 0.5.1 a `chat_template_kwargs.reasoning_effort` is an
        // ordinary kwarg and no other effort is passed.
        let plain = template(
            json!({"messages": [{"role": "user", "content": "q"}]}),
            ContentFormat::String,
        );
        assert_eq!(
            Value::Object(plain.template_kwargs(EffortVariable::AlwaysMediumByDefault)),
            json!({"reasoning_effort": "medium"})
        );
        assert_eq!(
            Value::Object(plain.template_kwargs(EffortVariable::NotAField)),
            json!({})
        );
    }

    #[test]
    fn request_checks() {
        let refuse = |body: Value| prepare(&body, ContentFormat::String).is_err();
        assert!(refuse(json!({"messages": []})));
        assert!(refuse(
            json!({"messages": [{"role": "user", "content": "q"}], "tool_choice": "required"})
        ));
        assert!(refuse(
            json!({"messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"chat_template": "x"}})
        ));
        // `apply_chat_template`'s own keywords refuse where it is called.
        let t = template(
            json!({"messages": [{"role": "user", "content": "q"}], "chat_template_kwargs": {"tokenize": true}}),
            ContentFormat::String,
        );
        assert!(t.jinja_arguments().is_err());
        assert!(refuse(
            json!({"messages": [{"role": "user", "content": null}]})
        ));
        assert!(refuse(
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]})
        ));
        assert!(refuse(
            json!({"messages": [{"role": "user", "content": "q"}], "input_ids": []})
        ));
        let both = prepare(
            &json!({"messages": [{"role": "user", "content": "q"}], "input_ids": [1, "2", 3.0]}),
            ContentFormat::String,
        )
        .unwrap();
        assert_eq!(both.given_ids, Some(3));
        assert_eq!(both.messages, json!([{"role": "user", "content": "q"}]));
    }
    #[test]
    fn kwargs_bind_like_apply_chat_template() {
        let split = |kwargs: Value| {
            let inputs = ChatInputs {
                extra: kwargs.as_object().cloned().unwrap_or_default(),
                ..ChatInputs::default()
            };
            inputs.jinja_arguments()
        };
        // parameters SGLang passes itself, or that collide inside transformers
        for key in [
            "messages",
            "conversation",
            "conversations",
            "tools",
            "add_generation_prompt",
            "tokenize",
            "return_dict",
        ] {
            assert!(split(json!({ key: null })).is_err(), "{key}");
        }
        // flags that raise only when true
        assert!(split(json!({"continue_final_message": true})).is_err());
        assert!(split(json!({"return_assistant_tokens_mask": 1})).is_err());
        // consumed by apply_chat_template: never template variables
        let a = split(json!({"padding": true, "truncation": true, "max_length": 5,
            "continue_final_message": false, "return_assistant_tokens_mask": 0, "x": 1}))
        .expect("splits");
        assert_eq!(Value::Object(a.extra), json!({"x": 1}));
        assert!(a.documents.is_none() && a.template_override.is_none());
        // documents from the kwargs are the documents argument, and must be dicts
        let a = split(json!({"documents": [{"title": "t", "text": "x"}]})).expect("splits");
        assert_eq!(a.documents, Some(json!([{"title": "t", "text": "x"}])));
        assert!(a.extra.is_empty());
        assert!(split(json!({"documents": ["not a dict"]})).is_err());
        assert!(split(json!({"documents": "text"})).is_err());
        let a = split(json!({"documents": []})).expect("splits");
        assert_eq!(a.documents, Some(json!([])));
        // `chat_template=` replaces the model's template
        let a = split(json!({"chat_template": "T"})).expect("splits");
        assert_eq!(a.template_override.as_deref(), Some("T"));
        assert!(split(json!({"chat_template": 1})).is_err());
    }

    #[test]
    fn media_parts_are_charged_their_bound_when_the_model_opts_in() {
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "u"}},
            {"type": "text", "text": "b"},
            {"type": "image_url", "image_url": {"url": "v"}},
            {"type": "input_audio", "input_audio": {"data": "d", "format": "wav"}},
        ]}]});
        let opts = |image, audio| Options {
            media: MediaBounds {
                image,
                video: None,
                audio,
            },
            ..Options::default()
        };
        let inputs = |format, o: &Options| match prepare_with(&body, format, o, &reference()) {
            Ok(t) => *t,
            other => panic!("expected template inputs, got {other:?}"),
        };
        // Two images at 3, one audio clip at 10.
        let both = opts(Some(3), Some(10));
        let s = inputs(ContentFormat::String, &both);
        assert_eq!(s.media_tokens, 16);
        // String format: media parts dropped from the joined text.
        assert_eq!(s.messages, json!([{"role": "user", "content": "a b"}]));
        // OpenAI format: the parts stay as placeholders the template renders.
        let o = inputs(ContentFormat::OpenAi, &both);
        assert_eq!(o.media_tokens, 16);
        assert_eq!(
            o.messages[0]["content"],
            json!([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"},
                   {"type": "image"}, {"type": "audio"}])
        );
        // A kind without a bound is still refused, with SGLang's message.
        for o in [
            opts(Some(3), None),
            opts(None, Some(10)),
            Options::default(),
        ] {
            match prepare_with(&body, ContentFormat::String, &o, &reference()) {
                Err(CountError::Unsupported(m)) => {
                    assert!(m.contains("Model only supports text input"), "{m}");
                    // and how to admit it
                    assert!(m.contains("--multimodal-"), "{m}");
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        // Without media, nothing is charged.
        let text = json!({"messages": [{"role": "user", "content": "q"}]});
        match prepare_with(&text, ContentFormat::String, &both, &reference()) {
            Ok(t) => assert_eq!(t.media_tokens, 0),
            other => panic!("{other:?}"),
        }
        // `input_ids` on the chat route: the media are still charged.
        let mut ids = body.clone();
        ids["input_ids"] = json!([1, 2]);
        let given = prepare_with(&ids, ContentFormat::String, &both, &reference()).unwrap();
        assert_eq!(given.given_ids, Some(18));
    }
}
