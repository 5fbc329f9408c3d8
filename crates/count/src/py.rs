//! The Python behaviours SGLang's request handling relies on, over JSON
//! values: `json.loads`, `json.dumps`, `repr()` and `str()`, `repr(float)`,
//! truthiness, `str.strip`, `float()`/`int()` of a str, text-mode file
//! reads, equality and pydantic's lax scalars. Every
//! encoder and conversion that mirrors Python code calls these instead of
//! writing its own, so a difference from CPython is fixed once.
//! Dependency-free on purpose (std, serde_json and the CPython Unicode
//! tables in `count::unicode`).

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::unicode;

/// `json.loads(s)` (and `orjson.loads`) into a `Value`, as serde_json reads
/// RFC 8259 but without its one extension: `Value`'s own deserializer takes
/// an object whose first key is `$serde_json::private::RawValue` for its
/// raw-value token and refuses the document, where Python reads an ordinary
/// dict. A reader that refused what Python reads would send the conversions
/// down a path SGLang does not take (a Responses `function_call` whose
/// arguments "are not an object" is counted as `{}`): an undercount. Later
/// duplicate keys win, as in a Python dict. Use this for every JSON text
/// inside a request; serde_json's `from_str::<Value>` only for the guard's
/// own files.
pub fn json_loads(s: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(s);
    let value = PlainValue::KEEP_LAST.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// What a repeated key in an object means.
#[derive(Clone, Copy)]
pub enum Duplicates {
    /// The later value wins, as in a Python dict.
    KeepLast,
    /// An error naming the key (`"duplicate key \"k\""`): the guard's own
    /// request reader, where two readers could keep different ones.
    Refuse,
}

/// Builds a `Value` with no special keys (see [`json_loads`]); shared with
/// the strict request reader (`inspect::json`).
#[derive(Clone, Copy)]
pub struct PlainValue(pub Duplicates);

impl PlainValue {
    const KEEP_LAST: Self = Self(Duplicates::KeepLast);
}

impl<'de> DeserializeSeed<'de> for PlainValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PlainValue {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // the parser yields finite numbers only
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if matches!(self.0, Duplicates::Refuse) && out.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {key:?}"
                )));
            }
            let v = map.next_value_seed(self)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// `repr(float)`: the shortest round-trip digits, positional while the
/// decimal exponent is in [-4, 16), otherwise `d.ddde±XX`.
pub fn push_float_repr(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f < 0.0 { "-inf" } else { "inf" });
        return;
    }
    if f.is_sign_negative() {
        out.push('-');
    }
    let f = f.abs();
    if f == 0.0 {
        out.push_str("0.0");
        return;
    }
    // `{:e}` gives the shortest round-trip digits, like Python's repr.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let ndigits = digits.len() as i32;
    let decpt = exp + 1;
    if -4 < decpt && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..-decpt {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt >= ndigits {
            out.push_str(&digits);
            for _ in 0..decpt - ndigits {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if ndigits > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

/// How [`push_str_repr`] treats a code point whose `repr` depends on the
/// Python version.
///
/// SGLang 0.5.23 installs on CPython 3.11, 3.12 and 3.13 (wheels for those
/// three only), on Unicode 14.0, 15.0 and 15.1. Their `str.isprintable`, which
/// decides whether `repr` prints a character or escapes it, differs exactly
/// at code points unassigned (Cn) in Unicode 14.0 that a later version
/// assigned: checked on every code point against the three interpreters, no
/// code point assigned in 14.0 changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// Stop at a code point unassigned in Unicode 14.0 and return it
    /// ([`VersionDependent`]): for text that goes into a prompt, where the
    /// guard must not guess which Python the server runs.
    Strict,
    /// Escape it, as CPython 3.11 does: for error messages, and for the Jinja
    /// renderer, which follows CPython 3.11 throughout (`count::unicode`).
    Py311,
}

/// A code point whose `repr` differs between the Pythons SGLang runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionDependent(pub char);

impl fmt::Display for VersionDependent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "repr() of U+{:04X}, unassigned in Python 3.11's Unicode 14.0 and assigned later",
            u32::from(self.0)
        )
    }
}

