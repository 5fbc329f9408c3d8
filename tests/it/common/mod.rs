//! Test harness: the real guard on `127.0.0.1:0` in front of a recording mock
//! SGLang, also on `127.0.0.1:0`.

pub mod bodies;
pub mod clock;
pub mod corpus;
pub mod envoy;
pub mod live;
pub mod profile_model;
pub mod sglang;
pub mod shared;
pub mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;

use prefill_guard::config::{RawConfig, RawModel};
use prefill_guard::core::Guard;
pub use prefill_guard::count::MediaBounds;
use prefill_guard::count::{Clock, ModelCounter};
use prefill_guard::demo::write_demo_model;
use prefill_guard::policy::{Profile, Profiles};
use prefill_guard::reload::{ConfigSource, Runtime};
use prefill_guard::server;

/// The served model name of the demo model.
pub const MODEL: &str = "demo";

/// How long a test waits for something that should happen promptly before it
/// fails instead of hanging. Not a performance bound.
pub const PATIENCE: Duration = Duration::from_secs(10);

// === mock SGLang ===

/// A request as the mock received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent on the wire.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the guard forwards JSON")
    }
}

/// What the mock saw and did; tests wait on the `Notify`s.
#[derive(Default)]
pub struct MockState {
    pub requests: Mutex<Vec<Recorded>>,
    /// Notified for each request recorded.
    pub received: Notify,
    /// Lets a held SSE stream (`x-mock: hold`) send its last chunks.
    pub release: Notify,
    /// Set just before a held stream sends its last chunk.
    pub last_chunk_sent: AtomicBool,
    /// Notified when an endless stream (`x-mock: endless`) finds its reader gone.
    pub stream_cancelled: Notify,
    /// Notified when a request that never gets an answer (`x-mock: hang`) is dropped.
    pub request_dropped: Notify,
}

