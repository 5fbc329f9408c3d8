//! DeepSeek-V4.1 prompts on 0.5.21 - 0.5.22: SGLang's own
//! `sglang/srt/entrypoints/openai/encoding_dsv41.py` (one version, the same
//! file in both releases; 0.5.23 uses deepseek-recipe, `dsv4.rs`), ported
//! function by function, with the `serving_chat.py` glue around it
//! ([`encode`]).
//!
//! Selected (`chat_encoding.resolve_chat_encoding_spec`, 0.5.21+) by
//! `--tool-call-parser deepseekv41`, else `model_type == "deepseek_v41"` or a
//! first architecture containing `DeepseekV41`, before the DeepSeek-V4 rules.
//!
//! What differs from `dsv4_sglang`: a `<｜System｜>` token (on the first
//! message when it is a system message or carries the effort line, and on
//! every later system message, which also counts as a user turn and gets the
//! generation header); the effort is the numeric line `Reasoning Effort: N
//! (range 1-100, ...)` (tiers `low` 50, `high`/`xhigh` 75, `max` 100, or an
//! integer budget; default `high`, or `SGLANG_DSV41_REASONING_EFFORT`); the
//! tool tags are `" calls"`, `" invoke"`, `" parameter"`; list content is not
//! flattened by the glue: the encoder reads parts itself (text parts joined
//! by `"\n\n"` where a string is needed, images as `<｜deepseek_image｜>`);
//! request tools are `dsv41_tool_payload`s (the client's fields in OpenAI
//! order); the empty first system message is added only to host tools
//! (0.5.21: every request tool; 0.5.22: only those that reach the template). The prompt is text, tokenized as in `dsv4_sglang`.
//!
//! Errors are [`Dsv32Error`]s: `kind()` is the exception SGLang raises (the
//! request fails there too: refuse it) or `Unmodelled` (SGLang builds a
//! prompt the guard does not reproduce: refuse it naming the reason).

use serde_json::{Map, Value};

use super::dsv32::{error, format, str_of, str_or_empty, to_json, Dsv32Error};
use super::dsv32_serving::{
    handle_last_assistant_message, has_big_float, normalize_assistant_tool_call_arguments,
};
use crate::py;

const BOS_TOKEN: &str = "<｜begin▁of▁sentence｜>";
const EOS_TOKEN: &str = "<｜end▁of▁sentence｜>";
const THINKING_START_TOKEN: &str = "<think>";
const THINKING_END_TOKEN: &str = "</think>";
const DSML_TOKEN: &str = "｜DSML｜";
const USER_SP_TOKEN: &str = "<｜User｜>";
const ASSISTANT_SP_TOKEN: &str = "<｜Assistant｜>";
const SYSTEM_SP_TOKEN: &str = "<｜System｜>";
const LATEST_REMINDER_SP_TOKEN: &str = "<｜latest_reminder｜>";
/// `IMAGE_PLACEHOLDER`.
pub const IMAGE_PLACEHOLDER: &str = "<｜deepseek_image｜>";
const TASKS: [(&str, &str); 6] = [
    ("action", "<｜action｜>"),
    ("query", "<｜query｜>"),
    ("authority", "<｜authority｜>"),
    ("domain", "<｜domain｜>"),
    ("title", "<｜title｜>"),
    ("read_url", "<｜read_url｜>"),
];
const RESPONSE_FORMAT_TEMPLATE: &str =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{schema}";
const TOOL_CALLS_BLOCK_NAME: &str = " calls";
const TOOL_CALL_TAG_NAME: &str = " invoke";
const TOOL_PARAMETER_TAG_NAME: &str = " parameter";
const TOOL_CALL_TEMPLATE: &str = "<{dsml_token}{tool_call_tag_name} name=\"{name}\">\n{arguments}\n</{dsml_token}{tool_call_tag_name}>";
const TOOL_CALLS_TEMPLATE: &str =
    "<{dsml_token}{tc_block_name}>\n{tool_calls}\n</{dsml_token}{tc_block_name}>";
const TOOL_OUTPUT_TEMPLATE: &str = "<tool_result>{content}</tool_result>";
const P_DSML_TEMPLATE: &str = "<{dsml_token}{tool_parameter_tag_name} name=\"{key}\" string=\"{is_str}\">{value}</{dsml_token}{tool_parameter_tag_name}>";
/// `REASONING_EFFORT_TEMPLATE`.
const REASONING_EFFORT_TEMPLATE: &str =
    "Reasoning Effort: {budget} (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
