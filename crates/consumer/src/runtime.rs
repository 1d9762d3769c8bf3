//! The job runtime: runs claimed jobs, whatever woke them up.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use jobwire_core::{ClaimedJob, FinishOutcome, Lease};
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::background::{Breakdown, spawn_watched};
use crate::completer::{
    AttemptMeta, CompleterConfig, Completion, PendingOutcome, PendingOutcomes, run_completer,
};
use crate::handler::RegisteredHandler;
use crate::lease_keeper::{LeaseTable, run_lease_keeper};
use crate::local_queue::{LOCAL_QUEUE_MAX_WAIT, StartGate};
use crate::metrics;
use crate::stats::{WorkerReport, WorkerStats, bump};
use crate::{CancelReason, HandlerRegistry, JobContext, JobError, JobErrorKind};

/// Settings shared by every way of running jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeConfig {
    /// Lease owner id written into every claimed row. Unique per process.
    pub worker_id: String,
    /// Lease length; heartbeats renew it every third of it.
    pub lease: Duration,
    /// How long a cancelled handler gets to return before it is aborted.
    pub cancel_grace: Duration,
    /// Most outcomes written by one completion statement. One completer
    /// writes for every queue of the process, one statement at a time: at
    /// 500, two busy claim loops (two queues, or one queue given twice)
    /// kept it writing full batches back to back, and that bound the
    /// process (docs/benchmarks.md, "Why two worker processes drained
    /// faster than one").
    pub completion_batch_size: usize,
    /// How long the completer waits for more outcomes while other jobs this
    /// runtime holds (starting, running, or waiting for a handler slot)
    /// have not sent theirs yet, before it writes what it has. Jobs claimed
    /// together tend to finish together: without the wait the first outcome
    /// goes out alone and the rest in a second statement (and on a capped
    /// queue the lone freed slot costs a claim of its own). The wait ends
    /// early once no outcome is left to come. Zero writes at once.
    pub completion_linger: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            worker_id: crate::default_worker_id(),
            lease: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            completion_batch_size: 2000,
            completion_linger: Duration::from_millis(1),
        }
    }
}

impl RuntimeConfig {
    /// The longest [`RuntimeConfig::completion_linger`]: an outcome waits
    /// at most this long before its write starts.
    pub const MAX_COMPLETION_LINGER: Duration = Duration::from_millis(100);

    /// The longest lease. A lease is renewed every third of it while the
    /// handler runs, so a long job needs no long lease; a long lease only
    /// delays the sweeper's retry of a dead worker's jobs (a lease of
    /// centuries would be a time no client can read back).
    pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

    /// Reject settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.worker_id.trim().is_empty() {
            return Err("worker_id must not be empty".into());
        }
        if self.lease < Duration::from_millis(300) || self.lease > Self::MAX_LEASE {
            return Err(format!(
                "lease must be from 300 ms to {} ms (a day), got {} ms",
                Self::MAX_LEASE.as_millis(),
                self.lease.as_millis()
            ));
        }
        if self.completion_batch_size == 0 {
            return Err("completion_batch_size must be at least 1".into());
        }
        if self.completion_linger > Self::MAX_COMPLETION_LINGER {
            return Err(format!(
                "completion_linger must be at most {} ms, got {} ms",
                Self::MAX_COMPLETION_LINGER.as_millis(),
                self.completion_linger.as_millis()
            ));
        }
        Ok(())
    }
}

/// How a handler task ended.
enum HandlerEnd {
    Returned(Result<(), JobError>),
    Panicked(String),
    /// Cancelled and did not return within the grace period: aborted.
    Aborted,
}

