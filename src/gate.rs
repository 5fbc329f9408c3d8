//! The request-level decision every adapter shares: the reverse proxy
//! (`server::handler`), ext_authz over HTTP (`ext::authz_http`), ext_authz
//! over gRPC and ext_proc. An adapter only translates its protocol into a
//! [`Head`] and a body, and the [`Admit`] or [`Reason`] back into its own
//! answer; everything that decides lives here or below (`guard`, `inspect`).
//!
//! Two phases, because the proxy and ext_proc see headers before the body
//! and should refuse an unknown route or a compressed body without reading it:
//!
//! 1. [`classify`]: canonical path → allowlist or route table → header checks;
//! 2. [`check_body`]: size cap → count and policy (`Guard::check`).
//!
//! [`decide`] runs both for adapters that receive the whole request at once.
//! Each request fills one [`Record`]; [`observe`] turns it into the metrics
//! (labelled with the adapter's [`Mode`]) and the decision-log line, the same
//! for every mode.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Uri};

use crate::count::CountMethod;
use crate::errors::{Reason, Refusal};
use crate::guard::Decision;
use crate::inspect::{path, routes, Route, RouteClass};
use crate::logging::{self, DecisionLine};
use crate::metrics;
use crate::server::App;

/// Which adapter a request came through: the `mode` label of the metrics and
/// the `mode` field of the decision log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The reverse proxy: the guard forwards what it admits.
    Proxy,
    /// Envoy/Istio HTTP authorization service, or Traefik ForwardAuth.
    ExtAuthzHttp,
    /// Envoy/Istio gRPC authorization service (`envoy.service.auth.v3`).
    ExtAuthzGrpc,
    /// Envoy external processing (`envoy.service.ext_proc.v3`).
    ExtProc,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Proxy => "proxy",
            Mode::ExtAuthzHttp => "ext_authz_http",
            Mode::ExtAuthzGrpc => "ext_authz_grpc",
            Mode::ExtProc => "ext_proc",
        }
    }

    /// Another proxy forwards what the guard admits: the guard only answers
    /// allow or deny, and a deny must never look like the guard failing.
    pub fn is_external(self) -> bool {
        self != Mode::Proxy
    }
}

/// A request as the client sent it, before its body: the method, the
/// request target as received (origin form, any prefix an adapter adds
/// already removed) and the headers.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub method: &'a Method,
    pub target: &'a Uri,
    pub headers: &'a HeaderMap,
}

/// What the guard lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// A prompt route, counted and under the limit. `body` is the canonical
    /// JSON the guard parsed: the proxy forwards it; an external mode that
    /// forwards the client's own bytes relies on `json::parse_strict` having
    /// accepted only a document every JSON reader reads the same way.
    Inspected { route: Route, body: Bytes },
    /// A route that carries no prompt (health, model listing, allowlist), by
    /// its canonical path, with the body as received (within the size cap).
    PassThrough { path: String, body: Bytes },
}

/// What one request did, for its metrics and its decision-log line. An
/// adapter makes one per request ([`Record::new`]), lets [`classify`] and
/// [`check_body`] fill it, and hands it to [`observe`] once it has answered.
#[derive(Debug, Clone)]
pub struct Record {
    pub mode: Mode,
    /// The inspected route, once known: labels and the refusal's body shape.
    pub route: Option<Route>,
    /// A pass-through route's canonical path (one of a fixed few).
    pub pass_through: Option<String>,
    pub model: Option<String>,
    pub tokens: Option<usize>,
    pub limit: Option<usize>,
    pub count_time: Option<Duration>,
    /// How the count decided (exact, by upper bound, or stopped at the limit).
    pub count_method: Option<CountMethod>,
    /// The guard let the request through; any later failure is the upstream's.
    pub allowed: bool,
    /// The proxy's upstream answer: its status and time to headers.
    pub upstream: Option<(StatusCode, Duration)>,
}

/// The `route` label of requests whose target is not a known route.
pub const OTHER_ROUTE: &str = "other";

impl Record {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            route: None,
            pass_through: None,
            model: None,
            tokens: None,
            limit: None,
            count_time: None,
            count_method: None,
            allowed: false,
            upstream: None,
        }
    }

    /// The `route` label: a known route, a pass-through path, or `other`.
    pub fn route_label(&self) -> &str {
        match (&self.route, &self.pass_through) {
            (Some(r), _) => r.path(),
            (None, Some(p)) => p,
            (None, None) => OTHER_ROUTE,
        }
    }

    fn absorb(&mut self, d: &Decision) {
        self.model.clone_from(&d.model);
        self.tokens = d.tokens;
        self.limit = d.limit;
        self.count_method = d.method;
        if d.tokens.is_some() || !d.count_time.is_zero() {
            self.count_time = Some(d.count_time);
        }
    }
}

