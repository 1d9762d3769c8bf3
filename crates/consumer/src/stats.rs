//! Counters a worker keeps, and the report it returns when it stops.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Live counters, shared by a worker's tasks.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub(crate) claimed: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) unknown_job_type: AtomicU64,
    pub(crate) database_errors: AtomicU64,
    pub(crate) completion_batches: AtomicU64,
    pub(crate) heartbeat_batches: AtomicU64,
    pub(crate) wake_ups: AtomicU64,
    pub(crate) wake_ups_garbage: AtomicU64,
    pub(crate) wake_ups_duplicate: AtomicU64,
    pub(crate) wake_ups_held: AtomicU64,
    pub(crate) wake_ups_finished: AtomicU64,
    pub(crate) wake_ups_not_due: AtomicU64,
    pub(crate) wake_ups_unknown: AtomicU64,
    pub(crate) wake_ups_contended: AtomicU64,
    pub(crate) wake_ups_paused: AtomicU64,
    pub(crate) wake_ups_other_queue: AtomicU64,
    pub(crate) wake_ups_capped: AtomicU64,
    pub(crate) safety_net_claims: AtomicU64,
    pub(crate) completed_by_handler: AtomicU64,
    pub(crate) returned: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl WorkerStats {
    /// A consistent-enough copy of the counters.
    pub fn report(&self) -> WorkerReport {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerReport {
            claimed: get(&self.claimed),
            succeeded: get(&self.succeeded),
            retried: get(&self.retried),
            failed: get(&self.failed),
            cancelled: get(&self.cancelled),
            fenced: get(&self.fenced),
            lease_lost: get(&self.lease_lost),
            panicked: get(&self.panicked),
            timed_out: get(&self.timed_out),
            unknown_job_type: get(&self.unknown_job_type),
            database_errors: get(&self.database_errors),
            completion_batches: get(&self.completion_batches),
            heartbeat_batches: get(&self.heartbeat_batches),
            wake_ups: get(&self.wake_ups),
            wake_ups_garbage: get(&self.wake_ups_garbage),
            wake_ups_duplicate: get(&self.wake_ups_duplicate),
            wake_ups_held: get(&self.wake_ups_held),
            wake_ups_finished: get(&self.wake_ups_finished),
            wake_ups_not_due: get(&self.wake_ups_not_due),
            wake_ups_unknown: get(&self.wake_ups_unknown),
            wake_ups_contended: get(&self.wake_ups_contended),
            wake_ups_paused: get(&self.wake_ups_paused),
            wake_ups_other_queue: get(&self.wake_ups_other_queue),
            wake_ups_capped: get(&self.wake_ups_capped),
            safety_net_claims: get(&self.safety_net_claims),
            completed_by_handler: get(&self.completed_by_handler),
            returned: get(&self.returned),
        }
    }
}

/// What a worker did, by outcome as recorded in the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WorkerReport {
    /// Jobs claimed.
    pub claimed: u64,
    /// Attempts recorded as SUCCEEDED.
    pub succeeded: u64,
    /// Attempts recorded as RETRY_WAIT.
    pub retried: u64,
    /// Attempts recorded as FAILED.
    pub failed: u64,
    /// Attempts recorded as CANCELLED.
    pub cancelled: u64,
    /// Reports the table rejected because the lease had been lost.
    pub fenced: u64,
    /// Attempts stopped because the lease was lost or could not be renewed
    /// in time (what they returned is still reported, fenced).
    pub lease_lost: u64,
    /// Handler panics (each a failed, retryable attempt).
    pub panicked: u64,
    /// Attempts cancelled at their timeout.
    pub timed_out: u64,
    /// Jobs whose type had no handler here.
    pub unknown_job_type: u64,
    /// Database calls that failed (and were retried).
    pub database_errors: u64,
    /// Completion statements written.
    pub completion_batches: u64,
    /// Heartbeat statements written.
    pub heartbeat_batches: u64,
    /// Broker deliveries received (each a wake-up).
    pub wake_ups: u64,
    /// Deliveries that named no job (garbage bytes, no job id): acked, never run.
    pub wake_ups_garbage: u64,
    /// Deliveries for a job already named earlier in the same batch.
    pub wake_ups_duplicate: u64,
    /// Wake-ups for a job another attempt holds (a duplicate while it runs).
    pub wake_ups_held: u64,
    /// Wake-ups for a finished job (stale).
    pub wake_ups_finished: u64,
    /// Wake-ups that arrived before the job was due (early).
    pub wake_ups_not_due: u64,
    /// Wake-ups for a job the table does not have (unknown or archived).
    pub wake_ups_unknown: u64,
    /// Wake-ups for a job another claimer took at that very moment.
    pub wake_ups_contended: u64,
    /// Wake-ups for a job of a paused queue (it is woken again on resume).
    pub wake_ups_paused: u64,
    /// Wake-ups for a job of a queue this worker does not serve from that
    /// topic (mis-routed): never claimed, so they cannot bypass that queue's
    /// own workers, slots and pause.
    pub wake_ups_other_queue: u64,
    /// Wake-ups for a job whose tenant already ran as many jobs as its cap
    /// allows: the job waits, and the next free slot of its tenant wakes it.
    pub wake_ups_capped: u64,
    /// Broker-path jobs claimed straight from the table by the safety net
    /// because they waited past its bound: each one is a wake-up the broker
    /// path lost or delayed (a sign that path is unhealthy).
    pub safety_net_claims: u64,
    /// Jobs whose handler completed them in its own transaction
    /// ([`crate::JobContext::commit_with_completion`]).
    pub completed_by_handler: u64,
    /// Jobs claimed ahead of the free slots and given back before a handler
    /// started them (at shutdown, after a long wait for a slot, or with
    /// their lease lost): no attempt counted. Those cancelled meanwhile
    /// count as cancelled.
    pub returned: u64,
}
