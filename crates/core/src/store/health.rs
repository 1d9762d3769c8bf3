//! What the database says about the platform's health: the reads behind the
//! metrics collector's gauges. Plain reads that take no row locks (never
//! SKIP LOCKED, which would hide the rows a stuck worker or relay holds).

use sqlx::PgExecutor;

use crate::Result;

/// A group of FAILED jobs as the metrics gauge shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FailedGroup {
    /// The job type; `None` for the row that sums every group beyond the
    /// largest ones.
    pub job_type: Option<String>,
    /// The last error code (empty when the job recorded none); `None` with
    /// `job_type`.
    pub error_code: Option<String>,
    /// FAILED jobs in the group.
    pub jobs: i64,
}

/// FAILED jobs by type and error code: the `top` largest groups, and one
/// more row (type and code `None`) summing all the others, so the number of
/// groups reported stays bounded.
pub async fn failed_groups_top<'c, E: PgExecutor<'c>>(
    executor: E,
    top: i64,
) -> Result<Vec<FailedGroup>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/failed_groups_top.sql"))
            .bind(top.max(0))
            .fetch_all(executor)
            .await?,
    )
}

/// The outbox, for its gauges.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutboxHealth {
    /// Rows not yet published.
    pub waiting: i64,
    /// Of those, rows due now.
    pub due: i64,
    /// Seconds the oldest due row has waited (0 when none is due).
    pub oldest_due_age_s: f64,
    /// Rows moved aside to `job_outbox_dead`.
    pub dead: i64,
}

/// Depth and age of the outbox, and its dead rows.
pub async fn outbox_health<'c, E: PgExecutor<'c>>(executor: E) -> Result<OutboxHealth> {
    Ok(sqlx::query_as(include_str!("../../sql/outbox_health.sql"))
        .fetch_one(executor)
        .await?)
}

/// One hot table's tuples and vacuums, from `pg_stat_user_tables`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TableHealth {
    /// `jobs`, `job_outbox` or `jobs_history`.
    pub table_name: String,
    /// Live rows (estimate).
    pub live_tuples: i64,
    /// Dead rows waiting for vacuum (estimate).
    pub dead_tuples: i64,
    /// When autovacuum last finished on it (Unix seconds), if ever.
    pub last_autovacuum_s: Option<f64>,
}

/// Tuples and vacuums of `jobs`, `job_outbox` and `jobs_history`.
pub async fn table_health<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<TableHealth>> {
    Ok(sqlx::query_as(include_str!("../../sql/table_health.sql"))
        .fetch_all(executor)
        .await?)
}

/// How far behind each active schedule is.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ScheduleDelay {
    /// The schedule.
    pub name: String,
    /// Seconds since its next occurrence became due (0 while not due).
    pub delay_s: f64,
}

/// Every active schedule's delay.
pub async fn schedule_delays<'c, E: PgExecutor<'c>>(executor: E) -> Result<Vec<ScheduleDelay>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/schedule_delays.sql"))
            .fetch_all(executor)
            .await?,
    )
}

/// Ask the server to probe this session's TCP connection (30 s idle, then
/// every 10 s, 3 tries): a collector whose machine vanished then loses its
/// lead within about a minute instead of whenever the kernel gives up.
pub async fn keep_collector_session_alive(connection: &mut sqlx::PgConnection) -> Result<()> {
    sqlx::query(include_str!("../../sql/collector_session_keepalives.sql"))
        .execute(connection)
        .await?;
    Ok(())
}

/// Try to become the one metrics collector of this database: `true` when
/// this session holds (or already held) the election's advisory lock, which
/// it keeps until the connection closes. Run it on a dedicated connection,
/// never on one that goes back to a pool.
pub async fn try_lead_metrics_collector(connection: &mut sqlx::PgConnection) -> Result<bool> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/try_lead_metrics_collector.sql"))
            .fetch_one(connection)
            .await?,
    )
}
