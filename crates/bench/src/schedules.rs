//! The schedule burst: many schedules due at one instant, fired by several
//! schedulers at once. How many occurrences per second get enqueued, and
//! how jitter spreads their start times.

use std::time::Instant;

use anyhow::{Result, bail};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// What one schedule burst measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleBurst {
    /// Schedules due at the same instant.
    pub schedules: usize,
    /// Schedulers firing them concurrently.
    pub schedulers: usize,
    /// The schedules' jitter window.
    pub jitter_seconds: u32,
    /// Occurrences enqueued (one per schedule).
    pub occurrences: usize,
    /// From the first scheduler starting to the last occurrence committed.
    pub seconds: f64,
    /// Occurrences enqueued per second.
    pub per_second: f64,
    /// Most jobs whose start (run_after) falls in any one second: without
    /// jitter, all of them; with it, about schedules / jitter_seconds.
    pub peak_starts_per_second: i64,
    /// The spread of start times: last run_after minus first, in seconds.
    pub start_spread_seconds: f64,
}

/// Create `schedules` daily schedules all due at the same (past) instant,
/// fire them with `schedulers` concurrent schedulers, measure, and remove
/// the schedules and their jobs again.
pub async fn schedule_burst(
    pool: &PgPool,
    schedules: usize,
    schedulers: usize,
    jitter_seconds: u32,
) -> Result<ScheduleBurst> {
    if schedules == 0 || schedulers == 0 {
        bail!("a schedule burst needs at least one schedule and one scheduler");
    }
    let prefix = format!("bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
    // Every schedule: 08:00 in Kolkata, due at the most recent 08:00 (so
    // each fires exactly one occurrence, under the default `latest` policy).
    sqlx::query(
        "INSERT INTO job_schedules (name, cron, timezone, job_type, queue, jitter_seconds, next_run_at)
         SELECT $1 || '-' || g, '0 8 * * *', 'Asia/Kolkata', 'noop', $1, $3,
                (date_trunc('day', (now() AT TIME ZONE 'Asia/Kolkata') - interval '8 hours')
                     + interval '8 hours') AT TIME ZONE 'Asia/Kolkata'
         FROM generate_series(1, $2) g",
    )
    .bind(&prefix)
    .bind(i64::try_from(schedules)?)
    .bind(i32::try_from(jitter_seconds)?)
    .execute(pool)
    .await?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..schedulers)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut enqueued = 0;
                loop {
                    let report = jobwire_core::fire_due_schedules(&pool, 500).await?;
                    enqueued += report.enqueued;
                    if report.schedules == 0 {
                        return Ok::<usize, jobwire_core::Error>(enqueued);
                    }
                }
            })
        })
        .collect();
    let mut occurrences = 0;
    for task in tasks {
        occurrences += task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let (peak, spread): (Option<i64>, Option<f64>) = sqlx::query_as(
        "SELECT (SELECT max(n) FROM (SELECT count(*) AS n FROM jobs WHERE queue = $1
                                     GROUP BY date_trunc('second', run_after)) s),
                extract(epoch FROM max(run_after) - min(run_after))::float8
         FROM jobs WHERE queue = $1",
    )
    .bind(&prefix)
    .fetch_one(pool)
    .await?;
    sqlx::query("DELETE FROM jobs WHERE queue = $1")
        .bind(&prefix)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM job_schedules WHERE queue = $1")
        .bind(&prefix)
        .execute(pool)
        .await?;
    if occurrences != schedules {
        bail!("{schedules} schedules were due but {occurrences} occurrences were enqueued");
    }
    Ok(ScheduleBurst {
        schedules,
        schedulers,
        jitter_seconds,
        occurrences,
        seconds,
        per_second: occurrences as f64 / seconds,
        peak_starts_per_second: peak.unwrap_or(0),
        start_spread_seconds: spread.unwrap_or(0.0),
    })
}
