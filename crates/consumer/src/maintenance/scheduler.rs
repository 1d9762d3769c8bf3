//! The scheduler: fires due schedules (`job_schedules`). Any number run at
//! once, in any processes, with no leader: each takes due rows FOR UPDATE
//! SKIP LOCKED and enqueues their occurrences in the same transaction that
//! advances them (see `jobwire_core::fire_due_schedules`).

use std::time::Duration;

use jobwire_loop::{InvalidSetting, Outage, jittered, sleep};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Settings for [`Scheduler`].
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// Pause between looks for due schedules (jittered by ±10 %). An
    /// occurrence is enqueued at most about this long after it is due.
    pub interval: Duration,
    /// Most schedules fired per transaction.
    pub batch_size: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            interval: Duration::from_millis(500),
            batch_size: 500,
        }
    }
}

impl SchedulerConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_nonzero("scheduler.interval", self.interval)?;
        InvalidSetting::require_positive("scheduler.batch_size", self.batch_size)
    }
}

/// Fires due schedules every interval.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pool: PgPool,
    config: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler over `pool`; fails on a setting that cannot work.
    pub fn new(pool: PgPool, config: SchedulerConfig) -> Result<Self, InvalidSetting> {
        config.validate()?;
        Ok(Scheduler { pool, config })
    }

    /// Fire every due schedule, batch after batch; returns the jobs enqueued.
    pub async fn fire_once(&self) -> Result<usize, jobwire_core::Error> {
        let batch = i64::try_from(self.config.batch_size).unwrap_or(i64::MAX);
        let mut enqueued = 0;
        loop {
            let report = jobwire_core::fire_due_schedules(&self.pool, batch).await?;
            if report.enqueued > 0 || report.skipped > 0 {
                tracing::debug!(?report, "schedules fired");
            }
            enqueued += report.enqueued;
            crate::metrics::record_occurrences(report.enqueued);
            if report.schedules < self.config.batch_size {
                return Ok(enqueued);
            }
        }
    }

    /// Fire due schedules every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut outage = Outage::new();
        loop {
            logged_pass!(outage, self.fire_once().await,
                failed: "firing schedules failed", again: "firing schedules again");
            let pause = jittered(self.config.interval, 0.1);
            if sleep(pause, &shutdown).await.is_cancelled() {
                return;
            }
        }
    }
}
