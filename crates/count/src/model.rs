//! A model directory, loaded once: the tokenizer, its configuration, the
//! checkpoint's chat templates and `config.json`. Everything that depends
//! on how the server runs is built on top of it per serving profile
//! ([`super::ModelCounter::for_server`]), so a profile change never reloads
//! a tokenizer.

use std::path::Path;

use serde_json::Value;

use super::serving::Arch;
use super::tokenizer::{read_json, Generations, TextTokenizer, TokenizerConfig, Transformers};
use super::LoadError;

/// transformers' `CHAT_TEMPLATE_DIR`.
const ADDITIONAL_CHAT_TEMPLATES: &str = "additional_chat_templates";

/// The chat templates a checkpoint ships, as transformers reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum CheckpointTemplates {
    #[default]
    None,
    /// `chat_template.jinja`, or a string `chat_template` in `tokenizer_config.json`.
    One(String),
    /// A list (or dict) of named templates in `tokenizer_config.json`, in
    /// order, or `chat_template.jinja` (as `default`, first) with the files
    /// of `additional_chat_templates/`.
    Named(Vec<(String, String)>),
    /// Several `additional_chat_templates/` files and no `default`: SGLang
    /// takes the first, and their order is the directory's (`Path.glob`),
    /// which nothing fixes. Usable only by name (`hf_chat_template_name`).
    Unordered(Vec<(String, String)>),
}

pub struct ModelFiles {
    /// The tokenizer as SGLang 0.5.22+ loads it (transformers 5.19); the
    /// other generations' are [`ModelFiles::tokenizer_for`].
    pub(super) tokenizer: Option<TextTokenizer>,
    pub(super) config: TokenizerConfig,
    /// Every generation's tokenizer, built on first use and shared where
    /// the rewritten `tokenizer.json` is the same.
    generations: Generations,
    pub(super) templates: CheckpointTemplates,
    /// The processor's template (`chat_template.json`), preferred by SGLang
    /// when the server is multimodal.
    pub(super) processor_template: Option<String>,
    /// `config.json`'s `architectures` and `model_type` (`None`: no `config.json`).
    pub(super) arch: Option<Arch>,
    /// The directory has `additional_chat_templates/*.jinja`.
    pub(super) additional_templates: bool,
    /// Where the files were read from: SGLang matches conversation templates
    /// against the model path, which a server that does not say (a static
    /// configuration) most likely shares with the directory it was copied to.
    pub(super) source: Option<String>,
    /// `config.json`'s `dsv4_reasoning_effort_profile` (DeepSeek-V4 on
    /// 0.5.18-0.5.22).
    pub(super) dsv4_effort_profile: Option<Value>,
    /// The context length SGLang derives from `config.json` (`None`: no
    /// `config.json`), before any `--context-length`.
    context_len: Option<usize>,
}

impl std::fmt::Debug for ModelFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFiles")
            .field("tokenizer", &self.tokenizer.is_some())
            .field("arch", &self.arch)
            .finish_non_exhaustive()
    }
}

