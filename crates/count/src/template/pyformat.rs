//! Python's printf-style `str % args`, which Jinja2's `format` filter uses
//! (`"%s: %.2f"|format(name, x)`). minijinja's version prints values with
//! its own `Display` and lacks `%r`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, Value};

use super::args::type_error;
use super::pyrepr;
use super::pyrepr::py_type_name;

const MAX_WIDTH: usize = 1 << 20;

enum Args<'a> {
    Seq(&'a [Value], usize),
    Map(&'a Kwargs),
}

impl Args<'_> {
    fn next(&mut self) -> Result<Value, Error> {
        match self {
            Args::Seq(vals, pos) => {
                let v = vals
                    .get(*pos)
                    .cloned()
                    .ok_or_else(|| type_error("not enough arguments for format string"))?;
                *pos += 1;
                Ok(v)
            }
            // `'%s' % mapping` formats the mapping itself
            Args::Map(k) => Ok(Value::from_pairs(
                k.args()
                    .map(|a| (Value::from(a), k.peek::<Value>(a).unwrap_or_default()))
                    .collect::<Vec<_>>(),
            )),
        }
    }
}

/// Formats `fmt % args` (positional) or `fmt % kwargs` (mapping): CPython's
/// `PyUnicode_Format` loop, one conversion at a time.
pub fn percent_format(
    fmt: &str,
    positional: &[Value],
    kwargs: Option<&Kwargs>,
) -> Result<String, Error> {
    let mut args = match kwargs {
        Some(k) => Args::Map(k),
        None => Args::Seq(positional, 0),
    };
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::with_capacity(fmt.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = format_arg_parse(&chars, &mut i, &mut args)?;
        if spec.conv == '%' {
            out.push('%');
            continue;
        }
        let v = match spec.keyed.take() {
            Some(v) => v,
            None => args.next()?,
        };
        format_arg_format(&spec, &v, &mut out)?;
    }
    if let Args::Seq(vals, pos) = args {
        if pos < vals.len() {
            return Err(type_error(
                "not all arguments converted during string formatting",
            ));
        }
    }
    Ok(out)
}

/// One `%[(key)][flags][width][.prec][hlL]conv` as CPython's
/// `unicode_format_arg_parse` reads it.
struct Spec {
    /// The value `%(key)` named in the mapping.
    keyed: Option<Value>,
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    prec: Option<usize>,
    conv: char,
}

/// CPython's `unicode_format_arg_parse`: reads one spec after its `%`,
/// taking `*` widths and precisions from `args` in CPython's order.
fn format_arg_parse(chars: &[char], i: &mut usize, args: &mut Args) -> Result<Spec, Error> {
    let mut keyed = None;
    if chars.get(*i) == Some(&'(') {
        let start = *i + 1;
        let mut depth = 1;
        let mut j = start;
        while j < chars.len() && depth > 0 {
            match chars[j] {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            j += 1;
        }
        if depth > 0 {
            return Err(Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "ValueError: incomplete format key",
            ));
        }
        let key: String = chars[start..j - 1].iter().collect();
        let Args::Map(k) = &args else {
            return Err(type_error("format requires a mapping"));
        };
        keyed = Some(k.peek::<Option<Value>>(&key)?.ok_or_else(|| {
            Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!("KeyError: '{key}'"),
            )
        })?);
        *i = j;
    }
    let (mut left, mut zero, mut plus, mut space, mut alt) = (false, false, false, false, false);
    while let Some(&f) = chars.get(*i) {
        match f {
            '-' => left = true,
            '0' => zero = true,
            '+' => plus = true,
            ' ' => space = true,
            '#' => alt = true,
            _ => break,
        }
        *i += 1;
    }
    let mut width = 0usize;
    if chars.get(*i) == Some(&'*') {
        *i += 1;
        let w = args.next()?;
        let w = i64::try_from(w).map_err(|_| type_error("* wants int"))?;
        if w < 0 {
            left = true;
        }
        width = (w.unsigned_abs() as usize).min(MAX_WIDTH);
    } else {
        while let Some(d) = chars.get(*i).and_then(|c| c.to_digit(10)) {
            width = (width * 10 + d as usize).min(MAX_WIDTH);
            *i += 1;
        }
    }
    let mut prec: Option<usize> = None;
    if chars.get(*i) == Some(&'.') {
        *i += 1;
        if chars.get(*i) == Some(&'*') {
            *i += 1;
            let p = i64::try_from(args.next()?).map_err(|_| type_error("* wants int"))?;
            prec = Some((p.max(0) as usize).min(MAX_WIDTH));
        } else {
            let mut p = 0usize;
            while let Some(d) = chars.get(*i).and_then(|c| c.to_digit(10)) {
                p = (p * 10 + d as usize).min(MAX_WIDTH);
                *i += 1;
            }
            prec = Some(p);
        }
    }
    while matches!(chars.get(*i), Some('h' | 'l' | 'L')) {
        *i += 1;
    }
    let Some(&conv) = chars.get(*i) else {
        return Err(Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "ValueError: incomplete format",
        ));
    };
    *i += 1;
    Ok(Spec {
        keyed,
        left,
        zero,
        plus,
        space,
        alt,
        width,
        prec,
        conv,
    })
}

