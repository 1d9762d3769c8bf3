//! The workers' metrics, recorded through the `metrics` facade: a process
//! that serves `/metrics` installs a Prometheus recorder (jobwire-server
//! does); without one every call here is a no-op. Names and units follow
//! Prometheus conventions; labels are bounded (queue, job_type, outcome,
//! path, topic, result, state) — never job ids or error text. docs/operations.md explains
//! each one.

use std::time::Duration;

use jobwire_core::JobState;
use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};

/// Jobs claimed, by queue and how they were found (`postgres`: the
/// PostgreSQL path; `broker`: a wake-up; `safety_net`: straight from the
/// table after the broker path left them waiting past the bound).
pub const CLAIMED: &str = "jobwire_jobs_claimed_total";
/// Attempts whose handler started.
pub const ATTEMPTS: &str = "jobwire_job_attempts_total";
/// Attempt outcomes as the table recorded them (succeeded, retry, failed,
/// cancelled), or `fenced` (the table refused: the lease was lost). An
/// attempt the worker stopped because its lease could not be renewed is
/// reported too, as whatever the table then made of it.
pub const OUTCOMES: &str = "jobwire_job_outcomes_total";
/// Seconds from when a job became due (run_after) to its handler's start.
pub const QUEUE_WAIT: &str = "jobwire_job_queue_wait_seconds";
/// Jobs a worker claimed ahead of its free handler slots (the PostgreSQL
/// path's local queue), waiting for one now.
pub const CLAIMED_AHEAD: &str = "jobwire_jobs_claimed_ahead";
/// Jobs claimed ahead and given back unstarted (shutdown, a cancel
/// request, a lost lease, a wait for a slot past its bound).
pub const RETURNED: &str = "jobwire_jobs_returned_total";
/// Seconds a handler ran, per attempt.
pub const RUN_TIME: &str = "jobwire_job_run_seconds";
/// Seconds from enqueue (created_at) to the terminal outcome.
pub const END_TO_END: &str = "jobwire_job_end_to_end_seconds";
/// Seconds from a cancel request on a running job to CANCELLED.
pub const CANCEL_LATENCY: &str = "jobwire_job_cancel_latency_seconds";
/// Leases renewed by heartbeats.
pub const LEASE_RENEWALS: &str = "jobwire_lease_renewals_total";
/// Leases a heartbeat found lost (fenced), or that could not be renewed in
/// time: the attempt was cancelled.
pub const LEASE_RENEWALS_LOST: &str = "jobwire_lease_renewals_lost_total";
/// Expired leases the sweeper returned, by queue and the state it gave the job.
pub const LEASES_SWEPT: &str = "jobwire_leases_swept_total";
/// Broker deliveries (wake-ups) by what they led to.
pub const WAKE_UPS: &str = "jobwire_wake_ups_total";
/// Jobs the reconciler re-woke because their wake-up went missing.
pub const REWAKES: &str = "jobwire_reconciler_rewakes_total";
/// Schedule occurrences the scheduler enqueued.
pub const SCHEDULE_OCCURRENCES: &str = "jobwire_schedule_occurrences_total";

/// The `job_type` label of outcomes of jobs whose type no handler here
/// knows (the type itself comes from whoever enqueued the job).
pub const UNKNOWN_JOB_TYPE: &str = "_unknown";

/// Describe every worker metric (HELP and unit) to the installed recorder.
pub fn describe() {
    describe_counter!(
        CLAIMED,
        Unit::Count,
        "Jobs claimed, by queue and path (postgres, broker, safety_net)."
    );
    describe_counter!(
        ATTEMPTS,
        Unit::Count,
        "Attempts whose handler started, by queue and job type."
    );
    describe_counter!(
        OUTCOMES,
        Unit::Count,
        "Attempt outcomes by queue, job type and outcome (succeeded, retry, failed, cancelled, fenced)."
    );
    describe_histogram!(
        QUEUE_WAIT,
        Unit::Seconds,
        "Time from run_after (due) to the handler's start."
    );
    describe_gauge!(
        CLAIMED_AHEAD,
        Unit::Count,
        "Jobs claimed ahead of the free handler slots, waiting for one, by queue."
    );
    describe_counter!(
        RETURNED,
        Unit::Count,
        "Jobs claimed ahead and given back unstarted, by queue."
    );
    describe_histogram!(RUN_TIME, Unit::Seconds, "Time a handler ran, per attempt.");
    describe_histogram!(
        END_TO_END,
        Unit::Seconds,
        "Time from enqueue to the terminal outcome."
    );
    describe_histogram!(
        CANCEL_LATENCY,
        Unit::Seconds,
        "Time from a cancel request on a running job to CANCELLED."
    );
    describe_counter!(LEASE_RENEWALS, Unit::Count, "Leases renewed by heartbeats.");
    describe_counter!(
        LEASE_RENEWALS_LOST,
        Unit::Count,
        "Leases found lost or not renewable in time (the attempt was cancelled)."
    );
    describe_counter!(
        LEASES_SWEPT,
        Unit::Count,
        "Expired leases returned by the sweeper, by queue and resulting state."
    );
    describe_counter!(
        WAKE_UPS,
        Unit::Count,
        "Broker deliveries by topic and result (claimed or the miss reason)."
    );
    describe_counter!(
        REWAKES,
        Unit::Count,
        "Jobs re-woken by the reconciler because their wake-up went missing."
    );
    describe_counter!(
        SCHEDULE_OCCURRENCES,
        Unit::Count,
        "Schedule occurrences enqueued by the scheduler."
    );
}

/// How a claimed job was found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClaimPath {
    Postgres,
    Broker,
    SafetyNet,
}

