//! Tests of the dsv32 encoder: every case `testdata/gen_dsv32.py` ran through
//! SGLang's own `encoding_dsv32.encode_messages`, then a few spelled out.

use super::*;
use serde_json::json;

/// Cases Python encodes and the port refuses (`Unmodelled`), on purpose:
/// arguments strings `json.loads` reads into values serde_json cannot hold
/// as Python holds them, and `str()` of a list or dict holding a code point
/// unassigned in Python 3.11's Unicode (whose `repr` varies by version).
const REFUSED: &[&str] = &[
    "user_list_unassigned",
    "user_list_unicode15_emoji",
    "assistant_dict_unassigned",
    "args_str_neg_zero_int",
    "args_str_huge_int",
    "args_str_nan",
    "args_str_infinity",
    "args_str_float_overflow",
];

/// Each case in both modes: the same string as Python, or an error where
/// Python raised, with Python's exception type and message (the type only for
/// `JSONDecodeError`, whose wording is json's own).
#[test]
fn matches_sglang_corpus() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("testdata/dsv32_expected.json")).expect("corpus JSON");
    let mut failures = Vec::new();
    let (mut outputs, mut errors, mut refused) = (0, 0, 0);
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let messages = case["messages"].as_array().expect("messages");
        let kwargs = &case["kwargs"];
        let context = kwargs.get("context").and_then(Value::as_array);
        let drop_thinking = kwargs.get("drop_thinking").and_then(Value::as_bool);
        let add_bos = kwargs.get("add_default_bos_token").and_then(Value::as_bool);
        for (key, mode) in [
            ("chat", ThinkingMode::Chat),
            ("thinking", ThinkingMode::Thinking),
        ] {
            let got = encode_messages_with(
                messages,
                mode,
                context.map(Vec::as_slice),
                drop_thinking.unwrap_or(true),
                add_bos.unwrap_or(true),
            );
            let want = &case[key];
            let label = format!("{name} [{key}]");
            match (want.get("output").and_then(Value::as_str), &got) {
                (Some(_), Err(e)) if REFUSED.contains(&name) && e.kind() == "Unmodelled" => {
                    refused += 1
                }
                (Some(w), Ok(g)) if w == g && !REFUSED.contains(&name) => outputs += 1,
                (Some(w), _) => {
                    failures.push(format!("{label}:\n  want Ok({w:?})\n  got  {got:?}"))
                }
                (None, Err(e)) => {
                    let kind = want["error"].as_str().unwrap_or("?");
                    let message = want["message"].as_str().unwrap_or("?");
                    let same = e.kind() == kind
                        && (kind == "JSONDecodeError" || e.0 == format!("{kind}: {message}"));
                    if same {
                        errors += 1;
                    } else {
                        failures.push(format!(
                            "{label}:\n  want Err({kind}: {message})\n  got  {e:?}"
                        ));
                    }
                }
                (None, Ok(g)) => {
                    failures.push(format!("{label}:\n  want Err({want})\n  got  Ok({g:?})"))
                }
            }
        }
    }
    println!(
        "dsv32: {} cases, {} encodings checked: {outputs} identical prompts, {errors} identical errors, \
         {refused} refused as listed",
        cases.len(),
        2 * cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} encodings differ from SGLang:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(refused, 2 * REFUSED.len());
    assert!(cases.len() >= 150);
}

#[test]
fn last_user_turn_opens_thinking_only_in_thinking_mode() {
    let msgs = [
        json!({"role": "system", "content": ""}),
        json!({"role": "user", "content": "Hi"}),
    ];
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Thinking).unwrap(),
        "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>"
    );
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Chat).unwrap(),
        "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>"
    );
    // No BOS with a context, or when asked not to.
    assert_eq!(
        encode_messages_with(&msgs[1..], ThinkingMode::Chat, Some(&msgs[..1]), true, true).unwrap(),
        "<｜User｜>Hi<｜Assistant｜></think>"
    );
    assert_eq!(
        encode_messages_with(&msgs, ThinkingMode::Chat, Some(&[]), true, false).unwrap(),
        "<｜User｜>Hi<｜Assistant｜></think>"
    );
}

#[test]
fn reasoning_before_the_last_user_is_dropped_in_thinking_mode() {
    let msgs = [
        json!({"role": "user", "content": "q1"}),
        json!({"role": "assistant", "content": "a1", "reasoning_content": "old"}),
        json!({"role": "user", "content": "q2"}),
    ];
    let want = "<｜begin▁of▁sentence｜><｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜>\
                <｜User｜>q2<｜Assistant｜><think>";
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Thinking).unwrap(),
        want
    );
}

#[test]
fn tool_calls_render_as_dsml_and_results_close_the_block() {
    let msgs = [
        json!({"role": "user", "content": "q"}),
        json!({"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"city\": \"東京\", \"n\": 2, \"x\": [1.0]}"}}
        ]}),
        json!({"role": "tool", "content": "sunny"}),
    ];
    let want = concat!(
        "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>",
        "r</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n",
        "<｜DSML｜parameter name=\"city\" string=\"true\">東京</｜DSML｜parameter>\n",
        "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>\n",
        "<｜DSML｜parameter name=\"x\" string=\"false\">[1.0]</｜DSML｜parameter>\n",
        "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>",
        "\n\n<function_results>\n<result>sunny</result>\n</function_results>\n\n<think>"
    );
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Thinking).unwrap(),
        want
    );
}

