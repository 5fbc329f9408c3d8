//! Where a text may be cut so that its halves tokenize exactly as the whole,
//! which lets normalization and pre-tokenization run in parallel too.
//!
//! The cut is made at a space with an ASCII letter on both sides (`x|␠y`,
//! the cut before the space), and only for tokenizers whose pipeline is
//! checked at load time to be one of the shapes argued here:
//!
//! * **Added tokens**: no added token contains a space or has `lstrip`,
//!   `rstrip` or `single_word`. A match then cannot contain the space at the
//!   cut, so every match lies wholly in one half; leftmost-longest matching
//!   picks among the same candidates in each half as in the whole.
//! * **Normalizer**: none or NFC. No canonical composition or reordering
//!   involves an ASCII space, and the ASCII letter before it could only
//!   compose with a combining mark after it: NFC leaves the three characters
//!   as they are and `NFC(a␠b) = NFC(a) + ␠ + NFC(b)` at this cut.
//! * **Pre-tokenizer**: a sequence of `Split` (Isolated, not inverted) whose
//!   regex is one of [`CUT_SAFE_REGEXES`], then `ByteLevel` without its own
//!   regex and without `add_prefix_space` (a per-split byte mapping).
//!   Each listed regex (the Qwen2, Llama 3, o200k/gpt-oss, Mistral Tekken and
//!   DeepSeek-V3 patterns) has these properties, read off the patterns:
//!   (1) no alternative can match an ASCII letter followed by a space (letter
//!   runs continue only with letters, marks or an apostrophe contraction;
//!   whitespace runs contain no letters; the ` ?`-prefixed punctuation
//!   alternatives contain no letters), so no match contains both sides of the
//!   cut and the cut is a split boundary of the whole text; (2) there is no
//!   anchor, word boundary, look-behind or back-reference, so matching after
//!   the cut depends only on the text after it; (3) the only look-around is
//!   `(?!\S)`, which answers the same at the end of the left half as before
//!   the space it replaces, and every consuming item that would read the
//!   space fails at the end of the left half as it fails (or leads to a
//!   match past the cut, which is not the chosen one) in the whole text, so
//!   matching before the cut is unchanged. A later `Split` in the sequence
//!   sees the cut inside one of its pieces and the same argument applies.
//! * **Model**: runs on each split on its own, whatever the chunk.
//!
//! The property tests (`crates/count/tests/count/counting_equivalence.rs`) check the result
//! against `encode` on every fixture, with cuts forced into short texts.

use serde_json::Value;
use tokenizers::Tokenizer;

/// Split regexes argued above, exactly as they appear in the loaded pipeline.
pub const CUT_SAFE_REGEXES: &[&str] = &[
    // Qwen2Tokenizer's own (also Qwen3's).
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // Llama 3.
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // o200k (gpt-oss).
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // Mistral Tekken.
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // DeepSeek-V3's three.
    r"\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];

/// Whether `tokenizer`'s pipeline is one of the shapes the cut is argued for;
/// `Err` says which part is not.
pub fn cut_safe(tokenizer: &Tokenizer) -> Result<(), String> {
    for t in tokenizer.get_added_tokens_decoder().values() {
        if t.lstrip || t.rstrip || t.single_word || t.content.contains(' ') {
            return Err(format!(
                "added token {:?} strips, is single-word or holds a space",
                t.content
            ));
        }
    }
    let json = |v: Option<Value>| v.unwrap_or(Value::Null);
    let normalizer = json(
        tokenizer
            .get_normalizer()
            .and_then(|n| serde_json::to_value(n).ok()),
    );
    let kind = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_owned);
    match kind(&normalizer).as_deref() {
        None | Some("NFC") => {}
        Some("Sequence")
            if normalizer
                .get("normalizers")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty) => {}
        Some(other) => return Err(format!("normalizer {other}")),
    }
    let pre = json(
        tokenizer
            .get_pre_tokenizer()
            .and_then(|p| serde_json::to_value(p).ok()),
    );
    let steps: Vec<Value> = match kind(&pre).as_deref() {
        Some("Sequence") => pre
            .get("pretokenizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => vec![pre],
    };
    let Some((last, splits)) = steps.split_last() else {
        return Err("no pre-tokenizer".into());
    };
    let byte_level = kind(last).as_deref() == Some("ByteLevel")
        && last.get("add_prefix_space").and_then(Value::as_bool) == Some(false)
        && last.get("use_regex").and_then(Value::as_bool) == Some(false);
    if !byte_level {
        return Err("the pre-tokenizer does not end in a plain ByteLevel".into());
    }
    if splits.is_empty() {
        return Err("no Split before ByteLevel".into());
    }
    for s in splits {
        let regex = s.pointer("/pattern/Regex").and_then(Value::as_str);
        let ok = kind(s).as_deref() == Some("Split")
            && s.get("behavior").and_then(Value::as_str) == Some("Isolated")
            && s.get("invert").and_then(Value::as_bool) == Some(false)
            && regex.is_some_and(|r| CUT_SAFE_REGEXES.contains(&r));
        if !ok {
            return Err("a pre-tokenizer step whose cuts are not argued".into());
        }
    }
    Ok(())
}

/// Up to `parts - 1` cut positions, each the byte index of a space with an
/// ASCII letter on both sides, searched from evenly spaced targets (at most
/// `window` bytes on). Increasing; may be fewer (or none) on text without
/// such spaces.
pub fn find_cuts(text: &str, parts: usize, window: usize) -> Vec<usize> {
    let b = text.as_bytes();
    let mut cuts = Vec::new();
    if parts < 2 || b.len() < 3 {
        return cuts;
    }
    let step = b.len() / parts;
    let mut floor = 1;
    for k in 1..parts {
        let start = (k * step).max(floor);
        let end = start.saturating_add(window).min(b.len() - 1);
        if let Some(i) = (start..end).find(|&i| {
            b[i] == b' ' && b[i - 1].is_ascii_alphabetic() && b[i + 1].is_ascii_alphabetic()
        }) {
            cuts.push(i);
            floor = i + 1;
        }
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_are_spaces_between_letters() {
        let text = "ab cd ef,gh  ij k";
        let cuts = find_cuts(text, 8, 100);
        assert!(!cuts.is_empty());
        for c in &cuts {
            let b = text.as_bytes();
            assert_eq!(b[*c], b' ');
            assert!(b[c - 1].is_ascii_alphabetic() && b[c + 1].is_ascii_alphabetic());
        }
        assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        assert!(find_cuts("aaaa", 4, 10).is_empty());
        assert!(find_cuts("  \u{e9} \u{e9}  ", 4, 10).is_empty());
    }
}
