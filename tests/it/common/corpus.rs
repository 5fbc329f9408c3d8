//! The adversarial corpus (issue 3): over-long prompts in every evasive form
//! the issue lists, alone and combined, and the matching legitimate short
//! requests. Data only; `tests/it/adversarial.rs` sends it.
//!
//! With the demo model one word is one token and the guard's limit is
//! [`LIMIT`], so [`long`] (30 words, 30+ tokens) never fits and [`SHORT`]
//! always does.

use serde_json::{json, Value};

use prefill_guard::inspect::Route;

use super::wire::{chunked, Framing, Req};
use super::{ids, words};

/// The demo model's limit the corpus is written for.
pub const LIMIT: usize = 8;
/// A prompt that fits every route (1 token as text, 6 as a chat turn).
pub const SHORT: &str = "hello";

/// A prompt no route can take.
pub fn long() -> String {
    words(30)
}

/// What must happen to one request of a case.
#[derive(Debug, Clone)]
pub enum Exp {
    /// Forwarded: the mock receives `path` and a body equal in meaning to `json`.
    Arrive { path: String, json: Value },
    /// Answered with `status` and never forwarded; `says`: the answer's body
    /// holds this (`"tokens"`: refused because it was counted over the limit;
    /// `"framing"`: refused for its framing, not for anything later).
    Refused {
        status: u16,
        says: Option<&'static str>,
    },
    /// Never answered: the connection was closed after an earlier refusal.
    Dropped,
}

/// One named case: requests sent on one connection (pipelined on HTTP/1.1,
/// concurrent streams on h2c), each with what must happen to it.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub reqs: Vec<(Req, Exp)>,
}

impl Case {
    pub fn one(name: impl Into<String>, req: Req, exp: Exp) -> Self {
        Self {
            name: name.into(),
            reqs: vec![(req, exp)],
        }
    }

    pub fn h1_only(&self) -> bool {
        self.reqs.iter().any(|(r, _)| r.h1_only())
    }

    /// The category: the case name up to its first `:`.
    pub fn category(&self) -> &str {
        self.name.split(':').next().unwrap_or(&self.name)
    }
}

/// A prompt-carrying SGLang route and how to put a prompt into its body.
#[derive(Clone, Copy)]
pub struct RouteDef {
    pub path: &'static str,
    pub method: &'static str,
    /// The top-level key whose value carries the prompt.
    pub key: &'static str,
    pub body: fn(&str) -> Value,
}

fn chat(p: &str) -> Value {
    json!({"model": "demo", "messages": [{"role": "user", "content": p}], "max_tokens": 4})
}

/// Every prompt route of SGLang 0.5.23 the issue lists.
pub fn routes() -> Vec<RouteDef> {
    vec![
        RouteDef {
            path: "/v1/chat/completions",
            method: "POST",
            key: "messages",
            body: chat,
        },
        RouteDef {
            path: "/v1/completions",
            method: "POST",
            key: "prompt",
            body: |p| json!({"model": "demo", "prompt": p, "max_tokens": 4}),
        },
        RouteDef {
            path: "/generate",
            method: "POST",
            key: "text",
            body: |p| json!({"text": p, "sampling_params": {"max_new_tokens": 4}}),
        },
        RouteDef {
            path: "/generate",
            method: "PUT",
            key: "text",
            body: |p| json!({"text": p}),
        },
        RouteDef {
            path: "/v1/embeddings",
            method: "POST",
            key: "input",
            body: |p| json!({"model": "demo", "input": p}),
        },
        RouteDef {
            path: "/v1/classify",
            method: "POST",
            key: "input",
            body: |p| json!({"model": "demo", "input": p}),
        },
        RouteDef {
            path: "/classify",
            method: "POST",
            key: "text",
            body: |p| json!({"text": p}),
        },
        RouteDef {
            path: "/encode",
            method: "POST",
            key: "text",
            body: |p| json!({"text": p}),
        },
        RouteDef {
            path: "/v1/rerank",
            method: "POST",
            key: "documents",
            body: |p| json!({"query": "hello", "documents": ["hello", p]}),
        },
        RouteDef {
            path: "/v1/score",
            method: "POST",
            key: "items",
            body: |p| json!({"query": "hello", "items": ["world", p]}),
        },
        RouteDef {
            path: "/vertex_generate",
            method: "POST",
            key: "instances",
            body: |p| json!({"instances": [{"text": p}]}),
        },
        RouteDef {
            path: "/v1/responses",
            method: "POST",
            key: "input",
            body: |p| json!({"model": "demo", "input": p}),
        },
        RouteDef {
            path: "/v1/messages",
            method: "POST",
            key: "messages",
            body: |p| json!({"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": p}]}),
        },
        RouteDef {
            path: "/invocations",
            method: "POST",
            key: "messages",
            body: chat,
        },
        RouteDef {
            path: "/api/chat",
            method: "POST",
            key: "messages",
            body: |p| json!({"model": "demo", "messages": [{"role": "user", "content": p}], "stream": false}),
        },
        RouteDef {
            path: "/api/generate",
            method: "POST",
            key: "prompt",
            body: |p| json!({"model": "demo", "prompt": p, "stream": false}),
        },
    ]
}

