//! DeepSeek-V3.2's chat encoder, as SGLang 0.5.23 runs it:
//! `sglang/srt/entrypoints/openai/encoding_dsv32.py`, ported function by
//! function (each Rust function names the Python one it mirrors).
//!
//! Only the encoding half is ported (`encode_messages` and everything it
//! calls). The completion parser (`parse_message_from_completion_text`,
//! `parse_tool_calls`, `_read_until_stop`, `decode_dsml_to_arguments`,
//! `tool_calls_to_openai_format`) never runs on a prompt.
//!
//! Messages are the dicts SGLang passes (`serving_chat.py`, the
//! `elif self.chat_encoding_spec is not None:` branch of
//! `_apply_jinja_template`). That branch prepares them first, and the caller
//! must do the same before [`encode_messages`]: `msg.model_dump()` of each
//! request message, assistant `tool_calls[*].function.arguments` strings
//! parsed to dicts (`normalize_assistant_tool_call_arguments`, strict),
//! `None` content set to `""`, list content flattened to its text parts
//! joined by `" "` (`process_content_for_template_format`), a final
//! assistant message turned into a user message (or cut off as the
//! `continue_final_message` prefix), `{"role": "system", "content": ""}`
//! inserted first unless the first message is a system message, and the
//! request's tools (`tool.model_dump()`) set as `messages[0]["tools"]`.
//!
//! Where Python would raise, these functions return `Err` with
//! `"{ExceptionType}: {message}"` (Python's message; serde_json's wording
//! for a `JSONDecodeError`). Where Python would produce a prompt from an
//! input this port cannot read as Python does, they return an `Err` of kind
//! `Unmodelled` instead of a different prompt: tool call arguments strings
//! serde_json reads differently from `json.loads` ([`json_loads`]), and
//! `str()` of a list or dict holding a code point unassigned in Python 3.11's
//! Unicode 14.0 (`str_of`). Neither reaches `encode_messages` from SGLang's
//! chat endpoint, which passes string contents and dict arguments.
//!
//! `render_message` rescans the message list on every call in Python
//! (quadratic in the number of messages); here the two scans run once per
//! list (`Scans`), with the same results.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::count::py::{self, Dumps};

/// `TOOLS_SYSTEM_TEMPLATE`.
pub const TOOLS_SYSTEM_TEMPLATE: &str = r#"## Tools
You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<{dsml_token}function_calls>" block like the following as part of your reply to the user:
<{dsml_token}function_calls>
<{dsml_token}invoke name="$FUNCTION_NAME">
<{dsml_token}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml_token}parameter>
...
</{dsml_token}invoke>
<{dsml_token}invoke name="$FUNCTION_NAME2">
...
</{dsml_token}invoke>
</{dsml_token}function_calls>
String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).
If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:
<{dsml_token}function_calls>
...
</{dsml_token}function_calls>
<function_results>
...
</function_results>
{thinking_start_token}...thinking about results{thinking_end_token}
Here are the functions available in JSONSchema format:
<functions>
{tool_schemas}
</functions>
"#;

/// `bos_token`.
pub const BOS_TOKEN: &str = "<｜begin▁of▁sentence｜>";
/// `eos_token`.
pub const EOS_TOKEN: &str = "<｜end▁of▁sentence｜>";
/// `thinking_start_token`.
pub const THINKING_START_TOKEN: &str = "<think>";
/// `thinking_end_token`.
pub const THINKING_END_TOKEN: &str = "</think>";
/// `dsml_token`.
pub const DSML_TOKEN: &str = "｜DSML｜";
/// `system_msg_template`.
const SYSTEM_MSG_TEMPLATE: &str = "{content}";
/// `user_msg_template`.
const USER_MSG_TEMPLATE: &str = "<｜User｜>{content}<｜Assistant｜>";
/// `assistant_msg_template`.
const ASSISTANT_MSG_TEMPLATE: &str = "{reasoning}{content}{tool_calls}<｜end▁of▁sentence｜>";
/// `thinking_template`.
const THINKING_TEMPLATE: &str = "{reasoning_content}";
/// `response_format_template`.
const RESPONSE_FORMAT_TEMPLATE: &str =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}";
/// `tool_call_template`.
const TOOL_CALL_TEMPLATE: &str =
    "<{dsml_token}invoke name=\"{name}\">\n{arguments}\n</{dsml_token}invoke>";
/// `tool_calls_template`.
const TOOL_CALLS_TEMPLATE: &str =
    "<{dsml_token}function_calls>\n{tool_calls}\n</{dsml_token}function_calls>";
/// `tool_output_template`.
const TOOL_OUTPUT_TEMPLATE: &str = "\n<result>{content}</result>";
/// `p_dsml_template` (local to `encode_arguments_to_dsml`).
const P_DSML_TEMPLATE: &str =
    "<{dsml_token}parameter name=\"{key}\" string=\"{is_str}\">{value}</{dsml_token}parameter>";

/// SGLang's `ThinkingMode(str, Enum)` (`serving_chat.py`), the value the
/// call site passes as `thinking_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingMode {
    /// `ThinkingMode.CHAT == "chat"`.
    Chat,
    /// `ThinkingMode.THINKING == "thinking"`.
    Thinking,
}

impl fmt::Display for ThinkingMode {
    /// `f"{thinking_mode}"` of the enum member under Python 3.11, which is
    /// how it appears in SGLang's error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThinkingMode::Chat => "ThinkingMode.CHAT",
            ThinkingMode::Thinking => "ThinkingMode.THINKING",
        })
    }
}

/// What Python raises: `"{type(e).__name__}: {e}"` (e.g.
/// `"DS32EncodingError: No tool calls but found tool output"`,
/// `"KeyError: 'function'"`), or `"Unmodelled: ..."` where Python would
/// produce a prompt this port refuses to guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsv32Error(pub String);

impl Dsv32Error {
    /// The Python exception type name (or `Unmodelled`).
    pub fn kind(&self) -> &str {
        self.0.split_once(": ").map_or(self.0.as_str(), |(k, _)| k)
    }
}

impl fmt::Display for Dsv32Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Dsv32Error {}

fn error(kind: &str, message: impl fmt::Display) -> Dsv32Error {
    Dsv32Error(format!("{kind}: {message}"))
}

/// `raise DS32EncodingError(message)`.
fn encoding_error(message: impl fmt::Display) -> Dsv32Error {
    error("DS32EncodingError", message)
}

// ---------------------------------------------------------------------------
// The Python operations the encoder applies to message values.
// ---------------------------------------------------------------------------

static NONE: Value = Value::Null;

/// `type(v).__name__`.
fn type_name(v: &Value) -> &'static str {
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

/// `v.get(key)` (missing keys read as `None`).
fn get<'a>(v: &'a Value, key: &str) -> Result<&'a Value, Dsv32Error> {
    match v {
        Value::Object(map) => Ok(map.get(key).unwrap_or(&NONE)),
        _ => Err(error(
            "AttributeError",
            format!("'{}' object has no attribute 'get'", type_name(v)),
        )),
    }
}

/// `v[key]` for a `str` key.
fn getitem<'a>(v: &'a Value, key: &str) -> Result<&'a Value, Dsv32Error> {
    match v {
        Value::Object(map) => map
            .get(key)
            .ok_or_else(|| error("KeyError", repr(&key.into()))),
        Value::Array(_) => Err(error(
            "TypeError",
            "list indices must be integers or slices, not str",
        )),
        Value::String(_) => Err(error(
            "TypeError",
            "string indices must be integers, not 'str'",
        )),
        _ => Err(error(
            "TypeError",
            format!("'{}' object is not subscriptable", type_name(v)),
        )),
    }
}

