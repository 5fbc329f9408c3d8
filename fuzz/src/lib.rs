//! Shared by the fuzz targets: the properties they check (`checks.rs`, also
//! replayed by `crates/inspect/tests/inspect/fuzz_regressions.rs`) and the fixtures they load once.

pub mod checks;

use std::path::{Path, PathBuf};

/// The fixtures in `../shared`, found from this crate's directory.
pub fn shared() -> PathBuf {
    checks::shared_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}
