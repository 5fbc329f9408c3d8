//! The strict reader's one pass over a body: it checks the whole body's UTF-8
//! once, finds string ends with SIMD search, builds the `Value` and, when
//! asked, the canonical bytes in the same pass.
//!
//! It accepts exactly what serde_json with [`PlainValue`] accepts and builds
//! the same tree (numbers other than plain integers are handed to serde_json
//! itself, span by span), or
//! it fails without saying why: the caller then asks serde_json, the
//! reference, for the refusal. The property tests and the `json` fuzz target
//! hold the two to each other.
//!
//! The canonical bytes are the client's own for as long as they are already
//! canonical (no whitespace between tokens, every string and number spelled
//! as serde_json writes it), and are only copied from the first difference
//! on: a compact body is forwarded without a copy.

use memchr::{memchr, memchr2};
use serde::de::DeserializeSeed;
use serde_json::{Map, Value};

use prefill_guard_count::py::{Duplicates, PlainValue};

/// serde_json's nesting limit: its reader refuses the 128th open bracket.
const DEPTH: usize = 128;

/// The body is not read as serde_json reads it; the reference says why.
pub(super) struct Fail;

type Read<T> = Result<T, Fail>;

/// The canonical bytes of a body read with `emit`.
pub(super) enum Spelled {
    /// The body's own first bytes (all but trailing whitespace).
    Prefix(usize),
    /// Written apart: the body differs from them.
    Written(Vec<u8>),
}

/// Reads `body`; with `emit`, also its canonical bytes (else `None`).
pub(super) fn read(body: &[u8], emit: bool) -> Read<(Value, Option<Spelled>)> {
    let text = simdutf8::basic::from_utf8(body).map_err(|_| Fail)?;
    let mut reader = Reader {
        src: body,
        text,
        pos: 0,
        depth: DEPTH,
        number: Vec::new(),
        out: Canonical {
            src: body,
            on: emit,
            written: None,
            same: 0,
        },
    };
    let value = reader.value()?;
    reader.ws();
    if reader.pos != body.len() {
        return Err(Fail);
    }
    let canonical = emit.then(|| reader.out.finish());
    Ok((value, canonical))
}

