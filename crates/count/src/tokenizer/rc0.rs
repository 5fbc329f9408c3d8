//! transformers 5.0.0rc0 without SGLang's v5 fixes (SGLang 0.5.6.post1).
//!
//! `_from_pretrained` builds the class (its `__init__` makes a blank backend),
//! then replaces the backend with `tokenizer.json` whole
//! (`TokenizerFast.from_file`) and runs `_post_init` again; everything the
//! `__init__` added to the blank one (the config's `added_tokens_decoder`) is
//! gone. `_post_init`:
//!
//! * `LlamaTokenizer` only: a pre-tokenizer that is missing or not a
//!   `Sequence` becomes `Metaspace(prepend_scheme="first")`, the normalizer
//!   is dropped, and every special token is added again as special;
//! * `TokenizersBackend`: named and extra special tokens the vocabulary lacks
//!   are added; Llama/Gemma rebuild the post-processor from `add_bos_token`
//!   (missing: true) and `add_eos_token` (no SGLang fix: honoured); every
//!   ByteLevel step of the pre-tokenizer gets the `add_prefix_space` the class
//!   holds (Llama/Qwen2: the config's or none, then nothing changes;
//!   Gemma/backend: the config's, default false);
//! * the normalizer's lowercase/accent flags follow the tokenizer's
//!   attributes (refused: not modelled).
//!
//! `special_tokens_map` is transformers 5's (named tokens, no lists).

use serde_json::{json, Map, Value};

use super::{py, AddedSpec, Facts, Plan, PostSpec, Sources, TokenizerClass, TokenizerConfig};

pub(super) fn plan(src: &Sources, class: TokenizerClass) -> Result<(Option<Plan>, Facts), String> {
    let config = &src.config;
    let special = config.special_tokens_map(class);
    let text = |attr: &str| {
        special
            .iter()
            .find(|(k, _)| k == attr)
            .map(|(_, v)| v.clone())
    };
    let facts = Facts {
        template_variables: special
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
        bos: text("bos_token"),
    };
    let Some(skeleton) = &src.skeleton else {
        return Ok((None, facts));
    };
    if config.get("fix_mistral_regex").is_some_and(py::truthy) {
        return Err(
            "fix_mistral_regex is set: transformers patches the pre-tokenizer, not modelled".into(),
        );
    }
    let mut doc = skeleton.clone();
    if has_case_flags(doc.get("normalizer").unwrap_or(&Value::Null)) {
        return Err(
            "the normalizer has lowercase/accent flags, which 5.0.0rc0 resets from the \
                    tokenizer's attributes; not modelled"
                .into(),
        );
    }

    let mut api_added: Vec<AddedSpec> = Vec::new();
    // Named tokens (in `SPECIAL_TOKENS_ATTRIBUTES` order) then extra special
    // tokens, each once: `all_special_tokens`.
    let named: Vec<(String, Value)> = named_values(config, class);
    let extra: Vec<Value> = config.extra_special_tokens();
    let mut all_special: Vec<String> = Vec::new();
    for v in named.iter().map(|(_, v)| v).chain(extra.iter()) {
        if let Some(c) = super::token_content(v) {
            if !all_special.contains(&c) {
                all_special.push(c);
            }
        }
    }

    if class == TokenizerClass::Llama {
        let pre_type = doc
            .get("pre_tokenizer")
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        if pre_type != Some("Sequence") {
            doc.insert(
                "pre_tokenizer".into(),
                json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false}),
            );
            doc.insert("normalizer".into(), Value::Null);
            api_added.extend(all_special.iter().map(|c| special_str(c)));
        }
    }

    // `TokenizersBackend._post_init`: named, then extra tokens the loaded
    // tokenizer has no id for (vocabulary or added) are added as special;
    // which those are is known once the vocabulary is loaded.
    let mut add_if_missing: Vec<AddedSpec> = Vec::new();
    for v in named.iter().map(|(_, v)| v).chain(extra.iter()) {
        let Some(c) = super::token_content(v) else {
            continue;
        };
        if add_if_missing.iter().any(|t| t.content == c) {
            continue;
        }
        let mut t = match v {
            Value::Object(o) => AddedSpec::from_value(None, &Value::Object(o.clone()))
                .ok_or("a special token without content")?,
            _ => special_str(&c),
        };
        t.special = true; // `add_tokens(..., special_tokens=True)`
        add_if_missing.push(t);
    }

    let post = match class {
        TokenizerClass::Llama | TokenizerClass::Gemma => post_processor(config, &text)?,
        _ => None,
    };
    set_byte_level_prefix_space(&mut doc, config, class);
    Ok((
        Some(Plan {
            skeleton: doc,
            api_added,
            add_if_missing,
            post,
            encode_special_tokens: config.split_special_tokens()?,
        }),
        facts,
    ))
}

