//! Continuous verification (`verify_sample_rate`): the `verify` command's
//! comparison run on a sample of live traffic, off the request path. It
//! serves the limit policy: a model whose counts fall short of the server's
//! beyond its `safety_margin_tokens` is taken out of service
//! ([`Profiles::quarantine`]), since every limit the guard applies to it
//! would be too lax.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::count::{Clock, ModelCounter, Unit};
use crate::metrics::Metrics;
use crate::sglang::{chat_tokenize_body, text_tokenize_body, tokenize_count, Api, ApiKey};

use super::discovery::Discovery;
use super::Profiles;

/// Where sampled requests are tokenized.
pub enum Oracle {
    /// The discovered prefill workers serving the model, in turn.
    Workers(Arc<Discovery>),
    /// `verify_tokenize_url`: a server of the prefill workers' build and
    /// settings, for a guard without discovery.
    Url(String),
}

/// What the runtime sampler is built from.
pub struct SamplerSettings {
    /// The share of allowed requests checked, in `[0, 1]`.
    pub rate: f64,
    pub oracle: Oracle,
    /// Each model's `safety_margin_tokens`: an undercount within it is
    /// reported, not taken out of service (the margin already covers it).
    pub margins: HashMap<String, usize>,
    pub api_key: Option<ApiKey>,
}

/// Continuous verification (`verify_sample_rate`): a share of allowed
/// requests counted again off the request path and compared with the
/// server's own `/v1/tokenize`.
pub struct Sampler {
    rate: f64,
    api: Api,
    oracle: Oracle,
    margins: HashMap<String, usize>,
    profiles: Arc<Profiles>,
    metrics: Arc<Metrics>,
    /// Checks in flight at once; a sample that finds none free is skipped.
    slots: Arc<tokio::sync::Semaphore>,
    /// Where checks run: the admin runtime, never a proxy loop.
    handle: tokio::runtime::Handle,
    rng: std::sync::atomic::AtomicU64,
    turn: std::sync::atomic::AtomicUsize,
    /// Models whose last check could not be made, and why: a state change
    /// is logged once, not every sample.
    failing: std::sync::Mutex<HashMap<String, String>>,
}

