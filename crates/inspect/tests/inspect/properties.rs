//! Property tests for the two parsers a bypass would target: the request-path
//! canonicaliser and the strict JSON reader.
//!
//! Paths: never a panic; a canonical path is a fixed point, holds no `//`, no
//! `.`/`..` segment, no `%`, `;`, `?`, `#`, `\` or control character, and no
//! trailing slash.
//!
//! JSON: never a panic; a document with a duplicate key at any depth (however
//! the key is spelled) is refused; every accepted document reads the same to
//! the guard and to a "last duplicate wins" reader with Python `json`'s
//! semantics (serde_json's own `Value`), and re-serialising it
//! (`json::canonical`) changes nothing a reader can see. So no body the guard
//! reads as one document and SGLang reads as another is ever forwarded. The
//! request path's one-pass reader (`read_strict`) gives serde_json's verdict
//! on every body these build: the same tree or the same refusal, and
//! canonical bytes that are `canonical` of that tree.

use http::Uri;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

use prefill_guard_inspect::json::{canonical, parse_reference, parse_strict, read_strict};
use prefill_guard_inspect::path::canonical_path;
use prefill_guard_inspect::Refusal;

// === paths ===

/// Pieces attackers use in paths, plus ordinary ones.
fn path_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/".to_string()),
        Just("//".to_string()),
        Just(".".to_string()),
        Just("..".to_string()),
        Just("%2F".to_string()),
        Just("%2f".to_string()),
        Just("%2e".to_string()),
        Just("%2E%2E".to_string()),
        Just("%25".to_string()),
        Just("%252F".to_string()),
        Just("%00".to_string()),
        Just("%ff".to_string()),
        Just("%c3%a9".to_string()),
        Just("%5C".to_string()),
        Just("%3B".to_string()),
        Just("%3F".to_string()),
        Just("%23".to_string()),
        Just("%20".to_string()),
        Just("%".to_string()),
        Just("%6".to_string()),
        Just(";x=1".to_string()),
        Just("?q=1".to_string()),
        Just("v1".to_string()),
        Just("chat".to_string()),
        Just("completions".to_string()),
        Just("generate".to_string()),
        Just("%63hat".to_string()),
        "[a-zA-Z0-9_.~-]{1,4}",
        "[ -~]{1,3}",
    ]
}

fn path_target() -> impl Strategy<Value = String> {
    prop::collection::vec(path_piece(), 0..10).prop_map(|p| format!("/{}", p.concat()))
}

/// Characters a canonical (decoded) path may hold that a URI must escape.
const PATH_ESCAPES: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'|')
    .add(b'\\')
    .add(b'^')
    .add(b'[')
    .add(b']');

