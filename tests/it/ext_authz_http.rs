//! ext_authz over HTTP, against the real `prefill-guard serve` binary with
//! `--authz-listen`: the requests Envoy (and Istio's `envoyExtAuthzHttp`)
//! and Traefik ForwardAuth send, and what each must get back. A deny is the
//! refusal the proxy port answers for the same request, byte for byte, and
//! never a 5xx (a 5xx is "the authorization service failed", which
//! `failure_mode_allow` turns into an allow).

use crate::common;

use std::net::SocketAddr;

use serde_json::{json, Value};

use common::{promtool_check_metrics, sample, words, Answer, MODEL, PATIENCE};

/// The demo model's limit in these tests: prompts with L >= 64 are refused.
const LIMIT: usize = 64;
/// Envoy's `path_prefix` in the Envoy-style guard.
const PREFIX: &str = "/authz";

struct Guard {
    spawned: common::Spawned,
    proxy: SocketAddr,
    admin: SocketAddr,
    authz: SocketAddr,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// The binary with an authorization listener; `extra` is appended to its TOML.
async fn spawn(extra: &str) -> Guard {
    let dir = tempfile::tempdir().unwrap();
    // The upstream is never contacted by a check; the port is closed anyway.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = closed.local_addr().unwrap();
    drop(closed);
    let config = common::binary_config(
        dir.path(),
        upstream,
        &format!("authz_listen = \"127.0.0.1:0\"\n{extra}"),
    );
    let spawned = common::spawn_binary(&config).await;
    let addr = |key: &str| -> SocketAddr {
        spawned.serving[key]
            .as_str()
            .unwrap_or_else(|| panic!("the serving line names {key}: {}", spawned.serving))
            .parse()
            .unwrap()
    };
    Guard {
        proxy: addr("listen"),
        admin: addr("admin_listen"),
        authz: addr("authz_listen"),
        spawned,
        http: reqwest::Client::new(),
        _dir: dir,
    }
}

async fn envoy_guard() -> Guard {
    spawn(&format!(
        "max_req_input_len = {LIMIT}\nmax_body_bytes = 65536\nauthz_path_prefix = \"{PREFIX}\"\n"
    ))
    .await
}

impl Guard {
    /// A check as Envoy sends it: the client's method, `PREFIX` + path,
    /// the client's headers and body.
    async fn envoy(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        self.raw(method, &format!("{PREFIX}{path}"), headers, body)
            .await
    }

    async fn raw(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        self.send(self.authz, method, target, headers, body).await
    }

    /// The same request sent to the proxy port (whose upstream is down: only
    /// refusals are comparable, and that is what they are used for).
    async fn proxy(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        self.send(self.proxy, method, path, headers, body).await
    }

    async fn send(
        &self,
        to: SocketAddr,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("http://{to}{target}"))
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Answer::read(req.send().await.expect("the listener answers")).await
    }

    async fn metrics(&self) -> String {
        let text = common::scrape(&self.http, self.admin).await;
        promtool_check_metrics(&text);
        text
    }

    /// The next decision-log line.
    async fn decision(&mut self) -> Value {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let line = self.spawned.logs.recv().await.expect("the guard logs");
                if line["target"] == "prefill_guard::decision" {
                    return line;
                }
            }
        })
        .await
        .expect("a decision line")
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn chat(n: usize) -> String {
    common::bodies::chat(n).to_string()
}

/// A deny as a user of Envoy would check it: not allowed, not a server
/// error, a JSON body.
fn assert_denied(a: &Answer) {
    assert_ne!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    assert!(
        a.status.is_client_error(),
        "a deny must be a 4xx, got {}: {}",
        a.status,
        String::from_utf8_lossy(&a.body)
    );
    assert_eq!(a.headers["content-type"], "application/json");
    a.json();
}

fn assert_allowed(a: &Answer) {
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    assert!(a.body.is_empty(), "an allow has no body");
}

