//! A cheap upper bound on a text's token count, derived per tokenizer from
//! the pipeline it actually loaded, or no bound at all.
//!
//! The fast path accepts a prompt without tokenizing when `bound < limit`; so
//! the bound must never be below the exact count. It is derived at load time
//! from the loaded normalizer, pre-tokenizer and model (after the
//! transformers-class rebuild of `tokenizer.rs`), and only for shapes whose
//! argument is written down here; anything else gets no bound and is always
//! counted exactly.
//!
//! # The argument
//!
//! `encode` (see `fast.rs`) splits the text around added tokens, normalizes
//! each remaining segment, pre-tokenizes, runs the model on each split and
//! lets the post-processor add a fixed number of tokens `P` (measured at load).
//!
//! 1. **Added tokens.** Each match of an added token becomes exactly one token
//!    and covers at least one byte of the text (contents are non-empty).
//!    `lstrip`/`rstrip` only remove whitespace from the neighbours.
//! 2. **Model.** Let the model input be the split's string.
//!    * BPE starts with one symbol per character (an unknown character becomes
//!      one `unk` symbol or is dropped) and merges only reduce symbols; with
//!      `ignore_merges` a whole-word hit is one token. With `byte_fallback`,
//!      a character missing from the vocabulary becomes one token per byte of
//!      the symbol string, which is the character alone when there is no
//!      `continuing_subword_prefix` / `end_of_word_suffix` (required here).
//!      Either way: tokens ≤ UTF-8 bytes of the model input. Dropout only
//!      skips merges, so it keeps this.
//!    * WordLevel: one token per split, and splits are non-empty.
//! 3. **Pre-tokenizers.** `Split`, `Digits`, `Punctuation`, `Whitespace`,
//!    `WhitespaceSplit` partition a segment (or drop parts of it): no bytes
//!    added. `ByteLevel` without `add_prefix_space` maps each byte to one
//!    character, so with a BPE *without* byte fallback each byte of its input
//!    is at most one token (with byte fallback one of those 2-byte characters
//!    could become two tokens: no bound). `Metaspace` replaces each space
//!    (1 byte) with its replacement `R` and, with `prepend_scheme = first`,
//!    prepends `R` only to the split starting at offset 0 of the text: at most
//!    once. `prepend_scheme = always` prepends to every segment between added
//!    tokens, a number the bound does not know: no bound.
//! 4. **Normalizers.** None (or an empty `Sequence`): bytes unchanged.
//!    `Replace` of the single-space string with `C`: each space grows by
//!    `len(C) - 1` bytes. `NFC`: it can expand (composition exclusions such as
//!    U+0958 → U+0915 U+093C, 3 → 6 bytes; U+1D160 → three code points). The
//!    bound used is `ascii + 3 × non-ascii bytes`: `NFC(s)` is the canonical
//!    composition of `NFD(s)` and every character composition produces has
//!    no more UTF-8 bytes than its canonical decomposition (checked for every
//!    code point against the tokenizers normalizer in the tests), so
//!    `bytes(NFC(s)) ≤ bytes(NFD(s)) = Σ bytes(NFD(c))`; ASCII characters
//!    decompose to themselves and every other character to at most 3× its
//!    bytes (checked for every code point; UAX #15 §9 gives the same ×3
//!    factor). `Prepend` (once per normalized segment, a number not known
//!    without matching added tokens), NFKC/NFKD (×11: U+FDFA), `Lowercase`
//!    (İ → i̇ grows), `Precompiled` and anything else: no bound.
//!
//! Hence, for the shapes accepted: `L ≤ base + g × spaces + once + P` where
//! `base` is the text's bytes (or `ascii + 3 × non-ascii` under NFC), `g` the
//! per-space growth, `once` the Metaspace first-prepend bytes. The bound is
//! on the text given to the tokenizer: the chat template's specials are in
//! the rendered text already (point 1).

use serde_json::Value;
use tokenizers::Tokenizer;

/// How a tokenizer's upper bound is computed, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundRule {
    /// No sound bound for this pipeline: always count exactly.
    None(String),
    Bytes {
        /// NFC normalizer: non-ASCII bytes count three times.
        nfc: bool,
        /// Bytes each space grows by (`Replace(" ", C)`, Metaspace).
        space_growth: usize,
        /// Bytes prepended at most once (Metaspace `first`).
        once: usize,
    },
}

impl BoundRule {
    /// Derives the rule from the loaded pipeline.
    pub fn derive(tokenizer: &Tokenizer) -> BoundRule {
        match derive(tokenizer) {
            Ok(rule) => rule,
            Err(why) => BoundRule::None(why),
        }
    }

