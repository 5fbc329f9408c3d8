//! Jinja2's filters, tests and globals where minijinja's differ, and the
//! removal of minijinja's extras that Jinja2 does not have (a template using
//! them fails in transformers, so it must fail here too).

use std::fmt::Write as _;

use minijinja::value::{Rest, Tuple, ValueKind, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, State, Value};

use super::args::take_kwargs;
use super::args::{bind, int_arg, split_args, type_error};
use super::methods;
use super::pyformat;
use super::pyrepr;
use super::pyrepr::py_type_name;
use super::pysort;
use super::tojson;
use super::unicode;
use crate::py;

pub fn install(env: &mut Environment<'static>) {
    for name in ["split", "lines", "chain", "zip", "bool"] {
        env.remove_filter(name);
    }
    for name in ["safe", "int", "startingwith", "endingwith"] {
        env.remove_test(name);
    }
    env.remove_global("debug");

    env.add_filter("tojson", tojson::tojson_filter);
    env.add_filter("string", string);
    env.add_filter("join", join);
    env.add_filter("pprint", pprint);
    env.add_filter("trim", trim);
    env.add_filter("title", title);
    env.add_filter("upper", |v: &Value| -> Result<Value, Error> {
        Ok(Value::from(unicode::upper(&pyrepr::to_str(v)?)))
    });
    env.add_filter("lower", |v: &Value| -> Result<Value, Error> {
        Ok(Value::from(unicode::lower(&pyrepr::to_str(v)?)))
    });
    env.add_filter("capitalize", |v: &Value| -> Result<Value, Error> {
        Ok(Value::from(unicode::capitalize(&pyrepr::to_str(v)?)))
    });
    env.add_filter("escape", escape);
    env.add_filter("e", escape);
    env.add_filter("forceescape", escape);
    env.add_filter("center", center);
    env.add_filter("wordcount", wordcount);
    env.add_filter("truncate", truncate);
    env.add_filter("items", items);
    env.add_filter("int", int);
    env.add_filter("float", float);
    env.add_filter("list", list);
    env.add_filter("indent", indent);
    env.add_filter("replace", replace);
    env.add_filter("urlencode", urlencode);
    env.add_filter("format", format);
    env.add_filter("default", default);
    env.add_filter("d", default);
    env.add_filter("dictsort", dictsort);
    env.add_filter("sum", sum);
    env.add_filter("attr", attr);
    env.add_filter("sort", sort);

    env.add_test("iterable", is_iterable);
    env.add_test("sequence", is_sequence);
    env.add_test("number", |v: &Value| {
        matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
    });
    env.add_test("callable", |v: &Value| v.kind() == ValueKind::Plain);
    env.add_test("mapping", |v: &Value| {
        v.kind() == ValueKind::Map && !pyrepr::is_namespace(v)
    });
    env.add_test("lower", |v: &Value| -> Result<bool, Error> {
        Ok(unicode::str_islower(&pyrepr::to_str(v)?))
    });
    env.add_test("upper", |v: &Value| -> Result<bool, Error> {
        Ok(unicode::str_isupper(&pyrepr::to_str(v)?))
    });

    env.add_function("cycler", cycler);
    env.add_function("joiner", joiner);
}

/// Returns the string as is (keeping it safe) or Python's `str()` of anything else.
fn soft_str(v: &Value) -> Result<Value, Error> {
    if v.kind() == ValueKind::String {
        Ok(v.clone())
    } else {
        Ok(Value::from(pyrepr::to_str(v)?))
    }
}

fn string(v: &Value) -> Result<Value, Error> {
    soft_str(v)
}

/// `do_join`: `str(d).join(map(str, value))`, optionally of an attribute.
fn join(state: &State, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind("join", &args.into_values(), &["value", "d", "attribute"], 1)?;
    let value = slots[0].clone().unwrap_or_default();
    let sep = match &slots[1] {
        Some(d) => pyrepr::to_str(d)?,
        None => String::new(),
    };
    let attribute = slots[2].clone();
    let mut out = String::new();
    for (i, item) in iter_py(&value)?.enumerate() {
        if i > 0 {
            out.push_str(&sep);
        }
        let item = match &attribute {
            Some(attr) => get_attribute(state, &item, attr)?,
            None => item,
        };
        pyrepr::push_str(&mut out, &item)?;
    }
    Ok(Value::from(out))
}

