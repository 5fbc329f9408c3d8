//! The running state every listener serves: one [`App`] per configuration,
//! built by `reload::Runtime` at start and on each reload, and swapped whole
//! ([`Apps`]); and the first half of every HTTP adapter's request
//! ([`App::receive`]), which needs that state.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{request, Method, Request, Uri};

use crate::config::{Config, ConfigError};
use crate::conn::budget::{BodyBudget, BodyTimeouts, Reservation};
use crate::conn::framing;
use crate::core::{Gate, Guard, Head, Mode, Outcome, Record};
use crate::errors::Reason;
use crate::inspect::RouteClass;
use crate::metrics::Metrics;
use crate::policy::discovery::Discovery;
use crate::proxy::Upstream;

/// Everything a request needs, shared by every connection. A reload builds a
/// new `App` and swaps it in ([`Apps`]); a request keeps the `App` it started
/// with until its response is done.
pub struct App {
    /// What deciding needs: the guard, the body cap, the allowlist.
    pub gate: Gate,
    pub upstream: Upstream,
    /// Shared across reloads, so counters keep counting.
    pub metrics: Arc<Metrics>,
    /// Bytes of request bodies buffered at once (`conn::budget`).
    pub body_budget: Arc<BodyBudget>,
    pub shutdown_grace: Duration,
    /// Client timeouts and connection limits.
    pub client: crate::config::ClientLimits,
    /// Lower each model's `max_model_len` in `GET /v1/models` answers to the
    /// guard's limit.
    pub rewrite_models_max_len: bool,
    /// The prefill workers' last answers, for `/metrics` (`None`: static limits only).
    pub discovery: Option<Arc<Discovery>>,
    /// Without discovery, per model, the server settings the configuration
    /// leaves at SGLang's defaults: `/readyz` says what is assumed.
    pub assumed: Vec<(String, Vec<&'static str>)>,
    /// How the HTTP authorization listener reads check requests (its
    /// address is in `listen`, fixed at start; the rest follows reloads).
    pub authz: crate::config::AuthzConfig,
}

/// The current [`App`], swapped whole on reload.
pub type Apps = ArcSwap<App>;

impl App {
    /// The guard is built by the caller (it loads tokenizers), with the
    /// metrics that outlive every `App` (reload) and discovery; the rest
    /// comes from the configuration.
    pub fn assemble(
        config: &Config,
        guard: Guard,
        metrics: Arc<Metrics>,
        discovery: Option<Arc<Discovery>>,
    ) -> Result<Self, ConfigError> {
        let upstream = Upstream::new(
            &config.upstream,
            config.upstream_connect_timeout,
            config.upstream_response_timeout,
            config.upstream_idle_timeout,
            // Loops 1..=io_threads, and 0 for every other thread.
            config.io_threads + 1,
        )
        .map_err(ConfigError)?;
        Ok(Self {
            gate: Gate {
                guard,
                max_body_bytes: config.max_body_bytes,
                allow_routes: config.allow_routes.clone(),
            },
            upstream,
            metrics,
            body_budget: BodyBudget::new(config.max_inflight_body_bytes),
            shutdown_grace: config.shutdown_grace,
            client: config.client,
            rewrite_models_max_len: config.rewrite_models_max_len,
            assumed: match &discovery {
                Some(_) => Vec::new(),
                None => config
                    .models
                    .iter()
                    .map(|m| (m.name.clone(), m.server.assumed()))
                    .filter(|(_, assumed)| !assumed.is_empty())
                    .collect(),
            },
            discovery,
            authz: config.authz.clone(),
        })
    }

    /// The preamble of the HTTP adapters (the proxy, ext_authz over HTTP),
    /// up to the body-level step: framing → the request as the client sent
    /// it → `Gate::classify` → the body, read within `max_body_bytes`, the
    /// shared body budget and the client timeouts. `target` reads the
    /// client's method and request target off `req`, as the adapter receives
    /// them. A refusal at framing or `target` is on a fresh Record, since the
    /// core has not seen the request; `arrival` keeps what the adapter's
    /// answer and log need whatever happened.
    pub async fn receive<B>(
        &self,
        req: Request<B>,
        mode: Mode,
        target: impl FnOnce(&Request<B>) -> Result<(Method, Uri), Reason>,
        arrival: &mut Arrival,
    ) -> Outcome<Received>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        // Framing first: a request whose framing is ambiguous is refused
        // whatever its route, and its connection closed (`conn::framing`).
        let reported = framing::check_verdict(&req)
            .and_then(|()| framing::check_headers(req.version(), req.headers()))
            .and_then(|()| target(&req));
        let (method, uri) = match reported {
            Ok(reported) => reported,
            Err(reason) => return Outcome::refused(Record::new(mode), reason),
        };
        let head = Head {
            method: &method,
            target: &uri,
            headers: req.headers(),
        };
        let Outcome { record, verdict } = self.gate.classify(&head, mode);
        arrival.method = method;
        let class = match verdict {
            Ok(class) => class,
            Err(reason) => return Outcome::refused(record, reason),
        };
        let (parts, body) = req.into_parts();
        let read = crate::conn::budget::read_within(
            body,
            self.gate.max_body_bytes,
            &self.body_budget,
            BodyTimeouts::of(&self.client),
        )
        .await;
        let (body, reservation) = match read {
            Ok(read) => read,
            Err(reason) => return Outcome::refused(record, reason),
        };
        arrival.body_pending = false;
        Outcome {
            record,
            verdict: Ok(Received {
                class,
                parts,
                body,
                reservation,
            }),
        }
    }
}

/// What an HTTP adapter's answer and log line need of a request, whether or
/// not [`App::receive`] got through.
pub struct Arrival {
    /// The method the request is judged by: the client's, once `target`
    /// has read it; until then the adapter's own request's.
    pub method: Method,
    /// Part of the body is still unread on the connection: a refusal then
    /// closes it rather than drain it.
    pub body_pending: bool,
}

impl Arrival {
    pub fn of<B: hyper::body::Body>(req: &Request<B>) -> Self {
        Self {
            method: req.method().clone(),
            body_pending: !req.body().is_end_stream(),
        }
    }
}

/// A request [`App::receive`] has classified and whose body it has read.
pub struct Received {
    /// The route class `Gate::classify` found, for `Gate::check_body`.
    pub class: RouteClass,
    /// The request as received, its body taken out.
    pub parts: request::Parts,
    pub body: Bytes,
    /// The body's share of the budget, held until dropped: keep it while
    /// the body (or what is forwarded of it) is held.
    pub reservation: Reservation,
}
