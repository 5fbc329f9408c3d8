//! Reads the release expected-value files in the compact form
//! `testdata/compact_expected.py` writes (`dsv32_releases_expected.json`,
//! `dsv4_sglang_expected.json`, `dsv41_sglang_expected.json`) back into the
//! `{version: {"cases": [...]}}` the generators recorded:
//!
//! * `{"$v": i}` is entry `i` of the file's `values` table (an entry refers
//!   to earlier entries only);
//! * a `body` `{"golden": case, "sha256": h}` is the request of
//!   `../shared/goldens/cases/<case>.json` (found as [`shared_dir`] finds
//!   the fixtures), as serde_json's JSON text of it (the tests parse the
//!   body: the same value as the recorded `json.dumps` text); `h` is the
//!   SHA-256 of that text, so a golden case changed since the recording
//!   fails here;
//! * an `encoder.output` longer than 4 KiB stays `{"sha256", "chars"}`,
//!   compared by [`Output::matches`].
//!
//! Without ../shared, cases whose body is a golden case are left out (with
//! the reason printed), except under CI, where [`shared_dir`] fails.
//!
//! [`shared_dir`]: crate::shared_dir

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

const FORMAT: &str = "prefill-guard compact expected values 1";

/// The releases of an expected-value file (`file` names it in messages),
/// every table reference and golden body resolved.
pub(super) fn load(text: &str, file: &str) -> Value {
    let mut data: Value = serde_json::from_str(text).expect("expected values parse");
    assert_eq!(data["format"], FORMAT, "{file}: not the compact form");
    let Value::Array(values) = data["values"].take() else {
        panic!("{file}: no values table");
    };
    let mut table = Vec::with_capacity(values.len());
    for entry in values {
        let resolved = resolve(entry, &table, file);
        table.push(resolved);
    }
    let releases = resolve(data["releases"].take(), &table, file);
    golden_bodies(releases, file)
}

fn resolve(value: Value, table: &[Value], file: &str) -> Value {
    match value {
        Value::Object(m) if m.len() == 1 && m.contains_key("$v") => {
            let i = m["$v"].as_u64().expect("a table index") as usize;
            match table.get(i) {
                Some(v) => v.clone(),
                None => panic!(
                    "{file}: reference {i} beyond the {} entries before it",
                    table.len()
                ),
            }
        }
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, resolve(v, table, file)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| resolve(v, table, file)).collect()),
        other => other,
    }
}

/// `{"golden": case, "sha256": h}` bodies replaced by their request's text.
fn golden_bodies(mut releases: Value, file: &str) -> Value {
    let mut requests: HashMap<String, Option<String>> = HashMap::new();
    let mut shared = None;
    let mut skipped = 0;
    for run in releases.as_object_mut().expect("releases").values_mut() {
        let cases = run["cases"].as_array_mut().expect("cases");
        cases.retain_mut(|case| {
            let Some(reference) = case.get("body").filter(|b| b.is_object()) else {
                return true;
            };
            let name = reference["golden"].as_str().expect("a golden case name");
            let sha = reference["sha256"].as_str().expect("a request hash");
            let text = requests.entry(name.to_string()).or_insert_with(|| {
                let dir = shared.get_or_insert_with(crate::shared_dir).as_ref()?;
                golden_request(dir, name, sha, file)
            });
            match text {
                Some(t) => {
                    case["body"] = Value::String(t.clone());
                    true
                }
                None => {
                    skipped += 1;
                    false
                }
            }
        });
    }
    if skipped > 0 {
        eprintln!("skipping {skipped} cases of {file}: their bodies are ../shared golden cases");
    }
    releases
}

/// The request of `goldens/cases/<name>.json` as JSON text, if the fixture
/// is there (a missing one fails under CI); its hash must be the recorded one.
fn golden_request(shared: &Path, name: &str, sha: &str, file: &str) -> Option<String> {
    let path = shared.join("goldens/cases").join(format!("{name}.json"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        let msg = format!(
            "shared golden case not found at {} (set PREFILL_GUARD_SHARED)",
            path.display()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("skipping: {msg}");
        return None;
    };
    let case: Value = serde_json::from_str(&text).expect("a golden case parses");
    let request = serde_json::to_string(&case["request"]).expect("serializes");
    assert_eq!(
        hex::encode(Sha256::digest(request.as_bytes())),
        sha,
        "{}: not the request {file} was recorded with (regenerate it)",
        path.display()
    );
    Some(request)
}

/// A recorded prompt: its text, or the SHA-256 and length of a long one.
#[derive(Clone, Copy)]
pub(super) enum Output<'a> {
    Text(&'a str),
    Digest { sha256: &'a str, chars: u64 },
}

impl<'a> Output<'a> {
    /// `encoder.output` as recorded (None where there is none).
    pub(super) fn of(value: &'a Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(Output::Text(s)),
            Value::Object(m) => Some(Output::Digest {
                sha256: m.get("sha256")?.as_str()?,
                chars: m.get("chars")?.as_u64()?,
            }),
            _ => None,
        }
    }

    pub(super) fn matches(&self, got: &str) -> bool {
        match self {
            Output::Text(want) => got == *want,
            Output::Digest { sha256, chars } => {
                got.chars().count() as u64 == *chars
                    && hex::encode(Sha256::digest(got.as_bytes())) == *sha256
            }
        }
    }
}

/// A recorded `output` or else `error`, for a failure message.
pub(super) fn recorded(output: &Value, error: &Value) -> String {
    format!(
        "{:?}",
        Output::of(output).or(error.as_str().map(Output::Text))
    )
}

impl fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Text(s) => write!(f, "{s:?}"),
            Output::Digest { sha256, chars } => write!(f, "<{chars} chars, sha256 {sha256}>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries refer to earlier entries; a reference anywhere is the entry.
    #[test]
    fn references_resolve_to_their_entries() {
        let text = r#"{"format":"prefill-guard compact expected values 1",
"values":["a string of some length to share",[{"$v":0},1],{"k":{"$v":1}}],
"releases":{"0.5.6":{"orjson_body":false,"cases":[{"name":"probe/x","glue":{"$v":2},"encoder":{"output":{"$v":0}}},{"$v":2}]}}}"#;
        let got = load(text, "inline");
        let s = "a string of some length to share";
        assert_eq!(
            got,
            serde_json::json!({"0.5.6": {"orjson_body": false, "cases": [
                {"name": "probe/x", "glue": {"k": [s, 1]}, "encoder": {"output": s}},
                {"k": [s, 1]},
            ]}})
        );
    }

    #[test]
    #[should_panic(expected = "reference 1 beyond the 0 entries before it")]
    fn an_entry_may_not_refer_forward() {
        load(
            r#"{"format":"prefill-guard compact expected values 1","values":[{"$v":1},"x"],"releases":{}}"#,
            "inline",
        );
    }

    /// A long prompt is its hash and length: one character off fails.
    #[test]
    fn a_digest_matches_its_text_only() {
        let text = "é".repeat(3000);
        let digest = serde_json::json!({
            "sha256": hex::encode(Sha256::digest(text.as_bytes())),
            "chars": 3000,
        });
        let want = Output::of(&digest).expect("a digest");
        assert!(want.matches(&text));
        assert!(!want.matches(&format!("{}e", &text[..text.len() - 2])));
        assert!(!want.matches(&format!("{text}é")));
        assert!(Output::of(&serde_json::json!("short"))
            .unwrap()
            .matches("short"));
        assert!(Output::of(&Value::Null).is_none());
    }
}
