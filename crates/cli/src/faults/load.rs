//! The scenario's jobs: what each one is, and enqueueing them at a steady
//! rate through every fault, PostgreSQL's restart included.
//!
//! Every job has a dedup key, so an enqueue whose commit was lost with the
//! connection is simply sent again: the key makes the retry a no-op if the
//! first one landed. That is also how a service should enqueue through an
//! outage, and one row per key is one of the checks.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::TimeDelta;
use jobwire_core::{Enqueuer, NewJob};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::watch;

use super::FaultPath;

/// The job type every scenario job has (a built-in handler that records
/// each run in `handler_runs`).
pub(crate) const JOB_TYPE: &str = "record_run";

/// How a planned job is meant to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Succeeds on its first attempt.
    Plain,
    /// Fails its first attempt (retryable), then succeeds.
    FailsFirst,
    /// Due two seconds after it is enqueued.
    Delayed,
    /// Enqueued twice under one dedup key.
    Duplicated,
    /// Fails fatally: ends FAILED with `FAULT_FATAL`.
    Fatal,
    /// Runs for 1.5 s: a kill almost always finds some of these running.
    Slow,
}

/// One job of the scenario.
pub(crate) struct PlannedJob {
    pub(crate) dedup_key: String,
    pub(crate) plan: Plan,
    job: NewJob,
}

/// `count` jobs for `path`: of every twenty, one fatal, two failing once,
/// one delayed, one enqueued twice, one slow (1.5 s, so that kills find
/// jobs running); the others take 0–150 ms.
pub(crate) fn plan_jobs(path: FaultPath, count: usize) -> Vec<PlannedJob> {
    (0..count)
        .map(|index| {
            let plan = match index % 20 {
                0 => Plan::Fatal,
                1 | 2 => Plan::FailsFirst,
                3 => Plan::Delayed,
                4 => Plan::Duplicated,
                5 => Plan::Slow,
                _ => Plan::Plain,
            };
            let dedup_key = format!("{}-{index}", path.name());
            let ms = if plan == Plan::Slow {
                1500
            } else {
                (index % 4) * 50
            };
            let payload = json!({
                "ms": ms,
                "fail_first": plan == Plan::FailsFirst,
                "fatal": plan == Plan::Fatal,
            });
            let mut job = NewJob::new(JOB_TYPE, payload)
                .with_queue(path.queue())
                .with_dedup_key(dedup_key.clone());
            if plan == Plan::Delayed {
                job = job.with_delay(TimeDelta::seconds(2));
            }
            PlannedJob {
                dedup_key,
                plan,
                job,
            }
        })
        .collect()
}

/// What the enqueuer did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(crate) struct LoadReport {
    /// Jobs committed (one per dedup key).
    pub(crate) enqueued: usize,
    /// Second enqueues that the database reported as duplicates of their key.
    pub(crate) duplicates_refused: usize,
    /// Enqueue transactions that failed (the database restarting, or no
    /// connection to be had) and were sent again; one batch can count
    /// several times.
    pub(crate) failed_enqueue_attempts: usize,
}

/// Jobs per transaction: what a busy service's enqueue batches look like.
const BATCH: usize = 50;

/// How long the enqueuer keeps retrying one batch before it gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);

/// Where the enqueuer waits for PostgreSQL's restart to begin, as a share
/// of its jobs: late enough that on time the restart has long begun (the
/// timeline puts it at about two thirds of the enqueue window), early
/// enough that the jobs left take seconds to send, longer than a restart.
const HOLD_FOR_RESTART_AT: f64 = 0.75;

/// Enqueue every job of `plans` (interleaving the paths) evenly over
/// `window`, each batch in its own transaction, retrying through outages.
///
/// With `restart_begun`, the enqueuer does not pass three quarters of its
/// jobs before PostgreSQL's restart has begun (or is called off: the
/// sender dropped), so the restart always meets jobs being enqueued even
/// when the faults before it ran late. The time held does not count
/// towards the pace: the jobs left are sent at the same rate, not at once.
pub(crate) async fn enqueue_all(
    pool: PgPool,
    plans: Vec<Vec<PlannedJob>>,
    window: Duration,
    mut restart_begun: Option<watch::Receiver<bool>>,
) -> Result<LoadReport> {
    let mut report = LoadReport::default();
    let total: usize = plans.iter().map(Vec::len).sum();
    // Round-robin over the paths so that each one gets its share all along.
    let mut order: Vec<&PlannedJob> = Vec::with_capacity(total);
    let longest = plans.iter().map(Vec::len).max().unwrap_or(0);
    for index in 0..longest {
        for path_jobs in &plans {
            if let Some(job) = path_jobs.get(index) {
                order.push(job);
            }
        }
    }
    let hold_at = (total as f64 * HOLD_FOR_RESTART_AT) as usize;
    let start = Instant::now();
    let mut held = Duration::ZERO;
    let mut sent = 0;
    while sent < order.len() {
        if sent >= hold_at
            && let Some(mut begun) = restart_begun.take()
        {
            let waiting = Instant::now();
            // An error means the restart will not come (the sender is gone).
            let _ = begun.wait_for(|begun| *begun).await;
            held += waiting.elapsed();
        }
        let paced = start.elapsed().saturating_sub(held);
        let elapsed = paced.as_secs_f64() / window.as_secs_f64().max(0.001);
        let mut due = ((total as f64 * elapsed).ceil() as usize).clamp(sent + 1, total);
        if restart_begun.is_some() {
            // Still waiting to hold: here sent < hold_at.
            due = due.min(hold_at);
        }
        while sent < due {
            let end = (sent + BATCH).min(due);
            let batch: Vec<NewJob> = order[sent..end].iter().map(|p| p.job.clone()).collect();
            let (failures, _) = enqueue_batch(&pool, &batch).await?;
            report.failed_enqueue_attempts += failures;
            // The second enqueue of a duplicated job, in its own statement:
            // its key must turn it into a no-op.
            let again: Vec<NewJob> = order[sent..end]
                .iter()
                .filter(|p| p.plan == Plan::Duplicated)
                .map(|p| p.job.clone())
                .collect();
            if !again.is_empty() {
                let (failures, duplicates) = enqueue_batch(&pool, &again).await?;
                report.failed_enqueue_attempts += failures;
                report.duplicates_refused += duplicates;
            }
            sent = end;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.enqueued = total;
    Ok(report)
}

/// One transaction, sent again until it commits; returns how many tries
/// failed and how many jobs the database called duplicates.
async fn enqueue_batch(pool: &PgPool, batch: &[NewJob]) -> Result<(usize, usize)> {
    let started = Instant::now();
    let mut failures = 0;
    loop {
        match try_enqueue(pool, batch).await {
            Ok(duplicates) => return Ok((failures, duplicates)),
            Err(err) if started.elapsed() < GIVE_UP_AFTER => {
                failures += 1;
                tracing::info!(error = %err, "enqueue failed; sending the batch again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(err) => bail!(
                "enqueue kept failing for {} s: {err}",
                GIVE_UP_AFTER.as_secs()
            ),
        }
    }
}

async fn try_enqueue(pool: &PgPool, batch: &[NewJob]) -> Result<usize> {
    let mut tx = pool.begin().await?;
    // The non-generic form: this future runs on a spawned task.
    let enqueued = Enqueuer.enqueue_many_on(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(enqueued.iter().filter(|job| job.duplicate).count())
}
