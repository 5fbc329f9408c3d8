//! The simulated model: a real tokenizer and chat template (the guard's own
//! loader, counting as the announced release's family does), and a
//! "network" that regurgitates its context.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::release::SimRelease;
use crate::count::{Clock, ModelCounter, ModelFiles, Releases, ServerConfig, TextTokenizer, Unit};
use crate::inspect::{self, Route};

/// What the workers know about the model.
pub struct SimModel {
    pub served_name: String,
    pub model_path: String,
    /// `--default-chat-template-kwargs`, applied to every chat request as
    /// SGLang applies it (and published in `/server_info`).
    pub default_chat_template_kwargs: serde_json::Map<String, Value>,
    /// The release the workers run: prompts are built as its family builds them.
    pub release: SimRelease,
    counter: ModelCounter,
    tokenizer: TextTokenizer,
}

impl SimModel {
    pub fn load(
        dir: &Path,
        served_name: &str,
        default_chat_template_kwargs: serde_json::Map<String, Value>,
        release: SimRelease,
    ) -> anyhow::Result<Self> {
        let server = ServerConfig {
            default_chat_template_kwargs: default_chat_template_kwargs.clone(),
            releases: Releases::one(release.family),
            ..ServerConfig::default()
        };
        let counter = ModelCounter::for_server(Arc::new(ModelFiles::load(dir)?), Arc::new(server))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}",
                    e.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })?;
        let tokenizer = TextTokenizer::load(dir)?
            .ok_or_else(|| anyhow::anyhow!("{}: no tokenizer.json", dir.display()))?;
        Ok(Self {
            served_name: served_name.to_owned(),
            // Absolute: SGLang's router loads a tokenizer from `model_path`.
            model_path: std::fs::canonicalize(dir)
                .unwrap_or_else(|_| dir.to_owned())
                .display()
                .to_string(),
            default_chat_template_kwargs,
            release,
            counter,
            tokenizer,
        })
    }

    /// The prompt ids of every sequence the request makes, as SGLang's
    /// tokenizer manager builds them. The length of each is exactly what the
    /// guard counts for that unit (the guard's counter decides it), so the
    /// simulator and the guard can never disagree about `L`; except a chat's
    /// own `input_ids`, which the worker takes as they are while the guard
    /// counts the larger of them and the messages.
    pub fn prompts(&self, route: Route, body: Arc<Value>) -> Result<Vec<Vec<u32>>, String> {
        let request = inspect::extract(route, body.clone())
            .map_err(|r| crate::errors::Reason::from(r).message(Some(route)))?;
        let given = given_ids(route, &body, self.release.chat_input_ids());
        let mut out = Vec::with_capacity(request.units.len());
        for (i, unit) in request.units.iter().enumerate() {
            let ids = match unit {
                Unit::Ids(_) => given
                    .get(i)
                    .cloned()
                    .ok_or("token ids the simulator could not read")?,
                Unit::Text(text) => self.encode(text, true)?,
                // 0.5.13 and later: the chat's own `input_ids` are the prompt
                // (the guard, which cannot tell whether a router dropped them,
                // also counts the messages). Before, the field does not exist
                // and the messages are rendered.
                Unit::Chat(_) if !given.is_empty() => {
                    out.push(given[0].clone());
                    continue;
                }
                Unit::Chat(chat) => {
                    let rendered = self
                        .counter
                        .render_chat(chat, Clock::Local)
                        .map_err(|e| e.to_string())?;
                    self.encode(&rendered, !self.tokenizer.auto_adds_specials())?
                }
                _ => return Err("this input is not modelled by the simulator".into()),
            };
            let len = self
                .counter
                .count(unit, Clock::Local)
                .map_err(|e| e.to_string())?;
            out.push(fit(ids, len));
        }
        Ok(out)
    }

    /// `tokenizer.decode(ids, skip_special_tokens=True)`, SGLang's default.
    pub fn detokenize(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids)
    }

    /// The id a fresh KV slot holds before anything was written to it.
    pub fn blank_id(&self) -> u32 {
        0
    }
}

impl SimModel {
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode_ids(text, add_special_tokens)
            .map_err(|e| e.to_string())
    }
}

/// Pads or cuts `ids` to `len`. Both come from the same tokenizer and
/// template, so they agree except for additions the count makes on top of the
/// rendered text (an assistant prefix); the count is what SGLang checks.
fn fit(mut ids: Vec<u32>, len: usize) -> Vec<u32> {
    ids.resize(len, 0);
    ids
}

/// Token ids the client sent itself (`/generate` `input_ids`, completions
/// `prompt`, chat `input_ids` on a release that reads them), one list per
/// sequence.
fn given_ids(route: Route, body: &Value, chat_input_ids: bool) -> Vec<Vec<u32>> {
    let field = match route {
        Route::Generate => &body["input_ids"],
        Route::Completions => &body["prompt"],
        Route::ChatCompletions if chat_input_ids => &body["input_ids"],
        _ => return Vec::new(),
    };
    let as_ids = |v: &Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect()
    };
    match field.as_array() {
        Some(items) if items.iter().all(Value::is_array) => {
            items.iter().filter_map(as_ids).collect()
        }
        Some(_) => as_ids(field).into_iter().collect(),
        None => Vec::new(),
    }
}