/// Phase 1, on the head alone: which route, and whether its headers rule the
/// request out before a byte of body is read. Default deny: a path or method
/// the route table does not model is refused.
pub fn classify(app: &App, head: &Head<'_>, rec: &mut Record) -> Result<RouteClass, Reason> {
    let canonical = path::canonical_path(head.target)?;
    rec.route = Route::from_path(&canonical);
    // The operator's allowlist opens a path deliberately (never a prompt
    // route: checked at startup), whatever the method.
    let class = if app.allow_routes.allows(&canonical) {
        RouteClass::PassThrough(canonical)
    } else {
        routes::classify(head.method, &canonical)?
    };
    if rec.mode.is_external() {
        refuse_partial(head.headers)?;
    }
    if let RouteClass::Inspect(_) = class {
        refuse_encoded(head.headers)?;
    }
    Ok(class)
}

/// Phase 2: the whole body, as read by the adapter (at most
/// `app.max_body_bytes`; checked again here so no adapter can forget).
pub async fn check_body(
    app: &App,
    class: RouteClass,
    headers: &HeaderMap,
    body: Bytes,
    rec: &mut Record,
) -> Result<Admit, Reason> {
    if body.len() > app.max_body_bytes {
        return Err(Reason::BodyTooLarge {
            limit: app.max_body_bytes,
        });
    }
    match class {
        RouteClass::Inspect(route) => {
            let content_type = headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes());
            let partition = app.guard.partition(headers);
            let decision = app.guard.check(route, content_type, partition, body).await;
            rec.absorb(&decision);
            Ok(Admit::Inspected {
                route,
                body: decision.verdict?,
            })
        }
        RouteClass::PassThrough(path) => {
            rec.pass_through = Some(path.clone());
            Ok(Admit::PassThrough { path, body })
        }
    }
}

/// Both phases, for an adapter that has the whole request. Sets
/// `rec.allowed` on admission.
pub async fn decide(
    app: &App,
    head: &Head<'_>,
    body: Bytes,
    rec: &mut Record,
) -> Result<Admit, Reason> {
    let class = classify(app, head, rec)?;
    let admit = check_body(app, class, head.headers, body, rec).await?;
    rec.allowed = true;
    Ok(admit)
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

/// Envoy's marker of a body cut at `max_request_bytes` (`allow_partial_message`).
pub const X_ENVOY_AUTH_PARTIAL_BODY: &str = "x-envoy-auth-partial-body";

/// A truncated body cannot be counted: its prompt is longer than what
/// arrived. Anything but an explicit `false` on the marker is refused, as a
/// body over the size Envoy was told to buffer (which is what it is).
fn refuse_partial(headers: &HeaderMap) -> Result<(), Reason> {
    let mut values = headers.get_all(X_ENVOY_AUTH_PARTIAL_BODY).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(()),
        (Some(v), None) if v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"false") => Ok(()),
        _ => Err(Reason::BodyTooLarge {
            // What Envoy sent is what it buffered; the body was larger.
            limit: content_length(headers).unwrap_or(0),
        }),
    }
}

fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A refusal as an adapter sends it: status, JSON body in the route's native
/// error shape (`errors::Refusal`), and the `Retry-After` seconds if any.
#[derive(Debug, Clone)]
pub struct Denial {
    pub status: StatusCode,
    pub body: Bytes,
    pub retry_after: Option<u32>,
}

/// `Content-Type` of every [`Denial`] body.
pub const DENIAL_CONTENT_TYPE: &str = "application/json";

impl Denial {
    pub fn new(reason: &Reason, route: Option<Route>, mode: Mode) -> Self {
        let refusal = Refusal::new(reason.clone(), route);
        let status = if mode.is_external() {
            external_status(reason)
        } else {
            refusal.status()
        };
        Self {
            status,
            body: refusal.body(),
            retry_after: reason.retry_after(),
        }
    }
}

/// The one place that maps a refusal to the status an external mode answers
/// with. The client's own refusals keep their native status (400, 404, 405,
/// 413, 415). The guard's server-side ones (503 overload or unknown limit, 500)
/// must not be 5xx: Envoy's HTTP ext_authz treats a 5xx answer as the
/// authorization service failing, and with `failure_mode_allow` (or Istio's
/// `failOpen`) that lets the request through unchecked. The transient ones
/// (those with `Retry-After`) become 429, which clients already retry after
/// the delay; anything else becomes 403, a plain deny.
pub fn external_status(reason: &Reason) -> StatusCode {
    let native = reason.status();
    if !native.is_server_error() {
        native
    } else if reason.retry_after().is_some() {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::FORBIDDEN
    }
}

