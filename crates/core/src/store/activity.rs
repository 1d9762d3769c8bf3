//! What happened lately, for the dashboard's overview: jobs finished per
//! minute and lease expiries. Plain reads over indexed timestamps of the hot
//! table and history together.

use sqlx::PgExecutor;

use crate::Result;

/// Jobs of one queue that finished in one minute.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FinishedInMinute {
    /// The queue.
    pub queue: String,
    /// Which minute, counted back from the database clock's current one
    /// (0: the minute under way).
    pub minutes_ago: i32,
    /// Jobs that reached a terminal state in it.
    pub finished: i64,
}

/// Jobs finished per queue in each of the last `minutes` minutes (the
/// current one included); minutes with none are left out.
pub async fn finished_per_minute<'c, E: PgExecutor<'c>>(
    executor: E,
    minutes: i32,
) -> Result<Vec<FinishedInMinute>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/finished_per_minute.sql"))
            .bind(minutes.max(1))
            .fetch_all(executor)
            .await?,
    )
}

/// How many jobs had a lease expire in the last `seconds` (the sweeper
/// returned them because their worker died or froze).
pub async fn lease_expiries_since<'c, E: PgExecutor<'c>>(executor: E, seconds: f64) -> Result<i64> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/lease_expiries_since.sql"))
            .bind(seconds)
            .fetch_one(executor)
            .await?,
    )
}
