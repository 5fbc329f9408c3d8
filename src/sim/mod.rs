//! A simulated SGLang prefill/decode (PD) pair, small enough to read, that
//! reproduces the cross-tenant leak the guard exists to stop (SGLang issue
//! #30233; `shared/docs/sglang-semantics.md` §4.2–§4.4). A test and demo
//! fixture: `prefill-guard pd-sim` serves it over HTTP, `prefill-guard demo`
//! runs it in-process.
//!
//! # The mechanism
//!
//! A PD deployment splits a request in two. The router adds a
//! `bootstrap_room` and sends the same body to a prefill and a decode worker.
//!
//! 1. **Decode** tokenizes the prompt (length `L`), reserves
//!    `ceil(L / page_size)` pages of its paged KV pool for it, and waits for
//!    prefill to fill them ([`kv`]). Pages come from a free list that hands out
//!    the most recently freed pages first; a freed page keeps its contents.
//! 2. **Prefill** tokenizes the same prompt and checks
//!    `L >= max_req_input_len` (its own, smaller pool).
//!    * SGLang ≤ 0.5.19 (`--mode vulnerable`): the request is marked to
//!      finish with an error later, its prompt is replaced by the one-token
//!      placeholder `[0]`, and the handoff carries on: one token of KV is
//!      transferred, into slot 0, and the transfer is marked complete.
//!    * SGLang ≥ 0.5.20 (`--mode fixed`): the request is refused with
//!      SGLang's 400 and decode is told, so nothing is generated (0.5.21
//!      refuses at admission, 0.5.20 after a wasted forward pass; the
//!      answers are the same).
//!    * Under the limit, all `L` tokens are transferred.
//! 3. **Decode** generates from the `L` slots it reserved. After a one-token
//!    transfer, slots `1..L` still hold whatever the previous owner of those
//!    pages left there: another tenant's prompt.
//!
//! Length is not the only way into step 2 ([`grammar`];
//! `shared/docs/pd-abort-paths.md` row G1). With `--prefill-grammar-backend
//! none` the prefill worker runs as if launched with `--grammar-backend
//! none` while decode keeps xgrammar: every request carrying a grammar
//! (`json_schema`, `regex`, `ebnf`, `structural_tag`; on the OpenAI routes a
//! `response_format` or a forced tool call) takes the same path as an
//! over-long prompt, whatever its length: a one-token handoff before 0.5.20,
//! SGLang's 400 from 0.5.20 on. Each worker reports its backend as
//! `grammar_backend` in `/server_info`.
//!
//! The simulated model "generates" by reading its context back (the output
//! is the detokenized KV slots), so a normal answer echoes the caller's own
//! prompt and an answer built on stale pages echoes someone else's.
//!
//! # The release
//!
//! `--sglang-version V` (default: the mode's, 0.5.19 or 0.5.23) is the
//! release the workers run ([`release`]). They report it as `version` in
//! `/server_info`, publish only the info routes and keys that release has
//! (before 0.5.6 only `/get_server_info` and `/get_model_info`, the latter
//! without the architecture), and build every prompt as V's family does
//! ([`crate::count::release`]). The difference that matters most: before
//! 0.5.13 a chat's `input_ids` is not a field, so a chat with long
//! `messages` and `input_ids: [1, 2, 3]` is a long prompt there (the
//! messages are rendered), and a three-token one from 0.5.13 on. Both
//! workers share one model, so prefill and decode always agree on `L`. V
//! must be readable, 0.4.5 or later, and agree with the mode (vulnerable
//! before 0.5.20, fixed from 0.5.20); otherwise the pair does not start.
//!
//! # What is real
//!
//! The tokenizer and chat template are the guard's own ([`crate::count`],
//! counting for V's family only), so the prompt length a worker computes is
//! exactly the length a guard that knows V counts; the HTTP routes,
//! response and error shapes are SGLang's. Because the two agree by
//! construction, the simulator shows the guard's *policy* at work (refuse
//! at `L >= max_req_input_len`, read from the prefill worker, counted as
//! the release it reports builds prompts); that the count itself equals
//! SGLang's is pinned elsewhere, by the golden tests against real
//! tokenizers (`crates/inspect/tests/inspect/goldens.rs`).
//!
//! Not modelled: `n > 1` (refused), media, sessions, logprobs, and any
//! sampling: the "model" is deterministic.

