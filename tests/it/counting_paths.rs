//! How a request is decided — by the upper bound, exactly, or by counting
//! that stopped at the limit — as a client and an operator see it: the
//! answer, and `prefill_guard_count_method_total` on `/metrics`.

use crate::common;

use bytes::Bytes;
use common::{demo_guard, sample, start, words, Options, MODEL};
use prefill_guard::core::{Mode, Record};
use prefill_guard::count::CountMethod;
use prefill_guard::inspect::Route;
use serde_json::json;

fn method_series(method: &str) -> String {
    format!(
        "prefill_guard_count_method_total{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\",method=\"{method}\"}}"
    )
}

#[tokio::test]
async fn each_request_says_how_it_was_decided() {
    let g = start(Options {
        limit: 50,
        ..Options::default()
    })
    .await;
    // 11 bytes: the demo tokenizer (word-level, no normalizer) cannot make
    // more tokens than bytes, so the bound accepts it untokenized.
    let small = g.post("/generate", &json!({"text": "hello world"})).await;
    assert_eq!(small.status, 200);
    // 60 words, 359 bytes: over the bound, counted; 60 >= 50, so counting
    // stops at the limit and the refusal says "at least".
    let big = g.post("/generate", &json!({"text": words(60)})).await;
    assert_eq!(big.status, 400);
    let msg = big.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("at least 50 tokens"), "{msg}");
    assert!(msg.contains("maximum allowed length (50 tokens)"), "{msg}");
    // 40 words: over the bound (239 bytes) but under the limit: counted to the end.
    let mid = g.post("/generate", &json!({"text": words(40)})).await;
    assert_eq!(mid.status, 200);
    // Token ids are their own count.
    let ids = g.post("/generate", &json!({"input_ids": [1, 2, 3]})).await;
    assert_eq!(ids.status, 200);

    let m = g.metrics().await;
    assert_eq!(sample(&m, &method_series("bound")), 1.0);
    assert_eq!(sample(&m, &method_series("early_exit")), 1.0);
    assert_eq!(sample(&m, &method_series("exact")), 2.0);
    // The bound is not a count: only the three counted requests are observed.
    let observed = format!(
        "prefill_guard_prompt_tokens_count{{mode=\"proxy\",route=\"/generate\",model=\"{MODEL}\"}}"
    );
    assert_eq!(sample(&m, &observed), 3.0);
    common::promtool_check_metrics(&m);
    // What reached upstream: the three allowed requests only.
    assert_eq!(g.mock.state.count(), 3);
}

#[tokio::test]
async fn a_chat_over_the_limit_keeps_the_openai_shape() {
    let g = start(Options {
        limit: 20,
        ..Options::default()
    })
    .await;
    let r = g
        .post("/v1/chat/completions", &common::bodies::chat(500))
        .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "messages");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("resulted in at least 20 tokens"), "{msg}");
    assert_eq!(g.mock.state.count(), 0);
}

/// `exact_counting`: the same small prompt is tokenized, and its count known.
#[tokio::test]
async fn exact_counting_never_decides_by_the_bound() {
    let body = Bytes::from(json!({"text": "hello world"}).to_string());
    for (exact, method, tokens) in [
        (false, CountMethod::Bound, None),
        (true, CountMethod::Exact, Some(2)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let guard = demo_guard(dir.path(), Some(50)).with_exact_counting(exact);
        let d = guard
            .check(
                Record::new(Mode::Proxy),
                Route::Generate,
                Some(b"application/json"),
                Default::default(),
                None,
                body.clone(),
            )
            .await;
        assert!(d.verdict.is_ok());
        assert_eq!(d.record.count_method, Some(method));
        assert_eq!(d.record.tokens, tokens);
        assert_eq!(d.record.upper_bound.is_some(), !exact);
    }
}
