//! gpt-oss `/v1/responses`: the prompt SGLang 0.5.23 renders with
//! openai-harmony instead of the chat template.
//!
//! When `hf_config.model_type == "gpt_oss"`, `serving_responses.py` takes its
//! harmony path (`use_harmony`): `create_responses`' request checks, then
//! `_make_request_with_harmony` → `_construct_input_messages_with_harmony`
//! (`harmony_utils.get_system_message`, `get_developer_message`,
//! `parse_response_input` per input item) → `render_for_completion`, i.e.
//! `openai_harmony` 0.0.4's `render_conversation_for_completion(conversation,
//! Role.ASSISTANT)` with `auto_drop_analysis=True`. The ids go to the engine
//! as `GenerateReqInput(input_ids=...)`; nothing else tokenizes them.
//!
//! Harmony's rendering (`src/encoding.rs`, unchanged in rendering from 0.0.4
//! to 0.0.8) is reproduced here as a list of [`Piece`]s: formatting tokens
//! (`<|start|>`, `<|message|>`, ...) by id, and text runs that harmony encodes
//! one by one with `encode_ordinary` (special-token spellings in text stay
//! text). A text run is counted with the model's `tokenizer.json` through the
//! `tokenizers` core with special-token matching off ([`OrdinaryTokenizer`]),
//! which gives harmony's ids exactly: the vocabulary *is* `o200k_base` (its
//! `.tiktoken` serialization rebuilt from `tokenizer.json` has OpenAI's
//! SHA-256, checked at load by [`check_vocabulary`]), the split regex is
//! harmony's `o200k_harmony` pattern, and onig (tokenizers) and fancy-regex
//! (harmony) were found to split identically for every code point and for
//! 186k random strings. Runs must be counted separately: two adjacent runs
//! ("a", "b" from two content parts) are not the encoding of "ab".
//!
//! Python-side details that reach the text are mirrored too: harmony gets the
//! conversation as `json.dumps` JSON and parses it with serde_json 1.0.140
//! *without* `float_roundtrip`, printing values with ryu 1.0: a float
//! `default` in a tool schema is printed as that parser reads Python's `repr`
//! (see [`harmony_display`]; today's serde_json would print `1e+16` where
//! harmony prints `1e16`); dict `arguments` of a `function_call` item go
//! through `orjson.dumps`.
//!
//! Refused ([`HarmonyError::Unsupported`]) because the prompt or the prefills
//! are not in the body: `previous_response_id` with `--enable-response-store`
//! (history stored on the server), any request on a server whose tool server
//! has the browser or python tool outside PD mode (SGLang may run the tool
//! inside the request and prefill again with its output), reasoning items
//! whose text is only an SGLang `encrypted_content` blob, and a few values
//! whose Python form the parsed JSON does not keep (`-0`, integers past 64
//! bits inside tool schemas or arguments, non-string tool names).
//!
//! Not checked here (SGLang refuses them before any prefill, so counting them
//! anyway costs nothing): `model` against the served names, and the fields
//! that do not shape the prompt (sampling parameters, metadata, ...).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::str::FromStr as _;

use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};

use crate::py;
// The `ResponsesRequest` tables SGLang validates with before any encoder.
use crate::preprocess::EFFORT_TIERS;
use crate::responses::{REASONING_STATE_PREFIX, TOOL_TYPES};
pub use crate::serving::ToolServer;

/// `<|return|>`.
pub const RETURN: u32 = 200002;
/// `<|constrain|>`.
pub const CONSTRAIN: u32 = 200003;
/// `<|channel|>`.
pub const CHANNEL: u32 = 200005;
/// `<|start|>`.
pub const START: u32 = 200006;
/// `<|end|>`.
pub const END: u32 = 200007;
/// `<|message|>`.
pub const MESSAGE: u32 = 200008;
/// `<|call|>`.
pub const CALL: u32 = 200012;

/// The formatting tokens harmony renders, as `o200k_harmony` numbers them.
const FORMATTING: [(&str, u32); 7] = [
    ("<|return|>", RETURN),
    ("<|constrain|>", CONSTRAIN),
    ("<|channel|>", CHANNEL),
    ("<|start|>", START),
    ("<|end|>", END),
    ("<|message|>", MESSAGE),
    ("<|call|>", CALL),
];

/// SHA-256 of `o200k_base.tiktoken`, as openai-harmony checks it
/// (`tiktoken_ext/public_encodings.rs`).
pub const O200K_BASE_SHA256: &str =
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d";
/// SHA-256 of the gpt-oss `tokenizer.json` merges, one `"a b\n"` line each:
/// the merge table that was checked to reproduce harmony's rank-based BPE.
pub const GPT_OSS_MERGES_SHA256: &str =
    "6388f73f15bf8f56c7f1ed822f4aee03946c14bad89c663033c84df73e153a0b";
/// `o200k_harmony`'s split pattern (harmony's `Encoding::pattern`).
pub const O200K_PATTERN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// `ResponsesRequest.include`'s literals.
const INCLUDES: [&str; 6] = [
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
];
/// `SystemContent`'s defaults (SGLang sets neither).
const MODEL_IDENTITY: &str = "You are ChatGPT, a large language model trained by OpenAI.";
const KNOWLEDGE_CUTOFF: &str = "2024-06";

/// The server settings the harmony path reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarmonySettings {
    /// `--enable-response-store`.
    pub enable_response_store: bool,
    /// `--disaggregation-mode` other than `null` (`is_disaggregated`).
    pub disaggregated: bool,
    /// The tool server SGLang starts, if any (see [`ToolServer`]).
    pub tool_server: Option<ToolServer>,
}

/// Why there is no prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarmonyError {
    /// SGLang answers with an error (validation, a request check, a failure
    /// while building or rendering the messages) and prefills nothing.
    Invalid(String),
    /// SGLang serves the request, but its prompt (or a later prefill) depends
    /// on something the guard cannot see or does not model.
    Unsupported(String),
}

impl std::fmt::Display for HarmonyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarmonyError::Invalid(m) | HarmonyError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for HarmonyError {}

fn invalid(m: impl Into<String>) -> HarmonyError {
    HarmonyError::Invalid(m.into())
}

fn unsupported(m: impl Into<String>) -> HarmonyError {
    HarmonyError::Unsupported(m.into())
}

/// One unit of the rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A harmony formatting token, by id.
    Special(u32),
    /// A text run, encoded on its own with `encode_ordinary`.
    Text(String),
}

/// The prompt SGLang builds: `len(input_ids)` is the sum over the pieces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    pub pieces: Vec<Piece>,
}

impl Prompt {
    fn special(&mut self, id: u32) {
        self.pieces.push(Piece::Special(id));
    }

    fn text(&mut self, s: impl Into<String>) {
        let s = s.into();
        if !s.is_empty() {
            self.pieces.push(Piece::Text(s));
        }
    }

    /// How many formatting tokens (one id each).
    pub fn special_count(&self) -> usize {
        self.pieces
            .iter()
            .filter(|p| matches!(p, Piece::Special(_)))
            .count()
    }

