//! How a model turns chat messages into prompt ids: chosen once per model
//! and serving profile, as SGLang 0.5.23 chooses.
//!
//! SGLang's choice, in its order:
//! 1. `TemplateManager.load_chat_template`: `--chat-template` (a
//!    conversation template, a Python template, a `.jinja` file), else a
//!    conversation template inferred from the model path, else the
//!    checkpoint's Hugging Face template (the processor's on a multimodal
//!    server; `--hf-chat-template-name` among named ones), replaced by a
//!    Python template (GLM-5.3) where the architecture and template say so;
//! 2. `chat_encoding.resolve_chat_encoding_spec`: `--tool-call-parser`,
//!    then the architecture, pick a model-specific encoder (dsv32, dsv4,
//!    dsv41, kimi_k3, inkling), which replaces the template on the chat path;
//! 3. a conversation template overrides every encoder.
//!
//! [`select`] mirrors that and returns the [`Encoder`], or the settings
//! that make it one the guard does not model. Adding an encoder is one
//! module beside this one implementing [`ChatEncoder`] (no method has a
//! default), one variant of [`Encoder`] (the compiler then asks for its arm
//! in [`Encoder::get`]) and its arm in [`select`].

use std::sync::Arc;

use super::model::{CheckpointTemplates, ModelFiles};
use super::preprocess::{ChatInputs, MessageStyle};
use super::release::{EffortVariable, Release, Version};
use super::serving::{
    conversation_template_for, show, Arch, ChatTemplateArg, ServerConfig, Unmodelled,
};
use super::template::{detect_content_format_as, ChatTemplate, ContentFormat};
use super::{Clock, CountError};

#[cfg(test)]
mod compact_expected;
pub mod deepseek_releases;
pub mod dsv32;
pub mod dsv32_serving;
pub mod dsv4;
pub mod dsv41_sglang;
pub mod dsv4_sglang;
pub mod glm53;
pub mod harmony;

/// The Jinja path (`_apply_jinja_template` → `apply_chat_template`): the
/// template SGLang's `TemplateManager` settled on, or why there is none.
#[derive(Clone)]
pub struct Jinja {
    /// `tokenizer.chat_template` after `TemplateManager` (its source, for the
    /// probes that read the text), or the reason chat cannot be rendered.
    pub template: Result<(Arc<str>, Arc<ChatTemplate>), String>,
}

/// A chat prompt as an encoder builds it: each kind is measured its own way
/// by the counter, which knows nothing else about the encoder.
pub enum Prompt {
    /// Text the tokenizer encodes (`add_special_tokens` as SGLang passes it).
    Text {
        text: String,
        add_special_tokens: bool,
    },
    /// DeepSeek recipe's pieces: special-token ids and text runs, the runs
    /// encoded by `plain` where recipe encodes them without the added
    /// vocabulary.
    Pieces {
        prompt: dsv4::Prompt,
        plain: Arc<PlainText>,
    },
    /// A release's own DeepSeek glue: the text (encoded with the default
    /// specials) and its `continue_final_message` prefix, one per server
    /// configuration the guard cannot tell apart; the longest counts.
    Alternatives(Vec<(String, Option<String>)>),
}

/// What an encoder reads from the counter while it builds a prompt.
pub trait Host {
    /// The Jinja path (`_apply_jinja_template`): the template SGLang settled
    /// on, with the request's kwargs, retried once with flattened tools.
    fn jinja_prompt(&self, inputs: &ChatInputs, clock: Clock) -> Result<Prompt, CountError>;
    /// Text a template produced, with the `encode_kwargs` SGLang uses for it.
    fn template_text(&self, text: String) -> Prompt;
    /// `_thinking_requested`: the `thinking` kwarg, else `SGLANG_DEFAULT_THINKING`.
    fn thinking_requested(&self, inputs: &ChatInputs) -> bool;
    /// How the release counted passes `reasoning_effort` to templates.
    fn effort_variable(&self) -> EffortVariable;
    fn server(&self) -> &ServerConfig;
}

