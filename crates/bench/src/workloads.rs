//! The measured workloads: drain, end to end, latency at a steady rate, urgent under burst.
//!
//! Latencies of the open-loop streams run from each job's due arrival; see [`Latency`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::{DateTime, Utc};
use jobwire_consumer::QueueConfig;
use jobwire_core::{Dispatch, NewJob};
use sqlx::PgPool;
use uuid::Uuid;

use crate::harness::{
    Measurement, Runs, clean_up, fresh_queue, lost_or_repeated, progress_bar, run_pool, start,
    start_queues, unfinished, wait_for_queue, warm_up,
};
use crate::stage_clock::{StageClock, TimedTransport};
use crate::stages::stages;
use crate::{BenchConfig, Latency, PathUnderTest, RunResult, StageLatency};

fn payload(config: &BenchConfig, i: usize) -> serde_json::Value {
    serde_json::json!({ "i": i, "filler": "x".repeat(config.payload_bytes) })
}

/// Drain: enqueue all jobs first, then time the worker (and relay).
pub async fn drain(pool: &PgPool, path: &PathUnderTest, config: &BenchConfig) -> Result<RunResult> {
    let path = &PathUnderTest {
        jobs: path.drain_jobs,
        ..path.clone()
    };
    let (queue, _) = fresh_queue(pool, path, "drain").await?;
    enqueue_up_front(pool, &queue, path.jobs, config).await?;
    Measurement::begin(pool, path, queue, config)
        .await?
        .finish(pool, path, config, "drain")
        .await
}

/// Enqueue `jobs` no-op jobs on `queue` in batches of 1,000 (a backlog).
async fn enqueue_up_front(
    pool: &PgPool,
    queue: &str,
    jobs: usize,
    config: &BenchConfig,
) -> Result<()> {
    enqueue_backlog(
        pool,
        jobs,
        config,
        format!("enqueueing on {queue}"),
        Commit::EachBatch,
        |i| NewJob::new(crate::harness::NOOP_JOB, payload(config, i)).with_queue(queue),
    )
    .await
}

/// When a backlog's batches commit.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Commit {
    /// Each batch of 1,000 on its own.
    EachBatch,
    /// All at one commit: with a worker already running, every job becomes
    /// claimable at the same moment.
    AtOnce,
}

/// Enqueue `jobs` jobs made by `job(i)` in batches of 1,000, committed as
/// `commit` says.
pub(crate) async fn enqueue_backlog(
    pool: &PgPool,
    jobs: usize,
    config: &BenchConfig,
    label: String,
    commit: Commit,
    job: impl Fn(usize) -> NewJob,
) -> Result<()> {
    let bar = progress_bar(config, jobs, label);
    let mut tx = match commit {
        Commit::AtOnce => Some(pool.begin().await?),
        Commit::EachBatch => None,
    };
    for start in (0..jobs).step_by(1000) {
        let chunk: Vec<NewJob> = (start..(start + 1000).min(jobs)).map(&job).collect();
        match tx.as_mut() {
            Some(tx) => {
                jobwire_core::Enqueuer.enqueue_many_on(tx, &chunk).await?;
            }
            None => {
                jobwire_core::enqueue_many(pool, &chunk).await?;
            }
        }
        bar.inc(chunk.len() as u64);
    }
    if let Some(tx) = tx {
        tx.commit().await?;
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
                    .map(|i| {
                        NewJob::new(crate::harness::NOOP_JOB, payload(&config, i))
                            .with_queue(&queue)
                    })
                    .collect();
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO bench_orders (id) SELECT * FROM unnest($1::uuid[])")
                    .bind(&orders)
                    .execute(&mut *tx)
                    .await?;
                jobwire_core::Enqueuer
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

/// The latency of `queue`'s finished jobs of an open-loop stream, from when
/// each was due ([`Arrival::due`]) to its handler's first start and to its
/// `finished_at`. Only the jobs in `arrivals` count; a job the handler never
/// ran is left out (and counted by the run's [`lost_or_repeated`]).
pub(crate) async fn latency(
    pool: &PgPool,
    queue: &str,
    arrivals: &Arrivals,
    runs: &Runs,
) -> Result<Latency> {
    let finished: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
        "SELECT job_id, finished_at FROM jobs WHERE queue = $1 AND state = 'SUCCEEDED'",
    )
    .bind(queue)
    .fetch_all(pool)
    .await?;
    let starts = runs.first_starts();
    let (starts, finishes): (Vec<f64>, Vec<f64>) = finished
        .into_iter()
        .filter_map(|(job, finished)| {
            let due = arrivals.get(&job)?.due;
            let started = *starts.get(&job)?;
            Some((millis(due, started), millis(due, finished)))
        })
        .unzip();
    Ok(Latency::of(starts, finishes))
}

/// Enqueue one no-op job on `queue` per tick at `rate` for `duration`.
async fn arrivals(
    pool: &PgPool,
    queue: &str,
    rate: u32,
    duration: Duration,
    config: &BenchConfig,
) -> Result<Arrivals> {
    arrivals_of(pool, rate, duration, |i| {
        NewJob::new(crate::harness::NOOP_JOB, payload(config, i)).with_queue(queue)
    })
    .await
}

/// One job of an open-loop stream, on the wall clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// When the stream meant it to arrive: its tick, `i / rate` after the
    /// stream began, whether or not its producer kept up.
    pub(crate) due: DateTime<Utc>,
    /// When its transaction had committed, as its producer saw it (right
    /// after the commit returned).
    pub(crate) committed: DateTime<Utc>,
}

