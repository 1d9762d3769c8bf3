//! Operator cancel requests.

use sqlx::{Acquire, Postgres};
use uuid::Uuid;

use super::admin::job_status;
use crate::{Error, JobState, RequestCancelOutcome, Result};

#[derive(sqlx::FromRow)]
struct CancelRow {
    before_state: JobState,
    after_state: Option<JobState>,
}

/// Cancel a job: QUEUED / RETRY_WAIT become CANCELLED at once, RUNNING becomes
/// CANCEL_REQUESTED (its worker cancels the handler at the next heartbeat).
/// A finished job is [`Error::AlreadyFinished`]; an unknown one [`Error::NotFound`].
/// A change is recorded in `job_audit` with `actor` (who asked).
pub async fn request_cancel<'a, A>(
    conn: A,
    job_id: Uuid,
    actor: &str,
) -> Result<RequestCancelOutcome>
where
    A: Acquire<'a, Database = Postgres>,
{
    if actor.trim().is_empty() {
        return Err(Error::InvalidArgument {
            argument: "actor",
            reason: "a cancel must name who asked for it".into(),
        });
    }
    let mut conn = conn.acquire().await?;
    // The row is locked first, in a statement of its own, so the change
    // is decided on the version a concurrent claim or completion left
    // (request_cancel.sql says why).
    let mut tx = conn.begin().await?;
    sqlx::query(include_str!("../../sql/lock_job.sql"))
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
    let row: Option<CancelRow> = sqlx::query_as(include_str!("../../sql/request_cancel.sql"))
        .bind(job_id)
        .bind(actor)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    let Some(row) = row else {
        // Not in the hot table: archived (finished) or unknown.
        let status = job_status(&mut *conn, job_id).await?;
        return Err(Error::AlreadyFinished {
            job_id,
            state: status.state,
        });
    };
    let before = row.before_state;
    match row.after_state {
        Some(JobState::Cancelled) => Ok(RequestCancelOutcome::Cancelled),
        Some(JobState::CancelRequested) => Ok(RequestCancelOutcome::CancelRequested),
        Some(other) => Err(Error::Decode(format!(
            "cancel moved job {job_id} to unexpected state {other}"
        ))),
        None if before == JobState::CancelRequested => Ok(RequestCancelOutcome::AlreadyRequested),
        None => Err(Error::AlreadyFinished {
            job_id,
            state: before,
        }),
    }
}
