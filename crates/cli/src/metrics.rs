//! The metrics arguments long-running commands share, and how they add
//! `/metrics` and the database collector to a node.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use jobwire_server::metrics::CollectorConfig;
use jobwire_server::{HttpServer, Node};
use sqlx::PgPool;

/// The database collector's setting, for every command that serves /metrics.
#[derive(clap::Args)]
pub(crate) struct CollectorArgs {
    /// Milliseconds between reads of the database gauges (depth, oldest
    /// runnable job, outbox, bloat), done by the one process of all those
    /// serving metrics that is elected to (1 to 10000).
    // The bound is the collector's own (`CollectorConfig::validate`),
    // checked here too so a bad value is refused before anything starts.
    #[arg(long, default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    metrics_interval_ms: u64,
}

impl CollectorArgs {
    pub(crate) fn collector(&self) -> CollectorConfig {
        CollectorConfig {
            interval: Duration::from_millis(self.metrics_interval_ms),
            ..CollectorConfig::default()
        }
    }
}

/// `--metrics-listen` and the collector, for processes that may serve no API.
#[derive(clap::Args)]
pub(crate) struct MetricsArgs {
    /// Serve /metrics (and /healthz, /readyz) on this address, for a
    /// process that serves no API; a `read` token is needed as for the API.
    #[arg(long, value_parser = crate::listen_address::parse)]
    metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    collector: CollectorArgs,
}

impl MetricsArgs {
    pub(crate) fn collector(&self) -> CollectorConfig {
        self.collector.collector()
    }

    /// Serve /metrics alone when asked to, with the collector.
    pub(crate) async fn add_to(&self, node: Node, pool: &PgPool) -> Result<Node> {
        let Some(addr) = self.metrics_listen else {
            return Ok(node);
        };
        let server = HttpServer::bind_metrics(addr, pool.clone())
            .await
            .with_context(|| format!("cannot listen on {addr} (is another server using it?)"))?;
        eprintln!("jobwire metrics on http://{}/metrics", server.local_addr()?);
        Ok(node
            .with_http(server)
            .with_metrics_collector(self.collector()))
    }

    /// Whether `--metrics-listen` was given.
    pub(crate) fn listens(&self) -> bool {
        self.metrics_listen.is_some()
    }
}
