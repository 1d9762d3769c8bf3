//! The completer: attempt outcomes, written in batches with one fenced
//! statement each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use jobwire_core::{ClaimedJob, FinishOutcome, FinishResult, JobState, Lease};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::stats::{WorkerStats, bump};
use jobwire_loop::{Outage, Pause};

/// One outcome to record.
pub(crate) struct Completion {
    pub(crate) lease: Lease,
    pub(crate) outcome: FinishOutcome,
    pub(crate) meta: AttemptMeta,
    /// Counts the outcome as still to come until the completer takes it.
    pub(crate) pending: PendingOutcome,
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

/// The jobs one runtime holds whose outcomes the completer has not taken
/// yet (starting, running, waiting for a handler slot, or sent). Their
/// outcomes are on their way, so the completer waits a moment for them.
#[derive(Clone, Default)]
pub(crate) struct PendingOutcomes(Arc<AtomicUsize>);

impl PendingOutcomes {
    /// A job is taken on; it counts until the guard is dropped: by the
    /// completer as it takes the outcome (so on taking the last one it sees
    /// none pending), or when the job ends without one (a lost lease).
    pub(crate) fn enter(&self) -> PendingOutcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        PendingOutcome(self.0.clone())
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }
}

/// One job's outcome still to come (see [`PendingOutcomes::enter`]).
pub(crate) struct PendingOutcome(Arc<AtomicUsize>);

impl Drop for PendingOutcome {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the completer writes with and how it batches.
pub(crate) struct CompleterConfig {
    pub(crate) pool: PgPool,
    /// The lease owner every outcome is fenced with.
    pub(crate) owner: Arc<str>,
    /// Most outcomes one statement writes.
    pub(crate) batch_size: usize,
    /// How long to wait for more outcomes while some are still to come.
    pub(crate) linger: Duration,
    pub(crate) pending: PendingOutcomes,
    pub(crate) stats: Arc<WorkerStats>,
}

/// How many times the last batch is retried at shutdown when the database is
/// unreachable. Outcomes that still cannot be written are safe to lose: their
/// leases lapse and the sweeper retries those jobs.
const FINAL_FLUSH_TRIES: u32 = 5;

/// Write outcomes as they arrive. Whatever queued up while the previous
/// statement ran goes into the next one (up to `batch_size`); while other
/// jobs of the runtime have outcomes still to come, the completer also
/// waits up to `linger` for them (jobs claimed together finish together).
/// So an idle worker writes at once and a busy one shares each commit
/// among many jobs. After `stop`, drains what is left and returns.
pub(crate) async fn run_completer(
    config: CompleterConfig,
    mut outcomes: mpsc::Receiver<Completion>,
    stop: CancellationToken,
) {
    let CompleterConfig {
        pool,
        owner,
        batch_size,
        linger,
        pending,
        stats,
    } = config;
    let mut batch: Vec<(Lease, FinishOutcome)> = Vec::with_capacity(batch_size);
    let mut metas: Vec<AttemptMeta> = Vec::with_capacity(batch_size);
    let mut writer = OutcomeWriter {
        pool: &pool,
        owner: &owner,
        stats: &stats,
        stop: &stop,
        outage: Outage::new(),
    };
    loop {
        let first = tokio::select! {
            biased;
            next = outcomes.recv() => next,
            _ = stop.cancelled() => outcomes.try_recv().ok(),
        };
        let Some(first) = first else { return };
        take(first, &mut batch, &mut metas);
        let linger_until = Instant::now() + linger;
        while batch.len() < batch_size {
            let next = match outcomes.try_recv() {
                Ok(next) => Some(next),
                // Nothing more is on its way (or the wait is over): write.
                Err(_) if linger.is_zero() || !pending.any() || stop.is_cancelled() => None,
                Err(_) => tokio::select! {
                    next = outcomes.recv() => next,
                    _ = tokio::time::sleep_until(linger_until) => None,
                    _ = stop.cancelled() => None,
                },
            };
            let Some(next) = next else { break };
            take(next, &mut batch, &mut metas);
        }
        writer.write_batch(&batch, &metas).await;
        batch.clear();
        metas.clear();
    }
}

/// Add an outcome to the batch; it is no longer to come.
fn take(
    completion: Completion,
    batch: &mut Vec<(Lease, FinishOutcome)>,
    metas: &mut Vec<AttemptMeta>,
) {
    let Completion {
        lease,
        outcome,
        meta,
        pending,
    } = completion;
    drop(pending);
    batch.push((lease, outcome));
    metas.push(meta);
}

/// Writes the completer's batches of outcomes.
struct OutcomeWriter<'a> {
    pool: &'a PgPool,
    /// The lease owner every outcome is fenced with.
    owner: &'a str,
    stats: &'a WorkerStats,
    stop: &'a CancellationToken,
    /// Failed writes in a row, across batches and the one-by-one rewrites:
    /// the line that ends them comes with the next write that works.
    outage: Outage,
}

