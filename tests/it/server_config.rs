//! The prefill server's configuration, read by discovery: a modelled
//! setting changes the count exactly as SGLang's would; a setting the guard
//! does not model, two workers that disagree, and a configured value the
//! live server contradicts each take the model out of service (503 naming
//! the setting, `/readyz` 503, the mismatch gauge, a log line) with nothing
//! forwarded; a later poll that removes the problem brings it back.

use crate::common;

use serde_json::{json, Value};

use common::live::{start_live, Live};
use common::sglang::{eventually, prefill_worker, Answers, InfoMock};
use common::{binary_config, sample, spawn_binary_with_args, words, MODEL};

const FAST: &str = "discovery_interval_ms = 20\n";

fn workers(urls: &[&InfoMock]) -> String {
    let list: Vec<String> = urls.iter().map(|w| format!("\"{}\"", w.url())).collect();
    format!("prefill_urls = [{}]\n{FAST}", list.join(", "))
}

use common::bodies::chat;

/// A worker with `setting` = `value` in its `/server_info`.
fn worker_with(limit: usize, setting: &str, value: Value) -> Answers {
    let mut a = prefill_worker(limit);
    a.server_info[setting] = value;
    a
}

/// A server-side template (through `--default-chat-template-kwargs`) that
/// renders each message's words and two more: `n + 2` tokens on the demo
/// tokenizer, where the checkpoint's ChatML template gives `n + 5`.
fn kwarg_template() -> Value {
    json!({"chat_template": "{% for m in messages %}{{ m['content'] }} hello hello{% endfor %}"})
}

async fn not_served(live: &Live, code: &str, setting: &str) {
    not_served_saying(live, code, setting, setting).await
}

/// As [`not_served`], the client's message containing `says`.
async fn not_served_saying(live: &Live, code: &str, setting: &str, says: &str) {
    eventually(
        &format!("the model is refused with {code} for {setting}"),
        || async {
            let a = live.g.post("/v1/chat/completions", &chat(1)).await;
            a.error_code() == code
                && a.json()["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains(says)
        },
    )
    .await;
    let before = live.g.mock.state.count();
    let answer = live.g.post("/v1/chat/completions", &chat(1)).await;
    assert_eq!(answer.status, 503);
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(says), "{message}");
    assert_eq!(live.g.mock.state.count(), before, "nothing forwarded");
    assert_eq!(live.readyz().await, 503);
    let metrics = live.g.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            &format!("prefill_guard_model_ready{{model=\"{MODEL}\"}}")
        ),
        0.0
    );
    assert!(
        metrics.contains(&format!(
            "prefill_guard_server_config_mismatch{{model=\"{MODEL}\",setting=\"{setting}\""
        )),
        "{metrics}"
    );
}

async fn served(live: &Live) {
    eventually("the model is served again", || async {
        live.g.post("/v1/chat/completions", &chat(1)).await.status == 200
    })
    .await;
    assert_eq!(live.readyz().await, 200);
}

#[tokio::test]
async fn default_kwargs_of_the_server_change_the_count_exactly() {
    // M = 10. Under the worker's template a chat of n words is n + 2 tokens:
    // 7 words fit (9), 8 do not (10). The checkpoint's template would count
    // 8 words as 13 and 4 words as 9: the boundary moves only if the
    // server's setting is applied.
    let w = InfoMock::start(worker_with(
        10,
        "default_chat_template_kwargs",
        kwarg_template(),
    ))
    .await;
    let live = start_live(&workers(&[&w])).await;
    eventually("the worker's settings are in force", || async {
        live.g
            .metrics()
            .await
            .contains("setting=\"default_chat_template_kwargs\"")
    })
    .await;
    let before = live.g.mock.state.count();
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(7)).await.status,
        200
    );
    let over = live.g.post("/v1/chat/completions", &chat(8)).await;
    assert_eq!(over.status, 400);
    assert_eq!(over.error_code(), "context_length_exceeded");
    let message = over.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("resulted in 10 tokens"), "{message}");
    assert_eq!(
        live.g.mock.state.count(),
        before + 1,
        "only the 7-word chat"
    );
    // The settings the model is counted under are exported.
    let metrics = live.g.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            &format!("prefill_guard_model_ready{{model=\"{MODEL}\"}}")
        ),
        1.0
    );

    // The server drops the setting: the next poll counts with the checkpoint's template.
    w.set(|a| *a = prefill_worker(10));
    eventually("the checkpoint's template is back", || async {
        live.g.post("/v1/chat/completions", &chat(5)).await.status == 400
    })
    .await;
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(4)).await.status,
        200
    );
}

