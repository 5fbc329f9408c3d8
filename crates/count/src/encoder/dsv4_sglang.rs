//! DeepSeek-V4 prompts before 0.5.23: SGLang's own
//! `sglang/srt/entrypoints/openai/encoding_dsv4.py` (0.5.12 - 0.5.22; 0.5.23
//! uses deepseek-recipe, `dsv4.rs`), ported function by function (each Rust
//! function names the Python one it mirrors), with the `serving_chat.py` glue
//! of each release around it ([`encode`]). Only the encoding half is ported;
//! the completion parser never runs on a prompt.
//!
//! The encoder is selected from 0.5.12 on (the first release that ships the
//! file): `--tool-call-parser deepseekv4`, else a first architecture
//! containing `DeepseekV4` (0.5.12 - 0.5.15 `_resolve_chat_encoding_spec`,
//! 0.5.16+ `chat_encoding.resolve_chat_encoding_spec`; from 0.5.21 V4.1
//! checkpoints go to `encoding_dsv41`, `dsv41_sglang.rs`, first).
//!
//! The prompt is text: SGLang tokenizes it with `tokenizer.encode(real_input)`
//! (special tokens by their spellings, the tokenizer's own BOS added as it
//! adds it), then appends the `continue_final_message` prefix's ids.
//!
//! | releases | file | glue |
//! |---|---|---|
//! | 0.5.12 - 0.5.13 | `REASONING_EFFORT_MAX` only; arguments `json.loads`-ed, an unreadable string becoming `{"arguments": raw}` | effort `max`/`high` kept, else dropped |
//! | 0.5.14 - 0.5.17 | arguments: a string `json.loads`-ed, a dict taken, anything else a `ValueError` | argument strings parsed first (orjson, strict) |
//! | 0.5.18 - 0.5.21 | effort profiles `preview` / `official` (the checkpoint's `encoding/encoding_dsv4.py`, or the config's `dsv4_reasoning_effort_profile`) | the body is read by orjson |
//! | 0.5.22 | (0.5.20's file: 0.5.18's, reformatted) | request tools only when they reach the template |
//!
//! Common to all: list content is its text parts joined by `" "`, `None`
//! content `""`; a trailing assistant text is re-sent as a user turn (or cut
//! off as the `continue_final_message` prefix); a first empty system message
//! hosts every request tool (`Tool.model_dump()`: up to 0.5.21 whatever
//! `tool_choice` says); `thinking` is `chat_template_kwargs.thinking`, else
//! `SGLANG_DEFAULT_THINKING`; the effort is `request.reasoning_effort`, else
//! a non-empty `SGLANG_DSV4_REASONING_EFFORT`, kept only when the encoder
//! accepts it; `task` is set on the last user/developer message. The
//! request's `response_format` does not reach the prompt (only a message's
//! would, and no message model has one).
//!
//! Errors are [`Dsv32Error`]s: `kind()` is the exception SGLang raises (the
//! request fails there too: refuse it) or `Unmodelled` (SGLang builds a
//! prompt the guard does not reproduce: refuse it naming the reason).

use serde_json::{Map, Value};

use super::dsv32::{self, error, format, str_of, str_or_empty, to_json, Dsv32Error};
use super::dsv32_serving::{
    flatten_string_format, handle_last_assistant_message, has_big_float,
    normalize_assistant_tool_call_arguments,
};
use crate::py;

const BOS_TOKEN: &str = "<｜begin▁of▁sentence｜>";
const EOS_TOKEN: &str = "<｜end▁of▁sentence｜>";
const THINKING_START_TOKEN: &str = "<think>";
const THINKING_END_TOKEN: &str = "</think>";
const DSML_TOKEN: &str = "｜DSML｜";
const USER_SP_TOKEN: &str = "<｜User｜>";
const ASSISTANT_SP_TOKEN: &str = "<｜Assistant｜>";
const LATEST_REMINDER_SP_TOKEN: &str = "<｜latest_reminder｜>";
/// `DS_TASK_SP_TOKENS`.
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
const TOOL_CALL_TEMPLATE: &str =
    "<{dsml_token}invoke name=\"{name}\">\n{arguments}\n</{dsml_token}invoke>";
const TOOL_CALLS_TEMPLATE: &str =
    "<{dsml_token}{tc_block_name}>\n{tool_calls}\n</{dsml_token}{tc_block_name}>";
