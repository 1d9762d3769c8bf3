//! The fault suite at its small size: `jobwire faults` on every path, with
//! kills, restarts of every broker and of PostgreSQL, a pause and garbage,
//! and every check on the jobs table passing.
//!
//! Then the checks are shown to catch what they look for: the kept
//! database is broken in one way per check and checked again.
//!
//! It restarts the shared services, so it is the only test in this binary:
//! `cargo test` runs test binaries one after another, never beside each
//! other, so no other test sees the restarts.

mod fault_run;

use std::process::Command;

use fault_run::{JOBWIRE, RESTARTS, run_faults, server_url};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

const JOBS_PER_PATH: u64 = 200;

#[tokio::test]
async fn every_check_holds_through_kills_restarts_pauses_and_garbage() {
    let server = server_url();
    let run = run_faults(&[
        "--jobs-per-path",
        &JOBS_PER_PATH.to_string(),
        "--fault-seconds",
        "30",
        "--kill-every-ms",
        "1500",
        "--drain-timeout-s",
        "120",
        "--keep-database",
    ]);
    let (report, shown, output) = (&run.report, &run.shown, &run.output);
    let stderr = run.stderr();

    // The faults happened: a run that killed and restarted nothing would
    // pass every check and prove nothing.
    let paths = report["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 4, "{shown}");
    assert_eq!(report["load"]["enqueued"], JOBS_PER_PATH * 4, "{shown}");
    assert_eq!(
        report["load"]["duplicates_refused"],
        JOBS_PER_PATH * 4 / 20,
        "one job in twenty is enqueued twice: {shown}"
    );
    assert!(report["kills"]["workers"].as_u64().unwrap() >= 8, "{shown}");
    assert!(report["kills"]["relays"].as_u64().unwrap() >= 3, "{shown}");
    let faults: Vec<&str> = report["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|fault| fault["what"].as_str().unwrap())
        .collect();
    for expected in RESTARTS {
        assert!(faults.contains(&expected), "{expected} missing: {shown}");
    }
    assert!(
        faults.iter().any(|what| what.starts_with("pause")),
        "{shown}"
    );
    assert!(
        report["load"]["failed_enqueue_attempts"].as_u64().unwrap() > 0,
        "PostgreSQL restarts while jobs are enqueued: {shown}"
    );
    assert!(
        report["garbage_messages"].as_u64().unwrap() >= 15,
        "{shown}"
    );
    assert!(
        report["leases_expired"].as_u64().unwrap() > 0,
        "kills of busy workers leave leases for the sweeper: {shown}"
    );

    for check in report["checks"].as_array().unwrap() {
        assert_eq!(
            check["violations"], 0,
            "check {:?} failed: {shown}\nstderr: {stderr}",
            check["name"]
        );
    }
    assert!(output.status.success(), "{shown}\nstderr: {stderr}");

    // Every check can fail: break the kept database once per check, the
    // way each check's failure would look, and check it again.
    let database = report["database"].as_str().unwrap().to_owned();
    let base = server.rsplit_once('/').unwrap().0;
    let mut db = PgConnection::connect(&format!("{base}/{database}"))
        .await
        .unwrap();
    sqlx::raw_sql(BREAK_EVERY_CHECK)
        .execute(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();
    let recheck = Command::new(JOBWIRE)
        .args([
            "faults",
            "--jobs-per-path",
            &JOBS_PER_PATH.to_string(),
            "--recheck",
            &database,
            "--json",
        ])
        .env("DATABASE_URL", &server)
        .output()
        .expect("jobwire faults --recheck runs");
    let rechecked: Value = serde_json::from_slice(&recheck.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON from --recheck ({err}): {}",
            String::from_utf8_lossy(&recheck.stderr)
        )
    });
    let mut admin = PgConnection::connect(&server).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .unwrap();

    let rechecked = rechecked.as_array().unwrap();
    assert_eq!(rechecked.len(), 15, "{rechecked:?}");
    for check in rechecked {
        assert!(
            check["violations"].as_i64().unwrap() >= 1,
            "check {:?} missed what breaks it: {rechecked:?}",
            check["name"]
        );
    }
    assert!(
        !recheck.status.success(),
        "a failed check fails the command"
    );
}

/// One break per SQL check, in the order `jobwire faults` lists them. The
/// constraints and triggers that would refuse some of these are removed
/// first: the checks must hold even where the schema's own guards did not.
const BREAK_EVERY_CHECK: &str = r#"
ALTER TABLE jobs DISABLE TRIGGER USER;
ALTER TABLE jobs DROP CONSTRAINT jobs_lease_iff_held;
DROP INDEX jobs_dedup_key_idx;
-- every enqueued job is present
DELETE FROM jobs WHERE dedup_key = 'postgres-7';
-- no job that was not enqueued; every job terminal
INSERT INTO jobs (job_id, job_type, dedup_key) VALUES (gen_random_uuid(), 'record_run', 'stranger');
-- ended as planned; FAILED rows carry an error code
UPDATE jobs SET state = 'FAILED', last_error_code = NULL WHERE dedup_key = 'postgres-8';
-- no lease outside RUNNING / CANCEL_REQUESTED
UPDATE jobs SET lease_owner = 'ghost' WHERE dedup_key = 'postgres-9';
-- attempt_count <= max_attempts
UPDATE jobs SET attempt_count = max_attempts + 1 WHERE dedup_key = 'postgres-10';
-- no job completed twice
INSERT INTO fault_transitions (job_id, queue, from_state, to_state, lease_generation)
SELECT job_id, queue, 'RUNNING', 'SUCCEEDED', lease_generation FROM jobs WHERE dedup_key = 'postgres-11';
-- one row per dedup key
INSERT INTO jobs (job_id, queue, job_type, dedup_key, state, finished_at, attempt_count, lease_generation)
SELECT gen_random_uuid(), queue, job_type, dedup_key, state, finished_at, attempt_count, lease_generation
FROM jobs WHERE dedup_key = 'postgres-12';
-- outbox drained
INSERT INTO job_outbox (topic, payload) VALUES ('jobwire-faults_rabbitmq', '{}');
-- nothing moved to job_outbox_dead
INSERT INTO job_outbox_dead (id, topic, payload, headers, available_at, attempts, created_at)
VALUES (1, 'jobwire-faults_rabbitmq', '{}', '{}', now(), 10, now());
-- no side effect twice under one lease
INSERT INTO handler_runs (job_id, lease_generation, attempt, worker_id)
SELECT job_id, lease_generation, attempt_count, 'ghost' FROM jobs WHERE dedup_key = 'postgres-13';
-- every re-run explained: a run under generation 0, which no claim ever held
INSERT INTO handler_runs (job_id, lease_generation, attempt, worker_id)
SELECT job_id, 0, 1, 'ghost' FROM jobs WHERE dedup_key = 'postgres-14';
-- every success ran its handler under the final lease
DELETE FROM handler_runs WHERE job_id = (SELECT job_id FROM jobs WHERE dedup_key = 'postgres-15');
-- a paused queue claimed nothing
INSERT INTO fault_transitions (job_id, queue, from_state, to_state, lease_generation, at)
SELECT j.job_id, j.queue, 'QUEUED', 'RUNNING', j.lease_generation, p.from_at + (p.to_at - p.from_at) / 2
FROM jobs j JOIN fault_pauses p ON p.queue = j.queue WHERE j.dedup_key = 'postgres-16';
"#;
