//! `jobwire worker` and `jobwire run`: their arguments and serving queues
//! until a shutdown signal (with the relay in-process for `run`).

use std::time::Duration;

use anyhow::{Result, bail};
use jobwire_consumer::maintenance::{
    MaintenanceConfig, ReconcilerConfig, SchedulerConfig, SweeperConfig,
};
use jobwire_consumer::{
    HandlerOptions, HandlerRegistry, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
};
use jobwire_core::Backoff;
use jobwire_server::Node;
use jobwire_transport::SubscribeOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::shutdown::cancel_on_signal;
use crate::{brokers, database};

#[derive(clap::Args)]
pub(crate) struct WorkerArgs {
    /// Queue to serve as NAME or NAME=CONCURRENCY; repeat for several.
    #[arg(long = "queue", default_value = "default=16")]
    queues: Vec<String>,
    /// Lease length in milliseconds (heartbeats every third of it).
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// Retry backoff base in milliseconds for the built-in handlers.
    #[arg(long, default_value_t = 5_000)]
    backoff_base_ms: u64,
    /// Retry backoff cap in milliseconds for the built-in handlers.
    #[arg(long, default_value_t = 900_000)]
    backoff_max_ms: u64,
    /// PostgreSQL-path queues: most jobs a queue claims beyond its
    /// concurrency while a backlog of short jobs lasts (only as many as its
    /// handlers start within 50 ms); 0 claims no more than the free slots.
    #[arg(long, default_value_t = WorkerConfig::default().claim_ahead)]
    claim_ahead: usize,
    /// Milliseconds the completer waits for more outcomes while other jobs'
    /// outcomes are still to come, so that jobs claimed together are
    /// completed by one statement; 0 writes each batch at once.
    #[arg(long, default_value_t = RuntimeConfig::default().completion_linger.as_millis() as u64)]
    completion_linger_ms: u64,
    /// Seconds to let running jobs finish on shutdown before cancelling them.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout_s: u64,
    /// Lease owner id (default: unique per process).
    #[arg(long)]
    worker_id: Option<String>,
    /// Do not run the lease sweeper in this process.
    #[arg(long)]
    no_sweeper: bool,
    /// Sweeper interval in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    sweep_interval_ms: u64,
    /// Do not run the wake-up reconciler in this process (it also forgets
    /// the slot rows of idle tenants).
    #[arg(long)]
    no_reconciler: bool,
    /// Do not run the scheduler (firing due schedules) in this process.
    #[arg(long)]
    no_scheduler: bool,
    #[command(flatten)]
    retention: super::retention_args::RetentionArgs,
    /// Seconds a due job of a broker queue may wait for its wake-up before
    /// the reconciler re-wakes it.
    #[arg(long, default_value_t = 60)]
    reconcile_grace_s: u64,
    /// Milliseconds between reconciler passes.
    #[arg(long, default_value_t = 10_000)]
    reconcile_interval_ms: u64,
    /// Seconds a due job of a broker queue may wait (from its run_after)
    /// before this worker claims it straight from the table, whatever
    /// happened to its wake-up (the safety net); 0 turns the net off.
    #[arg(long, default_value_t = 180)]
    safety_net_after_s: u64,
    /// Also serve the HTTP API on this address (e.g. 127.0.0.1:8080).
    #[arg(long, value_parser = crate::listen_address::parse)]
    listen: Option<std::net::SocketAddr>,
    /// Kafka consumer groups for broker-dispatched queues: each topic is
    /// subscribed in a group of its own, named `<this>.<topic>`.
    #[arg(long, default_value = "jobwire-workers")]
    consumer_group: String,
    #[command(flatten)]
    broker: brokers::BrokerArgs,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

/// `jobwire run`: a worker's arguments, and the in-process relay's.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    worker: WorkerArgs,
    /// The in-process relay: most outbox rows per pass (one transaction, one
    /// publish call), as `jobwire relay --batch-size`.
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().batch_size,
          value_parser = super::count_arg::at_least_one)]
    relay_batch_size: usize,
    /// The in-process relay: parallel drain tasks, as `jobwire relay
    /// --concurrency`.
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().concurrency,
          value_parser = super::count_arg::at_least_one)]
    relay_concurrency: usize,
}

/// `jobwire run`: the worker with a relay in the same process.
pub(crate) async fn run(pool: PgPool, args: RunArgs) -> Result<()> {
    let relay = jobwire_relay::RelayConfig {
        batch_size: args.relay_batch_size,
        concurrency: args.relay_concurrency,
        ..jobwire_relay::RelayConfig::default()
    };
    // Before anything is written (`run` migrates an empty database).
    relay.validate()?;
    serve(pool, args.worker, Some(relay)).await
}

fn parse_queue(spec: &str) -> Result<QueueConfig> {
    match spec.split_once('=') {
        None => Ok(QueueConfig::new(spec, 16)),
        Some((name, concurrency)) => match super::count_arg::at_least_one(concurrency) {
            Ok(concurrency) => Ok(QueueConfig::new(name, concurrency)),
            Err(why) => bail!("--queue {spec}: the concurrency after = is wrong: {why}"),
        },
    }
}

