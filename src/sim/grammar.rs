//! The second way the simulated prefill stubs a request: a grammar it cannot
//! compile (`shared/docs/pd-abort-paths.md` row G1, §0 item 2).
//!
//! SGLang's scheduler hands every request that carries a grammar to its
//! grammar manager. A server launched with `--grammar-backend none` (or
//! `--skip-tokenizer-init`) has no backend, and the manager calls
//! `set_finish_with_abort`: the same one-token stub as an over-long prompt,
//! kept in the PD handoff with its real bootstrap room. A decode worker that
//! has a backend builds the full request, reserves pages for the whole
//! prompt and generates over whatever they hold.
//!
//! Which requests carry a grammar is decided where SGLang 0.5.19 decides it
//! (`constrained/grammar_manager.py` `process_req_with_grammar`, fed by
//! `entrypoints/openai/protocol.py` `to_sampling_params` and
//! `serving_chat.py` `_process_messages`): a sampling parameter
//! `json_schema`, `regex`, `ebnf` or `structural_tag` that is not null.

use clap::ValueEnum;
use serde_json::Value;

use crate::inspect::Route;

/// `--grammar-backend` of a simulated worker. The decode worker always has
/// xgrammar; the prefill worker's is `pd-sim --prefill-grammar-backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GrammarBackend {
    /// SGLang's default: constrained requests are served (the simulator
    /// does not enforce the grammar; it generates as it always does).
    Xgrammar,
    /// `--grammar-backend none`: every request carrying a grammar is
    /// stubbed (≤ 0.5.19, a one-token handoff) or refused (≥ 0.5.20).
    #[value(name = "none")]
    Disabled,
}

impl GrammarBackend {
    /// As `/server_info` reports it (`grammar_backend`).
    pub fn name(self) -> &'static str {
        match self {
            GrammarBackend::Xgrammar => "xgrammar",
            GrammarBackend::Disabled => "none",
        }
    }
}

/// SGLang's abort message for a grammar on a server without a backend
/// (`grammar_manager.py`, `process_req_with_grammar`).
pub const NO_BACKEND: &str = "Grammar-based generation (json_schema, regex, ebnf, structural_tag) \
     is not supported when the server is launched with --grammar-backend none";

/// The sampling parameters that make the scheduler compile a grammar.
const GRAMMAR_KEYS: [&str; 4] = ["json_schema", "regex", "ebnf", "structural_tag"];

/// For each of the request's `sequences`, whether it reaches the scheduler
/// carrying a grammar.
///
/// * `/generate`: `sampling_params` (one object for every sequence, or a
///   list with one per sequence) has a non-null `json_schema`, `regex`,
///   `ebnf` or `structural_tag`.
/// * `/v1/completions`: the top-level `json_schema`, `regex` or `ebnf`
///   extras, or a `response_format` that compiles one (below). One set of
///   parameters for every prompt of a batch.
/// * `/v1/chat/completions`: the `regex` or `ebnf` extras, a
///   `response_format`, or a tool call constraint (below).
pub fn grammar_bearing(route: Route, body: &Value, sequences: usize) -> Vec<bool> {
    match route {
        Route::Generate => match &body["sampling_params"] {
            Value::Array(items) => (0..sequences)
                .map(|i| items.get(i).is_some_and(has_grammar_key))
                .collect(),
            params => vec![has_grammar_key(params); sequences],
        },
        Route::Completions => {
            let any = has_grammar_key(body) || constraining_format(body);
            vec![any; sequences]
        }
        Route::ChatCompletions => {
            let any = ["regex", "ebnf"].iter().any(|k| is_set(&body[*k]))
                || constraining_format(body)
                || tool_constraint(body);
            vec![any; sequences]
        }
        _ => vec![false; sequences],
    }
}

fn is_set(v: &Value) -> bool {
    !v.is_null()
}

fn has_grammar_key(params: &Value) -> bool {
    GRAMMAR_KEYS.iter().any(|k| is_set(&params[*k]))
}

/// `response_format` of type `json_schema` (the schema), `json_object`
/// (`{"type": "object"}`) or `structural_tag`; `text` compiles nothing.
fn constraining_format(body: &Value) -> bool {
    matches!(
        body["response_format"]["type"].as_str(),
        Some("json_schema" | "json_object" | "structural_tag")
    )
}

