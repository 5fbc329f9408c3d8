//! `prefill-guard verify`: proves, before going live, that the guard counts
//! each request body as the server does. For every body it compares the
//! guard's count with the upstream's own `POST /v1/tokenize`
//! (sglang-semantics §10): chat bodies are sent as they are
//! (`TokenizeRequest` is `extra="allow"` and runs the same `_process_messages`
//! as a chat completion), texts as `{"prompt": ..., "add_special_tokens": true}`,
//! which matches `tokenizer(text)`. Token ids and embeddings are counted as
//! given on both sides and are not sent.
//!
//! Exit status: 1 if the guard ever counted fewer tokens than SGLang (a
//! prompt at the limit would pass the guard and still be stubbed upstream),
//! else 2 if some body could not be compared, else 0. Counting more is
//! reported but safe: the guard only refuses a little early.
//!
//! Known caveats of the oracle: it does not expand media, and it does not pop
//! `reasoning_effort` out of `chat_template_kwargs` as a chat completion does.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::count::{Clock, ModelCounter, Unit};
use crate::errors::Reason;
use crate::inspect::{self, json as strict_json, Route};
use crate::sglang::Api;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// SGLang as an http:// base URL (a prefill worker, or a single server):
    /// its POST /v1/tokenize is the reference.
    #[arg(long)]
    pub upstream: String,
    /// Model directory or Hugging Face model id the guard would count with.
    /// Default: the upstream's own, from /model_info (tokenizer_path).
    #[arg(long)]
    pub tokenizer: Option<String>,
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// The route the bodies are sent to. Default: from each body (`messages`:
    /// chat, `prompt`: completions, otherwise /generate).
    #[arg(long)]
    pub route: Option<String>,
    /// Print JSON lines (one per compared prompt) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Seconds each tokenize request may take.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Count under SGLang's defaults instead of the upstream's own settings
    /// (its /server_info and /model_info).
    #[arg(long)]
    pub ignore_server_info: bool,
    #[command(flatten)]
    pub server: crate::config::ServerSettings,
    /// Request bodies (JSON files).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Match,
    /// The guard counted more: safe, it refuses slightly early.
    Over,
    /// The guard counted fewer: unsafe.
    Under,
    /// Token ids or embeddings: counted as given, nothing to compare.
    AsGiven,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Match => "match",
            Outcome::Over => "over (safe)",
            Outcome::Under => "UNDER",
            Outcome::AsGiven => "as given",
            Outcome::Error => "error",
        }
    }
}

/// One prompt (a batch has several per file).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub file: String,
    /// The element's index in a batch; `None` for a single prompt.
    pub unit: Option<usize>,
    pub route: &'static str,
    pub guard: Option<usize>,
    pub sglang: Option<usize>,
    pub outcome: Outcome,
    pub detail: Option<String>,
}

pub const EXIT_OK: u8 = 0;
pub const EXIT_UNDERCOUNT: u8 = 1;
pub const EXIT_INCOMPLETE: u8 = 2;

/// Runs the comparison and prints it; returns the exit status.
pub async fn run(args: &VerifyArgs, out: &mut impl Write) -> u8 {
    match verify(args).await {
        Ok(rows) => {
            let code = exit_code(&rows);
            let printed = if args.json {
                rows.iter().try_for_each(|r| {
                    writeln!(
                        out,
                        "{}",
                        serde_json::to_string(r).map_err(std::io::Error::other)?
                    )
                })
            } else {
                write_table(&rows, out)
            };
            if let Err(e) = printed {
                eprintln!("prefill-guard: cannot print the comparison: {e}");
                return EXIT_INCOMPLETE;
            }
            code
        }
        Err(e) => {
            eprintln!("prefill-guard: {e:#}");
            EXIT_INCOMPLETE
        }
    }
}

pub fn exit_code(rows: &[Row]) -> u8 {
    if rows.iter().any(|r| r.outcome == Outcome::Under) {
        EXIT_UNDERCOUNT
    } else if rows.iter().any(|r| r.outcome == Outcome::Error) {
        EXIT_INCOMPLETE
    } else {
        EXIT_OK
    }
}

