//! `/queues`: what each queue holds, and pausing or resuming its claims.

use axum::Json;
use axum::extract::State;
use jobwire_core::QueueOverview;
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Admin, Reader};
use super::error::{ApiError, ErrorEnvelope, Unavailable};
use super::extract::{NoQuery, QueryParams, QueuePath};

/// Jobs of a queue by state (hot table: finished jobs leave it with retention).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueDepth {
    queued: i64,
    running: i64,
    retry_wait: i64,
    cancel_requested: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
}

/// One queue.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueView {
    name: String,
    /// `postgres` (workers claim from the table) or `broker` (wake-ups via a topic).
    #[schema(example = "postgres")]
    dispatch: String,
    /// The broker topic, for a broker-dispatched queue.
    topic: Option<String>,
    /// Paused queues accept jobs but nothing claims them.
    paused: bool,
    depth: QueueDepth,
    /// Seconds the oldest due, waiting job has waited (absent: none waits).
    /// Scale workers on this, not on depth.
    oldest_runnable_age_seconds: Option<f64>,
}

impl From<QueueOverview> for QueueView {
    fn from(queue: QueueOverview) -> Self {
        QueueView {
            name: queue.queue,
            dispatch: queue.dispatch,
            topic: queue.topic,
            paused: queue.paused,
            depth: QueueDepth {
                queued: queue.queued,
                running: queue.running,
                retry_wait: queue.retry_wait,
                cancel_requested: queue.cancel_requested,
                succeeded: queue.succeeded,
                failed: queue.failed,
                cancelled: queue.cancelled,
            },
            oldest_runnable_age_seconds: queue.oldest_runnable_age_s,
        }
    }
}

/// Every queue.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Queues {
    queues: Vec<QueueView>,
}

/// Every queue (declared, or holding jobs): dispatch, pause, depth by
/// state, age of the oldest runnable job.
#[utoipa::path(
    get,
    path = "/queues",
    tag = "queues",
    responses(
        (status = 200, description = "OK", body = Queues),
        (status = 400, description = "INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn list_queues(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
) -> Result<Json<Queues>, ApiError> {
    let queues = jobwire_core::queue_overview(&state.pool).await?;
    Ok(Json(Queues {
        queues: queues.into_iter().map(Into::into).collect(),
    }))
}

/// A queue's pause state after a change.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueuePaused {
    queue: String,
    paused: bool,
    /// False when no queue of this name was declared or held a job before
    /// this call: allowed (a queue may be paused before its first job), but
    /// most often a mistyped name. Check it against `GET /queues`.
    known: bool,
}

async fn set_paused(
    token: &jobwire_core::ApiToken,
    state: &ApiState,
    queue: String,
    paused: bool,
) -> Result<Json<QueuePaused>, ApiError> {
    // Asked first: pausing declares the queue.
    let known = jobwire_core::queue_is_known(&state.pool, &queue).await?;
    jobwire_core::set_queue_paused(&state.pool, &queue, paused).await?;
    tracing::info!(actor = %token.name, %queue, paused, known, "queue pause changed");
    Ok(Json(QueuePaused {
        queue,
        paused,
        known,
    }))
}

/// Pause a queue: nothing claims its jobs, on either path, until it is
/// resumed (wake-ups that arrive meanwhile are acknowledged as misses and
/// sent again on resume). Enqueueing goes on.
#[utoipa::path(
    post,
    path = "/queues/{name}/pause",
    tag = "queues",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "OK", body = QueuePaused),
        (status = 400, description = "INVALID_QUEUE: the name is blank, over 255 bytes or holds a control character; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn pause_queue(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<QueuePaused>, ApiError> {
    set_paused(&token, &state, queue, true).await
}

/// Resume a queue; its waiting jobs are woken once the resume commits.
///
/// The wake-ups are written by a statement of their own, after the resume.
#[utoipa::path(
    post,
    path = "/queues/{name}/resume",
    tag = "queues",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "OK", body = QueuePaused),
        (status = 400, description = "INVALID_QUEUE: the name is blank, over 255 bytes or holds a control character; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn resume_queue(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<QueuePaused>, ApiError> {
    set_paused(&token, &state, queue, false).await
}