/// `item[key]` for an item of [`iterate`]: only a list yields values that
/// can be subscripted by a string; dict keys and characters are `str`.
fn getitem_of<'a>(item: &Cow<'a, Value>, key: &str) -> Result<&'a Value, Dsv32Error> {
    match item {
        Cow::Borrowed(v) => getitem(v, key),
        Cow::Owned(v) => Err(getitem(v, key)
            .err()
            .unwrap_or_else(|| error("TypeError", "string indices must be integers, not 'str'"))),
    }
}

/// `for item in v`: a list's items, a dict's keys, a string's characters.
fn iterate(v: &Value) -> Result<Vec<Cow<'_, Value>>, Dsv32Error> {
    match v {
        Value::Array(items) => Ok(items.iter().map(Cow::Borrowed).collect()),
        Value::Object(map) => Ok(map.keys().map(|k| Cow::Owned(k.as_str().into())).collect()),
        Value::String(s) => Ok(s
            .chars()
            .map(|c| Cow::Owned(c.to_string().into()))
            .collect()),
        _ => Err(error(
            "TypeError",
            format!("'{}' object is not iterable", type_name(v)),
        )),
    }
}

/// `len(v)`.
fn len(v: &Value) -> Result<usize, Dsv32Error> {
    match v {
        Value::String(s) => Ok(s.chars().count()),
        Value::Array(items) => Ok(items.len()),
        Value::Object(map) => Ok(map.len()),
        _ => Err(error(
            "TypeError",
            format!("object of type '{}' has no len()", type_name(v)),
        )),
    }
}

/// `v == s` for a `str` literal `s`.
fn is_str(v: &Value, s: &str) -> bool {
    v.as_str() == Some(s)
}

/// `str(v)`: what `str.format` inserts for `{v}` in the prompt. A string is
/// itself; anything else is its `repr`, which is refused (`Unmodelled`) if
/// it holds a code point unassigned in Unicode 14.0, whose printability
/// (and so whether `repr` escapes it) depends on the Python version.
fn str_of(v: &Value) -> Result<Cow<'_, str>, Dsv32Error> {
    match v {
        Value::String(s) => Ok(Cow::Borrowed(s)),
        _ => {
            let mut out = String::new();
            push_repr(&mut out, v, true).map_err(|c| {
                error(
                    "Unmodelled",
                    format!(
                        "repr() of U+{:04X}, unassigned in Python 3.11's Unicode 14.0 and assigned later",
                        c as u32
                    ),
                )
            })?;
            Ok(Cow::Owned(out))
        }
    }
}

/// `str(v or "")`, as in `content or ""`.
fn str_or_empty(v: &Value) -> Result<Cow<'_, str>, Dsv32Error> {
    if py::truthy(v) {
        str_of(v)
    } else {
        Ok(Cow::Borrowed(""))
    }
}

/// `str(v)` in an exception message: as [`str_of`], with unassigned code
/// points escaped as Python 3.11 escapes them.
fn str_in_message(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        _ => Cow::Owned(repr(v)),
    }
}

/// `repr(v)` (Python 3.11) for a value parsed from JSON.
fn repr(v: &Value) -> String {
    let mut out = String::new();
    // Not strict: nothing to refuse.
    let _ = push_repr(&mut out, v, false);
    out
}

/// `repr(v)`; `strict` stops at the first code point unassigned in Unicode
/// 14.0 and returns it.
fn push_repr(out: &mut String, v: &Value, strict: bool) -> Result<(), char> {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        // `repr(int)` is its digits, `repr(float)` as json.dumps writes it.
        Value::Number(n) => py::push_json_number(out, n),
        Value::String(s) => push_str_repr(out, s, strict)?,
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_repr(out, item, strict)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_str_repr(out, k, strict)?;
                out.push_str(": ");
                push_repr(out, item, strict)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `repr(str)` (CPython's `unicode_repr`): single quotes unless the text
/// has `'` and no `"`; `\\`, the quote, `\t`, `\n`, `\r` escaped; other
/// characters that are not `str.isprintable()` as `\xhh`, `\uhhhh` or
/// `\Uhhhhhhhh`.
fn push_str_repr(out: &mut String, s: &str, strict: bool) -> Result<(), char> {
    use std::fmt::Write as _;
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        let code = c as u32;
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            _ if code < 0x20 || code == 0x7f => {
                let _ = write!(out, "\\x{code:02x}");
            }
            c if code < 0x7f => out.push(c),
            c => {
                let printable = match printability(c) {
                    Printability::Printable => true,
                    Printability::NotPrintable => false,
                    Printability::Unassigned if strict => return Err(c),
                    Printability::Unassigned => false,
                };
                if printable {
                    out.push(c);
                } else if code <= 0xff {
                    let _ = write!(out, "\\x{code:02x}");
                } else if code <= 0xffff {
                    let _ = write!(out, "\\u{code:04x}");
                } else {
                    let _ = write!(out, "\\U{code:08x}");
                }
            }
        }
    }
    out.push(quote);
    Ok(())
}

enum Printability {
    Printable,
    /// Assigned, of category Cc, Cf, Co, Zl, Zp or Zs.
    NotPrintable,
    /// Unassigned (Cn) in Unicode 14.0: not printable for Python 3.11.
    Unassigned,
}

/// `str.isprintable()` of a non-ASCII character under Python 3.11
/// (Unicode 14.0), telling unassigned code points apart.
fn printability(c: char) -> Printability {
    // The assigned code points >= U+0080 of categories Cc, Cf, Co, Zl, Zp, Zs.
    const NOT_PRINTABLE: [(u32, u32); 27] = [
        (0x80, 0xA0),
        (0xAD, 0xAD),
        (0x600, 0x605),
        (0x61C, 0x61C),
        (0x6DD, 0x6DD),
        (0x70F, 0x70F),
        (0x890, 0x891),
        (0x8E2, 0x8E2),
        (0x1680, 0x1680),
        (0x180E, 0x180E),
        (0x2000, 0x200F),
        (0x2028, 0x202F),
        (0x205F, 0x2064),
        (0x2066, 0x206F),
        (0x3000, 0x3000),
        (0xE000, 0xF8FF),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x13438),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
        (0xF0000, 0xFFFFD),
        (0x100000, 0x10FFFD),
    ];
    let code = c as u32;
    if NOT_PRINTABLE
        .iter()
        .any(|&(lo, hi)| lo <= code && code <= hi)
    {
        return Printability::NotPrintable;
    }
    // Binary search over the (first, last) pairs of UNASSIGNED_14.
    let (mut lo, mut hi) = (0, UNASSIGNED_14.len() / 2);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if code < UNASSIGNED_14[2 * mid] {
            hi = mid;
        } else if code > UNASSIGNED_14[2 * mid + 1] {
            lo = mid + 1;
        } else {
            return Printability::Unassigned;
        }
    }
    Printability::Printable
}

