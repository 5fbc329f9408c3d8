//! The simulated SGLang PD pair (`src/sim`): the leak it exists to show, the
//! fixed behaviour, the guard in front of it, and the `demo` and `pd-sim`
//! commands. Everything speaks real HTTP on 127.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use prefill_guard::demo::scenario::{markers, DemoGuard};
use prefill_guard::demo::write_byte_model;
use prefill_guard::sim::dispatch::{self, Dispatcher};
use prefill_guard::sim::{Mode, SimArgs, SimPair};

/// The prefill worker's max_req_input_len in these tests.
const LIMIT: usize = 64;
const PATIENCE: Duration = Duration::from_secs(30);

struct Stack {
    sim: SimPair,
    /// The dispatcher (what SGLang's router does in PD mode).
    router: String,
    model: tempfile::TempDir,
    http: reqwest::Client,
}

async fn stack(mode: Mode) -> Stack {
    stack_at(mode, None).await
}

/// [`stack`] with workers announcing, and counting as, SGLang `version`.
async fn stack_at(mode: Mode, version: Option<&str>) -> Stack {
    let model = tempfile::tempdir().unwrap();
    write_byte_model(model.path()).unwrap();
    let sim = SimPair::start(&SimArgs {
        prefill_listen: "127.0.0.1:0".parse().unwrap(),
        decode_listen: "127.0.0.1:0".parse().unwrap(),
        tokenizer: model.path().to_owned(),
        served_model_name: "demo".into(),
        max_req_input_len: LIMIT,
        mode,
        bootstrap_port: 8998,
        kv_pages: 256,
        page_size: 16,
        context_length: None,
        default_chat_template_kwargs: None,
        sglang_version: version.map(str::to_owned),
        prefill_grammar_backend: prefill_guard::sim::grammar::GrammarBackend::Xgrammar,
        handoff_timeout_secs: 10,
    })
    .await
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let router = format!("http://{}", listener.local_addr().unwrap());
    let d = Arc::new(Dispatcher::new(sim.prefill, sim.decode, 8998));
    drop(sim.serve(listener, dispatch::router(d)));
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(PATIENCE)
        .build()
        .unwrap();
    Stack {
        sim,
        router,
        model,
        http,
    }
}

