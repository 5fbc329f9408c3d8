//! Envoy's header messages ↔ `http` types, shared by ext_authz and ext_proc.

use envoy_types::pb::envoy::config::core::v3::{
    header_value_option::HeaderAppendAction, HeaderMap as ProtoHeaderMap, HeaderValue,
    HeaderValueOption,
};
use http::header::{HeaderMap, HeaderName, HeaderValue as HttpHeaderValue};

use crate::errors::Reason;

/// Pseudo-headers and regular headers of one request as Envoy sent them.
#[derive(Debug, Default)]
pub struct Parsed {
    pub method: Option<String>,
    pub path: Option<String>,
    pub headers: HeaderMap,
}

/// Reads Envoy's `HeaderMap` (ext_proc, and ext_authz with
/// `encode_raw_headers`): `:method` and `:path` apart, every other
/// pseudo-header dropped, each regular header kept with all its values so
/// that duplicates stay visible to the checks that refuse them.
pub fn from_proto(map: Option<&ProtoHeaderMap>) -> Result<Parsed, Reason> {
    let mut parsed = Parsed::default();
    for h in map.map(|m| m.headers.as_slice()).unwrap_or_default() {
        // Envoy fills `raw_value`; older data planes and hand-written clients `value`.
        let value: &[u8] = if h.raw_value.is_empty() {
            h.value.as_bytes()
        } else {
            &h.raw_value
        };
        match h.key.as_str() {
            ":method" => parsed.method = Some(utf8(":method", value)?),
            ":path" => parsed.path = Some(utf8(":path", value)?),
            key if key.starts_with(':') => {}
            key => insert(&mut parsed.headers, key, value)?,
        }
    }
    Ok(parsed)
}

/// ext_authz's default `headers` map (values of a repeated header already
/// joined by Envoy).
pub fn from_map<'a>(
    map: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<HeaderMap, Reason> {
    let mut headers = HeaderMap::new();
    for (k, v) in map {
        if !k.starts_with(':') {
            insert(&mut headers, k, v.as_bytes())?;
        }
    }
    Ok(headers)
}

fn insert(headers: &mut HeaderMap, key: &str, value: &[u8]) -> Result<(), Reason> {
    let name = HeaderName::from_bytes(key.as_bytes())
        .map_err(|_| Reason::BadFraming(format!("invalid header name {key:?}")))?;
    let value = HttpHeaderValue::from_bytes(value)
        .map_err(|_| Reason::BadFraming(format!("invalid value of header {key:?}")))?;
    headers.append(name, value);
    Ok(())
}

fn utf8(what: &str, value: &[u8]) -> Result<String, Reason> {
    String::from_utf8(value.to_vec())
        .map_err(|_| Reason::BadPath(format!("{what} is not valid UTF-8")))
}

/// A header to set (replace), in ext_proc's encoding (`raw_value`, which
/// Envoy's own messages use).
pub fn set_raw(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: String::new(),
            raw_value: value.as_bytes().to_vec(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

/// A header to set (replace), in ext_authz's encoding (`value`).
pub fn set_value(key: &str, value: &str) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: value.to_string(),
            raw_value: Vec::new(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(key: &str, raw: &str) -> HeaderValue {
        HeaderValue {
            key: key.into(),
            value: String::new(),
            raw_value: raw.as_bytes().to_vec(),
        }
    }

    #[test]
    fn pseudo_headers_apart_duplicates_kept() {
        let map = ProtoHeaderMap {
            headers: vec![
                hv(":method", "POST"),
                hv(":path", "/v1/chat/completions?x=1"),
                hv(":authority", "guard"),
                hv("content-type", "application/json"),
                hv("x-a", "1"),
                hv("x-a", "2"),
                HeaderValue {
                    key: "x-old".into(),
                    value: "plain".into(),
                    raw_value: Vec::new(),
                },
            ],
        };
        let p = from_proto(Some(&map)).unwrap();
        assert_eq!(p.method.as_deref(), Some("POST"));
        assert_eq!(p.path.as_deref(), Some("/v1/chat/completions?x=1"));
        assert_eq!(p.headers.get_all("x-a").iter().count(), 2);
        assert_eq!(p.headers["x-old"], "plain");
        assert!(!p.headers.contains_key(":authority"));
        assert!(from_proto(Some(&ProtoHeaderMap {
            headers: vec![hv("bad name", "x")]
        }))
        .is_err());
    }
}
