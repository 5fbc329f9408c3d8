//! The real binary in front of an upstream that misbehaves on purpose:
//! refused connections, resets mid-response (SSE included), a router that
//! stops reading the request body, one that answers headers and then
//! stalls, and bursts of 5xx. Each has the client-visible outcome a client
//! can act on (a 502/504, an SSE error event, a cut connection: never a
//! hang), and no request ever reaches the upstream twice.
//!
//! The two faults that only a timeout ends (a router that stops reading, a
//! stream that stalls) also run in process on tokio's paused clock
//! (`*_on_a_paused_clock`, `common::clock`): the same code and assertions
//! against the guard served on the test's runtime, where the response and
//! idle timeouts are virtual. The binary keeps its runs on the real clock.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use common::{clock, spawn_binary_with_args, start, Guarded, Options, Spawned, MODEL, PATIENCE};

/// What the upstream does with each request.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Sends part of a declared-length body, then resets.
    ResetMidBody,
    /// Starts an event stream, sends one event, then resets.
    ResetMidStream,
    /// Reads the head only and never answers.
    StopReading,
    /// Starts an event stream, sends one event, then goes silent.
    StallStream,
    /// Answers 503 to every request.
    Unavailable,
}

struct Upstream {
    addr: String,
    /// Request heads received: each forwarded request once.
    heads: Arc<AtomicUsize>,
}

async fn upstream(fault: Fault) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let heads = Arc::new(AtomicUsize::new(0));
    let seen = heads.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            tokio::spawn(serve(s, fault, seen));
        }
    });
    Upstream { addr, heads }
}

async fn serve(mut s: TcpStream, fault: Fault, heads: Arc<AtomicUsize>) {
    loop {
        // The head, then (unless the fault is to stop reading) the body.
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        let end = loop {
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        };
        // The guard's own `GET /v1/models` (static mode) is not traffic.
        if got.starts_with(b"GET ") {
            let _ = s
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        }
        heads.fetch_add(1, Ordering::SeqCst);
        if let Fault::StopReading = fault {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut have = got.len() - end;
        while have < length {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
        }
        let sse_head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let event = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let chunk = format!("{:x}\r\n{event}\r\n", event.len());
        match fault {
            Fault::ResetMidBody => {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"id\":")
                    .await;
                reset(s);
                return;
            }
            Fault::ResetMidStream => {
                let _ = s.write_all(format!("{sse_head}{chunk}").as_bytes()).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                reset(s);
                return;
            }
            Fault::StallStream => {
                let _ = s.write_all(format!("{sse_head}{chunk}").as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Fault::Unavailable => {
                let body = "{\"error\":{\"message\":\"busy\"}}";
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
            Fault::StopReading => unreachable!(),
        }
    }
}

/// Closes with RST (linger 0), as a crashed router would.
#[allow(deprecated)] // linger 0 is the point: the close is a reset, not a blocking drain.
fn reset(s: TcpStream) {
    let _ = s.set_linger(Some(Duration::ZERO));
    drop(s);
}

struct Guard {
    spawned: Spawned,
    listen: String,
    admin: String,
    _dir: tempfile::TempDir,
}

/// The real binary in front of `upstream`. The limit is 100M tokens: the
/// 2M-word prompt's upper bound then decides it in milliseconds, where
/// counting it exactly takes seconds of CPU at the counting threads' lowered
/// priority, which on a loaded machine ran past the 504 test's bound. What is
/// counted, and how, is not what these tests are about.
async fn guard(upstream: &str, args: &[&str]) -> Guard {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let config = dir.path().join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\nname = \"{MODEL}\"\ntokenizer = {:?}\nmax_req_input_len = 100000000\n",
            model.display().to_string(),
        ),
    )
    .unwrap();
    let spawned = spawn_binary_with_args(&config, args).await;
    Guard {
        listen: spawned.serving["listen"].as_str().unwrap().to_string(),
        admin: spawned.serving["admin_listen"]
            .as_str()
            .unwrap()
            .to_string(),
        spawned,
        _dir: dir,
    }
}

/// The guard in process in front of `up`, its proxy port on the test's
/// runtime, configured as the binary is above (32 MiB bodies, a 100M-token
/// limit), with `opts` for the rest.
async fn in_process(up: &Upstream, opts: Options) -> Guarded {
    start(Options {
        upstream: Some(format!("http://{}", up.addr)),
        limit: 100_000_000,
        max_body_bytes: 32 * 1024 * 1024,
        on_test_runtime: true,
        ..opts
    })
    .await
}

fn chat(stream: bool, content: &str) -> String {
    json!({"model": MODEL, "stream": stream, "messages": [{"role": "user", "content": content}]})
        .to_string()
}

async fn post(listen: &str, body: String) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{listen}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the guard answers")
}

