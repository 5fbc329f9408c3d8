//! DeepSeek-V4 / V4.1 prompts: SGLang 0.5.23's `dsv4` / `dsv41` chat
//! encoding specs (`--tool-call-parser deepseekv4|deepseekv41`, else a
//! `DeepseekV4*` / V4.1 architecture).
//!
//! SGLang builds these prompts with DeepSeek's `deepseek-recipe` 0.2.0 (the
//! Python wheel's native module) plus its own extensions. The wheel bundles
//! the same Rust crates that crates.io publishes at 0.2.0 (its SBOM lists
//! `deepseek-recipe`, `-core`, `-encoding`, `-macros`, `-image` 0.2.0):
//! `deepseek-recipe` (request conversion, `ChatCompletionRequest::convert`)
//! and `deepseek-recipe-encoding` (`DeepseekV4Encoding` /
//! `DeepseekV41Encoding`, `RenderedPrompt`). This module calls those crates
//! for everything recipe does and reproduces only SGLang's code around them:
//!
//! * `serving_deepseek_recipe.py`, `DeepSeekRecipeChatEncodingAdapter`:
//!   `encode_messages` (null content → `""`, the trailing assistant turn
//!   re-sent as a user turn or continued, the task prefix, tools without
//!   `None` values, `tool_choice`, `response_format`) and `_encode` (the
//!   request's effort, else `SGLANG_DSV4(1)_REASONING_EFFORT`; numeric
//!   strings; V4 refuses numbers; V4.1 integer budgets); the boot probe of
//!   `__init__` ([`Dsv4::new`]);
//! * `deepseek_recipe_renderer.py`, `DeepSeekRecipe`: `pre_normalize`,
//!   `encode`, `parse_effort_budget`, `_replace_effort_budget`,
//!   `_attach_task`, `encode_text`, and the special-token spellings SGLang
//!   sets (`SpecialTokens(image="<｜deepseek_image｜>")`).
//!
//! The prompt comes back as [`Piece`]s: special tokens by id, and text runs
//! the caller counts with its own tokenizer pipeline. recipe encodes its
//! plain text *without* the added vocabulary (`PromptTokenizer`: a copy of
//! the tokenizer whose added vocabulary is emptied), so a special-token
//! spelling in a message is the ids of its characters ([`Piece::Plain`]);
//! SGLang's own splices (the V4.1 budget line, a task prefix) go through the
//! checkpoint tokenizer with its added vocabulary ([`Piece::Text`]).

use std::collections::HashMap;
use std::fmt;

use deepseek_recipe::openai::ChatCompletionRequest;
use deepseek_recipe::request::{ConversationRequest, ConversionOptions, ProtocolRequest};
use deepseek_recipe_core::special_tokens::{SpecialToken, SpecialTokens, SpecialTokensMap};
use deepseek_recipe_encoding::dsv4::DeepseekV4Encoding;
use deepseek_recipe_encoding::dsv41::DeepseekV41Encoding;
use deepseek_recipe_encoding::{PromptEncoding, RenderedPrompt};
use serde_json::{Map, Value};
use tokenizers::{AddedVocabulary, Model as _, Tokenizer};

use crate::py;

/// `deepseek_recipe_renderer.IMAGE_TOKEN`: the checkpoint's image token,
/// which SGLang sets in place of recipe's `<｜image｜>`.
pub const IMAGE_TOKEN: &str = "<｜deepseek_image｜>";
const ASSISTANT_TOKEN: &str = "<｜Assistant｜>";
const THINK_START_TOKEN: &str = "<think>";
const THINK_END_TOKEN: &str = "</think>";
/// `TASK_TOKENS`, in `ChatCompletionRequest.task`'s order.
const TASKS: [(&str, &str); 6] = [
    ("action", "<｜action｜>"),
    ("query", "<｜query｜>"),
    ("authority", "<｜authority｜>"),
    ("domain", "<｜domain｜>"),
    ("title", "<｜title｜>"),
    ("read_url", "<｜read_url｜>"),
];
/// `TASKS_AFTER_HEADER`: `action` follows the generation header, the other
/// tasks replace it.
const TASK_AFTER_HEADER: &str = "action";
/// recipe's V4.1 "high" tier line, which `_replace_effort_budget` replaces.
const BUDGET_LINE_HIGH: &str = "Reasoning Effort: 75";
/// What recipe writes after [`BUDGET_LINE_HIGH`] (V4.1 `reasoning_effort_template`).
const BUDGET_LINE_REST: &str =
    " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
