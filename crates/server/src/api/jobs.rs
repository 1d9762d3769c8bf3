//! `/jobs`: enqueue, read, list and cancel jobs. Each handler is a thin
//! translation onto the same `jobwire_core` calls the CLI makes.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use jobwire_core::{
    ApiToken, EnqueuedJob, JobFilter, JobState, JobStatus, NewJob, RequestCancelOutcome,
    TraceContext,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::ApiState;
use super::auth::{Reader, TenantReader, TenantWriter, Writer, sees_tenant};
use super::error::{ApiError, ErrorEnvelope, PayloadOrBodyRefused, Unavailable};
use super::extract::{JobIdPath, JsonBody, NoQuery, QueryParams};

/// A job to enqueue. Only `type` is required.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct EnqueueRequest {
    /// The job type: which handler runs it. 1 to 255 bytes, not blank, no
    /// control characters.
    #[serde(rename = "type")]
    #[schema(example = "generate_invoice_pdf")]
    job_type: String,
    /// The handler's input: any JSON value, usually an object; small, ids
    /// rather than objects. Default (absent or `null`) `{}`. At most
    /// `job_settings.max_payload_bytes` (413 over it); no string in it may
    /// hold NUL (U+0000).
    #[serde(default = "empty_object", deserialize_with = "null_as_empty_object")]
    #[schema(example = json!({"invoiceId": "inv_7731"}))]
    payload: Value,
    /// Earliest time to run, RFC 3339 with an offset (`Z` or `+05:30`),
    /// from the year 1 to before the year 10000. Default: now. Not with
    /// `delayMs` (both: 400 INVALID_FIELD).
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-11-01T00:05:00+05:30")]
    run_at: Option<String>,
    /// Run this many milliseconds after the database's clock at the
    /// enqueue, so that the client's clock does not matter. Not with
    /// `runAt` (both: 400 INVALID_FIELD); the job must be due before the
    /// year 10000.
    #[schema(example = 60000)]
    delay_ms: Option<u64>,
    /// Lower runs first within its queue (-32768 to 32767). Default 0.
    #[schema(example = 1, minimum = -32768, maximum = 32767)]
    priority: Option<i16>,
    /// The queue: 1 to 255 bytes, not blank, no control characters.
    /// Default `default`.
    #[schema(example = "default")]
    queue: Option<String>,
    /// Attempts before the job is dead-lettered (at least 1). Default 25.
    #[schema(example = 8, minimum = 1)]
    max_attempts: Option<i32>,
    /// Enqueueing the same type and key again returns the first job
    /// (`duplicate: true`) while it is in the hot table. 1 to 1024 bytes
    /// (less with a token bound to a tenant, which stores it with the
    /// tenant's name before it); without such a token, not beginning with
    /// `schedule:` (kept for schedules' occurrences).
    #[schema(example = "invoice-pdf:inv_7731")]
    idempotency_key: Option<String>,
    /// The customer the job works for: a queue may cap how many of one
    /// tenant's jobs run at once. 1 to 255 bytes, not blank, no control
    /// characters. Default: none (never capped); with a token bound to a
    /// tenant, that tenant (naming another is 403).
    #[schema(example = "acme")]
    tenant: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// An explicit `"payload": null` is how many clients write "no payload":
/// it means the default, not a JSON null for the handler to trip on.
fn null_as_empty_object<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Value, D::Error> {
    let payload = Value::deserialize(deserializer)?;
    Ok(if payload.is_null() {
        empty_object()
    } else {
        payload
    })
}

