//! Why a spawned task ended, as text for a log line or an error; and
//! loops that must not end before shutdown, joined.

use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// What a task that did not return said: its panic's message (the text
/// given to `panic!`, or "a panic without a message"), or that it was
/// cancelled.
pub fn why_task_ended(err: JoinError) -> String {
    if !err.is_panic() {
        return "cancelled".to_owned();
    }
    let panic = err.into_panic();
    panic
        .downcast_ref::<&str>()
        .map(|text| format!("panicked: {text}"))
        .or_else(|| {
            panic
                .downcast_ref::<String>()
                .map(|text| format!("panicked: {text}"))
        })
        .unwrap_or_else(|| "panicked: a panic without a message".to_owned())
}

/// Wait for every loop in `loops`. They end only when told to: `stop`,
/// which they watch (a child of the process's shutdown token, or that of
/// a part of it). One that ends while `stop` is not cancelled (a panic, a
/// bug) would leave the process up, ready by its health checks, without
/// that loop: it is logged at ERROR as a loop of `part`, `stop` is
/// cancelled so that the rest end too, and its reason is returned once all
/// have ended (`None` when every loop ended after `stop`). A loop ended by
/// a shutdown finds `stop` already cancelled (a child token is cancelled
/// with its parent), so it is never taken for an early end. A panic after
/// `stop` is logged and nothing more.
pub async fn join_loops(
    loops: &mut JoinSet<()>,
    part: &'static str,
    stop: &CancellationToken,
) -> Option<String> {
    let mut early: Option<String> = None;
    while let Some(ended) = loops.join_next().await {
        if stop.is_cancelled() {
            if let Err(err) = ended {
                tracing::error!(part, error = %why_task_ended(err), "a loop ended while stopping");
            }
            continue;
        }
        let why = match ended {
            Ok(()) => "returned".to_owned(),
            Err(err) => why_task_ended(err),
        };
        tracing::error!(part, error = %why, "a loop ended before shutdown; stopping the rest");
        stop.cancel();
        early = Some(why);
    }
    early
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loop as the callers write them: it ends when `stop` is cancelled.
    async fn until(stop: CancellationToken) {
        stop.cancelled().await;
    }

    #[tokio::test]
    async fn a_loop_that_dies_stops_the_rest_and_says_why() {
        let shutdown = CancellationToken::new();
        let stop = shutdown.child_token();
        let mut loops = JoinSet::new();
        loops.spawn(until(stop.clone()));
        loops.spawn(until(stop.clone()));
        loops.spawn(async { panic!("decoded a row it could not hold") });
        let early = join_loops(&mut loops, "relay", &stop).await;
        assert_eq!(
            early.as_deref(),
            Some("panicked: decoded a row it could not hold")
        );
        assert!(stop.is_cancelled() && !shutdown.is_cancelled());

        let shutdown = CancellationToken::new();
        let stop = shutdown.child_token();
        let mut loops = JoinSet::new();
        loops.spawn(until(stop.clone()));
        loops.spawn(async {});
        let early = join_loops(&mut loops, "maintenance", &stop).await;
        assert_eq!(early.as_deref(), Some("returned"));
    }

    #[tokio::test]
    async fn loops_that_end_at_shutdown_are_no_early_end() {
        let shutdown = CancellationToken::new();
        let stop = shutdown.child_token();
        let mut loops = JoinSet::new();
        for _ in 0..3 {
            loops.spawn(until(stop.clone()));
        }
        // One that panics as it stops: logged, not an early end.
        let stopping = stop.clone();
        loops.spawn(async move {
            stopping.cancelled().await;
            panic!("while flushing");
        });
        let joined = tokio::spawn({
            let stop = stop.clone();
            async move { join_loops(&mut loops, "maintenance", &stop).await }
        });
        tokio::task::yield_now().await;
        shutdown.cancel();
        assert_eq!(joined.await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_panics_message_is_kept() {
        let text = tokio::spawn(async { panic!("overflowed at {}", 22) })
            .await
            .unwrap_err();
        assert_eq!(why_task_ended(text), "panicked: overflowed at 22");
        let literal = tokio::spawn(async { panic!("plain") }).await.unwrap_err();
        assert_eq!(why_task_ended(literal), "panicked: plain");
        let silent = tokio::spawn(async { std::panic::panic_any(7_u8) })
            .await
            .unwrap_err();
        assert_eq!(
            why_task_ended(silent),
            "panicked: a panic without a message"
        );
        let never = tokio::spawn(std::future::pending::<()>());
        never.abort();
        assert_eq!(why_task_ended(never.await.unwrap_err()), "cancelled");
    }
}
