//! The SGLang release a simulated pair runs (`pd-sim --sglang-version`):
//! the workers announce it, build prompts as its family does
//! ([`crate::count::release`]), and publish what it publishes.
//!
//! What the workers publish per release follows
//! `shared/docs/sglang-releases.md` §3, where the research notes date it;
//! a key they do not date is published by every release.

use anyhow::anyhow;

use super::Mode;
use crate::count::release::{parse_version, Release, Version};

/// The first release with a fix (#36988; 0.5.21 adds #38935). The simulator
/// does not tell the two fixes apart: either way the client gets SGLang's
/// 400 and decode generates nothing.
const FIRST_FIXED: Version = Version(0, 5, 20, 0);

/// The release the workers run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRelease {
    /// As given; `/server_info` reports it.
    pub version: String,
    /// The family whose prompt building the workers use. A pre-release
    /// (`0.5.13rc0`) may predate its release's changes, and is taken as the
    /// family before.
    pub family: Release,
    at: Version,
}

impl SimRelease {
    /// `--sglang-version` (default: the version `mode` models), checked:
    /// readable, not older than 0.4.5, and with the leak `mode` says (a
    /// vulnerable pair announcing a fixed release would mislead every tool
    /// that reads the version).
    pub fn new(version: Option<&str>, mode: Mode) -> anyhow::Result<Self> {
        let text = version.unwrap_or(mode.version()).trim();
        let (at, pre) = parse_version(text).ok_or_else(|| {
            anyhow!(
                "--sglang-version {text:?} is not an SGLang version (e.g. 0.5.11, 0.4.10.post2, 0.5.21rc1)"
            )
        })?;
        let family = Release::of(at).ok_or_else(|| {
            anyhow!(
                "--sglang-version {text} is older than 0.4.5, the first SGLang release with PD \
                 disaggregation (the oldest the simulator models)"
            )
        })?;
        let family = match pre {
            true => Release::ALL
                .iter()
                .rev()
                .find(|r| r.first() < at)
                .copied()
                .unwrap_or(family),
            false => family,
        };
        let fixed = at > FIRST_FIXED || (at == FIRST_FIXED && !pre);
        match (mode, fixed) {
            (Mode::Vulnerable, true) => anyhow::bail!(
                "--sglang-version {text} has the fix (0.5.20 and later): --mode vulnerable needs an earlier release"
            ),
            (Mode::Fixed, false) => anyhow::bail!(
                "--sglang-version {text} has no fix (before 0.5.20): --mode fixed needs 0.5.20 or later"
            ),
            _ => {}
        }
        Ok(Self {
            version: text.to_owned(),
            family,
            at,
        })
    }

    /// The chat route reads `input_ids` (0.5.13): given ids are the prompt.
    /// Before, pydantic drops the field and the messages are rendered.
    pub fn chat_input_ids(&self) -> bool {
        self.family.chat_rules().chat_input_ids
    }

    /// `/server_info` and `/model_info` besides the old `/get_*` names. 0.5.5
    /// has only the old names and 0.5.11 both; the release between that added
    /// them is not bisected, and is taken as 0.5.6.
    pub fn new_info_routes(&self) -> bool {
        self.at >= Version(0, 5, 6, 0)
    }

    /// `internal_states` in `/server_info` (0.4.10).
    pub fn internal_states(&self) -> bool {
        self.at >= Version(0, 4, 10, 0)
    }

    /// The `--default-chat-template-kwargs` flag: in 0.5.18, not in 0.5.15
    /// (taken as new in 0.5.16).
    pub fn default_chat_template_kwargs(&self) -> bool {
        self.at >= Version(0, 5, 16, 0)
    }

    /// `/model_info` names the architecture (`architectures`, `model_type`,
    /// `has_*_understanding`): in 0.5.11, not in 0.5.5 (taken as new in 0.5.6).
    pub fn model_info_architecture(&self) -> bool {
        self.at >= Version(0, 5, 6, 0)
    }

    /// `/model_info` names the effective parsers (0.5.19).
    pub fn model_info_parsers(&self) -> bool {
        self.at >= Version(0, 5, 19, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_against_the_mode() {
        let ok = |v: Option<&str>, mode| SimRelease::new(v, mode).map(|r| r.family);
        assert_eq!(ok(None, Mode::Vulnerable).unwrap(), Release::V0518);
        assert_eq!(ok(None, Mode::Fixed).unwrap(), Release::V0523);
        assert_eq!(
            ok(Some("0.5.11"), Mode::Vulnerable).unwrap(),
            Release::V0511
        );
        assert_eq!(
            ok(Some("0.4.10.post2"), Mode::Vulnerable).unwrap(),
            Release::V0410post2
        );
        // A pre-release of 0.5.13 may not have its chat input_ids yet.
        let rc = SimRelease::new(Some("0.5.13rc0"), Mode::Vulnerable).unwrap();
        assert_eq!(rc.family, Release::V0512);
        assert!(!rc.chat_input_ids());
        assert!(SimRelease::new(Some("0.5.13"), Mode::Vulnerable)
            .unwrap()
            .chat_input_ids());
        assert_eq!(ok(Some("0.5.20"), Mode::Fixed).unwrap(), Release::V0520);
        assert_eq!(
            ok(Some("0.5.20rc1"), Mode::Vulnerable).unwrap(),
            Release::V0518
        );
        for (v, mode, says) in [
            ("latest", Mode::Vulnerable, "not an SGLang version"),
            ("", Mode::Vulnerable, "not an SGLang version"),
            ("0.4.4", Mode::Vulnerable, "older than 0.4.5"),
            ("0.3.6.post3", Mode::Vulnerable, "older than 0.4.5"),
            ("0.5.21", Mode::Vulnerable, "has the fix"),
            ("0.5.20", Mode::Vulnerable, "has the fix"),
            ("0.5.19", Mode::Fixed, "has no fix"),
        ] {
            let e = SimRelease::new(Some(v), mode).unwrap_err().to_string();
            assert!(e.contains(says), "{v}: {e}");
        }
    }
}
