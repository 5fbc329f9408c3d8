//! Decision logs and process logs, human-readable or JSON lines.
//!
//! Prompts are the tenants' data and the reason this guard exists; nothing
//! here, at any level, is given a body or a prompt. The decision line carries
//! only counts, limits, names and identifiers.
//!
//! Lines leave through [`Sink`]: the request's thread formats its line and
//! hands it to a bounded queue; one `pg-log` thread writes. A slow or stuck
//! reader of stderr (a container runtime behind on its log pipe) then costs
//! dropped lines, counted in `prefill_guard_log_lines_dropped_total`, instead
//! of stalling the event loops that forward every tenant's requests; and the
//! write syscall is off the request's path.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

use tracing::Subscriber;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::EnvFilter;

mod lines;

use lines::{Lines, DECISION_TARGET};

/// How log lines are written (`log_format`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Deserialize,
    serde::Serialize,
    Default,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// The filter when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "info";

/// Lines the queue holds before it drops: at a decision line of ~400 bytes,
/// about 6.5 MB; several seconds of the busiest traffic the guard sustains
/// if stderr stalls, far more than one [`WRITE_INTERVAL`] of it otherwise.
pub const QUEUE_LINES: usize = 16_384;

/// How often the writer thread looks for queued lines: the most a line waits.
const WRITE_INTERVAL: Duration = Duration::from_millis(10);

/// How long [`LogFlush`] waits at exit for queued lines to be written.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Lines dropped because the queue was full, process-wide (one stderr).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Lines [`Sink`] has dropped since the process started.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Installs the process-wide subscriber, writing to stderr (stdout stays free
/// for the CLI's own output) through a [`Sink`]. `RUST_LOG` overrides the
/// default filter. Keep the returned [`LogFlush`] until exit: dropping it
/// writes what is still queued.
pub fn init(format: LogFormat) -> Result<LogFlush, tracing::subscriber::SetGlobalDefaultError> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_FILTER.to_string());
    let ansi = std::io::stderr().is_terminal();
    let (sink, flush) = Sink::spawn(std::io::stderr(), QUEUE_LINES);
    tracing::subscriber::set_global_default(build(format, &filter, sink, ansi))?;
    Ok(flush)
}

enum Message {
    Line(Vec<u8>),
    /// Everything sent before it has been written: acknowledge.
    Flush(SyncSender<()>),
}

/// A [`MakeWriter`] that queues each event's bytes for the `pg-log` thread.
#[derive(Clone)]
pub struct Sink {
    queue: SyncSender<Message>,
}

impl Sink {
    /// Starts the writer thread over `out`, with room for `lines` queued lines.
    pub fn spawn<W: Write + Send + 'static>(out: W, lines: usize) -> (Sink, LogFlush) {
        let (queue, rx) = mpsc::sync_channel(lines);
        let spawned = std::thread::Builder::new()
            .name("pg-log".into())
            .spawn(move || write_lines(rx, out));
        if let Err(e) = spawned {
            // Without the thread nothing would drain the queue; every line
            // would count as dropped. Say so once, where an operator looks.
            eprintln!("prefill-guard: cannot start the log writer thread: {e}");
        }
        (
            Sink {
                queue: queue.clone(),
            },
            LogFlush { queue },
        )
    }
}

fn write_lines<W: Write>(rx: Receiver<Message>, out: W) {
    // The writer polls instead of blocking in `recv`: a blocked receiver must
    // be woken by every send, and on a small VM that wake-up (often another
    // vCPU) cost the request more than the write it replaced. Polling, a send
    // only enqueues; lines wait at most one interval and leave in one write.
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    loop {
        std::thread::sleep(WRITE_INTERVAL);
        loop {
            match rx.try_recv() {
                Ok(Message::Line(bytes)) => {
                    let _ = out.write_all(&bytes);
                }
                Ok(Message::Flush(ack)) => {
                    let _ = out.flush();
                    let _ = ack.send(());
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    let _ = out.flush();
                    return;
                }
            }
        }
        let _ = out.flush();
    }
}