/// Jinja2's `make_attrgetter`: dotted paths, integer parts index.
fn get_attribute(_state: &State, item: &Value, attr: &Value) -> Result<Value, Error> {
    let Some(path) = attr.as_str() else {
        return item.get_item(attr);
    };
    let mut cur = item.clone();
    for part in path.split('.') {
        cur = match part.parse::<usize>() {
            Ok(idx) => cur.get_item(&Value::from(idx))?,
            Err(_) => cur.get_attr(part)?,
        };
    }
    Ok(cur)
}

/// Iterates like Python's `iter()`: None and numbers are not iterable.
pub fn iter_py(v: &Value) -> Result<minijinja::value::ValueIter, Error> {
    match v.kind() {
        ValueKind::None | ValueKind::Number | ValueKind::Bool => Err(type_error(format!(
            "'{}' object is not iterable",
            py_type_name(v)
        ))),
        _ => v.try_iter(),
    }
}

fn trim(v: &Value, chars: Option<Value>) -> Result<Value, Error> {
    let s = pyrepr::to_str(v)?;
    let out = match chars {
        Some(c) if !c.is_none() => {
            let set: Vec<char> = pyrepr::to_str(&c)?.chars().collect();
            s.trim_matches(&set[..]).to_string()
        }
        _ => unicode::strip(&s).to_string(),
    };
    Ok(Value::from(out))
}

/// Jinja2's `title` filter: words start after runs of `-`, whitespace and
/// `({[<`; each word is `w[0].upper() + w[1:].lower()`.
fn title(v: &Value) -> Result<Value, Error> {
    let s = pyrepr::to_str(v)?;
    let is_sep = |c: char| matches!(c, '-' | '(' | '{' | '[' | '<') || unicode::is_space(c);
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while !rest.is_empty() {
        let sep_len = rest.find(|c: char| !is_sep(c)).unwrap_or(rest.len());
        out.push_str(&rest[..sep_len]);
        rest = &rest[sep_len..];
        if rest.is_empty() {
            break;
        }
        let word_len = rest.find(is_sep).unwrap_or(rest.len());
        let word = &rest[..word_len];
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            unicode::push_upper(&mut out, first);
            out.push_str(&unicode::lower(chars.as_str()));
        }
        rest = &rest[word_len..];
    }
    Ok(Value::from(out))
}

pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

/// markupsafe's `escape`: already-safe strings pass, anything else is
/// `str()`-ed and escaped with `&#39;`/`&#34;`.
fn escape(v: &Value) -> Result<Value, Error> {
    if v.is_safe() {
        return Ok(v.clone());
    }
    Ok(Value::from_safe_string(html_escape(&pyrepr::to_str(v)?)))
}

fn center(v: &Value, width: Option<Value>) -> Result<Value, Error> {
    let s = pyrepr::to_str(v)?;
    let width = match width {
        Some(w) => int_arg("center", &w)?,
        None => 80,
    };
    if width > 1 << 24 {
        return Err(Error::new(ErrorKind::InvalidOperation, "MemoryError"));
    }
    Ok(Value::from(methods::center(&s, width, ' ')))
}

/// `len(re.findall(r"\w+", s))`.
fn wordcount(v: &Value) -> Result<Value, Error> {
    let s = pyrepr::to_str(v)?;
    let mut n = 0;
    let mut in_word = false;
    for c in s.chars() {
        let w = c == '_' || unicode::is_alnum(c);
        if w && !in_word {
            n += 1;
        }
        in_word = w;
    }
    Ok(Value::from(n))
}

