//! CPython 3.11's notion of whitespace, printability, character classes and
//! case mapping. Rust's `char` methods follow a newer Unicode version and a
//! different whitespace definition (no U+001C..U+001F), and they have no
//! titlecase, so every str method a template can reach goes through here.

use super::unicode_tables as t;

fn in_ranges(table: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

fn lookup(table: &'static [(u32, &'static str)], c: char) -> Option<&'static str> {
    let c = c as u32;
    table
        .binary_search_by_key(&c, |&(k, _)| k)
        .ok()
        .map(|i| table[i].1)
}

/// `str.isspace` for one character.
pub fn is_space(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, '\t'..='\r' | '\x1c'..=' ')
    } else {
        in_ranges(t::SPACE, c)
    }
}

pub fn is_printable(c: char) -> bool {
    if c.is_ascii() {
        (' '..='~').contains(&c)
    } else {
        !in_ranges(t::NON_PRINTABLE, c)
    }
}

pub fn is_alpha(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        in_ranges(t::ALPHA, c)
    }
}

pub fn is_decimal(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        in_ranges(t::DECIMAL, c)
    }
}

pub fn is_digit(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        in_ranges(t::DIGIT, c)
    }
}

pub fn is_numeric(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        in_ranges(t::NUMERIC, c)
    }
}

/// `str.isalnum` for one character (CPython: alpha, decimal, digit or numeric).
pub fn is_alnum(c: char) -> bool {
    is_alpha(c) || is_decimal(c) || is_digit(c) || is_numeric(c)
}

pub fn is_lower(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_lowercase()
    } else {
        in_ranges(t::LOWERCASE, c)
    }
}

pub fn is_upper(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_uppercase()
    } else {
        in_ranges(t::UPPERCASE, c)
    }
}

pub fn is_title(c: char) -> bool {
    !c.is_ascii() && in_ranges(t::TITLECASE, c)
}

pub fn is_cased(c: char) -> bool {
    is_lower(c) || is_upper(c) || is_title(c)
}

pub fn is_case_ignorable(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, '\'' | '.' | ':' | '^' | '`')
    } else {
        in_ranges(t::CASE_IGNORABLE, c)
    }
}

pub fn push_upper(out: &mut String, c: char) {
    if c.is_ascii() {
        out.push(c.to_ascii_uppercase());
    } else {
        match lookup(t::TO_UPPER, c) {
            Some(m) => out.push_str(m),
            None => out.push(c),
        }
    }
}

fn push_lower_simple(out: &mut String, c: char) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
    } else {
        match lookup(t::TO_LOWER, c) {
            Some(m) => out.push_str(m),
            None => out.push(c),
        }
    }
}

pub fn push_title(out: &mut String, c: char) {
    match lookup(t::TO_TITLE_IF_NOT_UPPER, c) {
        Some(m) => out.push_str(m),
        None => push_upper(out, c),
    }
}

fn push_fold(out: &mut String, c: char) {
    match lookup(t::TO_FOLD_IF_NOT_LOWER, c) {
        Some(m) => out.push_str(m),
        None => push_lower_simple(out, c),
    }
}

/// CPython's `lower_ucs4`: a capital sigma becomes final sigma depending on
/// the cased/case-ignorable characters around it in the whole string.
fn push_lower_at(out: &mut String, chars: &[char], i: usize) {
    let c = chars[i];
    if c != '\u{3a3}' {
        push_lower_simple(out, c);
        return;
    }
    let mut final_sigma = false;
    if let Some(&before) = chars[..i].iter().rev().find(|&&x| !is_case_ignorable(x)) {
        final_sigma = is_cased(before);
    }
    if final_sigma {
        final_sigma = match chars[i + 1..].iter().find(|&&x| !is_case_ignorable(x)) {
            None => true,
            Some(&after) => !is_cased(after),
        };
    }
    out.push(if final_sigma { '\u{3c2}' } else { '\u{3c3}' });
}

pub fn lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for i in 0..chars.len() {
        push_lower_at(&mut out, &chars, i);
    }
    out
}

pub fn upper(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_uppercase();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_upper(&mut out, c);
    }
    out
}

pub fn casefold(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_fold(&mut out, c);
    }
    out
}

/// `str.title`: a letter is titlecased when the previous character is not
/// cased, so `"they're"` becomes `"They'Re"`.
pub fn title(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut previous_is_cased = false;
    for (i, &c) in chars.iter().enumerate() {
        if previous_is_cased {
            push_lower_at(&mut out, &chars, i);
        } else {
            push_title(&mut out, c);
        }
        previous_is_cased = is_cased(c);
    }
    out
}

/// `str.capitalize` (3.8+): the first character titlecased, the rest lowercased.
pub fn capitalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for i in 0..chars.len() {
        if i == 0 {
            push_title(&mut out, chars[0]);
        } else {
            push_lower_at(&mut out, &chars, i);
        }
    }
    out
}

pub fn swapcase(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if is_upper(c) {
            push_lower_at(&mut out, &chars, i);
        } else if is_lower(c) {
            push_upper(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

pub fn str_islower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if is_upper(c) || is_title(c) {
            return false;
        }
        if !cased && is_lower(c) {
            cased = true;
        }
    }
    cased
}

pub fn str_isupper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if is_lower(c) || is_title(c) {
            return false;
        }
        if !cased && is_upper(c) {
            cased = true;
        }
    }
    cased
}

pub fn str_istitle(s: &str) -> bool {
    let mut cased = false;
    let mut previous_is_cased = false;
    for c in s.chars() {
        if is_upper(c) || is_title(c) {
            if previous_is_cased {
                return false;
            }
            previous_is_cased = true;
            cased = true;
        } else if is_lower(c) {
            if !previous_is_cased {
                return false;
            }
            previous_is_cased = true;
            cased = true;
        } else {
            previous_is_cased = false;
        }
    }
    cased
}

/// Python's `str.strip()` without arguments: [`crate::count::py::strip`],
/// whose whitespace is [`is_space`]'s (`strip_is_str_isspace` pins that).
pub fn strip(s: &str) -> &str {
    crate::count::py::strip(s)
}

pub fn lstrip(s: &str) -> &str {
    s.trim_start_matches(is_space)
}

pub fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

/// `str.splitlines` line boundaries.
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\x0b'
            | '\x0c'
            | '\x1c'
            | '\x1d'
            | '\x1e'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// `str.splitlines(keepends)`.
pub fn splitlines(s: &str, keepends: bool) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut iter = s.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        if is_line_break(c) {
            let mut end = i + c.len_utf8();
            if c == '\r' {
                if let Some(&(_, '\n')) = iter.peek() {
                    iter.next();
                    end += 1;
                }
            }
            out.push(if keepends {
                &s[start..end]
            } else {
                &s[start..i]
            });
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    /// `py::strip`'s whitespace (Rust's `White_Space` plus U+001C..U+001F)
    /// is `str.isspace` on every code point, so `strip` may use it.
    #[test]
    fn strip_is_str_isspace() {
        for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
            let py_rs = c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
            assert_eq!(super::is_space(c), py_rs, "U+{:04X}", u32::from(c));
            let s = c.to_string();
            assert_eq!(super::strip(&s).is_empty(), py_rs, "U+{:04X}", u32::from(c));
        }
    }
}
