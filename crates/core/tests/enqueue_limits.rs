//! Enqueue limits through the Rust library and through SQL: a full queue, a
//! full tenant, shedding and a tenant's rate refuse with their own error and
//! write nothing; the limit lifts as the queue drains or the window slides;
//! nothing is limited until configured; producers of one tenant never wait
//! on each other's transactions.

use std::time::Duration;

use jobwire_core::{
    EnqueueRate, Error, FullReason, NewJob, QueueLimits, Shedding, TenantLimits, enqueue,
    enqueue_many,
};
use serde_json::json;
use sqlx::PgPool;

const LEASE: Duration = Duration::from_secs(60);

fn job(queue: &str) -> NewJob {
    NewJob::new("work", json!({})).with_queue(queue)
}

async fn jobs_in(pool: &PgPool, queue: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = $1")
        .bind(queue)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn outbox_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job_outbox")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn max_queued(n: u32) -> QueueLimits {
    QueueLimits {
        max_queued: Some(n),
        ..QueueLimits::default()
    }
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_full_queue_refuses_writes_nothing_and_lifts_as_it_drains(pool: PgPool) {
    jobwire_core::set_queue_limits(&pool, "q", &max_queued(3))
        .await
        .unwrap();
    for _ in 0..3 {
        enqueue(&pool, &job("q")).await.unwrap();
    }
    match enqueue(&pool, &job("q")).await {
        Err(error @ Error::QueueFull { .. }) => {
            assert_eq!(error.code(), "QUEUE_FULL");
            assert_eq!(error.retry_after(), Some(Duration::from_secs(1)));
            let Error::QueueFull {
                reason,
                queue,
                tenant,
                limit,
                ..
            } = &error
            else {
                unreachable!()
            };
            assert_eq!(
                (*reason, queue.as_str(), tenant.as_deref(), *limit),
                (FullReason::Queue, "q", None, 3)
            );
            assert!(error.to_string().contains("is full"), "{error}");
        }
        other => panic!("expected QueueFull, got {other:?}"),
    }
    // A batch that would pass the cap is refused whole, other queues too.
    let refused = enqueue_many(&pool, &[job("other"), job("q")]).await;
    assert!(
        matches!(refused, Err(Error::QueueFull { .. })),
        "{refused:?}"
    );
    assert_eq!(jobs_in(&pool, "q").await, 3, "nothing written");
    assert_eq!(jobs_in(&pool, "other").await, 0, "nothing written");

    // Inside a caller's transaction: the refusal aborts it, so the business
    // write goes with the job, as after any failed statement.
    sqlx::query("CREATE TABLE orders (id int)")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let refused = enqueue(&mut *tx, &job("q")).await;
    assert!(matches!(refused, Err(Error::QueueFull { .. })));
    // PostgreSQL answers the commit of an aborted transaction by rolling
    // it back (sqlx may or may not call that an error).
    let _ = tx.commit().await;
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(orders, 0);

    // The queue drains: a claimed job no longer waits, so one more fits.
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    enqueue(&pool, &job("q")).await.unwrap();
    assert!(enqueue(&pool, &job("q")).await.is_err(), "full again");
    jobwire_core::complete(&pool, "w", claimed[0].lease)
        .await
        .unwrap();
    assert!(
        enqueue(&pool, &job("q")).await.is_err(),
        "a finished job never waited"
    );
    assert_eq!(jobs_in(&pool, "q").await, 4);

    // A duplicate writes nothing, so a full queue still answers it.
    let keyed = job("r").with_dedup_key("k");
    jobwire_core::set_queue_limits(&pool, "r", &max_queued(1))
        .await
        .unwrap();
    let first = enqueue(&pool, &keyed).await.unwrap();
    let again = enqueue(&pool, &keyed).await.unwrap();
    assert!(again.duplicate && again.job_id == first.job_id);

    // Removed: nothing is refused.
    jobwire_core::set_queue_limits(&pool, "q", &QueueLimits::default())
        .await
        .unwrap();
    enqueue(&pool, &job("q")).await.unwrap();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_full_broker_queue_writes_no_wake_up(pool: PgPool) {
    jobwire_core::set_queue_dispatch(
        &pool,
        "b",
        &jobwire_core::Dispatch::Broker {
            topic: "jobs.b".into(),
        },
    )
    .await
    .unwrap();
    jobwire_core::set_queue_limits(&pool, "b", &max_queued(1))
        .await
        .unwrap();
    enqueue(&pool, &job("b")).await.unwrap();
    assert_eq!(outbox_rows(&pool).await, 1);
    assert!(enqueue(&pool, &job("b")).await.is_err());
    assert_eq!(
        (jobs_in(&pool, "b").await, outbox_rows(&pool).await),
        (1, 1)
    );
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_full_tenant_is_refused_while_others_get_in(pool: PgPool) {
    let defaults = TenantLimits {
        max_queued: Some(2),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", None, &defaults)
        .await
        .unwrap();
    let bigco = TenantLimits {
        max_queued: Some(4),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", Some("bigco"), &bigco)
        .await
        .unwrap();
    for tenant in ["acme", "acme", "bigco", "bigco", "bigco", "bigco"] {
        enqueue(&pool, &job("q").with_tenant(tenant)).await.unwrap();
    }
    for tenant in ["acme", "bigco"] {
        match enqueue(&pool, &job("q").with_tenant(tenant)).await {
            Err(Error::QueueFull {
                reason: FullReason::Tenant,
                tenant: Some(refused),
                ..
            }) => assert_eq!(refused, tenant),
            other => panic!("{tenant}: expected a full tenant, got {other:?}"),
        }
    }
    // Another tenant, and jobs without a tenant, are not held back.
    enqueue(&pool, &job("q").with_tenant("small"))
        .await
        .unwrap();
    enqueue(&pool, &job("q")).await.unwrap();
    assert_eq!(jobs_in(&pool, "q").await, 8);
    let caps = jobwire_core::tenant_caps(&pool, "q").await.unwrap();
    assert_eq!(caps.defaults.max_queued, Some(2));
    let bigco_row = caps.tenants.iter().find(|t| t.tenant == "bigco").unwrap();
    assert_eq!(bigco_row.limits.max_queued, Some(4));
    assert_eq!(bigco_row.waiting, 4);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn the_running_cap_alone_changes_and_the_other_limits_stay(pool: PgPool) {
    let limits = TenantLimits {
        max_running: Some(2),
        max_queued: Some(5),
        enqueue_rate: Some(EnqueueRate {
            jobs: 10,
            per_seconds: 60,
        }),
    };
    for tenant in [None, Some("acme")] {
        jobwire_core::set_tenant_limits(&pool, "q", tenant, &limits)
            .await
            .unwrap();
        // The running cap is removed; the override row stays for the rest.
        jobwire_core::set_tenant_cap(&pool, "q", tenant, None)
            .await
            .unwrap();
        let caps = jobwire_core::tenant_caps(&pool, "q").await.unwrap();
        let now = match tenant {
            None => caps.defaults,
            Some(name) => {
                caps.tenants
                    .iter()
                    .find(|t| t.tenant == name)
                    .expect("the override row stays")
                    .overrides
            }
        };
        assert_eq!(
            now,
            TenantLimits {
                max_running: None,
                ..limits
            },
            "{tenant:?}"
        );
    }
    // With nothing left, the override row goes.
    jobwire_core::set_tenant_limits(&pool, "q", Some("acme"), &TenantLimits::default())
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job_tenants")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    // Past the ceiling: refused, named.
    let huge = TenantLimits {
        max_queued: Some(jobwire_core::MAX_LIMIT + 1),
        ..TenantLimits::default()
    };
    assert!(matches!(
        jobwire_core::set_tenant_limits(&pool, "q", None, &huge).await,
        Err(Error::InvalidArgument {
            argument: "max_queued",
            ..
        })
    ));
    // At the ceiling: enqueues still work (no overflow in the trigger).
    let at_ceiling = QueueLimits {
        max_queued: Some(jobwire_core::MAX_LIMIT),
        shed: Some(Shedding {
            depth: jobwire_core::MAX_LIMIT - 1,
            priority: 0,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "q", &at_ceiling)
        .await
        .unwrap();
    enqueue(&pool, &job("q").with_priority(3).with_tenant("acme"))
        .await
        .unwrap();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_deep_queue_sheds_low_priority_work_first(pool: PgPool) {
    let shedding = QueueLimits {
        max_queued: Some(10),
        shed: Some(Shedding {
            depth: 3,
            priority: 0,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "q", &shedding)
        .await
        .unwrap();
    for _ in 0..3 {
        enqueue(&pool, &job("q").with_priority(5)).await.unwrap();
    }
    match enqueue(&pool, &job("q").with_priority(5)).await {
        Err(Error::QueueFull {
            reason: FullReason::Shed,
            limit: 3,
            ..
        }) => {}
        other => panic!("expected shedding, got {other:?}"),
    }
    // Urgent work still gets in, up to the queue's cap.
    enqueue(&pool, &job("q").with_priority(0)).await.unwrap();
    enqueue(&pool, &job("q").with_priority(-10)).await.unwrap();
    assert_eq!(jobs_in(&pool, "q").await, 5);
    assert_eq!(
        jobwire_core::queue_limits(&pool, "q").await.unwrap().shed,
        shedding.shed
    );
}

/// Shedding counts the jobs of the enqueue itself: one batch of low-priority
/// jobs passed the depth by all it held, filled the queue to its cap, and
/// the next urgent job was refused as "full" (the room the depth keeps for
/// urgent work was gone). A batch is taken only while the queue, with it,
/// stays within the depth.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_batch_of_low_priority_work_cannot_pass_the_shedding_depth(pool: PgPool) {
    let shedding = QueueLimits {
        max_queued: Some(10),
        shed: Some(Shedding {
            depth: 5,
            priority: 0,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "q", &shedding)
        .await
        .unwrap();
    let low = || job("q").with_priority(5);
    enqueue_many(&pool, &vec![low(); 4]).await.unwrap();
    match enqueue_many(&pool, &vec![low(); 6]).await {
        Err(Error::QueueFull {
            reason: FullReason::Shed,
            limit: 5,
            message,
            ..
        }) => assert!(
            message.contains("would hold more than 5 waiting jobs"),
            "{message}"
        ),
        other => panic!("expected shedding, got {other:?}"),
    }
    assert_eq!(
        jobs_in(&pool, "q").await,
        4,
        "a refused batch writes nothing"
    );
    // The batch that reaches the depth exactly gets in; the next low job not.
    enqueue_many(&pool, &[low()]).await.unwrap();
    assert!(matches!(
        enqueue(&pool, &low()).await,
        Err(Error::QueueFull {
            reason: FullReason::Shed,
            ..
        })
    ));
    // The room above the depth is still there for urgent work.
    enqueue_many(&pool, &vec![job("q").with_priority(-1); 5])
        .await
        .unwrap();
    assert_eq!(jobs_in(&pool, "q").await, 10);
}

/// Shedding from the cap's depth on (or deeper) would never refuse
/// anything: the queue is full first. Refused, and the limits stay as they
/// were.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_shedding_depth_at_or_over_the_queues_cap_is_refused(pool: PgPool) {
    let kept = QueueLimits {
        max_queued: Some(10),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "q", &kept)
        .await
        .unwrap();
    for depth in [10, 11] {
        let useless = QueueLimits {
            shed: Some(Shedding { depth, priority: 0 }),
            ..kept
        };
        match jobwire_core::set_queue_limits(&pool, "q", &useless).await {
            Err(Error::InvalidArgument {
                argument: "shed_depth",
                reason,
            }) => assert!(
                reason.contains("not below the queue's cap on waiting jobs (10)"),
                "{reason}"
            ),
            other => panic!("depth {depth}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(jobwire_core::queue_limits(&pool, "q").await.unwrap(), kept);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_tenant_over_its_rate_waits_for_the_window_to_slide(pool: PgPool) {
    let rate = TenantLimits {
        enqueue_rate: Some(EnqueueRate {
            jobs: 3,
            per_seconds: 1,
        }),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", None, &rate)
        .await
        .unwrap();
    let acme = || job("q").with_tenant("acme");
    enqueue_many(&pool, &[acme(), acme(), acme()])
        .await
        .unwrap();
    let retry_after = match enqueue(&pool, &acme()).await {
        Err(Error::RateLimited {
            tenant,
            limit,
            per_seconds,
            retry_after,
            ..
        }) => {
            assert_eq!((tenant.as_str(), limit, per_seconds), ("acme", 3, 1));
            assert!(
                retry_after > Duration::ZERO && retry_after <= Duration::from_secs(2),
                "{retry_after:?}"
            );
            retry_after
        }
        other => panic!("expected RateLimited, got {other:?}"),
    };
    // Other tenants have rates of their own.
    enqueue(&pool, &job("q").with_tenant("small"))
        .await
        .unwrap();
    // A batch larger than the rate never fits, and says so.
    let refused = enqueue_many(&pool, &vec![job("q").with_tenant("other"); 4]).await;
    assert!(
        matches!(&refused, Err(e @ Error::RateLimited { .. }) if e.to_string().contains("alone")),
        "{refused:?}"
    );
    assert_eq!(
        jobs_in(&pool, "q").await,
        4,
        "refused enqueues wrote nothing"
    );
    // After the wait it said, the same enqueue fits.
    tokio::time::sleep(retry_after + Duration::from_millis(20)).await;
    enqueue(&pool, &acme()).await.unwrap();
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_rolled_back_enqueue_does_not_count_against_the_rate(pool: PgPool) {
    let rate = TenantLimits {
        enqueue_rate: Some(EnqueueRate {
            jobs: 2,
            per_seconds: 3600,
        }),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", Some("acme"), &rate)
        .await
        .unwrap();
    let acme = || job("q").with_tenant("acme");
    let mut tx = pool.begin().await.unwrap();
    enqueue_many(&mut *tx, &[acme(), acme()]).await.unwrap();
    tx.rollback().await.unwrap();
    enqueue_many(&pool, &[acme(), acme()]).await.unwrap();
    assert!(matches!(
        enqueue(&pool, &acme()).await,
        Err(Error::RateLimited { .. })
    ));
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn producers_of_one_tenant_never_wait_for_each_other(pool: PgPool) {
    let rate = TenantLimits {
        enqueue_rate: Some(EnqueueRate {
            jobs: 100,
            per_seconds: 60,
        }),
        max_queued: Some(100),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "q", None, &rate)
        .await
        .unwrap();
    // One producer enqueues for acme and keeps its transaction open...
    let mut first = pool.begin().await.unwrap();
    enqueue(&mut *first, &job("q").with_tenant("acme"))
        .await
        .unwrap();
    // ...and another producer of acme is not made to wait for it: with a
    // lock timeout, any lock the first holds that the second needs fails
    // the second's enqueue instead of blocking it.
    let mut second = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '200ms'")
        .execute(&mut *second)
        .await
        .unwrap();
    enqueue(&mut *second, &job("q").with_tenant("acme"))
        .await
        .unwrap();
    second.commit().await.unwrap();
    first.commit().await.unwrap();
    let counted: i64 = sqlx::query_scalar(
        "SELECT sum(count) FROM job_enqueue_counts WHERE queue = 'q' AND tenant = 'acme'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(counted, 2, "both counted, each in its own session's row");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn nothing_is_limited_until_configured(pool: PgPool) {
    let jobs: Vec<NewJob> = (0..500).map(|_| job("q").with_tenant("acme")).collect();
    enqueue_many(&pool, &jobs).await.unwrap();
    let limited: bool =
        sqlx::query_scalar("SELECT coalesce(bool_or(enqueue_limited), false) FROM job_queues")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!limited);
    let counted: i64 = sqlx::query_scalar("SELECT count(*) FROM job_enqueue_counts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(counted, 0, "no rate counter is written without a rate");
    // A running cap alone does not limit enqueues either.
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(1))
        .await
        .unwrap();
    enqueue(&pool, &job("q").with_tenant("acme")).await.unwrap();
    let limited: bool =
        sqlx::query_scalar("SELECT enqueue_limited FROM job_queues WHERE queue = 'q'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(!limited);
}

/// The SQL error of a refused statement: its SQLSTATE and DETAIL.
async fn sql_refusal(pool: &PgPool, statement: &'static str) -> (String, serde_json::Value) {
    let err = sqlx::query(statement).execute(pool).await.unwrap_err();
    let db = err.as_database_error().expect("a database error");
    let pg = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .unwrap();
    let detail = serde_json::from_str(pg.detail().unwrap()).unwrap();
    (db.code().unwrap().into_owned(), detail)
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn sql_enqueues_and_plain_inserts_are_refused_with_their_own_sqlstate(pool: PgPool) {
    jobwire_core::set_queue_limits(&pool, "q", &max_queued(1))
        .await
        .unwrap();
    let rate = TenantLimits {
        enqueue_rate: Some(EnqueueRate {
            jobs: 1,
            per_seconds: 3600,
        }),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "r", None, &rate)
        .await
        .unwrap();
    sqlx::query("SELECT jobwire_enqueue('work', queue => 'q')")
        .execute(&pool)
        .await
        .unwrap();
    let (code, detail) = sql_refusal(&pool, "SELECT jobwire_enqueue('work', queue => 'q')").await;
    assert_eq!(code, "JW429");
    assert_eq!(detail["reason"], "queue");
    assert_eq!(detail["limit"], 1);
    assert_eq!(detail["retryAfterMs"], 1000);
    // A service writing its own INSERT meets the same limit.
    let (code, _) = sql_refusal(
        &pool,
        "INSERT INTO jobs (job_id, queue, job_type, payload) VALUES (gen_random_uuid(), 'q', 'work', '{}')",
    )
    .await;
    assert_eq!(code, "JW429");

    sqlx::query("SELECT jobwire_enqueue('work', queue => 'r', tenant => 'acme')")
        .execute(&pool)
        .await
        .unwrap();
    let (code, detail) = sql_refusal(
        &pool,
        "SELECT jobwire_enqueue('work', queue => 'r', tenant => 'acme')",
    )
    .await;
    assert_eq!(code, "JW42R");
    assert_eq!(detail["tenant"], "acme");
    assert_eq!(detail["seconds"], 3600);
    assert!(detail["retryAfterMs"].as_u64().unwrap() > 1000);
    assert_eq!(jobs_in(&pool, "q").await, 1);
    assert_eq!(jobs_in(&pool, "r").await, 1);

    // The queue drains: its job claimed, the SQL enqueue gets in again.
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    sqlx::query("SELECT jobwire_enqueue('work', queue => 'q')")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(jobs_in(&pool, "q").await, 2);

    // A full tenant and shedding refuse through SQL too, each with its reason.
    let one_waiting = TenantLimits {
        max_queued: Some(1),
        ..TenantLimits::default()
    };
    jobwire_core::set_tenant_limits(&pool, "t", None, &one_waiting)
        .await
        .unwrap();
    sqlx::query("SELECT jobwire_enqueue('work', queue => 't', tenant => 'acme')")
        .execute(&pool)
        .await
        .unwrap();
    let (code, detail) = sql_refusal(
        &pool,
        "SELECT jobwire_enqueue('work', queue => 't', tenant => 'acme')",
    )
    .await;
    assert_eq!(
        (code.as_str(), &detail["reason"]),
        ("JW429", &json!("tenant"))
    );
    assert_eq!(detail["tenant"], "acme");
    sqlx::query("SELECT jobwire_enqueue('work', queue => 't', tenant => 'globex')")
        .execute(&pool)
        .await
        .unwrap();
    let shedding = QueueLimits {
        shed: Some(Shedding {
            depth: 1,
            priority: 0,
        }),
        ..QueueLimits::default()
    };
    jobwire_core::set_queue_limits(&pool, "s", &shedding)
        .await
        .unwrap();
    sqlx::query("SELECT jobwire_enqueue('work', queue => 's')")
        .execute(&pool)
        .await
        .unwrap();
    let (code, detail) = sql_refusal(
        &pool,
        "SELECT jobwire_enqueue('work', queue => 's', priority => 5)",
    )
    .await;
    assert_eq!(
        (code.as_str(), &detail["reason"]),
        ("JW429", &json!("shed"))
    );
    sqlx::query("SELECT jobwire_enqueue('work', queue => 's', priority => -1)")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(jobs_in(&pool, "t").await, 2);
    assert_eq!(jobs_in(&pool, "s").await, 2);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn limits_are_checked_before_anything_is_written(pool: PgPool) {
    for (limits, argument) in [
        (max_queued(0), "max_queued"),
        (
            QueueLimits {
                shed: Some(Shedding {
                    depth: 0,
                    priority: 0,
                }),
                ..QueueLimits::default()
            },
            "shed_depth",
        ),
    ] {
        match jobwire_core::set_queue_limits(&pool, "q", &limits).await {
            Err(Error::InvalidArgument { argument: got, .. }) => assert_eq!(got, argument),
            other => panic!("{argument}: {other:?}"),
        }
    }
    let bad_rate = TenantLimits {
        enqueue_rate: Some(EnqueueRate {
            jobs: 1,
            per_seconds: 0,
        }),
        ..TenantLimits::default()
    };
    assert!(matches!(
        jobwire_core::set_tenant_limits(&pool, "q", None, &bad_rate).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        jobwire_core::set_tenant_limits(&pool, "q", Some(" "), &TenantLimits::default()).await,
        Err(Error::InvalidArgument { .. })
    ));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job_queues")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_schedule_fires_into_a_full_queue_and_other_enqueues_stay_refused(pool: PgPool) {
    jobwire_core::set_queue_limits(&pool, "q", &max_queued(1))
        .await
        .unwrap();
    enqueue(&pool, &job("q")).await.unwrap();
    let spec = jobwire_core::ScheduleSpec::new(
        "hourly",
        "0 * * * *",
        "UTC",
        NewJob::new("digest", json!({})).with_queue("q"),
    );
    jobwire_core::put_schedule(&pool, &spec).await.unwrap();
    sqlx::query("UPDATE job_schedules SET next_run_at = now() - interval '1 minute'")
        .execute(&pool)
        .await
        .unwrap();
    let report = jobwire_core::fire_due_schedules(&pool, 10).await.unwrap();
    assert_eq!(report.enqueued, 1, "{report:?}");
    assert_eq!(jobs_in(&pool, "q").await, 2);
    // The exemption was the scheduler's transaction's alone.
    assert!(matches!(
        enqueue(&pool, &job("q")).await,
        Err(Error::QueueFull { .. })
    ));
}
