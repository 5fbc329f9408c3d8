//! Counting the chat-shaped APIs besides OpenAI chat (`/v1/responses`,
//! `/v1/messages`, Ollama's `/api/chat`): what each conversion needs to know
//! about the model, and how a converted request is counted.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::encoder::harmony::{self, HarmonyError, HarmonySettings};
use super::encoder::{dsv4, glm53, Encoder, PlainText};
use super::model::ModelFiles;
use super::preprocess::{self, Converted};
use super::release::Consulted;
use super::serving::Arch;
use super::template::{ChatTemplate, RenderContext};
use super::{anthropic, ollama, responses, Build, ChatApi, Clock, CountError, Ctx};

/// What the conversions depend on besides the request.
#[derive(Debug, Clone)]
pub(super) struct ModelTraits {
    /// `OpenAIServingChat.supports_inline_system`, or `None` when the guard
    /// cannot reproduce SGLang's probe for this template (both readings are
    /// then counted and the larger count is used).
    inline_system: Option<bool>,
    /// `hf_config.model_type == "gpt_oss"`: SGLang renders `/v1/responses`
    /// with openai-harmony instead of the chat template.
    harmony: Option<HarmonyVocabulary>,
}

/// How a gpt-oss model's harmony text runs are counted, or why they cannot be.
#[derive(Clone)]
struct HarmonyVocabulary(Result<Arc<PlainText>, String>);

impl std::fmt::Debug for HarmonyVocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(_) => f.write_str("HarmonyVocabulary(o200k_harmony)"),
            Err(e) => write!(f, "HarmonyVocabulary(unusable: {e})"),
        }
    }
}

impl HarmonyVocabulary {
    /// Harmony encodes text with `o200k_harmony`'s `encode_ordinary`; the
    /// model's `tokenizer.json` gives the same ids only when it *is* that
    /// vocabulary, which is checked here once (see `harmony::check_vocabulary`).
    fn load(files: &ModelFiles) -> Self {
        let checked = files
            .tokenizer
            .as_ref()
            .ok_or_else(|| "the model directory has no tokenizer.json".to_string())
            .and_then(|t| {
                let doc = serde_json::to_value(t.inner.as_ref()).map_err(|e| e.to_string())?;
                harmony::check_vocabulary(&doc)?;
                Ok(Arc::new(PlainText::new(&t.inner)))
            });
        Self(checked)
    }
}

impl ModelTraits {
    /// `source`/`template`: `tokenizer.chat_template`, which the probes read.
    pub(super) fn new(
        files: &ModelFiles,
        arch: Option<&Arch>,
        encoder: &Encoder,
        template: Option<(&str, &ChatTemplate)>,
    ) -> Self {
        let inline_system = match (encoder.inline_system(), template) {
            (Some(known), _) => Some(known),
            (None, Some((source, template))) => probe_inline_system(source, template),
            // No template: `detect_inline_system_support(None)` is False. (A template
            // that does not compile makes every chat request fail anyway.)
            (None, None) => Some(false),
        };
        Self {
            inline_system,
            harmony: is_harmony_model(files, arch, template.map(|(s, _)| s))
                .then(|| HarmonyVocabulary::load(files)),
        }
    }
}

/// `hf_config.model_type == "gpt_oss"` (the served config, else
/// `config.json`). Without either (a tokenizer-only directory) the guard
/// cannot see the model type, so a harmony-format vocabulary or template
/// counts as gpt-oss: the Responses API is then refused rather than counted
/// the wrong way.
fn is_harmony_model(files: &ModelFiles, arch: Option<&Arch>, source: Option<&str>) -> bool {
    if let Some(t) = arch.and_then(|a| a.model_type.as_deref()) {
        return t == "gpt_oss";
    }
    const MARK: &str = "<|channel|>";
    let in_config = files
        .config
        .get("added_tokens_decoder")
        .is_some_and(|t| t.to_string().contains(MARK));
    in_config || source.is_some_and(|s| s.contains(MARK))
}