const TOOL_CALLS_BLOCK_NAME: &str = "tool_calls";
const TOOL_OUTPUT_TEMPLATE: &str = "<tool_result>{content}</tool_result>";
const P_DSML_TEMPLATE: &str =
    "<{dsml_token}parameter name=\"{key}\" string=\"{is_str}\">{value}</{dsml_token}parameter>";

/// `REASONING_EFFORT_MAX` (0.5.12 - 0.5.17), `REASONING_EFFORT_PREVIEW_MAX` after.
pub const REASONING_EFFORT_PREVIEW_MAX: &str = concat!(
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n",
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n",
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n",
);

/// `REASONING_EFFORT_OFFICIAL_MAX` (0.5.18+).
pub const REASONING_EFFORT_OFFICIAL_MAX: &str = concat!(
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n",
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\n",
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n",
);

/// `TOOLS_TEMPLATE`.
const TOOLS_TEMPLATE: &str = r#"## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<{dsml_token}tool_calls>" block like the following:

<{dsml_token}tool_calls>
<{dsml_token}invoke name="$TOOL_NAME">
<{dsml_token}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{dsml_token}parameter>
...
</{dsml_token}invoke>
<{dsml_token}invoke name="$TOOL_NAME2">
...
</{dsml_token}invoke>
</{dsml_token}tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by {thinking_start_token}), you MUST output your complete reasoning inside {thinking_start_token}...{thinking_end_token} BEFORE any tool calls or final response.

Otherwise, output directly after {thinking_end_token} with tool calls or final response.

### Available Tool Schemas

{tool_schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
"#;

/// The `encoding_dsv4.py` a release ships, where versions encode or fail
/// differently (md5: 0.5.12 `5768bade`, 0.5.14 `7ed33492`, 0.5.18
/// `1a715efb`, 0.5.20 `108e740d`, the last 0.5.18's reformatted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dsv4File {
    /// 0.5.12 - 0.5.13: `assert reasoning_effort in ["max", None, "high"]`,
    /// `max` adds `REASONING_EFFORT_MAX`; `json.loads(arguments)` in a `try`
    /// whose failure renders `{"arguments": raw}`.
    V0512,
    /// 0.5.14 - 0.5.17: arguments as 0.5.14's `encoding_dsv32`.
    V0514,
    /// 0.5.18 - 0.5.22: the effort profiles.
    V0518,
}

/// The DeepSeek-V4 effort mapping of 0.5.18+ (`REASONING_EFFORT_PROFILES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffortProfile {
    /// `high` (the default) adds nothing, `max` the preview text.
    Preview,
    /// `low` (the default) adds nothing, `high` the preview max text, `max`
    /// the official max text.
    Official,
}

impl EffortProfile {
    /// The profile `chat_encoding.resolve_dsv4_reasoning_effort_profile`
    /// resolves: the config's `dsv4_reasoning_effort_profile` when set (any
    /// other value than the two names stops SGLang at boot: `Err`), else
    /// what the checkpoint's `encoding/encoding_dsv4.py` says
    /// ([`EffortProfile::detect`]), else `preview`.
    pub fn resolve(
        override_: Option<&Value>,
        checkpoint_encoder: Option<&str>,
    ) -> Result<EffortProfile, String> {
        match override_ {
            Some(Value::Null) | None => {}
            Some(Value::String(s)) if s == "preview" => return Ok(EffortProfile::Preview),
            Some(Value::String(s)) if s == "official" => return Ok(EffortProfile::Official),
            Some(other) => {
                return Err(format!(
                    "Invalid dsv4_reasoning_effort_profile: {}; expected one of ['preview', 'official']",
                    py::repr(other)
                ))
            }
        }
        match checkpoint_encoder {
            None => Ok(EffortProfile::Preview),
            Some(source) => {
                EffortProfile::detect(source).map(|p| p.unwrap_or(EffortProfile::Preview))
            }
        }
    }

