//! Which routes the guard inspects, which it passes, and which it refuses.

use http::Method;

use crate::Refusal;
pub use prefill_guard_count::route::{ErrorShape, Route};

/// What the guard does with a request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteClass {
    /// Count the body, then forward it to `path` (canonical).
    Inspect(Route),
    /// Forward unchanged to `path` (canonical): health and model listing.
    PassThrough(String),
}

/// Routes that carry no prompt into generation, passed as they are. The
/// tokenize routes only tokenize (no KV is allocated), so their bodies are
/// bounded by the body limit alone.
const PASS_THROUGH: &[(&str, &[&str])] = &[
    ("/health", &["GET", "HEAD"]),
    ("/health_generate", &["GET", "HEAD"]),
    ("/v1/models", &["GET", "HEAD"]),
    ("/model_info", &["GET", "HEAD"]),
    ("/v1/tokenize", &["POST"]),
    ("/tokenize", &["POST"]),
    ("/v1/detokenize", &["POST"]),
    ("/v1/messages/count_tokens", &["POST"]),
];

/// Classifies a request by method and canonical path (see [`crate::json`]
/// for the body side). Everything not modelled is refused: default deny.
pub fn classify(method: &Method, canonical_path: &str) -> Result<RouteClass, Refusal> {
    if let Some(route) = Route::from_path(canonical_path) {
        return if route.allows(method.as_str()) {
            Ok(RouteClass::Inspect(route))
        } else {
            Err(Refusal::MethodNotAllowed {
                method: method.to_string(),
                path: canonical_path.to_string(),
            })
        };
    }
    if let Some((_, methods)) = PASS_THROUGH.iter().find(|(p, _)| *p == canonical_path) {
        return if methods.contains(&method.as_str()) {
            Ok(RouteClass::PassThrough(canonical_path.to_string()))
        } else {
            Err(Refusal::MethodNotAllowed {
                method: method.to_string(),
                path: canonical_path.to_string(),
            })
        };
    }
    Err(Refusal::RouteNotAllowed {
        path: canonical_path.to_string(),
    })
}
