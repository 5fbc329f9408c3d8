//! Python's `str()` and `repr()` of template values, which is what Jinja2
//! prints for `{{ x }}`, `x|string` and `x|join`.

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Tuple, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use crate::py;

/// Python raises RecursionError at about this depth (its recursion limit of
/// 1000 minus the frames rendering takes), long before Rust would overflow
/// its stack on a self-nesting value a template built in a loop.
pub const MAX_DEPTH: usize = 980;

/// Python's type name of a template value, for error messages.
pub fn py_type_name(v: &Value) -> &'static str {
    match v.kind() {
        ValueKind::Undefined => "Undefined",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Bytes => "bytes",
        ValueKind::Seq if v.is_tuple() => "tuple",
        ValueKind::Seq => "list",
        ValueKind::Map if is_namespace(v) => "Namespace",
        ValueKind::Map => "dict",
        ValueKind::Iterable => match v.downcast_object_ref::<DictView>() {
            Some(view) => view.type_name(),
            None => "generator",
        },
        _ => "object",
    }
}

pub fn recursion_error() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        "maximum recursion depth exceeded while getting the repr of an object",
    )
}

pub use py::push_float_repr;

/// `repr(str)`: `py::push_str_repr` as CPython 3.11 prints it, as every
/// str method of the renderer follows CPython 3.11 (`count::unicode`).
pub fn push_str_repr(out: &mut String, s: &str) {
    // Py311 mode refuses nothing.
    let _ = py::push_str_repr(out, s, py::Repr::Py311);
}

fn number_f64(v: &Value) -> Option<f64> {
    f64::try_from(v.clone()).ok()
}

/// minijinja's `namespace()` object is a map to the engine but not to
/// Python (not a Mapping, not iterable, not JSON serializable). Its type is
/// private, so it is recognised by the start of its `Debug` output.
pub fn is_namespace(v: &Value) -> bool {
    struct Prefix {
        buf: [u8; 10],
        len: usize,
    }
    impl std::fmt::Write for Prefix {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            for &b in s.as_bytes() {
                if self.len == self.buf.len() {
                    return Err(std::fmt::Error);
                }
                self.buf[self.len] = b;
                self.len += 1;
            }
            Ok(())
        }
    }
    if v.kind() != ValueKind::Map {
        return false;
    }
    let Some(obj) = v.as_object() else {
        return false;
    };
    let mut p = Prefix {
        buf: [0; 10],
        len: 0,
    };
    let _ = write!(p, "{obj:?}");
    &p.buf[..p.len] == b"Namespace "
}

/// Appends Python's `str(v)`.
pub fn push_str(out: &mut String, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::String => {
            out.push_str(v.as_str().unwrap_or_default());
            Ok(())
        }
        ValueKind::Undefined => Ok(()),
        _ => push_repr(out, v, 0),
    }
}

pub fn to_str(v: &Value) -> Result<String, Error> {
    if let Some(s) = v.as_str() {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    push_str(&mut out, v)?;
    Ok(out)
}

/// Appends Python's `repr(v)`.
pub fn push_repr(out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(recursion_error());
    }
    match v.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => {
            if v.is_integer() {
                let _ = write!(out, "{v}");
            } else {
                push_float_repr(out, number_f64(v).unwrap_or(f64::NAN));
            }
        }
        ValueKind::String => push_str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let tuple = v.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let mut n = 0;
            for item in v.try_iter()? {
                if n > 0 {
                    out.push_str(", ");
                }
                push_repr(out, &item, depth + 1)?;
                n += 1;
            }
            if tuple && n == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        ValueKind::Map => {
            let ns = is_namespace(v);
            if ns {
                out.push_str("<Namespace ");
            }
            out.push('{');
            let pairs = v.as_object().and_then(|o| o.try_iter_pairs());
            for (n, (k, val)) in pairs.into_iter().flatten().enumerate() {
                if n > 0 {
                    out.push_str(", ");
                }
                push_repr(out, &k, depth + 1)?;
                out.push_str(": ");
                push_repr(out, &val, depth + 1)?;
            }
            out.push('}');
            if ns {
                out.push('>');
            }
        }
        ValueKind::Iterable => {
            if let Some(view) = v.downcast_object_ref::<DictView>() {
                view.push_repr(out, depth)?;
            } else {
                // Python would print a generator object here; the items of
                // a concatenation (`a + b`) are the common case and print as a list.
                out.push('[');
                for (n, item) in v.try_iter()?.enumerate() {
                    if n > 0 {
                        out.push_str(", ");
                    }
                    push_repr(out, &item, depth + 1)?;
                }
                out.push(']');
            }
        }
        ValueKind::Invalid => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "invalid value in template",
            ))
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    Keys,
    Values,
    Items,
}

/// `dict.keys()`, `dict.values()` and `dict.items()`: iterable, sized, not
/// subscriptable, printed as `dict_items([...])`, and not JSON serializable.
#[derive(Debug)]
pub struct DictView {
    pub kind: ViewKind,
    pub map: Value,
}

impl DictView {
    pub fn value(kind: ViewKind, map: Value) -> Value {
        Value::from_object(DictView { kind, map })
    }

    fn push_repr(&self, out: &mut String, depth: usize) -> Result<(), Error> {
        out.push_str(match self.kind {
            ViewKind::Keys => "dict_keys([",
            ViewKind::Values => "dict_values([",
            ViewKind::Items => "dict_items([",
        });
        for (n, item) in self.items().enumerate() {
            if n > 0 {
                out.push_str(", ");
            }
            push_repr(out, &item, depth + 1)?;
        }
        out.push_str("])");
        Ok(())
    }

    pub fn type_name(&self) -> &'static str {
        match self.kind {
            ViewKind::Keys => "dict_keys",
            ViewKind::Values => "dict_values",
            ViewKind::Items => "dict_items",
        }
    }

    fn items(&self) -> Box<dyn Iterator<Item = Value> + Send + Sync> {
        let Some(pairs) = self.map.as_object().and_then(|o| o.try_iter_pairs()) else {
            return Box::new(std::iter::empty());
        };
        match self.kind {
            ViewKind::Keys => Box::new(pairs.map(|(k, _)| k)),
            ViewKind::Values => Box::new(pairs.map(|(_, v)| v)),
            ViewKind::Items => Box::new(pairs.map(|(k, v)| Value::from(Tuple::from([k, v])))),
        }
    }
}

impl Object for DictView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Iter(self.items())
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        self.map.len()
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        self.push_repr(&mut s, 0).map_err(|_| std::fmt::Error)?;
        f.write_str(&s)
    }
}
