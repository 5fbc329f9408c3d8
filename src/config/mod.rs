//! Typed configuration, validated once at start-up. Sources, lowest to highest
//! precedence: the TOML file (`--config`), `PREFILL_GUARD_*` variables, flags.
//! Each setting is declared once, in `settings.rs` (file key, flag, variable
//! and help text); this module owns the defaults and the validation.

mod settings;

pub use settings::{parse_bytes, trimmed, RawConfig, RawModel, ServerSettings};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::count::cache::Partitioning;

/// The effective configuration of `prefill-guard serve`.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// Base URL of SGLang or its router, e.g. `http://router:30000`.
    pub upstream: http::Uri,
    pub models: Vec<ModelConfig>,
    /// Requests with a larger body are refused with 413 before they are parsed.
    pub max_body_bytes: usize,
    /// Time to connect to the upstream.
    pub upstream_connect_timeout: Duration,
    /// Time from forwarding a request to the upstream's response headers.
    /// Streaming bodies are not limited by it.
    pub upstream_response_timeout: Duration,
    /// Longest silence of the upstream mid-body (SSE included): then the
    /// response is ended (an error event on SSE, a cut connection otherwise).
    pub upstream_idle_timeout: Duration,
    /// Event loops serving the proxy port, one thread each (fixed at start;
    /// `server::ProxyLoops`). Each serves the connections it accepted to the
    /// end, with its own upstream pool, so no request wakes another thread;
    /// a work-stealing runtime spent 30-40% more CPU per small request in
    /// wake-ups (BENCHMARKS.md). Counting has its own threads.
    pub io_threads: usize,
    /// Threads that tokenize (off the async runtime).
    pub count_workers: usize,
    /// Requests allowed to wait for a counting thread; beyond it the guard sheds with 503.
    pub count_queue: usize,
    /// Longest a request waits for a counting thread before it is shed with
    /// 503: a full queue of huge prompts must not turn into minutes of latency.
    pub count_queue_timeout: Duration,
    /// Bytes of request bodies buffered at once; a body that would pass it
    /// is shed with 503 + Retry-After (`server/budget.rs`).
    pub max_inflight_body_bytes: usize,
    /// How long clients may take, and how many connections they may hold.
    pub client: ClientLimits,
    /// Tokenize every prompt (up to the limit): never accept by the upper
    /// bound (`count/bound.rs`).
    pub exact_counting: bool,
    /// Bytes for remembered piece counts of long prompts (`count/cache.rs`);
    /// 0: off.
    pub count_cache_bytes: usize,
    /// Which requests may reuse each other's remembered counts.
    pub count_cache_partition: Partitioning,
    /// Whether one model that cannot be judged holds the pod unready.
    pub readiness: Readiness,
    pub log_format: LogFormat,
    /// How long in-flight requests may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// Prefill workers whose `GET /server_info` gives the limit (discovery).
    /// Empty: only static limits.
    pub prefill_urls: Vec<http::Uri>,
    /// Decode workers compared with the prefill workers (`policy::pd`).
    pub decode_urls: Vec<http::Uri>,
    /// Grammar-bearing requests on an exposed release.
    pub grammar_requests: crate::policy::pd::GrammarRequests,
    /// Time between two discovery rounds.
    pub discovery_interval: Duration,
    /// Lower `max_model_len` in `GET /v1/models` answers to the guard's limit.
    pub rewrite_models_max_len: bool,
    /// DANGEROUS: canonical paths forwarded uninspected (`allow_routes`),
    /// checked at startup to carry no prompt.
    pub allow_routes: crate::inspect::allow::AllowList,
    /// The gRPC listener (Envoy ext_authz and ext_proc, gRPC health), if any.
    pub grpc_listen: Option<SocketAddr>,
    /// The HTTP authorization listener (Envoy/Istio ext_authz, Traefik ForwardAuth).
    pub authz: AuthzConfig,
    /// The share of allowed requests counted again and compared with a
    /// prefill worker's `/v1/tokenize` (0: off).
    pub verify_sample_rate: f64,
    /// Where sampled requests are tokenized without discovery.
    pub verify_tokenize_url: Option<http::Uri>,
    /// SGLang's `--api-key`, for the guard's own calls to it.
    pub sglang_api_key: Option<crate::sglang::ApiKey>,
}

