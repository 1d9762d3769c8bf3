//! How a dashboard request fails: as a page a person can read, with the
//! same status and code the API would give, and the request id to find it
//! in the server's logs. Never a bare 500 for something the caller did.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::layout::{Section, page};
use super::session::Viewer;
use crate::api::error::ApiError;
use crate::api::request_id::current_request_id;

/// A dashboard request that cannot be answered with its page.
#[derive(Debug)]
pub(crate) enum UiError {
    /// No live session: off to the login form.
    LoginRequired,
    /// The session's token may not do this (a `read` token posting).
    Forbidden(String),
    /// A form that did not carry this session's CSRF token.
    CsrfRejected,
    /// Anything the API has a verdict for: bad input, not found, conflict,
    /// database unavailable.
    Api(ApiError),
}

impl From<ApiError> for UiError {
    fn from(error: ApiError) -> Self {
        UiError::Api(error)
    }
}

impl From<jobwire_core::Error> for UiError {
    fn from(error: jobwire_core::Error) -> Self {
        UiError::Api(error.into())
    }
}

impl UiError {
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        UiError::Api(ApiError::bad_request(code, message))
    }

    pub(crate) fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        UiError::Api(ApiError::NotFound {
            code,
            message: message.into(),
        })
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            UiError::LoginRequired => return Redirect::to("/ui/login").into_response(),
            UiError::Forbidden(message) => (StatusCode::FORBIDDEN, "FORBIDDEN", message),
            UiError::CsrfRejected => (
                StatusCode::FORBIDDEN,
                "CSRF_REJECTED",
                "This form did not come from this dashboard session (or the session \
                 changed since it was shown). Nothing was changed: go back, reload the \
                 page and try again."
                    .to_owned(),
            ),
            UiError::Api(error) => {
                let status = error.status();
                let (code, message, _field) = error.code_and_message();
                if status.is_server_error() {
                    tracing::warn!(%status, code, %message, "dashboard request failed");
                }
                (status, code, message)
            }
        };
        let body = html! {
            section.panel.error-panel {
                p.error-code { (status.as_u16()) " " (code) }
                p { (message) }
                p.muted { "Request id " code { (current_request_id()) } }
                p { a href="/ui" { "Back to the overview" } }
            }
        };
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::CONFLICT => "Not in a state for that",
            StatusCode::PAYLOAD_TOO_LARGE => "Too large",
            StatusCode::SERVICE_UNAVAILABLE => "Unavailable: try again",
            status if status.is_client_error() => "Bad request",
            _ => "Something went wrong",
        };
        (status, page(title, Section::None, None, body)).into_response()
    }
}

/// Any other path under `/ui`, for someone logged in: anyone else goes to
/// the login form first, as for every page, so that which pages exist is
/// told only to people who may see them.
pub(crate) async fn page_not_found(_viewer: Viewer) -> UiError {
    UiError::not_found("PAGE_NOT_FOUND", "There is no such dashboard page.")
}

/// A dashboard address asked with a method it does not take (a form's
/// address opened as a page), for someone logged in, as above.
pub(crate) async fn method_not_allowed(_viewer: Viewer) -> UiError {
    UiError::Api(ApiError::MethodNotAllowed)
}