struct Inner {
    /// If the runtime is dropped without `shutdown`, its background tasks
    /// still stop. First, so that it is dropped first: the completer must
    /// see its stop before it sees the outcome channel close, or it would
    /// take the close for an early end.
    _stop_on_drop: DropGuard,
    pool: PgPool,
    worker_id: Arc<str>,
    config: RuntimeConfig,
    registry: HandlerRegistry,
    leases: Arc<LeaseTable>,
    /// Jobs whose outcomes are still to come: the completer waits a moment
    /// for them.
    pending: PendingOutcomes,
    outcomes: mpsc::Sender<Completion>,
    /// Every job task, so shutdown can wait for the drain.
    jobs: TaskTracker,
    /// Cancelled when shutdown begins: a claimed-ahead job still waiting
    /// for a slot is given back instead of started. Also at a breakdown,
    /// when no job starts at all.
    stop_starting: CancellationToken,
    /// Set if the lease keeper or the completer ends before shutdown.
    breakdown: Arc<Breakdown>,
    stats: Arc<WorkerStats>,
    /// Background tasks (their watchers) and the tokens that stop them (in
    /// shutdown order).
    lease_keeper: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
    completer: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
}

/// Runs claimed jobs: each in its own task with a [`JobContext`], renewed by
/// one shared heartbeat loop, its outcome written by one batching completer.
/// Cheap to clone; every clone drives the same runtime.
///
/// Lifecycle: [`JobRuntime::start`] spawns the heartbeat and completion
/// loops; feed it with [`JobRuntime::spawn`]; stop feeding, then call
/// [`JobRuntime::shutdown`] once, which drains running jobs under a deadline
/// and flushes the last outcomes.
#[derive(Clone)]
pub struct JobRuntime {
    inner: Arc<Inner>,
}

impl JobRuntime {
    /// Start the runtime's background loops. Call from within a Tokio runtime.
    pub fn start(pool: PgPool, registry: HandlerRegistry, config: RuntimeConfig) -> Self {
        Self::start_with_stats(pool, registry, config, Arc::default())
    }

    /// [`JobRuntime::start`], counting into `stats` (so a caller can watch
    /// them while the runtime works).
    pub fn start_with_stats(
        pool: PgPool,
        registry: HandlerRegistry,
        config: RuntimeConfig,
        stats: Arc<WorkerStats>,
    ) -> Self {
        let worker_id: Arc<str> = Arc::from(config.worker_id.as_str());
        let leases = Arc::new(LeaseTable::default());
        let stop_all = CancellationToken::new();
        let stop_starting = CancellationToken::new();
        let breakdown = Arc::new(Breakdown::default());
        // A background loop that ends early: start nothing more, and cancel
        // what runs as at a shutdown's deadline (recorded as retries, so the
        // leases are given back while the completer can still write).
        let break_down = {
            let leases = leases.clone();
            let stop_starting = stop_starting.clone();
            move || {
                stop_starting.cancel();
                leases.cancel_all(CancelReason::Shutdown);
            }
        };

        let keeper_stop = stop_all.child_token();
        let keeper = spawn_watched(
            "lease keeper",
            keeper_stop.clone(),
            breakdown.clone(),
            break_down.clone(),
            run_lease_keeper(
                pool.clone(),
                worker_id.clone(),
                leases.clone(),
                config.lease,
                stats.clone(),
                keeper_stop.clone(),
            ),
        );

        let (outcomes, outcome_rx) = mpsc::channel(config.completion_batch_size * 4);
        let pending = PendingOutcomes::default();
        let completer_stop = stop_all.child_token();
        let completer = spawn_watched(
            "completer",
            completer_stop.clone(),
            breakdown.clone(),
            break_down,
            run_completer(
                CompleterConfig {
                    pool: pool.clone(),
                    owner: worker_id.clone(),
                    batch_size: config.completion_batch_size,
                    linger: config.completion_linger,
                    pending: pending.clone(),
                    stats: stats.clone(),
                },
                outcome_rx,
                completer_stop.clone(),
            ),
        );

        JobRuntime {
            inner: Arc::new(Inner {
                _stop_on_drop: stop_all.drop_guard(),
                pool,
                worker_id,
                config,
                registry,
                leases,
                pending,
                outcomes,
                jobs: TaskTracker::new(),
                stop_starting,
                breakdown,
                stats,
                lease_keeper: Mutex::new(Some((keeper_stop, keeper))),
                completer: Mutex::new(Some((completer_stop, completer))),
            }),
        }
    }