/// `repr(str)` (CPython's `unicode_repr`): single quotes unless the text has
/// `'` and no `"`; `\\`, the quote, `\t`, `\n` and `\r` escaped; other
/// characters that are not `str.isprintable()` (ASCII controls, and by
/// CPython's Unicode tables categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but
/// the space) as `\xhh`, `\uhhhh` or `\Uhhhhhhhh`. In [`Repr::Strict`] mode
/// it stops at the first code point unassigned in Unicode 14.0, having
/// written part of the text.
pub fn push_str_repr(out: &mut String, s: &str, mode: Repr) -> Result<(), VersionDependent> {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.reserve(s.len() + 2);
    out.push(quote);
    let mut last = 0;
    for (i, c) in s.char_indices() {
        let plain = match c {
            '\\' => false,
            c if c == quote => false,
            c if c.is_ascii() => (' '..='~').contains(&c),
            c if unicode::is_unassigned_14(c) => {
                if mode == Repr::Strict {
                    return Err(VersionDependent(c));
                }
                false
            }
            c => unicode::is_printable(c),
        };
        if plain {
            continue;
        }
        out.push_str(&s[last..i]);
        last = i + c.len_utf8();
        let code = u32::from(c);
        let _ = match c {
            '\\' | '\'' | '"' => {
                out.push('\\');
                out.push(c);
                Ok(())
            }
            '\t' => out.write_str("\\t"),
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            _ if code <= 0xff => write!(out, "\\x{code:02x}"),
            _ if code <= 0xffff => write!(out, "\\u{code:04x}"),
            _ => write!(out, "\\U{code:08x}"),
        };
    }
    out.push_str(&s[last..]);
    out.push(quote);
    Ok(())
}

/// `repr(v)` of a value parsed from JSON: `None`, `True`, ints as written,
/// floats by `repr(float)`, strings by [`push_str_repr`], lists and dicts
/// (in key order) with `", "` and `": "`.
pub fn push_repr(out: &mut String, v: &Value, mode: Repr) -> Result<(), VersionDependent> {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => push_json_number(out, n),
        Value::String(s) => push_str_repr(out, s, mode)?,
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_repr(out, item, mode)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_str_repr(out, k, mode)?;
                out.push_str(": ");
                push_repr(out, item, mode)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `repr(v)` as CPython 3.11 prints it ([`Repr::Py311`]): for error messages.
pub fn repr(v: &Value) -> String {
    let mut out = String::new();
    // Py311 mode refuses nothing.
    let _ = push_repr(&mut out, v, Repr::Py311);
    out
}

/// `str(v)`: a string is itself, anything else its [`push_repr`] (`str()`
/// of None, a bool, a number, a list or a dict is its `repr()`).
pub fn str(v: &Value, mode: Repr) -> Result<Cow<'_, str>, VersionDependent> {
    match v {
        Value::String(s) => Ok(Cow::Borrowed(s)),
        _ => {
            let mut out = String::new();
            push_repr(&mut out, v, mode)?;
            Ok(Cow::Owned(out))
        }
    }
}

/// `str(v)` as CPython 3.11 prints it ([`Repr::Py311`]): for error messages.
pub fn message_str(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        _ => Cow::Owned(repr(v)),
    }
}

/// A string as `json.dumps` writes it (`ensure_ascii` escapes every
/// non-ASCII character as `\uXXXX`, surrogate pairs above the BMP).
pub fn push_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut last = 0;
    for (i, c) in s.char_indices() {
        let plain = match c {
            '"' | '\\' => false,
            c if (c as u32) < 0x20 => false,
            c if ensure_ascii => (' '..='~').contains(&c),
            _ => true,
        };
        if plain {
            continue;
        }
        out.push_str(&s[last..i]);
        last = i + c.len_utf8();
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            c => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push_str(&s[last..]);
    out.push('"');
}

/// The keyword arguments of `json.dumps` the mirrored code uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dumps {
    pub ensure_ascii: bool,
    /// `indent=None` when `None`; else that many spaces per level (then the
    /// item separator drops its trailing space, as Python's default does).
    pub indent: Option<usize>,
    /// `separators=(item, key)`; `None` is Python's default for `indent`.
    pub separators: Option<(&'static str, &'static str)>,
    pub sort_keys: bool,
}

