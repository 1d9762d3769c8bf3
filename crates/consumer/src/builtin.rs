//! Built-in handlers for demos, smoke tests and benchmarks.
//!
//! - `noop`: succeeds at once.
//! - `sleep`: `{"ms": N}`, sleeps N ms; stops early (and says so) when cancelled.
//! - `fail_times`: `{"times": N}`, fails with a retryable `FLAKY` error on its
//!   first N attempts, then succeeds.
//! - `always_fail`: fails with a retryable `ALWAYS_FAILS` error: a poison job.
//! - `fail_fatal`: fails with a fatal `FATAL_DEMO` error on its first attempt.
//! - `panic`: panics (counted as a failed, retryable attempt).

use std::time::Duration;

use serde::Deserialize;

use crate::{HandlerOptions, HandlerRegistry, JobContext, JobError};

#[derive(Deserialize)]
struct SleepArgs {
    ms: u64,
}

#[derive(Deserialize)]
struct FailTimesArgs {
    times: i32,
}

/// Register every built-in handler with `options` (demos use a short backoff
/// so that retries show up within seconds).
pub fn register_builtin_handlers(registry: &mut HandlerRegistry, options: HandlerOptions) {
    registry.register_with("noop", |_ctx: JobContext| async { Ok(()) }, options);
    registry.register_with(
        "sleep",
        |ctx: JobContext| async move {
            let args: SleepArgs = ctx.payload_as()?;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(()),
                _ = ctx.cancelled() => Err(JobError::cancelled()),
            }
        },
        options,
    );
    registry.register_with(
        "fail_times",
        |ctx: JobContext| async move {
            let args: FailTimesArgs = ctx.payload_as()?;
            if ctx.attempt() <= args.times {
                Err(JobError::retryable(
                    "FLAKY",
                    format!(
                        "failing attempt {} of the first {}",
                        ctx.attempt(),
                        args.times
                    ),
                ))
            } else {
                Ok(())
            }
        },
        options,
    );
    registry.register_with(
        "always_fail",
        |ctx: JobContext| async move {
            Err(JobError::retryable(
                "ALWAYS_FAILS",
                format!("attempt {} failed, as it always does", ctx.attempt()),
            ))
        },
        options,
    );
    registry.register_with(
        "fail_fatal",
        |_ctx: JobContext| async move {
            Err(JobError::fatal("FATAL_DEMO", "this job can never succeed"))
        },
        options,
    );
    registry.register_with(
        "panic",
        |_ctx: JobContext| async move {
            if true {
                panic!("the panic handler panicked, as asked");
            }
            Ok(())
        },
        options,
    );
}