/// Everything the counter asks of an encoder. Each encoder is one module
/// implementing it; no method has a default, so a new encoder states every
/// answer that can change a count.
pub trait ChatEncoder: Send + Sync {
    /// A short name for logs, `audit` and the README's model table.
    fn name(&self) -> &'static str;
    /// The Jinja template `tokenizer.apply_chat_template` renders, when this
    /// encoder renders one on some path.
    fn jinja(&self) -> Option<&Jinja>;
    /// The template text whose variable names decide which kwargs can change
    /// the prompt (a Jinja template reads a variable only by writing its
    /// name); `None`: every kwarg may.
    fn kwargs_reader(&self) -> Option<&str>;
    /// The SGLang Python chat template installed as the tokenizer's
    /// `apply_chat_template` (what Ollama's chat calls directly), if any.
    fn python_template(&self) -> Option<glm53::Variant>;
    /// `OpenAIServingChat._resolve_inline_system_support` where it does not
    /// probe a Jinja source: an encoding spec answers
    /// `spec_supports_inline_system` (true for kimi_k3 only), a Python
    /// template its own `supports_inline_system`; `None` for Jinja (probed).
    fn inline_system(&self) -> Option<bool>;
    /// `chat_encoding.spec_owns_reasoning_history`: the encoder renders
    /// assistant `reasoning_content` itself.
    fn owns_reasoning_history(&self) -> bool;
    /// How SGLang's chat preprocessing shapes the messages for it.
    fn message_style(&self) -> MessageStyle;
    /// It reads the request as SGLang dumps it on the wire (`model_dump`).
    fn reads_wire(&self) -> bool;
    /// It reads the request body itself (a release's own glue).
    fn reads_body(&self) -> bool;
    /// The first release whose code this port reproduces, when not every
    /// release, and what the earlier ones do instead.
    fn modelled_from(&self) -> Option<(Release, &'static str)>;
    /// Whether `/v1/messages` and `/v1/responses` requests, converted in
    /// Python, reach it in a form the guard models.
    fn counts_converted_apis(&self) -> bool;
    /// Whether `other` builds every prompt as `self` does (then one count
    /// serves both).
    fn same_as(&self, other: &Encoder) -> bool;
    /// The prompt it builds from SGLang's prepared chat inputs.
    fn prompt(
        &self,
        host: &dyn Host,
        inputs: &ChatInputs,
        clock: Clock,
    ) -> Result<Prompt, CountError>;
}

/// The encoder a model's chat requests go through: one variant per encoder
/// module, and [`Encoder::get`] the one match over them.
#[derive(Clone)]
pub enum Encoder {
    /// A Hugging Face Jinja template.
    Jinja(Jinja),
    /// SGLang's GLM-5.3 Python template (`python_chat_template.py`).
    Glm53(glm53::Glm53Template),
    /// SGLang's `encoding_dsv32.encode_messages` (`chat_encoding_spec ==
    /// "dsv32"`).
    Dsv32(dsv32::Dsv32Encoder),
    /// DeepSeek's recipe with SGLang's adapter (`dsv4`, `dsv41`).
    Dsv4(dsv4::Recipe),
    /// A DeepSeek encoder as a release before 0.5.23 runs it: SGLang's own
    /// `encoding_dsv32` / `encoding_dsv4` / `encoding_dsv41` and the
    /// release's glue around it, from the request body.
    DeepseekRelease(deepseek_releases::DeepseekRelease),
}

impl Encoder {
    pub fn get(&self) -> &(dyn ChatEncoder + 'static) {
        match self {
            Encoder::Jinja(e) => e,
            Encoder::Glm53(e) => e,
            Encoder::Dsv32(e) => e,
            Encoder::Dsv4(e) => e,
            Encoder::DeepseekRelease(e) => e,
        }
    }
}

impl std::ops::Deref for Encoder {
    type Target = dyn ChatEncoder;

