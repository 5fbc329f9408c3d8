//! One request on the proxy port, from arrival to response headers: the
//! proxy adapter over the shared decision core (`crate::core`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{request, Method, Request, Response, Uri, Version};
use http_body_util::Full;
use hyper::body::Incoming;

use super::body::ResponseBody;
use crate::app::{App, Arrival, Received};
use crate::core::{self, Admit, Denial, Mode, Outcome, Record};
use crate::errors::Reason;
use crate::inspect::Route;
use crate::metrics::InFlight;
use crate::proxy::headers;
use crate::proxy::Client;

/// The proxy's request path, outermost first:
///
/// 1. in-flight accounting: first, so the gauge covers everything below and
///    a streamed answer until its last byte;
/// 2. [`guard_and_forward`]: the HTTP adapters' preamble (`App::receive`:
///    framing → `Gate::classify`: canonical path → route class → header
///    checks → capped body read) → `Gate::check_body`: count and policy →
///    forward.
///    Each step can refuse, and a refusal stops the request before a byte
///    reaches upstream;
/// 3. the response: the upstream's, streamed, or a refusal built by
///    `core::Denial` (status and body from `errors::Reason`);
/// 4. metrics and the decision log (`core::observe`), once per request, at
///    response headers.
pub async fn handle(
    app: &App,
    client: Client,
    request_id: HeaderValue,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let in_flight = app.metrics.in_flight();
    let started = Instant::now();
    let mut arrival = Arrival::of(&req);

    let Outcome { record, verdict } =
        guard_and_forward(app, client, &request_id, req, &mut arrival).await;
    let Arrival {
        method,
        body_pending,
    } = arrival;
    let (response, reason) = match verdict {
        Ok(upstream) if app.rewrite_models_max_len && is_model_listing(&record, &method) => {
            let upstream = super::models::clamp_listing(app, upstream).await;
            (
                from_upstream(
                    upstream,
                    &request_id,
                    in_flight,
                    app.upstream.idle_timeout(),
                ),
                None,
            )
        }
        Ok(upstream) => (
            from_upstream(
                upstream,
                &request_id,
                in_flight,
                app.upstream.idle_timeout(),
            ),
            None,
        ),
        Err(reason) => (
            refusal(&reason, record.route, body_pending, &request_id, in_flight),
            Some(reason),
        ),
    };
    core::observe(
        &app.metrics,
        &record,
        reason.as_ref(),
        request_id.to_str().unwrap_or_default(),
        method.as_str(),
        response.status(),
        started.elapsed(),
    );
    response
}

/// A `GET /v1/models` the guard passed (its answer may be rewritten).
fn is_model_listing(record: &Record, method: &http::Method) -> bool {
    method == http::Method::GET && record.pass_through.as_deref() == Some("/v1/models")
}

/// The upstream's answer, or why there is none, with the request's Record:
/// the core's, with the upstream's status and time added once it answered.
/// An error after the guard admitted the request is the upstream's
/// (`record.allowed`).
async fn guard_and_forward(
    app: &App,
    client: Client,
    request_id: &HeaderValue,
    req: Request<Incoming>,
    arrival: &mut Arrival,
) -> Outcome<Response<Incoming>> {
    let Outcome { record, verdict } = app.receive(req, Mode::Proxy, request_target, arrival).await;
    // The reservation is held until the upstream has answered, so the
    // budget counts this body while the guard and the forwarding hold it.
    let Received {
        class,
        mut parts,
        body,
        reservation: _reservation,
    } = match verdict {
        Ok(received) => received,
        Err(reason) => return Outcome::refused(record, reason),
    };
    let query = parts.uri.query().map(str::to_string);
    // The id this request is known by upstream and in the logs, for the
    // decision core's own lines (a sampled count check) too.
    parts
        .headers
        .insert(headers::X_REQUEST_ID, request_id.clone());
    let Outcome { record, verdict } = app
        .gate
        .check_body(record, class, &parts.headers, body)
        .await;
    let checked = match verdict.and_then(|admit| checked(app, admit, query.as_deref())) {
        Ok(checked) => checked,
        // Refused by the guard, or admitted to a target that cannot be
        // written upstream: refused either way.
        Err(reason) => return Outcome::refused(record, reason),
    };
    let host = app.upstream.host_header();
    headers::to_upstream(
        &mut parts.headers,
        client,
        host,
        request_id,
        checked.body_len,
    );
    match forward(app, parts, checked.target, checked.body).await {
        Ok((response, took)) => Outcome {
            record: Record {
                upstream: Some((response.status(), took)),
                ..record
            },
            verdict: Ok(response),
        },
        // The upstream's failure: the request stays allowed (`observe`
        // counts an upstream error, not a refusal).
        Err(reason) => Outcome {
            record,
            verdict: Err(reason),
        },
    }
}