    /// The text runs, each to be counted on its own.
    pub fn text_runs(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Text(s) => Some(s.as_str()),
            Piece::Special(_) => None,
        })
    }

    /// The prompt as text, formatting tokens spelled out (for logs: encoding
    /// this text is not the prompt's encoding).
    pub fn display(&self) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(s) => out.push_str(s),
                Piece::Special(id) => out.push_str(
                    FORMATTING
                        .iter()
                        .find(|(_, i)| i == id)
                        .map_or("<|?|>", |(s, _)| s),
                ),
            }
        }
        out
    }

    /// The prompt's ids, as harmony renders them.
    pub fn encode(&self, tok: &OrdinaryTokenizer) -> Result<Vec<u32>, String> {
        let mut ids = Vec::new();
        for p in &self.pieces {
            match p {
                Piece::Special(id) => ids.push(*id),
                Piece::Text(s) => ids.extend(tok.encode(s)?),
            }
        }
        Ok(ids)
    }

    /// `len(input_ids)`.
    pub fn count(&self, tok: &OrdinaryTokenizer) -> Result<usize, String> {
        let mut n = self.special_count();
        for s in self.text_runs() {
            n += tok.count(s)?;
        }
        Ok(n)
    }
}

// --- the vocabulary -----------------------------------------------------------

/// The gpt-oss `tokenizer.json` loaded to encode as harmony's
/// `encode_ordinary` does: special-token spellings are text.
pub struct OrdinaryTokenizer {
    tok: tokenizers::Tokenizer,
}

impl OrdinaryTokenizer {
    /// From the text of `tokenizer.json`, after [`check_vocabulary`].
    pub fn from_json(text: &str) -> Result<Self, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| format!("tokenizer.json: {e}"))?;
        check_vocabulary(&doc)?;
        let mut tok = tokenizers::Tokenizer::from_str(text)
            .map_err(|e| format!("tokenizer.json does not load: {e}"))?;
        // Every added token is special (checked), so none is matched in text.
        tok.set_encode_special_tokens(true);
        Ok(Self { tok })
    }

    /// The ids of one text run.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tok
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    /// The length of one text run.
    pub fn count(&self, text: &str) -> Result<usize, String> {
        self.tok
            .encode_fast(text, false)
            .map(|e| e.len())
            .map_err(|e| e.to_string())
    }

    /// The underlying tokenizer (`encode_special_tokens` on).
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tok
    }
}

/// GPT-2's byte-level alphabet: the character standing for each byte.
fn byte_level_alphabet() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..=255u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.into_iter()
        .zip(cs)
        .filter_map(|(b, c)| Some((char::from_u32(c)?, u8::try_from(b).ok()?)))
        .collect()
}

fn base64(bytes: &[u8], out: &mut String) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
}

/// Checks that a `tokenizer.json` encodes text exactly as harmony's
/// `o200k_harmony` does: `o200k_base`'s vocabulary (by the SHA-256 harmony
/// itself checks), the merge table verified against it, harmony's split
/// pattern, no normalizer, and every added token special with the formatting
/// tokens at harmony's ids. SGLang renders gpt-oss with harmony's own
/// vocabulary whatever the checkpoint ships, so a checkpoint that differs
/// cannot be counted with its own file.
pub fn check_vocabulary(doc: &Value) -> Result<(), String> {
    let bad = |what: &str| Err(format!("tokenizer.json is not o200k_harmony: {what}"));
    if !doc.get("normalizer").is_none_or(Value::is_null) {
        return bad("it has a normalizer");
    }
    let pre = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    if doc.get("pre_tokenizer") != Some(&pre) {
        return bad("its pre-tokenizer is not o200k's split + byte level");
    }
    let model = doc.get("model").and_then(Value::as_object);
    let Some(model) = model else {
        return bad("no model");
    };
    let field = |k: &str| model.get(k).unwrap_or(&Value::Null);
    if field("type") != "BPE"
        || !field("dropout").is_null()
        || !field("unk_token").is_null()
        || !field("continuing_subword_prefix").is_null()
        || !field("end_of_word_suffix").is_null()
        || field("fuse_unk") != &Value::Bool(false)
        || field("byte_fallback") != &Value::Bool(false)
        || field("ignore_merges") != &Value::Bool(true)
    {
        return bad("its BPE options differ");
    }
    let Some(vocab) = field("vocab").as_object() else {
        return bad("no vocab");
    };
    let mut by_rank: Vec<Option<&str>> = vec![None; vocab.len()];
    for (tok, id) in vocab {
        match id.as_u64().and_then(|i| by_rank.get_mut(i as usize)) {
            Some(slot @ None) => *slot = Some(tok),
            _ => return bad("its vocab ids are not 0..n"),
        }
    }
    let alphabet = byte_level_alphabet();
    let mut hasher = Sha256::new();
    let mut line = String::new();
    let mut bytes = Vec::new();
    for (rank, tok) in by_rank.iter().enumerate() {
        let tok = tok.unwrap_or_default();
        bytes.clear();
        for c in tok.chars() {
            match alphabet.get(&c) {
                Some(b) => bytes.push(*b),
                None => return bad("a vocab entry is not byte-level"),
            }
        }
        line.clear();
        base64(&bytes, &mut line);
        let _ = writeln!(line, " {rank}");
        hasher.update(line.as_bytes());
    }
    if format!("{:x}", hasher.finalize()) != O200K_BASE_SHA256 {
        return bad("its vocabulary is not o200k_base");
    }
    let Some(merges) = field("merges").as_array() else {
        return bad("no merges");
    };
    let mut hasher = Sha256::new();
    for m in merges {
        let (a, b) = match m {
            Value::String(s) => match s.split_once(' ') {
                Some(p) => p,
                None => return bad("a merge is malformed"),
            },
            Value::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                (Some(a), Some(b)) => (a, b),
                _ => return bad("a merge is malformed"),
            },
            _ => return bad("a merge is malformed"),
        };
        hasher.update(a.as_bytes());
        hasher.update(b" ");
        hasher.update(b.as_bytes());
        hasher.update(b"\n");
    }
    if format!("{:x}", hasher.finalize()) != GPT_OSS_MERGES_SHA256 {
        return bad("its merges are not the verified gpt-oss table");
    }
    let added = doc.get("added_tokens").and_then(Value::as_array);
    let added = added.map(Vec::as_slice).unwrap_or_default();
    for t in added {
        if t.get("special") != Some(&Value::Bool(true)) {
            return bad("an added token is not special");
        }
    }
    for (spelling, id) in FORMATTING {
        let found = added.iter().any(|t| {
            t.get("content").and_then(Value::as_str) == Some(spelling)
                && t.get("id").and_then(Value::as_u64) == Some(u64::from(id))
        });
        if !found {
            return bad(&format!("{spelling} is not token {id}"));
        }
    }
    Ok(())
}

// --- the request ----------------------------------------------------------------

/// A validated `ResponseTool` (what the harmony path reads).
struct Tool<'a> {
    kind: &'a str,
    name: Option<&'a str>,
    description: Option<&'a str>,
    parameters: Option<&'a Map<String, Value>>,
}

/// `ResponsesRequest.input`.
enum Input<'a> {
    Text(&'a str),
    Items(Vec<&'a Map<String, Value>>),
}

/// A harmony `Message` built from the request.
struct Msg {
    role: &'static str,
    /// `Author.name` (tool messages).
    name: Option<String>,
    recipient: Option<String>,
    channel: Option<&'static str>,
    content_type: Option<&'static str>,
    texts: Vec<String>,
}

impl Msg {
    fn new(role: &'static str, texts: Vec<String>) -> Self {
        Msg {
            role,
            name: None,
            recipient: None,
            channel: None,
            content_type: None,
            texts,
        }
    }
}

fn opt_str<'a>(top: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, HarmonyError> {
    match top.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!("{k}: Input should be a valid string"))),
    }
}

