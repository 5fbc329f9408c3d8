//! `prefill-guard audit --through GUARD_URL`: "am I protected?", asked of
//! the deployment as clients reach it.
//!
//! `M` is the prefill workers' own `max_req_input_len` (read from each
//! `--prefill-url`, the smallest wins, or given as `--max-req-input-len`),
//! never the guard's: a guard whose limit is above the servers' is exactly
//! what this must catch. Canary prompts are token ids (`input_ids`), so
//! their length is exact for any model and they carry no tenant data; each
//! is marked (`x-prefill-guard-canary` header, a `user` of
//! `prefill-guard-canary`) so router and server logs can tell them apart
//! (not an `rid`: a client-chosen request id is refused on its own).
//!
//! * `M - 1` ids on `/generate` must be answered (else the guard refuses
//!   prompts the servers would serve, or cannot judge yet);
//! * `M` ids must be refused: the prefill scheduler stubs them;
//! * `M + 1` ids in disguises (another route, a batch, path spellings, a
//!   chunked body, a duplicate key, another content type) must never be
//!   answered 2xx.
//!
//! Protected (exit 0) when all hold, not protected (1) when any over-limit
//! canary was answered, cannot tell (2) otherwise.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::{is_guard_refusal, read_server, Verdict};
use crate::sglang::Api;

/// A token id every real vocabulary has and no tenant sent.
const CANARY_ID: u32 = 100;

/// What a canary must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Expect {
    Answered,
    Refused,
}

#[derive(Debug, Clone, Serialize)]
struct Probe {
    name: &'static str,
    tokens: usize,
    expect: Expect,
    /// The HTTP status, or `None` when the request failed.
    status: Option<u16>,
    /// The error `code` of a refusal, or why the request failed.
    detail: String,
    verdict: Verdict,
}

#[derive(Debug, Clone, Serialize)]
struct ThroughReport {
    guard: String,
    /// Whether the URL answers as prefill-guard does (it refuses `/server_info`).
    is_guard: Option<bool>,
    max_req_input_len: Option<usize>,
    max_req_input_len_from: String,
    probes: Vec<Probe>,
    verdict: Verdict,
    reason: String,
    exit_code: u8,
}

pub async fn run(args: &super::AuditArgs, guard: &str, out: &mut impl Write) -> u8 {
    let report = check(args, guard.trim_end_matches('/')).await;
    super::print_report(args.json, &report, write_table, out).unwrap_or(report.exit_code)
}

async fn check(args: &super::AuditArgs, guard: &str) -> ThroughReport {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let api = Api::new(timeout, timeout);
    let (m, from) = servers_limit(args, &api).await;
    let is_guard = match api.server_info(guard).await {
        Ok(_) => Some(false),
        Err(e) if is_guard_refusal(&e) => Some(true),
        Err(_) => None,
    };
    let mut report = ThroughReport {
        guard: guard.to_string(),
        is_guard,
        max_req_input_len: m,
        max_req_input_len_from: from,
        probes: Vec::new(),
        verdict: Verdict::CannotTell,
        reason: String::new(),
        exit_code: Verdict::CannotTell.exit_code(),
    };
    let Some(m) = m.filter(|&m| m > 1) else {
        report.reason = format!(
            "the servers' max_req_input_len is unknown ({}): pass --prefill-url for each \
             prefill worker, or --max-req-input-len",
            report.max_req_input_len_from
        );
        return report;
    };
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(args.probe_timeout_secs.max(1)))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            report.reason = format!("cannot build an HTTP client: {e}");
            return report;
        }
    };
    for canary in canaries(m) {
        report.probes.push(send(&client, guard, canary).await);
    }
    let (verdict, reason) = judge(&report);
    report.verdict = verdict;
    report.reason = reason;
    report.exit_code = verdict.exit_code();
    report
}

