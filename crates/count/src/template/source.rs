//! Template source normalisation, so that minijinja parses what Jinja2 parses:
//!
//! * CRLF and lone CR become LF (Jinja2's lexer does this first);
//! * transformers' `{% generation %}`/`{% endgeneration %}` become
//!   `{% if true %}`/`{% endif %}`, keeping `-`/`+` whitespace markers;
//! * string literals with backslashes are re-written with the value Python
//!   gives them (`literal.encode("ascii", "backslashreplace").decode("unicode-escape")`):
//!   minijinja lacks `\U`, `\a`, `\v`, line continuations and octal above
//!   `\377`, and turns `\/` into `/`.
//!
//! With `chains`, `+` chains in expressions also become one call
//! (`chains::rewrite_tag`): not for Jinja2's sake, but so that a long
//! message is not copied once per `+` (issue 31).

use super::{chains, TemplateError};

pub fn normalize(source: &str, chains: bool) -> Result<String, TemplateError> {
    let s = source.replace("\r\n", "\n").replace('\r', "\n");
    rewrite(&s, chains)
}

fn rewrite(s: &str, chains: bool) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let Some(rel) = s[i..].find('{') else {
            out.push_str(&s[i..]);
            break;
        };
        let at = i + rel;
        out.push_str(&s[i..at]);
        let rest = &s[at..];
        if rest.starts_with("{#") {
            let end = rest.find("#}").map_or(s.len(), |j| at + j + 2);
            out.push_str(&s[at..end]);
            i = end;
        } else if rest.starts_with("{{") {
            i = copy_expression_tag(s, at, "}}", chains, &mut out)?;
        } else if rest.starts_with("{%") {
            if let Some(end) = raw_block_end(s, at) {
                out.push_str(&s[at..end]);
                i = end;
            } else if let Some((len, replacement)) = generation_tag(rest) {
                out.push_str(&replacement);
                i = at + len;
            } else {
                i = copy_expression_tag(s, at, "%}", chains, &mut out)?;
            }
        } else {
            out.push('{');
            i = at + 1;
        }
    }
    Ok(out)
}

/// [`copy_tag`], then (with `chains`) the tag's `+` chains rewritten.
fn copy_expression_tag(
    s: &str,
    start: usize,
    end: &str,
    chains: bool,
    out: &mut String,
) -> Result<usize, TemplateError> {
    let from = out.len();
    let (next, closed) = copy_tag(s, start, 2, end, out)?;
    if chains && closed {
        if let Some(tag) = chains::rewrite_tag(&out[from..], end == "%}") {
            out.truncate(from);
            out.push_str(&tag);
        }
    }
    Ok(next)
}

/// Copies a `{{ … }}` or `{% … %}` tag, rewriting its string literals; the
/// end delimiter only counts outside brackets, as in Jinja2's lexer.
/// Returns where the tag ends and whether its end delimiter was found.
fn copy_tag(
    s: &str,
    start: usize,
    open_len: usize,
    end: &str,
    out: &mut String,
) -> Result<(usize, bool), TemplateError> {
    let b = s.as_bytes();
    out.push_str(&s[start..start + open_len]);
    let mut i = start + open_len;
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                let mut j = i + 1;
                let mut has_escape = false;
                while j < b.len() && b[j] != q {
                    if b[j] == b'\\' {
                        has_escape = true;
                        j += 1;
                    }
                    j += 1;
                }
                if j >= b.len() {
                    // unterminated: leave it to the parser to report
                    out.push_str(&s[i..]);
                    return Ok((s.len(), false));
                }
                if has_escape {
                    let value = python_unescape(&s[i + 1..j])?;
                    out.push('"');
                    for c in value.chars() {
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                } else {
                    out.push_str(&s[i..=j]);
                }
                i = j + 1;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                out.push(b[i] as char);
                i += 1;
            }
            b')' | b']' | b'}' if depth > 0 => {
                depth -= 1;
                out.push(b[i] as char);
                i += 1;
            }
            _ if depth == 0 && s[i..].starts_with(end) => {
                out.push_str(end);
                return Ok((i + end.len(), true));
            }
            _ => {
                let ch_len = s[i..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&s[i..i + ch_len]);
                i += ch_len;
            }
        }
    }
    Ok((i, false))
}

