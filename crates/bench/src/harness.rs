//! Setting up and tearing down a run: queues, connections, the worker and relay, and waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use jobwire_consumer::{
    HandlerRegistry, JobContext, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
};
use jobwire_core::{Dispatch, NewJob};
use jobwire_relay::{Relay, RelayConfig, TopicLane};
use jobwire_server::{Node, RunningNode};
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

use crate::cost::{Counters, cost, counters};
use crate::{BenchConfig, PathUnderTest, RunResult};

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

/// Handler runs per job, and when the first one started.
#[derive(Clone, Default)]
pub(crate) struct Runs(Arc<Mutex<HashMap<Uuid, HandlerRuns>>>);

/// What the handler saw of one job.
#[derive(Clone, Copy)]
pub(crate) struct HandlerRuns {
    runs: u32,
    /// The first run's start, on the wall clock (the claim's timestamp is
    /// taken before the job reaches a handler).
    pub(crate) first_start: DateTime<Utc>,
    /// How long the handler's first run took, once it returned (timed for
    /// jobs that work only).
    first_run: Option<Duration>,
}

/// The job type of the bench's jobs that do nothing.
pub(crate) const NOOP_JOB: &str = "bench_noop";
/// The job type of the noisy-tenant runs' jobs when they work
/// (`BenchConfig::noisy_job_work`): the handler holds its slot that long.
pub(crate) const WORKING_JOB: &str = "bench_work";

fn registry(runs: &Runs, work: Duration) -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    for (job_type, work) in [(NOOP_JOB, Duration::ZERO), (WORKING_JOB, work)] {
        let runs = runs.clone();
        registry.register(job_type, move |ctx: JobContext| {
            let runs = runs.clone();
            async move {
                let started = Utc::now();
                let clock = Instant::now();
                let first = {
                    let mut runs = runs.lock();
                    let job = runs.entry(ctx.job_id()).or_insert(HandlerRuns {
                        runs: 0,
                        first_start: started,
                        first_run: None,
                    });
                    job.runs += 1;
                    job.runs == 1
                };
                // A job that waits, as one waiting on an API or a disk
                // does: it holds its slot (and its tenant's) without the
                // CPU the database and the worker share.
                // Timed only for jobs that work: a run's no-op jobs (its
                // warm-up) would otherwise be its shortest.
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                    if first && let Some(job) = runs.lock().get_mut(&ctx.job_id()) {
                        job.first_run = Some(clock.elapsed());
                    }
                }
                Ok(())
            }
        });
    }
    registry
}

