//! Soak run (issue 17, item 6): the release `prefill-guard` binary under
//! tens of minutes of mixed, partly hostile traffic, in front of an upstream
//! that injects faults, watched for leaks of memory, descriptors and prompts.
//!
//! Not part of CI. Run it with `bench/soak.sh` (30 minutes by default;
//! `bench/soak.sh --seconds 120` for a short run, `--help` for the knobs).
//!
//! In one process it
//! * writes the demo model (a word-level tokenizer, one token per word, and a
//!   ChatML template that adds 5 tokens around one user message) and checks
//!   with `prefill-guard count` that a prompt built for `limit - 1` and for
//!   `limit` tokens really has that many, so every prompt below is known to
//!   be under or over the limit;
//! * serves a mock SGLang on 127.0.0.1 (plain HTTP/1.1 written by hand, so
//!   it can reset a connection mid-response) that answers chats as JSON or
//!   SSE and injects the fault named by a marker word in the prompt
//!   (`FAULT500`, `FAULTRESET`, `FAULTSTALL`, `FAULTHANG`, `FAULTCLOSE`). It
//!   records each body it receives: one carrying `OVERLIMIT` is a leak,
//!   one carrying `MALFORMED` or `SLOWBODY` should never have been
//!   forwarded either, and the `REQ<n>` word, unique per request, catches a
//!   request forwarded twice;
//! * starts the guard binary with short client and upstream timeouts and
//!   drives `--clients` paced clients at about `--rate` requests per second
//!   over HTTP/1.1 and h2c: chats under the limit (some streaming, some at
//!   exactly `limit - 1`), chats carrying a fault marker, chats over the
//!   limit (just over, exactly at it, and 0.3–1.2 MB), malformed bodies,
//!   request heads sent a byte at a time, bodies that stall, and connections
//!   that send nothing;
//! * reads the guard's RSS and open descriptors every second and prints
//!   them every `--sample-secs`, with its open client connections and
//!   requests in flight; at the end a table of the answers by kind, then
//!   the verdict.
//!
//! It exits 1 if an over-limit prompt (or a malformed or unfinished body)
//! reached the upstream, if a request reached it twice, if a legitimate
//! request without a fault marker was not answered 2xx in full, if a
//! faulted request got no end at all, if the guard died, if its client
//! connections did not drain after the traffic stopped, or if RSS or
//! descriptors kept growing (see [`growth`]); 2 if the run could not be set
//! up. Prompts are synthetic (`REQ<n> MARKER hello world ...`) and are never
//! printed.
//!
//! `--sabotage-limit N` is a self-test of the harness: the guard is started
//! with limit N while the prompts are still built around `--limit`, so the
//! over-limit prompts get through and the run must fail with leaks.
#![allow(
    clippy::unwrap_used,
    reason = "a measuring harness run by hand: a setup that fails should stop it loudly"
)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Child;

#[derive(Parser, Debug)]
#[command(
    about = "Soak run of prefill-guard (issue 17): mixed and hostile traffic against the \
                   release binary in front of a faulty upstream"
)]
struct Args {
    /// Seconds of traffic.
    #[arg(long, env = "SOAK_SECONDS", default_value_t = 1800)]
    seconds: u64,
    /// The guard binary.
    #[arg(
        long,
        env = "SOAK_GUARD",
        default_value = "target/release/prefill-guard"
    )]
    guard: PathBuf,
    /// Concurrent clients, each sending one request at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Requests per second aimed at over all clients; slow clients and
    /// faults hold a client longer, so the achieved rate is lower.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// The guard's max_req_input_len; prompts are built around it.
    #[arg(long, default_value_t = 2048)]
    limit: usize,
    /// Seconds between two printed samples of RSS and descriptors (they
    /// are taken every second).
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Change the share of a kind of traffic, in parts (default: legit=55,
    /// boundary=3, fault=7, over=12, over-at-limit=3, over-huge=1,
    /// malformed=6, slow-head=4, slow-body=4, silent=5), e.g.
    /// `--mix over-huge=0,slow-head=10`.
    #[arg(long, value_delimiter = ',', value_name = "KIND=PARTS")]
    mix: Vec<String>,
    /// Seed of the traffic mix (default: from the clock; printed, to replay a run).
    #[arg(long)]
    seed: Option<u64>,
    /// Self-test of the harness only: start the guard with this limit
    /// instead of --limit. Over-limit prompts then reach the upstream and
    /// the run must fail.
    #[arg(long)]
    sabotage_limit: Option<usize>,
}

// The guard's timeouts, short so that slow clients and faults resolve
// within seconds and a long run cycles through many of them.
const HEAD_TIMEOUT_MS: u64 = 1000;
const BODY_IDLE_TIMEOUT_MS: u64 = 1000;
const BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Above the clients' pool idle time ([`CLIENT_POOL_IDLE`]), so the guard
/// never closes a pooled connection just as a client reuses it: that race
/// would fail a legitimate request for a reason that is not the guard's.
const KEEPALIVE_IDLE_MS: u64 = 5000;
const UPSTREAM_IDLE_SECS: u64 = 2;
const UPSTREAM_RESPONSE_SECS: u64 = 3;
const CLIENT_POOL_IDLE: Duration = Duration::from_secs(2);

/// How long any client waits for an answer: far past every timeout of the
/// guard, so reaching it means the guard left a request hanging.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// Growth allowed between the second and the last quarter of the run.
const RSS_GROWTH_FACTOR: f64 = 1.25;
const RSS_GROWTH_SLACK_KIB: u64 = 32 * 1024;
const FD_GROWTH_SLACK: u64 = 64;
/// RSS and descriptors are read this often; printed every `--sample-secs`.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Fewer samples than this (a minute's) say nothing about a trend: the check is skipped.
const MIN_SAMPLES_FOR_TREND: usize = 60;

/// At most this many failure reasons are printed.
const MAX_REASONS: usize = 8;

// === traffic ===

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Legit,
    Boundary,
    Fault,
    OverLimit,
    OverBoundary,
    OverHuge,
    Malformed,
    SlowHead,
    SlowBody,
    Silent,
}

