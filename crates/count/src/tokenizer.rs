//! Loading `tokenizer.json` the way each SGLang release loads it, and encoding
//! with its rules.
//!
//! SGLang releases pin different transformers versions, which load tokenizers
//! differently ([`Transformers`], `generation.rs`): transformers 4 takes
//! `tokenizer.json` whole (`v4.rs`), 5.0.0rc0 takes it whole and runs the
//! class's `_post_init` (`rc0.rs`), and 5.3+ rebuild some classes, which
//! SGLang 0.5.10+ then patches (below). Which class a release loads is
//! `AutoTokenizer`'s choice by the declared class and `config.json`'s model
//! type, recorded per transformers version (`auto_classes.rs`).
//!
//! From SGLang 0.5.10, `get_tokenizer` (`sglang/srt/utils/hf_transformers/tokenizer.py`)
//! calls `AutoTokenizer.from_pretrained`, then two post-load fixes,
//! `_fix_v5_tokenizer_components` and `_fix_v5_add_bos_eos_token`. Transformers 5
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
//! Each generation is reproduced by rewriting the `tokenizer.json` document into
//! the one transformers ends up with (a [`Plan`]), then loading it with the same
//! `tokenizers` core. Loadings not modelled here are refused at load time rather
//! than guessed at: a wrong pipeline can undercount. Generations whose plans are
//! the same share one loaded pipeline ([`Generations`]). The proof is
//! `testdata/gen_tokenizer_generations.py` (every fixture, each generation's own
//! releases) and `crates/count/tests/count/tokenizer_generations.rs`.

mod auto_classes;
pub mod generation;
mod rc0;
mod v4;

pub use generation::Transformers;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::{json, Map, Value};
use tokenizers::{AddedToken, Tokenizer};

use super::bound::{BoundRule, BoundTally};
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
    pub(crate) fn default_special(self, attr: &str) -> Option<&'static str> {
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
}

/// The parsed `tokenizer_config.json` plus the legacy `special_tokens_map.json`,
/// as `PreTrainedTokenizerBase._from_pretrained` merges them.
#[derive(Debug, Clone, Default)]
pub struct TokenizerConfig {
    kwargs: Map<String, Value>,
    declared_class: Option<String>,
    /// `special_tokens_map.json`'s `additional_special_tokens` when it was
    /// read (transformers 4 merges it into the config's list).
    map_additional: Option<Value>,
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
        let mut map_additional = None;
        if !kwargs.contains_key("added_tokens_decoder") {
            if let Some(Value::Object(map)) = read_json(&dir.join("special_tokens_map.json"))? {
                for (k, v) in map {
                    if k == "additional_special_tokens" {
                        map_additional = Some(v.clone());
                    }
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
            map_additional,
        })
    }

    /// `split_special_tokens` (default false), which every generation hands
    /// to the backend (`encode_special_tokens`); not a bool: refused.
    pub(crate) fn split_special_tokens(&self) -> Result<bool, String> {
        match self.kwargs.get("split_special_tokens") {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("split_special_tokens {v}: not a bool")),
        }
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

/// A tokenizer as one SGLang release loads it: the pipeline, and the facts
/// of that release's tokenizer object (BOS id, template variables). Cloning
/// shares the pipeline (and the id).
#[derive(Clone)]
pub struct TextTokenizer {
    pub(crate) inner: Arc<Tokenizer>,
    /// The encode pipeline without building an `Encoding` (`fast.rs`).
    pipeline: Pipeline,
    /// The upper bound this pipeline admits, if any (`bound.rs`).
    bound: BoundRule,
    auto_adds_specials: bool,
    /// The pipeline's identity, shared by the generations that load it alike.
    id: u64,
    bos_token_id: Option<u32>,
    /// The named special tokens, as strings (`special_tokens_map` without lists).
    special_tokens: Vec<(String, String)>,
    /// Everything `apply_chat_template` spreads from `special_tokens_map`.
    template_variables: Vec<(String, Value)>,
    generation: Transformers,
}

impl TextTokenizer {
    /// This pipeline's identity: two tokenizers with the same id split alike
    /// (one load, or generations whose rewritten `tokenizer.json` is the same).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The generation this tokenizer is loaded as.
    /// Ids back to text, special tokens skipped (the PD simulator shows what
    /// a request generated over; never used to count).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_default()
    }