    /// `_detect_dsv4_reasoning_effort_profile` on the checkpoint's
    /// `encoding/encoding_dsv4.py`: `official` when its module-level
    /// `DEFAULT_REASONING_EFFORT` is `"low"` and `REASONING_EFFORT_PROMPTS`
    /// has `low`, `high` and `max`; `preview` when it assigns
    /// `REASONING_EFFORT_MAX`; else `None`. SGLang evaluates the
    /// assignments with `ast.literal_eval`; this reads the simple shapes
    /// DeepSeek's files use and answers `Err` (not modelled) when a name
    /// that decides is assigned in any other shape.
    pub fn detect(source: &str) -> Result<Option<EffortProfile>, String> {
        let lines: Vec<&str> = source.lines().collect();
        // What `ast.literal_eval` made of each deciding name (`None`: it
        // failed, so the name is not among SGLang's assignments).
        let mut default_effort: Option<String> = None;
        let mut prompts_keys: Option<Vec<String>> = None;
        let mut has_max = false;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with([' ', '\t', ')', '}', '#']) {
                continue;
            }
            let Some((target, value)) = top_level_assignment(line) else {
                continue;
            };
            let value = value.trim();
            match target {
                "DEFAULT_REASONING_EFFORT" => match literal(value, &lines[i + 1..])? {
                    Literal::Str(s) => default_effort = Some(s),
                    Literal::Skipped => default_effort = None,
                    Literal::Dict(_) => default_effort = None,
                },
                "REASONING_EFFORT_PROMPTS" => match literal(value, &lines[i + 1..])? {
                    Literal::Dict(keys) => prompts_keys = Some(keys),
                    Literal::Str(_) | Literal::Skipped => prompts_keys = None,
                },
                "REASONING_EFFORT_MAX" => {
                    has_max = !matches!(literal(value, &lines[i + 1..])?, Literal::Skipped)
                }
                _ => {}
            }
        }
        let official = default_effort.as_deref() == Some("low")
            && prompts_keys.as_ref().is_some_and(|k| {
                ["low", "high", "max"]
                    .iter()
                    .all(|w| k.iter().any(|x| x == w))
            });
        Ok(if official {
            Some(EffortProfile::Official)
        } else if has_max {
            Some(EffortProfile::Preview)
        } else {
            None
        })
    }

    fn name(self) -> &'static str {
        match self {
            EffortProfile::Preview => "preview",
            EffortProfile::Official => "official",
        }
    }

    /// `REASONING_EFFORT_PROFILES[profile]`, in its order.
    fn prompts(self) -> &'static [(&'static str, &'static str)] {
        match self {
            EffortProfile::Preview => &[("high", ""), ("max", REASONING_EFFORT_PREVIEW_MAX)],
            EffortProfile::Official => &[
                ("low", ""),
                ("high", REASONING_EFFORT_PREVIEW_MAX),
                ("max", REASONING_EFFORT_OFFICIAL_MAX),
            ],
        }
    }
}

/// `NAME = value` or `NAME: type = value` at module level.
fn top_level_assignment(line: &str) -> Option<(&str, &str)> {
    let (left, value) = line.split_once('=')?;
    if value.starts_with('=') {
        return None;
    }
    let target = left.split(':').next()?.trim();
    let ident = !target.is_empty()
        && target
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !target.starts_with(|c: char| c.is_ascii_digit());
    ident.then_some((target, value))
}

/// A module-level value as `ast.literal_eval` sees it, in the shapes read
/// here.
enum Literal {
    /// A string (one literal, or adjacent literals in parentheses).
    Str(String),
    /// A dict of string keys whose values are all literals: its keys.
    Dict(Vec<String>),
    /// A name or call: `literal_eval` raises, SGLang skips the assignment.
    Skipped,
}

/// The body of a one-line string literal without escapes: `"x"` or `'x'`.
fn simple_string(v: &str) -> Option<String> {
    let v = v.trim().trim_end_matches(',').trim_end();
    let quote = v.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let inner = v.strip_prefix(quote)?.strip_suffix(quote)?;
    (!inner.contains(quote) && !inner.contains('\\')).then(|| inner.to_string())
}

fn is_name(v: &str) -> bool {
    let v = v.trim().trim_end_matches(',').trim_end();
    !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && !v.starts_with(|c: char| c.is_ascii_digit())
}