struct Reader<'a> {
    src: &'a [u8],
    /// `src`, known to be UTF-8: strings are sliced out of it.
    text: &'a str,
    pos: usize,
    /// Brackets that may still open before serde_json's limit.
    depth: usize,
    out: Canonical<'a>,
    /// Reused to spell numbers.
    number: Vec<u8>,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// JSON's whitespace; the canonical bytes have none.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The one-byte token `b`, kept in the canonical bytes.
    fn punct(&mut self, b: u8) -> Read<()> {
        if self.peek() != Some(b) {
            return Err(Fail);
        }
        self.out.keep(self.pos, self.pos + 1);
        self.pos += 1;
        Ok(())
    }

    fn value(&mut self) -> Read<Value> {
        self.ws();
        match self.peek().ok_or(Fail)? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string().map(Value::String),
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Fail),
        }
    }

    fn enter(&mut self) -> Read<()> {
        self.depth -= 1;
        if self.depth == 0 {
            return Err(Fail);
        }
        Ok(())
    }

    fn object(&mut self) -> Read<Value> {
        self.enter()?;
        self.punct(b'{')?;
        let mut map = Map::new();
        let mut more = self.first(b'}')?;
        while more {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(Fail);
            }
            let key = self.string()?;
            // Before the colon, as serde_json's `next_key` is.
            if map.contains_key(&key) {
                return Err(Fail);
            }
            self.ws();
            self.punct(b':')?;
            let value = self.value()?;
            map.insert(key, value);
            more = self.more(b'}')?;
        }
        self.depth += 1;
        Ok(Value::Object(map))
    }

    fn array(&mut self) -> Read<Value> {
        self.enter()?;
        self.punct(b'[')?;
        let mut items = Vec::new();
        let mut more = self.first(b']')?;
        while more {
            items.push(self.value()?);
            more = self.more(b']')?;
        }
        self.depth += 1;
        Ok(Value::Array(items))
    }

    /// Right after a container opens: whether an item comes, or `close`
    /// ends it at once.
    fn first(&mut self, close: u8) -> Read<bool> {
        self.ws();
        if self.peek() == Some(close) {
            self.punct(close)?;
            return Ok(false);
        }
        Ok(true)
    }

    /// After an item: whether a comma says another comes, or `close` ends
    /// the container (anything else is refused).
    fn more(&mut self, close: u8) -> Read<bool> {
        self.ws();
        if self.peek() == Some(b',') {
            self.punct(b',')?;
            return Ok(true);
        }
        self.punct(close)?;
        Ok(false)
    }

    fn literal(&mut self, word: &[u8], value: Value) -> Read<Value> {
        let end = self.pos + word.len();
        if self.src.get(self.pos..end) != Some(word) {
            return Err(Fail);
        }
        self.out.keep(self.pos, end);
        self.pos = end;
        Ok(value)
    }

    /// A number is read by serde_json itself, so that every spelling reads
    /// to the very `Number` it would. The span is the longest run of the
    /// bytes a number is spelled with: in a valid document a number is never
    /// followed by one, so the span is the number or the body is invalid.
    fn number(&mut self) -> Read<Value> {
        let start = self.pos;
        let len = self.src[start..]
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(self.src.len() - start);
        let span = self.text.get(start..start + len).ok_or(Fail)?;
        if let Some(n) = plain_integer(span) {
            // Written back digit for digit (itoa): canonical as it is.
            self.pos = start + len;
            self.out.keep(start, self.pos);
            return Ok(Value::Number(n));
        }
        let mut de = serde_json::Deserializer::from_str(span);
        let value = PlainValue(Duplicates::Refuse)
            .deserialize(&mut de)
            .map_err(|_| Fail)?;
        de.end().map_err(|_| Fail)?;
        let Value::Number(n) = &value else {
            return Err(Fail);
        };
        self.pos = start + len;
        if self.out.on {
            let mut written = std::mem::take(&mut self.number);
            written.clear();
            super::write_number(&mut written, n);
            if written == span.as_bytes() {
                self.out.keep(start, self.pos);
            } else {
                self.out.write(&written);
            }
            self.number = written;
        }
        Ok(value)
    }

    /// A string, from its opening quote.
    fn string(&mut self) -> Read<String> {
        let open = self.pos;
        let start = open + 1;
        // Most strings have no escape: one search finds their end.
        let found = start + memchr2(b'"', b'\\', self.src.get(start..).ok_or(Fail)?).ok_or(Fail)?;
        let (close, first) = if self.src[found] == b'"' {
            (found, None)
        } else {
            let close = closing_quote(self.src, start, found).ok_or(Fail)?;
            (close, Some(found - start))
        };
        let raw = &self.src[start..close];
        if has_control(raw) {
            return Err(Fail);
        }
        let text = self.text.get(start..close).ok_or(Fail)?;
        self.pos = close + 1;
        let Some(first) = first else {
            self.out.keep(open, self.pos);
            return Ok(text.to_owned());
        };
        let (decoded, canonical) = unescape(text, first)?;
        if canonical {
            self.out.keep(open, self.pos);
        } else if self.out.on {
            let mut written = Vec::with_capacity(decoded.len() + 2);
            super::write_string(&mut written, &decoded);
            self.out.write(&written);
        }
        Ok(decoded)
    }
}

/// Where the string whose bytes start at `start` closes, searched from its
/// first backslash `from` on: the first `"` not escaped, that is not after
/// an odd run of backslashes. Searched from quote to quote, not from
/// backslash to backslash: a Chinese text that Python's `json.dumps`
/// escaped to ASCII has a backslash every six bytes, and a search per
/// escape cost more than the rest of the reading. An escape's own bytes are
/// checked when it is decoded; `\u`'s hex digits are never a quote or a
/// backslash. The backslashes counted back from each quote stop at the
/// quote before, so each byte is looked at a bounded number of times.
fn closing_quote(src: &[u8], start: usize, mut from: usize) -> Option<usize> {
    loop {
        let quote = from + memchr(b'"', src.get(from..)?)?;
        let backslashes = src[start..quote]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote);
        }
        from = quote + 1;
    }
}