/// One event's line, sent whole when tracing drops the writer.
pub struct SinkLine<'a> {
    sink: &'a Sink,
    buf: Vec<u8>,
}

impl Write for SinkLine<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SinkLine<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = Message::Line(std::mem::take(&mut self.buf));
        match self.sink.queue.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkLine<'a>;
    fn make_writer(&'a self) -> SinkLine<'a> {
        SinkLine {
            sink: self,
            buf: Vec::with_capacity(512),
        }
    }
}

/// Writes what is queued when dropped, waiting at most [`FLUSH_AT_EXIT`]: a
/// stuck stderr must not keep the process from exiting.
pub struct LogFlush {
    queue: SyncSender<Message>,
}

impl LogFlush {
    /// Waits until every line queued before this call is written, or `within`.
    /// False when the time ran out (or the writer is gone).
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (ack, done) = mpsc::sync_channel(1);
        let mut msg = Message::Flush(ack);
        loop {
            match self.queue.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return false,
            }
        }
        done.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_ok()
    }
}

impl Drop for LogFlush {
    fn drop(&mut self) {
        self.flush(FLUSH_AT_EXIT);
    }
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
    let (filter, env) = match EnvFilter::try_new(filter) {
        Ok(env) => (filter, env),
        Err(_) => (DEFAULT_FILTER, EnvFilter::new(DEFAULT_FILTER)),
    };
    // The filter decides from here on; the formatter's own level lets all through.
    let builder = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::TRACE)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Human => filtered(
            builder
                .event_format(Lines::human(tracing_subscriber::fmt::format()))
                .finish(),
            filter,
            env,
        ),
        LogFormat::Json => filtered(
            builder
                .json()
                .event_format(Lines::json(JsonLines::new()))
                .finish(),
            filter,
            env,
        ),
    }
}

/// `subscriber` behind the filter `directives`, which `env` was read from.
///
/// EnvFilter looks for span directives (`[request]=debug`) by taking a read
/// lock on a map shared by every thread at each span enter, exit and close,
/// and a request's span is entered at every poll of its future, from both
/// event loops (criterion `per_request`, request span on one thread: 366 ns
/// with EnvFilter, 240 ns with `Targets`). Plain directives are read as
/// tracing-subscriber's `Targets`, which keeps no span state and enables
/// exactly what EnvFilter's static directives do (it is the same directive
/// set); anything else stays an EnvFilter.
fn filtered<S>(subscriber: S, directives: &str, env: EnvFilter) -> Box<dyn Subscriber + Send + Sync>
where
    S: Subscriber + Send + Sync + 'static,
    Targets: Layer<S>,
    EnvFilter: Layer<S>,
{
    match plain_targets(directives) {
        Some(targets) => Box::new(subscriber.with(targets)),
        None => Box::new(subscriber.with(env)),
    }
}

/// `directives` as `Targets`, when each is a bare level, a bare target or
/// `target=level` spelled in the characters both parsers read alike (no
/// spaces, no spans, no fields), and there is at least one.
fn plain_targets(directives: &str) -> Option<Targets> {
    let plain = |d: &str| {
        let mut parts = d.split('=');
        let simple = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
        };
        parts.next().is_some_and(simple)
            && parts.next().is_none_or(simple)
            && parts.next().is_none()
    };
    // EnvFilter skips empty directives (`info,`); so does this.
    let listed: Vec<&str> = directives.split(',').filter(|d| !d.is_empty()).collect();
    if listed.is_empty() || !listed.iter().all(|d| plain(d)) {
        return None;
    }
    listed.join(",").parse().ok()
}

/// JSON lines: an event inside a request carries the request span (its
/// `request_id`), which ties warnings to their decision line; a root event
/// (the decision line, which has the id as its own field) carries none, so
/// no line states the request id twice. tracing-subscriber's own formatter
/// falls back to the thread's current span for root events.
struct JsonLines {
    in_span: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json>,
    root: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json>,
}

