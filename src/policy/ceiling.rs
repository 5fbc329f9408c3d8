//! A static limit SGLang could not have. Every release computes
//! `max_req_input_len = min(context_len - 1, max_total_num_tokens - 1) - 5`
//! (`managers/tp_worker.py`), so it is at most `context_len - 6`. A static
//! `max_req_input_len` above that is a typo or a context length copied for
//! the limit (the shipped Envoy example once had 32768 for a 32768-token
//! model): enforced, it forwards prompts the prefill server stubs. Such a
//! value is never enforced silently: the model is not ready, and the log,
//! `/readyz` and the 503 say the largest value it could be.
//!
//! The context comes from the configuration's `context_length` (the
//! server's `--context-length`, which may exceed the checkpoint's), else the
//! checkpoint's `config.json` as SGLang reads it, and, in static mode, from
//! the upstream's `GET /v1/models`, whose `max_model_len` is the context the
//! server runs with (read in the background until it answers once).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::policy::{NotServed, Profiles};
use crate::sglang::{self, Api};

/// A stated limit above what the context allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impossible {
    pub stated: usize,
    pub context: usize,
    /// Where the context came from, for the operator.
    pub source: &'static str,
}

impl Impossible {
    /// The largest `max_req_input_len` SGLang has for this context.
    pub fn largest(&self) -> usize {
        self.context.saturating_sub(6)
    }
}

impl std::fmt::Display for Impossible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max_req_input_len = {} is above any limit SGLang has for a {}-token context ({}): \
             at most {}, less with a smaller KV pool; set it to the prefill server's own \
             (its /server_info) or list the prefill workers in prefill_urls",
            self.stated,
            self.context,
            self.source,
            self.largest()
        )
    }
}

/// `Err` when SGLang cannot have `stated` for a `context`-token model.
pub fn check(stated: usize, context: usize, source: &'static str) -> Result<(), Impossible> {
    let why = Impossible {
        stated,
        context,
        source,
    };
    if stated > why.largest() {
        Err(why)
    } else {
        Ok(())
    }
}

/// The static limits to hold against the upstream's `/v1/models`.
pub struct UpstreamContext {
    pub upstream: String,
    /// Each model's name and stated limit.
    pub stated: Vec<(String, usize)>,
    pub profiles: Arc<Profiles>,
    pub interval: Duration,
    pub api: Api,
}

impl UpstreamContext {
    /// Asks until the upstream answers once (a server that is still
    /// loading, or down, is asked again each `interval`).
    pub fn spawn(self: Arc<Self>) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                match self.api.models(&self.upstream).await {
                    Ok(models) => return self.apply(&models),
                    Err(e) => tracing::debug!(
                        upstream = %self.upstream,
                        error = %e,
                        "the upstream's /v1/models did not answer; asking again"
                    ),
                }
                tokio::time::sleep(self.interval).await;
            }
        })
    }

    fn apply(&self, models: &serde_json::Value) {
        let listed = sglang::listed_models(models);
        let single = self.stated.len() == 1;
        for (name, stated) in &self.stated {
            // One configured model counts every request, as a single-model
            // SGLang serves every name: its context is the smallest listed.
            let context = listed
                .iter()
                .filter(|m| single || m.id == *name)
                .filter_map(|m| m.max_model_len)
                .min();
            let Some(context) = context else { continue };
            if let Err(why) = check(*stated, context, "the upstream's /v1/models") {
                tracing::error!(model = %name, why = %why, "static limit refused");
                if let Some(p) = self.profiles.get(name) {
                    let mut p = crate::policy::Profile::clone(&p);
                    p.counter = Err(NotServed::ImpossibleLimit(why));
                    self.profiles.set(name, p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_limit_is_the_context_less_six() {
        assert!(check(32762, 32768, "t").is_ok());
        let why = check(32763, 32768, "t").unwrap_err();
        assert_eq!(why.largest(), 32762);
        assert!(why.to_string().contains("at most 32762"), "{why}");
        assert!(check(32768, 32768, "t").is_err());
        assert!(check(1, 3, "t").is_err(), "no limit fits a 3-token context");
    }
}