/// One job, as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobView {
    /// Its id (UUIDv7: time-ordered).
    job_id: Uuid,
    /// Its type.
    #[serde(rename = "type")]
    job_type: String,
    queue: String,
    /// The tenant it works for, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    /// Lower runs first within its queue (-32768 to 32767).
    #[schema(minimum = -32768, maximum = 32767)]
    priority: i16,
    /// QUEUED, RUNNING, RETRY_WAIT, SUCCEEDED, FAILED, CANCEL_REQUESTED or CANCELLED.
    #[schema(value_type = String, example = "QUEUED")]
    state: JobState,
    /// Attempts made so far (counted when an attempt starts).
    attempts: i32,
    max_attempts: i32,
    /// When it may next run (set while it waits: QUEUED or RETRY_WAIT).
    next_attempt_at: Option<DateTime<Utc>>,
    last_error_code: Option<String>,
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    /// The worker holding it, while RUNNING or CANCEL_REQUESTED.
    lease_owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    /// The fencing token: raised by every claim.
    lease_generation: i64,
    heartbeat_at: Option<DateTime<Utc>>,
    idempotency_key: Option<String>,
    /// The schedule whose occurrence created it.
    schedule_name: Option<String>,
    /// That occurrence's nominal instant.
    scheduled_for: Option<DateTime<Utc>>,
    /// When a lease on it last expired without a heartbeat (its worker died
    /// or froze) and the sweeper returned it.
    lease_expired_at: Option<DateTime<Utc>>,
    /// True once it has moved to history (finished and past retention).
    archived: bool,
    /// The handler's input: any JSON value, usually an object. A stored
    /// payload the server cannot read back (a number beyond a double's
    /// range, nesting deeper than 128 levels) is shown as a string holding
    /// the stored text.
    payload: Value,
}

impl From<JobStatus> for JobView {
    fn from(job: JobStatus) -> Self {
        JobView {
            job_id: job.job_id,
            job_type: job.job_type,
            queue: job.queue,
            tenant: job.tenant,
            priority: job.priority,
            state: job.state,
            attempts: job.attempt_count,
            max_attempts: job.max_attempts,
            next_attempt_at: job.state.is_claimable().then_some(job.run_after),
            last_error_code: job.last_error_code,
            last_error: job.last_error,
            created_at: job.created_at,
            updated_at: job.updated_at,
            finished_at: job.finished_at,
            lease_owner: job.lease_owner,
            lease_expires_at: job.lease_expires_at,
            lease_generation: job.lease_generation.0,
            heartbeat_at: job.heartbeat_at,
            idempotency_key: job.dedup_key,
            schedule_name: job.schedule_name,
            scheduled_for: job.scheduled_for,
            lease_expired_at: job.lease_expired_at,
            archived: job.archived,
            payload: job.payload,
        }
    }
}

impl JobView {
    /// The job as `token` sees it: a token bound to a tenant gets back the
    /// idempotency key it sent, not the tenant-scoped form it is stored in.
    fn seen_by(mut self, token: &ApiToken) -> Self {
        if let (Some(bound), Some(key)) = (&token.tenant, &self.idempotency_key)
            && let Some(sent) = key.strip_prefix(&tenant_scoped_key(bound, ""))
        {
            self.idempotency_key = Some(sent.to_owned());
        }
        self
    }

    /// A job the enqueue just wrote, without reading it back: what the
    /// caller sent, what the enqueue returned, and the insert's defaults
    /// (no attempt, no lease, no error). A test checks that it reads the
    /// same as `GET /jobs/{jobId}` right after.
    fn written(job: NewJob, enqueued: &EnqueuedJob) -> Self {
        JobView {
            job_id: enqueued.job_id,
            job_type: job.job_type,
            queue: job.queue,
            tenant: job.tenant,
            priority: job.priority,
            state: enqueued.state,
            attempts: 0,
            max_attempts: job.max_attempts,
            next_attempt_at: enqueued.state.is_claimable().then_some(enqueued.run_after),
            last_error_code: None,
            last_error: None,
            created_at: enqueued.created_at,
            updated_at: enqueued.created_at,
            finished_at: None,
            lease_owner: None,
            lease_expires_at: None,
            lease_generation: 0,
            heartbeat_at: None,
            idempotency_key: job.dedup_key,
            schedule_name: None,
            scheduled_for: None,
            lease_expired_at: None,
            archived: false,
            payload: job.payload,
        }
    }
}

/// The answer to an enqueue: the job, and whether it was already there.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EnqueueResponse {
    #[serde(flatten)]
    job: JobView,
    /// True when the idempotency key was already held: nothing was written
    /// and `jobId` is the existing job's.
    duplicate: bool,
}

