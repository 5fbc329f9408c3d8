//! Timings of the counting paths on qwen2.5 (not assertions: speed is shown,
//! not tested). Run with
//! `cargo test --release --test counting_speed -- --ignored --nocapture`.

#[path = "common/shared.rs"]
mod shared;

use std::time::{Duration, Instant};

use prefill_guard::count::TextTokenizer;

/// Deterministic varied text: prose, code, numbers, CJK, emoji, whitespace runs.
fn varied_text(bytes: usize) -> String {
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
        s.push_str(w);
        if !w.ends_with('\n') && state % 5 != 0 {
            s.push(' ');
        }
    }
    s
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        out = Some(v);
    }
    (best, out.unwrap())
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
    for (label, bytes) in [("~600k tokens", 2_500_000usize), ("~1M tokens", 4_200_000)] {
        let text = varied_text(bytes);
        let (t_encode, n) = best_of(3, || tok.encode_len(&text, false).unwrap());
        let (t_seq, n_seq) = best_of(3, || tok.count_exact(&text, false).unwrap());
        let (t_par, n_par) = best_of(3, || tok.count_parallel(&text, false).unwrap());
        let (t_lim, tally) = best_of(3, || tok.count_until(&text, false, limit, true).unwrap());
        let (t_bound, bound) = best_of(3, || tok.upper_bound(&text, false));
        assert_eq!(n, n_seq);
        assert_eq!(n, n_par);
        println!(
            "{label}: {} bytes, {n} tokens, {} threads\n  \
             tokenizers encode (1 thread): {:>8.1} ms\n  \
             pipeline, sequential:         {:>8.1} ms ({:.2}x)\n  \
             pipeline, parallel:           {:>8.1} ms ({:.2}x)\n  \
             parallel, limit {limit}:     {:>8.1} ms ({:.2}x) -> {} tokens, complete={}\n  \
             upper bound:                  {:>8.3} ms -> {:?}",
            text.len(),
            prefill_guard::count::fast::pool_threads(),
            t_encode.as_secs_f64() * 1e3,
            t_seq.as_secs_f64() * 1e3,
            t_seq.as_secs_f64() / t_encode.as_secs_f64(),
            t_par.as_secs_f64() * 1e3,
            t_par.as_secs_f64() / t_encode.as_secs_f64(),
            t_lim.as_secs_f64() * 1e3,
            t_lim.as_secs_f64() / t_encode.as_secs_f64(),
            tally.tokens,
            tally.complete,
            t_bound.as_secs_f64() * 1e3,
            bound,
        );
    }
}
