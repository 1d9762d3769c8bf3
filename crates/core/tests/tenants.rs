//! Tenant caps in the store: the capped claim takes turns between tenants,
//! never hands out more slots than the cap to concurrent claimers, and every
//! way out of RUNNING gives the slot back.

use std::time::Duration;

use jobwire_core::{Dispatch, FinishOutcome, JobState, Lease, NewJob};
use jobwire_test_support::{
    expire_lease, lose_wake_ups, until_a_session_waits_for_a_lock, wake_ups_for,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(60);

async fn enqueue_for(pool: &PgPool, queue: &str, tenant: &str, count: usize) -> Vec<Uuid> {
    let jobs: Vec<NewJob> = (0..count)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue(queue)
                .with_tenant(tenant)
        })
        .collect();
    jobwire_test_support::enqueue_ids(pool, &jobs)
        .await
        .unwrap()
}

/// Queue `b` dispatched to a broker (topic `t`), every tenant capped at
/// `cap` running jobs.
async fn capped_broker_queue(pool: &PgPool, cap: u32) {
    jobwire_core::set_queue_dispatch(pool, "b", &Dispatch::Broker { topic: "t".into() })
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(pool, "b", None, Some(cap))
        .await
        .unwrap();
}

/// The wake-up claim of a consumer `c` serving queue `b` for the named jobs.
async fn wake_up_claim(pool: &PgPool, ids: &[Uuid]) -> jobwire_core::ClaimByIds {
    jobwire_core::claim_by_ids(pool, ids, &["b".to_owned()], "c", LEASE)
        .await
        .unwrap()
}

/// Every job due, and last written, ten minutes ago: older than the
/// broker path's safety-net bound (180 s).
async fn backdate_every_job_ten_minutes(pool: &PgPool) {
    sqlx::query(
        "UPDATE jobs SET run_after = now() - interval '10 minutes',
                         updated_at = now() - interval '10 minutes'",
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn held_slots(pool: &PgPool, queue: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM job_tenant_slots WHERE queue = $1 AND job_id IS NOT NULL",
    )
    .bind(queue)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A tenant of `queue` as `tenant_caps` lists it: its running, starting and
/// waiting jobs.
async fn listed(pool: &PgPool, queue: &str, tenant: &str) -> (i64, i64, i64) {
    let caps = jobwire_core::tenant_caps(pool, queue).await.unwrap();
    let listed = caps
        .tenants
        .iter()
        .find(|t| t.tenant == tenant)
        .unwrap_or_else(|| panic!("{tenant} is not listed"));
    (listed.running, listed.starting, listed.waiting)
}

async fn state_and_attempts(pool: &PgPool, job_id: Uuid) -> (String, i32) {
    sqlx::query_as("SELECT state::text, attempt_count FROM jobs WHERE job_id = $1")
        .bind(job_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Every lease finished as succeeded by one `finish_many` call, each one
/// recorded.
async fn finish_all_in_one_call(pool: &PgPool, owner: &str, leases: &[Lease]) {
    let reports: Vec<(Lease, FinishOutcome)> = leases
        .iter()
        .map(|lease| (*lease, FinishOutcome::Succeeded))
        .collect();
    let finished = jobwire_core::finish_many(pool, owner, &reports)
        .await
        .unwrap();
    assert_eq!(finished.len(), leases.len());
    assert!(
        finished
            .iter()
            .all(|result| matches!(result, jobwire_core::FinishResult::Recorded { .. }))
    );
}

/// A session of its own holding `job`'s row lock until it is dropped or
/// rolled back: a claim or hand-out running meanwhile skips the job.
async fn lock_job(pool: &PgPool, job: Uuid) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE job_id = $1 FOR UPDATE")
        .bind(job)
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// Jobs whose row still names a tenant slot.
async fn jobs_naming_a_slot(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE tenant_slot IS NOT NULL")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_small_tenant_behind_a_large_backlog_starts_within_a_few_claims(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(100))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "big", 200).await;
    let small = enqueue_for(&pool, "q", "small", 3).await;
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 6, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 6);
    let small_claimed = claimed
        .iter()
        .filter(|job| small.contains(&job.lease.job_id))
        .count();
    // Turns: big, small, big, small, big, small — not six of the backlog.
    assert_eq!(small_claimed, 3);
}

/// Turns are taken among jobs of equal priority: a more urgent job goes
/// first whoever's turn it is, and only then do the tenants alternate.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn priority_comes_before_the_tenants_turns(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(100))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "big", 200).await;
    let small = enqueue_for(&pool, "q", "small", 3).await;
    let urgent: Vec<NewJob> = (0..4)
        .map(|i| {
            NewJob::new("work", json!({ "urgent": i }))
                .with_queue("q")
                .with_tenant("big")
                .with_priority(-1)
        })
        .collect();
    let urgent = jobwire_test_support::enqueue_ids(&pool, &urgent)
        .await
        .unwrap();
    let claimed: Vec<Uuid> = jobwire_core::claim_batch(&pool, "q", "w", 6, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|job| job.lease.job_id)
        .collect();
    assert_eq!(claimed.len(), 6);
    assert!(
        urgent.iter().all(|id| claimed.contains(id)),
        "every urgent job first"
    );
    // Then turns at priority 0: the small tenant's first two, ahead of the
    // big tenant's fifth and sixth jobs.
    let small_claimed = claimed.iter().filter(|id| small.contains(id)).count();
    assert_eq!(small_claimed, 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn concurrent_claimers_never_take_more_slots_than_the_cap(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(3))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "acme", 100).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(16));
    let mut claimers = tokio::task::JoinSet::new();
    for n in 0..16 {
        let (pool, barrier) = (pool.clone(), barrier.clone());
        claimers.spawn(async move {
            barrier.wait().await;
            jobwire_core::claim_batch(&pool, "q", &format!("w{n}"), 5, LEASE)
                .await
                .unwrap()
                .len()
        });
    }
    let mut claimed = 0;
    while let Some(got) = claimers.join_next().await {
        claimed += got.unwrap();
    }
    assert_eq!(claimed, 3);
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = 'q' AND state = 'RUNNING'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((running, held_slots(&pool, "q").await), (3, 3));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn every_way_out_of_running_gives_the_slot_back(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(1))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "acme", 6).await;
    let claim_one = || async {
        let mut claimed = jobwire_core::claim_batch(&pool, "q", "w", 5, LEASE)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1, "a cap of one");
        claimed.remove(0)
    };

    let job = claim_one().await;
    assert_eq!(held_slots(&pool, "q").await, 1);
    jobwire_core::complete(&pool, "w", job.lease).await.unwrap();

    let job = claim_one().await;
    let state = jobwire_core::fail(
        &pool,
        "w",
        job.lease,
        Some(Duration::from_secs(3600)),
        "E",
        "retry later",
    )
    .await
    .unwrap();
    assert_eq!(state, JobState::RetryWait);

    let job = claim_one().await;
    jobwire_core::fail(&pool, "w", job.lease, None, "E", "fatal")
        .await
        .unwrap();

    let job = claim_one().await;
    jobwire_core::request_cancel(&pool, job.lease.job_id, "operator")
        .await
        .unwrap();
    jobwire_core::acknowledge_cancel(&pool, "w", job.lease)
        .await
        .unwrap();

    let job = claim_one().await;
    expire_lease(&pool, job.lease.job_id).await.unwrap();
    let swept = jobwire_core::sweep_expired_leases(&pool, 10).await.unwrap();
    assert_eq!(swept.len(), 1);

    // A job claimed ahead and given back before any handler started it.
    let job = claim_one().await;
    jobwire_core::finish_many(&pool, "w", &[(job.lease, FinishOutcome::Returned)])
        .await
        .unwrap();

    // Even a running job's row deleted by hand.
    let job = claim_one().await;
    sqlx::query("DELETE FROM jobs WHERE job_id = $1")
        .bind(job.lease.job_id)
        .execute(&pool)
        .await
        .unwrap();

    // Each time the next job could start, and now nothing holds a slot.
    assert_eq!(held_slots(&pool, "q").await, 0);
    assert_eq!(jobs_naming_a_slot(&pool).await, 0);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn an_override_and_an_uncapped_queue_and_tenantless_jobs(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(1))
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(&pool, "q", Some("vip"), Some(3))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "vip", 5).await;
    enqueue_for(&pool, "q", "plain", 5).await;
    let tenantless: Vec<NewJob> = (0..2)
        .map(|i| NewJob::new("work", json!({ "i": i })).with_queue("q"))
        .collect();
    jobwire_test_support::enqueue_ids(&pool, &tenantless)
        .await
        .unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 50, LEASE)
        .await
        .unwrap();
    // vip 3 (its override), plain 1 (the default), both tenantless (never capped).
    assert_eq!(claimed.len(), 6);

    let caps = jobwire_core::tenant_caps(&pool, "q").await.unwrap();
    assert_eq!(caps.default_max_running, Some(1));
    let vip = caps.tenants.iter().find(|t| t.tenant == "vip").unwrap();
    // The PostgreSQL path hands no slot to a waiting job: none starting.
    assert_eq!(
        (
            vip.override_max_running,
            vip.max_running,
            vip.running,
            vip.starting,
            vip.waiting
        ),
        (Some(3), Some(3), 3, 0, 2)
    );

    // Caps removed: the plain claim again, for everything waiting.
    jobwire_core::set_tenant_cap(&pool, "q", Some("vip"), None)
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(&pool, "q", None, None)
        .await
        .unwrap();
    let rest = jobwire_core::claim_batch(&pool, "q", "w", 50, LEASE)
        .await
        .unwrap();
    assert_eq!(rest.len(), 6);
}