#[tokio::test]
async fn a_refused_connection_is_a_502() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let g = guard(&addr, &[]).await;
    let r = post(&g.listen, chat(false, "hello")).await;
    assert_eq!(r.status(), 502);
    let body: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "upstream_unavailable");
    // The admin port is unaffected.
    let h = reqwest::get(format!("http://{}/healthz", g.admin))
        .await
        .unwrap();
    assert_eq!(h.status(), 200);
    drop(g.spawned);
}

#[tokio::test]
async fn a_reset_mid_body_cuts_the_client_and_a_reset_mid_stream_ends_it_with_an_error_event() {
    let up = upstream(Fault::ResetMidBody).await;
    let g = guard(&up.addr, &[]).await;
    let r = post(&g.listen, chat(false, "hello")).await;
    assert_eq!(r.status(), 200, "the headers had arrived");
    assert!(
        r.bytes().await.is_err(),
        "a truncated body is not passed off as a whole one"
    );
    assert_eq!(up.heads.load(Ordering::SeqCst), 1, "not retried");
    drop(g.spawned);

    let up = upstream(Fault::ResetMidStream).await;
    let g = guard(&up.addr, &[]).await;
    let r = post(&g.listen, chat(true, "hello")).await;
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(PATIENCE, r.text())
        .await
        .expect("the stream ends, it does not hang")
        .expect("the stream ends cleanly");
    assert!(text.contains("\"content\":\"hi\""), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("data: {\"error\""), "{text}");
    assert!(!text.contains("[DONE]"));
    assert_eq!(up.heads.load(Ordering::SeqCst), 1, "not retried");
    drop(g.spawned);
}

#[tokio::test]
async fn a_router_that_stops_reading_is_a_504_within_the_response_timeout() {
    let up = upstream(Fault::StopReading).await;
    let g = guard(&up.addr, &["--upstream-response-timeout-secs", "2"]).await;
    router_stops_reading(&g.listen, &up).await;
    drop(g.spawned);
}

/// [`a_router_that_stops_reading_is_a_504_within_the_response_timeout`] in
/// process, on a paused clock. The 12 MB prompt is decided on the counting
/// pool, blocking work on the test's runtime that holds the clock while it
/// runs; the 2 s the guard then waits on a blocked write are virtual.
#[tokio::test(start_paused = true)]
async fn a_router_that_stops_reading_is_a_504_within_the_response_timeout_on_a_paused_clock() {
    let _ticking = clock::ticking();
    let up = upstream(Fault::StopReading).await;
    let g = in_process(
        &up,
        Options {
            response_timeout: Duration::from_secs(2),
            ..Options::default()
        },
    )
    .await;
    router_stops_reading(&g.proxy.to_string(), &up).await;
}

/// With `upstream_response_timeout_secs` 2.
async fn router_stops_reading(listen: &str, up: &Upstream) {
    // Larger than the socket buffers: the guard's write blocks too.
    let started = Instant::now();
    let r = post(listen, chat(false, &common::words(2_000_000))).await;
    assert_eq!(r.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(2) + PATIENCE);
    assert_eq!(up.heads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_that_stalls_ends_with_an_error_event_after_the_idle_timeout() {
    let up = upstream(Fault::StallStream).await;
    let g = guard(&up.addr, &["--upstream-idle-timeout-secs", "1"]).await;
    stalled_stream(&g.listen, &up).await;
    drop(g.spawned);
}

/// [`a_stream_that_stalls_ends_with_an_error_event_after_the_idle_timeout`]
/// in process, on a paused clock: the idle timeout and the upstream's
/// silence are virtual.
#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_ends_with_an_error_event_after_the_idle_timeout_on_a_paused_clock() {
    let _ticking = clock::ticking();
    let up = upstream(Fault::StallStream).await;
    let g = in_process(
        &up,
        Options {
            upstream_idle_timeout: Some(Duration::from_secs(1)),
            ..Options::default()
        },
    )
    .await;
    stalled_stream(&g.proxy.to_string(), &up).await;
}

/// With `upstream_idle_timeout_secs` 1.
async fn stalled_stream(listen: &str, up: &Upstream) {
    let started = Instant::now();
    let r = post(listen, chat(true, "hello")).await;
    assert_eq!(r.status(), 200);
    let text = tokio::time::timeout(PATIENCE * 2, r.text())
        .await
        .expect("the stalled stream is ended")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(text.contains("upstream_idle_timeout_secs"), "{text}");
    assert_eq!(up.heads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_burst_of_5xx_is_passed_through_and_never_retried() {
    let up = upstream(Fault::Unavailable).await;
    let g = guard(&up.addr, &[]).await;
    for _ in 0..20 {
        let r = post(&g.listen, chat(false, "hello")).await;
        assert_eq!(r.status(), 503);
        let body: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(
            body["error"]["message"], "busy",
            "the upstream's own answer"
        );
    }
    assert_eq!(
        up.heads.load(Ordering::SeqCst),
        20,
        "each request forwarded once"
    );
    // Over-limit prompts still never reach it.
    drop(g.spawned);
}
