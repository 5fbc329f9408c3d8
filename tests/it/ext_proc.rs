//! Envoy ext_proc (`envoy.service.ext_proc.v3.ExternalProcessor/Process`)
//! against the real guard's gRPC listener, driven by a tonic client built
//! from Envoy's protos and speaking as Envoy does in each body mode.

use crate::common;

use common::{sample, start, Guarded, Options, MODEL, PATIENCE};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap as ProtoHeaderMap, HeaderValue};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation::Mutation, external_processor_client::ExternalProcessorClient,
    processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
    HttpTrailers, ImmediateResponse, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::Streaming;

/// The demo model's limit here: a chat of `n` words is `n + 5` tokens.
const LIMIT: usize = 32;
/// Echoed chunks must not exceed this (Envoy's recommendation).
const MAX_ECHO: usize = 64 * 1024;

async fn guard(opts: Options) -> Guarded {
    start(Options {
        grpc: true,
        limit: LIMIT,
        ..opts
    })
    .await
}

fn chat(n: usize) -> Vec<u8> {
    common::bodies::chat(n).to_string().into_bytes()
}

/// `chat(n)` padded with JSON whitespace to at least `size` bytes.
fn padded_chat(n: usize, size: usize) -> Vec<u8> {
    let mut body = chat(n);
    let close = body.pop().unwrap();
    body.resize(size.max(body.len()), b' ');
    body.push(close);
    body
}

/// One ext_proc stream, as Envoy opens it.
struct Stream {
    tx: Option<mpsc::Sender<ProcessingRequest>>,
    rx: Streaming<ProcessingResponse>,
}

impl Stream {
    async fn open(g: &Guarded) -> Self {
        let mut client = ExternalProcessorClient::connect(format!("http://{}", g.grpc.unwrap()))
            .await
            .expect("the gRPC listener accepts");
        let (tx, mut out) = mpsc::channel::<ProcessingRequest>(1024);
        let outbound = futures_util::stream::poll_fn(move |cx| out.poll_recv(cx));
        let rx = client
            .process(outbound)
            .await
            .expect("the stream opens")
            .into_inner();
        Self { tx: Some(tx), rx }
    }

    async fn send(&self, m: ProcessingRequest) {
        self.tx.as_ref().unwrap().send(m).await.unwrap();
    }

    /// A stream that has sent the headers of a `POST /v1/chat/completions`
    /// with a body to follow.
    async fn chat(g: &Guarded, mode: BodySendMode) -> Self {
        let s = Self::open(g).await;
        s.headers(mode, "POST", "/v1/chat/completions", false).await;
        s
    }

    async fn headers(&self, mode: BodySendMode, method: &str, path: &str, end_of_stream: bool) {
        self.send(headers(mode, method, path, end_of_stream)).await;
    }

    async fn body(&self, bytes: &[u8], end_of_stream: bool) {
        self.send(body(bytes, end_of_stream)).await;
    }

