//! The fenced job store against a real PostgreSQL: every legal transition,
//! fencing of stale workers, transactional enqueue, dedup, bad input,
//! cancel, sweep, replay and retention.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use jobwire_core::{
    ClaimMiss, Dispatch, Error, FinishOutcome, FinishResult, HeartbeatResult, JobState, Lease,
    LeaseGeneration, NewJob, ReplayFilter, RequestCancelOutcome,
};
use jobwire_test_support::{
    expire_lease, rows_read_in_transaction, until_a_session_waits_for_a_lock, wake_ups_for,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

async fn enqueue(pool: &PgPool, job: NewJob) -> Uuid {
    jobwire_core::enqueue(pool, &job).await.unwrap().job_id
}

async fn claim_one(pool: &PgPool, owner: &str) -> jobwire_core::ClaimedJob {
    let mut claimed = jobwire_core::claim_batch(pool, "default", owner, 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "expected one claimable job");
    claimed.remove(0)
}

async fn state(pool: &PgPool, job_id: Uuid) -> JobState {
    jobwire_core::job_status(pool, job_id).await.unwrap().state
}

async fn jobs_in_table(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn is_fenced<T: std::fmt::Debug>(result: jobwire_core::Result<T>) -> bool {
    matches!(result, Err(Error::Fenced { .. }))
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn claim_then_complete(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("noop", json!({"n": 1}))).await;
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(
        (status.state, status.attempt_count, status.lease_generation),
        (JobState::Queued, 0, LeaseGeneration(0))
    );

    let claimed = claim_one(&pool, "w1").await;
    assert_eq!(claimed.lease.job_id, job_id);
    assert_eq!(claimed.lease.generation, LeaseGeneration(1));
    assert_eq!(claimed.attempt, 1);
    assert_eq!(claimed.payload, json!({"n": 1}));
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.state, JobState::Running);
    assert_eq!(status.lease_owner.as_deref(), Some("w1"));
    assert!(status.lease_expires_at.unwrap() > Utc::now() + TimeDelta::seconds(20));

    let new_state = jobwire_core::complete(&pool, "w1", claimed.lease)
        .await
        .unwrap();
    assert_eq!(new_state, JobState::Succeeded);
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.state, JobState::Succeeded);
    assert!(status.lease_owner.is_none() && status.lease_expires_at.is_none());
    assert!(status.finished_at.is_some());
    // Completing twice is fenced: no double completion.
    assert!(is_fenced(
        jobwire_core::complete(&pool, "w1", claimed.lease).await
    ));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn retryable_failure_waits_with_backoff_then_runs_again(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("flaky", json!({}))).await;
    let first = claim_one(&pool, "w1").await;
    let state = jobwire_core::fail(
        &pool,
        "w1",
        first.lease,
        Some(Duration::from_secs(60)),
        "HTTP_503",
        "upstream unavailable",
    )
    .await
    .unwrap();
    assert_eq!(state, JobState::RetryWait);
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.last_error_code.as_deref(), Some("HTTP_503"));
    assert_eq!(status.last_error.as_deref(), Some("upstream unavailable"));
    let wait = status.run_after - Utc::now();
    assert!(
        wait > TimeDelta::seconds(55) && wait <= TimeDelta::seconds(60),
        "{wait:?}"
    );
    // Not due: nothing to claim.
    assert!(
        jobwire_core::claim_batch(&pool, "default", "w1", 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    // Once due, RETRY_WAIT -> RUNNING with a new generation and attempt.
    sqlx::query("UPDATE jobs SET run_after = now() WHERE job_id = $1")
        .bind(job_id)
        .execute(&pool)
        .await
        .unwrap();
    let second = claim_one(&pool, "w2").await;
    assert_eq!(second.lease.generation, LeaseGeneration(2));
    assert_eq!(second.attempt, 2);
    jobwire_core::complete(&pool, "w2", second.lease)
        .await
        .unwrap();
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.state, JobState::Succeeded);
    // The last failure stays on the record after success.
    assert_eq!(status.last_error_code.as_deref(), Some("HTTP_503"));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn fatal_failure_and_exhausted_attempts_dead_letter_the_job(pool: PgPool) {
    let fatal = enqueue(&pool, NewJob::new("a", json!({}))).await;
    let claimed = claim_one(&pool, "w1").await;
    assert_eq!(claimed.lease.job_id, fatal);
    let state = jobwire_core::fail(
        &pool,
        "w1",
        claimed.lease,
        None,
        "BAD_INPUT",
        "no such user",
    )
    .await
    .unwrap();
    assert_eq!(state, JobState::Failed);

    let exhausted = enqueue(&pool, NewJob::new("b", json!({})).with_max_attempts(2)).await;
    for attempt in 1..=2 {
        let claimed = claim_one(&pool, "w1").await;
        assert_eq!(claimed.attempt, attempt);
        let state = jobwire_core::fail(
            &pool,
            "w1",
            claimed.lease,
            Some(Duration::ZERO),
            "FLAKY",
            "again",
        )
        .await
        .unwrap();
        let expected = if attempt == 2 {
            JobState::Failed
        } else {
            JobState::RetryWait
        };
        assert_eq!(state, expected);
    }
    let status = jobwire_core::job_status(&pool, exhausted).await.unwrap();
    assert_eq!((status.state, status.attempt_count), (JobState::Failed, 2));
    assert_eq!(status.last_error_code.as_deref(), Some("FLAKY"));

    let groups = jobwire_core::dead_letter_groups(&pool).await.unwrap();
    let summary: Vec<(String, Option<String>, i64)> = groups
        .into_iter()
        .map(|g| (g.job_type, g.last_error_code, g.jobs))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("a".into(), Some("BAD_INPUT".into()), 1),
            ("b".into(), Some("FLAKY".into()), 1)
        ]
    );
}

/// The seed's timeline: A claims (g), its lease is swept, B claims (g+1); A's
/// complete / heartbeat / fail with g are rejected and change nothing; B's
/// succeed.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_stale_worker_is_fenced_after_its_lease_is_swept(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let a = claim_one(&pool, "worker-a").await;
    expire_lease(&pool, job_id).await.unwrap();
    let swept = jobwire_core::sweep_expired_leases(&pool, 100)
        .await
        .unwrap();
    let swept: Vec<_> = swept.iter().map(|s| (s.job_id, s.state)).collect();
    assert_eq!(swept, vec![(job_id, JobState::RetryWait)]);
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.last_error_code.as_deref(), Some("LEASE_EXPIRED"));

    let b = claim_one(&pool, "worker-b").await;
    assert_eq!(b.lease.generation.0, a.lease.generation.0 + 1);
    assert_eq!(b.attempt, 2, "the lost attempt counts");
    let before = jobwire_core::job_status(&pool, job_id).await.unwrap();

    assert!(is_fenced(
        jobwire_core::heartbeat(&pool, "worker-a", a.lease, LEASE).await
    ));
    assert!(is_fenced(
        jobwire_core::complete(&pool, "worker-a", a.lease).await
    ));
    assert!(is_fenced(
        jobwire_core::fail(&pool, "worker-a", a.lease, None, "X", "stale").await
    ));
    assert!(is_fenced(
        jobwire_core::acknowledge_cancel(&pool, "worker-a", a.lease).await
    ));
    let after = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(before, after, "a stale worker changed the row");

    let renewed = jobwire_core::heartbeat(&pool, "worker-b", b.lease, LEASE)
        .await
        .unwrap();
    assert!(matches!(
        renewed,
        HeartbeatResult::Held {
            cancel_requested: false,
            ..
        }
    ));
    assert_eq!(
        jobwire_core::complete(&pool, "worker-b", b.lease)
            .await
            .unwrap(),
        JobState::Succeeded
    );
}

