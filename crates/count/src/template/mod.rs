//! Hugging Face chat templates rendered the way `transformers` 5.19 renders
//! them (Jinja2 3.1.6 in an `ImmutableSandboxedEnvironment` with
//! `trim_blocks`, `lstrip_blocks` and loop controls), byte for byte.
//!
//! minijinja is the engine; what differs from Jinja2 is patched here:
//! * `source`: the template text as Jinja2's lexer sees it (newlines,
//!   `{% generation %}`, string-literal escapes);
//! * `pyrepr`, `pyobj`: Python `str()`/`repr()` printing;
//! * `tojson`: `json.dumps`;
//! * `methods` (with `count::unicode`): CPython str/dict/list methods on Unicode 14;
//! * `filters`, `pysort`, `pyformat`: Jinja2's filters, tests and globals,
//!   Python sorting and `%`/`str.format` formatting;
//! * `strftime`: `strftime_now` as CPython on glibc;
//! * `detect`: SGLang's content-format detection.
//!
//! Not a difference from Jinja2 but a cost of minijinja's: `chains` rewrites
//! `a + b + c` into one call that concatenates once, so a long message is
//! not copied again by every `+` after it (issue 31).
//!
//! What cannot be matched is listed in the tests (`KNOWN_DIVERGENT`,
//! `KNOWN_REFUSED`, `known_misrenders_are_as_documented`) and in
//! `docs/template-compat.md` §6.

mod args;
mod chains;
mod detect;
mod filters;
mod methods;
mod pyformat;
mod pyobj;
mod pyrepr;
mod pysort;
mod source;
mod strftime;
mod tojson;

#[cfg(test)]
#[rustfmt::skip]
mod snippet_cases;
#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
#[rustfmt::skip]
mod unit_refs;

use std::cell::Cell;

// CPython 3.11's str methods and printability, shared with `count::py`.
use super::unicode;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};
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
    /// What `apply_chat_template` spreads from the tokenizer's
    /// `special_tokens_map`: the named special tokens (`bos_token`, ...),
    /// only those set, and under transformers 4 the
    /// `additional_special_tokens` list.
    pub special_tokens: &'a [(String, Value)],
    /// The template variables from the kwargs: `reasoning_effort` and then the
    /// request's `chat_template_kwargs`, later keys winning, with
    /// `apply_chat_template`'s own arguments already taken out
    /// (`ChatInputs::jinja_arguments`); they override the special tokens.
    pub extra: &'a Map<String, Value>,
    /// What `strftime_now` formats.
    pub now: chrono::NaiveDateTime,
}

/// A compiled chat template. Compile once, render concurrently.
pub struct ChatTemplate {
    env: Environment<'static>,
    format: ContentFormat,
    /// `+` chains were rewritten into calls of `chains::ADD` and
    /// `chains::EMIT`, so no template variable may shadow them.
    chains: bool,
}

const TEMPLATE_NAME: &str = "chat";

