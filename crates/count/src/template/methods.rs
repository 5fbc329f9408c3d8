//! Python's str, dict and list methods, as templates call them
//! (`message.content.strip()`, `args.items()`, `name.split('.')`).
//!
//! minijinja-contrib's pycompat covers part of this, with Rust's notion of
//! whitespace and case and without start/end arguments; everything a chat
//! template plausibly reaches is implemented here with CPython semantics;
//! pycompat only serves what is left.

use minijinja::value::{Tuple, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::args::{int_arg, opt_int_arg, positional, str_arg, type_error, value_error};
use super::pyrepr::py_type_name;
use super::pyrepr::{DictView, ViewKind};
use super::unicode;

pub fn unknown_method_callback(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let rv = match value.kind() {
        ValueKind::String => string_method(value, method, args),
        ValueKind::Map => map_method(value, method, args),
        ValueKind::Seq => seq_method(value, method, args),
        _ => None,
    };
    match rv {
        Some(rv) => rv,
        None => minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args),
    }
}

fn unknown() -> Error {
    Error::from(ErrorKind::UnknownMethod)
}

/// Byte offsets of a Python slice `[start:end]` of `s` (in characters),
/// plus the character index of its start.
fn char_slice(s: &str, start: Option<i64>, end: Option<i64>) -> (usize, usize, usize) {
    // The whole string, without counting its characters: `startswith`,
    // `endswith` and `find` on a long message are called this way, and
    // counting was most of a 100 kB render (issue 31).
    if start.is_none() && end.is_none() {
        return (0, s.len(), 0);
    }
    let ascii = s.is_ascii();
    let len = if ascii { s.len() } else { s.chars().count() } as i64;
    let norm = |i: Option<i64>, default: i64| -> i64 {
        match i {
            None => default,
            Some(i) if i < 0 => (i + len).max(0),
            Some(i) => i.min(len),
        }
    };
    let a = norm(start, 0);
    let b = norm(end, len).max(a);
    let byte = |ci: i64| -> usize {
        if ascii {
            ci as usize
        } else {
            s.char_indices()
                .nth(ci as usize)
                .map_or(s.len(), |(i, _)| i)
        }
    };
    let (ba, bb) = (byte(a), byte(b));
    (ba, bb.max(ba), a as usize)
}

fn char_index(s: &str, byte: usize) -> usize {
    if s.is_ascii() {
        byte
    } else {
        s[..byte].chars().count()
    }
}

fn slice_args(func: &str, args: &[Value]) -> Result<(Option<i64>, Option<i64>), Error> {
    Ok((
        opt_int_arg(func, args.get(1))?,
        opt_int_arg(func, args.get(2))?,
    ))
}

/// `str.find`-like search: the character index of `sub` in `s[start:end]`.
fn find_impl(s: &str, args: &[Value], func: &str, reverse: bool) -> Result<Option<usize>, Error> {
    let args = positional(func, args, 1, 3)?;
    let sub = str_arg(func, &args[0])?;
    let (start, end) = slice_args(func, args)?;
    // Python: an empty needle is found at `start` only if start <= len.
    if let Some(st) = start {
        let len = s.chars().count() as i64;
        let st = if st < 0 { (st + len).max(0) } else { st };
        if st > len {
            return Ok(None);
        }
    }
    let (a, b, ca) = char_slice(s, start, end);
    let hay = &s[a..b];
    let found = if reverse {
        hay.rfind(sub)
    } else {
        hay.find(sub)
    };
    Ok(found.map(|i| ca + char_index(hay, i)))
}

fn strip_chars<'a>(
    s: &'a str,
    chars: Option<&Value>,
    func: &str,
    left: bool,
    right: bool,
) -> Result<&'a str, Error> {
    match chars {
        None => {}
        Some(c) if c.is_none() => {}
        Some(c) => {
            let set: Vec<char> = str_arg(func, c)?.chars().collect();
            let mut r = s;
            if left {
                r = r.trim_start_matches(&set[..]);
            }
            if right {
                r = r.trim_end_matches(&set[..]);
            }
            return Ok(r);
        }
    }
    Ok(match (left, right) {
        (true, true) => unicode::strip(s),
        (true, false) => unicode::lstrip(s),
        _ => unicode::rstrip(s),
    })
}

