//! The real guard over HTTP, in front of a recording mock SGLang.
//!
//! Token-id inputs count without a tokenizer, so the exact-boundary tests use
//! them; the text and chat tests need the demo model's tokenizer and template.
//!
//! The tests that wait on the proxy's own timers (the response timeout, the
//! shutdown grace) run on tokio's paused clock with the proxy port on the
//! test's runtime (`common::clock`): their token-id prompts are counted in
//! place, so nothing they wait on is off that runtime. The rest wait on no
//! timer of the guard's and keep the proxy on event loops of its own, as
//! production serves it.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{
    clock, ids, sample, start, start_with_dead_upstream, words, Guarded, Options, MODEL, PATIENCE,
};

const LIMIT: usize = 8;

async fn guard() -> Guarded {
    start(Options {
        limit: LIMIT,
        ..Options::default()
    })
    .await
}

/// Reads from `stream` until `needle` has arrived; returns everything read.
async fn read_until(stream: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(PATIENCE, async {
        while !seen.windows(needle.len()).any(|w| w == needle) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "connection closed before {:?}",
                String::from_utf8_lossy(needle)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the bytes arrive");
    seen
}

// === allowed requests arrive, as checked ===

#[tokio::test]
async fn ids_under_the_limit_arrive_equal_in_meaning() {
    let g = guard().await;
    let body = json!({"model": MODEL, "input_ids": ids(3), "sampling_params": {"max_new_tokens": 4, "temperature": 0.5}});
    let a = g.post("/generate", &body).await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert_eq!(a.json()["text"], " ok");
    let got = g.mock.state.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].target, "/generate");
    assert_eq!(got[0].json(), body);
    assert_eq!(got[0].headers["content-type"], "application/json");
    assert_eq!(
        got[0].headers["content-length"],
        got[0].body.len().to_string()
    );
}

#[tokio::test]
async fn exact_boundary_on_generate_ids() {
    let g = guard().await;
    let fits = g
        .post("/generate", &json!({"input_ids": ids(LIMIT - 1)}))
        .await;
    assert_eq!(fits.status, 200);
    assert_eq!(g.mock.state.count(), 1);

    let over = g.post("/generate", &json!({"input_ids": ids(LIMIT)})).await;
    assert_eq!(over.status, 400);
    // SGLang's own shape on /generate: exactly {"error": {"message": ...}}.
    let v = over.json();
    assert_eq!(v.as_object().unwrap().len(), 1);
    assert_eq!(v["error"].as_object().unwrap().len(), 1);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("Input length ({LIMIT} tokens)")),
        "{msg}"
    );
    assert_eq!(
        g.mock.state.count(),
        1,
        "a refused request never reaches upstream"
    );
}

#[tokio::test]
async fn exact_boundary_on_completions_ids() {
    let g = guard().await;
    let fits = g
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": ids(LIMIT - 1)}),
        )
        .await;
    assert_eq!(fits.status, 200);

    let over = g
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": ids(LIMIT)}),
        )
        .await;
    assert_eq!(over.status, 400);
    let e = &over.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["param"], "prompt");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains(&format!("maximum context length is {LIMIT} tokens")));
    assert_eq!(over.headers["content-type"], "application/json");
    assert_eq!(g.mock.state.count(), 1);
}

#[tokio::test]
async fn one_over_long_element_refuses_the_whole_batch() {
    let g = guard().await;
    let batch = json!({"prompt": [ids(2), ids(LIMIT), ids(1)]});
    let a = g.post("/v1/completions", &batch).await;
    assert_eq!(a.status, 400);
    assert_eq!(a.error_code(), "context_length_exceeded");
    let a = g
        .post("/generate", &json!({"input_ids": [ids(1), ids(LIMIT + 3)]}))
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(g.mock.state.count(), 0);

    let fits = g
        .post("/generate", &json!({"input_ids": [ids(LIMIT - 1), ids(1)]}))
        .await;
    assert_eq!(fits.status, 200);
    assert_eq!(g.mock.state.count(), 1);
}