/// The unassigned (Cn) code points >= U+0080 of Unicode 14.0 (Python 3.11's
/// `unicodedata`), as sorted inclusive (first, last) pairs. Generated by:
///
/// ```python
/// import unicodedata as u; r = []; s = None
/// for c in range(0x80, 0x110001):
///     cn = c < 0x110000 and u.category(chr(c)) == "Cn"
///     if cn and s is None: s = c
///     if not cn and s is not None: r.append((s, c - 1)); s = None
/// ```
#[rustfmt::skip]
const UNASSIGNED_14: [u32; 1396] = [
    0x378, 0x379, 0x380, 0x383, 0x38B, 0x38B, 0x38D, 0x38D, 0x3A2, 0x3A2,
    0x530, 0x530, 0x557, 0x558, 0x58B, 0x58C, 0x590, 0x590, 0x5C8, 0x5CF,
    0x5EB, 0x5EE, 0x5F5, 0x5FF, 0x70E, 0x70E, 0x74B, 0x74C, 0x7B2, 0x7BF,
    0x7FB, 0x7FC, 0x82E, 0x82F, 0x83F, 0x83F, 0x85C, 0x85D, 0x85F, 0x85F,
    0x86B, 0x86F, 0x88F, 0x88F, 0x892, 0x897, 0x984, 0x984, 0x98D, 0x98E,
    0x991, 0x992, 0x9A9, 0x9A9, 0x9B1, 0x9B1, 0x9B3, 0x9B5, 0x9BA, 0x9BB,
    0x9C5, 0x9C6, 0x9C9, 0x9CA, 0x9CF, 0x9D6, 0x9D8, 0x9DB, 0x9DE, 0x9DE,
    0x9E4, 0x9E5, 0x9FF, 0xA00, 0xA04, 0xA04, 0xA0B, 0xA0E, 0xA11, 0xA12,
    0xA29, 0xA29, 0xA31, 0xA31, 0xA34, 0xA34, 0xA37, 0xA37, 0xA3A, 0xA3B,
    0xA3D, 0xA3D, 0xA43, 0xA46, 0xA49, 0xA4A, 0xA4E, 0xA50, 0xA52, 0xA58,
    0xA5D, 0xA5D, 0xA5F, 0xA65, 0xA77, 0xA80, 0xA84, 0xA84, 0xA8E, 0xA8E,
    0xA92, 0xA92, 0xAA9, 0xAA9, 0xAB1, 0xAB1, 0xAB4, 0xAB4, 0xABA, 0xABB,
    0xAC6, 0xAC6, 0xACA, 0xACA, 0xACE, 0xACF, 0xAD1, 0xADF, 0xAE4, 0xAE5,
    0xAF2, 0xAF8, 0xB00, 0xB00, 0xB04, 0xB04, 0xB0D, 0xB0E, 0xB11, 0xB12,
    0xB29, 0xB29, 0xB31, 0xB31, 0xB34, 0xB34, 0xB3A, 0xB3B, 0xB45, 0xB46,
    0xB49, 0xB4A, 0xB4E, 0xB54, 0xB58, 0xB5B, 0xB5E, 0xB5E, 0xB64, 0xB65,
    0xB78, 0xB81, 0xB84, 0xB84, 0xB8B, 0xB8D, 0xB91, 0xB91, 0xB96, 0xB98,
    0xB9B, 0xB9B, 0xB9D, 0xB9D, 0xBA0, 0xBA2, 0xBA5, 0xBA7, 0xBAB, 0xBAD,
    0xBBA, 0xBBD, 0xBC3, 0xBC5, 0xBC9, 0xBC9, 0xBCE, 0xBCF, 0xBD1, 0xBD6,
    0xBD8, 0xBE5, 0xBFB, 0xBFF, 0xC0D, 0xC0D, 0xC11, 0xC11, 0xC29, 0xC29,
    0xC3A, 0xC3B, 0xC45, 0xC45, 0xC49, 0xC49, 0xC4E, 0xC54, 0xC57, 0xC57,
    0xC5B, 0xC5C, 0xC5E, 0xC5F, 0xC64, 0xC65, 0xC70, 0xC76, 0xC8D, 0xC8D,
    0xC91, 0xC91, 0xCA9, 0xCA9, 0xCB4, 0xCB4, 0xCBA, 0xCBB, 0xCC5, 0xCC5,
    0xCC9, 0xCC9, 0xCCE, 0xCD4, 0xCD7, 0xCDC, 0xCDF, 0xCDF, 0xCE4, 0xCE5,
    0xCF0, 0xCF0, 0xCF3, 0xCFF, 0xD0D, 0xD0D, 0xD11, 0xD11, 0xD45, 0xD45,
    0xD49, 0xD49, 0xD50, 0xD53, 0xD64, 0xD65, 0xD80, 0xD80, 0xD84, 0xD84,
    0xD97, 0xD99, 0xDB2, 0xDB2, 0xDBC, 0xDBC, 0xDBE, 0xDBF, 0xDC7, 0xDC9,
    0xDCB, 0xDCE, 0xDD5, 0xDD5, 0xDD7, 0xDD7, 0xDE0, 0xDE5, 0xDF0, 0xDF1,
    0xDF5, 0xE00, 0xE3B, 0xE3E, 0xE5C, 0xE80, 0xE83, 0xE83, 0xE85, 0xE85,
    0xE8B, 0xE8B, 0xEA4, 0xEA4, 0xEA6, 0xEA6, 0xEBE, 0xEBF, 0xEC5, 0xEC5,
    0xEC7, 0xEC7, 0xECE, 0xECF, 0xEDA, 0xEDB, 0xEE0, 0xEFF, 0xF48, 0xF48,
    0xF6D, 0xF70, 0xF98, 0xF98, 0xFBD, 0xFBD, 0xFCD, 0xFCD, 0xFDB, 0xFFF,
    0x10C6, 0x10C6, 0x10C8, 0x10CC, 0x10CE, 0x10CF, 0x1249, 0x1249, 0x124E, 0x124F,
    0x1257, 0x1257, 0x1259, 0x1259, 0x125E, 0x125F, 0x1289, 0x1289, 0x128E, 0x128F,
    0x12B1, 0x12B1, 0x12B6, 0x12B7, 0x12BF, 0x12BF, 0x12C1, 0x12C1, 0x12C6, 0x12C7,
    0x12D7, 0x12D7, 0x1311, 0x1311, 0x1316, 0x1317, 0x135B, 0x135C, 0x137D, 0x137F,
    0x139A, 0x139F, 0x13F6, 0x13F7, 0x13FE, 0x13FF, 0x169D, 0x169F, 0x16F9, 0x16FF,
    0x1716, 0x171E, 0x1737, 0x173F, 0x1754, 0x175F, 0x176D, 0x176D, 0x1771, 0x1771,
    0x1774, 0x177F, 0x17DE, 0x17DF, 0x17EA, 0x17EF, 0x17FA, 0x17FF, 0x181A, 0x181F,
    0x1879, 0x187F, 0x18AB, 0x18AF, 0x18F6, 0x18FF, 0x191F, 0x191F, 0x192C, 0x192F,
    0x193C, 0x193F, 0x1941, 0x1943, 0x196E, 0x196F, 0x1975, 0x197F, 0x19AC, 0x19AF,
    0x19CA, 0x19CF, 0x19DB, 0x19DD, 0x1A1C, 0x1A1D, 0x1A5F, 0x1A5F, 0x1A7D, 0x1A7E,
    0x1A8A, 0x1A8F, 0x1A9A, 0x1A9F, 0x1AAE, 0x1AAF, 0x1ACF, 0x1AFF, 0x1B4D, 0x1B4F,
    0x1B7F, 0x1B7F, 0x1BF4, 0x1BFB, 0x1C38, 0x1C3A, 0x1C4A, 0x1C4C, 0x1C89, 0x1C8F,
    0x1CBB, 0x1CBC, 0x1CC8, 0x1CCF, 0x1CFB, 0x1CFF, 0x1F16, 0x1F17, 0x1F1E, 0x1F1F,
    0x1F46, 0x1F47, 0x1F4E, 0x1F4F, 0x1F58, 0x1F58, 0x1F5A, 0x1F5A, 0x1F5C, 0x1F5C,
    0x1F5E, 0x1F5E, 0x1F7E, 0x1F7F, 0x1FB5, 0x1FB5, 0x1FC5, 0x1FC5, 0x1FD4, 0x1FD5,
    0x1FDC, 0x1FDC, 0x1FF0, 0x1FF1, 0x1FF5, 0x1FF5, 0x1FFF, 0x1FFF, 0x2065, 0x2065,
    0x2072, 0x2073, 0x208F, 0x208F, 0x209D, 0x209F, 0x20C1, 0x20CF, 0x20F1, 0x20FF,
    0x218C, 0x218F, 0x2427, 0x243F, 0x244B, 0x245F, 0x2B74, 0x2B75, 0x2B96, 0x2B96,
    0x2CF4, 0x2CF8, 0x2D26, 0x2D26, 0x2D28, 0x2D2C, 0x2D2E, 0x2D2F, 0x2D68, 0x2D6E,
    0x2D71, 0x2D7E, 0x2D97, 0x2D9F, 0x2DA7, 0x2DA7, 0x2DAF, 0x2DAF, 0x2DB7, 0x2DB7,
    0x2DBF, 0x2DBF, 0x2DC7, 0x2DC7, 0x2DCF, 0x2DCF, 0x2DD7, 0x2DD7, 0x2DDF, 0x2DDF,
    0x2E5E, 0x2E7F, 0x2E9A, 0x2E9A, 0x2EF4, 0x2EFF, 0x2FD6, 0x2FEF, 0x2FFC, 0x2FFF,
    0x3040, 0x3040, 0x3097, 0x3098, 0x3100, 0x3104, 0x3130, 0x3130, 0x318F, 0x318F,
    0x31E4, 0x31EF, 0x321F, 0x321F, 0xA48D, 0xA48F, 0xA4C7, 0xA4CF, 0xA62C, 0xA63F,
    0xA6F8, 0xA6FF, 0xA7CB, 0xA7CF, 0xA7D2, 0xA7D2, 0xA7D4, 0xA7D4, 0xA7DA, 0xA7F1,
    0xA82D, 0xA82F, 0xA83A, 0xA83F, 0xA878, 0xA87F, 0xA8C6, 0xA8CD, 0xA8DA, 0xA8DF,
    0xA954, 0xA95E, 0xA97D, 0xA97F, 0xA9CE, 0xA9CE, 0xA9DA, 0xA9DD, 0xA9FF, 0xA9FF,
    0xAA37, 0xAA3F, 0xAA4E, 0xAA4F, 0xAA5A, 0xAA5B, 0xAAC3, 0xAADA, 0xAAF7, 0xAB00,
    0xAB07, 0xAB08, 0xAB0F, 0xAB10, 0xAB17, 0xAB1F, 0xAB27, 0xAB27, 0xAB2F, 0xAB2F,
    0xAB6C, 0xAB6F, 0xABEE, 0xABEF, 0xABFA, 0xABFF, 0xD7A4, 0xD7AF, 0xD7C7, 0xD7CA,
    0xD7FC, 0xD7FF, 0xFA6E, 0xFA6F, 0xFADA, 0xFAFF, 0xFB07, 0xFB12, 0xFB18, 0xFB1C,
    0xFB37, 0xFB37, 0xFB3D, 0xFB3D, 0xFB3F, 0xFB3F, 0xFB42, 0xFB42, 0xFB45, 0xFB45,
    0xFBC3, 0xFBD2, 0xFD90, 0xFD91, 0xFDC8, 0xFDCE, 0xFDD0, 0xFDEF, 0xFE1A, 0xFE1F,
    0xFE53, 0xFE53, 0xFE67, 0xFE67, 0xFE6C, 0xFE6F, 0xFE75, 0xFE75, 0xFEFD, 0xFEFE,
    0xFF00, 0xFF00, 0xFFBF, 0xFFC1, 0xFFC8, 0xFFC9, 0xFFD0, 0xFFD1, 0xFFD8, 0xFFD9,
    0xFFDD, 0xFFDF, 0xFFE7, 0xFFE7, 0xFFEF, 0xFFF8, 0xFFFE, 0xFFFF, 0x1000C, 0x1000C,
    0x10027, 0x10027, 0x1003B, 0x1003B, 0x1003E, 0x1003E, 0x1004E, 0x1004F, 0x1005E, 0x1007F,
    0x100FB, 0x100FF, 0x10103, 0x10106, 0x10134, 0x10136, 0x1018F, 0x1018F, 0x1019D, 0x1019F,
    0x101A1, 0x101CF, 0x101FE, 0x1027F, 0x1029D, 0x1029F, 0x102D1, 0x102DF, 0x102FC, 0x102FF,
    0x10324, 0x1032C, 0x1034B, 0x1034F, 0x1037B, 0x1037F, 0x1039E, 0x1039E, 0x103C4, 0x103C7,
    0x103D6, 0x103FF, 0x1049E, 0x1049F, 0x104AA, 0x104AF, 0x104D4, 0x104D7, 0x104FC, 0x104FF,
    0x10528, 0x1052F, 0x10564, 0x1056E, 0x1057B, 0x1057B, 0x1058B, 0x1058B, 0x10593, 0x10593,
    0x10596, 0x10596, 0x105A2, 0x105A2, 0x105B2, 0x105B2, 0x105BA, 0x105BA, 0x105BD, 0x105FF,
    0x10737, 0x1073F, 0x10756, 0x1075F, 0x10768, 0x1077F, 0x10786, 0x10786, 0x107B1, 0x107B1,
    0x107BB, 0x107FF, 0x10806, 0x10807, 0x10809, 0x10809, 0x10836, 0x10836, 0x10839, 0x1083B,
    0x1083D, 0x1083E, 0x10856, 0x10856, 0x1089F, 0x108A6, 0x108B0, 0x108DF, 0x108F3, 0x108F3,
    0x108F6, 0x108FA, 0x1091C, 0x1091E, 0x1093A, 0x1093E, 0x10940, 0x1097F, 0x109B8, 0x109BB,
    0x109D0, 0x109D1, 0x10A04, 0x10A04, 0x10A07, 0x10A0B, 0x10A14, 0x10A14, 0x10A18, 0x10A18,
    0x10A36, 0x10A37, 0x10A3B, 0x10A3E, 0x10A49, 0x10A4F, 0x10A59, 0x10A5F, 0x10AA0, 0x10ABF,
    0x10AE7, 0x10AEA, 0x10AF7, 0x10AFF, 0x10B36, 0x10B38, 0x10B56, 0x10B57, 0x10B73, 0x10B77,
    0x10B92, 0x10B98, 0x10B9D, 0x10BA8, 0x10BB0, 0x10BFF, 0x10C49, 0x10C7F, 0x10CB3, 0x10CBF,
    0x10CF3, 0x10CF9, 0x10D28, 0x10D2F, 0x10D3A, 0x10E5F, 0x10E7F, 0x10E7F, 0x10EAA, 0x10EAA,
    0x10EAE, 0x10EAF, 0x10EB2, 0x10EFF, 0x10F28, 0x10F2F, 0x10F5A, 0x10F6F, 0x10F8A, 0x10FAF,
    0x10FCC, 0x10FDF, 0x10FF7, 0x10FFF, 0x1104E, 0x11051, 0x11076, 0x1107E, 0x110C3, 0x110CC,
    0x110CE, 0x110CF, 0x110E9, 0x110EF, 0x110FA, 0x110FF, 0x11135, 0x11135, 0x11148, 0x1114F,
    0x11177, 0x1117F, 0x111E0, 0x111E0, 0x111F5, 0x111FF, 0x11212, 0x11212, 0x1123F, 0x1127F,
    0x11287, 0x11287, 0x11289, 0x11289, 0x1128E, 0x1128E, 0x1129E, 0x1129E, 0x112AA, 0x112AF,
    0x112EB, 0x112EF, 0x112FA, 0x112FF, 0x11304, 0x11304, 0x1130D, 0x1130E, 0x11311, 0x11312,
    0x11329, 0x11329, 0x11331, 0x11331, 0x11334, 0x11334, 0x1133A, 0x1133A, 0x11345, 0x11346,
    0x11349, 0x1134A, 0x1134E, 0x1134F, 0x11351, 0x11356, 0x11358, 0x1135C, 0x11364, 0x11365,
    0x1136D, 0x1136F, 0x11375, 0x113FF, 0x1145C, 0x1145C, 0x11462, 0x1147F, 0x114C8, 0x114CF,
    0x114DA, 0x1157F, 0x115B6, 0x115B7, 0x115DE, 0x115FF, 0x11645, 0x1164F, 0x1165A, 0x1165F,
    0x1166D, 0x1167F, 0x116BA, 0x116BF, 0x116CA, 0x116FF, 0x1171B, 0x1171C, 0x1172C, 0x1172F,
    0x11747, 0x117FF, 0x1183C, 0x1189F, 0x118F3, 0x118FE, 0x11907, 0x11908, 0x1190A, 0x1190B,
    0x11914, 0x11914, 0x11917, 0x11917, 0x11936, 0x11936, 0x11939, 0x1193A, 0x11947, 0x1194F,
    0x1195A, 0x1199F, 0x119A8, 0x119A9, 0x119D8, 0x119D9, 0x119E5, 0x119FF, 0x11A48, 0x11A4F,
    0x11AA3, 0x11AAF, 0x11AF9, 0x11BFF, 0x11C09, 0x11C09, 0x11C37, 0x11C37, 0x11C46, 0x11C4F,
    0x11C6D, 0x11C6F, 0x11C90, 0x11C91, 0x11CA8, 0x11CA8, 0x11CB7, 0x11CFF, 0x11D07, 0x11D07,
    0x11D0A, 0x11D0A, 0x11D37, 0x11D39, 0x11D3B, 0x11D3B, 0x11D3E, 0x11D3E, 0x11D48, 0x11D4F,
    0x11D5A, 0x11D5F, 0x11D66, 0x11D66, 0x11D69, 0x11D69, 0x11D8F, 0x11D8F, 0x11D92, 0x11D92,
    0x11D99, 0x11D9F, 0x11DAA, 0x11EDF, 0x11EF9, 0x11FAF, 0x11FB1, 0x11FBF, 0x11FF2, 0x11FFE,
    0x1239A, 0x123FF, 0x1246F, 0x1246F, 0x12475, 0x1247F, 0x12544, 0x12F8F, 0x12FF3, 0x12FFF,
    0x1342F, 0x1342F, 0x13439, 0x143FF, 0x14647, 0x167FF, 0x16A39, 0x16A3F, 0x16A5F, 0x16A5F,
    0x16A6A, 0x16A6D, 0x16ABF, 0x16ABF, 0x16ACA, 0x16ACF, 0x16AEE, 0x16AEF, 0x16AF6, 0x16AFF,
    0x16B46, 0x16B4F, 0x16B5A, 0x16B5A, 0x16B62, 0x16B62, 0x16B78, 0x16B7C, 0x16B90, 0x16E3F,
    0x16E9B, 0x16EFF, 0x16F4B, 0x16F4E, 0x16F88, 0x16F8E, 0x16FA0, 0x16FDF, 0x16FE5, 0x16FEF,
    0x16FF2, 0x16FFF, 0x187F8, 0x187FF, 0x18CD6, 0x18CFF, 0x18D09, 0x1AFEF, 0x1AFF4, 0x1AFF4,
    0x1AFFC, 0x1AFFC, 0x1AFFF, 0x1AFFF, 0x1B123, 0x1B14F, 0x1B153, 0x1B163, 0x1B168, 0x1B16F,
    0x1B2FC, 0x1BBFF, 0x1BC6B, 0x1BC6F, 0x1BC7D, 0x1BC7F, 0x1BC89, 0x1BC8F, 0x1BC9A, 0x1BC9B,
    0x1BCA4, 0x1CEFF, 0x1CF2E, 0x1CF2F, 0x1CF47, 0x1CF4F, 0x1CFC4, 0x1CFFF, 0x1D0F6, 0x1D0FF,
    0x1D127, 0x1D128, 0x1D1EB, 0x1D1FF, 0x1D246, 0x1D2DF, 0x1D2F4, 0x1D2FF, 0x1D357, 0x1D35F,
    0x1D379, 0x1D3FF, 0x1D455, 0x1D455, 0x1D49D, 0x1D49D, 0x1D4A0, 0x1D4A1, 0x1D4A3, 0x1D4A4,
    0x1D4A7, 0x1D4A8, 0x1D4AD, 0x1D4AD, 0x1D4BA, 0x1D4BA, 0x1D4BC, 0x1D4BC, 0x1D4C4, 0x1D4C4,
    0x1D506, 0x1D506, 0x1D50B, 0x1D50C, 0x1D515, 0x1D515, 0x1D51D, 0x1D51D, 0x1D53A, 0x1D53A,
    0x1D53F, 0x1D53F, 0x1D545, 0x1D545, 0x1D547, 0x1D549, 0x1D551, 0x1D551, 0x1D6A6, 0x1D6A7,
    0x1D7CC, 0x1D7CD, 0x1DA8C, 0x1DA9A, 0x1DAA0, 0x1DAA0, 0x1DAB0, 0x1DEFF, 0x1DF1F, 0x1DFFF,
    0x1E007, 0x1E007, 0x1E019, 0x1E01A, 0x1E022, 0x1E022, 0x1E025, 0x1E025, 0x1E02B, 0x1E0FF,
    0x1E12D, 0x1E12F, 0x1E13E, 0x1E13F, 0x1E14A, 0x1E14D, 0x1E150, 0x1E28F, 0x1E2AF, 0x1E2BF,
    0x1E2FA, 0x1E2FE, 0x1E300, 0x1E7DF, 0x1E7E7, 0x1E7E7, 0x1E7EC, 0x1E7EC, 0x1E7EF, 0x1E7EF,
    0x1E7FF, 0x1E7FF, 0x1E8C5, 0x1E8C6, 0x1E8D7, 0x1E8FF, 0x1E94C, 0x1E94F, 0x1E95A, 0x1E95D,
    0x1E960, 0x1EC70, 0x1ECB5, 0x1ED00, 0x1ED3E, 0x1EDFF, 0x1EE04, 0x1EE04, 0x1EE20, 0x1EE20,
    0x1EE23, 0x1EE23, 0x1EE25, 0x1EE26, 0x1EE28, 0x1EE28, 0x1EE33, 0x1EE33, 0x1EE38, 0x1EE38,
    0x1EE3A, 0x1EE3A, 0x1EE3C, 0x1EE41, 0x1EE43, 0x1EE46, 0x1EE48, 0x1EE48, 0x1EE4A, 0x1EE4A,
    0x1EE4C, 0x1EE4C, 0x1EE50, 0x1EE50, 0x1EE53, 0x1EE53, 0x1EE55, 0x1EE56, 0x1EE58, 0x1EE58,
    0x1EE5A, 0x1EE5A, 0x1EE5C, 0x1EE5C, 0x1EE5E, 0x1EE5E, 0x1EE60, 0x1EE60, 0x1EE63, 0x1EE63,
    0x1EE65, 0x1EE66, 0x1EE6B, 0x1EE6B, 0x1EE73, 0x1EE73, 0x1EE78, 0x1EE78, 0x1EE7D, 0x1EE7D,
    0x1EE7F, 0x1EE7F, 0x1EE8A, 0x1EE8A, 0x1EE9C, 0x1EEA0, 0x1EEA4, 0x1EEA4, 0x1EEAA, 0x1EEAA,
    0x1EEBC, 0x1EEEF, 0x1EEF2, 0x1EFFF, 0x1F02C, 0x1F02F, 0x1F094, 0x1F09F, 0x1F0AF, 0x1F0B0,
    0x1F0C0, 0x1F0C0, 0x1F0D0, 0x1F0D0, 0x1F0F6, 0x1F0FF, 0x1F1AE, 0x1F1E5, 0x1F203, 0x1F20F,
    0x1F23C, 0x1F23F, 0x1F249, 0x1F24F, 0x1F252, 0x1F25F, 0x1F266, 0x1F2FF, 0x1F6D8, 0x1F6DC,
    0x1F6ED, 0x1F6EF, 0x1F6FD, 0x1F6FF, 0x1F774, 0x1F77F, 0x1F7D9, 0x1F7DF, 0x1F7EC, 0x1F7EF,
    0x1F7F1, 0x1F7FF, 0x1F80C, 0x1F80F, 0x1F848, 0x1F84F, 0x1F85A, 0x1F85F, 0x1F888, 0x1F88F,
    0x1F8AE, 0x1F8AF, 0x1F8B2, 0x1F8FF, 0x1FA54, 0x1FA5F, 0x1FA6E, 0x1FA6F, 0x1FA75, 0x1FA77,
    0x1FA7D, 0x1FA7F, 0x1FA87, 0x1FA8F, 0x1FAAD, 0x1FAAF, 0x1FABB, 0x1FABF, 0x1FAC6, 0x1FACF,
    0x1FADA, 0x1FADF, 0x1FAE8, 0x1FAEF, 0x1FAF7, 0x1FAFF, 0x1FB93, 0x1FB93, 0x1FBCB, 0x1FBEF,
    0x1FBFA, 0x1FFFF, 0x2A6E0, 0x2A6FF, 0x2B739, 0x2B73F, 0x2B81E, 0x2B81F, 0x2CEA2, 0x2CEAF,
    0x2EBE1, 0x2F7FF, 0x2FA1E, 0x2FFFF, 0x3134B, 0xE0000, 0xE0002, 0xE001F, 0xE0080, 0xE00FF,
    0xE01F0, 0xEFFFF, 0xFFFFE, 0xFFFFF, 0x10FFFE, 0x10FFFF,
];

