//! `prefill-guard demo`: the PD tenant leak, reproduced and then stopped, in
//! one process and a few seconds.
//!
//! It starts a simulated vulnerable SGLang PD pair ([`crate::sim`]), a
//! minimal PD dispatcher in front of it (what SGLang's router does), and the
//! real guard in front of that, reading its limit from the prefill worker's
//! `/server_info` as in production. Then it runs the same mixed traffic twice,
//! concurrently: straight to the dispatcher, and through the guard.
//!
//! Tenants A, C, D send ordinary prompts, each carrying a marker
//! (`SECRET-<tenant>-<n>`); tenant B sends prompts over the prefill limit. A
//! *leak* is an answer that contains another tenant's marker. Only counts are
//! printed, never prompt or answer text.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::config::{Config, RawConfig, RawModel};
use crate::reload::{ConfigSource, Runtime};
use crate::sim::dispatch::{self, Dispatcher};
use crate::sim::{Mode, SimArgs, SimPair};

const MODEL: &str = "demo";
const ATTACKER: char = 'B';
const TENANTS: [char; 4] = ['A', 'B', 'C', 'D'];

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Requests per run (each run: without the guard, then with it).
    #[arg(long, default_value_t = 600)]
    pub requests: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// The simulated prefill worker's max_req_input_len.
    #[arg(long, default_value_t = 256)]
    pub max_req_input_len: usize,
}

/// What one run saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub requests: usize,
    /// Answers containing another tenant's marker.
    pub leaks: usize,
    /// 400 answers refusing the prompt's length (`context_length_exceeded`).
    pub refused: usize,
    /// 200 answers.
    pub served: usize,
    /// Ordinary (under-limit) requests answered with their own prompt.
    pub legit_ok: usize,
    pub legit: usize,
    /// Anything else: other statuses, transport errors.
    pub failed: usize,
}

/// One planned request.
#[derive(Clone)]
struct Planned {
    tenant: char,
    over_limit: bool,
    path: &'static str,
    stream: bool,
    body: Value,
}

/// Runs the demo, printing the table to `out`. `Ok(true)` when the leak was
/// reproduced without the guard and absent with it (and the guard refused
/// every over-limit request and let every ordinary one through).
pub async fn run(args: &DemoArgs, out: &mut (impl Write + Send)) -> anyhow::Result<bool> {
    anyhow::ensure!(args.requests >= 10, "--requests must be at least 10");
    anyhow::ensure!(
        args.max_req_input_len >= 64,
        "--max-req-input-len must be at least 64"
    );
    let dir = TempDir::new()?;
    super::write_byte_model(&dir.0)?;
    let sim = SimPair::start(&SimArgs {
        prefill_listen: "127.0.0.1:0".parse()?,
        decode_listen: "127.0.0.1:0".parse()?,
        tokenizer: dir.0.clone(),
        served_model_name: MODEL.into(),
        max_req_input_len: args.max_req_input_len,
        mode: Mode::Vulnerable,
        bootstrap_port: 8998,
        kv_pages: 8192,
        page_size: 16,
        context_length: None,
        default_chat_template_kwargs: None,
        sglang_version: None,
        prefill_grammar_backend: crate::sim::grammar::GrammarBackend::Xgrammar,
        handoff_timeout_secs: 30,
    })
    .await?;
    let router = TcpListener::bind("127.0.0.1:0").await?;
    let router_addr = router.local_addr()?;
    let dispatcher = Arc::new(Dispatcher::new(sim.prefill, sim.decode, 8998));
    let router_task = sim.serve(router, dispatch::router(dispatcher));
    let guard = DemoGuard::start(&dir.0, router_addr, sim.prefill).await?;

    let plan = plan(args);
    let started = Instant::now();
    let before = drive(&format!("http://{router_addr}"), &plan, args.concurrency).await;
    let after = drive(&format!("http://{}", guard.addr), &plan, args.concurrency).await;
    let elapsed = started.elapsed();
    guard.stop().await;
    sim.stop().await;
    let _ = router_task.await;

    let over = plan.iter().filter(|p| p.over_limit).count();
    writeln!(
        out,
        "prefill-guard demo: a simulated SGLang PD pair with the 0.5.19 prefill behaviour \
         (max_req_input_len {}), behind a PD dispatcher.\n\
         {} requests per run, {} concurrent: tenants A, C, D send prompts carrying secrets, \
         tenant {ATTACKER} sends {over} prompts over the prefill limit.\n",
        args.max_req_input_len, args.requests, args.concurrency
    )?;
    writeln!(
        out,
        "{:<22}{:>9}{:>7}{:>9}{:>8}{:>8}",
        "", "requests", "leaks", "refused", "served", "failed"
    )?;
    for (name, t) in [("without the guard", before), ("with prefill-guard", after)] {
        writeln!(
            out,
            "{name:<22}{:>9}{:>7}{:>9}{:>8}{:>8}",
            t.requests, t.leaks, t.refused, t.served, t.failed
        )?;
    }
    writeln!(
        out,
        "\nleaks: answers containing another tenant's secret; refused: 400 context_length_exceeded."
    )?;
    let reproduced = before.leaks > 0;
    let stopped = after.leaks == 0
        && after.refused == over
        && after.legit_ok == after.legit
        && after.failed == 0;
    let verdict = match (reproduced, stopped) {
        (true, true) => format!(
            "Leak reproduced without the guard ({} answers); none with it, and all {} ordinary \
             requests answered.",
            before.leaks, after.legit
        ),
        (false, _) => "FAILED: the leak was not reproduced without the guard.".to_owned(),
        (true, false) => format!(
            "FAILED: with the guard: {} leaks, {} of {over} over-limit requests refused, \
             {} of {} ordinary requests answered, {} failures.",
            after.leaks, after.refused, after.legit_ok, after.legit, after.failed
        ),
    };
    writeln!(out, "{verdict} ({:.1} s)", elapsed.as_secs_f64())?;
    Ok(reproduced && stopped)
}

