//! The PostgreSQL-path worker end to end: handlers, retries, poison jobs,
//! cancellation, lost leases, timeouts, panics, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobwire_consumer::maintenance::MaintenanceConfig;
use jobwire_consumer::{
    CancelReason, HandlerOptions, HandlerRegistry, JobContext, JobError, QueueConfig, Worker,
    WorkerConfig, WorkerReport,
};
use jobwire_core::{JobState, NewJob};
use jobwire_server::{Node, RunningNode};
use jobwire_test_support::{
    expire_lease, fast_options, test_maintenance, test_worker_config, wait_for_all_finished,
    wait_for_job, wait_for_state,
};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(20);

fn builtin_registry() -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(&mut registry, fast_options());
    registry
}

/// A node running one worker and, beside it, its maintenance loops.
struct RunningWorker {
    node: RunningNode,
}

impl RunningWorker {
    /// The worker with [`test_maintenance`] (a fast lease sweeper).
    fn start(pool: &PgPool, registry: HandlerRegistry, config: WorkerConfig) -> Self {
        Self::start_with(pool, registry, config, test_maintenance())
    }

    fn start_with(
        pool: &PgPool,
        registry: HandlerRegistry,
        config: WorkerConfig,
        maintenance: MaintenanceConfig,
    ) -> Self {
        let node = Node::new(pool.clone())
            .with_worker(Worker::new(pool.clone(), registry, config))
            .with_maintenance(maintenance)
            .start()
            .unwrap();
        RunningWorker { node }
    }

    async fn stop(mut self) -> WorkerReport {
        let report = self.node.stop().await.unwrap();
        report.worker.expect("the node ran a worker")
    }
}

async fn enqueue(pool: &PgPool, job: NewJob) -> Uuid {
    jobwire_core::enqueue(pool, &job).await.unwrap().job_id
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn runs_every_job_once_to_success(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("noop", json!({ "i": i })).with_queue("work"))
        .collect();
    let ids: Vec<Uuid> = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 16));
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    let report = worker.stop().await;
    let outcomes: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT state, attempt_count, count(*) FROM jobs WHERE queue = 'work' GROUP BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(outcomes, vec![("SUCCEEDED".into(), 1, 300)]);
    assert_eq!(
        (report.claimed, report.succeeded, report.fenced),
        (300, 300, 0)
    );
}

/// Jobs claimed together are completed together: the completer waits for
/// the outcomes still to come instead of writing the first one alone, so
/// one statement (one transaction, one `finished_at`) completes them all.
/// The handlers end 0 to 19 ms after they start: without the wait, the
/// first outcome is written before the others exist.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn jobs_claimed_together_are_completed_by_one_statement(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..20)
        .map(|ms| NewJob::new("sleep", json!({ "ms": ms })).with_queue("together"))
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let mut config = test_worker_config("together", 20);
    // Five times the slowest handler, so that a slow machine still ends
    // them all within it; the wait ends once the last outcome is taken.
    config.runtime.completion_linger = Duration::from_millis(100);
    let worker = RunningWorker::start(&pool, builtin_registry(), config);
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    let report = worker.stop().await;
    let (claims, completions, succeeded): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(DISTINCT heartbeat_at), count(DISTINCT finished_at),
                count(*) FILTER (WHERE state = 'SUCCEEDED' AND attempt_count = 1)
         FROM jobs WHERE queue = 'together'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((claims, succeeded), (1, 20), "one claim took all 20");
    assert_eq!(completions, 1, "one statement completed all 20");
    assert_eq!((report.succeeded, report.completion_batches), (20, 1));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn notify_wakes_an_idle_worker_without_waiting_for_the_poll(pool: PgPool) {
    let mut config = test_worker_config("work", 4);
    // A poll so slow that only NOTIFY can explain a prompt start.
    config.poll_interval = Duration::from_secs(600);
    let worker = RunningWorker::start(&pool, builtin_registry(), config);
    // Let the worker reach its idle wait, then enqueue.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job_id = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    wait_for_state(&pool, job_id, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    worker.stop().await;
}

