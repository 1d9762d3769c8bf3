//! The lease sweeper: returns the jobs of crashed or partitioned workers.

use std::time::Duration;

use jobwire_loop::{InvalidSetting, Outage, POLL_SPREAD, jittered, sleep};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

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

impl SweeperConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_nonzero("sweeper.interval", self.interval)?;
        InvalidSetting::require_positive("sweeper.batch_size", self.batch_size)
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
    /// A sweeper over `pool`; fails on a setting that cannot work.
    pub fn new(pool: PgPool, config: SweeperConfig) -> Result<Self, InvalidSetting> {
        config.validate()?;
        Ok(Sweeper { pool, config })
    }

    /// Sweep until no expired lease is left; returns how many were returned.
    pub async fn sweep_once(&self) -> Result<usize, jobwire_core::Error> {
        let mut total = 0;
        loop {
            let swept =
                jobwire_core::sweep_expired_leases(&self.pool, self.config.batch_size).await?;
            for lease in &swept {
                tracing::info!(job_id = %lease.job_id, state = %lease.state, queue = %lease.queue,
                    "expired lease swept");
                crate::metrics::record_swept(&lease.queue, lease.state);
            }
            total += swept.len();
            if swept.len() < self.config.batch_size {
                return Ok(total);
            }
        }
    }

    /// Sweep every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut outage = Outage::new();
        loop {
            logged_pass!(outage, self.sweep_once().await,
                failed: "lease sweep failed", again: "sweeping leases again");
            let pause = jittered(self.config.interval, POLL_SPREAD);
            if sleep(pause, &shutdown).await.is_cancelled() {
                return;
            }
        }
    }
}
