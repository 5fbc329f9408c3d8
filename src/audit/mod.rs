//! `prefill-guard audit`: the advisory's "am I exposed?" checklist as a
//! command (sglang-semantics §4, §5, §9). It reads `/server_info`,
//! `/model_info` and `/v1/models` from the upstream (and from each
//! `--prefill-url`) and reports, per server: PD mode and transfer backend,
//! the context length `C` against the prefill pool, the dangerous window
//! `[max_req_input_len, C - R - 1]`, the SGLang version against the fixes,
//! `allow_auto_truncate`, and a verdict with its reason.
//!
//! Exit status: 0 not exposed, 1 exposed, 2 cannot tell. It describes the
//! upstream as it is, without the guard in front.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::count::release::{parse_version, Version};

use crate::sglang::{self, Api, ApiError, LimitSource};

mod paths;
mod through;

/// prefill-guard's own answer to a route it does not model (`/server_info`):
/// 404 `route_not_allowed`, naming itself.
pub(crate) fn is_guard_refusal(e: &ApiError) -> bool {
    matches!(e, ApiError::Status { status: 404, detail, .. }
        if detail.contains("route_not_allowed") || detail.contains("not allowed through prefill-guard"))
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// SGLang, or its router, as an http:// base URL: what is exposed without
    /// the guard.
    #[arg(long, required_unless_present = "through")]
    pub upstream: Option<String>,
    /// prefill-guard's proxy URL: "am I protected?" Sends canary prompts of
    /// M-1 and M token ids (M: the prefill workers' max_req_input_len, from
    /// --prefill-url or --max-req-input-len) and an over-limit one in several
    /// disguises through it (exit 0 protected, 1 not protected, 2 cannot tell).
    /// The M-1 canary is a real prefill of M-1 tokens on the servers behind.
    #[arg(long, value_name = "GUARD_URL")]
    pub through: Option<String>,
    /// With --through and no --prefill-url: the servers' max_req_input_len.
    #[arg(long, requires = "through")]
    pub max_req_input_len: Option<usize>,
    /// With --through: seconds each canary may take (the M-1 one is a whole
    /// prefill on the servers behind the guard).
    #[arg(long, default_value_t = 600, requires = "through")]
    pub probe_timeout_secs: u64,
    /// A prefill worker to read directly; repeat for each. Through smg's router,
    /// /get_server_info describes only the first prefill worker.
    #[arg(long = "prefill-url")]
    pub prefill_urls: Vec<String>,
    /// A decode worker to compare with the prefill workers; repeat for each.
    /// Settings that differ are the leaks beyond length.
    #[arg(long = "decode-url")]
    pub decode_urls: Vec<String>,
    /// Print JSON (for scripts) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Seconds each request may take.
    #[arg(long, default_value_t = 10)]
    pub timeout_secs: u64,
}

/// Ordered from best to worst, so the worst of several servers is the `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    NotExposed,
    CannotTell,
    Exposed,
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::NotExposed => 0,
            Verdict::Exposed => 1,
            Verdict::CannotTell => 2,
        }
    }

    fn shout(self) -> &'static str {
        match self {
            Verdict::NotExposed => "NOT EXPOSED",
            Verdict::CannotTell => "CANNOT TELL",
            Verdict::Exposed => "EXPOSED",
        }
    }
}

/// Prompt lengths `first..=last` that pass the front end's context check but
/// are stubbed by the prefill scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub first: usize,
    pub last: usize,
}

impl Window {
    /// `[max_req_input_len, C - R - 1]`, if not empty.
    pub fn new(max_req_input_len: usize, context: usize, reserved: usize) -> Option<Self> {
        let last = context.checked_sub(reserved)?.checked_sub(1)?;
        (max_req_input_len <= last).then_some(Window {
            first: max_req_input_len,
            last,
        })
    }

    pub fn lengths(&self) -> usize {
        self.last - self.first + 1
    }
}

/// One server setting that changes prompt ids.
#[derive(Debug, Clone, Serialize)]
pub struct SettingReport {
    pub name: &'static str,
    pub value: String,
    pub handling: &'static str,
}

