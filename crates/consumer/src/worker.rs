//! The worker: one job runtime fed by two kinds of wake-up source, chosen
//! per queue by the dispatch the database records for it (`job_queues`):
//!
//! - PostgreSQL path: SKIP LOCKED claims, woken by LISTEN/NOTIFY with a
//!   jittered poll fallback, claiming ahead into a local queue while a
//!   backlog of short jobs lasts;
//! - broker path: deliveries from a [`Transport`] subscriber, each only a
//!   wake-up: one fenced `claim_by_ids` per received batch, then the batch is
//!   acknowledged (claimed or not), and only claimed jobs run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobwire_core::Dispatch;
#[cfg(doc)]
use jobwire_core::WAKE_CHANNEL;
use jobwire_transport::{SubscribeOptions, Transport};
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker_path::{BrokerQueue, SafetyNet, consume_queue};
use crate::postgres_path::{ClaimSettings, fetch_queue, listen_for_wake_ups};
use crate::stats::WorkerStats;
use crate::{HandlerRegistry, JobRuntime, RuntimeConfig, WorkerReport};

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
    /// PostgreSQL path: most jobs a queue claims beyond its concurrency,
    /// held in a local queue until a slot frees. Used only while a backlog
    /// lasts, and only as many as the queue's handlers start within 50 ms
    /// at their recent pace (none for slow jobs), so that one claim and one
    /// completion batch serve hundreds of short jobs. A job's attempt starts
    /// when its handler does; one given back unstarted (shutdown, a cancel
    /// request, a lost lease, or a wait for a slot past one second) has no
    /// attempt counted. Zero turns it off.
    pub claim_ahead: usize,
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
    /// Broker path: consumer group (on Kafka the prefix of one group per
    /// topic) and visibility timeout (the prefetch is each queue's
    /// concurrency).
    pub subscribe: SubscribeOptions,
    /// How long shutdown waits for running jobs before cancelling them.
    pub shutdown_timeout: Duration,
    /// Broker path: a due job that has waited this long past its
    /// `run_after` without a wake-up claiming it is claimed straight from
    /// the table (the safety net; counted as `safety_net_claims`). `None`
    /// turns the net off, leaving recovery to the reconciler alone. Default
    /// 3 minutes: three times the reconciler's default grace, so the net
    /// only acts when a re-wake did not help either.
    pub safety_net_after: Option<Duration>,
    /// Broker path: how often the safety net looks (jittered by ±20 %).
    pub safety_net_interval: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            runtime: RuntimeConfig::default(),
            queues: vec![QueueConfig::new(jobwire_core::NewJob::DEFAULT_QUEUE, 16)],
            claim_batch_size: 500,
            claim_ahead: 512,
            claim_linger: Duration::from_millis(2),
            poll_interval: Duration::from_secs(1),
            receive_wait: Duration::from_secs(1),
            subscribe: SubscribeOptions::default(),
            shutdown_timeout: Duration::from_secs(30),
            safety_net_after: Some(Duration::from_secs(180)),
            safety_net_interval: Duration::from_secs(5),
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
    /// A claim loop (or the LISTEN loop) ended before shutdown: a bug, such
    /// as a row it could not read. The worker stopped rather than stay up
    /// without claiming: a supervisor restarts it, and the exit says why.
    #[error("a claim loop of the worker ended: {0}; the worker stopped")]
    ClaimLoopEnded(String),
    /// The lease keeper or the completer ended before shutdown (a bug).
    /// Without them no lease is renewed or no outcome written: the worker
    /// cancelled its running jobs (given back as retries where the
    /// completer could still write) and stopped.
    #[error("a background loop of the worker ended: {0}; the worker stopped")]
    BackgroundLoopEnded(String),
}