pub mod dispatch;
pub mod grammar;
pub mod kv;
pub mod model;
pub mod release;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use grammar::GrammarBackend;
use kv::KvPool;
use model::SimModel;
use release::SimRelease;
use worker::{Role, Worker};

/// Which SGLang behaviour the prefill worker has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// ≤ 0.5.19: an over-limit prompt becomes a one-token handoff.
    Vulnerable,
    /// ≥ 0.5.20: an over-limit prompt is refused with 400 on both workers.
    Fixed,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Vulnerable => "vulnerable",
            Mode::Fixed => "fixed",
        }
    }

    /// The SGLang version the mode models by default (`--sglang-version`).
    pub fn version(self) -> &'static str {
        match self {
            Mode::Vulnerable => "0.5.19",
            Mode::Fixed => "0.5.23",
        }
    }
}

/// `prefill-guard pd-sim`: a TEST AND DEMO FIXTURE, not a server to deploy.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Address of the prefill worker (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub prefill_listen: SocketAddr,
    /// Address of the decode worker (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub decode_listen: SocketAddr,
    /// Model directory (tokenizer.json, tokenizer_config.json).
    #[arg(long)]
    pub tokenizer: PathBuf,
    #[arg(long, default_value = "demo")]
    pub served_model_name: String,
    /// The prefill worker's max_req_input_len: prompts with L >= N hit the bug.
    #[arg(long)]
    pub max_req_input_len: usize,
    #[arg(long, value_enum, default_value = "vulnerable")]
    pub mode: Mode,
    /// The SGLang release the workers run: they report it in /server_info,
    /// publish what it publishes, and build prompts as it does (default:
    /// the mode's, 0.5.19 vulnerable, 0.5.23 fixed). Must agree with the
    /// mode: vulnerable before 0.5.20, fixed from 0.5.20.
    #[arg(long, value_name = "VERSION")]
    pub sglang_version: Option<String>,
    /// The prefill worker's --grammar-backend (decode always has xgrammar).
    /// `none`: every request carrying a grammar (json_schema, regex, ebnf,
    /// structural_tag, an OpenAI response_format or forced tool call) is
    /// stubbed as an over-long prompt is, so decode reads stale KV.
    #[arg(long, value_enum, default_value = "xgrammar")]
    pub prefill_grammar_backend: GrammarBackend,
    /// The port reported as the prefill bootstrap port (nothing listens on it).
    #[arg(long, default_value_t = 8998)]
    pub bootstrap_port: u16,
    /// Pages in the shared KV pool.
    #[arg(long, default_value_t = 4096)]
    pub kv_pages: usize,
    /// Token slots per page.
    #[arg(long, default_value_t = 16)]
    pub page_size: usize,
    /// The model's context length (default: the KV pool's size).
    #[arg(long)]
    pub context_length: Option<usize>,
    /// SGLang's --default-chat-template-kwargs (a JSON object), applied to
    /// every chat request and published in /server_info.
    #[arg(long, value_name = "JSON")]
    pub default_chat_template_kwargs: Option<String>,
    /// Seconds either worker waits for the other in a handoff.
    #[arg(long, default_value_t = 30)]
    pub handoff_timeout_secs: u64,
}

