//! `jobwire bench-http`: `POST /jobs` throughput and latency against the
//! library's single-job enqueue (see `jobwire_bench::http_producer`).

use anyhow::Result;
use sqlx::PgPool;

use crate::database;

#[derive(clap::Args)]
pub(crate) struct BenchHttpArgs {
    /// Concurrent clients, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [8, 64])]
    clients: Vec<usize>,
    /// Jobs each run enqueues.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn bench_http(pool: PgPool, args: BenchHttpArgs) -> Result<()> {
    // Migrates an empty database, refuses one whose schema is behind.
    database::migrate_if_empty(&pool).await?;
    let comparisons = jobwire_bench::http_producer(&pool, &args.clients, args.jobs).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparisons)?);
        return Ok(());
    }
    println!(
        "{:>7} {:<9} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "clients", "interface", "jobs", "seconds", "jobs/s", "p50 ms", "p99 ms"
    );
    for comparison in &comparisons {
        for run in [&comparison.library, &comparison.http] {
            println!(
                "{:>7} {:<9} {:>7} {:>8.2} {:>8.0} {:>8.2} {:>8.2}",
                run.clients,
                run.interface,
                run.jobs,
                run.seconds,
                run.per_second,
                run.p50_ms,
                run.p99_ms
            );
        }
        println!(
            "{:>7} http / library = {:.2}",
            "", comparison.http_over_library
        );
    }
    println!(
        "\nsingle jobs enqueued as fast as the clients go, each client one at a time, through a pool of as many connections as clients; http = POST /jobs to the API server in this process on a loopback port (a write token made for the run, revoked after); no worker runs the jobs, which are deleted after each run"
    );
    Ok(())
}