impl Stack {
    async fn post(&self, base: &str, path: &str, body: &Value) -> (u16, String) {
        let r = self
            .http
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

/// `/generate` text of exactly `n` tokens (the byte model: one per byte),
/// carrying `marker` early but not in slot 0 (the one slot a one-token
/// transfer overwrites).
fn text_of(marker: &str, n: usize) -> String {
    let mut t = format!("> {marker} ");
    while t.len() < n {
        t.push_str("lorem ipsum ");
    }
    t.truncate(n);
    t
}

/// A request body on `path` carrying `text`.
fn body(path: &str, text: &str, stream: bool) -> Value {
    match path {
        "/generate" => {
            json!({"text": text, "stream": stream, "sampling_params": {"max_new_tokens": 4096}})
        }
        "/v1/completions" => {
            json!({"model": "demo", "prompt": text, "stream": stream, "max_tokens": 4096})
        }
        _ => json!({"model": "demo", "stream": stream, "max_tokens": 4096,
                     "messages": [{"role": "user", "content": text}]}),
    }
}

/// The generated text of an answer, stream or not.
fn answer(raw: &str) -> String {
    if !raw.starts_with("data: ") {
        let v: Value = serde_json::from_str(raw).unwrap();
        let c = &v["choices"][0];
        return v["text"]
            .as_str()
            .or(c["message"]["content"].as_str())
            .or(c["text"].as_str())
            .expect("an answer with text")
            .to_owned();
    }
    let mut text = String::new();
    for data in raw.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        assert!(v.get("error").is_none(), "an error event: {data}");
        if let Some(t) = v["text"].as_str() {
            text = t.to_owned(); // /generate streams the text so far
        }
        let c = &v["choices"][0];
        if let Some(t) = c["delta"]["content"].as_str().or(c["text"].as_str()) {
            text.push_str(t);
        }
    }
    text
}

const ROUTES: [(&str, bool); 5] = [
    ("/v1/chat/completions", false),
    ("/v1/chat/completions", true),
    ("/v1/completions", false),
    ("/v1/completions", true),
    ("/generate", true),
];

#[tokio::test]
async fn vulnerable_pair_hands_an_over_limit_prompt_another_tenants_prompt() {
    let s = stack(Mode::Vulnerable).await;
    for (i, (path, stream)) in ROUTES.iter().copied().enumerate() {
        // Tenant A, under the limit: answered with its own prompt.
        let secret = format!("SECRET-A-{i}");
        let (status, raw) = s
            .post(&s.router, path, &body(path, &text_of(&secret, 40), stream))
            .await;
        assert_eq!(status, 200, "{path}: {raw}");
        let a = answer(&raw);
        assert!(a.contains(&secret), "{path}: A gets its own prompt back");
        // Tenant B, over the limit, right after: decode reserves the pages A
        // just freed, prefill transfers one token, and B reads A's prompt.
        let (status, raw) = s
            .post(
                &s.router,
                path,
                &body(path, &text_of("SECRET-B-0", LIMIT + 40), stream),
            )
            .await;
        assert_eq!(status, 200, "{path}: no error anywhere: {raw}");
        let b = answer(&raw);
        assert!(b.contains(&secret), "{path}: B is handed A's secret");
        assert_eq!(markers(&b), ['A'], "{path}: B's own prompt never arrived");
    }
    assert_eq!(s.sim.pool.free_pages(), 256, "every page is returned");
    s.sim.stop().await;
}

#[tokio::test]
async fn the_boundary_is_max_req_input_len_exactly() {
    let s = stack(Mode::Vulnerable).await;
    for (n, leaks) in [(LIMIT - 1, false), (LIMIT, true)] {
        let secret = format!("SECRET-A-{n}");
        let a = body("/generate", &text_of(&secret, LIMIT - 1), false);
        let (status, raw) = s.post(&s.router, "/generate", &a).await;
        assert_eq!(status, 200, "{raw}");
        let b = body("/generate", &text_of("SECRET-B-1", n), false);
        let (status, raw) = s.post(&s.router, "/generate", &b).await;
        assert_eq!(status, 200, "{raw}");
        let v: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["meta_info"]["prompt_tokens"], n);
        assert_eq!(
            answer(&raw).contains(&secret),
            leaks,
            "L = {n}, max_req_input_len = {LIMIT}"
        );
    }
    s.sim.stop().await;
}

