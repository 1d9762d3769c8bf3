//! The schema enforces the state machine and the lease invariant by itself:
//! raw SQL that breaks them is rejected, whatever code path issued it.

use std::time::Duration;

use jobwire_core::{JobState, NewJob};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

async fn queued_job(pool: &PgPool) -> Uuid {
    jobwire_core::enqueue(pool, &NewJob::new("noop", json!({})))
        .await
        .unwrap()
        .job_id
}

async fn running_job(pool: &PgPool) -> Uuid {
    let job_id = jobwire_core::enqueue(pool, &NewJob::new("noop", json!({})).with_queue("running"))
        .await
        .unwrap()
        .job_id;
    let claimed = jobwire_core::claim_batch(pool, "running", "w1", 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed[0].lease.job_id, job_id);
    job_id
}

/// Run `sql` with the job id bound as $1 and return the constraint it broke.
async fn violated_constraint(pool: &PgPool, sql: &'static str, job_id: Uuid) -> String {
    let err = sqlx::query(sql)
        .bind(job_id)
        .execute(pool)
        .await
        .expect_err("the schema must reject this change");
    let db = err.as_database_error().expect("a database error");
    assert_eq!(db.code().as_deref(), Some("23514"), "{db}");
    db.constraint().unwrap_or_default().to_owned()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn illegal_transitions_are_rejected_by_the_trigger(pool: PgPool) {
    let queued = queued_job(&pool).await;
    // QUEUED cannot jump to SUCCEEDED or FAILED without running.
    for sql in [
        "UPDATE jobs SET state = 'SUCCEEDED', finished_at = now() WHERE job_id = $1",
        "UPDATE jobs SET state = 'FAILED', finished_at = now() WHERE job_id = $1",
        "UPDATE jobs SET state = 'RETRY_WAIT' WHERE job_id = $1",
    ] {
        assert_eq!(
            violated_constraint(&pool, sql, queued).await,
            "jobs_legal_transition"
        );
    }

    // Terminal states stay terminal (FAILED -> QUEUED is the audited replay only).
    let running = running_job(&pool).await;
    jobwire_core::complete(
        &pool,
        "w1",
        jobwire_core::Lease {
            job_id: running,
            generation: jobwire_core::LeaseGeneration(1),
        },
    )
    .await
    .unwrap();
    for sql in [
        "UPDATE jobs SET state = 'QUEUED', finished_at = NULL WHERE job_id = $1",
        "UPDATE jobs SET state = 'CANCELLED' WHERE job_id = $1",
    ] {
        assert_eq!(
            violated_constraint(&pool, sql, running).await,
            "jobs_legal_transition"
        );
    }
    let status = jobwire_core::job_status(&pool, running).await.unwrap();
    assert_eq!(status.state, JobState::Succeeded);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_lease_exists_exactly_while_held(pool: PgPool) {
    let queued = queued_job(&pool).await;
    // RUNNING without a lease.
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET state = 'RUNNING', attempt_count = 1, lease_generation = 1 WHERE job_id = $1",
            queued
        )
        .await,
        "jobs_lease_iff_held"
    );
    // A lease on a job nobody holds.
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET lease_owner = 'w9', lease_expires_at = now() + interval '1 minute' WHERE job_id = $1",
            queued
        )
        .await,
        "jobs_lease_iff_held"
    );
    // Leaving RUNNING without dropping the lease.
    let running = running_job(&pool).await;
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET state = 'RETRY_WAIT' WHERE job_id = $1",
            running
        )
        .await,
        "jobs_lease_iff_held"
    );
    // Half a lease.
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET lease_expires_at = NULL WHERE job_id = $1",
            running
        )
        .await,
        "jobs_lease_iff_held"
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn unknown_states_and_bad_rows_are_rejected(pool: PgPool) {
    // An unknown state: the CHECK refuses the update and the insert (it holds
    // as the row is written; the transition trigger runs after the write).
    let queued = queued_job(&pool).await;
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET state = 'DONE' WHERE job_id = $1",
            queued
        )
        .await,
        "jobs_state_valid"
    );
    assert_eq!(
        violated_constraint(
            &pool,
            "INSERT INTO jobs (job_id, job_type, state) VALUES ($1, 'noop', 'DONE')",
            Uuid::now_v7()
        )
        .await,
        "jobs_state_valid"
    );
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET max_attempts = 0 WHERE job_id = $1",
            queued
        )
        .await,
        "jobs_max_attempts_check"
    );
    assert_eq!(
        violated_constraint(
            &pool,
            "UPDATE jobs SET finished_at = now() WHERE job_id = $1",
            queued
        )
        .await,
        "jobs_finished_iff_terminal"
    );
    // An empty job type cannot even be inserted by hand.
    let err = sqlx::query("INSERT INTO jobs (job_id, job_type) VALUES ($1, '')")
        .bind(Uuid::now_v7())
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().constraint(),
        Some("jobs_job_type_check")
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn dedup_keys_are_unique_per_job_type(pool: PgPool) {
    let insert = "INSERT INTO jobs (job_id, job_type, dedup_key) VALUES ($1, $2, 'k1')";
    sqlx::query(insert)
        .bind(Uuid::now_v7())
        .bind("a")
        .execute(&pool)
        .await
        .unwrap();
    // Same key, other type: allowed.
    sqlx::query(insert)
        .bind(Uuid::now_v7())
        .bind("b")
        .execute(&pool)
        .await
        .unwrap();
    let err = sqlx::query(insert)
        .bind(Uuid::now_v7())
        .bind("a")
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        err.as_database_error().unwrap().code().as_deref(),
        Some("23505")
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_claim_index_holds_only_claimable_rows(pool: PgPool) {
    let predicate: String = sqlx::query_scalar(
        "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'jobs_claimable_idx'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        predicate.contains("QUEUED") && predicate.contains("RETRY_WAIT"),
        "{predicate}"
    );
    assert!(!predicate.contains("SUCCEEDED"), "{predicate}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_hot_tables_are_vacuumed_early(pool: PgPool) {
    let options = |table: &'static str| {
        let pool = pool.clone();
        async move {
            let options: Option<Vec<String>> =
                sqlx::query_scalar("SELECT reloptions FROM pg_class WHERE relname = $1")
                    .bind(table)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            options.unwrap_or_default()
        }
    };
    let jobs = options("jobs").await;
    for wanted in [
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_vacuum_threshold=1000",
        "autovacuum_vacuum_insert_threshold=1000",
        "autovacuum_vacuum_cost_delay=1",
    ] {
        assert!(
            jobs.iter().any(|option| option == wanted),
            "jobs: {wanted} not in {jobs:?}"
        );
    }
    let outbox = options("job_outbox").await;
    for wanted in [
        "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=1000",
    ] {
        assert!(
            outbox.iter().any(|option| option == wanted),
            "job_outbox: {wanted} not in {outbox:?}"
        );
    }
    assert!(
        options("jobs_history").await.is_empty(),
        "jobs_history keeps the defaults"
    );
}

/// Run every migration before `version`, enqueue a job due at
/// `run_after` through the SQL function as it was then, then run `version`
/// itself: a state the migration must cope with.
async fn migrate_over_a_job_due_at(pool: &PgPool, version: i64, run_after: &str) {
    for migration in jobwire_core::MIGRATOR.iter() {
        if migration.version == version {
            sqlx::query("SELECT jobwire_enqueue('odd', run_after => $1::timestamptz)")
                .bind(run_after)
                .execute(pool)
                .await
                .unwrap();
        }
        if migration.version <= version {
            sqlx::raw_sql(migration.sql.clone())
                .execute(pool)
                .await
                .unwrap();
        }
    }
}

/// Migration 20261206000008 moves a job past a bound that reached the
/// history (archived before the checks held): job lists read the history
/// too, and it has no check of its own.
#[sqlx::test(migrations = false)]
async fn the_validation_moves_archived_jobs_due_outside_the_bounds(pool: PgPool) {
    const VALIDATED: i64 = 20261206000008;
    for migration in jobwire_core::MIGRATOR.iter() {
        if migration.version == VALIDATED {
            sqlx::raw_sql(
                "INSERT INTO jobs_history (job_id, job_type, state, finished_at, run_after)
                 VALUES (jobwire_uuidv7(), 'early', 'CANCELLED', now(), '-infinity'),
                        (jobwire_uuidv7(), 'late', 'CANCELLED', now(), 'infinity')",
            )
            .execute(&pool)
            .await
            .unwrap();
        }
        if migration.version <= VALIDATED {
            sqlx::raw_sql(migration.sql.clone())
                .execute(&pool)
                .await
                .unwrap();
        }
    }
    let stored: Vec<(String, String)> = sqlx::query_as(
        "SELECT job_type, to_char(run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
         FROM jobs_history ORDER BY job_type",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        vec![
            ("early".to_owned(), "0001-01-01 00:00:00".to_owned()),
            ("late".to_owned(), "9999-12-31 23:59:59".to_owned()),
        ]
    );
}