/// The default mix, in parts of 100.
const MIX: [(Kind, u64); 10] = [
    (Kind::Legit, 55),
    (Kind::Boundary, 3),
    (Kind::Fault, 7),
    (Kind::OverLimit, 12),
    (Kind::OverBoundary, 3),
    (Kind::OverHuge, 1),
    (Kind::Malformed, 6),
    (Kind::SlowHead, 4),
    (Kind::SlowBody, 4),
    (Kind::Silent, 5),
];

impl Kind {
    /// Its name for `--mix`.
    fn key(self) -> &'static str {
        match self {
            Kind::Legit => "legit",
            Kind::Boundary => "boundary",
            Kind::Fault => "fault",
            Kind::OverLimit => "over",
            Kind::OverBoundary => "over-at-limit",
            Kind::OverHuge => "over-huge",
            Kind::Malformed => "malformed",
            Kind::SlowHead => "slow-head",
            Kind::SlowBody => "slow-body",
            Kind::Silent => "silent",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Legit => "legit",
            Kind::Boundary => "legit, limit-1",
            Kind::Fault => "legit + fault",
            Kind::OverLimit => "over limit",
            Kind::OverBoundary => "over, = limit",
            Kind::OverHuge => "over, 0.3-1.2MB",
            Kind::Malformed => "malformed",
            Kind::SlowHead => "slow head",
            Kind::SlowBody => "stalled body",
            Kind::Silent => "silent conn",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Legit | Kind::Boundary => "200",
            Kind::Fault => "an end",
            Kind::OverLimit | Kind::OverBoundary | Kind::OverHuge | Kind::Malformed => "400",
            Kind::SlowHead => "closed",
            Kind::SlowBody => "408",
            Kind::Silent => "-",
        }
    }

    /// Must be answered 2xx in full.
    fn legit(self) -> bool {
        matches!(self, Kind::Legit | Kind::Boundary)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Answers 500.
    Status500,
    /// Starts the answer, then resets the connection.
    Reset,
    /// Starts the answer, then goes silent past the guard's idle timeout.
    Stall,
    /// Never answers: past the guard's response timeout.
    Hang,
    /// Closes the connection without answering.
    Close,
}

const FAULTS: [(Fault, &str, &str); 5] = [
    (Fault::Status500, "FAULT500", "500"),
    (Fault::Reset, "FAULTRESET", "reset"),
    (Fault::Stall, "FAULTSTALL", "stall"),
    (Fault::Hang, "FAULTHANG", "hang"),
    (Fault::Close, "FAULTCLOSE", "close"),
];

/// The marker of every prompt over the limit.
const OVER_MARK: &str = "OVERLIMIT";
/// Markers of bodies the guard must refuse before counting: malformed, or never finished.
const REFUSED_MARKS: [&str; 2] = ["MALFORMED", "SLOWBODY"];

/// splitmix64: enough randomness for a traffic mix, replayable from a seed.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn kind(&mut self, mix: &[(Kind, u64)]) -> Kind {
        let total: u64 = mix.iter().map(|(_, w)| w).sum();
        let mut at = self.next_u64() % total;
        for &(kind, weight) in mix {
            if at < weight {
                return kind;
            }
            at -= weight;
        }
        unreachable!("the weights sum to total")
    }
}

/// A chat of exactly `tokens` tokens for the demo model: the template adds
/// 5 around the one user message, and each word is one token, the id and
/// the marker included.
fn chat(id: u64, marker: &str, tokens: usize, stream: bool) -> Bytes {
    let words = tokens - 5;
    let mut content = String::with_capacity(words * 6 + 32);
    content.push_str(&format!("REQ{id} {marker}"));
    for i in 0..words - 2 {
        content.push_str(if i % 2 == 0 { " hello" } else { " world" });
    }
    Bytes::from(
        json!({
            "model": "demo",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 16,
            "stream": stream,
        })
        .to_string(),
    )
}

/// Tokens of a chat under the limit: mostly short, some long.
fn legit_tokens(rng: &mut Rng, limit: usize) -> usize {
    if rng.chance(0.8) {
        rng.range(7, 70.min(limit - 1))
    } else {
        rng.range(7, limit - 1)
    }
}

