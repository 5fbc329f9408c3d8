//! Beyond length, in the audit: for the release and the prefill/decode pair
//! it finds, each other way the prefill hands decode a short KV
//! (`policy::pd`): whether the servers are exposed to it, and what the guard
//! does about it. The same rules as the guard's, read from the same answers.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::count::serving::Observed;
use crate::policy::pd::{self, Exposure, Parity};
use crate::sglang::{self, Api};

/// One worker's answer, as the comparison reads it.
pub struct Answer {
    pub url: String,
    pub settings: Observed,
    pub keys: BTreeMap<&'static str, Value>,
    pub auto_truncate: bool,
}

/// Reads `url`'s `/server_info` and `/model_info` (`None` when unreadable).
pub async fn read(api: &Api, url: &str) -> Option<Answer> {
    let info = api.server_info(url).await.ok()?;
    let model_info = api.model_info(url).await.ok();
    Some(Answer {
        url: url.to_string(),
        settings: Observed::from_server(&info, model_info.as_ref()),
        keys: pd::keys_of(&info),
        auto_truncate: sglang::bool_field(&info, "allow_auto_truncate") == Some(true),
    })
}

fn sides(answers: &[Answer]) -> Vec<pd::Side<'_>> {
    answers
        .iter()
        .map(|a| pd::Side {
            url: &a.url,
            settings: &a.settings,
            keys: &a.keys,
        })
        .collect()
}

/// One path: exposed or not, and what the guard does.
#[derive(Debug, Clone, Serialize)]
pub struct PathReport {
    pub path: &'static str,
    /// `yes`, `no`, or `unknown` (with why in `detail`).
    pub exposed: &'static str,
    pub guard: &'static str,
    pub detail: String,
}

/// The prefill/decode parity and every path, for `prefill` and `decode`
/// (empty: no `--decode-url`).
#[derive(Debug, Clone, Serialize)]
pub struct PathsReport {
    pub parity: String,
    pub paths: Vec<PathReport>,
    /// A path the servers are exposed to without the guard.
    pub any_exposed: bool,
}

