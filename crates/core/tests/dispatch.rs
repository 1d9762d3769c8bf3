//! Moving a queue to a broker: the jobs already waiting get the wake-ups
//! their enqueue on the new path would have written, once, and not while
//! the queue is paused.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use jobwire_core::{ClaimMiss, Dispatch, NewJob};
use jobwire_test_support::until_a_session_waits_for_a_lock;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);

fn broker(topic: &str) -> Dispatch {
    Dispatch::Broker {
        topic: topic.to_owned(),
    }
}

async fn enqueue(pool: &PgPool, job: NewJob) -> Uuid {
    jobwire_core::enqueue(pool, &job.with_queue("q"))
        .await
        .unwrap()
        .job_id
}

/// The job's wake-ups, oldest first: topic, reason (none for an enqueue's
/// own), and whether each is available now.
async fn wake_ups(pool: &PgPool, id: Uuid) -> Vec<(String, Option<String>, bool)> {
    sqlx::query_as(
        "SELECT topic, headers->>'jobwire-reason', available_at <= now()
         FROM job_outbox WHERE message_key = $1 ORDER BY id",
    )
    .bind(id.to_string())
    .fetch_all(pool)
    .await
    .unwrap()
}

fn moved_to(topic: &str, available_now: bool) -> (String, Option<String>, bool) {
    (topic.to_owned(), Some("moved".to_owned()), available_now)
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn available_at(pool: &PgPool, id: Uuid) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT available_at FROM job_outbox WHERE message_key = $1")
        .bind(id.to_string())
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn run_after(pool: &PgPool, id: Uuid) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT run_after FROM jobs WHERE job_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Jobs enqueued on the PostgreSQL path (the queue never declared) have no
/// outbox row. Moved to a broker, each waiting job gets one wake-up: due
/// ones at once, a delayed one at its `run_after`; a running or finished
/// job none. The wake-ups claim their jobs on the broker path. Declaring
/// the queue again as it is writes nothing more.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_queue_moved_to_a_broker_wakes_its_waiting_jobs(pool: PgPool) {
    let running = enqueue(&pool, NewJob::new("work", json!({}))).await;
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed[0].lease.job_id, running);
    let due = [
        enqueue(&pool, NewJob::new("work", json!({ "i": 1 }))).await,
        enqueue(&pool, NewJob::new("work", json!({ "i": 2 }))).await,
    ];
    let delayed = enqueue(
        &pool,
        NewJob::new("work", json!({})).with_delay(TimeDelta::hours(1)),
    )
    .await;
    assert_eq!(outbox_rows(&pool).await, 0);

    jobwire_core::set_queue_dispatch(&pool, "q", &broker("t"))
        .await
        .unwrap();

    for id in due {
        assert_eq!(wake_ups(&pool, id).await, vec![moved_to("t", true)]);
    }
    assert_eq!(wake_ups(&pool, delayed).await, vec![moved_to("t", false)]);
    assert_eq!(
        available_at(&pool, delayed).await,
        run_after(&pool, delayed).await
    );
    assert!(wake_ups(&pool, running).await.is_empty());
    assert_eq!(outbox_rows(&pool).await, 3);

    let woken = jobwire_core::claim_by_ids(&pool, &due, &["q".to_owned()], "c", LEASE)
        .await
        .unwrap();
    assert_eq!(woken.claimed.len(), 2);

    jobwire_core::set_queue_dispatch(&pool, "q", &broker("t"))
        .await
        .unwrap();
    assert_eq!(outbox_rows(&pool).await, 3);
}

/// A queue moved from one topic to another wakes its waiting jobs on the
/// new topic (their earlier wake-ups went to the old one).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_queue_moved_to_another_topic_wakes_its_waiting_jobs_there(pool: PgPool) {
    jobwire_core::set_queue_dispatch(&pool, "q", &broker("old"))
        .await
        .unwrap();
    let id = enqueue(&pool, NewJob::new("work", json!({}))).await;
    jobwire_core::set_queue_dispatch(&pool, "q", &broker("new"))
        .await
        .unwrap();
    let wake_ups = wake_ups(&pool, id).await;
    assert_eq!(wake_ups.len(), 2, "{wake_ups:?}");
    assert_eq!(wake_ups[0], ("old".to_owned(), None, true));
    assert_eq!(wake_ups[1], moved_to("new", true));
}

/// A paused queue moved to a broker wakes only its delayed jobs (as an
/// enqueue during the pause would); its resume wakes the due ones.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_paused_queue_moved_to_a_broker_leaves_its_due_jobs_to_the_resume(pool: PgPool) {
    let due = enqueue(&pool, NewJob::new("work", json!({}))).await;
    let delayed = enqueue(
        &pool,
        NewJob::new("work", json!({})).with_delay(TimeDelta::hours(1)),
    )
    .await;
    jobwire_core::set_queue_paused(&pool, "q", true)
        .await
        .unwrap();

    jobwire_core::set_queue_dispatch(&pool, "q", &broker("t"))
        .await
        .unwrap();
    assert!(wake_ups(&pool, due).await.is_empty());
    assert_eq!(wake_ups(&pool, delayed).await, vec![moved_to("t", false)]);

    assert_eq!(jobwire_core::resume_queue(&pool, "q").await.unwrap(), 1);
    let resumed = wake_ups(&pool, due).await;
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].1.as_deref(), Some("resume"));
}