/// `template.format(**fields)` for the module's templates, whose only
/// braces are `{name}` fields: one pass over the template, so a value
/// containing `{...}` is never substituted again.
fn format(template: &str, fields: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + fields.iter().map(|f| f.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            rest = &rest[open..];
            break;
        };
        let name = &after[..close];
        match fields.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(value),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// `json.loads(s)` where serde_json reads what Python reads, else an `Err`.
/// Python's `json` parses a superset of JSON (`NaN`, `Infinity`, lone
/// surrogate escapes, numbers beyond the float range, nesting deeper than
/// serde_json's 128) and keeps integers exact where serde_json reads `-0`
/// and integers beyond 64 bits as floats, which `json.dumps` would print
/// differently. Those are refused (`Unmodelled`); other invalid documents
/// are `JSONDecodeError` (with serde_json's wording, not Python's).
pub fn json_loads(s: &str) -> Result<Value, Dsv32Error> {
    let value: Value = match crate::count::py::json_loads(s) {
        Ok(value) => value,
        Err(e) if python_may_read(s, &e) => {
            return Err(error(
                "Unmodelled",
                format!(
                "tool call arguments Python's json.loads may read and serde_json does not ({e})"
            ),
            ))
        }
        Err(e) => return Err(error("JSONDecodeError", e)),
    };
    if let Some(literal) = int_literal_read_as_float(s) {
        return Err(error(
            "Unmodelled",
            format!(
                "tool call arguments hold the integer `{literal}`, which Python keeps exact and serde_json reads as a float"
            ),
        ));
    }
    Ok(value)
}

/// Whether a document serde_json rejected may be one of the extensions
/// Python's `json.loads` accepts (then refusing it is not claiming Python
/// raises).
fn python_may_read(s: &str, e: &serde_json::Error) -> bool {
    let message = e.to_string();
    let surrogate_escape = s.as_bytes().windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && matches!(w[2], b'd' | b'D')
            && matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    });
    message.contains("number out of range")
        || message.contains("recursion limit")
        || surrogate_escape
        || s.contains("NaN")
        || s.contains("Infinity")
}

