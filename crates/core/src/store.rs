//! The fenced job store: every SQL statement that moves a job, one per file in
//! `crates/core/sql/`, each a single round trip.
//!
//! Functions take any sqlx executor (`&PgPool`, `&mut PgConnection`,
//! `&mut Transaction`) so they run inside the caller's transaction; the few
//! that may need a second statement (dedup races, error diagnosis) take an
//! [`Acquire`] instead.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::{Acquire, PgConnection, PgExecutor, Postgres};
use uuid::Uuid;

use crate::{
    ClaimMiss, ClaimedJob, DeadLetterGroup, Dispatch, EnqueuedJob, Error, FinishOutcome,
    FinishResult, HeartbeatResult, JobState, JobStatus, Lease, LeaseGeneration, NewJob,
    RequestCancelOutcome, Result,
};

/// The LISTEN/NOTIFY channel PostgreSQL-path workers listen on. The payload of
/// each notification is the queue that has new claimable work.
pub const WAKE_CHANNEL: &str = "jobwire_jobs";

/// Default payload limit: payloads carry ids, not objects.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// Longest job type, queue name or dedup key accepted.
const MAX_NAME_LEN: usize = 255;
const MAX_DEDUP_KEY_LEN: usize = 1024;
/// How often a batch enqueue re-reads keys that a concurrent transaction
/// committed while it ran, before giving up with [`Error::DedupContention`].
const DEDUP_RESOLVE_ROUNDS: usize = 3;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Enqueue with explicit limits. [`enqueue`] and [`enqueue_many`] use the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueuer {
    /// Largest accepted payload, serialized, in bytes.
    pub max_payload_bytes: usize,
}

impl Default for Enqueuer {
    fn default() -> Self {
        Enqueuer {
            max_payload_bytes: MAX_PAYLOAD_BYTES,
        }
    }
}

/// Columns of a validated batch, ready to bind as arrays.
#[derive(Default)]
struct EnqueueColumns {
    job_ids: Vec<Uuid>,
    queues: Vec<String>,
    job_types: Vec<String>,
    priorities: Vec<i16>,
    payloads: Vec<Value>,
    max_attempts: Vec<i32>,
    run_ats: Vec<Option<DateTime<Utc>>>,
    delays_ms: Vec<Option<i64>>,
    dedup_keys: Vec<Option<String>>,
}

#[derive(sqlx::FromRow)]
struct EnqueueRow {
    ord: i64,
    job_id: Option<Uuid>,
    duplicate: bool,
    state: Option<String>,
    run_after: Option<DateTime<Utc>>,
}