pub async fn verify(args: &VerifyArgs) -> anyhow::Result<Vec<Row>> {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let api = Api::new(timeout, timeout);
    let forced_route = args.route.as_deref().map(parse_route).transpose()?;
    let tokenizer = match &args.tokenizer {
        Some(t) => t.clone(),
        None => {
            let info = api.model_info(&args.upstream).await?;
            info["tokenizer_path"]
                .as_str()
                .or_else(|| info["model_path"].as_str())
                .map(str::to_string)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the upstream's /model_info names no tokenizer_path: pass --tokenizer"
                    )
                })?
        }
    };
    // Counted as the guard in front of this server counts: its settings,
    // checked against the flags.
    let live = if args.ignore_server_info {
        None
    } else {
        Some(crate::load::read_server_settings(&args.upstream).await?)
    };
    let counter = crate::load::counter_for_server(&tokenizer, &args.revision, &args.server, live)
        .await?
        .map_err(|why| anyhow::anyhow!("the guard would not serve this model: {why}"))?;
    let mut rows = Vec::new();
    for file in &args.files {
        rows.extend(verify_file(&api, &args.upstream, &counter, forced_route, file).await);
    }
    Ok(rows)
}

fn parse_route(text: &str) -> anyhow::Result<Route> {
    let path = inspect::path::canonical_path(&text.parse()?)
        .map_err(|e| anyhow::anyhow!("--route {text}: {e}"))?;
    Route::from_path(&path)
        .ok_or_else(|| anyhow::anyhow!("--route {path}: not a route the guard counts"))
}

async fn verify_file(
    api: &Api,
    upstream: &str,
    counter: &ModelCounter,
    forced_route: Option<Route>,
    file: &Path,
) -> Vec<Row> {
    let name = file.display().to_string();
    let error_row = |route: Option<Route>, detail: String| Row {
        file: name.clone(),
        unit: None,
        route: route.map_or("", Route::path),
        guard: None,
        sglang: None,
        outcome: Outcome::Error,
        detail: Some(detail),
    };
    let body = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => return vec![error_row(forced_route, format!("cannot read: {e}"))],
    };
    let value = match strict_json::parse_strict(&body) {
        Ok(v) => Arc::new(v),
        Err(r) => return vec![error_row(forced_route, describe(&r))],
    };
    let route = forced_route.unwrap_or_else(|| Route::detect(&value));
    let request = match inspect::extract(route, value.clone()) {
        Ok(r) => r,
        Err(r) => return vec![error_row(Some(route), describe(&r))],
    };
    let batch = request.units.len() > 1;
    let mut rows = Vec::with_capacity(request.units.len());
    for (i, unit) in request.units.iter().enumerate() {
        let mut row = Row {
            file: name.clone(),
            unit: batch.then_some(i),
            route: route.path(),
            guard: None,
            sglang: None,
            outcome: Outcome::Error,
            detail: None,
        };
        let guard = counter.count(unit, Clock::Local).map_err(Reason::from);
        let oracle_body = match unit {
            Unit::Chat(body) => chat_tokenize_body(body),
            Unit::Text(text) => text_tokenize_body(request.model.as_deref(), text),
            Unit::Ids(n) | Unit::Embeds(n) => {
                row.guard = Some(*n);
                row.sglang = Some(*n);
                row.outcome = Outcome::AsGiven;
                rows.push(row);
                continue;
            }
            // Units of routes other than chat, completions and /generate have
            // no /v1/tokenize form; they are reported, not guessed at.
            #[allow(unreachable_patterns)]
            _ => {
                row.guard = guard.ok();
                row.detail = Some("no /v1/tokenize form for this kind of prompt".into());
                rows.push(row);
                continue;
            }
        };
        let sglang = api
            .tokenize(upstream, &oracle_body)
            .await
            .map_err(|e| e.to_string())
            .and_then(|answer| {
                tokenize_count(&answer)
                    .ok_or_else(|| "the /v1/tokenize answer has no `count` or `tokens`".to_string())
            });
        row.guard = guard.as_ref().ok().copied();
        row.sglang = sglang.as_ref().ok().copied();
        match (guard, sglang) {
            (Ok(g), Ok(s)) => {
                row.outcome = match g.cmp(&s) {
                    std::cmp::Ordering::Equal => Outcome::Match,
                    std::cmp::Ordering::Greater => Outcome::Over,
                    std::cmp::Ordering::Less => Outcome::Under,
                };
            }
            (Err(r), _) => {
                row.detail = Some(format!("the guard cannot count it: {}", describe(&r)))
            }
            (_, Err(e)) => row.detail = Some(format!("SGLang did not count it: {e}")),
        }
        rows.push(row);
    }
    rows
}

fn describe(r: &Reason) -> String {
    format!("{} ({})", r.message(None), r.label())
}

/// The chat body as the client sent it, minus streaming options, which a
/// tokenize call has no use for. Every field the chat template can see
/// (messages, tools, tool_choice, chat_template_kwargs, reasoning_effort,
/// continue_final_message, ...) passes.
fn chat_tokenize_body(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("stream");
        obj.remove("stream_options");
    }
    body
}

fn text_tokenize_body(model: Option<&str>, text: &str) -> Value {
    let mut body = serde_json::json!({"prompt": text, "add_special_tokens": true});
    if let Some(m) = model {
        body["model"] = m.into();
    }
    body
}

