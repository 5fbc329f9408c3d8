//! Loading `tokenizer.json` the way SGLang 0.5.23 (transformers 5.19) loads it,
//! and encoding with its rules.
//!
//! SGLang loads tokenizers with `sglang/srt/utils/hf_transformers/tokenizer.py::get_tokenizer`:
//! `AutoTokenizer.from_pretrained` (transformers 5.19), then two post-load fixes,
//! `_fix_v5_tokenizer_components` and `_fix_v5_add_bos_eos_token`. Transformers 5.19
//! does not always take `tokenizer.json` as it is:
//!
//! * `TokenizersBackend` (`PreTrainedTokenizerFast` is an alias) has no `__init__` of
//!   its own, so `convert_to_native_format` loads `tokenizer.json` whole.
//! * A tokenizer class with its own `__init__` (`LlamaTokenizer`, `GemmaTokenizer`,
//!   `Qwen2Tokenizer`, ...) gets only the vocabulary, the merges and the
//!   post-processor from `tokenizer.json`; the class builds the BPE model, the
//!   normalizer and the pre-tokenizer itself, and the added tokens come from
//!   `tokenizer_config.json`'s `added_tokens_decoder` (or, when that is absent, from
//!   `tokenizer.json`'s `added_tokens`: `_from_pretrained`'s legacy branch).
//! * SGLang then puts `tokenizer.json`'s pre-tokenizer back when its *type* differs
//!   from the rebuilt one (DeepSeek-V3: ByteLevel `Sequence` vs `Metaspace`), but not
//!   when `tokenizer.json` has none (Phi-3: the rebuilt `Metaspace` stays, and the
//!   `tokenizer.json` normalizer is gone for good).
//! * For the Llama/Gemma family SGLang restores `add_bos_token` from
//!   `tokenizer_config.json` (missing or null means `true`, transformers v4's default)
//!   and rebuilds the post-processor with it (DeepSeek-V3's BOS comes from here).
//!
//! This module reproduces that by rewriting the `tokenizer.json` document into the
//! one transformers ends up with, then loading it with the same `tokenizers` core.
//! Classes whose rebuild is not modelled here are refused at load time rather than
//! guessed at: a wrong pipeline can undercount.

use std::path::Path;

use serde_json::{json, Map, Value};
use tokenizers::{AddedToken, Tokenizer};

use super::bound::BoundRule;
use super::cache::CacheScope;
use super::fast::{CacheKey, Chunking, Pipeline, Tally};

/// Identities of loaded tokenizers (`TextTokenizer::id`).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
use super::py;
use super::{CountError, LoadError};

/// transformers' `SPECIAL_TOKENS_ATTRIBUTES`, in its order.
const SPECIAL_TOKEN_ATTRIBUTES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// Qwen2Tokenizer's own pre-tokenizer regex (`models/qwen2/tokenization_qwen2.py::PRETOKENIZE_REGEX`):
/// the class installs it whatever `tokenizer.json` says.
const QWEN2_PRETOKENIZE_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How transformers 5.19 builds the backend for a declared tokenizer class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerClass {
    /// `TokenizersBackend` / `PreTrainedTokenizerFast`: `tokenizer.json` as is.
    Backend,
    /// `LlamaTokenizer(Fast)`, `CodeLlamaTokenizer(Fast)` (a subclass without its own pipeline).
    Llama,
    /// `GemmaTokenizer(Fast)`.
    Gemma,
    /// `Qwen2Tokenizer(Fast)`.
    Qwen2,
}