impl Enqueuer {
    /// Check a job before anything is written.
    pub fn validate(&self, job: &NewJob) -> Result<()> {
        fn name(field: &'static str, value: &str) -> Result<()> {
            if value.trim().is_empty() {
                return Err(Error::InvalidJob {
                    field,
                    reason: "must not be empty".into(),
                });
            }
            if value.len() > MAX_NAME_LEN {
                return Err(Error::InvalidJob {
                    field,
                    reason: format!("longer than {MAX_NAME_LEN} bytes"),
                });
            }
            Ok(())
        }
        name("job_type", &job.job_type)?;
        name("queue", &job.queue)?;
        if job.max_attempts < 1 {
            return Err(Error::InvalidJob {
                field: "max_attempts",
                reason: format!("must be at least 1, got {}", job.max_attempts),
            });
        }
        if job.run_at.is_some() && job.delay.is_some() {
            return Err(Error::InvalidJob {
                field: "delay",
                reason: "give run_at or delay, not both".into(),
            });
        }
        if let Some(delay) = job.delay
            && delay < chrono::TimeDelta::zero()
        {
            return Err(Error::InvalidJob {
                field: "delay",
                reason: format!("must not be negative, got {} ms", delay.num_milliseconds()),
            });
        }
        if let Some(key) = &job.dedup_key
            && (key.is_empty() || key.len() > MAX_DEDUP_KEY_LEN)
        {
            return Err(Error::InvalidJob {
                field: "dedup_key",
                reason: format!("must be 1 to {MAX_DEDUP_KEY_LEN} bytes"),
            });
        }
        let size = serde_json::to_vec(&job.payload)
            .map_err(|err| Error::InvalidJob {
                field: "payload",
                reason: err.to_string(),
            })?
            .len();
        if size > self.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                size,
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    /// Enqueue one job (see [`Enqueuer::enqueue_many`]).
    pub async fn enqueue<'a, A>(&self, conn: A, job: &NewJob) -> Result<EnqueuedJob>
    where
        A: Acquire<'a, Database = Postgres>,
    {
        let mut enqueued = self.enqueue_many(conn, std::slice::from_ref(job)).await?;
        Ok(enqueued.remove(0))
    }

    /// Enqueue many jobs in one statement, inside the caller's transaction
    /// when given one. The job rows and, for broker-dispatched queues, their
    /// wake-up outbox rows are written together (by the schema's trigger):
    /// rollback loses both, commit keeps both. Results come back in input order.
    /// A job whose dedup key is already held comes back as that job with
    /// `duplicate = true`. Every job is validated before anything is written.
    pub async fn enqueue_many<'a, A>(&self, conn: A, jobs: &[NewJob]) -> Result<Vec<EnqueuedJob>>
    where
        A: Acquire<'a, Database = Postgres>,
    {
        let mut conn = conn.acquire().await?;
        self.enqueue_many_on(&mut conn, jobs).await
    }

    /// [`Enqueuer::enqueue`] on a connection or transaction
    /// (`&mut *tx`). Not generic, so its future is `Send` for any caller:
    /// use it in code spawned onto a multi-threaded runtime, where the
    /// generic form can trip the compiler's lifetime checks.
    pub async fn enqueue_on(&self, conn: &mut PgConnection, job: &NewJob) -> Result<EnqueuedJob> {
        let mut enqueued = self
            .enqueue_many_on(conn, std::slice::from_ref(job))
            .await?;
        Ok(enqueued.remove(0))
    }

    /// [`Enqueuer::enqueue_many`] on a connection or transaction; see
    /// [`Enqueuer::enqueue_on`].
    pub async fn enqueue_many_on(
        &self,
        conn: &mut PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<EnqueuedJob>> {
        for job in jobs {
            self.validate(job)?;
        }
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut results: Vec<Option<EnqueuedJob>> = vec![None; jobs.len()];
        // Indices into `jobs` still to write; after the first round only rows
        // whose key a concurrent transaction committed mid-statement remain.
        let mut pending: Vec<usize> = (0..jobs.len()).collect();
        let mut job_ids: Vec<Uuid> = jobs.iter().map(|_| Uuid::now_v7()).collect();
        for _ in 0..DEDUP_RESOLVE_ROUNDS {
            let mut columns = EnqueueColumns::default();
            for &index in &pending {
                let job = &jobs[index];
                columns.job_ids.push(job_ids[index]);
                columns.queues.push(job.queue.clone());
                columns.job_types.push(job.job_type.clone());
                columns.priorities.push(job.priority);
                columns.payloads.push(job.payload.clone());
                columns.max_attempts.push(job.max_attempts);
                columns.run_ats.push(job.run_at);
                columns
                    .delays_ms
                    .push(job.delay.map(|delay| delay.num_milliseconds()));
                columns.dedup_keys.push(job.dedup_key.clone());
            }
            let rows: Vec<EnqueueRow> = sqlx::query_as(include_str!("../sql/enqueue_many.sql"))
                .bind(&columns.job_ids)
                .bind(&columns.queues)
                .bind(&columns.job_types)
                .bind(&columns.priorities)
                .bind(&columns.payloads)
                .bind(&columns.max_attempts)
                .bind(&columns.run_ats)
                .bind(&columns.delays_ms)
                .bind(&columns.dedup_keys)
                .fetch_all(&mut *conn)
                .await?;
            let mut unresolved = Vec::new();
            for row in rows {
                let index = pending[usize::try_from(row.ord - 1).expect("ordinality from 1")];
                match (row.job_id, row.state, row.run_after) {
                    (Some(job_id), Some(state), Some(run_after)) => {
                        results[index] = Some(EnqueuedJob {
                            job_id,
                            duplicate: row.duplicate,
                            state: state.parse().map_err(|err: crate::ParseJobStateError| {
                                Error::Database(sqlx::Error::Decode(err.into()))
                            })?,
                            run_after,
                        });
                    }
                    _ => unresolved.push(index),
                }
            }
            if unresolved.is_empty() {
                return Ok(results.into_iter().map(|r| r.expect("resolved")).collect());
            }
            // A fresh id for the retry: the old one was never inserted.
            for &index in &unresolved {
                job_ids[index] = Uuid::now_v7();
            }
            pending = unresolved;
        }
        let job = &jobs[pending[0]];
        Err(Error::DedupContention {
            job_type: job.job_type.clone(),
            dedup_key: job.dedup_key.clone().unwrap_or_default(),
        })
    }
}

/// Enqueue one job with the default limits. See [`Enqueuer::enqueue_many`].
pub async fn enqueue<'a, A>(conn: A, job: &NewJob) -> Result<EnqueuedJob>
where
    A: Acquire<'a, Database = Postgres>,
{
    Enqueuer::default().enqueue(conn, job).await
}

/// Enqueue many jobs in one statement with the default limits.
/// See [`Enqueuer::enqueue_many`].
pub async fn enqueue_many<'a, A>(conn: A, jobs: &[NewJob]) -> Result<Vec<EnqueuedJob>>
where
    A: Acquire<'a, Database = Postgres>,
{
    Enqueuer::default().enqueue_many(conn, jobs).await
}

/// Columns of a freshly claimed row.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    job_id: Uuid,
    queue: String,
    job_type: String,
    priority: i16,
    payload: Value,
    attempt_count: i32,
    max_attempts: i32,
    run_after: DateTime<Utc>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_generation: LeaseGeneration,
    created_at: DateTime<Utc>,
}

impl ClaimedRow {
    fn into_claimed(self) -> Result<ClaimedJob> {
        Ok(ClaimedJob {
            lease: Lease {
                job_id: self.job_id,
                generation: self.lease_generation,
            },
            queue: self.queue,
            job_type: self.job_type,
            priority: self.priority,
            payload: self.payload,
            attempt: self.attempt_count,
            max_attempts: self.max_attempts,
            lease_expires_at: self.lease_expires_at.ok_or_else(|| {
                Error::Database(sqlx::Error::Protocol(
                    "claimed row without a lease expiry".into(),
                ))
            })?,
            created_at: self.created_at,
            run_after: self.run_after,
        })
    }
}

/// PostgreSQL-path claim: up to `limit` due jobs of `queue`, most urgent first
/// (priority, then run_after), skipping rows other claimers hold. Each claim
/// raises the job's generation and counts an attempt. A paused queue yields none.
pub async fn claim_batch<'c, E: PgExecutor<'c>>(
    executor: E,
    queue: &str,
    owner: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>> {
    let rows: Vec<ClaimedRow> = sqlx::query_as(include_str!("../sql/claim_batch.sql"))
        .bind(queue)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(owner)
        .bind(millis(lease))
        .fetch_all(executor)
        .await?;
    rows.into_iter().map(ClaimedRow::into_claimed).collect()
}

/// What a wake-up claim got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimByIds {
    /// Jobs now held by the caller.
    pub claimed: Vec<ClaimedJob>,
    /// Requested jobs that were not claimable, and why.
    pub missed: Vec<(Uuid, ClaimMiss)>,
}

#[derive(sqlx::FromRow)]
struct ClaimByIdRow {
    requested_job_id: Uuid,
    claimed: bool,
    seen_state: Option<String>,
    seen_run_after: Option<DateTime<Utc>>,
    queue: Option<String>,
    job_type: Option<String>,
    priority: Option<i16>,
    payload: Option<Value>,
    attempt_count: Option<i32>,
    max_attempts: Option<i32>,
    run_after: Option<DateTime<Utc>>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_generation: Option<LeaseGeneration>,
    created_at: Option<DateTime<Utc>>,
}

fn missing(column: &str) -> Error {
    Error::Database(sqlx::Error::Protocol(format!(
        "claimed row without {column}"
    )))
}

/// The fenced claim a broker wake-up uses: claim exactly the named jobs that
/// are QUEUED or RETRY_WAIT and due, in one statement, and say for each of the
/// others why it was not claimable (unknown, held, finished, early, contended).
/// Duplicate ids are claimed once.
pub async fn claim_by_ids<'c, E: PgExecutor<'c>>(
    executor: E,
    job_ids: &[Uuid],
    owner: &str,
    lease: Duration,
) -> Result<ClaimByIds> {
    if job_ids.is_empty() {
        return Ok(ClaimByIds::default());
    }
    let rows: Vec<ClaimByIdRow> = sqlx::query_as(include_str!("../sql/claim_by_ids.sql"))
        .bind(job_ids)
        .bind(owner)
        .bind(millis(lease))
        .fetch_all(executor)
        .await?;
    let mut outcome = ClaimByIds::default();
    for row in rows {
        if row.claimed {
            outcome.claimed.push(
                ClaimedRow {
                    job_id: row.requested_job_id,
                    queue: row.queue.ok_or_else(|| missing("queue"))?,
                    job_type: row.job_type.ok_or_else(|| missing("job_type"))?,
                    priority: row.priority.ok_or_else(|| missing("priority"))?,
                    payload: row.payload.ok_or_else(|| missing("payload"))?,
                    attempt_count: row.attempt_count.ok_or_else(|| missing("attempt_count"))?,
                    max_attempts: row.max_attempts.ok_or_else(|| missing("max_attempts"))?,
                    run_after: row.run_after.ok_or_else(|| missing("run_after"))?,
                    lease_expires_at: row.lease_expires_at,
                    lease_generation: row
                        .lease_generation
                        .ok_or_else(|| missing("lease_generation"))?,
                    created_at: row.created_at.ok_or_else(|| missing("created_at"))?,
                }
                .into_claimed()?,
            );
            continue;
        }
        let miss = match row.seen_state.as_deref().map(str::parse::<JobState>) {
            None => ClaimMiss::Unknown,
            Some(Err(err)) => return Err(Error::Database(sqlx::Error::Decode(err.into()))),
            Some(Ok(state)) if state.is_held() => ClaimMiss::Held,
            Some(Ok(state)) if state.is_terminal() => ClaimMiss::Finished { state },
            Some(Ok(_)) => match row.seen_run_after {
                Some(run_after) if run_after > Utc::now() => ClaimMiss::NotDue { run_after },
                _ => ClaimMiss::Contended,
            },
        };
        outcome.missed.push((row.requested_job_id, miss));
    }
    Ok(outcome)
}

#[derive(sqlx::FromRow)]
struct HeartbeatRow {
    job_id: Uuid,
    state: String,
    lease_expires_at: DateTime<Utc>,
}

/// Renew many leases held by `owner` in one statement, each fenced by its
/// generation. Results come back in input order; a lease that was lost is
/// [`HeartbeatResult::Fenced`]. `cancel_requested` tells the worker an
/// operator asked to stop the job.
pub async fn heartbeat_many<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    leases: &[Lease],
    lease: Duration,
) -> Result<Vec<HeartbeatResult>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let job_ids: Vec<Uuid> = leases.iter().map(|l| l.job_id).collect();
    let generations: Vec<i64> = leases.iter().map(|l| l.generation.0).collect();
    let rows: Vec<HeartbeatRow> = sqlx::query_as(include_str!("../sql/heartbeat_many.sql"))
        .bind(&job_ids)
        .bind(&generations)
        .bind(owner)
        .bind(millis(lease))
        .fetch_all(executor)
        .await?;
    let mut renewed: HashMap<Uuid, HeartbeatRow> =
        rows.into_iter().map(|row| (row.job_id, row)).collect();
    Ok(leases
        .iter()
        .map(|lease| match renewed.remove(&lease.job_id) {
            Some(row) => HeartbeatResult::Held {
                job_id: row.job_id,
                cancel_requested: row.state == JobState::CancelRequested.as_str(),
                lease_expires_at: row.lease_expires_at,
            },
            None => HeartbeatResult::Fenced {
                job_id: lease.job_id,
            },
        })
        .collect())
}

