//! Background maintenance: the lease sweeper and the retention loop. Each is a
//! validated config plus `run(self, shutdown)`; several instances may run at
//! once (their statements use SKIP LOCKED).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::jittered;

/// Settings for [`Sweeper`].
#[derive(Debug, Clone, PartialEq)]
pub struct SweeperConfig {
    /// Pause between sweeps (jittered by ±20 %).
    pub interval: Duration,
    /// Most leases returned per statement.
    pub batch_size: usize,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        SweeperConfig {
            interval: Duration::from_secs(5),
            batch_size: 1000,
        }
    }
}

/// Returns jobs whose lease expired (crashed or partitioned workers) to
/// RETRY_WAIT, FAILED or CANCELLED, with their wake-ups.
#[derive(Debug, Clone)]
pub struct Sweeper {
    pool: PgPool,
    config: SweeperConfig,
}

impl Sweeper {
    /// A sweeper over `pool`.
    pub fn new(pool: PgPool, config: SweeperConfig) -> Self {
        Sweeper { pool, config }
    }

    /// Sweep until no expired lease is left; returns how many were returned.
    pub async fn sweep_once(&self) -> Result<usize, jobwire_core::Error> {
        let mut total = 0;
        loop {
            let swept =
                jobwire_core::sweep_expired_leases(&self.pool, self.config.batch_size).await?;
            for (job_id, state) in &swept {
                tracing::info!(%job_id, %state, "expired lease swept");
            }
            total += swept.len();
            if swept.len() < self.config.batch_size {
                return Ok(total);
            }
        }
    }

    /// Sweep every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            if let Err(err) = self.sweep_once().await {
                tracing::warn!(error = %err, "lease sweep failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.config.interval, 0.2)) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

/// Settings for [`Retention`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    /// Pause between passes.
    pub interval: Duration,
    /// SUCCEEDED and CANCELLED jobs stay in the hot table this long.
    pub keep_finished: Duration,
    /// FAILED jobs (dead letters, replayable) stay this long.
    pub keep_failed: Duration,
    /// Most rows moved per statement (one transaction each).
    pub batch_size: usize,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            interval: Duration::from_secs(60),
            keep_finished: Duration::from_secs(60 * 60),
            keep_failed: Duration::from_secs(7 * 24 * 60 * 60),
            batch_size: 5000,
        }
    }
}

/// Moves finished jobs from `jobs` to `jobs_history` in batches, so the hot
/// table (and its indexes) stay small.
#[derive(Debug, Clone)]
pub struct Retention {
    pool: PgPool,
    config: RetentionConfig,
}

impl Retention {
    /// A retention loop over `pool`.
    pub fn new(pool: PgPool, config: RetentionConfig) -> Self {
        Retention { pool, config }
    }

    /// Archive until nothing is due; returns how many rows moved.
    pub async fn archive_once(&self) -> Result<u64, jobwire_core::Error> {
        let mut total = 0;
        loop {
            let moved = jobwire_core::archive_finished(
                &self.pool,
                self.config.keep_finished,
                self.config.keep_failed,
                self.config.batch_size,
            )
            .await?;
            total += moved;
            if moved < self.config.batch_size as u64 {
                return Ok(total);
            }
        }
    }

    /// Archive every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            match self.archive_once().await {
                Ok(0) => {}
                Ok(moved) => tracing::info!(moved, "finished jobs archived"),
                Err(err) => tracing::warn!(error = %err, "archiving failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.config.interval, 0.2)) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
