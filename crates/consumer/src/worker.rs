//! The PostgreSQL-path worker: SKIP LOCKED claims, woken by LISTEN/NOTIFY,
//! with a jittered poll fallback.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobwire_core::WAKE_CHANNEL;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::maintenance::{Retention, RetentionConfig, Sweeper, SweeperConfig};
use crate::stats::bump;
use crate::{HandlerRegistry, JobRuntime, RuntimeConfig, WorkerReport, jittered};

/// One queue a worker serves and how many of its jobs may run at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Queue name.
    pub name: String,
    /// Concurrent jobs from this queue. Separate queues have separate slots,
    /// so a bulk backlog never takes an urgent queue's.
    pub concurrency: usize,
}

impl QueueConfig {
    /// Serve `name` with `concurrency` slots.
    pub fn new(name: impl Into<String>, concurrency: usize) -> Self {
        QueueConfig {
            name: name.into(),
            concurrency,
        }
    }
}

/// Settings for [`PgWorker`]; `Default` gives a worker for queue `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct PgWorkerConfig {
    /// Lease, worker id, completion batching.
    pub runtime: RuntimeConfig,
    /// Queues served.
    pub queues: Vec<QueueConfig>,
    /// Most jobs taken by one claim statement.
    pub claim_batch_size: usize,
    /// Poll fallback when no NOTIFY arrives (jittered by ±20 %). Delayed jobs
    /// and retries become due silently, so this bounds how late they start.
    pub poll_interval: Duration,
    /// How long shutdown waits for running jobs before cancelling them.
    pub shutdown_timeout: Duration,
    /// Run a lease sweeper in this process (several sweepers are safe).
    pub sweeper: Option<SweeperConfig>,
    /// Run the retention loop in this process.
    pub retention: Option<RetentionConfig>,
}

impl Default for PgWorkerConfig {
    fn default() -> Self {
        PgWorkerConfig {
            runtime: RuntimeConfig::default(),
            queues: vec![QueueConfig::new(jobwire_core::NewJob::DEFAULT_QUEUE, 16)],
            claim_batch_size: 100,
            poll_interval: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(30),
            sweeper: Some(SweeperConfig::default()),
            retention: Some(RetentionConfig::default()),
        }
    }
}

/// Why a worker could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The configuration cannot work.
    #[error("invalid worker configuration: {0}")]
    Config(String),
}

impl PgWorkerConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), WorkerError> {
        self.runtime.validate().map_err(WorkerError::Config)?;
        if self.queues.is_empty() {
            return Err(WorkerError::Config("at least one queue is needed".into()));
        }
        for queue in &self.queues {
            if queue.name.trim().is_empty() || queue.concurrency == 0 {
                return Err(WorkerError::Config(format!(
                    "queue {:?} needs a name and a concurrency of at least 1",
                    queue.name
                )));
            }
        }
        if self.claim_batch_size == 0 {
            return Err(WorkerError::Config(
                "claim_batch_size must be at least 1".into(),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(WorkerError::Config("poll_interval must be positive".into()));
        }
        Ok(())
    }
}

/// Works the jobs table directly: per queue, claims as many due jobs as it
/// has free slots in one SKIP LOCKED statement, runs them on a
/// [`JobRuntime`], and sleeps on NOTIFY (channel [`WAKE_CHANNEL`]) with a
/// jittered poll fallback when the queue is empty.
pub struct PgWorker {
    pool: PgPool,
    registry: HandlerRegistry,
    config: PgWorkerConfig,
}

impl PgWorker {
    /// A worker; nothing runs until [`PgWorker::run`].
    pub fn new(pool: PgPool, registry: HandlerRegistry, config: PgWorkerConfig) -> Self {
        PgWorker {
            pool,
            registry,
            config,
        }
    }

    /// Run until `shutdown` is cancelled, then shut down in stages: stop
    /// claiming, drain running jobs under `shutdown_timeout`, flush the last
    /// outcomes. Returns what the worker did.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, WorkerError> {
        self.config.validate()?;
        let config = self.config;
        let runtime = JobRuntime::start(self.pool.clone(), self.registry, config.runtime.clone());
        tracing::info!(worker_id = runtime.worker_id(), queues = ?config.queues, "worker started");

        let stop_fetching = shutdown.child_token();
        let wake_ups: HashMap<String, Arc<Notify>> = config
            .queues
            .iter()
            .map(|queue| (queue.name.clone(), Arc::new(Notify::new())))
            .collect();

        let mut fetchers = JoinSet::new();
        fetchers.spawn(listen_for_wake_ups(
            self.pool.clone(),
            wake_ups.clone(),
            stop_fetching.clone(),
        ));
        for queue in &config.queues {
            fetchers.spawn(fetch_queue(
                runtime.clone(),
                queue.clone(),
                config.claim_batch_size,
                config.poll_interval,
                wake_ups[&queue.name].clone(),
                stop_fetching.clone(),
            ));
        }

