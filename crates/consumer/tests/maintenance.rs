//! The maintenance loops refuse settings that cannot work, naming the
//! setting, before anything runs; so does a node given them.

use std::time::Duration;

use jobwire_consumer::maintenance::{
    MaintenanceConfig, Reconciler, ReconcilerConfig, Retention, RetentionConfig, Sweeper,
    SweeperConfig,
};
use jobwire_server::{Node, NodeError};
use sqlx::PgPool;

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
