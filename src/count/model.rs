//! A model directory, loaded once: the tokenizer, its configuration, the
//! checkpoint's chat templates and `config.json`. Everything that depends
//! on how the server runs is built on top of it per serving profile
//! ([`super::ModelCounter::for_server`]), so a profile change never reloads
//! a tokenizer.

use std::path::Path;

use serde_json::Value;

use super::serving::Arch;
use super::tokenizer::{read_json, TextTokenizer, TokenizerClass, TokenizerConfig};
use super::LoadError;

/// The chat templates a checkpoint ships, as transformers reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum CheckpointTemplates {
    #[default]
    None,
    /// `chat_template.jinja`, or a string `chat_template` in `tokenizer_config.json`.
    One(String),
    /// A list (or dict) of named templates in `tokenizer_config.json`, in order.
    Named(Vec<(String, String)>),
}

pub struct ModelFiles {
    pub(super) tokenizer: Option<TextTokenizer>,
    pub(super) config: TokenizerConfig,
    /// transformers 5.19's `special_tokens_map`, spread into the template variables.
    pub(super) special_tokens: Vec<(String, String)>,
    pub(super) templates: CheckpointTemplates,
    /// The processor's template (`chat_template.json`), preferred by SGLang
    /// when the server is multimodal.
    pub(super) processor_template: Option<String>,
    /// `config.json`'s `architectures` and `model_type` (`None`: no `config.json`).
    pub(super) arch: Option<Arch>,
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
        let tokenizer = TextTokenizer::load(dir)?;
        let special_tokens = match &tokenizer {
            Some(t) => t.special_tokens().to_vec(),
            None => config.special_tokens_map(
                TokenizerClass::from_declared(config.declared_class())
                    .unwrap_or(TokenizerClass::Backend),
            ),
        };
        let templates = checkpoint_templates(dir, &config)?;
        let processor_template = match read_json(&dir.join("chat_template.json"))? {
            Some(v) => v["chat_template"].as_str().map(str::to_owned),
            None => None,
        };
        let arch = read_json(&dir.join("config.json"))?.map(|c| Arch::from_config(&c));
        Ok(Self {
            tokenizer,
            config,
            special_tokens,
            templates,
            processor_template,
            arch,
        })
    }

    pub fn tokenizer(&self) -> Option<&TextTokenizer> {
        self.tokenizer.as_ref()
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
            Self::Named(list) => list.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect(),
        }
    }
}

/// transformers reads `chat_template.jinja` (in text mode: universal
/// newlines) in preference to `tokenizer_config.json`'s `chat_template`; a
/// list of named templates becomes a dict
/// (`TemplateManager._select_named_template` then picks).
fn checkpoint_templates(
    dir: &Path,
    config: &TokenizerConfig,
) -> Result<CheckpointTemplates, LoadError> {
    let path = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&path) {
        Ok(s) => return Ok(CheckpointTemplates::One(super::py::universal_newlines(s))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(LoadError::Io {
                path: path.display().to_string(),
                source: e,
            })
        }
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

#[cfg(test)]
mod tests {
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
}
