//! `jobwire bench-schedules`: many schedules due at one instant, fired by
//! concurrent schedulers (see `jobwire_bench::schedule_burst`).

use anyhow::Result;
use sqlx::PgPool;

use crate::database;

#[derive(clap::Args)]
pub(crate) struct BenchSchedulesArgs {
    /// Schedules due at the same instant.
    #[arg(long, default_value_t = 100_000)]
    schedules: usize,
    /// Concurrent schedulers.
    #[arg(long, default_value_t = 2)]
    schedulers: usize,
    /// Jitter window of every schedule, in seconds (a second run is made
    /// with it when it is not 0).
    #[arg(long, default_value_t = 600)]
    jitter_seconds: u32,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn bench_schedules(pool: PgPool, args: BenchSchedulesArgs) -> Result<()> {
    database::migrate_if_empty(&pool).await?;
    database::require_current_schema(&pool).await?;
    let mut runs =
        vec![jobwire_bench::schedule_burst(&pool, args.schedules, args.schedulers, 0).await?];
    if args.jitter_seconds > 0 {
        runs.push(
            jobwire_bench::schedule_burst(
                &pool,
                args.schedules,
                args.schedulers,
                args.jitter_seconds,
            )
            .await?,
        );
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    outln!(
        "{:>9} {:>10} {:>8} {:>12} {:>9} {:>16} {:>12}",
        "schedules",
        "schedulers",
        "jitter",
        "occurrences",
        "seconds",
        "occurrences/s",
        "peak starts/s"
    );
    for run in runs {
        outln!(
            "{:>9} {:>10} {:>7}s {:>12} {:>9.2} {:>16.0} {:>12}   (starts spread over {:.0} s)",
            run.schedules,
            run.schedulers,
            run.jitter_seconds,
            run.occurrences,
            run.seconds,
            run.per_second,
            run.peak_starts_per_second,
            run.start_spread_seconds
        );
    }
    Ok(())
}