/// Renew one lease; [`Error::Fenced`] when it was lost.
pub async fn heartbeat<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    held: Lease,
    lease: Duration,
) -> Result<HeartbeatResult> {
    let mut results = heartbeat_many(executor, owner, &[held], lease).await?;
    match results.remove(0) {
        HeartbeatResult::Fenced { .. } => Err(fenced(owner, held)),
        held => Ok(held),
    }
}

fn fenced(owner: &str, lease: Lease) -> Error {
    Error::Fenced {
        job_id: lease.job_id,
        owner: owner.to_owned(),
        generation: lease.generation,
    }
}

#[derive(sqlx::FromRow)]
struct FinishRow {
    job_id: Uuid,
    state: String,
    run_after: DateTime<Utc>,
}

/// Record many attempt outcomes of leases held by `owner` in one statement,
/// each fenced by its generation (see `sql/finish_many.sql` for the state
/// each outcome leads to). Results come back in input order.
pub async fn finish_many<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    reports: &[(Lease, FinishOutcome)],
) -> Result<Vec<FinishResult>> {
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let mut job_ids = Vec::with_capacity(reports.len());
    let mut generations = Vec::with_capacity(reports.len());
    let mut kinds = Vec::with_capacity(reports.len());
    let mut delays = Vec::with_capacity(reports.len());
    let mut codes: Vec<Option<&str>> = Vec::with_capacity(reports.len());
    let mut messages: Vec<Option<&str>> = Vec::with_capacity(reports.len());
    for (lease, outcome) in reports {
        job_ids.push(lease.job_id);
        generations.push(lease.generation.0);
        kinds.push(outcome.sql_kind());
        match outcome {
            FinishOutcome::Succeeded => {
                delays.push(0);
                codes.push(None);
                messages.push(None);
            }
            FinishOutcome::Retry {
                delay,
                code,
                message,
            } => {
                delays.push(millis(*delay));
                codes.push(Some(code));
                messages.push(Some(message));
            }
            FinishOutcome::Fail { code, message } => {
                delays.push(0);
                codes.push(Some(code));
                messages.push(Some(message));
            }
            FinishOutcome::CancelAcknowledged => {
                delays.push(0);
                codes.push(Some("CANCELLED"));
                messages.push(Some("cancelled while running, at an operator's request"));
            }
        }
    }
    let rows: Vec<FinishRow> = sqlx::query_as(include_str!("../sql/finish_many.sql"))
        .bind(&job_ids)
        .bind(&generations)
        .bind(&kinds)
        .bind(&delays)
        .bind(&codes)
        .bind(&messages)
        .bind(owner)
        .fetch_all(executor)
        .await?;
    let mut recorded: HashMap<Uuid, FinishRow> =
        rows.into_iter().map(|row| (row.job_id, row)).collect();
    reports
        .iter()
        .map(|(lease, _)| match recorded.remove(&lease.job_id) {
            Some(row) => Ok(FinishResult::Recorded {
                job_id: row.job_id,
                state: row
                    .state
                    .parse()
                    .map_err(|err: crate::ParseJobStateError| {
                        Error::Database(sqlx::Error::Decode(err.into()))
                    })?,
                run_after: row.run_after,
            }),
            None => Ok(FinishResult::Fenced {
                job_id: lease.job_id,
            }),
        })
        .collect()
}

