//! The prefill server's configuration, as far as it changes prompt ids.
//!
//! SGLang's count depends on more than the tokenizer files: on server flags
//! (`--default-chat-template-kwargs`, `--chat-template`, `--tool-call-parser`,
//! ...), on the model's architecture (`config.json`, after
//! `--json-model-override-args`) and on a few environment values. [`SETTINGS`]
//! lists every one of them the guard knows, with how it is handled;
//! [`Observed`] is what one source says about them (a worker's
//! `/server_info` and `/model_info`, or the static configuration), and
//! [`ServerConfig::resolve`] turns an observation into the typed settings the
//! counter applies, or into the list of settings the guard does not model
//! (the model is then not served).
//!
//! Adding a setting: one row in [`SETTINGS`], one field of [`ServerConfig`]
//! read in [`ServerConfig::resolve`], and its consumer.
//!
//! Keys absent from a `/server_info` answer are SGLang's defaults: older
//! builds (0.5.19, which the guard protects) do not publish every key.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::release::{Release, Releases, UNKNOWN_VERSION};

/// Where SGLang publishes a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A top-level key of `GET /server_info` (`server_args.resolved_dict()`).
    ServerInfo,
    /// A key of `GET /model_info` (the served `hf_config`, effective parsers).
    ModelInfo,
    /// A process environment value: never visible over HTTP, only configured
    /// (`sglang_env`).
    Env,
}

/// How the guard treats a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Applied exactly as SGLang applies it.
    Modelled,
    /// Changes admission (lengths, truncation), never the ids: no effect on counts.
    NoEffect,
    /// Modelled for some values; the others make the model not ready
    /// (the row's `what` says which).
    Partly,
    /// The guard cannot reproduce its effect: any value but the default
    /// makes the model not ready, unless the static configuration states
    /// the same value (for settings that select files the guard is given).
    Unmodelled,
}

impl Handling {
    pub fn label(self) -> &'static str {
        match self {
            Handling::Modelled => "modelled",
            Handling::NoEffect => "no effect on counts",
            Handling::Partly => "partly modelled",
            Handling::Unmodelled => "not modelled",
        }
    }
}

/// The server settings a configuration states for a model (`config/settings.rs`
/// reads them from flags and TOML).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaticServer {
    /// What the configuration says, in discovery's terms (compared with the
    /// workers' answers).
    pub observed: Observed,
    /// The environment values (never visible over HTTP).
    pub env: SglangEnv,
}

impl StaticServer {
    /// The settings that change prompt ids which this configuration leaves
    /// at SGLang's defaults (`version` unset: every release), in
    /// [`SETTINGS`] order: what a guard without discovery assumes.
    pub fn assumed(&self) -> Vec<&'static str> {
        SETTINGS
            .iter()
            .filter(|s| s.handling != Handling::NoEffect && s.origin != Origin::ModelInfo)
            .filter(|s| !self.observed.is_set(s.name()))
            .map(|s| s.name())
            .collect()
    }
}

/// Every setting the guard reads, by SGLang's own name. A new one is a
/// variant here: the compiler then asks for its name, its default and what
/// [`ServerConfig::resolve`] does with it, so none is silently ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Version,
    DefaultChatTemplateKwargs,
    ChatTemplate,
    HfChatTemplateName,
    ToolCallParser,
    ReasoningParser,
    CompletionTemplate,
    TrustRequestChatTemplate,
    SkipTokenizerInit,
    EnableMis,
    ToolServer,
    DisaggregationMode,
    EnableResponseStore,
    ModelPath,
    TokenizerPath,
    Revision,
    TokenizerMode,
    TokenizerBackend,
    TrustRemoteCode,
    JsonModelOverrideArgs,
    Frontend,
    Architectures,
    ModelType,
    HasImageUnderstanding,
    HasAudioUnderstanding,
    ContextLength,
    AllowAutoTruncate,
    SpeculativeAlgorithm,
    EnableTokenizerBatchEncode,
    EnableDynamicBatchTokenizer,
    SglangDefaultThinking,
    SglangDsv4ReasoningEffort,
    SglangDsv41ReasoningEffort,
    ExaApiKey,
    SglangRustServer,
    SglangMmAvoidRetokenize,
}

impl Key {
    /// SGLang's name: the `/server_info` or `/model_info` key, or the variable.
    pub const fn name(self) -> &'static str {
        match self {
            Key::Version => "version",
            Key::DefaultChatTemplateKwargs => "default_chat_template_kwargs",
            Key::ChatTemplate => "chat_template",
            Key::HfChatTemplateName => "hf_chat_template_name",
            Key::ToolCallParser => "tool_call_parser",
            Key::ReasoningParser => "reasoning_parser",
            Key::CompletionTemplate => "completion_template",
            Key::TrustRequestChatTemplate => "trust_request_chat_template",
            Key::SkipTokenizerInit => "skip_tokenizer_init",
            Key::EnableMis => "enable_mis",
            Key::ToolServer => "tool_server",
            Key::DisaggregationMode => "disaggregation_mode",
            Key::EnableResponseStore => "enable_response_store",
            Key::ModelPath => "model_path",
            Key::TokenizerPath => "tokenizer_path",
            Key::Revision => "revision",
            Key::TokenizerMode => "tokenizer_mode",
            Key::TokenizerBackend => "tokenizer_backend",
            Key::TrustRemoteCode => "trust_remote_code",
            Key::JsonModelOverrideArgs => "json_model_override_args",
            Key::Frontend => "frontend",
            Key::Architectures => "architectures",
            Key::ModelType => "model_type",
            Key::HasImageUnderstanding => "has_image_understanding",
            Key::HasAudioUnderstanding => "has_audio_understanding",
            Key::ContextLength => "context_length",
            Key::AllowAutoTruncate => "allow_auto_truncate",
            Key::SpeculativeAlgorithm => "speculative_algorithm",
            Key::EnableTokenizerBatchEncode => "enable_tokenizer_batch_encode",
            Key::EnableDynamicBatchTokenizer => "enable_dynamic_batch_tokenizer",
            Key::SglangDefaultThinking => "SGLANG_DEFAULT_THINKING",
            Key::SglangDsv4ReasoningEffort => "SGLANG_DSV4_REASONING_EFFORT",
            Key::SglangDsv41ReasoningEffort => "SGLANG_DSV41_REASONING_EFFORT",
            Key::ExaApiKey => "EXA_API_KEY",
            Key::SglangRustServer => "SGLANG_RUST_SERVER",
            Key::SglangMmAvoidRetokenize => "SGLANG_MM_AVOID_RETOKENIZE",
        }
    }
}

/// One setting the guard reads.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub key: Key,
    pub origin: Origin,
    pub handling: Handling,
    /// What it does to the prompt and what the guard does with it (README, audit).
    pub what: &'static str,
}

impl Setting {
    /// SGLang's own name (the `/server_info` or `/model_info` key, or the variable).
    pub const fn name(&self) -> &'static str {
        self.key.name()
    }
}