fn list_of(items: impl IntoIterator<Item = String>) -> Value {
    Value::from(items.into_iter().map(Value::from).collect::<Vec<_>>())
}

/// `str.split` / `str.rsplit` with CPython's whitespace rule for `sep=None`.
pub fn split(
    s: &str,
    sep: Option<&str>,
    maxsplit: i64,
    reverse: bool,
) -> Result<Vec<String>, Error> {
    let max = if maxsplit < 0 {
        usize::MAX
    } else {
        maxsplit as usize
    };
    match sep {
        Some("") => Err(value_error("empty separator")),
        Some(sep) => {
            if max == usize::MAX {
                return Ok(s.split(sep).map(str::to_string).collect());
            }
            if reverse {
                let mut v: Vec<String> = s
                    .rsplitn(max.saturating_add(1), sep)
                    .map(str::to_string)
                    .collect();
                v.reverse();
                Ok(v)
            } else {
                Ok(s.splitn(max.saturating_add(1), sep)
                    .map(str::to_string)
                    .collect())
            }
        }
        None => {
            let mut out = Vec::new();
            if !reverse {
                let mut rest = unicode::lstrip(s);
                while !rest.is_empty() {
                    if out.len() == max {
                        out.push(rest.to_string());
                        break;
                    }
                    let end = rest.find(unicode::is_space).unwrap_or(rest.len());
                    out.push(rest[..end].to_string());
                    rest = unicode::lstrip(&rest[end..]);
                }
            } else {
                let mut rest = unicode::rstrip(s);
                while !rest.is_empty() {
                    if out.len() == max {
                        out.push(rest.to_string());
                        break;
                    }
                    let start = rest
                        .char_indices()
                        .rev()
                        .find(|(_, c)| unicode::is_space(*c))
                        .map_or(0, |(i, c)| i + c.len_utf8());
                    out.push(rest[start..].to_string());
                    rest = unicode::rstrip(&rest[..start]);
                }
                out.reverse();
            }
            Ok(out)
        }
    }
}

fn split_args_py(func: &str, args: &[Value]) -> Result<(Option<String>, i64), Error> {
    let slots = super::args::bind(func, args, &["sep", "maxsplit"], 0)?;
    let sep = match &slots[0] {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(str_arg(func, v)?.to_string()),
    };
    let maxsplit = match &slots[1] {
        None => -1,
        Some(v) => int_arg(func, v)?,
    };
    Ok((sep, maxsplit))
}

fn pad(s: &str, fill: char, left: usize, right: usize) -> String {
    let mut out = String::with_capacity(s.len() + (left + right) * fill.len_utf8());
    out.extend(std::iter::repeat_n(fill, left));
    out.push_str(s);
    out.extend(std::iter::repeat_n(fill, right));
    out
}

/// Widths beyond this are refused rather than allocated.
const MAX_PAD: i64 = 1 << 24;

fn width_and_fill(func: &str, args: &[Value]) -> Result<(i64, char), Error> {
    let args = positional(func, args, 1, 2)?;
    let width = int_arg(func, &args[0])?;
    if width > MAX_PAD {
        return Err(Error::new(ErrorKind::InvalidOperation, "MemoryError"));
    }
    let fill = match args.get(1) {
        None => ' ',
        Some(f) => {
            let f = str_arg(func, f)?;
            let mut it = f.chars();
            match (it.next(), it.next()) {
                (Some(c), None) => c,
                _ => {
                    return Err(type_error(
                        "The fill character must be exactly one character long",
                    ))
                }
            }
        }
    };
    Ok((width, fill))
}

/// CPython's `str.center`: the odd extra space goes left only when both the
/// padding and the width are odd.
pub fn center(s: &str, width: i64, fill: char) -> String {
    let len = s.chars().count() as i64;
    if width <= len {
        return s.to_string();
    }
    let marg = width - len;
    let left = marg / 2 + (marg & width & 1);
    pad(s, fill, left as usize, (marg - left) as usize)
}