/// A job from a request's fields, the library's defaults for those left out.
pub(crate) fn new_job(
    job_type: String,
    payload: Value,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<i32>,
) -> NewJob {
    let mut job = NewJob::new(job_type, payload);
    if let Some(queue) = queue {
        job = job.with_queue(queue);
    }
    if let Some(priority) = priority {
        job = job.with_priority(priority);
    }
    if let Some(max_attempts) = max_attempts {
        job = job.with_max_attempts(max_attempts);
    }
    job
}

/// The caller's W3C trace context, from its `traceparent` and `tracestate`
/// headers; a malformed one is a 400 naming the header.
fn trace_context(headers: &HeaderMap) -> Result<Option<TraceContext>, ApiError> {
    let text = |name: &'static str| -> Result<Option<&str>, ApiError> {
        headers
            .get(name)
            .map(|value| {
                value
                    .to_str()
                    .map_err(|_| ApiError::invalid_field(name, "not visible ASCII"))
            })
            .transpose()
    };
    let state = text("tracestate")?.filter(|state| !state.is_empty());
    match text("traceparent")? {
        Some(parent) => TraceContext::parse(parent, state)
            .map(Some)
            .map_err(|(field, reason)| ApiError::invalid_field(field, reason)),
        None if state.is_some() => Err(ApiError::invalid_field(
            "tracestate",
            "only with a traceparent",
        )),
        None => Ok(None),
    }
}

/// Parse an RFC 3339 time that carries its offset.
pub(crate) fn parse_time(field: &str, value: &str) -> Result<DateTime<Utc>, ApiError> {
    jobwire_core::parse_time(value).map_err(|reason| ApiError::invalid_field(field, reason))
}

