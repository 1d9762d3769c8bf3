//! `jobwire relay`: its arguments and draining the outbox into a broker.

use std::time::Duration;

use anyhow::{Result, bail};
use jobwire_server::Node;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::shutdown::cancel_on_signal;
use crate::{brokers, database};

#[derive(clap::Args)]
pub(crate) struct RelayArgs {
    #[command(flatten)]
    broker: brokers::BrokerArgs,
    /// Most rows per pass (one transaction, one publish call).
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().batch_size,
          value_parser = super::count_arg::at_least_one)]
    batch_size: usize,
    /// Parallel drain tasks (unordered mode).
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().concurrency,
          value_parser = super::count_arg::at_least_one)]
    concurrency: usize,
    /// Publish rows of one message key in id order, with keys hashed into
    /// this many shards (each drained by one relay at a time).
    #[arg(long)]
    ordered_shards: Option<u32>,
    /// Attempts before a row that keeps failing is moved to job_outbox_dead.
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().max_attempts)]
    max_attempts: i32,
    /// Prefix added to every outbox topic to form the broker destination.
    #[arg(long, default_value = "")]
    topic_prefix: String,
    /// Explicit mapping TOPIC=DESTINATION (repeatable).
    #[arg(long = "map-topic")]
    topic_map: Vec<String>,
    /// Poll interval in milliseconds when no NOTIFY arrives.
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
    /// Drain only these outbox topics (a dedicated lane, e.g. for urgent
    /// queues: run another relay with --except-topics beside it).
    #[arg(long, value_delimiter = ',', conflicts_with = "except_topics")]
    only_topics: Vec<String>,
    /// Drain every outbox topic except these.
    #[arg(long, value_delimiter = ',')]
    except_topics: Vec<String>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

pub(crate) async fn relay(pool: PgPool, args: RelayArgs) -> Result<()> {
    database::require_current_schema(&pool).await?;
    let mut topics = jobwire_relay::TopicMap {
        prefix: args.topic_prefix,
        ..jobwire_relay::TopicMap::default()
    };
    for mapping in &args.topic_map {
        let Some((from, to)) = mapping.split_once('=') else {
            bail!("--map-topic takes TOPIC=DESTINATION, got {mapping:?}");
        };
        topics.overrides.insert(from.to_owned(), to.to_owned());
    }
    let config = jobwire_relay::RelayConfig {
        batch_size: args.batch_size,
        concurrency: args.concurrency,
        poll_interval: Duration::from_millis(args.poll_ms),
        max_attempts: args.max_attempts,
        topics,
        ordering: match args.ordered_shards {
            Some(shards) => jobwire_relay::KeyOrdering::PerKey { shards },
            None => jobwire_relay::KeyOrdering::Unordered,
        },
        lane: match (args.only_topics, args.except_topics) {
            (only, _) if !only.is_empty() => jobwire_relay::TopicLane::Only(only),
            (_, except) if !except.is_empty() => jobwire_relay::TopicLane::Except(except),
            _ => jobwire_relay::TopicLane::All,
        },
        ..jobwire_relay::RelayConfig::default()
    };
    config.validate()?;
    let transport = args.broker.shared_transport().await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let node = Node::new(pool.clone())
        .with_relay(jobwire_relay::Relay::new(
            pool.clone(),
            transport.clone(),
            config,
        ))
        .closing(transport);
    let report = args
        .metrics
        .add_to(node, &pool)
        .await?
        .run(shutdown)
        .await?;
    for relayed in &report.relays {
        outln!("{}", serde_json::to_string(relayed)?);
    }
    Ok(())
}
