//! Which DeepSeek encoder each SGLang release runs, and which port of it
//! counts the prompt: the one place that maps a release to the variants of
//! `dsv32` / `dsv32_serving`, `dsv4_sglang`, `dsv41_sglang` and (0.5.23+)
//! the deepseek-recipe adapter of `dsv4`.
//!
//! Selection (a conversation template, `--chat-template NAME`, overrides
//! every encoder in every release: `chat_template_name is None` is checked
//! first):
//!
//! | releases | rule |
//! |---|---|
//! | up to 0.5.5 | none: a DeepSeek checkpoint without a chat template has no chat |
//! | 0.5.6 - 0.5.11 | `_use_dpsk_v32_encoding`: first architecture contains `DeepseekV3` and the tokenizer has no chat template (no parser rule) |
//! | 0.5.12 - 0.5.15 | `_resolve_chat_encoding_spec`: parser `deepseekv4` / `deepseekv32`, then arch `DeepseekV4`, then the 0.5.6 rule |
//! | 0.5.16 | `chat_encoding.resolve_chat_encoding_spec`: + arch `InklingForConditionalGeneration` (before the dsv32 rule) |
//! | 0.5.17 - 0.5.20 | + parser `kimi_k3` and arch `KimiK3` |
//! | 0.5.21 and later | + parser `deepseekv41` first and `model_type == "deepseek_v41"` / arch `DeepseekV41` before `DeepseekV4` |

//!
//! Counting a chat request on release `v` whose spec is `s`
//! ([`resolve_spec`]), from the validated body:
//!
//! * [`DeepseekEncoder::Dsv32`]`(g)`: `dsv32_serving::encode(g, &Dsv32Request
//!   { messages: &message_dumps(v, body.messages)?, tools: tool_dumps(v,
//!   body.tools), .. })`;
//! * [`DeepseekEncoder::Dsv4`]`(g)`: `dsv4_sglang::encode(g, &Dsv4Request {
//!   messages, tools` (the same dumps)`, profile: EffortProfile::resolve(..), .. })`;
//! * [`DeepseekEncoder::Dsv41`]`(g)`: `dsv41_sglang::encode(g, &Dsv41Request {
//!   messages` (the same dumps)`, tools: body.tools` (the client's fields)`,
//!   default_effort: &default_effort_from_env(..)?, .. })`;
//! * [`DeepseekEncoder::Recipe`]`(spec)`: `dsv4::Dsv4` as before.
//!
//! The first three give text and an optional `continue_final_message`
//! prefix: the prompt is `tokenizer.encode(text)` (special tokens added as
//! the tokenizer adds them: a BOS on the stand-ins, after the BOS the
//! encoder writes) plus `tokenizer.encode(prefix)` without a leading BOS. An
//! `Err` whose `kind()` is `Unmodelled` is the guard's refusal; any other is
//! SGLang's own failure (a refusal too).

use serde_json::Value;

use super::dsv32_serving::{self, Dsv32Serving};
use super::dsv4::Spec;
use super::dsv41_sglang::{self, Dsv41Serving};
use super::dsv4_sglang::{self, Dsv4Serving};
use super::{spec_name, ChatEncoder, Encoder, Host, Jinja, Prompt};
use crate::preprocess::{ChatInputs, MessageStyle};
use crate::release::Release;
use crate::{py, Clock, CountError};

/// [`Encoder::DeepseekRelease`]: which port, on which release, and the
/// server facts it reads.
#[derive(Debug, Clone)]
pub struct DeepseekRelease {
    pub encoder: DeepseekEncoder,
    /// The release's `major.minor.patch` (post releases share their glue).
    pub version: (u32, u32, u32),
    /// DeepSeek-V4 0.5.18+: the effort profiles the server may use (one when
    /// the checkpoint says which, both when the guard cannot see it).
    pub profiles: Vec<dsv4_sglang::EffortProfile>,
    /// DeepSeek-V4.1: `SGLANG_DSV41_REASONING_EFFORT` as SGLang reads it.
    pub dsv41_default_effort: Option<dsv41_sglang::Effort>,
}