/// CPython's `unicode_format_arg_format` and `_output`: converts `v` by
/// `spec.conv` and pads it to the width.
fn format_arg_format(spec: &Spec, v: &Value, out: &mut String) -> Result<(), Error> {
    let body = match spec.conv {
        's' | 'r' | 'a' => format_str(spec, v)?,
        'c' => formatchar(v)?,
        'd' | 'i' | 'u' | 'o' | 'x' | 'X' => {
            out.push_str(&formatlong(spec, v)?);
            return Ok(());
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
            out.push_str(&formatfloat(spec, v)?);
            return Ok(());
        }
        other => {
            return Err(Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!("ValueError: unsupported format character '{other}'"),
            ))
        }
    };
    let len = body.chars().count();
    if spec.width > len {
        let fill = " ".repeat(spec.width - len);
        if spec.left {
            out.push_str(&body);
            out.push_str(&fill);
        } else {
            out.push_str(&fill);
            out.push_str(&body);
        }
    } else {
        out.push_str(&body);
    }
    Ok(())
}

/// `%s`, `%r` and `%a`: `str()`, `repr()` or `ascii()`, cut to the precision.
fn format_str(spec: &Spec, v: &Value) -> Result<String, Error> {
    let mut s = if spec.conv == 's' {
        pyrepr::to_str(v)?
    } else {
        let mut r = String::new();
        pyrepr::push_repr(&mut r, v, 0)?;
        if spec.conv == 'a' {
            r = ascii_escape(&r);
        }
        r
    };
    if let Some(p) = spec.prec {
        if let Some((idx, _)) = s.char_indices().nth(p) {
            s.truncate(idx);
        }
    }
    Ok(s)
}

/// CPython's `formatchar`: a one-character string or a code point.
fn formatchar(v: &Value) -> Result<String, Error> {
    match v.kind() {
        ValueKind::String if v.as_str().is_some_and(|s| s.chars().count() == 1) => {
            Ok(v.as_str().unwrap_or_default().to_string())
        }
        ValueKind::Number if v.is_integer() => {
            let cp = i64::try_from(v.clone()).unwrap_or(-1);
            u32::try_from(cp)
                .ok()
                .and_then(char::from_u32)
                .map(String::from)
                .ok_or_else(|| type_error("%c arg not in range(0x110000)"))
        }
        _ => Err(type_error("%c requires int or char")),
    }
}

