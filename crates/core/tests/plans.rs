//! Plans that must not depend on fresh statistics: the wake-up claim looks
//! its jobs up by primary key even when the table was last analyzed while
//! empty and has since filled up (migration
//! `20261201000011_claim_by_id_uses_the_key.sql`).

use jobwire_core::{Dispatch, NewJob};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

/// Every index the plan of `statement` (bound with `ids`) scans.
async fn indexes_of(pool: &PgPool, statement: &str, ids: &[Uuid]) -> Vec<String> {
    let explain = format!("EXPLAIN (FORMAT JSON) {statement}");
    let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .bind(ids)
        .bind("w")
        .bind(60_000_i64)
        .bind(vec!["q".to_owned()])
        .fetch_one(pool)
        .await
        .unwrap();
    jobwire_test_support::plan_indexes(&plan)
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_wake_up_claim_uses_the_primary_key_with_stale_statistics(pool: PgPool) {
    jobwire_core::set_queue_dispatch(
        &pool,
        "q",
        &Dispatch::Broker {
            topic: "jobs.q".into(),
        },
    )
    .await
    .unwrap();
    // Statistics of an empty table, then a backlog the planner knows
    // nothing of (and no autovacuum to tell it meanwhile).
    sqlx::query("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE jobs").execute(&pool).await.unwrap();
    let jobs: Vec<NewJob> = (0..20_000)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("q")
                .with_tenant("A")
        })
        .collect();
    let ids = jobwire_test_support::enqueue_ids(&pool, &jobs)
        .await
        .unwrap();
    let named = &ids[10_000..10_020];
    let used = indexes_of(&pool, include_str!("../sql/claim_by_ids.sql"), named).await;
    assert!(used.iter().any(|index| index == "jobs_pkey"), "{used:?}");
    assert!(
        !used.iter().any(|index| index.contains("claimable")),
        "the claim scans a claimable index: {used:?}"
    );
    // And it claims them.
    let outcome = jobwire_core::claim_by_ids(
        &pool,
        named,
        &["q".to_owned()],
        "w",
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(outcome.claimed.len(), named.len());
}