    pub fn generation(&self) -> Transformers {
        self.generation
    }
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("generation", &self.generation)
            .field("auto_adds_specials", &self.auto_adds_specials)
            .field("bos_token_id", &self.bos_token_id)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// What a generation makes of a directory's `tokenizer.json`: the document
/// it ends up with (without the vocabulary and merges, which no generation
/// changes), the tokens it adds afterwards, and the post-processor it sets
/// last. Two generations with equal plans (after [`Plan::canonical`]) load
/// the same pipeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    skeleton: Map<String, Value>,
    /// `add_tokens` after loading, in order (ids assigned as Python does).
    api_added: Vec<AddedSpec>,
    /// Then, in one `add_tokens`, those of these the tokenizer has no id for.
    add_if_missing: Vec<AddedSpec>,
    post: Option<PostSpec>,
    /// `split_special_tokens`: special-token spellings are plain text.
    encode_special_tokens: bool,
}

/// A `TemplateProcessing` post-processor set after loading
/// (`update_post_processor`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PostSpec {
    /// These tokens around the sequence; each must be in the vocabulary
    /// (transformers 4 and 5.0.0rc0 fail to load otherwise).
    Template {
        bos: Option<String>,
        eos: Option<String>,
    },
    /// transformers 5's `update_post_processor` after SGLang's BOS fix: the
    /// BOS when it has an id, else nothing.
    BosIfKnown(Option<String>),
}

/// What a generation's tokenizer object says besides its pipeline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Facts {
    /// `special_tokens_map`, as `apply_chat_template` spreads it.
    pub(crate) template_variables: Vec<(String, Value)>,
    /// The BOS token's text (`tokenizer.bos_token`).
    pub(crate) bos: Option<String>,
}

impl Facts {
    fn string_tokens(&self) -> Vec<(String, String)> {
        self.template_variables
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect()
    }
}

impl Plan {
    /// The plan with what cannot change an id or a decoded text set aside,
    /// for deciding whether two generations may share one pipeline:
    /// ByteLevel's `trim_offsets` (offsets only), a ByteLevel decoder's or
    /// post-processor's flags (neither reads them for ids or text), BPE
    /// options spelled differently with the same meaning (an empty
    /// prefix/suffix is no prefix/suffix; absent options are their defaults),
    /// added tokens in one spelling, re-adding a token exactly as the
    /// document has it (`AddedVocabulary::add_tokens` ignores it), and
    /// candidates for `add_if_missing` the document already has.
    fn canonical(&self) -> Plan {
        let mut c = self.clone();
        for key in ["pre_tokenizer", "decoder", "post_processor"] {
            if let Some(v) = c.skeleton.get_mut(key) {
                canonical_byte_level(v, key != "pre_tokenizer");
            }
        }
        if let Some(Value::Object(m)) = c.skeleton.get_mut("model") {
            if m.get("type").and_then(Value::as_str) == Some("BPE") {
                for (k, default) in [
                    ("dropout", Value::Null),
                    ("unk_token", Value::Null),
                    ("continuing_subword_prefix", Value::Null),
                    ("end_of_word_suffix", Value::Null),
                    ("fuse_unk", Value::Bool(false)),
                    ("byte_fallback", Value::Bool(false)),
                    ("ignore_merges", Value::Bool(false)),
                ] {
                    let v = m.entry(k).or_insert(default);
                    if v.as_str() == Some("")
                        && matches!(k, "continuing_subword_prefix" | "end_of_word_suffix")
                    {
                        *v = Value::Null;
                    }
                }
            }
        }
        let doc_added: Vec<AddedSpec> = c
            .skeleton
            .get("added_tokens")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| AddedSpec::from_value(t.get("id").and_then(Value::as_u64), t))
                    .collect()
            })
            .unwrap_or_default();
        let once = |content: &str, list: &[AddedSpec]| {
            list.iter().filter(|t| t.content == content).count() == 1
        };
        let api = c.api_added.clone();
        c.api_added.retain(|t| {
            !(once(&t.content, &api)
                && doc_added
                    .iter()
                    .any(|d| d.content == t.content && d.same_token(t)))
        });
        c.add_if_missing.retain(|t| {
            !doc_added.iter().any(|d| d.content == t.content)
                && !api.iter().any(|a| a.content == t.content)
        });
        c.skeleton.insert(
            "added_tokens".into(),
            Value::Array(
                doc_added
                    .iter()
                    .map(|t| {
                        json!([
                            t.id,
                            t.content,
                            t.single_word,
                            t.lstrip,
                            t.rstrip,
                            t.normalized,
                            t.special
                        ])
                    })
                    .collect(),
            ),
        );
        c
    }
}