/// The HTTP authorization service (`ext::authz_http`): off unless `listen` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthzConfig {
    pub listen: Option<SocketAddr>,
    /// Envoy's `path_prefix` (Istio's `pathPrefix`), stripped from the check
    /// request's path; a check without it is refused. Empty: none. With
    /// Traefik, the path of the ForwardAuth `address` (`/` when empty).
    pub path_prefix: String,
    pub style: AuthzStyle,
}

/// Who calls the authorization listener, which decides where the original
/// request's method and target are read from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum AuthzStyle {
    /// Envoy ext_authz HTTP and Istio `envoyExtAuthzHttp`: the check request
    /// carries the original method and (prefixed) path; `X-Forwarded-*` are ignored.
    #[default]
    Envoy,
    /// Traefik ForwardAuth: the original method and target are Traefik's
    /// `X-Forwarded-Method` and `X-Forwarded-Uri` (`trustForwardHeader: false`).
    Traefik,
}

/// One served model: how to count its prompts and where its limit comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The served name clients put in `model`. With one model configured it is
    /// informational: every request is counted with that model, as a
    /// single-model SGLang does.
    pub name: String,
    /// `name` was not configured: it is the tokenizer's basename (or Hub id)
    /// until the prefill workers say what they serve.
    pub named_by_default: bool,
    /// A local directory or a Hugging Face model id.
    pub tokenizer: String,
    /// Hugging Face revision when `tokenizer` is a model id.
    pub revision: String,
    /// The static limit (SGLang's `max_req_input_len`, safety margin already
    /// subtracted): prompts with `L >= limit` are refused. `None` when the
    /// limit comes from discovery only.
    pub max_req_input_len: Option<usize>,
    /// `max_req_input_len` as written (before the margin), checked against
    /// what SGLang could have for the model's context
    /// (`policy::ceiling`); `None` when computed from the pool or discovered.
    pub stated_limit: Option<usize>,
    /// The context length the prefill server runs with, where configured
    /// (`--context-length`); otherwise the checkpoint's `config.json` or the
    /// upstream's `/v1/models` say it.
    pub context_length: Option<usize>,
    /// Subtracted from a discovered limit (the static one has it subtracted already).
    pub safety_margin_tokens: usize,
    /// The multimodal opt-in (`multimodal_{image,video,audio}_tokens`): a
    /// configured upper bound of tokens per media item, counted into L. A kind
    /// without one is refused.
    pub media: crate::count::MediaBounds,
    /// The prefill server's settings as configured.
    pub server: StaticServer,
}

pub use crate::logging::LogFormat;

/// When the pod reports ready (`/readyz`, gRPC health `readiness`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
pub enum Readiness {
    /// Every configured model is counted and judged: a model no worker
    /// serves holds the whole pod back (a misconfiguration to fix first).
    #[default]
    AllModels,
    /// At least one model is: a pod serving several models keeps taking
    /// traffic for those it can judge while another is missing.
    AnyModel,
}

/// The name a model goes by when the configuration gives none: a Hugging
/// Face id as it is (SGLang's own default served name), a local directory
/// by its last component, so that no filesystem path reaches a metric
/// label, a log line or a client's error message.
pub fn default_model_name(tokenizer: &str) -> String {
    let path = std::path::Path::new(tokenizer);
    let local = path.is_absolute()
        || tokenizer.starts_with("./")
        || tokenizer.starts_with("../")
        || tokenizer.starts_with('~')
        || path.exists();
    if !local {
        return tokenizer.to_string();
    }
    path.components()
        .rev()
        .find_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .unwrap_or_else(|| "model".to_string())
}

pub use crate::count::serving::StaticServer;

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

pub const DEFAULT_LISTEN: &str = "0.0.0.0:8000";
pub const DEFAULT_ADMIN_LISTEN: &str = "0.0.0.0:9000";
/// A 1M-token prompt is about 4 MiB of text; JSON escaping can double it.
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// A counting slot is worth waiting for about as long as a few of the largest
/// prompts take to count; past that a 503 the client can retry is the better answer.
const DEFAULT_COUNT_QUEUE_TIMEOUT_MS: u64 = 10_000;
/// About a million remembered pieces: some 4 GB of prompt text across tenants.
pub const DEFAULT_COUNT_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// The default body budget holds this many bodies of the maximum size.
pub const DEFAULT_INFLIGHT_BODIES: usize = 8;
/// Between discovery rounds: a restart or a memory change on a prefill
/// worker reaches the guard within this.
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);

