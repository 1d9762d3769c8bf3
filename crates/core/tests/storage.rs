//! Where a job's row versions land and what their writes log: the claim and
//! the completion write the job's new versions into the page that already
//! holds it, so the WAL carries only what changed (migration
//! `20261203000004_jobs_fillfactor.sql`), no row is locked before it is
//! updated (migration `20261203000005_row_triggers_after_the_write.sql`),
//! a tenant slot changes holder without an index write (migration
//! `20261204000002_tenant_slot_holders_change_in_place.sql`), and the
//! checks of the payload and the traceparent, which never change, run
//! where they are written, not on every write of the job (migration
//! `20261204000003_unchanging_columns_checked_where_written.sql`).

use std::time::Duration;

use jobwire_core::{ClaimedJob, FinishOutcome, FinishResult, NewJob};
use serde_json::json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

/// The heap page each of `ids` is in now, in the order given.
async fn pages_of(pool: &PgPool, ids: &[Uuid]) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT (j.ctid::text::point)[0]::bigint
         FROM unnest($1::uuid[]) WITH ORDINALITY AS i(job_id, n)
         JOIN jobs j USING (job_id)
         ORDER BY i.n",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Complete every claimed job as succeeded in one `finish_many` (owner
/// `w`), and check that each completion was recorded.
async fn complete_all(conn: &mut PgConnection, claimed: &[ClaimedJob]) {
    let outcomes: Vec<_> = claimed
        .iter()
        .map(|job| (job.lease, FinishOutcome::Succeeded))
        .collect();
    let finished = jobwire_core::finish_many(&mut *conn, "w", &outcomes)
        .await
        .unwrap();
    assert!(
        finished
            .iter()
            .all(|result| matches!(result, FinishResult::Recorded { .. })),
        "{finished:?}"
    );
}

/// 400 jobs written in one statement fill pages as far as the table lets
/// them; the first five then go through a claim and a completion. With
/// every page filled at insert, the first page has no room and each of
/// these writes moves the job to another page (checked: this test fails on
/// the table without its fillfactor).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_claim_and_a_completion_keep_the_job_in_its_page(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..400)
        .map(|i| NewJob::new("work", json!({ "i": i, "filler": "x".repeat(100) })).with_queue("q"))
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let pages = pages_of(&pool, &ids).await;
    let first_page = pages[0];
    let on_first_page: Vec<Uuid> = ids
        .iter()
        .copied()
        .zip(pages)
        .filter(|(_, page)| *page == first_page)
        .map(|(id, _)| id)
        .take(5)
        .collect();
    assert_eq!(on_first_page.len(), 5, "the first page holds five jobs");

    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 5, LEASE)
        .await
        .unwrap();
    let mut claimed_ids: Vec<Uuid> = claimed.iter().map(|job| job.job_id()).collect();
    claimed_ids.sort();
    let mut expected = on_first_page.clone();
    expected.sort();
    assert_eq!(claimed_ids, expected, "the claim took the oldest jobs");
    assert_eq!(pages_of(&pool, &on_first_page).await, vec![first_page; 5]);

    complete_all(&mut pool.acquire().await.unwrap(), &claimed).await;
    assert_eq!(pages_of(&pool, &on_first_page).await, vec![first_page; 5]);
}

/// While `jobs` has any BEFORE UPDATE row trigger, PostgreSQL locks each row
/// before updating it, whatever the trigger's column list or WHEN clause: a
/// WAL record of its own for every completion and heartbeat. The checks run
/// after the write instead (checked: this fails before migration
/// `20261203000005`, naming both triggers).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn no_trigger_runs_before_a_jobs_row_is_updated(pool: PgPool) {
    // pg_trigger.tgtype bits: 1 a row trigger, 2 before, 16 on update.
    let update_row_triggers: Vec<(String, bool)> = sqlx::query_as(
        "SELECT tgname::text, tgtype & 2 = 2 FROM pg_trigger
         WHERE tgrelid = 'jobs'::regclass AND NOT tgisinternal
           AND tgtype & 1 = 1 AND tgtype & 16 = 16
         ORDER BY tgname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let (before, after): (Vec<_>, Vec<_>) = update_row_triggers
        .into_iter()
        .partition(|(_, before)| *before);
    assert_eq!(before, Vec::new());
    let after: Vec<String> = after.into_iter().map(|(name, _)| name).collect();
    assert!(
        after.contains(&"jobs_legal_transition".to_owned())
            && after.contains(&"jobs_release_tenant_slot".to_owned()),
        "both checks still run, after the write: {after:?}"
    );
}