fn opt_bool(top: &Map<String, Value>, k: &str, default: bool) -> Result<bool, HarmonyError> {
    match top.get(k) {
        None => Ok(default),
        Some(Value::Null) => Ok(false),
        Some(v) => {
            py::lax_bool(v).ok_or_else(|| invalid(format!("{k}: Input should be a valid boolean")))
        }
    }
}

fn role_of(v: &Value) -> Result<&'static str, HarmonyError> {
    match v.as_str() {
        Some("user") => Ok("user"),
        Some("assistant") => Ok("assistant"),
        Some("system") => Ok("system"),
        Some("developer") => Ok("developer"),
        Some("tool") => Ok("tool"),
        _ => Err(invalid(
            "1 validation error for Author: role: Input should be 'user', 'assistant', 'system', \
             'developer' or 'tool'",
        )),
    }
}

/// `str(x)` for a name interpolated into `functions.{name}`.
fn name_str(v: &Value) -> Result<&str, HarmonyError> {
    v.as_str().ok_or_else(|| {
        unsupported(
            "a tool call whose name is not a string: the guard does not model Python's str() of it",
        )
    })
}

/// A number whose Python value the parsed JSON does not keep: `-0` (an int
/// in Python) and `-0.0` both parse to -0.0, and integers past 64 bits parse
/// to floats here but stay ints in Python.
fn ambiguous_number(v: &Value) -> bool {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            let f = n.as_f64().unwrap_or(0.0);
            (f == 0.0 && f.is_sign_negative())
                || !(-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&f)
        }
        Value::Array(a) => a.iter().any(ambiguous_number),
        Value::Object(o) => o.values().any(ambiguous_number),
        _ => false,
    }
}

fn ambiguous(what: &str) -> HarmonyError {
    unsupported(format!(
        "{what} holds -0 or an integer past 64 bits, whose Python form the guard cannot tell from the JSON it parsed"
    ))
}

/// The prompt SGLang 0.5.23 builds for a `/v1/responses` body on a gpt-oss
/// model, `date` being the server's local date when it renders
/// (`datetime.datetime.now()`, in the SGLang process's time zone).
pub fn responses_prompt(
    body: &Value,
    settings: &HarmonySettings,
    date: chrono::NaiveDate,
) -> Result<Prompt, HarmonyError> {
    let top = body
        .as_object()
        .ok_or_else(|| invalid("Input should be a valid dictionary"))?;
    let request = responses_request(top)?;
    let named_choice = create_responses(&request, settings)?;
    make_request_with_harmony(&request, named_choice.as_ref(), settings)?;
    let messages = construct_input_messages_with_harmony(&request, date)?;
    render_for_completion(&messages)
}

/// A validated `ResponsesRequest` (the fields the harmony path reads).
struct Request<'a> {
    input: Input<'a>,
    instructions: Option<&'a str>,
    previous_response_id: Option<&'a str>,
    /// `reasoning.effort`.
    effort: Option<&'a str>,
    tools: Vec<Tool<'a>>,
    tool_choice: Value,
    background: bool,
    store: bool,
    /// `include` asks for `message.output_text.logprobs`.
    logprobs: bool,
    /// `text.format` is `json_object` or `json_schema`.
    json_format: bool,
}

/// `ResponsesRequest` validation, field by field in the order the errors are
/// reported.
fn responses_request(top: &Map<String, Value>) -> Result<Request<'_>, HarmonyError> {
    let input = match top.get("input") {
        None => return Err(invalid("input: Field required")),
        Some(Value::String(s)) => Input::Text(s),
        Some(Value::Array(items)) => Input::Items(
            items
                .iter()
                .map(|it| {
                    it.as_object().ok_or_else(|| {
                        invalid("input: Input should be a valid list of dictionaries")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid(
                "input: Input should be a valid string or a list of input items",
            ))
        }
    };
    let instructions = opt_str(top, "instructions")?;
    opt_str(top, "model")?;
    let previous_response_id = opt_str(top, "previous_response_id")?;
    let effort = match top.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => reasoning_effort(r)?,
        Some(_) => return Err(invalid("reasoning: Input should be a valid dictionary")),
    };
    let tools = parse_tools(top.get("tools"))?;
    let tool_choice = match top.get("tool_choice") {
        None => Value::String("auto".into()),
        Some(Value::String(s)) if ["auto", "required", "none"].contains(&s.as_str()) => {
            Value::String(s.clone())
        }
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err(invalid(
                "tool_choice: Input should be 'auto', 'required', 'none' or an object",
            ))
        }
    };
    let background = opt_bool(top, "background", false)?;
    let store = opt_bool(top, "store", true)?;
    opt_bool(top, "stream", false)?;
    let logprobs = match top.get("include") {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => {
            for it in items {
                if !it.as_str().is_some_and(|s| INCLUDES.contains(&s)) {
                    return Err(invalid(
                        "include: Input should be one of the include values",
                    ));
                }
            }
            items
                .iter()
                .any(|v| v.as_str() == Some("message.output_text.logprobs"))
        }
        Some(_) => return Err(invalid("include: Input should be a valid list")),
    };
    let json_format = match top.get("text") {
        None | Some(Value::Null) => false,
        Some(Value::Object(t)) => text_format_is_json(t)?,
        Some(_) => return Err(invalid("text: Input should be a valid dictionary")),
    };
    Ok(Request {
        input,
        instructions,
        previous_response_id,
        effort,
        tools,
        tool_choice,
        background,
        store,
        logprobs,
        json_format,
    })
}

/// `ResponseReasoningParam` (a dict `reasoning`): checks `summary`, returns
/// `effort`.
fn reasoning_effort(r: &Map<String, Value>) -> Result<Option<&str>, HarmonyError> {
    match r.get("summary") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if ["auto", "concise", "detailed"].contains(&s.as_str()) => {}
        Some(_) => {
            return Err(invalid(
                "reasoning.summary: Input should be 'auto', 'concise' or 'detailed'",
            ))
        }
    }
    match r.get("effort") {
        // `ResponseReasoningParam.effort` defaults to "medium".
        None => Ok(Some("medium")),
        Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if EFFORT_TIERS.contains(&s.as_str()) => Ok(Some(s)),
        Some(_) => Err(invalid(
            "reasoning.effort: Input should be one of the effort tiers",
        )),
    }
}

/// `ResponseTextConfig` (a dict `text`): whether its `format` is a JSON one.
fn text_format_is_json(t: &Map<String, Value>) -> Result<bool, HarmonyError> {
    match t.get("format") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(f)) => match f.get("type").and_then(Value::as_str) {
            Some("text") => Ok(false),
            Some("json_object" | "json_schema") => Ok(true),
            _ => Err(invalid("text.format: Input should be a valid format")),
        },
        Some(_) => Err(invalid("text.format: Input should be a valid dictionary")),
    }
}

