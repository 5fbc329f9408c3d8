//! The ways SGLang's releases load a tokenizer, and the class each one ends
//! up with (`AutoTokenizer.from_pretrained` plus SGLang's own retries).
//!
//! Every SGLang release pins one transformers version and calls its own
//! `get_tokenizer`. Releases whose pair loads every tokenizer class the guard
//! models identically are one [`Transformers`] generation; the proof is
//! `testdata/gen_tokenizer_generations.py`, which loads every fixture with
//! the get_tokenizer of one or two releases per pinned transformers version
//! and fails unless all releases of a generation agree.

use super::auto_classes;
use super::TokenizerClass;

/// How a release loads a tokenizer: the transformers generation it pins,
/// with SGLang's post-load handling of that release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transformers {
    /// transformers 4.51.0–4.57.1, no SGLang fixes: SGLang 0.4.5–0.5.6 and
    /// 0.5.6.post2–0.5.9. `tokenizer.json` whole; the Llama/Gemma `Fast`
    /// classes rebuild the post-processor from `add_bos_token`/`add_eos_token`.
    V4,
    /// transformers 5.0.0rc0 without SGLang's v5 fixes: SGLang 0.5.6.post1.
    /// `tokenizer.json` whole, then the class's `_post_init`.
    V5Rc0,
    /// transformers 5.3.0 with SGLang's v5 fixes; a generic
    /// `TokenizersBackend` result is kept: SGLang 0.5.10–0.5.10.post1.
    V5_3,
    /// transformers 5.6.0; a generic result is reloaded as the declared
    /// class: SGLang 0.5.11–0.5.12.post1.
    V5_6,
    /// transformers 5.8.1 and 5.12.1 (a `qwen2` model type always loads
    /// `Qwen2Tokenizer`): SGLang 0.5.13–0.5.21.
    V5_8,
    /// transformers 5.19.0: SGLang 0.5.22 and later.
    V5_19,
}

impl Transformers {
    /// Every generation, oldest first.
    pub const ALL: [Transformers; 6] = [
        Transformers::V4,
        Transformers::V5Rc0,
        Transformers::V5_3,
        Transformers::V5_6,
        Transformers::V5_8,
        Transformers::V5_19,
    ];

    /// The generation of SGLang `major.minor.patch` with `.postN` (`post`
    /// 0 without one), or `None` before 0.4.5 (not modelled).
    pub fn of_sglang(version: (u32, u32, u32), post: u32) -> Option<Transformers> {
        Some(match version {
            v if v < (0, 4, 5) => return None,
            (0, 5, 6) if post == 1 => Transformers::V5Rc0,
            v if v < (0, 5, 10) => Transformers::V4,
            v if v < (0, 5, 11) => Transformers::V5_3,
            v if v < (0, 5, 13) => Transformers::V5_6,
            v if v < (0, 5, 22) => Transformers::V5_8,
            _ => Transformers::V5_19,
        })
    }