/// CPython's `mainformatlong`/`formatlong`: integer conversions, padded.
fn formatlong(spec: &Spec, v: &Value) -> Result<String, Error> {
    let conv = spec.conv;
    let n: i128 = match v.kind() {
        ValueKind::Bool => v.is_true() as i128,
        ValueKind::Number if v.is_integer() => i128::try_from(v.clone()).unwrap_or(0),
        ValueKind::Number if matches!(conv, 'd' | 'i' | 'u') => {
            let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
            if !f.is_finite() {
                return Err(type_error("cannot convert float to integer"));
            }
            f.trunc() as i128
        }
        _ => {
            return Err(type_error(format!(
                "%{conv} format: {} is required, not {}",
                if matches!(conv, 'd' | 'i' | 'u') {
                    "a real number"
                } else {
                    "an integer"
                },
                py_type_name(v)
            )))
        }
    };
    let mut digits = match conv {
        'o' => format!("{:o}", n.unsigned_abs()),
        'x' => format!("{:x}", n.unsigned_abs()),
        'X' => format!("{:X}", n.unsigned_abs()),
        _ => n.unsigned_abs().to_string(),
    };
    if let Some(p) = spec.prec {
        if digits.len() < p {
            digits.insert_str(0, &"0".repeat(p - digits.len()));
        }
    }
    let prefix = match (spec.alt, conv) {
        (true, 'o') => "0o",
        (true, 'x') => "0x",
        (true, 'X') => "0X",
        _ => "",
    };
    let sign = sign_str(n < 0, spec.plus, spec.space);
    Ok(pad_number(
        sign, prefix, &digits, spec.width, spec.left, spec.zero,
    ))
}

/// CPython's `formatfloat`: `%e`, `%f` and `%g`, padded.
fn formatfloat(spec: &Spec, v: &Value) -> Result<String, Error> {
    let f = match v.kind() {
        ValueKind::Bool => v.is_true() as i64 as f64,
        ValueKind::Number => f64::try_from(v.clone()).unwrap_or(f64::NAN),
        _ => {
            return Err(type_error(format!(
                "must be real number, not {}",
                py_type_name(v)
            )))
        }
    };
    let digits = format_float(f.abs(), spec.conv, spec.prec.unwrap_or(6), spec.alt);
    let sign = sign_str(f.is_sign_negative() && !f.is_nan(), spec.plus, spec.space);
    let zero = spec.zero && f.is_finite();
    Ok(pad_number(sign, "", &digits, spec.width, spec.left, zero))
}

fn sign_str(neg: bool, plus: bool, space: bool) -> &'static str {
    if neg {
        "-"
    } else if plus {
        "+"
    } else if space {
        " "
    } else {
        ""
    }
}

fn pad_number(
    sign: &str,
    prefix: &str,
    digits: &str,
    width: usize,
    left: bool,
    zero: bool,
) -> String {
    let len = sign.len() + prefix.len() + digits.chars().count();
    let mut out = String::with_capacity(width.max(len));
    if width <= len {
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(digits);
    } else if left {
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(digits);
        out.push_str(&" ".repeat(width - len));
    } else if zero {
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(&"0".repeat(width - len));
        out.push_str(digits);
    } else {
        out.push_str(&" ".repeat(width - len));
        out.push_str(sign);
        out.push_str(prefix);
        out.push_str(digits);
    }
    out
}

/// `%e`/`%f`/`%g` of a non-negative float, like CPython's `PyOS_double_to_string`.
fn format_float(f: f64, conv: char, prec: usize, alt: bool) -> String {
    let upper = conv.is_ascii_uppercase();
    if !f.is_finite() {
        let s = if f.is_nan() { "nan" } else { "inf" };
        return if upper {
            s.to_uppercase()
        } else {
            s.to_string()
        };
    }
    let exp_form = |p: usize| -> String {
        let s = format!("{f:.p$e}");
        let (m, e) = s.split_once('e').unwrap_or((s.as_str(), "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let mut m = m.to_string();
        if alt && !m.contains('.') {
            m.push('.');
        }
        format!(
            "{m}{}{}{:02}",
            if upper { 'E' } else { 'e' },
            if e < 0 { '-' } else { '+' },
            e.abs()
        )
    };
    match conv.to_ascii_lowercase() {
        'f' => {
            let mut s = format!("{f:.prec$}");
            if alt && prec == 0 {
                s.push('.');
            }
            s
        }
        'e' => exp_form(prec),
        _ => {
            let p = prec.max(1);
            let probe = format!("{f:.prec$e}", prec = p - 1);
            let x: i64 = probe
                .split_once('e')
                .and_then(|(_, e)| e.parse().ok())
                .unwrap_or(0);
            let mut s = if -4 <= x && x < p as i64 {
                let dec = (p as i64 - 1 - x).max(0) as usize;
                format!("{f:.dec$}")
            } else {
                exp_form(p - 1)
            };
            if !alt {
                let (mant, exp) = match s.find(['e', 'E']) {
                    Some(k) => (s[..k].to_string(), s[k..].to_string()),
                    None => (s.clone(), String::new()),
                };
                let mant = if mant.contains('.') {
                    mant.trim_end_matches('0').trim_end_matches('.').to_string()
                } else {
                    mant
                };
                s = format!("{mant}{exp}");
            } else if !s.contains('.') {
                match s.find(['e', 'E']) {
                    Some(k) => s.insert(k, '.'),
                    None => s.push('.'),
                }
            }
            s
        }
    }
}

fn ascii_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let cp = c as u32;
        if c.is_ascii() {
            out.push(c);
        } else if cp <= 0xff {
            let _ = write!(out, "\\x{cp:02x}");
        } else if cp <= 0xffff {
            let _ = write!(out, "\\u{cp:04x}");
        } else {
            let _ = write!(out, "\\U{cp:08x}");
        }
    }
    out
}

