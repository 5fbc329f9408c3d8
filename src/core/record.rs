//! What one request did ([`Record`]), how it travels with the verdict out of
//! each step of the core ([`Outcome`]), and the one place it becomes metrics
//! and a decision-log line ([`observe`]), the same for every adapter.

use std::time::Duration;

use http::StatusCode;

use super::Mode;
use crate::count::CountMethod;
use crate::errors::Reason;
use crate::logging::{self, DecisionLine};
use crate::metrics::Metrics;
use crate::route::Route;

/// What one request did, for its metrics and its decision-log line.
///
/// The core makes it ([`Gate::classify`](super::Gate::classify)) and hands it
/// back with every verdict ([`Outcome`]); a later step takes it by value and
/// returns it with what that step learned. Only the core sets what the guard
/// found and `allowed`; the adapter adds its own facts (the proxy's
/// `upstream`) to the Record it got back, and hands it to [`observe`] once it
/// has answered. A refusal before the core saw the request (framing, an
/// unparsable check request) is recorded on a fresh [`Record::new`].
#[derive(Debug, Clone)]
pub struct Record {
    pub mode: Mode,
    /// The inspected route, once known: labels and the refusal's body shape.
    pub route: Option<Route>,
    /// An admitted pass-through route's canonical path (one of a fixed few).
    pub pass_through: Option<String>,
    /// The served model the request was counted with, once known.
    pub model: Option<String>,
    /// The largest unit's token count, when counting got that far. For a
    /// refused batch this is the first unit that did not fit. Exact, or with
    /// `count_method == EarlyExit` a lower bound at or above the limit;
    /// `None` when the request was accepted by its upper bound.
    pub tokens: Option<usize>,
    /// With `count_method == Bound`: the largest unit's upper bound (below
    /// the limit). The prompt was not tokenized, so it is no count: neither
    /// the metrics nor the log report it.
    pub upper_bound: Option<usize>,
    pub limit: Option<usize>,
    /// Time spent counting (queueing for a counting thread included; for a
    /// body decided whole on a counting thread, parsing too); `None` when
    /// counting never started.
    pub count_time: Option<Duration>,
    /// How the count decided: `EarlyExit` if the refusing unit stopped
    /// early, else `Bound` if any unit was decided by its bound, else
    /// `Exact`. `None` when counting did not run to a verdict.
    pub count_method: Option<CountMethod>,
    /// The guard let the request through; any later failure is the upstream's.
    pub allowed: bool,
    /// The proxy's upstream answer: its status and time to headers.
    pub upstream: Option<(StatusCode, Duration)>,
}

/// What a step of the core learned about a request, with its verdict: the
/// [`Record`] so far, and the step's result or why the request is refused.
#[derive(Debug)]
#[must_use]
pub struct Outcome<T> {
    pub record: Record,
    pub verdict: Result<T, Reason>,
}

impl<T> Outcome<T> {
    /// The request is refused for `reason`: by the core, or by the adapter
    /// with the Record the core last returned. Never `allowed`, even if the
    /// core had admitted it: the proxy refuses an admitted request it cannot
    /// address upstream.
    pub fn refused(record: Record, reason: Reason) -> Self {
        Self {
            record: Record {
                allowed: false,
                ..record
            },
            verdict: Err(reason),
        }
    }

    /// The same outcome with the admitted value mapped (`drop` when the
    /// adapter only needs to know it was admitted).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        Outcome {
            record: self.record,
            verdict: self.verdict.map(f),
        }
    }

    /// The guard lets the request through (the core's steps only).
    pub(super) fn admitted(record: Record, admit: T) -> Self {
        Self {
            record: Record {
                allowed: true,
                ..record
            },
            verdict: Ok(admit),
        }
    }

    /// The core's verdict, admitted or refused (the core's steps only).
    pub(super) fn decided(record: Record, verdict: Result<T, Reason>) -> Self {
        match verdict {
            Ok(admit) => Self::admitted(record, admit),
            Err(reason) => Self::refused(record, reason),
        }
    }
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
            upper_bound: None,
            limit: None,
            count_time: None,
            count_method: None,
            allowed: false,
            upstream: None,
        }
    }

    /// The `decision` label and log field: `allowed` or `refused`.
    pub fn decision(&self) -> &'static str {
        if self.allowed {
            "allowed"
        } else {
            "refused"
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
}

/// Metrics and the decision-log line for one answered request, the same for
/// every mode. `reason` is the refusal, or for an allowed request the
/// upstream's failure (proxy only); `status` is what the adapter answered.
pub fn observe(
    metrics: &Metrics,
    rec: &Record,
    reason: Option<&Reason>,
    request_id: &str,
    method: &str,
    status: StatusCode,
    latency: Duration,
) {
    let m = metrics;
    let mode = rec.mode.label();
    let route = rec.route_label();
    let model = rec.model.as_deref().unwrap_or("");
    m.request(mode, route, model, rec.decision());
    match (rec.allowed, reason) {
        (false, Some(r)) => m.rejection(mode, route, model, r.label()),
        // Allowed, then failed: the upstream's failure, not a refusal.
        (true, Some(r)) => m.upstream_error(route, model, r.label()),
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
        refused_path: match reason {
            Some(Reason::RouteNotAllowed { path } | Reason::MethodNotAllowed { path, .. }) => {
                Some(path)
            }
            _ => None,
        },
        model: rec.model.as_deref(),
        tokens: rec.tokens,
        count_method: rec.count_method.map(CountMethod::label),
        limit: rec.limit,
        decision: rec.decision(),
        reason: reason.map(Reason::label),
        status: status.as_u16(),
        upstream_status: rec.upstream.map(|(s, _)| s.as_u16()),
        latency,
    });
}
