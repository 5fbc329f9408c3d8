//! Timings of the counting paths on qwen2.5 (not assertions: speed is shown,
//! not tested). Run with
//! `cargo test -p prefill-guard-count --release --test count -- counting_speed:: --ignored --nocapture`.

use crate::shared;

use std::time::{Duration, Instant};

use prefill_guard_count::TextTokenizer;

/// Deterministic varied text: prose, code, numbers, CJK, emoji, whitespace runs.
fn varied_text(bytes: usize, ascii_only: bool) -> String {
    const WORDS: &[&str] = &[
        "the",
        "guard",
        "counts",
        "every",
        "prompt",
        "exactly",
        "as",
        "SGLang",
        "would",
        "and",
        "refuses",
        "those",
        "that",
        "cannot",
        "fit",
        "prefill",
        "pool",
        "tokenizer",
        "Hello,",
        "world.",
        "fn",
        "main()",
        "{",
        "}",
        "let",
        "x",
        "=",
        "42;",
        "3.14159",
        "2026-12-02",
        "中文文本",
        "日本語",
        "한국어",
        "😀",
        "naïve",
        "café",
        "Zürich",
        "über",
        "résumé",
        "\n",
        "\n\n",
        "    ",
        "\t",
        "https://example.com/a/b?c=d",
        "<div>",
        "</div>",
        "λ",
        "Σ",
        "∀x",
    ];
    let mut s = String::with_capacity(bytes + 64);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    while s.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let w = WORDS[(state % WORDS.len() as u64) as usize];
        if ascii_only && !w.is_ascii() {
            continue;
        }
        s.push_str(w);
        if !w.ends_with('\n') && !state.is_multiple_of(5) {
            s.push(' ');
        }
    }
    s
}

/// This process's user + system CPU time (Linux), to tell parallel work
/// from a machine too busy to run it in parallel.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// The best wall time of `runs`, and the CPU time of that run.
fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> ((Duration, Duration), T) {
    let mut best = (Duration::MAX, Duration::ZERO);
    let mut out = None;
    for _ in 0..runs {
        let (t, c) = (Instant::now(), cpu_time());
        let v = f();
        let wall = t.elapsed();
        if wall < best.0 {
            best = (wall, cpu_time().saturating_sub(c));
        }
        out = Some(v);
    }
    (best, out.unwrap())
}

fn ms(d: (Duration, Duration), base: (Duration, Duration)) -> String {
    format!(
        "{:>8.1} ms wall ({:.2}x), {:>8.1} ms cpu",
        d.0.as_secs_f64() * 1e3,
        d.0.as_secs_f64() / base.0.as_secs_f64(),
        d.1.as_secs_f64() * 1e3
    )
}

#[test]
#[ignore = "timing report; run explicitly in release"]
fn qwen25_counting_paths() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let tok = TextTokenizer::load(&shared.join("tokenizers/qwen2.5"))
        .unwrap()
        .unwrap();
    let limit = 681_280;
    for (label, bytes, ascii) in [
        ("~600k tokens", 1_800_000usize, false),
        ("~1M tokens", 3_000_000, false),
        ("ASCII only", 2_000_000, true),
    ] {
        let text = varied_text(bytes, ascii);
        let (t_encode, n) = best_of(3, || tok.encode_len(&text, false).unwrap());
        let (t_seq, n_seq) = best_of(3, || tok.count_exact(&text, false).unwrap());
        let (t_par, n_par) = best_of(3, || tok.count_parallel(&text, false).unwrap());
        let (t_lim, tally) = best_of(3, || tok.count_until(&text, false, limit, true).unwrap());
        let (t_bound, bound) = best_of(3, || tok.upper_bound(&text, false));
        assert_eq!(n, n_seq);
        assert_eq!(n, n_par);
        println!(
            "{label}: {} bytes, {n} tokens, {} threads\n  \
             tokenizers encode (1 thread): {}\n  \
             pipeline, sequential:         {}\n  \
             pipeline, parallel:           {}\n  \
             parallel, limit {limit}:   {} -> {} tokens, complete={}\n  \
             upper bound:                  {} -> {:?}",
            text.len(),
            prefill_guard_count::fast::pool_threads(),
            ms(t_encode, t_encode),
            ms(t_seq, t_encode),
            ms(t_par, t_encode),
            ms(t_lim, t_encode),
            tally.tokens,
            tally.complete,
            ms(t_bound, t_encode),
            bound,
        );
    }
}
