//! Request-target canonicalisation. SGLang (Starlette) routes on the
//! percent-decoded path while smg routes on the raw one, so the guard decides
//! on the decoded path, refuses every spelling it would have to guess about,
//! and forwards only the canonical path.

use http::Uri;
use percent_encoding::percent_decode_str;

use crate::Refusal;

/// The decoded, canonical path of `uri` (no trailing slash, no query), or a refusal.
pub fn canonical_path(uri: &Uri) -> Result<String, Refusal> {
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(Refusal::BadPath(
            "absolute-form request targets are refused".into(),
        ));
    }
    let raw = uri.path();
    if !raw.starts_with('/') {
        return Err(Refusal::BadPath("the path must start with `/`".into()));
    }
    if raw.contains('#') {
        return Err(Refusal::BadPath("fragments are refused".into()));
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| Refusal::BadPath("the path is not UTF-8 once decoded".into()))?;
    if decoded
        .chars()
        .any(|c| c.is_control() || c == ';' || c == '#' || c == '%' || c == '\\' || c == '?')
    {
        return Err(Refusal::BadPath(
            "the path holds characters no SGLang route has".into(),
        ));
    }
    let trimmed = match decoded.strip_suffix('/') {
        Some(t) if !t.is_empty() => t,
        _ => &decoded,
    };
    if trimmed != "/"
        && trimmed[1..]
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(Refusal::BadPath(
            "empty, `.` and `..` path segments are refused".into(),
        ));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(target: &str) -> Result<String, String> {
        let uri: Uri = target
            .parse()
            .map_err(|e: http::uri::InvalidUri| e.to_string())?;
        canonical_path(&uri).map_err(|r| r.label().to_string())
    }

    #[test]
    fn decodes_and_canonicalises() {
        assert_eq!(
            canon("/v1/chat/completions").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(
            canon("/v1/chat%2Fcompletions").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(
            canon("/v1/%63hat/completions").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(
            canon("/v1/chat/completions/").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(
            canon("/v1/chat/completions%2F").unwrap(),
            "/v1/chat/completions"
        );
        assert_eq!(canon("/generate?x=1").unwrap(), "/generate");
        assert_eq!(canon("/").unwrap(), "/");
    }

    #[test]
    fn refuses_what_it_would_have_to_guess() {
        for t in [
            "//v1/chat/completions",
            "/v1//chat/completions",
            "/v1/./chat/completions",
            "/v1/../generate",
            "/v1/%2E%2E/generate",
            "/generate;x=1",
            "/generate%3Bx",
            "/generate%00",
            "/generate%2523",
            "/generate%ff",
            "http://evil/v1/chat/completions",
        ] {
            assert_eq!(canon(t).unwrap_err(), "bad_path", "{t}");
        }
    }
}