/// The first integer literal (no `.`, `e`, `E`) outside strings of a valid
/// JSON text that serde_json parses to a float: `-0` or beyond i64/u64.
fn int_literal_read_as_float(json: &str) -> Option<&str> {
    let b = json.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
        } else if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                i += 1;
            }
            let literal = &json[start..i];
            let integer = !literal.contains(['.', 'e', 'E']);
            if integer
                && (literal == "-0"
                    || (literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err()))
            {
                return Some(literal);
            }
        } else {
            i += 1;
        }
    }
    None
}

// ---------------------------------------------------------------------------
// encoding_dsv32.py
// ---------------------------------------------------------------------------

/// `to_json(value)`: `json.dumps(value, ensure_ascii=False)` (the
/// `ensure_ascii=True` fallback only runs for values JSON cannot hold).
pub fn to_json(value: &Value) -> String {
    py::json_dumps(value, &Dumps::UNICODE)
}

/// `tools_from_openai_format(tools)`: `[tool["function"] for tool in tools]`.
fn tools_from_openai_format(tools: &Value) -> Result<Vec<&Value>, Dsv32Error> {
    iterate(tools)?
        .iter()
        .map(|tool| getitem_of(tool, "function"))
        .collect()
}

/// One dict of `tool_calls_from_openai_format`: `{"name": ..., "arguments": ...}`.
#[derive(Debug, Clone, Copy)]
struct ToolCall<'a> {
    name: &'a Value,
    arguments: &'a Value,
}