async fn finish_one<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    lease: Lease,
    outcome: FinishOutcome,
) -> Result<JobState> {
    match finish_many(executor, owner, &[(lease, outcome)])
        .await?
        .remove(0)
    {
        FinishResult::Recorded { state, .. } => Ok(state),
        FinishResult::Fenced { .. } => Err(fenced(owner, lease)),
    }
}

/// Mark a held job SUCCEEDED; [`Error::Fenced`] when the lease was lost.
pub async fn complete<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    lease: Lease,
) -> Result<JobState> {
    finish_one(executor, owner, lease, FinishOutcome::Succeeded).await
}

/// Record a failed attempt: `retry_delay = Some(d)` makes it retryable
/// (RETRY_WAIT after `d`, FAILED once attempts are exhausted), `None` fatal
/// (FAILED now). Returns the new state; [`Error::Fenced`] when the lease was lost.
pub async fn fail<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    lease: Lease,
    retry_delay: Option<Duration>,
    code: &str,
    message: &str,
) -> Result<JobState> {
    let outcome = match retry_delay {
        Some(delay) => FinishOutcome::Retry {
            delay,
            code: code.to_owned(),
            message: message.to_owned(),
        },
        None => FinishOutcome::Fail {
            code: code.to_owned(),
            message: message.to_owned(),
        },
    };
    finish_one(executor, owner, lease, outcome).await
}

