//! Every refusal the guard can give, with its HTTP status, its body in the
//! route's native error shape and its metric label. The external modes
//! answer some of them with another status (`core::external_status`).

use bytes::Bytes;
use http::StatusCode;
use serde_json::json;

use crate::count::CountError;
use crate::inspect::Refusal;
use crate::route::ErrorShape;
use crate::route::Route;

/// Why a request is not forwarded. Counting, policy and the adapters all
/// speak this type; nothing else decides a status code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Reason {
    /// `L >= max_req_input_len`: SGLang's prefill scheduler would stub it out.
    #[error("prompt of {tokens} tokens does not fit the limit of {limit} (refused at >= {limit})")]
    TooLong { tokens: usize, limit: usize },
    /// As `TooLong`, but counting stopped once it reached the limit: the
    /// prompt has *at least* `tokens` tokens (the exact number is not known).
    #[error("prompt of at least {tokens} tokens does not fit the limit of {limit} (refused at >= {limit})")]
    TooLongAtLeast { tokens: usize, limit: usize },
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
    #[error("the chat template failed to render: {0}")]
    Template(String),
    /// Content whose token length the guard cannot see in the body.
    #[error("{0}")]
    Unmeasurable(String),
    #[error("the model `{0}` does not exist")]
    UnknownModel(String),
    #[error("route {path} is not allowed through prefill-guard")]
    RouteNotAllowed { path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("request target is not canonical: {0}")]
    BadPath(String),
    /// Ambiguous HTTP/1.1 message framing (`Content-Length` with
    /// `Transfer-Encoding`, a coding other than `chunked`): the connection's
    /// byte stream can no longer be trusted, so it is closed after the answer.
    #[error("{0}")]
    BadFraming(String),
    #[error("request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// No limit is known for the model (discovery has not succeeded yet).
    #[error("no prompt limit is known for model `{0}` yet")]
    LimitUnknown(String),
    /// The model's serving profile says the guard cannot count it exactly
    /// (a server setting it does not model, workers that disagree, an
    /// undercount found by verification).
    #[error("{}", not_served_message(model, why))]
    NotServed {
        model: String,
        why: crate::policy::NotServed,
    },
    /// What the request asks beyond its prompt would let an exposed PD
    /// pair answer it from another request's data (`policy::pd`).
    #[error("{0}")]
    Pd(crate::policy::pd::PdRefusal),
    #[error("the guard is overloaded")]
    Overloaded,
    /// The client did not send its request in time (`body_idle_timeout_ms`,
    /// `body_read_timeout_ms`): the connection is closed after the answer.
    #[error("the request body did not arrive in time ({0})")]
    ClientTimeout(&'static str),
    #[error("upstream unavailable: {0}")]
    UpstreamUnavailable(String),
    #[error("upstream timed out")]
    UpstreamTimeout,
    #[error("internal error: {0}")]
    Internal(String),
}

/// Every [`Reason::label`]: the README's table of refusal codes lists each
/// (`tests/it/docs_metrics.rs`), and a unit test below keeps this list whole.
pub const LABELS: &[&str] = &[
    "context_length_exceeded",
    "invalid_json",
    "duplicate_key",
    "invalid_request",
    "template_error",
    "unmeasurable_content",
    "model_not_found",
    "route_not_allowed",
    "method_not_allowed",
    "bad_path",
    "bad_framing",
    "body_too_large",
    "unsupported_media_type",
    "limit_unknown",
    "server_config_unmodelled",
    "server_config_disagrees",
    "count_check_failed",
    "static_limit_impossible",
    "pd_config_disagrees",
    "client_id_refused",
    "pd_sampling_mask_refused",
    "pd_hidden_states_refused",
    "pd_speculative_differs",
    "pd_grammar_backend_differs",
    "pd_grammar_refused",
    "overloaded",
    "client_timeout",
    "upstream_unavailable",
    "upstream_timeout",
    "internal_error",
];