/// The value `value` (the rest of its first line; `after` the following
/// lines), or `Err` for a shape this does not read.
fn literal(value: &str, after: &[&str]) -> Result<Literal, String> {
    let unread = || format!("`{value}`: a value the guard does not read");
    if let Some(s) = simple_string(value) {
        return Ok(Literal::Str(s));
    }
    if is_name(value) {
        return Ok(Literal::Skipped);
    }
    if value == "(" {
        // Adjacent string literals, one a line, up to `)`.
        let mut text = String::new();
        for line in after {
            let t = line.trim();
            if t == ")" {
                return Ok(Literal::Str(text));
            }
            text += &simple_string(t).ok_or_else(unread)?;
        }
        return Err(unread());
    }
    if value == "{" {
        let mut keys = Vec::new();
        let mut literal_values = true;
        for line in after {
            let t = line.trim();
            if t == "}" {
                return Ok(if literal_values {
                    Literal::Dict(keys)
                } else {
                    Literal::Skipped
                });
            }
            let (k, v) = t.split_once(':').ok_or_else(unread)?;
            keys.push(simple_string(k).ok_or_else(unread)?);
            if is_name(v) {
                literal_values = false;
            } else if simple_string(v).is_none() {
                return Err(unread());
            }
        }
        return Err(unread());
    }
    Err(unread())
}

// ---------------------------------------------------------------------------
// encoding_dsv4.py
// ---------------------------------------------------------------------------

fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    static NONE: Value = Value::Null;
    v.get(key).unwrap_or(&NONE)
}

fn role(v: &Value) -> Option<&str> {
    v.get("role").and_then(Value::as_str)
}

/// `render_tools(tools)`.
fn render_tools(tools: &[&Value]) -> String {
    let tools_json: Vec<String> = tools.iter().map(|t| to_json(t)).collect();
    format(
        TOOLS_TEMPLATE,
        &[
            ("tool_schemas", &tools_json.join("\n")),
            ("dsml_token", DSML_TOKEN),
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
            let arguments = f
                .get("arguments")
                .ok_or_else(|| error("KeyError", "'arguments'"))?;
            Ok((name, arguments))
        })
        .collect()
}

/// `encode_arguments_to_dsml(tool_call)`.
fn encode_arguments_to_dsml(file: Dsv4File, arguments: &Value) -> Result<String, Dsv32Error> {
    let parsed;
    let arguments = match (file, arguments) {
        (_, Value::String(s)) => match (file, dsv32::json_loads(s)) {
            (_, Ok(v)) => {
                parsed = v;
                &parsed
            }
            // `except Exception: arguments = {"arguments": raw}`.
            (Dsv4File::V0512, Err(e)) if e.kind() == "JSONDecodeError" => {
                parsed = serde_json::json!({ "arguments": s });
                &parsed
            }
            (_, Err(e)) => return Err(e),
        },
        // json.loads of a non-string raises TypeError, caught the same way.
        (Dsv4File::V0512, other) => {
            parsed = serde_json::json!({ "arguments": other });
            &parsed
        }
        (Dsv4File::V0514 | Dsv4File::V0518, other) => other,
    };
    let Value::Object(arguments) = arguments else {
        return Err(match file {
            Dsv4File::V0512 => error(
                "AttributeError",
                format_args!(
                    "'{}' object has no attribute 'items'",
                    py::type_name(arguments)
                ),
            ),
            Dsv4File::V0514 | Dsv4File::V0518 => error(
                "ValueError",
                "Assistant tool call function.arguments must be a JSON object.",
            ),
        });
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
                    ("key", k),
                    ("is_str", is_str),
                    ("value", &value),
                ],
            )
        })
        .collect();
    Ok(strs.join("\n"))
}

/// `find_last_user_index(messages)`.
fn find_last_user_index(messages: &[Value]) -> isize {
    messages
        .iter()
        .rposition(|m| matches!(role(m), Some("user" | "developer")))
        .map_or(-1, |i| i as isize)
}

/// `attach_task_to_last_user_message(messages, task)`.
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