/// A capped claim that finds every capped tenant at its cap takes nothing
/// (and returns before its main statement, migration 20261207000008),
/// but still takes a tenantless job or an uncapped tenant's job that waits
/// beside them.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_claim_past_a_full_tenant_still_takes_tenantless_and_uncapped_jobs(pool: PgPool) {
    // Only tenant `a` is capped (an override, no default for the queue).
    jobwire_core::set_tenant_cap(&pool, "q", Some("a"), Some(2))
        .await
        .unwrap();
    let a = enqueue_for(&pool, "q", "a", 4).await;
    let claim = || jobwire_core::claim_batch(&pool, "q", "w", 50, LEASE);
    let ids = |jobs: Vec<jobwire_core::ClaimedJob>| -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = jobs.iter().map(|job| job.lease.job_id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(claim().await.unwrap()),
        a[..2].to_vec(),
        "a up to its cap"
    );
    assert!(
        claim().await.unwrap().is_empty(),
        "a at its cap, nothing else"
    );

    let tenantless =
        jobwire_test_support::enqueue_ids(&pool, &[NewJob::new("work", json!({})).with_queue("q")])
            .await
            .unwrap();
    assert_eq!(ids(claim().await.unwrap()), tenantless, "a tenantless job");

    let b = enqueue_for(&pool, "q", "b", 1).await;
    assert_eq!(ids(claim().await.unwrap()), b, "an uncapped tenant's job");
    assert!(claim().await.unwrap().is_empty());
    assert_eq!(held_slots(&pool, "q").await, 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_broker_queue_wakes_a_capped_tenant_one_slot_at_a_time(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    let ids = enqueue_for(&pool, "b", "acme", 10).await;
    let woken = |pool: PgPool| async move {
        sqlx::query_scalar::<_, Uuid>("SELECT message_key::uuid FROM job_outbox ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    assert_eq!(woken(pool.clone()).await, ids[..2].to_vec());

    // A wake-up for a job without a slot is a miss; the two woken ones claim.
    let outcome = wake_up_claim(&pool, &ids[..3]).await;
    assert_eq!(outcome.claimed.len(), 2);
    assert_eq!(
        outcome.missed,
        vec![(ids[2], jobwire_core::ClaimMiss::Capped)]
    );

    // A finish hands its slot on, with the next job's wake-up.
    jobwire_core::complete(&pool, "c", outcome.claimed[0].lease)
        .await
        .unwrap();
    let woken_now = woken(pool.clone()).await;
    assert_eq!(woken_now.len(), 3);
    assert_eq!(woken_now[2], ids[2]);
    let next = wake_up_claim(&pool, &ids[2..3]).await;
    assert_eq!(next.claimed.len(), 1);
}

/// On a broker queue a job handed a freed slot holds it before it runs:
/// the tenant's list counts it as starting, beside the running jobs, so
/// that a tenant at its cap shows so.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_handed_a_slot_is_listed_as_starting(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    let ids = enqueue_for(&pool, "b", "acme", 5).await;
    // The enqueue handed both slots, to the first two jobs.
    assert_eq!(listed(&pool, "b", "acme").await, (0, 2, 5));
    let outcome = wake_up_claim(&pool, &ids[..1]).await;
    assert_eq!(outcome.claimed.len(), 1);
    assert_eq!(listed(&pool, "b", "acme").await, (1, 1, 4));
    // Its finish hands the slot to the third job.
    jobwire_core::complete(&pool, "c", outcome.claimed[0].lease)
        .await
        .unwrap();
    assert_eq!(listed(&pool, "b", "acme").await, (0, 2, 4));
}

/// Locking a slot row writes it, so a claim locks only the free slots it
/// hands out: a tenant with one waiting job needs one, not all of them.
/// Another session, while the claim's transaction is open, can still lock
/// every other free slot.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_claim_locks_only_the_slots_it_hands_out(pool: PgPool) {
    const CAP: i64 = 48;
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(CAP as u32))
        .await
        .unwrap();
    let mut tenants = vec!["big".to_owned()];
    enqueue_for(&pool, "q", "big", 100).await;
    for n in 0..10 {
        let tenant = format!("small-{n}");
        enqueue_for(&pool, "q", &tenant, 1).await;
        tenants.push(tenant);
    }
    // Every tenant's slot rows exist before the claim (a first claim makes
    // them, uncommitted, out of the other session's sight).
    for tenant in &tenants {
        sqlx::query("SELECT jobwire_ensure_tenant_slots('q', $1, $2)")
            .bind(tenant)
            .bind(CAP as i32)
            .execute(&pool)
            .await
            .unwrap();
    }
    let free_slots: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_tenant_slots WHERE queue = 'q' AND job_id IS NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(free_slots, CAP * 11);

    let mut claim = pool.begin().await.unwrap();
    let claimed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobwire_claim_capped('q', 64, 'w', 60000, 0)")
            .fetch_one(&mut *claim)
            .await
            .unwrap();
    // The big tenant's cap, and each small tenant's one job.
    assert_eq!(claimed, CAP + 10);
    let lockable: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM job_tenant_slots
                               WHERE queue = 'q' AND job_id IS NULL
                               FOR UPDATE SKIP LOCKED) s",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(lockable, free_slots - claimed);
    claim.commit().await.unwrap();
    assert_eq!(held_slots(&pool, "q").await, claimed);
}

/// The completion statement frees the slots of the PostgreSQL-path jobs it
/// ends itself, as one set, whatever each job's outcome, leaves tenantless
/// jobs alone, and wakes the queue for the jobs now free to start. (No
/// outcome here makes a job due at once, whose own wake-up would hide a
/// missing one; `returned` is in the test above.)
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn one_completion_frees_every_slot_it_ends_and_wakes_the_queue(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(2))
        .await
        .unwrap();
    enqueue_for(&pool, "q", "acme", 4).await;
    enqueue_for(&pool, "q", "globex", 4).await;
    let tenantless = NewJob::new("work", json!({})).with_queue("q");
    jobwire_test_support::enqueue_ids(&pool, &[tenantless])
        .await
        .unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 50, LEASE)
        .await
        .unwrap();
    assert_eq!(
        claimed.len(),
        5,
        "two of each tenant and the tenantless job"
    );
    assert_eq!(held_slots(&pool, "q").await, 4);

    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("jobwire_jobs").await.unwrap();
    let outcomes = [
        FinishOutcome::Succeeded,
        FinishOutcome::Retry {
            delay: Duration::from_secs(3600),
            code: "E".into(),
            message: "later".into(),
        },
        FinishOutcome::Fail {
            code: "E".into(),
            message: "fatal".into(),
        },
        FinishOutcome::Succeeded,
        FinishOutcome::Succeeded,
    ];
    let batch: Vec<_> = claimed
        .iter()
        .zip(outcomes)
        .map(|(job, outcome)| (job.lease, outcome))
        .collect();
    let finished = jobwire_core::finish_many(&pool, "w", &batch).await.unwrap();
    let mut states: Vec<JobState> = finished
        .iter()
        .map(|result| match result {
            jobwire_core::FinishResult::Recorded { state, .. } => *state,
            other => panic!("not recorded: {other:?}"),
        })
        .collect();
    states.sort_by_key(|state| format!("{state:?}"));
    assert_eq!(
        states,
        [
            JobState::Failed,
            JobState::RetryWait,
            JobState::Succeeded,
            JobState::Succeeded,
            JobState::Succeeded
        ]
    );

    assert_eq!(held_slots(&pool, "q").await, 0);
    assert_eq!(jobs_naming_a_slot(&pool).await, 0);
    let woken = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("the completion wakes the queue")
        .unwrap();
    assert_eq!(woken.payload(), "q");
    // Both tenants may start two jobs again.
    let next = jobwire_core::claim_batch(&pool, "q", "w", 50, LEASE)
        .await
        .unwrap();
    assert_eq!(next.len(), 4);
    assert_eq!(held_slots(&pool, "q").await, 4);
}