/// What one server said, and what it means.
#[derive(Debug, Clone, Serialize)]
pub struct ServerReport {
    pub url: String,
    /// `upstream` or `prefill`.
    pub role: &'static str,
    /// Why `/server_info` could not be read, if it could not.
    pub error: Option<String>,
    pub version: Option<String>,
    pub disaggregation_mode: Option<String>,
    pub transfer_backend: Option<String>,
    /// `C`: `max_model_len` from `/v1/models`.
    pub context_length: Option<usize>,
    /// The KV pool: `max_total_num_tokens`.
    pub max_total_num_tokens: Option<usize>,
    pub max_req_input_len: Option<usize>,
    pub max_req_input_len_source: Option<LimitSource>,
    /// `R`: output slots reserved per request (EAGLE speculative decoding).
    pub reserved_tokens: Option<usize>,
    pub reserved_tokens_note: String,
    pub window: Option<Window>,
    pub allow_auto_truncate: Option<bool>,
    /// The settings that change prompt ids and differ from SGLang's
    /// defaults (`count::serving::SETTINGS`), with how the guard handles each.
    pub settings: Vec<SettingReport>,
    /// The encoder SGLang builds chat prompts with (judged without the model's files).
    pub encoder: Option<String>,
    /// What the guard would not count exactly in front of this server.
    pub unmodelled: Vec<String>,
    pub notes: Vec<String>,
    pub verdict: Verdict,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub upstream: String,
    pub servers: Vec<ServerReport>,
    /// The union of the exposed servers' windows.
    pub window: Option<Window>,
    /// Beyond length: the prefill/decode parity and each other path.
    pub beyond_length: paths::PathsReport,
    pub verdict: Verdict,
    pub reason: String,
    pub exit_code: u8,
}

/// Runs the audit and prints it; returns the exit status.
pub async fn run(args: &AuditArgs, out: &mut impl Write) -> u8 {
    if let Some(guard) = &args.through {
        return through::run(args, guard, out).await;
    }
    let report = audit(args).await;
    print_report(args.json, &report, write_table, out).unwrap_or(report.exit_code)
}

/// Prints `report` as JSON or as its table; `Some(2)` when it cannot be
/// printed (the exit status then says "cannot tell").
pub(crate) fn print_report<R: Serialize, W: Write>(
    json: bool,
    report: &R,
    table: impl FnOnce(&R, &mut W) -> std::io::Result<()>,
    out: &mut W,
) -> Option<u8> {
    let printed = if json {
        serde_json::to_string_pretty(report)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(out, "{s}"))
    } else {
        table(report, out)
    };
    printed.err().map(|e| {
        eprintln!("prefill-guard: cannot print the report: {e}");
        Verdict::CannotTell.exit_code()
    })
}

pub async fn audit(args: &AuditArgs) -> Report {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let api = Api::new(timeout, timeout);
    let upstream_url = args.upstream.clone().unwrap_or_default();
    let upstream = read_server(&api, &upstream_url, "upstream", None).await;
    let mut servers = vec![upstream];
    for url in &args.prefill_urls {
        let fallback_context = servers[0].context_length;
        servers.push(read_server(&api, url, "prefill", fallback_context).await);
    }
    let judged: Vec<&ServerReport> = if args.prefill_urls.is_empty() {
        servers.iter().collect()
    } else {
        // The prefill workers' own numbers decide; the upstream row is context.
        servers.iter().filter(|s| s.role == "prefill").collect()
    };
    let worst = judged
        .iter()
        .max_by_key(|s| s.verdict)
        .expect("at least one server is judged");
    let (verdict, reason) = if judged.len() == 1 {
        (worst.verdict, worst.reason.clone())
    } else {
        (worst.verdict, format!("{}: {}", worst.url, worst.reason))
    };
    let exposed: Vec<Window> = judged
        .iter()
        .filter(|s| s.verdict == Verdict::Exposed)
        .filter_map(|s| s.window)
        .collect();
    let window = (!exposed.is_empty()).then(|| Window {
        first: exposed.iter().map(|w| w.first).min().unwrap_or(0),
        last: exposed.iter().map(|w| w.last).max().unwrap_or(0),
    });
    let beyond_length = beyond_length(&api, args, &upstream_url).await;
    let (verdict, reason) = match verdict {
        Verdict::NotExposed | Verdict::CannotTell if beyond_length.any_exposed => (
            Verdict::Exposed,
            format!(
                "beyond length: prefill and decode differ ({}); {reason}",
                beyond_length.parity
            ),
        ),
        _ => (verdict, reason),
    };
    Report {
        upstream: upstream_url,
        servers,
        window,
        beyond_length,
        verdict,
        reason,
        exit_code: verdict.exit_code(),
    }
}

