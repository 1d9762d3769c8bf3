//! Background upkeep: lease sweeping, archiving, lost wake-up repair and outbox lag.

use std::time::Duration;

use sqlx::PgExecutor;
use uuid::Uuid;

use super::millis;
use crate::{JobState, Result};

/// A job the sweeper returned from an expired lease.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SweptLease {
    /// The job.
    pub job_id: Uuid,
    /// The state it was given: RETRY_WAIT, FAILED or CANCELLED.
    pub state: JobState,
    /// Its queue.
    pub queue: String,
}

/// Return up to `limit` jobs whose lease expired: CANCEL_REQUESTED ->
/// CANCELLED, attempts exhausted -> FAILED, else RETRY_WAIT (due now) with
/// error code `LEASE_EXPIRED`. Safe with several sweepers at once.
pub async fn sweep_expired_leases<'c, E: PgExecutor<'c>>(
    executor: E,
    limit: usize,
) -> Result<Vec<SweptLease>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/sweep_expired_leases.sql"))
            .persistent(false)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(executor)
            .await?,
    )
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
    Ok(sqlx::query(include_str!("../../sql/archive_finished.sql"))
        .bind(millis(keep_finished))
        .bind(millis(keep_failed))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(executor)
        .await?
        .rows_affected())
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
        sqlx::query_scalar(include_str!("../../sql/reconcile_wake_ups.sql"))
            .persistent(false)
            .bind(millis(grace))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(executor)
            .await?,
    )
}

/// Outbox lag: how long the oldest due, unpublished outbox row has waited.
pub async fn outbox_lag<'c, E: PgExecutor<'c>>(executor: E) -> Result<Duration> {
    let millis: i64 = sqlx::query_scalar(include_str!("../../sql/outbox_lag.sql"))
        .fetch_one(executor)
        .await?;
    Ok(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}

/// A table beside `jobs` that grows with every job and is trimmed by age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SideTable {
    /// `jobs_history`: archived jobs, by `archived_at`.
    History,
    /// `job_effects`: effect keys, by `created_at`.
    Effects,
    /// `job_audit`: operator actions on jobs, by `created_at`.
    Audit,
    /// `job_outbox_dead`: outbox rows that could not be published, by `failed_at`.
    OutboxDead,
    /// `job_outbox_audit`: operator actions on outbox rows, by `created_at`.
    OutboxAudit,
    /// `job_enqueue_counts`: the tenant enqueue-rate counters, by
    /// `window_start` (a row counts for nothing two windows on).
    EnqueueCounts,
}

impl SideTable {
    /// Every side table.
    pub const ALL: [SideTable; 6] = [
        SideTable::History,
        SideTable::Effects,
        SideTable::Audit,
        SideTable::OutboxDead,
        SideTable::OutboxAudit,
        SideTable::EnqueueCounts,
    ];

    /// The table's name.
    pub fn table(self) -> &'static str {
        match self {
            SideTable::History => "jobs_history",
            SideTable::Effects => "job_effects",
            SideTable::Audit => "job_audit",
            SideTable::OutboxDead => "job_outbox_dead",
            SideTable::OutboxAudit => "job_outbox_audit",
            SideTable::EnqueueCounts => "job_enqueue_counts",
        }
    }

    fn trim_statement(self) -> &'static str {
        match self {
            SideTable::History => include_str!("../../sql/trim_jobs_history.sql"),
            SideTable::Effects => include_str!("../../sql/trim_job_effects.sql"),
            SideTable::Audit => include_str!("../../sql/trim_job_audit.sql"),
            SideTable::OutboxDead => include_str!("../../sql/trim_job_outbox_dead.sql"),
            SideTable::OutboxAudit => include_str!("../../sql/trim_job_outbox_audit.sql"),
            SideTable::EnqueueCounts => include_str!("../../sql/trim_job_enqueue_counts.sql"),
        }
    }
}

/// Delete up to `limit` rows of `table` older than `older_than`, oldest
/// first, in one statement; returns how many went.
pub async fn trim_side_table<'c, E: PgExecutor<'c>>(
    executor: E,
    table: SideTable,
    older_than: Duration,
    limit: usize,
) -> Result<u64> {
    let done = sqlx::query(table.trim_statement())
        .bind(millis(older_than))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .execute(executor)
        .await?;
    Ok(done.rows_affected())
}