/// Acknowledge a cancel request (CANCEL_REQUESTED -> CANCELLED);
/// [`Error::Fenced`] when the lease was lost or no cancel was requested.
pub async fn acknowledge_cancel<'c, E: PgExecutor<'c>>(
    executor: E,
    owner: &str,
    lease: Lease,
) -> Result<JobState> {
    finish_one(executor, owner, lease, FinishOutcome::CancelAcknowledged).await
}

#[derive(sqlx::FromRow)]
struct CancelRow {
    before_state: String,
    after_state: Option<String>,
}

/// Cancel a job: QUEUED / RETRY_WAIT become CANCELLED at once, RUNNING becomes
/// CANCEL_REQUESTED (its worker cancels the handler at the next heartbeat).
/// A finished job is [`Error::AlreadyFinished`]; an unknown one [`Error::NotFound`].
pub async fn request_cancel<'a, A>(conn: A, job_id: Uuid) -> Result<RequestCancelOutcome>
where
    A: Acquire<'a, Database = Postgres>,
{
    let mut conn = conn.acquire().await?;
    let row: Option<CancelRow> = sqlx::query_as(include_str!("../sql/request_cancel.sql"))
        .bind(job_id)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else {
        // Not in the hot table: archived (finished) or unknown.
        let status = job_status(&mut *conn, job_id).await?;
        return Err(Error::AlreadyFinished {
            job_id,
            state: status.state,
        });
    };
    let before: JobState = parse_state(&row.before_state)?;
    match row.after_state.as_deref().map(parse_state).transpose()? {
        Some(JobState::Cancelled) => Ok(RequestCancelOutcome::Cancelled),
        Some(JobState::CancelRequested) => Ok(RequestCancelOutcome::CancelRequested),
        Some(other) => Err(Error::Database(sqlx::Error::Protocol(format!(
            "cancel moved job {job_id} to unexpected state {other}"
        )))),
        None if before == JobState::CancelRequested => Ok(RequestCancelOutcome::AlreadyRequested),
        None => Err(Error::AlreadyFinished {
            job_id,
            state: before,
        }),
    }
}

