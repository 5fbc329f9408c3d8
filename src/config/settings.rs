//! Every setting of `prefill-guard serve`, declared once. A field here is at
//! the same time a key of the TOML file (serde, under the field's name), a
//! flag (clap, `--field-name`), and a `PREFILL_GUARD_FIELD_NAME` variable
//! (the `env` attribute, checked against the field's name by a test); its
//! doc comment is the `--help` text. Everything is optional, so the file
//! and the overlay of flags and variables can be merged key by key
//! ([`RawConfig::merge`], generic over the fields); `Config::resolve`
//! applies the defaults and checks.
//!
//! The exceptions are spelled out where they are: `name` is
//! `--served-model-name` (SGLang's flag), the two lists take a singular
//! repeated flag (`--prefill-url`, `--allow-route`), and `models` (tables of
//! several models) exists only in the file.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use clap::Args;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AuthzStyle, ConfigError, LogFormat, Readiness};
use crate::count::serving::{Observed, SglangEnv, StaticServer};

/// The TOML file, and the overlay built from variables and flags.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, Args)]
#[command(about = None, long_about = None)]
pub struct RawConfig {
    /// Address of the proxy listener (HTTP/1.1 and h2c).
    #[arg(long, env = "PREFILL_GUARD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address of /metrics, /healthz and /readyz; never the proxy port.
    #[arg(long, env = "PREFILL_GUARD_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Base URL of SGLang or its router.
    #[arg(long, env = "PREFILL_GUARD_UPSTREAM")]
    pub upstream: Option<String>,
    /// The single-model shorthand: in the file, these keys at the top level;
    /// as flags, `--tokenizer`, `--max-req-input-len`, ...
    #[serde(flatten)]
    #[command(flatten)]
    pub model: RawModel,
    /// Largest request body; larger ones get 413 (default 32MiB; units: KiB, MiB, GiB, kB, MB, GB).
    #[arg(long, env = "PREFILL_GUARD_MAX_BODY_BYTES", value_name = "BYTES", value_parser = parse_bytes)]
    #[serde(default, deserialize_with = "bytes_setting")]
    pub max_body_bytes: Option<usize>,
    /// Longest wait to connect to the upstream, then 502 (default 5000).
    #[arg(long, env = "PREFILL_GUARD_UPSTREAM_CONNECT_TIMEOUT_MS")]
    pub upstream_connect_timeout_ms: Option<u64>,
    /// Longest wait for the upstream's response headers, then 504 (default 600).
    #[arg(long, env = "PREFILL_GUARD_UPSTREAM_RESPONSE_TIMEOUT_SECS")]
    pub upstream_response_timeout_secs: Option<u64>,
    /// Longest silence of the upstream mid-response before the guard ends it (default 600).
    #[arg(long, env = "PREFILL_GUARD_UPSTREAM_IDLE_TIMEOUT_SECS")]
    pub upstream_idle_timeout_secs: Option<u64>,
    /// Event loops serving the proxy port, one thread each (default: the
    /// number of cores; counting has its own threads).
    #[arg(long, env = "PREFILL_GUARD_IO_THREADS")]
    pub io_threads: Option<usize>,
    /// Counting threads (default: the number of cores).
    #[arg(long, env = "PREFILL_GUARD_COUNT_WORKERS")]
    pub count_workers: Option<usize>,
    /// Requests that may wait for a counting thread before the guard sheds with 503
    /// (default: 32 × count-workers).
    #[arg(long, env = "PREFILL_GUARD_COUNT_QUEUE")]
    pub count_queue: Option<usize>,
    /// Longest wait for a counting thread before the guard sheds with 503 (default 10000).
    #[arg(long, env = "PREFILL_GUARD_COUNT_QUEUE_TIMEOUT_MS")]
    pub count_queue_timeout_ms: Option<u64>,
    /// Bytes of request bodies buffered at once; beyond it the guard sheds with 503
    /// (default: 8 × max-body-bytes).
    #[arg(long, env = "PREFILL_GUARD_MAX_INFLIGHT_BODY_BYTES", value_name = "BYTES", value_parser = parse_bytes)]
    #[serde(default, deserialize_with = "bytes_setting")]
    pub max_inflight_body_bytes: Option<usize>,
    /// Time for a whole request head (default 10000).
    #[arg(long, env = "PREFILL_GUARD_HEADER_READ_TIMEOUT_MS")]
    pub header_read_timeout_ms: Option<u64>,
    /// Longest gap between two reads of a request body (default 10000).
    #[arg(long, env = "PREFILL_GUARD_BODY_IDLE_TIMEOUT_MS")]
    pub body_idle_timeout_ms: Option<u64>,
    /// Time for a whole request body (default 120000).
    #[arg(long, env = "PREFILL_GUARD_BODY_READ_TIMEOUT_MS")]
    pub body_read_timeout_ms: Option<u64>,
    /// A connection with no request in flight is closed after this (default 60000).
    #[arg(long, env = "PREFILL_GUARD_KEEPALIVE_IDLE_TIMEOUT_MS")]
    pub keepalive_idle_timeout_ms: Option<u64>,
    /// Open connections on the proxy port, and on the authz port (default 8192).
    #[arg(long, env = "PREFILL_GUARD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Open connections from one peer address; 0 = no limit (default 256).
    #[arg(long, env = "PREFILL_GUARD_MAX_CONNECTIONS_PER_CLIENT")]
    pub max_connections_per_client: Option<usize>,
    /// Tokenize every prompt (up to the limit) instead of accepting a prompt whose
    /// cheap upper bound is under the limit (default false).
    #[arg(
        long,
        env = "PREFILL_GUARD_EXACT_COUNTING",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub exact_counting: Option<bool>,
    /// Memory for remembered piece counts of long prompts, so a resent
    /// conversation costs only its new text; 0 = off (default 64MiB; units
    /// as for --max-body-bytes).
    #[arg(long, env = "PREFILL_GUARD_COUNT_CACHE_BYTES", value_name = "BYTES", value_parser = parse_bytes)]
    #[serde(default, deserialize_with = "bytes_setting")]
    pub count_cache_bytes: Option<usize>,
    /// Who may reuse whose remembered counts: `authorization` (per credential,
    /// the default), `header:NAME` (per value of that header) or `none` (all
    /// tenants share; exposes a timing probe, see the README).
    #[arg(
        long,
        env = "PREFILL_GUARD_COUNT_CACHE_PARTITION",
        value_name = "PARTITION"
    )]
    pub count_cache_partition: Option<String>,
    /// When the pod is ready: `all_models` (default: a model that cannot be
    /// judged, one no worker serves say, holds the pod unready) or `any_model`.
    #[arg(long, env = "PREFILL_GUARD_READINESS", value_enum)]
    pub readiness: Option<Readiness>,
    /// Log lines as `human` text (the default) or `json`, one line per event.
    #[arg(long, env = "PREFILL_GUARD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Seconds in-flight requests get to finish after SIGTERM (default 30).
    #[arg(long, env = "PREFILL_GUARD_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// Tokens subtracted from every limit on top (a model's own value wins).
    #[arg(long, env = "PREFILL_GUARD_SAFETY_MARGIN_TOKENS")]
    pub safety_margin_tokens: Option<usize>,
    /// A prefill worker to read max_req_input_len from (GET /server_info); repeat for each
    /// worker. The guard enforces the minimum. The variable takes a comma-separated list.
    #[arg(
        long = "prefill-url",
        env = "PREFILL_GUARD_PREFILL_URLS",
        value_delimiter = ',',
        value_parser = trimmed
    )]
    pub prefill_urls: Option<Vec<String>>,
    /// A decode worker to compare with the prefill workers (GET /server_info); repeat for
    /// each. Settings that differ take the model, or the requests they affect, out of
    /// service. The variable takes a comma-separated list.
    #[arg(
        long = "decode-url",
        env = "PREFILL_GUARD_DECODE_URLS",
        value_delimiter = ',',
        value_parser = trimmed
    )]
    pub decode_urls: Option<Vec<String>>,
    /// Requests that compile a grammar, on a release that leaks an aborted prefill:
    /// `when_backends_match` (default), `refuse` or `forward`.
    #[arg(long, env = "PREFILL_GUARD_GRAMMAR_REQUESTS", value_enum)]
    pub grammar_requests: Option<crate::policy::pd::GrammarRequests>,
    /// Milliseconds between discovery polls (default 30000).
    #[arg(long, env = "PREFILL_GUARD_DISCOVERY_INTERVAL_MS")]
    pub discovery_interval_ms: Option<u64>,
    /// Lower max_model_len in GET /v1/models answers to the guard's limit (default true).
    #[arg(
        long,
        env = "PREFILL_GUARD_REWRITE_MODELS_MAX_LEN",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub rewrite_models_max_len: Option<bool>,
    /// DANGEROUS: forward this exact canonical path to the upstream uninspected (repeat
    /// it). Prompt routes are refused at startup. The variable takes a comma-separated list.
    #[arg(
        long = "allow-route",
        env = "PREFILL_GUARD_ALLOW_ROUTES",
        value_delimiter = ',',
        value_parser = trimmed
    )]
    pub allow_routes: Option<Vec<String>>,
    /// Address of the gRPC listener: Envoy ext_authz (envoy.service.auth.v3), ext_proc
    /// (envoy.service.ext_proc.v3) and grpc.health.v1 (off unless set).
    #[arg(long, env = "PREFILL_GUARD_GRPC_LISTEN")]
    pub grpc_listen: Option<SocketAddr>,
    /// Address of the HTTP authorization listener: Envoy/Istio ext_authz over HTTP and
    /// Traefik ForwardAuth (off unless set). Answers 200 to allow, the native refusal to deny.
    #[arg(long, env = "PREFILL_GUARD_AUTHZ_LISTEN")]
    pub authz_listen: Option<SocketAddr>,
    /// Envoy's `path_prefix` (Istio's `pathPrefix`), stripped from each check request's path;
    /// with `--authz-style traefik`, the path of the ForwardAuth address.
    #[arg(long, env = "PREFILL_GUARD_AUTHZ_PATH_PREFIX")]
    pub authz_path_prefix: Option<String>,
    /// Who calls --authz-listen: envoy (also Istio; default) or traefik (ForwardAuth).
    #[arg(long, env = "PREFILL_GUARD_AUTHZ_STYLE", value_enum)]
    pub authz_style: Option<AuthzStyle>,
    /// Share of allowed requests (0 to 1) counted again and compared with a prefill
    /// worker's /v1/tokenize, off the request path; an undercount takes the model out of
    /// service until a reload (default 0: off; needs --prefill-url).
    #[arg(long, env = "PREFILL_GUARD_VERIFY_SAMPLE_RATE", value_name = "RATE")]
    pub verify_sample_rate: Option<f64>,
    /// Where sampled requests are tokenized (POST /v1/tokenize) when no prefill worker is
    /// discovered: a server of the same build and settings as the prefill workers.
    #[arg(long, env = "PREFILL_GUARD_VERIFY_TOKENIZE_URL", value_name = "URL")]
    pub verify_tokenize_url: Option<String>,
    /// A file holding SGLang's --api-key, sent as a bearer token on the guard's own calls
    /// (discovery, /v1/models, /v1/tokenize); never logged. Clients' requests carry their own.
    #[arg(long, env = "PREFILL_GUARD_SGLANG_API_KEY_FILE", value_name = "PATH")]
    pub sglang_api_key_file: Option<std::path::PathBuf>,
    /// SGLang's --api-key itself (prefer the file: a variable shows in the process table of
    /// whoever can read it).
    #[arg(
        long = "sglang-api-key",
        env = "PREFILL_GUARD_SGLANG_API_KEY",
        hide_env_values = true,
        hide = true
    )]
    pub sglang_api_key: Option<String>,
    /// Several models, each a `[[models]]` table (the file only).
    #[serde(default)]
    #[arg(skip)]
    pub models: Vec<RawModel>,
}

