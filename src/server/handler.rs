//! One request on the proxy port, from arrival to response headers.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{request, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::Full;
use hyper::body::Incoming;

use super::body::{read_capped, ResponseBody};
use super::App;
use crate::errors::{Reason, Refusal};
use crate::guard::Decision;
use crate::inspect::{path, routes, Route, RouteClass};
use crate::logging::{self, DecisionLine};
use crate::metrics::{self, InFlight};
use crate::proxy::headers;
use crate::proxy::Client;

/// The `route` label of requests whose target is not a known route.
const OTHER_ROUTE: &str = "other";

/// The proxy's request path, outermost first:
///
/// 1. in-flight accounting: first, so the gauge covers everything below and
///    a streamed answer until its last byte;
/// 2. the decision core ([`guard_and_forward`]): canonical path → route class →
///    capped body read → count and policy → forward. Each step can refuse,
///    and a refusal stops the request before a byte reaches upstream;
/// 3. the response: the upstream's, streamed, or a refusal built by
///    `errors::Refusal`, the one place that decides status and body;
/// 4. metrics and the decision log, once per request, at response headers.
pub async fn handle(
    app: &App,
    client: Client,
    request_id: HeaderValue,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let in_flight = app.metrics.in_flight();
    let started = Instant::now();
    let method = req.method().clone();
    let mut rec = Record {
        body_pending: !req.body().is_end_stream(),
        ..Record::default()
    };

    let outcome = guard_and_forward(app, client, &request_id, req, &mut rec).await;
    let (response, reason) = match outcome {
        Ok(upstream) if app.rewrite_models_max_len && rec.is_model_listing(&method) => {
            let upstream = super::models::clamp_listing(app, upstream).await;
            (from_upstream(upstream, &request_id, in_flight), None)
        }
        Ok(upstream) => (from_upstream(upstream, &request_id, in_flight), None),
        Err(reason) => (
            refusal(&reason, rec.route, rec.body_pending, &request_id, in_flight),
            Some(reason),
        ),
    };
    observe(
        app,
        &rec,
        reason.as_ref(),
        &request_id,
        method.as_str(),
        response.status(),
        started.elapsed(),
    );
    response
}

/// What one request did, for its metrics and its decision-log line.
#[derive(Default)]
struct Record {
    /// The inspected route, once known: labels and the refusal's body shape.
    route: Option<Route>,
    /// A pass-through route's canonical path (one of a fixed few).
    pass_through: Option<String>,
    model: Option<String>,
    tokens: Option<usize>,
    limit: Option<usize>,
    count_time: Option<Duration>,
    /// The guard let the request through; any later failure is the upstream's.
    allowed: bool,
    /// Part of the request body is still unread on the connection.
    body_pending: bool,
    upstream: Option<(StatusCode, Duration)>,
}

impl Record {
    fn route_label(&self) -> &str {
        match (&self.route, &self.pass_through) {
            (Some(r), _) => r.path(),
            (None, Some(p)) => p,
            (None, None) => OTHER_ROUTE,
        }
    }

    /// A `GET /v1/models` the guard passed (its answer may be rewritten).
    fn is_model_listing(&self, method: &http::Method) -> bool {
        method == http::Method::GET && self.pass_through.as_deref() == Some("/v1/models")
    }

    fn absorb(&mut self, d: &Decision) {
        self.model.clone_from(&d.model);
        self.tokens = d.tokens;
        self.limit = d.limit;
        if d.tokens.is_some() || !d.count_time.is_zero() {
            self.count_time = Some(d.count_time);
        }
    }
}

async fn guard_and_forward(
    app: &App,
    client: Client,
    request_id: &HeaderValue,
    req: Request<Incoming>,
    rec: &mut Record,
) -> Result<Response<Incoming>, Reason> {
    // Framing first: a request whose framing is ambiguous is refused whatever
    // its route, and its connection closed (`super::framing`).
    super::framing::check_verdict(&req)?;
    super::framing::check_headers(req.version(), req.headers())?;
    let canonical = path::canonical_path(&request_target(&req))?;
    rec.route = Route::from_path(&canonical);
    // The operator's allowlist opens a path deliberately (never a prompt route:
    // checked at startup), whatever the method.
    let class = if app.allow_routes.allows(&canonical) {
        RouteClass::PassThrough(canonical.clone())
    } else {
        routes::classify(req.method(), &canonical)?
    };
    let (mut parts, body) = req.into_parts();
    let checked = match class {
        RouteClass::Inspect(route) => inspect(app, route, &parts.headers, body, rec).await?,
        RouteClass::PassThrough(path) => pass_through(app, path, &parts.uri, body, rec).await?,
    };
    rec.allowed = true;
    let host = app.upstream.host_header();
    headers::to_upstream(
        &mut parts.headers,
        client,
        host,
        request_id,
        checked.body_len,
    );
    forward(app, parts, checked.target, checked.body, rec).await
}

/// What the guard lets through: where to, and the body to send.
struct Checked {
    target: Uri,
    body: Bytes,
    /// Set when the guard re-serialised the body (and so decides its framing).
    body_len: Option<usize>,
}

