//! `/schedules`: recurring schedules over HTTP, the same calls as
//! `jobwire schedule`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use jobwire_core::{MissedRuns, Schedule, ScheduleSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::ApiState;
use super::auth::{Admin, Reader};
use super::error::{ApiError, ErrorEnvelope, PayloadOrBodyRefused, Unavailable};
use super::extract::{JsonBody, NoQuery, QueryParams, SchedulePath};
use super::jobs::new_job;

/// A schedule to create or replace. `cron`, `timezone` and `type` are required.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PutScheduleRequest {
    /// 5 fields, 6 with seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    #[schema(example = "0 8 * * *")]
    cron: String,
    /// IANA time zone name, or `UTC`.
    #[schema(example = "Asia/Kolkata")]
    timezone: String,
    /// The job type each occurrence enqueues: 1 to 255 bytes, not blank,
    /// no control characters.
    #[serde(rename = "type")]
    #[schema(example = "send_daily_digest")]
    job_type: String,
    /// The job's payload: any JSON value, usually an object. Default (absent
    /// or `null`) `{}`.
    payload: Option<Value>,
    /// The job's queue: 1 to 255 bytes, not blank, no control characters.
    /// Default `default`.
    queue: Option<String>,
    /// The job's priority, lower first (-32768 to 32767). Default 0.
    #[schema(minimum = -32768, maximum = 32767)]
    priority: Option<i16>,
    /// The job's attempts before it is dead-lettered (at least 1). Default 25.
    #[schema(minimum = 1)]
    max_attempts: Option<i32>,
    /// Spread each occurrence's start over this many seconds (0 to 86400).
    /// Default 0.
    #[schema(example = 600, maximum = 86400)]
    jitter_seconds: Option<u32>,
    /// What happens to occurrences missed while no scheduler ran. Default
    /// `latest`.
    #[schema(value_type = Option<MissedPolicy>)]
    missed: Option<MissedRuns>,
    /// Most missed occurrences `all` enqueues at once, 1 to 10000 (default
    /// 100).
    #[schema(minimum = 1, maximum = 10000)]
    max_catch_up: Option<u32>,
    /// The tenant every occurrence's job works for: the queue's running cap
    /// for that tenant applies (enqueue limits do not refuse an
    /// occurrence). 1 to 255 bytes, not blank, no control characters.
    /// Default: none.
    #[schema(example = "acme")]
    tenant: Option<String>,
}

/// What a schedule does with occurrences missed while no scheduler ran:
/// `skip` (no job), `latest` (one job, for the most recent) or `all` (one
/// job each, the most recent `maxCatchUp`, oldest first).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "only describes `missed` in the OpenAPI document")]
enum MissedPolicy {
    Skip,
    Latest,
    All,
}

/// A schedule.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScheduleView {
    name: String,
    cron: String,
    timezone: String,
    #[serde(rename = "type")]
    job_type: String,
    queue: String,
    /// The job's payload: any JSON value, usually an object.
    payload: Value,
    #[schema(minimum = -32768, maximum = 32767)]
    priority: i16,
    max_attempts: i32,
    /// The tenant its jobs work for; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    jitter_seconds: i32,
    #[schema(value_type = MissedPolicy)]
    missed: String,
    max_catch_up: i32,
    paused: bool,
    /// The next nominal instant due (kept while paused; resuming restarts
    /// at the next occurrence after now).
    next_run_at: Option<DateTime<Utc>>,
    /// The next three nominal instants (UTC).
    next_occurrences: Vec<DateTime<Utc>>,
    /// Present when the stored cron or zone cannot be evaluated (written
    /// by hand, or by a version that accepted it): why. Such a schedule
    /// never fires; the scheduler pauses it when it comes due. Replace it
    /// with a `PUT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
    /// The nominal instant of the last occurrence fired.
    last_fired_for: Option<DateTime<Utc>>,
    /// When that occurrence was fired (its job enqueued).
    last_fired_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Schedule> for ScheduleView {
    fn from(schedule: Schedule) -> Self {
        // One schedule that cannot be evaluated must not hide the others
        // (`GET /schedules`) nor itself: it is shown with its problem, and
        // still once the scheduler has paused it.
        let problem = schedule.problem();
        let next_occurrences = schedule.upcoming(3).unwrap_or_default();
        ScheduleView {
            name: schedule.name,
            cron: schedule.cron,
            timezone: schedule.timezone,
            job_type: schedule.job_type,
            queue: schedule.queue,
            payload: schedule.payload,
            priority: schedule.priority,
            max_attempts: schedule.max_attempts,
            tenant: schedule.tenant,
            jitter_seconds: schedule.jitter_seconds,
            missed: schedule.missed,
            max_catch_up: schedule.max_catch_up,
            paused: schedule.paused,
            next_run_at: schedule.next_run_at,
            next_occurrences,
            problem,
            last_fired_for: schedule.last_fired_for,
            last_fired_at: schedule.last_fired_at,
            created_at: schedule.created_at,
            updated_at: schedule.updated_at,
        }
    }
}

/// Every schedule.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Schedules {
    schedules: Vec<ScheduleView>,
}

fn schedule_not_found(name: &str) -> ApiError {
    ApiError::NotFound {
        code: "SCHEDULE_NOT_FOUND",
        message: format!("No schedule {name:?}."),
    }
}

