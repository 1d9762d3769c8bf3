//! Sleeps that end early: on shutdown, and (for idle loops) on a wake-up.

use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How a cancellable wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The whole pause passed.
    Elapsed,
    /// A wake-up arrived first.
    Notified,
    /// Shutdown was requested: the loop should return.
    Cancelled,
}

impl Wait {
    /// Whether the loop should stop.
    pub fn is_cancelled(self) -> bool {
        self == Wait::Cancelled
    }
}

/// Sleep for `pause` unless `stop` is cancelled first. Used for back-off,
/// where a wake-up must not cut the pause short.
pub async fn sleep(pause: Duration, stop: &CancellationToken) -> Wait {
    tokio::select! {
        _ = tokio::time::sleep(pause) => Wait::Elapsed,
        _ = stop.cancelled() => Wait::Cancelled,
    }
}

/// Sleep for `pause`, until `wake` is notified, or until `stop` is
/// cancelled, whichever comes first. Used by idle loops: a notification is
/// "check now", the pause is the poll fallback.
pub async fn sleep_or_notified(pause: Duration, wake: &Notify, stop: &CancellationToken) -> Wait {
    sleep_or_woken(pause, wake.notified(), stop).await
}

/// Sleep for `pause`, until `woken` completes, or until `stop` is
/// cancelled, whichever comes first: the wait every idle loop shares,
/// whatever wakes it ([`sleep_or_notified`], [`crate::Wake`]).
pub(crate) async fn sleep_or_woken(
    pause: Duration,
    woken: impl Future<Output = ()>,
    stop: &CancellationToken,
) -> Wait {
    tokio::select! {
        _ = tokio::time::sleep(pause) => Wait::Elapsed,
        _ = woken => Wait::Notified,
        _ = stop.cancelled() => Wait::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_way_a_wait_can_end() {
        let stop = CancellationToken::new();
        let wake = Notify::new();
        assert_eq!(sleep(Duration::from_secs(1), &stop).await, Wait::Elapsed);
        wake.notify_one();
        assert_eq!(
            sleep_or_notified(Duration::from_secs(60), &wake, &stop).await,
            Wait::Notified
        );
        stop.cancel();
        assert!(sleep(Duration::from_secs(60), &stop).await.is_cancelled());
        assert!(
            sleep_or_notified(Duration::from_secs(60), &wake, &stop)
                .await
                .is_cancelled()
        );
    }
}