/// The smallest `max_req_input_len` of the prefill workers, or the one given.
async fn servers_limit(args: &super::AuditArgs, api: &Api) -> (Option<usize>, String) {
    if let Some(m) = args.max_req_input_len {
        return (Some(m), "--max-req-input-len".into());
    }
    if args.prefill_urls.is_empty() {
        return (None, "no --prefill-url given".into());
    }
    let mut limits = Vec::new();
    for url in &args.prefill_urls {
        let server = read_server(api, url, "prefill", None).await;
        match server.max_req_input_len {
            Some(m) => limits.push(m),
            None => return (None, format!("{url}: {}", server.reason)),
        }
    }
    (
        limits.into_iter().min(),
        format!(
            "the smallest of {} prefill worker(s)",
            args.prefill_urls.len()
        ),
    )
}

struct Canary {
    name: &'static str,
    tokens: usize,
    expect: Expect,
    path: &'static str,
    content_type: &'static str,
    chunked: bool,
    body: String,
}

fn ids(n: usize) -> String {
    let id = CANARY_ID.to_string();
    let mut s = String::with_capacity(n * (id.len() + 1) + 2);
    s.push('[');
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&id);
    }
    s.push(']');
    s
}

fn generate(n: usize) -> String {
    format!(
        r#"{{"input_ids":{},"sampling_params":{{"max_new_tokens":1}}}}"#,
        ids(n)
    )
}

fn canaries(m: usize) -> Vec<Canary> {
    let json = "application/json";
    let over = m + 1;
    let at = |name, tokens, expect, path, body| Canary {
        name,
        tokens,
        expect,
        path,
        content_type: json,
        chunked: false,
        body,
    };
    vec![
        at(
            "M - 1 ids on /generate",
            m - 1,
            Expect::Answered,
            "/generate",
            generate(m - 1),
        ),
        at(
            "M ids on /generate",
            m,
            Expect::Refused,
            "/generate",
            generate(m),
        ),
        at(
            "over the limit on /v1/completions",
            over,
            Expect::Refused,
            "/v1/completions",
            format!(
                r#"{{"model":"default","prompt":{},"max_tokens":1,"user":"prefill-guard-canary"}}"#,
                ids(over)
            ),
        ),
        at(
            "over the limit as a batch",
            over,
            Expect::Refused,
            "/generate",
            format!(
                r#"{{"input_ids":[[{CANARY_ID}],{}],"sampling_params":{{"max_new_tokens":1}}}}"#,
                ids(over)
            ),
        ),
        at(
            "over the limit on //generate",
            over,
            Expect::Refused,
            "//generate",
            generate(over),
        ),
        at(
            "over the limit on /generate?canary=1",
            over,
            Expect::Refused,
            "/generate?canary=1",
            generate(over),
        ),
        at(
            "over the limit behind a duplicate key",
            over,
            Expect::Refused,
            "/generate",
            format!(
                r#"{{"input_ids":[{CANARY_ID}],"input_ids":{},"sampling_params":{{"max_new_tokens":1}}}}"#,
                ids(over)
            ),
        ),
        Canary {
            chunked: true,
            ..at(
                "over the limit in a chunked body",
                over,
                Expect::Refused,
                "/generate",
                generate(over),
            )
        },
        Canary {
            content_type: "text/plain",
            ..at(
                "over the limit as text/plain",
                over,
                Expect::Refused,
                "/generate",
                generate(over),
            )
        },
    ]
}

