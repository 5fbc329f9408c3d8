//! Python's `sorted()`: stable, with comparisons that can fail (`'<' not
//! supported between 'str' and 'int'`). Rust's slice sorts may panic on a
//! comparator that is not a total order, which a fallible or NaN-laden
//! comparison is not, so this is a plain merge sort that never panics.

use std::cmp::Ordering;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

use super::args::type_error;
use super::pyrepr::py_type_name;

pub fn try_sort<T: Clone>(
    v: &mut [T],
    cmp: &mut impl FnMut(&T, &T) -> Result<Ordering, Error>,
) -> Result<(), Error> {
    if v.len() < 2 {
        return Ok(());
    }
    let mid = v.len() / 2;
    try_sort(&mut v[..mid], cmp)?;
    try_sort(&mut v[mid..], cmp)?;
    let mut merged = Vec::with_capacity(v.len());
    let (mut i, mut j) = (0, mid);
    while i < mid && j < v.len() {
        // take from the right only when strictly smaller: stable
        if cmp(&v[j], &v[i])? == Ordering::Less {
            merged.push(v[j].clone());
            j += 1;
        } else {
            merged.push(v[i].clone());
            i += 1;
        }
    }
    merged.extend_from_slice(&v[i..mid]);
    merged.extend_from_slice(&v[j..]);
    v.clone_from_slice(&merged);
    Ok(())
}

/// Python's `a < b` reduced to an ordering, for sort keys: strings with
/// strings, numbers (and bools) with numbers, lists with lists and tuples
/// with tuples element-wise; anything else is a TypeError. Undefined values
/// raise as soon as they are compared with something unequal.
pub fn py_compare(a: &Value, b: &Value) -> Result<Ordering, Error> {
    let num = |v: &Value| matches!(v.kind(), ValueKind::Number | ValueKind::Bool);
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        return Ok(x.cmp(y));
    }
    if num(a) && num(b) {
        let int = |v: &Value| -> Option<i128> {
            if v.kind() == ValueKind::Bool {
                Some(v.is_true() as i128)
            } else if v.is_integer() {
                i128::try_from(v.clone()).ok()
            } else {
                None
            }
        };
        let float = |v: &Value| match int(v) {
            Some(i) => i as f64,
            None => f64::try_from(v.clone()).unwrap_or(f64::NAN),
        };
        if let (Some(x), Some(y)) = (int(a), int(b)) {
            return Ok(x.cmp(&y));
        }
        return Ok(float(a).partial_cmp(&float(b)).unwrap_or(Ordering::Equal));
    }
    if a.is_undefined() || b.is_undefined() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "an undefined value cannot be compared",
        ));
    }
    if a.kind() == ValueKind::Seq && b.kind() == ValueKind::Seq && a.is_tuple() == b.is_tuple() {
        let xs: Vec<Value> = a.try_iter()?.collect();
        let ys: Vec<Value> = b.try_iter()?.collect();
        return py_compare_lists(&xs, &ys);
    }
    Err(type_error(format!(
        "'<' not supported between instances of '{}' and '{}'",
        py_type_name(a),
        py_type_name(b)
    )))
}

/// List comparison: the first unequal pair decides, then the length.
pub fn py_compare_lists(xs: &[Value], ys: &[Value]) -> Result<Ordering, Error> {
    for (x, y) in xs.iter().zip(ys) {
        if x == y {
            continue;
        }
        return py_compare(x, y);
    }
    Ok(xs.len().cmp(&ys.len()))
}