/// `OpenAIServingResponses.create_responses`' checks, in its order, up to the
/// stored-history lookup; returns the named tool choice
/// (`effective_tool_choice`).
fn create_responses(
    request: &Request<'_>,
    settings: &HarmonySettings,
) -> Result<Option<Value>, HarmonyError> {
    let tools = &request.tools;
    let has = |kinds: &[&str]| tools.iter().any(|t| kinds.contains(&t.kind));
    if has(&["shell"]) {
        return Err(invalid("Shell tools are not supported by this model"));
    }
    if request.previous_response_id.is_some() && !settings.enable_response_store {
        return Err(invalid(
            "Response store is disabled. Stateful Responses require --enable-response-store",
        ));
    }
    if request.background && !settings.enable_response_store {
        return Err(invalid(
            "Response store is disabled. Stateful Responses require --enable-response-store",
        ));
    }
    if request.background && !request.store {
        return Err(invalid("background=true requires store=true."));
    }
    let callable = |t: &Tool<'_>| t.kind == "function" || t.kind == "custom";
    if request.tool_choice.as_str() == Some("required") && !tools.iter().any(callable) {
        return Err(invalid(
            "tool_choice=\"required\" requires at least one tool with type=\"function\" or type=\"custom\"",
        ));
    }
    let named_choice = effective_tool_choice(&request.tool_choice)?;
    if let Some(name) = &named_choice {
        if !tools.iter().any(|t| {
            callable(t)
                && t.name
                    .is_some_and(|n| py::eq(&Value::String(n.into()), name))
        }) {
            return Err(invalid(format!(
                "Tool {} is not declared in tools",
                py::json_dumps(name, &py::Dumps::default())
            )));
        }
    }
    if request.logprobs {
        return Err(invalid("logprobs are not supported with gpt-oss models"));
    }
    if request.json_format {
        return Err(invalid(
            "structured output (text.format) is not supported with gpt-oss models",
        ));
    }
    let browser = settings.tool_server.is_some_and(|t| t.browser);
    if has(&["web_search", "web_search_preview"]) && !browser {
        return Err(invalid(
            "web_search requires a browser backend. Set EXA_API_KEY on the SGLang server to enable \
             native Exa-backed web search, or configure a browser MCP tool server.",
        ));
    }
    if settings.tool_server.is_some()
        && settings.disaggregated
        && has(&["web_search", "web_search_preview", "code_interpreter"])
    {
        return Err(invalid(
            "built-in tools (web_search, code_interpreter) are not supported with prefill-decode disaggregation",
        ));
    }
    if let Some(id) = request.previous_response_id {
        if !id.starts_with("resp_") {
            return Err(invalid(format!(
                "Invalid 'response_id': '{id}'. Expected an ID that begins with 'resp'."
            )));
        }
        return Err(unsupported(
            "previous_response_id is refused: SGLang prepends the conversation it stored on the server, \
             whose length the guard cannot see",
        ));
    }
    Ok(named_choice)
}

/// `OpenAIServingResponses._make_request_with_harmony`'s checks: only
/// `tool_choice="auto"`, and no tool server that could run a tool mid-request.
fn make_request_with_harmony(
    request: &Request<'_>,
    named_choice: Option<&Value>,
    settings: &HarmonySettings,
) -> Result<(), HarmonyError> {
    if named_choice.is_some() || request.tool_choice.as_str().is_some_and(|c| c != "auto") {
        return Err(invalid(
            "Harmony tool_choice cannot be honoured: recipient-header decoding constraints are not \
             implemented; use tool_choice='auto'.",
        ));
    }
    let browser = settings.tool_server.is_some_and(|t| t.browser);
    let python = settings.tool_server.is_some_and(|t| t.python);
    if (browser || python) && !settings.disaggregated {
        return Err(unsupported(
            "the server has a tool server with the browser or python tool: SGLang may run it inside the \
             request and prefill again with the tool's output, which the guard cannot see",
        ));
    }
    Ok(())
}

/// `OpenAIServingResponses._construct_input_messages_with_harmony`: the
/// system message, the developer message, then the input.
fn construct_input_messages_with_harmony(
    request: &Request<'_>,
    date: chrono::NaiveDate,
) -> Result<Vec<Msg>, HarmonyError> {
    let (developer, has_function_tools) = developer_text(request.instructions, &request.tools)?;
    let system = system_text(request.effort, date, has_function_tools);
    let mut messages = vec![
        Msg::new("system", vec![system]),
        Msg::new("developer", vec![developer]),
    ];
    match &request.input {
        Input::Text(text) => messages.push(Msg::new("user", vec![(*text).to_owned()])),
        Input::Items(items) => {
            let mut prev: Vec<&Map<String, Value>> = Vec::new();
            for item in items {
                messages.push(parse_response_input(item, &prev)?);
                let kind = item.get("type").and_then(Value::as_str);
                if matches!(kind, Some("function_call" | "custom_tool_call")) {
                    prev.push(item);
                }
            }
        }
    }
    Ok(messages)
}

/// `harmony_utils.render_for_completion`: the encoding's
/// `render_conversation_for_completion` (`auto_drop_analysis=True`) for the
/// assistant.
fn render_for_completion(messages: &[Msg]) -> Result<Prompt, HarmonyError> {
    let mut p = Prompt::default();
    let last_assistant_is_final = messages
        .iter()
        .rev()
        .find(|m| m.role == "assistant")
        .is_some_and(|m| m.channel == Some("final"));
    let first_final = messages.iter().position(|m| m.channel == Some("final"));
    for (i, m) in messages.iter().enumerate() {
        if last_assistant_is_final
            && first_final.is_some_and(|f| i < f)
            && m.channel == Some("analysis")
        {
            continue;
        }
        render_message(m, &mut p)?;
    }
    p.special(START);
    p.text("assistant");
    Ok(p)
}

/// `ResponsesRequest.effective_tool_choice`: `Some(name)` for a named
/// function/custom tool, `None` otherwise (the string forms stay in `tool_choice`).
fn effective_tool_choice(tc: &Value) -> Result<Option<Value>, HarmonyError> {
    let Some(o) = tc.as_object() else {
        return Ok(None);
    };
    let name = match o.get("name") {
        Some(v) if py::truthy(v) => Some(v.clone()),
        _ => match o.get("function") {
            None => None,
            Some(f) if !py::truthy(f) => None,
            Some(Value::Object(f)) => f.get("name").cloned(),
            Some(_) => return Err(invalid("'tool_choice.function' has no attribute 'get'")),
        },
    };
    let kind = o.get("type").and_then(Value::as_str);
    Ok(match name {
        Some(n) if matches!(kind, Some("function" | "custom")) && py::truthy(&n) => Some(n),
        _ => None,
    })
}

fn parse_tools(v: Option<&Value>) -> Result<Vec<Tool<'_>>, HarmonyError> {
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(invalid("tools: Input should be a valid list")),
    };
    let mut out = Vec::new();
    for (i, t) in items.iter().enumerate() {
        let t = t
            .as_object()
            .ok_or_else(|| invalid(format!("tools.{i}: Input should be a valid dictionary")))?;
        let kind = match t.get("type").and_then(Value::as_str) {
            Some(k) if TOOL_TYPES.contains(&k) => k,
            _ => {
                return Err(invalid(format!(
                    "tools.{i}.type: Input should be a tool type"
                )))
            }
        };
        let s = |k: &str| opt_str(t, k).map_err(|e| invalid(format!("tools.{i}.{e}")));
        let name = s("name")?;
        let description = s("description")?;
        let parameters = match t.get("parameters") {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                return Err(invalid(format!(
                    "tools.{i}.parameters: Input should be a valid dictionary"
                )))
            }
        };
        if let Some(v) = t.get("strict") {
            if py::lax_bool(v).is_none() {
                return Err(invalid(format!(
                    "tools.{i}.strict: Input should be a valid boolean"
                )));
            }
        }
        if let Some(v) = t.get("defer_loading") {
            if !v.is_null() && py::lax_bool(v).is_none() {
                return Err(invalid(format!(
                    "tools.{i}.defer_loading: Input should be a valid boolean"
                )));
            }
        }
        match t.get("tools") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.iter().all(Value::is_object) => {}
            Some(_) => {
                return Err(invalid(format!(
                    "tools.{i}.tools: Input should be a valid list of dictionaries"
                )))
            }
        }
        match t.get("format") {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(_) => {
                return Err(invalid(format!(
                    "tools.{i}.format: Input should be a valid dictionary"
                )))
            }
        }
        if kind == "function" && name.is_none_or(str::is_empty) {
            return Err(invalid(format!(
                "tools.{i}: Value error, Function tools must include a name."
            )));
        }
        out.push(Tool {
            kind,
            name,
            description,
            parameters,
        });
    }
    Ok(out)
}

