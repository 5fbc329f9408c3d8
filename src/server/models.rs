//! `GET /v1/models` tells clients the truth: each model's `max_model_len` is
//! lowered to the guard's effective limit, so a client that budgets its
//! context from the listing stays under it.
//!
//! SGLang lists `max_model_len = C` and its front end refuses `L + R >= C`;
//! the guard refuses `L >= M`. Listing `min(C, M)` keeps the reading clients
//! already apply ("the prompt must be shorter than max_model_len") true at the
//! guard. An entry without a number (LoRA adapters list `null`, routers may
//! omit the key) gets `M`, since its prompts are refused at `M` too.
//!
//! Only this small answer is buffered, and only up to [`MAX_LISTING_BYTES`];
//! everything else streams. A listing the guard cannot rewrite (not JSON,
//! compressed, too large) is passed on as it came, with a warning: the limit
//! is enforced on every prompt either way.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Response, StatusCode};
use http_body::{Body as _, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Incoming;
use serde_json::Value;

use crate::app::App;

/// A model listing is a few hundred bytes per model.
pub const MAX_LISTING_BYTES: usize = 1024 * 1024;

pub type UpstreamBody = BoxBody<Bytes, hyper::Error>;

/// Rewrites a `GET /v1/models` answer when the guard is configured to.
pub async fn clamp_listing(app: &App, response: Response<Incoming>) -> Response<UpstreamBody> {
    let (mut parts, body) = response.into_parts();
    let declared = body.size_hint().lower();
    if parts.status != StatusCode::OK
        || is_encoded(&parts.headers)
        || declared > MAX_LISTING_BYTES as u64
    {
        if parts.status == StatusCode::OK {
            tracing::warn!(
                "/v1/models answer is compressed or too large to rewrite; passed on unchanged"
            );
        }
        return Response::from_parts(parts, body.boxed());
    }
    let whole = match read_prefix(body, MAX_LISTING_BYTES).await {
        Prefix::Whole(bytes) => bytes,
        Prefix::Partial(read, rest) => {
            tracing::warn!("/v1/models answer is too large to rewrite; passed on unchanged");
            let frames = futures_util::stream::iter([Ok(Frame::data(read))]);
            let body = StreamBody::new(futures_util::StreamExt::chain(
                frames,
                BodyStream::new(rest),
            ));
            return Response::from_parts(parts, body.boxed());
        }
        Prefix::Failed(read, error) => {
            // What the client would have seen streamed: the bytes, then the break.
            let frames = [Ok(Frame::data(read)), Err(error)];
            let body = StreamBody::new(futures_util::stream::iter(frames));
            return Response::from_parts(parts, body.boxed());
        }
    };
    let rewritten = serde_json::from_slice::<Value>(&whole)
        .ok()
        .and_then(|mut listing| {
            let changed = clamp(&mut listing, |id| limit_for(app, id));
            changed.then(|| serde_json::to_vec(&listing).ok()).flatten()
        });
    let body = match rewritten {
        Some(bytes) => {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, bytes.len().into());
            // The validator named the upstream's bytes, not these.
            parts.headers.remove(header::ETAG);
            Bytes::from(bytes)
        }
        None => whole,
    };
    Response::from_parts(
        parts,
        Full::new(body).map_err(|never| match never {}).boxed(),
    )
}

/// The limit a listed model's prompts are refused at: with one served model
/// every request is counted with it, whatever its name.
fn limit_for(app: &App, id: &str) -> Option<usize> {
    let profiles = app.gate.guard.profiles();
    let mut names = app.gate.guard.model_names();
    match (names.next(), names.next()) {
        (Some(only), None) => profiles.limit(only),
        _ => profiles.limit(id),
    }
}

/// Lowers `max_model_len` of every entry `limit_for` knows a limit for.
/// Returns whether anything changed.
pub fn clamp(listing: &mut Value, limit_for: impl Fn(&str) -> Option<usize>) -> bool {
    let Some(data) = listing.get_mut("data").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut changed = false;
    for entry in data.iter_mut().filter_map(Value::as_object_mut) {
        let Some(limit) = entry.get("id").and_then(Value::as_str).and_then(&limit_for) else {
            continue;
        };
        let limit = limit as u64;
        let listed = entry.get("max_model_len").and_then(Value::as_u64);
        let clamped = listed.map_or(limit, |c| c.min(limit));
        if listed != Some(clamped) {
            entry.insert("max_model_len".into(), clamped.into());
            changed = true;
        }
    }
    changed
}

fn is_encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

enum Prefix {
    Whole(Bytes),
    /// Over the cap: what was read, and the rest still to stream.
    Partial(Bytes, Incoming),
    /// The upstream broke off: what was read, and the error.
    Failed(Bytes, hyper::Error),
}

async fn read_prefix(mut body: Incoming, max: usize) -> Prefix {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                    if buf.len() > max {
                        return Prefix::Partial(buf.freeze(), body);
                    }
                }
            }
            Err(e) => return Prefix::Failed(buf.freeze(), e),
        }
    }
    Prefix::Whole(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lowers_only_what_is_above_the_limit() {
        let mut listing = json!({"object": "list", "data": [
            {"id": "a", "object": "model", "max_model_len": 1_048_576, "owned_by": "sglang"},
            {"id": "b", "max_model_len": 100},
            {"id": "a:lora", "max_model_len": null},
            {"id": "unknown", "max_model_len": 5_000},
            "not an object"
        ]});
        let limits = |id: &str| match id {
            "a" | "a:lora" => Some(284_922),
            "b" => Some(200),
            _ => None,
        };
        assert!(clamp(&mut listing, limits));
        let data = &listing["data"];
        assert_eq!(data[0]["max_model_len"], 284_922);
        assert_eq!(data[1]["max_model_len"], 100, "already under: unchanged");
        assert_eq!(data[2]["max_model_len"], 284_922, "null gets the limit");
        assert_eq!(data[3]["max_model_len"], 5_000, "no limit known: unchanged");
        // Key order survives (preserve_order), so only the number differs.
        let keys: Vec<&str> = data[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["id", "object", "max_model_len", "owned_by"]);
        assert!(!clamp(&mut listing, limits), "idempotent");
        assert!(!clamp(&mut json!({"data": "x"}), limits));
    }
}
