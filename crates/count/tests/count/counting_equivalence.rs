//! The fast counting paths against `tokenizers`' own `encode`, on every
//! tokenizer fixture in `shared/tokenizers` and random Unicode text:
//!
//! * the pipeline count (no `Encoding`) equals `encode(text, add).len()`,
//!   for both `add_special_tokens` values;
//! * the parallel count equals the sequential one, whatever the chunking;
//! * counting with a limit is exact below it and a lower bound at or above it;
//! * the upper bound, where a tokenizer has one, is never below the count;
//! * the NFC facts the bound's argument rests on hold for every code point.

use crate::shared;

use std::sync::OnceLock;

use prefill_guard_count::{Chunking, TextTokenizer};
use proptest::prelude::*;
use tokenizers::normalizers::unicode::{NFC, NFD};
use tokenizers::{NormalizedString, Normalizer};

struct Fixture {
    name: String,
    tok: TextTokenizer,
    /// Added-token strings of this fixture, spliced into random text.
    specials: Vec<String>,
}

/// Every fixture with a `tokenizer.json` (template-only ones, such as GLM's,
/// have nothing to count with). `None` when `shared/` is absent off CI.
fn fixtures() -> Option<&'static [Fixture]> {
    static CELL: OnceLock<Option<Vec<Fixture>>> = OnceLock::new();
    CELL.get_or_init(|| {
        let dir = shared::shared_dir()?.join("tokenizers");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("tokenizer.json").is_file())
            .collect();
        names.sort();
        assert!(
            !names.is_empty(),
            "no tokenizer.json under {}",
            dir.display()
        );
        let out = names
            .iter()
            .map(|p| {
                let tok = TextTokenizer::load(p)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                    .expect("tokenizer.json present");
                let specials = tok
                    .special_tokens()
                    .iter()
                    .map(|(_, v)| v.clone())
                    .collect();
                Fixture {
                    name: p.file_name().unwrap().to_string_lossy().into_owned(),
                    tok,
                    specials,
                }
            })
            .collect();
        Some(out)
    })
    .as_deref()
}

/// Special-token spellings of the fixture families, so that every tokenizer
/// also meets the others' (as plain text) and its own.
const FOREIGN_SPECIALS: &[&str] = &[
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "<unk>",
    "<bos>",
    "<start_of_turn>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<｜begin▁of▁sentence｜>",
    "<｜User｜>",
    "[INST]",
    "[/INST]",
    "<|start|>",
    "<|channel|>",
    "<|user|>",
    "<|end|>",
];

/// Pieces chosen to stress normalizers, pre-tokenizer regexes and byte
/// fallback: whitespace runs, combining marks, NFC expansions (composition
/// exclusions, musical symbols), compatibility characters, CJK, emoji with
/// joiners, Hangul jamo, private use, non-characters, contractions, digits.
const PIECES: &[&str] = &[
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    " \n ",
    "\u{a0}",
    "\u{3000}",
    "\u{2028}",
    "\u{301}",
    "\u{308}",
    "\u{93c}",
    "e\u{301}",
    "\u{958}",
    "\u{959}",
    "\u{1d160}",
    "\u{1d15e}",
    "\u{fb2c}",
    "\u{2126}",
    "\u{212b}",
    "\u{340}",
    "\u{344}",
    "\u{f900}",
    "\u{fb01}",
    "\u{fb03}",
    "\u{fdfa}",
    "\u{130}",
    "ǅ",
    "中文",
    "日本語のテキスト",
    "한국어",
    "\u{1100}\u{1161}\u{11a8}",
    "😀",
    "👨\u{200d}👩\u{200d}👧",
    "🇫🇷",
    "\u{e000}",
    "\u{10fffd}",
    "\u{20000}",
    "\u{fffd}",
    "\u{feff}",
    "\u{200b}",
    "'s",
    "'LL",
    "don't",
    "12345",
    "3.14",
    "hello",
    "Hello",
    "WORLD",
    "fn main() {",
    "}",
    "<",
    ">",
    "|",
    "▁",
    "▁▁",
    "Ā",
    "ĠĠ",
    "Ġ",
    "ċ",
    "--",
    "...",
    "!!!",
    "\"",
    "\\",
    "\u{7f}",
    "\u{0}",
    "\u{1}",
    "ﬃ",
    "①",
    "Ⅻ",
    "ß",
    "İ",
    "ς",
    "Ω",
    "Å",
];