async fn read_schedule(state: &ApiState, name: &str) -> Result<ScheduleView, ApiError> {
    jobwire_core::get_schedule(&state.pool, name)
        .await?
        .map(ScheduleView::from)
        .ok_or_else(|| schedule_not_found(name))
}

/// Create (201) or replace (200) a schedule. A replacement with the same
/// cron and zone keeps its next occurrence; a new cron or zone restarts at
/// the next occurrence after now.
#[utoipa::path(
    put,
    path = "/schedules/{name}",
    tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name: 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit")),
    request_body = PutScheduleRequest,
    responses(
        (status = 201, description = "Created", body = ScheduleView),
        (status = 200, description = "Replaced", body = ScheduleView),
        (status = 400, description = "INVALID_FIELD: invalid cron, time zone, jitter, ... (`field` names it); MALFORMED_JSON; INVALID_INPUT; INVALID_SCHEDULE_NAME: a bad `{name}`; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        PayloadOrBodyRefused,
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn put_schedule(
    Admin(token): Admin,
    State(state): State<ApiState>,
    SchedulePath(name): SchedulePath,
    _: QueryParams<NoQuery>,
    JsonBody(request): JsonBody<PutScheduleRequest>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let mut job = new_job(
        request.job_type,
        request
            .payload
            .unwrap_or_else(|| Value::Object(Default::default())),
        request.queue,
        request.priority,
        request.max_attempts,
    );
    if let Some(tenant) = request.tenant {
        job = job.with_tenant(tenant);
    }
    let spec = ScheduleSpec {
        jitter_seconds: request.jitter_seconds.unwrap_or(0),
        missed: request.missed.unwrap_or_default(),
        max_catch_up: request.max_catch_up.unwrap_or(100),
        ..ScheduleSpec::new(&name, request.cron, request.timezone, job)
    };
    let created = jobwire_core::put_schedule(&state.pool, &spec).await?;
    tracing::info!(actor = %token.name, schedule = %name, created, "schedule put");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(read_schedule(&state, &name).await?)))
}

/// Every schedule, by name, with its next three fire times.
#[utoipa::path(
    get,
    path = "/schedules",
    tag = "schedules",
    responses(
        (status = 200, description = "OK", body = Schedules),
        (status = 400, description = "INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn list_schedules(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
) -> Result<Json<Schedules>, ApiError> {
    let schedules = jobwire_core::list_schedules(&state.pool)
        .await?
        .into_iter()
        .map(ScheduleView::from)
        .collect();
    Ok(Json(Schedules { schedules }))
}

/// One schedule.
#[utoipa::path(
    get,
    path = "/schedules/{name}",
    tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name: 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit")),
    responses(
        (status = 200, description = "OK", body = ScheduleView),
        (status = 400, description = "INVALID_SCHEDULE_NAME: a bad `{name}`; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "SCHEDULE_NOT_FOUND", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn get_schedule(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    SchedulePath(name): SchedulePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(read_schedule(&state, &name).await?))
}

/// Remove a schedule (the jobs it created stay).
#[utoipa::path(
    delete,
    path = "/schedules/{name}",
    tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name: 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "INVALID_SCHEDULE_NAME: a bad `{name}`; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "SCHEDULE_NOT_FOUND", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn delete_schedule(
    Admin(token): Admin,
    State(state): State<ApiState>,
    SchedulePath(name): SchedulePath,
    _: QueryParams<NoQuery>,
) -> Result<StatusCode, ApiError> {
    if !jobwire_core::delete_schedule(&state.pool, &name).await? {
        return Err(schedule_not_found(&name));
    }
    tracing::info!(actor = %token.name, schedule = %name, "schedule removed");
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    token: &jobwire_core::ApiToken,
    state: &ApiState,
    name: &str,
    paused: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    if !jobwire_core::set_schedule_paused(&state.pool, name, paused).await? {
        return Err(schedule_not_found(name));
    }
    tracing::info!(actor = %token.name, schedule = %name, paused, "schedule pause changed");
    Ok(Json(read_schedule(state, name).await?))
}

/// Pause a schedule: it fires nothing until resumed.
#[utoipa::path(
    post,
    path = "/schedules/{name}/pause",
    tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name: 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit")),
    responses(
        (status = 200, description = "OK", body = ScheduleView),
        (status = 400, description = "INVALID_SCHEDULE_NAME: a bad `{name}`; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "SCHEDULE_NOT_FOUND", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn pause_schedule(
    Admin(token): Admin,
    State(state): State<ApiState>,
    SchedulePath(name): SchedulePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&token, &state, &name, true).await
}

/// Resume a schedule from its next occurrence after now (what fell in the
/// pause is not caught up). A paused schedule whose cron has no
/// occurrence after now stays paused (400 INVALID_FIELD on `cron`).
#[utoipa::path(
    post,
    path = "/schedules/{name}/resume",
    tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name: 1 to 128 letters, digits and `. _ : -`, starting with a letter or digit")),
    responses(
        (status = 200, description = "OK", body = ScheduleView),
        (status = 400, description = "INVALID_SCHEDULE_NAME: a bad `{name}`; INVALID_QUERY: any query parameter; INVALID_FIELD (`field`: cron): no occurrence after now, the schedule stays paused", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "SCHEDULE_NOT_FOUND", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["admin"]))
)]
pub(crate) async fn resume_schedule(
    Admin(token): Admin,
    State(state): State<ApiState>,
    SchedulePath(name): SchedulePath,
    _: QueryParams<NoQuery>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&token, &state, &name, false).await
}
