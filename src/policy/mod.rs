//! Policy: token counts plus a model's effective limit → allow or refuse.
//! SGLang's prefill scheduler refuses at `len(prompt_ids) >= max_req_input_len`
//! (`managers/utils.py::validate_input_length`); the guard uses the same name,
//! the same comparison, and checks every unit of a batch on its own.

pub mod discovery;
pub mod profile;

pub use profile::{NotServed, Profile, Profiles};

use crate::errors::Reason;

/// Refuses iff the unit does not fit: `tokens >= max_req_input_len`.
pub fn check_unit(tokens: usize, max_req_input_len: usize) -> Result<(), Reason> {
    if tokens >= max_req_input_len {
        Err(Reason::TooLong {
            tokens,
            limit: max_req_input_len,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_is_sglangs() {
        assert!(check_unit(99, 100).is_ok());
        assert!(matches!(
            check_unit(100, 100),
            Err(Reason::TooLong {
                tokens: 100,
                limit: 100
            })
        ));
        assert!(check_unit(101, 100).is_err());
    }
}
