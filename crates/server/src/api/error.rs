//! The one error shape of the API, `{"error":{"code","message","requestId"}}`,
//! and how every failure maps onto a status and a stable code.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::{
    ContentBuilder, Ref, RefOr, Response as ResponseDoc, ResponseBuilder, ResponsesBuilder,
};
use utoipa::{IntoResponses, ToSchema};

use super::request_id::current_request_id;

/// A failed call. Each variant is a category with one status; `code` says
/// which failure of that category it is.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// 400: the request is malformed or a field is invalid (`field` names it).
    BadRequest {
        code: &'static str,
        message: String,
        field: Option<String>,
    },
    /// 401: no token, or not a live one.
    Unauthenticated,
    /// 403: the token's scope does not allow the call.
    Forbidden { message: String },
    /// 404: no such job, route, ...
    NotFound { code: &'static str, message: String },
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 409: the resource is in a state the call does not apply to.
    Conflict { code: &'static str, message: String },
    /// 413: the body or the payload is over its limit (`field` names the
    /// payload; absent for the whole body).
    PayloadTooLarge {
        message: String,
        field: Option<String>,
    },
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 429: an enqueue limit refused the call (`QUEUE_FULL`,
    /// `RATE_LIMITED`); nothing was written. Sent with `Retry-After`.
    TooManyRequests {
        code: &'static str,
        message: String,
        retry_after: std::time::Duration,
    },
    /// 503: the database is unreachable, not migrated, or contended; try again.
    Unavailable { code: &'static str, message: String },
    /// 500: a bug. Logged with the request id; the client learns nothing more.
    Internal,
}

/// The error envelope every failure returns.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorEnvelope {
    error: ErrorBody,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ErrorBody {
    /// Stable, machine-readable: `JOB_NOT_FOUND`, `INVALID_FIELD`, ...
    code: String,
    /// For a person.
    message: String,
    /// The request's id (also in the `X-Request-Id` header and the server's logs).
    request_id: String,
    /// The request field (or query parameter, or header) at fault, for
    /// `INVALID_FIELD`, `INVALID_QUERY` and a payload's `PAYLOAD_TOO_LARGE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    /// For `QUEUE_FULL` and `RATE_LIMITED`: when to try again, in
    /// milliseconds (the `Retry-After` header rounds it up to seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

/// An error answer in the OpenAPI document: `status`, described, with the
/// error envelope as its body.
fn documented_error(
    responses: ResponsesBuilder,
    status: &str,
    description: &str,
) -> ResponsesBuilder {
    responses.response(
        status,
        ResponseBuilder::new().description(description).content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(
                    <ErrorEnvelope as ToSchema>::name(),
                )))
                .build(),
        ),
    )
}

/// The 503 of every call that reads the database, as its token's check
/// does (every route but the health checks, which say it their own way):
/// `responses(..., Unavailable)` lists it in the OpenAPI document. Never
/// built: it only describes.
#[allow(dead_code, reason = "a description of responses, never a value")]
pub(crate) struct Unavailable;

impl IntoResponses for Unavailable {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        documented_error(
            ResponsesBuilder::new(),
            "503",
            "The database cannot be used now: DATABASE_UNAVAILABLE (unreachable, or refusing \
             the server's connections) or DATABASE_BUSY (a serialization failure, a lock \
             timeout), both worth a retry; or SCHEMA_NOT_READY (no jobwire schema, or an old \
             one), which needs `jobwire migrate` first",
        )
        .build()
        .into()
    }
}

/// The 413 and 415 of every route that takes a JSON body, for a body the
/// server does not read: `responses(..., BodyRefused)`. Never built.
#[allow(dead_code, reason = "a description of responses, never a value")]
pub(crate) struct BodyRefused;

impl IntoResponses for BodyRefused {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        body_refused(&format!(
            "PAYLOAD_TOO_LARGE: the body is over the server's limit ({} bytes)",
            super::BODY_LIMIT_BYTES
        ))
    }
}

/// [`BodyRefused`] for a route whose body carries a job's payload, which
/// has a limit of its own: `responses(..., PayloadOrBodyRefused)`.
#[allow(dead_code, reason = "a description of responses, never a value")]
pub(crate) struct PayloadOrBodyRefused;

