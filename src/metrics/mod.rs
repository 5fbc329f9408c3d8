//! Prometheus metrics, served on the admin listener only.
//!
//! Hand-rolled rather than `prometheus-client`: that crate writes only the
//! OpenMetrics text format, whose counter naming (`# TYPE x counter` over
//! `x_total` samples) `promtool check metrics` rejects. This writes the
//! classic text format (0.0.4) that every Prometheus and promtool read.
//!
//! Label values come from closed sets only (known routes or `other`,
//! configured model names, `Reason::label()`), so cardinality stays bounded
//! whatever clients send.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::count::cache::CacheCounters;
use series::{CounterVec, HistogramVec, Level};

mod series;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Powers of two from 16 to 4Mi: prompts range from a few tokens to millions.
fn token_buckets() -> Vec<f64> {
    (4..=22).map(|p| f64::from(1u32 << p)).collect()
}

const COUNT_SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Time to response headers includes SGLang's queueing and, for non-streamed
/// answers, the whole generation: minutes are normal.
const UPSTREAM_SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

pub struct Metrics {
    version: String,
    requests: CounterVec,
    rejections: CounterVec,
    upstream_errors: CounterVec,
    prompt_tokens: HistogramVec,
    count_methods: CounterVec,
    count_seconds: HistogramVec,
    upstream_seconds: HistogramVec,
    in_flight: Level,
    discovery_errors: CounterVec,
    limit_changes: CounterVec,
    reloads: CounterVec,
    count_checks: CounterVec,
    /// Per model: its last sampled check could not be made.
    count_check_failing: std::sync::Mutex<std::collections::BTreeMap<String, bool>>,
    connections_refused: CounterVec,
    client_timeouts: CounterVec,
    /// The count cache's totals (shared by every cache a reload builds).
    pub count_cache: Arc<CacheCounters>,
}

impl Metrics {
    fn render_count_check_failing(&self, out: &mut String) {
        let map = self
            .count_check_failing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        header(
            out,
            "prefill_guard_count_check_failing",
            "1 while a model's sampled count checks cannot be made (its last one failed: no \
             worker, a refused /v1/tokenize, an unreadable answer); the reason is logged at WARN.",
            "gauge",
        );
        for (model, failing) in map.iter() {
            let _ = writeln!(
                out,
                "prefill_guard_count_check_failing{} {}",
                labels(&["model"], &[model], None),
                u8::from(*failing)
            );
        }
    }
}

/// One prefill worker as discovery last saw it, read at scrape time. The
/// `worker` label is a configured URL, so the label set stays bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSample {
    pub worker: String,
    /// The refuse-at value it reported (or its fallback), once it answered.
    pub max_req_input_len: Option<usize>,
    pub max_model_len: Option<usize>,
    /// Unix time of its last good answer.
    pub last_success_seconds: Option<f64>,
    /// Its last poll failed: the value above is the last known one, kept.
    pub stale: bool,
    /// Its last poll succeeded (0 for a worker that never answered).
    pub up: bool,
}