impl TokenizerClass {
    /// Maps `tokenizer_config.json`'s `tokenizer_class`. `None` for a class whose
    /// transformers-5.19 rebuild is not modelled.
    pub fn from_declared(name: Option<&str>) -> Option<Self> {
        let name = match name {
            None => return Some(TokenizerClass::Backend),
            Some(n) => n,
        };
        // v5 keeps the `...Fast` names as aliases of the same class.
        let base = name.strip_suffix("Fast").unwrap_or(name);
        match base {
            "PreTrainedTokenizer" | "TokenizersBackend" => Some(TokenizerClass::Backend),
            "LlamaTokenizer" | "CodeLlamaTokenizer" => Some(TokenizerClass::Llama),
            "GemmaTokenizer" => Some(TokenizerClass::Gemma),
            "Qwen2Tokenizer" => Some(TokenizerClass::Qwen2),
            _ => None,
        }
    }

    /// The special-token defaults of the class `__init__` signature, used when
    /// `tokenizer_config.json` does not name the token at all.
    fn default_special(self, attr: &str) -> Option<&'static str> {
        match (self, attr) {
            (TokenizerClass::Llama, "unk_token") => Some("<unk>"),
            (TokenizerClass::Llama, "bos_token") => Some("<s>"),
            (TokenizerClass::Llama, "eos_token") => Some("</s>"),
            (TokenizerClass::Gemma, "unk_token") => Some("<unk>"),
            (TokenizerClass::Gemma, "bos_token") => Some("<bos>"),
            (TokenizerClass::Gemma, "eos_token") => Some("<eos>"),
            (TokenizerClass::Gemma, "pad_token") => Some("<pad>"),
            (TokenizerClass::Gemma, "mask_token") => Some("<mask>"),
            (TokenizerClass::Qwen2, "unk_token") => Some("<|endoftext|>"),
            (TokenizerClass::Qwen2, "eos_token") => Some("<|endoftext|>"),
            (TokenizerClass::Qwen2, "pad_token") => Some("<|endoftext|>"),
            _ => None,
        }
    }

    /// `_fix_v5_add_bos_eos_token`'s `_V4_CLASSES_WITH_BOS_EOS_FLAGS` (the modelled ones).
    fn restores_bos_flag(self) -> bool {
        matches!(self, TokenizerClass::Llama | TokenizerClass::Gemma)
    }
}

/// The parsed `tokenizer_config.json` plus the legacy `special_tokens_map.json`,
/// as `PreTrainedTokenizerBase._from_pretrained` merges them.
#[derive(Debug, Clone, Default)]
pub struct TokenizerConfig {
    kwargs: Map<String, Value>,
    declared_class: Option<String>,
}

