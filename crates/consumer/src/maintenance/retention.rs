//! The retention loop: finished jobs leave the hot table in batches, and the
//! side tables that grow with every job are trimmed by age.

use std::time::Duration;

use jobwire_core::SideTable;
use jobwire_loop::{InvalidSetting, Outage, POLL_SPREAD, jittered, sleep};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Settings for [`Retention`].
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionConfig {
    /// Pause between passes (jittered by ±20 %).
    pub interval: Duration,
    /// SUCCEEDED and CANCELLED jobs stay in the hot table this long.
    pub keep_finished: Duration,
    /// FAILED jobs (dead letters, replayable) stay this long.
    pub keep_failed: Duration,
    /// Most rows moved or deleted per statement (one transaction each).
    pub batch_size: usize,
    /// Archived jobs stay in `jobs_history` this long (`None`: forever).
    pub keep_history: Option<Duration>,
    /// Effect keys stay in `job_effects` this long. Keep it longer than any
    /// job can keep retrying, or a late retry could repeat its effect.
    pub keep_effects: Option<Duration>,
    /// Operator actions stay in `job_audit` and `job_outbox_audit` this long.
    pub keep_audit: Option<Duration>,
    /// Outbox rows that could not be published stay in `job_outbox_dead`
    /// (replayable) this long.
    pub keep_outbox_dead: Option<Duration>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            interval: Duration::from_secs(60),
            keep_finished: Duration::from_secs(60 * 60),
            keep_failed: Duration::from_secs(7 * 24 * 60 * 60),
            batch_size: 5000,
            keep_history: Some(DAY * 30),
            keep_effects: Some(DAY * 30),
            keep_audit: Some(DAY * 90),
            keep_outbox_dead: Some(DAY * 30),
        }
    }
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a tenant's enqueue-rate counter row is kept after its window
/// started: two of the longest windows.
const ENQUEUE_COUNTS_KEEP: Duration = Duration::from_secs(2 * 24 * 60 * 60);

impl RetentionConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_nonzero("retention.interval", self.interval)?;
        InvalidSetting::require_positive("retention.batch_size", self.batch_size)?;
        for (setting, keep) in [
            ("retention.keep_history", self.keep_history),
            ("retention.keep_effects", self.keep_effects),
            ("retention.keep_audit", self.keep_audit),
            ("retention.keep_outbox_dead", self.keep_outbox_dead),
        ] {
            // None keeps rows forever; zero would delete every row at once.
            if let Some(keep) = keep {
                InvalidSetting::require_nonzero(setting, keep)?;
            }
        }
        Ok(())
    }

    /// The side tables to trim and how long each keeps its rows.
    pub fn side_tables(&self) -> Vec<(SideTable, Duration)> {
        [
            (SideTable::History, self.keep_history),
            (SideTable::Effects, self.keep_effects),
            (SideTable::Audit, self.keep_audit),
            (SideTable::OutboxAudit, self.keep_audit),
            (SideTable::OutboxDead, self.keep_outbox_dead),
            // Not a setting: a rate counter is worthless two windows on, and
            // a window is at most a day.
            (SideTable::EnqueueCounts, Some(ENQUEUE_COUNTS_KEEP)),
        ]
        .into_iter()
        .filter_map(|(table, keep)| keep.map(|keep| (table, keep)))
        .collect()
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
    /// A retention loop over `pool`; fails on a setting that cannot work.
    pub fn new(pool: PgPool, config: RetentionConfig) -> Result<Self, InvalidSetting> {
        config.validate()?;
        Ok(Retention { pool, config })
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

    /// Trim every side table until nothing is due; returns how many rows
    /// went, per table.
    pub async fn trim_side_tables_once(
        &self,
    ) -> Result<Vec<(SideTable, u64)>, jobwire_core::Error> {
        let mut trimmed = Vec::new();
        for (table, keep) in self.config.side_tables() {
            let mut total = 0;
            loop {
                let deleted =
                    jobwire_core::trim_side_table(&self.pool, table, keep, self.config.batch_size)
                        .await?;
                total += deleted;
                if deleted < self.config.batch_size as u64 {
                    break;
                }
            }
            trimmed.push((table, total));
        }
        Ok(trimmed)
    }

    /// Archive and trim every interval until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut outage = Outage::new();
        let mut trim_outage = Outage::new();
        loop {
            let archived = logged_pass!(outage, self.archive_once().await,
                failed: "archiving failed", again: "archiving again");
            if let Some(moved) = archived.filter(|moved| *moved > 0) {
                tracing::info!(moved, "finished jobs archived");
            }
            let trimmed = logged_pass!(trim_outage, self.trim_side_tables_once().await,
                failed: "trimming side tables failed", again: "trimming side tables again");
            for (table, deleted) in trimmed.into_iter().flatten().filter(|(_, n)| *n > 0) {
                tracing::info!(table = table.table(), deleted, "old rows trimmed");
            }
            let pause = jittered(self.config.interval, POLL_SPREAD);
            if sleep(pause, &shutdown).await.is_cancelled() {
                return;
            }
        }
    }
}