/// Every SGLang setting that changes (or could be thought to change) a count.
pub static SETTINGS: &[Setting] = &[
    Setting {
        key: Key::Version,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "0.5.23 and later: the reference; 0.5.19-0.5.22: request tools are rendered as those builds dump them \
               (\"strict\": false added, fields in model order); unknown (a static configuration that states none, \
               or workers on different builds): counted both ways, the larger wins; before 0.5.19: not modelled",
    },
    Setting {
        key: Key::DefaultChatTemplateKwargs,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "merged into every chat request's chat_template_kwargs with setdefault (the request's own keys win); \
               its reasoning_effort fills an unset request effort; a chat_template key renders every request with that template",
    },
    Setting {
        key: Key::ChatTemplate,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "a .jinja file: rendered when the guard is given the same file (chat_template = the same path); \
               glm-5.3 / glm-5.3-flash: SGLang's Python template; a conversation-template name or a .json conversation template: not modelled",
    },
    Setting {
        key: Key::HfChatTemplateName,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "picks the named template of a checkpoint that ships several (else the first)",
    },
    Setting {
        key: Key::ToolCallParser,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "deepseekv32 / deepseekv4 / deepseekv41 / kimi_k3 replace the chat template with a model-specific encoder; \
               muse rewrites the template's tools (not modelled); the other parsers only parse output",
    },
    Setting {
        key: Key::ReasoningParser,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "changes /v1/messages thinking (requests with `thinking` are then refused); hunyuan rewrites the reasoning effort \
               and beam / response_template prefix continue_final_message (not modelled); the others only parse output",
    },
    Setting {
        key: Key::CompletionTemplate,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "wraps every /v1/completions prompt for fill-in-the-middle: deepseek_coder, star_coder, qwen_coder modelled; \
               a .json template not modelled",
    },
    Setting {
        key: Key::TrustRequestChatTemplate,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "lets a request carry its own chat_template: the guard refuses such requests (it does not render client templates)",
    },
    Setting {
        key: Key::SkipTokenizerInit,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "the server takes token ids only: the guard counts ids and refuses text, as SGLang does",
    },
    Setting {
        key: Key::EnableMis,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "/v1/score packs all items into one sequence: the guard counts both layouts and keeps the larger",
    },
    Setting {
        key: Key::ToolServer,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "gpt-oss /v1/responses: which built-in tools the server offers (its tools are not visible: both are assumed), which decides SGLang's refusals and the guard's",
    },
    Setting {
        key: Key::DisaggregationMode,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "gpt-oss /v1/responses: with a tool server, PD mode refuses built-in tools; outside it the server may run a tool and prefill again, so the guard refuses",
    },
    Setting {
        key: Key::EnableResponseStore,
        origin: Origin::ServerInfo,
        handling: Handling::Modelled,
        what: "previous_response_id prepends stored history the guard cannot see: such requests are refused",
    },
    Setting {
        key: Key::ModelPath,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "SGLang infers a conversation template from some model paths (LLaVA, InternVL, MiniCPM-V, ...): those are not modelled",
    },
    Setting {
        key: Key::TokenizerPath,
        origin: Origin::ServerInfo,
        handling: Handling::Unmodelled,
        what: "a tokenizer (and chat template) other than the model's: set tokenizer_path to the same value once the guard's \
               tokenizer directory is that tokenizer",
    },
    Setting {
        key: Key::Revision,
        origin: Origin::ServerInfo,
        handling: Handling::Unmodelled,
        what: "the tokenizer and template of another revision: set revision to the same value (and the guard loads that revision)",
    },
    Setting {
        key: Key::TokenizerMode,
        origin: Origin::ServerInfo,
        handling: Handling::Unmodelled,
        what: "slow: the slow (Python) tokenizer, which can split differently",
    },
    Setting {
        key: Key::TokenizerBackend,
        origin: Origin::ServerInfo,
        handling: Handling::Unmodelled,
        what: "fastokens: another tokenizer implementation",
    },
    Setting {
        key: Key::TrustRemoteCode,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "loads a tokenizer class from the checkpoint's code (auto_map): not modelled; without auto_map no effect",
    },
    Setting {
        key: Key::JsonModelOverrideArgs,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "can rewrite architectures / model_type and so the encoder: read from /model_info (the served config); \
               without it, an override of either is not modelled",
    },
    Setting {
        key: Key::Frontend,
        origin: Origin::ServerInfo,
        handling: Handling::Partly,
        what: "python (or absent): modelled; SGLang's Rust frontend renders with other code: not modelled",
    },
    Setting {
        key: Key::Architectures,
        origin: Origin::ModelInfo,
        handling: Handling::Partly,
        what: "selects the encoder (DeepSeek-V3.2/V4/V4.1, GLM-5.3, Kimi-K3, Inkling); from /model_info, else config.json",
    },
    Setting {
        key: Key::ModelType,
        origin: Origin::ModelInfo,
        handling: Handling::Partly,
        what: "gpt_oss selects harmony on /v1/responses, deepseek_v41 the V4.1 encoder, conversation templates for some VLMs",
    },
    Setting {
        key: Key::HasImageUnderstanding,
        origin: Origin::ModelInfo,
        handling: Handling::Partly,
        what: "a multimodal server re-tokenizes text-only prompts with special tokens: modelled when the tokenizer adds none \
               (the ids are reused), not modelled when it adds a BOS",
    },
    Setting {
        key: Key::HasAudioUnderstanding,
        origin: Origin::ModelInfo,
        handling: Handling::Partly,
        what: "as has_image_understanding",
    },
    Setting {
        key: Key::ContextLength,
        origin: Origin::ServerInfo,
        handling: Handling::NoEffect,
        what: "admission only; the limit comes from max_req_input_len",
    },
    Setting {
        key: Key::AllowAutoTruncate,
        origin: Origin::ServerInfo,
        handling: Handling::NoEffect,
        what: "admission only: SGLang truncates, the guard still refuses prompts at or over the limit",
    },
    Setting {
        key: Key::SpeculativeAlgorithm,
        origin: Origin::ServerInfo,
        handling: Handling::NoEffect,
        what: "reserves tokens in the context-length check only; the ids are unchanged",
    },
    Setting {
        key: Key::EnableTokenizerBatchEncode,
        origin: Origin::ServerInfo,
        handling: Handling::NoEffect,
        what: "the same ids, encoded in batches",
    },
    Setting {
        key: Key::EnableDynamicBatchTokenizer,
        origin: Origin::ServerInfo,
        handling: Handling::NoEffect,
        what: "the same ids, encoded in batches",
    },
    Setting {
        key: Key::SglangDefaultThinking,
        origin: Origin::Env,
        handling: Handling::Modelled,
        what: "default thinking mode of the DeepSeek-V3.2/V4 encoders (invisible over HTTP: set it in sglang_env)",
    },
    Setting {
        key: Key::SglangDsv4ReasoningEffort,
        origin: Origin::Env,
        handling: Handling::Modelled,
        what: "default reasoning effort of the DeepSeek-V4 encoder (invisible over HTTP: set it in sglang_env)",
    },
    Setting {
        key: Key::SglangDsv41ReasoningEffort,
        origin: Origin::Env,
        handling: Handling::Modelled,
        what: "default reasoning effort of the DeepSeek-V4.1 encoder (invisible over HTTP: set it in sglang_env)",
    },
    Setting {
        key: Key::ExaApiKey,
        origin: Origin::Env,
        handling: Handling::Modelled,
        what: "without --tool-server, a non-empty key starts SGLang's native browser tool for gpt-oss /v1/responses (invisible over HTTP: state it in sglang_env; the guard keeps only whether it is set)",
    },
    Setting {
        key: Key::SglangRustServer,
        origin: Origin::Env,
        handling: Handling::Unmodelled,
        what: "the Rust HTTP frontend renders prompts with other code",
    },
    Setting {
        key: Key::SglangMmAvoidRetokenize,
        origin: Origin::Env,
        handling: Handling::Partly,
        what: "default true: modelled; false re-tokenizes /generate input_ids that come with images (not modelled)",
    },
];

