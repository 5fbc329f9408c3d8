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
        sglang_version: None,
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
            info["served_model_name"].clone()
        ),
        (json!(100), json!("m"))
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