/// One completion of a PostgreSQL-path job and a broker-queue job, both
/// holding slots: the statement frees the first itself, the row trigger
/// hands the second over to its tenant's next job with a wake-up, and
/// neither write trips over the other.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn one_completion_across_both_paths_frees_one_slot_and_hands_over_the_other(pool: PgPool) {
    jobwire_core::set_queue_dispatch(&pool, "b", &Dispatch::Broker { topic: "t".into() })
        .await
        .unwrap();
    for queue in ["b", "q"] {
        jobwire_core::set_tenant_cap(&pool, queue, None, Some(1))
            .await
            .unwrap();
    }
    let on_broker = enqueue_for(&pool, "b", "acme", 2).await;
    enqueue_for(&pool, "q", "acme", 2).await;
    let queues = vec!["b".to_owned()];
    let broker_job = jobwire_core::claim_by_ids(&pool, &on_broker[..1], &queues, "w", LEASE)
        .await
        .unwrap()
        .claimed
        .remove(0);
    let postgres_job = jobwire_core::claim_batch(&pool, "q", "w", 5, LEASE)
        .await
        .unwrap()
        .remove(0);

    finish_all_in_one_call(&pool, "w", &[postgres_job.lease, broker_job.lease]).await;
    assert_eq!(held_slots(&pool, "q").await, 0);
    let broker_holder: Option<Uuid> =
        sqlx::query_scalar("SELECT job_id FROM job_tenant_slots WHERE queue = 'b'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(broker_holder, Some(on_broker[1]));
    let woken: Vec<Uuid> =
        sqlx::query_scalar("SELECT message_key::uuid FROM job_outbox ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(woken, vec![on_broker[0], on_broker[1]]);
    // Only the job handed the slot names one.
    assert_eq!(jobs_naming_a_slot(&pool).await, 1);
}

/// A completion of several jobs on a broker queue hands each freed slot to
/// a different waiting job of the tenant, in claim order, with its wake-up,
/// in the completion's one statement; a slot above a cap lowered meanwhile
/// is freed, not handed over.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_broker_completion_hands_each_freed_slot_to_the_next_job(pool: PgPool) {
    capped_broker_queue(&pool, 3).await;
    let ids = enqueue_for(&pool, "b", "acme", 6).await;
    let running = wake_up_claim(&pool, &ids[..3]).await.claimed;
    assert_eq!(running.len(), 3);
    jobwire_core::set_tenant_cap(&pool, "b", None, Some(2))
        .await
        .unwrap();
    sqlx::query("DELETE FROM job_outbox")
        .execute(&pool)
        .await
        .unwrap();

    let leases: Vec<Lease> = running.iter().map(|job| job.lease).collect();
    finish_all_in_one_call(&pool, "c", &leases).await;

    let holders: Vec<(i32, Option<Uuid>)> =
        sqlx::query_as("SELECT slot, job_id FROM job_tenant_slots WHERE queue = 'b' ORDER BY slot")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        holders,
        vec![(1, Some(ids[3])), (2, Some(ids[4])), (3, None)]
    );
    let named: Vec<(Uuid, i32)> = sqlx::query_as(
        "SELECT job_id, tenant_slot FROM jobs WHERE tenant_slot IS NOT NULL ORDER BY tenant_slot",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(named, vec![(ids[3], 1), (ids[4], 2)]);
    let woken: Vec<(Uuid, String)> = sqlx::query_as(
        "SELECT message_key::uuid, headers->>'jobwire-reason' FROM job_outbox ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        woken,
        vec![(ids[3], "slot".to_owned()), (ids[4], "slot".to_owned())]
    );

    // The two handed a slot claim on their wake-ups; the last one waits.
    let next = wake_up_claim(&pool, &ids[3..]).await;
    assert_eq!(next.claimed.len(), 2);
    assert_eq!(next.missed, vec![(ids[5], jobwire_core::ClaimMiss::Capped)]);
}

/// A broker queue moved to the PostgreSQL path gives back the slots its
/// waiting jobs were handed (the PostgreSQL path's claim takes only jobs
/// without a slot); a running job keeps its own.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_queue_moved_to_the_postgres_path_gives_back_slots_handed_to_waiting_jobs(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    let ids = enqueue_for(&pool, "b", "acme", 4).await;
    let running = wake_up_claim(&pool, &ids[..2]).await.claimed;
    assert_eq!(running.len(), 2);
    // The first finishes: its slot is handed to the third job.
    finish_all_in_one_call(&pool, "c", &[running[0].lease]).await;
    let handed: Vec<Uuid> = sqlx::query_scalar(
        "SELECT job_id FROM jobs WHERE state = 'QUEUED' AND tenant_slot IS NOT NULL",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(handed, vec![ids[2]]);

    jobwire_core::set_queue_dispatch(&pool, "b", &Dispatch::Postgres)
        .await
        .unwrap();

    // Only the running job still holds a slot, and names it.
    let holders: Vec<Uuid> = sqlx::query_scalar(
        "SELECT job_id FROM job_tenant_slots WHERE queue = 'b' AND job_id IS NOT NULL",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(holders, vec![running[1].lease.job_id]);
    assert_eq!(jobs_naming_a_slot(&pool).await, 1);
    // The PostgreSQL path's claim takes the job that was handed the slot,
    // and no more than the cap allows.
    let claimed = jobwire_core::claim_batch(&pool, "b", "w", 10, LEASE)
        .await
        .unwrap();
    let claimed: Vec<Uuid> = claimed.iter().map(|job| job.lease.job_id).collect();
    assert_eq!(claimed, vec![ids[2]]);
    assert_eq!(held_slots(&pool, "b").await, 2);
}

/// A hand-over that lands after its queue was moved to the PostgreSQL path
/// (a completion or a producer's transaction that began before the move)
/// leaves a waiting job holding a slot; the reconciler's pass gives it
/// back, and only such slots.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_reconciler_gives_back_a_slot_handed_after_the_move_to_postgres(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    let ids = enqueue_for(&pool, "b", "acme", 4).await;
    let running = wake_up_claim(&pool, &ids[..2]).await.claimed;
    // The queue is moved first (as committed before the late hand-over)...
    sqlx::query("UPDATE job_queues SET dispatch = 'postgres', topic = NULL WHERE queue = 'b'")
        .execute(&pool)
        .await
        .unwrap();
    // ...then a completion hands a slot on as the broker path does: the
    // third job holds it, waiting.
    sqlx::query("UPDATE job_tenant_slots SET job_id = $1 WHERE queue = 'b' AND job_id = $2")
        .bind(ids[2])
        .bind(running[0].lease.job_id)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET state = 'SUCCEEDED', finished_at = now(), lease_owner = NULL,
                         lease_expires_at = NULL, tenant_slot = NULL WHERE job_id = $1",
    )
    .bind(running[0].lease.job_id)
    .execute(&pool)
    .await
    .unwrap();
    let slot_of_third: i32 =
        sqlx::query_scalar("SELECT slot FROM job_tenant_slots WHERE job_id = $1")
            .bind(ids[2])
            .fetch_one(&pool)
            .await
            .unwrap();
    sqlx::query("UPDATE jobs SET tenant_slot = $2 WHERE job_id = $1")
        .bind(ids[2])
        .bind(slot_of_third)
        .execute(&pool)
        .await
        .unwrap();
    let before = jobwire_core::claim_batch(&pool, "b", "w", 10, LEASE)
        .await
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("jobwire_jobs").await.unwrap();

    let released = jobwire_core::release_handed_slots(&pool).await.unwrap();
    // The queue's workers are woken for the job that can now be claimed.
    let woken = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("no notification")
        .unwrap();
    let after: Vec<Uuid> = jobwire_core::claim_batch(&pool, "b", "w", 10, LEASE)
        .await
        .unwrap()
        .iter()
        .map(|job| job.lease.job_id)
        .collect();
    assert!(before.is_empty(), "claimed before: {before:?}");
    assert_eq!(released, 1);
    assert_eq!(woken.payload(), "b");
    assert_eq!(after, vec![ids[2]]);
    // The running job's slot was never touched: two held, as the cap says.
    assert_eq!(held_slots(&pool, "b").await, 2);
    assert_eq!(
        jobwire_core::release_handed_slots(&pool).await.unwrap(),
        0,
        "a second pass found more"
    );
}