/// A body the guard must refuse with 400 before counting anything. Each
/// carries an id and `MALFORMED`, so the upstream would notice one.
fn malformed(id: u64, rng: &mut Rng) -> Bytes {
    let msg = format!(r#"{{"role":"user","content":"REQ{id} MALFORMED hello world"}}"#);
    let body = match rng.below(6) {
        // Truncated.
        0 => format!(r#"{{"model":"demo","messages":[{msg}]"#),
        // Duplicate key at the top and inside a message.
        1 => format!(r#"{{"model":"demo","messages":[{msg}],"model":"demo"}}"#),
        2 => format!(
            r#"{{"model":"demo","messages":[{{"role":"user","content":"REQ{id} MALFORMED hello","content":"hello"}}]}}"#
        ),
        // Trailing bytes after the value.
        3 => format!(r#"{{"model":"demo","messages":[{msg}]}} x"#),
        4 => format!(r#"{{"model":"demo","temperature":NaN,"messages":[{msg}]}}"#),
        // A lone surrogate.
        _ => format!(
            r#"{{"model":"demo","messages":[{{"role":"user","content":"REQ{id} MALFORMED \ud800"}}]}}"#
        ),
    };
    Bytes::from(body)
}

// === what a client saw ===

#[derive(Debug)]
enum End {
    /// A whole JSON body, or an SSE stream ending in `[DONE]`.
    Whole,
    /// An SSE stream ending in an error event.
    ErrorEvent,
    /// An SSE stream that ended with neither.
    Unfinished,
    /// The body was cut.
    Cut,
    NotJson,
}

#[derive(Debug)]
enum Answer {
    Http(u16, End),
    /// The guard closed the connection without an answer.
    Closed,
    /// The client closed first (a silent connection that gave up).
    Left,
    /// Nothing within [`ANSWER_DEADLINE`].
    Nothing,
    /// The request could not be sent or the answer not read.
    Broken(String),
}

impl Answer {
    fn label(&self) -> String {
        match self {
            Answer::Http(s, End::Whole) => s.to_string(),
            Answer::Http(s, End::ErrorEvent) => format!("{s}+error event"),
            Answer::Http(s, End::Unfinished) => format!("{s}+unfinished"),
            Answer::Http(s, End::Cut) => format!("{s}+cut"),
            Answer::Http(s, End::NotJson) => format!("{s}+not JSON"),
            Answer::Closed => "closed".into(),
            Answer::Left => "client left".into(),
            Answer::Nothing => "NO ANSWER".into(),
            Answer::Broken(_) => "broken".into(),
        }
    }

    fn success(&self) -> bool {
        matches!(self, Answer::Http(200..=299, End::Whole))
    }

    /// The label and, for a broken request, why (never the prompt).
    fn detail(&self) -> String {
        match self {
            Answer::Broken(why) => format!("broken: {why}"),
            other => other.label(),
        }
    }
}

fn judge(body: &[u8], sse: bool) -> End {
    if !sse {
        return match serde_json::from_slice::<Value>(body) {
            Ok(_) => End::Whole,
            Err(_) => End::NotJson,
        };
    }
    let text = String::from_utf8_lossy(body);
    if text.contains("data: [DONE]") {
        End::Whole
    } else if text.contains("data: {\"error\"") {
        End::ErrorEvent
    } else {
        End::Unfinished
    }
}

/// The status of a raw HTTP/1 answer (`HTTP/1.1 408 ...`), 0 if unreadable.
fn status_of(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads until the guard closes: its answer, if any.
async fn read_to_close(s: &mut TcpStream) -> Answer {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + ANSWER_DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return Answer::Nothing,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    if got.is_empty() {
        Answer::Closed
    } else {
        Answer::Http(status_of(&got), End::Whole)
    }
}

// === the clients ===

type H2Client = Client<HttpConnector, Full<Bytes>>;

struct Ctx {
    proxy: SocketAddr,
    url: String,
    http1: reqwest::Client,
    h2c: H2Client,
    limit: usize,
    mix: Vec<(Kind, u64)>,
    stop_at: tokio::time::Instant,
    /// Set when the guard dies: the clients stop early.
    halted: AtomicBool,
    next_id: AtomicU64,
    tally: Tally,
}

async fn client(ctx: Arc<Ctx>, mut rng: Rng, period: Duration) {
    // Staggered, so the clients do not fire in step.
    tokio::time::sleep(period.mul_f64((rng.next_u64() % 1000) as f64 / 1000.0)).await;
    let mut tick = tokio::time::interval(period);
    // A client held by a slow request does not then fire a burst to catch up.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if tokio::time::Instant::now() >= ctx.stop_at || ctx.halted.load(Ordering::Relaxed) {
            return;
        }
        let kind = rng.kind(&ctx.mix);
        one(&ctx, kind, &mut rng).await;
    }
}

async fn one(ctx: &Ctx, kind: Kind, rng: &mut Rng) {
    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let raw = matches!(kind, Kind::SlowHead | Kind::SlowBody | Kind::Silent);
    let h2c = !raw && rng.chance(0.2);
    let stream = !raw && rng.chance(if kind == Kind::Fault { 0.5 } else { 0.3 });
    let mut fault = None;
    let limit = ctx.limit;
    let answer = match kind {
        Kind::SlowHead => slow_head(ctx).await,
        Kind::SlowBody => stalled_body(ctx, id, rng).await,
        Kind::Silent => silent(ctx, rng).await,
        _ => {
            let body = match kind {
                Kind::Legit => chat(id, "LEGIT", legit_tokens(rng, limit), stream),
                Kind::Boundary => chat(id, "LEGIT", limit - 1, stream),
                Kind::Fault => {
                    let (_, marker, name) = FAULTS[rng.below(FAULTS.len())];
                    fault = Some(name);
                    chat(id, marker, legit_tokens(rng, limit), stream)
                }
                Kind::OverLimit => chat(id, OVER_MARK, limit + rng.range(1, 500), stream),
                Kind::OverBoundary => chat(id, OVER_MARK, limit, stream),
                Kind::OverHuge => chat(id, OVER_MARK, limit + rng.range(50_000, 200_000), stream),
                _ => malformed(id, rng),
            };
            if h2c {
                post_h2c(ctx, body).await
            } else {
                post_http1(ctx, body).await
            }
        }
    };
    let how = Sent {
        kind,
        id,
        fault,
        h2c,
        stream,
    };
    ctx.tally.record(&how, &answer, started.elapsed());
}

async fn post_http1(ctx: &Ctx, body: Bytes) -> Answer {
    let sent = ctx
        .http1
        .post(&ctx.url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Answer::Nothing,
        Err(e) => return Answer::Broken(prefill_guard::sglang::error_chain(&e)),
    };
    let status = resp.status().as_u16();
    let sse = is_sse(resp.headers());
    match resp.bytes().await {
        Ok(b) => Answer::Http(status, judge(&b, sse)),
        Err(e) if e.is_timeout() => Answer::Nothing,
        Err(_) => Answer::Http(status, End::Cut),
    }
}

async fn post_h2c(ctx: &Ctx, body: Bytes) -> Answer {
    let req = http::Request::post(&ctx.url)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("a valid request");
    let exchange = async {
        let resp = match ctx.h2c.request(req).await {
            Ok(r) => r,
            Err(e) => return Answer::Broken(prefill_guard::sglang::error_chain(&e)),
        };
        let status = resp.status().as_u16();
        let sse = is_sse(resp.headers());
        match resp.into_body().collect().await {
            Ok(c) => Answer::Http(status, judge(&c.to_bytes(), sse)),
            Err(_) => Answer::Http(status, End::Cut),
        }
    };
    tokio::time::timeout(ANSWER_DEADLINE, exchange)
        .await
        .unwrap_or(Answer::Nothing)
}

fn is_sse(headers: &http::HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// A request head that never ends: a byte every 250 ms, each well inside
/// any per-read timer, so only the guard's deadline for the whole head can
/// close it.
async fn slow_head(ctx: &Ctx) -> Answer {
    let Ok(mut s) = TcpStream::connect(ctx.proxy).await else {
        return Answer::Broken("connect".into());
    };
    if s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: soak\r\nx-soak-pad: ")
        .await
        .is_err()
    {
        return Answer::Closed;
    }
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while started.elapsed() < ANSWER_DEADLINE {
        match tokio::time::timeout(Duration::from_millis(250), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return if got.is_empty() {
                    Answer::Closed
                } else {
                    Answer::Http(status_of(&got), End::Whole)
                };
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => {
                if s.write_all(b"a").await.is_err() {
                    return Answer::Closed;
                }
            }
        }
    }
    Answer::Nothing
}

/// A whole head, half a body, maybe a few more bytes at gaps shorter than
/// the idle timeout (a slow upload is not cut, only silence is), then
/// silence.
async fn stalled_body(ctx: &Ctx, id: u64, rng: &mut Rng) -> Answer {
    let body = chat(id, "SLOWBODY", legit_tokens(rng, ctx.limit), false);
    let Ok(mut s) = TcpStream::connect(ctx.proxy).await else {
        return Answer::Broken("connect".into());
    };
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: soak\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    let half = body.len() / 2;
    if s.write_all(head.as_bytes()).await.is_err() || s.write_all(&body[..half]).await.is_err() {
        return Answer::Closed;
    }
    for i in 0..rng.below(3) {
        tokio::time::sleep(Duration::from_millis(BODY_IDLE_TIMEOUT_MS / 3)).await;
        if s.write_all(&body[half + i..half + i + 1]).await.is_err() {
            break;
        }
    }
    read_to_close(&mut s).await
}

/// A connection that sends nothing: closed at once, after a moment, or
/// held until the guard closes it.
async fn silent(ctx: &Ctx, rng: &mut Rng) -> Answer {
    let Ok(mut s) = TcpStream::connect(ctx.proxy).await else {
        return Answer::Broken("connect".into());
    };
    match rng.below(3) {
        0 => Answer::Left,
        1 => {
            tokio::time::sleep(Duration::from_millis(rng.range(10, 500) as u64)).await;
            Answer::Left
        }
        _ => read_to_close(&mut s).await,
    }
}

// === the tally ===

struct Sent {
    kind: Kind,
    id: u64,
    fault: Option<&'static str>,
    h2c: bool,
    stream: bool,
}

#[derive(Default)]
struct Tally(Mutex<Counts>);

#[derive(Default)]
struct Counts {
    sent: BTreeMap<Kind, u64>,
    answers: BTreeMap<Kind, BTreeMap<String, u64>>,
    millis: BTreeMap<Kind, Vec<u32>>,
    h2c: u64,
    legit_failed: u64,
    fault_unanswered: u64,
    reasons: Vec<String>,
    /// Ids of legitimate requests answered 2xx: each must have reached the upstream.
    answered: Vec<u64>,
}

impl Tally {
    fn record(&self, how: &Sent, answer: &Answer, took: Duration) {
        let label = match how.fault {
            Some(f) => format!("{f}: {}", answer.label()),
            None => answer.label(),
        };
        let mut c = self.0.lock().unwrap();
        *c.sent.entry(how.kind).or_default() += 1;
        *c.answers
            .entry(how.kind)
            .or_default()
            .entry(label)
            .or_default() += 1;
        c.millis
            .entry(how.kind)
            .or_default()
            .push(took.as_millis().min(u32::MAX as u128) as u32);
        c.h2c += u64::from(how.h2c);
        let failed = if how.kind.legit() {
            if answer.success() {
                c.answered.push(how.id);
                false
            } else {
                c.legit_failed += 1;
                true
            }
        } else if how.fault.is_some() && matches!(answer, Answer::Nothing) {
            c.fault_unanswered += 1;
            true
        } else {
            false
        };
        if failed && c.reasons.len() < MAX_REASONS {
            let reason = format!(
                "REQ{} ({}{}, {}{}) after {} ms: {}",
                how.id,
                how.kind.name(),
                how.fault.map(|f| format!(" {f}")).unwrap_or_default(),
                if how.h2c { "h2c" } else { "HTTP/1.1" },
                if how.stream { ", stream" } else { "" },
                took.as_millis(),
                answer.detail()
            );
            c.reasons.push(reason);
        }
    }

    fn total(&self) -> u64 {
        self.0.lock().unwrap().sent.values().sum()
    }
}

// === the mock SGLang ===

#[derive(Default)]
struct Upstream(Mutex<Arrivals>);

#[derive(Default)]
struct Arrivals {
    total: u64,
    per_id: HashMap<u64, u32>,
    by_marker: BTreeMap<String, u64>,
    /// Bodies carrying `OVERLIMIT`.
    over_limit: u64,
    /// Bodies carrying `MALFORMED` or `SLOWBODY`.
    refused_kinds: u64,
    /// Requests without a `REQ<n>` word, or not framed by Content-Length.
    unidentified: u64,
}

impl Upstream {
    /// Records a body; returns the fault it asks for and whether it streams.
    fn record(&self, body: &[u8]) -> (Option<Fault>, bool) {
        let tag = tag_of(body);
        let over = contains(body, OVER_MARK.as_bytes());
        let refused = REFUSED_MARKS.iter().any(|m| contains(body, m.as_bytes()));
        let stream = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("stream")?.as_bool())
            .unwrap_or(false);
        let mut a = self.0.lock().unwrap();
        a.total += 1;
        a.over_limit += u64::from(over);
        a.refused_kinds += u64::from(refused);
        let Some((id, marker)) = tag else {
            a.unidentified += 1;
            return (None, stream);
        };
        *a.per_id.entry(id).or_default() += 1;
        *a.by_marker.entry(marker.clone()).or_default() += 1;
        let fault = FAULTS
            .iter()
            .find(|(_, m, _)| *m == marker)
            .map(|(f, _, _)| *f);
        (fault, stream)
    }

    fn unidentified(&self) {
        let mut a = self.0.lock().unwrap();
        a.total += 1;
        a.unidentified += 1;
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The `REQ<n> MARKER` that starts every prompt.
fn tag_of(body: &[u8]) -> Option<(u64, String)> {
    let at = body
        .windows(4)
        .position(|w| w[..3] == *b"REQ" && w[3].is_ascii_digit())?;
    let rest = &body[at + 3..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    let rest = rest[digits..].strip_prefix(b" ")?;
    let len = rest
        .iter()
        .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        .count();
    Some((id, String::from_utf8_lossy(&rest[..len]).into_owned()))
}

async fn start_upstream() -> std::io::Result<(SocketAddr, Arc<Upstream>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let upstream = Arc::new(Upstream::default());
    let state = upstream.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                // Out of descriptors, say: the guard sees refused connects (502).
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(upstream_conn(s, state.clone()));
        }
    });
    Ok((addr, upstream))
}

/// One keep-alive connection from the guard, HTTP/1.1 by hand.
async fn upstream_conn(mut s: TcpStream, up: Arc<Upstream>) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 64 * 1024 {
                return;
            }
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        if head.contains("\r\ntransfer-encoding:") {
            // The guard forwards the canonical body with a Content-Length;
            // anything else is worth seeing in the report, not parsing.
            up.unidentified();
            let _ = s
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            match s.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let request = buf.split_to(head_end + len);
        let (fault, stream) = up.record(&request[head_end..]);
        match respond(s, fault, stream).await {
            Some(kept) => s = kept,
            None => return,
        }
    }
}

const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
const PARTIAL_JSON_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n{\"id\":\"soak\",";

fn sse_chunk(data: &str) -> String {
    let event = format!("data: {data}\n\n");
    format!("{:x}\r\n{event}\r\n", event.len())
}

fn delta(i: usize) -> String {
    json!({"id": "soak", "object": "chat.completion.chunk", "model": "demo",
           "choices": [{"index": 0, "delta": {"content": format!("w{i}")}, "finish_reason": null}]})
    .to_string()
}

/// Answers one request, or injects its fault. `None`: the connection is done.
async fn respond(mut s: TcpStream, fault: Option<Fault>, stream: bool) -> Option<TcpStream> {
    match (fault, stream) {
        (None, false) => {
            let body = json!({"id": "soak", "object": "chat.completion", "model": "demo",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
            .to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).await.ok()?;
        }
        (None, true) => {
            s.write_all(SSE_HEAD.as_bytes()).await.ok()?;
            for i in 0..3 {
                s.write_all(sse_chunk(&delta(i)).as_bytes()).await.ok()?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let tail = format!("{}0\r\n\r\n", sse_chunk("[DONE]"));
            s.write_all(tail.as_bytes()).await.ok()?;
        }
        (Some(Fault::Status500), _) => {
            let body =
                r#"{"error":{"message":"injected fault","type":"InternalServerError","code":500}}"#;
            let answer = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).await.ok()?;
        }
        (Some(Fault::Reset), _) => {
            let _ = s.write_all(partial(stream).as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            reset(s);
            return None;
        }
        (Some(Fault::Stall), _) => {
            let _ = s.write_all(partial(stream).as_bytes()).await;
            until_closed(&mut s).await;
            return None;
        }
        (Some(Fault::Hang), _) => {
            until_closed(&mut s).await;
            return None;
        }
        (Some(Fault::Close), _) => return None,
    }
    Some(s)
}

/// The start of an answer: headers and one event, or headers and part of a body.
fn partial(stream: bool) -> String {
    if stream {
        format!("{SSE_HEAD}{}", sse_chunk(&delta(0)))
    } else {
        PARTIAL_JSON_HEAD.to_string()
    }
}

/// Holds a connection until the guard gives up on it (or a generous cap).
async fn until_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(ANSWER_DEADLINE * 2, async {
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    })
    .await;
}

/// Closes with RST, as a crashed SGLang would.
#[allow(deprecated)] // linger 0 is the point: the close is a reset, not a drain.
fn reset(s: TcpStream) {
    let _ = s.set_linger(Some(Duration::ZERO));
    drop(s);
}

// === the guard process ===

#[derive(Default)]
struct GuardLog {
    lines: AtomicU64,
    warnings: AtomicU64,
    errors: AtomicU64,
    /// The first few error messages and any line that is not JSON (a panic).
    notable: Mutex<Vec<String>>,
}

struct Guard {
    child: Child,
    pid: u32,
    proxy: SocketAddr,
    admin: SocketAddr,
    log: Arc<GuardLog>,
}

async fn spawn_guard(
    args: &Args,
    model: &Path,
    upstream: SocketAddr,
    limit: usize,
) -> Result<Guard, String> {
    let mut child = tokio::process::Command::new(&args.guard)
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .arg("--upstream")
        .arg(format!("http://{upstream}"))
        .arg("--tokenizer")
        .arg(model)
        .args(["--served-model-name", "demo", "--log-format", "json"])
        .arg("--max-req-input-len")
        .arg(limit.to_string())
        .arg("--header-read-timeout-ms")
        .arg(HEAD_TIMEOUT_MS.to_string())
        .arg("--body-idle-timeout-ms")
        .arg(BODY_IDLE_TIMEOUT_MS.to_string())
        .arg("--body-read-timeout-ms")
        .arg(BODY_READ_TIMEOUT_MS.to_string())
        .arg("--keepalive-idle-timeout-ms")
        .arg(KEEPALIVE_IDLE_MS.to_string())
        .arg("--upstream-idle-timeout-secs")
        .arg(UPSTREAM_IDLE_SECS.to_string())
        .arg("--upstream-response-timeout-secs")
        .arg(UPSTREAM_RESPONSE_SECS.to_string())
        .args(["--upstream-connect-timeout-ms", "2000"])
        // Every client connects from 127.0.0.1.
        .args(["--max-connections-per-client", "0"])
        .args(["--shutdown-grace-secs", "5"])
        // The "serving" line, which carries the ports, is at info.
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args.guard.display()))?;
    let pid = child.id().ok_or("the guard exited at once")?;
    let log = Arc::new(GuardLog::default());
    let (serving_tx, serving_rx) = tokio::sync::oneshot::channel::<Value>();
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let sink = log.clone();
    // Read to the end, always: a full pipe would stall the guard's logging.
    tokio::spawn(async move {
        let mut serving_tx = Some(serving_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lines.fetch_add(1, Ordering::Relaxed);
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                let mut notable = sink.notable.lock().unwrap();
                if notable.len() < 5 {
                    notable.push(line.chars().take(300).collect());
                }
                continue;
            };
            if v["message"] == "prefill-guard serving" {
                if let Some(tx) = serving_tx.take() {
                    let _ = tx.send(v);
                }
                continue;
            }
            match v["level"].as_str() {
                Some("WARN") => {
                    sink.warnings.fetch_add(1, Ordering::Relaxed);
                }
                Some("ERROR") => {
                    sink.errors.fetch_add(1, Ordering::Relaxed);
                    let mut notable = sink.notable.lock().unwrap();
                    if notable.len() < 5 {
                        notable.push(format!("ERROR {}", v["message"]));
                    }
                }
                _ => {}
            }
        }
    });
    let serving = tokio::time::timeout(Duration::from_secs(60), serving_rx)
        .await
        .map_err(|_| "the guard did not start serving within 60 s".to_string())?
        .map_err(|_| {
            format!(
                "the guard exited before serving: {:?}",
                log.notable.lock().unwrap()
            )
        })?;
    let addr = |key: &str| -> Result<SocketAddr, String> {
        serving[key]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no {key} in the serving line"))
    };
    Ok(Guard {
        proxy: addr("listen")?,
        admin: addr("admin_listen")?,
        child,
        pid,
        log,
    })
}

/// Asks the binary's `count` command for the two prompts at the limit and
/// checks the prompt builder's arithmetic.
fn check_counts(guard: &Path, model: &Path, dir: &Path, limit: usize) -> Result<(), String> {
    let under = dir.join("under.json");
    let at = dir.join("at.json");
    std::fs::write(&under, chat(0, "LEGIT", limit - 1, false)).map_err(|e| e.to_string())?;
    std::fs::write(&at, chat(0, OVER_MARK, limit, true)).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(guard)
        .arg("count")
        .arg("--tokenizer")
        .arg(model)
        .arg(&under)
        .arg(&at)
        .output()
        .map_err(|e| format!("cannot run {} count: {e}", guard.display()))?;
    let counts: Vec<Option<u64>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).ok()?["tokens"].as_u64())
        .collect();
    let want = vec![Some(limit as u64 - 1), Some(limit as u64)];
    if counts != want {
        return Err(format!(
            "`prefill-guard count` gives {counts:?} tokens for prompts built as {want:?}"
        ));
    }
    Ok(())
}

