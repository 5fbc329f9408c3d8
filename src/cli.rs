//! The command line: `serve`, `count`, `audit`, `verify`, `demo-model`, `demo` (and the
//! hidden test fixture `pd-sim`). Every `serve` flag is also
//! a `PREFILL_GUARD_*` variable and a key of the TOML file (`config.rs`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use crate::config::trimmed;
use crate::config::{Config, LogFormat, RawConfig, RawModel};
use crate::count::serving::Observed;
use crate::count::{Clock, ModelCounter};
use crate::errors::Reason;
use crate::inspect::{self, json as strict_json, Route};
use crate::load::{counter_for_server, read_server_settings, ServerFlags};
use crate::policy::NotServed;
use crate::reload::{ConfigSource, Runtime};
use crate::server::Listeners;
use crate::signal::shutdown_signal;
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
#[command(
    name = "prefill-guard",
    version,
    about = "Refuses prompts SGLang's prefill pool cannot hold, counted exactly as SGLang counts them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// [`Parser::parse`], except that a bad value read from a `PREFILL_GUARD_*`
    /// variable is blamed on the variable: clap names the flag, which the
    /// operator never typed.
    pub fn parse_naming_variables() -> Self {
        use clap::CommandFactory;
        Self::try_parse().unwrap_or_else(|e| {
            let Some(clap::error::ContextValue::String(arg)) =
                e.get(clap::error::ContextKind::InvalidArg).cloned()
            else {
                e.exit()
            };
            let command = Self::command();
            let typed: Vec<String> = std::env::args().collect();
            let variable = command
                .get_subcommands()
                .flat_map(|c| c.get_arguments())
                .find(|a| {
                    a.get_long()
                        .is_some_and(|l| arg.split([' ', '=']).next() == Some(&format!("--{l}")))
                })
                .and_then(|a| Some((a.get_long()?, a.get_env()?.to_str()?.to_owned())))
                .filter(|(long, var)| {
                    std::env::var_os(var).is_some()
                        && !typed.iter().any(|t| t.starts_with(&format!("--{long}")))
                });
            match variable {
                Some((_, var)) => {
                    let text = e.to_string().replace(
                        &format!("'{arg}'"),
                        &format!("the variable {var} (flag '{arg}')"),
                    );
                    clap::Error::raw(e.kind(), text.trim_start_matches("error: ")).exit()
                }
                None => e.exit(),
            }
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the guard as a reverse proxy in front of SGLang or its router (exit 0 after a
    /// drain, 64 on an invalid configuration, 1 on a failure, 2 on a usage error).
    Serve(Box<ServeArgs>),
    /// Count request bodies offline, one JSON line per file, as SGLang --sglang-version
    /// (default 0.5.23) or the server --server-info names would.
    Count(Box<CountArgs>),
    /// Check an SGLang deployment for the PD tenant leak (exit 0 not exposed, 1 exposed, 2 cannot tell).
    Audit(crate::audit::AuditArgs),
    /// Compare the guard's counts with the upstream's own /v1/tokenize (exit 1 if the guard ever counts fewer).
    Verify(crate::verify::VerifyArgs),
    /// Write a tiny self-contained model directory (for the quick start and tests).
    DemoModel {
        /// Directory to create.
        dir: PathBuf,
    },
    /// Reproduce the PD tenant leak on a simulated SGLang PD pair, then show the guard stops it
    /// (in-process, a few seconds; exit 0 only if both hold).
    Demo(crate::demo::DemoArgs),
    /// TEST AND DEMO FIXTURE, not for production: a simulated SGLang prefill/decode pair
    /// (vulnerable or fixed) on two ports; prints one JSON line with their URLs.
    #[command(hide = true)]
    PdSim(crate::sim::SimArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file; flags and variables override it.
    #[arg(long, env = "PREFILL_GUARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the proxy listener (HTTP/1.1 and h2c).
    #[arg(long, env = "PREFILL_GUARD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address of /metrics, /healthz and /readyz; never the proxy port.
    #[arg(long, env = "PREFILL_GUARD_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Base URL of SGLang or its router.
    #[arg(long, env = "PREFILL_GUARD_UPSTREAM")]
    pub upstream: Option<String>,
    /// Model directory or Hugging Face model id (single-model shorthand).
    #[arg(long, env = "PREFILL_GUARD_TOKENIZER")]
    pub tokenizer: Option<String>,
    /// Hugging Face revision of `--tokenizer`.
    #[arg(long, env = "PREFILL_GUARD_REVISION")]
    pub revision: Option<String>,
    /// The served model name (metrics, logs, client errors). Default with one model: the name its
    /// --prefill-url workers serve, else the tokenizer directory's basename or the Hub id.
    #[arg(long, env = "PREFILL_GUARD_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// SGLang's max_req_input_len of the prefill server: prompts with L >= N are refused.
    #[arg(long, env = "PREFILL_GUARD_MAX_REQ_INPUT_LEN")]
    pub max_req_input_len: Option<usize>,
    /// The prefill server's KV pool (max_total_num_tokens); with --context-length.
    #[arg(long, env = "PREFILL_GUARD_PREFILL_POOL_TOKENS")]
    pub prefill_pool_tokens: Option<usize>,
    /// The model's context length; with --prefill-pool-tokens.
    #[arg(long, env = "PREFILL_GUARD_CONTEXT_LENGTH")]
    pub context_length: Option<usize>,
    /// Tokens subtracted from every limit on top.
    #[arg(long, env = "PREFILL_GUARD_SAFETY_MARGIN_TOKENS")]
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
    /// Largest request body; larger ones get 413 (default 32MiB; units: KiB, MiB, GiB, kB, MB, GB).
    #[arg(long, env = "PREFILL_GUARD_MAX_BODY_BYTES", value_name = "BYTES", value_parser = crate::config::parse_bytes)]
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
    /// Requests that may wait for a counting thread before the guard sheds with 503.
    #[arg(long, env = "PREFILL_GUARD_COUNT_QUEUE")]
    pub count_queue: Option<usize>,
    /// Longest wait for a counting thread before the guard sheds with 503 (default 10000).
    #[arg(long, env = "PREFILL_GUARD_COUNT_QUEUE_TIMEOUT_MS")]
    pub count_queue_timeout_ms: Option<u64>,
    /// Bytes of request bodies buffered at once; beyond it the guard sheds with 503
    /// (default: 8 × max-body-bytes).
    #[arg(long, env = "PREFILL_GUARD_MAX_INFLIGHT_BODY_BYTES", value_name = "BYTES", value_parser = crate::config::parse_bytes)]
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
    #[arg(long, env = "PREFILL_GUARD_COUNT_CACHE_BYTES", value_name = "BYTES", value_parser = crate::config::parse_bytes)]
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
    pub readiness: Option<crate::config::Readiness>,
    /// Log lines as `human` text (the default) or `json`, one line per event.
    #[arg(long, env = "PREFILL_GUARD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, env = "PREFILL_GUARD_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// A prefill worker to read max_req_input_len from (GET /server_info); repeat for each
    /// worker. The guard enforces the minimum. The variable takes a comma-separated list.
    #[arg(
        long = "prefill-url",
        env = "PREFILL_GUARD_PREFILL_URLS",
        value_delimiter = ',',
        value_parser = trimmed
    )]
    pub prefill_urls: Vec<String>,
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
    pub allow_routes: Vec<String>,
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
    pub authz_style: Option<crate::config::AuthzStyle>,
    /// Share of allowed requests (0 to 1) counted again and compared with a prefill
    /// worker's /v1/tokenize, off the request path; an undercount takes the model out of
    /// service until a reload (default 0: off; needs --prefill-url).
    #[arg(long, env = "PREFILL_GUARD_VERIFY_SAMPLE_RATE", value_name = "RATE")]
    pub verify_sample_rate: Option<f64>,
    #[command(flatten)]
    pub server: ServerFlags,
}

impl ServeArgs {
    /// The overlay of flags and variables on top of the file.
    pub fn overlay(&self) -> RawConfig {
        RawConfig {
            listen: self.listen,
            admin_listen: self.admin_listen,
            upstream: self.upstream.clone(),
            max_body_bytes: self.max_body_bytes,
            upstream_connect_timeout_ms: self.upstream_connect_timeout_ms,
            upstream_response_timeout_secs: self.upstream_response_timeout_secs,
            upstream_idle_timeout_secs: self.upstream_idle_timeout_secs,
            io_threads: self.io_threads,
            count_workers: self.count_workers,
            count_queue: self.count_queue,
            count_queue_timeout_ms: self.count_queue_timeout_ms,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            header_read_timeout_ms: self.header_read_timeout_ms,
            body_idle_timeout_ms: self.body_idle_timeout_ms,
            body_read_timeout_ms: self.body_read_timeout_ms,
            keepalive_idle_timeout_ms: self.keepalive_idle_timeout_ms,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            exact_counting: self.exact_counting,
            count_cache_bytes: self.count_cache_bytes,
            count_cache_partition: self.count_cache_partition.clone(),
            readiness: self.readiness,
            log_format: self.log_format,
            shutdown_grace_secs: self.shutdown_grace_secs,
            safety_margin_tokens: self.safety_margin_tokens,
            prefill_urls: (!self.prefill_urls.is_empty()).then(|| self.prefill_urls.clone()),
            discovery_interval_ms: self.discovery_interval_ms,
            rewrite_models_max_len: self.rewrite_models_max_len,
            allow_routes: (!self.allow_routes.is_empty()).then(|| self.allow_routes.clone()),
            grpc_listen: self.grpc_listen,
            authz_listen: self.authz_listen,
            authz_path_prefix: self.authz_path_prefix.clone(),
            authz_style: self.authz_style,
            verify_sample_rate: self.verify_sample_rate,
            model: RawModel {
                name: self.served_model_name.clone(),
                tokenizer: self.tokenizer.clone(),
                revision: self.revision.clone(),
                max_req_input_len: self.max_req_input_len,
                prefill_pool_tokens: self.prefill_pool_tokens,
                context_length: self.context_length,
                safety_margin_tokens: None,
                multimodal_image_tokens: self.multimodal_image_tokens,
                multimodal_video_tokens: self.multimodal_video_tokens,
                multimodal_audio_tokens: self.multimodal_audio_tokens,
                ..self.server.raw()
            },
            models: Vec::new(),
        }
    }

    pub fn load_config(&self) -> Result<Config, crate::config::ConfigError> {
        self.config_source().load()
    }

    /// The file and the overlay, kept so SIGHUP reads the configuration the same way.
    pub fn config_source(&self) -> ConfigSource {
        ConfigSource {
            path: self.config.clone(),
            overlay: self.overlay(),
        }
    }
}

#[derive(Debug, Args)]
pub struct CountArgs {
    /// Model directory or Hugging Face model id.
    #[arg(long)]
    pub tokenizer: String,
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// The route the bodies are sent to. Default: from each body (`messages`:
    /// chat completions, `prompt`: completions, else `/generate`).
    #[arg(long)]
    pub route: Option<String>,
    /// Pins `strftime_now` (YYYY-MM-DD, or YYYY-MM-DDTHH:MM:SS) for reproducible counts.
    #[arg(long)]
    pub date: Option<String>,
    /// Print the chat prompt after preprocessing and template instead of counting.
    #[arg(long)]
    pub print_rendered: bool,
    /// A saved `GET /server_info` answer of the prefill server: count as the
    /// guard in front of that server counts (its settings, checked against the flags).
    #[arg(long, value_name = "FILE", conflicts_with = "server_info_url")]
    pub server_info: Option<PathBuf>,
    /// A saved `GET /model_info` answer (served architecture, effective parsers);
    /// without it, the model directory's config.json.
    #[arg(long, value_name = "FILE", requires = "server_info")]
    pub model_info: Option<PathBuf>,
    /// A prefill server to read `/server_info` and `/model_info` from.
    #[arg(long, value_name = "URL")]
    pub server_info_url: Option<String>,
    #[command(flatten)]
    pub server: ServerFlags,
    /// Request bodies (JSON files); `-` reads one from standard input.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// The counter `count` uses: the model's files under the server settings
/// the flags state, checked against a server's own answer when one is given.
async fn counter_for_count(
    args: &CountArgs,
) -> anyhow::Result<Result<Arc<ModelCounter>, NotServed>> {
    let read = |path: &Path| -> anyhow::Result<Value> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", path.display()))
    };
    let live = match (&args.server_info, &args.server_info_url) {
        (Some(path), _) => {
            let model_info = args.model_info.as_deref().map(read).transpose()?;
            Some((
                path.display().to_string(),
                Observed::from_server(&read(path)?, model_info.as_ref()),
            ))
        }
        (None, Some(url)) => Some(read_server_settings(url).await?),
        (None, None) => None,
    };
    let mut flags = args.server.clone();
    if live.is_none() && flags.sglang_version.is_none() {
        // `count` answers "what does SGLang compute", for the release the
        // goldens pin unless told another; `serve` errs upward instead.
        flags.sglang_version = Some(crate::count::serving::REFERENCE_VERSION.to_string());
    }
    counter_for_server(&args.tokenizer, &args.revision, &flags, live).await
}

fn parse_date(text: &str) -> anyhow::Result<chrono::NaiveDateTime> {
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        return Ok(t);
    }
    let d = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|e| anyhow::anyhow!("--date {text}: expected YYYY-MM-DD ({e})"))?;
    Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// `prefill-guard count`: one JSON line per file, in order. Returns whether
/// every file was counted (the exit status is 1 otherwise).
pub async fn count(args: &CountArgs, out: &mut impl Write) -> anyhow::Result<bool> {
    let forced =
        match &args.route {
            Some(text) => {
                let path = inspect::path::canonical_path(&text.parse()?)
                    .map_err(|e| anyhow::anyhow!("--route {text}: {e}"))?;
                Some(Route::from_path(&path).ok_or_else(|| {
                    anyhow::anyhow!("--route {path}: not a route the guard counts")
                })?)
            }
            None => None,
        };
    let clock = match &args.date {
        Some(d) => Clock::Fixed(parse_date(d)?),
        None => Clock::Local,
    };
    let counter = counter_for_count(args).await?;
    let mut all_ok = true;
    for file in &args.files {
        let counted = counter.clone().map_err(|why| Reason::NotServed {
            model: args.tokenizer.clone(),
            why,
        });
        let name = file.display().to_string();
        let mut route = forced;
        let line = match counted
            .and_then(|c| count_file(&c, forced, &mut route, file, clock, args.print_rendered))
        {
            Ok(mut v) => {
                v["file"] = Value::String(name);
                v
            }
            Err(reason) => {
                all_ok = false;
                let mut error = json!({
                    "code": reason.label(),
                    "status": reason.status().as_u16(),
                    "message": reason.message(route),
                });
                // The operator's own tool: say exactly which setting and why.
                if let Reason::NotServed { why, .. } = &reason {
                    error["detail"] = Value::String(why.to_string());
                }
                json!({ "file": name, "error": error })
            }
        };
        writeln!(out, "{line}")?;
    }
    Ok(all_ok)
}

/// One file's line. `route` is set to the route counted (the forced one,
/// else the one the body's fields say) once the body is read.
fn count_file(
    counter: &ModelCounter,
    forced: Option<Route>,
    route: &mut Option<Route>,
    file: &Path,
    clock: Clock,
    rendered: bool,
) -> Result<Value, Reason> {
    let read = if file.as_os_str() == "-" {
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut body).map(|_| body)
    } else {
        std::fs::read(file)
    };
    let body = read.map_err(|e| Reason::InvalidRequest {
        message: format!("cannot read {}: {e}", file.display()),
        param: None,
    })?;
    let value = Arc::new(strict_json::parse_strict(&body)?);
    let route = *route.insert(forced.unwrap_or_else(|| Route::detect(&value)));
    if rendered {
        if route != Route::ChatCompletions {
            return Err(Reason::InvalidRequest {
                message: "--print-rendered applies to /v1/chat/completions".into(),
                param: None,
            });
        }
        return Ok(json!({ "rendered": counter.render_chat(&value, clock)? }));
    }
    let request = inspect::extract(route, value.clone())?;
    let units = counter.server_units(route, &value, request.units)?;
    let counts = units
        .iter()
        .map(|u| counter.count(u, clock))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if request.batch {
        json!({ "tokens": counts })
    } else {
        json!({ "tokens": counts[0] })
    })
}

