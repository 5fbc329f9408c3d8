//! The gRPC listener (`serve --grpc-listen`): Envoy's external authorization
//! (`envoy.service.auth.v3.Authorization`), external processing
//! (`envoy.service.ext_proc.v3.ExternalProcessor`) and the gRPC health
//! protocol on one HTTP/2 server. Both Envoy services are thin adapters over
//! the shared decision core (`core`), with the same metrics labelled
//! `mode="ext_authz_grpc"` / `mode="ext_proc"`.

mod authz;
mod ext_proc;
mod headers;
mod health;
pub mod session;

use std::future::Future;
use std::sync::Arc;

use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::ExternalProcessorServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

pub use authz::TOKENS_HEADER;
pub use health::{READINESS, SERVICES as HEALTH_SERVICES};
pub use session::ECHO_CHUNK;

use crate::app::Apps;

/// Room for the headers and framing around a body in one gRPC message.
const MESSAGE_OVERHEAD: usize = 1024 * 1024;

/// The largest gRPC message accepted: a whole body (ext_authz, BUFFERED
/// ext_proc) up to twice `max_body_bytes`, so a body over the cap is still
/// read and refused with 413 rather than failing the call (a failed call
/// is what `failure_mode_allow` lets through). Beyond that tonic refuses the
/// message with RESOURCE_EXHAUSTED: keep Envoy's `max_request_bytes` and
/// buffer limits at or under `max_body_bytes`.
fn max_message_bytes(max_body_bytes: usize) -> usize {
    max_body_bytes
        .saturating_mul(2)
        .saturating_add(MESSAGE_OVERHEAD)
}

/// Serves until `shutdown` resolves, then reports NOT_SERVING, stops
/// accepting and lets open streams finish (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    apps: Arc<Apps>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let max_message = max_message_bytes(apps.load().gate.max_body_bytes);
    let (reporter, health) = tonic_health::server::health_reporter();
    health::set_all(&reporter, ServingStatus::Serving).await;
    let readiness = tokio::spawn(health::track_readiness(reporter.clone(), apps.clone()));

    let authz = AuthorizationServer::new(authz::Authz::new(apps.clone()))
        .max_decoding_message_size(max_message);
    let ext_proc = ExternalProcessorServer::new(ext_proc::ExtProc::new(apps.clone()))
        .max_decoding_message_size(max_message);
    let shutdown = async {
        shutdown.await;
        readiness.abort();
        health::set_all(&reporter, ServingStatus::NotServing).await;
    };
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(authz)
        .add_service(ext_proc)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}
