//! `/queues/{name}/tenants`: per-tenant caps on running jobs (admin to
//! change, read to look).

use axum::Json;
use axum::extract::State;
use jobwire_core::{TenantCap, TenantCaps};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Admin, Reader};
use super::error::{ApiError, BodyRefused, ErrorEnvelope, Unavailable};
use super::extract::{JsonBody, NoQuery, QueryParams, QueuePath, TenantPath};
use super::limits::TenantLimitsBody;

/// A cap on running jobs per tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CapRequest {
    /// Most jobs of one tenant running at once, 1 to 1000000000.
    #[schema(example = 3, minimum = 1, maximum = 1000000000)]
    max_running: u32,
}

/// One tenant of a queue.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TenantView {
    tenant: String,
    /// Its own cap, if it has one.
    override_max_running: Option<i32>,
    /// The cap in force: its own, else the queue's default (absent: none).
    max_running: Option<i32>,
    /// Its own limits (absent ones fall back to the queue's defaults).
    overrides: TenantLimitsBody,
    /// The limits in force.
    limits: TenantLimitsBody,
    /// Its jobs running now under the cap.
    running: i64,
    /// Its waiting jobs handed a freed slot, their wake-up on its way (broker
    /// queues): they hold the slot until they start.
    starting: i64,
    /// Its jobs waiting (queued or waiting for a retry), the starting ones
    /// among them.
    waiting: i64,
}

impl From<TenantCap> for TenantView {
    fn from(tenant: TenantCap) -> Self {
        TenantView {
            tenant: tenant.tenant,
            override_max_running: tenant.override_max_running,
            max_running: tenant.max_running,
            overrides: tenant.overrides.into(),
            limits: tenant.limits.into(),
            running: tenant.running,
            starting: tenant.starting,
            waiting: tenant.waiting,
        }
    }
}

/// A queue's tenant caps.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TenantCapsView {
    queue: String,
    /// The cap of every tenant without one of its own (absent: none).
    default_max_running: Option<i32>,
    /// Every limit of the tenants without overrides.
    defaults: TenantLimitsBody,
    /// Tenants with limits of their own, or that have run under a cap.
    tenants: Vec<TenantView>,
}

impl From<TenantCaps> for TenantCapsView {
    fn from(caps: TenantCaps) -> Self {
        TenantCapsView {
            queue: caps.queue,
            default_max_running: caps.default_max_running,
            defaults: caps.defaults.into(),
            tenants: caps.tenants.into_iter().map(Into::into).collect(),
        }
    }
}

pub(crate) async fn caps_of(
    state: &ApiState,
    queue: &str,
) -> Result<Json<TenantCapsView>, ApiError> {
    Ok(Json(
        jobwire_core::tenant_caps(&state.pool, queue).await?.into(),
    ))
}

/// A queue's tenant caps, and each capped tenant's running and waiting jobs.
#[utoipa::path(
    get,
    path = "/queues/{name}/tenants",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "OK", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn list_tenants(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<TenantCapsView>, ApiError> {
    caps_of(&state, &queue).await
}

/// Cap every tenant of a queue: at most `maxRunning` of one tenant's jobs
/// run at once, across every worker and both paths.
#[utoipa::path(
    put,
    path = "/queues/{name}/tenant-cap",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    request_body = CapRequest,
    responses(
        (status = 200, description = "The caps now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_FIELD: a bad body (`field` names it); MALFORMED_JSON; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        BodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn put_default_cap(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<CapRequest>,
) -> Result<Json<TenantCapsView>, ApiError> {
    set_cap(&token, &state, &queue, None, Some(request.max_running)).await
}

/// Remove a queue's default tenant cap (overrides stay).
#[utoipa::path(
    delete,
    path = "/queues/{name}/tenant-cap",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "The caps now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn delete_default_cap(
    Admin(token): Admin,
    State(state): State<ApiState>,
    QueuePath(queue): QueuePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<TenantCapsView>, ApiError> {
    set_cap(&token, &state, &queue, None, None).await
}

/// Give one tenant of a queue limits of its own, replacing the ones it
/// had: running jobs, waiting jobs, enqueue rate (a limit left out falls
/// back to the queue's default; at least one is needed — DELETE removes
/// them all).
#[utoipa::path(
    put,
    path = "/queues/{name}/tenants/{tenant}",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters"), ("tenant" = String, Path, description = "The tenant: 1 to 255 bytes, not blank, no control characters")),
    request_body = TenantLimitsBody,
    responses(
        (status = 200, description = "The caps now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_FIELD: a bad tenant or body (`field` names it), or no limit at all (`maxRunning`); MALFORMED_JSON; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        BodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn put_tenant_cap(
    Admin(token): Admin,
    State(state): State<ApiState>,
    TenantPath(queue, tenant): TenantPath,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<TenantLimitsBody>,
) -> Result<Json<TenantCapsView>, ApiError> {
    let limits = jobwire_core::TenantLimits::from(request);
    if limits.is_empty() {
        return Err(ApiError::invalid_field(
            "maxRunning",
            "give at least one of maxRunning, maxQueued, enqueueRate (DELETE removes the override)",
        ));
    }
    jobwire_core::set_tenant_limits(&state.pool, &queue, Some(&tenant), &limits).await?;
    tracing::info!(actor = %token.name, %queue, %tenant, ?limits, "tenant limits changed");
    caps_of(&state, &queue).await
}

/// Remove one tenant's own limits: it falls back to the queue's defaults.
#[utoipa::path(
    delete,
    path = "/queues/{name}/tenants/{tenant}",
    tag = "tenants",
    params(("name" = String, Path, description = "The queue: 1 to 255 bytes, not blank, no control characters"), ("tenant" = String, Path, description = "The tenant: 1 to 255 bytes, not blank, no control characters")),
    responses(
        (status = 200, description = "The caps now", body = TenantCapsView),
        (status = 400, description = "INVALID_QUEUE: a bad queue name; INVALID_FIELD: a bad tenant; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn delete_tenant_cap(
    Admin(token): Admin,
    State(state): State<ApiState>,
    TenantPath(queue, tenant): TenantPath,
    _: QueryParams<NoQuery>,
) -> Result<Json<TenantCapsView>, ApiError> {
    jobwire_core::set_tenant_limits(
        &state.pool,
        &queue,
        Some(&tenant),
        &jobwire_core::TenantLimits::default(),
    )
    .await?;
    tracing::info!(actor = %token.name, %queue, %tenant, "tenant limits removed");
    caps_of(&state, &queue).await
}

async fn set_cap(
    token: &jobwire_core::ApiToken,
    state: &ApiState,
    queue: &str,
    tenant: Option<&str>,
    max_running: Option<u32>,
) -> Result<Json<TenantCapsView>, ApiError> {
    jobwire_core::set_tenant_cap(&state.pool, queue, tenant, max_running).await?;
    tracing::info!(actor = %token.name, %queue, ?tenant, ?max_running, "tenant cap changed");
    caps_of(state, queue).await
}
