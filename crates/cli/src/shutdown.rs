//! Turning Ctrl-C / SIGTERM into a cancelled shutdown token, and a second
//! one into an exit at once.

use tokio_util::sync::CancellationToken;

/// The exit status after a second signal: 128 + SIGINT, as a shell reports
/// a process stopped by Ctrl-C.
const EXIT_AT_ONCE: i32 = 130;

/// Cancel `shutdown` on Ctrl-C or SIGTERM; on a second one, 2 s or more
/// after the first, exit at once.
///
/// A graceful stop waits for running jobs (up to `--shutdown-timeout-s`)
/// and, with the database away, for the last outcomes' tries: an operator
/// who cannot wait signals again rather than reaching for SIGKILL. What
/// then runs is given up as at a crash: the leases lapse and the sweeper
/// retries those jobs.
pub(crate) async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut signals = match Signals::listen() {
        Ok(signals) => signals,
        Err(err) => {
            tracing::error!(error = %err,
                "cannot listen for Ctrl-C or SIGTERM: this process can only be killed, not stopped gracefully");
            return;
        }
    };
    signals.next().await;
    let first = std::time::Instant::now();
    tracing::info!("shutdown signal received; stopping gracefully (signal again to exit at once)");
    shutdown.cancel();
    loop {
        signals.next().await;
        if first.elapsed() >= SAME_REQUEST {
            break;
        }
        // Process managers send two at once (Ctrl-C reaches a process
        // group as SIGINT while the manager forwards a SIGTERM; systemd
        // follows an ExecStop kill with its KillSignal): one request.
        tracing::info!("another shutdown signal right after the first: still stopping gracefully");
    }
    tracing::warn!(
        "second shutdown signal: exiting at once; the leases of jobs still running will lapse and the sweeper will retry them"
    );
    std::process::exit(EXIT_AT_ONCE);
}

/// Signals this soon after the first are the same request to stop.
const SAME_REQUEST: std::time::Duration = std::time::Duration::from_secs(2);

/// Cancel `shutdown` on Ctrl-C or SIGTERM, and ignore any later one: for a
/// command whose own clean-up must run after it is interrupted (`jobwire
/// faults` drops its scenario's database and topics).
pub(crate) async fn cancel_on_first_signal(shutdown: CancellationToken) {
    let Ok(mut signals) = Signals::listen() else {
        tracing::error!("cannot listen for Ctrl-C or SIGTERM");
        return;
    };
    signals.next().await;
    tracing::info!("shutdown signal received; cleaning up");
    shutdown.cancel();
    loop {
        signals.next().await;
        tracing::info!(
            "cleaning up first; stop this process with SIGKILL to leave what it made behind"
        );
    }
}

/// The shutdown signals, each heard as often as it comes.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
