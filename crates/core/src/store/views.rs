//! Operator views over many jobs: a filtered, paged listing and the queues.

use sqlx::PgExecutor;

use crate::{JobFilter, JobStatus, QueueOverview, Result};

/// Up to `limit` jobs matching `filter`, newest first (hot table and history
/// together). For the next page, call again with `filter.before` set to the
/// last job's id.
pub async fn list_jobs<'c, E: PgExecutor<'c>>(
    executor: E,
    filter: &JobFilter,
    limit: i64,
) -> Result<Vec<JobStatus>> {
    Ok(sqlx::query_as(include_str!("../../sql/list_jobs.sql"))
        .bind(filter.state)
        .bind(&filter.queue)
        .bind(&filter.job_type)
        .bind(filter.before)
        .bind(limit.max(0))
        .fetch_all(executor)
        .await?)
}

/// Every queue (declared, or holding jobs): dispatch, pause, depth by state
/// and the age of its oldest runnable job.
pub async fn queue_overview<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<QueueOverview>> {
    Ok(sqlx::query_as(include_str!("../../sql/queue_overview.sql"))
        .fetch_all(executor)
        .await?)
}
