//! Beyond length: the other ways an exposed PD prefill hands decode a short
//! KV (`../shared/docs/pd-abort-paths.md`). Any intake abort on prefill
//! (`set_finish_with_abort`) stubs the request to one token and still hands
//! it to decode; decode, which built its own request from the same JSON,
//! generates over stale KV unless it aborted too. So the leak needs the two
//! sides to *differ*, and the guard closes each way they can:
//!
//! * **Settings that build the prompt** (template, tokenizer, parsers,
//!   template kwargs, `allow_auto_truncate`, sampling defaults): the two
//!   sides build prompts of different lengths and decode's tail pages are
//!   stale with no abort at all. No release fixes this (§4 T1, T3), so a
//!   disagreement takes the model out of service on every release.
//! * **Grammar** (G1-G4): a prefill without the decode's grammar backend
//!   stubs every constrained request; a compile that times out on prefill
//!   only is cached there. Per request, on exposed releases.
//! * **`return_sampling_mask`** (S1-S4, decided by an environment value no
//!   answer shows) and **`return_hidden_states`** (D1, DFLASH on one side):
//!   per request, on exposed releases.
//! * **Client-chosen ids** (A1): the scheduler aborts by request-id
//!   *prefix*, so a client's `rid` of `"a"` and a disconnect abort every
//!   in-flight request whose id starts with `a`: on prefill only a leak, on
//!   both a cross-tenant denial of service. Refused on every release, with
//!   the bootstrap fields that pair a prefill with a decode.
//!
//! 0.5.20 (#36988) retires every aborted prefill after its forward and
//! 0.5.21 (#38935) at admission: both cover every intake abort above
//! (§5), so the per-request rules stop there; neither covers settings that
//! build different prompts, nor request ids.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::count::release::{Release, Releases};
use crate::count::serving::{setting, show, Handling, Observed};

use crate::inspect::features::Features;

/// `/server_info` keys compared between a prefill and a decode worker,
/// beyond the prompt-building settings of `count::serving::SETTINGS`, and
/// what a disagreement takes out of service.
pub const PD_KEYS: [(&str, Scope); 13] = [
    ("allow_auto_truncate", Scope::Model),
    ("preferred_sampling_params", Scope::Model),
    ("sampling_defaults", Scope::Model),
    ("mm_feature_transport", Scope::Model),
    ("grammar_backend", Scope::Grammar),
    ("skip_tokenizer_init", Scope::Grammar),
    ("speculative_algorithm", Scope::Speculative),
    ("speculative_draft_model_path", Scope::Speculative),
    ("speculative_num_steps", Scope::Speculative),
    ("speculative_eagle_topk", Scope::Speculative),
    ("speculative_num_draft_tokens", Scope::Speculative),
    ("disable_overlap_schedule", Scope::Speculative),
    ("enable_return_hidden_states", Scope::Speculative),
];

/// The [`PD_KEYS`] a worker's `/server_info` publishes, as it answered
/// them. Present as null is a value (no speculative algorithm); absent is a
/// release that does not publish it.
pub fn keys_of(info: &Value) -> BTreeMap<&'static str, Value> {
    PD_KEYS
        .iter()
        .filter_map(|(k, _)| {
            let v = info
                .get(*k)
                .or_else(|| info["internal_states"][0].get(*k))?;
            Some((*k, v.clone()))
        })
        .collect()
}

/// What a prefill/decode disagreement on a setting takes out of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every request of the model: the two sides build different prompts.
    Model,
    /// Requests that compile a grammar.
    Grammar,
    /// Requests for hidden states (and, under DFLASH, logprobs and grammars).
    Speculative,
}

/// Whether the server's release hands an aborted prefill to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Before 0.5.20 (or a release not known): every intake abort leaks.
    Exposed,
    /// 0.5.20: retired after its forward pass (#36988).
    RetiredAfterForward,
    /// 0.5.21 and later: refused at PD admission (#38935).
    RefusedAtAdmission,
}

impl Exposure {
    /// From the `version` the settings carry (a list during a rolling
    /// upgrade, every family when unknown): the oldest decides.
    pub fn of(settings: &Observed) -> Exposure {
        let releases = settings
            .get("version")
            .and_then(|v| Releases::of_versions(v).ok())
            .unwrap_or_else(Releases::any);
        if releases.any_before(Release::V0520) {
            Exposure::Exposed
        } else if releases.any_before(Release::V0521) {
            Exposure::RetiredAfterForward
        } else {
            Exposure::RefusedAtAdmission
        }
    }

    pub fn is_exposed(self) -> bool {
        self == Exposure::Exposed
    }
}

/// Whether decode agrees with prefill on a group of settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parity {
    Same,
    /// Who says what.
    Differs(String),
    /// Why it is not known (no decode worker listed, none answered yet).
    Unknown(String),
}

