//! The real binary with one event loop or several (`io_threads`) decides the
//! same on both paths a body can take: up to `INLINE_MAX_BYTES` it is parsed
//! and bounded on the connection's loop, above that it is parsed and counted
//! whole on the counting pool. And it keeps serving when nobody reads its
//! log.

use crate::common;

use serde_json::{json, Value};

use common::{start_mock, words, MODEL};
use prefill_guard::core::INLINE_MAX_BYTES;

const LIMIT: usize = 5_000;

/// What a request should come to: forwarded (200 from the mock) or refused
/// as too long, with the prompt it carries.
struct Case {
    name: &'static str,
    body: Vec<u8>,
    forwarded: bool,
}

fn chat(text: &str) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": text}]})
}

fn cases() -> Vec<Case> {
    let small_ok = serde_json::to_vec(&chat(&words(10))).unwrap();
    // About 5,000 tokens (one a word) in ~30 KB: small, and over the limit.
    let small_over = serde_json::to_vec(&chat(&words(LIMIT))).unwrap();
    // Padded past the line with JSON whitespace, which SGLang ignores too.
    let large = |text: &str| {
        let mut body = serde_json::to_vec(&chat(text)).unwrap();
        body.resize(body.len().max(INLINE_MAX_BYTES + 1_000), b' ');
        body
    };
    let large_ok = large(&words(10));
    let large_over = large(&words(3 * LIMIT));
    assert!(small_over.len() <= INLINE_MAX_BYTES);
    vec![
        Case {
            name: "small, under",
            body: small_ok,
            forwarded: true,
        },
        Case {
            name: "small, over",
            body: small_over,
            forwarded: false,
        },
        Case {
            name: "large, under",
            body: large_ok,
            forwarded: true,
        },
        Case {
            name: "large, over",
            body: large_over,
            forwarded: false,
        },
    ]
}