/// Python slice `s[:n]` by characters (negative counts from the end).
fn char_prefix(s: &str, n: i64) -> &str {
    let len = s.chars().count() as i64;
    let n = if n < 0 { (n + len).max(0) } else { n.min(len) };
    match s.char_indices().nth(n as usize) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn truncate(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "truncate",
        &args.into_values(),
        &["s", "length", "killwords", "end", "leeway"],
        1,
    )?;
    let s = pyrepr::to_str(slots[0].as_ref().unwrap_or(&Value::UNDEFINED))?;
    let length = match &slots[1] {
        Some(v) => int_arg("truncate", v)?,
        None => 255,
    };
    let killwords = slots[2].as_ref().is_some_and(Value::is_true);
    let end = match &slots[3] {
        Some(v) => pyrepr::to_str(v)?,
        None => "...".to_string(),
    };
    let leeway = match &slots[4] {
        Some(v) if !v.is_none() => int_arg("truncate", v)?,
        _ => 5,
    };
    let end_len = end.chars().count() as i64;
    if length < end_len {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("AssertionError: expected length >= {end_len}, got {length}"),
        ));
    }
    if leeway < 0 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("AssertionError: expected leeway >= 0, got {leeway}"),
        ));
    }
    if (s.chars().count() as i64) <= length + leeway {
        return Ok(Value::from(s));
    }
    let head = char_prefix(&s, length - end_len);
    let mut out = if killwords {
        head.to_string()
    } else {
        match head.rfind(' ') {
            Some(i) => head[..i].to_string(),
            None => head.to_string(),
        }
    };
    out.push_str(&end);
    Ok(Value::from(out))
}

/// `dict.items()` pairs as tuples; undefined gives nothing.
fn items(v: &Value) -> Result<Value, Error> {
    match v.kind() {
        ValueKind::Undefined => Ok(Value::from(Vec::<Value>::new())),
        ValueKind::Map => {
            let pairs: Vec<Value> = v
                .as_object()
                .and_then(|o| o.try_iter_pairs())
                .into_iter()
                .flatten()
                .map(|(k, val)| Value::from(Tuple::from([k, val])))
                .collect();
            Ok(Value::from(pairs))
        }
        _ => Err(type_error("Can only get item pairs from a mapping.")),
    }
}

/// Python's `int(str, base)`: surrounding whitespace, a sign, an optional
/// base prefix and single underscores between digits.
fn parse_py_int(s: &str, base: u32) -> Option<i128> {
    // Whitespace and Unicode digits as `int()` takes them (not `str.strip()`).
    let s = py::number_text(s)?;
    let s = s.as_ref();
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let prefix = body.get(..2).map(str::to_ascii_lowercase);
    let (base, digits, after_prefix) = match (base, prefix.as_deref()) {
        (16 | 0, Some("0x")) => (16, &body[2..], true),
        (8 | 0, Some("0o")) => (8, &body[2..], true),
        (2 | 0, Some("0b")) => (2, &body[2..], true),
        (0, _) => {
            // base 0 forbids leading zeros on a non-zero decimal
            if body.starts_with('0') && body.chars().any(|c| c != '0' && c != '_') {
                return None;
            }
            (10, body, false)
        }
        (b, _) => (b, body, false),
    };
    if !(2..=36).contains(&base) || digits.is_empty() {
        return None;
    }
    let mut clean = String::with_capacity(digits.len());
    let mut prev_digit = after_prefix;
    for c in digits.chars() {
        if c == '_' {
            if !prev_digit {
                return None;
            }
            prev_digit = false;
        } else if c.is_ascii_alphanumeric() {
            clean.push(c);
            prev_digit = true;
        } else {
            return None;
        }
    }
    if clean.is_empty() || !prev_digit {
        return None;
    }
    let v = i128::from_str_radix(&clean, base).ok()?;
    Some(if neg { -v } else { v })
}

fn float_to_int(f: f64) -> Result<Option<Value>, Error> {
    if f.is_nan() {
        return Ok(None);
    }
    if f.is_infinite() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "OverflowError: cannot convert float infinity to integer",
        ));
    }
    let t = f.trunc();
    if t.abs() < 1.7e38 {
        Ok(Some(Value::from(t as i128)))
    } else {
        Ok(None)
    }
}