impl TokenizerConfig {
    /// Reads `tokenizer_config.json` (optional) and `special_tokens_map.json`
    /// (consulted only when the config has no `added_tokens_decoder`, as in
    /// `_from_pretrained`'s legacy branch).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let mut kwargs = match read_json(&dir.join("tokenizer_config.json"))? {
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(LoadError::Invalid {
                    path: dir.join("tokenizer_config.json").display().to_string(),
                    message: "not a JSON object".into(),
                })
            }
            None => Map::new(),
        };
        let declared_class = match kwargs.remove("tokenizer_class") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        if !kwargs.contains_key("added_tokens_decoder") {
            if let Some(Value::Object(map)) = read_json(&dir.join("special_tokens_map.json"))? {
                for (k, v) in map {
                    if k == "extra_special_tokens" || k == "additional_special_tokens" {
                        // Only merged into the extra tokens, never into the named map.
                        kwargs.entry(k).or_insert(v);
                        continue;
                    }
                    kwargs.insert(k, v);
                }
            }
        }
        Ok(Self {
            kwargs,
            declared_class,
        })
    }

    pub fn declared_class(&self) -> Option<&str> {
        self.declared_class.as_deref()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kwargs.get(key)
    }

    /// transformers 5.19's `tokenizer.special_tokens_map`, which
    /// `apply_chat_template` spreads into the template variables: the seven named
    /// tokens (config value, or the class default when the config does not name
    /// it), then model-specific `*_token` keys and `extra_special_tokens` dict
    /// entries (Gemma's `boi_token`, ...). `additional_special_tokens` lists are
    /// not part of it in v5.
    pub fn special_tokens_map(&self, class: TokenizerClass) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for attr in SPECIAL_TOKEN_ATTRIBUTES {
            let value = match self.kwargs.get(attr) {
                Some(v) => token_content(v),
                None => class.default_special(attr).map(str::to_owned),
            };
            if let Some(v) = value {
                out.push((attr.to_owned(), v));
            }
        }
        // `_from_pretrained` pops string-valued `*_token` keys (explicit), and
        // `PreTrainedTokenizerBase.__init__` later picks up AddedToken-valued ones
        // (auto); the final order is `{**auto, **explicit}`.
        let mut auto: Vec<(String, String)> = Vec::new();
        let mut explicit: Vec<(String, String)> = Vec::new();
        for (k, v) in &self.kwargs {
            if SPECIAL_TOKEN_ATTRIBUTES.contains(&k.as_str()) || !k.ends_with("_token") {
                continue;
            }
            match v {
                Value::String(s) => explicit.push((k.clone(), s.clone())),
                Value::Object(o)
                    if o.get("__type").and_then(Value::as_str) == Some("AddedToken") =>
                {
                    if let Some(c) = token_content(v) {
                        auto.push((k.clone(), c));
                    }
                }
                _ => {}
            }
        }
        if let Some(Value::Object(extra)) = self.kwargs.get("extra_special_tokens") {
            for (k, v) in extra {
                if let Some(c) = token_content(v) {
                    upsert(&mut explicit, k, c);
                }
            }
        }
        let mut model_specific = auto;
        for (k, v) in explicit {
            upsert(&mut model_specific, &k, v);
        }
        for (k, v) in model_specific {
            upsert(&mut out, &k, v);
        }
        out
    }

    /// Extra special tokens (list form of `extra_special_tokens` /
    /// `additional_special_tokens`, or the values of the dict form).
    fn extra_special_tokens(&self) -> Vec<Value> {
        let list = match self.kwargs.get("extra_special_tokens") {
            Some(Value::Array(a)) if !a.is_empty() => Some(a),
            Some(Value::Object(o)) if !o.is_empty() => return o.values().cloned().collect(),
            _ => None,
        };
        match list.or_else(|| {
            self.kwargs
                .get("additional_special_tokens")
                .and_then(Value::as_array)
        }) {
            Some(a) => a.clone(),
            None => Vec::new(),
        }
    }
}

fn upsert(v: &mut Vec<(String, String)>, k: &str, val: String) {
    match v.iter_mut().find(|(kk, _)| kk == k) {
        Some(slot) => slot.1 = val,
        None => v.push((k.to_owned(), val)),
    }
}

/// The text of a token given as a string or an `AddedToken` dict.
fn token_content(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Option<Value>, LoadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(LoadError::Io {
                path: path.display().to_string(),
                source: e,
            })
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| LoadError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })
}

/// One added token as transformers' `AddedToken` carries it.
#[derive(Debug, Clone, PartialEq)]
struct AddedSpec {
    id: Option<u64>,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

impl AddedSpec {
    /// From a `tokenizer.json` `added_tokens` entry or a config `added_tokens_decoder` value.
    fn from_value(id: Option<u64>, v: &Value) -> Option<Self> {
        let o = v.as_object()?;
        let special = o.get("special").and_then(Value::as_bool).unwrap_or(false);
        Some(AddedSpec {
            id,
            content: o.get("content")?.as_str()?.to_owned(),
            single_word: o
                .get("single_word")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            lstrip: o.get("lstrip").and_then(Value::as_bool).unwrap_or(false),
            rstrip: o.get("rstrip").and_then(Value::as_bool).unwrap_or(false),
            // tokenizers' AddedToken default: normalized = !special.
            normalized: o
                .get("normalized")
                .and_then(Value::as_bool)
                .unwrap_or(!special),
            special,
        })
    }