fn check_canonical(c: &str) -> Result<(), TestCaseError> {
    prop_assert!(c.starts_with('/'), "{c:?}");
    prop_assert!(!c.contains("//"), "{c:?}");
    prop_assert!(c == "/" || !c.ends_with('/'), "{c:?}");
    for bad in ['%', ';', '?', '#', '\\'] {
        prop_assert!(!c.contains(bad), "{c:?} holds {bad:?}");
    }
    prop_assert!(!c.chars().any(char::is_control), "{c:?}");
    prop_assert!(
        !c.split('/').any(|s| s == "." || s == ".."),
        "{c:?} has a dot segment"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn canonical_paths_are_clean_fixed_points(target in path_target()) {
        let Ok(uri) = target.parse::<Uri>() else { return Ok(()) };
        let Ok(c) = canonical_path(&uri) else { return Ok(()) };
        check_canonical(&c)?;
        // Written back as a URI (escaping what must be escaped), it canonicalises to itself.
        let again: Uri = utf8_percent_encode(&c, PATH_ESCAPES).to_string().parse().unwrap();
        prop_assert_eq!(canonical_path(&again).unwrap(), c.clone());
        if let Ok(direct) = c.parse::<Uri>() {
            prop_assert_eq!(canonical_path(&direct).unwrap(), c);
        }
    }

    #[test]
    fn canonical_path_never_panics_on_any_target(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(uri) = Uri::from_maybe_shared(bytes::Bytes::from(bytes)) {
            if let Ok(c) = canonical_path(&uri) {
                check_canonical(&c)?;
            }
        }
    }

    #[test]
    fn refused_spellings_stay_refused_wherever_they_appear(
        prefix in path_target(),
        bad in prop_oneof![Just("//"), Just("/./"), Just("/../"), Just("/%2e/"), Just("/%2E%2E/"), Just(";"), Just("%3B"), Just("%00"), Just("%25"), Just("%5C")],
        suffix in "[a-z]{0,3}",
    ) {
        // After a `?` or `#` the piece is a query or fragment, not the path:
        // keep the prefix before it (cutting, not rejecting, so no run of
        // any length trips proptest's reject limit).
        let prefix = &prefix[..prefix.find(['?', '#']).unwrap_or(prefix.len())];
        let target = format!("{prefix}{bad}{suffix}");
        if let Ok(uri) = target.parse::<Uri>() {
            // A trailing `//` or `/./` could only be a trailing slash; everything else is refused.
            let refused = canonical_path(&uri).is_err();
            let is_trailing_slash = bad.ends_with('/') && suffix.is_empty() && bad.len() <= 2;
            prop_assert!(refused || is_trailing_slash, "{target:?} was accepted");
        }
    }
}

// === JSON ===

/// Small JSON trees with awkward strings and numbers; object keys are unique.
fn json_value() -> impl Strategy<Value = Value> {
    let string = prop::collection::vec(
        prop_oneof![
            Just('a'),
            Just('\u{0}'),
            Just('\u{1f}'),
            Just('"'),
            Just('\\'),
            Just('/'),
            Just('\u{7f}'),
            Just('é'),
            Just('\u{2028}'),
            Just('\u{feff}'),
            Just('😀'),
            Just('\u{ffff}'),
            any::<char>(),
        ],
        // Past 16 characters: `canonical` scans strings in 16-byte blocks.
        0..24,
    )
    .prop_map(|c| c.into_iter().collect::<String>());
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Small integers and integral floats: `0` and `0.0` are different
        // documents (int and float to Python too), and both are common.
        (-1000i64..1000).prop_map(Value::from),
        (-1000i64..1000)
            .prop_filter_map("finite", |i| Number::from_f64(i as f64).map(Value::Number)),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        string.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((string.clone(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A tiny deterministic generator for spelling choices.
struct Spell(u64);

impl Spell {
    fn pick(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Writes `v` as JSON with randomly chosen (valid) spellings: whitespace,
/// `\uXXXX` escapes (surrogate pairs above the BMP), `\/`, exponent forms.
/// `dup`: the index (in visiting order) of the object that gets one of its
/// keys a second time, spelled differently.
fn write(v: &Value, s: &mut Spell, out: &mut String, dup: &mut Option<usize>, seen: &mut usize) {
    ws(s, out);
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, s, out),
        Value::String(t) => write_string(t, s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, s, out, dup, seen);
            }
            ws(s, out);
            out.push(']');
        }
        Value::Object(map) => {
            let me = *seen;
            *seen += 1;
            out.push('{');
            let mut first = true;
            let mut member = |k: &str,
                              x: &Value,
                              s: &mut Spell,
                              out: &mut String,
                              dup: &mut Option<usize>,
                              seen: &mut usize| {
                if !first {
                    out.push(',');
                }
                first = false;
                ws(s, out);
                write_string(k, s, out);
                ws(s, out);
                out.push(':');
                write(x, s, out, dup, seen);
            };
            for (k, x) in map {
                member(k, x, s, out, dup, seen);
            }
            if *dup == Some(me) {
                *dup = None;
                match map.iter().nth(s.pick(map.len() as u64) as usize) {
                    Some((k, x)) => member(k, x, s, out, dup, seen),
                    None => {
                        member("k", &Value::Null, s, out, dup, seen);
                        member("k", &Value::Null, s, out, dup, seen);
                    }
                }
            }
            ws(s, out);
            out.push('}');
        }
    }
    ws(s, out);
}

fn ws(s: &mut Spell, out: &mut String) {
    for _ in 0..s.pick(3) {
        out.push([' ', '\t', '\n', '\r'][s.pick(4) as usize]);
    }
}

fn write_number(n: &Number, s: &mut Spell, out: &mut String) {
    match n.as_f64() {
        // An integral float as 12.0e0 or 1.2E+1: the same float to both
        // readers. (An integer never gets these spellings: `12.0e0` is a
        // float, a different document, to Python as to serde_json.)
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < (1u64 << 50) as f64 => {
            let (sign, a) = (if f < 0.0 { "-" } else { "" }, f.abs() as u64);
            match s.pick(3) {
                0 => out.push_str(&format!("{sign}{a}.0e0")),
                1 => out.push_str(&format!("{sign}{}.{}E+1", a / 10, a % 10)),
                _ => out.push_str(&n.to_string()),
            }
        }
        _ => out.push_str(&n.to_string()),
    }
}

fn write_string(t: &str, s: &mut Spell, out: &mut String) {
    out.push('"');
    for c in t.chars() {
        let escape = s.pick(3) == 0;
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if escape => out.push_str("\\/"),
            '\n' if !escape => out.push_str("\\n"),
            c if (c as u32) < 0x20 || escape => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn objects(v: &Value) -> usize {
    match v {
        Value::Array(a) => a.iter().map(objects).sum(),
        Value::Object(m) => 1 + m.values().map(objects).sum::<usize>(),
        _ => 0,
    }
}

/// The guard's reading and the reference reading of an accepted body agree,
/// and so does the reading of what the guard forwards.
fn agree(body: &[u8]) -> Result<(), TestCaseError> {
    same_as_reference(body)?;
    let Ok(guard) = parse_strict(body) else {
        return Ok(());
    };
    let python: Value = serde_json::from_slice(body).map_err(|e| {
        TestCaseError::fail(format!(
            "the guard accepted what the reference refuses: {e}"
        ))
    })?;
    prop_assert_eq!(&guard, &python);
    // What the guard forwards: the reader's canonical bytes.
    let forwarded = read_strict(&bytes::Bytes::copy_from_slice(body))
        .unwrap()
        .canonical;
    prop_assert_eq!(parse_strict(&forwarded).unwrap(), guard.clone());
    let upstream: Value = serde_json::from_slice(&forwarded).unwrap();
    prop_assert_eq!(upstream, guard);
    Ok(())
}

/// The request path's one-pass reader and serde_json (the reference) give
/// one verdict: the same tree, or the same refusal; and its canonical bytes
/// are `canonical` of that tree.
fn same_as_reference(body: &[u8]) -> Result<(), TestCaseError> {
    let fast = read_strict(&bytes::Bytes::copy_from_slice(body));
    match (parse_reference(body), fast) {
        (Ok(reference), Ok(strict)) => {
            prop_assert_eq!(&strict.value, &reference);
            prop_assert_eq!(strict.canonical.to_vec(), canonical(&reference, 0).to_vec());
            prop_assert_eq!(parse_strict(body).ok(), Some(reference));
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
        (reference, fast) => prop_assert!(false, "reference {reference:?}, reader {fast:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn parse_strict_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_strict(&bytes);
        agree(&bytes)?;
    }

    #[test]
    fn every_spelling_of_a_document_reads_as_that_document(v in json_value(), seed in any::<u64>()) {
        let mut text = String::new();
        write(&v, &mut Spell(seed | 1), &mut text, &mut None, &mut 0);
        let got = parse_strict(text.as_bytes());
        prop_assert!(got.is_ok(), "{text:?}: {got:?}");
        prop_assert_eq!(got.unwrap(), v);
        agree(text.as_bytes())?;
    }

    /// Byte for byte serde_json's serialisation, whatever the strings hold.
    #[test]
    fn canonical_is_serde_jsons_serialisation(v in json_value()) {
        prop_assert_eq!(canonical(&v, 0).to_vec(), serde_json::to_vec(&v).unwrap());
    }

    #[test]
    fn a_duplicate_key_at_any_depth_is_refused(v in json_value(), seed in any::<u64>(), at in any::<usize>()) {
        let mut s = Spell(seed | 1);
        let n = objects(&v);
        let (doc, target) = if n == 0 {
            (Value::Object(Map::from_iter([("x".to_string(), v)])), 0)
        } else {
            (v, at % n)
        };
        let mut text = String::new();
        write(&doc, &mut s, &mut text, &mut Some(target), &mut 0);
        match parse_strict(text.as_bytes()) {
            Err(Refusal::DuplicateKey(_)) => {}
            other => prop_assert!(false, "{text:?} gave {other:?}"),
        }
    }

    #[test]
    fn mutated_documents_are_refused_or_read_alike(
        v in json_value(),
        seed in any::<u64>(),
        edits in prop::collection::vec((any::<usize>(), prop_oneof![
            Just(b'"'), Just(b'\\'), Just(b'{'), Just(b'}'), Just(b'['), Just(b','), Just(b':'),
            Just(b'u'), Just(b'0'), Just(b'd'), Just(b'8'), Just(b'e'), Just(b'-'), Just(b' '),
            Just(0xef), Just(0xbb), Just(0xbf), Just(0xed), Just(0xa0), Just(0x80), any::<u8>(),
        ], 0u8..3), 1..4),
    ) {
        let mut text = String::new();
        write(&v, &mut Spell(seed | 1), &mut text, &mut None, &mut 0);
        let mut bytes = text.into_bytes();
        for (at, byte, op) in edits {
            let i = if bytes.is_empty() { 0 } else { at % bytes.len() };
            match op {
                0 if !bytes.is_empty() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if !bytes.is_empty() => { bytes.remove(i); }
                _ => bytes.push(byte),
            }
        }
        agree(&bytes)?;
    }
}

#[test]
fn known_differentials_are_refused() {
    for body in [
        &br#"{"messages":[],"messages":[{"role":"user","content":"x"}]}"#[..],
        br#"{"messages":[],"\u006dessages":[1]}"#,
        br#"{"a":{"b":[{"c":1,"c\u0000":2,"c":3}]}}"#,
        br#"{"text":"\ud800"}"#,
        b"\xef\xbb\xbf{}",
        br#"{"a":NaN}"#,
        br#"{"a":1} {"a":2}"#,
    ] {
        assert!(
            parse_strict(body).is_err(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}
