//! The noisy tenant: one tenant's backlog enqueued at once, ten quiet
//! tenants arriving at a steady rate while it drains; how long the quiet
//! tenants' jobs wait to start, and how fast the backlog drains, with the
//! queue's tenant cap on and off.

use std::collections::HashMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use jobwire_core::NewJob;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::harness::{
    NOOP_JOB, Runs, WORKING_JOB, clean_up, fresh_queue, lost_or_repeated, run_pool, start,
    wait_for_queue, warm_up,
};
use crate::quantile::percentile;
use crate::workloads::{Arrivals, Commit, arrivals_of, enqueue_backlog, latency};
use crate::{BenchConfig, PathUnderTest};

/// The quiet tenants, each arriving at `BenchConfig::quiet_tenant_rate`.
const QUIET_TENANTS: [&str; 10] = ["B", "C", "D", "E", "F", "G", "H", "I", "J", "K"];
/// The noisy tenant.
const NOISY: &str = "A";

/// One noisy-tenant run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoisyTenant {
    /// The queue's cap on running jobs per tenant (`None`: off).
    pub tenant_cap: Option<u32>,
    /// Jobs of the noisy tenant, enqueued before the clock runs.
    pub noisy_jobs: usize,
    /// How long each job's handler works (waits), ms; 0: no-op jobs.
    pub job_ms: u64,
    /// The shortest handler run of the run's jobs, ms, as the handlers
    /// timed themselves (at least `job_ms`); `None` for no-op jobs.
    pub shortest_job_ms: Option<f64>,
    /// Jobs of the quiet tenants, arriving while it drains.
    pub quiet_jobs: i64,
    /// Quiet tenants' arrival (the tick each was due) -> handler start,
    /// median, ms.
    pub quiet_start_p50_ms: f64,
    /// The same, 95th percentile, ms.
    pub quiet_start_p95_ms: f64,
    /// The same, 99th percentile, ms.
    pub quiet_start_p99_ms: f64,
    /// The noisy tenant's jobs per second, first start to last finish.
    pub noisy_drain_per_second: f64,
    /// Noisy jobs still unfinished when the quiet stream ended (0 would
    /// mean the backlog was gone too soon for the figure to mean anything).
    pub noisy_left_at_end: i64,
    /// With a cap: how long a slot the noisy tenant freed stayed unused
    /// before its next job started (slot freed -> next start), median, ms.
    pub slot_handover_p50_ms: Option<f64>,
    /// The same, 95th percentile, ms.
    pub slot_handover_p95_ms: Option<f64>,
    /// The same, 99th percentile, ms.
    pub slot_handover_p99_ms: Option<f64>,
    /// Jobs not SUCCEEDED after exactly one attempt (must be 0).
    pub lost_or_repeated: i64,
}

#[derive(sqlx::FromRow)]
struct Measured {
    noisy_drain_per_second: f64,
}

/// Slot freed -> next start, median, 95th and 99th percentile, ms.
struct Handover {
    p50: Option<f64>,
    p95: Option<f64>,
    p99: Option<f64>,
}

