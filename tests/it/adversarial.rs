//! The adversarial corpus of issue 3, sent to the real guard in front of the
//! recording mock: every over-long prompt in every evasive form is refused
//! and none reaches upstream; every legitimate short request in the same
//! forms arrives, at the canonical path, with the same JSON meaning. Each
//! corpus runs over HTTP/1.1 (raw bytes, pipelined) and h2c.
//!
//! The cases are data (`tests/common/corpus.rs`); a failure names its case.

use crate::common;

use std::collections::BTreeMap;

use common::corpus::{self, meaning, Case, Exp};
use common::wire::{h1_pipeline, h2_raw, h2_streams, RawResponse};
use common::{start, Guarded, Options};

async fn guard() -> Guarded {
    start(Options {
        limit: corpus::LIMIT,
        ..Options::default()
    })
    .await
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http1,
    H2c,
}

/// What one request got: a status and body, or nothing.
type Got = Option<(u16, Vec<u8>)>;

async fn send(g: &Guarded, case: &Case, proto: Proto) -> Vec<Got> {
    let reqs: Vec<_> = case.reqs.iter().map(|(r, _)| r.clone()).collect();
    match proto {
        Proto::Http1 => {
            let got = h1_pipeline(g.proxy, &reqs).await;
            check_closing(&got);
            (0..reqs.len())
                .map(|i| got.get(i).map(|r| (r.status, r.body.clone())))
                .collect()
        }
        // Small DATA frames: the h2 counterpart of many small chunks.
        Proto::H2c => h2_streams(g.proxy, &reqs, 3)
            .await
            .into_iter()
            .map(|r| r.map(|r| (r.status, r.body)))
            .collect(),
    }
}

/// A refusal for ambiguous framing tells the client the connection is closing.
fn check_closing(got: &[RawResponse]) {
    for r in got {
        if r.text().contains("framing is ambiguous") {
            assert_eq!(r.header("connection"), Some("close"), "{}", r.text());
        }
    }
}