/// The chat's tool call constraint. Only with tools and a `tool_choice`
/// other than `"none"` (absent means `"auto"` when there are tools):
/// `"required"` or a named function always compiles a JSON schema; `"auto"`
/// compiles a structural tag when a tool is `strict` (SGLang builds it with
/// the `--tool-call-parser`; the simulator behaves as a server that has one).
fn tool_constraint(body: &Value) -> bool {
    let Some(tools) = body["tools"].as_array().filter(|t| !t.is_empty()) else {
        return false;
    };
    match &body["tool_choice"] {
        Value::String(choice) if choice == "none" => false,
        Value::String(choice) if choice == "required" => true,
        Value::Object(_) => true,
        _ => tools
            .iter()
            .any(|t| t["function"]["strict"].as_bool() == Some(true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(route: Route, body: Value) -> bool {
        grammar_bearing(route, &body, 1)[0]
    }

    #[test]
    fn generate_reads_the_sampling_params() {
        for key in GRAMMAR_KEYS {
            let body = json!({"text": "hi", "sampling_params": {key: "x", "max_new_tokens": 8}});
            assert!(one(Route::Generate, body), "{key}");
        }
        // An empty grammar is still one (SGLang tests `is not None`).
        assert!(one(
            Route::Generate,
            json!({"text": "hi", "sampling_params": {"regex": ""}})
        ));
        for body in [
            json!({"text": "hi"}),
            json!({"text": "hi", "sampling_params": {"max_new_tokens": 8, "regex": null}}),
            json!({"text": "hi", "sampling_params": {"stop_regex": "a+"}}),
            // Not a sampling parameter on /generate: ignored there.
            json!({"text": "hi", "regex": "a+", "response_format": {"type": "json_object"}}),
        ] {
            assert!(!one(Route::Generate, body.clone()), "{body}");
        }
    }

    #[test]
    fn a_generate_batch_is_judged_per_sequence() {
        let body = json!({"text": ["a", "b", "c"],
                          "sampling_params": [{"regex": "x"}, {"max_new_tokens": 2}]});
        assert_eq!(
            grammar_bearing(Route::Generate, &body, 3),
            [true, false, false]
        );
        let shared = json!({"text": ["a", "b"], "sampling_params": {"ebnf": "root ::= \"a\""}});
        assert_eq!(grammar_bearing(Route::Generate, &shared, 2), [true, true]);
    }

    #[test]
    fn response_formats_that_compile_a_grammar() {
        for (kind, bearing) in [
            ("json_object", true),
            ("json_schema", true),
            ("structural_tag", true),
            ("text", false),
        ] {
            let format = json!({"type": kind, "json_schema": {"name": "x", "schema": {}}});
            for route in [Route::ChatCompletions, Route::Completions] {
                let body = json!({"messages": [], "prompt": "p", "response_format": format});
                assert_eq!(one(route, body), bearing, "{route:?} {kind}");
            }
        }
    }

    #[test]
    fn the_extras_each_route_accepts() {
        for key in ["regex", "ebnf", "json_schema"] {
            assert!(one(Route::Completions, json!({"prompt": "p", key: "x"})));
        }
        assert_eq!(
            grammar_bearing(
                Route::Completions,
                &json!({"prompt": ["a", "b"], "regex": "x"}),
                2
            ),
            [true, true]
        );
        for key in ["regex", "ebnf"] {
            assert!(one(
                Route::ChatCompletions,
                json!({"messages": [], key: "x"})
            ));
        }
        // The chat request has no top-level json_schema field.
        assert!(!one(
            Route::ChatCompletions,
            json!({"messages": [], "json_schema": "{}"})
        ));
        assert!(!one(
            Route::ChatCompletions,
            json!({"messages": [], "max_tokens": 5})
        ));
    }

    #[test]
    fn tool_choices_that_force_a_constraint() {
        let tool = |strict: Option<bool>| {
            let mut f = json!({"name": "lookup", "parameters": {"type": "object"}});
            if let Some(s) = strict {
                f["strict"] = json!(s);
            }
            json!({"type": "function", "function": f})
        };
        let named = json!({"type": "function", "function": {"name": "lookup"}});
        for (tools, choice, bearing) in [
            (json!([tool(None)]), json!("required"), true),
            (json!([tool(None)]), named.clone(), true),
            (json!([tool(None)]), json!("auto"), false),
            (json!([tool(None)]), Value::Null, false),
            (json!([tool(Some(true))]), json!("auto"), true),
            (json!([tool(Some(true))]), Value::Null, true),
            (json!([tool(Some(false))]), json!("auto"), false),
            (json!([tool(Some(true))]), json!("none"), false),
            // No tools: SGLang refuses "required" and a named choice on both
            // workers alike (no handoff), so nothing is stubbed.
            (json!([]), json!("required"), false),
            (Value::Null, named, false),
        ] {
            let body = json!({"messages": [], "tools": tools, "tool_choice": choice});
            assert_eq!(one(Route::ChatCompletions, body.clone()), bearing, "{body}");
        }
    }

    /// The pair, in process, behind the minimal dispatcher: `(sim, router URL, model dir)`.
    async fn pair(
        mode: crate::sim::Mode,
        prefill: GrammarBackend,
    ) -> (crate::sim::SimPair, String, tempfile::TempDir) {
        use crate::sim::dispatch::{self, Dispatcher};
        let model = tempfile::tempdir().unwrap();
        crate::demo::write_byte_model(model.path()).unwrap();
        let sim = crate::sim::SimPair::start(&crate::sim::SimArgs {
            prefill_listen: "127.0.0.1:0".parse().unwrap(),
            decode_listen: "127.0.0.1:0".parse().unwrap(),
            tokenizer: model.path().to_owned(),
            served_model_name: "demo".into(),
            max_req_input_len: 512,
            mode,
            sglang_version: None,
            prefill_grammar_backend: prefill,
            bootstrap_port: 8998,
            kv_pages: 64,
            page_size: 16,
            context_length: None,
            default_chat_template_kwargs: None,
            handoff_timeout_secs: 10,
        })
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let router = format!("http://{}", listener.local_addr().unwrap());
        let d = std::sync::Arc::new(Dispatcher::new(sim.prefill, sim.decode, 8998));
        drop(sim.serve(listener, dispatch::router(d)));
        (sim, router, model)
    }

    async fn post(url: &str, body: &Value) -> (u16, Value) {
        let r = http()
            .post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (
            status,
            serde_json::from_slice(&r.bytes().await.unwrap()).unwrap(),
        )
    }

    async fn info(base: &str) -> Value {
        let r = http()
            .get(format!("{base}/server_info"))
            .send()
            .await
            .unwrap();
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
    }

    fn http() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    /// A's prompt (under the limit, the byte model: one token per byte) with
    /// its secret past slot 0; then B's constrained request of the same
    /// length, which carries none.
    const A: &str = "> SECRET-A lorem ipsum dolor sit amet consectetur";
    const B: &str = "> nothing to see here at all, just some filler text";

    #[tokio::test]
    async fn without_a_prefill_backend_a_grammar_reads_stale_kv() {
        use crate::sim::Mode;
        let (sim, router, _model) = pair(Mode::Vulnerable, GrammarBackend::Disabled).await;
        let p = format!("http://{}", sim.prefill);
        let d = format!("http://{}", sim.decode);
        assert_eq!(info(&p).await["grammar_backend"], "none");
        assert_eq!(info(&p).await["skip_tokenizer_init"], false);
        assert_eq!(info(&p).await["disaggregation_mode"], "prefill");
        assert_eq!(info(&d).await["grammar_backend"], "xgrammar");
        assert_eq!(info(&d).await["disaggregation_mode"], "decode");

        let generate = format!("{router}/generate");
        let plain = |text: &str| json!({"text": text, "sampling_params": {"max_new_tokens": 200}});
        let (status, own) = post(&generate, &plain(A)).await;
        assert_eq!((status, own["text"].as_str()), (200, Some(A)));
        // The grammar makes prefill hand over one token: decode reads A's.
        let mut constrained = plain(B);
        constrained["sampling_params"]["regex"] = json!("[a-z ]+");
        let (status, leaked) = post(&generate, &constrained).await;
        assert_eq!(status, 200);
        assert!(
            leaked["text"].as_str().unwrap().contains("SECRET-A"),
            "{leaked}"
        );
        // Without a grammar B reads its own prompt.
        post(&generate, &plain(A)).await;
        let (_, own) = post(&generate, &plain(B)).await;
        assert_eq!(own["text"].as_str(), Some(B));
        sim.stop().await;
    }

    #[tokio::test]
    async fn with_a_backend_or_a_fix_nothing_leaks() {
        use crate::sim::Mode;
        let chat = |text: &str| {
            json!({"model": "demo", "max_tokens": 200, "response_format": {"type": "json_object"},
                   "messages": [{"role": "user", "content": text}]})
        };
        // xgrammar on prefill: the constrained chat is served from its own KV.
        let (sim, router, _model) = pair(Mode::Vulnerable, GrammarBackend::Xgrammar).await;
        assert_eq!(
            info(&format!("http://{}", sim.prefill)).await["grammar_backend"],
            "xgrammar"
        );
        let url = format!("{router}/v1/chat/completions");
        post(&url, &chat(A)).await;
        let (status, own) = post(&url, &chat(B)).await;
        let text = own["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(status, 200);
        assert!(text.contains(B) && !text.contains("SECRET-A"), "{text:?}");
        sim.stop().await;
        // A fixed release retires the stub: SGLang's 400, and decode is told.
        let (sim, router, _model) = pair(Mode::Fixed, GrammarBackend::Disabled).await;
        let url = format!("{router}/v1/chat/completions");
        let (status, refused) = post(&url, &chat(B)).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["message"], NO_BACKEND);
        let mut plain = chat(B);
        plain.as_object_mut().unwrap().remove("response_format");
        assert_eq!(post(&url, &plain).await.0, 200);
        sim.stop().await;
    }

    #[test]
    fn the_backend_names_are_sglangs() {
        assert_eq!(GrammarBackend::Xgrammar.name(), "xgrammar");
        assert_eq!(GrammarBackend::Disabled.name(), "none");
        assert_eq!(
            GrammarBackend::from_str("none", false),
            Ok(GrammarBackend::Disabled)
        );
        assert_eq!(
            GrammarBackend::from_str("xgrammar", false),
            Ok(GrammarBackend::Xgrammar)
        );
    }
}
