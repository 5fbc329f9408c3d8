//! Discovery against mock prefill workers: the limit follows `/server_info`
//! (including changes while the guard runs, and the minimum of several
//! workers), refusals sit exactly at the discovered boundary, the guard fails
//! closed before the first answer, keeps a stale value after a failure, and
//! `/v1/models` is clamped to what the guard enforces.
//!
//! Discovery polls every 20 ms here; tests wait on conditions with a deadline
//! (`eventually`), never on a fixed sleep.
//!
//! The tests that wait on discovery's own timers and nothing else (its
//! retries, a 60 s interval) run on a paused clock (`common::clock`). Those
//! that also send requests through the proxy port stay on the real clock:
//! they wait on no timer of the proxy's, and a 20 ms interval costs them no
//! real time worth saving. `common::live` serves the proxy port on event
//! loops of their own, as production does, with clocks a paused test does
//! not hold: while such a test waited for their answer its clock would race
//! through discovery rounds (and the admin port's 30 s idle-connection
//! timer) hundreds of times faster than the real one.

use crate::common;

use serde_json::json;

use common::clock;
use common::live::{start_live, start_live_with_upstream, Live};
use common::sglang::{eventually, models_listing, prefill_worker, InfoMock};
use common::{ids, sample, MODEL};

const FAST: &str = "discovery_interval_ms = 20\n";

fn workers(urls: &[&InfoMock]) -> String {
    let list: Vec<String> = urls.iter().map(|w| format!("\"{}\"", w.url())).collect();
    format!("prefill_urls = [{}]\n{FAST}", list.join(", "))
}

async fn limit_becomes(live: &Live, want: usize) {
    eventually(&format!("the limit becomes {want}"), || async {
        live.limit() == Some(want)
    })
    .await;
}

/// `L = M - 1` is forwarded, `L = M` is refused with 400 and never forwarded.
async fn boundary_is(live: &Live, m: usize) {
    let before = live.g.mock.state.count();
    let fits = live
        .g
        .post("/generate", &json!({"input_ids": ids(m - 1)}))
        .await;
    assert_eq!(fits.status, 200, "L = {} under M = {m}", m - 1);
    let over = live
        .g
        .post("/generate", &json!({"input_ids": ids(m)}))
        .await;
    assert_eq!(over.status, 400, "L = M = {m}");
    let msg = over.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains(&format!("Input length ({m} tokens)")), "{msg}");
    assert_eq!(
        live.g.mock.state.count(),
        before + 1,
        "only L = M - 1 was forwarded"
    );
}

#[tokio::test]
async fn limit_follows_server_info_and_its_changes() {
    let w = InfoMock::start(prefill_worker(10)).await;
    let live = start_live(&workers(&[&w])).await;
    limit_becomes(&live, 10).await;
    boundary_is(&live, 10).await;
    assert_eq!(live.readyz().await, 200);

    // The prefill worker restarts with less memory: the guard follows.
    w.set(|a| *a = prefill_worker(7));
    limit_becomes(&live, 7).await;
    boundary_is(&live, 7).await;
    // And back up.
    w.set(|a| *a = prefill_worker(12));
    limit_becomes(&live, 12).await;
    boundary_is(&live, 12).await;

    let text = live.g.metrics().await;
    let worker = format!("{{worker=\"{}\"}}", w.url());
    assert_eq!(
        sample(
            &text,
            &format!("prefill_guard_discovered_max_req_input_len{worker}")
        ),
        12.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("prefill_guard_discovered_max_model_len{worker}")
        ),
        1_048_576.0
    );
    assert_eq!(
        sample(&text, &format!("prefill_guard_discovery_stale{worker}")),
        0.0
    );
    assert!(
        sample(
            &text,
            &format!("prefill_guard_discovery_last_success_timestamp_seconds{worker}")
        ) > 1.6e9
    );
    assert_eq!(
        sample(
            &text,
            &format!("prefill_guard_limit_changes_total{{model=\"{MODEL}\"}}")
        ),
        3.0,
        "unknown -> 10 -> 7 -> 12"
    );
    assert_eq!(
        sample(
            &text,
            &format!("prefill_guard_limit_tokens{{model=\"{MODEL}\"}}")
        ),
        12.0
    );
    // /server_info holds secrets (api_key): nothing of it is exported.
    assert!(!text.contains("secret-never-to-be-logged"));
}