    /// The variant's name (`"V5_3"`), as the expected-ids file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Transformers::V4 => "V4",
            Transformers::V5Rc0 => "V5Rc0",
            Transformers::V5_3 => "V5_3",
            Transformers::V5_6 => "V5_6",
            Transformers::V5_8 => "V5_8",
            Transformers::V5_19 => "V5_19",
        }
    }

    pub fn from_name(name: &str) -> Option<Transformers> {
        Transformers::ALL.into_iter().find(|g| g.name() == name)
    }

    /// The SGLang releases of this generation, for messages.
    pub fn sglang_releases(self) -> &'static str {
        match self {
            Transformers::V4 => "SGLang 0.4.5-0.5.6, 0.5.6.post2-0.5.9 (transformers 4.51-4.57)",
            Transformers::V5Rc0 => "SGLang 0.5.6.post1 (transformers 5.0.0rc0)",
            Transformers::V5_3 => "SGLang 0.5.10 (transformers 5.3.0)",
            Transformers::V5_6 => "SGLang 0.5.11-0.5.12.post1 (transformers 5.6.0)",
            Transformers::V5_8 => "SGLang 0.5.13-0.5.21 (transformers 5.8.1/5.12.1)",
            Transformers::V5_19 => "SGLang 0.5.22+ (transformers 5.19.0)",
        }
    }

    /// The `AutoTokenizer` tables of the transformers versions this
    /// generation pins (5.x only); all must give the same class.
    fn auto_tables(self) -> &'static [AutoTable] {
        const V5_3: &[AutoTable] = &[(auto_classes::V5_3_0, auto_classes::UNVERIFIED_V5_3_0)];
        const V5_6: &[AutoTable] = &[(auto_classes::V5_6_0, auto_classes::UNVERIFIED_V5_6_0)];
        const V5_8: &[AutoTable] = &[
            (auto_classes::V5_8_1, auto_classes::UNVERIFIED_V5_8_1),
            (auto_classes::V5_12_1, auto_classes::UNVERIFIED_V5_12_1),
        ];
        const V5_19: &[AutoTable] = &[(auto_classes::V5_19_0, auto_classes::UNVERIFIED_V5_19_0)];
        match self {
            Transformers::V4 | Transformers::V5Rc0 => &[],
            Transformers::V5_3 => V5_3,
            Transformers::V5_6 => V5_6,
            Transformers::V5_8 => V5_8,
            Transformers::V5_19 => V5_19,
        }
    }
}

impl std::fmt::Display for Transformers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.sglang_releases())
    }
}

type AutoTable = (auto_classes::Table, &'static [&'static str]);

/// What the class a generation loads is decided by.
pub(super) struct Declared<'a> {
    /// `tokenizer_config.json`'s `tokenizer_class`.
    pub class: Option<&'a str>,
    /// `config.json` is present (then `model_type` is what it says).
    pub has_model_config: bool,
    pub model_type: Option<&'a str>,
    /// `tokenizer_config.json` names remote code (`auto_map.AutoTokenizer`).
    pub auto_map: bool,
}

/// The group a declared class name belongs to in the `AutoTokenizer` tables
/// (a class and its `Fast` alias resolve alike; checked by the generator).
fn group(declared: &str) -> Option<&'static str> {
    Some(match declared {
        "PreTrainedTokenizerFast" | "TokenizersBackend" => "PreTrainedTokenizerFast",
        "PreTrainedTokenizer" => "PreTrainedTokenizer",
        "LlamaTokenizer" | "LlamaTokenizerFast" => "LlamaTokenizer",
        "CodeLlamaTokenizer" | "CodeLlamaTokenizerFast" => "CodeLlamaTokenizer",
        "GemmaTokenizer" | "GemmaTokenizerFast" => "GemmaTokenizer",
        "Qwen2Tokenizer" | "Qwen2TokenizerFast" => "Qwen2Tokenizer",
        _ => return None,
    })
}

/// The class transformers 5 loads for a class name it returned.
fn v5_class(name: &str) -> Option<TokenizerClass> {
    Some(match name {
        "TokenizersBackend" | "PreTrainedTokenizerFast" => TokenizerClass::Backend,
        "LlamaTokenizer" | "CodeLlamaTokenizer" => TokenizerClass::Llama,
        "GemmaTokenizer" => TokenizerClass::Gemma,
        "Qwen2Tokenizer" => TokenizerClass::Qwen2,
        _ => return None,
    })
}