// === sampling ===

#[derive(Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
    conns: Option<f64>,
    in_flight: Option<f64>,
}

fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

async fn metric(http: &reqwest::Client, admin: SocketAddr, series: &str) -> Option<f64> {
    let text = http
        .get(format!("http://{admin}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))?
        .trim()
        .parse()
        .ok()
}

const CONNS: &str = "prefill_guard_open_connections{listener=\"proxy\"}";
const IN_FLIGHT: &str = "prefill_guard_in_flight_requests";

async fn sample(http: &reqwest::Client, guard: &Guard, at: Duration) -> Option<Sample> {
    Some(Sample {
        at,
        rss_kib: rss_kib(guard.pid)?,
        fds: open_fds(guard.pid)?,
        conns: metric(http, guard.admin, CONNS).await,
        in_flight: metric(http, guard.admin, IN_FLIGHT).await,
    })
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn gauge(v: Option<f64>) -> String {
    v.map_or("?".into(), |v| format!("{v:.0}"))
}

fn print_sample(s: &Sample, sent: u64, upstream: &Upstream) {
    let (arrived, leaks) = {
        let a = upstream.0.lock().unwrap();
        (a.total, a.over_limit)
    };
    println!(
        "[{:>5} s] rss {:>10}  fds {:>5}  client conns {:>5}  in flight {:>4}  sent {:>8}  upstream {:>8}  leaks {}",
        s.at.as_secs(),
        mib(s.rss_kib),
        s.fds,
        gauge(s.conns),
        gauge(s.in_flight),
        sent,
        arrived,
        leaks
    );
}

/// Did RSS or descriptors keep growing? The first quarter of the samples
/// is warm-up (pools and allocator arenas filling); the peak of the last
/// quarter is compared with the peak of the second. Peaks, not means: RSS
/// swings with the large bodies in flight at the moment of a sample, a
/// window of many samples catches the same swings in both quarters, and a
/// leak raises the peak of every later window.
struct Growth {
    text: String,
    failed: bool,
}

fn growth(samples: &[Sample]) -> Option<Growth> {
    let n = samples.len();
    if n < MIN_SAMPLES_FOR_TREND {
        return None;
    }
    let q = n / 4;
    let (second, last) = (&samples[q..2 * q], &samples[n - q..]);
    let peak = |w: &[Sample], f: fn(&Sample) -> u64| w.iter().map(f).max().unwrap_or(0);
    let (rss_base, rss_last) = (peak(second, |s| s.rss_kib), peak(last, |s| s.rss_kib));
    let (fd_base, fd_last) = (peak(second, |s| s.fds), peak(last, |s| s.fds));
    let rss_bound = (rss_base as f64 * RSS_GROWTH_FACTOR) as u64 + RSS_GROWTH_SLACK_KIB;
    let fd_bound = fd_base + FD_GROWTH_SLACK;
    let text = format!(
        "peak of the last quarter ({}-{} s) vs the second ({}-{} s), {q} samples each: rss {} vs {} (bound {} = x{RSS_GROWTH_FACTOR} + {}), \
         fds {fd_last} vs {fd_base} (bound {fd_bound} = +{FD_GROWTH_SLACK})",
        last[0].at.as_secs(),
        last[q - 1].at.as_secs(),
        second[0].at.as_secs(),
        second[q - 1].at.as_secs(),
        mib(rss_last),
        mib(rss_base),
        mib(rss_bound),
        mib(RSS_GROWTH_SLACK_KIB),
    );
    Some(Growth {
        text,
        failed: rss_last > rss_bound || fd_last > fd_bound,
    })
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The default mix with `--mix` applied.
fn mix(overrides: &[String]) -> Result<Vec<(Kind, u64)>, String> {
    let mut mix = MIX.to_vec();
    for o in overrides {
        let (key, parts) = o
            .split_once('=')
            .ok_or_else(|| format!("--mix {o}: expected KIND=PARTS"))?;
        let parts: u64 = parts
            .parse()
            .map_err(|_| format!("--mix {o}: PARTS is not a number"))?;
        let slot = mix
            .iter_mut()
            .find(|(k, _)| k.key() == key)
            .ok_or_else(|| format!("--mix {o}: unknown kind {key:?}"))?;
        slot.1 = parts;
    }
    if mix.iter().all(|(_, w)| *w == 0) {
        return Err("--mix leaves no traffic".into());
    }
    Ok(mix)
}

// === the run ===

fn main() -> ExitCode {
    let args = Args::parse();
    if args.limit < 80 {
        eprintln!("soak: --limit must be at least 80");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<bool, String> {
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let guard_limit = args.sabotage_limit.unwrap_or(args.limit);
    let mix = mix(&args.mix)?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let model = dir.path().join("model");
    prefill_guard::demo::write_demo_model(&model).map_err(|e| e.to_string())?;
    check_counts(&args.guard, &model, dir.path(), args.limit)?;
    let (upstream_addr, upstream) = start_upstream().await.map_err(|e| e.to_string())?;
    let mut guard = spawn_guard(&args, &model, upstream_addr, guard_limit).await?;

    println!(
        "soak: {} s, {} clients aiming at {} req/s, limit {} tokens, seed {seed}",
        args.seconds, args.clients, args.rate, args.limit
    );
    let parts: Vec<String> = mix
        .iter()
        .map(|(k, w)| format!("{}={w}", k.key()))
        .collect();
    println!("soak: mix {}", parts.join(","));
    if let Some(l) = args.sabotage_limit {
        println!(
            "soak: SELF-TEST: the guard runs with limit {l}, not {}: this run must fail",
            args.limit
        );
    }
    println!(
        "soak: guard pid {} on {} (admin {}), mock upstream {upstream_addr}",
        guard.pid, guard.proxy, guard.admin
    );
    println!(
        "soak: guard timeouts: head {HEAD_TIMEOUT_MS} ms, body idle {BODY_IDLE_TIMEOUT_MS} ms, keep-alive {KEEPALIVE_IDLE_MS} ms, \
         upstream response {UPSTREAM_RESPONSE_SECS} s, upstream idle {UPSTREAM_IDLE_SECS} s"
    );

    let admin_http = reqwest::Client::new();
    let started = Instant::now();
    // One origin for the end of the traffic and the sampling ticks, so the
    // last tick falls on the end.
    let t0 = tokio::time::Instant::now();
    let mut samples = Vec::new();
    if let Some(s) = sample(&admin_http, &guard, Duration::ZERO).await {
        print_sample(&s, 0, &upstream);
        samples.push(s);
    }
    let ctx = Arc::new(Ctx {
        proxy: guard.proxy,
        url: format!("http://{}/v1/chat/completions", guard.proxy),
        http1: reqwest::Client::builder()
            .pool_idle_timeout(CLIENT_POOL_IDLE)
            .timeout(ANSWER_DEADLINE)
            .build()
            .map_err(|e| e.to_string())?,
        h2c: Client::builder(TokioExecutor::new())
            .http2_only(true)
            .pool_idle_timeout(CLIENT_POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .build_http(),
        limit: args.limit,
        mix,
        stop_at: t0 + Duration::from_secs(args.seconds),
        halted: AtomicBool::new(false),
        next_id: AtomicU64::new(1),
        tally: Tally::default(),
    });
    let period = Duration::from_secs_f64(args.clients as f64 / args.rate.max(0.1));
    let mut seeds = Rng(seed);
    let clients: Vec<_> = (0..args.clients)
        .map(|_| tokio::spawn(client(ctx.clone(), Rng(seeds.next_u64()), period)))
        .collect();

    // Sample until the traffic ends or the guard dies.
    let print_every = args.sample_secs.max(1);
    let mut next = t0 + SAMPLE_EVERY;
    let mut died = None;
    while next <= ctx.stop_at {
        tokio::select! {
            status = guard.child.wait() => {
                died = Some(status.map_or_else(|e| e.to_string(), |s| s.to_string()));
                ctx.halted.store(true, Ordering::Relaxed);
                break;
            }
            _ = tokio::time::sleep_until(next) => {}
        }
        if let Some(s) = sample(&admin_http, &guard, started.elapsed()).await {
            if (samples.len() as u64).is_multiple_of(print_every) {
                print_sample(&s, ctx.tally.total(), &upstream);
            }
            samples.push(s);
        }
        next += SAMPLE_EVERY;
    }
    if died.is_none() {
        tokio::select! {
            status = guard.child.wait() => {
                died = Some(status.map_or_else(|e| e.to_string(), |s| s.to_string()));
                ctx.halted.store(true, Ordering::Relaxed);
            }
            _ = tokio::time::sleep_until(ctx.stop_at) => {}
        }
    }
    let traffic_secs = started.elapsed().as_secs_f64();
    for c in clients {
        // Each ends with its request in flight, within ANSWER_DEADLINE.
        let _ = c.await;
    }
    let ctx = Arc::into_inner(ctx).expect("the clients are done");
    let Ctx {
        tally, http1, h2c, ..
    } = ctx;
    // Closes the clients' pooled connections: what stays open is the guard's.
    drop((http1, h2c));

    // The guard's client connections must drain (the silent ones it closes
    // itself within the head timeout).
    let mut drained = None;
    if died.is_none() {
        let drain_started = Instant::now();
        while drain_started.elapsed() < Duration::from_secs(15) {
            if metric(&admin_http, guard.admin, CONNS).await == Some(0.0) {
                drained = Some(drain_started.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let after = if died.is_none() {
        sample(&admin_http, &guard, started.elapsed()).await
    } else {
        None
    };
    if let Some(s) = &after {
        print!("after traffic: ");
        print_sample(s, tally.total(), &upstream);
    }
    let exit = if died.is_none() {
        stop(&mut guard).await
    } else {
        "already gone".into()
    };

    let report = Report {
        args: &args,
        seed,
        traffic_secs,
        tally: tally.0.into_inner().unwrap(),
        upstream: upstream.0.lock().unwrap(),
        samples: &samples,
        guard: &guard,
        died,
        drained,
        exit,
    };
    Ok(report.print())
}

/// SIGTERM, then the grace: how the guard exits.
async fn stop(guard: &mut Guard) -> String {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &guard.pid.to_string()])
        .status();
    match tokio::time::timeout(Duration::from_secs(15), guard.child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => {
            let _ = guard.child.start_kill();
            "still running 15 s after SIGTERM: killed".into()
        }
    }
}

struct Report<'a> {
    args: &'a Args,
    seed: u64,
    traffic_secs: f64,
    tally: Counts,
    upstream: std::sync::MutexGuard<'a, Arrivals>,
    samples: &'a [Sample],
    guard: &'a Guard,
    died: Option<String>,
    drained: Option<Duration>,
    exit: String,
}

impl Report<'_> {
    /// The table of answers per kind of traffic.
    fn print_answers(&self) {
        let t = &self.tally;
        let sent: u64 = t.sent.values().sum();
        println!();
        println!(
            "=== soak: {:.0} s of traffic, {sent} requests ({:.0}/s), {} over h2c, seed {} ===",
            self.traffic_secs,
            sent as f64 / self.traffic_secs.max(1.0),
            t.h2c,
            self.seed
        );
        println!(
            "{:<16} {:>8} {:>8}  {:>7} {:>7} {:>7}  answers",
            "kind", "sent", "expect", "p50 ms", "p99 ms", "max ms"
        );
        for (kind, _) in MIX {
            let mut ms = t.millis.get(&kind).cloned().unwrap_or_default();
            ms.sort_unstable();
            let mut answers: Vec<_> = t
                .answers
                .get(&kind)
                .map(|m| m.iter().collect())
                .unwrap_or_default();
            answers.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
            let answers: Vec<String> = answers.iter().map(|(l, n)| format!("{l} x{n}")).collect();
            println!(
                "{:<16} {:>8} {:>8}  {:>7} {:>7} {:>7}  {}",
                kind.name(),
                t.sent.get(&kind).copied().unwrap_or(0),
                kind.expected(),
                percentile(&ms, 0.5),
                percentile(&ms, 0.99),
                ms.last().copied().unwrap_or(0),
                answers.join(", ")
            );
        }
    }

    /// Prints the tables and the verdict; true if the run passed.
    fn print(self) -> bool {
        let t = &self.tally;
        let a = &self.upstream;
        self.print_answers();
        let markers: Vec<String> = a
            .by_marker
            .iter()
            .map(|(m, n)| format!("{m} x{n}"))
            .collect();
        let doubles = a.per_id.values().filter(|&&n| n > 1).count();
        let never_arrived = t
            .answered
            .iter()
            .filter(|id| !a.per_id.contains_key(id))
            .count();
        let legit_sent: u64 = MIX
            .iter()
            .filter(|(k, _)| k.legit())
            .map(|(k, _)| t.sent.get(k).copied().unwrap_or(0))
            .sum();
        let first = self.samples.first();
        let peak_rss = self.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let peak_fds = self.samples.iter().map(|s| s.fds).max().unwrap_or(0);
        println!();
        println!(
            "upstream received          {} ({})",
            a.total,
            markers.join(", ")
        );
        println!(
            "RSS                        peak {}, at start {}",
            mib(peak_rss),
            first.map_or("?".into(), |s| mib(s.rss_kib))
        );
        println!(
            "open descriptors           peak {peak_fds}, at start {}",
            first.map_or("?".into(), |s| s.fds.to_string())
        );
        println!(
            "guard log                  {} lines, {} warnings, {} errors",
            self.guard.log.lines.load(Ordering::Relaxed),
            self.guard.log.warnings.load(Ordering::Relaxed),
            self.guard.log.errors.load(Ordering::Relaxed)
        );
        for line in self.guard.log.notable.lock().unwrap().iter() {
            println!("  guard: {line}");
        }
        println!("guard exit after SIGTERM   {}", self.exit);
        println!();

        let mut failures = Vec::new();
        let mut check = |ok: bool, what: String| {
            println!("[{}] {what}", if ok { " ok " } else { "FAIL" });
            if !ok {
                failures.push(what);
            }
        };
        check(
            a.over_limit == 0,
            format!(
                "over-limit prompts that reached the upstream: {}",
                a.over_limit
            ),
        );
        check(
            a.refused_kinds == 0,
            format!(
                "malformed or unfinished bodies that reached the upstream: {}",
                a.refused_kinds
            ),
        );
        check(
            doubles == 0,
            format!("requests that reached the upstream more than once: {doubles}"),
        );
        check(
            t.legit_failed == 0,
            format!(
                "legitimate requests (no fault marker) not answered 2xx in full: {} of {legit_sent}",
                t.legit_failed
            ),
        );
        check(
            never_arrived == 0,
            format!(
                "legitimate requests answered 2xx that never reached the upstream: {never_arrived}"
            ),
        );
        check(
            t.fault_unanswered == 0,
            format!(
                "faulted requests with no end within {} s: {}",
                ANSWER_DEADLINE.as_secs(),
                t.fault_unanswered
            ),
        );
        check(
            a.unidentified == 0,
            format!("upstream requests without a soak id: {}", a.unidentified),
        );
        check(
            self.died.is_none(),
            format!(
                "the guard ran to the end{}",
                self.died
                    .as_ref()
                    .map(|d| format!(": it exited during the run ({d})"))
                    .unwrap_or_default()
            ),
        );
        if self.died.is_none() {
            check(
                self.drained.is_some(),
                match self.drained {
                    Some(d) => format!(
                        "client connections drained to 0 within {:.1} s of the traffic's end",
                        d.as_secs_f64()
                    ),
                    None => {
                        "client connections did not drain to 0 within 15 s of the traffic's end"
                            .into()
                    }
                },
            );
        }
        match growth(self.samples) {
            Some(g) => check(
                !g.failed,
                format!("bounded memory and descriptors: {}", g.text),
            ),
            None => println!(
                "[skip] growth check: {} samples, {MIN_SAMPLES_FOR_TREND} needed (run longer)",
                self.samples.len()
            ),
        }
        if !t.reasons.is_empty() {
            println!("first failures:");
            for r in &t.reasons {
                println!("  {r}");
            }
        }
        println!();
        if failures.is_empty() {
            println!("soak PASSED ({} s requested)", self.args.seconds);
            true
        } else {
            println!("soak FAILED: {} check(s)", failures.len());
            false
        }
    }
}