/// Every token recipe can render, with the spellings SGLang configures.
const ALL_SPECIALS: [SpecialToken; 18] = [
    SpecialToken::Bos,
    SpecialToken::Eos,
    SpecialToken::ThinkingStart,
    SpecialToken::ThinkingEnd,
    SpecialToken::System,
    SpecialToken::User,
    SpecialToken::Assistant,
    SpecialToken::LatestReminder,
    SpecialToken::Dsml,
    SpecialToken::Image,
    SpecialToken::Ref,
    SpecialToken::RefEnd,
    SpecialToken::Box,
    SpecialToken::BoxEnd,
    SpecialToken::Point,
    SpecialToken::PointEnd,
    SpecialToken::Polygon,
    SpecialToken::PolygonEnd,
];

/// The chat encoding spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spec {
    /// `dsv4`: recipe's `DeepseekV4Encoding`, model `DeepSeek-V4-Pro`.
    V4,
    /// `dsv41`: recipe's `DeepseekV41Encoding`, model `DeepSeek-V4.1-Flash`.
    V41,
}

impl Spec {
    /// SGLang's spec name (`dsv4`, `dsv41`).
    pub fn from_name(name: &str) -> Option<Spec> {
        match name {
            "dsv4" => Some(Spec::V4),
            "dsv41" => Some(Spec::V41),
            _ => None,
        }
    }

    /// `MODEL_NAMES`: the model name SGLang gives recipe.
    fn model_name(self) -> &'static str {
        match self {
            Spec::V4 => "DeepSeek-V4-Pro",
            Spec::V41 => "DeepSeek-V4.1-Flash",
        }
    }

    /// The environment variable of the server's default effort.
    pub fn effort_env_var(self) -> &'static str {
        match self {
            Spec::V4 => "SGLANG_DSV4_REASONING_EFFORT",
            Spec::V41 => "SGLANG_DSV41_REASONING_EFFORT",
        }
    }
}

/// The server settings the adapter reads when it is built.
#[derive(Debug, Clone, Default)]
pub struct Dsv4Env {
    /// `SGLANG_DSV4_REASONING_EFFORT` (V4) / `SGLANG_DSV41_REASONING_EFFORT`
    /// (V4.1) as set, unstripped; `None` when unset.
    pub default_effort: Option<String>,
    /// `--default-chat-template-kwargs`' `reasoning_effort`, which the adapter
    /// encodes once at boot (a bad value stops SGLang from starting). Per
    /// request, SGLang's handler copies it into `request.reasoning_effort`
    /// before the adapter runs (see [`Request::reasoning_effort`]).
    pub default_ctk_effort: Option<Value>,
}

/// What SGLang's handler passes `encode_messages`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `request.model_dump(exclude_unset=True, by_alias=True, mode="json")` of
    /// the validated `ChatCompletionRequest`. Read: `messages`,
    /// `continue_final_message`, `task`, `response_format`, `tool_choice`.
    pub wire: &'a Value,
    /// SGLang's `tools` (`None` unless tools are present and `tool_choice` is
    /// not `"none"`; a named choice keeps the named tool only): each
    /// `Tool.model_dump()`, with `None` as `null`.
    pub tools: Option<&'a [Value]>,
    /// `_thinking_requested(request)`: `chat_template_kwargs.get("thinking",
    /// SGLANG_DEFAULT_THINKING)` after the server defaults were merged,
    /// truthiness taken.
    pub thinking: bool,
    /// `request.reasoning_effort` when the adapter runs: the validated field,
    /// replaced by a non-null `chat_template_kwargs.reasoning_effort` (any
    /// JSON value, popped by `_convert_to_internal_request`), else filled
    /// from `--default-chat-template-kwargs`' `reasoning_effort`.
    pub reasoning_effort: Option<&'a Value>,
}

/// One run of the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A special token, by id (recipe's explicit special ranges and SGLang's
    /// task tokens).
    Special(u32),
    /// Text encoded without the added vocabulary and without added special
    /// tokens: [`plain_tokenizer`]`.encode(text, false)`.
    Plain(String),
    /// Text encoded by the checkpoint tokenizer itself, added vocabulary
    /// included, without added special tokens: `tokenizer.encode(text,
    /// false)` (SGLang's `encode_text`).
    Text(String),
}

/// A rendered prompt: its ids are the concatenation of the pieces' ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    pub pieces: Vec<Piece>,
    /// Image placeholders in the prompt (V4.1 only; V4 writes the text
    /// `[Unsupported Image]` instead). SGLang then raises "image input is
    /// not supported for this model" on a text-only server; on a multimodal
    /// one its processor expands each placeholder, which is not counted here.
    pub images: usize,
}