/// One model: how to count its prompts and where its limit comes from.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, Args)]
pub struct RawModel {
    /// The served model name (metrics, logs, client errors). Default with one model: the name its
    /// --prefill-url workers serve, else the tokenizer directory's basename or the Hub id.
    #[arg(long = "served-model-name", env = "PREFILL_GUARD_SERVED_MODEL_NAME")]
    #[serde(alias = "served_model_name")]
    pub name: Option<String>,
    /// Model directory or Hugging Face model id (single-model shorthand).
    #[arg(long, env = "PREFILL_GUARD_TOKENIZER")]
    pub tokenizer: Option<String>,
    /// Hugging Face revision of `--tokenizer` (default main).
    #[arg(long, env = "PREFILL_GUARD_REVISION")]
    pub revision: Option<String>,
    /// SGLang's max_req_input_len of the prefill server: prompts with L >= N are refused.
    #[arg(long, env = "PREFILL_GUARD_MAX_REQ_INPUT_LEN")]
    pub max_req_input_len: Option<usize>,
    /// The prefill server's KV pool (SGLang's max_total_num_tokens); with --context-length.
    #[arg(long, env = "PREFILL_GUARD_PREFILL_POOL_TOKENS")]
    pub prefill_pool_tokens: Option<usize>,
    /// The model's context length (SGLang's context_len); with --prefill-pool-tokens.
    #[arg(long, env = "PREFILL_GUARD_CONTEXT_LENGTH")]
    pub context_length: Option<usize>,
    /// This model's own margin, instead of the top-level one. The flag is
    /// the top-level key: with one model, the two are the same.
    #[arg(skip)]
    pub safety_margin_tokens: Option<usize>,
    /// Multimodal opt-in: tokens charged per image, a configured upper bound
    /// (default: images refused).
    #[arg(long, env = "PREFILL_GUARD_MULTIMODAL_IMAGE_TOKENS")]
    pub multimodal_image_tokens: Option<usize>,
    /// Multimodal opt-in: tokens charged per video, an upper bound (default: refused).
    #[arg(long, env = "PREFILL_GUARD_MULTIMODAL_VIDEO_TOKENS")]
    pub multimodal_video_tokens: Option<usize>,
    /// Multimodal opt-in: tokens charged per audio clip, an upper bound (default: refused).
    #[arg(long, env = "PREFILL_GUARD_MULTIMODAL_AUDIO_TOKENS")]
    pub multimodal_audio_tokens: Option<usize>,
    /// The prefill server's own settings that change prompt ids.
    #[serde(flatten)]
    #[command(flatten)]
    pub server: ServerSettings,
}

