//! Request bodies the tests share.

use serde_json::{json, Value};

use super::{words, MODEL};

/// A chat request of one user message of `n` words (`hello hello ...`): on
/// the demo tokenizer `n + 5` tokens under its ChatML template.
#[allow(dead_code)] // not every test binary sends chats
pub fn chat(n: usize) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": words(n)}]})
}
