//! Decision logs and process logs, human-readable or JSON lines.
//!
//! Prompts are the tenants' data and the reason this guard exists; nothing
//! here, at any level, is given a body or a prompt. The decision line carries
//! only counts, limits, names and identifiers.

use std::io::IsTerminal;
use std::time::Duration;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// The filter when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "info";

/// Installs the process-wide subscriber, writing to stderr (stdout stays free
/// for the CLI's own output). `RUST_LOG` overrides the default filter.
pub fn init(format: LogFormat) -> Result<(), tracing::subscriber::SetGlobalDefaultError> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_FILTER.to_string());
    let ansi = std::io::stderr().is_terminal();
    tracing::subscriber::set_global_default(build(format, &filter, std::io::stderr, ansi))
}

/// The subscriber [`init`] installs, writing to `writer`; tests use it with
/// `tracing::subscriber::set_default` to read what a real request logs.
pub fn subscriber<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    build(format, filter, writer, false)
}

/// `ansi`: colours, only for a terminal; files and collectors get plain text.
fn build<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Human => Box::new(builder.finish()),
        // The request span (its `request_id`) ties warnings to their decision line.
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
    }
}

/// One request's decision-log line.
#[derive(Debug, Default)]
pub struct DecisionLine<'a> {
    pub request_id: &'a str,
    /// The adapter: `proxy`, `ext_authz_http`, `ext_authz_grpc` or `ext_proc`.
    pub mode: &'a str,
    pub method: &'a str,
    /// The route's metric label (a known route or `other`), never the raw target.
    pub route: &'a str,
    pub model: Option<&'a str>,
    pub tokens: Option<usize>,
    /// How the count decided: `exact`, `bound` (no count; an upper bound
    /// under the limit) or `early_exit` (`tokens` is a lower bound).
    pub count_method: Option<&'static str>,
    pub limit: Option<usize>,
    /// `allowed` or `refused`.
    pub decision: &'a str,
    /// `Reason::label()` of a refusal or an upstream failure.
    pub reason: Option<&'static str>,
    /// The HTTP status the adapter answered (in external modes, the status of
    /// the deny, or 200 for an allow).
    pub status: u16,
    pub upstream_status: Option<u16>,
    /// From the request's arrival to its response headers.
    pub latency: Duration,
}

/// Writes the decision line at INFO under the target `prefill_guard::decision`.
pub fn decision(line: &DecisionLine<'_>) {
    tracing::info!(
        target: "prefill_guard::decision",
        request_id = line.request_id,
        mode = line.mode,
        method = line.method,
        route = line.route,
        model = line.model,
        tokens = line.tokens.map(|t| t as u64),
        count_method = line.count_method,
        limit = line.limit.map(|l| l as u64),
        decision = line.decision,
        reason = line.reason,
        status = line.status,
        upstream_status = line.upstream_status,
        latency_ms = line.latency.as_micros() as f64 / 1000.0,
        "decision"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_decision_line_has_the_fields() {
        let buf = Buf::default();
        let sink = buf.clone();
        let sub = subscriber(LogFormat::Json, "info", move || sink.clone());
        tracing::subscriber::with_default(sub, || {
            decision(&DecisionLine {
                request_id: "r1",
                mode: "ext_authz_http",
                method: "POST",
                route: "/generate",
                model: Some("m"),
                tokens: Some(7),
                count_method: Some("exact"),
                limit: Some(5),
                decision: "refused",
                reason: Some("context_length_exceeded"),
                status: 400,
                upstream_status: None,
                latency: Duration::from_millis(3),
            })
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["request_id"], "r1");
        assert_eq!(line["mode"], "ext_authz_http");
        assert_eq!(line["tokens"], 7);
        assert_eq!(line["count_method"], "exact");
        assert_eq!(line["limit"], 5);
        assert_eq!(line["decision"], "refused");
        assert_eq!(line["reason"], "context_length_exceeded");
        assert_eq!(line["status"], 400);
        assert!(line.get("upstream_status").is_none());
        assert_eq!(line["target"], "prefill_guard::decision");
    }
}
