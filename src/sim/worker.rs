//! One simulated SGLang worker (prefill or decode) behind SGLang's HTTP API.
//!
//! Both roles tokenize the request themselves, as every SGLang server does,
//! and run the tokenizer manager's context-length check. Then:
//!
//! * **prefill** runs the scheduler's `validate_input_length`
//!   (`L >= max_req_input_len`). Vulnerable (≤ 0.5.19): the prompt becomes the
//!   one-token placeholder `[0]` and that one token is "transferred" (slot 0
//!   written, transfer marked complete, no error anywhere). Fixed (≥ 0.5.20):
//!   the request is aborted with SGLang's 400 and the room is told, so decode
//!   answers with the same error instead of generating. Under the limit every
//!   token is written.
//!   A prefill launched with `--grammar-backend none` treats every sequence
//!   carrying a grammar the same way ([`super::grammar`]: the scheduler's
//!   grammar manager calls the same `set_finish_with_abort`), after the length
//!   check.
//! * **decode** (which always has a grammar backend) reserves pages for the
//!   full prompt it tokenized, waits for the transfer, and "generates" by
//!   reading its context back: the answer is the detokenized KV slots, up to
//!   the request's token budget.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::grammar::{self, GrammarBackend};
use super::kv::{KvError, KvPool};
use super::model::SimModel;
use super::Mode;
use crate::inspect::Route;

/// Request bodies above this are refused (413), as a bounded fixture should.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The placeholder `Req.set_finish_with_abort` leaves: `array("q", [0])`.
const PLACEHOLDER: [u32; 1] = [0];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Prefill,
    Decode,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// Everything one worker needs; both workers share the model and the pool.
pub struct Worker {
    pub role: Role,
    pub mode: Mode,
    /// `--grammar-backend`: `Disabled` stubs (or, fixed, refuses) every
    /// sequence carrying a grammar.
    pub grammar_backend: GrammarBackend,
    pub model: Arc<SimModel>,
    pub pool: KvPool,
    /// Prefill's refuse-at value.
    pub max_req_input_len: usize,
    pub context_len: usize,
    pub bootstrap_port: u16,
    /// How long either side waits for the other in a handoff.
    pub handoff_timeout: Duration,
    /// Counts the prompt-carrying requests received (shared by the pair).
    pub received: Arc<AtomicUsize>,
}

pub fn router(worker: Arc<Worker>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(worker)
}