/// A job handed a slot gets one wake-up. A transaction that locked the job
/// without wanting it (a concurrent completion that looked for its tenant's
/// next job under an older snapshot passes it over on a second look, but
/// keeps the lock until it commits) must not make that wake-up's claim a
/// miss: the claim waits for the lock and takes the job. A lock held past
/// the claim's bound leaves the job waiting, as before.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_wake_up_claim_waits_out_a_passing_lock_on_a_job_handed_a_slot(pool: PgPool) {
    capped_broker_queue(&pool, 1).await;
    let ids = enqueue_for(&pool, "b", "acme", 3).await;
    let first = wake_up_claim(&pool, &ids[..1]).await.claimed.remove(0);
    finish_all_in_one_call(&pool, "c", &[first.lease]).await;
    let handed: Option<i32> = sqlx::query_scalar("SELECT tenant_slot FROM jobs WHERE job_id = $1")
        .bind(ids[1])
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(handed, Some(1));

    let passer = lock_job(&pool, ids[1]).await;
    let claim = tokio::spawn({
        let (pool, id) = (pool.clone(), ids[1]);
        async move { wake_up_claim(&pool, &[id]).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    passer.commit().await.unwrap();
    let woken = claim.await.unwrap();
    assert_eq!(woken.missed, vec![]);
    assert_eq!(woken.claimed.len(), 1);
    assert_eq!(woken.claimed[0].lease.job_id, ids[1]);

    // A lock that outlasts the bound: the claim gives up, reports the job
    // as waiting and writes it a fresh wake-up; the job keeps its slot.
    finish_all_in_one_call(&pool, "c", &[woken.claimed[0].lease]).await;
    let holder = lock_job(&pool, ids[2]).await;
    let given_up = wake_up_claim(&pool, &ids[2..]).await;
    assert_eq!(
        given_up.missed,
        vec![(ids[2], jobwire_core::ClaimMiss::Capped)]
    );
    holder.rollback().await.unwrap();
    let state: (JobState, Option<i32>) =
        sqlx::query_as("SELECT state, tenant_slot FROM jobs WHERE job_id = $1")
            .bind(ids[2])
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(state, (JobState::Queued, Some(1)));
    // The hand-over's, then the one written when the claim gave up.
    assert_eq!(
        wake_up_reasons(&pool, ids[2]).await,
        vec!["slot".to_owned(), "slot".to_owned()]
    );
    let woken_again = wake_up_claim(&pool, &ids[2..]).await;
    assert_eq!(woken_again.claimed.len(), 1);
}

/// One wake-up claim for several jobs of a capped tenant: those handed a
/// slot are claimed together, each into its own slot and once however often
/// it is named; one a passing session holds is waited for; one without a
/// slot is left waiting as capped (migration 20261207000007).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_wake_up_claim_takes_the_jobs_handed_a_slot_together(pool: PgPool) {
    capped_broker_queue(&pool, 3).await;
    let ids = enqueue_for(&pool, "b", "acme", 4).await;
    let mut handed = Vec::new();
    for id in &ids[..3] {
        handed.push(slot_of(&pool, *id).await.expect("handed at enqueue"));
    }
    assert_eq!(slot_of(&pool, ids[3]).await, None);

    let passer = lock_job(&pool, ids[1]).await;
    let claim = tokio::spawn({
        let (pool, named) = (
            pool.clone(),
            vec![ids[2], ids[0], ids[3], ids[0], ids[1], ids[2]],
        );
        async move { wake_up_claim(&pool, &named).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    passer.commit().await.unwrap();
    let woken = claim.await.unwrap();

    let mut claimed: Vec<Uuid> = woken.claimed.iter().map(|job| job.lease.job_id).collect();
    claimed.sort();
    assert_eq!(claimed, ids[..3].to_vec());
    assert_eq!(
        woken.missed,
        vec![(ids[3], jobwire_core::ClaimMiss::Capped)]
    );
    for (id, slot) in ids[..3].iter().zip(&handed) {
        assert_eq!(slot_of(&pool, *id).await, Some(*slot), "{id}");
        assert_eq!(
            state_and_attempts(&pool, *id).await,
            ("RUNNING".to_owned(), 1)
        );
        let holder: Option<Uuid> = sqlx::query_scalar(
            "SELECT job_id FROM job_tenant_slots WHERE queue = 'b' AND tenant = 'acme' AND slot = $1",
        )
        .bind(slot)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(holder, Some(*id));
    }
    assert_eq!(held_slots(&pool, "b").await, 3);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_claim_for_more_than_one_statement_takes_them_in_turns(pool: PgPool) {
    // A cap that does not bind: the claim gets all it asked for, though one
    // capped statement takes at most 100.
    jobwire_core::set_tenant_cap(&pool, "roomy", None, Some(1000))
        .await
        .unwrap();
    enqueue_for(&pool, "roomy", "big", 260).await;
    let claimed = jobwire_core::claim_batch(&pool, "roomy", "w", 250, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 250);
    let distinct: std::collections::HashSet<_> =
        claimed.iter().map(|job| job.lease.job_id).collect();
    assert_eq!(distinct.len(), 250);
    assert_eq!(held_slots(&pool, "roomy").await, 250);
    assert_eq!(jobs_naming_a_slot(&pool).await, 250);

    // A cap that binds: the claim stops at it, after one statement.
    jobwire_core::set_tenant_cap(&pool, "tight", None, Some(30))
        .await
        .unwrap();
    enqueue_for(&pool, "tight", "big", 260).await;
    let claimed = jobwire_core::claim_batch(&pool, "tight", "w", 250, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 30);
    assert_eq!(held_slots(&pool, "tight").await, 30);
}

/// The broker path's safety net claims a job holding a tenant slot only
/// once it has held that slot past the bound. A capped tenant's job waits
/// for its slot as long as its tenant's backlog lasts; just handed one, its
/// wake-up is on the way, not lost.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_safety_net_times_a_slot_holder_from_its_hand_over(pool: PgPool) {
    const BOUND: Duration = Duration::from_secs(180);
    capped_broker_queue(&pool, 1).await;
    let ids = enqueue_for(&pool, "b", "acme", 2).await;
    // Both became due ten minutes ago; the first holds the slot since then.
    backdate_every_job_ten_minutes(&pool).await;
    let first = wake_up_claim(&pool, &ids[..1]).await.claimed.remove(0);
    // Its completion hands the slot to the second job, now.
    jobwire_core::complete(&pool, "c", first.lease)
        .await
        .unwrap();
    assert_eq!(jobs_naming_a_slot(&pool).await, 1);

    let early = jobwire_core::claim_overdue(&pool, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    assert!(
        early.is_empty(),
        "a job handed its slot just now is not overdue: {early:?}"
    );

    // Held past the bound without being claimed: its wake-up was lost.
    sqlx::query("UPDATE jobs SET updated_at = now() - interval '181 seconds' WHERE job_id = $1")
        .bind(ids[1])
        .execute(&pool)
        .await
        .unwrap();
    let late = jobwire_core::claim_overdue(&pool, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    let late_ids: Vec<Uuid> = late.iter().map(|job| job.lease.job_id).collect();
    assert_eq!(late_ids, vec![ids[1]]);
}

/// The safety net never runs a tenant past its cap: jobs overdue by any
/// measure, waiting while their tenant's every slot is taken, stay where
/// they are; once the slot is free again it takes the next one, no more.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_safety_net_never_claims_past_a_tenants_cap(pool: PgPool) {
    const BOUND: Duration = Duration::from_secs(180);
    capped_broker_queue(&pool, 1).await;
    let ids = enqueue_for(&pool, "b", "acme", 3).await;
    backdate_every_job_ten_minutes(&pool).await;
    let first = wake_up_claim(&pool, &ids[..1]).await.claimed.remove(0);

    let net = jobwire_core::claim_overdue(&pool, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    assert!(net.is_empty(), "claimed past the cap: {net:?}");

    // The slot freed (and handed to the next job), the net may take that
    // one once it is overdue too, and only that one.
    jobwire_core::complete(&pool, "c", first.lease)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET updated_at = now() - interval '181 seconds' WHERE state = 'QUEUED'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let net = jobwire_core::claim_overdue(&pool, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    assert_eq!(net.len(), 1, "{net:?}");
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = 'b' AND state = 'RUNNING'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(running, 1);
}

/// A job that held its slot through a long pause gets a fresh wake-up when
/// the queue resumes; the safety net times it from that wake-up, not from
/// its hand-over before the pause.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn resuming_a_queue_restarts_the_safety_net_clock_of_a_slot_holder(pool: PgPool) {
    const BOUND: Duration = Duration::from_secs(180);
    capped_broker_queue(&pool, 1).await;
    let ids = enqueue_for(&pool, "b", "acme", 1).await;
    assert_eq!(jobs_naming_a_slot(&pool).await, 1);
    jobwire_core::set_queue_paused(&pool, "b", true)
        .await
        .unwrap();
    // Handed its slot (and its wake-up) ten minutes ago, before the pause.
    backdate_every_job_ten_minutes(&pool).await;
    let woken = jobwire_core::resume_queue(&pool, "b").await.unwrap();
    assert_eq!(woken, 1, "the slot holder gets a fresh wake-up");

    let early = jobwire_core::claim_overdue(&pool, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    assert!(
        early.is_empty(),
        "a job woken by the resume just now is not overdue: {early:?}"
    );
    // Its new wake-up claims it as usual.
    let claimed = wake_up_claim(&pool, &ids).await.claimed;
    assert_eq!(claimed.len(), 1);
}

/// The capped tenants' jobs are claimed by a second statement. When it
/// fails, what the first statement claimed (and committed) comes back to be
/// run, and the capped jobs are reported undecided, untouched; inside a
/// transaction, or with nothing claimed first, the failure is the answer.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_failed_capped_wake_up_claim_keeps_what_the_first_statement_claimed(pool: PgPool) {
    capped_broker_queue(&pool, 3).await;
    let untenanted = jobwire_test_support::enqueue_ids(
        &pool,
        &[
            NewJob::new("work", json!({})).with_queue("b"),
            NewJob::new("work", json!({})).with_queue("b"),
        ],
    )
    .await
    .unwrap();
    let capped = enqueue_for(&pool, "b", "acme", 1).await;
    jobwire_test_support::faults::break_capped_wake_up_claim(&pool).await;

    let outcome = wake_up_claim(&pool, &[untenanted[0], capped[0]]).await;
    let claimed: Vec<Uuid> = outcome.claimed.iter().map(|j| j.lease.job_id).collect();
    assert_eq!(claimed, vec![untenanted[0]]);
    assert_eq!(outcome.undecided, capped);
    assert!(outcome.missed.is_empty(), "{:?}", outcome.missed);
    // The first statement's claim committed: the job is the caller's.
    assert_eq!(
        state_and_attempts(&pool, untenanted[0]).await,
        ("RUNNING".into(), 1)
    );
    assert_eq!(
        state_and_attempts(&pool, capped[0]).await,
        ("QUEUED".into(), 0)
    );

    // Nothing claimed before the failure: an error, as any failed claim.
    let queues = vec!["b".to_owned()];
    let alone = jobwire_core::claim_by_ids(&pool, &capped, &queues, "c", LEASE).await;
    assert!(alone.is_err(), "{alone:?}");
    // In the caller's transaction the failure took the first claim with it.
    let mut tx = pool.begin().await.unwrap();
    let in_tx =
        jobwire_core::claim_by_ids(&mut *tx, &[untenanted[1], capped[0]], &queues, "c", LEASE)
            .await;
    assert!(in_tx.is_err(), "{in_tx:?}");
    tx.rollback().await.unwrap();
    assert_eq!(
        state_and_attempts(&pool, untenanted[1]).await,
        ("QUEUED".into(), 0)
    );

    jobwire_test_support::faults::repair_capped_wake_up_claim(&pool).await;
    let claimed = wake_up_claim(&pool, &capped).await.claimed;
    assert_eq!(
        claimed.len(),
        1,
        "the undecided job's next wake-up claims it"
    );
}

/// Slot rows of `tenant` on `queue`, held or free.
async fn slot_rows(pool: &PgPool, queue: &str, tenant: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_tenant_slots WHERE queue = $1 AND tenant = $2")
        .bind(queue)
        .bind(tenant)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// One job of `tenant` on PostgreSQL-path queue `q` claimed and finished:
/// the tenant is left with its slot rows and nothing to do.
async fn run_one_job_of(pool: &PgPool, tenant: &str) {
    enqueue_for(pool, "q", tenant, 1).await;
    let claimed = jobwire_core::claim_batch(pool, "q", "w", 10, LEASE)
        .await
        .unwrap();
    let leases: Vec<Lease> = claimed.iter().map(|job| job.lease).collect();
    finish_all_in_one_call(pool, "w", &leases).await;
}

/// One job of `tenant` on broker queue `b` woken, claimed by its wake-up
/// and finished: as `run_one_job_of`, on the broker path.
async fn run_one_broker_job_of(pool: &PgPool, tenant: &str) {
    let ids = enqueue_for(pool, "b", tenant, 1).await;
    let claimed = wake_up_claim(pool, &ids).await.claimed;
    finish_all_in_one_call(pool, "c", &[claimed[0].lease]).await;
}

/// A tenant that holds no slot and has no waiting job loses its slot rows
/// to the sweep; its next job gets them back, and the cap holds as before.
/// A tenant with a job running or waiting (due or not) keeps its rows.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_sweep_forgets_only_idle_tenants_and_their_rows_come_back(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(2))
        .await
        .unwrap();
    for tenant in ["idle", "running", "waiting"] {
        run_one_job_of(&pool, tenant).await;
        assert_eq!(slot_rows(&pool, "q", tenant).await, 2);
    }
    enqueue_for(&pool, "q", "running", 1).await;
    let running = jobwire_core::claim_batch(&pool, "q", "w", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(running.len(), 1);
    let later = NewJob::new("work", json!({}))
        .with_queue("q")
        .with_tenant("waiting")
        .with_delay(chrono::TimeDelta::hours(1));
    jobwire_test_support::enqueue_ids(&pool, &[later])
        .await
        .unwrap();

    assert_eq!(
        jobwire_core::forget_idle_tenant_slots(&pool).await.unwrap(),
        1
    );
    assert_eq!(
        (
            slot_rows(&pool, "q", "idle").await,
            slot_rows(&pool, "q", "running").await,
            slot_rows(&pool, "q", "waiting").await
        ),
        (0, 2, 2)
    );
    // Nothing idle left: a second sweep forgets nothing.
    assert_eq!(
        jobwire_core::forget_idle_tenant_slots(&pool).await.unwrap(),
        0
    );

    enqueue_for(&pool, "q", "idle", 5).await;
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 10, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2, "the cap holds over re-created rows");
    assert_eq!(slot_rows(&pool, "q", "idle").await, 2);
    assert_eq!(held_slots(&pool, "q").await, 3);
}

/// A transaction that has made sure a tenant's slot rows exist (as a claim
/// does before it locks the ones it takes) keeps them until it ends: the
/// sweep leaves the queue alone meanwhile and forgets the tenant once the
/// transaction is over.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_sweep_leaves_slot_rows_a_transaction_made_sure_of(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(2))
        .await
        .unwrap();
    run_one_job_of(&pool, "acme").await;

    let mut claimer = pool.begin().await.unwrap();
    sqlx::query("SELECT jobwire_ensure_tenant_slots('q', 'acme', 2)")
        .execute(&mut *claimer)
        .await
        .unwrap();
    assert_eq!(
        jobwire_core::forget_idle_tenant_slots(&pool).await.unwrap(),
        0
    );
    let taken: Option<i32> = sqlx::query_scalar(
        "UPDATE job_tenant_slots SET job_id = gen_random_uuid()
         WHERE queue = 'q' AND tenant = 'acme' AND slot = 1 RETURNING slot",
    )
    .fetch_optional(&mut *claimer)
    .await
    .unwrap();
    assert_eq!(
        taken,
        Some(1),
        "the slot row the transaction made sure of is gone"
    );
    claimer.rollback().await.unwrap();

    assert_eq!(
        jobwire_core::forget_idle_tenant_slots(&pool).await.unwrap(),
        1
    );
    assert_eq!(slot_rows(&pool, "q", "acme").await, 0);
}

/// A capped tenant's job enqueued on a broker queue while the sweep is
/// deleting that tenant's rows waits for the sweep, then creates the rows
/// again and is handed a slot with its wake-up: not left waiting for a
/// hand-over that no slot would make.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_enqueued_during_the_sweep_gets_its_slot_and_wake_up(pool: PgPool) {
    capped_broker_queue(&pool, 1).await;
    run_one_broker_job_of(&pool, "acme").await;
    assert_eq!(slot_rows(&pool, "b", "acme").await, 1);

    let mut sweep = pool.begin().await.unwrap();
    let forgotten: i32 =
        sqlx::query_scalar("SELECT jobwire_forget_idle_tenant_slots('b', ARRAY['acme'])")
            .fetch_one(&mut *sweep)
            .await
            .unwrap();
    assert_eq!(forgotten, 1);
    let enqueue = tokio::spawn({
        let pool = pool.clone();
        async move { enqueue_for(&pool, "b", "acme", 1).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    sweep.commit().await.unwrap();
    let next = enqueue.await.unwrap()[0];

    let slot: Option<i32> = sqlx::query_scalar("SELECT tenant_slot FROM jobs WHERE job_id = $1")
        .bind(next)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(slot, Some(1));
    assert_eq!(held_slots(&pool, "b").await, 1);
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 1);
    assert_eq!(wake_up_claim(&pool, &[next]).await.claimed.len(), 1);
}

/// A job of tenant `acme` on broker queue `b` (cap 1) that is due, holds no
/// slot and has lost its wake-up, while `acme` has no slot rows: the sweep
/// forgot them after its last job, and this job was enqueued delayed (which
/// makes sure of no slot) and became due.
async fn due_job_of_a_forgotten_tenant(pool: &PgPool) -> Uuid {
    capped_broker_queue(pool, 1).await;
    run_one_broker_job_of(pool, "acme").await;
    assert_eq!(
        jobwire_core::forget_idle_tenant_slots(pool).await.unwrap(),
        1
    );
    let delayed = NewJob::new("work", json!({}))
        .with_queue("b")
        .with_tenant("acme")
        .with_delay(chrono::TimeDelta::hours(1));
    let id = jobwire_test_support::enqueue_ids(pool, &[delayed])
        .await
        .unwrap()[0];
    sqlx::query("UPDATE jobs SET run_after = now() - interval '1 minute' WHERE job_id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    lose_wake_ups(pool, id).await.unwrap();
    assert_eq!(slot_rows(pool, "b", "acme").await, 0);
    id
}

/// The job's wake-up reasons, oldest first.
async fn wake_up_reasons(pool: &PgPool, id: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT headers->>'jobwire-reason' FROM job_outbox WHERE message_key = $1 ORDER BY id",
    )
    .bind(id.to_string())
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The reconciler's hand-out finds a capped tenant by its due jobs, not by
/// its slot rows: a tenant forgotten as idle gets its rows back and its due
/// job a slot and a wake-up, instead of waiting for the safety net.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_reconciler_hands_a_slot_to_a_due_job_of_a_forgotten_tenant(pool: PgPool) {
    let id = due_job_of_a_forgotten_tenant(&pool).await;
    assert_eq!(
        jobwire_core::hand_out_free_tenant_slots(&pool)
            .await
            .unwrap(),
        1
    );
    assert_eq!(slot_rows(&pool, "b", "acme").await, 1);
    assert_eq!(
        wake_up_reasons(&pool, id).await,
        vec!["reconcile".to_owned()]
    );
    assert_eq!(wake_up_claim(&pool, &[id]).await.claimed.len(), 1);
}

/// So does resuming a paused queue.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn resuming_a_queue_hands_a_slot_to_a_due_job_of_a_forgotten_tenant(pool: PgPool) {
    let id = due_job_of_a_forgotten_tenant(&pool).await;
    jobwire_core::set_queue_paused(&pool, "b", true)
        .await
        .unwrap();
    assert_eq!(jobwire_core::resume_queue(&pool, "b").await.unwrap(), 1);
    assert_eq!(wake_up_reasons(&pool, id).await, vec!["resume".to_owned()]);
    assert_eq!(wake_up_claim(&pool, &[id]).await.claimed.len(), 1);
}

/// The slot a job holds, if any.
async fn slot_of(pool: &PgPool, id: Uuid) -> Option<i32> {
    sqlx::query_scalar("SELECT tenant_slot FROM jobs WHERE job_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A job of `acme` enqueued on broker queue `b`, in `producer`'s open
/// transaction.
async fn enqueue_in(producer: &mut sqlx::PgConnection) -> Uuid {
    let job = NewJob::new("work", json!({}))
        .with_queue("b")
        .with_tenant("acme");
    jobwire_core::enqueue(producer, &job).await.unwrap().job_id
}

/// Broker queue `b`, every tenant capped at one running job, and one job of
/// `acme` claimed by its wake-up (consumer `c`): its lease.
async fn acme_running_on_its_one_slot(pool: &PgPool) -> Lease {
    capped_broker_queue(pool, 1).await;
    let running = enqueue_for(pool, "b", "acme", 1).await;
    wake_up_claim(pool, &running).await.claimed.remove(0).lease
}

/// A producer enqueues a capped tenant's job in its business transaction,
/// and before it commits the tenant's running job finishes. The completion
/// cannot see the new job and frees the slot; the producer's commit hands
/// the slot to it, with its wake-up. It used to wait with a free slot and
/// no wake-up until the reconciler's hand-out, or for ever without one.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_job_enqueued_while_its_tenants_slot_is_freed_gets_the_slot_at_commit(pool: PgPool) {
    let first = acme_running_on_its_one_slot(&pool).await;

    let mut producer = pool.begin().await.unwrap();
    let next = enqueue_in(&mut producer).await;
    finish_all_in_one_call(&pool, "c", &[first]).await;
    assert_eq!(held_slots(&pool, "b").await, 0);
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 0);
    producer.commit().await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 1);
    assert_eq!(wake_up_claim(&pool, &[next]).await.claimed.len(), 1);
}

/// The other order: the producer commits while the transaction that frees
/// the slot has not. The producer's hand-out sees the slot still held; the
/// freeing transaction hands it out as it commits, under a snapshot that
/// sees the producer's job.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_slot_freed_while_a_producer_commits_is_handed_out_at_the_freeing_commit(pool: PgPool) {
    let first = acme_running_on_its_one_slot(&pool).await;

    let mut completion = pool.begin().await.unwrap();
    let finished =
        jobwire_core::finish_many(&mut *completion, "c", &[(first, FinishOutcome::Succeeded)])
            .await
            .unwrap();
    assert!(matches!(
        finished[..],
        [jobwire_core::FinishResult::Recorded { .. }]
    ));
    let next = enqueue_for(&pool, "b", "acme", 1).await[0];
    assert_eq!(slot_of(&pool, next).await, None);
    completion.commit().await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_up_reasons(&pool, next).await, vec!["slot".to_owned()]);
}

/// As above with a slot freed another way than by a completion (a sweep, a
/// cancel, a hand edit: here the running job's row deleted by hand), which
/// gives the slot back through its row trigger.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_slot_freed_by_a_row_trigger_while_a_producer_commits_is_handed_out(pool: PgPool) {
    let first = acme_running_on_its_one_slot(&pool).await;

    let mut edit = pool.begin().await.unwrap();
    sqlx::query("DELETE FROM jobs WHERE job_id = $1")
        .bind(first.job_id)
        .execute(&mut *edit)
        .await
        .unwrap();
    let next = enqueue_for(&pool, "b", "acme", 1).await[0];
    assert_eq!(slot_of(&pool, next).await, None);
    edit.commit().await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_up_reasons(&pool, next).await, vec!["slot".to_owned()]);
}