/// The effort arguments of `render_message`, checked once: the text the
/// first message opens with in thinking mode.
fn effort_prefix(
    file: Dsv4File,
    effort: Option<&str>,
    profile: EffortProfile,
) -> Result<&'static str, Dsv32Error> {
    match file {
        Dsv4File::V0512 | Dsv4File::V0514 => match effort {
            None | Some("high") => Ok(""),
            Some("max") => Ok(REASONING_EFFORT_PREVIEW_MAX),
            Some(other) => Err(error(
                "AssertionError",
                format_args!("Invalid reasoning effort: {other}"),
            )),
        },
        Dsv4File::V0518 => {
            let prompts = profile.prompts();
            let effort = effort.unwrap_or(match profile {
                EffortProfile::Official => "low",
                EffortProfile::Preview => "high",
            });
            prompts.iter().find(|(k, _)| *k == effort).map(|(_, p)| *p).ok_or_else(|| {
                let keys: Vec<String> = prompts.iter().map(|(k, _)| format!("'{k}'")).collect();
                error(
                    "ValueError",
                    format_args!(
                        "Invalid reasoning effort '{effort}' for profile '{}'; expected one of [{}]",
                        profile.name(),
                        keys.join(", ")
                    ),
                )
            })
        }
    }
}

/// What `encode_messages` is called with, besides the messages.
#[derive(Debug, Clone, Copy)]
struct Call {
    file: Dsv4File,
    thinking: bool,
    drop_thinking: bool,
    /// [`effort_prefix`].
    effort_prefix: &'static str,
}

