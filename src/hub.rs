//! Tokenizers from where users keep them: a local directory, or a Hugging Face
//! model id fetched once into the standard Hugging Face cache
//! (`$HF_HOME/hub/models--org--name/snapshots/<commit>/`), so a guard shares
//! the cache with `huggingface_hub` and runs offline once it has been filled.

use std::path::{Path, PathBuf};

/// Files a model directory may hold that change how prompts are counted.
/// `tokenizer_config.json` is required; the others are optional because
/// template-only repositories and models without a separate template exist.
/// `config.json` carries the architecture, which selects the chat encoder
/// (DeepSeek-V3.2/V4, GLM-5.3, harmony on gpt-oss) when the server does not
/// state it; `chat_template.json` is the processor's template, which a
/// multimodal server prefers. `additional_chat_templates/*.jinja` are
/// listed and fetched too (see [`download`]).
const REQUIRED: &[&str] = &["tokenizer_config.json"];
const OPTIONAL: &[&str] = &[
    "tokenizer.json",
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
    "config.json",
    // DeepSeek-V4 on SGLang 0.5.18-0.5.22: the effort profile is read from it.
    "encoding/encoding_dsv4.py",
];

#[derive(Debug, Clone)]
pub struct HubSettings {
    /// `HF_ENDPOINT`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub cache_dir: PathBuf,
    /// `HF_HUB_OFFLINE`: only the cache is read.
    pub offline: bool,
    /// `HF_TOKEN`, for gated models.
    pub token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{0}` is neither a local directory nor a Hugging Face model id (org/name)")]
    NotAModel(String),
    #[error("{repo}@{revision} is not in the cache at {cache} and HF_HUB_OFFLINE is set")]
    NotCached {
        repo: String,
        revision: String,
        cache: String,
    },
    #[error("downloading {url}: {message}")]
    Download { url: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl HubSettings {
    /// Reads the same variables `huggingface_hub` reads.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let home = get("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let base = get("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
                PathBuf::from(get("HOME").unwrap_or_else(|| "/".into())).join(".cache")
            });
            base.join("huggingface")
        });
        let truthy = |v: Option<String>| {
            v.is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            })
        };
        Self {
            endpoint: get("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .to_string(),
            cache_dir: get("HF_HUB_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("hub")),
            offline: truthy(get("HF_HUB_OFFLINE")),
            token: get("HF_TOKEN"),
        }
    }
}

/// A local directory as is; otherwise a model id resolved through the cache
/// and, unless offline, the Hub.
pub async fn resolve(
    spec: &str,
    revision: &str,
    settings: &HubSettings,
) -> Result<PathBuf, HubError> {
    let local = Path::new(spec);
    if local.is_dir() {
        return Ok(local.to_path_buf());
    }
    let repo = parse_repo_id(spec).ok_or_else(|| HubError::NotAModel(spec.to_string()))?;
    let repo_dir = settings
        .cache_dir
        .join(format!("models--{}", repo.replace('/', "--")));
    if let Some(dir) = cached_snapshot(&repo_dir, revision) {
        return Ok(dir);
    }
    if settings.offline {
        return Err(HubError::NotCached {
            repo: repo.to_string(),
            revision: revision.to_string(),
            cache: settings.cache_dir.display().to_string(),
        });
    }
    download(repo, revision, &repo_dir, settings).await
}

fn parse_repo_id(spec: &str) -> Option<&str> {
    let (org, name) = spec.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(org) && ok(name)).then_some(spec)
}

/// The snapshot a revision points at, if every required file is there.
fn cached_snapshot(repo_dir: &Path, revision: &str) -> Option<PathBuf> {
    let commit = if is_commit_hash(revision) {
        revision.to_string()
    } else {
        std::fs::read_to_string(repo_dir.join("refs").join(revision))
            .ok()?
            .trim()
            .to_string()
    };
    let dir = repo_dir.join("snapshots").join(commit);
    REQUIRED
        .iter()
        .all(|f| dir.join(f).is_file())
        .then_some(dir)
}

fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit())
}

async fn download(
    repo: &str,
    revision: &str,
    repo_dir: &Path,
    settings: &HubSettings,
) -> Result<PathBuf, HubError> {
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| HubError::Download {
            url: settings.endpoint.clone(),
            message: e.to_string(),
        })?;
    let get = |url: String| Fetch {
        client: &client,
        token: settings.token.as_deref(),
        url,
    };
    let mut files: Vec<(String, bytes::Bytes)> = Vec::new();
    let mut commit: Option<String> = None;
    for (name, required) in REQUIRED
        .iter()
        .map(|f| (*f, true))
        .chain(OPTIONAL.iter().map(|f| (*f, false)))
    {
        // Later files are fetched at the commit the first one resolved to, so a
        // push to the branch mid-download cannot mix two revisions.
        let rev = commit.as_deref().unwrap_or(revision);
        let fetch = get(format!(
            "{}/{}/resolve/{}/{}",
            settings.endpoint, repo, rev, name
        ));
        let Some((data, at)) = fetch.send(required).await? else {
            continue;
        };
        if commit.is_none() {
            commit = at;
        }
        files.push((name.to_string(), data));
    }
    // transformers lists `additional_chat_templates/` (`list_repo_templates`)
    // and loads each `*.jinja` in it as a named template, in place of the
    // config's: they change the prompt as much as `chat_template.jinja`.
    let rev = commit.as_deref().unwrap_or(revision).to_string();
    let listing = get(format!(
        "{}/api/models/{}/tree/{}/{}",
        settings.endpoint, repo, rev, ADDITIONAL_CHAT_TEMPLATES
    ));
    if let Some((data, _)) = listing.send(false).await? {
        for name in template_names(&data).map_err(|message| listing.error(message))? {
            let path = format!("{ADDITIONAL_CHAT_TEMPLATES}/{name}");
            let fetch = get(format!(
                "{}/{}/resolve/{}/{}",
                settings.endpoint, repo, rev, path
            ));
            let (data, _) = fetch
                .send(true)
                .await?
                .expect("a required file or an error");
            files.push((path, data));
        }
    }
    // Without a commit header, name the snapshot after the revision (as
    // huggingface_hub does for non-hash refs it cannot resolve).
    let commit = commit.unwrap_or_else(|| revision.to_string());
    let dir = repo_dir.join("snapshots").join(&commit);
    let io = |path: &Path, source| HubError::Io {
        path: path.display().to_string(),
        source,
    };
    for (name, data) in files {
        let target = dir.join(&name);
        let parent = target.parent().expect("a file in the snapshot");
        std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        // Write then rename, so a crash never leaves a truncated tokenizer in the cache.
        let file_name = target.file_name().expect("a file name").to_string_lossy();
        let tmp = parent.join(format!(".{file_name}.partial"));
        std::fs::write(&tmp, &data).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &target).map_err(|e| io(parent, e))?;
    }
    let refs = repo_dir.join("refs");
    std::fs::create_dir_all(&refs).map_err(|e| io(&refs, e))?;
    if !is_commit_hash(revision) {
        std::fs::write(refs.join(revision), &commit).map_err(|e| io(&refs, e))?;
    }
    Ok(dir)
}

/// transformers' `CHAT_TEMPLATE_DIR`.
const ADDITIONAL_CHAT_TEMPLATES: &str = "additional_chat_templates";

/// One GET to the Hub.
struct Fetch<'a> {
    client: &'a reqwest::Client,
    token: Option<&'a str>,
    url: String,
}

impl Fetch<'_> {
    fn error(&self, message: String) -> HubError {
        HubError::Download {
            url: self.url.clone(),
            message,
        }
    }

    /// The body and the commit the Hub resolved the revision to; `None` for
    /// a 404 of something optional.
    async fn send(
        &self,
        required: bool,
    ) -> Result<Option<(bytes::Bytes, Option<String>)>, HubError> {
        let mut req = self.client.get(&self.url);
        if let Some(token) = self.token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.map_err(|e| self.error(e.to_string()))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND && !required {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.error(format!("HTTP {}", resp.status())));
        }
        let commit = resp
            .headers()
            .get("x-repo-commit")
            .and_then(|v| v.to_str().ok())
            .filter(|c| is_commit_hash(c))
            .map(str::to_string);
        let body = resp.bytes().await.map_err(|e| self.error(e.to_string()))?;
        Ok(Some((body, commit)))
    }
}

/// The `*.jinja` files of a Hub tree listing of `additional_chat_templates/`
/// (`[{"type": "file", "path": "additional_chat_templates/x.jinja"}, ...]`).
/// A listing the guard cannot read, or a name that is not a plain file
/// name, fails the download: a template it skipped could be the one
/// SGLang renders with.
fn template_names(listing: &[u8]) -> Result<Vec<String>, String> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(listing)
        .map_err(|e| format!("the additional_chat_templates/ listing is not a JSON list: {e}"))?;
    let mut names = Vec::new();
    for entry in &entries {
        let path = entry["path"].as_str().unwrap_or_default();
        let Some(name) = path
            .strip_prefix(ADDITIONAL_CHAT_TEMPLATES)
            .and_then(|p| p.strip_prefix('/'))
        else {
            return Err(format!(
                "the additional_chat_templates/ listing names `{path}`"
            ));
        };
        if entry["type"] != "file" || !name.ends_with(".jinja") {
            continue;
        }
        let plain = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !name.starts_with('.');
        if !plain {
            return Err(format!(
                "additional_chat_templates/{name}: not a plain file name"
            ));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_huggingface_hub() {
        let s = HubSettings::from_lookup(|k| match k {
            "HF_HOME" => Some("/data/hf".into()),
            "HF_ENDPOINT" => Some("http://127.0.0.1:9/".into()),
            "HF_HUB_OFFLINE" => Some("1".into()),
            _ => None,
        });
        assert_eq!(s.cache_dir, PathBuf::from("/data/hf/hub"));
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert!(s.offline);
        let d = HubSettings::from_lookup(|k| (k == "HOME").then(|| "/home/u".into()));
        assert_eq!(d.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!d.offline);
    }

    #[test]
    fn repo_ids() {
        assert_eq!(parse_repo_id("zai-org/GLM-4.6"), Some("zai-org/GLM-4.6"));
        assert_eq!(parse_repo_id("a/../b"), None);
        assert_eq!(parse_repo_id("../x"), None);
        assert_eq!(parse_repo_id("noslash"), None);
    }
}