impl JsonLines {
    fn new() -> Self {
        let base = || {
            tracing_subscriber::fmt::format()
                .json()
                .flatten_event(true)
                .with_span_list(false)
        };
        JsonLines {
            in_span: base().with_current_span(true),
            root: base().with_current_span(false),
        }
    }
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if event.is_root() {
            self.root.format_event(ctx, writer, event)
        } else {
            self.in_span.format_event(ctx, writer, event)
        }
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
    /// For a path or method refused as not modelled: its canonical path
    /// (never the query), so the operator sees what clients asked for.
    pub refused_path: Option<&'a str>,
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
/// A root event: it carries the request id itself, so the human format does
/// not print it a second time as the request span's prefix.
pub fn decision(line: &DecisionLine<'_>) {
    tracing::info!(
        target: DECISION_TARGET,
        parent: None,
        request_id = line.request_id,
        mode = line.mode,
        method = line.method,
        route = line.route,
        path = line.refused_path,
        model = line.model,
        tokens = line.tokens.map(|t| t as u64),
        count_method = line.count_method,
        limit = line.limit.map(|l| l as u64),
        decision = line.decision,
        reason = line.reason,
        status = line.status,
        upstream_status = line.upstream_status,
        latency_ms = line.latency.as_micros() as f64 / 1000.0,
        "request decided"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer tests read back; `lines.rs`'s tests use it too.
    #[derive(Clone, Default)]
    pub(super) struct Buf(pub(super) Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What a filter enables, over targets the guard and its libraries log
    /// under (and prefixes of them) at every level.
    fn enabled_matrix(sub: Box<dyn Subscriber + Send + Sync>) -> Vec<bool> {
        macro_rules! each {
            ($($target:literal),*) => {{
                let mut out = Vec::new();
                $(
                    out.push(tracing::enabled!(target: $target, tracing::Level::ERROR));
                    out.push(tracing::enabled!(target: $target, tracing::Level::WARN));
                    out.push(tracing::enabled!(target: $target, tracing::Level::INFO));
                    out.push(tracing::enabled!(target: $target, tracing::Level::DEBUG));
                    out.push(tracing::enabled!(target: $target, tracing::Level::TRACE));
                )*
                out
            }};
        }
        tracing::subscriber::with_default(sub, || {
            each!(
                "prefill_guard",
                "prefill_guard::decision",
                "prefill_guard::server::handler",
                "prefill_guard_count",
                "hyper",
                "hyper::proto::h1",
                "h2",
                "tokio",
                "other"
            )
        })
    }

    /// Plain directives are read as `Targets`, and enable exactly what
    /// EnvFilter enables for them; anything else stays an EnvFilter.
    #[test]
    fn plain_directives_filter_as_env_filter_does() {
        for directives in [
            "info",
            "warn",
            "off",
            "trace",
            "debug,hyper=info",
            "prefill_guard=debug,warn",
            "warn,prefill_guard::decision=off",
            "prefill_guard",
            "hyper::proto=trace,h2=error,info",
            "info,",
            "prefill_guard=4,1",
        ] {
            assert!(plain_targets(directives).is_some(), "{directives}");
            let plain = filtered(
                tracing_subscriber::fmt()
                    .with_max_level(LevelFilter::TRACE)
                    .finish(),
                directives,
                EnvFilter::try_new(directives).expect("valid"),
            );
            let env = tracing_subscriber::fmt()
                .with_env_filter(EnvFilter::try_new(directives).expect("valid"))
                .finish();
            assert_eq!(
                enabled_matrix(plain),
                enabled_matrix(Box::new(env)),
                "{directives}"
            );
        }
        for directives in [
            "",
            ",",
            "info,[request]=debug",
            "[request{request_id=r1}]=trace",
            "prefill_guard[request]=debug",
            " info",
            "info, hyper=warn",
            "=info",
            "hyper=",
            "a=b=c",
            "ünïcode=debug",
        ] {
            assert!(plain_targets(directives).is_none(), "{directives:?}");
        }
    }

    /// A span directive still works: it needs EnvFilter's span state.
    #[test]
    fn span_directives_stay_env_filter() {
        let buf = Buf::default();
        let sink = buf.clone();
        let sub = subscriber(LogFormat::Human, "warn,[request]=debug", move || {
            sink.clone()
        });
        tracing::subscriber::with_default(sub, || {
            tracing::debug!("outside any request");
            let span = tracing::info_span!("request", request_id = "r1");
            let _entered = span.enter();
            tracing::debug!("inside the request");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("inside the request"), "{text}");
        assert!(!text.contains("outside any request"), "{text}");
    }

    #[test]
    fn json_decision_line_has_the_fields() {
        let buf = Buf::default();
        let sink = buf.clone();
        let sub = subscriber(LogFormat::Json, "info", move || sink.clone());
        tracing::subscriber::with_default(sub, || {
            // As the server writes it: inside the request's span.
            let span = tracing::info_span!("request", request_id = "r1");
            let _entered = span.enter();
            tracing::warn!("a warning inside the request");
            decision(&DecisionLine {
                request_id: "r1",
                mode: "ext_authz_http",
                method: "POST",
                route: "/generate",
                refused_path: None,
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
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let (warning, line) = (&lines[0], &lines[1]);
        assert_eq!(warning["span"]["request_id"], "r1", "{text}");
        // The id once: as the decision line's own field, no span object.
        assert_eq!(
            text.lines().nth(1).unwrap().matches("r1").count(),
            1,
            "{text}"
        );
        assert!(line.get("span").is_none(), "{text}");
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

    /// Blocks every write until `release` is sent to: a log reader that stopped.
    struct Stuck {
        release: Receiver<()>,
        out: Buf,
    }

    impl Write for Stuck {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _ = self.release.recv();
            self.out.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn sink_writes_every_line_in_order_by_the_flush() {
        let buf = Buf::default();
        let (sink, flush) = Sink::spawn(buf.clone(), 64);
        let sub = subscriber(LogFormat::Json, "info", sink);
        tracing::subscriber::with_default(sub, || {
            for i in 0..50 {
                tracing::info!(n = i, "line");
            }
        });
        assert!(
            flush.flush(Duration::from_secs(10)),
            "the writer acknowledges the flush"
        );
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let ns: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(ns, (0..50).collect::<Vec<u64>>());
    }

    #[test]
    fn a_stuck_reader_costs_dropped_lines_not_a_stalled_request() {
        let buf = Buf::default();
        let (release, stuck) = mpsc::channel();
        let (sink, flush) = Sink::spawn(
            Stuck {
                release: stuck,
                out: buf.clone(),
            },
            4,
        );
        let before = dropped_lines();
        // In a thread, so that a sink that blocks fails this test instead of hanging it.
        let (done, finished) = mpsc::channel();
        let logger = sink.clone();
        std::thread::spawn(move || {
            let sub = subscriber(LogFormat::Human, "info", logger);
            tracing::subscriber::with_default(sub, || {
                for i in 0..100 {
                    tracing::info!(n = i, "line");
                }
            });
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("logging returned while stderr was stuck");
        let dropped = dropped_lines() - before;
        assert!(dropped > 0, "a full queue drops");
        assert!(
            !flush.flush(Duration::from_millis(50)),
            "a stuck writer cannot confirm"
        );
        // The reader comes back: every line not dropped is written, in order.
        for _ in 0..1000 {
            let _ = release.send(());
        }
        assert!(flush.flush(Duration::from_secs(10)));
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let ns: Vec<u64> = text
            .lines()
            .map(|l| l.rsplit("n=").next().unwrap().parse().unwrap())
            .collect();
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "{ns:?}");
        assert_eq!(
            ns.len() as u64 + dropped,
            100,
            "each line is written or counted as dropped"
        );
    }
}