/// `REASONING_EFFORT_MAPPINGS`, in order.
const REASONING_EFFORT_MAPPINGS: [(&str, u32); 4] =
    [("low", 50), ("high", 75), ("xhigh", 75), ("max", 100)];
/// `DEFAULT_REASONING_EFFORT`.
const DEFAULT_REASONING_EFFORT: &str = "high";

const TOOLS_TEMPLATE: &str = r#"## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{dsml_token}{tc_block_name}>" block like the following:

<{dsml_token}{tc_block_name}>
<{dsml_token}{tool_call_tag_name} name="$TOOL_NAME">
<{dsml_token}{tool_parameter_tag_name} name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml_token}{tool_parameter_tag_name}>
...
</{dsml_token}{tool_call_tag_name}>
<{dsml_token}{tool_call_tag_name} name="$TOOL_NAME2">
...
</{dsml_token}{tool_call_tag_name}>
</{dsml_token}{tc_block_name}>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {thinking_start_token}), you MUST output your complete reasoning inside {thinking_start_token}...{thinking_end_token} BEFORE any tool calls or final response.

Otherwise, output directly after {thinking_end_token} with tool calls or final response.

### Available Tool Schemas

{tool_schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"#;

/// An effort the encoder accepts: a tier name or an integer budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effort {
    Tier(&'static str),
    Budget(u32),
}

impl Effort {
    fn budget(&self) -> u32 {
        match self {
            Effort::Tier(t) => REASONING_EFFORT_MAPPINGS
                .iter()
                .find(|(k, _)| k == t)
                .map_or(75, |(_, b)| *b),
            Effort::Budget(b) => *b,
        }
    }
}

/// `chat_encoding.parse_dsv41_reasoning_effort`: a bool is none; an int a
/// budget in [1, 100]; a float in [0, 0.99] the budget `max(1,
/// round(v * 100))` (half to even); a tier name itself; anything else none.
pub fn parse_effort(value: &Value) -> Option<Effort> {
    match value {
        Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64()?;
            (0.0..=0.99)
                .contains(&f)
                .then(|| Effort::Budget(((f * 100.0).round_ties_even() as u32).max(1)))
        }
        Value::Number(n) => n
            .as_u64()
            .filter(|i| (1..=100).contains(i))
            .map(|i| Effort::Budget(i as u32)),
        Value::String(s) => REASONING_EFFORT_MAPPINGS
            .iter()
            .find(|(k, _)| k == s)
            .map(|(k, _)| Effort::Tier(k)),
    }
}

/// `default_dsv41_reasoning_effort_from_env(SGLANG_DSV41_REASONING_EFFORT)`:
/// unset or blank is `high`; ASCII... digits (`str.isdigit`) an integer;
/// else the stripped text. `Err` (SGLang does not start) for a value the
/// encoder does not accept.
pub fn default_effort_from_env(raw: Option<&str>) -> Result<Effort, String> {
    let Some(raw) = raw.filter(|r| !py::strip(r).is_empty()) else {
        return Ok(Effort::Tier(DEFAULT_REASONING_EFFORT));
    };
    let t = py::strip(raw);
    let value = if t.chars().all(|c| c.is_ascii_digit()) {
        // Python ints are unbounded; past u64 no budget is valid anyway.
        t.parse::<u64>()
            .map(Value::from)
            .unwrap_or(Value::from(u64::MAX))
    } else if t.chars().all(char::is_numeric) {
        return Err(format!(
            "SGLANG_DSV41_REASONING_EFFORT={raw:?} in non-ASCII digits"
        ));
    } else {
        Value::String(t.to_string())
    };
    parse_effort(&value).ok_or_else(|| {
        format!(
            "Invalid SGLANG_DSV41_REASONING_EFFORT={}; expected one of ['low', 'high', 'xhigh', 'max'] or an integer in [1, 100]",
            py::repr(&Value::String(raw.to_string()))
        )
    })
}