impl Default for Dumps {
    /// `json.dumps(v)`: `ensure_ascii=True`, `", "` and `": "`.
    fn default() -> Self {
        Self {
            ensure_ascii: true,
            indent: None,
            separators: None,
            sort_keys: false,
        }
    }
}

impl Dumps {
    /// `json.dumps(v, ensure_ascii=False)`.
    pub const UNICODE: Dumps = Dumps {
        ensure_ascii: false,
        indent: None,
        separators: None,
        sort_keys: false,
    };
}

/// `json.dumps(v, **opts)` for a value parsed from JSON (dicts keep their
/// key order, numbers print as Python prints the int or float they parse to).
pub fn json_dumps(v: &Value, opts: &Dumps) -> String {
    let mut out = String::new();
    push_json(&mut out, v, opts, 0);
    out
}

/// A JSON number as Python's `json` module writes the value it parsed it to:
/// integers as written, floats by `repr`.
pub fn push_json_number(out: &mut String, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        push_float_repr(out, n.as_f64().unwrap_or(f64::NAN));
    }
}

fn push_json(out: &mut String, v: &Value, opts: &Dumps, level: usize) {
    let (item_sep, key_sep) = opts.separators.unwrap_or(match opts.indent {
        Some(_) => (",", ": "),
        None => (", ", ": "),
    });
    let newline = |out: &mut String, level: usize| {
        if let Some(width) = opts.indent {
            out.push('\n');
            for _ in 0..width * level {
                out.push(' ');
            }
        }
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => push_json_number(out, n),
        Value::String(s) => push_json_str(out, s, opts.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                push_json(out, item, opts, level + 1);
            }
            newline(out, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if opts.sort_keys {
                // Python compares str keys by code point, as Rust's str order does.
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                push_json_str(out, k, opts.ensure_ascii);
                out.push_str(key_sep);
                push_json(out, item, opts, level + 1);
            }
            newline(out, level);
            out.push('}');
        }
    }
}

/// `type(v).__name__` of the value `json.loads` makes.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python truthiness of a JSON value.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().map(|f| f != 0.0).unwrap_or(true),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python's `str.strip()`: `str.isspace` characters, which are Rust's
/// whitespace plus the ASCII separators U+001C..U+001F, off both ends.
pub use super::unicode::strip;

/// The text `int(s)` and `float(s)` parse, or `None` where they raise for
/// that alone. CPython first rewrites a non-ASCII string
/// (`_PyUnicode_TransformDecimalAndSpaceToASCII`): Unicode whitespace
/// becomes a space, a Unicode decimal digit its ASCII digit (by CPython
/// 3.11's tables), any other character from U+007F up makes the text no
/// number; then it strips ASCII whitespace (`Py_ISSPACE`: space and
/// `\t\n\v\f\r`). So U+0085, U+00A0 and U+3000 are stripped but U+001C..U+001F,
/// which `str.strip()` removes, are not: `float("\x1c1")` raises. That is
/// Rust's `trim()` on the rewritten text.
pub fn number_text(s: &str) -> Option<Cow<'_, str>> {
    let text = if s.is_ascii() {
        Cow::Borrowed(s)
    } else {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            if c < '\x7f' {
                out.push(c);
            } else if unicode::is_space(c) {
                out.push(' ');
            } else {
                let d = unicode::decimal_value(c)?;
                out.push(char::from(b'0' + d as u8));
            }
        }
        Cow::Owned(out)
    };
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    Some(match text {
        Cow::Borrowed(t) => Cow::Borrowed(t.trim_matches(is_space)),
        Cow::Owned(t) => Cow::Owned(t.trim_matches(is_space).to_owned()),
    })
}

/// Python's `float(s)` for a str: [`number_text`], then single underscores
/// between digits dropped, then a decimal or `inf`/`infinity`/`nan` (any
/// case, one optional sign), which Rust's `f64` parser reads alike.
pub fn float_of_str(s: &str) -> Option<f64> {
    let t = number_text(s)?;
    let b = t.as_bytes();
    let mut digits = String::with_capacity(t.len());
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let between =
                i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit);
            if !between {
                return None;
            }
        } else {
            digits.push(char::from(c));
        }
    }
    digits.parse().ok()
}