async fn handle(State(w): State<Arc<Worker>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET, "/health" | "/health_generate") => empty(StatusCode::OK),
        (Method::GET, "/get_server_info") => json_response(w.server_info()),
        (Method::GET, "/get_model_info") => json_response(w.model_info()),
        (Method::GET, "/server_info") if w.model.release.new_info_routes() => {
            json_response(w.server_info())
        }
        (Method::GET, "/model_info") if w.model.release.new_info_routes() => {
            json_response(w.model_info())
        }
        (Method::GET, "/v1/models") => json_response(w.models()),
        // The router's load monitor polls this every 30 s.
        (Method::GET, "/get_load") => json_response(w.load()),
        (Method::POST, "/generate" | "/v1/chat/completions" | "/v1/completions") => {
            let route = Route::from_path(&path).expect("a listed route");
            w.received.fetch_add(1, Ordering::Relaxed);
            match axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES).await {
                Ok(body) => w.serve(route, body).await,
                Err(_) => error(
                    route,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                ),
            }
        }
        _ => {
            let mut r = json_response(json!({"detail": "Not Found"}));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

/// A request as both roles read it.
struct Parsed {
    route: Route,
    body: Arc<Value>,
    prompts: Vec<Vec<u32>>,
    rooms: Vec<u64>,
    stream: bool,
}

impl Worker {
    async fn serve(&self, route: Route, raw: Bytes) -> Response {
        let parsed = match self.parse(route, &raw) {
            Ok(p) => p,
            Err(message) => return error(route, StatusCode::BAD_REQUEST, &message),
        };
        match self.role {
            Role::Prefill => self.prefill(parsed).await,
            Role::Decode => self.decode(parsed).await,
        }
    }

    /// The tokenizer manager: parse, tokenize, check against the context
    /// length; then the disaggregation checks every PD scheduler makes.
    fn parse(&self, route: Route, raw: &[u8]) -> Result<Parsed, String> {
        let body: Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
        let body = Arc::new(body);
        if body.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
            return Err("n > 1 is not modelled by the simulator".into());
        }
        let prompts = self.model.prompts(route, body.clone())?;
        for p in &prompts {
            if p.len() >= self.context_len {
                return Err(format!(
                    "The input ({} tokens) is longer than the model's context length ({} tokens).",
                    p.len(),
                    self.context_len
                ));
            }
        }
        let rooms = rooms(&body, prompts.len())?;
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        Ok(Parsed {
            route,
            body,
            prompts,
            rooms,
            stream,
        })
    }

    async fn prefill(&self, p: Parsed) -> Response {
        let aborts = self.aborts(&p);
        if let (Some(message), Mode::Fixed) = (aborts.iter().flatten().next(), self.mode) {
            // Every room of the request is told, so decode answers at once
            // instead of waiting out the handoff for the batch's other items.
            for &room in &p.rooms {
                self.pool.abort(room, message);
            }
            return abort_response(p.route, p.stream, StatusCode::BAD_REQUEST, message);
        }
        let mut transfers = Vec::new();
        for ((prompt, &room), abort) in p.prompts.iter().zip(&p.rooms).zip(&aborts) {
            // Vulnerable: the verdict is parked in `to_finish`, the prompt is
            // swapped for the placeholder, and the handoff goes on.
            let tokens: &[u32] = match abort {
                Some(_) => &PLACEHOLDER,
                None => prompt,
            };
            transfers.push(self.pool.transfer(room, tokens, self.handoff_timeout));
        }
        let results = futures_util::future::join_all(transfers).await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return abort_response(p.route, p.stream, status_of(&e), &e.to_string());
        }
        // Prefill's own answer: no text (max_new_tokens is 1 and its token
        // is decode's to emit); the router returns decode's answer.
        let outputs = p.prompts.iter().map(|q| (q.len(), Vec::new())).collect();
        self.respond(&p, outputs, "length")
    }

    /// Per sequence, why prefill's scheduler calls `set_finish_with_abort`
    /// on it, if it does: `validate_input_length` first, then the grammar
    /// manager (only without a grammar backend).
    fn aborts(&self, p: &Parsed) -> Vec<Option<String>> {
        let n = p.prompts.len();
        let grammars = match self.grammar_backend {
            GrammarBackend::Disabled => grammar::grammar_bearing(p.route, &p.body, n),
            GrammarBackend::Xgrammar => vec![false; n],
        };
        p.prompts
            .iter()
            .zip(grammars)
            .map(|(q, grammar)| {
                if q.len() >= self.max_req_input_len {
                    Some(format!(
                        "Input length ({} tokens) exceeds the maximum allowed length ({} tokens). \
                         Use a shorter input or enable --allow-auto-truncate.",
                        q.len(),
                        self.max_req_input_len
                    ))
                } else {
                    grammar.then(|| grammar::NO_BACKEND.to_owned())
                }
            })
            .collect()
    }

    async fn decode(&self, p: Parsed) -> Response {
        if let Some(bad) = self.wrong_bootstrap_port(&p.body) {
            return abort_response(p.route, p.stream, StatusCode::INTERNAL_SERVER_ERROR, &bad);
        }
        let reservations = p.prompts.iter().zip(&p.rooms).map(|(prompt, &room)| {
            let pool = self.pool.clone();
            let timeout = self.handoff_timeout;
            async move {
                let mut r = pool.reserve(room, prompt.len(), timeout).await?;
                let context = r.context(timeout).await?;
                Ok::<_, KvError>((r, context))
            }
        });
        let mut held = Vec::new();
        let mut outputs = Vec::new();
        for result in futures_util::future::join_all(reservations).await {
            match result {
                Ok((reservation, context)) => {
                    outputs.push(context);
                    held.push(reservation);
                }
                Err(e) => return abort_response(p.route, p.stream, status_of(&e), &e.to_string()),
            }
        }
        let budget = self.budget(&p);
        let mut finish = "stop";
        let outputs = outputs
            .into_iter()
            .map(|context| {
                let len = context.len();
                let room_left = self.context_len.saturating_sub(len);
                let limit = budget.unwrap_or(room_left).min(room_left);
                if context.len() > limit {
                    finish = "length";
                }
                (len, context.into_iter().take(limit).collect::<Vec<_>>())
            })
            .collect();
        let response = self.respond(&p, outputs, finish);
        // The pages stay reserved until the answer is built (a stream's
        // chunks are all in memory by then); dropping returns them.
        drop(held);
        response
    }

    /// The token budget the request asks for, with SGLang's defaults.
    fn budget(&self, p: &Parsed) -> Option<usize> {
        let read = |v: &Value| v.as_u64().map(|n| n as usize);
        match p.route {
            Route::Generate => {
                Some(read(&p.body["sampling_params"]["max_new_tokens"]).unwrap_or(128))
            }
            Route::Completions => Some(read(&p.body["max_tokens"]).unwrap_or(16)),
            _ => read(&p.body["max_completion_tokens"]).or_else(|| read(&p.body["max_tokens"])),
        }
    }

    /// Decode connects to `bootstrap_host:bootstrap_port`; a port where no
    /// prefill bootstrap server listens fails the transfer.
    fn wrong_bootstrap_port(&self, body: &Value) -> Option<String> {
        let ports = match &body["bootstrap_port"] {
            Value::Array(items) => items.clone(),
            v => vec![v.clone()],
        };
        ports.iter().find_map(|v| {
            let port = v.as_u64()?;
            (port != u64::from(self.bootstrap_port)).then(|| {
                format!(
                    "KV transfer failed: no prefill bootstrap server at port {port} (it listens on {})",
                    self.bootstrap_port
                )
            })
        })
    }

    /// One answer per sequence: `(prompt_tokens, output ids)`.
    fn respond(&self, p: &Parsed, outputs: Vec<(usize, Vec<u32>)>, finish: &str) -> Response {
        let id = format!("{:032x}", rand_u128());
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let model = p.body["model"]
            .as_str()
            .unwrap_or(&self.model.served_name)
            .to_owned();
        let texts: Vec<String> = outputs
            .iter()
            .map(|(_, ids)| self.model.detokenize(ids))
            .collect();
        let prompt_tokens: usize = outputs.iter().map(|(l, _)| l).sum();
        let completion_tokens: usize = outputs.iter().map(|(_, ids)| ids.len()).sum();
        let usage = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": null,
        });
        let batch = p.body.get("text").is_some_and(Value::is_array)
            || p.body
                .get("input_ids")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(Value::is_array));
        match (p.route, p.stream) {
            (Route::Generate, false) => {
                // Each sequence of a batch is its own request, with its own rid.
                let items: Vec<Value> = outputs
                    .iter()
                    .zip(&texts)
                    .enumerate()
                    .map(|(i, ((len, ids), text))| {
                        let rid = if i == 0 {
                            id.clone()
                        } else {
                            format!("{:032x}", rand_u128())
                        };
                        generate_item(&rid, text, ids, *len, finish)
                    })
                    .collect();
                json_response(if batch {
                    Value::Array(items)
                } else {
                    items.into_iter().next().unwrap_or(Value::Null)
                })
            }
            (Route::Generate, true) => {
                // SGLang's /generate streams the text so far in every chunk.
                let mut events = Vec::new();
                for (i, ((len, ids), text)) in outputs.iter().zip(&texts).enumerate() {
                    let rid = if i == 0 {
                        id.clone()
                    } else {
                        format!("{:032x}", rand_u128())
                    };
                    for cut in pieces(text) {
                        let part = &text[..cut];
                        let done = cut == text.len();
                        events.push(generate_item(
                            &rid,
                            part,
                            ids,
                            *len,
                            if done { finish } else { "" },
                        ));
                    }
                }
                sse(events)
            }
            (Route::ChatCompletions, false) => json_response(json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": texts[0],
                                "reasoning_content": null, "tool_calls": null},
                    "logprobs": null, "finish_reason": finish, "matched_stop": null,
                }],
                "usage": usage,
            })),
            (Route::ChatCompletions, true) => {
                let chunk = |delta: Value, finish: Value| {
                    json!({"id": id, "object": "chat.completion.chunk", "created": created,
                           "model": model, "choices": [{"index": 0, "delta": delta,
                           "logprobs": null, "finish_reason": finish}]})
                };
                let mut events = vec![chunk(
                    json!({"role": "assistant", "content": ""}),
                    Value::Null,
                )];
                let mut at = 0;
                for cut in pieces(&texts[0]) {
                    events.push(chunk(json!({"content": &texts[0][at..cut]}), Value::Null));
                    at = cut;
                }
                events.push(chunk(json!({}), json!(finish)));
                if include_usage(&p.body) {
                    events.push(json!({"id": id, "object": "chat.completion.chunk",
                        "created": created, "model": model, "choices": [], "usage": usage}));
                }
                sse(events)
            }
            (_, false) => json_response(json!({
                "id": id, "object": "text_completion", "created": created, "model": model,
                "choices": texts.iter().enumerate().map(|(i, t)| json!({
                    "index": i, "text": t, "logprobs": null,
                    "finish_reason": finish, "matched_stop": null,
                })).collect::<Vec<_>>(),
                "usage": usage,
            })),
            (_, true) => {
                let chunk = |index: usize, text: &str, finish: Value| {
                    json!({"id": id, "object": "text_completion", "created": created,
                           "model": model, "choices": [{"index": index, "text": text,
                           "logprobs": null, "finish_reason": finish}]})
                };
                let mut events = Vec::new();
                for (i, text) in texts.iter().enumerate() {
                    let mut at = 0;
                    for cut in pieces(text) {
                        events.push(chunk(i, &text[at..cut], Value::Null));
                        at = cut;
                    }
                    events.push(chunk(i, "", json!(finish)));
                }
                if include_usage(&p.body) {
                    events.push(json!({"id": id, "object": "text_completion",
                        "created": created, "model": model, "choices": [], "usage": usage}));
                }
                sse(events)
            }
        }
    }

    fn server_info(&self) -> Value {
        let capacity = self.pool.capacity();
        // Prefill reports the pool its max_req_input_len was derived from
        // (`min(C-1, P-1) - 5`); decode its own, the shared pool.
        let (pool, max_req_input_len) = match self.role {
            Role::Prefill => (self.max_req_input_len + 6, self.max_req_input_len),
            Role::Decode => (capacity, (self.context_len - 1).min(capacity - 1) - 5),
        };
        let mode = self.role.name();
        let release = &self.model.release;
        let mut info = json!({
            "model_path": self.model.model_path,
            "tokenizer_path": self.model.model_path,
            "served_model_name": self.model.served_name,
            "context_length": null,
            "max_total_tokens": null,
            "page_size": self.pool.page_size(),
            "tp_size": 1, "dp_size": 1, "pp_size": 1,
            "disaggregation_mode": mode,
            "disaggregation_bootstrap_port": self.bootstrap_port,
            "disaggregation_transfer_backend": "mooncake",
            "allow_auto_truncate": false,
            "speculative_algorithm": null,
            "skip_tokenizer_init": false,
            "grammar_backend": self.grammar_backend.name(),
            "is_embedding": false,
            "chat_template": null,
            "status": "ready",
            "max_total_num_tokens": pool,
            "max_req_input_len": max_req_input_len,
            "version": release.version,
            "frontend": "python",
        });
        // What older releases do not publish at all (the flag or the field
        // does not exist there).
        if release.default_chat_template_kwargs() {
            info["default_chat_template_kwargs"] =
                (!self.model.default_chat_template_kwargs.is_empty())
                    .then(|| Value::Object(self.model.default_chat_template_kwargs.clone()))
                    .into();
        }
        if release.internal_states() {
            info["internal_states"] = json!([{
                "disaggregation_mode": mode,
                "max_req_input_len": max_req_input_len,
                "memory_usage": {"token_capacity": pool},
            }]);
        }
        info
    }

    /// `GET /get_load`: one entry per data-parallel rank (one here).
    fn load(&self) -> Value {
        let used = self.pool.capacity() - self.pool.free_pages() * self.pool.page_size();
        json!([{"dp_rank": 0, "num_reqs": self.pool.rooms(), "num_waiting_reqs": 0,
                "num_tokens": used}])
    }

    fn model_info(&self) -> Value {
        let release = &self.model.release;
        let mut info = json!({
            "model_path": self.model.model_path,
            "tokenizer_path": self.model.model_path,
            "is_generation": true,
            "preferred_sampling_params": null,
            "weight_version": "default",
        });
        if release.model_info_architecture() {
            info["served_model_name"] = json!(self.model.served_name);
            info["load_format"] = json!("auto");
            info["disaggregation_mode"] = json!(self.role.name());
            info["has_image_understanding"] = json!(false);
            info["has_audio_understanding"] = json!(false);
            info["model_type"] = json!("prefill-guard-sim");
            info["architectures"] = json!(["PrefillGuardSimForCausalLM"]);
        }
        if release.model_info_parsers() {
            info["reasoning_parser"] = Value::Null;
            info["tool_call_parser"] = Value::Null;
        }
        info
    }

    fn models(&self) -> Value {
        json!({"object": "list", "data": [{
            "id": self.model.served_name, "object": "model", "created": 0,
            "owned_by": "sglang", "root": self.model.served_name, "parent": null,
            "max_model_len": self.context_len,
        }]})
    }
}

