//! SGLang's own introspection and tokenize endpoints, as discovery, `audit`
//! and `verify` read them: `GET /server_info` (or the older
//! `/get_server_info`), `GET /model_info` (or `/get_model_info`),
//! `GET /v1/models` and `POST /v1/tokenize`. Field names and shapes:
//! `shared/docs/sglang-semantics.md` §5 and §10.
//!
//! `/server_info` carries the server's resolved arguments, which may include
//! secrets (`api_key`): nothing here logs or exports an answer whole, only
//! the named fields below.

use std::time::Duration;

use serde_json::Value;

/// `/server_info` has hundreds of keys but stays far below this; an answer
/// larger than it is not what the guard is looking for.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{url}: {message}")]
    Transport { url: String, message: String },
    #[error("{url}: HTTP {status}{detail}")]
    Status {
        url: String,
        status: u16,
        /// A short, printable excerpt of the error body (SGLang's message).
        detail: String,
    },
    #[error("{url}: the answer is not JSON: {message}")]
    Json { url: String, message: String },
    #[error("{url}: the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge { url: String },
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Status { status: 404, .. })
    }
}

/// SGLang's `--api-key`, sent as `Authorization: Bearer` on the guard's own
/// calls. Its `Debug` is redacted so no log line or error carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(reqwest::header::HeaderValue);

impl ApiKey {
    pub fn new(key: &str) -> Result<Self, String> {
        if key.is_empty() {
            return Err("the key is empty".into());
        }
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| "the key is not a valid header value".to_string())?;
        value.set_sensitive(true);
        Ok(Self(value))
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(redacted)")
    }
}

/// A small client for SGLang's JSON endpoints. It ignores `HTTP(S)_PROXY`:
/// the servers it talks to are the operator's own, next to the guard.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
}

impl Api {
    /// `timeout` bounds each request as a whole (connect, headers, body).
    pub fn new(connect_timeout: Duration, timeout: Duration) -> Self {
        Self::with_key(connect_timeout, timeout, None)
    }

    /// [`Api::new`] authenticating with SGLang's `--api-key`.
    pub fn with_key(connect_timeout: Duration, timeout: Duration, key: Option<&ApiKey>) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = key {
            headers.insert(reqwest::header::AUTHORIZATION, key.0.clone());
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .no_proxy()
            // The server's access log tells the guard's questions from traffic.
            .user_agent(concat!("prefill-guard/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(connect_timeout)
            .timeout(timeout)
            .build()
            // Only TLS back-end initialisation can fail here, and no TLS is used
            // (the URLs are http://); the default client is as good.
            .unwrap_or_default();
        Self { client }
    }

    /// `GET /server_info`, or `/get_server_info` where that is a 404 (SGLang
    /// before the rename, and smg's router, which only has the old name).
    pub async fn server_info(&self, base: &str) -> Result<Value, ApiError> {
        self.get_either(base, "/server_info", "/get_server_info")
            .await
    }

    /// `GET /model_info`, or `/get_model_info` where that is a 404.
    pub async fn model_info(&self, base: &str) -> Result<Value, ApiError> {
        self.get_either(base, "/model_info", "/get_model_info")
            .await
    }

    /// `GET /v1/models`.
    pub async fn models(&self, base: &str) -> Result<Value, ApiError> {
        self.get(&join(base, "/v1/models")).await
    }

    /// `POST /v1/tokenize` with `body`.
    pub async fn tokenize(&self, base: &str, body: &Value) -> Result<Value, ApiError> {
        let url = join(base, "/v1/tokenize");
        let req = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string());
        read_json(&url, req.send().await).await
    }

    async fn get_either(&self, base: &str, path: &str, old: &str) -> Result<Value, ApiError> {
        match self.get(&join(base, path)).await {
            Err(e) if e.is_not_found() => self.get(&join(base, old)).await,
            other => other,
        }
    }

    async fn get(&self, url: &str) -> Result<Value, ApiError> {
        read_json(url, self.client.get(url).send().await).await
    }
}

// The bodies both the `verify` command and the runtime sampler send to
// `POST /v1/tokenize`, and how its answer is read: the two checks must
// ask the server the same question.

/// The chat body as the client sent it, minus streaming options, which a
/// tokenize call has no use for. Every field the chat template can see
/// (messages, tools, tool_choice, chat_template_kwargs, reasoning_effort,
/// continue_final_message, ...) passes.
pub fn chat_tokenize_body(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("stream");
        obj.remove("stream_options");
    }
    body
}