impl Prompt {
    /// The prompt ids. `tokenizer` is the checkpoint's; `plain` is
    /// [`plain_tokenizer`]`(tokenizer)`, made once.
    pub fn ids(&self, tokenizer: &Tokenizer, plain: &Tokenizer) -> Result<Vec<u32>, String> {
        let mut ids = Vec::new();
        for piece in &self.pieces {
            let (t, text) = match piece {
                Piece::Special(id) => {
                    ids.push(*id);
                    continue;
                }
                Piece::Plain(text) => (plain, text),
                Piece::Text(text) => (tokenizer, text),
            };
            let encoding = t
                .encode_fast(text.as_str(), false)
                .map_err(|e| e.to_string())?;
            ids.extend_from_slice(encoding.get_ids());
        }
        Ok(ids)
    }
}

/// recipe's `PromptTokenizer::new`: the tokenizer with an empty added
/// vocabulary, which encodes recipe's plain text.
pub fn plain_tokenizer(tokenizer: &Tokenizer) -> Tokenizer {
    let mut plain = tokenizer.clone();
    plain.with_added_vocabulary(AddedVocabulary::new());
    plain
}

/// Why a prompt is not produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dsv4Error {
    /// SGLang refuses the request (a `ValueError` from the adapter or recipe:
    /// HTTP 400); the message is SGLang's.
    Rejected(String),
    /// SGLang fails the request otherwise: recipe cannot encode a special
    /// token the tokenizer's added vocabulary lacks (a `RuntimeError`).
    Failed(String),
    /// The guard cannot reproduce this prompt with this tokenizer.
    Unsupported(String),
    /// SGLang does not start with this tokenizer and these settings.
    Load(String),
}

impl fmt::Display for Dsv4Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dsv4Error::Rejected(m) => write!(f, "{m}"),
            Dsv4Error::Failed(m) => write!(f, "SGLang fails this request: {m}"),
            Dsv4Error::Unsupported(m) => write!(f, "not modelled: {m}"),
            Dsv4Error::Load(m) => write!(f, "SGLang does not start: {m}"),
        }
    }
}

impl std::error::Error for Dsv4Error {}

/// An effort after `_numeric_effort`.
#[derive(Debug, Clone, PartialEq)]
enum Effort {
    /// A string that does not spell a number.
    Tier(String),
    /// Any other value (a number, a bool, a list, ...).
    Other(Value),
}

/// The adapter, built once per model (`DeepSeekRecipeChatEncodingAdapter`).
pub struct Dsv4 {
    spec: Spec,
    options: ConversionOptions,
    encoding: Encoding,
    /// recipe's special-token ids: the added vocabulary's id of each
    /// spelling it can render (`None`: not in the added vocabulary).
    specials: HashMap<&'static str, Option<u32>>,
    /// The ids `_attach_task` uses; `None` when tasks cannot be reproduced.
    tasks: Option<TaskIds>,
    /// Whether `_replace_effort_budget`'s id-level splice equals splitting
    /// the line's text (see [`budget_splits`]).
    budget_splits: bool,
    default_effort: Option<Effort>,
}

#[derive(Debug, Clone)]
struct TaskIds {
    assistant: u32,
    think_start: u32,
    think_end: u32,
    tasks: [u32; 6],
}

enum Encoding {
    V4(DeepseekV4Encoding),
    V41(DeepseekV41Encoding),
}

impl Encoding {
    fn render(&self, request: &ConversationRequest) -> RenderedPrompt {
        match self {
            Encoding::V4(e) => e.render_conversation(&request.conversation),
            Encoding::V41(e) => e.render_conversation(&request.conversation),
        }
    }
}

/// `recipe.SpecialTokens(image=IMAGE_TOKEN)`.
fn special_tokens() -> SpecialTokensMap {
    SpecialTokensMap {
        image: IMAGE_TOKEN.to_string(),
        ..SpecialTokensMap::default()
    }
}

