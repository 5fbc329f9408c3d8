//! Discovery: the limit comes from the live prefill pool.
//!
//! Each listed prefill worker is polled (`GET /server_info`, falling back to
//! `/get_server_info`; `GET /v1/models` for the context length) every
//! `discovery_interval`. A model's effective limit is
//! `min(min over workers of max_req_input_len - safety margin, static limit)`.
//!
//! Fail closed, in three rules:
//! * The minimum is taken only once **every** listed worker has answered: a
//!   worker that never answered could be the smallest, so until then only a
//!   static limit (if any) applies, and without one the model's requests get
//!   503 and `/readyz` says not ready.
//! * A worker that stops answering keeps its last known value (marked stale
//!   in the metrics): the prefill pool it described has not changed because
//!   the guard cannot see it.
//! * A worker without `max_req_input_len` in its answer is counted at
//!   `min(C, max_total_num_tokens) - 6`, SGLang's own formula, and the log says so.
//!
//! Why the workers and not the router: in PD mode smg's `/get_server_info`
//! proxies only the first prefill worker, so behind a router with prefill
//! workers of different sizes it reports one of them, not the smallest.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::task::JoinHandle;

use super::pd::{self, Exposure, GrammarRequests, PdRules};
use super::profile::{self, Counting, NotServed, Profile, Profiles};
use crate::count::serving::StaticServer;
use crate::count::serving::{show, Observed};
use crate::count::{MediaBounds, ModelFiles};
use crate::metrics::{Metrics, WorkerSample};
use crate::sglang::{self, Api, LimitSource};

/// The first quick retry while a worker has never answered.
pub const FIRST_RETRY: Duration = Duration::from_millis(250);

/// Where and how often to poll.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Prefill workers' base URLs (`http://host:port`), as configured.
    pub workers: Vec<String>,
    /// Decode workers' base URLs, compared with the prefill workers.
    pub decode_workers: Vec<String>,
    pub grammar_requests: GrammarRequests,
    /// SGLang's `--api-key`, for `/server_info` behind it.
    pub api_key: Option<crate::sglang::ApiKey>,
    pub interval: Duration,
    pub connect_timeout: Duration,
    /// Bounds each request of a poll as a whole.
    pub timeout: Duration,
}

/// One served model: what discovery combines with the discovered values.
#[derive(Clone)]
pub struct ModelSpec {
    pub name: String,
    /// The configured limit, margin already subtracted.
    pub static_limit: Option<usize>,
    /// Subtracted from the discovered value.
    pub margin: usize,
    pub files: Arc<ModelFiles>,
    pub media: MediaBounds,
    /// The server settings the configuration states.
    pub server: StaticServer,
}

/// What one prefill worker said in its last good answer.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerInfo {
    /// The prefill scheduler's refuse-at value.
    pub max_req_input_len: usize,
    pub source: LimitSource,
    pub max_model_len: Option<usize>,
    pub max_total_num_tokens: Option<usize>,
    /// The model names it serves (to match workers to models when the guard
    /// serves several).
    pub served: Vec<String>,
    pub version: Option<String>,
    /// Its settings that change prompt ids (`/server_info` and `/model_info`).
    pub settings: Observed,
    /// `disaggregation_mode` (`"prefill"`, `"decode"`, `"null"`), if said.
    pub mode: Option<String>,
    /// The [`pd::PD_KEYS`] it publishes, as it answered them.
    pub pd_keys: BTreeMap<&'static str, Value>,
}

/// Which side of a PD pair a worker is listed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Prefill,
    Decode,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

#[derive(Debug, Clone, Default)]
struct WorkerState {
    info: Option<WorkerInfo>,
    last_success: Option<SystemTime>,
    /// Set while the worker's polls fail.
    error: Option<String>,
}

struct Worker {
    url: String,
    role: Role,
    state: Mutex<WorkerState>,
}

