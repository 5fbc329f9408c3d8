//! transformers 4.51–4.57 (SGLang 0.4.5–0.5.9 but 0.5.6.post1, no SGLang
//! fixes): `AutoTokenizer` loads the declared class's `Fast` variant, which
//! takes `tokenizer.json` whole (`PreTrainedTokenizerFast.__init__`,
//! `TokenizerFast.from_file`) and then:
//!
//! * re-adds every token of `added_tokens_decoder` (the config's, or in the
//!   legacy branch `tokenizer.json`'s own), with the config's properties:
//!   its "already there" check hashes the decoder's *keys*, so it never
//!   matches; then every special token not yet there (named, the
//!   `additional_special_tokens` list, `extra_special_tokens` entries);
//! * sets `encode_special_tokens` from `split_special_tokens`;
//! * sets a top-level ByteLevel pre-tokenizer's `add_prefix_space` to the
//!   config's (default false);
//! * Llama/Gemma (`update_post_processor`): a `TemplateProcessing` from
//!   `add_bos_token` (missing: true; null: false) and `add_eos_token`
//!   (missing: false). Llama with `add_prefix_space` set converts from the
//!   sentencepiece model instead (`from_slow`): refused.
//!
//! `special_tokens_map`, spread into chat templates, holds the named tokens
//! that are set, `additional_special_tokens` (a list) and the
//! `extra_special_tokens` entries.

use serde_json::{Map, Value};

use super::{
    py, AddedSpec, Facts, Plan, PostSpec, Sources, TokenizerClass, TokenizerConfig,
    SPECIAL_TOKEN_ATTRIBUTES,
};

/// A token as transformers 4 holds it: text, or an `AddedToken` whose
/// `normalized` may be unset (then it follows `special`, as the Python
/// binding's `get_token` does).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Str(String),
    Added {
        content: String,
        single_word: bool,
        lstrip: bool,
        rstrip: bool,
        normalized: Option<bool>,
        special: bool,
    },
}

impl Tok {
    fn content(&self) -> &str {
        match self {
            Tok::Str(s) => s,
            Tok::Added { content, .. } => content,
        }
    }

    /// `AddedToken(**d)` of a config dict (`__type` dropped).
    fn from_dict(o: &Map<String, Value>) -> Result<Tok, String> {
        let flag = |k: &str| -> Result<Option<bool>, String> {
            match o.get(k) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(v) => Err(format!("AddedToken {k} = {v}: not a bool")),
            }
        };
        Ok(Tok::Added {
            content: o
                .get("content")
                .and_then(Value::as_str)
                .ok_or("an AddedToken without content")?
                .to_owned(),
            single_word: flag("single_word")?.unwrap_or(false),
            lstrip: flag("lstrip")?.unwrap_or(false),
            rstrip: flag("rstrip")?.unwrap_or(false),
            normalized: flag("normalized")?,
            special: flag("special")?.unwrap_or(false),
        })
    }

    /// A config value: a string, or an `AddedToken` dict.
    fn from_value(v: &Value) -> Result<Option<Tok>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(Tok::Str(s.clone()))),
            Value::Object(o) => Tok::from_dict(o).map(Some),
            v => Err(format!(
                "special token {v}: neither a string nor an AddedToken"
            )),
        }
    }

    /// The token `add_tokens` receives (`special` as set by `__init__`).
    fn spec(&self, special: bool) -> AddedSpec {
        match self {
            Tok::Str(s) => AddedSpec {
                id: None,
                content: s.clone(),
                single_word: false,
                lstrip: false,
                rstrip: false,
                normalized: !special,
                special,
            },
            Tok::Added {
                content,
                single_word,
                lstrip,
                rstrip,
                normalized,
                ..
            } => AddedSpec {
                id: None,
                content: content.clone(),
                single_word: *single_word,
                lstrip: *lstrip,
                rstrip: *rstrip,
                normalized: normalized.unwrap_or(!special),
                special,
            },
        }
    }

    /// Python's `==` on tokenizers' `AddedToken` (every property, `normalized`
    /// resolved); a `str` never equals an `AddedToken`.
    fn py_eq(&self, other: &Tok) -> bool {
        match (self, other) {
            (Tok::Str(a), Tok::Str(b)) => a == b,
            (Tok::Added { special: a, .. }, Tok::Added { special: b, .. }) => {
                self.spec(*a) == other.spec(*b)
            }
            _ => false,
        }
    }
}

