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
    /// Hold `lease` from now on. An earlier attempt of the same job that
    /// this worker still runs has lost its lease (the claim of `lease`
    /// raised the generation past it): it is cancelled, and its entry gives
    /// way to the new one. (An attempt whose task starts only after a later
    /// one's is the one that lost: it is cancelled instead.)
    pub(crate) fn insert(
        &self,
        lease: Lease,
        cancel: CancellationToken,
        reason: Arc<OnceLock<CancelReason>>,
        renewed_until: Instant,
    ) {
        let entry = ActiveLease {
            generation: lease.generation,
            cancel,
            reason,
            renewed_until,
        };
        let lost = {
            let mut active = self.lock();
            match active.get(&lease.job_id) {
                Some(later) if later.generation > lease.generation => Some(entry),
                _ => active
                    .insert(lease.job_id, entry)
                    .filter(|earlier| earlier.generation != lease.generation),
            }
        };
        if let Some(lost) = lost
            && !lost.cancel.is_cancelled()
        {
            tracing::warn!(job_id = %lease.job_id, generation = %lost.generation,
                "lease lost (the job was claimed again); cancelling the attempt");
            self::cancel(&lost, CancelReason::LeaseLost);
            metrics::record_renewals(0, 1);
        }
    }

    /// Stop renewing `lease`: its outcome is written (or given up on). A
    /// later attempt of the same job keeps its entry.
    pub(crate) fn remove(&self, lease: Lease) {
        let mut active = self.lock();
        if active
            .get(&lease.job_id)
            .is_some_and(|entry| entry.generation == lease.generation)
        {
            active.remove(&lease.job_id);
        }
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
    ///
    /// `sent` are the leases the heartbeat renewed, in the order of its
    /// `results`: an entry is only changed by the result for its own
    /// generation (the job may have been given back and claimed again by
    /// this worker while the heartbeat ran).
    fn apply(
        &self,
        sent: &[Lease],
        results: Vec<HeartbeatResult>,
        renewed_until: Instant,
    ) -> (u64, u64) {
        let mut active = self.lock();
        let (mut renewed, mut lost) = (0, 0);
        for (lease, result) in sent.iter().zip(results) {
            let entry = active
                .get_mut(&lease.job_id)
                .filter(|entry| entry.generation == lease.generation);
            match result {
                HeartbeatResult::Held {
                    cancel_requested, ..
                } => {
                    renewed += 1;
                    if let Some(entry) = entry {
                        entry.renewed_until = renewed_until;
                        if cancel_requested {
                            cancel(entry, CancelReason::Requested);
                        }
                    }
                }
                HeartbeatResult::Fenced { job_id } => {
                    if let Some(entry) = entry
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
        let heartbeat = jobwire_core::heartbeat_many(&pool, &owner, &leases, lease);
        tokio::pin!(heartbeat);
        // A heartbeat can wait long for a connection (the pool is the
        // handlers' too) or for a database that went away; the attempts
        // whose leases run out meanwhile are stopped on time all the same.
        let renewal = loop {
            tokio::select! {
                renewal = &mut heartbeat => break renewal,
                _ = tokio::time::sleep(interval / 2) => {
                    let unrenewed = table.cancel_unrenewed(Instant::now() + interval / 2);
                    metrics::record_renewals(0, unrenewed);
                }
                _ = stop.cancelled() => return,
            }
        };
        match renewal {
            Ok(results) => {
                bump(&stats.heartbeat_batches);
                if let Some(ended) = outage.succeeded() {
                    tracing::info!(leases = leases.len(), "heartbeating again {ended}");
                }
                let (renewed, lost) = table.apply(&leases, results, sent_at + lease);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(job_id: Uuid, generation: i64) -> Lease {
        Lease {
            job_id,
            generation: LeaseGeneration(generation),
        }
    }

    /// Insert `lease`; its handler's cancel token and reason.
    fn hold(table: &LeaseTable, lease: Lease) -> (CancellationToken, Arc<OnceLock<CancelReason>>) {
        let (cancel, reason) = (CancellationToken::new(), Arc::new(OnceLock::new()));
        let renewed_until = Instant::now() + Duration::from_secs(30);
        table.insert(lease, cancel.clone(), reason.clone(), renewed_until);
        (cancel, reason)
    }

    /// A job given back and claimed again by the same worker while its
    /// first attempt still runs: the first has lost its lease and is
    /// stopped, and its end leaves the second's entry in place.
    #[test]
    fn a_later_attempt_of_a_job_replaces_the_earlier_one() {
        let table = LeaseTable::default();
        let job_id = Uuid::now_v7();
        let (first, first_reason) = hold(&table, lease(job_id, 5));
        let (second, _) = hold(&table, lease(job_id, 6));
        assert!(first.is_cancelled());
        assert_eq!(first_reason.get(), Some(&CancelReason::LeaseLost));
        table.remove(lease(job_id, 5));
        assert_eq!(table.snapshot(), vec![lease(job_id, 6)]);
        assert!(!second.is_cancelled());
        table.remove(lease(job_id, 6));
        assert_eq!(table.len(), 0);
    }

    /// An earlier attempt whose task starts only after the later one's has
    /// lost its lease: it is stopped, and the later one keeps its entry.
    #[test]
    fn an_earlier_attempt_starting_late_is_stopped_and_the_later_kept() {
        let table = LeaseTable::default();
        let job_id = Uuid::now_v7();
        let (later, _) = hold(&table, lease(job_id, 6));
        let (earlier, earlier_reason) = hold(&table, lease(job_id, 5));
        assert!(earlier.is_cancelled());
        assert_eq!(earlier_reason.get(), Some(&CancelReason::LeaseLost));
        assert!(!later.is_cancelled());
        assert_eq!(table.snapshot(), vec![lease(job_id, 6)]);
    }

    /// A heartbeat sent for one attempt reports on that attempt only: the
    /// job may have been claimed again while it ran.
    #[test]
    fn a_heartbeat_for_an_earlier_attempt_leaves_the_later_one_alone() {
        let table = LeaseTable::default();
        let job_id = Uuid::now_v7();
        let (_, _) = hold(&table, lease(job_id, 5));
        let sent = table.snapshot();
        table.remove(lease(job_id, 5));
        let (second, _) = hold(&table, lease(job_id, 6));
        let (renewed, lost) = table.apply(
            &sent,
            vec![HeartbeatResult::Fenced { job_id }],
            Instant::now(),
        );
        assert_eq!((renewed, lost), (0, 0));
        assert!(!second.is_cancelled(), "the later attempt was stopped");
        // And a renewal of the earlier one does not count as the later's.
        let before = table.lock()[&job_id].renewed_until;
        table.apply(
            &sent,
            vec![HeartbeatResult::Held {
                job_id,
                cancel_requested: true,
                lease_expires_at: chrono::Utc::now(),
            }],
            before + Duration::from_secs(60),
        );
        assert_eq!(table.lock()[&job_id].renewed_until, before);
        assert!(!second.is_cancelled());
    }
}