impl WorkerConfig {
    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), WorkerError> {
        self.runtime.validate().map_err(WorkerError::Config)?;
        if self.queues.is_empty() {
            return Err(WorkerError::Config("at least one queue is needed".into()));
        }
        for (index, queue) in self.queues.iter().enumerate() {
            if queue.name.trim().is_empty() || queue.concurrency == 0 {
                return Err(WorkerError::Config(format!(
                    "queue {:?} needs a name and a concurrency of at least 1",
                    queue.name
                )));
            }
            // Two claim loops of one queue, each with its own slots: the
            // concurrency would be neither of the two.
            if self.queues[..index]
                .iter()
                .any(|earlier| earlier.name == queue.name)
            {
                return Err(WorkerError::Config(format!(
                    "queue {:?} is given twice: give it once, with the concurrency it should have",
                    queue.name
                )));
            }
        }
        // The local queue and the slots share one semaphore, whose
        // `acquire_many` counts in u32 (the claim loop takes one more than
        // the claim-ahead places at once).
        let most = tokio::sync::Semaphore::MAX_PERMITS.min(u32::MAX as usize - 1);
        if self.queues.iter().any(|queue| {
            queue
                .concurrency
                .checked_add(self.claim_ahead)
                .is_none_or(|held| held > most)
        }) {
            return Err(WorkerError::Config(format!(
                "a queue's concurrency plus claim_ahead ({}) is too large",
                self.claim_ahead
            )));
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
        if self.safety_net_after.is_some_and(|after| after.is_zero())
            || self.safety_net_interval.is_zero()
        {
            return Err(WorkerError::Config(
                "safety_net_after and safety_net_interval must be positive".into(),
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
        let serving = dispatches
            .iter()
            .map(|(queue, dispatch)| format!("{}={} ({dispatch})", queue.name, queue.concurrency))
            .collect::<Vec<_>>()
            .join(", ");
        // Where the broker is, for an operator reading why a queue idles.
        let broker = self
            .transport
            .as_ref()
            .map(|transport| format!("{} at {}", transport.name(), transport.address()));
        tracing::info!(worker_id = runtime.worker_id(), queues = %serving, broker = broker.as_deref(),
            "worker started");

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
        for (queue, dispatch) in &dispatches {
            match (dispatch, &self.transport) {
                (Dispatch::Broker { topic }, Some(transport)) => {
                    let mut options = config.subscribe.clone();
                    options.prefetch = u16::try_from(queue.concurrency).unwrap_or(u16::MAX);
                    let served_from_topic = dispatches
                        .iter()
                        .filter(|(_, other)| other == dispatch)
                        .map(|(other, _)| other.name.clone())
                        .collect();
                    let broker_queue = BrokerQueue {
                        runtime: runtime.clone(),
                        transport: transport.clone(),
                        topic: topic.clone(),
                        queue: queue.name.clone(),
                        served_from_topic,
                        options,
                        concurrency: queue.concurrency,
                        receive_wait: config.receive_wait,
                        safety_net: config
                            .safety_net_after
                            .map(|after| SafetyNet::new(after, config.safety_net_interval)),
                    };
                    fetchers.spawn(consume_queue(broker_queue, stop_fetching.clone()));
                }
                _ => {
                    fetchers.spawn(fetch_queue(
                        runtime.clone(),
                        wake_ups[&queue.name].clone(),
                        queue.clone(),
                        ClaimSettings {
                            batch_size: config.claim_batch_size,
                            claim_ahead: config.claim_ahead,
                            linger: config.claim_linger,
                            poll_interval: config.poll_interval,
                        },
                        stop_fetching.clone(),
                    ));
                }
            }
        }

        // The loops end only when told to (`stop_fetching`, a child of
        // `shutdown`). One that ends before (a panic) would leave the
        // process up, ready by its health checks, and claiming nothing on
        // that queue: `join_loops` then stops the others, and so the whole
        // worker. A breakdown of the runtime stops the claims too.
        let ended_early = tokio::select! {
            biased;
            why = runtime.broken_down() => Some(WorkerError::BackgroundLoopEnded(why)),
            early = jobwire_loop::join_loops(&mut fetchers, "worker", &stop_fetching) => {
                early.map(WorkerError::ClaimLoopEnded)
            }
        };
        match &ended_early {
            None => tracing::info!("shutting down: no more claims"),
            Some(why) => tracing::error!(error = %why, "stopping the worker early"),
        }
        // After a breakdown the claim loops still run: stop them, and wait.
        stop_fetching.cancel();
        jobwire_loop::join_loops(&mut fetchers, "worker", &stop_fetching).await;
        tracing::info!(running = runtime.in_flight(), "draining running jobs");
        // Kept to ask, once stopped, whether the runtime broke down while
        // it drained (its loops run until the drain is over).
        let watched = runtime.clone();
        let report = runtime.shutdown(config.shutdown_timeout).await;
        let ended_early =
            ended_early.or_else(|| watched.breakdown().map(WorkerError::BackgroundLoopEnded));
        tracing::info!("worker stopped: {}", jobwire_loop::nonzero_counts(&report));
        match ended_early {
            None => Ok(report),
            Some(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_ahead_the_claim_loop_cannot_count_is_refused() {
        let with = |claim_ahead: usize| WorkerConfig {
            claim_ahead,
            ..WorkerConfig::default()
        };
        assert!(with(512).validate().is_ok());
        // The queue's 16 slots plus these, plus the one the claim loop
        // takes with them, must count in u32.
        assert!(with(u32::MAX as usize - 17).validate().is_ok());
        for too_many in [u32::MAX as usize - 16, 1 << 32, usize::MAX] {
            let refused = with(too_many).validate().unwrap_err();
            assert!(refused.to_string().contains("too large"), "{refused}");
        }
    }
}