impl ChatEncoder for DeepseekRelease {
    fn name(&self) -> &'static str {
        match self.encoder {
            DeepseekEncoder::Dsv32(_) => "dsv32",
            DeepseekEncoder::Dsv4(_) => "dsv4",
            DeepseekEncoder::Dsv41(_) => "dsv41",
            DeepseekEncoder::Recipe(spec) => spec_name(spec),
        }
    }
    fn jinja(&self) -> Option<&Jinja> {
        None
    }
    fn kwargs_reader(&self) -> Option<&str> {
        None
    }
    fn python_template(&self) -> Option<super::glm53::Variant> {
        None
    }
    fn inline_system(&self) -> Option<bool> {
        Some(false)
    }
    fn owns_reasoning_history(&self) -> bool {
        true
    }
    fn message_style(&self) -> MessageStyle {
        MessageStyle::Template
    }
    fn reads_wire(&self) -> bool {
        false
    }
    fn reads_body(&self) -> bool {
        // Each release's glue dumps the messages itself.
        true
    }
    fn modelled_from(&self) -> Option<(Release, &'static str)> {
        None
    }
    fn counts_converted_apis(&self) -> bool {
        true
    }
    fn same_as(&self, other: &Encoder) -> bool {
        matches!(other, Encoder::DeepseekRelease(b)
            if self.encoder == b.encoder
                && self.version == b.version
                && self.profiles == b.profiles
                && self.dsv41_default_effort == b.dsv41_default_effort)
    }

    /// The prompt text and `continue_final_message` prefix, from the request
    /// body, one per effort profile the server may use: `tokenizer.encode`
    /// of the text (its BOS after the encoder's), then the prefix without a
    /// leading BOS.
    fn prompt(
        &self,
        host: &dyn Host,
        inputs: &ChatInputs,
        _clock: Clock,
    ) -> Result<Prompt, CountError> {
        let server = host.server();
        let body = inputs
            .body
            .as_ref()
            .ok_or_else(|| CountError::Unsupported("no request body was kept".into()))?;
        let raw_messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
        let raw_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .filter(|t| !t.is_empty());
        let messages =
            dsv32_serving::message_dumps(self.version, raw_messages).map_err(dsv_error)?;
        let tools = raw_tools.map(|t| dsv32_serving::tool_dumps(self.version, t));
        let thinking = inputs.extra.get("thinking");
        let default_thinking = server.env.default_thinking;
        let continue_final_message = body
            .get("continue_final_message")
            .and_then(py::lax_bool)
            .unwrap_or(false);
        let tools_reach_template = inputs.tools.is_some();
        let task = body.get("task").and_then(Value::as_str);
        let prompts = match self.encoder {
            DeepseekEncoder::Dsv32(serving) => {
                let request = dsv32_serving::Dsv32Request {
                    messages: &messages,
                    tools: tools.as_deref(),
                    tools_reach_template,
                    thinking,
                    default_thinking,
                    continue_final_message,
                };
                let p = dsv32_serving::encode(serving, &request).map_err(dsv_error)?;
                vec![(p.text, p.assistant_prefix)]
            }
            DeepseekEncoder::Dsv4(serving) => {
                let profiles = if self.profiles.is_empty() {
                    vec![dsv4_sglang::EffortProfile::Preview]
                } else {
                    self.profiles.clone()
                };
                let mut out = Vec::with_capacity(profiles.len());
                for profile in profiles {
                    let request = dsv4_sglang::Dsv4Request {
                        messages: &messages,
                        tools: tools.as_deref(),
                        tools_reach_template,
                        thinking,
                        default_thinking,
                        continue_final_message,
                        reasoning_effort: inputs.reasoning_effort.as_ref(),
                        env_effort: server.env.dsv4_reasoning_effort.as_deref(),
                        task,
                        profile,
                    };
                    let p = dsv4_sglang::encode(serving, &request).map_err(dsv_error)?;
                    out.push((p.text, p.assistant_prefix));
                }
                out
            }
            DeepseekEncoder::Dsv41(serving) => {
                let default_effort = self.dsv41_default_effort.as_ref().ok_or_else(|| {
                    CountError::Unsupported("no DeepSeek-V4.1 default effort".into())
                })?;
                let request = dsv41_sglang::Dsv41Request {
                    messages: &messages,
                    tools: raw_tools.map(Vec::as_slice),
                    tools_reach_template,
                    thinking,
                    default_thinking,
                    continue_final_message,
                    reasoning_effort: inputs.reasoning_effort.as_ref(),
                    default_effort,
                    task,
                    multimodal: server.multimodal,
                };
                let p = dsv41_sglang::encode(serving, &request).map_err(dsv_error)?;
                vec![(p.text, p.assistant_prefix)]
            }
            DeepseekEncoder::Recipe(_) => {
                return Err(CountError::Unsupported(
                    "deepseek-recipe runs from 0.5.23 on, through the dsv4 encoder".into(),
                ))
            }
        };
        Ok(Prompt::Alternatives(prompts))
    }
}

