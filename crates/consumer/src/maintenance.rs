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

/// Settings for [`Reconciler`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerConfig {
    /// Pause between passes (jittered by ±20 %).
    pub interval: Duration,
    /// How long a due job may wait for its wake-up before it is re-woken.
    pub grace: Duration,
    /// Most jobs re-woken per statement.
    pub batch_size: usize,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            interval: Duration::from_secs(10),
            grace: Duration::from_secs(60),
            batch_size: 1000,
        }
    }
}

/// Re-wakes jobs of broker-dispatched queues whose wake-up went missing (a
/// purged queue, a broker that lost messages, a consumer that died between
/// receive and claim), so that no job depends on a broker keeping its
/// promise. Recovery time is bounded by `grace` plus `interval`.
#[derive(Debug, Clone)]
pub struct Reconciler {
    pool: PgPool,
    config: ReconcilerConfig,
}

impl Reconciler {
    /// A reconciler over `pool`.
    pub fn new(pool: PgPool, config: ReconcilerConfig) -> Self {
        Reconciler { pool, config }
    }

    /// One pass; returns how many jobs were re-woken. Does nothing while the
    /// outbox lags by more than the grace period: the wake-ups are then
    /// still waiting for the relay, not lost.
    pub async fn reconcile_once(&self) -> Result<usize, jobwire_core::Error> {
        let lag = jobwire_core::outbox_lag(&self.pool).await?;
        if lag > self.config.grace {
            tracing::info!(?lag, "outbox lags behind; not re-waking jobs yet");
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let woken = jobwire_core::reconcile_wake_ups(
                &self.pool,
                self.config.grace,
                self.config.batch_size,
            )
            .await?;
            total += woken.len();
            if woken.len() < self.config.batch_size {
                break;
            }
        }
        if total > 0 {
            tracing::warn!(jobs = total, "re-woke jobs whose wake-up went missing");
        }
        Ok(total)
    }

    /// Reconcile every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            if let Err(err) = self.reconcile_once().await {
                tracing::warn!(error = %err, "reconciling wake-ups failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.config.interval, 0.2)) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
