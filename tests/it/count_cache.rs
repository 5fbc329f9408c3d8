//! The count cache (`count/cache.rs`) never changes a count.
//!
//! * Random conversations, grown turn by turn as an agent resends them, on
//!   every fixture and under every server profile of
//!   `shared/goldens/profiles`: each count through the cache (every text on
//!   the cached path, however short) equals a fresh count, exact or stopped
//!   at a limit, and later turns do hit.
//! * Every profile golden counted cold, then warm, through the cache gives
//!   SGLang's count.
//! * The real binary in front of a mock SGLang: a resend hits, another
//!   tenant's resend misses, and the verdicts are the uncached ones.

use crate::common;
use crate::common::shared;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use prefill_guard::count::cache::{CacheCounters, CacheScope, CountCache, Partition};
use prefill_guard::count::{Clock, CountMethod, CountPolicy, ModelCounter, Unit};
use proptest::prelude::*;
use serde_json::{json, Value};

fn clock() -> Clock {
    Clock::Fixed(
        chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
            .unwrap()
            .and_hms_opt(12, 0, 0)
            .unwrap(),
    )
}

/// A cache that takes every text, so short fixtures exercise it too.
fn scope(partition: u64) -> CacheScope {
    CacheScope {
        cache: Arc::new(
            CountCache::new(64 << 20, Arc::new(CacheCounters::default())).with_min_text_bytes(0),
        ),
        partition: Partition(partition),
    }
}

fn profiles_index(shared: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(shared.join("goldens/profiles/PROFILES.json"))
            .expect("goldens/profiles/PROFILES.json"),
    )
    .unwrap()
}

/// A profile's counter, built as `count --server-info` builds it: the
/// fixture with the profile's `config.json`, SGLang's default
/// `/server_info` with the profile's fields set.
fn profile_counter(shared: &Path, profile: &Value, tmp: &Path) -> Option<Arc<ModelCounter>> {
    let fixture = profile["fixture"].as_str().unwrap();
    let src = shared.join("tokenizers").join(fixture);
    if !src.join("tokenizer.json").exists() {
        return None; // template-only fixture: nothing is tokenized
    }
    let dir = tmp.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    if !dir.join("config.json").exists() {
        std::fs::write(dir.join("config.json"), profile["config_json"].to_string()).unwrap();
    }
    let mut info: Value =
        serde_json::from_str(include_str!("../data/server_info_defaults.json")).unwrap();
    for (k, v) in profile["server_info"].as_object().unwrap() {
        info[k] = v.clone();
    }
    let observed = prefill_guard::count::serving::Observed::from_server(&info, None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let counter = rt
        .block_on(prefill_guard::load::counter_for_server(
            &dir.display().to_string(),
            "main",
            &Default::default(),
            Some(("server_info".into(), observed)),
        ))
        .unwrap()
        .ok()?;
    Some(counter)
}

/// Every fixture's counter with SGLang's default flags, then every
/// profile's; those that cannot count chat are left out.
type Named = (String, Arc<ModelCounter>);

fn counters() -> Option<&'static [Named]> {
    static CELL: OnceLock<Option<Vec<Named>>> = OnceLock::new();
    CELL.get_or_init(|| {
        let shared = shared::shared_dir()?;
        let hello = Unit::Chat(Arc::new(
            json!({"messages": [{"role": "user", "content": "hello"}]}),
        ));
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(shared.join("tokenizers"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("tokenizer.json").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            if let Ok(c) = ModelCounter::load(&shared.join("tokenizers").join(&name)) {
                out.push((name, Arc::new(c)));
            }
        }
        let index = profiles_index(&shared);
        for (name, profile) in index["profiles"].as_object().unwrap() {
            let tmp = tempfile::tempdir().unwrap();
            if let Some(c) = profile_counter(&shared, profile, tmp.path()) {
                out.push((format!("profile {name}"), c));
            }
        }
        out.retain(|(_, c)| c.count(&hello, clock()).is_ok());
        Some(out)
    })
    .as_deref()
}

const WORDS: &[&str] = &[
    "the",
    "agent",
    "reads",
    "file",
    "src/main.rs",
    "and",
    "calls",
    "tool",
    "grep",
    "with",
    "pattern",
    "fn",
    "main()",
    "{",
    "}",
    "let",
    "x",
    "=",
    "42;",
    "résumé",
    "naïve",
    "中文",
    "测试",
    "😀",
    "café",
    "<|im_end|>",
    "<|endoftext|>",
    "\n",
    "\n\n",
    "  ",
    "\t",
    "def",
    "return",
    "None",
    "Error:",
    "line",
    "3",
    "12345",
    "(ok)",
    "->",
    "#",
    "//",
    "é",
];

/// One turn: `words` words of code-ish prose from the seed.
fn turn(seed: u64, words: usize) -> String {
    let mut x = seed | 1;
    let mut s = String::new();
    for _ in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
        s.push(if x.is_multiple_of(7) { '\n' } else { ' ' });
    }
    s
}

