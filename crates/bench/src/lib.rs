//! jobwire-bench: runs the same workload through every dispatch path on one
//! machine and reports them side by side.
//!
//! For each path (PostgreSQL, and the broker paths through the in-memory
//! transport, RabbitMQ, SQS and Kafka) it measures:
//! - **drain**: N no-op jobs enqueued up front, then a worker (and, for a
//!   broker, the relay) started: jobs/s until all are SUCCEEDED;
//! - **end to end**: concurrent producers, each job in a business
//!   transaction of its own (a business row + the job), until all succeed;
//!   and the same with a batch of business rows + jobs per transaction;
//! - **latency at a steady rate** (open loop) and for **urgent jobs while a
//!   bulk backlog drains**, from the database's own timestamps;
//! - for broker paths, the **relay alone** (a backlog of outbox rows to the
//!   broker) and the **outbox lag** at a steady rate;
//! - **database cost** of the drain: commits (`xact_commit` delta), WAL bytes
//!   (`pg_current_wal_lsn` delta) and rows written per job, from PostgreSQL's
//!   own statistics;
//! - **correctness**: every job SUCCEEDED exactly once (the handler counts
//!   its runs; the table is checked).
//!
//! Every run uses queues of its own, so runs do not disturb each other.
#![warn(missing_docs)]

mod relay_runs;
mod report;

pub use relay_runs::{OutboxLag, RelayRun, outbox_lag, relay_alone};
pub use report::{chart_svg, table};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use jobwire_consumer::{
    HandlerRegistry, JobContext, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
};
use jobwire_core::{Dispatch, NewJob};
use jobwire_relay::{Relay, RelayConfig, TopicLane};
use jobwire_transport::Transport;
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// One dispatch path under test.
#[derive(Clone)]
pub struct PathUnderTest {
    /// Label in the report (`postgres`, `rabbitmq`, ...).
    pub name: String,
    /// `None` for the PostgreSQL path.
    pub transport: Option<Arc<dyn Transport>>,
    /// Jobs for this path (SQS against an emulator is scaled down).
    pub jobs: usize,
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
    /// How long the latency run (and the urgent stream) lasts.
    pub rate_duration: Duration,
    /// Urgent jobs per second during the burst run.
    pub urgent_rate: u32,
    /// Producers in the end-to-end run.
    pub producers: usize,
    /// Bytes of filler in each job's payload.
    pub payload_bytes: usize,
    /// Jobs (and business rows) per transaction in the batched end-to-end run.
    pub enqueue_batch: usize,
    /// Outbox rows per relay pass.
    pub relay_batch_size: usize,
    /// Relay drain tasks.
    pub relay_concurrency: usize,
    /// Give up on a run after this long.
    pub timeout: Duration,
    /// Draw progress bars on a terminal.
    pub progress: bool,
    /// Leave each run's jobs in the table (by default they are deleted
    /// once measured, and the tables vacuumed).
    pub keep_jobs: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workers: 64,
            claim_linger: WorkerConfig::default().claim_linger,
            rate_duration: Duration::from_secs(10),
            urgent_rate: 50,
            producers: 8,
            payload_bytes: 100,
            enqueue_batch: 100,
            relay_batch_size: 1000,
            relay_concurrency: 2,
            timeout: Duration::from_secs(600),
            progress: true,
            keep_jobs: false,
        }
    }
}

/// PostgreSQL's own counters before and after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DatabaseCost {
    /// Write transactions (transaction ids assigned) per job: the commits
    /// that each cost a WAL flush. Read-only transactions are not counted.
    pub commits_per_job: f64,
    /// WAL bytes per job.
    pub wal_bytes_per_job: f64,
    /// Rows inserted + updated + deleted per job.
    pub rows_written_per_job: f64,
}

/// One measured run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// Jobs in the run.
    pub jobs: usize,
    /// Wall time from start to the last job SUCCEEDED.
    pub seconds: f64,
    /// Jobs per second.
    pub jobs_per_second: f64,
    /// Database cost of the run.
    pub cost: DatabaseCost,
    /// Jobs that did not end SUCCEEDED after exactly one run (must be 0).
    pub lost_or_repeated: usize,
}

