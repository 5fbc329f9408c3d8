//! ext_authz over HTTP: the guard as the authorization service of another
//! proxy that forwards what the guard allows.
//!
//! Callers (`authz_style`):
//! - **Envoy** `ext_authz` with an `http_service` and Istio's
//!   `envoyExtAuthzHttp`: the check request carries the client's method, its
//!   path with `path_prefix` in front (`authz_path_prefix` here; a path
//!   without it is refused), the headers Envoy lets through and, with
//!   `with_request_body`, the body. `X-Forwarded-*` headers are ignored: they
//!   may come from the client.
//! - **Traefik** `forwardAuth` with `forwardBody: true`: the check request
//!   goes to the configured address (its path must be `authz_path_prefix`, or
//!   `/`), usually as `GET`, with the client's headers and body; the client's
//!   method and target are `X-Forwarded-Method` and `X-Forwarded-Uri`. Traefik
//!   sets those itself unless `trustForwardHeader` is on, in which case a
//!   client could choose them: with a spoofed `X-Forwarded-Uri: /health`, a
//!   chat request would be judged as a health probe and let through. So
//!   `trustForwardHeader` must stay off (Traefik's default), and the guard
//!   listens in one style only: Envoy checks never read those headers. As
//!   defence in depth, a check whose own method is neither `GET` nor
//!   `X-Forwarded-Method`, or one judged as a bodiless probe (`GET /health`,
//!   `GET /v1/models`) that carries a body, is refused: neither comes from
//!   Traefik. (A spoofed pass-through `POST`, e.g. `/v1/tokenize`, cannot be
//!   told apart: only `trustForwardHeader: false` closes that.)
//!
//! Answers: `200` with an empty body to allow (with `x-prefill-guard-tokens`
//! when the prompt was counted). Anything else is a deny with the refusal the
//! proxy would have answered (`core::Denial`): the route's native status and
//! JSON error body, except that a deny is never a 5xx (Envoy would read it as
//! the service failing, and `failure_mode_allow` turns that into an allow).
//! This listener answers nothing but decisions: no health or metrics here
//! (they are on the admin port), so a `200` always means "checked and allowed".

use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::Full;
use hyper::body::Incoming;

use crate::app::{App, Arrival, Received};
use crate::config::AuthzStyle;
use crate::core::{self, Denial, Mode, Outcome, Record};
use crate::errors::Reason;
use crate::inspect::RouteClass;
use crate::proxy::headers::X_REQUEST_ID;

/// On an allow: the prompt's token count (the largest unit of a batch), for
/// Envoy's `allowed_upstream_headers` or Traefik's `authResponseHeaders`.
pub const X_PREFILL_GUARD_TOKENS: HeaderName = HeaderName::from_static("x-prefill-guard-tokens");

const X_FORWARDED_METHOD: &str = "x-forwarded-method";
const X_FORWARDED_URI: &str = "x-forwarded-uri";

/// One check request, from arrival to the answer; metrics and the decision
/// log line are written by `core::observe` as for the proxy.
pub async fn handle(
    app: &App,
    request_id: HeaderValue,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let _in_flight = app.metrics.in_flight();
    let started = Instant::now();
    // Until the original method is known, the log names the check's own.
    let mut arrival = Arrival::of(&req);
    let Outcome { record, verdict } = check(app, req, &mut arrival).await;
    let response = match &verdict {
        Ok(_) => allow(&record),
        Err(reason) => deny(reason, &record, arrival.body_pending, &request_id),
    };
    core::observe(
        &app.metrics,
        &record,
        verdict.as_ref().err(),
        request_id.to_str().unwrap_or_default(),
        arrival.method.as_str(),
        response.status(),
        started.elapsed(),
    );
    response
}

/// A check request through the preamble every HTTP adapter shares
/// (`App::receive`), which judges its own framing as the proxy judges a
/// client's: ambiguous framing is refused and the connection closed.
async fn check(app: &App, req: Request<Incoming>, arrival: &mut Arrival) -> Outcome<()> {
    let Outcome { record, verdict } = app
        .receive(req, Mode::ExtAuthzHttp, |req| original(app, req), arrival)
        .await;
    let Received {
        class,
        parts,
        body,
        reservation: _reservation,
    } = match verdict {
        Ok(received) => received,
        Err(reason) => return Outcome::refused(record, reason),
    };
    if app.authz.style == AuthzStyle::Traefik {
        if let Err(reason) = refuse_probe_with_body(&arrival.method, &class, &body) {
            return Outcome::refused(record, reason);
        }
    }
    app.gate
        .check_body(record, class, &parts.headers, body)
        .await
        .map(drop)
}

