//! Beyond length (`policy::pd`): the guard in front of mock prefill and
//! decode workers. Settings that build prompts differently take the model
//! out of service; on a release that hands an aborted prefill to decode,
//! the requests a one-sided abort would stub are refused; client-chosen
//! request ids are refused on every release; admin routes never pass.

use crate::common;

use serde_json::{json, Value};

use common::live::{start_live, Live};
use common::sglang::{eventually, prefill_worker, Answers, InfoMock};
use common::MODEL;

fn prefill(version: &str) -> Answers {
    let mut a = prefill_worker(1000);
    let info = &mut a.server_info;
    info["version"] = json!(version);
    info["grammar_backend"] = json!("xgrammar");
    info["skip_tokenizer_init"] = json!(false);
    info["speculative_algorithm"] = json!(null);
    a
}

fn decode(version: &str) -> Answers {
    let mut a = prefill(version);
    a.server_info["disaggregation_mode"] = json!("decode");
    a.server_info["max_req_input_len"] = json!(5000);
    a.model_info = Some(json!({"model_path": "/models/demo", "disaggregation_mode": "decode"}));
    a
}

struct Pair {
    live: Live,
    prefill: InfoMock,
    decode: InfoMock,
}

async fn pair(p: Answers, d: Answers, extra: &str) -> Pair {
    let prefill = InfoMock::start(p).await;
    let decode = InfoMock::start(d).await;
    let live = start_live(&format!(
        "prefill_urls = [\"{}\"]\ndecode_urls = [\"{}\"]\ndiscovery_interval_ms = 20\n{extra}",
        prefill.url(),
        decode.url()
    ))
    .await;
    eventually("the limit is discovered", || async {
        live.limit() == Some(1000)
    })
    .await;
    Pair {
        live,
        prefill,
        decode,
    }
}

fn chat(extra: Value) -> Value {
    let mut body =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn readyz(live: &Live) -> (u16, String) {
    let r = live
        .g
        .http
        .get(format!("http://{}/readyz", live.g.admin))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The `code` of a refusal on an OpenAI route, after checking its status
/// and that nothing was forwarded.
async fn refused(live: &Live, body: Value) -> String {
    let before = live.g.mock.state.count();
    let answer = live.g.post("/v1/chat/completions", &body).await;
    assert_eq!(answer.status, 400, "{body}: {:?}", answer.json());
    assert_eq!(live.g.mock.state.count(), before, "{body} was forwarded");
    answer.json()["error"]["code"].as_str().unwrap().to_string()
}

async fn forwarded(live: &Live, body: Value) {
    let answer = live.g.post("/v1/chat/completions", &body).await;
    assert_eq!(answer.status, 200, "{body}: {:?}", answer.json());
}

#[tokio::test]
async fn a_prefill_without_decodes_grammar_backend_refuses_grammars_on_exposed_releases() {
    let mut p = prefill("0.5.11");
    p.server_info["grammar_backend"] = json!("none");
    let pair = pair(p, decode("0.5.11"), "").await;
    let live = &pair.live;
    eventually("the grammar parity is read", || async {
        live.g
            .post(
                "/v1/chat/completions",
                &chat(json!({"response_format": {"type": "json_object"}})),
            )
            .await
            .status
            == 400
    })
    .await;
    for extra in [
        json!({"response_format": {"type": "json_object"}}),
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
        json!({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
        json!({"regex": "a+"}),
    ] {
        assert_eq!(
            refused(live, chat(extra)).await,
            "pd_grammar_backend_differs"
        );
    }
    let answer = live
        .g
        .post(
            "/generate",
            &json!({"text": "hi", "sampling_params": {"regex": "a+"}}),
        )
        .await;
    assert_eq!(answer.status, 400);
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("grammar backend"), "{message}");
    assert!(message.contains("grammar_backend=none"), "{message}");
    // Everything else is served.
    forwarded(live, chat(json!({}))).await;
    forwarded(
        live,
        chat(json!({"response_format": {"type": "text"}, "tool_choice": "auto"})),
    )
    .await;
    let m = live.g.metrics().await;
    assert!(
        m.contains("reason=\"pd_grammar_backend_differs\""),
        "rejections are counted by reason"
    );

    // On 0.5.20 the aborted prefill is retired (#36988): served.
    pair.prefill
        .set(|a| a.server_info["version"] = json!("0.5.20"));
    pair.decode
        .set(|a| a.server_info["version"] = json!("0.5.20"));
    eventually("0.5.20 is read", || async {
        live.g
            .post(
                "/v1/chat/completions",
                &chat(json!({"response_format": {"type": "json_object"}})),
            )
            .await
            .status
            == 200
    })
    .await;
}

#[tokio::test]
async fn sampling_masks_and_hidden_states_follow_the_release_and_the_speculative_parity() {
    let mut p = prefill("0.5.19");
    p.server_info["speculative_algorithm"] = json!("DFLASH");
    let pair = pair(p, decode("0.5.19"), "").await;
    let live = &pair.live;
    eventually("the speculative parity is read", || async {
        live.g
            .post(
                "/v1/chat/completions",
                &chat(json!({"return_hidden_states": true})),
            )
            .await
            .status
            == 400
    })
    .await;
    assert_eq!(
        refused(live, chat(json!({"return_hidden_states": true}))).await,
        "pd_hidden_states_refused"
    );
    assert_eq!(
        refused(live, chat(json!({"logprobs": true}))).await,
        "pd_speculative_differs",
        "DFLASH on prefill only rejects logprobs at intake"
    );
    let answer = live
        .g
        .post(
            "/generate",
            &json!({"text": "hi", "return_sampling_mask": true}),
        )
        .await;
    assert_eq!(answer.status, 400, "{:?}", answer.json());

    // Both sides on the same speculative configuration: hidden states pass;
    // the sampling mask depends on an environment value no answer shows.
    pair.decode
        .set(|a| a.server_info["speculative_algorithm"] = json!("DFLASH"));
    eventually("the parity is read again", || async {
        live.g
            .post(
                "/v1/chat/completions",
                &chat(json!({"return_hidden_states": true})),
            )
            .await
            .status
            == 200
    })
    .await;
    let answer = live
        .g
        .post(
            "/generate",
            &json!({"text": "hi", "return_sampling_mask": true}),
        )
        .await;
    assert_eq!(answer.status, 400);
}

#[tokio::test]
async fn prompt_building_settings_that_differ_take_the_model_out_of_service() {
    let mut d = decode("0.5.21");
    d.server_info["allow_auto_truncate"] = json!(true);
    let pair = pair(prefill("0.5.21"), d, "").await;
    let live = &pair.live;
    eventually("the model is out of service", || async {
        readyz(live).await.0 == 503
    })
    .await;
    let (_, detail) = readyz(live).await;
    assert!(detail.contains("allow_auto_truncate"), "{detail}");
    assert!(
        detail.contains(&format!("decode {}", pair.decode.url())),
        "{detail}"
    );
    let answer = live.g.post("/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.json()["error"]["code"], "pd_config_disagrees");
    let m = live.g.metrics().await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("prefill_guard_server_config_mismatch")
                && l.contains("kind=\"pd_disagrees\"")
                && l.contains("setting=\"allow_auto_truncate\"")),
        "{m}"
    );
    // The decode side is changed: back in service.
    pair.decode
        .set(|a| a.server_info["allow_auto_truncate"] = json!(false));
    eventually("the model is back", || async {
        readyz(live).await.0 == 200
    })
    .await;
    forwarded(live, chat(json!({}))).await;

    // A worker listed on the wrong side.
    pair.decode
        .set(|a| a.server_info["disaggregation_mode"] = json!("prefill"));
    eventually("the misplaced worker is named", || async {
        let (status, detail) = readyz(live).await;
        status == 503 && detail.contains("disaggregation_mode=prefill")
    })
    .await;
}

#[tokio::test]
async fn client_request_ids_and_override_headers_are_refused_on_every_release() {
    let pair = pair(prefill("0.5.23"), decode("0.5.23"), "").await;
    let live = &pair.live;
    for body in [
        chat(json!({"rid": "a"})),
        chat(json!({"rid": ["a"]})),
        chat(json!({"bootstrap_room": 1})),
    ] {
        assert_eq!(refused(live, body).await, "client_id_refused");
    }
    let answer = live
        .g
        .post("/generate", &json!({"text": "hi", "rid": "a"}))
        .await;
    assert_eq!(answer.status, 400);
    let before = live.g.mock.state.count();
    let answer = live
        .g
        .send(
            live.g
                .http
                .post(format!("http://{}/v1/chat/completions", live.g.proxy))
                .header("content-type", "application/json")
                .header("x-override-rid", "a")
                .body(chat(json!({})).to_string()),
        )
        .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], "client_id_refused");
    assert_eq!(live.g.mock.state.count(), before);
    // A release that fixes the leak still aborts by prefix.
    forwarded(
        live,
        chat(json!({"response_format": {"type": "json_object"}})),
    )
    .await;
}