/// Runs one case; `Err` says what went wrong.
async fn run(g: &Guarded, case: &Case, proto: Proto) -> Result<(), String> {
    let before = g.mock.state.count();
    let got = send(g, case, proto).await;
    let arrived = g.mock.state.requests()[before..].to_vec();
    let mut expected_arrivals = Vec::new();
    for (i, ((_, exp), got)) in case.reqs.iter().zip(&got).enumerate() {
        let shown = |g: &Got| {
            g.as_ref().map_or("no answer".to_string(), |(s, b)| {
                format!("{s} {}", String::from_utf8_lossy(b))
            })
        };
        match exp {
            Exp::Arrive { path, json } => {
                if got.as_ref().map(|g| g.0) != Some(200) {
                    return Err(format!("request {i} should arrive, got {}", shown(got)));
                }
                expected_arrivals.push((path.clone(), json.clone()));
            }
            Exp::Refused { status, says } => match got {
                Some((s, body)) if s == status => {
                    let text = String::from_utf8_lossy(body);
                    if let Some(why) = says.filter(|w| !text.contains(w)) {
                        return Err(format!("request {i}: refused, but not for {why:?}: {text}"));
                    }
                }
                _ => return Err(format!("request {i}: want {status}, got {}", shown(got))),
            },
            Exp::Dropped => {
                if got.is_some() {
                    return Err(format!(
                        "request {i} should never be answered, got {}",
                        shown(got)
                    ));
                }
            }
        }
    }
    if arrived.len() != expected_arrivals.len() {
        return Err(format!(
            "{} request(s) reached upstream, {} expected: {:?}",
            arrived.len(),
            expected_arrivals.len(),
            arrived.iter().map(|r| &r.target).collect::<Vec<_>>()
        ));
    }
    // h2c streams may arrive in any order.
    for (path, json) in expected_arrivals {
        let found = arrived
            .iter()
            .any(|r| r.target == path && meaning(&r.body) == json);
        if !found {
            return Err(format!(
                "no upstream request at {path} with the meaning {json}; upstream saw {:?}",
                arrived
                    .iter()
                    .map(|r| format!("{} {}", r.target, String::from_utf8_lossy(&r.body)))
                    .collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// Runs a corpus over one protocol; returns the number of cases per category.
async fn run_corpus(cases: &[Case], proto: Proto) -> BTreeMap<String, usize> {
    let g = guard().await;
    let mut failures = Vec::new();
    let mut sizes = BTreeMap::new();
    for case in cases {
        if proto == Proto::H2c && case.h1_only() {
            continue;
        }
        *sizes.entry(case.category().to_string()).or_insert(0) += 1;
        if let Err(e) = run(&g, case, proto).await {
            failures.push(format!("{proto:?} {}: {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    sizes
}

fn report(what: &str, proto: Proto, sizes: &BTreeMap<String, usize>) {
    let total: usize = sizes.values().sum();
    println!("{what} over {proto:?}: {total} cases {sizes:?}");
}

#[test]
fn the_corpus_is_large_and_every_name_is_unique() {
    let adversarial = corpus::adversarial();
    let legitimate = corpus::legitimate();
    assert!(adversarial.len() >= 150, "{}", adversarial.len());
    for set in [&adversarial, &legitimate] {
        let mut names: Vec<&str> = set.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "case names are unique");
    }
    // Every over-long request is over the limit however it is read: at
    // least one request of each case is refused, none is "arrive" but a
    // short pipelined companion.
    for c in &adversarial {
        assert!(
            c.reqs.iter().any(|(_, e)| matches!(e, Exp::Refused { .. })),
            "{}",
            c.name
        );
    }
}

#[tokio::test]
async fn over_long_prompts_in_evasive_forms_never_reach_upstream_http1() {
    let sizes = run_corpus(&corpus::adversarial(), Proto::Http1).await;
    report("adversarial", Proto::Http1, &sizes);
}

#[tokio::test]
async fn over_long_prompts_in_evasive_forms_never_reach_upstream_h2c() {
    let sizes = run_corpus(&corpus::adversarial(), Proto::H2c).await;
    report("adversarial", Proto::H2c, &sizes);
}

#[tokio::test]
async fn short_requests_in_the_same_forms_arrive_http1() {
    let sizes = run_corpus(&corpus::legitimate(), Proto::Http1).await;
    report("legitimate", Proto::Http1, &sizes);
}

#[tokio::test]
async fn short_requests_in_the_same_forms_arrive_h2c() {
    let sizes = run_corpus(&corpus::legitimate(), Proto::H2c).await;
    report("legitimate", Proto::H2c, &sizes);
}

/// h2 forbids connection-specific fields; hyper's client will not send them,
/// so these go out as raw frames. The stream is reset, nothing is forwarded.
#[tokio::test]
async fn h2c_transfer_encoding_and_lying_content_length_are_refused() {
    let g = guard().await;
    let body = serde_json::json!({"text": corpus::long()}).to_string();
    let authority = g.proxy.to_string();
    let base = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", authority.as_str()),
        (":path", "/generate"),
        ("content-type", "application/json"),
    ];
    let short_len = "5".to_string();
    let variants: [&[(&str, &str)]; 3] = [
        &[("transfer-encoding", "chunked")],
        &[("content-length", short_len.as_str())],
        &[("connection", "keep-alive")],
    ];
    for extra in variants {
        let headers: Vec<(&str, &str)> = base.iter().chain(extra.iter()).copied().collect();
        let seen = h2_raw(g.proxy, &headers, body.as_bytes()).await;
        assert!(seen.reset() && !seen.answered(), "{extra:?}: {seen:?}");
    }
    // The same frames without the offending field are answered (the raw
    // client works): refused as too long, still not forwarded.
    let seen = h2_raw(g.proxy, &base, body.as_bytes()).await;
    assert!(seen.answered(), "{seen:?}");
    assert_eq!(g.mock.state.count(), 0);
}
