//! The running state of `serve`, and reloading it without a restart.
//!
//! Everything a request uses lives in one [`App`] (guard with its tokenizers
//! and limits, upstream client, settings) behind an `ArcSwap`. A reload
//! (SIGHUP) re-reads the configuration file, loads every tokenizer again,
//! builds a complete new `App` off to the side and swaps it in with one
//! pointer store. Requests that started before keep the `App` they took and
//! finish on it; new requests get the new one. A reload that fails at any step
//! changes nothing and says why in the log.
//!
//! Two things carry over instead of starting fresh: the metrics (counters
//! keep counting) and what discovery learnt from the prefill workers that are
//! still listed, so a reload never forgets a known limit. A reload that would
//! leave a model without a limit it has now (a newly listed worker that does
//! not answer) is refused, so SIGHUP never turns a ready guard into one that
//! answers 503.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use crate::app::{App, Apps};
use crate::config::{Config, ConfigError, RawConfig};
use crate::core::Guard;
use crate::count::cache::CountCache;
use crate::count::Clock;
use crate::metrics::Metrics;
use crate::policy::ceiling::{self, UpstreamContext};
use crate::policy::discovery::{self, Discovery, ModelSpec};
use crate::policy::pd::{Exposure, PdRules};
use crate::policy::sample::{Oracle, Sampler, SamplerSettings};
use crate::policy::{profile, NotServed, Profile, Profiles};

/// How long one discovery request may take (connect, answer, body).
const DISCOVERY_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the configuration comes from, so a reload reads it the same way:
/// the file again, under the flags and variables given at start.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    pub path: Option<PathBuf>,
    pub overlay: RawConfig,
}

impl ConfigSource {
    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.path.as_ref(), self.overlay.clone())
    }
}

/// The state `serve` runs on: the current [`App`] and its discovery task.
pub struct Runtime {
    apps: Arc<Apps>,
    metrics: Arc<Metrics>,
    source: ConfigSource,
    /// Held for the whole of a reload, so two reloads never interleave.
    current: tokio::sync::Mutex<Current>,
}

struct Current {
    config: Config,
    discovery: Option<Arc<Discovery>>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// A new state, built but not yet serving.
struct Built {
    app: Arc<App>,
    discovery: Option<Arc<Discovery>>,
    /// Static mode: the upstream's `/v1/models` against the stated limits.
    upstream_context: Option<Arc<UpstreamContext>>,
}

impl Built {
    /// Starts what this state runs in the background: discovery, or in
    /// static mode the upstream's context check.
    fn spawn(&self) -> Option<JoinHandle<()>> {
        match (&self.discovery, &self.upstream_context) {
            (Some(d), _) => Some(d.spawn()),
            (None, Some(u)) => Some(u.clone().spawn()),
            (None, None) => None,
        }
    }
}

impl Runtime {
    /// Loads every model and starts discovery (its first round runs at once,
    /// in the background: until it succeeds, models without a static limit
    /// are refused with 503 and `/readyz` says not ready).
    pub async fn start(mut config: Config, source: ConfigSource) -> anyhow::Result<Arc<Self>> {
        name_after_workers(&mut config, None).await;
        let metrics = Arc::new(Metrics::new(env!("CARGO_PKG_VERSION")));
        let built = build(&config, &metrics, None).await?;
        let task = built.spawn();
        Ok(Arc::new(Self {
            apps: Arc::new(ArcSwap::new(built.app)),
            metrics,
            source,
            current: tokio::sync::Mutex::new(Current {
                config,
                discovery: built.discovery,
                task,
            }),
        }))
    }

    /// What the listeners serve; see `server::serve`.
    pub fn apps(&self) -> Arc<Apps> {
        self.apps.clone()
    }

    /// The state new requests get.
    pub fn current(&self) -> Arc<App> {
        self.apps.load_full()
    }

    /// The configuration the current state was built from.
    pub async fn config(&self) -> Config {
        self.current.lock().await.config.clone()
    }