    fn same_token(&self, other: &AddedSpec) -> bool {
        self.content == other.content
            && self.single_word == other.single_word
            && self.lstrip == other.lstrip
            && self.rstrip == other.rstrip
            && self.normalized == other.normalized
            && self.special == other.special
    }

    fn to_added_token(&self) -> AddedToken {
        AddedToken::from(self.content.clone(), self.special)
            .single_word(self.single_word)
            .lstrip(self.lstrip)
            .rstrip(self.rstrip)
            .normalized(self.normalized)
    }
}

/// A tokenizer as SGLang loads it.
pub struct TextTokenizer {
    pub(crate) inner: Tokenizer,
    /// The encode pipeline without building an `Encoding` (`fast.rs`).
    pipeline: Pipeline,
    /// The upper bound this pipeline admits, if any (`bound.rs`).
    bound: BoundRule,
    auto_adds_specials: bool,
    bos_token_id: Option<u32>,
    special_tokens: Vec<(String, String)>,
    /// This instance, for the count cache's keys: two loads never share
    /// remembered counts, whatever their files.
    id: u64,
}

impl TextTokenizer {
    /// This instance's identity: two tokenizers with the same id split alike.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("auto_adds_specials", &self.auto_adds_specials)
            .field("bos_token_id", &self.bos_token_id)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl TextTokenizer {
    /// Loads `<dir>/tokenizer.json` with `<dir>/tokenizer_config.json`.
    /// `Ok(None)` when there is no `tokenizer.json`.
    pub fn load(dir: &Path) -> Result<Option<Self>, LoadError> {
        let path = dir.join("tokenizer.json");
        let doc = match read_json(&path)? {
            Some(d) => d,
            None => return Ok(None),
        };
        let config = TokenizerConfig::load(dir)?;
        let has_model_config = dir.join("config.json").is_file();
        Self::from_parts(doc, &config, has_model_config)
            .map(Some)
            .map_err(|message| LoadError::Invalid {
                path: path.display().to_string(),
                message,
            })
    }

    /// Builds the tokenizer from a parsed `tokenizer.json` and its config.
    /// `has_model_config`: a `config.json` sits beside it (then a missing
    /// `tokenizer_class` would be resolved from the model type, which is not modelled).
    pub fn from_parts(
        doc: Value,
        config: &TokenizerConfig,
        has_model_config: bool,
    ) -> Result<Self, String> {
        let class = tokenizer_class(config, has_model_config)?;
        let special_tokens = config.special_tokens_map(class);
        let mut doc = match doc {
            Value::Object(m) => m,
            _ => return Err("tokenizer.json is not a JSON object".into()),
        };
        let (base_added, mut to_add) = convert_to_native_format(&mut doc, config, class)?;
        add_missing_special_tokens(&mut to_add, &base_added, &special_tokens, config);
        let api_added = write_added_tokens(&mut doc, base_added, to_add);

        // transformers disables truncation and padding per call unless asked
        // (`set_truncation_and_padding`), so neither may touch a count here.
        doc.insert("truncation".into(), Value::Null);
        doc.insert("padding".into(), Value::Null);

        let mut inner: Tokenizer = serde_json::from_value(Value::Object(doc))
            .map_err(|e| format!("tokenizers could not load it: {e}"))?;
        if !api_added.is_empty() {
            inner
                .add_tokens(api_added.iter().map(AddedSpec::to_added_token))
                .map_err(|e| format!("adding special tokens failed: {e}"))?;
        }

        let bos = special_tokens
            .iter()
            .find(|(k, _)| k == "bos_token")
            .map(|(_, v)| v.clone());
        let bos_token_id = bos.as_deref().and_then(|b| inner.token_to_id(b));
        if class.restores_bos_flag() {
            fix_v5_add_bos_eos_token(&mut inner, config, bos.as_deref(), bos_token_id)?;
        }

        let auto_adds_specials = inner
            .encode_fast("", true)
            .map(|e| !e.get_ids().is_empty())
            .map_err(|e| e.to_string())?;
        let pipeline = Pipeline::new(&inner)?;
        let bound = BoundRule::derive(&inner);
        Ok(Self {
            inner,
            pipeline,
            bound,
            auto_adds_specials,
            bos_token_id,
            special_tokens,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The token count of `text`. Special-token strings in `text` are matched as
    /// special tokens, as with HF's defaults (`split_special_tokens=False`).
    pub fn encode_len(&self, text: &str, add_special_tokens: bool) -> Result<usize, CountError> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.len())
            .map_err(|e| CountError::Tokenizer(e.to_string()))
    }

    /// The exact count through the `encode` pipeline without building an
    /// `Encoding`, on the calling thread. Equal to [`Self::encode_len`].
    pub fn count_exact(&self, text: &str, add_special_tokens: bool) -> Result<usize, CountError> {
        self.pipeline
            .count(&self.inner, text, add_special_tokens, None, None)
            .map(|t| t.tokens)
    }

    /// As [`Self::count_exact`], long texts spread over the counting pool
    /// (one thread per core). Equal to the sequential count.
    pub fn count_parallel(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<usize, CountError> {
        self.pipeline
            .count(
                &self.inner,
                text,
                add_special_tokens,
                None,
                Some(Chunking::DEFAULT),
            )
            .map(|t| t.tokens)
    }

    /// Counts until the count reaches `limit`: the exact count when it stays
    /// below (or the text ends), else a lower bound `>= limit`
    /// (`complete == false`).
    pub fn count_until(
        &self,
        text: &str,
        add_special_tokens: bool,
        limit: usize,
        parallel: bool,
    ) -> Result<Tally, CountError> {
        self.tally(text, add_special_tokens, Some(limit), parallel, None)
    }

    /// [`Self::count_until`] with explicit chunking (`None`: on this thread),
    /// for tests that drive the parallel path with short texts.
    #[doc(hidden)]
    pub fn count_chunked(
        &self,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
        chunking: Option<Chunking>,
    ) -> Result<Tally, CountError> {
        self.pipeline
            .count(&self.inner, text, add_special_tokens, limit, chunking)
    }

    /// Counts with an optional limit (see [`Self::count_until`]), through
    /// the count cache when there is one.
    pub(crate) fn tally(
        &self,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
        parallel: bool,
        cache: Option<&CacheScope>,
    ) -> Result<Tally, CountError> {
        let chunking = parallel.then_some(Chunking::DEFAULT);
        match cache {
            Some(scope) => self.pipeline.count_cached(
                &self.inner,
                text,
                add_special_tokens,
                limit,
                chunking,
                &scope.cache,
                CacheKey {
                    tokenizer: self.id,
                    partition: scope.partition,
                },
            ),
            None => self
                .pipeline
                .count(&self.inner, text, add_special_tokens, limit, chunking),
        }
    }

    /// [`Self::count_until`] through a count cache (`cache.rs`), for the
    /// property tests and benchmarks that compare it with a fresh count.
    pub fn count_cached(
        &self,
        text: &str,
        add_special_tokens: bool,
        limit: Option<usize>,
        parallel: bool,
        cache: &CacheScope,
    ) -> Result<Tally, CountError> {
        self.tally(text, add_special_tokens, limit, parallel, Some(cache))
    }

    /// A sound upper bound on `encode_len(text, add_special_tokens)` without
    /// tokenizing, or `None` when this tokenizer admits none (`bound.rs`).
    pub fn upper_bound(&self, text: &str, add_special_tokens: bool) -> Option<usize> {
        self.bound
            .bound(text)
            .map(|b| b.saturating_add(self.pipeline.additions(add_special_tokens)))
    }

    /// Whether long texts are cut between words for parallel counting
    /// (`cuts.rs`), or why not.
    pub fn text_cuts(&self) -> Result<(), String> {
        if !self.pipeline.parallel_safe() {
            return Err("the model is not deterministic (BPE dropout)".into());
        }
        super::cuts::cut_safe(&self.inner)
    }

    /// How the upper bound is computed, or why there is none.
    pub fn bound_rule(&self) -> &BoundRule {
        &self.bound
    }

    /// `encode(text, add_special_tokens)`'s first id.
    pub fn first_id(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Option<u32>, CountError> {
        self.pipeline
            .first_id(&self.inner, text, add_special_tokens)
    }

    /// `tokenizer([[a, b]])` as SGLang's cross-encoder path calls it: default
    /// special tokens, the post-processor's pair template.
    pub fn encode_pair_len(&self, a: &str, b: &str) -> Result<usize, CountError> {
        self.inner
            .encode_fast((a, b), true)
            .map(|e| e.len())
            .map_err(|e| CountError::Tokenizer(e.to_string()))
    }

    pub fn encode_ids(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, CountError> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| CountError::Tokenizer(e.to_string()))
    }

    /// `len(tokenizer.encode("")) > 0`: SGLang's `_tokenizer_auto_adds_specials`,
    /// which decides the chat encode kwargs.
    pub fn auto_adds_specials(&self) -> bool {
        self.auto_adds_specials
    }

    /// `tokenizer.bos_token_id`.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// transformers 5.19's `special_tokens_map`, in its order.
    pub fn special_tokens(&self) -> &[(String, String)] {
        &self.special_tokens
    }
}

/// `AutoTokenizer.from_pretrained`'s choice of class: `tokenizer_config.json`'s
/// `tokenizer_class`, refused when it is missing beside a `config.json` (then
/// transformers resolves it from the model type) or its rebuild is not modelled.
fn tokenizer_class(
    config: &TokenizerConfig,
    has_model_config: bool,
) -> Result<TokenizerClass, String> {
    let declared = config.declared_class();
    if declared.is_none() && has_model_config {
        return Err("tokenizer_config.json names no tokenizer_class: transformers would pick the class from \
                    config.json's model_type, which prefill-guard does not model"
            .into());
    }
    TokenizerClass::from_declared(declared).ok_or_else(|| {
        format!(
            "tokenizer_class {:?}: transformers 5.19 rebuilds this class from tokenizer.json in a way \
             prefill-guard does not model, so its counts could not be shown exact",
            declared.unwrap_or_default()
        )
    })
}

/// `TokenizersBackend.convert_to_native_format` (with `_from_pretrained`'s
/// added-token handling): rebuilds `doc` for a class with its own `__init__`,
/// and returns the added tokens the backend holds before `__init__`'s
/// additions and those `TokenizersBackend.__init__` adds, in registration order.
fn convert_to_native_format(
    doc: &mut Map<String, Value>,
    config: &TokenizerConfig,
    class: TokenizerClass,
) -> Result<(Vec<AddedSpec>, Vec<AddedSpec>), String> {
    let json_added: Vec<AddedSpec> = doc
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| AddedSpec::from_value(t.get("id").and_then(Value::as_u64), t))
                .collect()
        })
        .unwrap_or_default();
    let config_added: Option<Vec<AddedSpec>> = config
        .get("added_tokens_decoder")
        .and_then(Value::as_object)
        .map(|m| {
            let mut v: Vec<AddedSpec> = m
                .iter()
                .filter_map(|(k, t)| AddedSpec::from_value(k.parse::<u64>().ok(), t))
                .collect();
            // `sorted(added_tokens_decoder.items())` by id.
            v.sort_by_key(|t| t.id.unwrap_or(u64::MAX));
            v
        });

