//! `grpc.health.v1.Health` for Envoy's (and Kubernetes') gRPC health checks.
//!
//! - `""`, `liveness` and each served service name: SERVING while the
//!   listener runs, NOT_SERVING once shutdown begins (so Envoy moves new
//!   streams elsewhere while in-flight ones drain).
//! - `readiness`: SERVING once every model can be served, like `/readyz`.
//!   Before that requests are still answered, refused with 429 and
//!   `Retry-After`, never failed: a health status that takes the guard out
//!   of the cluster could, with `failure_mode_allow`, let requests through
//!   unjudged, so only the readiness name reflects it.

use std::sync::Arc;
use std::time::Duration;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::app::Apps;

/// The service names that answer for the whole server.
pub const SERVICES: &[&str] = &[
    "",
    "liveness",
    "envoy.service.auth.v3.Authorization",
    "envoy.service.ext_proc.v3.ExternalProcessor",
];

pub const READINESS: &str = "readiness";

/// How often readiness is re-read (limits arrive with discovery).
const READINESS_POLL: Duration = Duration::from_millis(500);

pub async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    for name in SERVICES.iter().chain([&READINESS]) {
        reporter.set_service_status(name, status).await;
    }
}

/// Keeps `readiness` in step with the current state until dropped.
pub async fn track_readiness(reporter: HealthReporter, apps: Arc<Apps>) {
    let mut last = None;
    loop {
        let app = apps.load();
        let (ready, _) = app.gate.guard.readiness();
        if last != Some(ready) {
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status(READINESS, status).await;
            last = Some(ready);
        }
        drop(app);
        tokio::time::sleep(READINESS_POLL).await;
    }
}
