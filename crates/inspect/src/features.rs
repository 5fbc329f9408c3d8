//! The request fields, other than the prompt, that decide whether an exposed
//! PD prefill stubs a request its decode does not (`../shared/docs/
//! pd-abort-paths.md`): a client-chosen request id, the sampling mask, hidden
//! states, and anything that compiles a grammar. Read from the body as
//! SGLang's request models read it (`openai/protocol.py`,
//! `managers/io_struct.py`), on every route; `policy::pd` decides.

use prefill_guard_count::lookup::Lookup;
use serde_json::{Map, Value};

/// What a request asks of the server beyond its prompt (read from the
/// body by [`features`]; the guard's `policy::pd` decides).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    /// A field a client must not choose, named (`rid`, `bootstrap_room`, ...).
    pub client_control: Option<&'static str>,
    /// `return_sampling_mask` set (scheduler S1-S4).
    pub sampling_mask: bool,
    /// `return_hidden_states` set (D1).
    pub hidden_states: bool,
    /// `return_logprob` (or OpenAI's `logprobs`) set: 0.5.11's DFLASH
    /// rejects it at intake.
    pub logprob: bool,
    /// What compiles a grammar on the server (G1-G4), named.
    pub grammar: Option<&'static str>,
}

/// Body fields the server takes from the client that let one request act on
/// another's: the scheduler aborts by request-id *prefix*, and the bootstrap
/// fields pair a prefill with a decode.
const CLIENT_CONTROL: [&str; 4] = ["rid", "bootstrap_host", "bootstrap_port", "bootstrap_room"];

/// `sampling_params` keys that compile a grammar (`constrained/`).
const GRAMMAR_PARAMS: [&str; 4] = ["json_schema", "regex", "ebnf", "structural_tag"];

pub fn features(obj: &Map<String, Value>) -> Features {
    // Batched routes carry these per item too; `/v1/rerank`, `/v1/score` and
    // Vertex's `instances` are read whole below.
    let mut f = Features {
        client_control: CLIENT_CONTROL.into_iter().find(|k| set(obj.field(k))),
        sampling_mask: set(obj.field("return_sampling_mask")),
        hidden_states: set(obj.field("return_hidden_states")),
        logprob: set(obj.field("return_logprob")) || set(obj.field("logprobs")),
        grammar: grammar(obj),
    };
    // Vertex AI: `instances` (each a GenerateReqInput) and `parameters`.
    for nested in nested_requests(obj) {
        let inner = features(nested);
        f.client_control = f.client_control.or(inner.client_control);
        f.sampling_mask |= inner.sampling_mask;
        f.hidden_states |= inner.hidden_states;
        f.logprob |= inner.logprob;
        f.grammar = f.grammar.or(inner.grammar);
    }
    f
}

fn nested_requests(obj: &Map<String, Value>) -> impl Iterator<Item = &Map<String, Value>> {
    let instances = obj.field("instances").and_then(Value::as_array);
    instances
        .into_iter()
        .flatten()
        .chain(obj.field("parameters"))
        .filter_map(Value::as_object)
}

/// SGLang reads `false`, `null`, `[]` and `[false, ...]` as unset; any
/// other value (`true`, `"last"`, a list with a `true`, a string id) is set.
/// Reading more as set only refuses more.
fn set(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(items)) => items.iter().any(|i| set(Some(i))),
        Some(_) => true,
    }
}

fn grammar(obj: &Map<String, Value>) -> Option<&'static str> {
    // `/generate`'s sampling parameters, a list of them for a batch, and the
    // OpenAI routes' SGLang extras at the top level.
    let params = obj.field("sampling_params");
    let param_objects = match params {
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_object).collect(),
        Some(Value::Object(p)) => vec![p],
        _ => vec![],
    };
    for p in param_objects.into_iter().chain(Some(obj)) {
        if let Some(k) = GRAMMAR_PARAMS.into_iter().find(|k| set(p.field(k))) {
            return Some(k);
        }
    }
    if let Some(kind) = response_format(obj) {
        return Some(kind);
    }
    if forced_tool(obj.field("tool_choice")) {
        return Some("tool_choice");
    }
    if strict_tools(obj.field("tools")) {
        return Some("tools.strict");
    }
    // Ollama's `format` ("json" or a schema).
    if set(obj.field("format")) {
        return Some("format");
    }
    None
}