fn canonical_byte_level(v: &mut Value, all_flags: bool) {
    match v {
        Value::Object(m) => {
            if m.get("type").and_then(Value::as_str) == Some("ByteLevel") {
                m.remove("trim_offsets");
                if all_flags {
                    m.remove("add_prefix_space");
                    m.remove("use_regex");
                }
            }
            for (_, inner) in m.iter_mut() {
                canonical_byte_level(inner, all_flags);
            }
        }
        Value::Array(a) => a
            .iter_mut()
            .for_each(|x| canonical_byte_level(x, all_flags)),
        _ => {}
    }
}

/// A directory's tokenizer files, read once.
pub(crate) struct Sources {
    /// `tokenizer.json`'s path.
    path: PathBuf,
    /// `tokenizer.json` without `model.vocab` / `model.merges`; `None`
    /// when there is no `tokenizer.json`.
    skeleton: Option<Map<String, Value>>,
    /// blake3 of `tokenizer.json`'s bytes, to check a later re-read.
    digest: Option<[u8; 32]>,
    pub(crate) config: TokenizerConfig,
    /// `config.json` is present, and its `model_type`.
    has_model_config: bool,
    model_type: Option<String>,
    /// The legacy `added_tokens.json` is present.
    added_tokens_file: bool,
}

/// `model.vocab` and `model.merges`, taken out of a parsed `tokenizer.json`.
struct VocabParts(Option<Value>, Option<Value>);

/// A parsed `tokenizer.json` without its vocabulary, the file's blake3, and
/// the vocabulary.
type ReadDoc = (Map<String, Value>, [u8; 32], VocabParts);

