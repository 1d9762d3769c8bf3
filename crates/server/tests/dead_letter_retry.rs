//! Retrying 100,000 dead letters over HTTP: all requeued, each audited, in
//! short transactions (measured from outside, by sampling the database's
//! open transactions while the retry runs).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Api, parts};
use serde_json::json;
use sqlx::PgPool;

const ROWS: i64 = 100_000;

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_retry_of_100k_dead_letters_requeues_and_audits_each_in_short_transactions(pool: PgPool) {
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

    // Sample the longest-open transaction of any other client session every
    // 20 ms. Only client backends: an autovacuum worker shows a transaction
    // start too, and one that vacuums the 100,000 rows just written can stay
    // open for seconds on a busy machine without anything of ours waiting.
    // And not the API server's LISTEN session (its token cache): it runs no
    // retry, and its LISTEN, which it sends while the retry may be running,
    // was once seen open 2.8 s in a CI run: PostgreSQL registers a session's
    // first LISTEN by stepping over every committed notification between the
    // cluster-wide queue's tail and head, a stretch that a listener falling
    // behind in any database keeps long.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let pool = pool.clone();
        let sampling = sampling.clone();
        async move {
            let mut longest = (0.0f64, String::new());
            while sampling.load(Ordering::Relaxed) {
                let open: Option<(f64, String)> = sqlx::query_as(
                    "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8,
                            left(query, 200)
                     FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()
                       AND backend_type = 'client backend' AND xact_start IS NOT NULL
                       AND query NOT LIKE 'LISTEN %'
                     ORDER BY xact_start
                     LIMIT 1",
                )
                .fetch_optional(&pool)
                .await
                .unwrap();
                if let Some(open) = open.filter(|open| open.0 > longest.0) {
                    longest = open;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            longest
        }
    });

    let started = Instant::now();
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
    let elapsed = started.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let (longest_transaction, longest_statement) = sampler.await.unwrap();

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
    // Not one long transaction: the longest any transaction stayed open is a
    // small share of the whole retry (a single-statement retry would hold
    // its locks for all of it).
    eprintln!(
        "retried {ROWS} dead letters in {:.2} s; longest open transaction seen: {:.3} s",
        elapsed.as_secs_f64(),
        longest_transaction
    );
    assert!(
        longest_transaction < elapsed.as_secs_f64() / 4.0,
        "a transaction stayed open {longest_transaction:.3} s of {:.3} s ({longest_statement})",
        elapsed.as_secs_f64()
    );
}
