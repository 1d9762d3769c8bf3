//! The lease lifecycle of a running job: claim, heartbeat and fenced finish.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Acquire, Connection, PgExecutor, Postgres};
use uuid::Uuid;

use jobwire_loop::storable_text;

use super::millis;
use super::outcome_text::{MAX_ERROR_CODE_BYTES, MAX_ERROR_MESSAGE_BYTES, MAX_RETRY_DELAY};
use crate::{
    ClaimMiss, ClaimedJob, Error, FinishOutcome, FinishResult, HeartbeatResult, JobState, Lease,
    LeaseGeneration, Result,
};

/// Columns of a freshly claimed row.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    job_id: Uuid,
    queue: String,
    job_type: String,
    priority: i16,
    /// As stored, in jsonb's text form: parsed here, per job.
    payload: String,
    attempt_count: i32,
    max_attempts: i32,
    run_after: DateTime<Utc>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_generation: LeaseGeneration,
    created_at: DateTime<Utc>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl ClaimedRow {
    fn into_claimed(self) -> Result<ClaimedJob> {
        // jsonb keeps numbers beyond a double's range and any depth of
        // nesting, which serde_json refuses: a job so written (through the
        // SQL enqueue, or by hand) is claimed with its payload unread, for
        // the worker to fail, instead of failing the whole claim and
        // leaving every job it took RUNNING until its lease lapsed.
        let (payload, unreadable_payload) = match serde_json::from_str(&self.payload) {
            Ok(payload) => (payload, None),
            Err(err) => (Value::Null, Some(err.to_string())),
        };
        Ok(ClaimedJob {
            lease: Lease {
                job_id: self.job_id,
                generation: self.lease_generation,
            },
            queue: self.queue,
            job_type: self.job_type,
            priority: self.priority,
            payload,
            unreadable_payload,
            attempt: self.attempt_count,
            max_attempts: self.max_attempts,
            lease_expires_at: self
                .lease_expires_at
                .ok_or_else(|| missing("a lease expiry"))?,
            created_at: self.created_at,
            run_after: self.run_after,
            // The table's CHECK keeps a stored traceparent well formed.
            trace_context: self.traceparent.map(|traceparent| crate::TraceContext {
                traceparent,
                tracestate: self.tracestate,
            }),
        })
    }
}