const SENTINEL: &str = "__sglang_inline_system_sentinel__";

/// `template_detection.py::detect_inline_system_support`: SGLang renders the
/// template with a plain Jinja2 sandbox (no transformers globals, no special
/// tokens, `tools`/`documents` undefined) on `system, user, system(sentinel),
/// user` and checks that the sentinel comes out; any exception means False.
///
/// The guard renders with its transformers environment instead, on a copy of
/// the template made to see what plain Jinja2 sees: `is defined` tests on the
/// names plain Jinja2 lacks (`tools`, `documents`, `strftime_now`,
/// `raise_exception`) become constants, a remaining `strftime_now(...)` call
/// raises, and `tools`/`documents` are empty lists (falsy, empty when
/// iterated, `not none`, like Jinja2's Undefined). A `{% generation %}` tag
/// does not compile in plain Jinja2: False. What the guard still cannot
/// reproduce (`tojson` keyword arguments plain Jinja2 lacks) gives `None`.
fn probe_inline_system(source: &str, template: &ChatTemplate) -> Option<bool> {
    if has_generation_tag(source) {
        return Some(false);
    }
    if source.contains("tojson(")
        && ["ensure_ascii", "separators", "sort_keys"]
            .iter()
            .any(|k| source.contains(k))
    {
        return None;
    }
    let plain = plain_jinja_view(source);
    if plain.contains("strftime_now") {
        return None;
    }
    let compiled;
    let template = if plain == source {
        template
    } else {
        compiled = ChatTemplate::new(&plain).ok()?;
        &compiled
    };
    let messages = json!([
        {"role": "system", "content": "t"},
        {"role": "user", "content": "t"},
        {"role": "system", "content": SENTINEL},
        {"role": "user", "content": "t"},
    ]);
    let empty = json!([]);
    let extra = Map::new();
    let ctx = RenderContext {
        messages: &messages,
        tools: Some(&empty),
        documents: Some(&empty),
        add_generation_prompt: false,
        special_tokens: &[],
        extra: &extra,
        now: chrono::NaiveDateTime::default(),
    };
    Some(
        template
            .render(&ctx)
            .is_ok_and(|text| text.contains(SENTINEL)),
    )
}