    /// Wait until the runtime breaks down: its lease keeper or completer
    /// ended before shutdown. Its running jobs are then already cancelled
    /// and no new one starts; the caller should stop claiming and call
    /// [`JobRuntime::shutdown`]. Returns why. Pending forever otherwise.
    pub async fn broken_down(&self) -> String {
        self.inner.breakdown.wait().await
    }

    /// Why the runtime broke down, if it did (also during a shutdown's
    /// drain, after [`JobRuntime::broken_down`] was last watched).
    pub fn breakdown(&self) -> Option<String> {
        self.inner.breakdown.reason()
    }

    /// The lease owner id.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// The lease length jobs must be claimed with.
    pub fn lease(&self) -> Duration {
        self.inner.config.lease
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.inner.stats.clone()
    }

    /// Attempts running right now.
    pub fn in_flight(&self) -> usize {
        self.inner.leases.len()
    }

    /// Run a job this worker has just claimed (with [`JobRuntime::worker_id`]
    /// as lease owner and [`JobRuntime::lease`] as lease). `slot` is held
    /// until the handler is done, which is how callers bound concurrency.
    pub fn spawn(&self, job: ClaimedJob, slot: Option<OwnedSemaphorePermit>) {
        self.spawn_with_gate(job, slot, None);
    }

    /// [`JobRuntime::spawn`] for a job claimed ahead: it starts when `gate`
    /// gives it a handler slot, or is given back unstarted (see
    /// [`crate::local_queue`]). `held` is kept until it is done either way.
    pub(crate) fn spawn_ahead(&self, job: ClaimedJob, held: OwnedSemaphorePermit, gate: StartGate) {
        self.spawn_with_gate(job, Some(held), Some(gate));
    }

    fn spawn_with_gate(
        &self,
        job: ClaimedJob,
        slot: Option<OwnedSemaphorePermit>,
        gate: Option<StartGate>,
    ) {
        let inner = self.inner.clone();
        // Counted from the claim, so that the completer waits for the
        // outcomes of jobs not yet started as well as running ones.
        let pending = inner.pending.enter();
        // One span per attempt, linked to the span the job was enqueued in.
        let span = tracing::info_span!("job", job_id = %job.lease.job_id,
            generation = %job.lease.generation, attempt = job.attempt, job_type = %job.job_type,
            queue = %job.queue);
        if let Some(trace) = &job.trace_context {
            trace.link(&span);
        }
        self.inner.jobs.spawn(
            async move {
                inner.run_job(job, gate, pending).await;
                drop(slot);
            }
            .instrument(span),
        );
    }

    /// Staged shutdown. Callers stop claiming first. Then: wait up to
    /// `drain_timeout` for running jobs; cancel the rest (reason
    /// [`CancelReason::Shutdown`]: recorded as a retry, so their leases are
    /// released rather than left to lapse) and give them the cancel grace;
    /// stop heartbeats; flush the last outcomes. Returns the final counters.
    pub async fn shutdown(self, drain_timeout: Duration) -> WorkerReport {
        let inner = &self.inner;
        inner.stop_starting.cancel();
        inner.jobs.close();
        if tokio::time::timeout(drain_timeout, inner.jobs.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = inner.leases.len(),
                "drain deadline passed; cancelling running jobs"
            );
            inner.leases.cancel_all(CancelReason::Shutdown);
            // Bounded: a job whose outcome waits for room in the completer's
            // channel, while the completer retries a write to a database
            // that went away, ends only once the completer stops (below).
            let grace = inner.config.cancel_grace + Duration::from_secs(1);
            if tokio::time::timeout(grace, inner.jobs.wait())
                .await
                .is_err()
            {
                tracing::warn!(
                    "outcomes still waiting to be written; stopping the completer with what it holds"
                );
            }
        }
        for task in [&inner.lease_keeper, &inner.completer] {
            let taken = task
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take();
            if let Some((stop, watcher)) = taken {
                stop.cancel();
                // The watcher has logged how the loop ended.
                let _ = watcher.await;
            }
        }
        // Every job task has ended or ends now: the completer is gone, so
        // an outcome still waiting to be sent is refused at once.
        inner.jobs.wait().await;
        inner.stats.report()
    }
}