/// A running pair.
pub struct SimPair {
    pub prefill: SocketAddr,
    pub decode: SocketAddr,
    pub pool: KvPool,
    /// The SGLang version the workers announce.
    pub version: String,
    /// Prompt-carrying requests (`/generate`, `/v1/*completions`) the
    /// workers received, both roles together.
    received: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

impl SimPair {
    /// Binds both listeners and serves them in the background.
    pub async fn start(args: &SimArgs) -> anyhow::Result<Self> {
        let context_len = args
            .context_length
            .unwrap_or(args.kv_pages.saturating_mul(args.page_size));
        anyhow::ensure!(
            args.max_req_input_len >= 2 && args.max_req_input_len < context_len,
            "--max-req-input-len must be at least 2 and below the context length ({context_len})"
        );
        anyhow::ensure!(
            args.kv_pages > 0 && args.page_size > 0 && context_len > 6,
            "the KV pool and the context must hold a prompt"
        );
        let release = SimRelease::new(args.sglang_version.as_deref(), args.mode)?;
        let kwargs = match &args.default_chat_template_kwargs {
            None => serde_json::Map::new(),
            Some(_) if !release.default_chat_template_kwargs() => anyhow::bail!(
                "SGLang {} has no --default-chat-template-kwargs (0.5.16 and later)",
                release.version
            ),
            Some(text) => match serde_json::from_str::<serde_json::Value>(text)? {
                serde_json::Value::Object(m) => m,
                _ => anyhow::bail!("--default-chat-template-kwargs must be a JSON object"),
            },
        };
        let model = Arc::new(SimModel::load(
            &args.tokenizer,
            &args.served_model_name,
            kwargs,
            release,
        )?);
        let version = model.release.version.clone();
        let pool = KvPool::new(
            args.kv_pages,
            args.page_size,
            model.blank_id(),
            Duration::from_secs(args.handoff_timeout_secs * 2),
        );
        let prefill = TcpListener::bind(args.prefill_listen).await?;
        let decode = TcpListener::bind(args.decode_listen).await?;
        let (stop, _) = watch::channel(false);
        let mut pair = Self {
            prefill: prefill.local_addr()?,
            decode: decode.local_addr()?,
            pool: pool.clone(),
            version,
            received: Arc::new(AtomicUsize::new(0)),
            stop,
            tasks: Vec::new(),
        };
        for (role, listener) in [(Role::Prefill, prefill), (Role::Decode, decode)] {
            let grammar_backend = match role {
                Role::Prefill => args.prefill_grammar_backend,
                Role::Decode => GrammarBackend::Xgrammar,
            };
            let worker = Arc::new(Worker {
                role,
                mode: args.mode,
                grammar_backend,
                model: model.clone(),
                pool: pool.clone(),
                max_req_input_len: args.max_req_input_len,
                context_len,
                bootstrap_port: args.bootstrap_port,
                handoff_timeout: Duration::from_secs(args.handoff_timeout_secs),
                received: pair.received.clone(),
            });
            pair.tasks
                .push(pair.serve(listener, worker::router(worker)));
        }
        Ok(pair)
    }

    /// How many prompt-carrying requests the workers have received so far.
    pub fn requests_received(&self) -> usize {
        self.received.load(Ordering::Relaxed)
    }

    /// Serves `app` on `listener` until [`SimPair::stop`].
    pub fn serve(
        &self,
        listener: TcpListener,
        app: axum::Router,
    ) -> JoinHandle<std::io::Result<()>> {
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        })
    }

    /// Stops accepting, lets in-flight requests finish, and waits.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// `prefill-guard pd-sim`: start the pair, print one JSON line with the
/// workers' URLs, serve until SIGTERM or Ctrl-C.
pub async fn run(args: &SimArgs) -> anyhow::Result<()> {
    let pair = SimPair::start(args).await?;
    let stop = crate::signal::shutdown_signal();
    println!(
        "{}",
        json!({
            "prefill": format!("http://{}", pair.prefill),
            "decode": format!("http://{}", pair.decode),
            "bootstrap_port": args.bootstrap_port,
            "mode": args.mode.name(),
            "prefill_grammar_backend": args.prefill_grammar_backend.name(),
            "version": pair.version,
        })
    );
    stop.await;
    pair.stop().await;
    Ok(())
}