/// `do_int(value, default=0, base=10)`: anything unparsable gives the default.
fn int(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind("int", &args.into_values(), &["value", "default", "base"], 1)?;
    let value = slots[0].clone().unwrap_or_default();
    let default = slots[1].clone().unwrap_or(Value::from(0));
    let base = match &slots[2] {
        Some(b) => int_arg("int", b)?,
        None => 10,
    };
    let direct = match value.kind() {
        ValueKind::Bool => Some(Value::from(value.is_true() as i64)),
        ValueKind::Number if value.is_integer() => Some(value.clone()),
        ValueKind::Number => float_to_int(f64::try_from(value.clone()).unwrap_or(f64::NAN))?,
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            match u32::try_from(base).ok().and_then(|b| parse_py_int(s, b)) {
                Some(i) => Some(Value::from(i)),
                None => match py::float_of_str(s) {
                    Some(f) => float_to_int(f)?,
                    None => None,
                },
            }
        }
        _ => None,
    };
    Ok(direct.unwrap_or(default))
}

/// `do_float(value, default=0.0)`.
fn float(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind("float", &args.into_values(), &["value", "default"], 1)?;
    let value = slots[0].clone().unwrap_or_default();
    let default = slots[1].clone().unwrap_or(Value::from(0.0));
    Ok(match value.kind() {
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => Value::from(f64::try_from(value.clone()).unwrap_or(f64::NAN)),
        ValueKind::String => match py::float_of_str(value.as_str().unwrap_or_default()) {
            Some(f) => Value::from(f),
            None => default,
        },
        _ => default,
    })
}

fn list(v: &Value) -> Result<Value, Error> {
    if v.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    Ok(Value::from(iter_py(v)?.collect::<Vec<_>>()))
}

/// `do_indent`: Python `splitlines` semantics and a string or integer width.
fn indent(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "indent",
        &args.into_values(),
        &["s", "width", "first", "blank"],
        1,
    )?;
    let s = pyrepr::to_str(slots[0].as_ref().unwrap_or(&Value::UNDEFINED))?;
    let indention = match &slots[1] {
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or_default().to_string(),
        Some(w) => {
            let n = int_arg("indent", w)?;
            if n > 1 << 16 {
                return Err(Error::new(ErrorKind::InvalidOperation, "MemoryError"));
            }
            " ".repeat(n.max(0) as usize)
        }
        None => "    ".to_string(),
    };
    let first = slots[2].as_ref().is_some_and(Value::is_true);
    let blank = slots[3].as_ref().is_some_and(Value::is_true);
    let s = s + "\n";
    let lines = unicode::splitlines(&s, false);
    let mut rv = String::with_capacity(s.len());
    if blank {
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                rv.push('\n');
                rv.push_str(&indention);
            }
            rv.push_str(line);
        }
    } else {
        let mut it = lines.iter();
        if let Some(l) = it.next() {
            rv.push_str(l);
        }
        for line in it {
            rv.push('\n');
            if !line.is_empty() {
                rv.push_str(&indention);
            }
            rv.push_str(line);
        }
    }
    if first {
        rv.insert_str(0, &indention);
    }
    Ok(Value::from(rv))
}

fn replace(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "replace",
        &args.into_values(),
        &["s", "old", "new", "count"],
        3,
    )?;
    let s = pyrepr::to_str(slots[0].as_ref().unwrap_or(&Value::UNDEFINED))?;
    let old = pyrepr::to_str(slots[1].as_ref().unwrap_or(&Value::UNDEFINED))?;
    let new = pyrepr::to_str(slots[2].as_ref().unwrap_or(&Value::UNDEFINED))?;
    let count = match &slots[3] {
        Some(c) if !c.is_none() => int_arg("replace", c)?,
        _ => -1,
    };
    Ok(Value::from(methods::py_replace(&s, &old, &new, count)))
}

