//! What every request pays besides reading and counting its body, in the
//! process, where `bench/ab.sh`'s end-to-end runs are too noisy to see a
//! fraction of a microsecond: a new request id, the metrics an answered
//! request records (alone, and from two threads at once as two event loops
//! do), the decision line (human and JSON, through the real subscriber)
//! and the request span every
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
use prefill_guard::metrics::Metrics;
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
    // What `core::record::observe` records for an allowed chat decided by
    // its bound, with a few other series already present, as after warm-up.
    let metrics = Metrics::new("bench");
    for route in ["/generate", "/v1/completions", "/v1/chat/completions"] {
        for model in ["llama", "qwen2.5"] {
            metrics.request("proxy", route, model, "refused");
            metrics.request("proxy", route, model, "allowed");
        }
    }
    let one_request = |metrics: &Metrics| {
        // Held while the request is answered, dropped with its body.
        let _in_flight = metrics.in_flight();
        let (mode, route, model) =
            std::hint::black_box(("proxy", "/v1/chat/completions", "qwen2.5"));
        metrics.request(mode, route, model, "allowed");
        metrics.count_duration(mode, route, model, Duration::from_micros(7));
        metrics.count_method(mode, route, model, "bound");
        metrics.upstream_duration(route, Duration::from_micros(900));
    };
    c.bench_function("metrics, one request", |b| b.iter(|| one_request(&metrics)));
    // Two event loops answering at once, as the guard runs on two cores:
    // the time per request of each.
    c.bench_function("metrics, one request, two threads at once", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |n| {
                for _ in 0..n {
                    one_request(&metrics);
                }
            })
        })
    });
    let id = "155ed1e7-2e8c-41e3-9043-5b640b54604a";
    let request_span = || {
        let span = tracing::info_span!("request", request_id = std::hint::black_box(id));
        // A proxied request's future is polled a handful of times.
        for _ in 0..4 {
            let _entered = span.enter();
        }
    };
    for (name, format) in [("human", LogFormat::Human), ("json", LogFormat::Json)] {
        let dispatch = tracing::Dispatch::new(subscriber(format, "info", std::io::sink));
        tracing::dispatcher::with_default(&dispatch, || {
            c.bench_function(&format!("decision line, {name}"), |b| {
                b.iter(|| decision(std::hint::black_box(&line(id))))
            });
            c.bench_function(&format!("request span, {name}"), |b| b.iter(request_span));
        });
        c.bench_function(&format!("request span, {name}, two threads at once"), |b| {
            b.iter_custom(|iters| {
                // Each event loop runs with the subscriber as its default,
                // set once, as the guard's loops do.
                two_threads(iters, |n| {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for _ in 0..n {
                            request_span();
                        }
                    })
                })
            })
        });
    }
}

/// The longer of two threads' times to each run `loop_of(iters)`, both
/// started together: what each of two event loops pays per request when
/// they answer at the same moment.
fn two_threads(iters: u64, loop_of: impl Fn(u64) + Sync) -> Duration {
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let loops: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t = std::time::Instant::now();
                    loop_of(iters);
                    t.elapsed()
                })
            })
            .collect();
        loops
            .into_iter()
            .map(|l| l.join().expect("a bench thread panicked"))
            .max()
            .unwrap_or_default()
    })
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = per_request
}
criterion_main!(benches);