impl Sources {
    /// Reads the directory; the vocabulary comes back apart for a build.
    fn read(dir: &Path) -> Result<(Self, Option<VocabParts>), LoadError> {
        let config = TokenizerConfig::load(dir)?;
        let model_config = read_json(&dir.join("config.json"))?;
        let model_type = model_config
            .as_ref()
            .and_then(|c| c.get("model_type"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let path = dir.join("tokenizer.json");
        let (skeleton, digest, parts) = match read_tokenizer_json(&path, None)? {
            Some((skeleton, digest, parts)) => (Some(skeleton), Some(digest), Some(parts)),
            None => (None, None, None),
        };
        Ok((
            Sources {
                path,
                skeleton,
                digest,
                config,
                has_model_config: model_config.is_some(),
                model_type,
                added_tokens_file: dir.join("added_tokens.json").is_file(),
            },
            parts,
        ))
    }

    /// The vocabulary again, from a file that must not have changed.
    fn reread_vocab(&self) -> Result<VocabParts, String> {
        match read_tokenizer_json(&self.path, self.digest) {
            Ok(Some((_, _, parts))) => Ok(parts),
            Ok(None) => Err(format!("{}: gone since it was loaded", self.path.display())),
            Err(e) => Err(e.to_string()),
        }
    }

    fn declared(&self) -> generation::Declared<'_> {
        generation::Declared {
            class: self.config.declared_class(),
            has_model_config: self.has_model_config,
            model_type: self.model_type.as_deref(),
            auto_map: self
                .config
                .get("auto_map")
                .and_then(|m| m.get("AutoTokenizer"))
                .is_some_and(|v| !v.is_null()),
        }
    }

    /// What `gen` makes of these files: its plan (`None` without a
    /// `tokenizer.json`) and facts, or why it is not modelled.
    pub(crate) fn plan(&self, gen: Transformers) -> Result<(Option<Plan>, Facts), String> {
        let class = generation::resolve(gen, &self.declared())?;
        match gen {
            Transformers::V4 => v4::plan(self, class),
            Transformers::V5Rc0 => rc0::plan(self, class),
            _ => plan_v5(self, class),
        }
    }
}

/// Reads and parses `tokenizer.json`, splitting the vocabulary off.
/// `Ok(None)` when the file does not exist; with `expect`, the bytes must
/// hash to it.
fn read_tokenizer_json(
    path: &Path,
    expect: Option<[u8; 32]>,
) -> Result<Option<ReadDoc>, LoadError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(LoadError::Io {
                path: path.display().to_string(),
                source: e,
            })
        }
    };
    let invalid = |message: String| LoadError::Invalid {
        path: path.display().to_string(),
        message,
    };
    let digest = *blake3::hash(&bytes).as_bytes();
    if expect.is_some_and(|d| d != digest) {
        return Err(invalid(
            "changed since it was loaded; reload the model".into(),
        ));
    }
    let mut doc = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(invalid("tokenizer.json is not a JSON object".into())),
        Err(e) => return Err(invalid(e.to_string())),
    };
    let parts = match doc.get_mut("model") {
        Some(Value::Object(m)) => VocabParts(m.remove("vocab"), m.remove("merges")),
        _ => VocabParts(None, None),
    };
    Ok(Some((doc, digest, parts)))
}

/// The shareable part of a loaded tokenizer.
#[derive(Clone)]
struct Core {
    inner: Arc<Tokenizer>,
    pipeline: Pipeline,
    bound: BoundRule,
    auto_adds_specials: bool,
    id: u64,
}

