//! The SGLang releases the guard counts for, grouped into families that build
//! the same prompt ids from the same request and server settings.
//!
//! Every family is one [`Release`]; what it does differently is answered in
//! one place each: [`Release::chat_rules`] for the chat path, and the
//! methods below it for the tokenizer and the encoders. Each family was
//! compared with the Python its releases run (`src/count/testdata/gen_releases.py`,
//! `tests/releases.rs`).
//!
//! A server whose release is not known (a static configuration that states
//! none, a worker that does not say, workers on different releases) may be
//! any of several families: [`Releases`] holds them, and a prompt is counted
//! as each of them builds it, the largest count winning.

use serde_json::Value;

/// The SGLang release the guard's counts are checked against (the goldens').
pub const REFERENCE_VERSION: &str = "0.5.23";

/// A family of SGLang releases that build the same prompt ids; named after its
/// first release. Ordered oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Release {
    /// 0.5.19-0.5.21.
    V0519,
    /// 0.5.22.
    V0522,
    /// 0.5.23 and later: the reference.
    V0523,
}

impl Release {
    /// Every family, oldest first.
    pub const ALL: [Release; 3] = [Release::V0519, Release::V0522, Release::V0523];

    /// The family of release `version` (`major.minor.patch`), or `None` for
    /// a release older than every family.
    pub fn of(version: (u32, u32, u32)) -> Option<Release> {
        match version {
            v if v < (0, 5, 19) => None,
            v if v < (0, 5, 22) => Some(Release::V0519),
            v if v < (0, 5, 23) => Some(Release::V0522),
            _ => Some(Release::V0523),
        }
    }

    /// The releases of the family, for messages and the README.
    pub fn range(self) -> &'static str {
        match self {
            Release::V0519 => "0.5.19-0.5.21",
            Release::V0522 => "0.5.22",
            Release::V0523 => "0.5.23 and later",
        }
    }

    /// How the family's chat path turns a request into template inputs.
    pub fn chat_rules(self) -> ChatRules {
        match self {
            Release::V0519 => ChatRules {
                tool_dump: ToolDump::ModelFields,
                encoder_tools: EncoderTools::EveryRequestTool,
            },
            Release::V0522 => ChatRules {
                tool_dump: ToolDump::ModelFields,
                encoder_tools: EncoderTools::AsTheTemplate,
            },
            Release::V0523 => ChatRules {
                tool_dump: ToolDump::ClientKeys,
                encoder_tools: EncoderTools::AsTheTemplate,
            },
        }
    }
}

/// What a family's chat path does differently, one field per difference,
/// each named after what SGLang does. The chat preprocessing reads them
/// through [`Consulted`], so that a request which never meets a difference
/// is built once for every family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChatRules {
    pub tool_dump: ToolDump,
    pub encoder_tools: EncoderTools,
}

/// How a request tool reaches the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolDump {
    /// `Tool.model_dump()` of a `Function` model with `strict: bool = False`
    /// and no key order: `description, name, parameters, strict,
    /// [defer_loading]`, `"strict": false` where the client set none.
    ModelFields,
    /// `Function._serialize`: the client's keys in the client's order.
    ClientKeys,
}

/// Which request tools the model-specific encoders (DeepSeek) receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncoderTools {
    /// `if request.tools:` every request tool, even under `tool_choice: "none"`.
    EveryRequestTool,
    /// `request.tools if tools else None`: only when the template gets tools.
    AsTheTemplate,
}

/// The questions of [`ChatRules`], as bits of [`Consulted`]'s record.
#[derive(Debug, Clone, Copy)]
#[repr(u32)]
enum Rule {
    ToolDump = 1,
    EncoderTools = 1 << 1,
}

/// A family's [`ChatRules`] with a record of the rules a request's
/// preprocessing consulted. Another family whose rules agree on every
/// consulted one builds the same inputs from that request
/// ([`Consulted::agrees_with`]); the preprocessing reads the rules only
/// through the accessors here, which is what makes the record complete.
#[derive(Debug)]
pub struct Consulted {
    rules: ChatRules,
    asked: std::cell::Cell<u32>,
}

impl Consulted {
    pub fn new(rules: ChatRules) -> Self {
        Self {
            rules,
            asked: std::cell::Cell::new(0),
        }
    }

    fn ask(&self, rule: Rule) {
        self.asked.set(self.asked.get() | rule as u32);
    }

    pub fn tool_dump(&self) -> ToolDump {
        self.ask(Rule::ToolDump);
        self.rules.tool_dump
    }

    pub fn encoder_tools(&self) -> EncoderTools {
        self.ask(Rule::EncoderTools);
        self.rules.encoder_tools
    }

