//! Every metric an operator is told about exists. The README, `docs/` and
//! the files under `deploy/` (Envoy and Istio comments, Prometheus rules,
//! the Grafana dashboard) name metrics to watch, alert on and size
//! timeouts from; each name must be a family the running binary exports,
//! and every exported family must be in the README's table.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::sglang::{prefill_worker, InfoMock};
use common::{binary_config, scrape, spawn_binary, start_mock};

/// Names with the metric prefix that are not metrics: the Envoy clusters of
/// the guard's authz and gRPC ports in `deploy/envoy/`.
const NOT_METRICS: &[&str] = &["prefill_guard_authz", "prefill_guard_grpc"];

/// Histogram and counter series carry suffixes the family name does not.
const SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];

/// `prefill_guard_*` names in `text`, suffixes of histogram series removed.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(i) = text[at..].find("prefill_guard_") {
        let start = at + i;
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || **b == b'_')
                .count();
        at = end;
        // `prefill_guard_` inside a longer identifier (`x_prefill_guard_y`) is not a metric
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let mut name = text[start..end].trim_end_matches('_').to_string();
        // the prefix itself (`prefill_guard_*`) names no metric
        if name == "prefill_guard" || NOT_METRICS.contains(&name.as_str()) {
            continue;
        }
        for suffix in SUFFIXES {
            if let Some(base) = name.strip_suffix(suffix) {
                name = base.to_string();
            }
        }
        found.insert(name);
    }
    found
}

/// Every file under `dir` (recursively) whose name ends in one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, exts, out);
        } else if exts
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
        {
            out.push(path);
        }
    }
}

#[tokio::test]
async fn every_metric_the_docs_name_is_exported_and_every_exported_one_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mock = start_mock().await;
    // With a prefill worker to discover, so the per-worker families render too.
    let worker = InfoMock::start(prefill_worker(100)).await;
    let config = binary_config(
        dir.path(),
        mock.addr,
        &format!("prefill_urls = [\"{}\"]\n", worker.url()),
    );
    let guard = spawn_binary(&config).await;
    let admin = guard.serving["admin_listen"].as_str().unwrap().to_string();
    let text = scrape(&reqwest::Client::new(), &admin).await;
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        exported.len() > 20,
        "only {} families exported: {exported:?}",
        exported.len()
    );

    let mut docs = vec![root.join("README.md")];
    files(&root.join("docs"), &["md"], &mut docs);
    files(
        &root.join("deploy"),
        &["md", "yaml", "yml", "json", "toml"],
        &mut docs,
    );
    files(&root.join("config"), &["toml"], &mut docs);
    let mut unknown = Vec::new();
    let mut mentioned = BTreeSet::new();
    for path in &docs {
        let text = std::fs::read_to_string(path).unwrap();
        for name in names_in(&text) {
            if !exported.contains(&name) {
                unknown.push(format!(
                    "{}: {name}",
                    path.strip_prefix(root).unwrap().display()
                ));
            }
            mentioned.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics named in the docs that the binary does not export:\n{}",
        unknown.join("\n")
    );

    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let undocumented: Vec<&String> = exported
        .iter()
        .filter(|name| !readme.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported families missing from the README's metric table: {undocumented:?}"
    );
    eprintln!(
        "{} families exported, {} named in {} files",
        exported.len(),
        mentioned.len(),
        docs.len()
    );
}

#[test]
fn names_are_read_as_an_operator_reads_them() {
    let text = "rate(prefill_guard_count_duration_seconds_bucket[5m]) and \
                `prefill_guard_requests_total{mode=\"proxy\"}`, x-prefill-guard-tokens, \
                my_prefill_guard_thing, prefill_guard_ (a prefix)";
    let names: Vec<String> = names_in(text).into_iter().collect();
    assert_eq!(
        names,
        [
            "prefill_guard_count_duration_seconds",
            "prefill_guard_requests_total"
        ]
    );
}

/// The README's table of refusal codes lists every code the guard gives.
#[test]
fn every_refusal_code_is_in_the_readme() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("### Refusal codes")
        .expect("a Refusal codes table");
    let table = &readme[start..];
    for label in prefill_guard::errors::LABELS {
        assert!(
            table.contains(&format!("| `{label}` |")),
            "README's Refusal codes table has no row for `{label}`"
        );
    }
}