/// `render_message(index, messages, thinking_mode, drop_thinking,
/// reasoning_effort[, reasoning_effort_profile])`: the role branches are
/// the `render_*` functions below it, in the Python's order.
fn render_message(
    index: usize,
    messages: &[Value],
    last_user_idx: isize,
    call: Call,
) -> Result<String, Dsv32Error> {
    let msg = &messages[index];
    if !msg.is_object() {
        return Err(error(
            "AttributeError",
            format_args!("'{}' object has no attribute 'get'", py::type_name(msg)),
        ));
    }
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

    let mut prompt = String::new();
    if index == 0 && call.thinking {
        prompt += call.effort_prefix;
    }
    prompt += &match role_v.as_str() {
        Some("system") => render_system(msg, tools.as_deref())?,
        Some("developer") => render_developer(msg, tools.as_deref())?,
        Some("user") => render_user(msg)?,
        Some("latest_reminder") => {
            format!("{LATEST_REMINDER_SP_TOKEN}{}", str_of(get(msg, "content"))?)
        }
        Some("tool") => {
            return Err(error(
                "NotImplementedError",
                "deepseek_v4 merges tool messages into user; please preprocess with merge_tool_messages()",
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

/// `render_message`'s `role == "system"` branch.
fn render_system(msg: &Value, tools: Option<&[&Value]>) -> Result<String, Dsv32Error> {
    let mut prompt = String::new();
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
            "can only concatenate str (not \"list\") to str",
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
        // `prompt += content or ""`.
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
    Ok(match get(block, "type").as_str() {
        Some("text") => {
            str_of(block.get("text").unwrap_or(&Value::String(String::new())))?.into_owned()
        }
        Some("tool_result") => {
            let tool_content = block
                .get("content")
                .cloned()
                .unwrap_or(Value::String(String::new()));
            let text = match &tool_content {
                Value::Array(items) => items
                    .iter()
                    .map(|b| match get(b, "type").as_str() {
                        Some("text") => {
                            str_of(b.get("text").unwrap_or(&Value::String(String::new())))
                                .map(|s| s.into_owned())
                        }
                        _ => Ok(format!("[Unsupported {}]", py::message_str(get(b, "type")))),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join("\n\n"),
                other => str_of(other)?.into_owned(),
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
    call: Call,
    tool_calls: Option<&[(&Value, &Value)]>,
) -> Result<String, Dsv32Error> {
    let msg = &messages[index];
    let tc_content = match tool_calls {
        Some(calls) => render_tool_calls(call.file, calls)?,
        None => String::new(),
    };
    let summary = str_or_empty(get(msg, "content"))?;
    let rc = str_or_empty(get(msg, "reasoning_content"))?;
    // The answer to a task turn is not reasoned about.
    let prev_has_task = index >= 1 && !get(&messages[index - 1], "task").is_null();
    let mut thinking_part = String::new();
    if call.thinking && !prev_has_task && (!call.drop_thinking || index as isize > last_user_idx) {
        thinking_part = format!("{rc}{THINKING_END_TOKEN}");
    }
    let mut prompt = thinking_part;
    prompt += &summary;
    prompt += &tc_content;
    if !py::truthy(get(msg, "wo_eos")) {
        prompt += EOS_TOKEN;
    }
    Ok(prompt)
}

/// An assistant message's `tc_content`: its tool calls as one DSML block.
fn render_tool_calls(file: Dsv4File, calls: &[(&Value, &Value)]) -> Result<String, Dsv32Error> {
    let list = calls
        .iter()
        .map(|(name, arguments)| {
            Ok(format(
                TOOL_CALL_TEMPLATE,
                &[
                    ("dsml_token", DSML_TOKEN),
                    ("name", &str_of(name)?),
                    ("arguments", &encode_arguments_to_dsml(file, arguments)?),
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

/// The tail of `render_message`: the transition tokens, by what follows.
fn render_transition(
    index: usize,
    messages: &[Value],
    last_user_idx: isize,
    call: Call,
) -> Result<String, Dsv32Error> {
    let mut prompt = String::new();
    if let Some(next) = messages.get(index + 1) {
        if !matches!(role(next), Some("assistant" | "latest_reminder")) {
            return Ok(prompt);
        }
    }
    let msg = &messages[index];
    let task = get(msg, "task");
    if !task.is_null() {
        let token = TASKS
            .iter()
            .find(|(name, _)| task.as_str() == Some(*name))
            .map(|(_, t)| *t);
        let Some(token) = token else {
            return Err(error(
                "AssertionError",
                format_args!(
                    "Invalid task: '{}'. Valid tasks are: {}",
                    py::message_str(task),
                    "(a set)"
                ),
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
    } else if matches!(role(msg), Some("user" | "developer")) {
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
                    push_block(merged.last_mut(), block);
                } else {
                    merged.push(serde_json::json!({"role": "user", "content_blocks": [block]}));
                }
            }
            Some("user") => {
                let content = msg
                    .get("content")
                    .cloned()
                    .unwrap_or(Value::String(String::new()));
                let block = serde_json::json!({"type": "text", "text": content});
                let open =
                    merged_user(&merged) && merged.last().is_some_and(|m| get(m, "task").is_null());
                if open {
                    push_block(merged.last_mut(), block);
                } else {
                    let mut new_msg = Map::new();
                    new_msg.insert("role".into(), Value::String("user".into()));
                    new_msg.insert("content".into(), content);
                    new_msg.insert("content_blocks".into(), Value::Array(vec![block]));
                    for key in ["task", "wo_eos", "mask"] {
                        if let Some(v) = msg.get(key) {
                            new_msg.insert(key.into(), v.clone());
                        }
                    }
                    merged.push(Value::Object(new_msg));
                }
            }
            _ => merged.push(msg.clone()),
        }
    }
    merged
}

fn push_block(msg: Option<&mut Value>, block: Value) {
    if let Some(Value::Array(blocks)) = msg.and_then(|m| m.get_mut("content_blocks")) {
        blocks.push(block);
    }
}

/// `sort_tool_results_by_call_order(messages)`: each user message's
/// tool results in the order of the last assistant tool calls (a stable
/// sort; an unknown id sorts as 0).
pub(super) fn sort_tool_results_by_call_order(messages: &mut [Value]) {
    let mut order: Vec<(String, usize)> = Vec::new();
    for msg in messages.iter_mut() {
        match role(msg) {
            Some("assistant") if py::truthy(get(msg, "tool_calls")) => {
                order.clear();
                if let Some(Value::Array(calls)) = msg.get("tool_calls") {
                    for (idx, tc) in calls.iter().enumerate() {
                        let id = match tc.get("id") {
                            Some(v) if py::truthy(v) => v.clone(),
                            _ => tc
                                .get("function")
                                .and_then(|f| f.get("id"))
                                .cloned()
                                .unwrap_or(Value::Null),
                        };
                        if let Value::String(id) = id {
                            if !id.is_empty() {
                                // Later duplicates overwrite, as in a dict.
                                match order.iter_mut().find(|(k, _)| *k == id) {
                                    Some(slot) => slot.1 = idx,
                                    None => order.push((id, idx)),
                                }
                            }
                        }
                    }
                }
            }
            Some("user") if py::truthy(get(msg, "content_blocks")) => {
                let Some(Value::Array(blocks)) = msg.get_mut("content_blocks") else {
                    continue;
                };
                let is_result = |b: &Value| get(b, "type").as_str() == Some("tool_result");
                let mut results: Vec<Value> =
                    blocks.iter().filter(|b| is_result(b)).cloned().collect();
                if results.len() > 1 && !order.is_empty() {
                    let key = |b: &Value| {
                        let id = get(b, "tool_use_id");
                        order
                            .iter()
                            .find(|(k, _)| Some(k.as_str()) == id.as_str())
                            .map_or(0, |(_, i)| *i)
                    };
                    results.sort_by_key(key);
                    let mut sorted = results.into_iter();
                    for block in blocks.iter_mut() {
                        if is_result(block) {
                            *block = sorted.next().expect("as many results");
                        }
                    }
                }
            }
            _ => {}
        }
    }
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

/// `encode_messages(messages, thinking_mode, reasoning_effort=...[,
/// reasoning_effort_profile=...])` with the other defaults (no context,
/// `drop_thinking=True`, BOS): SGLang's call.
pub fn encode_messages(
    file: Dsv4File,
    messages: &[Value],
    thinking: bool,
    effort: Option<&str>,
    profile: EffortProfile,
) -> Result<String, Dsv32Error> {
    let mut merged = merge_tool_messages(messages);
    sort_tool_results_by_call_order(&mut merged);
    // Tools anywhere keep every turn's reasoning.
    let drop_thinking = !merged.iter().any(|m| py::truthy(get(m, "tools")));
    let full = if thinking && drop_thinking {
        drop_thinking_messages(&merged)
    } else {
        merged
    };
    let mut prompt = String::from(BOS_TOKEN);
    if full.is_empty() {
        return Ok(prompt);
    }
    let call = Call {
        file,
        thinking,
        drop_thinking,
        effort_prefix: effort_prefix(file, effort, profile)?,
    };
    let last_user_idx = find_last_user_index(&full);
    for idx in 0..full.len() {
        prompt += &render_message(idx, &full, last_user_idx, call)?;
    }
    Ok(prompt)
}

// ---------------------------------------------------------------------------
// serving_chat.py
// ---------------------------------------------------------------------------

/// A release's glue around `encoding_dsv4.encode_messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dsv4Serving {
    /// 0.5.12 - 0.5.13.
    V0512,
    /// 0.5.14 - 0.5.17.
    V0514,
    /// 0.5.18 - 0.5.21.
    V0518,
    /// 0.5.22.
    V0522,
}

impl Dsv4Serving {
    /// The glue of release `major.minor.patch`; `None` before 0.5.12 (no
    /// DeepSeek-V4 encoder: such a checkpoint has no chat template, so no
    /// chat) and from 0.5.23 (deepseek-recipe: `dsv4.rs`).
    pub fn of_release(version: (u32, u32, u32)) -> Option<Dsv4Serving> {
        Some(match version {
            v if v < (0, 5, 12) => return None,
            v if v < (0, 5, 14) => Dsv4Serving::V0512,
            v if v < (0, 5, 18) => Dsv4Serving::V0514,
            v if v < (0, 5, 22) => Dsv4Serving::V0518,
            v if v < (0, 5, 23) => Dsv4Serving::V0522,
            _ => return None,
        })
    }

    /// The encoder file the release ships.
    pub fn file(self) -> Dsv4File {
        match self {
            Dsv4Serving::V0512 => Dsv4File::V0512,
            Dsv4Serving::V0514 => Dsv4File::V0514,
            Dsv4Serving::V0518 | Dsv4Serving::V0522 => Dsv4File::V0518,
        }
    }

    /// Whether the release reads the effort profile (0.5.18+).
    pub fn has_profiles(self) -> bool {
        self >= Dsv4Serving::V0518
    }
}

/// What the release's glue starts from (see `dsv32_serving::Dsv32Request`
/// for the shared fields).
#[derive(Debug, Clone, Copy)]
pub struct Dsv4Request<'a> {
    /// `[msg.model_dump() for msg in request.messages]`: every field of the
    /// message's model, `None` as null, list content as its parts' dumps,
    /// tool-call `arguments` as sent.
    pub messages: &'a [Value],
    /// `[tool.model_dump() for tool in request.tools]`, or `None`.
    pub tools: Option<&'a [Value]>,
    /// The request's tools reach the template (read by 0.5.22).
    pub tools_reach_template: bool,
    /// `request.chat_template_kwargs.get("thinking")`; `None` when absent.
    pub thinking: Option<&'a Value>,
    /// `SGLANG_DEFAULT_THINKING`.
    pub default_thinking: bool,
    pub continue_final_message: bool,
    /// `request.reasoning_effort` (after `chat_template_kwargs.reasoning_effort`
    /// replaced it, as `_convert_to_internal_request` does); `None` when null.
    pub reasoning_effort: Option<&'a Value>,
    /// `SGLANG_DSV4_REASONING_EFFORT` as set (unset: `None`).
    pub env_effort: Option<&'a str>,
    /// `request.task`.
    pub task: Option<&'a str>,
    /// The model's effort profile (0.5.18+; [`EffortProfile::resolve`]).
    pub profile: EffortProfile,
}

/// The prompt text (`tokenizer.encode(text)`, special tokens added as the
/// tokenizer adds them) and the `continue_final_message` prefix
/// (`tokenizer.encode(prefix)` without a leading BOS, appended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsv4Prompt {
    pub text: String,
    pub assistant_prefix: Option<String>,
}

/// The release's glue, then its `encode_messages`.
pub fn encode(serving: Dsv4Serving, request: &Dsv4Request<'_>) -> Result<Dsv4Prompt, Dsv32Error> {
    if serving < Dsv4Serving::V0518 {
        let tools = request.tools.unwrap_or_default();
        if request.messages.iter().chain(tools).any(has_big_float) {
            return Err(error(
                "Unmodelled",
                "a number beyond the 64-bit integers: this release reads the body with Python's json, which \
                 keeps an integer literal exact, and the guard cannot tell such a literal from a float",
            ));
        }
    }
    let thinking = match request.thinking {
        Some(v) => py::truthy(v),
        None => request.default_thinking,
    };
    let mut messages: Vec<Value> = request.messages.to_vec();
    if serving >= Dsv4Serving::V0514 {
        for message in &mut messages {
            normalize_assistant_tool_call_arguments(message)?;
        }
    }
    for message in &mut messages {
        if matches!(message.get("content"), Some(Value::Array(_))) {
            *message = flatten_string_format(message);
        }
        if let Value::Object(m) = message {
            if m.get("content").is_none_or(Value::is_null) {
                m.insert("content".into(), Value::String(String::new()));
            }
        }
    }
    let assistant_prefix =
        handle_last_assistant_message(&mut messages, request.continue_final_message);
    let first = messages
        .first()
        .ok_or_else(|| error("IndexError", "list index out of range"))?;
    if role(first) != Some("system") {
        messages.insert(0, serde_json::json!({"role": "system", "content": ""}));
    }
    let tools = request.tools.filter(|t| !t.is_empty());
    let tools = match serving {
        Dsv4Serving::V0522 => tools.filter(|_| request.tools_reach_template),
        Dsv4Serving::V0512 | Dsv4Serving::V0514 | Dsv4Serving::V0518 => tools,
    };
    if let Some(tools) = tools {
        messages[0]["tools"] = Value::Array(tools.to_vec());
    }
    // effort_source: the request's, else a non-empty environment value.
    let source: Option<Value> = match request.reasoning_effort {
        Some(v) if !v.is_null() => Some(v.clone()),
        _ => request
            .env_effort
            .filter(|e| !e.is_empty())
            .map(|e| Value::String(e.into())),
    };
    let effort = match (serving.has_profiles(), &source) {
        // `effort_source in accepted_efforts` (a dict): a list or dict is unhashable.
        (true, Some(v @ (Value::Array(_) | Value::Object(_)))) => {
            return Err(error(
                "TypeError",
                format_args!("unhashable type: '{}'", py::type_name(v)),
            ))
        }
        (true, Some(Value::String(s))) if request.profile.prompts().iter().any(|(k, _)| k == s) => {
            Some(s.as_str())
        }
        // `effort_source in ("max", "high")`.
        (false, Some(Value::String(s))) if s == "max" || s == "high" => Some(s.as_str()),
        _ => None,
    };
    if let Some(task) = request.task {
        attach_task_to_last_user_message(&mut messages, task)?;
    }
    let text = encode_messages(serving.file(), &messages, thinking, effort, request.profile)?;
    Ok(Dsv4Prompt {
        text,
        assistant_prefix,
    })
}

#[cfg(test)]
#[path = "dsv4_sglang_tests.rs"]
mod tests;
