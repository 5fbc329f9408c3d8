//! A model directory and a `/server_info` answer for a profile of
//! `shared/goldens/profiles` (its README: "How a guard is checked").

use std::path::{Path, PathBuf};

use serde_json::Value;

/// An SGLang 0.5.23 `/server_info` answer with every default
/// (`tests/data/server_info_defaults.json`, made by SGLang's own code).
pub fn server_info_defaults() -> Value {
    let text = include_str!("../../data/server_info_defaults.json");
    serde_json::from_str(text).expect("server_info_defaults.json is JSON")
}

/// The fixture's files, linked into a fresh directory under `into`, plus
/// `config` as `config.json` when the fixture has none.
pub fn model_dir(shared: &Path, fixture: &str, config: &Value, into: &Path) -> PathBuf {
    let dir = into.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(shared.join("tokenizers").join(fixture)).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    if !dir.join("config.json").exists() {
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    }
    dir
}

/// `goldens/profiles/PROFILES.json` under `shared`.
pub fn profiles_index(shared: &Path) -> Value {
    let path = shared.join("goldens/profiles/PROFILES.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("PROFILES.json is JSON")
}