impl Worker {
    fn state(&self) -> std::sync::MutexGuard<'_, WorkerState> {
        // A panic while holding the lock cannot leave a half-written state
        // (every write is a whole-field assignment).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub struct Discovery {
    workers: Vec<Worker>,
    models: Vec<ModelSpec>,
    profiles: Arc<Profiles>,
    /// Per model, the settings its counter was last built from, with the
    /// result: a poll that changes nothing rebuilds nothing.
    built: Mutex<Vec<Option<(Observed, Counting)>>>,
    metrics: Arc<Metrics>,
    api: Api,
    interval: Duration,
    grammar_requests: GrammarRequests,
    /// One round at a time: the background loop and a reload's own round
    /// never interleave their writes to `limits`.
    round: tokio::sync::Mutex<()>,
}

impl Discovery {
    /// `previous`: the discovery being replaced (by a reload). Workers it also
    /// polled keep what they last said, so a reload never forgets a limit.
    pub fn new(
        settings: &Settings,
        models: Vec<ModelSpec>,
        profiles: Arc<Profiles>,
        metrics: Arc<Metrics>,
        previous: Option<&Discovery>,
    ) -> Self {
        let listed = (settings.workers.iter().map(|u| (u, Role::Prefill)))
            .chain(settings.decode_workers.iter().map(|u| (u, Role::Decode)));
        let workers = listed
            .map(|(url, role)| {
                let inherited = previous
                    .and_then(|p| p.workers.iter().find(|w| &w.url == url && w.role == role))
                    .map(|w| w.state().clone())
                    .unwrap_or_default();
                Worker {
                    url: url.clone(),
                    role,
                    state: Mutex::new(inherited),
                }
            })
            .collect();
        let built = Mutex::new(vec![None; models.len()]);
        let d = Self {
            workers,
            models,
            profiles,
            built,
            metrics,
            api: Api::with_key(
                settings.connect_timeout,
                settings.timeout,
                settings.api_key.as_ref(),
            ),
            interval: settings.interval,
            grammar_requests: settings.grammar_requests,
            round: tokio::sync::Mutex::new(()),
        };
        // Against what was in force, so a reload that changes nothing logs
        // and counts no limit change.
        d.apply(previous.map(|p| p.profiles.as_ref()));
        d
    }

    /// Polls every worker once (concurrently), records what each said, and
    /// updates the limits.
    pub async fn poll_once(&self) {
        let _round = self.round.lock().await;
        let answers =
            futures_util::future::join_all(self.workers.iter().map(|w| self.fetch(&w.url, w.role)))
                .await;
        for (worker, answer) in self.workers.iter().zip(answers) {
            self.record(worker, answer);
        }
        self.apply(None);
    }

    /// Polls now, then every `interval`, until the handle is aborted. While
    /// a worker has never answered (it is still starting, say), polls again
    /// sooner: after [`FIRST_RETRY`], doubling up to `interval`, so the guard
    /// is ready about a second after its workers rather than an interval later.
    pub fn spawn(self: &Arc<Self>) -> JoinHandle<()> {
        let d = self.clone();
        tokio::spawn(async move {
            let mut retry = FIRST_RETRY;
            loop {
                d.poll_once().await;
                let pause = if d.all_answered() {
                    retry = FIRST_RETRY;
                    d.interval
                } else {
                    let pause = retry.min(d.interval);
                    retry = retry.saturating_mul(2);
                    pause
                };
                tokio::time::sleep(pause).await;
            }
        })
    }

    /// Every listed worker has answered at least once.
    pub fn all_answered(&self) -> bool {
        self.workers.iter().all(|w| w.state().info.is_some())
    }

    /// Workers that never answered, with their last error.
    pub fn unanswered(&self) -> Vec<(String, Option<String>)> {
        self.workers
            .iter()
            .filter_map(|w| {
                let s = w.state();
                s.info.is_none().then(|| (w.url.clone(), s.error.clone()))
            })
            .collect()
    }

