//! The dashboard's one static file, compiled into the binary so the pages
//! need nothing from any other server. It is served without a login: it is
//! the same for everyone and holds no data (the login page needs it too).

use axum::http::header;
use axum::response::IntoResponse;

const STYLESHEET: &str = include_str!("static/app.css");

/// `GET /ui/static/app.css`.
pub(crate) async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLESHEET,
    )
}
