//! `jobwire`: operate a jobwire database from the command line.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, TimeDelta, Utc};
use clap::{Parser, Subcommand};
use jobwire_consumer::maintenance::{ReconcilerConfig, RetentionConfig, SweeperConfig};
use jobwire_consumer::{
    HandlerOptions, HandlerRegistry, QueueConfig, RuntimeConfig, Worker, WorkerConfig,
};
use jobwire_core::{Backoff, JobStatus, NewJob, ReplayFilter};
use jobwire_transport::SubscribeOptions;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod brokers;
mod demo;

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
    /// PostgreSQL connection string.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true)]
    database_url: String,
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
        job_id: Uuid,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a job (queued: at once; running: at its next heartbeat).
    Cancel {
        /// Job id.
        job_id: Uuid,
    },
    /// List dead letters (FAILED jobs) grouped by job type and error code.
    DeadLetters,
    /// Replay dead-lettered jobs: one by id, or a group by type and error.
    Replay(ReplayArgs),
    /// Run a worker with the built-in handlers until Ctrl-C / SIGTERM: the
    /// PostgreSQL path, or wake-ups from a broker with --transport.
    Worker(WorkerArgs),
    /// Everything in one process until Ctrl-C / SIGTERM: migrate, relay (for
    /// a broker transport), worker, sweeper, reconciler. Default transport:
    /// memory (in-process).
    Run(WorkerArgs),
    /// Migrate, enqueue a realistic mix of jobs, run them, report each one's fate.
    Demo(demo::DemoArgs),
    /// Drain the outbox (`job_outbox`) into a broker until Ctrl-C / SIGTERM.
    Relay(RelayArgs),
    /// Run the same workload through each path and report them side by side.
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Paths to measure, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "postgres,memory,rabbitmq,sqs,kafka"
    )]
    paths: Vec<brokers::BrokerKind>,
    /// Jobs per run.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Jobs per run on SQS (the local emulator slows down as queues fill).
    #[arg(long, default_value_t = 1_000)]
    sqs_jobs: usize,
    /// Worker slots.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// The worker's claim linger in milliseconds, while a backlog lasts
    /// (default: the worker's own default).
    #[arg(long)]
    claim_linger_ms: Option<u64>,
    /// Concurrent producers in the end-to-end run.
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Filler bytes per job payload.
    #[arg(long, default_value_t = 100)]
    payload_bytes: usize,
    /// Open-loop arrival rate (jobs/s) of the latency run.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Arrival rate on SQS, for the latency and outbox-lag runs (the local
    /// emulator takes a few hundred messages a second).
    #[arg(long, default_value_t = 100)]
    sqs_rate: u32,
    /// Seconds the latency run and the urgent stream last.
    #[arg(long, default_value_t = 10)]
    rate_seconds: u64,
    /// Bulk jobs queued before the urgent stream starts.
    #[arg(long, default_value_t = 100_000)]
    burst_jobs: usize,
    /// Bulk jobs on SQS (the local emulator publishes a few hundred per second).
    #[arg(long, default_value_t = 10_000)]
    sqs_burst_jobs: usize,
    /// Urgent jobs per second during the burst run.
    #[arg(long, default_value_t = 50)]
    urgent_rate: u32,
    /// Jobs (and business rows) per transaction in the batched end-to-end run.
    #[arg(long, default_value_t = 100)]
    enqueue_batch: usize,
    /// Outbox rows in the relay-alone run (SQS: --sqs-jobs).
    #[arg(long, default_value_t = 100_000)]
    relay_rows: usize,
    /// Outbox rows per relay pass.
    #[arg(long, default_value_t = 1000)]
    relay_batch_size: usize,
    /// Relay drain tasks.
    #[arg(long, default_value_t = 2)]
    relay_concurrency: usize,
    /// Outbox rows per second in the outbox-lag run.
    #[arg(long, default_value_t = 1000)]
    lag_rate: u32,
    /// Leave each run's jobs in the jobs table (by default they are deleted
    /// once measured and the tables vacuumed, so every run starts alike).
    #[arg(long)]
    keep_jobs: bool,
    /// Give up on any one run after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also draw throughput and latency per path as an SVG chart in this file.
    #[arg(long)]
    chart: Option<std::path::PathBuf>,
    #[command(flatten)]
    broker: brokers::BrokerArgs,
}