/// The jobs of an open-loop stream, by id.
pub(crate) type Arrivals = HashMap<Uuid, Arrival>;

/// Enqueue `job(i)` one per tick at `rate` for `duration`, each in a
/// transaction of its own (open loop: a slow enqueue does not delay the
/// next one). Returns the jobs enqueued, with when each was due and when it
/// committed.
pub(crate) async fn arrivals_of(
    pool: &PgPool,
    rate: u32,
    duration: Duration,
    job: impl Fn(usize) -> NewJob,
) -> Result<Arrivals> {
    let period = Duration::from_secs(1) / rate.max(1);
    // The first job is due at once, the i-th `i * period` later, counted on
    // the system clock: the clock of `created_at`, `started_at` and the
    // handlers' own stamps, which the latencies compare `due` with. Ticks
    // counted on the monotonic clock (tokio's) would put any drift between
    // the two clocks into every latency (docs/benchmarks.md, "The streams'
    // ticks on the system clock").
    let began = Utc::now();
    let began_monotonic = Instant::now();
    let total = (rate as u64 * duration.as_millis() as u64 / 1000) as usize;
    let mut enqueues = tokio::task::JoinSet::new();
    for i in 0..total {
        let due = began + due_after(period, i);
        // Late (a slow spawn, a busy core): go at once, as the stream's
        // later jobs catch up with their ticks.
        if let Ok(wait) = (due - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        let (pool, job) = (pool.clone(), job(i));
        enqueues.spawn(async move {
            let enqueued = jobwire_core::enqueue(&pool, &job).await?;
            let committed = Utc::now();
            anyhow::Ok((enqueued.job_id, Arrival { due, committed }))
        });
    }
    let mut arrivals = Arrivals::with_capacity(total);
    while let Some(done) = enqueues.join_next().await {
        let (job, arrival) = done??;
        arrivals.insert(job, arrival);
    }
    let shift = clock_shift_ms(began, began_monotonic);
    if shift.abs() > 1.0 {
        tracing::warn!(
            shift_ms = shift,
            "bench: the system clock moved against the monotonic clock during a stream; \
             its latencies are read on the system clock alone, but a clock step within the \
             stream would still show in them"
        );
    }
    Ok(arrivals)
}

/// How far the system clock ran ahead of the monotonic one (negative:
/// behind) since `began` and `began_monotonic` were read together.
fn clock_shift_ms(began: DateTime<Utc>, began_monotonic: Instant) -> f64 {
    let on_system_clock = millis(began, Utc::now());
    on_system_clock - began_monotonic.elapsed().as_secs_f64() * 1000.0
}

/// How long after the stream began its `i`-th job is due.
fn due_after(period: Duration, i: usize) -> chrono::TimeDelta {
    let nanos = period.as_nanos().saturating_mul(i as u128);
    chrono::TimeDelta::nanoseconds(i64::try_from(nanos).unwrap_or(i64::MAX))
}

/// `to - from` in milliseconds; negative when `to` came first (a broker may
/// deliver a message before its publisher hears the confirm).
pub(crate) fn millis(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
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
    warm_up(pool, &queue, config).await?;
    let arrived = arrivals(&work, &queue, path.rate, config.rate_duration, config).await?;
    let total = arrived.len();
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
    let mut latency = latency(pool, &queue, &arrived, &runs).await?;
    latency.lost_or_repeated = lost_or_repeated(pool, &queue, &runs, total).await?;
    clean_up(pool, &[&queue], config).await?;
    Ok(latency)
}

/// Urgent jobs at a steady rate on their own queue (own slots), while a
/// bulk backlog of `path.burst_jobs` drains on the same path; with where
/// their time went, stage by stage.
pub async fn urgent_under_burst(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<(Latency, Vec<StageLatency>)> {
    let (bulk, _) = fresh_queue(pool, path, "bulk").await?;
    let (urgent, urgent_dispatch) = fresh_queue(pool, path, "urgent").await?;
    enqueue_up_front(pool, &bulk, path.burst_jobs, config).await?;
    // On a broker path the urgent topic gets a relay lane of its own, as a
    // deployment with urgent queues would run it.
    let dedicated: Vec<String> = match urgent_dispatch {
        Dispatch::Broker { topic } => vec![topic],
        _ => Vec::new(),
    };
    // The urgent wake-ups are stamped on their way through the broker.
    let clock = path
        .transport
        .as_ref()
        .map(|_| StageClock::new(dedicated.clone()));
    let timed_path = PathUnderTest {
        transport: path
            .transport
            .clone()
            .zip(clock.clone())
            .map(|(transport, clock)| TimedTransport::wrap(transport, clock)),
        ..path.clone()
    };
    let runs = Runs::default();
    let work = run_pool(pool, config).await?;
    let running = start_queues(
        &work,
        &timed_path,
        vec![
            QueueConfig::new(&bulk, config.workers),
            QueueConfig::new(&urgent, 8),
        ],
        &dedicated,
        config,
        &runs,
    );
    // The bulk backlog drains meanwhile (its `bulk left` says how much of
    // it the stream still ran beside).
    warm_up(pool, &urgent, config).await?;
    let arrived = arrivals(
        &work,
        &urgent,
        config.urgent_rate,
        config.rate_duration,
        config,
    )
    .await?;
    let total = arrived.len();
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
    let bulk_left = unfinished(pool, &bulk).await?;
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
    let mut latency = latency(pool, &urgent, &arrived, &runs).await?;
    latency.bulk_jobs = path.burst_jobs as i64;
    latency.bulk_left_at_end = bulk_left;
    latency.lost_or_repeated = lost_or_repeated(pool, &urgent, &runs, total).await?
        + lost_or_repeated(pool, &bulk, &runs, path.burst_jobs).await?;
    let stages = stages(pool, &urgent, &arrived, &runs, clock.as_deref()).await?;
    clean_up(pool, &[&bulk, &urgent], config).await?;
    Ok((latency, stages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ith_job_of_a_stream_is_due_i_periods_after_it_began() {
        let period = Duration::from_secs(1) / 1000;
        assert_eq!(due_after(period, 0), chrono::TimeDelta::zero());
        assert_eq!(due_after(period, 1), chrono::TimeDelta::milliseconds(1));
        assert_eq!(
            due_after(period, 1500),
            chrono::TimeDelta::milliseconds(1500)
        );
        // 333,333 ns a tick at 3,000/s: no rounding drift over a long stream.
        let period = Duration::from_secs(1) / 3000;
        assert_eq!(
            due_after(period, 30_000),
            chrono::TimeDelta::nanoseconds(9_999_990_000)
        );
    }
}