/// Waits on counting: needs the demo tokenizer (one token per word).
#[tokio::test]
async fn exact_boundary_on_generate_text() {
    let g = guard().await;
    let fits = g
        .post("/generate", &json!({"text": words(LIMIT - 1)}))
        .await;
    assert_eq!(fits.status, 200, "{}", String::from_utf8_lossy(&fits.body));
    let over = g.post("/generate", &json!({"text": words(LIMIT)})).await;
    assert_eq!(over.status, 400, "{}", String::from_utf8_lossy(&over.body));
    assert_eq!(g.mock.state.count(), 1);
}

/// Waits on counting: needs the demo tokenizer and ChatML template
/// (`n` words in one user message are `n + 5` tokens).
#[tokio::test]
async fn exact_boundary_on_chat() {
    let g = guard().await;
    let chat = common::bodies::chat;
    let fits = g.post("/v1/chat/completions", &chat(LIMIT - 1 - 5)).await;
    assert_eq!(fits.status, 200, "{}", String::from_utf8_lossy(&fits.body));
    assert_eq!(g.mock.state.requests()[0].json(), chat(LIMIT - 1 - 5));

    let over = g.post("/v1/chat/completions", &chat(LIMIT - 5)).await;
    assert_eq!(over.status, 400, "{}", String::from_utf8_lossy(&over.body));
    let e = &over.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["param"], "messages");
    assert_eq!(g.mock.state.count(), 1);
}

// === refusals that never reach upstream ===

#[tokio::test]
async fn malformed_json_and_duplicate_keys_are_refused() {
    let g = guard().await;
    let a = g.post_raw("/v1/completions", r#"{"prompt": [1, 2"#).await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (400, "invalid_json")
    );
    let a = g
        .post_raw(
            "/v1/completions",
            r#"{"prompt": [1], "prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9]}"#,
        )
        .await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (400, "duplicate_key")
    );
    let a = g
        .send(
            g.http
                .post(g.url("/v1/completions"))
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await;
    assert_eq!(a.status, 415);
    assert_eq!(g.mock.state.count(), 0);
}

#[tokio::test]
async fn compressed_bodies_are_refused() {
    let g = guard().await;
    let req = g
        .http
        .post(g.url("/generate"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(json!({"input_ids": [1]}).to_string());
    assert_eq!(g.send(req).await.status, 415);
    assert_eq!(g.mock.state.count(), 0);
}

#[tokio::test]
async fn bodies_over_the_cap_are_refused_with_413() {
    let g = start(Options {
        max_body_bytes: 1024,
        ..Options::default()
    })
    .await;
    // Declared by Content-Length.
    let big = json!({"input_ids": [1], "pad": "x".repeat(2048)}).to_string();
    let a = g.post_raw("/v1/completions", big.clone()).await;
    assert_eq!(a.status, 413);
    assert_eq!(a.error_code(), "body_too_large");
    // Chunked, so only the bytes received tell.
    let chunks: Vec<Result<Bytes, std::io::Error>> = big
        .into_bytes()
        .chunks(256)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let a = g
        .post_raw(
            "/generate",
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)),
        )
        .await;
    assert_eq!(a.status, 413);
    assert_eq!(g.mock.state.count(), 0);
}

#[tokio::test]
async fn unknown_routes_and_methods_are_refused() {
    let g = guard().await;
    // SGLang's admin and internal endpoints are not modelled: default deny.
    for path in [
        "/flush_cache",
        "/update_weights_from_disk",
        "/abort_request",
    ] {
        let a = g.post(path, &json!({"input": "x"})).await;
        assert_eq!(
            (a.status.as_u16(), a.error_code().as_str()),
            (404, "route_not_allowed"),
            "{path}"
        );
    }
    assert_eq!(g.send(g.http.get(g.url("/server_info"))).await.status, 404);
    // Metrics live on the admin port only.
    assert_eq!(g.send(g.http.get(g.url("/metrics"))).await.status, 404);
    assert_eq!(g.send(g.http.get(g.url("/generate"))).await.status, 405);
    assert_eq!(g.send(g.http.get(g.url("/v1//models"))).await.status, 400);
    assert_eq!(g.mock.state.count(), 0);
}

