//! Ollama's `/api/chat` and `/api/generate` as SGLang 0.5.23 serves them
//! (`ollama/serving.py`, `ollama/protocol.py`). Neither goes through SGLang's
//! chat preprocessing:
//!
//! * `handle_chat` passes `[{"role", "content"} for each message]` straight to
//!   `tokenizer.apply_chat_template(messages, tokenize=True,
//!   add_generation_prompt=True, return_dict=False)` and sends the ids;
//! * `handle_generate` sends `f"{system}\n\n{prompt}"` (or `prompt` when
//!   `system` is empty) as `text`, encoded with the default special tokens; a
//!   blank prompt is answered without generating anything.
//!
//! `images` are ignored by SGLang; the guard refuses them like every other
//! media input rather than rely on that.

use serde_json::{json, Map, Value};

use super::py;
use super::{CountError, Unit};

fn invalid(message: impl Into<String>, param: &'static str) -> CountError {
    CountError::Invalid {
        message: message.into(),
        param: Some(param),
    }
}

fn require_model(obj: &Map<String, Value>) -> Result<(), CountError> {
    match obj.get("model") {
        Some(Value::String(_)) => Ok(()),
        None => Err(invalid("model: Field required", "model")),
        Some(_) => Err(invalid("model: Input should be a valid string", "model")),
    }
}

fn refuse_images(v: Option<&Value>, loc: &str) -> Result<(), CountError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(a)) if a.is_empty() => Ok(()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Err(CountError::Unsupported(
            format!("`{loc}` is refused: images are media whose token length the guard cannot see"),
        )),
        Some(_) => Err(invalid(
            format!("{loc}: Input should be a valid list of strings"),
            "images",
        )),
    }
}

/// `OllamaChatRequest` validated, reduced to the conversation SGLang renders.
pub fn chat_messages(body: &Value) -> Result<Value, CountError> {
    let obj = body
        .as_object()
        .ok_or_else(|| invalid("Input should be a valid dictionary", "messages"))?;
    require_model(obj)?;
    let items = match obj.get("messages") {
        Some(Value::Array(items)) => items,
        None => return Err(invalid("messages: Field required", "messages")),
        Some(_) => {
            return Err(invalid(
                "messages: Input should be a valid list",
                "messages",
            ))
        }
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let loc = format!("messages.{i}");
        let o = m.as_object().ok_or_else(|| {
            invalid(
                format!("{loc}: Input should be a valid dictionary"),
                "messages",
            )
        })?;
        let field = |key: &str| match o.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            None => Err(invalid(format!("{loc}.{key}: Field required"), "messages")),
            Some(_) => Err(invalid(
                format!("{loc}.{key}: Input should be a valid string"),
                "messages",
            )),
        };
        let (role, content) = (field("role")?, field("content")?);
        refuse_images(o.get("images"), &format!("{loc}.images"))?;
        messages.push(json!({"role": role, "content": content}));
    }
    if messages.is_empty() {
        // transformers raises before rendering; SGLang answers 500.
        return Err(invalid(
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
            "messages",
        ));
    }
    Ok(Value::Array(messages))
}

/// `/api/generate`: the one text SGLang generates from, or nothing for a
/// blank prompt.
pub fn generate_units(obj: &Map<String, Value>) -> Result<Vec<Unit>, CountError> {
    require_model(obj)?;
    let prompt = match obj.get("prompt") {
        Some(Value::String(s)) => s,
        None => return Err(invalid("prompt: Field required", "prompt")),
        Some(_) => return Err(invalid("prompt: Input should be a valid string", "prompt")),
    };
    let system = match obj.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(invalid("system: Input should be a valid string", "system")),
    };
    refuse_images(obj.get("images"), "images")?;
    let text = match system.filter(|s| !s.is_empty()) {
        Some(system) => format!("{system}\n\n{prompt}"),
        None => prompt.clone(),
    };
    if py::strip(&text).is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![Unit::Text(text)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(body: Value) -> Result<Vec<String>, String> {
        let obj = body.as_object().cloned().unwrap_or_default();
        generate_units(&obj)
            .map(|units| {
                units
                    .into_iter()
                    .map(|u| match u {
                        Unit::Text(t) => t,
                        other => panic!("{other:?}"),
                    })
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    // Expected values are `OllamaServing.handle_generate`'s prompt building in
    // SGLang 0.5.23, read off the source (`prompt = f"{request.system}\n\n{prompt}"
    // if request.system`; blank prompts return before generating).
    #[test]
    fn generate_builds_system_then_prompt() {
        assert_eq!(
            texts(json!({"model": "m", "prompt": "hi", "system": "be brief"})).unwrap(),
            ["be brief\n\nhi"]
        );
        assert_eq!(
            texts(json!({"model": "m", "prompt": "hi", "system": ""})).unwrap(),
            ["hi"]
        );
        // A blank prompt with a system message is still generated from.
        assert_eq!(
            texts(json!({"model": "m", "prompt": "", "system": "s"})).unwrap(),
            ["s\n\n"]
        );
        assert!(texts(json!({"model": "m", "prompt": " \n\u{1f}"}))
            .unwrap()
            .is_empty());
        assert!(texts(json!({"model": "m", "prompt": "x", "images": ["aGk="]})).is_err());
        assert!(texts(json!({"model": "m", "prompt": "x", "images": []})).is_ok());
        assert!(texts(json!({"prompt": "x"})).is_err());
        assert!(texts(json!({"model": "m", "prompt": 3})).is_err());
    }

    #[test]
    fn chat_keeps_only_role_and_content() {
        let m = chat_messages(&json!({"model": "m", "messages": [
            {"role": "System", "content": "s", "extra": 1},
            {"role": "user", "content": "u", "images": null}
        ]}))
        .unwrap();
        assert_eq!(
            m,
            json!([{"role": "System", "content": "s"}, {"role": "user", "content": "u"}])
        );
        assert!(chat_messages(&json!({"model": "m", "messages": []})).is_err());
        assert!(chat_messages(&json!({"model": "m", "messages": [{"role": "user"}]})).is_err());
        assert!(matches!(
            chat_messages(
                &json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["b64"]}]})
            ),
            Err(CountError::Unsupported(_))
        ));
    }
}