/// `str.format(*args, **kwargs)` with Python's replacement fields, conversions
/// and format-spec mini-language.
pub fn str_format(fmt: &str, args: &[Value], kwargs: Option<&Kwargs>) -> Result<String, Error> {
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::with_capacity(fmt.len());
    let mut auto_idx: Option<usize> = None;
    let mut manual = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '}' {
            if chars.get(i + 1) == Some(&'}') {
                out.push('}');
                i += 2;
                continue;
            }
            return Err(value_err("Single '}' encountered in format string"));
        }
        if c != '{' {
            out.push(c);
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&'{') {
            out.push('{');
            i += 2;
            continue;
        }
        // find the matching '}', allowing one level of nested fields in the spec
        let start = i + 1;
        let mut depth = 1;
        let mut j = start;
        while j < chars.len() {
            match chars[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        if depth != 0 {
            return Err(value_err("expected '}' before end of string"));
        }
        let field: String = chars[start..j].iter().collect();
        i = j + 1;
        let (name, conversion, spec) = split_field(&field)?;
        let value = resolve_field(&name, args, kwargs, &mut auto_idx, &mut manual)?;
        // nested replacement fields inside the spec
        let spec = if spec.contains('{') {
            str_format_nested(&spec, args, kwargs, &mut auto_idx, &mut manual)?
        } else {
            spec
        };
        let value = match conversion {
            None => value,
            Some('s') => Value::from(pyrepr::to_str(&value)?),
            Some(c @ ('r' | 'a')) => {
                let mut r = String::new();
                pyrepr::push_repr(&mut r, &value, 0)?;
                Value::from(if c == 'a' { ascii_escape(&r) } else { r })
            }
            Some(other) => return Err(value_err(format!("Unknown conversion specifier {other}"))),
        };
        out.push_str(&format_value(&value, &spec)?);
    }
    Ok(out)
}

fn value_err(msg: impl Into<String>) -> Error {
    Error::new(
        minijinja::ErrorKind::InvalidOperation,
        format!("ValueError: {}", msg.into()),
    )
}

fn str_format_nested(
    spec: &str,
    args: &[Value],
    kwargs: Option<&Kwargs>,
    auto_idx: &mut Option<usize>,
    manual: &mut bool,
) -> Result<String, Error> {
    let mut out = String::new();
    let mut rest = spec;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .map(|k| open + k)
            .ok_or_else(|| value_err("unmatched '{' in format spec"))?;
        let (name, _, _) = split_field(&rest[open + 1..close])?;
        let v = resolve_field(&name, args, kwargs, auto_idx, manual)?;
        out.push_str(&pyrepr::to_str(&v)?);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `field_name[!conversion][:format_spec]`; brackets in the name may hold `:` or `!`.
fn split_field(field: &str) -> Result<(String, Option<char>, String), Error> {
    let mut in_bracket = false;
    let mut end = field.len();
    for (k, c) in field.char_indices() {
        match c {
            '[' => in_bracket = true,
            ']' => in_bracket = false,
            '!' | ':' if !in_bracket => {
                end = k;
                break;
            }
            _ => {}
        }
    }
    let name = field[..end].to_string();
    let rest = &field[end..];
    if let Some(r) = rest.strip_prefix('!') {
        let mut it = r.chars();
        let conv = it
            .next()
            .ok_or_else(|| value_err("end of string while looking for conversion specifier"))?;
        let after = it.as_str();
        let spec = match after.strip_prefix(':') {
            Some(s) => s.to_string(),
            None if after.is_empty() => String::new(),
            None => return Err(value_err("expected ':' after conversion specifier")),
        };
        Ok((name, Some(conv), spec))
    } else {
        Ok((name, None, rest.strip_prefix(':').unwrap_or("").to_string()))
    }
}

fn resolve_field(
    name: &str,
    args: &[Value],
    kwargs: Option<&Kwargs>,
    auto_idx: &mut Option<usize>,
    manual: &mut bool,
) -> Result<Value, Error> {
    let first_end = name.find(['.', '[']).unwrap_or(name.len());
    let first = &name[..first_end];
    let mut value = if first.is_empty() {
        if *manual {
            return Err(value_err(
                "cannot switch from manual field specification to automatic field numbering",
            ));
        }
        let idx = auto_idx.map_or(0, |x| x + 1);
        *auto_idx = Some(idx);
        args.get(idx).cloned().ok_or_else(|| {
            Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!(
                    "IndexError: Replacement index {idx} out of range for positional args tuple"
                ),
            )
        })?
    } else if let Ok(idx) = first.parse::<usize>() {
        if auto_idx.is_some() {
            return Err(value_err(
                "cannot switch from automatic field numbering to manual field specification",
            ));
        }
        *manual = true;
        args.get(idx).cloned().ok_or_else(|| {
            Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!(
                    "IndexError: Replacement index {idx} out of range for positional args tuple"
                ),
            )
        })?
    } else {
        kwargs
            .and_then(|k| k.peek::<Option<Value>>(first).ok().flatten())
            .ok_or_else(|| {
                Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("KeyError: '{first}'"),
                )
            })?
    };
    // accessors: `.attr` (Jinja2's getattr falls back to items) and `[key]`
    let mut rest = &name[first_end..];
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            value = value.get_attr(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| value_err("Missing ']' in format string"))?;
            let key = &r[..end];
            let key = match key.parse::<usize>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::from(key),
            };
            value = value.get_item(&key)?;
            rest = &r[end + 1..];
        } else {
            return Err(value_err(
                "Only '.' or '[' may follow ']' in format field specifier",
            ));
        }
    }
    Ok(value)
}