fn label(a: &Answer) -> String {
    let v = a.json();
    // OpenAI's `code`; the other shapes carry no code, so the message speaks.
    v["error"]["code"]
        .as_str()
        .or(v["error"]["message"].as_str())
        .or(v["error"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn envoy_short_prompt_is_allowed_with_its_count() {
    let mut g = envoy_guard().await;
    // Under the demo ChatML template a one-message chat of n words is n + 5 tokens.
    let a = g
        .envoy("POST", "/v1/chat/completions", &[JSON], &chat(10))
        .await;
    assert_allowed(&a);
    assert_eq!(a.headers["x-prefill-guard-tokens"], "15");
    let line = g.decision().await;
    assert_eq!(line["mode"], "ext_authz_http");
    assert_eq!(line["decision"], "allowed");
    assert_eq!(line["route"], "/v1/chat/completions");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["status"], 200);
    // The largest prompt that fits, and the smallest that does not.
    assert_allowed(
        &g.envoy("POST", "/v1/chat/completions", &[JSON], &chat(LIMIT - 6))
            .await,
    );
    let over = g
        .envoy("POST", "/v1/chat/completions", &[JSON], &chat(LIMIT - 5))
        .await;
    assert_eq!(over.status, 400);
    assert_eq!(label(&over), "context_length_exceeded");
}

/// Over-long on every route shape: the native status and body, exactly the
/// proxy's answer to the same request.
#[tokio::test]
async fn envoy_over_long_is_the_routes_native_refusal() {
    let g = envoy_guard().await;
    let long = words(LIMIT + 10);
    let cases: Vec<(&str, Value)> = vec![
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "messages": [{"role": "user", "content": long}]}),
        ),
        ("/v1/completions", json!({"model": MODEL, "prompt": long})),
        ("/generate", json!({"text": long})),
        (
            "/v1/messages",
            json!({"model": MODEL, "max_tokens": 16,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": long}]}]}),
        ),
        (
            "/api/chat",
            json!({"model": MODEL, "messages": [{"role": "user", "content": long}]}),
        ),
        ("/api/generate", json!({"model": MODEL, "prompt": long})),
    ];
    for (path, body) in cases {
        let body = body.to_string();
        let a = g.envoy("POST", path, &[JSON], &body).await;
        let p = g.proxy("POST", path, &[JSON], &body).await;
        assert_eq!(
            a.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_denied(&a);
        assert_eq!(a.body, p.body, "{path}: the proxy's refusal, byte for byte");
        assert_eq!(a.status, p.status, "{path}");
        let v = a.json();
        match path {
            "/generate" => {
                // SGLang's own shape: {"error": {"message"}} and nothing else.
                assert_eq!(v["error"].as_object().unwrap().len(), 1, "{v}");
                assert!(v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("Input length"));
            }
            "/v1/messages" => {
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "invalid_request_error");
                assert!(v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("prompt is too long"));
            }
            "/api/chat" | "/api/generate" => {
                assert!(
                    v["error"].as_str().unwrap().contains("prompt is too long"),
                    "{v}"
                );
            }
            _ => {
                assert_eq!(v["error"]["code"], "context_length_exceeded", "{path}");
                assert_eq!(v["error"]["type"], "invalid_request_error");
            }
        }
    }
}

#[tokio::test]
async fn envoy_partial_body_is_denied() {
    let g = envoy_guard().await;
    // Envoy cut the body at `max_request_bytes` (`allow_partial_message`):
    // what arrived may well fit, the prompt does not have to.
    let a = g
        .envoy(
            "POST",
            "/v1/chat/completions",
            &[JSON, ("x-envoy-auth-partial-body", "true")],
            &chat(3),
        )
        .await;
    assert_denied(&a);
    assert_eq!(a.status, 413);
    assert_eq!(label(&a), "body_too_large");
    // Envoy's `false` is the whole body.
    assert_allowed(
        &g.envoy(
            "POST",
            "/v1/chat/completions",
            &[JSON, ("x-envoy-auth-partial-body", "false")],
            &chat(3),
        )
        .await,
    );
}

#[tokio::test]
async fn envoy_paths_outside_the_prefix_and_unknown_routes_are_denied() {
    let mut g = envoy_guard().await;
    for target in [
        "/v1/chat/completions",
        "/authzv1/chat/completions",
        "/auth/v1/chat/completions",
        "/",
    ] {
        let a = g.raw("POST", target, &[JSON], &chat(3)).await;
        assert_denied(&a);
        assert_eq!(label(&a), "bad_path", "{target}");
    }
    for (method, path, status) in [
        ("POST", "/v1/chat/completion", 404),
        ("GET", "/healthz", 404),
        ("GET", "/metrics", 404),
        ("GET", "/v1/chat/completions", 405),
        ("POST", "/v1//chat/completions", 400),
        ("POST", "/v1/chat%2Fcompletions%00", 400),
    ] {
        let a = g.envoy(method, path, &[JSON], "").await;
        assert_denied(&a);
        assert_eq!(a.status, status, "{method} {path}");
    }
    // A decided pass-through: the original request is a health probe.
    assert_allowed(&g.envoy("GET", "/health", &[], "").await);
    assert_allowed(&g.envoy("GET", "/v1/models?x=1", &[], "").await);
    // Percent-encoded spellings of an inspected route are judged as that route.
    let a = g
        .envoy("POST", "/v1/chat%2Fcompletions", &[JSON], &chat(LIMIT))
        .await;
    assert_eq!(label(&a), "context_length_exceeded");
    let text = g.metrics().await;
    assert!(
        sample(
            &text,
            "prefill_guard_rejections_total{mode=\"ext_authz_http\",route=\"other\",model=\"\",reason=\"route_not_allowed\"}"
        ) >= 3.0,
        "{text}"
    );
    // Nothing here was decided by the proxy.
    assert!(!text.contains("mode=\"proxy\""), "{text}");
    let mut seen = 0;
    while let Ok(Some(line)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), g.spawned.logs.recv()).await
    {
        if line["target"] == "prefill_guard::decision" {
            assert_eq!(line["mode"], "ext_authz_http", "{line}");
            seen += 1;
        }
    }
    assert!(seen >= 10, "{seen} decision lines");
}