#[test]
fn python_errors_are_errs() {
    // An assistant turn after the last user message needs reasoning or tool
    // calls in thinking mode; chat mode takes it.
    let msgs = [
        json!({"role": "user", "content": "q"}),
        json!({"role": "assistant", "content": "a"}),
    ];
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Thinking).unwrap_err().0,
        "DS32EncodingError: ThinkingMode: ThinkingMode.THINKING, invalid message without \
         reasoning_content/tool_calls `{'role': 'assistant', 'content': 'a'}` after last user message"
    );
    assert!(encode_messages(&msgs, ThinkingMode::Chat).is_ok());
    // A developer message before the last user is dropped in thinking mode,
    // which leaves the render loop one index short.
    let msgs = [
        json!({"role": "developer", "content": "d"}),
        json!({"role": "user", "content": "q"}),
    ];
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Thinking)
            .unwrap_err()
            .0,
        "DS32EncodingError: Index 1 out of range for messages list of length 1"
    );
    let err = encode_messages(&[json!({"role": "function"})], ThinkingMode::Chat).unwrap_err();
    assert_eq!(err.0, "NotImplementedError: Unknown role: function");
    assert_eq!(err.kind(), "NotImplementedError");
    let err = encode_messages(&[json!("hi")], ThinkingMode::Chat).unwrap_err();
    assert_eq!(err.0, "AttributeError: 'str' object has no attribute 'get'");
}

#[test]
fn non_string_values_print_as_python_str() {
    let msgs =
        [json!({"role": "user", "content": [1, 1.0, 1e16, true, null, "it's", {"k": -0.0}]})];
    assert_eq!(
        encode_messages(&msgs, ThinkingMode::Chat).unwrap(),
        "<｜begin▁of▁sentence｜><｜User｜>[1, 1.0, 1e+16, True, None, \"it's\", {'k': -0.0}]<｜Assistant｜></think>"
    );
    assert_eq!(
        py::repr(&json!("a'b\"c\\\u{0}\u{a0}é😀")),
        "'a\\'b\"c\\\\\\x00\\xa0é😀'"
    );
    // repr() of a code point unassigned in Python 3.11's Unicode depends on
    // the Python version: refused in the prompt, escaped in error messages.
    let msgs = [json!({"role": "user", "content": ["\u{378}"]})];
    let err = encode_messages(&msgs, ThinkingMode::Chat).unwrap_err();
    assert_eq!(err.kind(), "Unmodelled");
    assert_eq!(py::repr(&json!("\u{378}")), "'\\u0378'");
}

#[test]
fn templates_substitute_once() {
    // A value holding `{name}` is not expanded again, as with str.format.
    assert_eq!(
        format(USER_MSG_TEMPLATE, &[("content", "{content}")]),
        "<｜User｜>{content}<｜Assistant｜>"
    );
}

#[test]
fn json_loads_reads_as_python_or_refuses() {
    // A repeated key keeps its first position and takes the last value.
    assert_eq!(
        to_json(&json_loads(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap()),
        r#"{"a": 3, "b": 2}"#
    );
    assert_eq!(json_loads(r#""\ud83d\ude00""#).unwrap(), json!("😀"));
    assert_eq!(
        to_json(&json_loads("[-0.0, 1E2, 18446744073709551615]").unwrap()),
        "[-0.0, 100.0, 18446744073709551615]"
    );
    // serde_json reads `-0` as the float -0.0 (Python: the int 0) and
    // integers beyond 64 bits as floats (Python: exact ints).
    assert!(serde_json::from_str::<Value>("-0").unwrap().is_f64());
    for s in [
        "[-0]",
        "123456789012345678901234567890",
        "[-9223372036854775809]",
    ] {
        assert_eq!(json_loads(s).unwrap_err().kind(), "Unmodelled", "{s}");
    }
    // Digits inside strings are not numbers.
    assert!(json_loads(r#"{"-0": "-0 123456789012345678901234567890 \" -0"}"#).is_ok());
    // Python reads these (as nan, inf, a lone surrogate, a deep list).
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    for s in [
        "NaN",
        "[-Infinity]",
        "[1e400]",
        r#""\ud800""#,
        deep.as_str(),
    ] {
        assert_eq!(json_loads(s).unwrap_err().kind(), "Unmodelled", "{s}");
    }
    for s in ["{'a': 1}", "", "[1,]", "{\"a\": 1} x"] {
        assert_eq!(json_loads(s).unwrap_err().kind(), "JSONDecodeError", "{s}");
    }
}

#[test]
fn long_conversations_take_linear_time() {
    // 20k turns after one user message, and 20k tool results in a row:
    // Python's rescans would make these quadratic (minutes in a debug build).
    let n = 20_000;
    let mut msgs = vec![json!({"role": "user", "content": "q"})];
    msgs.extend(
        (0..n).map(|_| json!({"role": "assistant", "content": "a", "reasoning_content": "r"})),
    );
    let out = encode_messages(&msgs, ThinkingMode::Thinking).unwrap();
    assert_eq!(out.matches("r</think>a<｜end▁of▁sentence｜>").count(), n);

    let calls: Vec<Value> = (0..n)
        .map(|_| json!({"function": {"name": "f", "arguments": {}}}))
        .collect();
    let mut msgs = vec![
        json!({"role": "user", "content": "q"}),
        json!({"role": "assistant", "content": "", "tool_calls": calls}),
    ];
    msgs.extend((0..n).map(|_| json!({"role": "tool", "content": "r"})));
    let out = encode_messages(&msgs, ThinkingMode::Chat).unwrap();
    assert_eq!(out.matches("\n<result>r</result>").count(), n);
    assert!(out.ends_with("</result>\n</function_results>\n\n</think>"));
}