/// `chat_encoding.dsv41_tool_payload(tool)`: `tool.model_dump(exclude_unset=True,
/// exclude_none=True)` with the function's `name`, `description`,
/// `parameters` first. `wire_tool` is the tool as the request dump holds it
/// (the client's fields).
pub fn tool_payload(wire_tool: &Value) -> Value {
    let Value::Object(tool) = wire_tool else {
        return wire_tool.clone();
    };
    let mut out = Map::new();
    for (k, v) in tool {
        if v.is_null() {
            continue;
        }
        if k == "function" {
            let Value::Object(f) = v else {
                out.insert(k.clone(), v.clone());
                continue;
            };
            let mut ordered = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(v) = f.get(key).filter(|v| !v.is_null()) {
                    ordered.insert(key.into(), v.clone());
                }
            }
            for (fk, fv) in f {
                if !fv.is_null() && !ordered.contains_key(fk) {
                    ordered.insert(fk.clone(), fv.clone());
                }
            }
            out.insert(k.clone(), Value::Object(ordered));
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

// ---------------------------------------------------------------------------
// encoding_dsv41.py
// ---------------------------------------------------------------------------

fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    static NONE: Value = Value::Null;
    v.get(key).unwrap_or(&NONE)
}

fn role(v: &Value) -> Option<&str> {
    v.get("role").and_then(Value::as_str)
}

fn render_tools(tools: &[&Value]) -> String {
    let tools_json: Vec<String> = tools.iter().map(|t| to_json(t)).collect();
    format(
        TOOLS_TEMPLATE,
        &[
            ("tool_schemas", &tools_json.join("\n")),
            ("dsml_token", DSML_TOKEN),
            ("tc_block_name", TOOL_CALLS_BLOCK_NAME),
            ("tool_call_tag_name", TOOL_CALL_TAG_NAME),
            ("tool_parameter_tag_name", TOOL_PARAMETER_TAG_NAME),
            ("thinking_start_token", THINKING_START_TOKEN),
            ("thinking_end_token", THINKING_END_TOKEN),
        ],
    )
}

/// `tools_from_openai_format(tools)`.
fn tools_from_openai_format(tools: &Value) -> Result<Vec<&Value>, Dsv32Error> {
    let Value::Array(items) = tools else {
        return Err(error("TypeError", "tools is not a list"));
    };
    items
        .iter()
        .map(|t| {
            t.get("function")
                .ok_or_else(|| error("KeyError", "'function'"))
        })
        .collect()
}

/// `tool_calls_from_openai_format(tool_calls)`: each call's function name
/// and arguments.
fn tool_calls_from_openai_format(tool_calls: &Value) -> Result<Vec<(&Value, &Value)>, Dsv32Error> {
    let Value::Array(items) = tool_calls else {
        return Err(error("TypeError", "tool_calls is not a list"));
    };
    items
        .iter()
        .map(|tc| {
            let f = tc
                .get("function")
                .ok_or_else(|| error("KeyError", "'function'"))?;
            let name = f.get("name").ok_or_else(|| error("KeyError", "'name'"))?;
            let args = f
                .get("arguments")
                .ok_or_else(|| error("KeyError", "'arguments'"))?;
            Ok((name, args))
        })
        .collect()
}

fn encode_arguments_to_dsml(arguments: &Value) -> Result<String, Dsv32Error> {
    let parsed;
    let arguments = match arguments {
        Value::String(s) => {
            parsed = super::dsv32::json_loads(s)?;
            &parsed
        }
        other => other,
    };
    let Value::Object(arguments) = arguments else {
        return Err(error(
            "ValueError",
            "Assistant tool call function.arguments must be a JSON object.",
        ));
    };
    let strs: Vec<String> = arguments
        .iter()
        .map(|(k, v)| {
            let (is_str, value) = match v {
                Value::String(s) => ("true", s.clone()),
                _ => ("false", to_json(v)),
            };
            format(
                P_DSML_TEMPLATE,
                &[
                    ("dsml_token", DSML_TOKEN),
                    ("tool_parameter_tag_name", TOOL_PARAMETER_TAG_NAME),
                    ("key", k),
                    ("is_str", is_str),
                    ("value", &value),
                ],
            )
        })
        .collect();
    Ok(strs.join("\n"))
}

/// `find_last_user_index`: a system message after the first counts too.
fn find_last_user_index(messages: &[Value]) -> isize {
    messages
        .iter()
        .enumerate()
        .rev()
        .find(|(i, m)| match role(m) {
            Some("user" | "developer") => true,
            Some("system") => *i > 0,
            _ => false,
        })
        .map_or(-1, |(i, _)| i as isize)
}

fn attach_task_to_last_user_message(messages: &mut [Value], task: &str) -> Result<(), Dsv32Error> {
    let idx = find_last_user_index(messages);
    if idx < 0 {
        return Err(error(
            "ValueError",
            "`task` requires at least one message with role='user' or 'developer'.",
        ));
    }
    messages[idx as usize]["task"] = Value::String(task.to_string());
    Ok(())
}

/// A block's `text` (`block.get("text", "")`) as a string.
fn text_of(block: &Value) -> Result<String, Dsv32Error> {
    match block.get("text") {
        None => Ok(String::new()),
        Some(v) => Ok(str_of(v)?.into_owned()),
    }
}

#[derive(Debug, Clone, Copy)]
struct Call<'a> {
    thinking: bool,
    drop_thinking: bool,
    /// `render_reasoning_effort(0, ...)`: the effort line of the first message.
    effort_line: &'a str,
}

