//! The real binary and a real SIGTERM (what Kubernetes, podman and docker send
//! on stop): the guard stops accepting, lets in-flight requests finish (a long
//! SSE stream that keeps flowing through the drain among them), and exits 0
//! within `shutdown_grace_secs`; what outlives the grace is cut and the
//! process still exits within it.
//!
//! The only timing assertion is that bound: the exit comes before the grace
//! (plus `PATIENCE` of slack where the grace is meant to expire). It is the
//! process's own clock, so these stay on the real one; the drain and the
//! grace in process are `proxy::shutdown_*`, the grace on a paused clock.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use common::{MODEL, PATIENCE};

// === an upstream whose answers end when the test says so ===

/// Streams (`"stream": true`) send a chunk every 20 ms until `release`, then
/// `[DONE]`; other requests answer only after `release`. A stream with the
/// header `x-endless` never ends.
struct Upstream {
    addr: SocketAddr,
    release: watch::Sender<bool>,
    received: Arc<AtomicUsize>,
}

type Body = BoxBody<Bytes, Infallible>;

async fn start_upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = watch::channel(false);
    let received = Arc::new(AtomicUsize::new(0));
    let count = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (released, count) = (released.clone(), count.clone());
            tokio::spawn(async move {
                let service =
                    service_fn(move |req| upstream_handle(req, released.clone(), count.clone()));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Upstream {
        addr,
        release,
        received,
    }
}

async fn upstream_handle(
    req: Request<Incoming>,
    mut released: watch::Receiver<bool>,
    received: Arc<AtomicUsize>,
) -> Result<Response<Body>, Infallible> {
    let endless = req.headers().contains_key("x-endless");
    // The guard's own `GET /v1/models` (static mode) is not traffic.
    if req.method() == http::Method::GET {
        return Ok(Response::builder()
            .status(404)
            .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
            .unwrap());
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    received.fetch_add(1, Ordering::SeqCst);
    if request["stream"] != json!(true) {
        let _ = released.wait_for(|r| *r).await;
        return Ok(Response::builder()
            .header("content-type", "application/json")
            .body(
                Full::new(Bytes::from(
                    json!({"id": "cmpl-1", "object": "text_completion", "choices": [{"text": " ok"}]})
                        .to_string(),
                ))
                .boxed(),
            )
            .unwrap());
    }
    let (tx, mut rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        for i in 0.. {
            if !endless && *released.borrow() {
                break;
            }
            let chunk = Bytes::from(format!("data: {{\"chunk\":{i}}}\n\n"));
            if tx.send(chunk).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let frames = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    });
    Ok(Response::builder()
        .header("content-type", "text/event-stream")
        .body(StreamBody::new(frames).boxed())
        .unwrap())
}

// === the real binary ===

struct Running {
    child: tokio::process::Child,
    pid: String,
    proxy: SocketAddr,
    /// The guard's JSON log lines.
    logs: mpsc::UnboundedReceiver<Value>,
    _dir: tempfile::TempDir,
}

async fn spawn_guard(upstream: SocketAddr, grace_secs: u64) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let config = common::binary_config(
        dir.path(),
        upstream,
        &format!("count_workers = 2\nshutdown_grace_secs = {grace_secs}\nmax_req_input_len = 64\n"),
    );
    let common::Spawned {
        child,
        pid,
        logs,
        serving,
    } = common::spawn_binary(&config).await;
    let proxy = serving["listen"].as_str().unwrap().parse().unwrap();
    Running {
        child,
        pid,
        proxy,
        logs,
        _dir: dir,
    }
}

impl Running {
    fn sigterm(&self) -> Instant {
        let sent = Instant::now();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid])
            .status()
            .unwrap();
        assert!(status.success());
        sent
    }

    /// Waits until the proxy port refuses connections: shutdown has begun.
    async fn wait_until_closed(&self) {
        tokio::time::timeout(PATIENCE, async {
            while TcpStream::connect(self.proxy).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the proxy port closes after SIGTERM");
    }

    /// Every log message so far.
    fn messages(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(line) = self.logs.try_recv() {
            out.push(line["message"].as_str().unwrap_or("").to_string());
        }
        out
    }
}

async fn open_stream(
    http: &reqwest::Client,
    proxy: SocketAddr,
    endless: bool,
) -> reqwest::Response {
    let mut req = http
        .post(format!("http://{proxy}/v1/completions"))
        .header("content-type", "application/json")
        .body(json!({"model": MODEL, "prompt": "hello world", "stream": true}).to_string());
    if endless {
        req = req.header("x-endless", "1");
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    resp
}

/// Reads from `resp` until it has seen `n` more SSE events.
async fn read_events(resp: &mut reqwest::Response, n: usize) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while count_events(&got) < n {
            let chunk = resp.chunk().await.unwrap().expect("the stream goes on");
            got.extend_from_slice(&chunk);
        }
    })
    .await
    .expect("the stream keeps flowing");
    got
}