/// The class `gen` ends up with, or why the guard does not model it.
pub(super) fn resolve(gen: Transformers, d: &Declared<'_>) -> Result<TokenizerClass, String> {
    let Some(declared) = d.class else {
        if d.has_model_config || matches!(gen, Transformers::V4 | Transformers::V5Rc0) {
            return Err("tokenizer_config.json names no tokenizer_class: transformers would pick the class \
                        from config.json's model_type (or fail), which prefill-guard does not model"
                .into());
        }
        // transformers 5 without config.json: TokenizersBackend.
        return Ok(TokenizerClass::Backend);
    };
    let unmodelled =
        || format!("tokenizer_class {declared:?}: not a class prefill-guard models for {gen}");
    match gen {
        Transformers::V4 => match group(declared).ok_or_else(unmodelled)? {
            // transformers 4 has no TokenizersBackend: the load fails.
            _ if declared == "TokenizersBackend" => Err(unmodelled()),
            "PreTrainedTokenizerFast" | "PreTrainedTokenizer" => Ok(TokenizerClass::Backend),
            "LlamaTokenizer" => Ok(TokenizerClass::Llama),
            "GemmaTokenizer" => Ok(TokenizerClass::Gemma),
            "Qwen2Tokenizer" => Ok(TokenizerClass::Qwen2),
            // CodeLlamaTokenizerFast adds its infilling tokens: not modelled.
            _ => Err(unmodelled()),
        },
        Transformers::V5Rc0 => match group(declared).ok_or_else(unmodelled)? {
            "PreTrainedTokenizerFast" => Ok(TokenizerClass::Backend),
            "LlamaTokenizer" => Ok(TokenizerClass::Llama),
            "GemmaTokenizer" => Ok(TokenizerClass::Gemma),
            "Qwen2Tokenizer" => Ok(TokenizerClass::Qwen2),
            _ => Err(unmodelled()),
        },
        _ => resolve_v5(gen, d, declared),
    }
}

/// transformers 5.3+: `AutoTokenizer` by the recorded tables, then SGLang's
/// handling of a generic `TokenizersBackend` result (0.5.10: reloaded with
/// `trust_remote_code=True`, kept; 0.5.11+: `_resolve_tokenizers_backend`,
/// a `use_fast=False` retry and then the declared class).
fn resolve_v5(
    gen: Transformers,
    d: &Declared<'_>,
    declared: &str,
) -> Result<TokenizerClass, String> {
    let group = group(declared).ok_or_else(|| {
        format!("tokenizer_class {declared:?}: not a class prefill-guard models for {gen}")
    })?;
    let model_type = match (d.has_model_config, d.model_type) {
        (false, _) => "",
        (true, Some(t)) => t,
        (true, None) => {
            return Err(
                "config.json names no model_type: transformers' choice of tokenizer class \
                        is then not modelled"
                    .into(),
            )
        }
    };
    let mut result: Option<TokenizerClass> = None;
    for (table, unverified) in gen.auto_tables() {
        if unverified.contains(&model_type) {
            return Err(format!(
                "model_type {model_type:?}: {gen} picks the tokenizer class by it in a way not recorded"
            ));
        }
        let column = auto_classes::GROUPS
            .iter()
            .position(|g| *g == group)
            .expect("every group has a column");
        let cell = table
            .iter()
            .find(|(t, _)| *t == model_type)
            .map_or("", |(_, row)| row[column]);
        let default = if matches!(group, "PreTrainedTokenizerFast" | "PreTrainedTokenizer") {
            "TokenizersBackend"
        } else {
            group
        };
        let (fast, slow) = match cell {
            "" => (default, default),
            c => c.split_once('|').unwrap_or((c, c)),
        };
        let failed = |r: &str| {
            format!("transformers fails to load tokenizer_class {declared:?} for model_type {model_type:?} ({r})")
        };
        let name = if fast.starts_with('!') {
            return Err(failed(fast));
        } else if fast != "TokenizersBackend" {
            fast
        } else if gen == Transformers::V5_3 {
            if d.auto_map {
                return Err("SGLang 0.5.10 reloads a generic TokenizersBackend with trust_remote_code=True, \
                            running the checkpoint's own tokenizer code (auto_map), which the guard does not"
                    .into());
            }
            fast
        } else if slow.starts_with('!') {
            return Err(failed(slow));
        } else if slow != "TokenizersBackend" {
            slow
        } else if group == "PreTrainedTokenizer" {
            // `_load_tokenizer_by_declared_class` skips the base class names.
            "TokenizersBackend"
        } else {
            default
        };
        let class = v5_class(name).ok_or_else(|| {
            format!("{gen} loads {name} for model_type {model_type:?}: a class prefill-guard does not model")
        })?;
        match result {
            Some(c) if c != class => {
                return Err(format!(
                    "model_type {model_type:?}: the transformers versions of {gen} load different classes"
                ))
            }
            _ => result = Some(class),
        }
    }
    result.ok_or_else(|| format!("{gen}: no AutoTokenizer table"))
}

