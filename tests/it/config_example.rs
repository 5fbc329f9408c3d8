//! The commented example in config/ must stay a valid, complete configuration.

use prefill_guard::config::{Config, RawConfig};

#[test]
fn example_config_is_valid_and_sets_every_key() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/prefill-guard.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let raw = RawConfig::from_toml(&text).unwrap();
    assert!(raw.listen.is_some() && raw.admin_listen.is_some() && raw.upstream.is_some());
    assert!(raw.max_body_bytes.is_some());
    // Defaults that scale with the host are left to the host.
    assert!(raw.count_workers.is_none() && raw.count_queue.is_none() && raw.io_threads.is_none());
    assert!(
        raw.upstream_connect_timeout_ms.is_some() && raw.upstream_response_timeout_secs.is_some()
    );
    assert!(
        raw.log_format.is_some()
            && raw.shutdown_grace_secs.is_some()
            && raw.safety_margin_tokens.is_some()
    );
    assert!(raw.discovery_interval_ms.is_some() && raw.rewrite_models_max_len.is_some());
    // Every other key is at least shown commented out: `every_key_and_flag_is_documented`.
    let cfg = Config::load(Some(&path), RawConfig::default()).unwrap();
    assert_eq!(cfg.models.len(), 1);
    assert_eq!(cfg.models[0].max_req_input_len, Some(202_746));
}

/// Every server setting the guard reads is in the README's "Server
/// configuration" table, so operators see how each is handled.
#[test]
fn readme_lists_every_server_setting() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("## Server configuration")
        .expect("a Server configuration section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for s in prefill_guard::count::serving::SETTINGS {
        assert!(
            section.contains(&format!("`{}`", s.name())),
            "README's Server configuration does not list `{}`",
            s.name()
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
    assert_eq!(
        model.max_req_input_len,
        Some(202_746),
        "the file's limit is kept"
    );

    let mut overlay = RawConfig::default();
    overlay.model.max_req_input_len = Some(1000);
    let cfg = Config::load(Some(&path), overlay).unwrap();
    assert_eq!(cfg.models.len(), 1);
    assert_eq!(cfg.models[0].tokenizer, "/models/GLM-4.6");
    assert_eq!(cfg.models[0].max_req_input_len, Some(1000));
}

/// Every key the configuration file accepts (the fields serde reads,
/// written out by serde itself, so no hand-kept list can fall behind) is
/// in the example file and in the README; every `serve` flag is in the
/// README.
#[test]
fn every_key_and_flag_is_documented() {
    let all = serde_json::to_value(RawConfig::default()).unwrap();
    let keys: Vec<&str> = all
        .as_object()
        .expect("the configuration is a table")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(keys.len() > 30, "{keys:?}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(root.join("config/prefill-guard.toml")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut missing = Vec::new();
    for key in &keys {
        if !example.lines().any(|l| {
            let l = l.trim_start_matches(['#', ' ']);
            l.starts_with(&format!("{key} =")) || l.starts_with(&format!("[[{key}]]"))
        }) {
            missing.push(format!("config/prefill-guard.toml: {key}"));
        }
        if !readme.contains(&format!("`{key}`")) && !readme.contains(&format!("`[[{key}]]`")) {
            missing.push(format!("README.md: `{key}`"));
        }
    }
    use clap::CommandFactory;
    let cli = prefill_guard::cli::Cli::command();
    let serve = cli.find_subcommand("serve").expect("a serve command");
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version" | "config") {
            continue;
        }
        if !readme.contains(&format!("--{long}")) {
            missing.push(format!("README.md: --{long}"));
        }
        if arg.get_help().is_none() {
            missing.push(format!("serve --help: --{long} has no text"));
        }
    }
    assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
}

/// Checks that `key = literal` (a TOML value) resolves exactly as leaving
/// `key` out: the default an operator reads is the one `serve` applies.
struct Defaults {
    unset: String,
}

impl Defaults {
    const BASE: &str =
        "upstream = \"http://127.0.0.1:1\"\ntokenizer = \"/models/m\"\nmax_req_input_len = 100\n";

