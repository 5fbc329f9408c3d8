//! The serving profile of each model: everything besides its files that
//! decides how its requests are counted and judged — the limit, the
//! counter built for the server's configuration (or why the model is not
//! served), and the settings that configuration was resolved from.
//!
//! Resolved in one place (static configuration at build, discovery on each
//! poll, `verify_sample_rate` on an undercount) and read once per request:
//! a request takes one [`Profile`] snapshot and is counted and judged with
//! it, so a profile that changes mid-request never mixes two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use crate::count::serving::{
    needs_acknowledgement, show, Observed, ServerConfig, SglangEnv, StaticServer, Unmodelled,
};
use crate::count::{MediaBounds, ModelCounter, ModelFiles};
use crate::policy::pd::{Exposure, GrammarRequests, PdRules};

/// A model's counter, or why it has none.
pub type Counting = Result<Arc<ModelCounter>, NotServed>;

/// The counter for `files` under the server settings `observed` (with the
/// environment values `env`), or why the model cannot be served.
pub fn build_counter(
    files: &Arc<ModelFiles>,
    media: MediaBounds,
    observed: &Observed,
    env: &SglangEnv,
) -> Counting {
    let configs = std::iter::once(observed)
        .chain(observed.alternatives())
        .map(|o| ServerConfig::resolve(o, env).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(NotServed::Unmodelled)?;
    let mut counter =
        ModelCounter::for_servers(files.clone(), configs).map_err(NotServed::Unmodelled)?;
    counter.set_media_bounds(media);
    Ok(Arc::new(counter))
}

/// Why a model's requests are not counted. Each is a 503: the guard, not
/// the client, has to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotServed {
    /// The server runs with settings the guard does not model.
    Unmodelled(Vec<Unmodelled>),
    /// Two prefill workers, or the configuration and a worker, state different
    /// values of a setting that changes counts.
    Disagrees {
        setting: &'static str,
        /// Who says what, for the log and the client's message.
        detail: String,
    },
    /// A sampled verification found the guard counting fewer tokens than
    /// the server: a possible leak, so the model stays out of service until
    /// a reload.
    Undercount(String),
    /// A static `max_req_input_len` above the largest SGLang computes for
    /// the model's context: enforcing it would forward prompts the prefill
    /// server stubs (`policy::ceiling`).
    ImpossibleLimit(crate::policy::ceiling::Impossible),
    /// A prefill and a decode worker build the model's prompts differently
    /// (or one runs in the other's mode): decode's tail pages would be
    /// stale (`policy::pd`).
    PdDisagrees(crate::policy::pd::Disagreement),
}

impl NotServed {
    /// The setting at fault, for the metric label (`count_check` for an undercount).
    pub fn settings(&self) -> Vec<&'static str> {
        match self {
            NotServed::Unmodelled(list) => list.iter().map(|u| u.setting).collect(),
            NotServed::Disagrees { setting, .. } => vec![setting],
            NotServed::Undercount(_) => vec!["count_check"],
            NotServed::ImpossibleLimit(_) => vec!["max_req_input_len"],
            NotServed::PdDisagrees(d) => vec![d.setting],
        }
    }

    /// The `kind` label of `prefill_guard_server_config_mismatch`.
    pub fn kind(&self) -> &'static str {
        match self {
            NotServed::Unmodelled(_) => "unmodelled",
            NotServed::Disagrees { .. } => "disagrees",
            NotServed::Undercount(_) => "undercount",
            NotServed::ImpossibleLimit(_) => "impossible_limit",
            NotServed::PdDisagrees(_) => "pd_disagrees",
        }
    }
}

impl std::fmt::Display for NotServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotServed::Unmodelled(list) => {
                let parts: Vec<String> = list.iter().map(ToString::to_string).collect();
                write!(f, "{}", parts.join("; "))
            }
            NotServed::Disagrees { detail, .. } => write!(f, "{detail}"),
            NotServed::Undercount(detail) => write!(f, "{detail}"),
            NotServed::ImpossibleLimit(why) => write!(f, "{why}"),
            NotServed::PdDisagrees(d) => write!(f, "{}", d.detail),
        }
    }
}