impl Dsv4 {
    /// The adapter SGLang builds for `spec` on `tokenizer` (the checkpoint's
    /// `tokenizer.json` as SGLang loads it: recipe takes
    /// `backend_tokenizer.to_str()`).
    ///
    /// Refuses ([`Dsv4Error::Load`]) where SGLang does not start: a server
    /// effort the boot probe rejects (`{"messages": [{"role": "user",
    /// "content": ""}], "thinking": True}` encoded with
    /// `default_ctk_effort`, else the environment's), or a tokenizer whose
    /// added vocabulary lacks a token that probe renders (BOS, `<｜User｜>`,
    /// `<｜Assistant｜>`, `<think>`, and `<｜System｜>` on V4.1). Other
    /// spellings are looked up per request, as recipe does.
    pub fn new(spec: Spec, tokenizer: &Tokenizer, env: &Dsv4Env) -> Result<Dsv4, Dsv4Error> {
        let map = special_tokens();
        let added = tokenizer.get_added_vocabulary().get_vocab();
        let specials: HashMap<&'static str, Option<u32>> = ALL_SPECIALS
            .iter()
            .map(|&t| {
                let spelling: &'static str = match t {
                    SpecialToken::Image => IMAGE_TOKEN,
                    other => other.default_str(),
                };
                debug_assert_eq!(spelling, map.token(t));
                (spelling, added.get(spelling).copied())
            })
            .collect();
        let options = ConversionOptions::new().with_special_tokens(special_tokens());
        let encoding = match spec {
            Spec::V4 => {
                Encoding::V4(DeepseekV4Encoding::new().with_special_tokens(special_tokens()))
            }
            Spec::V41 => {
                Encoding::V41(DeepseekV41Encoding::new().with_special_tokens(special_tokens()))
            }
        };
        let tasks = task_ids(tokenizer, &specials);
        let raw = env.default_effort.as_deref().map(py::strip).unwrap_or("");
        let default_effort = if raw.is_empty() {
            None
        } else {
            let raw = Value::String(raw.to_string());
            Some(numeric_effort(&raw).map_err(Dsv4Error::Load)?)
        };
        let dsv4 = Dsv4 {
            spec,
            options,
            encoding,
            specials,
            tasks,
            budget_splits: budget_splits(tokenizer),
            default_effort,
        };
        // `__init__`'s boot probe.
        let mut probe = Map::new();
        probe.insert(
            "messages".into(),
            serde_json::json!([{"role": "user", "content": ""}]),
        );
        probe.insert("thinking".into(), Value::Bool(true));
        dsv4.encode_body(probe, env.default_ctk_effort.as_ref(), None)
            .map_err(|e| match e {
                Dsv4Error::Rejected(m) | Dsv4Error::Failed(m) | Dsv4Error::Unsupported(m) => {
                    Dsv4Error::Load(m)
                }
                load => load,
            })?;
        Ok(dsv4)
    }

    pub fn spec(&self) -> Spec {
        self.spec
    }

    /// `encode_messages`: the prompt SGLang encodes for `request`.
    pub fn encode(&self, request: &Request<'_>) -> Result<Prompt, Dsv4Error> {
        let wire = request
            .wire
            .as_object()
            .ok_or_else(|| Dsv4Error::Rejected("the request is not an object".into()))?;
        let mut messages: Vec<Value> = match wire.get("messages") {
            Some(Value::Array(m)) => m.iter().map(null_content_as_empty).collect(),
            _ => return Err(Dsv4Error::Rejected("messages must be a list".into())),
        };
        let mut continue_final = wire.get("continue_final_message") == Some(&Value::Bool(true));
        let task = match wire.get("task") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.as_str()),
            Some(other) => return Err(Dsv4Error::Rejected(format!("invalid task {other}"))),
        };
        let mut task_prefix = None;
        if let Some(last) = trailing_assistant_turn(&messages) {
            let n = messages.len();
            if !continue_final {
                let mut user = Map::new();
                user.insert("role".into(), Value::String("user".into()));
                let content = last.get("content").cloned().unwrap_or_default();
                user.insert("content".into(), content);
                messages[n - 1] = Value::Object(user);
            } else if task.is_some() {
                // A task renders its own tail, so the prefix follows it.
                task_prefix = messages.pop().and_then(|m| match m.get("content") {
                    Some(Value::String(s)) => Some(s.clone()),
                    _ => None,
                });
                continue_final = false;
            } else {
                messages[n - 1] = Value::Object(last);
            }
        }
        let mut body = Map::new();
        body.insert("messages".into(), Value::Array(messages));
        body.insert("thinking".into(), Value::Bool(request.thinking));
        body.insert("continue_final_message".into(), Value::Bool(continue_final));
        if let Some(rf) = wire.get("response_format").filter(|v| !v.is_null()) {
            body.insert("response_format".into(), rf.clone());
        }
        if let Some(tools) = request.tools {
            // `model_dump` adds None for unset fields, which recipe renders as values.
            let tools = tools.iter().map(strip_tool_nones).collect();
            body.insert("tools".into(), Value::Array(tools));
            if let Some(choice) = wire.get("tool_choice").filter(|v| !v.is_null()) {
                body.insert("tool_choice".into(), choice.clone());
            }
        }
        let mut prompt = self.encode_body(body, request.reasoning_effort, task)?;
        if let Some(prefix) = task_prefix.filter(|p| !p.is_empty()) {
            prompt.pieces.push(Piece::Text(prefix));
        }
        Ok(prompt)
    }

    /// `_encode`, then `DeepSeekRecipe.encode`.
    fn encode_body(
        &self,
        mut body: Map<String, Value>,
        effort: Option<&Value>,
        task: Option<&str>,
    ) -> Result<Prompt, Dsv4Error> {
        let effort = match effort {
            None | Some(Value::Null) => None,
            Some(v) => Some(numeric_effort(v).map_err(Dsv4Error::Unsupported)?),
        };
        let effort = match effort {
            None => self.default_effort.clone(),
            Some(Effort::Tier(t)) if t == "none" => self.default_effort.clone(),
            some => some,
        };
        let mut budget = None;
        match effort {
            Some(Effort::Other(v)) => {
                if self.spec != Spec::V41 {
                    return Err(Dsv4Error::Rejected(format!(
                        "DeepSeek-V4 reasoning_effort must be a named tier, got {}",
                        py::repr(&v)
                    )));
                }
                budget = Some(parse_effort_budget(&v).map_err(Dsv4Error::Rejected)?);
            }
            Some(Effort::Tier(t)) => {
                body.insert("reasoning_effort".into(), Value::String(t));
            }
            None => {}
        }
        let thinking = body.get("thinking").is_some_and(py::truthy);
        let mut normalized = pre_normalize(body);
        let model = Value::String(self.spec.model_name().into());
        normalized.insert("model".into(), model);
        if budget.is_some() {
            normalized.insert("reasoning_effort".into(), Value::String("high".into()));
        }
        let normalized = Value::Object(normalized);
        // Numbers need no care here: SGLang's HTTP server reads the body with
        // orjson (`ORJSONRequest`), which holds an integer beyond 64 bits as the
        // float serde_json holds, so the wheel never meets an integer outside
        // [-2^63, 2^64) (its OverflowError) and renders every number as these
        // crates do (checked: `NUMBER_LITERALS` in gen_dsv4.py).
        let request: ChatCompletionRequest = serde_json::from_value(normalized)
            .map_err(|e| Dsv4Error::Rejected(format!("invalid request body: {e}")))?;
        let converted = request
            .convert(self.options.clone())
            .map_err(|e| Dsv4Error::Rejected(e.to_string()))?;
        let rendered = self.encoding.render(&converted);
        let mut prompt = self.pieces(&rendered)?;
        if let Some(budget) = budget.filter(|_| thinking) {
            self.replace_effort_budget(&mut prompt, budget)?;
        }
        if let Some(task) = task {
            self.attach_task(&mut prompt, task, thinking)?;
        }
        Ok(prompt)
    }

    /// recipe's `PromptTokenizer::encode_ids`, as pieces: each special range
    /// by its added-vocabulary id, the text between as plain text.
    fn pieces(&self, rendered: &RenderedPrompt) -> Result<Prompt, Dsv4Error> {
        let text = rendered.prompt.as_str();
        let mut pieces = Vec::with_capacity(rendered.special_ranges.len() * 2 + 1);
        let mut start = 0;
        for range in &rendered.special_ranges {
            if range.start > start {
                pieces.push(Piece::Plain(text[start..range.start].to_string()));
            }
            let spelling = &text[range.clone()];
            let id = self
                .specials
                .get(spelling)
                .copied()
                .flatten()
                .ok_or_else(|| {
                    Dsv4Error::Failed(format!(
                        "failed to encode conversation: special token {spelling:?} is not in the \
                     added vocabulary"
                    ))
                })?;
            pieces.push(Piece::Special(id));
            start = range.end;
        }
        if start < text.len() {
            pieces.push(Piece::Plain(text[start..].to_string()));
        }
        Ok(Prompt {
            pieces,
            images: rendered.image_sources.len(),
        })
    }

    /// `_replace_effort_budget`: the V4.1 "high" line (after BOS and
    /// `<｜System｜>`) with `budget` in place of 75.
    fn replace_effort_budget(&self, prompt: &mut Prompt, budget: u32) -> Result<(), Dsv4Error> {
        if !self.budget_splits {
            return Err(Dsv4Error::Unsupported(
                "this tokenizer does not split the reasoning effort line where SGLang splices it"
                    .into(),
            ));
        }
        let bos = self.specials[SpecialToken::Bos.default_str()];
        let system = self.specials[SpecialToken::System.default_str()];
        let rest = match prompt.pieces.as_slice() {
            [Piece::Special(a), Piece::Special(b), Piece::Plain(line), ..]
                if Some(*a) == bos && Some(*b) == system && line.starts_with(BUDGET_LINE_HIGH) =>
            {
                line[BUDGET_LINE_HIGH.len()..].to_string()
            }
            _ => {
                return Err(Dsv4Error::Rejected(
                    "deepseek-recipe rendered no reasoning effort line".into(),
                ))
            }
        };
        let line = Piece::Text(format!("Reasoning Effort: {budget}"));
        prompt.pieces.splice(2..3, [line, Piece::Plain(rest)]);
        Ok(())
    }

    /// `_attach_task`: `action` follows the generation header, other tasks
    /// replace it.
    fn attach_task(
        &self,
        prompt: &mut Prompt,
        task: &str,
        thinking: bool,
    ) -> Result<(), Dsv4Error> {
        let Some(ids) = &self.tasks else {
            return Err(Dsv4Error::Unsupported(
                "the tokenizer lacks a token SGLang's quick-instruction tasks use".into(),
            ));
        };
        let Some(index) = TASKS.iter().position(|(name, _)| *name == task) else {
            return Err(Dsv4Error::Rejected(format!("unknown task {task:?}")));
        };
        let marker = if thinking {
            ids.think_start
        } else {
            ids.think_end
        };
        let n = prompt.pieces.len();
        let ends_with_header = n >= 2
            && prompt.pieces[n - 2] == Piece::Special(ids.assistant)
            && prompt.pieces[n - 1] == Piece::Special(marker);
        if !ends_with_header {
            return Err(Dsv4Error::Rejected(
                "task requires the conversation to end with a user message".into(),
            ));
        }
        if task != TASK_AFTER_HEADER {
            prompt.pieces.truncate(n - 2);
        }
        prompt.pieces.push(Piece::Special(ids.tasks[index]));
        Ok(())
    }
}

