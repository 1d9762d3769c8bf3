//! LISTEN on a PostgreSQL channel for as long as a loop runs, reconnecting
//! after failures. Notifications are hints ("check now"): whenever some may
//! have been lost, the caller is told so it can check everything once.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use crate::{Outage, Pause, sleep};

/// What [`listen`] reports to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenEvent<'a> {
    /// A notification arrived with this payload.
    Notification(&'a str),
    /// Listening (again): anything sent before now may have been missed,
    /// so check everything once.
    MayHaveMissed,
    /// The connection dropped: nothing is heard until the next
    /// [`ListenEvent::MayHaveMissed`]. A caller that only wakes up on
    /// notifications checks everything here too; one that keeps what a
    /// notification would make stale stops trusting it here.
    Lost,
}

/// LISTEN on `channel` until `stop`, calling `on_event` for each
/// notification and whenever notifications may have been missed. A
/// connection that cannot be opened, or a LISTEN that fails, is retried
/// after a [`Pause`]; the callers meanwhile rely on their poll fallback.
pub async fn listen(
    pool: PgPool,
    channel: &str,
    stop: CancellationToken,
    mut on_event: impl FnMut(ListenEvent<'_>),
) {
    let mut pause = Pause::standard();
    // Between connections that are cut soon after they open, whatever
    // came between them (see `pause_before_reopening`).
    let mut cuts = Pause::standard();
    // From a lost connection or a failed attempt to the LISTEN that works.
    let mut outage = Outage::new();
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                // A dropped connection is reported at once (Ok(None) below)
                // and reconnected here; sqlx would otherwise reconnect inside
                // try_recv first, hearing nothing meanwhile with no one told.
                listener.eager_reconnect(false);
                listener
            }
            Err(err) => {
                outage.failed();
                tracing::warn!(%channel, error = %err, "cannot open a LISTEN connection; polling meanwhile");
                if sleep(pause.next_after_failure(), &stop)
                    .await
                    .is_cancelled()
                {
                    return;
                }
                continue;
            }
        };
        if let Err(err) = listener.listen(channel).await {
            outage.failed();
            tracing::warn!(%channel, error = %err, "LISTEN failed; retrying");
            if sleep(pause.next_after_failure(), &stop)
                .await
                .is_cancelled()
            {
                return;
            }
            continue;
        }
        pause.reset();
        let listening_since = std::time::Instant::now();
        if let Some(ended) = outage.succeeded() {
            tracing::info!(%channel, "listening again {ended}");
        }
        // Anything sent while we were not listening is only visible to a
        // check of the table.
        on_event(ListenEvent::MayHaveMissed);
        loop {
            let next = tokio::select! {
                next = listener.try_recv() => next,
                _ = stop.cancelled() => return,
            };
            match next {
                Ok(Some(notification)) => {
                    on_event(ListenEvent::Notification(notification.payload()));
                }
                // The connection dropped. Reconnect here rather than in
                // the next try_recv, so that the caller hears when
                // listening resumes (MayHaveMissed, above): notifications
                // sent meanwhile are lost.
                Ok(None) => {
                    tracing::warn!(%channel, "LISTEN connection dropped; reconnecting");
                    outage.failed();
                    on_event(ListenEvent::Lost);
                    break;
                }
                Err(err) => {
                    tracing::warn!(%channel, error = %err, "LISTEN connection failed; reconnecting");
                    outage.failed();
                    on_event(ListenEvent::Lost);
                    break;
                }
            }
        }
        let wait = pause_before_reopening(listening_since.elapsed(), &mut cuts);
        if !wait.is_zero() && sleep(wait, &stop).await.is_cancelled() {
            return;
        }
    }
}

/// A LISTEN connection that lasted this long was healthy: once it drops,
/// the next is opened at once, and the pause between cuts starts over.
const STEADY: Duration = Duration::from_secs(30);

/// How long to wait before reopening a LISTEN connection that dropped
/// after `listened_for`. One that dropped sooner than [`STEADY`] (a proxy or
/// a script that cuts each connection soon after it opens) is reopened
/// after a pause that doubles with each such cut: cut again and again, it
/// would otherwise reconnect without end, each time warning and making
/// every caller check everything. That pause is its own, apart from the one
/// between failed attempts to connect (reset by each LISTEN that works).
fn pause_before_reopening(listened_for: Duration, pause: &mut Pause) -> Duration {
    if listened_for >= STEADY {
        pause.reset();
        Duration::ZERO
    } else {
        pause.next_after_failure()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_cut_soon_after_it_opened_is_reopened_after_a_growing_pause() {
        let mut pause = Pause::new(Duration::from_millis(100), Duration::from_secs(5));
        let cut_soon: Vec<Duration> = (0..4)
            .map(|_| pause_before_reopening(Duration::from_millis(50), &mut pause))
            .collect();
        for (earlier, later) in cut_soon.iter().zip(&cut_soon[1..]) {
            assert!(later > earlier, "{cut_soon:?}");
        }
        assert!(cut_soon[0] >= Duration::from_millis(80), "{cut_soon:?}");
        // A healthy connection that drops is reopened at once, and the
        // pause starts over.
        assert_eq!(pause_before_reopening(STEADY, &mut pause), Duration::ZERO);
        assert_eq!(pause.current(), Duration::from_millis(100));
    }
}