    /// Re-reads the configuration and tokenizers and swaps the new state in.
    /// On failure the running state is kept; the error says why. Both
    /// outcomes are logged and counted (`prefill_guard_reloads_total`).
    pub async fn reload(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut current = self.current.lock().await;
        match self.try_reload(&mut current).await {
            Ok(()) => {
                self.metrics.reload("success");
                let app = self.apps.load();
                tracing::info!(
                    took_ms = started.elapsed().as_millis() as u64,
                    limits = %app
                        .gate
                        .guard
                        .profiles()
                        .limits()
                        .iter()
                        .map(|(model, limit)| format!("{model}={limit}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    "configuration reloaded"
                );
                Ok(())
            }
            Err(e) => {
                self.metrics.reload("failure");
                tracing::error!(error = %format!("{e:#}"), "reload failed; the running configuration is kept");
                Err(e)
            }
        }
    }

    async fn try_reload(&self, current: &mut Current) -> anyhow::Result<()> {
        let mut config = self.source.load()?;
        let running = current.config.models.first().map(|m| m.name.clone());
        name_after_workers(&mut config, running.as_deref()).await;
        warn_restart_only(&current.config, &config);
        let built = build(&config, &self.metrics, current.discovery.as_deref()).await?;
        if let Some(d) = &built.discovery {
            // Newly listed workers have said nothing yet: ask them now rather
            // than swap in a state that knows less than the running one.
            if !d.all_answered() {
                d.poll_once().await;
            }
        }
        let old = self.apps.load();
        // A model the running state has a limit for and the new one has not.
        let lost: Vec<&str> = built
            .app
            .gate
            .guard
            .models_without_limit()
            .into_iter()
            .filter(|m| old.gate.guard.profiles().limit(m).is_some())
            .collect();
        if !lost.is_empty() {
            let pending = built
                .discovery
                .as_ref()
                .map(|d| d.unanswered())
                .unwrap_or_default();
            anyhow::bail!(
                "the new configuration knows no limit for {} (prefill workers that have not answered: {pending:?}); \
                 keeping the running one rather than refusing their requests",
                lost.join(", ")
            );
        }
        if let Some(t) = current.task.take() {
            t.abort();
        }
        current.task = built.spawn();
        self.apps.store(built.app);
        current.discovery = built.discovery;
        current.config = config;
        Ok(())
    }

    /// Reloads on every SIGHUP until the task is dropped. The handler is
    /// installed before this returns, so a SIGHUP sent after `listen_for_sighup`
    /// can never take the default action (terminating the process).
    #[cfg(unix)]
    pub fn listen_for_sighup(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        let rt = self.clone();
        Ok(tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration and tokenizers");
                // The outcome is logged and counted by `reload`.
                let _ = rt.reload().await;
            }
        }))
    }

    /// Stops discovery (at shutdown).
    pub async fn stop(&self) {
        let mut current = self.current.lock().await;
        if let Some(t) = current.task.take() {
            t.abort();
        }
    }
}

/// The prefill workers' base URLs, as `sglang::Api` joins paths onto them.
fn worker_bases(config: &Config) -> Vec<String> {
    bases(&config.prefill_urls)
}

fn bases(urls: &[http::Uri]) -> Vec<String> {
    urls.iter()
        .map(|u| u.to_string().trim_end_matches('/').to_string())
        .collect()
}

/// How long start-up waits for a prefill worker to say what it serves.
const NAME_QUESTION_TIMEOUT: Duration = Duration::from_secs(2);