/// PostgreSQL-path claim: up to `limit` due jobs of `queue`, most urgent first
/// (priority, then run_after), skipping rows other claimers hold. Each claim
/// raises the job's generation and counts an attempt. A paused queue yields
/// none. On a queue with tenant caps, tenants take turns and a capped
/// tenant's jobs start only into its free slots (docs/tenants.md), taken
/// in statements of at most 100 for as long as each fills.
pub async fn claim_batch<'c, A: Acquire<'c, Database = Postgres>>(
    conn: A,
    queue: &str,
    owner: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>> {
    claim_due_for(conn, queue, Duration::ZERO, owner, limit, lease).await
}

/// The broker path's safety net: claim, straight from the table, up to
/// `limit` jobs of `queue` that have been due for longer than `waited`
/// (measured from `run_after`, which the reconciler does not touch) — jobs
/// whose wake-ups the broker path lost or delayed. Same statement, order,
/// fencing, pause and tenant-cap rules as [`claim_batch`] (a capped
/// tenant's job starts with the slot it was handed, or a free one).
pub async fn claim_overdue<'c, A: Acquire<'c, Database = Postgres>>(
    conn: A,
    queue: &str,
    waited: Duration,
    owner: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>> {
    claim_due_for(conn, queue, waited, owner, limit, lease).await
}

/// Most jobs one capped claim statement takes (see [`claim_due_for`]).
const CAPPED_CLAIM_LIMIT: i64 = 100;

fn count<T>(rows: &[T]) -> i64 {
    i64::try_from(rows.len()).unwrap_or(i64::MAX)
}

async fn claim_due_for<'c, A: Acquire<'c, Database = Postgres>>(
    conn: A,
    queue: &str,
    due_for: Duration,
    owner: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<ClaimedJob>> {
    let mut conn = conn.acquire().await?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // claim_batch.sql and claim_capped.sql take the same parameters.
    let claim = |sql, limit: i64| {
        sqlx::query_as::<_, ClaimedRow>(sql)
            // Planned at each call (the store module's doc).
            .persistent(false)
            .bind(queue)
            .bind(limit)
            .bind(owner)
            .bind(millis(lease))
            .bind(millis(due_for))
    };
    // The plain claim refuses a queue with tenant caps, so only an empty
    // claim can be one; what this process learned of the queue's caps is
    // trusted for a moment (a capped queue goes straight to the capped
    // claim, an uncapped one's empty claim asks nothing more).
    let capped = super::tenants::known_capped(queue) == Some(true);
    let mut rows: Vec<ClaimedRow> = if capped {
        Vec::new()
    } else {
        claim(include_str!("../../sql/claim_batch.sql"), limit)
            .fetch_all(&mut *conn)
            .await?
    };
    if capped || (rows.is_empty() && super::tenants::is_capped(&mut conn, queue).await?) {
        // The capped claim locks up to its limit of jobs for each uncapped
        // tenant (and for the jobs without one) before it picks its limit
        // among them all, so a limit sized for a local queue would lock
        // hundreds of rows it does not take. A claim for more takes its
        // jobs in turns of at most that many, for as long as each turn
        // fills: a short claim tells the worker that the backlog ended, and
        // one capped at 100 of the 500 it asked for held a queue whose cap
        // never bound at a third of its uncapped drain (docs/benchmarks.md,
        // "A capped claim for more than 100 takes them in turns").
        let mut turn_rows = Vec::new();
        loop {
            let wanted = (limit - count(&turn_rows)).min(CAPPED_CLAIM_LIMIT);
            let turn = claim(include_str!("../../sql/claim_capped.sql"), wanted)
                .fetch_all(&mut *conn)
                .await;
            let turn = match turn {
                Ok(turn) => turn,
                // Outside a transaction the turns before were committed
                // (each a statement of its own): hand over what they claimed
                // rather than strand it until its lease lapses; the next
                // claim meets the failure again and reports it. Inside the
                // caller's transaction the failure aborted them all, so the
                // error is the answer. (A transaction opened with a bare
                // BEGIN instead of sqlx's `begin` is not seen here.)
                Err(err) if !turn_rows.is_empty() && !conn.is_in_transaction() => {
                    tracing::warn!(%queue, error = %err, claimed = turn_rows.len(),
                        "a capped claim's later turn failed; keeping what the earlier turns claimed");
                    break;
                }
                Err(err) => return Err(err.into()),
            };
            let filled = count(&turn) == wanted;
            turn_rows.extend(turn);
            if !filled || count(&turn_rows) >= limit {
                break;
            }
        }
        rows = turn_rows;
    }
    rows.into_iter().map(ClaimedRow::into_claimed).collect()
}

/// What a wake-up claim got.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ClaimByIds {
    /// Jobs now held by the caller.
    pub claimed: Vec<ClaimedJob>,
    /// Requested jobs that were not claimable, and why.
    pub missed: Vec<(Uuid, ClaimMiss)>,
    /// Requested jobs whose claim was never decided: the statement for
    /// jobs of capped tenants failed after the first one had claimed
    /// others (kept in `claimed`, which the caller must run). Their
    /// wake-ups should come again.
    pub undecided: Vec<Uuid>,
}

#[derive(sqlx::FromRow)]
struct ClaimByIdRow {
    requested_job_id: Uuid,
    claimed: bool,
    seen_state: Option<JobState>,
    seen_run_after: Option<DateTime<Utc>>,
    seen_queue: Option<String>,
    seen_paused: bool,
    seen_capped: bool,
    queue: Option<String>,
    job_type: Option<String>,
    priority: Option<i16>,
    payload: Option<String>,
    attempt_count: Option<i32>,
    max_attempts: Option<i32>,
    run_after: Option<DateTime<Utc>>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_generation: Option<LeaseGeneration>,
    created_at: Option<DateTime<Utc>>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

fn missing(column: &str) -> Error {
    Error::Decode(format!("claimed row without {column}"))
}

/// The fenced claim a broker wake-up uses: claim exactly the named jobs that
/// are QUEUED or RETRY_WAIT and due, belong to one of `queues` (the queues
/// the caller serves from the topic the wake-ups came on) and whose queue is
/// not paused, in one statement; say for each of the others why it was not
/// claimable (unknown, held, finished, another queue's, paused, early,
/// contended, or its tenant at its cap). Duplicate ids are claimed once.
///
/// Jobs of capped tenants are claimed by a second statement. If it fails
/// after the first claimed jobs outside a transaction, those claims have
/// committed: they are returned with the capped ids as
/// [`ClaimByIds::undecided`] rather than stranded until their leases lapse.
pub async fn claim_by_ids<'c, A: Acquire<'c, Database = Postgres>>(
    conn: A,
    job_ids: &[Uuid],
    queues: &[String],
    owner: &str,
    lease: Duration,
) -> Result<ClaimByIds> {
    if job_ids.is_empty() {
        return Ok(ClaimByIds::default());
    }
    let mut conn = conn.acquire().await?;
    let rows: Vec<ClaimByIdRow> = sqlx::query_as(include_str!("../../sql/claim_by_ids.sql"))
        .persistent(false)
        .bind(job_ids)
        .bind(owner)
        .bind(millis(lease))
        .bind(queues)
        .fetch_all(&mut *conn)
        .await?;
    let mut outcome = ClaimByIds::default();
    let mut capped = Vec::new();
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
                    traceparent: row.traceparent,
                    tracestate: row.tracestate,
                }
                .into_claimed()?,
            );
            continue;
        }
        let miss = match row.seen_state {
            None => ClaimMiss::Unknown,
            Some(state) if state.is_held() => ClaimMiss::Held,
            Some(state) if state.is_terminal() => ClaimMiss::Finished { state },
            Some(_) if row.seen_queue.as_ref().is_some_and(|q| !queues.contains(q)) => {
                ClaimMiss::OtherQueue {
                    queue: row.seen_queue.unwrap_or_default(),
                }
            }
            Some(_) if row.seen_paused => ClaimMiss::Paused,
            Some(_) => match row.seen_run_after {
                Some(run_after) if run_after > Utc::now() => ClaimMiss::NotDue { run_after },
                _ if row.seen_capped => {
                    capped.push(row.requested_job_id);
                    continue;
                }
                _ => ClaimMiss::Contended,
            },
        };
        outcome.missed.push((row.requested_job_id, miss));
    }
    if !capped.is_empty() {
        // Jobs of capped tenants: claimed only into their tenant's slots.
        let rows: Vec<ClaimedRow> = match sqlx::query_as(include_str!(
            "../../sql/claim_ids_capped.sql"
        ))
        .bind(&capped)
        .bind(owner)
        .bind(millis(lease))
        .bind(queues)
        .fetch_all(&mut *conn)
        .await
        {
            Ok(rows) => rows,
            // As in `claim_batch`'s turns: outside a transaction the first
            // statement's claims have committed, and an error would leave
            // them RUNNING with nobody to run them. (An answer that fails
            // to decode after this statement committed leaves its own
            // claims held until their leases lapse, as any lost reply
            // does.)
            Err(err) if !outcome.claimed.is_empty() && !conn.is_in_transaction() => {
                tracing::warn!(error = %err, claimed = outcome.claimed.len(), undecided = capped.len(),
                    "the wake-up claim of capped tenants' jobs failed; keeping what the first statement claimed");
                outcome.undecided = capped;
                return Ok(outcome);
            }
            Err(err) => return Err(err.into()),
        };
        for row in rows {
            capped.retain(|id| *id != row.job_id);
            outcome.claimed.push(row.into_claimed()?);
        }
        outcome
            .missed
            .extend(capped.into_iter().map(|id| (id, ClaimMiss::Capped)));
    }
    Ok(outcome)
}