/// The prefill server's own settings that change prompt ids, under SGLang's
/// names (`count::serving::SETTINGS`), for deployments without discovery;
/// with it they must agree with what the workers report. `count` and
/// `verify` take them too.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, Args)]
pub struct ServerSettings {
    /// SGLang's --default-chat-template-kwargs (a JSON object; in the file, a table or that JSON).
    #[arg(
        long,
        env = "PREFILL_GUARD_DEFAULT_CHAT_TEMPLATE_KWARGS",
        value_name = "JSON",
        value_parser = json_text
    )]
    pub default_chat_template_kwargs: Option<Value>,
    /// SGLang's --tool-call-parser.
    #[arg(long, env = "PREFILL_GUARD_TOOL_CALL_PARSER")]
    pub tool_call_parser: Option<String>,
    /// SGLang's --reasoning-parser.
    #[arg(long, env = "PREFILL_GUARD_REASONING_PARSER")]
    pub reasoning_parser: Option<String>,
    /// SGLang's --chat-template: a built-in name, or a .jinja file the guard reads at the same path.
    #[arg(long, env = "PREFILL_GUARD_CHAT_TEMPLATE")]
    pub chat_template: Option<String>,
    /// SGLang's --hf-chat-template-name.
    #[arg(long, env = "PREFILL_GUARD_HF_CHAT_TEMPLATE_NAME")]
    pub hf_chat_template_name: Option<String>,
    /// SGLang's --completion-template.
    #[arg(long, env = "PREFILL_GUARD_COMPLETION_TEMPLATE")]
    pub completion_template: Option<String>,
    /// SGLang's --trust-request-chat-template.
    #[arg(
        long,
        env = "PREFILL_GUARD_TRUST_REQUEST_CHAT_TEMPLATE",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub trust_request_chat_template: Option<bool>,
    /// SGLang's --tokenizer-path, stated when the guard's tokenizer is that tokenizer.
    #[arg(long, env = "PREFILL_GUARD_TOKENIZER_PATH")]
    pub tokenizer_path: Option<String>,
    /// SGLang's --model-path (the server picks some conversation templates from it). Unset
    /// without discovery: the guard's tokenizer directory stands for it.
    #[arg(long, env = "PREFILL_GUARD_MODEL_PATH")]
    pub model_path: Option<String>,
    /// The prefill server's SGLang release (its /server_info `version`, e.g. 0.5.11), which decides
    /// how prompts are built. Unset without discovery: any release from 0.4.5 on, every one counted,
    /// the largest count wins.
    #[arg(long, env = "PREFILL_GUARD_SGLANG_VERSION", value_name = "VERSION")]
    pub sglang_version: Option<String>,
    /// An environment value of the SGLang server that changes prompt ids, NAME=VALUE
    /// (repeat it; the variable takes a comma-separated list; in the file, a table).
    #[arg(
        long = "sglang-env",
        env = "PREFILL_GUARD_SGLANG_ENV",
        value_delimiter = ',',
        value_parser = env_value,
        value_name = "NAME=VALUE"
    )]
    #[serde(default, with = "env_table")]
    pub sglang_env: Option<Vec<(String, String)>>,
}