async fn send(client: &reqwest::Client, guard: &str, c: Canary) -> Probe {
    let url = format!("{guard}{}", c.path);
    let body = if c.chunked {
        let bytes = bytes::Bytes::from(c.body);
        let mid = bytes.len() / 2;
        let parts = vec![
            Ok::<_, std::io::Error>(bytes.slice(..mid)),
            Ok(bytes.slice(mid..)),
        ];
        reqwest::Body::wrap_stream(futures_util::stream::iter(parts))
    } else {
        reqwest::Body::from(c.body)
    };
    let sent = client
        .post(&url)
        .header("content-type", c.content_type)
        .header("x-prefill-guard-canary", "audit")
        .body(body)
        .send()
        .await;
    let (status, detail) = match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            let code = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/code")
                        .or_else(|| v.pointer("/error/type"))
                        .and_then(|c| c.as_str().map(str::to_string))
                })
                .unwrap_or_default();
            (Some(status), code)
        }
        Err(e) => (None, crate::sglang::error_chain(&e)),
    };
    let verdict = match (c.expect, status) {
        (_, None) => Verdict::CannotTell,
        (Expect::Refused, Some(s)) if (200..300).contains(&s) => Verdict::Exposed,
        (Expect::Refused, Some(s)) if (400..500).contains(&s) => Verdict::NotExposed,
        (Expect::Answered, Some(s)) if (200..300).contains(&s) => Verdict::NotExposed,
        _ => Verdict::CannotTell,
    };
    Probe {
        name: c.name,
        tokens: c.tokens,
        expect: c.expect,
        status,
        detail,
        verdict,
    }
}

fn judge(r: &ThroughReport) -> (Verdict, String) {
    let m = r.max_req_input_len.unwrap_or(0);
    if let Some(p) = r.probes.iter().find(|p| p.verdict == Verdict::Exposed) {
        let what = if r.is_guard == Some(false) {
            " (the URL answers /server_info: it is SGLang or its router, not prefill-guard)"
        } else {
            ""
        };
        return (
            Verdict::Exposed,
            format!(
                "NOT PROTECTED: a prompt of {} tokens ({}) was answered, and the prefill \
                 scheduler stubs every prompt of {m} or more{what}",
                p.tokens, p.name
            ),
        );
    }
    if let Some(p) = r.probes.iter().find(|p| p.verdict == Verdict::CannotTell) {
        let got = p
            .status
            .map_or_else(|| p.detail.clone(), |s| format!("HTTP {s} {}", p.detail));
        let hint = if p.expect == Expect::Answered && p.detail == "context_length_exceeded" {
            ": the guard refuses prompts the servers serve (its limit is below theirs; check \
             safety_margin_tokens and max_req_input_len)"
        } else {
            ""
        };
        return (Verdict::CannotTell, format!("{}: {got}{hint}", p.name));
    }
    (
        Verdict::NotExposed,
        format!(
            "PROTECTED: {} tokens answered, {m} and every disguise of {} refused",
            m.saturating_sub(1),
            m + 1
        ),
    )
}

fn write_table(r: &ThroughReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "prefill-guard audit through {}", r.guard)?;
    let m = r
        .max_req_input_len
        .map_or_else(|| "unknown".to_string(), |m| m.to_string());
    writeln!(
        out,
        "  servers' max_req_input_len M = {m} ({})",
        r.max_req_input_len_from
    )?;
    match r.is_guard {
        Some(true) => writeln!(out, "  the URL answers as prefill-guard")?,
        Some(false) => writeln!(
            out,
            "  the URL is not prefill-guard: it answers /server_info"
        )?,
        None => {}
    }
    for p in &r.probes {
        let status = p.status.map_or_else(|| "—".to_string(), |s| s.to_string());
        let mark = match p.verdict {
            Verdict::NotExposed => "ok",
            Verdict::Exposed => "LEAKS",
            Verdict::CannotTell => "??",
        };
        writeln!(
            out,
            "  {mark:<5} {:<40} {:>9} tokens  expect {:<8}  got {status} {}",
            p.name,
            p.tokens,
            match p.expect {
                Expect::Answered => "answered",
                Expect::Refused => "refused",
            },
            p.detail
        )?;
    }
    let shout = match r.verdict {
        Verdict::NotExposed => "PROTECTED",
        Verdict::Exposed => "NOT PROTECTED",
        Verdict::CannotTell => "CANNOT TELL",
    };
    // The reason may already open with the verdict ("NOT PROTECTED: ...").
    if r.reason.starts_with(shout) {
        writeln!(out, "verdict: {}", r.reason)
    } else {
        writeln!(out, "verdict: {shout}: {}", r.reason)
    }
}