#[tokio::test]
async fn grammar_requests_refuse_closes_the_compile_timeout_path() {
    let pair = pair(
        prefill("0.5.11"),
        decode("0.5.11"),
        "grammar_requests = \"refuse\"\n",
    )
    .await;
    let live = &pair.live;
    eventually("the pair is read", || async { readyz(live).await.0 == 200 }).await;
    assert_eq!(
        refused(
            live,
            chat(json!({"response_format": {"type": "json_object"}}))
        )
        .await,
        "pd_grammar_refused"
    );
    forwarded(live, chat(json!({}))).await;
}

/// Without a decode worker to compare with, an exposed release's grammars
/// are refused: nothing says decode has prefill's backend.
#[tokio::test]
async fn without_decode_workers_grammars_on_exposed_releases_are_refused() {
    let w = InfoMock::start(prefill("0.5.11")).await;
    let live = start_live(&format!(
        "prefill_urls = [\"{}\"]\ndiscovery_interval_ms = 20\n",
        w.url()
    ))
    .await;
    eventually("the limit is discovered", || async {
        live.limit() == Some(1000)
    })
    .await;
    let body = chat(json!({"response_format": {"type": "json_object"}}));
    let answer = live.g.post("/v1/chat/completions", &body).await;
    assert_eq!(answer.status, 400);
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("decode_urls"), "{message}");
}

/// Admin routes, `/abort_request` first, are never forwarded, and cannot be
/// allowlisted.
#[tokio::test]
async fn admin_routes_are_never_forwarded() {
    let pair = pair(prefill("0.5.11"), decode("0.5.11"), "").await;
    let live = &pair.live;
    for path in [
        "/abort_request",
        "/flush_cache",
        "/update_weights_from_disk",
        "/set_internal_state",
        "/open_session",
        "/pause_generation",
    ] {
        let answer = live.g.post(path, &json!({"rid": ""})).await;
        assert_eq!(answer.status, 404, "{path}");
    }
    assert_eq!(live.g.mock.state.count(), 0);
    let err = prefill_guard::inspect::allow::AllowList::new(&["/abort_request"]).unwrap_err();
    assert!(err.contains("abort"), "{err}");
}
