//! Settings for workers under test: fast retries, a short lease and poll,
//! and the maintenance loops (run by a `jobwire_server::Node`) a test
//! worker had beside it.

use std::time::Duration;

use jobwire_consumer::maintenance::{MaintenanceConfig, ReconcilerConfig, SweeperConfig};
use jobwire_consumer::{HandlerOptions, QueueConfig, RuntimeConfig, WorkerConfig};

/// Handler options with retries a test can wait for: 100 ms backoff, at
/// most 400 ms.
pub fn fast_options() -> HandlerOptions {
    HandlerOptions {
        backoff: jobwire_core::Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(400),
            jitter_ratio: 0.1,
        },
        ..HandlerOptions::default()
    }
}

/// A worker config for tests: one queue, short lease and poll. Its
/// maintenance is [`test_maintenance`], run beside it by a node.
pub fn test_worker_config(queue: &str, concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        runtime: RuntimeConfig {
            lease: Duration::from_millis(1500),
            cancel_grace: Duration::from_millis(500),
            ..RuntimeConfig::default()
        },
        queues: vec![QueueConfig::new(queue, concurrency)],
        poll_interval: Duration::from_millis(100),
        shutdown_timeout: Duration::from_secs(5),
        ..WorkerConfig::default()
    }
}

/// The maintenance a [`test_worker_config`] worker runs beside it: a
/// sweeper every 200 ms (so a lost lease is returned quickly), no
/// retention, and the default reconciler (which only acts on
/// broker-dispatched queues, after a minute's grace).
pub fn test_maintenance() -> MaintenanceConfig {
    MaintenanceConfig {
        sweeper: Some(SweeperConfig {
            interval: Duration::from_millis(200),
            ..SweeperConfig::default()
        }),
        retention: None,
        reconciler: Some(ReconcilerConfig::default()),
        scheduler: None,
    }
}