    if class == TokenizerClass::Backend {
        let base_added = json_added;
        let to_add = config_added
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !base_added.iter().any(|b| b.same_token(t)))
            .collect();
        Ok((base_added, to_add))
    } else {
        rebuild_for_class(doc, class, config)?;
        // `_from_pretrained`: the config's `added_tokens_decoder`, else the legacy
        // branch reads `tokenizer.json`'s `added_tokens`.
        Ok((Vec::new(), config_added.unwrap_or(json_added)))
    }
}

/// The special-token part of `TokenizersBackend.__init__`: named special
/// tokens and extra special tokens not yet known are added as special tokens;
/// an added token that is a named special token becomes special.
fn add_missing_special_tokens(
    to_add: &mut Vec<AddedSpec>,
    base_added: &[AddedSpec],
    special_tokens: &[(String, String)],
    config: &TokenizerConfig,
) {
    let named: Vec<String> = special_tokens
        .iter()
        .filter(|(k, _)| SPECIAL_TOKEN_ATTRIBUTES.contains(&k.as_str()) || k.ends_with("_token"))
        .map(|(_, v)| v.clone())
        .collect();
    let known = |c: &str, base: &[AddedSpec], add: &[AddedSpec]| {
        base.iter().any(|t| t.content == c) || add.iter().any(|t| t.content == c)
    };
    let mut extra_specs = Vec::new();
    for content in named.iter().cloned().chain(
        config
            .extra_special_tokens()
            .iter()
            .filter_map(token_content),
    ) {
        if !known(&content, base_added, to_add)
            && !extra_specs.iter().any(|t: &AddedSpec| t.content == content)
        {
            extra_specs.push(AddedSpec {
                id: None,
                content,
                single_word: false,
                lstrip: false,
                rstrip: false,
                normalized: false,
                special: true,
            });
        }
    }
    to_add.extend(extra_specs);
    for t in to_add.iter_mut() {
        if !t.special && named.contains(&t.content) {
            t.special = true;
        }
    }
}