/// `get_system_message(reasoning_effort=...)` rendered (`Render<SystemContent>`).
fn system_text(effort: Option<&str>, date: chrono::NaiveDate, function_tools: bool) -> String {
    let effort = match effort {
        Some("minimal" | "low") => "low",
        Some("high" | "xhigh" | "max") => "high",
        // "medium", and "none"/"ultra"/None, which keep harmony's default.
        _ => "medium",
    };
    let mut s = format!(
        "{MODEL_IDENTITY}\nKnowledge cutoff: {KNOWLEDGE_CUTOFF}\nCurrent date: {}\n\nReasoning: {effort}\n\n\
         # Valid channels: analysis, commentary, final. Channel must be included for every message.",
        date.format("%Y-%m-%d")
    );
    if function_tools {
        s.push_str("\nCalls to these tools must go to the commentary channel: 'functions'.");
    }
    s
}

/// `get_developer_message(instructions, tools)` rendered
/// (`Render<DeveloperContent>`), and whether it has function tools.
fn developer_text(
    instructions: Option<&str>,
    tools: &[Tool<'_>],
) -> Result<(String, bool), HarmonyError> {
    let mut sections: Vec<String> = Vec::new();
    if let Some(instr) = instructions {
        sections.push("# Instructions".into());
        sections.push(instr.into());
    }
    let functions: Vec<&Tool<'_>> = tools.iter().filter(|t| t.kind == "function").collect();
    if !functions.is_empty() {
        let mut ns: Vec<String> = vec!["## functions\n".into(), "namespace functions {\n".into()];
        for t in &functions {
            let description = t.description.ok_or_else(|| {
                invalid("1 validation error for ToolDescription: description: Input should be a valid string")
            })?;
            for line in description.lines() {
                ns.push(format!("// {line}"));
            }
            let name = t.name.unwrap_or_default();
            match t.parameters {
                Some(params) => {
                    let ts = typescript(&Value::Object(params.clone()), "")?;
                    ns.push(format!("type {name} = (_: {ts}) => any;\n"));
                }
                None => ns.push(format!("type {name} = () => any;\n")),
            }
        }
        ns.push("} // namespace functions".into());
        sections.push(["# Tools".to_string(), ns.join("\n")].join("\n\n"));
    }
    Ok((sections.join("\n\n"), !functions.is_empty()))
}

/// `harmony_utils.parse_response_input` for one input item (a dict); each
/// branch of its `if`/`elif` chain is a function below.
fn parse_response_input(
    item: &Map<String, Value>,
    prev: &[&Map<String, Value>],
) -> Result<Msg, HarmonyError> {
    let kind = item.get("type");
    if kind.is_none() || kind.and_then(Value::as_str) == Some("message") {
        return message_input(item);
    }
    match kind.and_then(Value::as_str) {
        Some("function_call_output" | "custom_tool_call_output") => {
            tool_call_output_input(item, prev)
        }
        Some("reasoning") => reasoning_input(item),
        Some(k @ ("function_call" | "custom_tool_call")) => tool_call_input(item, k),
        _ => Err(invalid(format!(
            "Unknown input type: {}",
            item.get("type").map_or("None".into(), |t| t
                .as_str()
                .map_or_else(|| t.to_string(), str::to_owned))
        ))),
    }
}

/// `parse_response_input`, its `"type" not in response_msg or
/// response_msg["type"] == "message"` branch.
fn message_input(item: &Map<String, Value>) -> Result<Msg, HarmonyError> {
    let role_v = item
        .get("role")
        .ok_or_else(|| invalid("KeyError: 'role'"))?;
    let content = item
        .get("content")
        .ok_or_else(|| invalid("KeyError: 'content'"))?;
    let (role_v, prefix) = if role_v.as_str() == Some("system") {
        (Value::String("developer".into()), "Instructions:\n")
    } else {
        (role_v.clone(), "")
    };
    let texts = match content {
        Value::String(s) => vec![format!("{prefix}{s}")],
        Value::Array(parts) => {
            let mut chunks = Vec::new();
            for part in parts {
                let part = part
                    .as_object()
                    .ok_or_else(|| invalid("AttributeError: object has no attribute 'get'"))?;
                let t = part.get("type").and_then(Value::as_str);
                if matches!(t, Some("text" | "input_text" | "output_text")) {
                    chunks.push(part);
                }
            }
            let mut texts = Vec::new();
            for (i, part) in chunks.iter().enumerate() {
                let text = match part.get("text") {
                    None => "",
                    Some(Value::String(s)) => s,
                    Some(_) => return Err(invalid("can only concatenate str to str")),
                };
                texts.push(format!("{}{text}", if i == 0 { prefix } else { "" }));
            }
            texts
        }
        // Iterating a dict yields its keys, which have no `.get`.
        Value::Object(o) if o.is_empty() => Vec::new(),
        Value::Object(_) => {
            return Err(invalid(
                "AttributeError: 'str' object has no attribute 'get'",
            ))
        }
        _ => return Err(invalid("content is not iterable")),
    };
    let role = role_of(&role_v)?;
    let mut msg = Msg::new(role, texts);
    if role == "assistant" && item.get("phase").is_some_and(|p| !p.is_null()) {
        msg.channel = Some(
            if item.get("phase").and_then(Value::as_str) == Some("final_answer") {
                "final"
            } else {
                "commentary"
            },
        );
    }
    Ok(msg)
}

/// `parse_response_input`, its `function_call_output` /
/// `custom_tool_call_output` branch.
fn tool_call_output_input(
    item: &Map<String, Value>,
    prev: &[&Map<String, Value>],
) -> Result<Msg, HarmonyError> {
    let call_id = item
        .get("call_id")
        .ok_or_else(|| invalid("KeyError: 'call_id'"))?;
    let call = prev.iter().rev().find(|p| {
        matches!(
            p.get("type").and_then(Value::as_str),
            Some("function_call" | "custom_tool_call")
        ) && py::eq(p.get("call_id").unwrap_or(&Value::Null), call_id)
    });
    let Some(call) = call else {
        return Err(invalid(format!(
            "No call message found for {}",
            call_id
                .as_str()
                .map_or_else(|| call_id.to_string(), str::to_owned)
        )));
    };
    let output = match item.get("output") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut s = String::new();
            for part in parts.iter().filter_map(Value::as_object) {
                match part.get("text") {
                    None => {}
                    Some(Value::String(t)) => s.push_str(t),
                    Some(_) => return Err(invalid("sequence item: expected str instance")),
                }
            }
            s
        }
        Some(_) => {
            return Err(invalid(
                "1 validation error for Message: content.0: Input should be a valid dictionary or instance of Content",
            ))
        }
    };
    let name = name_str(call.get("name").unwrap_or(&Value::Null))?;
    let mut msg = Msg::new("tool", vec![output]);
    msg.name = Some(format!("functions.{name}"));
    Ok(msg)
}