/// What the guard does with grammar-bearing requests on an exposed release
/// (`grammar_requests`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
pub enum GrammarRequests {
    /// Forwarded when every decode worker is known to run prefill's grammar
    /// backend (G1, G3 closed); a compile that times out on prefill only
    /// (G4) stays possible.
    #[default]
    WhenBackendsMatch,
    /// Refused: closes G4 too, at the cost of every constrained request.
    Refuse,
    /// Forwarded as they come: the operator vouches for parity.
    Forward,
}

/// A request refused for what it asks beyond its prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdRefusal {
    /// A body field or `x-override-*` header a client must not choose.
    ClientControl(String),
    SamplingMask,
    HiddenStates(String),
    /// Under DFLASH on one side only (0.5.11's `validate_dflash_request`
    /// also rejects logprobs and grammars).
    Dflash(&'static str),
    GrammarBackends {
        field: &'static str,
        why: String,
    },
    GrammarRefused {
        field: &'static str,
    },
}

impl PdRefusal {
    /// The `code` and `reason` label.
    pub fn label(&self) -> &'static str {
        match self {
            PdRefusal::ClientControl(_) => "client_id_refused",
            PdRefusal::SamplingMask => "pd_sampling_mask_refused",
            PdRefusal::HiddenStates(_) => "pd_hidden_states_refused",
            PdRefusal::Dflash(_) => "pd_speculative_differs",
            PdRefusal::GrammarBackends { .. } => "pd_grammar_backend_differs",
            PdRefusal::GrammarRefused { .. } => "pd_grammar_refused",
        }
    }
}

impl std::fmt::Display for PdRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const EXPOSED: &str = "on this SGLang release a prefill that refuses it still hands it to \
                               decode, which would answer from another request's data";
        match self {
            PdRefusal::ClientControl(field) => write!(
                f,
                "`{field}` is chosen by the server, not the client: SGLang aborts requests by id \
                 prefix and pairs prefill with decode by these fields, so a client's value can \
                 act on other clients' requests; remove it"
            ),
            PdRefusal::SamplingMask => write!(
                f,
                "`return_sampling_mask` is refused: whether prefill serves it depends on a \
                 setting no server publishes, and {EXPOSED}"
            ),
            PdRefusal::HiddenStates(why) => {
                write!(f, "`return_hidden_states` is refused: {why}, and {EXPOSED}")
            }
            PdRefusal::Dflash(field) => write!(
                f,
                "`{field}` is refused: prefill runs DFLASH speculative decoding and decode does \
                 not (or is not known to), and {EXPOSED}"
            ),
            PdRefusal::GrammarBackends { field, why } => write!(
                f,
                "`{field}` compiles a grammar, which is refused: {why}, and {EXPOSED}"
            ),
            PdRefusal::GrammarRefused { field } => write!(
                f,
                "`{field}` compiles a grammar, which this deployment refuses \
                 (grammar_requests = \"refuse\"): {EXPOSED}"
            ),
        }
    }
}

/// A model's prefill/decode state, as requests read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdRules {
    pub exposure: Exposure,
    pub grammar: Parity,
    pub speculative: Parity,
    /// Prefill runs a DFLASH-family algorithm.
    pub prefill_dflash: bool,
    pub grammar_requests: GrammarRequests,
}

impl PdRules {
    /// Nothing read from decode: every parity unknown, for `why`.
    pub fn unknown(exposure: Exposure, grammar_requests: GrammarRequests, why: &str) -> Self {
        PdRules {
            exposure,
            grammar: Parity::Unknown(why.into()),
            speculative: Parity::Unknown(why.into()),
            prefill_dflash: false,
            grammar_requests,
        }
    }

    /// Whether `f` may be forwarded.
    pub fn check(&self, f: &Features) -> Result<(), PdRefusal> {
        if let Some(field) = f.client_control {
            return Err(PdRefusal::ClientControl(field.into()));
        }
        if !self.exposure.is_exposed() {
            return Ok(());
        }
        if f.sampling_mask {
            return Err(PdRefusal::SamplingMask);
        }
        if let Some(why) = not_same(&self.speculative) {
            if f.hidden_states {
                return Err(PdRefusal::HiddenStates(format!(
                    "prefill and decode are not known to run the same speculative decoding ({why})"
                )));
            }
            if self.prefill_dflash {
                if f.logprob {
                    return Err(PdRefusal::Dflash("return_logprob"));
                }
                if let Some(field) = f.grammar {
                    return Err(PdRefusal::Dflash(field));
                }
            }
        }
        let Some(field) = f.grammar else {
            return Ok(());
        };
        match (self.grammar_requests, not_same(&self.grammar)) {
            (GrammarRequests::Refuse, _) => Err(PdRefusal::GrammarRefused { field }),
            (GrammarRequests::WhenBackendsMatch, Some(why)) => Err(PdRefusal::GrammarBackends {
                field,
                why: format!(
                    "prefill and decode are not known to run the same grammar backend ({why})"
                ),
            }),
            (GrammarRequests::WhenBackendsMatch, None) | (GrammarRequests::Forward, _) => Ok(()),
        }
    }
}