#[tokio::test]
async fn envoy_forwarded_headers_cannot_reroute_a_check() {
    let g = envoy_guard().await;
    // A client-supplied `X-Forwarded-Uri` that Envoy lets through must not
    // make a chat request look like a health probe.
    let a = g
        .envoy(
            "POST",
            "/v1/chat/completions",
            &[
                JSON,
                ("x-forwarded-uri", "/health"),
                ("x-forwarded-method", "GET"),
            ],
            &chat(LIMIT),
        )
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(label(&a), "context_length_exceeded");
}

#[tokio::test]
async fn envoy_bodies_it_cannot_count_are_denied() {
    let g = envoy_guard().await;
    type Case<'a> = (Vec<(&'a str, &'a str)>, String, u16, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![JSON, ("content-encoding", "gzip")],
            chat(3),
            415,
            "unsupported_media_type",
        ),
        (
            vec![JSON, ("x-body-compressed", "zstd")],
            chat(3),
            415,
            "unsupported_media_type",
        ),
        (vec![], chat(3), 415, "unsupported_media_type"),
        (vec![JSON], "{\"messages\": [".into(), 400, "invalid_json"),
        (vec![JSON], "".into(), 400, "invalid_json"),
        (
            vec![JSON],
            r#"{"messages": [], "messages": [{"role": "user", "content": "hello"}]}"#.into(),
            400,
            "duplicate_key",
        ),
        // Over `max_body_bytes` (64 KiB here).
        (vec![JSON], chat(20_000), 413, "body_too_large"),
    ];
    for (headers, body, status, code) in cases {
        let a = g
            .envoy("POST", "/v1/chat/completions", &headers, &body)
            .await;
        assert_denied(&a);
        assert_eq!(
            a.status,
            status,
            "{headers:?}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(label(&a), code, "{headers:?}");
    }
}

