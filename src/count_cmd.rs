//! `prefill-guard count`: request bodies counted offline, one JSON line per
//! file, as the guard in front of a given server would count them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{json, Value};

use crate::config::ServerSettings;
use crate::count::serving::Observed;
use crate::count::{Clock, ModelCounter};
use crate::errors::Reason;
use crate::inspect::{self, json as strict_json, Route};
use crate::load::{counter_for_server, read_server_settings};
use crate::policy::NotServed;

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
    pub server: ServerSettings,
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
        flags.sglang_version = Some(crate::count::release::REFERENCE_VERSION.to_string());
    }
    counter_for_server(&args.tokenizer, &args.revision, &flags, live).await
}

fn parse_date(text: &str) -> anyhow::Result<chrono::NaiveDateTime> {
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        return Ok(t);
    }
    let d = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|e| UsageError(format!("--date {text}: expected YYYY-MM-DD ({e})")))?;
    Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// `prefill-guard count`: one JSON line per file, in order. Returns whether
/// every file was counted (the exit status is 1 otherwise).
/// A flag's value the command cannot use: exit status 2, as for the usage
/// errors clap finds (README, "Exit codes").
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub async fn run(args: &CountArgs, out: &mut impl Write) -> anyhow::Result<bool> {
    let forced = match &args.route {
        Some(text) => {
            let uri = text
                .parse()
                .map_err(|e| UsageError(format!("--route {text}: {e}")))?;
            let path = inspect::path::canonical_path(&uri)
                .map_err(|e| UsageError(format!("--route {text}: {e}")))?;
            Some(Route::from_path(&path).ok_or_else(|| {
                UsageError(format!("--route {path}: not a route the guard counts"))
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
        json!({ "tokens": counts.first().copied().unwrap_or(0) })
    })
}