    fn deref(&self) -> &Self::Target {
        self.get()
    }
}

impl Jinja {
    /// The same template source, or the same reason there is none.
    pub fn same_as(&self, other: &Jinja) -> bool {
        match (&self.template, &other.template) {
            (Ok((a, _)), Ok((b, _))) => a == b,
            (Err(a), Err(b)) => a == b,
            (Ok(_), Err(_)) | (Err(_), Ok(_)) => false,
        }
    }
}

impl ChatEncoder for Jinja {
    fn name(&self) -> &'static str {
        "jinja"
    }
    fn jinja(&self) -> Option<&Jinja> {
        Some(self)
    }
    fn kwargs_reader(&self) -> Option<&str> {
        self.template.as_ref().ok().map(|(s, _)| &**s)
    }
    fn python_template(&self) -> Option<glm53::Variant> {
        None
    }
    fn inline_system(&self) -> Option<bool> {
        None
    }
    fn owns_reasoning_history(&self) -> bool {
        false
    }
    fn message_style(&self) -> MessageStyle {
        MessageStyle::Template
    }
    fn reads_wire(&self) -> bool {
        false
    }
    fn reads_body(&self) -> bool {
        false
    }
    fn modelled_from(&self) -> Option<(Release, &'static str)> {
        None
    }
    fn counts_converted_apis(&self) -> bool {
        true
    }
    fn same_as(&self, other: &Encoder) -> bool {
        matches!(other, Encoder::Jinja(o) if Jinja::same_as(self, o))
    }
    fn prompt(
        &self,
        host: &dyn Host,
        inputs: &ChatInputs,
        clock: Clock,
    ) -> Result<Prompt, CountError> {
        host.jinja_prompt(inputs, clock)
    }
}

/// How recipe's plain text is counted: with the tokenizer stripped of its
/// added vocabulary. Where the text holds no added-token spelling and the
/// tokenizer does not normalize, that is the same split as the full
/// tokenizer's (the added vocabulary only splits at its matches), so the
/// full tokenizer's counting (bounds, early exit, parallel) applies.
pub struct PlainText {
    pub tokenizer: tokenizers::Tokenizer,
    /// Every added token's content; `None` when the shortcut is not sound
    /// (a normalizer that may change the text).
    added: Option<aho_corasick::AhoCorasick>,
}

impl PlainText {
    pub(crate) fn new(full: &tokenizers::Tokenizer) -> Self {
        let identity = match full.get_normalizer() {
            None => true,
            Some(n) => serde_json::to_value(n).is_ok_and(|v| {
                v.get("type").and_then(serde_json::Value::as_str) == Some("Sequence")
                    && v.get("normalizers")
                        .and_then(serde_json::Value::as_array)
                        .is_some_and(Vec::is_empty)
            }),
        };
        let contents: Vec<String> = full
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .filter(|c| !c.is_empty())
            .collect();
        Self {
            tokenizer: dsv4::plain_tokenizer(full),
            added: identity
                .then(|| aho_corasick::AhoCorasick::new(contents).ok())
                .flatten(),
        }
    }

    /// The full tokenizer encodes `text` exactly as the plain one does.
    pub fn same_as_full(&self, text: &str) -> bool {
        self.added.as_ref().is_some_and(|ac| !ac.is_match(text))
    }
}

/// What [`select`] settled on: the encoder and the facts SGLang derives
/// from the same choice.
pub struct Selected {
    pub encoder: Encoder,
    /// `TemplateManager.jinja_template_content_format`.
    pub content_format: ContentFormat,
}

/// `--chat-template FILE.jinja` as `TemplateManager._load_jinja_template`
/// loads it (`"".join(open(path, "r").readlines()).strip("\n")`, then
/// `.replace("\\n", "\n")`): read in text mode, so `\r\n` and a lone `\r`
/// become `\n` (universal newlines); surrounding newlines stripped; every
/// literal `\n` (backslash, n) turned into a newline.
pub fn load_jinja_file(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let text = crate::py::universal_newlines(text);
    Ok(text.trim_matches('\n').replace("\\n", "\n"))
}