#[derive(sqlx::FromRow)]
struct HeartbeatRow {
    job_id: Uuid,
    state: JobState,
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
    let rows: Vec<HeartbeatRow> = sqlx::query_as(include_str!("../../sql/heartbeat_many.sql"))
        .persistent(false)
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
                cancel_requested: row.state == JobState::CancelRequested,
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
    lease_generation: i64,
    state: JobState,
    run_after: DateTime<Utc>,
    cancel_latency_s: Option<f64>,
}

/// Record many attempt outcomes of leases held by `owner` in one statement,
/// each fenced by its generation (see jobwire_finish_many, migration
/// 20261207000005, for the state each outcome leads to). Results come back
/// in input order.
///
/// Error codes and messages are stored as the database can keep them: a NUL
/// character becomes U+FFFD, and a code over [`MAX_ERROR_CODE_BYTES`] or a
/// message over [`MAX_ERROR_MESSAGE_BYTES`] is cut, ending in "…". A retry
/// delay over [`MAX_RETRY_DELAY`] is that delay.
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
    let mut codes: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(reports.len());
    let mut messages: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(reports.len());
    let fixed = |text: &'static str| Some(Cow::Borrowed(text));
    for (lease, outcome) in reports {
        job_ids.push(lease.job_id);
        generations.push(lease.generation.0);
        kinds.push(outcome.sql_kind());
        match outcome {
            FinishOutcome::Succeeded | FinishOutcome::Returned => {
                delays.push(0);
                codes.push(None);
                messages.push(None);
            }
            FinishOutcome::Retry {
                delay,
                code,
                message,
            } => {
                delays.push(millis((*delay).min(MAX_RETRY_DELAY)));
                codes.push(Some(storable_text(code, MAX_ERROR_CODE_BYTES)));
                messages.push(Some(storable_text(message, MAX_ERROR_MESSAGE_BYTES)));
            }
            FinishOutcome::Fail { code, message } => {
                delays.push(0);
                codes.push(Some(storable_text(code, MAX_ERROR_CODE_BYTES)));
                messages.push(Some(storable_text(message, MAX_ERROR_MESSAGE_BYTES)));
            }
            FinishOutcome::CancelAcknowledged => {
                delays.push(0);
                codes.push(fixed("CANCELLED"));
                messages.push(fixed("cancelled while running, at an operator's request"));
            }
        }
    }
    let codes: Vec<Option<&str>> = codes.iter().map(|code| code.as_deref()).collect();
    let messages: Vec<Option<&str>> = messages.iter().map(|message| message.as_deref()).collect();
    // Prepared, unlike the claims: it only calls jobwire_finish_many, which
    // keeps the statement parsed and plans it at each call (the store
    // module's doc).
    let rows: Vec<FinishRow> = sqlx::query_as(include_str!("../../sql/finish_many.sql"))
        .bind(&job_ids)
        .bind(&generations)
        .bind(&kinds)
        .bind(&delays)
        .bind(&codes)
        .bind(&messages)
        .bind(owner)
        .fetch_all(executor)
        .await?;
    // By job and generation: two attempts of one job can share a batch (an
    // earlier one's outcome, fenced, beside the later one's).
    let mut recorded: HashMap<(Uuid, i64), FinishRow> = rows
        .into_iter()
        .map(|row| ((row.job_id, row.lease_generation), row))
        .collect();
    reports
        .iter()
        .map(
            |(lease, _)| match recorded.remove(&(lease.job_id, lease.generation.0)) {
                Some(row) => Ok(FinishResult::Recorded {
                    job_id: row.job_id,
                    state: row.state,
                    run_after: row.run_after,
                    cancel_latency: row
                        .cancel_latency_s
                        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok()),
                }),
                None => Ok(FinishResult::Fenced {
                    job_id: lease.job_id,
                }),
            },
        )
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