/// `parse_response_input`, its `reasoning` branch.
fn reasoning_input(item: &Map<String, Value>) -> Result<Msg, HarmonyError> {
    let mut text = String::new();
    for field in ["summary", "content"] {
        let parts: &[Value] = match item.get(field) {
            None => &[],
            Some(v) if !py::truthy(v) => &[],
            Some(Value::Array(a)) => a,
            // A string iterates characters, a dict its keys: no dict parts.
            Some(Value::String(_) | Value::Object(_)) => &[],
            Some(_) => return Err(invalid(format!("'{field}' is not iterable"))),
        };
        let mut texts = Vec::new();
        for part in parts.iter().filter_map(Value::as_object) {
            match part.get("text") {
                None => texts.push(""),
                Some(Value::String(t)) => texts.push(t),
                Some(_) => return Err(invalid("sequence item: expected str instance")),
            }
        }
        text = texts.join("\n");
        if !text.is_empty() {
            break;
        }
    }
    if text.is_empty() {
        let blob = item.get("encrypted_content").and_then(Value::as_str);
        if blob.is_some_and(|b| b.starts_with(REASONING_STATE_PREFIX)) {
            return Err(unsupported(
                "a reasoning item whose text is SGLang's encrypted_content blob (zlib), which \
                 the guard does not inflate",
            ));
        }
    }
    let mut msg = Msg::new("assistant", vec![text]);
    msg.channel = Some("analysis");
    Ok(msg)
}

/// `parse_response_input`, its `function_call` / `custom_tool_call` branch
/// (`kind` is the item's type).
fn tool_call_input(item: &Map<String, Value>, kind: &str) -> Result<Msg, HarmonyError> {
    let arguments = if kind == "custom_tool_call" {
        let payload = match item.get("input") {
            Some(v) if py::truthy(v) => v.clone(),
            _ => Value::String(String::new()),
        };
        if ambiguous_number(&payload) {
            return Err(ambiguous("a custom_tool_call input"));
        }
        let mut m = Map::new();
        m.insert("input".into(), payload);
        py::json_dumps(&Value::Object(m), &py::Dumps::UNICODE)
    } else {
        match item.get("arguments") {
            Some(v) if !py::truthy(v) => "{}".to_owned(),
            None => "{}".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Object(_)) => {
                if ambiguous_number(v) {
                    return Err(ambiguous("function_call arguments"));
                }
                orjson_dumps(v)
            }
            Some(_) => {
                return Err(invalid(
                    "1 validation error for Message: content.0: Input should be a valid dictionary or instance of Content",
                ))
            }
        }
    };
    let name = item
        .get("name")
        .ok_or_else(|| invalid("KeyError: 'name'"))?;
    let name = name_str(name)?;
    let mut msg = Msg::new("assistant", vec![arguments]);
    msg.channel = Some("commentary");
    msg.recipient = Some(format!("functions.{name}"));
    msg.content_type = Some("json");
    Ok(msg)
}

/// `Render<Message>`.
fn render_message(m: &Msg, p: &mut Prompt) -> Result<(), HarmonyError> {
    p.special(START);
    if m.role == "tool" {
        match &m.name {
            Some(n) => p.text(n.clone()),
            None => return Err(invalid("Tools should have a name!")),
        }
    } else {
        p.text(m.role);
        if let Some(n) = &m.name {
            p.text(format!(":{n}"));
        }
    }
    if let Some(r) = &m.recipient {
        if r != "all" {
            p.text(format!(" to={r}"));
        }
    }
    if let Some(c) = m.channel {
        p.special(CHANNEL);
        p.text(c);
    }
    if let Some(ct) = m.content_type {
        match ct.strip_prefix("<|constrain|>") {
            Some(rest) => {
                p.text(" ");
                p.special(CONSTRAIN);
                p.text(rest);
            }
            None => p.text(format!(" {ct}")),
        }
    }
    p.special(MESSAGE);
    for t in &m.texts {
        p.text(t.clone());
    }
    p.special(if m.role == "assistant" && m.recipient.is_some() {
        CALL
    } else {
        END
    });
    Ok(())
}

// --- numbers as they reach the text -----------------------------------------------

/// A float as harmony's serde_json (no `float_roundtrip`) parses Python's
/// `repr` of it: the decimal significand as f64, times or divided by one
/// power of ten (`de.rs::f64_from_parts`); out of range is an error there.
fn harmony_parse_float(repr: &str) -> Result<f64, HarmonyError> {
    let (positive, s) = match repr.strip_prefix('-') {
        Some(rest) => (false, rest),
        None => (true, repr),
    };
    let (mantissa, exp) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().map_err(|_| unsupported("float repr"))?),
        None => (s, 0),
    };
    let (int_part, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut significand: u64 = 0;
    for c in int_part.bytes().chain(frac.bytes()) {
        let d = u64::from(c.wrapping_sub(b'0'));
        if d > 9 {
            return Err(unsupported("float repr"));
        }
        significand = significand
            .checked_mul(10)
            .and_then(|x| x.checked_add(d))
            .ok_or_else(|| unsupported("a float with more digits than serde_json keeps"))?;
    }
    let frac_len = i32::try_from(frac.len()).map_err(|_| unsupported("float repr"))?;
    let mut exponent = exp - frac_len;
    let pow10 = |k: i32| format!("1e{k}").parse::<f64>().unwrap_or(f64::INFINITY);
    let mut f = significand as f64;
    loop {
        if exponent.unsigned_abs() <= 308 {
            if exponent >= 0 {
                f *= pow10(exponent);
                if f.is_infinite() {
                    return Err(invalid("number out of range"));
                }
            } else {
                f /= pow10(-exponent);
            }
            break;
        }
        if f == 0.0 {
            break;
        }
        if exponent >= 0 {
            return Err(invalid("number out of range"));
        }
        f /= 1e308;
        exponent += 308;
    }
    Ok(if positive { f } else { -f })
}

/// An f64 as ryu 1.0 (serde_json 1.0.140, harmony 0.0.4's) writes it:
/// positional while the decimal exponent allows (`1e15` is
/// `1000000000000000.0`, `1e-5` is `0.00001`), else `1e16`, `1.5e-7`.
fn push_ryu(out: &mut String, f: f64) {
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    if f.is_sign_negative() {
        out.push('-');
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let length = digits.len() as i64;
    let kk = exp + 1;
    let k = kk - length;
    let zeros = |out: &mut String, n: i64| out.extend((0..n).map(|_| '0'));
    if 0 <= k && kk <= 16 {
        out.push_str(&digits);
        zeros(out, k);
        out.push_str(".0");
    } else if 0 < kk && kk <= 16 {
        out.push_str(&digits[..kk as usize]);
        out.push('.');
        out.push_str(&digits[kk as usize..]);
    } else if -5 < kk && kk <= 0 {
        out.push_str("0.");
        zeros(out, -kk);
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if length > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}", kk - 1);
    }
}

