//! Which routes the guard inspects, which it passes, and which it refuses.

use http::Method;

use crate::errors::Reason;

/// A route whose body carries a prompt; each is counted with SGLang's own semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    ChatCompletions,
    Completions,
    Generate,
    Embeddings,
    ClassifyV1,
    Classify,
    Encode,
    Rerank,
    Score,
    VertexGenerate,
    Responses,
    Messages,
    Invocations,
    OllamaChat,
    OllamaGenerate,
}

/// How a route's errors look to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error":{"message","type","param","code"}}`.
    OpenAi,
    /// SGLang's native `{"error":{"message"}}` (`http_server.py::_create_error_response`).
    Sglang,
    /// Anthropic's `{"type":"error","error":{"type","message"}}` (`/v1/messages`).
    Anthropic,
    /// Ollama's `{"error":"message"}` (`/api/chat`, `/api/generate`).
    Ollama,
}

/// Every inspected route: canonical path, methods SGLang serves it on, the
/// field a length error points at, and its error shape.
const ROUTES: &[(Route, &str, &[&str], &str, ErrorShape)] = &[
    (
        Route::ChatCompletions,
        "/v1/chat/completions",
        &["POST"],
        "messages",
        ErrorShape::OpenAi,
    ),
    (
        Route::Completions,
        "/v1/completions",
        &["POST"],
        "prompt",
        ErrorShape::OpenAi,
    ),
    (
        Route::Generate,
        "/generate",
        &["POST", "PUT"],
        "text",
        ErrorShape::Sglang,
    ),
    (
        Route::Embeddings,
        "/v1/embeddings",
        &["POST"],
        "input",
        ErrorShape::OpenAi,
    ),
    (
        Route::ClassifyV1,
        "/v1/classify",
        &["POST"],
        "input",
        ErrorShape::OpenAi,
    ),
    (
        Route::Classify,
        "/classify",
        &["POST", "PUT"],
        "text",
        ErrorShape::Sglang,
    ),
    (
        Route::Encode,
        "/encode",
        &["POST", "PUT"],
        "text",
        ErrorShape::Sglang,
    ),
    (
        Route::Rerank,
        "/v1/rerank",
        &["POST", "PUT"],
        "documents",
        ErrorShape::OpenAi,
    ),
    (
        Route::Score,
        "/v1/score",
        &["POST"],
        "items",
        ErrorShape::OpenAi,
    ),
    (
        Route::VertexGenerate,
        "/vertex_generate",
        &["POST"],
        "instances",
        ErrorShape::Sglang,
    ),
    (
        Route::Responses,
        "/v1/responses",
        &["POST"],
        "input",
        ErrorShape::OpenAi,
    ),
    (
        Route::Messages,
        "/v1/messages",
        &["POST"],
        "messages",
        ErrorShape::Anthropic,
    ),
    // SageMaker: the chat handler under another path.
    (
        Route::Invocations,
        "/invocations",
        &["POST"],
        "messages",
        ErrorShape::OpenAi,
    ),
    (
        Route::OllamaChat,
        "/api/chat",
        &["POST"],
        "messages",
        ErrorShape::Ollama,
    ),
    (
        Route::OllamaGenerate,
        "/api/generate",
        &["POST"],
        "prompt",
        ErrorShape::Ollama,
    ),
];

impl Route {
    /// Every inspected route, in table order.
    pub fn all() -> impl Iterator<Item = Route> {
        ROUTES.iter().map(|e| e.0)
    }

    fn entry(
        self,
    ) -> &'static (
        Route,
        &'static str,
        &'static [&'static str],
        &'static str,
        ErrorShape,
    ) {
        ROUTES
            .iter()
            .find(|e| e.0 == self)
            .expect("every route is in ROUTES")
    }

    /// The canonical path forwarded upstream, also the `route` metric label.
    pub fn path(self) -> &'static str {
        self.entry().1
    }

    /// The request field a length error points at (OpenAI's `param`).
    pub fn prompt_param(self) -> &'static str {
        self.entry().3
    }

    pub fn error_shape(self) -> ErrorShape {
        self.entry().4
    }

    /// Routes answered in OpenAI's error envelope.
    pub fn is_openai(self) -> bool {
        self.error_shape() == ErrorShape::OpenAi
    }

    fn allows(self, method: &Method) -> bool {
        self.entry().2.contains(&method.as_str())
    }

    /// The route a saved body was most likely sent to, from its fields, for
    /// the offline commands (`count`, `verify`) when no `--route` is given:
    /// `messages` is a chat, `prompt` a completion, anything else `/generate`.
    pub fn detect(body: &serde_json::Value) -> Route {
        if body.get("messages").is_some() {
            Route::ChatCompletions
        } else if body.get("prompt").is_some() {
            Route::Completions
        } else {
            Route::Generate
        }
    }

    pub fn from_path(path: &str) -> Option<Route> {
        ROUTES.iter().find(|e| e.1 == path).map(|e| e.0)
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

/// Classifies a request by method and canonical path (see [`crate::inspect::json`]
/// for the body side). Everything not modelled is refused: default deny.
pub fn classify(method: &Method, canonical_path: &str) -> Result<RouteClass, Reason> {
    if let Some(route) = Route::from_path(canonical_path) {
        return if route.allows(method) {
            Ok(RouteClass::Inspect(route))
        } else {
            Err(Reason::MethodNotAllowed {
                method: method.to_string(),
                path: canonical_path.to_string(),
            })
        };
    }
    if let Some((_, methods)) = PASS_THROUGH.iter().find(|(p, _)| *p == canonical_path) {
        return if methods.contains(&method.as_str()) {
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
