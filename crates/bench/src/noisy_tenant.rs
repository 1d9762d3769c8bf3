//! The noisy tenant: one tenant's backlog enqueued at once, ten quiet
//! tenants arriving at a steady rate while it drains; how long the quiet
//! tenants' jobs wait to start, and how fast the backlog drains, with the
//! queue's tenant cap on and off.

use anyhow::Result;
use jobwire_core::NewJob;
use serde::Serialize;
use sqlx::PgPool;

use crate::harness::{Runs, clean_up, fresh_queue, run_pool, start, wait_for_queue};
use crate::workloads::{Arrivals, arrivals_of, enqueue_backlog, latency};
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
    lost_or_repeated: i64,
}

#[derive(sqlx::FromRow)]
struct Handover {
    p50: Option<f64>,
    p95: Option<f64>,
    p99: Option<f64>,
}

/// Slot freed -> next start for a tenant held at `cap`: while it is at its
/// cap, its (cap + k)-th job can start only once k of its jobs finished, so
/// pairing the k-th finish with the (cap + k)-th start (both in time order)
/// measures how long each freed slot stayed empty. A job's finish is its
/// completion's timestamp, before that transaction commits and the slot
/// is free, so the figure includes the commit: an upper bound.
///
/// The two orders are zipped as arrays (`unnest` of two arrays pairs them
/// by position) rather than joined on row numbers: with statistics from
/// before the backlog the planner joined the row numbers in a nested loop,
/// and pairing 20,000 jobs took 75 s.
async fn slot_handover(pool: &PgPool, queue: &str, cap: u32) -> Result<Handover> {
    Ok(sqlx::query_as(
        "WITH ordered AS (
             SELECT array_agg(heartbeat_at ORDER BY heartbeat_at) AS starts,
                    array_agg(finished_at ORDER BY finished_at) AS finishes
             FROM jobs WHERE queue = $1 AND tenant = $2),
         handover AS (
             SELECT greatest(extract(epoch FROM p.started - p.finished), 0) * 1000 AS ms
             FROM ordered o
             CROSS JOIN LATERAL unnest(o.finishes, o.starts[$3::int + 1:]) AS p(finished, started)
             WHERE p.finished IS NOT NULL AND p.started IS NOT NULL)
         SELECT percentile_cont(0.50) WITHIN GROUP (ORDER BY ms)::float8 AS p50,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)::float8 AS p95,
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::float8 AS p99
         FROM handover",
    )
    .bind(queue)
    .bind(NOISY)
    .bind(i64::from(cap))
    .fetch_one(pool)
    .await?)
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
    enqueue_backlog(
        pool,
        config.noisy_jobs,
        config,
        format!("enqueueing tenant {NOISY} on {queue}"),
        |i| {
            NewJob::new("bench_noop", serde_json::json!({ "i": i }))
                .with_queue(&queue)
                .with_tenant(NOISY)
        },
    )
    .await?;
    let runs = Runs::default();
    let work = run_pool(pool, config).await?;
    let running = start(&work, path, &queue, config, &runs);
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
                          FROM jobs WHERE queue = $1 AND tenant = $2), 0)::float8 AS noisy_drain_per_second,
                (SELECT count(*) FROM jobs
                 WHERE queue = $1 AND NOT (state = 'SUCCEEDED' AND attempt_count = 1)) AS lost_or_repeated",
    )
    .bind(&queue)
    .bind(NOISY)
    .fetch_one(pool)
    .await?;
    let handover = match tenant_cap {
        Some(cap) => Some(slot_handover(pool, &queue, cap).await?),
        None => None,
    };
    // The quiet jobs alone: `quiet` holds only theirs.
    let quiet_latency = latency(pool, &queue, &quiet, &runs).await?;
    let repeated = runs.repeated();
    clean_up(pool, &[&queue], config).await?;
    Ok(NoisyTenant {
        tenant_cap,
        noisy_jobs: config.noisy_jobs,
        quiet_jobs: quiet_latency.jobs,
        quiet_start_p50_ms: quiet_latency.start_p50_ms,
        quiet_start_p95_ms: quiet_latency.start_p95_ms,
        quiet_start_p99_ms: quiet_latency.start_p99_ms,
        noisy_drain_per_second: measured.noisy_drain_per_second,
        noisy_left_at_end,
        slot_handover_p50_ms: handover.as_ref().and_then(|h| h.p50),
        slot_handover_p95_ms: handover.as_ref().and_then(|h| h.p95),
        slot_handover_p99_ms: handover.as_ref().and_then(|h| h.p99),
        lost_or_repeated: measured.lost_or_repeated + repeated as i64,
    })
}

/// The quiet tenants' jobs, one per tick in turn, open loop, for
/// `rate_duration`.
async fn quiet_arrivals(pool: &PgPool, queue: &str, config: &BenchConfig) -> Result<Arrivals> {
    let rate = config.quiet_tenant_rate.max(1) * QUIET_TENANTS.len() as u32;
    arrivals_of(pool, rate, config.rate_duration, |i| {
        NewJob::new("bench_noop", serde_json::json!({ "i": i }))
            .with_queue(queue)
            .with_tenant(QUIET_TENANTS[i % QUIET_TENANTS.len()])
    })
    .await
}
