//! The interleaved latency client of `bench/run.sh`: one paced request stream,
//! dealt round-robin over several targets, so that every target sees the same
//! moments of the machine.
//!
//! Why not one wrk run per target: on a shared 2-core VM the tail of a 10 s run
//! is set by whatever the neighbours did during those 10 s. Measured one after
//! another, the stub alone had a p99 anywhere from 0.4 to 8 ms, so "target p99
//! minus direct p99" compared two different machines. Here request i goes to
//! target i mod N, at a fixed total rate (open loop: a request leaves at its
//! time whether or not earlier ones have answered), so a stall hits all targets
//! alike and the difference of their percentiles is what the hop adds.
//!
//! Latency runs from the moment the request is written to the end of the
//! response body, on keep-alive HTTP/1.1 connections opened before the clock
//! starts (a pool per target that grows only if every connection is busy).
//!
//! Usage:
//!   bench_paced --body FILE [--path /v1/chat/completions] [--rate 400]
//!               [--seconds 30] [--warmup 2] NAME=http://127.0.0.1:PORT ...
//!
//! Prints one line, `BENCHJSON {...}`, with per-target requests, statuses,
//! errors and p50/p90/p99/p999/max in microseconds, and what each failure was
//! (`failures`: the status with the start of its body, which for the guard
//! names the refusal, or the step at which the connection failed), so a
//! handful of failed requests in thousands can be told apart afterwards.
#![allow(
    clippy::unwrap_used,
    reason = "a measuring harness run by hand: a setup that fails should stop it loudly"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Sender = SendRequest<Full<Bytes>>;

struct Target {
    name: String,
    authority: String,
    idle: Mutex<Vec<Sender>>,
    stats: Mutex<Stats>,
}

#[derive(Default)]
struct Stats {
    latencies_us: Vec<u64>,
    statuses: BTreeMap<u16, u64>,
    errors: u64,
    /// What went wrong, counted by kind: `status 503: {...}` (the start of
    /// the body) or `connect: ...`, `ready: ...`, `send: ...`, `body: ...`.
    failures: BTreeMap<String, u64>,
    /// Connections opened after the clock started: the pool was all busy.
    opened_late: u64,
    /// Kept-alive connections the server had closed since their last answer,
    /// replaced by a new one before the request was written.
    reopened: u64,
}

