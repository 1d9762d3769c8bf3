//! The [`Node`]: one process's worker, relay lanes and maintenance, started
//! and stopped together.

use std::convert::Infallible;
use std::sync::Arc;

use jobwire_consumer::maintenance::{Maintenance, MaintenanceConfig, MaintenanceError};
use jobwire_consumer::{Worker, WorkerError, WorkerReport};
use jobwire_loop::InvalidSetting;
use jobwire_relay::{Relay, RelayError, RelayReport};
use jobwire_transport::{Transport, TransportError};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{CollectorConfig, DatabaseCollector};
use crate::{HttpServer, NodeReport};

/// Why a node could not start, or a part of it stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A setting cannot work; nothing was started.
    #[error(transparent)]
    Setting(#[from] InvalidSetting),
    /// The worker could not run.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A relay lane could not run.
    #[error(transparent)]
    Relay(#[from] RelayError),
    /// A maintenance loop ended before shutdown.
    #[error(transparent)]
    Maintenance(#[from] MaintenanceError),
    /// Closing a transport at the end failed.
    #[error("closing the {transport} transport failed: {source}")]
    Close {
        /// The transport's name.
        transport: &'static str,
        /// What went wrong.
        source: TransportError,
    },
    /// The HTTP server stopped with an error.
    #[error("the HTTP server failed: {0}")]
    Http(#[from] std::io::Error),
    /// A part panicked (a bug) or was cancelled: what it said.
    #[error("a node task ended: {0}")]
    Panicked(String),
}

/// Everything long-running in one process, composed: at most one
/// [`Worker`], any number of [`Relay`] lanes, the [`Maintenance`] loops, the
/// HTTP API ([`HttpServer`]), the database metrics collector
/// ([`DatabaseCollector`]), and the transports to close at the end. Build it with the `with_*` methods,
/// then [`Node::run`] it until a shutdown signal, or [`Node::start`] it and
/// [`RunningNode::stop`] it later.
///
/// Shutdown is staged, in the order the data flows back: at once, the HTTP
/// API stops taking requests (those under way finish) and the worker stops
/// claiming, drains its running jobs under its shutdown timeout and flushes
/// the last outcomes (whose wake-ups land in the outbox); then the relay
/// lanes stop (a pass under way finishes its publish); then maintenance and
/// the metrics collector; last, the transports close.
#[must_use = "a node does nothing until it is run or started"]
pub struct Node {
    pool: PgPool,
    worker: Option<Worker>,
    relays: Vec<Relay>,
    maintenance: Option<MaintenanceConfig>,
    collector: Option<CollectorConfig>,
    http: Option<HttpServer>,
    transports: Vec<Arc<dyn Transport>>,
}

impl Node {
    /// An empty node over `pool` (the pool the maintenance loops use).
    pub fn new(pool: PgPool) -> Self {
        Node {
            pool,
            worker: None,
            relays: Vec::new(),
            maintenance: None,
            collector: None,
            http: None,
            transports: Vec::new(),
        }
    }

    /// Serve the HTTP API.
    pub fn with_http(mut self, server: HttpServer) -> Self {
        self.http = Some(server);
        self
    }

    /// Run this worker (one per node: it already serves many queues).
    pub fn with_worker(mut self, worker: Worker) -> Self {
        self.worker = Some(worker);
        self
    }

    /// Run this relay; call again for each lane.
    pub fn with_relay(mut self, relay: Relay) -> Self {
        self.relays.push(relay);
        self
    }

    /// Run these maintenance loops.
    pub fn with_maintenance(mut self, config: MaintenanceConfig) -> Self {
        self.maintenance = Some(config);
        self
    }

    /// Take part in the election of the database's metrics collector, and
    /// export the database gauges while elected (see [`DatabaseCollector`]).
    /// Only useful where the process's metrics are served (the HTTP API, or
    /// [`HttpServer::bind_metrics`]).
    pub fn with_metrics_collector(mut self, config: CollectorConfig) -> Self {
        self.collector = Some(config);
        self
    }

    /// Close `transport` once everything that uses it has stopped.
    pub fn closing(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transports.push(transport);
        self
    }

    /// Start every part. Settings are checked first: on an invalid one
    /// nothing is started.
    pub fn start(self) -> Result<RunningNode, NodeError> {
        let maintenance = match self.maintenance {
            Some(config) => Some(Maintenance::new(self.pool.clone(), config)?),
            None => None,
        };
        let collector = match self.collector {
            Some(config) => Some(DatabaseCollector::new(self.pool.clone(), config)?),
            None => None,
        };
        let stop_http = CancellationToken::new();
        let stop_worker = CancellationToken::new();
        let stop_relays = CancellationToken::new();
        let stop_maintenance = CancellationToken::new();
        let failed = CancellationToken::new();
        let http = self.http.map(|server| {
            tokio::spawn(report_failure(
                server.run(stop_http.clone()),
                failed.clone(),
            ))
        });
        let worker = self.worker.map(|worker| {
            tokio::spawn(report_failure(
                worker.run(stop_worker.clone()),
                failed.clone(),
            ))
        });
        let relays = self
            .relays
            .into_iter()
            .map(|relay| {
                tokio::spawn(report_failure(
                    relay.run(stop_relays.clone()),
                    failed.clone(),
                ))
            })
            .collect();
        let maintenance = maintenance
            .filter(|maintenance| !maintenance.is_empty())
            .map(|maintenance| {
                tokio::spawn(report_failure(
                    maintenance.run(stop_maintenance.clone()),
                    failed.clone(),
                ))
            });
        let collector = collector.map(|collector| {
            let stop = stop_maintenance.clone();
            tokio::spawn(report_failure(
                async move {
                    collector.run(stop).await;
                    Ok::<(), Infallible>(())
                },
                failed.clone(),
            ))
        });
        Ok(RunningNode {
            stop_http,
            stop_worker,
            stop_relays,
            stop_maintenance,
            failed,
            http,
            worker,
            relays,
            maintenance,
            collector,
            transports: self.transports,
        })
    }

    /// Start every part, run until `shutdown` is cancelled (or until a part
    /// fails), then stop in stages. Returns what the node did, or the first
    /// error once everything has stopped.
    pub async fn run(self, shutdown: CancellationToken) -> Result<NodeReport, NodeError> {
        let mut running = self.start()?;
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = running.failed.cancelled() => {
                tracing::error!("a part of the node stopped early; stopping the rest");
            }
        }
        running.stop().await
    }
}

/// A started [`Node`]. Dropping it without [`RunningNode::stop`] leaves its
/// tasks running until the runtime ends.
pub struct RunningNode {
    stop_http: CancellationToken,
    stop_worker: CancellationToken,
    stop_relays: CancellationToken,
    stop_maintenance: CancellationToken,
    /// Cancelled when a part ends with an error or a panic before shutdown
    /// (they only end early so).
    failed: CancellationToken,
    http: Option<JoinHandle<std::io::Result<()>>>,
    worker: Option<JoinHandle<Result<WorkerReport, WorkerError>>>,
    relays: Vec<JoinHandle<Result<RelayReport, RelayError>>>,
    maintenance: Option<JoinHandle<Result<(), MaintenanceError>>>,
    collector: Option<JoinHandle<Result<(), Infallible>>>,
    transports: Vec<Arc<dyn Transport>>,
}

impl RunningNode {
    /// Stop in stages (HTTP and the worker, relays, maintenance, transports)
    /// and report.
    /// Safe to call twice: the second call finds nothing left to stop and
    /// returns an empty report.
    pub async fn stop(&mut self) -> Result<NodeReport, NodeError> {
        let mut report = NodeReport::default();
        let mut first_error: Option<NodeError> = None;
        let mut keep = |error: NodeError| {
            tracing::error!(%error, "node part failed");
            first_error.get_or_insert(error);
        };

        // HTTP and the worker begin to stop together: the worker's drain
        // (up to its shutdown timeout) must not wait behind HTTP's, in which
        // it would go on claiming jobs. SIGTERM to the last lease given back
        // stays within the worker's timeout and grace.
        self.stop_http.cancel();
        self.stop_worker.cancel();
        if let Some(handle) = self.http.take() {
            match joined(handle).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => keep(err.into()),
                Err(err) => keep(err),
            }
        }
        if let Some(handle) = self.worker.take() {
            match joined(handle).await {
                Ok(Ok(worker)) => report.worker = Some(worker),
                Ok(Err(err)) => keep(err.into()),
                Err(err) => keep(err),
            }
        }
        self.stop_relays.cancel();
        for handle in self.relays.drain(..) {
            match joined(handle).await {
                Ok(Ok(relay)) => report.relays.push(relay),
                Ok(Err(err)) => keep(err.into()),
                Err(err) => keep(err),
            }
        }
        self.stop_maintenance.cancel();
        if let Some(handle) = self.maintenance.take() {
            match joined(handle).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => keep(err.into()),
                Err(err) => keep(err),
            }
        }
        if let Some(handle) = self.collector.take()
            && let Err(err) = joined(handle).await
        {
            keep(err);
        }
        for transport in self.transports.drain(..) {
            if let Err(source) = transport.close().await {
                keep(NodeError::Close {
                    transport: transport.name(),
                    source,
                });
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }
}

/// Run `part`, cancelling `failed` if it ends with an error or panics (the
/// guard is dropped as the panic unwinds): the node then stops the rest.
async fn report_failure<T, E>(
    part: impl Future<Output = Result<T, E>>,
    failed: CancellationToken,
) -> Result<T, E> {
    let on_panic = failed.clone().drop_guard();
    let result = part.await;
    on_panic.disarm();
    if result.is_err() {
        failed.cancel();
    }
    result
}

/// A task's result, with a panic turned into [`NodeError::Panicked`].
async fn joined<T>(handle: JoinHandle<T>) -> Result<T, NodeError> {
    handle
        .await
        .map_err(|err| NodeError::Panicked(jobwire_loop::why_task_ended(err)))
}