/// The freeing transaction's hand-out waits for a producer between its own
/// hand-out and its commit (here a transaction holding the tenant's lock as
/// that hand-out leaves it), then sees the producer's job.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_freed_slots_hand_out_waits_for_a_committing_producer(pool: PgPool) {
    let first = acme_running_on_its_one_slot(&pool).await;

    let mut producer = pool.begin().await.unwrap();
    let next = enqueue_in(&mut producer).await;
    let handed: i32 =
        sqlx::query_scalar("SELECT jobwire_hand_out_free_slots(ARRAY['b'], ARRAY['acme'], NULL)")
            .fetch_one(&mut *producer)
            .await
            .unwrap();
    assert_eq!(handed, 0, "the tenant's one slot is held");
    let completion = tokio::spawn({
        let pool = pool.clone();
        async move { finish_all_in_one_call(&pool, "c", &[first]).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    producer.commit().await.unwrap();
    completion.await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 1);
}

/// A queue's resume hands out slots (holding its tenants' hand-out locks
/// until it commits) only after its own row writes: a row it must wait for
/// may be held by a transaction that freed a slot and waits at its commit
/// for one of those locks. Here a cancel of tenant `u`'s job holding a slot
/// is open while the queue resumes, and another tenant of the same lock
/// bucket has a job waiting for a slot. Handing out first deadlocked.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_resume_and_a_freeing_commit_do_not_deadlock(pool: PgPool) {
    capped_broker_queue(&pool, 1).await;
    jobwire_core::set_queue_paused(&pool, "b", true)
        .await
        .unwrap();
    let neighbour: String = sqlx::query_scalar(
        "SELECT 't' || g FROM generate_series(1, 10000) g
         WHERE jobwire_tenant_hand_out_bucket('b', 't' || g) = jobwire_tenant_hand_out_bucket('b', 'u')
         LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let cancelled = enqueue_for(&pool, "b", "u", 1).await[0];
    assert_eq!(slot_of(&pool, cancelled).await, Some(1));
    let waiting = enqueue_for(&pool, "b", &neighbour, 2).await;
    assert_eq!(slot_of(&pool, waiting[1]).await, None);

    let mut cancel = pool.begin().await.unwrap();
    sqlx::query("UPDATE jobs SET state = 'CANCELLED', finished_at = now() WHERE job_id = $1")
        .bind(cancelled)
        .execute(&mut *cancel)
        .await
        .unwrap();
    let resume = tokio::spawn({
        let pool = pool.clone();
        async move { jobwire_core::resume_queue(&pool, "b").await }
    });
    until_a_session_waits_for_a_lock(&pool).await;
    cancel.commit().await.unwrap();
    resume.await.unwrap().unwrap();

    assert_eq!(held_slots(&pool, "b").await, 1, "the neighbour's first job");
    assert_eq!(slot_of(&pool, waiting[0]).await, Some(1));
}

/// A transaction's every enqueue is handed out, also when a framework has
/// the deferred checks run at each statement's end
/// (`SET CONSTRAINTS ALL IMMEDIATE`): each statement's tenants then get
/// their slots as the statement ends, the first statement's too.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn every_statement_of_a_transaction_is_handed_out_with_immediate_constraints(pool: PgPool) {
    capped_broker_queue(&pool, 1).await;
    let mut producer = pool.begin().await.unwrap();
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE")
        .execute(&mut *producer)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for tenant in ["acme", "globex", "initech"] {
        let job = NewJob::new("work", json!({}))
            .with_queue("b")
            .with_tenant(tenant);
        let id = jobwire_core::enqueue(&mut *producer, &job)
            .await
            .unwrap()
            .job_id;
        // Handed out as its statement ended, the first statement too.
        let slot: Option<i32> =
            sqlx::query_scalar("SELECT tenant_slot FROM jobs WHERE job_id = $1")
                .bind(id)
                .fetch_one(&mut *producer)
                .await
                .unwrap();
        assert_eq!(slot, Some(1), "{tenant}");
        ids.push(id);
    }
    producer.commit().await.unwrap();

    for id in ids {
        assert_eq!(slot_of(&pool, id).await, Some(1));
        assert_eq!(wake_ups_for(&pool, id).await.unwrap(), 1);
    }
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM job_tenant_hand_outs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// A completion that frees more of a tenant's slots than it has jobs to
/// hand them to, in a transaction whose deferred checks run at each
/// statement's end (`SET CONSTRAINTS ALL IMMEDIATE`, as a handler's own
/// transaction may): the slots noted for the hand-out are handed at once,
/// and must see the job the statement itself handed a slot to. It was
/// handed a second slot, and the statement failed (27000).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_completion_with_immediate_constraints_hands_a_waiting_job_one_slot(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    let ids = enqueue_for(&pool, "b", "acme", 3).await;
    let running: Vec<Lease> = wake_up_claim(&pool, &ids[..2])
        .await
        .claimed
        .iter()
        .map(|job| job.lease)
        .collect();
    assert_eq!(running.len(), 2);
    assert_eq!(slot_of(&pool, ids[2]).await, None);

    let mut completion = pool.begin().await.unwrap();
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE")
        .execute(&mut *completion)
        .await
        .unwrap();
    let reports: Vec<(Lease, FinishOutcome)> = running
        .iter()
        .map(|lease| (*lease, FinishOutcome::Succeeded))
        .collect();
    let finished = jobwire_core::finish_many(&mut *completion, "c", &reports)
        .await
        .unwrap();
    assert_eq!(finished.len(), 2);
    completion.commit().await.unwrap();

    let waiting = slot_of(&pool, ids[2]).await;
    assert!(waiting.is_some());
    assert_eq!(held_slots(&pool, "b").await, 1, "one slot for the one job");
    let holder: Uuid =
        sqlx::query_scalar("SELECT job_id FROM job_tenant_slots WHERE queue = 'b' AND slot = $1")
            .bind(waiting)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(holder, ids[2]);
    assert_eq!(
        wake_up_reasons(&pool, ids[2]).await,
        vec!["slot".to_owned()]
    );
}

