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

/// The middleware: assign the id, run the request inside its span, log it
/// (a failure at info, a success at debug).
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
    // A failure's line is what its request id leads an operator to, so it
    // is logged at info. A request that succeeded is logged at debug: a line
    // for each of thousands of requests a second buried the failures.
    // `RUST_LOG=info,lapin=off,rdkafka=off,librdkafka=off,jobwire_server::api::request_id=debug`
    // logs every request.
    span.in_scope(|| {
        let (status, elapsed) = (response.status().as_u16(), started.elapsed());
        if status >= 400 {
            tracing::info!(status, ?elapsed, "request");
        } else {
            tracing::debug!(status, ?elapsed, "request");
        }
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

    /// The log lines written while `max_level` is on, for one request that
    /// succeeds and two that fail (a 429 and a 404), each over a real
    /// socket.
    async fn request_lines(max_level: tracing::Level) -> String {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(max_level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        // The test's runtime has one thread, which serves the requests too.
        let _logging = tracing::subscriber::set_default(subscriber);
        let app = axum::Router::new()
            .route("/ok", axum::routing::get(|| async { "fine" }))
            .route(
                "/full",
                axum::routing::get(|| async { axum::http::StatusCode::TOO_MANY_REQUESTS }),
            )
            .layer(axum::middleware::from_fn(with_request_id));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = reqwest::Client::new();
        for (path, id, status) in [
            ("ok", "id-good", 200),
            ("full", "id-full", 429),
            ("missing", "id-bad", 404),
        ] {
            let response = client
                .get(format!("http://{address}/{path}"))
                .header(&REQUEST_ID_HEADER, id)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(response.headers()[&REQUEST_ID_HEADER], id);
        }
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[tokio::test]
    async fn a_failed_request_is_logged_at_info_and_a_successful_one_at_debug() {
        let info = request_lines(tracing::Level::INFO).await;
        assert!(
            info.lines()
                .any(|line| line.contains("request_id=id-bad") && line.contains("status=404")),
            "{info}"
        );
        assert!(!info.contains("id-good"), "{info}");
        // A refusal is a failure: an enqueue limit's 429 keeps its line.
        assert!(
            info.lines()
                .any(|line| line.contains("request_id=id-full") && line.contains("status=429")),
            "{info}"
        );
        let debug = request_lines(tracing::Level::DEBUG).await;
        assert!(
            debug
                .lines()
                .any(|line| line.contains("request_id=id-good") && line.contains("status=200")),
            "{debug}"
        );
        assert!(debug.contains("request_id=id-bad"), "{debug}");
    }
}
