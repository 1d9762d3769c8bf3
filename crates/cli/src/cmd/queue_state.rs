//! `jobwire queue list|pause|resume`: every queue with its jobs by state,
//! and stopping or restarting a queue's claims from the command line, for an
//! operator without an API server or a token at hand.

use crate::output::visible;
use anyhow::Result;
use sqlx::PgPool;

/// Print every queue (declared, or holding jobs): dispatch, pause, jobs by
/// state and how long the oldest waiting job has waited.
pub(crate) async fn list(pool: &PgPool, json: bool) -> Result<()> {
    let queues = jobwire_core::queue_overview(pool).await?;
    if json {
        outln!("{}", crate::output::json_pretty(&queues)?);
        return Ok(());
    }
    if queues.is_empty() {
        outln!("no queues: none is declared and no job is in the jobs table");
        return Ok(());
    }
    outln!(
        "{:<24} {:<9} {:<6} {:>8} {:>8} {:>8} {:>8}  oldest waiting",
        "queue",
        "dispatch",
        "paused",
        "queued",
        "running",
        "retrying",
        "failed"
    );
    for queue in queues {
        outln!(
            "{:<24} {:<9} {:<6} {:>8} {:>8} {:>8} {:>8}  {}",
            visible(&queue.queue),
            queue.dispatch,
            if queue.paused { "yes" } else { "no" },
            queue.queued,
            queue.running + queue.cancel_requested,
            queue.retry_wait,
            queue.failed,
            queue
                .oldest_runnable_age_s
                .map_or_else(|| "-".to_owned(), |age| format!("{age:.1} s")),
        );
    }
    Ok(())
}

/// Pause or resume `queue`. Pausing a queue no one has declared and that
/// holds no job is allowed (to pause it before its first job), but is most
/// often a typo, so it is said.
pub(crate) async fn set_paused(pool: &PgPool, queue: &str, paused: bool) -> Result<()> {
    let known = jobwire_core::queue_is_known(pool, queue).await?;
    if paused {
        jobwire_core::set_queue_paused(pool, queue, true).await?;
        outln!("queue {queue:?} paused: no job of it is claimed, on either path; enqueues go on");
    } else {
        let woken = jobwire_core::resume_queue(pool, queue).await?;
        outln!(
            "queue {queue:?} resumed: its waiting jobs are woken now ({woken} broker wake-up(s) written)"
        );
    }
    if !known {
        note_unknown(queue);
    }
    Ok(())
}

/// Say on stderr that no queue `queue` was declared or held a job: a
/// command on such a queue works (it may come), but is most often a typo.
pub(crate) fn note_unknown(queue: &str) {
    eprintln!(
        "note: no queue {queue:?} was declared or held a job; check the name with `jobwire queue list`"
    );
}

/// [`note_unknown`], when no queue `queue` is known.
pub(crate) async fn note_if_unknown(pool: &PgPool, queue: &str) -> Result<()> {
    if !jobwire_core::queue_is_known(pool, queue).await? {
        note_unknown(queue);
    }
    Ok(())
}
