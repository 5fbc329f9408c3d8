//! The commented example in config/ must stay a valid, complete configuration.

use prefill_guard::config::{Config, RawConfig};

#[test]
fn example_config_is_valid_and_sets_every_key() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prefill-guard.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let raw = RawConfig::from_toml(&text).unwrap();
    assert!(raw.listen.is_some() && raw.admin_listen.is_some() && raw.upstream.is_some());
    assert!(
        raw.max_body_bytes.is_some() && raw.count_workers.is_some() && raw.count_queue.is_some()
    );
    assert!(
        raw.upstream_connect_timeout_ms.is_some() && raw.upstream_response_timeout_secs.is_some()
    );
    assert!(
        raw.log_format.is_some()
            && raw.shutdown_grace_secs.is_some()
            && raw.safety_margin_tokens.is_some()
    );
    assert!(raw.discovery_interval_ms.is_some() && raw.rewrite_models_max_len.is_some());
    // Commented-out alternatives are documented too.
    for key in [
        "prefill_urls",
        "prefill_pool_tokens",
        "context_length",
        "revision",
        "safety_margin_tokens",
        "multimodal_image_tokens",
        "multimodal_video_tokens",
        "multimodal_audio_tokens",
        "authz_listen",
        "authz_path_prefix",
        "authz_style",
        "verify_sample_rate",
        "default_chat_template_kwargs",
        "tool_call_parser",
        "reasoning_parser",
        "chat_template",
        "hf_chat_template_name",
        "completion_template",
        "trust_request_chat_template",
        "tokenizer_path",
        "sglang_env",
    ] {
        assert!(text.contains(key), "config example does not mention {key}");
    }
    let cfg = Config::load(Some(&path), RawConfig::default()).unwrap();
    assert_eq!(cfg.models.len(), 1);
    assert_eq!(cfg.models[0].max_req_input_len, Some(681_274));
}

/// Every server setting the guard reads is in the README's "Server
/// configuration" table, so operators see how each is handled.
#[test]
fn readme_lists_every_server_setting() {
    let readme = include_str!("../README.md");
    let start = readme
        .find("## Server configuration")
        .expect("a Server configuration section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for s in prefill_guard::count::serving::SETTINGS {
        assert!(
            section.contains(&format!("`{}`", s.name)),
            "README's Server configuration does not list `{}`",
            s.name
        );
    }
}

/// A flag overrides one key of the file's model, never the whole table:
/// `serve --config config/prefill-guard.toml --tokenizer DIR` keeps the
/// file's name, limit and settings and counts with DIR.
#[test]
fn a_model_flag_overrides_one_key_of_the_files_model() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prefill-guard.toml");
    let mut overlay = RawConfig::default();
    overlay.model.tokenizer = Some("/elsewhere/glm".into());
    let cfg = Config::load(Some(&path), overlay).unwrap();
    assert_eq!(cfg.models.len(), 1);
    let model = &cfg.models[0];
    assert_eq!(model.tokenizer, "/elsewhere/glm");
    assert_eq!(model.name, "GLM-4.6", "the file's name is kept");
    assert_eq!(model.max_req_input_len, Some(681_274), "the file's limit is kept");

    let mut overlay = RawConfig::default();
    overlay.model.max_req_input_len = Some(1000);
    let cfg = Config::load(Some(&path), overlay).unwrap();
    assert_eq!(cfg.models.len(), 1);
    assert_eq!(cfg.models[0].tokenizer, "/models/GLM-4.6");
    assert_eq!(cfg.models[0].max_req_input_len, Some(1000));
}
