//! The guard as a filter of another proxy (Envoy, Istio, Traefik): adapters
//! that answer allow or deny through the shared decision core (`gate`).

pub mod authz_http;
pub mod grpc;
