//! Counts under older SGLang releases. The goldens pin 0.5.23; the builds
//! the guard protects are 0.5.19 and older, and they render request tools
//! differently. `tests/data/sglang_versions_counts.json`
//! (`src/count/testdata/gen_versions.py`) holds, per release, the prompt
//! length that release's own request code computes for every chat case of
//! `shared/goldens/cases` (`null`: the release refuses it):
//!
//! * `fixtures`: on every tokenizer fixture, a default server;
//!   `prefill-guard count --sglang-version V` must reproduce each count.
//! * `profiles`: under the server configurations of
//!   `shared/goldens/profiles/PROFILES.json`, set up as `tests/profiles.rs`
//!   sets them up (the fixture plus the profile's `config.json`; SGLang's
//!   `/server_info` defaults with the profile's fields), with `version: V` in
//!   that `/server_info` answer; `count --server-info` must reproduce each
//!   count. A profile recorded as `"not servable"` (DeepSeek-V4, which the
//!   guard models from 0.5.23 on) must be refused on every case as
//!   `server_config_unmodelled`, naming `version`. GLM-5.3 is not recorded:
//!   its template does not exist before 0.5.23, so those releases do not start.
//!
//! A case a release refuses is not checked: forwarding it is harmless (the
//! server refuses it); only counting too little could matter.

#[path = "common/profile_model.rs"]
mod profile_model;
#[path = "common/shared.rs"]
mod shared;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use profile_model::{model_dir, server_info_defaults};
use serde_json::{Map, Value};

/// What `gen_versions.py` writes for a profile the guard refuses on that release.
const NOT_SERVABLE: &str = "not servable";

/// The recorded releases: version → {"fixtures": …, "profiles": …}.
fn expected() -> Map<String, Value> {
    let text = include_str!("data/sglang_versions_counts.json");
    match serde_json::from_str(text).expect("sglang_versions_counts.json is JSON") {
        Value::Object(m) => m,
        _ => panic!("sglang_versions_counts.json is an object of releases"),
    }
}

/// `release[key]`: name → that fixture's or profile's record.
fn section<'a>(version: &str, release: &'a Value, key: &str) -> &'a Map<String, Value> {
    release[key]
        .as_object()
        .unwrap_or_else(|| panic!("{version}: no \"{key}\" object"))
}

/// The request bodies of the golden chat cases, written once each into a
/// temporary directory.
struct Bodies {
    shared: PathBuf,
    dir: tempfile::TempDir,
    written: BTreeMap<String, PathBuf>,
}

impl Bodies {
    fn new(shared: &Path) -> Bodies {
        Bodies {
            shared: shared.to_path_buf(),
            dir: tempfile::tempdir().unwrap(),
            written: BTreeMap::new(),
        }
    }

    fn body(&mut self, case: &str) -> PathBuf {
        if let Some(p) = self.written.get(case) {
            return p.clone();
        }
        let golden = self.shared.join(format!("goldens/cases/{case}.json"));
        let golden: Value = serde_json::from_slice(
            &std::fs::read(&golden).unwrap_or_else(|e| panic!("{}: {e}", golden.display())),
        )
        .unwrap();
        assert_eq!(
            golden["endpoint"], "chat",
            "{case}: only chat cases are recorded"
        );
        let path = self.dir.path().join(format!("{case}.json"));
        std::fs::write(&path, golden["request"].to_string()).unwrap();
        self.written.insert(case.to_string(), path.clone());
        path
    }
}