/// What a client may take of the guard: time for each phase of a request,
/// and connections. The defaults follow nginx and Envoy (README, "Limits
/// and timeouts"): long enough for any honest client on a slow link, short
/// enough that a few stalled connections cannot hold the guard's memory or
/// sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// A whole request head, from its first byte (or from accept, for a
    /// connection's first request).
    pub header_read_timeout: Duration,
    /// The longest gap between two reads of a request body.
    pub body_idle_timeout: Duration,
    /// A whole request body.
    pub body_read_timeout: Duration,
    /// A connection (HTTP/1 keep-alive or h2c) with no request in flight.
    pub keepalive_idle_timeout: Duration,
    /// Open connections on the proxy port (and, separately, the authz port).
    pub max_connections: usize,
    /// Open connections from one peer address; 0: no limit.
    pub max_connections_per_client: usize,
}

impl ClientLimits {
    fn resolve(raw: &RawConfig) -> Result<Self, ConfigError> {
        let ms = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(ConfigError(format!("{key} must be at least 1"))),
            v => Ok(Duration::from_millis(v.unwrap_or(default))),
        };
        let limits = ClientLimits {
            header_read_timeout: ms("header_read_timeout_ms", raw.header_read_timeout_ms, 10_000)?,
            body_idle_timeout: ms("body_idle_timeout_ms", raw.body_idle_timeout_ms, 10_000)?,
            body_read_timeout: ms("body_read_timeout_ms", raw.body_read_timeout_ms, 120_000)?,
            keepalive_idle_timeout: ms(
                "keepalive_idle_timeout_ms",
                raw.keepalive_idle_timeout_ms,
                60_000,
            )?,
            max_connections: match raw.max_connections {
                Some(0) => return Err(ConfigError("max_connections must be at least 1".into())),
                n => n.unwrap_or(8_192),
            },
            max_connections_per_client: raw.max_connections_per_client.unwrap_or(256),
        };
        Ok(limits)
    }
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self::resolve(&RawConfig::default()).expect("the defaults are valid")
    }
}

impl RawModel {
    /// `discovery`: prefill workers are configured, so a model may go without
    /// a static limit (it is refused with 503 until discovery succeeds).
    fn resolve(
        &self,
        global_margin: Option<usize>,
        index: usize,
        discovery: bool,
    ) -> Result<ModelConfig, ConfigError> {
        let tokenizer = self
            .tokenizer
            .clone()
            .ok_or_else(|| ConfigError(format!("model #{index}: `tokenizer` is required")))?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| default_model_name(&tokenizer));
        let base = match (self.max_req_input_len, self.prefill_pool_tokens, self.context_length) {
            (Some(m), _, _) => Some(m),
            (None, Some(p), Some(c)) => Some(max_req_input_len_from(c, p).ok_or_else(|| {
                ConfigError(format!("model `{name}`: prefill_pool_tokens and context_length are too small"))
            })?),
            (None, Some(_), None) | (None, None, Some(_)) => {
                return Err(ConfigError(format!(
                    "model `{name}`: set both prefill_pool_tokens and context_length, or max_req_input_len"
                )))
            }
            (None, None, None) if discovery => None,
            (None, None, None) => {
                return Err(ConfigError(format!(
                    "model `{name}`: no prompt limit; set prefill_urls (the guard then reads \
                     max_req_input_len from each prefill worker's /server_info), max_req_input_len, \
                     or prefill_pool_tokens and context_length"
                )))
            }
        };
        let margin = self.safety_margin_tokens.or(global_margin).unwrap_or(0);
        let max_req_input_len = match base {
            Some(0) => {
                return Err(ConfigError(format!(
                    "model `{name}`: a prompt limit of 0 refuses every prompt; \
                     max_req_input_len (refuse at L >= N) must be at least 1"
                )))
            }
            Some(base) => Some(base.checked_sub(margin).filter(|m| *m > 0).ok_or_else(|| {
                ConfigError(format!(
                    "model `{name}`: safety_margin_tokens {margin} leaves no room under {base}"
                ))
            })?),
            None => None,
        };
        for (key, bound) in [
            ("multimodal_image_tokens", self.multimodal_image_tokens),
            ("multimodal_video_tokens", self.multimodal_video_tokens),
            ("multimodal_audio_tokens", self.multimodal_audio_tokens),
        ] {
            if bound == Some(0) {
                return Err(ConfigError(format!(
                    "model `{name}`: {key} must be at least 1 (leave it unset to refuse that media)"
                )));
            }
        }
        let server = self
            .static_server()
            .map_err(|e| ConfigError(format!("model `{name}`: {e}")))?;
        Ok(ModelConfig {
            name,
            named_by_default: self.name.is_none(),
            tokenizer,
            revision: self.revision.clone().unwrap_or_else(|| "main".to_string()),
            max_req_input_len,
            stated_limit: self.max_req_input_len,
            context_length: self.context_length,
            safety_margin_tokens: margin,
            media: crate::count::MediaBounds {
                image: self.multimodal_image_tokens,
                video: self.multimodal_video_tokens,
                audio: self.multimodal_audio_tokens,
            },
            server,
        })
    }
}