/// Enqueue a job.
///
/// `runAt` and `delayMs` are exclusive (both: 400 INVALID_FIELD); a
/// `tracestate` header needs a `traceparent`.
#[utoipa::path(
    post,
    path = "/jobs",
    tag = "jobs",
    request_body = EnqueueRequest,
    params(
        ("traceparent" = Option<String>, Header, description = "W3C trace context of the caller's span: each attempt's span links to it. Malformed: 400 INVALID_FIELD naming it"),
        ("tracestate" = Option<String>, Header, description = "W3C vendor trace state: only with a traceparent, at most 512 bytes (else 400 INVALID_FIELD naming it)"),
    ),
    responses(
        (status = 201, description = "Enqueued", body = EnqueueResponse,
         headers(("Location" = String, description = "/jobs/{jobId}"))),
        (status = 200, description = "The idempotency key was already held: the existing job", body = EnqueueResponse),
        (status = 400, description = "MALFORMED_JSON, INVALID_FIELD (`field` names the field or header: runAt with delayMs, a bad traceparent or tracestate, ...), INVALID_INPUT, or INVALID_QUERY (any query parameter)", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this, or a token bound to a tenant named another tenant (FORBIDDEN)", body = ErrorEnvelope),
        (status = 409, description = "IDEMPOTENCY_KEY_TAKEN: a token bound to a tenant named a key held by a job it cannot see", body = ErrorEnvelope),
        PayloadOrBodyRefused,
        (status = 429, description = "An enqueue limit refused it, nothing written (QUEUE_FULL, RATE_LIMITED); retry after `Retry-After` seconds",
         body = ErrorEnvelope, headers(("Retry-After" = u64, description = "Seconds to wait before trying again"))),
        (status = 503, description = "DATABASE_UNAVAILABLE, DATABASE_BUSY or CONTENDED (concurrent enqueues kept taking this idempotency key): try again; SCHEMA_NOT_READY: run `jobwire migrate`", body = ErrorEnvelope),
    ),
    security(("bearer" = ["write"]))
)]
pub(crate) async fn enqueue_job(
    TenantWriter(token): TenantWriter,
    State(state): State<ApiState>,
    _: QueryParams<NoQuery>,
    request_headers: HeaderMap,
    JsonBody(request): JsonBody<EnqueueRequest>,
) -> Result<Response, ApiError> {
    let mut job = new_job(
        request.job_type,
        request.payload,
        request.queue,
        request.priority,
        request.max_attempts,
    );
    match (&request.run_at, request.delay_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_field(
                "delayMs",
                "give runAt or delayMs, not both",
            ));
        }
        (Some(run_at), None) => job = job.with_run_at(parse_time("runAt", run_at)?),
        (None, Some(delay_ms)) => {
            let delay = i64::try_from(delay_ms)
                .ok()
                .and_then(chrono::TimeDelta::try_milliseconds)
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "delayMs",
                        "must make the job due before the year 10000",
                    )
                })?;
            job = job.with_delay(delay);
        }
        (None, None) => {}
    }
    // A token bound to a tenant enqueues for that tenant: named or not,
    // and never for another.
    let tenant = match (&token.tenant, request.tenant) {
        (Some(bound), Some(asked)) if *bound != asked => {
            return Err(ApiError::Forbidden {
                message: format!(
                    "Token {:?} is bound to tenant {bound:?}; it cannot enqueue for tenant {asked:?}.",
                    token.name
                ),
            });
        }
        (Some(bound), _) => Some(bound.clone()),
        (None, asked) => asked,
    };
    if let Some(key) = request.idempotency_key {
        // Keys are unique per job type across the whole table: a bound
        // token's keys are its tenant's own, so that one tenant can neither
        // see another's job through a key nor take a key another will use.
        let key = match &token.tenant {
            Some(bound) => {
                // Checked as sent, before the tenant's name is added: an
                // empty key would otherwise pass as `tenant:…:` and make
                // every later empty key of its type a duplicate.
                let room = jobwire_core::MAX_DEDUP_KEY_LEN - tenant_scoped_key(bound, "").len();
                if key.is_empty() || key.len() > room {
                    return Err(ApiError::invalid_field(
                        "idempotencyKey",
                        format!(
                            "must be 1 to {room} bytes with a token bound to tenant {bound:?} (stored with the tenant's name, within {} bytes)",
                            jobwire_core::MAX_DEDUP_KEY_LEN
                        ),
                    ));
                }
                tenant_scoped_key(bound, &key)
            }
            None => key,
        };
        job = job.with_dedup_key(key);
    }
    if let Some(tenant) = tenant {
        job = job.with_tenant(tenant);
    }
    if let Some(trace) = trace_context(&request_headers)? {
        job = job.with_trace_context(trace);
    }
    if job.trace_context.is_none() {
        // Written by another task: the request's span is not current there.
        if let Some(trace) = jobwire_core::TraceContext::current() {
            job = job.with_trace_context(trace);
        }
    }
    // The request's size bounds how many jobs share its statement; a body
    // of unknown length counts as the largest one accepted.
    let bytes = request_headers
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse().ok())
        .unwrap_or(super::BODY_LIMIT_BYTES);
    let (job, enqueued) = state
        .enqueues
        .enqueue(job, bytes)
        .await
        .inspect_err(super::refusals::count_if_refused)?;
    if enqueued.duplicate {
        // The job that holds the key may have moved on since it was
        // written: read it.
        let status = jobwire_core::job_status(&state.pool, enqueued.job_id).await?;
        if !sees_tenant(&token, status.tenant.as_deref()) {
            // Only a producer not bound to a tenant could have written a key
            // of the scoped shape; still, the job is not this token's to see.
            return Err(ApiError::Conflict {
                code: "IDEMPOTENCY_KEY_TAKEN",
                message:
                    "This idempotency key is held by a job this token cannot see; use another key."
                        .into(),
            });
        }
        let body = Json(EnqueueResponse {
            job: JobView::from(status).seen_by(&token),
            duplicate: true,
        });
        return Ok((StatusCode::OK, body).into_response());
    }
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&format!("/jobs/{}", enqueued.job_id)) {
        headers.insert(header::LOCATION, location);
    }
    let body = Json(EnqueueResponse {
        job: JobView::written(job, &enqueued).seen_by(&token),
        duplicate: false,
    });
    Ok((StatusCode::CREATED, headers, body).into_response())
}

/// The idempotency key a token bound to `tenant` stores for `key`: the
/// tenant's length first, so no two (tenant, key) pairs read alike.
fn tenant_scoped_key(tenant: &str, key: &str) -> String {
    format!("tenant:{}:{tenant}:{key}", tenant.len())
}

