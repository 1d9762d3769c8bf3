//! The gauges the database collector exports, by name. The workers' and the
//! relay's metrics are named in their own crates.

use metrics::{Unit, describe_gauge};

pub(crate) const QUEUE_JOBS: &str = "jobwire_queue_jobs";
pub(crate) const QUEUE_OLDEST_RUNNABLE_AGE: &str = "jobwire_queue_oldest_runnable_age_seconds";
pub(crate) const QUEUE_PAUSED: &str = "jobwire_queue_paused";
pub(crate) const QUEUE_LEASE_EXPIRED: &str = "jobwire_queue_lease_expired_jobs";
pub(crate) const FAILED_JOBS: &str = "jobwire_failed_jobs";
pub(crate) const OUTBOX_ROWS: &str = "jobwire_outbox_rows";
pub(crate) const OUTBOX_DUE_ROWS: &str = "jobwire_outbox_due_rows";
pub(crate) const OUTBOX_OLDEST_DUE_AGE: &str = "jobwire_outbox_oldest_due_age_seconds";
pub(crate) const OUTBOX_DEAD_ROWS: &str = "jobwire_outbox_dead_rows";
pub(crate) const TABLE_LIVE_TUPLES: &str = "jobwire_table_live_tuples";
pub(crate) const TABLE_DEAD_TUPLES: &str = "jobwire_table_dead_tuples";
pub(crate) const TABLE_LAST_AUTOVACUUM: &str = "jobwire_table_last_autovacuum_timestamp_seconds";
pub(crate) const SCHEDULE_DELAY: &str = "jobwire_schedule_delay_seconds";
pub(crate) const COLLECTOR_LEADER: &str = "jobwire_collector_leader";
pub(crate) const COLLECTOR_DURATION: &str = "jobwire_collector_duration_seconds";
pub(crate) const COLLECTOR_LAST_SUCCESS: &str = "jobwire_collector_last_success_timestamp_seconds";

pub(crate) fn describe() {
    describe_gauge!(
        QUEUE_JOBS,
        Unit::Count,
        "Jobs in the hot table by queue and state (every state of every known queue, zero-filled)."
    );
    describe_gauge!(
        QUEUE_OLDEST_RUNNABLE_AGE,
        Unit::Seconds,
        "Seconds the oldest due, claimable job of the queue has waited (0: none waits). Scale workers on this."
    );
    describe_gauge!(QUEUE_PAUSED, Unit::Count, "1 while the queue is paused.");
    describe_gauge!(
        QUEUE_LEASE_EXPIRED,
        Unit::Count,
        "Jobs still RUNNING (or CANCEL_REQUESTED) whose lease expired: their worker died or froze and no sweeper has returned them yet."
    );
    describe_gauge!(
        FAILED_JOBS,
        Unit::Count,
        "FAILED jobs (dead letters) by job type and error code: the largest groups, the rest summed under _other."
    );
    describe_gauge!(OUTBOX_ROWS, Unit::Count, "Outbox rows not yet published.");
    describe_gauge!(
        OUTBOX_DUE_ROWS,
        Unit::Count,
        "Outbox rows due for publishing now."
    );
    describe_gauge!(
        OUTBOX_OLDEST_DUE_AGE,
        Unit::Seconds,
        "Seconds the oldest due outbox row has waited for the relay (0: none)."
    );
    describe_gauge!(
        OUTBOX_DEAD_ROWS,
        Unit::Count,
        "Outbox rows moved aside to job_outbox_dead."
    );
    describe_gauge!(
        TABLE_LIVE_TUPLES,
        Unit::Count,
        "Live rows of jobs, job_outbox and jobs_history (PostgreSQL's estimate)."
    );
    describe_gauge!(
        TABLE_DEAD_TUPLES,
        Unit::Count,
        "Dead rows waiting for vacuum in jobs, job_outbox and jobs_history: bloat."
    );
    describe_gauge!(
        TABLE_LAST_AUTOVACUUM,
        Unit::Seconds,
        "When autovacuum last finished on the table (Unix time; 0: never)."
    );
    describe_gauge!(
        SCHEDULE_DELAY,
        Unit::Seconds,
        "Seconds since the schedule's next occurrence became due (0 while not due)."
    );
    describe_gauge!(
        COLLECTOR_LEADER,
        Unit::Count,
        "1 in the one process elected to export the database gauges."
    );
    describe_gauge!(
        COLLECTOR_DURATION,
        Unit::Seconds,
        "How long the last collection of the database gauges took."
    );
    describe_gauge!(
        COLLECTOR_LAST_SUCCESS,
        Unit::Seconds,
        "When the database gauges were last collected (Unix time)."
    );
}