/// Latency percentiles in milliseconds, from the database's timestamps:
/// `created_at` (enqueue), the claim (`heartbeat_at` of a job that finished
/// before its first heartbeat) and `finished_at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, sqlx::FromRow)]
pub struct Latency {
    /// Jobs measured.
    pub jobs: i64,
    /// Enqueue to start, median.
    pub start_p50_ms: f64,
    /// Enqueue to start, 95th percentile.
    pub start_p95_ms: f64,
    /// Enqueue to start, 99th percentile.
    pub start_p99_ms: f64,
    /// Enqueue to start, worst.
    pub start_max_ms: f64,
    /// Enqueue to finish, median.
    pub finish_p50_ms: f64,
    /// Enqueue to finish, 95th percentile.
    pub finish_p95_ms: f64,
    /// Enqueue to finish, 99th percentile.
    pub finish_p99_ms: f64,
    /// Enqueue to finish, worst.
    pub finish_max_ms: f64,
    /// Urgent-under-burst only: bulk jobs queued before the urgent stream.
    #[sqlx(default)]
    pub bulk_jobs: i64,
    /// Urgent-under-burst only: bulk jobs still unfinished when the last
    /// urgent job finished (0 would mean the backlog was gone too soon).
    #[sqlx(default)]
    pub bulk_left_at_end: i64,
}

/// Everything measured for one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathReport {
    /// The path.
    pub path: String,
    /// Drain of pre-enqueued jobs.
    pub drain: RunResult,
    /// Producers, one business transaction per job.
    pub end_to_end: RunResult,
    /// Producers, `enqueue_batch` jobs per business transaction.
    pub end_to_end_batched: RunResult,
    /// Open-loop arrivals at a steady rate.
    pub steady_rate: Latency,
    /// The arrival rate of `steady_rate`, jobs/s.
    pub rate: u32,
    /// Urgent jobs on their own queue while a bulk backlog drains.
    pub urgent_under_burst: Latency,
    /// The relay alone (broker paths).
    pub relay_alone: Option<RelayRun>,
    /// Outbox insert → delivery at a steady rate (broker paths).
    pub outbox_lag: Option<OutboxLag>,
}

impl PathReport {
    /// Jobs lost or run more than once over the throughput runs (must be 0).
    pub fn lost_or_repeated(&self) -> usize {
        self.drain.lost_or_repeated
            + self.end_to_end.lost_or_repeated
            + self.end_to_end_batched.lost_or_repeated
    }
}

/// The machine and database settings the numbers were taken on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Environment {
    /// CPU cores.
    pub cores: usize,
    /// CPU model, where the system says.
    pub cpu: String,
    /// PostgreSQL version.
    pub postgres: String,
    /// `synchronous_commit`.
    pub synchronous_commit: String,
    /// `fsync`.
    pub fsync: String,
    /// `wal_sync_method`.
    pub wal_sync_method: String,
    /// One durable single-row commit, measured (median of 200 in a row):
    /// what one job state change per commit would cost.
    pub durable_commit_ms: f64,
    /// Debug or release build of the harness.
    pub build: &'static str,
}

/// Read the environment.
pub async fn environment(pool: &PgPool) -> Result<Environment> {
    let setting = |name: &'static str| async move {
        sqlx::query_scalar::<_, String>("SELECT setting FROM pg_settings WHERE name = $1")
            .bind(name)
            .fetch_one(pool)
            .await
    };
    Ok(Environment {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        cpu: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("model name"))
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown".into()),
        postgres: setting("server_version").await?,
        synchronous_commit: setting("synchronous_commit").await?,
        fsync: setting("fsync").await?,
        wal_sync_method: setting("wal_sync_method").await?,
        durable_commit_ms: durable_commit_ms(pool).await?,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    })
}

