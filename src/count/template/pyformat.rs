//! Python's printf-style `str % args`, which Jinja2's `format` filter uses
//! (`"%s: %.2f"|format(name, x)`). minijinja's version prints values with
//! its own `Display` and lacks `%r`.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, Value};

use super::args::type_error;
use super::pyrepr;
use super::tojson::py_type_name;

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

/// Formats `fmt % args` (positional) or `fmt % kwargs` (mapping).
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
        let mut value: Option<Value> = None;
        if chars.get(i) == Some(&'(') {
            let start = i + 1;
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
            value = Some(k.peek::<Option<Value>>(&key)?.ok_or_else(|| {
                Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("KeyError: '{key}'"),
                )
            })?);
            i = j;
        }
        let (mut left, mut zero, mut plus, mut space, mut alt) =
            (false, false, false, false, false);
        while let Some(&f) = chars.get(i) {
            match f {
                '-' => left = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' => space = true,
                '#' => alt = true,
                _ => break,
            }
            i += 1;
        }
        let mut width = 0usize;
        if chars.get(i) == Some(&'*') {
            i += 1;
            let w = args.next()?;
            let w = i64::try_from(w).map_err(|_| type_error("* wants int"))?;
            if w < 0 {
                left = true;
            }
            width = (w.unsigned_abs() as usize).min(MAX_WIDTH);
        } else {
            while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                width = (width * 10 + d as usize).min(MAX_WIDTH);
                i += 1;
            }
        }
        let mut prec: Option<usize> = None;
        if chars.get(i) == Some(&'.') {
            i += 1;
            if chars.get(i) == Some(&'*') {
                i += 1;
                let p = i64::try_from(args.next()?).map_err(|_| type_error("* wants int"))?;
                prec = Some((p.max(0) as usize).min(MAX_WIDTH));
            } else {
                let mut p = 0usize;
                while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                    p = (p * 10 + d as usize).min(MAX_WIDTH);
                    i += 1;
                }
                prec = Some(p);
            }
        }
        while matches!(chars.get(i), Some('h' | 'l' | 'L')) {
            i += 1;
        }
        let Some(&conv) = chars.get(i) else {
            return Err(Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "ValueError: incomplete format",
            ));
        };
        i += 1;
        if conv == '%' {
            out.push('%');
            continue;
        }
        let v = match value.take() {
            Some(v) => v,
            None => args.next()?,
        };
        let body = match conv {
            's' | 'r' | 'a' => {
                let mut s = if conv == 's' {
                    pyrepr::to_str(&v)?
                } else {
                    let mut r = String::new();
                    pyrepr::push_repr(&mut r, &v, 0)?;
                    if conv == 'a' {
                        r = ascii_escape(&r);
                    }
                    r
                };
                if let Some(p) = prec {
                    if let Some((idx, _)) = s.char_indices().nth(p) {
                        s.truncate(idx);
                    }
                }
                s
            }
            'c' => {
                let s = match v.kind() {
                    ValueKind::String if v.as_str().is_some_and(|s| s.chars().count() == 1) => {
                        v.as_str().unwrap_or_default().to_string()
                    }
                    ValueKind::Number if v.is_integer() => {
                        let cp = i64::try_from(v.clone()).unwrap_or(-1);
                        u32::try_from(cp)
                            .ok()
                            .and_then(char::from_u32)
                            .map(String::from)
                            .ok_or_else(|| type_error("%c arg not in range(0x110000)"))?
                    }
                    _ => return Err(type_error("%c requires int or char")),
                };
                s
            }
            'd' | 'i' | 'u' | 'o' | 'x' | 'X' => {
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
                            py_type_name(&v)
                        )))
                    }
                };
                let mut digits = match conv {
                    'o' => format!("{:o}", n.unsigned_abs()),
                    'x' => format!("{:x}", n.unsigned_abs()),
                    'X' => format!("{:X}", n.unsigned_abs()),
                    _ => n.unsigned_abs().to_string(),
                };
                if let Some(p) = prec {
                    if digits.len() < p {
                        digits.insert_str(0, &"0".repeat(p - digits.len()));
                    }
                }
                let prefix = match (alt, conv) {
                    (true, 'o') => "0o",
                    (true, 'x') => "0x",
                    (true, 'X') => "0X",
                    _ => "",
                };
                let sign = sign_str(n < 0, plus, space);
                out.push_str(&pad_number(sign, prefix, &digits, width, left, zero));
                continue;
            }
            'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
                let f = match v.kind() {
                    ValueKind::Bool => v.is_true() as i64 as f64,
                    ValueKind::Number => f64::try_from(v.clone()).unwrap_or(f64::NAN),
                    _ => {
                        return Err(type_error(format!(
                            "must be real number, not {}",
                            py_type_name(&v)
                        )))
                    }
                };
                let digits = format_float(f.abs(), conv, prec.unwrap_or(6), alt);
                let sign = sign_str(f.is_sign_negative() && !f.is_nan(), plus, space);
                let zero = zero && f.is_finite();
                out.push_str(&pad_number(sign, "", &digits, width, left, zero));
                continue;
            }
            other => {
                return Err(Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("ValueError: unsupported format character '{other}'"),
                ))
            }
        };
        let len = body.chars().count();
        if width > len {
            let fill = " ".repeat(width - len);
            if left {
                out.push_str(&body);
                out.push_str(&fill);
            } else {
                out.push_str(&fill);
                out.push_str(&body);
            }
        } else {
            out.push_str(&body);
        }
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