impl MockState {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

pub struct Mock {
    pub addr: SocketAddr,
    pub state: Arc<MockState>,
}

type MockBody = BoxBody<Bytes, Infallible>;

/// Starts the mock. It answers like SGLang: JSON, or SSE for `"stream": true`,
/// `/v1/models`, `/health`. The `x-mock` request header selects misbehaviour:
/// `slow` (headers after 30 s), `hang` (never answers), `hold` (SSE whose last
/// chunk waits for `release`), `endless` (SSE until the reader goes away).
pub async fn start_mock() -> Mock {
    start_mock_on(TcpListener::bind("127.0.0.1:0").await.unwrap())
}

/// [`start_mock`] on a listener the caller bound (a fixed port, say).
pub fn start_mock_on(listener: TcpListener) -> Mock {
    let addr = listener.local_addr().unwrap();
    let state = Arc::new(MockState::default());
    let accept_state = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let state = accept_state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| mock_handle(state.clone(), req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Mock { addr, state }
}

/// Notifies `request_dropped` if the handler future is dropped before it answers.
struct DropSignal(Arc<MockState>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.request_dropped.notify_one();
    }
}

async fn mock_handle(
    state: Arc<MockState>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let mode = parts
        .headers
        .get("x-mock")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    // The guard's own questions (its static-mode `GET /v1/models`) are not
    // traffic it forwarded: only clients' requests are recorded.
    let own = parts
        .headers
        .get(http::header::USER_AGENT)
        .is_some_and(|ua| ua.as_bytes().starts_with(b"prefill-guard/"));
    if !own {
        state.requests.lock().unwrap().push(Recorded {
            method: parts.method.to_string(),
            target: target.clone(),
            headers: parts.headers.clone(),
            body: body.clone(),
        });
        state.received.notify_one();
    }

    match mode.as_str() {
        "slow" => tokio::time::sleep(Duration::from_secs(30)).await,
        "hang" => {
            let _signal = DropSignal(state.clone());
            std::future::pending::<()>().await;
        }
        _ => {}
    }
    let path = parts.uri.path();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let response = match path {
        "/health" => full(StatusCode::OK, "text/plain", Bytes::new()),
        "/v1/models" => {
            json_response(json!({"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
        }
        _ if request["stream"] == json!(true) => sse(state, &mode),
        "/generate" => json_response(json!({"text": " ok", "meta_info": {"prompt_tokens": 1}})),
        _ => json_response(
            json!({"id": "cmpl-1", "object": "text_completion", "choices": [{"text": " ok"}]}),
        ),
    };
    Ok(response)
}

fn full(status: StatusCode, content_type: &str, body: Bytes) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body).boxed())
        .unwrap()
}

fn json_response(v: Value) -> Response<MockBody> {
    full(
        StatusCode::OK,
        "application/json",
        Bytes::from(v.to_string()),
    )
}

fn sse(state: Arc<MockState>, mode: &str) -> Response<MockBody> {
    // Capacity 1: each send waits until hyper has taken the previous chunk.
    let (tx, mut rx) = mpsc::channel::<Bytes>(1);
    let mode = mode.to_string();
    tokio::spawn(async move {
        let chunk = |i: usize| Bytes::from(format!("data: {{\"chunk\":{i}}}\n\n"));
        match mode.as_str() {
            "endless" => {
                for i in 0.. {
                    if tx.send(chunk(i)).await.is_err() {
                        state.stream_cancelled.notify_one();
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            "hold" => {
                let _ = tx.send(chunk(0)).await;
                state.release.notified().await;
                state.last_chunk_sent.store(true, Ordering::SeqCst);
                let _ = tx.send(chunk(1)).await;
                let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
            }
            _ => {
                for i in 0..3 {
                    let _ = tx.send(chunk(i)).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
            }
        }
    });
    let frames = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(StreamBody::new(frames).boxed())
        .unwrap()
}

// === the guard ===

pub struct Options {
    /// `max_req_input_len` of the demo model.
    pub limit: usize,
    /// `false`: start with no limit known for the model, as before discovery.
    pub limit_known: bool,
    pub max_body_bytes: usize,
    pub response_timeout: Duration,
    /// Client timeouts and connection limits (the defaults unless set).
    pub client: prefill_guard::config::ClientLimits,
    pub shutdown_grace: Duration,
    /// Forward somewhere other than the mock (e.g. a closed port).
    pub upstream: Option<String>,
    /// `allow_routes`: paths passed through uninspected.
    pub allow_routes: Vec<&'static str>,
    /// The demo model's multimodal opt-in (none: media refused).
    pub media: MediaBounds,
    /// Also serve the gRPC listener (ext_authz, ext_proc, health) on `127.0.0.1:0`.
    pub grpc: bool,
    /// `sglang_version`: the tests check 0.5.23's semantics unless they say
    /// otherwise; `None` is a guard that may be in front of any release.
    pub sglang_version: Option<&'static str>,
    /// `upstream_idle_timeout_secs`, to the millisecond (the default unless set).
    pub upstream_idle_timeout: Option<Duration>,
    /// Serve the proxy port on the test's own runtime
    /// (`server::EventLoops::Caller`) instead of on event loops of its own,
    /// as production does. A test on tokio's paused clock needs it for the
    /// proxy's timers to be on that clock (`clock`).
    pub on_test_runtime: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            limit: 8,
            limit_known: true,
            max_body_bytes: 64 * 1024,
            response_timeout: Duration::from_secs(20),
            client: Default::default(),
            shutdown_grace: Duration::from_secs(10),
            upstream: None,
            allow_routes: Vec::new(),
            media: MediaBounds::default(),
            grpc: false,
            sglang_version: Some("0.5.23"),
            upstream_idle_timeout: None,
            on_test_runtime: false,
        }
    }
}

pub struct Guarded {
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    pub mock: Mock,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    pub server: Option<JoinHandle<anyhow::Result<()>>>,
    /// The guard's profiles, to change the limit while it runs.
    pub profiles: Arc<Profiles>,
    /// The gRPC listener, with `Options::grpc`.
    pub grpc: Option<SocketAddr>,
    _model_dir: tempfile::TempDir,
}

/// The real `Guard` over the demo model, as `main` builds it, with `limit`
/// in force (`None`: not known yet).
pub fn demo_guard(dir: &std::path::Path, limit: Option<usize>) -> Guard {
    demo_guard_with_media(dir, limit, MediaBounds::default())
}

/// [`demo_guard`] with the demo model's multimodal opt-in set.
pub fn demo_guard_with_media(
    dir: &std::path::Path,
    limit: Option<usize>,
    media: MediaBounds,
) -> Guard {
    write_demo_model(dir).unwrap();
    let mut counter = ModelCounter::load(dir).unwrap();
    counter.set_media_bounds(media);
    let profile = Profile::new(limit, Ok(Arc::new(counter)), Default::default());
    let profiles = Arc::new(Profiles::new([(MODEL.to_string(), profile)]));
    Guard::new(vec![MODEL.to_string()], profiles, 2, 16, Clock::default())
}

/// The guard as `serve` runs it (`server::serve` over a `reload::Runtime`,
/// the configuration from the same resolver as a file's), on `127.0.0.1:0`,
/// in front of the mock. The settings a file states in whole seconds
/// (`response_timeout`, `upstream_idle_timeout`, `shutdown_grace`) and the
/// client limits are set on the resolved configuration, as sub-second
/// values the tests need.
pub async fn start(opts: Options) -> Guarded {
    let mock = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    write_demo_model(dir.path()).unwrap();
    let upstream = opts
        .upstream
        .clone()
        .unwrap_or_else(|| format!("http://{}", mock.addr));
    let overlay = RawConfig {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(upstream),
        max_body_bytes: Some(opts.max_body_bytes),
        upstream_connect_timeout_ms: Some(2000),
        io_threads: Some(1),
        count_workers: Some(2),
        count_queue: Some(16),
        allow_routes: Some(opts.allow_routes.iter().map(|r| r.to_string()).collect()),
        model: RawModel {
            name: Some(MODEL.to_string()),
            tokenizer: Some(dir.path().display().to_string()),
            max_req_input_len: Some(opts.limit),
            multimodal_image_tokens: opts.media.image,
            multimodal_video_tokens: opts.media.video,
            multimodal_audio_tokens: opts.media.audio,
            server: prefill_guard::config::ServerSettings {
                sglang_version: opts.sglang_version.map(str::to_owned),
                ..Default::default()
            },
            ..RawModel::default()
        },
        ..RawConfig::default()
    };
    let source = ConfigSource {
        path: None,
        overlay,
    };
    let mut config = source.load().unwrap();
    config.upstream_response_timeout = opts.response_timeout;
    if let Some(idle) = opts.upstream_idle_timeout {
        config.upstream_idle_timeout = idle;
    }
    config.shutdown_grace = opts.shutdown_grace;
    config.client = opts.client;
    let runtime = Runtime::start(config, source).await.unwrap();
    let profiles = runtime.current().gate.guard.profiles().clone();
    if !opts.limit_known {
        // As before discovery has heard from a prefill worker.
        let known = profiles.get(MODEL).unwrap();
        profiles.set(
            MODEL,
            Profile {
                limit: None,
                ..Profile::clone(&known)
            },
        );
    }
    let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
    let listeners = server::Listeners {
        proxy: bind().await,
        admin: bind().await,
        grpc: if opts.grpc { Some(bind().await) } else { None },
        authz: None,
    };
    let (proxy, admin) = (
        listeners.proxy.local_addr().unwrap(),
        listeners.admin.local_addr().unwrap(),
    );
    let grpc = listeners.grpc.as_ref().map(|l| l.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    let loops = if opts.on_test_runtime {
        server::EventLoops::Caller
    } else {
        server::EventLoops::Threads
    };
    let server = tokio::spawn(server::serve_on(loops, listeners, runtime, async {
        let _ = rx.await;
    }));
    Guarded {
        proxy,
        admin,
        mock,
        http: reqwest::Client::new(),
        shutdown: Some(tx),
        server: Some(server),
        profiles,
        grpc,
        _model_dir: dir,
    }
}

/// A guard whose upstream port is closed.
pub async fn start_with_dead_upstream() -> Guarded {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    start(Options {
        upstream: Some(format!("http://{addr}")),
        ..Options::default()
    })
    .await
}

/// A response read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub async fn read(resp: reqwest::Response) -> Self {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.expect("a whole body");
        Answer {
            status,
            headers,
            body,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The OpenAI `error.code`, or SGLang's message for `/generate`.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl Guarded {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }

    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.send(
            self.http
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
    }

    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.send(
            self.http
                .post(self.url(path))
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        Answer::read(req.send().await.expect("the guard answers")).await
    }

    pub async fn metrics(&self) -> String {
        let resp = self
            .http
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    }

    /// Stops accepting and waits for `run` to drain and return.
    pub async fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.server.take() {
            Some(h) => tokio::time::timeout(PATIENCE, h)
                .await
                .expect("run returns after the grace")
                .unwrap(),
            None => Ok(()),
        }
    }
}

/// The value of one sample in a Prometheus text exposition (0 when absent).
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// `n` token ids (1, 2, ..., n).
pub fn ids(n: usize) -> Vec<usize> {
    (1..=n).collect()
}

/// `n` words of the demo vocabulary: `n` tokens as text, `n + 5` as a single
/// user message under the demo ChatML template
/// (`<|im_start|>user\n… <|im_end|>\n<|im_start|>assistant\n`).
pub fn words(n: usize) -> String {
    vec!["hello"; n].join(" ")
}

/// Lints a `/metrics` exposition with `promtool check metrics`. promtool is
/// installed by `scripts/install-test-deps.sh`; without it the check skips
/// locally and fails under CI (or with `PROMTOOL_REQUIRED`).
#[allow(dead_code)] // not every test binary lints metrics
pub fn promtool_check_metrics(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("PROMTOOL_REQUIRED").is_none() && std::env::var_os("CI").is_none(),
            "promtool is required but not installed"
        );
        eprintln!("promtool not installed: skipping the exposition lint");
        return;
    };
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(text.as_bytes())
        .expect("promtool reads the exposition");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The real `prefill-guard serve` binary started on a config file, with its
/// JSON log lines collected (read continuously so the pipe never fills).
#[allow(dead_code)] // only the tests that spawn the binary use it
pub struct Spawned {
    pub child: tokio::process::Child,
    pub pid: String,
    pub logs: tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
    /// The "prefill-guard serving" log line (it carries `listen` and `admin_listen`).
    pub serving: serde_json::Value,
}

/// Writes a configuration for the binary into `dir`: the demo model,
/// `upstream` (`host:port`), ephemeral ports and JSON logs, then the TOML
/// lines of `extra`. Returns its path. The server is stated to run SGLang
/// 0.5.23, whose semantics the tests check unless they say otherwise.
#[allow(dead_code)]
pub fn binary_config(
    dir: &std::path::Path,
    upstream: impl std::fmt::Display,
    extra: &str,
) -> std::path::PathBuf {
    let model = dir.join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let config = dir.join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\nname = \"{MODEL}\"\ntokenizer = {:?}\n\
             sglang_version = \"0.5.23\"\n{extra}",
            model.display().to_string()
        ),
    )
    .unwrap();
    config
}