/// Median time of one single-row commit, 200 in a row on one connection.
async fn durable_commit_ms(pool: &PgPool) -> Result<f64> {
    let mut conn = pool.acquire().await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_commit_probe (at timestamptz NOT NULL)")
        .execute(&mut *conn)
        .await?;
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let started = Instant::now();
        sqlx::query("INSERT INTO bench_commit_probe VALUES (now())")
            .execute(&mut *conn)
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    sqlx::query("TRUNCATE bench_commit_probe")
        .execute(&mut *conn)
        .await?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A progress bar on stderr for a long wait (hidden off a terminal).
pub(crate) fn progress_bar(
    config: &BenchConfig,
    len: usize,
    message: String,
) -> indicatif::ProgressBar {
    if !config.progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64).with_message(message);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg:28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    xids: i64,
    wal: i64,
    rows: i64,
}

/// Read the counters. Transaction ids and the WAL position are exact at
/// once; row counts come from the statistics system, which a backend
/// reports when it exits, so callers close the run's connections first.
pub(crate) async fn counters(pool: &PgPool) -> Result<Counters> {
    let rows: i64 = sqlx::query_scalar(
        "SELECT (tup_inserted + tup_updated + tup_deleted)::bigint
         FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await?;
    // Assigns a transaction id itself: one per call, subtracted in `cost`.
    let (xids, wal): (i64, i64) = sqlx::query_as(
        "SELECT pg_current_xact_id()::text::bigint, (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint",
    )
    .fetch_one(pool)
    .await?;
    Ok(Counters { xids, wal, rows })
}

pub(crate) fn cost(before: Counters, after: Counters, jobs: usize) -> DatabaseCost {
    let per = |delta: i64| delta as f64 / jobs.max(1) as f64;
    DatabaseCost {
        commits_per_job: per(after.xids - before.xids - 1),
        wal_bytes_per_job: per(after.wal - before.wal),
        rows_written_per_job: per(after.rows - before.rows),
    }
}

/// Handler runs per job.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<Uuid, u32>>>);

fn registry(runs: &Runs) -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    let runs = runs.clone();
    registry.register("bench_noop", move |ctx: JobContext| {
        let runs = runs.clone();
        async move {
            *runs
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(ctx.job_id())
                .or_default() += 1;
            Ok(())
        }
    });
    registry
}

/// A fresh queue for one run, dispatched along `path`.
async fn fresh_queue(pool: &PgPool, path: &PathUnderTest, run: &str) -> Result<(String, Dispatch)> {
    let suffix = &Uuid::new_v4().simple().to_string()[..10];
    let queue = format!("bench-{run}-{suffix}");
    let dispatch = match path.transport {
        None => Dispatch::Postgres,
        Some(_) => Dispatch::Broker {
            topic: format!("bench-{}-{run}-{suffix}", path.name),
        },
    };
    jobwire_core::set_queue_dispatch(pool, &queue, &dispatch).await?;
    Ok((queue, dispatch))
}

fn payload(config: &BenchConfig, i: usize) -> serde_json::Value {
    serde_json::json!({ "i": i, "filler": "x".repeat(config.payload_bytes) })
}

struct Running {
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<
        Result<jobwire_consumer::WorkerReport, jobwire_consumer::WorkerError>,
    >,
    relays:
        Vec<tokio::task::JoinHandle<Result<jobwire_relay::RelayReport, jobwire_relay::RelayError>>>,
}

fn start(
    pool: &PgPool,
    path: &PathUnderTest,
    queue: &str,
    config: &BenchConfig,
    runs: &Runs,
) -> Running {
    start_queues(
        pool,
        path,
        vec![QueueConfig::new(queue, config.workers)],
        &[],
        config,
        runs,
    )
}