/// A single model configured without a `name` takes the served name its
/// prefill workers report (`--served-model-name`, SGLang's default being the
/// model path): clients send that name, so metrics, logs and client errors
/// use it rather than the guard's tokenizer directory. When no worker
/// answers in time (or they name different models) the running name is
/// kept on a reload, else the directory's basename, and the log says so.
/// With several models each `name` is required to match a served name anyway.
async fn name_after_workers(config: &mut Config, running: Option<&str>) {
    let (workers, connect) = (worker_bases(config), config.upstream_connect_timeout);
    let [model] = config.models.as_mut_slice() else {
        return;
    };
    if !model.named_by_default || workers.is_empty() {
        return;
    }
    let api = crate::sglang::Api::with_key(
        connect,
        NAME_QUESTION_TIMEOUT,
        config.sglang_api_key.as_ref(),
    );
    let asks = workers.into_iter().map(|url| {
        let api = &api;
        async move {
            let info = api.server_info(&url).await.ok()?;
            let models = api.models(&url).await.ok();
            Some(crate::sglang::served_names(&info, models.as_ref()))
        }
    });
    let answers: Vec<Vec<String>> = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut served: Vec<&String> = answers.iter().flatten().collect();
    served.sort();
    served.dedup();
    match (served.as_slice(), running) {
        ([one], _) => {
            if model.name != **one {
                tracing::info!(model = %one, tokenizer = %model.tokenizer, "model named after its prefill workers' served name");
            }
            model.name = (*one).clone();
        }
        (_, Some(name)) => model.name = name.to_string(),
        ([], None) => tracing::warn!(
            model = %model.name,
            "no prefill worker said what it serves in time; the model is named after its tokenizer until a reload \
             (set `name` to the served name)"
        ),
        (many, None) => tracing::warn!(
            model = %model.name,
            served = %many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(","),
            "the prefill workers serve several names; set `name` to the one clients send"
        ),
    }
}

/// Settings a running process cannot change: bound sockets and the installed logger.
fn warn_restart_only(old: &Config, new: &Config) {
    let mut ignored = Vec::new();
    if old.listen != new.listen {
        ignored.push("listen");
    }
    if old.io_threads != new.io_threads {
        ignored.push("io_threads");
    }
    if old.admin_listen != new.admin_listen {
        ignored.push("admin_listen");
    }
    if old.grpc_listen != new.grpc_listen {
        ignored.push("grpc_listen");
    }
    if old.authz.listen != new.authz.listen {
        ignored.push("authz_listen");
    }
    if old.log_format != new.log_format {
        ignored.push("log_format");
    }
    if !ignored.is_empty() {
        tracing::warn!(
            ?ignored,
            "these settings changed but take effect only after a restart"
        );
    }
}

