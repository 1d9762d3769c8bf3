//! The maintenance loops refuse settings that cannot work, naming the
//! setting, before anything runs; so does a node given them. The
//! reconciler sweeps idle tenants' slot rows as it starts. A loop that
//! dies stops its node.

use std::time::Duration;

use jobwire_consumer::maintenance::{
    MaintenanceConfig, Reconciler, ReconcilerConfig, Retention, RetentionConfig, SchedulerConfig,
    Sweeper, SweeperConfig,
};
use jobwire_core::NewJob;
use jobwire_server::{Node, NodeError};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_sweeper_refuses_a_zero_batch_size(pool: PgPool) {
    let config = SweeperConfig {
        batch_size: 0,
        ..SweeperConfig::default()
    };
    let err = Sweeper::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "sweeper.batch_size", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_sweeper_refuses_a_zero_interval(pool: PgPool) {
    let config = SweeperConfig {
        interval: Duration::ZERO,
        ..SweeperConfig::default()
    };
    let err = Sweeper::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "sweeper.interval", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn retention_refuses_a_zero_batch_size(pool: PgPool) {
    let config = RetentionConfig {
        batch_size: 0,
        ..RetentionConfig::default()
    };
    let err = Retention::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "retention.batch_size", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn retention_refuses_a_zero_interval(pool: PgPool) {
    let config = RetentionConfig {
        interval: Duration::ZERO,
        ..RetentionConfig::default()
    };
    let err = Retention::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "retention.interval", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn retention_refuses_a_zero_keep_for_any_side_table(pool: PgPool) {
    let zero = Some(Duration::ZERO);
    let cases = [
        (
            "retention.keep_history",
            RetentionConfig {
                keep_history: zero,
                ..RetentionConfig::default()
            },
        ),
        (
            "retention.keep_effects",
            RetentionConfig {
                keep_effects: zero,
                ..RetentionConfig::default()
            },
        ),
        (
            "retention.keep_audit",
            RetentionConfig {
                keep_audit: zero,
                ..RetentionConfig::default()
            },
        ),
        (
            "retention.keep_outbox_dead",
            RetentionConfig {
                keep_outbox_dead: zero,
                ..RetentionConfig::default()
            },
        ),
    ];
    for (setting, config) in cases {
        let err = Retention::new(pool.clone(), config).unwrap_err();
        assert_eq!(err.setting, setting, "{err}");
    }
    // None keeps rows forever: accepted.
    let forever = RetentionConfig {
        keep_history: None,
        keep_effects: None,
        keep_audit: None,
        keep_outbox_dead: None,
        ..RetentionConfig::default()
    };
    assert!(Retention::new(pool, forever).is_ok());
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_reconciler_refuses_a_zero_batch_size(pool: PgPool) {
    let config = ReconcilerConfig {
        batch_size: 0,
        ..ReconcilerConfig::default()
    };
    let err = Reconciler::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "reconciler.batch_size", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_reconciler_refuses_a_zero_grace(pool: PgPool) {
    let config = ReconcilerConfig {
        grace: Duration::ZERO,
        ..ReconcilerConfig::default()
    };
    let err = Reconciler::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "reconciler.grace", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_reconciler_refuses_a_zero_interval(pool: PgPool) {
    let config = ReconcilerConfig {
        interval: Duration::ZERO,
        ..ReconcilerConfig::default()
    };
    let err = Reconciler::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "reconciler.interval", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_reconciler_refuses_a_zero_idle_tenant_sweep(pool: PgPool) {
    let config = ReconcilerConfig {
        idle_tenant_sweep: Duration::ZERO,
        ..ReconcilerConfig::default()
    };
    let err = Reconciler::new(pool, config).unwrap_err();
    assert_eq!(err.setting, "reconciler.idle_tenant_sweep", "{err}");
}

#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_node_refuses_maintenance_that_cannot_work(pool: PgPool) {
    let config = MaintenanceConfig {
        reconciler: Some(ReconcilerConfig {
            batch_size: 0,
            ..ReconcilerConfig::default()
        }),
        ..MaintenanceConfig::default()
    };
    match Node::new(pool).with_maintenance(config).start() {
        Err(NodeError::Setting(invalid)) => {
            assert_eq!(invalid.setting, "reconciler.batch_size", "{invalid}");
        }
        Err(other) => panic!("refused for the wrong reason: {other}"),
        Ok(_) => panic!("a node with an invalid maintenance setting started"),
    }
}

/// A capped tenant that ran a job and has nothing left to do keeps its slot
/// rows only until the reconciler's first pass.
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_reconciler_forgets_idle_tenants_slot_rows_in_its_first_pass(pool: PgPool) {
    jobwire_core::set_tenant_cap(&pool, "q", None, Some(2))
        .await
        .unwrap();
    let job = NewJob::new("work", serde_json::json!({}))
        .with_queue("q")
        .with_tenant("acme");
    jobwire_test_support::enqueue_ids(&pool, &[job])
        .await
        .unwrap();
    let claimed = jobwire_core::claim_batch(&pool, "q", "w", 1, Duration::from_secs(60))
        .await
        .unwrap();
    jobwire_core::complete(&pool, "w", claimed[0].lease)
        .await
        .unwrap();
    let slot_rows = "SELECT count(*) FROM job_tenant_slots WHERE queue = $1";
    jobwire_test_support::wait_for_count(&pool, slot_rows, "q", 2, Duration::ZERO)
        .await
        .unwrap();

    let reconciler = Reconciler::new(pool.clone(), ReconcilerConfig::default()).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(reconciler.run(shutdown.clone()));
    let forgotten =
        jobwire_test_support::wait_for_count(&pool, slot_rows, "q", 0, Duration::from_secs(10))
            .await;
    shutdown.cancel();
    running.await.unwrap();
    forgotten.expect("the idle tenant's slot rows are still there");
}

/// A maintenance loop that dies (here: the scheduler, on a schedule row
/// written by hand with a due time no client can decode) stops its node
/// with the reason. Before, the process stayed up and looked healthy while
/// no schedule fired again (or, had it been the sweeper, no crashed
/// worker's job was ever returned).
#[sqlx::test(migrator = "jobwire_core::MIGRATOR")]
async fn a_node_whose_maintenance_loop_dies_stops_with_the_reason(pool: PgPool) {
    sqlx::query(
        "INSERT INTO job_schedules (name, cron, timezone, job_type, next_run_at)
         VALUES ('hand-written', '* * * * *', 'UTC', 'noop', '-infinity')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let node = Node::new(pool.clone()).with_maintenance(MaintenanceConfig {
        sweeper: Some(SweeperConfig::default()),
        retention: None,
        reconciler: None,
        scheduler: Some(SchedulerConfig::default()),
    });
    // No shutdown is ever asked for: only the loop's end stops it.
    let err = tokio::time::timeout(Duration::from_secs(30), node.run(CancellationToken::new()))
        .await
        .expect("the node stops by itself")
        .unwrap_err();
    let said = err.to_string();
    assert!(
        said.starts_with("a maintenance loop ended: panicked: ")
            && said.ends_with("; maintenance stopped"),
        "{said}"
    );
}
