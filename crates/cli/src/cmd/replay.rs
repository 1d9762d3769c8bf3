//! `jobwire replay`: its arguments and replaying dead-lettered jobs.

use anyhow::{Result, bail};
use jobwire_core::ReplayFilter;
use sqlx::PgPool;
use uuid::Uuid;

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// Replay this one job.
    #[arg(conflicts_with_all = ["job_type", "error_code"])]
    job_id: Option<Uuid>,
    /// Replay FAILED jobs of this type.
    #[arg(long)]
    job_type: Option<String>,
    /// Replay FAILED jobs whose last error has this code.
    #[arg(long)]
    error_code: Option<String>,
    /// Most jobs replayed by a group replay.
    #[arg(long, default_value_t = 1000)]
    limit: i64,
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
        println!("{job_id}: replayed");
        return Ok(());
    }
    if args.job_type.is_none() && args.error_code.is_none() {
        bail!("name a job id, or a group with --job-type and/or --error-code");
    }
    let filter = ReplayFilter {
        job_type: args.job_type,
        error_code: args.error_code,
        since: None,
        limit: args.limit,
    };
    let replayed = jobwire_core::replay_dead(pool, &filter, &args.actor, &args.reason).await?;
    println!("{} jobs replayed", replayed.len());
    Ok(())
}