    /// The next answer; panics if the stream ended or failed.
    async fn next(&mut self) -> Response {
        match tokio::time::timeout(PATIENCE, self.rx.message()).await {
            Ok(Ok(Some(r))) => r.response.expect("an answer carries a response"),
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// Half-closes (as Envoy does when done) and returns how the guard ends the stream.
    async fn close(&mut self) -> Result<Option<ProcessingResponse>, tonic::Status> {
        self.tx = None;
        tokio::time::timeout(PATIENCE, self.rx.message())
            .await
            .expect("the stream ends")
    }
}

fn headers(mode: BodySendMode, method: &str, path: &str, end_of_stream: bool) -> ProcessingRequest {
    let pairs = [
        (":method", method),
        (":path", path),
        (":authority", "guarded"),
        (":scheme", "http"),
        ("content-type", "application/json"),
        ("x-request-id", "ext-proc-test"),
    ];
    ProcessingRequest {
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: mode as i32,
            response_body_mode: BodySendMode::None as i32,
            send_body_without_waiting_for_header_response: false,
        }),
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(ProtoHeaderMap {
                headers: pairs
                    .iter()
                    .map(|(k, v)| HeaderValue {
                        key: (*k).into(),
                        value: String::new(),
                        raw_value: v.as_bytes().to_vec(),
                    })
                    .collect(),
            }),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn body(bytes: &[u8], end_of_stream: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody {
            body: bytes.to_vec(),
            end_of_stream,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn is_continue(r: &Response) -> bool {
    let common = match r {
        Response::RequestHeaders(h) => h.response.as_ref(),
        Response::RequestBody(b) => b.response.as_ref(),
        _ => return false,
    };
    common
        .is_some_and(|c| c.status == 0 && c.body_mutation.is_none() && c.header_mutation.is_none())
}

fn immediate(r: Response) -> ImmediateResponse {
    match r {
        Response::ImmediateResponse(i) => i,
        other => panic!("expected an ImmediateResponse, got {other:?}"),
    }
}

fn status(i: &ImmediateResponse) -> i32 {
    i.status.expect("a status").code
}

fn content_type(i: &ImmediateResponse) -> Vec<u8> {
    i.headers
        .as_ref()
        .unwrap()
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == "content-type")
        .map(|h| h.raw_value.clone())
        .unwrap_or_default()
}

/// The echoed chunk of a full-duplex body answer.
fn echoed(r: Response) -> (Vec<u8>, bool) {
    let Response::RequestBody(b) = r else {
        panic!("expected a body answer, got {r:?}");
    };
    match b
        .response
        .and_then(|c| c.body_mutation)
        .and_then(|m| m.mutation)
    {
        Some(Mutation::StreamedResponse(s)) => (s.body, s.end_of_stream),
        other => panic!("expected a streamed body, got {other:?}"),
    }
}

/// Reads echoed chunks to the one with `end_of_stream`; checks each chunk's size.
async fn read_echo(s: &mut Stream) -> Vec<u8> {
    let mut all = Vec::new();
    loop {
        let (chunk, end) = echoed(s.next().await);
        assert!(chunk.len() <= MAX_ECHO, "a chunk of {} bytes", chunk.len());
        all.extend_from_slice(&chunk);
        if end {
            return all;
        }
    }
}

fn series(name: &str, labels: &str) -> String {
    format!("{name}{{mode=\"ext_proc\",route=\"/v1/chat/completions\",model=\"{MODEL}\",{labels}}}")
}

#[tokio::test]
async fn buffered_allow_continues_headers_then_body() {
    let g = guard(Options::default()).await;
    let mut s = Stream::chat(&g, BodySendMode::Buffered).await;
    assert!(is_continue(&s.next().await));
    s.body(&chat(3), true).await;
    let r = s.next().await;
    assert!(
        matches!(r, Response::RequestBody(_)) && is_continue(&r),
        "{r:?}"
    );
    assert!(
        s.close().await.unwrap().is_none(),
        "a clean end after the decision"
    );
    assert_eq!(g.mock.state.count(), 0, "Envoy forwards, not the guard");
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            &series("prefill_guard_requests_total", "decision=\"allowed\"")
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test]
async fn buffered_deny_is_an_immediate_400_with_the_proxys_body() {
    let g = guard(Options::default()).await;
    let proxy = g.post_raw("/v1/chat/completions", chat(LIMIT)).await;
    assert_eq!(proxy.status, 400);
    let mut s = Stream::chat(&g, BodySendMode::Buffered).await;
    assert!(is_continue(&s.next().await));
    s.body(&chat(LIMIT), true).await;
    let i = immediate(s.next().await);
    assert_eq!(status(&i), 400);
    assert_eq!(content_type(&i), b"application/json");
    assert_eq!(i.body, proxy.body.to_vec());
    let v: Value = serde_json::from_slice(&i.body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    // The decision went out: the guard ends the stream.
    assert!(s.rx.message().await.unwrap().is_none());
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            &series(
                "prefill_guard_rejections_total",
                "reason=\"context_length_exceeded\""
            )
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test]
async fn full_duplex_allow_answers_headers_first_then_echoes_the_exact_bytes() {
    let g = guard(Options {
        max_body_bytes: 1024 * 1024,
        ..Options::default()
    })
    .await;
    let input = padded_chat(3, 300_000);
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    // Envoy's own chunking: whatever the downstream sent, here 16 KiB.
    let pieces: Vec<&[u8]> = input.chunks(16 * 1024).collect();
    for (i, piece) in pieces.iter().enumerate() {
        s.body(piece, i + 1 == pieces.len()).await;
    }
    assert!(
        is_continue(&s.next().await),
        "the header answer comes first"
    );
    assert_eq!(
        read_echo(&mut s).await,
        input,
        "upstream gets exactly what was judged"
    );
    assert!(s.close().await.unwrap().is_none());
}

#[tokio::test]
async fn full_duplex_ended_by_trailers_answers_trailers_after_the_body() {
    let g = guard(Options::default()).await;
    let input = chat(2);
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    let (a, b) = input.split_at(10);
    s.body(a, false).await;
    s.body(b, false).await;
    s.send(ProcessingRequest {
        request: Some(Request::RequestTrailers(HttpTrailers::default())),
        ..Default::default()
    })
    .await;
    assert!(is_continue(&s.next().await));
    let (chunk, end) = echoed(s.next().await);
    assert_eq!((chunk, end), (input, false));
    assert!(matches!(s.next().await, Response::RequestTrailers(_)));
}

#[tokio::test]
async fn full_duplex_deny_is_the_first_and_only_answer() {
    let g = guard(Options::default()).await;
    let input = chat(LIMIT);
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    let (a, b) = input.split_at(input.len() / 2);
    s.body(a, false).await;
    s.body(b, true).await;
    let i = immediate(s.next().await);
    assert_eq!(status(&i), 400);
    assert_eq!(content_type(&i), b"application/json");
    assert!(
        s.rx.message().await.unwrap().is_none(),
        "nothing after the refusal"
    );
}

#[tokio::test]
async fn a_million_token_body_in_full_duplex() {
    let g = guard(Options {
        max_body_bytes: 16 * 1024 * 1024,
        ..Options::default()
    })
    .await;
    // About a million tokens (6 MB): refused, as it must be.
    let huge = chat(1_000_000);
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    let pieces: Vec<&[u8]> = huge.chunks(64 * 1024).collect();
    for (i, piece) in pieces.iter().enumerate() {
        s.body(piece, i + 1 == pieces.len()).await;
    }
    let i = immediate(s.next().await);
    assert_eq!(status(&i), 400);
    let v: Value = serde_json::from_slice(&i.body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    // A body of the same size that is under the limit goes through, byte for byte.
    let big = padded_chat(3, huge.len());
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    let pieces: Vec<&[u8]> = big.chunks(64 * 1024).collect();
    for (i, piece) in pieces.iter().enumerate() {
        s.body(piece, i + 1 == pieces.len()).await;
    }
    assert!(is_continue(&s.next().await));
    assert_eq!(read_echo(&mut s).await, big);
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused_413_at_once() {
    let g = guard(Options {
        max_body_bytes: 8 * 1024,
        ..Options::default()
    })
    .await;
    let input = padded_chat(1, 20 * 1024);
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    // Never ends: the refusal comes as soon as the cap is crossed.
    for piece in input.chunks(4096) {
        s.body(piece, false).await;
    }
    let i = immediate(s.next().await);
    assert_eq!(status(&i), 413);
    assert_eq!(content_type(&i), b"application/json");
    // BUFFERED: one message over the cap.
    let mut s = Stream::chat(&g, BodySendMode::Buffered).await;
    assert!(is_continue(&s.next().await));
    s.body(&input, true).await;
    assert_eq!(status(&immediate(s.next().await)), 413);
}

#[tokio::test]
async fn a_stream_abandoned_mid_body_never_ends_cleanly_and_nothing_is_allowed() {
    let g = guard(Options::default()).await;
    // Envoy half-closes mid-body: the guard answers with an error, not OK,
    // since OK would let Envoy proceed without a decision.
    let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    s.body(&chat(1)[..10], false).await;
    let end = s.close().await;
    let status = end.expect_err("an error status, never a clean end");
    assert_eq!(status.code(), tonic::Code::Aborted);
    // BUFFERED, closed after the header answer.
    let mut s = Stream::chat(&g, BodySendMode::Buffered).await;
    assert!(is_continue(&s.next().await));
    assert!(s.close().await.is_err());
    // The client side goes away entirely (reset) mid-body.
    let s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
    s.body(&chat(1)[..10], false).await;
    drop(s);
    // A later request is answered normally, and none of the abandoned ones was allowed.
    let mut s = Stream::chat(&g, BodySendMode::Buffered).await;
    assert!(is_continue(&s.next().await));
    s.body(&chat(LIMIT), true).await;
    assert_eq!(status_of(immediate(s.next().await)), 400);
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            &series("prefill_guard_requests_total", "decision=\"allowed\"")
        ),
        0.0,
        "{m}"
    );
}

fn status_of(i: ImmediateResponse) -> i32 {
    status(&i)
}

#[tokio::test]
async fn routes_are_decided_at_the_headers_when_no_body_is_needed() {
    let g = guard(Options::default()).await;
    // A pass-through route continues at once, without waiting for a body.
    let mut s = Stream::open(&g).await;
    s.headers(BodySendMode::FullDuplexStreamed, "GET", "/v1/models", true)
        .await;
    assert!(is_continue(&s.next().await));
    assert!(s.close().await.unwrap().is_none());
    // An unknown route is refused at the headers.
    let mut s = Stream::open(&g).await;
    s.headers(BodySendMode::Buffered, "POST", "/v1/unknown", false)
        .await;
    assert_eq!(status(&immediate(s.next().await)), 404);
    // A prompt route without a body is judged empty, and refused.
    let mut s = Stream::open(&g).await;
    s.headers(
        BodySendMode::FullDuplexStreamed,
        "POST",
        "/v1/chat/completions",
        true,
    )
    .await;
    assert_eq!(status(&immediate(s.next().await)), 400);
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            "prefill_guard_requests_total{mode=\"ext_proc\",route=\"/v1/models\",model=\"\",decision=\"allowed\"}"
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test]
async fn body_modes_that_cannot_be_judged_whole_are_refused() {
    let g = guard(Options::default()).await;
    // STREAMED would need the headers answered, and so sent upstream, before
    // the body can be judged: refused like the modes that truncate.
    for mode in [
        BodySendMode::None,
        BodySendMode::BufferedPartial,
        BodySendMode::Streamed,
    ] {
        let mut s = Stream::open(&g).await;
        s.headers(mode, "POST", "/v1/chat/completions", false).await;
        let i = immediate(s.next().await);
        assert_eq!(status(&i), 403, "{mode:?}");
        let v: Value = serde_json::from_slice(&i.body).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("request_body_mode"),
            "{v}"
        );
    }
}

#[tokio::test]
async fn observability_mode_judges_and_counts_but_answers_nothing() {
    let g = guard(Options::default()).await;
    let mut s = Stream::open(&g).await;
    let mut first = headers(
        BodySendMode::Buffered,
        "POST",
        "/v1/chat/completions",
        false,
    );
    first.observability_mode = true;
    s.send(first).await;
    s.body(&chat(LIMIT), true).await;
    // Envoy ignores answers in this mode; the stream ends cleanly once decided.
    assert!(s.close().await.unwrap().is_none(), "no answer, a clean end");
    let m = g.metrics().await;
    assert_eq!(
        sample(
            &m,
            &series(
                "prefill_guard_rejections_total",
                "reason=\"context_length_exceeded\""
            )
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test]
async fn bodies_held_by_open_streams_count_against_the_budget_and_excess_is_shed_429() {
    // The harness sets max_inflight_body_bytes to 8 x max_body_bytes.
    const MAX: usize = 8 * 1024;
    let g = guard(Options {
        max_body_bytes: MAX,
        ..Options::default()
    })
    .await;
    // Full duplex answers nothing before the body ends: eight streams each
    // hold a whole body's worth, then a ninth is shed once the guard has
    // taken them in (polled: nothing tells when it has read them).
    let mut held = Vec::new();
    for _ in 0..8 {
        let s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
        s.body(&[b' '; MAX], false).await;
        held.push(s);
    }
    let shed = async {
        loop {
            let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
            s.body(b" ", false).await;
            s.body(b"", true).await;
            match s.next().await {
                Response::ImmediateResponse(i) if status(&i) == 429 => return i,
                _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    };
    let i = tokio::time::timeout(PATIENCE, shed)
        .await
        .expect("shed once eight bodies are held");
    let retry_after = i
        .headers
        .as_ref()
        .unwrap()
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .any(|h| h.key == "retry-after");
    assert!(retry_after, "a shed answer says when to retry");
    // Streams that go away give their bytes back.
    drop(held);
    let served = async {
        loop {
            let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
            s.body(&chat(2), true).await;
            match s.next().await {
                Response::ImmediateResponse(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                r => return r,
            }
        }
    };
    let r = tokio::time::timeout(PATIENCE, served)
        .await
        .expect("the budget is freed");
    assert!(is_continue(&r));
}

#[tokio::test]
async fn a_decided_stream_left_open_for_the_response_holds_no_body_bytes() {
    const MAX: usize = 8 * 1024;
    let g = guard(Options {
        max_body_bytes: MAX,
        ..Options::default()
    })
    .await;
    let body = padded_chat(2, MAX - 1);
    // Twice the budget's worth of allowed bodies, each stream kept open as
    // Envoy keeps it while the response streams.
    let mut open = Vec::new();
    for _ in 0..16 {
        let mut s = Stream::chat(&g, BodySendMode::FullDuplexStreamed).await;
        s.body(&body, true).await;
        assert!(is_continue(&s.next().await), "served, not shed");
        assert_eq!(read_echo(&mut s).await, body);
        open.push(s);
    }
}