    /// The workers that have answered and serve `model` (with one model, all).
    pub fn workers_serving(&self, model: &str) -> Vec<String> {
        let single = self.models.len() == 1;
        self.workers
            .iter()
            .filter(|w| {
                w.role == Role::Prefill
                    && w.state()
                        .info
                        .as_ref()
                        .is_some_and(|i| single || i.served.iter().any(|s| s == model))
            })
            .map(|w| w.url.clone())
            .collect()
    }

    /// Per-worker gauges for `/metrics`.
    pub fn samples(&self) -> Vec<WorkerSample> {
        self.workers
            .iter()
            .map(|w| {
                let s = w.state();
                WorkerSample {
                    worker: w.url.clone(),
                    // A decode worker's limit decides nothing.
                    max_req_input_len: s
                        .info
                        .as_ref()
                        .filter(|_| w.role == Role::Prefill)
                        .map(|i| i.max_req_input_len),
                    max_model_len: s.info.as_ref().and_then(|i| i.max_model_len),
                    last_success_seconds: s.last_success.map(unix_seconds),
                    stale: s.info.is_some() && s.error.is_some(),
                    up: s.info.is_some() && s.error.is_none(),
                }
            })
            .collect()
    }

    async fn fetch(&self, url: &str, role: Role) -> Result<WorkerInfo, String> {
        let info = self.api.server_info(url).await.map_err(|e| e.to_string())?;
        // `/v1/models` gives the effective context length (for the fallback)
        // and the served names; an error there only matters when they are needed.
        let models = self.api.models(url).await;
        let models_value: Option<&Value> = models.as_ref().ok();
        // The served architecture and effective parsers. A build without the
        // endpoint (404 on both names) says nothing; any other failure is a
        // failed poll, so a flapping endpoint never flips the settings.
        let model_info = match self.api.model_info(url).await {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.to_string()),
        };
        let context = sglang::context_length(&info, models_value);
        let limit = sglang::refuse_at(&info, context);
        // A decode worker's limit is not enforced: it need not have one.
        let limit = match role {
            Role::Decode => Some(limit.unwrap_or((0, LimitSource::Reported))),
            Role::Prefill => limit,
        };
        let (max_req_input_len, source) = limit.ok_or_else(|| {
            let why = match &models {
                Err(e) => format!("the context length is unknown ({e})"),
                Ok(_) if context.is_none() => "the context length is unknown".to_string(),
                Ok(_) => "there is no max_total_num_tokens".to_string(),
            };
            format!(
                "{}: no max_req_input_len in the answer, and no fallback: {why}",
                sglang::join(url, "/server_info")
            )
        })?;
        Ok(WorkerInfo {
            max_req_input_len,
            source,
            max_model_len: context,
            max_total_num_tokens: sglang::count_field(&info, "max_total_num_tokens"),
            served: sglang::served_names(&info, models_value),
            version: sglang::str_field(&info, "version").map(str::to_string),
            settings: Observed::from_server(&info, model_info.as_ref()),
            mode: sglang::field(&info, "disaggregation_mode").map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            pd_keys: pd::keys_of(&info),
        })
    }

    fn record(&self, worker: &Worker, answer: Result<WorkerInfo, String>) {
        let mut state = worker.state();
        match answer {
            Ok(info) => {
                if state.info.as_ref() != Some(&info) {
                    log_new_value(&worker.url, state.info.as_ref(), &info);
                }
                if let Some(error) = &state.error {
                    tracing::info!(worker = %worker.url, previous_error = %error, "prefill worker answers again");
                }
                state.info = Some(info);
                state.last_success = Some(SystemTime::now());
                state.error = None;
            }
            Err(error) => {
                self.metrics.discovery_error(&worker.url);
                let kept = state.info.as_ref().map(|i| i.max_req_input_len);
                // Once per outage at WARN; the repeats would only say the same.
                if state.error.is_none() {
                    match kept {
                        Some(kept) => tracing::warn!(worker = %worker.url, %error, kept,
                            "discovery poll failed; keeping the last known max_req_input_len and settings (stale)"),
                        None => tracing::warn!(worker = %worker.url, %error,
                            "discovery poll failed; no max_req_input_len known for this worker yet"),
                    }
                } else {
                    tracing::debug!(worker = %worker.url, %error, "discovery poll failed again");
                }
                state.error = Some(error);
            }
        }
    }

    /// Recomputes every model's profile from what the workers said: the
    /// effective limit, and the counter for the settings they run with.
    /// `in_force`: the profiles requests were decided with until now, when
    /// they are not `self.profiles` (a reload); a change is logged and
    /// counted against them.
    fn apply(&self, in_force: Option<&Profiles>) {
        let said = |role: Role| -> Vec<(&str, Option<WorkerInfo>)> {
            self.workers
                .iter()
                .filter(|w| w.role == role)
                .map(|w| (w.url.as_str(), w.state().info.clone()))
                .collect()
        };
        let (infos, decode) = (said(Role::Prefill), said(Role::Decode));
        let all_answered = infos.iter().all(|(_, i)| i.is_some());
        let single = self.models.len() == 1;
        for (index, model) in self.models.iter().enumerate() {
            // With one model every request is counted with it (as a single-model
            // SGLang does), so every worker applies; with several, a worker
            // applies to the models it serves.
            let serving: Vec<(&str, &WorkerInfo)> = infos
                .iter()
                .filter_map(|(url, i)| Some((*url, i.as_ref()?)))
                .filter(|(_, i)| single || i.served.contains(&model.name))
                .collect();
            let discovered = all_answered
                .then(|| serving.iter().map(|(_, i)| i.max_req_input_len).min())
                .flatten();
            let after_margin = discovered.map(|d| d.saturating_sub(model.margin));
            let limit = match (after_margin, model.static_limit) {
                (Some(d), Some(s)) => Some(d.min(s)),
                (d, s) => d.or(s),
            };
            // Until every worker answered only the configuration speaks, as
            // for the limit.
            let settings = if all_answered && !serving.is_empty() {
                // A worker whose polls fail keeps its last settings: the
                // router may still send it requests, and workers that differ
                // are counted each way, so keeping them can only count more.
                let said: Vec<(&str, &Observed)> =
                    serving.iter().map(|(url, i)| (*url, &i.settings)).collect();
                profile::settings_from_workers(&model.server, &said)
            } else {
                Ok(model.server.observed.clone())
            };
            let counter = self.counter_for(index, model, settings.clone());
            let observed = settings.as_ref().unwrap_or(&model.server.observed);
            let (pd, disagreement) = self.pd_rules(model, single, &serving, &decode, observed);
            let counter = match disagreement {
                Some(d) => Err(NotServed::PdDisagrees(d)),
                None => counter,
            };
            let current = self.profiles.get(&model.name);
            let old = in_force.map_or(current.clone(), |p| p.get(&model.name));
            let unserved = !single && all_answered && serving.is_empty();
            let was_unserved = old.as_ref().is_some_and(|p| p.unserved);
            if unserved && !was_unserved {
                let served: std::collections::BTreeSet<&str> = infos
                    .iter()
                    .filter_map(|(_, i)| i.as_ref())
                    .flat_map(|i| i.served.iter().map(String::as_str))
                    .collect();
                tracing::warn!(
                    model = %model.name,
                    workers_serve = %served.into_iter().collect::<Vec<_>>().join(","),
                    "model not served by any prefill worker: its requests get 503 until one serves it"
                );
            } else if was_unserved && !unserved {
                tracing::info!(model = %model.name, "model served by a prefill worker again");
            }
            let profile = Profile::new(limit, counter, settings.unwrap_or_default())
                .unserved(unserved)
                .pd(pd);
            // A quarantined model stays out of service whatever a poll says
            // (`Profiles::set`): nothing to announce each round.
            if self.profiles.quarantined(&model.name).is_none() {
                log_profile_change(&model.name, old.as_deref(), &profile);
            }
            let old_limit = old.as_ref().and_then(|p| p.limit);
            if old_limit != limit && limit.is_some() {
                self.metrics.limit_change(&model.name);
                tracing::info!(
                    model = %model.name,
                    from = old_limit.map_or_else(|| "unknown".to_string(), |o| o.to_string()),
                    to = limit,
                    discovered = discovered,
                    static_limit = model.static_limit,
                    safety_margin = model.margin,
                    "effective limit changed"
                );
            }
            let unchanged = current.as_ref().is_some_and(|c| {
                c.limit == profile.limit
                    && c.unserved == profile.unserved
                    && c.settings == profile.settings
                    && c.pd == profile.pd
                    && same_counter(&c.counter, &profile.counter)
            });
            if !unchanged {
                self.profiles.set(&model.name, profile);
            }
        }
    }

    /// What `model`'s prefill/decode pair lets through, from the prefill
    /// workers `prefill` (those that serve it) and every decode worker; a
    /// disagreement that takes the whole model out of service.
    fn pd_rules(
        &self,
        model: &ModelSpec,
        single: bool,
        prefill: &[(&str, &WorkerInfo)],
        decode: &[(&str, Option<WorkerInfo>)],
        settings: &Observed,
    ) -> (PdRules, Option<pd::Disagreement>) {
        let unknown =
            |why: &str| PdRules::unknown(Exposure::of(settings), self.grammar_requests, why);
        if decode.is_empty() {
            return (unknown(profile::NO_DECODE), None);
        }
        if let Some((url, _)) = decode.iter().find(|(_, i)| i.is_none()) {
            return (
                unknown(&format!("decode worker {url} has not answered")),
                None,
            );
        }
        let decode: Vec<(&str, &WorkerInfo)> = decode
            .iter()
            .filter_map(|(url, i)| Some((*url, i.as_ref()?)))
            .filter(|(_, i)| single || i.served.contains(&model.name))
            .collect();
        if prefill.is_empty() || decode.is_empty() {
            return (unknown("no prefill and decode pair serves it"), None);
        }
        let misplaced = (prefill.iter().map(|w| (w, "prefill")))
            .chain(decode.iter().map(|w| (w, "decode")))
            .find(|((_, i), role)| i.mode.as_deref() != Some(*role));
        if let Some(((url, i), role)) = misplaced {
            let detail = format!(
                "{url} is listed in {role}_urls but runs disaggregation_mode={}: list each worker \
                 under its own mode",
                i.mode.as_deref().unwrap_or("null")
            );
            let d = pd::Disagreement {
                setting: "disaggregation_mode",
                detail,
            };
            return (unknown("a worker is listed under the wrong mode"), Some(d));
        }
        match pd::compare(&sides(prefill), &sides(&decode)) {
            Err(disagreement) => (unknown("prefill and decode disagree"), Some(disagreement)),
            Ok((grammar, speculative)) => (
                PdRules {
                    exposure: Exposure::of(settings),
                    grammar,
                    speculative,
                    prefill_dflash: prefill.iter().any(|(_, i)| pd::is_dflash(&i.pd_keys)),
                    grammar_requests: self.grammar_requests,
                },
                None,
            ),
        }
    }

    /// The counter for `settings`, rebuilt only when they changed.
    fn counter_for(
        &self,
        index: usize,
        model: &ModelSpec,
        settings: Result<Observed, NotServed>,
    ) -> Counting {
        let settings = settings?;
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, result)) = &built[index] {
            if *seen == settings {
                return result.clone();
            }
        }
        let result =
            profile::build_counter(&model.files, model.media, &settings, &model.server.env);
        built[index] = Some((settings, result.clone()));
        result
    }
}

