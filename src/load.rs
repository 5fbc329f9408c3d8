//! Loading a model for the offline commands and reloads: its files from a
//! directory or the Hugging Face Hub, and the counter for a server's
//! settings (the flags', checked against the server's own answer).

use std::sync::Arc;

use crate::config::{RawModel, ServerSettings};
use crate::count::serving::Observed;
use crate::count::{ModelCounter, ModelFiles};
use crate::hub::{self, HubSettings};
use crate::policy::NotServed;

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
    flags: &ServerSettings,
    live: Option<(String, Observed)>,
) -> anyhow::Result<Result<Arc<ModelCounter>, NotServed>> {
    let files = load_files(tokenizer, revision).await?;
    let configured = RawModel {
        revision: (revision != "main").then(|| revision.to_string()),
        server: flags.clone(),
        ..RawModel::default()
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
