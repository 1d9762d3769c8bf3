//! A run's database cost from PostgreSQL's own counters: commits, WAL bytes, rows written.

use anyhow::Result;
use sqlx::PgPool;

use crate::DatabaseCost;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    xids: i64,
    wal: i64,
    rows: i64,
}

/// Read the counters. Transaction ids and the WAL position are exact at
/// once; row counts come from the statistics system, which a backend
/// reports when it exits, so callers close the run's connections first
/// (`harness::close_run_pool`).
pub(crate) async fn counters(pool: &PgPool) -> Result<Counters> {
    let rows = rows_written(pool).await?;
    // Assigns a transaction id itself: one per call, subtracted in `cost`.
    let (xids, wal): (i64, i64) = sqlx::query_as(
        "SELECT pg_current_xact_id()::text::bigint, (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint",
    )
    .fetch_one(pool)
    .await?;
    Ok(Counters { xids, wal, rows })
}

/// Rows inserted, updated and deleted in this database, as counted so far.
pub(crate) async fn rows_written(pool: &PgPool) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (tup_inserted + tup_updated + tup_deleted)::bigint
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await?)
}

pub(crate) fn cost(before: Counters, after: Counters, jobs: usize) -> DatabaseCost {
    let per = |delta: i64| delta as f64 / jobs.max(1) as f64;
    DatabaseCost {
        commits_per_job: per(after.xids - before.xids - 1),
        wal_bytes_per_job: per(after.wal - before.wal),
        rows_written_per_job: per(after.rows - before.rows),
    }
}
