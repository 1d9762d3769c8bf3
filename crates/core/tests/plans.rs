//! Plans that must not depend on fresh statistics: the wake-up claim looks
//! its jobs up by primary key even when the table was last analyzed while
//! empty and has since filled up (migration
//! `20261201000011_claim_by_id_uses_the_key.sql`); enqueuing a new job
//! reads no other job even through a plan made while the table was empty
//! (the enqueue keeps one generic plan per session, migration
//! `20261202000001_enqueue_planned_once.sql`); a capped claim scans no
//! whole table (`20261202000002_capped_claim_probes_the_index.sql`) and
//! does not walk one tenant's backlog to find another's jobs
//! (`20261202000003_capped_claim_reads_by_tenant.sql`); an enqueue under a
//! tenant's rate reads no counter row of a window long past
//! (`20261207000001_rate_counts_read_by_window.sql`); with nothing
//! configured, tenants and limits touch no table of theirs.

use jobwire_core::{Dispatch, NewJob};
use jobwire_test_support::table_stat_in_transaction;
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

/// The statement a planned-once function (`jobwire_enqueue_rows`) runs:
/// its body, as installed, which refers to the function's arguments as
/// `$1`, `$2` … and so prepares on its own. The function plans it with
/// `plan_cache_mode = force_generic_plan`.
async fn function_statement(pool: &PgPool, function: &str) -> String {
    let body: String = sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = $1")
        .bind(function)
        .fetch_one(pool)
        .await
        .unwrap();
    let start = body
        .find("RETURN QUERY")
        .expect("the function returns a query")
        + "RETURN QUERY".len();
    let end = body.rfind("END;").expect("the function body ends");
    let statement = body[start..end].trim().trim_end_matches(';');
    assert!(statement.starts_with("WITH "), "{statement}");
    statement.to_owned()
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the prepared `enqueue` statement for
/// one new job without a dedup key; it inserts the job.
async fn explain_enqueue_of_a_new_job(conn: &mut sqlx::PgConnection) -> Value {
    sqlx::query_scalar(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE enqueue(
            ARRAY[gen_random_uuid()], ARRAY['q'], ARRAY['work'], ARRAY[0]::smallint[],
            ARRAY['{}']::jsonb[], ARRAY[3], ARRAY[NULL]::timestamptz[], ARRAY[0]::bigint[],
            ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[])",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn enqueuing_a_new_job_reads_no_other_job_through_a_plan_made_on_an_empty_table(
    pool: PgPool,
) {
    sqlx::query("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE jobs").execute(&pool).await.unwrap();
    // A producer's connection keeps its prepared enqueue, and the plan it
    // made while the table was empty, as the table fills (the driver
    // prepares each statement once per connection; a generic plan is then
    // kept until the statistics change).
    let mut producer = pool.acquire().await.unwrap();
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *producer)
        .await
        .unwrap();
    let prepare = format!(
        "PREPARE enqueue AS {}",
        function_statement(&pool, "jobwire_enqueue_rows").await
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare))
        .execute(&mut *producer)
        .await
        .unwrap();
    explain_enqueue_of_a_new_job(&mut producer).await;
    let backlog: Vec<NewJob> = (0..20_000)
        .map(|i| NewJob::new("work", json!({ "i": i })).with_queue("q"))
        .collect();
    jobwire_test_support::enqueue_ids(&pool, &backlog)
        .await
        .unwrap();

    let plan = explain_enqueue_of_a_new_job(&mut producer).await;
    let scans = jobwire_test_support::executed_scans(&plan, "jobs");
    assert!(
        scans.is_empty(),
        "enqueuing a new job read other jobs ({scans:?}): {plan:#}"
    );
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = 'q'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        queued, 20_002,
        "both enqueues through the plan wrote their job"
    );
}