/// pydantic's lax `float` from a str (pydantic-core's `str_as_float`): Rust's
/// `trim()` and `f64` parser, else the untrimmed text without its
/// underscores if it has some, none first or last and never two together.
/// Not Python's `float()`: `" 1_0"` fails and `"1_.5"` is 1.5 here, the other
/// way round there, and Unicode digits are refused.
pub fn lax_float_of_str(s: &str) -> Option<f64> {
    if let Ok(f) = s.trim().parse() {
        return Some(f);
    }
    if s.starts_with('_') || s.ends_with('_') || !s.contains('_') || s.contains("__") {
        return None;
    }
    s.replace('_', "").parse().ok()
}

/// A file's text as Python reads it in text mode (`open(path).read()`, the
/// default universal newlines): `\r\n` and a lone `\r` become `\n`.
pub fn universal_newlines(text: String) -> String {
    if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        text
    }
}

/// pydantic's lax `bool`.
pub fn lax_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => {
            let f = n.as_f64()?;
            if f == 0.0 {
                Some(false)
            } else if f == 1.0 {
                Some(true)
            } else {
                None
            }
        }
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    }
}

/// pydantic's lax `int` (pydantic-core's `str_as_int` and `float_as_int`):
/// a bool as 0 or 1; a float only when whole and strictly between -2**63 and
/// 2**63; a str by [`lax_int_of_str`]. `None` where pydantic fails, and for
/// integers past `i128`, which pydantic reads (a refusal, never a
/// different number).
pub fn lax_int(v: &Value) -> Option<i128> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    match v {
        Value::Bool(b) => Some(i128::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i128::from(i))
            } else if let Some(u) = n.as_u64() {
                Some(i128::from(u))
            } else {
                let f = n.as_f64()?;
                (f.fract() == 0.0 && -TWO_63 < f && f < TWO_63).then_some(f as i128)
            }
        }
        Value::String(s) => lax_int_of_str(s),
        _ => None,
    }
}

/// A JSON integer literal, `-?(0|[1-9][0-9]*)`, exactly.
fn json_int(s: &str) -> Option<i128> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let ok = match digits.as_bytes() {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if ok {
        s.parse().ok()
    } else {
        None
    }
}

/// pydantic's lax `int` from a str. A JSON integer literal is read as is;
/// anything else is cleaned once and must then be one: surrounding whitespace
/// (Rust's `trim()`, so not U+001C..U+001F) dropped; one `+` (not before a
/// `-`), then one `-` (not before a sign), taken off; leading zeros dropped,
/// underscores among them too, keeping the zero before a `.` and the last
/// character of a text of zeros and underscores only; a `.` followed by
/// zeros only (at least one) cut off; underscores dropped when none is first
/// or last and no two are together. So `" 0_5 "`, `"+5.00"` and `"1_0.0"` are
/// ints, and `"5."`, `"1e3"`, `"٥"` and `"\x1c5"` are not.
pub fn lax_int_of_str(s: &str) -> Option<i128> {
    if let Some(i) = json_int(s) {
        return Some(i);
    }
    let mut t = s.trim();
    if let Some(rest) = t.strip_prefix('+') {
        if rest.starts_with('-') {
            return None;
        }
        t = rest;
    }
    let negative = match t.strip_prefix('-') {
        Some(rest) if rest.starts_with(['-', '+']) => return None,
        Some(rest) => {
            t = rest;
            true
        }
        None => false,
    };
    t = match t.as_bytes().first() {
        Some(b'0') => match t.find(|c: char| c != '0' && c != '_') {
            None => &t[t.len() - 1..],
            Some(i) => match t.as_bytes()[i] {
                b'1'..=b'9' | b'-' => &t[i..],
                b'.' => &t[i - 1..],
                _ => return None,
            },
        },
        Some(b'1'..=b'9' | b'-') => t,
        _ => return None,
    };
    if let Some((int, fraction)) = t.split_once('.') {
        if !fraction.is_empty() && fraction.bytes().all(|b| b == b'0') {
            t = int;
        }
    }
    let t: Cow<'_, str> =
        if t.contains('_') && !t.starts_with('_') && !t.ends_with('_') && !t.contains("__") {
            Cow::Owned(t.replace('_', ""))
        } else {
            Cow::Borrowed(t)
        };
    if negative {
        json_int(&format!("-{t}"))
    } else {
        json_int(&t)
    }
}