fn push_harmony_json(out: &mut String, v: &Value) -> Result<(), HarmonyError> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            let _ = write!(out, "{n}");
        }
        Value::Number(n) => {
            if ambiguous_number(v) {
                return Err(ambiguous("a tool schema default"));
            }
            let mut r = String::new();
            py::push_float_repr(&mut r, n.as_f64().unwrap_or(0.0));
            push_ryu(out, harmony_parse_float(&r)?);
        }
        Value::String(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_harmony_json(out, x)?;
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                push_harmony_json(out, x)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `format!("{value}")` inside harmony: compact JSON (serde_json's string
/// escaping, ryu's floats) of the value harmony received from Python.
pub fn harmony_display(v: &Value) -> Result<String, HarmonyError> {
    let mut out = String::new();
    push_harmony_json(&mut out, v)?;
    Ok(out)
}

/// `orjson.dumps(v).decode()`: compact, UTF-8, floats as `repr` except
/// `e-05` numbers written out and exponents unpadded (`1e-7`, `1e+16`).
fn orjson_dumps(v: &Value) -> String {
    fn push(out: &mut String, v: &Value) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) if n.is_i64() || n.is_u64() => {
                let _ = write!(out, "{n}");
            }
            Value::Number(n) => {
                let mut r = String::new();
                py::push_float_repr(&mut r, n.as_f64().unwrap_or(0.0));
                match r.split_once('e') {
                    Some((m, e)) => {
                        let e: i32 = e.parse().unwrap_or(0);
                        if e == -5 {
                            let (sign, m) = m.strip_prefix('-').map_or(("", m), |m| ("-", m));
                            out.push_str(sign);
                            out.push_str("0.0000");
                            out.extend(m.chars().filter(|c| *c != '.'));
                        } else {
                            let _ = write!(out, "{m}e{}{}", if e > 0 { '+' } else { '-' }, e.abs());
                        }
                    }
                    None => out.push_str(&r),
                }
            }
            Value::String(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push(out, x);
                }
                out.push(']');
            }
            Value::Object(o) => {
                out.push('{');
                for (i, (k, x)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(k).unwrap_or_default());
                    out.push(':');
                    push(out, x);
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    push(&mut out, v);
    out
}

// --- json_schema_to_typescript (openai-harmony src/encoding.rs) --------------------

fn is_enum(schema: &Value) -> bool {
    schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

fn nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// `// default: ...` text for a default value.
fn default_comment(default: &Value, schema: &Value) -> Result<String, HarmonyError> {
    Ok(match default.as_str() {
        Some(s) if !is_enum(schema) => format!("default: \"{s}\""),
        Some(s) => format!("default: {s}"),
        None => format!("default: {}", harmony_display(default)?),
    })
}

/// `HarmonyEncoding::json_schema_to_typescript`; its `oneOf` and `object`
/// branches are the functions below.
fn typescript(schema: &Value, indent: &str) -> Result<String, HarmonyError> {
    if let Some(arr) = schema.get("oneOf").and_then(Value::as_array) {
        return one_of_to_typescript(arr, indent);
    }
    if let Some(types) = schema.get("type").and_then(Value::as_array) {
        let names: Vec<&str> = types
            .iter()
            .filter_map(Value::as_str)
            .map(|t| if t == "integer" { "number" } else { t })
            .collect();
        if !names.is_empty() {
            return Ok(names.join(" | "));
        }
    }
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        // (A non-array `oneOf` falls through to "any", as in harmony.)
        return Ok("any".into());
    };
    Ok(match ty {
        "object" => object_to_typescript(schema, indent)?,
        "string" => {
            let enums: Vec<String> = schema
                .get("enum")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|s| format!("\"{s}\""))
                        .collect()
                })
                .unwrap_or_default();
            if enums.is_empty() {
                "string".into()
            } else {
                enums.join(" | ")
            }
        }
        "number" | "integer" => "number".into(),
        "boolean" => "boolean".into(),
        "array" => match schema.get("items") {
            Some(items) => format!("{}[]", typescript(items, indent)?),
            None => "Array<any>".into(),
        },
        _ => "any".into(),
    })
}

/// `json_schema_to_typescript`, its branch for a schema with a `oneOf` array.
fn one_of_to_typescript(arr: &[Value], indent: &str) -> Result<String, HarmonyError> {
    let mut out = String::new();
    let mut first = true;
    for variant in arr {
        if !first {
            out.push('\n');
            let _ = write!(out, "{indent} | ");
        } else {
            let _ = write!(out, "\n{indent} | ");
            first = false;
        }
        let mut type_str = typescript(variant, &format!("{indent}   "))?;
        if nullable(variant) && !type_str.contains("null") {
            type_str.push_str(" | null");
        }
        out.push_str(&type_str);
        let mut trailing = Vec::new();
        if let Some(d) = variant.get("description").and_then(Value::as_str) {
            trailing.push(d.to_owned());
        }
        if let Some(default) = variant.get("default") {
            trailing.push(default_comment(default, variant)?);
        }
        if !trailing.is_empty() {
            let _ = write!(out, " // {}", trailing.join(" "));
        }
    }
    Ok(out)
}

/// `json_schema_to_typescript`, its `"object"` branch: the properties in
/// order, a `oneOf` property written by [`property_one_of_to_typescript`].
fn object_to_typescript(schema: &Value, indent: &str) -> Result<String, HarmonyError> {
    let mut out = String::new();
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "{indent}// {d}");
    }
    out.push_str("{\n");
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let required: HashSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (key, val) in props {
            let opt = if required.contains(key.as_str()) {
                ""
            } else {
                "?"
            };
            if let Some(t) = val.get("title").and_then(Value::as_str) {
                let _ = write!(out, "{indent}// {t}\n{indent}//\n");
            }
            if val.get("oneOf").is_none() {
                if let Some(d) = val.get("description").and_then(Value::as_str) {
                    let _ = writeln!(out, "{indent}// {d}");
                }
            }
            if let Some(ex) = val.get("examples").and_then(Value::as_array) {
                if !ex.is_empty() {
                    let _ = writeln!(out, "{indent}// Examples:");
                    for e in ex.iter().filter_map(Value::as_str) {
                        let _ = writeln!(out, "{indent}// - \"{e}\"");
                    }
                }
            }
            if let Some(arr) = val.get("oneOf").and_then(Value::as_array) {
                property_one_of_to_typescript(&mut out, key, opt, val, arr, indent)?;
                continue;
            }
            let _ = write!(out, "{indent}{key}{opt}: ");
            let mut type_str = typescript(val, &format!("{indent}    "))?;
            if nullable(val) && !type_str.contains("null") {
                type_str.push_str(" | null");
            }
            out.push_str(&type_str);
            out.push(',');
            if val.get("oneOf").is_none() {
                if let Some(default) = val.get("default") {
                    let _ = write!(out, " // {}", default_comment(default, val)?);
                }
            }
            out.push('\n');
        }
    }
    let _ = write!(out, "{indent}}}");
    Ok(out)
}

