//! The routes whose bodies carry a prompt: each one's path, methods, prompt
//! field and error shape. A leaf: the request side (`inspect`), counting
//! and the error bodies (`errors`) all read it. Methods are plain strings so
//! the counting crate needs no HTTP library.

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

    /// Whether SGLang serves the route on this HTTP method (`"POST"`, …).
    pub fn allows(self, method: &str) -> bool {
        self.entry().2.contains(&method)
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
