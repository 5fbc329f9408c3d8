//! Python-style argument binding for the filters, tests and methods defined
//! here: positional arguments first, then keywords, each bound to one slot.

use minijinja::value::Kwargs;
use minijinja::{Error, ErrorKind, Value};

/// Splits a call's values into positional arguments and the trailing keywords.
pub fn split_args(mut values: Vec<Value>) -> Result<(Vec<Value>, Option<Kwargs>), Error> {
    let kwargs = match values.last() {
        Some(last) if last.is_kwargs() => {
            let last = values.pop().unwrap_or_default();
            Some(Kwargs::try_from(last)?)
        }
        _ => None,
    };
    Ok((values, kwargs))
}

/// Binds keyword arguments to Python-style parameter slots.
pub fn take_kwargs(
    kwargs: &Kwargs,
    names: &[&str],
    slots: &mut [Option<Value>],
    func: &str,
) -> Result<(), Error> {
    for key in kwargs.args() {
        let Some(idx) = names.iter().position(|n| *n == key) else {
            return Err(type_error(format!(
                "{func}() got an unexpected keyword argument '{key}'"
            )));
        };
        if slots[idx].is_some() {
            return Err(type_error(format!(
                "{func}() got multiple values for argument '{key}'"
            )));
        }
        slots[idx] = Some(kwargs.peek::<Value>(key)?);
    }
    Ok(())
}

pub fn type_error(msg: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("TypeError: {}", msg.into()),
    )
}

pub fn value_error(msg: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("ValueError: {}", msg.into()),
    )
}

/// Binds `values` (positional, then keywords) to `names`; the first
/// `required` names must be given.
pub fn bind(
    func: &str,
    values: &[Value],
    names: &[&str],
    required: usize,
) -> Result<Vec<Option<Value>>, Error> {
    let (pos, kwargs) = split_args(values.to_vec())?;
    if pos.len() > names.len() {
        return Err(type_error(format!(
            "{func}() takes at most {} arguments ({} given)",
            names.len(),
            pos.len()
        )));
    }
    let mut slots: Vec<Option<Value>> = vec![None; names.len()];
    for (i, v) in pos.into_iter().enumerate() {
        slots[i] = Some(v);
    }
    if let Some(kwargs) = kwargs {
        take_kwargs(&kwargs, names, &mut slots, func)?;
    }
    for (i, slot) in slots.iter().enumerate().take(required) {
        if slot.is_none() {
            return Err(type_error(format!(
                "{func}() missing required argument '{}' (pos {})",
                names[i],
                i + 1
            )));
        }
    }
    Ok(slots)
}

/// Binds positional-only arguments, as CPython's str and list methods take them.
pub fn positional<'a>(
    func: &str,
    values: &'a [Value],
    min: usize,
    max: usize,
) -> Result<&'a [Value], Error> {
    if values.iter().any(Value::is_kwargs) {
        return Err(type_error(format!("{func}() takes no keyword arguments")));
    }
    if values.len() < min || values.len() > max {
        return Err(type_error(format!(
            "{func}() takes {} arguments ({} given)",
            if min == max {
                format!("exactly {min}")
            } else {
                format!("from {min} to {max}")
            },
            values.len()
        )));
    }
    Ok(values)
}

pub fn str_arg<'a>(func: &str, v: &'a Value) -> Result<&'a str, Error> {
    v.as_str().ok_or_else(|| {
        type_error(format!(
            "{func}() argument must be str, not {}",
            super::pyrepr::py_type_name(v)
        ))
    })
}

/// An integer argument (bool counts, as in Python).
pub fn int_arg(func: &str, v: &Value) -> Result<i64, Error> {
    if v.kind() == minijinja::value::ValueKind::Bool {
        return Ok(v.is_true() as i64);
    }
    if v.is_integer() {
        return i64::try_from(v.clone()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("OverflowError: {func}() argument is too large"),
            )
        });
    }
    Err(type_error(format!(
        "'{}' object cannot be interpreted as an integer",
        super::pyrepr::py_type_name(v)
    )))
}

/// An optional integer where `None` means "absent" (slice bounds).
pub fn opt_int_arg(func: &str, v: Option<&Value>) -> Result<Option<i64>, Error> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => int_arg(func, v).map(Some),
    }
}
