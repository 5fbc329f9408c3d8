//! Which routes the guard inspects, which it passes, and which it refuses.

use http::Method;

use crate::errors::Reason;

/// A route whose body carries a prompt; each is counted with SGLang's own semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    ChatCompletions,
    Completions,
    Generate,
}

impl Route {
    /// The canonical path forwarded upstream, also the `route` metric label.
    pub fn path(self) -> &'static str {
        match self {
            Route::ChatCompletions => "/v1/chat/completions",
            Route::Completions => "/v1/completions",
            Route::Generate => "/generate",
        }
    }

    /// The request field a length error points at (OpenAI's `param`).
    pub fn prompt_param(self) -> &'static str {
        match self {
            Route::ChatCompletions => "messages",
            Route::Completions => "prompt",
            Route::Generate => "text",
        }
    }

    /// Routes answered in OpenAI's error envelope.
    pub fn is_openai(self) -> bool {
        matches!(self, Route::ChatCompletions | Route::Completions)
    }

    pub fn from_path(path: &str) -> Option<Route> {
        [Route::ChatCompletions, Route::Completions, Route::Generate]
            .into_iter()
            .find(|r| r.path() == path)
    }
}

/// What the guard does with a request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteClass {
    /// Count the body, then forward it to `path` (canonical).
    Inspect(Route),
    /// Forward unchanged to `path` (canonical): health and model listing.
    PassThrough(String),
}

/// Read-only routes that carry no prompt.
const PASS_THROUGH: &[&str] = &["/health", "/health_generate", "/v1/models", "/model_info"];

/// Classifies a request by method and canonical path (see [`crate::inspect::json`]
/// for the body side). Everything not modelled is refused: default deny.
pub fn classify(method: &Method, canonical_path: &str) -> Result<RouteClass, Reason> {
    if let Some(route) = Route::from_path(canonical_path) {
        let allowed = method == Method::POST || (route == Route::Generate && method == Method::PUT);
        return if allowed {
            Ok(RouteClass::Inspect(route))
        } else {
            Err(Reason::MethodNotAllowed {
                method: method.to_string(),
                path: canonical_path.to_string(),
            })
        };
    }
    if PASS_THROUGH.contains(&canonical_path) {
        return if method == Method::GET || method == Method::HEAD {
            Ok(RouteClass::PassThrough(canonical_path.to_string()))
        } else {
            Err(Reason::MethodNotAllowed {
                method: method.to_string(),
                path: canonical_path.to_string(),
            })
        };
    }
    Err(Reason::RouteNotAllowed {
        path: canonical_path.to_string(),
    })
}