/// A capped claim gives each job a slot row and the completion takes it
/// back: both are heap-only updates, which write no index entry, since no
/// index of `job_tenant_slots` holds the column they change. Counted by
/// PostgreSQL's own statistics for the running transaction (checked: on the
/// schema before the migration, none of the ten updates is heap-only).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_tenant_slot_changes_holder_without_an_index_write(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(5))
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("q")
                .with_tenant("acme")
        })
        .collect();
    jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();

    let mut tx = pool.begin().await.unwrap();
    let claimed = jobwire_core::claim_batch(&mut *tx, "q", "w", 5, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5, "the cap lets all five run");
    complete_all(&mut tx, &claimed).await;
    let (updated, heap_only, held): (i64, i64, i64) = sqlx::query_as(
        "SELECT pg_stat_get_xact_tuples_updated('job_tenant_slots'::regclass),
                pg_stat_get_xact_tuples_hot_updated('job_tenant_slots'::regclass),
                (SELECT count(*) FROM job_tenant_slots WHERE job_id IS NOT NULL)",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(held, 0, "the completion gave every slot back");
    assert_eq!(updated, 10, "five slots taken and five given back");
    assert_eq!(heap_only, updated, "every one of them a heap-only update");
}

/// The SQLSTATE and constraint of a statement that failed in the database.
fn database_verdict(err: sqlx::Error) -> (String, String) {
    let db = err.into_database_error().expect("a database error");
    (
        db.code().unwrap_or_default().into_owned(),
        db.constraint().unwrap_or_default().to_owned(),
    )
}

/// A payload over the schema's ceiling (1 MiB of its text) is refused by
/// the `jobs_payload_size` constraint even when a statement of one's own
/// writes the row, past every enqueue's configurable limit: SQLSTATE 23514,
/// and nothing written.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_payload_over_the_ceiling_is_refused_by_the_schema(pool: PgPool) {
    let err = sqlx::query(
        "INSERT INTO jobs (job_id, queue, job_type, payload)
         VALUES (gen_random_uuid(), 'q', 'work', jsonb_build_object('f', repeat('x', 1048576)))",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert_eq!(
        database_verdict(err),
        ("23514".to_owned(), "jobs_payload_size".to_owned())
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
}

/// A job's payload and traceparent never change after the enqueue, so a
/// claim and a completion do not check them again: here both columns'
/// constraints are made stricter than a queued job's values, the job is
/// claimed and completed all the same, and a new row with either value is
/// refused, naming its constraint. (Checked: with the two checks on the
/// table, the schema before the migration, the claim itself fails with
/// 23514: PostgreSQL evaluates every CHECK of a table on every update.)
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_claim_and_a_completion_do_not_check_unchanging_columns_again(pool: PgPool) {
    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let payload = json!({ "filler": "x".repeat(100) });
    let context = jobwire_core::TraceContext::parse(TRACEPARENT, None).unwrap();
    let job = NewJob::new("work", payload.clone())
        .with_queue("q")
        .with_trace_context(context);
    jobwire_test_support::enqueue_ids(&pool, &[job])
        .await
        .unwrap();
    for stricter in [
        "ALTER DOMAIN jobwire_payload DROP CONSTRAINT jobs_payload_size",
        "ALTER DOMAIN jobwire_payload ADD CONSTRAINT jobs_payload_size
             CHECK (octet_length(VALUE::text) <= 50) NOT VALID",
        "ALTER DOMAIN jobwire_traceparent DROP CONSTRAINT jobs_traceparent_format",
        "ALTER DOMAIN jobwire_traceparent ADD CONSTRAINT jobs_traceparent_format
             CHECK (octet_length(VALUE) < 10) NOT VALID",
    ] {
        sqlx::query(stricter).execute(&pool).await.unwrap();
    }

    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    complete_all(&mut pool.acquire().await.unwrap(), &claimed).await;

    let insert = "INSERT INTO jobs (job_id, queue, job_type, payload, traceparent)
                  VALUES (gen_random_uuid(), 'q', 'work', $1, $2)";
    let payload_refused = sqlx::query(insert)
        .bind(&payload)
        .bind(None::<&str>)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        database_verdict(payload_refused),
        ("23514".to_owned(), "jobs_payload_size".to_owned())
    );
    let traceparent_refused = sqlx::query(insert)
        .bind(json!({}))
        .bind(TRACEPARENT)
        .execute(&pool)
        .await
        .unwrap_err();
    assert_eq!(
        database_verdict(traceparent_refused),
        ("23514".to_owned(), "jobs_traceparent_format".to_owned())
    );
}