fn route(path: &str) -> RouteDef {
    routes().into_iter().find(|r| r.path == path).unwrap()
}

/// Whether the guard models `path` (routes still being added are refused
/// with 404 until they are: that is the fail-closed state).
pub fn modelled(path: &str) -> bool {
    Route::from_path(path).is_some()
}

/// An over-long prompt on `path`: refused as too long where the guard counts
/// the route, 404 where it does not model it (yet).
pub fn too_long(path: &str) -> Exp {
    if modelled(path) {
        Exp::Refused {
            status: 400,
            says: Some("tokens"),
        }
    } else {
        Exp::Refused {
            status: 404,
            says: None,
        }
    }
}

/// A short request on `path` arrives with `json`'s meaning (404 while the route is not modelled).
pub fn arrives(path: &str, json: Value) -> Exp {
    if modelled(path) {
        Exp::Arrive {
            path: path.into(),
            json,
        }
    } else {
        Exp::Refused {
            status: 404,
            says: None,
        }
    }
}

/// Refused for a reason the route's model decides (400), or 404 while unmodelled.
pub fn refused_if_modelled(path: &str) -> Exp {
    Exp::Refused {
        status: if modelled(path) { 400 } else { 404 },
        says: None,
    }
}

/// Refused for its framing (and the connection closed).
pub fn refused_framing() -> Exp {
    Exp::Refused {
        status: 400,
        says: Some("framing"),
    }
}

pub fn refused(status: u16) -> Exp {
    Exp::Refused { status, says: None }
}

fn text(v: &Value) -> String {
    v.to_string()
}

/// The JSON meaning Python's `json` gives `bytes` (last duplicate wins).
pub fn meaning(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("a legitimate body is JSON")
}

/// Writes every character of `key` as a `\uXXXX` escape.
pub fn escape_all(key: &str) -> String {
    key.chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect()
}

/// `body` with its first top-level `key` spelled with escapes.
pub fn escaped_key(body: &Value, key: &str) -> String {
    let s = text(body);
    let plain = format!("\"{key}\":");
    assert!(s.contains(&plain), "{key} in {s}");
    s.replacen(&plain, &format!("\"{}\":", escape_all(key)), 1)
}

/// `first` with `key` given again at the end, carrying `second`'s value.
pub fn duplicate_last(first: &Value, second: &Value, key: &str, escape: bool) -> String {
    let s = text(first);
    let k = if escape {
        escape_all(key)
    } else {
        key.to_string()
    };
    format!("{},\"{k}\":{}}}", &s[..s.len() - 1], second[key])
}

/// Every `hello` in string values written with escapes.
pub fn escaped_content(body: &Value) -> String {
    text(body).replace("hello", "\\u0068\\u0065llo")
}

// === path spellings ===

/// Spellings of a route's path that SGLang routes to the same endpoint; the
/// guard canonicalises them.
pub fn equivalent_paths(path: &str) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("trailing-slash", format!("{path}/")),
        ("encoded-trailing-slash", format!("{path}%2F")),
        ("query", format!("{path}?x=1&text=ignored")),
        (
            "encoded-letter",
            format!("/%{:02x}{}", path.as_bytes()[1], &path[2..]),
        ),
        (
            "encoded-upper",
            format!("/%{:02X}{}", path.as_bytes()[1], &path[2..]),
        ),
    ];
    if let Some(i) = path.rfind('/').filter(|i| *i > 0) {
        out.push((
            "encoded-slash",
            format!("{}%2F{}", &path[..i], &path[i + 1..]),
        ));
    }
    out
}

/// Spellings the guard refuses rather than guess at (status it answers).
pub fn refused_paths(path: &str) -> Vec<(&'static str, String, u16)> {
    let first = path[1..].find('/').map_or(path.len(), |i| i + 1);
    let (head, tail) = path.split_at(first);
    let last = path.rfind('/').unwrap_or(0);
    vec![
        ("double-slash-start", format!("/{path}"), 400),
        ("double-slash-mid", format!("{head}/{tail}"), 400),
        ("double-slash-end", format!("{path}//"), 400),
        ("dot-segment", format!("/.{path}"), 400),
        ("dotdot-segment", format!("/x/..{path}"), 400),
        ("encoded-dotdot", format!("/x/%2e%2e{path}"), 400),
        ("semicolon-param", format!("{path};x=1"), 400),
        ("semicolon-mid", format!("{head};x=1{tail}"), 400),
        ("absolute-form", format!("http://127.0.0.1{path}"), 400),
        ("fragment", format!("{path}#x"), 400),
        ("encoded-nul", format!("{path}%00"), 400),
        ("encoded-space", format!("{path}%20"), 404),
        ("upper-case", path.to_uppercase(), 404),
        (
            "double-encoded-slash",
            format!("{}/%252F{}", &path[..last], &path[last + 1..]),
            400,
        ),
        ("encoded-backslash", format!("{path}%5C"), 400),
    ]
}

// === the corpus ===

fn req(r: &RouteDef, body: impl Into<Vec<u8>>) -> Req {
    Req::post(r.path, body).method(r.method)
}

fn long_req(r: &RouteDef) -> Req {
    req(r, text(&(r.body)(&long())))
}

