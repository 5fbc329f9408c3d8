//! Header rules at the proxy boundary: what is hop-by-hop, what the guard
//! adds, and how a request id is chosen.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1),
/// plus the proxy-authentication pair: the guard is the proxy such credentials
/// would be addressed to, and it must not hand them on to a host they were not
/// meant for. `Authorization` is end-to-end (SGLang's `--api-key`) and passes.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Client ids longer than this, or with other characters, are replaced: the id
/// goes into every log line and must not be a vector for log injection.
const MAX_REQUEST_ID_LEN: usize = 128;

/// The client's `x-request-id` when it is a plain token, else a new UUID.
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(&X_REQUEST_ID)
        .filter(|v| is_plain_id(v.as_bytes()))
        .cloned()
        .unwrap_or_else(|| {
            let mut spelled = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut spelled);
            HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("unknown"))
        })
}

fn is_plain_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_REQUEST_ID_LEN
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(b))
}

/// Removes hop-by-hop headers, including every header the `Connection`
/// header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// What the guard knows about the connection a request came in on.
#[derive(Debug, Clone, Copy)]
pub struct Client {
    pub ip: IpAddr,
}

/// Turns a client's request headers into the headers sent upstream.
/// `body_len` is the length of a body the guard re-serialised, whose framing
/// the guard therefore decides; `None` leaves the framing to the HTTP client.
pub fn to_upstream(
    headers: &mut HeaderMap,
    client: Client,
    authority: &HeaderValue,
    request_id: &HeaderValue,
    body_len: Option<usize>,
) {
    strip_hop_by_hop(headers);
    // The guard holds the whole body already; upstream need not be asked to continue.
    headers.remove(header::EXPECT);
    headers.remove(header::CONTENT_LENGTH);
    if let Some(len) = body_len {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        // The forwarded body is the guard's canonical UTF-8 JSON, whatever
        // parameters the client's type carried.
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    headers.insert(header::HOST, authority.clone());
    append_forwarded_for(headers, client.ip);
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    headers.insert(X_REQUEST_ID, request_id.clone());
}

/// Appends the client's address to any `x-forwarded-for` chain it sent, as
/// one header line (several lines would be joined by the next hop anyway).
fn append_forwarded_for(headers: &mut HeaderMap, ip: IpAddr) {
    let mut chain: Vec<String> = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    chain.push(ip.to_string());
    // Every element came from a valid header value or is an address: joining
    // cannot fail, but if it did the client's own address alone is still right.
    let joined = HeaderValue::from_str(&chain.join(", "))
        .or_else(|_| HeaderValue::from_str(&ip.to_string()));
    if let Ok(v) = joined {
        headers.insert(X_FORWARDED_FOR, v);
    }
}

/// Turns the upstream's response headers into the headers sent to the client.
pub fn to_client(headers: &mut HeaderMap, request_id: &HeaderValue) {
    strip_hop_by_hop(headers);
    headers.insert(X_REQUEST_ID, request_id.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn strips_hop_by_hop_and_what_connection_names() {
        let mut h = map(&[
            ("connection", "keep-alive, x-secret-hop"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic eA=="),
            ("authorization", "Bearer k"),
            ("content-type", "application/json"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["authorization", "content-type"]);
    }

    #[test]
    fn upstream_headers_are_rewritten() {
        let mut h = map(&[
            ("host", "guard.example"),
            ("content-length", "999"),
            ("content-type", "application/json; charset=utf-8"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("expect", "100-continue"),
        ]);
        let client = Client {
            ip: "127.0.0.1".parse().unwrap(),
        };
        let id = HeaderValue::from_static("abc");
        to_upstream(
            &mut h,
            client,
            &HeaderValue::from_static("up:30000"),
            &id,
            Some(12),
        );
        assert_eq!(h["host"], "up:30000");
        assert_eq!(h["content-length"], "12");
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 127.0.0.1");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-request-id"], "abc");
        assert!(h.get("expect").is_none());
    }

    #[test]
    fn request_ids_are_kept_only_when_plain() {
        assert_eq!(
            request_id(&map(&[("x-request-id", "req-1.2_3")])),
            "req-1.2_3"
        );
        for bad in ["", "a b", "a\"b", &"x".repeat(129)] {
            let id = request_id(&map(&[("x-request-id", bad)]));
            assert_ne!(id, bad);
            assert_eq!(id.len(), 36, "a fresh UUID");
        }
        assert_eq!(request_id(&HeaderMap::new()).len(), 36);
    }
}