/// The ids `_attach_task` uses (`hf_tokenizer.token_to_id`), when they
/// behave as recipe's: each header id is the added-vocabulary id recipe
/// renders, and no plain text can encode to it (so checking the last two
/// pieces is checking the last two ids).
fn task_ids(
    tokenizer: &Tokenizer,
    specials: &HashMap<&'static str, Option<u32>>,
) -> Option<TaskIds> {
    let header = |t: &str| {
        let id = tokenizer.token_to_id(t)?;
        let rendered = specials.get(t).copied().flatten() == Some(id);
        (rendered && tokenizer.get_model().id_to_token(id).is_none()).then_some(id)
    };
    let mut tasks = [0u32; 6];
    for (slot, (_, spelling)) in tasks.iter_mut().zip(TASKS) {
        *slot = tokenizer.token_to_id(spelling)?;
    }
    Some(TaskIds {
        assistant: header(ASSISTANT_TOKEN)?,
        think_start: header(THINK_START_TOKEN)?,
        think_end: header(THINK_END_TOKEN)?,
        tasks,
    })
}

/// Whether the id-level splice of `_replace_effort_budget` (find the ids of
/// `"Reasoning Effort: 75"`, put those of `"Reasoning Effort: {budget}"` in
/// their place) equals encoding the texts on either side of the number
/// apart: the line must encode as the ids of its head followed by those of
/// its rest, whatever follows it.
fn budget_splits(tokenizer: &Tokenizer) -> bool {
    let plain = plain_tokenizer(tokenizer);
    let enc = |t: &Tokenizer, s: &str| t.encode_fast(s, false).ok().map(|e| e.get_ids().to_vec());
    let Some(head) = enc(tokenizer, BUDGET_LINE_HIGH) else {
        return false;
    };
    [
        "",
        "You are",
        "\n",
        " x",
        "\u{4f60}\u{597d}",
        "1",
        "\t",
        "!",
    ]
    .iter()
    .all(|suffix| {
        let whole = enc(
            &plain,
            &format!("{BUDGET_LINE_HIGH}{BUDGET_LINE_REST}{suffix}"),
        );
        let rest = enc(&plain, &format!("{BUDGET_LINE_REST}{suffix}"));
        match (whole, rest) {
            (Some(whole), Some(rest)) => {
                whole.len() == head.len() + rest.len()
                    && whole[..head.len()] == head[..]
                    && whole[head.len()..] == rest[..]
            }
            _ => false,
        }
    })
}