/// Read one job (from the hot table or history).
#[utoipa::path(
    get,
    path = "/jobs/{jobId}",
    tag = "jobs",
    params(("jobId" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "OK", body = JobView),
        (status = 400, description = "INVALID_JOB_ID: not a UUID; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope),
        (status = 404, description = "JOB_NOT_FOUND", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn get_job(
    TenantReader(token): TenantReader,
    State(state): State<ApiState>,
    JobIdPath(job_id): JobIdPath,
    _: QueryParams<NoQuery>,
) -> Result<Json<JobView>, ApiError> {
    let job = jobwire_core::job_status(&state.pool, job_id).await?;
    // Another tenant's job is, to a tenant's token, no job at all.
    if !sees_tenant(&token, job.tenant.as_deref()) {
        return Err(ApiError::job_not_found(job_id));
    }
    Ok(Json(JobView::from(job).seen_by(&token)))
}

/// Filters and the page of a job listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListJobsQuery {
    /// Only jobs in this state (QUEUED, RUNNING, ..., CANCELLED).
    #[param(value_type = Option<JobStateName>, inline)]
    state: Option<String>,
    /// Only jobs of this queue.
    queue: Option<String>,
    /// Only jobs of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    job_type: Option<String>,
    /// Only jobs whose last error has this code (with `state=FAILED`: one
    /// dead-letter group).
    #[serde(rename = "errorCode")]
    #[param(rename = "errorCode")]
    error_code: Option<String>,
    /// Jobs per page, 1 to 500. Default 50.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// The `nextAfter` of the previous page: continue after that job.
    after: Option<Uuid>,
    /// Only jobs whose id starts with these hex digits (dashes allowed).
    #[serde(rename = "idPrefix")]
    #[param(rename = "idPrefix")]
    id_prefix: Option<String>,
    /// Only jobs of this tenant.
    tenant: Option<String>,
}

/// A job's state: the values `GET /jobs?state=` takes.
#[derive(ToSchema)]
#[schema(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code, reason = "only describes `state` in the OpenAPI document")]
enum JobStateName {
    Queued,
    Running,
    RetryWait,
    Succeeded,
    Failed,
    CancelRequested,
    Cancelled,
}

/// One page of jobs, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobPage {
    jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent on the last page. With a
    /// filter, a page reads at most 100,000 ids of each table, so a page may
    /// hold fewer jobs than `limit`, even none, and still have a next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<Uuid>,
}

const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

/// List jobs, newest first, filtered by state, queue, type, error code, tenant and id prefix. Pages are
/// keyset pages: pass the previous page's `nextAfter` as `after`, until it
/// is absent. A filtered page reads at most 100,000 ids of each table, so
/// it may be short (even empty) before the last page.
#[utoipa::path(
    get,
    path = "/jobs",
    tag = "jobs",
    params(ListJobsQuery),
    responses(
        (status = 200, description = "OK", body = JobPage),
        (status = 400, description = "INVALID_QUERY: a bad filter or limit, or a parameter not listed here (`field` names it)", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "A token bound to a tenant (FORBIDDEN)", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["read"]))
)]
pub(crate) async fn list_jobs(
    Reader(_token): Reader,
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ListJobsQuery>,
) -> Result<Json<JobPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid_query(
            "limit",
            format!("must be 1 to {MAX_PAGE}, got {limit}"),
        ));
    }
    let job_state = query
        .state
        .as_deref()
        .map(str::parse::<JobState>)
        .transpose()
        .map_err(|err| ApiError::invalid_query("state", err))?;
    if let Some(prefix) = &query.id_prefix
        && jobwire_core::store::id_prefix_range(prefix).is_none()
    {
        return Err(ApiError::invalid_query(
            "idPrefix",
            "hex digits of a job id (dashes allowed), at most 32",
        ));
    }
    if let Some(field) = blank_name_filter(&query.queue, &query.job_type, &query.tenant) {
        return Err(ApiError::invalid_query(field, "must not be blank"));
    }
    let filter = JobFilter {
        state: job_state,
        queue: query.queue,
        job_type: query.job_type,
        before: query.after,
        id_prefix: query.id_prefix,
        error_code: query.error_code,
        tenant: query.tenant,
    };
    let page = jobwire_core::list_jobs(&state.pool, &filter, limit).await?;
    Ok(Json(JobPage {
        jobs: page.jobs.into_iter().map(JobView::from).collect(),
        next_after: page.next_before,
    }))
}