#[tokio::test]
async fn envoy_metrics_carry_the_mode() {
    let g = envoy_guard().await;
    assert_allowed(
        &g.envoy("POST", "/v1/chat/completions", &[JSON], &chat(3))
            .await,
    );
    assert_eq!(
        g.envoy("POST", "/v1/chat/completions", &[JSON], &chat(LIMIT))
            .await
            .status,
        400
    );
    // And one through the proxy port, to tell the two apart.
    assert_eq!(
        g.proxy("POST", "/v1/chat/completions", &[JSON], &chat(LIMIT))
            .await
            .status,
        400
    );
    let text = g.metrics().await;
    let route = format!("route=\"/v1/chat/completions\",model=\"{MODEL}\"");
    for (series, want) in [
        (
            format!("prefill_guard_requests_total{{mode=\"ext_authz_http\",{route},decision=\"allowed\"}}"),
            1.0,
        ),
        (
            format!("prefill_guard_requests_total{{mode=\"ext_authz_http\",{route},decision=\"refused\"}}"),
            1.0,
        ),
        (
            format!("prefill_guard_rejections_total{{mode=\"ext_authz_http\",{route},reason=\"context_length_exceeded\"}}"),
            1.0,
        ),
        (
            format!("prefill_guard_prompt_tokens_count{{mode=\"ext_authz_http\",{route}}}"),
            2.0,
        ),
        (
            format!("prefill_guard_requests_total{{mode=\"proxy\",{route},decision=\"refused\"}}"),
            1.0,
        ),
        (
            format!("prefill_guard_rejections_total{{mode=\"proxy\",{route},reason=\"context_length_exceeded\"}}"),
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), want, "{series}\n{text}");
    }
    // How each count decided, by mode too.
    assert!(
        text.contains(&format!(
            "prefill_guard_count_method_total{{mode=\"ext_authz_http\",{route},method="
        )),
        "{text}"
    );
}

// === Traefik ForwardAuth ===

async fn traefik_guard() -> Guard {
    spawn(&format!(
        "max_req_input_len = {LIMIT}\nmax_body_bytes = 65536\nauthz_style = \"traefik\"\n"
    ))
    .await
}

impl Guard {
    /// A check as Traefik ForwardAuth sends it (`forwardBody: true`,
    /// `trustForwardHeader: false`): GET to the configured address with the
    /// client's headers, its method and target in `X-Forwarded-*`, its body.
    async fn traefik(&self, method: &str, uri: &str, body: &str) -> Answer {
        self.raw(
            "GET",
            "/",
            &[
                JSON,
                ("x-forwarded-method", method),
                ("x-forwarded-uri", uri),
                ("x-forwarded-host", "llm.example"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-for", "203.0.113.7"),
            ],
            body,
        )
        .await
    }
}

#[tokio::test]
async fn traefik_forward_auth_checks_the_original_request() {
    let mut g = traefik_guard().await;
    let a = g.traefik("POST", "/v1/chat/completions", &chat(10)).await;
    assert_allowed(&a);
    assert_eq!(a.headers["x-prefill-guard-tokens"], "15");
    let line = g.decision().await;
    assert_eq!(line["mode"], "ext_authz_http");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["route"], "/v1/chat/completions");

    let long = chat(LIMIT);
    let a = g.traefik("POST", "/v1/chat/completions", &long).await;
    let p = g
        .proxy("POST", "/v1/chat/completions", &[JSON], &long)
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(a.body, p.body);
    assert_eq!(label(&a), "context_length_exceeded");
    let gen = json!({"text": words(LIMIT)}).to_string();
    let a = g.traefik("POST", "/generate?x=1", &gen).await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.body,
        g.proxy("POST", "/generate", &[JSON], &gen).await.body
    );

    assert_allowed(&g.traefik("GET", "/v1/models", "").await);
    let a = g.traefik("GET", "/v1/chat/completions", "").await;
    assert_eq!(a.status, 405);
    let a = g.traefik("POST", "/admin/secret", &chat(1)).await;
    assert_eq!(a.status, 404);
    // With `preserveRequestMethod`, the check keeps the client's method.
    let a = g
        .raw(
            "POST",
            "/",
            &[
                JSON,
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/v1/chat/completions"),
            ],
            &chat(3),
        )
        .await;
    assert_allowed(&a);
}