/// A text prompt as `tokenizer(text)` counts it (special tokens added).
pub fn text_tokenize_body(model: Option<&str>, text: &str) -> Value {
    let mut body = serde_json::json!({"prompt": text, "add_special_tokens": true});
    if let Some(m) = model {
        body["model"] = m.into();
    }
    body
}

/// `TokenizeResponse.count` (an int for one prompt), else the length of `tokens`.
pub fn tokenize_count(answer: &Value) -> Option<usize> {
    answer["count"]
        .as_u64()
        .map(|n| n as usize)
        .or_else(|| answer["tokens"].as_array().map(Vec::len))
}

/// `base` (an `http://` URL, with or without a path and trailing slash) + `path`.
pub fn join(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

async fn read_json(url: &str, sent: reqwest::Result<reqwest::Response>) -> Result<Value, ApiError> {
    let transport = |e: reqwest::Error| ApiError::Transport {
        url: url.to_string(),
        message: error_chain(&e),
    };
    let mut resp = sent.map_err(transport)?;
    let status = resp.status();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(ApiError::TooLarge {
                url: url.to_string(),
            });
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(ApiError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            detail: excerpt(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ApiError::Json {
        url: url.to_string(),
        message: e.to_string(),
    })
}

/// At most 200 printable characters of an error body, as `: …`.
fn excerpt(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// reqwest's top-level message ("error sending request") hides the cause:
/// an error with all its sources, `: `-separated.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

// === reading the answers ===

/// A field of `/server_info`: top level first, then the first scheduler's
/// `internal_states` entry, where some builds keep resolved values.
pub fn field<'a>(info: &'a Value, key: &str) -> Option<&'a Value> {
    info.get(key)
        .filter(|v| !v.is_null())
        .or_else(|| info["internal_states"][0].get(key).filter(|v| !v.is_null()))
}

/// A non-negative integer field (`max_req_input_len`, `max_total_num_tokens`, ...).
pub fn count_field(info: &Value, key: &str) -> Option<usize> {
    field(info, key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

pub fn str_field<'a>(info: &'a Value, key: &str) -> Option<&'a str> {
    field(info, key).and_then(Value::as_str)
}

pub fn bool_field(info: &Value, key: &str) -> Option<bool> {
    field(info, key).and_then(Value::as_bool)
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedModel {
    pub id: String,
    /// SGLang's effective `context_len` (`null` for LoRA adapters).
    pub max_model_len: Option<usize>,
}

/// The entries of a `/v1/models` answer (those without a string `id` are skipped).
pub fn listed_models(models: &Value) -> Vec<ListedModel> {
    models["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some(ListedModel {
                id: m["id"].as_str()?.to_string(),
                max_model_len: m["max_model_len"]
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok()),
            })
        })
        .collect()
}

/// The effective context length `C`: the smallest `max_model_len` listed.
/// (`/server_info`'s `context_length` is the command-line value or null,
/// §5, so it is only a fallback.)
pub fn context_length(server_info: &Value, models: Option<&Value>) -> Option<usize> {
    models
        .map(listed_models)
        .into_iter()
        .flatten()
        .filter_map(|m| m.max_model_len)
        .min()
        .or_else(|| count_field(server_info, "context_length"))
}

/// The served model names a server answers to: `/v1/models` ids and
/// `/server_info`'s `served_model_name` (a string, or a list in some builds).
pub fn served_names(server_info: &Value, models: Option<&Value>) -> Vec<String> {
    let mut names: Vec<String> = models
        .map(listed_models)
        .into_iter()
        .flatten()
        .map(|m| m.id)
        .collect();
    match field(server_info, "served_model_name") {
        Some(Value::String(s)) => names.push(s.clone()),
        Some(Value::Array(items)) => {
            names.extend(items.iter().filter_map(Value::as_str).map(str::to_string));
        }
        _ => {}
    }
    names.sort();
    names.dedup();
    names
}

/// Where a refuse-at value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    /// `max_req_input_len` as the server reported it (exact for every pool type).
    Reported,
    /// `min(C, max_total_num_tokens) - 6`, the same formula, from the pool size
    /// (which can overstate the capacity of SWA and sharded pools).
    Fallback,
}

impl LimitSource {
    pub fn describe(self) -> &'static str {
        match self {
            LimitSource::Reported => "reported max_req_input_len",
            LimitSource::Fallback => "fallback min(C, max_total_num_tokens) - 6",
        }
    }
}