/// `add_tokens` on the backend, split for loading: tokens with a known id go
/// into `doc`'s `added_tokens` (their ids are kept); the rest are returned,
/// to be added through the API, which assigns ids as Python does.
fn write_added_tokens(
    doc: &mut Map<String, Value>,
    base_added: Vec<AddedSpec>,
    to_add: Vec<AddedSpec>,
) -> Vec<AddedSpec> {
    let mut doc_added: Vec<AddedSpec> = base_added;
    let mut api_added: Vec<AddedSpec> = Vec::new();
    for t in to_add {
        if let Some(existing) = doc_added.iter_mut().find(|e| e.content == t.content) {
            // Re-adding a known content replaces its properties (AddedVocabulary::add_tokens).
            let id = existing.id;
            *existing = AddedSpec { id, ..t };
        } else if t.id.is_some() {
            doc_added.push(t);
        } else {
            api_added.push(t);
        }
    }
    doc.insert(
        "added_tokens".into(),
        Value::Array(
            doc_added
                .iter()
                .map(|t| {
                    json!({"id": t.id, "content": t.content, "single_word": t.single_word, "lstrip": t.lstrip,
                           "rstrip": t.rstrip, "normalized": t.normalized, "special": t.special})
                })
                .collect(),
        ),
    );
    api_added
}