async fn connect(authority: &str) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn one(target: Arc<Target>, path: Arc<str>, body: Bytes, record: bool) {
    let fail = |what: String| {
        let mut s = target.stats.lock().unwrap();
        s.errors += 1;
        let key = if record {
            what
        } else {
            format!("(warm-up) {what}")
        };
        *s.failures.entry(key).or_default() += 1;
    };
    let pooled = target.idle.lock().unwrap().pop();
    // A kept-alive connection the server has closed since its last answer
    // (nginx closes one after `keepalive_requests`, 1,000 by default, saying
    // `Connection: close`) never carried this request: a client's pool opens
    // another, and so does this one, counting it. Only a fresh connection
    // that fails is a failed request.
    let live = match pooled {
        Some(mut s) => match s.ready().await {
            Ok(()) => Some(s),
            Err(_) => {
                if record {
                    target.stats.lock().unwrap().reopened += 1;
                }
                None
            }
        },
        None => {
            if record {
                target.stats.lock().unwrap().opened_late += 1;
            }
            None
        }
    };
    let mut sender = match live {
        Some(s) => s,
        None => match connect(&target.authority).await {
            Ok(s) => s,
            Err(e) => return fail(format!("connect: {e}")),
        },
    };
    let req = Request::post(&*path)
        .header("host", &target.authority)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("a valid request");
    if let Err(e) = sender.ready().await {
        return fail(format!("ready: {e}"));
    }
    let started = Instant::now();
    let resp = match sender.send_request(req).await {
        Ok(resp) => resp,
        Err(e) => return fail(format!("send: {e}")),
    };
    let status = resp.status().as_u16();
    let answer = match resp.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return fail(format!("body: {e}")),
    };
    let took = started.elapsed();
    if record {
        let mut s = target.stats.lock().unwrap();
        s.latencies_us.push(took.as_micros() as u64);
        *s.statuses.entry(status).or_default() += 1;
        if !(200..300).contains(&status) {
            let start = String::from_utf8_lossy(&answer[..answer.len().min(160)]).into_owned();
            *s.failures
                .entry(format!("status {status}: {start}"))
                .or_default() += 1;
        }
    }
    target.idle.lock().unwrap().push(sender);
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let mut body = None;
    let mut path = "/v1/chat/completions".to_string();
    let mut rate = 400.0_f64;
    let mut seconds = 30.0_f64;
    let mut warmup = 2.0_f64;
    let mut targets = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--body" => body = Some(std::fs::read(value()?)?),
            "--path" => path = value()?,
            "--rate" => rate = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--warmup" => warmup = value()?.parse()?,
            spec => {
                let (name, url) = spec
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("expected NAME=URL, got {spec}"))?;
                let authority = url
                    .strip_prefix("http://")
                    .ok_or_else(|| anyhow::anyhow!("only http:// targets: {url}"))?
                    .trim_end_matches('/')
                    .to_string();
                targets.push(Arc::new(Target {
                    name: name.to_string(),
                    authority,
                    idle: Mutex::new(Vec::new()),
                    stats: Mutex::new(Stats::default()),
                }));
            }
        }
    }
    let body = Bytes::from(body.ok_or_else(|| anyhow::anyhow!("--body FILE is required"))?);
    anyhow::ensure!(!targets.is_empty(), "no targets");
    anyhow::ensure!(
        rate > 0.0 && seconds > 0.0,
        "--rate and --seconds must be positive"
    );

    // One thread: the client's own jitter then falls on the targets in turn
    // rather than on whichever one shares a thread with a busy task.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Enough idle connections that a moderate rate never opens one on the clock.
        for t in &targets {
            for _ in 0..8 {
                let s = connect(&t.authority).await?;
                t.idle.lock().unwrap().push(s);
            }
        }
        let path: Arc<str> = Arc::from(path.as_str());
        let period = Duration::from_secs_f64(1.0 / rate);
        let mut tick = tokio::time::interval(period);
        // Open loop: a late tick is sent at once, not skipped.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let warm_until = Instant::now() + Duration::from_secs_f64(warmup);
        let end = warm_until + Duration::from_secs_f64(seconds);
        let mut inflight = tokio::task::JoinSet::new();
        let mut i = 0usize;
        loop {
            tick.tick().await;
            let now = Instant::now();
            if now >= end {
                break;
            }
            let target = targets[i % targets.len()].clone();
            i += 1;
            inflight.spawn(one(target, path.clone(), body.clone(), now >= warm_until));
            while inflight.try_join_next().is_some() {}
        }
        while inflight.join_next().await.is_some() {}
        anyhow::Ok(())
    })?;

    let mut out = serde_json::Map::new();
    for t in &targets {
        let mut s = t.stats.lock().unwrap();
        s.latencies_us.sort_unstable();
        let l = &s.latencies_us;
        let mean = if l.is_empty() {
            0.0
        } else {
            l.iter().sum::<u64>() as f64 / l.len() as f64
        };
        out.insert(
            t.name.clone(),
            serde_json::json!({
                "requests": l.len(),
                "errors": s.errors,
                "opened_late": s.opened_late,
                "reopened": s.reopened,
                "statuses": s.statuses,
                "failures": s.failures,
                "p50_us": percentile(l, 0.5),
                "p90_us": percentile(l, 0.9),
                "p99_us": percentile(l, 0.99),
                "p999_us": percentile(l, 0.999),
                "max_us": l.last().copied().unwrap_or(0),
                "mean_us": mean,
            }),
        );
    }
    let report = serde_json::json!({ "rate": rate, "seconds": seconds, "targets": out });
    println!("BENCHJSON {report}");
    Ok(())
}
