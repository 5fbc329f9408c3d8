//! `prefill-guard audit`, the real binary, against mock SGLang servers: the
//! exposed configuration of SGLang #30233 (0.5.19, PD, a 1,048,576-token
//! context over a 284,928-token pool), safe ones, and ones it cannot judge,
//! with their exit statuses.

use crate::common;

use std::process::Output;

use serde_json::{json, Value};

use common::sglang::{models_listing, prefill_worker, Answers, InfoMock};

/// The prefill server of the advisory's worked example.
fn exposed_worker() -> Answers {
    let mut a = prefill_worker(284_922);
    a.server_info["version"] = json!("0.5.19");
    a.server_info["max_total_num_tokens"] = json!(284_928);
    a.models = Some(models_listing(1_048_576));
    a
}

async fn audit(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .arg("audit")
        .args(args)
        .output()
        .await
        .unwrap()
}

fn json_report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_advisory_example_is_exposed() {
    let up = InfoMock::start(exposed_worker()).await;
    let out = audit(&["--upstream", &up.url(), "--json"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r = json_report(&out);
    assert_eq!(r["verdict"], "exposed");
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["window"], json!({"first": 284_922, "last": 1_048_575}));
    let s = &r["servers"][0];
    assert_eq!(s["version"], "0.5.19");
    assert_eq!(s["disaggregation_mode"], "prefill");
    assert_eq!(s["transfer_backend"], "mooncake");
    assert_eq!(s["context_length"], 1_048_576);
    assert_eq!(s["max_total_num_tokens"], 284_928);
    assert_eq!(s["max_req_input_len"], 284_922);
    assert_eq!(s["max_req_input_len_source"], "reported");
    assert_eq!(s["reserved_tokens"], 0);
    assert_eq!(s["allow_auto_truncate"], false);
    assert!(s["reason"].as_str().unwrap().contains("284922 to 1048575"));

    // The table says the same to a person.
    let out = audit(&["--upstream", &up.url()]).await;
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    for needle in [
        "SGLang version",
        "0.5.19",
        "prefill (transfer backend mooncake)",
        "1048576",
        "284928",
        "284922 to 1048575 (763654 prompt lengths)",
        "verdict: EXPOSED (exit 1)",
        "--prefill-url",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
    // /server_info holds secrets (api_key): the report never repeats them.
    assert!(!t.contains("secret-never-to-be-logged"));
    assert!(up.hits("/model_info") >= 1 && up.hits("/v1/models") >= 1);
}

#[tokio::test]
async fn the_same_numbers_without_max_req_input_len_use_the_pool_formula() {
    let mut a = exposed_worker();
    a.legacy_only = true;
    a.server_info
        .as_object_mut()
        .unwrap()
        .remove("max_req_input_len");
    let up = InfoMock::start(a).await;
    let out = audit(&["--upstream", &up.url(), "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let r = json_report(&out);
    assert_eq!(r["window"], json!({"first": 284_922, "last": 1_048_575}));
    assert_eq!(r["servers"][0]["max_req_input_len_source"], "fallback");
    assert!(up.hits("/get_server_info") >= 1);
}

#[tokio::test]
async fn fixed_versions_and_plain_servers_are_not_exposed() {
    for (version, mode, why) in [
        ("0.5.21", "prefill", "admission"),
        ("0.5.20", "prefill", "forward pass"),
        ("0.5.19", "null", "not PD"),
    ] {
        let mut a = exposed_worker();
        a.server_info["version"] = json!(version);
        a.server_info["disaggregation_mode"] = json!(mode);
        let up = InfoMock::start(a).await;
        let out = audit(&["--upstream", &up.url(), "--json"]).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{version} {mode}: {}",
            text(&out)
        );
        let r = json_report(&out);
        assert_eq!(r["verdict"], "not_exposed");
        assert!(
            r["reason"].as_str().unwrap().contains(why),
            "{}",
            r["reason"]
        );
        assert_eq!(r["window"], Value::Null);

        let out = audit(&["--upstream", &up.url()]).await;
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out).contains("verdict: NOT EXPOSED (exit 0)"));
    }
}

#[tokio::test]
async fn a_pool_larger_than_the_context_leaves_no_window_with_eagle() {
    // P >= C: the window is the top 6 lengths, and EAGLE's reserved slots
    // (max(topk 1 x steps 3, draft tokens 8) = 8) make the front end refuse them.
    let mut a = exposed_worker();
    a.server_info["max_total_num_tokens"] = json!(2_000_000);
    a.server_info["max_req_input_len"] = json!(1_048_570);
    a.server_info["speculative_algorithm"] = json!("EAGLE");
    a.server_info["speculative_eagle_topk"] = json!(1);
    a.server_info["speculative_num_steps"] = json!(3);
    a.server_info["speculative_num_draft_tokens"] = json!(8);
    let up = InfoMock::start(a).await;
    let out = audit(&["--upstream", &up.url(), "--json"]).await;
    let r = json_report(&out);
    assert_eq!(r["servers"][0]["reserved_tokens"], 8);
    assert_eq!(out.status.code(), Some(0), "{r}");

    // Without speculative decoding the same numbers leave 6 exposed lengths.
    up.set(|a| a.server_info["speculative_algorithm"] = Value::Null);
    let out = audit(&["--upstream", &up.url(), "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        json_report(&out)["window"],
        json!({"first": 1_048_570, "last": 1_048_575})
    );
}

#[tokio::test]
async fn what_it_cannot_judge_exits_2() {
    // Nothing listens.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let out = audit(&["--upstream", &url, "--json"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_report(&out)["verdict"], "cannot_tell");

    // Auto-truncation with PD: a path no release fixes and nobody tested.
    let mut a = exposed_worker();
    a.server_info["allow_auto_truncate"] = json!(true);
    let up = InfoMock::start(a).await;
    let out = audit(&["--upstream", &up.url()]).await;
    assert_eq!(out.status.code(), Some(2));
    let t = text(&out);
    assert!(
        t.contains("CANNOT TELL") && t.contains("allow_auto_truncate"),
        "{t}"
    );

    // No version.
    up.set(|a| {
        a.server_info["allow_auto_truncate"] = json!(false);
        a.server_info.as_object_mut().unwrap().remove("version");
    });
    assert_eq!(
        audit(&["--upstream", &up.url()]).await.status.code(),
        Some(2)
    );
}

#[tokio::test]
async fn prefill_workers_are_read_directly_and_the_worst_decides() {
    // A router that, like smg, reports only the first prefill worker (fixed).
    let mut router = exposed_worker();
    router.server_info["version"] = json!("0.5.21");
    let router = InfoMock::start(router).await;
    let fixed = InfoMock::start(router_like_fixed()).await;
    let old = InfoMock::start(exposed_worker()).await;
    let out = audit(&[
        "--upstream",
        &router.url(),
        "--prefill-url",
        &fixed.url(),
        "--prefill-url",
        &old.url(),
        "--json",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r = json_report(&out);
    let servers = r["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    assert_eq!(servers[0]["role"], "upstream");
    assert_eq!(servers[1]["verdict"], "not_exposed");
    assert_eq!(servers[2]["verdict"], "exposed");
    assert!(r["reason"].as_str().unwrap().starts_with(&old.url()));
    assert_eq!(r["window"], json!({"first": 284_922, "last": 1_048_575}));
}

fn router_like_fixed() -> Answers {
    let mut a = exposed_worker();
    a.server_info["version"] = json!("0.5.23");
    a
}

/// The report lists the server settings that change prompt ids and what the
/// guard would not count exactly in front of that server.
#[tokio::test]
async fn audit_prints_the_server_configuration_and_what_the_guard_does_not_model() {
    let mut a = exposed_worker();
    a.server_info["default_chat_template_kwargs"] = json!({"enable_thinking": false});
    a.server_info["tokenizer_mode"] = json!("slow");
    a.server_info["tool_call_parser"] = json!("kimi_k3");
    let up = InfoMock::start(a).await;
    let out = audit(&["--upstream", &up.url(), "--json"]).await;
    let s = &json_report(&out)["servers"][0];
    let names: Vec<&str> = s["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            // The release decides how request tools are counted.
            "version",
            "default_chat_template_kwargs",
            "tool_call_parser",
            // A prefill worker: PD mode (it decides gpt-oss Responses refusals).
            "disaggregation_mode",
            "model_path",
            "tokenizer_mode"
        ]
    );
    assert_eq!(s["settings"][1]["handling"], "modelled");
    // As the server said it, and judged for this value.
    assert_eq!(s["settings"][3]["value"], "prefill");
    assert_eq!(s["settings"][0]["handling"], "modelled for this value");
    let unmodelled = s["unmodelled"].as_array().unwrap();
    assert!(
        unmodelled[0]
            .as_str()
            .unwrap()
            .starts_with("tokenizer_mode=slow"),
        "{unmodelled:?}"
    );
    // The table says it too.
    let table = text(&audit(&["--upstream", &up.url()]).await);
    assert!(table.contains("NOT MODELLED"), "{table}");
    assert!(
        !table.contains("SGLANG_DSV4"),
        "no DeepSeek advice for a jinja server: {table}"
    );
    assert!(
        table.contains("default_chat_template_kwargs={\"enable_thinking\":false} (modelled)"),
        "{table}"
    );

    // With settings the guard models, the encoder is named and nothing is flagged.
    let mut b = exposed_worker();
    b.server_info["tool_call_parser"] = json!("kimi_k3");
    let up = InfoMock::start(b).await;
    let s = json_report(&audit(&["--upstream", &up.url(), "--json"]).await)["servers"][0].clone();
    assert_eq!(s["encoder"], "kimi_k3");
    assert!(
        s["unmodelled"][0].as_str().unwrap().contains("kimi_k3"),
        "{s}"
    );
}

/// `audit --through`: canaries of M - 1 and M token ids, then an over-limit
/// one in disguises, through the real guard in front of a recording mock;
/// M comes from the prefill worker, never from the guard.
mod through {
    use super::*;
    use common::{binary_config, spawn_binary, start_mock};

    type Running = (common::Mock, (common::Spawned, tempfile::TempDir), String);

    async fn guard_with_limit(limit: usize) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let mock = start_mock().await;
        let config = binary_config(
            dir.path(),
            mock.addr,
            &format!("max_req_input_len = {limit}\n"),
        );
        let guard = spawn_binary(&config).await;
        let url = format!("http://{}", guard.serving["listen"].as_str().unwrap());
        (mock, (guard, dir), url)
    }

    #[tokio::test]
    async fn a_guard_at_the_servers_limit_protects() {
        let worker = InfoMock::start(prefill_worker(100)).await;
        let (mock, _guard, url) = guard_with_limit(100).await;
        let out = audit(&["--through", &url, "--prefill-url", &worker.url(), "--json"]).await;
        let r = json_report(&out);
        assert_eq!(out.status.code(), Some(0), "{r:#}");
        assert_eq!(r["verdict"], "not_exposed");
        assert_eq!(r["is_guard"], true);
        assert_eq!(r["max_req_input_len"], 100);
        assert!(r["probes"].as_array().unwrap().len() >= 8);
        // Only the M - 1 canary reached the upstream, marked as one.
        {
            let seen = mock.state.requests.lock().unwrap();
            assert_eq!(
                seen.len(),
                1,
                "only the canary under the limit is forwarded"
            );
            assert_eq!(
                seen[0].headers.get("x-prefill-guard-canary").unwrap(),
                "audit"
            );
        }
        let table = text(&audit(&["--through", &url, "--max-req-input-len", "100"]).await);
        assert!(table.contains("verdict: PROTECTED: "), "{table}");
        assert!(
            !table.to_lowercase().contains("protected: protected"),
            "{table}"
        );
    }

    #[tokio::test]
    async fn sglang_reached_directly_is_not_protected() {
        let mock = start_mock().await;
        let url = format!("http://{}", mock.addr);
        let out = audit(&["--through", &url, "--max-req-input-len", "100", "--json"]).await;
        let r = json_report(&out);
        assert_eq!(out.status.code(), Some(1), "{r:#}");
        assert_eq!(r["verdict"], "exposed");
        assert!(
            r["reason"].as_str().unwrap().contains("NOT PROTECTED"),
            "{r:#}"
        );
    }

    #[tokio::test]
    async fn a_guard_whose_limit_is_above_the_servers_is_not_protected() {
        let worker = InfoMock::start(prefill_worker(100)).await;
        let (_mock, _guard, url) = guard_with_limit(150).await;
        let out = audit(&["--through", &url, "--prefill-url", &worker.url(), "--json"]).await;
        let r = json_report(&out);
        assert_eq!(out.status.code(), Some(1), "{r:#}");
        let leaked = r["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["verdict"] == "exposed")
            .expect("a canary got through");
        assert_eq!(leaked["tokens"], 100);
    }

    #[tokio::test]
    async fn without_the_servers_limit_it_cannot_tell() {
        let (_mock, _guard, url) = guard_with_limit(100).await;
        let out = audit(&["--through", &url, "--json"]).await;
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    }

    #[tokio::test]
    async fn a_guard_given_as_upstream_is_recognised() {
        let (_mock, _guard, url) = guard_with_limit(100).await;
        let out = audit(&["--upstream", &url, "--json"]).await;
        let r = json_report(&out);
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("this is prefill-guard"),
            "{r:#}"
        );
    }
}

/// Beyond length: a 0.5.11 PD pair whose prefill has no grammar backend and
/// whose decode has one leaks on every constrained request; on 0.5.21 the
/// same pair does not. A 0.5.21 pair whose decode truncates and whose
/// prefill does not leaks on every release: exposed by that alone.
#[tokio::test]
async fn a_prefill_without_decodes_grammar_backend_is_exposed() {
    let pair = |version: &'static str| {
        let mut prefill = prefill_worker(100_000);
        prefill.server_info["version"] = json!(version);
        prefill.server_info["grammar_backend"] = json!("none");
        prefill.models = Some(models_listing(100_006));
        let mut decode = prefill_worker(100_000);
        decode.server_info["version"] = json!(version);
        decode.server_info["disaggregation_mode"] = json!("decode");
        decode.server_info["grammar_backend"] = json!("xgrammar");
        decode.models = Some(models_listing(100_006));
        (prefill, decode)
    };
    let (p, d) = pair("0.5.11");
    let (p, d) = (InfoMock::start(p).await, InfoMock::start(d).await);
    let args = [
        "--upstream",
        &p.url(),
        "--prefill-url",
        &p.url(),
        "--decode-url",
        &d.url(),
        "--json",
    ];
    let out = audit(&args).await;
    let r = json_report(&out);
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    let grammar = &r["beyond_length"]["paths"][1];
    assert_eq!(grammar["exposed"], "yes", "{r:#}");
    assert!(
        grammar["detail"]
            .as_str()
            .unwrap()
            .contains("grammar_backend=none"),
        "{grammar}"
    );
    let table = text(&audit(&args[..6]).await);
    assert!(table.contains("beyond length"), "{table}");

    let (p, d) = pair("0.5.21");
    let (p, d) = (InfoMock::start(p).await, InfoMock::start(d).await);
    let out = audit(&[
        "--upstream",
        &p.url(),
        "--prefill-url",
        &p.url(),
        "--decode-url",
        &d.url(),
        "--json",
    ])
    .await;
    let r = json_report(&out);
    assert_eq!(r["beyond_length"]["paths"][1]["exposed"], "no", "{r:#}");
    assert_eq!(out.status.code(), Some(0), "{r:#}");

    d.set(|a| a.server_info["allow_auto_truncate"] = json!(true));
    let out = audit(&[
        "--upstream",
        &p.url(),
        "--prefill-url",
        &p.url(),
        "--decode-url",
        &d.url(),
        "--json",
    ])
    .await;
    let r = json_report(&out);
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("allow_auto_truncate"),
        "{r:#}"
    );
}