/// `render_message(index, messages, thinking_mode, drop_thinking,
/// reasoning_effort)`: the role branches are the `render_*` functions below
/// it, in the Python's order.
fn render_message(
    index: usize,
    messages: &[Value],
    last_user_idx: isize,
    call: Call<'_>,
) -> Result<String, Dsv32Error> {
    let msg = &messages[index];
    let role_v = get(msg, "role");
    // Converted before the role is looked at: malformed tools or tool calls
    // fail a message of any role.
    let tools = get(msg, "tools");
    let tools = if py::truthy(tools) {
        Some(tools_from_openai_format(tools)?)
    } else {
        None
    };
    let tool_calls = get(msg, "tool_calls");
    let tool_calls = if py::truthy(tool_calls) {
        Some(tool_calls_from_openai_format(tool_calls)?)
    } else {
        None
    };
    let this_role = role_v.as_str();
    let effort_line = if index == 0 && call.thinking {
        call.effort_line
    } else {
        ""
    };
    let mut prompt = String::new();
    // Index 0 also emits the system token for the effort line, even before a user.
    if index == 0 && (!effort_line.is_empty() || this_role == Some("system")) {
        prompt += SYSTEM_SP_TOKEN;
    }
    prompt += effort_line;
    prompt += &match this_role {
        Some("system") => render_system(index, msg, tools.as_deref())?,
        Some("developer") => render_developer(msg, tools.as_deref())?,
        Some("user") => render_user(msg)?,
        Some("latest_reminder") => {
            format!("{LATEST_REMINDER_SP_TOKEN}{}", str_of(get(msg, "content"))?)
        }
        Some("tool") => {
            return Err(error(
                "NotImplementedError",
                "deepseek_v41 merges tool messages into user; please preprocess with merge_tool_messages()",
            ))
        }
        Some("assistant") => {
            render_assistant(index, messages, last_user_idx, call, tool_calls.as_deref())?
        }
        _ => {
            return Err(error(
                "NotImplementedError",
                format_args!("Unknown role: {}", py::message_str(role_v)),
            ))
        }
    };
    prompt += &render_transition(index, messages, last_user_idx, call)?;
    Ok(prompt)
}

/// The tools and response format a system or developer message ends with.
fn render_tools_and_response_format(msg: &Value, tools: Option<&[&Value]>) -> String {
    let mut prompt = String::new();
    if let Some(tools) = tools {
        prompt += "\n\n";
        prompt += &render_tools(tools);
    }
    let response_format = get(msg, "response_format");
    if py::truthy(response_format) {
        prompt += "\n\n";
        prompt += &format(
            RESPONSE_FORMAT_TEMPLATE,
            &[("schema", &to_json(response_format))],
        );
    }
    prompt
}

/// `render_message`'s `role == "system"` branch (the first message's
/// `<｜System｜>` is `render_message`'s, shared with the effort line).
fn render_system(
    index: usize,
    msg: &Value,
    tools: Option<&[&Value]>,
) -> Result<String, Dsv32Error> {
    let mut prompt = String::new();
    if index > 0 {
        prompt += SYSTEM_SP_TOKEN;
    }
    prompt += &str_or_empty(get(msg, "content"))?;
    prompt += &render_tools_and_response_format(msg, tools);
    Ok(prompt)
}

/// `render_message`'s `role == "developer"` branch.
fn render_developer(msg: &Value, tools: Option<&[&Value]>) -> Result<String, Dsv32Error> {
    let content = get(msg, "content");
    if !py::truthy(content) {
        return Err(error(
            "AssertionError",
            format_args!(
                "Invalid message for role `developer`: {}",
                py::message_str(msg)
            ),
        ));
    }
    let Value::String(content) = content else {
        return Err(error(
            "TypeError",
            format_args!(
                "can only concatenate str (not \"{}\") to str",
                py::type_name(content)
            ),
        ));
    };
    let mut prompt = String::from(USER_SP_TOKEN);
    prompt += content;
    prompt += &render_tools_and_response_format(msg, tools);
    Ok(prompt)
}