impl OutcomeWriter<'_> {
    async fn write_batch(&mut self, batch: &[(Lease, FinishOutcome)], metas: &[AttemptMeta]) {
        let Err(refused) = self.write_until_written(batch, metas).await else {
            return;
        };
        if batch.len() == 1 {
            give_up_on(&batch[0].0, &refused);
            return;
        }
        // The same statement would be refused again: one outcome in it
        // holds what the database will not take. Written one by one, every
        // other outcome is recorded, and only that one is given up on.
        tracing::warn!(error = %refused, outcomes = batch.len(),
            "the database refused a batch of outcomes; writing them one by one");
        for (one, meta) in batch.chunks(1).zip(metas.chunks(1)) {
            if let Err(refused) = self.write_until_written(one, meta).await {
                give_up_on(&one[0].0, &refused);
            }
        }
    }

    /// Write `batch` in one statement, retrying while the database is away;
    /// `Err` when it refuses the statement itself (retrying would not help).
    async fn write_until_written(
        &mut self,
        batch: &[(Lease, FinishOutcome)],
        metas: &[AttemptMeta],
    ) -> Result<(), jobwire_core::Error> {
        let stats = self.stats;
        let mut pause = Pause::new(Duration::from_millis(50), Duration::from_secs(5));
        let mut tries_after_stop = 0;
        loop {
            match jobwire_core::finish_many(self.pool, self.owner, batch).await {
                Ok(results) => {
                    bump(&stats.completion_batches);
                    if let Some(ended) = self.outage.succeeded() {
                        tracing::info!(outcomes = batch.len(), "writing outcomes again {ended}");
                    }
                    // Results come back in input order.
                    for ((result, meta), (_, outcome)) in results.into_iter().zip(metas).zip(batch)
                    {
                        record(result, meta, outcome, stats);
                    }
                    return Ok(());
                }
                Err(err) if !err.is_transient() => {
                    bump(&stats.database_errors);
                    self.outage.failed();
                    return Err(err);
                }
                Err(err) => {
                    bump(&stats.database_errors);
                    self.outage.failed();
                    if self.stop.is_cancelled() {
                        tries_after_stop += 1;
                        if tries_after_stop >= FINAL_FLUSH_TRIES {
                            tracing::error!(error = %err, outcomes = batch.len(),
                                "giving up on the last outcomes; their leases will lapse and the sweeper will retry them");
                            return Ok(());
                        }
                    }
                    tracing::warn!(error = %err, outcomes = batch.len(), "writing outcomes failed; retrying");
                    // Not cancellable: the outcomes must be written (or given
                    // up on above) before the worker may report that it
                    // stopped.
                    tokio::time::sleep(pause.next_after_failure()).await;
                }
            }
        }
    }
}

/// An outcome the database refuses whatever it is given: left unwritten,
/// its job is retried once its lease lapses (the sweeper), like a job whose
/// worker died.
fn give_up_on(lease: &Lease, refused: &jobwire_core::Error) {
    tracing::error!(job_id = %lease.job_id, error = %refused,
        "the database refused this outcome; the job's lease will lapse and the sweeper will retry it");
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
            state: JobState::Cancelled,
            cancel_latency,
            ..
        } if *outcome == FinishOutcome::Returned => {
            // Given back unstarted with a cancel pending: it ends cancelled,
            // but no attempt was made, so no outcome and no end-to-end
            // sample; the cancel itself took this long.
            bump(&stats.cancelled);
            if let Some(latency) = cancel_latency {
                metrics::record_cancel_latency(&job.queue, latency);
            }
            tracing::debug!(%job_id, "returned unstarted; its cancel took effect");
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

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    fn meta() -> AttemptMeta {
        let now = Utc::now();
        AttemptMeta {
            job: Arc::new(ClaimedJob {
                lease: lease(),
                queue: "q".into(),
                job_type: "t".into(),
                priority: 0,
                payload: serde_json::json!({}),
                unreadable_payload: None,
                attempt: 1,
                max_attempts: 3,
                lease_expires_at: now,
                created_at: now,
                run_after: now,
                trace_context: None,
            }),
            claimed_at: now,
            claimed: Instant::now(),
            handled: true,
        }
    }

    fn lease() -> Lease {
        Lease {
            job_id: uuid::Uuid::nil(),
            generation: jobwire_core::LeaseGeneration(1),
        }
    }

    /// What `record` recorded: each metric's name with its counter value
    /// or its histogram's sample count.
    fn recorded(
        state: JobState,
        outcome: FinishOutcome,
        stats: &WorkerStats,
    ) -> Vec<(String, u64)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let result = FinishResult::Recorded {
            job_id: uuid::Uuid::nil(),
            state,
            run_after: Utc::now(),
            cancel_latency: Some(Duration::from_millis(5)),
        };
        ::metrics::with_local_recorder(&recorder, || record(result, &meta(), &outcome, stats));
        let mut seen: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let name = key.key().name().to_owned();
                match value {
                    DebugValue::Counter(n) => (name, n),
                    DebugValue::Histogram(samples) => (name, samples.len() as u64),
                    DebugValue::Gauge(_) => (name, 0),
                }
            })
            .collect();
        seen.sort();
        seen
    }

    #[test]
    fn a_job_returned_unstarted_with_a_cancel_pending_counts_no_attempt_outcome() {
        let stats = WorkerStats::default();
        assert_eq!(
            recorded(JobState::Cancelled, FinishOutcome::Returned, &stats),
            vec![(crate::metrics::CANCEL_LATENCY.to_owned(), 1)],
            "only the cancel's latency: no outcome, no end-to-end sample"
        );
        assert_eq!(stats.cancelled.load(Ordering::Relaxed), 1);

        // The same state reached by a handler that stopped for the cancel
        // is an attempt's outcome.
        let mut seen = recorded(
            JobState::Cancelled,
            FinishOutcome::CancelAcknowledged,
            &stats,
        );
        seen.retain(|(name, _)| name != crate::metrics::CANCEL_LATENCY);
        assert_eq!(
            seen,
            vec![
                (crate::metrics::END_TO_END.to_owned(), 1),
                (crate::metrics::OUTCOMES.to_owned(), 1),
            ]
        );

        // Returned with no cancel pending: counted as returned, no outcome.
        assert_eq!(
            recorded(JobState::RetryWait, FinishOutcome::Returned, &stats),
            vec![(crate::metrics::RETURNED.to_owned(), 1)]
        );
        assert_eq!(stats.returned.load(Ordering::Relaxed), 1);
    }
}
