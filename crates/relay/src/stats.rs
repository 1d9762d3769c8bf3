//! The relay's live counters and the report copied from them.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters of one relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    pub(crate) passes: AtomicU64,
    pub(crate) published: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    pub(crate) moved_aside: AtomicU64,
    pub(crate) broker_down: AtomicU64,
    pub(crate) database_errors: AtomicU64,
    pub(crate) largest_batch: AtomicU64,
    pub(crate) slow_publishes: AtomicU64,
}

/// A copy of [`RelayStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RelayReport {
    /// Passes that claimed at least one row.
    pub passes: u64,
    /// Rows published and deleted.
    pub published: u64,
    /// Failed publish attempts counted against rows.
    pub failed_attempts: u64,
    /// Rows moved to `job_outbox_dead`.
    pub moved_aside: u64,
    /// Passes where every row failed as unavailable (broker down).
    pub broker_down: u64,
    /// Database errors.
    pub database_errors: u64,
    /// The largest batch published in one pass.
    pub largest_batch: u64,
    /// Passes whose publish outlasted the publish budget (half the
    /// transaction's idle timeout): their rows stayed due and the batch
    /// size halved. Also counted in `broker_down`.
    pub slow_publishes: u64,
}

impl RelayStats {
    /// A copy of the counters.
    pub fn report(&self) -> RelayReport {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RelayReport {
            passes: get(&self.passes),
            published: get(&self.published),
            failed_attempts: get(&self.failed_attempts),
            moved_aside: get(&self.moved_aside),
            broker_down: get(&self.broker_down),
            database_errors: get(&self.database_errors),
            largest_batch: get(&self.largest_batch),
            slow_publishes: get(&self.slow_publishes),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}
