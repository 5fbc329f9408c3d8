//! Loading `tokenizer.json` the way SGLang 0.5.23 (transformers 5.19) loads it,
//! and encoding with its rules.

/// A tokenizer as SGLang loads it.
pub struct TextTokenizer {
    pub(crate) inner: tokenizers::Tokenizer,
}
