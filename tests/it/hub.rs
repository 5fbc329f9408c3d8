//! The Hugging Face download path, against a local mock Hub endpoint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use prefill_guard::hub::{resolve, HubError, HubSettings};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Default)]
struct Hub {
    files: HashMap<String, Vec<u8>>,
    seen: Mutex<Vec<(String, Option<String>)>>,
}

async fn serve_file(
    State(hub): State<Arc<Hub>>,
    Path((org, name, rev, file)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    hub.seen
        .lock()
        .unwrap()
        .push((format!("{org}/{name}@{rev}/{file}"), auth));
    match hub.files.get(&format!("{org}/{name}/{file}")) {
        Some(data) if rev == "main" || rev == COMMIT => {
            (StatusCode::OK, [("x-repo-commit", COMMIT)], data.clone()).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The Hub's tree listing (`list_repo_tree`) of a folder: every stored
/// file under it, as the Hub lists them; 404 for a folder with none.
async fn serve_tree(
    State(hub): State<Arc<Hub>>,
    Path((org, name, rev, folder)): Path<(String, String, String, String)>,
) -> impl IntoResponse {
    hub.seen
        .lock()
        .unwrap()
        .push((format!("tree {org}/{name}@{rev}/{folder}"), None));
    let prefix = format!("{org}/{name}/{folder}/");
    let entries: Vec<serde_json::Value> = hub
        .files
        .keys()
        .filter_map(|k| {
            k.strip_prefix(&format!("{org}/{name}/"))
                .filter(|_| k.starts_with(&prefix))
        })
        .map(|path| serde_json::json!({"type": "file", "oid": "0", "size": 1, "path": path}))
        .collect();
    if entries.is_empty() || rev != COMMIT {
        return StatusCode::NOT_FOUND.into_response();
    }
    axum::Json(entries).into_response()
}

async fn start(hub: Arc<Hub>) -> String {
    let app = axum::Router::new()
        .route("/{org}/{name}/resolve/{rev}/{*file}", get(serve_file))
        .route(
            "/api/models/{org}/{name}/tree/{rev}/{*folder}",
            get(serve_tree),
        )
        .with_state(hub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn settings(endpoint: &str, cache: &std::path::Path, offline: bool) -> HubSettings {
    HubSettings {
        endpoint: endpoint.into(),
        cache_dir: cache.into(),
        offline,
        token: Some("hf_test".into()),
    }
}

#[tokio::test]
async fn downloads_into_the_hf_cache_then_works_offline() {
    let demo = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(demo.path()).unwrap();
    let mut hub = Hub::default();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        hub.files.insert(
            format!("acme/tiny/{f}"),
            std::fs::read(demo.path().join(f)).unwrap(),
        );
    }
    // The architecture, which selects the chat encoder.
    let config = br#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}"#;
    hub.files
        .insert("acme/tiny/config.json".into(), config.to_vec());
    let hub = Arc::new(hub);
    let endpoint = start(hub.clone()).await;
    let cache = tempfile::tempdir().unwrap();

    let dir = resolve(
        "acme/tiny",
        "main",
        &settings(&endpoint, cache.path(), false),
    )
    .await
    .unwrap();
    assert_eq!(
        dir,
        cache
            .path()
            .join("models--acme--tiny/snapshots")
            .join(COMMIT)
    );
    assert_eq!(
        std::fs::read(dir.join("tokenizer.json")).unwrap(),
        std::fs::read(demo.path().join("tokenizer.json")).unwrap()
    );
    assert!(
        !dir.join("chat_template.jinja").exists(),
        "an optional 404 is skipped"
    );
    assert_eq!(
        std::fs::read(dir.join("config.json")).unwrap(),
        config,
        "config.json is fetched"
    );
    assert_eq!(
        std::fs::read_to_string(cache.path().join("models--acme--tiny/refs/main")).unwrap(),
        COMMIT
    );
    {
        let seen = hub.seen.lock().unwrap();
        assert_eq!(
            seen[0],
            (
                "acme/tiny@main/tokenizer_config.json".to_string(),
                Some("Bearer hf_test".into())
            )
        );
        assert!(
            seen[1..].iter().all(|(p, _)| p.contains(COMMIT)),
            "later files pinned to the commit: {seen:?}"
        );
    }

    // Offline: served from the cache without a request.
    let before = hub.seen.lock().unwrap().len();
    let again = resolve(
        "acme/tiny",
        "main",
        &settings("http://127.0.0.1:9", cache.path(), true),
    )
    .await
    .unwrap();
    assert_eq!(again, dir);
    assert_eq!(hub.seen.lock().unwrap().len(), before);

    // The loaded model counts like the original directory.
    let counter = prefill_guard::count::ModelCounter::load(&again).unwrap();
    assert!(counter.can_count());
}

#[tokio::test]
async fn offline_without_cache_and_missing_models_fail_clearly() {
    let cache = tempfile::tempdir().unwrap();
    let err = resolve(
        "acme/absent",
        "main",
        &settings("http://127.0.0.1:9", cache.path(), true),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    assert!(err.to_string().contains("HF_HUB_OFFLINE"));

    let endpoint = start(Arc::new(Hub::default())).await;
    let err = resolve(
        "acme/absent",
        "main",
        &settings(&endpoint, cache.path(), false),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");

    let err = resolve(
        "not a model",
        "main",
        &settings(&endpoint, cache.path(), false),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, HubError::NotAModel(_)));
}

/// transformers lists `additional_chat_templates/` on the Hub and loads its
/// files as named templates in place of the config's; the guard fetches
/// them with the rest, so a Hub model counts with the templates SGLang has.
#[tokio::test]
async fn additional_chat_templates_are_fetched_with_the_model() {
    let demo = tempfile::tempdir().unwrap();
    prefill_guard::demo::write_demo_model(demo.path()).unwrap();
    let mut hub = Hub::default();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        hub.files.insert(
            format!("acme/named/{f}"),
            std::fs::read(demo.path().join(f)).unwrap(),
        );
    }
    hub.files
        .insert("acme/named/chat_template.jinja".into(), b"DEFAULT".to_vec());
    hub.files.insert(
        "acme/named/additional_chat_templates/tool_use.jinja".into(),
        b"TOOLS\r\n".to_vec(),
    );
    hub.files.insert(
        "acme/named/additional_chat_templates/README.md".into(),
        b"not a template".to_vec(),
    );
    let hub = Arc::new(hub);
    let endpoint = start(hub.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let dir = resolve(
        "acme/named",
        "main",
        &settings(&endpoint, cache.path(), false),
    )
    .await
    .unwrap();
    let extra = dir.join("additional_chat_templates");
    assert_eq!(
        std::fs::read(extra.join("tool_use.jinja")).unwrap(),
        b"TOOLS\r\n"
    );
    assert!(
        !extra.join("README.md").exists(),
        "only templates are fetched"
    );
    let seen: Vec<String> = hub
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert!(
        seen.contains(&format!(
            "tree acme/named@{COMMIT}/additional_chat_templates"
        )),
        "listed at the resolved commit: {seen:?}"
    );
    let templates = prefill_guard::count::model::CheckpointTemplates::load(&dir).unwrap();
    assert_eq!(
        templates.all(),
        [("default", "DEFAULT"), ("tool_use", "TOOLS\n")]
    );
}
