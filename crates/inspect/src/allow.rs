//! The operator's allowlist: exact canonical paths passed to SGLang
//! uninspected (`allow_routes`, `--allow-route`).
//!
//! Opening a route is a deliberate decision to forward its bodies uncounted,
//! so the list is checked hard at startup: each entry must be written in
//! canonical form (the form the guard matches on), and no entry may name a
//! route that carries a prompt, whether the guard counts it or SGLang merely
//! serves it: allowlisting one would reopen the leak the guard exists to close.

use std::collections::BTreeSet;

use http::Uri;

use super::path::canonical_path;
use super::Route;

/// SGLang routes (0.5.23 and its routers) whose bodies reach the prefill
/// scheduler as prompt tokens, or build server-side state that does. Never
/// allowlisted, even while the guard does not model them.
const PROMPT_ROUTES: &[&str] = &[
    "/generate",
    "/encode",
    "/classify",
    "/invocations",
    "/vertex_generate",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/embeddings",
    "/v1/classify",
    "/v1/rerank",
    "/rerank",
    "/v1/score",
    "/v1/decisions",
    "/v1/systemone",
    "/v1/interactions",
    "/v1/conversations",
    "/v1/audio/transcriptions",
    "/v1/realtime",
    "/api/chat",
    "/api/generate",
    "/open_session",
    "/close_session",
];

/// SGLang's admin routes (0.5.x `http_server.py`), never allowlisted: each
/// acts on other clients' requests or on the server itself. `/abort_request`
/// aborts every request whose id starts with the given one, so on prefill
/// alone it hands decode a stub (the leak) and on both it is a cross-tenant
/// denial of service; the rest reload weights, flush caches, pause the
/// scheduler or change its state.
const ADMIN_ROUTES: &[&str] = &[
    "/abort_request",
    "/flush_cache",
    "/set_internal_state",
    "/pause_generation",
    "/continue_generation",
    "/slow_down",
    "/configure_logging",
    "/start_profile",
    "/stop_profile",
    "/set_trace_level",
    "/freeze_gc",
    "/dumper",
    "/start_expert_distribution_record",
    "/stop_expert_distribution_record",
    "/dump_expert_distribution_record",
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/update_weights_from_distributed",
    "/update_weights_from_ipc",
    "/update_weight_version",
    "/init_weights_update_group",
    "/destroy_weights_update_group",
    "/init_weights_send_group_for_remote_instance",
    "/send_weights_to_remote_instance",
    "/get_weights_by_name",
    "/weights_checker",
    "/release_memory_occupation",
    "/resume_memory_occupation",
    "/load_lora_adapter",
    "/load_lora_adapter_from_tensors",
    "/unload_lora_adapter",
    "/add_external_corpus",
    "/remove_external_corpus",
    "/clear_hicache_storage_backend",
    "/hicache",
];

/// Paths passed through uninspected, by exact canonical path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(BTreeSet<String>);

impl AllowList {
    /// Validates every entry; the error names the first bad one and why.
    pub fn new<S: AsRef<str>>(paths: &[S]) -> Result<Self, String> {
        let mut set = BTreeSet::new();
        for p in paths {
            let p = p.as_ref();
            check(p)?;
            set.insert(p.to_string());
        }
        Ok(Self(set))
    }

    /// Whether the canonical path `path` is allowlisted.
    pub fn allows(&self, path: &str) -> bool {
        self.0.contains(path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

fn check(p: &str) -> Result<(), String> {
    let uri: Uri = p
        .parse()
        .map_err(|e| format!("allow_routes: `{p}` is not a path: {e}"))?;
    let canonical = canonical_path(&uri)
        .map_err(|e| format!("allow_routes: `{p}` is not a canonical path: {e}"))?;
    if canonical != p || uri.query().is_some() {
        return Err(format!(
            "allow_routes: `{p}` must be written as its canonical path `{canonical}` \
             (decoded, no trailing slash, no query)"
        ));
    }
    if Route::from_path(p).is_some() {
        return Err(format!(
            "allow_routes: `{p}` is a prompt route the guard inspects; allowlisting it would \
             forward prompts uncounted"
        ));
    }
    if let Some(route) = ADMIN_ROUTES
        .iter()
        .find(|r| p == **r || p.starts_with(&format!("{r}/")))
    {
        return Err(format!(
            "allow_routes: `{p}` is an SGLang admin route (`{route}`): it acts on other clients' \
             requests or on the server, and is never forwarded"
        ));
    }
    if let Some(route) = PROMPT_ROUTES
        .iter()
        .find(|r| p == **r || p.starts_with(&format!("{r}/")))
    {
        return Err(format!(
            "allow_routes: `{p}` carries prompts into SGLang (`{route}`); it cannot be allowlisted"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_canonical_non_prompt_paths() {
        let a = AllowList::new(&["/get_model_info", "/metrics"]).unwrap();
        assert!(a.allows("/metrics"));
        assert!(!a.allows("/metrics/"));
        assert!(!a.allows("/server_info"));
        assert!(AllowList::new::<&str>(&[]).unwrap().is_empty());
    }

    #[test]
    fn refuses_prompt_routes_and_non_canonical_spellings() {
        for bad in [
            "/v1/chat/completions",
            "/generate",
            "/vertex_generate",
            "/v1/responses",
            "/v1/responses/abc",
            "/v1/messages",
            "/api/chat",
            "/open_session",
            "/abort_request",
            "/update_weights_from_disk",
            "/hicache/storage-backend",
            "/v1/chat/completions/",
            "/v1/chat%2Fcompletions",
            "/x?y=1",
            "//x",
            "/a/../generate",
            "x",
            "",
            "http://h/x",
        ] {
            assert!(AllowList::new(&[bad]).is_err(), "{bad:?}");
        }
        // Routes the guard inspects are refused by the route table itself.
        for r in ["/v1/embeddings", "/v1/score", "/encode"] {
            let e = AllowList::new(&[r]).unwrap_err();
            assert!(
                e.contains("inspects") || e.contains("carries prompts"),
                "{e}"
            );
        }
    }
}