/// The settings a model is counted under when its workers have answered:
/// theirs, which must agree with each other and with every setting the
/// configuration states; the configuration adds what no server publishes
/// (environment values).
pub fn settings_from_workers(
    configured: &StaticServer,
    serving: &[(&str, &Observed)],
) -> Result<Observed, NotServed> {
    let (first_url, first) = serving[0];
    // Workers that disagree (a rolling restart with new flags) are each
    // counted for, as workers on different releases are: the larger count
    // wins. `version` is merged below.
    let mut variants: Vec<&Observed> = vec![first];
    for (_, other) in &serving[1..] {
        let same = |v: &&Observed| v.differences(other).iter().all(|s| *s == "version");
        if !variants.iter().any(same) {
            variants.push(other);
        }
    }
    let mut versions: Vec<serde_json::Value> = Vec::new();
    for (_, o) in serving {
        if let Some(v) = o.get("version").filter(|v| !versions.contains(v)) {
            versions.push(v.clone());
        }
    }
    let with_versions = |o: &Observed| {
        let mut o = o.clone();
        if versions.len() > 1 {
            o.set("version", serde_json::Value::Array(versions.clone()));
        }
        o
    };
    let merged = with_versions(first)
        .with_alternatives(variants[1..].iter().map(|o| with_versions(o)).collect());
    for variant in std::iter::once(&merged).chain(merged.alternatives()) {
        check_variant(configured, first_url, variant)?;
    }
    // The configuration adds what no server publishes, to every variant.
    let alternatives = merged
        .alternatives()
        .iter()
        .map(|o| o.overlaid(&configured.observed))
        .collect();
    Ok(merged
        .overlaid(&configured.observed)
        .with_alternatives(alternatives))
}

/// One variant of the workers' settings against the configuration: a value
/// the configuration states must be the server's, and settings that load
/// files must be stated (the guard needs the same files).
fn check_variant(configured: &StaticServer, url: &str, live: &Observed) -> Result<(), NotServed> {
    if let Some(setting) = configured.observed.contradicted_by(live).first() {
        let stated = configured
            .observed
            .get(setting)
            .map_or("(default)".to_string(), show);
        let actual = live.get(setting).map_or("(default)".to_string(), show);
        return Err(NotServed::Disagrees {
            setting,
            detail: format!(
                "the guard is configured with {setting} = {stated}, but the prefill worker {url} runs with {actual}; \
                 remove the setting from the guard's configuration or change the server"
            ),
        });
    }
    let unacknowledged: Vec<Unmodelled> = live
        .iter()
        .filter(|(name, _)| needs_acknowledgement(name) && !configured.observed.is_set(name))
        .map(|(name, value)| Unmodelled {
            setting: name,
            value: show(value),
            why: format!(
                "the server loads its tokenizer and template from there; point the guard's tokenizer at the \
                 same files and set {name} to the same value"
            ),
        })
        .collect();
    if unacknowledged.is_empty() {
        Ok(())
    } else {
        Err(NotServed::Unmodelled(unacknowledged))
    }
}

/// Why decode's settings are unknown when no decode worker is read.
pub const NO_DECODE: &str = "no decode worker is read: list them in decode_urls";

/// One model's profile, as requests read it.
#[derive(Clone)]
pub struct Profile {
    /// `max_req_input_len` in force (margin subtracted): refused at `L >= limit`.
    /// `None` while no limit is known.
    pub limit: Option<usize>,
    /// The counter for the server's configuration, or why there is none.
    pub counter: Counting,
    /// The settings the configuration was resolved from (only those that
    /// differ from SGLang's defaults).
    pub settings: Observed,
    /// Every prefill worker answered and none lists this model among its
    /// served names (a misspelt `name`, or a worker not yet configured).
    pub unserved: bool,
    /// What the prefill/decode pair lets through beyond length.
    pub pd: PdRules,
}

impl Profile {
    pub fn new(
        limit: Option<usize>,
        counter: Result<Arc<ModelCounter>, NotServed>,
        settings: Observed,
    ) -> Self {
        let pd = PdRules::unknown(
            Exposure::of(&settings),
            GrammarRequests::default(),
            NO_DECODE,
        );
        Self {
            limit,
            counter,
            settings,
            unserved: false,
            pd,
        }
    }

    /// Sets what the prefill/decode pair lets through.
    pub fn pd(mut self, pd: PdRules) -> Self {
        self.pd = pd;
        self
    }