#[tokio::test]
async fn fixed_pair_refuses_with_sglangs_400_on_both_workers() {
    let s = stack(Mode::Fixed).await;
    let over = text_of("SECRET-B-2", LIMIT);
    let message = format!(
        "Input length ({LIMIT} tokens) exceeds the maximum allowed length ({LIMIT} tokens). \
         Use a shorter input or enable --allow-auto-truncate."
    );
    // Through the dispatcher: both workers refuse; their SGLang error is the answer.
    let (status, raw) = s
        .post(&s.router, "/generate", &body("/generate", &over, false))
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&raw).unwrap(),
        json!({"error": {"message": message}})
    );
    let (status, raw) = s
        .post(
            &s.router,
            "/v1/completions",
            &body("/v1/completions", &over, false),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&raw).unwrap(),
        json!({"object": "error", "message": message, "type": "BadRequestError",
               "param": null, "code": 400})
    );
    // A batch with one over-limit sequence: refused as a whole, on both
    // workers, without waiting out the other sequences' handoffs.
    let batch = json!({"input_ids": [[70, 71, 72], vec![65; LIMIT]],
                       "sampling_params": {"max_new_tokens": 8}});
    let (status, raw) = s.post(&s.router, "/generate", &batch).await;
    assert_eq!(status, 400, "{raw}");
    assert!(raw.contains("exceeds the maximum allowed length"), "{raw}");
    // A stream is aborted as SGLang aborts it: HTTP 200, then an error event.
    let (status, raw) = s
        .post(&s.router, "/v1/chat/completions", &body("", &over, true))
        .await;
    assert_eq!(status, 200);
    let first = raw.lines().next().unwrap().strip_prefix("data: ").unwrap();
    let event: Value = serde_json::from_str(first).unwrap();
    assert_eq!(event["error"]["code"], 400, "{raw}");
    assert!(event["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Input length ("));
    assert!(!raw.contains("SECRET-"), "nothing generated");
    // Straight to both workers with one room, decode first: decode learns
    // of the refusal and answers the same error instead of generating.
    let mut req = body("/v1/completions", &over, false);
    req["bootstrap_host"] = json!("127.0.0.1");
    req["bootstrap_port"] = json!(8998);
    req["bootstrap_room"] = json!(9_007_199_254_740_993u64); // > 2^53: read as an integer
    let (decode, prefill) = (
        format!("http://{}", s.sim.decode),
        format!("http://{}", s.sim.prefill),
    );
    let (d, p) = tokio::join!(s.post(&decode, "/v1/completions", &req), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.post(&prefill, "/v1/completions", &req).await
    });
    assert_eq!((d.0, p.0), (400, 400), "{d:?} {p:?}");
    assert!(
        d.1.contains("exceeds the maximum allowed length"),
        "{}",
        d.1
    );
    // Under the limit the fixed pair serves as usual.
    let (status, raw) = s
        .post(
            &s.router,
            "/v1/chat/completions",
            &body("", "hello SECRET-C-1", false),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(markers(&answer(&raw)), ['C']);
    assert_eq!(s.sim.pool.free_pages(), 256);
    s.sim.stop().await;
}

#[tokio::test]
async fn workers_speak_sglangs_api() {
    let s = stack(Mode::Vulnerable).await;
    let get = |base: String, path: &'static str| {
        let http = s.http.clone();
        async move {
            let r = http.get(format!("{base}{path}")).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let prefill = format!("http://{}", s.sim.prefill);
    let decode = format!("http://{}", s.sim.decode);
    for base in [&prefill, &decode] {
        for path in ["/health", "/health_generate"] {
            assert_eq!(get(base.clone(), path).await.0, 200);
        }
    }
    let (_, info) = get(prefill.clone(), "/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_req_input_len"], LIMIT);
    assert_eq!(info["disaggregation_mode"], "prefill");
    assert_eq!(info["served_model_name"], "demo");
    assert_eq!(info["dp_size"], 1);
    let (_, old) = get(decode.clone(), "/get_server_info").await;
    assert_eq!(
        serde_json::from_str::<Value>(&old).unwrap()["disaggregation_mode"],
        "decode"
    );
    let (_, model) = get(prefill.clone(), "/get_model_info").await;
    assert_eq!(
        serde_json::from_str::<Value>(&model).unwrap()["served_model_name"],
        "demo"
    );
    let (_, models) = get(prefill.clone(), "/v1/models").await;
    assert_eq!(
        serde_json::from_str::<Value>(&models).unwrap()["data"][0]["max_model_len"],
        4096
    );
    // A PD worker refuses a request without a bootstrap room, as SGLang does.
    let (status, raw) = s
        .post(&prefill, "/generate", &body("/generate", "hi", false))
        .await;
    assert_eq!(status, 400);
    assert!(raw.contains("without bootstrap room id"), "{raw}");
    // Usage counts the prompt as the guard counts it.
    let (_, raw) = s
        .post(&s.router, "/v1/chat/completions", &body("", "hello", false))
        .await;
    let v: Value = serde_json::from_str(&raw).unwrap();
    // `<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n`: 3 specials + 5 + 5 + 1 + 10 bytes.
    assert_eq!(v["usage"]["prompt_tokens"], 24);
    assert_eq!(v["object"], "chat.completion");
    s.sim.stop().await;
}

