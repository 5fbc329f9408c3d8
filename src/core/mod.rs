//! The decision core every adapter shares: the reverse proxy
//! (`server::handler`), ext_authz over HTTP (`ext::authz_http`), ext_authz
//! over gRPC and ext_proc (`ext::grpc`). An adapter only translates its
//! protocol into a [`Head`] and a body, and the [`Admit`] or [`Reason`] back
//! into its own answer ([`Denial`]); everything that decides lives here or
//! below (`inspect`, `count`, `policy`).
//!
//! Two steps, because the proxy and ext_proc see headers before the body
//! and should refuse an unknown route or a compressed body without reading it:
//!
//! 1. the request-level step, [`Gate::classify`] (`request.rs`): canonical
//!    path → allowlist or route table → header checks;
//! 2. the body-level step, [`Gate::check_body`]: size cap → [`Guard::check`]
//!    (`guard.rs`: `Content-Type`, parse, extract, count on the bounded
//!    counting pool of `pool.rs`, apply the limit; in one order, whether
//!    the body is decided on the event loop or whole on a counting thread).
//!
//! [`Gate::decide`] runs both for adapters that receive the whole request.
//!
//! What a request did travels one way, with the verdict: each step returns
//! an [`Outcome`], the request's one [`Record`] with the step's result or
//! its [`Reason`](crate::errors::Reason). `classify` starts the Record;
//! `check_body` takes it by value and hands it to the [`Guard`], which
//! returns it with what counting found, and `allowed` once it admits. Only
//! the core admits (`check_body`, or
//! [`Gate::admit_unread`] for a pass-through route ext_proc lets by at the
//! headers); the adapter refuses with [`Outcome::refused`] on the Record it
//! last got back, or a fresh one ([`Record::new`]) before the core has seen
//! the request. The adapter adds its own facts to the Record it
//! got back (the proxy: the upstream's status and time) and, once it has
//! answered, hands it to [`observe`] (`record.rs`), the one place a Record
//! becomes the metrics (labelled with the adapter's [`Mode`]) and the
//! decision-log line, the same for every mode.
//!
//! The core takes a [`Gate`], what deciding needs, and knows nothing of the
//! listeners or of the rest of the running state (`app::App`).

mod denial;
mod guard;
mod pool;
mod record;
mod request;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Method, Uri};

use crate::inspect::allow::AllowList;
use crate::route::Route;

pub use denial::{external_status, Denial, DENIAL_CONTENT_TYPE};
pub use guard::{count_units, Guard, INLINE_MAX_BYTES};
pub use record::{observe, Outcome, Record, OTHER_ROUTE};
pub use request::X_ENVOY_AUTH_PARTIAL_BODY;

/// What deciding needs: the guard (models, limits, counting) and the two
/// request-level settings. One per `app::App`, replaced with it on
/// reload.
pub struct Gate {
    pub guard: Guard,
    /// Largest request body; larger ones are refused with 413.
    pub max_body_bytes: usize,
    /// Canonical paths forwarded uninspected (`allow_routes`).
    pub allow_routes: AllowList,
}

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