/// `render_message`'s `role == "user"` branch: `content_blocks` (what
/// `merge_tool_messages` made of tool results and the user text around
/// them) win over `content`.
fn render_user(msg: &Value) -> Result<String, Dsv32Error> {
    let mut prompt = String::from(USER_SP_TOKEN);
    let blocks = get(msg, "content_blocks");
    if py::truthy(blocks) {
        let Value::Array(blocks) = blocks else {
            return Err(error("TypeError", "content_blocks is not a list"));
        };
        let parts = blocks
            .iter()
            .map(render_content_block)
            .collect::<Result<Vec<String>, Dsv32Error>>()?;
        prompt += &parts.join("\n\n");
    } else {
        match get(msg, "content") {
            content @ Value::String(_) => prompt += &str_or_empty(content)?,
            v if !py::truthy(v) => {}
            v => {
                return Err(error(
                    "TypeError",
                    format_args!(
                        "can only concatenate str (not \"{}\") to str",
                        py::type_name(v)
                    ),
                ))
            }
        }
    }
    Ok(prompt)
}

/// One of a user message's `content_blocks`, as the `parts` it joins.
fn render_content_block(block: &Value) -> Result<String, Dsv32Error> {
    if !block.is_object() {
        return Err(error(
            "AttributeError",
            format_args!("'{}' object has no attribute 'get'", py::type_name(block)),
        ));
    }
    Ok(match get(block, "type").as_str() {
        Some("text") => text_of(block)?,
        Some("tool_result") => {
            let text = match block.get("content") {
                None => String::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|b| match get(b, "type").as_str() {
                        Some("text") => text_of(b),
                        _ => Ok(format!("[Unsupported {}]", py::message_str(get(b, "type")))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join("\n\n"),
                Some(other) => str_of(other)?.into_owned(),
            };
            format(TOOL_OUTPUT_TEMPLATE, &[("content", &text)])
        }
        _ => format!("[Unsupported {}]", py::message_str(get(block, "type"))),
    })
}

/// `render_message`'s `role == "assistant"` branch.
fn render_assistant(
    index: usize,
    messages: &[Value],
    last_user_idx: isize,
    call: Call<'_>,
    tool_calls: Option<&[(&Value, &Value)]>,
) -> Result<String, Dsv32Error> {
    let msg = &messages[index];
    let tc_content = match tool_calls {
        Some(calls) => render_tool_calls(calls)?,
        None => String::new(),
    };
    let summary = str_or_empty(get(msg, "content"))?;
    let rc = str_or_empty(get(msg, "reasoning_content"))?;
    // The answer to a task turn is not reasoned about.
    let prev_has_task = index >= 1 && !get(&messages[index - 1], "task").is_null();
    let mut prompt = String::new();
    if call.thinking && !prev_has_task && (!call.drop_thinking || index as isize > last_user_idx) {
        prompt += &rc;
        prompt += THINKING_END_TOKEN;
    }
    prompt += &summary;
    prompt += &tc_content;
    if !py::truthy(get(msg, "wo_eos")) {
        prompt += EOS_TOKEN;
    }
    Ok(prompt)
}

/// An assistant message's `tc_content`: its tool calls as one DSML block.
fn render_tool_calls(calls: &[(&Value, &Value)]) -> Result<String, Dsv32Error> {
    let list = calls
        .iter()
        .map(|(name, arguments)| {
            Ok(format(
                TOOL_CALL_TEMPLATE,
                &[
                    ("dsml_token", DSML_TOKEN),
                    ("tool_call_tag_name", TOOL_CALL_TAG_NAME),
                    ("name", &str_of(name)?),
                    ("arguments", &encode_arguments_to_dsml(arguments)?),
                ],
            ))
        })
        .collect::<Result<Vec<String>, Dsv32Error>>()?;
    let mut tc_content = String::from("\n\n");
    tc_content += &format(
        TOOL_CALLS_TEMPLATE,
        &[
            ("dsml_token", DSML_TOKEN),
            ("tool_calls", &list.join("\n")),
            ("tc_block_name", TOOL_CALLS_BLOCK_NAME),
        ],
    );
    Ok(tc_content)
}

/// The tail of `render_message`: the transition tokens, by what follows. A
/// system message after the first is a user turn here too.
fn render_transition(
    index: usize,
    messages: &[Value],
    last_user_idx: isize,
    call: Call<'_>,
) -> Result<String, Dsv32Error> {
    let mut prompt = String::new();
    if let Some(next) = messages.get(index + 1) {
        if !matches!(role(next), Some("assistant" | "latest_reminder")) {
            return Ok(prompt);
        }
    }
    let msg = &messages[index];
    let this_role = role(msg);
    let task = get(msg, "task");
    if !task.is_null() {
        let Some((_, token)) = TASKS.iter().find(|(name, _)| task.as_str() == Some(*name)) else {
            return Err(error(
                "AssertionError",
                format_args!("Invalid task: '{}'", py::message_str(task)),
            ));
        };
        if task.as_str() != Some("action") {
            prompt += token;
        } else {
            prompt += ASSISTANT_SP_TOKEN;
            prompt += if call.thinking {
                THINKING_START_TOKEN
            } else {
                THINKING_END_TOKEN
            };
            prompt += token;
        }
    } else if matches!(this_role, Some("user" | "developer"))
        || (this_role == Some("system") && index > 0)
    {
        prompt += ASSISTANT_SP_TOKEN;
        let opens = call.thinking && (!call.drop_thinking || index as isize >= last_user_idx);
        prompt += if opens {
            THINKING_START_TOKEN
        } else {
            THINKING_END_TOKEN
        };
    }
    Ok(prompt)
}

/// `merge_tool_messages(messages)`.
fn merge_tool_messages(messages: &[Value]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(messages.len());
    let merged_user = |merged: &[Value]| {
        merged
            .last()
            .is_some_and(|m| role(m) == Some("user") && m.get("content_blocks").is_some())
    };
    for msg in messages {
        match role(msg) {
            Some("tool") => {
                let block = serde_json::json!({
                    "type": "tool_result",
                    "tool_use_id": msg.get("tool_call_id").cloned().unwrap_or(Value::String(String::new())),
                    "content": msg.get("content").cloned().unwrap_or(Value::String(String::new())),
                });
                if merged_user(&merged) {
                    extend_blocks(merged.last_mut(), vec![block]);
                } else {
                    merged.push(serde_json::json!({"role": "user", "content_blocks": [block]}));
                }
            }
            Some("user") => {
                let blocks = match msg.get("content_blocks") {
                    None | Some(Value::Null) => vec![serde_json::json!({
                        "type": "text",
                        "text": msg.get("content").cloned().unwrap_or(Value::String(String::new())),
                    })],
                    Some(Value::Array(b)) => b.clone(),
                    Some(other) => vec![other.clone()],
                };
                let open =
                    merged_user(&merged) && merged.last().is_some_and(|m| get(m, "task").is_null());
                if open {
                    extend_blocks(merged.last_mut(), blocks);
                } else {
                    let mut new_msg = msg.clone();
                    new_msg["content_blocks"] = Value::Array(blocks);
                    merged.push(new_msg);
                }
            }
            _ => merged.push(msg.clone()),
        }
    }
    merged
}

fn extend_blocks(msg: Option<&mut Value>, blocks: Vec<Value>) {
    if let Some(Value::Array(existing)) = msg.and_then(|m| m.get_mut("content_blocks")) {
        existing.extend(blocks);
    }
}

/// `_process_image_blocks(blocks)`: image parts become the placeholder text
/// (counted in `images`), recursively inside tool results.
fn process_image_blocks(blocks: &[Value], images: &mut usize) -> Result<Vec<Value>, Dsv32Error> {
    let mut out = Vec::with_capacity(blocks.len());
    for block in blocks {
        let Value::Object(b) = block else {
            out.push(block.clone());
            continue;
        };
        match b.get("type").and_then(Value::as_str) {
            Some("image_url") => {
                // `_extract_image`: a source is required.
                let url = match b.get("image_url") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Object(o)) => o
                        .get("url")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    _ => String::new(),
                };
                if url.is_empty() {
                    return Err(error(
                        "ValueError",
                        "Image block does not contain a valid source",
                    ));
                }
                *images += 1;
                out.push(serde_json::json!({"type": "text", "text": IMAGE_PLACEHOLDER}));
            }
            Some("tool_result") if matches!(b.get("content"), Some(Value::Array(_))) => {
                let mut b = b.clone();
                let inner = b["content"].as_array().cloned().unwrap_or_default();
                b.insert(
                    "content".into(),
                    Value::Array(process_image_blocks(&inner, images)?),
                );
                out.push(Value::Object(b));
            }
            Some("text") => {
                let text = match b.get("text") {
                    Some(v) if py::truthy(v) => str_of(v)?.into_owned(),
                    _ => String::new(),
                };
                if text.contains(IMAGE_PLACEHOLDER) {
                    let head: String = text.chars().take(100).collect();
                    return Err(error(
                        "ValueError",
                        format_args!(
                            "Text block contains image placeholder '{IMAGE_PLACEHOLDER}': '{head}'. Images should be separate content blocks."
                        ),
                    ));
                }
                out.push(block.clone());
            }
            _ => out.push(block.clone()),
        }
    }
    Ok(out)
}