/// Parses `{%[-+]? name [-+]?%}` with only whitespace around the name;
/// returns the tag's length, the markers and the name.
fn simple_tag(tag: &str) -> Option<(usize, &str, &str, &str)> {
    let b = tag.as_bytes();
    if !tag.starts_with("{%") {
        return None;
    }
    let mut i = 2;
    let open = match b.get(i) {
        Some(b'-' | b'+') => {
            i += 1;
            &tag[2..3]
        }
        _ => "",
    };
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    let name_start = i;
    while b
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    {
        i += 1;
    }
    let name = &tag[name_start..i];
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    let close = match b.get(i) {
        Some(b'-' | b'+') => {
            i += 1;
            &tag[i - 1..i]
        }
        _ => "",
    };
    if tag[i..].starts_with("%}") && !name.is_empty() {
        Some((i + 2, open, name, close))
    } else {
        None
    }
}

fn generation_tag(tag: &str) -> Option<(usize, String)> {
    let (len, open, name, close) = simple_tag(tag)?;
    let body = match name {
        "generation" => "if true",
        "endgeneration" => "endif",
        _ => return None,
    };
    Some((len, format!("{{%{open} {body} {close}%}}")))
}

/// If a `{% raw %}` block starts at `at`, the index just past its `{% endraw %}`.
fn raw_block_end(s: &str, at: usize) -> Option<usize> {
    let (len, _, name, _) = simple_tag(&s[at..])?;
    if name != "raw" {
        return None;
    }
    let mut i = at + len;
    while let Some(rel) = s[i..].find("{%") {
        let pos = i + rel;
        if let Some((l, _, "endraw", _)) = simple_tag(&s[pos..]) {
            return Some(pos + l);
        }
        i = pos + 2;
    }
    Some(s.len())
}

fn syntax_error(msg: &str) -> TemplateError {
    TemplateError(format!(
        "chat template does not compile: syntax error: {msg}"
    ))
}

/// Python's `unicode-escape` decoding of a literal's body, after non-ASCII
/// characters were turned into backslash escapes.
fn python_unescape(body: &str) -> Result<String, TemplateError> {
    let mut ascii = String::with_capacity(body.len());
    for c in body.chars() {
        let cp = c as u32;
        if c.is_ascii() {
            ascii.push(c);
        } else if cp <= 0xff {
            ascii.push_str(&format!("\\x{cp:02x}"));
        } else if cp <= 0xffff {
            ascii.push_str(&format!("\\u{cp:04x}"));
        } else {
            ascii.push_str(&format!("\\U{cp:08x}"));
        }
    }
    let b = ascii.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    let hex = |digits: &[u8]| -> Option<u32> {
        let s = std::str::from_utf8(digits).ok()?;
        if s.bytes().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(s, 16).ok()
        } else {
            None
        }
    };
    let push_cp = |out: &mut String, cp: u32| -> Result<(), TemplateError> {
        match char::from_u32(cp) {
            Some(c) => {
                out.push(c);
                Ok(())
            }
            // Python keeps lone surrogates in the string; any prompt that
            // printed one would fail to encode, so the template is refused.
            None => Err(syntax_error("surrogate escape in a string literal")),
        }
    };
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i] as char);
            i += 1;
            continue;
        }
        let Some(&e) = b.get(i + 1) else {
            return Err(syntax_error("\\ at end of string"));
        };
        i += 2;
        match e {
            b'\n' => {}
            b'\\' => out.push('\\'),
            b'\'' => out.push('\''),
            b'"' => out.push('"'),
            b'a' => out.push('\x07'),
            b'b' => out.push('\x08'),
            b'f' => out.push('\x0c'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'v' => out.push('\x0b'),
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 && b.get(i).is_some_and(|c| (b'0'..=b'7').contains(c)) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                push_cp(&mut out, v)?;
            }
            b'x' | b'u' | b'U' => {
                let n = match e {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let digits = b
                    .get(i..i + n)
                    .and_then(hex)
                    .ok_or_else(|| syntax_error("truncated escape in a string literal"))?;
                i += n;
                if digits > 0x10ffff {
                    return Err(syntax_error("illegal Unicode character"));
                }
                push_cp(&mut out, digits)?;
            }
            b'N' => return Err(syntax_error("\\N{…} escapes are not supported")),
            other => {
                out.push('\\');
                out.push(other as char);
            }
        }
    }
    Ok(out)
}
