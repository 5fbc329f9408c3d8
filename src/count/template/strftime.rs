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

/// A width beyond this is not a date format; glibc would pad to it, but
/// refusing keeps a hostile template from allocating without bound.
const MAX_WIDTH: usize = 4096;

pub fn strftime(fmt: &str, dt: &NaiveDateTime) -> String {
    glibc_strftime(&python_pass(fmt, dt), dt)
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

enum Piece {
    /// A number with its default field width; `space` pads with spaces by default.
    Num {
        value: i64,
        digits: usize,
        space: bool,
    },
    Str(String),
}

fn iso_year_week(dt: &NaiveDateTime) -> (i32, u32) {
    let w = dt.date().iso_week();
    (w.year(), w.week())
}

fn conversion(c: char, dt: &NaiveDateTime) -> Option<Piece> {
    let wday = dt.weekday().num_days_from_sunday() as usize;
    let yday = dt.ordinal0() as i64;
    let hour12 = match dt.hour() % 12 {
        0 => 12,
        h => h,
    } as i64;
    let num = |value: i64, digits: usize| Piece::Num {
        value,
        digits,
        space: false,
    };
    let spaced = |value: i64, digits: usize| Piece::Num {
        value,
        digits,
        space: true,
    };
    let sub = |f: &str| Piece::Str(glibc_strftime(f, dt));
    Some(match c {
        'a' => Piece::Str(DAYS[wday][..3].to_string()),
        'A' => Piece::Str(DAYS[wday].to_string()),
        'b' | 'h' => Piece::Str(MONTHS[dt.month0() as usize][..3].to_string()),
        'B' => Piece::Str(MONTHS[dt.month0() as usize].to_string()),
        'c' => sub("%a %b %e %H:%M:%S %Y"),
        'C' => num(dt.year().div_euclid(100) as i64, 2),
        'd' => num(dt.day() as i64, 2),
        'D' | 'x' => sub("%m/%d/%y"),
        'e' => spaced(dt.day() as i64, 2),
        'F' => sub("%Y-%m-%d"),
        'g' => num(iso_year_week(dt).0.rem_euclid(100) as i64, 2),
        'G' => num(iso_year_week(dt).0 as i64, 1),
        'H' => num(dt.hour() as i64, 2),
        'I' => num(hour12, 2),
        'j' => num(yday + 1, 3),
        'k' => spaced(dt.hour() as i64, 2),
        'l' => spaced(hour12, 2),
        'm' => num(dt.month() as i64, 2),
        'M' => num(dt.minute() as i64, 2),
        'n' => Piece::Str("\n".to_string()),
        'p' => Piece::Str(if dt.hour() < 12 { "AM" } else { "PM" }.to_string()),
        'P' => Piece::Str(if dt.hour() < 12 { "am" } else { "pm" }.to_string()),
        'r' => sub("%I:%M:%S %p"),
        'R' => sub("%H:%M"),
        // mktime in the local zone; the guard assumes the server runs in UTC.
        's' => num(dt.and_utc().timestamp(), 1),
        'S' => num(dt.second() as i64, 2),
        't' => Piece::Str("\t".to_string()),
        'T' | 'X' => sub("%H:%M:%S"),
        'u' => num(dt.weekday().number_from_monday() as i64, 1),
        'U' => num((yday + 7 - wday as i64) / 7, 2),
        'V' => num(iso_year_week(dt).1 as i64, 2),
        'w' => num(wday as i64, 1),
        'W' => num((yday + 7 - ((wday as i64 + 6) % 7)) / 7, 2),
        'y' => num(dt.year().rem_euclid(100) as i64, 2),
        'Y' => num(dt.year() as i64, 1),
        // tm_gmtoff is 0 and tm_zone unset in the struct Python builds
        'z' => num(0, 4).with_sign(),
        'Z' => Piece::Str(String::new()),
        '%' => Piece::Str("%".to_string()),
        _ => return None,
    })
}

impl Piece {
    fn with_sign(self) -> Piece {
        match self {
            Piece::Num { value, .. } => Piece::Str(format!("+{value:04}")),
            other => other,
        }
    }
}

fn glibc_strftime(fmt: &str, dt: &NaiveDateTime) -> String {
    let mut out = String::with_capacity(fmt.len() + 16);
    let bytes: Vec<(usize, char)> = fmt.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() {
        let (start, c) = bytes[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut pad: Option<char> = None;
        let mut upcase = false;
        let mut swapcase = false;
        while let Some(&(_, f)) = bytes.get(i) {
            match f {
                '_' | '-' | '0' => pad = Some(f),
                '^' => upcase = true,
                '#' => swapcase = true,
                _ => break,
            }
            i += 1;
        }
        let mut width: Option<usize> = None;
        while let Some(&(_, d)) = bytes.get(i) {
            let Some(dv) = d.to_digit(10) else { break };
            width = Some(
                width
                    .unwrap_or(0)
                    .saturating_mul(10)
                    .saturating_add(dv as usize)
                    .min(MAX_WIDTH),
            );
            i += 1;
        }
        if let Some(&(_, 'E' | 'O')) = bytes.get(i) {
            i += 1;
        }
        let Some(&(conv_at, conv)) = bytes.get(i) else {
            // a trailing incomplete directive is copied as is
            out.push_str(&fmt[start..]);
            break;
        };
        i += 1;
        // glibc copies an unknown directive through, padded like a string
        let piece = conversion(conv, dt)
            .unwrap_or_else(|| Piece::Str(fmt[start..conv_at + conv.len_utf8()].to_string()));
        let text = match piece {
            Piece::Num {
                value,
                digits,
                space,
            } => {
                let body = value.unsigned_abs().to_string();
                let neg = if value < 0 { "-" } else { "" };
                let padc = match pad {
                    Some('-') => None,
                    Some('_') => Some(' '),
                    Some('0') => Some('0'),
                    _ if space => Some(' '),
                    _ => Some('0'),
                };
                let w = width.unwrap_or(digits);
                let len = body.len() + neg.len();
                match padc {
                    Some(p) if w > len => {
                        let fill: String = std::iter::repeat_n(p, w - len).collect();
                        if p == '0' {
                            format!("{neg}{fill}{body}")
                        } else {
                            format!("{fill}{neg}{body}")
                        }
                    }
                    _ => format!("{neg}{body}"),
                }
            }
            Piece::Str(s) => {
                let mut s = if upcase {
                    s.to_uppercase()
                } else if swapcase {
                    match conv {
                        'p' | 'Z' => s.to_lowercase(),
                        _ => s.to_uppercase(),
                    }
                } else {
                    s
                };
                let len = s.chars().count();
                if let (Some(w), false) = (width, pad == Some('-')) {
                    if w > len {
                        let p = if pad == Some('0') { '0' } else { ' ' };
                        let fill: String = std::iter::repeat_n(p, w - len).collect();
                        s.insert_str(0, &fill);
                    }
                }
                s
            }
        };
        out.push_str(&text);
    }
    out
}
