//! Slow and greedy clients against the real binary on 127.0.0.1, with short
//! timeouts set by flag: stalled uploads are timed out (408) and hold only
//! the bytes they sent, slow request heads and idle keep-alive connections
//! are closed, and the connection limits refuse the excess, while everyone
//! else (and the admin port) keeps being served.
//!
//! Each timeout scenario also runs in process on tokio's paused clock
//! (`*_on_a_paused_clock`, `common::clock`), the same code with the same
//! assertions against the guard served on the test's runtime: there the
//! timeouts are virtual, so their order cannot depend on the machine's
//! load. The binary keeps its runs on the real clock: what it shows (the
//! flags, the process's own event loops) is not in process.

use crate::common;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use prefill_guard::config::ClientLimits;

use common::{
    clock, spawn_binary_with_args, start, start_mock, words, Guarded, Mock, Options, Spawned,
    MODEL, PATIENCE,
};

struct Guard {
    spawned: Spawned,
    mock: Mock,
    listen: String,
    admin: String,
    _dir: tempfile::TempDir,
}

/// Where a scenario sends its clients: the binary's ports or the
/// in-process guard's, and the mock behind either.
struct Ports<'a> {
    listen: String,
    admin: String,
    mock: &'a Mock,
}

impl Guard {
    fn ports(&self) -> Ports<'_> {
        Ports {
            listen: self.listen.clone(),
            admin: self.admin.clone(),
            mock: &self.mock,
        }
    }
}

/// The guard in process, its proxy port on the test's runtime, as the
/// binary is configured below: the demo model with a limit of 10M tokens
/// and 32 MiB bodies (the default), `client` limits.
async fn in_process(client: ClientLimits) -> Guarded {
    start(Options {
        limit: 10_000_000,
        max_body_bytes: 32 * 1024 * 1024,
        client,
        on_test_runtime: true,
        ..Options::default()
    })
    .await
}

fn ports(g: &Guarded) -> Ports<'_> {
    Ports {
        listen: g.proxy.to_string(),
        admin: g.admin.to_string(),
        mock: &g.mock,
    }
}

/// The binary with the demo model (limit 10M tokens: the 1 MB chat fits) and `args`.
async fn guard(args: &[&str]) -> Guard {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let mock = start_mock().await;
    let config = dir.path().join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\nname = \"{MODEL}\"\ntokenizer = {:?}\nmax_req_input_len = 10000000\n",
            mock.addr,
            model.display().to_string(),
        ),
    )
    .unwrap();
    let spawned = spawn_binary_with_args(&config, args).await;
    let listen = spawned.serving["listen"].as_str().unwrap().to_string();
    let admin = spawned.serving["admin_listen"]
        .as_str()
        .unwrap()
        .to_string();
    Guard {
        spawned,
        mock,
        listen,
        admin,
        _dir: dir,
    }
}

fn chat(content: &str) -> String {
    json!({"model": MODEL, "messages": [{"role": "user", "content": content}]}).to_string()
}