#[tokio::test]
async fn traefik_checks_without_a_clear_original_are_denied() {
    let g = traefik_guard().await;
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        // Not the ForwardAuth address.
        (
            "/v1/chat/completions",
            vec![
                JSON,
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/v1/chat/completions"),
            ],
        ),
        // What Envoy would send to a Traefik-style listener.
        ("/", vec![JSON]),
        ("/", vec![JSON, ("x-forwarded-method", "POST")]),
        ("/", vec![JSON, ("x-forwarded-uri", "/v1/chat/completions")]),
        (
            "/",
            vec![
                JSON,
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "http://llm.example/v1/chat/completions"),
            ],
        ),
        (
            "/",
            vec![
                JSON,
                ("x-forwarded-method", "PO ST"),
                ("x-forwarded-uri", "/v1/chat/completions"),
            ],
        ),
    ];
    for (target, headers) in cases {
        let a = g.raw("GET", target, &headers, &chat(3)).await;
        assert_denied(&a);
        assert_eq!(a.status, 400, "{target} {headers:?}");
    }
    // Forwarded headers Traefik did not write (`trustForwardHeader` on, a
    // misconfiguration): an over-long POST disguised as a health probe.
    let disguised = [
        JSON,
        ("x-forwarded-method", "GET"),
        ("x-forwarded-uri", "/health"),
    ];
    // With `preserveRequestMethod` the check's own method gives it away...
    let a = g.raw("POST", "/", &disguised, &chat(LIMIT)).await;
    assert_denied(&a);
    assert_eq!(a.status, 400);
    // ... and without it, a probe does not carry a prompt.
    let a = g.raw("GET", "/", &disguised, &chat(LIMIT)).await;
    assert_denied(&a);
    assert_eq!(a.status, 400);
    let a = g.raw("GET", "/", &disguised, "").await;
    assert_allowed(&a);
    // Two `X-Forwarded-Uri` (one the client's, one Traefik's): ambiguous.
    let req = g
        .http
        .get(format!("http://{}/", g.authz))
        .header("content-type", "application/json")
        .header("x-forwarded-method", "POST")
        .header("x-forwarded-uri", "/health")
        .header("x-forwarded-uri", "/v1/chat/completions")
        .body(chat(LIMIT));
    let a = Answer::read(req.send().await.unwrap()).await;
    assert_denied(&a);
}

// === server-side refusals: never a 5xx ===