/// The requests of one run, the same for both runs: about a third from the
/// attacker, over the limit; the rest ordinary, across three routes,
/// streaming and not.
fn plan(args: &DemoArgs) -> Vec<Planned> {
    let limit = args.max_req_input_len;
    (0..args.requests)
        .map(|k| {
            let tenant = TENANTS[k % TENANTS.len()];
            let over_limit = tenant == ATTACKER;
            let marker = format!("SECRET-{tenant}-{k}");
            let text = if over_limit {
                // Somewhere in the window the bug lives in: at or over the
                // prefill limit, well under the context length.
                let filler = "Please summarise this long report. ".repeat(limit / 16 + k % 7);
                format!("{marker} {filler}")
            } else {
                format!("My account password is {marker}. Please keep {marker} safe.")
            };
            let (path, stream) = match k % 5 {
                0 | 1 => ("/v1/chat/completions", false),
                2 => ("/v1/chat/completions", true),
                3 => ("/v1/completions", k % 2 == 0),
                _ => ("/generate", false),
            };
            let budget = 2 * limit + 512;
            let body = match path {
                "/v1/chat/completions" => json!({
                    "model": MODEL, "stream": stream, "max_tokens": budget,
                    "messages": [{"role": "user", "content": text}],
                }),
                "/v1/completions" => json!({
                    "model": MODEL, "stream": stream, "max_tokens": budget, "prompt": text,
                }),
                _ => json!({"text": text, "sampling_params": {"max_new_tokens": budget}}),
            };
            Planned {
                tenant,
                over_limit,
                path,
                stream,
                body,
            }
        })
        .collect()
}

/// Sends `plan` to `base` with `concurrency` requests in flight.
async fn drive(base: &str, plan: &[Planned], concurrency: usize) -> Tally {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default();
    let outcomes: Vec<(Planned, Outcome)> = futures_util::stream::iter(plan.iter().cloned())
        .map(|p| {
            let client = client.clone();
            async move {
                let outcome = send(&client, base, &p).await;
                (p, outcome)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut t = Tally {
        requests: plan.len(),
        ..Tally::default()
    };
    for (p, outcome) in outcomes {
        if !p.over_limit {
            t.legit += 1;
        }
        match outcome {
            Outcome::Answer(text) => {
                t.served += 1;
                let markers = markers(&text);
                if markers.iter().any(|m| *m != p.tenant) {
                    t.leaks += 1;
                }
                if !p.over_limit && markers.contains(&p.tenant) {
                    t.legit_ok += 1;
                }
            }
            Outcome::Refused => t.refused += 1,
            Outcome::Failed => t.failed += 1,
        }
    }
    t
}

enum Outcome {
    /// A 200: the generated text, reassembled from a stream if need be.
    Answer(String),
    Refused,
    Failed,
}

async fn send(client: &reqwest::Client, base: &str, p: &Planned) -> Outcome {
    let sent = client
        .post(format!("{base}{}", p.path))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(p.body.to_string())
        .send()
        .await;
    let Ok(r) = sent else {
        return Outcome::Failed;
    };
    let status = r.status();
    let Ok(body) = r.bytes().await else {
        return Outcome::Failed;
    };
    if status == http::StatusCode::BAD_REQUEST {
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        // OpenAI routes say `context_length_exceeded`; `/generate` has
        // SGLang's shape, a message only.
        let length = v["error"]["code"] == "context_length_exceeded"
            || v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Input length ("));
        return if length {
            Outcome::Refused
        } else {
            Outcome::Failed
        };
    }
    if !status.is_success() {
        return Outcome::Failed;
    }
    let text = if p.stream {
        stream_text(&body)
    } else {
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        answer_text(&v)
    };
    text.map_or(Outcome::Failed, Outcome::Answer)
}

/// The generated text of a non-stream answer of any of the three routes.
fn answer_text(v: &Value) -> Option<String> {
    if let Some(text) = v["text"].as_str() {
        return Some(text.to_owned());
    }
    let choice = &v["choices"][0];
    choice["message"]["content"]
        .as_str()
        .or_else(|| choice["text"].as_str())
        .map(str::to_owned)
}

/// The text of an SSE answer: chat deltas and completion pieces appended,
/// `/generate`'s cumulative text taken last. An error event fails it.
fn stream_text(body: &[u8]) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    let mut text = String::new();
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data).ok()?;
        if v.get("error").is_some() {
            return None;
        }
        if let Some(t) = v["text"].as_str() {
            text = t.to_owned();
        }
        if let Some(c) = v["choices"][0]["delta"]["content"]
            .as_str()
            .or_else(|| v["choices"][0]["text"].as_str())
        {
            text.push_str(c);
        }
    }
    Some(text)
}

/// The tenants whose markers (`SECRET-<tenant>-<n>`) appear in `text`.
pub fn markers(text: &str) -> Vec<char> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("SECRET-") {
        let mut rest = text[i + "SECRET-".len()..].chars();
        if let (Some(t), Some('-')) = (rest.next(), rest.next()) {
            if TENANTS.contains(&t) && !found.contains(&t) {
                found.push(t);
            }
        }
    }
    found
}

