//! Every tokenizer fixture, loaded as each transformers generation loads it
//! (`count::tokenizer::Transformers`), against the real libraries:
//! `crates/count/src/testdata/tokenizer_generations_expected.json`, written by
//! `gen_tokenizer_generations.py` from the SGLang releases' own
//! `get_tokenizer` under the transformers version each pins.
//!
//! For every variant directory (a fixture as shipped, with a `config.json`,
//! or with an edited config) and every generation: the guard's tokenizer
//! gives the recorded ids for every probe text, with and without special
//! tokens, the recorded `bos_token_id`, `encode("")` and the template
//! variables; where Python fails to load, the guard refuses. Where the guard
//! refuses a loading Python performs, the variant must be listed in
//! `REFUSED` with the reason. Generations that load a variant alike must
//! share one pipeline where their plans coincide (reported, not required).

use crate::shared;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prefill_guard_count::tokenizer::{Generations, Transformers};
use serde_json::{Map, Value};

/// (variant, generation): loadings Python performs that the guard refuses
/// on purpose, with why.
const REFUSED: &[(&str, &str, &str)] = &[];

fn expected() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/testdata/tokenizer_generations_expected.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The variant's directory, as the generator builds it: the fixture's files
/// linked, edited JSON written (`tokenizer_json`: top-level keys replaced).
fn build_dir(root: &Path, shared: &Path, v: &Value) -> PathBuf {
    let name = v["name"].as_str().unwrap();
    let src = shared
        .join("tokenizers")
        .join(v["fixture"].as_str().unwrap());
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            link(&p, &dir.join(p.file_name().unwrap()));
        }
    }
    if let Some(edit) = v["tokenizer_config"].as_object() {
        let p = dir.join("tokenizer_config.json");
        let mut tc: Map<String, Value> =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        for k in edit["delete"].as_array().unwrap() {
            tc.remove(k.as_str().unwrap());
        }
        for (k, val) in edit["set"].as_object().unwrap() {
            tc.insert(k.clone(), val.clone());
        }
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, serde_json::to_string(&tc).unwrap()).unwrap();
    }
    if let Some(set) = v["tokenizer_json"].as_object() {
        let p = dir.join("tokenizer.json");
        let mut tj: Map<String, Value> =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        for (k, val) in set {
            tj.insert(k.clone(), val.clone());
        }
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, serde_json::to_string(&tj).unwrap()).unwrap();
    }
    if v["config_json"].is_object() {
        let p = dir.join("config.json");
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, v["config_json"].to_string()).unwrap();
    }
    dir
}

#[cfg(unix)]
fn link(from: &Path, to: &Path) {
    std::os::unix::fs::symlink(from, to).unwrap();
}