fn url_quote(s: &str, for_qs: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let safe = b.is_ascii_alphanumeric()
            || matches!(b, b'_' | b'.' | b'-' | b'~')
            || (!for_qs && b == b'/');
        if safe {
            out.push(b as char);
        } else if for_qs && b == b' ' {
            out.push('+');
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn urlencode(v: &Value) -> Result<Value, Error> {
    match v.kind() {
        ValueKind::String | ValueKind::None | ValueKind::Bool | ValueKind::Number => {
            Ok(Value::from(url_quote(&pyrepr::to_str(v)?, false)))
        }
        ValueKind::Undefined => Ok(Value::from("")),
        kind => {
            let pairs: Vec<(Value, Value)> = if kind == ValueKind::Map {
                v.as_object()
                    .and_then(|o| o.try_iter_pairs())
                    .into_iter()
                    .flatten()
                    .collect()
            } else {
                let mut out = Vec::new();
                for item in v.try_iter()? {
                    let kv: Vec<Value> = iter_py(&item)?.collect();
                    if kv.len() != 2 {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "ValueError: too many values to unpack (expected 2)",
                        ));
                    }
                    out.push((kv[0].clone(), kv[1].clone()));
                }
                out
            };
            let mut out = String::new();
            for (i, (k, val)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push('&');
                }
                out.push_str(&url_quote(&pyrepr::to_str(k)?, true));
                out.push('=');
                out.push_str(&url_quote(&pyrepr::to_str(val)?, true));
            }
            Ok(Value::from(out))
        }
    }
}

fn is_iterable(v: &Value) -> bool {
    matches!(
        v.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Bytes
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
    ) && !pyrepr::is_namespace(v)
}

/// Jinja2: `len(value)` and `value.__getitem__` both exist.
fn is_sequence(v: &Value) -> bool {
    matches!(
        v.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Bytes
            | ValueKind::Seq
            | ValueKind::Map
    )
}

/// `pprint.pformat(value)`: width 80, dicts sorted by key.
fn pprint(v: &Value) -> Result<Value, Error> {
    let mut out = String::new();
    pformat(&mut out, v, 0, 0, 0)?;
    Ok(Value::from(out))
}

const PP_WIDTH: i64 = 80;

fn sorted_pairs(v: &Value) -> Vec<(Value, Value)> {
    let mut pairs: Vec<(Value, Value)> = v
        .as_object()
        .and_then(|o| o.try_iter_pairs())
        .into_iter()
        .flatten()
        .collect();
    pairs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    pairs
}

/// `_safe_repr`: like repr, but dicts with sorted keys.
fn safe_repr(out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
    if depth > pyrepr::MAX_DEPTH {
        return Err(pyrepr::recursion_error());
    }
    match v.kind() {
        ValueKind::Map => {
            out.push('{');
            for (i, (k, val)) in sorted_pairs(v).iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                safe_repr(out, k, depth + 1)?;
                out.push_str(": ");
                safe_repr(out, val, depth + 1)?;
            }
            out.push('}');
        }
        ValueKind::Seq => {
            let tuple = v.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let items: Vec<Value> = v.try_iter()?.collect();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                safe_repr(out, item, depth + 1)?;
            }
            if tuple && items.len() == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        _ => pyrepr::push_repr(out, v, depth)?,
    }
    Ok(())
}

fn repr_len(v: &Value) -> Result<(String, i64), Error> {
    let mut s = String::new();
    safe_repr(&mut s, v, 0)?;
    let n = s.chars().count() as i64;
    Ok((s, n))
}

/// `PrettyPrinter._format`.
fn pformat(
    out: &mut String,
    v: &Value,
    indent: i64,
    allowance: i64,
    level: usize,
) -> Result<(), Error> {
    if level > pyrepr::MAX_DEPTH {
        return Err(pyrepr::recursion_error());
    }
    let (rep, len) = repr_len(v)?;
    if len <= PP_WIDTH - indent - allowance {
        out.push_str(&rep);
        return Ok(());
    }
    let level = level + 1;
    match v.kind() {
        ValueKind::Map => {
            out.push('{');
            let pairs = sorted_pairs(v);
            let indent = indent + 1;
            let allowance = allowance + 1;
            for (i, (k, val)) in pairs.iter().enumerate() {
                let last = i + 1 == pairs.len();
                let (krep, klen) = repr_len(k)?;
                out.push_str(&krep);
                out.push_str(": ");
                pformat(
                    out,
                    val,
                    indent + klen + 2,
                    if last { allowance } else { 1 },
                    level,
                )?;
                if !last {
                    out.push_str(",\n");
                    out.push_str(&" ".repeat(indent as usize));
                }
            }
            out.push('}');
        }
        ValueKind::Seq => {
            let tuple = v.is_tuple();
            let items: Vec<Value> = v.try_iter()?.collect();
            let endchar = if !tuple {
                "]"
            } else if items.len() == 1 {
                ",)"
            } else {
                ")"
            };
            out.push(if tuple { '(' } else { '[' });
            let indent = indent + 1;
            let allowance = allowance + endchar.len() as i64;
            for (i, item) in items.iter().enumerate() {
                let last = i + 1 == items.len();
                if i > 0 {
                    out.push_str(",\n");
                    out.push_str(&" ".repeat(indent as usize));
                }
                pformat(out, item, indent, if last { allowance } else { 1 }, level)?;
            }
            out.push_str(endchar);
        }
        ValueKind::String => pformat_str(
            out,
            v.as_str().unwrap_or_default(),
            indent,
            allowance,
            level,
            &rep,
        ),
        _ => out.push_str(&rep),
    }
    Ok(())
}