/// `prefill-guard serve`: load every model, bind every listener, then serve
/// them ([`crate::server::serve`]) until SIGTERM or Ctrl-C and drain
/// in-flight requests. SIGHUP reloads the configuration from `source` (see
/// [`crate::reload`]).
pub async fn serve(config: Config, source: ConfigSource) -> anyhow::Result<()> {
    // Held to the end of `serve`: dropping it writes the queued log lines.
    let _log = crate::logging::init(config.log_format)?;
    let runtime = Runtime::start(config.clone(), source).await?;
    // Installed before the listeners announce themselves, so a SIGHUP or
    // SIGTERM that follows the "serving" line reloads or drains instead of
    // meeting the default action.
    #[cfg(unix)]
    let sighup = runtime.listen_for_sighup()?;
    let terminate = shutdown_signal();
    // Bound by tokio (SO_REUSEADDR, so a restart can rebind at once).
    let listeners = Listeners {
        proxy: bind("listen", config.listen).await?,
        admin: bind("admin-listen", config.admin_listen).await?,
        grpc: bind_some("grpc-listen", config.grpc_listen).await?,
        authz: bind_some("authz-listen", config.authz.listen).await?,
    };
    let served = crate::server::serve(listeners, runtime, terminate).await;
    #[cfg(unix)]
    sighup.abort();
    served
}

async fn bind(flag: &str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{flag} {addr}: {e}"))
}

async fn bind_some(flag: &str, addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    match addr {
        Some(addr) => bind(flag, addr).await.map(Some),
        None => Ok(None),
    }
}