/// SGLang's `_fix_v5_add_bos_eos_token` (`utils/hf_transformers/tokenizer.py`):
/// v5 strips `add_bos_token` when tokenizer.json exists, so the flag reads
/// false; SGLang restores the config value (missing or null → true) and
/// rebuilds the post-processor only when that changes it (transformers'
/// `update_post_processor`). `add_eos_token` is forced to false for fast
/// tokenizers, i.e. never changes.
fn fix_v5_add_bos_eos_token(
    inner: &mut Tokenizer,
    config: &TokenizerConfig,
    bos: Option<&str>,
    bos_token_id: Option<u32>,
) -> Result<(), String> {
    let add_bos = match config.get("add_bos_token") {
        None | Some(Value::Null) => true,
        Some(v) => py::truthy(v),
    };
    if !add_bos {
        return Ok(());
    }
    let post = match (bos, bos_token_id) {
        (Some(b), Some(id)) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {b: {"id": b, "ids": [id], "tokens": [b]}}
        }),
        // `update_post_processor`: no BOS token → add_bos_token is turned off.
        _ => json!({
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {}
        }),
    };
    let post: tokenizers::processors::PostProcessorWrapper =
        serde_json::from_value(post).map_err(|e| format!("BOS post-processor: {e}"))?;
    inner.with_post_processor(Some(post));
    Ok(())
}

