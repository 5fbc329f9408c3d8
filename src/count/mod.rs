//! Counting: prompt units → token counts, exactly as SGLang 0.5.23 computes
//! `len(prompt_ids)`. Nothing in here knows about HTTP.

pub mod preprocess;
pub mod template;
pub mod tokenizer;

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

pub use template::{ChatTemplate, ContentFormat, TemplateError};
pub use tokenizer::TextTokenizer;

/// What SGLang turns into one sequence (one `Req`). A batch is several units.
#[derive(Debug, Clone)]
pub enum Unit {
    /// A whole `/v1/chat/completions` body: SGLang's preprocessing, the chat
    /// template and the encode rule all depend on fields across the body.
    Chat(Arc<Value>),
    /// A text encoded with `tokenizer(text)` (default `add_special_tokens=True`).
    Text(String),
    /// Token ids given by the client: counted as given.
    Ids(usize),
    /// `input_embeds`: one token per vector.
    Embeds(usize),
}

/// Why a unit could not be counted. Each of these is a refusal: the guard
/// never forwards what it could not count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CountError {
    /// SGLang itself refuses the request (pydantic validation or a request check).
    #[error("{message}")]
    Invalid { message: String, param: Option<&'static str> },
    /// The chat template raised on both of SGLang's attempts.
    #[error("chat template error: {0}")]
    Template(String),
    /// Content whose token length is not visible in the body (images, audio, ...).
    #[error("{0}")]
    Unsupported(String),
    /// The model directory has a template but no `tokenizer.json`.
    #[error("no tokenizer.json for this model: it can render templates but not count")]
    NoTokenizer,
    #[error("tokenizer failed: {0}")]
    Tokenizer(String),
}

impl CountError {
    pub fn invalid(message: impl Into<String>) -> Self {
        CountError::Invalid { message: message.into(), param: None }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// Everything needed to count one model's prompts.
pub struct ModelCounter {
    tokenizer: Option<TextTokenizer>,
    template: Option<ChatTemplate>,
    special_tokens: Vec<(String, String)>,
}

/// The wall clock `strftime_now` reads; pinned for reproducible counts.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    #[default]
    Local,
    Fixed(chrono::NaiveDateTime),
}

impl Clock {
    pub fn now(&self) -> chrono::NaiveDateTime {
        match self {
            Clock::Local => chrono::Local::now().naive_local(),
            Clock::Fixed(t) => *t,
        }
    }
}

impl ModelCounter {
    /// Loads `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja`
    /// from a directory. A directory with only a template can render but not count.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let _ = dir;
        Ok(Self { tokenizer: None, template: None, special_tokens: Vec::new() })
    }

    pub fn can_count(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// The token count SGLang computes for one unit.
    pub fn count(&self, unit: &Unit, clock: Clock) -> Result<usize, CountError> {
        let _ = (clock, &self.template, &self.special_tokens);
        match unit {
            Unit::Ids(n) | Unit::Embeds(n) => Ok(*n),
            _ => Err(CountError::NoTokenizer),
        }
    }

    /// The chat prompt text after SGLang's preprocessing and the template
    /// (without a `continue_final_message` prefix). For operators debugging a
    /// template from the CLI; the server never prints or logs prompts.
    pub fn render_chat(&self, body: &Value, clock: Clock) -> Result<String, CountError> {
        let _ = (body, clock);
        Err(CountError::Template("not implemented".into()))
    }
}