/// `bootstrap_room` per sequence, as `GenerateReqInput` normalises it: a
/// number gives `room + i`, a list is taken as is. Without one a PD
/// scheduler refuses the request.
fn rooms(body: &Value, n: usize) -> Result<Vec<u64>, String> {
    let missing =
        || "Invalid request: Disaggregated request received without bootstrap room id.".to_owned();
    match &body["bootstrap_room"] {
        Value::Null => Err(missing()),
        Value::Array(items) => {
            let rooms: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
            match rooms {
                Some(r) if r.len() == n => Ok(r),
                Some(_) => Err(format!(
                    "bootstrap_room has {} entries for {n} prompts",
                    items.len()
                )),
                None => Err(missing()),
            }
        }
        v => {
            let room = v.as_u64().ok_or_else(missing)?;
            Ok((0..n as u64).map(|i| room.wrapping_add(i)).collect())
        }
    }
}

fn include_usage(body: &Value) -> bool {
    body["stream_options"]["include_usage"].as_bool() == Some(true)
}

fn generate_item(id: &str, text: &str, ids: &[u32], prompt_tokens: usize, finish: &str) -> Value {
    let finish_reason = match finish {
        "" => Value::Null,
        "length" => json!({"type": "length", "length": ids.len()}),
        _ => json!({"type": "stop", "matched": null}),
    };
    json!({
        "text": text,
        "output_ids": ids,
        "meta_info": {
            "id": id,
            "finish_reason": finish_reason,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": ids.len(),
            "cached_tokens": 0,
        },
    })
}

