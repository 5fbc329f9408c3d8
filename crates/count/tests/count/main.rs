//! The counting core's integration tests, one binary: they depend on this
//! crate alone (and the tokenizer fixtures in `../shared`), never on the
//! guard's HTTP side.
#![allow(
    clippy::unwrap_used,
    reason = "tests and their helpers assert by unwrapping; a panic is a failed test"
)]

// The one finder of the shared reference data, shared with the guard's tests.
#[path = "../../../../tests/it/common/shared.rs"]
mod shared;

mod counting_equivalence;
mod counting_speed;
mod tokenizer_generations;