/// Rewrites a `tokenizer.json` document into what the class `__init__` builds,
/// followed by SGLang's `_fix_v5_tokenizer_components`.
fn rebuild_for_class(
    doc: &mut Map<String, Value>,
    class: TokenizerClass,
    config: &TokenizerConfig,
) -> Result<(), String> {
    let model = doc
        .get("model")
        .and_then(Value::as_object)
        .ok_or("tokenizer.json has no model")?;
    if model.get("type").and_then(Value::as_str) != Some("BPE") {
        // The BPE classes would build a BPE model from a non-BPE vocabulary.
        return Err(format!(
            "tokenizer class expects a BPE model but tokenizer.json has {:?}",
            model.get("type")
        ));
    }
    let json_pre = doc.get("pre_tokenizer").cloned().unwrap_or(Value::Null);
    let json_pre_type = json_pre
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_owned);

    let unk_for_gemma = match config.get("unk_token") {
        Some(v) => token_content(v),
        None => Some("<unk>".to_owned()),
    };
    let (model_opts, normalizer, pre): (Value, Value, Value) = match class {
        TokenizerClass::Llama => {
            // `LlamaTokenizer.__init__`: add_prefix_space defaults to true; the
            // Metaspace prepend scheme follows `_get_prepend_scheme`.
            let add_prefix_space = match config.get("add_prefix_space") {
                None | Some(Value::Null) => true,
                Some(v) => py::truthy(v),
            };
            let legacy = config.get("legacy").map(py::truthy).unwrap_or(false);
            let scheme = if !add_prefix_space {
                "never"
            } else if legacy {
                "always"
            } else {
                "first"
            };
            (
                json!({"unk_token": null, "fuse_unk": true, "byte_fallback": true, "continuing_subword_prefix": null,
                       "end_of_word_suffix": null, "ignore_merges": false, "dropout": null}),
                Value::Null,
                json!({"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": scheme, "split": false}),
            )
        }
        TokenizerClass::Gemma => (
            json!({"unk_token": unk_for_gemma, "fuse_unk": true, "byte_fallback": true, "continuing_subword_prefix": null,
                   "end_of_word_suffix": null, "ignore_merges": false, "dropout": null}),
            json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}),
            json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}),
        ),
        TokenizerClass::Qwen2 => {
            let add_prefix_space = config
                .get("add_prefix_space")
                .map(py::truthy)
                .unwrap_or(false);
            (
                json!({"unk_token": null, "fuse_unk": false, "byte_fallback": false, "continuing_subword_prefix": "",
                       "end_of_word_suffix": "", "ignore_merges": false, "dropout": null}),
                json!({"type": "NFC"}),
                json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": QWEN2_PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": false},
                    {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": true, "use_regex": false}
                ]}),
            )
        }
        TokenizerClass::Backend => return Ok(()),
    };

    if let Some(Value::Object(m)) = doc.get_mut("model") {
        if let Value::Object(opts) = model_opts {
            for (k, v) in opts {
                m.insert(k, v);
            }
        }
    }
    doc.insert("normalizer".into(), normalizer);
    // `_fix_v5_tokenizer_components`: only when tokenizer.json has a pre-tokenizer
    // whose type differs from the rebuilt one is tokenizer.json's put back.
    let class_pre_type = pre.get("type").and_then(Value::as_str).map(str::to_owned);
    let restore = matches!((&json_pre_type, &class_pre_type), (Some(a), Some(b)) if a != b);
    if !restore {
        doc.insert("pre_tokenizer".into(), pre);
    }
    Ok(())
}