/// Start a worker for `queues` and, on a broker path, the relay: one relay
/// for every topic, or, when `dedicated_topics` are given, a lane of their
/// own for those topics beside a relay for the rest.
fn start_queues(
    pool: &PgPool,
    path: &PathUnderTest,
    queues: Vec<QueueConfig>,
    dedicated_topics: &[String],
    config: &BenchConfig,
    runs: &Runs,
) -> Running {
    let shutdown = CancellationToken::new();
    let worker_config = WorkerConfig {
        runtime: RuntimeConfig::default(),
        queues,
        claim_batch_size: config.workers,
        claim_linger: config.claim_linger,
        poll_interval: Duration::from_millis(500),
        receive_wait: Duration::from_millis(200),
        sweeper: None,
        retention: None,
        reconciler: None,
        // A consumer group of its own: no run waits on another's members.
        subscribe: jobwire_transport::SubscribeOptions {
            group: format!("bench-{}", Uuid::new_v4().simple()),
            ..jobwire_transport::SubscribeOptions::default()
        },
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(pool.clone(), registry(runs), worker_config);
    let mut relays = Vec::new();
    if let Some(transport) = &path.transport {
        worker = worker.with_transport(transport.clone());
        let relay_config = RelayConfig {
            batch_size: config.relay_batch_size,
            concurrency: config.relay_concurrency,
            poll_interval: Duration::from_millis(200),
            ..RelayConfig::default()
        };
        let mut lanes = vec![relay_config.clone()];
        if !dedicated_topics.is_empty() {
            lanes = vec![
                RelayConfig {
                    lane: TopicLane::Except(dedicated_topics.to_vec()),
                    ..relay_config.clone()
                },
                RelayConfig {
                    lane: TopicLane::Only(dedicated_topics.to_vec()),
                    concurrency: 1,
                    ..relay_config
                },
            ];
        }
        for lane in lanes {
            relays.push(tokio::spawn(
                Relay::new(pool.clone(), transport.clone(), lane).run(shutdown.clone()),
            ));
        }
    }
    Running {
        worker: tokio::spawn(worker.run(shutdown.clone())),
        shutdown,
        relays,
    }
}

impl Running {
    async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        self.worker.await??;
        for relay in self.relays {
            relay.await??;
        }
        Ok(())
    }
}

