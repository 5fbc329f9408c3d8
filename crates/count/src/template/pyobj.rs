//! Lists and dicts that come from the request. They behave as minijinja's
//! own sequences and maps, but print as Python does wherever minijinja
//! formats them itself — `~` concatenation and the items of template-built
//! containers — rather than with Rust's float and escape rules. An attacker
//! controls this data, so a shorter rendering here would be an undercount.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use minijinja::value::{Enumerator, Object, ObjectExt, ObjectRepr};
use minijinja::Value;

use super::pyrepr;

pub struct PyList(pub Vec<Value>);

pub struct PyDict(pub IndexMap<Value, Value>);

fn render_repr(v: Value, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut s = String::new();
    pyrepr::push_repr(&mut s, &v, 0).map_err(|_| fmt::Error)?;
    f.write_str(&s)
}

impl fmt::Debug for PyList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyList(len={})", self.0.len())
    }
}

impl fmt::Debug for PyDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyDict(len={})", self.0.len())
    }
}

impl Object for PyList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key.as_usize()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        render_repr(Value::from_dyn_object(self.clone()), f)
    }
}

impl Object for PyDict {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0.get(key).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_rev_key_value_enumerator(|this| {
            Box::new(this.0.iter().map(|(k, v)| (k.clone(), v.clone())))
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        render_repr(Value::from_dyn_object(self.clone()), f)
    }
}