/// Environment values SGLang reads that never change prompt ids (accepted
/// in `sglang_env` so an operator can paste the server's environment).
pub const ENV_WITHOUT_EFFECT: &[&str] = &[
    "SGLANG_PARALLEL_PROMPT_ENCODE",
    "SGLANG_PARALLEL_PROMPT_ENCODE_MIN_CHARS",
    "SGLANG_PATCH_TOKENIZER",
    "SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES",
    "SGLANG_ENABLE_RESPONSE_TEMPLATE_TURN_GRAMMAR",
    "SGLANG_TOOL_STRICT_LEVEL",
    "SGLANG_FORWARD_UNKNOWN_TOOLS",
    "SGLANG_MAX_THINK_TOKENS",
    "SGLANG_BATCH_TOKENIZER_OUTPUTS",
    "SGLANG_REQUEST_STATE_WAIT_TIMEOUT",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "SGLANG_EXTERNAL_MM_PROCESSOR_PACKAGE",
    "SGLANG_INKLING_DEFAULT_REASONING_EFFORT",
];

pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name() == name)
}

/// What one source says about the settings: the value of each key it sets,
/// `null` and absent alike meaning SGLang's default. Kept as JSON so sources
/// are compared exactly as they were written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    values: BTreeMap<&'static str, Value>,
    /// Other workers' settings where they differ from these (a rolling
    /// restart with new flags): each is counted too and the larger count
    /// wins, as for workers on different releases.
    alternatives: Vec<Observed>,
}

impl Observed {
    /// A worker's `/server_info` and `/model_info` answers. Only the named
    /// keys are kept (`/server_info` also carries secrets such as `api_key`).
    /// `/model_info`'s parsers are the effective ones and win.
    pub fn from_server(server_info: &Value, model_info: Option<&Value>) -> Self {
        let mut o = Observed::default();
        for s in SETTINGS {
            let source = match s.origin {
                Origin::ServerInfo => Some(server_info),
                Origin::ModelInfo => model_info,
                Origin::Env => None,
            };
            if let Some(v) = source.and_then(|src| src.get(s.name())) {
                o.set(s.name(), v.clone());
            }
        }
        // Every SGLang release publishes `version`; an answer without it
        // (a proxy in between, a test double) may be from any release.
        if server_info.get("version").is_none_or(Value::is_null) {
            o.set("version", Value::String(UNKNOWN_VERSION.into()));
        }
        // The tokenizer path defaults to the model path (resolved at launch):
        // only a different one is a setting.
        if o.get("tokenizer_path").is_some() && o.get("tokenizer_path") == o.get("model_path") {
            o.values.remove("tokenizer_path");
        }
        // `/model_info` reads the parsers through `config_value`: the values
        // in effect, after SGLang's late `auto` fallback.
        if let Some(mi) = model_info {
            for key in ["tool_call_parser", "reasoning_parser"] {
                if let Some(v) = mi.get(key) {
                    o.set(key, v.clone());
                }
            }
        }
        o
    }

    /// Sets `name` (a [`SETTINGS`] name) to `value`; `null` clears it.
    pub fn set(&mut self, name: &str, value: Value) {
        let Some(s) = setting(name) else { return };
        let value = normalize(s.key, value);
        if value.is_null() {
            self.values.remove(s.name());
        } else {
            self.values.insert(s.name(), value);
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// `self`, also counted as each of `others` (see [`Observed::alternatives`]).
    pub fn with_alternatives(mut self, others: Vec<Observed>) -> Observed {
        self.alternatives = others;
        self
    }

    /// The other settings the same prompts are also counted under.
    pub fn alternatives(&self) -> &[Observed] {
        &self.alternatives
    }

    /// Every setting this source sets, in [`SETTINGS`] order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Value)> + '_ {
        self.settings().map(|(s, v)| (s.name(), v))
    }

    /// [`Observed::iter`] with each value's row.
    pub fn settings(&self) -> impl Iterator<Item = (&'static Setting, &Value)> + '_ {
        SETTINGS
            .iter()
            .filter_map(|s| self.values.get(s.name()).map(|v| (s, v)))
    }

    /// `self` with every setting `over` sets replaced by its value.
    pub fn overlaid(&self, over: &Observed) -> Observed {
        let mut out = self.clone();
        for (k, v) in &over.values {
            out.values.insert(k, v.clone());
        }
        out
    }

    /// The settings on which the two sources disagree (one of them may
    /// leave a setting at its default), in [`SETTINGS`] order.
    pub fn differences(&self, other: &Observed) -> Vec<&'static str> {
        SETTINGS
            .iter()
            .map(|s| s.name())
            .filter(|name| self.values.get(name) != other.values.get(name))
            .collect()
    }

    /// The settings `self` sets that `live` contradicts: a static value the
    /// live server does not have.
    /// A live server that does not say its release contradicts no stated one.
    pub fn contradicted_by(&self, live: &Observed) -> Vec<&'static str> {
        let unknown = Value::String(UNKNOWN_VERSION.into());
        self.values
            .iter()
            .filter(|(k, v)| live.values.get(*k) != Some(*v))
            .filter(|(k, _)| !(**k == "version" && live.values.get(*k) == Some(&unknown)))
            .map(|(k, _)| *k)
            .collect()
    }
}

/// One spelling per meaning, so that two sources that mean the same compare
/// equal: SGLang's defaults become `null` (absent), `"{}"`-style JSON
/// strings become the value they encode.
fn normalize(key: Key, value: Value) -> Value {
    let default = match key {
        Key::DefaultChatTemplateKwargs | Key::JsonModelOverrideArgs => {
            let parsed = match value {
                Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                v => v,
            };
            return match parsed {
                Value::Object(m) if m.is_empty() => Value::Null,
                v => v,
            };
        }
        Key::TokenizerMode => Some("auto"),
        Key::TokenizerBackend => Some("huggingface"),
        Key::Frontend => Some("python"),
        // No `--revision` loads the Hub's default branch, the guard's own
        // default too: `revision = "main"` on either side is the default.
        Key::Revision => Some("main"),
        // Prefill and decode workers serve the same prompts: only whether the
        // server is disaggregated matters, so they must not read as disagreeing.
        Key::DisaggregationMode => {
            return match value {
                Value::String(s) if s == "null" => Value::Null,
                Value::String(_) => Value::Bool(true),
                v => v,
            }
        }
        // SGLang's default is null, empty or false (below).
        Key::Version
        | Key::ChatTemplate
        | Key::HfChatTemplateName
        | Key::ToolCallParser
        | Key::ReasoningParser
        | Key::CompletionTemplate
        | Key::TrustRequestChatTemplate
        | Key::SkipTokenizerInit
        | Key::EnableMis
        | Key::ToolServer
        | Key::EnableResponseStore
        | Key::ModelPath
        | Key::TokenizerPath
        | Key::TrustRemoteCode
        | Key::Architectures
        | Key::ModelType
        | Key::HasImageUnderstanding
        | Key::HasAudioUnderstanding
        | Key::ContextLength
        | Key::AllowAutoTruncate
        | Key::SpeculativeAlgorithm
        | Key::EnableTokenizerBatchEncode
        | Key::EnableDynamicBatchTokenizer
        | Key::SglangDefaultThinking
        | Key::SglangDsv4ReasoningEffort
        | Key::SglangDsv41ReasoningEffort
        | Key::ExaApiKey
        | Key::SglangRustServer
        | Key::SglangMmAvoidRetokenize => None,
    };
    match value {
        Value::String(s) if default == Some(s.as_str()) => Value::Null,
        Value::String(s) if s.is_empty() && key != Key::DefaultChatTemplateKwargs => Value::Null,
        Value::Bool(false) => Value::Null,
        Value::Array(a) if a.is_empty() => Value::Null,
        v => v,
    }
}

