//! Heartbeats: one fenced statement renews every lease this worker holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use jobwire_core::{HeartbeatResult, Lease, LeaseGeneration};
use jobwire_loop::Outage;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::CancelReason;
use crate::metrics;
use crate::stats::{WorkerStats, bump};

/// One running attempt, as the lease keeper sees it.
struct ActiveLease {
    generation: LeaseGeneration,
    /// Cancels the attempt's handler.
    cancel: CancellationToken,
    /// Why it was cancelled; first writer wins.
    reason: Arc<OnceLock<CancelReason>>,
    /// Until when the lease is known to hold, on this process's clock. Set
    /// conservatively: the moment the renewing statement was *sent*, plus the
    /// lease, so the database's own expiry is never earlier than this.
    renewed_until: Instant,
}

/// The leases this worker holds right now.
#[derive(Default)]
pub(crate) struct LeaseTable {
    active: Mutex<HashMap<Uuid, ActiveLease>>,
}

impl LeaseTable {
    pub(crate) fn insert(
        &self,
        lease: Lease,
        cancel: CancellationToken,
        reason: Arc<OnceLock<CancelReason>>,
        renewed_until: Instant,
    ) {
        self.lock().insert(
            lease.job_id,
            ActiveLease {
                generation: lease.generation,
                cancel,
                reason,
                renewed_until,
            },
        );
    }

    pub(crate) fn remove(&self, job_id: Uuid) {
        self.lock().remove(&job_id);
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, ActiveLease>> {
        // A panic while holding this lock cannot leave the map half-updated
        // (every critical section is a single map operation), so a poisoned
        // lock is still safe to use.
        self.active
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn snapshot(&self) -> Vec<Lease> {
        self.lock()
            .iter()
            .map(|(job_id, active)| Lease {
                job_id: *job_id,
                generation: active.generation,
            })
            .collect()
    }

    /// Cancel every running attempt for `reason`.
    pub(crate) fn cancel_all(&self, reason: CancelReason) {
        for active in self.lock().values() {
            cancel(active, reason);
        }
    }

    /// Apply a heartbeat's results; returns how many leases it renewed and
    /// how many it found lost for the first time (an attempt already
    /// cancelled is still renewed until its handler returns; it is not
    /// counted again).
    fn apply(&self, results: Vec<HeartbeatResult>, renewed_until: Instant) -> (u64, u64) {
        let mut active = self.lock();
        let (mut renewed, mut lost) = (0, 0);
        for result in results {
            match result {
                HeartbeatResult::Held {
                    job_id,
                    cancel_requested,
                    ..
                } => {
                    renewed += 1;
                    if let Some(entry) = active.get_mut(&job_id) {
                        entry.renewed_until = renewed_until;
                        if cancel_requested {
                            cancel(entry, CancelReason::Requested);
                        }
                    }
                }
                HeartbeatResult::Fenced { job_id } => {
                    if let Some(entry) = active.get(&job_id)
                        && !entry.cancel.is_cancelled()
                    {
                        tracing::warn!(%job_id, generation = %entry.generation, "lease lost; cancelling the attempt");
                        cancel(entry, CancelReason::LeaseLost);
                        lost += 1;
                    }
                }
            }
        }
        (renewed, lost)
    }

    /// Cancel attempts whose lease could not be renewed and will run out
    /// before `horizon`: their work would no longer count. Returns how many.
    fn cancel_unrenewed(&self, horizon: Instant) -> u64 {
        let mut cancelled = 0;
        for (job_id, entry) in self.lock().iter() {
            if entry.renewed_until < horizon && !entry.cancel.is_cancelled() {
                tracing::warn!(%job_id, "lease could not be renewed in time; cancelling the attempt");
                cancel(entry, CancelReason::LeaseLost);
                cancelled += 1;
            }
        }
        cancelled
    }
}

fn cancel(entry: &ActiveLease, reason: CancelReason) {
    let _ = entry.reason.set(reason);
    entry.cancel.cancel();
}

/// Renew every held lease each `lease / 3`, in one statement. Also delivers
/// cancel requests (CANCEL_REQUESTED) and lost leases to the handlers.
pub(crate) async fn run_lease_keeper(
    pool: PgPool,
    owner: Arc<str>,
    table: Arc<LeaseTable>,
    lease: Duration,
    stats: Arc<WorkerStats>,
    stop: CancellationToken,
) {
    let interval = lease / 3;
    let mut outage = Outage::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
        let leases = table.snapshot();
        if leases.is_empty() {
            continue;
        }
        let sent_at = Instant::now();
        match jobwire_core::heartbeat_many(&pool, &owner, &leases, lease).await {
            Ok(results) => {
                bump(&stats.heartbeat_batches);
                if let Some(ended) = outage.succeeded() {
                    tracing::info!(leases = leases.len(), "heartbeating again {ended}");
                }
                let (renewed, lost) = table.apply(results, sent_at + lease);
                metrics::record_renewals(renewed, lost);
            }
            Err(err) => {
                bump(&stats.database_errors);
                outage.failed();
                tracing::warn!(error = %err, leases = leases.len(), "heartbeat failed");
            }
        }
        // Stop work whose lease will lapse before the next heartbeat could
        // renew it, leaving half an interval for the handler to wind down.
        let unrenewed = table.cancel_unrenewed(Instant::now() + interval / 2);
        metrics::record_renewals(0, unrenewed);
    }
}