/// Wait until `jobs` jobs of `queue` have finished, with a progress bar.
async fn wait_for_queue(
    pool: &PgPool,
    queue: &str,
    jobs: usize,
    config: &BenchConfig,
    label: String,
) -> Result<()> {
    let deadline = Instant::now() + config.timeout;
    let bar = progress_bar(config, jobs, label.clone());
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE queue = $1 AND finished_at IS NOT NULL",
        )
        .bind(queue)
        .fetch_one(pool)
        .await?;
        bar.set_position(done as u64);
        if done as usize >= jobs {
            bar.finish_and_clear();
            return Ok(());
        }
        if Instant::now() > deadline {
            bar.abandon();
            bail!(
                "{label}: {done} of {jobs} jobs finished within {:?}",
                config.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Jobs of `queue` that did not end SUCCEEDED after exactly one run.
async fn lost_or_repeated(pool: &PgPool, queue: &str, runs: &Runs, jobs: usize) -> Result<usize> {
    let good: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED' AND attempt_count = 1",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?;
    let runs = runs
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let repeated = runs.values().filter(|n| **n != 1).count();
    Ok(jobs.saturating_sub(good as usize) + repeated)
}

/// Connections for one run (worker, relay, producers), closed at its end so
/// that their statistics reach `pg_stat_database`.
async fn run_pool(pool: &PgPool, config: &BenchConfig) -> Result<PgPool> {
    let size = (config.producers + 2 * config.relay_concurrency + 12) as u32;
    let work = sqlx::postgres::PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .connect_with((*pool.connect_options()).clone())
        .await?;
    // Open every connection before the clock runs: setting up connections
    // is not what a run measures (it showed as a slow first second).
    let mut held = Vec::with_capacity(size as usize);
    for _ in 0..size {
        held.push(work.acquire().await?);
    }
    drop(held);
    Ok(work)
}

/// Drain: enqueue all jobs first, then time the worker (and relay).
pub async fn drain(pool: &PgPool, path: &PathUnderTest, config: &BenchConfig) -> Result<RunResult> {
    let (queue, _) = fresh_queue(pool, path, "drain").await?;
    enqueue_up_front(pool, &queue, path.jobs, config).await?;
    Measurement::begin(pool, path, queue, config)
        .await?
        .finish(pool, path, config, "drain")
        .await
}

/// A timed run: connections of its own, the counters at its start, and the
/// worker (and relay) it measures.
struct Measurement {
    work: PgPool,
    runs: Runs,
    queue: String,
    before: Counters,
    started: Instant,
    running: Running,
}

impl Measurement {
    async fn begin(
        pool: &PgPool,
        path: &PathUnderTest,
        queue: String,
        config: &BenchConfig,
    ) -> Result<Self> {
        let runs = Runs::default();
        let work = run_pool(pool, config).await?;
        let before = counters(pool).await?;
        let started = Instant::now();
        let running = start(&work, path, &queue, config, &runs);
        Ok(Measurement {
            work,
            runs,
            queue,
            before,
            started,
            running,
        })
    }

    /// Wait for every job, stop, and read the cost.
    async fn finish(
        self,
        pool: &PgPool,
        path: &PathUnderTest,
        config: &BenchConfig,
        label: &str,
    ) -> Result<RunResult> {
        wait_for_queue(
            pool,
            &self.queue,
            path.jobs,
            config,
            format!("{} {label}", path.name),
        )
        .await?;
        let seconds = self.started.elapsed().as_secs_f64();
        self.running.stop().await?;
        self.work.close().await;
        let after = counters(pool).await?;
        let result = RunResult {
            jobs: path.jobs,
            seconds,
            jobs_per_second: path.jobs as f64 / seconds,
            cost: cost(self.before, after, path.jobs),
            lost_or_repeated: lost_or_repeated(pool, &self.queue, &self.runs, path.jobs).await?,
        };
        clean_up(pool, &[&self.queue], config).await?;
        Ok(result)
    }
}

/// After a run has been measured: delete its jobs and queues and vacuum, so
/// that every run starts from the same small tables rather than from what
/// the runs before it left (finished rows that retention would archive).
async fn clean_up(pool: &PgPool, queues: &[&str], config: &BenchConfig) -> Result<()> {
    if config.keep_jobs {
        return Ok(());
    }
    let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
    sqlx::query("DELETE FROM jobs WHERE queue = ANY($1)")
        .bind(&queues)
        .execute(pool)
        .await?;
    sqlx::query("DELETE FROM job_queues WHERE queue = ANY($1)")
        .bind(&queues)
        .execute(pool)
        .await?;
    sqlx::query("VACUUM (ANALYZE) jobs, job_outbox, job_queues")
        .execute(pool)
        .await?;
    Ok(())
}

/// Enqueue `jobs` no-op jobs on `queue` in batches of 1,000 (a backlog).
async fn enqueue_up_front(
    pool: &PgPool,
    queue: &str,
    jobs: usize,
    config: &BenchConfig,
) -> Result<()> {
    let bar = progress_bar(config, jobs, format!("enqueueing on {queue}"));
    for start in (0..jobs).step_by(1000) {
        let chunk: Vec<NewJob> = (start..(start + 1000).min(jobs))
            .map(|i| NewJob::new("bench_noop", payload(config, i)).with_queue(queue))
            .collect();
        jobwire_core::enqueue_many(pool, &chunk).await?;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(())
}

/// End to end: producers write a business row and its job in one
/// transaction (`per_transaction` of each per transaction) while the worker
/// runs.
pub async fn end_to_end(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
    per_transaction: usize,
) -> Result<RunResult> {
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_orders (id uuid PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())")
        .execute(pool)
        .await?;
    let run = if per_transaction > 1 { "e2eb" } else { "e2e" };
    let (queue, _) = fresh_queue(pool, path, run).await?;
    let measurement = Measurement::begin(pool, path, queue.clone(), config).await?;
    let mut producers = tokio::task::JoinSet::new();
    let per_producer = path.jobs.div_ceil(config.producers.max(1));
    let per_transaction = per_transaction.max(1);
    for producer in 0..config.producers.max(1) {
        let (pool, queue, config) = (measurement.work.clone(), queue.clone(), config.clone());
        let first = producer * per_producer;
        let count = per_producer.min(path.jobs.saturating_sub(first));
        producers.spawn(async move {
            for start in (first..first + count).step_by(per_transaction) {
                let end = (start + per_transaction).min(first + count);
                let orders: Vec<Uuid> = (start..end).map(|_| Uuid::now_v7()).collect();
                let jobs: Vec<NewJob> = (start..end)
                    .map(|i| NewJob::new("bench_noop", payload(&config, i)).with_queue(&queue))
                    .collect();
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO bench_orders (id) SELECT * FROM unnest($1::uuid[])")
                    .bind(&orders)
                    .execute(&mut *tx)
                    .await?;
                jobwire_core::Enqueuer::default()
                    .enqueue_many_on(&mut tx, &jobs)
                    .await?;
                tx.commit().await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = producers.join_next().await {
        done??;
    }
    let label = if per_transaction > 1 {
        "end to end (batched)"
    } else {
        "end to end"
    };
    measurement.finish(pool, path, config, label).await
}

async fn latency(pool: &PgPool, queue: &str) -> Result<Latency> {
    Ok(sqlx::query_as(
        "WITH t AS (
            SELECT extract(epoch FROM heartbeat_at - created_at) * 1000 AS start_ms,
                   extract(epoch FROM finished_at - created_at) * 1000 AS finish_ms
            FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED')
         SELECT count(*) AS jobs,
                coalesce(percentile_cont(0.50) WITHIN GROUP (ORDER BY start_ms), 0)::float8 AS start_p50_ms,
                coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY start_ms), 0)::float8 AS start_p95_ms,
                coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY start_ms), 0)::float8 AS start_p99_ms,
                coalesce(max(start_ms), 0)::float8 AS start_max_ms,
                coalesce(percentile_cont(0.50) WITHIN GROUP (ORDER BY finish_ms), 0)::float8 AS finish_p50_ms,
                coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY finish_ms), 0)::float8 AS finish_p95_ms,
                coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY finish_ms), 0)::float8 AS finish_p99_ms,
                coalesce(max(finish_ms), 0)::float8 AS finish_max_ms
         FROM t",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?)
}

/// Enqueue one job per tick at `rate` for `duration` (open loop: a slow
/// enqueue does not delay the next one). Returns how many were enqueued.
async fn arrivals(
    pool: &PgPool,
    queue: &str,
    rate: u32,
    duration: Duration,
    config: &BenchConfig,
) -> Result<usize> {
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = (rate as u64 * duration.as_millis() as u64 / 1000) as usize;
    let mut enqueues = tokio::task::JoinSet::new();
    for i in 0..total {
        ticker.tick().await;
        let (pool, job) = (
            pool.clone(),
            NewJob::new("bench_noop", payload(config, i)).with_queue(queue),
        );
        enqueues.spawn(async move { jobwire_core::enqueue(&pool, &job).await });
    }
    while let Some(done) = enqueues.join_next().await {
        done??;
    }
    Ok(total)
}

/// Latency at a steady arrival rate.
pub async fn steady_rate(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<Latency> {
    let (queue, _) = fresh_queue(pool, path, "rate").await?;
    let runs = Runs::default();
    let work = run_pool(pool, config).await?;
    let running = start(&work, path, &queue, config, &runs);
    // Let the worker (and a broker consumer's group) settle before the clock runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = arrivals(&work, &queue, path.rate, config.rate_duration, config).await?;
    wait_for_queue(
        pool,
        &queue,
        total,
        config,
        format!("{} steady rate", path.name),
    )
    .await?;
    running.stop().await?;
    work.close().await;
    let latency = latency(pool, &queue).await?;
    clean_up(pool, &[&queue], config).await?;
    Ok(latency)
}

/// Urgent jobs at a steady rate on their own queue (own slots), while a
/// bulk backlog of `path.burst_jobs` drains on the same path.
pub async fn urgent_under_burst(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<Latency> {
    let (bulk, _) = fresh_queue(pool, path, "bulk").await?;
    let (urgent, urgent_dispatch) = fresh_queue(pool, path, "urgent").await?;
    enqueue_up_front(pool, &bulk, path.burst_jobs, config).await?;
    // On a broker path the urgent topic gets a relay lane of its own, as a
    // deployment with urgent queues would run it.
    let dedicated: Vec<String> = match urgent_dispatch {
        Dispatch::Broker { topic } => vec![topic],
        _ => Vec::new(),
    };
    let runs = Runs::default();
    let work = run_pool(pool, config).await?;
    let running = start_queues(
        &work,
        path,
        vec![
            QueueConfig::new(&bulk, config.workers),
            QueueConfig::new(&urgent, 8),
        ],
        &dedicated,
        config,
        &runs,
    );
    let total = arrivals(
        &work,
        &urgent,
        config.urgent_rate,
        config.rate_duration,
        config,
    )
    .await?;
    wait_for_queue(
        pool,
        &urgent,
        total,
        config,
        format!("{} urgent", path.name),
    )
    .await?;
    // The bulk backlog must still be draining for the figure to mean
    // anything; report how much was left when the urgent stream ended.
    let bulk_left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = $1 AND finished_at IS NULL")
            .bind(&bulk)
            .fetch_one(pool)
            .await?;
    tracing::info!(path = %path.name, bulk_left, "bench: urgent stream done");
    wait_for_queue(
        pool,
        &bulk,
        path.burst_jobs,
        config,
        format!("{} bulk", path.name),
    )
    .await?;
    running.stop().await?;
    work.close().await;
    let mut latency = latency(pool, &urgent).await?;
    latency.bulk_jobs = path.burst_jobs as i64;
    latency.bulk_left_at_end = bulk_left;
    clean_up(pool, &[&bulk, &urgent], config).await?;
    Ok(latency)
}

/// Every measurement for one path.
pub async fn run_path(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<PathReport> {
    tracing::info!(path = %path.name, jobs = path.jobs, "bench: drain");
    let drain = drain(pool, path, config).await?;
    tracing::info!(path = %path.name, jobs = path.jobs, "bench: end to end");
    let end_to_end_single = end_to_end(pool, path, config, 1).await?;
    tracing::info!(path = %path.name, jobs = path.jobs, batch = config.enqueue_batch, "bench: end to end, batched");
    let end_to_end_batched = end_to_end(pool, path, config, config.enqueue_batch).await?;
    tracing::info!(path = %path.name, rate = path.rate, "bench: steady rate");
    let steady_rate = steady_rate(pool, path, config).await?;
    tracing::info!(path = %path.name, bulk = path.burst_jobs, "bench: urgent under burst");
    let urgent_under_burst = urgent_under_burst(pool, path, config).await?;
    tracing::info!(path = %path.name, rows = path.relay_rows, "bench: relay alone");
    let relay_alone = relay_alone(pool, path, config).await?;
    tracing::info!(path = %path.name, rate = path.lag_rate, "bench: outbox lag");
    let outbox_lag = outbox_lag(pool, path, config).await?;
    Ok(PathReport {
        path: path.name.clone(),
        drain,
        end_to_end: end_to_end_single,
        end_to_end_batched,
        steady_rate,
        rate: path.rate,
        urgent_under_burst,
        relay_alone,
        outbox_lag,
    })
}

/// Run every measurement for every path, one path at a time, calling
/// `finished` with the reports so far after each path (a long run keeps
/// what it measured if a later path fails or is stopped). A path that
/// fails (a run past its timeout, a broker gone) does not stop the others:
/// its error is returned beside their reports.
pub async fn run(
    pool: &PgPool,
    paths: &[PathUnderTest],
    config: &BenchConfig,
    mut finished: impl FnMut(&[PathReport]),
) -> (Vec<PathReport>, Vec<(String, anyhow::Error)>) {
    let (mut reports, mut failures) = (Vec::new(), Vec::new());
    for path in paths {
        match run_path(pool, path, config).await {
            Ok(report) => {
                reports.push(report);
                finished(&reports);
            }
            Err(err) => {
                tracing::error!(path = %path.name, error = %format!("{err:#}"), "bench: path failed");
                failures.push((path.name.clone(), err));
            }
        }
    }
    (reports, failures)
}