/// The environment values SGLang reads that change prompt ids (`sglang_env`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SglangEnv {
    /// `SGLANG_DEFAULT_THINKING` (default false): the DeepSeek encoders'
    /// thinking mode when the request does not set `thinking`.
    pub default_thinking: bool,
    /// `SGLANG_DSV4_REASONING_EFFORT` (default empty: none).
    pub dsv4_reasoning_effort: Option<String>,
    /// `SGLANG_DSV41_REASONING_EFFORT` (default unset).
    pub dsv41_reasoning_effort: Option<String>,
    /// `EXA_API_KEY` is set and non-empty (the key itself is never kept).
    pub exa_api_key: bool,
}

impl SglangEnv {
    /// From `NAME = value` pairs, as the server's environment holds them.
    /// Unknown names are refused: a typo would otherwise be ignored, and a
    /// variable the guard does not know could be one that changes counts.
    pub fn parse<'a>(
        vars: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(Self, Observed), String> {
        let mut env = SglangEnv::default();
        let mut observed = Observed::default();
        for (name, value) in vars {
            match name {
                "SGLANG_DEFAULT_THINKING" => {
                    env.default_thinking = env_bool(name, value)?;
                }
                "SGLANG_DSV4_REASONING_EFFORT" => {
                    env.dsv4_reasoning_effort = Some(value.to_string()).filter(|v| !v.is_empty());
                }
                "SGLANG_DSV41_REASONING_EFFORT" => {
                    env.dsv41_reasoning_effort = Some(value.to_string());
                }
                "EXA_API_KEY" => {
                    // A secret: only its presence is kept, and shown.
                    env.exa_api_key = !value.is_empty();
                    if env.exa_api_key {
                        observed
                            .values
                            .insert(setting(name).expect("listed").name(), Value::Bool(true));
                    }
                    continue;
                }
                "SGLANG_RUST_SERVER" | "SGLANG_MM_AVOID_RETOKENIZE" => {
                    // Checked in `resolve`: kept as observed values.
                    let b = env_bool(name, value)?;
                    let non_default = if name == "SGLANG_RUST_SERVER" { b } else { !b };
                    if non_default {
                        observed.values.insert(
                            setting(name).expect("listed").name(),
                            Value::String(value.to_string()),
                        );
                    }
                    continue;
                }
                n if ENV_WITHOUT_EFFECT.contains(&n) => continue,
                other => {
                    return Err(format!(
                        "sglang_env: {other} is not an SGLang variable the guard knows \
                         (known: those in the README's Server configuration table)"
                    ))
                }
            }
            observed.values.insert(
                setting(name).expect("listed").name(),
                Value::String(value.to_string()),
            );
        }
        Ok((env, observed))
    }
}

/// SGLang's `EnvBool.parse`.
fn env_bool(name: &str, value: &str) -> Result<bool, String> {
    match value.to_lowercase().as_str() {
        "true" | "1" | "yes" | "y" => Ok(true),
        "false" | "0" | "no" | "n" => Ok(false),
        _ => Err(format!(
            "sglang_env: {name}=\"{value}\" is not a valid boolean value"
        )),
    }
}

/// The architecture SGLang reads from the served `hf_config`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arch {
    pub architectures: Vec<String>,
    pub model_type: Option<String>,
}

impl Arch {
    /// From a `config.json` document.
    pub fn from_config(config: &Value) -> Self {
        Arch {
            architectures: config["architectures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            model_type: config["model_type"].as_str().map(str::to_owned),
        }
    }

    /// `hf_config.architectures[0]` (`""` when there is none).
    pub fn first(&self) -> &str {
        self.architectures.first().map_or("", String::as_str)
    }
}

/// A setting whose value the guard does not model: the model is not served
/// until the server or the guard's configuration changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmodelled {
    pub setting: &'static str,
    /// The value, as the server states it (shortened for logs and metrics).
    pub value: String,
    /// Why, and what to configure.
    pub why: String,
}

impl std::fmt::Display for Unmodelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}: {}", self.setting, self.value, self.why)
    }
}

/// Renders a setting's value for a message or a metric label: strings bare,
/// other JSON compact, at most 120 characters (a template can be long).
pub fn show(value: &Value) -> String {
    let s = match value {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    if s.chars().count() <= 120 {
        s
    } else {
        let head: String = s.chars().take(100).collect();
        format!("{head}… ({} chars)", s.chars().count())
    }
}

/// The `--completion-template` wrappings SGLang ships (`code_completion_parser.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fim {
    pub name: &'static str,
    pub begin: &'static str,
    pub middle: &'static str,
    pub end: &'static str,
    /// `FimPosition.MIDDLE` (else `END`).
    pub middle_position: bool,
}

pub const FIM_TEMPLATES: &[Fim] = &[
    Fim {
        name: "deepseek_coder",
        begin: "<｜fim▁begin｜>",
        middle: "<｜fim▁hole｜>",
        end: "<｜fim▁end｜>",
        middle_position: true,
    },
    Fim {
        name: "star_coder",
        begin: "<fim_prefix>",
        middle: "<fim_middle>",
        end: "<fim_suffix>",
        middle_position: false,
    },
    Fim {
        name: "qwen_coder",
        begin: "<|fim_prefix|>",
        middle: "<|fim_middle|>",
        end: "<|fim_suffix|>",
        middle_position: false,
    },
];

impl Fim {
    /// `generate_completion_prompt(prompt, suffix, name)`: `prompt` and
    /// `suffix` already as Python's f-string prints them.
    pub fn wrap(&self, prompt: &str, suffix: &str) -> String {
        if self.middle_position {
            format!("{}{prompt}{}{suffix}{}", self.begin, self.middle, self.end)
        } else {
            format!("{}{prompt}{}{suffix}{}", self.begin, self.end, self.middle)
        }
    }
}

/// What a `--chat-template` value is, by SGLang's rules
/// (`TemplateManager._load_explicit_chat_template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplateArg {
    /// A conversation template registered in `conversation.py` (or a `.json` one).
    Conversation(String),
    /// A built-in Python template (`glm-5.3`, `glm-5.3-flash`).
    Python(String),
    /// A `.jinja` file, its content as SGLang loads it.
    Jinja { path: String },
}

/// `conversation.py`'s registered conversation templates.
pub const CONVERSATION_TEMPLATES: &[&str] = &[
    "llama-2",
    "mistral",
    "devstral",
    "llama-4",
    "phi-4-mm",
    "chatml",
    "chatml-llava",
    "vicuna_v1.1",
    "llama_3_vision",
    "llava_llama_3",
    "internlm2-chat",
    "internvl-2-5",
    "qwen2-vl",
    "deepseek-ocr",
    "unlimited-ocr",
    "paddle-ocr",
    "deepseek-vl2",
    "gemma-it",
    "gme-qwen2-vl",
    "minicpmv",
    "janus-pro",
    "minicpmo",
    "kimi-vl",
    "qwen2-audio",
    "moss-vl",
    "points-v15-chat",
    "whisper",
];

