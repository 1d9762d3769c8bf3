//! The completer: attempt outcomes, written in batches with one fenced
//! statement each.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use jobwire_core::{ClaimedJob, FinishOutcome, FinishResult, JobState, Lease};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::stats::{WorkerStats, bump};
use jobwire_loop::Pause;

/// One outcome to record.
pub(crate) struct Completion {
    pub(crate) lease: Lease,
    pub(crate) outcome: FinishOutcome,
    pub(crate) meta: AttemptMeta,
}

/// The attempt an outcome belongs to, for its metrics.
pub(crate) struct AttemptMeta {
    pub(crate) job: Arc<ClaimedJob>,
    /// When the claim happened, on the database clock.
    pub(crate) claimed_at: DateTime<Utc>,
    /// When this worker took the claimed job, on its monotonic clock.
    pub(crate) claimed: Instant,
    /// Whether a handler knew its type. A type no handler knows comes from
    /// whoever enqueued it: its outcome is labelled `_unknown`, so that
    /// made-up types cannot mint metric series without bound.
    pub(crate) handled: bool,
}

impl AttemptMeta {
    /// Now on the database clock: the claim's instant plus this worker's
    /// monotonic time since the claim (no wall clocks compared).
    pub(crate) fn now_on_database_clock(&self) -> DateTime<Utc> {
        self.claimed_at + chrono::Duration::from_std(self.claimed.elapsed()).unwrap_or_default()
    }

    /// Time since enqueue (created_at), on the database clock.
    pub(crate) fn since_enqueue(&self) -> Duration {
        (self.now_on_database_clock() - self.job.created_at)
            .to_std()
            .unwrap_or_default()
    }
}

/// How many times the last batch is retried at shutdown when the database is
/// unreachable. Outcomes that still cannot be written are safe to lose: their
/// leases lapse and the sweeper retries those jobs.
const FINAL_FLUSH_TRIES: u32 = 5;

/// Write outcomes as they arrive. Whatever queued up while the previous
/// statement ran goes into the next one (up to `batch_size`), so an idle
/// worker writes at once and a busy one shares each commit among many jobs.
/// After `stop`, drains what is left and returns.
pub(crate) async fn run_completer(
    pool: PgPool,
    owner: Arc<str>,
    mut outcomes: mpsc::Receiver<Completion>,
    batch_size: usize,
    stats: Arc<WorkerStats>,
    stop: CancellationToken,
) {
    let mut batch: Vec<(Lease, FinishOutcome)> = Vec::with_capacity(batch_size);
    let mut metas: Vec<AttemptMeta> = Vec::with_capacity(batch_size);
    loop {
        let first = tokio::select! {
            biased;
            next = outcomes.recv() => next,
            _ = stop.cancelled() => outcomes.try_recv().ok(),
        };
        let Some(first) = first else { return };
        batch.push((first.lease, first.outcome));
        metas.push(first.meta);
        while batch.len() < batch_size {
            match outcomes.try_recv() {
                Ok(next) => {
                    batch.push((next.lease, next.outcome));
                    metas.push(next.meta);
                }
                Err(_) => break,
            }
        }
        write_batch(&pool, &owner, &batch, &metas, &stats, &stop).await;
        batch.clear();
        metas.clear();
    }
}

async fn write_batch(
    pool: &PgPool,
    owner: &str,
    batch: &[(Lease, FinishOutcome)],
    metas: &[AttemptMeta],
    stats: &WorkerStats,
    stop: &CancellationToken,
) {
    let mut pause = Pause::new(Duration::from_millis(50), Duration::from_secs(5));
    let mut tries_after_stop = 0;
    loop {
        match jobwire_core::finish_many(pool, owner, batch).await {
            Ok(results) => {
                bump(&stats.completion_batches);
                // Results come back in input order.
                for ((result, meta), (_, outcome)) in results.into_iter().zip(metas).zip(batch) {
                    record(result, meta, outcome, stats);
                }
                return;
            }
            Err(err) => {
                bump(&stats.database_errors);
                if stop.is_cancelled() {
                    tries_after_stop += 1;
                    if tries_after_stop >= FINAL_FLUSH_TRIES {
                        tracing::error!(error = %err, outcomes = batch.len(),
                            "giving up on the last outcomes; their leases will lapse and the sweeper will retry them");
                        return;
                    }
                }
                tracing::warn!(error = %err, outcomes = batch.len(), "writing outcomes failed; retrying");
                // Not cancellable: the outcomes must be written (or given up
                // on above) before the worker may report that it stopped.
                tokio::time::sleep(pause.next_after_failure()).await;
            }
        }
    }
}

fn record(result: FinishResult, meta: &AttemptMeta, outcome: &FinishOutcome, stats: &WorkerStats) {
    let job = &meta.job;
    let job_type = if meta.handled {
        job.job_type.as_str()
    } else {
        metrics::UNKNOWN_JOB_TYPE
    };
    match result {
        FinishResult::Recorded { job_id, state, .. }
            if *outcome == FinishOutcome::Returned && state == JobState::RetryWait =>
        {
            // Given back unstarted: no attempt was made, so no outcome.
            bump(&stats.returned);
            metrics::record_returned(&job.queue);
            tracing::debug!(%job_id, "returned unstarted");
        }
        FinishResult::Recorded {
            job_id,
            state,
            cancel_latency,
            ..
        } => {
            let counter = match state {
                JobState::Succeeded => &stats.succeeded,
                JobState::RetryWait => &stats.retried,
                JobState::Failed => &stats.failed,
                JobState::Cancelled => &stats.cancelled,
                other => {
                    tracing::error!(%job_id, state = %other, "outcome recorded into an unexpected state");
                    return;
                }
            };
            bump(counter);
            if let Some(outcome) = metrics::outcome_label(state) {
                metrics::record_outcome(&job.queue, job_type, outcome);
            }
            if state.is_terminal() && meta.handled {
                metrics::record_end_to_end(&job.queue, job_type, meta.since_enqueue());
            }
            if let Some(latency) = cancel_latency {
                metrics::record_cancel_latency(&job.queue, latency);
            }
            tracing::debug!(%job_id, %state, "outcome recorded");
        }
        FinishResult::Fenced { job_id } => {
            bump(&stats.fenced);
            metrics::record_outcome(&job.queue, job_type, "fenced");
            tracing::warn!(%job_id, "outcome rejected: the lease had been lost (fenced)");
        }
    }
}