    /// Whether `other` answers every rule consulted so far as these rules do.
    pub fn agrees_with(&self, other: &ChatRules) -> bool {
        let asked = self.asked.get();
        let differs = |rule: Rule, same: bool| asked & rule as u32 != 0 && !same;
        let ChatRules {
            tool_dump,
            encoder_tools,
        } = *other;
        !(differs(Rule::ToolDump, tool_dump == self.rules.tool_dump)
            || differs(
                Rule::EncoderTools,
                encoder_tools == self.rules.encoder_tools,
            ))
    }
}

/// A non-empty set of [`Release`]s, oldest first; by default the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Releases(Vec<Release>);

impl Default for Releases {
    fn default() -> Self {
        Releases(vec![Release::V0523])
    }
}

/// The spelling of a version nobody stated: every family.
pub const UNKNOWN_VERSION: &str = "unknown";

impl Releases {
    /// Every family: the release is not known.
    pub fn any() -> Self {
        Releases(Release::ALL.to_vec())
    }

    pub fn one(release: Release) -> Self {
        Releases(vec![release])
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Release> + '_ {
        self.0.iter().copied()
    }

    /// Whether any release before `release` may be running.
    pub fn any_before(&self, release: Release) -> bool {
        self.0.first().is_some_and(|r| *r < release)
    }

    /// The families `value` names: one version string, or the list several
    /// workers report. A version that cannot be read, or
    /// [`UNKNOWN_VERSION`], is every family (an unknown release counts as
    /// the largest); a release older than every family is refused with why.
    pub fn of_versions(value: &Value) -> Result<Releases, String> {
        let versions: Vec<&Value> = match value {
            Value::Array(list) => list.iter().collect(),
            v => vec![v],
        };
        let mut releases = Vec::new();
        for v in versions {
            let Some(parsed) = v.as_str().and_then(parse_version) else {
                return Ok(Releases::any());
            };
            let release = Release::of(parsed).ok_or_else(|| {
                format!(
                    "{} is older than {}, the oldest SGLang release the guard models",
                    v.as_str().unwrap_or_default(),
                    Release::ALL[0].range()
                )
            })?;
            releases.push(release);
        }
        releases.sort();
        releases.dedup();
        Ok(Releases(releases))
    }
}

/// `major.minor.patch` of an SGLang version string (`0.5.19`, `0.5.19.post1`,
/// `0.5.23rc0`, `v0.5.20`, `0.5.20.dev12+g1234`, `0.6` as `0.6.0`), or `None`.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let v = v.trim().trim_start_matches('v');
    let mut parts = v.splitn(3, '.');
    let leading = |p: &str| -> Option<u32> {
        let end = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
        p[..end].parse().ok()
    };
    let major = parts.next()?.parse().ok()?;
    let minor_part = parts.next()?;
    let minor = leading(minor_part)?;
    // `0.6rc1` has no patch: a pre-release of 0.6.0.
    let patch = if minor_part.len() > minor.to_string().len() {
        0
    } else {
        match parts.next() {
            Some(p) => leading(p)?,
            None => 0,
        }
    };
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_are_read_as_sglang_spells_them() {
        assert_eq!(parse_version("0.5.19"), Some((0, 5, 19)));
        assert_eq!(parse_version("0.5.10.post1"), Some((0, 5, 10)));
        assert_eq!(parse_version("v0.5.21rc1"), Some((0, 5, 21)));
        assert_eq!(parse_version("0.5.20.dev12+g1234"), Some((0, 5, 20)));
        assert_eq!(parse_version("0.4.10.post2"), Some((0, 4, 10)));
        assert_eq!(parse_version("0.6"), Some((0, 6, 0)));
        assert_eq!(parse_version("0.6rc1"), Some((0, 6, 0)));
        assert_eq!(parse_version("main"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn an_unknown_version_is_every_family() {
        for v in [json!("unknown"), json!("main"), json!(5), json!(null)] {
            assert_eq!(Releases::of_versions(&v), Ok(Releases::any()), "{v}");
        }
        assert_eq!(
            Releases::of_versions(&json!(["0.5.19", "latest"])),
            Ok(Releases::any())
        );
    }

    #[test]
    fn consulted_rules_decide_who_agrees() {
        let old = Release::V0519.chat_rules();
        let new = Release::V0523.chat_rules();
        let c = Consulted::new(new);
        assert!(c.agrees_with(&old), "nothing consulted yet");
        c.encoder_tools();
        assert!(c.agrees_with(&Release::V0522.chat_rules()));
        assert!(!c.agrees_with(&old));
        let c = Consulted::new(new);
        c.tool_dump();
        assert!(!c.agrees_with(&Release::V0522.chat_rules()));
    }
}
