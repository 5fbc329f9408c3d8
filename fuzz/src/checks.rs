//! The properties the fuzz targets check, one function per target. Each
//! panics when its property fails; an input that makes one panic is a bug.
//!
//! This file is compiled twice: into the fuzz crate (`fuzz/src/lib.rs`) and
//! into `crates/inspect/tests/inspect/fuzz_regressions.rs`, which replays every input under
//! `fuzz/seeds/` and `fuzz/regressions/` on stable Rust in the ordinary test
//! run. A fuzz finding is fixed once and kept as a regression test.
//!
//! Beyond "no panic", every target checks something a wrong answer would
//! break: the framing sniffer decides the same however the bytes arrive,
//! a canonical path is a fixed point, the strict JSON reader reads what a
//! lenient one reads and its canonical bytes read back to the same tree,
//! and a counted body is never undercounted by the fast paths.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use prefill_guard_count::model::CheckpointTemplates;
use prefill_guard_count::py::json_loads;
use prefill_guard_count::template::RenderContext;
use prefill_guard_count::{
    ChatTemplate, Clock, CountMethod, CountPolicy, ModelCounter, TokenizerClass, TokenizerConfig,
};
use prefill_guard_inspect::framing::Sniffer;
use prefill_guard_inspect::json::{canonical, parse_reference, parse_strict, read_strict};
use prefill_guard_inspect::path::canonical_path;
use prefill_guard_inspect::{extract as extract_units, Route};
use serde_json::{json, Map, Value};

/// The fixture directory (`PREFILL_GUARD_SHARED`, else `../shared` beside the repo).
pub fn shared_dir(repo: &Path) -> PathBuf {
    std::env::var_os("PREFILL_GUARD_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared"))
}

/// How many requests of a connection the framing check compares.
const REQUESTS_COMPARED: u64 = 16;

/// HTTP/1 framing: the sniffer's verdict on each request of a connection
/// (allowed or refused) is the same whether the bytes arrive at once or in
/// pieces (TCP may split them anywhere). The first byte seeds the piece
/// sizes; the rest is the stream.
pub fn framing(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let mut whole = Sniffer::default();
    whole.feed(stream);

    let mut pieces = Sniffer::default();
    let mut state = u32::from(seed) | 0x100;
    let mut rest = stream;
    while !rest.is_empty() {
        // xorshift: piece sizes 1..=17, reproducible from the seed
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let take = (state % 17 + 1) as usize;
        let (piece, after) = rest.split_at(take.min(rest.len()));
        pieces.feed(piece);
        rest = after;
    }
    // Allowed or refused must agree; the reason may not: a bad request line
    // is named as such when its head ends in the bytes at hand, and as
    // framing that could not be followed when it is still incomplete.
    for index in 0..REQUESTS_COMPARED {
        let (a, b) = (whole.verdict(index), pieces.verdict(index));
        assert_eq!(
            a.is_ok(),
            b.is_ok(),
            "request {index}: the verdict depends on how the bytes were split ({a:?} / {b:?})"
        );
    }
}

/// Path canonicalisation: a canonical path is plain (no spelling the guard
/// would have to guess about) and canonicalises to itself.
pub fn path(data: &[u8]) {
    let Ok(uri) = http::Uri::try_from(data) else {
        return;
    };
    let Ok(path) = canonical_path(&uri) else {
        return;
    };
    assert!(path.starts_with('/'), "{path:?} is not absolute");
    assert!(path == "/" || !path.ends_with('/'), "{path:?} ends with /");
    assert!(
        !path.contains(['%', ';', '?', '#', '\\']) && !path.chars().any(char::is_control),
        "{path:?} holds a character no route has"
    );
    assert!(
        path == "/"
            || path[1..]
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."),
        "{path:?} has an empty, `.` or `..` segment"
    );
    // Decoded text may hold characters a request target cannot (spaces,
    // non-ASCII); those cannot be sent again as they are.
    if let Ok(again) = http::Uri::try_from(path.as_str()) {
        assert_eq!(
            canonical_path(&again).ok().as_deref(),
            Some(path.as_str()),
            "canonicalising {path:?} again changed it"
        );
    }
}