/// The conversation after `turns` turns: user and assistant alternate, and
/// a system prompt leads, as an agent's session does.
fn conversation(seeds: &[(u64, usize)]) -> Unit {
    let mut messages = vec![json!({"role": "system", "content": turn(7, 600)})];
    for (i, (seed, words)) in seeds.iter().enumerate() {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": turn(*seed, *words)}));
    }
    if seeds.len().is_multiple_of(2) {
        messages.push(json!({"role": "user", "content": "go on"}));
    }
    Unit::Chat(Arc::new(json!({ "messages": messages })))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn growing_conversations_count_the_same_through_the_cache(
        seeds in prop::collection::vec((any::<u64>(), 50usize..1500), 6),
        limit_frac in 0.3f64..1.2,
    ) {
        let Some(counters) = counters() else { return Ok(()) };
        for (name, counter) in counters {
            let cached = scope(1);
            let mut hits_seen = 0;
            for n in 1..=seeds.len() {
                let unit = conversation(&seeds[..n]);
                let Ok(fresh) = counter.count(&unit, clock()) else { continue };
                for parallel in [false, true] {
                    let policy = CountPolicy {
                        parallel,
                        exact_only: true,
                        cache: Some(cached.clone()),
                        ..CountPolicy::default()
                    };
                    let c = counter.count_with(&unit, clock(), policy).unwrap();
                    prop_assert_eq!(c.tokens, fresh, "{} after {} turns", name, n);
                    prop_assert_eq!(c.method, CountMethod::Exact);
                    // Stopped at a limit: a lower bound at or above it, and
                    // the same verdict as the fresh count.
                    let limit = ((fresh as f64 * limit_frac) as usize).max(1);
                    let policy = CountPolicy {
                        limit: Some(limit),
                        parallel,
                        exact_only: true,
                        cache: Some(cached.clone()),
                    };
                    let c = counter.count_with(&unit, clock(), policy).unwrap();
                    match c.method {
                        CountMethod::Exact => prop_assert_eq!(c.tokens, fresh, "{}", name),
                        CountMethod::EarlyExit => prop_assert!(
                            c.tokens >= limit && c.tokens <= fresh,
                            "{}: stopped at {} for limit {} (exact {})", name, c.tokens, limit, fresh
                        ),
                        CountMethod::Bound => prop_assert!(false, "exact_only decided by bound"),
                    }
                    prop_assert_eq!(c.tokens >= limit, fresh >= limit, "{}", name);
                }
                hits_seen = cached.cache.counters().hits.load(Ordering::Relaxed);
            }
            // Not vacuous: the tokenizers the cut is argued for remember.
            let tokenizer_cuts = counter.tokenizer().map(|t| t.text_cuts().is_ok()).unwrap_or(false);
            if tokenizer_cuts {
                prop_assert!(hits_seen > 0, "{}: no piece was ever remembered", name);
            }
        }
    }
}

/// Which counters the property above runs on, and which of them cache.
#[test]
fn the_property_covers_every_fixture_and_profile() {
    let Some(counters) = counters() else { return };
    let shared = shared::shared_dir().unwrap();
    let caching: Vec<&str> = counters
        .iter()
        .filter(|(_, c)| c.tokenizer().is_ok_and(|t| t.text_cuts().is_ok()))
        .map(|(n, _)| n.as_str())
        .collect();
    println!("counters: {}", counters.len());
    println!("remember piece counts: {caching:?}");
    let profiles = profiles_index(&shared)["profiles"]
        .as_object()
        .unwrap()
        .len();
    assert!(
        counters
            .iter()
            .filter(|(n, _)| n.starts_with("profile "))
            .count()
            + 2
            >= profiles,
        "most profiles count chat"
    );
    for name in ["qwen3", "llama-3.2", "gpt-oss", "deepseek-v3"] {
        assert!(
            caching.contains(&name),
            "{name} should remember: {caching:?}"
        );
    }
}

