//! Every request gets an id: the caller's `X-Request-Id` when it is a
//! sensible one, else a new `req_…`. It is echoed in the response header,
//! put in every error body, and carried by the request's tracing span, so a
//! client's report and the server's log lines meet.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header a request id travels in, both ways.
pub(crate) const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    // Set for the duration of one request's handling, so an error built
    // anywhere inside it (an extractor's rejection included) can name it.
    static REQUEST_ID: String;
}

/// The id of the request being handled (empty outside one).
pub(crate) fn current_request_id() -> String {
    REQUEST_ID.try_with(Clone::clone).unwrap_or_default()
}

/// A caller's id is kept if it is short and plain (it ends up in logs).
fn acceptable(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// The middleware: assign the id, run the request inside its span, log it.
pub(crate) async fn with_request_id(request: Request, next: Next) -> Response {
    let request_id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| acceptable(id))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("req_{}", uuid::Uuid::now_v7().simple()));
    let span = tracing::info_span!(
        "http",
        request_id = %request_id,
        method = %request.method(),
        path = %request.uri().path(),
    );
    let started = Instant::now();
    let mut response = REQUEST_ID
        .scope(request_id.clone(), next.run(request))
        .instrument(span.clone())
        .await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            elapsed = ?started.elapsed(),
            "request"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_caller_ids_are_kept() {
        assert!(acceptable("req_0193"));
        assert!(acceptable("8f14e45f-ceea-467f-a0e6-0b1c2d3e4f5a"));
        assert!(!acceptable(""));
        assert!(!acceptable("a b"));
        assert!(!acceptable("<script>"));
        assert!(!acceptable(&"x".repeat(129)));
    }
}