#[tokio::test]
async fn an_unmodelled_setting_takes_the_model_out_of_service_until_it_goes() {
    let w = InfoMock::start(worker_with(100, "tokenizer_mode", json!("slow"))).await;
    let live = start_live(&workers(&[&w])).await;
    not_served(&live, "server_config_unmodelled", "tokenizer_mode").await;
    // A conversation template is not modelled either.
    w.set(|a| *a = worker_with(100, "chat_template", json!("chatml")));
    not_served(&live, "server_config_unmodelled", "chat_template").await;
    w.set(|a| *a = prefill_worker(100));
    served(&live).await;
}

/// A rolling restart: two prefill workers whose `default_chat_template_kwargs`
/// differ are each counted for and the larger count wins (as for releases),
/// the model stays in service; a worker whose polls fail is named stale and
/// its last settings keep counting.
#[tokio::test]
async fn workers_that_disagree_are_counted_each_way_and_the_larger_wins() {
    // The checkpoint's ChatML template: n + 5 tokens for n words; this one n + 8.
    let long = json!({"chat_template":
        "{% for m in messages %}{{ m['content'] }} hello hello hello hello hello hello hello hello{% endfor %}"});
    let a = InfoMock::start(prefill_worker(10)).await;
    let b = InfoMock::start(worker_with(10, "default_chat_template_kwargs", long)).await;
    let live = start_live(&format!("{}\n", workers(&[&a, &b]))).await;
    eventually("both ways are counted", || async {
        live.g.post("/v1/chat/completions", &chat(2)).await.status == 400
    })
    .await;
    assert_eq!(live.readyz().await, 200, "the model stays in service");
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(1)).await.status,
        200
    );
    // b stops answering mid-rollout: it is named stale, and its last
    // settings are still counted (the router may still send it requests).
    b.set(|x| x.fail_with = Some(503));
    let stale = format!("prefill_guard_discovery_stale{{worker=\"{}\"}}", b.url());
    eventually("the silent worker is named stale", || async {
        sample(&live.g.metrics().await, &stale) == 1.0
    })
    .await;
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(2)).await.status,
        400
    );
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(1)).await.status,
        200
    );
}

#[tokio::test]
async fn a_configured_value_the_live_server_contradicts_is_never_silently_overridden() {
    let w = InfoMock::start(worker_with(
        100,
        "default_chat_template_kwargs",
        json!({"enable_thinking": false}),
    ))
    .await;
    let live = start_live(&format!(
        "default_chat_template_kwargs = {{ enable_thinking = true }}\n{}",
        workers(&[&w])
    ))
    .await;
    not_served(
        &live,
        "server_config_disagrees",
        "default_chat_template_kwargs",
    )
    .await;
    w.set(|a| {
        *a = worker_with(
            100,
            "default_chat_template_kwargs",
            json!({"enable_thinking": true}),
        )
    });
    served(&live).await;
}

#[tokio::test]
async fn a_failed_poll_keeps_the_settings_in_force() {
    let w = InfoMock::start(worker_with(
        10,
        "default_chat_template_kwargs",
        kwarg_template(),
    ))
    .await;
    let live = start_live(&workers(&[&w])).await;
    eventually("the worker's template is in force", || async {
        live.g.post("/v1/chat/completions", &chat(8)).await.status == 400
    })
    .await;
    w.set(|a| a.fail_with = Some(503));
    eventually("the worker is marked stale", || async {
        sample(
            &live.g.metrics().await,
            &format!("prefill_guard_discovery_stale{{worker=\"{}\"}}", w.url()),
        ) == 1.0
    })
    .await;
    // Still the server's template: 7 words are 9 tokens (the checkpoint's would be 12).
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(7)).await.status,
        200
    );
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(8)).await.status,
        400
    );
}