/// `render_jinja_template`: documents must be dicts.
fn check_documents(docs: &Value) -> Result<(), TemplateError> {
    let bad = || {
        TemplateError(
            "TypeError: Documents should be a list of dicts with 'title' and 'text' keys!".into(),
        )
    };
    match docs {
        Value::Null => Ok(()),
        Value::Array(items) if items.iter().all(Value::is_object) => Ok(()),
        Value::Object(m) if m.is_empty() => Ok(()),
        Value::String(s) if s.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

/// JSON nested deeper than this is refused rather than converted (serde_json
/// itself stops parsing at 128 levels).
const MAX_CONTEXT_DEPTH: usize = 512;

thread_local! {
    /// The render's clock, read by `strftime_now`. The environment is shared
    /// by all requests, so the time cannot live in it.
    static NOW: Cell<Option<chrono::NaiveDateTime>> = const { Cell::new(None) };
}

/// `raise_exception(msg)` carries its message out of the engine unchanged.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        if !chains::may_rewrite(source) {
            return Self::build(source, false);
        }
        // A rewritten chain nests the parser two levels deeper (a call and
        // its arguments), so a template near minijinja's parser recursion
        // limit could fail only rewritten: it is then compiled as written,
        // which also reports a real syntax error as written.
        Self::build(source, true).or_else(|_| Self::build(source, false))
    }

    /// `chains`: rewrite `+` chains (`chains::rewrite_tag`); off only to
    /// hold the rewrite against the template as written.
    fn build(source: &str, chains: bool) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError(e.to_string()))?;
        env.set_syntax(syntax);
        // Debug info copies template source into errors and tracks undefined
        // origins on every lookup; neither is wanted per request.
        env.set_debug(false);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_formatter(format_value);
        env.set_unknown_method_callback(methods::unknown_method_callback);
        filters::install(&mut env);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        if chains {
            env.add_function(chains::ADD, chains::add);
            env.add_function(chains::EMIT, chains::emit);
        }
        env.add_template_owned(TEMPLATE_NAME, source::normalize(source, chains)?)
            .map_err(|e| TemplateError(format!("chat template does not compile: {e}")))?;
        Ok(Self {
            env,
            format: detect_content_format(source),
            chains,
        })
    }

    pub fn content_format(&self) -> ContentFormat {
        self.format
    }

    pub fn render(&self, ctx: &RenderContext<'_>) -> Result<String, TemplateError> {
        let (tmpl, context) = self.prepare(ctx)?;
        at(ctx.now, || tmpl.render(context)).map_err(map_error)
    }

    /// Renders into `out`, byte for byte what [`Self::render`] returns, for
    /// a caller that measures the prompt without keeping it (the bound
    /// pass). Output that `out` took before an error stays written.
    pub fn render_to(
        &self,
        ctx: &RenderContext<'_>,
        out: &mut impl std::io::Write,
    ) -> Result<(), TemplateError> {
        let (tmpl, context) = self.prepare(ctx)?;
        at(ctx.now, || tmpl.render_captured_to(context, out).map(drop)).map_err(map_error)
    }

    /// The compiled template and the context it renders with.
    fn prepare(
        &self,
        ctx: &RenderContext<'_>,
    ) -> Result<(minijinja::Template<'_, '_>, minijinja::Value), TemplateError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError(e.to_string()))?;
        let documents = ctx.documents;
        if let Some(docs) = documents {
            check_documents(docs)?;
        }
        let conv = |v: &Value| to_value(v, 0).map_err(map_error);
        let none = minijinja::Value::from(());
        let mut vars: Vec<(minijinja::Value, minijinja::Value)> =
            Vec::with_capacity(4 + ctx.special_tokens.len() + ctx.extra.len());
        vars.push(("messages".into(), conv(ctx.messages)?));
        vars.push((
            "tools".into(),
            ctx.tools
                .map(conv)
                .transpose()?
                .unwrap_or_else(|| none.clone()),
        ));
        vars.push((
            "documents".into(),
            documents.map(conv).transpose()?.unwrap_or(none),
        ));
        vars.push((
            "add_generation_prompt".into(),
            ctx.add_generation_prompt.into(),
        ));
        // The template as written never names the functions (`may_rewrite`),
        // so leaving such a variable out is invisible to it.
        let shadows = |k: &str| self.chains && (k == chains::ADD || k == chains::EMIT);
        for (k, v) in ctx
            .special_tokens
            .iter()
            .map(|(k, v)| (k, v))
            .chain(ctx.extra)
        {
            // converted all the same: a value too deep to convert still fails
            let v = conv(v)?;
            if !shadows(k) {
                vars.push((k.as_str().into(), v));
            }
        }
        // Later entries replace earlier ones, as `{**special_tokens, **kwargs}` does.
        Ok((tmpl, minijinja::Value::from_pairs(vars)))
    }
}

