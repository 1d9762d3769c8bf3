//! Why a spawned task ended, as text for a log line or an error.

use tokio::task::JoinError;

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

#[cfg(test)]
mod tests {
    use super::*;

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