/// A hand-out takes a slot only for a job it has. Two producers of one
/// tenant (cap 2, both slots free): the first has handed out but not
/// committed when the second commits. The first used to keep the second
/// slot locked with no job for it, and the second producer's job got
/// neither slot.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_hand_out_leaves_a_slot_it_has_no_job_for_to_the_next_producer(pool: PgPool) {
    capped_broker_queue(&pool, 2).await;
    run_one_broker_job_of(&pool, "acme").await;
    assert_eq!(slot_rows(&pool, "b", "acme").await, 2);

    let mut first = pool.begin().await.unwrap();
    let one = enqueue_in(&mut first).await;
    // The hand-out the first producer's commit makes, made now.
    let handed: i32 =
        sqlx::query_scalar("SELECT jobwire_hand_out_free_slots(ARRAY['b'], ARRAY['acme'], NULL)")
            .fetch_one(&mut *first)
            .await
            .unwrap();
    assert_eq!(handed, 1);
    let two = enqueue_for(&pool, "b", "acme", 1).await[0];
    assert_eq!(slot_of(&pool, two).await, Some(2));
    first.commit().await.unwrap();

    assert_eq!(slot_of(&pool, one).await, Some(1));
    assert_eq!(wake_ups_for(&pool, one).await.unwrap(), 1);
    assert_eq!(wake_ups_for(&pool, two).await.unwrap(), 1);
}