/// `render` with `strftime_now` reading `now`; what it read before is
/// restored after.
fn at<T>(now: chrono::NaiveDateTime, render: impl FnOnce() -> T) -> T {
    let previous = NOW.with(|n| n.replace(Some(now)));
    let rendered = render();
    NOW.with(|n| n.set(previous));
    rendered
}

/// SGLang's `detect_jinja_template_content_format`.
pub fn detect_content_format(source: &str) -> ContentFormat {
    detect::detect_content_format(source)
}

/// [`detect_content_format`] as a release detects it.
pub fn detect_content_format_as(
    source: &str,
    detection: crate::release::ContentDetection,
) -> ContentFormat {
    detect::detect_content_format_as(source, detection)
}

fn map_error(e: Error) -> TemplateError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = src {
        if let Some(raised) = s.downcast_ref::<Raised>() {
            return TemplateError(raised.0.clone());
        }
        src = s.source();
    }
    TemplateError(e.to_string())
}

/// Prints values as Python's `str()` does (`True`, `None`, `{'a': 1}`, `1e-05`).
fn format_value(
    out: &mut Output,
    state: &mut State,
    value: &minijinja::Value,
) -> Result<(), Error> {
    let write_err = |_| Error::new(ErrorKind::WriteFailure, "formatting failed");
    if let Some(s) = value.as_str() {
        return out.write_str(s).map_err(write_err);
    }
    if let Some(pieces) = value.downcast_object_ref::<chains::Pieces>() {
        return pieces
            .strs()
            .try_for_each(|s| out.write_str(s))
            .map_err(write_err);
    }
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::Invalid => minijinja::escape_formatter(out, state, value),
        _ => {
            let mut s = String::new();
            pyrepr::push_str(&mut s, value)?;
            out.write_str(&s).map_err(write_err)
        }
    }
}

fn raise_exception(message: minijinja::Value) -> Result<minijinja::Value, Error> {
    let msg = pyrepr::to_str(&message)?;
    Err(Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(Raised(msg)))
}

fn strftime_now(format: minijinja::Value) -> Result<minijinja::Value, Error> {
    let Some(fmt) = format.as_str() else {
        return Err(args::type_error(format!(
            "strftime() argument 1 must be str, not {}",
            pyrepr::py_type_name(&format)
        )));
    };
    let now = NOW
        .with(Cell::get)
        .unwrap_or_else(|| chrono::Local::now().naive_local());
    Ok(minijinja::Value::from(strftime::strftime(fmt, &now)))
}

/// Converts request JSON to template values: integers stay integers and
/// floats stay floats (`1.0` prints as `1.0`), objects keep their key order.
fn to_value(v: &Value, depth: usize) -> Result<minijinja::Value, Error> {
    if depth > MAX_CONTEXT_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "request JSON is nested too deeply",
        ));
    }
    Ok(match v {
        Value::Null => minijinja::Value::from(()),
        Value::Bool(b) => minijinja::Value::from(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                minijinja::Value::from(i)
            } else if let Some(u) = n.as_u64() {
                minijinja::Value::from(u)
            } else {
                minijinja::Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => minijinja::Value::from(s.as_str()),
        Value::Array(items) => minijinja::Value::from_object(pyobj::PyList(
            items
                .iter()
                .map(|x| to_value(x, depth + 1))
                .collect::<Result<Vec<_>, _>>()?,
        )),
        Value::Object(map) => {
            let mut pairs = indexmap::IndexMap::with_capacity(map.len());
            for (k, x) in map {
                pairs.insert(minijinja::Value::from(k.as_str()), to_value(x, depth + 1)?);
            }
            minijinja::Value::from_object(pyobj::PyDict(pairs))
        }
    })
}

/// Template variables of string values (the named special tokens).
pub fn string_variables(pairs: &[(String, String)]) -> Vec<(String, Value)> {
    pairs
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}
