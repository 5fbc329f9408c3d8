//! Self-made model directories, so the quick start, `prefill-guard demo`
//! and the integration tests need nothing from outside the repo.
//!
//! * [`write_demo_model`]: a word-level tokenizer with a ChatML template. One
//!   token per word or run of punctuation, which makes exact boundaries
//!   (`L = M - 1`, `L = M`) easy to build in tests.
//! * [`write_byte_model`]: a byte-level BPE with no merges (one token per
//!   byte) and the same template. Any text round-trips through encode and
//!   decode, which the PD simulator needs to "generate" readable text.
//!
//! [`scenario`] is `prefill-guard demo`.

pub mod scenario;

use std::io;
use std::path::Path;

use serde_json::json;

pub use scenario::{run, DemoArgs};

const TEMPLATE: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n\
{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Writes `tokenizer.json` and `tokenizer_config.json` into `dir`.
pub fn write_demo_model(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let words = [
        "[UNK]",
        "<|im_start|>",
        "<|im_end|>",
        "user",
        "assistant",
        "system",
        "hello",
        "world",
    ];
    let vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "[UNK]"), special(1, "<|im_start|>"), special(2, "<|im_end|>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "unk_token": "[UNK]",
        "chat_template": TEMPLATE,
    });
    write_model(dir, &tokenizer, &config)
}

/// Writes a byte-level BPE model (`tokenizer.json`, `tokenizer_config.json`)
/// into `dir`: ids 0..=255 are the bytes, then `<|endoftext|>`,
/// `<|im_start|>`, `<|im_end|>`; the ChatML template of [`write_demo_model`].
pub fn write_byte_model(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let vocab: serde_json::Map<String, serde_json::Value> = byte_chars()
        .iter()
        .enumerate()
        .map(|(byte, c)| (c.to_string(), json!(byte)))
        .collect();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(256, "<|endoftext|>"), special(257, "<|im_start|>"),
                         special(258, "<|im_end|>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
                          "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true,
                    "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    });
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": TEMPLATE,
    });
    write_model(dir, &tokenizer, &config)
}

/// An added token as `tokenizer.json` lists it: special, matched verbatim.
fn special(id: usize, content: &str) -> serde_json::Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false,
           "rstrip": false, "normalized": false, "special": true})
}

fn write_model(
    dir: &Path,
    tokenizer: &serde_json::Value,
    config: &serde_json::Value,
) -> io::Result<()> {
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec_pretty(tokenizer)?,
    )?;
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_vec_pretty(config)?,
    )?;
    Ok(())
}

/// GPT-2's `bytes_to_unicode`: the printable character standing for each byte.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (u32::from(b'!')..=u32::from(b'~')).contains(&b)
            || (0xA1..=0xAC).contains(&b)
            || (0xAE..=0xFF).contains(&b)
    };
    let mut next = 256;
    (0u32..256)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).expect("below 0x200")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::count::TextTokenizer;

    #[test]
    fn the_byte_model_round_trips_any_text() {
        let dir = std::env::temp_dir().join(format!("pg-byte-model-{}", std::process::id()));
        write_byte_model(&dir).unwrap();
        let t = TextTokenizer::load(&dir).unwrap().unwrap();
        let text = "SECRET-A-17: héllo  wörld\n\t<|im_start|>x";
        let ids = t.encode_ids(text, true).unwrap();
        assert_eq!(ids.len(), text.len() - "<|im_start|>".len() + 1);
        let plain = "SECRET-A-17: héllo  wörld\n\t!";
        let ids = t.encode_ids(plain, true).unwrap();
        assert_eq!(ids.len(), plain.len(), "one token per byte");
        assert_eq!(t.decode(&ids), plain);
        std::fs::remove_dir_all(&dir).ok();
    }
}
