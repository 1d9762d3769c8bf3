//! Reading a dashboard request: forms, query strings and path segments,
//! each failing as a readable 400 page instead of axum's plain-text
//! rejection.

use axum::extract::{Form, FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::UiError;
use crate::api::error::ApiError;

/// A posted form (`application/x-www-form-urlencoded`) of type `T`.
pub(crate) struct UiForm<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for UiForm<T> {
    type Rejection = UiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, UiError> {
        Form::<T>::from_request(request, state)
            .await
            .map(|Form(form)| UiForm(form))
            .map_err(|rejection| match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => UiError::Api(ApiError::PayloadTooLarge {
                    message: "The form is over the size limit.".into(),
                    field: None,
                }),
                _ => UiError::bad_request("INVALID_FORM", rejection.body_text()),
            })
    }
}

/// A query string of type `T`.
pub(crate) struct UiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for UiQuery<T> {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, UiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(query)| UiQuery(query))
            .map_err(|rejection| UiError::bad_request("INVALID_QUERY", rejection.body_text()))
    }
}

/// The one named segment of a path (a queue or schedule name).
pub(crate) struct UiPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for UiPath {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, UiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(segment)| UiPath(segment))
            .map_err(|rejection| UiError::bad_request("INVALID_PATH", rejection.body_text()))
    }
}

/// The `{job_id}` of a path.
pub(crate) struct UiJobId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for UiJobId {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, UiError> {
        let UiPath(raw) = UiPath::from_request_parts(parts, state).await?;
        raw.parse().map(UiJobId).map_err(|_| {
            UiError::bad_request(
                "INVALID_JOB_ID",
                format!("{raw:?} is not a job id (a UUID)."),
            )
        })
    }
}

/// A query or form value, with an empty one (a GET form's blank field)
/// read as absent. Not trimmed: a queue, type or error code may carry
/// spaces of its own, and a filter must name exactly what it names.
pub(crate) fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}
