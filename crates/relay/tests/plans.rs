//! Plans that must not depend on fresh statistics: a dedicated lane reads
//! its own topics through `job_outbox_topic_due_idx`, never by walking
//! every due row of the outbox, whether the statistics date from an empty
//! table or are fresh, and whether the plan is custom or generic (a
//! statement prepared by a long-lived relay soon runs a generic one).

use serde_json::Value;
use sqlx::PgConnection;

/// Every index the plan of `statement` scans, for a lane of the topics `lane`.
async fn indexes_of(conn: &mut PgConnection, statement: &str, lane: &[&str]) -> Vec<String> {
    let explain = format!("EXPLAIN (FORMAT JSON) {statement}");
    let lane: Vec<String> = lane.iter().map(|topic| topic.to_string()).collect();
    let query = sqlx::query_scalar(sqlx::AssertSqlSafe(explain));
    let plan: Value = if statement.contains("$2") {
        query.bind(1000_i64).bind(lane)
    } else {
        query.bind(lane)
    }
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    jobwire_test_support::plan_indexes(&plan)
}

async fn insert_rows(conn: &mut PgConnection, topic: &str, rows: i32) {
    sqlx::query(
        "INSERT INTO job_outbox (topic, message_key, payload, headers)
         SELECT $1, g::text, '{}', '{}' FROM generate_series(1, $2) g",
    )
    .bind(topic)
    .bind(rows)
    .execute(&mut *conn)
    .await
    .unwrap();
}

/// Both lane statements, in every plan mode, use the topic index alone.
async fn assert_lane_reads_its_topics(conn: &mut PgConnection, when: &str) {
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("SET plan_cache_mode = {mode}")))
            .execute(&mut *conn)
            .await
            .unwrap();
        for (name, statement) in [
            ("claim", include_str!("../sql/claim_due_only.sql")),
            ("next due", include_str!("../sql/next_due_only.sql")),
        ] {
            for lane in [&["urgent"][..], &["bulk"], &["bulk", "urgent"]] {
                let used = indexes_of(conn, statement, lane).await;
                assert!(
                    !used.is_empty() && used.iter().all(|i| i == "job_outbox_topic_due_idx"),
                    "{name} of lane {lane:?}, {when}, {mode}: {used:?}"
                );
            }
        }
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_lane_reads_only_its_topics_however_stale_the_statistics(pool: sqlx::PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    // Statistics of an empty outbox, then a bulk backlog the planner knows
    // nothing of (and no autovacuum to tell it meanwhile).
    sqlx::query("ALTER TABLE job_outbox SET (autovacuum_enabled = false)")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("ANALYZE job_outbox")
        .execute(&mut *conn)
        .await
        .unwrap();
    insert_rows(&mut conn, "bulk", 20_000).await;
    insert_rows(&mut conn, "urgent", 3).await;
    assert_lane_reads_its_topics(&mut conn, "stale statistics").await;
    sqlx::query("ANALYZE job_outbox")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_lane_reads_its_topics(&mut conn, "fresh statistics").await;

    // And the lane still takes exactly its rows, oldest first.
    sqlx::query("RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .unwrap();
    let claimed: Vec<(i64, String)> = sqlx::query_as(include_str!("../sql/claim_due_only.sql"))
        .bind(10_i64)
        .bind(vec!["urgent".to_owned()])
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .into_iter()
        .map(|row: (i64, String, Option<String>, String, Value, i32)| (row.0, row.1))
        .collect();
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    assert!(claimed.iter().all(|(_, topic)| topic == "urgent"));
    assert!(claimed.windows(2).all(|pair| pair[0].0 < pair[1].0));
    let next: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar(include_str!("../sql/next_due_only.sql"))
            .bind(vec!["nothing-here".to_owned()])
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    assert_eq!(next, None);
}
