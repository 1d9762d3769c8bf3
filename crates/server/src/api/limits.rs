//! Enqueue limits over HTTP: `/queues/{name}/limits` (the most jobs that
//! may wait on a queue, shedding low priority) and
//! `/queues/{name}/tenant-limits` (the defaults of every tenant). Admin to
//! change, read to look. An enqueue over a limit is refused with 429 and
//! `Retry-After` (docs/tenants.md, "Enqueue limits").

use axum::Json;
use axum::extract::State;
use jobwire_core::{EnqueueRate, QueueLimits, Shedding, TenantLimits};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Admin, Reader};
use super::error::{ApiError, BodyRefused, ErrorEnvelope, Unavailable};
use super::extract::{JsonBody, NoQuery, QueryParams, QueuePath};
use super::tenants::{TenantCapsView, caps_of};

/// An enqueue rate: at most `jobs` per `perSeconds`, over a sliding window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RateBody {
    /// Jobs allowed per window, 1 to 1000000000.
    #[schema(example = 100, minimum = 1, maximum = 1000000000)]
    jobs: u32,
    /// The window in seconds, 1 to 86400.
    #[schema(example = 60, minimum = 1, maximum = 86400)]
    per_seconds: u32,
}

/// Per-tenant limits at one scope (absent: no limit; an override's absent
/// limit falls back to the queue's default).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TenantLimitsBody {
    /// Most of one tenant's jobs running at once, 1 to 1000000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 3, minimum = 1, maximum = 1000000000)]
    max_running: Option<u32>,
    /// Most of one tenant's jobs waiting, 1 to 1000000000; an enqueue past
    /// it gets 429 QUEUE_FULL.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = 10000, minimum = 1, maximum = 1000000000)]
    max_queued: Option<u32>,
    /// How fast one tenant may enqueue; past it, 429 RATE_LIMITED.
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueue_rate: Option<RateBody>,
}

impl From<TenantLimits> for TenantLimitsBody {
    fn from(limits: TenantLimits) -> Self {
        TenantLimitsBody {
            max_running: limits.max_running,
            max_queued: limits.max_queued,
            enqueue_rate: limits.enqueue_rate.map(|rate| RateBody {
                jobs: rate.jobs,
                per_seconds: rate.per_seconds,
            }),
        }
    }
}

impl From<TenantLimitsBody> for TenantLimits {
    /// Checked by the core, which names each field as the API spells it.
    fn from(body: TenantLimitsBody) -> Self {
        TenantLimits {
            max_running: body.max_running,
            max_queued: body.max_queued,
            enqueue_rate: body.enqueue_rate.map(|rate| EnqueueRate {
                jobs: rate.jobs,
                per_seconds: rate.per_seconds,
            }),
        }
    }
}

/// Shedding: from `depth` waiting jobs on, only jobs of `priority` or more
/// urgent (a lower number) are taken; the others get 429 QUEUE_FULL.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ShedBody {
    /// Waiting jobs from which less urgent enqueues are refused, 1 to
    /// 1000000000; below the queue's `maxQueued` when both are set (else
    /// 400 INVALID_FIELD on `shed.depth`).
    #[schema(example = 50000, minimum = 1, maximum = 1000000000)]
    depth: u32,
    /// The least urgent priority still taken at that depth (-32768 to 32767).
    #[schema(example = 0, minimum = -32768, maximum = 32767)]
    priority: i16,
}

/// A queue's own enqueue limits (absent: none).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct QueueLimitsRequest {
    /// Most jobs waiting on the queue, 1 to 1000000000; an enqueue past it
    /// gets 429 QUEUE_FULL.
    #[schema(example = 100000, minimum = 1, maximum = 1000000000)]
    max_queued: Option<u32>,
    /// Refuse less urgent jobs from a depth on.
    shed: Option<ShedBody>,
}

/// A queue's enqueue limits and the defaults of its tenants.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueLimitsView {
    queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_queued: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shed: Option<ShedBody>,
    /// The limits of every tenant without overrides of its own.
    tenant_defaults: TenantLimitsBody,
}

async fn limits_of(state: &ApiState, queue: &str) -> Result<Json<QueueLimitsView>, ApiError> {
    let limits = jobwire_core::queue_limits(&state.pool, queue).await?;
    Ok(Json(QueueLimitsView {
        queue: queue.to_owned(),
        max_queued: limits.max_queued,
        shed: limits.shed.map(|shed| ShedBody {
            depth: shed.depth,
            priority: shed.priority,
        }),
        tenant_defaults: limits.tenant_defaults.into(),
    }))
}

/// A queue's enqueue limits and per-tenant defaults.
#[utoipa::path(
    get,
    path = "/queues/{name}/limits",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "OK", body = QueueLimitsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn get_queue_limits(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<QueueLimitsView>, ApiError> {
    limits_of(&state, &queue).await
}

/// Set a queue's own enqueue limits, replacing the ones it had (a limit
/// left out is removed).
#[utoipa::path(
    put,
    path = "/queues/{name}/limits",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    request_body = QueueLimitsRequest,
    responses(
        (status = 200, description = "The limits now", body = QueueLimitsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_FIELD: a bad body (`field` names it; `shed.depth` not below `maxQueued`); MALFORMED_JSON; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        BodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn put_queue_limits(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<QueueLimitsRequest>,
) -> Result<Json<QueueLimitsView>, ApiError> {
    let limits = QueueLimits {
        max_queued: request.max_queued,
        shed: request.shed.map(|shed| Shedding {
            depth: shed.depth,
            priority: shed.priority,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&state.pool, &queue, &limits).await?;
    tracing::info!(actor = %token.name, %queue, ?limits, "queue limits changed");
    limits_of(&state, &queue).await
}

/// Remove a queue's own enqueue limits (the per-tenant ones stay).
#[utoipa::path(
    delete,
    path = "/queues/{name}/limits",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "The limits now", body = QueueLimitsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn delete_queue_limits(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<QueueLimitsView>, ApiError> {
    jobwire_core::set_queue_limits(&state.pool, &queue, &QueueLimits::default()).await?;
    tracing::info!(actor = %token.name, %queue, "queue limits removed");
    limits_of(&state, &queue).await
}

/// Set the limits of every tenant of a queue without overrides: running
/// jobs, waiting jobs, enqueue rate, all three at once (a limit left out is
/// removed).
#[utoipa::path(
    put,
    path = "/queues/{name}/tenant-limits",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    request_body = TenantLimitsBody,
    responses(
        (status = 200, description = "The tenant limits now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_FIELD: a bad body (`field` names it); MALFORMED_JSON; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        BodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn put_tenant_defaults(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<TenantLimitsBody>,
) -> Result<Json<TenantCapsView>, ApiError> {
    let limits = TenantLimits::from(request);
    jobwire_core::set_tenant_limits(&state.pool, &queue, None, &limits).await?;
    tracing::info!(actor = %token.name, %queue, ?limits, "tenant defaults changed");
    caps_of(&state, &queue).await
}

/// Remove every per-tenant default of a queue (overrides stay).
#[utoipa::path(
    delete,
    path = "/queues/{name}/tenant-limits",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "The tenant limits now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn delete_tenant_defaults(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<TenantCapsView>, ApiError> {
    jobwire_core::set_tenant_limits(&state.pool, &queue, None, &TenantLimits::default()).await?;
    tracing::info!(actor = %token.name, %queue, "tenant defaults removed");
    caps_of(&state, &queue).await
}