/// A fresh queue for one run, dispatched along `path`.
pub(crate) async fn fresh_queue(
    pool: &PgPool,
    path: &PathUnderTest,
    run: &str,
) -> Result<(String, Dispatch)> {
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

/// A started bench process: a node with a worker and, on broker paths, its
/// relay lanes; on the Kafka path, the trimming of its topics.
pub(crate) struct Running {
    node: RunningNode,
    #[cfg(feature = "kafka")]
    trimming: Option<crate::kafka_trim::Trimming>,
}

pub(crate) fn start(
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
pub(crate) fn start_queues(
    pool: &PgPool,
    path: &PathUnderTest,
    queues: Vec<QueueConfig>,
    dedicated_topics: &[String],
    config: &BenchConfig,
    runs: &Runs,
) -> Running {
    let group = format!("bench-{}", Uuid::new_v4().simple());
    #[cfg(feature = "kafka")]
    let queue_names: Vec<String> = queues.iter().map(|queue| queue.name.clone()).collect();
    let worker_config = WorkerConfig {
        runtime: RuntimeConfig {
            completion_linger: config.completion_linger,
            ..RuntimeConfig::default()
        },
        queues,
        claim_linger: config.claim_linger,
        claim_ahead: config.claim_ahead,
        poll_interval: Duration::from_millis(500),
        receive_wait: Duration::from_millis(200),
        // A consumer group of its own: no run waits on another's members.
        subscribe: jobwire_transport::SubscribeOptions {
            group: group.clone(),
            ..jobwire_transport::SubscribeOptions::default()
        },
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(
        pool.clone(),
        registry(runs, config.noisy_job_work),
        worker_config,
    );
    // No maintenance: a bench run measures the job path alone (and, with
    // metrics on, what recording them costs).
    let mut node = Node::new(pool.clone());
    if config.metrics {
        node = node.with_metrics_collector(jobwire_server::metrics::CollectorConfig::default());
    }
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
            node = node.with_relay(Relay::new(pool.clone(), transport.clone(), lane));
        }
    }
    let node = node
        .with_worker(worker)
        .start()
        .expect("a node without maintenance has no settings to reject");
    Running {
        node,
        #[cfg(feature = "kafka")]
        trimming: trim_kafka(pool, path, group, queue_names, config),
    }
}

/// On the Kafka path, unless turned off: the run's topics trimmed below
/// what its consumer group has committed (see [`crate::kafka_trim`]).
#[cfg(feature = "kafka")]
fn trim_kafka(
    pool: &PgPool,
    path: &PathUnderTest,
    group: String,
    queues: Vec<String>,
    config: &BenchConfig,
) -> Option<crate::kafka_trim::Trimming> {
    let transport = path.transport.as_ref().filter(|t| t.name() == "kafka")?;
    let every = config.kafka_trim?;
    Some(crate::kafka_trim::Trimming::start(
        pool.clone(),
        transport.address(),
        group,
        queues,
        every,
    ))
}

impl Running {
    pub(crate) async fn stop(mut self) -> Result<()> {
        self.node.stop().await?;
        #[cfg(feature = "kafka")]
        if let Some(trimming) = self.trimming {
            trimming.stop().await;
        }
        Ok(())
    }
}

/// Jobs of `queue` not yet finished, read through the two partial indexes
/// that hold only unfinished rows (claimable; leased). Counting the
/// finished rows instead reads every finished row of the table, since no
/// index has both queue and finished_at: with a million finished jobs in
/// `jobs` that was a parallel scan of both cores every 20 ms, and the
/// bench measured itself (the drain ran at half speed; docs/benchmarks.md).
pub(crate) async fn unfinished<'c, E: sqlx::PgExecutor<'c>>(
    executor: E,
    queue: &str,
) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM jobs WHERE queue = $1 AND state IN ('QUEUED', 'RETRY_WAIT'))
              + (SELECT count(*) FROM jobs WHERE queue = $1 AND state IN ('RUNNING', 'CANCEL_REQUESTED'))",
    )
    .bind(queue)
    .fetch_one(executor)
    .await?)
}

