//! Inspect: an HTTP request → the route it targets and the prompt units its
//! body carries, or a refusal. Path canonicalisation, strict JSON and the
//! per-route extraction of SGLang's request fields live here.

pub mod allow;
pub mod extract;
pub mod features;
pub mod json;
pub mod path;
pub mod routes;

pub use extract::{extract, PromptRequest};
pub use routes::{classify, Route, RouteClass};
