//! Phase 1 and 2 of the request-level step: the head ([`Gate::classify`])
//! and the whole body ([`Gate::check_body`]), and both at once
//! ([`Gate::decide`]) for adapters that receive the whole request. Each
//! returns the request's [`Record`] with its verdict ([`Outcome`]); the body
//! step takes the head step's Record by value and returns it filled in.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap};

use super::{Admit, Gate, Head, Mode, Outcome, Record};
use crate::errors::Reason;
use crate::inspect::{path, routes, Route, RouteClass};

impl Gate {
    /// Phase 1, on the head alone: which route, and whether its headers rule the
    /// request out before a byte of body is read. Default deny: a path or method
    /// the route table does not model is refused. Starts the request's
    /// [`Record`] for an adapter in `mode`.
    pub fn classify(&self, head: &Head<'_>, mode: Mode) -> Outcome<RouteClass> {
        let canonical = match path::canonical_path(head.target) {
            Ok(canonical) => canonical,
            Err(refusal) => return Outcome::refused(Record::new(mode), refusal.into()),
        };
        let record = Record {
            route: Route::from_path(&canonical),
            ..Record::new(mode)
        };
        let verdict = self.route_class(head, mode, canonical);
        Outcome { record, verdict }
    }

    /// The route class of a canonical path, and the header checks for it.
    fn route_class(
        &self,
        head: &Head<'_>,
        mode: Mode,
        canonical: String,
    ) -> Result<RouteClass, Reason> {
        // The operator's allowlist opens a path deliberately (never a prompt
        // route: checked at startup), whatever the method.
        let class = if self.allow_routes.allows(&canonical) {
            RouteClass::PassThrough(canonical)
        } else {
            routes::classify(head.method, &canonical)?
        };
        if mode.is_external() {
            refuse_partial(head.headers)?;
        }
        if let RouteClass::Inspect(_) = class {
            refuse_encoded(head.headers)?;
            refuse_overrides(head.headers)?;
        }
        Ok(class)
    }

    /// Phase 2: the whole body, as read by the adapter (at most
    /// `self.max_body_bytes`; checked again here so no adapter can forget).
    /// Takes phase 1's `record` and returns it with what counting found;
    /// `allowed` once admitted.
    pub async fn check_body(
        &self,
        record: Record,
        class: RouteClass,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Outcome<Admit> {
        if body.len() > self.max_body_bytes {
            let limit = self.max_body_bytes;
            return Outcome::refused(record, Reason::BodyTooLarge { limit });
        }
        match class {
            RouteClass::Inspect(route) => {
                let content_type = headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes());
                let partition = self.guard.partition(headers);
                let request_id = headers
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .map(Arc::from);
                self.guard
                    .check(record, route, content_type, partition, request_id, body)
                    .await
                    .map(|body| Admit::Inspected { route, body })
            }
            RouteClass::PassThrough(path) => {
                let record = passed(record, path.clone());
                Outcome::admitted(record, Admit::PassThrough { path, body })
            }
        }
    }

    /// Both phases, for an adapter that has the whole request.
    pub async fn decide(&self, head: &Head<'_>, mode: Mode, body: Bytes) -> Outcome<Admit> {
        let Outcome { record, verdict } = self.classify(head, mode);
        match verdict {
            Ok(class) => self.check_body(record, class, head.headers, body).await,
            Err(reason) => Outcome::refused(record, reason),
        }
    }

    /// Admits a pass-through route (phase 1's verdict) on its head alone, for
    /// an adapter that lets its body go by unread (ext_proc): nothing in a
    /// pass-through body is counted. Returns phase 1's `record`, `allowed`.
    pub fn admit_unread(&self, record: Record, path: String) -> Record {
        Record {
            allowed: true,
            ..passed(record, path)
        }
    }
}

/// The Record of a request to pass-through route `path`.
fn passed(record: Record, path: String) -> Record {
    Record {
        pass_through: Some(path),
        ..record
    }
}

/// SGLang (0.5.15 and later) lets `x-override-*` headers set request fields
/// the body does not show (`entrypoints/request_headers.py`): the request id
/// the scheduler aborts by prefix, the bootstrap room that pairs a prefill
/// with a decode, the priority. None is a client's to choose.
fn refuse_overrides(headers: &HeaderMap) -> Result<(), Reason> {
    match headers
        .keys()
        .find(|name| name.as_str().starts_with("x-override-"))
    {
        Some(name) => Err(Reason::Pd(crate::policy::pd::PdRefusal::ClientControl(
            name.as_str().to_string(),
        ))),
        None => Ok(()),
    }
}

/// The guard counts the bytes it reads; a compressed body would be counted as
/// garbage and decoded differently upstream, so it is refused outright. That
/// includes SGLang's own `x-body-compressed` (decompressed by its middleware
/// when `SGLANG_ENABLE_REQUEST_DECOMPRESSION` is set), whatever its value.
fn refuse_encoded(headers: &HeaderMap) -> Result<(), Reason> {
    let encoded = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(Reason::UnsupportedMediaType(
            "compressed request bodies (`Content-Encoding`) are not accepted".into(),
        ));
    }
    if headers.contains_key(X_BODY_COMPRESSED) {
        return Err(Reason::UnsupportedMediaType(
            "compressed request bodies (`x-body-compressed`) are not accepted".into(),
        ));
    }
    Ok(())
}

/// SGLang's request-decompression header (`http_request_decompression.py`).
const X_BODY_COMPRESSED: &str = "x-body-compressed";

/// Envoy's marker of a body cut at `max_request_bytes` (`allow_partial_message`).
pub const X_ENVOY_AUTH_PARTIAL_BODY: &str = "x-envoy-auth-partial-body";

/// A truncated body cannot be counted: its prompt is longer than what
/// arrived. Anything but an explicit `false` on the marker is refused, as a
/// body over the size Envoy was told to buffer (which is what it is).
fn refuse_partial(headers: &HeaderMap) -> Result<(), Reason> {
    let mut values = headers.get_all(X_ENVOY_AUTH_PARTIAL_BODY).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(()),
        (Some(v), None) if v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"false") => Ok(()),
        _ => Err(Reason::BodyTooLarge {
            // What Envoy sent is what it buffered; the body was larger.
            limit: content_length(headers).unwrap_or(0),
        }),
    }
}

fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn partial_body_marker() {
        let mut h = HeaderMap::new();
        assert!(refuse_partial(&h).is_ok());
        h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        assert!(refuse_partial(&h).is_ok());
        for v in ["true", "TRUE", "", "1", "yes"] {
            h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static(v));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("1024"));
            let e = refuse_partial(&h).unwrap_err();
            assert_eq!(e.label(), "body_too_large", "{v:?}");
            assert_eq!(e.status(), 413);
        }
        // Two markers, even `false` twice: ambiguous, refused.
        h.insert(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        h.append(X_ENVOY_AUTH_PARTIAL_BODY, HeaderValue::from_static("false"));
        assert!(refuse_partial(&h).is_err());
    }
}