/// Python `==` on values parsed from JSON: numbers by value (`1 == 1.0`,
/// `True == 1`), dicts regardless of key order, lists element-wise.
pub fn eq(a: &Value, b: &Value) -> bool {
    let num = |v: &Value| match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(n) => n.as_f64(),
        _ => None,
    };
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w)))
        }
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => match (num(a), num(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_loads_reads_what_python_reads() {
        // serde_json's Value takes this key for its raw-value token and refuses the text
        let text = r#"{"$serde_json::private::RawValue": "x", "b": [1, 2.5, null, true]}"#;
        assert!(serde_json::from_str::<Value>(text).is_err());
        let v = json_loads(text).unwrap();
        assert_eq!(v["$serde_json::private::RawValue"], "x");
        assert_eq!(v["b"], serde_json::json!([1, 2.5, null, true]));
        // a later duplicate wins, in the first one's place, as in a dict
        let v = json_loads(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"a":3,"b":2}"#);
        for bad in ["", "{", "[1,]", "NaN", "{} x", "\"\\ud800\""] {
            assert!(json_loads(bad).is_err(), "{bad}");
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn dumps_matches_python() {
        let v = json!({"a": [1, 2.5, null, true], "é": "中\n\"", "e": {}, "l": []});
        // json.dumps(v)
        assert_eq!(
            json_dumps(&v, &Dumps::default()),
            r#"{"a": [1, 2.5, null, true], "\u00e9": "\u4e2d\n\"", "e": {}, "l": []}"#
        );
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            json_dumps(&v, &Dumps::UNICODE),
            "{\"a\": [1, 2.5, null, true], \"é\": \"中\\n\\\"\", \"e\": {}, \"l\": []}"
        );
        // json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)
        let opts = Dumps {
            indent: Some(2),
            sort_keys: true,
            ..Dumps::UNICODE
        };
        assert_eq!(
            json_dumps(&json!({"b": [1, {"c": 1.0}], "a": 1e20}), &opts),
            "{\n  \"a\": 1e+20,\n  \"b\": [\n    1,\n    {\n      \"c\": 1.0\n    }\n  ]\n}"
        );
        // separators=(",", ":")
        let compact = Dumps {
            separators: Some((",", ":")),
            ..Dumps::default()
        };
        assert_eq!(
            json_dumps(&json!({"a": [1, "😀"]}), &compact),
            r#"{"a":[1,"\ud83d\ude00"]}"#
        );
    }

    #[test]
    fn str_repr_matches_python() {
        let repr_of = |s: &str, mode| {
            let mut out = String::new();
            push_str_repr(&mut out, s, mode).map(|()| out)
        };
        for (s, want) in [
            // python3.11 -c 'print(repr("a'"'"'b\"c\\\x00\xa0é😀"))'
            ("a'b\"c\\\u{0}\u{a0}é😀", r#"'a\'b"c\\\x00\xa0é😀'"#),
            // python3.11 -c 'print(repr("it'"'"'s"), repr("say \"x\""), repr("both '"'"' and \""))'
            ("it's", r#""it's""#),
            ("say \"x\"", r#"'say "x"'"#),
            ("both ' and \"", r#"'both \' and "'"#),
            // python3.11 -c 'print(repr("\t\n\r\x01\x1f\x7f\x85\xa0\xad\u0378\u200b\u2028\u3000\ue000\ufeff\U000e0001\U0010fffd\U0001fae8 \u4e2d\u00e9"))'
            (
                "\t\n\r\u{1}\u{1f}\u{7f}\u{85}\u{a0}\u{ad}\u{378}\u{200b}\u{2028}\u{3000}\u{e000}\u{feff}\u{e0001}\u{10fffd}\u{1fae8} 中é",
                r"'\t\n\r\x01\x1f\x7f\x85\xa0\xad\u0378\u200b\u2028\u3000\ue000\ufeff\U000e0001\U0010fffd\U0001fae8 中é'",
            ),
            ("", "''"),
        ] {
            assert_eq!(repr_of(s, Repr::Py311).unwrap(), want, "{s:?}");
        }
        // Unassigned in Unicode 14.0, so escaped by 3.11; Python 3.12 prints U+1FAE8
        // (/root/.pyenv/versions/3.12.1/bin/python -c 'print(repr("\U0001fae8"), repr("\u0378"))'
        // prints '🫨' '\u0378'): refused in Strict mode, the first such code point named.
        assert_eq!(
            repr_of("a\u{1fae8}\u{378}", Repr::Strict),
            Err(VersionDependent('\u{1fae8}'))
        );
        assert_eq!(
            repr_of("\u{378}", Repr::Strict),
            Err(VersionDependent('\u{378}'))
        );
        // Everything else is the same in both modes.
        assert_eq!(
            repr_of("\u{85}\u{a0}é😀\u{e000}\u{10fffd}", Repr::Strict).unwrap(),
            r"'\x85\xa0é😀\ue000\U0010fffd'"
        );
    }

    #[test]
    fn repr_and_str_of_json_values_match_python() {
        let v = json_loads(
            r#"{"a": [1, 2.5, null, true, "é", 1e16, -0.0, 1e-05], "k'": {}, "": [], "b": false}"#,
        )
        .unwrap();
        // python3.11 -c 'import json; print(repr(json.loads("{\"a\": [1, 2.5, null, true, \"é\", 1e16, -0.0, 1e-05], \"k'"'"'\": {}, \"\": [], \"b\": false}")))'
        let want =
            r#"{'a': [1, 2.5, None, True, 'é', 1e+16, -0.0, 1e-05], "k'": {}, '': [], 'b': False}"#;
        assert_eq!(repr(&v), want);
        assert_eq!(str(&v, Repr::Strict).unwrap(), want);
        // str() of a str is itself; of a scalar, its repr.
        assert_eq!(str(&json!("it's\n"), Repr::Strict).unwrap(), "it's\n");
        assert!(matches!(
            str(&json!("x"), Repr::Strict),
            Ok(Cow::Borrowed("x"))
        ));
        assert_eq!(str(&json!(null), Repr::Strict).unwrap(), "None");
        assert_eq!(str(&json!(1.0), Repr::Strict).unwrap(), "1.0");
        assert_eq!(repr(&json!("x")), "'x'");
        // A string with a version-dependent code point is itself under str(),
        // but not inside a container.
        assert_eq!(str(&json!("\u{378}"), Repr::Strict).unwrap(), "\u{378}");
        assert_eq!(
            str(&json!({"\u{378}": 1}), Repr::Strict),
            Err(VersionDependent('\u{378}'))
        );
        assert_eq!(repr(&json!({"\u{378}": 1})), r"{'\u0378': 1}");
    }

    #[test]
    fn float_repr_matches_python() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
        ] {
            let mut s = String::new();
            push_float_repr(&mut s, f);
            assert_eq!(s, want);
        }
    }

    /// `float(t)` for each `t` below under Python 3.11.7, 3.12.1 and 3.13.0
    /// (all three agree): the value, or `None` where it raised ValueError.
    #[test]
    fn float_of_str_matches_python() {
        for (t, want) in [
            ("\u{1c}1.5", None),
            ("1.5\u{1f}", None),
            (" 1.5 ", Some(1.5)),
            ("\t1.5\n", Some(1.5)),
            ("\u{b}1.5\u{c}", Some(1.5)),
            ("\u{85}1.5", Some(1.5)),
            ("\u{a0}1.5\u{3000}", Some(1.5)),
            ("\u{200b}1.5", None),
            ("\u{1c}1.5\u{a0}", None),
            ("١.٥", Some(1.5)),
            ("1_0.5", Some(10.5)),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("1_.5", None),
            ("+-inf", None),
            (" inf ", Some(f64::INFINITY)),
            ("+Infinity", Some(f64::INFINITY)),
            ("-iNf", Some(f64::NEG_INFINITY)),
            ("1e5", Some(100000.0)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("1e400", Some(f64::INFINITY)),
            ("0x10", None),
            ("", None),
            (" ", None),
            ("\u{1c}\u{a0}1.5", None),
        ] {
            assert_eq!(float_of_str(t), want, "{t:?}");
        }
        for t in ["nan", "-NaN", "+nan"] {
            assert!(float_of_str(t).is_some_and(f64::is_nan), "{t:?}");
        }
    }

    /// pydantic 2.14.4 (pydantic-core 2.50.5), TypeAdapter(float).validate_python(t).
    #[test]
    fn lax_float_of_str_matches_pydantic() {
        for (t, want) in [
            (" 0.5 ", Some(0.5)),
            ("\u{1c}0.5", None),
            ("0.5\u{85}", Some(0.5)),
            ("\u{a0}0.5", Some(0.5)),
            ("0_0.5", Some(0.5)),
            (" 0_0.5", None),
            ("0_.5", Some(0.5)),
            ("٠.٥", None),
            ("+.5", Some(0.5)),
            ("5e-1", Some(0.5)),
            (" inf", Some(f64::INFINITY)),
            ("0.5\u{b}", Some(0.5)),
        ] {
            assert_eq!(lax_float_of_str(t), want, "{t:?}");
        }
        assert!(lax_float_of_str("nan").is_some_and(f64::is_nan));
    }

    /// pydantic 2.14.4 / pydantic-core 2.50.5: `TypeAdapter(int).validate_python(v)`
    /// for each `v` below (`None`: it raised). Also compared on 100,896
    /// generated strings (every string of up to 4 of `05_.-+ `, and random ones
    /// with U+001C, U+00A0, U+0665, tabs, `e`, `x`): no difference but
    /// integers past i128, which pydantic reads and `lax_int` refuses.
    #[test]
    fn lax_int_matches_pydantic() {
        for (v, want) in [
            (json!("0-5"), Some(-5)),
            (json!(" 0_5 "), Some(5)),
            (json!("+5.00"), Some(5)),
            (json!("1_0.0"), Some(10)),
            (json!("5."), None),
            (json!("1e3"), None),
            (json!("\u{665}"), None),
            (json!("\u{1c}5"), None),
            (json!("\u{85}5"), Some(5)),
            (json!("\u{a0}5\u{3000}"), Some(5)),
            (json!("5\u{1f}"), None),
            (json!("-0.0"), Some(0)),
            (json!("00"), Some(0)),
            (json!("+-1"), None),
            (json!("-+1"), None),
            (json!("--1"), None),
            (json!("1__0"), None),
            (json!("5_000.000_0"), None),
            (json!(" -7 "), Some(-7)),
            (json!("0x10"), None),
            (json!(9.2e18), Some(9_200_000_000_000_000_000)),
            (json!(-9.2e18), Some(-9_200_000_000_000_000_000)),
            (json!(9_223_372_036_854_775_808.0_f64), None), // 2**63
            (json!(-9_223_372_036_854_775_808.0_f64), None),
            (json!(5.0), Some(5)),
            (json!(-0.0), Some(0)),
            (json!(1e300), None),
            (json!(2.5), None),
            (json!(true), Some(1)),
            (json!(false), Some(0)),
        ] {
            assert_eq!(lax_int(&v), want, "{v}");
        }
    }

    /// pydantic 2.14.4: `TypeAdapter(bool).validate_python(v)`; no stripping at all.
    #[test]
    fn lax_bool_matches_pydantic() {
        for (v, want) in [
            (json!(0), Some(false)),
            (json!(1), Some(true)),
            (json!(2), None),
            (json!(0.0), Some(false)),
            (json!(1.0), Some(true)),
            (json!(-0.0), Some(false)),
            (json!(0.5), None),
            (json!(" 1"), None),
            (json!("\u{1c}yes"), None),
            (json!("YES"), Some(true)),
            (json!("oN"), Some(true)),
            (json!("F"), Some(false)),
            (json!("n"), Some(false)),
            (json!(""), None),
            (json!("\u{212a}"), None),
        ] {
            assert_eq!(lax_bool(&v), want, "{v}");
        }
    }

    #[test]
    fn python_equality_and_strip() {
        assert!(eq(&json!(1), &json!(1.0)));
        assert!(eq(&json!(true), &json!(1)));
        assert!(eq(&json!({"a": 1, "b": 2}), &json!({"b": 2, "a": 1})));
        assert!(!eq(&json!("1"), &json!(1)));
        assert!(!eq(&json!(null), &json!(false)));
        // " \x1c\t a \u{3000}".strip() == "a"; "\u{200b}a".strip() keeps the ZWSP.
        assert_eq!(strip(" \u{1c}\t a \u{3000}"), "a");
        assert_eq!(strip("\u{200b}a"), "\u{200b}a");
        assert_eq!(strip("\u{85}\u{a0}"), "");
        assert!(!truthy(&json!("")) && truthy(&json!([0])));
    }
}
