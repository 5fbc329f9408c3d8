//! A minimal PD dispatcher doing what SGLang's router does with a request in
//! PD mode, so `prefill-guard demo` needs no Python: add `bootstrap_host`,
//! `bootstrap_port` and a random `bootstrap_room` (lists for a batch), send
//! the same body to the prefill and the decode worker at once, and answer
//! with decode's response, or the failing worker's (decode's first). Read-only
//! `GET`s go to the prefill worker, as the router's `/get_server_info` does.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{json, Value};

const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

pub struct Dispatcher {
    pub prefill: String,
    pub decode: String,
    pub bootstrap_host: String,
    pub bootstrap_port: u16,
    pub client: reqwest::Client,
}

impl Dispatcher {
    pub fn new(prefill: SocketAddr, decode: SocketAddr, bootstrap_port: u16) -> Self {
        Self {
            prefill: format!("http://{prefill}"),
            decode: format!("http://{decode}"),
            bootstrap_host: prefill.ip().to_string(),
            bootstrap_port,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
        }
    }
}

pub fn router(d: Arc<Dispatcher>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(d)
}

async fn handle(State(d): State<Arc<Dispatcher>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/health" | "/liveness" | "/readiness") => plain(StatusCode::OK, ""),
        (Method::GET, _) => forward_get(&d, &path).await,
        (Method::POST, "/generate" | "/v1/chat/completions" | "/v1/completions") => {
            match axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES).await {
                Ok(body) => dual_dispatch(&d, &path, &body).await,
                Err(_) => plain(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
            }
        }
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

async fn forward_get(d: &Dispatcher, path: &str) -> Response {
    match d.client.get(format!("{}{path}", d.prefill)).send().await {
        Ok(r) => pass(r),
        Err(e) => plain(StatusCode::BAD_GATEWAY, &e.to_string()),
    }
}

async fn dual_dispatch(d: &Dispatcher, path: &str, raw: &[u8]) -> Response {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(raw) else {
        return plain(StatusCode::BAD_REQUEST, "the body must be a JSON object");
    };
    let room = || uuid::Uuid::new_v4().as_u64_pair().0 >> 1;
    match batch_size(&body) {
        Some(n) => {
            body.insert("bootstrap_host".into(), json!(vec![&d.bootstrap_host; n]));
            body.insert("bootstrap_port".into(), json!(vec![d.bootstrap_port; n]));
            let rooms: Vec<u64> = (0..n).map(|_| room()).collect();
            body.insert("bootstrap_room".into(), json!(rooms));
        }
        None => {
            body.insert("bootstrap_host".into(), json!(d.bootstrap_host));
            body.insert("bootstrap_port".into(), json!(d.bootstrap_port));
            body.insert("bootstrap_room".into(), json!(room()));
        }
    }
    let body = Value::Object(body).to_string();
    let send = |base: &str| {
        d.client
            .post(format!("{base}{path}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
    };
    let (prefill, decode) = tokio::join!(send(&d.prefill), send(&d.decode));
    // The router's order: decode's failure first, then prefill's, then
    // decode's answer. (The router wraps errors in an envelope of its own;
    // this passes the worker's body through.)
    let decode = match decode {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return pass(r),
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("decode: {e}")),
    };
    let prefill = match prefill {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return pass(r),
        Err(e) => return plain(StatusCode::BAD_GATEWAY, &format!("prefill: {e}")),
    };
    // Prefill's own answer carries nothing the client needs; read it to the
    // end (the router drains it before relaying decode's).
    let _ = prefill.bytes().await;
    pass(decode)
}

/// Sequences in a `/generate` or completions batch; `None` for one sequence.
fn batch_size(body: &serde_json::Map<String, Value>) -> Option<usize> {
    for key in ["text", "prompt"] {
        if let Some(Value::Array(items)) = body.get(key) {
            if items.iter().all(Value::is_string) {
                return Some(items.len());
            }
            if items.iter().all(Value::is_array) {
                return Some(items.len());
            }
        }
    }
    match body.get("input_ids") {
        Some(Value::Array(items)) if items.iter().all(Value::is_array) => Some(items.len()),
        _ => None,
    }
}

/// The upstream's status, content type and body, streamed through.
fn pass(r: reqwest::Response) -> Response {
    let mut out = Response::builder().status(r.status().as_u16());
    if let Some(ct) = r.headers().get(http::header::CONTENT_TYPE) {
        out = out.header(http::header::CONTENT_TYPE, ct.as_bytes());
    }
    out.body(Body::from_stream(r.bytes_stream()))
        .unwrap_or_else(|_| plain(StatusCode::BAD_GATEWAY, "bad upstream answer"))
}

fn plain(status: StatusCode, text: &str) -> Response {
    let mut r = Response::new(Body::from(text.to_owned()));
    *r.status_mut() = status;
    r
}