/// The workers as `pd::compare` reads them.
fn sides<'a>(workers: &'a [(&'a str, &'a WorkerInfo)]) -> Vec<pd::Side<'a>> {
    workers
        .iter()
        .map(|(url, i)| pd::Side {
            url,
            settings: &i.settings,
            keys: &i.pd_keys,
        })
        .collect()
}

/// Two profiles count the same way (the same counter, or the same reason not to).
fn same_counter(a: &Counting, b: &Counting) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => Arc::ptr_eq(x, y),
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

/// One line when a model starts or stops being served, or its settings change.
fn log_profile_change(model: &str, old: Option<&Profile>, new: &Profile) {
    let was = old.map(|p| (p.settings.clone(), p.counter.as_ref().err().cloned()));
    let now = (new.settings.clone(), new.counter.as_ref().err().cloned());
    if was.as_ref() == Some(&now) {
        return;
    }
    let settings: Vec<String> = new
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={}", show(v)))
        .collect();
    let alternatives: Vec<String> = new
        .settings
        .alternatives()
        .iter()
        .map(|alt| {
            alt.iter()
                .map(|(k, v)| format!("{k}={}", show(v)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    match &new.counter {
        Ok(c) if !alternatives.is_empty() => tracing::warn!(
            model,
            encoder = c.encoder().name(),
            settings = %settings.join(" "),
            also = %alternatives.join(" | "),
            "prefill workers run different settings (a rollout?): each prompt is counted each way and \
             the larger count is enforced until they agree"
        ),
        Ok(c) => tracing::info!(
            model,
            encoder = c.encoder().name(),
            settings = %settings.join(" "),
            "serving profile in force"
        ),
        Err(why) => tracing::warn!(
            model,
            kind = why.kind(),
            settings = %why.settings().join(","),
            why = %why,
            "model not served: its server configuration cannot be counted exactly"
        ),
    }
}

fn log_new_value(url: &str, old: Option<&WorkerInfo>, new: &WorkerInfo) {
    let from = old.map_or_else(
        || "unknown".to_string(),
        |o| o.max_req_input_len.to_string(),
    );
    match new.source {
        LimitSource::Reported => tracing::info!(
            worker = %url,
            from,
            max_req_input_len = new.max_req_input_len,
            max_model_len = new.max_model_len,
            max_total_num_tokens = new.max_total_num_tokens,
            served = %new.served.join(","),
            version = new.version.as_deref(),
            "prefill worker limit discovered"
        ),
        LimitSource::Fallback => tracing::warn!(
            worker = %url,
            from,
            max_req_input_len = new.max_req_input_len,
            max_model_len = new.max_model_len,
            max_total_num_tokens = new.max_total_num_tokens,
            served = %new.served.join(","),
            version = new.version.as_deref(),
            "prefill worker limit discovered by the fallback min(C, max_total_num_tokens) - 6: \
             its /server_info has no max_req_input_len (the pool size can overstate SWA and sharded pools)"
        ),
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery(models: Vec<ModelSpec>, workers: &[&str]) -> Discovery {
        let settings = Settings {
            workers: workers.iter().map(|w| w.to_string()).collect(),
            decode_workers: vec![],
            grammar_requests: GrammarRequests::default(),
            api_key: None,
            interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        };
        Discovery::new(
            &settings,
            models,
            Arc::new(Profiles::default()),
            Arc::new(Metrics::new("0")),
            None,
        )
    }

    /// The demo model's files, written once for every test here.
    fn files() -> Arc<ModelFiles> {
        static FILES: std::sync::OnceLock<Arc<ModelFiles>> = std::sync::OnceLock::new();
        FILES
            .get_or_init(|| {
                let dir = std::env::temp_dir().join(format!("pg-discovery-{}", std::process::id()));
                crate::demo::write_demo_model(&dir).expect("demo model");
                Arc::new(ModelFiles::load(&dir).expect("demo model loads"))
            })
            .clone()
    }

    fn info(m: usize, served: &[&str]) -> WorkerInfo {
        WorkerInfo {
            max_req_input_len: m,
            source: LimitSource::Reported,
            max_model_len: None,
            max_total_num_tokens: None,
            served: served.iter().map(|s| s.to_string()).collect(),
            version: None,
            settings: Observed::default(),
            mode: Some("prefill".into()),
            pd_keys: BTreeMap::new(),
        }
    }

    fn spec(name: &str, static_limit: Option<usize>, margin: usize) -> ModelSpec {
        ModelSpec {
            name: name.into(),
            static_limit,
            margin,
            files: files(),
            media: MediaBounds::default(),
            server: StaticServer::default(),
        }
    }

    #[test]
    fn minimum_only_once_every_worker_answered() {
        let d = discovery(vec![spec("m", None, 0)], &["http://a", "http://b"]);
        d.record(&d.workers[0], Ok(info(100, &[])));
        d.apply(None);
        assert_eq!(d.profiles.limit("m"), None, "b could be smaller");
        d.record(&d.workers[1], Ok(info(80, &[])));
        d.apply(None);
        assert_eq!(d.profiles.limit("m"), Some(80));
        // A failure keeps the last known value, marked stale.
        d.record(&d.workers[1], Err("down".into()));
        d.apply(None);
        assert_eq!(d.profiles.limit("m"), Some(80));
        let samples = d.samples();
        assert!(!samples[0].stale && samples[1].stale);
        assert_eq!(samples[1].max_req_input_len, Some(80));
    }

    #[test]
    fn static_limit_and_margin_combine() {
        let d = discovery(
            vec![
                spec("a", Some(50), 10),
                spec("b", None, 10),
                spec("c", Some(7), 0),
            ],
            &["http://w1", "http://w2"],
        );
        // Before discovery: only static limits.
        assert_eq!(
            d.profiles.limits(),
            [("a".to_string(), 50), ("c".to_string(), 7)]
        );
        d.record(&d.workers[0], Ok(info(100, &["a", "b"])));
        d.record(&d.workers[1], Ok(info(40, &["a"])));
        d.apply(None);
        assert_eq!(d.profiles.limit("a"), Some(30), "min(40 - 10, 50)");
        assert_eq!(d.profiles.limit("b"), Some(90), "w2 does not serve b");
        assert_eq!(
            d.profiles.limit("c"),
            Some(7),
            "no worker serves c: static only"
        );
    }

    #[test]
    fn a_replacement_inherits_what_workers_said() {
        let old = discovery(vec![spec("m", None, 0)], &["http://a", "http://b"]);
        old.record(&old.workers[0], Ok(info(100, &[])));
        old.record(&old.workers[1], Ok(info(90, &[])));
        old.apply(None);
        assert_eq!(old.profiles.limit("m"), Some(90));
        let settings = Settings {
            workers: vec!["http://b".into()],
            decode_workers: vec![],
            grammar_requests: GrammarRequests::default(),
            api_key: None,
            interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        };
        let limits = Arc::new(Profiles::default());
        let metrics = Arc::new(Metrics::new("0"));
        let new = Discovery::new(
            &settings,
            vec![spec("m", None, 0)],
            limits.clone(),
            metrics.clone(),
            Some(&old),
        );
        assert!(new.all_answered());
        assert_eq!(limits.limit("m"), Some(90));
        // The limit in force did not change: nothing to count.
        assert!(!metrics
            .render(&[])
            .contains("prefill_guard_limit_changes_total{"));

        // With a margin added, the same replacement is a change.
        let metrics = Arc::new(Metrics::new("0"));
        let _margin = Discovery::new(
            &settings,
            vec![spec("m", None, 5)],
            Arc::new(Profiles::default()),
            metrics.clone(),
            Some(&old),
        );
        assert!(metrics
            .render(&[])
            .contains("prefill_guard_limit_changes_total{model=\"m\"} 1\n"));
    }
}
