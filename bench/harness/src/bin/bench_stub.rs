//! The fast upstream of `bench/run.sh`: answers like an SGLang worker, as
//! cheaply as possible, so that the hops in front of it are what is measured.
//!
//! It reads and drops every request body (a hop's cost of sending it is part of
//! the measurement), answers POSTs with a fixed OpenAI-style chat completion and
//! the GETs the real sglang-router asks of a worker before it routes to it
//! (`/health`, `/get_server_info`, `/server_info`, `/get_model_info`,
//! `/model_info`, `/v1/models`).
//!
//! Usage: `cargo run --release --example bench_stub -- 127.0.0.1:PORT [THREADS]`

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const MODEL: &str = "qwen2.5";

const CHAT: &str = r#"{"id":"bench","object":"chat.completion","created":1,"model":"qwen2.5","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
const GENERATE: &str = r#"{"text":"ok","meta_info":{"id":"bench","finish_reason":{"type":"stop"},"prompt_tokens":1,"completion_tokens":1}}"#;

fn server_info() -> String {
    format!(
        r#"{{"model_path":"/models/{MODEL}","tokenizer_path":"/models/{MODEL}","served_model_name":"{MODEL}","is_generation":true,"context_length":1048576,"max_total_num_tokens":1048576,"max_req_input_len":681280,"disaggregation_mode":"null","status":"ready","version":"0.5.23"}}"#
    )
}

fn model_info() -> String {
    format!(
        r#"{{"model_path":"/models/{MODEL}","tokenizer_path":"/models/{MODEL}","is_generation":true,"served_model_name":"{MODEL}"}}"#
    )
}

fn models() -> String {
    format!(
        r#"{{"object":"list","data":[{{"id":"{MODEL}","object":"model","created":1,"owned_by":"sglang","root":"{MODEL}","max_model_len":1048576}}]}}"#
    )
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut body = req.into_body();
    // Drain frame by frame: the stub never holds a whole 4 MB body.
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
    let (status, answer): (u16, Bytes) = match (method, path.as_str()) {
        (Method::GET, "/health" | "/health_generate") => (200, Bytes::new()),
        (Method::GET, "/get_server_info" | "/server_info") => (200, server_info().into()),
        (Method::GET, "/get_model_info" | "/model_info") => (200, model_info().into()),
        (Method::GET, "/v1/models") => (200, models().into()),
        (Method::POST, "/generate") => (200, Bytes::from_static(GENERATE.as_bytes())),
        (Method::POST, _) => (200, Bytes::from_static(CHAT.as_bytes())),
        _ => (404, Bytes::from_static(br#"{"detail":"Not Found"}"#)),
    };
    Ok(Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .header("content-type", "application/json")
        .body(Full::new(answer))
        .expect("static response parts are valid"))
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:18000".into())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?
        .block_on(serve(addr))
}

async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("bench_stub listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}