/// A release's DeepSeek port's error as the counter reports it.
fn dsv_error(e: super::dsv32::Dsv32Error) -> CountError {
    if e.kind() == "Unmodelled" {
        CountError::Unsupported(format!(
            "the DeepSeek encoder of this SGLang release would build this prompt in a way the guard \
             does not reproduce: {e}"
        ))
    } else {
        CountError::Template(e.to_string())
    }
}

/// The chat encoding spec release `version` resolves (`dsv32`, `dsv4`,
/// `dsv41`, `kimi_k3`, `inkling`), or `None` for the Jinja template.
pub fn resolve_spec(
    version: (u32, u32, u32),
    tool_call_parser: Option<&str>,
    first_architecture: &str,
    model_type: Option<&str>,
    has_chat_template: bool,
) -> Option<&'static str> {
    let arch = first_architecture;
    let dsv32 = (arch.contains("DeepseekV3") && !has_chat_template).then_some("dsv32");
    if version < (0, 5, 6) {
        return None;
    }
    if version < (0, 5, 12) {
        return dsv32;
    }
    let v41 = version >= (0, 5, 21);
    let kimi = version >= (0, 5, 17);
    match tool_call_parser {
        Some("deepseekv41") if v41 => return Some("dsv41"),
        Some("deepseekv4") => return Some("dsv4"),
        Some("deepseekv32") => return Some("dsv32"),
        Some("kimi_k3") if kimi => return Some("kimi_k3"),
        _ => {}
    }
    if v41 && (model_type == Some("deepseek_v41") || arch.contains("DeepseekV41")) {
        return Some("dsv41");
    }
    if arch.contains("DeepseekV4") {
        return Some("dsv4");
    }
    if kimi && arch.contains("KimiK3") {
        return Some("kimi_k3");
    }
    if version >= (0, 5, 16) && arch.contains("InklingForConditionalGeneration") {
        return Some("inkling");
    }
    dsv32
}

/// The port that counts a DeepSeek spec's prompts on a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeepseekEncoder {
    /// `dsv32_serving::encode` with this glue (0.5.6+; 0.5.23 included).
    Dsv32(Dsv32Serving),
    /// `dsv4_sglang::encode` (0.5.12 - 0.5.22).
    Dsv4(Dsv4Serving),
    /// `dsv41_sglang::encode` (0.5.21 - 0.5.22).
    Dsv41(Dsv41Serving),
    /// deepseek-recipe with SGLang's adapter, `dsv4::Dsv4` (0.5.23+).
    Recipe(Spec),
}

