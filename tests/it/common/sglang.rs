//! A mock of SGLang's introspection endpoints (`/server_info`,
//! `/get_server_info`, `/model_info`, `/v1/models`) and of `/v1/tokenize`, on
//! `127.0.0.1:0`: a prefill worker for discovery, an upstream for `audit`, an
//! oracle for `verify`. Tests change its answers while it runs.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::PATIENCE;

/// What the mock answers. `None` for an endpoint: 404.
#[derive(Debug, Clone)]
pub struct Answers {
    pub server_info: Value,
    pub model_info: Option<Value>,
    pub models: Option<Value>,
    /// Only the old name, `/get_server_info`, exists (`/server_info` is a 404).
    pub legacy_only: bool,
    /// Every endpoint answers this status instead (a broken worker).
    pub fail_with: Option<u16>,
    /// SGLang's `--api-key`: requests without `Authorization: Bearer KEY`
    /// are answered 401, as SGLang's middleware does.
    pub api_key: Option<String>,
}

/// A prefill worker of SGLang 0.5.23 serving the demo model.
pub fn prefill_worker(max_req_input_len: usize) -> Answers {
    Answers {
        server_info: json!({
            "model_path": "/models/demo", "served_model_name": super::MODEL,
            "context_length": null, "disaggregation_mode": "prefill",
            "disaggregation_transfer_backend": "mooncake", "allow_auto_truncate": false,
            "speculative_algorithm": null, "api_key": "secret-never-to-be-logged",
            "status": "ready", "max_total_num_tokens": max_req_input_len + 6,
            "max_req_input_len": max_req_input_len, "version": "0.5.23",
        }),
        model_info: Some(json!({"model_path": "/models/demo", "disaggregation_mode": "prefill"})),
        models: Some(models_listing(1_048_576)),
        legacy_only: false,
        fail_with: None,
        api_key: None,
    }
}

pub fn models_listing(max_model_len: usize) -> Value {
    json!({"object": "list", "data": [{"id": super::MODEL, "object": "model", "created": 1,
        "owned_by": "sglang", "root": "/models/demo", "parent": null, "max_model_len": max_model_len}]})
}

pub struct InfoMock {
    pub addr: SocketAddr,
    answers: Arc<Mutex<Answers>>,
    /// Path and JSON body of every request received.
    log: Arc<Mutex<Vec<(String, Value)>>>,
}

impl InfoMock {
    pub async fn start(answers: Answers) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answers = Arc::new(Mutex::new(answers));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, l) = (answers.clone(), log.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (a, l) = (a.clone(), l.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(a.clone(), l.clone(), req));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, answers, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes what the mock answers from now on.
    pub fn set(&self, change: impl FnOnce(&mut Answers)) {
        change(&mut self.answers.lock().unwrap());
    }

    pub fn requests(&self) -> Vec<(String, Value)> {
        self.log.lock().unwrap().clone()
    }

    /// How many times `path` was asked for.
    pub fn hits(&self, path: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }
}

async fn handle(
    answers: Arc<Mutex<Answers>>,
    log: Arc<Mutex<Vec<(String, Value)>>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push((path.clone(), body.clone()));
    let a = answers.lock().unwrap().clone();
    if let Some(status) = a.fail_with {
        return Ok(reply(status, json!({"error": "mock failure"})));
    }
    if let Some(key) = &a.api_key {
        if authorization.as_deref() != Some(&format!("Bearer {key}")) {
            return Ok(reply(401, json!({"error": "Unauthorized"})));
        }
    }
    let answer = match path.as_str() {
        "/server_info" if a.legacy_only => None,
        "/server_info" | "/get_server_info" => Some(a.server_info),
        "/model_info" | "/get_model_info" => a.model_info,
        "/v1/models" => a.models,
        "/v1/tokenize" => Some(tokenize(&body)),
        _ => None,
    };
    Ok(match answer {
        Some(v) => reply(200, v),
        None => reply(404, json!({"detail": "Not Found"})),
    })
}

fn reply(status: u16, v: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .unwrap()
}

/// The mock's tokenizer: one token per whitespace-separated word, like the
/// demo model's, except that it splits `zebra` into two tokens (the guard's
/// demo tokenizer has one `[UNK]`: an undercount) and merges `good day` into
/// one (an overcount). Chat follows the demo ChatML template: three tokens
/// per message around its words, two for the generation prompt.
fn tokenize(body: &Value) -> Value {
    let count_text = |text: &str| -> usize {
        let words: Vec<&str> = text.split_whitespace().collect();
        let merged = words.windows(2).filter(|w| w == &["good", "day"]).count();
        words
            .iter()
            .map(|w| if *w == "zebra" { 2 } else { 1 })
            .sum::<usize>()
            - merged
    };
    let count = match (&body["messages"], &body["prompt"]) {
        (Value::Array(messages), _) => {
            messages
                .iter()
                .map(|m| 3 + count_text(m["content"].as_str().unwrap_or("")))
                .sum::<usize>()
                + 2
        }
        (_, Value::String(prompt)) => count_text(prompt),
        _ => return json!({"object": "error", "message": "bad tokenize body", "code": 400}),
    };
    json!({"tokens": vec![7; count], "count": count, "max_model_len": 1_048_576})
}

/// Waits until `check` holds, polling; fails the test after [`PATIENCE`].
/// For conditions that follow from the guard's background work (discovery
/// rounds), never a fixed sleep. The deadline is real time, on a paused
/// clock too (`common::clock`): it keeps a failing test from hanging and
/// bounds nothing the test checks; the polls between are virtual.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
