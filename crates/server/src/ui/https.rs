//! Whether the browser reached the dashboard over HTTPS, as a TLS proxy in
//! front of it says (`X-Forwarded-Proto: https`, or `Forwarded:
//! proto=https`). jobwire itself speaks plain HTTP; behind such a proxy its
//! cookies are marked `Secure`, so that the browser never sends them over
//! plain HTTP to the same host (an old `http://` bookmark, a typed address
//! without a scheme). Trusting the header costs nothing: it can only add
//! the flag, and a client that sends it itself only restricts its own
//! cookies.

use axum::http::HeaderMap;
use axum::http::header::FORWARDED;

/// The de-facto header most proxies set.
const X_FORWARDED_PROTO: &str = "x-forwarded-proto";

/// True when the first value says `https`: the hop the browser itself
/// made, as the proxy nearest it wrote it (later proxies append theirs).
pub(crate) fn came_over_https(headers: &HeaderMap) -> bool {
    if let Some(value) = headers.get(X_FORWARDED_PROTO).and_then(|v| v.to_str().ok()) {
        return first_element(value).eq_ignore_ascii_case("https");
    }
    if let Some(value) = headers.get(FORWARDED).and_then(|v| v.to_str().ok()) {
        // RFC 7239: `for=…;proto=https;by=…, for=…` (one element per hop,
        // the client's first), a value possibly quoted.
        return first_element(value).split(';').any(|pair| {
            pair.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("proto")
                    && value.trim().trim_matches('"').eq_ignore_ascii_case("https")
            })
        });
    }
    false
}

/// The first of a header's comma-separated values, trimmed.
fn first_element(value: &str) -> &str {
    value.split(',').next().unwrap_or_default().trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn a_proxy_s_word_for_https_is_taken() {
        assert!(came_over_https(&headers(&[("x-forwarded-proto", "https")])));
        assert!(came_over_https(&headers(&[(
            "x-forwarded-proto",
            "HTTPS, http"
        )])));
        assert!(came_over_https(&headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=https;by=203.0.113.43"
        )])));
        assert!(came_over_https(&headers(&[(
            "forwarded",
            "Proto=\"https\", for=10.0.0.1"
        )])));
    }

    #[test]
    fn anything_else_is_plain_http() {
        assert!(!came_over_https(&HeaderMap::new()));
        assert!(!came_over_https(&headers(&[("x-forwarded-proto", "http")])));
        assert!(!came_over_https(&headers(&[(
            "x-forwarded-proto",
            "http, https"
        )])));
        assert!(!came_over_https(&headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http"
        )])));
        assert!(!came_over_https(&headers(&[(
            "forwarded",
            "for=1.2.3.4, proto=https"
        )])));
        assert!(!came_over_https(&headers(&[("forwarded", "proto")])));
    }
}