/// Queue `q` with every tenant capped at `cap`, holding `backlog`, its
/// statistics taken now (the plans below must not depend on later ones).
async fn capped_queue_analyzed(pool: &PgPool, cap: u32, backlog: &[NewJob]) {
    jobwire_core::set_tenant_cap(pool, "q", None, Some(cap))
        .await
        .unwrap();
    jobwire_test_support::enqueue_ids(pool, backlog)
        .await
        .unwrap();
    sqlx::query("ANALYZE jobs").execute(pool).await.unwrap();
}

/// One of PostgreSQL's per-transaction counters for `jobs` (they see the
/// statements inside a function too).
async fn jobs_stat_in_transaction(claimer: &mut sqlx::PgConnection, counter: &str) -> i64 {
    table_stat_in_transaction(claimer, "jobs", counter).await
}

/// A claim of a queue with tenant caps reads no table of jobs from end to
/// end: its probe for jobs without a tenant, as EXISTS, was planned as a
/// sequential scan once the table held many jobs without a tenant (on other
/// queues), and read every row when none of the capped queue's matched.
/// Counted by PostgreSQL's own per-transaction statistics, which see the
/// statements inside the function.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_claim_scans_no_whole_table_of_jobs(pool: PgPool) {
    // The capped queue's jobs all name a tenant; another queue's name none,
    // so the table's statistics say many jobs have no tenant.
    let backlog: Vec<NewJob> = (0..20_000)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("q")
                .with_tenant(["A", "B"][i % 2])
        })
        .chain((0..10_000).map(|i| NewJob::new("work", json!({ "i": i })).with_queue("plain")))
        .collect();
    capped_queue_analyzed(&pool, 4, &backlog).await;
    let mut claimer = pool.begin().await.unwrap();
    for _ in 0..3 {
        sqlx::query("SELECT count(*) FROM jobwire_claim_capped('q', 8, 'w', 60000, 0)")
            .execute(&mut *claimer)
            .await
            .unwrap();
    }
    let seq_scans = jobs_stat_in_transaction(&mut claimer, "seq_scan").await;
    let running: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'RUNNING'")
        .fetch_one(&mut *claimer)
        .await
        .unwrap();
    assert_eq!(running, 8, "each tenant's four slots filled, no more");
    assert_eq!(seq_scans, 0, "a capped claim scanned the jobs table");
}

/// A capped claim finds each tenant's jobs through the tenant's index even
/// when the statistics say one tenant holds every waiting job (its backlog
/// was enqueued at once and analyzed before anyone else's arrived): it used
/// to walk the queue's claim index in priority order instead, fetching the
/// big tenant's rows one by one until it met the other tenant's. Counted
/// in heap rows fetched through indexes, in PostgreSQL's per-transaction
/// statistics.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_claim_does_not_walk_one_tenants_backlog_for_anothers_jobs(pool: PgPool) {
    let backlog: Vec<NewJob> = (0..20_000)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("q")
                .with_tenant("A")
        })
        .collect();
    capped_queue_analyzed(&pool, 2, &backlog).await;
    // Enqueued after the backlog: later in the claim index's order. One
    // job names no tenant (the claim looks those up on their own).
    let quiet: Vec<NewJob> = ["B", "C"]
        .into_iter()
        .map(|tenant| {
            NewJob::new("work", json!({}))
                .with_queue("q")
                .with_tenant(tenant)
        })
        .chain([NewJob::new("work", json!({})).with_queue("q")])
        .collect();
    jobwire_test_support::enqueue_ids(&pool, &quiet)
        .await
        .unwrap();
    let mut claimer = pool.begin().await.unwrap();
    let claimed: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT tenant, count(*) FROM jobwire_claim_capped('q', 8, 'w', 60000, 0)
         GROUP BY tenant ORDER BY tenant NULLS LAST",
    )
    .fetch_all(&mut *claimer)
    .await
    .unwrap();
    let fetched = jobs_stat_in_transaction(&mut claimer, "idx_tup_fetch").await;
    assert_eq!(
        claimed,
        vec![
            (Some("A".into()), 2),
            (Some("B".into()), 1),
            (Some("C".into()), 1),
            (None, 1)
        ],
        "A's two slots, the quiet tenants' jobs and the one without a tenant"
    );
    assert!(
        fetched < 1_000,
        "the claim fetched {fetched} rows through indexes to claim 5"
    );
}