impl RawConfig {
    /// Reads the TOML file. A key the guard does not know is an error (a
    /// typo must not silently leave a setting at its default).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        unknown_keys(&table)?;
        // Parsed again as the typed struct for errors that point at the line.
        toml::from_str(text).map_err(|e| ConfigError(e.to_string()))
    }

    /// `over` wins wherever it sets a value, one key at a time: a flag
    /// never drops a table. Model flags (`--tokenizer`, `--max-req-input-len`,
    /// ...) set those keys of the file's one model, whether the file writes
    /// it at the top level or as a single `[[models]]` entry; with several
    /// `[[models]]` they describe one more model (which then needs a `name`).
    pub fn merge(self, over: RawConfig) -> RawConfig {
        let (model, models) = match (self.models.len(), self.model.is_empty()) {
            (1, true) if !over.model.is_empty() && over.models.is_empty() => {
                let only = self.models[0].clone();
                (RawModel::default(), vec![overlay(&only, &over.model)])
            }
            _ => (
                overlay(&self.model, &over.model),
                if over.models.is_empty() {
                    self.models.clone()
                } else {
                    over.models.clone()
                },
            ),
        };
        RawConfig {
            model,
            models,
            ..overlay(&self, &over)
        }
    }
}

impl RawModel {
    pub fn is_empty(&self) -> bool {
        self == &RawModel::default()
    }