/// A job holding no slot whose own wake-up arrives (a retry's, a delayed
/// job's, a duplicate) while its tenant is at its cap: the wake-up claim
/// locks the job, finds no free slot and claims nothing. Before it commits,
/// the tenant's running job finishes; the completion skips the locked job,
/// frees the slot without a successor, and its hand-out at commit skips the
/// job too. The claim's commit hands the slot out. The job used to wait
/// with a free slot and no wake-up until the reconciler's hand-out.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_wake_up_claim_hands_out_a_slot_freed_before_it_commits(pool: PgPool) {
    let first = acme_running_on_its_one_slot(&pool).await;
    let next = enqueue_for(&pool, "b", "acme", 1).await[0];
    assert_eq!(
        wake_ups_for(&pool, next).await.unwrap(),
        0,
        "no slot, no wake-up"
    );

    let mut claim = pool.begin().await.unwrap();
    let queues = vec!["b".to_owned()];
    let outcome = jobwire_core::claim_by_ids(&mut *claim, &[next], &queues, "c", LEASE)
        .await
        .unwrap();
    assert!(outcome.claimed.is_empty());
    assert!(
        matches!(outcome.missed[..], [(id, jobwire_core::ClaimMiss::Capped)] if id == next),
        "{:?}",
        outcome.missed
    );
    finish_all_in_one_call(&pool, "c", &[first]).await;
    assert_eq!(
        held_slots(&pool, "b").await,
        0,
        "freed, with nobody to take it"
    );
    assert_eq!(slot_of(&pool, next).await, None);
    claim.commit().await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 1);
    assert_eq!(wake_up_claim(&pool, &[next]).await.claimed.len(), 1);
}

/// The broker path's safety net claims a tenant's overdue job that holds
/// no slot while the tenant's slot is free: it locks the slot, then finds
/// the job locked by someone else and claims nothing. A producer commits
/// a job of that tenant meanwhile; its hand-out at commit skips the locked
/// slot and leaves its job without one. The claim's commit hands the slot
/// out. The job used to wait without a slot or a wake-up for the
/// reconciler's hand-out.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_slot_a_capped_claim_locked_and_left_is_handed_out_at_its_commit(pool: PgPool) {
    const BOUND: Duration = Duration::from_secs(180);
    let first = acme_running_on_its_one_slot(&pool).await;
    let overdue = enqueue_for(&pool, "b", "acme", 1).await[0];
    backdate_every_job_ten_minutes(&pool).await;
    // The overdue job locked while the running one finishes: the slot is
    // freed with nobody to take it, and the overdue job holds none.
    let holder = lock_job(&pool, overdue).await;
    finish_all_in_one_call(&pool, "c", &[first]).await;
    assert_eq!(held_slots(&pool, "b").await, 0);
    assert_eq!(slot_of(&pool, overdue).await, None);

    let mut net = pool.begin().await.unwrap();
    let claimed = jobwire_core::claim_overdue(&mut *net, "b", BOUND, "net", 5, LEASE)
        .await
        .unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    let next = enqueue_for(&pool, "b", "acme", 1).await[0];
    assert_eq!(
        slot_of(&pool, next).await,
        None,
        "the producer's hand-out skipped the slot the claim holds"
    );
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 0);
    net.commit().await.unwrap();

    assert_eq!(slot_of(&pool, next).await, Some(1));
    assert_eq!(wake_ups_for(&pool, next).await.unwrap(), 1);
    assert_eq!(wake_up_claim(&pool, &[next]).await.claimed.len(), 1);
    holder.rollback().await.unwrap();
}