/// The binary's configuration for the demo model in front of `mock`, with
/// this file's limit.
fn limited_config(dir: &std::path::Path, mock: &common::Mock) -> std::path::PathBuf {
    common::binary_config(dir, mock.addr, &format!("max_req_input_len = {LIMIT}\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_or_several_loops_decide_the_same_on_both_paths() {
    for io_threads in [1, 3] {
        let mock = start_mock().await;
        let dir = tempfile::tempdir().unwrap();
        let config = limited_config(dir.path(), &mock);
        let flag = io_threads.to_string();
        let spawned = common::spawn_binary_with_args(&config, &["--io-threads", &flag]).await;
        assert_eq!(
            spawned.serving["io_threads"], io_threads,
            "{}",
            spawned.serving
        );
        // The proxy port's loops are threads of their own, apart from the
        // one serving the admin port (`ProxyLoops`; a thread takes its name
        // once it runs).
        let tasks = format!("/proc/{}/task", spawned.pid);
        common::sglang::eventually("one thread per proxy event loop", || {
            let loops = std::fs::read_dir(&tasks)
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("proxy-loop"))
                .count();
            std::future::ready(loops == io_threads)
        })
        .await;
        let proxy = spawned.serving["listen"].as_str().unwrap().to_string();
        let admin = spawned.serving["admin_listen"]
            .as_str()
            .unwrap()
            .to_string();
        let http = reqwest::Client::new();

        // Every case four times, all at once on as many connections, so both
        // paths and every loop run concurrently.
        let cases = cases();
        let sends = cases.iter().cycle().take(4 * cases.len()).map(|case| {
            let req = http
                .post(format!("http://{proxy}/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(case.body.clone());
            async move {
                let r = req.send().await.unwrap();
                let status = r.status().as_u16();
                (case, status, r.bytes().await.unwrap())
            }
        });
        for (case, status, body) in futures_util::future::join_all(sends).await {
            let what = format!("{} with io_threads {io_threads}", case.name);
            if case.forwarded {
                assert_eq!(status, 200, "{what}: {}", String::from_utf8_lossy(&body));
            } else {
                assert_eq!(status, 400, "{what}: {}", String::from_utf8_lossy(&body));
                let e: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(e["error"]["code"], "context_length_exceeded", "{what}: {e}");
            }
        }
        // Only the allowed ones reached the upstream, as the canonical body
        // (the large one without its padding).
        let seen = mock.state.requests();
        assert_eq!(seen.len(), 8, "io_threads {io_threads}");
        for r in &seen {
            assert_eq!(r.json(), chat(&words(10)));
            assert!(r.body.len() < 1_000, "{} bytes forwarded", r.body.len());
        }
        let health = http
            .get(format!("http://{admin}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);

        // Counting threads yield the CPU to the loops: nice 10 for the
        // threads that counted (the large bodies went to the pool), 0 for
        // the loops and the admin thread.
        let nice: Vec<(String, i64)> = threads(&spawned.pid)
            .into_iter()
            .map(|(name, stat)| (name, stat_field(&stat, 19)))
            .collect();
        assert!(
            nice.iter().any(|(_, n)| *n == 10),
            "no counting thread at nice 10: {nice:?}"
        );
        for (name, n) in &nice {
            if name.starts_with("proxy-loop") {
                assert_eq!(*n, 0, "{name}: {nice:?}");
            }
            if name.starts_with("pg-count") {
                assert_eq!(*n, 10, "{name}: {nice:?}");
            }
        }
        assert_eq!(nice[0].1, 0, "the main thread (admin port): {nice:?}");
    }
}

/// Every thread of `pid`, main thread first: its name and `/proc` stat line.
fn threads(pid: &str) -> Vec<(String, String)> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort();
    tids.iter()
        .filter_map(|tid| {
            let dir = format!("/proc/{pid}/task/{tid}");
            let name = std::fs::read_to_string(format!("{dir}/comm")).ok()?;
            let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
            Some((name.trim().to_string(), stat))
        })
        .collect()
}

/// Field `n` (from 1, as in proc(5)) of a stat line; the name, field 2, may
/// hold spaces and parentheses, so fields are counted after its last `)`.
fn stat_field(stat: &str, n: usize) -> i64 {
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(n - 3).unwrap().parse().unwrap()
}

/// A log collector that stops reading (the container runtime's log pipe is
/// full) must not stop the proxy: a request never waits for its log line.
/// The pipe holds 64 KiB, about 150 decision lines; 3,000 requests go on
/// while nothing reads, then every one of their lines arrives once the reader
/// is back (the queue holds them; none dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_reader_does_not_stall_requests() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    // 150 batches of 20 concurrent requests: exactly 3,000.
    const REQUESTS: usize = 3_000;
    const BATCH: usize = 20;
    let mock = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = limited_config(dir.path(), &mock);
    let mut child = common::spawn_guard_process(&config, &[]);
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let serving: Value = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("the guard starts");
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if v["message"] == "prefill-guard serving" {
                    return v;
                }
            }
        }
    })
    .await
    .expect("the guard starts serving");
    let proxy = serving["listen"].as_str().unwrap().to_string();
    let admin = serving["admin_listen"].as_str().unwrap().to_string();

    // Nothing reads stderr from here on.
    let http = reqwest::Client::new();
    let body = serde_json::to_vec(&chat(&words(10))).unwrap();
    let sent = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut statuses = Vec::with_capacity(REQUESTS);
        for batch in 0..REQUESTS / BATCH {
            let sends = (0..BATCH).map(|_| {
                http.post(format!("http://{proxy}/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
            });
            for r in futures_util::future::join_all(sends).await {
                statuses.push(
                    r.unwrap_or_else(|e| panic!("batch {batch}: {e}"))
                        .status()
                        .as_u16(),
                );
            }
        }
        statuses
    })
    .await
    .expect("requests kept being answered while stderr was not read");
    assert!(
        sent.iter().all(|s| *s == 200),
        "{:?}",
        sent.iter().filter(|s| **s != 200).count()
    );
    assert_eq!(mock.state.requests().len(), sent.len());
    let metrics = common::scrape(&http, &admin).await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "prefill_guard_log_lines_dropped_total 0"),
        "the queue held every line: {}",
        metrics
            .lines()
            .filter(|l| l.contains("dropped"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The reader is back: every request's decision line arrives.
    let decisions = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut n = 0;
        while n < sent.len() {
            let line = stderr
                .next_line()
                .await
                .unwrap()
                .expect("the guard still runs");
            if line.contains("\"message\":\"request decided\"") {
                n += 1;
            }
        }
        n
    })
    .await
    .expect("the queued decision lines are written once stderr is read again");
    assert_eq!(decisions, sent.len());
}
