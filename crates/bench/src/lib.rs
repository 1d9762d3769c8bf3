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
//!   the single-job run is repeated (median and range), beside the plain
//!   single-row commit rate of as many clients ([`commit_rate`]);
//! - the **noisy tenant** (when asked for): one tenant's backlog at once,
//!   ten quiet tenants arriving meanwhile, with the tenant cap off and on;
//! - **latency at a steady rate** (open loop) and for **urgent jobs while a
//!   bulk backlog drains**, from the database's own timestamps;
//! - for broker paths, the **relay alone** (a backlog of outbox rows to the
//!   broker) and the **outbox lag** at a steady rate;
//! - **database cost** of the drain: commits (write transactions: the
//!   transaction ids assigned), WAL bytes (`pg_current_wal_lsn` delta) and
//!   rows written per job, from PostgreSQL's own counters. The first two are
//!   the whole server's, so the bench wants the server to itself;
//! - **correctness**, over every run that runs jobs: every job SUCCEEDED
//!   after one attempt and one handler run (the handler counts its runs; the
//!   table is checked).
//!
//! Every run uses queues of its own, so runs do not disturb each other.
//!
//! Separately, [`schedule_burst`] measures the schedulers: many schedules
//! due at one instant, occurrences enqueued per second, and jitter's spread;
//! and [`http_producer`] the HTTP API's `POST /jobs` against the library's
//! single-job enqueue at the same concurrency.
#![warn(missing_docs)]

mod commit_rate;
mod cost;
mod environment;
mod harness;
mod http_producer;
#[cfg(feature = "kafka")]
pub mod kafka_trim;
mod noisy_tenant;
mod options;
mod quantile;
mod relay_runs;
mod report;
mod results;
mod schedules;
mod stage_clock;
mod stages;
mod workloads;

pub use commit_rate::{CommitRate, commit_rate};
pub use environment::{Environment, environment};
pub use http_producer::{HttpProducerComparison, ProducerRun, http_producer};
pub use noisy_tenant::{NoisyTenant, noisy_tenant};
pub use options::{BenchConfig, PathUnderTest};
pub use relay_runs::{OutboxLag, RelayRun, outbox_lag, relay_alone};
pub use report::{chart_svg, table};
pub use results::{DatabaseCost, Latency, PathReport, RunResult, StageLatency};
pub use schedules::{ScheduleBurst, schedule_burst};
pub use workloads::{drain, end_to_end, steady_rate, urgent_under_burst};

use anyhow::Result;
use sqlx::PgPool;

/// Every measurement for one path.
pub async fn run_path(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
) -> Result<PathReport> {
    tracing::info!(path = %path.name, jobs = path.jobs, "bench: drain");
    let drain = drain(pool, path, config).await?;
    let commit_rate = if config.commit_probe.is_zero() {
        None
    } else {
        tracing::info!(clients = config.producers, "bench: plain commit rate");
        Some(commit_rate(pool, config.producers, config.commit_probe).await?)
    };
    let mut end_to_end_runs = Vec::new();
    for run in 1..=config.end_to_end_runs.max(1) {
        tracing::info!(path = %path.name, jobs = path.jobs, run, "bench: end to end");
        end_to_end_runs.push(end_to_end(pool, path, config, 1).await?);
    }
    let mut by_rate = end_to_end_runs.clone();
    by_rate.sort_by(|a, b| a.jobs_per_second.total_cmp(&b.jobs_per_second));
    // The median run; of an even number, the slower of the two middle ones
    // (a ratio against it never flatters).
    let end_to_end_single = by_rate.swap_remove((by_rate.len() - 1) / 2);
    tracing::info!(path = %path.name, jobs = path.jobs, batch = config.enqueue_batch, "bench: end to end, batched");
    let end_to_end_batched = end_to_end(pool, path, config, config.enqueue_batch).await?;
    tracing::info!(path = %path.name, rate = path.rate, "bench: steady rate");
    let steady_rate = steady_rate(pool, path, config).await?;
    tracing::info!(path = %path.name, bulk = path.burst_jobs, "bench: urgent under burst");
    let (urgent_under_burst, urgent_stages) = urgent_under_burst(pool, path, config).await?;
    tracing::info!(path = %path.name, rows = path.relay_rows, "bench: relay alone");
    let relay_alone = relay_alone(pool, path, config).await?;
    tracing::info!(path = %path.name, rate = path.lag_rate, "bench: outbox lag");
    let outbox_lag = outbox_lag(pool, path, config).await?;
    let mut noisy = Vec::new();
    if config.noisy_jobs > 0 {
        for cap in [None, Some(config.noisy_tenant_cap)] {
            tracing::info!(path = %path.name, jobs = config.noisy_jobs, ?cap, "bench: noisy tenant");
            noisy.push(noisy_tenant(pool, path, config, cap).await?);
        }
    }
    Ok(PathReport {
        path: path.name.clone(),
        drain,
        end_to_end: end_to_end_single,
        end_to_end_runs,
        commit_rate,
        end_to_end_batched,
        steady_rate,
        rate: path.rate,
        urgent_under_burst,
        urgent_stages,
        relay_alone,
        outbox_lag,
        noisy_tenant: noisy,
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