/// `main` is the revision a server without `--revision` loads, and the
/// guard's default: a worker that states it, and a guard that states it in
/// front of a worker that does not, are both served; another revision is not.
#[tokio::test]
async fn the_main_revision_is_the_default_either_way() {
    let w = InfoMock::start(worker_with(100, "revision", json!("main"))).await;
    let live = start_live(&workers(&[&w])).await;
    served(&live).await;

    let w = InfoMock::start(prefill_worker(100)).await;
    let live = start_live(&format!("revision = \"main\"\n{}", workers(&[&w]))).await;
    served(&live).await;

    let live = start_live(&format!("revision = \"v2\"\n{}", workers(&[&w]))).await;
    not_served(&live, "server_config_disagrees", "revision").await;
}

/// The real binary says in its log what to configure, and the metrics pass promtool.
#[tokio::test]
async fn the_log_names_the_setting_and_the_fix() {
    let w = InfoMock::start(worker_with(100, "revision", json!("abc123"))).await;
    let mock = common::start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = binary_config(dir.path(), mock.addr, &workers(&[&w]));
    let mut guard = spawn_binary_with_args(&config, &[]).await;
    let line = tokio::time::timeout(common::PATIENCE, async {
        loop {
            let line = guard.logs.recv().await.expect("the guard logs");
            if line["message"]
                == "model not served: its server configuration cannot be counted exactly"
            {
                return line;
            }
        }
    })
    .await
    .expect("a line saying why the model is not served");
    assert_eq!(line["settings"], "revision");
    let why = line["why"].as_str().unwrap();
    assert!(
        why.contains("abc123") && why.contains("set revision"),
        "{why}"
    );
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    let metrics = common::scrape(&reqwest::Client::new(), &admin).await;
    assert!(metrics.contains("prefill_guard_server_config_mismatch{model=\"demo\",setting=\"revision\",kind=\"unmodelled\"} 1"), "{metrics}");
    common::promtool_check_metrics(&metrics);
}

/// `verify_sample_rate`: sampled allowed requests are compared with the
/// worker's `/v1/tokenize`; an undercount takes the model out of service
/// until a reload.
#[tokio::test]
async fn a_sampled_undercount_takes_the_model_out_of_service_until_a_reload() {
    let w = InfoMock::start(prefill_worker(100)).await;
    let live = start_live(&format!("verify_sample_rate = 1.0\n{}", workers(&[&w]))).await;
    eventually("the limit is known", || async { live.limit() == Some(100) }).await;
    let series = |result: &str| {
        format!("prefill_guard_count_check_total{{model=\"{MODEL}\",result=\"{result}\"}}")
    };
    // The mock counts like the demo tokenizer: equal.
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(2)).await.status,
        200
    );
    eventually("an equal check", || async {
        sample(&live.g.metrics().await, &series("equal")) == 1.0
    })
    .await;
    assert!(w.hits("/v1/tokenize") >= 1);
    // The mock splits "zebra" in two, the demo tokenizer does not: the
    // guard counts one token less than the server.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "zebra"}]});
    assert_eq!(live.g.post("/v1/chat/completions", &body).await.status, 200);
    eventually("an undercount is found", || async {
        sample(&live.g.metrics().await, &series("under")) == 1.0
    })
    .await;
    not_served_saying(
        &live,
        "count_check_failed",
        "count_check",
        "counting fewer tokens",
    )
    .await;
    // A reload (SIGHUP) brings it back.
    live.runtime.reload().await.unwrap();
    eventually("served after the reload", || async {
        live.g.post("/v1/chat/completions", &chat(1)).await.status == 200
    })
    .await;
}

/// An undercount within `safety_margin_tokens` is what the margin is for:
/// reported (`under_within_margin`), the model stays in service.
#[tokio::test]
async fn an_undercount_within_the_margin_is_reported_not_quarantined() {
    let w = InfoMock::start(prefill_worker(100)).await;
    let live = start_live(&format!(
        "verify_sample_rate = 1.0\nsafety_margin_tokens = 1\n{}",
        workers(&[&w])
    ))
    .await;
    eventually("the limit is known", || async { live.limit() == Some(99) }).await;
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "zebra"}]});
    assert_eq!(live.g.post("/v1/chat/completions", &body).await.status, 200);
    let series = format!(
        "prefill_guard_count_check_total{{model=\"{MODEL}\",result=\"under_within_margin\"}}"
    );
    eventually("the undercount is reported", || async {
        sample(&live.g.metrics().await, &series) == 1.0
    })
    .await;
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(1)).await.status,
        200,
        "still served"
    );
}

