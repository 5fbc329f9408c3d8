//! The guard's integration tests, one binary (one link, one process whose
//! tests run in parallel): each module is one area, most of them the real
//! guard on `127.0.0.1:0` in front of mock SGLang servers speaking HTTP.
//! The counting core's own integration tests are `crates/count/tests/`,
//! request inspection's (the golden and every-release counts, the fuzz
//! inputs replayed) `crates/inspect/tests/`.
#![allow(
    clippy::unwrap_used,
    reason = "tests and their helpers assert by unwrapping; a panic is a failed test"
)]

mod common;

mod adversarial;
mod allowlist;
mod audit;
mod config_env;
mod config_example;
mod count_cache;
mod count_cli;
mod counting_paths;
mod discovery;
mod docs_metrics;
mod envoy_e2e;
mod examples;
mod ext_authz_grpc;
mod ext_authz_http;
mod ext_proc;
mod hostile_clients;
mod hub;
mod logs;
mod model_encoders;
mod multimodal;
mod pd;
mod pd_sim;
mod profiles;
mod proxy;
mod reload;
mod routes_chat;
mod runtime;
mod server_config;
mod shutdown;
mod upstream_faults;
mod verify;