/// Same, but one worker id reclaims its own job: only the generation differs,
/// and it alone fences the old attempt.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_generation_alone_fences_a_worker_that_reclaims_its_own_job(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let old = claim_one(&pool, "same-worker").await;
    expire_lease(&pool, job_id).await.unwrap();
    jobwire_core::sweep_expired_leases(&pool, 100)
        .await
        .unwrap();
    let new = claim_one(&pool, "same-worker").await;
    assert_eq!(new.lease.job_id, old.lease.job_id);
    assert!(new.lease.generation > old.lease.generation);

    assert!(is_fenced(
        jobwire_core::heartbeat(&pool, "same-worker", old.lease, LEASE).await
    ));
    assert!(is_fenced(
        jobwire_core::fail(
            &pool,
            "same-worker",
            old.lease,
            Some(Duration::ZERO),
            "X",
            "old"
        )
        .await
    ));
    assert!(is_fenced(
        jobwire_core::complete(&pool, "same-worker", old.lease).await
    ));
    assert_eq!(state(&pool, job_id).await, JobState::Running);
    jobwire_core::complete(&pool, "same-worker", new.lease)
        .await
        .unwrap();
    assert_eq!(state(&pool, job_id).await, JobState::Succeeded);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_wrong_owner_is_fenced_even_with_the_right_generation(pool: PgPool) {
    enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let claimed = claim_one(&pool, "owner").await;
    assert!(is_fenced(
        jobwire_core::complete(&pool, "impostor", claimed.lease).await
    ));
    assert!(is_fenced(
        jobwire_core::heartbeat(&pool, "impostor", claimed.lease, LEASE).await
    ));
    assert_eq!(state(&pool, claimed.lease.job_id).await, JobState::Running);
}

/// A job claimed ahead and given back unstarted: its attempt uncounted,
/// due as it was, its last error kept, its lease gone and its generation
/// still raised (the claim's lease is fenced); with a cancel requested
/// meanwhile, CANCELLED instead.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_returned_job_has_no_attempt_counted(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..2)
        .map(|i| NewJob::new("noop", json!({ "i": i })))
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    // A first attempt that failed, so the job has an error to keep.
    let first = jobwire_core::claim_batch(&pool, "default", "w1", 1, LEASE)
        .await
        .unwrap();
    jobwire_core::fail(
        &pool,
        "w1",
        first[0].lease,
        Some(Duration::ZERO),
        "E1",
        "first try",
    )
    .await
    .unwrap();
    let before = jobwire_core::job_status(&pool, first[0].lease.job_id)
        .await
        .unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "default", "w1", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let cancelled = ids
        .iter()
        .find(|id| **id != before.job_id)
        .copied()
        .unwrap();
    jobwire_core::request_cancel(&pool, cancelled, "operator")
        .await
        .unwrap();
    let reports: Vec<(Lease, FinishOutcome)> = claimed
        .iter()
        .map(|job| (job.lease, FinishOutcome::Returned))
        .collect();
    let results = jobwire_core::finish_many(&pool, "w1", &reports)
        .await
        .unwrap();
    assert!(
        results
            .iter()
            .all(|r| matches!(r, FinishResult::Recorded { .. }))
    );

    let returned = jobwire_core::job_status(&pool, before.job_id)
        .await
        .unwrap();
    assert_eq!(returned.state, JobState::RetryWait);
    assert_eq!(returned.attempt_count, 1, "only the first, started attempt");
    assert_eq!(returned.run_after, before.run_after, "due as it was");
    assert_eq!(returned.last_error_code.as_deref(), Some("E1"));
    assert!(returned.lease_owner.is_none() && returned.finished_at.is_none());
    assert_eq!(returned.lease_generation.0, before.lease_generation.0 + 1);
    let gone = jobwire_core::job_status(&pool, cancelled).await.unwrap();
    assert_eq!((gone.state, gone.attempt_count), (JobState::Cancelled, 0));
    // The claim's lease no longer writes anything.
    let stale = jobwire_core::finish_many(&pool, "w1", &reports[..1])
        .await
        .unwrap();
    assert!(matches!(stale[0], FinishResult::Fenced { .. }));
    // And it is claimable again at once.
    let again = jobwire_core::claim_batch(&pool, "default", "w2", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].lease.job_id, again[0].attempt),
        (before.job_id, 2)
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn batched_finish_records_each_outcome_and_reports_fenced_ones(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..4)
        .map(|i| NewJob::new("noop", json!({ "i": i })).with_max_attempts(3))
        .collect();
    jobwire_core::enqueue_many(&pool, &jobs).await.unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "default", "w1", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);
    let stale = Lease {
        job_id: claimed[3].lease.job_id,
        generation: LeaseGeneration(claimed[3].lease.generation.0 - 1),
    };
    let reports = vec![
        (claimed[0].lease, FinishOutcome::Succeeded),
        (
            claimed[1].lease,
            FinishOutcome::Retry {
                delay: Duration::from_secs(5),
                code: "T".into(),
                message: "later".into(),
            },
        ),
        (
            claimed[2].lease,
            FinishOutcome::Fail {
                code: "F".into(),
                message: "never".into(),
            },
        ),
        (stale, FinishOutcome::Succeeded),
    ];
    let results = jobwire_core::finish_many(&pool, "w1", &reports)
        .await
        .unwrap();
    let states: Vec<Option<JobState>> = results
        .iter()
        .map(|result| match result {
            FinishResult::Recorded { state, .. } => Some(*state),
            FinishResult::Fenced { .. } => None,
        })
        .collect();
    assert_eq!(
        states,
        vec![
            Some(JobState::Succeeded),
            Some(JobState::RetryWait),
            Some(JobState::Failed),
            None
        ]
    );
    assert_eq!(
        state(&pool, claimed[3].lease.job_id).await,
        JobState::Running
    );
}