struct FormatSpec {
    fill: char,
    align: Option<char>,
    sign: Option<char>,
    alt: bool,
    zero: bool,
    width: usize,
    grouping: Option<char>,
    precision: Option<usize>,
    ty: Option<char>,
}

fn parse_spec(spec: &str) -> Result<FormatSpec, Error> {
    let chars: Vec<char> = spec.chars().collect();
    let mut i = 0;
    let mut fs = FormatSpec {
        fill: ' ',
        align: None,
        sign: None,
        alt: false,
        zero: false,
        width: 0,
        grouping: None,
        precision: None,
        ty: None,
    };
    let is_align = |c: char| matches!(c, '<' | '>' | '=' | '^');
    if chars.len() >= 2 && is_align(chars[1]) {
        fs.fill = chars[0];
        fs.align = Some(chars[1]);
        i = 2;
    } else if !chars.is_empty() && is_align(chars[0]) {
        fs.align = Some(chars[0]);
        i = 1;
    }
    if let Some(&s @ ('+' | '-' | ' ')) = chars.get(i) {
        fs.sign = Some(s);
        i += 1;
    }
    if chars.get(i) == Some(&'z') {
        i += 1;
    }
    if chars.get(i) == Some(&'#') {
        fs.alt = true;
        i += 1;
    }
    if chars.get(i) == Some(&'0') {
        fs.zero = true;
        i += 1;
    }
    while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
        fs.width = (fs.width * 10 + d as usize).min(MAX_WIDTH);
        i += 1;
    }
    if let Some(&g @ (',' | '_')) = chars.get(i) {
        fs.grouping = Some(g);
        i += 1;
    }
    if chars.get(i) == Some(&'.') {
        i += 1;
        let mut p = 0usize;
        let mut any = false;
        while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
            p = (p * 10 + d as usize).min(MAX_WIDTH);
            i += 1;
            any = true;
        }
        if !any {
            return Err(value_err("Format specifier missing precision"));
        }
        fs.precision = Some(p);
    }
    if i < chars.len() {
        fs.ty = Some(chars[i]);
        i += 1;
    }
    if i < chars.len() {
        return Err(value_err("Invalid format specifier"));
    }
    Ok(fs)
}