fn compile(source: String) -> Result<(Arc<str>, Arc<ChatTemplate>), String> {
    ChatTemplate::new(&source)
        .map(|t| (Arc::from(source), Arc::new(t)))
        .map_err(|e| format!("chat template does not compile: {e}"))
}

fn unmodelled(setting: &'static str, value: &str, why: impl Into<String>) -> Vec<Unmodelled> {
    vec![Unmodelled {
        setting,
        value: show(&serde_json::Value::String(value.to_string())),
        why: why.into(),
    }]
}

/// The encoder SGLang `release` uses for this model under `cfg`, or why the
/// guard cannot count it.
pub fn select(
    files: &ModelFiles,
    cfg: &ServerConfig,
    release: Release,
) -> Result<Selected, Vec<Unmodelled>> {
    let arch = cfg
        .arch
        .clone()
        .or_else(|| files.arch.clone())
        .unwrap_or_default();
    refuse_unmodelled_loading(files, cfg)?;

    // 1. TemplateManager.load_chat_template: `tokenizer.chat_template` and
    //    the Python template, if one is installed.
    let (template_source, python) = load_chat_template(files, cfg, &arch, release)?;

    // 2. chat_encoding.resolve_chat_encoding_spec: a spec replaces the
    //    template (Python ones included) on the chat path.
    if let Some(spec) = encoding_spec(
        cfg.tool_call_parser.as_deref(),
        &arch,
        template_source.is_some(),
        release,
    ) {
        return build_chat_encoding_adapter(
            spec,
            files,
            cfg,
            &arch,
            template_source.as_deref(),
            release,
        );
    }

    let jinja = Jinja {
        template: match template_source.clone() {
            Some(source) => compile(source),
            None => Err("this model has no chat template".to_owned()),
        },
    };
    if let Some(variant) = python {
        return Ok(Selected {
            encoder: Encoder::Glm53(glm53::Glm53Template { variant, jinja }),
            content_format: ContentFormat::OpenAi,
        });
    }
    let from_file = matches!(cfg.chat_template, Some(ChatTemplateArg::Jinja { .. }));
    let content_format = content_format_of(template_source.as_deref(), release, from_file);
    Ok(Selected {
        encoder: Encoder::Jinja(jinja),
        content_format,
    })
}

/// The content format `release` detects for a template (`from_file`: given
/// by `--chat-template`).
fn content_format_of(source: Option<&str>, release: Release, from_file: bool) -> ContentFormat {
    match (source, release.content_detection(from_file)) {
        (Some(source), Some(detection)) => detect_content_format_as(source, detection),
        _ => ContentFormat::String,
    }
}

/// Server settings under which the loaded tokenizer or the prompt's
/// encoding is not the one the guard builds: refused before anything else.
fn refuse_unmodelled_loading(
    files: &ModelFiles,
    cfg: &ServerConfig,
) -> Result<(), Vec<Unmodelled>> {
    if cfg.trust_remote_code && files.has_remote_tokenizer_code() {
        return Err(unmodelled(
            "trust_remote_code",
            "true",
            "the tokenizer_config.json names a tokenizer class in the checkpoint's own code (auto_map), \
             which the server runs and the guard does not",
        ));
    }
    if cfg.multimodal
        && files
            .tokenizer
            .as_ref()
            .is_some_and(|t| t.auto_adds_specials())
    {
        return Err(unmodelled(
            "has_image_understanding",
            "true",
            "a multimodal server decodes text-only prompts and encodes them again with special tokens, \
             which adds a BOS for this tokenizer; the guard does not model that",
        ));
    }
    Ok(())
}