fn count_events(bytes: &[u8]) -> usize {
    bytes.windows(6).filter(|w| w == b"data: ").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_a_long_stream_then_exits_within_the_grace() {
    const GRACE: Duration = Duration::from_secs(30);
    let upstream = start_upstream().await;
    let mut guard = spawn_guard(upstream.addr, GRACE.as_secs()).await;
    let http = reqwest::Client::new();

    // In flight when SIGTERM arrives: a stream that has been flowing, and a
    // plain request whose answer is still to come.
    let mut stream = open_stream(&http, guard.proxy, false).await;
    read_events(&mut stream, 3).await;
    let plain = tokio::spawn({
        let (http, proxy) = (http.clone(), guard.proxy);
        async move {
            let resp = http
                .post(format!("http://{proxy}/v1/completions"))
                .header("content-type", "application/json")
                .body(json!({"model": MODEL, "prompt": "hello world"}).to_string())
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    });
    tokio::time::timeout(PATIENCE, async {
        while upstream.received.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("both requests reach the upstream");

    let sent = guard.sigterm();
    guard.wait_until_closed().await;
    assert!(
        guard.child.try_wait().unwrap().is_none(),
        "the guard exited with requests in flight"
    );
    // The stream keeps flowing while the guard drains.
    read_events(&mut stream, 5).await;
    assert!(guard.child.try_wait().unwrap().is_none());

    // The upstream finishes both; the client gets every byte.
    upstream.release.send(true).unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            rest.extend_from_slice(&chunk);
        }
    })
    .await
    .expect("the stream ends");
    assert!(
        rest.ends_with(b"data: [DONE]\n\n"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    let (status, body) = tokio::time::timeout(PATIENCE, plain)
        .await
        .expect("the plain request is answered")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["choices"][0]["text"],
        " ok"
    );

    // Nothing left in flight: the guard exits 0, well within the grace.
    let remaining = GRACE.saturating_sub(sent.elapsed());
    let status = tokio::time::timeout(remaining, guard.child.wait())
        .await
        .expect("the guard exits within shutdown_grace_secs")
        .unwrap();
    assert!(status.success(), "{status}");
    let messages = guard.messages();
    assert!(
        messages.iter().any(|m| m.starts_with("shutting down")),
        "{messages:?}"
    );
    assert_eq!(
        messages.last().map(String::as_str),
        Some("prefill-guard stopped: drained, exiting"),
        "the last line says the drain finished"
    );
    assert!(
        !messages.iter().any(|m| m.contains("grace expired")),
        "{messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cuts_a_stream_that_outlives_the_grace_and_exits_in_time() {
    const GRACE: Duration = Duration::from_secs(2);
    let upstream = start_upstream().await;
    let mut guard = spawn_guard(upstream.addr, GRACE.as_secs()).await;
    let http = reqwest::Client::new();

    let mut stream = open_stream(&http, guard.proxy, true).await;
    read_events(&mut stream, 3).await;
    let sent = guard.sigterm();
    guard.wait_until_closed().await;
    // Still flowing during the grace...
    read_events(&mut stream, 3).await;

    // ...then cut, and the process exits 0 by the end of the grace (plus
    // slack for a loaded machine).
    let status = tokio::time::timeout(GRACE + PATIENCE, guard.child.wait())
        .await
        .expect("the guard exits after the grace even with a stream open")
        .unwrap();
    assert!(status.success(), "{status}");
    let _ = sent;
    let ended = tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.chunk().await {
                Ok(Some(chunk)) => assert!(
                    !chunk.ends_with(b"data: [DONE]\n\n"),
                    "an endless stream cannot finish"
                ),
                Ok(None) | Err(_) => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the client sees the stream end");
    let messages = guard.messages();
    assert!(
        messages.iter().any(|m| m.contains("grace expired")),
        "{messages:?}"
    );
}