    pub fn has_bound(&self) -> bool {
        matches!(self, BoundRule::Bytes { .. })
    }

    /// An upper bound on the model and added tokens of `text` (the
    /// post-processor's are not included), or `None` without a rule.
    pub fn bound(&self, text: &str) -> Option<usize> {
        let mut tally = self.tally()?;
        tally.add(text.as_bytes());
        Some(tally.bound())
    }

    /// An empty [`BoundTally`] under this rule, or `None` without one.
    pub fn tally(&self) -> Option<BoundTally> {
        match *self {
            BoundRule::None(_) => None,
            BoundRule::Bytes {
                nfc,
                space_growth,
                once,
            } => Some(BoundTally {
                nfc,
                space_growth,
                once,
                bytes: 0,
                non_ascii: 0,
                spaces: 0,
            }),
        }
    }
}

/// What the bound counts of a text, added up as the text is written: a
/// chat template renders into it (it is an `io::Write`), so that the bound
/// pass counts the prompt's bytes as they go by instead of building the
/// prompt, growing its buffer by doubling and reading it again. The one
/// place the bound is computed: [`BoundRule::bound`] is the tally of one text.
#[derive(Debug, Clone)]
pub struct BoundTally {
    nfc: bool,
    space_growth: usize,
    once: usize,
    bytes: usize,
    non_ascii: usize,
    spaces: usize,
}

impl BoundTally {
    pub fn add(&mut self, text: &[u8]) {
        self.bytes = self.bytes.saturating_add(text.len());
        if self.nfc {
            self.non_ascii = self
                .non_ascii
                .saturating_add(count_bytes(text, |b| b >= 0x80));
        }
        if self.space_growth > 0 {
            self.spaces = self.spaces.saturating_add(count_bytes(text, |b| b == b' '));
        }
    }

    /// The bound of everything added so far: its bytes, non-ASCII bytes
    /// three times under NFC, each space grown, and the once-prepended bytes.
    pub fn bound(&self) -> usize {
        let mut base = self.bytes;
        if self.nfc {
            base = base.saturating_add(self.non_ascii.saturating_mul(2));
        }
        if self.space_growth > 0 {
            base = base.saturating_add(self.spaces.saturating_mul(self.space_growth));
        }
        base.saturating_add(self.once)
    }
}

impl std::io::Write for BoundTally {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.add(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lanes [`count_bytes`] counts in: four SSE2 vectors, added independently.
/// With 32 the compiler left the space count (`b == b' '`, gemma-3 and
/// phi-3's bound) a byte at a time: 23 µs over a 100 kB prompt, against
/// 0.9 µs in 64 lanes; the non-ASCII count went from 1.72 to 1.17 µs
/// (criterion `guard_upper_bound`). Held by that row for every fixture.
const LANES: usize = 64;

/// Bytes of `text` for which `one` holds. The bound is taken on every chat
/// the fast path admits, so this runs over every byte of everyday traffic:
/// it counts in [`LANES`] byte-sized lanes, which the compiler adds as whole
/// vectors with no wait on each other, over blocks of 255 rounds (a lane
/// cannot overflow in one). One running count per block of 255 bytes took
/// 2.8 µs over a 139 kB prompt.
fn count_bytes(text: &[u8], one: impl Fn(u8) -> bool) -> usize {
    let mut total = 0;
    for block in text.chunks(255 * LANES) {
        let mut lanes = [0u8; LANES];
        let mut chunks = block.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (n, &b) in lanes.iter_mut().zip(chunk) {
                *n += u8::from(one(b));
            }
        }
        total += lanes.iter().map(|&n| usize::from(n)).sum::<usize>();
        total += chunks.remainder().iter().filter(|&&b| one(b)).count();
    }
    total
}

#[derive(Default)]
struct Shape {
    nfc: bool,
    space_growth: usize,
    once: usize,
    byte_level: bool,
}

fn json_of<T: serde::Serialize>(v: &T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| format!("cannot inspect the pipeline: {e}"))
}

fn kind(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("?")
}

fn derive(tokenizer: &Tokenizer) -> Result<BoundRule, String> {
    let mut shape = Shape::default();
    if let Some(n) = tokenizer.get_normalizer() {
        normalizer(&json_of(n)?, &mut shape)?;
    }
    if let Some(p) = tokenizer.get_pre_tokenizer() {
        pre_tokenizer(&json_of(p)?, &mut shape)?;
    }
    model(&json_of(tokenizer.get_model())?, &shape)?;
    Ok(BoundRule::Bytes {
        nfc: shape.nfc,
        space_growth: shape.space_growth,
        once: shape.once,
    })
}

