//! `/dead-letter`: FAILED jobs grouped by type and error code, and retrying
//! a group in batches.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use jobwire_core::{DeadLetterGroup, ReplayFilter};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Admin, Reader};
use super::error::{ApiError, BodyRefused, ErrorEnvelope, Unavailable};
use super::extract::{JsonBody, NoQuery, QueryParams};
use super::jobs::parse_time;

/// Rows per statement of a retry: each batch commits on its own, so a retry
/// of a million rows never holds one long transaction or many locks.
pub(crate) const RETRY_BATCH: i64 = 1000;

/// One group of dead letters.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeadLetterGroupView {
    #[serde(rename = "type")]
    job_type: String,
    /// The last attempt's error code (absent when the failure had none).
    error_code: Option<String>,
    count: i64,
    first_failed_at: Option<DateTime<Utc>>,
    last_failed_at: Option<DateTime<Utc>>,
    /// The newest failure's message.
    sample_error: Option<String>,
}

impl From<DeadLetterGroup> for DeadLetterGroupView {
    fn from(group: DeadLetterGroup) -> Self {
        DeadLetterGroupView {
            job_type: group.job_type,
            error_code: group.last_error_code,
            count: group.jobs,
            first_failed_at: group.first_failed_at,
            last_failed_at: group.last_failed_at,
            sample_error: group.sample_error,
        }
    }
}

/// Every dead-letter group, largest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeadLetterGroups {
    groups: Vec<DeadLetterGroupView>,
}

/// FAILED jobs grouped by type and error code: count, first and last
/// failure, a sample error.
#[utoipa::path(
    get,
    path = "/dead-letter",
    tag = "dead letters",
    responses(
        (status = 200, description = "OK", body = DeadLetterGroups),
        (status = 400, description = "INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn dead_letter_groups(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
) -> Result<Json<DeadLetterGroups>, ApiError> {
    let groups = jobwire_core::dead_letter_groups(&state.pool).await?;
    Ok(Json(DeadLetterGroups {
        groups: groups.into_iter().map(Into::into).collect(),
    }))
}

/// Which dead letters to retry: a type, an error code, or both (neither:
/// 400 FILTER_REQUIRED); optionally a window of failure times (`since`
/// after `until`: 400 INVALID_FIELD).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RetryRequest {
    /// Only jobs of this type (not blank). This or `errorCode` is required.
    #[serde(rename = "type")]
    #[schema(example = "deliver_webhook")]
    job_type: Option<String>,
    /// Only jobs whose last error has this code (not blank). This or `type`
    /// is required.
    #[schema(example = "HTTP_503")]
    error_code: Option<String>,
    /// Only jobs that failed at or after this time (RFC 3339 with an
    /// offset); not after `until`.
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-10-18T06:00:00Z")]
    since: Option<String>,
    /// Only jobs that failed at or before this time. Default: the time of
    /// the request, so repeating a call with the same `until` requeues
    /// nothing new.
    #[schema(value_type = Option<String>, format = DateTime)]
    until: Option<String>,
}

/// What a retry did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetryResponse {
    /// Jobs put back to QUEUED (each audited with the token's name).
    requeued: u64,
    /// The `until` bound used: pass it again to repeat the call safely.
    until: DateTime<Utc>,
}

/// Retry a group of dead letters: each back to QUEUED with its attempts
/// reset and a fresh wake-up, one `job_audit` row each (actor: the token's
/// name), in batches that each commit on their own.
#[utoipa::path(
    post,
    path = "/dead-letter/retry",
    tag = "dead letters",
    request_body = RetryRequest,
    responses(
        (status = 202, description = "Accepted", body = RetryResponse),
        (status = 400, description = "FILTER_REQUIRED: neither type nor errorCode; INVALID_FIELD: a blank filter, a bad time, or since after until; MALFORMED_JSON; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        BodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn retry_dead_letters(
    Admin(token): Admin,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<RetryRequest>,
) -> Result<(StatusCode, Json<RetryResponse>), ApiError> {
    let non_empty = |field: &str, value: Option<String>| match value {
        Some(value) if value.trim().is_empty() => {
            Err(ApiError::invalid_field(field, "must not be empty"))
        }
        other => Ok(other),
    };
    let job_type = non_empty("type", request.job_type)?;
    let error_code = non_empty("errorCode", request.error_code)?;
    if job_type.is_none() && error_code.is_none() {
        return Err(ApiError::bad_request(
            "FILTER_REQUIRED",
            "Name the group to retry: type, errorCode, or both.",
        ));
    }
    let since = request
        .since
        .as_deref()
        .map(|at| parse_time("since", at))
        .transpose()?;
    let until = request
        .until
        .as_deref()
        .map(|at| parse_time("until", at))
        .transpose()?;
    if let (Some(since), Some(until)) = (since, until)
        && since > until
    {
        // As the command line refuses it: no job can fall within.
        return Err(ApiError::invalid_field(
            "since",
            format!("{since} is after until ({until}): no job can match"),
        ));
    }
    let filter = ReplayFilter {
        job_type,
        error_code,
        since,
        until,
        limit: i64::MAX,
    };
    let replay = jobwire_core::replay_dead_in_batches(
        &state.pool,
        &filter,
        RETRY_BATCH,
        &token.name,
        "dead-letter retry over the HTTP API",
    )
    .await?;
    tracing::info!(
        actor = %token.name,
        requeued = replay.requeued,
        batches = replay.batches,
        longest_batch_ms = replay.longest_batch.as_millis() as u64,
        "dead letters retried"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(RetryResponse {
            requeued: replay.requeued,
            until: replay.until,
        }),
    ))
}