pub fn report(prefill: &[Answer], decode: &[Answer]) -> PathsReport {
    let exposure = prefill
        .first()
        .map_or(Exposure::Exposed, |p| Exposure::of(&p.settings));
    let exposed = exposure.is_exposed();
    let (p, d) = (sides(prefill), sides(decode));
    let (model, grammar, speculative) = if decode.is_empty() || prefill.is_empty() {
        let why = Parity::Unknown("no --decode-url".into());
        (Ok(()), why.clone(), why)
    } else {
        match pd::compare(&p, &d) {
            Ok((g, s)) => (Ok(()), g, s),
            Err(disagreement) => {
                let why = Parity::Unknown("the pair builds different prompts".into());
                (Err(disagreement), why.clone(), why)
            }
        }
    };
    let parity = match (&model, &grammar) {
        (Err(d), _) => format!("DIFFERS: {}", d.detail),
        (Ok(()), Parity::Unknown(why)) => format!("unknown ({why})"),
        (Ok(()), _) => "prefill and decode build the same prompts".into(),
    };
    let yes_if = |b: bool| if b { "yes" } else { "no" };
    let per_request = |p: &Parity| match (exposed, p) {
        (false, _) => "no",
        (true, Parity::Same) => "no",
        (true, Parity::Differs(_)) => "yes",
        (true, Parity::Unknown(_)) => "unknown",
    };
    let text = |p: &Parity| match p {
        Parity::Same => "same on both sides".to_string(),
        Parity::Differs(d) => d.clone(),
        Parity::Unknown(w) => format!("unknown: {w}"),
    };
    let release = match exposure {
        Exposure::Exposed => "a release before 0.5.20 hands an aborted prefill to decode",
        Exposure::RetiredAfterForward => "0.5.20 retires an aborted prefill after its forward",
        Exposure::RefusedAtAdmission => "0.5.21+ refuses an aborted prefill at PD admission",
    };
    let paths = vec![
        PathReport {
            path: "prompt-building settings (prefill vs decode)",
            exposed: match (&model, decode.is_empty()) {
                (Err(_), _) => "yes",
                (Ok(()), true) => "unknown",
                (Ok(()), false) => "no",
            },
            guard: "closed: the model is out of service while they differ (pd_config_disagrees)",
            detail: match &model {
                Err(d) => d.detail.clone(),
                Ok(()) => parity.clone(),
            },
        },
        PathReport {
            path: "grammar backend (response_format, tool_choice, regex, ...)",
            exposed: per_request(&grammar),
            guard: "closed: refused unless decode runs prefill's backend (grammar_requests)",
            detail: format!("{}; {release}", text(&grammar)),
        },
        PathReport {
            path: "grammar compile timeout on prefill only",
            exposed: if exposed { "unknown" } else { "no" },
            guard: "open by default; closed with grammar_requests = \"refuse\"",
            detail: format!("cannot be predicted from the servers' answers; {release}"),
        },
        PathReport {
            path: "return_sampling_mask",
            exposed: if exposed { "unknown" } else { "no" },
            guard: "closed: refused before 0.5.20",
            detail: format!("decided by an environment value no answer shows; {release}"),
        },
        PathReport {
            path: "return_hidden_states (speculative decoding on one side)",
            exposed: per_request(&speculative),
            guard: "closed: refused before 0.5.20 unless both sides run the same speculative configuration",
            detail: text(&speculative),
        },
        PathReport {
            path: "client-chosen request ids (rid prefix aborts, bootstrap fields, x-override-*)",
            exposed: "yes",
            guard: "closed: refused on every release (client_id_refused)",
            detail: "the scheduler aborts every request whose id starts with the aborted one".into(),
        },
        PathReport {
            path: "/abort_request and admin routes",
            exposed: "yes",
            guard: "closed: never forwarded",
            detail: "reachable by any client that can reach the servers directly".into(),
        },
        PathReport {
            path: "allow_auto_truncate",
            exposed: yes_if(prefill.iter().any(|a| a.auto_truncate)),
            guard: "closed: L >= M is refused whatever the flag",
            detail: "prefill truncates to its own limit, decode keeps the longer prompt".into(),
        },
        PathReport {
            path: "sessions",
            exposed: if exposed { "no" } else { "yes" },
            guard: "closed: session_params and /open_session refused",
            detail: "0.5.20 pairs session requests with decode".into(),
        },
        PathReport {
            path: "multimodal expansion",
            exposed: "unknown",
            guard: "closed: media refused unless opted in with a per-item upper bound",
            detail: "measured after the scheduler's image-token expansion".into(),
        },
    ];
    let any_exposed = paths.iter().take(2).any(|p| p.exposed == "yes");
    PathsReport {
        parity,
        paths,
        any_exposed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(url: &str, version: &str, keys: &[(&'static str, Value)]) -> Answer {
        let mut settings = Observed::default();
        settings.set("version", json!(version));
        Answer {
            url: url.into(),
            settings,
            keys: keys.iter().cloned().collect(),
            auto_truncate: false,
        }
    }

    #[test]
    fn a_grammar_backend_missing_on_prefill_is_reported_exposed() {
        let p = answer("http://p", "0.5.11", &[("grammar_backend", json!("none"))]);
        let d = answer(
            "http://d",
            "0.5.11",
            &[("grammar_backend", json!("xgrammar"))],
        );
        let r = report(&[p], &[d]);
        let grammar = &r.paths[1];
        assert_eq!(grammar.exposed, "yes");
        assert!(
            grammar.detail.contains("grammar_backend=none"),
            "{}",
            grammar.detail
        );
        assert!(r.any_exposed);

        let p = answer("http://p", "0.5.21", &[("grammar_backend", json!("none"))]);
        let d = answer(
            "http://d",
            "0.5.21",
            &[("grammar_backend", json!("xgrammar"))],
        );
        let r = report(&[p], &[d]);
        assert_eq!(r.paths[1].exposed, "no");
        assert!(!r.any_exposed);
    }

    #[test]
    fn without_decode_the_parity_is_unknown() {
        let p = answer("http://p", "0.5.19", &[]);
        let r = report(&[p], &[]);
        assert!(r.parity.starts_with("unknown"), "{}", r.parity);
        assert_eq!(r.paths[0].exposed, "unknown");
        assert_eq!(r.paths[5].exposed, "yes", "client ids, on every release");
    }
}
