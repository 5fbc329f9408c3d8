//! Every SGLang release from 0.4.5 to 0.5.23, counted as its own code counts.
//!
//! `tests/data/sglang_releases.json` (`crates/count/src/testdata/gen_releases.py`,
//! packed by `pack_releases.py`) holds, for each of the 66 releases, the
//! prompt length that release's own request code computes for every case
//! of `shared/goldens/cases` (chat, completions, generate) on every
//! tokenizer fixture under a default server, and for the chat cases under
//! each server profile of `shared/goldens/profiles`. Each release's family
//! (`count::release::Release`) is built once per fixture and profile, the
//! way a server reporting that release's `version` is counted, and must give
//! every count the release gives.
//!
//! Where the release refuses a request nothing is compared: forwarding it is
//! harmless, the server refuses it. A chat carrying `input_ids` is counted
//! as the larger of the ids and the rendered messages (sglang-router drops
//! the ids). Where the guard refuses what the release counts, the refusal
//! must be one of the documented fail-closed ones ([`Allowed`]), each
//! printed with how often it happened; any other is a failure.

use crate::profile_model;
use crate::shared;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use prefill_guard_count::release::{parse_version, Release};
use prefill_guard_count::serving::{Observed, SglangEnv};
use prefill_guard_count::{Clock, CountError, ModelCounter, ModelFiles, ServerConfig, Unit};
use prefill_guard_inspect::{self as inspect, json, Route};
use serde_json::{json as j, Value};
use sha2::{Digest, Sha256};

fn data() -> Value {
    serde_json::from_str(include_str!("../../../../tests/data/sglang_releases.json"))
        .expect("sglang_releases.json is JSON")
}

/// The goldens pin `strftime_now()` to 2025-01-15 12:00:00.
fn clock() -> Clock {
    let t = chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("valid date");
    Clock::Fixed(t)
}

/// A golden case: the route and the body a client sends.
struct Case {
    route: Route,
    request: Value,
}

fn cases(shared: &Path) -> BTreeMap<String, Case> {
    let dir = shared.join("goldens/cases");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let route = match case["endpoint"].as_str() {
            Some("chat") => Route::ChatCompletions,
            Some("completions") => Route::Completions,
            Some("generate") => Route::Generate,
            other => panic!("{}: endpoint {other:?}", path.display()),
        };
        out.insert(
            case["case"].as_str().unwrap().to_string(),
            Case {
                route,
                request: case["request"].clone(),
            },
        );
    }
    out
}

/// The family a recorded release belongs to.
fn family(version: &str) -> Release {
    let (v, _) = parse_version(version).unwrap_or_else(|| panic!("{version}: a version"));
    Release::of(v).unwrap_or_else(|| panic!("{version}: a modelled release"))
}

/// A server on `version` as discovery would read it: 0.5.23's `/server_info`
/// defaults with `settings` set, and `/model_info` as that release answers
/// it: the served architecture from 0.5.6.post1, nothing of it before (the
/// guard then reads the checkpoint's `config.json`, as those releases do).
fn counter(
    files: &Arc<ModelFiles>,
    version: &str,
    settings: &Value,
    config_json: &Value,
) -> Result<ModelCounter, String> {
    let mut info = profile_model::server_info_defaults();
    for (k, v) in settings.as_object().into_iter().flatten() {
        info[k] = v.clone();
    }
    info["version"] = j!(version);
    let publishes_arch =
        parse_version(version).unwrap().0 >= parse_version("0.5.6.post1").unwrap().0;
    let model_info = if publishes_arch {
        config_json.clone()
    } else {
        j!({"model_path": "m", "tokenizer_path": "m", "is_generation": true})
    };
    let observed = Observed::from_server(&info, Some(&model_info));
    let server = ServerConfig::resolve(&observed, &SglangEnv::default()).map_err(join)?;
    ModelCounter::for_server(files.clone(), Arc::new(server)).map_err(join)
}

fn join(problems: Vec<prefill_guard_count::Unmodelled>) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the guard makes of a case: a count per sequence, or a refusal.
#[derive(Debug, Clone)]
enum Outcome {
    Counted(Vec<u64>),
    /// Refused at load (the model is not served on that release) or per request.
    Refused(String),
}