/// `process_image_messages(messages)`: the messages and their image count.
fn process_image_messages(messages: &[Value]) -> Result<(Vec<Value>, usize), Dsv32Error> {
    let mut images = 0;
    let mut processed = Vec::with_capacity(messages.len());
    for msg in messages {
        let mut msg = msg.clone();
        // `_validate_no_image_sp_tokens`.
        if get(&msg, "content")
            .as_str()
            .is_some_and(|c| c.contains(IMAGE_PLACEHOLDER))
        {
            return Err(error(
                "ValueError",
                format_args!("Message content contains image special token '{IMAGE_PLACEHOLDER}'. Images should be provided as image content blocks."),
            ));
        }
        if get(&msg, "reasoning_content")
            .as_str()
            .is_some_and(|c| c.contains(IMAGE_PLACEHOLDER))
        {
            return Err(error(
                "ValueError",
                format_args!(
                    "reasoning_content contains image special token '{IMAGE_PLACEHOLDER}'"
                ),
            ));
        }
        if let Value::Object(m) = &mut msg {
            if matches!(m.get("content"), Some(Value::Array(_)))
                && !m.contains_key("content_blocks")
            {
                let content = m.shift_remove("content").expect("a content");
                m.insert("content_blocks".into(), content);
            }
            if let Some(Value::Array(blocks)) = m.get("content_blocks").filter(|b| py::truthy(b)) {
                let blocks = process_image_blocks(blocks, &mut images)?;
                if !matches!(m.get("content"), Some(Value::String(_))) {
                    let texts: Vec<String> = blocks
                        .iter()
                        .filter(|b| b.is_object() && get(b, "type").as_str() == Some("text"))
                        .map(text_of)
                        .collect::<Result<_, _>>()?;
                    m.insert("content".into(), Value::String(texts.join("\n\n")));
                }
                m.insert("content_blocks".into(), Value::Array(blocks));
            }
        }
        processed.push(msg);
    }
    Ok((processed, images))
}