/// Every notification lost: another session holds the queue's wake token
/// (the advisory lock a committing enqueue must take to NOTIFY), so no
/// enqueue notifies. The worker's poll still finds the jobs.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn jobs_whose_notifications_are_all_lost_are_found_by_the_poll(pool: PgPool) {
    let mut config = test_worker_config("work", 4);
    config.poll_interval = Duration::from_millis(500);
    let mut token_holder = pool.acquire().await.unwrap();
    sqlx::query(
        "SELECT pg_advisory_lock(hashtext('jobwire.' || 'jobwire_jobs'), hashtext('work'))",
    )
    .execute(&mut *token_holder)
    .await
    .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen(jobwire_core::WAKE_CHANNEL).await.unwrap();

    let worker = RunningWorker::start(&pool, builtin_registry(), config);
    // A first job, run however the worker finds it, shows the worker past
    // its start (whose first claim would find the jobs below without any
    // poll); a moment more lets it reach its idle wait. Then one job at a
    // time, each committed alone.
    let first = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    wait_for_all_finished(&pool, &[first], WAIT).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut job_ids = Vec::new();
    for i in 0..3 {
        job_ids.push(
            enqueue(
                &pool,
                NewJob::new("noop", json!({ "i": i })).with_queue("work"),
            )
            .await,
        );
    }
    wait_for_all_finished(&pool, &job_ids, WAIT).await.unwrap();
    let report = worker.stop().await;
    assert_eq!((report.claimed, report.succeeded), (4, 4));

    // No notification was sent for them: the poll alone found them.
    let heard = tokio::time::timeout(Duration::from_millis(200), listener.recv()).await;
    assert!(heard.is_err(), "a notification was sent: {heard:?}");

    // With the token free again, an enqueue notifies.
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut *token_holder)
        .await
        .unwrap();
    enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    let notification = tokio::time::timeout(WAIT, listener.recv())
        .await
        .expect("an enqueue with the token free notifies")
        .unwrap();
    assert_eq!(notification.payload(), "work");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_poison_job_dead_letters_without_delaying_other_jobs(pool: PgPool) {
    let poison = enqueue(
        &pool,
        NewJob::new("always_fail", json!({}))
            .with_queue("work")
            .with_max_attempts(3)
            .with_priority(-10),
    )
    .await;
    let others: Vec<NewJob> = (0..50)
        .map(|i| NewJob::new("noop", json!({ "i": i })).with_queue("work"))
        .collect();
    let other_ids: Vec<Uuid> = jobwire_test_support::enqueue_ids(&pool, &others)
        .await
        .unwrap();
    // One slot: the poison job cannot hog it, because a failed attempt waits
    // in RETRY_WAIT, not in a worker. Its two retry waits (a second each)
    // leave the 50 no-op jobs far more time than they need even on a loaded
    // machine; the tests' usual 100 ms backoff did not (the poison job's
    // retries came due first, and it dead-lettered before the last of them).
    let mut registry = HandlerRegistry::new();
    let one_second = jobwire_core::Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(1),
        jitter_ratio: 0.1,
    };
    jobwire_consumer::builtin::register_builtin_handlers(
        &mut registry,
        HandlerOptions {
            backoff: one_second,
            ..fast_options()
        },
    );
    let worker = RunningWorker::start(&pool, registry, test_worker_config("work", 1));
    let status = wait_for_state(&pool, poison, JobState::Failed, WAIT)
        .await
        .unwrap();
    wait_for_all_finished(&pool, &other_ids, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!(status.attempt_count, 3);
    assert_eq!(status.last_error_code.as_deref(), Some("ALWAYS_FAILS"));
    let (succeeded, last_done): (i64, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
        "SELECT count(*), max(finished_at) FROM jobs WHERE job_id = ANY($1) AND state = 'SUCCEEDED' AND attempt_count = 1",
    )
    .bind(&other_ids)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(succeeded, 50);
    assert!(
        last_done < status.finished_at.unwrap(),
        "the other jobs finished while the poison job was still retrying"
    );
    assert_eq!((report.retried, report.failed), (2, 1));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn cancelling_a_running_job_reaches_its_handler(pool: PgPool) {
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let mut registry = HandlerRegistry::new();
    registry.register("long", move |ctx: JobContext| {
        let seen_tx = seen_tx.clone();
        let started_tx = started_tx.clone();
        async move {
            started_tx.send(ctx.job_id()).unwrap();
            ctx.cancelled().await;
            seen_tx.send(ctx.cancel_reason()).unwrap();
            Err(JobError::cancelled())
        }
    });
    let job_id = enqueue(&pool, NewJob::new("long", json!({})).with_queue("work")).await;
    let worker = RunningWorker::start(&pool, registry, test_worker_config("work", 2));
    assert_eq!(started.recv().await, Some(job_id));
    jobwire_core::request_cancel(&pool, job_id, "test")
        .await
        .unwrap();
    // Observed at the next heartbeat (lease / 3 = 500 ms here).
    assert_eq!(seen.recv().await, Some(Some(CancelReason::Requested)));
    let status = wait_for_state(&pool, job_id, JobState::Cancelled, WAIT)
        .await
        .unwrap();
    assert_eq!(status.last_error_code.as_deref(), Some("CANCELLED"));
    let report = worker.stop().await;
    assert_eq!(report.cancelled, 1);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_unknown_job_type_fails_clearly_and_the_worker_carries_on(pool: PgPool) {
    let unknown = enqueue(&pool, NewJob::new("send_fax", json!({})).with_queue("work")).await;
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 2));
    let status = wait_for_state(&pool, unknown, JobState::Failed, WAIT)
        .await
        .unwrap();
    assert_eq!(status.last_error_code.as_deref(), Some("UNKNOWN_JOB_TYPE"));
    assert!(status.last_error.unwrap().contains("send_fax"));
    let after = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    wait_for_state(&pool, after, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!(report.unknown_job_type, 1);
}

/// A payload jsonb keeps and serde_json cannot read (a number beyond a
/// double's range, nesting deeper than 128), written through the SQL
/// enqueue: that job fails at once with `UNREADABLE_PAYLOAD`, and the jobs
/// claimed beside it run. The whole claim used to fail, leaving every job
/// it took RUNNING until its lease lapsed, and again at every claim.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_payload_no_worker_can_read_fails_alone(pool: PgPool) {
    let mut ids = Vec::new();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    for payload in [
        r#"{"ok": 1}"#,
        r#"{"n": 1e400}"#,
        deep.as_str(),
        r#"{"ok": 2}"#,
    ] {
        let id: Uuid = sqlx::query_scalar(
            "SELECT job_id FROM jobwire_enqueue('noop', payload => $1::jsonb, queue => 'work')",
        )
        .bind(payload)
        .fetch_one(&pool)
        .await
        .unwrap();
        ids.push(id);
    }
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 4));
    for (id, expected) in ids.iter().zip([
        JobState::Succeeded,
        JobState::Failed,
        JobState::Failed,
        JobState::Succeeded,
    ]) {
        let status = wait_for_job(&pool, *id, WAIT, |status| status.state.is_terminal())
            .await
            .unwrap();
        assert_eq!(status.state, expected, "{status:?}");
        if expected == JobState::Failed {
            assert_eq!(
                status.last_error_code.as_deref(),
                Some("UNREADABLE_PAYLOAD")
            );
            assert_eq!(status.attempt_count, 1, "failed at once, not retried");
            // Shown as its text, which a reader can always decode.
            assert!(status.payload.is_string(), "{:?}", status.payload);
        }
    }
    let report = worker.stop().await;
    assert_eq!(report.succeeded, 2);
    assert_eq!(report.failed, 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_panicking_handler_is_a_failed_attempt_not_a_crashed_worker(pool: PgPool) {
    let panicky = enqueue(
        &pool,
        NewJob::new("panic", json!({}))
            .with_queue("work")
            .with_max_attempts(2),
    )
    .await;
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 2));
    let status = wait_for_state(&pool, panicky, JobState::Failed, WAIT)
        .await
        .unwrap();
    assert_eq!(status.attempt_count, 2);
    assert_eq!(status.last_error_code.as_deref(), Some("PANIC"));
    assert!(status.last_error.unwrap().contains("panicked, as asked"));
    let after = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    wait_for_state(&pool, after, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    assert_eq!(worker.stop().await.panicked, 2);
}