#[tokio::test]
async fn the_smallest_prefill_worker_decides() {
    let big = InfoMock::start(prefill_worker(12)).await;
    let small = InfoMock::start(prefill_worker(9)).await;
    let live = start_live(&workers(&[&big, &small])).await;
    limit_becomes(&live, 9).await;
    boundary_is(&live, 9).await;

    small.set(|a| *a = prefill_worker(20));
    limit_becomes(&live, 12).await;
    boundary_is(&live, 12).await;
}

#[tokio::test]
async fn fails_closed_until_every_worker_has_answered() {
    let good = InfoMock::start(prefill_worker(10)).await;
    let down = InfoMock::start(prefill_worker(10)).await;
    down.set(|a| a.fail_with = Some(503));
    let live = start_live(&workers(&[&good, &down])).await;
    // Wait until both have been polled (and one failed) at least twice.
    eventually("both workers polled", || async {
        good.hits("/server_info") >= 2 && down.hits("/server_info") >= 2
    })
    .await;
    // One answer is not enough: the silent worker could be the smaller one.
    assert_eq!(live.limit(), None);
    assert_eq!(live.readyz().await, 503);
    // The worker down at start-up is named, and has a series an alert sees.
    let detail = live
        .g
        .http
        .get(format!("http://{}/readyz", live.g.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        detail.contains(&format!("worker {} has never answered", down.url()))
            && detail.contains("503"),
        "{detail}"
    );
    let metrics = live.g.metrics().await;
    assert!(
        metrics.contains(&format!(
            "prefill_guard_discovery_up{{worker=\"{}\"}} 0",
            down.url()
        )),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        "prefill_guard_discovery_up{{worker=\"{}\"}} 1",
        good.url()
    )));
    let a = live
        .g
        .post("/generate", &json!({"input_ids": ids(1)}))
        .await;
    assert_eq!(a.status, 503);
    let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("no prompt limit is known"), "{msg}");
    let a = live
        .g
        .post("/v1/completions", &json!({"model": MODEL, "prompt": [1]}))
        .await;
    assert_eq!(
        (a.status.as_u16(), a.error_code().as_str()),
        (503, "limit_unknown")
    );
    assert_eq!(
        live.g.mock.state.count(),
        0,
        "nothing is forwarded without a limit"
    );
    let text = live.g.metrics().await;
    assert!(
        sample(
            &text,
            &format!(
                "prefill_guard_discovery_errors_total{{worker=\"{}\"}}",
                down.url()
            )
        ) >= 2.0
    );

    down.set(|a| *a = prefill_worker(8));
    limit_becomes(&live, 8).await;
    assert_eq!(live.readyz().await, 200);
    boundary_is(&live, 8).await;
}

#[tokio::test]
async fn a_failing_worker_keeps_its_last_value_marked_stale() {
    let w = InfoMock::start(prefill_worker(10)).await;
    let live = start_live(&workers(&[&w])).await;
    limit_becomes(&live, 10).await;

    w.set(|a| a.fail_with = Some(500));
    let stale = format!("prefill_guard_discovery_stale{{worker=\"{}\"}}", w.url());
    eventually("the worker is marked stale", || async {
        sample(&live.g.metrics().await, &stale) == 1.0
    })
    .await;
    let polls = w.hits("/server_info");
    eventually("more failed polls", || async {
        w.hits("/server_info") >= polls + 2
    })
    .await;
    // Still enforced, still ready: the pool did not change because it cannot be seen.
    assert_eq!(live.limit(), Some(10));
    assert_eq!(live.readyz().await, 200);
    boundary_is(&live, 10).await;
    let text = live.g.metrics().await;
    assert_eq!(
        sample(
            &text,
            &format!(
                "prefill_guard_discovered_max_req_input_len{{worker=\"{}\"}}",
                w.url()
            )
        ),
        10.0
    );
    assert!(
        sample(
            &text,
            &format!(
                "prefill_guard_discovery_errors_total{{worker=\"{}\"}}",
                w.url()
            )
        ) >= 2.0
    );

    // A worker that comes back with a new value is followed, no longer stale.
    w.set(|a| *a = prefill_worker(6));
    limit_becomes(&live, 6).await;
    assert_eq!(sample(&live.g.metrics().await, &stale), 0.0);
}