    /// The static observation and environment the server settings make, checked.
    pub fn static_server(&self) -> Result<StaticServer, String> {
        let mut observed = self.server.observed()?;
        if let Some(r) = &self.revision {
            observed.set("revision", Value::String(r.clone()));
        }
        let (env, env_observed) = SglangEnv::parse(
            self.server
                .sglang_env
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )?;
        Ok(StaticServer {
            observed: observed.overlaid(&env_observed),
            env,
        })
    }
}

impl ServerSettings {
    /// The settings as SGLang reports them (`/server_info` keys).
    fn observed(&self) -> Result<Observed, String> {
        let mut observed = Observed::default();
        if let Some(v) = &self.default_chat_template_kwargs {
            let v = match v {
                Value::String(s) => serde_json::from_str(s)
                    .map_err(|e| format!("default_chat_template_kwargs is not JSON: {e}"))?,
                v => v.clone(),
            };
            if !v.is_object() {
                return Err("default_chat_template_kwargs must be a table (a JSON object)".into());
            }
            observed.set("default_chat_template_kwargs", v);
        }
        for (name, value) in [
            ("tool_call_parser", &self.tool_call_parser),
            ("reasoning_parser", &self.reasoning_parser),
            ("chat_template", &self.chat_template),
            ("hf_chat_template_name", &self.hf_chat_template_name),
            ("completion_template", &self.completion_template),
            ("tokenizer_path", &self.tokenizer_path),
            ("model_path", &self.model_path),
            ("version", &self.sglang_version),
        ] {
            if let Some(v) = value {
                observed.set(name, Value::String(v.clone()));
            }
        }
        if let Some(b) = self.trust_request_chat_template {
            observed.set("trust_request_chat_template", Value::Bool(b));
        }
        Ok(observed)
    }
}