/// OpenAI's `response_format` and the Responses API's `text.format`: every
/// type but `text` constrains decoding.
fn response_format(obj: &Map<String, Value>) -> Option<&'static str> {
    let formats = [
        ("response_format", obj.field("response_format")),
        (
            "text.format",
            obj.field("text").and_then(|t| t.field("format")),
        ),
        ("output_format", obj.field("output_format")),
    ];
    formats.into_iter().find_map(|(name, f)| {
        let f = f.filter(|f| !f.is_null())?;
        let text = f.field("type").and_then(Value::as_str) == Some("text");
        (!text).then_some(name)
    })
}

/// `"required"`, `"any"` (Anthropic), or a named tool forces a tool-call
/// grammar; `"auto"` and `"none"` do not.
fn forced_tool(choice: Option<&Value>) -> bool {
    match choice {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !matches!(s.as_str(), "auto" | "none"),
        Some(Value::Object(o)) => !matches!(
            o.field("type").and_then(Value::as_str),
            Some("auto" | "none")
        ),
        Some(_) => true,
    }
}

fn strict_tools(tools: Option<&Value>) -> bool {
    tools
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| set(t.field("strict")) || set(t.field("function").and_then(|f| f.field("strict"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(v: Value) -> Features {
        features(v.as_object().unwrap())
    }

    #[test]
    fn plain_requests_ask_nothing() {
        for body in [
            json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto",
                   "response_format": {"type": "text"}, "return_hidden_states": false,
                   "tools": [{"type": "function", "function": {"name": "f", "strict": false}}]}),
            json!({"text": "a", "sampling_params": {"max_new_tokens": 3, "regex": null}, "rid": null}),
            json!({"prompt": "a", "return_sampling_mask": [false, false]}),
        ] {
            assert_eq!(of(body.clone()), Features::default(), "{body}");
        }
    }

    #[test]
    fn each_field_is_found_where_sglang_reads_it() {
        assert_eq!(of(json!({"rid": "a"})).client_control, Some("rid"));
        assert_eq!(of(json!({"rid": ["a", "b"]})).client_control, Some("rid"));
        assert_eq!(
            of(json!({"bootstrap_room": 7})).client_control,
            Some("bootstrap_room")
        );
        assert!(of(json!({"return_sampling_mask": true})).sampling_mask);
        assert!(of(json!({"return_hidden_states": "last"})).hidden_states);
        assert!(of(json!({"return_hidden_states": [false, true]})).hidden_states);
        let cases = [
            (json!({"sampling_params": {"regex": "a+"}}), "regex"),
            (
                json!({"sampling_params": [{}, {"json_schema": "{}"}]}),
                "json_schema",
            ),
            (json!({"ebnf": "root ::= \"a\""}), "ebnf"),
            (
                json!({"response_format": {"type": "json_object"}}),
                "response_format",
            ),
            (
                json!({"text": {"format": {"type": "json_schema"}}}),
                "text.format",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (
                json!({"tool_choice": {"type": "function", "function": {"name": "f"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": {"type": "any"}}), "tool_choice"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "strict": true}}]}),
                "tools.strict",
            ),
            (json!({"format": "json"}), "format"),
            (
                json!({"instances": [{"text": "a", "sampling_params": {"ebnf": "x"}}]}),
                "ebnf",
            ),
        ];
        for (body, field) in cases {
            assert_eq!(of(body.clone()).grammar, Some(field), "{body}");
        }
        assert_eq!(
            of(json!({"instances": [{"text": "a", "rid": "x"}]})).client_control,
            Some("rid")
        );
    }
}