/// Verification that cannot verify is loud: a `/v1/tokenize` behind
/// SGLang's `--api-key` answers 401 until the guard is given the key
/// (`sglang_api_key_file`), and `prefill_guard_count_check_failing` says so
/// meanwhile. The key reaches discovery too.
#[tokio::test]
async fn a_failing_verification_is_a_metric_and_the_api_key_fixes_it() {
    let mut answers = prefill_worker(100);
    answers.api_key = Some("s3cret".into());
    let w = InfoMock::start(answers).await;
    // Without the key discovery itself is refused: the worker is named.
    let live = start_live(&format!("verify_sample_rate = 1.0\n{}", workers(&[&w]))).await;
    eventually("discovery fails with 401", || async {
        live.g
            .metrics()
            .await
            .contains("prefill_guard_discovery_errors_total")
    })
    .await;
    assert_eq!(live.limit(), None);
    drop(live);

    // With the key discovery answers; tokenize then fails for another reason.
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "s3cret\n").unwrap();
    let live = start_live(&format!(
        "verify_sample_rate = 1.0\nsglang_api_key_file = {:?}\n{}",
        key_file.display().to_string(),
        workers(&[&w])
    ))
    .await;
    eventually("the limit is known", || async { live.limit() == Some(100) }).await;
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(2)).await.status,
        200
    );
    let equal = format!("prefill_guard_count_check_total{{model=\"{MODEL}\",result=\"equal\"}}");
    eventually("a check is made with the key", || async {
        sample(&live.g.metrics().await, &equal) == 1.0
    })
    .await;
    let failing = format!("prefill_guard_count_check_failing{{model=\"{MODEL}\"}}");
    assert_eq!(sample(&live.g.metrics().await, &failing), 0.0);
    // The worker's key changes: checks fail, and the gauge says so.
    w.set(|a| a.api_key = Some("rotated".into()));
    assert_eq!(
        live.g.post("/v1/chat/completions", &chat(2)).await.status,
        200
    );
    eventually("the failure is a metric", || async {
        sample(&live.g.metrics().await, &failing) == 1.0
    })
    .await;
}

/// Without discovery, `verify_tokenize_url` is where sampled requests are
/// tokenized, and an undercount's log line carries the request id.
#[tokio::test]
async fn static_mode_verifies_through_its_tokenize_url() {
    let w = InfoMock::start(prefill_worker(100)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = binary_config(
        dir.path(),
        "127.0.0.1:9",
        &format!(
            "max_req_input_len = 100\nverify_sample_rate = 1.0\nverify_tokenize_url = \"{}\"\n",
            w.url()
        ),
    );
    let mut guard = spawn_binary_with_args(&config, &[]).await;
    let listen = guard.serving["listen"].as_str().unwrap().to_string();
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "zebra"}]});
    // The upstream is down (502): the sample is taken once the guard allowed it.
    let answer = reqwest::Client::new()
        .post(format!("http://{listen}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-request-id", "req-zebra-1")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 502);
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let line = guard.logs.recv().await.expect("the guard logs");
            if line["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the guard undercounted a sampled request"))
            {
                return line;
            }
        }
    })
    .await
    .expect("an undercount line");
    assert_eq!(line["request_id"], "req-zebra-1", "{line}");
    assert!(w.hits("/v1/tokenize") >= 1);
}

/// A server template that says `hello` once per key of each tool's function,
/// then the message words: the demo tokenizer counts `n + 3` for a chat of
/// `n` words and one `{"name": ...}` tool as SGLang 0.5.23 dumps it
/// (`name`, then `description` and `parameters` as null), `n + 4` as
/// 0.5.19-0.5.22 do (`description, name, parameters, strict`).
fn tool_key_template() -> Value {
    json!({"chat_template":
        "{% for t in tools %}{% for k in t['function'] %}hello {% endfor %}{% endfor %}\
         {% for m in messages %}{{ m['content'] }}{% endfor %}"})
}

