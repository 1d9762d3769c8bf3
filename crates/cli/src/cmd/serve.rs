//! `jobwire serve`: the HTTP API on its own, until Ctrl-C / SIGTERM.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use jobwire_server::{HttpServer, Node};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::database;
use crate::shutdown::cancel_on_signal;

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Loopback by default: give 0.0.0.0:8080 (or a
    /// host's address) to accept other machines' requests.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = crate::listen_address::parse)]
    listen: SocketAddr,
    #[command(flatten)]
    collector: crate::metrics::CollectorArgs,
}

/// Bind the API to `addr`, with an error that says which address is taken.
pub(crate) async fn bind(addr: SocketAddr, pool: &PgPool) -> Result<HttpServer> {
    HttpServer::bind(addr, pool.clone())
        .await
        .with_context(|| format!("cannot listen on {addr} (is another server using it?)"))
}

pub(crate) async fn serve(pool: PgPool, args: ServeArgs) -> Result<()> {
    database::require_current_schema(&pool).await?;
    let server = bind(args.listen, &pool).await?;
    eprintln!(
        "jobwire API on http://{} (tokens: `jobwire token create NAME --scope read|write|admin`)",
        server.local_addr()?
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    Node::new(pool)
        .with_http(server)
        .with_metrics_collector(args.collector.collector())
        .run(shutdown)
        .await?;
    Ok(())
}