/// `json_schema_to_typescript`'s `"object"` branch, for a property `key`
/// (schema `val`) with a `oneOf` array `arr`.
fn property_one_of_to_typescript(
    out: &mut String,
    key: &str,
    opt: &str,
    val: &Value,
    arr: &[Value],
    indent: &str,
) -> Result<(), HarmonyError> {
    let property_desc = val.get("description").and_then(Value::as_str);
    let skip = property_desc.is_some()
        && arr
            .first()
            .and_then(|v| v.get("description"))
            .and_then(Value::as_str)
            == property_desc;
    let mut rendered_above = false;
    if !skip {
        if let Some(d) = property_desc {
            let _ = writeln!(out, "{indent}// {d}");
            rendered_above = true;
        }
    }
    if let Some(default) = val.get("default") {
        let _ = writeln!(out, "{indent}// {}", default_comment(default, val)?);
    }
    let _ = writeln!(out, "{indent}{key}{opt}:");
    for (i, variant) in arr.iter().enumerate() {
        let _ = write!(out, "{indent} | ");
        let mut type_str = typescript(variant, &format!("{indent}   "))?;
        if nullable(variant) && !type_str.contains("null") {
            type_str.push_str(" | null");
        }
        out.push_str(&type_str);
        let mut trailing = Vec::new();
        if !(i == 0 && rendered_above) {
            if let Some(d) = variant.get("description").and_then(Value::as_str) {
                if Some(d) != property_desc {
                    trailing.push(d.to_owned());
                }
            }
        }
        if let Some(default) = variant.get("default") {
            trailing.push(default_comment(default, variant)?);
        }
        if !trailing.is_empty() {
            let _ = write!(out, " // {}", trailing.join(" "));
        }
        out.push('\n');
    }
    let _ = writeln!(out, "{indent},");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    /// The gpt-oss fixture: as harmony encodes text, and as plain
    /// `tokenizer.json` (special tokens matched).
    fn tokenizers() -> Option<&'static (OrdinaryTokenizer, tokenizers::Tokenizer)> {
        static TOK: OnceLock<Option<(OrdinaryTokenizer, tokenizers::Tokenizer)>> = OnceLock::new();
        TOK.get_or_init(|| {
            let path = crate::shared_dir()?.join("tokenizers/gpt-oss/tokenizer.json");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let ordinary =
                OrdinaryTokenizer::from_json(&text).expect("the gpt-oss fixture is o200k_harmony");
            let plain = tokenizers::Tokenizer::from_str(&text).unwrap();
            Some((ordinary, plain))
        })
        .as_ref()
    }

    fn fnv(ids: &[u32]) -> String {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for id in ids {
            for b in id.to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
            }
        }
        format!("{h:016x}")
    }

    fn settings(v: &Value) -> HarmonySettings {
        HarmonySettings {
            enable_response_store: v["store"] == true,
            disaggregated: v["pd"] == true,
            tool_server: v["tool_server"].as_array().map(|t| ToolServer {
                browser: t.iter().any(|x| x == "browser"),
                python: t.iter().any(|x| x == "python"),
            }),
        }
    }

    fn day(s: &str) -> chrono::NaiveDate {
        chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn expected() -> Value {
        serde_json::from_str(include_str!("testdata/harmony_expected.json")).unwrap()
    }

    /// Every case of gen_harmony.py: the same ids as SGLang's harmony path,
    /// SGLang's refusals refused as invalid, the guard's as unsupported.
    #[test]
    fn matches_sglang() {
        // Without the tokenizer the refusals are still checked.
        let tok = tokenizers().map(|t| &t.0);
        let data = expected();
        let mut failures = Vec::new();
        let cases = data["cases"].as_array().unwrap();
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let s = settings(&data["settings"][case["setting"].as_str().unwrap()]);
            let got = responses_prompt(&case["body"], &s, day(case["date"].as_str().unwrap()));
            let expect = &case["expect"];
            match (&got, expect) {
                (Ok(_), Value::Object(_)) if tok.is_none() => {}
                (Ok(p), Value::Object(e)) => {
                    let tok = tok.unwrap();
                    let ids = p.encode(tok).unwrap();
                    if ids.len() as u64 != e["tokens"].as_u64().unwrap()
                        || fnv(&ids) != e["ids_fnv"].as_str().unwrap()
                        || p.count(tok).unwrap() != ids.len()
                    {
                        failures.push(format!(
                            "{name}: {} tokens, expected {}\n{}",
                            ids.len(),
                            e["tokens"],
                            p.display()
                        ));
                    }
                }
                (Err(HarmonyError::Invalid(_)), Value::String(e)) if e == "sglang_refuses" => {}
                (Err(HarmonyError::Unsupported(_)), Value::String(e)) if e == "guard_refuses" => {}
                _ => failures.push(format!("{name}: got {got:?}, expected {expect}")),
            }
        }
        println!("{} harmony cases, {} failed", cases.len(), failures.len());
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// Why the prompt is pieces, not text: the rendered text, encoded with
    /// special tokens matched, is not harmony's encoding when a text run holds
    /// a special-token spelling or two text runs meet.
    #[test]
    fn rendered_text_is_not_the_prompt() {
        let Some((tok, plain)) = tokenizers() else {
            return;
        };
        let data = expected();
        for (name, equal) in [
            ("text_input", true),
            ("adjacent_parts", false),
            ("special_spellings_user", false),
        ] {
            let case = data["cases"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap();
            let p = responses_prompt(
                &case["body"],
                &HarmonySettings::default(),
                day("2025-01-15"),
            )
            .unwrap();
            let text = plain.encode_fast(p.display(), false).unwrap();
            assert_eq!(
                text.get_ids() == p.encode(tok).unwrap().as_slice(),
                equal,
                "{name}"
            );
        }
    }

    /// The system message carries the server's local date; its length does
    /// not depend on which date it is: every 1-3 digit run is one token (the
    /// split regex cuts `2025-01-15` into `202` `5` `-` `01` `-` `15`), and
    /// whole messages agree over the years and over two years' days.
    #[test]
    fn count_does_not_depend_on_the_date() {
        let Some((tok, _)) = tokenizers() else { return };
        for n in 0..1000 {
            for digits in [format!("{n}"), format!("{n:02}"), format!("{n:03}")] {
                assert_eq!(tok.count(&digits).unwrap(), 1, "{digits}");
            }
        }
        let base = tok
            .count(&system_text(None, day("2025-01-15"), false))
            .unwrap();
        let mut dates: Vec<chrono::NaiveDate> =
            (1900..=2200).map(|y| day(&format!("{y}-06-30"))).collect();
        let mut d = day("2024-01-01");
        while d < day("2026-01-01") {
            dates.push(d);
            d = d.succ_opt().unwrap();
        }
        for d in dates {
            assert_eq!(
                tok.count(&system_text(None, d, false)).unwrap(),
                base,
                "{d}"
            );
        }
    }

    #[test]
    fn special_spellings_in_text_stay_text() {
        let Some((tok, plain)) = tokenizers() else {
            return;
        };
        let ids = tok.encode("<|start|>user<|end|>").unwrap();
        assert!(!ids.contains(&START) && !ids.contains(&END));
        let matched = plain.encode_fast("<|start|>user<|end|>", false).unwrap();
        assert_eq!(matched.get_ids(), [START, 1428, END]);
    }

    #[test]
    fn rejects_another_vocabulary() {
        let mut doc = json!({"normalizer": null});
        assert!(check_vocabulary(&doc).is_err());
        doc["pre_tokenizer"] = json!({"type": "ByteLevel"});
        assert!(check_vocabulary(&doc)
            .unwrap_err()
            .contains("pre-tokenizer"));
    }

    #[test]
    fn numbers_as_harmony_and_orjson_write_them() {
        // serde_json without float_roundtrip: significand / 1e308 / 1e16.
        assert!(harmony_parse_float("1.2345678901234567e-300").unwrap() > 0.0);
        assert_eq!(harmony_parse_float("0.1").unwrap(), 0.1);
        assert_eq!(harmony_parse_float("1e+16").unwrap(), 1e16);
        assert_eq!(
            harmony_display(&json!([1e16, 1e15, 1.5e-7, 1e-5, 100.0, "a\"\n"])).unwrap(),
            "[1e16,1000000000000000.0,1.5e-7,0.00001,100.0,\"a\\\"\\n\"]"
        );
        assert_eq!(
            orjson_dumps(&json!({"f": [1e16, 1.5e-7, 2.5e-5, 0.1, 100.0], "s": "é\u{1}"})),
            "{\"f\":[1e+16,1.5e-7,0.000025,0.1,100.0],\"s\":\"é\\u0001\"}"
        );
        assert!(matches!(
            harmony_display(&json!(-0.0)),
            Err(HarmonyError::Unsupported(_))
        ));
        assert!(matches!(
            harmony_display(&json!(1e20)),
            Err(HarmonyError::Unsupported(_))
        ));
    }
}
