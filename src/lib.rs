//! prefill-guard: refuses prompts that SGLang's prefill KV pool cannot hold,
//! counted exactly as the SGLang release in front of which it runs (0.4.5 to
//! 0.5.23) counts them, before a byte reaches upstream.
//!
//! The flow is one way: `server` (the listeners; `server::serve` is the
//! one assembly `cli`, the tests and the demo call) and `ext` (ext_authz
//! and ext_proc adapters), over `conn` (connection admission, framing,
//! client timeouts, body budget) → `core` (the decision core every adapter shares: the
//! request-level step, then the body-level `Guard`: `inspect` (HTTP request
//! → prompt units, or a refusal: the crate `crates/inspect`) → `count` (units → token counts: the crate
//! `crates/count`, which has no HTTP dependency) → `policy` (counts + limit → verdict), and one `Record` per
//! request, returned with each step's verdict, for metrics and the decision
//! log; `policy::sample` checks a share of the counts against the server's
//! own) → `proxy` (forward the checked
//! body) or `errors` (refusal → status, body, metric label). `app` is the
//! running state each request takes (`App`, swapped whole on reload), and
//! the HTTP adapters' one preamble (`App::receive`);
//! `route` is the route table all of them read; `load`, `hub` and `reload`
//! bring models in; `config` declares each setting once (`config/settings.rs`:
//! the file key, the flag, the variable) and resolves them; `signal` stops
//! the process; `cli` parses the command line and runs `serve`, each other
//! command has its module (`count_cmd`, `audit`, `verify`, `demo`).
//! `scripts/import-cycles.py` checks that no modules use each other in a
//! cycle, at any depth (docs/architecture.md).
#![forbid(unsafe_code)]

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod conn;
pub mod core;
pub mod count_cmd;
pub mod demo;
pub mod errors;
pub mod ext;
pub mod hub;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod reload;
pub mod server;
pub mod sglang;
pub mod signal;
pub mod sim;
pub mod verify;

/// The counting core, a crate of its own (`crates/count`): units → token
/// counts, with no HTTP, async runtime or RPC library among its
/// dependencies. Re-exported under its old path so `crate::count::…` reads
/// as before.
pub use prefill_guard_count as count;
/// The route table, part of the counting core: how a body is counted
/// depends on the SGLang entrypoint it is sent to.
pub use prefill_guard_count::route;
/// Request inspection, a crate of its own (`crates/inspect`): HTTP request
/// → route and prompt units, or a [`inspect::Refusal`] (`errors::Reason`
/// takes it), with no I/O among its dependencies.
pub use prefill_guard_inspect as inspect;
