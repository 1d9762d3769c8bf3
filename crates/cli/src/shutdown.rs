//! Turning Ctrl-C / SIGTERM into a cancelled shutdown token.

use tokio_util::sync::CancellationToken;

/// Cancel `shutdown` on Ctrl-C or SIGTERM.
pub(crate) async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown signal received");
    shutdown.cancel();
}
