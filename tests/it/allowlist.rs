//! `allow_routes` / `--allow-route`: a deliberately opened path passes
//! uninspected; a prompt route can never be opened.

use crate::common;

use clap::Parser;
use serde_json::json;

use common::{start, words, Options};
use prefill_guard::cli::{Cli, Command};
use prefill_guard::config::{Config, RawConfig};

fn resolve(allow: &str) -> Result<Config, String> {
    let text = format!(
        "upstream = \"http://127.0.0.1:1\"\ntokenizer = \"t\"\nmax_req_input_len = 8\nallow_routes = {allow}\n"
    );
    Config::resolve(RawConfig::from_toml(&text).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

#[test]
fn startup_refuses_prompt_routes_and_non_canonical_paths() {
    let cfg = resolve(r#"["/get_model_info", "/metrics"]"#).unwrap();
    assert!(cfg.allow_routes.allows("/get_model_info"));
    assert!(resolve("[]").unwrap().allow_routes.is_empty());
    for bad in [
        "/v1/chat/completions",
        "/generate",
        "/v1/embeddings",
        "/vertex_generate",
        "/v1/responses",
        "/v1/messages",
        "/invocations",
        "/api/chat",
        "/api/generate",
        "/open_session",
        "/v1/chat%2Fcompletions",
        "/get_model_info/",
        "/x?y",
        "get_model_info",
    ] {
        let e = resolve(&format!("[{bad:?}]")).unwrap_err();
        assert!(e.contains("allow_routes"), "{bad}: {e}");
    }
}

#[test]
fn the_flag_repeats_and_overrides_the_file() {
    let cli = Cli::try_parse_from([
        "prefill-guard",
        "serve",
        "--upstream",
        "http://127.0.0.1:1",
        "--tokenizer",
        "t",
        "--max-req-input-len",
        "8",
        "--allow-route",
        "/get_model_info",
        "--allow-route",
        "/metrics",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("serve")
    };
    let file = RawConfig::from_toml("allow_routes = [\"/flush_cache\"]\n").unwrap();
    let cfg = Config::resolve(file.merge(args.overlay())).unwrap();
    let paths: Vec<&str> = cfg.allow_routes.paths().collect();
    assert_eq!(paths, ["/get_model_info", "/metrics"]);

    let refused = Cli::try_parse_from([
        "prefill-guard",
        "serve",
        "--upstream",
        "http://127.0.0.1:1",
        "--tokenizer",
        "t",
        "--max-req-input-len",
        "8",
        "--allow-route",
        "/generate",
    ])
    .unwrap();
    let Command::Serve(args) = refused.command else {
        panic!("serve")
    };
    assert!(args.load_config().is_err());
}

#[tokio::test]
async fn an_allowlisted_path_passes_uninspected_and_nothing_else_opens() {
    let g = start(Options {
        allow_routes: vec!["/get_model_info"],
        ..Options::default()
    })
    .await;
    // Any method, any body, canonical spellings, the query kept.
    let got = g
        .send(g.http.get(g.url("/get_model_info/?verbose=1")))
        .await;
    assert_eq!(got.status, 200);
    let long = json!({"text": words(40)}).to_string();
    let got = g
        .send(
            g.http
                .post(g.url("/get%5Fmodel%5Finfo"))
                .header("content-type", "text/plain")
                .body(long.clone()),
        )
        .await;
    assert_eq!(got.status, 200);
    let seen = g.mock.state.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].target, "/get_model_info?verbose=1");
    assert_eq!(seen[1].target, "/get_model_info");
    assert_eq!(seen[1].body, long.as_bytes(), "forwarded as it came");
    // Other admin routes and the prompt routes are as before.
    assert_eq!(g.post("/get_server_info", &json!({})).await.status, 404);
    assert_eq!(
        g.post("/generate", &json!({"text": words(40)}))
            .await
            .status,
        400
    );
    assert_eq!(g.mock.state.count(), 2);
}