fn group_digits(digits: &str, sep: char, every: usize) -> String {
    let n = digits.len();
    let mut out = String::with_capacity(n + n / every);
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (n - k).is_multiple_of(every) {
            out.push(sep);
        }
        out.push(c);
    }
    out
}

/// Pads `sign + body` to the width with the spec's fill and alignment
/// (`=` puts the padding between sign and digits).
fn align(fs: &FormatSpec, sign: &str, body: &str, default_align: char) -> String {
    let (fill, al) = match (fs.align, fs.zero) {
        (Some(a), _) => (fs.fill, a),
        (None, true) => ('0', '='),
        (None, false) => (fs.fill, default_align),
    };
    let len = sign.chars().count() + body.chars().count();
    if fs.width <= len {
        return format!("{sign}{body}");
    }
    let pad = fs.width - len;
    let fills = |n: usize| -> String { std::iter::repeat_n(fill, n).collect() };
    match al {
        '<' => format!("{sign}{body}{}", fills(pad)),
        '^' => format!("{}{sign}{body}{}", fills(pad / 2), fills(pad - pad / 2)),
        '=' => format!("{sign}{}{body}", fills(pad)),
        _ => format!("{}{sign}{body}", fills(pad)),
    }
}

fn sign_of(fs: &FormatSpec, negative: bool) -> &'static str {
    match (negative, fs.sign) {
        (true, _) => "-",
        (false, Some('+')) => "+",
        (false, Some(' ')) => " ",
        _ => "",
    }
}