pub const PYTHON_TEMPLATES: &[&str] = &["glm-5.3", "glm-5.3-flash"];

impl ChatTemplateArg {
    pub fn parse(arg: &str) -> Self {
        if CONVERSATION_TEMPLATES.contains(&arg) {
            ChatTemplateArg::Conversation(arg.to_string())
        } else if PYTHON_TEMPLATES.contains(&arg) {
            ChatTemplateArg::Python(arg.to_string())
        } else if arg.ends_with(".jinja") {
            ChatTemplateArg::Jinja {
                path: arg.to_string(),
            }
        } else {
            // SGLang loads any other existing path as a JSON conversation template.
            ChatTemplateArg::Conversation(arg.to_string())
        }
    }
}

/// `conversation.py::get_conv_template_by_model_path`: without
/// `--chat-template`, SGLang `release` renders with a conversation template
/// when the model path (or, for a local directory, its `config.json` model
/// type) matches one of these. A match is not modelled, so erring toward a
/// match (the model type is consulted even where SGLang could not read it)
/// only refuses, never undercounts.
///
/// The matchers by release: none before 0.4.6.post2; from 0.4.6.post2 to
/// 0.4.10.post1 mainstream chat models too ([`early_conversation_template`]),
/// overriding the checkpoint's template (0.4.10-0.4.10.post1: only for a
/// checkpoint without one, `hf_has_template`); from 0.4.10.post2 vision,
/// OCR and speech models.
pub fn conversation_template_for(
    model_path: &str,
    model_type: Option<&str>,
    release: Release,
    hf_has_template: bool,
) -> Option<String> {
    use Release::{V0406post2, V0410post2, V0410, V0507, V0512, V0523};
    if release < V0406post2 {
        return None;
    }
    if release < V0410post2 {
        if release >= V0410 && hf_has_template {
            return None;
        }
        return early_conversation_template(model_path, release);
    }
    let p = model_path.to_lowercase();
    let word = |w: &str| {
        p.match_indices(w).any(|(i, _)| {
            let before = p[..i].chars().next_back();
            let after = p[i + w.len()..].chars().next();
            let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            boundary(before) && boundary(after)
        })
    };
    let contains_in_order =
        |a: &str, b: &str| p.find(a).is_some_and(|i| p[i + a.len()..].contains(b));
    // `points` as a word from 0.5.7; a substring before (0.5.4), which is more.
    if (release < V0507 && p.contains("points")) || word("points") {
        return Some("points-v15-chat".into());
    }
    if contains_in_order("moss", "vl") {
        return Some("moss-vl".into());
    }
    if p.contains("internvl") {
        return Some("internvl-2-5".into());
    }
    if p.contains("janus") {
        return Some("janus-pro".into());
    }
    if p.contains("vicuna") || p.contains("llava-v1.5") || p.contains("llava-next-video-7b") {
        return Some("vicuna_v1.1".into());
    }
    if contains_in_order("deepseek", "vl2") {
        return Some("deepseek-vl2".into());
    }
    if [
        "llava-v1.6-34b",
        "llava-v1.6-yi-34b",
        "llava-next-video-34b",
        "llava-onevision-qwen2",
    ]
    .iter()
    .any(|m| p.contains(m))
    {
        return Some("chatml-llava".into());
    }
    // MiniCPM-V/O 4.6 left the conversation templates in 0.5.12, 4.7 in 0.5.23.
    let v46 = release >= V0512
        && (model_type == Some("minicpmv4_6")
            || [
                "minicpm-v-4.6",
                "minicpm-v-4_6",
                "minicpm-o-4.6",
                "minicpm-o-4_6",
            ]
            .iter()
            .any(|m| p.contains(m)));
    let v47 = release >= V0523
        && (model_type == Some("minicpmv4_7")
            || [
                "minicpm-v-4.7",
                "minicpm-v-4_7",
                "minicpm-o-4.7",
                "minicpm-o-4_7",
            ]
            .iter()
            .any(|m| p.contains(m)));
    let minicpm_new = v46 || v47;
    if !minicpm_new {
        if p.contains("minicpm-v") {
            return Some("minicpmv".into());
        }
        if p.contains("minicpm-o") {
            return Some("minicpmo".into());
        }
    }
    for (needle, name) in [
        ("phi-4-multimodal", "phi-4-mm"),
        ("deepseek-ocr", "deepseek-ocr"),
        ("unlimited", "unlimited-ocr"),
        ("paddleocr", "paddle-ocr"),
        ("whisper", "whisper"),
    ] {
        if p.contains(needle) {
            return Some(name.into());
        }
    }
    let by_type = match model_type? {
        "internvl_chat" => "internvl-2-5",
        "deepseek_vl_v2" => "deepseek-vl2",
        "multi_modality" => "janus-pro",
        "phi4mm" => "phi-4-mm",
        "minicpmv" => "minicpmv",
        "minicpmo" => "minicpmo",
        "moss_vl" => "moss-vl",
        "deepseek-ocr" => "deepseek-ocr",
        "unlimited-ocr" => "unlimited-ocr",
        "paddleocr_vl" => "paddle-ocr",
        "whisper" => "whisper",
        _ => return None,
    };
    Some(by_type.into())
}