fn expandtabs(s: &str, tabsize: i64) -> String {
    let mut out = String::with_capacity(s.len());
    let mut col: i64 = 0;
    for c in s.chars() {
        match c {
            '\t' => {
                if tabsize > 0 {
                    let n = tabsize - col % tabsize;
                    out.extend(std::iter::repeat_n(' ', n as usize));
                    col += n;
                }
            }
            '\n' | '\r' => {
                out.push(c);
                col = 0;
            }
            c => {
                out.push(c);
                col += 1;
            }
        }
    }
    out
}

fn bool_of(s: &str, f: fn(char) -> bool) -> Value {
    Value::from(!s.is_empty() && s.chars().all(f))
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per Python `str` method: split, the table a reader holds against CPython would scatter"
)]
fn string_method(value: &Value, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    let s = value.as_str()?;
    let no_args = |args: &[Value]| positional(method, args, 0, 0).map(|_| ());
    let rv = (|| -> Result<Value, Error> {
        Ok(match method {
            "strip" | "lstrip" | "rstrip" => {
                let args = positional(method, args, 0, 1)?;
                let (l, r) = match method {
                    "strip" => (true, true),
                    "lstrip" => (true, false),
                    _ => (false, true),
                };
                Value::from(strip_chars(s, args.first(), method, l, r)?)
            }
            "split" | "rsplit" => {
                let (sep, maxsplit) = split_args_py(method, args)?;
                list_of(split(s, sep.as_deref(), maxsplit, method == "rsplit")?)
            }
            "splitlines" => {
                let slots = super::args::bind(method, args, &["keepends"], 0)?;
                let keep = slots[0].as_ref().is_some_and(Value::is_true);
                list_of(unicode::splitlines(s, keep).into_iter().map(str::to_string))
            }
            "startswith" | "endswith" => {
                let args = positional(method, args, 1, 3)?;
                let (start, end) = slice_args(method, args)?;
                if let Some(st) = start {
                    let len = s.chars().count() as i64;
                    let st = if st < 0 { (st + len).max(0) } else { st };
                    if st > len {
                        return Ok(Value::from(false));
                    }
                }
                let (a, b, _) = char_slice(s, start, end);
                let hay = &s[a..b];
                let test = |p: &str| {
                    if method == "startswith" {
                        hay.starts_with(p)
                    } else {
                        hay.ends_with(p)
                    }
                };
                let pat = &args[0];
                if let Some(p) = pat.as_str() {
                    Value::from(test(p))
                } else if pat.is_tuple() {
                    let mut hit = false;
                    for p in pat.try_iter()? {
                        let p = p.as_str().ok_or_else(|| {
                            type_error(format!(
                                "tuple for {method} must only contain str, not {}",
                                py_type_name(&p)
                            ))
                        })?;
                        if test(p) {
                            hit = true;
                            break;
                        }
                    }
                    Value::from(hit)
                } else {
                    return Err(type_error(format!(
                        "{method} first arg must be str or a tuple of str, not {}",
                        py_type_name(pat)
                    )));
                }
            }
            "find" | "rfind" => {
                let r = find_impl(s, args, method, method == "rfind")?;
                Value::from(r.map_or(-1, |i| i as i64))
            }
            "index" | "rindex" => match find_impl(s, args, method, method == "rindex")? {
                Some(i) => Value::from(i as i64),
                None => return Err(value_error("substring not found")),
            },
            "count" => {
                let args = positional(method, args, 1, 3)?;
                let sub = str_arg(method, &args[0])?;
                let (start, end) = slice_args(method, args)?;
                if let Some(st) = start {
                    let len = s.chars().count() as i64;
                    let st = if st < 0 { (st + len).max(0) } else { st };
                    if st > len {
                        return Ok(Value::from(0));
                    }
                }
                let (a, b, _) = char_slice(s, start, end);
                let hay = &s[a..b];
                if sub.is_empty() {
                    Value::from(hay.chars().count() as i64 + 1)
                } else {
                    Value::from(hay.matches(sub).count() as i64)
                }
            }
            "replace" => {
                let args = positional(method, args, 2, 3)?;
                let old = str_arg(method, &args[0])?;
                let new = str_arg(method, &args[1])?;
                let count = match args.get(2) {
                    None => -1,
                    Some(c) => int_arg(method, c)?,
                };
                Value::from(py_replace(s, old, new, count))
            }
            "upper" => {
                no_args(args)?;
                Value::from(unicode::upper(s))
            }
            "lower" => {
                no_args(args)?;
                Value::from(unicode::lower(s))
            }
            "title" => {
                no_args(args)?;
                Value::from(unicode::title(s))
            }
            "capitalize" => {
                no_args(args)?;
                Value::from(unicode::capitalize(s))
            }
            "swapcase" => {
                no_args(args)?;
                Value::from(unicode::swapcase(s))
            }
            "casefold" => {
                no_args(args)?;
                Value::from(unicode::casefold(s))
            }
            "isalnum" => {
                no_args(args)?;
                bool_of(s, unicode::is_alnum)
            }
            "isalpha" => {
                no_args(args)?;
                bool_of(s, unicode::is_alpha)
            }
            "isdecimal" => {
                no_args(args)?;
                bool_of(s, unicode::is_decimal)
            }
            "isdigit" => {
                no_args(args)?;
                bool_of(s, unicode::is_digit)
            }
            "isnumeric" => {
                no_args(args)?;
                bool_of(s, unicode::is_numeric)
            }
            "isspace" => {
                no_args(args)?;
                bool_of(s, unicode::is_space)
            }
            "isascii" => {
                no_args(args)?;
                Value::from(s.is_ascii())
            }
            "isprintable" => {
                no_args(args)?;
                Value::from(s.chars().all(unicode::is_printable))
            }
            "islower" => {
                no_args(args)?;
                Value::from(unicode::str_islower(s))
            }
            "isupper" => {
                no_args(args)?;
                Value::from(unicode::str_isupper(s))
            }
            "istitle" => {
                no_args(args)?;
                Value::from(unicode::str_istitle(s))
            }
            "join" => {
                let args = positional(method, args, 1, 1)?;
                let mut out = String::new();
                for (i, item) in args[0].try_iter()?.enumerate() {
                    let part = item.as_str().ok_or_else(|| {
                        type_error(format!(
                            "sequence item {i}: expected str instance, {} found",
                            py_type_name(&item)
                        ))
                    })?;
                    if i > 0 {
                        out.push_str(s);
                    }
                    out.push_str(part);
                }
                Value::from(out)
            }
            "center" => {
                let (width, fill) = width_and_fill(method, args)?;
                Value::from(center(s, width, fill))
            }
            "ljust" | "rjust" => {
                let (width, fill) = width_and_fill(method, args)?;
                let len = s.chars().count() as i64;
                let n = (width - len).max(0) as usize;
                Value::from(if method == "ljust" {
                    pad(s, fill, 0, n)
                } else {
                    pad(s, fill, n, 0)
                })
            }
            "zfill" => {
                let args = positional(method, args, 1, 1)?;
                let width = int_arg(method, &args[0])?;
                if width > MAX_PAD {
                    return Err(Error::new(ErrorKind::InvalidOperation, "MemoryError"));
                }
                let len = s.chars().count() as i64;
                if width <= len {
                    Value::from(s)
                } else {
                    let n = (width - len) as usize;
                    let (sign, rest) = match s.chars().next() {
                        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
                        _ => (None, s),
                    };
                    let mut out = String::with_capacity(width as usize);
                    out.extend(sign);
                    out.extend(std::iter::repeat_n('0', n));
                    out.push_str(rest);
                    Value::from(out)
                }
            }
            "partition" | "rpartition" => {
                let args = positional(method, args, 1, 1)?;
                let sep = str_arg(method, &args[0])?;
                if sep.is_empty() {
                    return Err(value_error("empty separator"));
                }
                let found = if method == "partition" {
                    s.find(sep)
                } else {
                    s.rfind(sep)
                };
                let parts: [&str; 3] = match found {
                    Some(i) => [&s[..i], sep, &s[i + sep.len()..]],
                    None if method == "partition" => [s, "", ""],
                    None => ["", "", s],
                };
                Value::from(Tuple::from(parts.map(Value::from)))
            }
            "removeprefix" => {
                let args = positional(method, args, 1, 1)?;
                let p = str_arg(method, &args[0])?;
                Value::from(s.strip_prefix(p).unwrap_or(s))
            }
            "removesuffix" => {
                let args = positional(method, args, 1, 1)?;
                let p = str_arg(method, &args[0])?;
                Value::from(s.strip_suffix(p).unwrap_or(s))
            }
            "expandtabs" => {
                let slots = super::args::bind(method, args, &["tabsize"], 0)?;
                let tabsize = match &slots[0] {
                    None => 8,
                    Some(v) => int_arg(method, v)?,
                };
                if tabsize > MAX_PAD {
                    return Err(Error::new(ErrorKind::InvalidOperation, "MemoryError"));
                }
                Value::from(expandtabs(s, tabsize))
            }
            "format" => {
                let (pos, kwargs) = super::args::split_args(args.to_vec())?;
                Value::from(super::pyformat::str_format(s, &pos, kwargs.as_ref())?)
            }
            _ => return Err(unknown()),
        })
    })();
    match rv {
        Err(e) if e.kind() == ErrorKind::UnknownMethod => None,
        rv => Some(rv),
    }
}