/// `_null_content_as_empty`.
fn null_content_as_empty(message: &Value) -> Value {
    let mut message = message.clone();
    if let Value::Object(m) = &mut message {
        if m.get("content").is_none_or(Value::is_null) {
            m.insert("content".into(), Value::String(String::new()));
        }
    }
    message
}

/// `_trailing_assistant_turn`: the last message when it is an assistant
/// message with string content, without its tool calls.
fn trailing_assistant_turn(messages: &[Value]) -> Option<Map<String, Value>> {
    let last = messages.last()?.as_object()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant")
        || !last.get("content").is_some_and(Value::is_string)
    {
        return None;
    }
    let kept = last.iter().filter(|(k, _)| k.as_str() != "tool_calls");
    Some(kept.map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// `{k: v for k, v in tool.items() if v is not None} | {"function": {...}}`.
fn strip_tool_nones(tool: &Value) -> Value {
    let Value::Object(tool) = tool else {
        return tool.clone();
    };
    let strip = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut out = strip(tool);
    if let Some(Value::Object(function)) = tool.get("function") {
        out.insert("function".into(), Value::Object(strip(function)));
    }
    Value::Object(out)
}

/// `pre_normalize`.
fn pre_normalize(mut request: Map<String, Value>) -> Map<String, Value> {
    let thinking = request.get("thinking").is_some_and(py::truthy);
    let kind = if thinking { "enabled" } else { "disabled" };
    request.insert("thinking".into(), serde_json::json!({ "type": kind }));
    // The host enforces structural_tag with its grammar.
    let structural = match request.get("response_format") {
        Some(Value::Object(rf)) => rf.get("type").and_then(Value::as_str) == Some("structural_tag"),
        _ => false,
    };
    if structural {
        request.shift_remove("response_format");
    }
    let choice = request.get("tool_choice").cloned();
    let choice_str = choice.as_ref().and_then(Value::as_str);
    if !request.get("tools").is_some_and(py::truthy) || choice_str == Some("none") {
        request.shift_remove("tools");
        request.shift_remove("tool_choice");
    } else if choice_str == Some("required") || choice.as_ref().is_some_and(Value::is_object) {
        // SGLang enforces the choice with its grammar, which expects the model
        // to open the calls block itself.
        request.insert("tool_choice".into(), Value::String("auto".into()));
    }
    let dumps = py::Dumps {
        ensure_ascii: false,
        indent: None,
        separators: Some((",", ":")),
        sort_keys: false,
    };
    let mut last_is_assistant = false;
    if let Some(Value::Array(messages)) = request.get_mut("messages") {
        for message in messages.iter_mut() {
            let Value::Object(message) = message else {
                continue;
            };
            if message.get("role").and_then(Value::as_str) == Some("developer") {
                message.insert("role".into(), Value::String("system".into()));
            }
            let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
                continue;
            };
            for call in calls.iter_mut() {
                let Some(Value::Object(function)) = call.get_mut("function") else {
                    continue;
                };
                if let Some(args) = function.get_mut("arguments").filter(|a| !a.is_string()) {
                    *args = Value::String(py::json_dumps(args, &dumps));
                }
            }
        }
        let last_role = messages.last().and_then(|m| m.get("role"));
        last_is_assistant = last_role.and_then(Value::as_str) == Some("assistant");
    }
    let continue_final = request
        .shift_remove("continue_final_message")
        .is_some_and(|v| py::truthy(&v));
    if continue_final && last_is_assistant {
        if let Some(Value::Array(messages)) = request.get_mut("messages") {
            if let Some(Value::Object(last)) = messages.last_mut() {
                last.insert("prefix".into(), Value::Bool(true));
            }
        }
    }
    request
}

/// `_numeric_effort`: a string that is digits, optionally with a fraction
/// (`\d+(\.\d+)?` after `strip()`), as the int or float it spells. `Err`
/// for digits outside ASCII, which Python's `\d` and `int()` also take.
fn numeric_effort(effort: &Value) -> Result<Effort, String> {
    let Value::String(s) = effort else {
        return Ok(Effort::Other(effort.clone()));
    };
    let t = py::strip(s);
    let (int, frac) = match t.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (t, None),
    };
    let ascii = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
    let numeric = |p: &str| !p.is_empty() && p.chars().all(char::is_numeric);
    if ascii(int) && frac.is_none_or(ascii) {
        let value = if s.contains('.') {
            let f = t.parse::<f64>().ok().and_then(serde_json::Number::from_f64);
            f.map(Value::Number)
                .ok_or_else(|| format!("reasoning effort {s:?}"))?
        } else {
            // Python ints are unbounded; past u64 no budget is valid anyway.
            match t.parse::<u64>() {
                Ok(i) => Value::from(i),
                Err(_) => t
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .ok_or_else(|| format!("reasoning effort {s:?}"))?,
            }
        };
        return Ok(Effort::Other(value));
    }
    if numeric(int) && frac.is_none_or(numeric) {
        return Err(format!("reasoning effort {s:?} in non-ASCII digits"));
    }
    Ok(Effort::Tier(s.clone()))
}

