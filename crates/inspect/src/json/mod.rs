//! Strict JSON: the guard must read a body exactly as SGLang's orjson does, or
//! refuse it. Anything the two could read differently is refused: duplicate
//! keys at any depth (orjson keeps the last, smg refuses), a BOM, lone
//! surrogates, NaN/Infinity, trailing garbage. serde_json already refuses all
//! of those but duplicate keys, which `count::py::PlainValue` refuses here (the same
//! reader `json_loads` uses, so serde_json's private raw-value key is an
//! ordinary key in both).
//!
//! Two readers give that one reading. [`reader`] is the request path's: one
//! pass, which also spells the canonical bytes. serde_json with `PlainValue`
//! ([`parse_reference`]) is the reference it is held to (property tests,
//! the `json` fuzz target) and the one that explains a refusal, so that what
//! a client is told is serde_json's message whichever reader ran.

mod reader;

use bytes::Bytes;
use serde::de::DeserializeSeed;
use serde_json::Value;

use crate::Refusal;
use prefill_guard_count::py::{Duplicates, PlainValue};

use reader::Spelled;

/// A body read strictly: the tree the guard counts and the canonical bytes
/// it forwards ([`canonical`] of that tree, byte for byte).
#[derive(Debug)]
pub struct Strict {
    pub value: Value,
    pub canonical: Bytes,
}

/// Reads a request body into a `Value` (key order kept) and its canonical
/// bytes in one pass, refusing anything ambiguous. A body already in
/// canonical form (compact, escapes as serde_json writes them) is its own
/// canonical bytes, shared rather than copied.
pub fn read_strict(body: &Bytes) -> Result<Strict, Refusal> {
    match reader::read(body, true) {
        Ok((value, Some(spelled))) => Ok(Strict {
            value,
            canonical: match spelled {
                Spelled::Prefix(len) => body.slice(..len),
                Spelled::Written(bytes) => Bytes::from(bytes),
            },
        }),
        Ok((_, None)) | Err(reader::Fail) => Err(refusal(body)),
    }
}

/// Whether `bytes` hold a control character, which a JSON string may only
/// spell escaped: the reader's own check, for the `floor` rows of the
/// `json` bench (what any reader of every byte pays), not an API.
#[doc(hidden)]
pub fn has_control(bytes: &[u8]) -> bool {
    reader::has_control(bytes)
}

/// Parses a request body into a `Value` (key order kept), refusing anything ambiguous.
pub fn parse_strict(body: &[u8]) -> Result<Value, Refusal> {
    match reader::read(body, false) {
        Ok((value, _)) => Ok(value),
        Err(reader::Fail) => Err(refusal(body)),
    }
}

/// Why the request path's reader refused `body`, in serde_json's words. Should
/// serde_json accept it, the two readers disagree and neither reading can be
/// trusted: the body is refused all the same (the tests hold that this
/// never happens).
fn refusal(body: &[u8]) -> Refusal {
    match parse_reference(body) {
        Err(refusal) => refusal,
        Ok(_) => Refusal::InvalidJson(
            "the body reads differently to the guard's two JSON readers".into(),
        ),
    }
}

/// The reference reading: serde_json with the core's `PlainValue`, which
/// refuses duplicate keys. Slower than [`parse_strict`], which must accept
/// exactly what this accepts and read it to the same `Value`.
pub fn parse_reference(body: &[u8]) -> Result<Value, Refusal> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = PlainValue(Duplicates::Refuse)
        .deserialize(&mut de)
        .map_err(classify)?;
    de.end().map_err(classify)?;
    Ok(value)
}

const DUPLICATE: &str = "duplicate key ";

fn classify(e: serde_json::Error) -> Refusal {
    let text = e.to_string();
    match text.strip_prefix(DUPLICATE) {
        Some(rest) => {
            Refusal::DuplicateKey(rest.split(" at line").next().unwrap_or(rest).to_string())
        }
        None => Refusal::InvalidJson(text),
    }
}

/// The canonical bytes of a tree: what SGLang parses is then exactly the
/// tree the guard counted, whatever escapes, spacing or number spellings the
/// client used. The request path gets them from [`read_strict`], which
/// spells them as it reads and is held to this function byte for byte (the
/// property tests, the `json` fuzz target). `size_hint`: the body it was
/// parsed from, about the size of the result.
///
/// Byte for byte `serde_json::to_vec(value)` (tested below). Its string
/// writer is also the reader's, for a string the client spelled otherwise
/// (every non-ASCII string of a client that escapes to ASCII, as Python's
/// `json.dumps` does by default): serde_json escapes a byte at a time, this
/// scans a word at a time.
pub fn canonical(value: &Value, size_hint: usize) -> bytes::Bytes {
    let mut out = Vec::with_capacity(size_hint);
    write_value(&mut out, value);
    bytes::Bytes::from(out)
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// A number as serde_json writes it: its own formatting (itoa, ryu), short
/// and rare. Also the reader's, so that both spell numbers alike.
fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) {
    serde_json::to_writer(&mut *out, n).expect("writing a number to a Vec cannot fail");
}