impl Inner {
    async fn run_job(&self, job: ClaimedJob, gate: Option<StartGate>, pending: PendingOutcome) {
        bump(&self.stats.claimed);
        let lease = job.lease;
        // The claim's instant on the database clock (it set the lease), so
        // queue wait and end-to-end time need no agreement between clocks.
        let claimed_at = job.lease_expires_at
            - chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        let job = Arc::new(job);
        let mut meta = AttemptMeta {
            job: job.clone(),
            claimed_at,
            claimed: Instant::now(),
            handled: true,
        };
        let Some(registered) = self.registry.get(&job.job_type).cloned() else {
            meta.handled = false;
            bump(&self.stats.unknown_job_type);
            let message = format!(
                "no handler for job type {:?} on worker {}; replay it once a worker that knows it runs",
                job.job_type, self.worker_id
            );
            self.fail_unstarted(lease, "UNKNOWN_JOB_TYPE", message, meta, pending)
                .await;
            return;
        };
        if let Some(unreadable) = &job.unreadable_payload {
            // Written other than through this library or the API (the SQL
            // enqueue, a row by hand): no handler can be given it, and a
            // retry would read the same row.
            let message = format!(
                "the stored payload is not JSON this worker can read ({unreadable}); correct the row or enqueue the job again"
            );
            self.fail_unstarted(lease, "UNREADABLE_PAYLOAD", message, meta, pending)
                .await;
            return;
        }
        let cancel = CancellationToken::new();
        let reason = Arc::new(OnceLock::new());
        self.leases.insert(
            lease,
            cancel.clone(),
            reason.clone(),
            Instant::now() + self.config.lease,
        );
        // A claimed-ahead job waits for a handler slot, its lease renewed
        // meanwhile; one that never gets one is given back unstarted. So is
        // any job claimed after a breakdown (its lease would not be renewed).
        let turn = match &gate {
            None if self.breakdown.happened() => {
                self.leases.remove(lease);
                self.report(lease, FinishOutcome::Returned, meta, pending)
                    .await;
                return;
            }
            None => None,
            Some(gate) => {
                let turn = if cancel.is_cancelled() || self.stop_starting.is_cancelled() {
                    None
                } else if let Some(turn) = gate.try_turn() {
                    Some(turn)
                } else {
                    // Counted only when it does wait: most claimed-ahead
                    // jobs of a drain find a slot free at once.
                    let _waiting = metrics::WaitingForSlot::new(&job.queue);
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => None,
                        _ = self.stop_starting.cancelled() => None,
                        // The handlers slowed down since the claim: let
                        // another worker (or this one, later) have it.
                        _ = tokio::time::sleep(LOCAL_QUEUE_MAX_WAIT) => None,
                        turn = gate.turn() => Some(turn),
                    }
                };
                if turn.is_none() {
                    self.leases.remove(lease);
                    // Given back whatever ended the wait, a lost lease too:
                    // the write is fenced, so it changes nothing if the lease
                    // did move on (reported as fenced), and otherwise spares
                    // the job the attempt a lapsed lease would cost it.
                    self.report(lease, FinishOutcome::Returned, meta, pending)
                        .await;
                    return;
                }
                turn
            }
        };
        metrics::record_attempt_start(&job, meta.now_on_database_clock());
        let started = Instant::now();
        let attempt = job.attempt;
        let completed = Arc::new(AtomicBool::new(false));
        let ctx = JobContext {
            job: job.clone(),
            cancel: cancel.clone(),
            reason: reason.clone(),
            deadline: deadline_after(started, registered.options.timeout),
            worker_id: self.worker_id.clone(),
            pool: self.pool.clone(),
            completed: completed.clone(),
        };
        let end = self.run_handler(&registered, ctx, &cancel, &reason).await;
        metrics::record_run_time(&job, started.elapsed());
        drop(turn);
        // Out of the lease keeper's table before the outcome is written:
        // renewing it until then would have the heartbeat update rows the
        // completer's statement is updating, in another order (a deadlock
        // under load), and a completer retrying for ever would keep the
        // job RUNNING for ever. A write held up longer than what is left
        // of the lease finds the job swept and is fenced (the sweeper
        // retries it), as when a worker dies.
        self.leases.remove(lease);
        if completed.load(Ordering::SeqCst) {
            // The handler committed the completion with its own writes.
            bump(&self.stats.completed_by_handler);
            bump(&self.stats.succeeded);
            metrics::record_outcome(&job.queue, &job.job_type, "succeeded");
            metrics::record_end_to_end(&job.queue, &job.job_type, meta.since_enqueue());
            return;
        }
        let outcome = self.outcome(&registered, attempt, end, reason.get().copied());
        self.report(lease, outcome, meta, pending).await;
    }

    /// Run the handler in its own task (so a panic is caught and an
    /// unresponsive handler can be aborted), enforcing its timeout.
    async fn run_handler(
        &self,
        registered: &RegisteredHandler,
        ctx: JobContext,
        cancel: &CancellationToken,
        reason: &OnceLock<CancelReason>,
    ) -> HandlerEnd {
        let deadline = ctx.deadline;
        let handler = registered.handler.clone();
        let mut task = tokio::spawn(async move { handler.run(ctx).await });
        let finished = tokio::select! {
            joined = &mut task => Some(joined),
            _ = tokio::time::sleep_until(deadline) => {
                let _ = reason.set(CancelReason::Timeout);
                cancel.cancel();
                None
            }
            _ = cancel.cancelled() => None,
        };
        let joined = match finished {
            Some(joined) => joined,
            None => match tokio::time::timeout(self.config.cancel_grace, &mut task).await {
                Ok(joined) => joined,
                Err(_) => {
                    tracing::warn!(grace = ?self.config.cancel_grace,
                        "handler ignored cancellation; aborting it");
                    task.abort();
                    return HandlerEnd::Aborted;
                }
            },
        };
        match joined {
            Ok(result) => HandlerEnd::Returned(result),
            Err(err) if err.is_panic() => HandlerEnd::Panicked(panic_message(err.into_panic())),
            Err(_) => HandlerEnd::Aborted,
        }
    }

    /// What to record for an attempt.
    fn outcome(
        &self,
        registered: &RegisteredHandler,
        attempt: i32,
        end: HandlerEnd,
        reason: Option<CancelReason>,
    ) -> FinishOutcome {
        let backoff = |retry_after: Option<Duration>| {
            retry_after.unwrap_or_else(|| {
                registered
                    .options
                    .backoff
                    .delay(u32::try_from(attempt).unwrap_or(1))
            })
        };
        match (reason, end) {
            (Some(CancelReason::LeaseLost), end) => {
                bump(&self.stats.lease_lost);
                // Reported all the same. The write is fenced: refused if
                // the lease did move on, and recorded if it still held (the
                // keeper stops an attempt when renewals failed for a while,
                // an estimate), which spares the job a lapse and a sweep.
                let gave_up = |result: &Result<(), JobError>| matches!(result, Err(err) if err.kind == JobErrorKind::Cancelled);
                match end {
                    // The handler's own answer, as without the stop: a job
                    // it called fatal is not made to run again.
                    HandlerEnd::Returned(result) if !gave_up(&result) => {
                        self.outcome(registered, attempt, HandlerEnd::Returned(result), None)
                    }
                    _ => FinishOutcome::Retry {
                        delay: backoff(None),
                        code: "LEASE_LOST".into(),
                        message: format!(
                            "worker {} stopped the attempt: its lease could not be renewed in time",
                            self.worker_id
                        ),
                    },
                }
            }
            (_, HandlerEnd::Returned(Ok(()))) => FinishOutcome::Succeeded,
            (Some(CancelReason::Requested), _) => FinishOutcome::CancelAcknowledged,
            (Some(CancelReason::Timeout), _) => {
                bump(&self.stats.timed_out);
                FinishOutcome::Retry {
                    delay: backoff(None),
                    code: "TIMEOUT".into(),
                    message: format!(
                        "attempt ran past its timeout of {:?}",
                        registered.options.timeout
                    ),
                }
            }
            (Some(CancelReason::Shutdown), _) => FinishOutcome::Retry {
                delay: Duration::ZERO,
                code: "WORKER_SHUTDOWN".into(),
                message: format!("worker {} shut down during the attempt", self.worker_id),
            },
            (None, HandlerEnd::Returned(Err(err))) => match err.kind {
                JobErrorKind::Fatal => FinishOutcome::Fail {
                    code: err.code,
                    message: err.message,
                },
                JobErrorKind::Retryable | JobErrorKind::Cancelled => FinishOutcome::Retry {
                    delay: backoff(err.retry_after),
                    code: err.code,
                    message: err.message,
                },
            },
            (None, HandlerEnd::Panicked(message)) => {
                bump(&self.stats.panicked);
                tracing::error!(panic = %message, "handler panicked");
                FinishOutcome::Retry {
                    delay: backoff(None),
                    code: "PANIC".into(),
                    message: format!("handler panicked: {message}"),
                }
            }
            (None, HandlerEnd::Aborted) => FinishOutcome::Retry {
                delay: backoff(None),
                code: "ABORTED".into(),
                message: "handler task was aborted".into(),
            },
        }
    }

    /// Fail a claimed job no handler can be given, at once and for good
    /// (a retry would meet the same job), saying why.
    async fn fail_unstarted(
        &self,
        lease: Lease,
        code: &str,
        message: String,
        meta: AttemptMeta,
        pending: PendingOutcome,
    ) {
        tracing::warn!(job_id = %lease.job_id, "{message}");
        let outcome = FinishOutcome::Fail {
            code: code.to_owned(),
            message,
        };
        self.report(lease, outcome, meta, pending).await;
    }

    async fn report(
        &self,
        lease: Lease,
        outcome: FinishOutcome,
        meta: AttemptMeta,
        pending: PendingOutcome,
    ) {
        if self
            .outcomes
            .send(Completion {
                lease,
                outcome,
                meta,
                pending,
            })
            .await
            .is_err()
        {
            // Only after shutdown; the lease lapses and the sweeper retries.
            tracing::error!(job_id = %lease.job_id, "completer is gone; outcome not recorded");
        }
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// When an attempt started at `started` times out. A timeout too long to
/// add (`Duration::MAX` for "never") is a deadline a century away: an
/// overflow here panicked the job's task with its lease still in the lease
/// keeper's table, renewed for as long as the worker lived.
fn deadline_after(started: Instant, timeout: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    started.checked_add(timeout.min(CENTURY)).unwrap_or(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_too_long_to_add_is_a_deadline_a_century_away() {
        let started = Instant::now();
        let year = Duration::from_secs(365 * 24 * 60 * 60);
        assert_eq!(deadline_after(started, year), started + year);
        let never = deadline_after(started, Duration::MAX);
        assert!(never >= started + 99 * year, "{:?}", never - started);
    }
}
