//! Built-in handlers for demos, smoke tests and benchmarks.
//!
//! - `noop`: succeeds at once.
//! - `sleep`: `{"ms": N}`, sleeps N ms; stops early (and says so) when cancelled.
//! - `fail_times`: `{"times": N}`, fails with a retryable `FLAKY` error on its
//!   first N attempts, then succeeds.
//! - `always_fail`: fails with a retryable `ALWAYS_FAILS` error: a poison job.
//! - `fail_fatal`: fails with a fatal `FATAL_DEMO` error on its first attempt.
//! - `panic`: panics (counted as a failed, retryable attempt).
//! - `record_run`: `{"ms": N, "fail_first": bool, "fatal": bool}`, records
//!   the run (job, lease generation, attempt, worker) as a row in
//!   `handler_runs` — a side effect an outside check can count — then sleeps
//!   N ms, then fails its first attempt (`FLAKY`) or every attempt
//!   (`FAULT_FATAL`, fatal) when asked. `jobwire faults` creates the table.

use std::time::Duration;

use serde::Deserialize;

use crate::{HandlerOptions, HandlerRegistry, JobContext, JobError};

#[derive(Deserialize)]
struct SleepArgs {
    ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordRunArgs {
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    fail_first: bool,
    #[serde(default)]
    fatal: bool,
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
    registry.register_with("record_run", record_run, options);
}

/// The `record_run` handler: its run is a row in `handler_runs`, written
/// before the work so that a run cut short by a crash is still counted.
async fn record_run(ctx: JobContext) -> Result<(), JobError> {
    let args: RecordRunArgs = ctx.payload_as()?;
    sqlx::query(
        "INSERT INTO handler_runs (job_id, lease_generation, attempt, worker_id) VALUES ($1, $2, $3, $4)",
    )
    .bind(ctx.job_id())
    .bind(ctx.generation().0)
    .bind(ctx.attempt())
    .bind(ctx.worker_id())
    .execute(ctx.pool())
    .await
    // No row, no run: the attempt did nothing and can be retried.
    .map_err(|err| JobError::retryable("RUN_NOT_RECORDED", err))?;
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(args.ms)) => {}
        _ = ctx.cancelled() => return Err(JobError::cancelled()),
    }
    if args.fatal {
        return Err(JobError::fatal("FAULT_FATAL", "this job fails by design"));
    }
    if args.fail_first && ctx.attempt() == 1 {
        return Err(JobError::retryable(
            "FLAKY",
            "the first attempt fails by design",
        ));
    }
    Ok(())
}