/// Every profile golden, counted through the cache cold and then warm,
/// is SGLang's count.
#[test]
fn profile_goldens_match_sglang_cold_and_warm() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let index = profiles_index(&shared);
    let mut checked = 0;
    let mut warm_hits = 0;
    for (name, profile) in index["profiles"].as_object().unwrap() {
        let tmp = tempfile::tempdir().unwrap();
        let Some(counter) = profile_counter(&shared, profile, tmp.path()) else {
            continue;
        };
        let cached = scope(9);
        let goldens =
            std::fs::read_to_string(shared.join(format!("goldens/profiles/{name}.jsonl"))).unwrap();
        for pass in ["cold", "warm"] {
            for line in goldens.lines().filter(|l| !l.trim().is_empty()) {
                let golden: Value = serde_json::from_str(line).unwrap();
                let Some(want) = golden["tokens_sglang"].as_u64() else {
                    continue;
                };
                let case = golden["case"].as_str().unwrap();
                let request: Value = serde_json::from_str(
                    &std::fs::read_to_string(shared.join(format!("goldens/cases/{case}.json")))
                        .unwrap(),
                )
                .unwrap();
                let body = Arc::new(request["request"].clone());
                let route = prefill_guard::inspect::routes::Route::ChatCompletions;
                let extracted = prefill_guard::inspect::extract(route, body.clone()).unwrap();
                let units = counter.server_units(route, &body, extracted.units).unwrap();
                let policy = CountPolicy {
                    cache: Some(cached.clone()),
                    ..CountPolicy::default()
                };
                let got = counter
                    .count_with(&units[0], Clock::Fixed(date()), policy)
                    .unwrap()
                    .tokens;
                assert_eq!(got as u64, want, "{name}/{case} ({pass})");
                checked += 1;
            }
            if pass == "cold" {
                warm_hits = cached.cache.counters().hits.load(Ordering::Relaxed);
            }
        }
        assert!(
            counter.tokenizer().is_ok_and(|t| t.text_cuts().is_err())
                || cached.cache.counters().hits.load(Ordering::Relaxed) > warm_hits,
            "{name}: the warm pass remembered nothing"
        );
    }
    println!("profile goldens counted cold and warm: {checked}");
    assert!(checked > 100, "only {checked} goldens were counted");
}

fn date() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .unwrap()
        .and_hms_opt(12, 0, 0)
        .unwrap()
}

/// The real binary in front of a mock SGLang, with a real tokenizer and
/// exact counting so long prompts are tokenized: a tenant's resend is
/// remembered, another tenant's is not, and the verdicts do not change.
#[tokio::test]
async fn a_resend_hits_only_in_its_own_partition() {
    let Some(shared) = shared::shared_dir() else {
        return;
    };
    let mock = common::start_mock().await;
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("prefill-guard.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"http://{}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             log_format = \"json\"\nexact_counting = true\nname = \"qwen3\"\ntokenizer = {:?}\n\
             max_req_input_len = 40000\n",
            mock.addr,
            shared.join("tokenizers/qwen3").display().to_string()
        ),
    )
    .unwrap();
    let spawned = common::spawn_binary(&config).await;
    let listen = spawned.serving["listen"].as_str().unwrap().to_string();
    let admin = spawned.serving["admin_listen"]
        .as_str()
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    // About 25k tokens: under the limit, long enough for the cache.
    let history = turn(3, 20_000);
    let send = |credential: &'static str, text: String| {
        let http = http.clone();
        let url = format!("http://{listen}/v1/chat/completions");
        async move {
            let body = json!({"model": "qwen3", "messages": [{"role": "user", "content": text}]});
            http.post(url)
                .header("authorization", credential)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let series = |text: &str, name: &str| common::sample(text, name);
    assert_eq!(send("Bearer tenant-a", history.clone()).await, 200);
    let first = common::scrape(&http, &admin).await;
    let misses_cold = series(&first, "prefill_guard_count_cache_misses_total");
    assert!(misses_cold > 2.0, "a long prompt is counted in pieces");
    assert_eq!(series(&first, "prefill_guard_count_cache_hits_total"), 0.0);
    assert!(series(&first, "prefill_guard_count_cache_bytes") > 0.0);

    // The same tenant resends with one more turn: the history is remembered.
    let grown = format!("{history}\n{}", turn(11, 200));
    assert_eq!(send("Bearer tenant-a", grown.clone()).await, 200);
    let second = common::scrape(&http, &admin).await;
    let hits = series(&second, "prefill_guard_count_cache_hits_total");
    assert!(
        hits >= misses_cold - 2.0,
        "{hits} hits of {misses_cold} pieces"
    );

    // Another tenant sending the same text learns nothing from the cache.
    assert_eq!(send("Bearer tenant-b", grown.clone()).await, 200);
    let third = common::scrape(&http, &admin).await;
    assert_eq!(
        series(&third, "prefill_guard_count_cache_hits_total"),
        hits,
        "another tenant's resend must not hit"
    );
    assert_eq!(series(&third, "prefill_guard_count_cache_partitions"), 2.0);

    // Over the limit, remembered or not, the prompt is refused.
    let over = format!("{grown}{}", turn(13, 30_000));
    assert_eq!(send("Bearer tenant-a", over.clone()).await, 400);
    assert_eq!(send("Bearer tenant-a", over).await, 400);
    assert_eq!(
        mock.state.requests.lock().unwrap().len(),
        3,
        "only the three prompts under the limit reached the upstream"
    );
}