/// The matchers of 0.4.6.post2 to 0.4.10.post1, first match wins, each from
/// the release that added it. Mainstream chat checkpoints match (any
/// `mistral…instruct`, `gemma-3…it`, `qwen…vl`, a `4` after `llama`), and
/// their conversation template then replaces the checkpoint's: the guard
/// refuses such a model on those releases. 0.4.6.post2-0.4.6.post3 test
/// substrings in any order; from 0.4.6.post4 regexes (`a.*b`: `b` after `a`).
fn early_conversation_template(model_path: &str, release: Release) -> Option<String> {
    use Release::{V0406post4, V0407post1, V0409post1, V0409post4, V0409post5, V0407, V0409};
    let p = model_path.to_lowercase();
    let has = |w: &str| p.contains(w);
    // `re.search("a.*b.*c")`: each after the one before.
    let seq = |words: &[&str]| {
        let mut at = 0;
        words.iter().all(|w| match p[at..].find(w) {
            Some(i) => {
                at += i + w.len();
                true
            }
            None => false,
        })
    };
    let substrings = release < V0406post4;
    let found = |name: &str| Some(name.to_string());
    if release >= V0406post4 {
        if (release >= V0409post4 && has("internvl")) || has("internvl2_5") {
            return found("internvl-2-5");
        }
        if release >= V0409post5 && seq(&["intern", "s1"]) {
            return found("interns1");
        }
    }
    let vision = if substrings {
        has("llama") && has("3.2") && has("vision")
    } else {
        seq(&["llama", "3.2", "vision"])
    };
    if vision {
        return found("llama_3_vision");
    }
    if release >= V0409post1 && seq(&["llama", "4"]) {
        return found("llama_4_vision");
    }
    if has("janus") {
        return found("janus-pro");
    }
    if has("vicuna") || has("llava-v1.5") || has("llava-next-video-7b") {
        return found("vicuna_v1.1");
    }
    if substrings {
        let instruct = has("instruct");
        if (has("llama-2") && has("chat"))
            || ((has("mistral") || has("mixtral")) && instruct)
            || (has("codellama") && instruct)
        {
            return found("llama-2");
        }
    } else {
        if seq(&["llama-2", "chat"]) || seq(&["codellama", "instruct"]) {
            return found("llama-2");
        }
        if has("pixtral") || seq(&["mistral", "instruct"]) || seq(&["mixtral", "instruct"]) {
            return found("mistral");
        }
    }
    let in_order_or_any = |a: &str, b: &str| {
        if substrings {
            has(a) && has(b)
        } else {
            seq(&[a, b])
        }
    };
    if in_order_or_any("deepseek", "vl2") {
        return found("deepseek-vl2");
    }
    if (substrings && has("gme") && has("qwen") && has("vl")) || seq(&["gme", "qwen", "vl"]) {
        return found("gme-qwen2-vl");
    }
    if in_order_or_any("qwen", "vl") {
        return found("qwen2-vl");
    }
    if release >= V0409 && seq(&["qwen", "audio"]) {
        return found("qwen2-audio");
    }
    if [
        "llava-v1.6-34b",
        "llava-v1.6-yi-34b",
        "llava-next-video-34b",
        "llava-onevision-qwen2",
    ]
    .iter()
    .any(|m| has(m))
    {
        return found("chatml-llava");
    }
    let gemma = if substrings {
        (has("gemma") && has("it")) || (has("gemma-3") && !has("1b"))
    } else {
        seq(&["gemma-3", "it"])
    };
    if gemma {
        return found("gemma-it");
    }
    if has("minicpm-v") {
        return found("minicpmv");
    }
    if has("minicpm-o") {
        return found("minicpmo");
    }
    if in_order_or_any("kimi", "vl") {
        return found("kimi-vl");
    }
    if release >= V0407 && has("devstral") {
        return found("devstral");
    }
    if release >= V0407 && has("phi-4-multimodal") {
        return found("phi-4-mm");
    }
    if release >= V0407post1 && has("vila") {
        return found("chatml");
    }
    if release >= V0409post1 && seq(&["mimo", "vl"]) {
        return found("mimo-vl");
    }
    None
}

/// Tool-call parsers SGLang knows (`FunctionCallParser.ToolCallParserEnum`,
/// 0.5.23's plus those only older releases had); besides those named in
/// [`ServerConfig::resolve`], they parse output and leave the prompt alone.
const TOOL_CALL_PARSERS: &[&str] = &[
    "apertus2509",
    "beam",
    "cohere_command4",
    "deepseekv3",
    "deepseekv31",
    "deepseekv32",
    "deepseekv4",
    "deepseekv41",
    "dots",
    "glm",
    "glm45",
    "glm47",
    "gpt-oss",
    "k2_horizon",
    "kimi_k2",
    "kimi_k3",
    "lfm2",
    "ling3",
    "llama3",
    "mimo",
    "minicpm5",
    "mistral",
    "muse",
    "poolside_v1",
    "pythonic",
    "qwen",
    "qwen25",
    // 0.4.9.post3 only.
    "qwen3",
    "qwen3_coder",
    "spark25",
    "step3",
    "step3p5",
    "minimax-m2",
    "minimax-m3",
    "nanbeige",
    "trinity",
    "interns1",
    "hermes",
    "hunyuan",
    "gigachat3",
    "gigachat35",
    "gemma4",
    "inkling",
    "iquest_q1",
    "response_template",
];

/// Reasoning parsers SGLang knows (`ReasoningParser.DetectorMap`, 0.5.23's
/// plus those only older releases had).
const REASONING_PARSERS: &[&str] = &[
    "apertus2509",
    "beam",
    "deepseek-r1",
    "deepseek-v3",
    "deepseek-v4",
    "deepseek-v41",
    "dots",
    "glm45",
    "ling3",
    "hunyuan",
    "gpt-oss",
    "k2_horizon",
    "kimi",
    "kimi_k2",
    "kimi_k3",
    "mimo",
    "muse",
    "poolside_v1",
    "qwen3",
    "qwen3-thinking",
    "minimax",
    "minimax-append-think",
    "minimax-m3",
    "nanbeige",
    "step3",
    "step3p5",
    "mistral",
    "nemotron_3",
    // 0.5.x before nemotron_3.
    "nano_v3",
    "granite_thinking_parser",
    "interns1",
    "gemma4",
    "gigachat35",
    "inkling",
    "iquest_q1",
    "cohere_command4",
    "response_template",
];

/// The settings, typed, as the counter applies them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerConfig {
    /// `--default-chat-template-kwargs` (empty: none).
    pub default_chat_template_kwargs: Map<String, Value>,
    pub tool_call_parser: Option<String>,
    pub reasoning_parser: Option<String>,
    /// `--chat-template`.
    pub chat_template: Option<ChatTemplateArg>,
    pub hf_chat_template_name: Option<String>,
    /// `--completion-template` (a built-in one; a `.json` one is unmodelled).
    pub completion_template: Option<Fim>,
    pub trust_request_chat_template: bool,
    pub skip_tokenizer_init: bool,
    pub enable_mis: bool,
    pub tool_server: bool,
    pub enable_response_store: bool,
    /// `--disaggregation-mode` prefill or decode.
    pub disaggregated: bool,
    pub trust_remote_code: bool,
    /// `model_path`, for the conversation-template inference.
    pub model_path: Option<String>,
    /// The served architecture when the server stated it (`/model_info`);
    /// `None`: the model directory's `config.json` decides.
    pub arch: Option<Arch>,
    /// The server is multimodal (`has_image_understanding` or
    /// `has_audio_understanding`).
    pub multimodal: bool,
    /// The releases the server may run (`version`; several when it is unknown
    /// or the workers differ): a prompt is counted as each builds it, and
    /// the largest count is its length.
    pub releases: Releases,
    pub env: SglangEnv,
}