/// `_fix_v5_add_bos_eos_token`'s `_V4_CLASSES_WITH_BOS_EOS_FLAGS`, by the
/// declared name (not the class loaded).
pub(super) fn restores_bos_flag(declared: Option<&str>) -> bool {
    matches!(
        declared,
        Some(
            "LlamaTokenizer"
                | "LlamaTokenizerFast"
                | "CodeLlamaTokenizer"
                | "CodeLlamaTokenizerFast"
                | "GemmaTokenizer"
                | "GemmaTokenizerFast"
                | "CohereTokenizerFast"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_map_to_their_transformers_pin() {
        let of = |v, p| Transformers::of_sglang(v, p);
        assert_eq!(of((0, 4, 4), 0), None);
        assert_eq!(of((0, 4, 5), 0), Some(Transformers::V4));
        assert_eq!(of((0, 5, 6), 0), Some(Transformers::V4));
        assert_eq!(of((0, 5, 6), 1), Some(Transformers::V5Rc0));
        assert_eq!(of((0, 5, 6), 2), Some(Transformers::V4));
        assert_eq!(of((0, 5, 9), 0), Some(Transformers::V4));
        assert_eq!(of((0, 5, 10), 1), Some(Transformers::V5_3));
        assert_eq!(of((0, 5, 11), 0), Some(Transformers::V5_6));
        assert_eq!(of((0, 5, 12), 1), Some(Transformers::V5_6));
        assert_eq!(of((0, 5, 13), 0), Some(Transformers::V5_8));
        assert_eq!(of((0, 5, 21), 0), Some(Transformers::V5_8));
        assert_eq!(of((0, 5, 22), 0), Some(Transformers::V5_19));
        assert_eq!(of((0, 6, 0), 0), Some(Transformers::V5_19));
        for g in Transformers::ALL {
            assert_eq!(Transformers::from_name(g.name()), Some(g));
        }
    }

    fn resolved(
        gen: Transformers,
        class: &str,
        model_type: Option<&str>,
    ) -> Result<TokenizerClass, String> {
        resolve(
            gen,
            &Declared {
                class: Some(class),
                has_model_config: model_type.is_some(),
                model_type,
                auto_map: false,
            },
        )
    }

    /// Rows of the recorded tables (gen_auto_classes.py): a Qwen2 model
    /// type declared as Llama loads Llama on 5.6 but Qwen2 from 5.8; Phi-3
    /// stays the generic backend on 5.3 and is resolved back to Llama on 5.6+.
    #[test]
    fn model_type_overrides_follow_the_recorded_tables() {
        use TokenizerClass::*;
        use Transformers::*;
        assert_eq!(
            resolved(V5_6, "LlamaTokenizerFast", Some("qwen2")),
            Ok(Llama)
        );
        assert_eq!(
            resolved(V5_8, "LlamaTokenizerFast", Some("qwen2")),
            Ok(Qwen2)
        );
        assert_eq!(
            resolved(V5_19, "PreTrainedTokenizerFast", Some("qwen2")),
            Ok(Qwen2)
        );
        assert_eq!(resolved(V5_3, "LlamaTokenizer", Some("phi3")), Ok(Backend));
        assert_eq!(resolved(V5_6, "LlamaTokenizer", Some("phi3")), Ok(Llama));
        assert_eq!(
            resolved(V5_19, "LlamaTokenizerFast", Some("deepseek_v3")),
            Ok(Llama)
        );
        assert_eq!(resolved(V4, "LlamaTokenizerFast", Some("qwen2")), Ok(Llama));
        assert!(resolved(V4, "TokenizersBackend", None).is_err());
        assert!(resolved(V5_19, "Qwen2Tokenizer", Some("qwen3_5")).is_err());
        assert_eq!(resolved(V5_8, "Qwen2Tokenizer", Some("qwen3_5")), Ok(Qwen2));
    }
}
