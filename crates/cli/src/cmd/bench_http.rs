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
    /// Rounds per client count, each a library run and an HTTP run, the
    /// one that goes first alternating; the ratio reported is the median
    /// of the rounds' (the lower middle one for an even count).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn bench_http(pool: PgPool, args: BenchHttpArgs) -> Result<()> {
    // Migrates an empty database, refuses one whose schema is behind.
    database::migrate_if_empty(&pool).await?;
    let comparisons =
        jobwire_bench::http_producer(&pool, &args.clients, args.jobs, args.rounds).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&comparisons)?);
        return Ok(());
    }
    outln!(
        "{:>7} {:>5} {:<9} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "clients",
        "round",
        "interface",
        "jobs",
        "seconds",
        "jobs/s",
        "p50 ms",
        "p99 ms"
    );
    for comparison in &comparisons {
        for (number, round) in comparison.rounds.iter().enumerate() {
            let runs = if round.first == "http" {
                [&round.http, &round.library]
            } else {
                [&round.library, &round.http]
            };
            for run in runs {
                outln!(
                    "{:>7} {:>5} {:<9} {:>7} {:>8.2} {:>8.0} {:>8.2} {:>8.2}",
                    run.clients,
                    number + 1,
                    run.interface,
                    run.jobs,
                    run.seconds,
                    run.per_second,
                    run.p50_ms,
                    run.p99_ms
                );
            }
            outln!("{:>13} http / library = {:.2}", "", round.http_over_library);
        }
        outln!(
            "{:>7} median of {} rounds: library {:.0} jobs/s, http {:.0} jobs/s, http / library = {:.2}",
            comparison.clients,
            comparison.rounds.len(),
            comparison.library_per_second,
            comparison.http_per_second,
            comparison.http_over_library
        );
    }
    outln!(
        "\nsingle jobs enqueued as fast as the clients go, each client one at a time, through a pool of as many connections as clients, opened before the first round; http = POST /jobs to the API server in this process on a loopback port (a write token made for each run, revoked after); the interface that goes first alternates from round to round; no worker runs the jobs, which are deleted after each run"
    );
    Ok(())
}