#[allow(dead_code)]
pub async fn spawn_binary(config: &std::path::Path) -> Spawned {
    spawn_binary_with_args(config, &[]).await
}

/// The binary serving `config` (and more `serve` flags), its stderr a pipe
/// that the caller reads, or deliberately does not.
#[allow(dead_code)]
pub fn spawn_guard_process(config: &std::path::Path, args: &[&str]) -> tokio::process::Child {
    spawn_guard_process_with_env(config, args, &[])
}

/// [`spawn_guard_process`] with `PREFILL_GUARD_*` (or other) variables set.
#[allow(dead_code)]
pub fn spawn_guard_process_with_env(
    config: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> tokio::process::Child {
    use std::process::Stdio;
    tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(envs.iter().copied())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts")
}

/// The admin port's `/metrics` text.
#[allow(dead_code)]
pub async fn scrape(http: &reqwest::Client, admin: impl std::fmt::Display) -> String {
    http.get(format!("http://{admin}/metrics"))
        .send()
        .await
        .expect("the admin port answers")
        .text()
        .await
        .expect("a metrics body")
}

/// [`spawn_binary`] with more `serve` flags after `--config`.
#[allow(dead_code)]
pub async fn spawn_binary_with_args(config: &std::path::Path, args: &[&str]) -> Spawned {
    spawn_binary_with_env(config, args, &[]).await
}

/// [`spawn_binary_with_args`] with variables set.
#[allow(dead_code)]
pub async fn spawn_binary_with_env(
    config: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Spawned {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = spawn_guard_process_with_env(config, args, envs);
    let pid = child.id().expect("a running child has a pid").to_string();
    let (tx, mut logs) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let serving = tokio::time::timeout(PATIENCE * 3, async {
        loop {
            let line = logs.recv().await.expect("the guard starts");
            if line["message"] == "prefill-guard serving" {
                return line;
            }
        }
    })
    .await
    .expect("the guard starts serving");
    Spawned {
        child,
        pid,
        logs,
        serving,
    }
}