/// A number spelled as a plain integer of at most 18 digits, as serde_json
/// reads it: `u64` when positive, `i64` when negative. Token ids come as
/// long arrays of these; anything else (`-0`, a leading zero, a fraction,
/// an exponent, more digits) is left to serde_json.
fn plain_integer(span: &str) -> Option<serde_json::Number> {
    let (negative, digits) = match span.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, span),
    };
    let plain = matches!(digits.as_bytes(), [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit))
        || (digits == "0" && !negative);
    if !plain || digits.len() > 18 {
        return None;
    }
    let magnitude: u64 = digits.parse().ok()?;
    Some(if negative {
        // At most 18 digits: below 2^63, so the negation cannot overflow.
        serde_json::Number::from(-i64::try_from(magnitude).ok()?)
    } else {
        serde_json::Number::from(magnitude)
    })
}

/// Whether `raw` holds a control character, which a JSON string may only
/// spell escaped. Its smallest byte, without an early exit, so that the
/// compiler takes whole vectors at a time; kept in 64 lanes, so that four
/// vectors are compared at once rather than each waiting on the one before
/// (a 139 kB message: 2.1 µs with one running minimum, 1.5 µs with lanes).
/// Never inlined: inside `Reader::string` the compiler kept the lanes on the
/// stack and stored and reloaded them every 64 bytes (criterion `json`, 32k
/// chat: 20.5 µs inlined, 16.2 µs called).
#[inline(never)]
pub(super) fn has_control(raw: &[u8]) -> bool {
    const LANES: usize = 64;
    let mut chunks = raw.chunks_exact(LANES);
    let mut least = [u8::MAX; LANES];
    for chunk in &mut chunks {
        for (l, &b) in least.iter_mut().zip(chunk) {
            *l = (*l).min(b);
        }
    }
    let tail = chunks.remainder().iter().fold(u8::MAX, |m, &b| m.min(b));
    least.iter().fold(tail, |m, &b| m.min(b)) < 0x20
}

/// Decodes a string's escapes (`raw` is between its quotes; `first` is its
/// first backslash). Also says whether every escape is spelled as
/// serde_json writes it, so that the raw bytes are the canonical ones.
fn unescape(raw: &str, first: usize) -> Read<(String, bool)> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut canonical = true;
    let mut run = 0;
    let mut at = first;
    loop {
        if at > run {
            out.push_str(raw.get(run..at).ok_or(Fail)?);
        }
        if bytes.get(at + 1) == Some(&b'u') {
            let (end, as_written) = u_run(bytes, at, &mut out)?;
            canonical &= as_written;
            run = end;
        } else {
            let (c, as_written) = match bytes.get(at + 1).ok_or(Fail)? {
                b'"' => ('"', true),
                b'\\' => ('\\', true),
                // serde_json writes `/` as is.
                b'/' => ('/', false),
                b'b' => ('\u{8}', true),
                b'f' => ('\u{c}', true),
                b'n' => ('\n', true),
                b'r' => ('\r', true),
                b't' => ('\t', true),
                _ => return Err(Fail),
            };
            out.push(c);
            canonical &= as_written;
            run = at + 2;
        }
        // The next escape is most often right here (a text escaped to ASCII).
        let next = match bytes.get(run) {
            Some(b'\\') => Some(run),
            _ => next_backslash(bytes, run),
        };
        match next {
            Some(next) => at = next,
            None => break,
        }
    }
    out.push_str(raw.get(run..).ok_or(Fail)?);
    Ok((out, canonical))
}

/// The `\u` escapes one after another from `at` (the caller found one
/// there), decoded into `out`: where they end, and whether each is spelled
/// as serde_json writes it. A text escaped to ASCII is such a run, decoded
/// here without going back to the escape loop between characters.
fn u_run(bytes: &[u8], mut at: usize, out: &mut String) -> Read<(usize, bool)> {
    let mut canonical = true;
    while bytes.get(at..at + 2) == Some(b"\\u") {
        let (c, len) = unicode(bytes, at)?;
        out.push(c);
        canonical &= len == 6 && short_u_escape(c, &bytes[at + 2..at + 6]);
        at += len;
    }
    Ok((at, canonical))
}

/// The first backslash of `bytes` from `from` on. Escapes come close
/// together in a text escaped to ASCII (one every few words), so the next
/// 16 bytes are compared at once, as a mask the compiler takes in one
/// vector, before a SIMD search pays its setup.
fn next_backslash(bytes: &[u8], from: usize) -> Option<usize> {
    const NEAR: usize = 16;
    let rest = bytes.get(from..)?;
    let Some(near) = rest.first_chunk::<NEAR>() else {
        return rest.iter().position(|&b| b == b'\\').map(|i| from + i);
    };
    let mask = near
        .iter()
        .enumerate()
        .fold(0u32, |m, (i, &b)| m | u32::from(b == b'\\') << i);
    if mask != 0 {
        return Some(from + mask.trailing_zeros() as usize);
    }
    memchr(b'\\', &rest[NEAR..]).map(|i| from + NEAR + i)
}

