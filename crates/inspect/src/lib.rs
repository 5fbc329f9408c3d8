//! prefill-guard's request inspection: the bytes of an HTTP request → the
//! route it targets and the prompt units its body carries, or a refusal.
//! Connection framing (`framing`), path canonicalisation (`path`), the route
//! table's classification (`routes`, `allow`), strict JSON (`json`) and the
//! per-route extraction of SGLang's request fields (`extract`, `features`).
//!
//! A crate of its own so that everything that reads what a client sent can be
//! fuzzed and checked against SGLang's goldens with the counting core alone:
//! no sockets, no async runtime, no RPC library. The guard turns a
//! [`Refusal`] into its one refusal type, which decides status and body.
#![forbid(unsafe_code)]

pub mod allow;
pub mod extract;
pub mod features;
pub mod framing;
pub mod json;
pub mod path;
mod refusal;
pub mod routes;

pub use extract::{extract, PromptRequest};
pub use refusal::Refusal;
pub use routes::{classify, Route, RouteClass};
