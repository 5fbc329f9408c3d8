//! Envoy ext_authz over gRPC (`envoy.service.auth.v3.Authorization/Check`)
//! and the gRPC health service, against the real guard's gRPC listener,
//! driven by a tonic client built from the same Envoy protos Envoy speaks.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;

use common::{sample, start, words, Guarded, Options, MODEL};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap as ProtoHeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::auth::v3::{
    attribute_context::{HttpRequest, Request as AttrRequest},
    authorization_client::AuthorizationClient,
    check_response::HttpResponse,
    AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse,
};
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient};

/// The demo model's limit here: a chat of `n` words is `n + 5` tokens.
const LIMIT: usize = 32;

async fn guard(opts: Options) -> (Guarded, AuthorizationClient<Channel>) {
    let g = start(Options {
        grpc: true,
        limit: LIMIT,
        ..opts
    })
    .await;
    let client = AuthorizationClient::connect(format!("http://{}", g.grpc.unwrap()))
        .await
        .expect("the gRPC listener accepts");
    (g, client)
}

fn chat(n: usize) -> Vec<u8> {
    common::bodies::chat(n).to_string().into_bytes()
}

/// How Envoy describes a request: headers as a map (values of repeated
/// headers joined), the body as UTF-8 `body` or, with `pack_as_bytes`,
/// `raw_body`.
struct Check<'a> {
    method: &'a str,
    path: &'a str,
    headers: Vec<(&'a str, String)>,
    body: Vec<u8>,
    pack_as_bytes: bool,
    raw_headers: bool,
}

impl<'a> Check<'a> {
    fn post(path: &'a str, body: Vec<u8>) -> Self {
        Self {
            method: "POST",
            path,
            headers: vec![
                ("content-type", "application/json".into()),
                ("content-length", body.len().to_string()),
                ("x-envoy-auth-partial-body", "false".into()),
            ],
            body,
            pack_as_bytes: false,
            raw_headers: false,
        }
    }

    fn request(self) -> CheckRequest {
        let mut http = HttpRequest {
            method: self.method.into(),
            path: self.path.into(),
            host: "guarded".into(),
            scheme: "http".into(),
            protocol: "HTTP/1.1".into(),
            size: self.body.len() as i64,
            ..Default::default()
        };
        if self.raw_headers {
            http.header_map = Some(ProtoHeaderMap {
                headers: self
                    .headers
                    .iter()
                    .map(|(k, v)| HeaderValue {
                        key: (*k).into(),
                        value: String::new(),
                        raw_value: v.as_bytes().to_vec(),
                    })
                    .collect(),
            });
        } else {
            http.headers = self
                .headers
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect::<HashMap<_, _>>();
        }
        if self.pack_as_bytes {
            http.raw_body = self.body;
        } else {
            http.body = String::from_utf8(self.body).expect("a UTF-8 body");
        }
        CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(AttrRequest {
                    http: Some(http),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }
}

async fn check(client: &mut AuthorizationClient<Channel>, c: Check<'_>) -> CheckResponse {
    client
        .check(c.request())
        .await
        .expect("a judged request is answered, never failed")
        .into_inner()
}

fn allowed_tokens(r: &CheckResponse) -> Option<String> {
    assert_eq!(r.status.as_ref().unwrap().code, 0, "allowed: {r:?}");
    let Some(HttpResponse::OkResponse(ok)) = &r.http_response else {
        panic!("an ok_response: {r:?}");
    };
    ok.headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == "x-prefill-guard-tokens")
        .map(|h| h.value.clone())
}

fn denied(r: &CheckResponse) -> &DeniedHttpResponse {
    assert_eq!(
        r.status.as_ref().unwrap().code,
        tonic::Code::PermissionDenied as i32,
        "denied: {r:?}"
    );
    match &r.http_response {
        Some(HttpResponse::DeniedResponse(d)) => d,
        other => panic!("a denied_response: {other:?}"),
    }
}

fn status(d: &DeniedHttpResponse) -> i32 {
    d.status
        .expect("an explicit status (Envoy's default is 403)")
        .code
}

fn header<'a>(d: &'a DeniedHttpResponse, name: &str) -> Option<&'a str> {
    d.headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

async fn metrics(g: &Guarded) -> String {
    g.metrics().await
}