#[tokio::test]
async fn with_the_guard_in_front_nobody_reads_anyone_else() {
    let s = stack(Mode::Vulnerable).await;
    let router_addr = s.router.trim_start_matches("http://").parse().unwrap();
    let guard = DemoGuard::start(s.model.path(), router_addr, s.sim.prefill)
        .await
        .unwrap();
    let base = format!("http://{}", guard.addr);
    // Many tenants at once; B's over-limit prompts sit on every route.
    let requests = (0..200usize).map(|k| {
        let (path, stream) = ROUTES[k % ROUTES.len()];
        let tenant = ['A', 'B', 'C', 'D'][k % 4];
        // Chat adds 19 template tokens: ordinary prompts stay under the limit.
        let n = if tenant == 'B' {
            LIMIT + k % 50
        } else {
            20 + k % 20
        };
        let req = body(path, &text_of(&format!("SECRET-{tenant}-{k}"), n), stream);
        let (http, base) = (s.http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}{path}"))
                .header("content-type", "application/json")
                .body(req.to_string())
                .send()
                .await
                .unwrap();
            (tenant, path, r.status().as_u16(), r.text().await.unwrap())
        }
    });
    let answers: Vec<_> = futures_util::stream::iter(requests)
        .buffer_unordered(32)
        .collect()
        .await;
    for (tenant, path, status, raw) in answers {
        if tenant == 'B' {
            assert_eq!(status, 400, "{path}: {raw}");
            if path != "/generate" {
                let v: Value = serde_json::from_str(&raw).unwrap();
                assert_eq!(v["error"]["code"], "context_length_exceeded");
            }
        } else {
            assert_eq!(status, 200, "{path}: {raw}");
            assert_eq!(
                markers(&answer(&raw)),
                [tenant],
                "{path}: only its own prompt"
            );
        }
    }
    guard.stop().await;
    s.sim.stop().await;
}