/// `parse_effort_budget`.
fn parse_effort_budget(value: &Value) -> Result<u32, String> {
    if value.is_boolean() {
        return Err("reasoning_effort must not be a boolean".into());
    }
    if let Value::Number(n) = value {
        if n.is_f64() {
            if let Some(f) = n.as_f64().filter(|f| (0.0..=0.99).contains(f)) {
                // `max(1, round(value * 100))`: Python rounds half to even.
                return Ok(((f * 100.0).round_ties_even() as u32).max(1));
            }
        } else if let Some(i) = n.as_u64().filter(|i| (1..=100).contains(i)) {
            return Ok(i as u32);
        }
    }
    Err(format!(
        "reasoning_effort={} is outside the integer budget [1, 100] and the float range [0, 0.99]",
        py::repr(value)
    ))
}

/// The encoder: DeepSeek's recipe with SGLang's adapter (`dsv4`, `dsv41`,
/// 0.5.23 on). `plain` is the tokenizer without its added vocabulary, which
/// recipe encodes message text with.
#[derive(Clone)]
pub struct Recipe {
    pub encoder: std::sync::Arc<Dsv4>,
    pub plain: std::sync::Arc<super::PlainText>,
}

impl super::ChatEncoder for Recipe {
    fn name(&self) -> &'static str {
        super::spec_name(self.encoder.spec())
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
        crate::preprocess::MessageStyle::Template
    }
    fn reads_wire(&self) -> bool {
        true
    }
    fn reads_body(&self) -> bool {
        false
    }
    fn modelled_from(&self) -> Option<(crate::release::Release, &'static str)> {
        Some((
            crate::release::Release::V0523,
            "before 0.5.23 SGLang encodes DeepSeek-V4 with its own encoding_dsv4, not deepseek-recipe, and \
             counts fewer tokens than 0.5.23 for some requests (reasoning effort, text parts, response_format)",
        ))
    }
    fn counts_converted_apis(&self) -> bool {
        // recipe reads the `ChatCompletionRequest` these routes build in
        // Python (which fields count as set), which is not modelled.
        false
    }
    fn same_as(&self, other: &super::Encoder) -> bool {
        matches!(other, super::Encoder::Dsv4(o) if std::sync::Arc::ptr_eq(&self.encoder, &o.encoder))
    }

    /// `DeepSeekRecipeChatEncodingAdapter.encode_messages`: the adapter
    /// handles a trailing assistant turn itself.
    fn prompt(
        &self,
        host: &dyn super::Host,
        inputs: &crate::preprocess::ChatInputs,
        _clock: crate::Clock,
    ) -> Result<super::Prompt, crate::CountError> {
        use crate::CountError;
        let wire = inputs
            .wire
            .as_ref()
            .ok_or_else(|| CountError::Unsupported("no wire request was dumped".into()))?;
        let tools = inputs.tools.as_ref().and_then(Value::as_array);
        let request = Request {
            wire,
            tools: tools.map(Vec::as_slice),
            thinking: host.thinking_requested(inputs),
            reasoning_effort: inputs.reasoning_effort.as_ref(),
        };
        let prompt = self.encoder.encode(&request).map_err(|e| match e {
            Dsv4Error::Rejected(m) => CountError::invalid(m),
            Dsv4Error::Unsupported(m) => CountError::Unsupported(format!(
                "the DeepSeek-V4 encoder would build this prompt in a way the guard does not reproduce: {m}"
            )),
            e => CountError::Template(e.to_string()),
        })?;
        if prompt.images > 0 {
            return Err(CountError::Unsupported(
                "image parts on the DeepSeek-V4.1 encoder are not modelled by the guard".into(),
            ));
        }
        Ok(super::Prompt::Pieces {
            prompt,
            plain: self.plain.clone(),
        })
    }
}

#[cfg(test)]
#[path = "dsv4_tests.rs"]
mod tests;