/// The prefill workers (or the upstream) against the decode workers.
async fn beyond_length(api: &Api, args: &AuditArgs, upstream: &str) -> paths::PathsReport {
    let prefill_urls: Vec<&str> = if args.prefill_urls.is_empty() {
        vec![upstream]
    } else {
        args.prefill_urls.iter().map(String::as_str).collect()
    };
    let mut prefill = Vec::new();
    for url in prefill_urls {
        prefill.extend(paths::read(api, url).await);
    }
    let mut decode = Vec::new();
    for url in &args.decode_urls {
        decode.extend(paths::read(api, url).await);
    }
    paths::report(&prefill, &decode)
}

pub(crate) async fn read_server(
    api: &Api,
    url: &str,
    role: &'static str,
    fallback_context: Option<usize>,
) -> ServerReport {
    let info = api.server_info(url).await;
    let model_info = api.model_info(url).await.ok();
    let models = api.models(url).await.ok();
    facts(
        url,
        role,
        info,
        model_info.as_ref(),
        models.as_ref(),
        fallback_context,
    )
}

/// The report for one server from its answers (pure, so it is unit-tested).
pub fn facts(
    url: &str,
    role: &'static str,
    info: Result<Value, ApiError>,
    model_info: Option<&Value>,
    models: Option<&Value>,
    fallback_context: Option<usize>,
) -> ServerReport {
    let mut r = ServerReport {
        url: url.to_string(),
        role,
        error: None,
        version: None,
        disaggregation_mode: None,
        transfer_backend: None,
        context_length: None,
        max_total_num_tokens: None,
        max_req_input_len: None,
        max_req_input_len_source: None,
        reserved_tokens: None,
        reserved_tokens_note: String::new(),
        window: None,
        allow_auto_truncate: None,
        settings: Vec::new(),
        encoder: None,
        unmodelled: Vec::new(),
        notes: Vec::new(),
        verdict: Verdict::CannotTell,
        reason: String::new(),
    };
    let info = match info {
        Ok(v) => v,
        Err(e) if is_guard_refusal(&e) => {
            r.reason = "this is prefill-guard, not SGLang: it does not pass /server_info. \
                        Audit the servers behind it (--upstream ROUTER_URL --prefill-url ...), \
                        and check the guard itself with --through GUARD_URL"
                .into();
            r.error = Some(e.to_string());
            return r;
        }
        Err(e) => {
            r.reason = format!("cannot read /server_info: {e}");
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.version = sglang::str_field(&info, "version").map(str::to_string);
    r.disaggregation_mode = sglang::str_field(&info, "disaggregation_mode")
        .or_else(|| model_info.and_then(|m| m["disaggregation_mode"].as_str()))
        .map(str::to_string);
    r.transfer_backend =
        sglang::str_field(&info, "disaggregation_transfer_backend").map(str::to_string);
    r.context_length = sglang::context_length(&info, models).or(fallback_context);
    if models.is_none() {
        r.notes.push(match r.context_length {
            Some(_) => {
                "no /v1/models answer: the context length is the command-line or upstream value"
                    .into()
            }
            None => "no /v1/models answer: the effective context length is unknown".into(),
        });
    }
    r.max_total_num_tokens = sglang::count_field(&info, "max_total_num_tokens");
    if let Some((m, source)) = sglang::refuse_at(&info, r.context_length) {
        r.max_req_input_len = Some(m);
        r.max_req_input_len_source = Some(source);
    }
    let (reserved, note) = reserved_tokens(&info);
    r.reserved_tokens = reserved;
    r.reserved_tokens_note = note;
    r.allow_auto_truncate = sglang::bool_field(&info, "allow_auto_truncate");
    server_configuration(&mut r, &info, model_info);
    if let (Some(m), Some(c)) = (r.max_req_input_len, r.context_length) {
        // An unknown R is taken as 0: the widest window, the cautious reading.
        r.window = Window::new(m, c, reserved.unwrap_or(0));
    }
    if role == "upstream" && r.disaggregation_mode.as_deref() == Some("prefill") {
        r.notes.push(
            "through smg's router, /get_server_info describes only the first prefill worker: \
             pass --prefill-url for each prefill worker"
                .into(),
        );
    }
    let (verdict, reason) = assess(&r);
    r.verdict = verdict;
    r.reason = reason;
    r
}

/// The server's settings that change prompt ids and what the guard does
/// with them (README "Server configuration"). Environment values are never
/// visible over HTTP: the report says so.
fn server_configuration(r: &mut ServerReport, info: &Value, model_info: Option<&Value>) {
    use crate::count::serving::{self, Observed, ServerConfig, SglangEnv};
    let observed = Observed::from_server(info, model_info);
    let mut refused: Vec<&str> = Vec::new();
    match ServerConfig::resolve(&observed, &SglangEnv::default()) {
        Err(problems) => {
            refused = problems.iter().map(|p| p.setting).collect();
            r.unmodelled = problems.iter().map(ToString::to_string).collect();
        }
        Ok(cfg) => {
            let (encoder, problem) = crate::count::encoder::judge_without_files(&cfg);
            r.encoder = Some(encoder);
            r.unmodelled.extend(problem);
        }
    }
    // Judged for this server's value: a setting modelled for some values
    // is "modelled" here unless this value is the problem.
    let said_mode = sglang::str_field(info, "disaggregation_mode");
    r.settings = observed
        .iter()
        .map(|(name, value)| SettingReport {
            name,
            // Kept as "disaggregated" (prefill and decode count alike), shown
            // as the server said it.
            value: match (name, said_mode) {
                ("disaggregation_mode", Some(mode)) => mode.to_string(),
                _ => serving::show(value),
            },
            handling: match serving::setting(name).map(|s| s.handling) {
                _ if refused.contains(&name) => "NOT MODELLED for this value",
                Some(serving::Handling::Partly) => "modelled for this value",
                Some(h) => h.label(),
                None => "?",
            },
        })
        .collect();
    for name in ["tokenizer_path", "revision"] {
        if observed.is_set(name) {
            r.unmodelled.push(format!(
                "{name}: the server loads other files; the guard needs the same ones and {name} set to the same value"
            ));
        }
    }
}

/// `compute_num_reserved_tokens()` (sglang-semantics §4): EAGLE stores draft
/// tokens in output slots, `max(topk * num_steps, num_draft_tokens)`; every
/// other algorithm reserves nothing.
fn reserved_tokens(info: &Value) -> (Option<usize>, String) {
    let Some(algorithm) = sglang::str_field(info, "speculative_algorithm") else {
        return (Some(0), "no speculative decoding".into());
    };
    // NEXTN is resolved to EAGLE by SGLang; both EAGLE variants share the worker.
    if !["EAGLE", "EAGLE3", "NEXTN"]
        .iter()
        .any(|a| a.eq_ignore_ascii_case(algorithm))
    {
        return (Some(0), format!("{algorithm} reserves no output slots"));
    }
    let get = |k| sglang::count_field(info, k);
    match (
        get("speculative_eagle_topk"),
        get("speculative_num_steps"),
        get("speculative_num_draft_tokens"),
    ) {
        (Some(k), Some(s), Some(d)) => (
            Some((k * s).max(d)),
            format!("{algorithm}: max(topk {k} x steps {s}, draft tokens {d})"),
        ),
        _ => (
            None,
            format!("{algorithm}: speculative_eagle_topk, _num_steps or _num_draft_tokens missing; window computed with R = 0"),
        ),
    }
}

/// Which fix a version carries (sglang-semantics §9).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fix {
    /// 0.5.19 and older: an over-long prompt is stubbed and handed to decode.
    None,
    /// 0.5.20: retired after its forward pass (#36988).
    AfterForward,
    /// 0.5.21 and later: refused at PD admission (#38935).
    AtAdmission,
    Unknown(String),
}

/// How the guard counts for a server reporting `version`: the release
/// family, or every family when the version says nothing.
fn counted_as(version: Option<&str>) -> String {
    use crate::count::release::{Release, Releases};
    let value = serde_json::Value::String(version.unwrap_or_default().into());
    match Releases::of_versions(&value) {
        Ok(r) if r.len() == Release::ALL.len() => {
            "every release family (the version is not known): the largest count wins".into()
        }
        Ok(r) => {
            let families: Vec<String> = r.iter().map(|f| f.range()).collect();
            format!("the prompts of SGLang {}", families.join(" and of "))
        }
        Err(why) => format!("not served: {why}"),
    }
}

fn fix_of(version: &str) -> Fix {
    let Some((Version(a, b, c, _), pre)) = parse_version(version) else {
        return Fix::Unknown(format!("cannot read the version `{version}`"));
    };
    let release = (a, b, c);
    const FIXED_AFTER_FORWARD: (u32, u32, u32) = (0, 5, 20);
    const FIXED_AT_ADMISSION: (u32, u32, u32) = (0, 5, 21);
    match (release, pre) {
        (r, false) if r >= FIXED_AT_ADMISSION => Fix::AtAdmission,
        (r, true) if r > FIXED_AT_ADMISSION => Fix::AtAdmission,
        // A 0.5.21 pre-release comes after 0.5.20, which has #36988.
        (r, true) if r == FIXED_AT_ADMISSION => Fix::AfterForward,
        (r, false) if r >= FIXED_AFTER_FORWARD => Fix::AfterForward,
        (r, true) if r == FIXED_AFTER_FORWARD => Fix::Unknown(format!(
            "{version} is a pre-release of 0.5.20 and may predate its fix (#36988)"
        )),
        _ => Fix::None,
    }
}

fn assess(r: &ServerReport) -> (Verdict, String) {
    use Verdict::*;
    let mode = match r.disaggregation_mode.as_deref() {
        None => return (
            CannotTell,
            "no disaggregation_mode in /server_info or /model_info: cannot tell whether PD is on"
                .into(),
        ),
        Some("null") => {
            return (
                NotExposed,
                "not PD-disaggregated: the leak needs a prefill-to-decode handoff".into(),
            )
        }
        Some(m @ ("prefill" | "decode")) => m,
        Some(other) => return (CannotTell, format!("unknown disaggregation_mode `{other}`")),
    };
    if r.allow_auto_truncate == Some(true) {
        return (
            CannotTell,
            "allow_auto_truncate is on with PD: prefill truncates over-long prompts to max_req_input_len \
             instead of refusing them, and nothing was found that makes decode agree on the length \
             (sglang-semantics §11.5); no release fixes that path. Turn it off."
                .into(),
        );
    }
    let Some(version) = r.version.as_deref() else {
        return (CannotTell, "no version in /server_info".into());
    };
    match fix_of(version) {
        Fix::AtAdmission => (
            NotExposed,
            format!("SGLang {version} refuses intake-rejected prompts at PD admission (#38935, 0.5.21)"),
        ),
        Fix::AfterForward => (
            NotExposed,
            format!(
                "SGLang {version} retires an aborted prefill after its forward pass (#36988, 0.5.20): \
                 no leak, but each over-long prompt still costs a prefill forward pass, and decode, \
                 which preallocated the whole prompt, holds it until its transfer timeout; the guard \
                 keeps refusing such prompts before either happens"
            ),
        ),
        Fix::Unknown(why) => (CannotTell, why),
        Fix::None if mode == "decode" => (
            CannotTell,
            format!(
                "SGLang {version} (no fix) in PD mode, but this is a decode server: the prefill \
                 servers' max_req_input_len decides the window; audit with --prefill-url"
            ),
        ),
        Fix::None => match (r.max_req_input_len, r.context_length, r.window) {
            (None, _, _) | (_, None, _) => (
                CannotTell,
                format!(
                    "SGLang {version} (no fix) in PD mode, but max_req_input_len or the context \
                     length is unknown, so the window cannot be computed"
                ),
            ),
            (Some(m), Some(c), None) => (
                NotExposed,
                format!(
                    "SGLang {version} (no fix) in PD mode, but no prompt length lies in \
                     [max_req_input_len {m}, C - R - 1] with C = {c}: the front end refuses \
                     everything the prefill scheduler would"
                ),
            ),
            (_, _, Some(w)) => (
                Exposed,
                format!(
                    "SGLang {version} in PD mode has no fix (0.5.20 and later do): prompts of \
                     {} to {} tokens pass the front end, are stubbed to one token by the prefill \
                     scheduler and still handed to decode, which generates from stale KV pages \
                     (SGLang #30233)",
                    w.first, w.last
                ),
            ),
        },
    }
}

fn write_table(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let n = |v: Option<usize>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
    writeln!(out, "prefill-guard audit of {}", report.upstream)?;
    for s in &report.servers {
        writeln!(out)?;
        writeln!(out, "{} ({})", s.url, s.role)?;
        let mut rows: Vec<(&str, String)> = Vec::new();
        if let Some(e) = &s.error {
            rows.push(("error", e.clone()));
        } else {
            rows.push((
                "SGLang version",
                s.version.clone().unwrap_or("unknown".into()),
            ));
            rows.push(("counted as", counted_as(s.version.as_deref())));
            rows.push((
                "PD mode",
                match (s.disaggregation_mode.as_deref(), &s.transfer_backend) {
                    (None, _) => "unknown".into(),
                    (Some("null"), _) => "off (disaggregation_mode null)".into(),
                    (Some(m), Some(b)) => format!("{m} (transfer backend {b})"),
                    (Some(m), None) => m.to_string(),
                },
            ));
            rows.push(("context length C", n(s.context_length)));
            rows.push(("KV pool (max_total_num_tokens)", n(s.max_total_num_tokens)));
            rows.push((
                "max_req_input_len M",
                match (s.max_req_input_len, s.max_req_input_len_source) {
                    (Some(m), Some(src)) => format!("{m} ({})", src.describe()),
                    _ => "unknown".into(),
                },
            ));
            rows.push((
                "reserved tokens R",
                format!("{} ({})", n(s.reserved_tokens), s.reserved_tokens_note),
            ));
            rows.push((
                "window [M, C - R - 1]",
                match s.window {
                    Some(w) => {
                        format!("{} to {} ({} prompt lengths)", w.first, w.last, w.lengths())
                    }
                    None if s.max_req_input_len.is_some() && s.context_length.is_some() => {
                        "empty".into()
                    }
                    None => "unknown".into(),
                },
            ));
            rows.push((
                "allow_auto_truncate",
                s.allow_auto_truncate
                    .map_or("unknown".into(), |b| b.to_string()),
            ));
            rows.push((
                "server settings",
                if s.settings.is_empty() {
                    "SGLang's defaults".into()
                } else {
                    s.settings
                        .iter()
                        .map(|x| format!("{}={} ({})", x.name, x.value, x.handling))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            ));
            if let Some(e) = &s.encoder {
                rows.push(("chat encoder", e.clone()));
            }
            for u in &s.unmodelled {
                rows.push(("NOT MODELLED", u.clone()));
            }
            // Only the environment values this server's encoder reads.
            let deepseek = s.encoder.as_deref().is_some_and(|e| {
                e.starts_with("dsv") || e.to_ascii_lowercase().contains("deepseek")
            });
            rows.push((
                "environment",
                if deepseek {
                    "not visible over HTTP: give the guard the server's SGLANG_DEFAULT_THINKING and \
                     SGLANG_DSV4(1)_REASONING_EFFORT values in sglang_env"
                } else {
                    "not visible over HTTP: give the guard the server's SGLANG_DEFAULT_THINKING \
                     value in sglang_env if it is set"
                }
                .into(),
            ));
        }
        rows.push(("verdict", format!("{}: {}", s.verdict.shout(), s.reason)));
        for note in &s.notes {
            rows.push(("note", note.clone()));
        }
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(out, "  {k:<width$}  {v}")?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "beyond length (prefill vs decode: {})",
        report.beyond_length.parity
    )?;
    for p in &report.beyond_length.paths {
        writeln!(out, "  {}", p.path)?;
        writeln!(out, "    exposed: {}; {}", p.exposed, p.detail)?;
        writeln!(out, "    prefill-guard: {}", p.guard)?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "verdict: {} (exit {})",
        report.verdict.shout(),
        report.exit_code
    )?;
    writeln!(out, "{}", report.reason)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions() {
        assert_eq!(counted_as(Some("0.5.11")), "the prompts of SGLang 0.5.11");
        assert_eq!(
            counted_as(Some("0.5.19")),
            "the prompts of SGLang 0.5.18-0.5.19"
        );
        assert!(counted_as(None).starts_with("every release family"));
        assert!(counted_as(Some("0.4.4")).starts_with("not served"));
        assert_eq!(fix_of("0.5.19"), Fix::None);
        assert_eq!(fix_of("0.5.10.post1"), Fix::None);
        assert_eq!(fix_of("0.5.20"), Fix::AfterForward);
        assert_eq!(fix_of("0.5.20.post2"), Fix::AfterForward);
        assert!(matches!(fix_of("0.5.20rc0"), Fix::Unknown(_)));
        assert_eq!(fix_of("0.5.21rc1"), Fix::AfterForward);
        assert_eq!(fix_of("0.5.21"), Fix::AtAdmission);
        assert_eq!(fix_of("0.5.23"), Fix::AtAdmission);
        assert_eq!(fix_of("1.0.0rc1"), Fix::AtAdmission);
        assert!(matches!(fix_of("nightly"), Fix::Unknown(_)));
    }

    #[test]
    fn window_of_the_worked_example() {
        // SGLang #30233: C = 1048576, pool 284928, M = 284922, R = 0.
        let w = Window::new(284_922, 1_048_576, 0).unwrap();
        assert_eq!((w.first, w.last), (284_922, 1_048_575));
        // P >= C: only the top 6 lengths, unless R eats them.
        assert_eq!(Window::new(32_762, 32_768, 0).unwrap().lengths(), 6);
        assert_eq!(Window::new(32_762, 32_768, 6), None);
    }

    fn report(info: Value) -> ServerReport {
        let models = json!({"data": [{"id": "m", "max_model_len": 1_048_576}]});
        facts("http://x", "upstream", Ok(info), None, Some(&models), None)
    }

    #[test]
    fn eagle_reserves_slots() {
        let r = report(
            json!({"version": "0.5.19", "disaggregation_mode": "prefill",
            "max_req_input_len": 1_048_570, "speculative_algorithm": "EAGLE",
            "speculative_eagle_topk": 1, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}),
        );
        assert_eq!(r.reserved_tokens, Some(4));
        assert_eq!(
            r.window,
            Some(Window {
                first: 1_048_570,
                last: 1_048_571
            })
        );
        assert_eq!(r.verdict, Verdict::Exposed);
    }

    #[test]
    fn verdicts() {
        let exposed = json!({"version": "0.5.19", "disaggregation_mode": "prefill",
            "max_total_num_tokens": 284_928, "max_req_input_len": 284_922, "allow_auto_truncate": false});
        assert_eq!(report(exposed.clone()).verdict, Verdict::Exposed);
        let mut v = exposed.clone();
        v["version"] = json!("0.5.21");
        assert_eq!(report(v).verdict, Verdict::NotExposed);
        let mut v = exposed.clone();
        v["disaggregation_mode"] = json!("null");
        assert_eq!(report(v).verdict, Verdict::NotExposed);
        let mut v = exposed.clone();
        v["allow_auto_truncate"] = json!(true);
        assert_eq!(report(v).verdict, Verdict::CannotTell);
        let mut v = exposed.clone();
        v.as_object_mut().unwrap().remove("version");
        assert_eq!(report(v).verdict, Verdict::CannotTell);
        let mut v = exposed.clone();
        v["disaggregation_mode"] = json!("decode");
        assert_eq!(report(v).verdict, Verdict::CannotTell);
        // The mode may come from /model_info only.
        let mut v = exposed;
        v.as_object_mut().unwrap().remove("disaggregation_mode");
        let r = facts(
            "http://x",
            "upstream",
            Ok(v),
            Some(&json!({"disaggregation_mode": "prefill"})),
            Some(&json!({"data": [{"id": "m", "max_model_len": 1_048_576}]})),
            None,
        );
        assert_eq!(r.verdict, Verdict::Exposed);
        let down = facts(
            "http://x",
            "upstream",
            Err(ApiError::Transport {
                url: "http://x/server_info".into(),
                message: "refused".into(),
            }),
            None,
            None,
            None,
        );
        assert_eq!(down.verdict, Verdict::CannotTell);
    }
}