    fn new() -> Self {
        let unset = Self::resolved(Self::BASE);
        assert_eq!(
            unset,
            Self::resolved(Self::BASE),
            "resolving is deterministic"
        );
        Defaults { unset }
    }

    fn resolved(text: &str) -> String {
        let raw = RawConfig::from_toml(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        format!(
            "{:?}",
            Config::resolve(raw).unwrap_or_else(|e| panic!("{text}: {e}"))
        )
    }

    /// The stated default as a TOML value, if it is one ("5000", "32 MiB",
    /// "true", "main"); words that state no value ("required", "cores") are `None`.
    fn literal(stated: &str) -> Option<String> {
        let value = stated.trim().trim_matches('`').replace(" MiB", "MiB");
        if value.parse::<f64>().is_ok() || matches!(value.as_str(), "true" | "false" | "[]") {
            Some(value)
        } else if value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && !value.contains(' ')
            && !matches!(value.as_str(), "required" | "cores" | "none" | "off")
        {
            Some(format!("{value:?}"))
        } else {
            None
        }
    }

    fn check(&self, key: &str, literal: &str, source: &str) {
        let set = Self::resolved(&format!("{}{key} = {literal}\n", Self::BASE));
        assert_eq!(set, self.unset, "{source}: `{key}` defaults to {literal}");
    }
}

/// Every default `serve --help` states (from the doc comments in
/// `config/settings.rs`) is the one `Config::resolve` applies.
#[test]
fn help_defaults_are_the_defaults() {
    use clap::CommandFactory;
    let defaults = Defaults::new();
    let cli = prefill_guard::cli::Cli::command();
    let serve = cli.find_subcommand("serve").expect("a serve command");
    let mut checked = Vec::new();
    for arg in serve.get_arguments() {
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        // "(default 5000)", "(default 32MiB; units ...)", "(default 0: off; ...)";
        // "(default: the number of cores)" states no value.
        let Some(rest) = help.split("(default ").nth(1) else {
            continue;
        };
        let stated = rest.split([')', ';', ':']).next().unwrap_or_default();
        let Some(literal) = Defaults::literal(stated) else {
            continue;
        };
        let key = arg.get_id().as_str();
        defaults.check(key, &literal, "serve --help");
        checked.push(key.to_string());
    }
    // If these stopped stating a value, the test would pass without looking.
    for key in [
        "max_body_bytes",
        "upstream_connect_timeout_ms",
        "count_cache_bytes",
        "revision",
    ] {
        assert!(
            checked.iter().any(|c| c == key),
            "`{key}` states its default: {checked:?}"
        );
    }
}

/// The defaults the README's tables state are the ones `serve` applies.
#[test]
fn readme_defaults_are_the_defaults() {
    let readme = include_str!("../../README.md");
    let defaults = Defaults::new();
    let mut checked = Vec::new();
    // The rows of the tables headed "| key / flag | default" and "| key | default".
    let mut in_table = false;
    let rows = readme.lines().filter(|l| {
        if l.starts_with("| key / flag | default |") || l.starts_with("| key | default |") {
            in_table = true;
        } else if !l.starts_with('|') {
            in_table = false;
        }
        in_table && l.starts_with("| `")
    });
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        // A row of one key: "| `key` / `--flag` | default | ..." or "| `key` | default | ...".
        let key = cells[0]
            .trim_start_matches("| ")
            .split(" / ")
            .next()
            .unwrap_or_default();
        let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
            continue;
        };
        if key.contains(['`', ',', '[']) || cells.len() < 3 {
            continue;
        }
        // "32 MiB", "0 (off)", "`true`".
        let stated = cells[1].split(" (").next().unwrap_or_default();
        let Some(literal) = Defaults::literal(stated) else {
            continue;
        };
        defaults.check(key, &literal, "README");
        checked.push(key);
    }
    for key in [
        "listen",
        "max_body_bytes",
        "revision",
        "readiness",
        "body_idle_timeout_ms",
        "allow_routes",
    ] {
        assert!(
            checked.contains(&key),
            "the README's default of `{key}` is checked: {checked:?}"
        );
    }
}
