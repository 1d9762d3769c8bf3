//! The runtime's background loops, watched. The lease keeper and the
//! completer run until the runtime shuts down. One that ends before (a
//! panic, a bug) leaves the worker unable to keep its promises: without the
//! lease keeper, running jobs outlive their leases and another worker may
//! run them at the same time; without the completer, no outcome is written
//! and every job is run again after its lease lapses. So such an end is a
//! [`Breakdown`]: the runtime stops starting jobs and cancels the running
//! ones, and the worker stops with the reason, for its supervisor to
//! restart it.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Set once, by the first background loop that ended before it was told to.
#[derive(Debug, Default)]
pub(crate) struct Breakdown {
    reason: OnceLock<String>,
    happened: CancellationToken,
}

impl Breakdown {
    /// Record why the runtime broke down; a later reason is dropped (the
    /// first one is the cause, the rest may be its effects).
    fn record(&self, why: String) {
        if self.reason.set(why).is_ok() {
            self.happened.cancel();
        }
    }

    /// Whether a background loop has ended early.
    pub(crate) fn happened(&self) -> bool {
        self.happened.is_cancelled()
    }

    /// Why the runtime broke down, if it did.
    pub(crate) fn reason(&self) -> Option<String> {
        self.reason.get().cloned()
    }

    /// Wait until a background loop ends early; returns why.
    pub(crate) async fn wait(&self) -> String {
        self.happened.cancelled().await;
        self.reason.get().cloned().unwrap_or_default()
    }
}

/// Spawn `work`, the loop called `name`, and watch it. If it ends while
/// `stop` is not cancelled, `on_breakdown` runs and `breakdown` records
/// why. The handle ends when the loop has ended; an end after `stop` (a
/// panic while flushing, say) is logged and nothing more.
pub(crate) fn spawn_watched<F>(
    name: &'static str,
    stop: CancellationToken,
    breakdown: Arc<Breakdown>,
    on_breakdown: impl FnOnce() + Send + 'static,
    work: F,
) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    // The loop in a task of its own, so that its panic is caught here.
    let work = tokio::spawn(work);
    tokio::spawn(async move {
        let ended = work.await;
        if stop.is_cancelled() {
            if let Err(err) = ended {
                tracing::error!(task = name, error = %jobwire_loop::why_task_ended(err),
                    "a background loop ended while the worker stopped");
            }
            return;
        }
        let why = match ended {
            Ok(()) => "returned".to_owned(),
            Err(err) => jobwire_loop::why_task_ended(err),
        };
        tracing::error!(task = name, error = %why,
            "a background loop ended; cancelling running jobs and stopping the worker");
        // Recorded first: a job that adds its lease after `on_breakdown`
        // has cancelled the others then sees the breakdown and starts not.
        breakdown.record(format!("the {name} {why}"));
        on_breakdown();
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_loop_that_panics_before_its_stop_is_a_breakdown() {
        let breakdown = Arc::new(Breakdown::default());
        let reacted = Arc::new(AtomicBool::new(false));
        let seen = reacted.clone();
        let watched = spawn_watched(
            "lease keeper",
            CancellationToken::new(),
            breakdown.clone(),
            move || seen.store(true, Ordering::SeqCst),
            async { panic!("decoded a row it could not hold") },
        );
        watched.await.expect("the watcher itself ends cleanly");
        assert!(breakdown.happened());
        assert!(reacted.load(Ordering::SeqCst));
        assert_eq!(
            breakdown.wait().await,
            "the lease keeper panicked: decoded a row it could not hold"
        );
    }

    #[tokio::test]
    async fn a_loop_that_returns_before_its_stop_is_a_breakdown() {
        let breakdown = Arc::new(Breakdown::default());
        spawn_watched(
            "completer",
            CancellationToken::new(),
            breakdown.clone(),
            || {},
            async {},
        )
        .await
        .expect("the watcher ends");
        assert_eq!(breakdown.wait().await, "the completer returned");
    }

    #[tokio::test]
    async fn a_loop_that_ends_after_its_stop_is_no_breakdown() {
        let breakdown = Arc::new(Breakdown::default());
        let stop = CancellationToken::new();
        let told = stop.clone();
        let returned = spawn_watched(
            "completer",
            stop.clone(),
            breakdown.clone(),
            || {},
            async move {
                told.cancelled().await;
            },
        );
        stop.cancel();
        returned.await.expect("the watcher ends");
        // A panic while stopping is logged, not a breakdown either.
        let panicked = spawn_watched("lease keeper", stop, breakdown.clone(), || {}, async {
            panic!("while flushing")
        });
        panicked.await.expect("the watcher ends");
        assert!(!breakdown.happened());
        let waited = tokio::time::timeout(Duration::from_millis(50), breakdown.wait()).await;
        assert!(waited.is_err(), "no breakdown to wait for");
    }

    #[tokio::test]
    async fn the_first_reason_is_kept() {
        let breakdown = Arc::new(Breakdown::default());
        for name in ["lease keeper", "completer"] {
            spawn_watched(
                name,
                CancellationToken::new(),
                breakdown.clone(),
                || {},
                async {},
            )
            .await
            .expect("the watcher ends");
        }
        assert_eq!(breakdown.wait().await, "the lease keeper returned");
    }
}
