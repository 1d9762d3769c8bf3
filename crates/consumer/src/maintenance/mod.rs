//! Background maintenance, one loop per file: the lease [`Sweeper`], the
//! [`Retention`] loop, the wake-up [`Reconciler`] and the [`Scheduler`]. Each is a validated
//! config plus `run(self, shutdown)`; several instances may run at once
//! (their statements use SKIP LOCKED). [`Maintenance`] runs the enabled ones
//! together under one shutdown token.

/// One pass of a maintenance loop, logged: a failure is counted in
/// `$outage` and logged as its WARN line, the first success after failures
/// as one INFO line that says they ended ("sweeping leases again after 3
/// failures over 12s"). Evaluates to the pass's value when it succeeded. A
/// macro, so that the lines keep the loop's own module as their target.
macro_rules! logged_pass {
    ($outage:expr, $pass:expr, failed: $failed:literal, again: $again:literal $(,)?) => {
        match $pass {
            Ok(value) => {
                if let Some(ended) = $outage.succeeded() {
                    tracing::info!(concat!($again, " {}"), ended);
                }
                Some(value)
            }
            Err(err) => {
                $outage.failed();
                tracing::warn!(error = %err, $failed);
                None
            }
        }
    };
}

mod reconciler;
mod retention;
mod scheduler;
mod sweeper;

pub use reconciler::{Reconciler, ReconcilerConfig};
pub use retention::{Retention, RetentionConfig};
pub use scheduler::{Scheduler, SchedulerConfig};
pub use sweeper::{Sweeper, SweeperConfig};

use jobwire_loop::InvalidSetting;
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Which maintenance loops a process runs; `None` leaves one out. Every
/// loop is safe to run in several processes at once.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceConfig {
    /// Return expired leases (crashed workers' jobs).
    pub sweeper: Option<SweeperConfig>,
    /// Move finished jobs out of the hot table.
    pub retention: Option<RetentionConfig>,
    /// Re-wake broker-dispatched jobs whose wake-up went missing, and forget
    /// the slot rows of idle tenants.
    pub reconciler: Option<ReconcilerConfig>,
    /// Fire due schedules.
    pub scheduler: Option<SchedulerConfig>,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            sweeper: Some(SweeperConfig::default()),
            retention: Some(RetentionConfig::default()),
            reconciler: Some(ReconcilerConfig::default()),
            scheduler: Some(SchedulerConfig::default()),
        }
    }
}

impl MaintenanceConfig {
    /// No maintenance at all (a process that only runs jobs, a benchmark).
    pub fn none() -> Self {
        MaintenanceConfig {
            sweeper: None,
            retention: None,
            reconciler: None,
            scheduler: None,
        }
    }

    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if let Some(sweeper) = &self.sweeper {
            sweeper.validate()?;
        }
        if let Some(retention) = &self.retention {
            retention.validate()?;
        }
        if let Some(reconciler) = &self.reconciler {
            reconciler.validate()?;
        }
        if let Some(scheduler) = &self.scheduler {
            scheduler.validate()?;
        }
        Ok(())
    }
}

/// The enabled maintenance loops of one process, built from a validated
/// [`MaintenanceConfig`].
#[derive(Debug, Clone)]
pub struct Maintenance {
    sweeper: Option<Sweeper>,
    retention: Option<Retention>,
    reconciler: Option<Reconciler>,
    scheduler: Option<Scheduler>,
}

impl Maintenance {
    /// The loops `config` enables, over `pool`; fails on a setting that
    /// cannot work.
    pub fn new(pool: PgPool, config: MaintenanceConfig) -> Result<Self, InvalidSetting> {
        Ok(Maintenance {
            sweeper: config
                .sweeper
                .map(|c| Sweeper::new(pool.clone(), c))
                .transpose()?,
            retention: config
                .retention
                .map(|c| Retention::new(pool.clone(), c))
                .transpose()?,
            reconciler: config
                .reconciler
                .map(|c| Reconciler::new(pool.clone(), c))
                .transpose()?,
            scheduler: config
                .scheduler
                .map(|c| Scheduler::new(pool, c))
                .transpose()?,
        })
    }

    /// Whether any loop is enabled.
    pub fn is_empty(&self) -> bool {
        self.sweeper.is_none()
            && self.retention.is_none()
            && self.reconciler.is_none()
            && self.scheduler.is_none()
    }

    /// Run every enabled loop until `shutdown`; returns once all stopped.
    /// A loop that ends before (a panic) stops the others, and the error
    /// says why: a process without its sweeper or scheduler would look
    /// healthy while crashed workers' jobs stay stranded or schedules stop
    /// firing.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), MaintenanceError> {
        let stop = shutdown.child_token();
        let mut loops = JoinSet::new();
        if let Some(sweeper) = self.sweeper {
            loops.spawn(sweeper.run(stop.clone()));
        }
        if let Some(retention) = self.retention {
            loops.spawn(retention.run(stop.clone()));
        }
        if let Some(reconciler) = self.reconciler {
            loops.spawn(reconciler.run(stop.clone()));
        }
        if let Some(scheduler) = self.scheduler {
            loops.spawn(scheduler.run(stop.clone()));
        }
        match jobwire_loop::join_loops(&mut loops, "maintenance", &stop).await {
            None => Ok(()),
            Some(why) => Err(MaintenanceError::LoopEnded(why)),
        }
    }
}

/// Why the maintenance loops stopped before shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaintenanceError {
    /// A loop (sweeper, retention, reconciler or scheduler) ended before
    /// shutdown: a bug. The others were stopped with it.
    #[error("a maintenance loop ended: {0}; maintenance stopped")]
    LoopEnded(String),
}
