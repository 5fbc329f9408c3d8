//! A tiny self-made model directory (word-level tokenizer, ChatML template) so
//! the quick start and the integration tests need nothing from outside the
//! repo. One token per word or run of punctuation, which makes exact
//! boundaries (`L = M - 1`, `L = M`) easy to build in tests.

use std::io;
use std::path::Path;

use serde_json::json;

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
    let special = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
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
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec_pretty(&tokenizer)?,
    )?;
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::to_vec_pretty(&config)?,
    )?;
    Ok(())
}
