//! `envoy.service.auth.v3.Authorization/Check`: Envoy's (and Istio's
//! `envoyExtAuthzGrpc`) external authorization over gRPC. One `CheckRequest`
//! carries the whole request (with `with_request_body`); the shared decision
//! core (`Gate::decide`) judges it.
//!
//! Every judged request gets an answer with `Ok`: `status` OK to allow, or
//! PERMISSION_DENIED with the route's native status and error body to deny.
//! A gRPC error would be the authorization service failing, which
//! `failure_mode_allow` turns into an allow; a refusal is never one.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::auth::v3::{
    attribute_context::HttpRequest, authorization_server::Authorization,
    check_response::HttpResponse, CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::rpc;
use http::header::{self, HeaderMap};
use http::{Method, StatusCode, Uri};
use tonic::{Request, Response, Status};

use super::headers;
use crate::app::{App, Apps};
use crate::conn::budget::Reservation;
use crate::core::{self, Denial, Mode, Outcome, Record, DENIAL_CONTENT_TYPE};
use crate::errors::Reason;

/// Added to the upstream request on allow: the prompt's token count (the
/// largest unit of a batch), for the upstream's logs and routing.
pub const TOKENS_HEADER: &str = "x-prefill-guard-tokens";

const MODE: Mode = Mode::ExtAuthzGrpc;

pub struct Authz {
    apps: Arc<Apps>,
}

impl Authz {
    pub fn new(apps: Arc<Apps>) -> Self {
        Self { apps }
    }
}

#[tonic::async_trait]
impl Authorization for Authz {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let app = self.apps.load_full();
        let started = Instant::now();
        let http = request
            .into_inner()
            .attributes
            .and_then(|a| a.request)
            .and_then(|r| r.http);
        let (method, request_id, outcome) = match http {
            Some(http) => judge(&app, http).await,
            None => (
                String::new(),
                String::new(),
                Outcome::refused(
                    Record::new(MODE),
                    Reason::Internal("the CheckRequest carries no HTTP request attributes".into()),
                ),
            ),
        };
        let Outcome { record, verdict } = outcome;
        let (answer, status) = match &verdict {
            Ok(_) => (allow(record.tokens), StatusCode::OK),
            Err(reason) => {
                let denial = Denial::new(reason, record.route, MODE);
                let status = denial.status;
                (deny(reason, &denial), status)
            }
        };
        core::observe(
            &app.metrics,
            &record,
            verdict.as_ref().err(),
            &request_id,
            &method,
            status,
            started.elapsed(),
        );
        Ok(Response::new(answer))
    }
}

/// The request as Envoy describes it → `Gate::decide`. Returns the method
/// and request id for the decision log with the outcome.
async fn judge(app: &App, http: HttpRequest) -> (String, String, Outcome<()>) {
    // `header_map` with `encode_raw_headers` (repeated headers kept apart),
    // the joined `headers` map otherwise.
    let headers = match http.header_map.as_ref().filter(|m| !m.headers.is_empty()) {
        Some(map) => headers::from_proto(Some(map)).map(|p| p.headers),
        None => headers::from_map(&http.headers),
    };
    let request_id = match &headers {
        Ok(h) => crate::proxy::headers::request_id(h)
            .to_str()
            .unwrap_or_default()
            .to_string(),
        Err(_) => String::new(),
    };
    let method = http.method.clone();
    let outcome = match unpack(app, http, headers) {
        Ok(Unpacked {
            method,
            target,
            headers,
            body,
            held,
        }) => {
            let head = core::Head {
                method: &method,
                target: &target,
                headers: &headers,
            };
            // The body is let go before its bytes are given back.
            let outcome = app.gate.decide(&head, MODE, body).await.map(drop);
            drop(held);
            outcome
        }
        Err(reason) => Outcome::refused(Record::new(MODE), reason),
    };
    (method, request_id, outcome)
}

/// A request as the core takes it.
struct Unpacked {
    method: Method,
    target: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// The body, already in memory, held against the budget for bodies in
    /// flight while it is judged, so a flood is shed like the proxy's.
    held: Reservation,
}

/// The request Envoy described, checked for what the core cannot judge.
fn unpack(
    app: &App,
    http: HttpRequest,
    headers: Result<HeaderMap, Reason>,
) -> Result<Unpacked, Reason> {
    let headers = headers?;
    let method =
        Method::from_bytes(http.method.as_bytes()).map_err(|_| Reason::MethodNotAllowed {
            method: http.method.escape_debug().to_string(),
            path: http.path.clone(),
        })?;
    let target: Uri = http
        .path
        .parse()
        .map_err(|_| Reason::BadPath("the request target is not a valid URI".into()))?;
    // `pack_as_bytes` fills `raw_body`; otherwise the UTF-8 `body`.
    let body = if http.raw_body.is_empty() {
        Bytes::from(http.body)
    } else {
        Bytes::from(http.raw_body)
    };
    check_complete(&headers, body.len())?;
    let mut held = app.body_budget.reservation();
    held.grow(body.len())?;
    Ok(Unpacked {
        method,
        target,
        headers,
        body,
        held,
    })
}

/// The body Envoy sent must be the request's whole body. Without
/// `with_request_body` it sends none, and a `Content-Length` says there was
/// one: counting the empty body would admit any prompt. (A body cut at
/// `max_request_bytes` carries `x-envoy-auth-partial-body: true`, which
/// `core` refuses.)
fn check_complete(headers: &HeaderMap, received: usize) -> Result<(), Reason> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    match declared {
        Some(n) if n != received => Err(Reason::Internal(format!(
            "the CheckRequest carries {received} body bytes of a {n}-byte request; \
             set with_request_body (and pack_as_bytes) on the ext_authz filter"
        ))),
        _ => Ok(()),
    }
}

fn allow(tokens: Option<usize>) -> CheckResponse {
    let headers = tokens
        .map(|n| vec![headers::set_value(TOKENS_HEADER, &n.to_string())])
        .unwrap_or_default();
    CheckResponse {
        status: Some(rpc::Status {
            code: tonic::Code::Ok as i32,
            ..Default::default()
        }),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            headers,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn deny(reason: &Reason, denial: &Denial) -> CheckResponse {
    let mut headers = vec![headers::set_value("content-type", DENIAL_CONTENT_TYPE)];
    if let Some(secs) = denial.retry_after {
        headers.push(headers::set_value("retry-after", &secs.to_string()));
    }
    CheckResponse {
        status: Some(rpc::Status {
            code: tonic::Code::PermissionDenied as i32,
            message: reason.label().to_string(),
            details: Vec::new(),
        }),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus {
                code: i32::from(denial.status.as_u16()),
            }),
            headers,
            // Refusal bodies are JSON written by serde_json: always UTF-8.
            body: String::from_utf8_lossy(&denial.body).into_owned(),
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn a_body_shorter_than_its_content_length_is_refused() {
        let mut h = HeaderMap::new();
        assert!(check_complete(&h, 0).is_ok());
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        assert!(check_complete(&h, 12).is_ok());
        assert_eq!(check_complete(&h, 0).unwrap_err().label(), "internal_error");
    }
}