/// `over`'s keys where it sets them, else `base`'s: one key at a time, for
/// every field there is, through the same serde form the file has (so a
/// new setting needs no line here).
fn overlay<T: Serialize + DeserializeOwned>(base: &T, over: &T) -> T {
    let mut merged = serde_json::to_value(base).expect("settings serialise");
    let Value::Object(over) = serde_json::to_value(over).expect("settings serialise") else {
        unreachable!("settings are a table")
    };
    for (key, value) in over {
        if !value.is_null() {
            merged[key] = value;
        }
    }
    serde_json::from_value(merged).expect("two valid layers merge into a valid one")
}

/// The keys of the file: every field serde writes for a default value
/// (so the list is the declaration itself), plus the aliases it reads.
fn known_keys<T: Serialize + Default>(aliases: &[&'static str]) -> Vec<String> {
    let Value::Object(keys) = serde_json::to_value(T::default()).expect("settings serialise")
    else {
        unreachable!("settings are a table")
    };
    keys.into_iter()
        .map(|(k, _)| k)
        .chain(aliases.iter().map(|a| a.to_string()))
        .collect()
}

const MODEL_ALIASES: &[&str] = &["served_model_name"];

/// serde cannot refuse unknown keys of a struct it flattens into another
/// (`deny_unknown_fields` and `flatten` do not combine), so the file's keys
/// are checked against the declared ones here, top level and each model.
fn unknown_keys(table: &toml::Table) -> Result<(), ConfigError> {
    let check = |t: &toml::Table, known: &[String], place: &str| -> Result<(), ConfigError> {
        match t.keys().find(|k| !known.contains(k)) {
            Some(k) => Err(ConfigError(format!(
                "unknown key `{k}`{place} (a typo? README \"Configuration\" lists every key; the commented example is config/prefill-guard.toml in the repository)"
            ))),
            None => Ok(()),
        }
    };
    check(table, &known_keys::<RawConfig>(MODEL_ALIASES), "")?;
    if let Some(toml::Value::Array(models)) = table.get("models") {
        let known = known_keys::<RawModel>(MODEL_ALIASES);
        for (i, m) in models.iter().enumerate() {
            if let toml::Value::Table(m) = m {
                check(m, &known, &format!(" in [[models]] #{}", i + 1))?;
            }
        }
    }
    Ok(())
}

/// One item of a comma-separated variable (`PREFILL_GUARD_PREFILL_URLS="a, b"`),
/// without the spaces around it.
pub fn trimmed(item: &str) -> Result<String, String> {
    match item.trim() {
        "" => Err("an empty item in a comma-separated list".into()),
        t => Ok(t.to_string()),
    }
}

/// A flag's JSON text, kept as SGLang's flag keeps it (a string it parses).
fn json_text(text: &str) -> Result<Value, String> {
    Ok(Value::String(text.to_string()))
}

/// `NAME=VALUE` of `--sglang-env`.
fn env_value(item: &str) -> Result<(String, String), String> {
    let item = trimmed(item)?;
    Ok(match item.split_once('=') {
        Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
        None => (item, String::new()),
    })
}

/// `sglang_env`: a table in the file, `NAME=VALUE` pairs on the command line.
mod env_table {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        v: &Option<Vec<(String, String)>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.as_ref()
            .map(|pairs| pairs.iter().cloned().collect::<BTreeMap<_, _>>())
            .serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<(String, String)>>, D::Error> {
        Ok(Option::<BTreeMap<String, String>>::deserialize(d)?.map(|m| m.into_iter().collect()))
    }
}

/// A byte size as operators write it: `33554432`, `32MiB`, `32 MiB`, `64KiB`,
/// `1GiB` (powers of 1024) or `32MB`, `64kB`, `1GB` (powers of 1000).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a byte size (for example 33554432 or 32MiB)"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "`{other}` in `{text}` is not a byte unit (B, KiB, MiB, GiB, kB, MB, GB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// A TOML byte size: a whole number of bytes or a string with a unit.
fn bytes_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Bytes {
        Number(usize),
        Text(String),
    }
    match Option::<Bytes>::deserialize(d)? {
        None => Ok(None),
        Some(Bytes::Number(n)) => Ok(Some(n)),
        Some(Bytes::Text(t)) => parse_bytes(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A file that sets every key, the models' keys in one `[[models]]`
    /// table; the test below checks it does, so it cannot fall behind.
    const EVERY_KEY: &str = r#"
listen = "127.0.0.1:1"
admin_listen = "127.0.0.1:2"
upstream = "http://router:30000"
max_body_bytes = "1MiB"
upstream_connect_timeout_ms = 3
upstream_response_timeout_secs = 4
upstream_idle_timeout_secs = 5
io_threads = 6
count_workers = 7
count_queue = 8
count_queue_timeout_ms = 9
max_inflight_body_bytes = 10485760
header_read_timeout_ms = 11
body_idle_timeout_ms = 12
body_read_timeout_ms = 13
keepalive_idle_timeout_ms = 14
max_connections = 15
max_connections_per_client = 16
exact_counting = true
count_cache_bytes = "2MiB"
count_cache_partition = "header:x-tenant"
readiness = "any_model"
log_format = "json"
shutdown_grace_secs = 17
safety_margin_tokens = 18
prefill_urls = ["http://p1:30000", "http://p2:30000"]
decode_urls = ["http://d1:30000"]
grammar_requests = "refuse"
discovery_interval_ms = 19
rewrite_models_max_len = false
allow_routes = ["/metrics"]
grpc_listen = "127.0.0.1:3"
authz_listen = "127.0.0.1:4"
authz_path_prefix = "/authz"
authz_style = "traefik"
verify_sample_rate = 0.25
verify_tokenize_url = "http://p1:30000"
sglang_api_key_file = "/etc/prefill-guard/sglang-api-key"
sglang_api_key = "k"

[[models]]
name = "m"
tokenizer = "/models/m"
revision = "r1"
max_req_input_len = 100
prefill_pool_tokens = 200
context_length = 300
safety_margin_tokens = 1
multimodal_image_tokens = 20
multimodal_video_tokens = 21
multimodal_audio_tokens = 22
default_chat_template_kwargs = { enable_thinking = false }
tool_call_parser = "qwen25"
reasoning_parser = "qwen3"
chat_template = "chatml"
hf_chat_template_name = "tool_use"
completion_template = "deepseek_coder"
trust_request_chat_template = true
tokenizer_path = "/models/m"
model_path = "/models/m"
sglang_version = "0.5.19"
sglang_env = { SGLANG_DEFAULT_THINKING = "false" }
"#;

    fn every_key() -> RawConfig {
        RawConfig::from_toml(EVERY_KEY).unwrap()
    }

    #[test]
    fn merging_keeps_every_key_of_either_layer() {
        let full = every_key();
        // Nothing is left at its default in the sample.
        let top = serde_json::to_value(&full).unwrap();
        let model_keys = known_keys::<RawModel>(&[]);
        let unset: Vec<_> = top
            .as_object()
            .unwrap()
            .iter()
            // The sample's model is a `[[models]]` table, not the shorthand.
            .filter(|(k, v)| v.is_null() && !model_keys.contains(k))
            .collect();
        assert!(unset.is_empty(), "EVERY_KEY does not set {unset:?}");
        let model = serde_json::to_value(&full.models[0]).unwrap();
        let unset: Vec<_> = model
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.is_null())
            .collect();
        assert!(unset.is_empty(), "EVERY_KEY's model does not set {unset:?}");

        assert_eq!(RawConfig::default().merge(full.clone()), full);
        assert_eq!(full.clone().merge(RawConfig::default()), full);
        // A layer that sets every key wins every key, a model key included.
        let mut other: Value = serde_json::to_value(&full).unwrap();
        other["listen"] = "127.0.0.1:9".into();
        other["verify_sample_rate"] = 0.5.into();
        other["models"][0]["tool_call_parser"] = "llama3".into();
        let other: RawConfig = serde_json::from_value(other).unwrap();
        let merged = full.clone().merge(other.clone());
        assert_eq!(merged, other);
        assert_eq!(
            merged.models[0].server.tool_call_parser.as_deref(),
            Some("llama3")
        );
    }

    #[test]
    fn a_model_flag_sets_one_key_of_the_files_one_model() {
        let cli = crate::cli::Cli::try_parse_from([
            "prefill-guard",
            "serve",
            "--tokenizer",
            "/elsewhere",
            "--sglang-env",
            "SGLANG_DEFAULT_THINKING=true",
            "--listen",
            "127.0.0.1:7",
        ])
        .unwrap();
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("serve")
        };
        let merged = every_key().merge(args.overlay());
        assert_eq!(merged.listen, Some("127.0.0.1:7".parse().unwrap()));
        assert_eq!(merged.models.len(), 1);
        let m = &merged.models[0];
        assert_eq!(m.tokenizer.as_deref(), Some("/elsewhere"));
        assert_eq!(m.name.as_deref(), Some("m"), "the file's other keys stay");
        assert_eq!(m.server.tool_call_parser.as_deref(), Some("qwen25"));
        assert_eq!(
            m.server.sglang_env,
            Some(vec![("SGLANG_DEFAULT_THINKING".into(), "true".into())])
        );
    }

    /// The one declaration is the whole interface: every key of the file is
    /// a `serve` flag and a `PREFILL_GUARD_` variable of the same name, and
    /// there is no flag that is not a key.
    #[test]
    fn every_key_is_a_flag_and_a_variable_of_its_name() {
        let cli = crate::cli::Cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        let mut flags: Vec<(String, String)> = serve
            .get_arguments()
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "config"))
            .map(|a| {
                let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
                (a.get_id().to_string(), env.unwrap_or_default())
            })
            .collect();
        flags.sort();
        let mut keys: Vec<String> = known_keys::<RawConfig>(&[])
            .into_iter()
            .filter(|k| k != "models")
            .collect();
        keys.sort();
        let ids: Vec<&String> = flags.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, keys.iter().collect::<Vec<_>>());
        for (id, env) in &flags {
            let expected = match id.as_str() {
                // SGLang's own flag name.
                "name" => "PREFILL_GUARD_SERVED_MODEL_NAME".to_string(),
                _ => format!("PREFILL_GUARD_{}", id.to_uppercase()),
            };
            assert_eq!(env, &expected, "the variable of `{id}`");
        }
    }

    #[test]
    fn unknown_keys_are_named_with_their_table() {
        let err = RawConfig::from_toml("upstrem = \"x\"").unwrap_err();
        assert!(err.0.contains("unknown key `upstrem`"), "{err}");
        let err =
            RawConfig::from_toml("[[models]]\nname = \"a\"\n[[models]]\ntool_call_parsr = \"x\"\n")
                .unwrap_err();
        assert!(
            err.0.contains("`tool_call_parsr` in [[models]] #2"),
            "{err}"
        );
        // A model key at the top level is the single-model shorthand, and
        // SGLang's name for `name` is read too.
        let raw = RawConfig::from_toml("served_model_name = \"m\"\nreasoning_parser = \"qwen3\"\n")
            .unwrap();
        assert_eq!(raw.model.name.as_deref(), Some("m"));
        assert_eq!(raw.model.server.reasoning_parser.as_deref(), Some("qwen3"));
        // A wrong type still points at its line.
        let err = RawConfig::from_toml("\n\ncount_workers = \"two\"\n").unwrap_err();
        assert!(err.0.contains("line 3"), "{err}");
    }
}
