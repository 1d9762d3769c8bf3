//! Jobs: wait for them to reach a state, expire a lease, count a job's
//! wake-ups, enqueue many at once. The table is the truth; polling it is
//! how an operator would check.

use std::time::Duration;

use anyhow::{Result, bail};
use jobwire_core::{JobState, JobStatus};
use sqlx::PgPool;
use uuid::Uuid;

/// Poll the table until `job_id` satisfies `done`, or fail after `timeout`.
/// (The table is the truth; polling it is how an operator would check.)
pub async fn wait_for_job(
    pool: &PgPool,
    job_id: Uuid,
    timeout: Duration,
    done: impl Fn(&JobStatus) -> bool,
) -> Result<JobStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let status = jobwire_core::job_status(pool, job_id).await?;
        if done(&status) {
            return Ok(status);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("job {job_id} did not reach the expected state within {timeout:?}: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `job_id` is in `state`.
pub async fn wait_for_state(
    pool: &PgPool,
    job_id: Uuid,
    state: JobState,
    timeout: Duration,
) -> Result<JobStatus> {
    wait_for_job(pool, job_id, timeout, |status| status.state == state).await
}

/// Wait until every job in `ids` is terminal.
pub async fn wait_for_all_finished(pool: &PgPool, ids: &[Uuid], timeout: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let unfinished: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND finished_at IS NULL",
        )
        .bind(ids)
        .fetch_one(pool)
        .await?;
        if unfinished == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            // Where the first few are, so that a failure says which way
            // they were lost.
            let stuck: Vec<String> = sqlx::query_scalar(
                "SELECT format('%s %s tenant %s slot %s attempts %s', job_id, state,
                               coalesce(tenant, '-'), coalesce(tenant_slot::text, '-'),
                               attempt_count)
                 FROM jobs WHERE job_id = ANY($1) AND finished_at IS NULL
                 ORDER BY created_at LIMIT 5",
            )
            .bind(ids)
            .fetch_all(pool)
            .await?;
            bail!(
                "{unfinished} of {} jobs unfinished after {timeout:?}, among them: {}",
                ids.len(),
                stuck.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Make the job's lease run out now, as if its holder had gone silent for the
/// whole lease. Tests use it instead of sleeping through a lease.
pub async fn expire_lease(pool: &PgPool, job_id: Uuid) -> Result<()> {
    let changed = sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id = $1 AND lease_owner IS NOT NULL",
    )
    .bind(job_id)
    .execute(pool)
    .await?
    .rows_affected();
    if changed != 1 {
        bail!("job {job_id} holds no lease to expire");
    }
    Ok(())
}

/// Delete the job's wake-ups from the outbox, as a broker that lost them
/// would leave it (the relay had published them).
pub async fn lose_wake_ups(pool: &PgPool, job_id: Uuid) -> Result<()> {
    sqlx::query("DELETE FROM job_outbox WHERE message_key = $1")
        .bind(job_id.to_string())
        .execute(pool)
        .await?;
    Ok(())
}

/// Outbox rows whose payload names `job_id`.
pub async fn wake_ups_for(pool: &PgPool, job_id: Uuid) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM job_outbox WHERE payload->>'job_id' = $1::text")
            .bind(job_id)
            .fetch_one(pool)
            .await?,
    )
}

/// Enqueue `jobs` in one statement; their ids in order.
pub async fn enqueue_ids(pool: &PgPool, jobs: &[jobwire_core::NewJob]) -> Result<Vec<Uuid>> {
    Ok(jobwire_core::enqueue_many(pool, jobs)
        .await?
        .into_iter()
        .map(|job| job.job_id)
        .collect())
}