/// `TemplateManager.load_chat_template` (`parser/template_manager.py`):
/// the Jinja source `tokenizer.chat_template` ends up with, and the Python
/// chat template, if one is installed.
fn load_chat_template(
    files: &ModelFiles,
    cfg: &ServerConfig,
    arch: &Arch,
    release: Release,
) -> Result<(Option<String>, Option<glm53::Variant>), Vec<Unmodelled>> {
    match &cfg.chat_template {
        Some(ChatTemplateArg::Jinja { path }) => Ok((
            Some(load_jinja_file(path).map_err(|e| {
                unmodelled(
                    "chat_template",
                    path,
                    format!(
                        "the server renders with this file; give the guard the same file at the same path ({e})"
                    ),
                )
            })?),
            None,
        )),
        Some(ChatTemplateArg::Python(name)) if release < Release::V0523 => Err(unmodelled(
            "chat_template",
            name,
            format!(
                "SGLang {} has no chat template of that name (its Python templates are 0.5.23's)",
                release.range()
            ),
        )),
        Some(ChatTemplateArg::Python(name)) => {
            let variant = glm53::Variant::from_name(name).ok_or_else(|| {
                unmodelled(
                    "chat_template",
                    name,
                    "an SGLang Python chat template this build does not model",
                )
            })?;
            // `_load_explicit_chat_template` installs the Python template and
            // leaves `tokenizer.chat_template` as the tokenizer loaded it.
            Ok((files.hf_template(false, None).ok().flatten(), Some(variant)))
        }
        Some(ChatTemplateArg::Conversation(name)) => Err(unmodelled(
            "chat_template",
            name,
            "an SGLang conversation template, which the guard does not model",
        )),
        None => {
            let hf_has_template = !matches!(files.templates, CheckpointTemplates::None);
            let model_path = cfg.model_path.as_deref().or(files.source.as_deref());
            if let Some(name) = model_path.and_then(|p| {
                conversation_template_for(p, arch.model_type.as_deref(), release, hf_has_template)
            }) {
                return Err(unmodelled(
                    "model_path",
                    cfg.model_path.as_deref().unwrap_or_default(),
                    format!(
                        "SGLang infers the conversation template `{name}` from this model path or type and \
                         renders with it; the guard does not model conversation templates"
                    ),
                ));
            }
            let hf = files
                .hf_template(cfg.multimodal, cfg.hf_chat_template_name.as_deref())
                .map_err(|e| {
                    unmodelled(
                        "hf_chat_template_name",
                        cfg.hf_chat_template_name.as_deref().unwrap_or_default(),
                        e,
                    )
                })?;
            // The Python templates are 0.5.23's; before, the checkpoint's Jinja.
            let python = hf
                .as_deref()
                .filter(|_| release >= Release::V0523)
                .and_then(|t| python_template_for(&arch.architectures, t))
                .and_then(glm53::Variant::from_name);
            Ok((hf, python))
        }
    }
}