// === what is forwarded, and how ===

#[tokio::test]
async fn pass_through_routes_keep_their_query_inspected_routes_do_not() {
    let g = guard().await;
    let a = g.send(g.http.get(g.url("/v1/models?verbose=1"))).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["data"][0]["id"], MODEL);
    assert_eq!(g.send(g.http.get(g.url("/health"))).await.status, 200);
    let a = g
        .post("/v1/%63ompletions/?x=1", &json!({"prompt": [1]}))
        .await;
    assert_eq!(a.status, 200);
    let targets: Vec<String> = g
        .mock
        .state
        .requests()
        .into_iter()
        .map(|r| r.target)
        .collect();
    assert_eq!(
        targets,
        ["/v1/models?verbose=1", "/health", "/v1/completions"]
    );
}

#[tokio::test]
async fn forwarding_headers() {
    let g = guard().await;
    let req = g
        .http
        .post(g.url("/generate"))
        .header("content-type", "application/json; charset=utf-8")
        .header("authorization", "Bearer sk-test")
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-request-id", "client-id-1")
        .header("connection", "x-hop")
        .header("x-hop", "1")
        .body(json!({"input_ids": [1, 2]}).to_string());
    let a = g.send(req).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["x-request-id"], "client-id-1");
    let up = &g.mock.state.requests()[0].headers;
    assert_eq!(up["x-request-id"], "client-id-1");
    assert_eq!(up["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(up["x-forwarded-proto"], "http");
    assert_eq!(up["authorization"], "Bearer sk-test");
    assert_eq!(up["host"], g.mock.addr.to_string());
    assert_eq!(up["content-type"], "application/json");
    assert!(up.get("proxy-authorization").is_none());
    assert!(
        up.get("x-hop").is_none(),
        "headers named by Connection are hop-by-hop"
    );
}

#[tokio::test]
async fn request_id_is_created_when_missing_and_on_refusals() {
    let g = guard().await;
    let a = g.post("/generate", &json!({"input_ids": [1]})).await;
    let id = a.headers["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 36);
    assert_eq!(
        g.mock.state.requests()[0].headers["x-request-id"],
        id.as_str()
    );
    let refused = g.post("/generate", &json!({"input_ids": ids(LIMIT)})).await;
    assert!(refused.headers.contains_key("x-request-id"));
    assert_ne!(refused.headers["x-request-id"], id.as_str());
}

#[tokio::test]
async fn sse_arrives_incrementally() {
    let g = guard().await;
    let req = g
        .http
        .post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .header("x-mock", "hold")
        .body(json!({"prompt": [1, 2], "stream": true}).to_string());
    let mut resp = tokio::time::timeout(PATIENCE, req.send())
        .await
        .expect("headers arrive")
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let first = tokio::time::timeout(PATIENCE, resp.chunk())
        .await
        .expect("the first chunk arrives alone")
        .unwrap();
    assert_eq!(first.as_deref(), Some(&b"data: {\"chunk\":0}\n\n"[..]));
    assert!(
        !g.mock.state.last_chunk_sent.load(Ordering::SeqCst),
        "the first chunk came before the last was sent"
    );
    g.mock.state.release.notify_one();
    let mut rest = Vec::new();
    while let Some(c) = tokio::time::timeout(PATIENCE, resp.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        rest.extend_from_slice(&c);
    }
    assert_eq!(rest, b"data: {\"chunk\":1}\n\ndata: [DONE]\n\n");
}

#[tokio::test]
async fn h2c_prior_knowledge_works() {
    let g = guard().await;
    let client = HyperClient::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = http::Request::post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({"prompt": [1, 2, 3]}).to_string(),
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("x-request-id"));
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["object"], "text_completion");

    let over = http::Request::post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({"prompt": ids(LIMIT)}).to_string(),
        )))
        .unwrap();
    assert_eq!(client.request(over).await.unwrap().status(), 400);
    assert_eq!(g.mock.state.count(), 1);
    assert_eq!(g.mock.state.requests()[0].target, "/v1/completions");
}