/// At most this many sampled checks run at once.
pub const SAMPLE_CONCURRENCY: usize = 2;
/// Each sampled `/v1/tokenize` call may take this long.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Sampler {
    /// Call on the runtime the checks should run on.
    pub fn new(settings: SamplerSettings, profiles: Arc<Profiles>, metrics: Arc<Metrics>) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Self {
            rate: settings.rate,
            api: Api::with_key(SAMPLE_TIMEOUT, SAMPLE_TIMEOUT, settings.api_key.as_ref()),
            oracle: settings.oracle,
            margins: settings.margins,
            profiles,
            metrics,
            slots: Arc::new(tokio::sync::Semaphore::new(SAMPLE_CONCURRENCY)),
            handle: tokio::runtime::Handle::current(),
            rng: std::sync::atomic::AtomicU64::new(seed),
            turn: Default::default(),
            failing: Default::default(),
        }
    }

    /// Whether this request is checked (decided before counting, so the
    /// units are kept only for the sampled ones).
    pub fn pick(&self) -> bool {
        use std::sync::atomic::Ordering;
        // xorshift64: sampling needs no more than a fair coin.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64 <= self.rate && self.rate > 0.0
    }

    /// Checks an allowed request's units in the background. `request_id`
    /// goes into every line it logs, to reproduce a finding with.
    pub fn check(
        self: &Arc<Self>,
        model: &str,
        counter: Arc<ModelCounter>,
        units: Vec<Unit>,
        request_id: Option<Arc<str>>,
    ) {
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            self.metrics.count_check(model, "skipped");
            return;
        };
        let me = self.clone();
        let model = model.to_string();
        self.handle.spawn(async move {
            let _permit = permit;
            let id = request_id.as_deref().unwrap_or("");
            for unit in units {
                me.check_unit(&model, &counter, unit, id).await;
            }
        });
    }

    fn targets(&self, model: &str) -> Vec<String> {
        match &self.oracle {
            Oracle::Workers(d) => d.workers_serving(model),
            Oracle::Url(url) => vec![url.clone()],
        }
    }

    async fn check_unit(&self, model: &str, counter: &Arc<ModelCounter>, unit: Unit, id: &str) {
        use std::sync::atomic::Ordering;
        let body = match &unit {
            Unit::Chat(body) => chat_tokenize_body(body),
            Unit::Text(text) => text_tokenize_body(Some(model), text),
            // Ids are counted as given; other shapes have no tokenize form.
            _ => return,
        };
        let workers = self.targets(model);
        let Some(worker) = workers
            .get(self.turn.fetch_add(1, Ordering::Relaxed) % workers.len().max(1))
            .cloned()
        else {
            return self.failed(
                model,
                "no prefill worker serving the model has answered".into(),
            );
        };
        let exact = {
            let counter = counter.clone();
            tokio::task::spawn_blocking(move || counter.count(&unit, Clock::Local)).await
        };
        let Ok(Ok(guard)) = exact else {
            return self.failed(model, "the guard could not count the sample".into());
        };
        let sglang = match self.api.tokenize(&worker, &body).await {
            Ok(answer) => tokenize_count(&answer)
                .ok_or_else(|| format!("{worker}/v1/tokenize answered without a count")),
            Err(e) => Err(e.to_string()),
        };
        let sglang = match sglang {
            Ok(n) => n,
            Err(why) => return self.failed(model, why),
        };
        self.works(model);
        self.judge(model, guard, sglang, &worker, id);
    }

    /// An undercount within the model's margin is reported (the margin was
    /// set for it); beyond it the model is taken out of service.
    fn judge(&self, model: &str, guard: usize, sglang: usize, worker: &str, id: &str) {
        let margin = self.margins.get(model).copied().unwrap_or(0);
        let result = match guard.cmp(&sglang) {
            std::cmp::Ordering::Equal => "equal",
            std::cmp::Ordering::Greater => "over",
            std::cmp::Ordering::Less if sglang - guard <= margin => "under_within_margin",
            std::cmp::Ordering::Less => "under",
        };
        self.metrics.count_check(model, result);
        match result {
            "under_within_margin" => tracing::warn!(
                %model, guard, sglang, margin, %worker, request_id = %id,
                "the guard undercounted a sampled request within safety_margin_tokens: still safe, \
                 but report it (run `prefill-guard verify` with the body that reproduces it)"
            ),
            "under" => {
                let why = format!(
                    "a sampled request (x-request-id {id}) counted {guard} tokens by the guard and \
                     {sglang} by {worker}, more than safety_margin_tokens ({margin}) apart"
                );
                tracing::error!(
                    %model, guard, sglang, margin, %worker, request_id = %id,
                    "the guard undercounted a sampled request: the model is out of service until a \
                     reload (run `prefill-guard verify` with the bodies that reproduce it, then fix \
                     or report)"
                );
                self.profiles.quarantine(model, why);
            }
            _ => {}
        }
    }

    /// A check that could not be made: counted, and logged at WARN once
    /// per change of reason (a 401 from an unset `--api-key` would
    /// otherwise fail every check silently).
    fn failed(&self, model: &str, why: String) {
        self.metrics.count_check(model, "error");
        self.metrics.count_check_failing(model, true);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if failing.get(model) != Some(&why) {
            tracing::warn!(%model, error = %why, "continuous verification cannot check this model's counts");
            failing.insert(model.to_string(), why);
        }
    }

    fn works(&self, model: &str) {
        self.metrics.count_check_failing(model, false);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = failing.remove(model) {
            tracing::info!(%model, previous_error = %why, "continuous verification works again");
        }
    }
}
