//! The effective `max_req_input_len` per model. Static today (from config);
//! held behind `ArcSwap` so discovered limits can replace it without a restart.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

#[derive(Debug, Default)]
pub struct Limits {
    by_model: ArcSwap<HashMap<String, usize>>,
}

impl Limits {
    pub fn new(initial: impl IntoIterator<Item = (String, usize)>) -> Self {
        Self {
            by_model: ArcSwap::from_pointee(initial.into_iter().collect()),
        }
    }

    /// `None` while no limit is known for the model: its requests are refused.
    pub fn get(&self, model: &str) -> Option<usize> {
        self.by_model.load().get(model).copied()
    }

    pub fn set(&self, model: &str, limit: usize) {
        let mut next = HashMap::clone(&self.by_model.load());
        next.insert(model.to_string(), limit);
        self.by_model.store(Arc::new(next));
    }

    pub fn snapshot(&self) -> Vec<(String, usize)> {
        let mut v: Vec<_> = self
            .by_model
            .load()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        v.sort();
        v
    }
}