/// The `\u` escape at `at` (and a low surrogate's after a high one): the
/// character and the bytes spelled. A lone surrogate is refused, as
/// serde_json (and orjson) refuse it.
#[inline]
fn unicode(bytes: &[u8], at: usize) -> Read<(char, usize)> {
    let first = hex4(bytes.get(at + 2..at + 6))?;
    let (code, len) = match first {
        0xD800..=0xDBFF => {
            if bytes.get(at + 6..at + 8) != Some(b"\\u") {
                return Err(Fail);
            }
            let low = hex4(bytes.get(at + 8..at + 12))?;
            if !(0xDC00..=0xDFFF).contains(&low) {
                return Err(Fail);
            }
            (0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00), 12)
        }
        0xDC00..=0xDFFF => return Err(Fail),
        n => (n, 6),
    };
    Ok((char::from_u32(code).ok_or(Fail)?, len))
}

#[inline]
fn hex4(digits: Option<&[u8]>) -> Read<u32> {
    let &[a, b, c, d] = digits.ok_or(Fail)? else {
        return Err(Fail);
    };
    let [a, b, c, d] = [a, b, c, d].map(|x| HEX_VALUE[usize::from(x)]);
    // An invalid digit's value has its high bit set, which no valid one has.
    if (a | b | c | d) & 0x80 != 0 {
        return Err(Fail);
    }
    Ok(u32::from(a) << 12 | u32::from(b) << 8 | u32::from(c) << 4 | u32::from(d))
}

/// Each byte's value as a hex digit, 0xff if it is none (a lookup, as a
/// text escaped to ASCII has four digits in every six bytes).
const HEX_VALUE: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            d @ b'0'..=b'9' => d - b'0',
            d @ b'a'..=b'f' => d - b'a' + 10,
            d @ b'A'..=b'F' => d - b'A' + 10,
            _ => 0xff,
        };
        i += 1;
    }
    table
};

/// Whether serde_json writes `c` as exactly the `\u` escape whose hex
/// digits are `hex`: it does so for the control characters without a short
/// escape, as `\u00` and two lowercase digits.
fn short_u_escape(c: char, hex: &[u8]) -> bool {
    let n = u32::from(c);
    n < 0x20
        && !matches!(n, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
        && hex == format!("{n:04x}").as_bytes()
}

/// The canonical bytes as the reader goes: until the first token spelled
/// differently they are `src[..same]` and nothing is copied.
struct Canonical<'a> {
    src: &'a [u8],
    /// Whether the caller wants them at all.
    on: bool,
    /// Once they differ from the source: everything written so far.
    written: Option<Vec<u8>>,
    same: usize,
}

