//! Reload without restart: the configuration file and tokenizers are read
//! again and swapped in while requests keep flowing. No request fails during
//! a reload, in-flight requests finish on the state they started with, a
//! failed reload keeps the running state, and what discovery learnt survives.
//! The last test sends a real SIGHUP to the real binary.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use common::live::{start_live, Live};
use common::sglang::{eventually, prefill_worker, InfoMock};
use common::{ids, sample, words, MODEL, PATIENCE};

/// Clients that keep sending requests whose answer does not depend on which
/// of the limits used here (8 or 9) is in force, and record every surprise.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(proxy: std::net::SocketAddr, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let http = reqwest::Client::new();
        let cases: Vec<(&'static str, Value, u16)> = vec![
            ("/generate", json!({"input_ids": ids(5)}), 200),
            ("/generate", json!({"input_ids": ids(30)}), 400),
            // Counted with the tokenizer a reload loads again: 3 tokens.
            (
                "/v1/completions",
                json!({"model": MODEL, "prompt": words(3)}),
                200,
            ),
            // 2 words + 5 template tokens = 7.
            ("/v1/chat/completions", common::bodies::chat(2), 200),
        ];
        let tasks = (0..clients)
            .map(|c| {
                let (stop, sent, failures, http, cases) = (
                    stop.clone(),
                    sent.clone(),
                    failures.clone(),
                    http.clone(),
                    cases.clone(),
                );
                tokio::spawn(async move {
                    // Bounded: a test that forgets to stop cannot loop forever.
                    for i in c..c + 100_000 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let (path, body, want) = &cases[i % cases.len()];
                        let got = http
                            .post(format!("http://{proxy}{path}"))
                            .header("content-type", "application/json")
                            .body(body.to_string())
                            .send()
                            .await;
                        match got {
                            Ok(r) if r.status().as_u16() == *want => {
                                // Read the body too: a response cut short is a failure.
                                if let Err(e) = r.bytes().await {
                                    failures.lock().unwrap().push(format!("{path}: body: {e}"));
                                }
                            }
                            Ok(r) => {
                                let status = r.status();
                                let body = r.text().await.unwrap_or_default();
                                let failure = format!("{path}: {status} instead of {want}: {body}");
                                failures.lock().unwrap().push(failure);
                            }
                            Err(e) => failures.lock().unwrap().push(format!("{path}: {e}")),
                        }
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Self {
            stop,
            sent,
            failures,
            tasks,
        }
    }

    /// Waits until `n` more requests have been answered: each reload happens
    /// with requests going on before and after it.
    async fn progress(&self, n: usize) {
        let from = self.sent.load(Ordering::SeqCst);
        eventually("the clients make progress", || async {
            self.sent.load(Ordering::SeqCst) >= from + n
        })
        .await;
    }

    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        assert!(failures.is_empty(), "requests failed: {failures:#?}");
        self.sent.load(Ordering::SeqCst)
    }
}

async fn boundary_at(live: &Live, limit: usize) {
    let at_8 = live
        .g
        .post("/generate", &json!({"input_ids": ids(8)}))
        .await;
    let want = if limit > 8 { 200 } else { 400 };
    assert_eq!(at_8.status, want, "L = 8 with the limit at {limit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_fails_while_reloading_under_load() {
    let live = start_live("max_req_input_len = 8\n").await;
    let load = Load::start(live.g.proxy, 4);
    load.progress(20).await;
    for i in 0..6 {
        let limit = if i % 2 == 0 { 9 } else { 8 };
        live.write_config(&format!("max_req_input_len = {limit}\n"));
        live.runtime.reload().await.unwrap();
        assert_eq!(live.limit(), Some(limit));
        boundary_at(&live, limit).await;
        load.progress(20).await;
    }
    let sent = load.finish().await;
    assert!(sent >= 140);
    let text = live.g.metrics().await;
    assert_eq!(
        sample(&text, "prefill_guard_reloads_total{outcome=\"success\"}"),
        6.0
    );
    assert_eq!(
        sample(&text, "prefill_guard_reloads_total{outcome=\"failure\"}"),
        0.0
    );
    // Counters survived the six swaps: every request of the load is counted.
    let allowed: f64 = [
        "/generate",
        "/v1/completions",
        "/v1/chat/completions",
    ]
    .iter()
    .map(|r| {
        sample(
            &text,
            &format!("prefill_guard_requests_total{{mode=\"proxy\",route=\"{r}\",model=\"{MODEL}\",decision=\"allowed\"}}"),
        )
    })
    .sum();
    assert!(allowed >= (sent / 2) as f64, "{allowed} allowed of {sent}");
}

#[tokio::test]
async fn an_in_flight_stream_finishes_on_the_state_it_started_with() {
    let mut live = start_live("max_req_input_len = 8\n").await;
    let resp = live
        .g
        .http
        .post(live.g.url("/v1/completions"))
        .header("content-type", "application/json")
        .header("x-mock", "hold")
        .body(json!({"model": MODEL, "prompt": ids(7), "stream": true}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut resp = resp;
    let first = tokio::time::timeout(PATIENCE, resp.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b"data: {\"chunk\":0}"));

    // Reload to a limit the streaming request would no longer pass.
    live.write_config("max_req_input_len = 5\n");
    live.runtime.reload().await.unwrap();
    let refused = live
        .g
        .post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": ids(7)}),
        )
        .await;
    assert_eq!(refused.status, 400, "new requests get the new state");

    // The old request keeps its connection, its state and its stream.
    live.g.mock.state.release.notify_one();
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, resp.chunk())
        .await
        .unwrap()
        .unwrap()
    {
        rest.extend_from_slice(&chunk);
    }
    assert!(
        rest.ends_with(b"data: [DONE]\n\n"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    live.g.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_reload_keeps_the_running_state() {
    let live = start_live("max_req_input_len = 8\n").await;
    for (broken, why) in [
        ("max_req_input_len = \"eight\"\n", "invalid type"),
        ("max_req_input_len = 8\nlisten_typo = 1\n", "unknown key `listen_typo`"),
        // Neither a static limit nor prefill workers: still refused.
        ("", "no prompt limit"),
        (
            "max_req_input_len = 9\n[[models]]\nname = \"other\"\ntokenizer = \"/does/not/exist\"\nmax_req_input_len = 9\n",
            "/does/not/exist",
        ),
    ] {
        live.write_config(broken);
        let err = live.runtime.reload().await.unwrap_err();
        assert!(format!("{err:#}").contains(why), "{why}: {err:#}");
        assert_eq!(live.limit(), Some(8));
        boundary_at(&live, 8).await;
    }
    let text = live.g.metrics().await;
    assert_eq!(
        sample(&text, "prefill_guard_reloads_total{outcome=\"failure\"}"),
        4.0
    );
    assert_eq!(
        sample(&text, "prefill_guard_reloads_total{outcome=\"success\"}"),
        0.0
    );
    // And a good one after all that goes through.
    live.write_config("max_req_input_len = 9\n");
    live.runtime.reload().await.unwrap();
    boundary_at(&live, 9).await;
}

#[tokio::test]
async fn a_reload_keeps_what_discovery_learnt() {
    let w = InfoMock::start(prefill_worker(10)).await;
    let with_workers = |extra: &str, urls: &[String]| {
        let list: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
        format!(
            "{extra}prefill_urls = [{}]\ndiscovery_interval_ms = 20\n",
            list.join(", ")
        )
    };
    let live = start_live(&with_workers("", &[w.url()])).await;
    eventually("discovered", || async { live.limit() == Some(10) }).await;

    // Same worker, a margin added: the new state has the discovered value at
    // once, with the margin, and never a moment without a limit.
    w.set(|a| a.fail_with = Some(503));
    live.write_config(&with_workers("safety_margin_tokens = 3\n", &[w.url()]));
    live.runtime.reload().await.unwrap();
    assert_eq!(live.limit(), Some(7));
    assert_eq!(live.readyz().await, 200);
    boundary_at(&live, 7).await;

    // A newly listed worker that does not answer would leave the model
    // without a limit: the reload is refused and the guard stays ready.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    live.write_config(&with_workers(
        "safety_margin_tokens = 3\n",
        &[w.url(), dead.clone()],
    ));
    let err = live.runtime.reload().await.unwrap_err();
    assert!(format!("{err:#}").contains(&dead), "{err:#}");
    assert_eq!(live.limit(), Some(7));
    assert_eq!(live.readyz().await, 200);

    // Once it answers, the same reload goes through and both workers count.
    let second = InfoMock::start(prefill_worker(6)).await;
    live.write_config(&with_workers("", &[w.url(), second.url()]));
    live.runtime.reload().await.unwrap();
    assert_eq!(live.limit(), Some(6));
}

/// The real binary, a real SIGHUP, requests flowing throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_running_binary() {
    let mock = common::start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let config = dir.path().join("prefill-guard.toml");
    let write = |limit: usize| {
        std::fs::write(
            &config,
            format!(
                "upstream = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
                 log_format = \"json\"\ncount_workers = 2\ncount_queue = 256\n\
                 name = \"{MODEL}\"\ntokenizer = {:?}\nmax_req_input_len = {limit}\n",
                mock.addr,
                model.display().to_string()
            ),
        )
        .unwrap();
    };
    write(8);
    let common::Spawned {
        mut child,
        pid,
        logs: mut rx,
        serving,
    } = common::spawn_binary(&config).await;
    let proxy: std::net::SocketAddr = serving["listen"].as_str().unwrap().parse().unwrap();
    let admin = serving["admin_listen"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let metric = |series: &'static str| {
        let (http, admin) = (http.clone(), admin.clone());
        async move { sample(&common::scrape(&http, &admin).await, series) }
    };
    assert_eq!(
        metric("prefill_guard_limit_tokens{model=\"demo\"}").await,
        8.0
    );

    let load = Load::start(proxy, 3);
    load.progress(20).await;
    write(9);
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(hup.success());
    eventually("the limit becomes 9", || async {
        metric("prefill_guard_limit_tokens{model=\"demo\"}").await == 9.0
    })
    .await;
    assert_eq!(
        metric("prefill_guard_reloads_total{outcome=\"success\"}").await,
        1.0
    );
    load.progress(20).await;
    load.finish().await;
    let at_8 = http
        .post(format!("http://{proxy}/generate"))
        .header("content-type", "application/json")
        .body(json!({"input_ids": ids(8)}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(at_8.status(), 200, "L = 8 fits the reloaded limit of 9");
    tokio::time::timeout(PATIENCE, async {
        while let Some(line) = rx.recv().await {
            if line["message"] == "configuration reloaded" {
                return;
            }
        }
        panic!("the log ended without the reload line");
    })
    .await
    .expect("the reload is logged");

    // SIGTERM: the binary drains and exits cleanly.
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("the guard exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    // The held reference keeps the mock alive until the end.
    drop(mock);
}