fn normalizer(v: &Value, shape: &mut Shape) -> Result<(), String> {
    match kind(v) {
        "Sequence" => {
            let list = v.get("normalizers").and_then(Value::as_array);
            match list.map(Vec::as_slice) {
                Some([]) => Ok(()),
                Some([one]) => normalizer(one, shape),
                _ => Err("a sequence of several normalizers".into()),
            }
        }
        "NFC" => {
            shape.nfc = true;
            Ok(())
        }
        "Replace" => {
            let pattern = v.pointer("/pattern/String").and_then(Value::as_str);
            let content = v.get("content").and_then(Value::as_str);
            match (pattern, content) {
                (Some(" "), Some(c)) => {
                    shape.space_growth += c.len().saturating_sub(1);
                    Ok(())
                }
                _ => Err("a Replace normalizer other than of a single space".into()),
            }
        }
        other => Err(format!("normalizer {other} can expand text")),
    }
}

fn pre_tokenizer(v: &Value, shape: &mut Shape) -> Result<(), String> {
    match kind(v) {
        "Sequence" => {
            for p in v
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or("a pre-tokenizer sequence without a list")?
            {
                pre_tokenizer(p, shape)?;
            }
            Ok(())
        }
        "Split" | "Digits" | "Punctuation" | "Whitespace" | "WhitespaceSplit" => Ok(()),
        "ByteLevel" => {
            if v.get("add_prefix_space").and_then(Value::as_bool) != Some(false) {
                return Err("ByteLevel with add_prefix_space prefixes every split".into());
            }
            if shape.space_growth > 0 || shape.once > 0 {
                return Err("ByteLevel after a space-replacing step".into());
            }
            shape.byte_level = true;
            Ok(())
        }
        "Metaspace" => {
            if shape.byte_level {
                return Err("Metaspace after ByteLevel".into());
            }
            let r = v
                .get("replacement")
                .and_then(Value::as_str)
                .ok_or("Metaspace without a replacement")?;
            shape.space_growth += r.len().saturating_sub(1);
            match v.get("prepend_scheme").and_then(Value::as_str) {
                Some("first") => shape.once += r.len(),
                Some("never") => {}
                _ => return Err("Metaspace prepending to every segment".into()),
            }
            Ok(())
        }
        other => Err(format!(
            "pre-tokenizer {other} is not modelled by the bound"
        )),
    }
}

fn model(v: &Value, shape: &Shape) -> Result<(), String> {
    match kind(v) {
        "BPE" => {
            let byte_fallback = v.get("byte_fallback").and_then(Value::as_bool) == Some(true);
            if !byte_fallback {
                return Ok(());
            }
            if shape.byte_level {
                return Err("byte fallback on ByteLevel characters (2 bytes each)".into());
            }
            let empty = |k: &str| v.get(k).and_then(Value::as_str).is_none_or(str::is_empty);
            if !empty("continuing_subword_prefix") || !empty("end_of_word_suffix") {
                return Err("byte fallback with a subword prefix or suffix".into());
            }
            Ok(())
        }
        "WordLevel" => Ok(()),
        other => Err(format!("model {other} is not modelled by the bound")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The block-wise counts are the byte-at-a-time counts, whatever
        /// the bytes and wherever a block ends.
        #[test]
        fn block_counts_are_byte_counts(
            text in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b' '),
                    proptest::strategy::Just(0x20 ^ 0x80),
                    proptest::strategy::Just(0x1f),
                    proptest::strategy::Just(0x21),
                    proptest::strategy::Just(0x7f),
                    proptest::strategy::Just(0x80),
                    proptest::num::u8::ANY,
                ],
                0..600,
            )
        ) {
            for skip in 0..text.len().min(8) {
                let t = &text[skip..];
                let spaces = t.iter().filter(|&&b| b == b' ').count();
                let high = t.iter().filter(|&&b| b >= 0x80).count();
                proptest::prop_assert_eq!(count_bytes(t, |b| b == b' '), spaces);
                proptest::prop_assert_eq!(count_bytes(t, |b| b >= 0x80), high);
            }
        }
    }

    /// Every byte counted: each lane reaches 255 in a block and no more,
    /// whatever length the text has around a block's end.
    #[test]
    fn lanes_do_not_overflow() {
        let block = 255 * LANES;
        for len in [
            0,
            1,
            LANES - 1,
            LANES,
            LANES + 1,
            block - 1,
            block,
            block + 1,
            2 * block + LANES - 1,
            100_003,
        ] {
            let text = vec![0x80u8; len];
            assert_eq!(count_bytes(&text, |b| b >= 0x80), len, "{len}");
            assert_eq!(count_bytes(&text, |b| b == b' '), 0, "{len}");
        }
    }
}