/// What a handler returns is stored as the database can keep it: an error
/// text with a NUL (a binary response body, say), a code too long for the
/// dead-letter index, a retry centuries away. Any of these once made the
/// statement writing the outcome fail, and the completer retried it for
/// ever: that outcome, and every other one written with it, never landed.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn outcomes_the_database_cannot_keep_as_given_are_kept_cleaned(pool: PgPool) {
    let mut registry = builtin_registry();
    registry.register("binary_error", |_ctx: JobContext| async {
        Err(JobError::fatal(
            format!("HTTP_\0{}", "E".repeat(10_000)),
            format!("body: \0\u{1}{}", "x".repeat(100_000)),
        ))
    });
    registry.register("far_retry", |_ctx: JobContext| async {
        Err(JobError::retryable("LATER", "come back much later").with_retry_after(Duration::MAX))
    });
    let binary = enqueue(
        &pool,
        NewJob::new("binary_error", json!({})).with_queue("work"),
    )
    .await;
    let far = enqueue(
        &pool,
        NewJob::new("far_retry", json!({}))
            .with_queue("work")
            .with_max_attempts(2),
    )
    .await;
    let ok = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("work")).await;
    let mut config = test_worker_config("work", 4);
    // The three outcomes in one statement, as a busy worker writes them.
    config.runtime.completion_linger = Duration::from_millis(100);
    let worker = RunningWorker::start(&pool, registry, config);
    wait_for_state(&pool, ok, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    let status = wait_for_state(&pool, binary, JobState::Failed, WAIT)
        .await
        .unwrap();
    let code = status.last_error_code.unwrap();
    let message = status.last_error.unwrap();
    assert!(
        code.starts_with("HTTP_\u{FFFD}EEE") && code.ends_with('…'),
        "{code}"
    );
    assert!(
        code.len() <= jobwire_core::MAX_ERROR_CODE_BYTES,
        "{}",
        code.len()
    );
    assert!(message.starts_with("body: \u{FFFD}\u{1}xxx") && message.ends_with('…'));
    assert!(message.len() <= jobwire_core::MAX_ERROR_MESSAGE_BYTES);
    let status = wait_for_state(&pool, far, JobState::RetryWait, WAIT)
        .await
        .unwrap();
    let ahead = status.run_after - chrono::Utc::now();
    assert!(
        ahead > chrono::TimeDelta::days(364) && ahead <= chrono::TimeDelta::days(365),
        "retried {ahead} ahead, not at most a year"
    );
    worker.stop().await;
}