/// `PrettyPrinter._pprint_str`: long strings become adjacent literals.
fn pformat_str(out: &mut String, s: &str, indent: i64, allowance: i64, level: usize, whole: &str) {
    let repr = |x: &str| {
        let mut r = String::new();
        pyrepr::push_str_repr(&mut r, x);
        r
    };
    let rlen = |x: &str| x.chars().count() as i64;
    if s.is_empty() {
        out.push_str(whole);
        return;
    }
    let (mut indent, mut allowance) = (indent, allowance);
    if level == 1 {
        indent += 1;
        allowance += 1;
    }
    let max_width = PP_WIDTH - indent;
    let mut max_width1 = max_width;
    let lines = unicode::splitlines(s, true);
    let mut chunks: Vec<String> = Vec::new();
    let mut last_rep = String::new();
    for (i, line) in lines.iter().enumerate() {
        let rep = repr(line);
        if i + 1 == lines.len() {
            max_width1 -= allowance;
        }
        if rlen(&rep) <= max_width1 {
            chunks.push(rep.clone());
        } else {
            // alternating runs of non-space then space, as `\S*\s*`
            let mut parts = Vec::new();
            let mut rest = *line;
            while !rest.is_empty() {
                let ns = rest.find(unicode::is_space).unwrap_or(rest.len());
                let sp = rest[ns..]
                    .find(|c: char| !unicode::is_space(c))
                    .map_or(rest.len(), |j| ns + j);
                parts.push(&rest[..sp]);
                rest = &rest[sp..];
            }
            let mut max_width2 = max_width;
            let mut current = String::new();
            for (j, part) in parts.iter().enumerate() {
                let candidate = format!("{current}{part}");
                if j + 1 == parts.len() && i + 1 == lines.len() {
                    max_width2 -= allowance;
                }
                if rlen(&repr(&candidate)) > max_width2 {
                    if !current.is_empty() {
                        chunks.push(repr(&current));
                    }
                    current = part.to_string();
                } else {
                    current = candidate;
                }
            }
            if !current.is_empty() {
                chunks.push(repr(&current));
            }
        }
        last_rep = rep;
    }
    if chunks.len() == 1 {
        out.push_str(&last_rep);
        return;
    }
    if level == 1 {
        out.push('(');
    }
    for (i, c) in chunks.iter().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&" ".repeat(indent as usize));
        }
        out.push_str(c);
    }
    if level == 1 {
        out.push(')');
    }
}

/// Jinja2's `cycler(*items)` with `next()`, `reset()` and `current`.
fn cycler(items: Rest<Value>) -> Result<Value, Error> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Cycler {
        items: Vec<Value>,
        pos: AtomicUsize,
    }

    impl minijinja::value::Object for Cycler {
        fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
            minijinja::value::ObjectRepr::Plain
        }

        fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
            match key.as_str()? {
                "current" => self.items.get(self.pos.load(Ordering::Relaxed)).cloned(),
                _ => None,
            }
        }

        fn call_method(
            self: &Arc<Self>,
            _state: &mut State<'_, '_>,
            method: &str,
            args: &[Value],
        ) -> Result<Value, Error> {
            super::args::positional(method, args, 0, 0)?;
            match method {
                "next" => {
                    let idx = self.pos.load(Ordering::Relaxed);
                    self.pos
                        .store((idx + 1) % self.items.len(), Ordering::Relaxed);
                    Ok(self.items[idx].clone())
                }
                "reset" => {
                    self.pos.store(0, Ordering::Relaxed);
                    Ok(Value::from(()))
                }
                _ => Err(Error::from(ErrorKind::UnknownMethod)),
            }
        }
    }

    if items.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "RuntimeError: at least one item has to be provided",
        ));
    }
    Ok(Value::from_object(Cycler {
        items: items.0,
        pos: AtomicUsize::new(0),
    }))
}