impl ClaimPath {
    fn label(self) -> &'static str {
        match self {
            ClaimPath::Postgres => "postgres",
            ClaimPath::Broker => "broker",
            ClaimPath::SafetyNet => "safety_net",
        }
    }
}

pub(crate) fn record_claims(jobs: &[jobwire_core::ClaimedJob], path: ClaimPath) {
    // A claim statement's jobs are nearly always of one queue: one update
    // per run of a queue, not one per job.
    for run in jobs.chunk_by(|a, b| a.queue == b.queue) {
        counter!(CLAIMED, "queue" => run[0].queue.clone(), "path" => path.label())
            .increment(run.len() as u64);
    }
}

/// A claimed job's handler starts: one attempt, and how long it waited
/// since it became due (`started_at` on the database clock: the claim's
/// instant plus the time the job then waited here for a slot). Due is
/// `run_after`, or the enqueue for a job enqueued due in the past (a
/// backfill may name any time back to the year 1): the time before the
/// enqueue is nobody's wait, and one such job would swamp the histogram's
/// sum. The collector's queue age and the API count from the same instant.
pub(crate) fn record_attempt_start(
    job: &jobwire_core::ClaimedJob,
    started_at: chrono::DateTime<chrono::Utc>,
) {
    counter!(ATTEMPTS, "queue" => job.queue.clone(), "job_type" => job.job_type.clone())
        .increment(1);
    let waited = waited_since_due(job.run_after, job.created_at, started_at);
    histogram!(QUEUE_WAIT, "queue" => job.queue.clone(), "job_type" => job.job_type.clone())
        .record(waited.as_secs_f64());
}

/// How long a job waited from when it became due, `run_after` or its
/// enqueue, whichever came later, to `started_at` (none for a start before
/// either, a clock step).
fn waited_since_due(
    run_after: chrono::DateTime<chrono::Utc>,
    created_at: chrono::DateTime<chrono::Utc>,
    started_at: chrono::DateTime<chrono::Utc>,
) -> std::time::Duration {
    (started_at - run_after.max(created_at))
        .to_std()
        .unwrap_or_default()
}

/// One claimed-ahead job of `queue` waits for a handler slot, for as long
/// as this lives (dropped when the wait ends, however it ends).
pub(crate) struct WaitingForSlot(metrics::Gauge);

impl WaitingForSlot {
    pub(crate) fn new(queue: &str) -> Self {
        let waiting = gauge!(CLAIMED_AHEAD, "queue" => queue.to_owned());
        waiting.increment(1.0);
        WaitingForSlot(waiting)
    }
}

impl Drop for WaitingForSlot {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

pub(crate) fn record_returned(queue: &str) {
    counter!(RETURNED, "queue" => queue.to_owned()).increment(1);
}

pub(crate) fn record_run_time(job: &jobwire_core::ClaimedJob, ran: Duration) {
    histogram!(RUN_TIME, "queue" => job.queue.clone(), "job_type" => job.job_type.clone())
        .record(ran.as_secs_f64());
}

/// The label of an outcome the table recorded.
pub(crate) fn outcome_label(state: JobState) -> Option<&'static str> {
    match state {
        JobState::Succeeded => Some("succeeded"),
        JobState::RetryWait => Some("retry"),
        JobState::Failed => Some("failed"),
        JobState::Cancelled => Some("cancelled"),
        _ => None,
    }
}

pub(crate) fn record_outcome(queue: &str, job_type: &str, outcome: &'static str) {
    counter!(OUTCOMES, "queue" => queue.to_owned(), "job_type" => job_type.to_owned(), "outcome" => outcome)
        .increment(1);
}

pub(crate) fn record_end_to_end(queue: &str, job_type: &str, took: Duration) {
    histogram!(END_TO_END, "queue" => queue.to_owned(), "job_type" => job_type.to_owned())
        .record(took.as_secs_f64());
}

pub(crate) fn record_cancel_latency(queue: &str, took: Duration) {
    histogram!(CANCEL_LATENCY, "queue" => queue.to_owned()).record(took.as_secs_f64());
}

pub(crate) fn record_renewals(renewed: u64, lost: u64) {
    if renewed > 0 {
        counter!(LEASE_RENEWALS).increment(renewed);
    }
    if lost > 0 {
        counter!(LEASE_RENEWALS_LOST).increment(lost);
    }
}

pub(crate) fn record_swept(queue: &str, state: JobState) {
    counter!(LEASES_SWEPT, "queue" => queue.to_owned(), "state" => state.as_str()).increment(1);
}

pub(crate) fn record_wake_ups(topic: &str, result: &'static str, n: u64) {
    if n > 0 {
        counter!(WAKE_UPS, "topic" => topic.to_owned(), "result" => result).increment(n);
    }
}

pub(crate) fn record_rewakes(n: usize) {
    counter!(REWAKES).increment(n as u64);
}

pub(crate) fn record_occurrences(n: usize) {
    counter!(SCHEDULE_OCCURRENCES).increment(n as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_due_before_its_enqueue_waited_from_the_enqueue() {
        let at =
            |s: i64| chrono::DateTime::<chrono::Utc>::UNIX_EPOCH + chrono::Duration::seconds(s);
        let year_one = "0001-01-01T00:00:00Z".parse().unwrap();
        // Enqueued at 1,000 s due in the year 1 (a backfill), started at 1,002 s.
        assert_eq!(
            waited_since_due(year_one, at(1_000), at(1_002)),
            std::time::Duration::from_secs(2)
        );
        // A retry due at 1,500 s, first enqueued at 1,000 s, started at 1,501 s.
        assert_eq!(
            waited_since_due(at(1_500), at(1_000), at(1_501)),
            std::time::Duration::from_secs(1)
        );
        assert_eq!(
            waited_since_due(at(1_500), at(1_000), at(1_400)),
            std::time::Duration::ZERO
        );
    }
}