/// `{% generation %}` (transformers' AssistantTracker extension).
fn has_generation_tag(source: &str) -> bool {
    source.match_indices("{%").any(|(i, _)| {
        let rest = source[i + 2..].trim_start_matches(['-', '+']).trim_start();
        rest.strip_prefix("generation")
            .is_some_and(|r| r.starts_with(|c: char| c.is_whitespace() || c == '-' || c == '%'))
    })
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The template as plain Jinja2 sees it: `NAME is [not] defined|undefined`
/// tests on names it does not define become `true`/`false`, and a remaining
/// `strftime_now(` call becomes `raise_exception(` (calling an undefined name
/// raises there too).
fn plain_jinja_view(source: &str) -> String {
    const UNDEFINED: [&str; 4] = ["tools", "documents", "strftime_now", "raise_exception"];
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    'scan: while i < source.len() {
        let rest = &source[i..];
        let boundary = source[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        if boundary {
            for name in UNDEFINED {
                let Some(after) = rest.strip_prefix(name) else {
                    continue;
                };
                if after.starts_with(is_ident) {
                    continue;
                }
                if let Some((len, value)) = defined_test(after) {
                    out.push_str(if value { "true" } else { "false" });
                    i += name.len() + len;
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8();
    }
    out.replace("strftime_now(", "raise_exception(")
}

/// After a name: `is [not] defined|undefined` → (length, value of the test on
/// an undefined name).
fn defined_test(after: &str) -> Option<(usize, bool)> {
    let words = |s: &str| -> Option<(usize, usize)> {
        // (whitespace length, word length) of the next word.
        let ws = s.len() - s.trim_start().len();
        (ws > 0).then_some(())?;
        let w = s[ws..].find(|c: char| !is_ident(c)).unwrap_or(s.len() - ws);
        Some((ws, w))
    };
    let (ws1, w1) = words(after)?;
    let mut pos = ws1;
    if &after[pos..pos + w1] != "is" {
        return None;
    }
    pos += w1;
    let (ws2, w2) = words(&after[pos..])?;
    pos += ws2;
    let mut negated = false;
    let mut word = &after[pos..pos + w2];
    if word == "not" {
        negated = true;
        pos += w2;
        let (ws3, w3) = words(&after[pos..])?;
        pos += ws3;
        word = &after[pos..pos + w3];
    }
    let defined = match word {
        "defined" => false,
        "undefined" => true,
        _ => return None,
    };
    Some((pos + word.len(), defined != negated))
}

impl ModelTraits {
    /// SGLang's `supports_inline_system` for this model's template as the guard
    /// reads it, `None` when it cannot tell (then both readings are counted).
    pub(super) fn inline_system(&self) -> Option<bool> {
        self.inline_system
    }
}

impl Build {
    pub(super) fn count_chat_api(
        &self,
        api: ChatApi,
        body: &Value,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        if matches!(api, ChatApi::Anthropic | ChatApi::Responses)
            && !self.encoder.counts_converted_apis()
        {
            return Err(CountError::Unsupported(format!(
                "{} through the model's `{}` encoder is not modelled by the guard; use /v1/chat/completions",
                match api {
                    ChatApi::Anthropic => "/v1/messages",
                    _ => "/v1/responses",
                },
                self.encoder.name()
            )));
        }
        self.refuse_unmodelled_api(api)?;
        match api {
            ChatApi::Ollama => self.count_ollama_chat(body, clock, ctx),
            ChatApi::Anthropic => {
                self.count_converted(|inline| anthropic::convert(body, inline), clock, ctx)
            }
            ChatApi::Responses => {
                let n = match &self.api.harmony {
                    Some(vocabulary) => self.count_harmony(vocabulary, body, clock, ctx)?,
                    None => {
                        self.count_converted(|inline| responses::convert(body, inline), clock, ctx)?
                    }
                };
                // After the conversion, so that its own refusals (more specific) come first.
                if self.releases.iter().any(|r| *r < super::Release::V0523) {
                    if let Some(why) = responses::built_differently_before_0523(body) {
                        return Err(CountError::Unsupported(format!(
                            "SGLang before 0.5.23 builds this /v1/responses prompt differently ({why}), and can \
                             count more tokens than the guard would; not modelled (upgrade the server, or state \
                             sglang_version when it is 0.5.23 or later)"
                        )));
                    }
                }
                Ok(n)
            }
        }
    }

    /// Where each chat-shaped API is modelled, from running every release's
    /// own handler on the conversion corpus
    /// (`crates/count/src/testdata/gen_chat_api_releases.py`): `/v1/responses` from
    /// 0.5.18 (before, failed conversions fall back to a prompt of the
    /// items' Python `repr`, and client kwargs are dropped); `/v1/messages`
    /// from 0.5.17 (before, whitespace-only system text is kept and 0.5.9
    /// joins tool results with newlines); Ollama's `/api/chat` wherever it
    /// exists (0.5.7-0.5.9 build 0.5.23's prompt; 0.5.10-0.5.22 fail every
    /// request before tokenizing, so counting it is harmless). Before the
    /// release that added a route the server answers 404: SGLang's own
    /// refusal.
    fn refuse_unmodelled_api(&self, api: ChatApi) -> Result<(), CountError> {
        use super::Release::{V0501, V0507, V0509, V0517, V0518};
        let (route, added, modelled) = match api {
            ChatApi::Responses => ("/v1/responses", V0501, V0518),
            ChatApi::Anthropic => ("/v1/messages", V0509, V0517),
            ChatApi::Ollama => ("/api/chat", V0507, V0507),
        };
        let newest = self.releases[0];
        let oldest = *self.releases.last().expect("a build has a release");
        if newest < added {
            return Err(CountError::invalid(format!(
                "SGLang {} has no {route} route",
                newest.range()
            )));
        }
        if oldest < modelled && oldest >= added {
            return Err(CountError::Unsupported(format!(
                "{route} is not modelled for SGLang {} (its handler builds prompts the guard does not \
                 reproduce there); use /v1/chat/completions, or state sglang_version when the server is \
                 {} or later",
                oldest.range(),
                modelled.first()
            )));
        }
        Ok(())
    }

    /// gpt-oss `/v1/responses`: the prompt harmony renders, its formatting
    /// tokens one id each and every text run encoded on its own.
    fn count_harmony(
        &self,
        vocabulary: &HarmonyVocabulary,
        body: &Value,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        let settings = HarmonySettings {
            // Before 0.5.20 every response is stored (no flag), and a
            // `previous_response_id` prepends its history.
            enable_response_store: self.server.enable_response_store
                || self.releases.iter().any(|r| *r < super::Release::V0520),
            // Before 0.5.20 PD mode does not stop built-in tool calls (the
            // PD refusals came with 0.5.20): a tool may run and prefill again.
            disaggregated: self.server.disaggregated
                && self.releases.iter().all(|r| *r >= super::Release::V0520),
            tool_server: self.server.harmony_tool_server(),
        };
        // The server's local date; the count does not depend on it (a date is
        // always the same number of tokens), only the text does.
        let prompt = harmony::responses_prompt(body, &settings, clock.now().date()).map_err(
            |e| match e {
                HarmonyError::Invalid(m) => CountError::invalid(m),
                HarmonyError::Unsupported(m) => CountError::Unsupported(m),
            },
        )?;
        let plain = vocabulary.0.as_ref().map_err(|e| {
            CountError::Unsupported(format!(
                "/v1/responses on this gpt-oss model is refused: SGLang encodes it with openai-harmony's \
                 o200k_harmony, and {e}"
            ))
        })?;
        let pieces = dsv4::Prompt {
            pieces: prompt
                .pieces
                .into_iter()
                .map(|p| match p {
                    harmony::Piece::Special(id) => dsv4::Piece::Special(id),
                    harmony::Piece::Text(t) => dsv4::Piece::Plain(t),
                })
                .collect(),
            images: 0,
        };
        self.count_pieces(ctx, &pieces, plain)
    }

    /// Counts a converted request. When the template's inline-system support is
    /// unknown, both conversions are counted and the larger count wins; a
    /// reading that fails is skipped (if it is SGLang's, SGLang refuses the
    /// request itself), and only when both fail is the request refused.
    fn count_converted(
        &self,
        convert: impl Fn(bool) -> Result<Converted, CountError>,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        let readings: &[bool] = match self.api.inline_system {
            Some(true) => &[true],
            Some(false) => &[false],
            None => &[true, false],
        };
        let mut seen: Vec<Converted> = Vec::with_capacity(2);
        let mut best: Option<usize> = None;
        let mut first_error = None;
        for &inline in readings {
            let counted = convert(inline).and_then(|c| {
                if seen.contains(&c) {
                    return Ok(None);
                }
                let options = self.chat_options().clone().with(&c.options);
                let rules = Consulted::new(self.rules);
                let prepared =
                    preprocess::prepare_with(&c.body, self.content_format(), &options, &rules);
                seen.push(c);
                self.count_prepared(&*prepared?, clock, ctx).map(Some)
            });
            match counted {
                Ok(Some(n)) => best = best.max(Some(n)),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (best, first_error) {
            (Some(n), _) => Ok(n),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(0),
        }
    }

    /// `tokenizer.apply_chat_template(messages, tokenize=True,
    /// add_generation_prompt=True, return_dict=False)`: the template with no
    /// tools and no kwargs, encoded with `add_special_tokens=False`; no retry.
    fn count_ollama_chat(
        &self,
        body: &Value,
        clock: Clock,
        ctx: &Ctx,
    ) -> Result<usize, CountError> {
        let messages = ollama::chat_messages(body)?;
        if let Some(variant) = self.encoder.python_template() {
            // The Python template's installed `apply_chat_template`.
            let conversation = messages.as_array().map_or(&[][..], Vec::as_slice);
            let text = match glm53::apply_chat_template(
                variant,
                conversation,
                None,
                true,
                &Map::new(),
                false,
            ) {
                Ok(glm53::Applied::Text(text)) => text,
                Ok(glm53::Applied::Jinja) => unreachable!("no kwargs route it to Jinja"),
                Err(e) => return Err(CountError::Template(e.to_string())),
            };
            return self.measure(ctx, &text, false);
        }
        // `tokenizer.apply_chat_template` directly: `TemplateManager`'s
        // template, without the server's default kwargs.
        let template = self.jinja_template(None)?;
        let extra = Map::new();
        let text = template
            .render(&RenderContext {
                messages: &messages,
                tools: None,
                documents: None,
                add_generation_prompt: true,
                special_tokens: self.template_variables()?,
                extra: &extra,
                now: clock.now(),
            })
            .map_err(|e| CountError::Template(e.to_string()))?;
        self.measure(ctx, &text, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ContentFormat;

    /// Order-sensitive equality (key order is what a template iterates), with
    /// numbers compared by value (`1` and `1.0` are equal, as in Python).
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .zip(y)
                        .all(|((k1, v1), (k2, v2))| k1 == k2 && same(v1, v2))
            }
            _ => a == b,
        }
    }

    /// Every conversion case against what SGLang 0.5.23's own code passes to
    /// `apply_chat_template` (`testdata/gen_chat_api.py` ran SGLang's handlers
    /// on each body, for each inline-system reading and content format).
    #[test]
    fn conversions_match_sglang() {
        let cases: Vec<Value> =
            serde_json::from_str(include_str!("testdata/chat_api_expected.json")).unwrap();
        let mut failures = Vec::new();
        let mut checked = 0;
        for case in &cases {
            let name = case["name"].as_str().unwrap();
            let api = case["api"].as_str().unwrap();
            for setting in case["settings"].as_array().unwrap() {
                let inline = setting["inline_system"].as_bool().unwrap();
                let format = match setting["format"].as_str().unwrap() {
                    "openai" => ContentFormat::OpenAi,
                    _ => ContentFormat::String,
                };
                let converted = match api {
                    "responses" => responses::convert(&case["body"], inline),
                    _ => anthropic::convert(&case["body"], inline),
                };
                let got = converted.and_then(|c| {
                    let rules = Consulted::new(crate::Release::V0523.chat_rules());
                    preprocess::prepare_with(&c.body, format, &c.options, &rules)
                });
                let label = format!("{api}/{name} inline={inline} format={format:?}");
                checked += 1;
                match (&setting["expect"], got) {
                    (Value::String(e), Err(CountError::Unsupported(_))) if e == "guard_refuses" => {
                    }
                    // A client template reaches the counter, which refuses it
                    // (`ModelCounter::jinja_template`).
                    (Value::String(e), Ok(inputs))
                        if e == "guard_refuses"
                            && inputs
                                .jinja_arguments()
                                .is_ok_and(|a| a.template_override.is_some()) => {}
                    (Value::String(e), Err(_)) if e == "sglang_refuses" => {}
                    (Value::Object(want), Ok(inputs)) => {
                        let tools = inputs.tools.clone().unwrap_or(Value::Null);
                        // What the template sees: the kwargs after
                        // `apply_chat_template`'s own arguments are taken out.
                        let args = match inputs.jinja_arguments() {
                            Ok(a) => a,
                            Err(e) => {
                                failures.push(format!("{label}: {e}"));
                                continue;
                            }
                        };
                        let extra = Value::Object(args.extra);
                        for (what, got, want) in [
                            ("messages", &inputs.messages, &want["messages"]),
                            ("tools", &tools, &want["tools"]),
                            ("extra", &extra, &want["extra"]),
                        ] {
                            if !same(got, want) {
                                failures
                                    .push(format!("{label}: {what}\n  got  {got}\n  want {want}"));
                            }
                        }
                        if inputs.assistant_prefix.is_some() || args.documents.is_some() {
                            failures.push(format!("{label}: unexpected prefix/documents"));
                        }
                    }
                    (want, got) => failures.push(format!("{label}: want {want}, got {got:?}")),
                }
            }
        }
        assert!(checked > 200, "only {checked} cases");
        assert!(
            failures.is_empty(),
            "{} mismatches:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn plain_jinja_view_of_a_template() {
        assert_eq!(
            plain_jinja_view("{% if tools is defined and tools is not none %}x{% endif %}"),
            "{% if false and tools is not none %}x{% endif %}"
        );
        assert_eq!(
            plain_jinja_view(
                "{%- if strftime_now is\n  defined %}{{ strftime_now('%d') }}{% endif %}"
            ),
            "{%- if false %}{{ raise_exception('%d') }}{% endif %}"
        );
        assert_eq!(
            plain_jinja_view(
                "{{ mytools is defined }}{{ documents is not  undefined }}{{ tools is none }}"
            ),
            "{{ mytools is defined }}{{ false }}{{ tools is none }}"
        );
        assert!(has_generation_tag(
            "{% for m in messages %}{%- generation %}x{% endgeneration %}{% endfor %}"
        ));
        assert!(!has_generation_tag(
            "{% if add_generation_prompt %}{% endif %}"
        ));
    }

    /// Expected values: SGLang 0.5.23's `detect_inline_system_support` on the
    /// same sources (True, False, False, True, False, False, False); the guard
    /// answers `None` where it cannot reproduce plain Jinja2 (`tojson` kwargs).
    #[test]
    fn inline_system_probe() {
        let probe = |src: &str| probe_inline_system(src, &ChatTemplate::new(src).unwrap());
        let inline = "{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(probe(inline), Some(true));
        let first_only = "{{ messages[0].content }}{% for m in messages[1:] %}{% if m.role != 'system' %}{{ m.content }}{% endif %}{% endfor %}";
        assert_eq!(probe(first_only), Some(false));
        let raises = "{% for m in messages %}{% if m.role == 'system' and not loop.first %}{{ raise_exception('no') }}{% endif %}{{ m.content }}{% endfor %}";
        assert_eq!(probe(raises), Some(false));
        // Plain Jinja2 takes the `else` branch; the sentinel still renders.
        let dated = "{% if strftime_now is defined %}{{ strftime_now('%Y') }}{% else %}d{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(probe(dated), Some(true));
        // An unguarded strftime_now call raises in plain Jinja2.
        let undated = "{{ strftime_now('%Y') }}{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(probe(undated), Some(false));
        let generation =
            "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
        assert_eq!(probe(generation), Some(false));
        let kwargs = "{% for m in messages %}{{ m | tojson(ensure_ascii=False) }}{% endfor %}";
        assert_eq!(probe(kwargs), None);
    }
}

/// gpt-oss `/v1/responses` through the whole counter, as the proxy counts it.
#[cfg(test)]
mod harmony_tests {
    use std::sync::Arc;

    use serde_json::Value;

    use crate::model::ModelFiles;
    use crate::{ChatApi, Clock, CountError, CountPolicy, ModelCounter, ServerConfig, Unit};

    const EXPECTED: &str = include_str!("encoder/testdata/harmony_expected.json");

    /// The server configuration of a generator setting, when one exists:
    /// the tool server's tools are not published, so a tool server reads as
    /// offering both built-ins, and a setting with another set has none.
    fn server(setting: &Value) -> Option<ServerConfig> {
        let tools = setting["tool_server"].as_array();
        let both = tools.is_some_and(|t| t.len() == 2);
        if tools.is_some() && !both {
            return None;
        }
        Some(ServerConfig {
            enable_response_store: setting["store"] == true,
            disaggregated: setting["pd"] == true,
            tool_server: both,
            ..ServerConfig::default()
        })
    }

    /// Every generated case SGLang serves is counted exactly (refused at its
    /// length, allowed one token higher); SGLang's refusals and the guard's
    /// are refused.
    #[test]
    fn the_counter_counts_what_sglang_renders() {
        let Some(shared) = crate::shared_dir() else {
            return;
        };
        let files = Arc::new(
            ModelFiles::load(&shared.join("tokenizers/gpt-oss"))
                .expect("the gpt-oss fixture loads"),
        );
        let data: Value = serde_json::from_str(EXPECTED).unwrap();
        let (mut counted, mut refused, mut failures) = (0, 0, Vec::new());
        let mut counters = std::collections::HashMap::new();
        for case in data["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let setting = case["setting"].as_str().unwrap();
            let Some(server) = server(&data["settings"][setting]) else {
                continue;
            };
            let counter = counters.entry(setting).or_insert_with(|| {
                ModelCounter::for_server(files.clone(), Arc::new(server)).unwrap()
            });
            let date =
                chrono::NaiveDate::parse_from_str(case["date"].as_str().unwrap(), "%Y-%m-%d")
                    .unwrap();
            let clock = Clock::Fixed(date.and_hms_opt(12, 0, 0).unwrap());
            let unit = Unit::ChatApi(ChatApi::Responses, Arc::new(case["body"].clone()));
            let got = counter.count(&unit, clock);
            match (&got, &case["expect"]) {
                (Ok(n), Value::Object(e)) if Some(*n as u64) == e["tokens"].as_u64() => {
                    counted += 1;
                    for (limit, over) in [(*n, true), (n + 1, false)] {
                        let policy = CountPolicy {
                            limit: Some(limit),
                            ..CountPolicy::default()
                        };
                        match counter.count_with(&unit, clock, policy) {
                            Ok(c) if (c.tokens >= limit) == over => {}
                            other => failures.push(format!("{name}: limit {limit}: {other:?}")),
                        }
                    }
                }
                (Err(CountError::Invalid { .. }), Value::String(e)) if e == "sglang_refuses" => {
                    refused += 1
                }
                (Err(CountError::Unsupported(_)), Value::String(e)) if e == "guard_refuses" => {
                    refused += 1
                }
                (got, want) => failures.push(format!("{name}: guard {got:?}, SGLang {want}")),
            }
        }
        println!("{counted} counted exactly, {refused} refused as expected");
        assert!(counted > 150, "only {counted} cases counted");
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Another vocabulary under a harmony template: the Responses API is
    /// refused (harmony would not encode with this tokenizer), chat is not.
    #[test]
    fn a_model_that_is_not_o200k_harmony_is_refused_on_responses() {
        let Some(shared) = crate::shared_dir() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let qwen = shared.join("tokenizers/qwen2.5");
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(qwen.join(f), dir.path().join(f)).unwrap();
        }
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"model_type": "gpt_oss"}"#,
        )
        .unwrap();
        let counter = ModelCounter::load(dir.path()).unwrap();
        let body = Arc::new(serde_json::json!({"model": "m", "input": "hi"}));
        let got = counter.count(&Unit::ChatApi(ChatApi::Responses, body), Clock::default());
        match got {
            Err(CountError::Unsupported(m)) => assert!(m.contains("o200k_harmony"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
