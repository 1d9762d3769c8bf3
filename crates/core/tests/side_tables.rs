//! The tables beside `jobs`: outbox dead letters listed and moved back
//! (audited), and every side table trimmed by age.

use std::time::Duration;

use jobwire_core::{OutboxReplayFilter, SideTable};
use sqlx::PgPool;

async fn dead_row(pool: &PgPool, id: i64, topic: &str, error: &str) {
    sqlx::query(
        "INSERT INTO job_outbox_dead (id, topic, message_key, payload, headers, available_at,
                                      attempts, last_error, created_at)
         VALUES ($1, $2, 'k', '{\"n\": 1}', '{\"x\": \"y\"}', now(), 10, $3, now())",
    )
    .bind(id)
    .bind(topic)
    .bind(error)
    .execute(pool)
    .await
    .unwrap();
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn outbox_dead_letters_are_grouped_and_moved_back_with_an_audit(pool: PgPool) {
    for id in 1..=3 {
        dead_row(&pool, id, "webhooks", "message too large").await;
    }
    dead_row(&pool, 4, "emails", "invalid destination").await;

    let groups = jobwire_core::outbox_dead_groups(&pool).await.unwrap();
    let summary: Vec<(&str, &str, i64)> = groups
        .iter()
        .map(|g| (g.topic.as_str(), g.last_error.as_str(), g.count))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("webhooks", "message too large", 3),
            ("emails", "invalid destination", 1)
        ]
    );

    // One group, in batches of 2: the caller repeats while a batch is full.
    let filter = OutboxReplayFilter {
        topic: Some("webhooks".into()),
        last_error: Some("message too large".into()),
        limit: 2,
        ..OutboxReplayFilter::default()
    };
    let first = jobwire_core::replay_outbox_dead(&pool, &filter, "ops", "limit raised")
        .await
        .unwrap();
    let second = jobwire_core::replay_outbox_dead(&pool, &filter, "ops", "limit raised")
        .await
        .unwrap();
    let mut moved: Vec<i64> = first.into_iter().chain(second).collect();
    moved.sort();
    assert_eq!(moved, vec![1, 2, 3]);

    // Back in the outbox with their ids, due now, with a fresh attempt budget.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM job_outbox WHERE id IN (1, 2, 3) AND attempts = 0 AND available_at <= now() AND topic = 'webhooks'"
        )
        .await,
        3
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM job_outbox_dead").await,
        1
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM job_outbox_audit WHERE action = 'replay' AND actor = 'ops' AND reason = 'limit raised' AND last_error = 'message too large'"
        )
        .await,
        3
    );

    // Bad input changes nothing.
    let err = jobwire_core::replay_outbox_dead(&pool, &OutboxReplayFilter::default(), " ", "x")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    // An empty error beginning would match every row: refused, not run.
    for blank in ["", "  "] {
        let everything = OutboxReplayFilter {
            last_error: Some(blank.into()),
            ..OutboxReplayFilter::default()
        };
        let err = jobwire_core::replay_outbox_dead(&pool, &everything, "ops", "x")
            .await
            .unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT");
        assert!(err.to_string().contains("last_error"), "{err}");
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM job_outbox_dead").await,
        1
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn side_tables_are_trimmed_by_age_in_batches(pool: PgPool) {
    // Two old and one recent row in every side table.
    sqlx::query(
        "INSERT INTO job_audit (job_id, action, actor, created_at)
         SELECT gen_random_uuid(), 'replay', 'ops', now() - make_interval(days => d)
         FROM unnest(ARRAY[100, 100, 0]) AS d",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_outbox_audit (outbox_id, topic, action, actor, created_at)
         SELECT 1, 't', 'replay', 'ops', now() - make_interval(days => d)
         FROM unnest(ARRAY[100, 100, 0]) AS d",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_effects (effect_key, job_id, created_at)
         SELECT 'effect-' || n, gen_random_uuid(), now() - make_interval(days => d)
         FROM unnest(ARRAY[100, 100, 0], ARRAY[1, 2, 3]) AS t(d, n)",
    )
    .execute(&pool)
    .await
    .unwrap();
    for (id, days) in [(1, 100), (2, 100), (3, 0)] {
        dead_row(&pool, id, "t", "e").await;
        sqlx::query("UPDATE job_outbox_dead SET failed_at = now() - make_interval(days => $2) WHERE id = $1")
            .bind(id)
            .bind(days)
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO jobs_history (job_id, job_type, payload, state, finished_at, archived_at)
         SELECT gen_random_uuid(), 'noop', '{}', 'SUCCEEDED', now(), now() - make_interval(days => d)
         FROM unnest(ARRAY[100, 100, 0]) AS d",
    )
    .execute(&pool)
    .await
    .unwrap();

    sqlx::query(
        "INSERT INTO job_enqueue_counts (queue, tenant, backend, window_start, count, previous)
         SELECT 'q', 't', b, now() - make_interval(days => d), 1, 0
         FROM unnest(ARRAY[100, 100, 0], ARRAY[1, 2, 3]) AS t(d, b)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let month = Duration::from_secs(30 * 24 * 60 * 60);
    for table in SideTable::ALL {
        // Batches of one: the first call takes one old row, the second the
        // other, the third finds nothing older than a month.
        let mut deleted = Vec::new();
        for _ in 0..3 {
            deleted.push(
                jobwire_core::trim_side_table(&pool, table, month, 1)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(deleted, vec![1, 1, 0], "{}", table.table());
        let left = count(&pool, &format!("SELECT count(*) FROM {}", table.table())).await;
        assert_eq!(left, 1, "{}: the recent row stays", table.table());
    }
}