/// The prefill scheduler's refuse-at value: `max_req_input_len` when reported,
/// else `min(C, max_total_num_tokens) - 6` (sglang-semantics §10), else `None`.
pub fn refuse_at(
    server_info: &Value,
    context_length: Option<usize>,
) -> Option<(usize, LimitSource)> {
    if let Some(m) = count_field(server_info, "max_req_input_len") {
        return Some((m, LimitSource::Reported));
    }
    let pool = count_field(server_info, "max_total_num_tokens")?;
    max_req_input_len_from(context_length?, pool).map(|m| (m, LimitSource::Fallback))
}

/// SGLang's `max_req_input_len = min(context_len - 1, kv_capacity - 1) - 5`
/// (`tp_worker.py::get_worker_info`).
pub fn max_req_input_len_from(context_length: usize, prefill_pool_tokens: usize) -> Option<usize> {
    context_length
        .checked_sub(1)?
        .min(prefill_pool_tokens.checked_sub(1)?)
        .checked_sub(5)
        .filter(|m| *m > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokenize_bodies_and_answers() {
        let chat = json!({"model": "m", "messages": [], "stream": true, "stream_options": {}, "tools": []});
        assert_eq!(
            chat_tokenize_body(&chat),
            json!({"model": "m", "messages": [], "tools": []})
        );
        assert_eq!(
            text_tokenize_body(Some("m"), "hi"),
            json!({"prompt": "hi", "add_special_tokens": true, "model": "m"})
        );
        assert_eq!(
            tokenize_count(&json!({"tokens": [1, 2], "count": 2})),
            Some(2)
        );
        assert_eq!(tokenize_count(&json!({"tokens": [1, 2, 3]})), Some(3));
        assert_eq!(tokenize_count(&json!({})), None);
    }

    #[test]
    fn fields_fall_back_to_the_first_internal_state() {
        let info = json!({"disaggregation_mode": null, "max_req_input_len": 10,
            "internal_states": [{"disaggregation_mode": "prefill", "max_req_input_len": 99}]});
        assert_eq!(str_field(&info, "disaggregation_mode"), Some("prefill"));
        assert_eq!(count_field(&info, "max_req_input_len"), Some(10));
        assert_eq!(count_field(&info, "missing"), None);
    }

    #[test]
    fn refuse_at_prefers_the_reported_value() {
        let models = json!({"data": [{"id": "m", "max_model_len": 1_048_576},
                                     {"id": "m:lora", "max_model_len": null}]});
        let c = context_length(&json!({}), Some(&models));
        assert_eq!(c, Some(1_048_576));
        let reported = json!({"max_req_input_len": 284_922, "max_total_num_tokens": 1});
        assert_eq!(
            refuse_at(&reported, c),
            Some((284_922, LimitSource::Reported))
        );
        // The worked example of #30233: min(1048576, 284928) - 6.
        let pool_only = json!({"max_total_num_tokens": 284_928});
        assert_eq!(
            refuse_at(&pool_only, c),
            Some((284_922, LimitSource::Fallback))
        );
        assert_eq!(refuse_at(&pool_only, None), None);
        assert_eq!(refuse_at(&json!({}), c), None);
        // The command-line context length stands in when /v1/models has none.
        let cli = json!({"context_length": 4096, "max_total_num_tokens": 100_000});
        assert_eq!(
            refuse_at(&cli, context_length(&cli, None)),
            Some((4090, LimitSource::Fallback))
        );
    }

    #[test]
    fn served_names_merge_both_sources() {
        let info = json!({"served_model_name": "b"});
        let models = json!({"data": [{"id": "a"}, {"id": "b"}]});
        assert_eq!(served_names(&info, Some(&models)), ["a", "b"]);
        assert_eq!(
            served_names(&json!({"served_model_name": ["x", "y"]}), None),
            ["x", "y"]
        );
    }

    #[test]
    fn join_handles_slashes_and_prefixes() {
        assert_eq!(join("http://h:1", "/v1/models"), "http://h:1/v1/models");
        assert_eq!(join("http://h:1/", "/v1/models"), "http://h:1/v1/models");
        assert_eq!(
            join("http://h:1/p/", "/server_info"),
            "http://h:1/p/server_info"
        );
    }

    #[test]
    fn error_excerpts_are_short_and_printable() {
        assert_eq!(excerpt(b""), "");
        assert_eq!(excerpt(b"bad\nthing"), ": bad thing");
        assert_eq!(excerpt(&[b'x'; 500]).len(), 202);
    }
}