/// `prefill-guard count ARGS` on the chat route over `cases`, in order: one
/// output line per case.
fn count<'a>(
    args: &[&OsStr],
    cases: impl IntoIterator<Item = &'a String>,
    bodies: &mut Bodies,
) -> Vec<Value> {
    let files: Vec<PathBuf> = cases.into_iter().map(|case| bodies.body(case)).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_prefill-guard"))
        .args([
            "count",
            "--date",
            "2025-01-15",
            "--route",
            "/v1/chat/completions",
        ])
        .args(args)
        .args(&files)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(
        lines.len(),
        files.len(),
        "one line per case: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn os_strs(args: &[OsString]) -> Vec<&OsStr> {
    args.iter().map(OsString::as_os_str).collect()
}

/// Compares a release's recorded counts with the guard's output lines; returns
/// (counts checked, how many of them differ from `reference`'s).
fn check_counts(
    label: &str,
    want: &Map<String, Value>,
    got: &[Value],
    reference: impl Fn(&str) -> Option<u64>,
) -> (usize, usize) {
    let (mut checked, mut differs) = (0, 0);
    for ((case, w), line) in want.iter().zip(got) {
        let Some(w) = w.as_u64() else {
            assert!(w.is_null(), "{label} {case}: a count or null, not {w}");
            continue;
        };
        assert_eq!(
            line["tokens"].as_u64(),
            Some(w),
            "{label} {case}: SGLang counts {w}; the guard: {line}"
        );
        checked += 1;
        if reference(case) != Some(w) {
            differs += 1;
        }
    }
    (checked, differs)
}

#[test]
fn counts_equal_each_older_release_on_every_chat_case() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let mut bodies = Bodies::new(&shared);
    // fixture → case → 0.5.23's count, run once per fixture.
    let mut reference: BTreeMap<String, BTreeMap<String, Option<u64>>> = BTreeMap::new();
    let (mut checked, mut differs_from_reference) = (0, 0);
    for (version, release) in expected() {
        for (fixture, want) in section(&version, &release, "fixtures") {
            let want = want.as_object().unwrap();
            let tokenizer = shared.join("tokenizers").join(fixture);
            let args = |v: &str| -> [OsString; 4] {
                [
                    "--tokenizer".into(),
                    tokenizer.clone().into(),
                    "--sglang-version".into(),
                    v.into(),
                ]
            };
            let reference = reference.entry(fixture.clone()).or_insert_with(|| {
                let lines = count(&os_strs(&args("0.5.23")), want.keys(), &mut bodies);
                let tokens = lines.iter().map(|l| l["tokens"].as_u64());
                want.keys().cloned().zip(tokens).collect()
            });
            let got = count(&os_strs(&args(&version)), want.keys(), &mut bodies);
            let (n, d) = check_counts(&format!("{version} {fixture}"), want, &got, |case| {
                reference.get(case).copied().flatten()
            });
            println!("{version} {fixture:<14} {n:>3} counts equal, {d:>2} differ from 0.5.23's");
            checked += n;
            differs_from_reference += d;
        }
    }
    eprintln!(
        "{checked} counts equal their release's; {differs_from_reference} of them differ from 0.5.23's"
    );
    assert!(checked >= 1200, "only {checked} counts checked");
    assert!(
        differs_from_reference > 0,
        "the older releases' tool prompts were not exercised"
    );
}

/// The profile's 0.5.23 golden counts (`shared/goldens/profiles/NAME.jsonl`).
fn profile_goldens(shared: &Path, name: &str) -> BTreeMap<String, Option<u64>> {
    let path = shared.join(format!("goldens/profiles/{name}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let golden: Value = serde_json::from_str(l).unwrap();
            (
                golden["case"].as_str().unwrap().to_string(),
                golden["tokens_sglang"].as_u64(),
            )
        })
        .collect()
}

#[test]
fn counts_equal_each_older_release_under_each_server_profile() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let index = profile_model::profiles_index(&shared);
    let mut bodies = Bodies::new(&shared);
    let (mut checked, mut differs_from_reference, mut refused) = (0, 0, 0);
    for (version, release) in expected() {
        for (name, want) in section(&version, &release, "profiles") {
            let profile = &index["profiles"][name];
            assert!(profile.is_object(), "{name}: not in PROFILES.json");
            let tmp = tempfile::tempdir().unwrap();
            let fixture = profile["fixture"].as_str().unwrap();
            let dir = model_dir(&shared, fixture, &profile["config_json"], tmp.path());
            let mut info = server_info_defaults();
            for (k, v) in profile["server_info"].as_object().unwrap() {
                info[k] = v.clone();
            }
            info["version"] = version.as_str().into();
            let info_path = tmp.path().join("server_info.json");
            std::fs::write(&info_path, info.to_string()).unwrap();
            let args: [&OsStr; 4] = [
                "--tokenizer".as_ref(),
                dir.as_os_str(),
                "--server-info".as_ref(),
                info_path.as_os_str(),
            ];
            let label = format!("{version} {name}");

            if want.as_str() == Some(NOT_SERVABLE) {
                // Every chat case, as the fixtures record them.
                // Every case of the profile's goldens.
                let cases = profile_goldens(&shared, name);
                let lines = count(&args, cases.keys(), &mut bodies);
                for (case, line) in cases.keys().zip(&lines) {
                    let error = &line["error"];
                    assert_eq!(
                        error["code"], "server_config_unmodelled",
                        "{label} {case}: must be refused, got {line}"
                    );
                    let message = error["message"].as_str().unwrap_or_default();
                    assert!(
                        message.contains("version"),
                        "{label} {case}: the refusal must name `version`: {message}"
                    );
                }
                println!(
                    "{version} {name:<24} {:>3} cases refused (not servable)",
                    lines.len()
                );
                refused += lines.len();
                continue;
            }

            let want = want
                .as_object()
                .unwrap_or_else(|| panic!("{label}: counts or \"{NOT_SERVABLE}\""));
            let got = count(&args, want.keys(), &mut bodies);
            let reference = profile_goldens(&shared, name);
            let (n, d) = check_counts(&label, want, &got, |case| {
                reference.get(case).copied().flatten()
            });
            println!("{version} {name:<24} {n:>3} counts equal, {d:>2} differ from 0.5.23's");
            checked += n;
            differs_from_reference += d;
        }
    }
    eprintln!(
        "{checked} profile counts equal their release's ({differs_from_reference} differ from \
         0.5.23's); {refused} cases refused as not servable"
    );
    assert!(checked >= 800, "only {checked} profile counts checked");
    assert!(refused > 0, "no not-servable profile was checked");
    assert!(
        differs_from_reference > 0,
        "the older releases' tool prompts were not exercised"
    );
}