fn count(counter: &ModelCounter, case: &Case) -> Outcome {
    let body = serde_json::to_vec(&case.request).unwrap();
    let value = match json::parse_strict(&body) {
        Ok(v) => v,
        Err(r) => return Outcome::Refused(r.to_string()),
    };
    let units = match inspect::extract(case.route, Arc::new(value)) {
        Ok(p) => p.units,
        Err(r) => return Outcome::Refused(r.to_string()),
    };
    let counted: Result<Vec<u64>, CountError> = units
        .iter()
        .map(|u: &Unit| counter.count(u, clock()).map(|n| n as u64))
        .collect();
    match counted {
        Ok(n) => Outcome::Counted(n),
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

/// The fail-closed refusals a release's count may meet, each with the text
/// that identifies it. The guard refuses these on purpose (README, Known
/// limits); every other refusal of a counted case is a failure.
const ALLOWED: &[(&str, &str)] = &[
    (
        "media parts refused without the multimodal opt-in (releases before 0.5.17 drop them on a text-only model)",
        "Model only supports text input",
    ),
    (
        "a conversation template picked from the model path (0.4.6.post2-0.4.10.post1), not modelled",
        "conversation template",
    ),
    (
        "an empty completions prompt, which releases before 0.5.1 count as 0 or 1 token (refused from 0.5.1)",
        "Prompt cannot be empty",
    ),
    (
        "a tokenizer class transformers 5.0.0rc0 (0.5.6.post1 only) loads in a way not reproduced",
        "transformers V5Rc0 in a way the guard does not reproduce",
    ),
];

/// Tallies, per family, of what was compared.
#[derive(Default)]
struct Tally {
    equal: usize,
    allowed: BTreeMap<&'static str, usize>,
    failures: Vec<String>,
}

impl Tally {
    fn compare(&mut self, label: &str, want: &Value, got: &Outcome, ids_or_messages: Option<u64>) {
        let want: Option<Vec<u64>> = match want {
            Value::Null => return, // the release refuses: nothing to compare
            Value::Number(n) => n.as_u64().map(|n| vec![n]),
            Value::Array(a) => a.iter().map(Value::as_u64).collect(),
            _ => None,
        };
        let Some(mut want) = want else {
            self.failures
                .push(format!("{label}: unreadable record {want:?}"));
            return;
        };
        if let (Some(rendered), [ids]) = (ids_or_messages, &mut want[..]) {
            *ids = (*ids).max(rendered);
        }
        match got {
            Outcome::Counted(n) if *n == want => self.equal += 1,
            Outcome::Counted(n) => self.failures.push(format!(
                "{label}: the guard counts {n:?}, the release {want:?}"
            )),
            Outcome::Refused(why) => match ALLOWED.iter().find(|(_, mark)| why.contains(mark)) {
                Some((name, _)) => *self.allowed.entry(name).or_default() += 1,
                None => self.failures.push(format!(
                    "{label}: the guard refuses ({why}), the release counts {want:?}"
                )),
            },
        }
    }
}

/// A chat carrying `input_ids`: what its messages alone count (the larger of
/// the two is expected).
fn messages_alone(counter: &ModelCounter, case: &Case) -> Option<u64> {
    let ids = case.request.get("input_ids")?;
    let _ = ids;
    let mut body = case.request.clone();
    body.as_object_mut()?.remove("input_ids");
    match count(
        counter,
        &Case {
            route: case.route,
            request: body,
        },
    ) {
        Outcome::Counted(n) => n.first().copied(),
        Outcome::Refused(_) => None,
    }
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The stand-in architecture and model path of each fixture
/// (`goldens/HEADER.json`), as `/model_info` and `/server_info` give them.
fn standins(shared: &Path) -> BTreeMap<String, (Value, String)> {
    let header: Value =
        serde_json::from_slice(&std::fs::read(shared.join("goldens/HEADER.json")).unwrap())
            .unwrap();
    header["sglang"]["tokenizers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, t)| {
            let s = &t["model_standin"];
            (
                name.clone(),
                (
                    j!({"architectures": s["architectures"], "model_type": s["model_type"]}),
                    s["model_path"].as_str().unwrap_or(name).to_string(),
                ),
            )
        })
        .collect()
}

/// One fixture's comparisons for every recorded release: the guard built
/// once per family (with the record's model path), every case counted once
/// per family.
fn check_fixture(
    shared: &Path,
    name: &str,
    records: &[Value],
    cases: &BTreeMap<String, Case>,
    standin: &(Value, String),
) -> BTreeMap<Release, Tally> {
    let files = Arc::new(ModelFiles::load(&shared.join("tokenizers").join(name)).unwrap());
    let mut tallies: BTreeMap<Release, Tally> = BTreeMap::new();
    let mut outcomes: BTreeMap<(Release, String, String), (Outcome, Option<u64>)> = BTreeMap::new();
    for record in records {
        // The counts under the stand-in's own model path, and, where that
        // path picks a conversation template, under a neutral one too.
        let mut runs = vec![(standin.1.clone(), &record["fixtures"][name])];
        if let Some(alt) = record["model_path_fixtures"].get(name) {
            runs.push((
                alt["model_path"].as_str().unwrap().to_string(),
                &alt["counts"],
            ));
        }
        for version in record["releases"].as_array().unwrap() {
            let version = version.as_str().unwrap();
            let release = family(version);
            for (model_path, counts) in &runs {
                let Some(counts) = counts.as_object() else {
                    continue;
                };
                let settings = j!({"model_path": model_path});
                let built = counter(
                    &files,
                    release.first().to_string().as_str(),
                    &settings,
                    &standin.0,
                );
                for (case_name, want) in counts {
                    let case = &cases[case_name];
                    let key = (release, model_path.clone(), case_name.clone());
                    let (got, rendered) = outcomes
                        .entry(key)
                        .or_insert_with(|| match &built {
                            Ok(c) => (count(c, case), messages_alone(c, case)),
                            Err(why) => (Outcome::Refused(why.clone()), None),
                        })
                        .clone();
                    let tally = tallies.entry(release).or_default();
                    tally.compare(
                        &format!("{version} {name}@{model_path} {case_name}"),
                        want,
                        &got,
                        rendered,
                    );
                }
            }
            // A fixture without tokenizer.json: the rendered prompt's hash.
            if let Some(hashes) = record["rendered"].get(name).and_then(Value::as_object) {
                let built = counter(
                    &files,
                    release.first().to_string().as_str(),
                    &j!({"model_path": standin.1}),
                    &standin.0,
                );
                let tally = tallies.entry(release).or_default();
                for (case_name, want) in hashes {
                    let case = &cases[case_name];
                    let got = built.as_ref().map_err(Clone::clone).and_then(|c| {
                        c.render_chat(&case.request, clock())
                            .map_err(|e| e.to_string())
                    });
                    let label = format!("{version} {name} {case_name} (rendered)");
                    match got {
                        Ok(text) if sha256_hex(&text) == want.as_str().unwrap_or_default() => {
                            tally.equal += 1
                        }
                        Ok(text) => tally.failures.push(format!(
                            "{label}: the guard renders {} chars, another prompt than the release's",
                            text.chars().count()
                        )),
                        Err(why) => match ALLOWED.iter().find(|(_, mark)| why.contains(mark)) {
                            Some((reason, _)) => *tally.allowed.entry(reason).or_default() += 1,
                            None => tally
                                .failures
                                .push(format!("{label}: the guard refuses ({why}), the release renders")),
                        },
                    }
                }
            }
        }
    }
    tallies
}

fn report(title: &str, tallies: &BTreeMap<Release, Tally>) -> Vec<String> {
    println!(
        "\n{title}\n{:<28} {:>6} {:>8}  allowed refusals",
        "family", "equal", "failures"
    );
    let mut failures = Vec::new();
    for (release, t) in tallies {
        let allowed: Vec<String> = t.allowed.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "{:<28} {:>6} {:>8}  {}",
            release.range(),
            t.equal,
            t.failures.len(),
            allowed.join("; ")
        );
        failures.extend(t.failures.iter().cloned());
    }
    failures
}

fn merge(into: &mut BTreeMap<Release, Tally>, from: BTreeMap<Release, Tally>) {
    for (release, t) in from {
        let e = into.entry(release).or_default();
        e.equal += t.equal;
        for (k, n) in t.allowed {
            *e.allowed.entry(k).or_default() += n;
        }
        e.failures.extend(t.failures);
    }
}

#[test]
fn every_release_counts_as_its_own_code_on_every_fixture() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let data = data();
    let records = data["records"].as_array().unwrap().clone();
    let cases = Arc::new(cases(&shared));
    let standins = standins(&shared);
    let mut fixtures: Vec<String> = records
        .iter()
        .flat_map(|r| {
            let counted = r["fixtures"].as_object().unwrap().keys().cloned();
            let rendered = r["rendered"].as_object().unwrap().keys().cloned();
            counted.chain(rendered).collect::<Vec<_>>()
        })
        .collect();
    fixtures.sort();
    fixtures.dedup();
    let total: Mutex<BTreeMap<Release, Tally>> = Mutex::new(BTreeMap::new());
    // A few fixtures at a time: each holds its tokenizer and counts every
    // family's cases.
    let queue = Mutex::new(fixtures.clone());
    std::thread::scope(|scope| {
        for _ in 0..std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .min(4)
        {
            scope.spawn(|| loop {
                let Some(name) = queue.lock().unwrap().pop() else {
                    return;
                };
                let standin = standins
                    .get(&name)
                    .unwrap_or_else(|| panic!("{name}: no stand-in in HEADER.json"));
                let tallies = check_fixture(&shared, &name, &records, &cases, standin);
                merge(&mut total.lock().unwrap(), tallies);
            });
        }
    });
    let total = total.into_inner().unwrap();
    let failures = report("fixtures, default server", &total);
    let equal: usize = total.values().map(|t| t.equal).sum();
    let families = total.len();
    eprintln!(
        "{equal} counts equal their release's across {families} families; {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(families, Release::ALL.len(), "every family was checked");
    assert!(equal >= 28_000, "only {equal} counts compared");
}

#[test]
fn every_release_counts_as_its_own_code_under_each_profile() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let data = data();
    let cases = cases(&shared);
    let index = profile_model::profiles_index(&shared);
    let mut total: BTreeMap<Release, Tally> = BTreeMap::new();
    let mut outcomes: BTreeMap<(Release, String, String), (Outcome, Option<u64>)> = BTreeMap::new();
    let mut loaded: BTreeMap<String, (tempfile::TempDir, Arc<ModelFiles>)> = BTreeMap::new();
    let mut not_run = 0;
    for record in data["records"].as_array().unwrap() {
        for (profile_name, counts) in record["profiles"].as_object().unwrap() {
            let Some(counts) = counts.as_object() else {
                // The release does not run this configuration (a flag it
                // lacks, a parser or template it does not know).
                not_run += record["releases"].as_array().unwrap().len();
                continue;
            };
            let profile = &index["profiles"][profile_name];
            let fixture = profile["fixture"].as_str().unwrap();
            let (_, files) = loaded.entry(profile_name.clone()).or_insert_with(|| {
                let tmp = tempfile::tempdir().unwrap();
                let dir =
                    profile_model::model_dir(&shared, fixture, &profile["config_json"], tmp.path());
                let files = Arc::new(ModelFiles::load(&dir).unwrap());
                (tmp, files)
            });
            let files = files.clone();
            for version in record["releases"].as_array().unwrap() {
                let version = version.as_str().unwrap();
                let release = family(version);
                let built = counter(
                    &files,
                    release.first().to_string().as_str(),
                    &profile["server_info"],
                    &profile["config_json"],
                );
                for (case_name, want) in counts {
                    let case = &cases[case_name];
                    let key = (release, profile_name.clone(), case_name.clone());
                    let (got, rendered) = outcomes
                        .entry(key)
                        .or_insert_with(|| match &built {
                            Ok(c) => (count(c, case), messages_alone(c, case)),
                            Err(why) => (Outcome::Refused(why.clone()), None),
                        })
                        .clone();
                    total.entry(release).or_default().compare(
                        &format!("{version} {profile_name} {case_name}"),
                        want,
                        &got,
                        rendered,
                    );
                }
            }
        }
    }
    let failures = report("server profiles", &total);
    let equal: usize = total.values().map(|t| t.equal).sum();
    eprintln!(
        "{equal} profile counts equal their release's; {not_run} release x profile pairs the release does not run; {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(equal >= 5_000, "only {equal} profile counts compared");
}

/// Discovery on every release: a default prefill worker's `/get_server_info`
/// answer, as each release's own `ServerArgs` makes it
/// (`tests/data/server_info_releases.json`, `gen_server_info_releases.py`;
/// keys a release lacks are absent, its defaults spelled its own way), is
/// read as that release's family with every setting at SGLang's default, and
/// a model is served under it.
#[test]
fn every_release_is_discovered_as_its_family() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let answers: Value = serde_json::from_str(include_str!(
        "../../../../tests/data/server_info_releases.json"
    ))
    .unwrap();
    let files = Arc::new(ModelFiles::load(&shared.join("tokenizers/qwen3")).unwrap());
    let model_info = j!({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"});
    let mut checked = 0;
    for (version, info) in answers.as_object().unwrap() {
        let observed = Observed::from_server(info, None);
        let settings: Vec<&str> = observed.iter().map(|(k, _)| k).collect();
        assert_eq!(
            settings,
            ["version", "disaggregation_mode", "model_path"],
            "{version}: only the release and PD mode differ from SGLang's defaults"
        );
        let server = ServerConfig::resolve(&observed, &SglangEnv::default())
            .unwrap_or_else(|e| panic!("{version}: {}", join(e)));
        assert_eq!(
            server.releases.iter().collect::<Vec<_>>(),
            [family(version)],
            "{version}"
        );
        let observed = Observed::from_server(info, Some(&model_info));
        let server = ServerConfig::resolve(&observed, &SglangEnv::default()).unwrap();
        ModelCounter::for_server(files.clone(), Arc::new(server))
            .unwrap_or_else(|e| panic!("{version}: not served: {}", join(e)));
        checked += 1;
    }
    assert_eq!(checked, 66, "every published release from 0.4.5");
}