impl ModelFiles {
    /// Loads `tokenizer.json`, `tokenizer_config.json`, the chat templates
    /// and `config.json` from a directory. A directory with only a template
    /// can render but not count.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let config = TokenizerConfig::load(dir)?;
        let generations = Generations::load(dir, Some(Transformers::V5_19))?;
        let tokenizer = if generations.has_tokenizer_json() {
            generations
                .get(Transformers::V5_19)
                .map_err(|message| LoadError::Invalid {
                    path: generations.path().display().to_string(),
                    message,
                })?
                .cloned()
        } else {
            None
        };
        let templates = checkpoint_templates(dir, &config)?;
        let processor_template = match read_json(&dir.join("chat_template.json"))? {
            Some(v) => v["chat_template"].as_str().map(str::to_owned),
            None => None,
        };
        let model_config = read_json(&dir.join("config.json"))?;
        let arch = model_config.as_ref().map(Arch::from_config);
        let dsv4_effort_profile = model_config
            .as_ref()
            .and_then(|c| c.get("dsv4_reasoning_effort_profile"))
            .filter(|v| !v.is_null())
            .cloned();
        let context_len = model_config.as_ref().and_then(context_len_of);
        let additional_templates = std::fs::read_dir(dir.join(ADDITIONAL_CHAT_TEMPLATES))
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".jinja"))
            })
            .unwrap_or(false);
        Ok(Self {
            tokenizer,
            config,
            templates,
            processor_template,
            arch,
            additional_templates,
            source: Some(dir.display().to_string()),
            dsv4_effort_profile,
            context_len,
            generations,
        })
    }

    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.tokenizer.as_ref()
    }

    /// The tokenizer the releases of `generation` load (built on first use;
    /// generations that load it alike share one, with one
    /// [`TextTokenizer::id`]). `Ok(None)` without a `tokenizer.json`; `Err`
    /// with the reason when that generation's loading is not modelled.
    pub fn tokenizer_for(
        &self,
        generation: Transformers,
    ) -> Result<Option<&TextTokenizer>, String> {
        self.generations.get(generation)
    }

    /// What `generation`'s `apply_chat_template` spreads from
    /// `special_tokens_map` (transformers 4: also `additional_special_tokens`,
    /// a list), known without a `tokenizer.json` too.
    pub fn template_variables_for(
        &self,
        generation: Transformers,
    ) -> Result<&[(String, Value)], String> {
        self.generations.template_variables(generation)
    }

    /// Every generation's loading of this directory.
    pub fn generations(&self) -> &Generations {
        &self.generations
    }

    /// The context length the server derives from the checkpoint's
    /// `config.json` when started without `--context-length`.
    pub fn context_len(&self) -> Option<usize> {
        self.context_len
    }

    /// `config.json`'s architecture, if the directory has one.
    pub fn arch(&self) -> Option<&Arch> {
        self.arch.as_ref()
    }

    /// `tokenizer_config.json` names a tokenizer class in the checkpoint's
    /// own code (`auto_map`), which transformers loads under
    /// `--trust-remote-code`.
    pub fn has_remote_tokenizer_code(&self) -> bool {
        self.config
            .get("auto_map")
            .and_then(|m| m.get("AutoTokenizer"))
            .is_some_and(|v| !v.is_null())
    }

    /// `TemplateManager._resolve_hf_chat_template`: the processor's template
    /// on a multimodal server, else the tokenizer's; of several named
    /// templates `hf_chat_template_name`'s, else the first.
    pub fn hf_template(
        &self,
        multimodal: bool,
        name: Option<&str>,
    ) -> Result<Option<String>, String> {
        if multimodal && self.additional_templates {
            // The processor (`ProcessorMixin.from_pretrained`) lists the
            // additional templates first, in directory order, and
            // `chat_template.jinja` last; with `chat_template.json` it
            // raises. Neither is a template the guard can name for SGLang.
            if self.processor_template.is_some() {
                return Err(
                    "chat_template.json together with additional_chat_templates/: \
                            transformers refuses to load this processor"
                        .into(),
                );
            }
            if name.is_none() {
                return Err(
                    "a multimodal server takes the first of additional_chat_templates/ \
                            in directory order, which is not fixed; set hf_chat_template_name \
                            (SGLang's --hf-chat-template-name) on both"
                        .into(),
                );
            }
        }
        if multimodal {
            if let Some(t) = &self.processor_template {
                return Ok(Some(t.clone()));
            }
        }
        Ok(match &self.templates {
            CheckpointTemplates::None => None,
            CheckpointTemplates::One(t) => Some(t.clone()),
            CheckpointTemplates::Named(list) => match name {
                Some(n) => Some(
                    list.iter()
                        .find(|(k, _)| k == n)
                        .map(|(_, t)| t.clone())
                        .ok_or_else(|| {
                            let names: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
                            format!("Specified template '{n}' not found. Available templates: {names:?}")
                        })?,
                ),
                None => list.first().map(|(_, t)| t.clone()),
            },
            CheckpointTemplates::Unordered(list) => match name {
                Some(n) => Some(list.iter().find(|(k, _)| k == n).map(|(_, t)| t.clone()).ok_or_else(|| {
                    let names: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
                    format!("Specified template '{n}' not found. Available templates: {names:?}")
                })?),
                None => {
                    let names: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
                    return Err(format!(
                        "additional_chat_templates/ holds {names:?} and there is no chat_template.jinja: \
                         SGLang uses the first in directory order, which is not fixed; set \
                         hf_chat_template_name (SGLang's --hf-chat-template-name) on both"
                    ));
                }
            },
        })
    }
}

