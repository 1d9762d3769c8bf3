//! `jobwire`: operate a jobwire database from the command line.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cmd::bench::BenchArgs;
use cmd::bench_http::BenchHttpArgs;
use cmd::bench_schedules::BenchSchedulesArgs;
use cmd::enqueue::EnqueueArgs;
use cmd::outbox::OutboxCommand;
use cmd::queue::QueueCommand;
use cmd::relay::RelayArgs;
use cmd::replay::ReplayArgs;
use cmd::schedule::ScheduleCommand;
use cmd::serve::ServeArgs;
use cmd::tenant::TenantCommand;
use cmd::token::TokenCommand;
use cmd::worker::{RunArgs, WorkerArgs};
use sqlx::PgPool;
use uuid::Uuid;

#[macro_use]
mod output;

mod brokers;
mod cmd;
mod database;
mod demo;
mod failure;
mod faults;
mod listen_address;
mod metrics;
mod shutdown;
mod telemetry;

/// The fewest connections a worker, relay or API server can work with: one
/// is held by its LISTEN for as long as it runs.
const MIN_SERVING_POOL_SIZE: u32 = 2;

/// The local PostgreSQL every machine of ours runs; `jobwire demo` creates
/// the database if it is missing.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/jobwire";

#[derive(Parser)]
#[command(
    name = "jobwire",
    version,
    about = "Background jobs with PostgreSQL as the source of truth"
)]
struct Cli {
    /// PostgreSQL connection string. Help shows where it comes from, never
    /// its value (it may hold a password).
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true,
          hide_env_values = true)]
    database_url: String,
    /// Most connections this process opens to PostgreSQL.
    #[arg(long, env = "JOBWIRE_POOL_SIZE", default_value_t = 16, global = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    pool_size: u32,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the schema migrations.
    Migrate,
    /// Enqueue one job and print its id.
    Enqueue(EnqueueArgs),
    /// Show one job.
    Status {
        /// Job id.
        #[arg(value_parser = cmd::job_id_arg::job_id)]
        job_id: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a job (queued: at once; running: at its next heartbeat).
    Cancel {
        /// Job id.
        #[arg(value_parser = cmd::job_id_arg::job_id)]
        job_id: Uuid,
        /// Who is cancelling (recorded in job_audit).
        #[arg(long, env = "USER", default_value = "operator")]
        actor: String,
    },
    /// List dead letters (FAILED jobs) grouped by job type and error code.
    DeadLetters {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Replay dead-lettered jobs: one by id, or a group by type and error.
    Replay(ReplayArgs),
    /// Run a worker with the built-in handlers until Ctrl-C / SIGTERM: the
    /// PostgreSQL path, or wake-ups from a broker with --transport.
    ///
    /// The built-in job types: `noop`; `sleep` with `{"ms": N}`; `fail_times`
    /// with `{"times": N}` (fails its first N attempts, then succeeds);
    /// `always_fail`; `fail_fatal`; `panic`; `record_run` (for `jobwire
    /// faults`, which creates the table it writes to).
    Worker(WorkerArgs),
    /// Everything in one process until Ctrl-C / SIGTERM: relay (for a broker
    /// transport), worker, sweeper, reconciler; an empty database gets the
    /// schema first. Default transport: memory (in-process).
    Run(RunArgs),
    /// Migrate, enqueue a realistic mix of jobs, run them, report each one's fate.
    Demo(demo::DemoArgs),
    /// Recurring schedules: put, list, show, pause, resume, rm.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Serve the HTTP API until Ctrl-C / SIGTERM (loopback by default).
    Serve(ServeArgs),
    /// The HTTP API's bearer tokens: create, list, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Per-queue limits for each tenant: running jobs, waiting jobs,
    /// enqueue rate.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Queues: list them, pause and resume claims, and their enqueue limits
    /// (most waiting jobs, shedding low priority).
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Drain the outbox (`job_outbox`) into a broker until Ctrl-C / SIGTERM.
    Relay(RelayArgs),
    /// The outbox's dead letters: list them, move them back.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Run the same workload through each path and report them side by side.
    Bench(BenchArgs),
    /// Many schedules due at one instant, fired by concurrent schedulers:
    /// occurrences enqueued per second, and how jitter spreads their starts.
    BenchSchedules(BenchSchedulesArgs),
    /// POST /jobs against the library's single-job enqueue at the same
    /// concurrency: jobs per second and latency of each.
    BenchHttp(BenchHttpArgs),
    /// The fault suite: jobs on every path through kills, broker and
    /// PostgreSQL restarts, pauses and garbage, then checks on the table.
    /// Restarts shared services: run it on its own.
    Faults(faults::FaultArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    match main_result().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", failure::report(&err));
            ExitCode::from(failure::exit_status(&err))
        }
    }
}