/// A JSON string as serde_json writes it: `"` and `\\` escaped, the short
/// escapes for `\b \f \n \r \t`, `\u00xx` for other control characters,
/// everything else (DEL and non-ASCII included) as is.
fn write_string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut run = 0; // start of the bytes not yet copied
    loop {
        let at = run + first_escape(&bytes[run..]);
        out.extend_from_slice(&bytes[run..at]);
        let Some(&b) = bytes.get(at) else { break };
        push_escape(out, b);
        run = at + 1;
    }
    out.push(b'"');
}

/// The index of the first byte that needs an escape (below 0x20, `"` or
/// `\\`), or `bytes.len()`: sixteen bytes at a time, as this is most of the
/// time spent writing a body.
fn first_escape(bytes: &[u8]) -> usize {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
    // Little-endian: the lowest set bit of a mask is in its first such byte.
    let first = |mask: u64| (mask.trailing_zeros() / 8) as usize;
    let blocks = bytes.chunks_exact(16);
    let tail = blocks.remainder();
    for (n, block) in blocks.enumerate() {
        let (lo, hi) = (
            escape_mask(word(&block[..8])),
            escape_mask(word(&block[8..])),
        );
        if lo | hi != 0 {
            return n * 16 + if lo != 0 { first(lo) } else { 8 + first(hi) };
        }
    }
    let done = bytes.len() - tail.len();
    done + tail
        .iter()
        .position(|&b| matches!(b, 0x00..=0x1f | b'"' | b'\\'))
        .unwrap_or(tail.len())
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that is below 0x20, `"` or `\\`. Exact
/// up to the lowest such byte: the borrow tricks can only misreport bytes
/// above one that really matches, so the lowest set bit is always right.
fn escape_mask(w: u64) -> u64 {
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
    (below_space | zero_byte(quote) | zero_byte(backslash)) & HIGHS
}

/// Writes the escape of `b`, a control character, `"` or `\\`.
fn push_escape(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(body: &str) -> &'static str {
        parse_strict(body.as_bytes()).unwrap_err().label()
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert_eq!(
            reason(r#"{"messages":[],"messages":[{"role":"user","content":"x"}]}"#),
            "duplicate_key"
        );
        assert_eq!(
            reason(r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#),
            "duplicate_key"
        );
        assert_eq!(reason(r#"{"a":{"b":{"c":1,"c":2}}}"#), "duplicate_key");
        match parse_strict(br#"{"x":1,"x":2}"#).unwrap_err() {
            Refusal::DuplicateKey(k) => assert_eq!(k, "\"x\""),
            other => panic!("{other:?}"),
        }
        // The client reads the key once quoted, as JSON spells it.
        assert_eq!(
            parse_strict(br#"{"content":1,"content":2}"#)
                .unwrap_err()
                .to_string(),
            r#"duplicate key "content" in the JSON body"#
        );
    }

    #[test]
    fn what_orjson_refuses_is_refused() {
        assert_eq!(reason("\u{feff}{}"), "invalid_json");
        assert_eq!(reason(r#"{"a":"\ud800"}"#), "invalid_json");
        assert_eq!(reason(r#"{"a":NaN}"#), "invalid_json");
        assert_eq!(reason(r#"{"a":Infinity}"#), "invalid_json");
        assert_eq!(reason("{\"a\":\"\u{1}\"}"), "invalid_json");
        assert_eq!(reason("{} x"), "invalid_json");
        assert_eq!(reason(""), "invalid_json");
        assert!(parse_strict(b"{} \n").is_ok());
        assert!(parse_strict(br#"{"a":"\ud83d\ude00","b":"\u0000"}"#).is_ok());
    }

    #[test]
    fn canonical_keeps_order_and_meaning() {
        let v =
            parse_strict(br#"{ "z" : 1.0, "a" : "\u00e9\n", "n": 18446744073709551615 }"#).unwrap();
        assert_eq!(
            std::str::from_utf8(&canonical(&v, 0)).unwrap(),
            "{\"z\":1.0,\"a\":\"\u{e9}\\n\",\"n\":18446744073709551615}"
        );
    }

    /// The request path's reader against the reference: the same verdict,
    /// the same tree, and canonical bytes that are `canonical` of that tree.
    fn same_reading(body: &[u8]) {
        let reference = parse_reference(body);
        let fast = read_strict(&Bytes::copy_from_slice(body));
        match (&reference, &fast) {
            (Ok(v), Ok(strict)) => {
                assert_eq!(&strict.value, v, "{:?}", String::from_utf8_lossy(body));
                assert_eq!(
                    strict.canonical.to_vec(),
                    canonical(v, 0).to_vec(),
                    "{:?}",
                    String::from_utf8_lossy(body)
                );
                assert_eq!(parse_strict(body).ok().as_ref(), Some(v));
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!(
                "{:?}: reference {reference:?}, reader {fast:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }

    #[test]
    fn the_reader_reads_as_the_reference_does() {
        let cases: &[&[u8]] = &[
            b"",
            b" ",
            b"{}",
            b"[]",
            b" {} ",
            b"{} x",
            b"{},",
            b"[1,]",
            b"{\"a\":1,}",
            b"[,1]",
            b"true",
            b"tru",
            b"truex",
            b"null",
            b"nul",
            b"false ",
            b"\"\"",
            b"\"abc",
            b"\"a\\\"",
            b"0",
            b"-0",
            b"-",
            b"01",
            b"1.",
            b".5",
            b"+1",
            b"1e5",
            b"1E+5",
            b"1e-5",
            b"-1.5e-300",
            b"1e400",
            b"-1e400",
            b"18446744073709551615",
            b"18446744073709551616",
            b"-9223372036854775808",
            b"-9223372036854775809",
            b"999999999999999999",
            b"-999999999999999999",
            b"1000000000000000000",
            b"-00",
            b"[7,-7,0,-0,10,-10,07,1-,1+2,123456789012345678,-123456789012345678]",
            b"[7,-7,0,-0,10,-10,123456789012345678,-123456789012345678,0.5,-1e3]",
            b"12.0e0",
            b"1.2E+1",
            b"0.1",
            b"100000000000000000000000000000000000000000",
            b"1.7976931348623157e308",
            b"[1 ,2 , 3]",
            b"{\"a\" : [ true , null ] }",
            b"[1-2]",
            b"[1e]",
            b"[--1]",
            b"[1.5.3]",
            br#"{"a":"\ud83d\ude00"}"#,
            br#"{"a":"\ud800"}"#,
            br#"{"a":"\udc00"}"#,
            br#"{"a":"\ud800\u0041"}"#,
            br#"{"a":"\ud800\ud800"}"#,
            br#"{"a":"\ud800x"}"#,
            br#"{"a":"\u00e9\u00E9\u001f\u001F\u0008\u0000\u007f"}"#,
            br#"["\/", "/"]"#,
            br#"["\b\f\n\r\t\"\\"]"#,
            br#"["\x"]"#,
            br#"["\u12"]"#,
            br#"["\u12G4"]"#,
            br#"["\"#,
            b"[\"\x01\"]",
            b"[\"\t\"]",
            b"[\"\x7f\"]",
            "[\"caf\u{e9} \u{1F600}\"]".as_bytes(),
            b"[\"\xff\"]",
            b"[\"\xed\xa0\x80\"]",
            b"\xef\xbb\xbf{}",
            b"{\"a\":1}\xff",
            br#"{"x":1,"x":2}"#,
            br#"{"x":1,"\u0078":2}"#,
            br#"{"a":{"b":{"c":1,"c":2}}}"#,
            br#"{"x":1,"x""#,
            b"{\"x\":1,\"x\":\"\xff\"}",
            br#"{"$serde_json::private::RawValue":1}"#,
            br#"{"a":NaN}"#,
            br#"{"a":Infinity}"#,
            br#"{"a" 1}"#,
            br#"{1:2}"#,
            br#"{"a":}"#,
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":16}",
            b"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\\n\"}]}\n",
        ];
        for body in cases {
            same_reading(body);
        }
        for depth in [1, 126, 127, 128, 129, 300] {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let body = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                same_reading(body.as_bytes());
            }
        }
    }

    #[test]
    fn a_canonical_body_is_forwarded_without_a_copy() {
        let body = Bytes::from_static(br#"{"messages":[{"role":"user","content":"a\nb"}]}"#);
        let strict = read_strict(&body).unwrap();
        assert_eq!(strict.canonical, body);
        assert_eq!(strict.canonical.as_ptr(), body.as_ptr());
        // Trailing whitespace is left off, still without a copy.
        let spaced = Bytes::from_static(b"{\"a\":1} \n");
        let strict = read_strict(&spaced).unwrap();
        assert_eq!(&strict.canonical[..], b"{\"a\":1}");
        assert_eq!(strict.canonical.as_ptr(), spaced.as_ptr());
        // A spelling serde_json would not write is written apart.
        let escaped = Bytes::from_static(br#"{"a":"\u00e9"}"#);
        assert_eq!(
            &read_strict(&escaped).unwrap().canonical[..],
            "{\"a\":\"\u{e9}\"}".as_bytes()
        );
    }

    /// Every ASCII byte at every offset of a 16-byte block and of the tail
    /// after it (`first_escape`). Mixed strings and whole trees:
    /// `crates/inspect/tests/inspect/properties.rs`.
    #[test]
    fn every_byte_escapes_as_serde_json_does() {
        for b in 0u8..0x80 {
            for pad in 0..40 {
                let s = format!("{}{}{}", "a".repeat(pad), char::from(b), "b".repeat(9));
                let v = Value::String(s);
                assert_eq!(
                    canonical(&v, 0).to_vec(),
                    serde_json::to_vec(&v).unwrap(),
                    "byte {b:#x} at offset {pad}"
                );
            }
        }
    }
}
