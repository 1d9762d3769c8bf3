//! The PostgreSQL path of a queue: SKIP LOCKED claims, woken by
//! LISTEN/NOTIFY, polling again soon after each find (a commit may have
//! skipped its NOTIFY, see [`IdlePoll`]) and at a jittered poll interval
//! otherwise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jobwire_core::WAKE_CHANNEL;
use jobwire_loop::{IdlePoll, ListenEvent, Pause, sleep, sleep_or_notified};
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::stats::bump;
use crate::{JobRuntime, QueueConfig};

/// Claim and run jobs of one PostgreSQL-path queue until `stop`.
pub(crate) async fn fetch_queue(
    runtime: JobRuntime,
    wake_up: Arc<Notify>,
    queue: QueueConfig,
    batch_size: usize,
    linger: Duration,
    poll_interval: Duration,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(queue.concurrency));
    let mut error_pause = Pause::standard();
    let mut idle = IdlePoll::new(poll_interval);
    // Whether the last claim filled every slot it asked for.
    let mut backlog = false;
    let enough = batch_size.min(queue.concurrency).div_ceil(2);
    loop {
        // Wait for a free slot, then take every free slot up to a batch.
        let first = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("semaphore is never closed"),
            _ = stop.cancelled() => return,
        };
        let mut free = vec![first];
        while free.len() < batch_size {
            match slots.clone().try_acquire_owned() {
                Ok(slot) => free.push(slot),
                Err(_) => break,
            }
        }
        if backlog && free.len() < enough && !linger.is_zero() {
            let deadline = tokio::time::Instant::now() + linger;
            while free.len() < enough {
                tokio::select! {
                    slot = slots.clone().acquire_owned() => {
                        free.push(slot.expect("semaphore is never closed"));
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = stop.cancelled() => return,
                }
            }
        }
        let wanted = free.len();
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
                crate::metrics::record_claims(&jobs, crate::metrics::ClaimPath::Postgres);
                let got = jobs.len();
                backlog = got == wanted;
                if got > 0 {
                    idle.found_work();
                }
                for (job, slot) in jobs.into_iter().zip(free.drain(..)) {
                    runtime.spawn(job, Some(slot));
                }
                drop(free);
                if got == wanted {
                    // Every slot filled: there is probably more; go again
                    // as soon as a slot frees up.
                    continue;
                }
            }
            Err(err) => {
                backlog = false;
                bump(&runtime.stats().database_errors);
                tracing::warn!(queue = %queue.name, error = %err, "claim failed; backing off");
                drop(free);
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
        ListenEvent::MayHaveMissed => wake_ups.values().for_each(|notify| notify.notify_one()),
    })
    .await;
}