#[cfg(not(unix))]
fn link(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Compares one generation's load with the recorded outcome; mismatches
/// appended to `out`. Returns the checked probe count.
fn check(
    gens: &Generations,
    gen: Transformers,
    variant: &str,
    probes: &[String],
    outcome: &Value,
    out: &mut Vec<String>,
) -> usize {
    let tag = format!("{variant} / {}", gen.name());
    let loaded = gens.get(gen);
    if let Some(err) = outcome.get("error") {
        match loaded {
            Err(_) => {}
            Ok(_) => out.push(format!(
                "{tag}: Python fails ({err}) but the guard loads it"
            )),
        }
        return 0;
    }
    let tok = match loaded {
        Ok(Some(t)) => t,
        Ok(None) => {
            out.push(format!("{tag}: no tokenizer"));
            return 0;
        }
        Err(e) => {
            if !REFUSED
                .iter()
                .any(|(v, g, _)| *v == variant && *g == gen.name())
            {
                out.push(format!("{tag}: refused ({e}) but Python loads it"));
            }
            return 0;
        }
    };
    let mut checked = 0;
    for (i, (text, pair)) in probes
        .iter()
        .zip(outcome["ids"].as_array().unwrap())
        .enumerate()
    {
        for (slot, add) in [(0, true), (1, false)] {
            let want = ids(&pair[slot]);
            let got = tok.encode_ids(text, add).unwrap();
            if got != want {
                out.push(format!(
                    "{tag}: probe {i} {text:?} add_special_tokens={add}: {got:?} != {want:?}"
                ));
            }
            checked += 1;
        }
    }
    let want_bos = outcome["bos_token_id"].as_u64().map(|x| x as u32);
    if tok.bos_token_id() != want_bos {
        out.push(format!(
            "{tag}: bos_token_id {:?} != {want_bos:?}",
            tok.bos_token_id()
        ));
    }
    let empty = !outcome["ids"][0][0].as_array().unwrap().is_empty();
    if tok.auto_adds_specials() != empty {
        out.push(format!(
            "{tag}: auto_adds_specials {}",
            tok.auto_adds_specials()
        ));
    }
    let want_vars: BTreeMap<String, Value> = outcome["template_vars"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let got_vars: BTreeMap<String, Value> = gens
        .template_variables(gen)
        .unwrap()
        .iter()
        .cloned()
        .collect();
    if got_vars != want_vars {
        out.push(format!(
            "{tag}: template variables {got_vars:?} != {want_vars:?}"
        ));
    }
    checked
}

#[test]
fn every_fixture_loads_as_each_generation_loads_it() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let exp = expected();
    let probes: Vec<String> = exp["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    let root = tempfile::tempdir().unwrap();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    let mut loads = 0;
    for v in exp["variants"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let dir = build_dir(root.path(), &shared, v);
        let gens = Generations::load(&dir, None).unwrap();
        let result = &exp["results"][name];
        for gen in Transformers::ALL {
            let i = result["by_generation"][gen.name()]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: no outcome for {}", gen.name()));
            let outcome = &result["outcomes"][i as usize];
            checked += check(&gens, gen, name, &probes, outcome, &mut mismatches);
            loads += 1;
        }
        let shares: Vec<String> = gens
            .sharing()
            .iter()
            .map(|g| g.iter().map(|x| x.name()).collect::<Vec<_>>().join("+"))
            .collect();
        eprintln!("{name}: pipelines {}", shares.join(" | "));
    }
    eprintln!("{checked} probe encodings checked over {loads} variant x generation loads");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// The other ways in: `ModelFiles` (the 5.19 tokenizer eager, the others on
/// demand, one instance per pipeline) and `TextTokenizer::load_as`, on
/// Phi-3 with its checkpoint's config.json, whose generations load three
/// different pipelines.
#[test]
fn model_files_and_load_as_give_each_generation_its_tokenizer() {
    use prefill_guard_count::{ModelFiles, TextTokenizer};
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let exp = expected();
    let v = exp["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "phi-3-mini+config")
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let dir = build_dir(root.path(), &shared, v);
    let files = ModelFiles::load(&dir).unwrap();
    let result = &exp["results"]["phi-3-mini+config"];
    let text = exp["probes"][12].as_str().unwrap();
    let mut shared_ids = BTreeMap::new();
    for gen in Transformers::ALL {
        let outcome =
            &result["outcomes"][result["by_generation"][gen.name()].as_u64().unwrap() as usize];
        let want = ids(&outcome["ids"][12][0]);
        let tok = files.tokenizer_for(gen).unwrap().unwrap();
        assert_eq!(tok.encode_ids(text, true).unwrap(), want, "{}", gen.name());
        let alone = TextTokenizer::load_as(&dir, gen).unwrap().unwrap();
        assert_eq!(
            alone.encode_ids(text, true).unwrap(),
            want,
            "load_as {}",
            gen.name()
        );
        assert_eq!(
            files.template_variables_for(gen).unwrap(),
            tok.template_variables()
        );
        shared_ids.insert(gen, tok.id());
    }
    assert_eq!(
        files.tokenizer().unwrap().id(),
        shared_ids[&Transformers::V5_19]
    );
    assert_eq!(
        shared_ids[&Transformers::V5_6],
        shared_ids[&Transformers::V5_19]
    );
    assert_ne!(
        shared_ids[&Transformers::V5_3],
        shared_ids[&Transformers::V5_19]
    );
    assert_ne!(
        shared_ids[&Transformers::V4],
        shared_ids[&Transformers::V5_19]
    );
}