/// Slot freed -> next start for a tenant held at `cap`: while it is at its
/// cap, its (cap + k)-th job can start only once k of its jobs finished, so
/// pairing the k-th finish with the (cap + k)-th start (both in time order)
/// measures how long each freed slot stayed empty. A start is the handler's
/// own (`starts`, the bench handler's clock), not the claim: a job claimed
/// ahead into the worker's local queue has its slot but has not started. A
/// finish is its completion's timestamp, taken before that transaction
/// commits and the slot is free, so the figure includes the commit: an upper
/// bound.
async fn slot_handover(
    pool: &PgPool,
    queue: &str,
    cap: u32,
    starts: &HashMap<Uuid, DateTime<Utc>>,
) -> Result<Handover> {
    let rows: Vec<(Uuid, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT job_id, finished_at FROM jobs WHERE queue = $1 AND tenant = $2")
            .bind(queue)
            .bind(NOISY)
            .fetch_all(pool)
            .await?;
    let finishes: Vec<DateTime<Utc>> = rows.iter().filter_map(|(_, finished)| *finished).collect();
    let started: Vec<DateTime<Utc>> = rows
        .iter()
        .filter_map(|(job, _)| starts.get(job).copied())
        .collect();
    let mut waits = freed_slot_waits_ms(finishes, started, cap as usize);
    if waits.is_empty() {
        return Ok(Handover {
            p50: None,
            p95: None,
            p99: None,
        });
    }
    Ok(Handover {
        p50: Some(percentile(&mut waits, 0.50)),
        p95: Some(percentile(&mut waits, 0.95)),
        p99: Some(percentile(&mut waits, 0.99)),
    })
}

/// The k-th finish paired with the (cap + k)-th start, each in time order:
/// how long each freed slot stayed empty, in ms (never below 0: a start
/// before its paired finish is a slot that was never empty).
fn freed_slot_waits_ms(
    mut finishes: Vec<DateTime<Utc>>,
    mut starts: Vec<DateTime<Utc>>,
    cap: usize,
) -> Vec<f64> {
    finishes.sort_unstable();
    starts.sort_unstable();
    finishes
        .iter()
        .zip(starts.iter().skip(cap))
        .map(|(finished, started)| {
            ((*started - *finished)
                .num_microseconds()
                .unwrap_or(i64::MAX) as f64
                / 1000.0)
                .max(0.0)
        })
        .collect()
}

/// Run it once with the cap `tenant_cap` (or none).
pub async fn noisy_tenant(
    pool: &PgPool,
    path: &PathUnderTest,
    config: &BenchConfig,
    tenant_cap: Option<u32>,
) -> Result<NoisyTenant> {
    let (queue, _) = fresh_queue(pool, path, "noisy").await?;
    if tenant_cap.is_some() {
        jobwire_core::set_tenant_cap(pool, &queue, None, tenant_cap).await?;
    }
    let runs = Runs::default();
    let work = run_pool(pool, config).await?;
    let running = start(&work, path, &queue, config, &runs);
    // The quiet tenants are counted as for the steady rate, from a worker
    // already taking wake-ups (a Kafka consumer group takes seconds to
    // form): one job through the empty queue first. Then A's backlog
    // arrives at once, one commit, and the quiet stream starts.
    warm_up(pool, &queue, config).await?;
    enqueue_backlog(
        pool,
        config.noisy_jobs,
        config,
        format!("enqueueing tenant {NOISY} on {queue}"),
        Commit::AtOnce,
        |i| {
            NewJob::new(job_type(config), serde_json::json!({ "i": i }))
                .with_queue(&queue)
                .with_tenant(NOISY)
        },
    )
    .await?;
    let quiet = quiet_arrivals(&work, &queue, config).await?;
    let noisy_left_at_end = crate::harness::unfinished(pool, &queue).await?;
    wait_for_queue(
        pool,
        &queue,
        config.noisy_jobs + quiet.len(),
        config,
        format!("{} noisy tenant", path.name),
    )
    .await?;
    running.stop().await?;
    work.close().await;
    let measured: Measured = sqlx::query_as(
        "SELECT coalesce((SELECT count(*) / nullif(extract(epoch FROM max(finished_at) - min(heartbeat_at)), 0)
                          FROM jobs WHERE queue = $1 AND tenant = $2), 0)::float8 AS noisy_drain_per_second",
    )
    .bind(&queue)
    .bind(NOISY)
    .fetch_one(pool)
    .await?;
    // Only a cap below the worker's slots binds: at or above them, a start
    // paired with a finish waited for a slot of the worker, not of the
    // tenant, and the figure would read as a perfect hand-over.
    let handover = match tenant_cap {
        Some(cap) if (cap as usize) < config.workers => {
            Some(slot_handover(pool, &queue, cap, &runs.first_starts()).await?)
        }
        _ => None,
    };
    // The quiet jobs alone: `quiet` holds only theirs.
    let quiet_latency = latency(pool, &queue, &quiet, &runs).await?;
    let lost_or_repeated =
        lost_or_repeated(pool, &queue, &runs, config.noisy_jobs + quiet.len()).await?;
    clean_up(pool, &[&queue], config).await?;
    Ok(NoisyTenant {
        tenant_cap,
        noisy_jobs: config.noisy_jobs,
        job_ms: u64::try_from(config.noisy_job_work.as_millis()).unwrap_or(u64::MAX),
        shortest_job_ms: runs.shortest_run_ms(),
        quiet_jobs: quiet_latency.jobs,
        quiet_start_p50_ms: quiet_latency.start_p50_ms,
        quiet_start_p95_ms: quiet_latency.start_p95_ms,
        quiet_start_p99_ms: quiet_latency.start_p99_ms,
        noisy_drain_per_second: measured.noisy_drain_per_second,
        noisy_left_at_end,
        slot_handover_p50_ms: handover.as_ref().and_then(|h| h.p50),
        slot_handover_p95_ms: handover.as_ref().and_then(|h| h.p95),
        slot_handover_p99_ms: handover.as_ref().and_then(|h| h.p99),
        lost_or_repeated: i64::try_from(lost_or_repeated).unwrap_or(i64::MAX),
    })
}

/// The job type of every job of the run, the noisy tenant's and the quiet
/// ones': no-op jobs, or jobs that work `noisy_job_work` each.
fn job_type(config: &BenchConfig) -> &'static str {
    if config.noisy_job_work.is_zero() {
        NOOP_JOB
    } else {
        WORKING_JOB
    }
}

/// The quiet tenants' jobs, one per tick in turn, open loop, for
/// `rate_duration`.
async fn quiet_arrivals(pool: &PgPool, queue: &str, config: &BenchConfig) -> Result<Arrivals> {
    let rate = config.quiet_tenant_rate.max(1) * QUIET_TENANTS.len() as u32;
    arrivals_of(pool, rate, config.rate_duration, |i| {
        NewJob::new(job_type(config), serde_json::json!({ "i": i }))
            .with_queue(queue)
            .with_tenant(QUIET_TENANTS[i % QUIET_TENANTS.len()])
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_freed_slot_is_paired_with_the_start_it_let_in() {
        let at = |ms: i64| DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::milliseconds(ms);
        // Cap 2: jobs 1 and 2 start at once; each finish lets one more in.
        let starts = vec![at(0), at(1), at(13), at(24), at(30)];
        let finishes = vec![at(20), at(10), at(22), at(35), at(40)];
        assert_eq!(
            freed_slot_waits_ms(finishes, starts, 2),
            vec![3.0, 4.0, 8.0],
            "10 -> 13, 20 -> 24, 22 -> 30; the later finishes let nobody in"
        );
        assert_eq!(
            freed_slot_waits_ms(vec![at(10)], vec![at(0), at(5)], 1),
            vec![0.0],
            "a start before its paired finish waited for nothing"
        );
        assert!(freed_slot_waits_ms(vec![], vec![at(0)], 1).is_empty());
    }
}