#[tokio::test]
async fn demo_command_reproduces_the_leak_and_the_guard_stops_it() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args(["demo", "--requests", "200", "--concurrency", "32"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |name: &str| -> Vec<usize> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` row in:\n{stdout}"));
        line[name.len()..]
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    // requests, leaks, refused, served, failed
    let before = row("without the guard");
    let after = row("with prefill-guard");
    assert_eq!(before[0], 200);
    assert!(before[1] > 0, "{stdout}");
    assert_eq!((before[2], before[3], before[4]), (0, 200, 0));
    assert_eq!(after, [200, 0, 50, 150, 0], "{stdout}");
    assert!(!stdout.contains("SECRET-"), "no prompt text is printed");
}

#[tokio::test]
async fn pd_sim_command_prints_its_urls_and_serves() {
    use tokio::io::AsyncBufReadExt;
    let model = tempfile::tempdir().unwrap();
    write_byte_model(model.path()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "pd-sim",
            "--prefill-listen",
            "127.0.0.1:0",
            "--decode-listen",
            "127.0.0.1:0",
        ])
        .arg("--tokenizer")
        .arg(model.path())
        .args([
            "--served-model-name",
            "m",
            "--max-req-input-len",
            "100",
            "--mode",
            "fixed",
            "--sglang-version",
            "0.5.21",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["mode"], "fixed");
    assert_eq!(v["version"], "0.5.21");
    assert_eq!(v["bootstrap_port"], 8998);
    let info = reqwest::get(format!("{}/server_info", v["prefill"].as_str().unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        (
            info["max_req_input_len"].clone(),
            info["served_model_name"].clone(),
            info["version"].clone()
        ),
        (json!(100), json!("m"), json!("0.5.21"))
    );
    let health = reqwest::get(format!("{}/health", v["decode"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let pid = child.id().unwrap().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "SIGTERM ends it cleanly: {status}");
}

/// `prefill-guard audit` reads the pair's `/server_info` as it reads a real
/// deployment's, and its verdict matches what the pair does.
#[tokio::test]
async fn audit_judges_the_pair_by_what_it_does() {
    for (mode, exit) in [(Mode::Vulnerable, 1), (Mode::Fixed, 0)] {
        let s = stack(mode).await;
        let prefill = format!("http://{}", s.sim.prefill);
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
            .args(["audit", "--upstream", &s.router, "--prefill-url", &prefill])
            .output()
            .await
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(exit),
            "{mode:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        s.sim.stop().await;
    }
}

/// The real `prefill-guard serve` binary on loopback ports in front of
/// `upstream`, counting with the model in `model`, with more `serve` flags.
struct ServedGuard {
    base: String,
    _child: tokio::process::Child,
}

async fn serve_guard(model: &std::path::Path, upstream: &str, flags: &[&str]) -> ServedGuard {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--upstream", upstream, "--served-model-name", "demo"])
        .args(["--log-format", "json"])
        .arg("--tokenizer")
        .arg(model)
        .args(flags)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let serving = tokio::time::timeout(PATIENCE, async {
        loop {
            let line = lines.next_line().await.unwrap().expect("the guard serves");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["message"] == "prefill-guard serving" {
                return v;
            }
        }
    })
    .await
    .expect("the guard starts serving");
    // Read the log on, so the pipe never fills.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let base = format!("http://{}", serving["listen"].as_str().unwrap());
    let readyz = format!(
        "http://{}/readyz",
        serving["admin_listen"].as_str().unwrap()
    );
    // Ready once the limit is known (with discovery: read from the worker).
    tokio::time::timeout(PATIENCE, async {
        while reqwest::get(&readyz)
            .await
            .ok()
            .map(|r| r.status().as_u16())
            != Some(200)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the guard gets ready");
    ServedGuard {
        base,
        _child: child,
    }
}

/// A chat whose `messages` hold `n` tokens of text carrying `marker`, and
/// whose `input_ids` are `ids`: on SGLang before 0.5.13 the ids are dropped
/// and the messages rendered; from 0.5.13 the ids are the prompt.
fn chat_with_ids(marker: &str, n: usize, ids: &[u32], stream: bool) -> Value {
    let mut b = body("/v1/chat/completions", &text_of(marker, n), stream);
    b["input_ids"] = json!(ids);
    b
}

/// `/server_info`'s `version`, read as discovery reads it.
async fn announced_version(s: &Stack) -> Value {
    let r = s
        .http
        .get(format!("http://{}/get_server_info", s.sim.prefill))
        .send()
        .await
        .unwrap();
    serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap()["version"].clone()
}

/// The worst bypass of a guard that trusts chat `input_ids`: on a release
/// before 0.5.13 a chat with long `messages` and `input_ids: [1, 2, 3]` is a
/// long prompt. The pair leaks on it; the guard, reading the version from
/// the prefill worker, counts the messages and refuses it.
#[tokio::test]
async fn before_0_5_13_chat_input_ids_are_ignored_and_the_guard_counts_the_messages() {
    // 0.4.10.post2 also has only the old `/get_*` info routes: discovery falls back.
    for version in ["0.5.11", "0.4.10.post2"] {
        let s = stack_at(Mode::Vulnerable, Some(version)).await;
        assert_eq!(announced_version(&s).await, version);
        let bypass = |stream| chat_with_ids("SECRET-B-3", LIMIT + 40, &[1, 2, 3], stream);
        // Without the guard: the pair renders the messages (L >= LIMIT), the
        // prefill stubs the prompt, and B reads A's pages.
        for (i, stream) in [false, true].into_iter().enumerate() {
            let secret = format!("SECRET-A-{i}");
            let a = body("", &text_of(&secret, 40), false);
            let (status, raw) = s.post(&s.router, "/v1/chat/completions", &a).await;
            assert_eq!((status, markers(&answer(&raw))), (200, vec!['A']), "{raw}");
            let (status, raw) = s
                .post(&s.router, "/v1/chat/completions", &bypass(stream))
                .await;
            assert_eq!(status, 200, "{version}: no error anywhere: {raw}");
            let b = answer(&raw);
            assert!(b.contains(&secret), "{version}: B is handed A's secret");
            assert_eq!(
                markers(&b),
                ['A'],
                "{version}: B's own prompt never arrived"
            );
            if !stream {
                let v: Value = serde_json::from_str(&raw).unwrap();
                // The template adds 19 tokens to the message.
                assert_eq!(v["usage"]["prompt_tokens"], LIMIT + 40 + 19, "{version}");
            }
        }
        // With the guard, which reads the version and the limit from the
        // prefill worker: refused, and the workers never see it.
        let prefill = format!("http://{}", s.sim.prefill);
        let guard = serve_guard(s.model.path(), &s.router, &["--prefill-url", &prefill]).await;
        let a = body("", &text_of("SECRET-A-7", 40), false);
        let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &a).await;
        assert_eq!((status, markers(&answer(&raw))), (200, vec!['A']), "{raw}");
        let before = s.sim.requests_received();
        for stream in [false, true] {
            let (status, raw) = s
                .post(&guard.base, "/v1/chat/completions", &bypass(stream))
                .await;
            assert_eq!(status, 400, "{version}: {raw}");
            let v: Value = serde_json::from_str(&raw).unwrap();
            assert_eq!(v["error"]["code"], "context_length_exceeded", "{raw}");
            assert!(!raw.contains("SECRET-"), "{raw}");
        }
        assert_eq!(
            s.sim.requests_received(),
            before,
            "{version}: nothing reached the workers"
        );
        drop(guard);
        s.sim.stop().await;
    }
}

/// From 0.5.13 the same request is a three-token prompt on a worker that
/// gets the ids; but sglang-router drops `input_ids` when it forwards a chat
/// in PD mode, and the worker then renders the messages. The guard cannot
/// see which, so it counts the larger: the long messages are refused in
/// front of 0.5.19 too, while the pair itself takes the ids.
#[tokio::test]
async fn from_0_5_13_chat_input_ids_are_the_prompt_but_the_guard_counts_the_messages_too() {
    let s = stack_at(Mode::Vulnerable, Some("0.5.19")).await;
    assert_eq!(announced_version(&s).await, "0.5.19");
    let prefill = format!("http://{}", s.sim.prefill);
    let guard = serve_guard(s.model.path(), &s.router, &["--prefill-url", &prefill]).await;
    let bypass = chat_with_ids("SECRET-B-4", LIMIT + 40, &[1, 2, 3], false);
    // Straight to the pair (whose dispatcher keeps the ids): three tokens.
    let (status, raw) = s.post(&s.router, "/v1/chat/completions", &bypass).await;
    assert_eq!(status, 200, "{raw}");
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 3, "{raw}");
    assert_eq!(answer(&raw), "\u{1}\u{2}\u{3}", "the ids are the prompt");
    // Through the guard: the messages alone are over the limit.
    let a = body("", &text_of("SECRET-A-8", 40), false);
    let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &a).await;
    assert_eq!((status, markers(&answer(&raw))), (200, vec!['A']), "{raw}");
    let before = s.sim.requests_received();
    let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &bypass).await;
    assert_eq!(status, 400, "{raw}");
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{raw}");
    assert_eq!(
        s.sim.requests_received(),
        before,
        "nothing reached the workers"
    );
    // Short messages with the ids are admitted and the ids are the prompt.
    let short = chat_with_ids("SECRET-B-6", 4, &[1, 2, 3], false);
    let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &short).await;
    assert_eq!(status, 200, "{raw}");
    let v: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 3, "{raw}");
    drop(guard);
    s.sim.stop().await;
}

/// A guard told no release (`serve --max-req-input-len`, no discovery) may
/// be in front of any of them, so it counts the messages as the releases
/// before 0.5.13 do, whatever the `input_ids` say.
#[tokio::test]
async fn a_static_guard_without_a_version_counts_the_messages_whatever_the_ids() {
    let s = stack_at(Mode::Vulnerable, Some("0.5.11")).await;
    let limit = LIMIT.to_string();
    let guard = serve_guard(s.model.path(), &s.router, &["--max-req-input-len", &limit]).await;
    let a = body("", &text_of("SECRET-A-9", 40), false);
    let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &a).await;
    assert_eq!((status, markers(&answer(&raw))), (200, vec!['A']), "{raw}");
    let before = s.sim.requests_received();
    let ids: [&[u32]; 3] = [&[1, 2, 3], &[7], &[65; 10]];
    for ids in ids {
        for stream in [false, true] {
            let bypass = chat_with_ids("SECRET-B-5", LIMIT + 40, ids, stream);
            let (status, raw) = s.post(&guard.base, "/v1/chat/completions", &bypass).await;
            assert_eq!(status, 400, "{ids:?}: {raw}");
            let v: Value = serde_json::from_str(&raw).unwrap();
            assert_eq!(v["error"]["code"], "context_length_exceeded", "{raw}");
        }
    }
    assert_eq!(
        s.sim.requests_received(),
        before,
        "nothing reached the workers"
    );
    drop(guard);
    s.sim.stop().await;
}

/// What each release publishes: the version everywhere, the newer info
/// routes and keys only where the release has them.
#[tokio::test]
async fn workers_publish_what_their_release_publishes() {
    for (version, new_routes, internal_states, architecture) in [
        ("0.4.6", false, false, false),
        ("0.4.10.post2", false, true, false),
        ("0.5.11", true, true, true),
        ("0.5.19", true, true, true),
    ] {
        let s = stack_at(Mode::Vulnerable, Some(version)).await;
        let get = |path: &'static str| {
            let url = format!("http://{}{path}", s.sim.prefill);
            let http = s.http.clone();
            async move {
                let r = http.get(url).send().await.unwrap();
                let status = r.status().as_u16();
                (
                    status,
                    serde_json::from_str::<Value>(&r.text().await.unwrap()).unwrap(),
                )
            }
        };
        let (status, info) = get("/get_server_info").await;
        assert_eq!(status, 200);
        assert_eq!(info["version"], version);
        assert_eq!(info["max_req_input_len"], LIMIT);
        assert_eq!(
            info.get("internal_states").is_some(),
            internal_states,
            "{version}"
        );
        let (status, model) = get("/get_model_info").await;
        assert_eq!(status, 200);
        assert_eq!(
            model.get("architectures").is_some(),
            architecture,
            "{version}"
        );
        for path in ["/server_info", "/model_info"] {
            let status = get(path).await.0;
            assert_eq!(status == 200, new_routes, "{version} {path}: {status}");
        }
        s.sim.stop().await;
    }
}

/// `pd-sim --sglang-version` refuses what it cannot be, with why.
#[tokio::test]
async fn pd_sim_refuses_a_version_it_cannot_run() {
    let model = tempfile::tempdir().unwrap();
    write_byte_model(model.path()).unwrap();
    for (version, mode, says) in [
        ("latest", "vulnerable", "is not an SGLang version"),
        ("0.4.4", "vulnerable", "older than 0.4.5"),
        ("0.5.21", "vulnerable", "has the fix"),
        ("0.5.11", "fixed", "has no fix"),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
            .args(["pd-sim", "--max-req-input-len", "100", "--mode", mode])
            .args(["--sglang-version", version])
            .arg("--tokenizer")
            .arg(model.path())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{version} {mode}");
        assert!(out.stdout.is_empty(), "no address line: {version} {mode}");
        assert!(stderr.contains(says), "{version} {mode}: {stderr}");
    }
    // Nor a server flag the release does not have.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "pd-sim",
            "--max-req-input-len",
            "100",
            "--sglang-version",
            "0.5.11",
        ])
        .args(["--default-chat-template-kwargs", "{}"])
        .arg("--tokenizer")
        .arg(model.path())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no --default-chat-template-kwargs"));
}