impl CheckpointTemplates {
    /// The templates in `dir` alone, without loading its tokenizer (the
    /// template fuzz target renders every fixture's templates).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        checkpoint_templates(dir, &TokenizerConfig::load(dir)?)
    }

    /// Every template, by name (`default` for a single one).
    pub fn all(&self) -> Vec<(&str, &str)> {
        match self {
            Self::None => Vec::new(),
            Self::One(t) => vec![("default", t.as_str())],
            Self::Named(list) | Self::Unordered(list) => {
                list.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect()
            }
        }
    }
}

/// transformers 5.19 (`PreTrainedTokenizerBase.from_pretrained`): the
/// template files, read in text mode (universal newlines), take priority
/// over `tokenizer_config.json`'s `chat_template`: `chat_template.jinja` is
/// `default`, each `additional_chat_templates/NAME.jinja` is `NAME`; one
/// `default` alone is a plain template, several a dict. Without files, a
/// list of named templates in the config becomes a dict too
/// (`TemplateManager._select_named_template` then picks).
fn checkpoint_templates(
    dir: &Path,
    config: &TokenizerConfig,
) -> Result<CheckpointTemplates, LoadError> {
    let io = |path: &Path, source| LoadError::Io {
        path: path.display().to_string(),
        source,
    };
    let read = |path: &Path| -> Result<Option<String>, LoadError> {
        match std::fs::read_to_string(path) {
            Ok(s) => Ok(Some(super::py::universal_newlines(s))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(path, e)),
        }
    };
    let mut files: Vec<(String, String)> = Vec::new();
    if let Some(t) = read(&dir.join("chat_template.jinja"))? {
        files.push(("default".into(), t));
    }
    let has_default = !files.is_empty();
    let extra_dir = dir.join(ADDITIONAL_CHAT_TEMPLATES);
    let mut extra: Vec<(String, String)> = Vec::new();
    match std::fs::read_dir(&extra_dir) {
        Ok(entries) => {
            for entry in entries {
                let path = entry.map_err(|e| io(&extra_dir, e))?.path();
                let Some(name) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".jinja"))
                else {
                    continue;
                };
                // transformers opens every `*.jinja` entry; one it cannot
                // read fails the tokenizer's load, and so the model's here.
                let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
                extra.push((name.to_string(), super::py::universal_newlines(text)));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&extra_dir, e)),
    }
    // Sorted so the guard's own choices never depend on the directory's
    // order; where SGLang's does (no `default`), the model is `Unordered`.
    extra.sort();
    for (name, text) in extra {
        match files.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = text,
            None => files.push((name, text)),
        }
    }
    match files.len() {
        0 => {}
        1 if files[0].0 == "default" => {
            return Ok(CheckpointTemplates::One(files.remove(0).1));
        }
        n if n > 1 && !has_default => return Ok(CheckpointTemplates::Unordered(files)),
        _ => return Ok(CheckpointTemplates::Named(files)),
    }
    Ok(match config.get("chat_template") {
        Some(Value::String(s)) => CheckpointTemplates::One(s.clone()),
        Some(Value::Array(list)) => CheckpointTemplates::Named(
            list.iter()
                .filter_map(|t| {
                    Some((
                        t.get("name")?.as_str()?.to_owned(),
                        t.get("template")?.as_str()?.to_owned(),
                    ))
                })
                .collect(),
        ),
        Some(Value::Object(map)) => CheckpointTemplates::Named(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect(),
        ),
        _ => CheckpointTemplates::None,
    })
}