/// `jobwire worker` (`relay` is `None`) and `jobwire run` (the relay's
/// settings).
pub(crate) async fn serve(
    pool: PgPool,
    args: WorkerArgs,
    relay: Option<jobwire_relay::RelayConfig>,
) -> Result<()> {
    let with_relay = relay.is_some();
    if with_relay {
        database::migrate_if_empty(&pool).await?;
    } else {
        database::require_current_schema(&pool).await?;
    }
    let default_kind = if with_relay {
        brokers::BrokerKind::Memory
    } else {
        brokers::BrokerKind::Postgres
    };
    if args.listen.is_some() && args.metrics.listens() {
        bail!("--listen already serves /metrics: drop --metrics-listen");
    }
    let kind = args.broker.kind_or(default_kind);
    if kind == brokers::BrokerKind::Memory && !with_relay {
        bail!(
            "--transport memory only works with the relay in the same process: use `jobwire run`"
        );
    }
    let queues: Vec<QueueConfig> = args
        .queues
        .iter()
        .map(|spec| parse_queue(spec))
        .collect::<Result<_>>()?;
    if args.backoff_max_ms < args.backoff_base_ms {
        bail!(
            "--backoff-max-ms {} is below --backoff-base-ms {}: the cap must be at least the first delay",
            args.backoff_max_ms,
            args.backoff_base_ms
        );
    }
    let names: Vec<String> = queues.iter().map(|queue| queue.name.clone()).collect();

    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(
        &mut registry,
        HandlerOptions {
            backoff: Backoff {
                base: Duration::from_millis(args.backoff_base_ms),
                max: Duration::from_millis(args.backoff_max_ms),
                ..Backoff::default()
            },
            ..HandlerOptions::default()
        },
    );
    let config = WorkerConfig {
        runtime: RuntimeConfig {
            worker_id: args
                .worker_id
                .unwrap_or_else(jobwire_consumer::default_worker_id),
            lease: Duration::from_millis(args.lease_ms),
            completion_linger: Duration::from_millis(args.completion_linger_ms),
            ..RuntimeConfig::default()
        },
        queues,
        claim_ahead: args.claim_ahead,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_s),
        safety_net_after: (args.safety_net_after_s > 0)
            .then(|| Duration::from_secs(args.safety_net_after_s)),
        subscribe: SubscribeOptions {
            group: args.consumer_group,
            ..SubscribeOptions::default()
        },
        ..WorkerConfig::default()
    };
    let maintenance = MaintenanceConfig {
        sweeper: (!args.no_sweeper).then(|| SweeperConfig {
            interval: Duration::from_millis(args.sweep_interval_ms),
            ..SweeperConfig::default()
        }),
        retention: args.retention.config(),
        reconciler: (!args.no_reconciler).then(|| ReconcilerConfig {
            grace: Duration::from_secs(args.reconcile_grace_s),
            interval: Duration::from_millis(args.reconcile_interval_ms),
            ..ReconcilerConfig::default()
        }),
        scheduler: (!args.no_scheduler).then(SchedulerConfig::default),
    };
    // Refused here, once, and before the queues' dispatch is declared,
    // rather than by the running node (which logs the failed part and the
    // stop before the error is printed).
    config.validate()?;
    let transport = args.broker.transport(kind).await?;
    // Listened for from here: reaching a broker that does not answer takes
    // up to its timeout (30 s for Kafka), and Ctrl-C must end that wait.
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let declared = async {
        if args.broker.kind.is_some() || kind != brokers::BrokerKind::Postgres {
            // Chosen: the queues go (or come back) to that path.
            brokers::declare_dispatch(&pool, kind, transport.as_deref(), &names).await
        } else {
            brokers::refuse_broker_queues(&pool, &names).await
        }
    };
    tokio::select! {
        declared = declared => declared?,
        () = shutdown.cancelled() => {
            bail!("stopped before the worker started, while declaring its queues' paths")
        }
    }
    let mut worker = Worker::new(pool.clone(), registry, config);
    let mut node = Node::new(pool.clone()).with_maintenance(maintenance);
    if let Some(addr) = args.listen {
        node = node
            .with_http(super::serve::bind(addr, &pool).await?)
            .with_metrics_collector(args.metrics.collector());
    }
    node = args.metrics.add_to(node, &pool).await?;
    if let Some(transport) = transport {
        worker = worker.with_transport(transport.clone());
        if let Some(relay) = relay {
            node = node.with_relay(jobwire_relay::Relay::new(
                pool.clone(),
                transport.clone(),
                relay,
            ));
        }
        node = node.closing(transport);
    }
    let report = node.with_worker(worker).run(shutdown).await?;
    outln!("{}", serde_json::to_string(&report)?);
    Ok(())
}
