//! Real concurrency against a real PostgreSQL: many claimers, many enqueuers.

use std::collections::HashSet;
use std::time::Duration;

use jobwire_core::NewJob;
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

/// N claimers race over M jobs, repeatedly: every job is claimed by exactly
/// one of them, none twice, none missed.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn concurrent_claimers_never_claim_a_job_twice(
    _pool_options: PgPoolOptions,
    connect: sqlx::postgres::PgConnectOptions,
) {
    const CLAIMERS: usize = 8;
    const JOBS: usize = 400;
    const ROUNDS: usize = 5;
    let pool = PgPoolOptions::new()
        .max_connections(CLAIMERS as u32 + 2)
        .connect_with(connect)
        .await
        .unwrap();

    for round in 0..ROUNDS {
        let queue = format!("race-{round}");
        let jobs: Vec<NewJob> = (0..JOBS)
            .map(|i| NewJob::new("noop", json!({ "i": i })).with_queue(&queue))
            .collect();
        let enqueued: HashSet<Uuid> = jobwire_core::enqueue_many(&pool, &jobs)
            .await
            .unwrap()
            .into_iter()
            .map(|job| job.job_id)
            .collect();

        let start = std::sync::Arc::new(tokio::sync::Barrier::new(CLAIMERS));
        let mut claimers = tokio::task::JoinSet::new();
        for claimer in 0..CLAIMERS {
            let pool = pool.clone();
            let queue = queue.clone();
            let start = start.clone();
            claimers.spawn(async move {
                start.wait().await;
                let owner = format!("claimer-{claimer}");
                let mut mine = Vec::new();
                loop {
                    // Small, uneven batches maximise interleaving.
                    let batch = 1 + claimer % 4;
                    let claimed = jobwire_core::claim_batch(&pool, &queue, &owner, batch, LEASE)
                        .await
                        .unwrap();
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|job| job.lease.job_id));
                }
            });
        }
        let mut seen = HashSet::new();
        let mut total = 0;
        let mut claimers_with_work = 0;
        while let Some(claimed) = claimers.join_next().await {
            let claimed = claimed.unwrap();
            claimers_with_work += usize::from(!claimed.is_empty());
            total += claimed.len();
            seen.extend(claimed);
        }
        assert_eq!(total, JOBS, "round {round}: a job was claimed twice");
        assert_eq!(seen, enqueued, "round {round}: claimed set differs");
        assert!(
            claimers_with_work > 1,
            "round {round}: no real race happened"
        );
        let counts: Vec<(i32, i64)> = sqlx::query_as(
            "SELECT attempt_count, lease_generation FROM jobs WHERE queue = $1 GROUP BY 1, 2",
        )
        .bind(&queue)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(counts, vec![(1, 1)], "every job claimed exactly once");
    }
}

/// Wake-up claims race too: the same ids handed to many claimers at once are
/// each claimed by exactly one.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn concurrent_claims_by_id_never_claim_a_job_twice(
    _pool_options: PgPoolOptions,
    connect: sqlx::postgres::PgConnectOptions,
) {
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect_with(connect)
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| NewJob::new("noop", json!({ "i": i })))
        .collect();
    let ids: Vec<Uuid> = jobwire_core::enqueue_many(&pool, &jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|job| job.job_id)
        .collect();
    let mut claimers = tokio::task::JoinSet::new();
    for claimer in 0..8 {
        let pool = pool.clone();
        let mut ids = ids.clone();
        // Each claimer walks the ids from a different place.
        ids.rotate_left(claimer * 25);
        claimers.spawn(async move {
            let owner = format!("c{claimer}");
            let mut mine = Vec::new();
            for chunk in ids.chunks(10) {
                let served = [NewJob::DEFAULT_QUEUE.to_owned()];
                let outcome = jobwire_core::claim_by_ids(&pool, chunk, &served, &owner, LEASE)
                    .await
                    .unwrap();
                mine.extend(outcome.claimed.into_iter().map(|job| job.lease.job_id));
            }
            mine
        });
    }
    let mut all = Vec::new();
    while let Some(claimed) = claimers.join_next().await {
        all.extend(claimed.unwrap());
    }
    let unique: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        ids.len(),
        "claimed {} for {} jobs",
        all.len(),
        ids.len()
    );
    assert_eq!(unique.len(), ids.len());
}

/// Concurrent enqueues of the same dedup key produce one job; every caller
/// gets its id.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn concurrent_enqueues_of_one_dedup_key_make_one_job(pool: PgPool) {
    for round in 0..5 {
        let key = format!("occurrence-{round}");
        let mut enqueuers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let pool = pool.clone();
            let job = NewJob::new("scheduled", json!({})).with_dedup_key(&key);
            enqueuers.spawn(async move { jobwire_core::enqueue(&pool, &job).await.unwrap() });
        }
        let mut ids = HashSet::new();
        let mut fresh = 0;
        while let Some(result) = enqueuers.join_next().await {
            let enqueued = result.unwrap();
            fresh += usize::from(!enqueued.duplicate);
            ids.insert(enqueued.job_id);
        }
        assert_eq!(fresh, 1, "round {round}");
        assert_eq!(ids.len(), 1, "round {round}");
    }
}