/// `_drop_thinking_messages(messages)`.
fn drop_thinking_messages(messages: &[Value]) -> Vec<Value> {
    let last_user_idx = find_last_user_index(messages);
    let mut result = Vec::with_capacity(messages.len());
    for (idx, msg) in messages.iter().enumerate() {
        let r = role(msg);
        if matches!(
            r,
            Some("user" | "system" | "tool" | "latest_reminder" | "direct_search_results")
        ) || idx as isize >= last_user_idx
        {
            result.push(msg.clone());
        } else if r == Some("assistant") {
            let mut m = msg.clone();
            if let Value::Object(map) = &mut m {
                map.shift_remove("reasoning_content");
            }
            result.push(m);
        }
    }
    result
}

/// The prompt and its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub text: String,
    /// Image placeholders in `text` (SGLang refuses them on a text-only
    /// server; on a multimodal one it swaps in the image token and its
    /// processor expands each, which is not modelled).
    pub images: usize,
}

/// `encode_messages(messages, thinking_mode, reasoning_effort=effort,
/// return_multi_modal_data=True)`.
pub fn encode_messages(
    messages: &[Value],
    thinking: bool,
    effort: &Effort,
) -> Result<Encoded, Dsv32Error> {
    let (messages, images) = process_image_messages(messages)?;
    let mut merged = merge_tool_messages(&messages);
    super::dsv4_sglang::sort_tool_results_by_call_order(&mut merged);
    let drop_thinking = !merged.iter().any(|m| py::truthy(get(m, "tools")));
    let full = if thinking && drop_thinking {
        drop_thinking_messages(&merged)
    } else {
        merged
    };
    let effort_line = format(
        REASONING_EFFORT_TEMPLATE,
        &[("budget", &effort.budget().to_string())],
    );
    let call = Call {
        thinking,
        drop_thinking,
        effort_line: &effort_line,
    };
    let last_user_idx = find_last_user_index(&full);
    let mut text = String::from(BOS_TOKEN);
    for idx in 0..full.len() {
        text += &render_message(idx, &full, last_user_idx, call)?;
    }
    Ok(Encoded { text, images })
}

// ---------------------------------------------------------------------------
// serving_chat.py
// ---------------------------------------------------------------------------

/// A release's glue around `encoding_dsv41.encode_messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dsv41Serving {
    /// 0.5.21: every request tool reaches the encoder (`if request.tools`).
    V0521,
    /// 0.5.22: request tools only when they reach the template.
    V0522,
}