fn parse_state(value: &str) -> Result<JobState> {
    value
        .parse()
        .map_err(|err: crate::ParseJobStateError| Error::Database(sqlx::Error::Decode(err.into())))
}

#[derive(sqlx::FromRow)]
struct SweptRow {
    job_id: Uuid,
    state: String,
}

/// Return up to `limit` jobs whose lease expired: CANCEL_REQUESTED ->
/// CANCELLED, attempts exhausted -> FAILED, else RETRY_WAIT (due now) with
/// error code `LEASE_EXPIRED`. Safe with several sweepers at once.
pub async fn sweep_expired_leases<'c, E: PgExecutor<'c>>(
    executor: E,
    limit: usize,
) -> Result<Vec<(Uuid, JobState)>> {
    let rows: Vec<SweptRow> = sqlx::query_as(include_str!("../sql/sweep_expired_leases.sql"))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(executor)
        .await?;
    rows.into_iter()
        .map(|row| Ok((row.job_id, parse_state(&row.state)?)))
        .collect()
}

/// Which dead letters to replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayFilter {
    /// Only this job type.
    pub job_type: Option<String>,
    /// Only jobs whose last error has this code.
    pub error_code: Option<String>,
    /// Only jobs that failed at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// At most this many jobs per call.
    pub limit: i64,
}

impl Default for ReplayFilter {
    fn default() -> Self {
        ReplayFilter {
            job_type: None,
            error_code: None,
            since: None,
            limit: 1000,
        }
    }
}

/// Replay a group of dead-lettered (FAILED) jobs: back to QUEUED with their
/// attempts reset and a wake-up written, one `job_audit` row each, in one
/// statement. Returns the replayed ids.
pub async fn replay_dead<'c, E: PgExecutor<'c>>(
    executor: E,
    filter: &ReplayFilter,
    actor: &str,
    reason: &str,
) -> Result<Vec<Uuid>> {
    replay(executor, None, filter, actor, reason).await
}

async fn replay<'c, E: PgExecutor<'c>>(
    executor: E,
    job_id: Option<Uuid>,
    filter: &ReplayFilter,
    actor: &str,
    reason: &str,
) -> Result<Vec<Uuid>> {
    if actor.trim().is_empty() {
        return Err(Error::InvalidJob {
            field: "actor",
            reason: "a replay must name who asked for it".into(),
        });
    }
    Ok(sqlx::query_scalar(include_str!("../sql/replay_dead.sql"))
        .bind(job_id)
        .bind(&filter.job_type)
        .bind(&filter.error_code)
        .bind(filter.since)
        .bind(filter.limit)
        .bind(actor)
        .bind(reason)
        .fetch_all(executor)
        .await?)
}