async fn main_result() -> Result<()> {
    let cli = parse_command_line();
    let default_filter = match cli.command {
        Command::Worker(_)
        | Command::Relay(_)
        | Command::Run(_)
        | Command::Serve(_)
        | Command::Bench(_)
        | Command::BenchSchedules(_)
        | Command::BenchHttp(_)
        // lapin logs each failed RabbitMQ connection as an ERROR of its
        // own, and librdkafka each failed Kafka connection, twice, tens of
        // times a second, beside jobwire's line that names the broker and
        // what it does next (RUST_LOG=info,lapin=debug,rdkafka=debug,
        // librdkafka=debug brings them back).
        | Command::Faults(_) => "info,lapin=off,rdkafka=off,librdkafka=off",
        _ => "warn,lapin=off,rdkafka=off,librdkafka=off",
    };
    let telemetry = telemetry::init(default_filter)?;
    let result = dispatch(cli).await;
    telemetry.shutdown();
    // A command that failed says so first; one that did not fails if its
    // output was lost.
    result.and_then(|()| output::finish())
}

/// The command line, parsed. A negative number is a value to every
/// argument (`--lease-ms -5`), so that the argument's own parser refuses it
/// in its words; clap alone took `-5` for a flag nobody defined.
fn parse_command_line() -> Cli {
    let mut matches = negative_numbers_are_values(Cli::command()).get_matches();
    Cli::from_arg_matches_mut(&mut matches)
        .unwrap_or_else(|err| err.format(&mut Cli::command()).exit())
}

fn negative_numbers_are_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            if arg.get_action().takes_values() {
                arg.allow_negative_numbers(true)
            } else {
                arg
            }
        })
        .mut_subcommands(negative_numbers_are_values)
}

async fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(&cli.database_url, args).await,
        Command::Faults(args) => faults::run(&cli.database_url, args).await,
        command => {
            // Long-running processes wait for a database that is restarting;
            // one-shot commands say at once that it cannot be reached.
            let long_running = matches!(
                command,
                Command::Worker(_) | Command::Run(_) | Command::Relay(_) | Command::Serve(_)
            );
            // One connection of a long-running process listens for
            // wake-ups for as long as it runs: with one in all, its claims
            // and completions waited for the pool's timeout each time.
            if long_running && cli.pool_size < MIN_SERVING_POOL_SIZE {
                bail!(
                    "--pool-size {} is too small for {}: one connection listens for wake-ups for as long as it runs, so it needs at least {MIN_SERVING_POOL_SIZE}",
                    cli.pool_size,
                    application_name(&command)
                );
            }
            let wait = long_running.then_some(database::STARTUP_WAIT);
            let pool = database::connect(
                &cli.database_url,
                cli.pool_size,
                wait,
                application_name(&command),
            )
            .await?;
            run(command, pool)
                .await
                .map_err(database::explain)
                .map_err(failure::in_flag_terms)
        }
    }
}

/// How the process's database sessions name themselves in
/// `pg_stat_activity`, so that an operator can tell a worker's sessions from
/// a relay's or an API server's (a URL or `PGAPPNAME` that names one wins).
fn application_name(command: &Command) -> &'static str {
    match command {
        Command::Worker(_) => "jobwire worker",
        Command::Run(_) => "jobwire run",
        Command::Relay(_) => "jobwire relay",
        Command::Serve(_) => "jobwire serve",
        Command::Bench(_) | Command::BenchHttp(_) | Command::BenchSchedules(_) => "jobwire bench",
        _ => "jobwire",
    }
}

async fn run(command: Command, pool: PgPool) -> Result<()> {
    match command {
        Command::Migrate => cmd::migrate::migrate(&pool).await?,
        Command::Enqueue(args) => cmd::enqueue::enqueue(&pool, args).await?,
        Command::Status { job_id, json } => cmd::status::status(&pool, job_id, json).await?,
        Command::Cancel { job_id, actor } => cmd::cancel::cancel(&pool, job_id, &actor).await?,
        Command::DeadLetters { json } => cmd::dead_letters::dead_letters(&pool, json).await?,
        Command::Replay(args) => cmd::replay::replay(&pool, args).await?,
        Command::Worker(args) => cmd::worker::serve(pool, args, None).await?,
        Command::Run(args) => cmd::worker::run(pool, args).await?,
        Command::Relay(args) => cmd::relay::relay(pool, args).await?,
        Command::Serve(args) => cmd::serve::serve(pool, args).await?,
        Command::Schedule(command) => cmd::schedule::schedule(&pool, command).await?,
        Command::Token(command) => cmd::token::token(&pool, command).await?,
        Command::Tenant(command) => cmd::tenant::tenant(&pool, command).await?,
        Command::Queue(command) => cmd::queue::queue(&pool, command).await?,
        Command::Outbox(command) => cmd::outbox::outbox(&pool, command).await?,
        Command::Bench(args) => cmd::bench::bench(pool, args).await?,
        Command::BenchSchedules(args) => cmd::bench_schedules::bench_schedules(pool, args).await?,
        Command::BenchHttp(args) => cmd::bench_http::bench_http(pool, args).await?,
        Command::Demo(_) | Command::Faults(_) => unreachable!("handled before connecting"),
    }
    Ok(())
}
