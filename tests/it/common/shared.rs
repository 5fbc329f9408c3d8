//! Where the read-only reference data (`shared/`: tokenizer fixtures and goldens) lives.

use std::path::PathBuf;

/// `$PREFILL_GUARD_SHARED`, else `shared/` beside the workspace root (the
/// first ancestor of the crate holding `Cargo.lock`: this file serves the
/// guard's tests and the counting crate's benches alike). `None` (with a printed skip
/// reason) when it is missing on a developer machine; under CI (`$CI` set) a
/// missing directory is a failure, naming the path that was looked at.
pub fn shared_dir() -> Option<PathBuf> {
    let path = match std::env::var_os("PREFILL_GUARD_SHARED") {
        Some(p) => PathBuf::from(p),
        None => {
            let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let root = crate_dir
                .ancestors()
                .find(|d| d.join("Cargo.lock").is_file())
                .unwrap_or(&crate_dir);
            root.join("../shared")
        }
    };
    if path.join("goldens").is_dir() && path.join("tokenizers").is_dir() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "shared reference data not found: {} (needs goldens/ and tokenizers/; set PREFILL_GUARD_SHARED)",
            path.display()
        );
    }
    eprintln!(
        "skipping: shared reference data not found at {} (set PREFILL_GUARD_SHARED to run the goldens)",
        path.display()
    );
    None
}