/// `OpenAIServingChat._build_chat_encoding_adapter` (`serving_chat.py`; for
/// `dsv32`, the encoder branch of `_apply_jinja_template`): the
/// model-specific encoder for a resolved chat encoding `spec`, or why it is
/// not modelled.
fn build_chat_encoding_adapter(
    spec: &'static str,
    files: &ModelFiles,
    cfg: &ServerConfig,
    arch: &Arch,
    template_source: Option<&str>,
    release: Release,
) -> Result<Selected, Vec<Unmodelled>> {
    let (setting, value) = match cfg.tool_call_parser.as_deref() {
        Some(p @ ("deepseekv41" | "deepseekv4" | "deepseekv32" | "kimi_k3")) => {
            ("tool_call_parser", p.to_string())
        }
        _ => ("architectures", arch.first().to_string()),
    };
    let from_file = matches!(cfg.chat_template, Some(ChatTemplateArg::Jinja { .. }));
    let content_format = content_format_of(template_source, release, from_file);
    if release < Release::V0523 {
        let Version(a, b, c, _) = release.first();
        let version = (a, b, c);
        let Some(encoder) = deepseek_releases::DeepseekEncoder::for_release(version, spec) else {
            return Err(unmodelled(
                setting,
                &value,
                format!(
                    "SGLang {} encodes this model's chat with its `{spec}` encoder, which this build does not model",
                    release.range()
                ),
            ));
        };
        let profiles = match encoder {
            deepseek_releases::DeepseekEncoder::Dsv4(serving) if serving.has_profiles() => {
                dsv4_profiles(files).map_err(|e| unmodelled(setting, &value, e))?
            }
            _ => Vec::new(),
        };
        let dsv41_default_effort = match encoder {
            deepseek_releases::DeepseekEncoder::Dsv41(_) => Some(
                dsv41_sglang::default_effort_from_env(cfg.env.dsv41_reasoning_effort.as_deref())
                    .map_err(|e| unmodelled("SGLANG_DSV41_REASONING_EFFORT", &value, e))?,
            ),
            _ => None,
        };
        return Ok(Selected {
            encoder: Encoder::DeepseekRelease(deepseek_releases::DeepseekRelease {
                encoder,
                version,
                profiles,
                dsv41_default_effort,
            }),
            content_format,
        });
    }
    match spec {
        "dsv32" => Ok(Selected {
            encoder: Encoder::Dsv32(dsv32::Dsv32Encoder),
            content_format,
        }),
        "dsv4" | "dsv41" => {
            let spec = dsv4::Spec::from_name(spec).expect("a dsv4 spec");
            let tokenizer = files.tokenizer.as_ref().ok_or_else(|| {
                unmodelled(
                    setting,
                    &value,
                    "the DeepSeek-V4 encoder needs the model's tokenizer.json",
                )
            })?;
            let env = dsv4::Dsv4Env {
                default_effort: match spec {
                    dsv4::Spec::V4 => cfg.env.dsv4_reasoning_effort.clone(),
                    dsv4::Spec::V41 => cfg.env.dsv41_reasoning_effort.clone(),
                },
                default_ctk_effort: cfg
                    .default_chat_template_kwargs
                    .get("reasoning_effort")
                    .cloned(),
            };
            let encoder = dsv4::Dsv4::new(spec, &tokenizer.inner, &env).map_err(|e| {
                unmodelled(setting, &value, format!("SGLang's `{}` encoder: {e}", spec_name(spec)))
            })?;
            Ok(Selected {
                encoder: Encoder::Dsv4(dsv4::Recipe {
                    encoder: Arc::new(encoder),
                    plain: Arc::new(PlainText::new(&tokenizer.inner)),
                }),
                content_format,
            })
        }
        _ => Err(unmodelled(
            setting,
            &value,
            format!("SGLang encodes this model's chat with its `{spec}` encoder, which this build does not model"),
        )),
    }
}

/// The DeepSeek-V4 effort profile (0.5.18-0.5.22) of the model:
/// `chat_encoding.resolve_dsv4_reasoning_effort_profile` reads the config's
/// `dsv4_reasoning_effort_profile`, else the checkpoint's
/// `encoding/encoding_dsv4.py` (which the guard's copy of the model must
/// have where the server's has it; `hub.rs` fetches it), else `preview`.
fn dsv4_profiles(files: &ModelFiles) -> Result<Vec<dsv4_sglang::EffortProfile>, String> {
    let encoder_file = files
        .source
        .as_deref()
        .map(|dir| {
            std::path::Path::new(dir)
                .join("encoding")
                .join("encoding_dsv4.py")
        })
        .and_then(|p| std::fs::read_to_string(p).ok());
    dsv4_sglang::EffortProfile::resolve(files.dsv4_effort_profile.as_ref(), encoder_file.as_deref())
        .map(|p| vec![p])
}

pub(crate) fn spec_name(spec: dsv4::Spec) -> &'static str {
    match spec {
        dsv4::Spec::V4 => "dsv4",
        dsv4::Spec::V41 => "dsv41",
    }
}