/// The real guard, in-process, as `serve` runs it: the demo model, the
/// dispatcher as upstream, the limit discovered from the prefill worker.
pub struct DemoGuard {
    /// The guard's proxy listener.
    pub addr: SocketAddr,
    runtime: Arc<Runtime>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl DemoGuard {
    /// Starts the guard for model `model` (served as `demo`) in front of
    /// `upstream` and returns once it has read its limit from `prefill`.
    pub async fn start(
        model: &std::path::Path,
        upstream: SocketAddr,
        prefill: SocketAddr,
    ) -> anyhow::Result<Self> {
        let overlay = RawConfig {
            listen: Some("127.0.0.1:0".parse()?),
            admin_listen: Some("127.0.0.1:0".parse()?),
            upstream: Some(format!("http://{upstream}")),
            prefill_urls: Some(vec![format!("http://{prefill}")]),
            // Room for every request the demo keeps in flight: shedding is
            // the guard's answer to overload, not what the demo is about.
            count_queue: Some(1024),
            model: RawModel {
                name: Some(MODEL.into()),
                tokenizer: Some(model.display().to_string()),
                ..RawModel::default()
            },
            ..RawConfig::default()
        };
        let source = ConfigSource {
            path: None,
            overlay,
        };
        let config: Config = source.load()?;
        let runtime = Runtime::start(config, source).await?;
        let proxy = TcpListener::bind("127.0.0.1:0").await?;
        let admin = TcpListener::bind("127.0.0.1:0").await?;
        let (addr, admin_addr) = (proxy.local_addr()?, admin.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The guard as `serve` assembles it, on loopback ports.
        let listeners = crate::server::Listeners {
            proxy,
            admin,
            grpc: None,
            authz: None,
        };
        let task = tokio::spawn(crate::server::serve(listeners, runtime.clone(), async {
            let _ = stopped.await;
        }));
        // Ready once discovery has read the prefill worker's limit.
        let client = reqwest::Client::builder().no_proxy().build()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client
                .get(format!("http://{admin_addr}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the guard did not become ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            addr,
            runtime,
            stop,
            task,
        })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
        self.runtime.stop().await;
    }
}

/// A scratch directory for the demo model, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "prefill-guard-demo-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_tenants_once() {
        assert_eq!(markers("x SECRET-A-1 y SECRET-C-22 SECRET-A-3"), ['A', 'C']);
        assert!(markers("SECRET-Z-1 SECRET-A SECRET-").is_empty());
    }

    #[test]
    fn stream_text_reassembles_deltas_and_cumulative_text() {
        let chat = b"data: {\"choices\":[{\"delta\":{\"content\":\"SECR\"}}]}\n\n\
                     data: {\"choices\":[{\"delta\":{\"content\":\"ET-A-1\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(stream_text(chat).as_deref(), Some("SECRET-A-1"));
        let generate =
            b"data: {\"text\":\"SE\"}\n\ndata: {\"text\":\"SECRET\"}\n\ndata: [DONE]\n\n";
        assert_eq!(stream_text(generate).as_deref(), Some("SECRET"));
        assert_eq!(stream_text(b"data: {\"error\":{}}\n\n"), None);
    }
}
