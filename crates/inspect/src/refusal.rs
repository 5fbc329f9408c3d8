//! Why inspection refuses a request. The guard turns each into its one
//! refusal type (`errors::Reason`), which alone decides the status, the body
//! and the metric label; this crate only says what was wrong.

use prefill_guard_count::CountError;

/// What inspection found wrong with a request, in the words the client gets.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    /// The key as JSON spells it: quoted, escapes included.
    #[error("duplicate key {0} in the JSON body")]
    DuplicateKey(String),
    /// Valid JSON that SGLang would refuse (wrong types, failed request checks).
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<&'static str>,
    },
    /// Content whose token length the guard cannot see in the body.
    #[error("{0}")]
    Unmeasurable(String),
    #[error("route {path} is not allowed through prefill-guard")]
    RouteNotAllowed { path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("request target is not canonical: {0}")]
    BadPath(String),
    /// What the counting core refused while reading a route's fields
    /// (Ollama's `/api/generate`).
    #[error(transparent)]
    Count(#[from] CountError),
}

#[cfg(test)]
impl Refusal {
    /// The guard's metric label for this refusal (`errors::Reason::label`),
    /// which the unit tests here assert by.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Refusal::InvalidJson(_) => "invalid_json",
            Refusal::DuplicateKey(_) => "duplicate_key",
            Refusal::InvalidRequest { .. } | Refusal::Count(CountError::Invalid { .. }) => {
                "invalid_request"
            }
            Refusal::Unmeasurable(_) | Refusal::Count(CountError::Unsupported(_)) => {
                "unmeasurable_content"
            }
            Refusal::RouteNotAllowed { .. } => "route_not_allowed",
            Refusal::MethodNotAllowed { .. } => "method_not_allowed",
            Refusal::BadPath(_) => "bad_path",
            Refusal::Count(CountError::Template(_)) => "template_error",
            Refusal::Count(CountError::NoTokenizer | CountError::Tokenizer(_)) => "internal_error",
        }
    }
}