impl Metrics {
    pub fn new(version: impl Into<String>) -> Self {
        Self {
            version: version.into(),
            requests: CounterVec::new(
                "prefill_guard_requests_total",
                "Requests decided, by mode (proxy, ext_authz_http, ext_authz_grpc, ext_proc) and decision.",
                &["mode", "route", "model", "decision"],
            ),
            rejections: CounterVec::new(
                "prefill_guard_rejections_total",
                "Requests the guard refused, by mode and reason.",
                &["mode", "route", "model", "reason"],
            ),
            upstream_errors: CounterVec::new(
                "prefill_guard_upstream_errors_total",
                "Allowed requests the upstream did not answer (502/504 from the guard; proxy mode only), by reason.",
                &["route", "model", "reason"],
            ),
            prompt_tokens: HistogramVec::new(
                "prefill_guard_prompt_tokens",
                "Counted prompt tokens (the largest unit of a batch), allowed and refused.",
                &["mode", "route", "model"],
                token_buckets(),
            ),
            count_methods: CounterVec::new(
                "prefill_guard_count_method_total",
                "Requests counted, by how the count decided: exact (tokenized to the end), bound \
                 (an upper bound under the limit accepted it untokenized; not in prompt_tokens) or \
                 early_exit (tokenizing stopped at the limit; prompt_tokens has the lower bound).",
                &["mode", "route", "model", "method"],
            ),
            count_seconds: HistogramVec::new(
                "prefill_guard_count_duration_seconds",
                "Time spent counting a request's prompt, queueing for a counting thread included.",
                &["mode", "route", "model"],
                COUNT_SECONDS_BUCKETS.to_vec(),
            ),
            upstream_seconds: HistogramVec::new(
                "prefill_guard_upstream_duration_seconds",
                "Time from forwarding a request to the upstream's response headers (proxy mode only).",
                &["route"],
                UPSTREAM_SECONDS_BUCKETS.to_vec(),
            ),
            in_flight: Level::new(),
            discovery_errors: CounterVec::new(
                "prefill_guard_discovery_errors_total",
                "Discovery polls of a prefill worker that failed (the last known value is kept).",
                &["worker"],
            ),
            limit_changes: CounterVec::new(
                "prefill_guard_limit_changes_total",
                "Changes of a model's effective limit, the first known value included.",
                &["model"],
            ),
            count_checks: CounterVec::new(
                "prefill_guard_count_check_total",
                "Sampled allowed requests counted again and compared with a prefill worker's \
                 /v1/tokenize (verify_sample_rate): equal, over (the guard counts more: safe), \
                 under_within_margin (an undercount safety_margin_tokens covers: reported), under \
                 (beyond it: the model is taken out of service), error, or skipped (checks busy).",
                &["model", "result"],
            ),
            count_check_failing: Default::default(),
            reloads: CounterVec::new(
                "prefill_guard_reloads_total",
                "Configuration reloads (SIGHUP), by outcome: success or failure (the old state kept).",
                &["outcome"],
            ),
            connections_refused: CounterVec::new(
                "prefill_guard_connections_refused_total",
                "Connections closed at accept, by listener (proxy, authz) and reason \
                 (max_connections, max_connections_per_client).",
                &["listener", "reason"],
            ),
            client_timeouts: CounterVec::new(
                "prefill_guard_client_timeouts_total",
                "Connections closed because the client was too slow, by listener and phase: head \
                 (header_read_timeout_ms) or idle (keepalive_idle_timeout_ms). Timed-out bodies are \
                 rejections (reason client_timeout).",
                &["listener", "phase"],
            ),
            count_cache: Arc::default(),
        }
    }

    /// `listener`: `proxy` or `authz`; `reason`: the limit's key.
    pub fn connection_refused(&self, listener: &'static str, reason: &'static str) {
        self.connections_refused.inc(&[listener, reason]);
    }

    /// `phase`: `head` or `idle`.
    pub fn client_timeout(&self, listener: &'static str, phase: &'static str) {
        self.client_timeouts.inc(&[listener, phase]);
    }

    pub fn discovery_error(&self, worker: &str) {
        self.discovery_errors.inc(&[worker]);
    }

    pub fn limit_change(&self, model: &str) {
        self.limit_changes.inc(&[model]);
    }

    /// `result`: `equal`, `over`, `under`, `error` or `skipped`.
    pub fn count_check(&self, model: &str, result: &'static str) {
        self.count_checks.inc(&[model, result]);
    }

    /// Whether `model`'s sampled checks currently cannot be made.
    pub fn count_check_failing(&self, model: &str, failing: bool) {
        let mut map = self
            .count_check_failing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.insert(model.to_string(), failing);
    }

    /// `outcome`: `success` or `failure`.
    pub fn reload(&self, outcome: &'static str) {
        self.reloads.inc(&[outcome]);
    }