/// Replay one FAILED job (a dead letter): QUEUED again with a fresh attempt
/// budget, due now, recorded in `job_audit` with the token's name.
#[utoipa::path(
    post,
    path = "/jobs/{jobId}/replay",
    tag = "jobs",
    params(("jobId" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Replayed: the job, QUEUED", body = JobView),
        (status = 400, description = "INVALID_JOB_ID: not a UUID; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "JOB_NOT_FOUND", body = ErrorEnvelope),
        (status = 409, description = "WRONG_STATE: only FAILED jobs are replayed", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["write"]))
)]
pub(crate) async fn replay_job(
    Writer(token): Writer,
    State(state): State<ApiState>,
    JobIdPath(job_id): JobIdPath,
    _: QueryParams<NoQuery>,
) -> Result<Json<JobView>, ApiError> {
    // The answer is read in the replay's transaction: a read after the
    // commit that failed would answer an error for a replay that was made
    // (and the client's retry would be told the job is not FAILED).
    let job = jobwire_core::replay_dead_job_and_read(
        &state.pool,
        job_id,
        &token.name,
        "replayed over the HTTP API",
    )
    .await?;
    Ok(Json(JobView::from(job)))
}

/// The answer to a cancel that took effect.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CancelResponse {
    job_id: Uuid,
    #[schema(value_type = String, example = "CANCELLED")]
    state: JobState,
}

/// Cancel a job. One that has not started is CANCELLED at once (200); a
/// running one is asked to stop (409 `JOB_RUNNING`: the request is recorded
/// as CANCEL_REQUESTED and its handler sees it at the next heartbeat).
#[utoipa::path(
    post,
    path = "/jobs/{jobId}/cancel",
    tag = "jobs",
    params(("jobId" = Uuid, Path, description = "The job's id")),
    responses(
        (status = 200, description = "Cancelled", body = CancelResponse),
        (status = 400, description = "INVALID_JOB_ID: not a UUID; INVALID_QUERY: any query parameter", body = ErrorEnvelope),
        (status = 401, description = "No live token (UNAUTHENTICATED)", body = ErrorEnvelope), (status = 403, description = "The token's scope does not allow this (FORBIDDEN)", body = ErrorEnvelope),
        (status = 404, description = "JOB_NOT_FOUND", body = ErrorEnvelope),
        (status = 409, description = "JOB_RUNNING (cancel requested) or JOB_FINISHED", body = ErrorEnvelope),
        Unavailable,
    ),
    security(("bearer" = ["write"]))
)]
pub(crate) async fn cancel_job(
    TenantWriter(token): TenantWriter,
    State(state): State<ApiState>,
    JobIdPath(job_id): JobIdPath,
    _: QueryParams<NoQuery>,
) -> Result<Json<CancelResponse>, ApiError> {
    if token.tenant.is_some() {
        let job = jobwire_core::job_status(&state.pool, job_id).await?;
        if !sees_tenant(&token, job.tenant.as_deref()) {
            return Err(ApiError::job_not_found(job_id));
        }
    }
    match jobwire_core::request_cancel(&state.pool, job_id, &token.name).await? {
        RequestCancelOutcome::Cancelled => Ok(Json(CancelResponse {
            job_id,
            state: JobState::Cancelled,
        })),
        RequestCancelOutcome::CancelRequested | RequestCancelOutcome::AlreadyRequested => {
            Err(ApiError::Conflict {
                code: "JOB_RUNNING",
                message: "Job is running; cancellation is cooperative.".into(),
            })
        }
    }
}

/// Which of a jobs list's name filters is blank, if any. A blank queue,
/// type or tenant matches no job (none is stored), yet its pages would walk
/// both tables to the end, each one empty: the API and the dashboard refuse
/// it. (A blank error code is one a handler may have recorded.)
pub(crate) fn blank_name_filter(
    queue: &Option<String>,
    job_type: &Option<String>,
    tenant: &Option<String>,
) -> Option<&'static str> {
    [("queue", queue), ("type", job_type), ("tenant", tenant)]
        .into_iter()
        .find(|(_, value)| {
            value
                .as_deref()
                .is_some_and(|value| value.trim().is_empty())
        })
        .map(|(field, _)| field)
}
