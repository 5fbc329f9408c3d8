//! The strict JSON reader on the bodies the guard reads most: a long chat
//! (one ~139 kB message, as the 32k workload of bench/run.sh), the same chat
//! spelled compactly, 600k token ids, and 200k floats (`input_embeds`-like).
//! Each body is read two ways side by side: the request path's one pass
//! (`read_strict`: tree and canonical bytes) and serde_json, the reference,
//! followed by `canonical` (what the request path did before the one pass).
//!
//! The `floor` group times, over the 32k chat, the passes any reader that
//! checks every byte and counts its bound must make, each alone: UTF-8
//! validation, the search for the string's end, the control check, one
//! copy of the text into a template string and the bound's tally. Their
//! sum is the least a 32k chat's bytes cost, before the part of the bound
//! decision that does not grow with the prompt; BENCHMARKS.md (run R, issue
//! 31) holds it against `one pass` and the guard's measured inspection.
//!
//! `cargo bench -p prefill-guard-inspect --bench json` measures; `cargo test
//! --all-targets` runs each benchmark once.
#![allow(
    clippy::unwrap_used,
    reason = "a benchmark over bodies it builds itself: one that does not parse is a failed run"
)]

use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prefill_guard_count::BoundRule;
use prefill_guard_inspect::json::{canonical, has_control, parse_reference, read_strict};

/// Deterministic English-like prose with some non-ASCII and paragraph
/// breaks (escaped as `\n` in JSON), about `len` bytes.
fn prose(len: usize) -> String {
    const WORDS: &[&str] = &[
        "the", "model", "counts", "every", "token", "of", "a", "prompt", "before", "it", "reaches",
        "prefill", "café", "naïve", "Zürich", "€42", "and", "so", "on", "with",
    ];
    words(WORDS, len, " ", (97, ".\n\n"))
}

/// Chinese prose, about `len` bytes of UTF-8 (three a character), with a
/// full stop and a paragraph break now and then.
fn cjk(len: usize) -> String {
    const WORDS: &[&str] = &[
        "模型",
        "计算",
        "每个",
        "提示",
        "的",
        "令牌",
        "服务器",
        "之前",
        "请求",
        "我们",
    ];
    words(WORDS, len, "", (31, "。\n"))
}

/// Words of `from` drawn by a fixed xorshift until `len` bytes, each followed by
/// `between`, or by `stop.1` one time in about `stop.0`.
fn words(from: &[&str], len: usize, between: &str, stop: (u32, &str)) -> String {
    let mut out = String::with_capacity(len + 16);
    let mut state = 0x2545_f491_u32;
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        out.push_str(from[state as usize % from.len()]);
        out.push_str(if state.is_multiple_of(stop.0) {
            stop.1
        } else {
            between
        });
    }
    out
}

/// `value` as Python's `json.dumps` writes it by default (the `requests`
/// library, httpx before 0.28): `, ` and `: `, and every non-ASCII
/// character a `\uXXXX` escape, so the reader decodes each one and the
/// canonical bytes are written apart.
fn python_dumps(value: &serde_json::Value) -> String {
    let compact = serde_json::to_string(value).unwrap();
    let mut out = String::with_capacity(compact.len() * 2);
    let (mut in_string, mut escaped) = (false, false);
    for c in compact.chars() {
        if !c.is_ascii() {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
            continue;
        }
        out.push(c);
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ',' | ':' if !in_string => out.push(' '),
            _ => {}
        }
    }
    let same: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(&same, value, "the escaped body is the same value");
    out
}

/// The 32k chat: a system prompt and one ~139 kB user message of prose.
fn long_chat(text: &str) -> serde_json::Value {
    serde_json::json!({
        "model": "qwen2.5",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": text},
        ],
        "max_tokens": 16,
    })
}