/// Wait until `jobs` jobs of `queue` have finished, with a progress bar.
/// Every one of them must be committed already.
///
/// The check runs every 20 ms beside the run it times, so it must cost
/// next to nothing. It asks only whether an unfinished job is left, on a
/// connection of its own with sequential scans off, so that the answer
/// comes from the partial indexes of unfinished rows: from the planner's
/// statistics (taken while the jobs were queued) a count looked cheaper as a
/// parallel scan of the whole table, and that scan ran during most of every
/// drain, on the cores the drain measured (docs/benchmarks.md, "The bench's
/// own progress check"). The count for the progress bar is read only when
/// the bar is shown, four times a second.
pub(crate) async fn wait_for_queue(
    pool: &PgPool,
    queue: &str,
    jobs: usize,
    config: &BenchConfig,
    label: String,
) -> Result<()> {
    let deadline = Instant::now() + config.timeout;
    let bar = progress_bar(config, jobs, label.clone());
    let mut watcher = watcher_connection(pool).await?;
    let mut counted = Instant::now();
    let outcome = loop {
        // Every job of `queue` is committed before this is called, so it is
        // done once none is unfinished.
        if !any_unfinished(&mut watcher, queue).await? {
            bar.finish_and_clear();
            break Ok(());
        }
        if config.progress && counted.elapsed() >= Duration::from_millis(250) {
            counted = Instant::now();
            let done = jobs as i64 - unfinished(&mut watcher, queue).await?;
            bar.set_position(done.max(0) as u64);
        }
        if Instant::now() > deadline {
            bar.abandon();
            let done = jobs as i64 - unfinished(&mut watcher, queue).await?;
            break Err(anyhow::anyhow!(
                "{label}: {done} of {jobs} jobs finished within {:?}",
                config.timeout
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Closed, not returned: its settings must not reach the pool.
    watcher.close().await?;
    outcome
}

/// Run one job through `queue`, an otherwise empty queue, and wait for it
/// to finish, then delete its row: an open-loop stream started after this
/// times a path that is already delivering, not the worker's start. On
/// Kafka a queue's consumer group must first form and hand out its
/// partitions (on Kafka itself after `group.initial.rebalance.delay.ms`,
/// 3 s by default); a stream started with the worker once waited up to
/// 2.7 s at p95 for something of the kind (docs/benchmarks.md, "The
/// bench's relay at the relay's defaults; a warm-up job before each
/// stream", and its correction). The row is deleted so that no count of
/// the run includes it.
pub(crate) async fn warm_up(pool: &PgPool, queue: &str, config: &BenchConfig) -> Result<()> {
    let job = NewJob::new(NOOP_JOB, serde_json::json!({ "warm_up": true })).with_queue(queue);
    let job_id = jobwire_core::enqueue(pool, &job).await?.job_id;
    wait_for_queue(pool, queue, 1, config, format!("{queue} warm-up")).await?;
    sqlx::query("DELETE FROM jobs WHERE job_id = $1")
        .bind(job_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// A connection of its own for [`wait_for_queue`], planning without
/// sequential scans or parallel workers.
async fn watcher_connection(pool: &PgPool) -> Result<PgConnection> {
    let mut watcher = pool.acquire().await?.detach();
    sqlx::raw_sql("SET enable_seqscan = off; SET max_parallel_workers_per_gather = 0")
        .execute(&mut watcher)
        .await?;
    Ok(watcher)
}

/// Whether a job of `queue` is unfinished (waiting or leased).
async fn any_unfinished(watcher: &mut PgConnection, queue: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND state IN ('QUEUED', 'RETRY_WAIT'))
             OR EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND state IN ('RUNNING', 'CANCEL_REQUESTED'))",
    )
    .bind(queue)
    .fetch_one(watcher)
    .await?)
}

/// Jobs of `queue` that did not end well, out of the `jobs` the run
/// enqueued there. A job ended well when it is SUCCEEDED after one attempt
/// and the handler ran it exactly once: so a job lost, run twice, or marked
/// done without reaching a handler is counted, and so is any row beyond
/// `jobs` (a job enqueued twice).
pub(crate) async fn lost_or_repeated(
    pool: &PgPool,
    queue: &str,
    runs: &Runs,
    jobs: usize,
) -> Result<usize> {
    let (rows, succeeded_once): (i64, Vec<Uuid>) = sqlx::query_as(
        "SELECT count(*),
                coalesce(array_agg(job_id) FILTER (WHERE state = 'SUCCEEDED' AND attempt_count = 1), '{}')
         FROM jobs WHERE queue = $1",
    )
    .bind(queue)
    .fetch_one(pool)
    .await?;
    Ok(ended_badly(jobs, rows, &succeeded_once, runs))
}

/// [`lost_or_repeated`]'s count, from what the table and the handler saw.
fn ended_badly(jobs: usize, rows: i64, succeeded_once: &[Uuid], runs: &Runs) -> usize {
    let ran = runs.lock();
    let good = succeeded_once
        .iter()
        .filter(|job| ran.get(job).is_some_and(|seen| seen.runs == 1))
        .count();
    let rows = usize::try_from(rows).unwrap_or(usize::MAX);
    // The rows that ended badly, and the difference between the rows and
    // the jobs: a job lost without a row, or a row beyond them (a job
    // enqueued twice, even if both ran well).
    rows.saturating_sub(good) + rows.abs_diff(jobs)
}

impl Runs {
    /// When the handler first started each job it ran.
    pub(crate) fn first_starts(&self) -> HashMap<Uuid, DateTime<Utc>> {
        self.lock()
            .iter()
            .map(|(job, runs)| (*job, runs.first_start))
            .collect()
    }

    /// The shortest first run of a job that works (`--noisy-job-ms`), in
    /// ms; `None` when no such job returned.
    pub(crate) fn shortest_run_ms(&self) -> Option<f64> {
        self.lock()
            .values()
            .filter_map(|runs| runs.first_run)
            .map(|run| run.as_secs_f64() * 1000.0)
            .min_by(f64::total_cmp)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, HandlerRuns>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Connections for one run (worker, relay, producers), closed at its end so
/// that their statistics reach `pg_stat_database`.
pub(crate) async fn run_pool(pool: &PgPool, config: &BenchConfig) -> Result<PgPool> {
    let size = (config.producers + 2 * config.relay_concurrency + 12) as u32;
    let work = sqlx::postgres::PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .connect_with(
            (*pool.connect_options())
                .clone()
                .application_name(RUN_CONNECTIONS),
        )
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

/// The application name of a run's own connections ([`run_pool`]).
const RUN_CONNECTIONS: &str = "jobwire-bench-run";

/// Close a run's connections and wait until the server has counted their
/// writes. A server process reports its row counts to the statistics
/// system when it exits, after the client has let go (and after it leaves
/// `pg_stat_activity`), so counters read at once can miss a run's last
/// writes: a drain that commits a few times a second showed 0.1 rows
/// written per job. Waits for the processes to leave, then for the row
/// counter to hold still for 50 ms.
pub(crate) async fn close_run_pool(pool: &PgPool, work: PgPool) -> Result<()> {
    work.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1",
        )
        .bind(RUN_CONNECTIONS)
        .fetch_one(pool)
        .await?;
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "{left} of the run's database connections were still open 10 s after it closed them"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut rows = crate::cost::rows_written(pool).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = crate::cost::rows_written(pool).await?;
        if now == rows || Instant::now() > deadline {
            return Ok(());
        }
        rows = now;
    }
}

/// A timed run: connections of its own, the counters at its start, and the
/// worker (and relay) it measures.
pub(crate) struct Measurement {
    pub(crate) work: PgPool,
    runs: Runs,
    queue: String,
    before: Counters,
    started: Instant,
    running: Running,
}

impl Measurement {
    pub(crate) async fn begin(
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
    pub(crate) async fn finish(
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
        close_run_pool(pool, self.work).await?;
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
pub(crate) async fn clean_up(pool: &PgPool, queues: &[&str], config: &BenchConfig) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(runs: &Runs, job: Uuid, times: u32) {
        runs.lock().insert(
            job,
            HandlerRuns {
                runs: times,
                first_start: Utc::now(),
                first_run: None,
            },
        );
    }

    #[test]
    fn a_job_is_counted_bad_unless_it_succeeded_once_after_one_handler_run() {
        let [once, twice, never_ran, also_once] = [(); 4].map(|()| Uuid::new_v4());
        let runs = Runs::default();
        ran(&runs, once, 1);
        ran(&runs, twice, 2);
        ran(&runs, also_once, 1);
        // All four SUCCEEDED after one attempt, by the table.
        let succeeded = [once, twice, never_ran, also_once];
        // Run twice, and marked done with no handler run: two bad.
        assert_eq!(ended_badly(4, 4, &succeeded, &runs), 2);
        // A fifth job enqueued and never finished (its row not SUCCEEDED): three.
        assert_eq!(ended_badly(5, 5, &succeeded, &runs), 3);
        // A row beyond the jobs the run enqueued (a job enqueued twice)
        // is counted even when both ran well.
        assert_eq!(ended_badly(1, 2, &[once, also_once], &runs), 1);
        assert_eq!(ended_badly(2, 2, &[once, also_once], &runs), 0);
        // A job lost without a row.
        assert_eq!(ended_badly(3, 2, &[once, also_once], &runs), 1);
    }
}
