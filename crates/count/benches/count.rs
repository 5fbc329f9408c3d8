//! Counting micro-benchmarks, per tokenizer fixture in `../shared/tokenizers`
//! (or `$PREFILL_GUARD_SHARED/tokenizers`): the guard's counter on a ~32k-token
//! text against the `tokenizers` crate's own `Tokenizer::encode(..).len()`,
//! the floor any exact counter has to beat or match: the guard's exact,
//! parallel and early-exit counts, its no-tokenize upper bound, and a whole
//! chat request (template and count) through `ModelCounter`; and the chat
//! template's rendering alone at about 1k, 32k and 600k tokens, and the
//! bound decision that admits an everyday chat (preprocessing, template and
//! bound) at the same sizes.
//!
//! `cargo bench --bench count` measures; `cargo test --all-targets` runs each
//! benchmark once on a short text and one fixture, so it stays quick.
//! `BENCH_FIXTURES=qwen2.5,llama-3.2` narrows the fixtures.
#![allow(
    clippy::unwrap_used,
    reason = "a benchmark over the fixtures: a fixture that does not load is a failed run"
)]

#[path = "../../../tests/it/common/shared.rs"]
mod shared;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prefill_guard_count::tokenizer::TextTokenizer;
use prefill_guard_count::{Clock, ModelCounter, ModelFiles, Releases, ServerConfig, Unit};

/// `cargo bench` passes `--bench`; `cargo test` does not (criterion then runs
/// every benchmark once as a smoke test).
fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn shared_tokenizers() -> Option<PathBuf> {
    shared::shared_dir().map(|d| d.join("tokenizers"))
}

fn fixtures(root: &Path) -> Vec<PathBuf> {
    let only: Option<Vec<String>> = std::env::var("BENCH_FIXTURES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.retain(|d| {
        let name = d.file_name().unwrap_or_default().to_string_lossy();
        only.as_ref().is_none_or(|o| o.iter().any(|x| *x == name))
    });
    if !measuring() {
        // One fixture is enough to show every benchmark still runs.
        dirs.retain(|d| d.ends_with("qwen2.5"));
    }
    dirs
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "this",
    "are",
    "or",
    "from",
    "at",
    "which",
    "but",
    "have",
    "they",
    "you",
    "were",
    "there",
    "one",
    "all",
    "their",
    "when",
    "will",
    "more",
    "about",
    "into",
    "than",
    "other",
    "time",
    "people",
    "world",
    "between",
    "government",
    "important",
    "development",
    "information",
    "experience",
    "question",
    "community",
    "business",
    "naïve",
    "café",
    "Zürich",
    "résumé",
    "“quoted”",
    "€42",
    "don't",
    "isn't",
    "well-known",
    "e-mail",
    "state-of-the-art",
];
const SYLLABLES: &[&str] = &[
    "ka", "lo", "ven", "tri", "sum", "ber", "qua", "zo", "mel", "tion",
];

/// Deterministic English-ish prose of about `chars` bytes: common words,
/// invented words, numbers, punctuation, a little non-ASCII, paragraphs.
fn prose(chars: usize) -> String {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = String::with_capacity(chars + 32);
    let mut capital = true;
    while out.len() < chars {
        let r = next() % 100;
        let word = if r < 80 {
            WORDS[(next() % WORDS.len() as u64) as usize].to_owned()
        } else if r < 92 {
            (0..2 + next() % 3)
                .map(|_| SYLLABLES[(next() % SYLLABLES.len() as u64) as usize])
                .collect()
        } else {
            (next() % 100_000).to_string()
        };
        if capital {
            let mut c = word.chars();
            if let Some(first) = c.next() {
                out.extend(first.to_uppercase());
                out.push_str(c.as_str());
            }
            capital = false;
        } else {
            out.push_str(&word);
        }
        match next() % 100 {
            0..=7 => {
                out.push('.');
                capital = true;
            }
            8..=13 => out.push(','),
            14 => out.push_str("\n\n"),
            _ => {}
        }
        out.push(' ');
    }
    out
}