impl IntoResponses for PayloadOrBodyRefused {
    fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
        body_refused(&format!(
            "PAYLOAD_TOO_LARGE: the payload is over `job_settings.max_payload_bytes` (`field`: \
             payload), or the body over the server's limit ({} bytes)",
            super::BODY_LIMIT_BYTES
        ))
    }
}

fn body_refused(too_large: &str) -> BTreeMap<String, RefOr<ResponseDoc>> {
    let responses = documented_error(ResponsesBuilder::new(), "413", too_large);
    documented_error(
        responses,
        "415",
        "UNSUPPORTED_MEDIA_TYPE: the body is not sent as JSON (`Content-Type: \
         application/json` or `application/...+json`)",
    )
    .build()
    .into()
}

impl ApiError {
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// An invalid field of the request body or query, named as the API spells it.
    pub(crate) fn invalid_field(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        let field = field.into();
        ApiError::BadRequest {
            code: "INVALID_FIELD",
            message: format!("{field}: {reason}"),
            field: Some(field),
        }
    }

    /// An invalid query parameter (unknown, of the wrong type or out of
    /// range), named as the API spells it.
    pub(crate) fn invalid_query(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        let field = field.into();
        ApiError::BadRequest {
            code: "INVALID_QUERY",
            message: format!("{field}: {reason}"),
            field: Some(field),
        }
    }

