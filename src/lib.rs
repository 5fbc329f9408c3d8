//! prefill-guard: refuses prompts that SGLang's prefill KV pool cannot hold,
//! counted exactly as SGLang 0.5.23 counts them, before a byte reaches upstream.
//!
//! The flow is one way: `server` (listeners) → `inspect` (HTTP request → prompt
//! units, or a refusal) → `count` (units → token counts; no HTTP in there) →
//! `policy` (counts + limit → verdict) → `proxy` (forward the checked body) or
//! `errors` (refusal → status, body, metric label). `gate` (the request
//! head: route class, encodings) and `guard` (the body: inspect, count,
//! decide) are the decision core every adapter (`server`'s proxy, `ext`'s
//! ext_authz / ext_proc) shares. `route` is the route table all of them
//! read; `load`, `hub` and `reload` bring models in; `signal` stops the
//! process. `scripts/import-cycles.py` lists the top-level modules that
//! still use each other in circles (three pairs, around `server::App` and
//! `metrics`/`policy`).
#![forbid(unsafe_code)]

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod conn;
pub mod core;
pub mod count;
pub mod demo;
pub mod errors;
pub mod ext;
pub mod hub;
pub mod inspect;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod reload;
pub mod route;
pub mod server;
pub mod sglang;
pub mod signal;
pub mod sim;
pub mod verify;