/// SGLang's `get_context_length` on `get_hf_text_config(config)`
/// (`utils/hf_transformers/common.py`, alike in every release from 0.4.5):
/// the first of these keys that is set, times the RoPE scaling factor unless
/// the scaling says the positions are already original. Without any key
/// SGLang takes 2048 or the config class's default, which the JSON does not
/// show: `None`, so nothing is judged against a guess.
/// A multimodal checkpoint's language model is its `text_config` (or
/// `llm_config`, `language_config`, `thinker_config`).
fn context_len_of(config: &Value) -> Option<usize> {
    const KEYS: [&str; 5] = [
        "max_sequence_length",
        "seq_length",
        "max_seq_len",
        "model_max_length",
        "max_position_embeddings",
    ];
    let llava = config["architectures"][0]
        .as_str()
        .is_some_and(|a| a.starts_with("Llava") && a.ends_with("ForCausalLM"));
    let text = [
        "text_config",
        "llm_config",
        "language_config",
        "thinker_config",
    ]
    .iter()
    .filter(|_| !llava)
    .find_map(|k| config.get(*k).filter(|v| v.is_object()))
    .unwrap_or(config);
    // transformers 5 names it `rope_parameters`.
    let rope = ["rope_scaling", "rope_parameters"]
        .iter()
        .find_map(|k| text.get(*k).filter(|r| r.is_object()));
    let factor = match rope {
        Some(r) if r.get("original_max_position_embeddings").is_some() => 1.0,
        Some(r) if r["rope_type"] == "llama3" => 1.0,
        Some(r) => r["factor"].as_f64().unwrap_or(1.0),
        None => 1.0,
    };
    KEYS.iter()
        .find_map(|k| text.get(*k).and_then(Value::as_f64))
        .map(|v| (factor * v) as usize)
}