/// Python's `format(value, spec)`.
fn format_value(v: &Value, spec: &str) -> Result<String, Error> {
    if spec.is_empty() {
        return pyrepr::to_str(v);
    }
    let fs = parse_spec(spec)?;
    let unsupported = || {
        type_error(format!(
            "unsupported format string passed to {}.__format__",
            py_type_name(v)
        ))
    };
    match v.kind() {
        ValueKind::String => {
            if !matches!(fs.ty, None | Some('s')) {
                return Err(value_err(format!(
                    "Unknown format code '{}' for object of type 'str'",
                    fs.ty.unwrap_or('s')
                )));
            }
            if fs.sign.is_some() || fs.alt || fs.grouping.is_some() || fs.align == Some('=') {
                return Err(value_err("invalid format specifier for a string"));
            }
            let mut s = v.as_str().unwrap_or_default().to_string();
            if let Some(p) = fs.precision {
                if let Some((idx, _)) = s.char_indices().nth(p) {
                    s.truncate(idx);
                }
            }
            let fs = FormatSpec {
                fill: if fs.align.is_none() && fs.zero {
                    '0'
                } else {
                    fs.fill
                },
                align: Some(fs.align.unwrap_or('<')),
                ..fs
            };
            Ok(align(&fs, "", &s, '<'))
        }
        ValueKind::Bool | ValueKind::Number => {
            let is_int = v.kind() == ValueKind::Bool || v.is_integer();
            match fs.ty {
                None | Some('d' | 'n' | 'b' | 'o' | 'x' | 'X' | 'c') if is_int => {
                    let n: i128 = if v.kind() == ValueKind::Bool {
                        v.is_true() as i128
                    } else {
                        i128::try_from(v.clone()).unwrap_or(0)
                    };
                    if fs.precision.is_some() {
                        return Err(value_err(
                            "Precision not allowed in integer format specifier",
                        ));
                    }
                    if fs.ty == Some('c') {
                        let ch = u32::try_from(n)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| value_err("%c arg not in range(0x110000)"))?;
                        return Ok(align(&fs, "", &ch.to_string(), '<'));
                    }
                    let abs = n.unsigned_abs();
                    let (digits, prefix, every) = match fs.ty {
                        Some('b') => (format!("{abs:b}"), "0b", 4),
                        Some('o') => (format!("{abs:o}"), "0o", 4),
                        Some('x') => (format!("{abs:x}"), "0x", 4),
                        Some('X') => (format!("{abs:X}"), "0X", 4),
                        _ => (abs.to_string(), "", 3),
                    };
                    let digits = match fs.grouping {
                        Some(g) => group_digits(&digits, g, every),
                        None => digits,
                    };
                    let sign = format!(
                        "{}{}",
                        sign_of(&fs, n < 0),
                        if fs.alt { prefix } else { "" }
                    );
                    Ok(align(&fs, &sign, &digits, '>'))
                }
                None if !is_int && fs.precision.is_none() => {
                    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                    let mut body = String::new();
                    pyrepr::push_float_repr(&mut body, f.abs());
                    let body = group_float(&body, fs.grouping);
                    Ok(align(
                        &fs,
                        sign_of(&fs, f.is_sign_negative() && !f.is_nan()),
                        &body,
                        '>',
                    ))
                }
                None | Some('e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'n' | '%') => {
                    let f = if v.kind() == ValueKind::Bool {
                        v.is_true() as i64 as f64
                    } else {
                        f64::try_from(v.clone()).unwrap_or(f64::NAN)
                    };
                    let neg = f.is_sign_negative() && !f.is_nan();
                    let body = match fs.ty {
                        Some('%') => {
                            let mut s = format_float(
                                (f * 100.0).abs(),
                                'f',
                                fs.precision.unwrap_or(6),
                                fs.alt,
                            );
                            s.push('%');
                            s
                        }
                        Some(t @ ('e' | 'E' | 'f' | 'F' | 'g' | 'G')) => {
                            format_float(f.abs(), t, fs.precision.unwrap_or(6), fs.alt)
                        }
                        Some('n') => format_float(f.abs(), 'g', fs.precision.unwrap_or(6), fs.alt),
                        _ => format_general(f.abs(), fs.precision.unwrap_or(12), fs.alt),
                    };
                    let body = group_float(&body, fs.grouping);
                    Ok(align(&fs, sign_of(&fs, neg), &body, '>'))
                }
                Some(t) => Err(value_err(format!(
                    "Unknown format code '{t}' for object of type '{}'",
                    py_type_name(v)
                ))),
            }
        }
        _ => Err(unsupported()),
    }
}

/// Format type `None` with a precision: like `g`, but fixed notation keeps
/// a digit after the point and exponent form starts at `exp >= p - 1`.
fn format_general(f: f64, prec: usize, alt: bool) -> String {
    if !f.is_finite() {
        return format_float(f, 'g', prec, alt);
    }
    let p = prec.max(1);
    let probe = format!("{f:.prec$e}", prec = p - 1);
    let x: i64 = probe
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    if x < -4 || x >= p as i64 - 1 {
        format_float(f, 'e', p - 1, alt)
            .split_once('e')
            .map(|(m, e)| {
                let m = if alt || !m.contains('.') {
                    m.to_string()
                } else {
                    m.trim_end_matches('0').trim_end_matches('.').to_string()
                };
                format!("{m}e{e}")
            })
            .unwrap_or_default()
    } else {
        let dec = (p as i64 - 1 - x).max(0) as usize;
        let s = format!("{f:.dec$}");
        let mut s = if s.contains('.') {
            s.trim_end_matches('0').to_string()
        } else {
            s
        };
        if s.ends_with('.') || !s.contains('.') {
            if !s.contains('.') {
                s.push('.');
            }
            s.push('0');
        }
        s
    }
}

fn group_float(body: &str, grouping: Option<char>) -> String {
    let Some(g) = grouping else {
        return body.to_string();
    };
    let end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    format!("{}{}", group_digits(&body[..end], g, 3), &body[end..])
}