/// The named tokens' config values (null: unset), else the class defaults.
fn named_values(config: &TokenizerConfig, class: TokenizerClass) -> Vec<(String, Value)> {
    super::SPECIAL_TOKEN_ATTRIBUTES
        .iter()
        .filter_map(|attr| {
            let v = match config.get(attr) {
                Some(v) => v.clone(),
                None => Value::String(class.default_special(attr)?.to_owned()),
            };
            (!v.is_null()).then(|| ((*attr).to_owned(), v))
        })
        .collect()
}

/// `AddedToken(text, special=True)`: not normalized.
fn special_str(content: &str) -> AddedSpec {
    AddedSpec {
        id: None,
        content: content.to_owned(),
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
    }
}

fn has_case_flags(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            ["lowercase", "strip_accents", "handle_chinese_chars"]
                .iter()
                .any(|k| m.contains_key(*k))
                || m.values().any(has_case_flags)
        }
        Value::Array(a) => a.iter().any(has_case_flags),
        _ => false,
    }
}

/// rc0's `update_post_processor` (run last by `_post_init`): BOS missing
/// with `add_bos_token` fails the load; EOS missing with `add_eos_token`
/// leaves the post-processor as it is.
fn post_processor(
    config: &TokenizerConfig,
    text: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PostSpec>, String> {
    let add_bos = match config.get("add_bos_token") {
        None => true,
        Some(v) => py::truthy(v),
    };
    let add_eos = config.get("add_eos_token").is_some_and(py::truthy);
    let bos = match (add_bos, text("bos_token")) {
        (false, _) => None,
        (true, Some(b)) => Some(b),
        (true, None) => {
            return Err("add_bos_token = True but bos_token = None: the load fails".into())
        }
    };
    let eos = match (add_eos, text("eos_token")) {
        (false, _) => None,
        (true, Some(e)) => Some(e),
        (true, None) => return Ok(None),
    };
    Ok(Some(PostSpec::Template { bos, eos }))
}

/// `_post_init`'s `update_add_prefix_space`: every ByteLevel step (through
/// `Sequence`s) gets the class's `add_prefix_space` when it is a bool.
fn set_byte_level_prefix_space(
    doc: &mut Map<String, Value>,
    config: &TokenizerConfig,
    class: TokenizerClass,
) {
    let want = match (class, config.get("add_prefix_space")) {
        (_, Some(Value::Bool(b))) => *b,
        (TokenizerClass::Gemma | TokenizerClass::Backend, None) => false,
        _ => return,
    };
    fn walk(v: &mut Value, want: bool) {
        let Value::Object(m) = v else { return };
        if m.get("type").and_then(Value::as_str) == Some("Sequence") {
            if let Some(Value::Array(a)) = m.get_mut("pretokenizers") {
                a.iter_mut().for_each(|x| walk(x, want));
            }
        } else if m.contains_key("add_prefix_space") {
            m.insert("add_prefix_space".into(), Value::Bool(want));
        }
    }
    if let Some(pre) = doc.get_mut("pre_tokenizer") {
        walk(pre, want);
    }
}
