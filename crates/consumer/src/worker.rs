//! The worker: one job runtime fed by two kinds of wake-up source, chosen
//! per queue by the dispatch the database records for it (`job_queues`):
//!
//! - PostgreSQL path: SKIP LOCKED claims, woken by LISTEN/NOTIFY with a
//!   jittered poll fallback;
//! - broker path: deliveries from a [`Transport`] subscriber, each only a
//!   wake-up: one fenced `claim_by_ids` per received batch, then the batch is
//!   acknowledged (claimed or not), and only claimed jobs run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobwire_core::{ClaimMiss, Dispatch, WAKE_CHANNEL};
use jobwire_transport::{Delivery, SubscribeOptions, Subscriber, Transport, header};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::maintenance::{
    Reconciler, ReconcilerConfig, Retention, RetentionConfig, Sweeper, SweeperConfig,
};
use crate::stats::{WorkerStats, bump};
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

/// Settings for [`Worker`]; `Default` gives a worker for queue `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Lease, worker id, completion batching.
    pub runtime: RuntimeConfig,
    /// Queues served.
    pub queues: Vec<QueueConfig>,
    /// Most jobs taken by one claim statement.
    pub claim_batch_size: usize,
    /// PostgreSQL path, while a backlog lasts (the last claim filled every
    /// slot it asked for): how long to wait for more running jobs to finish
    /// when fewer than half a batch of slots is free, so that one claim
    /// (one commit) serves many jobs instead of a few. Zero claims at once.
    pub claim_linger: Duration,
    /// Poll fallback when no NOTIFY arrives (jittered by ±20 %). Delayed jobs
    /// and retries become due silently, so this bounds how late they start.
    pub poll_interval: Duration,
    /// Broker path: longest wait of one receive call.
    pub receive_wait: Duration,
    /// Broker path: consumer group and visibility timeout (the prefetch is
    /// each queue's concurrency).
    pub subscribe: SubscribeOptions,
    /// How long shutdown waits for running jobs before cancelling them.
    pub shutdown_timeout: Duration,
    /// Run a lease sweeper in this process (several sweepers are safe).
    pub sweeper: Option<SweeperConfig>,
    /// Run the retention loop in this process.
    pub retention: Option<RetentionConfig>,
    /// Run the wake-up reconciler in this process (broker-dispatched queues).
    pub reconciler: Option<ReconcilerConfig>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            runtime: RuntimeConfig::default(),
            queues: vec![QueueConfig::new(jobwire_core::NewJob::DEFAULT_QUEUE, 16)],
            claim_batch_size: 100,
            claim_linger: Duration::from_millis(2),
            poll_interval: Duration::from_secs(1),
            receive_wait: Duration::from_secs(1),
            subscribe: SubscribeOptions::default(),
            shutdown_timeout: Duration::from_secs(30),
            sweeper: Some(SweeperConfig::default()),
            retention: Some(RetentionConfig::default()),
            reconciler: Some(ReconcilerConfig::default()),
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
    /// The database could not be read at start.
    #[error("cannot start the worker: {0}")]
    Database(#[from] jobwire_core::Error),
}

