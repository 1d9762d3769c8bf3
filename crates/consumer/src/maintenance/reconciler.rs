//! The wake-up reconciler: no job of a broker-dispatched queue depends on
//! the broker keeping its promise. It also forgets the slot rows of idle
//! tenants, so that a queue's slot table holds the tenants in use, not
//! every tenant it has seen.

use std::time::{Duration, Instant};

use jobwire_loop::{InvalidSetting, Outage, POLL_SPREAD, jittered, sleep};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Settings for [`Reconciler`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcilerConfig {
    /// Pause between passes (jittered by ±20 %).
    pub interval: Duration,
    /// How long a due job may wait for its wake-up before it is re-woken.
    pub grace: Duration,
    /// Most jobs re-woken per statement.
    pub batch_size: usize,
    /// Pause between sweeps of idle tenants' slot rows (the first sweep is
    /// in the first pass).
    pub idle_tenant_sweep: Duration,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            interval: Duration::from_secs(10),
            grace: Duration::from_secs(60),
            batch_size: 1000,
            idle_tenant_sweep: Duration::from_secs(300),
        }
    }
}

impl ReconcilerConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        InvalidSetting::require_nonzero("reconciler.interval", self.interval)?;
        InvalidSetting::require_nonzero("reconciler.grace", self.grace)?;
        InvalidSetting::require_nonzero("reconciler.idle_tenant_sweep", self.idle_tenant_sweep)?;
        InvalidSetting::require_positive("reconciler.batch_size", self.batch_size)
    }
}

/// Re-wakes jobs of broker-dispatched queues whose wake-up went missing (a
/// purged queue, a broker that lost messages, a consumer that died between
/// receive and claim), so that no job depends on a broker keeping its
/// promise. A lost wake-up is replaced after about `grace` plus `interval`;
/// a job it has re-woken and that nothing else changed is re-woken again
/// after as long as it had been due (at most 16 × `grace`). Every
/// `idle_tenant_sweep` it also deletes the slot rows of capped tenants
/// with nothing running or waiting.
#[derive(Debug, Clone)]
pub struct Reconciler {
    pool: PgPool,
    config: ReconcilerConfig,
}

impl Reconciler {
    /// A reconciler over `pool`; fails on a setting that cannot work.
    pub fn new(pool: PgPool, config: ReconcilerConfig) -> Result<Self, InvalidSetting> {
        config.validate()?;
        Ok(Reconciler { pool, config })
    }

    /// One pass; returns how many jobs were re-woken. Does nothing while the
    /// outbox lags by more than the grace period: the wake-ups are then
    /// still waiting for the relay, not lost.
    pub async fn reconcile_once(&self) -> Result<usize, jobwire_core::Error> {
        // A slot a broker hand-over left with a waiting job of a queue since
        // moved to the PostgreSQL path, whose claim never takes such a job.
        // A failure here is logged and leaves the rest of the pass to run.
        match jobwire_core::release_handed_slots(&self.pool).await {
            Ok(0) => {}
            Ok(released) => tracing::warn!(
                slots = released,
                "gave back tenant slots held by waiting jobs of queues on the PostgreSQL path"
            ),
            Err(err) => tracing::warn!(
                error = %err,
                "giving back tenant slots on PostgreSQL-path queues failed; the next pass retries"
            ),
        }
        // A capped tenant's free slot with a due job waiting and no wake-up
        // on the way (a hand-over rolled back, a delayed job that became due
        // while the tenant ran nothing), or such a job of a tenant with no
        // slot rows (forgotten as idle): hand it a slot now. Not a lost
        // wake-up, so not held back by the outbox lag.
        let handed = jobwire_core::hand_out_free_tenant_slots(&self.pool).await?;
        if handed > 0 {
            tracing::info!(jobs = handed, "handed free tenant slots to waiting jobs");
        }
        let lag = jobwire_core::outbox_lag(&self.pool).await?;
        if lag > self.config.grace {
            // Said as a warning, with what to look at: a trial's operator
            // with no relay running saw only this line, at INFO, while
            // broker jobs waited for the safety net.
            tracing::warn!(
                ?lag,
                "outbox lags behind: due wake-ups are not being published (is a relay running \
                 for every broker topic, on the broker the workers read?); not re-waking jobs \
                 meanwhile: the safety net claims them"
            );
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
            crate::metrics::record_rewakes(total);
        }
        Ok(total)
    }

    /// Delete the slot rows of tenants that hold no slot and have no
    /// waiting job; returns how many tenants were forgotten.
    pub async fn forget_idle_tenants_once(&self) -> Result<u64, jobwire_core::Error> {
        let forgotten = jobwire_core::forget_idle_tenant_slots(&self.pool).await?;
        if forgotten > 0 {
            tracing::debug!(tenants = forgotten, "forgot the slot rows of idle tenants");
        }
        Ok(forgotten)
    }

    /// Reconcile every interval, and sweep idle tenants every
    /// `idle_tenant_sweep`, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut next_sweep = Instant::now();
        let mut outage = Outage::new();
        let mut sweep_outage = Outage::new();
        loop {
            logged_pass!(outage, self.reconcile_once().await,
                failed: "reconciling wake-ups failed", again: "reconciling wake-ups again");
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + self.config.idle_tenant_sweep;
                logged_pass!(sweep_outage, self.forget_idle_tenants_once().await,
                    failed: "forgetting idle tenants' slot rows failed",
                    again: "forgetting idle tenants' slot rows again");
            }
            let pause = jittered(self.config.interval, POLL_SPREAD);
            if sleep(pause, &shutdown).await.is_cancelled() {
                return;
            }
        }
    }
}
