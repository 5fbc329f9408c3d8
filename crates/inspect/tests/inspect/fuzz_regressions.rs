//! The fuzz targets' properties (`fuzz/src/checks.rs`), replayed on every
//! input kept under `fuzz/seeds/<target>/` (the starting corpus) and
//! `fuzz/regressions/<target>/` (inputs a fuzz run found; each was a bug).
//! cargo-fuzz needs nightly; this runs the same checks on stable in every
//! test run, so a fixed finding stays fixed.

#[path = "../../../../fuzz/src/checks.rs"]
#[allow(dead_code)]
mod checks;
use crate::shared;

use std::path::{Path, PathBuf};

/// Every kept input of `target`, seeds and regressions.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut found = Vec::new();
    for kind in ["seeds", "regressions"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                found.push((path, bytes));
            }
        }
    }
    found.sort();
    found
}

/// Runs `check` on every kept input of `target`, naming the input that fails.
fn replay(target: &str, check: impl Fn(&[u8])) {
    let inputs = inputs(target);
    assert!(
        !inputs.is_empty(),
        "no seeds for the {target} fuzz target under fuzz/seeds/{target}"
    );
    let mut failed = Vec::new();
    for (path, bytes) in &inputs {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(bytes))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{target}: failing inputs {failed:?}");
    eprintln!("{target}: {} inputs replayed", inputs.len());
}

#[test]
fn framing_inputs() {
    replay("framing", checks::framing);
}

#[test]
fn path_inputs() {
    replay("path", checks::path);
}

#[test]
fn json_inputs() {
    replay("json", checks::json);
}

#[test]
fn extract_inputs() {
    let Some(dir) = shared::shared_dir() else {
        return;
    };
    let counter = checks::Counter::load(&dir);
    replay("extract", |data| checks::extract(&counter, data));
}

#[test]
fn template_inputs() {
    let Some(dir) = shared::shared_dir() else {
        return;
    };
    let templates = checks::Templates::load(&dir);
    replay("template", |data| checks::template(&templates, data));
}
