//! Policy: token counts plus a model's effective limit → allow or refuse.
//! SGLang's prefill scheduler refuses at `len(prompt_ids) >= max_req_input_len`
//! (`managers/utils.py::validate_input_length`); the guard uses the same name,
//! the same comparison, and checks every unit of a batch on its own.

pub mod ceiling;
pub mod discovery;
pub mod pd;
pub mod profile;
pub mod sample;

pub use profile::{NotServed, Profile, Profiles};

/// Whether a unit fits: SGLang refuses iff `tokens >= max_req_input_len`.
pub fn fits(tokens: usize, max_req_input_len: usize) -> bool {
    tokens < max_req_input_len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_is_sglangs() {
        assert!(fits(99, 100));
        assert!(!fits(100, 100));
        assert!(!fits(101, 100));
    }
}
