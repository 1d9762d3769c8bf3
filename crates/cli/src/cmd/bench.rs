//! `jobwire bench`: its arguments and running the workload through each path.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use sqlx::PgPool;

use crate::brokers;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
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
    /// Jobs of the drain run only (default: --jobs). A drain of 10,000 jobs
    /// lasts about a second, where the worker's start weighs; this makes it
    /// longer without lengthening the end-to-end runs. Not on SQS, whose
    /// runs all use --sqs-jobs.
    #[arg(long)]
    drain_jobs: Option<usize>,
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
    /// How long the worker's completer waits for more outcomes while other
    /// jobs' outcomes are still to come, in milliseconds (default: the
    /// worker's own default; 0 writes at once).
    #[arg(long)]
    completion_linger_ms: Option<u64>,
    /// PostgreSQL path: most jobs claimed beyond the worker slots, held in
    /// the worker's local queue (default: the worker's own default; 0 off).
    #[arg(long)]
    claim_ahead: Option<usize>,
    /// Concurrent producers in the end-to-end run.
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Single-job end-to-end runs per path: the report gives their median
    /// and range.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    e2e_runs: u64,
    /// The noisy tenant's backlog: when above 0, each path also runs the
    /// noisy-tenant workload twice (tenant cap off, then on).
    #[arg(long, default_value_t = 0)]
    noisy_jobs: usize,
    /// Jobs per second of each of the ten quiet tenants in the noisy-tenant run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    quiet_tenant_rate: u32,
    /// The running-jobs cap per tenant in the "caps on" noisy-tenant run
    /// (default: three quarters of --workers).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    noisy_tenant_cap: Option<u32>,
    /// How long each job of the noisy-tenant runs works, in milliseconds:
    /// its handler waits that long, holding its slot (0: no-op jobs, as in
    /// every other run).
    #[arg(long, default_value_t = 0)]
    noisy_job_ms: u64,
    /// Seconds of the plain commit-rate probe (pgbench with as many clients
    /// as producers) before the single-job runs; 0 skips it.
    #[arg(long, default_value_t = 5)]
    commit_probe_seconds: u64,
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
    /// Jobs (and business rows) per transaction in the batched end-to-end
    /// run (at least 2: one is the single-job run).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..))]
    enqueue_batch: u64,
    /// Outbox rows in the relay-alone run (SQS: --sqs-jobs).
    #[arg(long, default_value_t = 100_000)]
    relay_rows: usize,
    /// Outbox rows per relay pass (the relay's own default, as `jobwire
    /// run` and `jobwire relay` run it).
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().batch_size)]
    relay_batch_size: usize,
    /// Relay drain tasks (the relay's own default).
    #[arg(long, default_value_t = jobwire_relay::RelayConfig::default().concurrency)]
    relay_concurrency: usize,
    /// Outbox rows per second in the outbox-lag run.
    #[arg(long, default_value_t = 1000)]
    lag_rate: u32,
    /// On the Kafka path, delete the records of each run's topics below its
    /// consumer group's committed offsets this often (0: never). The test
    /// broker's fetch slows as its log grows, which Kafka's does not; see
    /// docs/benchmarks.md.
    #[arg(long, default_value_t = 250)]
    kafka_trim_ms: u64,
    /// Leave each run's jobs in the jobs table (by default they are deleted
    /// once measured and the tables vacuumed, so every run starts alike).
    #[arg(long)]
    keep_jobs: bool,
    /// Record Prometheus metrics as `jobwire run --listen` does (recorder
    /// and database collector on), to measure what they cost.
    #[arg(long)]
    metrics: bool,
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

fn pick<T>(on_sqs: bool, sqs_value: T, value: T) -> T {
    if on_sqs { sqs_value } else { value }
}

pub(crate) async fn bench(pool: PgPool, args: BenchArgs) -> Result<()> {
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
            drain_jobs: pick(on_sqs, args.sqs_jobs, args.drain_jobs.unwrap_or(args.jobs)),
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
        completion_linger: args.completion_linger_ms.map_or(
            jobwire_consumer::RuntimeConfig::default().completion_linger,
            Duration::from_millis,
        ),
        claim_ahead: args
            .claim_ahead
            .unwrap_or(jobwire_consumer::WorkerConfig::default().claim_ahead),
        producers: args.producers,
        end_to_end_runs: args.e2e_runs as usize,
        commit_probe: Duration::from_secs(args.commit_probe_seconds),
        noisy_jobs: args.noisy_jobs,
        quiet_tenant_rate: args.quiet_tenant_rate,
        noisy_tenant_cap: args.noisy_tenant_cap.unwrap_or_else(|| {
            u32::try_from(args.workers * 3 / 4)
                .unwrap_or(u32::MAX)
                .max(1)
        }),
        noisy_job_work: Duration::from_millis(args.noisy_job_ms),
        payload_bytes: args.payload_bytes,
        rate_duration: Duration::from_secs(args.rate_seconds),
        urgent_rate: args.urgent_rate,
        enqueue_batch: usize::try_from(args.enqueue_batch).unwrap_or(usize::MAX),
        relay_batch_size: args.relay_batch_size,
        relay_concurrency: args.relay_concurrency,
        timeout: Duration::from_secs(args.timeout_seconds),
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        keep_jobs: args.keep_jobs,
        metrics: args.metrics,
        kafka_trim: (args.kafka_trim_ms > 0).then(|| Duration::from_millis(args.kafka_trim_ms)),
    };
    if args.metrics {
        jobwire_server::metrics::Metrics::install()?;
    }
    let mut environment = jobwire_bench::environment(&pool).await?;
    environment.metrics = args.metrics;
    environment.relay_batch_size = config.relay_batch_size;
    environment.relay_concurrency = config.relay_concurrency;
    if args.paths.contains(&brokers::BrokerKind::Kafka) {
        environment.kafka_trim_ms = Some(args.kafka_trim_ms);
    }
    // Written after every path, so a long run keeps what it measured.
    let write_files = |reports: &[jobwire_bench::PathReport]| -> Result<()> {
        if let Some(file) = &args.json {
            let json = serde_json::json!({
                "environment": environment,
                "workers": config.workers,
                "producers": config.producers,
                "e2e_runs": config.end_to_end_runs,
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
    out!("{}", jobwire_bench::table(&environment, &reports));
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