/// Two attempts of one job in one batch (an earlier attempt's outcome,
/// sent after the job was claimed again): each result is the one of its own
/// generation. They were matched by job id, so the earlier attempt was
/// reported as recorded and the later one as fenced.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_batch_with_two_attempts_of_one_job_reports_each_its_own(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let earlier = claim_one(&pool, "w").await;
    expire_lease(&pool, job_id).await.unwrap();
    jobwire_core::sweep_expired_leases(&pool, 100)
        .await
        .unwrap();
    let later = claim_one(&pool, "w").await;
    assert_eq!(later.lease.job_id, job_id);
    let reports = vec![
        (earlier.lease, FinishOutcome::Succeeded),
        (later.lease, FinishOutcome::Succeeded),
    ];
    let results = jobwire_core::finish_many(&pool, "w", &reports)
        .await
        .unwrap();
    assert!(
        matches!(
            results[..],
            [
                FinishResult::Fenced { .. },
                FinishResult::Recorded {
                    state: JobState::Succeeded,
                    ..
                }
            ]
        ),
        "{results:?}"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn claims_take_the_most_urgent_due_jobs_first(pool: PgPool) {
    let low = enqueue(&pool, NewJob::new("noop", json!({})).with_priority(5)).await;
    let high = enqueue(&pool, NewJob::new("noop", json!({})).with_priority(-1)).await;
    let later = enqueue(
        &pool,
        NewJob::new("noop", json!({})).with_delay(TimeDelta::seconds(60)),
    )
    .await;
    let other_queue = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("bulk")).await;
    let claimed = jobwire_core::claim_batch(&pool, "default", "w1", 10, LEASE)
        .await
        .unwrap();
    let ids: Vec<Uuid> = claimed.iter().map(|job| job.lease.job_id).collect();
    assert_eq!(ids, vec![high, low]);
    assert_eq!(state(&pool, later).await, JobState::Queued);
    assert_eq!(state(&pool, other_queue).await, JobState::Queued);

    // A paused queue yields nothing until resumed.
    jobwire_core::set_queue_paused(&pool, "bulk", true)
        .await
        .unwrap();
    assert!(
        jobwire_core::claim_batch(&pool, "bulk", "w1", 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    jobwire_core::set_queue_paused(&pool, "bulk", false)
        .await
        .unwrap();
    assert_eq!(
        jobwire_core::claim_batch(&pool, "bulk", "w1", 10, LEASE)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn claim_by_ids_claims_due_jobs_and_explains_the_rest(pool: PgPool) {
    let ready = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let early = enqueue(
        &pool,
        NewJob::new("noop", json!({})).with_delay(TimeDelta::seconds(60)),
    )
    .await;
    let held = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q2")).await;
    jobwire_core::claim_batch(&pool, "q2", "other", 1, LEASE)
        .await
        .unwrap();
    let done = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q3")).await;
    let claimed = jobwire_core::claim_batch(&pool, "q3", "other", 1, LEASE)
        .await
        .unwrap();
    jobwire_core::complete(&pool, "other", claimed[0].lease)
        .await
        .unwrap();
    let unknown = Uuid::now_v7();
    // Due and queued, but of a queue this caller does not serve.
    let elsewhere = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q4")).await;
    // Due and queued in a served queue that is paused.
    let paused = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("p")).await;
    jobwire_core::set_queue_paused(&pool, "p", true)
        .await
        .unwrap();
    let served = ["default".to_owned(), "p".to_owned()];

    // `ready` twice: a duplicate wake-up in the same batch claims once.
    let outcome = jobwire_core::claim_by_ids(
        &pool,
        &[ready, ready, early, held, done, unknown, elsewhere, paused],
        &served,
        "me",
        LEASE,
    )
    .await
    .unwrap();
    assert_eq!(outcome.claimed.len(), 1);
    assert_eq!(outcome.claimed[0].lease.job_id, ready);
    assert_eq!(outcome.claimed[0].attempt, 1);
    let mut missed = outcome.missed.clone();
    missed.sort_by_key(|(id, _)| *id);
    let reasons: Vec<(Uuid, &str)> = missed
        .iter()
        .map(|(id, miss)| (*id, miss.label()))
        .collect();
    let mut expected = vec![
        (early, "not_due"),
        (held, "held"),
        (done, "finished"),
        (unknown, "unknown"),
        (elsewhere, "other_queue"),
        (paused, "paused"),
    ];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(reasons, expected);
    assert!(outcome.missed.iter().any(|(id, miss)| *id == done
        && *miss
            == ClaimMiss::Finished {
                state: JobState::Succeeded
            }));

    // A second wake-up for the same job finds it held.
    let again = jobwire_core::claim_by_ids(&pool, &[ready], &served, "me", LEASE)
        .await
        .unwrap();
    assert!(again.claimed.is_empty());
    assert_eq!(again.missed, vec![(ready, ClaimMiss::Held)]);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn enqueue_lives_and_dies_with_the_callers_transaction(pool: PgPool) {
    sqlx::query("CREATE TABLE orders (id uuid PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    // A broker-dispatched queue, so enqueue also writes a wake-up outbox row.
    jobwire_core::set_queue_dispatch(
        &pool,
        "webhooks",
        &Dispatch::Broker {
            topic: "jobwire.webhooks".into(),
        },
    )
    .await
    .unwrap();

    for commit in [false, true] {
        let order = Uuid::now_v7();
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO orders (id) VALUES ($1)")
            .bind(order)
            .execute(&mut *tx)
            .await
            .unwrap();
        let job = jobwire_core::enqueue(
            &mut *tx,
            &NewJob::new("send_webhook", json!({ "order": order })).with_queue("webhooks"),
        )
        .await
        .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE id = $1")
            .bind(order)
            .fetch_one(&pool)
            .await
            .unwrap();
        let job_exists = jobwire_core::job_status(&pool, job.job_id).await.is_ok();
        let wake_ups = wake_ups_for(&pool, job.job_id).await.unwrap();
        let expected = if commit { (1, true, 1) } else { (0, false, 0) };
        assert_eq!(
            (orders, job_exists, wake_ups),
            expected,
            "commit = {commit}"
        );
    }

    // The wake-up carries the job id, generation hint and topic.
    let (topic, key, payload): (String, String, serde_json::Value) =
        sqlx::query_as("SELECT topic, message_key, payload FROM job_outbox")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(topic, "jobwire.webhooks");
    assert_eq!(payload["job_id"].as_str(), Some(key.as_str()));
    assert_eq!(payload["generation"], json!(0));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn postgres_path_queues_write_no_outbox_rows(pool: PgPool) {
    let job_id = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    assert_eq!(wake_ups_for(&pool, job_id).await.unwrap(), 0);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn becoming_claimable_again_writes_a_wake_up_with_its_run_after(pool: PgPool) {
    jobwire_core::set_queue_dispatch(
        &pool,
        "default",
        &Dispatch::Broker {
            topic: "jobs".into(),
        },
    )
    .await
    .unwrap();
    let job_id = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let claimed = claim_one(&pool, "w1").await;
    jobwire_core::fail(
        &pool,
        "w1",
        claimed.lease,
        Some(Duration::from_secs(30)),
        "E",
        "retry me",
    )
    .await
    .unwrap();
    let (available_at, generation): (chrono::DateTime<Utc>, serde_json::Value) = sqlx::query_as(
        "SELECT available_at, payload->'generation' FROM job_outbox ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(
        available_at, status.run_after,
        "wake-up is due when the retry is"
    );
    assert_eq!(generation, json!(1));
    assert_eq!(wake_ups_for(&pool, job_id).await.unwrap(), 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_same_dedup_key_twice_yields_one_job(pool: PgPool) {
    let job =
        NewJob::new("digest", json!({"day": "2026-11-29"})).with_dedup_key("digest-2026-11-29");
    let first = jobwire_core::enqueue(&pool, &job).await.unwrap();
    let second = jobwire_core::enqueue(&pool, &job).await.unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(first.job_id, second.job_id);

    // Inside one batch, and mixed with new keys.
    let batch = vec![
        NewJob::new("digest", json!({})).with_dedup_key("k-new"),
        NewJob::new("digest", json!({})).with_dedup_key("k-new"),
        job.clone(),
        NewJob::new("digest", json!({})),
    ];
    let results = jobwire_core::enqueue_many(&pool, &batch).await.unwrap();
    let duplicates: Vec<bool> = results.iter().map(|r| r.duplicate).collect();
    assert_eq!(duplicates, vec![false, true, true, false]);
    assert_eq!(results[0].job_id, results[1].job_id);
    assert_eq!(results[2].job_id, first.job_id);
    assert_eq!(jobs_in_table(&pool).await, 3);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn bad_input_is_rejected_before_anything_is_written(pool: PgPool) {
    let big = "x".repeat(jobwire_core::MAX_PAYLOAD_BYTES);
    let cases: Vec<(NewJob, &str)> = vec![
        (
            NewJob::new("noop", json!({ "blob": big })),
            "PAYLOAD_TOO_LARGE",
        ),
        (NewJob::new("", json!({})), "INVALID_JOB"),
        (NewJob::new("   ", json!({})), "INVALID_JOB"),
        (NewJob::new("noop", json!({})).with_queue(""), "INVALID_JOB"),
        (
            NewJob::new("noop", json!({})).with_delay(TimeDelta::milliseconds(-1)),
            "INVALID_JOB",
        ),
        (
            NewJob::new("noop", json!({})).with_max_attempts(0),
            "INVALID_JOB",
        ),
        (
            NewJob::new("noop", json!({}))
                .with_delay(TimeDelta::seconds(1))
                .with_run_at(Utc::now()),
            "INVALID_JOB",
        ),
        (
            NewJob::new("noop", json!({})).with_dedup_key(""),
            "INVALID_JOB",
        ),
        // A schedule's occurrence key: the job would stand in for that
        // occurrence, which its scheduler would then count as fired.
        (
            NewJob::new("noop", json!({})).with_dedup_key("schedule:digest@2026-12-06T22:38:00Z"),
            "INVALID_JOB",
        ),
    ];
    for (job, code) in cases {
        let err = jobwire_core::enqueue(&pool, &job).await.unwrap_err();
        assert_eq!(err.code(), code, "{job:?}: {err}");
    }
    // One bad job in a batch rejects the whole batch, writing nothing.
    let batch = vec![NewJob::new("noop", json!({})), NewJob::new("", json!({}))];
    assert!(jobwire_core::enqueue_many(&pool, &batch).await.is_err());
    assert_eq!(jobs_in_table(&pool).await, 0);

    // The limit is a database setting; the error names both sizes, and a
    // batch with one oversized payload writes nothing.
    jobwire_core::set_max_payload_bytes(&pool, 16)
        .await
        .unwrap();
    assert_eq!(jobwire_core::max_payload_bytes(&pool).await.unwrap(), 16);
    let batch = vec![
        NewJob::new("noop", json!({})),
        NewJob::new("noop", json!({"k": "0123456789abcdef"})),
    ];
    let err = jobwire_core::enqueue_many(&pool, &batch).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                size: 25,
                limit: 16
            }
        ),
        "{err}"
    );
    // One job alone takes the statement without arrays: the same refusal.
    let err = jobwire_core::enqueue(&pool, &batch[1]).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                size: 25,
                limit: 16
            }
        ),
        "{err}"
    );
    assert_eq!(jobs_in_table(&pool).await, 0);
    assert!(jobwire_core::set_max_payload_bytes(&pool, 0).await.is_err());
    assert!(
        jobwire_core::set_max_payload_bytes(&pool, jobwire_core::PAYLOAD_CEILING_BYTES + 1)
            .await
            .is_err()
    );
}

/// A job enqueued alone without a dedup key takes a statement of its own
/// (no arrays): it must be written exactly as the same job in a batch.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_single_job_is_written_as_a_batch_writes_it(pool: PgPool) {
    let trace = jobwire_core::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("vendor=1"),
    )
    .unwrap();
    let jobs = [
        NewJob::new("report", json!({"n": 1.5, "s": "ü"}))
            .with_queue("q")
            .with_priority(-2)
            .with_max_attempts(3)
            .with_tenant("acme")
            .with_delay(TimeDelta::seconds(60))
            .with_trace_context(trace),
        NewJob::new("report", json!({})).with_run_at(Utc::now() - TimeDelta::hours(1)),
    ];
    // The columns a caller chooses, the state and counters a new job starts
    // with, and whether its run waits the delay.
    type Stored = (
        String,
        String,
        i16,
        serde_json::Value,
        i32,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
        i32,
        i64,
        bool,
    );
    let stored = |job_id: Uuid| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, Stored>(
                "SELECT queue, job_type, priority, payload, max_attempts, traceparent, tracestate,
                        tenant, state, attempt_count, lease_generation,
                        run_after > created_at + interval '59 seconds'
                 FROM jobs WHERE job_id = $1",
            )
            .bind(job_id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    for job in &jobs {
        let alone = jobwire_core::enqueue(&pool, job).await.unwrap();
        let batch = jobwire_core::enqueue_many(&pool, &[job.clone(), job.clone()])
            .await
            .unwrap();
        assert!(!alone.duplicate);
        assert_eq!(alone.state, batch[0].state);
        assert_eq!(stored(alone.job_id).await, stored(batch[0].job_id).await);
        let status = jobwire_core::job_status(&pool, alone.job_id).await.unwrap();
        assert_eq!(
            (status.run_after, status.created_at),
            (alone.run_after, alone.created_at)
        );
    }
}

/// A cancel that waits for a transaction changing the job (here a claim,
/// then a completion that schedules a retry) decides on the state that
/// transaction left. Locking in the cancel's own statement read the new
/// state but built the changed row from the old one, and the table's check
/// refused it: the operator got an error for a job that could be cancelled.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_cancel_waiting_for_a_claim_or_a_completion_decides_on_its_outcome(pool: PgPool) {
    let cancel_in_background = |job_id: Uuid| {
        let pool = pool.clone();
        tokio::spawn(async move { jobwire_core::request_cancel(&pool, job_id, "operator").await })
    };

    // A claim commits while the cancel waits: the running job is asked to stop.
    let claimed_meanwhile = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let mut claimer = pool.begin().await.unwrap();
    let lease = jobwire_core::claim_batch(&mut *claimer, "default", "w1", 1, LEASE)
        .await
        .unwrap()
        .remove(0)
        .lease;
    let cancel = cancel_in_background(claimed_meanwhile);
    until_a_session_waits_for_a_lock(&pool).await;
    claimer.commit().await.unwrap();
    assert_eq!(
        cancel.await.unwrap().unwrap(),
        RequestCancelOutcome::CancelRequested
    );
    assert_eq!(
        state(&pool, claimed_meanwhile).await,
        JobState::CancelRequested
    );
    let beat = jobwire_core::heartbeat(&pool, "w1", lease, LEASE)
        .await
        .unwrap();
    assert!(matches!(
        beat,
        HeartbeatResult::Held {
            cancel_requested: true,
            ..
        }
    ));

    // A completion that schedules a retry commits while the cancel waits:
    // the job waiting for its retry is cancelled.
    let retried_meanwhile = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let lease = claim_one(&pool, "w2").await.lease;
    let mut completion = pool.begin().await.unwrap();
    let retry = FinishOutcome::Retry {
        delay: Duration::from_secs(60),
        code: "E".into(),
        message: "again".into(),
    };
    let finished = jobwire_core::finish_many(&mut *completion, "w2", &[(lease, retry)])
        .await
        .unwrap();
    assert!(matches!(finished[..], [FinishResult::Recorded { .. }]));
    let cancel = cancel_in_background(retried_meanwhile);
    until_a_session_waits_for_a_lock(&pool).await;
    completion.commit().await.unwrap();
    assert_eq!(
        cancel.await.unwrap().unwrap(),
        RequestCancelOutcome::Cancelled
    );
    assert_eq!(state(&pool, retried_meanwhile).await, JobState::Cancelled);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn cancel_each_kind_of_job(pool: PgPool) {
    // Queued: CANCELLED at once, never claimed.
    let queued = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q1")).await;
    assert_eq!(
        jobwire_core::request_cancel(&pool, queued, "test")
            .await
            .unwrap(),
        RequestCancelOutcome::Cancelled
    );
    assert_eq!(state(&pool, queued).await, JobState::Cancelled);
    assert!(
        jobwire_core::claim_batch(&pool, "q1", "w1", 10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    // Running: CANCEL_REQUESTED, seen by the holder's heartbeat, acknowledged.
    let running = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let claimed = claim_one(&pool, "w1").await;
    assert_eq!(
        jobwire_core::request_cancel(&pool, running, "test")
            .await
            .unwrap(),
        RequestCancelOutcome::CancelRequested
    );
    assert_eq!(
        jobwire_core::request_cancel(&pool, running, "test")
            .await
            .unwrap(),
        RequestCancelOutcome::AlreadyRequested
    );
    let beat = jobwire_core::heartbeat(&pool, "w1", claimed.lease, LEASE)
        .await
        .unwrap();
    assert!(matches!(
        beat,
        HeartbeatResult::Held {
            cancel_requested: true,
            ..
        }
    ));
    assert_eq!(
        jobwire_core::acknowledge_cancel(&pool, "w1", claimed.lease)
            .await
            .unwrap(),
        JobState::Cancelled
    );

    // Finished: a clear error, nothing changes.
    let err = jobwire_core::request_cancel(&pool, running, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::AlreadyFinished {
                state: JobState::Cancelled,
                ..
            }
        ),
        "{err}"
    );
    let err = jobwire_core::request_cancel(&pool, Uuid::now_v7(), "test")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_FOUND");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_cancel_request_on_a_running_job_wins_over_a_retry(pool: PgPool) {
    enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let claimed = claim_one(&pool, "w1").await;
    jobwire_core::request_cancel(&pool, claimed.lease.job_id, "test")
        .await
        .unwrap();
    // The handler failed before it saw the request: the job is still cancelled.
    let state = jobwire_core::fail(
        &pool,
        "w1",
        claimed.lease,
        Some(Duration::ZERO),
        "E",
        "failed meanwhile",
    )
    .await
    .unwrap();
    assert_eq!(state, JobState::Cancelled);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn acknowledging_a_cancel_nobody_requested_is_rejected(pool: PgPool) {
    enqueue(&pool, NewJob::new("noop", json!({}))).await;
    let claimed = claim_one(&pool, "w1").await;
    assert!(is_fenced(
        jobwire_core::acknowledge_cancel(&pool, "w1", claimed.lease).await
    ));
    assert_eq!(state(&pool, claimed.lease.job_id).await, JobState::Running);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_sweeper_returns_expired_leases_by_the_lifecycle(pool: PgPool) {
    let retry = enqueue(&pool, NewJob::new("a", json!({})).with_queue("q1")).await;
    let exhausted = enqueue(
        &pool,
        NewJob::new("b", json!({}))
            .with_queue("q2")
            .with_max_attempts(1),
    )
    .await;
    let cancelling = enqueue(&pool, NewJob::new("c", json!({})).with_queue("q3")).await;
    let healthy = enqueue(&pool, NewJob::new("d", json!({})).with_queue("q4")).await;
    for queue in ["q1", "q2", "q3", "q4"] {
        jobwire_core::claim_batch(&pool, queue, "w1", 1, LEASE)
            .await
            .unwrap();
    }
    jobwire_core::request_cancel(&pool, cancelling, "test")
        .await
        .unwrap();
    for job_id in [retry, exhausted, cancelling] {
        expire_lease(&pool, job_id).await.unwrap();
    }
    let mut swept: Vec<_> = jobwire_core::sweep_expired_leases(&pool, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.job_id, s.state))
        .collect();
    swept.sort_by_key(|(id, _)| *id);
    let mut expected = vec![
        (retry, JobState::RetryWait),
        (exhausted, JobState::Failed),
        (cancelling, JobState::Cancelled),
    ];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(swept, expected);
    assert_eq!(state(&pool, healthy).await, JobState::Running);
    // A second sweep finds nothing.
    assert!(
        jobwire_core::sweep_expired_leases(&pool, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A replay of one dead letter that another session holds (the retention
/// pass archiving it, another replay) waits for it. It used to skip the
/// locked row and answer "only FAILED jobs can be replayed" about a FAILED
/// job. Once archived, the answer says so.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_replay_of_a_busy_dead_letter_waits_for_it(pool: PgPool) {
    let mut dead = Vec::new();
    for _ in 0..2 {
        let job_id = enqueue(&pool, NewJob::new("export", json!({})).with_max_attempts(1)).await;
        let claimed = claim_one(&pool, "w1").await;
        jobwire_core::fail(&pool, "w1", claimed.lease, None, "E1", "boom")
            .await
            .unwrap();
        dead.push(job_id);
    }
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE")
        .bind(dead[0])
        .execute(&mut *holder)
        .await
        .unwrap();
    let replay = tokio::spawn({
        let pool = pool.clone();
        let job_id = dead[0];
        async move { jobwire_core::replay_dead_job(&pool, job_id, "ops", "try").await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    holder.rollback().await.unwrap();
    replay.await.unwrap().unwrap();
    let replayed = jobwire_core::job_status(&pool, dead[0]).await.unwrap();
    assert_eq!(replayed.state, JobState::Queued);

    // The other one archived: refused, and the reason names it.
    jobwire_core::archive_finished(&pool, Duration::ZERO, Duration::ZERO, 10)
        .await
        .unwrap();
    match jobwire_core::replay_dead_job(&pool, dead[1], "ops", "try").await {
        Err(Error::WrongState { state, reason, .. }) => {
            assert_eq!(state, JobState::Failed);
            assert!(reason.contains("archived"), "{reason}");
        }
        other => panic!("expected WrongState, got {other:?}"),
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn replay_brings_dead_letters_back_audited(pool: PgPool) {
    let mut failed = Vec::new();
    for code in ["E1", "E1", "E2"] {
        let job_id = enqueue(&pool, NewJob::new("export", json!({})).with_max_attempts(1)).await;
        let claimed = claim_one(&pool, "w1").await;
        jobwire_core::fail(&pool, "w1", claimed.lease, None, code, "boom")
            .await
            .unwrap();
        failed.push(job_id);
    }
    // Only FAILED jobs can be replayed.
    let queued = enqueue(&pool, NewJob::new("export", json!({})).with_queue("other")).await;
    let err = jobwire_core::replay_dead_job(&pool, queued, "ops", "try")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "WRONG_STATE");

    // A group by type and error code.
    let filter = ReplayFilter {
        job_type: Some("export".into()),
        error_code: Some("E1".into()),
        ..ReplayFilter::default()
    };
    let mut replayed = jobwire_core::replay_dead(&pool, &filter, "ops", "upstream fixed")
        .await
        .unwrap();
    replayed.sort();
    let mut expected = failed[..2].to_vec();
    expected.sort();
    assert_eq!(replayed, expected);
    for job_id in &failed[..2] {
        let status = jobwire_core::job_status(&pool, *job_id).await.unwrap();
        assert_eq!((status.state, status.attempt_count), (JobState::Queued, 0));
        assert!(status.finished_at.is_none());
    }
    // One by id.
    jobwire_core::replay_dead_job(&pool, failed[2], "ops", "one more")
        .await
        .unwrap();
    assert_eq!(state(&pool, failed[2]).await, JobState::Queued);

    let audit: Vec<(Uuid, String, String, Option<String>)> =
        sqlx::query_as("SELECT job_id, action, actor, reason FROM job_audit ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(audit.len(), 3);
    assert!(
        audit
            .iter()
            .all(|(_, action, actor, _)| action == "replay" && actor == "ops")
    );
    assert_eq!(audit[2].0, failed[2]);
    assert_eq!(audit[2].3.as_deref(), Some("one more"));

    // A replayed job runs again with a higher generation than ever before.
    let claimed = jobwire_core::claim_batch(&pool, "default", "w2", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(
        claimed
            .iter()
            .all(|job| job.attempt == 1 && job.lease.generation.0 == 2)
    );
}

/// A batched replay asked for an `until` in the future uses the database's
/// clock instead: with the future bound, each job it requeued that failed
/// again was requeued again by a later batch (its side effects ran again,
/// its attempts reset), and asking again with the bound it returned
/// requeued every job that had failed since.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_batched_replay_never_takes_an_until_later_than_its_start(pool: PgPool) {
    let fail_all = |pool: PgPool| async move {
        let claimed = jobwire_core::claim_batch(&pool, "default", "w", 10, LEASE)
            .await
            .unwrap();
        for job in &claimed {
            jobwire_core::fail(&pool, "w", job.lease, None, "E1", "boom")
                .await
                .unwrap();
        }
        claimed.len()
    };
    for _ in 0..3 {
        enqueue(&pool, NewJob::new("export", json!({})).with_max_attempts(1)).await;
    }
    assert_eq!(fail_all(pool.clone()).await, 3);
    let started = jobwire_core::database_now(&pool).await.unwrap();
    let filter = ReplayFilter {
        job_type: Some("export".into()),
        until: Some(started + chrono::Duration::days(365)),
        ..ReplayFilter::default()
    };
    let report = jobwire_core::replay_dead_in_batches(&pool, &filter, 1, "ops", "fixed")
        .await
        .unwrap();
    assert_eq!(report.requeued, 3);
    let ended = jobwire_core::database_now(&pool).await.unwrap();
    assert!(
        started <= report.until && report.until <= ended,
        "the bound used, {}, is not the replay's start",
        report.until
    );
    // They fail again; the same call with the bound it returned leaves them.
    assert_eq!(fail_all(pool.clone()).await, 3);
    let again = ReplayFilter {
        until: Some(report.until),
        ..filter
    };
    let report = jobwire_core::replay_dead_in_batches(&pool, &again, 1, "ops", "fixed")
        .await
        .unwrap();
    assert_eq!(
        report.requeued, 0,
        "jobs that failed after the replay were requeued"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn retention_moves_finished_jobs_to_history_in_batches(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| NewJob::new("noop", json!({ "i": i })))
        .collect();
    let enqueued = jobwire_core::enqueue_many(&pool, &jobs).await.unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "default", "w1", 5, LEASE)
        .await
        .unwrap();
    let reports: Vec<(Lease, FinishOutcome)> = claimed
        .iter()
        .take(4)
        .map(|job| (job.lease, FinishOutcome::Succeeded))
        .collect();
    jobwire_core::finish_many(&pool, "w1", &reports)
        .await
        .unwrap();

    // Nothing is old enough yet.
    let keep = Duration::from_secs(3600);
    assert_eq!(
        jobwire_core::archive_finished(&pool, keep, keep, 100)
            .await
            .unwrap(),
        0
    );
    // With zero retention, batches of 3 then 1; the running job stays.
    assert_eq!(
        jobwire_core::archive_finished(&pool, Duration::ZERO, keep, 3)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        jobwire_core::archive_finished(&pool, Duration::ZERO, keep, 3)
            .await
            .unwrap(),
        1
    );
    let hot: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(hot, 1);
    // Archived jobs are still visible through status.
    let archived = jobwire_core::job_status(&pool, reports[0].0.job_id)
        .await
        .unwrap();
    assert!(archived.archived);
    assert_eq!(archived.state, JobState::Succeeded);
    assert_eq!(enqueued.len(), 5);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn waiting_jobs_cancel_at_once_and_finished_work_is_recorded_as_done(pool: PgPool) {
    // RETRY_WAIT -> CANCELLED.
    let waiting = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q1")).await;
    let claimed = jobwire_core::claim_batch(&pool, "q1", "w1", 1, LEASE)
        .await
        .unwrap();
    jobwire_core::fail(
        &pool,
        "w1",
        claimed[0].lease,
        Some(Duration::from_secs(60)),
        "E",
        "later",
    )
    .await
    .unwrap();
    assert_eq!(
        jobwire_core::request_cancel(&pool, waiting, "test")
            .await
            .unwrap(),
        RequestCancelOutcome::Cancelled
    );
    assert_eq!(state(&pool, waiting).await, JobState::Cancelled);

    // CANCEL_REQUESTED -> SUCCEEDED: the handler finished before it saw the
    // request, and the record says what really happened.
    let done = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("q2")).await;
    let claimed = jobwire_core::claim_batch(&pool, "q2", "w1", 1, LEASE)
        .await
        .unwrap();
    jobwire_core::request_cancel(&pool, done, "test")
        .await
        .unwrap();
    assert_eq!(
        jobwire_core::complete(&pool, "w1", claimed[0].lease)
            .await
            .unwrap(),
        JobState::Succeeded
    );
}

/// `rows` finished jobs of `job_type` in `state`, newest last (UUIDv7 ids
/// in insertion order), written in one statement; their ids, oldest first.
async fn insert_finished(
    pool: &PgPool,
    table: &str,
    job_type: &str,
    state: &str,
    rows: i64,
) -> Vec<Uuid> {
    let sql = format!(
        "INSERT INTO {table} (job_id, job_type, state, attempt_count, finished_at, payload)
         SELECT jobwire_uuidv7(), $2, $3, 1, now(), '{{}}'
         FROM generate_series(1, $1)
         RETURNING job_id"
    );
    let mut ids: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(rows)
        .bind(job_type)
        .bind(state)
        .fetch_all(pool)
        .await
        .unwrap();
    ids.sort();
    ids
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_rare_filter_reads_a_bounded_share_per_page_and_misses_nothing(pool: PgPool) {
    use jobwire_core::{JobFilter, LIST_SCAN_ROWS};
    // One dead letter, then more newer rows than one page reads in each
    // table, then a second dead letter on top.
    let oldest = insert_finished(&pool, "jobs", "rare", "FAILED", 1).await[0];
    insert_finished(
        &pool,
        "jobs_history",
        "filler",
        "SUCCEEDED",
        LIST_SCAN_ROWS + 10,
    )
    .await;
    insert_finished(&pool, "jobs", "filler", "SUCCEEDED", LIST_SCAN_ROWS + 10).await;
    let newest = insert_finished(&pool, "jobs_history", "rare", "FAILED", 1).await[0];
    let mut filter = JobFilter {
        state: Some(JobState::Failed),
        ..JobFilter::default()
    };
    let mut found = Vec::new();
    let mut pages = 0;
    loop {
        let page = jobwire_core::list_jobs(&pool, &filter, 50).await.unwrap();
        pages += 1;
        found.extend(page.jobs.iter().map(|job| job.job_id));
        match page.next_before {
            Some(next) => filter.before = Some(next),
            None => break,
        }
        assert!(pages < 10, "the pages never end");
    }
    assert_eq!(found, vec![newest, oldest], "each match once, newest first");
    assert!(pages >= 2, "the first page stopped after its share of ids");

    // A common filter fills its page in the first, small window.
    let common = JobFilter {
        job_type: Some("filler".into()),
        ..JobFilter::default()
    };
    let page = jobwire_core::list_jobs(&pool, &common, 50).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert!(page.jobs.iter().all(|job| job.job_type == "filler"));
    assert_eq!(page.next_before, Some(page.jobs[49].job_id));

    // Unfiltered, a full page ends where its last job is.
    let page = jobwire_core::list_jobs(&pool, &JobFilter::default(), 3)
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 3);
    assert_eq!(page.next_before, Some(page.jobs[2].job_id));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_dashboards_reads_count_what_they_say(pool: PgPool) {
    use jobwire_core::JobFilter;
    let exec = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(sql).execute(&pool).await.unwrap() }
    };
    // Finished per minute: three this minute in `jobs`, two ten minutes
    // back in history, one two hours back (outside the hour).
    let now_ids = insert_finished(&pool, "jobs", "a_type", "SUCCEEDED", 3).await;
    insert_finished(&pool, "jobs_history", "b_type", "FAILED", 2).await;
    insert_finished(&pool, "jobs_history", "old_type", "SUCCEEDED", 1).await;
    exec("UPDATE jobs SET queue = 'alpha', finished_at = date_trunc('minute', now()) + interval '1 second'").await;
    exec("UPDATE jobs_history SET queue = 'beta', finished_at = date_trunc('minute', now()) - interval '10 minutes' + interval '1 second' WHERE job_type = 'b_type'").await;
    exec("UPDATE jobs_history SET finished_at = now() - interval '2 hours' WHERE job_type = 'old_type'").await;
    let minutes = jobwire_core::finished_per_minute(&pool, 60).await.unwrap();
    let got: Vec<(String, i32, i64)> = minutes
        .into_iter()
        .map(|m| (m.queue, m.minutes_ago, m.finished))
        .collect();
    assert_eq!(got, vec![("alpha".into(), 0, 3), ("beta".into(), 10, 2)]);

    // Lease expiries in the last hour, both tables.
    exec(
        "UPDATE jobs SET lease_expired_at = now() - interval '5 minutes' WHERE job_type = 'a_type'",
    )
    .await;
    exec("UPDATE jobs_history SET lease_expired_at = now() - interval '2 hours' WHERE job_type = 'old_type'").await;
    exec("UPDATE jobs_history SET lease_expired_at = now() - interval '1 minute' WHERE job_type = 'b_type'").await;
    assert_eq!(
        jobwire_core::lease_expiries_since(&pool, 3600.0)
            .await
            .unwrap(),
        5
    );
    assert_eq!(
        jobwire_core::lease_expiries_since(&pool, 120.0)
            .await
            .unwrap(),
        2
    );

    // The error-code filter names one dead-letter group.
    exec("UPDATE jobs_history SET last_error_code = 'HTTP_503' WHERE job_type = 'b_type'").await;
    let filter = JobFilter {
        state: Some(JobState::Failed),
        error_code: Some("HTTP_503".into()),
        ..JobFilter::default()
    };
    let page = jobwire_core::list_jobs(&pool, &filter, 50).await.unwrap();
    assert_eq!(page.jobs.len(), 2);
    assert!(
        page.jobs
            .iter()
            .all(|job| job.last_error_code.as_deref() == Some("HTTP_503"))
    );
    assert_eq!(page.next_before, None);

    // A job's audit trail: who did what, oldest first.
    let queued = enqueue(&pool, NewJob::new("noop", json!({}))).await;
    assert!(
        jobwire_core::job_audit_trail(&pool, queued, 10)
            .await
            .unwrap()
            .is_empty()
    );
    jobwire_core::request_cancel(&pool, queued, "night-operator")
        .await
        .unwrap();
    let trail = jobwire_core::job_audit_trail(&pool, queued, 10)
        .await
        .unwrap();
    assert_eq!(trail.len(), 1);
    assert_eq!(
        (trail[0].action.as_str(), trail[0].actor.as_str()),
        ("cancel", "night-operator")
    );
    assert!(
        jobwire_core::job_audit_trail(&pool, now_ids[0], 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A job enqueued with a run-at in the past has waited only since it was
/// written: the queue's oldest runnable age counts from then, not from a
/// run-at decades ago.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_run_at_in_the_past_ages_from_the_enqueue(pool: PgPool) {
    let long_ago = Utc::now() - TimeDelta::days(365 * 30);
    enqueue(
        &pool,
        NewJob::new("work", json!({}))
            .with_queue("aged")
            .with_run_at(long_ago),
    )
    .await;
    let overview = jobwire_core::queue_overview(&pool).await.unwrap();
    let aged = overview.iter().find(|q| q.queue == "aged").unwrap();
    let age = aged.oldest_runnable_age_s.unwrap();
    assert!((0.0..600.0).contains(&age), "{age}");
}

/// A migration that adds a column to `jobs` while workers run (the rolling
/// deploy docs/operations.md describes) leaves their claims working. Each
/// claim is a statement a connection prepared once; one returning the
/// whole row failed with "cached plan must not change result type" on
/// every connection that had prepared it.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn claims_prepared_before_a_column_is_added_still_work(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "capped", None, Some(5))
        .await
        .unwrap();
    jobwire_core::set_queue_dispatch(&pool, "b", &Dispatch::Broker { topic: "t".into() })
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(&pool, "b", None, Some(5))
        .await
        .unwrap();
    let job = |queue: &str, tenant: Option<&str>| {
        let job = NewJob::new("work", json!({})).with_queue(queue);
        match tenant {
            Some(tenant) => job.with_tenant(tenant),
            None => job,
        }
    };
    let mut wanted = Vec::new();
    for _ in 0..2 {
        enqueue(&pool, job("default", None)).await;
        enqueue(&pool, job("capped", Some("acme"))).await;
        wanted.push(enqueue(&pool, job("b", None)).await);
        wanted.push(enqueue(&pool, job("b", Some("acme"))).await);
    }
    // One connection, as a worker's pooled one: each statement prepared on
    // it by the first round is reused by the second.
    let mut worker = pool.acquire().await.unwrap().detach();
    let served = ["b".to_owned()];
    for (round, ids) in wanted.chunks(2).enumerate() {
        if round == 1 {
            sqlx::query("ALTER TABLE jobs ADD COLUMN added_by_a_later_version integer")
                .execute(&pool)
                .await
                .unwrap();
        }
        for queue in ["default", "capped"] {
            let claimed = jobwire_core::claim_batch(&mut worker, queue, "w", 1, LEASE)
                .await
                .unwrap_or_else(|err| panic!("round {round}, {queue}: {err}"));
            assert_eq!(claimed.len(), 1, "round {round}, {queue}");
        }
        let woken = jobwire_core::claim_by_ids(&mut worker, ids, &served, "w", LEASE)
            .await
            .unwrap_or_else(|err| panic!("round {round}, wake-up claim: {err}"));
        assert_eq!(woken.claimed.len(), 2, "round {round}");
    }
}

/// A worker's own connection on a vacuumed, empty `jobs`, and a lease that
/// fences nothing: what an idle worker's statements first run with.
async fn idle_worker_on_an_empty_table(pool: &PgPool) -> (sqlx::PgConnection, Lease) {
    sqlx::query("VACUUM ANALYZE jobs")
        .execute(pool)
        .await
        .unwrap();
    let worker = pool.acquire().await.unwrap().detach();
    let nobody = Lease {
        job_id: Uuid::now_v7(),
        generation: LeaseGeneration(1),
    };
    (worker, nobody)
}

/// 5,000 jobs on `default`, enqueued in batches of 1,000.
async fn a_burst_of_5000(pool: &PgPool) {
    let burst: Vec<NewJob> = (0..5_000)
        .map(|i| NewJob::new("work", json!({ "i": i })))
        .collect();
    for chunk in burst.chunks(1_000) {
        jobwire_core::enqueue_many(pool, chunk).await.unwrap();
    }
}

/// A worker that started on a quiet database claims and renews reading as
/// few rows as it should once a burst arrives (the completion: the next
/// test). Its first runs of each
/// statement were on an empty table; a connection's prepared statement
/// then kept a plan for a table of one row, and the first claim after a
/// burst of 100,000 jobs read every row twice and compared 50 million
/// pairs (7.5 s by hand). Counted in the rows read from `jobs` (this
/// transaction's statistics), not in time.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_started_on_an_empty_table_reads_few_rows_after_a_burst(pool: PgPool) {
    let (mut worker, nobody) = idle_worker_on_an_empty_table(&pool).await;
    // An idle worker's polls and renewals, on the empty table.
    for _ in 0..7 {
        let claimed = jobwire_core::claim_batch(&mut worker, "default", "w", 10, LEASE)
            .await
            .unwrap();
        assert!(claimed.is_empty());
        jobwire_core::heartbeat_many(&mut worker, "w", &[nobody], LEASE)
            .await
            .unwrap();
    }
    a_burst_of_5000(&pool).await;

    let mut tx = sqlx::Connection::begin(&mut worker).await.unwrap();
    let before = rows_read_in_transaction(&mut tx, "jobs").await;
    let claimed = jobwire_core::claim_batch(&mut *tx, "default", "w", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 10);
    let claiming = rows_read_in_transaction(&mut tx, "jobs").await - before;
    let leases: Vec<Lease> = claimed.iter().map(|job| job.lease).collect();
    jobwire_core::heartbeat_many(&mut *tx, "w", &leases, LEASE)
        .await
        .unwrap();
    let renewing = rows_read_in_transaction(&mut tx, "jobs").await - before - claiming;
    tx.rollback().await.unwrap();
    for (what, read) in [("claim", claiming), ("renewal", renewing)] {
        assert!(
            read < 500,
            "the {what} of 10 jobs among 5,000 read {read} rows of jobs"
        );
    }
}

/// A worker whose first completions ran on an empty table (the store
/// module's doc, "Planned at each call"): after a burst, completing 10 of
/// 5,000 jobs reads only the rows it finishes, through the key. Kept
/// prepared, before migration 20261207000005, the completion's plan made on
/// the empty table read 10,000, on every completion.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_completion_planned_on_an_empty_table_reads_few_rows_after_a_burst(pool: PgPool) {
    let (mut worker, nobody) = idle_worker_on_an_empty_table(&pool).await;
    // Completions on the empty table, more than PostgreSQL's five custom
    // plans before it settles on a generic one.
    for _ in 0..7 {
        jobwire_core::finish_many(&mut worker, "w", &[(nobody, FinishOutcome::Succeeded)])
            .await
            .unwrap();
    }
    a_burst_of_5000(&pool).await;

    let mut tx = sqlx::Connection::begin(&mut worker).await.unwrap();
    let claimed = jobwire_core::claim_batch(&mut *tx, "default", "w", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 10);
    let reports: Vec<(Lease, FinishOutcome)> = claimed
        .iter()
        .map(|job| (job.lease, FinishOutcome::Succeeded))
        .collect();
    let before = rows_read_in_transaction(&mut tx, "jobs").await;
    let finished = jobwire_core::finish_many(&mut *tx, "w", &reports)
        .await
        .unwrap();
    assert!(
        finished.iter().all(|result| matches!(
            result,
            FinishResult::Recorded {
                state: JobState::Succeeded,
                ..
            }
        )),
        "{finished:?}"
    );
    let read = rows_read_in_transaction(&mut tx, "jobs").await - before;
    tx.rollback().await.unwrap();
    assert!(
        read < 500,
        "the completion of 10 jobs among 5,000 read {read} rows of jobs"
    );
}