/// A capped tenant's due jobs are woken only as its slots allow: with a cap
/// of 1, one of its three waiting jobs is handed the slot with its wake-up,
/// the others wait for that slot to free; a job without a tenant is woken.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_tenant_is_woken_as_its_slots_allow_when_its_queue_moves(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(1))
        .await
        .unwrap();
    let mut capped = Vec::new();
    for i in 0..3 {
        capped.push(
            enqueue(
                &pool,
                NewJob::new("work", json!({ "i": i })).with_tenant("acme"),
            )
            .await,
        );
    }
    let free = enqueue(&pool, NewJob::new("work", json!({}))).await;

    jobwire_core::set_queue_dispatch(&pool, "q", &broker("t"))
        .await
        .unwrap();

    assert_eq!(wake_ups(&pool, free).await, vec![moved_to("t", true)]);
    let mut woken = Vec::new();
    for id in &capped {
        if !wake_ups(&pool, *id).await.is_empty() {
            woken.push(*id);
        }
    }
    assert_eq!(woken.len(), 1, "woken: {woken:?} of {capped:?}");
    assert_eq!(wake_ups(&pool, woken[0]).await, vec![moved_to("t", true)]);
    let claim = jobwire_core::claim_by_ids(&pool, &capped, &["q".to_owned()], "c", LEASE)
        .await
        .unwrap();
    let claimed: Vec<Uuid> = claim.claimed.iter().map(|job| job.lease.job_id).collect();
    assert_eq!(claimed, woken);
}

/// Workers started together each declare the queue they serve: the first
/// moves it and wakes its jobs, the second (waiting on the first's lock)
/// finds it moved and writes nothing, even on a queue never declared.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn two_declarations_of_one_move_wake_each_job_once(pool: PgPool) {
    let waiting = [
        enqueue(&pool, NewJob::new("work", json!({ "i": 1 }))).await,
        enqueue(&pool, NewJob::new("work", json!({ "i": 2 }))).await,
    ];
    let mut first = pool.begin().await.unwrap();
    jobwire_core::set_queue_dispatch(&mut *first, "q", &broker("t"))
        .await
        .unwrap();
    let second = tokio::spawn({
        let pool = pool.clone();
        async move { jobwire_core::set_queue_dispatch(&pool, "q", &broker("t")).await }
    });
    // The second is blocked on the first's lock until the first commits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "the second did not wait for the first"
    );
    first.commit().await.unwrap();
    second.await.unwrap().unwrap();

    for id in waiting {
        assert_eq!(wake_ups(&pool, id).await, vec![moved_to("t", true)]);
    }
}

/// A resume makes itself seen before it reads the jobs to wake. As one
/// statement it read the jobs of its start: a job enqueued while it ran,
/// whose wake-up a consumer meanwhile found the queue paused for (and
/// acknowledged), got a wake-up from neither and waited for the
/// reconciler. Here the resume waits for the queue's row, which another
/// change holds, while the job comes and its wake-up is missed.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_whose_wake_up_came_while_its_queue_resumed_is_woken(pool: PgPool) {
    jobwire_core::set_queue_dispatch(&pool, "q", &broker("t"))
        .await
        .unwrap();
    jobwire_core::set_queue_paused(&pool, "q", true)
        .await
        .unwrap();
    let mut change = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job_queues WHERE queue = 'q' FOR UPDATE")
        .execute(&mut *change)
        .await
        .unwrap();
    let resume = tokio::spawn({
        let pool = pool.clone();
        async move { jobwire_core::resume_queue(&pool, "q").await }
    });
    until_a_session_waits_for_a_lock(&pool).await;

    let late = enqueue(&pool, NewJob::new("work", json!({}))).await;
    let missed = jobwire_core::claim_by_ids(&pool, &[late], &["q".to_owned()], "c", LEASE)
        .await
        .unwrap();
    assert!(missed.claimed.is_empty());
    assert!(
        matches!(missed.missed.as_slice(), [(id, ClaimMiss::Paused)] if *id == late),
        "{:?}",
        missed.missed
    );

    change.commit().await.unwrap();
    assert_eq!(resume.await.unwrap().unwrap(), 1);
    let woken = wake_ups(&pool, late).await;
    assert_eq!(woken.len(), 2, "{woken:?}");
    assert_eq!(woken[1], ("t".to_owned(), Some("resume".to_owned()), true));
}

/// A worker learns which other queues' wake-ups travel on the topics it
/// consumes (it takes them off the topic and cannot claim them): the broker
/// queues it does not serve whose topic is one of its, and no other.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_queues_sharing_a_workers_topics_are_found(pool: PgPool) {
    for (queue, dispatch) in [
        ("emails-eu", broker("jobwire-emails-eu")),
        ("emails.eu", broker("jobwire-emails-eu")),
        ("emails:eu", broker("jobwire-emails-eu")),
        ("reports", broker("jobwire-reports")),
        ("local", Dispatch::Postgres),
    ] {
        jobwire_core::set_queue_dispatch(&pool, queue, &dispatch)
            .await
            .unwrap();
    }
    let shared = jobwire_core::queues_sharing_topics(
        &pool,
        &["jobwire-emails-eu".to_owned(), "jobwire-reports".to_owned()],
        &[
            "emails-eu".to_owned(),
            "emails:eu".to_owned(),
            "reports".to_owned(),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        shared,
        vec![("emails.eu".to_owned(), "jobwire-emails-eu".to_owned())]
    );
}
