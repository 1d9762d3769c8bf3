//! Operator views and dead-letter replay: job status, dead-letter groups, replay.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Acquire, Connection, PgConnection, PgExecutor, PgPool, Postgres};
use uuid::Uuid;

use crate::{DeadLetterGroup, Error, JobStatus, Result};

/// Which dead letters to replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayFilter {
    /// Only this job type.
    pub job_type: Option<String>,
    /// Only jobs whose last error has this code.
    pub error_code: Option<String>,
    /// Only jobs that failed at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only jobs that failed at or before this time. A batched replay
    /// ([`replay_dead_in_batches`]) uses the database's clock at its start
    /// when this is unset or later, so asking again with the same `until`
    /// requeues nothing new.
    pub until: Option<DateTime<Utc>>,
    /// At most this many jobs per call.
    pub limit: i64,
}

impl Default for ReplayFilter {
    fn default() -> Self {
        ReplayFilter {
            job_type: None,
            error_code: None,
            since: None,
            until: None,
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
        return Err(Error::InvalidArgument {
            argument: "actor",
            reason: "a replay must name who asked for it".into(),
        });
    }
    Ok(
        sqlx::query_scalar(include_str!("../../sql/replay_dead.sql"))
            .bind(job_id)
            .bind(&filter.job_type)
            .bind(&filter.error_code)
            .bind(filter.since)
            .bind(filter.limit)
            .bind(actor)
            .bind(reason)
            .bind(filter.until)
            .fetch_all(executor)
            .await?,
    )
}

/// What a batched replay did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkReplay {
    /// Jobs requeued, each with its own `job_audit` row.
    pub requeued: u64,
    /// Statements (each its own short transaction) it took.
    pub batches: u32,
    /// The longest of them: the most time any row lock was held.
    pub longest_batch: Duration,
    /// The `until` bound it used: the filter's, or the database's clock at
    /// its start when the filter's is unset or later.
    pub until: DateTime<Utc>,
}

/// Replay every dead letter `filter` matches (`filter.limit` caps the total)
/// in batches of `batch_size`, each a statement of its own (committed on its
/// own), so a million matching rows never make one long transaction or hold
/// their locks for long. Each replay is audited as in [`replay_dead`]. Rows a
/// concurrent replay has locked are skipped, not waited for.
pub async fn replay_dead_in_batches(
    pool: &PgPool,
    filter: &ReplayFilter,
    batch_size: i64,
    actor: &str,
    reason: &str,
) -> Result<BulkReplay> {
    if batch_size < 1 {
        return Err(Error::InvalidArgument {
            argument: "batch_size",
            reason: format!("must be at least 1, got {batch_size}"),
        });
    }
    // Never later than the database's clock: a job this replay requeues
    // that fails again gets a `finished_at` after the replay's start, and
    // an `until` in the future would requeue it again in a later batch
    // (its side effects run again, its attempts reset), batch after batch.
    let now = super::database_now(pool).await?;
    let until = filter.until.map_or(now, |until| until.min(now));
    let mut report = BulkReplay {
        requeued: 0,
        batches: 0,
        longest_batch: Duration::ZERO,
        until,
    };
    let total = filter.limit.max(0);
    while (report.requeued as i64) < total {
        let batch = ReplayFilter {
            until: Some(until),
            limit: batch_size.min(total - report.requeued as i64),
            ..filter.clone()
        };
        let started = Instant::now();
        let replayed = replay(pool, None, &batch, actor, reason).await?;
        report.longest_batch = report.longest_batch.max(started.elapsed());
        report.batches += 1;
        report.requeued += replayed.len() as u64;
        if (replayed.len() as i64) < batch.limit {
            break;
        }
    }
    Ok(report)
}

/// [`replay_dead_job`], and the job as it is now, read in the replay's
/// transaction: a read after the commit could fail and report an error for
/// a replay that was made.
pub async fn replay_dead_job_and_read(
    pool: &PgPool,
    job_id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<JobStatus> {
    let mut tx = pool.begin().await?;
    replay_dead_job_on(&mut tx, job_id, actor, reason).await?;
    let status = job_status(&mut *tx, job_id).await?;
    tx.commit().await?;
    Ok(status)
}

/// Replay one dead-lettered job. [`Error::WrongState`] when it is not FAILED,
/// [`Error::NotFound`] when it does not exist.
pub async fn replay_dead_job<'a, A>(conn: A, job_id: Uuid, actor: &str, reason: &str) -> Result<()>
where
    A: Acquire<'a, Database = Postgres>,
{
    let mut conn = conn.acquire().await?;
    replay_dead_job_on(&mut conn, job_id, actor, reason).await
}

/// [`replay_dead_job`] on a connection (a transaction's too, whose
/// savepoint the replay's own transaction becomes).
async fn replay_dead_job_on(
    conn: &mut PgConnection,
    job_id: Uuid,
    actor: &str,
    reason: &str,
) -> Result<()> {
    let filter = ReplayFilter {
        limit: 1,
        ..ReplayFilter::default()
    };
    // The row is locked first, waiting for whoever holds it (the retention
    // pass archiving it, another replay): the replay statement skips
    // locked rows, as a group's replay must, and then found no FAILED job
    // here and said so about one that was only busy.
    let mut tx = Connection::begin(&mut *conn).await?;
    sqlx::query(include_str!("../../sql/lock_job.sql"))
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
    let replayed = replay(&mut *tx, Some(job_id), &filter, actor, reason).await?;
    tx.commit().await?;
    if replayed.is_empty() {
        let status = job_status(&mut *conn, job_id).await?;
        return Err(Error::WrongState {
            job_id,
            state: status.state,
            reason: if status.archived {
                "an archived job cannot be replayed (retention moved it to jobs_history)"
            } else {
                "only FAILED jobs can be replayed"
            },
        });
    }
    Ok(())
}

/// The public view of one job (hot table or history).
pub async fn job_status<'c, E: PgExecutor<'c>>(executor: E, job_id: Uuid) -> Result<JobStatus> {
    sqlx::query_as(include_str!("../../sql/job_status.sql"))
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
        sqlx::query_as(include_str!("../../sql/dead_letter_groups.sql"))
            .fetch_all(executor)
            .await?,
    )
}
