//! Per-queue settings: dispatch mode and pause.

use sqlx::{PgExecutor, PgPool};

use super::tenants::argument;
use crate::{Dispatch, Result};

/// Check a queue name as the enqueue does: not blank, at most 255 bytes,
/// no control characters.
pub fn validate_queue(queue: &str) -> Result<()> {
    argument("queue", queue)
}

/// Declare how `queue` is dispatched. Takes effect for every job that becomes
/// claimable afterwards. Declaring the PostgreSQL path (again or anew) gives
/// back the tenant slots a broker completion handed to the queue's waiting
/// jobs, which only the broker path's claim takes. Moving a queue to a broker
/// (from the PostgreSQL path, or to another topic) writes a wake-up on the
/// new path for each of its waiting jobs, as their enqueue there would have:
/// at once for due jobs (those of a capped tenant as its free slots allow;
/// none while the queue is paused, whose resume wakes them), at `run_after`
/// for the rest. Declaring a broker queue again as it was writes nothing.
/// The queue's name is checked as the enqueue checks it.
pub async fn set_queue_dispatch<'c, E: PgExecutor<'c>>(
    executor: E,
    queue: &str,
    dispatch: &Dispatch,
) -> Result<()> {
    argument("queue", queue)?;
    let (kind, topic) = match dispatch {
        Dispatch::Postgres => ("postgres", None),
        Dispatch::Broker { topic } => ("broker", Some(topic.as_str())),
    };
    sqlx::query(include_str!("../../sql/upsert_queue.sql"))
        .bind(queue)
        .bind(kind)
        .bind(topic)
        .execute(executor)
        .await?;
    Ok(())
}

/// Pause (no claims, on either path) or resume a queue. Enqueue keeps
/// working while paused. Resuming wakes the queue's waiting jobs right after
/// (see [`resume_queue`]). A queue name is checked as the enqueue checks
/// it: not blank, at most 255 bytes, no control characters.
pub async fn set_queue_paused(pool: &PgPool, queue: &str, paused: bool) -> Result<()> {
    if !paused {
        resume_queue(pool, queue).await?;
        return Ok(());
    }
    argument("queue", queue)?;
    sqlx::query(include_str!("../../sql/set_queue_paused.sql"))
        .bind(queue)
        .bind(paused)
        .execute(pool)
        .await?;
    Ok(())
}

/// Resume `queue` and wake its waiting jobs at once: a fresh wake-up for
/// every due job of a broker-dispatched queue (the ones that arrived while it
/// was paused were acknowledged as misses), a NOTIFY for a PostgreSQL-path
/// queue. Returns how many broker wake-ups were written.
///
/// Two statements, each committed on its own: the resume, then the
/// wake-ups, read after the resume is seen by every claim
/// (resume_queue.sql says why). So it takes a pool, not a transaction.
pub async fn resume_queue(pool: &PgPool, queue: &str) -> Result<u64> {
    argument("queue", queue)?;
    sqlx::query(include_str!("../../sql/set_queue_paused.sql"))
        .bind(queue)
        .bind(false)
        .execute(pool)
        .await?;
    // No row: paused again since (the pause's own wake-ups come with the
    // next resume).
    let woken: Option<i64> = sqlx::query_scalar(include_str!("../../sql/resume_queue.sql"))
        .bind(queue)
        .fetch_optional(pool)
        .await?;
    Ok(woken.map_or(0, |woken| u64::try_from(woken).unwrap_or(0)))
}

/// Whether `queue` was declared or holds a job: the queues
/// [`crate::queue_overview`] lists. Pausing a queue that is neither is
/// allowed (to pause it before its first job) but is most often a typo, so
/// callers say so; ask before pausing, which declares it.
pub async fn queue_is_known<'c, E: PgExecutor<'c>>(executor: E, queue: &str) -> Result<bool> {
    Ok(
        sqlx::query_scalar(include_str!("../../sql/queue_is_known.sql"))
            .bind(queue)
            .fetch_one(executor)
            .await?,
    )
}

/// The broker queues outside `served` whose topic is one of `topics`, as
/// (queue, topic): a worker serving only `served` receives their wake-ups
/// from the shared topic, cannot claim them, and acknowledges them (they
/// wait for the reconciler).
pub async fn queues_sharing_topics<'c, E: PgExecutor<'c>>(
    executor: E,
    topics: &[String],
    served: &[String],
) -> Result<Vec<(String, String)>> {
    Ok(
        sqlx::query_as(include_str!("../../sql/queues_sharing_topics.sql"))
            .bind(topics)
            .bind(served)
            .fetch_all(executor)
            .await?,
    )
}

/// How `queue` is dispatched, as the database says (no row: PostgreSQL).
pub async fn queue_dispatch<'c, E: PgExecutor<'c>>(executor: E, queue: &str) -> Result<Dispatch> {
    let row: Option<(String, Option<String>)> =
        sqlx::query_as(include_str!("../../sql/queue_dispatch.sql"))
            .bind(queue)
            .fetch_optional(executor)
            .await?;
    Ok(match row {
        Some((kind, Some(topic))) if kind == "broker" => Dispatch::Broker { topic },
        _ => Dispatch::Postgres,
    })
}
