//! transformers' `tojson` filter:
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
//! minijinja's built-in filter escapes `<>&'` for HTML, prints floats and
//! separators differently, and rejects `ensure_ascii`, so tool-calling prompts
//! would differ on every request.

use std::cmp::Ordering;
use std::fmt::Write as _;

use minijinja::value::{Rest, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind, Value};

use super::args::{split_args, take_kwargs, type_error};
use super::pyrepr::{self, py_type_name, DictView, MAX_DEPTH};
use super::pysort;

/// More indentation than this per level is not something a chat template
/// asks for; refusing it keeps a hostile template from allocating gigabytes.
const MAX_INDENT: usize = 4096;

struct Options {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The filter as registered: `x|tojson(ensure_ascii, indent, separators, sort_keys)`.
pub fn tojson_filter(args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let (pos, kwargs) = split_args(args.into_values())?;
    const NAMES: [&str; 5] = ["obj", "ensure_ascii", "indent", "separators", "sort_keys"];
    if pos.len() > NAMES.len() {
        return Err(type_error(format!(
            "tojson() takes from 1 to 5 positional arguments but {} were given",
            pos.len()
        )));
    }
    let mut slots: [Option<Value>; 5] = Default::default();
    for (i, v) in pos.into_iter().enumerate() {
        slots[i] = Some(v);
    }
    if let Some(kwargs) = kwargs {
        take_kwargs(&kwargs, &NAMES, &mut slots, "tojson")?;
    }
    let [obj, ensure_ascii, indent, separators, sort_keys] = slots;
    let obj =
        obj.ok_or_else(|| type_error("tojson() missing 1 required positional argument: 'x'"))?;
    let opts = Options::new(ensure_ascii, indent, separators, sort_keys)?;
    let mut out = String::new();
    encode(&mut out, &obj, &opts, 0, 0)?;
    Ok(Value::from(out))
}

impl Options {
    fn new(
        ensure_ascii: Option<Value>,
        indent: Option<Value>,
        separators: Option<Value>,
        sort_keys: Option<Value>,
    ) -> Result<Self, Error> {
        let ensure_ascii = ensure_ascii.is_some_and(|v| v.is_true());
        let sort_keys = sort_keys.is_some_and(|v| v.is_true());
        let indent = match indent {
            None => None,
            Some(v) if v.is_none() => None,
            Some(v) => Some(match v.kind() {
                ValueKind::String => v.as_str().unwrap_or_default().to_string(),
                ValueKind::Bool => if v.is_true() { " " } else { "" }.to_string(),
                ValueKind::Number if v.is_integer() => {
                    let n = i64::try_from(v.clone()).unwrap_or(i64::MAX);
                    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
                    if n > MAX_INDENT {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "tojson indent is too large",
                        ));
                    }
                    " ".repeat(n)
                }
                _ => {
                    return Err(type_error(format!(
                        "can't multiply sequence by non-int of type '{}'",
                        py_type_name(&v)
                    )))
                }
            }),
        };
        let (item_sep, key_sep) = match separators {
            Some(v) if !v.is_none() => {
                let parts: Vec<Value> = match v.kind() {
                    ValueKind::String => v
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .map(Value::from)
                        .collect(),
                    ValueKind::Seq | ValueKind::Iterable => v.try_iter()?.collect(),
                    _ => {
                        return Err(type_error(format!(
                            "cannot unpack non-iterable {} object",
                            py_type_name(&v)
                        )))
                    }
                };
                if parts.len() != 2 {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("ValueError: expected 2 separators, got {}", parts.len()),
                    ));
                }
                let as_sep = |p: &Value| -> Result<String, Error> {
                    p.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| type_error("separators must be str"))
                };
                (as_sep(&parts[0])?, as_sep(&parts[1])?)
            }
            _ if indent.is_some() => (",".to_string(), ": ".to_string()),
            _ => (", ".to_string(), ": ".to_string()),
        };
        Ok(Options {
            ensure_ascii,
            indent,
            item_sep,
            key_sep,
            sort_keys,
        })
    }
}

/// `float.__repr__` as the json module writes it (`NaN`, `Infinity`).
fn push_json_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f < 0.0 { "-Infinity" } else { "Infinity" });
    } else {
        pyrepr::push_float_repr(out, f);
    }
}

pub use crate::py::push_json_str;

fn not_serializable(v: &Value) -> Error {
    type_error(format!(
        "Object of type {} is not JSON serializable",
        py_type_name(v)
    ))
}

fn newline_indent(out: &mut String, indent: &str, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str(indent);
    }
}

/// The string a dict key becomes, as `json.dumps` converts it.
fn key_string(k: &Value) -> Result<String, Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        ValueKind::Number if k.is_integer() => Ok(k.to_string()),
        ValueKind::Number => {
            let mut s = String::new();
            push_json_float(&mut s, f64::try_from(k.clone()).unwrap_or(f64::NAN));
            Ok(s)
        }
        _ => Err(type_error(format!(
            "keys must be str, int, float, bool or None, not {}",
            py_type_name(k)
        ))),
    }
}

/// Python's `<` between two dict keys, for `sort_keys`.
fn py_key_cmp(a: &Value, b: &Value) -> Result<Ordering, Error> {
    let num = |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool);
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        return Ok(x.cmp(y));
    }
    if num(a) && num(b) {
        return Ok(a.partial_cmp(b).unwrap_or(Ordering::Equal));
    }
    Err(type_error(format!(
        "'<' not supported between instances of '{}' and '{}'",
        py_type_name(b),
        py_type_name(a)
    )))
}

fn encode(
    out: &mut String,
    v: &Value,
    opts: &Options,
    level: usize,
    depth: usize,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(pyrepr::recursion_error());
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                let _ = write!(out, "{v}");
            } else {
                push_json_float(out, f64::try_from(v.clone()).unwrap_or(f64::NAN));
            }
        }
        ValueKind::String => push_json_str(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            if v.downcast_object_ref::<DictView>().is_some() {
                return Err(not_serializable(v));
            }
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            if let Some(ind) = &opts.indent {
                newline_indent(out, ind, level + 1);
            }
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                    if let Some(ind) = &opts.indent {
                        newline_indent(out, ind, level + 1);
                    }
                }
                encode(out, item, opts, level + 1, depth + 1)?;
            }
            if let Some(ind) = &opts.indent {
                newline_indent(out, ind, level);
            }
            out.push(']');
        }
        ValueKind::Map if pyrepr::is_namespace(v) => return Err(not_serializable(v)),
        ValueKind::Map => {
            let mut pairs: Vec<(Value, Value)> = v
                .as_object()
                .and_then(|o| o.try_iter_pairs())
                .map(|it| it.collect())
                .unwrap_or_default();
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                pysort::try_sort(&mut pairs, &mut |a, b| py_key_cmp(&a.0, &b.0))?;
            }
            out.push('{');
            if let Some(ind) = &opts.indent {
                newline_indent(out, ind, level + 1);
            }
            for (i, (k, val)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                    if let Some(ind) = &opts.indent {
                        newline_indent(out, ind, level + 1);
                    }
                }
                push_json_str(out, &key_string(k)?, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                encode(out, val, opts, level + 1, depth + 1)?;
            }
            if let Some(ind) = &opts.indent {
                newline_indent(out, ind, level);
            }
            out.push('}');
        }
        _ => return Err(not_serializable(v)),
    }
    Ok(())
}