fn joiner(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let (pos, kwargs) = split_args(args.into_values())?;
    let mut slots = vec![pos.into_iter().next()];
    if let Some(kwargs) = kwargs {
        take_kwargs(&kwargs, &["sep"], &mut slots, "joiner")?;
    }
    let sep = slots.pop().flatten().unwrap_or(Value::from(", "));
    Ok(minijinja_contrib::globals::joiner(Some(sep)))
}

/// `do_format`: `soft_str(value) % (kwargs or args)`.
fn format(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let (pos, kwargs) = split_args(args.into_values())?;
    let Some((value, rest)) = pos.split_first() else {
        return Err(type_error(
            "format() missing 1 required positional argument",
        ));
    };
    let kwargs = kwargs.filter(|k| k.args().next().is_some());
    if kwargs.is_some() && !rest.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "FilterArgumentError: can't handle positional and keyword arguments at the same time",
        ));
    }
    let fmt = pyrepr::to_str(value)?;
    Ok(Value::from(pyformat::percent_format(
        &fmt,
        rest,
        kwargs.as_ref(),
    )?))
}

/// `do_default(value, default_value='', boolean=False)`.
fn default(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "default",
        &args.into_values(),
        &["value", "default_value", "boolean"],
        1,
    )?;
    let value = slots[0].clone().unwrap_or_default();
    let other = slots[1].clone().unwrap_or(Value::from(""));
    let boolean = slots[2].as_ref().is_some_and(Value::is_true);
    Ok(if value.is_undefined() || (boolean && !value.is_true()) {
        other
    } else {
        value
    })
}

/// `do_dictsort(value, case_sensitive=False, by='key', reverse=False)`: a
/// list of `(key, value)` tuples.
fn dictsort(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "dictsort",
        &args.into_values(),
        &["value", "case_sensitive", "by", "reverse"],
        1,
    )?;
    let value = slots[0].clone().unwrap_or_default();
    let case_sensitive = slots[1].as_ref().is_some_and(Value::is_true);
    let pos = match slots[2].as_ref().map(|v| v.as_str()) {
        None | Some(Some("key")) => 0,
        Some(Some("value")) => 1,
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "FilterArgumentError: You can only sort by either \"key\" or \"value\"",
            ))
        }
    };
    let reverse = slots[3].as_ref().is_some_and(Value::is_true);
    if value.kind() != ValueKind::Map || pyrepr::is_namespace(&value) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "AttributeError: '{}' object has no attribute 'items'",
                py_type_name(&value)
            ),
        ));
    }
    let pairs: Vec<(Value, Value)> = value
        .as_object()
        .and_then(|o| o.try_iter_pairs())
        .into_iter()
        .flatten()
        .collect();
    let key = |p: &(Value, Value)| -> Value {
        let k = if pos == 0 { &p.0 } else { &p.1 };
        match k.as_str() {
            Some(s) if !case_sensitive => Value::from(unicode::lower(s)),
            _ => k.clone(),
        }
    };
    let mut keyed: Vec<(Value, (Value, Value))> = pairs.into_iter().map(|p| (key(&p), p)).collect();
    pysort::try_sort(&mut keyed, &mut |a, b| {
        let o = pysort::py_compare(&a.0, &b.0)?;
        Ok(if reverse { o.reverse() } else { o })
    })?;
    Ok(Value::from(
        keyed
            .into_iter()
            .map(|(_, (k, v))| Value::from(Tuple::from([k, v])))
            .collect::<Vec<_>>(),
    ))
}

