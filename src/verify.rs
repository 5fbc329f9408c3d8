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
//!
//! The same comparison on a sample of live traffic is `policy::sample`
//! (`verify_sample_rate`); both ask `/v1/tokenize` through `sglang`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::count::{Clock, ModelCounter, Unit};
use crate::errors::Reason;
use crate::inspect::{self, json as strict_json, Route};
use crate::sglang::{chat_tokenize_body, text_tokenize_body, tokenize_count, Api};

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
        Err(r) => return vec![error_row(forced_route, describe(&r.into()))],
    };
    let route = forced_route.unwrap_or_else(|| Route::detect(&value));
    let request = match inspect::extract(route, value.clone()) {
        Ok(r) => r,
        Err(r) => return vec![error_row(Some(route), describe(&r.into()))],
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