fn bodies() -> Vec<(&'static str, Bytes)> {
    let chat = long_chat(&prose(139_000));
    // Not compact: a newline after every item and `: ` after every key, so
    // the canonical bytes are written apart.
    let spaced = {
        let compact = serde_json::to_string(&chat).unwrap();
        let value: serde_json::Value = serde_json::from_str(&compact).unwrap();
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        serde::Serialize::serialize(&value, &mut ser).unwrap();
        out
    };
    let ascii = python_dumps(&chat);
    // A Chinese prompt of the same size sent so: every character an escape.
    let cjk_chat = serde_json::json!({
        "model": "qwen2.5",
        "messages": [{"role": "user", "content": cjk(139_000)}],
        "max_tokens": 16,
    });
    let cjk_ascii = python_dumps(&cjk_chat);
    let ids: Vec<String> = (0..600_000u32)
        .map(|i| (i.wrapping_mul(7919) % 151_000).to_string())
        .collect();
    let floats: Vec<String> = (0..200_000u32)
        .map(|i| format!("{}", f64::from(i % 2000) / 997.0 - 1.0))
        .collect();
    // Many short strings, as a chat of many small text parts sends them:
    // each string's own steps (its scan, control check and copy) dominate.
    let parts: Vec<serde_json::Value> = (0..20_000u32)
        .map(|i| serde_json::json!({"type": "text", "text": format!("word {i}")}))
        .collect();
    let short = serde_json::json!({
        "model": "qwen2.5",
        "messages": [{"role": "user", "content": parts}],
    });
    vec![
        ("chat 32k, spaced", Bytes::from(spaced)),
        (
            "chat 32k, compact",
            Bytes::from(serde_json::to_vec(&chat).unwrap()),
        ),
        ("chat 32k, escaped to ASCII", Bytes::from(ascii)),
        ("chat 32k Chinese, escaped to ASCII", Bytes::from(cjk_ascii)),
        (
            "chat, 20k short parts",
            Bytes::from(serde_json::to_vec(&short).unwrap()),
        ),
        (
            "600k ids",
            Bytes::from(format!("{{\"input_ids\":[{}]}}", ids.join(","))),
        ),
        (
            "200k floats",
            Bytes::from(format!("{{\"input_embeds\":[{}]}}", floats.join(","))),
        ),
    ]
}

fn reader(c: &mut Criterion) {
    let mut group = c.benchmark_group("json");
    group.sample_size(20);
    for (name, body) in bodies() {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("one pass", name), &body, |b, body| {
            b.iter(|| read_strict(body).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json + canonical", name),
            &body,
            |b, body| {
                b.iter(|| {
                    let value = parse_reference(body).unwrap();
                    canonical(&value, body.len())
                })
            },
        );
    }
    group.finish();
}

/// The passes over the 32k chat's message that no design avoids, each
/// timed alone (their data warm, as a pass right after another finds it).
fn floor(c: &mut Criterion) {
    // The body of `one pass/chat 32k, compact`, so that its row and these
    // read the same bytes.
    let text = prose(139_000);
    let body = serde_json::to_vec(&long_chat(&text)).unwrap();
    // Where the long message's bytes start (the last `content`, after the
    // system prompt's): the quote search runs from there to its end.
    let key = br#""content":""#;
    let from = body.windows(key.len()).rposition(|w| w == key).unwrap() + key.len();
    assert!(
        body.len() - from > text.len(),
        "the search spans the message"
    );
    // qwen2.5's rule: NFC, so the tally counts non-ASCII bytes as well.
    let rule = BoundRule::Bytes {
        nfc: true,
        space_growth: 0,
        once: 0,
    };
    let mut group = c.benchmark_group("floor");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("32k chat/UTF-8 validation", |b| {
        b.iter(|| simdutf8::basic::from_utf8(std::hint::black_box(&body)).is_ok())
    });
    group.bench_function("32k chat/the string's end (memchr)", |b| {
        b.iter(|| memchr::memchr(b'"', std::hint::black_box(&body[from..])))
    });
    group.bench_function("32k chat/control check", |b| {
        b.iter(|| has_control(std::hint::black_box(text.as_bytes())))
    });
    group.bench_function("32k chat/one copy into a template string", |b| {
        b.iter(|| Arc::<str>::from(std::hint::black_box(text.as_str())))
    });
    group.bench_function("32k chat/bound tally", |b| {
        b.iter(|| rule.bound(std::hint::black_box(&text)))
    });
    group.finish();
}

criterion_group!(benches, reader, floor);
criterion_main!(benches);