/// `chat_encoding.resolve_chat_encoding_spec` as `release` has it
/// ([`deepseek_releases::resolve_spec`], checked against nine releases' own
/// choice).
pub fn encoding_spec(
    tool_call_parser: Option<&str>,
    arch: &Arch,
    has_chat_template: bool,
    release: Release,
) -> Option<&'static str> {
    let Version(a, b, c, _) = release.first();
    deepseek_releases::resolve_spec(
        (a, b, c),
        tool_call_parser,
        arch.first(),
        arch.model_type.as_deref(),
        has_chat_template,
    )
}

/// `python_chat_template.resolve_python_chat_template`: the GLM-5.3 Python
/// template replaces a GLM-5.3-style checkpoint template on its architectures.
pub fn python_template_for(architectures: &[String], hf_template: &str) -> Option<&'static str> {
    let name = match architectures.first().map(String::as_str) {
        Some("GlmMoeDsaForCausalLM") => "glm-5.3",
        Some("Glm5NextForConditionalGeneration") => "glm-5.3-flash",
        _ => return None,
    };
    if !is_glm53_template(hf_template) {
        return None;
    }
    let multimodal = hf_template.contains("<|begin_of_image|>");
    (multimodal == (name == "glm-5.3-flash")).then_some(name)
}

/// `template_detection.is_glm53_template`.
pub fn is_glm53_template(t: &str) -> bool {
    [
        "[gMASK]<sop>",
        "Reasoning Effort:",
        "<tool_call>",
        "<arg_key>",
        "<arg_value>",
    ]
    .iter()
    .all(|m| t.contains(m))
        && !t.contains("enable_thinking")
}

/// What can be said of a server's encoder from its settings alone, without
/// the model's files (`audit`): the encoder SGLang picks when the checkpoint
/// has a chat template, and why the guard would not count it, if it would not.
pub fn judge_without_files(cfg: &ServerConfig) -> (String, Option<String>) {
    let arch = cfg.arch.clone().unwrap_or_default();
    // The newest release the server may run (the verdict is the same or
    // stricter on older ones).
    let release = cfg.releases.iter().next_back().unwrap_or(Release::V0523);
    if let Some(ChatTemplateArg::Python(name)) = &cfg.chat_template {
        return (name.clone(), modelled(name).err());
    }
    if cfg.chat_template.is_none() {
        if let Some(name) = cfg
            .model_path
            .as_deref()
            .and_then(|p| conversation_template_for(p, arch.model_type.as_deref(), release, true))
        {
            return (
                format!("conversation template {name}"),
                Some("SGLang infers it from the model path or type; conversation templates are not modelled".into()),
            );
        }
    }
    match encoding_spec(cfg.tool_call_parser.as_deref(), &arch, true, release) {
        Some(spec) => (spec.to_string(), modelled(spec).err()),
        None => ("jinja".to_string(), None),
    }
}

/// Whether this build counts chat with the named encoder.
fn modelled(encoder: &str) -> Result<(), String> {
    match encoder {
        "jinja" | "dsv32" | "dsv4" | "dsv41" | "glm-5.3" | "glm-5.3-flash" => Ok(()),
        other => Err(format!(
            "the `{other}` encoder is not modelled by this build"
        )),
    }
}

#[cfg(test)]
mod load_tests {
    /// python3 -c 'open("t.jinja", "wb").write(b"\r\n{{ x }}\r\nA\rB\\n\r\n\r");
    /// print(repr("".join(open("t.jinja", "r").readlines()).strip("\n").replace("\\n", "\n")))'
    /// prints '{{ x }}\nA\nB\n'.
    #[test]
    fn a_jinja_file_is_read_with_universal_newlines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jinja");
        std::fs::write(&path, b"\r\n{{ x }}\r\nA\rB\\n\r\n\r").unwrap();
        let got = super::load_jinja_file(path.to_str().unwrap()).unwrap();
        assert_eq!(got, "{{ x }}\nA\nB\n");
    }
}