    /// Marks the model as served by no prefill worker.
    pub fn unserved(mut self, unserved: bool) -> Self {
        self.unserved = unserved;
        self
    }

    /// Why the model cannot serve now, if it cannot.
    pub fn not_ready(&self) -> Option<String> {
        match (&self.counter, self.limit) {
            (Err(e), _) => Some(format!("{}: {e}", e.kind())),
            (Ok(_), None) if self.unserved => Some(
                "no prefill worker serves this name (compare `name` with the workers' served names)"
                    .into(),
            ),
            (Ok(_), None) => Some("no prompt limit known".into()),
            (Ok(_), Some(_)) => None,
        }
    }
}

/// Every model's profile, swapped whole on change.
#[derive(Default)]
pub struct Profiles {
    by_model: ArcSwap<HashMap<String, Arc<Profile>>>,
    /// Models an undercount took out of service, kept across discovery
    /// rounds (they rebuild profiles) until a reload builds new `Profiles`.
    quarantine: Mutex<HashMap<String, String>>,
}

impl Profiles {
    pub fn new(initial: impl IntoIterator<Item = (String, Profile)>) -> Self {
        Self {
            by_model: ArcSwap::from_pointee(
                initial.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
            ),
            quarantine: Mutex::default(),
        }
    }

    /// The profile a request of `model` is decided with.
    pub fn get(&self, model: &str) -> Option<Arc<Profile>> {
        self.by_model.load().get(model).cloned()
    }

    /// The limit in force, if one is known.
    pub fn limit(&self, model: &str) -> Option<usize> {
        self.by_model.load().get(model).and_then(|p| p.limit)
    }

    /// Replaces `model`'s profile (a quarantined model stays out of service).
    pub fn set(&self, model: &str, mut profile: Profile) {
        if let Some(why) = self.quarantined(model) {
            profile.counter = Err(NotServed::Undercount(why));
        }
        let mut next = HashMap::clone(&self.by_model.load());
        next.insert(model.to_string(), Arc::new(profile));
        self.by_model.store(Arc::new(next));
    }

    /// Sets `model`'s limit, keeping the rest of its profile.
    pub fn set_limit(&self, model: &str, limit: usize) {
        if let Some(p) = self.get(model) {
            let mut p = Profile::clone(&p);
            p.limit = Some(limit);
            self.set(model, p);
        }
    }

    /// Takes `model` out of service until the next reload.
    pub fn quarantine(&self, model: &str, why: String) {
        self.quarantine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(model.to_string(), why);
        if let Some(p) = self.get(model) {
            self.set(model, Profile::clone(&p));
        }
    }

    /// Why `model` is out of service until a reload, if it is.
    pub fn quarantined(&self, model: &str) -> Option<String> {
        self.quarantine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
            .cloned()
    }

    /// `(model, limit)` of every model with a known limit, sorted.
    pub fn limits(&self) -> Vec<(String, usize)> {
        let mut v: Vec<_> = self
            .by_model
            .load()
            .iter()
            .filter_map(|(k, p)| Some((k.clone(), p.limit?)))
            .collect();
        v.sort();
        v
    }

    /// Every model's profile, sorted by name (for `/metrics` and readiness).
    pub fn snapshot(&self) -> Vec<(String, Arc<Profile>)> {
        let mut v: Vec<_> = self
            .by_model
            .load()
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Every model's profile as `/metrics` shows it.
    pub fn gauges(&self) -> Vec<crate::metrics::ModelGauges> {
        self.snapshot()
            .into_iter()
            .map(|(model, p)| crate::metrics::ModelGauges {
                ready: p.not_ready().is_none(),
                limit: p.limit,
                unserved: p.unserved,
                settings: p
                    .settings
                    .iter()
                    .map(|(s, v)| (s, crate::count::serving::show(v)))
                    .collect(),
                mismatch: p
                    .counter
                    .as_ref()
                    .err()
                    .map(|why| (why.kind(), why.settings())),
                model,
            })
            .collect()
    }

    /// The models that cannot serve now, with why (`Guard::readiness`, which
    /// `/readyz` and gRPC health read).
    pub fn not_ready(&self) -> Vec<(String, String)> {
        self.snapshot()
            .into_iter()
            .filter_map(|(m, p)| p.not_ready().map(|why| (m, why)))
            .collect()
    }
}