impl Dsv41Serving {
    /// `None` before 0.5.21 (no V4.1 encoder: such a model is served as
    /// DeepSeek-V4 by its `DeepseekV4` architecture, or has no chat) and from
    /// 0.5.23 (deepseek-recipe).
    pub fn of_release(version: (u32, u32, u32)) -> Option<Dsv41Serving> {
        match version {
            v if v < (0, 5, 21) => None,
            v if v < (0, 5, 22) => Some(Dsv41Serving::V0521),
            v if v < (0, 5, 23) => Some(Dsv41Serving::V0522),
            _ => None,
        }
    }
}

/// What the release's glue starts from.
#[derive(Debug, Clone, Copy)]
pub struct Dsv41Request<'a> {
    /// `[msg.model_dump() for msg in request.messages]` (see `Dsv4Request`).
    pub messages: &'a [Value],
    /// Each request tool as the request dump holds it (the client's fields),
    /// or `None`; the glue makes [`tool_payload`]s of them.
    pub tools: Option<&'a [Value]>,
    pub tools_reach_template: bool,
    /// `request.chat_template_kwargs.get("thinking")`.
    pub thinking: Option<&'a Value>,
    /// `SGLANG_DEFAULT_THINKING`.
    pub default_thinking: bool,
    pub continue_final_message: bool,
    /// `request.reasoning_effort` (after the `chat_template_kwargs` pop).
    pub reasoning_effort: Option<&'a Value>,
    /// The server default ([`default_effort_from_env`]).
    pub default_effort: &'a Effort,
    pub task: Option<&'a str>,
    /// `model_config.is_multimodal`.
    pub multimodal: bool,
}

/// The prompt text and the `continue_final_message` prefix, tokenized as in
/// `dsv4_sglang::Dsv4Prompt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsv41Prompt {
    pub text: String,
    pub assistant_prefix: Option<String>,
}

/// The release's glue, then `encode_messages`.
pub fn encode(
    serving: Dsv41Serving,
    request: &Dsv41Request<'_>,
) -> Result<Dsv41Prompt, Dsv32Error> {
    // Both releases read the body with orjson: numbers as serde_json holds them.
    let _ = has_big_float;
    let thinking = match request.thinking {
        Some(v) => py::truthy(v),
        None => request.default_thinking,
    };
    let mut messages: Vec<Value> = request.messages.to_vec();
    for message in &mut messages {
        normalize_assistant_tool_call_arguments(message)?;
        if let Value::Object(m) = message {
            if m.get("content").is_none_or(Value::is_null) {
                m.insert("content".into(), Value::String(String::new()));
            }
        }
    }
    let assistant_prefix =
        handle_last_assistant_message(&mut messages, request.continue_final_message);
    let tools = request.tools.filter(|t| !t.is_empty());
    let tools = match serving {
        Dsv41Serving::V0521 => tools,
        Dsv41Serving::V0522 => tools.filter(|_| request.tools_reach_template),
    };
    let first = messages
        .first()
        .ok_or_else(|| error("IndexError", "list index out of range"))?;
    // The empty system message only hosts tools (`dsv41` renders a token for it).
    if role(first) != Some("system") && tools.is_some() {
        messages.insert(0, serde_json::json!({"role": "system", "content": ""}));
    }
    if let Some(tools) = tools {
        messages[0]["tools"] = Value::Array(tools.iter().map(tool_payload).collect());
    }
    if let Some(task) = request.task {
        attach_task_to_last_user_message(&mut messages, task)?;
    }
    let effort = match request.reasoning_effort {
        // `value in REASONING_EFFORT_MAPPINGS` (a dict): a list or dict is unhashable.
        Some(v @ (Value::Array(_) | Value::Object(_))) => {
            return Err(error(
                "TypeError",
                format_args!("unhashable type: '{}'", py::type_name(v)),
            ))
        }
        Some(v) => parse_effort(v).unwrap_or_else(|| request.default_effort.clone()),
        None => request.default_effort.clone(),
    };
    let encoded = encode_messages(&messages, thinking, &effort)?;
    if encoded.images > 0 {
        return Err(if request.multimodal {
            error(
                "Unmodelled",
                "image parts on the DeepSeek-V4.1 encoder: the processor expands each image, which the guard does not count",
            )
        } else {
            error("ValueError", "image input is not supported for this model")
        });
    }
    Ok(Dsv41Prompt {
        text: encoded.text,
        assistant_prefix,
    })
}

#[cfg(test)]
#[path = "dsv41_sglang_tests.rs"]
mod tests;