/// The client's method and request target, as the calling proxy reports them.
fn original<B>(app: &App, req: &Request<B>) -> Result<(Method, Uri), Reason> {
    let own = own_target(req)?;
    let prefix = app.authz.path_prefix.as_str();
    match app.authz.style {
        AuthzStyle::Envoy => {
            let rest = own.strip_prefix(prefix).filter(|r| r.starts_with('/'));
            let rest = rest.ok_or_else(|| {
                Reason::BadPath(format!(
                    "the authorization request's path does not start with the configured prefix `{prefix}/`"
                ))
            })?;
            Ok((req.method().clone(), parse_target(rest)?))
        }
        AuthzStyle::Traefik => {
            let own_path = own.split('?').next().unwrap_or_default();
            let expected = if prefix.is_empty() { "/" } else { prefix };
            if own_path != expected {
                return Err(Reason::BadPath(format!(
                    "ForwardAuth requests are served on `{expected}` only"
                )));
            }
            let method = single(req.headers(), X_FORWARDED_METHOD)?;
            let method =
                Method::from_bytes(method.as_bytes()).map_err(|_| Reason::InvalidRequest {
                    message: "`X-Forwarded-Method` is not an HTTP method".into(),
                    param: None,
                })?;
            // Traefik checks with GET, or with the client's own method
            // (`preserveRequestMethod`); any other pairing means the header
            // is not Traefik's.
            if req.method() != Method::GET && *req.method() != method {
                return Err(Reason::InvalidRequest {
                    message: format!(
                        "the ForwardAuth request's method {} disagrees with `X-Forwarded-Method` {method}",
                        req.method()
                    ),
                    param: None,
                });
            }
            let uri = single(req.headers(), X_FORWARDED_URI)?;
            let uri = uri
                .to_str()
                .map_err(|_| Reason::BadPath("`X-Forwarded-Uri` is not ASCII".into()))?;
            if !uri.starts_with('/') {
                return Err(Reason::BadPath(
                    "`X-Forwarded-Uri` must be an origin-form target (`/path?query`)".into(),
                ));
            }
            Ok((method, parse_target(uri)?))
        }
    }
}

/// Defence in depth against forwarded headers Traefik did not write itself
/// (`trustForwardHeader` on): a health probe or model listing carries no
/// body, so a check judged as one that does is a prompt in disguise.
fn refuse_probe_with_body(method: &Method, class: &RouteClass, body: &Bytes) -> Result<(), Reason> {
    let probe = *method == Method::GET || *method == Method::HEAD;
    if probe && matches!(class, RouteClass::PassThrough(_)) && !body.is_empty() {
        return Err(Reason::InvalidRequest {
            message: format!("a {method} request to this route carries no body"),
            param: None,
        });
    }
    Ok(())
}

/// The check request's own path and query. Envoy sends origin form; an
/// absolute-form target is refused like on the proxy port, and HTTP/2's
/// scheme and authority (always present there) are not part of it.
fn own_target<B>(req: &Request<B>) -> Result<&str, Reason> {
    let uri = req.uri();
    if req.version() != Version::HTTP_2 && (uri.scheme().is_some() || uri.authority().is_some()) {
        return Err(Reason::BadPath(
            "absolute-form request targets are refused".into(),
        ));
    }
    uri.path_and_query()
        .map(|pq| pq.as_str())
        .ok_or_else(|| Reason::BadPath("the request has no path".into()))
}

fn parse_target(text: &str) -> Result<Uri, Reason> {
    text.parse::<Uri>().map_err(|e| {
        Reason::BadPath(format!(
            "the original request target is not a valid URI: {e}"
        ))
    })
}

/// Exactly one value: a repeated header could be read either way.
fn single<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h HeaderValue, Reason> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => Ok(v),
        (None, _) => Err(Reason::InvalidRequest {
            message: format!("the ForwardAuth request has no `{name}` header"),
            param: None,
        }),
        (Some(_), Some(_)) => Err(Reason::InvalidRequest {
            message: format!("the ForwardAuth request has more than one `{name}` header"),
            param: None,
        }),
    }
}

fn allow(rec: &Record) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::OK;
    if let Some(tokens) = rec.tokens {
        response
            .headers_mut()
            .insert(X_PREFILL_GUARD_TOKENS, HeaderValue::from(tokens));
    }
    response
}

fn deny(
    reason: &Reason,
    rec: &Record,
    body_pending: bool,
    request_id: &HeaderValue,
) -> Response<Full<Bytes>> {
    let denial = Denial::new(reason, rec.route, Mode::ExtAuthzHttp);
    debug_assert!(denial.status != StatusCode::OK && !denial.status.is_server_error());
    let mut response = Response::new(Full::new(denial.body));
    *response.status_mut() = denial.status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(core::DENIAL_CONTENT_TYPE),
    );
    h.insert(X_REQUEST_ID, request_id.clone());
    if let Some(secs) = denial.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    // An unread body would have to be drained before the next check on the
    // connection; closing is cheaper and cannot desynchronise framing.
    if body_pending || reason.closes_connection() {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