/// `tool_calls_from_openai_format(tool_calls)`.
fn tool_calls_from_openai_format(tool_calls: &Value) -> Result<Vec<ToolCall<'_>>, Dsv32Error> {
    iterate(tool_calls)?
        .iter()
        .map(|tool_call| {
            let name = getitem(getitem_of(tool_call, "function")?, "name")?;
            let arguments = getitem(getitem_of(tool_call, "function")?, "arguments")?;
            Ok(ToolCall { name, arguments })
        })
        .collect()
}

/// `encode_arguments_to_dsml(tool_call)`.
fn encode_arguments_to_dsml(tool_call: &ToolCall<'_>) -> Result<String, Dsv32Error> {
    let raw_arguments = tool_call.arguments;
    let parsed;
    let arguments = match raw_arguments {
        Value::String(s) => {
            parsed = json_loads(s)?;
            &parsed
        }
        other => other,
    };
    let Value::Object(arguments) = arguments else {
        return Err(error(
            "ValueError",
            "Assistant tool call function.arguments must be a JSON object.",
        ));
    };

    let p_dsml_strs: Vec<String> = arguments
        .iter()
        .map(|(k, v)| {
            let (is_str, value) = match v {
                Value::String(s) => ("true", Cow::Borrowed(s.as_str())),
                _ => ("false", Cow::Owned(to_json(v))),
            };
            format(
                P_DSML_TEMPLATE,
                &[
                    ("dsml_token", DSML_TOKEN),
                    ("key", k),
                    ("is_str", is_str),
                    ("value", &value),
                ],
            )
        })
        .collect();
    Ok(p_dsml_strs.join("\n"))
}