impl From<Refusal> for Reason {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::InvalidJson(m) => Reason::InvalidJson(m),
            Refusal::DuplicateKey(k) => Reason::DuplicateKey(k),
            Refusal::InvalidRequest { message, param } => Reason::InvalidRequest { message, param },
            Refusal::Unmeasurable(m) => Reason::Unmeasurable(m),
            Refusal::RouteNotAllowed { path } => Reason::RouteNotAllowed { path },
            Refusal::MethodNotAllowed { method, path } => Reason::MethodNotAllowed { method, path },
            Refusal::BadPath(m) => Reason::BadPath(m),
            Refusal::Count(e) => Reason::from(e),
        }
    }
}

impl From<CountError> for Reason {
    fn from(e: CountError) -> Self {
        match e {
            CountError::Invalid { message, param } => Reason::InvalidRequest { message, param },
            CountError::Template(m) => Reason::Template(m),
            CountError::Unsupported(m) => Reason::Unmeasurable(m),
            e @ (CountError::NoTokenizer | CountError::Tokenizer(_)) => {
                Reason::Internal(e.to_string())
            }
        }
    }
}

impl Reason {
    pub fn status(&self) -> StatusCode {
        match self {
            Reason::TooLong { .. }
            | Reason::TooLongAtLeast { .. }
            | Reason::InvalidJson(_)
            | Reason::DuplicateKey(_)
            | Reason::InvalidRequest { .. }
            | Reason::Template(_)
            | Reason::Unmeasurable(_)
            | Reason::Pd(_)
            | Reason::BadPath(_)
            | Reason::BadFraming(_) => StatusCode::BAD_REQUEST,
            Reason::UnknownModel(_) | Reason::RouteNotAllowed { .. } => StatusCode::NOT_FOUND,
            Reason::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Reason::ClientTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Reason::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Reason::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Reason::LimitUnknown(_) | Reason::NotServed { .. } | Reason::Overloaded => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Reason::UpstreamUnavailable(_) => StatusCode::BAD_GATEWAY,
            Reason::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Reason::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` label of `prefill_guard_rejections_total`, and the OpenAI `code`
    /// for everything but a too-long prompt and an unknown model.
    pub fn label(&self) -> &'static str {
        match self {
            Reason::TooLong { .. } | Reason::TooLongAtLeast { .. } => "context_length_exceeded",
            Reason::InvalidJson(_) => "invalid_json",
            Reason::DuplicateKey(_) => "duplicate_key",
            Reason::InvalidRequest { .. } => "invalid_request",
            Reason::Template(_) => "template_error",
            Reason::Unmeasurable(_) => "unmeasurable_content",
            Reason::UnknownModel(_) => "model_not_found",
            Reason::RouteNotAllowed { .. } => "route_not_allowed",
            Reason::MethodNotAllowed { .. } => "method_not_allowed",
            Reason::BadPath(_) => "bad_path",
            Reason::BadFraming(_) => "bad_framing",
            Reason::BodyTooLarge { .. } => "body_too_large",
            Reason::UnsupportedMediaType(_) => "unsupported_media_type",
            Reason::LimitUnknown(_) => "limit_unknown",
            Reason::NotServed { why, .. } => match why {
                crate::policy::NotServed::Unmodelled(_) => "server_config_unmodelled",
                crate::policy::NotServed::Disagrees { .. } => "server_config_disagrees",
                crate::policy::NotServed::Undercount(_) => "count_check_failed",
                crate::policy::NotServed::ImpossibleLimit(_) => "static_limit_impossible",
                crate::policy::NotServed::PdDisagrees(_) => "pd_config_disagrees",
            },
            Reason::Pd(refusal) => refusal.label(),
            Reason::Overloaded => "overloaded",
            Reason::ClientTimeout(_) => "client_timeout",
            Reason::UpstreamUnavailable(_) => "upstream_unavailable",
            Reason::UpstreamTimeout => "upstream_timeout",
            Reason::Internal(_) => "internal_error",
        }
    }

    /// The client-facing message. Never contains prompt text: only counts,
    /// limits, names of fields and routes.
    pub fn message(&self, route: Option<Route>) -> String {
        match self {
            Reason::TooLong { tokens, limit } => {
                too_long_message(&tokens.to_string(), *limit, route)
            }
            Reason::TooLongAtLeast { tokens, limit } => {
                too_long_message(&format!("at least {tokens}"), *limit, route)
            }
            other => other.to_string(),
        }
    }

    /// The JSON error body in the native shape of `route` (OpenAI's envelope on
    /// `/v1/*` and for routes the guard does not model, SGLang's on `/generate`).
    pub fn body(&self, route: Option<Route>) -> Bytes {
        let message = self.message(route);
        let value = match route.map_or(ErrorShape::OpenAi, Route::error_shape) {
            ErrorShape::Sglang => json!({ "error": { "message": message } }),
            ErrorShape::Anthropic => json!({
                "type": "error",
                "error": { "type": self.anthropic_error_type(), "message": message },
            }),
            ErrorShape::Ollama => json!({ "error": message }),
            ErrorShape::OpenAi => {
                let (param, code) = match self {
                    Reason::TooLong { .. } | Reason::TooLongAtLeast { .. } => {
                        (route.map(Route::prompt_param), self.label())
                    }
                    Reason::InvalidRequest { param, .. } => (*param, self.label()),
                    _ => (None, self.label()),
                };
                json!({ "error": {
                    "message": message,
                    "type": self.error_type(),
                    "param": param,
                    "code": code,
                }})
            }
        };
        Bytes::from(serde_json::to_vec(&value).expect("a json! value serialises"))
    }

    /// Anthropic's `error.type` for the status, as SGLang's `/v1/messages`
    /// handlers map it (`anthropic/serving.py::ERROR_TYPE_MAP`).
    fn anthropic_error_type(&self) -> &'static str {
        match self.status().as_u16() {
            400 | 405 | 415 | 422 => "invalid_request_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            _ => "api_error",
        }
    }

    fn error_type(&self) -> &'static str {
        match self.status() {
            StatusCode::NOT_FOUND => "not_found_error",
            s if s.is_client_error() => "invalid_request_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable_error",
            _ => "server_error",
        }
    }

    /// Refusals after which the connection must not be reused (framing errors).
    pub fn closes_connection(&self) -> bool {
        matches!(self, Reason::BadFraming(_) | Reason::ClientTimeout(_))
    }

    /// Seconds a client should wait before retrying, for load shedding.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            Reason::Overloaded => Some(1),
            Reason::LimitUnknown(_) => Some(5),
            Reason::NotServed { .. } => Some(30),
            _ => None,
        }
    }
}

/// A client sees which setting holds the model back, never its value
/// (values can be file paths or templates; the guard's log has them).
fn not_served_message(model: &str, why: &crate::policy::NotServed) -> String {
    use crate::policy::NotServed;
    let settings = why.settings().join(", ");
    match why {
        NotServed::Unmodelled(_) => format!(
            "model `{model}` is not served: its prefill server runs with a setting the guard does not \
             model ({settings}), so prompts cannot be counted exactly; the operator's log says what to configure"
        ),
        NotServed::Disagrees { .. } => format!(
            "model `{model}` is not served: its prefill workers and the guard's configuration disagree \
             on {settings}, which changes prompt lengths; the operator's log says which"
        ),
        NotServed::Undercount(_) => format!(
            "model `{model}` is not served: a sampled check found the guard counting fewer tokens than \
             the server; it stays out of service until the operator reloads the guard"
        ),
        NotServed::PdDisagrees(_) => format!(
            "model `{model}` is not served: its prefill and decode workers disagree on {settings}, \
             so decode would build a longer prompt than prefill sends; the operator's log says which"
        ),
        NotServed::ImpossibleLimit(_) => format!(
            "model `{model}` is not served: the guard's configured max_req_input_len is above any \
             limit its server can have, so it would not protect it; the operator's log says the largest"
        ),
    }
}

/// The too-long message in the route's wording; `tokens` is the count as
/// told ("1234", or "at least 1000" when counting stopped at the limit).
///
/// One statement of the limit everywhere a client reads one: `M`, the
/// `max_req_input_len` that `GET /v1/models` lists as `max_model_len`, with
/// prompts of `M` tokens or more refused. SGLang's own message names `M`
/// the same way. Anthropic's shape alone keeps its `N tokens > MAX maximum`
/// form with `MAX = M - 1`, the largest prompt served: Anthropic clients
/// parse exactly that form to compact a conversation, and it stays true.
fn too_long_message(tokens: &str, limit: usize, route: Option<Route>) -> String {
    let shape = route.map_or(ErrorShape::OpenAi, Route::error_shape);
    let param = route.map_or("messages", Route::prompt_param);
    match (shape, param) {
        (ErrorShape::Sglang, _) => format!(
            "Input length ({tokens} tokens) exceeds the maximum allowed length ({limit} tokens). \
                 Use a shorter input."
        ),
        (ErrorShape::Anthropic, _) => format!(
            "prompt is too long: {tokens} tokens > {} maximum",
            limit.saturating_sub(1)
        ),
        (ErrorShape::Ollama, _) => {
            format!("prompt is too long: {tokens} tokens; prompts must be under {limit} tokens")
        }
        // OpenAI's wording, which clients parse, with what `L >= M` means
        // spelt out: a prompt of exactly M tokens is refused too.
        (ErrorShape::OpenAi, p) if p != "messages" => format!(
            "This model's maximum context length is {limit} tokens, and a prompt must be shorter \
             (at most {}). However, your {p} resulted in {tokens} tokens. Please reduce the \
             length of the {p}.",
            limit.saturating_sub(1)
        ),
        _ => format!(
            "This model's maximum context length is {limit} tokens, and a prompt must be shorter \
             (at most {}). However, your messages resulted in {tokens} tokens. Please reduce the \
             length of the messages.",
            limit.saturating_sub(1)
        ),
    }
}

#[cfg(test)]
mod tests {
    /// One reason of every variant (and every sub-kind with its own label).
    fn every_reason() -> Vec<super::Reason> {
        use super::Reason as R;
        use crate::policy::pd::PdRefusal as P;
        use crate::policy::NotServed as N;
        let not_served = |why| R::NotServed {
            model: "m".into(),
            why,
        };
        vec![
            R::TooLong {
                tokens: 2,
                limit: 1,
            },
            R::TooLongAtLeast {
                tokens: 2,
                limit: 1,
            },
            R::InvalidJson(String::new()),
            R::DuplicateKey(String::new()),
            R::InvalidRequest {
                message: String::new(),
                param: None,
            },
            R::Template(String::new()),
            R::Unmeasurable(String::new()),
            R::UnknownModel(String::new()),
            R::RouteNotAllowed {
                path: String::new(),
            },
            R::MethodNotAllowed {
                method: String::new(),
                path: String::new(),
            },
            R::BadPath(String::new()),
            R::BadFraming(String::new()),
            R::BodyTooLarge { limit: 1 },
            R::UnsupportedMediaType(String::new()),
            R::LimitUnknown(String::new()),
            not_served(N::Unmodelled(vec![])),
            not_served(N::Disagrees {
                setting: "s",
                detail: String::new(),
            }),
            not_served(N::Undercount(String::new())),
            not_served(N::ImpossibleLimit(crate::policy::ceiling::Impossible {
                stated: 2,
                context: 1,
                source: "s",
            })),
            not_served(N::PdDisagrees(crate::policy::pd::Disagreement {
                setting: "s",
                detail: String::new(),
            })),
            R::Pd(P::ClientControl(String::new())),
            R::Pd(P::SamplingMask),
            R::Pd(P::HiddenStates(String::new())),
            R::Pd(P::Dflash("f")),
            R::Pd(P::GrammarBackends {
                field: "f",
                why: String::new(),
            }),
            R::Pd(P::GrammarRefused { field: "f" }),
            R::Overloaded,
            R::ClientTimeout("t"),
            R::UpstreamUnavailable(String::new()),
            R::UpstreamTimeout,
            R::Internal(String::new()),
        ]
    }

    /// A prompt of exactly M tokens is refused: the message says so rather
    /// than "the maximum is 15, you sent 15".
    #[test]
    fn the_boundary_reads_as_a_refusal() {
        let r = super::Reason::TooLong {
            tokens: 15,
            limit: 15,
        };
        let m = r.message(Some(crate::route::Route::ChatCompletions));
        assert!(
            m.contains("maximum context length is 15 tokens")
                && m.contains("a prompt must be shorter (at most 14)")
                && m.contains("resulted in 15 tokens"),
            "{m}"
        );
    }

    #[test]
    fn labels_lists_every_label() {
        let labels: std::collections::BTreeSet<&str> =
            every_reason().iter().map(|r| r.label()).collect();
        let listed: std::collections::BTreeSet<&str> = super::LABELS.iter().copied().collect();
        assert_eq!(labels, listed);
    }
    use super::*;

    #[test]
    fn too_long_on_chat_is_openai_context_length_exceeded() {
        let r = Reason::TooLong {
            tokens: 130,
            limit: 100,
        };
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let v: serde_json::Value =
            serde_json::from_slice(&r.body(Some(Route::ChatCompletions))).unwrap();
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "messages");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("maximum context length is 100 tokens"),
            "{msg}"
        );
        assert!(msg.contains("resulted in 130 tokens"), "{msg}");
    }

    #[test]
    fn a_stopped_count_says_at_least_in_every_shape() {
        let r = Reason::TooLongAtLeast {
            tokens: 100,
            limit: 100,
        };
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.label(), "context_length_exceeded");
        let v: serde_json::Value =
            serde_json::from_slice(&r.body(Some(Route::ChatCompletions))).unwrap();
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["param"], "messages");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("resulted in at least 100 tokens"), "{msg}");
        for route in [Route::Generate, Route::Messages, Route::OllamaChat] {
            let body = String::from_utf8(r.body(Some(route)).to_vec()).unwrap();
            assert!(body.contains("at least 100 tokens"), "{body}");
        }
    }

    #[test]
    fn too_long_on_generate_is_sglang_shape() {
        let r = Reason::TooLong {
            tokens: 5,
            limit: 5,
        };
        let v: serde_json::Value = serde_json::from_slice(&r.body(Some(Route::Generate))).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
        assert_eq!(v["error"].as_object().unwrap().len(), 1);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Input length (5 tokens)"));
    }

    #[test]
    fn anthropic_and_ollama_shapes() {
        let r = Reason::TooLong {
            tokens: 12,
            limit: 10,
        };
        let v: serde_json::Value = serde_json::from_slice(&r.body(Some(Route::Messages))).unwrap();
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                   "message": "prompt is too long: 12 tokens > 9 maximum"}})
        );
        let v: serde_json::Value =
            serde_json::from_slice(&Reason::Overloaded.body(Some(Route::Messages))).unwrap();
        assert_eq!(v["error"]["type"], "overloaded_error");
        let v: serde_json::Value =
            serde_json::from_slice(&r.body(Some(Route::OllamaChat))).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 1);
        assert!(v["error"].as_str().unwrap().contains("12 tokens"));
        let v: serde_json::Value = serde_json::from_slice(&r.body(Some(Route::Responses))).unwrap();
        assert_eq!(v["error"]["param"], "input");
        assert_eq!(v["error"]["code"], "context_length_exceeded");
    }

    #[test]
    fn statuses_follow_the_contract() {
        assert_eq!(Reason::UnknownModel("x".into()).status(), 404);
        assert_eq!(Reason::UnknownModel("x".into()).label(), "model_not_found");
        assert_eq!(Reason::BodyTooLarge { limit: 1 }.status(), 413);
        assert_eq!(Reason::UpstreamUnavailable("reset".into()).status(), 502);
        assert_eq!(Reason::UpstreamTimeout.status(), 504);
        assert_eq!(Reason::Overloaded.status(), 503);
        assert_eq!(Reason::DuplicateKey("a".into()).status(), 400);
    }
}
