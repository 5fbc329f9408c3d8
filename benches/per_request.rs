//! What every request pays besides reading and counting its body, in the
//! process, where `bench/ab.sh`'s end-to-end runs are too noisy to see a
//! fraction of a microsecond: a new request id, the decision line (human
//! and JSON, through the real subscriber) and the request span every
//! proxied request lives in (created, entered and left as its future is
//! polled, closed). The lines are written to nothing, not through the
//! `pg-log` queue: at a benchmark's million lines a second that queue is
//! full and drops at one moment and drains at the next, and which one a
//! sample catches made the rows vary by 2.5x from run to run.
//!
//! `cargo bench --bench per_request` measures; `cargo test --all-targets`
//! runs each benchmark once.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use prefill_guard::logging::{decision, subscriber, DecisionLine, LogFormat};
use prefill_guard::proxy::headers::request_id;

fn line(id: &str) -> DecisionLine<'_> {
    DecisionLine {
        request_id: id,
        mode: "proxy",
        method: "POST",
        route: "/v1/chat/completions",
        refused_path: None,
        model: Some("qwen2.5"),
        tokens: None,
        count_method: Some("bound"),
        limit: Some(681_280),
        decision: "allowed",
        reason: None,
        status: 200,
        upstream_status: Some(200),
        latency: Duration::from_micros(5_281),
    }
}

fn per_request(c: &mut Criterion) {
    let no_id = http::HeaderMap::new();
    c.bench_function("request id, new", |b| {
        b.iter(|| request_id(std::hint::black_box(&no_id)))
    });
    let id = "155ed1e7-2e8c-41e3-9043-5b640b54604a";
    for (name, format) in [("human", LogFormat::Human), ("json", LogFormat::Json)] {
        let sub = subscriber(format, "info", std::io::sink);
        tracing::subscriber::with_default(sub, || {
            c.bench_function(&format!("decision line, {name}"), |b| {
                b.iter(|| decision(std::hint::black_box(&line(id))))
            });
            c.bench_function(&format!("request span, {name}"), |b| {
                b.iter(|| {
                    let span =
                        tracing::info_span!("request", request_id = std::hint::black_box(id));
                    // A proxied request's future is polled a handful of times.
                    for _ in 0..4 {
                        let _entered = span.enter();
                    }
                })
            });
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = per_request
}
criterion_main!(benches);
