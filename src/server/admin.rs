//! The admin port: Prometheus metrics and probes. Never served on the proxy
//! port, so tenants cannot read other tenants' traffic figures.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

use crate::app::App;
use crate::conn::admission::Connections;
use crate::metrics;

pub fn handle<B>(app: &App, connections: &Connections, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => {
            let workers = app
                .discovery
                .as_ref()
                .map(|d| d.samples())
                .unwrap_or_default();
            let mut r = text(
                StatusCode::OK,
                app.metrics.render_with_workers(
                    &app.gate.guard.profiles().gauges(),
                    &workers,
                    &connections.open(),
                ),
            );
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            r
        }
        // The process answers: nothing else is checked, so a slow upstream
        // never gets the guard restarted.
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => readiness(app),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Ready once every served model (or, with `readiness = "any_model"`, one)
/// can be counted and judged: a known limit and a server configuration the
/// guard models. Before that its requests would all be refused with 503.
/// The body names each model that holds the pod back, or would.
fn readiness(app: &App) -> Response<Full<Bytes>> {
    let (ready, missing) = app.gate.guard.readiness();
    let mut why: Vec<String> = missing
        .iter()
        .map(|(m, why)| format!("{m}: {why}"))
        .collect();
    // The workers behind a missing limit, by name: a worker down at
    // start-up is the usual reason.
    let silent = app
        .discovery
        .as_ref()
        .map(|d| d.unanswered())
        .unwrap_or_default();
    why.extend(silent.iter().map(|(url, error)| {
        format!(
            "worker {url} has never answered ({})",
            error.as_deref().unwrap_or("no answer yet")
        )
    }));
    // Static mode assumes what it was not told: said, not silent.
    let assumed: String = app
        .assumed
        .iter()
        .map(|(model, names)| {
            format!(
                "\n{model}: static configuration, counted as SGLang's defaults for {} \
                 (state each setting the prefill server runs with, or list prefill_urls)",
                names.join(", ")
            )
        })
        .collect();
    let (status, head) = match (ready, why.is_empty()) {
        (true, true) => (StatusCode::OK, "ready".to_string()),
        (true, false) => (
            StatusCode::OK,
            format!("ready; not serving: {}", why.join("; ")),
        ),
        (false, _) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", why.join("; ")),
        ),
    };
    text(status, format!("{head}{assumed}\n"))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