/// Content types: (name, header value or none, accepted by the guard).
const CONTENT_TYPES: &[(&str, Option<&str>, bool)] = &[
    ("text-plain", Some("text/plain"), false),
    ("missing", None, false),
    ("x-plus-json", Some("application/x+json"), false),
    ("vnd-plus-json", Some("application/vnd.api+json"), false),
    ("form", Some("application/x-www-form-urlencoded"), false),
    ("json-prefix", Some("application/jsonx"), false),
    (
        "mixed-case-latin1",
        Some("Application/JSON; charset=latin1"),
        true,
    ),
    (
        "no-space-charset",
        Some("application/json;charset=utf-8"),
        true,
    ),
];

/// Every over-long prompt in an evasive form. Each must be refused, and none
/// may reach upstream (a pipelined short request before it may).
#[allow(
    clippy::too_many_lines,
    reason = "a list of cases, one per form; reads as a table, top to bottom"
)]
pub fn adversarial() -> Vec<Case> {
    let mut cases = Vec::new();
    let all = routes();
    let l = long();

    // Every prompt route, as is: counted and refused.
    for r in &all {
        cases.push(Case::one(
            format!("route:{} {}", r.method, r.path),
            long_req(r),
            too_long(r.path),
        ));
    }
    // Every route under every spelling SGLang routes to it.
    for r in &all {
        for (form, target) in equivalent_paths(r.path) {
            cases.push(Case::one(
                format!("path:{form} {} {target}", r.method),
                long_req(r).target(target),
                too_long(r.path),
            ));
        }
    }
    // Spellings the guard refuses outright, on four routes.
    for p in [
        "/v1/chat/completions",
        "/generate",
        "/v1/completions",
        "/vertex_generate",
    ] {
        let r = route(p);
        for (form, target, status) in refused_paths(p) {
            cases.push(Case::one(
                format!("path:{form} {target}"),
                long_req(&r).target(target),
                refused(status),
            ));
        }
    }
    // JSON spellings on every route.
    for r in &all {
        let (short, longb) = ((r.body)(SHORT), (r.body)(&l));
        let name = |f: &str| format!("json:{f} {} {}", r.method, r.path);
        cases.push(Case::one(
            name("escaped-key"),
            req(r, escaped_key(&longb, r.key)),
            too_long(r.path),
        ));
        cases.push(Case::one(
            name("escaped-content"),
            req(r, escaped_content(&longb)),
            too_long(r.path),
        ));
        cases.push(Case::one(
            name("pretty-whitespace"),
            req(r, serde_json::to_string_pretty(&longb).unwrap()),
            too_long(r.path),
        ));
        let dup = if modelled(r.path) {
            refused(400)
        } else {
            refused(404)
        };
        cases.push(Case::one(
            name("duplicate-key-long-last"),
            req(r, duplicate_last(&short, &longb, r.key, false)),
            dup.clone(),
        ));
        cases.push(Case::one(
            name("duplicate-key-escaped-long-last"),
            req(r, duplicate_last(&short, &longb, r.key, true)),
            dup.clone(),
        ));
    }
    // Duplicates deeper down, and what orjson refuses.
    let chat = route("/v1/chat/completions");
    let generate = route("/generate");
    let deep = [
        (
            "duplicate-in-message",
            format!(r#"{{"messages":[{{"role":"user","content":"hello","content":"{l}"}}]}}"#),
            &chat,
        ),
        (
            "duplicate-role",
            format!(r#"{{"messages":[{{"role":"assistant","content":"{l}","role":"user"}}]}}"#),
            &chat,
        ),
        (
            "duplicate-messages-escaped-both",
            format!(
                r#"{{"\u006dessages":[{{"role":"user","content":"hi"}}],"m\u0065ssages":[{{"role":"user","content":"{l}"}}]}}"#
            ),
            &chat,
        ),
        (
            "duplicate-nested-sampling",
            format!(
                r#"{{"text":"{l}","sampling_params":{{"max_new_tokens":1,"max_new_tokens":2}}}}"#
            ),
            &generate,
        ),
        (
            "duplicate-deep",
            format!(r#"{{"text":"{l}","x":[{{"a":{{"b":[{{"c":1,"c":2}}]}}}}]}}"#),
            &generate,
        ),
        (
            "bom",
            format!("\u{feff}{}", text(&(generate.body)(&l))),
            &generate,
        ),
        (
            "trailing-garbage",
            format!("{} x", text(&(generate.body)(&l))),
            &generate,
        ),
        (
            "two-documents",
            format!(
                "{}{}",
                text(&(generate.body)(SHORT)),
                text(&(generate.body)(&l))
            ),
            &generate,
        ),
        (
            "lone-surrogate",
            format!(r#"{{"text":"{l}\ud800"}}"#),
            &generate,
        ),
        ("nan", format!(r#"{{"text":"{l}","x":NaN}}"#), &generate),
        (
            "infinity",
            format!(r#"{{"text":"{l}","x":-Infinity}}"#),
            &generate,
        ),
        (
            "deep-nesting",
            format!(
                r#"{{"text":"{l}","x":{}{}}}"#,
                "[".repeat(300),
                "]".repeat(300)
            ),
            &generate,
        ),
        ("single-quotes", format!("{{'text':'{l}'}}"), &generate),
        ("comment", format!("{{/*x*/\"text\":\"{l}\"}}"), &generate),
    ];
    for (form, body, r) in deep {
        cases.push(Case::one(
            format!("json:{form} {}", r.path),
            req(r, body),
            refused(400),
        ));
    }
    // Content types and compression on five routes.
    for p in [
        "/v1/chat/completions",
        "/generate",
        "/v1/completions",
        "/v1/embeddings",
        "/api/generate",
    ] {
        let r = route(p);
        for (form, ct, accepted) in CONTENT_TYPES {
            let exp = if *accepted {
                too_long(p)
            } else if modelled(p) {
                refused(415)
            } else {
                refused(404)
            };
            cases.push(Case::one(
                format!("content-type:{form} {p}"),
                long_req(&r).header("content-type", *ct),
                exp,
            ));
        }
        let enc = if modelled(p) {
            refused(415)
        } else {
            refused(404)
        };
        for (form, name, value) in [
            ("content-encoding-gzip", "content-encoding", "gzip"),
            (
                "content-encoding-identity-gzip",
                "content-encoding",
                "identity, gzip",
            ),
            ("x-body-compressed-zstd", "x-body-compressed", "zstd"),
            ("x-body-compressed-empty", "x-body-compressed", ""),
        ] {
            cases.push(Case::one(
                format!("encoding:{form} {p}"),
                long_req(&r).header(name, Some(value)),
                enc.clone(),
            ));
        }
        cases.push(Case::one(
            format!("content-type:text-plain-then-json {p}"),
            long_req(&r)
                .header("content-type", Some("text/plain"))
                .add_header("content-type", "application/json"),
            if modelled(p) {
                refused(415)
            } else {
                refused(404)
            },
        ));
    }
    // Framing (HTTP/1.1).
    for p in ["/v1/chat/completions", "/generate"] {
        let r = route(p);
        let body = text(&(r.body)(&l)).into_bytes();
        let chunks = chunked(&body, 7);
        let raw_exp = |name: &str, headers: &[(&str, &str)], payload: &[u8], exp: Exp| {
            let mut q = req(&r, payload.to_vec()).framing(Framing::Verbatim);
            for (n, v) in headers {
                q = q.add_header(n, v);
            }
            Case::one(format!("framing:{name} {p}"), q, exp)
        };
        // Refused by hyper before the guard sees it, or by the guard's body read.
        let raw = |name: &str, headers: &[(&str, &str)], payload: &[u8]| {
            raw_exp(name, headers, payload, refused(400))
        };
        // Refused by the guard's framing check.
        let ambiguous = |name: &str, headers: &[(&str, &str)], payload: &[u8]| {
            raw_exp(name, headers, payload, refused_framing())
        };
        let cl = body.len().to_string();
        let chunk_len = chunks.len().to_string();
        cases.push(Case::one(
            format!("framing:chunked-1-byte {p}"),
            long_req(&r).framing(Framing::Chunked(1)),
            too_long(p),
        ));
        cases.push(Case::one(
            format!("framing:chunked-7-bytes {p}"),
            long_req(&r).framing(Framing::Chunked(7)),
            too_long(p),
        ));
        cases.push(Case::one(
            format!("framing:expect-continue {p}"),
            long_req(&r).add_header("expect", "100-continue"),
            too_long(p),
        ));
        cases.push(ambiguous(
            "cl-then-te",
            &[("content-length", &cl), ("transfer-encoding", "chunked")],
            &chunks,
        ));
        cases.push(ambiguous(
            "te-then-cl",
            &[
                ("transfer-encoding", "chunked"),
                ("content-length", &chunk_len),
            ],
            &chunks,
        ));
        cases.push(ambiguous(
            "cl-short-te-long",
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
            &chunks,
        ));
        cases.push(ambiguous(
            "te-gzip-chunked",
            &[("transfer-encoding", "gzip, chunked")],
            &chunks,
        ));
        cases.push(ambiguous(
            "te-chunked-chunked",
            &[("transfer-encoding", "chunked, chunked")],
            &chunks,
        ));
        cases.push(ambiguous(
            "te-two-lines",
            &[
                ("transfer-encoding", "gzip"),
                ("transfer-encoding", "chunked"),
            ],
            &chunks,
        ));
        cases.push(raw(
            "te-identity",
            &[("transfer-encoding", "identity"), ("content-length", &cl)],
            &body,
        ));
        cases.push(raw("te-gzip", &[("transfer-encoding", "gzip")], &body));
        cases.push(raw(
            "te-chunked-gzip",
            &[("transfer-encoding", "chunked, gzip")],
            &chunks,
        ));
        cases.push(raw(
            "two-content-lengths",
            &[("content-length", &cl), ("content-length", "5")],
            &body,
        ));
        cases.push(raw(
            "content-length-list",
            &[("content-length", &format!("{cl}, {cl}"))],
            &body,
        ));
        cases.push(raw(
            "content-length-plus",
            &[("content-length", &format!("+{cl}"))],
            &body,
        ));
        // Header and chunk spellings other parsers read differently.
        cases.push(raw(
            "te-obs-fold",
            &[("transfer-encoding", "\r\n chunked")],
            &chunks,
        ));
        cases.push(raw(
            "te-space-before-colon",
            &[("transfer-encoding ", "chunked")],
            &chunks,
        ));
        cases.push(raw(
            "te-xchunked",
            &[("transfer-encoding", "xchunked")],
            &chunks,
        ));
        cases.push(raw(
            "te-tab-chunked-comma",
            &[("transfer-encoding", "\tchunked,")],
            &chunks,
        ));
        let bare_lf = String::from_utf8(chunks.clone())
            .unwrap()
            .replace("\r\n", "\n");
        cases.push(raw(
            "chunk-bare-lf",
            &[("transfer-encoding", "chunked")],
            bare_lf.as_bytes(),
        ));
        let hex_prefix = [b"0x".as_slice(), &chunks].concat();
        cases.push(raw(
            "chunk-size-0x",
            &[("transfer-encoding", "chunked")],
            &hex_prefix,
        ));
        let overflow = [b"1ffffffffffffffff\r\n".as_slice(), &body].concat();
        cases.push(raw(
            "chunk-size-overflow",
            &[("transfer-encoding", "chunked")],
            &overflow,
        ));
        let mut http10 = req(&r, chunks.clone())
            .framing(Framing::Verbatim)
            .add_header("transfer-encoding", "chunked");
        http10.version = "HTTP/1.0";
        cases.push(Case::one(
            format!("framing:http10-chunked {p}"),
            http10,
            refused(400),
        ));
        // Pipelined on one connection: a short request, then the long one.
        let short = (r.body)(SHORT);
        cases.push(Case {
            name: format!("pipeline:short-then-long {p}"),
            reqs: vec![
                (req(&r, text(&short)), arrives(p, short.clone())),
                (long_req(&r), too_long(p)),
            ],
        });
        cases.push(Case {
            name: format!("pipeline:short-then-chunked-long {p}"),
            reqs: vec![
                (req(&r, text(&short)), arrives(p, short.clone())),
                (long_req(&r).framing(Framing::Chunked(3)), too_long(p)),
            ],
        });
        let smuggle = req(&r, chunks.clone())
            .framing(Framing::Verbatim)
            .add_header("content-length", "5")
            .add_header("transfer-encoding", "chunked");
        cases.push(Case {
            name: format!("pipeline:short-then-cl-te-long {p}"),
            reqs: vec![
                (req(&r, text(&short)), arrives(p, short.clone())),
                (smuggle.clone(), refused_framing()),
            ],
        });
        cases.push(Case {
            name: format!("pipeline:cl-te-then-long-closes {p}"),
            reqs: vec![(smuggle, refused_framing()), (long_req(&r), Exp::Dropped)],
        });
    }
    // pydantic's lax coercions.
    let lax_ids: Vec<Value> = (0..10)
        .flat_map(|_| [json!("1"), json!(2.0), json!(true)])
        .collect();
    let lax = [
        ("generate-ids", "/generate", json!({"input_ids": lax_ids})),
        (
            "completions-ids",
            "/v1/completions",
            json!({"prompt": lax_ids}),
        ),
        (
            "embeddings-ids",
            "/v1/embeddings",
            json!({"input": lax_ids}),
        ),
        ("classify-ids", "/v1/classify", json!({"input": lax_ids})),
        (
            "score-item-first-yes",
            "/v1/score",
            json!({"query": "hello", "items": [l], "item_first": "yes"}),
        ),
        (
            "chat-continue-final-yes",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": l}, {"role": "assistant", "content": "hello"}], "continue_final_message": "yes", "add_generation_prompt": "off"}),
        ),
        (
            "chat-role-upper",
            "/v1/chat/completions",
            json!({"messages": [{"role": "SYSTEM", "content": l}, {"role": "user", "content": "hello"}]}),
        ),
        (
            "chat-input-ids",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello"}], "input_ids": ids(30)}),
        ),
        (
            "chat-parts",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": l}]}]}),
        ),
        (
            "chat-tool-arguments",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": format!("{{\"a\":\"{l}\"}}")}}]}, {"role": "user", "content": "hello"}]}),
        ),
        (
            "chat-reasoning-content",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello", "reasoning_content": l}, {"role": "user", "content": "hello"}]}),
        ),
        (
            "generate-embeds",
            "/generate",
            json!({"input_embeds": vec![vec![0.5]; 30]}),
        ),
    ];
    for (form, p, body) in lax {
        cases.push(Case::one(
            format!("lax:{form} {p}"),
            Req::post(p, text(&body)),
            too_long(p),
        ));
    }
    // A template variable overridden through `chat_template_kwargs`: SGLang's
    // `apply_chat_template` raises on it, and so does the guard.
    cases.push(Case::one(
        "lax:chat-template-kwargs-override /v1/chat/completions",
        Req::post("/v1/chat/completions", text(&json!({"messages": [{"role": "user", "content": l}], "chat_template_kwargs": {"add_generation_prompt": true}}))),
        refused(400),
    ));
    // Batches whose one over-long element comes last.
    let batches = [
        (
            "completions-text",
            "/v1/completions",
            json!({"prompt": ["hello", "hello", l]}),
        ),
        (
            "completions-ids",
            "/v1/completions",
            json!({"prompt": [[1, 2], ids(30)]}),
        ),
        (
            "generate-text",
            "/generate",
            json!({"text": ["hello", "hello", l]}),
        ),
        (
            "generate-ids",
            "/generate",
            json!({"input_ids": [[1, 2], ids(30)]}),
        ),
        (
            "generate-embeds",
            "/generate",
            json!({"input_embeds": [vec![vec![0.5]; 2], vec![vec![0.5]; 30]]}),
        ),
        (
            "embeddings-text",
            "/v1/embeddings",
            json!({"input": ["hello", l]}),
        ),
        (
            "embeddings-ids",
            "/v1/embeddings",
            json!({"input": [[1], ids(30)]}),
        ),
        (
            "classify-v1",
            "/v1/classify",
            json!({"input": ["hello", l]}),
        ),
        ("classify", "/classify", json!({"text": ["hello", l]})),
        (
            "encode-pairs",
            "/encode",
            json!({"text": [["hello", "hello"], ["hello", l]]}),
        ),
        (
            "rerank",
            "/v1/rerank",
            json!({"query": "hello", "documents": ["hello", "hello", l]}),
        ),
        (
            "score-ids",
            "/v1/score",
            json!({"query": [1], "items": [[1], ids(30)]}),
        ),
        (
            "vertex-instances",
            "/vertex_generate",
            json!({"instances": [{"text": "hello"}, {"text": l}]}),
        ),
        (
            "vertex-parameters",
            "/vertex_generate",
            json!({"instances": [{}], "parameters": {"text": l}}),
        ),
        (
            "vertex-parameters-ids",
            "/vertex_generate",
            json!({"instances": [{"x": 1}], "parameters": {"input_ids": ids(30)}}),
        ),
    ];
    for (form, p, body) in batches {
        cases.push(Case::one(
            format!("batch:{form} {p}"),
            Req::post(p, text(&body)),
            too_long(p),
        ));
    }
    // Length held server-side, or set by a multimodal processor.
    let state = [
        (
            "previous-response-id",
            "/v1/responses",
            json!({"model": "demo", "input": "hello", "previous_response_id": "resp_1"}),
        ),
        (
            "responses-web-search",
            "/v1/responses",
            json!({"model": "demo", "input": "hello", "tools": [{"type": "web_search_preview"}]}),
        ),
        (
            "session-params",
            "/generate",
            json!({"text": "hello", "session_params": {"id": "s1", "rid": "r1"}}),
        ),
        (
            "chat-session-params",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello"}], "session_params": {"id": "s1"}}),
        ),
        (
            "completions-session-id",
            "/v1/completions",
            json!({"prompt": "hello", "session_id": "s1"}),
        ),
        (
            "vertex-session",
            "/vertex_generate",
            json!({"instances": [{"text": "hello"}], "parameters": {"session_params": {"id": "s1"}}}),
        ),
        (
            "chat-image",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
        ),
        (
            "chat-video",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}]}),
        ),
        (
            "chat-audio",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
        ),
        (
            "generate-image",
            "/generate",
            json!({"text": "hello", "image_data": "data:image/png;base64,AAAA"}),
        ),
        (
            "generate-audio",
            "/generate",
            json!({"text": "hello", "audio_data": "x"}),
        ),
        (
            "generate-video",
            "/generate",
            json!({"text": "hello", "video_data": "x"}),
        ),
        (
            "encode-image",
            "/encode",
            json!({"text": "hello", "image_data": "x"}),
        ),
        (
            "embeddings-multimodal",
            "/v1/embeddings",
            json!({"input": [{"text": "hello", "image": "x"}]}),
        ),
        (
            "rerank-parts",
            "/v1/rerank",
            json!({"query": "hello", "documents": [[{"type": "image_url", "image_url": {"url": "x"}}]]}),
        ),
        (
            "vertex-image",
            "/vertex_generate",
            json!({"instances": [{"text": "hello", "image_data": "x"}]}),
        ),
        (
            "messages-image",
            "/v1/messages",
            json!({"model": "demo", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}),
        ),
        (
            "ollama-images",
            "/api/chat",
            json!({"model": "demo", "messages": [{"role": "user", "content": "hello", "images": ["AAAA"]}]}),
        ),
    ];
    for (form, p, body) in state {
        cases.push(Case::one(
            format!("state:{form} {p}"),
            Req::post(p, text(&body)),
            refused_if_modelled(p),
        ));
    }
    for (m, p) in [
        ("GET", "/open_session"),
        ("POST", "/open_session"),
        ("POST", "/close_session"),
    ] {
        cases.push(Case::one(
            format!("state:{m} {p}"),
            Req::post(p, text(&json!({"capacity_of_str_len": 1_000_000}))).method(m),
            refused(404),
        ));
    }
    // SGLang's admin and internal endpoints, and routes the guard does not model.
    for p in [
        "/server_info",
        "/get_server_info",
        "/get_model_info",
        "/flush_cache",
        "/update_weights_from_disk",
        "/update_weights_from_tensor",
        "/update_weights_from_distributed",
        "/init_weights_update_group",
        "/abort_request",
        "/start_profile",
        "/stop_profile",
        "/workers",
        "/v1/loads",
        "/configure_logging",
        "/set_internal_state",
        "/get_internal_state",
        "/release_memory_occupation",
        "/resume_memory_occupation",
        "/slow_down",
        "/start_expert_distribution_record",
        "/metrics",
        "/v1/decisions",
        "/v1/systemone",
        "/v1/audio/transcriptions",
        "/v1/realtime",
        "/rerank",
        "/v1/conversations",
        "/v1/interactions",
        "/v1/responses/resp_1",
        "/pause_generation",
        "/continue_generation",
    ] {
        cases.push(Case::one(
            format!("admin:POST {p}"),
            Req::post(p, text(&(generate.body)(&l))),
            refused(404),
        ));
    }
    for p in [
        "/server_info",
        "/get_server_info",
        "/flush_cache",
        "/workers",
        "/metrics",
    ] {
        cases.push(Case::one(
            format!("admin:GET {p}"),
            Req::post(p, Vec::new()).method("GET"),
            refused(404),
        ));
    }
    for (m, p) in [
        ("GET", "/v1/chat/completions"),
        ("DELETE", "/generate"),
        ("PATCH", "/v1/completions"),
        ("GET", "/vertex_generate"),
    ] {
        cases.push(Case::one(
            format!("method:{m} {p}"),
            Req::post(p, text(&(generate.body)(&l))).method(m),
            refused(405),
        ));
    }
    // Several forms at once.
    let c = (chat.body)(&l);
    let combos = [
        (
            "encoded-slash+escaped-key+chunked+latin1",
            req(&chat, escaped_key(&c, "messages"))
                .target("/v1/chat%2Fcompletions")
                .framing(Framing::Chunked(2))
                .header("content-type", Some("Application/JSON; charset=latin1")),
            too_long(chat.path),
        ),
        (
            "trailing-slash+duplicate-escaped+chunked",
            req(
                &chat,
                duplicate_last(&(chat.body)(SHORT), &c, "messages", true),
            )
            .target("/v1/chat/completions/")
            .framing(Framing::Chunked(5)),
            refused(400),
        ),
        (
            "encoded-letter+query+escaped-content+pretty",
            req(
                &generate,
                serde_json::to_string_pretty(&(generate.body)(&l))
                    .unwrap()
                    .replace("hello", "\\u0068ello"),
            )
            .target("/%67enerate?text=x"),
            too_long("/generate"),
        ),
        (
            "put+trailing-slash+embeds-batch+chunked",
            Req::post(
                "/generate/",
                text(&json!({"input_embeds": [vec![vec![0.5]; 1], vec![vec![0.5]; 30]]})),
            )
            .method("PUT")
            .framing(Framing::Chunked(4)),
            too_long("/generate"),
        ),
        (
            "encoded-slash+lax-ids-batch+identity",
            Req::post(
                "/v1%2Fcompletions",
                text(&json!({"prompt": [["1"], lax_ids]})),
            )
            .header("content-encoding", Some("identity")),
            too_long("/v1/completions"),
        ),
        (
            "vertex-parameters+escaped-key+encoded-letter",
            Req::post(
                "/%76ertex_generate",
                format!(r#"{{"instances":[{{}}],"\u0070arameters":{{"\u0074ext":"{l}"}}}}"#),
            ),
            too_long("/vertex_generate"),
        ),
        (
            "absolute-form+duplicate",
            req(
                &generate,
                duplicate_last(&(generate.body)(SHORT), &(generate.body)(&l), "text", false),
            )
            .target("http://127.0.0.1/generate"),
            refused(400),
        ),
        (
            "fragment+chunked+escaped-key",
            req(&generate, escaped_key(&(generate.body)(&l), "text"))
                .target("/generate#x")
                .framing(Framing::Chunked(1)),
            refused(400),
        ),
        (
            "encoded-slash+gzip",
            long_req(&chat)
                .target("/v1/chat%2fcompletions")
                .header("content-encoding", Some("gzip")),
            refused(415),
        ),
        (
            "responses+escaped+previous-id",
            Req::post(
                "/v1/responses/",
                r#"{"input":"hello","\u0070revious_response_id":"r"}"#,
            ),
            refused_if_modelled("/v1/responses"),
        ),
    ];
    for (form, q, exp) in combos {
        cases.push(Case::one(format!("combined:{form}"), q, exp));
    }
    cases
}