impl Core {
    /// Loads the plan's document with the vocabulary, then adds its tokens
    /// and sets its post-processor.
    fn build(plan: &Plan, parts: VocabParts) -> Result<Core, String> {
        let mut doc = plan.skeleton.clone();
        if let Some(Value::Object(m)) = doc.get_mut("model") {
            if let Some(v) = parts.0 {
                m.insert("vocab".into(), v);
            }
            if let Some(v) = parts.1 {
                m.insert("merges".into(), v);
            }
        }
        // transformers disables truncation and padding per call unless asked
        // (`set_truncation_and_padding`), so neither may touch a count here.
        doc.insert("truncation".into(), Value::Null);
        doc.insert("padding".into(), Value::Null);
        let mut inner: Tokenizer = serde_json::from_value(Value::Object(doc))
            .map_err(|e| format!("tokenizers could not load it: {e}"))?;
        if !plan.api_added.is_empty() {
            inner
                .add_tokens(plan.api_added.iter().map(AddedSpec::to_added_token))
                .map_err(|e| format!("adding special tokens failed: {e}"))?;
        }
        let missing: Vec<AddedToken> = plan
            .add_if_missing
            .iter()
            .filter(|t| inner.token_to_id(&t.content).is_none())
            .map(AddedSpec::to_added_token)
            .collect();
        if !missing.is_empty() {
            inner
                .add_tokens(missing)
                .map_err(|e| format!("adding special tokens failed: {e}"))?;
        }
        if let Some(post) = &plan.post {
            set_post_processor(&mut inner, post)?;
        }
        inner.set_encode_special_tokens(plan.encode_special_tokens);
        let auto_adds_specials = inner
            .encode_fast("", true)
            .map(|e| !e.get_ids().is_empty())
            .map_err(|e| e.to_string())?;
        let pipeline = Pipeline::new(&inner)?;
        let bound = BoundRule::derive(&inner);
        Ok(Core {
            inner: Arc::new(inner),
            pipeline,
            bound,
            auto_adds_specials,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    fn view(&self, facts: &Facts, generation: Transformers) -> TextTokenizer {
        TextTokenizer {
            inner: Arc::clone(&self.inner),
            pipeline: self.pipeline,
            bound: self.bound.clone(),
            auto_adds_specials: self.auto_adds_specials,
            id: self.id,
            bos_token_id: facts.bos.as_deref().and_then(|b| self.inner.token_to_id(b)),
            special_tokens: facts.string_tokens(),
            template_variables: facts.template_variables.clone(),
            generation,
        }
    }
}

/// `update_post_processor`: `TemplateProcessing` with the BOS and EOS asked for.
fn set_post_processor(inner: &mut Tokenizer, post: &PostSpec) -> Result<(), String> {
    let (bos, eos) = match post {
        PostSpec::Template { bos, eos } => {
            let id = |t: &Option<String>| -> Result<Option<(String, u32)>, String> {
                match t {
                    None => Ok(None),
                    Some(t) => inner
                        .token_to_id(t)
                        .map(|id| Some((t.clone(), id)))
                        .ok_or_else(|| format!("special token {t:?} is not in the vocabulary")),
                }
            };
            (id(bos)?, id(eos)?)
        }
        PostSpec::BosIfKnown(bos) => (
            bos.as_ref()
                .and_then(|b| inner.token_to_id(b).map(|id| (b.clone(), id))),
            None,
        ),
    };
    let mut single = Vec::new();
    let mut pair = Vec::new();
    let mut special = Map::new();
    let piece = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    for (seq, type_id, out) in [("A", 0u32, &mut single), ("B", 1u32, &mut pair)] {
        if let Some((b, _)) = &bos {
            out.push(piece(b, type_id));
        }
        out.push(json!({"Sequence": {"id": seq, "type_id": type_id}}));
        if let Some((e, _)) = &eos {
            out.push(piece(e, type_id));
        }
    }
    // The pair is `single` followed by the second sequence's own pieces.
    let mut full_pair = single.clone();
    full_pair.extend(pair);
    for (t, id) in bos.iter().chain(eos.iter()) {
        special.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }
    let post = json!({"type": "TemplateProcessing", "single": single, "pair": full_pair,
                      "special_tokens": special});
    let post: tokenizers::processors::PostProcessorWrapper =
        serde_json::from_value(post).map_err(|e| format!("post-processor: {e}"))?;
    inner.with_post_processor(Some(post));
    Ok(())
}

impl TextTokenizer {
    /// Loads `<dir>/tokenizer.json` with `<dir>/tokenizer_config.json` as
    /// SGLang 0.5.22+ does (transformers 5.19). `Ok(None)` when there is no
    /// `tokenizer.json`.
    pub fn load(dir: &Path) -> Result<Option<Self>, LoadError> {
        Self::load_as(dir, Transformers::V5_19)
    }

    /// Loads the directory's tokenizer as the releases of `generation` do.
    /// `Ok(None)` when there is no `tokenizer.json`; an error naming the
    /// reason when that generation's loading is not modelled for these files.
    pub fn load_as(dir: &Path, generation: Transformers) -> Result<Option<Self>, LoadError> {
        let (sources, parts) = Sources::read(dir)?;
        let unmodelled = |message: String| LoadError::Invalid {
            path: sources.path.display().to_string(),
            message: format!("{generation}: {message}"),
        };
        let (plan, facts) = sources.plan(generation).map_err(unmodelled)?;
        let (Some(plan), Some(parts)) = (plan, parts) else {
            return Ok(None);
        };
        let core = Core::build(&plan, parts).map_err(unmodelled)?;
        Ok(Some(core.view(&facts, generation)))
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
            .map(|b| self.upper_bound_of_tally(b, add_special_tokens))
    }

    /// An empty tally to write a text into for [`Self::upper_bound_of`], or
    /// `None` when the tokenizer has no bound.
    pub fn bound_tally(&self) -> Option<BoundTally> {
        self.bound.tally()
    }

    /// [`Self::upper_bound`] of the text written into `tally`.
    pub fn upper_bound_of(&self, tally: &BoundTally, add_special_tokens: bool) -> usize {
        self.upper_bound_of_tally(tally.bound(), add_special_tokens)
    }

    fn upper_bound_of_tally(&self, bound: usize, add_special_tokens: bool) -> usize {
        bound.saturating_add(self.pipeline.additions(add_special_tokens))
    }

    /// Whether long texts are cut between words for parallel counting
    /// (`cuts.rs`), or why not.
    pub fn text_cuts(&self) -> Result<(), String> {
        if !self.pipeline.parallel_safe() {
            return Err("the model is not deterministic (BPE dropout)".into());
        }
        if self.splits_special_tokens() {
            // cuts.rs argues for special tokens matched as added tokens.
            return Err("split_special_tokens: special-token spellings are plain text".into());
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

    /// The generation's named special tokens that are strings
    /// (`special_tokens_map` without `additional_special_tokens`), in its order.
    pub fn special_tokens(&self) -> &[(String, String)] {
        &self.special_tokens
    }

    /// The template variables the generation's `apply_chat_template` spreads
    /// (`{**special_tokens_map, **kwargs}`): under transformers 4 these
    /// include `additional_special_tokens`, a list.
    pub fn template_variables(&self) -> &[(String, Value)] {
        &self.template_variables
    }

    /// Loaded with `split_special_tokens`: special-token spellings count as
    /// plain text.
    pub fn splits_special_tokens(&self) -> bool {
        self.inner
            .get_added_vocabulary()
            .get_encode_special_tokens()
    }
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
fn fix_v5_add_bos_eos_token(config: &TokenizerConfig, bos: Option<String>) -> Option<PostSpec> {
    let add_bos = match config.get("add_bos_token") {
        None | Some(Value::Null) => true,
        Some(v) => py::truthy(v),
    };
    // `update_post_processor`: no BOS token (or none in the vocabulary) →
    // add_bos_token is turned off.
    add_bos.then_some(PostSpec::BosIfKnown(bos))
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

/// Every generation's tokenizer for one directory. Each generation's plan is
/// made at load (so a generation the guard does not model is known then);
/// a pipeline is built once, on first use, and shared by every generation
/// whose plan is the same (one [`TextTokenizer::id`]).
pub struct Generations {
    sources: Sources,
    slots: Vec<(Transformers, Result<Slot, String>)>,
    /// Distinct plans (compared canonically) and their pipelines.
    builds: Vec<(Plan, OnceLock<Result<Core, String>>)>,
}

struct Slot {
    facts: Facts,
    /// Index into `builds`; `None` without a `tokenizer.json`.
    build: Option<usize>,
    view: OnceLock<Result<TextTokenizer, String>>,
}

impl Generations {
    /// Reads the directory and plans every generation; `eager`'s pipeline is
    /// built now, from the document already in memory (its failure is not an
    /// error here: [`Self::get`] reports it).
    pub fn load(dir: &Path, eager: Option<Transformers>) -> Result<Self, LoadError> {
        let (sources, parts) = Sources::read(dir)?;
        let mut builds: Vec<(Plan, OnceLock<Result<Core, String>>)> = Vec::new();
        let mut canon: Vec<Plan> = Vec::new();
        let mut slots = Vec::new();
        for gen in Transformers::ALL {
            let slot = sources.plan(gen).map(|(plan, facts)| {
                let build = plan.map(|plan| {
                    let c = plan.canonical();
                    match canon.iter().position(|p| *p == c) {
                        Some(i) => i,
                        None => {
                            canon.push(c);
                            builds.push((plan, OnceLock::new()));
                            builds.len() - 1
                        }
                    }
                });
                Slot {
                    facts,
                    build,
                    view: OnceLock::new(),
                }
            });
            slots.push((gen, slot));
        }
        let this = Generations {
            sources,
            slots,
            builds,
        };
        if let (Some(gen), Some(parts)) = (eager, parts) {
            if let Some(Ok(Slot { build: Some(i), .. })) = this.slot(gen) {
                let (plan, cell) = &this.builds[*i];
                let _ = cell.set(Core::build(plan, parts));
            }
        }
        Ok(this)
    }

    fn slot(&self, gen: Transformers) -> Option<&Result<Slot, String>> {
        self.slots.iter().find(|(g, _)| *g == gen).map(|(_, s)| s)
    }

    /// The tokenizer `gen`'s releases load; `Ok(None)` without a
    /// `tokenizer.json`; `Err` with the reason when that loading is not
    /// modelled (or the build failed).
    pub fn get(&self, gen: Transformers) -> Result<Option<&TextTokenizer>, String> {
        let slot = self
            .slot(gen)
            .ok_or_else(|| format!("{gen}: not planned"))?
            .as_ref()
            .map_err(|e| format!("{gen}: {e}"))?;
        let Some(i) = slot.build else {
            return Ok(None);
        };
        slot.view
            .get_or_init(|| {
                let (plan, cell) = &self.builds[i];
                let core = cell.get_or_init(|| {
                    let parts = self.sources.reread_vocab()?;
                    Core::build(plan, parts)
                });
                core.as_ref()
                    .map(|c| c.view(&slot.facts, gen))
                    .map_err(|e| format!("{gen}: {e}"))
            })
            .as_ref()
            .map(Some)
            .map_err(Clone::clone)
    }

    /// The variables `gen`'s `apply_chat_template` spreads from
    /// `special_tokens_map` (known without a `tokenizer.json` too).
    pub fn template_variables(&self, gen: Transformers) -> Result<&[(String, Value)], String> {
        match self.slot(gen) {
            Some(Ok(slot)) => Ok(&slot.facts.template_variables),
            Some(Err(e)) => Err(format!("{gen}: {e}")),
            None => Err(format!("{gen}: not planned")),
        }
    }

    /// The generations that load one pipeline, for each distinct pipeline
    /// (refused generations left out).
    pub fn sharing(&self) -> Vec<Vec<Transformers>> {
        let mut out: Vec<Vec<Transformers>> = vec![Vec::new(); self.builds.len()];
        for (gen, slot) in &self.slots {
            if let Ok(Slot { build: Some(i), .. }) = slot {
                out[*i].push(*gen);
            }
        }
        out
    }

    /// `tokenizer.json`'s path.
    pub fn path(&self) -> &Path {
        &self.sources.path
    }

    /// The directory has a `tokenizer.json`.
    pub fn has_tokenizer_json(&self) -> bool {
        self.sources.skeleton.is_some()
    }
}

/// transformers 5.3+ with SGLang's v5 fixes (`TokenizersBackend.convert_to_native_format`,
/// the class `__init__`, `_fix_v5_tokenizer_components`, `_fix_v5_add_bos_eos_token`).
fn plan_v5(src: &Sources, class: TokenizerClass) -> Result<(Option<Plan>, Facts), String> {
    let config = &src.config;
    let special_tokens = config.special_tokens_map(class);
    let bos = special_tokens
        .iter()
        .find(|(k, _)| k == "bos_token")
        .map(|(_, v)| v.clone());
    let facts = Facts {
        template_variables: special_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
        bos: bos.clone(),
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
    let (base_added, mut to_add) = convert_to_native_format(&mut doc, config, class)?;
    add_missing_special_tokens(&mut to_add, &base_added, &special_tokens, config);
    let api_added = write_added_tokens(&mut doc, base_added, to_add);
    let post = if generation::restores_bos_flag(config.declared_class()) {
        fix_v5_add_bos_eos_token(config, bos)
    } else {
        None
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