    pub(crate) fn job_not_found(job_id: uuid::Uuid) -> Self {
        ApiError::NotFound {
            code: "JOB_NOT_FOUND",
            message: format!("No job {job_id}."),
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn code_and_message(self) -> (&'static str, String, Option<String>) {
        match self {
            ApiError::BadRequest {
                code,
                message,
                field,
            } => (code, message, field),
            ApiError::Unauthenticated => (
                "UNAUTHENTICATED",
                "A live bearer token is required: Authorization: Bearer jw_...".into(),
                None,
            ),
            ApiError::Forbidden { message } => ("FORBIDDEN", message, None),
            ApiError::NotFound { code, message } | ApiError::Conflict { code, message } => {
                (code, message, None)
            }
            ApiError::MethodNotAllowed => (
                "METHOD_NOT_ALLOWED",
                "This route does not take that method.".into(),
                None,
            ),
            ApiError::PayloadTooLarge { message, field } => ("PAYLOAD_TOO_LARGE", message, field),
            ApiError::UnsupportedMediaType => (
                "UNSUPPORTED_MEDIA_TYPE",
                "The body must be JSON: Content-Type: application/json.".into(),
                None,
            ),
            ApiError::Unavailable { code, message }
            | ApiError::TooManyRequests { code, message, .. } => (code, message, None),
            ApiError::Internal => (
                "INTERNAL",
                "An internal error; it is logged under this request id.".into(),
                None,
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let unauthenticated = matches!(self, ApiError::Unauthenticated);
        let retry_after = match &self {
            ApiError::TooManyRequests { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        let (code, message, field) = self.code_and_message();
        let request_id = current_request_id();
        if status.is_server_error() {
            tracing::warn!(%status, code, %message, "request failed");
        }
        let mut response = (
            status,
            Json(ErrorEnvelope {
                error: ErrorBody {
                    code: code.to_owned(),
                    message,
                    request_id,
                    field,
                    retry_after_ms: retry_after
                        .map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
                },
            }),
        )
            .into_response();
        if let Some(wait) = retry_after {
            // Whole seconds, rounded up, and at least one (RFC 9110).
            let seconds = wait.as_millis().div_ceil(1000).max(1);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&seconds.to_string()).expect("digits"),
            );
        }
        if unauthenticated {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// How a core verdict reads over HTTP. Job-specific verdicts (cancel's
/// JOB_RUNNING) are decided by their handler before this.
impl From<jobwire_core::Error> for ApiError {
    fn from(error: jobwire_core::Error) -> Self {
        use jobwire_core::Error as Core;
        match error {
            Core::InvalidJob { field, reason } => ApiError::invalid_field(api_field(field), reason),
            Core::InvalidArgument { argument, reason } => {
                ApiError::invalid_field(api_field(argument), reason)
            }
            Core::PayloadTooLarge { size, limit } => ApiError::PayloadTooLarge {
                message: format!(
                    "payload is {size} bytes, over the limit of {limit} bytes (store ids, not objects)"
                ),
                field: Some("payload".into()),
            },
            Core::NotFound(job_id) => ApiError::job_not_found(job_id),
            Core::AlreadyFinished { job_id, state } => ApiError::Conflict {
                code: "JOB_FINISHED",
                message: format!("Job {job_id} already finished as {state}."),
            },
            Core::WrongState {
                job_id,
                state,
                reason,
            } => ApiError::Conflict {
                code: "WRONG_STATE",
                message: format!("Job {job_id} is {state}: {reason}."),
            },
            Core::DedupContention { .. } => ApiError::Unavailable {
                code: "CONTENDED",
                message: "Concurrent enqueues kept taking this idempotency key; try again.".into(),
            },
            Core::QueueFull {
                message,
                retry_after,
                ..
            } => ApiError::TooManyRequests {
                code: "QUEUE_FULL",
                message: format!("{message}."),
                retry_after,
            },
            Core::RateLimited {
                message,
                retry_after,
                ..
            } => ApiError::TooManyRequests {
                code: "RATE_LIMITED",
                message: format!("{message}."),
                retry_after,
            },
            Core::Database(err) => database_error(&err),
            // A check of the schema refused a value the request carried (a
            // tenant the database's collation counts as blank, say): the
            // request's to change, and nothing was written.
            Core::ConstraintViolation {
                constraint,
                message,
            } => {
                tracing::warn!(%constraint, %message, "the database refused a value of a request");
                ApiError::bad_request(
                    "INVALID_INPUT",
                    format!("The database refused a value of the request: {message}"),
                )
            }
            other => {
                tracing::error!(error = %other, "unexpected core error");
                ApiError::Internal
            }
        }
    }
}

/// A database failure: unreachable (or refusing this server's
/// connections) or not migrated is the operator's to fix (503, retry
/// later); anything else is a bug (500, logged).
pub(crate) fn database_error(err: &sqlx::Error) -> ApiError {
    match err {
        err if cannot_use_database(err) => ApiError::Unavailable {
            code: "DATABASE_UNAVAILABLE",
            message: "The database cannot be reached; try again.".into(),
        },
        sqlx::Error::Database(db)
            if matches!(db.code().as_deref(), Some("42P01" | "42883" | "42703")) =>
        {
            ApiError::Unavailable {
                code: "SCHEMA_NOT_READY",
                message:
                    "The database has no jobwire schema, or an old one: run `jobwire migrate`."
                        .into(),
            }
        }
        // Data exceptions: a NUL character, a value out of range. The
        // request's, never the server's.
        sqlx::Error::Database(db) if db.code().is_some_and(|code| code.starts_with("22")) => {
            ApiError::bad_request(
                "INVALID_INPUT",
                format!(
                    "The database refused a value of the request: {}",
                    jobwire_core::database_message(err)
                ),
            )
        }
        // Serialization failures, deadlocks, lock timeouts, admin shutdown:
        // the same call may well succeed a moment later.
        sqlx::Error::Database(db)
            if db.code().is_some_and(|code| {
                code.starts_with("40") || code.starts_with("55") || code.starts_with("57")
            }) =>
        {
            ApiError::Unavailable {
                code: "DATABASE_BUSY",
                message: "The database could not complete the call now; try again.".into(),
            }
        }
        other => {
            tracing::error!(error = %other, "database error");
            ApiError::Internal
        }
    }
}

/// Whether `err` says this server cannot use the database at all: it
/// cannot be reached, or it refuses the server's connections (a login no
/// longer allowed or a wrong password, class 28; too many connections or no
/// memory, 53; a connection failure it reported itself, 08).
pub(crate) fn cannot_use_database(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            ["08", "28", "53"]
                .iter()
                .any(|class| code.starts_with(class))
        }),
        _ => false,
    }
}

/// The API's (camelCase) name of a core field or argument.
fn api_field(core: &str) -> String {
    match core {
        "job_type" => "type",
        "max_attempts" => "maxAttempts",
        "dedup_key" => "idempotencyKey",
        "run_at" => "runAt",
        "delay" => "delayMs",
        "error_code" => "errorCode",
        "jitter_seconds" => "jitterSeconds",
        "max_catch_up" => "maxCatchUp",
        "max_running" => "maxRunning",
        "max_queued" => "maxQueued",
        "shed_depth" => "shed.depth",
        "enqueue_rate.jobs" => "enqueueRate.jobs",
        "enqueue_rate.per_seconds" => "enqueueRate.perSeconds",
        other => other,
    }
    .to_owned()
}
