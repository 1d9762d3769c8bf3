//! `jobwire replay`: its arguments and replaying dead-lettered jobs.

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use jobwire_core::ReplayFilter;
use sqlx::PgPool;
use uuid::Uuid;

/// Rows per statement of a group replay: each batch is its own short
/// transaction, so no replay holds locks on many rows for long.
pub(crate) const REPLAY_BATCH: i64 = 1000;

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// Replay this one job.
    #[arg(conflicts_with_all = ["job_type", "error_code", "since", "until", "limit"],
          value_parser = super::job_id_arg::job_id)]
    job_id: Option<Uuid>,
    /// Replay FAILED jobs of this type.
    #[arg(long)]
    job_type: Option<String>,
    /// Replay FAILED jobs whose last error has this code.
    #[arg(long)]
    error_code: Option<String>,
    /// Only jobs that failed at or after this RFC 3339 time.
    #[arg(long, value_parser = jobwire_core::parse_time)]
    since: Option<DateTime<Utc>>,
    /// Only jobs that failed at or before this RFC 3339 time (default: now,
    /// so jobs that fail again during the replay are not replayed twice).
    #[arg(long, value_parser = jobwire_core::parse_time)]
    until: Option<DateTime<Utc>>,
    /// Most jobs a group replay requeues (default: every match).
    #[arg(long, value_parser = replay_limit)]
    limit: Option<i64>,
    /// Who is replaying (recorded in job_audit).
    #[arg(long, env = "USER", default_value = "operator")]
    actor: String,
    /// Why (recorded in job_audit).
    #[arg(long, default_value = "replayed from the command line")]
    reason: String,
}

pub(crate) async fn replay(pool: &PgPool, args: ReplayArgs) -> Result<()> {
    if let Some(job_id) = args.job_id {
        jobwire_core::replay_dead_job(pool, job_id, &args.actor, &args.reason).await?;
        outln!("{job_id}: replayed");
        return Ok(());
    }
    if args.job_type.is_none() && args.error_code.is_none() {
        bail!("name a job id, or a group with --job-type and/or --error-code");
    }
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since > until
    {
        bail!("--since ({since}) is after --until ({until}): no job can match");
    }
    let filter = ReplayFilter {
        job_type: args.job_type,
        error_code: args.error_code,
        since: args.since,
        until: args.until,
        limit: args.limit.unwrap_or(i64::MAX),
    };
    let replay = jobwire_core::replay_dead_in_batches(
        pool,
        &filter,
        REPLAY_BATCH,
        &args.actor,
        &args.reason,
    )
    .await?;
    if replay.requeued == 0 {
        // As `outbox replay`: a group that matches nothing is most often a
        // mistyped type or code, and a script should hear of it.
        bail!(
            "no dead letter matches --job-type/--error-code (failed until {}): nothing replayed; `jobwire dead-letters` lists the groups",
            replay.until.to_rfc3339()
        );
    }
    outln!(
        "{} {} replayed (failed until {})",
        replay.requeued,
        if replay.requeued == 1 { "job" } else { "jobs" },
        replay.until.to_rfc3339()
    );
    Ok(())
}

/// `--limit`: a whole number of jobs, at least 1.
fn replay_limit(text: &str) -> Result<i64, String> {
    match text.parse::<i64>() {
        Ok(limit) if limit >= 1 => Ok(limit),
        Ok(_) => Err(format!(
            "{text} is not at least 1 (leave --limit out to replay every match)"
        )),
        Err(_) => Err(format!("{text:?} is not a whole number of jobs")),
    }
}