/// The share of requests verified, and where, when no worker is discovered.
fn verification(raw: &RawConfig) -> Result<(f64, Option<http::Uri>), ConfigError> {
    let url = raw
        .verify_tokenize_url
        .as_deref()
        .map(|u| http_base_url("verify_tokenize_url", u))
        .transpose()?;
    let rate = raw.verify_sample_rate.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&rate) {
        return Err(ConfigError(format!(
            "verify_sample_rate {rate} must be between 0 and 1"
        )));
    }
    if rate > 0.0 && url.is_none() && raw.prefill_urls.as_ref().is_none_or(Vec::is_empty) {
        return Err(ConfigError(
            "verify_sample_rate needs a server to tokenize with: prefill_urls (each prefill \
             worker's /v1/tokenize) or verify_tokenize_url"
                .into(),
        ));
    }
    Ok((rate, url))
}

/// SGLang's `--api-key`, from its file or its variable (not both: which one
/// is in force would be a guess).
fn api_key(raw: &RawConfig) -> Result<Option<crate::sglang::ApiKey>, ConfigError> {
    match (&raw.sglang_api_key_file, &raw.sglang_api_key) {
        (Some(_), Some(_)) => Err(ConfigError(
            "set sglang_api_key_file or sglang_api_key, not both".into(),
        )),
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("sglang_api_key_file {}: {e}", path.display())))?;
            crate::sglang::ApiKey::new(text.trim())
                .map(Some)
                .map_err(|e| ConfigError(format!("sglang_api_key_file {}: {e}", path.display())))
        }
        (None, Some(key)) => crate::sglang::ApiKey::new(key.trim())
            .map(Some)
            .map_err(|e| ConfigError(format!("sglang_api_key: {e}"))),
        (None, None) => Ok(None),
    }
}

/// The prefill and decode workers' base URLs; decode workers are compared
/// with prefill workers, so they need some.
fn worker_urls(raw: &RawConfig) -> Result<(Vec<http::Uri>, Vec<http::Uri>), ConfigError> {
    let parse = |key: &str, list: &Option<Vec<String>>| {
        list.iter()
            .flatten()
            .map(|u| http_base_url(key, u))
            .collect::<Result<Vec<_>, _>>()
    };
    let prefill = parse("prefill_urls", &raw.prefill_urls)?;
    let decode = parse("decode_urls", &raw.decode_urls)?;
    if !decode.is_empty() && prefill.is_empty() {
        return Err(ConfigError(
            "decode_urls needs prefill_urls: decode workers are compared with the prefill workers"
                .into(),
        ));
    }
    Ok((prefill, decode))
}

/// An `http://host[:port][/path]` base URL (`key` names the setting in errors).
pub fn http_base_url(key: &str, text: &str) -> Result<http::Uri, ConfigError> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| ConfigError(format!("{key} `{text}`: {e}")))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(ConfigError(format!(
            "{key} `{text}` must be an http:// base URL"
        )));
    }
    Ok(uri)
}