impl WorkerConfig {
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
        if self.poll_interval.is_zero() || self.receive_wait.is_zero() {
            return Err(WorkerError::Config(
                "poll_interval and receive_wait must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// Runs the jobs of its queues on one [`JobRuntime`]. Per queue, as the
/// database dispatches it: PostgreSQL path — claims as many due jobs as it
/// has free slots in one SKIP LOCKED statement and sleeps on NOTIFY (channel
/// [`WAKE_CHANNEL`]) with a jittered poll fallback; broker path — receives
/// up to its free slots of deliveries, claims the jobs they name with one
/// fenced statement, acknowledges them, runs what it claimed.
pub struct Worker {
    pool: PgPool,
    registry: HandlerRegistry,
    config: WorkerConfig,
    transport: Option<Arc<dyn Transport>>,
    stats: Arc<WorkerStats>,
}

impl Worker {
    /// A worker; nothing runs until [`Worker::run`].
    pub fn new(pool: PgPool, registry: HandlerRegistry, config: WorkerConfig) -> Self {
        Worker {
            pool,
            registry,
            config,
            transport: None,
            stats: Arc::default(),
        }
    }

    /// Live counters of this worker (the same numbers `run` returns at the end).
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// The broker that carries wake-ups for broker-dispatched queues.
    pub fn with_transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Run until `shutdown` is cancelled, then shut down in stages: stop
    /// claiming, drain running jobs under `shutdown_timeout`, flush the last
    /// outcomes. Returns what the worker did.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, WorkerError> {
        self.config.validate()?;
        let config = self.config;
        let mut dispatches = Vec::new();
        for queue in &config.queues {
            let dispatch = jobwire_core::queue_dispatch(&self.pool, &queue.name).await?;
            if let (Dispatch::Broker { topic }, None) = (&dispatch, &self.transport) {
                return Err(WorkerError::Config(format!(
                    "queue {} is dispatched through the broker (topic {topic}); give the worker a transport",
                    queue.name
                )));
            }
            dispatches.push((queue.clone(), dispatch));
        }
        let runtime = JobRuntime::start_with_stats(
            self.pool.clone(),
            self.registry,
            config.runtime.clone(),
            self.stats.clone(),
        );
        tracing::info!(worker_id = runtime.worker_id(), queues = ?dispatches, "worker started");

        let stop_fetching = shutdown.child_token();
        let wake_ups: HashMap<String, Arc<Notify>> = dispatches
            .iter()
            .filter(|(_, dispatch)| *dispatch == Dispatch::Postgres)
            .map(|(queue, _)| (queue.name.clone(), Arc::new(Notify::new())))
            .collect();

        let mut fetchers = JoinSet::new();
        if !wake_ups.is_empty() {
            fetchers.spawn(listen_for_wake_ups(
                self.pool.clone(),
                wake_ups.clone(),
                stop_fetching.clone(),
            ));
        }
        for (queue, dispatch) in dispatches {
            match (dispatch, &self.transport) {
                (Dispatch::Broker { topic }, Some(transport)) => {
                    let mut options = config.subscribe.clone();
                    options.prefetch = u16::try_from(queue.concurrency).unwrap_or(u16::MAX);
                    fetchers.spawn(consume_queue(
                        runtime.clone(),
                        transport.clone(),
                        topic,
                        options,
                        queue.concurrency,
                        config.receive_wait,
                        stop_fetching.clone(),
                    ));
                }
                _ => {
                    fetchers.spawn(fetch_queue(
                        runtime.clone(),
                        wake_ups[&queue.name].clone(),
                        queue,
                        config.claim_batch_size,
                        config.claim_linger,
                        config.poll_interval,
                        stop_fetching.clone(),
                    ));
                }
            }
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
        if let Some(reconciler) = config.reconciler.clone() {
            maintenance.spawn(
                Reconciler::new(self.pool.clone(), reconciler).run(stop_maintenance.clone()),
            );
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

/// Claim and run jobs of one PostgreSQL-path queue until `stop`.
async fn fetch_queue(
    runtime: JobRuntime,
    wake_up: Arc<Notify>,
    queue: QueueConfig,
    batch_size: usize,
    linger: Duration,
    poll_interval: Duration,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(queue.concurrency));
    let mut error_pause = Duration::from_millis(100);
    // Whether the last claim filled every slot it asked for.
    let mut backlog = false;
    let enough = batch_size.min(queue.concurrency).div_ceil(2);
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
        if backlog && free.len() < enough && !linger.is_zero() {
            let deadline = tokio::time::Instant::now() + linger;
            while free.len() < enough {
                tokio::select! {
                    slot = slots.clone().acquire_owned() => {
                        free.push(slot.expect("semaphore is never closed"));
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = stop.cancelled() => return,
                }
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
                backlog = got == wanted;
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
                backlog = false;
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

/// The job a wake-up names: the `jobwire-job-id` header, or `job_id` in a
/// JSON body. `None` for anything else (garbage is acked, never run).
fn woken_job(delivery: &Delivery) -> Option<uuid::Uuid> {
    if let Some(id) = delivery.headers.get(header::JOB_ID)
        && let Ok(id) = id.parse()
    {
        return Some(id);
    }
    let body: serde_json::Value = serde_json::from_slice(&delivery.payload).ok()?;
    body.get("job_id")?.as_str()?.parse().ok()
}

fn count_miss(stats: &WorkerStats, miss: &ClaimMiss) {
    bump(match miss {
        ClaimMiss::Unknown => &stats.wake_ups_unknown,
        ClaimMiss::Held => &stats.wake_ups_held,
        ClaimMiss::Finished { .. } => &stats.wake_ups_finished,
        ClaimMiss::NotDue { .. } => &stats.wake_ups_not_due,
        ClaimMiss::Contended => &stats.wake_ups_contended,
        #[allow(unreachable_patterns)]
        _ => &stats.wake_ups_unknown,
    });
}

/// Subscribe to `topic`, retrying until it works or `stop`.
async fn subscribe(
    transport: &dyn Transport,
    topic: &str,
    options: &SubscribeOptions,
    stop: &CancellationToken,
) -> Option<Box<dyn Subscriber>> {
    let mut pause = Duration::from_millis(100);
    loop {
        match transport.subscribe(topic, options).await {
            Ok(subscriber) => return Some(subscriber),
            Err(err) => {
                tracing::warn!(%topic, error = %err, "cannot subscribe; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(jittered(pause, 0.2)) => {}
                    _ = stop.cancelled() => return None,
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Receive wake-ups for one broker-dispatched queue and run the jobs they
/// let this worker claim, until `stop`.
async fn consume_queue(
    runtime: JobRuntime,
    transport: Arc<dyn Transport>,
    topic: String,
    options: SubscribeOptions,
    concurrency: usize,
    receive_wait: Duration,
    stop: CancellationToken,
) {
    let Some(mut subscriber) = subscribe(transport.as_ref(), &topic, &options, &stop).await else {
        return;
    };
    let stats = runtime.stats();
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut pause = Duration::from_millis(100);
    loop {
        // Receive only as many wake-ups as there are free slots: the broker
        // keeps the rest (and other workers can take them).
        let first = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("semaphore is never closed"),
            _ = stop.cancelled() => break,
        };
        let mut free = vec![first];
        while let Ok(slot) = slots.clone().try_acquire_owned() {
            free.push(slot);
        }
        let received = tokio::select! {
            received = subscriber.receive(free.len(), receive_wait) => received,
            _ = stop.cancelled() => break,
        };
        let deliveries = match received {
            Ok(deliveries) => deliveries,
            Err(err) => {
                tracing::warn!(%topic, error = %err, "receive failed; retrying");
                drop(free);
                tokio::select! {
                    _ = tokio::time::sleep(jittered(pause, 0.2)) => {}
                    _ = stop.cancelled() => break,
                }
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        pause = Duration::from_millis(100);
        if deliveries.is_empty() {
            continue;
        }
        stats.wake_ups.fetch_add(
            deliveries.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut job_ids = Vec::with_capacity(deliveries.len());
        for delivery in &deliveries {
            match woken_job(delivery) {
                None => {
                    bump(&stats.wake_ups_garbage);
                    tracing::warn!(%topic, message = %delivery.broker_message_id,
                        "delivery names no job; acknowledged and dropped");
                }
                Some(job_id) if job_ids.contains(&job_id) => bump(&stats.wake_ups_duplicate),
                Some(job_id) => job_ids.push(job_id),
            }
        }
        let receipts: Vec<_> = deliveries.iter().map(|d| d.receipt.clone()).collect();
        let claimed = match jobwire_core::claim_by_ids(
            runtime.pool(),
            &job_ids,
            runtime.worker_id(),
            runtime.lease(),
        )
        .await
        {
            Ok(claimed) => claimed,
            Err(err) => {
                // Nothing was claimed: give the wake-ups back so they come
                // again (or, where the broker cannot, the reconciler).
                bump(&stats.database_errors);
                tracing::warn!(%topic, error = %err, "claim failed; returning the wake-ups");
                if let Err(err) = subscriber.nack(&receipts, true).await {
                    tracing::warn!(%topic, error = %err, "nack failed");
                }
                drop(free);
                tokio::select! {
                    _ = tokio::time::sleep(jittered(pause, 0.2)) => {}
                    _ = stop.cancelled() => break,
                }
                continue;
            }
        };
        for (_, miss) in &claimed.missed {
            count_miss(&stats, miss);
        }
        for (job, slot) in claimed.claimed.into_iter().zip(free.drain(..)) {
            runtime.spawn(job, Some(slot));
        }
        drop(free);
        // The claim has committed: the wake-ups have done their work.
        if let Err(err) = subscriber.ack(&receipts).await {
            tracing::warn!(%topic, error = %err, "ack failed; the wake-ups will come again and find their jobs held");
        }
    }
    if let Err(err) = subscriber.close().await {
        tracing::warn!(%topic, error = %err, "closing the subscriber failed");
    }
}
