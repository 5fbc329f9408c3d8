//! The running state every listener serves: one [`App`] per configuration,
//! built by `reload::Runtime` at start and on each reload, and swapped whole
//! ([`Apps`]).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;

use crate::config::{Config, ConfigError};
use crate::conn::budget::{BodyBudget, BodyTimeouts, Reservation};
use crate::core::{Gate, Guard};
use crate::errors::Reason;
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

    /// Reads a request body within `max_body_bytes`, the shared body budget
    /// and the client timeouts. The reservation is held until dropped, so
    /// the budget counts the body while the guard (and forwarding) hold it.
    pub async fn read_body<B>(&self, body: B) -> Result<(Bytes, Reservation), Reason>
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        crate::conn::budget::read_within(
            body,
            self.gate.max_body_bytes,
            &self.body_budget,
            BodyTimeouts::of(&self.client),
        )
        .await
    }
}