/// Loads every model's tokenizer and builds an [`App`] with its limits:
/// static ones at once, discovered ones as far as `previous` knew them.
async fn build(
    config: &Config,
    metrics: &Arc<Metrics>,
    previous: Option<&Discovery>,
) -> anyhow::Result<Built> {
    let mut specs = Vec::with_capacity(config.models.len());
    let mut initial = Vec::with_capacity(config.models.len());
    for m in &config.models {
        let started = Instant::now();
        let files = crate::load::load_files(&m.tokenizer, &m.revision)
            .await
            .with_context(|| format!("model `{}`", m.name))?;
        anyhow::ensure!(
            files.tokenizer().is_some(),
            "model `{}`: {} has no tokenizer.json, so its prompts cannot be counted",
            m.name,
            m.tokenizer
        );
        // The configured server settings are the profile until discovery
        // (if any) has heard from every worker.
        let mut counter =
            profile::build_counter(&files, m.media, &m.server.observed, &m.server.env);
        if let Err(why) = stated_limit_possible(m, &files) {
            if config.prefill_urls.is_empty() {
                counter = Err(NotServed::ImpossibleLimit(why));
            } else {
                // A ceiling over discovery: the discovered limit, which is
                // smaller, is the one enforced.
                tracing::warn!(model = %m.name, why = %why, "static ceiling never applies");
            }
        }
        tracing::info!(
            model = %m.name,
            tokenizer = %m.tokenizer,
            static_limit = m.max_req_input_len,
            load_ms = started.elapsed().as_millis() as u64,
            "model loaded"
        );
        if let Err(why) = &counter {
            tracing::warn!(model = %m.name, why = %why, "the configured server settings cannot be counted exactly");
        }
        initial.push((
            m.name.clone(),
            Profile::new(m.max_req_input_len, counter, m.server.observed.clone()).pd(
                PdRules::unknown(
                    Exposure::of(&m.server.observed),
                    config.grammar_requests,
                    profile::NO_DECODE,
                ),
            ),
        ));
        specs.push(ModelSpec {
            name: m.name.clone(),
            static_limit: m.max_req_input_len,
            margin: m.safety_margin_tokens,
            files,
            media: m.media,
            server: m.server.clone(),
        });
    }
    warn_static_assumptions(config);
    let profiles = Arc::new(Profiles::new(initial));
    let discovery = (!config.prefill_urls.is_empty()).then(|| {
        let settings = discovery::Settings {
            workers: worker_bases(config),
            decode_workers: bases(&config.decode_urls),
            api_key: config.sglang_api_key.clone(),
            grammar_requests: config.grammar_requests,
            interval: config.discovery_interval,
            connect_timeout: config.upstream_connect_timeout,
            timeout: DISCOVERY_REQUEST_TIMEOUT,
        };
        Arc::new(Discovery::new(
            &settings,
            specs,
            profiles.clone(),
            metrics.clone(),
            previous,
        ))
    });
    let upstream_context = config.prefill_urls.is_empty().then(|| {
        Arc::new(UpstreamContext {
            upstream: config.upstream.to_string(),
            stated: config
                .models
                .iter()
                .filter_map(|m| Some((m.name.clone(), m.stated_limit?)))
                .collect(),
            profiles: profiles.clone(),
            interval: config.discovery_interval,
            api: crate::sglang::Api::with_key(
                config.upstream_connect_timeout,
                DISCOVERY_REQUEST_TIMEOUT,
                config.sglang_api_key.as_ref(),
            ),
        })
    });
    let names = config.models.iter().map(|m| m.name.clone()).collect();
    let oracle = match (&config.verify_tokenize_url, &discovery) {
        (Some(url), _) => Some(Oracle::Url(
            url.to_string().trim_end_matches('/').to_string(),
        )),
        (None, Some(d)) => Some(Oracle::Workers(d.clone())),
        (None, None) => None,
    };
    let sampler = oracle
        .filter(|_| config.verify_sample_rate > 0.0)
        .map(|oracle| {
            let settings = SamplerSettings {
                rate: config.verify_sample_rate,
                oracle,
                margins: config
                    .models
                    .iter()
                    .map(|m| (m.name.clone(), m.safety_margin_tokens))
                    .collect(),
                api_key: config.sglang_api_key.clone(),
            };
            Arc::new(Sampler::new(settings, profiles.clone(), metrics.clone()))
        });
    let guard = Guard::new(
        names,
        profiles,
        config.count_workers,
        config.count_queue,
        Clock::Local,
    )
    .with_exact_counting(config.exact_counting)
    .with_readiness(config.readiness)
    .with_count_cache(
        (config.count_cache_bytes > 0).then(|| {
            Arc::new(CountCache::new(
                config.count_cache_bytes,
                metrics.count_cache.clone(),
            ))
        }),
        config.count_cache_partition.clone(),
    )
    .with_sampler(sampler)
    .with_queue_timeout(config.count_queue_timeout);
    let app = App::assemble(config, guard, metrics.clone(), discovery.clone())?;
    Ok(Built {
        app: Arc::new(app),
        discovery,
        upstream_context,
    })
}

/// Without discovery, what each model is counted as, said once at start:
/// a setting left at SGLang's default the server does not run is an
/// undercount.
fn warn_static_assumptions(config: &Config) {
    if !config.prefill_urls.is_empty() {
        return;
    }
    for m in &config.models {
        let assumed = m.server.assumed();
        if !assumed.is_empty() {
            tracing::warn!(
                model = %m.name,
                assumed = %assumed.join(","),
                "static configuration: counted as SGLang's defaults for these settings; state each \
                 one the prefill server runs with (a default it does not run is an undercount), or \
                 list prefill_urls"
            );
        }
    }
}

/// A stated limit held against the context the configuration or the
/// checkpoint's `config.json` gives (the upstream's `/v1/models` is asked
/// later, in the background).
fn stated_limit_possible(
    m: &crate::config::ModelConfig,
    files: &crate::count::ModelFiles,
) -> Result<(), ceiling::Impossible> {
    let Some(stated) = m.stated_limit else {
        return Ok(());
    };
    match (m.context_length, files.context_len()) {
        (Some(c), _) => ceiling::check(stated, c, "the configured context_length"),
        (None, Some(c)) => ceiling::check(stated, c, "the checkpoint's config.json"),
        (None, None) => Ok(()),
    }
}
