//! The wake-up reconciler's statement: a due job of a broker queue whose
//! wake-up went missing gets a fresh one after the grace period, and a job
//! the reconciler re-woke before waits as long as it had been due at that
//! re-wake before the next one (at least the grace, at most 16 graces),
//! until anything else changes it or its queue.

use std::collections::BTreeSet;
use std::time::Duration;

use jobwire_core::{Dispatch, NewJob};
use jobwire_test_support::lose_wake_ups;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const GRACE: Duration = Duration::from_secs(60);

/// A job on broker queue `queue` whose enqueue's wake-up is gone, due
/// `due_minutes_ago`, last changed `changed_minutes_ago`, and last re-woken
/// by the reconciler `rewoken_minutes_ago` (if ever).
async fn waiting_job(
    pool: &PgPool,
    queue: &str,
    due_minutes_ago: i32,
    changed_minutes_ago: i32,
    rewoken_minutes_ago: Option<i32>,
) -> Uuid {
    let job = NewJob::new("work", json!({})).with_queue(queue);
    let id = jobwire_core::enqueue(pool, &job).await.unwrap().job_id;
    sqlx::query(
        "UPDATE jobs
         SET run_after = now() - make_interval(mins => $2),
             updated_at = now() - make_interval(mins => $3),
             rewoken_at = now() - make_interval(mins => $4)
         WHERE job_id = $1",
    )
    .bind(id)
    .bind(due_minutes_ago)
    .bind(changed_minutes_ago)
    .bind(rewoken_minutes_ago)
    .execute(pool)
    .await
    .unwrap();
    lose_wake_ups(pool, id).await.unwrap();
    id
}

async fn reconcile(pool: &PgPool) -> BTreeSet<Uuid> {
    jobwire_core::reconcile_wake_ups(pool, GRACE, 100)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_the_reconciler_re_woke_waits_longer_for_the_next_re_wake(pool: PgPool) {
    for queue in ["b", "resumed"] {
        let topic = Dispatch::Broker {
            topic: format!("t-{queue}"),
        };
        jobwire_core::set_queue_dispatch(&pool, queue, &topic)
            .await
            .unwrap();
    }
    // Queue `b` was set up long before any of the re-wakes below.
    sqlx::query("UPDATE job_queues SET updated_at = now() - interval '3 hours' WHERE queue = 'b'")
        .execute(&pool)
        .await
        .unwrap();
    // Never re-woken, unchanged for two minutes: its wake-up was lost.
    let lost_once = waiting_job(&pool, "b", 2, 2, None).await;
    // Re-woken two minutes ago after waiting eight: waits eight more.
    let waited_long = waiting_job(&pool, "b", 10, 2, Some(2)).await;
    // Re-woken two minutes ago after waiting one: the grace, as before.
    let waited_briefly = waiting_job(&pool, "b", 3, 2, Some(2)).await;
    // Re-woken 17 minutes ago after waiting nearly two hours: 16 graces at most.
    let waited_hours = waiting_job(&pool, "b", 120, 17, Some(17)).await;
    // Re-woken five minutes ago, changed by something else since: the
    // back-off ends, and the grace counts from the change.
    let changed_since = waiting_job(&pool, "b", 10, 2, Some(5)).await;
    // As `waited_long`, on a queue resumed a minute ago (which wrote fresh
    // wake-ups without touching the job): the back-off ends.
    let queue_changed_since = waiting_job(&pool, "resumed", 10, 2, Some(2)).await;
    sqlx::query(
        "UPDATE job_queues SET updated_at = now() - interval '1 minute' WHERE queue = 'resumed'",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Unchanged for less than the grace: not yet.
    let recent = waiting_job(&pool, "b", 10, 0, None).await;

    let woken = reconcile(&pool).await;
    assert_eq!(
        woken,
        BTreeSet::from([
            lost_once,
            waited_briefly,
            waited_hours,
            changed_since,
            queue_changed_since
        ]),
        "waited_long {waited_long}, recent {recent}"
    );
    for id in &woken {
        assert_eq!(
            jobwire_test_support::wake_ups_for(&pool, *id)
                .await
                .unwrap(),
            1
        );
    }
    assert_eq!(
        jobwire_test_support::wake_ups_for(&pool, waited_long)
            .await
            .unwrap(),
        0
    );
    // Each re-wake starts its own back-off: nothing is due again at once.
    assert!(reconcile(&pool).await.is_empty());
}