// === upstream failures ===

#[tokio::test]
async fn upstream_down_is_502() {
    let g = start_with_dead_upstream().await;
    let a = g.post("/generate", &json!({"input_ids": [1]})).await;
    assert_eq!(a.status, 502);
    assert!(a.json()["error"]["message"].is_string());
    let a = g.post("/v1/completions", &json!({"prompt": [1]})).await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (502, "upstream_unavailable")
    );
}

/// The guard admits a pass-through request whose target, under the
/// upstream's base path, is too long to send: the proxy refuses it, and it
/// counts as a refusal (not an upstream error) under its route.
#[tokio::test]
async fn an_admitted_target_too_long_for_upstream_is_refused() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let g = start(Options {
        upstream: Some(format!("http://{addr}/base")),
        ..Options::default()
    })
    .await;
    // The longest target a URI may have (too long for a client library's
    // absolute URL, so written by hand); `/base` in front makes it too long.
    let query = "a".repeat(65_534 - "/health?".len());
    let mut stream = TcpStream::connect(g.proxy).await.unwrap();
    let request = format!("GET /health?{query} HTTP/1.1\r\nHost: guard\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_until(&mut stream, b"\r\n\r\n").await;
    let status_line = head.split(|&b| b == b'\r').next().unwrap();
    assert_eq!(
        String::from_utf8_lossy(status_line),
        "HTTP/1.1 400 Bad Request"
    );
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            "prefill_guard_requests_total{mode=\"proxy\",route=\"/health\",model=\"\",decision=\"refused\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &m,
            "prefill_guard_rejections_total{mode=\"proxy\",route=\"/health\",model=\"\",reason=\"bad_path\"}"
        ),
        1.0
    );
    assert!(!m.contains("prefill_guard_upstream_errors_total{"), "{m}");
}

/// On a paused clock: the 300 ms timeout and the mock's 30 s delay are
/// both virtual, so no load can change which ends first.
#[tokio::test(start_paused = true)]
async fn upstream_slower_than_the_response_timeout_is_504() {
    let _ticking = clock::ticking();
    let g = start(Options {
        response_timeout: Duration::from_millis(300),
        on_test_runtime: true,
        ..Options::default()
    })
    .await;
    let req = g
        .http
        .post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .header("x-mock", "slow")
        .body(json!({"prompt": [1]}).to_string());
    let a = g.send(req).await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (504, "upstream_timeout")
    );
}

// === a client that goes away cancels the upstream request ===

async fn raw_request(g: &Guarded, mode: &str, body: &Value) -> TcpStream {
    let mut s = TcpStream::connect(g.proxy).await.unwrap();
    let body = body.to_string();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: guard\r\ncontent-type: application/json\r\n\
         x-mock: {mode}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    s
}

#[tokio::test]
async fn client_disconnect_mid_stream_cancels_upstream() {
    let g = guard().await;
    let mut s = raw_request(&g, "endless", &json!({"prompt": [1], "stream": true})).await;
    read_until(&mut s, b"data: {\"chunk\":1}").await;
    drop(s);
    tokio::time::timeout(PATIENCE, g.mock.state.stream_cancelled.notified())
        .await
        .expect("the upstream stream is dropped when the client goes away");
}

#[tokio::test]
async fn client_disconnect_before_headers_cancels_upstream() {
    let g = guard().await;
    let s = raw_request(&g, "hang", &json!({"prompt": [1]})).await;
    tokio::time::timeout(PATIENCE, g.mock.state.received.notified())
        .await
        .expect("the request is forwarded");
    drop(s);
    tokio::time::timeout(PATIENCE, g.mock.state.request_dropped.notified())
        .await
        .expect("the upstream request is dropped when the client goes away");
}