#[tokio::test]
async fn without_max_req_input_len_the_pool_formula_is_used() {
    // An older build: only /get_server_info, and no max_req_input_len in it.
    let w = InfoMock::start(prefill_worker(0)).await;
    w.set(|a| {
        a.legacy_only = true;
        let info = a.server_info.as_object_mut().unwrap();
        info.remove("max_req_input_len");
        info.insert("max_total_num_tokens".into(), json!(284_928));
        a.models = Some(models_listing(1_048_576));
    });
    let live = start_live(&workers(&[&w])).await;
    // min(C, P) - 6 with the worked example of SGLang #30233.
    limit_becomes(&live, 284_922).await;
    assert!(w.hits("/get_server_info") >= 1);

    // The context length, from /v1/models, can be the smaller side.
    w.set(|a| a.models = Some(models_listing(16)));
    limit_becomes(&live, 10).await;
    boundary_is(&live, 10).await;
}

#[tokio::test]
async fn static_limit_and_margin_combine_with_discovery() {
    let w = InfoMock::start(prefill_worker(30)).await;
    w.set(|a| a.fail_with = Some(503));
    let live = start_live(&format!(
        "max_req_input_len = 12\nsafety_margin_tokens = 2\n{}",
        workers(&[&w])
    ))
    .await;
    // With a static limit the guard serves before discovery succeeds.
    assert_eq!(live.limit(), Some(10));
    assert_eq!(live.readyz().await, 200);
    boundary_is(&live, 10).await;
    // Discovered 30 - 2 is above the static 12 - 2: the static one stays.
    w.set(|a| *a = prefill_worker(30));
    eventually("the worker answers", || async {
        let text = live.g.metrics().await;
        sample(
            &text,
            &format!(
                "prefill_guard_discovered_max_req_input_len{{worker=\"{}\"}}",
                w.url()
            ),
        ) == 30.0
    })
    .await;
    assert_eq!(live.limit(), Some(10));
    // Discovered 8 - 2 is below: it wins.
    w.set(|a| *a = prefill_worker(8));
    limit_becomes(&live, 6).await;
    boundary_is(&live, 6).await;
}

#[tokio::test]
async fn models_listing_is_clamped_to_the_limit() {
    let w = InfoMock::start(prefill_worker(10)).await;
    // The upstream lists the model with SGLang's context length.
    let upstream = InfoMock::start(prefill_worker(10)).await;
    let live = start_live_with_upstream(Some(upstream.url()), &workers(&[&w])).await;
    limit_becomes(&live, 10).await;
    let a = live.g.send(live.g.http.get(live.g.url("/v1/models"))).await;
    assert_eq!(a.status, 200);
    let listing = a.json();
    assert_eq!(listing["data"][0]["max_model_len"], 10);
    assert_eq!(listing["data"][0]["id"], MODEL);
    assert_eq!(
        listing["data"][0]["owned_by"], "sglang",
        "the rest is untouched"
    );
    assert_eq!(a.headers["content-length"], a.body.len().to_string());

    w.set(|a| *a = prefill_worker(7));
    limit_becomes(&live, 7).await;
    let a = live.g.send(live.g.http.get(live.g.url("/v1/models"))).await;
    assert_eq!(a.json()["data"][0]["max_model_len"], 7);
}

#[tokio::test]
async fn models_listing_rewrite_can_be_turned_off() {
    let upstream = InfoMock::start(prefill_worker(10)).await;
    let live = start_live_with_upstream(
        Some(upstream.url()),
        "max_req_input_len = 10\nrewrite_models_max_len = false\n",
    )
    .await;
    let a = live.g.send(live.g.http.get(live.g.url("/v1/models"))).await;
    assert_eq!(a.json()["data"][0]["max_model_len"], 1_048_576);
}

#[tokio::test]
async fn models_listing_without_numbers_gets_the_limit() {
    // The recording mock lists the model without max_model_len (as a router may).
    let live = start_live("max_req_input_len = 9\n").await;
    let a = live.g.send(live.g.http.get(live.g.url("/v1/models"))).await;
    assert_eq!(a.json()["data"][0]["max_model_len"], 9);
    assert_eq!(live.g.mock.state.requests()[0].target, "/v1/models");
}

