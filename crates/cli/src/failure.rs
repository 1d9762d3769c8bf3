//! How a failed command reads: in the command line's own terms (a flag, not
//! the library's argument name) and without a backtrace. `RUST_BACKTRACE=1`,
//! kept set in many shells, made anyhow print 35 frames under every typo;
//! a panic still prints its backtrace, as Rust's runtime does.

use std::fmt::Write as _;

use jobwire_core::Error as Core;

/// `err` with a rejected argument named as the command line spells it:
/// `invalid --max-attempts: must be at least 1, got 0`, not `invalid job:
/// max_attempts: …`. Errors of any other kind pass unchanged.
pub(crate) fn in_flag_terms(err: anyhow::Error) -> anyhow::Error {
    // Only an error that is the library's verdict alone: a context added
    // around it says something of its own, kept as it is.
    if err.chain().count() > 1 {
        return err;
    }
    match err.downcast_ref::<Core>() {
        Some(Core::InvalidJob { field, reason }) => {
            anyhow::anyhow!("invalid {}: {reason}", flag_for(field))
        }
        Some(Core::InvalidArgument { argument, reason }) => {
            anyhow::anyhow!("invalid {}: {reason}", flag_for(argument))
        }
        _ => err,
    }
}

/// The flag (or word) that sets what the library calls `name`.
fn flag_for(name: &str) -> String {
    match name {
        "job_type" => "job type",
        "max_attempts" => "--max-attempts",
        "dedup_key" => "--dedup-key",
        "delay" => "--delay-ms",
        "actor" => "--actor",
        "cron" => "--cron",
        "timezone" => "--timezone",
        "jitter_seconds" => "--jitter-seconds",
        "max_catch_up" => "--max-catch-up",
        "max_running" => "--max-running",
        "max_queued" => "--max-queued",
        "shed_depth" => "--shed-depth",
        "enqueue_rate.jobs" | "enqueue_rate.per_seconds" => "--enqueue-rate",
        other => return other.replace('_', " "),
    }
    .to_owned()
}

/// Exit status 75 (`EX_TEMPFAIL` of sysexits.h: try again later) for an
/// enqueue refused by a limit, so a script can tell "full, retry" from any
/// other failure (1).
pub(crate) const LIMITED: u8 = 75;

/// The exit status for `err`: [`LIMITED`] when a queue or tenant limit
/// refused it, 1 otherwise.
pub(crate) fn exit_status(err: &anyhow::Error) -> u8 {
    let limited = err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<Core>(),
            Some(Core::QueueFull { .. } | Core::RateLimited { .. })
        )
    });
    if limited { LIMITED } else { 1 }
}

/// The message for standard error: `Error: …`, then each cause as anyhow
/// lists them, but no backtrace.
pub(crate) fn report(err: &anyhow::Error) -> String {
    let mut text = format!("Error: {err}");
    let causes: Vec<String> = err.chain().skip(1).map(ToString::to_string).collect();
    match causes.as_slice() {
        [] => {}
        [only] => {
            let _ = write!(text, "\n\nCaused by:\n    {only}");
        }
        many => {
            text.push_str("\n\nCaused by:");
            for (index, cause) in many.iter().enumerate() {
                let _ = write!(text, "\n    {index}: {cause}");
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_by_a_limit_exits_75_and_any_other_failure_1() {
        let full = anyhow::Error::new(Core::QueueFull {
            reason: jobwire_core::FullReason::Queue,
            queue: "imports".into(),
            tenant: None,
            limit: 2,
            retry_after: std::time::Duration::from_secs(1),
            message: "queue imports is full".into(),
        });
        assert_eq!(exit_status(&full), LIMITED);
        let limited = anyhow::Error::new(Core::RateLimited {
            queue: "imports".into(),
            tenant: "acme".into(),
            limit: 1,
            per_seconds: 3600,
            retry_after: std::time::Duration::from_secs(60),
            message: "over its rate".into(),
        })
        .context("enqueueing import_row");
        assert_eq!(exit_status(&limited), LIMITED, "found under a context too");
        let other = anyhow::Error::new(Core::InvalidArgument {
            argument: "max_queued",
            reason: "must be at least 1".into(),
        });
        assert_eq!(exit_status(&other), 1);
        assert_eq!(exit_status(&anyhow::anyhow!("no database")), 1);
    }

    #[test]
    fn a_rejected_argument_is_named_by_its_flag() {
        let err = in_flag_terms(
            Core::InvalidJob {
                field: "max_attempts",
                reason: "must be at least 1, got 0".into(),
            }
            .into(),
        );
        assert_eq!(
            err.to_string(),
            "invalid --max-attempts: must be at least 1, got 0"
        );
        let err = in_flag_terms(
            Core::InvalidArgument {
                argument: "shed_depth",
                reason: "7 is not below 5".into(),
            }
            .into(),
        );
        assert_eq!(err.to_string(), "invalid --shed-depth: 7 is not below 5");
        // With a context of its own, the message stays as it was.
        let wrapped = anyhow::Error::from(Core::InvalidArgument {
            argument: "shed_depth",
            reason: "7 is not below 5".into(),
        })
        .context("cannot set the limits");
        assert_eq!(in_flag_terms(wrapped).to_string(), "cannot set the limits");
    }

    #[test]
    fn the_report_lists_causes_and_no_backtrace() {
        let single = anyhow::anyhow!("no such job");
        assert_eq!(report(&single), "Error: no such job");
        let two = anyhow::anyhow!("refused").context("cannot connect");
        assert_eq!(
            report(&two),
            "Error: cannot connect\n\nCaused by:\n    refused"
        );
        let three = anyhow::anyhow!("refused")
            .context("cannot connect")
            .context("cannot start");
        assert_eq!(
            report(&three),
            "Error: cannot start\n\nCaused by:\n    0: cannot connect\n    1: refused"
        );
    }
}