fn not_same(p: &Parity) -> Option<&str> {
    match p {
        Parity::Same => None,
        Parity::Differs(why) | Parity::Unknown(why) => Some(why),
    }
}

/// One worker's side of the comparison: its URL, its prompt-building
/// settings and its [`PD_KEYS`] values as it answered them.
pub struct Side<'a> {
    pub url: &'a str,
    pub settings: &'a Observed,
    pub keys: &'a BTreeMap<&'static str, Value>,
}

/// A setting on which prefill and decode disagree, for the model's whole
/// service: which, and what each side says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    pub setting: &'static str,
    pub detail: String,
}

/// Compares every decode worker with every prefill worker. `Err` when they
/// build different prompts (the model is not served); else the parity of
/// each request-scoped group.
pub fn compare(
    prefill: &[Side<'_>],
    decode: &[Side<'_>],
) -> Result<(Parity, Parity), Disagreement> {
    let mut grammar = Parity::Same;
    let mut speculative = Parity::Same;
    for p in prefill {
        for d in decode {
            // `version` aside: workers on different releases are each counted
            // for (the larger count wins), and a decode worker's release
            // changes no prefill count.
            // Settings that change no ids (admission only) are in `PD_KEYS`
            // where they matter.
            if let Some(setting) = p
                .settings
                .differences(d.settings)
                .into_iter()
                .filter(|s| *s != "version")
                .find(|s| setting(s).is_some_and(|s| s.handling != Handling::NoEffect))
            {
                return Err(disagreement(setting, p, d, |s| s.settings.get(setting)));
            }
            for (key, scope) in PD_KEYS {
                let (a, b) = (p.keys.get(key), d.keys.get(key));
                // A key one release does not publish is not a disagreement;
                // SGLang publishes every server argument it has.
                let (Some(a), Some(b)) = (a, b) else { continue };
                if a == b {
                    continue;
                }
                let detail = disagreement(key, p, d, |s| s.keys.get(key)).detail;
                match scope {
                    Scope::Model => {
                        return Err(Disagreement {
                            setting: key,
                            detail,
                        })
                    }
                    Scope::Grammar if grammar == Parity::Same => grammar = Parity::Differs(detail),
                    Scope::Speculative if speculative == Parity::Same => {
                        speculative = Parity::Differs(detail)
                    }
                    Scope::Grammar | Scope::Speculative => {}
                }
            }
        }
    }
    Ok((grammar, speculative))
}

fn disagreement<'a>(
    setting: &'static str,
    p: &'a Side<'a>,
    d: &'a Side<'a>,
    get: impl Fn(&'a Side<'a>) -> Option<&'a Value>,
) -> Disagreement {
    let said = |s| get(s).map_or_else(|| "the default".to_string(), show);
    Disagreement {
        setting,
        detail: format!(
            "prefill {} runs {setting}={} and decode {} runs {setting}={}: start both with the \
             same value (the decode side is usually the one to change)",
            p.url,
            said(p),
            d.url,
            said(d)
        ),
    }
}

/// Whether `speculative_algorithm` is of the DFLASH family.
pub fn is_dflash(keys: &BTreeMap<&'static str, Value>) -> bool {
    keys.get("speculative_algorithm")
        .and_then(Value::as_str)
        .is_some_and(|a| a.to_ascii_uppercase().contains("DFLASH"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(exposure: Exposure, grammar: Parity, speculative: Parity) -> PdRules {
        PdRules {
            exposure,
            grammar,
            speculative,
            prefill_dflash: false,
            grammar_requests: GrammarRequests::default(),
        }
    }

    #[test]
    fn client_ids_are_refused_on_every_release() {
        let f = Features {
            client_control: Some("rid"),
            ..Features::default()
        };
        for e in [
            Exposure::Exposed,
            Exposure::RetiredAfterForward,
            Exposure::RefusedAtAdmission,
        ] {
            let r = rules(e, Parity::Same, Parity::Same);
            assert_eq!(r.check(&f), Err(PdRefusal::ClientControl("rid".into())));
        }
    }

    #[test]
    fn the_abort_paths_are_refused_only_where_they_leak() {
        let mask = Features {
            sampling_mask: true,
            ..Features::default()
        };
        let hidden = Features {
            hidden_states: true,
            ..Features::default()
        };
        let grammar = Features {
            grammar: Some("response_format"),
            ..Features::default()
        };
        let same = rules(Exposure::Exposed, Parity::Same, Parity::Same);
        assert_eq!(same.check(&mask), Err(PdRefusal::SamplingMask));
        assert_eq!(same.check(&hidden), Ok(()));
        assert_eq!(same.check(&grammar), Ok(()));
        let differs = rules(
            Exposure::Exposed,
            Parity::Differs("g".into()),
            Parity::Unknown("s".into()),
        );
        assert!(matches!(
            differs.check(&hidden),
            Err(PdRefusal::HiddenStates(_))
        ));
        let refused = differs.check(&grammar).unwrap_err();
        assert_eq!(refused.label(), "pd_grammar_backend_differs");
        assert!(refused.to_string().contains("(g)"), "{refused}");
        let fixed = rules(
            Exposure::RetiredAfterForward,
            Parity::Differs("g".into()),
            Parity::Differs("s".into()),
        );
        for f in [&mask, &hidden, &grammar] {
            assert_eq!(fixed.check(f), Ok(()));
        }
    }

    #[test]
    fn grammar_requests_setting() {
        let grammar = Features {
            grammar: Some("tool_choice"),
            ..Features::default()
        };
        let mut r = rules(Exposure::Exposed, Parity::Same, Parity::Same);
        r.grammar_requests = GrammarRequests::Refuse;
        assert_eq!(
            r.check(&grammar),
            Err(PdRefusal::GrammarRefused {
                field: "tool_choice"
            })
        );
        r.grammar_requests = GrammarRequests::Forward;
        r.grammar = Parity::Unknown("no decode".into());
        assert_eq!(r.check(&grammar), Ok(()));
    }

    #[test]
    fn dflash_on_prefill_only_refuses_logprobs_and_grammars() {
        let mut r = rules(Exposure::Exposed, Parity::Same, Parity::Differs("s".into()));
        r.prefill_dflash = true;
        let logprob = Features {
            logprob: true,
            ..Features::default()
        };
        assert_eq!(r.check(&logprob), Err(PdRefusal::Dflash("return_logprob")));
        r.speculative = Parity::Same;
        assert_eq!(r.check(&logprob), Ok(()));
    }

    fn keys(pairs: &[(&'static str, Value)]) -> BTreeMap<&'static str, Value> {
        pairs.iter().cloned().collect()
    }

    #[test]
    fn compare_scopes_each_disagreement() {
        let settings = Observed::default();
        let p_keys = keys(&[
            ("grammar_backend", json!("none")),
            ("allow_auto_truncate", json!(false)),
        ]);
        let d_keys = keys(&[
            ("grammar_backend", json!("xgrammar")),
            ("allow_auto_truncate", json!(false)),
        ]);
        let p = Side {
            url: "http://p",
            settings: &settings,
            keys: &p_keys,
        };
        let d = Side {
            url: "http://d",
            settings: &settings,
            keys: &d_keys,
        };
        let (grammar, speculative) = compare(&[p], &[d]).unwrap();
        assert_eq!(speculative, Parity::Same);
        let Parity::Differs(detail) = grammar else {
            panic!("{grammar:?}")
        };
        assert!(
            detail.contains("prefill http://p runs grammar_backend=none"),
            "{detail}"
        );

        let d_keys = keys(&[("allow_auto_truncate", json!(true))]);
        let p = Side {
            url: "http://p",
            settings: &settings,
            keys: &p_keys,
        };
        let d = Side {
            url: "http://d",
            settings: &settings,
            keys: &d_keys,
        };
        let e = compare(&[p], &[d]).unwrap_err();
        assert_eq!(e.setting, "allow_auto_truncate");

        let mut templated = Observed::default();
        templated.set("chat_template", json!("/t.jinja"));
        let p = Side {
            url: "http://p",
            settings: &templated,
            keys: &p_keys,
        };
        let d = Side {
            url: "http://d",
            settings: &settings,
            keys: &p_keys,
        };
        assert_eq!(compare(&[p], &[d]).unwrap_err().setting, "chat_template");
    }

    #[test]
    fn exposure_follows_the_oldest_release() {
        let mut s = Observed::default();
        s.set("version", json!("0.5.11"));
        assert_eq!(Exposure::of(&s), Exposure::Exposed);
        s.set("version", json!("0.5.20"));
        assert_eq!(Exposure::of(&s), Exposure::RetiredAfterForward);
        s.set("version", json!(["0.5.21", "0.5.23"]));
        assert_eq!(Exposure::of(&s), Exposure::RefusedAtAdmission);
        s.set("version", json!("unknown"));
        assert_eq!(Exposure::of(&s), Exposure::Exposed);
    }
}