#[cfg(test)]
mod tests {
    /// Expected values printed by 0.5.19's own `get_context_length` on the
    /// same keys (`types.SimpleNamespace(**config)`).
    #[test]
    fn context_len_is_sglangs_get_context_length() {
        use serde_json::json;
        let cases = [
            (
                json!({"architectures": ["Qwen2ForCausalLM"], "max_position_embeddings": 32768, "rope_scaling": null}),
                32768,
            ),
            (json!({"max_position_embeddings": 202752}), 202752),
            (
                json!({"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192}}),
                131072,
            ),
            (
                json!({"max_position_embeddings": 163840, "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}),
                163840,
            ),
            (
                json!({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}),
                8192,
            ),
            (
                json!({"seq_length": 32768, "max_position_embeddings": 2048}),
                32768,
            ),
            (
                json!({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {"max_position_embeddings": 131072}}),
                131072,
            ),
        ];
        for (config, want) in cases {
            assert_eq!(super::context_len_of(&config), Some(want), "{config}");
        }
        assert_eq!(
            super::context_len_of(&json!({"architectures": ["X"]})),
            None
        );
    }

    /// transformers reads the file with `open(f, encoding="utf-8").read()`:
    /// python3 -c 'open("c.jinja", "wb").write(b"{{ \x27a\x27 }}\r\n{{ \x27b\x27 }}\r\r\n");
    /// print(repr(open("c.jinja", encoding="utf-8").read()))' prints
    /// "{{ 'a' }}\n{{ 'b' }}\n\n".
    #[test]
    fn chat_template_jinja_is_read_with_universal_newlines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("chat_template.jinja"),
            b"{{ 'a' }}\r\n{{ 'b' }}\r\r\n",
        )
        .unwrap();
        let templates = super::CheckpointTemplates::load(dir.path()).unwrap();
        assert_eq!(templates.all(), [("default", "{{ 'a' }}\n{{ 'b' }}\n\n")]);
    }

    /// Each case's expectation is what transformers 5.19 (SGLang 0.5.23's)
    /// loads: `AutoTokenizer.from_pretrained(dir).chat_template` on a copy
    /// of a Qwen2.5 tokenizer directory (whose `tokenizer_config.json` has
    /// its own `chat_template`) with these files gave
    /// `{'default': 'DEFAULT', 'tool_use': 'TOOL\n'}`, `{'x': 'X', 'y': 'Y'}`,
    /// `{'only': 'ONLY'}` and `'D2'`.
    #[test]
    fn additional_chat_templates_replace_the_configs_as_transformers_loads_them() {
        use super::{CheckpointTemplates, ADDITIONAL_CHAT_TEMPLATES};
        let with = |files: &[(&str, &str)]| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("tokenizer_config.json"),
                r#"{"chat_template": "CONFIG"}"#,
            )
            .unwrap();
            std::fs::create_dir(dir.path().join(ADDITIONAL_CHAT_TEMPLATES)).unwrap();
            for (path, text) in files {
                std::fs::write(dir.path().join(path), text).unwrap();
            }
            let templates = CheckpointTemplates::load(dir.path()).unwrap();
            (dir, templates)
        };
        let (_d, t) = with(&[
            ("chat_template.jinja", "DEFAULT"),
            ("additional_chat_templates/tool_use.jinja", "TOOL\r\n"),
        ]);
        assert_eq!(
            t,
            CheckpointTemplates::Named(vec![
                ("default".into(), "DEFAULT".into()),
                ("tool_use".into(), "TOOL\n".into())
            ])
        );
        let (_d, t) = with(&[
            ("additional_chat_templates/y.jinja", "Y"),
            ("additional_chat_templates/x.jinja", "X"),
            ("additional_chat_templates/notes.txt", "not a template"),
        ]);
        assert_eq!(
            t,
            CheckpointTemplates::Unordered(vec![
                ("x".into(), "X".into()),
                ("y".into(), "Y".into())
            ])
        );
        let (_d, t) = with(&[("additional_chat_templates/only.jinja", "ONLY")]);
        assert_eq!(
            t,
            CheckpointTemplates::Named(vec![("only".into(), "ONLY".into())])
        );
        let (_d, t) = with(&[("additional_chat_templates/default.jinja", "D2")]);
        assert_eq!(t, CheckpointTemplates::One("D2".into()));
        // An empty folder changes nothing.
        let (_d, t) = with(&[]);
        assert_eq!(t, CheckpointTemplates::One("CONFIG".into()));
    }

    /// `TemplateManager._select_named_template`: the named one, else the
    /// first, which with `Unordered` templates is the directory's choice.
    #[test]
    fn sglang_picks_among_additional_templates_only_where_the_order_is_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let extra = dir.path().join(super::ADDITIONAL_CHAT_TEMPLATES);
        std::fs::create_dir(&extra).unwrap();
        std::fs::write(extra.join("x.jinja"), "X").unwrap();
        std::fs::write(extra.join("y.jinja"), "Y").unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        let files = super::ModelFiles::load(dir.path()).unwrap();
        let err = files.hf_template(false, None).unwrap_err();
        assert!(err.contains("hf_chat_template_name"), "{err}");
        assert_eq!(
            files.hf_template(false, Some("y")).unwrap().as_deref(),
            Some("Y")
        );
        assert!(files
            .hf_template(false, Some("z"))
            .unwrap_err()
            .contains("not found"));

        // With chat_template.jinja the tokenizer's first is `default`, but a
        // multimodal server's processor lists it last.
        std::fs::write(dir.path().join("chat_template.jinja"), "D").unwrap();
        let files = super::ModelFiles::load(dir.path()).unwrap();
        assert_eq!(
            files.hf_template(false, None).unwrap().as_deref(),
            Some("D")
        );
        assert!(files.hf_template(true, None).is_err());
        assert_eq!(
            files.hf_template(true, Some("x")).unwrap().as_deref(),
            Some("X")
        );
    }
}