impl ServerConfig {
    /// The typed settings of `observed`, or every setting in it the guard
    /// does not model. `env` carries the environment values (which are
    /// also in `observed`, for comparison).
    pub fn resolve(observed: &Observed, env: &SglangEnv) -> Result<Self, Vec<Unmodelled>> {
        let mut problems = Vec::new();
        let mut refuse = |setting: &'static str, value: &Value, why: String| {
            problems.push(Unmodelled {
                setting,
                value: show(value),
                why,
            })
        };
        let mut c = ServerConfig {
            env: env.clone(),
            ..Default::default()
        };
        for (setting, value) in observed.settings() {
            let name = setting.name();
            let text = value.as_str();
            match setting.key {
                Key::DefaultChatTemplateKwargs => match value {
                    Value::Object(m) => c.default_chat_template_kwargs = m.clone(),
                    v => refuse(name, v, "not a JSON object".into()),
                },
                Key::ToolCallParser => match text {
                    Some("muse") => refuse(
                        name,
                        value,
                        "the muse parser rewrites the tools the template renders; the guard does not model it"
                            .into(),
                    ),
                    Some(p) if TOOL_CALL_PARSERS.contains(&p) => c.tool_call_parser = Some(p.into()),
                    _ => refuse(name, value, "not a tool-call parser any SGLang release knows".into()),
                },
                Key::ReasoningParser => match text {
                    Some(p @ ("hunyuan" | "beam" | "response_template")) => refuse(
                        name,
                        value,
                        format!(
                            "the {p} reasoning parser changes the prompt (reasoning effort or the \
                             continue_final_message prefix); the guard does not model it"
                        ),
                    ),
                    Some(p) if REASONING_PARSERS.contains(&p) => c.reasoning_parser = Some(p.into()),
                    _ => refuse(name, value, "not a reasoning parser any SGLang release knows".into()),
                },
                Key::ChatTemplate => match text.map(ChatTemplateArg::parse) {
                    Some(ChatTemplateArg::Conversation(n)) => refuse(
                        name,
                        value,
                        format!(
                            "`{n}` is an SGLang conversation template (or a .json one), which the guard does not model; \
                             serve the model with its Hugging Face template or a .jinja file"
                        ),
                    ),
                    Some(arg) => c.chat_template = Some(arg),
                    None => refuse(name, value, "not a string".into()),
                },
                Key::HfChatTemplateName => match text {
                    Some(n) => c.hf_chat_template_name = Some(n.into()),
                    None => refuse(name, value, "not a string".into()),
                },
                Key::CompletionTemplate => match text.and_then(|t| FIM_TEMPLATES.iter().find(|f| f.name == t)) {
                    Some(f) => c.completion_template = Some(*f),
                    None => refuse(
                        name,
                        value,
                        "only SGLang's built-in completion templates (deepseek_coder, star_coder, qwen_coder) are modelled"
                            .into(),
                    ),
                },
                Key::TrustRequestChatTemplate => c.trust_request_chat_template = true,
                Key::SkipTokenizerInit => c.skip_tokenizer_init = true,
                Key::EnableMis => c.enable_mis = true,
                Key::ToolServer => c.tool_server = true,
                Key::EnableResponseStore => c.enable_response_store = true,
                Key::DisaggregationMode => c.disaggregated = true,
                Key::TrustRemoteCode => c.trust_remote_code = true,
                Key::ModelPath => c.model_path = text.map(str::to_owned),
                Key::Architectures => {
                    let arch = c.arch.get_or_insert_with(Arch::default);
                    arch.architectures = value
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                        .unwrap_or_default();
                }
                Key::ModelType => {
                    c.arch.get_or_insert_with(Arch::default).model_type = text.map(str::to_owned);
                }
                Key::HasImageUnderstanding | Key::HasAudioUnderstanding => c.multimodal = true,
                Key::JsonModelOverrideArgs => {
                    let overrides_arch = value
                        .as_object()
                        .is_some_and(|m| m.contains_key("architectures") || m.contains_key("model_type"));
                    let served_arch_known =
                        observed.is_set("architectures") || observed.is_set("model_type");
                    if overrides_arch && !served_arch_known {
                        refuse(
                            name,
                            value,
                            "it overrides the architecture, which selects the encoder, and the served \
                             architecture is not known (the guard reads it from /model_info)"
                                .into(),
                        );
                    }
                }
                Key::Version => match Releases::of_versions(value) {
                    Ok(releases) => c.releases = releases,
                    Err(why) => refuse(name, value, why),
                },
                Key::TokenizerPath | Key::Revision => {
                    // Compared with the static configuration (see `Observed::contradicted_by`):
                    // reaching here means the static value is the same.
                }
                Key::TokenizerMode | Key::TokenizerBackend => refuse(
                    name,
                    value,
                    "another tokenizer implementation, which can split text differently; serve with the default".into(),
                ),
                Key::Frontend => refuse(
                    name,
                    value,
                    "SGLang's Rust frontend renders prompts with code the guard does not model".into(),
                ),
                Key::SglangRustServer => refuse(
                    name,
                    value,
                    "SGLang's Rust frontend renders prompts with code the guard does not model".into(),
                ),
                Key::SglangMmAvoidRetokenize => refuse(
                    name,
                    value,
                    "/generate token ids that come with images are re-tokenized; not modelled".into(),
                ),
                // Admission only (lengths, truncation, scheduling): no effect on ids.
                Key::ContextLength
                | Key::AllowAutoTruncate
                | Key::SpeculativeAlgorithm
                | Key::EnableTokenizerBatchEncode
                | Key::EnableDynamicBatchTokenizer => {}
                // Environment values: the counter applies them through `env`.
                Key::SglangDefaultThinking
                | Key::SglangDsv4ReasoningEffort
                | Key::SglangDsv41ReasoningEffort
                | Key::ExaApiKey => {}
            }
        }
        if !observed.is_set("version") {
            // Nobody said which release the server runs: it may be any.
            c.releases = Releases::any();
        }
        if problems.is_empty() {
            Ok(c)
        } else {
            Err(problems)
        }
    }

    /// The tool server `http_server.py` starts for gpt-oss `/v1/responses`:
    /// `--tool-server demo` or MCP servers offer tools the guard cannot see
    /// (both built-ins are assumed), else a set `EXA_API_KEY` starts the
    /// native browser.
    pub fn harmony_tool_server(&self) -> Option<ToolServer> {
        if self.tool_server {
            Some(ToolServer::UNKNOWN)
        } else if self.env.exa_api_key {
            Some(ToolServer {
                browser: true,
                python: false,
            })
        } else {
            None
        }
    }

    /// A request's `chat_template_kwargs` after `_process_messages` merged
    /// the server defaults in: `setdefault`, so the request's keys win.
    pub fn merge_default_kwargs(&self, ctk: &mut Map<String, Value>) {
        for (k, v) in &self.default_chat_template_kwargs {
            if !ctk.contains_key(k) {
                ctk.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Settings that select files the guard is given (`tokenizer_path`,
/// `revision`): a live value is modelled only when the static configuration
/// states the same one, i.e. the operator pointed the guard at those files.
pub fn needs_acknowledgement(name: &str) -> bool {
    matches!(name, "tokenizer_path" | "revision")
}

/// What SGLang's tool server offers to gpt-oss's harmony prompt: a server
/// setting (`--tool-server`, `EXA_API_KEY`), so it lives with the settings
/// and the harmony encoder reads it from here.
///
/// Offers (`has_tool("browser")`, `has_tool("python")`).
///
/// SGLang starts one for `--tool-server demo` (`DemoToolServer`: browser when
/// `EXA_API_KEY` is set, python when the `gpt_oss` package imports),
/// `--tool-server HOST:PORT,...` (`MCPToolServer`: a tool per MCP server,
/// named by the server, unknowable offline: use [`ToolServer::UNKNOWN`]), and
/// without `--tool-server` when `EXA_API_KEY` is set (`NativeToolServer`:
/// browser only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolServer {
    pub browser: bool,
    pub python: bool,
}

impl ToolServer {
    /// A tool server whose tools are not known: assume both built-ins.
    pub const UNKNOWN: ToolServer = ToolServer {
        browser: true,
        python: true,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_info_keeps_only_the_named_keys_and_normalizes_defaults() {
        let info = json!({
            "api_key": "secret", "default_chat_template_kwargs": {"enable_thinking": false},
            "tokenizer_mode": "auto", "json_model_override_args": "{}", "chat_template": null,
            "tool_call_parser": "qwen25", "skip_tokenizer_init": false, "frontend": "python",
        });
        let o = Observed::from_server(
            &info,
            Some(&json!({"architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3", "has_image_understanding": false})),
        );
        let set: Vec<&str> = o.iter().map(|(k, _)| k).collect();
        assert_eq!(
            set,
            [
                "version",
                "default_chat_template_kwargs",
                "tool_call_parser",
                "architectures",
                "model_type"
            ]
        );
        assert!(o.get("api_key").is_none());
        let c = ServerConfig::resolve(&o, &SglangEnv::default()).unwrap();
        assert_eq!(
            c.default_chat_template_kwargs.get("enable_thinking"),
            Some(&json!(false))
        );
        assert_eq!(c.arch.unwrap().first(), "Qwen3ForCausalLM");
    }

    #[test]
    fn the_version_decides_which_releases_are_counted() {
        use Release::*;
        let releases = |v: Value| {
            let mut o = Observed::default();
            o.set("version", v);
            ServerConfig::resolve(&o, &SglangEnv::default())
                .map(|c| c.releases.iter().collect::<Vec<_>>())
        };
        assert_eq!(releases(json!("0.5.23")), Ok(vec![V0523]));
        assert_eq!(releases(json!("0.6.0")), Ok(vec![V0523]));
        assert_eq!(releases(json!("0.5.23rc0")), Ok(vec![V0522, V0523]));
        assert_eq!(releases(json!("0.5.19")), Ok(vec![V0518]));
        assert_eq!(releases(json!("0.5.21.post2")), Ok(vec![V0521]));
        assert_eq!(releases(json!("v0.5.22")), Ok(vec![V0522]));
        assert_eq!(releases(json!("0.4.10.post2")), Ok(vec![V0410post2]));
        assert_eq!(
            releases(json!(["0.5.23", "0.5.19", "0.5.20"])),
            Ok(vec![V0518, V0520, V0523])
        );
        assert!(releases(json!("0.4.4")).is_err(), "older than PD: refused");
        // A version nobody can read: any release.
        for unknown in [json!("latest"), json!(5), json!(UNKNOWN_VERSION)] {
            assert_eq!(releases(unknown), Ok(Release::ALL.to_vec()));
        }
        // A static configuration that states no version: every release.
        assert_eq!(
            ServerConfig::resolve(&Observed::default(), &SglangEnv::default())
                .map(|c| c.releases.iter().collect::<Vec<_>>()),
            Ok(Release::ALL.to_vec())
        );
        assert_eq!(
            ServerConfig::default().releases.iter().collect::<Vec<_>>(),
            [V0523]
        );
        // A `/server_info` answer without one: any release, and it
        // contradicts no version a static configuration states.
        let o = Observed::from_server(&json!({}), None);
        assert_eq!(o.get("version"), Some(&json!(UNKNOWN_VERSION)));
        let mut stat = Observed::default();
        stat.set("version", json!("0.5.19"));
        assert!(stat.contradicted_by(&o).is_empty());
        assert_eq!(o.overlaid(&stat).get("version"), Some(&json!("0.5.19")));
    }

    #[test]
    fn unmodelled_values_are_listed_with_what_to_do() {
        let info = json!({"tokenizer_mode": "slow", "chat_template": "chatml",
            "tool_call_parser": "muse", "completion_template": "/etc/fim.json"});
        let err = ServerConfig::resolve(&Observed::from_server(&info, None), &SglangEnv::default())
            .unwrap_err();
        let names: Vec<&str> = err.iter().map(|u| u.setting).collect();
        assert_eq!(
            names,
            [
                "chat_template",
                "tool_call_parser",
                "completion_template",
                "tokenizer_mode"
            ]
        );
        assert!(err[0].why.contains("conversation template"), "{}", err[0]);
    }

    #[test]
    fn static_and_live_compare_by_meaning() {
        let live = Observed::from_server(
            &json!({"default_chat_template_kwargs": "{\"enable_thinking\": false}",
                    "reasoning_parser": "qwen3", "version": "0.5.19"}),
            None,
        );
        let mut stat = Observed::default();
        stat.set("version", json!("0.5.19"));
        stat.set(
            "default_chat_template_kwargs",
            json!({"enable_thinking": false}),
        );
        assert!(stat.contradicted_by(&live).is_empty());
        stat.set("reasoning_parser", json!("deepseek-r1"));
        assert_eq!(stat.contradicted_by(&live), ["reasoning_parser"]);
        assert_eq!(live.differences(&stat), ["reasoning_parser"]);
    }

    #[test]
    fn the_main_revision_is_the_default_on_both_sides() {
        let default = Observed::from_server(&json!({"revision": null}), None);
        let main = Observed::from_server(&json!({"revision": "main"}), None);
        let mut stat = Observed::default();
        stat.set("revision", json!("main"));
        assert!(stat.contradicted_by(&default).is_empty());
        assert!(default.contradicted_by(&main).is_empty());
        assert!(!main.iter().any(|(name, _)| needs_acknowledgement(name)));
        stat.set("revision", json!("v2"));
        assert_eq!(stat.contradicted_by(&main), ["revision"]);
    }

    #[test]
    fn env_values_parse_as_sglang_parses_them() {
        let (env, observed) = SglangEnv::parse([
            ("SGLANG_DEFAULT_THINKING", "Yes"),
            ("SGLANG_DSV4_REASONING_EFFORT", "high"),
            ("SGLANG_PARALLEL_PROMPT_ENCODE", "0"),
        ])
        .unwrap();
        assert!(env.default_thinking);
        assert_eq!(env.dsv4_reasoning_effort.as_deref(), Some("high"));
        assert!(observed.is_set("SGLANG_DEFAULT_THINKING"));
        assert!(SglangEnv::parse([("SGLANG_DEFAULT_THINKNG", "1")]).is_err());
        assert!(SglangEnv::parse([("SGLANG_DEFAULT_THINKING", "maybe")]).is_err());
        let (_, rust) = SglangEnv::parse([("SGLANG_RUST_SERVER", "1")]).unwrap();
        assert!(ServerConfig::resolve(&rust, &SglangEnv::default()).is_err());
    }

    #[test]
    fn conversation_templates_inferred_from_model_paths() {
        for (path, ty, want) in [
            ("/models/llava-v1.5-7b", None, Some("vicuna_v1.1")),
            ("OpenGVLab/InternVL2_5-8B", None, Some("internvl-2-5")),
            ("/mnt/points/Qwen3-8B", None, Some("points-v15-chat")),
            ("/mnt/checkpoints/Qwen3-8B", None, None),
            ("/models/qwen3", Some("qwen3"), None),
            ("/models/x", Some("internvl_chat"), Some("internvl-2-5")),
            ("openbmb/MiniCPM-V-4_6", None, None),
            ("openbmb/MiniCPM-V-2_6", None, Some("minicpmv")),
            ("deepseek-ai/deepseek-vl2-small", None, Some("deepseek-vl2")),
        ] {
            assert_eq!(
                conversation_template_for(path, ty, Release::V0523, true).as_deref(),
                want,
                "{path}"
            );
        }
    }

    #[test]
    fn fim_wraps_as_sglang() {
        let ds = FIM_TEMPLATES[0];
        assert_eq!(
            ds.wrap("a", "b"),
            "<｜fim▁begin｜>a<｜fim▁hole｜>b<｜fim▁end｜>"
        );
        let q = FIM_TEMPLATES[2];
        assert_eq!(
            q.wrap("a", "None"),
            "<|fim_prefix|>a<|fim_suffix|>None<|fim_middle|>"
        );
    }
}