// === admin port ===

#[tokio::test]
async fn rejections_move_the_metrics() {
    let g = guard().await;
    let refused = format!("prefill_guard_rejections_total{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\",reason=\"context_length_exceeded\"}}");
    let requests = format!("prefill_guard_requests_total{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\",decision=\"refused\"}}");
    let allowed = format!("prefill_guard_requests_total{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\",decision=\"allowed\"}}");
    let before = g.metrics().await;
    assert_eq!(
        sample(
            &before,
            &format!("prefill_guard_limit_tokens{{model=\"{MODEL}\"}}")
        ),
        LIMIT as f64
    );
    assert_eq!(
        sample(&before, "prefill_guard_build_info{version=\"0.1.0\"}"),
        1.0
    );

    g.post("/generate", &json!({"input_ids": ids(LIMIT)})).await;
    g.post("/generate", &json!({"input_ids": ids(2)})).await;
    g.post("/v1/nope", &json!({})).await;
    let after = g.metrics().await;
    assert_eq!(sample(&after, &refused) - sample(&before, &refused), 1.0);
    assert_eq!(sample(&after, &requests) - sample(&before, &requests), 1.0);
    assert_eq!(sample(&after, &allowed) - sample(&before, &allowed), 1.0);
    assert_eq!(
        sample(&after, "prefill_guard_rejections_total{mode=\"proxy\",route=\"other\",model=\"\",reason=\"route_not_allowed\"}"),
        1.0
    );
    let tokens = format!(
        "prefill_guard_prompt_tokens_count{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\"}}"
    );
    assert_eq!(sample(&after, &tokens), 2.0);
    assert_eq!(
        sample(
            &after,
            "prefill_guard_upstream_duration_seconds_count{route=\"/generate\"}"
        ),
        1.0
    );
    assert_eq!(sample(&after, "prefill_guard_in_flight_requests"), 0.0);
}

