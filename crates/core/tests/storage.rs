//! Where a job's row versions land and what their writes log: the claim and
//! the completion write the job's new versions into the page that already
//! holds it, so the WAL carries only what changed (migration
//! `20261203000004_jobs_fillfactor.sql`), and no row is locked before it is
//! updated (migration `20261203000005_row_triggers_after_the_write.sql`).

use std::time::Duration;

use jobwire_core::{FinishOutcome, FinishResult, NewJob};
use serde_json::json;
use sqlx::PgPool;
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

    let outcomes: Vec<_> = claimed
        .iter()
        .map(|job| (job.lease, FinishOutcome::Succeeded))
        .collect();
    let finished = jobwire_core::finish_many(&pool, "w", &outcomes)
        .await
        .unwrap();
    assert!(
        finished
            .iter()
            .all(|result| matches!(result, FinishResult::Recorded { .. }))
    );
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