/// The class `__init__` defaults of the named tokens (`LlamaTokenizerFast`,
/// `GemmaTokenizerFast`, `Qwen2TokenizerFast`; the base class has none).
fn default_special(class: TokenizerClass, attr: &str) -> Option<&'static str> {
    match (class, attr) {
        (TokenizerClass::Gemma, "mask_token") => None,
        _ => class.default_special(attr),
    }
}

pub(super) fn plan(src: &Sources, class: TokenizerClass) -> Result<(Option<Plan>, Facts), String> {
    let config = &src.config;
    if class == TokenizerClass::Llama
        && config.get("add_prefix_space").is_some_and(|v| !v.is_null())
    {
        return Err("add_prefix_space is set: LlamaTokenizerFast converts the sentencepiece model \
                    instead of reading tokenizer.json (from_slow), which prefill-guard does not model"
            .into());
    }
    if src.added_tokens_file && config.get("added_tokens_decoder").is_none() {
        return Err(
            "added tokens come from the legacy added_tokens.json, which is not modelled".into(),
        );
    }

    // `_from_pretrained`: the config's added_tokens_decoder, else the legacy
    // branch's tokenizer.json added_tokens; named tokens whose text is there
    // become that very token object.
    let decoder = decoder_tokens(config, src.skeleton.as_ref())?;
    let named = named_tokens(config, class, &decoder)?;
    let additional = additional_tokens(config)?;
    let model_specific = model_specific_tokens(config)?;

    let facts = facts(&named, &additional, &model_specific);
    let Some(skeleton) = &src.skeleton else {
        return Ok((None, facts));
    };

    // `all_special_tokens_extended`: named, then the list, then the
    // model-specific ones, first of each text.
    let mut specials: Vec<Tok> = Vec::new();
    for t in named
        .iter()
        .filter_map(|(_, t)| t.clone())
        .chain(additional.iter().cloned())
        .chain(model_specific.iter().map(|(_, t)| t.clone()))
    {
        if !t.content().is_empty() && !specials.iter().any(|s| s.content() == t.content()) {
            specials.push(t);
        }
    }
    let backend_added: Vec<String> = skeleton
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| t.get("content").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();

    let mut to_add: Vec<Tok> = decoder.iter().map(|(_, t)| t.clone()).collect();
    let encoder: Vec<String> = backend_added
        .iter()
        .cloned()
        .chain(to_add.iter().map(|t| t.content().to_owned()))
        .collect();
    for t in &specials {
        let missing = match t {
            Tok::Str(s) => !encoder.contains(s),
            Tok::Added { .. } => true,
        };
        if missing && !to_add.iter().any(|x| x.py_eq(t)) {
            to_add.push(t.clone());
        }
    }
    let all_special: Vec<&str> = specials.iter().map(Tok::content).collect();
    let api_added = to_add
        .iter()
        .map(|t| {
            let special = match t {
                Tok::Added {
                    special, content, ..
                } => *special || all_special.contains(&content.as_str()),
                Tok::Str(s) => all_special.contains(&s.as_str()),
            };
            t.spec(special)
        })
        .collect();

    let mut doc = skeleton.clone();
    set_top_level_prefix_space(&mut doc, config, class);
    let post = match class {
        TokenizerClass::Llama | TokenizerClass::Gemma => Some(post_processor(config, &named)?),
        _ => None,
    };
    Ok((
        Some(Plan {
            skeleton: doc,
            api_added,
            add_if_missing: Vec::new(),
            post,
            encode_special_tokens: config.split_special_tokens()?,
        }),
        facts,
    ))
}

