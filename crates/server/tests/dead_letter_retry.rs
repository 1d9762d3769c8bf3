//! Retrying 100,000 dead letters over HTTP: all requeued, each audited, in
//! transactions of at most one batch each (read from the rows themselves).

mod common;

use std::time::Duration;

use common::{Api, parts};
use serde_json::json;
use sqlx::PgPool;

const ROWS: i64 = 100_000;

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_retry_of_100k_dead_letters_requeues_and_audits_each_in_batches_of_their_own(
    pool: PgPool,
) {
    let api = Api::start(pool.clone()).await;
    // 100,000 FAILED webhook deliveries, written directly (the state machine
    // allows inserting a finished row; what matters here is the retry).
    sqlx::query(
        "INSERT INTO jobs (job_id, job_type, queue, state, attempt_count, max_attempts,
                           last_error_code, last_error, finished_at)
         SELECT jobwire_uuidv7(), 'deliver_webhook', 'webhooks', 'FAILED', 8, 8,
                'HTTP_503', 'endpoint answered 503', now() - interval '1 hour'
         FROM generate_series(1, $1)",
    )
    .bind(ROWS)
    .execute(&pool)
    .await
    .unwrap();

    let retry = json!({"type": "deliver_webhook", "errorCode": "HTTP_503"});
    let (status, body) = parts(
        api.post("/dead-letter/retry", &api.admin)
            .json(&retry)
            .timeout(Duration::from_secs(300))
            .send()
            .await
            .unwrap(),
    )
    .await;

    assert_eq!(status, 202, "{body}");
    assert_eq!(body["requeued"], ROWS);
    assert_eq!(
        api.count("SELECT count(*) FROM jobs WHERE state = 'FAILED'")
            .await,
        0
    );
    assert_eq!(
        api.count("SELECT count(*) FROM jobs WHERE state = 'QUEUED' AND attempt_count = 0")
            .await,
        ROWS
    );
    assert_eq!(
        api.count("SELECT count(DISTINCT job_id) FROM job_audit WHERE action = 'replay' AND actor = 'admin'").await,
        ROWS
    );
    // Not one long transaction: the rows were requeued by many
    // transactions, none of which wrote more than one batch (a
    // single-statement retry would hold all 100,000 rows' locks until its
    // end). Each row's `xmin` names the transaction that wrote it last.
    let (transactions, largest): (i64, i64) = sqlx::query_as(
        "SELECT count(*), max(rows) FROM (
             SELECT count(*) AS rows FROM jobs WHERE state = 'QUEUED' GROUP BY xmin::text) AS t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        largest <= 1_000,
        "one transaction requeued {largest} rows (of {transactions} transactions)"
    );
    assert!(transactions >= ROWS / 1_000, "{transactions} transactions");
}