impl Canonical<'_> {
    /// The source's bytes `start..end` are canonical as they are.
    fn keep(&mut self, start: usize, end: usize) {
        if !self.on {
            return;
        }
        if self.written.is_none() && start == self.same {
            self.same = end;
            return;
        }
        let src = self.src;
        self.diverge().extend_from_slice(&src[start..end]);
    }

    /// The next token's canonical spelling, which is not the source's.
    fn write(&mut self, bytes: &[u8]) {
        if self.on {
            self.diverge().extend_from_slice(bytes);
        }
    }

    fn diverge(&mut self) -> &mut Vec<u8> {
        let (src, same) = (self.src, self.same);
        self.written.get_or_insert_with(|| {
            let mut out = Vec::with_capacity(src.len());
            out.extend_from_slice(&src[..same]);
            out
        })
    }

    fn finish(self) -> Spelled {
        match self.written {
            Some(out) => Spelled::Written(out),
            None => Spelled::Prefix(self.same),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{has_control, read, Spelled};

    /// What `read` answers for `raw`, held to serde_json: the same tree and
    /// serde_json's bytes as the canonical ones.
    fn reads_as_serde_json(raw: &str, case: &str) {
        let expected: serde_json::Value = serde_json::from_str(raw).unwrap();
        let Ok((value, Some(spelled))) = read(raw.as_bytes(), true) else {
            panic!("{case}: refused");
        };
        assert_eq!(value, expected, "{case}");
        let bytes = match spelled {
            Spelled::Prefix(len) => raw.as_bytes()[..len].to_vec(),
            Spelled::Written(bytes) => bytes,
        };
        assert_eq!(bytes, serde_json::to_vec(&expected).unwrap(), "{case}");
    }

    /// Strings of a few escapes and of many (a text escaped to ASCII is one
    /// escape after another), every kind mixed in, escaped quotes after runs
    /// of backslashes among them, near and far apart, read as serde_json
    /// reads them.
    #[test]
    fn escapes_decode_as_serde_json_decodes_them() {
        let kinds = [
            r"\n",
            r"\\",
            r#"\""#,
            r"\/",
            r"\u00e9",
            r"\ud83d\ude00",
            r"\t",
            r#"\\\""#,
            r"\\\\",
            r"\u4e2d",
        ];
        for n in [1, 2, 15, 1_024, 3_072, 20_000] {
            for gap in ["", "ab", "a quote-free run of more than sixteen bytes"] {
                let mut raw = String::from(r#"{"content":""#);
                for i in 0..n {
                    raw.push_str(kinds[i % kinds.len()]);
                    raw.push_str(gap);
                }
                raw.push_str(r#"","next":"x"}"#);
                reads_as_serde_json(&raw, &format!("{n} escapes, gap {}", gap.len()));
            }
        }
    }

    /// Runs of `\u` escapes as a text escaped to ASCII has them, with what
    /// breaks a run's quick path in it: control characters (kept escaped by
    /// serde_json, so canonical as spelled), upper-case digits, surrogate
    /// pairs; and what serde_json refuses, refused too.
    #[test]
    fn u_runs_read_as_serde_json_reads_them() {
        for raw in [
            r#"["\u4e2d\u6587"]"#,
            r#"["\u0001\u001f\u4e2d\u0000"]"#,
            r#"["\u00E9\u00e9\u00C9x"]"#,
            r#"["\u4e2d\ud83d\ude00\u6587"]"#,
            r#"["\u0020\u007f\ud7ff\ue000\uffff"]"#,
            r#"["\u4e2d\n\u6587\\\u0041"]"#,
        ] {
            reads_as_serde_json(raw, raw);
        }
        for refused in [
            r#"["\u4e2d\u12"]"#,
            r#"["\u4e2d\u12G4"]"#,
            r#"["\u4e2d\ud800\u4e2d"]"#,
            r#"["\u4e2d\udc00"]"#,
            r#"["\u4e2d\ud83d"]"#,
            r#"["\u4e2d\u"]"#,
        ] {
            assert!(
                serde_json::from_str::<serde_json::Value>(refused).is_err(),
                "{refused}"
            );
            assert!(read(refused.as_bytes(), true).is_err(), "{refused}");
        }
    }

    /// The closing quote after an even run of backslashes, an escaped one
    /// after an odd run, at the very start and end of a string.
    #[test]
    fn a_quote_closes_after_an_even_run_of_backslashes() {
        for raw in [
            r#"["\\"]"#,
            r#"["\\\\","a"]"#,
            r#"["\"\\"]"#,
            r#"["\\\"",""]"#,
            r#"{"\"":"\\","":"\\\""}"#,
            r#"["a\\\\\"b\\"]"#,
        ] {
            reads_as_serde_json(raw, raw);
        }
        for unclosed in [r#"["\"]"#, r#"["\\\"]"#, r#"["a\"#] {
            assert!(read(unclosed.as_bytes(), true).is_err(), "{unclosed}");
        }
    }

    /// A control character is found wherever it is: in a lane, in the tail
    /// past the last whole chunk, at either end.
    #[test]
    fn control_found_at_every_position() {
        for len in [0, 1, 63, 64, 65, 200] {
            let clean = vec![b' '; len];
            assert!(!has_control(&clean), "{len}");
            for at in 0..len {
                for c in [0x00, 0x1f] {
                    let mut raw = clean.clone();
                    raw[at] = c;
                    assert!(has_control(&raw), "{len} {at} {c}");
                }
            }
        }
        assert!(!has_control(&[0x20, 0x7f, 0x80, 0xff]));
    }
}