/// `added_tokens_decoder` as `_from_pretrained` builds it, sorted by id.
fn decoder_tokens(
    config: &TokenizerConfig,
    skeleton: Option<&Map<String, Value>>,
) -> Result<Vec<(u64, Tok)>, String> {
    let mut out = Vec::new();
    match config.get("added_tokens_decoder") {
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let id: u64 = k
                    .parse()
                    .map_err(|_| format!("added_tokens_decoder key {k:?}"))?;
                let Value::Object(o) = v else {
                    return Err(format!("added_tokens_decoder[{k}] is not an AddedToken"));
                };
                out.push((id, Tok::from_dict(o)?));
            }
        }
        Some(v) => return Err(format!("added_tokens_decoder {v}: not a dict")),
        None => {
            if let Some(Value::Array(a)) = skeleton.and_then(|s| s.get("added_tokens")) {
                for t in a {
                    let (Some(id), Value::Object(o)) = (t.get("id").and_then(Value::as_u64), t)
                    else {
                        return Err("tokenizer.json added_tokens entry without an id".into());
                    };
                    out.push((id, Tok::from_dict(o)?));
                }
            }
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

/// The seven named tokens: the config's value (null: unset), else the class
/// default; a text in the decoder becomes the decoder's token. Qwen2's
/// `__init__` wraps its four string tokens as special, unnormalized tokens.
fn named_tokens(
    config: &TokenizerConfig,
    class: TokenizerClass,
    decoder: &[(u64, Tok)],
) -> Result<Vec<(&'static str, Option<Tok>)>, String> {
    let mut out = Vec::new();
    for attr in SPECIAL_TOKEN_ATTRIBUTES {
        let mut tok = match config.get(attr) {
            Some(v) => Tok::from_value(v)?,
            None => default_special(class, attr).map(|s| Tok::Str(s.to_owned())),
        };
        if let Some(t) = &tok {
            if let Some((_, d)) = decoder.iter().find(|(_, d)| d.content() == t.content()) {
                tok = Some(d.clone());
            }
        }
        if class == TokenizerClass::Qwen2
            && matches!(attr, "bos_token" | "eos_token" | "unk_token" | "pad_token")
        {
            if let Some(Tok::Str(s)) = &tok {
                tok = Some(Tok::Added {
                    content: s.clone(),
                    single_word: false,
                    lstrip: false,
                    rstrip: false,
                    normalized: Some(false),
                    special: true,
                });
            }
        }
        out.push((attr, tok));
    }
    Ok(out)
}

/// `additional_special_tokens`: the config's list, with special_tokens_map.json's
/// entries not in it appended (legacy branch).
fn additional_tokens(config: &TokenizerConfig) -> Result<Vec<Tok>, String> {
    let list = |v: &Value| -> Result<Vec<Tok>, String> {
        match v {
            Value::Null => Ok(Vec::new()),
            Value::Array(a) => a
                .iter()
                .map(|t| {
                    Tok::from_value(t)?.ok_or_else(|| "a null additional special token".to_owned())
                })
                .collect(),
            v => Err(format!("additional_special_tokens {v}: not a list")),
        }
    };
    let mut out = match config.kwargs.get("additional_special_tokens") {
        Some(v) => list(v)?,
        None => Vec::new(),
    };
    // `TokenizerConfig::load` kept the config's list over the map's; v4 merges.
    if let Some(v) = &config.map_additional {
        for t in list(v)? {
            if let Tok::Added { special, .. } = &t {
                if !special {
                    return Err(
                        "special_tokens_map.json lists an AddedToken that is not marked special"
                            .into(),
                    );
                }
            }
            if !out.iter().any(|o| o.py_eq(&t)) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// `extra_special_tokens` (a dict: `_set_model_specific_special_tokens`).
fn model_specific_tokens(config: &TokenizerConfig) -> Result<Vec<(String, Tok)>, String> {
    match config.get("extra_special_tokens") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                Tok::from_value(v)?
                    .map(|t| (k.clone(), t))
                    .ok_or_else(|| format!("extra_special_tokens[{k}] is null"))
            })
            .collect(),
        Some(_) => Err(
            "extra_special_tokens is a list (a transformers 5 save): transformers 4 \
                        fails to load it"
                .into(),
        ),
    }
}

/// `special_tokens_map`: every set, non-empty attribute, in
/// `SPECIAL_TOKENS_ATTRIBUTES` order extended by the model-specific keys.
fn facts(
    named: &[(&'static str, Option<Tok>)],
    additional: &[Tok],
    model_specific: &[(String, Tok)],
) -> Facts {
    let mut vars: Vec<(String, Value)> = Vec::new();
    for (attr, t) in named {
        if let Some(t) = t.as_ref().filter(|t| !t.content().is_empty()) {
            vars.push(((*attr).to_owned(), Value::String(t.content().to_owned())));
        }
    }
    if !additional.is_empty() {
        vars.push((
            "additional_special_tokens".into(),
            Value::Array(
                additional
                    .iter()
                    .map(|t| Value::String(t.content().to_owned()))
                    .collect(),
            ),
        ));
    }
    for (k, t) in model_specific {
        if t.content().is_empty() {
            continue;
        }
        match vars.iter_mut().find(|(kk, _)| kk == k) {
            Some(slot) => slot.1 = Value::String(t.content().to_owned()),
            None => vars.push((k.clone(), Value::String(t.content().to_owned()))),
        }
    }
    Facts {
        bos: named
            .iter()
            .find(|(a, _)| *a == "bos_token")
            .and_then(|(_, t)| t.as_ref())
            .map(|t| t.content().to_owned()),
        template_variables: vars,
    }
}

/// `PreTrainedTokenizerFast.__init__`'s last step: a top-level pre-tokenizer
/// with an `add_prefix_space` (ByteLevel) gets the config's (default false).
/// Llama passes `None`, which the binding rejects (the step is skipped); a
/// non-bool config value likewise.
fn set_top_level_prefix_space(
    doc: &mut Map<String, Value>,
    config: &TokenizerConfig,
    class: TokenizerClass,
) {
    if class == TokenizerClass::Llama {
        return;
    }
    let want = match config.get("add_prefix_space") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return,
    };
    if let Some(Value::Object(pre)) = doc.get_mut("pre_tokenizer") {
        if pre.get("type").and_then(Value::as_str) == Some("ByteLevel") {
            pre.insert("add_prefix_space".into(), Value::Bool(want));
        }
    }
}

/// `LlamaTokenizerFast` / `GemmaTokenizerFast.update_post_processor` at the end
/// of `__init__`.
fn post_processor(
    config: &TokenizerConfig,
    named: &[(&'static str, Option<Tok>)],
) -> Result<PostSpec, String> {
    let add_bos = match config.get("add_bos_token") {
        None => true,
        Some(v) => py::truthy(v),
    };
    let add_eos = config.get("add_eos_token").is_some_and(py::truthy);
    let text = |attr: &str| {
        named
            .iter()
            .find(|(a, _)| *a == attr)
            .and_then(|(_, t)| t.as_ref())
            .map(|t| t.content().to_owned())
    };
    let pick = |on: bool, attr: &str| -> Result<Option<String>, String> {
        if !on {
            return Ok(None);
        }
        text(attr).map(Some).ok_or_else(|| {
            format!(
                "add_{} is set but {attr} is None: transformers fails to load",
                &attr[..3]
            )
        })
    };
    Ok(PostSpec::Template {
        bos: pick(add_bos, "bos_token")?,
        eos: pick(add_eos, "eos_token")?,
    })
}