    /// `mode`: `core::Mode::label()`; `decision`: `core::Record::decision()`
    /// (`allowed` or `refused`). Both closed sets.
    pub fn request(&self, mode: &str, route: &str, model: &str, decision: &'static str) {
        self.requests.inc(&[mode, route, model, decision]);
    }

    pub fn rejection(&self, mode: &str, route: &str, model: &str, reason: &'static str) {
        self.rejections.inc(&[mode, route, model, reason]);
    }

    pub fn upstream_error(&self, route: &str, model: &str, reason: &'static str) {
        self.upstream_errors.inc(&[route, model, reason]);
    }

    pub fn prompt_tokens(&self, mode: &str, route: &str, model: &str, tokens: usize) {
        self.prompt_tokens
            .observe(&[mode, route, model], tokens as f64);
    }

    /// `method`: `CountMethod::label()`, a closed set.
    pub fn count_method(&self, mode: &str, route: &str, model: &str, method: &'static str) {
        self.count_methods.inc(&[mode, route, model, method]);
    }

    pub fn count_duration(&self, mode: &str, route: &str, model: &str, took: Duration) {
        self.count_seconds
            .observe(&[mode, route, model], took.as_secs_f64());
    }

    pub fn upstream_duration(&self, route: &str, took: Duration) {
        self.upstream_seconds.observe(&[route], took.as_secs_f64());
    }

    /// Counts a request as in flight until the returned token is dropped. The
    /// token travels with a streamed response body, so an SSE answer counts
    /// until its last byte is sent or its client goes away.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.raise()
    }

    /// The text exposition. `profiles` are read at scrape time because they
    /// may change while the guard runs (discovery, reload).
    pub fn render(&self, profiles: &[ModelGauges]) -> String {
        self.render_with_workers(profiles, &[], &[])
    }

    /// [`Metrics::render`] plus the prefill workers discovery polls (the
    /// per-worker gauges appear only when there are workers) and the
    /// connections open per listener (`conn::admission::Connections::open`),
    /// state that is not the metrics' own, read at scrape time too.
    pub fn render_with_workers(
        &self,
        profiles: &[ModelGauges],
        workers: &[WorkerSample],
        open_connections: &[(&str, i64)],
    ) -> String {
        let mut out = String::new();
        self.requests.render(&mut out);
        self.rejections.render(&mut out);
        self.upstream_errors.render(&mut out);
        self.prompt_tokens.render(&mut out);
        self.count_methods.render(&mut out);
        self.count_seconds.render(&mut out);
        self.upstream_seconds.render(&mut out);
        header(
            &mut out,
            "prefill_guard_limit_tokens",
            "The effective max_req_input_len per model: prompts with L >= it are refused.",
            "gauge",
        );
        for (model, limit) in profiles.iter().filter_map(|p| Some((&p.model, p.limit?))) {
            let _ = writeln!(
                out,
                "prefill_guard_limit_tokens{} {limit}",
                labels(&["model"], &[model], None)
            );
        }
        render_profiles(&mut out, profiles);
        self.limit_changes.render(&mut out);
        self.discovery_errors.render(&mut out);
        self.reloads.render(&mut out);
        self.count_checks.render(&mut out);
        self.render_count_check_failing(&mut out);
        self.connections_refused.render(&mut out);
        self.client_timeouts.render(&mut out);
        header(
            &mut out,
            "prefill_guard_open_connections",
            "Client connections open, by listener (the admin port is not counted).",
            "gauge",
        );
        for &(listener, open) in open_connections {
            let _ = writeln!(
                out,
                "prefill_guard_open_connections{} {open}",
                labels(&["listener"], &[listener], None)
            );
        }
        if !workers.is_empty() {
            render_workers(&mut out, workers);
        }
        render_count_cache(&mut out, &self.count_cache);
        header(
            &mut out,
            "prefill_guard_in_flight_requests",
            "Requests being handled, streamed responses included.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "prefill_guard_in_flight_requests {}",
            self.in_flight.get()
        );
        header(
            &mut out,
            "prefill_guard_log_lines_dropped_total",
            "Log lines dropped because stderr was not read fast enough (the queue was full); \
             requests are never held for the log.",
            "counter",
        );
        let _ = writeln!(
            out,
            "prefill_guard_log_lines_dropped_total {}",
            crate::logging::dropped_lines()
        );
        header(
            &mut out,
            "prefill_guard_build_info",
            "Always 1; the labels describe the running build.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "prefill_guard_build_info{} 1",
            labels(&["version"], &[&self.version], None)
        );
        out
    }
}

