//! The benchmark's settings: the paths under test and the workload settings.

use std::sync::Arc;
use std::time::Duration;

use jobwire_consumer::{RuntimeConfig, WorkerConfig};
use jobwire_relay::RelayConfig;
use jobwire_transport::Transport;

/// One dispatch path under test.
#[derive(Clone)]
pub struct PathUnderTest {
    /// Label in the report (`postgres`, `rabbitmq`, ...).
    pub name: String,
    /// `None` for the PostgreSQL path.
    pub transport: Option<Arc<dyn Transport>>,
    /// Jobs for this path (SQS against an emulator is scaled down).
    pub jobs: usize,
    /// Jobs of the drain run (the others use [`PathUnderTest::jobs`]): a
    /// drain long enough to outweigh the worker's start, without an end to
    /// end run as long.
    pub drain_jobs: usize,
    /// Outbox rows for the relay-alone run.
    pub relay_rows: usize,
    /// Bulk jobs queued before the urgent stream starts.
    pub burst_jobs: usize,
    /// Open-loop arrival rate (jobs/s) of the latency run.
    pub rate: u32,
    /// Outbox rows per second in the outbox-lag run.
    pub lag_rate: u32,
}

/// Workload settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Worker slots.
    pub workers: usize,
    /// The worker's claim linger (see `WorkerConfig::claim_linger`).
    pub claim_linger: Duration,
    /// The worker's completion linger (see `RuntimeConfig::completion_linger`).
    pub completion_linger: Duration,
    /// The worker's local queue (see `WorkerConfig::claim_ahead`).
    pub claim_ahead: usize,
    /// How long the latency run (and the urgent stream) lasts.
    pub rate_duration: Duration,
    /// Urgent jobs per second during the burst run.
    pub urgent_rate: u32,
    /// Producers in the end-to-end run.
    pub producers: usize,
    /// Single-job end-to-end runs per path (the report gives their median
    /// and range: one run of a contended commit path says little).
    pub end_to_end_runs: usize,
    /// How long the plain commit-rate probe runs before the single-job
    /// end-to-end runs (zero: not measured).
    pub commit_probe: Duration,
    /// The noisy tenant's backlog (0: the noisy-tenant runs are skipped).
    pub noisy_jobs: usize,
    /// Jobs per second of each of the ten quiet tenants meanwhile.
    pub quiet_tenant_rate: u32,
    /// The tenant cap of the "caps on" noisy-tenant run.
    pub noisy_tenant_cap: u32,
    /// How long each job of the noisy-tenant runs works, holding its slot
    /// (zero: no-op jobs, as in every other run). A cap's own cost shows
    /// against no-op jobs; what it costs a queue whose jobs do work shows
    /// only with work.
    pub noisy_job_work: Duration,
    /// Bytes of filler in each job's payload.
    pub payload_bytes: usize,
    /// Jobs (and business rows) per transaction in the batched end-to-end run.
    pub enqueue_batch: usize,
    /// Outbox rows per relay pass (by default the relay's own, so that the
    /// broker paths are measured as `jobwire run` and `jobwire relay` run).
    pub relay_batch_size: usize,
    /// Relay drain tasks (by default the relay's own).
    pub relay_concurrency: usize,
    /// Give up on a run after this long.
    pub timeout: Duration,
    /// Draw progress bars on a terminal.
    pub progress: bool,
    /// Leave each run's jobs in the table (by default they are deleted
    /// once measured, and the tables vacuumed).
    pub keep_jobs: bool,
    /// Record Prometheus metrics as a served node does: the recorder
    /// installed, and the database collector running beside every run's
    /// node (to measure what metrics cost).
    pub metrics: bool,
    /// On the Kafka path, how often the run's topics are trimmed below what
    /// its consumer group has committed (`None`: never; the `kafka_trim`
    /// module says why).
    pub kafka_trim: Option<Duration>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workers: 64,
            claim_linger: WorkerConfig::default().claim_linger,
            completion_linger: RuntimeConfig::default().completion_linger,
            claim_ahead: WorkerConfig::default().claim_ahead,
            rate_duration: Duration::from_secs(10),
            urgent_rate: 50,
            producers: 8,
            end_to_end_runs: 5,
            commit_probe: Duration::from_secs(5),
            noisy_jobs: 0,
            quiet_tenant_rate: 10,
            noisy_tenant_cap: 48,
            noisy_job_work: Duration::ZERO,
            payload_bytes: 100,
            enqueue_batch: 100,
            relay_batch_size: RelayConfig::default().batch_size,
            relay_concurrency: RelayConfig::default().concurrency,
            timeout: Duration::from_secs(600),
            progress: true,
            keep_jobs: false,
            metrics: false,
            kafka_trim: Some(Duration::from_millis(250)),
        }
    }
}
