//! The operator dashboard under `/ui`: server-rendered HTML over the same
//! `jobwire_core` calls the API makes, with no script and no external asset
//! (it works on an air-gapped network, and with JavaScript off).
//!
//! A person logs in with an API token; the browser then holds a session
//! cookie (HttpOnly, SameSite=Strict), never the token. Every form that
//! changes something carries a CSRF token derived from the session, and
//! what a page offers follows the token's scope: a `read` token sees no
//! form at all, and its POSTs are refused anyway. Everything that comes from
//! a job is escaped by the templates (maud escapes every value it is not
//! told otherwise about, and this module never tells it otherwise).

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};

use crate::api::ApiState;

mod assets;
mod chart;
mod dead_letters;
mod error;
mod extract;
mod format;
mod https;
mod jobs;
mod layout;
mod overview;
mod queues;
mod schedules;
mod session;
mod tenants;

/// Every page and form of the dashboard.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(overview::overview))
        // Typed or bookmarked with a trailing slash: the same page.
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .route("/ui/login", get(session::login_page).post(session::log_in))
        .route("/ui/logout", post(session::log_out))
        .route("/ui/jobs", get(jobs::list))
        .route("/ui/jobs/{job_id}", get(jobs::show))
        .route(
            "/ui/jobs/{job_id}/cancel",
            get(jobs::confirm_cancel).post(jobs::cancel),
        )
        .route(
            "/ui/jobs/{job_id}/replay",
            get(jobs::confirm_replay).post(jobs::replay),
        )
        .route("/ui/dead-letters", get(dead_letters::groups))
        .route(
            "/ui/dead-letters/retry",
            get(dead_letters::confirm_retry).post(dead_letters::retry),
        )
        .route("/ui/queues", get(queues::list))
        .route("/ui/queues/pause", post(queues::pause))
        .route("/ui/queues/resume", post(queues::resume))
        .route("/ui/schedules", get(schedules::list))
        .route("/ui/schedules/{name}/pause", post(schedules::pause))
        .route("/ui/schedules/{name}/resume", post(schedules::resume))
        .route("/ui/tenants", get(tenants::list))
        .route("/ui/tenants/cap", post(tenants::set_cap))
        .route("/ui/static/app.css", get(assets::stylesheet))
        // Static routes win over this one: anything else under /ui is a
        // page of its own saying so, not the API's JSON 404.
        .route("/ui/{*rest}", get(error::page_not_found))
        // Set here, under the security headers: the API's own answer for
        // a method a route does not take, set on the merged router, then
        // fills only the routes that have none.
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(middleware::from_fn(security_headers))
}

/// What the browser may do with a dashboard page: load nothing but this
/// server's stylesheet, run no script at all, post forms only here, never be
/// framed; and keep no copy of it.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut axum::http::HeaderMap, name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
    response
}