/// Reads until the peer closes (or `within` passes): what it sent.
async fn read_to_close(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

async fn metric(admin: &str, line_start: &str) -> f64 {
    let text = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn stalled_uploads_time_out_and_hold_only_what_they_sent() {
    let g = guard(&[
        "--body-idle-timeout-ms",
        "700",
        "--max-connections-per-client",
        "0",
    ])
    .await;
    stalled_uploads(&g.ports()).await;
    drop(g.spawned);
}

/// [`stalled_uploads_time_out_and_hold_only_what_they_sent`] in process, on
/// a paused clock. The 1 MB chat is decided on the counting pool, blocking
/// work on the test's runtime, which holds the clock while it runs: the
/// stalled uploads cannot time out while it is decided.
#[tokio::test(start_paused = true)]
async fn stalled_uploads_time_out_and_hold_only_what_they_sent_on_a_paused_clock() {
    let _ticking = clock::ticking();
    let g = in_process(ClientLimits {
        body_idle_timeout: Duration::from_millis(700),
        max_connections_per_client: 0,
        ..ClientLimits::default()
    })
    .await;
    stalled_uploads(&ports(&g)).await;
}

/// With `body_idle_timeout_ms` 700 and no per-client connection limit.
async fn stalled_uploads(g: &Ports<'_>) {
    // Eight uploads that declare 32 MiB (the body limit) and send a few bytes.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(&g.listen).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{{\"model\":",
            32 * 1024 * 1024
        );
        s.write_all(head.as_bytes()).await.unwrap();
        stalled.push(s);
    }
    // While they stall, a 1 MB chat is served: the stalled uploads hold what
    // they sent, not the 8 x 32 MiB they declared.
    let body = chat(&words(1024 * 1024 / 6));
    assert!(body.len() > 1_000_000);
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", g.listen))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // Each stalled upload is answered 408 and closed within the idle timeout (plus slack).
    for s in &mut stalled {
        let answer = read_to_close(s, PATIENCE)
            .await
            .expect("the guard closes the upload");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("client_timeout"), "{text}");
    }
    assert!(started.elapsed() < Duration::from_millis(700) + PATIENCE);
    assert_eq!(g.mock.state.count(), 1, "only the chat was forwarded");
    let text = reqwest::get(format!("http://{}/metrics", g.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let any: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("prefill_guard_rejections_total")
                && l.contains("reason=\"client_timeout\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(any, 8.0, "every timed-out upload is counted");
}

#[tokio::test]
async fn slow_request_heads_are_closed_while_others_are_served() {
    let g = guard(&[
        "--header-read-timeout-ms",
        "800",
        "--max-connections-per-client",
        "0",
    ])
    .await;
    slow_heads(&g.ports()).await;
    drop(g.spawned);
}

/// [`slow_request_heads_are_closed_while_others_are_served`] in process, on
/// a paused clock: the trickle's pace, the head timeout and the watchdog's
/// looks are all virtual.
#[tokio::test(start_paused = true)]
async fn slow_request_heads_are_closed_while_others_are_served_on_a_paused_clock() {
    let _ticking = clock::ticking();
    let g = in_process(ClientLimits {
        header_read_timeout: Duration::from_millis(800),
        max_connections_per_client: 0,
        ..ClientLimits::default()
    })
    .await;
    slow_heads(&ports(&g)).await;
}

/// With `header_read_timeout_ms` 800 and no per-client connection limit.
async fn slow_heads(g: &Ports<'_>) {
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(&g.listen).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nho")
            .await
            .unwrap();
        slow.push(s);
    }
    // One more byte each, every 200 ms: never a whole head.
    let trickle = tokio::spawn(async move {
        let mut closed = 0;
        let mut open: Vec<TcpStream> = slow;
        while !open.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut still = Vec::new();
            for mut s in open {
                let mut buf = [0u8; 64];
                match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
                    _ => {
                        if s.write_all(b"s").await.is_ok() {
                            still.push(s)
                        } else {
                            closed += 1
                        }
                    }
                }
            }
            open = still;
            if closed == 300 {
                break;
            }
        }
        closed
    });
    let client = reqwest::Client::new();
    for _ in 0..5 {
        let r = client
            .post(format!("http://{}/v1/chat/completions", g.listen))
            .header("content-type", "application/json")
            .body(chat("hello there"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let h = client
            .get(format!("http://{}/healthz", g.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(h.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed = tokio::time::timeout(PATIENCE * 2, trickle)
        .await
        .expect("the slow heads are closed")
        .unwrap();
    assert_eq!(closed, 300);
    // Within 1.25 x the head timeout, plus the trickle's own pace and slack.
    assert!(
        started.elapsed() < Duration::from_millis(1000) + PATIENCE,
        "{:?}",
        started.elapsed()
    );
    let head = metric(
        &g.admin,
        "prefill_guard_client_timeouts_total{listener=\"proxy\",phase=\"head\"}",
    )
    .await;
    assert_eq!(head, 300.0);
}

#[tokio::test]
async fn an_idle_keepalive_connection_outlives_the_head_timeout_then_closes() {
    let g = guard(&[
        "--header-read-timeout-ms",
        "300",
        "--keepalive-idle-timeout-ms",
        "1500",
    ])
    .await;
    idle_keepalive(&g.ports()).await;
    drop(g.spawned);
}

/// [`an_idle_keepalive_connection_outlives_the_head_timeout_then_closes`]
/// in process, on a paused clock: the 700 ms pauses and both timeouts are
/// virtual, so no load can stretch a pause past the idle timeout.
#[tokio::test(start_paused = true)]
async fn an_idle_keepalive_connection_outlives_the_head_timeout_then_closes_on_a_paused_clock() {
    let _ticking = clock::ticking();
    let g = in_process(ClientLimits {
        header_read_timeout: Duration::from_millis(300),
        keepalive_idle_timeout: Duration::from_millis(1500),
        ..ClientLimits::default()
    })
    .await;
    idle_keepalive(&ports(&g)).await;
}

/// With `header_read_timeout_ms` 300 and `keepalive_idle_timeout_ms` 1500.
async fn idle_keepalive(g: &Ports<'_>) {
    let mut s = TcpStream::connect(&g.listen).await.unwrap();
    let body = chat("hello");
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..2 {
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 65536];
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        // Idle for longer than the head timeout: still open.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let idle_from = Instant::now();
    let rest = read_to_close(&mut s, PATIENCE)
        .await
        .expect("closed when idle");
    assert!(rest.is_empty());
    assert!(idle_from.elapsed() < Duration::from_millis(1500) + PATIENCE);
    let idle = metric(
        &g.admin,
        "prefill_guard_client_timeouts_total{listener=\"proxy\",phase=\"idle\"}",
    )
    .await;
    assert_eq!(idle, 1.0);
}

#[tokio::test]
async fn connection_limits_refuse_the_excess_and_serve_the_rest() {
    let g = guard(&[
        "--max-connections",
        "6",
        "--max-connections-per-client",
        "4",
        "--header-read-timeout-ms",
        "60000",
    ])
    .await;
    // Four idle connections from 127.0.0.1: the per-client limit.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(&g.listen).await.unwrap());
    }
    // The guard admits on accept: wait until it has seen them all.
    common::sglang::eventually("four connections open", || async {
        metric(
            &g.admin,
            "prefill_guard_open_connections{listener=\"proxy\"}",
        )
        .await
            == 4.0
    })
    .await;
    let mut fifth = TcpStream::connect(&g.listen).await.unwrap();
    let _ = fifth
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let answer = read_to_close(&mut fifth, PATIENCE)
        .await
        .expect("closed at once");
    assert!(answer.is_empty(), "refused without an answer");
    assert_eq!(
        metric(
            &g.admin,
            "prefill_guard_connections_refused_total{listener=\"proxy\",reason=\"max_connections_per_client\"}"
        )
        .await,
        1.0
    );
    // From another loopback address the total limit (6) applies.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut a = other.connect(g.listen.parse().unwrap()).await.unwrap();
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let _b = other.connect(g.listen.parse().unwrap()).await.unwrap();
    common::sglang::eventually("six connections open", || async {
        metric(
            &g.admin,
            "prefill_guard_open_connections{listener=\"proxy\"}",
        )
        .await
            == 6.0
    })
    .await;
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.3:0".parse().unwrap()).unwrap();
    let mut seventh = other.connect(g.listen.parse().unwrap()).await.unwrap();
    let answer = read_to_close(&mut seventh, PATIENCE)
        .await
        .expect("closed at once");
    assert!(answer.is_empty());
    assert_eq!(
        metric(
            &g.admin,
            "prefill_guard_connections_refused_total{listener=\"proxy\",reason=\"max_connections\"}"
        )
        .await,
        1.0
    );
    // The admitted connections are served, and the admin port is never limited.
    let body = chat("hello");
    a.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut a, PATIENCE).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    // A freed slot is taken again.
    drop(held.pop());
    common::sglang::eventually("a slot freed", || async {
        metric(
            &g.admin,
            "prefill_guard_open_connections{listener=\"proxy\"}",
        )
        .await
            <= 4.0
    })
    .await;
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", g.listen))
        .header("content-type", "application/json")
        .body(chat("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(g.spawned);
}
