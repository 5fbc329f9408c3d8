//! A refusal as each adapter answers it: the proxy with the refusal's native
//! status, the external modes with a status that never reads as the
//! authorization service failing.

use bytes::Bytes;
use http::StatusCode;

use super::Mode;
use crate::errors::Reason;
use crate::route::Route;

/// A refusal as an adapter sends it: status, JSON body in the route's native
/// error shape (`Reason::body`), and the `Retry-After` seconds if any.
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
        let status = if mode.is_external() {
            external_status(reason)
        } else {
            reason.status()
        };
        Self {
            status,
            body: reason.body(route),
            retry_after: reason.retry_after(),
        }
    }
}

/// The status an external mode answers a refusal with (the proxy answers
/// `Reason::status`, see `errors.rs`). The client's own refusals keep their native status (400, 404, 405,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