/// `render_tools(tools)`.
pub fn render_tools(tools: &[&Value]) -> String {
    let tools_json: Vec<String> = tools.iter().map(|t| to_json(t)).collect();
    format(
        TOOLS_SYSTEM_TEMPLATE,
        &[
            ("tool_schemas", &tools_json.join("\n")),
            ("dsml_token", DSML_TOKEN),
            ("thinking_start_token", THINKING_START_TOKEN),
            ("thinking_end_token", THINKING_END_TOKEN),
        ],
    )
}

/// `find_last_user_index(messages)`: the last `user` or `developer`
/// message, or -1.
fn find_last_user_index(messages: &[Cow<'_, Value>]) -> Result<isize, Dsv32Error> {
    for (idx, msg) in messages.iter().enumerate().rev() {
        let role = get(msg, "role")?;
        if is_str(role, "user") || is_str(role, "developer") {
            return Ok(idx as isize);
        }
    }
    Ok(-1)
}

/// The two scans `render_message` repeats on every call, done once per
/// message list: the list does not change between the calls, so each scan
/// has the same result every time (a raised error included). Python's
/// repetition is quadratic in the number of messages (20k messages: 40 s
/// here); this keeps the port linear with the same results.
struct Scans {
    /// `find_last_user_index(messages)`.
    last_user_idx: Result<isize, Dsv32Error>,
    /// Per index, where `render_message`'s `while ... == "tool"` walk back
    /// from it stops (`prev_assistant_idx`), or the `AttributeError` a
    /// non-dict message raises on the way.
    prev_assistant_idx: Vec<Result<isize, Dsv32Error>>,
}

impl Scans {
    fn new(messages: &[Cow<'_, Value>]) -> Self {
        let mut prev_assistant_idx: Vec<Result<isize, Dsv32Error>> =
            Vec::with_capacity(messages.len());
        for index in 0..messages.len() {
            // prev = index - 1; while prev >= 0 and messages[prev].get("role") == "tool": prev -= 1
            let prev = match index.checked_sub(1) {
                None => Ok(-1),
                Some(p) => match get(&messages[p], "role") {
                    Err(e) => Err(e),
                    Ok(role) if is_str(role, "tool") => prev_assistant_idx[p].clone(),
                    Ok(_) => Ok(p as isize),
                },
            };
            prev_assistant_idx.push(prev);
        }
        Scans {
            last_user_idx: find_last_user_index(messages),
            prev_assistant_idx,
        }
    }
}

/// `render_message(index, messages, thinking_mode)`, with `scans` holding
/// the two scans of `messages` it makes ([`Scans`]). The Python function is
/// itself ~135 lines; its `if role == ...` branches are the
/// `render_*_message` functions below.
fn render_message(
    index: usize,
    messages: &[Cow<'_, Value>],
    scans: &Scans,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    if index >= messages.len() {
        return Err(encoding_error(format!(
            "Index {index} out of range for messages list of length {}",
            messages.len()
        )));
    }
    // `thinking_mode not in ["chat", "thinking"]` cannot happen with the enum.
    let msg: &Value = &messages[index];
    let last_user_idx = scans.last_user_idx.clone()?;

    let role = get(msg, "role")?;
    let content = get(msg, "content")?;
    let tools = get(msg, "tools")?;
    let response_format = get(msg, "response_format")?;
    let tool_calls = get(msg, "tool_calls")?;
    let reasoning_content = get(msg, "reasoning_content")?;

    // `if tools: tools = tools_from_openai_format(tools)`; the converted
    // list is as long as the (truthy) original, so `Some` means truthy.
    let tools = match py::truthy(tools) {
        true => Some(tools_from_openai_format(tools)?),
        false => None,
    };
    let tool_calls = match py::truthy(tool_calls) {
        true => Some(tool_calls_from_openai_format(tool_calls)?),
        false => None,
    };

    // `index == last_user_idx and thinking_mode == "thinking"`.
    let opens_thinking = index as isize == last_user_idx && thinking_mode == ThinkingMode::Thinking;
    if is_str(role, "system") {
        render_system_message(content, tools.as_deref(), response_format)
    } else if is_str(role, "developer") {
        render_developer_message(
            msg,
            content,
            tools.as_deref(),
            response_format,
            opens_thinking,
        )
    } else if is_str(role, "user") {
        render_user_message(content, opens_thinking)
    } else if is_str(role, "tool") {
        render_tool_message(
            index,
            messages,
            scans,
            content,
            last_user_idx,
            thinking_mode,
        )
    } else if is_str(role, "assistant") {
        render_assistant_message(
            index,
            msg,
            content,
            tool_calls.as_deref(),
            reasoning_content,
            last_user_idx,
            thinking_mode,
        )
    } else {
        Err(error(
            "NotImplementedError",
            format!("Unknown role: {}", str_in_message(role)),
        ))
    }
}

/// `render_message`, its `role == "system"` branch.
fn render_system_message(
    content: &Value,
    tools: Option<&[&Value]>,
    response_format: &Value,
) -> Result<String, Dsv32Error> {
    let mut prompt = format(SYSTEM_MSG_TEMPLATE, &[("content", &str_or_empty(content)?)]);
    if let Some(tools) = tools {
        prompt += "\n\n";
        prompt += &render_tools(tools);
    }

    if py::truthy(response_format) {
        prompt += "\n\n";
        prompt += &format(
            RESPONSE_FORMAT_TEMPLATE,
            &[("schema", &to_json(response_format))],
        );
    }
    Ok(prompt)
}

/// `render_message`, its `role == "developer"` branch.
fn render_developer_message(
    msg: &Value,
    content: &Value,
    tools: Option<&[&Value]>,
    response_format: &Value,
    opens_thinking: bool,
) -> Result<String, Dsv32Error> {
    if !py::truthy(content) {
        return Err(encoding_error(format!(
            "Invalid message for role `developer`: {}",
            str_in_message(msg)
        )));
    }
    let mut content_developer = String::new();
    if let Some(tools) = tools {
        content_developer += "\n\n";
        content_developer += &render_tools(tools);
    }

    if py::truthy(response_format) {
        content_developer += "\n\n";
        content_developer += &format(
            RESPONSE_FORMAT_TEMPLATE,
            &[("schema", &to_json(response_format))],
        );
    }

    content_developer += "\n\n# The user's message is: ";
    content_developer += &str_of(content)?;

    let mut prompt = format(USER_MSG_TEMPLATE, &[("content", &content_developer)]);
    if opens_thinking {
        prompt += THINKING_START_TOKEN;
    } else {
        prompt += THINKING_END_TOKEN;
    }
    Ok(prompt)
}

/// `render_message`, its `role == "user"` branch.
fn render_user_message(content: &Value, opens_thinking: bool) -> Result<String, Dsv32Error> {
    let mut prompt = format(USER_MSG_TEMPLATE, &[("content", &str_of(content)?)]);

    if opens_thinking {
        prompt += THINKING_START_TOKEN;
    } else {
        prompt += THINKING_END_TOKEN;
    }
    Ok(prompt)
}

/// `render_message`, its `role == "tool"` branch.
fn render_tool_message(
    index: usize,
    messages: &[Cow<'_, Value>],
    scans: &Scans,
    content: &Value,
    last_user_idx: isize,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    let idx = index as isize;
    // `messages[i]` with Python's negative indices (i >= -1 here).
    let at = |i: isize| -> Result<&Value, Dsv32Error> {
        let j = if i < 0 {
            i + messages.len() as isize
        } else {
            i
        };
        usize::try_from(j)
            .ok()
            .and_then(|j| messages.get(j))
            .map(|m| &**m)
            .ok_or_else(|| error("IndexError", "list index out of range"))
    };
    let mut prompt = String::new();

    // prev_assistant_idx = index - 1, then back over "tool" messages.
    let prev_assistant_idx = scans.prev_assistant_idx[index].clone()?;
    let assistant_msg = at(prev_assistant_idx)?;

    if !(index == 0
        || (prev_assistant_idx >= 0 && is_str(get(assistant_msg, "role")?, "assistant")))
    {
        return Err(encoding_error(format!(
            "Invalid messages at {index}:\n{}",
            str_in_message(assistant_msg)
        )));
    }

    let tool_call_order = (idx - prev_assistant_idx) as usize;
    let assistant_tool_calls = get(assistant_msg, "tool_calls")?;
    if !(py::truthy(assistant_tool_calls) && len(assistant_tool_calls)? >= tool_call_order) {
        return Err(encoding_error("No tool calls but found tool output"));
    }

    if tool_call_order == 1 {
        prompt += "\n\n<function_results>";
    }

    prompt += &format(TOOL_OUTPUT_TEMPLATE, &[("content", &str_of(content)?)]);

    if tool_call_order == len(assistant_tool_calls)? {
        prompt += "\n</function_results>";

        if idx >= last_user_idx && thinking_mode == ThinkingMode::Thinking {
            prompt += "\n\n";
            prompt += THINKING_START_TOKEN;
        } else {
            prompt += "\n\n";
            prompt += THINKING_END_TOKEN;
        }
    }
    Ok(prompt)
}

/// `render_message`, its `role == "assistant"` branch.
fn render_assistant_message(
    index: usize,
    msg: &Value,
    content: &Value,
    tool_calls: Option<&[ToolCall<'_>]>,
    reasoning_content: &Value,
    last_user_idx: isize,
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    let mut thinking_part = String::new();

    let mut tool_calls_content = String::new();
    if let Some(tool_calls) = tool_calls {
        let rendered = tool_calls
            .iter()
            .map(|tool_call| {
                let name = str_of(tool_call.name)?;
                let arguments = encode_arguments_to_dsml(tool_call)?;
                Ok(format(
                    TOOL_CALL_TEMPLATE,
                    &[
                        ("dsml_token", DSML_TOKEN),
                        ("name", &name),
                        ("arguments", &arguments),
                    ],
                ))
            })
            .collect::<Result<Vec<String>, Dsv32Error>>()?;
        tool_calls_content += "\n\n";
        tool_calls_content += &format(
            TOOL_CALLS_TEMPLATE,
            &[
                ("dsml_token", DSML_TOKEN),
                ("tool_calls", &rendered.join("\n")),
            ],
        );
    }

    let summary_content = str_or_empty(content)?;

    if thinking_mode == ThinkingMode::Thinking && index as isize > last_user_idx {
        if !(py::truthy(reasoning_content) || tool_calls.is_some()) {
            return Err(encoding_error(format!(
                "ThinkingMode: {thinking_mode}, invalid message without reasoning_content/tool_calls `{}` after last user message",
                str_in_message(msg)
            )));
        }
        thinking_part = format(
            THINKING_TEMPLATE,
            &[("reasoning_content", &str_or_empty(reasoning_content)?)],
        ) + THINKING_END_TOKEN;
    }

    Ok(format(
        ASSISTANT_MSG_TEMPLATE,
        &[
            ("reasoning", &thinking_part),
            ("content", &summary_content),
            ("tool_calls", &tool_calls_content),
        ],
    ))
}

/// `drop_thinking_messages(messages, last_user_idx=None)`: assistant
/// messages before the last user turn lose `reasoning_content`; messages
/// before it whose role is not user/system/tool/assistant are dropped.
fn drop_thinking_messages<'a>(
    messages: &[Cow<'a, Value>],
    last_user_idx: Option<isize>,
) -> Result<Vec<Cow<'a, Value>>, Dsv32Error> {
    let mut messages_wo_thinking = Vec::with_capacity(messages.len());
    let last_user_idx = match last_user_idx {
        None => find_last_user_index(messages)?,
        Some(i) => i,
    };
    for (idx, msg) in messages.iter().enumerate() {
        let role = get(msg, "role")?;
        if is_str(role, "user")
            || is_str(role, "system")
            || is_str(role, "tool")
            || idx as isize >= last_user_idx
        {
            messages_wo_thinking.push(msg.clone());
            continue;
        } else if is_str(role, "assistant") {
            // `copy.copy(msg)` then `pop("reasoning_content", None)`,
            // keeping the other keys in order.
            let mut msg_wo_thinking = msg.clone().into_owned();
            if let Value::Object(map) = &mut msg_wo_thinking {
                map.shift_remove("reasoning_content");
            }
            messages_wo_thinking.push(Cow::Owned(msg_wo_thinking));
        }
    }
    Ok(messages_wo_thinking)
}

/// `encode_messages(messages, thinking_mode)` with the Python defaults
/// (`context=None, drop_thinking=True, add_default_bos_token=True`): the
/// call SGLang's chat endpoint makes.
pub fn encode_messages(
    messages: &[Value],
    thinking_mode: ThinkingMode,
) -> Result<String, Dsv32Error> {
    encode_messages_with(messages, thinking_mode, None, true, true)
}

/// `encode_messages(messages, thinking_mode, context, drop_thinking,
/// add_default_bos_token)`.
pub fn encode_messages_with(
    messages: &[Value],
    thinking_mode: ThinkingMode,
    context: Option<&[Value]>,
    drop_thinking: bool,
    add_default_bos_token: bool,
) -> Result<String, Dsv32Error> {
    let context = context.unwrap_or_default();
    let mut full_messages: Vec<Cow<'_, Value>> =
        context.iter().chain(messages).map(Cow::Borrowed).collect();

    let mut prompt = String::new();
    if add_default_bos_token && context.is_empty() {
        prompt += BOS_TOKEN;
    }

    if thinking_mode == ThinkingMode::Thinking && drop_thinking {
        full_messages = drop_thinking_messages(&full_messages, None)?;
    }

    let scans = Scans::new(&full_messages);
    for idx in 0..messages.len() {
        prompt += &render_message(idx + context.len(), &full_messages, &scans, thinking_mode)?;
    }

    Ok(prompt)
}

#[cfg(test)]
#[path = "dsv32_tests.rs"]
mod tests;