/// Where the guard's admission goes upstream, with the body to send.
fn checked(app: &App, admit: Admit, query: Option<&str>) -> Result<Checked, Reason> {
    Ok(match admit {
        // Only the canonical body the guard parsed is forwarded. The query
        // string is dropped: SGLang's inspected routes read none, and the
        // guard forwards only what it has checked.
        Admit::Inspected { route, body } => Checked {
            target: app.upstream.uri(route.path(), None)?,
            body_len: Some(body.len()),
            body,
        },
        // Health and model listing carry no prompt: forwarded with their query.
        Admit::PassThrough { path, body } => Checked {
            target: app.upstream.uri(&path, query)?,
            body,
            body_len: None,
        },
    })
}

/// What the guard lets through: where to, and the body to send.
struct Checked {
    target: Uri,
    body: Bytes,
    /// Set when the guard re-serialised the body (and so decides its framing).
    body_len: Option<usize>,
}

/// The method and target as a client wrote them. HTTP/2 always carries
/// scheme and authority (pseudo-headers), which hyper puts in the URI; only
/// HTTP/1's absolute-form target, which a reverse proxy has no reason to
/// receive, is refused for them.
fn request_target<B>(req: &Request<B>) -> Result<(Method, Uri), Reason> {
    let target = match (req.version(), req.uri().path_and_query()) {
        (Version::HTTP_2, Some(pq)) => Uri::from(pq.clone()),
        _ => req.uri().clone(),
    };
    Ok((req.method().clone(), target))
}

/// Sends the checked request upstream; returns its answer with the time to
/// its headers.
async fn forward(
    app: &App,
    parts: request::Parts,
    target: Uri,
    body: Bytes,
) -> Result<(Response<Incoming>, Duration), Reason> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = target;
    *req.headers_mut() = parts.headers;
    let sent = Instant::now();
    let response = app.upstream.send(req).await?;
    Ok((response, sent.elapsed()))
}

fn from_upstream<B>(
    response: Response<B>,
    request_id: &HeaderValue,
    in_flight: InFlight,
    idle: std::time::Duration,
) -> Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes, Error = hyper::Error> + Send + Sync + Unpin + 'static,
{
    let (mut parts, body) = response.into_parts();
    // The version is the client connection's business, not the upstream's
    // (an HTTP/1.0 upstream must not make the guard answer in 1.0).
    parts.version = Version::default();
    headers::to_client(&mut parts.headers, request_id);
    // An event stream of unstated length can end with an error event.
    let sse = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
        && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    Response::from_parts(parts, ResponseBody::streamed(body, in_flight, idle, sse))
}

fn refusal(
    reason: &Reason,
    route: Option<Route>,
    body_pending: bool,
    request_id: &HeaderValue,
    in_flight: InFlight,
) -> Response<ResponseBody> {
    let denial = Denial::new(reason, route, Mode::Proxy);
    let mut response = Response::new(ResponseBody::full(denial.body, in_flight));
    *response.status_mut() = denial.status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(core::DENIAL_CONTENT_TYPE),
    );
    h.insert(headers::X_REQUEST_ID, request_id.clone());
    if let Some(secs) = denial.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    // An unread body would have to be drained before the next request on the
    // connection; closing is cheaper and cannot desynchronise framing.
    if body_pending || reason.closes_connection() {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