/// Legitimate short requests in every form that is legitimate at all: each
/// must arrive, at the canonical path, equal in meaning to what was sent.
#[allow(
    clippy::too_many_lines,
    reason = "a list of cases, one per form; reads as a table, top to bottom"
)]
pub fn legitimate() -> Vec<Case> {
    let mut cases = Vec::new();
    let all = routes();
    let ok = |r: &RouteDef, body: &Value| arrives(r.path, body.clone());
    for r in &all {
        let b = (r.body)(SHORT);
        cases.push(Case::one(
            format!("route:{} {}", r.method, r.path),
            req(r, text(&b)),
            ok(r, &b),
        ));
        for (form, target) in equivalent_paths(r.path) {
            cases.push(Case::one(
                format!("path:{form} {} {target}", r.method),
                req(r, text(&b)).target(target),
                ok(r, &b),
            ));
        }
        let name = |f: &str| format!("json:{f} {} {}", r.method, r.path);
        cases.push(Case::one(
            name("escaped-key"),
            req(r, escaped_key(&b, r.key)),
            ok(r, &b),
        ));
        cases.push(Case::one(
            name("escaped-content"),
            req(r, escaped_content(&b)),
            ok(r, &b),
        ));
        cases.push(Case::one(
            name("pretty-whitespace"),
            req(r, serde_json::to_string_pretty(&b).unwrap()),
            ok(r, &b),
        ));
    }
    for p in [
        "/v1/chat/completions",
        "/generate",
        "/v1/completions",
        "/v1/embeddings",
        "/api/generate",
    ] {
        let r = route(p);
        let b = (r.body)(SHORT);
        for (form, ct, accepted) in CONTENT_TYPES {
            if *accepted {
                cases.push(Case::one(
                    format!("content-type:{form} {p}"),
                    req(&r, text(&b)).header("content-type", *ct),
                    ok(&r, &b),
                ));
            }
        }
        cases.push(Case::one(
            format!("encoding:content-encoding-identity {p}"),
            req(&r, text(&b)).header("content-encoding", Some("identity")),
            ok(&r, &b),
        ));
    }
    for p in ["/v1/chat/completions", "/generate"] {
        let r = route(p);
        let b = (r.body)(SHORT);
        cases.push(Case::one(
            format!("framing:chunked-1-byte {p}"),
            req(&r, text(&b)).framing(Framing::Chunked(1)),
            ok(&r, &b),
        ));
        cases.push(Case::one(
            format!("framing:expect-continue {p}"),
            req(&r, text(&b)).add_header("expect", "100-continue"),
            ok(&r, &b),
        ));
        let b2 = (r.body)("hello world");
        cases.push(Case {
            name: format!("pipeline:short-then-short {p}"),
            reqs: vec![
                (req(&r, text(&b)), ok(&r, &b)),
                (req(&r, text(&b2)).framing(Framing::Chunked(3)), ok(&r, &b2)),
            ],
        });
    }
    let lax_ids = json!(["1", 2.0, true]);
    let short = [
        (
            "lax:generate-ids",
            "/generate",
            json!({"input_ids": lax_ids}),
        ),
        (
            "lax:completions-ids",
            "/v1/completions",
            json!({"prompt": lax_ids}),
        ),
        (
            "lax:embeddings-ids",
            "/v1/embeddings",
            json!({"input": lax_ids}),
        ),
        (
            "lax:score-item-first-yes",
            "/v1/score",
            json!({"query": "hello", "items": ["world"], "item_first": "yes"}),
        ),
        (
            "lax:generate-embeds",
            "/generate",
            json!({"input_embeds": [[0.5], [0.25]]}),
        ),
        (
            "batch:completions-text",
            "/v1/completions",
            json!({"prompt": ["hello", "hello world"]}),
        ),
        (
            "batch:completions-ids",
            "/v1/completions",
            json!({"prompt": [[1, 2], [3]]}),
        ),
        (
            "batch:generate-text",
            "/generate",
            json!({"text": ["hello", "world"]}),
        ),
        (
            "batch:generate-ids",
            "/generate",
            json!({"input_ids": [[1, 2], [3, 4, 5]]}),
        ),
        (
            "batch:generate-embeds",
            "/generate",
            json!({"input_embeds": [[[0.5]], [[0.5], [0.5]]]}),
        ),
        (
            "batch:embeddings-text",
            "/v1/embeddings",
            json!({"input": ["hello", "world"]}),
        ),
        (
            "batch:classify-v1",
            "/v1/classify",
            json!({"input": ["hello", "world"]}),
        ),
        (
            "batch:encode-pairs",
            "/encode",
            json!({"text": [["hello", "world"], ["world", "hello"]]}),
        ),
        (
            "batch:rerank",
            "/v1/rerank",
            json!({"query": "hello", "documents": ["hello", "world"]}),
        ),
        (
            "batch:score-ids",
            "/v1/score",
            json!({"query": [1], "items": [[1], [2, 3]]}),
        ),
        (
            "batch:vertex-instances",
            "/vertex_generate",
            json!({"instances": [{"text": "hello"}, {"text": "world"}]}),
        ),
        (
            "batch:vertex-parameters",
            "/vertex_generate",
            json!({"instances": [{}], "parameters": {"text": "hello"}}),
        ),
    ];
    for (name, p, body) in short {
        cases.push(Case::one(
            format!("{name} {p}"),
            Req::post(p, text(&body)),
            arrives(p, body),
        ));
    }
    let b = (route("/v1/chat/completions").body)(SHORT);
    cases.push(Case::one(
        "combined:encoded-slash+escaped-key+chunked+latin1",
        Req::post("/v1/chat%2Fcompletions/", escaped_key(&b, "messages"))
            .framing(Framing::Chunked(2))
            .header("content-type", Some("Application/JSON; charset=latin1")),
        arrives("/v1/chat/completions", b),
    ));
    cases
}