/// Counts the prompt and applies the limit; only the canonical body the guard
/// parsed is forwarded. The query string is dropped: SGLang's inspected routes
/// read none, and the guard forwards only what it has checked.
async fn inspect(
    app: &App,
    route: Route,
    headers: &HeaderMap,
    body: Incoming,
    rec: &mut Record,
) -> Result<Checked, Reason> {
    refuse_encoded(headers)?;
    let body = read_capped(body, app.max_body_bytes).await?;
    rec.body_pending = false;
    let content_type = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
    let decision = app.guard.check(route, content_type, body).await;
    rec.absorb(&decision);
    let body = decision.verdict?;
    let body_len = Some(body.len());
    Ok(Checked {
        target: app.upstream.uri(route.path(), None)?,
        body,
        body_len,
    })
}

/// Health and model listing carry no prompt: forwarded with their query.
async fn pass_through(
    app: &App,
    path: String,
    uri: &Uri,
    body: Incoming,
    rec: &mut Record,
) -> Result<Checked, Reason> {
    let body = read_capped(body, app.max_body_bytes).await?;
    rec.body_pending = false;
    let target = app.upstream.uri(&path, uri.query())?;
    rec.pass_through = Some(path);
    Ok(Checked {
        target,
        body,
        body_len: None,
    })
}

/// The target as a client wrote it. HTTP/2 always carries scheme and authority
/// (pseudo-headers), which hyper puts in the URI; only HTTP/1's absolute-form
/// target, which a reverse proxy has no reason to receive, is refused for them.
fn request_target<B>(req: &Request<B>) -> Cow<'_, Uri> {
    match (req.version(), req.uri().path_and_query()) {
        (Version::HTTP_2, Some(pq)) => Cow::Owned(Uri::from(pq.clone())),
        _ => Cow::Borrowed(req.uri()),
    }
}

/// The guard counts the bytes it reads; a compressed body would be counted as
/// garbage and decoded differently upstream, so it is refused outright. That
/// includes SGLang's own `x-body-compressed` (decompressed by its middleware
/// when `SGLANG_ENABLE_REQUEST_DECOMPRESSION` is set), whatever its value.
fn refuse_encoded(headers: &HeaderMap) -> Result<(), Reason> {
    let encoded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(Reason::UnsupportedMediaType(
            "compressed request bodies (`Content-Encoding`) are not accepted".into(),
        ));
    }
    if headers.contains_key(X_BODY_COMPRESSED) {
        return Err(Reason::UnsupportedMediaType(
            "compressed request bodies (`x-body-compressed`) are not accepted".into(),
        ));
    }
    Ok(())
}

/// SGLang's request-decompression header (`http_request_decompression.py`).
const X_BODY_COMPRESSED: &str = "x-body-compressed";

async fn forward(
    app: &App,
    parts: request::Parts,
    target: Uri,
    body: Bytes,
    rec: &mut Record,
) -> Result<Response<Incoming>, Reason> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = target;
    *req.headers_mut() = parts.headers;
    let sent = Instant::now();
    let response = app.upstream.send(req).await?;
    rec.upstream = Some((response.status(), sent.elapsed()));
    Ok(response)
}

fn from_upstream<B>(
    response: Response<B>,
    request_id: &HeaderValue,
    in_flight: InFlight,
) -> Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes, Error = hyper::Error> + Send + Sync + 'static,
{
    let (mut parts, body) = response.into_parts();
    // The version is the client connection's business, not the upstream's
    // (an HTTP/1.0 upstream must not make the guard answer in 1.0).
    parts.version = Version::default();
    headers::to_client(&mut parts.headers, request_id);
    Response::from_parts(parts, ResponseBody::streamed(body, in_flight))
}

fn refusal(
    reason: &Reason,
    route: Option<Route>,
    body_pending: bool,
    request_id: &HeaderValue,
    in_flight: InFlight,
) -> Response<ResponseBody> {
    let refusal = Refusal::new(reason.clone(), route);
    let mut response = Response::new(ResponseBody::full(refusal.body(), in_flight));
    *response.status_mut() = refusal.status();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(headers::X_REQUEST_ID, request_id.clone());
    if let Some(secs) = reason.retry_after() {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    // An unread body would have to be drained before the next request on the
    // connection; closing is cheaper and cannot desynchronise framing.
    if body_pending || reason.closes_connection() {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn observe(
    app: &App,
    rec: &Record,
    reason: Option<&Reason>,
    request_id: &HeaderValue,
    method: &str,
    status: StatusCode,
    latency: Duration,
) {
    let m = &app.metrics;
    let route = rec.route_label();
    let model = rec.model.as_deref().unwrap_or("");
    let decision = if rec.allowed {
        metrics::Decision::Allowed
    } else {
        metrics::Decision::Refused
    };
    m.request(route, model, decision);
    match (decision, reason) {
        (metrics::Decision::Refused, Some(r)) => m.rejection(route, model, r.label()),
        (metrics::Decision::Allowed, Some(r)) => m.upstream_error(route, model, r.label()),
        _ => {}
    }
    if let Some(tokens) = rec.tokens {
        m.prompt_tokens(route, model, tokens);
    }
    if let Some(took) = rec.count_time {
        m.count_duration(route, model, took);
    }
    if let Some((_, took)) = rec.upstream {
        m.upstream_duration(route, took);
    }
    logging::decision(&DecisionLine {
        request_id: request_id.to_str().unwrap_or_default(),
        method,
        route,
        model: rec.model.as_deref(),
        tokens: rec.tokens,
        limit: rec.limit,
        decision: if rec.allowed { "allowed" } else { "refused" },
        reason: reason.map(Reason::label),
        status: status.as_u16(),
        upstream_status: rec.upstream.map(|(s, _)| s.as_u16()),
        latency,
    });
}