impl DeepseekEncoder {
    /// The encoder of `spec` (as [`resolve_spec`] gives it) on release
    /// `version`; `None` for a spec that is not DeepSeek's or a release
    /// without it.
    pub fn for_release(version: (u32, u32, u32), spec: &str) -> Option<DeepseekEncoder> {
        match spec {
            "dsv32" => Dsv32Serving::of_release(version).map(DeepseekEncoder::Dsv32),
            "dsv4" if version >= (0, 5, 23) => Some(DeepseekEncoder::Recipe(Spec::V4)),
            "dsv4" => Dsv4Serving::of_release(version).map(DeepseekEncoder::Dsv4),
            "dsv41" if version >= (0, 5, 23) => Some(DeepseekEncoder::Recipe(Spec::V41)),
            "dsv41" => Dsv41Serving::of_release(version).map(DeepseekEncoder::Dsv41),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every combination `testdata/gen_deepseek_selection.py` gave nine
    /// releases' own `OpenAIServingChat` (parser, architecture, model type,
    /// chat template or not) resolves to the release's own choice.
    #[test]
    fn matches_each_releases_own_choice() {
        let expected: Value =
            serde_json::from_str(include_str!("testdata/deepseek_selection_expected.json"))
                .expect("JSON");
        let mut checked = 0;
        for (v, rows) in expected.as_object().expect("releases") {
            let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let version = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            for row in rows.as_array().expect("rows") {
                let want = &row[4];
                if want.as_str().is_some_and(|w| w.starts_with("error")) {
                    continue; // the release could not build that server here
                }
                let got = resolve_spec(
                    version,
                    row[0].as_str(),
                    row[1].as_str().unwrap_or(""),
                    row[2].as_str(),
                    row[3].as_bool().unwrap(),
                );
                assert_eq!(got, want.as_str(), "{v}: {row}");
                checked += 1;
            }
        }
        assert!(checked > 1500, "{checked}");
    }

    #[test]
    fn each_release_resolves_as_its_code_does() {
        let v32 = "DeepseekV32ForCausalLM";
        let v4 = "DeepseekV4ForCausalLM";
        // No encoder before 0.5.6.
        assert_eq!(
            resolve_spec((0, 5, 5), Some("deepseekv32"), v32, None, false),
            None
        );
        // 0.5.6 - 0.5.11: the architecture rule only.
        assert_eq!(
            resolve_spec((0, 5, 6), None, v32, None, false),
            Some("dsv32")
        );
        assert_eq!(
            resolve_spec((0, 5, 11), Some("deepseekv32"), v32, None, true),
            None
        );
        assert_eq!(
            resolve_spec((0, 5, 11), Some("deepseekv4"), v4, None, false),
            None
        );
        // 0.5.12: the parsers and DeepSeek-V4.
        assert_eq!(
            resolve_spec((0, 5, 12), Some("deepseekv32"), "X", None, true),
            Some("dsv32")
        );
        assert_eq!(
            resolve_spec((0, 5, 12), None, v4, Some("deepseek_v4"), false),
            Some("dsv4")
        );
        // V4.1 from 0.5.21; before, its V4 architecture makes it dsv4.
        assert_eq!(
            resolve_spec(
                (0, 5, 20),
                Some("deepseekv41"),
                v4,
                Some("deepseek_v41"),
                false
            ),
            Some("dsv4")
        );
        assert_eq!(
            resolve_spec((0, 5, 21), None, v4, Some("deepseek_v41"), false),
            Some("dsv41")
        );
        assert_eq!(
            resolve_spec(
                (0, 5, 16),
                None,
                "InklingForConditionalGeneration",
                None,
                false
            ),
            Some("inkling")
        );
        assert_eq!(
            resolve_spec((0, 5, 17), Some("kimi_k3"), v32, None, false),
            Some("kimi_k3")
        );
        assert_eq!(
            resolve_spec((0, 5, 16), Some("kimi_k3"), v32, None, false),
            Some("dsv32")
        );
        assert_eq!(
            DeepseekEncoder::for_release((0, 5, 19), "dsv4"),
            Some(DeepseekEncoder::Dsv4(Dsv4Serving::V0518))
        );
        assert_eq!(
            DeepseekEncoder::for_release((0, 5, 23), "dsv41"),
            Some(DeepseekEncoder::Recipe(Spec::V41))
        );
        assert_eq!(DeepseekEncoder::for_release((0, 5, 20), "dsv41"), None);
        assert_eq!(DeepseekEncoder::for_release((0, 5, 19), "kimi_k3"), None);
    }
}