/// Every new metric family, populated, passes `promtool check metrics`
/// (skipped when promtool is missing, except under CI). On a paused clock:
/// the failed polls it waits for, the metrics and the reload are all on the
/// test's runtime.
#[tokio::test(start_paused = true)]
async fn discovery_metrics_pass_promtool() {
    let _ticking = clock::ticking();
    let w = InfoMock::start(prefill_worker(10)).await;
    let live = start_live(&workers(&[&w])).await;
    limit_becomes(&live, 10).await;
    w.set(|a| a.fail_with = Some(500));
    let errors = format!(
        "prefill_guard_discovery_errors_total{{worker=\"{}\"}}",
        w.url()
    );
    eventually("a failed poll", || async {
        sample(&live.g.metrics().await, &errors) >= 1.0
    })
    .await;
    live.write_config("max_req_input_len = nonsense\n");
    assert!(live.runtime.reload().await.is_err());
    let text = live.g.metrics().await;
    for family in [
        "discovered_max_req_input_len",
        "discovered_max_model_len",
        "discovery_last_success_timestamp_seconds",
        "discovery_stale",
        "discovery_errors_total",
        "limit_changes_total",
        "reloads_total",
    ] {
        assert!(
            text.contains(&format!("prefill_guard_{family}{{")),
            "{family} has samples"
        );
    }
    common::promtool_check_metrics(&text);
}

/// On a paused clock (`common::clock`): what it times (discovery's retries
/// and interval) and what it asks (the admin port, the worker) all run on
/// the test's runtime, and it sends nothing through the proxy port.
#[tokio::test(start_paused = true)]
async fn a_worker_that_comes_up_late_is_read_within_seconds_not_an_interval() {
    let _ticking = clock::ticking();
    let w = InfoMock::start(prefill_worker(10)).await;
    w.set(|a| a.fail_with = Some(503));
    // A 60 s interval: only the quick retries can make the guard ready in time.
    let live = start_live(&format!(
        "prefill_urls = [\"{}\"]\ndiscovery_interval_ms = 60000\n",
        w.url()
    ))
    .await;
    eventually("the first poll", || async { w.hits("/server_info") >= 1 }).await;
    assert_eq!(live.readyz().await, 503);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let up = tokio::time::Instant::now();
    w.set(|a| a.fail_with = None);
    eventually("the worker is read again", || async {
        live.limit() == Some(10)
    })
    .await;
    let took = up.elapsed();
    assert_eq!(live.readyz().await, 200);
    // Retries after 0.25, 0.5, 1, 2 s: the first one after the worker came up
    // is at most about 2 s later.
    assert!(
        took < std::time::Duration::from_secs(5),
        "ready {took:?} after the worker"
    );
    let polls = w.hits("/server_info");
    // And once it has answered, the guard goes back to its interval.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        w.hits("/server_info"),
        polls,
        "polled again within the interval"
    );
}

#[tokio::test]
async fn a_flapping_or_garbled_worker_never_moves_the_limit() {
    let w = InfoMock::start(prefill_worker(10)).await;
    let live = start_live(&workers(&[&w])).await;
    limit_becomes(&live, 10).await;
    let stale = format!("prefill_guard_discovery_stale{{worker=\"{}\"}}", w.url());
    let garbage = [
        json!("<html>503 Service Temporarily Unavailable</html>"),
        json!([1, 2, 3]),
        json!({"status": "ready", "max_req_input_len": -5}),
        json!({"status": "ready", "max_req_input_len": "lots"}),
        json!({"status": "ready", "max_req_input_len": 1.5e300}),
    ];
    for answer in garbage {
        let polls = w.hits("/server_info");
        w.set(|a| a.server_info = answer.clone());
        eventually("the garbled answer is polled twice", || async {
            w.hits("/server_info") >= polls + 2
        })
        .await;
        assert_eq!(live.limit(), Some(10), "{answer} moved the limit");
        assert_eq!(live.readyz().await, 200, "{answer} made the guard unready");
        assert_eq!(sample(&live.g.metrics().await, &stale), 1.0, "{answer}");
        // and back, as a flapping worker does
        w.set(|a| *a = prefill_worker(10));
        eventually("the worker is fresh again", || async {
            sample(&live.g.metrics().await, &stale) == 0.0
        })
        .await;
    }
    boundary_is(&live, 10).await;
}

