//! A wake-up shared by several loops that none of them misses, not even a
//! loop that was busy when it was sent.
//!
//! [`tokio::sync::Notify::notify_waiters`] wakes only the loops waiting at
//! that moment: a NOTIFY that arrives while a loop is in the middle of a
//! pass is dropped, and the loop finds the new row only at its next poll,
//! up to the end of its idle curve later. `notify_one` keeps a permit but
//! wakes one loop of many. [`Wake`] counts what it has sent: a loop marks
//! the count before it looks at the table, and its next wait ends at once
//! if anything was sent since.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::Wait;
use crate::sleep::sleep_or_woken;

/// "Check now", for every loop that shares it; see the module docs.
#[derive(Debug, Default)]
pub struct Wake {
    notify: Notify,
    sent: AtomicU64,
}

impl Wake {
    /// Nothing sent yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wake every loop: those waiting now at once, the busy ones at their
    /// next wait.
    pub fn send(&self) {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// How many wake-ups have been sent so far. A loop takes this before it
    /// looks for work and passes it to [`Wake::sleep_since`].
    pub fn mark(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Sleep for `pause`, until a wake-up is sent, or until `stop` is
    /// cancelled, whichever comes first; at once if a wake-up was sent
    /// after `mark` (while the loop was busy).
    pub async fn sleep_since(&self, mark: u64, pause: Duration, stop: &CancellationToken) -> Wait {
        if stop.is_cancelled() {
            return Wait::Cancelled;
        }
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the count is read: a wake-up sent between the
        // two is seen by one or the other.
        notified.as_mut().enable();
        if self.mark() != mark {
            return Wait::Notified;
        }
        sleep_or_woken(pause, notified, stop).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_sent_while_a_loop_was_busy_ends_its_next_wait() {
        let stop = CancellationToken::new();
        let wake = Wake::new();
        let mark = wake.mark();
        wake.send(); // the loop is in its pass: nobody waits
        let started = tokio::time::Instant::now();
        assert_eq!(
            wake.sleep_since(mark, Duration::from_secs(60), &stop).await,
            Wait::Notified
        );
        assert_eq!(started.elapsed(), Duration::ZERO);

        // Seen once: a wait marked after it sleeps its whole pause.
        let mark = wake.mark();
        assert_eq!(
            wake.sleep_since(mark, Duration::from_secs(1), &stop).await,
            Wait::Elapsed
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn every_waiting_loop_is_woken_and_shutdown_ends_a_wait() {
        let stop = CancellationToken::new();
        let wake = Arc::new(Wake::new());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (wake, stop) = (wake.clone(), stop.clone());
                let mark = wake.mark();
                tokio::spawn(
                    async move { wake.sleep_since(mark, Duration::from_secs(60), &stop).await },
                )
            })
            .collect();
        tokio::task::yield_now().await; // let all three start waiting
        wake.send();
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), Wait::Notified);
        }

        stop.cancel();
        let mark = wake.mark();
        assert!(
            wake.sleep_since(mark, Duration::from_secs(60), &stop)
                .await
                .is_cancelled()
        );
    }
}
