//! Loading a model for the offline commands and reloads: its files from a
//! directory or the Hugging Face Hub, and the counter for a server's
//! settings (the flags', checked against the server's own answer).

use std::sync::Arc;

use clap::Args;
use serde_json::Value;

use crate::config::trimmed;
use crate::config::RawModel;
use crate::count::serving::Observed;
use crate::count::{ModelCounter, ModelFiles};
use crate::hub::{self, HubSettings};
use crate::policy::NotServed;

/// The prefill server's own settings that change prompt ids, under SGLang's
/// flag names (README "Server configuration"). With discovery they must
/// agree with what the workers report; without it they are the truth.
#[derive(Debug, Args, Default, Clone)]
pub struct ServerFlags {
    /// SGLang's --default-chat-template-kwargs (a JSON object).
    #[arg(
        long,
        env = "PREFILL_GUARD_DEFAULT_CHAT_TEMPLATE_KWARGS",
        value_name = "JSON"
    )]
    pub default_chat_template_kwargs: Option<String>,
    /// SGLang's --tool-call-parser.
    #[arg(long, env = "PREFILL_GUARD_TOOL_CALL_PARSER")]
    pub tool_call_parser: Option<String>,
    /// SGLang's --reasoning-parser.
    #[arg(long, env = "PREFILL_GUARD_REASONING_PARSER")]
    pub reasoning_parser: Option<String>,
    /// SGLang's --chat-template: a built-in name, or a .jinja file the guard reads at the same path.
    #[arg(long, env = "PREFILL_GUARD_CHAT_TEMPLATE")]
    pub chat_template: Option<String>,
    /// SGLang's --hf-chat-template-name.
    #[arg(long, env = "PREFILL_GUARD_HF_CHAT_TEMPLATE_NAME")]
    pub hf_chat_template_name: Option<String>,
    /// SGLang's --completion-template.
    #[arg(long, env = "PREFILL_GUARD_COMPLETION_TEMPLATE")]
    pub completion_template: Option<String>,
    /// SGLang's --trust-request-chat-template.
    #[arg(
        long,
        env = "PREFILL_GUARD_TRUST_REQUEST_CHAT_TEMPLATE",
        value_name = "BOOL",
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub trust_request_chat_template: Option<bool>,
    /// SGLang's --tokenizer-path, stated when the guard's tokenizer is that tokenizer.
    #[arg(long, env = "PREFILL_GUARD_TOKENIZER_PATH")]
    pub tokenizer_path: Option<String>,
    /// The prefill server's SGLang version (its /server_info `version`, e.g. 0.5.19): tools are
    /// dumped differently before 0.5.23. Unset without discovery: counted both ways, the larger wins.
    #[arg(long, env = "PREFILL_GUARD_SGLANG_VERSION", value_name = "VERSION")]
    pub sglang_version: Option<String>,
    /// An environment value of the SGLang server that changes prompt ids, NAME=VALUE
    /// (repeat it; the variable takes a comma-separated list).
    #[arg(
        long = "sglang-env",
        env = "PREFILL_GUARD_SGLANG_ENV",
        value_delimiter = ',',
        value_parser = trimmed,
        value_name = "NAME=VALUE"
    )]
    pub sglang_env: Vec<String>,
}

impl ServerFlags {
    /// The model overlay these flags make (the other fields unset).
    pub fn raw(&self) -> RawModel {
        RawModel {
            default_chat_template_kwargs: self
                .default_chat_template_kwargs
                .clone()
                .map(Value::String),
            tool_call_parser: self.tool_call_parser.clone(),
            reasoning_parser: self.reasoning_parser.clone(),
            chat_template: self.chat_template.clone(),
            hf_chat_template_name: self.hf_chat_template_name.clone(),
            completion_template: self.completion_template.clone(),
            trust_request_chat_template: self.trust_request_chat_template,
            tokenizer_path: self.tokenizer_path.clone(),
            sglang_version: self.sglang_version.clone(),
            sglang_env: (!self.sglang_env.is_empty()).then(|| {
                self.sglang_env
                    .iter()
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                        None => (kv.trim().to_string(), String::new()),
                    })
                    .collect()
            }),
            ..RawModel::default()
        }
    }
}

/// A server's settings, read from its `/server_info` and `/model_info`.
pub async fn read_server_settings(url: &str) -> anyhow::Result<(String, Observed)> {
    let api = crate::sglang::Api::new(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_secs(10),
    );
    let info = api.server_info(url).await?;
    let model_info = match api.model_info(url).await {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    Ok((
        url.to_string(),
        Observed::from_server(&info, model_info.as_ref()),
    ))
}

/// The counter the offline commands (`count`, `verify`) use: the model's
/// files under the settings `flags` state, and, given a server's own
/// settings, checked against them exactly as discovery checks a worker.
pub async fn counter_for_server(
    tokenizer: &str,
    revision: &str,
    flags: &ServerFlags,
    live: Option<(String, Observed)>,
) -> anyhow::Result<Result<Arc<ModelCounter>, NotServed>> {
    let files = load_files(tokenizer, revision).await?;
    let configured = RawModel {
        revision: (revision != "main").then(|| revision.to_string()),
        ..flags.raw()
    }
    .static_server()
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let settings = match &live {
        Some((source, observed)) => {
            match crate::policy::profile::settings_from_workers(
                &configured,
                &[(source.as_str(), observed)],
            ) {
                Ok(s) => s,
                Err(why) => return Ok(Err(why)),
            }
        }
        None => configured.observed.clone(),
    };
    Ok(crate::policy::profile::build_counter(
        &files,
        Default::default(),
        &settings,
        &configured.env,
    ))
}

/// Loads a model's files by directory or Hub id.
pub async fn load_files(spec: &str, revision: &str) -> anyhow::Result<Arc<ModelFiles>> {
    let dir = hub::resolve(spec, revision, &HubSettings::from_env()).await?;
    // Reading and compiling a tokenizer takes up to a second: not on the
    // runtime, whose one thread may be serving traffic (a reload).
    Ok(Arc::new(
        tokio::task::spawn_blocking(move || ModelFiles::load(&dir)).await??,
    ))
}

/// Loads a model by directory or Hub id, counted as under SGLang's default flags.
pub async fn load_model(spec: &str, revision: &str) -> anyhow::Result<ModelCounter> {
    let dir = hub::resolve(spec, revision, &HubSettings::from_env()).await?;
    Ok(tokio::task::spawn_blocking(move || ModelCounter::load(&dir)).await??)
}
