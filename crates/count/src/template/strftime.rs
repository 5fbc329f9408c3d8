//! `datetime.now().strftime(fmt)` as CPython 3.11 on glibc computes it for a
//! naive datetime in the C locale: Python substitutes `%f`, `%z` and `%Z`
//! itself, then glibc's strftime formats the rest, copying unknown
//! directives through. chrono's formatter panics on unknown specifiers, so
//! the directives are implemented here.

use chrono::{Datelike, NaiveDateTime, Timelike};

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub fn strftime(fmt: &str, dt: &NaiveDateTime) -> String {
    let fmt = python_pass(fmt, dt);
    // CPython's time.strftime retries with buffers of 1024, 2048, ... bytes
    // up to 256 * len(format) and returns "" when the result never fits;
    // that bound also caps what a huge field width can allocate here.
    let mut limit = 1024usize;
    while limit < 256 * fmt.len() {
        limit *= 2;
    }
    let out = glibc_strftime(&fmt, dt, limit);
    if out.len() >= limit {
        String::new()
    } else {
        out
    }
}

/// CPython's `wrap_strftime`: `%f`, `%z` and `%Z` are replaced before the C
/// library sees the format; every other `%x` pair is passed on untouched.
fn python_pass(fmt: &str, dt: &NaiveDateTime) -> String {
    let mut out = String::with_capacity(fmt.len());
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => out.push_str(&format!("{:06}", dt.and_utc().timestamp_subsec_micros())),
            Some('z') | Some('Z') => {}
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

struct Spec {
    /// `_`, `-` or `0`; `None` when no padding flag was given.
    pad: Option<char>,
    width: Option<usize>,
    upcase: bool,
    lowcase: bool,
}

impl Spec {
    /// glibc's `cpy`/`add`: case conversion (ASCII, as in the C locale),
    /// then left padding to the width with zeros for `0`, else spaces.
    fn cpy(&self, out: &mut String, text: &str) {
        let len = text.chars().count();
        if let Some(w) = self.width {
            if w > len {
                let fill = if self.pad == Some('0') { '0' } else { ' ' };
                out.extend(std::iter::repeat_n(fill, w - len));
            }
        }
        if self.lowcase {
            out.push_str(&text.to_ascii_lowercase());
        } else if self.upcase {
            out.push_str(&text.to_ascii_uppercase());
        } else {
            out.push_str(text);
        }
    }

    /// `DO_NUMBER` / `DO_NUMBER_SPACEPAD` and `do_number_sign_and_padding`.
    fn number(&mut self, out: &mut String, d: usize, value: i64, spacepad: bool) {
        if spacepad && self.pad != Some('0') && self.pad != Some('-') {
            self.pad = Some('_');
        }
        let digits = d.max(self.width.unwrap_or(0));
        let neg = value < 0;
        let body = value.unsigned_abs().to_string();
        let len = body.len() + usize::from(neg);
        if self.pad != Some('-') && digits > len {
            let padding = digits - len;
            if self.pad == Some('_') {
                out.extend(std::iter::repeat_n(' ', padding));
                self.width = self.width.map(|w| w.saturating_sub(padding));
            } else {
                if neg {
                    out.push('-');
                }
                out.extend(std::iter::repeat_n('0', padding));
                self.width = None;
                self.cpy(out, &body);
                return;
            }
        }
        let signed = if neg { format!("-{body}") } else { body };
        self.cpy(out, &signed);
    }
}

/// glibc's `__strftime_internal` in the C locale for a `struct tm` with
/// `tm_isdst = -1` and no zone, as CPython builds it for a naive datetime.
#[allow(
    clippy::too_many_lines,
    reason = "one arm per strftime conversion, in glibc's order: split, it could no longer be read against glibc"
)]
fn glibc_strftime(fmt: &str, dt: &NaiveDateTime, limit: usize) -> String {
    let chars: Vec<char> = fmt.chars().collect();
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        if out.len() >= limit {
            return out;
        }
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let start = i - 1;
        let mut spec = Spec {
            pad: None,
            width: None,
            upcase: false,
            lowcase: false,
        };
        let mut change_case = false;
        while let Some(&f) = chars.get(i) {
            match f {
                '_' | '-' | '0' => spec.pad = Some(f),
                '^' => spec.upcase = true,
                '#' => change_case = true,
                _ => break,
            }
            i += 1;
        }
        while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
            spec.width = Some(
                spec.width
                    .unwrap_or(0)
                    .saturating_mul(10)
                    .saturating_add(d as usize)
                    .min(limit),
            );
            i += 1;
        }
        let modifier = match chars.get(i) {
            Some(&m @ ('E' | 'O')) => {
                i += 1;
                Some(m)
            }
            _ => None,
        };
        let conv = chars.get(i).copied();
        let mut bad = false;
        let wday = dt.weekday().num_days_from_sunday() as i64;
        let yday = dt.ordinal0() as i64;
        let hour12 = match dt.hour() % 12 {
            0 => 12,
            h => h as i64,
        };
        let e_bad = modifier == Some('E');
        let any_bad = modifier.is_some();
        let subformat = |spec: &Spec, out: &mut String, sub: &str| {
            let text = glibc_strftime(sub, dt, limit);
            // the whole expansion is padded and upper-cased; `#` has no effect
            Spec {
                pad: spec.pad,
                width: spec.width,
                upcase: spec.upcase,
                lowcase: false,
            }
            .cpy(out, &text);
        };
        match conv {
            Some('%') => spec.cpy(&mut out, "%"),
            Some('a') if !any_bad => {
                spec.upcase |= change_case;
                spec.cpy(&mut out, &DAYS[wday as usize][..3]);
            }
            Some('A') if !any_bad => {
                spec.upcase |= change_case;
                spec.cpy(&mut out, DAYS[wday as usize]);
            }
            Some('b' | 'h') if !e_bad => {
                spec.upcase |= change_case;
                spec.cpy(&mut out, &MONTHS[dt.month0() as usize][..3]);
            }
            Some('B') if !e_bad => {
                spec.upcase |= change_case;
                spec.cpy(&mut out, MONTHS[dt.month0() as usize]);
            }
            Some('c') if modifier != Some('O') => {
                subformat(&spec, &mut out, "%a %b %e %H:%M:%S %Y")
            }
            Some('C') => spec.number(&mut out, 1, dt.year().div_euclid(100) as i64, false),
            Some('x') if modifier != Some('O') => subformat(&spec, &mut out, "%m/%d/%y"),
            Some('D') if !any_bad => subformat(&spec, &mut out, "%m/%d/%y"),
            Some('d') if !e_bad => spec.number(&mut out, 2, dt.day() as i64, false),
            Some('e') if !e_bad => spec.number(&mut out, 2, dt.day() as i64, true),
            Some('F') if !any_bad => subformat(&spec, &mut out, "%Y-%m-%d"),
            Some('H') if !e_bad => spec.number(&mut out, 2, dt.hour() as i64, false),
            Some('I') if !e_bad => spec.number(&mut out, 2, hour12, false),
            Some('k') if !e_bad => spec.number(&mut out, 2, dt.hour() as i64, true),
            Some('l') if !e_bad => spec.number(&mut out, 2, hour12, true),
            Some('j') if !e_bad => spec.number(&mut out, 3, yday + 1, false),
            Some('M') if !e_bad => spec.number(&mut out, 2, dt.minute() as i64, false),
            Some('m') if !e_bad => spec.number(&mut out, 2, dt.month() as i64, false),
            Some('n') => spec.cpy(&mut out, "\n"),
            Some('t') => spec.cpy(&mut out, "\t"),
            Some(p @ ('p' | 'P')) => {
                if p == 'P' || change_case {
                    spec.lowcase = true;
                    spec.upcase = false;
                }
                spec.cpy(&mut out, if dt.hour() < 12 { "AM" } else { "PM" });
            }
            Some('R') => subformat(&spec, &mut out, "%H:%M"),
            Some('r') => subformat(&spec, &mut out, "%I:%M:%S %p"),
            Some('S') if !e_bad => spec.number(&mut out, 2, dt.second() as i64, false),
            // mktime in the local zone; the guard assumes the server runs in UTC.
            Some('s') => spec.number(&mut out, 1, dt.and_utc().timestamp(), false),
            Some('X') if modifier != Some('O') => subformat(&spec, &mut out, "%H:%M:%S"),
            Some('T') => subformat(&spec, &mut out, "%H:%M:%S"),
            Some('u') => spec.number(&mut out, 1, (wday + 6) % 7 + 1, false),
            Some('U') if !e_bad => spec.number(&mut out, 2, (yday - wday + 7) / 7, false),
            Some('V') if !e_bad => {
                spec.number(&mut out, 2, dt.date().iso_week().week() as i64, false)
            }
            Some('g') if !e_bad => spec.number(
                &mut out,
                2,
                (dt.date().iso_week().year() as i64).rem_euclid(100),
                false,
            ),
            Some('G') if !e_bad => {
                spec.number(&mut out, 1, dt.date().iso_week().year() as i64, false)
            }
            Some('W') if !e_bad => {
                spec.number(&mut out, 2, (yday - (wday - 1 + 7) % 7 + 7) / 7, false)
            }
            Some('w') if !e_bad => spec.number(&mut out, 1, wday, false),
            Some('Y') if modifier != Some('O') => spec.number(&mut out, 1, dt.year() as i64, false),
            Some('y') => spec.number(&mut out, 2, (dt.year() as i64).rem_euclid(100), false),
            Some('Z') => {
                if change_case {
                    spec.lowcase = true;
                    spec.upcase = false;
                }
                spec.cpy(&mut out, "");
            }
            // tm_isdst < 0: glibc writes nothing, not even padding
            Some('z') => {}
            _ => bad = true,
        }
        if bad {
            // glibc copies the directive through (from '%' to the current
            // character, or to the end of the format), padded like text
            let end = match conv {
                Some(_) => i + 1,
                None => chars.len(),
            };
            let text: String = chars[start..end].iter().collect();
            spec.cpy(&mut out, &text);
            i = end;
        } else {
            i += 1;
        }
    }
    out
}