/// Metrics and the decision-log line for one answered request, the same for
/// every mode. `reason` is the refusal, or for an allowed request the
/// upstream's failure (proxy only); `status` is what the adapter answered.
pub fn observe(
    app: &App,
    rec: &Record,
    reason: Option<&Reason>,
    request_id: &str,
    method: &str,
    status: StatusCode,
    latency: Duration,
) {
    let m = &app.metrics;
    let mode = rec.mode.label();
    let route = rec.route_label();
    let model = rec.model.as_deref().unwrap_or("");
    let decision = if rec.allowed {
        metrics::Decision::Allowed
    } else {
        metrics::Decision::Refused
    };
    m.request(mode, route, model, decision);
    match (decision, reason) {
        (metrics::Decision::Refused, Some(r)) => m.rejection(mode, route, model, r.label()),
        (metrics::Decision::Allowed, Some(r)) => m.upstream_error(route, model, r.label()),
        _ => {}
    }
    if let Some(tokens) = rec.tokens {
        m.prompt_tokens(mode, route, model, tokens);
    }
    if let Some(took) = rec.count_time {
        m.count_duration(mode, route, model, took);
    }
    if let Some(method) = rec.count_method {
        m.count_method(mode, route, model, method.label());
    }
    if let Some((_, took)) = rec.upstream {
        m.upstream_duration(route, took);
    }
    logging::decision(&DecisionLine {
        request_id,
        mode,
        method,
        route,
        model: rec.model.as_deref(),
        tokens: rec.tokens,
        count_method: rec.count_method.map(CountMethod::label),
        limit: rec.limit,
        decision: if rec.allowed { "allowed" } else { "refused" },
        reason: reason.map(Reason::label),
        status: status.as_u16(),
        upstream_status: rec.upstream.map(|(s, _)| s.as_u16()),
        latency,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn external_denials_are_never_server_errors() {
        let every = [
            Reason::TooLong {
                tokens: 2,
                limit: 1,
            },
            Reason::InvalidJson("x".into()),
            Reason::DuplicateKey("x".into()),
            Reason::InvalidRequest {
                message: "x".into(),
                param: None,
            },
            Reason::Template("x".into()),
            Reason::Unmeasurable("x".into()),
            Reason::UnknownModel("x".into()),
            Reason::RouteNotAllowed { path: "/x".into() },
            Reason::MethodNotAllowed {
                method: "GET".into(),
                path: "/x".into(),
            },
            Reason::BadPath("x".into()),
            Reason::BadFraming("x".into()),
            Reason::BodyTooLarge { limit: 1 },
            Reason::UnsupportedMediaType("x".into()),
            Reason::LimitUnknown("m".into()),
            Reason::Overloaded,
            Reason::UpstreamUnavailable("x".into()),
            Reason::UpstreamTimeout,
            Reason::Internal("x".into()),
        ];
        for r in &every {
            for mode in [Mode::ExtAuthzHttp, Mode::ExtAuthzGrpc, Mode::ExtProc] {
                let d = Denial::new(r, Some(Route::ChatCompletions), mode);
                assert!(
                    d.status.is_client_error(),
                    "{} -> {} in {mode:?}",
                    r.label(),
                    d.status
                );
            }
            // The proxy keeps the native status.
            assert_eq!(
                Denial::new(r, None, Mode::Proxy).status,
                r.status(),
                "{}",
                r.label()
            );
        }
        assert_eq!(external_status(&Reason::Overloaded), 429);
        assert_eq!(external_status(&Reason::LimitUnknown("m".into())), 429);
        assert_eq!(external_status(&Reason::Internal("x".into())), 403);
        assert_eq!(
            external_status(&Reason::TooLong {
                tokens: 2,
                limit: 1
            }),
            400
        );
        assert_eq!(
            Denial::new(&Reason::Overloaded, None, Mode::ExtAuthzHttp).retry_after,
            Some(1)
        );
    }

    #[test]
    fn partial_body_marker() {
        let mut h = HeaderMap::new();
        assert!(refuse_partial(&h).is_ok());
        h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        assert!(refuse_partial(&h).is_ok());
        for v in ["true", "TRUE", "", "1", "yes"] {
            h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static(v));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1024"));
            let e = refuse_partial(&h).unwrap_err();
            assert_eq!(e.label(), "body_too_large", "{v:?}");
            assert_eq!(e.status(), 413);
        }
        // Two markers, even `false` twice: ambiguous, refused.
        h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        h.append(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        assert!(refuse_partial(&h).is_err());
    }
}