#[tokio::test]
async fn overload_is_denied_with_429_not_503() {
    // One counting thread, no queue: concurrent counts beyond one are shed.
    // The limit is above every prompt and below its byte length, so each is
    // tokenized to the end (no early exit, no byte bound).
    let g = spawn(
        "max_req_input_len = 2000000\nmax_body_bytes = 33554432\ncount_workers = 1\ncount_queue = 0\n",
    )
    .await;
    let body = chat(400_000);
    let mut shed = None;
    for _ in 0..10 {
        let burst =
            (0..12).map(|_| g.envoy_unprefixed("POST", "/v1/chat/completions", &[JSON], &body));
        for a in futures_util::future::join_all(burst).await {
            assert!(
                a.status == 200 || a.status == 429,
                "{}: {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
            if a.status == 429 {
                shed = Some(a);
            }
        }
        if shed.is_some() {
            break;
        }
    }
    let a = shed.expect("a burst of 12 counts on one thread with no queue sheds");
    assert_denied(&a);
    assert_eq!(a.headers["retry-after"], "1");
    assert_eq!(label(&a), "overloaded");
    // The proxy answers the same overload with its native 503.
    let m = g.metrics().await;
    assert!(
        sample(
            &m,
            &format!("prefill_guard_rejections_total{{mode=\"ext_authz_http\",route=\"/v1/chat/completions\",model=\"{MODEL}\",reason=\"overloaded\"}}")
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn unknown_limit_is_denied_with_429_not_503() {
    // A prefill worker that never answers: no limit is known, so every prompt
    // is refused (the proxy's 503 `limit_unknown`), as a retryable deny.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let worker = closed.local_addr().unwrap();
    drop(closed);
    let g = spawn(&format!("prefill_urls = [\"http://{worker}\"]\n")).await;
    let a = g
        .envoy_unprefixed("POST", "/v1/chat/completions", &[JSON], &chat(3))
        .await;
    assert_denied(&a);
    assert_eq!(a.status, 429);
    assert_eq!(a.headers["retry-after"], "5");
    assert_eq!(label(&a), "limit_unknown");
    let p = g
        .proxy("POST", "/v1/chat/completions", &[JSON], &chat(3))
        .await;
    assert_eq!(p.status, 503);
    assert_eq!(a.body, p.body, "the same refusal, only the status differs");
}

impl Guard {
    /// A check from an Envoy without `path_prefix`.
    async fn envoy_unprefixed(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        self.raw(method, path, headers, body).await
    }
}

// === the check connection itself ===

#[tokio::test]
async fn envoy_checks_over_h2c_and_keep_alive() {
    use common::wire::{h1_pipeline, h2_streams, Req};
    let g = envoy_guard().await;
    let short = Req::post(format!("{PREFIX}/v1/chat/completions"), chat(3));
    let long = Req::post(format!("{PREFIX}/v1/chat/completions"), chat(LIMIT));
    // Envoy's authz cluster with `http2_protocol_options`: concurrent checks
    // on one h2c connection, bodies in small DATA frames.
    let answers = h2_streams(g.authz, &[short.clone(), long.clone(), short.clone()], 7).await;
    let statuses: Vec<u16> = answers
        .iter()
        .map(|a| a.as_ref().expect("every stream answered").status)
        .collect();
    assert_eq!(statuses, [200, 400, 200]);
    // HTTP/1.1 keep-alive: checks one after the other on one connection.
    let answers = h1_pipeline(g.authz, &[short.clone(), long, short]).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 400, 200]);
}

#[tokio::test]
async fn ambiguous_framing_on_the_check_is_denied_and_closes() {
    use common::wire::{h1_raw, Framing, Req};
    let g = envoy_guard().await;
    let smuggle = Req::post(format!("{PREFIX}/v1/chat/completions"), chat(3))
        .header("content-length", Some("4"))
        .header("transfer-encoding", Some("chunked"))
        .framing(Framing::Verbatim);
    let answers = h1_raw(g.authz, &smuggle.to_h1(false)).await;
    assert_eq!(
        answers.len(),
        1,
        "one answer, then the connection is closed"
    );
    assert_eq!(answers[0].status, 400, "{}", answers[0].text());
    let v: Value = serde_json::from_slice(&answers[0].body).unwrap();
    assert_eq!(v["error"]["code"], "bad_framing");
}

// === the adversarial corpus, as Envoy checks ===

/// Every case of the proxy's adversarial and legitimate corpora (issue 3),
/// sent to the authorization listener as an Envoy without `path_prefix`
/// would send it: the same method, target, headers and body. What the proxy
/// refuses is denied with the same status and reason, what it forwards is
/// allowed, and a connection it closes is closed here too.
async fn run_corpus_as_checks(cases: &[common::corpus::Case]) -> usize {
    use common::corpus::Exp;
    use common::wire::{h1_pipeline, h2_streams};
    let g = spawn(&format!(
        "max_req_input_len = {}\nmax_body_bytes = 65536\n",
        common::corpus::LIMIT
    ))
    .await;
    let mut failures = Vec::new();
    let mut sent = 0;
    for h2 in [false, true] {
        for case in cases {
            if h2 && case.h1_only() {
                continue;
            }
            let reqs: Vec<_> = case.reqs.iter().map(|(r, _)| r.clone()).collect();
            let got: Vec<Option<(u16, Vec<u8>)>> = if h2 {
                h2_streams(g.authz, &reqs, 3)
                    .await
                    .into_iter()
                    .map(|r| r.map(|r| (r.status, r.body)))
                    .collect()
            } else {
                let got = h1_pipeline(g.authz, &reqs).await;
                (0..reqs.len())
                    .map(|i| got.get(i).map(|r| (r.status, r.body.clone())))
                    .collect()
            };
            sent += reqs.len();
            for (i, ((_, exp), got)) in case.reqs.iter().zip(&got).enumerate() {
                let shown = got.as_ref().map_or("no answer".to_string(), |(s, b)| {
                    format!("{s} {}", String::from_utf8_lossy(b))
                });
                let ok = match (exp, got) {
                    (Exp::Arrive { .. }, Some((200, body))) => body.is_empty(),
                    (Exp::Refused { status, says }, Some((s, body))) => {
                        s == status
                            && says.is_none_or(|w| String::from_utf8_lossy(body).contains(w))
                    }
                    (Exp::Dropped, None) => true,
                    _ => false,
                };
                if !ok {
                    failures.push(format!(
                        "{} {}: request {i}: want {exp:?}, got {shown}",
                        if h2 { "h2c" } else { "http1" },
                        case.name
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    sent
}

#[tokio::test]
async fn adversarial_corpus_as_checks_is_never_allowed() {
    let sent = run_corpus_as_checks(&common::corpus::adversarial()).await;
    println!("{sent} adversarial checks");
}

#[tokio::test]
async fn legitimate_corpus_as_checks_is_allowed() {
    let sent = run_corpus_as_checks(&common::corpus::legitimate()).await;
    println!("{sent} legitimate checks");
}
