//! Operator views and dead-letter replay: job status, dead-letter groups, replay.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{Acquire, PgExecutor, Postgres};
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
            .fetch_all(executor)
            .await?,
    )
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