#[derive(clap::Args)]
struct RelayArgs {
    #[command(flatten)]
    broker: brokers::BrokerArgs,
    /// Most rows per pass (one transaction, one publish call).
    #[arg(long, default_value_t = 500)]
    batch_size: usize,
    /// Parallel drain tasks (unordered mode).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Publish rows of one message key in id order, with keys hashed into
    /// this many shards (each drained by one relay at a time).
    #[arg(long)]
    ordered_shards: Option<u32>,
    /// Attempts before a row that keeps failing is moved to job_outbox_dead.
    #[arg(long, default_value_t = 10)]
    max_attempts: i32,
    /// Prefix added to every outbox topic to form the broker destination.
    #[arg(long, default_value = "")]
    topic_prefix: String,
    /// Explicit mapping TOPIC=DESTINATION (repeatable).
    #[arg(long = "map-topic")]
    topic_map: Vec<String>,
    /// Poll interval in milliseconds when no NOTIFY arrives.
    #[arg(long, default_value_t = 1000)]
    poll_ms: u64,
    /// Drain only these outbox topics (a dedicated lane, e.g. for urgent
    /// queues: run another relay with --except-topics beside it).
    #[arg(long, value_delimiter = ',', conflicts_with = "except_topics")]
    only_topics: Vec<String>,
    /// Drain every outbox topic except these.
    #[arg(long, value_delimiter = ',')]
    except_topics: Vec<String>,
}

#[derive(clap::Args)]
struct EnqueueArgs {
    /// Job type (the handler that runs it).
    job_type: String,
    /// Payload as JSON.
    #[arg(long, default_value = "{}")]
    payload: String,
    /// Queue.
    #[arg(long, default_value = NewJob::DEFAULT_QUEUE)]
    queue: String,
    /// Priority; lower runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i16,
    /// Attempts before the job is dead-lettered.
    #[arg(long, default_value_t = NewJob::DEFAULT_MAX_ATTEMPTS)]
    max_attempts: i32,
    /// Run no earlier than this many milliseconds from now.
    #[arg(long, allow_negative_numbers = true, conflicts_with = "run_at")]
    delay_ms: Option<i64>,
    /// Run no earlier than this RFC 3339 time.
    #[arg(long)]
    run_at: Option<DateTime<Utc>>,
    /// Idempotency key: enqueueing the same (type, key) again returns the first job.
    #[arg(long)]
    dedup_key: Option<String>,
    /// Print JSON instead of the bare id.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct ReplayArgs {
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

#[derive(clap::Args)]
struct WorkerArgs {
    /// Queue to serve as NAME or NAME=CONCURRENCY; repeat for several.
    #[arg(long = "queue", default_value = "default=16")]
    queues: Vec<String>,
    /// Lease length in milliseconds (heartbeats every third of it).
    #[arg(long, default_value_t = 30_000)]
    lease_ms: u64,
    /// Retry backoff base in milliseconds for the built-in handlers.
    #[arg(long, default_value_t = 5_000)]
    backoff_base_ms: u64,
    /// Retry backoff cap in milliseconds for the built-in handlers.
    #[arg(long, default_value_t = 900_000)]
    backoff_max_ms: u64,
    /// Seconds to let running jobs finish on shutdown before cancelling them.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout_s: u64,
    /// Lease owner id (default: unique per process).
    #[arg(long)]
    worker_id: Option<String>,
    /// Do not run the lease sweeper in this process.
    #[arg(long)]
    no_sweeper: bool,
    /// Sweeper interval in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    sweep_interval_ms: u64,
    /// Do not run the wake-up reconciler in this process.
    #[arg(long)]
    no_reconciler: bool,
    /// Seconds a due job of a broker queue may wait for its wake-up before
    /// the reconciler re-wakes it.
    #[arg(long, default_value_t = 60)]
    reconcile_grace_s: u64,
    /// Milliseconds between reconciler passes.
    #[arg(long, default_value_t = 10_000)]
    reconcile_interval_ms: u64,
    /// Consumer group (Kafka) for broker-dispatched queues.
    #[arg(long, default_value = "jobwire-workers")]
    consumer_group: String,
    #[command(flatten)]
    broker: brokers::BrokerArgs,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Worker(_) | Command::Relay(_) | Command::Run(_) | Command::Bench(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();

    match cli.command {
        Command::Demo(args) => demo::run(&cli.database_url, args).await,
        command => {
            let pool = connect(&cli.database_url).await?;
            run(command, pool).await
        }
    }
}

async fn connect(url: &str) -> Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {}", redact(url)))
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

async fn run(command: Command, pool: PgPool) -> Result<()> {
    match command {
        Command::Migrate => {
            jobwire_core::migrate(&pool).await?;
            println!("schema is up to date");
        }
        Command::Enqueue(args) => enqueue(&pool, args).await?,
        Command::Status { job_id, json } => {
            let status = jobwire_core::job_status(&pool, job_id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print_status(&status);
            }
        }
        Command::Cancel { job_id } => {
            let outcome = jobwire_core::request_cancel(&pool, job_id).await?;
            println!(
                "{job_id}: {}",
                serde_json::to_value(outcome)?.as_str().unwrap_or("?")
            );
        }
        Command::DeadLetters => {
            let groups = jobwire_core::dead_letter_groups(&pool).await?;
            if groups.is_empty() {
                println!("no dead letters");
            }
            for group in groups {
                println!(
                    "{:>7}  {:<24} {:<24} last failed {}",
                    group.jobs,
                    group.job_type,
                    group.last_error_code.as_deref().unwrap_or("-"),
                    group
                        .last_failed_at
                        .map(|at| at.to_rfc3339())
                        .unwrap_or_default()
                );
            }
        }
        Command::Replay(args) => replay(&pool, args).await?,
        Command::Worker(args) => serve(pool, args, false).await?,
        Command::Run(args) => serve(pool, args, true).await?,
        Command::Relay(args) => relay(pool, args).await?,
        Command::Bench(args) => bench(pool, args).await?,
        Command::Demo(_) => unreachable!("handled before connecting"),
    }
    Ok(())
}

async fn enqueue(pool: &PgPool, args: EnqueueArgs) -> Result<()> {
    let payload: serde_json::Value = serde_json::from_str(&args.payload)
        .with_context(|| format!("--payload is not valid JSON: {}", args.payload))?;
    let mut job = NewJob::new(args.job_type, payload)
        .with_queue(args.queue)
        .with_priority(args.priority)
        .with_max_attempts(args.max_attempts);
    if let Some(delay) = args.delay_ms {
        job = job.with_delay(TimeDelta::milliseconds(delay));
    }
    if let Some(at) = args.run_at {
        job = job.with_run_at(at);
    }
    if let Some(key) = args.dedup_key {
        job = job.with_dedup_key(key);
    }
    let enqueued = jobwire_core::enqueue(pool, &job).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&enqueued)?);
    } else {
        println!("{}", enqueued.job_id);
        if enqueued.duplicate {
            eprintln!("duplicate: a job with this dedup key already exists");
        }
    }
    Ok(())
}