/// An outcome the database refuses whatever is done to it (here a trigger
/// of the test's own refuses one job's success) costs that job its
/// attempt, not the outcomes written with it: they are written one by one.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_outcome_the_database_refuses_does_not_hold_up_the_others(pool: PgPool) {
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_for_the_test() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused for the test' USING ERRCODE = 'check_violation'; END $$;
         CREATE TRIGGER refuse_for_the_test AFTER UPDATE ON jobs FOR EACH ROW
             WHEN (NEW.job_type = 'refused' AND NEW.state = 'SUCCEEDED')
             EXECUTE FUNCTION refuse_for_the_test();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let refused = enqueue(&pool, NewJob::new("refused", json!({})).with_queue("work")).await;
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| NewJob::new("noop", json!({ "i": i })).with_queue("work"))
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let mut registry = builtin_registry();
    registry.register("refused", |_ctx: JobContext| async { Ok(()) });
    let mut config = test_worker_config("work", 8);
    config.runtime.completion_linger = Duration::from_millis(100);
    let worker = RunningWorker::start(&pool, registry, config);
    wait_for_all_finished(&pool, &ids, WAIT).await.unwrap();
    // The refused job is left to its lease: the sweeper takes it back (and
    // it is claimed again at once, to be refused again).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let code: Option<String> =
            sqlx::query_scalar("SELECT last_error_code FROM jobs WHERE job_id = $1")
                .bind(refused)
                .fetch_one(&pool)
                .await
                .unwrap();
        if code.as_deref() == Some("LEASE_EXPIRED") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never swept: {code:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = worker.stop().await;
    // The refusal was counted (once for the refused outcome alone, once
    // more for each statement it shared with others).
    assert!(report.database_errors >= 1, "{report:?}");
    assert!(report.succeeded >= 5, "{report:?}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_malformed_payload_fails_fatally(pool: PgPool) {
    let job_id = enqueue(
        &pool,
        NewJob::new("sleep", json!({"ms": "soon"})).with_queue("work"),
    )
    .await;
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 2));
    let status = wait_for_state(&pool, job_id, JobState::Failed, WAIT)
        .await
        .unwrap();
    worker.stop().await;
    assert_eq!(status.attempt_count, 1);
    assert_eq!(status.last_error_code.as_deref(), Some("MALFORMED_PAYLOAD"));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn heartbeats_keep_a_job_longer_than_its_lease(pool: PgPool) {
    // 4 s of work under a 1.5 s lease, with a sweeper running every 200 ms.
    let job_id = enqueue(
        &pool,
        NewJob::new("sleep", json!({"ms": 4000})).with_queue("work"),
    )
    .await;
    let worker = RunningWorker::start(&pool, builtin_registry(), test_worker_config("work", 2));
    let status = wait_for_state(&pool, job_id, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!(status.attempt_count, 1, "the lease was never lost");
    assert_eq!(status.lease_generation.0, 1);
    assert!(report.heartbeat_batches >= 3, "{report:?}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_that_lost_its_lease_stops_and_its_outcome_is_fenced(pool: PgPool) {
    let (reason_tx, mut reasons) = mpsc::unbounded_channel();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let mut registry = HandlerRegistry::new();
    registry.register("stuck", move |ctx: JobContext| {
        let reason_tx = reason_tx.clone();
        let started_tx = started_tx.clone();
        async move {
            started_tx.send(()).unwrap();
            ctx.cancelled().await;
            reason_tx.send(ctx.cancel_reason()).unwrap();
            // Claims success anyway: the fence must keep it out.
            Ok(())
        }
    });
    let config = test_worker_config("work", 2);
    // No sweeper: the test sweeps the lease itself.
    let maintenance = MaintenanceConfig {
        sweeper: None,
        ..test_maintenance()
    };
    let job_id = enqueue(&pool, NewJob::new("stuck", json!({})).with_queue("work")).await;
    let worker = RunningWorker::start_with(&pool, registry, config, maintenance);
    started.recv().await.unwrap();

    // The job is swept and reclaimed by someone else behind the worker's back.
    // (One transaction, so that the worker itself cannot win the reclaim.)
    expire_lease(&pool, job_id).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    jobwire_core::sweep_expired_leases(&mut *tx, 10)
        .await
        .unwrap();
    let other =
        jobwire_core::claim_batch(&mut *tx, "work", "other-worker", 1, Duration::from_secs(60))
            .await
            .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(other.len(), 1);

    assert_eq!(reasons.recv().await, Some(Some(CancelReason::LeaseLost)));
    let report = worker.stop().await;
    assert_eq!(report.lease_lost, 1);
    assert_eq!(report.succeeded, 0);
    assert_eq!(report.fenced, 1, "the success it claimed was refused");
    let status = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(status.state, JobState::Running);
    assert_eq!(status.lease_owner.as_deref(), Some("other-worker"));
    jobwire_core::complete(&pool, "other-worker", other[0].lease)
        .await
        .unwrap();
}

/// A handler that holds every connection of the worker's pool keeps the
/// lease keeper's heartbeat waiting for one. The keeper must stop the
/// attempt before its lease can lapse all the same (it waited for the
/// heartbeat first, up to the pool's acquire timeout: here two minutes),
/// and what the handler then returns is reported: the lease still held in
/// the table, so its success is recorded (it was dropped, and the job sat
/// RUNNING until its lease lapsed, to run again).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_handler_starving_the_heartbeat_is_stopped_in_time_and_its_success_kept(pool: PgPool) {
    let worker_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(120))
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap();
    let (reason_tx, mut reasons) = mpsc::unbounded_channel();
    let mut registry = HandlerRegistry::new();
    registry.register("hog", move |ctx: JobContext| {
        let reason_tx = reason_tx.clone();
        async move {
            // Every connection the pool will give, held until cancelled.
            let mut held = Vec::new();
            while let Ok(Ok(conn)) =
                tokio::time::timeout(Duration::from_millis(300), ctx.pool().acquire()).await
            {
                held.push(conn);
            }
            ctx.cancelled().await;
            reason_tx.send(ctx.cancel_reason()).unwrap();
            drop(held);
            Ok(())
        }
    });
    // No sweeper: the test is about the worker's own keeper.
    let maintenance = MaintenanceConfig {
        sweeper: None,
        reconciler: None,
        ..test_maintenance()
    };
    let job_id = enqueue(&pool, NewJob::new("hog", json!({})).with_queue("work")).await;
    let worker = RunningWorker::start_with(
        &worker_pool,
        registry,
        test_worker_config("work", 1),
        maintenance,
    );
    // A generous ceiling, far below the two minutes the heartbeat waits.
    let reason = tokio::time::timeout(WAIT, reasons.recv())
        .await
        .expect("the attempt was not stopped while its heartbeat waited for a connection");
    assert_eq!(reason, Some(Some(CancelReason::LeaseLost)));
    let status = wait_for_state(&pool, job_id, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!((status.attempt_count, status.lease_generation.0), (1, 1));
    assert_eq!((report.lease_lost, report.succeeded), (1, 1));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_attempt_past_its_timeout_is_cancelled_and_retried(pool: PgPool) {
    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(
        &mut registry,
        HandlerOptions {
            timeout: Duration::from_millis(200),
            ..fast_options()
        },
    );
    let job_id = enqueue(
        &pool,
        NewJob::new("sleep", json!({"ms": 60_000}))
            .with_queue("work")
            .with_max_attempts(2),
    )
    .await;
    let worker = RunningWorker::start(&pool, registry, test_worker_config("work", 2));
    let status = wait_for_state(&pool, job_id, JobState::Failed, WAIT)
        .await
        .unwrap();
    let report = worker.stop().await;
    assert_eq!(status.last_error_code.as_deref(), Some("TIMEOUT"));
    assert_eq!(status.attempt_count, 2);
    assert_eq!(report.timed_out, 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn shutdown_drains_short_jobs_and_releases_long_ones(pool: PgPool) {
    let started = Arc::new(AtomicUsize::new(0));
    let mut registry = builtin_registry();
    let counter = started.clone();
    registry.register("counted_sleep", move |ctx: JobContext| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let ms = ctx.payload()["ms"].as_u64().unwrap();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(()),
                _ = ctx.cancelled() => Err(JobError::cancelled()),
            }
        }
    });
    let short = enqueue(
        &pool,
        NewJob::new("counted_sleep", json!({"ms": 300})).with_queue("work"),
    )
    .await;
    let long = enqueue(
        &pool,
        NewJob::new("counted_sleep", json!({"ms": 60_000})).with_queue("work"),
    )
    .await;
    let mut config = test_worker_config("work", 4);
    config.shutdown_timeout = Duration::from_millis(1000);
    let worker = RunningWorker::start(&pool, registry, config);
    wait_for_state(&pool, long, JobState::Running, WAIT)
        .await
        .unwrap();
    wait_for_state(&pool, short, JobState::Running, WAIT)
        .await
        .unwrap();
    assert_eq!(started.load(Ordering::SeqCst), 2);
    let report = worker.stop().await;

    let short = jobwire_core::job_status(&pool, short).await.unwrap();
    let long = jobwire_core::job_status(&pool, long).await.unwrap();
    assert_eq!(short.state, JobState::Succeeded, "drained");
    assert_eq!(
        long.state,
        JobState::RetryWait,
        "released, not left to lapse"
    );
    assert_eq!(long.last_error_code.as_deref(), Some("WORKER_SHUTDOWN"));
    assert!(long.lease_owner.is_none());
    assert!(
        long.run_after <= chrono::Utc::now(),
        "claimable again at once"
    );
    assert_eq!((report.succeeded, report.retried), (1, 1));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_bulk_backlog_does_not_take_the_urgent_queues_slots(pool: PgPool) {
    let bulk: Vec<NewJob> = (0..20)
        .map(|_| NewJob::new("sleep", json!({"ms": 60_000})).with_queue("bulk"))
        .collect();
    jobwire_core::enqueue_many(&pool, &bulk).await.unwrap();
    let mut config = test_worker_config("bulk", 2);
    config.queues.push(QueueConfig::new("urgent", 2));
    config.shutdown_timeout = Duration::from_millis(100);
    let worker = RunningWorker::start(&pool, builtin_registry(), config);
    let running_bulk = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM jobs WHERE queue = 'bulk' AND state = 'RUNNING'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // The bulk queue fills its slots first (otherwise the urgent job could
    // finish before the bulk claim and prove nothing).
    let deadline = tokio::time::Instant::now() + WAIT;
    while running_bulk().await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "bulk never filled its slots"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let urgent = enqueue(&pool, NewJob::new("noop", json!({})).with_queue("urgent")).await;
    wait_for_state(&pool, urgent, JobState::Succeeded, WAIT)
        .await
        .unwrap();
    assert_eq!(
        running_bulk().await,
        2,
        "bulk stays within its own two slots"
    );
    worker.stop().await;
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn invalid_worker_settings_are_refused(pool: PgPool) {
    let mut config = test_worker_config("work", 0);
    let err = Worker::new(pool.clone(), builtin_registry(), config.clone())
        .run(CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("concurrency"), "{err}");
    config.queues = vec![QueueConfig::new("work", 1)];
    config.runtime.completion_linger = Duration::from_secs(1);
    let err = Worker::new(pool.clone(), builtin_registry(), config.clone())
        .run(CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("completion_linger"), "{err}");
    config.runtime.completion_linger = Duration::from_millis(1);
    config.runtime.lease = Duration::from_millis(10);
    let err = Worker::new(pool, builtin_registry(), config)
        .run(CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lease"), "{err}");
}

/// A claim loop that dies (here: a row its claim cannot decode, as a job
/// due at `-infinity` was before migration 20261206000006 refused it)
/// stops the worker with an error naming why, instead of leaving a process
/// that looks ready and never claims on that queue again.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_whose_claim_loop_dies_stops_with_the_reason(pool: PgPool) {
    sqlx::raw_sql(
        "ALTER TABLE jobs DROP CONSTRAINT jobs_run_after_from_the_year_1;
         INSERT INTO jobs (job_id, queue, job_type, run_after)
         VALUES (jobwire_uuidv7(), 'work', 'noop', '-infinity');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let run = Worker::new(
        pool.clone(),
        builtin_registry(),
        test_worker_config("work", 2),
    )
    .run(CancellationToken::new());
    // No shutdown is ever asked for: only the loop's end stops it.
    let err = tokio::time::timeout(WAIT, run)
        .await
        .expect("the worker stops by itself")
        .unwrap_err();
    let said = err.to_string();
    assert!(
        said.starts_with("a claim loop of the worker ended: panicked: ")
            && said.ends_with("; the worker stopped"),
        "{said}"
    );
}

/// A lease keeper that dies (here: a renewed lease whose expiry no client
/// can decode) stops the worker with the reason. Its running job is
/// cancelled and given back at once, due again: left running, it would
/// outlive a lease nothing renews, and another worker could run it too.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_worker_whose_lease_keeper_dies_gives_its_jobs_back_and_stops(pool: PgPool) {
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (reasons_tx, mut reasons) = mpsc::unbounded_channel();
    let mut registry = HandlerRegistry::new();
    registry.register("held", move |ctx: JobContext| {
        let (started, reasons) = (started_tx.clone(), reasons_tx.clone());
        async move {
            started.send(ctx.job_id()).unwrap();
            ctx.cancelled().await;
            reasons.send(ctx.cancel_reason()).unwrap();
            Err(JobError::cancelled())
        }
    });
    let job_id = enqueue(&pool, NewJob::new("held", json!({})).with_queue("work")).await;
    let run = tokio::spawn(
        Worker::new(pool.clone(), registry, test_worker_config("work", 2))
            .run(CancellationToken::new()),
    );
    let running = tokio::time::timeout(WAIT, started.recv()).await.unwrap();
    assert_eq!(running, Some(job_id));
    sqlx::raw_sql(
        "CREATE FUNCTION renewed_past_any_clock() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF OLD.state = 'RUNNING' AND NEW.state = 'RUNNING'
                AND NEW.lease_generation = OLD.lease_generation THEN
                 NEW.lease_expires_at := 'infinity';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER renewed_past_any_clock BEFORE UPDATE ON jobs
             FOR EACH ROW EXECUTE FUNCTION renewed_past_any_clock();",
    )
    .execute(&pool)
    .await
    .unwrap();
    // No shutdown is ever asked for: only the keeper's end stops it.
    let err = tokio::time::timeout(WAIT, run)
        .await
        .expect("the worker stops by itself")
        .unwrap()
        .unwrap_err();
    let said = err.to_string();
    assert!(
        said.starts_with("a background loop of the worker ended: the lease keeper panicked: ")
            && said.ends_with("; the worker stopped"),
        "{said}"
    );
    assert_eq!(reasons.recv().await, Some(Some(CancelReason::Shutdown)));
    let job = jobwire_core::job_status(&pool, job_id).await.unwrap();
    assert_eq!(
        job.state,
        JobState::RetryWait,
        "given back, not left to lapse"
    );
    assert_eq!(job.last_error_code.as_deref(), Some("WORKER_SHUTDOWN"));
    assert!(job.lease_owner.is_none());
    assert!(job.run_after <= chrono::Utc::now(), "due again at once");
}

/// The queue of the local-queue test, named only there: its metrics are
/// read from the recorder every test of this binary shares.
const AHEAD_QUEUE: &str = "claimed_ahead";

/// The value of `name{queue="<queue>"}` in a Prometheus text rendering
/// (0 when absent: a series not yet recorded).
fn sample(text: &str, name: &str, queue: &str) -> f64 {
    let series = format!("{name}{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// The local queue: with a backlog of short jobs the worker claims beyond
/// its slots, yet never runs more handlers than its slots, and counts an
/// attempt only for a job a handler started. A cancel requested for a job
/// still waiting cancels it unstarted; jobs that wait too long for a slot
/// go back unstarted, due at once. The worker's metrics show the jobs
/// waiting for a slot and count those given back.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn claimed_ahead_jobs_count_an_attempt_only_when_a_handler_starts_them(pool: PgPool) {
    const SLOTS: usize = 4;
    let starts: Arc<std::sync::Mutex<std::collections::HashMap<Uuid, i32>>> = Arc::default();
    let running = Arc::new(AtomicUsize::new(0));
    let most_running = Arc::new(AtomicUsize::new(0));
    let mut registry = HandlerRegistry::new();
    {
        let (starts, running, most_running) =
            (starts.clone(), running.clone(), most_running.clone());
        registry.register("quick_or_held", move |ctx: JobContext| {
            *starts.lock().unwrap().entry(ctx.job_id()).or_default() += 1;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most_running.fetch_max(now, Ordering::SeqCst);
            let running = running.clone();
            async move {
                let result = if ctx.payload()["held"] == json!(true) {
                    ctx.cancelled().await;
                    Err(JobError::cancelled())
                } else {
                    Ok(())
                };
                running.fetch_sub(1, Ordering::SeqCst);
                result
            }
        });
    }
    // Quick jobs first (lower priority runs first), then jobs that hold
    // their slot until cancelled: claimed ahead while the quick ones pass,
    // they fill the slots and wait behind them.
    let mut jobs: Vec<NewJob> = (0..3000)
        .map(|i| NewJob::new("quick_or_held", json!({ "i": i })).with_queue(AHEAD_QUEUE))
        .collect();
    jobs.extend((0..400).map(|i| {
        NewJob::new("quick_or_held", json!({ "i": i, "held": true }))
            .with_queue(AHEAD_QUEUE)
            .with_priority(1)
    }));
    jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let mut config = test_worker_config(AHEAD_QUEUE, SLOTS);
    config.shutdown_timeout = Duration::from_millis(300);
    // A lease no late heartbeat loses on a busy machine: a waiting job
    // swept meanwhile would be charged an attempt by the sweeper.
    config.runtime.lease = Duration::from_secs(10);
    // The process's recorder (shared by the tests of this binary, hence a
    // queue name no other test uses).
    let metrics = jobwire_server::metrics::Metrics::install().unwrap();
    let worker = RunningWorker::start(&pool, registry, config);

    let started_held = || async {
        let started: Vec<Uuid> = starts.lock().unwrap().keys().copied().collect();
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM jobs WHERE job_id = ANY($1) AND priority = 1",
        )
        .bind(started)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while started_held().await < SLOTS as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held jobs never took the slots"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every slot is held now; the jobs claimed beyond them wait unstarted.
    // The gauge is read before the table: the worker may still be filling
    // its local queue, so a later reading of either can only be larger, and
    // the table read last holds at least every job the gauge counted.
    let shown = sample(&metrics.render(), "jobwire_jobs_claimed_ahead", AHEAD_QUEUE);
    let started: Vec<Uuid> = starts.lock().unwrap().keys().copied().collect();
    let waiting: Vec<Uuid> = sqlx::query_scalar(
        "SELECT job_id FROM jobs WHERE state = 'RUNNING' AND NOT job_id = ANY($1) ORDER BY job_id",
    )
    .bind(&started)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        !waiting.is_empty(),
        "nothing was claimed ahead of the slots"
    );
    assert!(
        (1.0..=waiting.len() as f64).contains(&shown),
        "{shown} jobs shown waiting for a slot, {} in the table",
        waiting.len()
    );

    let cancelled = waiting[0];
    jobwire_core::request_cancel(&pool, cancelled, "test")
        .await
        .unwrap();
    // Seen at the next heartbeat (lease / 3 = 500 ms here).
    let status = wait_for_state(&pool, cancelled, JobState::Cancelled, WAIT)
        .await
        .unwrap();
    assert_eq!(status.attempt_count, 0, "cancelled before any start");
    // The slots stay held, so the jobs waiting for them are given back
    // after their longest wait (one second), without a start.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let running: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'RUNNING'")
            .fetch_one(&pool)
            .await
            .unwrap();
        if running == SLOTS as i64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{running} jobs still RUNNING"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = worker.stop().await;

    assert!(most_running.load(Ordering::SeqCst) <= SLOTS);
    let starts = starts.lock().unwrap().clone();
    // Id, state, attempts, last error code, lease owner, due.
    type Row = (Uuid, String, i32, Option<String>, Option<String>, bool);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT job_id, state, attempt_count, last_error_code, lease_owner,
                run_after <= now() FROM jobs",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3400);
    let mut returned = 0;
    for (job_id, state, attempts, error_code, owner, due) in rows {
        let started = starts.get(&job_id).copied().unwrap_or(0);
        assert_eq!(
            attempts, started,
            "job {job_id} ({state}): attempts against handler starts"
        );
        assert!(owner.is_none(), "job {job_id} still leased");
        if started == 0 && state == "RETRY_WAIT" {
            // Given back from the local queue: due at once, no error.
            assert!(due && error_code.is_none(), "job {job_id}");
            returned += 1;
        }
    }
    assert!(returned > 0, "no claimed-ahead job was given back");
    // A job given back is due at once, so it can be claimed (and given
    // back, or run) again: the table's count of jobs is a floor. Every
    // claim raised the generation; one that no handler started has its
    // attempt uncounted. So generations less attempts count the claims
    // that never started: each given back, but the one cancelled.
    let unstarted_claims: i64 =
        sqlx::query_scalar("SELECT sum(lease_generation - attempt_count)::bigint FROM jobs")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(report.returned >= returned);
    assert_eq!(report.returned as i64, unstarted_claims - 1);
    assert_eq!(report.cancelled, 1);
    let text = metrics.render();
    assert_eq!(
        sample(&text, "jobwire_jobs_returned_total", AHEAD_QUEUE),
        report.returned as f64
    );
    assert_eq!(
        sample(&text, "jobwire_jobs_claimed_ahead", AHEAD_QUEUE),
        0.0,
        "none waits once the worker stopped"
    );
}