/// A due time check goes onto a table that may already hold a job outside
/// it (enqueued before the check, through SQL with `run_after =>
/// 'infinity'` or `'-infinity'`): the migration moves the job to the bound
/// instead of failing, and the check holds from then on.
#[sqlx::test(migrations = false)]
async fn the_due_time_checks_migrate_over_jobs_due_outside_them(pool: PgPool) {
    for (version, run_after, moved_to, check) in [
        (
            20261206000005,
            "infinity",
            "9999-12-31 23:59:59",
            "jobs_run_after_before_10000",
        ),
        (
            20261206000006,
            "-infinity",
            "0001-01-01 00:00:00",
            "jobs_run_after_from_the_year_1",
        ),
    ] {
        sqlx::raw_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
            .execute(&pool)
            .await
            .unwrap();
        migrate_over_a_job_due_at(&pool, version, run_after).await;
        let (stored, finite): (String, bool) = sqlx::query_as(
            "SELECT to_char(run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
                        isfinite(run_after)
                 FROM jobs",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!(finite, "{version}");
        assert_eq!(stored, moved_to, "{version}");
        let refused = sqlx::query(
            "INSERT INTO jobs (job_id, job_type, run_after)
             VALUES (jobwire_uuidv7(), 'odd', $1::timestamptz)",
        )
        .bind(run_after)
        .execute(&pool)
        .await
        .expect_err("the check holds from now on");
        assert_eq!(
            refused.as_database_error().and_then(|db| db.constraint()),
            Some(check),
            "{version}"
        );
    }
}