async fn replay(pool: &PgPool, args: ReplayArgs) -> Result<()> {
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

async fn relay(pool: PgPool, args: RelayArgs) -> Result<()> {
    jobwire_core::migrate(&pool).await?;
    let mut topics = jobwire_relay::TopicMap {
        prefix: args.topic_prefix,
        ..jobwire_relay::TopicMap::default()
    };
    for mapping in &args.topic_map {
        let Some((from, to)) = mapping.split_once('=') else {
            bail!("--map-topic takes TOPIC=DESTINATION, got {mapping:?}");
        };
        topics.overrides.insert(from.to_owned(), to.to_owned());
    }
    let config = jobwire_relay::RelayConfig {
        batch_size: args.batch_size,
        concurrency: args.concurrency,
        poll_interval: Duration::from_millis(args.poll_ms),
        max_attempts: args.max_attempts,
        topics,
        ordering: match args.ordered_shards {
            Some(shards) => jobwire_relay::KeyOrdering::PerKey { shards },
            None => jobwire_relay::KeyOrdering::Unordered,
        },
        lane: match (args.only_topics, args.except_topics) {
            (only, _) if !only.is_empty() => jobwire_relay::TopicLane::Only(only),
            (_, except) if !except.is_empty() => jobwire_relay::TopicLane::Except(except),
            _ => jobwire_relay::TopicLane::All,
        },
        ..jobwire_relay::RelayConfig::default()
    };
    config.validate()?;
    let transport = args.broker.shared_transport().await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let report = jobwire_relay::Relay::new(pool, transport.clone(), config)
        .run(shutdown)
        .await?;
    transport.close().await?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

fn pick<T>(on_sqs: bool, sqs_value: T, value: T) -> T {
    if on_sqs { sqs_value } else { value }
}

async fn bench(pool: PgPool, args: BenchArgs) -> Result<()> {
    jobwire_core::migrate(&pool).await?;
    let mut paths = Vec::new();
    for kind in &args.paths {
        // The SQS emulator is far slower than the other brokers: its runs
        // are scaled down (and labelled so in the report).
        let on_sqs = *kind == brokers::BrokerKind::Sqs;
        paths.push(jobwire_bench::PathUnderTest {
            name: format!("{kind:?}").to_lowercase(),
            transport: args.broker.transport(*kind).await?,
            jobs: pick(on_sqs, args.sqs_jobs, args.jobs),
            relay_rows: pick(on_sqs, args.sqs_jobs, args.relay_rows),
            burst_jobs: pick(on_sqs, args.sqs_burst_jobs, args.burst_jobs),
            rate: pick(on_sqs, args.sqs_rate, args.rate),
            lag_rate: pick(on_sqs, args.sqs_rate, args.lag_rate),
        });
    }
    let config = jobwire_bench::BenchConfig {
        workers: args.workers,
        claim_linger: args.claim_linger_ms.map_or(
            jobwire_consumer::WorkerConfig::default().claim_linger,
            Duration::from_millis,
        ),
        producers: args.producers,
        payload_bytes: args.payload_bytes,
        rate_duration: Duration::from_secs(args.rate_seconds),
        urgent_rate: args.urgent_rate,
        enqueue_batch: args.enqueue_batch,
        relay_batch_size: args.relay_batch_size,
        relay_concurrency: args.relay_concurrency,
        timeout: Duration::from_secs(args.timeout_seconds),
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        keep_jobs: args.keep_jobs,
    };
    let environment = jobwire_bench::environment(&pool).await?;
    // Written after every path, so a long run keeps what it measured.
    let write_files = |reports: &[jobwire_bench::PathReport]| -> Result<()> {
        if let Some(file) = &args.json {
            let json = serde_json::json!({
                "environment": environment,
                "workers": config.workers,
                "producers": config.producers,
                "payload_bytes": config.payload_bytes,
                "rate_seconds": config.rate_duration.as_secs(),
                "urgent_rate": config.urgent_rate,
                "enqueue_batch": config.enqueue_batch,
                "relay_batch_size": config.relay_batch_size,
                "relay_concurrency": config.relay_concurrency,
                "results": reports,
            });
            std::fs::write(file, serde_json::to_string_pretty(&json)?)
                .with_context(|| format!("cannot write {}", file.display()))?;
        }
        if let Some(file) = &args.chart {
            std::fs::write(file, jobwire_bench::chart_svg(&environment, reports)?)
                .with_context(|| format!("cannot write {}", file.display()))?;
        }
        Ok(())
    };
    let (reports, failures) = jobwire_bench::run(&pool, &paths, &config, |so_far| {
        if let Err(err) = write_files(so_far) {
            tracing::error!(error = %format!("{err:#}"), "bench: cannot write the results");
        }
    })
    .await;
    print!("{}", jobwire_bench::table(&environment, &reports));
    write_files(&reports)?;
    for path in &paths {
        if let Some(transport) = &path.transport {
            transport.close().await?;
        }
    }
    for (path, err) in &failures {
        eprintln!("bench: {path} failed: {err:#}");
    }
    let bad: usize = reports.iter().map(|r| r.lost_or_repeated()).sum();
    if bad > 0 {
        bail!("{bad} jobs were lost or ran more than once");
    }
    if !failures.is_empty() {
        bail!("{} of {} paths failed", failures.len(), paths.len());
    }
    Ok(())
}

fn parse_queue(spec: &str) -> Result<QueueConfig> {
    match spec.split_once('=') {
        None => Ok(QueueConfig::new(spec, 16)),
        Some((name, concurrency)) => Ok(QueueConfig::new(
            name,
            concurrency
                .parse()
                .with_context(|| format!("bad concurrency in --queue {spec}"))?,
        )),
    }
}

/// `jobwire worker` (`with_relay = false`) and `jobwire run` (`true`).
async fn serve(pool: PgPool, args: WorkerArgs, with_relay: bool) -> Result<()> {
    jobwire_core::migrate(&pool).await?;
    let default_kind = if with_relay {
        brokers::BrokerKind::Memory
    } else {
        brokers::BrokerKind::Postgres
    };
    let kind = args.broker.kind_or(default_kind);
    if kind == brokers::BrokerKind::Memory && !with_relay {
        bail!(
            "--transport memory only works with the relay in the same process: use `jobwire run`"
        );
    }
    let queues: Vec<QueueConfig> = args
        .queues
        .iter()
        .map(|spec| parse_queue(spec))
        .collect::<Result<_>>()?;
    let names: Vec<String> = queues.iter().map(|queue| queue.name.clone()).collect();
    if kind != brokers::BrokerKind::Postgres {
        brokers::declare_dispatch(&pool, kind, &names).await?;
    }
    let transport = args.broker.transport(kind).await?;

    let mut registry = HandlerRegistry::new();
    jobwire_consumer::builtin::register_builtin_handlers(
        &mut registry,
        HandlerOptions {
            backoff: Backoff {
                base: Duration::from_millis(args.backoff_base_ms),
                max: Duration::from_millis(args.backoff_max_ms),
                ..Backoff::default()
            },
            ..HandlerOptions::default()
        },
    );
    let config = WorkerConfig {
        runtime: RuntimeConfig {
            worker_id: args
                .worker_id
                .unwrap_or_else(jobwire_consumer::default_worker_id),
            lease: Duration::from_millis(args.lease_ms),
            ..RuntimeConfig::default()
        },
        queues,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_s),
        sweeper: (!args.no_sweeper).then(|| SweeperConfig {
            interval: Duration::from_millis(args.sweep_interval_ms),
            ..SweeperConfig::default()
        }),
        retention: Some(RetentionConfig::default()),
        reconciler: (!args.no_reconciler).then(|| ReconcilerConfig {
            grace: Duration::from_secs(args.reconcile_grace_s),
            interval: Duration::from_millis(args.reconcile_interval_ms),
            ..ReconcilerConfig::default()
        }),
        subscribe: SubscribeOptions {
            group: args.consumer_group,
            ..SubscribeOptions::default()
        },
        ..WorkerConfig::default()
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let mut worker = Worker::new(pool.clone(), registry, config);
    let mut relay = None;
    if let Some(transport) = &transport {
        worker = worker.with_transport(transport.clone());
        if with_relay {
            relay = Some(tokio::spawn(
                jobwire_relay::Relay::new(
                    pool.clone(),
                    transport.clone(),
                    jobwire_relay::RelayConfig::default(),
                )
                .run(shutdown.clone()),
            ));
        }
    }
    let report = worker.run(shutdown).await?;
    if let Some(relay) = relay {
        let relayed = relay.await??;
        println!("{}", serde_json::to_string(&relayed)?);
    }
    if let Some(transport) = transport {
        transport.close().await?;
    }
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Cancel `shutdown` on Ctrl-C or SIGTERM.
pub(crate) async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown signal received");
    shutdown.cancel();
}

fn print_status(status: &JobStatus) {
    let time =
        |at: Option<DateTime<Utc>>| at.map(|at| at.to_rfc3339()).unwrap_or_else(|| "-".into());
    println!("job        {}", status.job_id);
    println!(
        "type       {} (queue {}, priority {})",
        status.job_type, status.queue, status.priority
    );
    println!(
        "state      {}{}",
        status.state,
        if status.archived { " (archived)" } else { "" }
    );
    println!(
        "attempts   {} of {}",
        status.attempt_count, status.max_attempts
    );
    if status.state.is_claimable() {
        println!("next run   {}", status.run_after.to_rfc3339());
    }
    if let Some(owner) = &status.lease_owner {
        println!(
            "lease      {owner}, generation {}, expires {}",
            status.lease_generation,
            time(status.lease_expires_at)
        );
        println!("heartbeat  {}", time(status.heartbeat_at));
    }
    if let Some(code) = &status.last_error_code {
        println!(
            "last error {code}: {}",
            status.last_error.as_deref().unwrap_or("")
        );
    }
    println!("created    {}", status.created_at.to_rfc3339());
    println!("finished   {}", time(status.finished_at));
    println!("payload    {}", status.payload);
}