/// `str.replace(old, new, count)`: a negative count replaces all.
pub fn py_replace(s: &str, old: &str, new: &str, count: i64) -> String {
    if count < 0 {
        s.replace(old, new)
    } else {
        s.replacen(old, new, count as usize)
    }
}

fn map_method(value: &Value, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    let obj = value.as_object()?;
    let rv = (|| -> Result<Value, Error> {
        Ok(match method {
            "items" | "keys" | "values" => {
                positional(method, args, 0, 0)?;
                let kind = match method {
                    "items" => ViewKind::Items,
                    "keys" => ViewKind::Keys,
                    _ => ViewKind::Values,
                };
                DictView::value(kind, value.clone())
            }
            "get" => {
                let args = positional(method, args, 1, 2)?;
                match obj.get_value(&args[0]) {
                    Some(v) => v,
                    None => args.get(1).cloned().unwrap_or(Value::from(())),
                }
            }
            "copy" => {
                positional(method, args, 0, 0)?;
                value.clone()
            }
            _ => return Err(unknown()),
        })
    })();
    match rv {
        Err(e) if e.kind() == ErrorKind::UnknownMethod => None,
        rv => Some(rv),
    }
}

fn seq_method(value: &Value, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    value.as_object()?;
    let rv = (|| -> Result<Value, Error> {
        Ok(match method {
            "count" => {
                let args = positional(method, args, 1, 1)?;
                let n = value.try_iter()?.filter(|x| *x == args[0]).count();
                Value::from(n as i64)
            }
            "index" => {
                let args = positional(method, args, 1, 3)?;
                let items: Vec<Value> = value.try_iter()?.collect();
                let len = items.len() as i64;
                let norm = |i: Option<i64>, d: i64| match i {
                    None => d,
                    Some(i) if i < 0 => (i + len).max(0),
                    Some(i) => i.min(len),
                };
                let (start, end) = slice_args(method, args)?;
                let (a, b) = (norm(start, 0) as usize, norm(end, len) as usize);
                let found = (a..b.max(a)).find(|&i| items[i] == args[0]);
                match found {
                    Some(i) => Value::from(i as i64),
                    None => return Err(value_error("value is not in list")),
                }
            }
            "copy" if !value.is_tuple() => {
                positional(method, args, 0, 0)?;
                value.clone()
            }
            _ => return Err(unknown()),
        })
    })();
    match rv {
        Err(e) if e.kind() == ErrorKind::UnknownMethod => None,
        rv => Some(rv),
    }
}