#[tokio::test]
async fn a_short_prompt_is_allowed_with_its_token_count() {
    let (g, mut client) = guard(Options::default()).await;
    let r = check(&mut client, Check::post("/v1/chat/completions", chat(3))).await;
    assert_eq!(allowed_tokens(&r).as_deref(), Some("8"));
    // With pack_as_bytes and encode_raw_headers too.
    let c = Check {
        pack_as_bytes: true,
        raw_headers: true,
        ..Check::post("/v1/chat/completions", chat(LIMIT - 6))
    };
    let r = check(&mut client, c).await;
    assert_eq!(allowed_tokens(&r), Some((LIMIT - 1).to_string()));
    // Nothing is forwarded by the guard in this mode: Envoy does that.
    assert_eq!(g.mock.state.count(), 0);
    let m = metrics(&g).await;
    assert_eq!(
        sample(
            &m,
            &format!("prefill_guard_requests_total{{mode=\"ext_authz_grpc\",route=\"/v1/chat/completions\",model=\"{MODEL}\",decision=\"allowed\"}}")
        ),
        2.0,
        "{m}"
    );
    common::promtool_check_metrics(&m);
}

#[tokio::test]
async fn an_over_long_prompt_is_denied_with_the_proxys_own_answer() {
    let (g, mut client) = guard(Options::default()).await;
    let body = chat(LIMIT - 5);
    let proxy = g.post_raw("/v1/chat/completions", body.clone()).await;
    assert_eq!(proxy.status, 400);
    for pack_as_bytes in [false, true] {
        let c = Check {
            pack_as_bytes,
            ..Check::post("/v1/chat/completions", body.clone())
        };
        let r = check(&mut client, c).await;
        let d = denied(&r);
        assert_eq!(status(d), 400);
        assert_eq!(header(d, "content-type"), Some("application/json"));
        assert_eq!(
            d.body.as_bytes(),
            &proxy.body[..],
            "the same body as the proxy's"
        );
        let v: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(
            r.status.as_ref().unwrap().message,
            "context_length_exceeded"
        );
    }
    // `/generate` keeps SGLang's own error shape.
    let body = json!({"model": MODEL, "text": words(LIMIT)})
        .to_string()
        .into_bytes();
    let d = check(&mut client, Check::post("/generate", body)).await;
    let v: Value = serde_json::from_str(&denied(&d).body).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Input length"),
        "{v}"
    );
    let m = metrics(&g).await;
    assert_eq!(
        sample(
            &m,
            &format!("prefill_guard_rejections_total{{mode=\"ext_authz_grpc\",route=\"/v1/chat/completions\",model=\"{MODEL}\",reason=\"context_length_exceeded\"}}")
        ),
        2.0,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            &format!("prefill_guard_rejections_total{{mode=\"proxy\",route=\"/v1/chat/completions\",model=\"{MODEL}\",reason=\"context_length_exceeded\"}}")
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_partial_or_missing_body_is_denied() {
    let (_g, mut client) = guard(Options::default()).await;
    // allow_partial_message: Envoy cut the body at max_request_bytes.
    let mut c = Check::post("/v1/chat/completions", chat(1));
    c.headers[2].1 = "true".into();
    let d = check(&mut client, c).await;
    assert_eq!(status(denied(&d)), 413);
    // with_request_body not configured: the body is missing, Content-Length says it exists.
    let mut c = Check::post("/v1/chat/completions", Vec::new());
    c.headers[1].1 = chat(1).len().to_string();
    let d = check(&mut client, c).await;
    assert_eq!(status(denied(&d)), 403);
    // No body and no Content-Length: an empty body is not a request.
    let mut c = Check::post("/v1/chat/completions", Vec::new());
    c.headers.remove(1);
    let d = check(&mut client, c).await;
    assert_eq!(status(denied(&d)), 400);
    // No HTTP attributes at all.
    let r = client
        .check(CheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status(denied(&r)), 403);
}

#[tokio::test]
async fn a_body_over_the_cap_is_denied_413() {
    let (_g, mut client) = guard(Options {
        max_body_bytes: 4096,
        ..Options::default()
    })
    .await;
    let mut body = chat(1);
    body.truncate(body.len() - 1);
    body.extend(std::iter::repeat_n(b' ', 5000));
    body.push(b'}');
    let r = check(&mut client, Check::post("/v1/chat/completions", body)).await;
    let d = denied(&r);
    assert_eq!(status(d), 413);
    assert_eq!(header(d, "content-type"), Some("application/json"));
}

#[tokio::test]
async fn routes_methods_and_headers_are_judged_as_the_proxy_judges_them() {
    let (_g, mut client) = guard(Options::default()).await;
    // Unknown route: default deny, 404.
    let r = check(&mut client, Check::post("/v1/unknown", chat(1))).await;
    assert_eq!(status(denied(&r)), 404);
    // Pass-through routes carry no prompt.
    let get = |path| Check {
        method: "GET",
        headers: Vec::new(),
        ..Check::post(path, Vec::new())
    };
    let r = check(&mut client, get("/v1/models")).await;
    assert_eq!(allowed_tokens(&r), None);
    let r = check(&mut client, get("/health")).await;
    assert_eq!(r.status.unwrap().code, 0);
    // A prompt route with the wrong method.
    let r = check(&mut client, get("/v1/chat/completions")).await;
    assert_eq!(status(denied(&r)), 405);
    // A spelling of the path another server could read differently.
    let r = check(&mut client, Check::post("/v1//chat/completions", chat(1))).await;
    assert_eq!(status(denied(&r)), 400);
    // Compressed bodies are never counted.
    let mut c = Check::post("/v1/chat/completions", chat(1));
    c.headers.push(("content-encoding", "gzip".into()));
    assert_eq!(status(denied(&check(&mut client, c).await)), 415);
    // Not JSON.
    let mut c = Check::post("/v1/chat/completions", chat(1));
    c.headers[0].1 = "text/plain".into();
    assert_eq!(status(denied(&check(&mut client, c).await)), 415);
    // Duplicate keys read differently by different parsers.
    let dup = br#"{"model":"demo","messages":[],"messages":[{"role":"user","content":"hello"}]}"#;
    let r = check(
        &mut client,
        Check::post("/v1/chat/completions", dup.to_vec()),
    )
    .await;
    assert_eq!(status(denied(&r)), 400);
}

#[tokio::test]
async fn an_unknown_limit_is_429_with_retry_after_never_5xx() {
    let (_g, mut client) = guard(Options {
        limit_known: false,
        ..Options::default()
    })
    .await;
    let r = check(&mut client, Check::post("/v1/chat/completions", chat(1))).await;
    let d = denied(&r);
    assert_eq!(status(d), 429);
    assert!(header(d, "retry-after").is_some());
}

async fn health(addr: SocketAddr, service: &str) -> ServingStatus {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let r = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(r.status).unwrap()
}

/// On a paused clock (`common::clock`): readiness is re-read every 500 ms by
/// the gRPC listener, which runs on the test's runtime, as do the health
/// checks; nothing here goes through the proxy port.
#[tokio::test(start_paused = true)]
async fn health_serves_every_service_name_and_readiness_follows_the_limits() {
    let _ticking = common::clock::ticking();
    let (g, _) = guard(Options::default()).await;
    let addr = g.grpc.unwrap();
    for service in [
        "",
        "liveness",
        "readiness",
        "envoy.service.auth.v3.Authorization",
        "envoy.service.ext_proc.v3.ExternalProcessor",
    ] {
        assert_eq!(
            health(addr, service).await,
            ServingStatus::Serving,
            "{service:?}"
        );
    }
    let (g, _) = guard(Options {
        limit_known: false,
        ..Options::default()
    })
    .await;
    let addr = g.grpc.unwrap();
    assert_eq!(health(addr, "").await, ServingStatus::Serving);
    // Becomes ready once discovery (here: the test) sets the limit.
    let ready = async {
        loop {
            match health(addr, "readiness").await {
                ServingStatus::Serving => return,
                s => assert_eq!(s, ServingStatus::NotServing),
            }
            g.profiles.set_limit(MODEL, LIMIT);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(common::PATIENCE, ready)
        .await
        .expect("readiness follows the limit");
}

#[tokio::test]
async fn the_binary_serves_grpc_on_grpc_listen() {
    let mock = common::start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::binary_config(
        dir.path(),
        mock.addr,
        &format!("count_workers = 2\nmax_req_input_len = {LIMIT}\n"),
    );
    let spawned = common::spawn_binary_with_args(&config, &["--grpc-listen", "127.0.0.1:0"]).await;
    let addr: SocketAddr = spawned.serving["grpc_listen"]
        .as_str()
        .expect("the serving line names the gRPC listener")
        .parse()
        .unwrap();
    assert_eq!(
        health(addr, "envoy.service.auth.v3.Authorization").await,
        ServingStatus::Serving
    );
    let mut client = AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let r = check(
        &mut client,
        Check::post("/v1/chat/completions", chat(LIMIT)),
    )
    .await;
    assert_eq!(status(denied(&r)), 400);
    let r = check(&mut client, Check::post("/v1/chat/completions", chat(1))).await;
    assert_eq!(allowed_tokens(&r).as_deref(), Some("6"));
}