/// An enqueue under a tenant's rate reads only the counter rows of the
/// current and the previous window: it read every row the tenant's
/// sessions ever left (one per session, kept two days), so a producer that
/// connects per request made each enqueue slower by the thousands of rows
/// of sessions long gone. Counted in heap rows read, by index or by scan,
/// in PostgreSQL's per-transaction statistics.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_enqueue_under_a_rate_reads_no_counter_row_of_a_window_long_past(pool: PgPool) {
    let rate = jobwire_core::TenantLimits {
        enqueue_rate: Some(jobwire_core::EnqueueRate {
            jobs: 1_000_000,
            per_seconds: 60,
        }),
        ..jobwire_core::TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", None, &rate)
        .await
        .unwrap();
    // 10,000 sessions that enqueued for acme yesterday and are gone.
    sqlx::query(
        "INSERT INTO job_enqueue_counts (queue, tenant, backend, window_start, count, previous)
         SELECT 'q', 'acme', -i, now() - interval '1 day', 3, 2
         FROM generate_series(1, 10000) i",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE job_enqueue_counts")
        .execute(&pool)
        .await
        .unwrap();
    let mut producer = pool.begin().await.unwrap();
    for _ in 0..3 {
        jobwire_core::enqueue(
            &mut *producer,
            &NewJob::new("work", json!({}))
                .with_queue("q")
                .with_tenant("acme"),
        )
        .await
        .unwrap();
    }
    let mut read = 0;
    for counter in ["seq_tup_read", "idx_tup_fetch"] {
        read += table_stat_in_transaction(&mut producer, "job_enqueue_counts", counter).await;
    }
    let counted: i64 = sqlx::query_scalar(
        "SELECT sum(count) FROM job_enqueue_counts WHERE backend = pg_backend_pid()",
    )
    .fetch_one(&mut *producer)
    .await
    .unwrap();
    assert_eq!(counted, 3, "the three enqueues were counted");
    assert!(
        read < 100,
        "three enqueues read {read} counter rows; the tenant's live ones are at most 3"
    );
}

/// Tenants and enqueue limits cost nothing until configured: with jobs that
/// name tenants but no cap, limit or rate anywhere, an enqueue, a claim and
/// a completion neither read nor write the tenant slots, the tenants'
/// settings or the rate counters. Counted in PostgreSQL's per-transaction
/// statistics, which see the statements inside functions and triggers.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn with_nothing_configured_tenants_and_limits_touch_no_table_of_theirs(pool: PgPool) {
    let mut tx = pool.begin().await.unwrap();
    let jobs: Vec<NewJob> = (0..10)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("q")
                .with_tenant(["A", "B"][i % 2])
        })
        .collect();
    jobwire_core::enqueue_many(&mut *tx, &jobs).await.unwrap();
    jobwire_core::enqueue(
        &mut *tx,
        &NewJob::new("work", json!({}))
            .with_queue("q")
            .with_tenant("C"),
    )
    .await
    .unwrap();
    let claimed =
        jobwire_core::claim_batch(&mut *tx, "q", "w", 11, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    assert_eq!(claimed.len(), 11);
    for job in &claimed {
        jobwire_core::complete(&mut *tx, "w", job.lease)
            .await
            .unwrap();
    }
    for table in ["job_tenant_slots", "job_tenants", "job_enqueue_counts"] {
        let mut touched = 0;
        for counter in [
            "seq_scan",
            "idx_scan",
            "n_tup_ins",
            "n_tup_upd",
            "n_tup_del",
        ] {
            touched += table_stat_in_transaction(&mut tx, table, counter).await;
        }
        assert_eq!(touched, 0, "{table} was read or written");
    }
    // The counters do see this transaction's work on the jobs table.
    assert!(table_stat_in_transaction(&mut tx, "jobs", "n_tup_ins").await >= 11);
}
