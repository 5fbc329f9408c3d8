//! Request inspection's integration tests, one binary, built with this crate
//! and the counting core alone (and the fixtures in `../shared`): requests
//! counted as the guard receives them (the strict JSON reader, then each
//! route's extraction, then the core) against SGLang 0.5.23's goldens and
//! every release's own counts, and the fuzz targets' kept inputs replayed.
#![allow(
    clippy::unwrap_used,
    reason = "tests and their helpers assert by unwrapping; a panic is a failed test"
)]

// The one finder of the shared reference data and the profiles' model
// directories, shared with the guard's tests.
#[path = "../../../../tests/it/common/profile_model.rs"]
mod profile_model;
#[path = "../../../../tests/it/common/shared.rs"]
mod shared;

mod fuzz_regressions;
mod goldens;
mod properties;
mod releases;
