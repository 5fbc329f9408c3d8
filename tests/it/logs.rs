//! Prompts are the tenants' data: no log line, at any level, may carry one.
//! The check installs the process-wide subscriber (counting threads log
//! through it, not through a thread-local default), which in the shared test
//! binary would also collect every other test's lines: it runs in a child
//! process of this binary, alone.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::json;

use common::{start, Guarded, Options, MODEL};
use prefill_guard::logging::{self, LogFormat};

/// Not in the demo vocabulary, so it is one unknown token wherever it appears.
const MARKER: &str = "zqxsecretmarker7731";

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Sink {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Everything logged anywhere in the process, as JSON, at every level.
fn global_sink() -> Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| {
        let sink = Sink::default();
        let writer = sink.clone();
        tracing::subscriber::set_global_default(logging::subscriber(
            LogFormat::Json,
            "trace",
            move || writer.clone(),
        ))
        .expect("the only global subscriber in this binary");
        sink
    })
    .clone()
}

/// Requests that carry the marker in every place a body can: allowed and
/// refused, text, chat, token ids, batches, streams, broken JSON, key names.
/// Returns how many requests were sent.
async fn send_marked_requests(g: &Guarded) -> usize {
    let m = MARKER;
    let cases = [
        ("/generate", json!({"text": format!("hello {m} world")}).to_string()),
        ("/generate", json!({"text": format!("{m} ").repeat(20)}).to_string()),
        ("/v1/completions", json!({"prompt": format!("hello {m}"), "stream": true}).to_string()),
        ("/v1/completions", json!({"prompt": [format!("{m} ").repeat(20), "hello".to_string()]}).to_string()),
        ("/v1/chat/completions", json!({"model": MODEL, "messages": [{"role": "user", "content": m}]}).to_string()),
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "messages": [{"role": "user", "content": format!("{m} ").repeat(20)}]}).to_string(),
        ),
        ("/v1/completions", json!({"prompt": [1, 2], "user": m}).to_string()),
        ("/v1/completions", format!(r#"{{"prompt": [1], "{m}": 1, "{m}": 2}}"#)),
        ("/v1/completions", format!(r#"{{"prompt": "{m}"#)),
        ("/generate", json!({"text": m, "image_data": m}).to_string()),
        // A route the guard does not model: refused, and its path logged.
        ("/not/a/route", json!({"text": m}).to_string()),
    ];
    for (path, body) in &cases {
        let a = g.post_raw(path, body.clone()).await;
        assert!(
            a.status.as_u16() < 500,
            "{path}: {} {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        );
    }
    cases.len()
}

/// Set in the child process that runs [`prompts_never_reach_the_logs_alone`].
const ALONE: &str = "PREFILL_GUARD_TEST_LOGS_ALONE";

#[test]
fn prompts_never_reach_the_logs() {
    let name = "logs::prompts_never_reach_the_logs_alone";
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ALONE, "1")
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The child ran the check, rather than finding nothing to run.
    assert!(text.contains("1 passed"), "{text}");
}

#[tokio::test]
#[ignore = "run alone, in a child process, by prompts_never_reach_the_logs"]
async fn prompts_never_reach_the_logs_alone() {
    if std::env::var_os(ALONE).is_none() {
        println!("skipped: run by prompts_never_reach_the_logs, alone in its process");
        return;
    }
    let global = global_sink();
    let options = || Options {
        limit: 8,
        ..Options::default()
    };

    // The human format, for everything logged on this (the runtime's)
    // thread and on the proxy's event loops it starts.
    let human = Sink::default();
    let writer = human.clone();
    let human_sent = {
        let _default = tracing::subscriber::set_default(logging::subscriber(
            LogFormat::Human,
            "trace",
            move || writer.clone(),
        ));
        let mut g = start(options()).await;
        let sent = send_marked_requests(&g).await;
        g.shutdown().await.unwrap();
        sent
    };
    // Then JSON, through the global subscriber.
    let mut g = start(options()).await;
    let json_sent = send_marked_requests(&g).await;
    g.shutdown().await.unwrap();

    let (human, global) = (human.text(), global.text());
    assert_eq!(
        human.matches("prefill_guard::decision").count(),
        human_sent,
        "{human}"
    );
    // One line per decision, the request id once, no Rust debug forms.
    for line in human
        .lines()
        .filter(|l| l.contains("prefill_guard::decision"))
    {
        assert_eq!(line.matches("request_id=").count(), 1, "{line}");
        assert!(line.contains("request decided"), "{line}");
        assert!(!line.contains("Some("), "{line}");
    }
    let decisions: Vec<serde_json::Value> = global
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "prefill_guard::decision")
        .collect();
    assert_eq!(decisions.len(), json_sent);
    assert!(decisions
        .iter()
        .any(|d| d["decision"] == "allowed" && d["upstream_status"] == 200));
    assert!(decisions
        .iter()
        .any(|d| d["reason"] == "context_length_exceeded" && d["tokens"].is_u64()));
    assert!(
        decisions
            .iter()
            .any(|d| d["reason"] == "route_not_allowed" && d["path"] == "/not/a/route"),
        "a refused route's line names its path"
    );
    for (name, text) in [("human", &human), ("json", &global)] {
        assert!(
            !text.to_lowercase().contains(MARKER),
            "a prompt reached the {name} logs:\n{text}"
        );
    }
}
