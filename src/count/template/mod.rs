//! Hugging Face chat templates rendered the way `transformers` renders them.
//! (stub: the real environment is being written)

use serde_json::{Map, Value};

/// A template failed to compile or raised while rendering. SGLang answers such
/// requests with 400, so the guard refuses them too.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

/// How SGLang hands list-valued message content to this template
/// (`detect_jinja_template_content_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Text parts joined with a single space; other parts dropped.
    String,
    /// The list is kept as OpenAI-style parts.
    OpenAi,
}

/// Everything `apply_chat_template` passes to the template, in transformers' order.
pub struct RenderContext<'a> {
    pub messages: &'a Value,
    /// `None` renders as Python `None` (defined, but `is none`).
    pub tools: Option<&'a Value>,
    pub documents: Option<&'a Value>,
    pub add_generation_prompt: bool,
    /// The tokenizer's named special tokens (`bos_token`, ...), only those set.
    pub special_tokens: &'a [(String, String)],
    /// `reasoning_effort` and then the request's `chat_template_kwargs`; later keys win,
    /// and they override the special tokens.
    pub extra: &'a Map<String, Value>,
    /// What `strftime_now` formats.
    pub now: chrono::NaiveDateTime,
}

pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    format: ContentFormat,
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        let mut env = minijinja::Environment::new();
        env.add_template_owned("chat", source.replace("\r\n", "\n"))
            .map_err(|e| TemplateError(e.to_string()))?;
        Ok(Self { env, format: detect_content_format(source) })
    }

    pub fn content_format(&self) -> ContentFormat {
        self.format
    }

    pub fn render(&self, ctx: &RenderContext<'_>) -> Result<String, TemplateError> {
        let mut map = Map::new();
        map.insert("messages".into(), ctx.messages.clone());
        map.insert("tools".into(), ctx.tools.cloned().unwrap_or(Value::Null));
        map.insert("documents".into(), ctx.documents.cloned().unwrap_or(Value::Null));
        map.insert("add_generation_prompt".into(), Value::Bool(ctx.add_generation_prompt));
        for (k, v) in ctx.special_tokens {
            map.insert(k.clone(), Value::String(v.clone()));
        }
        for (k, v) in ctx.extra {
            map.insert(k.clone(), v.clone());
        }
        let tmpl = self.env.get_template("chat").map_err(|e| TemplateError(e.to_string()))?;
        tmpl.render(minijinja::Value::from(minijinja::value::Serde(Value::Object(map)))).map_err(|e| TemplateError(e.to_string()))
    }
}

/// SGLang's `detect_jinja_template_content_format`.
pub fn detect_content_format(source: &str) -> ContentFormat {
    if ["image", "audio", "video", "vision"].iter().any(|w| source.contains(w)) {
        ContentFormat::OpenAi
    } else {
        ContentFormat::String
    }
}