/// The count cache (`count/cache.rs`): pieces of long prompts whose count
/// was remembered or had to be computed, and what the cache holds.
fn render_count_cache(out: &mut String, c: &CacheCounters) {
    let counters = [
        (
            "prefill_guard_count_cache_hits_total",
            "Pieces of long prompts whose exact count was remembered (count_cache_bytes).",
            c.hits.load(Ordering::Relaxed),
        ),
        (
            "prefill_guard_count_cache_misses_total",
            "Pieces of long prompts that had to be tokenized (not remembered in the tenant's partition).",
            c.misses.load(Ordering::Relaxed),
        ),
        (
            "prefill_guard_count_cache_evictions_total",
            "Remembered counts dropped to stay within count_cache_bytes (the largest partition first).",
            c.evictions.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in counters {
        header(out, name, help, "counter");
        let _ = writeln!(out, "{name} {value}");
    }
    let gauges = [
        (
            "prefill_guard_count_cache_bytes",
            "Bytes the count cache holds (charged per entry), at most count_cache_bytes.",
            c.bytes.load(Ordering::Relaxed),
        ),
        (
            "prefill_guard_count_cache_partitions",
            "Tenant partitions with remembered counts.",
            c.partitions.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, value) in gauges {
        header(out, name, help, "gauge");
        let _ = writeln!(out, "{name} {}", value.max(0));
    }
}

/// What `/metrics` shows of one model's profile (`policy::Profiles::gauges`),
/// read at scrape time.
#[derive(Debug, Clone, Default)]
pub struct ModelGauges {
    pub model: String,
    /// The limit in force, if known.
    pub limit: Option<usize>,
    /// Counted and judged now (a limit and a counter).
    pub ready: bool,
    /// No prefill worker serves the name.
    pub unserved: bool,
    /// Each server setting that differs from SGLang's default, as shown.
    pub settings: Vec<(&'static str, String)>,
    /// Why the model cannot be counted: the kind, and the settings at fault.
    pub mismatch: Option<(&'static str, Vec<&'static str>)>,
}

/// Readiness and the server configuration each model is counted under.
/// The label values are setting names (a closed set) and the operator's own
/// server settings (bounded by the configured models), never client input.
fn render_profiles(out: &mut String, profiles: &[ModelGauges]) {
    header(
        out,
        "prefill_guard_models_unserved",
        "Configured models that no prefill worker serves (every worker answered and none lists \
         the name): their requests get 503. See model_ready and the log line naming the model.",
        "gauge",
    );
    let unserved = profiles.iter().filter(|p| p.unserved).count();
    let _ = writeln!(out, "prefill_guard_models_unserved {unserved}");
    header(
        out,
        "prefill_guard_model_ready",
        "1 when the model's requests are counted and judged; 0 while its limit is unknown \
         or its server configuration cannot be counted exactly (see server_config_mismatch).",
        "gauge",
    );
    for p in profiles {
        let ready = u8::from(p.ready);
        let _ = writeln!(
            out,
            "prefill_guard_model_ready{} {ready}",
            labels(&["model"], &[&p.model], None)
        );
    }
    header(
        out,
        "prefill_guard_server_config_info",
        "Always 1: each prefill-server setting that changes prompt ids and differs from SGLang's \
         default, as the model is counted under it.",
        "gauge",
    );
    for p in profiles {
        let model = &p.model;
        for (setting, value) in &p.settings {
            let _ = writeln!(
                out,
                "prefill_guard_server_config_info{} 1",
                labels(
                    &["model", "setting", "value"],
                    &[model, setting, value],
                    None
                )
            );
        }
    }
    header(
        out,
        "prefill_guard_server_config_mismatch",
        "1 for each setting that keeps a model out of service: kind unmodelled (the guard does not \
         model its value), disagrees (workers or the configuration disagree) or undercount (a \
         sampled check counted fewer tokens than the server).",
        "gauge",
    );
    for p in profiles {
        if let Some((kind, settings)) = &p.mismatch {
            for setting in settings {
                let _ = writeln!(
                    out,
                    "prefill_guard_server_config_mismatch{} 1",
                    labels(
                        &["model", "setting", "kind"],
                        &[&p.model, setting, kind],
                        None
                    )
                );
            }
        }
    }
}

fn render_workers(out: &mut String, workers: &[WorkerSample]) {
    type Getter = fn(&WorkerSample) -> Option<f64>;
    let families: [(&str, &str, Getter); 5] = [
        (
            "prefill_guard_discovery_up",
            "1 while a worker's last poll succeeded; 0 for one that fails or never answered (a worker \
             down at start-up has this series, and no other).",
            |w| Some(if w.up { 1.0 } else { 0.0 }),
        ),
        (
            "prefill_guard_discovered_max_req_input_len",
            "The refuse-at value each prefill worker reported (max_req_input_len, or min(C, pool) - 6 without it).",
            |w| w.max_req_input_len.map(|v| v as f64),
        ),
        (
            "prefill_guard_discovered_max_model_len",
            "The context length (max_model_len in /v1/models) each prefill worker reported.",
            |w| w.max_model_len.map(|v| v as f64),
        ),
        (
            "prefill_guard_discovery_last_success_timestamp_seconds",
            "Unix time of each prefill worker's last good answer.",
            |w| w.last_success_seconds,
        ),
        (
            "prefill_guard_discovery_stale",
            "1 while a prefill worker's last poll failed and its last known value is kept.",
            |w| Some(if w.stale { 1.0 } else { 0.0 }),
        ),
    ];
    for (name, help, get) in families {
        header(out, name, help, "gauge");
        for w in workers {
            if let Some(v) = get(w) {
                let _ = writeln!(out, "{name}{} {v}", labels(&["worker"], &[&w.worker], None));
            }
        }
    }
}

/// See [`Metrics::in_flight`].
pub type InFlight = series::Raised;

// === text format ===

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// `{a="x",b="y"}`, with `le` appended for histogram buckets.
fn labels(names: &[&str], values: &[&str], le: Option<&str>) -> String {
    let pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape_label(v)))
        .chain(le.map(|le| format!("le=\"{le}\"")))
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with only a limit and no counter (unmodelled, nothing listed).
    fn test_profile(model: &str, limit: usize) -> ModelGauges {
        ModelGauges {
            model: model.to_string(),
            limit: Some(limit),
            mismatch: Some(("unmodelled", Vec::new())),
            ..ModelGauges::default()
        }
    }

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::new("1.2.3");
        m.request("proxy", "/generate", "m", "refused");
        m.rejection("proxy", "/generate", "m", "context_length_exceeded");
        m.prompt_tokens("proxy", "/generate", "m", 20);
        m.prompt_tokens("proxy", "/generate", "m", 10_000_000);
        let _held = m.in_flight();
        let text = m.render(&[test_profile("m", 100)]);
        assert!(text.contains("prefill_guard_requests_total{mode=\"proxy\",route=\"/generate\",model=\"m\",decision=\"refused\"} 1\n"));
        assert!(text.contains(
            "prefill_guard_rejections_total{mode=\"proxy\",route=\"/generate\",model=\"m\",reason=\"context_length_exceeded\"} 1\n"
        ));
        assert!(text.contains(
            "prefill_guard_prompt_tokens_bucket{mode=\"proxy\",route=\"/generate\",model=\"m\",le=\"16\"} 0\n"
        ));
        assert!(text.contains(
            "prefill_guard_prompt_tokens_bucket{mode=\"proxy\",route=\"/generate\",model=\"m\",le=\"32\"} 1\n"
        ));
        assert!(text.contains("prefill_guard_prompt_tokens_bucket{mode=\"proxy\",route=\"/generate\",model=\"m\",le=\"4194304\"} 1\n"));
        assert!(text.contains(
            "prefill_guard_prompt_tokens_bucket{mode=\"proxy\",route=\"/generate\",model=\"m\",le=\"+Inf\"} 2\n"
        ));
        assert!(text.contains(
            "prefill_guard_prompt_tokens_count{mode=\"proxy\",route=\"/generate\",model=\"m\"} 2\n"
        ));
        assert!(text.contains("prefill_guard_limit_tokens{model=\"m\"} 100\n"));
        assert!(text.contains("prefill_guard_in_flight_requests 1\n"));
        assert!(text.contains("prefill_guard_build_info{version=\"1.2.3\"} 1\n"));
    }

    #[test]
    fn renders_discovery_and_reload_families() {
        let m = Metrics::new("0");
        m.discovery_error("http://p:1");
        m.limit_change("m");
        m.reload("failure");
        let text = m.render_with_workers(
            &[],
            &[
                WorkerSample {
                    worker: "http://p:1".into(),
                    max_req_input_len: Some(284_922),
                    max_model_len: None,
                    last_success_seconds: Some(1_700_000_000.5),
                    stale: true,
                    up: false,
                },
                WorkerSample {
                    worker: "http://p:2".into(),
                    max_req_input_len: None,
                    max_model_len: None,
                    last_success_seconds: None,
                    stale: false,
                    up: false,
                },
            ],
            &[],
        );
        assert!(text.contains("prefill_guard_discovery_errors_total{worker=\"http://p:1\"} 1\n"));
        assert!(text.contains("prefill_guard_limit_changes_total{model=\"m\"} 1\n"));
        assert!(text.contains("prefill_guard_reloads_total{outcome=\"failure\"} 1\n"));
        assert!(text.contains(
            "prefill_guard_discovered_max_req_input_len{worker=\"http://p:1\"} 284922\n"
        ));
        assert!(!text.contains("prefill_guard_discovered_max_req_input_len{worker=\"http://p:2\"}"));
        assert!(text.contains(
            "prefill_guard_discovery_last_success_timestamp_seconds{worker=\"http://p:1\"} 1700000000.5\n"
        ));
        assert!(text.contains("prefill_guard_discovery_stale{worker=\"http://p:1\"} 1\n"));
        assert!(text.contains("prefill_guard_discovery_stale{worker=\"http://p:2\"} 0\n"));
        // A worker that never answered has a series an alert can see.
        assert!(text.contains("prefill_guard_discovery_up{worker=\"http://p:2\"} 0\n"));
        // Without workers, no per-worker families at all.
        assert!(!m.render(&[]).contains("prefill_guard_discovery_stale"));
    }

    #[test]
    fn renders_the_open_connections_it_is_given() {
        let m = Metrics::new("0");
        let text = m.render_with_workers(&[], &[], &[("proxy", 3)]);
        assert!(text.contains("prefill_guard_open_connections{listener=\"proxy\"} 3\n"));
        assert!(!text.contains("listener=\"authz\"} "), "{text}");
    }

    #[test]
    fn in_flight_token_gives_back_on_drop() {
        let m = Metrics::new("0");
        drop(m.in_flight());
        assert!(m
            .render(&[])
            .contains("prefill_guard_in_flight_requests 0\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            labels(&["a"], &["x\"y\\z\nw"], None),
            "{a=\"x\\\"y\\\\z\\nw\"}"
        );
        assert_eq!(labels(&[], &[], None), "");
    }
}
