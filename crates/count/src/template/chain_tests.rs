//! The `+` chain rewrite (`chains.rs`): what it rewrites, what it leaves
//! alone, and that every template renders as it does unrewritten.

use super::snippet_cases::{BASE_CONTEXT, SNIPPETS};
use super::tests::{config_special_tokens, fixed_now};
use super::*;

fn rewritten(src: &str) -> String {
    source::normalize(src, true).expect("normalizes")
}

#[test]
fn rewrites_only_provable_chains() {
    let cases: &[(&str, &str)] = &[
        ("{{ a + b + c }}", "{{ __pg_emit(a, b, c) }}"),
        // two operands: one copy either way
        ("{{ a + b }}", "{{ a + b }}"),
        (
            "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
            // (literals with escapes come out of `source` double-quoted, unescaped)
            "{{- __pg_emit('<|im_start|>', message.role, \"\n\", message.content, '<|im_end|>', \"\n\") }}",
        ),
        (
            "{%- set ns.p = ns.p + '\\n\\n' + message['content'] -%}",
            "{%- set ns.p = __pg_add(ns.p, \"\n\n\", message['content']) -%}",
        ),
        // `-` shares the level: `a + b - c` is `(a + b) - c`
        ("{{ a + b - c + d }}", "{{ a + b - c + d }}"),
        ("{{ a - b + c + d }}", "{{ a - b + c + d }}"),
        ("{{ a + -b + c }}", "{{ a + -b + c }}"),
        // tighter operators stay inside an operand
        ("{{ a + b ~ c + d }}", "{{ __pg_emit(a, b ~ c, d) }}"),
        ("{{ a * b + c // d + e ** f }}", "{{ __pg_emit(a * b, c // d, e ** f) }}"),
        ("{{ a + b|upper + c|join(', ') }}", "{{ __pg_emit(a, b|upper, c|join(', ')) }}"),
        ("{{ a + b|x.y(1) + c }}", "{{ __pg_emit(a, b|x.y(1), c) }}"),
        // looser ones cut
        ("{{ not a + b + c }}", "{{ not __pg_add(a, b, c) }}"),
        ("{{ a + b + c == d + e + f }}", "{{ __pg_add(a, b, c) == __pg_add(d, e, f) }}"),
        ("{{ x in a + b + c and y }}", "{{ x in __pg_add(a, b, c) and y }}"),
        ("{{ a not in b + c + d }}", "{{ a not in __pg_add(b, c, d) }}"),
        (
            "{{ a + b + c if d + e + f else g + h + i }}",
            "{{ __pg_add(a, b, c) if __pg_add(d, e, f) else __pg_add(g, h, i) }}",
        ),
        // brackets: their insides are levels of their own
        ("{{ (a + b + c) + d }}", "{{ (__pg_add(a, b, c)) + d }}"),
        ("{{ (a + b) + c + d }}", "{{ __pg_emit((a + b), c, d) }}"),
        ("{{ f(a + b + c, k=d + e + f)[0] }}", "{{ f(__pg_add(a, b, c), k=__pg_add(d, e, f))[0] }}"),
        ("{{ [a + b + c, {'k': d + e + f}] }}", "{{ [__pg_add(a, b, c), {'k': __pg_add(d, e, f)}] }}"),
        ("{{ x[a + b + c:] }}", "{{ x[__pg_add(a, b, c):] }}"),
        ("{{ m[i + 1 + 1].c + 'x' + 'y' }}", "{{ __pg_emit(m[__pg_add(i, 1, 1)].c, 'x', 'y') }}"),
        // literals: `+` inside a string is text; adjacent literals are one
        ("{{ 'a + b' + c + \"+\" }}", "{{ __pg_emit('a + b', c, \"+\") }}"),
        ("{{ 'a' 'b' + c + d }}", "{{ __pg_emit('a' 'b', c, d) }}"),
        // whitespace markers are not operators
        ("{{-a+b+c-}}", "{{-__pg_emit(a, b, c)-}}"),
        ("{%+ set x = a + b + c +%}", "{%+ set x = __pg_add(a, b, c) +%}"),
        // statements: only `if`/`elif` (and `=`, `in`) start an expression
        ("{% if(a) + b + c %}", "{% if __pg_add((a), b, c) %}"),
        ("{% elif a + b + c %}", "{% elif __pg_add(a, b, c) %}"),
        ("{% for x in a + b + c %}", "{% for x in __pg_add(a, b, c) %}"),
        ("{% filter f(a) + b + c %}", "{% filter f(a) + b + c %}"),
        ("{% include a + b + c %}", "{% include a + b + c %}"),
        ("{% set(a) + b + c %}", "{% set(a) + b + c %}"),
        // `is` tests take a bare argument, even a keyword: left alone
        ("{{ x is string + a + b }}", "{{ x is string + a + b }}"),
        ("{{ x is in a + b + c }}", "{{ x is in a + b + c }}"),
        ("{{ x is not in a + b + c }}", "{{ x is not in a + b + c }}"),
        ("{{ x is a.b if c + d + e }}", "{{ x is a.b if c + d + e }}"),
        ("{{ x is defined and a + b + c }}", "{{ x is defined and __pg_add(a, b, c) }}"),
        ("{{ y if x is defined else a + b + c }}", "{{ y if x is defined else __pg_add(a, b, c) }}"),
        // names after `.` or `|` are names, whatever they spell
        ("{{ a.if + b + c }}", "{{ __pg_emit(a.if, b, c) }}"),
        ("{{ a + b.in + c }}", "{{ __pg_emit(a, b.in, c) }}"),
        // what this lexer does not read exactly as minijinja does
        ("{{ 1e+5 + a + b }}", "{{ 1e+5 + a + b }}"),
        ("{{ 0x1f + a + b }}", "{{ 0x1f + a + b }}"),
        ("{{ x.0.y + a + b }}", "{{ x.0.y + a + b }}"),
        ("{{ é + a + b }}", "{{ é + a + b }}"),
        ("{{ a + b + c ! }}", "{{ a + b + c ! }}"),
        ("{{ a + b + c; }}", "{{ a + b + c; }}"),
        // not chains
        ("{{ a + b + }}", "{{ a + b + }}"),
        ("{{ a b + c + d }}", "{{ a b + c + d }}"),
        ("{{ a + b + c {d} }}", "{{ a + b + c {d} }}"),
        ("{{ a + b + c|upper[0] }}", "{{ a + b + c|upper[0] }}"),
        // comments and raw blocks are text
        ("{# a + b + c #}", "{# a + b + c #}"),
        ("{% raw %}{{ a + b + c }}{% endraw %}", "{% raw %}{{ a + b + c }}{% endraw %}"),
        // literals are normalised first, then chained
        ("{{ 'a\\x41' + b + c }}", "{{ __pg_emit(\"aA\", b, c) }}"),
    ];
    let mut failures = Vec::new();
    for (src, want) in cases {
        let got = rewritten(src);
        if got != *want {
            failures.push(format!("{src}\n  want {want}\n   got {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn templates_that_could_see_the_rewrite_are_not_rewritten() {
    for src in [
        "{% autoescape true %}{{ a + b + c }}{% endautoescape %}",
        "{{ a + b + c }}{{ __pg_add }}",
    ] {
        assert!(!chains::may_rewrite(src), "{src}");
        let tmpl = ChatTemplate::new(src).expect("compiles");
        assert!(!tmpl.chains, "{src}");
    }
    assert!(
        ChatTemplate::new("{{ a + b + c }}")
            .expect("compiles")
            .chains
    );
}

fn render(
    tmpl: &ChatTemplate,
    messages: &Value,
    extra: &Map<String, Value>,
) -> Result<String, TemplateError> {
    tmpl.render(&RenderContext {
        messages,
        tools: None,
        documents: None,
        add_generation_prompt: true,
        special_tokens: &[],
        extra,
        now: fixed_now(),
    })
}

/// Renders `src` rewritten and as written; both must render the same text
/// or both raise. Returns whether the rewrite changed the source.
fn same_as_written(
    src: &str,
    messages: &Value,
    extra: &Map<String, Value>,
) -> Result<bool, String> {
    let on = ChatTemplate::build(src, true);
    let off = ChatTemplate::build(src, false);
    let (on, off) = match (on, off) {
        (Ok(on), Ok(off)) => (on, off),
        (Err(_), Err(_)) => {
            return Ok(rewritten(src) != source::normalize(src, false).expect("normalizes"))
        }
        (on, off) => {
            return Err(format!(
                "{src}: compiles {} rewritten, {} as written",
                on.is_ok(),
                off.is_ok()
            ))
        }
    };
    match (render(&on, messages, extra), render(&off, messages, extra)) {
        (Ok(a), Ok(b)) if a == b => {}
        (Err(_), Err(_)) => {}
        (a, b) => {
            return Err(format!(
                "{src}\n  rewritten:  {:?}\n  as written: {:?}",
                a.map(|s| s.chars().take(200).collect::<String>()),
                b.map(|s| s.chars().take(200).collect::<String>())
            ))
        }
    }
    Ok(rewritten(src) != source::normalize(src, false).expect("normalizes"))
}

fn chain_context() -> Map<String, Value> {
    let long = "long ".repeat(40_000);
    serde_json::json!({
        "a": "A", "b": "b", "c": "\u{1f600}", "e": "",
        "long": long,
        "i": 1, "j": 2, "big": 9223372036854775807_i64, "u": 18446744073709551615_u64, "fl": 0.5,
        "t": true, "n": null,
        "xs": [1, 2], "ys": ["y"], "d": {"k": "v"},
        "html": "<&>",
        "msgs": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
        ],
    })
    .as_object()
    .cloned()
    .expect("object")
}

/// `+` chains over every kind of operand, rewritten and as written. Each
/// line is rewritten (checked), so each exercises `chains::add`.
#[test]
fn chains_compute_what_minijinja_computes() {
    let cases = [
        // strings, short and long, safe and not
        "{{ a + b + c }}",
        "{{ a + e + e + b }}",
        "{{ a + long + b + long }}",
        "{{ (a + b + c)|length }}|{{ (long + long + a)|length }}",
        "{{ ((html|safe) + (html|safe) + (html|safe))|escape }}",
        "{{ ((html|safe) + html + (html|safe))|escape }}",
        "{{ (a + b + c) is string }}|{{ (a + b + c)[1:] }}|{{ (a + b + c).upper() }}",
        // numbers: integer, wide integer, float, bool
        "{{ i + j + 3 }}|{{ big + big + 1 }}|{{ u + u + u }}|{{ i + fl + 1 }}|{{ t + t + i }}",
        "{{ 1 + 2 * 3 + 4 }}|{{ 2 ** 3 + 1 + i }}|{{ 7 // 2 + 1 + 1 }}",
        // sequences
        "{{ xs + ys + xs }}|{{ (xs + xs + xs)|length }}|{{ (1,) + (2,) + (3,) }}",
        "{{ [1] + [2] + [3] }}",
        "{% for x in xs + ys + xs %}{{ x }},{% endfor %}",
        // mixed types: errors stay errors
        "{{ a + 1 + b }}",
        "{{ 1 + a + b }}",
        "{{ i + j + a }}",
        "{{ xs + a + b }}",
        "{{ a + b + xs }}",
        "{{ a + b + n }}",
        "{{ a + b + t }}",
        "{{ d + d + d }}",
        "{{ xs + (1,) + xs }}",
        "{{ (1,) + (2,) + xs }}",
        // undefined
        "{{ missing + a + b }}",
        "{{ a + missing + b }}",
        "{{ a + b + missing }}",
        "{{ missing + missing + missing }}",
        "{{ d.nope + a + b }}",
        "{{ (missing + 1 + 2) is defined }}",
        // precedence with neighbours
        "{{ a + b ~ c + b }}|{{ a ~ b + c + a ~ b }}",
        "{{ a + b|upper + c }}|{{ a + b + c|upper }}",
        "{{ not a + b + c }}|{{ not e + e + e }}",
        "{{ a + b + c == 'Ab\u{1f600}' }}|{{ a + b + c != a + b + c }}",
        "{{ a + b + c > 'A' }}|{{ a in a + b + c }}",
        "{{ ((a + b + c) + (c + b + a)) + a }}",
        "{{ 'a+b' + '+' + c + \"'+'\" }}",
        "{{ a + b + c if t else 'no' }}|{{ 'no' if not t else a + b + c }}",
        "{{ a + b + c if n }}",
        "{{ [a + b + c, i + j + 1]|tojson }}",
        "{{ {'k': a + b + c}['k'] }}",
        // whole `{{ }}` chains (`chains::emit`): printed into captures,
        // filter blocks, macros and loops; non-strings folded as `+`
        "{% set x %}{{ a + long + b }}{% endset %}{{ x|length }}{{ x[:3] }}",
        "{% filter upper %}{{ a + b + c }}{% endfilter %}",
        "{% macro m(p) %}{{ p + a + long }}{% endmacro %}{{ m('q')|length }}{{ m('q')[:3] }}",
        "{% for m in msgs %}{{- m.role + ': ' + m.content + '\\n' -}}{% if loop.first %}{% continue %}{% endif %}{% endfor %}",
        "{{ i + j + 1 }}|{{ xs + ys + xs }}|{{ fl + i + t }}",
        "{{ a + missing + b }}",
        "{{ (html|safe) + html + c }}",
        "{{ e + e + e }}[]",
        // accumulation, as templates build system prompts
        "{% set s = '' %}{% for m in msgs %}{% set s = s + m.role + ': ' + m.content + '\\n' %}{% endfor %}{{ s }}",
        "{% set ns = namespace(p='') %}{% for m in msgs %}{% set ns.p = ns.p + m.content + long + '|' %}{% endfor %}{{ ns.p|length }}",
        // functions and methods as operands; raising ones
        "{{ a + raise_exception('boom') + b }}",
        "{{ a.lower() + b.upper() + c }}|{{ msgs[0]['role'] + msgs[1].role + a }}",
        "{{ a + (b if t else c) + c }}",
        "{{ a + b + range(3)|join(',') }}",
    ];
    let messages = Value::Array(vec![]);
    let extra = chain_context();
    let mut failures = Vec::new();
    for src in cases {
        match same_as_written(src, &messages, &extra) {
            Ok(true) => {}
            Ok(false) => failures.push(format!("{src}: not rewritten")),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A variable named like the function (a `chat_template_kwargs` key) does
/// not reach the rewritten template, which never names it.
#[test]
fn a_variable_named_like_the_function_does_not_shadow_it() {
    let mut extra = chain_context();
    extra.insert(chains::ADD.into(), Value::from(1));
    assert_eq!(
        same_as_written("{{ a + b + c }}", &Value::Array(vec![]), &extra),
        Ok(true)
    );
}

/// The generated Jinja2 snippet cases, rewritten and as written.
#[test]
fn snippets_render_as_written() {
    let base: Map<String, Value> = serde_json::from_str(BASE_CONTEXT).expect("base context");
    let mut failures = Vec::new();
    for (src, _) in SNIPPETS {
        if let Err(e) = same_as_written(src, &Value::Array(vec![]), &base) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn fixture_template(dir: &std::path::Path) -> Option<String> {
    if let Ok(src) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
        return Some(src);
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?)
            .ok()?;
    config.get("chat_template")?.as_str().map(str::to_owned)
}

fn long_conversations() -> Vec<Value> {
    let long = "All work and no play makes Jack a dull boy.\n".repeat(3_200);
    vec![
        serde_json::json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": long},
        ]),
        serde_json::json!([
            {"role": "system", "content": long},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": long},
            {"role": "user", "content": long},
        ]),
        serde_json::json!([
            {"role": "user", "content": [{"type": "text", "text": long}]},
        ]),
    ]
}

/// Every fixture template, rewritten and as written, on the fixture cases,
/// the random conversations and long messages: the same bytes.
#[test]
fn fixture_templates_render_as_written() {
    let Some(shared) = crate::shared_dir() else {
        return;
    };
    let fixtures: Value = serde_json::from_str(include_str!("testdata/fixtures_expected.json"))
        .expect("fixture cases");
    let random: Value = serde_json::from_str(include_str!("testdata/random_expected.json"))
        .expect("random conversations");
    let mut corpus: Vec<(Value, Option<Value>, Map<String, Value>)> = Vec::new();
    let extra_of = |c: &Value| {
        c.get("extra")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    for case in fixtures["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(random["conversations"].as_array().into_iter().flatten())
    {
        corpus.push((
            case["messages"].clone(),
            case.get("tools").cloned(),
            extra_of(case),
        ));
    }
    for messages in long_conversations() {
        corpus.push((messages, None, Map::new()));
    }
    let mut failures = Vec::new();
    let mut rewritten_fixtures = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(shared.join("tokenizers"))
        .expect("tokenizers")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("tokenizer_config.json").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let Some(src) = fixture_template(&dir) else {
            continue; // no chat template (the DeepSeek encoders)
        };
        let (Ok(on), Ok(off)) = (
            ChatTemplate::build(&src, true),
            ChatTemplate::build(&src, false),
        ) else {
            failures.push(format!("{name}: does not compile"));
            continue;
        };
        if rewritten(&src) != source::normalize(&src, false).expect("normalizes") {
            rewritten_fixtures.push(name.clone());
        }
        let special = config_special_tokens(&dir);
        for (i, (messages, tools, extra)) in corpus.iter().enumerate() {
            let ctx = RenderContext {
                messages,
                tools: tools.as_ref(),
                documents: None,
                add_generation_prompt: true,
                special_tokens: &special,
                extra,
                now: fixed_now(),
            };
            match (on.render(&ctx), off.render(&ctx)) {
                (Ok(a), Ok(b)) if a == b => {}
                (Err(_), Err(_)) => {}
                (a, b) => failures.push(format!(
                    "{name} #{i}: rewritten ok={} as written ok={}",
                    a.is_ok(),
                    b.is_ok()
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for hot in [
        "qwen2.5",
        "qwen3",
        "llama-3.2",
        "deepseek-v3",
        "mistral-nemo",
        "gpt-oss",
    ] {
        assert!(
            rewritten_fixtures.iter().any(|n| n == hot),
            "{hot}: its message chains were not rewritten ({rewritten_fixtures:?})"
        );
    }
}

/// Near minijinja's parser recursion limit a rewritten chain (a call, two
/// levels deeper) can fail to compile where the template as written does:
/// it then compiles as written.
#[test]
fn a_chain_too_deep_to_rewrite_compiles_as_written() {
    let mut fell_back = false;
    for depth in 60..80 {
        let src = format!(
            "{{{{ {}a + b + c{} }}}}",
            "(".repeat(depth),
            ")".repeat(depth)
        );
        let as_written = ChatTemplate::build(&src, false);
        let tmpl = ChatTemplate::new(&src);
        assert_eq!(tmpl.is_ok(), as_written.is_ok(), "depth {depth}");
        if as_written.is_ok() && ChatTemplate::build(&src, true).is_err() {
            fell_back = true;
            let (Ok(tmpl), Ok(off)) = (tmpl, as_written) else {
                unreachable!()
            };
            assert!(!tmpl.chains);
            let extra = chain_context();
            let messages = Value::Array(vec![]);
            assert_eq!(
                render(&tmpl, &messages, &extra).expect("renders"),
                render(&off, &messages, &extra).expect("renders")
            );
        }
    }
    assert!(fell_back, "no depth compiles as written but not rewritten");
}

/// xorshift64*: a fixed sequence, so a failure names a reproducible case.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const ATOMS: &[&str] = &[
    "a",
    "b",
    "e",
    "long",
    "i",
    "j",
    "fl",
    "t",
    "n",
    "xs",
    "ys",
    "d",
    "missing",
    "'x'",
    "\"y\"",
    "'+'",
    "1",
    "2.5",
    "0",
    "true",
    "none",
    "d.k",
    "xs[0]",
    "msgs[1].content",
    "range(2)",
    "a.upper()",
    "(1,)",
    "[]",
];

/// A random expression from a grammar covering what the rewrite must read
/// around: every binary operator, unary `-` and `not`, filters, tests,
/// calls, subscripts, conditionals and literals.
fn expression(rng: &mut Rng, depth: usize) -> String {
    if depth == 0 {
        return rng.pick(ATOMS).to_owned();
    }
    let sub = |rng: &mut Rng| expression(rng, depth - 1);
    match rng.below(14) {
        0..=4 => {
            // a `+` chain, sometimes broken by a neighbour of its level
            let n = 2 + rng.below(4);
            let mut s = sub(rng);
            for _ in 1..n {
                let op = rng.pick(&["+", "+", "+", "+", "-", "~", "*", "//", "%", "**"]);
                s = format!("{s} {op} {}", sub(rng));
            }
            s
        }
        5 => format!("({})", sub(rng)),
        6 => format!(
            "{}|{}",
            sub(rng),
            rng.pick(&[
                "upper",
                "length",
                "string",
                "trim",
                "join(',')",
                "default('d')",
                "list"
            ])
        ),
        7 => format!(
            "{} is {}",
            sub(rng),
            rng.pick(&["string", "defined", "not none", "in xs", "sameas n", "number", "in a + b"])
        ),
        8 => format!(
            "{} {} {}",
            sub(rng),
            rng.pick(&["==", "!=", "<", ">=", "in", "not in", "and", "or"]),
            sub(rng)
        ),
        9 => format!("{}{}", rng.pick(&["not ", "-", "- ", "not not "]), sub(rng)),
        10 => format!("{} if {} else {}", sub(rng), sub(rng), sub(rng)),
        11 => format!(
            "[{}, {}]{}",
            sub(rng),
            sub(rng),
            rng.pick(&["", "[0]", "[1:]", "|length"])
        ),
        12 => format!("{{'k': {}}}['k']", sub(rng)),
        _ => format!(
            "{}({})",
            rng.pick(&["range", "a.count", "raise_exception", "xs.index"]),
            sub(rng)
        ),
    }
}

/// Random expressions (and random token soup, mostly not valid Jinja) in
/// expression and statement positions, rewritten and as written: both
/// compile or neither, and both render the same text or both raise.
#[test]
fn random_expressions_render_as_written() {
    const SOUP: &[&str] = &[
        "a", "b", "xs", "missing", "'x'", "1", "2.5", "+", "+", "+", "-", "*", "~", "|", "upper",
        "is", "not", "in", "and", "or", "if", "else", "==", "<", "(", ")", "[", "]", ",", ":", ".",
        "=", "defined", "0", "none", "-}}", "1e", "'",
    ];
    let messages = Value::Array(vec![]);
    let extra = chain_context();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut failures = Vec::new();
    let mut rewritten_count = 0;
    for case in 0..10_000 {
        let expr = if case % 3 == 0 {
            let n = 1 + rng.below(10);
            let sep = if rng.below(4) == 0 { "" } else { " " };
            (0..n).map(|_| rng.pick(SOUP)).collect::<Vec<_>>().join(sep)
        } else {
            let depth = 1 + rng.below(3);
            expression(&mut rng, depth)
        };
        let src = match rng.below(4) {
            0 => format!("{{% set v = {expr} %}}[{{{{ v }}}}]"),
            1 => format!("{{% if {expr} %}}T{{% else %}}F{{% endif %}}"),
            2 => format!("{{% for x in [{expr}] %}}{{{{ x }}}}{{% endfor %}}"),
            _ => format!("{{{{- {expr} }}}}"),
        };
        match same_as_written(&src, &messages, &extra) {
            Ok(changed) => rewritten_count += usize::from(changed),
            Err(e) => failures.push(format!("case {case}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        rewritten_count > 300,
        "only {rewritten_count} cases rewritten"
    );
}

/// `Pieces` never reaches anything but the formatter; should it, it prints
/// as the string it stands for.
#[test]
fn pieces_print_as_their_concatenation() {
    let pieces = minijinja::Value::from_object(chains::Pieces(vec![
        "A".into(),
        "\u{1f600}".into(),
        "".into(),
        "b".into(),
    ]));
    assert_eq!(pieces.to_string(), "A\u{1f600}b");
}
