//! The PostgreSQL path of a queue: SKIP LOCKED claims, woken by
//! LISTEN/NOTIFY, polling again soon after each find (a commit may have
//! skipped its NOTIFY, see [`IdlePoll`]) and at a jittered poll interval
//! otherwise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobwire_core::WAKE_CHANNEL;
use jobwire_loop::{IdlePoll, ListenEvent, Outage, Pause, sleep, sleep_or_notified};
use sqlx::PgPool;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::local_queue::{StartGate, StartRate};
use crate::stats::bump;
use crate::{JobRuntime, QueueConfig};

/// How one PostgreSQL-path queue claims.
pub(crate) struct ClaimSettings {
    /// Most jobs one claim takes.
    pub(crate) batch_size: usize,
    /// Most jobs held beyond the queue's slots (the local queue).
    pub(crate) claim_ahead: usize,
    /// While a backlog lasts, how long to wait for more room.
    pub(crate) linger: Duration,
    /// The idle poll interval.
    pub(crate) poll_interval: Duration,
}

/// Claim and run jobs of one PostgreSQL-path queue until `stop`.
pub(crate) async fn fetch_queue(
    runtime: JobRuntime,
    wake_up: Arc<Notify>,
    queue: QueueConfig,
    settings: ClaimSettings,
    stop: CancellationToken,
) {
    let ClaimSettings {
        batch_size,
        claim_ahead,
        linger,
        poll_interval,
    } = settings;
    // One permit per job this queue holds, claimed and not yet done: its
    // slots, and the local queue beyond them. With a local queue, jobs wait
    // for a handler slot at the gate.
    let held = Arc::new(Semaphore::new(queue.concurrency + claim_ahead));
    let gate = (claim_ahead > 0).then(|| StartGate::new(queue.concurrency));
    let mut start_rate = StartRate::new(std::time::Instant::now());
    let mut error_pause = Pause::standard();
    let mut claim_outage = Outage::new();
    let mut idle = IdlePoll::new(poll_interval);
    // Whether the last claim filled every slot it asked for.
    let mut backlog = false;
    // Jobs held beyond the slots: only while a backlog lasts, and only as
    // many as the queue starts soon at its recent rate.
    let mut ahead_now = |backlog: bool| match &gate {
        Some(gate) => {
            let soon = start_rate.ahead(gate.frees(), std::time::Instant::now(), claim_ahead);
            if backlog { soon } else { 0 }
        }
        None => 0,
    };
    loop {
        let ahead = ahead_now(backlog);
        // The permits standing for the part of the local queue not to be
        // used now are taken along with the first free place, so this
        // waits until the queue holds fewer jobs than it may.
        let reserve = claim_ahead - ahead;
        let mut taken = tokio::select! {
            permits = held.clone().acquire_many_owned(permits(reserve + 1)) => {
                permits.expect("semaphore is never closed")
            }
            _ = stop.cancelled() => return,
        };
        // The wait can be long (every place held by jobs waiting for slots
        // that slow jobs hold), and the pace it was sized for may be gone:
        // jobs given back unstarted after their wait would be claimed again
        // at once, only to wait again. Size it anew.
        if ahead_now(backlog) < ahead {
            continue;
        }
        let free = |taken: &OwnedSemaphorePermit| taken.num_permits() - reserve;
        // Take every free place up to a batch.
        let limit = batch_size.min(queue.concurrency + ahead);
        while free(&taken) < limit {
            match held.clone().try_acquire_owned() {
                Ok(permit) => taken.merge(permit),
                Err(_) => break,
            }
        }
        let enough = limit.div_ceil(2);
        if backlog && free(&taken) < enough && !linger.is_zero() {
            let deadline = tokio::time::Instant::now() + linger;
            while free(&taken) < enough {
                tokio::select! {
                    permit = held.clone().acquire_owned() => {
                        taken.merge(permit.expect("semaphore is never closed"));
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = stop.cancelled() => return,
                }
            }
        }
        let wanted = free(&taken);
        match jobwire_core::claim_batch(
            runtime.pool(),
            &queue.name,
            runtime.worker_id(),
            wanted,
            runtime.lease(),
        )
        .await
        {
            Ok(jobs) => {
                error_pause.reset();
                if let Some(ended) = claim_outage.succeeded() {
                    tracing::info!(queue = %queue.name, "claiming again {ended}");
                }
                crate::metrics::record_claims(&jobs, crate::metrics::ClaimPath::Postgres);
                let got = jobs.len();
                backlog = got == wanted;
                if got > 0 {
                    idle.found_work();
                }
                for job in jobs {
                    let slot = taken.split(1).expect("a permit per job claimed");
                    match &gate {
                        Some(gate) => runtime.spawn_ahead(job, slot, gate.clone()),
                        None => runtime.spawn(job, Some(slot)),
                    }
                }
                drop(taken);
                if got == wanted {
                    // Every slot filled: there is probably more; go again
                    // as soon as a slot frees up.
                    continue;
                }
            }
            Err(err) => {
                backlog = false;
                bump(&runtime.stats().database_errors);
                claim_outage.failed();
                tracing::warn!(queue = %queue.name, error = %err, "claim failed; backing off");
                drop(taken);
                if sleep(error_pause.next_after_failure(), &stop)
                    .await
                    .is_cancelled()
                {
                    return;
                }
                continue;
            }
        }
        // The queue is drained for now: sleep until a NOTIFY, the next idle
        // poll (soon after a find, for commits that skipped their NOTIFY;
        // the poll interval otherwise, for delayed jobs and retries becoming
        // due), or shutdown.
        if sleep_or_notified(idle.next_pause(), &wake_up, &stop)
            .await
            .is_cancelled()
        {
            return;
        }
    }
}

/// A permit count for the semaphore's API.
fn permits(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Turn NOTIFYs on [`WAKE_CHANNEL`] into "check now" for the matching queue.
/// A notification is only a hint: losing one costs at most a poll interval.
pub(crate) async fn listen_for_wake_ups(
    pool: PgPool,
    wake_ups: HashMap<String, Arc<Notify>>,
    stop: CancellationToken,
) {
    jobwire_loop::listen(pool, WAKE_CHANNEL, stop, |event| match event {
        ListenEvent::Notification(queue) => {
            if let Some(notify) = wake_ups.get(queue) {
                notify.notify_one();
            }
        }
        ListenEvent::MayHaveMissed | ListenEvent::Lost => {
            wake_ups.values().for_each(|notify| notify.notify_one())
        }
    })
    .await;
}