/// Strict JSON: what it accepts, Python's reader reads the same way (no
/// duplicate key slipped through), and the canonical bytes forwarded upstream
/// are serde_json's own and read back to the same tree.
pub fn json(data: &[u8]) {
    // The request path's one-pass reader gives serde_json's verdict: the
    // same tree, or the same refusal, and canonical bytes of that tree.
    let reference = parse_reference(data);
    let fast = read_strict(&bytes::Bytes::copy_from_slice(data));
    match (&reference, &fast) {
        (Ok(v), Ok(strict)) => {
            assert_eq!(&strict.value, v, "the one-pass reader reads another tree");
            assert_eq!(
                &strict.canonical[..],
                &canonical(v, data.len())[..],
                "the one-pass reader spells other canonical bytes"
            );
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("the readers disagree: reference {reference:?}, reader {fast:?}"),
    }
    let Ok(value) = parse_strict(data) else {
        return;
    };
    // What Python reads (json.loads / orjson, duplicates aside): serde_json's
    // own `Value` is no reference, it refuses its private raw-value key.
    let text = std::str::from_utf8(data).expect("accepted JSON is UTF-8");
    let lenient = json_loads(text).expect("Python's reader accepts it too");
    assert_eq!(lenient, value, "the strict reader and Python's disagree");
    let bytes = canonical(&value, data.len());
    assert_eq!(
        &bytes[..],
        &serde_json::to_vec(&value).expect("serialisable")[..],
        "canonical bytes differ from serde_json's"
    );
    let again = parse_strict(&bytes).expect("canonical bytes parse strictly");
    assert_eq!(again, value, "canonical bytes read back differently");
}

/// What the extract target counts with: a real tokenizer that has an upper
/// bound, so the fast path is exercised too.
pub struct Counter(ModelCounter);

/// The fixture the extract target counts with.
const EXTRACT_FIXTURE: &str = "qwen2.5";

impl Counter {
    pub fn load(shared: &Path) -> Self {
        let dir = shared.join("tokenizers").join(EXTRACT_FIXTURE);
        let counter = ModelCounter::load(&dir)
            .unwrap_or_else(|e| panic!("cannot load {}: {e}", dir.display()));
        assert!(counter.has_bound(), "{EXTRACT_FIXTURE} should have a bound");
        Self(counter)
    }
}

fn clock() -> Clock {
    Clock::Fixed(
        chrono::NaiveDate::from_ymd_opt(2026, 1, 2)
            .and_then(|d| d.and_hms_opt(3, 4, 5))
            .expect("a valid date"),
    )
}

/// Route extraction and counting: the first byte picks the route, the rest
/// is the body. Whatever the body, extraction and counting answer (a count
/// or a refusal, never a panic), the same answer twice, and neither fast
/// path undercounts: an upper bound is at least the exact count, and a count
/// stopped early at a limit is at least that limit.
pub fn extract(counter: &Counter, data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let routes: Vec<Route> = Route::all().collect();
    let route = routes[usize::from(pick) % routes.len()];
    let Ok(value) = parse_strict(body) else {
        return;
    };
    let Ok(request) = extract_units(route, Arc::new(value)) else {
        return;
    };
    assert_eq!(request.route, route);
    let counter = &counter.0;
    for unit in &request.units {
        let Ok(exact) = counter.count(unit, clock()) else {
            continue;
        };
        assert_eq!(
            counter.count(unit, clock()).ok(),
            Some(exact),
            "counting twice gave two answers"
        );
        if let Ok(Some(decided)) = counter.decide_by_bound(unit, clock(), usize::MAX) {
            assert!(
                decided.tokens >= exact,
                "the upper bound {} is under the exact count {exact}",
                decided.tokens
            );
        }
        if exact > 0 {
            let limit = exact.div_ceil(2);
            let stopped = counter
                .count_exact(
                    unit,
                    clock(),
                    CountPolicy {
                        limit: Some(limit),
                        exact_only: true,
                        parallel: false,
                        cache: None,
                    },
                )
                .expect("a unit that counts also counts with a limit");
            assert!(
                stopped.tokens >= limit,
                "stopped at {} under the limit {limit} (exact {exact})",
                stopped.tokens
            );
            if stopped.method == CountMethod::Exact {
                assert_eq!(stopped.tokens, exact);
            }
        }
    }
}

/// Every chat template the fixtures ship, compiled.
pub struct Templates(Vec<Fixture>);

struct Fixture {
    /// `dir:name`, for the failure message.
    label: String,
    template: ChatTemplate,
    /// The tokenizer's named special tokens (`bos_token`, ...).
    specials: Vec<(String, String)>,
}

impl Templates {
    pub fn load(shared: &Path) -> Self {
        let root = shared.join("tokenizers");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let mut all = Vec::new();
        for dir in dirs {
            let config = TokenizerConfig::load(&dir).expect("tokenizer_config.json");
            let specials = config.special_tokens_map(
                TokenizerClass::from_declared(config.declared_class())
                    .unwrap_or(TokenizerClass::Backend),
            );
            let templates = CheckpointTemplates::load(&dir).expect("templates");
            for (name, source) in templates.all() {
                let label = format!("{}:{name}", dir.display());
                let compiled = ChatTemplate::new(source)
                    .unwrap_or_else(|e| panic!("{label} does not compile: {}", e.0));
                all.push(Fixture {
                    label,
                    template: compiled,
                    specials: specials.clone(),
                });
            }
        }
        assert!(!all.is_empty(), "no chat template under {}", root.display());
        Self(all)
    }
}

/// The template engine: the first byte picks a fixture's template, the rest
/// is a JSON object with `messages` (and optionally `tools`, `documents`,
/// `chat_template_kwargs`, `add_generation_prompt`), or any other bytes,
/// sent as one user message. Rendering answers (a prompt or a template
/// error, never a panic) and answers the same twice.
pub fn template(templates: &Templates, data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Fixture {
        label,
        template,
        specials,
    } = &templates.0[usize::from(pick) % templates.0.len()];
    let request = match serde_json::from_slice::<Value>(rest) {
        Ok(Value::Object(o)) if o.contains_key("messages") => Value::Object(o),
        _ => json!({"messages": [{"role": "user", "content": String::from_utf8_lossy(rest)}]}),
    };
    let empty = Map::new();
    let ctx = RenderContext {
        messages: &request["messages"],
        tools: request.get("tools").filter(|t| !t.is_null()),
        documents: request.get("documents").filter(|d| !d.is_null()),
        add_generation_prompt: request
            .get("add_generation_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        special_tokens: &prefill_guard_count::template::string_variables(specials),
        extra: request
            .get("chat_template_kwargs")
            .and_then(Value::as_object)
            .unwrap_or(&empty),
        now: clock().now(),
    };
    let first = template.render(&ctx).map_err(|e| e.0);
    let second = template.render(&ctx).map_err(|e| e.0);
    assert_eq!(first, second, "{label} rendered twice, differently");
}