        let stop_maintenance = CancellationToken::new();
        let mut maintenance = JoinSet::new();
        if let Some(sweeper) = config.sweeper.clone() {
            maintenance
                .spawn(Sweeper::new(self.pool.clone(), sweeper).run(stop_maintenance.clone()));
        }
        if let Some(retention) = config.retention.clone() {
            maintenance
                .spawn(Retention::new(self.pool.clone(), retention).run(stop_maintenance.clone()));
        }

        shutdown.cancelled().await;
        tracing::info!("shutting down: no more claims");
        stop_fetching.cancel();
        while fetchers.join_next().await.is_some() {}
        tracing::info!(running = runtime.in_flight(), "draining running jobs");
        let report = runtime.shutdown(config.shutdown_timeout).await;
        stop_maintenance.cancel();
        while maintenance.join_next().await.is_some() {}
        tracing::info!(?report, "worker stopped");
        Ok(report)
    }
}

/// Claim and run jobs of one queue until `stop`.
async fn fetch_queue(
    runtime: JobRuntime,
    queue: QueueConfig,
    batch_size: usize,
    poll_interval: Duration,
    wake_up: Arc<Notify>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(queue.concurrency));
    let mut error_pause = Duration::from_millis(100);
    loop {
        // Wait for a free slot, then take every free slot up to a batch.
        let first = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("semaphore is never closed"),
            _ = stop.cancelled() => return,
        };
        let mut free = vec![first];
        while free.len() < batch_size {
            match slots.clone().try_acquire_owned() {
                Ok(slot) => free.push(slot),
                Err(_) => break,
            }
        }
        let wanted = free.len();
        match jobwire_core::claim_batch(
            runtime.pool(),
            &queue.name,
            runtime.worker_id(),
            wanted,
            runtime.lease(),
        )
        .await
        {
            Ok(jobs) => {
                error_pause = Duration::from_millis(100);
                let got = jobs.len();
                for (job, slot) in jobs.into_iter().zip(free.drain(..)) {
                    runtime.spawn(job, Some(slot));
                }
                drop(free);
                if got == wanted {
                    // Every slot filled: there is probably more; go again
                    // as soon as a slot frees up.
                    continue;
                }
            }
            Err(err) => {
                bump(&runtime.stats().database_errors);
                tracing::warn!(queue = %queue.name, error = %err, "claim failed; backing off");
                drop(free);
                tokio::select! {
                    _ = tokio::time::sleep(jittered(error_pause, 0.2)) => {}
                    _ = stop.cancelled() => return,
                }
                error_pause = (error_pause * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        // The queue is drained for now: sleep until a NOTIFY, the poll tick
        // (for delayed jobs and retries becoming due), or shutdown.
        tokio::select! {
            _ = wake_up.notified() => {}
            _ = tokio::time::sleep(jittered(poll_interval, 0.2)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Turn NOTIFYs on [`WAKE_CHANNEL`] into "check now" for the matching queue.
/// A notification is only a hint: losing one costs at most a poll interval.
async fn listen_for_wake_ups(
    pool: PgPool,
    wake_ups: HashMap<String, Arc<Notify>>,
    stop: CancellationToken,
) {
    let wake_all = || wake_ups.values().for_each(|notify| notify.notify_one());
    let mut pause = Duration::from_millis(100);
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(err) => {
                tracing::warn!(error = %err, "cannot open the NOTIFY listener; polling meanwhile");
                tokio::select! {
                    _ = tokio::time::sleep(jittered(pause, 0.2)) => {}
                    _ = stop.cancelled() => return,
                }
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(err) = listener.listen(WAKE_CHANNEL).await {
            tracing::warn!(error = %err, "LISTEN failed; retrying");
            tokio::select! {
                _ = tokio::time::sleep(jittered(pause, 0.2)) => {}
                _ = stop.cancelled() => return,
            }
            continue;
        }
        pause = Duration::from_millis(100);
        // Anything enqueued while we were not listening is only visible to
        // a claim: check every queue once.
        wake_all();
        loop {
            let next = tokio::select! {
                next = listener.try_recv() => next,
                _ = stop.cancelled() => return,
            };
            match next {
                Ok(Some(notification)) => {
                    if let Some(notify) = wake_ups.get(notification.payload()) {
                        notify.notify_one();
                    }
                }
                // The connection dropped; the next try_recv reconnects.
                // Notifications sent meanwhile are lost: check every queue.
                Ok(None) => wake_all(),
                Err(err) => {
                    tracing::warn!(error = %err, "NOTIFY listener failed; reconnecting");
                    wake_all();
                    break;
                }
            }
        }
    }
}