fn counting(c: &mut Criterion) {
    let Some(root) = shared_tokenizers() else {
        return;
    };
    // ~32k tokens for the measured runs; a short text when only smoke-testing.
    let text = prose(if measuring() { 100_000 } else { 4_000 });
    let chat = Arc::new(serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": text},
        ],
    }));
    let chat_unit = Unit::Chat(chat);

    for dir in fixtures(&root) {
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let json = dir.join("tokenizer.json");
        if !json.is_file() {
            eprintln!("skipping {name}: no tokenizer.json");
            continue;
        }
        let floor = match tokenizers::Tokenizer::from_file(&json) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("skipping {name}: the tokenizers crate cannot load it: {e}");
                continue;
            }
        };
        let guard = match TextTokenizer::load(&dir) {
            Ok(Some(t)) => t,
            Ok(None) => {
                eprintln!("skipping {name}: no tokenizer.json");
                continue;
            }
            Err(e) => {
                eprintln!("skipping {name}: the guard refuses this tokenizer: {e}");
                continue;
            }
        };
        let tokens = floor
            .encode(text.as_str(), false)
            .map(|e| e.len())
            .unwrap_or(0);
        eprintln!("{name}: {} bytes, {tokens} tokens", text.len());

        let mut group = c.benchmark_group(format!("count/{name}"));
        group.throughput(Throughput::Bytes(text.len() as u64));
        if measuring() {
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(4));
        }
        group.bench_with_input(
            BenchmarkId::new("tokenizers_encode_floor", tokens),
            &text,
            |b, t| b.iter(|| floor.encode(t.as_str(), false).map(|e| e.len()).unwrap()),
        );
        group.bench_with_input(
            BenchmarkId::new("tokenizers_encode_fast", tokens),
            &text,
            |b, t| {
                b.iter(|| {
                    floor
                        .encode_fast(t.as_str(), false)
                        .map(|e| e.len())
                        .unwrap()
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("guard_encode_len", tokens),
            &text,
            |b, t| b.iter(|| guard.encode_len(t, false).unwrap()),
        );
        // The guard's counting paths (crates/count/src/fast.rs, bound.rs): the exact
        // count without building an Encoding, the same spread over the pool,
        // an early exit at half the text's tokens, and the no-tokenize bound.
        group.bench_with_input(
            BenchmarkId::new("guard_count_exact", tokens),
            &text,
            |b, t| b.iter(|| guard.count_exact(t, false).unwrap()),
        );
        group.bench_with_input(
            BenchmarkId::new("guard_count_parallel", tokens),
            &text,
            |b, t| b.iter(|| guard.count_parallel(t, false).unwrap()),
        );
        // Timing paths that count differently would compare unequal work.
        let exact = guard.encode_len(&text, false).unwrap();
        assert_eq!(guard.count_exact(&text, false).unwrap(), exact, "{name}");
        assert_eq!(guard.count_parallel(&text, false).unwrap(), exact, "{name}");
        let half = (tokens / 2).max(1);
        group.bench_with_input(
            BenchmarkId::new("guard_count_until_half_parallel", tokens),
            &text,
            |b, t| b.iter(|| guard.count_until(t, false, half, true).unwrap()),
        );
        if guard.upper_bound(&text, false).is_some() {
            group.bench_with_input(
                BenchmarkId::new("guard_upper_bound", tokens),
                &text,
                |b, t| b.iter(|| guard.upper_bound(t, false)),
            );
        } else {
            eprintln!("{name}: no upper bound: {:?}", guard.bound_rule());
        }
        match ModelCounter::load(&dir) {
            Ok(counter) => match counter.count(&chat_unit, Clock::default()) {
                Ok(n) => {
                    group.bench_with_input(
                        BenchmarkId::new("guard_chat_template_and_count", n),
                        &chat_unit,
                        |b, u| b.iter(|| counter.count(u, Clock::default()).unwrap()),
                    );
                }
                Err(e) => eprintln!("{name}: no chat benchmark, the guard refuses the chat: {e}"),
            },
            Err(e) => eprintln!("{name}: no chat benchmark, the model does not load: {e}"),
        }
        // The same chat where the server's release is not known: counted as
        // every family builds it (issue 27: at most 1.2x one family's cost).
        let any_release = ModelFiles::load(&dir).ok().and_then(|files| {
            let server = ServerConfig {
                releases: Releases::any(),
                ..ServerConfig::default()
            };
            ModelCounter::for_server(Arc::new(files), Arc::new(server)).ok()
        });
        if let Some(counter) = any_release {
            if let Ok(n) = counter.count(&chat_unit, Clock::default()) {
                group.bench_with_input(
                    BenchmarkId::new("guard_chat_template_and_count_any_release", n),
                    &chat_unit,
                    |b, u| b.iter(|| counter.count(u, Clock::default()).unwrap()),
                );
            }
        }
        group.finish();
    }
}

/// Rendering alone (SGLang's preprocessing and the chat template, no
/// tokenizing) of one user message of about 1k, 32k and 600k tokens, per
/// fixture with a chat template: the cost that must stay linear in the
/// prompt (issue 31). The bytes per token of `prose` are about 3.3 on these
/// tokenizers; each row's id is the message's size in bytes.
fn rendering(c: &mut Criterion) {
    let Some(root) = shared_tokenizers() else {
        return;
    };
    let sizes: &[usize] = if measuring() {
        &[3_300, 105_000, 2_000_000]
    } else {
        &[3_300]
    };
    let bodies: Vec<(usize, serde_json::Value)> = sizes
        .iter()
        .map(|&n| {
            let body = serde_json::json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": prose(n)},
                ],
            });
            (n, body)
        })
        .collect();
    for dir in fixtures(&root) {
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let Ok(counter) = ModelCounter::load(&dir) else {
            continue;
        };
        if counter.render_chat(&bodies[0].1, Clock::default()).is_err() {
            eprintln!("{name}: no render benchmark, the chat does not render");
            continue;
        }
        // A fixture with only a template (glm-4.5) has no bound to take.
        let first = Unit::Chat(Arc::new(bodies[0].1.clone()));
        let bounds = match counter.decide_by_bound(&first, Clock::default(), 681_280) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("{name}: no bound decision benchmark: {e}");
                false
            }
        };
        let mut group = c.benchmark_group(format!("render/{name}"));
        if measuring() {
            group
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
        }
        for (n, body) in &bodies {
            group.throughput(Throughput::Bytes(*n as u64));
            group.bench_with_input(BenchmarkId::new("render_chat", n), body, |b, body| {
                b.iter(|| counter.render_chat(body, Clock::default()).unwrap())
            });
            // What the guard does with every chat it admits untokenized:
            // the bound decision, under the benchmarks' 681,280-token limit.
            if !bounds {
                continue;
            }
            let unit = Unit::Chat(Arc::new(body.clone()));
            group.bench_with_input(BenchmarkId::new("decide_by_bound", n), &unit, |b, unit| {
                b.iter(|| {
                    counter
                        .decide_by_bound(unit, Clock::default(), 681_280)
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, counting, rendering);
criterion_main!(benches);