fn chat_with_tool(n: usize) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": words(n)}],
           "tools": [{"type": "function", "function": {"name": "lookup"}}]})
}

fn worker_on(version: &str) -> Answers {
    let mut a = worker_with(10, "default_chat_template_kwargs", tool_key_template());
    a.server_info["version"] = json!(version);
    a
}

/// Waits until a chat of `fits` words with a tool passes and one of
/// `fits + 1` is refused at M = 10, then checks nothing more was forwarded.
async fn tool_boundary_is(live: &Live, fits: usize, why: &str) {
    eventually(why, || async {
        live.g
            .post("/v1/chat/completions", &chat_with_tool(fits + 1))
            .await
            .status
            == 400
            && live
                .g
                .post("/v1/chat/completions", &chat_with_tool(fits))
                .await
                .status
                == 200
    })
    .await;
    let before = live.g.mock.state.count();
    let over = live
        .g
        .post("/v1/chat/completions", &chat_with_tool(fits + 1))
        .await;
    assert_eq!(over.error_code(), "context_length_exceeded", "{why}");
    assert_eq!(
        live.g.mock.state.count(),
        before,
        "{why}: nothing forwarded"
    );
}

#[tokio::test]
async fn the_workers_sglang_version_decides_how_tools_are_counted() {
    // 0.5.23: 6 words + 3 = 9 tokens fit under M = 10.
    let a = InfoMock::start(worker_on("0.5.23")).await;
    let live = start_live(&workers(&[&a])).await;
    tool_boundary_is(&live, 6, "0.5.23 keeps the client's keys").await;

    // 0.5.19 adds `"strict": false`: 6 words are 10 tokens there.
    a.set(|x| *x = worker_on("0.5.19.post1"));
    tool_boundary_is(&live, 5, "0.5.19 dumps strict=false").await;

    // A rolling upgrade (workers on both) is counted for both: the larger wins,
    // and the model stays in service.
    let b = InfoMock::start(worker_on("0.5.23")).await;
    let mixed = start_live(&workers(&[&a, &b])).await;
    tool_boundary_is(&mixed, 5, "mixed builds: the larger count").await;
    assert_eq!(mixed.readyz().await, 200);

    // Older than PD disaggregation itself (0.4.5): not served.
    a.set(|x| *x = worker_on("0.4.4"));
    not_served_saying(&live, "server_config_unmodelled", "version", "version").await;
    a.set(|x| *x = worker_on("0.5.20"));
    tool_boundary_is(&live, 5, "0.5.20 dumps strict=false too").await;
    // 0.5.18 is counted as its own release counts: strict=false as well.
    a.set(|x| *x = worker_on("0.5.18"));
    tool_boundary_is(&live, 5, "0.5.18 dumps strict=false").await;
}

#[tokio::test]
async fn without_a_stated_version_tools_are_counted_both_ways() {
    let kwargs = tool_key_template()["chat_template"].clone();
    let template = format!("default_chat_template_kwargs = {{ chat_template = {kwargs} }}\n");
    // Static: no discovery, so nothing says which release the server runs.
    let unknown = start_live(&format!("max_req_input_len = 10\n{template}")).await;
    tool_boundary_is(&unknown, 5, "unknown version: the larger count").await;
    let stated = start_live(&format!(
        "max_req_input_len = 10\nsglang_version = \"0.5.23\"\n{template}"
    ))
    .await;
    tool_boundary_is(&stated, 6, "stated 0.5.23").await;
    // A chat without tools is the same under every release.
    assert_eq!(
        unknown
            .g
            .post("/v1/chat/completions", &chat(8))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn responses_that_older_releases_build_longer_are_refused_in_front_of_them() {
    let developer = json!({"model": MODEL, "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "hello"},
                                          {"type": "input_text", "text": "hello"}]},
        {"role": "user", "content": "hello"}]});
    let reasoning = json!({"model": MODEL, "input": [
        {"role": "user", "content": "hello"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hello"}]},
        {"type": "message", "role": "assistant", "phase": "final_answer",
         "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": "hello"}]});
    let plain = json!({"model": MODEL, "input": "hello hello"});

    let mut worker = prefill_worker(100);
    worker.server_info["version"] = json!("0.5.20");
    let w = InfoMock::start(worker).await;
    let live = start_live(&workers(&[&w])).await;
    served(&live).await;
    let before = live.g.mock.state.count();
    for body in [&developer, &reasoning] {
        let a = live.g.post("/v1/responses", body).await;
        assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
        let message = a.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains("before 0.5.23"), "{message}");
    }
    assert_eq!(live.g.mock.state.count(), before, "nothing forwarded");
    assert_eq!(live.g.post("/v1/responses", &plain).await.status, 200);

    // In front of 0.5.23 the same requests are counted and forwarded.
    w.set(|a| a.server_info["version"] = json!("0.5.23"));
    eventually("0.5.23 is in force", || async {
        live.g.post("/v1/responses", &developer).await.status == 200
    })
    .await;
    assert_eq!(live.g.post("/v1/responses", &reasoning).await.status, 200);
}