fn piece(specials: &'static [String]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(PIECES).prop_map(str::to_owned),
        3 => "[a-zA-Z]{1,12}",
        1 => "[0-9]{1,8}",
        1 => " {1,6}",
        1 => "[ \t\n\r]{1,6}",
        2 => any::<char>().prop_map(|c| c.to_string()),
        1 => "\\PC{1,6}",
        1 => prop::sample::select(FOREIGN_SPECIALS).prop_map(str::to_owned),
        1 => prop::sample::select(if specials.is_empty() { vec![String::new()] } else { specials.to_vec() }),
    ]
}

fn text(specials: &'static [String], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(piece(specials), 0..max).prop_map(|v| v.concat())
}

fn all_specials() -> &'static [String] {
    static CELL: OnceLock<Vec<String>> = OnceLock::new();
    CELL.get_or_init(|| {
        let mut v: Vec<String> = fixtures()
            .into_iter()
            .flatten()
            .flat_map(|f| f.specials.iter().cloned())
            .collect();
        v.sort();
        v.dedup();
        v
    })
}

/// Every property for one fixture and one text.
fn check(
    f: &Fixture,
    text: &str,
    chunk: usize,
    part_bytes: usize,
    limit_frac: f64,
) -> Result<(), TestCaseError> {
    for add in [false, true] {
        let reference = f.tok.encode_len(text, add).unwrap();
        let fast = f.tok.count_exact(text, add).unwrap();
        prop_assert_eq!(
            fast,
            reference,
            "{}: pipeline vs encode, add={}",
            f.name,
            add
        );
        // Parallel paths forced onto short texts: split chunks of `chunk`
        // splits, and text cut into parts of about `part_bytes`.
        let chunking = Chunking {
            min_splits: 0,
            chunk_splits: chunk,
            min_text_bytes: 0,
            part_bytes,
        };
        let par = f
            .tok
            .count_chunked(text, add, None, Some(chunking))
            .unwrap();
        prop_assert!(par.complete);
        prop_assert_eq!(par.tokens, reference, "{}: parallel, add={}", f.name, add);
        prop_assert_eq!(f.tok.count_parallel(text, add).unwrap(), reference);
        if let Some(bound) = f.tok.upper_bound(text, add) {
            prop_assert!(
                bound >= reference,
                "{}: bound {} < count {} (add={})",
                f.name,
                bound,
                reference,
                add
            );
        }
        // A limit around the count: below, at and above it.
        let limit = ((reference as f64 * limit_frac) as usize).max(1);
        for chunking in [None, Some(chunking)] {
            let t = f
                .tok
                .count_chunked(text, add, Some(limit), chunking)
                .unwrap();
            if t.complete {
                prop_assert_eq!(t.tokens, reference, "{}: complete count", f.name);
            } else {
                prop_assert!(
                    t.tokens >= limit && t.tokens <= reference,
                    "{}: stopped at {} for limit {} (count {})",
                    f.name,
                    t.tokens,
                    limit,
                    reference
                );
            }
            if reference < limit {
                prop_assert!(t.complete, "{}: stopped below the limit", f.name);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn fast_parallel_and_bound_agree_with_encode(
        text in text(all_specials(), 40),
        chunk in 1usize..8,
        part_bytes in 1usize..40,
        limit_frac in 0.0f64..1.5,
    ) {
        let Some(fixtures) = fixtures() else { return Ok(()) };
        for f in fixtures {
            check(f, &text, chunk, part_bytes, limit_frac)?;
        }
    }
}

proptest! {
    // Long texts: thousands of splits, past the default parallel threshold.
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    #[test]
    fn long_texts_cross_the_parallel_threshold(
        unit in text(all_specials(), 30),
        repeats in 200usize..600,
        chunk in 16usize..3000,
        part_bytes in 64usize..20_000,
        limit_frac in 0.2f64..1.2,
    ) {
        let Some(fixtures) = fixtures() else { return Ok(()) };
        let text = unit.repeat(repeats) + &"word ".repeat(5000);
        for f in fixtures {
            check(f, &text, chunk, part_bytes, limit_frac)?;
        }
    }
}

proptest! {
    // Text dense in `letter space letter` cuts, with noise on both sides of
    // each cut (marks, specials, whitespace runs), through the text-cut path.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn text_cuts_between_words_change_nothing(
        words in prop::collection::vec(("[a-zA-Z]{1,3}", text(all_specials(), 4), "[a-zA-Z]{1,3}"), 1..30),
        part_bytes in 1usize..24,
    ) {
        let Some(fixtures) = fixtures() else { return Ok(()) };
        let text: String = words
            .iter()
            .map(|(a, mid, b)| format!("{a} {b}{mid}{a} {b}"))
            .collect::<Vec<_>>()
            .join(" ");
        for f in fixtures {
            check(f, &text, 3, part_bytes, 0.7)?;
        }
    }
}

/// The bound on text built only from what makes it weakest: NFC expansions,
/// spaces (a replacement grows each), characters missing from vocabularies
/// (byte fallback emits one token per byte).
#[test]
fn bound_holds_on_adversarial_text() {
    let Some(fixtures) = fixtures() else { return };
    let worst = [
        "\u{958}".repeat(2000),
        "\u{1d160}".repeat(2000),
        " ".repeat(5000),
        " a".repeat(3000),
        "\u{10fffd}\u{e000}\u{20000}".repeat(700),
        "\u{fb2c} \u{958} \u{1d15e}".repeat(800),
        "<s> <s>".repeat(500),
        String::new(),
        " ".into(),
    ];
    for f in fixtures {
        for text in &worst {
            for add in [false, true] {
                let exact = f.tok.encode_len(text, add).unwrap();
                if let Some(bound) = f.tok.upper_bound(text, add) {
                    assert!(bound >= exact, "{}: bound {bound} < {exact}", f.name);
                }
            }
        }
    }
}

/// Which fixtures get a bound, and the reason of those that do not, so that a
/// change in the derivation is seen.
#[test]
fn every_fixture_has_a_derived_rule() {
    let Some(fixtures) = fixtures() else { return };
    for f in fixtures {
        println!(
            "{}: bound {:?}; text cut for parallel counting: {:?}",
            f.name,
            f.tok.bound_rule(),
            f.tok.text_cuts()
        );
    }
    let bounded: Vec<&str> = fixtures
        .iter()
        .filter(|f| f.tok.bound_rule().has_bound())
        .map(|f| f.name.as_str())
        .collect();
    for name in ["qwen2.5", "qwen3", "llama-3.2"] {
        if fixtures.iter().any(|f| f.name == name) {
            assert!(
                bounded.contains(&name),
                "{name} should have a bound: {bounded:?}"
            );
        }
    }
}

fn normalized(n: &impl Normalizer, s: &str) -> String {
    let mut ns = NormalizedString::from(s);
    n.normalize(&mut ns).unwrap();
    ns.get().to_owned()
}

/// The two per-character facts `bound.rs` derives the NFC bound from, over
/// every code point, with the normalizer tokenizers itself runs:
/// NFD(c) has at most 3× the bytes of c (ASCII decomposes to itself), and an
/// NFC-stable character (the only kind NFC output holds) has no more bytes
/// than its canonical decomposition (so composing never grows text).
#[test]
fn nfc_expansion_facts_hold_for_every_code_point() {
    let mut worst = 0f64;
    for c in (0u32..=0x10FFFF).filter_map(char::from_u32) {
        let s = c.to_string();
        let d = normalized(&NFD, &s);
        if c.is_ascii() {
            assert_eq!(d, s);
        }
        assert!(
            d.len() <= 3 * s.len(),
            "NFD(U+{:04X}) grows more than 3×",
            c as u32
        );
        worst = worst.max(d.len() as f64 / s.len() as f64);
        // Characters NFC output can hold are NFC-stable; none has more bytes
        // than its decomposition (singletons like U+2126 are not stable).
        if normalized(&NFC, &s) == s {
            assert!(
                s.len() <= d.len(),
                "U+{:04X} has more bytes than its decomposition",
                c as u32
            );
        }
    }
    println!("largest NFD expansion: {worst}×");
}

/// Counters (tokenizer + chat template) of the fixtures that can count chat.
fn counters() -> Option<&'static [(String, prefill_guard_count::ModelCounter)]> {
    static CELL: OnceLock<Option<Vec<(String, prefill_guard_count::ModelCounter)>>> =
        OnceLock::new();
    CELL.get_or_init(|| {
        let dir = shared::shared_dir()?.join("tokenizers");
        let mut out = Vec::new();
        for f in fixtures()? {
            if let Ok(c) = prefill_guard_count::ModelCounter::load(&dir.join(&f.name)) {
                out.push((f.name.clone(), c));
            }
        }
        Some(out)
    })
    .as_deref()
}

proptest! {
    // Whole chat requests (template, assistant prefix, both encode rules):
    // a bound decision is never below the exact count, a stopped count is a
    // lower bound at or above the limit, and an exact one is the count.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn chat_decisions_compose_soundly(
        user in text(all_specials(), 20),
        assistant in text(all_specials(), 8),
        prefix in any::<bool>(),
        limit_frac in 0.0f64..2.0,
        exact_only in any::<bool>(),
    ) {
        use prefill_guard_count::{Clock, CountMethod, CountPolicy, Unit};
        let Some(counters) = counters() else { return Ok(()) };
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": user}]});
        if prefix {
            body["messages"].as_array_mut().unwrap()
                .push(serde_json::json!({"role": "assistant", "content": assistant}));
            body["continue_final_message"] = serde_json::json!(true);
            body["add_generation_prompt"] = serde_json::json!(false);
        }
        let unit = Unit::Chat(std::sync::Arc::new(body));
        for (name, counter) in counters {
            let Ok(exact) = counter.count(&unit, Clock::default()) else { continue };
            let limit = ((exact as f64 * limit_frac) as usize).max(1);
            for parallel in [false, true] {
                let policy = CountPolicy { limit: Some(limit), exact_only, parallel, cache: None };
                let c = counter.count_with(&unit, Clock::default(), policy).unwrap();
                match c.method {
                    CountMethod::Exact => prop_assert_eq!(c.tokens, exact, "{}", name),
                    CountMethod::Bound => {
                        prop_assert!(!exact_only);
                        prop_assert!(c.tokens >= exact && c.tokens < limit, "{}: bound {} exact {}", name, c.tokens, exact);
                    }
                    CountMethod::EarlyExit => prop_assert!(
                        c.tokens >= limit && c.tokens <= exact,
                        "{}: stopped at {} for limit {} (exact {})", name, c.tokens, limit, exact
                    ),
                }
                // The verdict is the exact count's.
                prop_assert_eq!(c.tokens >= limit, exact >= limit, "{}", name);
            }
        }
    }
}

/// The chat property above is not vacuous: most fixtures count chat.
#[test]
fn fixtures_count_chat() {
    use prefill_guard_count::{Clock, Unit};
    let Some(counters) = counters() else { return };
    let unit = Unit::Chat(std::sync::Arc::new(
        serde_json::json!({"messages": [{"role": "user", "content": "hello"}]}),
    ));
    let counting: Vec<&str> = counters
        .iter()
        .filter(|(_, c)| c.count(&unit, Clock::default()).is_ok())
        .map(|(n, _)| n.as_str())
        .collect();
    println!("fixtures counting chat: {counting:?}");
    assert!(counting.len() >= 3, "{counting:?}");
}
