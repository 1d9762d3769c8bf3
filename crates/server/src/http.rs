//! The HTTP server as a part of a [`Node`](crate::Node): bound before the
//! node starts (so a taken port is an error at startup, not a log line),
//! served until shutdown, then finishing the requests under way.

use std::net::SocketAddr;
use std::time::Duration;

use axum::serve::ListenerExt;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long the requests under way may take to finish after shutdown is
/// asked for; then their connections are closed, so a slow client or a long
/// retry cannot hold up the rest of the node's staged shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The API, bound to its address and ready to serve.
pub struct HttpServer {
    /// What it serves, for its log line: "HTTP API" or "metrics and health checks".
    serves: &'static str,
    listener: TcpListener,
    router: axum::Router,
}

impl HttpServer {
    /// Bind the API over `pool` to `addr`. Use a loopback address unless the
    /// API must be reachable from other machines (every route but the
    /// health checks needs a token either way).
    pub async fn bind(addr: SocketAddr, pool: PgPool) -> std::io::Result<Self> {
        Self::bind_router(addr, crate::api::router(pool), "HTTP API").await
    }

    /// Bind only `/metrics` and the health checks (for a worker or relay
    /// process that serves no API) to `addr`; same tokens as the API.
    pub async fn bind_metrics(addr: SocketAddr, pool: PgPool) -> std::io::Result<Self> {
        Self::bind_router(
            addr,
            crate::api::metrics_router(pool),
            "metrics and health checks",
        )
        .await
    }

    async fn bind_router(
        addr: SocketAddr,
        router: axum::Router,
        serves: &'static str,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the HTTP server listens beyond this machine");
        }
        Ok(HttpServer {
            serves,
            listener,
            router,
        })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown`, then let the requests under way finish (for
    /// up to ten seconds).
    pub async fn run(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let addr = self.listener.local_addr()?;
        tracing::info!(%addr, "{} listening", self.serves);
        // Small answers go out at once: without TCP_NODELAY, a response
        // written in more than one piece can wait on the client's delayed
        // acknowledgement (tens of milliseconds) for its last piece.
        let listener = self.listener.tap_io(|stream| {
            if let Err(err) = stream.set_nodelay(true) {
                tracing::debug!(error = %err, "could not set TCP_NODELAY on a connection");
            }
        });
        let serve = axum::serve(listener, self.router)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned());
        let served = tokio::select! {
            served = serve => served,
            _ = async {
                shutdown.cancelled().await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => {
                tracing::warn!("HTTP requests still under way after the shutdown grace; closing them");
                Ok(())
            }
        };
        // The matching line to "listening": an operator stopping the
        // server sees that it has.
        if served.is_ok() {
            tracing::info!(%addr, "{} stopped", self.serves);
        }
        served
    }
}