/// `TokenizeResponse.count` (an int for one prompt), else the length of `tokens`.
fn tokenize_count(answer: &Value) -> Option<usize> {
    answer["count"]
        .as_u64()
        .map(|n| n as usize)
        .or_else(|| answer["tokens"].as_array().map(Vec::len))
}

fn write_table(rows: &[Row], out: &mut impl Write) -> std::io::Result<()> {
    let n = |v: Option<usize>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let table: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            let diff = match (r.guard, r.sglang) {
                (Some(g), Some(s)) => format!("{:+}", g as i64 - s as i64),
                _ => "-".into(),
            };
            [
                r.file.clone(),
                r.unit.map_or_else(|| "-".into(), |u| u.to_string()),
                r.route.to_string(),
                n(r.guard),
                n(r.sglang),
                diff,
                match &r.detail {
                    Some(d) => format!("{}: {d}", r.outcome.label()),
                    None => r.outcome.label().to_string(),
                },
            ]
        })
        .collect();
    let header = ["FILE", "UNIT", "ROUTE", "GUARD", "SGLANG", "DIFF", "RESULT"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&table) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == 6 {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    let count = |o: Outcome| rows.iter().filter(|r| r.outcome == o).count();
    writeln!(
        out,
        "\n{} match, {} over, {} under, {} as given, {} errors",
        count(Outcome::Match),
        count(Outcome::Over),
        count(Outcome::Under),
        count(Outcome::AsGiven),
        count(Outcome::Error)
    )?;
    let worst_under = rows
        .iter()
        .filter(|r| r.outcome == Outcome::Under)
        .filter_map(|r| Some(r.sglang? - r.guard?))
        .max();
    if let Some(by) = worst_under {
        writeln!(
            out,
            "FAIL: the guard counted fewer tokens than SGLang (by up to {by}): a prompt at the limit \
             would pass the guard and still be stubbed by the prefill server. Fix the guard's \
             tokenizer or template, or set safety_margin_tokens to at least {by}."
        )?;
    }
    Ok(())
}

/// Where sampled requests are tokenized.
pub enum Oracle {
    /// The discovered prefill workers serving the model, in turn.
    Workers(Arc<crate::policy::discovery::Discovery>),
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
    pub api_key: Option<crate::sglang::ApiKey>,
}

/// Continuous verification (`verify_sample_rate`): a share of allowed
/// requests counted again off the request path and compared with the
/// server's own `/v1/tokenize`.
pub struct Sampler {
    rate: f64,
    api: Api,
    oracle: Oracle,
    margins: HashMap<String, usize>,
    profiles: Arc<crate::policy::Profiles>,
    metrics: Arc<crate::metrics::Metrics>,
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
    pub fn new(
        settings: SamplerSettings,
        profiles: Arc<crate::policy::Profiles>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn routes_from_bodies() {
        assert_eq!(
            Route::detect(&json!({"messages": []})),
            Route::ChatCompletions
        );
        assert_eq!(Route::detect(&json!({"prompt": "x"})), Route::Completions);
        assert_eq!(Route::detect(&json!({"text": "x"})), Route::Generate);
        assert_eq!(parse_route("/v1/completions").unwrap(), Route::Completions);
        assert!(parse_route("/not/a/route").is_err());
    }

    #[test]
    fn oracle_bodies() {
        let chat = json!({"model": "m", "messages": [], "stream": true, "stream_options": {}, "tools": []});
        assert_eq!(
            chat_tokenize_body(&chat),
            json!({"model": "m", "messages": [], "tools": []})
        );
        assert_eq!(
            text_tokenize_body(Some("m"), "hi"),
            json!({"prompt": "hi", "add_special_tokens": true, "model": "m"})
        );
        assert_eq!(
            tokenize_count(&json!({"tokens": [1, 2], "count": 2})),
            Some(2)
        );
        assert_eq!(tokenize_count(&json!({"tokens": [1, 2, 3]})), Some(3));
        assert_eq!(tokenize_count(&json!({})), None);
    }

    #[test]
    fn exit_codes() {
        let row = |outcome| Row {
            file: "f".into(),
            unit: None,
            route: "/generate",
            guard: None,
            sglang: None,
            outcome,
            detail: None,
        };
        assert_eq!(
            exit_code(&[row(Outcome::Match), row(Outcome::Over)]),
            EXIT_OK
        );
        assert_eq!(
            exit_code(&[row(Outcome::Error), row(Outcome::Match)]),
            EXIT_INCOMPLETE
        );
        assert_eq!(
            exit_code(&[row(Outcome::Error), row(Outcome::Under)]),
            EXIT_UNDERCOUNT
        );
    }
}