/// `authz_path_prefix`: empty, or a canonical path (no trailing slash, no
/// query, nothing percent-encoded), so stripping it is a plain byte prefix
/// match that no other spelling of the same path can slip past.
fn authz_path_prefix(text: &str) -> Result<String, ConfigError> {
    if text.is_empty() {
        return Ok(String::new());
    }
    let bad = || {
        ConfigError(format!(
            "authz_path_prefix `{text}` must be a canonical path such as `/authz` \
             (leading `/`, no trailing `/`, no query, no `%`)"
        ))
    };
    let uri: http::Uri = text.parse().map_err(|_| bad())?;
    if text.contains(['%', '?']) || text.ends_with('/') {
        return Err(bad());
    }
    match crate::inspect::path::canonical_path(&uri) {
        Ok(p) if p == text => Ok(p),
        _ => Err(bad()),
    }
}

pub use crate::sglang::max_req_input_len_from;

impl Config {
    pub fn resolve(raw: RawConfig) -> Result<Config, ConfigError> {
        let upstream_text = raw
            .upstream
            .clone()
            .ok_or_else(|| ConfigError("`upstream` is required".into()))?;
        let upstream = http_base_url("upstream", &upstream_text)?;
        let (prefill_urls, decode_urls) = worker_urls(&raw)?;
        let (verify_sample_rate, verify_tokenize_url) = verification(&raw)?;
        let discovery = !prefill_urls.is_empty();
        let mut models = Vec::new();
        if !raw.model.is_empty() {
            models.push(raw.model.resolve(raw.safety_margin_tokens, 0, discovery)?);
        }
        for (i, m) in raw.models.iter().enumerate() {
            models.push(m.resolve(raw.safety_margin_tokens, i + models.len(), discovery)?);
        }
        if models.is_empty() {
            return Err(ConfigError(
                "no model configured: set `tokenizer` and `max_req_input_len`".into(),
            ));
        }
        let mut names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError(format!(
                "model name `{}` is configured twice",
                w[0]
            )));
        }
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let count_workers = raw.count_workers.unwrap_or(cores);
        let max_body_bytes = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        let max_inflight_body_bytes = raw
            .max_inflight_body_bytes
            .unwrap_or_else(|| max_body_bytes.saturating_mul(DEFAULT_INFLIGHT_BODIES));
        if max_inflight_body_bytes < max_body_bytes {
            return Err(ConfigError(format!(
                "max_inflight_body_bytes ({max_inflight_body_bytes}) is below max_body_bytes \
                 ({max_body_bytes}): a body of the allowed size could never be accepted"
            )));
        }
        if count_workers == 0 {
            return Err(ConfigError("count_workers must be at least 1".into()));
        }
        let io_threads = raw.io_threads.unwrap_or(cores);
        if io_threads == 0 {
            return Err(ConfigError("io_threads must be at least 1".into()));
        }
        Ok(Config {
            listen: raw
                .listen
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
            admin_listen: raw
                .admin_listen
                .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.parse().expect("valid default")),
            upstream,
            models,
            max_body_bytes,
            upstream_connect_timeout: Duration::from_millis(
                raw.upstream_connect_timeout_ms.unwrap_or(5_000),
            ),
            upstream_response_timeout: Duration::from_secs(
                raw.upstream_response_timeout_secs.unwrap_or(600),
            ),
            upstream_idle_timeout: match raw.upstream_idle_timeout_secs {
                Some(0) => {
                    return Err(ConfigError(
                        "upstream_idle_timeout_secs must be at least 1".into(),
                    ))
                }
                secs => Duration::from_secs(secs.unwrap_or(600)),
            },
            io_threads,
            count_workers,
            count_queue: raw.count_queue.unwrap_or(count_workers * 32),
            count_queue_timeout: match raw.count_queue_timeout_ms {
                Some(0) => {
                    return Err(ConfigError(
                        "count_queue_timeout_ms must be at least 1".into(),
                    ))
                }
                ms => Duration::from_millis(ms.unwrap_or(DEFAULT_COUNT_QUEUE_TIMEOUT_MS)),
            },
            max_inflight_body_bytes,
            client: ClientLimits::resolve(&raw)?,
            exact_counting: raw.exact_counting.unwrap_or(false),
            count_cache_bytes: raw.count_cache_bytes.unwrap_or(DEFAULT_COUNT_CACHE_BYTES),
            count_cache_partition: match &raw.count_cache_partition {
                Some(p) => p
                    .parse()
                    .map_err(|e: String| ConfigError(format!("count_cache_partition: {e}")))?,
                None => Partitioning::default(),
            },
            readiness: raw.readiness.unwrap_or_default(),
            log_format: raw.log_format.unwrap_or_default(),
            shutdown_grace: Duration::from_secs(raw.shutdown_grace_secs.unwrap_or(30)),
            prefill_urls,
            decode_urls,
            grammar_requests: raw.grammar_requests.unwrap_or_default(),
            discovery_interval: match raw.discovery_interval_ms {
                Some(0) => {
                    return Err(ConfigError(
                        "discovery_interval_ms must be at least 1".into(),
                    ))
                }
                Some(ms) => Duration::from_millis(ms),
                None => DEFAULT_DISCOVERY_INTERVAL,
            },
            rewrite_models_max_len: raw.rewrite_models_max_len.unwrap_or(true),
            allow_routes: crate::inspect::allow::AllowList::new(
                raw.allow_routes.as_deref().unwrap_or_default(),
            )
            .map_err(ConfigError)?,
            grpc_listen: raw.grpc_listen,
            authz: AuthzConfig {
                listen: raw.authz_listen,
                path_prefix: authz_path_prefix(raw.authz_path_prefix.as_deref().unwrap_or(""))?,
                style: raw.authz_style.unwrap_or_default(),
            },
            verify_sample_rate,
            verify_tokenize_url,
            sglang_api_key: api_key(&raw)?,
        })
    }

    /// Loads the TOML file at `path` (if any) and overlays `over`.
    pub fn load(path: Option<&PathBuf>, over: RawConfig) -> Result<Config, ConfigError> {
        let base = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| ConfigError(format!("{}: {e}", p.display())))?;
                RawConfig::from_toml(&text)
                    .map_err(|e| ConfigError(format!("{}: {}", p.display(), e.0)))?
            }
            None => RawConfig::default(),
        };
        Config::resolve(base.merge(over))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_zero_limit_is_refused_for_what_it_is() {
        let raw = RawConfig {
            upstream: Some("http://127.0.0.1:1".into()),
            model: RawModel {
                tokenizer: Some("t".into()),
                max_req_input_len: Some(0),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = Config::resolve(raw).unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
        assert!(!err.contains("safety_margin_tokens"), "{err}");
    }

    #[test]
    fn byte_sizes_take_units() {
        assert_eq!(parse_bytes("33554432"), Ok(33_554_432));
        assert_eq!(parse_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_bytes(" 32 MiB "), Ok(32 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("32MB"), Ok(32_000_000));
        assert_eq!(parse_bytes("2kB"), Ok(2_000));
        assert_eq!(parse_bytes("7B"), Ok(7));
        for bad in [
            "",
            "MiB",
            "32 mebibytes",
            "-1",
            "1.5MiB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} accepted");
        }
        let raw: RawConfig =
            toml::from_str("max_body_bytes = \"16MiB\"\nmax_inflight_body_bytes = 67108864\n")
                .unwrap();
        assert_eq!(raw.max_body_bytes, Some(16 << 20));
        assert_eq!(raw.max_inflight_body_bytes, Some(64 << 20));
        let err = toml::from_str::<RawConfig>("max_body_bytes = \"16 furlongs\"\n").unwrap_err();
        assert!(err.to_string().contains("byte unit"), "{err}");
    }
    use super::*;

    #[test]
    fn limit_from_pool_and_context_matches_sglang() {
        // The worked example of SGLang issue #30233.
        assert_eq!(max_req_input_len_from(1_048_576, 284_928), Some(284_922));
        // A pool larger than the context: the context decides.
        assert_eq!(max_req_input_len_from(32_768, 1_000_000), Some(32_762));
        assert_eq!(max_req_input_len_from(6, 100), None);
    }

    #[test]
    fn refuses_to_start_without_a_limit() {
        let raw = RawConfig {
            upstream: Some("http://127.0.0.1:1".into()),
            model: RawModel {
                tokenizer: Some("t".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = Config::resolve(raw).unwrap_err();
        assert!(err.0.contains("no prompt limit"), "{err}");
    }

    #[test]
    fn count_queue_timeout_defaults_and_refuses_zero() {
        let with = |extra: &str| {
            Config::resolve(
                RawConfig::from_toml(&format!(
                    "upstream = \"http://router:30000\"\n{extra}\n\
                     [[models]]\nname = \"m\"\ntokenizer = \"/m\"\nmax_req_input_len = 10\n"
                ))
                .unwrap(),
            )
        };
        assert_eq!(
            with("").unwrap().count_queue_timeout,
            Duration::from_secs(10)
        );
        assert_eq!(
            with("count_queue_timeout_ms = 250")
                .unwrap()
                .count_queue_timeout,
            Duration::from_millis(250)
        );
        let err = with("count_queue_timeout_ms = 0").unwrap_err();
        assert!(err.0.contains("count_queue_timeout_ms"), "{err}");
    }

    #[test]
    fn multimodal_bounds_per_model() {
        let file = RawConfig::from_toml(
            "upstream = \"http://router:30000\"\n\
             [[models]]\nname = \"vl\"\ntokenizer = \"/m/vl\"\nmax_req_input_len = 1000\n\
             multimodal_image_tokens = 1280\nmultimodal_audio_tokens = 750\n\
             [[models]]\nname = \"text\"\ntokenizer = \"/m/t\"\nmax_req_input_len = 1000\n",
        )
        .unwrap();
        let cfg = Config::resolve(file).unwrap();
        assert_eq!(
            cfg.models[0].media,
            crate::count::MediaBounds {
                image: Some(1280),
                video: None,
                audio: Some(750),
            }
        );
        assert_eq!(cfg.models[1].media, crate::count::MediaBounds::default());
        // The single-model overlay (flags, variables) carries them too.
        let base = RawConfig {
            upstream: Some("http://127.0.0.1:1".into()),
            model: RawModel {
                tokenizer: Some("t".into()),
                max_req_input_len: Some(100),
                multimodal_video_tokens: Some(9),
                ..Default::default()
            },
            ..Default::default()
        };
        let over = RawConfig {
            model: RawModel {
                multimodal_image_tokens: Some(7),
                ..Default::default()
            },
            ..Default::default()
        };
        let cfg = Config::resolve(base.clone().merge(over)).unwrap();
        assert_eq!(cfg.models[0].media.image, Some(7));
        assert_eq!(cfg.models[0].media.video, Some(9));
        // A zero bound would admit media for free.
        let zero = RawConfig {
            model: RawModel {
                multimodal_image_tokens: Some(0),
                ..base.model
            },
            ..base
        };
        let err = Config::resolve(zero).unwrap_err();
        assert!(err.0.contains("multimodal_image_tokens"), "{err}");
    }

    #[test]
    fn margin_and_layers() {
        let file = RawConfig::from_toml(
            "upstream = \"http://router:30000\"\nsafety_margin_tokens = 10\n\
             [[models]]\nname = \"a\"\ntokenizer = \"/m/a\"\nprefill_pool_tokens = 681280\ncontext_length = 1048576\n\
             [[models]]\nname = \"b\"\ntokenizer = \"/m/b\"\nmax_req_input_len = 1000\nsafety_margin_tokens = 0\n",
        )
        .unwrap();
        let flags = RawConfig {
            max_body_bytes: Some(7),
            ..Default::default()
        };
        let cfg = Config::resolve(file.merge(flags)).unwrap();
        assert_eq!(cfg.max_body_bytes, 7);
        assert_eq!(cfg.models[0].max_req_input_len, Some(681_274 - 10));
        assert_eq!(cfg.models[1].max_req_input_len, Some(1000));
        assert_eq!(cfg.models[0].safety_margin_tokens, 10);
        assert_eq!(cfg.models[1].safety_margin_tokens, 0);
        assert!(cfg.prefill_urls.is_empty());
        assert_eq!(cfg.discovery_interval, DEFAULT_DISCOVERY_INTERVAL);
        assert!(cfg.rewrite_models_max_len);
    }

    #[test]
    fn discovery_replaces_the_static_limit_requirement() {
        let raw = RawConfig::from_toml(
            "upstream = \"http://127.0.0.1:1\"\ntokenizer = \"t\"\n\
             prefill_urls = [\"http://127.0.0.1:2\", \"http://127.0.0.1:3/\"]\n\
             discovery_interval_ms = 250\nrewrite_models_max_len = false\nsafety_margin_tokens = 4\n",
        )
        .unwrap();
        let cfg = Config::resolve(raw).unwrap();
        assert_eq!(cfg.models[0].max_req_input_len, None);
        assert_eq!(cfg.models[0].safety_margin_tokens, 4);
        assert_eq!(cfg.prefill_urls.len(), 2);
        assert_eq!(cfg.discovery_interval, Duration::from_millis(250));
        assert!(!cfg.rewrite_models_max_len);

        for bad in ["ftp://x", "127.0.0.1:2", "http://"] {
            let raw = RawConfig {
                upstream: Some("http://127.0.0.1:1".into()),
                prefill_urls: Some(vec![bad.into()]),
                model: RawModel {
                    tokenizer: Some("t".into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            assert!(Config::resolve(raw).is_err(), "{bad}");
        }
    }

    #[test]
    fn authz_settings() {
        let raw = RawConfig::from_toml(
            "upstream = \"http://127.0.0.1:1\"\ntokenizer = \"t\"\nmax_req_input_len = 9\n\
             authz_listen = \"127.0.0.1:9001\"\nauthz_path_prefix = \"/authz\"\nauthz_style = \"traefik\"\n",
        )
        .unwrap();
        let cfg = Config::resolve(raw.clone()).unwrap();
        assert_eq!(cfg.authz.listen, Some("127.0.0.1:9001".parse().unwrap()));
        assert_eq!(cfg.authz.path_prefix, "/authz");
        assert_eq!(cfg.authz.style, AuthzStyle::Traefik);
        for bad in ["authz", "/authz/", "/a%7A", "/a?b", "/a//b", "/a/../b", "/"] {
            let raw = RawConfig {
                authz_path_prefix: Some(bad.into()),
                ..raw.clone()
            };
            assert!(Config::resolve(raw).is_err(), "{bad}");
        }
        let off = Config::resolve(RawConfig {
            authz_listen: None,
            authz_path_prefix: None,
            authz_style: None,
            ..raw
        })
        .unwrap();
        assert_eq!(off.authz, AuthzConfig::default());
    }

    #[test]
    fn default_names_are_never_paths() {
        assert_eq!(default_model_name("/models/qwen3"), "qwen3");
        assert_eq!(default_model_name("/models/qwen3/"), "qwen3");
        assert_eq!(default_model_name("./qwen3"), "qwen3");
        assert_eq!(
            default_model_name("../shared/tokenizers/qwen2.5"),
            "qwen2.5"
        );
        assert_eq!(default_model_name("Qwen/Qwen3-8B"), "Qwen/Qwen3-8B");
        assert_eq!(default_model_name("/"), "model");
    }

    #[test]
    fn body_budget_and_exact_counting() {
        let base = RawConfig::from_toml(
            "upstream = \"http://127.0.0.1:1\"\ntokenizer = \"t\"\nmax_req_input_len = 10\n\
             max_body_bytes = 1000\n",
        )
        .unwrap();
        let cfg = Config::resolve(base.clone()).unwrap();
        assert_eq!(cfg.max_inflight_body_bytes, 8000);
        assert!(!cfg.exact_counting);
        let over = RawConfig {
            max_inflight_body_bytes: Some(5000),
            exact_counting: Some(true),
            ..Default::default()
        };
        let cfg = Config::resolve(base.clone().merge(over)).unwrap();
        assert_eq!(cfg.max_inflight_body_bytes, 5000);
        assert!(cfg.exact_counting);
        let too_small = RawConfig {
            max_inflight_body_bytes: Some(999),
            ..Default::default()
        };
        let err = Config::resolve(base.merge(too_small)).unwrap_err();
        assert!(err.0.contains("max_inflight_body_bytes"), "{err}");
    }
}