/// A static guard that states no release may be in front of any from 0.4.5
/// on: the chat-shaped APIs that releases before 0.5.18 build otherwise are
/// refused (naming `sglang_version`), nothing is forwarded, and chat is
/// served; once the release is stated, the same requests are counted.
#[tokio::test]
async fn without_a_stated_version_chat_apis_older_releases_build_otherwise_are_refused() {
    let responses = json!({"model": MODEL, "input": "hello"});
    let messages = json!({"model": MODEL, "max_tokens": 8,
                          "messages": [{"role": "user", "content": "hello"}]});
    let unknown = start_live("max_req_input_len = 100\n").await;
    let before = unknown.g.mock.state.count();
    for (path, body) in [("/v1/responses", &responses), ("/v1/messages", &messages)] {
        let a = unknown.g.post(path, body).await;
        assert_eq!(
            a.status,
            400,
            "{path}: {}",
            String::from_utf8_lossy(&a.body)
        );
        let text = String::from_utf8_lossy(&a.body).to_string();
        assert!(
            text.contains("is not modelled for SGLang") && text.contains("sglang_version"),
            "{path}: {text}"
        );
    }
    assert_eq!(unknown.g.mock.state.count(), before, "nothing forwarded");
    assert_eq!(
        unknown
            .g
            .post("/v1/chat/completions", &chat(3))
            .await
            .status,
        200
    );

    // /v1/messages is built as 0.5.19 builds it from 0.5.17 on; /v1/responses from 0.5.18.
    let stated = start_live("max_req_input_len = 100\nsglang_version = \"0.5.17\"\n").await;
    assert_eq!(stated.g.post("/v1/messages", &messages).await.status, 200);
    assert_eq!(stated.g.post("/v1/responses", &responses).await.status, 400);
    let stated = start_live("max_req_input_len = 100\nsglang_version = \"0.5.18\"\n").await;
    assert_eq!(stated.g.post("/v1/responses", &responses).await.status, 200);
}

/// Static mode says what it assumes: `/readyz` names every setting left at
/// SGLang's defaults, and a stated one is no longer listed.
#[tokio::test]
async fn static_mode_says_what_it_assumes() {
    let readyz = |live: &Live| {
        let url = format!("http://{}/readyz", live.g.admin);
        let http = live.g.http.clone();
        async move { http.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let live = start_live("max_req_input_len = 100\n").await;
    let said = readyz(&live).await;
    assert!(
        said.starts_with("ready\n")
            && said.contains("static configuration, counted as SGLang's defaults for version, default_chat_template_kwargs"),
        "{said}"
    );
    let live = start_live(
        "max_req_input_len = 100\nsglang_version = \"0.5.11\"\ndefault_chat_template_kwargs = { enable_thinking = false }\n",
    )
    .await;
    let said = readyz(&live).await;
    assert!(
        !said.contains("defaults for version") && !said.contains("default_chat_template_kwargs"),
        "{said}"
    );
    assert!(said.contains("tool_call_parser"), "{said}");
}