/// Tenants coming and going on a broker queue (cap 2) while the sweep runs
/// all the time: consumers take wake-ups from the outbox and claim by id,
/// hold each job 20 ms and finish it (which hands the slot on with the next
/// job's wake-up). A tenant's next burst often arrives while the last jobs
/// of its previous one still run, and every sixth burst all tenants go
/// idle. Sampled throughout, no tenant ever has more than 2 jobs running
/// (a sweep that deleted held slots would let a new burst past the cap);
/// every job runs exactly once, each reached through its own wake-up or a
/// hand-over: none is left waiting without either.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn tenants_come_and_go_under_a_running_sweep_without_a_stranded_job(pool: PgPool) {
    const TENANTS: usize = 3;
    const BURSTS: usize = 30;
    const PER_BURST: usize = 4;
    let total = BURSTS * PER_BURST;
    capped_broker_queue(&pool, 2).await;
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = || finished.load(std::sync::atomic::Ordering::SeqCst) >= total;
    let mut tasks = tokio::task::JoinSet::new();

    tasks.spawn({
        let pool = pool.clone();
        async move {
            for burst in 0..BURSTS {
                enqueue_for(&pool, "b", &format!("t{}", burst % TENANTS), PER_BURST).await;
                let pause = if burst % 6 == 5 { 150 } else { 10 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    });
    for consumer in 0..3 {
        let (pool, finished) = (pool.clone(), finished.clone());
        tasks.spawn(async move {
            let owner = format!("c{consumer}");
            while finished.load(std::sync::atomic::Ordering::SeqCst) < total {
                let woken: Vec<String> = sqlx::query_scalar(
                    "DELETE FROM job_outbox WHERE id IN
                         (SELECT id FROM job_outbox ORDER BY id LIMIT 8 FOR UPDATE SKIP LOCKED)
                     RETURNING message_key",
                )
                .fetch_all(&pool)
                .await
                .unwrap();
                let ids: Vec<Uuid> = woken.iter().map(|key| key.parse().unwrap()).collect();
                let claim =
                    jobwire_core::claim_by_ids(&pool, &ids, &["b".to_owned()], &owner, LEASE)
                        .await
                        .unwrap();
                if claim.claimed.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                let leases: Vec<Lease> = claim.claimed.iter().map(|job| job.lease).collect();
                finish_all_in_one_call(&pool, &owner, &leases).await;
                finished.fetch_add(leases.len(), std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
    let sweeper = tokio::spawn({
        let (pool, finished) = (pool.clone(), finished.clone());
        async move {
            let mut forgotten = 0;
            while finished.load(std::sync::atomic::Ordering::SeqCst) < total {
                forgotten += jobwire_core::forget_idle_tenant_slots(&pool).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            forgotten
        }
    });

    let mut most_running = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {total} jobs finished after 120 s: a job waits without a slot or a wake-up",
            finished.load(std::sync::atomic::Ordering::SeqCst)
        );
        let running: i64 = sqlx::query_scalar(
            "SELECT coalesce(max(n), 0) FROM
                 (SELECT count(*) AS n FROM jobs WHERE queue = 'b' AND state = 'RUNNING'
                  GROUP BY tenant) per_tenant",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert!(running <= 2, "a tenant had {running} jobs running");
        most_running = most_running.max(running);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    while let Some(result) = tasks.join_next().await {
        result.unwrap();
    }
    let forgotten = sweeper.await.unwrap();
    assert_eq!(
        most_running, 2,
        "the cap was never reached: the test proves nothing"
    );
    assert!(
        forgotten > 0,
        "the sweep never forgot a tenant while jobs ran"
    );
    let runs: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT state::text, attempt_count, count(*) FROM jobs WHERE queue = 'b'
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(runs, vec![("SUCCEEDED".to_owned(), 1, total as i64)]);
}

/// A capped claim planned while its queue was empty (a worker that started
/// on a quiet database) still walks the indexes once a tenant's backlog
/// has arrived. Planned once per session, the claim kept a plan for a table
/// of one row: every claim then read the whole backlog, and joined its
/// claimed jobs to every row of `jobs`. Counted in the rows the claim read
/// from `jobs` (this transaction's statistics), not in time.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_capped_claim_planned_on_an_empty_queue_reads_few_rows_after_a_burst(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "p", None, Some(4))
        .await
        .unwrap();
    // A quiet database, vacuumed: the planner knows jobs as empty.
    sqlx::query("VACUUM ANALYZE jobs")
        .execute(&pool)
        .await
        .unwrap();
    let mut worker = pool.acquire().await.unwrap().detach();
    let claim = "SELECT count(*) FROM jobwire_claim_capped('p', 100, 'w', 60000, 0)";
    // The worker's first claims, on the empty queue, plan the statement.
    for _ in 0..6 {
        let claimed: i64 = sqlx::query_scalar(claim)
            .fetch_one(&mut worker)
            .await
            .unwrap();
        assert_eq!(claimed, 0);
    }
    let burst: Vec<NewJob> = (0..5_000)
        .map(|i| {
            NewJob::new("work", json!({ "i": i }))
                .with_queue("p")
                .with_tenant("acme")
        })
        .collect();
    for chunk in burst.chunks(1_000) {
        jobwire_test_support::enqueue_ids(&pool, chunk)
            .await
            .unwrap();
    }

    let mut tx = sqlx::Connection::begin(&mut worker).await.unwrap();
    let claimed: i64 = sqlx::query_scalar(claim).fetch_one(&mut *tx).await.unwrap();
    assert_eq!(claimed, 4, "the tenant's cap");
    let read = jobwire_test_support::rows_read_in_transaction(&mut tx, "jobs").await;
    tx.rollback().await.unwrap();
    assert!(
        read < 500,
        "the claim read {read} rows of jobs for 4 jobs among 5,000"
    );
}

/// The wake-ups in the outbox, oldest first: job and reason.
async fn outbox_wake_ups(pool: &PgPool) -> Vec<(Uuid, Option<String>)> {
    sqlx::query_as(
        "SELECT message_key::uuid, headers->>'jobwire-reason' FROM job_outbox ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn empty_the_outbox(pool: &PgPool) {
    sqlx::query("DELETE FROM job_outbox")
        .execute(pool)
        .await
        .unwrap();
}

/// On a broker queue a capped tenant's waiting jobs have no wake-up until
/// they get a slot. A cap raised hands its new slots to them once it has
/// committed, and a cap removed wakes the rest: neither waits for the
/// reconciler. A cap lowered, or another limit changed, wakes nothing.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_raised_or_removed_cap_wakes_the_jobs_it_frees_once_it_has_committed(pool: PgPool) {
    capped_broker_queue(&pool, 1).await;
    // `solo` keeps a cap of its own through every change of the default.
    jobwire_core::set_tenant_cap(&pool, "b", Some("solo"), Some(1))
        .await
        .unwrap();
    let ids = enqueue_for(&pool, "b", "acme", 5).await;
    let solo = enqueue_for(&pool, "b", "solo", 2).await;
    // The enqueues' own wake-ups, for the jobs they gave the one slot, name
    // no reason.
    assert_eq!(
        outbox_wake_ups(&pool).await,
        vec![(ids[0], None), (solo[0], None)]
    );
    empty_the_outbox(&pool).await;

    // Another limit changed, the cap as it was: nothing.
    let limits = jobwire_core::TenantLimits {
        max_running: Some(1),
        max_queued: Some(100),
        enqueue_rate: None,
    };
    jobwire_core::set_tenant_limits(&pool, "b", None, &limits)
        .await
        .unwrap();
    assert_eq!(outbox_wake_ups(&pool).await, vec![]);

    // Raised to 3: the next two jobs get the new slots, with wake-ups.
    jobwire_core::set_tenant_cap(&pool, "b", None, Some(3))
        .await
        .unwrap();
    assert_eq!(
        outbox_wake_ups(&pool).await,
        vec![
            (ids[1], Some("cap".to_owned())),
            (ids[2], Some("cap".to_owned()))
        ]
    );
    empty_the_outbox(&pool).await;

    // Lowered by an override: no wake-up, and the slot above the new cap,
    // handed to the third job, is taken back.
    jobwire_core::set_tenant_cap(&pool, "b", Some("acme"), Some(2))
        .await
        .unwrap();
    assert_eq!(outbox_wake_ups(&pool).await, vec![]);
    assert_eq!(held_slots(&pool, "b").await, 2 + 1); // acme's two, solo's one

    // The override removed: back to the default of 3, a raise: the third
    // slot goes to the third job again.
    jobwire_core::set_tenant_cap(&pool, "b", Some("acme"), None)
        .await
        .unwrap();
    assert_eq!(
        outbox_wake_ups(&pool).await,
        vec![(ids[2], Some("cap".to_owned()))]
    );
    empty_the_outbox(&pool).await;

    // The default removed: acme has no cap left, and its last two jobs,
    // which held no slot, get their wake-ups; solo, capped by its own,
    // does not. Every job waited ten minutes, older than the reconciler's
    // grace period: the wake stamps the jobs it wakes, so the reconciler
    // does not wake them a second time.
    backdate_every_job_ten_minutes(&pool).await;
    jobwire_core::set_tenant_cap(&pool, "b", None, None)
        .await
        .unwrap();
    let mut woken = outbox_wake_ups(&pool).await;
    woken.sort();
    let mut expected = vec![
        (ids[3], Some("cap".to_owned())),
        (ids[4], Some("cap".to_owned())),
    ];
    expected.sort();
    assert_eq!(woken, expected);
    let rewoken = jobwire_core::reconcile_wake_ups(&pool, Duration::from_secs(60), 1000)
        .await
        .unwrap();
    assert!(
        !rewoken.contains(&ids[3]) && !rewoken.contains(&ids[4]),
        "woken twice: {rewoken:?}"
    );
    // The queue's other limit stays.
    let caps = jobwire_core::tenant_caps(&pool, "b").await.unwrap();
    assert_eq!(caps.defaults.max_queued, Some(100));

    // Every one of acme's jobs claims on its wake-up: none is left waiting.
    assert_eq!(wake_up_claim(&pool, &ids).await.claimed.len(), 5);
}

/// On a broker queue a freed slot is handed to the next waiting job, which
/// holds it while its wake-up travels. A cap lowered below such slots takes
/// them back once it has committed: those jobs do not start over the new
/// cap when their wake-ups arrive, but wait for a slot under it.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_lowered_cap_takes_back_the_slots_above_it_from_jobs_not_yet_started(pool: PgPool) {
    capped_broker_queue(&pool, 3).await;
    // `solo`'s own cap is not the one lowered: its handed slot stays.
    jobwire_core::set_tenant_cap(&pool, "b", Some("solo"), Some(2))
        .await
        .unwrap();
    let ids = enqueue_for(&pool, "b", "acme", 5).await;
    let solo = enqueue_for(&pool, "b", "solo", 3).await;
    let started = wake_up_claim(&pool, &ids[..1]).await;
    assert_eq!(started.claimed.len(), 1);
    assert_eq!(listed(&pool, "b", "acme").await, (1, 2, 4));

    // The default cut to 1: the running job stays; the two handed slots
    // above it are taken back.
    jobwire_core::set_tenant_cap(&pool, "b", None, Some(1))
        .await
        .unwrap();
    assert_eq!(listed(&pool, "b", "acme").await, (1, 0, 4));
    assert_eq!(jobs_naming_a_slot(&pool).await, 1 + 2);
    // Their wake-ups arrive: they miss, capped; solo's handed jobs start.
    let late = wake_up_claim(&pool, &ids[1..3]).await;
    assert!(late.claimed.is_empty());
    assert_eq!(
        late.missed,
        vec![
            (ids[1], jobwire_core::ClaimMiss::Capped),
            (ids[2], jobwire_core::ClaimMiss::Capped)
        ]
    );
    assert_eq!(wake_up_claim(&pool, &solo[..2]).await.claimed.len(), 2);

    // The running job's finish hands its slot on, as any freed slot.
    empty_the_outbox(&pool).await;
    jobwire_core::complete(&pool, "c", started.claimed[0].lease)
        .await
        .unwrap();
    assert_eq!(
        outbox_wake_ups(&pool).await,
        vec![(ids[1], Some("slot".to_owned()))]
    );
    assert_eq!(listed(&pool, "b", "acme").await, (0, 1, 4));
}

/// On the PostgreSQL path a raised cap wakes the queue's workers (a NOTIFY
/// once the change has committed) instead of leaving them to their next poll.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_raised_cap_on_the_postgres_path_wakes_its_workers(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "p", None, Some(1))
        .await
        .unwrap();
    enqueue_for(&pool, "p", "acme", 3).await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("jobwire_jobs").await.unwrap();

    jobwire_core::set_tenant_cap(&pool, "p", None, Some(2))
        .await
        .unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("no notification")
        .unwrap();
    assert_eq!(woken.payload(), "p");
}

/// The queues the dashboard's tenants page lists: those with a default for
/// their tenants, with a tenant's override, or with slot rows a removed
/// cap left behind; not one with only its own enqueue limits.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_queues_with_tenant_limits_are_the_ones_with_something_to_show(pool: PgPool) {
    assert_eq!(
        jobwire_core::queues_with_tenant_limits(&pool)
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    let queue_only = jobwire_core::QueueLimits {
        max_queued: Some(10),
        ..jobwire_core::QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "own-limits-only", &queue_only)
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(&pool, "default-cap", None, Some(2))
        .await
        .unwrap();
    let rate_only = jobwire_core::TenantLimits {
        enqueue_rate: Some(jobwire_core::EnqueueRate {
            jobs: 10,
            per_seconds: 1,
        }),
        ..jobwire_core::TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "rate-override", Some("acme"), &rate_only)
        .await
        .unwrap();
    // A capped queue whose tenant took slots, then lost its cap.
    jobwire_core::set_tenant_cap(&pool, "slots-left", None, Some(1))
        .await
        .unwrap();
    enqueue_for(&pool, "slots-left", "acme", 1).await;
    jobwire_core::claim_batch(&pool, "slots-left", "w", 1, LEASE)
        .await
        .unwrap();
    jobwire_core::set_tenant_cap(&pool, "slots-left", None, None)
        .await
        .unwrap();
    assert_eq!(held_slots(&pool, "slots-left").await, 1);
    assert_eq!(
        jobwire_core::queues_with_tenant_limits(&pool)
            .await
            .unwrap(),
        ["default-cap", "rate-override", "slots-left"]
    );
}