#[tokio::test]
async fn in_flight_gauge_covers_a_streamed_answer() {
    let g = guard().await;
    let req = g
        .http
        .post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .header("x-mock", "hold")
        .body(json!({"prompt": [1], "stream": true}).to_string());
    let mut resp = req.send().await.unwrap();
    resp.chunk().await.unwrap();
    assert_eq!(
        sample(&g.metrics().await, "prefill_guard_in_flight_requests"),
        1.0
    );
    g.mock.state.release.notify_one();
    while resp.chunk().await.unwrap().is_some() {}
    // The gauge drops once hyper has finished the response, right after the last byte.
    tokio::time::timeout(PATIENCE, async {
        while sample(&g.metrics().await, "prefill_guard_in_flight_requests") != 0.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the gauge returns to 0");
}

#[tokio::test]
async fn probes_on_the_admin_port() {
    let g = guard().await;
    let get = |p: &str| g.http.get(format!("http://{}{p}", g.admin)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let m = get("/metrics").await.unwrap();
    assert_eq!(
        m.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(get("/generate").await.unwrap().status(), 404);
}

#[tokio::test]
async fn not_ready_and_refusing_until_a_limit_is_known() {
    let g = start(Options {
        limit_known: false,
        ..Options::default()
    })
    .await;
    let readyz = || g.http.get(format!("http://{}/readyz", g.admin)).send();
    assert_eq!(readyz().await.unwrap().status(), 503);
    let a = g.post("/v1/completions", &json!({"prompt": [1]})).await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (503, "limit_unknown")
    );
    assert_eq!(a.headers["retry-after"], "5");
    assert_eq!(g.mock.state.count(), 0);

    g.profiles.set_limit(MODEL, LIMIT);
    assert_eq!(readyz().await.unwrap().status(), 200);
    assert_eq!(
        g.post("/v1/completions", &json!({"prompt": [1]}))
            .await
            .status,
        200
    );
    let text = g.metrics().await;
    assert_eq!(
        sample(
            &text,
            &format!("prefill_guard_limit_tokens{{model=\"{MODEL}\"}}")
        ),
        LIMIT as f64
    );
}

/// `promtool check metrics` (Debian package `prometheus`, installed by
/// `scripts/install-test-deps.sh`) accepts the exposition, with every metric
/// family populated. Skipped when promtool is missing, except under CI (`CI`
/// set) or with `PROMTOOL_REQUIRED`, where a missing promtool fails.
///
/// On a paused clock, for its 504 (as `upstream_slower_than_the_response_timeout_is_504`);
/// promtool runs synchronously, holding the runtime and its clock.
#[tokio::test(start_paused = true)]
async fn metrics_pass_promtool() {
    let _ticking = clock::ticking();
    let g = start(Options {
        limit: LIMIT,
        response_timeout: Duration::from_millis(300),
        on_test_runtime: true,
        ..Options::default()
    })
    .await;
    g.post("/generate", &json!({"input_ids": ids(LIMIT)})).await;
    g.post("/generate", &json!({"input_ids": ids(2)})).await;
    g.post("/x", &json!({})).await;
    let slow = g
        .http
        .post(g.url("/generate"))
        .header("content-type", "application/json")
        .header("x-mock", "slow");
    assert_eq!(g.send(slow.body(r#"{"input_ids": [1]}"#)).await.status, 504);
    let text = g.metrics().await;
    for family in [
        "rejections_total",
        "upstream_errors_total",
        "prompt_tokens_bucket",
        "upstream_duration_seconds_count",
    ] {
        assert!(
            text.contains(&format!("prefill_guard_{family}{{")),
            "{family} has samples"
        );
    }
    common::promtool_check_metrics(&text);
}

// === shutdown ===

#[tokio::test]
async fn shutdown_drains_an_open_stream() {
    let mut g = guard().await;
    let req = g
        .http
        .post(g.url("/v1/completions"))
        .header("content-type", "application/json")
        .header("x-mock", "hold")
        .body(json!({"prompt": [1], "stream": true}).to_string());
    let mut resp = req.send().await.unwrap();
    resp.chunk().await.unwrap();
    let (proxy, mock) = (g.proxy, g.mock.state.clone());
    let done = {
        let shutdown = g.shutdown();
        tokio::pin!(shutdown);
        // New connections are refused once shutdown has begun...
        tokio::select! {
            _ = &mut shutdown => panic!("run returned with a stream still open"),
            refused = tokio::time::timeout(PATIENCE, async {
                while TcpStream::connect(proxy).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }) => refused.expect("the proxy port closes"),
        }
        // ...while the open stream finishes.
        mock.release.notify_one();
        let mut rest = Vec::new();
        while let Some(c) = resp.chunk().await.unwrap() {
            rest.extend_from_slice(&c);
        }
        assert!(rest.ends_with(b"data: [DONE]\n\n"));
        shutdown.await
    };
    done.unwrap();
}

/// On a paused clock: the 200 ms grace, the endless stream's 20 ms pace
/// and the waits are all virtual.
#[tokio::test(start_paused = true)]
async fn shutdown_gives_up_on_streams_after_the_grace() {
    let _ticking = clock::ticking();
    let mut g = start(Options {
        shutdown_grace: Duration::from_millis(200),
        on_test_runtime: true,
        ..Options::default()
    })
    .await;
    let mut s = raw_request(&g, "endless", &json!({"prompt": [1], "stream": true})).await;
    read_until(&mut s, b"data: {\"chunk\":0}").await;
    g.shutdown().await.unwrap();
    // The stream was cut: the client sees its connection end, and the upstream
    // request is cancelled with it.
    tokio::time::timeout(PATIENCE, g.mock.state.stream_cancelled.notified())
        .await
        .expect("the upstream stream is dropped");
}