/// Cut points that split `text` into a few stream chunks on char boundaries.
fn pieces(text: &str) -> Vec<usize> {
    let mut cuts: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .filter(|i| *i > 0)
        .step_by(24)
        .collect();
    cuts.push(text.len());
    cuts
}

fn status_of(e: &KvError) -> StatusCode {
    match e {
        KvError::Aborted(_) | KvError::TooLong { .. } | KvError::RoomInUse(_) => {
            StatusCode::BAD_REQUEST
        }
        KvError::PoolFull => StatusCode::SERVICE_UNAVAILABLE,
        KvError::TransferTimeout(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An abort as SGLang reports it: the JSON error for a non-stream request;
/// for a stream, HTTP 200 and an error event, because the abort arrives as
/// stream output (`semantics §4.2`, §6).
fn abort_response(route: Route, stream: bool, status: StatusCode, message: &str) -> Response {
    if !stream {
        return error(route, status, message);
    }
    let event = match route {
        Route::Generate => json!({"error": {"message": message, "type": "invalid_request_error",
                                            "code": status.as_u16(), "retryable": false}}),
        _ => json!({"error": error_object(status, message)}),
    };
    sse(vec![event])
}

fn error_object(status: StatusCode, message: &str) -> Value {
    let kind = if status.is_client_error() {
        "BadRequestError"
    } else {
        "InternalServerError"
    };
    json!({"object": "error", "message": message, "type": kind, "param": null,
           "code": status.as_u16()})
}

/// SGLang's error body for `route` (`semantics §6`).
fn error(route: Route, status: StatusCode, message: &str) -> Response {
    let body = match route {
        Route::Generate => json!({"error": {"message": message}}),
        _ => error_object(status, message),
    };
    let mut r = json_response(body);
    *r.status_mut() = status;
    r
}

fn json_response(v: Value) -> Response {
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .expect("a static header")
}

fn empty(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

/// Server-sent events: `data: <json>\n\n` per event, then `data: [DONE]`.
fn sse(events: Vec<Value>) -> Response {
    let frames = events
        .into_iter()
        .map(|e| format!("data: {e}\n\n"))
        .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
        .map(|s| Ok::<_, Infallible>(Bytes::from(s)));
    Response::builder()
        .header(http::header::CONTENT_TYPE, "text/event-stream")
        .header(http::header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(futures_util::stream::iter(frames)))
        .expect("static headers")
}

/// A request id; uniqueness is all that matters.
fn rand_u128() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}