/// A configured model that no worker serves (every worker answered, none
/// lists its name) is said so: a log line, `prefill_guard_models_unserved`,
/// and `/readyz` naming it. Under `readiness = "all_models"` (the default)
/// it holds the pod unready; under `any_model` the pod serves the others.
#[tokio::test]
async fn a_model_no_worker_serves_is_named_and_counted() {
    let worker = InfoMock::start(prefill_worker(100)).await;
    let ghost = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(ghost.path()).unwrap();
    let ghost_model = format!(
        "[[models]]\nname = \"ghost\"\ntokenizer = {:?}\n",
        ghost.path().display().to_string()
    );
    for (policy, ready_status) in [("all_models", 503), ("any_model", 200)] {
        let live = start_live(&format!(
            "{}readiness = \"{policy}\"\n{ghost_model}",
            workers(&[&worker])
        ))
        .await;
        limit_becomes(&live, 100).await;
        let metrics = || async { live.g.metrics().await };
        eventually("ghost counted as unserved", || async {
            sample(&metrics().await, "prefill_guard_models_unserved") == 1.0
        })
        .await;
        let readyz = live
            .g
            .http
            .get(format!("http://{}/readyz", live.g.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(readyz.status().as_u16(), ready_status, "{policy}");
        let body = readyz.text().await.unwrap();
        assert!(
            body.contains("ghost: no prefill worker serves this name"),
            "{policy}: {body}"
        );
        assert!(!body.contains(&format!("{MODEL}:")), "{body}");
        // The served model keeps working; the unserved one is refused.
        let served = live
            .g
            .post("/generate", &json!({"model": MODEL, "input_ids": ids(5)}))
            .await;
        assert_eq!(served.status, 200);
        let unserved = live
            .g
            .post("/generate", &json!({"model": "ghost", "input_ids": ids(5)}))
            .await;
        assert_eq!(unserved.status, 503);
        // Once a worker serves it, it is no longer counted.
        worker.set(|a| a.server_info["served_model_name"] = json!([MODEL, "ghost"]));
        eventually("ghost served", || async {
            sample(&metrics().await, "prefill_guard_models_unserved") == 0.0
        })
        .await;
        worker.set(|a| a.server_info["served_model_name"] = json!(MODEL));
    }
}

/// The configuration of a single model with no `name`: its tokenizer is a
/// directory called `qwen3-8b`, its worker `worker`.
fn unnamed_config(dir: &std::path::Path, worker: &str) -> std::path::PathBuf {
    let model = dir.join("checkpoints").join("qwen3-8b");
    prefill_guard::demo::write_demo_model(&model).unwrap();
    let config = dir.join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\ntokenizer = {:?}\nprefill_urls = [\"{worker}\"]\n{FAST}",
            model.display().to_string()
        ),
    )
    .unwrap();
    config
}

#[tokio::test]
async fn a_model_without_a_name_takes_the_name_its_workers_serve() {
    let mut answers = prefill_worker(100);
    answers.server_info["served_model_name"] = json!("qwen-prod");
    answers.models = Some(
        json!({"object": "list", "data": [{"id": "qwen-prod", "object": "model",
        "created": 1, "owned_by": "sglang", "max_model_len": 1000}]}),
    );
    let w = InfoMock::start(answers).await;
    let dir = tempfile::tempdir().unwrap();
    let mut guard = common::spawn_binary(&unnamed_config(dir.path(), &w.url())).await;
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let metrics = common::scrape(&http, &admin).await;
    assert!(
        metrics.contains("model=\"qwen-prod\""),
        "metrics use the served name"
    );
    assert!(
        !metrics.contains("qwen3-8b") && !metrics.contains("checkpoints"),
        "no path or directory name in the labels"
    );
    let _ = guard.child.kill().await;

    // No worker answers in time: the directory's basename, never its path.
    let dir = tempfile::tempdir().unwrap();
    let guard = common::spawn_binary(&unnamed_config(dir.path(), "http://127.0.0.1:9")).await;
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    let metrics = common::scrape(&http, &admin).await;
    assert!(metrics.contains("model=\"qwen3-8b\""), "the basename");
    assert!(!metrics.contains("checkpoints"), "never the path");
}