/// Replay one dead-lettered job. [`Error::WrongState`] when it is not FAILED,
/// [`Error::NotFound`] when it does not exist.
pub async fn replay_dead_job<'a, A>(conn: A, job_id: Uuid, actor: &str, reason: &str) -> Result<()>
where
    A: Acquire<'a, Database = Postgres>,
{
    let mut conn = conn.acquire().await?;
    let filter = ReplayFilter {
        limit: 1,
        ..ReplayFilter::default()
    };
    let replayed = replay(&mut *conn, Some(job_id), &filter, actor, reason).await?;
    if replayed.is_empty() {
        let status = job_status(&mut *conn, job_id).await?;
        return Err(Error::WrongState {
            job_id,
            state: status.state,
            reason: "only FAILED jobs can be replayed",
        });
    }
    Ok(())
}

/// Move up to `limit` finished jobs into `jobs_history`: SUCCEEDED and
/// CANCELLED ones finished more than `keep_finished` ago, FAILED ones more
/// than `keep_failed` ago. Returns how many moved.
pub async fn archive_finished<'c, E: PgExecutor<'c>>(
    executor: E,
    keep_finished: Duration,
    keep_failed: Duration,
    limit: usize,
) -> Result<u64> {
    Ok(sqlx::query(include_str!("../sql/archive_finished.sql"))
        .bind(millis(keep_finished))
        .bind(millis(keep_failed))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(executor)
        .await?
        .rows_affected())
}

/// The public view of one job (hot table or history).
pub async fn job_status<'c, E: PgExecutor<'c>>(executor: E, job_id: Uuid) -> Result<JobStatus> {
    sqlx::query_as(include_str!("../sql/job_status.sql"))
        .bind(job_id)
        .fetch_optional(executor)
        .await?
        .ok_or(Error::NotFound(job_id))
}

/// Dead letters grouped by job type and error code, largest group first.
pub async fn dead_letter_groups<'c, E: PgExecutor<'c>>(
    executor: E,
) -> Result<Vec<DeadLetterGroup>> {
    Ok(
        sqlx::query_as(include_str!("../sql/dead_letter_groups.sql"))
            .fetch_all(executor)
            .await?,
    )
}

/// Declare how `queue` is dispatched. Takes effect for every job that becomes
/// claimable afterwards.
pub async fn set_queue_dispatch<'c, E: PgExecutor<'c>>(
    executor: E,
    queue: &str,
    dispatch: &Dispatch,
) -> Result<()> {
    let (kind, topic) = match dispatch {
        Dispatch::Postgres => ("postgres", None),
        Dispatch::Broker { topic } => ("broker", Some(topic.as_str())),
    };
    sqlx::query(include_str!("../sql/upsert_queue.sql"))
        .bind(queue)
        .bind(kind)
        .bind(topic)
        .execute(executor)
        .await?;
    Ok(())
}

/// Pause (no claims) or resume a queue. Enqueue keeps working while paused.
pub async fn set_queue_paused<'c, E: PgExecutor<'c>>(
    executor: E,
    queue: &str,
    paused: bool,
) -> Result<()> {
    sqlx::query(include_str!("../sql/set_queue_paused.sql"))
        .bind(queue)
        .bind(paused)
        .execute(executor)
        .await?;
    Ok(())
}

/// How `queue` is dispatched, as the database says (no row: PostgreSQL).
pub async fn queue_dispatch<'c, E: PgExecutor<'c>>(executor: E, queue: &str) -> Result<Dispatch> {
    let row: Option<(String, Option<String>)> =
        sqlx::query_as(include_str!("../sql/queue_dispatch.sql"))
            .bind(queue)
            .fetch_optional(executor)
            .await?;
    Ok(match row {
        Some((kind, Some(topic))) if kind == "broker" => Dispatch::Broker { topic },
        _ => Dispatch::Postgres,
    })
}

/// Re-wake up to `limit` jobs of broker-dispatched queues that have been due
/// and claimable, unchanged, for longer than `grace`: their wake-up was lost.
/// Writes a fresh outbox wake-up for each, in one statement; returns their ids.
pub async fn reconcile_wake_ups<'c, E: PgExecutor<'c>>(
    executor: E,
    grace: Duration,
    limit: usize,
) -> Result<Vec<Uuid>> {
    Ok(
        sqlx::query_scalar(include_str!("../sql/reconcile_wake_ups.sql"))
            .bind(millis(grace))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(executor)
            .await?,
    )
}

/// Outbox lag: how long the oldest due, unpublished outbox row has waited.
pub async fn outbox_lag<'c, E: PgExecutor<'c>>(executor: E) -> Result<Duration> {
    let millis: i64 = sqlx::query_scalar(include_str!("../sql/outbox_lag.sql"))
        .fetch_one(executor)
        .await?;
    Ok(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}