/// `do_sum`: an item without the attribute is an undefined error in Python.
fn sum(state: &State, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "sum",
        &args.into_values(),
        &["iterable", "attribute", "start"],
        1,
    )?;
    let iterable = slots[0].clone().unwrap_or_default();
    let attribute = slots[1].clone().filter(|a| !a.is_none());
    if let Some(attr) = &attribute {
        for item in iter_py(&iterable)? {
            if get_attribute(state, &item, attr)?.is_undefined() {
                return Err(Error::new(
                    ErrorKind::UndefinedError,
                    format!("'{}' has no attribute '{attr}'", py_type_name(&item)),
                ));
            }
        }
    } else {
        for item in iter_py(&iterable)? {
            if item.is_undefined() {
                return Err(Error::from(ErrorKind::UndefinedError));
            }
        }
    }
    let attr_str = attribute
        .as_ref()
        .and_then(|a| a.as_str().map(str::to_string));
    minijinja::filters::sum(
        state,
        iterable,
        attr_str.as_deref(),
        slots[2].clone(),
        minijinja::value::Kwargs::from_iter(std::iter::empty::<(&str, Value)>()),
    )
}

/// `do_attr`: Python attribute lookup, which on dicts, lists and strings
/// finds methods rather than items (printed, a method cannot be matched;
/// it is treated as undefined). Namespaces do have attributes.
fn attr(v: &Value, name: &Value) -> Result<Value, Error> {
    if pyrepr::is_namespace(v) {
        if let Some(n) = name.as_str() {
            return v.get_attr(n);
        }
    }
    Ok(Value::UNDEFINED)
}

/// Jinja2's `_prepare_attribute_parts`: dotted, digit parts are indices.
fn attribute_parts(attr: &Value) -> Vec<Value> {
    match attr.as_str() {
        Some(s) => s
            .split('.')
            .map(|p| match p.parse::<i64>() {
                Ok(i) if p.bytes().all(|b| b.is_ascii_digit()) => Value::from(i),
                _ => Value::from(p),
            })
            .collect(),
        None if attr.is_none() => Vec::new(),
        None => vec![attr.clone()],
    }
}

/// `environment.getitem`: item lookup, undefined when missing.
fn getitem(v: &Value, key: &Value) -> Value {
    if v.is_undefined() {
        return Value::UNDEFINED;
    }
    v.get_item(key).unwrap_or(Value::UNDEFINED)
}

/// `do_sort(value, reverse=False, case_sensitive=False, attribute=None)`:
/// keys are lists of the comma separated attributes, compared as Python does.
fn sort(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let slots = bind(
        "sort",
        &args.into_values(),
        &["value", "reverse", "case_sensitive", "attribute"],
        1,
    )?;
    let value = slots[0].clone().unwrap_or_default();
    let reverse = slots[1].as_ref().is_some_and(Value::is_true);
    let case_sensitive = slots[2].as_ref().is_some_and(Value::is_true);
    let parts: Vec<Vec<Value>> = match &slots[3] {
        None => vec![Vec::new()],
        Some(a) => match a.as_str() {
            Some(s) => s
                .split(',')
                .map(|p| attribute_parts(&Value::from(p)))
                .collect(),
            None => vec![attribute_parts(a)],
        },
    };
    let items: Vec<Value> = if value.is_undefined() {
        Vec::new()
    } else {
        iter_py(&value)?.collect()
    };
    let mut keyed: Vec<(Vec<Value>, Value)> = items
        .into_iter()
        .map(|item| {
            let key = parts
                .iter()
                .map(|path| {
                    let k = path.iter().fold(item.clone(), |cur, p| getitem(&cur, p));
                    match k.as_str() {
                        Some(s) if !case_sensitive => Value::from(unicode::lower(s)),
                        _ => k,
                    }
                })
                .collect();
            (key, item)
        })
        .collect();
    pysort::try_sort(&mut keyed, &mut |a, b| {
        let o = pysort::py_compare_lists(&a.0, &b.0)?;
        Ok(if reverse { o.reverse() } else { o })
    })?;
    Ok(Value::from(
        keyed.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
    ))
}
